"""Producer and consumer of the transport contract suite, on the public API (``h5flow.open``).

    python contract_actor.py produce CASE NAME [--steps N] [--run R] [--sleep S] [--raise-rank R --raise-at S]
                                               [--disagree-at S] [--settings JSON]
    python contract_actor.py consume CASE NAME [--steps N] [--run R] [--timeout T] [--raise-rank R]
                                               [--raise-at S] [--exit-at S] [--settings JSON]

CASE is a :data:`h5flow.testing.matrix.MATRIX` name, NAME the stream's name; ``--settings`` adds keywords
(``heartbeat``, ``queue_limit``, ``dead_consumer``, ...; those the transport lacks are left out). Every
producer rank writes its rows of one 2-D float64 array ``x`` per step (rank r: ``3 + r`` rows of 5, the
values a function of run, step and global position, so a consumer knows every element it must get) and its
slab of a 3-D int32 array ``d`` split along the last axis.

Output lines: ``PID <role> <rank> <pid>`` (every rank), ``PUBLISHED <step>`` (producer rank 0), ``GOT <step>``
(consumer rank 0, once every consumer rank checked its pieces), ``END <status>`` (consumer rank 0), and on
stderr ``FAILED rank <r>: <type>: <message>`` for an exception that ends a rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_PLUGINS = Path(__file__).resolve().parent.parent / "plugins"
if str(_PLUGINS) not in sys.path:
    sys.path.insert(0, str(_PLUGINS))

COLS = 5


def rows_of(rank: int) -> int:
    return 3 + rank


def global_rows(producers: int) -> int:
    return sum(rows_of(r) for r in range(producers))


def expected(run: int, step: int, producers: int) -> dict[str, np.ndarray]:
    """The whole arrays of ``step``: ``x`` (element (i, j) is ``run * 1e6 + step * 1e3 + i * COLS + j``) and
    ``d`` (3 x 4 x (2 * producers + 1) int32)."""
    g = global_rows(producers)
    dshape = (3, 4, 2 * producers + 1)
    return {"x": (run * 1e6 + step * 1e3 + np.arange(g * COLS, dtype=np.float64)).reshape(g, COLS),
            "d": (np.arange(np.prod(dshape), dtype=np.int32) + 100000 * run + 1000 * step).reshape(dshape)}


def slab(n: int, parts: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share of ``n`` items over ``parts`` ranks."""
    q, r = divmod(n, parts)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def keywords(case_name: str, settings: dict[str, Any]) -> dict[str, Any]:
    from h5flow.testing.matrix import case

    c = case(case_name)
    c.register()
    heartbeat = settings.pop("heartbeat", None)
    return c.keywords(heartbeat, **settings)


def produce(comm: Any, name: str, kw: dict[str, Any], steps: int, run: int = 0, sleep: float = 0.0,
            raise_rank: int = -1, raise_at: int = -1, disagree_at: int = -1,
            published: Any = None) -> None:
    """One producer rank: ``steps`` steps of ``x``; rank ``raise_rank`` raises inside step ``raise_at``; the last
    rank gives another global shape at step ``disagree_at``."""
    import h5flow

    start = sum(rows_of(r) for r in range(comm.rank))
    g = global_rows(comm.size)
    with h5flow.open(name, "w", comm=comm, **kw) as s:
        for t in range(steps):
            whole = expected(run, t, comm.size)
            with s.step(t, time=0.5 * t) as st:
                if comm.rank == raise_rank and t == raise_at:
                    raise RuntimeError(f"contract: producer rank {comm.rank} raises inside step {t}")
                shape = (g + 1, COLS) if t == disagree_at and comm.rank == comm.size - 1 else (g, COLS)
                st.write("x", whole["x"][start:start + rows_of(comm.rank)], offset=(start, 0), global_shape=shape)
                z0, z1 = slab(whole["d"].shape[2], comm.size, comm.rank)
                st.write("d", whole["d"][:, :, z0:z1], offset=(0, 0, z0), global_shape=whole["d"].shape)
            if published is not None and comm.rank == 0:
                published(t)
            if sleep:
                time.sleep(sleep)


@dataclass
class Received:
    steps: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    status: str = ""


def consume(comm: Any, name: str, kw: dict[str, Any], producers: int, run: int = 0, timeout: float = 30.0,
            raise_rank: int = -1, raise_at: int = -1, exit_at: int = -1, got: Any = None) -> Received:
    """One consumer rank: every step's pieces checked element by element against :func:`expected`, and the
    pieces of all consumer ranks together checked to cover the array exactly once. Rank ``raise_rank`` raises
    (or calls ``sys.exit(0)``) once it has checked step ``raise_at`` (``exit_at``)."""
    import h5flow

    out = Received()
    with h5flow.open(name, "r", comm=comm, **kw) as s:
        if comm.rank == 0:
            print("OPEN", flush=True)  # the reader waits for the stream from here on
        for st in s.steps(timeout=timeout):
            if st.time != 0.5 * st.step:
                out.problems.append(f"step {st.step}: time {st.time}, written as {0.5 * st.step}")
            for arr, whole in expected(run, st.step, producers).items():
                covered = np.zeros(whole.shape, dtype=np.int64)
                share = st.read(arr)
                if tuple(share.global_shape) != whole.shape:
                    out.problems.append(f"step {st.step} {arr}: global shape {share.global_shape} != {whole.shape}")
                else:
                    for p in share:
                        where = tuple(slice(o, o + n) for o, n in zip(p.offset, p.data.shape))
                        if p.data.dtype != whole.dtype or not np.array_equal(p.data, whole[where]):
                            out.problems.append(f"step {st.step} {arr}: piece at {p.offset} differs from what "
                                                "was written")
                        covered[where] += 1
                total = comm.allreduce(covered)
                if not (total == 1).all():
                    out.problems.append(f"step {st.step} {arr}: elements covered "
                                        f"{sorted(set(total.ravel().tolist()))} times, not once each")
            out.steps.append(st.step)
            if got is not None and comm.rank == 0:
                got(st.step)
            if comm.rank == raise_rank and st.step == raise_at:
                raise RuntimeError(f"contract: consumer rank {comm.rank} raises after step {st.step}")
            if comm.rank == raise_rank and st.step == exit_at:
                sys.exit(0)
        out.status = s.status
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["produce", "consume"])
    p.add_argument("case")
    p.add_argument("name")
    p.add_argument("--settings", default="{}")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--producers", type=int, default=1, help="consume: producer ranks (for the expected values)")
    p.add_argument("--run", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--raise-rank", type=int, default=-1)
    p.add_argument("--raise-at", type=int, default=-1)
    p.add_argument("--exit-at", type=int, default=-1)
    p.add_argument("--disagree-at", type=int, default=-1)
    a = p.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    print(f"PID {a.role} {comm.rank} {os.getpid()}", flush=True)
    kw = keywords(a.case, json.loads(a.settings))
    try:
        if a.role == "produce":
            produce(comm, a.name, kw, a.steps, a.run, a.sleep, a.raise_rank, a.raise_at, a.disagree_at,
                    published=lambda t: print(f"PUBLISHED {t}", flush=True))
            return 0
        got = consume(comm, a.name, kw, a.producers, a.run, a.timeout, a.raise_rank, a.raise_at, a.exit_at,
                      got=lambda t: print(f"GOT {t}", flush=True))
    except BaseException as e:  # noqa: BLE001 - reported, then raised on as a user's program would
        if not isinstance(e, SystemExit):
            print(f"FAILED rank {comm.rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        raise
    for problem in got.problems:
        print(f"BAD rank {comm.rank}: {problem}", file=sys.stderr, flush=True)
    if comm.rank == 0:
        print(f"END {got.status}", flush=True)
    return 3 if got.problems else 0


if __name__ == "__main__":
    sys.exit(main())
