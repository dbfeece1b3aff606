"""Applying a query (H5Qapply): bind names, plan with the indexes, evaluate blocks, stream the hits.

A query is split into *element expressions* (maximal sub-trees of data conditions: ``plate == 4322 &
fiber < 100``) and *object conditions* (attribute values, attribute names, link names). An element
expression over named datasets needs them aligned (the same shape): it is evaluated once, element by
element, and its hits belong to every dataset it names (the H5Boss case, columns of one table). An
element expression without names (``Q.data() > 3``, ``* > 3``) is evaluated on every numeric dataset.
Object conditions are evaluated on every object under the location, and ``&``/``|`` combine per object as
H5Qcombine does: AND needs both sides on the same object, OR takes either.

Evaluation is per block (blocks.py). Each condition gives two position sets: *sure* (certainly
matching, from bitmap bins or zone maps entirely inside the condition) and *maybe* (not excluded); AND
and OR combine them. Blocks holding positions in ``maybe - sure`` are read and evaluated exactly with
numpy (the candidate check), so answers are exact. Blocks with only sure positions are never read to
count or locate hits; of a candidate block only the sub-slabs (blocks.py) holding candidates are read,
the sure positions of its other sub-slabs are taken as they are. Stale indexes are never used
(:data:`StalePolicy`).
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from h5flow._mpi import sleepy_allgather
from h5flow.query.blocks import BlockGrid, grid_for
from h5flow.query.expr import And, AttrName, AttrValue, DataCond, LinkName, Name, Or, Query, QueryError
from h5flow.query import _kernels
from h5flow.query.grammar import QuerySyntaxError, parse
from h5flow.query.index import (BlockReader, BuildConfig, DamagedIndexError, DatasetIndex, IndexStore, _buffer,
                                bitmap_class, build_index, default_sub, file_identity, is_numeric, stats_zones)
from h5flow.query.source import Source

if TYPE_CHECKING:
    import h5py

StalePolicy = Literal["error", "scan", "rebuild"]
_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}
Location = Union[str, "os.PathLike[str]", "h5py.Group"]


class StaleIndexError(QueryError):
    """An index whose dataset changed after it was built (it would give wrong answers)."""


@dataclass
class ApplyOptions:
    """How :func:`apply` runs."""

    use_index: bool = True  # False: ignore indexes (full scan, blockwise)
    on_stale: StalePolicy = "error"  # stale index: refuse, ignore it and scan, or rebuild it first
    comm: Any = None  # an mpi4py communicator: blocks are split across its ranks, hits gathered on all
    kinds: tuple[str, ...] = ("bitmap", "minmax")  # index kinds a query may use, in order of preference
    sub_slabs: bool = True  # False: zone maps per block and candidate blocks read whole (as index format 1)

    def __post_init__(self) -> None:
        if self.on_stale not in ("error", "scan", "rebuild"):
            raise ValueError(f"on_stale must be error, scan or rebuild, got {self.on_stale!r}")
        bad = [k for k in self.kinds if k not in ("bitmap", "minmax")]
        if bad:
            raise ValueError(f"unknown index kind(s) {bad}: use bitmap and/or minmax")


# ---------------------------------------------------------------- element expressions


@dataclass(frozen=True)
class Elem(Query):
    """A maximal data-only sub-tree, as a node of the outer (object-level) tree."""

    expr: Query

    def __str__(self) -> str:
        return str(self.expr)


def _paths(expr: Query) -> list[str]:
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


def _has_unnamed(expr: Query) -> bool:
    if isinstance(expr, DataCond):
        return expr.path is None
    if isinstance(expr, (And, Or)):
        return _has_unnamed(expr.left) or _has_unnamed(expr.right)
    return False


def _bind_unnamed(expr: Query, path: str) -> Query:
    if isinstance(expr, DataCond):
        return DataCond(path, expr.op, expr.value, expr.pos) if expr.path is None else expr
    if isinstance(expr, And):
        return And(_bind_unnamed(expr.left, path), _bind_unnamed(expr.right, path))
    if isinstance(expr, Or):
        return Or(_bind_unnamed(expr.left, path), _bind_unnamed(expr.right, path))
    return expr


def _data_only(q: Query) -> bool:
    if isinstance(q, DataCond):
        return True
    if isinstance(q, (And, Or)):
        return _data_only(q.left) and _data_only(q.right)
    return False


def _split(q: Query) -> Query:
    if _data_only(q):
        return Elem(q)
    if isinstance(q, And):
        return And(_split(q.left), _split(q.right))
    if isinstance(q, Or):
        return Or(_split(q.left), _split(q.right))
    return q


# ---------------------------------------------------------------- one evaluation of a bound expression


def _fold(q: Query, leaf: Any, and_: Any, or_: Any) -> Any:
    """Evaluate the AND/OR tree ``q`` bottom-up: ``leaf(cond)`` at data conditions, ``and_``/``or_`` at the
    nodes. The one evaluator of element expressions: zone-map plans (numpy masks), bitmap plans (Roaring
    sets) and the exact check of the values read (numpy arrays) all go through it."""
    if isinstance(q, DataCond):
        return leaf(q)
    assert isinstance(q, (And, Or))
    a = _fold(q.left, leaf, and_, or_)
    b = _fold(q.right, leaf, and_, or_)
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


def _mask_and(a: Any, b: Any) -> Any:
    return _mask_op(a, b, False, np.logical_and)


def _mask_or(a: Any, b: Any) -> Any:
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


class Selection:
    """The hits of one bound element expression (every condition names a dataset of one shape).

    Lazy: planning reads only indexes; :meth:`blocks` reads the candidate blocks as it goes.

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
        self.paths = _paths(expr)
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
        _fold(self.expr, lambda c: conds.append(c) if c not in conds else None, lambda a, b: None,
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
        sure, maybe = _fold(self.expr, lambda c: masks[c], _pair_and, _pair_or)
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
        sure, maybe = _fold(self.expr, lambda c: sets[c], _pair_and, _pair_or)
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
            m = _fold(self.expr, leaf, _mask_and, _mask_or)
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


# ---------------------------------------------------------------- results


@dataclass
class DatasetHits:
    """The elements of one dataset a query selected (a region reference in H5Qapply's view)."""

    file: str
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    selection: Selection

    @property
    def count(self) -> int:
        return self.selection.count()

    def coords(self) -> Iterator[np.ndarray]:
        """Batches of coordinates, (n, ndim) int64, one batch per block (block order; sorted in a block)."""
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            yield grid.coords(k, local)

    def flat(self) -> Iterator[np.ndarray]:
        """Batches of C-order flat indices into the dataset (int64, ``np.unravel_index``-able), one
        batch per block (block order; sorted in a block). The cheapest form of the hits."""
        yield from self.selection.flat_blocks()

    def flat_array(self) -> np.ndarray:
        """Every hit as a C-order flat index, one int64 array in block order (``np.sort`` it for C order;
        sorted already for a 1-D dataset): :meth:`flat` concatenated, without a copy where it can."""
        return self.selection.flat_array()

    def runs(self) -> Iterator[tuple[tuple[int, ...], int]]:
        """Hyperslab runs: (start coordinate, length along the last axis), block by block."""
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            ext = grid.extent(k)
            last = ext[-1] if ext else 1
            brk = np.flatnonzero((np.diff(local) != 1) | ((local[1:] % last) == 0)) + 1
            starts = np.concatenate(([0], brk))
            lengths = np.diff(np.concatenate((starts, [local.size])))
            c = grid.coords(k, local[starts])
            for row, n in zip(c, lengths):
                yield tuple(int(x) for x in row), int(n)

    def values(self, path: str | None = None) -> Iterator[np.ndarray]:
        """Batches of the selected values (of this dataset, or of another aligned dataset ``path``)."""
        dset = self.selection.file[path or self.path]
        if tuple(dset.shape) != self.shape:
            raise QueryError(f"{path}: shape {dset.shape} is not aligned with {self.path} {self.shape}")
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            yield np.asarray(dset[grid.slices(k)]).reshape(-1)[local]

    def to_arrays(self, with_values: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """All coordinates (n, ndim) in C order of the dataset, and the values if asked (materialized)."""
        cs = list(self.coords())
        c = np.concatenate(cs) if cs else np.zeros((0, len(self.shape)), np.int64)
        order = np.lexsort(c.T[::-1]) if c.shape[1] and len(c) else np.arange(len(c))
        vals = None
        if with_values:
            vs = list(self.values())
            vals = (np.concatenate(vs) if vs else np.zeros(0, self.dtype))[order]
        return c[order], vals


@dataclass
class QueryResult:
    """What H5Qapply's view holds: region hits per dataset, matching objects, matching attributes."""

    query: Query
    datasets: list[DatasetHits] = field(default_factory=list)
    objects: list[tuple[str, str]] = field(default_factory=list)  # (file, object path)
    attributes: list[tuple[str, str, str]] = field(default_factory=list)  # (file, object path, attribute)
    _files: list[Any] = field(default_factory=list, repr=False)

    def nonempty(self) -> list[DatasetHits]:
        return [d for d in self.datasets if d.count > 0]

    @property
    def count(self) -> int:
        return sum(d.count for d in self.datasets)

    def close(self) -> None:
        for f in self._files:
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass
        self._files.clear()

    def __enter__(self) -> QueryResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- metadata conditions


def _attr_matches(obj: Any, name: str, op: str, value: Any) -> bool:
    if name not in obj.attrs:
        return False
    try:
        a = obj.attrs[name]
    except (OSError, TypeError, ValueError):
        return False
    vals = np.asarray(a).reshape(-1)
    if isinstance(value, str):
        items = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vals.tolist()]
        items = [v for v in items if isinstance(v, str)]
    else:
        if vals.dtype.kind not in "biuf":
            return False
        items = vals.tolist()
    import operator

    f = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
         ">=": operator.ge}[op]
    return any(f(v, value) for v in items)


@dataclass
class _Match:
    region: Query | None = None
    obj: bool = False
    attrs: list[str] = field(default_factory=list)


def _eval_obj(q: Query, path: str, obj: Any, is_dset: bool) -> _Match | None:
    if isinstance(q, Elem):
        if _has_unnamed(q.expr):
            if not is_dset or not is_numeric(obj.dtype):
                return None
            return _Match(region=_bind_unnamed(q.expr, path))
        return _Match(region=q.expr) if path in _paths(q.expr) else None
    if isinstance(q, AttrValue):
        return _Match(attrs=[q.name]) if _attr_matches(obj, q.name, q.op, q.value) else None
    if isinstance(q, AttrName):
        names = [n for n in obj.attrs.keys() if fnmatch.fnmatchcase(n, q.pattern)]
        return _Match(attrs=names) if names else None
    if isinstance(q, LinkName):
        base = path.rstrip("/").rsplit("/", 1)[-1]
        return _Match(obj=True) if base and fnmatch.fnmatchcase(base, q.pattern) else None
    if isinstance(q, And):
        a = _eval_obj(q.left, path, obj, is_dset)
        if a is None:
            return None
        b = _eval_obj(q.right, path, obj, is_dset)
        if b is None:
            return None
        region = And(a.region, b.region) if a.region is not None and b.region is not None else \
            (a.region if a.region is not None else b.region)
        return _Match(region, a.obj or b.obj, a.attrs + [x for x in b.attrs if x not in a.attrs])
    if isinstance(q, Or):
        a = _eval_obj(q.left, path, obj, is_dset)
        b = _eval_obj(q.right, path, obj, is_dset)
        if a is None or b is None:
            return a if a is not None else b
        region = Or(a.region, b.region) if a.region is not None and b.region is not None else None
        if region is None:
            # a region OR a whole-object match: H5Q keeps both references; so do we
            region = a.region if a.region is not None else b.region
        return _Match(region, a.obj or b.obj, a.attrs + [x for x in b.attrs if x not in a.attrs])
    raise TypeError(f"cannot evaluate {type(q).__name__}")


# ---------------------------------------------------------------- binding and apply


class _Handles(dict):  # type: ignore[type-arg]
    """The h5py objects of one file looked up once per query (each lookup makes a new h5py object)."""

    def __init__(self, f: h5py.File) -> None:
        super().__init__()
        self.f = f
        # a file kept open between queries (source.kept_file) is unchanged while it is used: its datasets
        # are looked up once (read-only h5py objects, which keep their shape) for every query on it
        self.shared: dict[str, Any] | None = getattr(f, "_h5flow_cache", None)
        if self.shared is not None:
            self.update(self.shared.setdefault("objects", {}))

    def __missing__(self, path: str) -> Any:
        import h5py

        obj = None
        if path.startswith("/"):
            try:  # half the cost of f[path]
                obj = h5py.Dataset(h5py.h5d.open(self.f.id, path.encode("utf-8")), readonly=self.shared is not None)
            except Exception:  # noqa: BLE001 - a group, a missing path, ...: the ordinary lookup says which
                obj = None
        if obj is None:
            try:
                obj = self.f.get(path)
            except Exception:  # noqa: BLE001
                obj = None
        self[path] = obj
        if self.shared is not None and len(self.shared["objects"]) < 256:
            self.shared["objects"][path] = obj
        return obj


@dataclass
class _Names:
    """What a file offers a bare name, gathered only when a name binds to nothing (error messages)."""

    datasets: dict[str, Any]
    objects: list[tuple[str, Any, bool]]
    _attrs: set[str] | None = None
    unknown: dict[str, str] = field(default_factory=dict)  # name -> why it names nothing in this file

    def attrs(self) -> set[str]:
        if self._attrs is None:
            self._attrs = set()
            for _, o, _ in self.objects:
                try:
                    self._attrs.update(o.attrs.keys())
                except Exception:  # noqa: BLE001 - an object whose attributes cannot be listed offers none
                    pass
        return self._attrs

    def fields(self) -> dict[str, list[str]]:
        """Compound datasets and their field names."""
        return {p: list(d.dtype.names) for p, d in self.datasets.items() if d.dtype.names}


def _listing(items: Sequence[str], limit: int = 12) -> str:
    items = sorted(items)
    return (", ".join(items[:limit]) + (f", ... ({len(items)} in all)" if len(items) > limit else "")) or "none"


def _unknown_name(name: str, names: _Names) -> str:
    """Why a bare name names nothing: the datasets, compound fields and attributes that exist."""
    fields = names.fields()
    owners = [p for p, fs in fields.items() if name in fs]
    if owners:
        return (f"'{name}' is a field of the compound dataset(s) {_listing(owners)}: fields of compound datasets "
                "are not queried element-wise (store the columns as datasets, docs/QUERY.md \"Limits\")")
    head, _, tail = name.rpartition(".")
    table = [p for p in names.datasets if p.rsplit("/", 1)[-1] == head]
    if head and table:
        d = names.datasets[table[0]]
        have = f"its fields: {_listing(list(d.dtype.names))}" if d.dtype.names else f"it has type {d.dtype}, no fields"
        return (f"'{name}': {table[0]} has no field '{tail}' ({have}); fields of compound datasets are not "
                "queried element-wise")
    numeric = [p for p, d in names.datasets.items() if is_numeric(d.dtype)]
    other = [p for p in names.datasets if p not in numeric]
    return (f"no dataset or attribute named '{name}': datasets {_listing(numeric)}"
            + (f"; not numeric: {_listing(other)}" if other else "")
            + (f"; compound fields: {_listing([f'{p}.{x}' for p, fs in fields.items() for x in fs])}" if fields else "")
            + f"; attributes {_listing(list(names.attrs()))} (write @name for an attribute that may be absent)")


def _bind(q: Query, f: h5py.File, base: str, datasets: dict[str, Any], text: str | None,
          handles: _Handles | None = None, names: _Names | None = None) -> Query:
    import h5py

    handles = handles if handles is not None else _Handles(f)

    def err(msg: str, pos: int) -> Exception:
        if text is not None and pos >= 0:
            return QuerySyntaxError(msg, text, pos)
        return QueryError(msg)

    def absolute(p: str) -> str:
        return p if p.startswith("/") else (base.rstrip("/") + "/" + p)

    if isinstance(q, (And, Or)):
        return type(q)(_bind(q.left, f, base, datasets, text, handles, names),
                       _bind(q.right, f, base, datasets, text, handles, names))
    if isinstance(q, DataCond) and q.path is not None:
        p = absolute(q.path)
        obj = handles[p]
        if not isinstance(obj, h5py.Dataset):
            raise err(f"no dataset {p} in {f.filename}", q.pos)
        if not is_numeric(obj.dtype):
            raise err(f"{p} has type {obj.dtype}: only integer, float and bool datasets are queried element-wise",
                      q.pos)
        return DataCond(p, q.op, q.value, q.pos)
    if isinstance(q, Name):
        hits = sorted(p for p in datasets if p.rsplit("/", 1)[-1] == q.name)
        if isinstance(q.value, str) or not hits:
            if names is not None and q.name not in names.attrs():  # names nothing here: remember why
                names.unknown.setdefault(q.name, _unknown_name(q.name, names))
            return AttrValue(q.name, q.op, q.value, q.pos)
        if len(hits) > 1:
            raise err(f"'{q.name}' names {len(hits)} datasets ({', '.join(hits[:4])}{'...' if len(hits) > 4 else ''}):"
                      " write the full path", q.pos)
        return _bind(DataCond(hits[0], q.op, q.value, q.pos), f, base, datasets, text,  # type: ignore[arg-type]
                     handles)
    return q


def _check_aligned(q: Query, f: Any, text: str | None) -> None:
    if isinstance(q, Elem):
        paths = _paths(q.expr)
        if paths and _has_unnamed(q.expr):
            raise QueryError("a condition on every dataset ('*' / Q.data()) cannot be combined element-wise with "
                             f"named datasets ({', '.join(paths)}); separate them with an attribute or link condition "
                             "or query them separately")
        shapes = {p: tuple(f[p].shape) for p in paths}
        if len(set(shapes.values())) > 1:
            detail = ", ".join(f"{p} {s}" for p, s in shapes.items())
            raise QueryError(f"datasets combined element by element must have one shape (aligned columns); got {detail}")
    elif isinstance(q, (And, Or)):
        _check_aligned(q.left, f, text)
        _check_aligned(q.right, f, text)  # f: the file, or its _Handles


def _needs_visit(q: Query) -> bool:
    if isinstance(q, (AttrValue, AttrName, LinkName, Name)):
        return True
    if isinstance(q, DataCond):
        return q.path is None
    if isinstance(q, (And, Or)):
        return _needs_visit(q.left) or _needs_visit(q.right)
    return False


def apply(loc: Location | Sequence[Location], query: Query | str, options: ApplyOptions | None = None
          ) -> QueryResult:
    """Apply ``query`` (a :class:`Query` or its text) to a file, container, group or list of them.

    Returns a :class:`QueryResult`; close it (or use ``with``) when done. Under MPI pass
    ``ApplyOptions(comm=...)``: every rank must call, candidate blocks are split across ranks and every
    rank receives every hit.
    """
    import h5py

    options = options or ApplyOptions()
    text = query if isinstance(query, str) else None
    q = parse(query) if isinstance(query, str) else query
    if not isinstance(q, Query):
        raise TypeError(f"apply() needs a query or its text, got {type(query).__name__}")
    locs = list(loc) if isinstance(loc, (list, tuple)) else [loc]
    result = QueryResult(q)
    unknown: dict[str, list[str]] = {}  # bare name -> why it names nothing, per location
    try:
        for one in locs:
            if isinstance(one, h5py.Group):
                f, base = one.file, one.name
                source = Source.of(f.filename)
            else:
                source = Source.of(one)
                f, closer = source.open_kept()  # a handle kept between queries where safe (source.py)
                result._files.append(closer)
                base = "/"
            for name, why in _apply_one(f, base, source, q, text, options, result).items():
                unknown.setdefault(name, []).append(why)
        # a bare name that names no dataset and no attribute in any location is a mistake (a misspelled
        # dataset or field), not an attribute that happens to be absent: say what exists
        for name, whys in unknown.items():
            if len(whys) == len(locs):
                pos = _name_pos(q, name)
                msg = whys[0] + ("" if len(locs) == 1 else
                                 f" (in the first location; the other {len(locs) - 1} have no such name either)")
                raise QuerySyntaxError(msg, text, pos) if text is not None and pos >= 0 else QueryError(msg)
    except BaseException:
        result.close()
        raise
    return result


def _name_pos(q: Query, name: str) -> int:
    """Where the bare name ``name`` stands in the query text (-1: not known)."""
    if isinstance(q, Name) and q.name == name:
        return q.pos
    if isinstance(q, (And, Or)):
        a = _name_pos(q.left, name)
        return a if a >= 0 else _name_pos(q.right, name)
    return -1


def _apply_one(f: h5py.File, base: str, source: Source, q: Query, text: str | None, options: ApplyOptions,
               result: QueryResult) -> dict[str, str]:
    """Apply ``q`` to one file; returns the bare names that name nothing in it, with what does exist."""
    import h5py

    objects: list[tuple[str, Any, bool]] = []
    datasets: dict[str, Any] = {}
    if _needs_visit(q):
        root = f[base]
        objects.append((root.name, root, isinstance(root, h5py.Dataset)))

        def visit(name: str, obj: Any) -> None:
            objects.append((obj.name, obj, isinstance(obj, h5py.Dataset)))

        if isinstance(root, h5py.Group):
            root.visititems(visit)
        datasets = {p: o for p, o, d in objects if d}
    handles = _Handles(f)
    handles.update(datasets)
    names = _Names(datasets, objects)
    bound = _split(_bind(q, f, base, datasets, text, handles, names))
    _check_aligned(bound, handles, text)
    store = IndexStore(source)
    result._files.append(store)
    selections: dict[Any, Selection] = {}

    def selection_for(expr: Query) -> Selection:
        # the aligned datasets of one element expression share its object (keyed by identity: hashing or
        # printing the tree costs more than the lookup should)
        sel = selections.get(id(expr))
        if sel is None or sel.expr is not expr:
            sel = Selection(f, source, expr, options, store, handles)
            if options.comm is not None:
                sel.materialize(options.comm)
            selections[id(expr)] = sel
        return sel

    def add(path: str, m: _Match) -> None:
        if m.region is not None:
            d = handles[path]
            result.datasets.append(DatasetHits(str(source.path), path, tuple(d.shape), d.dtype, selection_for(m.region)))
        if m.obj:
            result.objects.append((str(source.path), path))
        for a in m.attrs:
            result.attributes.append((str(source.path), path, a))

    if not objects:  # element expressions over named datasets only: no need to visit the file
        for path in _all_paths(bound):
            m = _eval_obj(bound, path, handles[path], True)
            if m is not None:
                add(path, m)
        return names.unknown
    for path, obj, is_dset in objects:
        m = _eval_obj(bound, path, obj, is_dset)
        if m is not None:
            add(path, m)
    return names.unknown


def _all_paths(q: Query) -> list[str]:
    out: list[str] = []
    def walk(n: Query) -> None:
        if isinstance(n, Elem):
            for p in _paths(n.expr):
                if p not in out:
                    out.append(p)
        elif isinstance(n, (And, Or)):
            walk(n.left)
            walk(n.right)
    walk(q)
    return out
