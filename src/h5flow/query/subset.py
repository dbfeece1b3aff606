"""Subset (H5Boss's ``subset``): copy what a query selects into a new native HDF5 file.

For every selected dataset ``/P`` of the source, the output holds a group ``/P`` with

* ``values`` — the selected elements, in the source's block order (1-D, the source dtype),
* ``coords`` — their coordinates in the source dataset, ``(n, ndim)`` int64,

and the attributes ``source_file``, ``source_path`` and ``query``. The root records ``query`` and
``source_files``. ``include`` adds datasets that were not named in the query but are aligned with one
that was (other columns of the same table): their elements at the same coordinates are copied.

Under MPI (``comm``) the ranks evaluate and read their share of the blocks; with a parallel h5py and a
native source they write their parts of the output collectively created with the ``mpio`` driver,
otherwise rank 0 gathers and writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from h5flow._mpi import sleepy_allgather, sleepy_bcast, sleepy_gather
from h5flow.query.engine import apply
from h5flow.query.expr import Query, QueryError
from h5flow.query.options import ApplyOptions
from h5flow.query.results import DatasetHits
from h5flow.query.source import container_env_active, native_file


@dataclass
class SubsetReport:
    out: Path
    datasets: dict[str, int]  # output group -> elements copied
    ranks: int


def _plan(result: Any, include: Sequence[str]) -> list[tuple[str, DatasetHits, str]]:
    """(output name, hits, dataset to copy) for each dataset to write."""
    todo: list[tuple[str, DatasetHits, str]] = []
    multi = len({d.file for d in result.datasets}) > 1
    for d in result.datasets:
        name = (Path(d.file).name + d.path) if multi else d.path
        todo.append((name, d, d.path))
    for extra in include:
        p = extra if extra.startswith("/") else "/" + extra
        frames = [d for d in result.datasets if p not in [x[2] for x in todo if x[1].file == d.file]]
        match = None
        for d in frames:
            f = d.selection.file
            if p in f and tuple(f[p].shape) == d.shape:
                match = d
                break
        if match is None:
            raise QueryError(f"--include {extra}: no selected dataset has the same shape in the same file; "
                             "included datasets are copied at the coordinates of an aligned selected dataset")
        name = (Path(match.file).name + p) if multi else p
        todo.append((name, match, p))
    return todo


def subset(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], query: Query | str,
           out: str | os.PathLike[str], include: Sequence[str] = (), options: ApplyOptions | None = None
           ) -> SubsetReport:
    """Write the elements ``query`` selects (and the aligned ``include`` datasets) to ``out``."""
    options = options or ApplyOptions()
    comm = options.comm
    out = Path(out)
    locs = list(paths) if isinstance(paths, (list, tuple)) else [paths]
    text = query if isinstance(query, str) else str(query)
    with apply(locs, query, options) as result:
        todo = _plan(result, include)
        if not todo:
            raise QueryError("the query selects no dataset elements (only objects or attributes): nothing to subset")
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        # each rank's blocks of each selection: contiguous shares keep rank order = block order
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for _, d, src in todo:
            blocks = list(d.selection.blocks())
            mine = blocks[len(blocks) * rank // size: len(blocks) * (rank + 1) // size]
            grid = d.selection.grid
            dset = d.selection.file[src]
            cs = [grid.coords(k, local) for k, local in mine]
            vs = [np.asarray(dset[grid.slices(k)]).reshape(-1)[local] for k, local in mine]
            parts.append((np.concatenate(cs) if cs else np.zeros((0, len(d.shape)), np.int64),
                          np.concatenate(vs) if vs else np.zeros(0, dset.dtype)))
        import h5py

        parallel = comm is not None and size > 1 and h5py.get_config().mpi and not container_env_active()
        counts: dict[str, int] = {}
        if parallel:
            sizes = sleepy_allgather(comm, [len(v) for _, v in parts])
            with h5py.File(out, "w", driver="mpio", comm=comm) as fo:
                _root_attrs(fo, text, result)
                for j, (name, d, src) in enumerate(todo):
                    n = sum(s[j] for s in sizes)
                    start = sum(s[j] for s in sizes[:rank])
                    g = fo.require_group(name)
                    dt = d.selection.file[src].dtype
                    vd = g.create_dataset("values", (n,), dtype=dt)
                    cd = g.create_dataset("coords", (n, len(d.shape)), dtype=np.int64)
                    _group_attrs(g, d, src, text)
                    c, v = parts[j]
                    if len(v):
                        vd[start:start + len(v)] = v
                        cd[start:start + len(v)] = c
                    counts[name] = n
        else:
            gathered = sleepy_gather(comm, parts, root=0) if comm is not None else [parts]
            error = None
            if rank == 0:
                try:
                    with native_file(out, "w") as fo:
                        _root_attrs(fo, text, result)
                        for j, (name, d, src) in enumerate(todo):
                            c = np.concatenate([p[j][0] for p in gathered])
                            v = np.concatenate([p[j][1] for p in gathered])
                            g = fo.require_group(name)
                            g.create_dataset("values", data=v)
                            g.create_dataset("coords", data=c.reshape(len(v), len(d.shape)))
                            _group_attrs(g, d, src, text)
                            counts[name] = len(v)
                except Exception as e:  # noqa: BLE001
                    if comm is None:
                        raise
                    error = f"{type(e).__name__}: {e}"
            if comm is not None:
                counts, error = sleepy_bcast(comm, (counts, error), root=0)
                if error:
                    raise RuntimeError(f"subset: writing {out} failed on rank 0: {error}")
    return SubsetReport(out, counts, size)


def _root_attrs(fo: Any, text: str, result: Any) -> None:
    fo.attrs["query"] = text
    fo.attrs["source_files"] = sorted({d.file for d in result.datasets})
    fo.attrs["about"] = "h5flow subset: per source dataset a group with values and coords (docs/QUERY.md)"


def _group_attrs(g: Any, d: DatasetHits, src: str, text: str) -> None:
    g.attrs["source_file"] = d.file
    g.attrs["source_path"] = src
    g.attrs["source_shape"] = np.asarray(d.shape, np.int64)
    g.attrs["query"] = text
