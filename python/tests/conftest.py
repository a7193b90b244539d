"""Shared fixtures for the ferry package's tests (run by CTest: tests/CMakeLists.txt sets the
environment: PYTHONPATH to the built package, FERRY_CLI, FERRY_SOURCE_DIR and the datasets the CTest
fixtures write)."""

import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get("FERRY_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG_DIR = os.path.join(SOURCE_DIR, "configs")

sys.path.insert(0, os.path.join(SOURCE_DIR, "bench"))
from batch_digest import fields_digest  # noqa: E402 (bench/batch_digest.py, shared with bench/loaders.py)


def env_path(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set (run through ctest, which makes the datasets)")
    return value


@pytest.fixture(scope="session")
def cli():
    return env_path("FERRY_CLI")


def bytes_digest(batch):
    """The `bytes` part of a `ferry run --digest` line for a batch (a dict of tensors)."""
    return fields_digest(batch.items())


def ferry_run_digests(cli, config, overrides, batches, tmp_path):
    """The `bytes` digest of each batch `ferry run` delivers for the same config and overrides."""
    digest = tmp_path / "digest.txt"
    command = [cli, "run", config, "--batches", str(batches), "--digest", str(digest), "--set", "stats.progress=off"]
    for item in overrides:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [line.split(" bytes ")[1].strip() for line in digest.read_text().splitlines()]
