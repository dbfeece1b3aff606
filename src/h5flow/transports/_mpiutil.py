"""MPI helpers shared by transports."""

from __future__ import annotations

import time
from typing import Any


def sleepy_wait(comm: Any, period: float = 0.0005) -> None:
    """A barrier that sleeps instead of spinning.

    MPICH busy-polls inside blocking collectives; ranks waiting there while rank 0 polls the file
    system (or waits on backpressure) would burn a core each, which on an oversubscribed node starves
    the very processes they are waiting for.
    """
    if comm.size == 1:
        return
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(period)


def bcast_from_root(comm: Any, value: Any) -> Any:
    """Broadcast ``value`` from rank 0 after a :func:`sleepy_wait` (so waiting ranks do not spin)."""
    sleepy_wait(comm)
    return comm.bcast(value, root=0)
