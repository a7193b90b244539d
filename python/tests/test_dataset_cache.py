"""The dataset cache from Python (cache.memory): cached epochs equal uncached ones, stats() shows the
cache, cache_to() moves a managed cache and refuses the others. Host memory here (CPU delivery); device
and managed memory where this build and machine have a GPU."""

import pytest
import torch

import ferry
import ferry.uvm


def config(memory, device):
    return {
        "source": {"kind": "synthetic", "samples": 150, "seed": 3,
                   "fields": [{"name": "x", "dtype": "float32", "shape": [4]},
                              {"name": "ids", "dtype": "int64", "length": [1, 12]}]},
        "batch_size": 16,
        "sampler": {"shuffle": True, "seed": 9, "epochs": 3},
        "decode": {"threads": 2},
        "transfer": {"device": device},
        "cache": {"memory": memory},
    }


def memories():
    kinds = [("host", "cpu")]
    if ferry.build_kind == "GPU" and torch.cuda.is_available():
        kinds.append(("device", "cuda:0"))
        if ferry.uvm.is_supported()[0]:
            kinds.append(("managed", "cuda:0"))
    return kinds


def epochs(pipeline, count):
    out = []
    for _ in range(count):
        out.append([(batch.epoch, batch.sample_indices, {k: v.cpu().clone() for k, v in batch.items()})
                    for batch in pipeline])
    return out


@pytest.mark.parametrize("memory,device", memories())
def test_cached_epochs_equal_uncached_ones(memory, device):
    with ferry.Pipeline(config("off", device)) as plain:
        expected = epochs(plain, 3)
    with ferry.Pipeline(config(memory, device)) as cached:
        got = epochs(cached, 3)
        stats = cached.stats()
    assert [[(e, i) for e, i, _ in epoch] for epoch in got] == [[(e, i) for e, i, _ in epoch] for epoch in expected]
    for epoch_got, epoch_expected in zip(got, expected):
        for (_, _, a), (_, _, b) in zip(epoch_got, epoch_expected):
            assert a.keys() == b.keys()
            for name in a:
                assert torch.equal(a[name], b[name]), name
    cache = stats["cache"]
    assert cache["memory"] == memory
    assert cache["samples"] == 150
    assert cache["hits"] + cache["misses"] == 450
    assert cache["hit_epochs"] >= 1
    assert cache["gathers"] > 0


def test_cache_to_refuses_a_cache_that_cannot_move():
    with ferry.Pipeline(config("host", "cpu")) as pipeline:
        with pytest.raises(ferry.Error, match="only cache.memory: managed can"):
            pipeline.cache_to(-1)
    with ferry.Pipeline(config("off", "cpu")) as pipeline:
        with pytest.raises(ferry.Error, match="no dataset cache"):
            pipeline.cache_to("cpu")
        assert "cache" not in pipeline.stats()


def test_a_random_crop_is_refused_naming_the_field():
    text = config("host", "cpu")
    text["source"] = {"kind": "image_folder", "root": "/nonexistent",
                      "image": {"shape": [8, 8, 3], "resize_shorter": 8, "crop": "random"}}
    with pytest.raises(ferry.ConfigError, match="field 'image' is decoded by 'jpeg' with a random crop"):
        ferry.Pipeline(text)


@pytest.mark.skipif(not (ferry.build_kind == "GPU" and torch.cuda.is_available() and ferry.uvm.is_supported()[0]),
                    reason="needs a GPU build, a GPU and unified memory")
def test_cache_to_the_host_and_back_keeps_the_values():
    with ferry.Pipeline(config("off", "cuda:0")) as plain:
        expected = epochs(plain, 3)
    with ferry.Pipeline(config("managed", "cuda:0")) as cached:
        got = epochs(cached, 1)
        cached.cache_to(-1)
        assert cached.stats()["cache"]["location"] == "host"
        got += epochs(cached, 1)
        cached.cache_to(torch.device("cuda:0"))
        assert cached.stats()["cache"]["location"] == "cuda:0"
        got += epochs(cached, 1)
        assert cached.stats()["cache"]["moves"] == 2
    for epoch_got, epoch_expected in zip(got, expected):
        for (_, _, a), (_, _, b) in zip(epoch_got, epoch_expected):
            for name in a:
                assert torch.equal(a[name], b[name]), name
