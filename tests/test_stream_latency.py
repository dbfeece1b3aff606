"""Discovery latency of the hdf5 stream: a waiting consumer sees a published step at once, not at its next
polling interval (which added up to ``poll_max`` per step to the time to solution)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np


def test_waiting_consumer_wakes_when_a_step_is_published_not_at_its_next_poll(tmp_path: Path) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.model import ImageBlock
    from h5flow.transports import StepStatus, open_reader, open_writer

    poll = 3.0  # the consumer's polling interval: without a wake-up it would see the step up to 3 s late
    cfg = TransportConfig.of(filename=str(tmp_path / "s"), layout="log", heartbeat=2.0, poll_min=poll, poll_max=poll)
    seen: dict[str, float | str] = {}
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)

        def consume() -> None:
            res = reader.begin_step(20.0)
            seen["at"] = time.time()
            seen["status"] = res.status.value
            if res.status is StepStatus.OK:
                seen["sum"] = float(sum(b.arrays("cell")["data"].sum() for b in res.step.blocks("mesh", ["data"])))
                reader.release()

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(0.5)  # the consumer has attached, found nothing and sleeps in its polling interval
        blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 3, 0, 3, 0, 3), 0)
        blk.arrays("cell")["data"] = np.ones((4, 4, 4), dtype=np.float32)
        w.begin_step(0, 0.0)
        w.put("mesh", blk)
        info = w.end_step()
        published = time.time()
        t.join(30)
    reader.close()
    assert info.published and seen.get("status") == "ok", seen
    assert seen["sum"] == 64.0
    late = float(seen["at"]) - published
    assert late < poll / 3, f"the consumer saw the step {late:.2f} s after it was published (polling every {poll} s)"


def test_producer_blocked_on_a_full_queue_wakes_when_a_consumer_releases(tmp_path: Path) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.model import ImageBlock
    from h5flow.transports import StepStatus, open_reader, open_writer

    poll = 3.0
    cfg = TransportConfig.of(filename=str(tmp_path / "s"), heartbeat=2.0, poll_min=poll, poll_max=poll,
                             queue_limit=1)
    blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 3, 0, 3, 0, 3), 0)
    blk.arrays("cell")["data"] = np.ones((4, 4, 4), dtype=np.float32)
    out: dict[str, float] = {}
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
        w.begin_step(0, 0.0)
        w.put("mesh", blk)
        assert w.end_step().published
        res = reader.begin_step(20.0)  # registers the group: step 0 is unreleased, the queue (1) is full
        assert res.status is StepStatus.OK, res.reason

        def produce() -> None:
            w.begin_step(1, 1.0)
            w.put("mesh", blk)
            out["published"] = float(w.end_step().published)
            out["at"] = time.time()

        t = threading.Thread(target=produce)
        t.start()
        time.sleep(0.5)  # the producer found the queue full and sleeps in its polling interval
        released = time.time()
        reader.release()
        t.join(30)
        reader.close()
    assert out.get("published") == 1.0, out
    late = out["at"] - released
    assert late < poll / 3, f"the producer went on {late:.2f} s after the release (polling every {poll} s)"
