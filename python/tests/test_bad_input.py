"""What ferry's Python API does with input that is not what it needs: a ferry.Error (or TypeError for
a wrong type) that says what to change, never another exception from inside the binding, and loops
that either go on consistently or say why they cannot."""

import numpy as np
import pytest
import torch

import ferry


def config(samples=64, batch_size=4, epochs=2):
    return {
        "source": {"kind": "synthetic", "samples": samples, "seed": 5,
                   "fields": [{"name": "x", "dtype": "int64", "shape": [3]}]},
        "batch_size": batch_size,
        "sampler": {"epochs": epochs},
        "decode": {"threads": 2},
        "transfer": {"device": "cpu"},
    }


def indices(batch):
    return batch.sample_indices if hasattr(batch, "sample_indices") else batch["x"][:, 0].tolist()


def test_load_state_dict_inside_an_open_loop_ends_that_loop_and_loses_no_epoch():
    with ferry.Pipeline(config()) as pipeline:
        start = pipeline.state_dict()
        loop = iter(pipeline)
        first = [next(loop)["x"].clone() for _ in range(3)]
        pipeline.load_state_dict(start)
        with pytest.raises(ferry.Error, match="load_state_dict"):
            next(loop)
        # The restarted run delivers both epochs whole, from the start.
        epochs = [[batch["x"].clone() for batch in pipeline] for _ in range(pipeline.epochs)]
        assert [len(epoch) for epoch in epochs] == [16, 16]
        for got, want in zip(epochs[0][:3], first):
            assert torch.equal(got, want)


def test_a_second_loop_while_the_first_is_open_ends_the_first_saying_so():
    with ferry.Pipeline(config()) as pipeline:
        a = iter(pipeline)
        next(a)
        b = iter(pipeline)
        assert next(b) is not None
        with pytest.raises(ferry.Error, match="another loop"):
            list(a)
        assert len(list(b)) == 15  # the second loop goes on with its epoch


def test_override_keys_with_an_equals_sign_or_of_another_type_are_refused():
    with pytest.raises(ferry.Error, match="holds no '='"):
        ferry.Pipeline(config(), overrides={"batch_size=16 #": "x"})
    with pytest.raises(TypeError, match="a key must be a str"):
        ferry.Pipeline(config(), overrides={3: "x"})
    # numpy numbers are numbers
    with ferry.Pipeline(config(), overrides={"batch_size": np.uint16(8)}) as pipeline:
        assert next(iter(pipeline))["x"].shape[0] == 8


def test_override_problems_are_named_as_the_program_gave_them_and_objects_in_a_list_are_refused():
    with pytest.raises(ferry.ConfigError) as raised:
        ferry.Pipeline(config(), overrides={"decode.threads": "many"})
    assert "overrides['decode.threads'] = many: decode.threads: expected" in str(raised.value)
    assert "--set" not in str(raised.value)
    with pytest.raises(ferry.ConfigError, match=r"overrides\['decode.threads'\] = 0"):
        ferry.Pipeline(config(), overrides=["decode.threads=0"])
    with pytest.raises(TypeError, match=r"each item must be a 'key=value' str.*tuple"):
        ferry.Pipeline(config(), overrides=[("decode.threads", 2)])
    with pytest.raises(TypeError, match=r"config\['decode'\]\['threads'\] is a object"):
        ferry.Pipeline({**config(), "decode": {"threads": object()}})


def test_a_config_that_holds_itself_is_too_deep_or_holds_an_object_is_refused():
    looped = config()
    looped["source"]["loop"] = looped
    with pytest.raises(ferry.Error, match="holds itself"):
        ferry.Pipeline(looped)
    listed = config()
    inner = []
    inner.append(inner)
    listed["source"]["fields"] = inner
    with pytest.raises(ferry.Error, match="holds itself"):
        ferry.Pipeline(listed)
    deep = config()
    nested = []
    for _ in range(10000):
        nested = [nested]
    deep["source"]["deep"] = nested
    with pytest.raises(ferry.Error, match="nested more than 100 levels"):
        ferry.Pipeline(deep)
    with_object = config()
    with_object["batch_size"] = object()
    with pytest.raises(TypeError, match=r"config\['batch_size'\] is a object"):
        ferry.Pipeline(with_object)
    numpy_valued = config()
    numpy_valued["batch_size"] = np.uint16(8)
    with ferry.Pipeline(numpy_valued) as pipeline:
        assert next(iter(pipeline))["x"].shape[0] == 8


def test_wrong_types_and_values_give_type_errors_or_ferry_errors():
    with ferry.Pipeline(config()) as pipeline:
        with pytest.raises(TypeError, match="not None"):
            pipeline.load_state_dict(None)
        with pytest.raises(TypeError, match="state must be"):
            pipeline.load_state_dict(3)
    for value in (-1, 0, 2**64):
        with pytest.raises(ferry.Error, match="min_packed_alignment_bytes must be in 1"):
            ferry.start_copy([torch.ones(2)], "cpu", min_packed_alignment_bytes=value)
    with pytest.raises(TypeError, match="must be an integer"):
        ferry.start_copy([torch.ones(2)], "cpu", max_packed_chunk_bytes=1.5)
    assert ferry.start_copy([torch.ones(2)], "cpu", min_packed_alignment_bytes=np.int64(8)).get()[0].sum() == 2


def test_total_batches_past_what_len_can_return_is_an_int():
    huge = config(samples=2**62, batch_size=1, epochs=3)
    with ferry.Pipeline(huge) as pipeline:
        assert pipeline.total_batches == 3 * 2**62  # past len()'s 2^63 - 1
        assert len(pipeline) == 2**62
