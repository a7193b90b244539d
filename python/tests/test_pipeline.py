"""ferry.Pipeline: iteration over every shipped config, values, state, stats, errors, and close()."""

import glob
import io
import os
import sys
import tarfile
import threading

import numpy as np
import pytest
import torch

import ferry
from conftest import CONFIG_DIR, bytes_digest, env_path, ferry_run_digests

# Each shipped config with what points it at the CTest fixtures' small datasets (as tests/CMakeLists.txt
# runs them through `ferry run`), and few threads.
CONFIGS = sorted(os.path.splitext(os.path.basename(path))[0] for path in glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))


def dataset_overrides(name):
    overrides = ["decode.threads=2"]
    if name == "megatron":
        overrides.append("source.prefix=" + env_path("FERRY_DATASET_TOKENS"))
    elif name == "tar":
        shards = env_path("FERRY_DATASET_TAR")
        overrides += [f"source.shards={shards}/shard-{{000000..000003}}.tar", "batch_size=16"]
    elif name in ("image-folder", "imagenet-train"):
        overrides += ["source.root=" + env_path("FERRY_DATASET_IMAGES"), "batch_size=16"]
    elif name.startswith("bench-"):
        overrides.append("batch_size=8")
    return overrides


def take(pipeline, count):
    batches = []
    for batch in pipeline:
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_delivers_what_ferry_run_delivers(name, cli, tmp_path):
    config = os.path.join(CONFIG_DIR, name + ".yaml")
    overrides = dataset_overrides(name)
    expected = ferry_run_digests(cli, config, overrides, 2, tmp_path)
    with ferry.Pipeline(config, overrides=overrides) as pipeline:
        got = [bytes_digest(batch) for batch in take(pipeline, 2)]
        for batch in got:
            assert batch
    assert got == expected


def test_tokens_are_the_dataset_windows():
    prefix = env_path("FERRY_DATASET_TOKENS")
    seq_len, batch_size = 64, 4
    overrides = {"source.prefix": prefix, "source.seq_len": seq_len, "batch_size": batch_size, "sampler.shuffle": False,
                 "decode.threads": 2}
    with open(prefix + ".idx", "rb") as f:
        header = f.read(18)
    dtype = {1: np.uint8, 4: np.int32, 8: np.uint16}[header[17]]
    tokens = np.fromfile(prefix + ".bin", dtype=dtype)
    with ferry.Pipeline(os.path.join(CONFIG_DIR, "megatron.yaml"), overrides=overrides) as pipeline:
        for b, batch in enumerate(take(pipeline, 5)):
            got = batch["tokens"].cpu()
            for row in range(batch_size):
                window = (b * batch_size + row) * seq_len
                want = tokens[window:window + seq_len + 1].astype(np.int64)
                # uint16 stays uint16 on torch >= 2.3 and is widened to int32 before: the values are equal.
                assert np.array_equal(got[row].to(torch.int64).numpy(), want)


def test_npy_shards_are_the_files():
    shards = env_path("FERRY_DATASET_NPY")
    files = sorted(glob.glob(os.path.join(shards, "*.tar")))
    features, labels = [], []
    for path in files:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member).read()
                if member.name.endswith(".npy"):
                    features.append(np.load(io.BytesIO(data)))
                elif member.name.endswith(".cls"):
                    labels.append(int(data))
    config = {
        "source": {"kind": "tar", "shards": files, "members": [
            {"name": "features", "extension": "npy", "decoder": "npy", "dtype": "float32", "shape": [64]},
            {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]},
        "batch_size": 10,
        "decode": {"threads": 2},
        "transfer": {"device": "cpu"},
    }
    seen = 0
    with ferry.Pipeline(config) as pipeline:
        assert len(pipeline) == (len(features) + 9) // 10
        for batch in pipeline:
            n = batch["label"].shape[0]
            assert torch.equal(batch["features"], torch.from_numpy(np.stack(features[seen:seen + n])))
            assert batch["label"].tolist() == labels[seen:seen + n]
            seen += n
    assert seen == len(features) == 64


def small_config(samples=512, batch_size=32, **extra):
    config = {
        "source": {"kind": "synthetic", "samples": samples, "seed": 3, "fields": [
            {"name": "x", "dtype": "float32", "shape": [4, 5]},
            {"name": "tokens", "dtype": "int32", "length": [1, 9], "range": [0, 100]}]},
        "batch_size": batch_size,
        "decode": {"threads": 2},
        "sampler": {"shuffle": True, "seed": 11, "epochs": 2},
    }
    config.update(extra)
    return config


def test_a_dict_config_equals_the_same_yaml_file(tmp_path):
    config = small_config()
    path = tmp_path / "config.yaml"
    import json
    path.write_text(json.dumps(config))
    with ferry.Pipeline(config) as a, ferry.Pipeline(path) as b:
        assert [bytes_digest(x) for x in a.batches()] == [bytes_digest(y) for y in b.batches()]


def test_fields_are_views_of_one_buffer_on_the_device():
    with ferry.Pipeline(small_config()) as pipeline:
        batch = next(iter(pipeline))
        assert list(batch) == ["x", "tokens", "tokens_lengths"]
        assert all(t.device == pipeline.device for t in batch.values())
        # No copy per field: all of them view the C++ batch's single allocation.
        assert len({t.storage().data_ptr() for t in batch.values()}) == 1


def test_each_loop_is_one_epoch_in_its_own_order_and_len_is_one_epoch():
    samples, batch_size = 100, 32  # 4 batches an epoch, the last of 4 samples; 2 epochs
    with ferry.Pipeline(small_config(samples=samples, batch_size=batch_size)) as pipeline:
        assert pipeline.epochs == 2 and pipeline.total_batches == 8
        orders = []
        for epoch in range(pipeline.epochs):
            assert pipeline.epoch == epoch and len(pipeline) == 4
            batches = list(pipeline)
            assert [b.epoch for b in batches] == [epoch] * 4
            assert [b.index for b in batches] == [0, 1, 2, 3]
            assert [b.sequence for b in batches] == list(range(4 * epoch, 4 * epoch + 4))
            assert [len(b.sample_indices) for b in batches] == [32, 32, 32, 4]
            assert all(b["x"].shape[0] == len(b.sample_indices) for b in batches)
            assert isinstance(batches[0], dict) and isinstance(batches[0], ferry.Batch)
            orders.append([i for b in batches for i in b.sample_indices])
        # Each epoch is every sample once, in an order of its own (shuffle: true).
        assert sorted(orders[0]) == sorted(orders[1]) == list(range(samples))
        assert orders[0] != orders[1]
        # A loop past the configured epochs says so, rather than yielding nothing.
        with pytest.raises(ferry.Error, match="all 2 epochs .* were delivered"):
            for _ in pipeline:
                pass
    # The batches of each epoch are those of the C++ run, in order.
    with ferry.Pipeline(small_config(samples=samples, batch_size=batch_size)) as flat:
        everything = [bytes_digest(b) for b in flat.batches()]
    with ferry.Pipeline(small_config(samples=samples, batch_size=batch_size)) as looped:
        assert [bytes_digest(b) for _ in range(2) for b in looped] == everything


def test_a_loop_holds_the_only_reference_to_its_batch():
    # The loop's variable is a batch's last reference: it is freed where the loop lets it go (and its
    # buffer goes back to the pool), not inside the next next(). Compared with an object only a local
    # holds, counted the same way (what getrefcount adds differs between Python versions).
    def references(batches):
        counts = []
        for batch in batches:
            counts.append(sys.getrefcount(batch))
        alone = object()
        return counts, sys.getrefcount(alone)

    with ferry.Pipeline(small_config(samples=100, batch_size=32, sampler={"epochs": 2})) as pipeline:
        for loop in (lambda: pipeline, pipeline.batches):  # an epoch, then every batch left
            counts, alone = references(loop())
            assert counts == [alone] * 4


def test_a_loop_that_stops_early_leaves_the_rest_of_its_epoch():
    with ferry.Pipeline(small_config(samples=100, batch_size=32, sampler={"epochs": 3})) as pipeline:
        first = take(pipeline, 1)
        assert [(b.epoch, b.index) for b in first] == [(0, 0)]
        assert pipeline.epoch == 1 and len(pipeline) == 4  # the loop was left: the next one is epoch 1
        assert [(b.epoch, b.index) for b in pipeline] == [(1, 0), (1, 1), (1, 2), (1, 3)]
        assert [(b.epoch, b.index) for b in take(pipeline, 2)] == [(2, 0), (2, 1)]
        # Epoch 0's three batches left behind were dropped by the next loop: they count as delivered.
        assert pipeline.state_dict()["next_batch"] == 4 + 4 + 2


def test_len_after_close_is_zero():
    pipeline = ferry.Pipeline(small_config(samples=100, batch_size=32))
    assert len(pipeline) == 4
    pipeline.close()
    assert len(pipeline) == 0 and list(pipeline) == []  # what it will still deliver: nothing


def test_max_batches_ends_the_run_mid_epoch_and_len_says_so():
    with ferry.Pipeline(small_config(samples=100, batch_size=32), overrides={"max_batches": 6}) as pipeline:
        assert pipeline.total_batches == 6
        assert len(pipeline) == 4 and len(list(pipeline)) == 4
        assert len(pipeline) == 2 and len(list(pipeline)) == 2
    with ferry.Pipeline(small_config(samples=100, batch_size=32, sampler={"epochs": 5}),
                        overrides={"max_batches": 3}) as short:
        assert len(list(short)) == 3
        with pytest.raises(ferry.Error, match="max_batches"):
            list(short)


@pytest.mark.parametrize("stop", [0, 1, 5, 15])
def test_state_dict_resumes_exactly(stop):
    config = small_config(samples=260, batch_size=32)
    with ferry.Pipeline(config) as full:
        everything = [bytes_digest(b) for b in full.batches()]
    with ferry.Pipeline(config, overrides={"decode.threads": 1, "prefetch": 2}) as first:
        head = [bytes_digest(b) for b in take_across_epochs(first, stop)]
        state = first.state_dict()
    assert state["next_batch"] == stop
    with ferry.Pipeline(config, state=state) as resumed:
        assert resumed.total_batches == len(everything) - stop
        tail = [bytes_digest(b) for b in resumed.batches()]
    assert head + tail == everything
    # load_state_dict restarts a running pipeline at the state.
    with ferry.Pipeline(config) as again:
        take(again, 3)
        again.load_state_dict(state)
        assert [bytes_digest(b) for b in again.batches()] == everything[stop:]


def take_across_epochs(pipeline, count):
    """The first `count` batches, one loop per epoch, as a training script takes them."""
    batches = []
    while len(batches) < count:
        batches += take(pipeline, count - len(batches))
    return batches


@pytest.mark.parametrize("after_close", [False, True])
def test_a_state_saved_between_epochs_resumes_at_the_next_epoch(after_close):
    # 9 batches an epoch, 2 epochs: the state after the first loop is epoch 1's start, although the
    # pipeline has already taken epoch 1's first batch (held back for the next loop); also once the
    # pipeline is closed (the with block left).
    config = small_config(samples=260, batch_size=32)
    with ferry.Pipeline(config) as full:
        everything = [bytes_digest(b) for b in full.batches()]
    with ferry.Pipeline(config) as first:
        head = [bytes_digest(b) for b in first]
        state = None if after_close else first.state_dict()
    state = state or first.state_dict()
    assert len(head) == 9 and state["next_batch"] == 9
    assert state["next"] == {"epoch": 1, "batch": 0, "position": 0, "consumed": 0}
    with ferry.Pipeline(config, state=state) as resumed:
        assert resumed.epoch == 1 and len(resumed) == 9
        assert head + [bytes_digest(b) for b in resumed] == everything


def test_a_run_resumed_with_nothing_left_of_its_epoch_starts_at_the_next():
    # Under on_error: skip with drop_last an epoch's last batch can leave a cursor short of the epoch's
    # end with fewer than batch_size samples after it: such a state, written out here, has no batch
    # left in epoch 0, and its first loop is epoch 1's.
    config = small_config(samples=100, batch_size=32, sampler={"epochs": 2, "drop_last": True, "seed": 11,
                                                               "shuffle": True})
    with ferry.Pipeline(config) as full:
        everything = [(b.epoch, b.index, bytes_digest(b)) for b in full.batches()]
    with ferry.Pipeline(config) as first:
        take(first, 1)
        state = first.state_dict()
    state["next_batch"] = 3
    state["next"] = {"epoch": 0, "batch": 3, "position": 96}
    state["last_delivered"] = {"epoch": 0, "batch": 2}
    with ferry.Pipeline(config, state=state) as resumed:
        assert resumed.epoch == 1 and len(resumed) == 3
        assert [(b.epoch, b.index, bytes_digest(b)) for b in resumed] == everything[3:]


def test_a_state_from_another_order_is_refused():
    with ferry.Pipeline(small_config()) as pipeline:
        take(pipeline, 2)
        state = pipeline.state_dict()
    with pytest.raises(ferry.ConfigError) as raised:
        ferry.Pipeline(small_config(), overrides={"sampler.seed": 12}, state=state)
    assert any(key == "sampler.seed" for _, key, _ in raised.value.problems)
    with pytest.raises(ferry.ConfigError, match="next_batch"):
        ferry.Pipeline(small_config(), state={"format": "ferry-state", "version": 1})
    # load_state_dict checks before it stops anything: the running pipeline goes on where it was.
    with ferry.Pipeline(small_config(), overrides={"sampler.seed": 12}) as other:
        first = bytes_digest(next(iter(other)))
        with pytest.raises(ferry.ConfigError, match="sampler.seed"):
            other.load_state_dict(state)
        assert other.state_dict()["next_batch"] == 1 and not other.closed
        rest = [bytes_digest(b) for b in other.batches()]
    with ferry.Pipeline(small_config(), overrides={"sampler.seed": 12}) as same:
        assert [bytes_digest(b) for b in same.batches()] == [first] + rest


def test_stats_report_the_run():
    with ferry.Pipeline(small_config()) as pipeline:
        batches = list(pipeline.batches())
        stats = pipeline.stats()
    assert stats["totals"]["batches"] == len(batches)
    assert stats["run"]["device_requested"] == "auto" and stats["run"]["device"] == str(pipeline.device)
    assert [stage["name"] for stage in stats["stages"]][:2] == ["decode", "collate"]
    # Every batch timed leg by leg on its way (docs/report.md, "The batch path").
    path = stats["batch_path"]
    assert path["batches"] == len(batches)
    assert [leg["name"] for leg in path["legs"]] == [
        "plan to collated", "to pack", "pack", "to h2d", "h2d", "to event-wait", "event-wait", "to consumer"]
    assert path["latency_seconds"] == pytest.approx(sum(leg["seconds_per_batch"] for leg in path["legs"]))
    assert 0 < path["latency_seconds"] <= stats["totals"]["wall_seconds"]
    assert pipeline.stats()["totals"]["batches"] == len(batches)  # kept after close()


def test_bad_configs_raise_config_error_listing_every_problem(tmp_path):
    with pytest.raises(ferry.ConfigError) as raised:
        ferry.Pipeline({"batch_size": 0, "sourcee": {}})
    keys = [key for _, key, _ in raised.value.problems]
    assert "batch_size" in keys and "sourcee" in keys and "source" in keys
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, ferry.Error)
    with pytest.raises(ferry.ConfigError, match="missing.yaml"):
        ferry.Pipeline(tmp_path / "missing.yaml")
    with pytest.raises(ferry.ConfigError, match="decode.threads"):
        ferry.Pipeline(small_config(), overrides={"decode.threads": "many"})
    with pytest.raises(TypeError):
        ferry.Pipeline(42)
    # A key that is not UTF-8 in a YAML file: still a ConfigError naming it, never a UnicodeDecodeError.
    (tmp_path / "latin1.yaml").write_bytes(b"batch_size: 4\nsourc\xe9: {}\n")
    with pytest.raises(ferry.ConfigError, match="sourc") as raised:
        ferry.Pipeline(tmp_path / "latin1.yaml")
    assert all(isinstance(part, str) for problem in raised.value.problems for part in problem)


def test_a_stage_error_names_the_stage_and_the_sample(tmp_path):
    shard = tmp_path / "broken.tar"
    with tarfile.open(shard, "w") as tar:
        for i, payload in enumerate([b"1", b"2", b"three", b"4"]):
            info = tarfile.TarInfo(f"{i:04d}.cls")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    config = {"source": {"kind": "tar", "shards": [str(shard)], "members": [
        {"name": "label", "extension": "cls", "decoder": "label", "dtype": "int64", "shape": []}]},
        "batch_size": 1, "decode": {"threads": 1}}
    with ferry.Pipeline(config) as pipeline:
        batches = iter(pipeline)
        assert next(batches)["label"].item() == 1
        assert next(batches)["label"].item() == 2
        with pytest.raises(ferry.Error) as raised:
            next(batches)
    error = raised.value
    assert error.stage == "decode" and error.sample == 2 and error.batch == 2
    assert "0002" in str(error) and "three" in str(error)
    with ferry.Pipeline(config, overrides={"decode.on_error": "skip"}) as pipeline:
        assert [b["label"].item() for b in pipeline] == [1, 2, 4]
        skipped = pipeline.stats()["skipped"]
        assert skipped["count"] == 1 and skipped["listed"][0]["index"] == 2


def test_a_header_byte_that_is_not_utf8_still_raises_ferry_error(tmp_path):
    # An npy header dict with the byte 0xAA in a key: the message shows it escaped, and Python gets
    # ferry.Error with its stage and sample (a UnicodeDecodeError replaced it before).
    good = io.BytesIO()
    np.save(good, np.arange(4, dtype=np.float32))
    damaged = good.getvalue().replace(b"'descr'", b"'d\xaascr'")
    shard = tmp_path / "damaged.tar"
    with tarfile.open(shard, "w") as tar:
        for i, payload in enumerate([good.getvalue(), damaged]):
            info = tarfile.TarInfo(f"{i:04d}.npy")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    config = {"source": {"kind": "tar", "shards": [str(shard)], "members": [
        {"name": "x", "extension": "npy", "decoder": "npy", "dtype": "float32", "shape": [4]}]},
        "batch_size": 1, "decode": {"threads": 1}, "transfer": {"device": "cpu"}}
    with ferry.Pipeline(config) as pipeline:
        batches = iter(pipeline)
        assert next(batches)["x"].tolist() == [[0, 1, 2, 3]]
        with pytest.raises(ferry.Error) as raised:
            next(batches)
    assert raised.value.stage == "decode" and raised.value.sample == 1
    assert "unexpected key 'd\\xaascr'" in str(raised.value) and "0001" in str(raised.value)


def test_close_wakes_a_blocked_iteration_in_another_thread():
    # Large samples on one thread: the first batch takes a while; close() from here ends the wait.
    config = small_config(samples=64, batch_size=16)
    config["source"]["fields"] = [{"name": "x", "dtype": "uint8", "shape": [16, 1024, 1024]}]
    config["decode"]["threads"] = 1
    pipeline = ferry.Pipeline(config, overrides={"prefetch": 1})
    outcome = []
    consumer = threading.Thread(target=lambda: outcome.append(list(pipeline.batches())))
    consumer.start()
    pipeline.close()
    consumer.join(timeout=60)
    assert not consumer.is_alive() and pipeline.closed
    assert len(outcome) == 1 and len(outcome[0]) <= 1


def test_other_python_threads_run_while_iteration_waits():
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        with ferry.Pipeline(small_config(samples=4096, batch_size=256)) as pipeline:
            for _ in pipeline:
                pass
    finally:
        done.set()
        thread.join()
    assert len(ticks) > 1
