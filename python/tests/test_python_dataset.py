"""ferry.Pipeline.from_dataset, the python source kind and python transforms: every value as the user's
code made it, with 1, 2 and 4 worker processes; resumption; failures named; no process left behind."""

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import ferry
from conftest import bytes_digest
from python_datasets import ArrayDataset, BigEndianDataset, FailingDataset, RandomDataset, SlowDataset

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def children():
    """This process's living child processes (zombies are not left: the pipeline reaps its workers)."""
    pids = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as listed:
                pids += [int(pid) for pid in listed.read().split()]
        except OSError:
            pass  # a thread that ended meanwhile
    return pids


def shared_memory():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture(autouse=True)
def no_leftover_workers():
    before = set(children())
    segments = shared_memory()
    yield
    assert shared_memory() - segments == set(), "segments were left in /dev/shm"
    deadline = time.monotonic() + 5
    while set(children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(children()) - before == set(), "worker processes were left running"


def config(batch_size=4, workers=2, **decode):
    threads = 3 if workers == "threads" else max(workers, 2)
    return {"batch_size": batch_size, "decode": {"workers": workers, "threads": threads, **decode},
            "transfer": {"device": "cpu"}}


def check_batches(pipeline, dataset, variable=()):
    """Every field of every sample of every batch equals dataset[index]; returns the samples seen."""
    seen = []
    for batch in pipeline:
        for row, index in enumerate(batch.sample_indices):
            expected = dataset[index]
            for name, value in expected.items():
                got = batch[name][row]
                if name in variable:
                    length = int(batch[name + "_lengths"][row])
                    assert length == len(value)
                    got = got[:length]
                assert got.dtype == torch.from_numpy(np.asarray(value)).dtype, name
                assert torch.equal(got.cpu(), torch.from_numpy(np.asarray(value))), (name, index)
            seen.append(index)
    return seen


@pytest.mark.parametrize("workers", [1, 2, 4, "threads"])
def test_every_value_is_the_datasets(workers):
    rng = random.Random(str(workers))
    dtypes = ["uint8", "int32", "int64", "float16", "float32"]
    fields = {f"f{i}": (rng.choice(dtypes), tuple(rng.randint(1, 5) for _ in range(rng.randint(0, 3))))
              for i in range(rng.randint(1, 4))}
    dataset = ArrayDataset(rng.randint(20, 60), fields, seed=len(str(workers)))
    with ferry.Pipeline.from_dataset(dataset, config(batch_size=rng.randint(1, 7), workers=workers)) as pipeline:
        seen = check_batches(pipeline, dataset)
    assert sorted(seen) == list(range(len(dataset)))


def test_declared_variable_length_fields_are_padded():
    dataset = ArrayDataset(30, {"tokens": ("int32", (None,)), "label": ("int64", ())}, max_length=9)
    fields = {"tokens": {"dtype": "int32", "max_length": 9}, "label": {"dtype": "int64"}}
    with ferry.Pipeline.from_dataset(dataset, config(batch_size=5), fields=fields) as pipeline:
        assert sorted(check_batches(pipeline, dataset, variable={"tokens"})) == list(range(30))


def test_inference_asks_for_a_varying_fields_max_length():
    dataset = ArrayDataset(30, {"tokens": ("int32", (None,))}, max_length=20)
    with pytest.raises(ferry.Error, match=r"field 'tokens' may vary in length .*max_length"):
        ferry.Pipeline.from_dataset(dataset, config())


def test_shuffled_runs_are_the_same_with_any_number_of_workers():
    def digests(workers):
        cfg = config(workers=workers)
        cfg["sampler"] = {"shuffle": True, "seed": 5, "epochs": 2}
        with ferry.Pipeline.from_dataset(RandomDataset(), cfg) as pipeline:
            return [bytes_digest(batch) for batch in pipeline.batches()]

    one, three, threads = digests(1), digests(3), digests("threads")
    assert one == three == threads
    assert len(one) == 20


def test_sample_rng_differs_by_epoch_and_repeats_by_run():
    cfg = config()
    cfg["sampler"] = {"epochs": 2}
    with ferry.Pipeline.from_dataset(RandomDataset(), cfg) as pipeline:
        epochs = [{int(i): batch["x"][row].clone() for batch in pipeline for row, i in enumerate(batch.sample_indices)}
                  for _ in range(2)]
    assert all(not torch.equal(epochs[0][i], epochs[1][i]) for i in range(40))
    for i in (0, 17):
        expected = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 1, i]))).integers(0, 1 << 30, size=(3,))
        assert torch.equal(epochs[1][i], torch.from_numpy(expected))


def test_a_resumed_run_delivers_what_the_uninterrupted_one_would():
    cfg = config()
    cfg["sampler"] = {"shuffle": True, "seed": 3, "epochs": 2}
    with ferry.Pipeline.from_dataset(RandomDataset(), cfg) as full:
        everything = [bytes_digest(batch) for batch in full.batches()]
    with ferry.Pipeline.from_dataset(RandomDataset(), cfg) as first:
        head = []
        for batch in first.batches():
            head.append(bytes_digest(batch))
            if len(head) == 13:
                break
        state = first.state_dict()
    with ferry.Pipeline.from_dataset(RandomDataset(), cfg, state=state) as resumed:
        tail = [bytes_digest(batch) for batch in resumed.batches()]
    assert head + tail == everything


@pytest.mark.parametrize("workers", [2, "threads"])
def test_an_exception_names_the_sample_and_carries_the_traceback(workers):
    with ferry.Pipeline.from_dataset(FailingDataset(20, "raise", [9]), config(workers=workers)) as pipeline:
        with pytest.raises(ferry.Error) as raised:
            for _ in pipeline:
                pass
    message = str(raised.value)
    assert "sample 9" in message and "dataset[9] raised ValueError: sample 9 is broken" in message
    assert "Traceback" in message and "python_datasets.py" in message
    assert ("worker " if workers != "threads" else "the decode threads") in message


def test_skip_counts_failed_samples():
    cfg = config(on_error="skip")
    with ferry.Pipeline.from_dataset(FailingDataset(20, "raise", [3, 11]), cfg) as pipeline:
        seen = [int(i) for batch in pipeline for i in batch.sample_indices]
        stats = pipeline.stats()
    assert sorted(seen) == [i for i in range(20) if i not in (3, 11)]
    assert stats["skipped"]["count"] == 2


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_worker_that_dies_is_named_with_its_sample(how):
    started = time.monotonic()
    with ferry.Pipeline.from_dataset(FailingDataset(20, how, [6]), config()) as pipeline:
        with pytest.raises(ferry.Error) as raised:
            for _ in pipeline:
                pass
    message = str(raised.value)
    assert "sample 6" in message and "dataset[6]" in message
    assert ("exited with status 7" if how == "exit" else "killed by signal 9") in message
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("workers", [1, 2])
def test_skip_replaces_a_dead_worker_and_goes_on(workers):
    cfg = config(workers=workers, on_error="skip")
    with ferry.Pipeline.from_dataset(FailingDataset(24, "exit", [6, 13]), cfg) as pipeline:
        seen = [int(i) for batch in pipeline for i in batch.sample_indices]
        stats = pipeline.stats()
    assert sorted(seen) == [i for i in range(24) if i not in (6, 13)]
    assert stats["skipped"]["count"] == 2


def test_a_stuck_worker_times_out():
    cfg = config(timeout="1s")
    with ferry.Pipeline.from_dataset(FailingDataset(10, "stall", [4]), cfg) as pipeline:
        with pytest.raises(ferry.Error, match=r"still making dataset\[4\].*after decode.timeout"):
            for _ in pipeline:
                pass


@pytest.mark.parametrize("workers", [1, 3, "threads"])
def test_groups_of_samples_go_to_a_worker_in_one_request(workers):
    # Past the first samples, a decode thread's group of cheap samples goes to a worker in one message.
    dataset = ArrayDataset(3000, {"x": ("int32", (5,)), "y": ("float32", ())}, seed=7)
    with ferry.Pipeline.from_dataset(dataset, config(batch_size=50, workers=workers)) as pipeline:
        seen = check_batches(pipeline, dataset)
        code = pipeline.stats()["user_code"]
    assert sorted(seen) == list(range(3000))
    assert len(code) == 1 and code[0]["what"].startswith("python dataset ")
    assert code[0]["calls"] == 3000 and code[0]["busy_seconds"] > 0
    if workers == "threads":
        assert code[0]["processes"] == 0
    else:
        assert code[0]["processes"] == workers
        assert code[0]["requests"] < code[0]["calls"], "every sample went in a request of its own"


@pytest.mark.parametrize("how,reason", [("raise", r"raised ValueError: sample {} is broken"),
                                        ("exit", r"exited with status 7 while making dataset\[{}\]")])
def test_a_failure_inside_a_group_is_its_samples_alone(how, reason):
    # The samples after it in its group are made (by another worker, where this one died): only it is skipped.
    bad = [1500, 2207]
    dataset = FailingDataset(3000, how, bad)
    with ferry.Pipeline.from_dataset(dataset, config(batch_size=50, on_error="skip")) as pipeline:
        seen = check_batches(pipeline, dataset)
        stats = pipeline.stats()
    assert sorted(seen) == [i for i in range(3000) if i not in bad]
    listed = sorted(stats["skipped"]["listed"], key=lambda skipped: skipped["index"])
    assert [skipped["index"] for skipped in listed] == bad
    for skipped in listed:
        assert re.search(reason.format(skipped["index"]), skipped["reason"]), skipped["reason"]
    assert stats["user_code"][0]["replaced"] == (2 if how == "exit" else 0)


def test_a_stuck_sample_inside_a_group_times_out_alone():
    dataset = FailingDataset(1500, "stall", [1000])
    with ferry.Pipeline.from_dataset(dataset, config(batch_size=50, on_error="skip", timeout="1s")) as pipeline:
        seen = check_batches(pipeline, dataset)
        stats = pipeline.stats()
    assert sorted(seen) == [i for i in range(1500) if i != 1000]
    assert stats["skipped"]["count"] == 1
    assert re.search(r"still making dataset\[1000\] .*after decode.timeout", stats["skipped"]["listed"][0]["reason"])


def test_arrays_in_the_other_byte_order_keep_their_values():
    fields = {"x": ("int32", (3,)), "y": ("float32", (2, 2)), "z": ("int64", ())}
    dataset, plain = BigEndianDataset(12, fields), ArrayDataset(12, fields)
    with ferry.Pipeline.from_dataset(dataset, config()) as pipeline:
        assert sorted(check_batches(pipeline, plain)) == list(range(12))


@pytest.mark.parametrize("how,expected", [
    ("sys.exit", r"dataset\[5\] raised SystemExit: 3"),
    ("shape", r"dataset\[5\]: field 'x' has shape \[5\], expected \[4\]"),
    ("dtype", r"dataset\[5\]: field 'x' is float64, expected int32"),
    ("missing", r"dataset\[5\] lacks 'x' and has 'y', which the fields do not"),
    ("list", r"dataset\[5\] is a list; ferry needs a dict of fields"),
])
def test_a_sample_unlike_the_fields_is_named(how, expected):
    with ferry.Pipeline.from_dataset(FailingDataset(10, how, [5]), config()) as pipeline:
        with pytest.raises(ferry.Error, match=expected):
            for _ in pipeline:
                pass


def test_close_ends_every_worker_at_once_even_mid_sample():
    pipeline = ferry.Pipeline.from_dataset(SlowDataset(1000, {"x": ("int32", (4,))}), config(workers=3))
    iterator = iter(pipeline)
    next(iterator)
    assert len(children()) >= 3
    started = time.monotonic()
    pipeline.close()
    assert time.monotonic() - started < 2
    assert children() == []


def test_a_collected_pipeline_leaves_no_worker():
    pipeline = ferry.Pipeline.from_dataset(ArrayDataset(100, {"x": ("int32", (4,))}), config(workers=2))
    next(iter(pipeline))
    del pipeline
    import gc

    gc.collect()
    assert children() == []


def test_a_dataset_that_cannot_pickle_is_named_with_the_fix():
    dataset = ArrayDataset(10, {"x": ("int32", (4,))})
    dataset.transform = lambda x: x
    with pytest.raises(ferry.Error, match=r"cannot be sent to worker processes.*module's top level"):
        ferry.Pipeline.from_dataset(dataset, config())


def test_not_a_map_style_dataset():
    with pytest.raises(TypeError, match="has no __len__: ferry needs a map-style dataset"):
        ferry.Pipeline.from_dataset(iter([1, 2, 3]), config())


def test_a_config_with_a_source_is_refused():
    cfg = config()
    cfg["source"] = {"kind": "synthetic"}
    with pytest.raises(ferry.Error, match="the dataset is the source"):
        ferry.Pipeline.from_dataset(ArrayDataset(4, {"x": ("int32", (4,))}), cfg)


def test_sample_info_outside_ferry_raises():
    with pytest.raises(RuntimeError, match="while it runs"):
        ferry.sample_rng()


def yaml_config(tmp_path, extra=""):
    path = tmp_path / "python.yaml"
    path.write_text(textwrap.dedent("""\
        source:
          kind: python
          dataset: python_datasets:make_arrays
          args: {length: 26, seed: 4}
        batch_size: 4
        decode: {workers: 2, threads: 2}
        transfer: {device: cpu}
        """) + extra)
    return str(path)


@pytest.fixture
def tests_on_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_yaml_python_source_with_a_factory(tmp_path, tests_on_pythonpath):
    from python_datasets import make_arrays

    dataset = make_arrays(26, seed=4)
    with ferry.Pipeline(yaml_config(tmp_path)) as pipeline:
        assert sorted(check_batches(pipeline, dataset)) == list(range(26))


def test_yaml_python_transform_over_the_python_source(tmp_path, tests_on_pythonpath):
    extra = textwrap.dedent("""\
        transforms:
          - kind: python
            python: python_datasets:add_noise
            args: {scale: 2}
            fields: [{name: noisy, dtype: float32, shape: [3, 8, 8]}]
            drop: [image]
        sampler: {epochs: 2}
        """)
    from python_datasets import make_arrays

    dataset = make_arrays(26, seed=4)
    with ferry.Pipeline(yaml_config(tmp_path, extra)) as pipeline:
        for epoch in range(2):
            for batch in pipeline:
                assert set(batch) == {"noisy", "label"}
                for row, index in enumerate(batch.sample_indices):
                    sample = dataset[index]
                    noise = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, epoch, int(index)])))
                    noise = noise.integers(0, 3, size=(3, 8, 8)).astype(np.float32)
                    expected = sample["image"].astype(np.float32) + 2 * noise
                    assert torch.equal(batch["noisy"][row], torch.from_numpy(expected))
                    assert int(batch["label"][row]) == 2 * int(sample["label"])


@pytest.mark.parametrize("workers", [2, "threads"])
def test_a_path_arg_that_is_not_utf8_reaches_python_as_the_same_file(tmp_path, tests_on_pythonpath, workers):
    # A YAML file may hold any bytes: a Latin-1 file name reaches the code as os.fsdecode() gives it.
    folder = os.fsencode(tmp_path)
    with open(os.path.join(folder, b"caf\xe9 length"), "w") as f:
        f.write("26")
    path = os.path.join(folder, b"python.yaml")
    with open(path, "wb") as f:
        f.write(b"source: {kind: python, dataset: 'python_datasets:arrays_counted_in', args: {path: '"
                + os.path.join(folder, b"caf\xe9 length") + b"', seed: 4}}\n"
                + f"batch_size: 4\ndecode: {{workers: {workers}, threads: 2}}\ntransfer: {{device: cpu}}\n".encode())
    from python_datasets import make_arrays

    with ferry.Pipeline(os.fsdecode(path)) as pipeline:
        assert sorted(check_batches(pipeline, make_arrays(26, seed=4))) == list(range(26))


@pytest.mark.parametrize("workers", [2, "threads"])
def test_python_transform_over_a_builtin_source(tests_on_pythonpath, workers):
    cfg = {"source": {"kind": "synthetic", "samples": 12, "fields": [
        {"name": "image", "dtype": "uint8", "shape": [3, 8, 8]},
        {"name": "label", "dtype": "int64", "range": [0, 10]}]},
        "batch_size": 3, "decode": {"workers": workers}, "transfer": {"device": "cpu"},
        "transforms": [{"kind": "python", "python": "python_datasets:add_noise",
                        "fields": [{"name": "noisy", "dtype": "float32", "shape": [3, 8, 8]}]}]}
    plain = dict(cfg, transforms=[])
    with ferry.Pipeline(plain) as source, ferry.Pipeline(cfg) as transformed:
        for before, after in zip(source, transformed):
            assert torch.equal(before["image"], after["image"])
            assert torch.equal(before["label"] * 2, after["label"])
            assert after["noisy"].shape == (3, 3, 8, 8)


def test_ferry_run_with_a_python_source(cli, tmp_path, tests_on_pythonpath):
    environment = dict(os.environ, FERRY_PYTHON=sys.executable)
    result = subprocess.run([cli, "run", yaml_config(tmp_path), "--set", "stats.progress=off"], env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "26 samples" in result.stdout + result.stderr
    checked = subprocess.run([cli, "validate", yaml_config(tmp_path)], env=environment, capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stderr


def test_ferry_run_names_a_module_that_does_not_import(cli, tmp_path, tests_on_pythonpath):
    path = yaml_config(tmp_path).replace("python.yaml", "python.yaml")
    text = open(path).read().replace("python_datasets:make_arrays", "no_such_module:make")
    open(path, "w").write(text)
    environment = dict(os.environ, FERRY_PYTHON=sys.executable)
    result = subprocess.run([cli, "run", path, "--set", "stats.progress=off"], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "No module named 'no_such_module'" in result.stderr


def test_ferry_run_cannot_run_python_on_its_threads(cli, tmp_path, tests_on_pythonpath):
    result = subprocess.run([cli, "run", yaml_config(tmp_path), "--set", "decode.workers=threads"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "decode.workers: threads runs dataset 'python_datasets:make_arrays' in this process" in result.stderr


def test_bad_worker_settings_are_refused_where_they_are(tmp_path):
    for value, expected in [("0", "auto, threads or an integer in 1..256"), ("300", "auto, threads or an integer"),
                            ("many", "auto, threads or an integer")]:
        with pytest.raises(ferry.ConfigError, match=expected):
            ferry.Pipeline.from_dataset(ArrayDataset(4, {"x": ("int32", (4,))}), config(), overrides={
                "decode.workers": value})
    with pytest.raises(ferry.ConfigError, match="decode.timeout: expected a duration"):
        ferry.Pipeline.from_dataset(ArrayDataset(4, {"x": ("int32", (4,))}), config(timeout="soon"))


def test_a_missing_interpreter_is_named(tmp_path):
    with pytest.raises(ferry.Error, match="cannot start a Python worker with '/no/such/python'"):
        ferry.Pipeline.from_dataset(ArrayDataset(4, {"x": ("int32", (4,))}), config(python="/no/such/python"))


ORPHAN_SCRIPT = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {tests!r})
    import ferry
    from python_datasets import SlowDataset
    pipeline = ferry.Pipeline.from_dataset(SlowDataset(1000, {{"x": ("int32", (4,))}}), {{
        "batch_size": 2, "decode": {{"workers": 3, "threads": 3}}, "transfer": {{"device": "cpu"}}}})
    batches = iter(pipeline)
    next(batches)
    print("running", flush=True)
    for batch in batches:
        pass
    """)


def workers_of(pid):
    """The ferry worker processes whose parent is `pid` (or that it left to init)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if f"FERRY_WORKER_PARENT={pid}".encode() in environ.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_workers_end_with_their_process_however_it_ends(how):
    script = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT.format(tests=TESTS_DIR)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert script.stdout.readline().strip() == "running", script.stderr.read()
        assert len(workers_of(script.pid)) == 3
        script.send_signal(how)
        script.wait(timeout=10)
        deadline = time.monotonic() + 2
        while workers_of(script.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers_of(script.pid) == []
    finally:
        script.kill()
        script.wait()


def test_the_dataset_cache_keeps_a_python_source_that_says_it_may():
    dataset = ArrayDataset(24, {"x": ("int32", (4,)), "y": ("float32", (2, 3))})
    cfg = config()
    cfg["sampler"] = {"epochs": 3}
    cfg["cache"] = {"memory": "host"}
    with pytest.raises(ferry.ConfigError, match="source.same_every_epoch: true"):
        ferry.Pipeline.from_dataset(dataset, cfg)
    with ferry.Pipeline.from_dataset(dataset, cfg, overrides={"source.same_every_epoch": True}) as cached:
        for _ in range(3):
            assert sorted(check_batches(cached, dataset)) == list(range(24))


def test_several_devices_of_one_process_share_the_workers():
    dataset = ArrayDataset(32, {"x": ("int64", (3,))})
    cfg = config()
    del cfg["transfer"]
    cfg["transfer"] = {"devices": ["cpu", "cpu"]}
    seen = []
    with ferry.Pipeline.from_dataset(dataset, cfg) as pipeline:
        for step in pipeline:
            for batch in step:
                for row, index in enumerate(batch.sample_indices):
                    assert torch.equal(batch["x"][row], torch.from_numpy(dataset[index]["x"]))
                    seen.append(int(index))
    assert sorted(seen) == list(range(32))
