"""ferry: staged data loading into GPU-resident batches, from Python.

    import ferry
    with ferry.Pipeline("configs/demo.yaml") as pipeline:
        for epoch in range(pipeline.epoch, pipeline.epochs):   # from epoch 0, or where a resumed run is
            for batch in pipeline:           # one epoch: ferry.Batch, a dict of tensors on the device
                ...

    handle = ferry.start_copy({"x": [t1, t2], "y": array}, "cuda:0")
    result = handle.get()                    # the same structure, its tensors on cuda:0

    pool = ferry.uvm.create_unified_mempool()   # CUDA managed memory: prefetch and advise tensors
                                                # and modules (ferry.uvm; docs/unified-memory.md)

    ferry.load_plugin("build/libmy_plugin.so")  # source kinds, decoders and transforms of your own
                                                # (docs/extending.md)

All run on ferry's C++ core (ferry._C): the pipeline's threads and copies never hold the GIL.
"""

from __future__ import annotations

import importlib
from typing import Any

from ferry._sample import SampleInfo, sample_info, sample_rng

# Imported on first use: a worker process (ferry._worker) imports this package for sample_rng() and
# sample_info(), and needs neither torch nor the compiled core for that.
_LAZY = {
    "AsyncCopyHandle": "ferry.async_copy",
    "Batch": "ferry.batch",
    "ConfigError": "ferry._C",
    "Error": "ferry._C",
    "Pipeline": "ferry.pipeline",
    "PluginError": "ferry._C",
    "UnifiedMemoryUnsupportedError": "ferry._C",
    "__version__": "ferry._C",
    "build_kind": "ferry._C",
    "build_reason": "ferry._C",
    "load_plugin": "ferry._C",
    "loaded_plugins": "ferry._C",
    "malloc_name": "ferry._C",
    "start_copy": "ferry.async_copy",
}


def __getattr__(name: str) -> Any:
    if name == "uvm":
        return importlib.import_module("ferry.uvm")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ferry' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AsyncCopyHandle",
    "Batch",
    "ConfigError",
    "Error",
    "Pipeline",
    "PluginError",
    "SampleInfo",
    "UnifiedMemoryUnsupportedError",
    "__version__",
    "build_kind",
    "build_reason",
    "load_plugin",
    "loaded_plugins",
    "malloc_name",
    "sample_info",
    "sample_rng",
    "start_copy",
    "uvm",
]
