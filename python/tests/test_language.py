"""Language-model data: flat token files (nanoGPT's train.bin) cut into strided or random windows,
inputs and targets split, every token checked against the file."""

import struct

import numpy as np
import pytest
import torch

import ferry


def token_file(path, count, dtype=np.uint16, seed=0):
    tokens = np.random.default_rng(seed).integers(0, np.iinfo(dtype).max, count, dtype=dtype, endpoint=True)
    tokens.tofile(path)
    return tokens


def token_config(path, **keys):
    return {"source": {"kind": "tokens", "path": str(path), **keys}, "batch_size": keys.pop("batch_size", 8)}


def windows_of(batch, first_tokens, seq_len, data):
    """The windows `batch` should hold, from the file's tokens, one per first token."""
    return torch.from_numpy(np.stack([data[s:s + seq_len + 1].astype(np.int64) for s in first_tokens]))


def first_tokens(batch, itemsize):
    return [int(key.rsplit(":", 1)[1]) // itemsize for key in batch.sample_keys]


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.int32])
def test_every_strided_window_is_the_files_tokens_as_int64(tmp_path, dtype):
    data = token_file(tmp_path / "train.bin", 5000 + 37, dtype)
    seq_len = 61
    config = token_config(tmp_path / "train.bin", dtype=np.dtype(dtype).name, seq_len=seq_len)
    seen = []
    with ferry.Pipeline(config, overrides={"sampler.shuffle": True, "decode.threads": 3}) as pipeline:
        for batch in pipeline:
            tokens = batch["tokens"].cpu()
            assert tokens.dtype == torch.int64 and tokens.shape[1] == seq_len + 1
            starts = first_tokens(batch, np.dtype(dtype).itemsize)
            assert torch.equal(tokens, windows_of(batch, starts, seq_len, data))
            seen += starts
    assert sorted(seen) == [i * seq_len for i in range((len(data) - 1) // seq_len)]


def test_split_gives_inputs_and_targets_shifted_by_one_each_contiguous(tmp_path):
    data = token_file(tmp_path / "train.bin", 20000)
    for windows in ["strided", "random"]:
        config = token_config(tmp_path / "train.bin", seq_len=128, split=["x", "y"], windows=windows)
        with ferry.Pipeline(config, overrides={"sampler.shuffle": True}) as pipeline:
            for batch in pipeline:
                x, y = batch["x"].cpu(), batch["y"].cpu()
                assert set(batch.keys()) == {"x", "y"} and x.shape == y.shape and x.shape[1] == 128
                assert x.dtype == y.dtype == torch.int64 and x.is_contiguous() and y.is_contiguous()
                assert torch.equal(x[:, 1:], y[:, :-1])
                if windows == "strided":
                    expected = windows_of(batch, first_tokens(batch, 2), 128, data)
                    assert torch.equal(x, expected[:, :-1]) and torch.equal(y, expected[:, 1:])


def test_random_windows_are_nanogpts_draw_seeded_reproducible_and_resumable(tmp_path):
    data = token_file(tmp_path / "train.bin", 3000, seed=4)
    config = token_config(tmp_path / "train.bin", seq_len=32, windows="random", samples=200)
    config["sampler"] = {"seed": 9, "epochs": 2}

    def run(pipeline, count=None):
        out = []
        for batch in pipeline.batches():
            out.append(batch["tokens"].cpu().clone())
            if count is not None and len(out) == count:
                break
        return out

    with ferry.Pipeline(config) as pipeline:
        everything = run(pipeline)
    with ferry.Pipeline(config, overrides={"decode.threads": 1}) as pipeline:
        assert all(torch.equal(a, b) for a, b in zip(run(pipeline), everything))
    assert len(everything) == 2 * 25
    # Every window is some stretch of the file, the epochs draw different ones.
    starts = set()
    view = np.lib.stride_tricks.sliding_window_view(data.astype(np.int64), 33)
    for batch in everything:
        for row in batch.numpy():
            matches = np.flatnonzero((view == row).all(axis=1))
            assert len(matches) >= 1
            starts.add(int(matches[0]))
    assert len(starts) > 300
    assert not torch.equal(torch.cat(everything[:25]), torch.cat(everything[25:]))
    # Resumed mid-run: the same windows as the run that went on.
    with ferry.Pipeline(config) as first:
        head = run(first, 30)
        state = first.state_dict()
    with ferry.Pipeline(config, state=state) as resumed:
        tail = run(resumed)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, everything)) and len(head + tail) == len(everything)
    # Another seed, other windows.
    with ferry.Pipeline(config, overrides={"sampler.seed": 10}) as other:
        assert not torch.equal(run(other, 1)[0], everything[0])


def test_a_file_that_is_not_a_whole_number_of_tokens_is_a_config_error_at_its_key(tmp_path):
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02\x00\x03")
    (tmp_path / "run.yaml").write_text(f"source:\n  kind: tokens\n  path: {tmp_path / 'odd.bin'}\n  dtype: uint16\n")
    with pytest.raises(ferry.ConfigError, match=r"run.yaml:4:10.*5 bytes, not a whole number of uint16 tokens"):
        ferry.Pipeline(tmp_path / "run.yaml")
    with pytest.raises(ferry.ConfigError, match="no such token file"):
        ferry.Pipeline(token_config(tmp_path / "missing.bin"))
    with pytest.raises(ferry.ConfigError, match="split needs add_extra_token"):
        ferry.Pipeline(token_config(tmp_path / "odd.bin", split=["x", "y"], add_extra_token=False))
    with pytest.raises(ferry.ConfigError, match="samples counts random windows"):
        ferry.Pipeline(token_config(tmp_path / "odd.bin", samples=10))


# ---- packed documents ---------------------------------------------------------------------------------


def write_megatron(prefix, documents):
    """A Megatron-LM indexed dataset (MMIDIDX, uint16) of `documents`, each a list of sequences."""
    sequences = [np.asarray(seq, dtype=np.uint16) for doc in documents for seq in doc]
    np.concatenate(sequences).tofile(f"{prefix}.bin")
    lengths = np.array([len(seq) for seq in sequences], dtype=np.int32)
    pointers = (np.concatenate([[0], np.cumsum(lengths[:-1])]) * 2).astype(np.int64)
    indices = np.concatenate([[0], np.cumsum([len(doc) for doc in documents])]).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sequences), len(indices)))
        f.write(lengths.tobytes() + pointers.tobytes() + indices.tobytes())


def packed_ids(starts_new_document):
    """document_ids and position_ids of a window, from whether each token starts a document."""
    documents, positions, current, start = [], [], 0, 0
    for at, new in enumerate(starts_new_document):
        if at > 0 and new:
            current, start = current + 1, at
        documents.append(current)
        positions.append(at - start)
    return documents, positions


@pytest.mark.parametrize("kind", ["tokens", "megatron"])
def test_packed_windows_give_each_tokens_document_and_position(tmp_path, kind):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 40, 120)
    lengths[7] = lengths[8] = 0  # empty documents start nothing
    eod = 50256
    documents = [list(rng.integers(0, 50000, n)) + [eod] if n else [] for n in lengths]
    stream = np.array([t for doc in documents for t in doc], dtype=np.uint16)
    starts = np.zeros(len(stream), dtype=bool)
    starts[np.cumsum([len(doc) for doc in documents])[:-1]] = True  # the token after each document's end
    if kind == "tokens":
        stream.tofile(tmp_path / "train.bin")
        source = {"kind": "tokens", "path": str(tmp_path / "train.bin"), "eod_token": eod}
    else:
        # Documents of one and of two sequences: ids follow documents, not sequences.
        write_megatron(tmp_path / "web", [[doc[:len(doc) // 2], doc[len(doc) // 2:]] if i % 3 == 0 else [doc]
                                         for i, doc in enumerate(documents)])
        source = {"kind": "megatron", "prefix": str(tmp_path / "web")}
    seq_len = 37
    source.update(seq_len=seq_len, split=["x", "y"], document_ids=True, position_ids=True, windows="random", samples=90)
    with ferry.Pipeline({"source": source, "batch_size": 9}, overrides={"decode.threads": 3}) as pipeline:
        for batch in pipeline:
            assert set(batch) == {"x", "y", "document_ids", "position_ids"}
            for row, key in enumerate(batch.sample_keys):
                x = batch["x"][row].cpu().numpy()
                first = next(s for s in range(len(stream) - seq_len) if np.array_equal(stream[s:s + seq_len], x))
                want_documents, want_positions = packed_ids(starts[first:first + seq_len])
                assert batch["document_ids"][row].tolist() == want_documents, key
                assert batch["position_ids"][row].tolist() == want_positions, key
                assert batch["document_ids"].dtype == batch["position_ids"].dtype == torch.int64


def test_packed_ids_of_a_token_file_need_its_end_of_document_token(tmp_path):
    token_file(tmp_path / "train.bin", 1000)
    with pytest.raises(ferry.ConfigError, match="give eod_token"):
        ferry.Pipeline(token_config(tmp_path / "train.bin", seq_len=16, position_ids=True))


# ---- weighted mixtures -------------------------------------------------------------------------------


def part_files(tmp_path, sizes, seq_len=4):
    """Token files whose windows say where they come from: part k's tokens are 10^6 k + their number,
    so a window's first token names its part and its strided window number."""
    paths = []
    for k, size in enumerate(sizes):
        path = tmp_path / f"part{k}.bin"
        (np.arange(size * seq_len + 1, dtype=np.uint32) + 1000000 * k).tofile(path)
        paths.append(str(path))
    return paths


def mixture(paths, weights, seq_len=4, **keys):
    return {"source": {"mix": [{"weight": w, "source": {"kind": "tokens", "path": p, "dtype": "uint32", "seq_len": seq_len}}
                               for w, p in zip(weights, paths)], **keys}}


def picks(pipeline, seq_len=4):
    """(part, window number) of every delivered sample, in order."""
    out = []
    for batch in pipeline.batches():
        first = batch["tokens"][:, 0].cpu().tolist()
        out += [(token // 1000000, token % 1000000 // seq_len) for token in first]
    return out


def megatron_order(weights, size):
    """Megatron-LM's blending order, written from its description: the weights normalized (numpy
    float64, twice: by the dataset builder and again by BlendedDataset), then at each sample the first
    dataset with the largest weight x max(sample, 1) - samples taken so far."""
    w = np.array(weights, dtype=np.float64)
    w = w / np.sum(w)
    w = np.array(w.tolist(), dtype=np.float64)
    w = w / np.sum(w)
    taken = [0] * len(w)
    order = []
    for i in range(size):
        x = max(float(i), 1.0)
        errors = [w[k] * x - float(taken[k]) for k in range(len(w))]
        k = errors.index(max(errors))
        order.append((k, taken[k]))
        taken[k] += 1
    return order


@pytest.mark.parametrize("weights", [[0.7, 0.3], [0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.45, 0.35, 0.2], [3, 1, 1, 0.25]])
def test_every_window_holds_each_sources_share(tmp_path, weights):
    paths = part_files(tmp_path, [400] * len(weights))
    config = {**mixture(paths, weights), "batch_size": 16}
    with ferry.Pipeline(config, overrides={"decode.threads": 2}) as pipeline:
        parts = [part for part, _ in picks(pipeline)]
    shares = np.array(weights, dtype=np.float64) / sum(weights)
    assert len(parts) == 400 * len(weights)
    span = int(np.ceil(1 / shares.min()))
    for start in range(len(parts) - span + 1):
        counts = np.bincount(parts[start:start + span], minlength=len(weights))
        target = shares * span
        assert np.all(np.abs(counts - target) <= 1 + 1e-9), (start, counts, target)
    # and each part's windows come in its own order, none twice, until it runs out and starts again
    with ferry.Pipeline(config) as pipeline:
        seen = picks(pipeline)
    for k in range(len(weights)):
        numbers = [n for part, n in seen if part == k]
        assert numbers == [i % 400 for i in range(len(numbers))]


@pytest.mark.parametrize("weights", [[0.6, 0.3, 0.1], [2, 1], [0.01, 0.99], [5, 3, 1, 1, 0.5, 0.2, 7]])
def test_megatron_mode_is_megatrons_blending_order_sample_for_sample(tmp_path, weights):
    sizes = [5000] * len(weights)
    paths = part_files(tmp_path, sizes)
    config = {**mixture(paths, weights, mode="megatron", samples=3000), "batch_size": 32}
    with ferry.Pipeline(config) as pipeline:
        assert picks(pipeline) == megatron_order(weights, 3000)


def test_a_source_weighted_above_its_size_is_upsampled_in_a_new_order_each_pass(tmp_path):
    paths = part_files(tmp_path, [10, 1000])
    config = {**mixture(paths, [0.5, 0.5], samples=400), "batch_size": 20, "sampler": {"shuffle": True, "seed": 5}}
    with ferry.Pipeline(config) as pipeline:
        seen = picks(pipeline)
    small = [n for part, n in seen if part == 0]
    assert len(small) == 200
    passes = [small[i:i + 10] for i in range(0, 200, 10)]
    assert all(sorted(p) == list(range(10)) for p in passes)  # every pass is the whole source once
    assert len({tuple(p) for p in passes}) > 10                # in another order each time
    large = [n for part, n in seen if part == 1]
    assert len(set(large)) == len(large) == 200                # the large one: no repeats


def test_the_report_gives_each_sources_samples_and_share_from_the_dataset_cache_too(tmp_path):
    paths = part_files(tmp_path, [300, 100])
    config = {**mixture(paths, [3, 1], samples=200), "batch_size": 10, "cache": {"memory": "host"},
              "transfer": {"device": "cpu"}, "sampler": {"shuffle": True, "seed": 4, "epochs": 3}}
    with ferry.Pipeline(config) as pipeline:
        counts = np.bincount([part for part, _ in picks(pipeline)], minlength=2)
        report = pipeline.stats()
    assert report["cache"]["hits"] > 0  # later epochs come from the cache, and count all the same
    parts = report["source_parts"]
    assert [p["samples"] for p in parts] == counts.tolist() == [450, 150]
    assert [p["weight"] for p in parts] == [0.75, 0.25]
    assert [p["share"] for p in parts] == [0.75, 0.25]
    assert parts[0]["source"].startswith("tokens(") and paths[0] in parts[0]["source"]
    single = {"source": {"kind": "tokens", "path": paths[0], "dtype": "uint32", "seq_len": 4}, "batch_size": 10}
    with ferry.Pipeline(single) as pipeline:
        assert "source_parts" not in pipeline.stats()


def test_ranks_share_each_source_once_and_each_rank_gets_the_shares(tmp_path):
    paths = part_files(tmp_path, [300, 300, 300])
    weights = [0.5, 0.3, 0.2]
    for world in [1, 2, 3, 4]:
        union = []
        for rank in range(world):
            config = {**mixture(paths, weights, samples=600), "batch_size": 10,
                      "sampler": {"shuffle": True, "seed": 1, "rank": rank, "world_size": world}}
            with ferry.Pipeline(config) as pipeline:
                mine = picks(pipeline)
            counts = np.bincount([part for part, _ in mine], minlength=3)
            assert np.all(np.abs(counts - np.array(weights) * len(mine)) <= 1), (world, rank, counts)
            union += mine
        for k in range(3):
            numbers = [n for part, n in union if part == k]
            assert len(numbers) == len(set(numbers)), (world, k)  # no window twice (each source has enough)


def test_a_mixture_resumes_exactly_and_refuses_a_state_from_another_mixture(tmp_path):
    paths = part_files(tmp_path, [200, 300])
    config = {**mixture(paths, [0.7, 0.3]), "batch_size": 8, "sampler": {"shuffle": True, "seed": 2, "epochs": 2}}
    with ferry.Pipeline(config) as pipeline:
        everything = picks(pipeline)
    with ferry.Pipeline(config) as first:
        head = []
        for batch in first.batches():
            head += [(t // 1000000, t % 1000000 // 4) for t in batch["tokens"][:, 0].tolist()]
            if len(head) >= 96:
                break
        state = first.state_dict()
    with ferry.Pipeline(config, state=state) as resumed:
        assert head + picks(resumed) == everything
    other = {**mixture(paths, [0.6, 0.4]), "batch_size": 8, "sampler": {"shuffle": True, "seed": 2, "epochs": 2}}
    with pytest.raises(ferry.Error, match=r"source.mix\[0\].weight"):
        ferry.Pipeline(other, state=state)


def test_bad_mixtures_are_config_errors_at_their_keys(tmp_path):
    paths = part_files(tmp_path, [10, 10])
    (tmp_path / "images").mkdir()
    for weights, message in [([-1, 1], r"mix\[0\].weight.*>= 0"), ([0, 0], "every weight is 0"),
                             (["heavy", 1], r"mix\[0\].weight")]:
        with pytest.raises(ferry.ConfigError, match=message):
            ferry.Pipeline(mixture(paths, weights))
    different = mixture(paths, [1, 1])
    different["source"]["mix"][1]["source"]["split"] = ["x", "y"]
    with pytest.raises(ferry.ConfigError, match=r"source.mix\[1\].source.*same fields.*\[x, y\].*\[tokens\]"):
        ferry.Pipeline(different)
    (tmp_path / "mix.yaml").write_text(
        "source:\n  mix:\n    - weight: 1\n      source: {kind: tokens, path: %s, seq_len: 4}\n"
        "    - weight: 1\n      source: {kind: tokens, path: %s, dtype: uint32, seq_len: 4, output_dtype: int32}\n" % tuple(paths))
    with pytest.raises(ferry.Error, match=r"fields differ.*tokens: int64 \[5\].*tokens: int32 \[5\]"):
        ferry.Pipeline(tmp_path / "mix.yaml")
    with pytest.raises(ferry.ConfigError, match=r"mix.yaml:6:\d+: source.mix\[1\].source.output_dtype: expected one"):
        (tmp_path / "mix.yaml").write_text((tmp_path / "mix.yaml").read_text().replace("dtype: int32", "dtype: int31"))
        ferry.Pipeline(tmp_path / "mix.yaml")
