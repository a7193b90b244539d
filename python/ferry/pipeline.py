"""ferry.Pipeline: a YAML-configured ferry pipeline as a Python iterator of torch tensors."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import torch

from ferry import _C

Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]
Overrides = Union[Mapping[str, Any], Sequence[str], None]
State = Union[Mapping[str, Any], str, None]


class Pipeline:
    """A running ferry pipeline: iterate it for batches, each a ``dict[str, torch.Tensor]``.

    The tensors are the C++ pipeline's own (no copy), on the configured device, and ready to use on
    the current CUDA stream. The pipeline starts working as soon as it is built and keeps
    ``prefetch`` batches in flight; its threads never hold the GIL.

    Args:
        config: a YAML file's path, or a dict with the same schema (docs/config.md).
        overrides: settings on top of the config, as ``{"decode.threads": 8}`` or
            ``["decode.threads=8"]`` (what ``ferry run --set`` takes).
        state: a ``state_dict()`` saved earlier (or its JSON text): the pipeline then delivers
            exactly the batches the saved one had not delivered yet.

    Raises:
        ferry.ConfigError: the config or the state cannot run; every problem is listed, with
            where it was set.
        ferry.Error: the pipeline cannot start (e.g. the device is unusable).

    Iteration raises ``ferry.Error`` when a stage fails, with the stage and the sample's identity
    as attributes, after every batch planned before the failing one was delivered. Ctrl-C
    interrupts a blocked iteration within 0.1 s.
    """

    def __init__(self, config: Config, *, overrides: Overrides = None, state: State = None) -> None:
        settings = _overrides(overrides)
        saved = _state_text(state)
        if isinstance(config, Mapping):
            # JSON is YAML: the dict goes through the same loader and checks as a file.
            text = json.dumps(config, indent=2, default=str)
            self._impl = _C.Pipeline.from_text(text, "<dict>", settings, saved)
        elif isinstance(config, (str, os.PathLike)):
            self._impl = _C.Pipeline.from_path(os.fspath(config), settings, saved)
        else:
            raise TypeError(f"ferry.Pipeline: config must be a path or a dict, not {type(config).__name__}")

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return self._impl.next()

    def __len__(self) -> int:
        """Batches this pipeline delivers in all (a resumed one: those left); under
        ``decode.on_error: skip``, at most this many."""
        return len(self._impl)

    @property
    def device(self) -> torch.device:
        """Where batches are delivered (``auto`` resolved)."""
        return torch.device(self._impl.device)

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands: pass it to ``load_state_dict()`` or ``Pipeline(..., state=)`` to
        continue after the batches received so far. Small, JSON-serialisable."""
        return json.loads(self._impl.state_json())

    def load_state_dict(self, state: Mapping[str, Any] | str) -> None:
        """Restarts this pipeline at ``state`` (a ``state_dict()``). Raises ferry.ConfigError when
        the state comes from a run with another sample order, naming each setting that differs."""
        self._impl.load_state_json(_state_text(state))

    def stats(self) -> dict[str, Any]:
        """The run so far as the report ``ferry run --report`` writes (docs/report.md): batches,
        rates, per-stage busy and waiting times, queue occupancy, the pinned pool, skipped samples."""
        return json.loads(self._impl.stats_json())

    def close(self) -> None:
        """Stops the work and frees the threads and pinned memory now; iteration then ends.
        Idempotent; also called on leaving a ``with`` block."""
        self._impl.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} batches to {self._impl.device}"
        return f"ferry.Pipeline({self._impl.origin!r}, {state})"


def _overrides(overrides: Overrides) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={_yaml_scalar(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise TypeError("ferry.Pipeline: overrides must be a dict or a list of 'key=value' strings, not a str")
    return [str(item) for item in overrides]


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return json.dumps(value)  # true/false, numbers, lists and null read back as YAML


def _state_text(state: State) -> str | None:
    if state is None or isinstance(state, str):
        return state
    if isinstance(state, Mapping):
        return json.dumps(dict(state))
    raise TypeError(f"ferry.Pipeline: state must be a state_dict() or its JSON text, not {type(state).__name__}")
