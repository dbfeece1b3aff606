"""h5flow._mpi: collectives that wait in sched_yield/sleep instead of MPICH's busy poll.

They replace comm.allgather/gather/bcast in the query and index layers (4 ranks on 2 cores: a 1 % query's
hit gather took 610 ms with the blocking allgather, 14-21 ms with these; docs/QUERY.md "Parallel"). Here:
they give exactly what mpi4py's blocking collectives give, in rank order, for small, empty, uneven and
multi-MiB objects, with any root.
"""

from __future__ import annotations

import numpy as np
import pytest


def _payload(rank: int) -> dict:
    rng = np.random.default_rng(rank)
    # uneven sizes: rank 1 sends ~3 MiB (several rendezvous messages), rank 0 an empty array
    n = {0: 0, 1: 400_000}.get(rank, 1000 * (rank + 1))
    return {"rank": rank, "a": rng.random(n), "s": "x" * rank, "none": None}


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@pytest.mark.mpi(n=3)
def test_sleepy_collectives_equal_mpi4pys(comm) -> None:
    from h5flow._mpi import sleepy_allgather, sleepy_bcast, sleepy_gather, sleepy_wait

    mine = _payload(comm.rank)
    want = comm.allgather(mine)
    got = sleepy_allgather(comm, mine)
    assert len(got) == comm.size and all(_same(g, w) for g, w in zip(got, want))
    for root in range(comm.size):
        g = sleepy_gather(comm, mine, root=root)
        if comm.rank == root:
            assert g is not None and all(_same(x, w) for x, w in zip(g, want))
        else:
            assert g is None
        b = sleepy_bcast(comm, mine if comm.rank == root else "not the root's", root=root)
        assert _same(b, want[root])
    sleepy_wait(comm)


@pytest.mark.mpi(n=3)
def test_sleepy_collectives_at_the_inline_slot_boundary(comm) -> None:
    """Objects up to the first round's inline slot travel in one collective, larger ones in a second: every
    mix of sizes around the boundary (all inline, one rank over by a byte, all over) gives mpi4py's answer."""
    import pickle

    from h5flow._mpi import _HEAD, _SLOT, sleepy_allgather, sleepy_bcast, sleepy_gather

    def sized(n: int) -> bytes:  # a bytes object whose pickle is exactly n bytes
        base = len(pickle.dumps(b"", protocol=pickle.HIGHEST_PROTOCOL))
        obj = bytes([65 + comm.rank]) * max(0, n - base)
        while obj and len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)) > n:
            obj = obj[:-1]
        return obj

    inline = _SLOT - _HEAD
    for sizes in ([10, 10, 10], [inline, inline, inline], [inline, inline + 1, 5], [inline + 1] * 3,
                  [0, 3 * _SLOT, inline]):
        mine = sized(sizes[comm.rank])
        if sizes[comm.rank] >= 300:  # exact there (a short bytes pickle has a 15-byte minimum)
            assert len(pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL)) == sizes[comm.rank]
        want = comm.allgather(mine)
        assert sleepy_allgather(comm, mine) == want, sizes
        for root in range(comm.size):
            g = sleepy_gather(comm, mine, root=root)
            assert g == (want if comm.rank == root else None), (sizes, root)
            assert sleepy_bcast(comm, mine if comm.rank == root else None, root=root) == want[root], (sizes, root)
