"""ferry.uvm: CUDA unified (managed) memory for tensors and modules.

Managed memory (``cudaMallocManaged``) lives at one address that both the host and the GPU can use;
the driver moves its pages to whichever side touches them. Tensors made in it can be prefetched to
the GPU before use and back to the host to free the card, without changing their addresses, so
captured CUDA graphs stay valid::

    import ferry.uvm as uvm

    pool = uvm.create_unified_mempool()                      # needs torch >= 2.5 (MemPool)
    with torch.cuda.use_mem_pool(pool):
        model = build_model().cuda()                         # its weights are managed
    uvm.prefetch_managed_module_parameters(model, device=-1)   # offload to the host
    ...
    uvm.prefetch_managed_module_parameters(model, device=0)    # back, before the next step

Devices are ints: 0, 1, ... are GPUs, -1 is the host (the CPU).

Where unified memory cannot work — a CPU build of ferry, no CUDA device, a device without
concurrent managed access (Windows, WSL, GPUs before Pascal) — every function here except
:func:`is_supported` raises :class:`UnifiedMemoryUnsupportedError` (a :class:`ferry.Error`), whose
message starts with the function's name and says why. A tensor that is not in managed memory is
refused with :class:`ferry.Error` saying where its memory is; the module helpers skip such tensors
instead, and say so with a :class:`UnmanagedTensorsSkipped` warning.
"""

from __future__ import annotations

import operator
import threading
import warnings
from typing import Any, Iterator, Optional, Tuple

import torch

from ferry import _C

UnifiedMemoryUnsupportedError = _C.UnifiedMemoryUnsupportedError

__all__ = [
    "UnifiedMemoryUnsupportedError",
    "UnmanagedTensorsSkipped",
    "advise_managed_module_parameters_preferred_location",
    "advise_managed_tensor_accessed_by",
    "advise_managed_tensor_preferred_location",
    "create_unified_mempool",
    "describe_memory",
    "is_managed",
    "is_supported",
    "managed_tensor_attributes",
    "prefetch_managed_module_parameters",
    "prefetch_managed_tensor",
]

# The allocator functions ferry._C exports for torch.cuda.memory.CUDAPluggableAllocator.
_ALLOC_FUNCTION = "ferry_uvm_malloc"
_FREE_FUNCTION = "ferry_uvm_free"

_allocator_lock = threading.Lock()
_allocator: Any = None  # one CUDAPluggableAllocator for every pool, alive as long as the process


class UnmanagedTensorsSkipped(UserWarning):
    """Warned by the module helpers when some parameters (or buffers) are not in managed memory and
    were skipped. ``names`` lists them, as ``module.named_parameters()`` names them."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


def is_supported(device: Optional[int] = None) -> Tuple[bool, str]:
    """Whether unified memory works on ``device`` (default: the current CUDA device).

    Returns:
        ``(True, "")`` when it does, else ``(False, reason)``, the reason being what
        :class:`UnifiedMemoryUnsupportedError` would say: a CPU build of ferry, no CUDA device, no
        such device, or no concurrent managed access. It does not check for ``torch.cuda.MemPool``,
        which only :func:`create_unified_mempool` needs. Never raises.
    """
    supported, reason = _C.uvm_support(-1 if device is None else operator.index(device))
    return bool(supported), str(reason)


def create_unified_mempool() -> Any:
    """A ``torch.cuda.MemPool`` whose memory is CUDA managed memory.

    Tensors allocated under ``torch.cuda.use_mem_pool(pool)`` are managed, each segment advised to
    prefer the device it was allocated on and to be accessed by it. torch's caching allocator serves
    them: it asks ferry for segments (rounded up to 2 MiB and more) and reuses freed blocks within
    the pool; the memory returns to CUDA when the pool is destroyed (after its tensors).

    A segment larger than the device's free memory is refused: the allocation raises
    ``torch.OutOfMemoryError`` with ferry's message (the size asked for and the free memory), never
    oversubscribing the card. torch's cached blocks are not released first; call
    ``torch.cuda.empty_cache()`` and retry if they hold the memory.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work (checked first), or when the
            installed torch has no ``torch.cuda.MemPool`` (torch < 2.5, such as Debian's 1.13).
    """
    _C.uvm_require(-1, "create_unified_mempool")
    reason = _mempool_unavailable_reason()
    if reason:
        raise _unsupported(f"create_unified_mempool: unified memory is not available: {reason}")
    return torch.cuda.memory.MemPool(_pluggable_allocator().allocator())


def prefetch_managed_tensor(tensor: torch.Tensor, *, device: int, stream: Optional[Any] = None) -> None:
    """Starts moving a managed tensor's pages to ``device`` (-1: the host), on ``stream`` (a
    ``torch.cuda.Stream``; default: torch's current stream of the device the prefetch runs on,
    which for the host is the device the memory was allocated on). Asynchronous, in stream order;
    the tensor keeps its address. A view moves every page from its first to its last element.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work.
        ferry.Error: the tensor is not in managed memory (the message says where it is), or
            ``device`` is below -1.
        TypeError: ``stream`` is not a CUDA stream.
    """
    _C.uvm_prefetch_tensor(tensor, operator.index(device), _stream_handle(stream), "tensor")


def advise_managed_tensor_preferred_location(tensor: torch.Tensor, *, device: int) -> None:
    """Advises the driver that a managed tensor's pages should live on ``device`` (-1: the host)
    (``cudaMemAdviseSetPreferredLocation``). A hint: nothing moves now; pages migrate there when
    evicted or touched.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work.
        ferry.Error: the tensor is not in managed memory.
    """
    _C.uvm_advise_preferred_location(tensor, operator.index(device), "tensor")


def advise_managed_tensor_accessed_by(tensor: torch.Tensor, *, device: int) -> None:
    """Advises that GPU ``device`` will access a managed tensor (``cudaMemAdviseSetAccessedBy``):
    the device keeps it mapped wherever its pages are, so its first touch does not fault.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work.
        ferry.Error: the tensor is not in managed memory, or ``device`` is not a GPU (-1 is refused).
    """
    _C.uvm_advise_accessed_by(tensor, operator.index(device), "tensor")


def prefetch_managed_module_parameters(module: torch.nn.Module, *, device: int, include_buffers: bool = False) -> int:
    """Prefetches every managed parameter of ``module`` and its submodules (and their buffers with
    ``include_buffers``) to ``device`` (-1: the host), on torch's current stream, as
    :func:`prefetch_managed_tensor`.

    Parameters that are not in managed memory are skipped, not refused: one
    :class:`UnmanagedTensorsSkipped` warning names them. Empty tensors, ``None`` buffers and a tensor
    reachable under two names (tied weights) count once or not at all.

    Returns:
        The bytes whose prefetch was started (of the managed tensors only).

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work (even for a module without
            parameters).
        ValueError: ``device`` is below -1.
    """
    device = _module_device(device, "prefetch_managed_module_parameters")
    total = 0
    skipped = []
    for name, label, tensor in _module_tensors(module, include_buffers):
        if not _C.uvm_is_managed(tensor):
            skipped.append(name)
            continue
        _C.uvm_prefetch_tensor(tensor, device, None, label)
        total += _C.uvm_span_bytes(tensor)
    _warn_skipped("prefetch_managed_module_parameters", skipped)
    return total


def advise_managed_module_parameters_preferred_location(
    module: torch.nn.Module, *, device: int, include_buffers: bool = False
) -> None:
    """:func:`advise_managed_tensor_preferred_location` for every managed parameter of ``module``
    (and buffer, with ``include_buffers``); the others are skipped with one
    :class:`UnmanagedTensorsSkipped` warning, as in :func:`prefetch_managed_module_parameters`.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work.
    """
    device = _module_device(device, "advise_managed_module_parameters_preferred_location")
    skipped = []
    for name, label, tensor in _module_tensors(module, include_buffers):
        if not _C.uvm_is_managed(tensor):
            skipped.append(name)
            continue
        _C.uvm_advise_preferred_location(tensor, device, label)
    _warn_skipped("advise_managed_module_parameters_preferred_location", skipped)


def managed_tensor_attributes(tensor: torch.Tensor) -> dict[str, Any]:
    """What the driver holds for a managed tensor's range (``cudaMemRangeGetAttribute``):
    ``preferred_location`` and ``last_prefetch_location`` (a GPU, -1 for the host, -2 for none or
    mixed pages) and ``accessed_by`` (the GPUs with that advice, ascending). The last prefetch
    location is where one was asked for, not necessarily finished.

    Raises:
        UnifiedMemoryUnsupportedError: where unified memory cannot work.
        ferry.Error: the tensor is not in managed memory.
    """
    return _C.uvm_tensor_attributes(tensor, "tensor")


def is_managed(tensor: torch.Tensor) -> bool:
    """Whether a tensor's memory is CUDA managed memory. Never raises (False without CUDA)."""
    return bool(_C.uvm_is_managed(tensor))


def describe_memory(tensor: torch.Tensor) -> str:
    """Where a tensor's memory is, as the errors say it: ``"managed memory"``,
    ``"device memory on cuda:0"``, ``"pinned host memory"``, ``"pageable host memory (unknown to
    CUDA)"``, or why CUDA cannot tell. Never raises."""
    return str(_C.uvm_describe_memory(tensor))


def _mempool_unavailable_reason() -> str:
    """Why this torch cannot make a pool of ferry's allocator, or "" when it can."""
    memory = getattr(torch.cuda, "memory", None)
    missing = [name for name in ("MemPool", "CUDAPluggableAllocator") if not hasattr(memory, name)]
    if missing:
        names = " and ".join(f"torch.cuda.memory.{name}" for name in missing)
        return f"torch {torch.__version__} has no {names} (torch.cuda.MemPool came with torch 2.5)"
    return ""


def _pluggable_allocator() -> Any:
    global _allocator
    with _allocator_lock:
        if _allocator is None:
            _allocator = torch.cuda.memory.CUDAPluggableAllocator(_C.__file__, _ALLOC_FUNCTION, _FREE_FUNCTION)
        return _allocator


def _unsupported(message: str) -> Exception:
    """A UnifiedMemoryUnsupportedError raised from Python, with the attributes ferry.Error has."""
    error = UnifiedMemoryUnsupportedError(f"ferry: {message}")
    error.stage = None
    error.sample = None
    error.epoch = None
    error.batch = None
    error.cause = message
    error.problems = []
    return error


def _module_device(device: int, function: str) -> int:
    """Checks support on `device` (the current one for the host) before anything else."""
    device = operator.index(device)
    _C.uvm_require(max(device, -1), function)
    if device < -1:
        raise ValueError(f"{function}: device {device} is neither a GPU (0, 1, ...) nor the CPU (-1)")
    return device


def _stream_handle(stream: Optional[Any]) -> Optional[int]:
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise TypeError(f"stream must be a torch.cuda.Stream or None, not {type(stream).__name__}")
    return int(handle)


def _module_tensors(module: torch.nn.Module, include_buffers: bool) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(name, label for errors, tensor) of each parameter (and buffer) with elements, once per memory range."""
    seen = set()
    groups = [("parameter", module.named_parameters())]
    if include_buffers:
        groups.append(("buffer", module.named_buffers()))
    for kind, named in groups:
        for name, tensor in named:
            if tensor is None or tensor.numel() == 0:
                continue
            key = (tensor.data_ptr(), _C.uvm_span_bytes(tensor))
            if key in seen:
                continue
            seen.add(key)
            yield name, f"{kind} '{name}'", tensor


def _warn_skipped(function: str, names: list[str]) -> None:
    if not names:
        return
    shown = ", ".join(repr(name) for name in names[:10]) + (", ..." if len(names) > 10 else "")
    noun = "tensor" if len(names) == 1 else "tensors"
    warnings.warn(
        UnmanagedTensorsSkipped(f"{function} skipped {len(names)} {noun} not in managed memory: {shown}", names),
        stacklevel=3,
    )
