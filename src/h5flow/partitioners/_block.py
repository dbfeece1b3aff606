"""SENSEI's ``BlockPartitioner``: each consumer rank gets one contiguous range of block indices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from h5flow.model import BlockMeta
from h5flow.partitioners.base import PartitionError, Partitioner, PartitionerSettings

if TYPE_CHECKING:
    from h5flow.config import PartitionerConfig


@dataclass
class BlockSettings(PartitionerSettings):
    """``<partitioner type="block"/>`` takes no attributes."""


def block_range(num_blocks: int, n_consumers: int, rank: int) -> range:
    """The block indices rank ``rank`` owns: SENSEI's ``nLocal = B // N``, ``nLarge = B % N`` rule.

    Rank ``r`` gets ``[nLocal*r + min(r, nLarge), + nLocal + (r < nLarge))``: the first ``nLarge`` ranks
    take one extra block, so range sizes differ by at most one. With fewer blocks than ranks
    (``B < N``) the last ``N - B`` ranks get an empty range.
    """
    n_local, n_large = divmod(num_blocks, n_consumers)
    start = n_local * rank + min(rank, n_large)
    return range(start, start + n_local + (1 if rank < n_large else 0))


class BlockPartitioner(Partitioner):
    """Contiguous ranges of blocks, in block-id order, sizes differing by at most one."""

    name = "block"
    SETTINGS = BlockSettings

    @classmethod
    def from_config(cls, cfg: PartitionerConfig) -> BlockPartitioner:
        return cls()

    def owners(self, blocks: Sequence[BlockMeta], n_consumers: int) -> list[int]:
        if n_consumers < 1:
            raise PartitionError(f"n_consumers must be at least 1, got {n_consumers}")
        n_local, n_large = divmod(len(blocks), n_consumers)
        split = n_large * (n_local + 1)  # the first n_large ranks hold n_local + 1 blocks each
        return [i // (n_local + 1) if i < split else n_large + (i - split) // n_local for i in range(len(blocks))]

    def __repr__(self) -> str:
        return "BlockPartitioner()"
