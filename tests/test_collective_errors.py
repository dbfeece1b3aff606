"""Errors are collective in the Python API: an exception on one rank ends the step (or the stream) on every
rank with one error naming the failing rank and its reason, instead of the other ranks waiting for ever in
a collective call. Producer and consumer side, hdf5 and socket."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TRANSPORTS = [pytest.param({"heartbeat": 0.5}, id="hdf5"), pytest.param({"type": "socket", "heartbeat": 0.5},
                                                                        id="socket")]


def _outcome(comm, fn) -> str:  # noqa: ANN001
    """Run ``fn``; every rank's error message (or "") gathered on every rank."""
    from h5flow.transports.base import TransportError

    try:
        fn()
        mine = ""
    except TransportError as e:
        mine = f"{type(e).__name__}: {e}"
    return comm.allgather(mine)


@pytest.mark.mpi(n=2, timeout=60)
@pytest.mark.parametrize("settings", TRANSPORTS)
def test_producer_offset_off_by_one_on_the_last_rank_fails_every_rank(comm, mpi_tmp_path: Path,
                                                                      settings: dict) -> None:
    import h5flow

    def produce() -> None:
        with h5flow.open(str(mpi_tmp_path / "s"), "w", comm=comm, **settings) as s:
            for t in range(3):
                with s.step(t) as st:
                    off = 10 * comm.rank + (1 if t == 1 and comm.rank == comm.size - 1 else 0)
                    st.write("T", np.full(10, t, dtype=np.float64), offset=(off,), global_shape=(20,))

    errors = _outcome(comm, produce)
    want = "RankFailed: producer rank 1 failed: ValueError: write('T'): axis 0: the piece covers [11, 21) but the " \
           "global array has 20 there"
    assert all(e.startswith(want) for e in errors), errors


@pytest.mark.mpi(n=2, timeout=60)
@pytest.mark.parametrize("settings", TRANSPORTS)
def test_producer_rank_raising_between_steps_fails_every_rank(comm, mpi_tmp_path: Path, settings: dict) -> None:
    """Outside a step: the failing rank leaves the stream's ``with`` block; rank 0 is in the next step."""
    import h5flow

    def produce() -> None:
        with h5flow.open(str(mpi_tmp_path / "s"), "w", comm=comm, **settings) as s:
            for t in range(3):
                if t == 1 and comm.rank == 1:
                    raise RuntimeError("the simulation diverged")
                with s.step(t) as st:
                    st.write("T", np.zeros(10), offset=(10 * comm.rank,), global_shape=(20,))

    errors = _outcome(comm, produce)
    assert all(e == "RankFailed: producer rank 1 failed: RuntimeError: the simulation diverged" for e in errors), \
        errors


@pytest.mark.mpi(n=3, timeout=90)
@pytest.mark.parametrize("settings", TRANSPORTS)
def test_consumer_read_error_on_one_rank_fails_every_consumer_rank(comm, mpi_tmp_path: Path,
                                                                   settings: dict) -> None:
    """1 producer, 2 consumer ranks; consumer rank 1 reads an array the step does not have at step 1."""
    import h5flow
    from h5flow.transports.base import TransportError

    producer = comm.rank == 0
    sub = comm.Split(0 if producer else 1, comm.rank)
    name = str(mpi_tmp_path / "s")
    if producer:
        ended = ""
        try:
            with h5flow.open(name, "w", comm=sub, **settings) as s:
                for t in range(3):
                    with s.step(t) as st:
                        st.write("T", np.full(20, t, dtype=np.float64))
        except TransportError as e:
            ended = str(e)  # its consumers' failure is theirs: what is tested is that it ends, saying so
        comm.Barrier()
        if settings.get("type") == "socket":  # steps in memory: the group that left on an error is dropped
            assert "without being taken: steps 1-2" in ended and "it closed its reader after step 0 on an error: " \
                "consumer rank 1 failed: KeyError" in ended, ended
        return
    seen: list[int] = []

    def consume() -> None:
        with h5flow.open(name, "r", comm=sub, **settings) as s:
            for st in s.steps(timeout=30):
                wanted = "nope" if st.step == 1 and sub.rank == 1 else "T"
                assert all((p.data == st.step).all() for p in st.read(wanted))
                seen.append(st.step)

    errors = _outcome(sub, consume)
    comm.Barrier()
    want = "RankFailed: consumer rank 1 failed: KeyError: \"step 1 has no array 'nope'; arrays: T\""
    assert errors == [want, want], errors
    assert seen == [0, 1] if sub.rank == 0 else seen == [0], seen


@pytest.mark.mpi(n=3, timeout=90)
def test_h5flow_consume_loop_fails_every_consumer_rank_with_the_reason(comm, mpi_tmp_path: Path) -> None:
    """The runner's consumer loop closes its reader in a ``finally``: the analysis error of one rank reaches
    the other consumer rank, which would otherwise release the step as if it had been analysed."""
    import h5flow
    from h5flow.config import AnalysisConfig, SenseiConfig
    from h5flow.runner import consume
    from h5flow.transports.base import TransportError

    producer = comm.rank == 0
    sub = comm.Split(0 if producer else 1, comm.rank)
    name = str(mpi_tmp_path / "s")
    if producer:
        with h5flow.open(name, "w", comm=sub, heartbeat=0.5) as s:
            for t in range(3):
                with s.step(t) as st:
                    st.write("T", np.full((2, 4), t, dtype=np.float64))
        comm.Barrier()
        return
    script = mpi_tmp_path / "bad.py"
    if sub.rank == 0:
        script.write_text("from mpi4py import MPI\n"
                          "def execute(step):\n"
                          "    if step.step == 1 and MPI.COMM_WORLD.rank == 2:\n"
                          "        raise ZeroDivisionError('the analysis divided by zero')\n")
    sub.Barrier()
    cfg = SenseiConfig(transports=[h5flow.config.TransportConfig.of("hdf5", name, heartbeat=0.5)],
                       analyses=[AnalysisConfig.of("python", script=str(script))])
    try:
        consume(sub, cfg, timeout=30, quiet=True)
        mine = ""
    except (TransportError, ZeroDivisionError) as e:
        mine = str(e)
    errors = sub.allgather(mine)
    comm.Barrier()
    assert errors == ["consumer rank 1 failed: ZeroDivisionError: the analysis divided by zero"] * 2, errors
