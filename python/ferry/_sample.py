"""Which sample user code is making: ferry.sample_info() and ferry.sample_rng().

ferry sets them around each call of a dataset's ``__getitem__`` or a python transform, in worker
processes and on decode threads alike (the state is per thread)."""

from __future__ import annotations

import threading
from typing import NamedTuple

_current = threading.local()


class SampleInfo(NamedTuple):
    """The sample being made: its epoch, and its index in the dataset."""

    epoch: int
    index: int


def _enter(seed: int, epoch: int, index: int) -> None:
    _current.sample = (seed, epoch, index)


def _leave() -> None:
    _current.sample = None


def _now(caller: str) -> tuple[int, int, int]:
    sample = getattr(_current, "sample", None)
    if sample is None:
        raise RuntimeError(f"ferry.{caller}() is for code that ferry runs for a sample (a dataset's __getitem__, a "
                           "python transform), while it runs")
    return sample


def sample_info() -> SampleInfo:
    """``(epoch, index)`` of the sample being made. Raises RuntimeError outside ferry's calls."""
    _, epoch, index = _now("sample_info")
    return SampleInfo(epoch, index)


def sample_rng():
    """A ``numpy.random.Generator`` seeded from (sampler.seed, epoch, index) of the sample being made: the
    same numbers for that sample on every run, with any number of workers and after a resume, and others
    in the next epoch. Raises RuntimeError outside ferry's calls."""
    import numpy

    seed, epoch, index = _now("sample_rng")
    return numpy.random.Generator(numpy.random.PCG64(numpy.random.SeedSequence([seed, epoch, index])))
