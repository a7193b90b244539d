"""ferry.uvm: refusals with the reason where unified memory cannot work (a CPU build here), and on a
GPU the managed pool, prefetch and advice read back from the driver, the module helpers' byte counts
and skips, refusals of other memory, and no leak over many pools."""

import ctypes
import gc
import warnings

import pytest
import torch

import ferry
import ferry.uvm as uvm

SUPPORTED, REASON = uvm.is_supported()
needs_uvm = pytest.mark.skipif(not SUPPORTED, reason=f"unified memory is not available: {REASON}")
needs_no_uvm = pytest.mark.skipif(SUPPORTED, reason="unified memory works here (the GPU tests cover it)")
HAS_MEMPOOL = hasattr(torch.cuda.memory, "MemPool") and hasattr(torch.cuda, "use_mem_pool")

MiB = 1 << 20


def test_is_supported_returns_a_flag_and_a_reason():
    supported, reason = uvm.is_supported()
    assert isinstance(supported, bool) and isinstance(reason, str)
    assert supported == (reason == "")
    if ferry.build_kind == "CPU":
        assert not supported
        assert "CPU build" in reason and ferry.build_reason in reason
    absent, why = uvm.is_supported(4096)
    assert not absent and why


def test_the_error_is_a_ferry_error_exported_at_the_top():
    assert uvm.UnifiedMemoryUnsupportedError is ferry.UnifiedMemoryUnsupportedError
    assert issubclass(ferry.UnifiedMemoryUnsupportedError, ferry.Error)
    assert issubclass(ferry.UnifiedMemoryUnsupportedError, RuntimeError)


def test_the_allocator_functions_are_exported_for_torch():
    # torch's CUDAPluggableAllocator finds them with ctypes, as here.
    library = ctypes.CDLL(ferry._C.__file__)
    assert library.ferry_uvm_malloc is not None
    assert library.ferry_uvm_free is not None


def test_host_memory_is_not_managed():
    tensor = torch.arange(8.0)
    assert not uvm.is_managed(tensor)
    where = uvm.describe_memory(tensor)
    assert where == "pageable host memory (unknown to CUDA)" or "cannot describe" in where


@needs_no_uvm
@pytest.mark.parametrize(
    "function, call",
    [
        ("create_unified_mempool", lambda t, m: uvm.create_unified_mempool()),
        ("prefetch_managed_tensor", lambda t, m: uvm.prefetch_managed_tensor(t, device=0)),
        ("prefetch_managed_tensor", lambda t, m: uvm.prefetch_managed_tensor(t, device=-1)),
        ("prefetch_managed_tensor", lambda t, m: uvm.prefetch_managed_tensor(t, device=-9)),
        ("advise_managed_tensor_preferred_location", lambda t, m: uvm.advise_managed_tensor_preferred_location(t, device=-1)),
        ("advise_managed_tensor_accessed_by", lambda t, m: uvm.advise_managed_tensor_accessed_by(t, device=-1)),
        ("prefetch_managed_module_parameters", lambda t, m: uvm.prefetch_managed_module_parameters(m, device=0)),
        ("prefetch_managed_module_parameters", lambda t, m: uvm.prefetch_managed_module_parameters(torch.nn.Module(), device=-1)),
        ("advise_managed_module_parameters_preferred_location",
         lambda t, m: uvm.advise_managed_module_parameters_preferred_location(m, device=-1, include_buffers=True)),
        ("managed_tensor_attributes", lambda t, m: uvm.managed_tensor_attributes(t)),
    ],
)
def test_every_helper_raises_the_reason_first_where_unsupported(function, call):
    tensor = torch.ones(4, 4)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with pytest.raises(uvm.UnifiedMemoryUnsupportedError) as raised:
        call(tensor, module)
    error = raised.value
    assert isinstance(error, ferry.Error)
    assert str(error).startswith(f"ferry: {function}: unified memory is not available: "), str(error)
    assert REASON in str(error) or uvm.is_supported(0)[1] in str(error)
    assert error.cause.startswith(f"{function}: ")
    assert error.stage is None and error.sample is None


@pytest.mark.skipif(HAS_MEMPOOL, reason=f"torch {torch.__version__} has torch.cuda.MemPool")
def test_a_torch_without_mempool_is_named_as_the_reason():
    reason = uvm._mempool_unavailable_reason()
    assert "torch.cuda.memory.MemPool" in reason and torch.__version__ in reason
    error = uvm._unsupported(f"create_unified_mempool: unified memory is not available: {reason}")
    assert isinstance(error, ferry.Error) and error.cause.endswith(reason)


# ---- on a GPU ----------------------------------------------------------------------------------

# Unified memory and a torch with MemPool; the skip names the first that is missing.
needs_pool = pytest.mark.skipif(
    not SUPPORTED or not HAS_MEMPOOL,
    reason=f"unified memory is not available: {REASON}" if not SUPPORTED else f"torch {torch.__version__} has no torch.cuda.MemPool",
)


@pytest.fixture(scope="module")
def pool():
    return uvm.create_unified_mempool()


def managed(pool, *shape, dtype=torch.float32):
    with torch.cuda.use_mem_pool(pool):
        return torch.randn(*shape, device="cuda:0").to(dtype)


@needs_pool
def test_the_pools_tensors_are_managed_and_advised_for_the_device(pool):
    reference = torch.randn(3000, 17, generator=torch.Generator().manual_seed(4))
    with torch.cuda.use_mem_pool(pool):
        tensor = reference.to("cuda:0")
    assert uvm.is_managed(tensor) and uvm.describe_memory(tensor) == "managed memory"
    attributes = uvm.managed_tensor_attributes(tensor)
    assert attributes["preferred_location"] == 0 and attributes["accessed_by"] == [0]
    assert torch.equal(tensor.cpu(), reference)
    outside = torch.empty(16, device="cuda:0")
    assert not uvm.is_managed(outside)


@needs_pool
def test_prefetch_and_advice_are_read_back(pool):
    tensor = managed(pool, 1 << 20)
    expected = tensor.cpu()
    uvm.prefetch_managed_tensor(tensor, device=-1)
    torch.cuda.synchronize()
    assert uvm.managed_tensor_attributes(tensor)["last_prefetch_location"] == -1
    stream = torch.cuda.Stream()
    uvm.prefetch_managed_tensor(tensor, device=0, stream=stream)
    stream.synchronize()
    assert uvm.managed_tensor_attributes(tensor)["last_prefetch_location"] == 0
    assert torch.equal(tensor.cpu(), expected)
    uvm.advise_managed_tensor_preferred_location(tensor, device=-1)
    assert uvm.managed_tensor_attributes(tensor)["preferred_location"] == -1
    uvm.advise_managed_tensor_preferred_location(tensor, device=0)
    assert uvm.managed_tensor_attributes(tensor)["preferred_location"] == 0
    uvm.advise_managed_tensor_accessed_by(tensor, device=0)
    assert uvm.managed_tensor_attributes(tensor)["accessed_by"] == [0]
    with pytest.raises(ferry.Error, match="needs a GPU"):
        uvm.advise_managed_tensor_accessed_by(tensor, device=-1)
    with pytest.raises(TypeError):
        uvm.prefetch_managed_tensor(tensor, device=0, stream=7)


@needs_pool
def test_module_helpers_count_managed_bytes_and_warn_about_the_rest(pool):
    with torch.cuda.use_mem_pool(pool):
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 32)).cuda()
    model.extra = torch.nn.Parameter(torch.zeros(5, device="cuda:0"))  # the caching allocator's memory
    managed_parameters = [p for n, p in model.named_parameters() if n != "extra"]
    parameter_bytes = sum(p.numel() * p.element_size() for p in managed_parameters)
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())

    with pytest.warns(uvm.UnmanagedTensorsSkipped) as warned:
        assert uvm.prefetch_managed_module_parameters(model, device=-1) == parameter_bytes
    assert [w.message.names for w in warned] == [["extra"]]
    torch.cuda.synchronize()
    for parameter in managed_parameters:
        assert uvm.managed_tensor_attributes(parameter)["last_prefetch_location"] == -1

    with pytest.warns(uvm.UnmanagedTensorsSkipped):
        assert uvm.prefetch_managed_module_parameters(model, device=0, include_buffers=True) == parameter_bytes + buffer_bytes
    torch.cuda.synchronize()
    for buffer in model.buffers():
        assert uvm.managed_tensor_attributes(buffer)["last_prefetch_location"] == 0

    with pytest.warns(uvm.UnmanagedTensorsSkipped):
        uvm.advise_managed_module_parameters_preferred_location(model, device=-1)
    assert all(uvm.managed_tensor_attributes(p)["preferred_location"] == -1 for p in managed_parameters)

    # Tied weights count once; a model without unmanaged tensors warns nothing.
    with torch.cuda.use_mem_pool(pool):
        tied = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False)).cuda()
    tied[1].weight = tied[0].weight
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert uvm.prefetch_managed_module_parameters(tied, device=0) == 8 * 8 * 4


@needs_uvm
def test_memory_that_is_not_managed_is_refused_saying_where_it_is():
    with pytest.raises(ferry.Error, match=r"tensor \(float32 \[16\] on cuda:0\) is not in managed memory but in device memory on cuda:0"):
        uvm.prefetch_managed_tensor(torch.zeros(16, device="cuda:0"), device=0)
    with pytest.raises(ferry.Error, match=r"pageable host memory \(unknown to CUDA\)"):
        uvm.advise_managed_tensor_preferred_location(torch.zeros(2, 3), device=0)
    with pytest.raises(ferry.Error, match="pinned host memory"):
        uvm.advise_managed_tensor_accessed_by(torch.zeros(4).pin_memory(), device=0)


@needs_pool
def test_a_segment_larger_than_the_free_memory_is_refused_with_ferrys_message(pool):
    free, _ = torch.cuda.mem_get_info(0)
    asked = free + (1 << 30)
    with torch.cuda.use_mem_pool(pool):
        with pytest.raises(RuntimeError, match="refusing .* of managed memory on cuda:0") as raised:
            torch.empty(asked, dtype=torch.uint8, device="cuda:0")
        assert isinstance(raised.value, torch.cuda.OutOfMemoryError), type(raised.value)
        assert "free" in str(raised.value)
        small = torch.ones(10, device="cuda:0")  # the pool still works
    assert uvm.is_managed(small)
    assert abs(torch.cuda.mem_get_info(0)[0] - free) < 64 * MiB


@needs_pool
def test_hundred_pools_created_and_destroyed_leak_nothing():
    def cycle(value):
        pool = uvm.create_unified_mempool()
        with torch.cuda.use_mem_pool(pool):
            tensor = torch.empty(64 * MiB // 4, device="cuda:0")
        tensor.fill_(value)  # touched on the GPU: resident pages
        assert uvm.is_managed(tensor)
        del tensor
        del pool
        gc.collect()
        torch.cuda.synchronize()

    cycle(0.0)  # the first one may set up state that stays
    before = torch.cuda.mem_get_info(0)[0]
    for value in range(100):
        cycle(float(value))
    after = torch.cuda.mem_get_info(0)[0]
    assert abs(after - before) < 16 * MiB, (before, after)
