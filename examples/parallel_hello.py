"""The smallest parallel h5py program on h5flow's stack.

    source build/stack.env && mpiexec -n 4 python examples/parallel_hello.py /tmp/hello.h5

Every rank writes its own row of one shared dataset (collectively), then rank 0 prints the file.
"""

import sys

import h5py
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
path = sys.argv[1] if len(sys.argv) > 1 else "hello.h5"
with h5py.File(path, "w", driver="mpio", comm=comm) as f:
    dset = f.create_dataset("rows", shape=(comm.size, 4), dtype="i4")
    with dset.collective:
        dset[comm.rank] = np.full(4, comm.rank)
if comm.rank == 0:
    with h5py.File(path, "r") as f:
        print(f["rows"][...])
