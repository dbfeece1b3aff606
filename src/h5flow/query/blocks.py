"""Blocks: the units an index summarises, a query skips and MPI ranks share.

A native chunked dataset's blocks are its HDF5 chunks (the chunk grid in C order). Any other dataset
(contiguous, compact, or served by the h5flow_log connector, which records a chunk shape but stores
append logs) is cut along its first axis into slabs of about :data:`SLAB_ELEMENTS` elements.

Element *positions* are block-major: block k's elements are ``offsets[k] .. offsets[k+1]-1`` in the C
order of the block. Bitmap indexes store positions, so one block is one contiguous position range.

*Sub-slabs* cut a block along its first (slowest) axis into ``sub`` runs of ``ceil(block[0] / sub)``
rows (the last ones of a short edge block may be empty). A sub-slab is a contiguous position range too
(:meth:`BlockGrid.sub_offsets`) and a hyperslab of the dataset, so zone maps kept per sub-slab let a query
read only the parts of a partly matching chunk that can match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

SLAB_ELEMENTS = 1 << 17  # 1 MiB of float64; by elements, so aligned columns of any type share a grid


@dataclass(frozen=True)
class BlockGrid:
    shape: tuple[int, ...]
    block: tuple[int, ...]  # block shape (edge blocks are cut at the dataset's extent)

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.block) or any(b < 1 for b in self.block):
            raise ValueError(f"block shape {self.block} does not fit dataset shape {self.shape}")

    @cached_property
    def counts(self) -> tuple[int, ...]:
        """Blocks along each axis."""
        return tuple(-(-s // b) for s, b in zip(self.shape, self.block))

    @cached_property
    def nblocks(self) -> int:
        if any(s == 0 for s in self.shape):
            return 0
        return math.prod(self.counts)

    @cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @lru_cache(maxsize=4096)  # noqa: B019 - grids are few and immutable; queries ask for the same blocks often
    def origin(self, k: int) -> tuple[int, ...]:
        idx = np.unravel_index(k, self.counts) if self.shape else ()
        return tuple(int(i) * b for i, b in zip(idx, self.block))

    @lru_cache(maxsize=4096)  # noqa: B019
    def extent(self, k: int) -> tuple[int, ...]:
        o = self.origin(k)
        return tuple(min(b, s - a) for a, b, s in zip(o, self.block, self.shape))

    def slices(self, k: int) -> tuple[slice, ...]:
        return tuple(slice(a, a + e) for a, e in zip(self.origin(k), self.extent(k)))

    @cached_property
    def offsets(self) -> np.ndarray:
        """Start position of every block, and the total at the end (int64, ``nblocks + 1``)."""
        if self.nblocks == 0:
            return np.zeros(1, dtype=np.int64)
        # sizes of a grid of blocks: product over axes of the per-axis extents, in C order
        per_axis = []
        for s, b, c in zip(self.shape, self.block, self.counts):
            e = np.full(c, b, dtype=np.int64)
            e[-1] = s - b * (c - 1)
            per_axis.append(e)
        sizes = np.ones(1, dtype=np.int64)
        for e in per_axis:
            sizes = np.multiply.outer(sizes, e).ravel()
        out = np.zeros(self.nblocks + 1, dtype=np.int64)
        np.cumsum(sizes, out=out[1:])
        return out

    def clamp_sub(self, sub: int) -> int:
        """``sub`` limited to the rows of a block (at least 1)."""
        return max(1, min(int(sub), self.block[0] if self.block else 1))

    def sub_rows(self, k: int, j: int, sub: int) -> tuple[int, int]:
        """Rows ``[r0, r1)`` (along the first axis, relative to the block's origin) of block k's sub-slab j."""
        if not self.block:
            return (0, 1) if j == 0 else (1, 1)
        r = -(-self.block[0] // sub)
        e0 = self.extent(k)[0]
        return min(j * r, e0), min((j + 1) * r, e0)

    @lru_cache(maxsize=64)  # noqa: B019 - read-only result, shared by the queries on one grid
    def sub_offsets(self, sub: int) -> np.ndarray:
        """Start position of every sub-slab (block k's sub-slab j is entry ``k * sub + j``; ``sub`` from
        :meth:`clamp_sub`) and the total at the end (int64, ``nblocks * sub + 1``)."""
        off = self.offsets
        if sub == 1 or self.nblocks == 0:
            return off
        r = -(-self.block[0] // sub)
        first = np.arange(self.nblocks) // math.prod(self.counts[1:])  # block index along the first axis
        e0 = np.minimum(self.block[0], self.shape[0] - first * self.block[0])
        inner = np.diff(off) // e0
        starts = off[:-1, None] + np.minimum(np.arange(sub) * r, e0[:, None]) * inner[:, None]
        out = np.concatenate([starts.reshape(-1), off[-1:]])
        out.flags.writeable = False
        return out

    @lru_cache(maxsize=64)  # noqa: B019
    def sub_sizes(self, sub: int) -> np.ndarray:
        """Elements of every sub-slab (``np.diff`` of :meth:`sub_offsets`; read-only)."""
        out = np.diff(self.sub_offsets(sub))
        out.flags.writeable = False
        return out

    @lru_cache(maxsize=64)  # noqa: B019
    def sub_nonempty(self, sub: int) -> np.ndarray:
        """Sub-slabs holding at least one element (read-only)."""
        out = self.sub_sizes(sub) > 0
        out.flags.writeable = False
        return out

    def block_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, positions, side="right") - 1

    def coords(self, k: int, local: np.ndarray) -> np.ndarray:
        """Global coordinates (n, ndim) of block-local flat indices ``local`` of block ``k``."""
        ext = self.extent(k)
        if not ext:
            return np.zeros((len(local), 0), dtype=np.int64)
        loc = np.unravel_index(np.asarray(local, dtype=np.int64), ext)
        return np.stack([li + o for li, o in zip(loc, self.origin(k))], axis=1).astype(np.int64)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """C-order element strides of the dataset (flat index = sum of coordinate * stride)."""
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def flat(self, k: int, local: np.ndarray, ascending: bool = False) -> np.ndarray:
        """Global C-order flat indices (int64) of block-local flat indices ``local`` of block ``k``.

        The same answer as ``np.ravel_multi_index(coords(k, local).T, shape)`` with one gather: every
        block of one extent shares a table of its elements' offsets from the block's origin.
        ``ascending``: ``local`` is strictly increasing (then a run of consecutive indices is one slice)."""
        local = np.asarray(local, dtype=np.int64)
        if len(self.shape) == 1:  # 1-D: block-local index + the block's origin
            return local + self.origin(k)[0]
        ext = self.extent(k)
        if not ext:
            return np.zeros(len(local), dtype=np.int64)
        base = sum(o * st for o, st in zip(self.origin(k), self.strides))
        table = _offset_table(ext, self.strides)
        if ascending and local.size and int(local[-1]) - int(local[0]) + 1 == local.size:  # a run: a slice
            return table[int(local[0]):int(local[-1]) + 1] + base
        out = table.take(local)
        out += base
        return out

    def flat_all(self, k: int) -> np.ndarray:
        """Global C-order flat indices of every element of block k, in the block's C order."""
        ext = self.extent(k)
        if not ext:
            return np.zeros(1, dtype=np.int64)
        return _offset_table(ext, self.strides) + sum(o * st for o, st in zip(self.origin(k), self.strides))

    def split(self, nranks: int, rank: int, blocks: np.ndarray | None = None) -> np.ndarray:
        """This rank's contiguous share of ``blocks`` (default all), so rank order is position order."""
        ids = np.arange(self.nblocks) if blocks is None else np.asarray(blocks)
        lo = len(ids) * rank // nranks
        hi = len(ids) * (rank + 1) // nranks
        return ids[lo:hi]


@lru_cache(maxsize=16)
def _offset_table(extent: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Offsets from a block's origin of its elements, in the block's C order (read-only, shared)."""
    t = np.zeros(1, dtype=np.int64)
    for e, st in zip(extent, strides):
        t = np.add.outer(t, np.arange(e, dtype=np.int64) * st).ravel()
    t.flags.writeable = False
    return t


def grid_for(shape: tuple[int, ...], itemsize: int, chunks: tuple[int, ...] | None, native: bool) -> BlockGrid:
    """The block grid h5flow uses for a dataset (see the module docstring)."""
    if native and chunks:
        return BlockGrid(tuple(shape), tuple(chunks))
    if not shape:
        return BlockGrid((), ())
    if any(s == 0 for s in shape):
        return BlockGrid(tuple(shape), (1,) * len(shape))
    rows = max(1, SLAB_ELEMENTS // max(1, math.prod(shape[1:])))
    return BlockGrid(tuple(shape), (min(rows, shape[0]),) + tuple(shape[1:]))
