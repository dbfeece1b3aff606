"""Parallel h5py write/read bandwidth: every rank writes one contiguous slab of a shared dataset.

Run under MPI (``mpiexec -n 4 python -m h5flow.benchmarks.parallel_rw``) or through
``h5flow bench rw -n 4``, which starts ``mpiexec`` itself. Each repetition creates a fresh file with
``driver='mpio'``, writes (collective or independent transfers), closes, reopens and reads the data back,
and verifies every element. Times include open and close, and the slowest rank's time counts, the way
h5perf reports "with open/close" throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1 << 20


@dataclass
class Result:
    mode: str  # "collective" or "independent"
    ranks: int
    bytes_total: int
    write_s: float  # median over repetitions of the slowest rank's open+write+close
    read_s: float

    @property
    def write_mib_s(self) -> float:
        return self.bytes_total / MIB / self.write_s

    @property
    def read_mib_s(self) -> float:
        return self.bytes_total / MIB / self.read_s


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--ranks", type=int, default=4, help="MPI ranks to launch (default 4)")
    p.add_argument("--mib-per-rank", type=int, default=64, help="MiB each rank writes (default 64)")
    p.add_argument("--reps", type=int, default=3, help="repetitions; the median is reported (default 3)")
    p.add_argument(
        "--mode", choices=["collective", "independent", "both"], default="both",
        help="MPI-IO transfer mode (default both)",
    )
    p.add_argument(
        "--dir", type=Path, default=None,
        help="directory for the test file (default: /dev/shm if present, else the temp dir)",
    )
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write results as JSON")


def _default_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def launch(args: argparse.Namespace) -> int:
    """Start the benchmark under ``mpiexec`` with ``args.ranks`` ranks."""
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        print("h5flow bench rw: mpiexec not found on PATH; run `make setup` or install MPICH", file=sys.stderr)
        return 2
    if args.ranks < 1:
        print("h5flow bench rw: --ranks must be at least 1", file=sys.stderr)
        return 2
    cmd = [mpiexec, "-n", str(args.ranks), sys.executable, "-m", __name__,
           "--mib-per-rank", str(args.mib_per_rank), "--reps", str(args.reps), "--mode", args.mode]
    if args.dir is not None:
        cmd += ["--dir", str(args.dir)]
    if args.json is not None:
        cmd += ["--json", str(args.json)]
    return subprocess.call(cmd)


def _run_mode(comm, path: Path, mode: str, mib: int, reps: int, progress) -> Result:  # noqa: ANN001
    import h5py
    import numpy as np
    from mpi4py import MPI

    rank, size = comm.rank, comm.size
    n = mib * MIB // 8
    start = rank * n
    mine = np.arange(start, start + n, dtype=np.float64)
    writes: list[float] = []
    reads: list[float] = []
    for rep in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        with h5py.File(path, "w", driver="mpio", comm=comm) as f:
            dset = f.create_dataset("data", shape=(n * size,), dtype="f8")
            if mode == "collective":
                with dset.collective:
                    dset[start : start + n] = mine
            else:
                dset[start : start + n] = mine
        t_write = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
        comm.Barrier()
        t0 = MPI.Wtime()
        back = np.empty_like(mine)
        with h5py.File(path, "r", driver="mpio", comm=comm) as f:
            dset = f["data"]
            if mode == "collective":
                with dset.collective:
                    dset.read_direct(back, np.s_[start : start + n])
            else:
                dset.read_direct(back, np.s_[start : start + n])
        t_read = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
        ok = comm.allreduce(bool(np.array_equal(back, mine)), op=MPI.LAND)
        if not ok:
            raise RuntimeError(f"{mode} repetition {rep}: data read back differs from data written")
        writes.append(t_write)
        reads.append(t_read)
        if progress is not None:
            progress()
    comm.Barrier()
    if rank == 0:
        path.unlink(missing_ok=True)
    return Result(mode, size, n * 8 * size, float(np.median(writes)), float(np.median(reads)))


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m h5flow.benchmarks.parallel_rw", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    directory = args.dir or _default_dir()
    modes = ["collective", "independent"] if args.mode == "both" else [args.mode]
    if comm.rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        name = str(directory / f"h5flow-rw-{uuid.uuid4().hex}.h5")
    else:
        name = None
    path = Path(comm.bcast(name, root=0))

    results: list[Result] = []
    if comm.rank == 0:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"{comm.size} ranks × {args.mib_per_rank} MiB", total=len(modes) * args.reps)
            for mode in modes:
                results.append(_run_mode(comm, path, mode, args.mib_per_rank, args.reps,
                                         lambda: bar.advance(task)))
    else:
        for mode in modes:
            results.append(_run_mode(comm, path, mode, args.mib_per_rank, args.reps, None))

    if comm.rank == 0:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"parallel h5py (driver='mpio') on {directory}: {comm.size} ranks, "
                        f"{args.mib_per_rank} MiB/rank, median of {args.reps}")
        for col in ("mode", "bytes", "write s", "write MiB/s", "read s", "read MiB/s"):
            t.add_column(col, justify="right")
        for r in results:
            t.add_row(r.mode, f"{r.bytes_total / MIB:.0f} MiB", f"{r.write_s:.3f}", f"{r.write_mib_s:.0f}",
                      f"{r.read_s:.3f}", f"{r.read_mib_s:.0f}")
        Console().print(t)
        print("verified: every element read back equals what was written")
        if args.json is not None:
            rows = [dict(asdict(r), write_mib_s=r.write_mib_s, read_mib_s=r.read_mib_s) for r in results]
            args.json.write_text(json.dumps({"benchmark": "rw", "directory": str(directory), "results": rows},
                                            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run())
