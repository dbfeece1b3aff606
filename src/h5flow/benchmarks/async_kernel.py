"""The kernel of ``h5flow bench async``: a compute + write loop, a run of metadata operations, or a run of
file creates and closes, through
whatever connector ``HDF5_VOL_CONNECTOR`` selects. Run as ``python -m h5flow.benchmarks.async_kernel`` (under
``mpiexec`` for several ranks); prints one JSON line (rank 0).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def compute(seconds: float, work: np.ndarray) -> None:
    """Busy work for ``seconds`` (CPU, as a simulation step would be; never sleeps)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.sin(work, out=work)


def write_loop(path: Path, steps: int, step_bytes: int, compute_s: float, comm) -> dict[str, float]:
    import h5py

    cols = max(1, step_bytes // 8)
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    kw = {"driver": "mpio", "comm": comm} if comm is not None else {}
    data = np.random.default_rng(rank).random(cols)
    work = np.ones(4096)
    in_io = 0.0
    t0 = time.perf_counter()
    with h5py.File(path, "w", **kw) as f:
        d = f.create_dataset("steps", shape=(steps * size, cols), dtype="f8")
        for s in range(steps):
            compute(compute_s, work)
            a = time.perf_counter()
            d[s * size + rank] = data
            in_io += time.perf_counter() - a
        a = time.perf_counter()
    close_s = time.perf_counter() - a
    total = time.perf_counter() - t0
    return {"total_s": total, "in_write_s": in_io, "close_s": close_s, "compute_s": compute_s * steps}


def metadata_loop(path: Path, ops: int) -> dict[str, float]:
    import h5py

    with h5py.File(path, "w") as f:
        g = f.create_group("g")
        t0 = time.perf_counter()
        for i in range(ops):
            g.attrs[f"a{i}"] = i
        t1 = time.perf_counter()
    return {"total_s": t1 - t0, "per_op_us": (t1 - t0) / ops * 1e6}


def file_loop(path: Path, files: int) -> dict[str, float]:
    """Create and close ``files + 1`` files (one dataset each, nothing written) in the directory of ``path``.

    The first file pays what a process pays once (the connector's set-up at its first file); the others give
    the steady cost of a file's create + close. Times are per file, in the kernel's process.
    """
    import h5py

    times = []
    for i in range(files + 1):
        name = path.with_name(f"{path.stem}-{i}{path.suffix}")
        t0 = time.perf_counter()
        with h5py.File(name, "w") as f:
            f.create_dataset("d", shape=(16,), dtype="f8")
        times.append(time.perf_counter() - t0)
    rest = sorted(times[1:])
    return {"first_file_ms": times[0] * 1e3,
            "per_file_us": (rest[len(rest) // 2] if rest else times[0]) * 1e6}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-bytes", type=int, default=8 << 20)
    p.add_argument("--compute-s", type=float, default=0.05)
    p.add_argument("--metadata-ops", type=int, default=0)
    p.add_argument("--file-ops", type=int, default=0)
    p.add_argument("--mpi", action="store_true")
    a = p.parse_args()
    comm = None
    if a.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    path = Path(a.path)
    if a.metadata_ops:
        row = metadata_loop(path, a.metadata_ops)
    elif a.file_ops:
        row = file_loop(path, a.file_ops)
    else:
        row = write_loop(path, a.steps, a.step_bytes, a.compute_s, comm)
        if comm is not None:
            row = {k: comm.allreduce(v, op=__import__("mpi4py").MPI.MAX) for k, v in row.items()}
    if comm is None or comm.rank == 0:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
