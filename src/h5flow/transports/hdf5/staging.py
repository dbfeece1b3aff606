"""The staging directory of an hdf5 stream: the on-disk protocol between producers and consumers.

Layout of ``<filename>.h5flow/`` (format version 1, documented in docs/STREAM.md)::

    stream.json              the run: run_id, producers, layout, driver, heartbeat (written last at open)
    index                    append-only log, one line per event, each written with one O_APPEND write:
                               P <seq> <step> <time> <nbytes> <publish_unix_time>   step published
                               D <step> <time> <reason...>                          step discarded
                               E <published_count>                                  end of stream
                               X <time> <reason...>                                 producer stopped on an error
    step-<step:09d>/         a published step: data.h5 (n-1) or rank-<r:05d>.h5 (n-n), meta.json
    .step-<step:09d>.tmp/    a step being written: never looked at by consumers
    hb/<rank>                producer heartbeats: mtime refreshed every heartbeat/2 by a helper
                             process while the producer makes progress; content "host pid"
    hb/<rank>.error          the error producer rank <rank> stopped on (written as it leaves)
    hb/<rank>.stalled        the lease that rank overran (what it was doing); hb/<rank>.log: its helper's stderr
    owner                    the producer's claim: flock-ed by producer rank 0 while it runs; content: who
    .reserve                 a small preallocated file freed to make room for the last index lines when
                             the file system is full
    consumers/<group>.json   per consumer group: run_id, released_seq (every seq <= it is released), released_step,
                             heartbeat, dropped (why the producer let the group go; then it holds no step back)
    consumers/<group>.hb     the group's heartbeat: mtime refreshed every heartbeat/2 by consumer rank 0's helper
                             process while the group reads; content "host pid ranks"

A step becomes visible by ``rename(.step-N.tmp, step-N)`` followed by its ``P`` line: a consumer only
opens steps listed in the index, so a partial step is never visible. Steps are deleted (unless
``keep="all"``) once every registered consumer group has released them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from h5flow._fileio import atomic_write  # noqa: F401 - re-exported: staging writes through it
from h5flow.transports import _ownership
from h5flow.transports._claim import Claim, ClaimError
from h5flow.transports._common import check_group

FORMAT = "h5flow-stream"
VERSION = 1
SUFFIX = ".h5flow"


def staging_dir(filename: str) -> Path:
    if not filename:
        raise ValueError("the hdf5 transport needs a filename (the stream's path prefix)")
    return Path(filename + SUFFIX)


def step_dir_name(step: int) -> str:
    return f"step-{step:09d}"


#: errno values that mean "the file system has no room for this": full, over quota, file size limit
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_FULL_TEXT = tuple(os.strerror(e) for e in FULL_ERRNOS)  # as HDF5 and MPI-IO quote them in their messages
EMERGENCY_RESERVE = 64 * 1024
#: a step's room is allocated for real (``posix_fallocate``) only when the file system's free space is below
#: this many times what the step needs, or the step is larger than the file size limit: on tmpfs an
#: allocation zeroes its pages, which costs as much as writing the step (measured: 32 MiB in 78-88 ms, a write
#: of them 88 ms), and producer rank 0 did it for the whole step before any rank wrote
RESERVE_FACTOR = 4


def is_full_error(e: BaseException) -> bool:
    """Whether ``e`` says the file system is out of space, over quota, or over the file size limit
    (an ``OSError`` with that errno, or an HDF5/MPI-IO error quoting its text)."""
    if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
        return True
    return any(t in str(e) for t in _FULL_TEXT)


def is_waitable_full_error(e: BaseException) -> bool:
    """A full file system or quota (room may come back) rather than a file size limit (it will not)."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(os.strerror(n) in str(e) for n in (errno.ENOSPC, errno.EDQUOT))


def _file_size_limit() -> float:
    """This process's ``RLIMIT_FSIZE`` soft limit in bytes (infinite when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return float("inf") if soft == resource.RLIM_INFINITY else float(soft)


def free_bytes(path: Path) -> int:
    """Bytes available to this user on the file system of ``path`` (-1 when unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


def capacity_bytes(path: Path) -> int:
    """Size of the file system of ``path`` as this user can use it (-1 when unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return (st.f_blocks - (st.f_bfree - st.f_bavail)) * st.f_frsize


def append_line(path: Path, line: str) -> None:
    """Append one complete line with a single O_APPEND write (readers never see half a line).

    A write that fails or is cut short (a full file system) is undone: the file is truncated back to
    its previous length, so no partial line stays in the log, and ``OSError`` is raised.
    """
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _ownership.PRIVATE_FILE)
    try:
        size = os.fstat(fd).st_size  # only one process (producer rank 0) appends
        try:
            n = os.write(fd, data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (wrote {n} of {len(data)} bytes)",
                              str(path))
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


@dataclass
class Entry:
    kind: str  # "P", "D", "E" or "X"
    seq: int = -1
    step: int = -1
    time: float = 0.0
    nbytes: int = 0
    published_at: float = 0.0
    reason: str = ""
    count: int = 0  # E: steps published


def parse_line(line: str) -> Entry:
    parts = line.split()
    if parts[0] == "P" and len(parts) == 6:
        return Entry("P", int(parts[1]), int(parts[2]), float(parts[3]), int(parts[4]), float(parts[5]))
    if parts[0] == "D" and len(parts) >= 3:
        return Entry("D", step=int(parts[1]), time=float(parts[2]), reason=" ".join(parts[3:]))
    if parts[0] == "E" and len(parts) == 2:
        return Entry("E", count=int(parts[1]))
    if parts[0] == "X" and len(parts) >= 3:
        return Entry("X", time=float(parts[1]), reason=" ".join(parts[2:]))
    raise ValueError(f"corrupt stream index line: {line!r}")


class IndexTail:
    """Incrementally reads new complete lines of the index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read_new(self) -> list[Entry]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [parse_line(raw.decode()) for raw in lines if raw.strip()]


def read_index(path: Path) -> list[Entry]:
    return IndexTail(path).read_new()


@dataclass
class StreamInfo:
    run_id: str
    producers: int
    layout: str
    driver: str
    heartbeat: float
    created: float
    #: the producer's ``keep``: "all" keeps every step for good, and no consumer deletes one ("released" when
    #: a stream.json has no such key, as those written before it)
    keep: str = "released"
    format: str = FORMAT
    version: int = VERSION

    @staticmethod
    def load(path: Path) -> StreamInfo:
        d = json.loads(path.read_text())
        if d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"{path}: not an h5flow stream of format version {VERSION} (found {d.get('format')} "
                             f"version {d.get('version')})")
        if d.get("keep", "released") not in ("released", "all"):
            raise ValueError(f"{path}: keep {d.get('keep')!r}; accepted: released, all")
        return StreamInfo(**d)


@dataclass
class GroupState:
    run_id: str
    released_seq: int = -1
    consumers: int = 1
    updated: float = field(default_factory=time.time)
    released_step: int = -1  # the step of released_seq (for messages)
    heartbeat: float = 0.0  # the group beats consumers/<group>.hb every heartbeat/2 (0: it does not beat)
    dropped: str = ""  # why the producer dropped the group (dead_consumer="drop"); "" while it counts


class Staging:
    """Paths and file operations of one staging directory."""

    def __init__(self, filename: str) -> None:
        self.root = staging_dir(filename)
        self.stream_json = self.root / "stream.json"
        self.index = self.root / "index"
        self.hb = self.root / "hb"
        self.consumers = self.root / "consumers"
        self.owner = self.root / "owner"
        self.emergency = self.root / ".reserve"
        self.space = self.root / ".space"
        self.claim: Claim | None = None

    # -- producer side ---------------------------------------------------------------------------
    def _check_parent(self) -> None:
        parent = self.root.parent
        if not parent.is_dir():
            raise RuntimeError(f"the directory {parent} of the stream's filename does not exist: create it (on fast "
                               "storage: a burst buffer, NVMe, /dev/shm) or point filename elsewhere")

    def claim_stream(self, run_id: str = "") -> Claim:
        """Claim the stream for this process (atomic; :class:`ClaimError` names the current owner)."""
        self._check_parent()
        _ownership.make_dir(self.root)  # private (0700); refused when another user's or writable by others
        if self.claim is None or not self.claim.held:
            self.claim = Claim.acquire(self.owner, f"stream {self.root}", run_id)
        return self.claim

    def release_claim(self) -> None:
        if self.claim is not None:
            self.claim.release()

    def reset(self, run_id: str = "") -> None:
        """Claim the stream and prepare a new run: clear what an earlier run left (steps, index, groups,
        heartbeats). Raises :class:`ClaimError` when another producer holds the stream.

        The run is announced by :meth:`announce` once every producer rank beats, so a consumer never
        sees a stream whose heartbeats do not exist yet.
        """
        self.claim_stream(run_id)
        try:
            if self.stream_json.exists():
                self._refuse_if_live()
            self._clear()
            self.index.touch()
            self._make_emergency_reserve()
        except BaseException:
            self.release_claim()
            raise

    def clear(self) -> None:
        """Remove an earlier run's files (for ``h5flow run`` before it launches): refused while a producer
        holds the stream; the claim is taken for the time of the removal only."""
        if not self.root.is_dir():
            return
        self.claim_stream()
        try:
            if self.stream_json.exists():
                self._refuse_if_live()
            self._clear()
            for d in (self.hb, self.consumers):
                d.rmdir()
        finally:
            self.release_claim()

    def _clear(self) -> None:
        self.stream_json.unlink(missing_ok=True)  # first: readers stop trusting the old run
        for p in self.root.iterdir():
            if p.name.startswith(("step-", ".step-")) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        for p in (self.index, self.emergency, self.space):
            p.unlink(missing_ok=True)
        for d in (self.hb, self.consumers):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(mode=_ownership.PRIVATE_DIR)

    def announce(self, info: StreamInfo) -> None:
        atomic_write(self.stream_json, json.dumps(info.__dict__))

    def _refuse_if_live(self) -> None:
        """Second line behind the claim (whose ``flock`` may not reach across hosts on every file system):
        a run that has not ended and whose producer ranks all beat is live."""
        try:
            old = StreamInfo.load(self.stream_json)
        except (ValueError, OSError, TypeError):
            return
        ended = any(e.kind in ("E", "X") for e in read_index(self.index))
        lost = self.lost_producer(old)
        if not ended and lost is None:
            try:
                host, pid = (self.hb / "0").read_text().split()[:2]
                who = f"host {host}, pid {pid}, "
            except (OSError, ValueError):
                who = ""
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(old.created))
            raise ClaimError(
                f"{self.root}: another producer ({who}started {started}, run {old.run_id}) is still writing this "
                "stream (its heartbeats are fresh and it has not ended); use another filename or stop it first",
                None)

    # -- room on a full file system --------------------------------------------------------------
    def _make_emergency_reserve(self) -> None:
        """Preallocate :data:`EMERGENCY_RESERVE` bytes, freed when an index line finds no room."""
        try:
            fd = os.open(self.emergency, os.O_WRONLY | os.O_CREAT, _ownership.PRIVATE_FILE)
            try:
                os.posix_fallocate(fd, 0, EMERGENCY_RESERVE)
            finally:
                os.close(fd)
        except OSError as e:
            self.emergency.unlink(missing_ok=True)
            if is_full_error(e):
                raise OSError(e.errno, f"no room for the stream in {self.root} "
                              f"({free_bytes(self.root)} bytes free): {e.strerror}") from None
            # a file system without fallocate: go on without the reserve

    def append(self, line: str) -> None:
        """Append an index line; when the file system is full, free the emergency reserve and retry once."""
        try:
            append_line(self.index, line)
        except OSError as e:
            if not is_full_error(e) or not self.emergency.exists():
                raise
            self.emergency.unlink(missing_ok=True)
            append_line(self.index, line)

    def reserve_space(self, nbytes: int) -> str:
        """Allocate ``nbytes`` for the next step (kept until :meth:`release_space`): "" on success, else why
        not (the file system is full, over quota or over the file size limit).

        With plenty of room (free space at least :data:`RESERVE_FACTOR` times ``nbytes``, and ``nbytes``
        within this process's file size limit) nothing is allocated: the allocation would cost as much as the
        write. A write that finds the file system full anyway (a quota, which ``statvfs`` does not show, or
        space taken by others meanwhile) is caught by the writer's failed-write path: nothing is published,
        and with ``queue_policy="block"`` the step is retried once there is room."""
        self.release_space()
        free = free_bytes(self.root)
        if free >= RESERVE_FACTOR * max(1, nbytes) and nbytes <= _file_size_limit():
            return ""
        try:
            fd = os.open(self.space, os.O_WRONLY | os.O_CREAT, _ownership.PRIVATE_FILE)
            try:
                os.posix_fallocate(fd, 0, max(1, nbytes))
            finally:
                os.close(fd)
        except OSError as e:
            self.release_space()
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # cannot tell: let the write find out
                return ""
            return f"{e.strerror or e}" + ("" if is_waitable_full_error(e) else " (waiting does not help)")
        return ""

    def release_space(self) -> None:
        self.space.unlink(missing_ok=True)

    def tmp_step(self, step: int) -> Path:
        return self.root / f".{step_dir_name(step)}.tmp"

    def step_path(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    # -- heartbeats ------------------------------------------------------------------------------
    def heartbeat_ages(self, producers: int) -> dict[int, float]:
        now = time.time()
        ages = {}
        for r in range(producers):
            try:
                ages[r] = now - (self.hb / str(r)).stat().st_mtime
            except FileNotFoundError:
                ages[r] = float("inf")
        return ages

    def record_failure(self, rank: int, reason: str) -> None:
        """Producer ``rank`` stops on an error: ``hb/<rank>.error`` holds why, as the line consumers report
        (``producer rank R failed: ...``; best effort: a full file system leaves consumers with "lost")."""
        with contextlib.suppress(OSError):
            atomic_write(self.hb / f"{rank}.error", reason)

    def failure_of(self, rank: int) -> str:
        """The reason producer ``rank`` recorded when it stopped on an error ("" when none)."""
        try:
            return (self.hb / f"{rank}.error").read_text().strip()
        except OSError:
            return ""

    def lost_producer(self, info: StreamInfo) -> str | None:
        """A reason string if a producer rank stopped beating (dead for > 1.5 heartbeats), else None: the error
        it stopped on when it recorded one (``producer rank R failed: ...``), else what is known of its end."""
        limit = 1.5 * info.heartbeat
        for rank, age in self.heartbeat_ages(info.producers).items():
            if age > limit:
                failed = self.failure_of(rank)
                if failed:  # the agreed line (it may name another rank: the one that failed first)
                    return failed if failed.startswith("producer rank ") else f"producer rank {rank} failed: {failed}"
                what = "never started" if age == float("inf") else f"no heartbeat for {age:.2f} s"
                try:
                    stalled = (self.hb / f"{rank}.stalled").read_text().strip()
                    what += f", stalled: no progress in {stalled}" if stalled else ", stalled"
                except OSError:
                    pass
                return f"producer rank {rank} lost: {what} (heartbeat every {info.heartbeat:g} s)"
        return None

    # -- consumer groups -------------------------------------------------------------------------
    def group_path(self, group: str) -> Path:
        return self.consumers / f"{check_group(group)}.json"

    def group_lock(self, group: str) -> Path:
        """The lock file the group's live consumer holds (outside ``consumers/``, which a new run clears)."""
        return self.root / f".consumer-{check_group(group)}.lock"

    def load_group(self, group: str) -> GroupState | None:
        try:
            return GroupState(**json.loads(self.group_path(group).read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def save_group(self, group: str, state: GroupState) -> None:
        state.updated = time.time()
        atomic_write(self.group_path(group), json.dumps(state.__dict__))

    def groups(self, run_id: str) -> dict[str, GroupState]:
        """The consumer groups of run ``run_id`` that hold steps back (a group the producer dropped does not)."""
        out = {}
        if self.consumers.is_dir():
            for p in self.consumers.glob("*.json"):
                st = self.load_group(p.stem)
                if st is not None and st.run_id == run_id and not st.dropped:
                    out[p.stem] = st
        return out

    def group_heartbeat(self, group: str) -> Path:
        return self.consumers / f"{check_group(group)}.hb"

    def dead_group(self, group: str, state: GroupState, now: float) -> str:
        """What is known of ``group`` if it stopped beating (no beat for more than 1.5 of its heartbeats), else
        "". A group that does not beat (``state.heartbeat`` 0) is never judged."""
        if state.heartbeat <= 0:
            return ""
        path = self.group_heartbeat(group)
        try:
            age = now - path.stat().st_mtime
            who = path.read_text().split()
        except (OSError, ValueError):
            age, who = float("inf"), []
        if age <= 1.5 * state.heartbeat:
            return ""
        rank0 = f"its rank 0 was pid {who[1]} on {who[0]}, " if len(who) >= 2 else ""
        since = "never beat" if age == float("inf") else f"no heartbeat for {age:.1f} s"
        last = "none" if state.released_seq < 0 else f"{state.released_step} (sequence {state.released_seq})"
        return (f"consumer group {group!r} stopped beating ({since}, heartbeat every {state.heartbeat:g} s; "
                f"{rank0}{state.consumers} rank(s)); last step it released: {last}")

    def released_seq(self, run_id: str, groups: dict[str, GroupState] | None = None) -> float:
        """Every seq up to this one is released: the slowest counting group's ``released_seq``; -1 when no group
        registered yet (steps wait for the first one); infinite when every group registered was dropped."""
        groups = self.groups(run_id) if groups is None else groups
        if groups:
            return min(g.released_seq for g in groups.values())
        if self.consumers.is_dir() and any(st is not None and st.run_id == run_id and st.dropped for st in
                                           (self.load_group(p.stem) for p in self.consumers.glob("*.json"))):
            return float("inf")
        return -1

    def released_on_disk(self, run_id: str, published: list[Entry], own: tuple[str, int] | None = None) -> list[int]:
        """The published steps every registered consumer group has released that are still on disk. ``own``: a
        consumer group's name and the ``released_seq`` it knows in memory but could not save (a full file
        system): its own releases count, so it can free the room that saving them needs."""
        groups = None
        if own is not None:
            groups = self.groups(run_id)
            name, seq = own
            mine = groups.get(name)
            groups[name] = GroupState(run_id, released_seq=max(seq, mine.released_seq if mine else -1))
        done = self.released_seq(run_id, groups)
        if done < 0:
            return []
        return [e.step for e in published if e.seq <= done and self.step_path(e.step).exists()]

    def gc_path(self, step: int) -> Path:
        """Where a released step's directory is renamed to while it is being deleted (cleared with the run)."""
        return self.root / f".{step_dir_name(step)}.gc"

    def retire_released(self, run_id: str, published: list[Entry], own: tuple[str, int] | None = None) -> list[int]:
        """Rename every released step still in the stream out of it (:meth:`gc_path`): one atomic rename each, so
        a consumer group attaching meanwhile sees a whole step or none of it, never one half-deleted in place.
        Returns the steps renamed; another process (a consumer's collection) may have taken one first."""
        out = []
        for step in self.released_on_disk(run_id, published, own):
            gc = self.gc_path(step)
            if gc.exists():  # left by a collector that died: garbage by definition
                shutil.rmtree(gc, ignore_errors=True)
            try:
                os.replace(self.step_path(step), gc)
            except OSError:
                continue
            out.append(step)
        return out

    def remove_retired(self, steps: list[int]) -> None:
        for step in steps:
            shutil.rmtree(self.gc_path(step), ignore_errors=True)

    def collect_garbage(self, run_id: str, published: list[Entry], own: tuple[str, int] | None = None) -> None:
        """Delete every published step that all registered consumer groups have released (``own``: see
        :meth:`released_on_disk`)."""
        self.remove_retired(self.retire_released(run_id, published, own))


class DirWatch:
    """Wait until a file in one directory changes, or a timeout passes (Linux ``inotify`` through libc).

    A consumer waiting for the next step wakes the moment the index is appended to (or a step directory is
    renamed into place) instead of at its next polling interval, which added up to ``poll_max`` per step.
    Only changes made on this host are seen (a remote writer on a parallel file system is not), so the
    callers keep their polling interval as the timeout. Where inotify is unavailable it only sleeps."""

    _MASK = 0x2 | 0x8 | 0x80 | 0x100  # IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

    def __init__(self, directory: Path) -> None:
        self.fd = -1
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory), self._MASK) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):  # no libc inotify (not Linux): sleep instead
            self.fd = -1

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when something in the directory changed (events drained)."""
        if self.fd < 0:
            time.sleep(timeout)
            return False
        import select

        ready = select.select([self.fd], [], [], timeout)[0]
        if ready:
            try:
                while os.read(self.fd, 65536):
                    pass
            except BlockingIOError:
                pass
        return bool(ready)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class HeartbeatError(RuntimeError):
    """The heartbeat helper did not start, or stopped while its process runs."""


class Heartbeat:
    """A helper process that refreshes a heartbeat file (``hb/<rank>`` of a producer rank,
    ``consumers/<group>.hb`` of a consumer group) while this process makes progress.

    A separate process rather than a thread: a thread would starve while this process sits in a long
    MPI or HDF5 call holding the GIL, and a starved heartbeat would look like a crash. The helper is this
    same interpreter (``sys.executable``) started with this process's whole environment, so it starts
    wherever this process did (an interpreter that finds ``libpython`` or its modules only through
    ``LD_LIBRARY_PATH``, ``PYTHONHOME`` or ``PYTHONPATH`` included). It exits by itself when its parent dies
    (its stdin pipe closes or its parent pid changes), so a killed process stops beating at once.

    It cannot fail silently: the file's mtime is set back to 0 before the helper starts, and the constructor
    returns only once the helper has moved it (else :class:`HeartbeatError` with what the helper said on
    stderr, kept in ``<file>.log``); :meth:`failure` tells a helper that stopped since.

    "Alive" is not enough: a producer deadlocked inside a collective HDF5 call is alive for ever. Before
    such a call the producer sets a *lease* (:meth:`expect_progress`): if it has not come back within
    that many seconds the helper stops beating and writes ``<file>.stalled`` (what it was doing), so
    consumers report the producer lost instead of waiting for it. :meth:`progress_done` lifts the lease.
    """

    _SCRIPT = (
        "import os,select,sys,time\n"
        "path,period,parent,ino=sys.argv[1],float(sys.argv[2]),int(sys.argv[3]),sys.argv[4]\n"
        "fd=sys.stdin.fileno()\n"
        "deadline,what,buf,stalled=None,'',b'',False\n"
        "def gone(why):\n"
        "    sys.exit('h5flow heartbeat helper (pid %d): heartbeat file %s %s; it is no longer the one '\n"
        "             'this helper beats for (a new run of the stream cleared or rewrote it), so it stops'\n"
        "             % (os.getpid(),path,why))\n"
        "try:\n"
        "    hb=os.open(path,os.O_RDONLY)\n"
        "except FileNotFoundError:\n"
        "    gone('was removed before the helper started')\n"
        "def same(st):\n"
        "    return '%d:%d'%(st.st_dev,st.st_ino)==ino\n"
        "if not same(os.fstat(hb)):\n"
        "    gone('was replaced before the helper started')\n"
        "while os.getppid()==parent:\n"
        "    if deadline is None or time.time()<deadline:\n"
        "        try:\n"
        "            st=os.stat(path)\n"
        "        except FileNotFoundError:\n"
        "            gone('was removed')\n"
        "        if not same(st):\n"
        "            gone('was replaced by another file')\n"
        "        os.utime(hb)\n"
        "    elif not stalled:\n"
        "        stalled=True\n"
        "        try:\n"
        "            with open(path+'.stalled','w') as f:\n"
        "                f.write(what+'\\n')\n"
        "        except OSError:\n"
        "            pass\n"
        "    r=select.select([fd],[],[],period)[0]\n"
        "    if r:\n"
        "        data=os.read(fd,4096)\n"
        "        if not data:\n"
        "            break\n"
        "        buf+=data\n"
        "        *lines,buf=buf.split(b'\\n')\n"
        "        for line in lines:\n"
        "            secs,_,what=line.decode().partition(' ')\n"
        "            deadline=None if float(secs)<0 else time.time()+float(secs)\n"
        "            if stalled:\n"
        "                stalled=False\n"
        "                try:\n"
        "                    os.unlink(path+'.stalled')\n"
        "                except OSError:\n"
        "                    pass\n"
    )
    #: the helper must have beaten once within this many seconds (or this many heartbeats, if longer)
    START_BOUND = 30.0

    def __init__(self, path: Path, interval: float, content: str = "") -> None:
        path.write_text(content or f"{socket.gethostname()} {os.getpid()}\n")
        os.utime(path, (0, 0))  # the helper's first beat moves it: the proof that it runs
        Path(f"{path}.stalled").unlink(missing_ok=True)
        self.path = path
        self.interval = interval
        self.err = Path(f"{path}.log")
        self._stopped = False
        if not sys.executable:
            raise HeartbeatError(f"cannot start the heartbeat helper for {path}: this Python does not know its "
                                 "interpreter (sys.executable is empty, as in some embedded interpreters)")
        st = path.stat()  # the helper beats this file only: one that replaces it is another run's
        # kept open: what the helper said stays readable even when a new run removes the file's directory
        self._err = open(self.err, "w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self._SCRIPT, str(path), str(interval / 2), str(os.getpid()),
             f"{st.st_dev}:{st.st_ino}"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._err, close_fds=True,
        )
        # a reader or writer left unclosed (or the interpreter exiting) still ends and reaps its helper
        self._finalizer = weakref.finalize(self, _end_helper, self.proc, self._err)
        bound = max(self.START_BOUND, 10 * interval)
        deadline = time.monotonic() + bound
        while self._mtime() <= 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                what = (f"exited with status {self.proc.returncode}" if self.proc.poll() is not None
                        else f"did not beat within {bound:g} s")
                said = self._said()
                self.stop()
                raise HeartbeatError(
                    f"the heartbeat helper ({sys.executable} -c ..., started with this process's environment) "
                    f"{what}{said}; without it the stream's peers would report this process lost after "
                    f"{1.5 * interval:g} s")
            time.sleep(0.005)

    def _mtime(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return -1.0

    def _said(self) -> str:
        """What the helper wrote on stderr (its last lines), as ``": ..."``, or ""."""
        try:  # from the open file, not its path: a new run may have removed the path
            text = os.pread(self._err.fileno(), 1 << 16, 0).decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        if not text:
            return ""
        lines = text.splitlines()
        return ": " + " | ".join(lines[-3:])[-600:]

    def failure(self) -> str:
        """"" while the helper runs, else why it stopped (its exit status and last words): this process goes on
        but no longer beats, so its peers will report it lost."""
        if self._stopped or self.proc.poll() is None:
            return ""
        return (f"its heartbeat helper (pid {self.proc.pid}) stopped with status {self.proc.returncode}"
                f"{self._said()}; {self.path} is no longer refreshed, so the stream's peers report this process "
                "lost")

    def _tell(self, line: str) -> None:
        if self.proc.stdin is None or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write((line.replace("\n", " ") + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def expect_progress(self, seconds: float, what: str) -> None:
        """Stop beating unless :meth:`progress_done` (or another lease) comes within ``seconds``."""
        self._tell(f"{max(seconds, 0.0)!r} {what}")

    def progress_done(self) -> None:
        """Lift the lease: beat while this process lives."""
        self._tell("-1")

    def stop(self) -> None:
        self._stopped = True
        self._finalizer()


def _end_helper(proc: subprocess.Popen, err: BinaryIO) -> None:
    """Stop a heartbeat helper, reap it and close the file of what it said."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    err.close()


def new_run_id() -> str:
    return uuid.uuid4().hex
