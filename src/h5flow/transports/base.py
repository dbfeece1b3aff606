"""The transport contract: a writer on the M producer ranks, a reader on the N consumer ranks.

This is the block-level API (``from h5flow.transports import open_writer, open_reader``); most users want
the array-level one above it, :func:`h5flow.open` (docs/API.md). ``config`` is a
:class:`~h5flow.config.TransportConfig` (from :func:`h5flow.xmlconfig.load` or built in code).

Producer side, per rank::

    w = open_writer(comm, config)
    for step ...:
        w.begin_step(step, time)
        w.put("mesh", block)          # every block this rank owns, any number (zero included)
        w.end_step()                  # collective: the step is accepted and published (or dropped under
                                      # 'discard'); hdf5 with async_write publishes it in the background
    w.flush()                         # optional: every accepted step is published when it returns
    w.close()                         # collective: waits for the last step, publishes end-of-stream

Consumer side, per rank::

    r = open_reader(comm, config)
    while True:
        res = r.begin_step(timeout=10.0)       # collective
        if res.status is StepStatus.OK:
            blocks = res.step.blocks("mesh", ["data"], "cell")   # this rank's share only
            ...
            r.release()                          # collective
        elif res.status is StepStatus.NOT_READY:  continue / give up
        else: break                               # END_OF_STREAM, or ERROR with res.reason
    r.close()

or, equivalently, ``for step in r.steps(timeout=10.0): ...`` (released when the loop moves on; raises
:class:`TransportError` on ERROR and on NOT_READY).

Public methods check the call order and then call the protected ``_do_*`` hooks a transport implements.

Telemetry is part of the contract (the run records of ``h5flow run`` are built from it): every writer keeps
:attr:`Writer.events` (one dict per ``end_step``; ``"waited"``: seconds of backpressure) and
:attr:`Writer.dropped`; every reader keeps :attr:`Reader.events` (one dict per released step; ``"visible"``:
when the step was found; ``"barrier"``: seconds this rank waited at release for the other consumer ranks,
mostly for the slowest one's analysis), :attr:`Reader.discarded`, :attr:`Reader.missed` and :attr:`Reader.dropped`. A
transport that measures nothing leaves them empty.

Partitioning happens once, here: :class:`Reader` builds ``self.partitioner`` from ``config.partitioner``
and a transport's reader gives each step's global metadata to :meth:`Reader.assignment` to learn which
blocks this rank reads.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from h5flow.model import Association, Block, StepMeta

#: one telemetry record: step number, time stamps (``time.time()``) and counts
Event = dict[str, Any]


class TransportError(RuntimeError):
    """The transport failed; the message says what to check."""


class StepStatus(enum.Enum):
    OK = "ok"
    NOT_READY = "not_ready"  # no new step within the timeout
    END_OF_STREAM = "end_of_stream"  # the producer closed the stream and every step was delivered
    ERROR = "error"  # the stream cannot continue (producer lost, corrupt step, ...): see the reason


@dataclass
class PublishInfo:
    """What ``end_step`` did with a step (same on every producer rank)."""

    step: int
    published: bool  # False when dropped by the 'discard' policy
    nbytes: int  # payload bytes of the step, all ranks together
    reason: str = ""  # why it was dropped
    # seconds in end_step: the write and publication, or with a write thread (hdf5's async_write) the wait for
    # the previous step's write and the copy; backpressure included
    seconds: float = 0.0


class ReadStep(ABC):
    """One step as a consumer rank sees it: global metadata, this rank's blocks, lazily read."""

    def __init__(self, step: int, time: float, meta: StepMeta, assignment: dict[str, list[int]]) -> None:
        self.step = step
        self.time = time
        self.meta = meta
        self._assignment = assignment

    def my_block_ids(self, mesh: str) -> list[int]:
        """Block ids of ``mesh`` the partitioner gave this rank."""
        self._check_mesh(mesh)
        return list(self._assignment.get(mesh, []))

    def _check_mesh(self, mesh: str) -> None:
        if mesh not in self.meta.meshes:
            known = ", ".join(sorted(self.meta.meshes)) or "none"
            raise KeyError(f"step {self.step} has no mesh {mesh!r}; meshes: {known}")

    @abstractmethod
    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        """This rank's blocks of ``mesh`` with the named arrays read (geometry always included)."""


@dataclass
class BeginStepResult:
    status: StepStatus
    step: ReadStep | None = None
    reason: str = ""


class Writer(ABC):
    """Producer side of a transport. All methods but :meth:`put` are collective over ``comm``."""

    def __init__(self, comm: Any, config: Any) -> None:
        self.comm = comm
        self.config = config
        #: the transport's own settings (``config.settings``: its TransportSettings dataclass)
        self.settings: Any = config.settings
        self._in_step = False
        self._closed = False
        self._step: int | None = None
        #: one record per ``end_step``: at least ``step``; ``waited`` = seconds blocked on backpressure
        self.events: list[Event] = []
        #: consumer group → what was dropped for it because it was lost (``{"steps": [...], "reason": ...}``)
        self.dropped: dict[str, dict[str, Any]] = {}

    def begin_step(self, step: int, time: float) -> None:
        if self._closed:
            raise TransportError("begin_step after close()")
        if self._in_step:
            raise TransportError(f"begin_step({step}) while step {self._step} is still open: call end_step first")
        self._in_step, self._step = True, step
        self._do_begin_step(step, time)

    def put(self, mesh: str, block: Block) -> None:
        if not self._in_step:
            raise TransportError("put() outside a step: call begin_step first")
        self._do_put(mesh, block)

    def end_step(self) -> PublishInfo:
        if not self._in_step:
            raise TransportError("end_step() without begin_step")
        self._in_step = False
        return self._do_end_step()

    def flush(self) -> None:
        """Wait until every step ``end_step`` accepted is published (a transport that publishes in the
        background, such as hdf5 with ``async_write``, finishes here; the others publish inside ``end_step``).
        Raises the :class:`TransportError` of a step whose background write failed."""
        self._do_flush()

    def close(self) -> None:
        if self._closed:
            return
        if self._in_step:
            raise TransportError(f"close() while step {self._step} is open: call end_step first")
        self._closed = True
        self._do_close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._abort_error = exc[1]
            self._do_abort()

    def abort_reason(self) -> str:
        """Why the producer left (inside ``_do_abort``): the exception's text, for the stream's consumers."""
        e = getattr(self, "_abort_error", None)
        if e is None:
            return "it stopped without closing the stream"
        text = " ".join(str(e).split())
        return (text if isinstance(e, TransportError) and text else f"{type(e).__name__}: {text}" if text
                else type(e).__name__)[:2000]

    @abstractmethod
    def _do_begin_step(self, step: int, time: float) -> None: ...

    @abstractmethod
    def _do_put(self, mesh: str, block: Block) -> None: ...

    @abstractmethod
    def _do_end_step(self) -> PublishInfo: ...

    def _do_flush(self) -> None:  # noqa: B027 - optional hook: publishing inside end_step needs nothing here
        pass

    @abstractmethod
    def _do_close(self) -> None: ...

    def _do_abort(self) -> None:  # noqa: B027 - optional hook
        """Called instead of close() when the producer leaves with an exception: no end-of-stream."""


class Reader(ABC):
    """Consumer side of a transport. All methods are collective over ``comm``."""

    def __init__(self, comm: Any, config: Any) -> None:
        from h5flow.partitioners import make_partitioner

        self.comm = comm
        self.config = config
        #: the transport's own settings (``config.settings``: its TransportSettings dataclass)
        self.settings: Any = config.settings
        self._current: ReadStep | None = None
        self._closed = False
        #: decides which blocks of each step this rank reads (built once from ``config.partitioner``)
        self.partitioner = make_partitioner(config.partitioner)
        #: one record per released step: at least ``step``; ``visible`` = when it was found, ``published``
        self.events: list[Event] = []
        #: (step, reason) the producer dropped (``queue_policy="discard"``, quota)
        self.discarded: list[tuple[int, str]] = []
        #: steps published before this consumer group attached and gone since
        self.missed: list[int] = []
        #: (step, reason) dropped for this group because the producer declared it lost
        self.dropped: list[tuple[int, str]] = []

    def assignment(self, meta: StepMeta) -> dict[str, list[int]]:
        """The block ids of each mesh of a step (``meta``: its global metadata) this rank reads."""
        comm = self.comm
        return {name: list(self.partitioner.assign(m, comm.size, comm.rank)) for name, m in meta.meshes.items()}

    def begin_step(self, timeout: float | None = None) -> BeginStepResult:
        """Wait up to ``timeout`` seconds (``None``: forever) for the next step."""
        if self._closed:
            raise TransportError("begin_step after close()")
        if self._current is not None:
            raise TransportError(f"begin_step while step {self._current.step} is not released: call release()")
        res = self._do_begin_step(timeout)
        self._current = res.step if res.status is StepStatus.OK else None
        return res

    def release(self) -> None:
        if self._current is None:
            raise TransportError("release() without a current step")
        step, self._current = self._current, None
        self._do_release(step)

    def steps(self, timeout: float | None = None) -> Iterator[ReadStep]:
        """Iterate until end of stream; each step is released when the loop moves on.

        Raises :class:`TransportError` on ERROR and on NOT_READY (no step within ``timeout``).
        """
        while True:
            res = self.begin_step(timeout)
            if res.status is StepStatus.END_OF_STREAM:
                return
            if res.status is not StepStatus.OK or res.step is None:
                raise TransportError(f"stream stopped: {res.status.value}: {res.reason}")
            yield res.step
            self.release()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._do_close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def _do_begin_step(self, timeout: float | None) -> BeginStepResult: ...

    @abstractmethod
    def _do_release(self, step: ReadStep) -> None: ...

    @abstractmethod
    def _do_close(self) -> None: ...
