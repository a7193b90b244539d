"""ferry.Pipeline with transfer.devices: one process feeding several devices. Each step is a list of
batches, one per device; device d's batches are byte for byte those rank d of N data-parallel ranks
gets; loops, len(), the state and the stats count steps. The devices are `cpu` here (this machine may
have no GPU); tests/cuda/ runs the same on GPUs."""

import threading

import pytest
import torch

import ferry
from conftest import bytes_digest


def small_config(samples=203, batch_size=8, **extra):
    config = {
        "source": {"kind": "synthetic", "samples": samples, "seed": 5, "fields": [
            {"name": "x", "dtype": "float32", "shape": [3, 2]},
            {"name": "tokens", "dtype": "int32", "length": [1, 7], "range": [0, 100]}]},
        "batch_size": batch_size,
        "decode": {"threads": 2},
        "sampler": {"shuffle": True, "seed": 4, "epochs": 2},
    }
    config.update(extra)
    return config


def devices(n):
    return {"transfer.devices": "[" + ", ".join(["cpu"] * n) + "]"}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_each_device_gets_what_its_rank_would(n):
    config = small_config()
    ranks = []
    for rank in range(n):
        with ferry.Pipeline(config, overrides={"sampler.rank": rank, "sampler.world_size": n,
                                               "transfer.device": "cpu"}) as alone:
            ranks.append([(b.epoch, b.index, b.sample_indices, bytes_digest(b)) for b in alone.batches()])
    with ferry.Pipeline(config, overrides=devices(n)) as group:
        assert group.devices == [torch.device("cpu")] * n
        steps = 0
        for epoch in range(group.epochs):
            assert len(group) == len(ranks[0]) // 2
            for step in group:
                assert isinstance(step, list) and len(step) == n
                for d, batch in enumerate(step):
                    assert (batch.epoch, batch.index, batch.sample_indices, bytes_digest(batch)) == ranks[d][steps]
                    assert batch.epoch == epoch
                steps += 1
        assert steps == len(ranks[0])
        stats = group.stats()
        assert [d["batches"] for d in stats["devices"]] == ([steps] * n if n > 1 else [])
        assert stats["totals"]["batches"] == steps * n


@pytest.mark.parametrize("stop", [1, 8, 9, 17])  # of 2 epochs of 9 steps
def test_a_group_state_resumes_exactly(stop):
    config = small_config()
    with ferry.Pipeline(config, overrides=devices(3)) as full:
        everything = [[bytes_digest(b) for b in step] for step in full.batches()]
    with ferry.Pipeline(config, overrides={**devices(3), "decode.threads": 1}) as first:
        head, taken = [], []
        for step in first.batches():
            head.append([bytes_digest(b) for b in step])
            taken.append([(b.epoch, i) for b in step for i in b.sample_indices])
            if len(head) == stop:
                break
        state = first.state_dict()
    assert state["format"] == "ferry-states"
    assert [d["next_batch"] for d in state["devices"]] == [stop] * 3
    with ferry.Pipeline(config, overrides=devices(3), state=state) as resumed:
        assert resumed.total_batches == len(everything) - stop
        assert head + [[bytes_digest(b) for b in step] for step in resumed.batches()] == everything
    # On two devices, each from the first device's state: the rest of the epoch dealt to them, every
    # sample of it once (one padding sample apart), then the next epoch as two devices deal it.
    epoch = state["devices"][0]["next"]["epoch"]
    with ferry.Pipeline(config, overrides=devices(2), state=state) as two:
        rest = [(b.epoch, i) for step in two.batches() for b in step for i in b.sample_indices]
    mine = [i for step in taken for e, i in step if e == epoch] + [i for e, i in rest if e == epoch]
    assert set(mine) == set(range(203)) and len(mine) - 203 in (0, 1)
    if epoch == 0:
        with ferry.Pipeline(config, overrides=devices(2)) as fresh:
            later = [(b.epoch, i) for step in fresh.batches() for b in step for i in b.sample_indices if b.epoch]
        assert [r for r in rest if r[0] == 1] == later


def test_a_loop_that_stops_early_leaves_the_rest_of_its_epoch_for_every_device():
    config = small_config()
    with ferry.Pipeline(config, overrides=devices(2)) as group:
        first = next(iter(group))
        assert [b.index for b in first] == [0, 0]
        state = group.state_dict()
        second = next(iter(group))  # the next loop is the next epoch
        assert [(b.epoch, b.index) for b in second] == [(1, 0), (1, 0)]
    assert [d["next_batch"] for d in state["devices"]] == [1, 1]


def test_device_is_refused_for_a_group_and_close_wakes_a_waiting_loop():
    with ferry.Pipeline(small_config(samples=100000, batch_size=4), overrides=devices(2)) as group:
        with pytest.raises(ferry.Error, match="feeds 2 devices"):
            _ = group.device
        taken = []
        thread = threading.Thread(target=lambda: taken.extend(group.batches()))
        thread.start()
        group.close()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert group.closed
