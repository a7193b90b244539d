"""ferry.start_copy: one asynchronous copy of every tensor in a nested structure."""

from __future__ import annotations

import operator
from typing import Any, Union

import torch

from ferry import _C
from ferry.pipeline import _error

Device = Union[str, torch.device, int]


class AsyncCopyHandle:
    """A copy started by :func:`start_copy`. Keep it until the copy is consumed: dropping it early
    waits (without the GIL) for the copies still reading the inputs and staging buffers."""

    __slots__ = ("_copy",)

    def __init__(self, copy: _C.AsyncCopy) -> None:
        self._copy = copy

    def ready(self) -> bool:
        """Whether the copy has finished (or failed); never blocks."""
        return self._copy.ready()

    def get(self) -> Any:
        """Returns the structure with every tensor on the target device (numpy arrays as tensors),
        safe to use on the current CUDA stream. It blocks until the copies are queued; for a GPU
        target the current stream then waits for them on the device (as after ``.to(non_blocking=
        True)``), for a CPU target (and for pinned inputs read in place) the host waits for them.
        The inputs may be reused once it returns. Raises ferry.Error (a RuntimeError) if the copy
        failed, on every call."""
        return self._copy.get()

    def plan(self) -> dict[str, Any]:
        """How the tensors were moved, after get(): counts of ``reused`` (already on the target),
        ``packed`` (into ``packed_chunks`` staging chunks of ``chunk_payload_bytes``), ``staged``
        (through their own pinned buffer) and ``direct`` copies."""
        return self._copy.plan()


def start_copy(
    data: Any,
    device: Device,
    *,
    use_pinned_staging: bool = True,
    pack_cpu_tensors: bool = True,
    min_packed_alignment_bytes: int = 16,
    max_packed_chunk_bytes: int = 32 * 1024 * 1024,
    use_background_thread: bool = True,
) -> AsyncCopyHandle:
    """Starts copying every tensor in ``data`` to ``device`` and returns at once.

    ``data`` is a tensor, a numpy array, or nested ``list``/``tuple``/``dict`` of them (exactly
    those types: anything else, named tuples and dict subclasses included, is an opaque leaf and
    passes through unchanged, as do strings, numbers and ``None``). The result keeps the container
    types and dict order. Inputs may sit on different devices; those already on ``device`` are
    returned as they are. Every direction works: CPU→GPU, GPU→CPU, GPU→GPU, CPU→CPU.

    CPU→GPU (the case it is built for): contiguous CPU tensors of at most 256 KiB are packed into
    staging chunks of at most ``max_packed_chunk_bytes`` (each tensor at an offset aligned to
    ``max(min_packed_alignment_bytes, element size)``: any alignment of at least 1, and where it is
    not a power of two, to the least common multiple of the two, since a tensor must start at a
    multiple of its element size), and each chunk is one host-to-device copy;
    other tensors go through pinned staging (``use_pinned_staging``) or straight from their memory.
    GPU→CPU with ``use_pinned_staging``: the results are pinned tensors. With
    ``use_background_thread`` the packing and submission run on ferry's copy thread, else in this
    call (without the GIL).

    Do not free or modify the inputs in place until ``get()`` returned or ``ready()`` is True: the
    copies read them after this call returns.

    Raises:
        ferry.Error: invalid options or device (here); the copy's failure (from ``get()``).
    """
    return AsyncCopyHandle(
        _C.start_copy(
            data,
            str(torch.device(device)),
            bool(use_pinned_staging),
            bool(pack_cpu_tensors),
            _byte_count("min_packed_alignment_bytes", min_packed_alignment_bytes),
            _byte_count("max_packed_chunk_bytes", max_packed_chunk_bytes),
            bool(use_background_thread),
        )
    )


def _byte_count(name: str, value: Any) -> int:
    """``value`` as a count of bytes of at least 1: TypeError for what is not an integer (numpy ones
    are), ferry.Error for one out of range."""
    if isinstance(value, bool):
        raise TypeError(f"ferry.start_copy: {name} must be an integer, not bool")
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"ferry.start_copy: {name} must be an integer, not {type(value).__name__}") from None
    if not 1 <= count < 2**63:
        raise _error(f"ferry.start_copy: {name} must be in 1..2^63-1, got {count}")
    return count
