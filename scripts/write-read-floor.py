"""The floor under an HDF5 stream's step: one process writes a new 8 MiB file with POSIX and through h5py, and
reads each back (into a reused buffer) with POSIX and through h5py. Prints the median and the minimum of 30
tries in ms. The POSIX side uses page-aligned buffers, as `bench transit`'s bound does (see its
`posix_write_read`): the kernel's copy is fastest between same-aligned buffers. Run with the stack's Python (`source build/stack.env`):

    python scripts/write-read-floor.py [DIR]        # DIR defaults to /dev/shm
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import h5py
import numpy as np

from h5flow.benchmarks.transit import page_aligned

NBYTES = 8 << 20
TRIES = 30


def timed(fn: Callable[[int], None]) -> tuple[float, float]:
    ts = []
    for i in range(TRIES):
        t0 = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts)), 1e3 * min(ts)


def main(directory: str) -> None:
    data = np.random.default_rng(0).random(NBYTES // 8)
    raw = page_aligned(NBYTES)
    raw[:] = data.view(np.uint8)
    back = np.empty_like(data)
    raw_back = page_aligned(NBYTES)
    d = tempfile.mkdtemp(prefix="h5flow-floor-", dir=directory)

    def posix_write(i: int) -> None:
        fd = os.open(f"{d}/{i}.raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, raw)
        finally:
            os.close(fd)

    def h5py_write(i: int) -> None:
        with h5py.File(f"{d}/{i}.h5", "w", libver=("v110", "latest")) as f:
            f.create_dataset("x", data=data)

    def posix_read(i: int) -> None:
        with open(f"{d}/{i}.raw", "rb", buffering=0) as f:
            f.readinto(raw_back)

    def h5py_read(i: int) -> None:
        with h5py.File(f"{d}/{i}.h5", "r") as f:
            f["x"].read_direct(back)

    try:
        for name, fn in [("posix write", posix_write), ("h5py write", h5py_write), ("posix read", posix_read),
                         ("h5py read", h5py_read)]:
            med, low = timed(fn)
            print(f"{name:12s} median {med:.2f} min {low:.2f} ms ({NBYTES >> 20} MiB, {TRIES} tries)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/shm")
