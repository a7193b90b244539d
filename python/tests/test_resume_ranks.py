"""Resuming on another number of ranks: a state that any rank saved, resumed by W' ranks, delivers the
rest of its epoch to them exactly once between them (padding for equal batch counts apart), and later
epochs as a fresh run on W' ranks does. Checked against the order written out here from one rank's run."""

import numpy as np
import pytest

import ferry

SEQ = 3  # tokens a window holds one more of
SAMPLES = 97
BATCH = 4


def token_data(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(SAMPLES * SEQ + 1, dtype=np.uint16).tofile(path)
    return {"source": {"kind": "tokens", "path": str(path), "seq_len": SEQ}, "batch_size": BATCH,
            "sampler": {"shuffle": True, "seed": 5, "epochs": 2}}


def run(config, rank, world, state=None, stop=None, **keys):
    """(epoch, [window number, ...]) per batch, and the state after them. Every window's tokens are
    checked: the file holds 0, 1, 2, ..., so a window is its first token counting up."""
    overrides = {"sampler.rank": rank, "sampler.world_size": world, **keys}
    batches = []
    with ferry.Pipeline(config, overrides=overrides, state=state) as pipeline:
        for batch in pipeline.batches():
            tokens = batch["tokens"].cpu().numpy()
            assert (tokens == tokens[:, :1] + np.arange(SEQ + 1)).all()
            assert (tokens[:, 0] % SEQ == 0).all()
            batches.append((batch.epoch, [int(t) // SEQ for t in tokens[:, 0]]))
            if stop is not None and len(batches) == stop:
                break
        return batches, pipeline.state_dict()


def samples_of(batches, epoch):
    return [s for e, batch in batches if e == epoch for s in batch]


def cut(samples, drop_last):
    """One rank's positions as batches: the last smaller one kept or dropped."""
    batches = [samples[i:i + BATCH] for i in range(0, len(samples), BATCH)]
    return [b for b in batches if len(b) == BATCH or not drop_last]


@pytest.mark.parametrize("world,new_world,stop,remainder,drop_last", [
    (2, 3, 3, "pad", False),
    (4, 2, 2, "pad", False),
    (3, 1, 4, "drop", False),
    (1, 4, 5, "pad", True),
    (2, 2, 3, "pad", False),
    (3, 5, 2, "drop", True),
])
def test_rank_0s_state_resumes_on_another_number_of_ranks(tmp_path, world, new_world, stop, remainder, drop_last):
    config = token_data(tmp_path)
    keys = {"sampler.remainder": remainder, "sampler.drop_last": drop_last}
    order = samples_of(run(config, 0, 1)[0], 0)  # one rank's epoch 0: the order every rank deals from
    assert sorted(order) == list(range(SAMPLES))

    head = []
    for rank in range(world):
        batches, state = run(config, rank, world, stop=stop, **keys)
        assert len(batches) == stop and {e for e, _ in batches} == {0}
        head += samples_of(batches, 0)
        if rank == 0:
            saved = state
    taken = stop * BATCH * world
    assert sorted(head) == sorted(order[:taken])

    # The rest, dealt round-robin from where the saved ranks were; every new rank resumes from rank 0's
    # state with its own rank and world size.
    left = SAMPLES - taken
    mine = -(-left // new_world) if remainder == "pad" else left // new_world
    rest = []
    counts = set()
    for rank in range(new_world):
        batches, _ = run(config, rank, new_world, state=saved, **keys)
        expected = cut([order[(taken + rank + new_world * j) % SAMPLES] for j in range(mine)], drop_last)
        assert [b for e, b in batches if e == 0] == expected, rank
        fresh, _ = run(config, rank, new_world, **keys)
        assert [b for b in batches if b[0] == 1] == [b for b in fresh if b[0] == 1], rank  # later epochs
        counts.add(len(batches))
        rest += samples_of(batches, 0)
    assert len(counts) == 1  # equal batch counts on every new rank

    delivered = head + rest
    if remainder == "drop" or left % new_world == 0:
        assert len(delivered) == len(set(delivered))  # nothing twice
    else:
        assert len(delivered) - len(set(delivered)) == new_world - left % new_world  # the padding only
    if not drop_last:
        missing = SAMPLES - len(set(delivered))
        assert missing == (left % new_world if remainder == "drop" else 0)


def test_a_resumed_run_resumes_again_on_yet_another_number_of_ranks(tmp_path):
    config = token_data(tmp_path)
    order = samples_of(run(config, 0, 1)[0], 0)
    first = [run(config, rank, 2, stop=3) for rank in range(2)]
    delivered = [s for batches, _ in first for s in samples_of(batches, 0)]
    second = [run(config, rank, 3, state=first[0][1], stop=2) for rank in range(3)]
    delivered += [s for batches, _ in second for s in samples_of(batches, 0)]
    state = second[0][1]
    assert state["next"]["consumed"] == 3 * BATCH * 2 + 2 * BATCH * 3
    for rank in range(4):
        batches, _ = run(config, rank, 4, state=state)
        delivered += samples_of(batches, 0)
    # 97 - 48 = 49 left for 4 ranks: 13 each, 3 of them padding.
    assert sorted(set(delivered)) == sorted(order)
    assert len(delivered) == SAMPLES + 3


def test_the_same_ranks_resume_bit_for_bit_from_rank_0s_state(tmp_path):
    config = token_data(tmp_path)
    full = [run(config, rank, 3)[0] for rank in range(3)]
    _, state = run(config, 0, 3, stop=5)
    for rank in range(3):
        batches, _ = run(config, rank, 3, state=state)
        assert full[rank][5:] == batches


def test_a_mixture_resumes_on_the_ranks_that_saved_it_only(tmp_path):
    config = token_data(tmp_path)
    part = config["source"]
    config["source"] = {"mix": [{"weight": 0.5, "source": part}, {"weight": 0.5, "source": dict(part)}]}
    _, state = run(config, 0, 2, stop=2)
    run(config, 1, 2, state=state)  # the same number of ranks: fine
    with pytest.raises(ferry.ConfigError, match=r"sampler.world_size.*2 ranks.*has 3.*same number|"
                                                r"sampler.world_size.*mixture resumes on the number of ranks"):
        run(config, 0, 3, state=state)


def test_states_that_do_not_fit_are_refused_naming_the_key(tmp_path):
    config = token_data(tmp_path)
    _, state = run(config, 0, 2, stop=3, **{"sampler.remainder": "pad"})
    with pytest.raises(ferry.ConfigError, match="sampler.remainder"):  # another end of the epoch
        run(config, 0, 3, state=state, **{"sampler.remainder": "drop"})
    resumed = [run(config, rank, 3, state=state, stop=1) for rank in range(3)]
    edited = dict(resumed[0][1], next=dict(resumed[0][1]["next"], position=resumed[0][1]["next"]["position"] + 1))
    with pytest.raises(ferry.ConfigError, match="next.position"):  # no longer where the rest starts
        run(config, 0, 3, state=edited)
    skipping = {**config, "decode": {"on_error": "skip"}}
    _, alone = run(skipping, 0, 1, stop=3)
    edited = dict(alone, next=dict(alone["next"], consumed=40))
    with pytest.raises(ferry.ConfigError, match="next.consumed"):
        run(skipping, 0, 2, state=edited)
