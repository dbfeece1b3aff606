"""Tuning facts made measurable: each HDF5 tuning claim of the seeds measured side by side, "seed says X; here Y".

Cases (sizes scaled down for a small machine; each case prints its scale):

* ``libver``  — h5py, 1 process: 8,000-object file with ``libver='earliest'`` vs ``'latest'``
  (seed 003/004: 2.25x faster with 'latest').
* ``dtype``   — h5py + mpio, collective: dataset created ``'f'`` (float32) written from float64 arrays vs
  ``'f8'``, 3-D block decomposition of a 100x100x100 array (seed 003/004: 527 s vs 1.3 s on 5x5x5
  processes; HDF5 then refused collective I/O when a type conversion was needed).
* ``fill``    — h5py low-level API + mpio: a large chunked float32 dataset created with the default fill
  time vs ``H5D_FILL_TIME_NEVER`` (seed 003: 900 GB dataset, 40 min vs < 1 s).
* ``hacc``    — C kernel ``h5flow-perf``: the HACC-IO pattern (9 variables, each rank one contiguous
  slice per variable) through MPI-IO, HDF5 default, HDF5 with alignment, HDF5 with a larger metadata
  block (seed 002: the 2048-byte metadata header misaligns HDF5's writes; alignment or the metadata
  block size make HDF5 comparable to pure MPI-IO).

Every case reads back what it wrote and fails on a mismatch. MPI cases run under ``mpiexec``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from h5flow.benchmarks import perf

CASES = ("libver", "dtype", "fill", "hacc")
WORKER_PREFIX = "H5FLOW_TUNING "

# The seeds' figures (what "seed says" prints).
SEED_LIBVER = ("1 process creating 1 file with 8,000 objects: libver='latest' 2.25x faster than 'earliest' "
               "(seed 003, NERSC h5py guide; seed 004 slide '2.25X')")
SEED_DTYPE = ("100x100x100 array written by 5x5x5 = 125 processes, collective: dataset 'f' from float64 "
              "arrays 527 s, 'f8' 1.3 s (405x; seed 003, seed 004 Warp case study)")
SEED_FILL = ("900 GB chunked float32 dataset (30000 x 8000000, chunks 60 x 15625): default fill 40 min, "
             "FILL_TIME_NEVER < 1 s (> 2400x; seed 003)")
SEED_HACC = ("HACC-IO, 8 ranks writing 9 GB: HDF5's 2048-byte metadata header misaligns the data writes; "
             "'proper alignment or metadata block size can deliver similar HDF5 performance as a pure "
             "MPI-IO implementation' (seed 002; no figure given)")


@dataclass
class Measurement:
    case: str
    variant: str
    kernel: str
    processes: int
    seconds: float | None = None  # median time of the case's timed operation
    mib_s: float | None = None  # throughput, where the case is about bandwidth
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseResult:
    case: str
    seed_says: str
    here: str
    scale: str
    kernel: str
    measurements: list[Measurement]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", type=lambda s: [c.strip() for c in s.split(",") if c.strip()], default=list(CASES),
                   help=f"cases, comma separated (default all: {','.join(CASES)})")
    p.add_argument("--reps", type=int, default=None, help="repetitions per variant; medians reported "
                                                          "(default 3, --quick 1)")
    perf.add_output_arguments(p, "tuning", "small sizes and 2-4 processes (CI)")


# ---------------------------------------------------------------- libver (h5py, serial)


def _libver_file(path: Path, libver: str, objects: int) -> float:
    """Create ``objects`` objects (groups, subgroups, datasets of several types) and return the seconds taken."""
    import h5py
    import numpy as np

    units = objects // 10  # one unit = group + subgroup + 8 datasets
    payloads = [np.arange(16, dtype=t) for t in ("f8", "f4", "i8", "i4", "i2", "u1", "u8", "f2")]
    t0 = time.perf_counter()
    with h5py.File(path, "w", libver=libver) as f:
        for u in range(units):
            g = f.create_group(f"group{u:05d}")
            g.create_group("sub")
            for k, data in enumerate(payloads):
                g.create_dataset(f"d{k}", data=data)
    return time.perf_counter() - t0


def _libver_verify(path: Path, objects: int) -> None:
    import h5py
    import numpy as np

    seen: list[str] = []
    with h5py.File(path, "r") as f:
        f.visit(seen.append)
        last = f[f"group{objects // 10 - 1:05d}/d2"][()]
    if len(seen) != objects or not np.array_equal(last, np.arange(16, dtype="i8")):
        raise RuntimeError(f"libver: read back {len(seen)} objects (wrote {objects}) or wrong data")


def case_libver(args: argparse.Namespace, directory: Path) -> CaseResult:
    objects = 800 if args.quick else 8000
    times: dict[str, list[float]] = {"earliest": [], "latest": []}
    for rep in range(args.reps):
        for libver in ("earliest", "latest") if rep % 2 == 0 else ("latest", "earliest"):
            path = directory / f"h5flow_tuning_{uuid.uuid4().hex}.h5"
            try:
                times[libver].append(_libver_file(path, libver, objects))
                _libver_verify(path, objects)
            finally:
                path.unlink(missing_ok=True)
    ms = [Measurement("libver", v, "h5py", 1, statistics.median(t), detail={"objects": objects})
          for v, t in times.items()]
    ratio = ms[0].seconds / ms[1].seconds
    return CaseResult("libver", SEED_LIBVER,
                      f"{objects:,} objects: earliest {ms[0].seconds:.2f} s, latest {ms[1].seconds:.2f} s "
                      f"→ earliest/latest = {ratio:.2f}x ({'latest faster' if ratio > 1 else 'latest slower'})", f"objects 1:{8000 // objects} of the seed's", "h5py (serial)",
                      ms)


# ---------------------------------------------------------------- MPI workers (run under mpiexec)


def _grid(n: int) -> tuple[int, int, int]:
    """A near-cubic 3-D process grid with product n (like MPI_Dims_create)."""
    best = (n, 1, 1)
    for a in range(1, n + 1):
        for b in range(1, n // a + 1):
            if n % (a * b) == 0:
                c = n // (a * b)
                if max(a, b, c) - min(a, b, c) < max(best) - min(best):
                    best = (a, b, c)
    return best


def _no_collective_cause(dxpl_id: int) -> tuple[int, int]:
    """(actual I/O mode, global no-collective cause bits) HDF5 recorded on a transfer property list."""
    from h5flow import _hdf5lib

    lib = _hdf5lib.lib()
    mode = ctypes.c_int(0)
    local, glob = ctypes.c_uint32(0), ctypes.c_uint32(0)
    lib.H5Pget_mpio_actual_io_mode.argtypes = [_hdf5lib.hid_t, ctypes.POINTER(ctypes.c_int)]
    lib.H5Pget_mpio_no_collective_cause.argtypes = [_hdf5lib.hid_t, ctypes.POINTER(ctypes.c_uint32),
                                                    ctypes.POINTER(ctypes.c_uint32)]
    if lib.H5Pget_mpio_actual_io_mode(dxpl_id, ctypes.byref(mode)) < 0:
        raise RuntimeError("H5Pget_mpio_actual_io_mode failed")
    if lib.H5Pget_mpio_no_collective_cause(dxpl_id, ctypes.byref(local), ctypes.byref(glob)) < 0:
        raise RuntimeError("H5Pget_mpio_no_collective_cause failed")
    return mode.value, glob.value


CAUSES = {0x1: "independent requested", 0x2: "datatype conversion", 0x4: "data transforms",
          0x10: "not simple dataspaces", 0x20: "layout", 0x40: "filters", 0x100: "no selection I/O"}


DTYPE_VARIANTS = (("f (float32) from float64", "f4"), ("f8 from float64", "f8"))


def _worker_dtype(comm, directory: Path, sizes: list[int], reps: int) -> dict[str, Any]:  # noqa: ANN001
    import h5py
    import numpy as np
    from mpi4py import MPI

    px, py, pz = _grid(comm.size)
    cx, cy, cz = comm.rank // (py * pz), (comm.rank // pz) % py, comm.rank % pz
    name = comm.bcast(str(directory / f"h5flow_tuning_{uuid.uuid4().hex}.h5") if comm.rank == 0 else None)
    out: dict[str, Any] = {"grid": [px, py, pz]}
    try:
        for n in sizes:
            sl = tuple(slice(c * n // p, (c + 1) * n // p) for c, p in ((cx, px), (cy, py), (cz, pz)))
            rng = np.random.default_rng(comm.rank)
            block = rng.standard_normal(tuple(s.stop - s.start for s in sl))  # float64, numpy's default
            for label, dtype in DTYPE_VARIANTS:
                times = []
                for _ in range(reps):
                    with h5py.File(name, "w", driver="mpio", comm=comm) as f:
                        dset = f.create_dataset("field", (n, n, n), dtype=dtype)
                        comm.Barrier()
                        t0 = MPI.Wtime()
                        with dset.collective:
                            dset[sl] = block
                        times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
                        # the same transfer through a property list we can ask why HDF5 did what it did
                        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
                        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
                        fspace = dset.id.get_space()
                        fspace.select_hyperslab(tuple(s.start for s in sl), block.shape)
                        mspace = h5py.h5s.create_simple(block.shape)
                        dset.id.write(mspace, fspace, np.ascontiguousarray(block), dxpl=dxpl)
                        mode, cause = _no_collective_cause(dxpl.id)
                    with h5py.File(name, "r", driver="mpio", comm=comm) as f:
                        back = f["field"][sl]
                    if not comm.allreduce(bool(np.array_equal(back, block.astype(dtype))), op=MPI.LAND):
                        raise RuntimeError(f"dtype/{label}/{n}^3: data read back differs from data written")
                out[f"{label}, {n}^3"] = {
                    "seconds": statistics.median(times), "io_mode": mode, "n": n,
                    "rank_selection_bytes": int(comm.allreduce(block.nbytes, op=MPI.MAX)),
                    "no_collective_cause": [v for k, v in CAUSES.items() if cause & k] or ["none"]}
    finally:
        comm.Barrier()
        if comm.rank == 0:
            Path(name).unlink(missing_ok=True)
    return out


def _worker_fill(comm, directory: Path, rows: int, cols: int, reps: int) -> dict[str, Any]:  # noqa: ANN001
    import h5py
    import numpy as np
    from mpi4py import MPI

    chunk = (60, 15625)  # the seed's chunk shape, unchanged
    name = comm.bcast(str(directory / f"h5flow_tuning_{uuid.uuid4().hex}.h5") if comm.rank == 0 else None)
    out: dict[str, Any] = {"shape": [rows, cols], "chunk": list(chunk)}
    # each rank writes one chunk-sized tile on its own row band, then reads it back
    r0 = (comm.rank * chunk[0]) % rows
    tile = np.full(chunk, comm.rank + 1, dtype="f4")
    try:
        for variant, fill_time in (("default fill time", None), ("FILL_TIME_NEVER", h5py.h5d.FILL_TIME_NEVER)):
            times = []
            for _ in range(reps):
                fx = h5py.File(name, "w", driver="mpio", comm=comm)
                space = h5py.h5s.create_simple((rows, cols))
                plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                plist.set_chunk(chunk)
                if fill_time is not None:
                    plist.set_fill_time(fill_time)
                comm.Barrier()
                t0 = MPI.Wtime()
                dsid = h5py.h5d.create(fx.id, b"data", h5py.h5t.NATIVE_FLOAT, space, plist)
                dset = h5py.Dataset(dsid)
                times.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
                with dset.collective:
                    dset[r0:r0 + chunk[0], 0:chunk[1]] = tile
                fx.close()
            with h5py.File(name, "r", driver="mpio", comm=comm) as f:
                d = f["data"]
                ok = bool(np.array_equal(d[r0:r0 + chunk[0], 0:chunk[1]], tile))
                if fill_time is None:  # never written, so it must read as the fill value 0
                    ok = ok and bool(np.all(d[r0:r0 + chunk[0], cols - chunk[1]:cols] == 0))
                size = f.id.get_filesize()
            if not comm.allreduce(ok, op=MPI.LAND):
                raise RuntimeError(f"fill/{variant}: data read back differs from data written")
            out[variant] = {"seconds": statistics.median(times), "file_bytes": size}
    finally:
        comm.Barrier()
        if comm.rank == 0:
            Path(name).unlink(missing_ok=True)
    return out


def _worker_main(argv: list[str]) -> int:
    from mpi4py import MPI

    case, params = argv[0], json.loads(argv[1])
    comm = MPI.COMM_WORLD
    directory = Path(params.pop("dir"))
    worker: Callable[..., dict[str, Any]] = {"dtype": _worker_dtype, "fill": _worker_fill}[case]
    result = worker(comm, directory, **params)
    if comm.rank == 0:
        print(WORKER_PREFIX + json.dumps(result), flush=True)
    return 0


def _run_worker(case: str, procs: int, params: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    cmd = [perf.mpiexec(), "-n", str(procs), sys.executable, "-m", __name__, "--worker", case, json.dumps(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise RuntimeError(f"tuning case {case} failed (exit {proc.returncode}):\n{tail}")
    for line in proc.stdout.splitlines():
        if line.startswith(WORKER_PREFIX):
            return json.loads(line[len(WORKER_PREFIX):])
    raise RuntimeError(f"tuning case {case} printed no result:\n{proc.stdout[-2000:]}")


# ---------------------------------------------------------------- dtype, fill, hacc


def case_dtype(args: argparse.Namespace, directory: Path) -> CaseResult:
    procs = 4 if args.quick else 8
    # the seed's 100^3 array, and one whose per-rank float64 selection (2 MiB at 8 ranks) exceeds HDF5's
    # 1 MiB type-conversion buffer
    sizes = [100] if args.quick else [100, 128]  # --quick: 4 ranks, 100^3 already exceeds the buffer
    res = _run_worker("dtype", procs, {"dir": str(directory), "sizes": sizes, "reps": args.reps})
    ms = [Measurement("dtype", f"{label}, {n}^3", "h5py", procs, res[f"{label}, {n}^3"]["seconds"],
                      detail=dict(res[f"{label}, {n}^3"], grid=res["grid"]))
          for n in sizes for label, _ in DTYPE_VARIANTS]
    parts = []
    for i in range(0, len(ms), 2):
        f4, f8 = ms[i], ms[i + 1]
        parts.append(f"{f4.detail['n']}^3 ({f4.detail['rank_selection_bytes'] / 2**20:.2f} MiB float64 per rank): "
                     f"'f' {f4.seconds * 1e3:.0f} ms vs 'f8' {f8.seconds * 1e3:.0f} ms = {f4.seconds / f8.seconds:.2f}x, "
                     f"collective broken by: {', '.join(f4.detail['no_collective_cause'])}")
    grid = "x".join(map(str, res["grid"]))
    return CaseResult("dtype", SEED_DTYPE,
                      f"{grid} = {procs} processes; " + "; ".join(parts) +
                      ". HDF5 1.14 converts in place and stays collective when a rank's selection fits the "
                      "1 MiB type-conversion buffer (H5Pset_buffer); beyond it, it falls back to independent "
                      "I/O, the seed's mechanism; what that fallback costs depends on the file system",
                      f"the seed's array on {procs} processes instead of 125, plus a 128^3 array",
                      "h5py + mpio (collective)", ms)


def case_fill(args: argparse.Namespace, directory: Path) -> CaseResult:
    procs = 2
    rows, cols = (120, 312500) if args.quick else (600, 437500)
    res = _run_worker("fill", procs, {"dir": str(directory), "rows": rows, "cols": cols, "reps": args.reps})
    names = ("default fill time", "FILL_TIME_NEVER")
    ms = [Measurement("fill", v, "h5py", procs, res[v]["seconds"], detail={"file_bytes": res[v]["file_bytes"],
                                                                          "shape": res["shape"]}) for v in names]
    nbytes = rows * cols * 4
    seed_bytes = 30000 * 8000000 * 4
    ratio = ms[0].seconds / ms[1].seconds if ms[1].seconds > 0 else float("inf")
    return CaseResult("fill", SEED_FILL,
                      f"{rows} x {cols} float32 ({nbytes / 2**30:.2f} GiB), chunks 60 x 15625, {procs} processes: "
                      f"default {ms[0].seconds:.3f} s, NEVER {ms[1].seconds:.4f} s → {ratio:.0f}x "
                      "(parallel HDF5 allocates chunked storage at creation, so the default writes every chunk)",
                      f"dataset 1:{seed_bytes // nbytes} of the seed's, same chunk shape", "h5py low-level + mpio",
                      ms)


def case_hacc(args: argparse.Namespace, directory: Path) -> CaseResult:
    procs = 4 if args.quick else 8
    per_var = perf.parse_size("1M" if args.quick else "8M")
    variables = 9  # HACC: xx, yy, zz, vx, vy, vz, phi, pid, mask
    common = ["-d", str(variables), "-e", str(per_var), "-x", str(per_var), "-X", str(per_var),
              "-i", str(args.reps), "-D", "v", "-f", str(directory)]
    variants = [("MPI-IO (pure)", ["-A", "mpiio"]),
                ("HDF5 default (2048-byte metadata block)", ["-A", "phdf5"]),
                ("HDF5 alignment 1 MiB (threshold 64 KiB)", ["-A", "phdf5", "-a", "1M", "-T", "64K"]),
                ("HDF5 metadata block size 1 MiB", ["-A", "phdf5", "-m", "1M"])]
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    ms = []
    for variant, extra in variants:
        rec = perf.run_kernel(procs, extra + common, env)[0]
        ms.append(Measurement("hacc", variant, "C (h5flow-perf)", procs, mib_s=rec["write_mib_s"],
                              detail={"read_mib_s": rec.get("read_mib_s"),
                                      "write_open_close_mib_s": rec["write_open_close_mib_s"]}))
    base = ms[0].mib_s or 1.0
    parts = ", ".join(f"{m.variant.split(' (')[0] if m.variant.startswith('MPI') else m.variant[5:]} "
                      f"{m.mib_s:.0f} MiB/s ({m.mib_s / base:.2f}x)" for m in ms)
    total = procs * variables * per_var
    return CaseResult("hacc", SEED_HACC, f"{procs} ranks x {variables} variables, {total / 2**20:.0f} MiB, write: "
                      f"{parts} (ratios to pure MPI-IO)",
                      f"{total / 2**20:.0f} MiB instead of 9 GB (1:{9 * 10**9 // total})", "C kernel h5flow-perf", ms)


RUNNERS: dict[str, Callable[[argparse.Namespace, Path], CaseResult]] = {
    "libver": case_libver, "dtype": case_dtype, "fill": case_fill, "hacc": case_hacc}


# ---------------------------------------------------------------- output and launch


def _plot(path: Path, results: list[CaseResult]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        labels = [m.variant for m in res.measurements]
        if res.case == "hacc":
            values = [m.mib_s or 0.0 for m in res.measurements]
            ax.set_ylabel("write MiB/s")
        else:
            values = [m.seconds or 0.0 for m in res.measurements]
            ax.set_ylabel("seconds (median)")
        ax.bar(range(len(values)), values, color=["tab:red", "tab:green", "tab:blue", "tab:orange"][:len(values)])
        ax.set_xticks(range(len(values)), [lab[:24] for lab in labels], rotation=20, ha="right", fontsize=8)
        ax.set_title(f"{res.case} ({res.kernel})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def launch(args: argparse.Namespace) -> int:
    bad = [c for c in args.cases if c not in CASES]
    if bad or not args.cases:
        raise ValueError(f"unknown case(s) {', '.join(bad) or '(none)'}: choose from {', '.join(CASES)}")
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    if args.reps < 1:
        raise ValueError("--reps must be at least 1")
    directory = perf.work_dir(args)

    from rich.console import Console
    from rich.progress import Progress

    results: list[CaseResult] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("h5flow bench tuning", total=len(args.cases))
        for case in args.cases:
            bar.update(task, description=f"tuning: {case}")
            results.append(RUNNERS[case](args, directory))
            bar.advance(task)

    console = Console(width=max(Console().width, 120))
    for r in results:
        console.print(f"[bold]{r.case}[/bold] ({r.kernel}; scale: {r.scale})")
        console.print(f"  seed says {r.seed_says}", highlight=False, markup=False)
        console.print(f"  here      {r.here}", highlight=False, markup=False)
    console.print("verified: every case read back what it wrote")

    rows = [dict(asdict(m), seed_says=r.seed_says, here=r.here, scale=r.scale)
            for r in results for m in r.measurements]
    json_path = args.json or args.out / "tuning.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"benchmark": "tuning", "directory": str(directory), "reps": args.reps,
                                     "quick": args.quick, "cases": [asdict(r) for r in results],
                                     "results": rows}, indent=2))
    csv_path = args.out / "tuning.csv"
    perf.write_csv(csv_path, [dict(r, detail=json.dumps(r["detail"])) for r in rows],
                   ("case", "variant", "kernel", "processes", "seconds", "mib_s", "detail", "scale"))
    png_path = args.out / "tuning.png"
    made = _plot(png_path, results)
    print(f"wrote {json_path}, {csv_path}" + (f", {png_path}" if made else " (no PNG: matplotlib missing)"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.exit(_worker_main(sys.argv[2:]))
    sys.exit("run through `h5flow bench tuning`")
