"""A small MPI program for the trace notebook: every rank writes its slab of a shared field for a few steps,
first collectively from float64 arrays into a float64 dataset, then (the mistake) into a float32 one.

    mpiexec -n 4 python shared_field.py OUT.h5
"""

from __future__ import annotations

import sys

import h5py
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
n, steps = 96, 4
lo, hi = comm.rank * n // comm.size, (comm.rank + 1) * n // comm.size

with h5py.File(sys.argv[1], "w", driver="mpio", comm=comm, libver=("v110", "latest"),
               alignment_threshold=65536, alignment_interval=1 << 20) as f:
    good = f.create_dataset("field_f8", (steps, n, n, n), dtype="f8")
    bad = f.create_dataset("field_f4", (steps, n, n, n), dtype="f4")
    for step in range(steps):
        block = np.full((hi - lo, n, n), step + comm.rank / 10.0)  # float64, numpy's default
        for dset in (good, bad):
            with dset.collective:
                dset[step, lo:hi] = block
    f.attrs["steps"] = steps
with h5py.File(sys.argv[1], "r", driver="mpio", comm=comm) as f:
    ok = bool(np.all(f["field_f8"][steps - 1, lo:hi] == steps - 1 + comm.rank / 10.0))
if not comm.allreduce(ok, op=MPI.LAND):
    sys.exit("shared_field: data read back differs from data written")
