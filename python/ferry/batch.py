"""ferry.Batch: one batch, a dict of tensors that also says where it comes from."""

from __future__ import annotations

import torch


class Batch(dict[str, "torch.Tensor | list[torch.Tensor]"]):
    """A batch as ferry delivers it: ``{field name: tensor}`` (all views of one device allocation,
    ready on the current CUDA stream), usable wherever a dict of tensors is, and where it comes from:

    * ``epoch``: the epoch it belongs to;
    * ``index``: its number within that epoch (0, 1, ...);
    * ``sequence``: its number in this pipeline's run, across epochs;
    * ``sample_indices``: the source's indices of its samples, in batch order (as the C++
      ``Batch::sample_indices()``);
    * ``sample_keys``: where they came from, in batch order: the keys the source gives them
      (``"shard-0003.tar:000123"``, a file's path below an image folder's root).

    A field named in ``collate.lists`` is a list of tensors, each sample's at its own shape (views of
    the batch's one buffer); a field named in ``collate.host`` is a CPU tensor.
    """

    # Set by the compiled core for every batch (ferry._C); sample indices are kept as raw uint64
    # bytes until asked for, so a batch costs no list of ints unless one is wanted.
    __slots__ = ("epoch", "index", "sequence", "_sample_indices", "_key_of")

    epoch: int
    index: int
    sequence: int

    @property
    def sample_indices(self) -> list[int]:
        return memoryview(self._sample_indices).cast("Q").tolist()

    @property
    def sample_keys(self) -> list[str]:
        return self._key_of(self._sample_indices)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}: {_describe(t)}" for name, t in self.items())
        return f"ferry.Batch(epoch {self.epoch}, index {self.index}, {{{fields}}})"


def _describe(value: torch.Tensor | list[torch.Tensor]) -> str:
    if isinstance(value, list):
        return f"list of {len(value)} {value[0].dtype if value else ''}".rstrip()
    return f"{tuple(value.shape)} {value.dtype}"
