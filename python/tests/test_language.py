"""Language-model data: flat token files (nanoGPT's train.bin) cut into strided or random windows,
inputs and targets split, every token checked against the file."""

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
