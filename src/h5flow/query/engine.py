"""Applying a query (H5Qapply): bind names, plan with the indexes, evaluate blocks, stream the hits.

A query is split into *element expressions* (maximal sub-trees of data conditions: ``plate == 4322 &
fiber < 100``) and *object conditions* (attribute values, attribute names, link names). An element
expression over named datasets needs them aligned (the same shape): it is evaluated once, element by
element, and its hits belong to every dataset it names (the H5Boss case, columns of one table). An
element expression without names (``Q.data() > 3``, ``* > 3``) is evaluated on every numeric dataset.
Object conditions are evaluated on every object under the location, and ``&``/``|`` combine per object as
H5Qcombine does: AND needs both sides on the same object, OR takes either.

The modules under it: :mod:`~h5flow.query.options` (how apply runs), :mod:`~h5flow.query.plan` (element
expressions and the plan of each from the indexes), :mod:`~h5flow.query.selection` (reading and checking
the candidates), :mod:`~h5flow.query.results` (what apply returns); this module binds names, evaluates
the object conditions and puts them together.

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
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from h5flow.query.expr import And, AttrName, AttrValue, DataCond, LinkName, Name, Or, Query, QueryError
from h5flow.query.grammar import QuerySyntaxError, parse
from h5flow.query.index import IndexStore, is_numeric
from h5flow.query.options import ApplyOptions, StaleIndexError, StalePolicy
from h5flow.query.plan import Elem, bind_unnamed, expr_paths, has_unnamed, split_elements
from h5flow.query.results import DatasetHits, QueryResult
from h5flow.query.selection import Selection
from h5flow.query.source import Source

if TYPE_CHECKING:
    import h5py

__all__ = ["ApplyOptions", "DatasetHits", "Location", "QueryResult", "Selection", "StaleIndexError", "StalePolicy",
           "apply"]

Location = Union[str, "os.PathLike[str]", "h5py.Group"]


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
        if has_unnamed(q.expr):
            if not is_dset or not is_numeric(obj.dtype):
                return None
            return _Match(region=bind_unnamed(q.expr, path))
        return _Match(region=q.expr) if path in expr_paths(q.expr) else None
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
        paths = expr_paths(q.expr)
        if paths and has_unnamed(q.expr):
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
    bound = split_elements(_bind(q, f, base, datasets, text, handles, names))
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
            for p in expr_paths(n.expr):
                if p not in out:
                    out.append(p)
        elif isinstance(n, (And, Or)):
            walk(n.left)
            walk(n.right)
    walk(q)
    return out

