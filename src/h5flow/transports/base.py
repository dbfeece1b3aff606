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

**Errors are collective.** Every collective call starts with one agreement (:func:`agree`: a small
allgather of what each rank is calling and of its error, if any): ``end_step`` (the gathering of the step's
block metadata is that agreement), ``flush`` and ``close`` on the producer, ``release`` and ``close`` with a
step open on the consumer. A rank that leaves a ``with`` block of a writer or reader on an exception joins
the agreement the other ranks are waiting in with its error. So an exception on one rank ends the call on
every rank with one :class:`RankFailed` (``producer rank R failed: <reason>``), and ranks that call
different things (one closes while another ends a step) fail the same way instead of waiting in different
collectives for ever. No collective is added per ``put``.

Partitioning happens once, here: :class:`Reader` builds ``self.partitioner`` from ``config.partitioner``
and a transport's reader gives each step's global metadata to :meth:`Reader.assignment` to learn which
blocks this rank reads.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import math
import numbers
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from h5flow._mpi import sleepy_allgather
from h5flow.model import Association, Block, StepMeta

#: one telemetry record: step number, time stamps (``time.time()``) and counts
Event = dict[str, Any]


class TransportError(RuntimeError):
    """The transport failed; the message says what to check."""


class StreamError(TransportError):
    """The stream stopped on an error (the producer was lost, a step is corrupt, ...): the message says which."""


class RankFailed(StreamError):
    """An error on one rank of a collective call, raised on every rank of the communicator with the same message:
    ``<role> rank <rank> failed: <reason>``."""

    def __init__(self, role: str, rank: int, reason: str) -> None:
        self.role, self.rank, self.reason = role, rank, reason
        super().__init__(f"{role} rank {rank} failed: {reason}")


def describe(exc: BaseException) -> str:
    """An exception as the reason other ranks and consumers are told: its type (unless it is the transport's
    own error) and message."""
    if isinstance(exc, TransportError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def check_step(step: Any, time: Any, last: int | None, call: str = "begin_step") -> tuple[int, float]:
    """The step number and time a producer begins, checked as the C library checks them (``last``: the step
    begun before, ``None`` for none): an integer >= 0, increasing, and a finite time."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TransportError(f"{call}({step!r}): the step number must be an integer, not {type(step).__name__}")
    step = int(step)
    if step < 0 or (last is not None and step <= last):
        raise TransportError(f"{call}({step}): steps must be >= 0 and increasing (the last was "
                             f"{-1 if last is None else last})")
    try:
        t = float(time)
    except (TypeError, ValueError):
        raise TransportError(f"{call}({step}): the time {time!r} is not a number") from None
    if not math.isfinite(t):
        raise TransportError(f"{call}({step}): the time {t:g} is not a finite number")
    return step, t


def agree(comm: Any, role: str, call: str, error: str = "", payload: Any = None) -> list[Any]:
    """Collective over ``comm``: every rank's ``payload``, in rank order, when no rank failed.

    ``call`` names what this rank is doing (``"end_step 4"``, ``"release 7"``, ``"close"``, ``"exit"``) and
    ``error`` why it failed ("" when it did not). One allgather carries both, so a failure costs nothing more
    and the agreement is also the call's barrier. Raises :class:`RankFailed` on every rank, naming the lowest
    failing rank and its reason; ranks that call different things fail too (the lowest rank that closed or
    left while others went on, else the lowest rank whose call differs from rank 0's), instead of waiting in
    different collectives for ever.
    """
    every = sleepy_allgather(comm, (call, error, payload))
    for rank, (_, err, _) in enumerate(every):
        if err:
            raise RankFailed(role, rank, err)
    calls = [c for c, _, _ in every]
    if len(set(calls)) > 1:
        leaving = [r for r, c in enumerate(calls) if c in ("close", "exit")]
        odd = leaving[0] if leaving and len(leaving) < len(calls) else \
            next(r for r, c in enumerate(calls) if c != calls[0])
        others = sorted({c for r, c in enumerate(calls) if r != odd and c != calls[odd]})
        raise RankFailed(role, odd, f"it called {calls[odd]} while other ranks called {', '.join(others)}: every "
                                    f"rank must make the same collective calls in the same order")
    return [p for _, _, p in every]


#: the exceptions that reached ``sys.excepthook`` (uncaught: the program is ending on them)
_UNCAUGHT: list[BaseException] = []


def _watch_exceptions() -> None:
    """Once per process: note an uncaught exception before the interpreter exits (:meth:`Writer._at_exit`)."""
    previous = sys.excepthook
    if getattr(previous, "h5flow", False):
        return

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        _UNCAUGHT.append(value)
        previous(kind, value, tb)

    hook.h5flow = True  # type: ignore[attr-defined]
    sys.excepthook = hook


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

    def dtype_refused(self, dtype: Any) -> str:
        """Why this transport cannot stream arrays of ``dtype``, one of the dtypes :func:`h5flow.open`'s
        ``write()`` takes (docs/API.md "Supported dtypes"); "" when it can (every one, unless a transport says)."""
        return ""

    def __init__(self, comm: Any, config: Any) -> None:
        self.comm = comm
        self.config = config
        #: the transport's own settings (``config.settings``: its TransportSettings dataclass)
        self.settings: Any = config.settings
        self._in_step = False
        self._closed = False
        self._step: int | None = None
        self._last_step: int | None = None  # the last step begun (steps increase)
        #: one record per ``end_step``: at least ``step``; ``waited`` = seconds blocked on backpressure
        self.events: list[Event] = []
        #: consumer group → what was dropped for it because it was lost (``{"steps": [...], "reason": ...}``)
        self.dropped: dict[str, dict[str, Any]] = {}
        #: why the writer stopped (``producer rank R failed: ...``), set before ``_do_abort`` (transports tell
        #: their consumers); "" while it has not failed
        self.failure = ""
        self._armed = False  # _at_exit registered (at the first step: a writer whose opening failed has none)

    def begin_step(self, step: int, time: float) -> None:
        if self._closed:
            raise TransportError("begin_step after close()")
        if self._in_step:
            raise TransportError(f"begin_step({step}) while step {self._step} is still open: call end_step first")
        step, time = check_step(step, time, self._last_step)
        self._in_step, self._step, self._last_step = True, step, step
        if not self._armed:
            self._armed = True
            _watch_exceptions()
            atexit.register(self._at_exit)  # a writer never closed still delivers what it published
        self._do_begin_step(step, time)

    def put(self, mesh: str, block: Block) -> None:
        if not self._in_step:
            raise TransportError("put() outside a step: call begin_step first")
        self._do_put(mesh, block)

    #: True when ``_do_end_step`` begins with the step's agreement itself (the writers built on
    #: ``_common.PutsWriter`` do: the gathering of the step's metadata is it); else ``end_step`` agrees first
    agrees_in_end_step = False

    def end_step(self) -> PublishInfo:
        if not self._in_step:
            raise TransportError("end_step() without begin_step")
        self._in_step = False
        if not self.agrees_in_end_step:
            agree(self.comm, "producer", f"end_step {self._step}")
        return self._do_end_step()

    def flush(self) -> None:
        """Wait until every step ``end_step`` accepted is published (a transport that publishes in the
        background, such as hdf5 with ``async_write``, finishes here; the others publish inside ``end_step``).
        Raises the :class:`TransportError` of a step whose background write failed."""
        agree(self.comm, "producer", "flush")
        self._do_flush()

    def close(self) -> None:
        if self._closed:
            return
        if self._in_step:
            raise TransportError(f"close() while step {self._step} is open: call end_step first")
        try:
            agree(self.comm, "producer", "close")
        except RankFailed as e:
            self._fail(e)
            raise
        self._closed = True
        atexit.unregister(self._at_exit)
        self._do_close()

    def abort(self, reason: str) -> None:
        """Leave without end-of-stream (not collective): the consumers are told ``producer rank R failed:
        <reason>`` where the transport can tell them, else they see the producer lost."""
        if not self._closed:
            self._fail(f"producer rank {self.comm.rank} failed: {reason}")

    def _fail(self, failure: RankFailed | str) -> None:
        self.failure = str(failure)
        self._closed = True
        atexit.unregister(self._at_exit)
        self._do_abort()

    def _at_exit(self) -> None:
        """At interpreter exit, a writer nobody closed: closed (collectively: every rank's writer is closed at
        its exit) when the program ended normally, so its published steps reach the consumers and they see
        the end of the stream; aborted with the reason when an uncaught exception ended it (the other ranks
        learn it in their next collective call). An error of the close is printed and makes the exit status 1."""
        if self._closed:
            return
        exc = _UNCAUGHT[-1] if _UNCAUGHT else None
        print(f"h5flow: producer rank {self.comm.rank}: the stream {getattr(self.config, 'filename', '')!r} was not "
              f"closed; {'closing it' if exc is None else 'aborting it'} at exit", file=sys.stderr, flush=True)
        try:
            if exc is None:
                if self._in_step:
                    raise TransportError(f"step {self._step} was begun but never ended (end_step)")
                self.close()
            else:
                self.__exit__(type(exc), exc, exc.__traceback__)
        except Exception as e:  # noqa: BLE001 - at exit there is nobody to raise to: say it, and fail the exit status
            if not self._closed:
                with contextlib.suppress(Exception):
                    self._fail(f"producer rank {self.comm.rank} failed: {describe(e)}")
            print(f"h5flow: producer rank {self.comm.rank}: error: {describe(e)}", file=sys.stderr, flush=True)
            sys.stderr.flush()
            os._exit(1)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        if self._closed:  # failed inside close, past its agreement (or aborted already): nobody waits in one
            if not self.failure:
                self.failure = f"producer rank {self.comm.rank} failed: {describe(exc)}"
                self._do_abort()
            return
        failure: RankFailed | None = exc if isinstance(exc, RankFailed) else None
        if failure is None and isinstance(exc, Exception):
            try:  # the other ranks wait in their next collective call: they learn this rank's error there
                agree(self.comm, "producer", "exit", describe(exc))
            except RankFailed as e:
                failure = e
        self._fail(failure if failure is not None else f"producer rank {self.comm.rank} failed: {describe(exc)}")
        if failure is not None and failure is not exc:
            raise failure from exc

    def failure_line(self) -> str:
        """Why the producer stopped, as its consumers are told (inside ``_do_abort``): the agreed
        ``producer rank R failed: <reason>`` (naming the rank that failed), or that it stopped unclosed."""
        return self.failure or f"producer rank {self.comm.rank} failed: it stopped without closing the stream"

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
        #: seconds the last ``release`` waited in its agreement for the other ranks (its barrier)
        self.agree_seconds = 0.0
        #: the agreed error that stopped this reader (``consumer rank R failed: ...``); "" while none did
        self.failure = ""

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
        """Collective: every rank is done with the step (or every rank raises :class:`RankFailed`, the step
        still current, when one of them failed: see :meth:`__exit__`)."""
        if self._current is None:
            raise TransportError("release() without a current step")
        t0 = time.perf_counter()
        try:
            agree(self.comm, "consumer", f"release {self._current.step}")
        except RankFailed as e:
            self.failure = str(e)
            raise
        self.agree_seconds = time.perf_counter() - t0
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
        """Collective. With a step still current (a loop that broke out), the ranks first agree that all of
        them close: one that closes while the others release fails every rank (the step stays unreleased).
        Called while an exception propagates (a ``finally`` after an analysis raised), this rank's agreement
        carries that exception as its error, as :meth:`__exit__` does."""
        if self._closed:
            return
        try:
            if self._current is not None and not self.failure:
                exc = sys.exc_info()[1]
                error = describe(exc) if isinstance(exc, Exception) and not isinstance(exc, RankFailed) else ""
                agree(self.comm, "consumer", "exit" if error else "close", error)
        except RankFailed as e:
            self.failure = str(e)
            raise
        finally:
            self._closed = True
            self._do_close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or self._closed or self._current is None or self.failure or isinstance(exc, RankFailed) \
                or not isinstance(exc, Exception):
            self.close()
            return
        try:  # an error inside a step on this rank: the others wait in release, where they learn it
            agree(self.comm, "consumer", "exit", describe(exc))
        except RankFailed as e:
            self.failure = str(e)
            self.close()
            raise e from exc

    @abstractmethod
    def _do_begin_step(self, timeout: float | None) -> BeginStepResult: ...

    @abstractmethod
    def _do_release(self, step: ReadStep) -> None: ...

    @abstractmethod
    def _do_close(self) -> None: ...
