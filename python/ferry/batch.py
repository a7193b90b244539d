"""ferry.Batch: one batch, a dict of tensors that also says where it comes from."""

from __future__ import annotations

import torch


class Batch(dict[str, torch.Tensor]):
    """A batch as ferry delivers it: ``{field name: tensor}`` (all views of one device allocation,
    ready on the current CUDA stream), usable wherever a dict of tensors is, and where it comes from:

    * ``epoch``: the epoch it belongs to;
    * ``index``: its number within that epoch (0, 1, ...);
    * ``sequence``: its number in this pipeline's run, across epochs;
    * ``sample_indices``: the source's indices of its samples, in batch order (as the C++
      ``Batch::sample_indices()``).
    """

    # Set by the compiled core for every batch (ferry._C); sample indices are kept as raw uint64
    # bytes until asked for, so a batch costs no list of ints unless one is wanted.
    __slots__ = ("epoch", "index", "sequence", "_sample_indices")

    epoch: int
    index: int
    sequence: int

    @property
    def sample_indices(self) -> list[int]:
        return memoryview(self._sample_indices).cast("Q").tolist()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {tuple(t.shape)} {t.dtype}" for name, t in self.items())
        return f"ferry.Batch(epoch {self.epoch}, index {self.index}, {{{fields}}})"
