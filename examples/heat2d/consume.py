"""Read the heat example's stream on any number of ranks and print the plate's mean and maximum per step.

    mpiexec -n 1 python consume.py /tmp/heat
"""

from __future__ import annotations

import sys

from mpi4py import MPI

import h5flow

comm = MPI.COMM_WORLD
with h5flow.open(sys.argv[1], "r", comm=comm) as s:
    for st in s.steps(timeout=60):
        share = st.read("temperature")  # this rank's rows
        total = comm.allreduce(sum(float(p.data.sum()) for p in share))
        peak = comm.allreduce(max((float(p.data.max()) for p in share), default=float("-inf")), op=MPI.MAX)
        if comm.rank == 0:
            n = share.global_shape[0] * share.global_shape[1]
            print(f"step {st.step} time {st.time:.2f} mean {total / n:.6f} max {peak:.6f}", flush=True)
