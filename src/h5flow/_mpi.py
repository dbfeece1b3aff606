"""MPI collectives that sleep instead of spinning, for every layer (transports, queries, indexes).

MPICH busy-polls inside blocking collectives. With more ranks than cores (4 ranks on a 2-core node), a rank
that waits spins through its whole time slice while the rank it waits for is descheduled, and a collective
that needs several handshakes (a large allgather: sizes, then a rendezvous per message) pays a time slice
for each: a 1 % query's hit gather took 2.1 s at 4 ranks on 2 cores against 18 ms at 2 ranks. These
helpers start the nonblocking collective and test it between short sleeps, so a waiting rank gives its
core to the ranks doing the work.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

import numpy as np

_PERIOD = 0.0005  # seconds between tests of a pending request


def _sleep_until_done(req: Any, period: float = _PERIOD) -> None:
    while not req.Test():
        time.sleep(period)


def _yield_until_done(req: Any) -> None:
    """Test between ``sched_yield`` calls: a core another runnable process needs goes to it, an idle
    one keeps the transfer going (a large message needs many tests to progress)."""
    while not req.Test():
        os.sched_yield()


def sleepy_wait(comm: Any, period: float = _PERIOD) -> None:
    """A barrier that sleeps instead of spinning."""
    if comm.size == 1:
        return
    _sleep_until_done(comm.Ibarrier(), period)


def sleepy_allgather(comm: Any, obj: Any) -> list[Any]:
    """``comm.allgather(obj)`` (every rank gets every rank's picklable object, in rank order) with the
    waiting done in sleeps: the pickled sizes, then the bytes, each by a nonblocking collective."""
    if comm.size == 1:
        return [obj]
    from mpi4py import MPI

    raw = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    sizes = np.zeros(comm.size, dtype=np.int64)
    _yield_until_done(comm.Iallgather(np.array([raw.size], dtype=np.int64), sizes))
    if int(sizes.max()) > np.iinfo(np.int32).max:
        return comm.allgather(obj)  # counts beyond MPI's int: the blocking path handles them in pieces
    counts = sizes.astype(np.int32)
    displs = np.zeros(comm.size, dtype=np.int32)
    np.cumsum(counts[:-1], out=displs[1:])
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    _yield_until_done(comm.Iallgatherv(raw, [out, counts, displs, MPI.BYTE]))
    return [pickle.loads(out[displs[i]:displs[i] + counts[i]].tobytes()) for i in range(comm.size)]


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def sleepy_gather(comm: Any, obj: Any, root: int = 0) -> list[Any] | None:
    """``comm.gather(obj, root)``: the root gets every rank's object in rank order, the others None."""
    if comm.size == 1:
        return [obj]
    from mpi4py import MPI

    raw = _pickled(obj)
    sizes = np.zeros(comm.size, dtype=np.int64)
    _yield_until_done(comm.Iallgather(np.array([raw.size], dtype=np.int64), sizes))
    if int(sizes.sum()) > np.iinfo(np.int32).max:
        return comm.gather(obj, root=root)
    counts = sizes.astype(np.int32)
    displs = np.zeros(comm.size, dtype=np.int32)
    np.cumsum(counts[:-1], out=displs[1:])
    out = np.empty(int(sizes.sum()) if comm.rank == root else 0, dtype=np.uint8)
    _yield_until_done(comm.Igatherv(raw, [out, counts, displs, MPI.BYTE] if comm.rank == root else None, root=root))
    if comm.rank != root:
        return None
    return [pickle.loads(out[displs[i]:displs[i] + counts[i]].tobytes()) for i in range(comm.size)]


def sleepy_bcast(comm: Any, obj: Any, root: int = 0) -> Any:
    """``comm.bcast(obj, root)``: every rank gets the root's object."""
    if comm.size == 1:
        return obj
    raw = _pickled(obj) if comm.rank == root else None
    size = np.array([raw.size if raw is not None else 0], dtype=np.int64)
    _yield_until_done(comm.Ibcast(size, root=root))
    if int(size[0]) > np.iinfo(np.int32).max:
        return comm.bcast(obj, root=root)
    buf = raw.copy() if raw is not None else np.empty(int(size[0]), dtype=np.uint8)
    _yield_until_done(comm.Ibcast(buf, root=root))
    return obj if comm.rank == root else pickle.loads(buf.tobytes())
