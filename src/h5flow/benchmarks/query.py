"""Query and index benchmark: h5flow zone maps and bitmaps vs the numpy full scan vs PyTables where().

Data (written to --dir, float data of --size GiB in total, half each):

* ``/field/temp`` — the oscillator miniapp's field (float32, n^3, chunks 64^3; the default deck scaled
  to the grid), a realistic smooth field;
* ``/catalog/{plate,mjd,fiber,ra,dec,z,flux}`` — an H5Boss-like table: 1000 fibers per plate, rows
  ordered by plate; ra/dec/z/flux float64 (z in random order), 1 MiB chunks.

Queries at each selectivity (0.01 %, 0.1 %, 1 %, 10 % by default): ``temp > t`` on the field,
``p0 <= plate < p1 & fiber < 100`` on the table (the H5Boss case), and ``z > t`` (a column in random
order, the hard case for every index). Methods, all producing the matching coordinates from a warm
page cache: h5py read + numpy mask (full scan); PyTables ``Table.get_where_list`` without and with its
OPSI index (``create_index()``: kind medium, optlevel 6) — installed from PyPI into a private venv and
run in a subprocess, since its wheel carries its own HDF5; h5flow with zone maps per chunk (candidate
chunks read whole: ``ApplyOptions(sub_slabs=False)``, as before index format 2); h5flow with zone maps
per sub-slab (the default); h5flow with bitmaps. Every answer is checked against the numpy one. Also measured: index build time and size, the
bitmap build and a 1 % query on 1, 2, 4 MPI ranks, and Roaring vs a numpy encoding of the same bins.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.benchmarks import perf
from h5flow.benchmarks._args import csv_list

WORKER_PREFIX = "H5FLOW_QUERYBENCH "
METHODS = ("numpy scan", "pytables", "pytables indexed", "h5flow zonemap/chunk", "h5flow zonemap", "h5flow bitmap")
PT_VENV = "h5flow-bench-pytables-venv"


@dataclass
class Row:
    query: str
    selectivity: float  # requested
    matches: int
    method: str
    seconds: float | None
    speedup_vs_numpy: float | None = None
    note: str = ""
    cpu_seconds: float | None = None  # process CPU time (median of --reps); None for PyTables (a subprocess)
    cpu_speedup_vs_numpy: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=float, default=1.0, help="GiB of float data in total, half field, half table "
                                                           "(default 1.0; --quick 0.0625)")
    p.add_argument("--selectivities", type=lambda s: [float(x) for x in s.split(",")], default=[1e-4, 1e-3, 1e-2, 1e-1],
                   help="fractions, comma separated (default 0.0001,0.001,0.01,0.1)")
    p.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4],
                   help="MPI ranks for the parallel index build / query (default 1,2,4)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per timing; medians reported (default 3)")
    p.add_argument("--bins", type=int, default=64, help="bitmap bins (default 64)")
    p.add_argument("--skip", type=csv_list(("pytables", "mpi", "codec")), default=[],
                   help="parts to leave out, comma separated: pytables, mpi, codec")
    p.add_argument("--keep", action="store_true", help="keep the data files (default: delete them at the end)")
    perf.add_output_arguments(p, "query", "64 MiB of data, 2 selectivities, 1 repetition, ranks 1,2")


# ---------------------------------------------------------------- data


def _field_n(size_gib: float) -> int:
    n = int(round((size_gib / 2 * 2**30 / 4) ** (1 / 3) / 64)) * 64
    return max(64, n)


def make_data(path: Path, size_gib: float, progress: bool = True) -> dict[str, Any]:
    import h5py

    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    n = _field_n(size_gib)
    rows = max(65, int(size_gib / 2 * 2**30 / 8 / 4) // 1000) * 1000  # whole plates of 1000 fibers
    cfg = OscillatorConfig(shape=(n, n, n), bounds=(0.0, 64.0, 0.0, 64.0, 0.0, 64.0))
    sim = Simulation(cfg, 0, 1)
    t = 0.5  # damped oscillator near a peak, decaying one not yet gone
    rng = np.random.default_rng(2024)
    from rich.progress import Progress

    with h5py.File(path, "w") as f, Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task("writing the field", total=n // 64 + 1)
        d = f.create_dataset("field/temp", (n, n, n), dtype="f4", chunks=(64, 64, 64))
        d.attrs["units"] = "K"
        xs, ys = sim._centres(0, 0, n), sim._centres(1, 0, n)
        for z0 in range(0, n, 64):
            d[z0:z0 + 64] = sim._evaluate(xs, ys, sim._centres(2, z0, z0 + 64), t)
            bar.advance(task)
        g = f.create_group("catalog")
        chunk = (min(1 << 17, rows),)
        plate = np.repeat(np.arange(3500, 3500 + rows // 1000, dtype="i4"), 1000)
        g.create_dataset("plate", data=plate, chunks=chunk)
        g.create_dataset("mjd", data=(51000 + (plate - 3500) // 3).astype("i4"), chunks=chunk)
        g.create_dataset("fiber", data=np.tile(np.arange(1, 1001, dtype="i2"), rows // 1000), chunks=chunk)
        ra = np.repeat(rng.uniform(0, 360, rows // 1000), 1000) + rng.normal(0, 1.5, rows)
        g.create_dataset("ra", data=ra, chunks=chunk)
        del ra
        dec = np.repeat(rng.uniform(-10, 70, rows // 1000), 1000) + rng.normal(0, 1.5, rows)
        g.create_dataset("dec", data=dec, chunks=chunk)
        del dec
        g.create_dataset("z", data=rng.lognormal(-0.5, 0.6, rows), chunks=chunk)
        g.create_dataset("flux", data=rng.gamma(2.0, 10.0, rows), chunks=chunk)
        bar.advance(task)
    return {"n": n, "rows": rows, "field_bytes": n**3 * 4, "table_float_bytes": rows * 8 * 4}


def thresholds(path: Path, sels: list[float], info: dict[str, Any]) -> dict[str, dict[float, Any]]:
    """Per query and selectivity, the condition's constants (exact order statistics of the data)."""
    import h5py

    out: dict[str, dict[float, Any]] = {"field": {}, "boss": {}, "z": {}}
    with h5py.File(path, "r") as f:
        temp = f["field/temp"][()].ravel()
        k = [max(1, int(round(s * temp.size))) for s in sels]
        part = np.partition(temp, [temp.size - x for x in k])
        for s, x in zip(sels, k):
            out["field"][s] = float(part[temp.size - x - 1])  # temp > t keeps about x elements
        del temp, part
        z = f["catalog/z"][()]
        for s in sels:
            out["z"][s] = float(np.partition(z, z.size - max(1, int(round(s * z.size))) - 1)[
                z.size - max(1, int(round(s * z.size))) - 1])
    nplates = info["rows"] // 1000
    for s in sels:
        frac = min(1.0, s / 0.099)  # fiber < 100 keeps 99 of 1000 fibers
        p = max(1, int(round(frac * nplates)))
        p0 = 3500 + (nplates - p) // 2
        out["boss"][s] = (p0, p0 + p)
    return out


def expressions(th: dict[str, dict[float, Any]], s: float) -> dict[str, tuple[str, str]]:
    """query name -> (h5flow expression, PyTables condition)."""
    t = th["field"][s]
    p0, p1 = th["boss"][s]
    tz = th["z"][s]
    return {"field temp > t": (f"/field/temp > {t!r}", f"temp > {t!r}"),
            "boss plate & fiber": (f"{p0} <= /catalog/plate < {p1} & /catalog/fiber < 100",
                                   f"(plate >= {p0}) & (plate < {p1}) & (fiber < 100)"),
            "catalog z > t (random order)": (f"/catalog/z > {tz!r}", f"z > {tz!r}")}


# ---------------------------------------------------------------- methods


def numpy_scan(path: Path, expr: str) -> np.ndarray:
    """h5py read of every dataset the query names + a numpy mask; C-order flat indices."""
    import h5py

    from h5flow.query import parse
    from h5flow.query.expr import And, DataCond, Or

    q = parse(expr)
    ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}
    with h5py.File(path, "r") as f:
        cache: dict[str, np.ndarray] = {}

        def ev(n: Any) -> np.ndarray:
            if isinstance(n, DataCond):
                if n.path not in cache:
                    cache[n.path] = f[n.path][()]
                return ops[n.op](cache[n.path], n.value)
            a, b = ev(n.left), ev(n.right)
            return a & b if isinstance(n, And) else a | b

        assert isinstance(q, (DataCond, And, Or))
        return np.flatnonzero(ev(q))


def h5flow_query(path: Path, expr: str, kinds: tuple[str, ...], comm: Any = None, sub_slabs: bool = True
                 ) -> tuple[np.ndarray, dict[str, Any]]:
    """Apply with the given index kinds; C-order flat indices of the hits in h5flow's block order (the
    caller sorts them, outside the timed region, to compare with numpy's C-order answer), and the plan.
    ``sub_slabs=False``: zone maps per chunk, candidate chunks read whole (the method before format 2)."""
    from h5flow.query import ApplyOptions, apply

    with apply(path, expr, ApplyOptions(kinds=kinds, comm=comm, sub_slabs=sub_slabs)) as r:
        d = r.datasets[0]
        flat = d.flat_array()  # the hits in one array (what flat() yields, without copying views of one)
        return flat, d.selection.explain()


def _median_time(fn: Any, reps: int) -> tuple[float, Any]:
    wall, _, out = _median_times(fn, reps)
    return wall, out


def _median_times(fn: Any, reps: int) -> tuple[float, float, Any]:
    """(median wall seconds, median process CPU seconds, the last result) of ``reps`` calls."""
    times, cpus, out = [], [], None
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(times), statistics.median(cpus), out


# ---------------------------------------------------------------- PyTables in its own environment

PT_SCRIPT = r'''
import json, os, sys, time, statistics
import numpy as np, tables
src, dst, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
reps = spec["reps"]
out = {"version": tables.__version__, "hdf5": tables.hdf5_version, "build": {}, "queries": {}}
t0 = time.perf_counter()
with tables.open_file(src) as s, tables.open_file(dst, "w") as d:
    temp = s.get_node("/field/temp")
    n = temp.shape[0]
    ft = d.create_table("/", "field", {"temp": tables.Float32Col()}, expectedrows=n ** 3)
    for z in range(0, n, 16):
        ft.append(np.rec.fromarrays([temp[z:z + 16].ravel()], names="temp"))
    cols = ["plate", "mjd", "fiber", "ra", "dec", "z", "flux"]
    nodes = {c: s.get_node("/catalog/" + c) for c in cols}
    rows = nodes["plate"].shape[0]
    desc = np.dtype([(c, nodes[c].dtype) for c in cols])
    ct = d.create_table("/", "catalog", desc, expectedrows=rows)
    step = 1 << 20
    for a in range(0, rows, step):
        rec = np.empty(min(step, rows - a), desc)
        for c in cols:
            rec[c] = nodes[c][a:a + step]
        ct.append(rec)
    d.flush()
out["build"]["copy_seconds"] = time.perf_counter() - t0
size0 = os.path.getsize(dst)

def timed(tbl, cond):
    ts, res = [], None
    for _ in range(reps):
        t = time.perf_counter(); res = tbl.get_where_list(cond); ts.append(time.perf_counter() - t)
    return statistics.median(ts), res

with tables.open_file(dst, "a") as d:
    tabs = {"field": d.root.field, "catalog": d.root.catalog}
    for phase in ("pytables", "pytables indexed"):
        if phase == "pytables indexed":
            for tname, cname in (("field", "temp"), ("catalog", "plate"), ("catalog", "fiber"), ("catalog", "z")):
                t = time.perf_counter()
                getattr(tabs[tname].cols, cname).create_index()  # OPSI, kind medium, optlevel 6
                d.flush()
                out["build"][f"index {tname}.{cname} seconds"] = time.perf_counter() - t
            out["build"]["index_bytes"] = os.path.getsize(dst) - size0
        for key, (tname, cond) in spec["queries"].items():
            sec, res = timed(tabs[tname], cond)
            ck = int(np.sum(res.astype(np.int64) * 2654435761 % 1000003))
            out["queries"].setdefault(key, {})[phase] = {"seconds": sec, "count": int(res.size), "check": ck}
    out["data_bytes"] = size0
print("RESULT " + json.dumps(out))
'''


def _checksum(flat: np.ndarray) -> int:
    return int(np.sum(flat.astype(np.int64) * 2654435761 % 1000003))


def pytables_env(directory: Path) -> tuple[Path | None, str]:
    """(python of a venv with PyTables, '') or (None, why not)."""
    venv = directory / PT_VENV
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import tables"], capture_output=True).returncode == 0:
        return py, ""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HDF5_", "PYTHONPATH"))}
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True,
                       timeout=300, env=env)
        r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "tables", "numpy"], capture_output=True,
                           text=True, timeout=900, env=env)
        if r.returncode != 0:
            return None, "pip install tables failed: " + (r.stderr or r.stdout).strip().splitlines()[-1]
    except (subprocess.SubprocessError, OSError) as e:
        return None, f"could not create the PyTables venv: {e}"
    return py, ""


def run_pytables(py: Path, src: Path, work: Path, queries: dict[str, tuple[str, str]], reps: int) -> dict[str, Any]:
    dst = work / "h5flow_bench_query_pytables.h5"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HDF5_", "PYTHONPATH", "LD_LIBRARY_PATH"))}
    try:
        r = subprocess.run([str(py), "-c", PT_SCRIPT, str(src), str(dst), json.dumps({"reps": reps, "queries": queries})],
                           capture_output=True, text=True, timeout=3600, env=env)
    finally:
        dst.unlink(missing_ok=True)
    if r.returncode != 0 or "RESULT " not in r.stdout:
        raise RuntimeError("PyTables worker failed: " + "\n".join((r.stderr or r.stdout).strip().splitlines()[-8:]))
    return json.loads(r.stdout.split("RESULT ", 1)[1])


# ---------------------------------------------------------------- codec comparison


def codec_comparison(path: Path, dset: str, threshold: float) -> dict[str, Any]:
    """The same bins stored as portable Roaring (what the index uses) and as a numpy encoding (sorted
    uint32 positions, delta-coded, zlib level 1): total size, encode time, and the time to produce the
    positions of ``x > threshold``'s bins (decode + union)."""
    import h5py  # noqa: F401

    from h5flow.query.blocks import grid_for
    from h5flow.query.index import IndexStore
    from h5flow.query.source import Source

    src = Source.of(path)
    with src.open() as f:
        d = f[dset]
        grid = grid_for(d.shape, d.dtype.itemsize, d.chunks, native=True)
    with IndexStore(src) as store:
        idx = store.load(dset, grid)
        assert idx is not None and idx.bitmap is not None
        bm = idx.bitmap
        ids = list(range(bm.nbins))
        bitmaps = bm.bins(ids)
        all_ok, none = bm.status(">", threshold)
        want = [i for i in ids if not none[i]]
        roaring_bytes = int(bm.offsets[-1])
        raw = [bytes(np.asarray(bm.blob[int(bm.offsets[i]):int(bm.offsets[i + 1])])) for i in ids]
    positions = [np.frombuffer(b.to_array(), dtype=np.uint32) for b in bitmaps]
    t0 = time.perf_counter()
    enc = [zlib.compress(np.diff(p, prepend=np.uint32(0)).astype(np.uint32).tobytes(), 1) for p in positions]
    numpy_encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    ser = [b.serialize() for b in bitmaps]
    roaring_encode = time.perf_counter() - t0
    cls = type(bitmaps[0])

    def roaring_query() -> int:
        sets = [cls.deserialize(raw[i]) for i in want]
        u = cls.union(*sets) if len(sets) > 1 else (sets[0] if sets else cls())
        return int(np.frombuffer(u.to_array(), dtype=np.uint32).size)

    def numpy_query() -> int:
        parts = [np.cumsum(np.frombuffer(zlib.decompress(enc[i]), dtype=np.uint32), dtype=np.uint64) for i in want]
        u = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        return int(u.size)

    rq, n1 = _median_time(roaring_query, 3)
    nq, n2 = _median_time(numpy_query, 3)
    assert n1 == n2
    return {"dataset": dset, "bins": len(ids), "elements": int(sum(p.size for p in positions)),
            "roaring_bytes": roaring_bytes, "numpy_zlib_bytes": int(sum(len(e) for e in enc)),
            "roaring_encode_s": roaring_encode + 0 * len(ser), "numpy_encode_s": numpy_encode,
            "query_bins": len(want), "query_positions": n1, "roaring_query_s": rq, "numpy_query_s": nq}


# ---------------------------------------------------------------- MPI worker


def _worker(params: dict[str, Any]) -> None:
    from mpi4py import MPI

    from h5flow.query import BuildConfig, build_index

    comm = MPI.COMM_WORLD
    path = Path(params["path"])
    comm.Barrier()
    t0 = MPI.Wtime()
    build_index(path, params["dataset"], BuildConfig(kind="bitmap", bins=params["bins"], progress=False), comm=comm)
    build = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    times = []
    count = 0
    for _ in range(params["reps"]):
        comm.Barrier()
        t0 = MPI.Wtime()
        flat, _ = h5flow_query(path, params["expr"], ("bitmap", "minmax"), comm=comm)
        times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
        count = flat.size
    scan = []
    for _ in range(params["reps"]):
        comm.Barrier()
        t0 = MPI.Wtime()
        flat2, _ = h5flow_query(path, params["expr"], (), comm=comm)
        scan.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    if comm.rank == 0:
        print(WORKER_PREFIX + json.dumps({"ranks": comm.size, "build_s": build, "query_s": statistics.median(times),
                                          "scan_s": statistics.median(scan), "count": int(count),
                                          "scan_count": int(flat2.size)}), flush=True)


def run_mpi(path: Path, dataset: str, expr: str, ranks: int, bins: int, reps: int) -> dict[str, Any]:
    params = {"path": str(path), "dataset": dataset, "expr": expr, "bins": bins, "reps": reps}
    cmd = [perf.mpiexec(), "-n", str(ranks), sys.executable, "-m", __name__, "--worker", json.dumps(params)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0 or WORKER_PREFIX not in r.stdout:
        raise RuntimeError(f"MPI worker ({ranks} ranks) failed:\n" + "\n".join((r.stderr or r.stdout).splitlines()[-10:]))
    return json.loads(r.stdout.split(WORKER_PREFIX, 1)[1].splitlines()[0])


# ---------------------------------------------------------------- launch


def _plot(path: Path, rows: list[Row], queries: list[str]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(queries), figsize=(5.2 * len(queries), 4.2), squeeze=False)
    colors = dict(zip(METHODS, ("tab:gray", "tab:orange", "tab:red", "tab:olive", "tab:cyan", "tab:blue")))
    for ax, q in zip(axes[0], queries):
        sels = sorted({r.selectivity for r in rows if r.query == q})
        width = 0.8 / len(METHODS)
        for j, m in enumerate(METHODS):
            ys = [next((r.seconds for r in rows if r.query == q and r.method == m and r.selectivity == s), None)
                  for s in sels]
            xs = [i + (j - len(METHODS) / 2) * width + width / 2 for i in range(len(sels))]
            ax.bar([x for x, y in zip(xs, ys) if y], [y for y in ys if y], width, label=m, color=colors[m])
        ax.set_yscale("log")
        ax.set_xticks(range(len(sels)), [f"{s * 100:g} %" for s in sels])
        ax.set_xlabel("selectivity")
        ax.set_ylabel("seconds (median, warm cache)")
        ax.set_title(q, fontsize=10)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def launch(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from h5flow.query import BuildConfig, build_index, drop_index

    if args.quick:
        args.size = min(args.size, 0.0625)
        args.selectivities = args.selectivities[:2] if len(args.selectivities) > 2 else args.selectivities
        args.reps = 1
        args.ranks = [r for r in args.ranks if r <= 2] or [1]
    if args.reps < 1 or args.size <= 0:
        raise ValueError("--reps must be >= 1 and --size > 0")
    directory = perf.work_dir(args)
    console = Console(width=max(Console().width, 140))
    path = directory / f"h5flow_bench_query_{os.getpid()}.h5"
    report: dict[str, Any] = {"benchmark": "query", "size_gib": args.size, "reps": args.reps, "bins": args.bins,
                              "directory": str(directory), "cache": "warm page cache (every method reads the data "
                              "once before it is timed)"}
    rows: list[Row] = []
    try:
        t0 = time.perf_counter()
        info = make_data(path, args.size)
        report["data"] = dict(info, write_seconds=time.perf_counter() - t0)
        console.print(f"data: field {info['n']}^3 float32 ({info['field_bytes'] / 2**30:.3f} GiB), table "
                      f"{info['rows']:,} rows ({info['table_float_bytes'] / 2**30:.3f} GiB of float64 columns) in {path}")
        th = thresholds(path, args.selectivities, info)
        # index builds (serial), sizes
        builds = []
        for ds in ("/field/temp", "/catalog/plate", "/catalog/fiber", "/catalog/z"):
            for kind in ("minmax", "bitmap"):
                if kind == "minmax":
                    try:
                        drop_index(path, ds)
                    except KeyError:
                        pass
                r = build_index(path, ds, BuildConfig(kind=kind, bins=args.bins))  # type: ignore[arg-type]
                builds.append(asdict(r))
        report["builds"] = builds
        # queries
        pt_queries: dict[str, tuple[str, str]] = {}
        for s in args.selectivities:
            for qname, (expr, cond) in expressions(th, s).items():
                table = "field" if qname.startswith("field") else "catalog"
                pt_queries[f"{qname}|{s}"] = (table, cond)
                numpy_scan(path, expr)  # warm the page cache
                nsec, ncpu, ref = _median_times(lambda: numpy_scan(path, expr), args.reps)
                rows.append(Row(qname, s, int(ref.size), "numpy scan", nsec, 1.0, cpu_seconds=ncpu,
                                cpu_speedup_vs_numpy=1.0, detail={"expr": expr}))
                for method, kinds, sub in (("h5flow zonemap/chunk", ("minmax",), False), ("h5flow zonemap", ("minmax",), True),
                                           ("h5flow bitmap", ("bitmap", "minmax"), True)):
                    sec, cpu, (flat, plan) = _median_times(lambda: h5flow_query(path, expr, kinds, sub_slabs=sub),
                                                           args.reps)
                    flat = np.sort(flat)  # block order -> C order, only to compare (not timed)
                    if not np.array_equal(flat, ref):
                        raise RuntimeError(f"{method} {expr}: {flat.size} hits, numpy {ref.size}: answers differ")
                    rows.append(Row(qname, s, int(ref.size), method, sec, nsec / sec,
                                    cpu_seconds=cpu, cpu_speedup_vs_numpy=ncpu / max(cpu, 1e-9),
                                    detail={"blocks": plan["blocks"], "candidate_blocks": plan["candidate_blocks"],
                                            "elements_read": plan["elements_read"],
                                            "leaves": [lf["index"] for lf in plan["leaves"]]}))
                rows[-4].detail["check"] = _checksum(ref)
        # PyTables
        if "pytables" not in args.skip:
            with console.status("PyTables: installing into its own venv / copying the data / indexing (OPSI)"):
                py, why = pytables_env(directory)
                if py is None:
                    report["pytables"] = {"error": why}
                    console.print(f"[red]PyTables not measured: {why}[/red]")
                else:
                    try:
                        pt = run_pytables(py, path, directory, pt_queries, args.reps)
                        report["pytables"] = pt
                        for key, phases in pt["queries"].items():
                            qname, s_txt = key.split("|")
                            s = float(s_txt)
                            ref_row = next(r for r in rows if r.query == qname and r.selectivity == s
                                           and r.method == "numpy scan")
                            for phase, res in phases.items():
                                ok = res["count"] == ref_row.matches and res["check"] == ref_row.detail["check"]
                                rows.append(Row(qname, s, res["count"], phase, res["seconds"],
                                                (ref_row.seconds or 0) / res["seconds"],
                                                note="" if ok else "ANSWER DIFFERS FROM NUMPY"))
                    except RuntimeError as e:
                        report["pytables"] = {"error": str(e)}
                        console.print(f"[red]PyTables not measured: {e}[/red]")
        else:
            report["pytables"] = {"error": "skipped (--skip pytables)"}
        # codec comparison
        if "codec" not in args.skip:
            report["codec"] = [codec_comparison(path, "/field/temp", th["field"][0.01 if 0.01 in th["field"] else args.selectivities[0]]),
                               codec_comparison(path, "/catalog/z", th["z"][0.01 if 0.01 in th["z"] else args.selectivities[0]])]
        # MPI
        if "mpi" not in args.skip:
            s = 0.01 if 0.01 in args.selectivities else args.selectivities[0]
            expr = expressions(th, s)["field temp > t"][0]
            report["mpi"] = []
            for n in args.ranks:
                with console.status(f"MPI: bitmap build + query on {n} rank(s)"):
                    report["mpi"].append(run_mpi(path, "/field/temp", expr, n, args.bins, args.reps))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            Path(str(path) + ".h5flow-index.h5").unlink(missing_ok=True)
    report["rows"] = [asdict(r) for r in rows]

    # ---- print
    order = {m: i for i, m in enumerate(METHODS)}
    queries = list(dict.fromkeys(r.query for r in rows))
    for q in queries:
        t = Table(title=q, show_lines=False)
        t.add_column("selectivity", justify="right")
        t.add_column("matches", justify="right")
        for m in METHODS:
            t.add_column(m, justify="right")
        for s in args.selectivities:
            cells = []
            rs = [r for r in rows if r.query == q and r.selectivity == s]
            for m in METHODS:
                r = next((x for x in rs if x.method == m), None)
                cells.append("-" if r is None or r.seconds is None else
                             f"{r.seconds * 1e3:.1f} ms ({r.speedup_vs_numpy:.1f}x)" + (" !" if r.note else ""))
            t.add_row(f"{s * 100:g} %", f"{rs[0].matches:,}" if rs else "-", *cells)
        console.print(t)
    console.print("times: median of --reps, warm page cache; (Nx) = numpy full scan time / this time; "
                  "answers checked against numpy ('!' = differs)")
    ct = Table(title="CPU time (process, median of --reps; (Nx) = numpy scan's CPU time / this one)")
    ct.add_column("query")
    ct.add_column("selectivity", justify="right")
    cpu_methods = [m for m in METHODS if not m.startswith("pytables")]
    for m in cpu_methods:
        ct.add_column(m, justify="right")
    for q in queries:
        for s in args.selectivities:
            rs = {x.method: x for x in rows if x.query == q and x.selectivity == s}
            ct.add_row(q, f"{s * 100:g} %", *["-" if m not in rs or rs[m].cpu_seconds is None else
                                             f"{rs[m].cpu_seconds * 1e3:.1f} ms ({rs[m].cpu_speedup_vs_numpy:.1f}x)"
                                             for m in cpu_methods])
    console.print(ct)
    bt = Table(title="index builds (h5flow, 1 rank)")
    for c in ("dataset", "kind", "blocks", "bins", "index bytes", "% of data", "seconds"):
        bt.add_column(c, justify="right")
    for b in report["builds"]:
        bt.add_row(b["dataset"], b["kind"], str(b["blocks"]), str(b["bins"]), f"{b['index_bytes']:,}",
                   f"{100 * b['index_bytes'] / b['data_bytes']:.1f}", f"{b['seconds']:.2f}")
    console.print(bt)
    pt = report.get("pytables", {})
    if "build" in pt:
        console.print(f"PyTables {pt['version']} (HDF5 {pt['hdf5']}): copy {pt['build']['copy_seconds']:.1f} s, "
                      f"OPSI indexes {pt['build']['index_bytes']:,} bytes; " +
                      ", ".join(f"{k} {v:.1f}" for k, v in pt["build"].items() if k.startswith("index ")))
    for c in report.get("codec", []):
        console.print(f"codec {c['dataset']}: roaring {c['roaring_bytes']:,} B vs numpy(delta+zlib) "
                      f"{c['numpy_zlib_bytes']:,} B; {c['query_bins']} bins -> {c['query_positions']:,} positions: "
                      f"roaring {c['roaring_query_s'] * 1e3:.1f} ms, numpy {c['numpy_query_s'] * 1e3:.1f} ms")
    for m in report.get("mpi", []):
        console.print(f"MPI {m['ranks']} rank(s): bitmap build {m['build_s']:.2f} s, 1 % field query "
                      f"{m['query_s'] * 1e3:.1f} ms (bitmap), {m['scan_s'] * 1e3:.1f} ms (no index, blockwise scan)")
    json_path = args.json or args.out / "query.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2, default=float))
    csv_path = args.out / "query.csv"
    perf.write_csv(csv_path, [dict(asdict(r), detail=json.dumps(r.detail)) for r in
                              sorted(rows, key=lambda r: (r.query, r.selectivity, order[r.method]))],
                   ("query", "selectivity", "matches", "method", "seconds", "speedup_vs_numpy", "note", "detail",
                    "cpu_seconds", "cpu_speedup_vs_numpy"))
    png = args.out / "query.png"
    made = _plot(png, rows, queries)
    console.print(f"wrote {json_path}, {csv_path}" + (f", {png}" if made else " (no PNG: matplotlib missing)"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _worker(json.loads(sys.argv[2]))
        sys.exit(0)
    sys.exit("run through `h5flow bench query`")
