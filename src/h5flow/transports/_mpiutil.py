"""MPI helpers shared by transports."""

from __future__ import annotations

from typing import Any

from h5flow._mpi import sleepy_wait

__all__ = ["bcast_from_root", "sleepy_wait"]


def bcast_from_root(comm: Any, value: Any) -> Any:
    """Broadcast ``value`` from rank 0 after a :func:`sleepy_wait` (so waiting ranks do not spin)."""
    sleepy_wait(comm)
    return comm.bcast(value, root=0)
