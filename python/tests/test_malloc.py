"""ferry.malloc_name(), and a Python program run with jemalloc preloaded (what docs/benchmarks.md
recommends for batches of many tensors) delivering the same bytes as `ferry run`."""

import os
import subprocess
import sys

import pytest

import ferry
from conftest import CONFIG_DIR, ferry_run_digests

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def test_malloc_name_names_this_interpreters_malloc():
    name = ferry.malloc_name()
    assert name == ferry.malloc_name()
    preload = os.environ.get("LD_PRELOAD", "")
    if "jemalloc" in preload:
        assert name.startswith("jemalloc "), name
    elif "tcmalloc" in preload:
        assert name.startswith("tcmalloc "), name
    elif sys.platform == "linux":
        assert name.startswith("glibc 2."), name


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason=f"no {JEMALLOC} (Debian: apt install libjemalloc2)")
def test_a_program_with_jemalloc_preloaded_delivers_what_ferry_run_delivers(cli, tmp_path):
    config = os.path.join(CONFIG_DIR, "demo.yaml")
    overrides = ["decode.threads=2"]
    expected = ferry_run_digests(cli, config, overrides, 3, tmp_path)
    program = (
        "import ferry, sys\n"
        "from conftest import bytes_digest\n"
        "print(ferry.malloc_name())\n"
        f"with ferry.Pipeline({config!r}, overrides={overrides!r}) as pipeline:\n"
        "    for step, batch in zip(range(3), pipeline.batches()):\n"
        "        print(bytes_digest(batch))\n"
    )
    env = dict(os.environ, LD_PRELOAD=" ".join(filter(None, [JEMALLOC, os.environ.get("LD_PRELOAD")])))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("jemalloc "), lines[0]
    assert lines[1:] == expected
