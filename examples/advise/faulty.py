"""Small h5py programs, one per ``h5flow advise`` rule, each with the one tuning mistake its rule finds.

Run under MPI with 2 ranks (the serial cases run on rank 0 with the default driver):

    mpiexec -n 2 python faulty.py [--dir DIR] [--fixed] [--fixed-dir DIR2] CASE [CASE ...]   # CASE: a rule id,
                                                                                          # clean or all

Each case writes ``DIR/<case>.h5`` and is otherwise well tuned, so that a trace of it shows exactly its
rule's mistake. ``--fixed`` (or ``H5FLOW_ADVISE_FIX=rule,rule`` / ``all`` in the environment, which
``h5flow advise --verify`` sets) runs the fixed variant of the named cases; ``--fixed-dir DIR2`` runs
each case's fixed variant right after it, into DIR2. Every case reads back what it
wrote and fails on a mismatch.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
TUNED = {"libver": ("v110", "latest"), "alignment_threshold": 65536, "alignment_interval": 1 << 20}


def pfile(path: Path, mode: str = "w", **kw) -> h5py.File:
    """A well-tuned parallel file (modern format, 1 MiB alignment) unless ``kw`` says otherwise."""
    return h5py.File(path, mode, driver="mpio", comm=comm, **{**TUNED, **kw})


def check(ok: bool, what: str) -> None:
    if not comm.allreduce(bool(ok), op=MPI.LAND):
        raise SystemExit(f"rank {comm.rank}: {what}: data read back differs from data written")


def share(n: int) -> slice:
    return slice(comm.rank * n // comm.size, (comm.rank + 1) * n // comm.size)


def dtype_conversion(path: Path, fixed: bool) -> None:
    # Warp: float64 numpy data into a float32 dataset; 8 MiB per rank exceeds HDF5's 1 MiB conversion buffer
    n = 128
    sl = share(n)
    block = np.random.default_rng(comm.rank).standard_normal((sl.stop - sl.start, n, n))
    with pfile(path) as f:
        dset = f.create_dataset("field", (n, n, n), dtype="f8" if fixed else "f4")
        with dset.collective:
            dset[sl] = block
    with pfile(path, "r") as f:
        check(np.array_equal(f["field"][sl], block.astype(f["field"].dtype)), "dtype-conversion")


def collective_fallback(path: Path, fixed: bool) -> None:
    # a data transform on the transfer list makes HDF5 write independently
    from h5flow import _hdf5lib

    n = 1 << 20
    sl = share(n)
    block = np.arange(sl.start, sl.stop, dtype="f8")
    with pfile(path) as f:
        dset = f.create_dataset("x", (n,), dtype="f8")
        if fixed:
            with dset.collective:
                dset[sl] = block * 2
        else:
            dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
            dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
            lib = _hdf5lib.lib()
            lib.H5Pset_data_transform.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p]
            if lib.H5Pset_data_transform(dxpl.id, b"x*2") < 0:
                raise SystemExit("H5Pset_data_transform failed")
            fspace = dset.id.get_space()
            fspace.select_hyperslab((sl.start,), (sl.stop - sl.start,))
            dset.id.write(h5py.h5s.create_simple((sl.stop - sl.start,)), fspace, block, dxpl=dxpl)
    with pfile(path, "r") as f:
        check(np.array_equal(f["x"][sl], block * 2), "collective-fallback")


def fill_time(path: Path, fixed: bool) -> None:
    # seed 003's chunk shape on an 80 MiB dataset (1:11000 of the seed's 900 GB); each rank writes one chunk
    chunk = (60, 15625)
    rows, cols = 96, 218750
    r0 = (comm.rank * chunk[0]) % (rows - chunk[0] + 1)
    tile = np.full(chunk, comm.rank + 1, dtype="f4")
    with pfile(path) as f:
        dset = f.create_dataset("data", (rows, cols), dtype="f4", chunks=chunk,
                                fill_time="never" if fixed else "ifset")
        with dset.collective:
            dset[r0:r0 + chunk[0], comm.rank * chunk[1]:(comm.rank + 1) * chunk[1]] = tile
    with pfile(path, "r") as f:  # only what was written is read: with "never" the rest is undefined
        check(np.array_equal(f["data"][r0:r0 + chunk[0], comm.rank * chunk[1]:(comm.rank + 1) * chunk[1]], tile),
              "fill-time")


def libver_earliest(path: Path, fixed: bool) -> None:
    units = 120  # 1,200 objects: a group, a subgroup and 8 datasets per unit
    payload = np.arange(16, dtype="i8")
    with h5py.File(path, "w", **({"libver": ("v110", "latest")} if fixed else {})) as f:
        for u in range(units):
            g = f.create_group(f"group{u:04d}")
            g.create_group("sub")
            for k in range(8):
                g.create_dataset(f"d{k}", data=payload)
    with h5py.File(path, "r") as f:
        if not np.array_equal(f[f"group{units - 1:04d}/d7"][()], payload):
            raise SystemExit("libver-earliest: data read back differs")


def alignment(path: Path, fixed: bool) -> None:
    # HACC-IO: 9 variables, each rank one contiguous 2 MiB slice per variable
    per = 1 << 18  # float64 elements per rank and variable
    opts = {} if fixed else {"alignment_threshold": 1, "alignment_interval": 1}
    data = np.full(per, comm.rank, dtype="f8")
    sl = slice(comm.rank * per, (comm.rank + 1) * per)
    with pfile(path, **opts) as f:
        for v in ("xx", "yy", "zz", "vx", "vy", "vz", "phi", "pid", "mask"):
            dset = f.create_dataset(v, (per * comm.size,), dtype="f8")
            with dset.collective:
                dset[sl] = data
    with pfile(path, "r") as f:
        check(np.array_equal(f["mask"][sl], data), "alignment")


def small_independent_writes(path: Path, fixed: bool) -> None:
    rows, width = 100, 128  # each rank: 100 rows of 1 KiB
    block = np.arange(rows * width, dtype="f8").reshape(rows, width) + comm.rank
    base = comm.rank * rows
    with pfile(path) as f:
        dset = f.create_dataset("particles", (rows * comm.size, width), dtype="f8")
        if fixed:
            with dset.collective:
                dset[base:base + rows] = block
        else:
            for i in range(rows):
                dset[base + i] = block[i]
    with pfile(path, "r") as f:
        check(np.array_equal(f["particles"][base:base + rows], block), "small-independent-writes")


def chunk_shape(path: Path, fixed: bool) -> None:
    data = np.arange(1 << 18, dtype="f8")  # 2 MiB in chunks of 512 B
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.create_dataset("c", data=data, chunks=(131072,) if fixed else (64,))
    with h5py.File(path, "r") as f:
        if not np.array_equal(f["c"][()], data):
            raise SystemExit("chunk-shape: data read back differs")


def chunk_cache(path: Path, fixed: bool) -> None:
    data = (np.arange(2048 * 1024, dtype="f4") % 977).reshape(2048, 1024)  # 2 MiB deflate chunks
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.create_dataset("z", data=data, chunks=(512, 1024), compression="gzip", compression_opts=1)
    with h5py.File(path, "r", **({"rdcc_nbytes": 16 << 20, "rdcc_nslots": 10007} if fixed else {})) as f:
        z = f["z"]
        for i in range(0, 2048, 64):
            if not np.array_equal(z[i], data[i]):
                raise SystemExit("chunk-cache: data read back differs")


def open_close_loop(path: Path, fixed: bool) -> None:
    n = 200
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.create_dataset("field", (n,), dtype="f8")
        if fixed:
            dset = f["field"]
            for i in range(n):
                dset[i] = i
        else:
            for i in range(n):
                f["field"][i] = i
    with h5py.File(path, "r") as f:
        if not np.array_equal(f["field"][()], np.arange(n, dtype="f8")):
            raise SystemExit("open-close-loop: data read back differs")


def file_reopen(path: Path, fixed: bool) -> None:
    steps, width = 20, 1024
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.create_dataset("field", (steps, width), dtype="f8")
    if fixed:
        with h5py.File(path, "a") as f:
            dset = f["field"]
            for s in range(steps):
                dset[s] = np.full(width, s, dtype="f8")
                f.flush()
    else:
        for s in range(steps):
            with h5py.File(path, "a") as f:
                f["field"][s] = np.full(width, s, dtype="f8")
    with h5py.File(path, "r") as f:
        if not np.array_equal(f["field"][:, 0], np.arange(steps, dtype="f8")):
            raise SystemExit("file-reopen: data read back differs")


IMBALANCE_SECONDS = 0.3  # time steps go on until the busiest rank has spent this long writing
IMBALANCE_MAX_STEPS = 64


def rank_imbalance(path: Path, fixed: bool) -> None:
    # rank 0 owns 98 % of the rows (a skewed decomposition): independent writes of 64 rows (4 MiB), 47 on rank 0,
    # one on rank 1; the fixed variant gives each rank half of the rows. Each time step rewrites every rank's
    # share; the steps go on until the busiest rank has spent IMBALANCE_SECONDS writing: one step's 188 MiB takes
    # under 0.1 s where the page cache takes 2 GB/s, and the rule reports only a slowest rank at least 0.05 s above
    # the mean
    rows, width = 3072, 1 << 14  # 192 MiB of float32
    cut = rows // 2 if fixed else rows * 98 // 100 // 64 * 64
    mine = (0, cut) if comm.rank == 0 else (cut, rows)
    block = np.empty((64, width), dtype="f4")
    with pfile(path) as f:
        dset = f.create_dataset("field", (rows, width), dtype="f4")
        spent = 0.0  # seconds in the writes themselves, as the trace counts them
        for _step in range(IMBALANCE_MAX_STEPS):
            for r in range(mine[0], mine[1], 64):
                end = min(r + 64, mine[1])
                block.fill(r)
                t0 = time.perf_counter()
                dset[r:end] = block[:end - r]
                spent += time.perf_counter() - t0
            if comm.allreduce(spent, op=MPI.MAX) >= IMBALANCE_SECONDS:
                break
    with pfile(path, "r") as f:
        check(np.array_equal(f["field"][mine[0]:mine[1], 0], np.repeat(np.arange(mine[0], mine[1], 64), 64)[:mine[1] - mine[0]].astype("f4")), "rank-imbalance")


def mpi_hints(path: Path, fixed: bool) -> None:
    info = MPI.Info.Create()
    info.Set("romio_cb_write", "enable" if fixed else "disable")
    info.Set("romio_ds_write", "disable" if fixed else "enable")
    n = 1 << 19
    sl = share(n)
    block = np.arange(sl.start, sl.stop, dtype="f8")
    with pfile(path, info=info) as f:
        dset = f.create_dataset("x", (n,), dtype="f8")
        with dset.collective:
            dset[sl] = block
    with pfile(path, "r") as f:
        check(np.array_equal(f["x"][sl], block), "mpi-hints")
    info.Free()


def clean(path: Path, fixed: bool) -> None:
    # well tuned: modern format, alignment, matching types, collective writes, chunks of 1 MiB, one open
    n = 1 << 20
    sl = share(n)
    block = np.arange(sl.start, sl.stop, dtype="f8")
    with pfile(path) as f:
        f.attrs["title"] = "clean"
        d = f.create_dataset("x", (n,), dtype="f8")
        c = f.create_dataset("grid", (512, 1024), dtype="f8", chunks=(128, 1024))
        g = f.create_group("meta")
        for k in range(4):
            g.create_dataset(f"m{k}", data=np.arange(8.0))
        with d.collective:
            d[sl] = block
        rows = share(512)
        with c.collective:
            c[rows] = np.ones((rows.stop - rows.start, 1024))
    with pfile(path, "r") as f:
        check(np.array_equal(f["x"][sl], block) and float(f["grid"][rows].sum()) == (rows.stop - rows.start) * 1024,
              "clean")


PARALLEL: dict[str, Callable[[Path, bool], None]] = {
    "dtype-conversion": dtype_conversion, "collective-fallback": collective_fallback, "fill-time": fill_time,
    "alignment": alignment, "small-independent-writes": small_independent_writes, "rank-imbalance": rank_imbalance,
    "mpi-hints": mpi_hints, "clean": clean}
SERIAL: dict[str, Callable[[Path, bool], None]] = {
    "libver-earliest": libver_earliest, "chunk-shape": chunk_shape, "chunk-cache": chunk_cache,
    "open-close-loop": open_close_loop, "file-reopen": file_reopen}
CASES = {**PARALLEL, **SERIAL}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="+", help=f"all, or some of: {', '.join(CASES)}")
    p.add_argument("--dir", type=Path, default=Path("advise-out"), help="where the files go (default ./advise-out)")
    p.add_argument("--fixed", action="store_true", help="run the fixed variant of every case")
    p.add_argument("--fixed-dir", type=Path, default=None,
                   help="also run every case's fixed variant after it, writing into this directory")
    args = p.parse_args(argv)
    names = list(CASES) if args.cases == ["all"] else args.cases
    bad = [c for c in names if c not in CASES]
    if bad:
        p.error(f"unknown case(s) {', '.join(bad)}; choose from all, {', '.join(CASES)}")
    fix = {c.strip() for c in os.environ.get("H5FLOW_ADVISE_FIX", "").split(",") if c.strip()}
    if comm.rank == 0:
        for d in (args.dir, args.fixed_dir):
            if d is not None:
                d.mkdir(parents=True, exist_ok=True)
    comm.Barrier()
    for name in names:
        run_case(name, args.dir, args.fixed or "all" in fix or name in fix)
        if args.fixed_dir is not None:
            run_case(name, args.fixed_dir, True)
    return 0


def run_case(name: str, directory: Path, fixed: bool) -> None:
    t0 = time.perf_counter()
    if name in PARALLEL:
        PARALLEL[name](directory / f"{name}.h5", fixed)
    elif comm.rank == 0:
        SERIAL[name](directory / f"{name}.h5", fixed)
    comm.Barrier()
    if comm.rank == 0:
        print(f"{name}{' (fixed)' if fixed else ''}: {time.perf_counter() - t0:.3f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
