"""A user's own simulation streamed with h5flow: explicit 2-D heat equation, rows split over MPI ranks.

    mpiexec -n 2 python heat2d.py /tmp/heat --steps 20            # stream name (hdf5 transport)
    mpiexec -n 2 python heat2d.py heat.xml --steps 20             # or a SENSEI-style XML file

Each step every rank publishes its rows of ``temperature`` with ``st.write``; consumers on any number of
ranks read their share (``consume.py``, or ``h5flow consume`` with ``<analysis type="python">``).
"""

from __future__ import annotations

import argparse

import numpy as np

ALPHA = 0.2  # diffusion number (stable below 0.25)


def initial(ny: int, nx: int) -> np.ndarray:
    """A hot square in a cold plate."""
    t = np.zeros((ny, nx))
    t[ny // 4 : 3 * ny // 4, nx // 4 : 3 * nx // 4] = 100.0
    return t


def rows(ny: int, size: int, rank: int) -> tuple[int, int]:
    q, r = divmod(ny, size)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def stencil(t: np.ndarray) -> np.ndarray:
    """One explicit step on the interior of ``t`` (one halo row above and below, fixed 0 at x edges)."""
    new = t[1:-1].copy()
    new[:, 1:-1] += ALPHA * (t[:-2, 1:-1] + t[2:, 1:-1] + t[1:-1, :-2] + t[1:-1, 2:] - 4.0 * t[1:-1, 1:-1])
    return new


def serial(ny: int, nx: int, steps: int) -> list[np.ndarray]:
    """The whole plate at every step, in one process (the reference the tests compare with)."""
    t, out = initial(ny, nx), []
    for _ in range(steps):
        t = stencil(np.pad(t, ((1, 1), (0, 0))))
        out.append(t)
    return out


def main() -> None:
    from mpi4py import MPI

    import h5flow

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stream", help="an XML configuration, or the stream's name (hdf5 transport)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--shape", type=int, nargs=2, default=(64, 48), metavar=("NY", "NX"))
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    ny, nx = args.shape
    y0, y1 = rows(ny, comm.size, comm.rank)
    t = np.pad(initial(ny, nx)[y0:y1], ((1, 1), (0, 0)))  # own rows plus a halo row on each side
    up = comm.rank - 1 if comm.rank else MPI.PROC_NULL
    down = comm.rank + 1 if comm.rank + 1 < comm.size else MPI.PROC_NULL
    with h5flow.open(args.stream, "w", comm=comm) as s:
        for step in range(args.steps):
            comm.Sendrecv(t[1].copy(), dest=up, recvbuf=t[-1:], source=down)  # halo exchange
            comm.Sendrecv(t[-2].copy(), dest=down, recvbuf=t[:1], source=up)
            if comm.rank == 0:
                t[0] = 0.0
            if comm.rank == comm.size - 1:
                t[-1] = 0.0
            t[1:-1] = stencil(t)
            with s.step(step, time=step * ALPHA) as st:
                st.write("temperature", t[1:-1], offset=(y0, 0), global_shape=(ny, nx))


if __name__ == "__main__":
    main()
