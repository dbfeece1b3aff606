"""The high-level Python API: stream decomposed numpy arrays without knowing blocks or partitioners.

Producer (every rank of ``comm`` calls every line; ``write`` is per rank)::

    import h5flow
    with h5flow.open("run.xml", "w", comm=comm) as s:
        for t in range(steps):
            with s.step(t, time=t * dt) as st:
                st.write("temperature", local, offset=my_offset, global_shape=shape)

Consumer (any number of ranks, independent of the producer count)::

    with h5flow.open("run.xml", "r", comm=comm) as s:
        for st in s.steps(timeout=30):
            part = st.read("temperature")       # this rank's share: pieces of the global array
            local = part.array()                # one array when the pieces tile a box

``open`` takes an XML file (SENSEI style, its enabled ``<transport>``/``<analysis type="hdf5|socket|adios2">``),
a :class:`~h5flow.config.TransportConfig`, or a stream name plus keyword settings
(``h5flow.open("/dev/shm/run", "w", type="socket", queue_limit=4)``: the keywords are the fields of the
transport's own :class:`~h5flow.transports.TransportSettings` dataclass). docs/API.md has the details.

Each array written with :meth:`StepWriter.write` becomes a mesh of the same name with one cell array of that
name; each rank's piece is one block. 1-D and 2-D arrays are stored as image blocks one cell thick on the
missing axes, which carry spacing 0 (that is how :meth:`Step.read` knows to give them back as 1-D or 2-D).
The block-level API (:func:`h5flow.transports.open_writer`/``open_reader``) stays available below this one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import ImageBlock
from h5flow.stepview import Piece, Share, Step, as_stream_error
from h5flow.transports import open_reader, open_writer
from h5flow.transports._common import (Box, boxes_overlap, check_name, dtype_of as _dtype_of, dtype_problem,
                                       dtype_text, first_overlap, step_ranges)
from h5flow.transports.base import (PublishInfo, RankFailed, Reader, StepStatus, StreamError,
                                    TransportError, Writer, agree, check_step, describe)


class StreamTimeout(TransportError):
    """No step arrived within the ``timeout`` given to :meth:`ReadStream.steps`."""


# -- configuration --------------------------------------------------------------------------------

def _config(target: Any, settings: dict[str, Any]) -> TransportConfig:
    if isinstance(target, TransportConfig):
        if settings:
            raise TypeError("give keyword settings or a TransportConfig, not both (set them on the config)")
        return target
    if target is None:
        if "filename" not in settings:
            raise TypeError("h5flow.open needs an XML file, a TransportConfig, or a stream name "
                            "(h5flow.open('/dev/shm/run', 'w', type='hdf5'))")
        target = settings.pop("filename")
    text = str(target)
    path = Path(text)
    if text.endswith(".xml") or (path.is_file() and path.read_bytes()[:200].lstrip().startswith(b"<")):
        if settings:
            raise TypeError(f"keyword settings {sorted(settings)} cannot be combined with the XML file {text}: "
                            "put them in the XML")
        from h5flow.xmlconfig import load

        return load(path).transport()
    from h5flow.transports import entry

    kind = str(settings.pop("type", TransportConfig.type))
    own = entry(kind).settings.keywords()  # the transport's own settings (its TransportSettings fields)
    common = _COMMON_KEYWORDS
    bad = sorted(set(settings) - common - own)
    if bad:
        raise TypeError(f"unknown transport setting(s) {bad}; accepted: "
                        f"{', '.join(sorted(common | own | {'type'}))} (type={kind!r})")
    return TransportConfig.of(kind, text, **settings)


#: keywords of :func:`open` every transport takes (the rest go to the transport's settings class)
_COMMON_KEYWORDS = frozenset({"partitioner", "enabled", "settings"})


def _default_comm(comm: Any) -> Any:
    if comm is not None:
        return comm
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - mpi4py is a dependency
        raise TransportError("h5flow.open needs mpi4py (pip install mpi4py) or an explicit comm=") from e
    return MPI.COMM_WORLD


def open(target: str | Path | TransportConfig | None = None, mode: str = "r", comm: Any = None,  # noqa: A001
         **settings: Any) -> WriteStream | ReadStream:
    """Open a stream for writing (``"w"``, on the producer ranks) or reading (``"r"``, on the consumer ranks).

    ``target`` is a SENSEI-style XML file, a :class:`~h5flow.config.TransportConfig`, or the stream's name
    with ``settings``: ``type``; ``partitioner="planar"`` or a :class:`~h5flow.config.PartitionerConfig`;
    and the fields of the transport's settings dataclass (``queue_limit``, ``layout``, ... for hdf5:
    :class:`~h5flow.transports.hdf5.settings.Hdf5Settings`), which arrives as ``config.settings``; a name the
    transport does not have raises ``TypeError`` listing the accepted ones. ``comm`` defaults to
    ``MPI.COMM_WORLD``. Collective over ``comm``.
    """
    if mode not in ("r", "w"):
        raise ValueError(f"mode {mode!r}: give 'w' (producer ranks) or 'r' (consumer ranks)")
    cfg = _config(target, dict(settings))
    comm = _default_comm(comm)
    if mode == "w":
        return WriteStream(open_writer(comm, cfg))
    return ReadStream(open_reader(comm, cfg))


# -- producer side --------------------------------------------------------------------------------

def _pad3(t: Sequence[int]) -> tuple[int, int, int]:
    return tuple([0] * (3 - len(t)) + [int(x) for x in t])  # type: ignore[return-value]


@dataclass
class _Piece:
    name: str
    data: np.ndarray
    offset: tuple[int, ...]
    global_shape: tuple[int, ...]


def _check_dtype_streams(name: str, dtype: np.dtype, writer: Writer) -> None:
    """write()'s dtype rule (docs/API.md "Supported dtypes"), then the transport's own refusals."""
    why = dtype_problem(dtype) or writer.dtype_refused(dtype)
    if why:
        raise ValueError(f"write({name!r}): {why}")


class StepWriter:
    """One step being written on this rank; the step is published when its ``with`` block ends."""

    def __init__(self, stream: WriteStream, step: int, time: float) -> None:
        self.stream = stream
        self.step = step
        self.time = time
        self.info: PublishInfo | None = None  # set once published
        self._pieces: list[_Piece] = []
        self._ended = False  # the step's ``with`` block ended (published, or left on an error)

    def write(self, name: str, data: Any, offset: Sequence[int] | None = None,
              global_shape: Sequence[int] | None = None) -> None:
        """Add this rank's piece of the global array ``name`` (1-D, 2-D or 3-D numpy, C order).

        ``offset`` is where the piece starts in the global array and ``global_shape`` the whole array's shape
        (the same on every rank). On one rank both may be left out (the piece is the whole array). A rank may
        write several pieces of one array, or none; an array whose pieces are empty on every rank is still
        published (shape (0, ...)). ``data``'s dtype: docs/API.md "Supported dtypes"; an array keeps its dtype
        for the whole stream. Raises ``ValueError`` after the step's ``with`` block ended.
        """
        if self._ended:
            raise ValueError(f"write({name!r}): step {self.step} has ended (its `with` block is over); write inside "
                             f"`with s.step({self.step}) as st:`, before the block ends")
        arr = np.ascontiguousarray(data)
        check_name("array", name)
        _check_dtype_streams(name, arr.dtype, self.stream.writer)
        if arr.ndim not in (1, 2, 3):
            raise ValueError(f"write({name!r}): a {arr.ndim}-D array; give a 1-D, 2-D or 3-D numpy array")
        comm = self.stream.comm
        if offset is None and global_shape is None:
            if comm.size > 1:
                raise ValueError(f"write({name!r}) on {comm.size} ranks needs offset= and global_shape= (where "
                                 "this rank's piece sits in the global array, and that array's shape)")
            offset, global_shape = (0,) * arr.ndim, arr.shape
        if offset is None or global_shape is None:
            raise ValueError(f"write({name!r}): give both offset= and global_shape= (or neither on one rank)")
        off, gshape = tuple(int(x) for x in offset), tuple(int(x) for x in global_shape)
        if len(off) != arr.ndim or len(gshape) != arr.ndim:
            raise ValueError(f"write({name!r}): a {arr.ndim}-D array needs a {arr.ndim}-D offset and global_shape; "
                             f"got offset={off}, global_shape={gshape}")
        for ax, (o, n, g) in enumerate(zip(off, arr.shape, gshape, strict=True)):
            if o < 0 or o + n > g:
                raise ValueError(f"write({name!r}): axis {ax}: the piece covers [{o}, {o + n}) but the global "
                                 f"array has {g} there; check offset={off} and global_shape={gshape}")
        self.stream._check_dtype(self.step, name, arr.dtype)
        same = next((p.data.dtype for p in self._pieces if p.name == name), arr.dtype)
        if dtype_text(same) != dtype_text(arr.dtype):
            raise ValueError(f"write({name!r}): this rank wrote a piece of {name!r} as {same} in step {self.step}, "
                             f"and this one is {arr.dtype}; every piece of an array has its dtype")
        if arr.size:
            _check_no_overlap(self.step, name, [((p.offset, p.data.shape), "") for p in self._pieces
                                                if p.name == name and p.data.size], (off, arr.shape))
        self._pieces.append(_Piece(name, arr, off, gshape))

    def _publish(self, error: str = "") -> PublishInfo:
        """Collective: publish the step, or, when a rank failed inside it (``error``: this rank's), raise
        :class:`RankFailed` naming it on every rank. The ranks' pieces are gathered with their errors in one
        allgather, so agreeing costs no collective of its own."""
        w = self.stream.writer
        comm = self.stream.comm
        mine = [(p.name, p.global_shape, dtype_text(p.data.dtype), p.offset, p.data.shape) for p in self._pieces]
        every = agree(comm, "producer", f"end_step {self.step}", error, mine)
        shapes: dict[str, set[tuple[tuple[int, ...], str]]] = {}
        for rank_pieces in every:
            for name, gshape, dtype, *_ in rank_pieces:
                shapes.setdefault(name, set()).add((gshape, dtype))
        for name, seen in shapes.items():
            if len(seen) > 1:
                raise ValueError(f"step {self.step}: ranks disagree on array {name!r}: (global_shape, dtype) "
                                 f"{sorted(seen)}; every rank must give the same global_shape and dtype")
        # every rank alike: an array keeps its dtype from step to step (a rank that did not write it checks too)
        for name, seen in sorted(shapes.items()):
            self.stream._check_dtype(self.step, name, np.dtype(_dtype_of(next(iter(seen))[1])), every_rank=True)
        _check_ranks_disjoint(self.step, [[p for p in rank_pieces if math.prod(p[4])] for rank_pieces in every])
        published = _published_pieces(every)
        # block ids 0..n-1 per array, in rank order
        first: dict[str, int] = {}
        for rank in range(comm.rank):
            for i in published[rank]:
                name = every[rank][i][0]
                first[name] = first.get(name, 0) + 1
        for name, seen in shapes.items():
            self.stream._dtypes[name] = next(iter(seen))[1]
        w.begin_step(self.step, self.time)
        for p in (self._pieces[i] for i in published[comm.rank]):
            bid = first.get(p.name, 0)
            first[p.name] = bid + 1
            z, y, x = _pad3(p.offset)
            nz, ny, nx = (1,) * (3 - p.data.ndim) + p.data.shape
            spacing = (1.0, 1.0 if p.data.ndim >= 2 else 0.0, 1.0 if p.data.ndim == 3 else 0.0)
            block = ImageBlock(bid, (0.0, 0.0, 0.0), spacing, (x, x + nx - 1, y, y + ny - 1, z, z + nz - 1),
                               cell_arrays={p.name: p.data.reshape(nz, ny, nx)})
            w.put(p.name, block)
        self.info = w.end_step()
        return self.info


def _published_pieces(every: list[list[tuple[Any, ...]]]) -> list[list[int]]:
    """Which of each rank's pieces become blocks: every non-empty one; an array with no element on any rank (a
    particle code's step without particles) keeps its first empty piece, so consumers still find it, of shape
    (0, ...)."""
    filled = {p[0] for rank_pieces in every for p in rank_pieces if math.prod(p[4])}
    out: list[list[int]] = []
    kept: set[str] = set()
    for rank_pieces in every:
        mine = []
        for i, (name, _g, _d, _o, shape) in enumerate(rank_pieces):
            if math.prod(shape) or (name not in filled and name not in kept):
                mine.append(i)
                kept |= set() if math.prod(shape) else {name}
        out.append(mine)
    return out


def _overlap_text(box: Box) -> str:
    return f"offset {box[0]} shape {tuple(box[1])}"


def _check_no_overlap(step: int, name: str, written: list[tuple[Box, Any]], box: Box) -> None:
    """At ``write``: this rank's new piece ``box`` of ``name`` shares no element with the pieces it wrote."""
    for old, _ in written:
        if boxes_overlap(old, box):
            raise ValueError(f"write({name!r}): in step {step} this rank already wrote a piece of {name!r} at "
                             f"{_overlap_text(old)}, which overlaps this one at {_overlap_text(box)}: every element "
                             "of an array is written once per step (a consumer would get both pieces); write each "
                             "piece once")


def _check_ranks_disjoint(step: int, every: list[list[tuple[Any, ...]]]) -> None:
    """At the step's end, on every rank alike: no two ranks' pieces of one array share an element."""
    per_name: dict[str, list[tuple[Box, int]]] = {}
    for rank, rank_pieces in enumerate(every):
        for name, _gshape, _dtype, offset, shape in rank_pieces:
            per_name.setdefault(name, []).append(((offset, shape), rank))
    for name, boxes in sorted(per_name.items()):
        hit = first_overlap(boxes)
        if hit is not None:
            (a, ra), (b, rb) = hit
            raise ValueError(f"step {step}: array {name!r}: the piece of rank {ra} at {_overlap_text(a)} and the "
                             f"piece of rank {rb} at {_overlap_text(b)} overlap; every element of an array is written "
                             "by one rank, once per step (check each rank's offset=)")


class _StepContext:
    def __init__(self, writer: StepWriter) -> None:
        self._writer = writer

    def __enter__(self) -> StepWriter:
        return self._writer

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._writer._ended = True
        if exc is None:
            self._writer._publish()
        elif isinstance(exc, Exception) and not isinstance(exc, RankFailed):
            # this rank failed inside the step: the others are in this step's agreement and learn it there
            try:
                self._writer._publish(describe(exc))
            except RankFailed as e:
                raise e from exc


class WriteStream:
    """The producer side of a stream (from :func:`open` with ``"w"``); use it as a context manager."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer  # the block-level writer, for what this API does not cover
        self._last_step: int | None = None  # the last step begun (steps increase)
        self._open: StepWriter | None = None  # the step begun whose ``with`` block has not ended
        self._dtypes: dict[str, str] = {}  # each array's dtype (dtype_text) since its first step
        self.comm = writer.comm
        self.config: TransportConfig = writer.config

    def step(self, step: int, time: float = 0.0) -> _StepContext:
        """``with s.step(t, time=...) as st:``: ``st.write(...)`` inside; published (collectively) at the end.
        ``step``: an integer >= 0, larger than the step before; ``time``: a finite number. A step begun whose
        ``with`` block has not ended makes the next ``step()`` (and ``close()``) raise ``ValueError``."""
        self._check_none_open(f"step({step})")
        step, time = check_step(step, time, self._last_step, "step")
        self._last_step = step
        self._open = StepWriter(self, step, time)
        return _StepContext(self._open)

    def _check_none_open(self, call: str) -> None:
        if self._open is not None and not self._open._ended:
            raise ValueError(f"{call}: step {self._open.step} is still open: it was begun with "
                             f"s.step({self._open.step}) but not ended, so it would be lost; write each step as "
                             f"`with s.step(t) as st: ...` (the step is published when the block ends)")

    def _check_dtype(self, step: int, name: str, dtype: np.dtype, every_rank: bool = False) -> None:
        """An array keeps the dtype of its first step (consumers size their buffers by it)."""
        text = dtype_text(dtype)
        before = self._dtypes.get(name)
        if before is not None and before != text:
            where = f"step {step}" if every_rank else f"write({name!r}) in step {step}"
            raise ValueError(f"{where}: array {name!r} was {_dtype_of(before)} in earlier steps and is "
                             f"{np.dtype(dtype)} now; an array keeps its dtype for the whole stream (convert it with "
                             f".astype({_dtype_of(before)!s}) or write it under another name)")

    def flush(self) -> None:
        """Wait until every step left so far is published (the hdf5 transport's write thread,
        ``async_write``, publishes a step after ``end_step`` returned); raises a failed step's error."""
        self.writer.flush()

    def close(self) -> None:
        """End the stream (after the last step is published): consumers see end-of-stream. Collective."""
        self._check_none_open("close()")
        self.writer.close()

    def __enter__(self) -> WriteStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the stream; on an exception, tells the other ranks (they fail with ``producer rank R failed:
        ...`` in their next collective call) and aborts without end-of-stream. A step left open is such an
        exception: the stream ends without end-of-stream, and ``ValueError`` says which step."""
        if exc[0] is None and self._open is not None and not self._open._ended:
            try:
                self._check_none_open("closing the stream")
            except ValueError as e:
                self.writer.__exit__(type(e), e, None)
                raise
        self.writer.__exit__(*exc)


# -- consumer side --------------------------------------------------------------------------------

_GAPS = ("error", "warn", "allow")


def _missed_steps(reader: Reader) -> list[int]:
    """The steps ``reader`` (its rank 0) knows it never got: ``missed`` and the steps ``dropped`` for it."""
    dropped = [int(s) for s, *_ in getattr(reader, "dropped", [])]
    return sorted(set(getattr(reader, "missed", [])) | set(dropped))


class ReadStream:
    """The consumer side of a stream (from :func:`open` with ``"r"``); use it as a context manager."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader  # the block-level reader
        self.comm = reader.comm
        self.config: TransportConfig = reader.config
        self.status: str = ""  # "end_of_stream" once the stream ended
        self._missed: list[int] | None = None  # every rank's copy of rank 0's missed steps, at the end

    @property
    def missed(self) -> list[int]:
        """Steps the producer published that this consumer group never got: deleted before it attached (other
        groups had released them), or dropped for it by the producer. Known on consumer rank 0 while the
        stream runs, on every rank once it ended."""
        if self._missed is not None:
            return list(self._missed)
        return _missed_steps(self.reader)

    def steps(self, timeout: float | None = None, gaps: str = "error") -> Iterator[Step]:
        """Every step until the producer ends the stream; each is released when the loop moves on (or
        leaves). Raises :class:`StreamError` when the stream stops on an error and :class:`StreamTimeout`
        when no step comes within ``timeout`` seconds (``None``: wait for ever). Collective.

        ``gaps``: what the end of the stream does when this consumer :attr:`missed` steps: ``"error"`` (raise
        :class:`StreamError` on every rank, naming them), ``"warn"`` (a warning) or ``"allow"`` (nothing; the
        steps are in :attr:`missed`).

        A loop left by ``break`` or by an exception leaves its step unreleased: the next ``steps()`` releases
        it, ``close()`` closes with it (every rank must), and leaving the ``with`` block on an exception makes
        every rank fail with ``consumer rank R failed: <reason>`` (:class:`~h5flow.transports.base.RankFailed`)
        instead of the other ranks waiting in the release for ever."""
        if gaps not in _GAPS:
            raise ValueError(f"steps(gaps={gaps!r}); accepted: {', '.join(_GAPS)}")
        if self.reader._current is not None:  # a step an earlier loop left by break
            as_stream_error(self.reader.release)
        while True:
            res = self.reader.begin_step(timeout)
            if res.status is StepStatus.END_OF_STREAM:
                self.status = "end_of_stream"
                self._end_with_gaps(gaps)
                return
            if res.status is StepStatus.NOT_READY:
                raise StreamTimeout(f"no step within {timeout:g} s: {res.reason}; is the producer running with "
                                    f"the same stream name ({self.config.filename!r}, type {self.config.type!r})? "
                                    "give a larger timeout= or None to wait for ever")
            if res.status is not StepStatus.OK or res.step is None:
                raise StreamError(f"the stream stopped: {res.reason}")
            try:
                yield Step(res.step)
            except GeneratorExit:  # the loop was left (break, or an exception on this rank): see above
                return
            as_stream_error(self.reader.release)

    def _end_with_gaps(self, gaps: str) -> None:
        """At the end of the stream: every rank learns rank 0's missed steps; ``gaps`` says what follows."""
        from h5flow.transports._mpiutil import bcast_from_root

        self._missed = bcast_from_root(self.comm, _missed_steps(self.reader) if self.comm.rank == 0 else None)
        if not self._missed or gaps == "allow":
            return
        text = (f"the stream {self.config.filename!r} ended, but consumer group "
                f"{getattr(self.reader.settings, 'group', 'default')!r} missed {len(self._missed)} of its steps "
                f"({step_ranges(self._missed)}): they were deleted before this consumer attached (other groups had "
                "released them) or dropped for it by the producer. Start consumers before the producer to get every "
                "step, or pass steps(gaps='warn') or gaps='allow' to accept gaps (the steps are in .missed)")
        if gaps == "warn":
            warnings.warn(text, stacklevel=3)
        else:
            raise StreamError(text)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> ReadStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reader.__exit__(*exc)


__all__ = ["Piece", "RankFailed", "ReadStream", "Share", "Step", "StepWriter", "StreamError", "StreamTimeout",
           "WriteStream", "open"]
