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
from h5flow.query.grammar import QuerySyntaxError, parse
from h5flow.query.index import (DEFAULT_SUB_BLOCKS, BlockReader, DatasetIndex, IndexStore, bitmap_class,
                                build_index, BuildConfig, is_numeric, stats_zones)
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


def _ranges(cls: Any, mask: np.ndarray, offsets: np.ndarray) -> Any:
    """The positions of the units (position ranges ``offsets[i] .. offsets[i+1]-1``) where ``mask`` is
    true, one ``add_range`` per run of consecutive units."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    out = cls()
    for a, z in zip(offsets[np.flatnonzero(edges == 1)].tolist(), offsets[np.flatnonzero(edges == -1)].tolist()):
        if z > a:
            out.add_range(a, z)
    return out



@dataclass
class LeafPlan:
    cond: DataCond
    index: str  # "bitmap", "minmax", "none", "stale (ignored)", "other block grid"
    sure: int = 0
    maybe: int = 0


class Selection:
    """The hits of one bound element expression (every condition names a dataset of one shape).

    Lazy: planning reads only indexes; :meth:`blocks` reads the candidate blocks as it goes.
    """

    def __init__(self, file: h5py.File, source: Source, expr: Query, options: ApplyOptions,
                 store: IndexStore) -> None:
        self.file, self.source, self.expr, self.options = file, source, expr, options
        self.paths = _paths(expr)
        dsets = {p: file[p] for p in self.paths}
        first = dsets[self.paths[0]]
        self.shape: tuple[int, ...] = tuple(first.shape)
        self.grid: BlockGrid = grid_for(self.shape, first.dtype.itemsize, first.chunks, native=not source.container)
        self.dsets = dsets
        # a block's values are used before the next block is read (only hit positions are kept): reuse buffers
        self.readers = {p: BlockReader(d, self.grid, not source.container, reuse=True) for p, d in dsets.items()}
        self.leaves: list[LeafPlan] = []
        self._leafsets: dict[DataCond, tuple[Any, Any]] = {}  # each condition's (sure, maybe) positions
        self._store = store
        self._indexes: dict[str, DatasetIndex | None] = {}
        self._hits: dict[int, np.ndarray] | None = None  # materialized (MPI) hits
        self._memo: dict[int, np.ndarray] = {}  # candidate blocks already evaluated (bounded)
        self._memo_elems = 0
        self._count: int | None = None
        self.blocks_read = 0
        self.elements_read = 0  # positions evaluated in candidate blocks (per dataset the expression names)
        self.sub = self.grid.clamp_sub(DEFAULT_SUB_BLOCKS) if options.sub_slabs else 1
        self.sub_off = self.grid.sub_offsets(self.sub)
        self._cls = bitmap_class(self.grid.size)
        self._plan()

    # -- planning
    def _index(self, path: str) -> DatasetIndex | None:
        if path not in self._indexes:
            idx = None
            if self.options.use_index:
                idx = self._store.load(path, self.grid)
                if idx is not None and not (idx.fresh("minmax") or idx.fresh("bitmap")):
                    if self.options.on_stale == "error":
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

    def _leaf(self, c: DataCond) -> tuple[Any, Any]:
        assert c.path is not None
        n = self.grid.size
        cls = bitmap_class(n)
        full = cls()
        if n:
            full.add_range(0, n)
        idx = self._index(c.path)
        plan = LeafPlan(c, "none")
        sure, maybe = cls(), full
        used: list[str] = []
        if idx is not None and idx.bitmap is not None and idx.fresh("bitmap") and "bitmap" in self.options.kinds:
            bm = idx.bitmap
            all_ok, none = bm.status(c.op, c.value)
            some = ~all_ok & ~none
            ids = np.arange(bm.nbins)
            counts = bm.bin_count
            if counts[all_ok].sum() <= n // 2:
                sure = bm.union(ids[all_ok])
            else:
                sure = full - bm.union(ids[~all_ok])
            maybe = sure | bm.union(ids[some]) if some.any() else sure
            used.append("bitmap")
        zones: Any = None
        if idx is not None and idx.minmax is not None and idx.fresh("minmax") and "minmax" in self.options.kinds:
            zones, name = idx.minmax, "minmax"  # zone maps and bitmaps are both safe bounds: keep the tighter
        elif (idx is None and self.source.container and self.options.use_index and "minmax" in self.options.kinds
              and (zones := stats_zones(self.dsets[c.path], self.grid)) is not None):
            # an h5flow_log dataset without an index: the connector's per-write statistics as zone maps
            name = f"write statistics ({zones.writes} writes)"
        if zones is not None:
            if not self.options.sub_slabs and getattr(zones, "sub", 1) > 1:
                zones = replace(zones, sub=1)  # the same zone maps, per block
                name = "minmax (per block: sub_slabs=False)"
            all_ok, none = zones.status(c.op, c.value)  # per sub-slab (per block: format 1, write statistics)
            uoff = zones.unit_offsets()
            if all_ok.any():
                sure = sure | _ranges(cls, all_ok, uoff)
            if none.any():
                maybe = maybe & _ranges(cls, ~none, uoff)
            if getattr(zones, "sub", 1) > self.sub:  # evaluate at the finest zone maps in use
                self.sub = zones.sub
                self.sub_off = self.grid.sub_offsets(self.sub)
            if getattr(zones, "sub", 1) == 1 and name == "minmax" and self.grid.clamp_sub(DEFAULT_SUB_BLOCKS) > 1:
                name = "minmax (per block: format 1, rebuild for sub-block zone maps)"
            used.append(name)
        if used:
            plan.index = used[0]  # "bitmap" (with its zone maps) or "minmax"
        elif idx is not None:
            plan.index = "stale (ignored)"
        elif self.options.use_index and self._store.has(c.path):
            plan.index = "none (its index has another block grid)"
        plan.sure, plan.maybe = len(sure), len(maybe)
        self.leaves.append(plan)
        self._leafsets[c] = (sure, maybe)
        return sure, maybe

    def _combine(self, q: Query) -> tuple[Any, Any]:
        if isinstance(q, DataCond):
            return self._leaf(q)
        assert isinstance(q, (And, Or))
        s1, m1 = self._combine(q.left)
        s2, m2 = self._combine(q.right)
        if isinstance(q, And):
            return s1 & s2, m1 & m2
        return s1 | s2, m1 | m2

    def _plan(self) -> None:
        sure, maybe = self._combine(self.expr)
        cands = maybe - sure
        self.sure = sure
        self.cands = cands
        off = self.grid.offsets
        nb = self.grid.nblocks
        if len(cands) <= 4 * max(nb, 1):
            arr = np.frombuffer(cands.to_array(), dtype=np.uint32 if self.grid.size < (1 << 32) else np.uint64)
            cand_counts = np.bincount(self.grid.block_of(arr), minlength=nb) if arr.size else np.zeros(nb, np.int64)
        else:
            cand_counts = np.array([cands.range_cardinality(int(off[k]), int(off[k + 1])) for k in range(nb)],
                                   dtype=np.int64)
        self.cand_blocks = np.flatnonzero(cand_counts)
        self.sure_counts = np.array([sure.range_cardinality(int(off[k]), int(off[k + 1])) for k in range(nb)],
                                    dtype=np.int64) if len(sure) else np.zeros(nb, np.int64)
        self.candidates = int(len(cands))

    # -- evaluation
    def _eval_rows(self, k: int, r0: int, r1: int, shift: int = 0) -> np.ndarray:
        """Flat indices (relative to the first element of row r0, plus ``shift``) where the expression
        holds in rows ``[r0, r1)`` of block k. A condition whose sure positions cover these rows is true
        there and one whose possible positions miss them is false, without reading its dataset (in
        ``plate`` range ``& fiber < 100`` only ``fiber`` is read inside the plate range)."""
        cache: dict[str, np.ndarray] = {}
        ext = self.grid.extent(k)
        inner = math.prod(ext[1:])
        lo = int(self.grid.offsets[k]) + r0 * inner
        hi = lo + ((r1 - r0) * inner if ext else 1)

        def values(p: str) -> np.ndarray:
            if p not in cache:
                cache[p] = self.readers[p].rows(k, r0, r1)
            return cache[p]

        def ev(q: Query) -> np.ndarray:
            if isinstance(q, DataCond):
                sure, maybe = self._leafsets[q]
                if sure.range_cardinality(lo, hi) == hi - lo:
                    return np.ones(hi - lo, bool)
                if not maybe.range_cardinality(lo, hi):
                    return np.zeros(hi - lo, bool)
                v = values(q.path)  # type: ignore[arg-type]
                with np.errstate(invalid="ignore"):
                    return _OPS[q.op](v, q.value)
            assert isinstance(q, (And, Or))
            a = ev(q.left)
            b = ev(q.right)
            return np.logical_and(a, b, out=a) if isinstance(q, And) else np.logical_or(a, b, out=a)

        m = ev(self.expr)
        self.elements_read += m.size
        idx = np.flatnonzero(m)
        if shift:
            idx += shift
        return idx

    def _eval_block(self, k: int) -> np.ndarray:
        """Sorted block-local hits of candidate block k: the sub-slabs holding candidates are read and
        evaluated (consecutive ones in one read), the others contribute their sure positions."""
        self.blocks_read += 1
        sub, off = self.sub, self.sub_off
        bounds = off[k * sub:(k + 1) * sub + 1].tolist()
        base = bounds[0]
        need = [b > a and self.cands.range_cardinality(a, b) > 0 for a, b in zip(bounds[:-1], bounds[1:])]
        if all(n or b == a for n, a, b in zip(need, bounds[:-1], bounds[1:])):
            return self._eval_rows(k, 0, self.grid.extent(k)[0] if self.grid.block else 1)
        pieces: list[np.ndarray] = []
        j = 0
        while j < sub:
            j2 = j
            while j2 < sub and need[j2] == need[j]:
                j2 += 1
            lo, hi = bounds[j], bounds[j2]
            if hi > lo:
                if need[j]:
                    r0, r1 = self.grid.sub_rows(k, j, sub)[0], self.grid.sub_rows(k, j2 - 1, sub)[1]
                    pieces.append(self._eval_rows(k, r0, r1, lo - base))
                else:
                    n = self.sure.range_cardinality(lo, hi)
                    if n == hi - lo:  # e.g. sub-slabs a zone map puts wholly inside the condition
                        pieces.append(np.arange(lo - base, hi - base, dtype=np.int64))
                    elif n:
                        pieces.append(self._sure_in(lo, hi, base))
            j = j2
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    MEMO_ELEMENTS = 1 << 22  # keep up to 4 Mi evaluated hits, so count() then coords() reads blocks once

    def _checked(self, k: int) -> np.ndarray:
        if k in self._memo:
            return self._memo[k]
        local = self._eval_block(k)
        if self._memo_elems + local.size <= self.MEMO_ELEMENTS:
            self._memo[k] = local
            self._memo_elems += local.size
        return local

    SURE_SPLIT_ELEMENTS = 1 << 25  # up to 32 Mi sure positions are listed at once and cut at block bounds

    def _sure_in(self, lo: int, hi: int, origin: int | None = None) -> np.ndarray:
        """Sure positions in ``[lo, hi)``, minus ``origin`` (default ``lo``; int64, sorted)."""
        part = self.sure & self._cls(range(lo, hi)) if hi - lo else self._cls()
        arr = np.frombuffer(part.to_array(), dtype=np.uint32 if self.grid.size < (1 << 32) else np.uint64)
        out = arr.astype(np.int64)
        out -= lo if origin is None else origin
        return out

    def _sure_local(self, k: int) -> np.ndarray:
        off = self.grid.offsets
        return self._sure_in(int(off[k]), int(off[k + 1]))

    def _sure_all(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Every sure position (sorted, int64) and where each block's start in it, when few enough to
        list at once: one pass instead of an intersection per block."""
        if not len(self.sure) or len(self.sure) > self.SURE_SPLIT_ELEMENTS:
            return None
        arr = np.frombuffer(self.sure.to_array(), dtype=np.uint32 if self.grid.size < (1 << 32) else np.uint64)
        arr = arr.astype(np.int64)
        return arr, np.searchsorted(arr, self.grid.offsets)

    def _work(self) -> np.ndarray:
        """Blocks with hits or candidates, in order."""
        return np.union1d(self.cand_blocks, np.flatnonzero(self.sure_counts))

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(block id, sorted block-local flat indices of the hits) for every block with hits."""
        if self._hits is not None:
            for k in sorted(self._hits):
                if self._hits[k].size:
                    yield k, self._hits[k]
            return
        cand = set(self.cand_blocks.tolist())
        work = self._work().tolist()
        listed = self._sure_all() if len(work) - len(cand) > 8 else None
        off = self.grid.offsets
        for k in work:
            if k in cand:
                local = self._checked(k)
            elif listed is not None:
                arr, at = listed
                local = arr[at[k]:at[k + 1]] - off[k]
            else:
                local = self._sure_local(k)
            if local.size:
                yield k, local

    def count(self) -> int:
        if self._count is None:
            if self._hits is not None:
                self._count = int(sum(h.size for h in self._hits.values()))
            else:
                cand = self.cand_blocks
                n = int(self.sure_counts.sum() - self.sure_counts[cand].sum())
                n += sum(int(self._checked(int(k)).size) for k in cand)
                self._count = n
        return self._count

    def materialize(self, comm: Any) -> None:
        """Evaluate the candidate blocks split across ``comm``'s ranks; every rank gets every hit."""
        mine = self.grid.split(comm.size, comm.rank, self.cand_blocks)
        part = {int(k): self._eval_block(int(k)) for k in mine}
        hits: dict[int, np.ndarray] = {}
        for d in sleepy_allgather(comm, part):
            hits.update(d)
        cand = set(self.cand_blocks.tolist())
        for k in np.flatnonzero(self.sure_counts).tolist():
            if k not in cand:
                hits[k] = self._sure_local(k)
        self._hits = hits
        self._count = None

    def explain(self) -> dict[str, Any]:
        return {"expression": str(self.expr), "datasets": self.paths, "shape": list(self.shape),
                "block_shape": list(self.grid.block), "blocks": self.grid.nblocks,
                "candidate_blocks": int(len(self.cand_blocks)), "candidates": self.candidates,
                "sure": int(len(self.sure)), "blocks_read": self.blocks_read,
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
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            yield grid.flat(k, local, ascending=True)

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


def _bind(q: Query, f: h5py.File, base: str, datasets: dict[str, Any], text: str | None) -> Query:
    import h5py

    def err(msg: str, pos: int) -> Exception:
        if text is not None and pos >= 0:
            return QuerySyntaxError(msg, text, pos)
        return QueryError(msg)

    def absolute(p: str) -> str:
        return p if p.startswith("/") else (base.rstrip("/") + "/" + p)

    if isinstance(q, (And, Or)):
        return type(q)(_bind(q.left, f, base, datasets, text), _bind(q.right, f, base, datasets, text))
    if isinstance(q, DataCond) and q.path is not None:
        p = absolute(q.path)
        if p not in f or not isinstance(f[p], h5py.Dataset):
            raise err(f"no dataset {p} in {f.filename}", q.pos)
        if not is_numeric(f[p].dtype):
            raise err(f"{p} has type {f[p].dtype}: only integer, float and bool datasets are queried element-wise",
                      q.pos)
        return DataCond(p, q.op, q.value, q.pos)
    if isinstance(q, Name):
        hits = sorted(p for p in datasets if p.rsplit("/", 1)[-1] == q.name)
        if isinstance(q.value, str) or not hits:
            return AttrValue(q.name, q.op, q.value, q.pos)
        if len(hits) > 1:
            raise err(f"'{q.name}' names {len(hits)} datasets ({', '.join(hits[:4])}{'...' if len(hits) > 4 else ''}):"
                      " write the full path", q.pos)
        return _bind(DataCond(hits[0], q.op, q.value, q.pos), f, base, datasets, text)  # type: ignore[arg-type]
    return q


def _check_aligned(q: Query, f: h5py.File, text: str | None) -> None:
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
        _check_aligned(q.right, f, text)


def _needs_visit(q: Query) -> bool:
    if isinstance(q, (AttrValue, AttrName, LinkName, Name)):
        return True
    if isinstance(q, DataCond):
        return q.path is None
    if isinstance(q, (And, Or)):
        return _needs_visit(q.left) or _needs_visit(q.right)
    return False


def _expr_key(q: Query) -> str:
    return repr(q)


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
    try:
        for one in locs:
            if isinstance(one, h5py.Group):
                f, base = one.file, one.name
                source = Source.of(f.filename)
            else:
                source = Source.of(one)
                f = source.open()
                result._files.append(f)
                base = "/"
            _apply_one(f, base, source, q, text, options, result)
    except BaseException:
        result.close()
        raise
    return result


def _apply_one(f: h5py.File, base: str, source: Source, q: Query, text: str | None, options: ApplyOptions,
               result: QueryResult) -> None:
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
    bound = _split(_bind(q, f, base, datasets, text))
    _check_aligned(bound, f, text)
    store = IndexStore(source)
    result._files.append(store)
    selections: dict[str, Selection] = {}

    def selection_for(expr: Query) -> Selection:
        key = _expr_key(expr)
        if key not in selections:
            sel = Selection(f, source, expr, options, store)
            if options.comm is not None:
                sel.materialize(options.comm)
            selections[key] = sel
        return selections[key]

    def add(path: str, m: _Match) -> None:
        if m.region is not None:
            d = f[path]
            result.datasets.append(DatasetHits(str(source.path), path, tuple(d.shape), d.dtype, selection_for(m.region)))
        if m.obj:
            result.objects.append((str(source.path), path))
        for a in m.attrs:
            result.attributes.append((str(source.path), path, a))

    if not objects:  # element expressions over named datasets only: no need to visit the file
        for path in _all_paths(bound):
            m = _eval_obj(bound, path, f[path], True)
            if m is not None:
                add(path, m)
        return
    for path, obj, is_dset in objects:
        m = _eval_obj(bound, path, obj, is_dset)
        if m is not None:
            add(path, m)


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
