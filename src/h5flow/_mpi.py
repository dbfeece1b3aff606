"""MPI collectives that sleep instead of spinning, for every layer (transports, queries, indexes).

MPICH busy-polls inside blocking collectives. With more ranks than cores (4 ranks on a 2-core node), a rank
that waits spins through its whole time slice while the rank it waits for is descheduled, and a collective
that needs several handshakes (a large allgather: sizes, then a rendezvous per message) pays a time slice
for each: a 1 % query's hit gather took 2.1 s at 4 ranks on 2 cores against 18 ms at 2 ranks. These
helpers start the nonblocking collective and test it between short sleeps, so a waiting rank gives its
core to the ranks doing the work.

The object collectives (``sleepy_allgather``, ``sleepy_gather``, ``sleepy_bcast``) carry each rank's
pickled object in one fixed-size slot (``_SLOT`` bytes, its size in front), so the small messages the
transports agree on every step (step numbers, block lists, paths) cost one collective, not a size round
followed by a data round; only objects larger than a slot take the second round.
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


_SLOT = 2048  # bytes per rank carried by the first (fixed-size) round; larger objects take a second one
_HEAD = 8  # the pickled size, in front of the inline bytes


def _settle(req: Any) -> None:
    """Wait for a small nonblocking collective: ``sched_yield`` for its first 0.1 ms (cores to spare: it is
    done at once), then 0.25 ms sleeps (an oversubscribed node: the ranks it waits for need the core).
    Measured with 8 ranks on 2 cores, 3 ms of compute between collectives: a barrier followed by a
    blocking allgather cost 63 ms per step, a blocking allgather 51 ms, one fixed-slot ``Iallgather``
    waited for this way 11 ms."""
    if req.Test():
        return
    soon = time.perf_counter() + 1e-4
    while time.perf_counter() < soon:
        os.sched_yield()
        if req.Test():
            return
    while not req.Test():
        time.sleep(_PERIOD / 2)


def _slot(raw: np.ndarray) -> np.ndarray:
    """``raw``'s size and, when they fit, its bytes, in one ``_SLOT``-byte row."""
    row = np.zeros(_SLOT, dtype=np.uint8)
    row[:_HEAD] = np.frombuffer(np.int64(raw.size).tobytes(), dtype=np.uint8)
    if raw.size <= _SLOT - _HEAD:
        row[_HEAD:_HEAD + raw.size] = raw
    return row


def _slot_size(row: np.ndarray) -> int:
    return int(row[:_HEAD].view(np.int64)[0])


def _slot_gather_rounds(comm: Any, raw: np.ndarray, root: int | None) -> list[bytes] | None:
    """Every rank's ``raw`` bytes at ``root`` (``None``: at every rank), in rank order; ``None`` on the
    other ranks. One fixed-slot ``Iallgather`` carries every object of at most ``_SLOT - 8`` bytes; the
    larger ones follow in one ``I(all)gatherv`` (every rank knows every size from the first round)."""
    from mpi4py import MPI

    rows = np.empty((comm.size, _SLOT), dtype=np.uint8)
    _settle(comm.Iallgather(_slot(raw), rows))
    sizes = np.ascontiguousarray(rows[:, :_HEAD]).view(np.int64)[:, 0]
    big = sizes > _SLOT - _HEAD
    got = root is None or comm.rank == root
    out: list[bytes | None] = [rows[i, _HEAD:_HEAD + int(sizes[i])].tobytes() if got and not big[i] else None
                               for i in range(comm.size)]
    if big.any():
        counts = np.where(big, sizes, 0)
        if int(counts.sum()) > np.iinfo(np.int32).max:
            # the same verdict on every rank (every size is known): the callers fall back to mpi4py together
            raise OverflowError("more than 2 GiB in one collective")
        counts = counts.astype(np.int32)
        displs = np.zeros(comm.size, dtype=np.int32)
        np.cumsum(counts[:-1], out=displs[1:])
        mine = raw if big[comm.rank] else np.empty(0, dtype=np.uint8)
        buf = np.empty(int(counts.sum()) if got else 0, dtype=np.uint8)
        spec = [buf, counts, displs, MPI.BYTE]
        if root is None:
            _yield_until_done(comm.Iallgatherv(mine, spec))
        else:
            _yield_until_done(comm.Igatherv(mine, spec if got else None, root=root))
        if got:
            for i in np.flatnonzero(big):
                out[i] = buf[displs[i]:displs[i] + counts[i]].tobytes()
    return [b for b in out if b is not None] if got else None


def sleepy_allgather(comm: Any, obj: Any) -> list[Any]:
    """``comm.allgather(obj)`` (every rank gets every rank's picklable object, in rank order) with the
    waiting done in yields and sleeps: small objects in one fixed-slot nonblocking collective, larger ones
    in a second."""
    if comm.size == 1:
        return [obj]
    raw = _pickled(obj)
    try:
        parts = _slot_gather_rounds(comm, raw, None)
    except OverflowError:
        return comm.allgather(obj)
    assert parts is not None
    return [pickle.loads(b) for b in parts]


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def sleepy_gather(comm: Any, obj: Any, root: int = 0) -> list[Any] | None:
    """``comm.gather(obj, root)``: the root gets every rank's object in rank order, the others None."""
    if comm.size == 1:
        return [obj]
    raw = _pickled(obj)
    try:
        parts = _slot_gather_rounds(comm, raw, root)
    except OverflowError:
        return comm.gather(obj, root=root)
    return None if parts is None else [pickle.loads(b) for b in parts]


def sleepy_bcast(comm: Any, obj: Any, root: int = 0) -> Any:
    """``comm.bcast(obj, root)``: every rank gets the root's object; one fixed-slot ``Ibcast`` when it
    is small, a second for the rest of a larger one."""
    if comm.size == 1:
        return obj
    raw = _pickled(obj) if comm.rank == root else np.empty(0, dtype=np.uint8)
    row = _slot(raw) if comm.rank == root else np.empty(_SLOT, dtype=np.uint8)
    _settle(comm.Ibcast(row, root=root))
    size = _slot_size(row)
    if size > np.iinfo(np.int32).max:
        return comm.bcast(obj, root=root)
    if size <= _SLOT - _HEAD:
        return obj if comm.rank == root else pickle.loads(row[_HEAD:_HEAD + size].tobytes())
    buf = raw.copy() if comm.rank == root else np.empty(size, dtype=np.uint8)
    _yield_until_done(comm.Ibcast(buf, root=root))
    return obj if comm.rank == root else pickle.loads(buf.tobytes())
