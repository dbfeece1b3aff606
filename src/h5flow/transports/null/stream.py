"""The null transport's writer and reader: one step at a time handed from a producer rank to the reader of the
same process (the same rank of a communicator of the same size), the producer's own block objects (no copy).

A writer and a reader pair up by the stream's name in this process (ADIOS2's inline engine works the same
way). The reader must take the step a writer ended before the next ``end_step``, which refuses otherwise
(writer and reader usually run in one thread, where waiting would never end). Arrays the analysis receives
are the producer's: valid until the producer changes them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from h5flow.model import Association, Block, StepMeta
from h5flow.transports._common import StepPuts, step_nbytes
from h5flow.transports.base import (BeginStepResult, PublishInfo, Reader, ReadStep, StepStatus, TransportError,
                                    Writer)


@dataclass
class _Channel:
    """What a writer hands its reader: the one step in flight and how the stream ended."""

    writer_thread: int
    pending: tuple[int, float, StepMeta, dict[str, list[Block]]] | None = None  # ended, not taken by the reader
    closed: bool = False
    failure: str = ""
    reader: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)


_CHANNELS: dict[str, _Channel] = {}
_LOCK = threading.Lock()


def _where(name: str) -> str:
    return f"null stream {name!r}"


class NullWriter(Writer):
    """Producer side: ``end_step`` gathers the step's metadata (collective) and hands the rank's blocks over."""

    agrees_in_end_step = True  # the gathering of the step's metadata is the step's agreement

    def __init__(self, comm: Any, config: Any) -> None:
        super().__init__(comm, config)
        self.name = config.filename
        self._puts = StepPuts()
        self._time = 0.0
        with _LOCK:
            old = _CHANNELS.get(self.name)
            if old is not None and not old.closed and not old.failure:
                raise TransportError(f"{_where(self.name)}: a writer of this process already holds it; close it "
                                     "first or give another filename")
            self._channel = _Channel(writer_thread=threading.get_ident())
            _CHANNELS[self.name] = self._channel

    def _do_begin_step(self, step: int, time_: float) -> None:
        self._puts, self._time = StepPuts(), time_

    def _do_put(self, mesh: str, block: Block) -> None:
        self._puts.add(mesh, block)

    def _do_end_step(self) -> PublishInfo:
        t0 = time.perf_counter()
        step = self._step
        assert step is not None
        ch = self._channel
        busy = (f"{_where(self.name)}: step {ch.pending[0]} is not read yet; the null transport holds one step: "
                "read it in this process before the next end_step") if ch.pending is not None else ""
        meta = self._puts.gather(self.comm, step, self._time, busy)
        mine = {name: self._puts.mine(name) for name in meta.meshes}
        with ch.cond:
            ch.pending = (step, self._time, meta, mine)
            ch.cond.notify_all()
        self.events.append({"step": step, "waited": 0.0})
        return PublishInfo(step=step, published=True, nbytes=step_nbytes(meta), seconds=time.perf_counter() - t0)

    def _end(self, failure: str = "") -> None:
        ch = self._channel
        with ch.cond:
            ch.closed, ch.failure = True, failure
            ch.cond.notify_all()
        with _LOCK:
            if not ch.reader and ch.pending is None and _CHANNELS.get(self.name) is ch:
                del _CHANNELS[self.name]

    def _do_close(self) -> None:
        self._end()

    def _do_abort(self) -> None:
        self._end(self.failure or "the producer stopped")


class NullStep(ReadStep):
    """A step whose blocks are the producer rank's own objects."""

    def __init__(self, step: int, time_: float, meta: StepMeta, mine: dict[str, list[Block]]) -> None:
        super().__init__(step, time_, meta, {name: [b.block_id for b in blocks] for name, blocks in mine.items()})
        self._mine = mine

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        self._check_mesh(mesh)
        return list(self._mine.get(mesh, []))


class NullReader(Reader):
    """Consumer side: the step the writer of this process handed over; each rank reads what its rank wrote."""

    def __init__(self, comm: Any, config: Any) -> None:
        super().__init__(comm, config)
        if config.partitioner.type != "block":
            raise TransportError(f"{_where(config.filename)}: each rank reads the blocks its own producer rank "
                                 f"wrote, so a {config.partitioner.type!r} partitioner cannot apply; leave the "
                                 "partitioner out")
        self.name = config.filename
        with _LOCK:
            ch = _CHANNELS.get(self.name)
            if ch is None or ch.reader:
                why = "no writer of it is open in this process" if ch is None else "another reader holds it"
                raise TransportError(f"{_where(self.name)}: {why}; the null transport pairs a writer and a reader "
                                     "in one process (open the writer first), use another transport between jobs")
            ch.reader = True
        self._channel = ch

    def _do_begin_step(self, timeout: float | None) -> BeginStepResult:
        ch = self._channel
        with ch.cond:
            def ready() -> bool:
                return ch.pending is not None or ch.closed

            if not ready() and ch.writer_thread != threading.get_ident():
                ch.cond.wait_for(ready, timeout)
            if ch.pending is not None:
                step, ch.pending = NullStep(*ch.pending), None
                return BeginStepResult(StepStatus.OK, step)
            if ch.failure:
                return BeginStepResult(StepStatus.ERROR, reason=ch.failure)
            if ch.closed:
                return BeginStepResult(StepStatus.END_OF_STREAM)
        return BeginStepResult(StepStatus.NOT_READY, reason="no step was written (the writer of this process "
                                                            "has not ended one)")

    def _do_release(self, step: ReadStep) -> None:
        pass  # the step was the producer's own objects: nothing to free

    def _do_close(self) -> None:
        ch = self._channel
        with _LOCK:
            ch.reader = False
            if ch.closed and _CHANNELS.get(self.name) is ch:
                del _CHANNELS[self.name]
