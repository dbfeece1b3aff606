"""Reading and checking the candidates of a planned selection, and the hits it yields.

:class:`Selection` is a :class:`~h5flow.query.plan.SelectionPlan` that reads its candidate runs (one
buffer per dataset for a group of runs, ``preadv`` where the chunks allow), checks every condition the
indexes left undecided with numpy, and yields the hits per block, as flat indices, or counted; under MPI
the candidate blocks are split across ranks (:meth:`Selection.materialize`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from h5flow._mpi import sleepy_allgather
from h5flow.query import _kernels
from h5flow.query.blocks import BlockGrid
from h5flow.query.expr import DataCond
from h5flow.query.index import _buffer
from h5flow.query.plan import SelectionPlan, fold, mask_and, mask_or

_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}


class Selection(SelectionPlan):
    """The hits of one bound element expression: its plan (:class:`SelectionPlan`, made at construction,
    reading only indexes), evaluated lazily — :meth:`blocks` reads the candidate runs as it goes."""


    # -- evaluation
    def _ensure_codes(self) -> None:
        """Bitmap plans: each condition's decision over each candidate run, from its Roaring sets."""
        if self._coded:
            return
        self._coded = True
        uoff = self.uoff
        for i in np.flatnonzero(self.run_state == 2).tolist():
            lo, hi = int(uoff[self.run_u0[i]]), int(uoff[self.run_u1[i]])
            for j, c in enumerate(self.conds):
                sure, maybe = self._sets[c]
                if sure.range_cardinality(lo, hi) == hi - lo:
                    self._codes[j, i] = 1
                elif not maybe.range_cardinality(lo, hi):
                    self._codes[j, i] = 0

    BATCH_ELEMENTS = 1 << 21  # positions evaluated together (one read buffer per dataset, one mask per leaf)

    def _eval_group(self, runs: np.ndarray, code: np.ndarray, g: int) -> Any:
        """Evaluate the candidate runs ``runs`` (on which every condition has the decision ``code``) together:
        each dataset an undecided condition names is read once into one buffer holding all the runs one after
        the other (adjacent in the file: one ``preadv``), each condition is one numpy comparison over it.
        Returns the expression's mask over that buffer (in reused buffers of group ``g``), or True / False
        where the indexes decide it on every run."""
        grid, sub, uoff = self.grid, self.sub, self.uoff
        u0, u1, k = self.run_u0[runs], self.run_u1[runs], self.run_block[runs]
        n = uoff[u1] - uoff[u0]
        if grid.block:
            r = -(-grid.block[0] // sub)
            first = k // math.prod(grid.counts[1:])
            e0 = np.minimum(grid.block[0], grid.shape[0] - first * grid.block[0])
            r0 = np.minimum((u0 - k * sub) * r, e0)
            r1 = np.minimum((u1 - k * sub) * r, e0)
        else:
            r0, r1 = np.zeros(len(runs), np.int64), np.ones(len(runs), np.int64)
        values: dict[str, np.ndarray] = {}
        slot = [0]
        total = int(n.sum())

        def leaf(c: DataCond) -> Any:
            slot[0] += 1  # one mask buffer per leaf of the tree (a condition may occur twice)
            d = int(code[self._cix[c]])
            if d != 2:
                return d == 1
            p = c.path
            assert p is not None
            v = values.get(p)
            if v is None:
                v = values[p] = self.readers[p].read_runs(k, r0, r1, n, ("batch", self.paths.index(p)))
            out = _buffer(("mask", g, slot[0]), total)[:total].view(np.bool_)
            return _OPS[c.op](v, c.value, out=out)

        with np.errstate(invalid="ignore"):
            m = fold(self.expr, leaf, mask_and, mask_or)
        self.elements_read += total
        return m

    def _hits_global(self, ks: Sequence[int]) -> dict[int, np.ndarray]:
        """:meth:`_hits_batch` of ``ks`` cut into batches of at most :data:`BATCH_ELEMENTS` positions."""
        work, limit = self._work_elems, self.BATCH_ELEMENTS
        out: dict[int, np.ndarray] = {}
        group: list[int] = []
        tot = 0
        for k in ks:
            k = int(k)
            if group and tot + work[k] > limit:
                out.update(self._hits_batch(group))
                group, tot = [], 0
            group.append(k)
            tot += work[k]
        if group:
            out.update(self._hits_batch(group))
        return out

    def _hits_batch(self, ks: Sequence[int]) -> dict[int, np.ndarray]:
        """Sorted hits of each block of ``ks`` as global positions on a 1-D grid (the flat indices), block-local
        ones on others (what :meth:`BlockGrid.flat` takes; ``self._global`` says which); empty arrays included;
        all views of one new array, in block order. The candidate runs of these blocks are
        evaluated together, grouped by the indexes' decisions over them (:meth:`_eval_group`); the hits of
        every run (candidate runs from their masks, sure runs as they are) are then written in one pass
        (:func:`_kernels.segments`)."""
        if not len(ks):
            return {}
        ka = np.asarray(ks, np.int64)
        ra, rz = self.run_at[ka], self.run_at[ka + 1]
        lens = rz - ra
        nr = int(lens.sum())
        ids = np.repeat(ra - np.concatenate(([0], np.cumsum(lens)[:-1])), lens) + np.arange(nr)
        st = self.run_state[ids]
        lo, hi = self.uoff[self.run_u0[ids]], self.uoff[self.run_u1[ids]]
        kind = np.full(nr, _kernels.ALL, np.int8)
        length = hi - lo
        base = lo.copy()
        if not self._global:  # block-local positions (what grid.flat takes)
            base -= self.grid.offsets[self.run_block[ids]]
        seg_mask = np.zeros(nr, np.int64)
        seg_off = np.zeros(nr, np.int64)
        masks: list[np.ndarray] = []
        copies: dict[int, np.ndarray] = {}
        iscand = st == 2
        cpos = np.flatnonzero(iscand)
        if len(cpos):
            cid = ids[cpos]
            self._ensure_codes()
            codes = self._codes[:, cid]
            if codes.shape[0] == 0 or (codes == codes[:, :1]).all():
                groups = [(np.arange(len(cid)), codes[:, 0])]
            else:
                # one group per set of datasets to read: a condition decided on some runs of a group and not
                # on others is evaluated on all of them (its dataset is read for the group anyway; the
                # comparison agrees with the decision where there was one)
                und = (codes == 2).view(np.int8).astype(np.int64)
                if len(self.paths) < 63:  # a run's key: the bit set of the datasets it reads
                    keys = np.bitwise_or.reduce(und << self._cpath[:, None], axis=0)
                else:
                    keys = np.unique(np.stack([und[self._cpath == j].any(axis=0) for j in range(len(self.paths))]).T,
                                     axis=0, return_inverse=True)[1].reshape(-1)
                groups = []
                for key in sorted(set(keys.tolist())):
                    which = np.flatnonzero(keys == key)
                    sub_ = codes[:, which]
                    groups.append((which, np.where((sub_ == sub_[:, :1]).all(axis=1), sub_[:, 0], 2)))
            for g, (which, code) in enumerate(groups):
                m = self._eval_group(cid[which], code, g)
                at = cpos[which]
                if m is True:
                    continue  # ALL over the run
                if m is False:
                    length[at] = 0
                    continue
                kind[at] = _kernels.MASK
                seg_mask[at] = len(masks)
                off = np.cumsum(length[at])
                seg_off[at] = off - length[at]
                masks.append(m)
            cb = self.run_block[cid]  # sorted
            self.blocks_read += int(np.count_nonzero(cb[1:] != cb[:-1])) + 1
        for j in np.flatnonzero(st == 3).tolist():  # partly sure (bitmaps): the sure positions listed
            v = self._sure_run(int(self.run_u0[ids[j]]), int(self.run_u1[ids[j]]), 0, 3)
            kind[j], length[j] = _kernels.COPY, v.size
            base[j] = 0 if self._global else -int(self.grid.offsets[self.run_block[ids[j]]])
            copies[j] = v
        hits = sum(int(np.count_nonzero(m)) for m in masks)  # each mask is wholly its runs' segments
        out, ends = _kernels.segments(kind, length, base, masks, seg_mask, seg_off, copies, hits)
        # a block's hits end where its last run's segment ends (where the previous block's do, if it has none)
        bend = np.cumsum(lens)
        cut = np.where(bend > 0, ends[np.maximum(bend - 1, 0)], 0) if nr else np.zeros(len(ka), np.int64)
        res: dict[int, np.ndarray] = {}
        prev = 0
        for kk, c in zip(ka.tolist(), cut.tolist()):
            res[kk] = out[prev:c]
            prev = c
        return res

    def _sure_run(self, u0: int, u1: int, base: int, state: int) -> np.ndarray:
        lo, hi = int(self.uoff[u0]), int(self.uoff[u1])
        if state == 1:
            return np.arange(lo - base, hi - base, dtype=np.int64)
        assert self._sure is not None
        part = self._sure & self._cls(range(lo, hi))
        arr = np.frombuffer(part.to_array(), dtype=np.uint32 if self.grid.size < (1 << 32) else np.uint64)
        return arr.astype(np.int64) - base

    def _eval_block(self, k: int, base: int | None = None) -> np.ndarray:
        """Sorted hits of block k as positions minus ``base`` (default: the block's first position, i.e.
        block-local indices): candidate runs read and checked, sure runs taken as they are."""
        g = self._hits_global([k])[k]
        if not self._global:
            g = g + int(self.grid.offsets[k])
        base = int(self.grid.offsets[k]) if base is None else base
        return g - base if base else g

    MEMO_ELEMENTS = 1 << 22  # keep up to 4 Mi evaluated hits, so count() then coords() reads blocks once

    def _walk(self, ks: Sequence[int], skip: set[int] | None = None, fresh: bool = False
              ) -> Iterator[tuple[int, np.ndarray | None]]:
        """(block, its sorted hits in the form of :meth:`_hits_batch`) for the blocks ``ks`` in order; blocks in
        ``skip`` give None (not evaluated). Blocks are evaluated in batches of up to :data:`BATCH_ELEMENTS` positions
        (:meth:`_hits_global`) and kept while the memo has room, so count() then coords() reads them once.
        ``fresh``: the arrays go to the caller's caller as they are (they may be changed there): memo entries
        are copied and new ones not kept."""
        work, memo, limit = self._work_elems, self._memo, self.BATCH_ELEMENTS
        ks = list(ks)
        i, n = 0, len(ks)
        while i < n:
            k = ks[i]
            if skip is not None and k in skip:
                yield k, None
                i += 1
                continue
            if k in memo:
                yield k, memo[k].copy() if fresh else memo[k]
                i += 1
                continue
            group, tot, j = [k], work[k], i + 1
            while (j < n and tot + work[ks[j]] <= limit and ks[j] not in memo
                   and (skip is None or ks[j] not in skip)):
                tot += work[ks[j]]
                group.append(ks[j])
                j += 1
            res = self._hits_global(group)
            for g in group:
                h = res[g]
                if not fresh and self._memo_elems + h.size <= self.MEMO_ELEMENTS:
                    memo[g] = h
                    self._memo_elems += h.size
                yield g, h
            i = j

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(block id, sorted block-local flat indices of the hits) for every block with hits."""
        if self._hits is not None:
            for k in sorted(self._hits):
                if self._hits[k].size:
                    yield k, self._hits[k]
            return
        off = self.grid.offsets
        for k, g in self._walk(self.work_blocks.tolist()):
            assert g is not None
            if g.size:
                yield k, (g - int(off[k])) if self._global else g

    def flat_blocks(self) -> Iterator[np.ndarray]:
        """C-order flat indices of the hits, one array per block with hits. On a 1-D grid a position is
        the flat index, so the hits are made in that form directly (no second array per block)."""
        grid = self.grid
        if self._hits is not None:
            for k, local in self.blocks():
                yield grid.flat(k, local, ascending=True)
            return
        if len(grid.shape) != 1:
            off, uoff = grid.offsets, self.uoff
            # blocks wholly inside the condition: no index list to make
            one = np.flatnonzero((self.run_at[1:] - self.run_at[:-1]) == 1)
            r = self.run_at[one]
            full = one[(self.run_state[r] == 1) & (uoff[self.run_u0[r]] == off[one])
                       & (uoff[self.run_u1[r]] == off[one + 1])]
            for k, g in self._walk(self.work_blocks.tolist(), skip=set(full.tolist())):
                if g is None:
                    yield grid.flat_all(k)
                elif g.size:
                    yield grid.flat(k, g, ascending=True)  # block-local positions on this grid
            return
        for _, g in self._walk(self.work_blocks.tolist(), fresh=True):
            assert g is not None
            if g.size:
                yield g

    def flat_array(self) -> np.ndarray:
        """Every hit as a C-order flat index, in one int64 array in block order (what :meth:`flat_blocks`
        yields, concatenated; on a 1-D grid the blocks' hits are views of one array, returned as it is)."""
        parts = list(self.flat_blocks())
        if not parts:
            return np.zeros(0, np.int64)
        if len(parts) == 1:
            return parts[0]
        b = parts[0].base
        if b is not None and isinstance(b, np.ndarray) and b.ndim == 1 and b.dtype == np.int64 and \
                b.flags.c_contiguous and all(p.base is b for p in parts):
            addr0 = b.ctypes.data
            start = (parts[0].ctypes.data - addr0) // 8
            at = start
            for p in parts:  # consecutive slices of b, in order: the slice of b they make up
                if (p.ctypes.data - addr0) // 8 != at:
                    break
                at += p.size
            else:
                return b[start:at]
        return np.concatenate(parts)

    def count(self) -> int:
        if self._count is None:
            if self._hits is not None:
                self._count = int(sum(h.size for h in self._hits.values()))
            else:
                cand = self.cand_blocks
                n = int(self.sure_counts.sum() - self.sure_counts[cand].sum())
                n += sum(int(g.size) for _, g in self._walk(cand.tolist()))  # type: ignore[union-attr]
                self._count = n
        return self._count

    def materialize(self, comm: Any) -> None:
        """Evaluate the candidate blocks split across ``comm``'s ranks; every rank gets every hit."""
        mine = self.grid.split(comm.size, comm.rank, self.cand_blocks)
        off = self.grid.offsets
        part = {int(k): (g - int(off[k])) if self._global else g for k, g in self._hits_global(mine.tolist()).items()}
        hits: dict[int, np.ndarray] = {}
        for d in sleepy_allgather(comm, part):
            hits.update(d)
        cand = set(self.cand_blocks.tolist())
        rest = [k for k in self.work_blocks.tolist() if k not in cand]
        for k, g in self._hits_global(rest).items():
            hits[k] = (g - int(off[k])) if self._global else g
        self._hits = hits
        self._count = None
