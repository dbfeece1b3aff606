"""Consumer side of the hdf5 transport: discover published steps, read this rank's blocks, release."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any

import h5py
import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import Association, Block, MeshMeta, StepMeta
from h5flow.transports import _mapped, _ownership, _safefile
from h5flow.transports._buffers import ReadBuffers
from h5flow.transports._common import assemble_blocks, check_association, dtype_of
from h5flow.transports._grouplock import GroupLock
from h5flow.transports._mpiutil import bcast_from_root, sleepy_allgather
from h5flow.transports._phases import Phases
from h5flow.transports.base import BeginStepResult, Reader, ReadStep, StepStatus, TransportError
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5.staging import (DirWatch, Entry, GroupState, Heartbeat, HeartbeatError, IndexTail,
                                            Staging, StreamInfo, is_full_error, read_index)

GARBAGE_BACKLOG = 2  # released steps a consumer may leave undeleted while it has no idle time (see _collect)
#: map_reads: a block's rows are mapped from this many bytes on; smaller ones are copied into pooled buffers
#: (a mapping costs a system call and a page-table entry per page, a copy of a few pages costs less)
MAP_MIN = 256 * 1024


def _filled(raw: _h5.RawFile, key: str, first: int, buf: np.ndarray) -> np.ndarray:
    raw.read_rows(key, first, buf)
    return buf


def _mapped_rows(raw: _h5.RawFile, key: str, first: int, count: int) -> np.ndarray | OSError:
    """The rows mapped, or why the kernel refused (too many mappings: ``vm.max_map_count``; out of memory):
    the caller then copies them, and a copy of a file that is not what it should be fails on its own."""
    try:
        return raw.map_rows(key, first, count)
    except OSError as e:
        return e


@dataclass
class _Found:
    status: StepStatus
    entry: Entry | None = None
    reason: str = ""
    seen: float = 0.0
    layout: str = "n-1"
    driver: str = "mpio"
    meta_json: str = ""
    run_id: str = ""  # the run the step belongs to (rank 0's; every rank checks its opens against it)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs [first, last] of sorted block ids (one read per run)."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


class Hdf5ReadStep(ReadStep):
    def __init__(self, step: int, time_: float, meta: StepMeta, assignment: dict[str, list[int]],
                 seq: int, files: dict[int, h5py.File], layout: str, opener: Any, phase: Phases,
                 buffers: ReadBuffers | None = None, raw_opener: Any = None, pool: Any = None,
                 mapped: bool = False, map_refused: Callable[[OSError], None] | None = None) -> None:
        super().__init__(step, time_, meta, assignment)
        self.seq = seq
        self._map = mapped  # raw reads of large blocks map the file's pages instead of copying them
        self._map_refused = map_refused  # told when the kernel refused a mapping (the rows were copied instead)
        # the mapped arrays given out: dropped at close, so that a mapping the analysis let go of is unmapped
        # inside the release (timed as the transport's), not wherever the analysis dropped its last view
        self._mapped: list[np.ndarray] = []
        # each mapping given out: (its owner, weakly; the rank file it maps, by (step, owner rank); that file's
        # size). While any view of a mapping lives, the whole file's pages stay in memory (see Hdf5Reader._pinned)
        self.pins: list[tuple[weakref.ref[Any], tuple[int, int], int]] = []
        self._pool = pool  # raw reads of several blocks run on it side by side (None: one after the other)
        self._buffers = buffers or ReadBuffers()
        self._open_raw = raw_opener  # n-n: owner -> _h5.RawFile | None (None: read through HDF5)
        self._raws: dict[int, _h5.RawFile | None] = {}
        self._files = files
        self._layout = layout
        self._open = opener
        self._phase = phase

    def _file(self, owner: int) -> h5py.File:
        key = owner if self._layout == "n-n" else 0
        if key not in self._files:
            with self._phase("open"):
                self._files[key] = self._open(owner)
        return self._files[key]

    def _raw(self, owner: int) -> _h5.RawFile | None:
        if self._open_raw is None:
            return None
        if owner not in self._raws:
            with self._phase("open"):
                self._raws[owner] = self._open_raw(owner)
        return self._raws[owner]

    def _rows(self, mesh: MeshMeta, assoc: Association, ids: list[int]) -> dict[int, tuple[int, int, int]]:
        """block id → (file key owner, first row, row count) in the dataset that holds it."""
        counts = [b.count(assoc) for b in mesh.blocks]
        out = {}
        if self._layout != "n-n":  # n-1 and log: one logical file, blocks at their global rows
            offsets = mesh.offsets(assoc)
            for i in ids:
                out[i] = (0, offsets[i], counts[i])
        else:
            per_owner: dict[int, int] = {}
            for b in mesh.blocks:
                start = per_owner.get(b.owner, 0)
                if b.block_id in ids:
                    out[b.block_id] = (b.owner, start, counts[b.block_id])
                per_owner[b.owner] = start + counts[b.block_id]
        return out

    def _read(self, mesh: MeshMeta, path: str, assoc: Association, ids: list[int], ncomp: int,
              dtype: np.dtype) -> dict[int, np.ndarray]:
        rows = self._rows(mesh, assoc, ids)
        out: dict[int, np.ndarray] = {}
        if self._layout != "n-n":
            dset = self._file(0)[mesh.name][path]
            with self._phase("read"):
                start = _h5.contiguous_offset(dset)
                for first, last in _runs(ids):
                    a, b = rows[first][1], rows[last][1] + rows[last][2]
                    phase = None if start is None else start + a * ncomp * dtype.itemsize
                    buf = self._buffers.take((b - a, ncomp), dtype, phase)  # every row is read into it below
                    if b > a:
                        dset.read_direct(buf, np.s_[a:b])
                    for i in range(first, last + 1):
                        out[i] = buf[rows[i][1] - a : rows[i][1] - a + rows[i][2]]
        else:
            key = f"{mesh.name}/{path}"
            # where the producer's HDF5 put the rows: block id -> a read into a pooled buffer, or a mapping
            raw_reads: dict[int, Callable[[], np.ndarray | OSError]] = {}
            mapped: set[int] = set()

            def pooled(raw: _h5.RawFile, first: int, count: int) -> np.ndarray:  # every row is read into it
                return self._buffers.take((count, ncomp), dtype, raw.row_offset(key, first))

            for i in ids:
                owner, a, n = rows[i]
                raw = self._raw(owner) if n else None
                if raw is not None and raw.can_read(key, dtype, ncomp, a + n):
                    if self._map and n * ncomp * dtype.itemsize >= MAP_MIN:
                        raw_reads[i] = partial(_mapped_rows, raw, key, a, n)
                        mapped.add(i)
                    else:
                        raw_reads[i] = partial(_filled, raw, key, a, pooled(raw, a, n))
                elif n:
                    dset = self._file(owner)[mesh.name][path]
                    start = _h5.contiguous_offset(dset)
                    buf = self._buffers.take((n, ncomp), dtype,  # every row is read into it below
                                             None if start is None else start + a * ncomp * dtype.itemsize)
                    with self._phase("read"):
                        dset.read_direct(buf, np.s_[a : a + n])
                    out[i] = buf
                else:
                    out[i] = self._buffers.take((0, ncomp), dtype)
            if raw_reads:
                with self._phase("read"):  # no HDF5 open; the first error is raised, after the others ended
                    if self._pool is None or len(raw_reads) == 1:
                        got = {i: read() for i, read in raw_reads.items()}
                    else:
                        running = {i: self._pool.submit(read) for i, read in raw_reads.items()}
                        wait(running.values())
                        got = {i: done.result() for i, done in running.items()}
                    for i, res in got.items():
                        owner, a, n = rows[i]
                        raw = self._raws[owner]
                        assert raw is not None
                        if isinstance(res, OSError):  # the mapping was refused: copied instead
                            if self._map_refused is not None:
                                self._map_refused(res)
                            res = _filled(raw, key, a, pooled(raw, a, n))
                        elif i in mapped:
                            self._mapped.append(res)
                            self.pins.append((weakref.ref(_mapped.owner_of(res)), (self.step, owner), raw.size))
                        out[i] = res
        return out

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        self._check_mesh(mesh)
        m = self.meta.meshes[mesh]
        ids = sorted(self.my_block_ids(mesh))
        wanted = check_association(m, arrays, association)
        values = {a.name: self._read(m, f"{a.association}/{a.name}", a.association, ids, a.components,
                                     dtype_of(a.dtype)) for a in wanted}
        positions = (self._read(m, "geometry/positions", "point", ids, 3, np.dtype("<f8"))
                     if m.kind == "particles" else {})
        return assemble_blocks(m, ids, wanted, values, positions)

    def close(self) -> None:
        """Close the step's files. Raises :class:`TransportError` (after closing everything) when a rank file
        read raw changed while the step was read: what was read from it may not be what was published."""
        changed, bad = [], set()
        with self._phase("close"):
            self._mapped.clear()  # unmapped here unless the analysis kept them
            for f in self._files.values():
                f.close()
            for owner, r in self._raws.items():
                if r is not None:
                    what = r.changed()
                    if what:
                        changed.append(f"{r.path} ({what})")
                        bad.add(owner)
            # what the analysis still holds becomes its own memory: no later change to the file reaches it
            for ref, (_step, owner), _size in self.pins:
                held = ref()
                if held is not None and owner not in bad:
                    try:
                        _mapped.privatize(held)
                    except OSError as e:
                        changed.append(f"a mapping of {self._raws[owner].path} cannot be made private ({e})")
            for r in self._raws.values():
                if r is not None:
                    r.close()
        self._files.clear()
        self._raws.clear()
        if changed:
            raise TransportError(f"step {self.step}: published file(s) changed while the step was read: "
                                 f"{'; '.join(changed)}; values read from them may not be the values published, so "
                                 "the stream stops here (a published step's files must never be written: docs/"
                                 "STREAM.md, \"Mapped reads\")")


class Hdf5Reader(Reader):
    """Reads the steps of an hdf5 stream as one consumer group (all ranks of ``comm``)."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        self.staging = Staging(config.filename)
        self.staging.group_path(self.settings.group)  # validates the group name on every rank
        self.info: StreamInfo | None = None
        self.events: list[dict[str, float | int]] = []
        self.discarded: list[tuple[int, str]] = []  # (step, reason) dropped by the producer
        self.missed: list[int] = []  # steps deleted before this group attached
        self._tail: IndexTail | None = None
        self._pending: list[Entry] = []
        self._next_seq = 0
        self._end_count: int | None = None
        self._state: GroupState | None = None
        self._step_t0 = 0.0
        self._seen = 0.0
        self._stopped: str | None = None  # the producer's X line: it stopped on this error
        self._last_seen: Entry | None = None  # the last P line read from the index
        self._delivered = 0
        self._last_delivered: int | None = None
        self._unsaved = False  # the group file could not be written (full file system): retried on release
        self._finished_run = ""  # a run found ended with nothing left to read: ignored until a new run starts
        self._phase = Phases()  # per-step phase times, in each released step's event ("phases")
        self._watch: DirWatch | None = None  # rank 0: wakes its polling when the staging directory changes
        self._garbage: list[Entry] = []  # rank 0: released steps not deleted yet (see _collect)
        self._buffers = ReadBuffers()  # read buffers, reused once the analysis has let go of them
        self._pool: ThreadPoolExecutor | None = None  # raw reads side by side (read_threads > 1)
        self._map: bool | None = None  # map_reads resolved (on the first raw step: "auto" asks the file system)
        self.map_refusals = 0  # mapped reads the kernel refused (copied instead)
        self._run_id = ""  # the run of the step being read (from rank 0, every rank)
        self._pins: list[tuple[weakref.ref[Any], tuple[int, int], int]] = []  # mappings still held (see _check_pins)
        self._group_lock: GroupLock | None = None  # rank 0, once attached: this group's one live consumer
        self._beat: Heartbeat | None = None  # rank 0, once attached: the group's heartbeat (consumers/<group>.hb)
        self._drop_reason = ""  # the producer had dropped this group (dead_consumer="drop") when it attached

    def _run_changed(self, run_id: str | None = None) -> str | None:
        """What replaced run ``run_id`` (default: this reader's run) in ``stream.json``, or ``None`` while it
        still names the run."""
        try:
            run = StreamInfo.load(self.staging.stream_json).run_id
        except (OSError, ValueError, TypeError, KeyError):
            return "its stream.json is gone (a new producer run is clearing the stream)"
        ours = self._run_id if run_id is None else run_id
        return None if run == ours else f"a new producer run ({run}) replaced it"

    def _replaced(self, step: int, why: str) -> str:
        return (f"step {step} of run {self._run_id} in {self.staging.root} can no longer be read: {why}; "
                "its blocks are not returned (a run's steps are only read while its stream.json names it)")

    def _check_run(self, step: int) -> None:
        """After opening a step's file: it belongs to this run unless ``stream.json`` changed. A new run
        removes ``stream.json`` before it removes any step (``Staging._clear``) and writes its steps after it
        announced itself, so a file opened while ``stream.json`` still names this run (checked after the
        open) is this run's; one opened later may be the new run's step of the same number: refused."""
        changed = self._run_changed()
        if changed is not None:
            raise TransportError(self._replaced(step, changed))

    def _check_pins(self, step: Hdf5ReadStep) -> None:
        """After a release: what the analysis still holds of mapped blocks. Each array held at its step's release
        was copied there (:func:`_mapped.privatize`): mapping it and copying it later costs more than copying it
        at once. An analysis that keeps arrays of more than about two steps (a time series of slices, a list of
        every step's field) makes this reader copy from then on."""
        self._pins = [p for p in self._pins + step.pins if p[0]() is not None]
        held = {key: size for _, key, size in self._pins}
        this_step = sum({key: size for _, key, size in step.pins}.values())
        kept = sum(held.values())
        if kept > 2 * this_step:
            self._map = False
            print(f"h5flow: hdf5 consumer rank {self.comm.rank}: the analysis keeps arrays of earlier steps "
                  f"({kept / 2**20:.0f} MiB of mapped files), each copied at its step's release; this consumer "
                  "copies blocks from now on (give map_reads=\"false\" to copy from the start)",
                  file=sys.stderr)

    def _map_refused(self, e: OSError) -> None:
        """A mapping the kernel refused: the rows were copied; said once per reader, on stderr."""
        self.map_refusals += 1
        if self.map_refusals == 1:
            print(f"h5flow: hdf5 consumer rank {self.comm.rank}: a mapped read was refused ({e}); such blocks are "
                  "copied instead (raise vm.max_map_count, or give map_reads=\"false\")", file=sys.stderr)

    # -- discovery (rank 0) ------------------------------------------------------------------------
    def _attach(self) -> bool:
        if not self.staging.root.is_dir():
            return False
        _ownership.check_dir(self.staging.root)  # another user's stream directory is never read
        if self._group_lock is None:  # one live consumer per group (rank 0 holds it while it reads)
            self._group_lock = GroupLock.acquire(self.staging.group_lock(self.settings.group), str(self.staging.root),
                                                 self.settings.group)
        try:
            info = StreamInfo.load(self.staging.stream_json)
        except FileNotFoundError:
            return False
        except (ValueError, TypeError) as e:
            raise TransportError(str(e)) from None
        if info.run_id == self._finished_run:
            return False
        state = self.staging.load_group(self.settings.group)
        known = state is not None and state.run_id == info.run_id  # this group read this run before
        if not known:
            state = GroupState(info.run_id, -1, self.comm.size)
        else:
            state.consumers = self.comm.size
        assert state is not None
        # A run that stopped on the producer's error is reported to a group that has not seen it (its ERROR
        # is what that group must learn); a run that ended normally, or one already seen, is skipped.
        if not (not known and self._stopped_on_error()) and self._nothing_left(info, state):
            # an earlier run that ended and that this group already read (or whose steps are gone): reporting
            # its end of stream would be a success on a stream this reader did not read. Wait for a new run.
            self._finished_run = info.run_id
            print(f"h5flow: {self.staging.root} holds a finished run (run {info.run_id}) with no step left for "
                  f"consumer group '{self.settings.group}'; waiting for a new producer run", file=sys.stderr,
                  flush=True)
            return False
        if self._run_changed(info.run_id) is not None:
            # a new producer run is clearing this run's files: the index and group file read above may be the
            # new run's (or missing) while ``info`` is the old one's. A new run removes stream.json before any
            # other file, so while it still names ``info``, all read above was that run's. Decide again later.
            return False
        # the group beats before it is registered: a producer never sees it registered and silent
        self._beat = Heartbeat(self.staging.group_heartbeat(self.settings.group), self.settings.heartbeat,
                               f"{socket.gethostname()} {os.getpid()} {self.comm.size}\n")
        self.info = info
        self._tail = IndexTail(self.staging.index)
        self._state = state
        self._next_seq = state.released_seq + 1  # a restarted group resumes at its first unreleased step
        if state.dropped:  # the producer let this group go while it was dead: what it deleted meanwhile is lost
            self._drop_reason, state.dropped = state.dropped, ""
            print(f"h5flow: consumer group '{self.settings.group}' was dropped by the producer ({self._drop_reason}); "
                  "it resumes at its first unreleased step still in the stream", file=sys.stderr, flush=True)
        state.heartbeat = self.settings.heartbeat
        self._save_group()
        return True

    def _stopped_on_error(self) -> bool:
        return any(e.kind == "X" for e in read_index(self.staging.index))

    def _nothing_left(self, info: StreamInfo, state: GroupState) -> bool:
        """Whether the run has ended (end of stream or the producer's error) with no step this group can still
        read: every published step already released by it, or deleted."""
        entries = read_index(self.staging.index)
        if not any(e.kind in ("E", "X") for e in entries):
            return False
        return not any(e.kind == "P" and e.seq > state.released_seq and self.staging.step_path(e.step).is_dir()
                       for e in entries)

    def _save_group(self) -> None:
        """Write the group file. Reading needs no free space: on a full file system the group reads on, deletes
        the steps it released that every other group released too (its own releases counted from memory:
        :meth:`_collect`), and retries at each release and while it waits for a step (until then the producer
        counts the group at its previous state, or, not registered yet, not at all, so steps it deletes are
        reported as ``missed``)."""
        assert self._state is not None
        try:
            self.staging.save_group(self.settings.group, self._state)
            if self._unsaved:
                print(f"h5flow: consumer group '{self.settings.group}' state saved again in {self.staging.consumers}",
                      file=sys.stderr, flush=True)
            self._unsaved = False
        except OSError as e:
            if not is_full_error(e):
                raise
            if not self._unsaved:
                print(f"h5flow: consumer group '{self.settings.group}' cannot save its state in "
                      f"{self.staging.consumers} ({e.strerror}); reading on, deleting the steps it released and "
                      "retrying at each release and while it waits", file=sys.stderr, flush=True)
            self._unsaved = True

    def _scan(self) -> _Found | None:
        assert self._tail is not None and self.info is not None
        for e in self._tail.read_new():
            if e.kind == "P":
                self._pending.append(e)
                self._last_seen = e
            elif e.kind == "D":
                self.discarded.append((e.step, e.reason))
            elif e.kind == "E":
                self._end_count = e.count
            elif e.kind == "X":
                self._stopped = e.reason
        while self._pending:
            e = self._pending[0]
            if e.seq < self._next_seq:
                self._pending.pop(0)
                continue
            if self.staging.step_path(e.step).is_dir():
                return _Found(StepStatus.OK, e, seen=time.time(), layout=self.info.layout, driver=self.info.driver)
            self._pending.pop(0)  # deleted before this group attached, or while the producer had dropped it
            if self._drop_reason:
                self.dropped.append((e.step, self._drop_reason))
            else:
                self.missed.append(e.step)
            self._next_seq = e.seq + 1
        if self._end_count is not None and self._next_seq >= self._end_count:
            return _Found(StepStatus.END_OF_STREAM)
        if self._stopped is not None:  # every step published before the error was delivered
            return _Found(StepStatus.ERROR, reason=f"the producer stopped the stream: {self._stopped}; "
                                                   f"{self._progress_text()}")
        return None

    def _progress_text(self) -> str:
        last = "none" if self._last_delivered is None else str(self._last_delivered)
        published = "none" if self._last_seen is None else f"{self._last_seen.step} (sequence {self._last_seen.seq})"
        return (f"last step delivered {last} ({self._delivered} steps delivered to this reader), "
                f"last step published {published}")

    def _poll(self, timeout: float | None) -> _Found:
        cfg = self.settings
        deadline = None if timeout is None else time.time() + timeout
        delay = cfg.poll_min
        while True:
            try:
                if self.info is not None or self._attach():
                    found = self._scan()
                    if found is not None:
                        return found
                    assert self.info is not None and self._beat is not None
                    stopped = self._beat.failure()
                    if stopped:  # the producer would take this group for dead
                        changed = self._run_changed(self.info.run_id)
                        why = "" if changed is None else f" (run {self.info.run_id} in {self.staging.root}: {changed})"
                        return _Found(StepStatus.ERROR, reason=f"consumer group '{cfg.group}': {stopped}{why}")
                    lost = self.staging.lost_producer(self.info)
                    if lost is not None:
                        found = self._scan()  # the producer may have ended just before its beat stopped
                        if found is not None:
                            return found
                        return _Found(StepStatus.ERROR, reason=f"{lost}; {self._progress_text()}")
            except (TransportError, HeartbeatError, ValueError, OSError) as e:
                return _Found(StepStatus.ERROR, reason=str(e))
            if deadline is not None and time.time() >= deadline:
                what = ("no stream yet" if self.info is None and not self._finished_run else
                        f"only a finished run (run {self._finished_run}) that consumer group '{cfg.group}' already "
                        "read, no new producer run yet" if self.info is None else
                        f"waiting for sequence {self._next_seq}")
                return _Found(StepStatus.NOT_READY, reason=f"{what} in {self.staging.root} after {timeout:g} s")
            self._wait(delay)
            delay = min(delay * 2, cfg.poll_max)

    def _keeps_all(self) -> bool:
        """Whether released steps stay: this consumer's ``keep="all"``, or the producer's, recorded in stream.json
        (a consumer may keep more than the producer asks, never less)."""
        return self.settings.keep == "all" or (self.info is not None and self.info.keep == "all")

    def _collect(self) -> None:
        """Rank 0: delete the released steps every consumer group has released.

        Deleting a step gives its pages back (~1 ms per 8 MiB on tmpfs). A consumer did it inside every
        ``release()``; it now does it when it would otherwise sleep waiting for the next step (``_wait``),
        at the latest once ``GARBAGE_BACKLOG`` released steps are waiting, and at close. A released step is
        read by nobody, so deleting it later never changes what anyone reads; the producer's quota counts
        only unreleased steps, and a producer short of room collects released steps itself."""
        if self._garbage and self.info is not None:
            garbage, self._garbage = self._garbage, []
            # a state not saved (full file system): its releases count all the same, so the steps it released
            # free the room that saving it, and the producer's next step, need
            own = (self.settings.group, self._state.released_seq) if self._unsaved and self._state else None
            self.staging.collect_garbage(self.info.run_id, garbage, own)
            if self._unsaved:
                self._save_group()

    def _wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less: until the staging directory changes (a step published, the index
        appended to), where the file system tells (inotify, same host). Idle time deletes released steps
        first (:meth:`_collect`)."""
        if self._garbage:
            self._collect()
            return  # polled again at once: the deletion took time in which the next step may have come
        if self._unsaved:  # retried while it waits too: room freed by others lets the producer count it again
            self._save_group()
        if self._watch is None and self.staging.root.is_dir():
            self._watch = DirWatch(self.staging.root)
        if self._watch is None:
            time.sleep(delay)
        else:
            self._watch.wait(delay)

    # -- the Reader contract ---------------------------------------------------------------------
    def _do_begin_step(self, timeout: float | None) -> BeginStepResult:
        comm = self.comm
        t0 = time.time()
        found = None
        self._phase.take()  # a step's phases start at its begin_step
        self._buffers.next_step()
        t_discover = time.perf_counter()
        if comm.rank == 0:
            found = self._poll(timeout)
            if found.status is StepStatus.OK:
                assert found.entry is not None
                try:
                    assert self.info is not None
                    found.run_id = self._run_id = self.info.run_id
                    found.meta_json = _safefile.read_regular(self.staging.step_path(found.entry.step) / "meta.json",
                                                             "step's meta.json").decode("utf-8", "replace")
                    self._check_run(found.entry.step)
                except TransportError as e:
                    found = _Found(StepStatus.ERROR, reason=str(e))
                except OSError as e:
                    found = _Found(StepStatus.ERROR, reason=f"step {found.entry.step} unreadable: {e}")
        found = bcast_from_root(comm, found)
        if found.status is not StepStatus.OK:
            return BeginStepResult(found.status, None, found.reason)
        self._run_id = found.run_id
        e = found.entry
        if found.driver == "subfiling" and comm.size == 1:
            # HDF5 1.14.5's subfiling VFD hangs opening a file on a single rank (measured: mpiexec -n 1
            # never returns from H5Fopen, -n 2 reads it back); refuse instead of hanging.
            return BeginStepResult(StepStatus.ERROR, None, "the stream was written with driver='subfiling', which "
                                   "HDF5 1.14.5 cannot open on a single consumer rank: use 2 or more consumer "
                                   "ranks, or driver='mpio'")
        # waiting for the step (rank 0 polls, the others sleep in the broadcast) and its meta.json
        self._phase.add("discover", time.perf_counter() - t_discover)
        meta = StepMeta.from_json(found.meta_json)
        assignment = self.assignment(meta)
        step_dir = self.staging.step_path(e.step)
        files: dict[int, h5py.File] = {}
        if found.layout == "n-1":
            with self._phase("open"):
                try:  # a FIFO or device in its place would hang the collective open on every rank
                    _safefile.check_regular(step_dir / "data.h5", "step's shared file")
                    refused = ""
                except (TransportError, FileNotFoundError) as exc:
                    refused = str(exc)
                refusals = [r for r in sleepy_allgather(comm, refused) if r]
                if refusals:
                    return BeginStepResult(StepStatus.ERROR, None, refusals[0])
                files[0] = _h5.open_shared(step_dir / "data.h5", "r", comm, found.driver)
            changed = self._run_changed()
            if comm.allreduce(changed is not None):  # every rank knows: the shared file is closed collectively
                files[0].close()
                return BeginStepResult(StepStatus.ERROR, None, self._replaced(e.step, changed or "on another rank"))

        # every file is opened when first needed, then checked to belong to this run (see _check_run)
        def open_rank_file(owner: int) -> h5py.File:
            if found.layout == "log":  # this rank's reads only, serially, through the connector
                f = _h5.open_log(step_dir / "data.h5", "r")
            else:
                _safefile.check_regular(step_dir / f"rank-{owner:05d}.h5", "rank file")
                f = h5py.File(step_dir / f"rank-{owner:05d}.h5", "r")
            try:
                self._check_run(e.step)
            except TransportError:
                f.close()
                raise
            return f

        def open_raw(owner: int) -> _h5.RawFile | None:
            r = _h5.RawFile.open(step_dir / f"rank-{owner:05d}.h5")
            try:
                self._check_run(e.step)
            except TransportError:
                if r is not None:
                    r.close()
                raise
            return r

        self._step_t0, self._seen = t0, found.seen
        raw = found.layout == "n-n" and self.settings.raw_reads
        if raw and self.settings.read_threads > 1 and self._pool is None:
            self._pool = ThreadPoolExecutor(self.settings.read_threads, thread_name_prefix="h5flow-read")
        if raw and self._map is None:
            self._map = self.settings.maps_reads(self.staging.root)
        step = Hdf5ReadStep(e.step, e.time, meta, assignment, e.seq, files, found.layout, open_rank_file, self._phase,
                            self._buffers, open_raw if raw else None, self._pool, bool(raw and self._map),
                            self._map_refused)
        self._entry = e
        return BeginStepResult(StepStatus.OK, step)

    def _do_release(self, step: ReadStep) -> None:
        assert isinstance(step, Hdf5ReadStep)
        try:
            step.close()  # collective for the shared file
            error = ""
        except TransportError as e:
            error = f"consumer rank {self.comm.rank}: {e}"
        if step.pins:
            self._check_pins(step)
        t_release = time.perf_counter()
        errors = [e for e in sleepy_allgather(self.comm, error) if e]  # the release's barrier
        if errors:  # a step whose files changed while read is not released as read: every rank stops here
            raise TransportError("; ".join(errors))
        t_barrier = time.perf_counter()
        # waiting for the other consumer ranks, most of it for the slowest one's analysis: its own phase, so
        # that the breakdown shows it apart from the release's own work
        self._phase.add("barrier", t_barrier - t_release + self.agree_seconds)  # the agreement: Reader.release
        now = time.time()
        e = self._entry
        if self.comm.rank == 0:
            assert self._state is not None and self.info is not None
            self._state.released_seq, self._state.released_step = step.seq, step.step
            self._save_group()
            if not self._keeps_all() and e is not None:
                # steps a producer's write thread (or its wait for room) deleted meanwhile are off the list
                self._garbage = [g for g in self._garbage if self.staging.step_path(g.step).exists()]
                self._garbage.append(e)
                if len(self._garbage) > GARBAGE_BACKLOG:  # no idle time came: delete now (timed here)
                    self._collect()
        self._phase.add("release", time.perf_counter() - t_barrier)
        self._next_seq = step.seq + 1
        self._delivered += 1
        self._last_delivered = step.step
        phases = self._phase.take()
        self.events.append({"step": step.step, "seq": step.seq, "published": e.published_at, "visible": self._seen,
                            "begin": self._step_t0, "released": now, "nbytes": e.nbytes, "phases": phases,
                            "barrier": phases.get("barrier", 0.0)})

    def _do_close(self) -> None:
        if self._beat is not None:  # the group stops beating: a producer waiting for it says so (dead_consumer)
            self._beat.stop()
            self._beat = None
        if self._current is not None and isinstance(self._current, Hdf5ReadStep):
            self._current.close()
        with contextlib.suppress(OSError):
            self._collect()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._buffers.clear()
        if self._group_lock is not None:
            self._group_lock.release()
            self._group_lock = None
