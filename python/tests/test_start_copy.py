"""ferry.start_copy against a per-tensor .to() reference, over random nested structures."""

import collections
import inspect
import random
import threading

import numpy as np
import pytest
import torch

import ferry

GPU = torch.cuda.is_available() and ferry.build_kind == "GPU"
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no CUDA device for this ferry build ({ferry.build_kind}: {ferry.build_reason})")

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.bool]
NUMPY_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]
Pair = collections.namedtuple("Pair", "left right")  # a tuple subclass: an opaque leaf


def random_tensor(rng, big=False):
    dtype = rng.choice(DTYPES)
    if big:  # over the 256 KiB packing limit
        shape = [rng.randint(300, 600), rng.randint(130, 260)]
    else:
        shape = [rng.choice([0, 1, 2, 3, 7, 16, 33]) for _ in range(rng.randint(0, 3))]
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    if dtype == torch.bool:
        tensor = torch.randint(0, 2, shape, generator=generator).bool()
    elif dtype.is_floating_point:
        tensor = (torch.randn(shape, generator=generator) * 100).to(dtype)
    else:
        info = torch.iinfo(dtype)
        tensor = torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=generator, dtype=torch.int64).to(dtype)
    view = rng.random()
    if tensor.dim() >= 2 and view < 0.2:
        tensor = tensor.transpose(0, 1)  # non-contiguous
    elif tensor.dim() >= 1 and tensor.shape[0] > 2 and view < 0.35:
        tensor = tensor[::2]  # strided
    return tensor


def random_leaf(rng, devices):
    kind = rng.random()
    if kind < 0.55:
        tensor = random_tensor(rng, big=rng.random() < 0.04)
        return tensor.to(rng.choice(devices))
    if kind < 0.7:
        dtype = rng.choice(NUMPY_DTYPES)
        shape = [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]
        return np.random.default_rng(rng.randrange(2**31)).integers(0, 100, shape).astype(dtype)
    return rng.choice(["a string", None, 7, 2.5, b"bytes", Pair(torch.ones(2), "x"), collections.OrderedDict(k=torch.zeros(1))])


def random_structure(rng, devices, depth=0):
    kind = rng.random()
    if depth >= 4 or kind < 0.3:
        return random_leaf(rng, devices)
    items = [random_structure(rng, devices, depth + 1) for _ in range(rng.randint(0, 6))]
    if kind < 0.55:
        return items
    if kind < 0.75:
        return tuple(items)
    keys = rng.sample(["z", "a", "m", 3, "b", (1, 2), "q"], min(len(items), 7))
    return dict(zip(keys, items))


def reference(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).to(device)
    if type(value) is list:
        return [reference(v, device) for v in value]
    if type(value) is tuple:
        return tuple(reference(v, device) for v in value)
    if type(value) is dict:
        return {k: reference(v, device) for k, v in value.items()}
    return value


def assert_same(got, want, original, path="data"):
    assert type(got) is type(want), f"{path}: {type(got).__name__} instead of {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.device == want.device, path
        assert torch.equal(got.cpu(), want.cpu()), f"{path}: values differ"
        if isinstance(original, torch.Tensor) and original.device == want.device:
            assert got is original, f"{path}: a tensor already on the target must be reused as it is"
    elif type(want) in (list, tuple):
        assert len(got) == len(want), path
        for i, (g, w, o) in enumerate(zip(got, want, original)):
            assert_same(g, w, o, f"{path}[{i}]")
    elif type(want) is dict:
        assert list(got) == list(want), f"{path}: keys or their order differ"
        for key in want:
            assert_same(got[key], want[key], original[key], f"{path}[{key!r}]")
    else:
        assert got is original, f"{path}: a leaf must pass through unchanged"


def random_options(rng):
    return dict(use_pinned_staging=rng.random() < 0.7, pack_cpu_tensors=rng.random() < 0.8,
                min_packed_alignment_bytes=rng.choice([1, 2, 3, 6, 16, 24, 64, 100, 256]),
                max_packed_chunk_bytes=rng.choice([64, 1000, 4096, 65536, 32 * 2**20]),
                use_background_thread=rng.random() < 0.6)


def check_random_structures(devices, targets, count, seed):
    rng = random.Random(seed)
    for case in range(count):
        target = rng.choice(targets)
        data = random_structure(rng, devices)
        options = random_options(rng)
        handle = ferry.start_copy(data, target, **options)
        got = handle.get()
        assert handle.get() is got  # every get() returns the same result
        assert_same(got, reference(data, target), data, f"case {case} {options}")
        plan = handle.plan()
        assert all(b <= options["max_packed_chunk_bytes"] for b in plan["chunk_payload_bytes"]), (case, plan)
        assert len(plan["chunk_payload_bytes"]) == plan["packed_chunks"]


def test_random_structures_to_the_cpu():
    check_random_structures(["cpu"], ["cpu"], 250, seed=1)


def test_cpu_tensors_are_reused_and_numpy_arrays_become_tensors_sharing_memory():
    tensor = torch.arange(10)
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ferry.start_copy({"t": tensor, "a": array, "s": "x"}, "cpu").get()
    assert got["t"] is tensor
    assert isinstance(got["a"], torch.Tensor) and got["a"].data_ptr() == array.ctypes.data
    assert got["s"] == "x"
    assert ferry.start_copy(tensor, "cpu").get() is tensor  # a bare tensor is a structure too


def test_only_exact_list_tuple_and_dict_are_containers():
    inner = torch.ones(3)
    pair, ordered = Pair(inner, 1), collections.OrderedDict(a=inner)
    got = ferry.start_copy([pair, ordered, (inner,)], "cpu").get()
    assert got[0] is pair and got[1] is ordered and got[2][0] is inner


def test_bad_options_and_devices_raise_at_once():
    with pytest.raises(ferry.Error, match=r"min_packed_alignment_bytes must be in 1..2\^63-1, got 0"):
        ferry.start_copy([torch.ones(1)], "cpu", min_packed_alignment_bytes=0)
    with pytest.raises(ferry.Error, match="max_packed_chunk_bytes"):
        ferry.start_copy([torch.ones(1)], "cpu", max_packed_chunk_bytes=0)
    with pytest.raises(RuntimeError):
        ferry.start_copy([torch.ones(1)], "tpu:0")


@pytest.mark.skipif(GPU, reason="checks the message of a machine without a usable GPU")
def test_a_gpu_target_without_a_gpu_fails_at_start_with_the_reason():
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ferry.Error, match="cannot copy to cuda.*(GPU|CUDA)"):
            ferry.start_copy([torch.ones(4)], device)


def test_numpy_views_of_every_layout_become_their_values():
    base = np.arange(60, dtype=np.int32).reshape(6, 10)
    views = [base[::-1], base.T, base[:, ::-3], base[1:4, 2:9:2], np.float16(3.5) * np.ones((2, 0))]
    got = ferry.start_copy(views, "cpu").get()
    for view, tensor in zip(views, got):
        assert torch.equal(tensor, torch.from_numpy(np.ascontiguousarray(view)))


def test_a_structure_that_contains_itself_raises_recursion_error():
    loop = [torch.ones(1)]
    loop.append(loop)
    with pytest.raises(RecursionError):
        ferry.start_copy(loop, "cpu")


def test_plan_before_get_waits_for_the_submission():
    handle = ferry.start_copy([torch.ones(3), "x", torch.zeros(2)], "cpu")
    assert handle.plan()["reused"] == 2
    assert handle.get()[1] == "x"


def test_a_failing_tensor_is_named_by_its_place_in_the_structure():
    bad = torch.ones(2, device="meta")  # no device can copy from it
    handle = ferry.start_copy({"x": [torch.ones(1), bad], "y": "z"}, "cpu")
    with pytest.raises(ferry.Error, match=r"data\['x'\]\[1\]: tensor 1 of 2 \(Float \[2\] on meta\)") as raised:
        handle.get()
    assert raised.value.stage == "copy"


def test_the_device_may_be_a_torch_device_and_the_defaults_are_multi_tensor_copiers():
    data = [torch.arange(4), {"a": np.ones(3)}]
    got = ferry.start_copy(data, torch.device("cpu")).get()
    assert torch.equal(got[0], data[0]) and torch.equal(got[1]["a"], torch.ones(3, dtype=torch.float64))
    defaults = {name: parameter.default for name, parameter in inspect.signature(ferry.start_copy).parameters.items()
                if parameter.default is not inspect.Parameter.empty}
    assert defaults == dict(use_pinned_staging=True, pack_cpu_tensors=True, min_packed_alignment_bytes=16,
                            max_packed_chunk_bytes=32 * 2**20, use_background_thread=True)


def test_the_options_are_keyword_only_as_in_multi_tensor_copier():
    with pytest.raises(TypeError):
        ferry.start_copy([torch.ones(1)], "cpu", True)  # use_pinned_staging given by position


def test_errors_are_runtime_errors_and_ready_is_true_once_get_returned():
    assert issubclass(ferry.Error, RuntimeError)  # multi_tensor_copier's get() raises RuntimeError
    handle = ferry.start_copy([np.array([1, 2, 3]), np.array([4, 5, 6])], "cpu")  # multi_tensor_copier's numpy example
    got = handle.get()
    assert handle.ready()
    assert all(torch.equal(g, torch.tensor(v)) for g, v in zip(got, [[1, 2, 3], [4, 5, 6]]))


def test_a_handle_dropped_before_get_is_fine():
    for background in (True, False):
        for _ in range(50):
            handle = ferry.start_copy([torch.randn(1000) for _ in range(20)], "cpu", use_background_thread=background)
            del handle


def tensor_leaves(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif type(value) in (list, tuple):
        for item in value:
            yield from tensor_leaves(item)
    elif type(value) is dict:
        for item in value.values():
            yield from tensor_leaves(item)


def test_handles_dropped_in_every_order_on_several_threads_keep_their_values():
    # A handle whose results were handed out is dropped with the GIL held (Note [dropping a copy with
    # the GIL]), one that must still wait without it: both, on several threads at once, in every order of
    # dropping the handle, the results and the inputs. Nothing may hang or change a value.
    targets = gpus() or ["cpu"]
    failures = []

    def worker(seed):
        rng = random.Random(seed)
        try:
            for case in range(40):
                data = random_structure(rng, ["cpu"])
                target = rng.choice(targets)
                want = reference(data, target)
                handle = ferry.start_copy(data, target, use_background_thread=rng.random() < 0.7)
                order = rng.randrange(4)
                if order == 0:  # never asked for
                    del handle, data
                    continue
                got = handle.get()
                if order == 1:
                    del handle
                if order == 2:  # the inputs go first: only the values can be compared
                    del data
                    pairs = list(zip(tensor_leaves(got), tensor_leaves(want), strict=True))
                    assert all(g.device == w.device and torch.equal(g.cpu(), w.cpu()) for g, w in pairs), (seed, case)
                else:
                    assert_same(got, want, data, f"thread {seed} case {case}")
                del got
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    for threads in (1, 2, 4):
        workers = [threading.Thread(target=worker, args=(100 * threads + t,)) for t in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(timeout=120)
            assert not thread.is_alive(), "a start_copy hung"
    assert not failures, failures[0]


def gpus():
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if GPU else []


@needs_gpu
def test_random_structures_to_the_gpu_from_mixed_devices():
    # With several GPUs, inputs and targets spread over all of them (peer copies).
    check_random_structures(["cpu", "cpu"] + gpus(), gpus(), 250, seed=2)


@needs_gpu
def test_random_structures_from_the_gpu_to_the_cpu():
    check_random_structures(gpus() + gpus() + ["cpu"], ["cpu"], 200, seed=3)


@needs_gpu
def test_small_chunks_make_several_packed_copies():
    tensors = [torch.full((250,), i, dtype=torch.float32) for i in range(40)]  # 1000 bytes each
    handle = ferry.start_copy(tensors, "cuda:0", max_packed_chunk_bytes=4096, min_packed_alignment_bytes=16)
    got = handle.get()
    plan = handle.plan()
    assert plan["packed"] == 40 and plan["packed_chunks"] == 10  # 4 x (1000 -> 1008 aligned) per 4096
    assert all(torch.equal(g.cpu(), t) for g, t in zip(got, tensors))


@needs_gpu
def test_tensors_of_at_most_256_kib_are_packed_and_larger_ones_are_not():
    edge = 256 * 1024
    tensors = [torch.full((edge,), 1, dtype=torch.uint8), torch.full((edge + 1,), 2, dtype=torch.uint8),
               torch.full((edge // 4,), 3.0), torch.full((edge // 4 + 1,), 4.0)]
    handle = ferry.start_copy(tensors, torch.device("cuda:0"))
    got = handle.get()
    assert handle.plan()["packed"] == 2  # the two of exactly 256 KiB
    assert all(torch.equal(g.cpu(), t) for g, t in zip(got, tensors))


@needs_gpu
def test_gpu_to_cpu_results_are_pinned_with_staging():
    data = [torch.randn(100, device="cuda"), torch.arange(5, device="cuda")]
    pinned = ferry.start_copy(data, "cpu").get()
    assert all(t.is_pinned() for t in pinned)
    pageable = ferry.start_copy(data, "cpu", use_pinned_staging=False).get()
    assert all(torch.equal(a, b.cpu()) for a, b in zip(pageable, data))


@needs_gpu
def test_results_are_safe_on_the_current_stream_right_after_get():
    side = torch.cuda.Stream()
    rng = random.Random(4)
    handles = []  # kept: a dropped handle waits on the host, which would hide a missing stream wait
    with torch.cuda.stream(side):
        for _ in range(20):
            data = [random_tensor(rng) for _ in range(50)] + [random_tensor(rng, big=True), torch.randn(4 << 20)]
            handles.append(ferry.start_copy(data, "cuda:0"))
            got = handles[-1].get()
            clones = [g.clone() for g in got]  # kernels on `side`, queued right after get()
            del got  # the results' memory may be reused now, but not under those kernels
            for c, d in zip(clones, data):
                assert torch.equal(c.cpu(), d)


@needs_gpu
def test_pinned_inputs_may_be_overwritten_once_get_returns():
    for pack in (True, False):
        inputs = [torch.randn(1 << 20).pin_memory() for _ in range(4)] + [torch.randn(100).pin_memory()]
        expected = [t.clone() for t in inputs]
        handle = ferry.start_copy(inputs, "cuda:0", pack_cpu_tensors=pack)
        got = handle.get()
        for t in inputs:
            t.fill_(-1.0)  # the copies must have read them already
        assert all(torch.equal(g.cpu(), e) for g, e in zip(got, expected))
        del handle


@needs_gpu
def test_gpu_inputs_may_be_overwritten_on_their_stream_once_get_returns():
    inputs = [torch.randn(1 << 22, device="cuda"), torch.arange(1000, device="cuda")]
    expected = [t.cpu() for t in inputs]
    handle = ferry.start_copy(inputs, "cpu")
    got = handle.get()
    for t in inputs:
        t.zero_()
    assert all(torch.equal(g, e) for g, e in zip(got, expected))


@needs_gpu
def test_multi_tensor_copiers_example_and_ready_once_get_returned():
    data = [torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])]
    handle = ferry.start_copy(data, "cuda:0")
    result = handle.get()
    torch.cuda.current_stream().synchronize()  # get() queued the copies; the current stream waits for them
    assert handle.ready()
    assert [r.device.type for r in result] == ["cuda", "cuda"]
    assert all(torch.equal(r.cpu(), d) for r, d in zip(result, data))


@needs_gpu
def test_only_contiguous_cpu_tensors_are_packed_and_pack_cpu_tensors_false_packs_none():
    small = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    tensors = [small, small.t(), small[::2], torch.arange(10)]
    for pack, packed in ((True, 2), (False, 0)):
        handle = ferry.start_copy(tensors, "cuda:0", pack_cpu_tensors=pack)
        got = handle.get()
        plan = handle.plan()
        assert plan["packed"] == packed and plan["staged"] == len(tensors) - packed, (pack, plan)
        assert plan["packed_chunks"] == (1 if pack else 0)
        assert all(torch.equal(g.cpu(), reference(t, "cpu")) for g, t in zip(got, tensors))
