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

from ferry import uvm
from ferry._C import (
    ConfigError,
    Error,
    PluginError,
    UnifiedMemoryUnsupportedError,
    __version__,
    build_kind,
    build_reason,
    load_plugin,
    loaded_plugins,
    malloc_name,
)
from ferry.async_copy import AsyncCopyHandle, start_copy
from ferry.batch import Batch
from ferry.pipeline import Pipeline

__all__ = [
    "AsyncCopyHandle",
    "Batch",
    "ConfigError",
    "Error",
    "Pipeline",
    "PluginError",
    "UnifiedMemoryUnsupportedError",
    "__version__",
    "build_kind",
    "build_reason",
    "load_plugin",
    "loaded_plugins",
    "malloc_name",
    "start_copy",
    "uvm",
]
