"""Planning a query: element expressions, and the plan of one (which blocks and sub-slabs the indexes decide).

A query's data conditions are grouped into *element expressions* (:func:`split_elements`); each, bound to
datasets of one shape, gets a :class:`SelectionPlan`: the indexes (zone maps, bitmaps, an h5flow_log
dataset's write statistics) give each unit of the block grid a state — sure, candidate, partly sure or
empty — and consecutive units of one state become runs. Reading and checking the candidates is
:mod:`h5flow.query.selection`; :func:`fold` is the one evaluator of the AND/OR tree, used here on masks and
position sets and there on the values read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from h5flow.query.blocks import BlockGrid, grid_for
from h5flow.query.expr import And, DataCond, Or, Query
from h5flow.query.index import (BlockReader, BuildConfig, DamagedIndexError, DatasetIndex, IndexStore, bitmap_class,
                                build_index, file_identity, stats_zones)
from h5flow.query.options import ApplyOptions, StaleIndexError
from h5flow.query.source import Source

if TYPE_CHECKING:
    import h5py


# ---------------------------------------------------------------- element expressions


@dataclass(frozen=True)
class Elem(Query):
    """A maximal data-only sub-tree, as a node of the outer (object-level) tree."""

    expr: Query

    def __str__(self) -> str:
        return str(self.expr)


def expr_paths(expr: Query) -> list[str]:
    """Dataset paths in expression order, no repeats."""
    out: list[str] = []
    def walk(q: Query) -> None:
        if isinstance(q, DataCond):
            if q.path is not None and q.path not in out:
                out.append(q.path)
        elif isinstance(q, (And, Or)):
            walk(q.left)
            walk(q.right)
    walk(expr)
    return out


def has_unnamed(expr: Query) -> bool:
    if isinstance(expr, DataCond):
        return expr.path is None
    if isinstance(expr, (And, Or)):
        return has_unnamed(expr.left) or has_unnamed(expr.right)
    return False


def bind_unnamed(expr: Query, path: str) -> Query:
    if isinstance(expr, DataCond):
        return DataCond(path, expr.op, expr.value, expr.pos) if expr.path is None else expr
    if isinstance(expr, And):
        return And(bind_unnamed(expr.left, path), bind_unnamed(expr.right, path))
    if isinstance(expr, Or):
        return Or(bind_unnamed(expr.left, path), bind_unnamed(expr.right, path))
    return expr


def _data_only(q: Query) -> bool:
    if isinstance(q, DataCond):
        return True
    if isinstance(q, (And, Or)):
        return _data_only(q.left) and _data_only(q.right)
    return False


def split_elements(q: Query) -> Query:
    if _data_only(q):
        return Elem(q)
    if isinstance(q, And):
        return And(split_elements(q.left), split_elements(q.right))
    if isinstance(q, Or):
        return Or(split_elements(q.left), split_elements(q.right))
    return q


# ---------------------------------------------------------------- one evaluation of a bound expression


def fold(q: Query, leaf: Any, and_: Any, or_: Any) -> Any:
    """Evaluate the AND/OR tree ``q`` bottom-up: ``leaf(cond)`` at data conditions, ``and_``/``or_`` at the
    nodes. The one evaluator of element expressions: zone-map plans (numpy masks), bitmap plans (Roaring
    sets) and the exact check of the values read (numpy arrays) all go through it."""
    if isinstance(q, DataCond):
        return leaf(q)
    assert isinstance(q, (And, Or))
    a = fold(q.left, leaf, and_, or_)
    b = fold(q.right, leaf, and_, or_)
    return and_(a, b) if isinstance(q, And) else or_(a, b)


def _pair_and(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
    return a[0] & b[0], a[1] & b[1]


def _pair_or(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
    return a[0] | b[0], a[1] | b[1]


def _mask_op(a: Any, b: Any, absorbing: bool, ufunc: Any) -> Any:
    """AND (``absorbing`` False) or OR (True) of exact-check values: bool arrays, or True/False where the
    indexes decided the whole run (then nothing was read for that side)."""
    if a is absorbing or b is absorbing:
        return absorbing
    if a is (not absorbing):
        return b
    if b is (not absorbing):
        return a
    return ufunc(a, b, out=a)


def mask_and(a: Any, b: Any) -> Any:
    return _mask_op(a, b, False, np.logical_and)


def mask_or(a: Any, b: Any) -> Any:
    return _mask_op(a, b, True, np.logical_or)


def _ranges(cls: Any, mask: np.ndarray, offsets: np.ndarray) -> Any:
    """The positions of the units (position ranges ``offsets[i] .. offsets[i+1]-1``) where ``mask`` is
    true, one ``add_range`` per run of consecutive units."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    out = cls()
    for a, z in zip(offsets[np.flatnonzero(edges == 1)].tolist(), offsets[np.flatnonzero(edges == -1)].tolist()):
        if z > a:
            out.add_range(a, z)
    return out


def _regrid(sure: np.ndarray, maybe: np.ndarray, coarse: np.ndarray, fine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zone decisions on the units ``coarse`` (position offsets) carried to the units ``fine``: a fine unit is
    sure when every coarse unit it meets is, possible when one it meets is (conservative, vectorized)."""
    size_c = np.diff(coarse)
    not_sure = (~sure & (size_c > 0)).astype(np.int64)
    cs_ns = np.concatenate(([0], np.cumsum(not_sure)))
    cs_m = np.concatenate(([0], np.cumsum(maybe & (size_c > 0), dtype=np.int64)))
    lo, hi = fine[:-1], fine[1:]
    nonempty = hi > lo
    a = np.searchsorted(coarse, lo, side="right") - 1
    z = np.searchsorted(coarse, np.maximum(hi - 1, lo), side="right") - 1
    a = a.clip(0, len(size_c) - 1)
    z = z.clip(0, len(size_c) - 1)
    s = nonempty & (cs_ns[z + 1] - cs_ns[a] == 0)
    m = nonempty & (cs_m[z + 1] - cs_m[a] > 0)
    return s, m


def _unique_sorted(a: np.ndarray) -> np.ndarray:
    """np.unique of an already sorted array (without its sort)."""
    if a.size < 2:
        return a.copy()
    keep = np.empty(a.size, bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


@dataclass
class LeafPlan:
    cond: DataCond
    index: str  # "bitmap", "minmax", "none", "stale (ignored)", "other block grid"
    sure: int = 0
    maybe: int = 0


class SelectionPlan:
    """The plan of one bound element expression (every condition names a dataset of one shape), made at
    construction from the indexes alone; :class:`~h5flow.query.selection.Selection` adds the reading.

    The plan is per *unit*: the zones of the finest zone maps in use (sub-slabs of each block along its
    slowest axis, :meth:`BlockGrid.sub_offsets`; whole blocks without any). With zone maps only, each
    condition gives a sure and a possible mask over the units, combined with numpy; with bitmaps, Roaring
    position sets, reduced to the same per-unit state. A unit is *sure* (every position matches: not read),
    a *candidate* (read and checked), partly sure (bitmaps: the sure positions listed, not read) or empty.
    Runs of consecutive units of one state in a block are handled as one: a candidate run is one read
    (``pread`` of the stored chunk's rows where possible) per dataset the run cannot decide from the
    indexes.
    """

    def __init__(self, file: h5py.File, source: Source, expr: Query, options: ApplyOptions,
                 store: IndexStore, dsets: dict[str, Any] | None = None) -> None:
        self.file, self.source, self.expr, self.options = file, source, expr, options
        self.paths = expr_paths(expr)
        dsets = {p: (dsets[p] if dsets is not None and p in dsets else file[p]) for p in self.paths}
        first = dsets[self.paths[0]]
        self.shape: tuple[int, ...] = tuple(first.shape)
        self.grid: BlockGrid = grid_for(self.shape, first.dtype.itemsize, first.chunks, native=not source.container)
        self.dsets = dsets
        ident = None
        if not source.container:
            kept = getattr(file, "_h5flow_cache", None)  # a kept file: its identity is that of its open
            ident = kept.get("identity") if kept is not None else None
            if ident is None:
                ident = file_identity(file)
                if kept is not None:
                    kept["identity"] = ident
        # a block's values are used before the next block is read (only hit positions are kept): reuse buffers
        self.readers = {p: BlockReader(d, self.grid, not source.container, reuse=True, slot=i, ident=ident, name=p)
                        for i, (p, d) in enumerate(dsets.items())}
        self.leaves: list[LeafPlan] = []
        self._store = store
        self._indexes: dict[str, DatasetIndex | None] = {}
        self._hits: dict[int, np.ndarray] | None = None  # materialized (MPI) hits
        self._memo: dict[int, np.ndarray] = {}  # candidate blocks already evaluated (bounded)
        self._memo_elems = 0
        self._count: int | None = None
        self.blocks_read = 0
        self.elements_read = 0  # positions evaluated in candidate blocks (per dataset the expression names)
        self._plan()

    # -- planning
    def _index(self, path: str) -> DatasetIndex | None:
        if path not in self._indexes:
            idx = None
            if self.options.use_index:
                idx = self._store.load(path, self.grid)
                if idx is not None and idx.damaged and self.options.on_stale == "error":
                    raise DamagedIndexError(
                        "; ".join(idx.damaged.values()) + f". Rebuild it (h5flow index build {self.source.path} "
                        f"{path}), drop it (h5flow index drop), or query with --stale scan (ignore it)")
                if idx is not None and (idx.damaged or not (idx.fresh("minmax") or idx.fresh("bitmap"))):
                    if self.options.on_stale == "error" and not idx.damaged:
                        raise StaleIndexError(
                            f"the index of {path} in {self._store.path} is stale: the data changed after it was "
                            f"built. Rebuild it (h5flow index build {self.source.path} {path}), check it "
                            f"(h5flow index verify), or query with --stale scan (ignore it) / --stale rebuild")
                    if self.options.on_stale == "rebuild":
                        kind = "bitmap" if idx.bitmap is not None else "minmax"
                        bins = idx.bitmap.bins_requested if idx.bitmap is not None else 64
                        self._store.close()
                        build_index(self.source.path, path, BuildConfig(kind=kind, bins=bins,  # type: ignore[arg-type]
                                                                         progress=False),
                                    comm=self.options.comm)
                        idx = self._store.load(path, self.grid)
            self._indexes[path] = idx
        return self._indexes[path]

    def _zones(self, c: DataCond) -> tuple[Any, str] | None:
        """The zone maps a condition may use (an index's, or an h5flow_log dataset's write statistics)."""
        assert c.path is not None
        idx = self._index(c.path)
        if idx is not None and idx.minmax is not None and idx.fresh("minmax") and "minmax" in self.options.kinds:
            zones, name = idx.minmax, "minmax"
            if not self.options.sub_slabs and zones.sub > 1:
                return replace(zones, sub=1), "minmax (per block: sub_slabs=False)"
            if zones.format1 and self.grid.clamp_sub(2) > 1:
                name = "minmax (per block: format 1, rebuild for sub-block zone maps)"
            return zones, name
        if (idx is None and self.source.container and self.options.use_index and "minmax" in self.options.kinds
                and (sz := stats_zones(self.dsets[c.path], self.grid)) is not None):
            # an h5flow_log dataset without an index: the connector's per-write statistics as zone maps
            return sz, f"write statistics ({sz.writes} writes)"
        return None

    def _bitmap(self, c: DataCond) -> Any:
        assert c.path is not None
        idx = self._index(c.path)
        if idx is not None and idx.bitmap is not None and idx.fresh("bitmap") and "bitmap" in self.options.kinds:
            return idx.bitmap
        return None

    def _plan(self) -> None:
        conds: list[DataCond] = []
        fold(self.expr, lambda c: conds.append(c) if c not in conds else None, lambda a, b: None,
              lambda a, b: None)
        self.conds = conds
        zones = {c: self._zones(c) for c in conds}
        bitmaps = {c: self._bitmap(c) for c in conds}
        sub = max([getattr(z[0], "sub", 1) for z in zones.values() if z is not None] or [1])
        if any(b is not None for b in bitmaps.values()):
            # a bitmap plan is position sets (the zone maps tighten them at their own zones); its units only
            # set what is read: few per block, as reducing Roaring sets to units costs per unit
            sub = self.grid.clamp_sub(self.BITMAP_UNITS) if self.options.sub_slabs else 1
        self.sub = sub
        self.uoff = self.grid.sub_offsets(sub)
        self.usize = self.grid.sub_sizes(sub)
        self._nonempty = self.grid.sub_nonempty(sub)
        if any(b is not None for b in bitmaps.values()):
            self._plan_bitmap(zones, bitmaps)
        else:
            self._plan_zones(zones)
        self._runs()

    def _unused(self, c: DataCond) -> str:
        """What the plan says of a condition no index serves."""
        assert c.path is not None
        idx = self._indexes.get(c.path)
        if idx is not None:
            return "damaged (ignored)" if idx.damaged else "stale (ignored)"
        if self.options.use_index and self._store.has(c.path):
            return "none (its index has another block grid)"
        return "none"

    def _leaf_masks(self, c: DataCond, zones: tuple[Any, str] | None) -> tuple[np.ndarray, np.ndarray, str]:
        """(sure, possible) per unit from a condition's zone maps; none: nothing sure, every unit possible."""
        if zones is None:
            return np.zeros(len(self.usize), bool), self._nonempty, "none"
        z, name = zones
        all_ok, none = z.status(c.op, c.value)
        coarse = z.unit_offsets()
        if coarse is self.uoff or (len(coarse) == len(self.uoff) and np.array_equal(coarse, self.uoff)):
            # status: an empty unit is never possible; it can be 'sure' (of nothing) for != and NaN
            return np.logical_and(all_ok, self._nonempty, out=all_ok), np.logical_not(none, out=none), name
        s, m = _regrid(all_ok, ~none, coarse, self.uoff)
        return s, m, name

    def _plan_zones(self, zones: dict[DataCond, tuple[Any, str] | None]) -> None:
        """Zone maps only: numpy masks over the units, no position sets."""
        masks: dict[DataCond, tuple[np.ndarray, np.ndarray]] = {}
        for c in self.conds:
            s, m, name = self._leaf_masks(c, zones[c])
            masks[c] = (s, m)
            self.leaves.append(LeafPlan(c, name if name != "none" else self._unused(c), -1, -1))
        sure, maybe = fold(self.expr, lambda c: masks[c], _pair_and, _pair_or)
        cand = maybe & ~sure
        self._bitmap_mode = False
        self._cands = self._sure = None
        self._masks = masks
        self._unit_sure: np.ndarray | None = None
        self._sure_units = sure  # (a unit both sure and possible is sure: cand excludes it)
        self.state = sure.view(np.int8) | (cand.view(np.int8) << 1)  # 0 nothing, 1 sure, 2 candidate

    def _plan_bitmap(self, zones: dict[DataCond, tuple[Any, str] | None], bitmaps: dict[DataCond, Any]) -> None:
        """With bitmaps: Roaring position sets per condition (tightened by zone maps), reduced to units."""
        n = self.grid.size
        cls = self._cls = bitmap_class(n)
        full = cls()
        if n:
            full.add_range(0, n)
        sets: dict[DataCond, tuple[Any, Any]] = {}
        for c in self.conds:
            sure, maybe, used = cls(), full, []
            bm = bitmaps[c]
            if bm is not None:
                all_ok, none = bm.status(c.op, c.value)
                some = ~all_ok & ~none
                ids = np.arange(bm.nbins)
                if bm.bin_count[all_ok].sum() <= n // 2:
                    sure = bm.union(ids[all_ok])
                else:
                    sure = full - bm.union(ids[~all_ok])
                maybe = sure | bm.union(ids[some]) if some.any() else sure
                used.append("bitmap")
            if zones[c] is not None:  # zone maps and bitmaps are both safe bounds: keep the tighter
                z, name = zones[c]
                all_ok, none = z.status(c.op, c.value)
                uoff = z.unit_offsets()
                if all_ok.any():
                    sure = sure | _ranges(cls, all_ok, uoff)
                if none.any():
                    maybe = maybe & _ranges(cls, ~none, uoff)
                used.append(name)
            plan = LeafPlan(c, used[0] if used else self._unused(c))
            plan.sure, plan.maybe = len(sure), len(maybe)
            self.leaves.append(plan)
            sets[c] = (sure, maybe)
        sure, maybe = fold(self.expr, lambda c: sets[c], _pair_and, _pair_or)
        cands = maybe - sure
        self._bitmap_mode = True
        self._sets, self._sure, self._cands = sets, sure, cands
        cand_n = self._unit_counts(cands)
        sure_n = self._unit_counts(sure)
        cand = cand_n > 0
        self.state = np.where(cand, 2, np.where((sure_n == self.usize) & (sure_n > 0), 1,
                                                np.where(sure_n > 0, 3, 0))).astype(np.int8)
        self._unit_sure = np.where(cand, 0, sure_n)
        self._masks = None

    def _unit_counts(self, bm: Any) -> np.ndarray:
        """Positions of the Roaring set ``bm`` in each unit. Few positions: listed once and cut at the unit
        bounds; many: counted per block, then per unit only in the blocks that are neither empty nor full
        (range cardinalities, without listing the positions)."""
        nu, sub = len(self.usize), self.sub
        out = np.zeros(nu, np.int64)
        if not len(bm) or not nu:
            return out
        if len(bm) <= 4 * nu:
            arr = np.frombuffer(bm.to_array(), dtype=np.uint32 if self.grid.size < (1 << 32) else np.uint64)
            return np.diff(np.searchsorted(arr, self.uoff)).astype(np.int64)
        off, uoff = self.grid.offsets.tolist(), self.uoff.tolist()
        for k in range(self.grid.nblocks):
            a, z = off[k], off[k + 1]
            c = bm.range_cardinality(a, z)
            if c == z - a:
                out[k * sub:(k + 1) * sub] = self.usize[k * sub:(k + 1) * sub]
            elif c:
                out[k * sub:(k + 1) * sub] = [bm.range_cardinality(uoff[u], uoff[u + 1])
                                              for u in range(k * sub, (k + 1) * sub)]
        return out

    BITMAP_UNITS = 8  # units per block of a plan with bitmaps
    GAP_ELEMENTS = 1 << 14  # candidate runs of a block closer than this are read as one (exact either way)

    def _runs(self) -> None:
        """Runs of consecutive units of one state inside a block, vectorized: (first unit, end unit, state).
        Candidate runs of a block separated by fewer than :data:`GAP_ELEMENTS` positions are merged (the
        units between are read and checked too: a read and a check cost less than another run), and each
        condition's decision over each candidate run is taken here, with numpy."""
        st, sub = self.state, self.sub
        nu = len(st)
        if nu == 0:
            u0 = u1 = state = np.zeros(0, np.int64)
        else:
            brk = np.empty(nu, bool)
            brk[0] = True
            np.not_equal(st[1:], st[:-1], out=brk[1:])
            brk[::sub] = True
            starts = np.flatnonzero(brk)
            rs = st[starts]
            keep = rs > 0
            ends = np.append(starts[1:], nu)
            u0, u1, state = starts[keep], ends[keep], rs[keep]
        cand = state == 2
        if cand.sum() > 1:
            cu0, cu1 = u0[cand], u1[cand]
            blk = cu0 // sub
            gap = self.uoff[cu0[1:]] - self.uoff[cu1[:-1]]
            join = (blk[1:] == blk[:-1]) & (gap < self.GAP_ELEMENTS)
            if join.any():
                first = np.concatenate(([True], ~join))
                last = np.concatenate((~join, [True]))
                gu0, gu1 = cu0[first], cu1[last]
                # drop the sure runs inside a merged candidate run
                other = ~cand
                g = np.searchsorted(gu0, u0[other], side="right") - 1
                inside = (g >= 0) & (u0[other] < gu1[g.clip(0)])
                ou0, ou1, ost = u0[other][~inside], u1[other][~inside], state[other][~inside]
                u0 = np.concatenate((gu0, ou0))
                u1 = np.concatenate((gu1, ou1))
                state = np.concatenate((np.full(len(gu0), 2, state.dtype), ost))
                order = np.argsort(u0, kind="stable")
                u0, u1, state = u0[order], u1[order], state[order]
                cand = state == 2
        self.run_u0, self.run_u1, self.run_state = u0, u1, state
        self.run_block = u0 // sub
        nb = self.grid.nblocks
        self.run_at = np.searchsorted(self.run_block, np.arange(nb + 1))
        self.cand_blocks = _unique_sorted(self.run_block[cand])
        self.work_blocks = _unique_sorted(self.run_block)
        # per condition (self.conds order) and run: 1 sure over the whole run, 0 no possible position in it,
        # 2 undecided (read there). Zone-map plans decide every candidate run here with numpy; bitmap plans
        # when a batch first needs it (Roaring range cardinalities)
        self._cix = {c: j for j, c in enumerate(self.conds)}
        self._global = len(self.grid.shape) == 1  # hits as global positions (1-D: flat indices), else block-local
        self._cpath = np.array([self.paths.index(c.path) for c in self.conds], np.int64)  # type: ignore[arg-type]
        self._codes = np.full((len(self.conds), len(u0)), 2, np.int8)
        self._coded = self._masks is not None
        if self._masks is not None and cand.any():
            ci = np.flatnonzero(cand)
            bounds = np.empty(2 * len(ci), np.int64)
            bounds[0::2], bounds[1::2] = u0[ci], u1[ci]
            pad = np.append(bounds, nu)
            for j, c in enumerate(self.conds):
                sm, mm = self._masks[c]
                # reduceat over [u0, u1) pairs (the odd slots are the gaps between runs, unused)
                all_s = np.logical_and.reduceat(np.append(sm, True), pad)[0:-1:2]
                any_m = np.logical_or.reduceat(np.append(mm, False), pad)[0:-1:2]
                self._codes[j, ci] = np.where(all_s, 1, np.where(any_m, 2, 0))
        # positions each block's runs produce (candidate runs read, sure runs listed): batches are bounded by it
        size = self.uoff[u1] - self.uoff[u0]
        self._work_elems = np.bincount(self.run_block, weights=size, minlength=nb).astype(np.int64).tolist()

    @property
    def sure_counts(self) -> np.ndarray:
        """Sure positions per block outside candidate runs (those are counted when checked)."""
        if self._unit_sure is None:
            self._unit_sure = np.where(self.state == 1, self.usize, 0)
        nb, sub = self.grid.nblocks, self.sub
        us = self._unit_sure
        return (us.reshape(nb, sub).sum(axis=1) if len(us) == nb * sub else np.zeros(nb, np.int64)).astype(np.int64)

    def explain(self) -> dict[str, Any]:
        for p in self.leaves:
            if p.sure < 0 and self._masks is not None:
                sm, mm = self._masks[p.cond]
                p.sure = int(np.add.reduce(self.usize, where=sm))
                p.maybe = int(np.add.reduce(self.usize, where=mm))
        if self._bitmap_mode:
            assert self._cands is not None and self._sure is not None
            candidates, sure = len(self._cands), len(self._sure)
        else:
            candidates = int(np.add.reduce(self.usize, where=self.state == 2))
            sure = int(np.add.reduce(self.usize, where=self._sure_units))
        return {"expression": str(self.expr), "datasets": self.paths, "shape": list(self.shape),
                "block_shape": list(self.grid.block), "blocks": self.grid.nblocks,
                "candidate_blocks": int(len(self.cand_blocks)), "candidates": candidates,
                "sure": sure, "blocks_read": self.blocks_read,
                "elements_read": self.elements_read, "sub_blocks": self.sub,
                "reads": sum(r.reads for r in self.readers.values()),
                "leaves": [{"condition": str(p.cond), "index": p.index, "sure": p.sure, "maybe": p.maybe}
                           for p in self.leaves]}
