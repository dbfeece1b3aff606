"""Read buffers reused across steps (issue 14: a consumer's reads into fresh arrays paid for new pages every
step). Reuse must never change what a user still holds: every way of keeping a step's data is checked."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from h5flow.transports._buffers import ReadBuffers


def _fill(pool: ReadBuffers, value: float, shape: tuple[int, ...] = (1000, 2), phase: int | None = None
          ) -> np.ndarray:
    a = pool.take(shape, np.dtype("<f8"), phase)
    a[...] = value
    return a


def test_a_buffer_nobody_holds_is_reused() -> None:
    pool = ReadBuffers()
    a = _fill(pool, 1.0)
    addr = a.ctypes.data
    del a
    pool.next_step()
    b = _fill(pool, 2.0)
    assert b.ctypes.data == addr and pool.reused == 1
    assert b.shape == (1000, 2) and b.dtype == np.dtype("<f8") and b.flags.c_contiguous


@pytest.mark.parametrize("phase", [None, 2048, 4095])
@pytest.mark.parametrize("keep", ["array", "view", "view of a view", "reshaped", "memoryview", "in a list",
                                  "as another dtype"])
def test_a_buffer_a_user_still_holds_is_never_reused(keep: str, phase: int | None) -> None:
    pool = ReadBuffers()
    a = _fill(pool, 1.0, phase=phase)  # with a phase the array is a slice of the pooled block
    held = {"array": lambda: a, "view": lambda: a[10:20], "view of a view": lambda: a[10:][:5, 0],
            "reshaped": lambda: a.reshape(-1), "memoryview": lambda: memoryview(a),
            "in a list": lambda: [a], "as another dtype": lambda: a.view(np.uint8)}[keep]()
    del a
    gc.collect()
    pool.next_step()
    b = _fill(pool, 2.0, phase=phase)  # the same size: it would take the held buffer if it were free
    assert pool.reused == 0
    kept = np.asarray(held[0] if isinstance(held, list) else held)
    assert (kept.view("<f8") if kept.dtype == np.uint8 else kept).min() == 1.0, "a kept step's data changed"
    assert b.min() == 2.0


def test_kept_buffers_leave_the_pool_and_the_pool_stays_bounded() -> None:
    pool = ReadBuffers()
    kept = []
    for s in range(6):
        kept.append(_fill(pool, float(s)))
        pool.next_step()
    assert [float(k.min()) for k in kept] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert pool.reused == 0 and pool._free == []
    # once the user lets go, the next step reuses at most what one step took
    kept.clear()
    for s in range(4):
        _fill(pool, float(s))
        pool.next_step()
    assert pool.reused == 3 and len(pool._free) == 1


def test_a_different_size_allocates() -> None:
    pool = ReadBuffers()
    _fill(pool, 1.0, (10, 2))
    pool.next_step()
    b = _fill(pool, 2.0, (11, 2))
    assert pool.reused == 0 and b.shape == (11, 2)


def test_an_hdf5_consumer_that_keeps_every_step_sees_each_steps_own_values(tmp_path: Path) -> None:
    """End to end through the hdf5 transport: an analysis that keeps its blocks (a running history) must see
    each step's values after later steps were read; one that lets go gets its buffers reused."""
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.model import ImageBlock
    from h5flow.transports import StepStatus, open_reader, open_writer

    def block(value: float) -> ImageBlock:
        blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 7, 0, 7, 0, 7), 0)
        blk.arrays("cell")["data"] = np.full((8, 8, 8), value, dtype=np.float64)
        return blk

    for layout in ("n-n", "n-1"):
        cfg = TransportConfig.of(filename=str(tmp_path / f"s-{layout}"), heartbeat=2.0, queue_limit=0,
                                 layout=layout)
        steps = 6
        with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
            for s in range(steps):
                w.begin_step(s, float(s))
                w.put("mesh", block(float(s)))
                assert w.end_step().published
            reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
            history = []
            for s in range(steps):
                res = reader.begin_step(10.0)
                assert res.status is StepStatus.OK, res.reason
                data = res.step.blocks("mesh", ["data"])[0].arrays("cell")["data"]
                if s % 2 == 0:
                    history.append(data[2:5])  # kept: a view, as an analysis would keep it
                del data, res
                reader.release()
            buffers = reader._buffers
            # the breakdown's consumer phases: the wait for the other ranks at release apart from its own work
            assert {"read", "barrier", "release"} <= set(reader.events[-1]["phases"]), reader.events[-1]
            reader.close()
        assert [float(h.min()) for h in history] == [0.0, 2.0, 4.0], layout
        assert [float(h.max()) for h in history] == [0.0, 2.0, 4.0], layout
        assert buffers.reused >= 2, (layout, buffers.reused, buffers.allocated)


def test_a_phase_puts_the_array_at_the_file_offsets_place_in_a_page() -> None:
    """Reads copy fastest between same-aligned addresses: the array starts where the file offset does in
    its page, for a new block and for a reused one asked for at another phase, and stays inside its block."""
    pool = ReadBuffers()
    for step, phase in enumerate([0, 16, 2048, 4095, 6144 + 8, None, 7]):
        a = pool.take((1000, 3), np.dtype("<f4"), phase)
        if phase is not None:
            assert (a.ctypes.data - phase) % 4096 == 0
        block = a.base
        assert block.ctypes.data <= a.ctypes.data and a.ctypes.data + a.nbytes <= block.ctypes.data + block.nbytes
        a[...] = step
        assert a.shape == (1000, 3) and a.flags.c_contiguous and float(a.min()) == float(a.max()) == step
        del a, block
        pool.next_step()
    assert pool.allocated == 1 and pool.reused == 6
