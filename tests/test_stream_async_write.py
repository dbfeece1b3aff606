"""The hdf5 producer's write-behind (``async_write``, the default): ``end_step`` copies the rank's rows and
returns; a write thread writes and publishes the step. What the simulation does to its arrays after
``end_step`` must never reach the step; an error on the write thread must stop the stream and reach the
producer at its next call; nothing is published half-written."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.matrix import HDF5_LAYOUTS

LAYOUTS = list(HDF5_LAYOUTS)


def _config(tmp_path: Path, layout: str, **settings: object) -> object:
    from h5flow.config import TransportConfig

    return TransportConfig.of(filename=str(tmp_path / "s"), heartbeat=2.0, queue_limit=0, layout=layout,
                              keep="all", **settings)


def _block(step: int, field: np.ndarray) -> object:
    from h5flow.model import ImageBlock

    blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 5, 0, 3, 0, 2), 0)
    blk.arrays("cell")["data"] = field
    return blk


def _read_steps(cfg: object, steps: int) -> list[np.ndarray]:
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader

    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    out = []
    try:
        for _ in range(steps):
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            (blk,) = res.step.blocks("mesh", ["data"], "cell")
            out.append(np.array(blk.arrays("cell")["data"]))
            reader.release()
    finally:
        reader.close()
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_arrays_changed_after_end_step_do_not_reach_the_step(tmp_path: Path, layout: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation overwrites its array the moment end_step returns (its next time step), while the
    write thread is held back: every step still holds the values it had at end_step."""
    from mpi4py import MPI

    from h5flow.transports import open_writer
    from h5flow.transports.hdf5.writer import Hdf5Writer

    slow = Hdf5Writer._write_step

    def held_back(self: Hdf5Writer, *args: object, **kwargs: object) -> object:
        time.sleep(0.2)  # the simulation's thread runs first: without the copy it would overwrite the rows
        return slow(self, *args, **kwargs)

    monkeypatch.setattr(Hdf5Writer, "_write_step", held_back)
    cfg = _config(tmp_path, layout)
    field = np.zeros((3, 4, 6))
    expected = []
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        assert w._async
        for s in range(3):
            field[...] = np.arange(field.size).reshape(field.shape) + 100.0 * s
            expected.append(field.copy())
            w.begin_step(s, float(s))
            w.put("mesh", _block(s, field))
            assert w.end_step().published
            field[...] = -1.0  # the simulation's next step begins in place
    got = _read_steps(cfg, 3)
    for s in range(3):
        np.testing.assert_array_equal(got[s].reshape(expected[s].shape), expected[s])


def test_copies_are_reused_from_step_to_step(tmp_path: Path) -> None:
    """The write thread's copy of a rank's rows is one buffer per block and dataset, kept from step to step
    (a producer's memory must not grow with the number of steps, nor fault in new pages every step)."""
    from mpi4py import MPI

    from h5flow.transports import open_writer

    cfg = _config(tmp_path, "n-n")
    field = np.ones((3, 4, 6))
    seen = []
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        for s in range(3):
            w.begin_step(s, float(s))
            w.put("mesh", _block(s, field * s))
            w.end_step()
            w.flush()
            seen.append({k: id(v) for k, v in w._buffers.items()})
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2]


@pytest.mark.parametrize("async_write", [True, False])
def test_flush_publishes_and_sync_publishes_in_end_step(tmp_path: Path, async_write: bool) -> None:
    from mpi4py import MPI

    from h5flow.transports import open_writer
    from h5flow.transports.hdf5.staging import Staging

    cfg = _config(tmp_path, "n-n", async_write=async_write)
    staging = Staging(cfg.filename)
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        assert w._async is async_write
        w.begin_step(0, 0.0)
        w.put("mesh", _block(0, np.ones((3, 4, 6))))
        w.end_step()
        if not async_write:  # written and published inside end_step
            assert staging.step_path(0).is_dir()
            assert "publish" in w.events[-1]
        w.flush()
        assert staging.step_path(0).is_dir()
        assert {"copy" if async_write else "stage", "write", "publish"} <= set(w.events[-1]["phases"])


def test_an_error_on_the_write_thread_stops_the_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1's write fails on the write thread: it is never published, the stream's index says why (X),
    the producer's next end_step raises it (and close after it), and a consumer gets step 0 then the error."""
    from mpi4py import MPI

    from h5flow.transports import StepStatus, TransportError, open_reader, open_writer
    from h5flow.transports.hdf5.staging import Staging
    from h5flow.transports.hdf5.writer import Hdf5Writer

    good = Hdf5Writer._write_per_rank

    def failing(self: Hdf5Writer, path: object, meta: object, staged: object) -> None:
        if meta.step == 1:
            raise OSError(5, "Input/output error (injected)")
        good(self, path, meta, staged)

    monkeypatch.setattr(Hdf5Writer, "_write_per_rank", failing)
    cfg = _config(tmp_path, "n-n")
    staging = Staging(cfg.filename)
    w = open_writer(MPI.COMM_SELF.Dup(), cfg)
    with pytest.raises(TransportError, match="step 1 was not published.*injected"):
        with w:
            for s in range(3):
                w.begin_step(s, float(s))
                w.put("mesh", _block(s, np.full((3, 4, 6), float(s))))
                assert w.end_step().published  # step 2's end_step raises step 1's error
    assert [e["step"] for e in w.events] == [0, 1]
    assert w.events[0]["published"] and not w.events[1]["published"]
    with pytest.raises(TransportError, match="injected"):
        w.flush()  # the stream stays stopped
    assert staging.step_path(0).is_dir()
    assert not staging.step_path(1).exists() and not staging.step_path(2).exists()
    assert not staging.tmp_step(1).exists()
    lines = staging.index.read_text().splitlines()
    assert lines[0].startswith("P 0 0 ") and lines[1].startswith("X ") and "injected" in lines[1]
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    try:
        res = reader.begin_step(10.0)
        assert res.status is StepStatus.OK and res.step.step == 0
        reader.release()
        res = reader.begin_step(10.0)
        assert res.status is StepStatus.ERROR and "injected" in res.reason
    finally:
        reader.close()


def test_async_write_in_xml(tmp_path: Path) -> None:
    from h5flow.xmlconfig import load

    for text, want in (("", True), (' async_write="false"', False), (' async_write="1"', True)):
        p = tmp_path / "c.xml"
        p.write_text(f'<sensei><transport type="hdf5" filename="{tmp_path / "s"}"{text}/></sensei>')
        assert load(p).transport().settings.async_write is want


@pytest.mark.mpi(n=3)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_simulation_collectives_beside_the_write_thread(comm, mpi_tmp_path: Path, layout: str) -> None:  # noqa: ANN001
    """Three producer ranks make their own collectives on their communicator (blocking reductions and
    broadcasts, and nonblocking reductions waited for in sleeps, as a simulation's time loop does) while
    their write threads publish the previous step with theirs: the write thread's are on a duplicate, so none
    is matched with the simulation's. Each step holds what every rank put, and the simulation's reductions
    give their own results."""
    from mpi4py import MPI

    from h5flow.transports import open_writer

    cfg = _config(mpi_tmp_path, layout)
    steps = 4
    with open_writer(comm, cfg) as w:
        # n-1 on several ranks writes inside end_step (its collective HDF5 calls hold the GIL: a write thread
        # there deadlocked this very loop, a simulation rank holding the GIL in allreduce)
        assert w._async is (layout != "n-1") and (w._wcomm is not comm) is w._async, w.async_off
        for s in range(steps):
            field = np.full((3, 4, 6), 1000.0 * s + comm.rank)
            w.begin_step(s, float(s))
            blk = _block(s, field)
            blk.block_id = comm.rank
            blk.extent = (0, 5, 0, 3, 3 * comm.rank, 3 * comm.rank + 2)
            w.put("mesh", blk)
            assert w.end_step().published
            field[...] = -1.0
            for k in range(30):  # the simulation's collectives while step s is written
                mine = np.array([comm.rank + k, 7 * comm.rank], dtype=np.int64)
                total = np.empty_like(mine)
                req = comm.Iallreduce(mine, total, op=MPI.SUM)
                while not req.Test():
                    time.sleep(0.0002)
                assert total.tolist() == [sum(range(comm.size)) + comm.size * k, 7 * sum(range(comm.size))], total
                assert comm.allreduce(comm.rank + k, op=MPI.SUM) == sum(range(comm.size)) + comm.size * k
                assert comm.bcast(("token", s, k) if comm.rank == 0 else None, root=0) == ("token", s, k)
    comm.Barrier()
    if comm.rank == 0:
        from h5flow.transports import StepStatus, open_reader

        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
        try:
            for s in range(steps):
                res = reader.begin_step(10.0)
                assert res.status is StepStatus.OK, res.reason
                for b in res.step.blocks("mesh", ["data"], "cell"):
                    np.testing.assert_array_equal(b.arrays("cell")["data"].ravel(), 1000.0 * s + b.block_id)
                reader.release()
        finally:
            reader.close()
    comm.Barrier()


@pytest.mark.parametrize("async_write", [True, False])
def test_the_write_thread_deletes_released_steps(tmp_path: Path, async_write: bool) -> None:
    """After publishing a step, producer rank 0's write thread deletes the steps every group released (time
    the simulation does not wait for), so the consumer, often the slower side, does not delete them inside its
    release; a step not released yet stays. Writing inside end_step leaves that to the consumer's idle time."""
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader, open_writer
    from h5flow.transports.hdf5.staging import Staging

    cfg = _config(tmp_path, "n-n", async_write=async_write)
    cfg.settings.keep = "released"
    staging = Staging(cfg.filename)
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
        try:
            for s in range(3):
                w.begin_step(s, float(s))
                w.put("mesh", _block(s, np.full((3, 4, 6), float(s))))
                w.end_step()
                w.flush()
                if s == 2:
                    break
                res = reader.begin_step(10.0)
                assert res.status is StepStatus.OK and res.step.step == s
                reader.release()  # one or two released steps: below the consumer's backlog, it deletes none
            assert staging.step_path(2).is_dir()  # published, not released
            assert staging.step_path(1).is_dir() is not async_write
            assert staging.step_path(0).is_dir() is not async_write
            assert ("collect" in w.events[-1]["phases"]) is async_write
            if async_write:  # renamed out of the stream at once, emptied by the ranks, removed a round later
                assert not any(staging.gc_path(s).joinpath("rank-00000.h5").exists() for s in (0, 1))
        finally:
            reader.close()
    assert not list(staging.root.glob(".step-*.gc")), "close removes what the write thread left"


@pytest.mark.mpi(n=3)
def test_every_rank_deletes_its_own_files_of_released_steps(comm, mpi_tmp_path: Path) -> None:  # noqa: ANN001
    """n-n on 3 ranks: a released step leaves the stream at once (renamed, never half-deleted in place) and each
    rank's write thread deletes its own file of it; nothing is left after close."""
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader, open_writer
    from h5flow.transports.hdf5.staging import Staging

    cfg = _config(mpi_tmp_path, "n-n")
    cfg.settings.keep = "released"
    staging = Staging(cfg.filename)
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg) if comm.rank == 0 else None
    with open_writer(comm, cfg) as w:
        for s in range(4):
            w.begin_step(s, float(s))
            blk = _block(s, np.full((3, 4, 6), 10.0 * s + comm.rank))
            blk.block_id = comm.rank
            blk.extent = (0, 5, 0, 3, 3 * comm.rank, 3 * comm.rank + 2)
            w.put("mesh", blk)
            w.end_step()
            w.flush()
            if reader is not None and s < 3:
                res = reader.begin_step(10.0)
                assert res.status is StepStatus.OK and res.step.step == s
                got = sorted(float(b.arrays("cell")["data"].ravel()[0]) for b in res.step.blocks("mesh", ["data"]))
                assert got == [10.0 * s + r for r in range(comm.size)]
                reader.release()
            comm.Barrier()
        w.flush()
        comm.Barrier()
        if comm.rank == 0:
            assert staging.step_path(3).is_dir() and not staging.step_path(0).exists()
        # step 2 was released before step 3 was published: renamed out, and each rank deleted its own file
        # (rank 0 removes the directory a round later); steps 0 and 1 are gone
        assert staging.gc_path(2).is_dir() and not staging.step_path(2).exists()
        assert not staging.gc_path(2).joinpath(f"rank-{comm.rank:05d}.h5").exists()
        assert not staging.gc_path(0).exists() and not staging.gc_path(1).exists()
    if reader is not None:
        reader.close()
    comm.Barrier()
    assert not list(staging.root.glob(".step-*.gc"))
