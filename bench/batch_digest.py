"""The Python twin of cli/batch_digest.cpp: the fingerprints `ferry run --digest` writes for a batch,
computed from tensors, so that a batch another loader (or ferry's Python binding) delivers can be
compared with ferry's bit for bit. Used by bench/loaders.py and python/tests/conftest.py.

Pure Python FNV-1a: a few MB per second, meant for checking a few batches, not whole runs.
"""
import numpy as np
import torch

# at::ScalarType's numbers (c10/core/ScalarType.h), which `ferry run --digest` hashes with each field.
SCALAR_TYPE = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
               torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15}
if hasattr(torch, "uint16"):
    SCALAR_TYPE[torch.uint16] = 27

FNV_OFFSET = 0xCBF29CE484222325


def fnv1a(data, state=FNV_OFFSET):
    """64-bit FNV-1a of `data` (bytes), continuing from `state`."""
    for byte in data:
        state = ((state ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return state


def indices_digest(indices):
    """The line's `indices` hash: FNV-1a of the sample indices as little-endian uint64."""
    return f"{fnv1a(np.asarray(indices, dtype='<u8').tobytes()):016x}"


def fields_digest(fields):
    """The line's `bytes` hash of (name, tensor) pairs in field order: each field's name, NUL, dtype
    number, shape (int64) and bytes (any device; read in C order)."""
    state = FNV_OFFSET
    for name, tensor in fields:
        host = tensor.cpu().contiguous()
        state = fnv1a(name.encode() + b"\0", state)
        state = fnv1a(np.int8(SCALAR_TYPE[host.dtype]).tobytes(), state)
        state = fnv1a(np.asarray(host.shape, dtype="<i8").tobytes(), state)
        state = fnv1a(host.reshape(-1).view(torch.uint8).numpy().tobytes(), state)
    return f"{state:016x}"
