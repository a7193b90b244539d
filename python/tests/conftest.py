"""Shared fixtures for the ferry package's tests (run by CTest: tests/CMakeLists.txt sets the
environment: PYTHONPATH to the built package, FERRY_CLI, FERRY_SOURCE_DIR and the datasets the CTest
fixtures write)."""

import os
import subprocess

import numpy as np
import pytest
import torch

import ferry

SOURCE_DIR = os.environ.get("FERRY_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG_DIR = os.path.join(SOURCE_DIR, "configs")

# at::ScalarType's numbers (c10/core/ScalarType.h), which `ferry run --digest` hashes with each field.
SCALAR_TYPE = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
               torch.float32: 6, torch.float64: 7, torch.bool: 11, torch.bfloat16: 15}
if hasattr(torch, "uint16"):
    SCALAR_TYPE[torch.uint16] = 27


def env_path(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set (run through ctest, which makes the datasets)")
    return value


@pytest.fixture(scope="session")
def cli():
    return env_path("FERRY_CLI")


def fnv1a(data, state=0xCBF29CE484222325):
    for byte in data:
        state = ((state ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return state


def bytes_digest(batch):
    """The `bytes` part of a `ferry run --digest` line (cli/batch_digest.cpp): FNV-1a over each field's
    name, NUL, dtype, shape and bytes, in field order."""
    state = 0xCBF29CE484222325
    for name, tensor in batch.items():
        host = tensor.cpu().contiguous()
        state = fnv1a(name.encode() + b"\0", state)
        state = fnv1a(np.int8(SCALAR_TYPE[host.dtype]).tobytes(), state)
        state = fnv1a(np.asarray(host.shape, dtype="<i8").tobytes(), state)
        state = fnv1a(host.reshape(-1).view(torch.uint8).numpy().tobytes(), state)
    return f"{state:016x}"


def ferry_run_digests(cli, config, overrides, batches, tmp_path):
    """The `bytes` digest of each batch `ferry run` delivers for the same config and overrides."""
    digest = tmp_path / "digest.txt"
    command = [cli, "run", config, "--batches", str(batches), "--digest", str(digest), "--set", "stats.progress=off"]
    for item in overrides:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [line.split(" bytes ")[1].strip() for line in digest.read_text().splitlines()]
