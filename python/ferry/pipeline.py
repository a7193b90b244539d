"""ferry.Pipeline: a YAML-configured ferry pipeline as a Python iterator of torch tensors."""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import torch

from ferry import _C
from ferry.batch import Batch

_C._set_batch_type(Batch)
# Worker processes (source kind python, python transforms) run this interpreter, with this package.
_C._set_worker_python(sys.executable, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]
FieldsSpec = Union[Mapping[str, Mapping[str, Any]], None]
Overrides = Union[Mapping[str, Any], Sequence[str], None]
State = Union[Mapping[str, Any], str, None]


class Pipeline:
    """A running ferry pipeline: each ``for batch in pipeline`` loop is one epoch, as with torch's
    DataLoader, and each batch a :class:`ferry.Batch`: a ``dict[str, torch.Tensor]`` that also says
    its ``epoch``, ``index`` and ``sample_indices``.

        for epoch in range(epochs):           # at most the config's sampler.epochs
            for batch in pipeline:            # this epoch's batches, in its own order
                ...

    ``len(pipeline)`` is one epoch's batches (the epoch the current or next loop delivers). A loop
    that stops early leaves the rest of its epoch: the next loop starts the next epoch (a state saved
    in between keeps that rest: see :meth:`state_dict`). A loop past
    the config's epochs (or past ``max_batches``) raises ``ferry.Error`` saying so.
    :meth:`batches` iterates every batch left in the run instead, across epochs.

    With ``transfer.devices`` (one process feeding several GPUs), each step is instead a list of
    batches, one per device in the config's order, each on its device and holding its ``batch_size``
    share of the step's samples (``len()``, epochs and the state count steps)::

        for step in pipeline:                 # transfer.devices: [cuda:0, cuda:1]
            for device, batch in enumerate(step): ...

    The tensors are the C++ pipeline's own (no copy), on the configured device, and ready to use on
    the current CUDA stream (each batch on its own device's). The pipeline starts working as soon as it is built and keeps
    ``prefetch`` batches in flight, across epoch boundaries too; its threads never hold the GIL.

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
            text = json.dumps(_config_value(config, "config"), indent=2)
            self._impl = _C.Pipeline.from_text(text, "<dict>", settings, saved)
        elif isinstance(config, (str, os.PathLike)):
            self._impl = _C.Pipeline.from_path(os.fspath(config), settings, saved)
        else:
            raise TypeError(f"ferry.Pipeline: config must be a path or a dict, not {type(config).__name__}")
        self._generation = 0  # bumped by each new loop and each load_state_dict(): older loops are over
        self._restart_epochs()

    @classmethod
    def from_dataset(cls, dataset: Any, config: Config | None = None, *, fields: FieldsSpec = None,
                     overrides: Overrides = None, state: State = None) -> Pipeline:
        """A pipeline over a map-style dataset of your own: ``len(dataset)`` samples, each
        ``dataset[index]`` a dict of numpy arrays, CPU torch tensors, numbers or bytes. Worker
        processes (``decode.workers``, spawned, never forked) each get a pickled copy of the dataset and
        write its samples straight into memory the pipeline packs from; inside ``__getitem__``,
        :func:`ferry.sample_rng` gives random numbers that repeat on every run and after a resume.

            pipeline = ferry.Pipeline.from_dataset(TeamDataset(root), {"batch_size": 64,
                                                    "decode": {"workers": 8}})

        Args:
            dataset: the dataset; it (and what it holds) must pickle: its class at module level.
            config: every key but ``source``, as a dict or a YAML file's path (docs/config.md).
            fields: the fields, as ``{"image": {"dtype": "uint8", "shape": [3, 224, 224]},
                "tokens": {"dtype": "int32", "max_length": 512}}``; left out, they are inferred from
                the first samples (ints as int64, floats as float32), then checked on every sample.
            overrides, state: as for :class:`Pipeline`.

        Raises:
            TypeError: the dataset has no ``__len__`` or ``__getitem__``.
            ferry.Error: it cannot be sent to a worker process (it does not pickle), or its workers
                cannot load it (their traceback is in the message).
        """
        for needed in ("__len__", "__getitem__"):
            if not hasattr(dataset, needed):
                raise TypeError(f"ferry.Pipeline.from_dataset: the dataset ({type(dataset).__name__}) has no "
                                f"{needed}: ferry needs a map-style dataset (__len__, and __getitem__(index) returning a "
                                "dict of arrays)")
        handle = _C._hold_object(_pickled_dataset(dataset), _describe(dataset))
        source: dict[str, Any] = {"kind": "python", "dataset": handle}
        if fields is not None:
            source["fields"] = _field_list(fields)
        settings = _overrides(overrides)
        try:
            if isinstance(config, (str, os.PathLike)):
                source_settings = [f"source.{key}={json.dumps(value)}" for key, value in source.items()]
                pipeline = cls(config, overrides=source_settings + settings, state=state)
            else:
                if config is not None and not isinstance(config, Mapping):
                    raise TypeError("ferry.Pipeline.from_dataset: config must be a dict or a YAML file's path, not "
                                    f"{type(config).__name__}")
                plain = dict(config or {})
                if "source" in plain:
                    raise _error("ferry.Pipeline.from_dataset: the config has a source; the dataset is the source "
                                 "(leave `source` out, or use ferry.Pipeline(config))")
                plain["source"] = source
                pipeline = cls(plain, overrides=settings, state=state)
        except BaseException:
            _C._release_object(handle)
            raise
        pipeline._held = handle
        return pipeline

    def __del__(self) -> None:
        handle = getattr(self, "_held", None)
        if handle is not None and _C is not None:  # (None while the interpreter exits)
            _C._release_object(handle)

    def _restart_epochs(self) -> None:
        first = self._impl.first_epoch
        # A run resumed after an epoch's last delivered batch may have none of that epoch left (under
        # decode.on_error: skip with drop_last, that batch's cursor does not say it ended the epoch):
        # its first loop is then the next epoch's, as it would have been without the restart.
        if self._impl.epoch_length(first) == 0 and self._impl.epoch_length(first + 1) > 0:
            first += 1
        self._next_epoch = first  # the epoch the next loop delivers
        self._current: int | None = None  # the epoch a loop is delivering, until it ends

    def __iter__(self) -> Iterator[Union[Batch, list[Batch]]]:
        """One epoch's batches: the epoch after the last loop's (the run's first at first)."""
        epoch = self._next_epoch
        if epoch >= self._impl.epochs:
            raise _error(f"ferry.Pipeline: all {self._impl.epochs} epoch{'s' if self._impl.epochs != 1 else ''} of "
                         f"{self._impl.origin} were delivered (sampler.epochs: {self._impl.epochs}); loop over at "
                         "most that many epochs, or raise sampler.epochs")
        if self._impl.epoch_length(epoch) == 0:  # within the epochs, only max_batches leaves one empty
            raise _error(f"ferry.Pipeline: the run of {self._impl.origin} is over before epoch {epoch}: its "
                         "max_batches were delivered")
        self._next_epoch = epoch + 1
        self._current = epoch
        self._generation += 1
        return self._epoch(epoch, self._generation)

    def _superseded(self, generation: int) -> None:
        """Raises when a loop goes on after a newer one started or the pipeline was restarted: one
        loop at a time delivers, so no batch goes to a loop the program has moved on from."""
        if generation != self._generation:
            raise _error("ferry.Pipeline: this loop is over: another loop over the pipeline started, or "
                         "load_state_dict() restarted it, while it was open; finish or break a loop before the "
                         "next, and start a new loop after load_state_dict()")

    def _epoch(self, epoch: int, generation: int) -> Iterator[Union[Batch, list[Batch]]]:
        try:
            yield from self._handed_over(generation, epoch)
        finally:  # also when the loop stops early (the generator is closed): no loop is delivering
            if self._current == epoch and generation == self._generation:
                self._current = None

    def batches(self) -> Iterator[Union[Batch, list[Batch]]]:
        """Every batch left in the run, across epochs (for a loop that counts steps, not epochs)."""
        self._current = None
        self._next_epoch = self._impl.epochs  # the epochs are spoken for
        self._generation += 1
        return self._handed_over(self._generation, None)

    def _handed_over(self, generation: int, epoch: int | None) -> Iterator[Union[Batch, list[Batch]]]:
        """The loop's batches: `epoch`'s, or every one left (None)."""
        # Each batch is handed over without a reference kept here (`taken` is empty while the loop has it):
        # the loop's variable is its last one, so a batch is freed where the loop lets it go (its variable
        # rebound, `del batch`), not inside the next next(); after a `del batch` (and no view of it kept)
        # its buffer is back in ferry's pool before the next batch is asked for.
        next_of = self._impl.next
        self._superseded(generation)
        taken = [next_of(epoch)]
        while taken[0] is not None:
            yield taken.pop()
            self._superseded(generation)
            taken.append(next_of(epoch))

    def __len__(self) -> int:
        """Batches in one epoch: the one the current loop delivers, else the next loop's (a resumed
        run's first epoch: those left; the last one: cut at max_batches). Under
        ``decode.on_error: skip``, at most this many. 0 after ``close()``: it delivers nothing more."""
        if self.closed:
            return 0
        length = self._impl.epoch_length(self._current if self._current is not None else self._next_epoch)
        if length > sys.maxsize:  # len() cannot say it
            raise _error(f"ferry.Pipeline: an epoch of {length} batches is more than len() can return; see "
                         "total_batches, or lower sampler.epochs or the dataset's size")
        return length

    @property
    def epoch(self) -> int:
        """The epoch the current loop delivers, else the one the next loop will."""
        return self._current if self._current is not None else self._next_epoch

    @property
    def epochs(self) -> int:
        """The config's sampler.epochs."""
        return self._impl.epochs

    @property
    def total_batches(self) -> int:
        """Batches this pipeline delivers in all epochs (a resumed one: those left)."""
        return self._impl.total_batches

    @property
    def device(self) -> torch.device:
        """Where batches are delivered (``auto`` resolved). With ``transfer.devices``, see :attr:`devices`."""
        devices = self.devices
        if len(devices) != 1:
            raise _error(f"ferry.Pipeline: {self._impl.origin} feeds {len(devices)} devices (transfer.devices): "
                         "see .devices")
        return devices[0]

    @property
    def devices(self) -> list[torch.device]:
        """Every device batches are delivered to, in the order of each step's list (one without
        ``transfer.devices``)."""
        return [torch.device(name) for name in self._impl.device.split(",")]

    @property
    def closed(self) -> bool:
        return self._impl.closed

    @property
    def class_names(self) -> list[str]:
        """The names of the classes the label field numbers, in label order (an image folder's class
        folders, as torchvision's ImageFolder.classes); empty where the source has none."""
        return self._impl.class_names

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands: pass it to ``load_state_dict()`` or ``Pipeline(..., state=)`` to
        continue after the batches received so far. Small, JSON-serialisable.

        It starts at the first batch not delivered, so no sample is lost. After a loop that stopped
        early, that is the rest of the loop's epoch: a pipeline resumed from it delivers that rest as
        its first loop (where this pipeline's next loop would drop it and start the next epoch), so
        loop over ``range(pipeline.epoch, pipeline.epochs)`` for the loops a resumed run has left."""
        return json.loads(self._impl.state_json())

    def load_state_dict(self, state: Mapping[str, Any] | str) -> None:
        """Restarts this pipeline at ``state`` (a ``state_dict()``): the next loop delivers the rest
        of the state's epoch. Raises ferry.ConfigError when the state comes from a run with another
        sample order, naming each setting that differs. A loop open over this pipeline is over: going
        on with it raises ferry.Error; start a new loop."""
        if state is None:
            raise TypeError("ferry.Pipeline.load_state_dict: state must be a state_dict() or its JSON text, not None")
        self._impl.load_state_json(_state_text(state))
        self._generation += 1
        self._restart_epochs()

    def stats(self) -> dict[str, Any]:
        """The run so far as the report ``ferry run --report`` writes (docs/report.md): batches,
        rates, per-stage busy and waiting times, queue occupancy, the pinned pool, skipped samples."""
        return json.loads(self._impl.stats_json())

    def cache_to(self, device: int | str | torch.device) -> None:
        """Moves the dataset cache (``cache.memory: managed``) to ``device`` and returns once it is
        there: -1 (or ``"cpu"``) is the host, e.g. while an evaluation needs the GPU's memory; the
        delivery GPU's index (or ``"cuda:N"``) brings it back. Pointers do not change, and batches keep
        coming meanwhile (gathered over the link while the cache is on the host). Raises ferry.Error
        without a managed cache, or for another device."""
        if len(self.devices) != 1:
            raise _error(f"ferry.Pipeline.cache_to: {self._impl.origin} feeds {len(self.devices)} devices "
                         "(transfer.devices), each keeping its own cache on itself")
        if isinstance(device, (str, torch.device)):
            where = torch.device(device)
            if where.type == "cpu":
                device = -1
            else:  # "cuda": the pipeline's own GPU
                device = where.index if where.index is not None else torch.device(self._impl.device).index
        self._impl.cache_to(int(device))

    def close(self) -> None:
        """Stops the work and frees the threads and pinned memory now; iteration then ends.
        Idempotent; also called on leaving a ``with`` block."""
        self._impl.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        unit = "batches" if len(self.devices) == 1 else "steps"
        state = "closed" if self.closed else f"epoch {self.epoch} of {self.epochs}, {len(self)} {unit} to {self._impl.device}"
        return f"ferry.Pipeline({self._impl.origin!r}, {state})"


def _overrides(overrides: Overrides) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        settings = []
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise TypeError(f"ferry.Pipeline: overrides: a key must be a str such as 'decode.threads', not "
                                f"{type(key).__name__} ({key!r})")
            if "=" in key or not key.strip():
                raise _error(f"ferry.Pipeline: overrides: {key!r} is not a key such as 'decode.threads' (a key holds "
                             "no '='; give the value as the dict's value)")
            settings.append(f"{key}={_yaml_scalar(value, key)}")
        return settings
    if isinstance(overrides, str):
        raise TypeError("ferry.Pipeline: overrides must be a dict or a list of 'key=value' strings, not a str")
    settings = []
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"ferry.Pipeline: overrides: each item must be a 'key=value' str such as "
                            f"'decode.threads=8', not {type(item).__name__} ({item!r}); or give a dict")
        settings.append(item)
    return settings


def _yaml_scalar(value: Any, key: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    # true/false, numbers, lists and null read back as YAML
    return json.dumps(_config_value(value, f"overrides[{key!r}]"))


_MAX_DEPTH = 100  # a config is a few levels deep; far more is a mistake (or a structure holding itself)


def _config_value(value: Any, where: str, depth: int = 0, holding: tuple[int, ...] = ()) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, int, float, bool, None; numpy scalars as
    their values), or TypeError naming where an object that is none of these sits, and ferry.Error
    for a structure that holds itself or is nested past ``_MAX_DEPTH`` levels."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()  # a numpy scalar: np.uint16(3) is 3
    if isinstance(value, (Mapping, list, tuple)):
        if id(value) in holding:
            raise _error(f"ferry.Pipeline: {where} holds itself: a config is a tree of values")
        if depth >= _MAX_DEPTH:
            raise _error(f"ferry.Pipeline: {where} is nested more than {_MAX_DEPTH} levels deep")
        inside = holding + (id(value),)
        if isinstance(value, Mapping):
            plain = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"ferry.Pipeline: {where}: a key must be a str, not {type(key).__name__} ({key!r})")
                plain[key] = _config_value(item, f"{where}[{key!r}]", depth + 1, inside)
            return plain
        return [_config_value(item, f"{where}[{i}]", depth + 1, inside) for i, item in enumerate(value)]
    raise TypeError(f"ferry.Pipeline: {where} is a {type(value).__name__}, which a config cannot hold (str, "
                    "int, float, bool, None, list, dict)")


def _pickled_dataset(dataset: Any) -> bytes:
    """The dataset as its workers unpickle it: with what a spawned interpreter needs first (the user's
    script, as multiprocessing's spawn runs it) when its class lives there."""
    try:
        pickled = pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise _error(f"ferry.Pipeline.from_dataset: the dataset ({_describe(dataset)}) cannot be sent to worker "
                     f"processes: pickling it failed: {type(e).__name__}: {e}. Define its class, and what it holds, "
                     "at a module's top level (not in a function, not a lambda), or make what cannot pickle (an open "
                     "file, a connection) when __getitem__ first needs it") from None
    main = None
    if b"__main__" in pickled:
        import multiprocessing.spawn

        main = multiprocessing.spawn.get_preparation_data("ferry-worker")
        main.pop("authkey", None)  # multiprocessing's own secret, which pickles only as it spawns
    held = {"main": main, "sys_path": list(sys.path), "object": pickled}
    return pickle.dumps(held, protocol=pickle.HIGHEST_PROTOCOL)


def _describe(dataset: Any) -> str:
    kind = type(dataset)
    module = kind.__module__
    return kind.__qualname__ if module in ("builtins", "__main__", "__mp_main__") else f"{module}.{kind.__qualname__}"


def _field_list(fields: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(fields, Mapping):
        raise TypeError("ferry.Pipeline.from_dataset: fields must be a dict of field name to "
                        "{'dtype': ..., 'shape': [...], 'max_length': ...}")
    listed = []
    for name, spec in fields.items():
        if not isinstance(spec, Mapping):
            raise TypeError(f"ferry.Pipeline.from_dataset: fields[{name!r}] must be a dict such as "
                            "{'dtype': 'uint8', 'shape': [3, 224, 224]}")
        listed.append({"name": name, **_config_value(spec, f"fields[{name!r}]")})
    return listed


def _state_text(state: State) -> str | None:
    if state is None or isinstance(state, str):
        return state
    if isinstance(state, Mapping):
        return json.dumps(dict(state))
    raise TypeError(f"ferry.Pipeline: state must be a state_dict() or its JSON text, not {type(state).__name__}")


def _error(message: str) -> _C.Error:
    error = _C.Error(message)
    error.stage = error.sample = error.epoch = error.batch = None
    error.cause = message
    error.problems = []
    return error
