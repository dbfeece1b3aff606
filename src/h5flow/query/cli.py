"""``h5flow query``, ``h5flow index build|list|drop|verify`` and ``h5flow subset``.

h5flow_log containers are opened through the connector's file access list (:mod:`h5flow.connectors.logvol`),
in this process, whatever ``HDF5_VOL_CONNECTOR`` says.
Under ``mpiexec -n N`` the commands split blocks across the ranks; rank 0 prints.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any



def _comm() -> Any:
    """COMM_WORLD when started by mpiexec with more than one rank, else None."""
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) <= 1:
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD if MPI.COMM_WORLD.size > 1 else None


def _print(comm: Any, *a: Any, **k: Any) -> None:
    if comm is None or comm.rank == 0:
        print(*a, **k)


# ---------------------------------------------------------------- query


def _cmd_query(args: argparse.Namespace) -> int:
    if len(args.args) < 2:
        raise ValueError("give at least one FILE and the EXPRESSION, e.g. h5flow query data.h5 'temp > 3.5'")
    files, expr = args.args[:-1], args.args[-1]
    from h5flow.query.engine import apply
    from h5flow.query.options import ApplyOptions

    comm = _comm()
    opts = ApplyOptions(use_index=not args.no_index, on_stale=args.stale, comm=comm)
    limit = args.limit
    out: dict[str, Any] = {"query": expr, "datasets": [], "objects": [], "attributes": []}
    with apply(files, expr, opts) as r:
        for d in r.datasets:
            entry: dict[str, Any] = {"file": d.file, "dataset": d.path, "shape": list(d.shape), "count": d.count}
            if not args.count:
                if args.runs:
                    runs = []
                    for start, n in d.runs():
                        if limit and len(runs) >= limit:
                            break
                        runs.append([list(start), n])
                    entry["runs"] = runs
                else:
                    coords: list[list[int]] = []
                    vals: list[Any] = []
                    for c in d.coords():
                        coords.extend(c[: max(0, limit - len(coords))].tolist() if limit else c.tolist())
                        if limit and len(coords) >= limit:
                            break
                    entry["coords"] = coords
                    if args.values:
                        for v in d.values():
                            vals.extend(v[: max(0, limit - len(vals))].tolist() if limit else v.tolist())
                            if limit and len(vals) >= limit:
                                break
                        entry["values"] = vals
            if args.explain:
                entry["plan"] = d.selection.explain()
            out["datasets"].append(entry)
        out["objects"] = [{"file": f, "object": p} for f, p in r.objects]
        out["attributes"] = [{"file": f, "object": p, "attribute": a} for f, p, a in r.attributes]
    if comm is not None and comm.rank != 0:
        return 0
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    multi = len(files) > 1
    for e in out["datasets"]:
        where = f"{e['file']}:" if multi else ""
        print(f"{where}{e['dataset']}  shape {tuple(e['shape'])}  {e['count']:,} element(s)")
        for key in ("runs", "coords"):
            if key in e:
                shown = e[key]
                vals = e.get("values")
                for i, item in enumerate(shown):
                    label = f"  {tuple(item[0])} x{item[1]}" if key == "runs" else f"  {tuple(item)}"
                    print(label + (f"  {vals[i]!r}" if vals is not None and i < len(vals) else ""))
                if limit and e["count"] > len(shown) and key == "coords":
                    print(f"  ... {e['count'] - len(shown):,} more (--limit 0 prints all)")
        if "plan" in e:
            p = e["plan"]
            print(f"  plan: {p['blocks']} blocks, {p['candidate_blocks']} candidate block(s) read; "
                  + "; ".join(f"{lf['condition']}: {lf['index']}" for lf in p["leaves"]))
    for o in out["objects"]:
        print(f"object {o['object']}" + (f"  ({o['file']})" if multi else ""))
    for a in out["attributes"]:
        print(f"attribute {a['object']} @{a['attribute']}" + (f"  ({a['file']})" if multi else ""))
    if not (out["datasets"] or out["objects"] or out["attributes"]):
        print("no match")
    return 0


# ---------------------------------------------------------------- index


def _cmd_index(args: argparse.Namespace) -> int:
    from h5flow.query.index import BuildConfig, IndexStore, build_index, drop_index, verify_index
    from h5flow.query.source import Source

    comm = _comm()
    if args.action == "build":
        if not args.datasets:
            raise ValueError("name the dataset(s) to index: h5flow index build FILE DATASET [DATASET...]")
        for d in args.datasets:
            r = build_index(args.file, d, BuildConfig(kind=args.kind, bins=args.bins, sub_blocks=args.sub_blocks, progress=comm is None or comm.rank == 0),
                            comm=comm)
            pct = 100.0 * r.index_bytes / r.data_bytes if r.data_bytes else 0.0
            _print(comm, f"{r.dataset}: {r.kind} index, {r.blocks} blocks" + (f", {r.bins} bins" if r.bins else "")
                   + f", {r.index_bytes:,} bytes ({pct:.1f}% of {r.data_bytes:,} data bytes), built in "
                   f"{r.seconds:.2f} s on {r.ranks} rank(s)")
        return 0
    if args.action == "list":
        with IndexStore(Source.of(args.file)) as store:
            rows = store.rows()
            path = store.path
        if args.json:
            from dataclasses import asdict

            _print(comm, json.dumps([asdict(r) for r in rows], indent=2))
            return 0
        if not rows:
            _print(comm, f"no indexes ({path} does not exist)" if not path.exists() else f"no indexes in {path}")
            return 0
        _print(comm, f"indexes in {path}:")
        for r in rows:
            pct = 100.0 * r.index_bytes / r.data_bytes if r.data_bytes else 0.0
            _print(comm, f"  {r.dataset:30s} {r.kind:7s} {r.status:10s} {r.blocks:6d} blocks {r.bins:5d} bins "
                   f"{r.index_bytes:>12,} B ({pct:5.1f}%)  built {r.built} in {r.build_seconds:.2f} s")
        return 0
    if args.action == "drop":
        if not args.datasets:
            raise ValueError("name the dataset whose index to drop: h5flow index drop FILE DATASET [--kind K]")
        if comm is None or comm.rank == 0:
            for d in args.datasets:
                for ds, kind in drop_index(args.file, d, args.kind_filter):
                    print(f"dropped {kind} index of {ds}")
        return 0
    if args.action == "verify":
        if not args.datasets:
            raise ValueError("name the dataset whose index to verify: h5flow index verify FILE DATASET")
        bad_total = 0
        for d in args.datasets:
            n, bad = verify_index(args.file, d)
            bad_total += bad
            _print(comm, f"{d}: {n} blocks, {bad} differ from the indexed data"
                   + (" (index stamped fresh)" if bad == 0 else " (index stays stale: rebuild it)"))
        return 1 if bad_total else 0
    raise ValueError(f"unknown action {args.action}")


# ---------------------------------------------------------------- subset


def _cmd_subset(args: argparse.Namespace) -> int:
    from h5flow.query.options import ApplyOptions
    from h5flow.query.subset import subset

    comm = _comm()
    rep = subset(args.files, args.query, args.out, include=args.include,
                 options=ApplyOptions(use_index=not args.no_index, on_stale=args.stale, comm=comm))
    for name, n in rep.datasets.items():
        _print(comm, f"{name}: {n:,} element(s)")
    _print(comm, f"wrote {rep.out} ({rep.ranks} rank(s))")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--no-index", action="store_true", help="ignore indexes (scan every block)")
    common.add_argument("--stale", choices=("error", "scan", "rebuild"), default="error",
                        help="a stale index (data changed after its build): refuse (default), ignore it and scan, "
                             "or rebuild it first")

    p = sub.add_parser("query", parents=[common], help="select dataset elements, objects and attributes (H5Q)",
                       description="Apply a query to HDF5 files or h5flow_log containers. Grammar (docs/QUERY.md): "
                       "conditions 'temp > 3.5', '3.5 < /fields/temp <= 7', '@units == \"K\"', 'attr_name(\"calib*\")', "
                       "'link_name(\"fiber_*\")', '* > 0' (every dataset), combined with & and | and parentheses. "
                       "A bare name is a dataset if exactly one has that name, else an attribute.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("args", nargs="+", metavar="FILE... EXPRESSION", help="files/containers, then the expression")
    p.add_argument("--count", action="store_true", help="only the number of selected elements per dataset")
    p.add_argument("--values", action="store_true", help="print the selected values beside the coordinates")
    p.add_argument("--runs", action="store_true", help="print hyperslab runs (start, length on the last axis)")
    p.add_argument("--limit", type=int, default=20, help="print at most this many coordinates per dataset "
                                                         "(0: all; default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--explain", action="store_true", help="show the plan: blocks, candidate blocks, index per condition")
    p.set_defaults(func=_cmd_query)

    pi = sub.add_parser("index", help="build, list, drop or verify query indexes",
                        description="Indexes live in FILE.h5flow-index.h5 beside the file (the file itself is never "
                        "written). minmax: per-block min/max (zone maps); bitmap: binned Roaring bitmaps with per-bin "
                        "min/max, plus the zone maps.")
    pi.add_argument("action", choices=("build", "list", "drop", "verify"))
    pi.add_argument("file", metavar="FILE")
    pi.add_argument("datasets", nargs="*", metavar="DATASET")
    pi.add_argument("--kind", choices=("minmax", "bitmap"), default="minmax", help="build: index kind (default minmax)")
    pi.add_argument("--sub-blocks", type=int, default=None,
                    help="build: zone maps per chunk, cut into this many slabs along its slowest axis "
                         "(1 to 65536, capped at the chunk's rows; 1 = per chunk; default: zones of about "
                         "1024 elements)")
    pi.add_argument("--bins", type=int, default=64, help="build --kind bitmap: bins (default 64; integer datasets with "
                                                         "fewer distinct values get one bin per value)")
    pi.add_argument("--only", dest="kind_filter", choices=("minmax", "bitmap"), default=None,
                    help="drop: only this kind (default both)")
    pi.add_argument("--json", action="store_true", help="list: JSON")
    pi.set_defaults(func=_cmd_index)

    ps = sub.add_parser("subset", parents=[common], help="copy what a query selects into a new file (H5Boss subset)",
                        description="Write the selected elements of every selected dataset (values + coordinates, "
                        "source path and file as attributes) to a new HDF5 file; --include copies aligned datasets at "
                        "the same coordinates. Runs in parallel under mpiexec.")
    ps.add_argument("files", nargs="+", metavar="FILE")
    ps.add_argument("--query", "-q", required=True, metavar="EXPR")
    ps.add_argument("--out", "-o", required=True, metavar="NEW.h5")
    ps.add_argument("--include", action="append", default=[], metavar="DATASET",
                    help="also copy this aligned dataset at the selected coordinates (repeatable)")
    ps.set_defaults(func=_cmd_subset)
