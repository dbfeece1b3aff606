"""The staging directory of an hdf5 stream: the on-disk protocol between producers and consumers.

Layout of ``<filename>.h5flow/`` (format version 1, documented in docs/STREAM.md)::

    stream.json              the run: run_id, producers, layout, driver, heartbeat (written last at open)
    index                    append-only log, one line per event, each written with one O_APPEND write:
                               P <seq> <step> <time> <nbytes> <publish_unix_time>   step published
                               D <step> <time> <reason...>                          step discarded
                               E <published_count>                                  end of stream
    step-<step:09d>/         a published step: data.h5 (n-1) or rank-<r:05d>.h5 (n-n), meta.json
    .step-<step:09d>.tmp/    a step being written: never looked at by consumers
    hb/<rank>                producer heartbeats: mtime refreshed every heartbeat/2 by a helper
                             process; content "host pid"
    consumers/<group>.json   per consumer group: run_id, released_seq (every seq <= it is released)

A step becomes visible by ``rename(.step-N.tmp, step-N)`` followed by its ``P`` line: a consumer only
opens steps listed in the index, so a partial step is never visible. Steps are deleted (unless
``keep="all"``) once every registered consumer group has released them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

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


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (write a temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_line(path: Path, line: str) -> None:
    """Append one complete line with a single O_APPEND write (readers never see half a line)."""
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Entry:
    kind: str  # "P", "D" or "E"
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
    format: str = FORMAT
    version: int = VERSION

    @staticmethod
    def load(path: Path) -> StreamInfo:
        d = json.loads(path.read_text())
        if d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"{path}: not an h5flow stream of format version {VERSION} (found {d.get('format')} "
                             f"version {d.get('version')})")
        return StreamInfo(**d)


@dataclass
class GroupState:
    run_id: str
    released_seq: int = -1
    consumers: int = 1
    updated: float = field(default_factory=time.time)


class Staging:
    """Paths and file operations of one staging directory."""

    def __init__(self, filename: str) -> None:
        self.root = staging_dir(filename)
        self.stream_json = self.root / "stream.json"
        self.index = self.root / "index"
        self.hb = self.root / "hb"
        self.consumers = self.root / "consumers"

    # -- producer side ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Prepare a new run: clear what an earlier run left (steps, index, groups, heartbeats).

        The run is announced by :meth:`announce` once every producer rank beats, so a consumer never
        sees a stream whose heartbeats do not exist yet.
        """
        parent = self.root.parent
        if not parent.is_dir():
            raise RuntimeError(f"the directory {parent} of the stream's filename does not exist: create it (on fast "
                               "storage: a burst buffer, NVMe, /dev/shm) or point filename elsewhere")
        self.root.mkdir(exist_ok=True)
        if self.stream_json.exists():
            self._refuse_if_live()
        self.stream_json.unlink(missing_ok=True)  # first: readers stop trusting the old run
        for p in self.root.iterdir():
            if p.name.startswith(("step-", ".step-")) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
        for p in (self.index,):
            p.unlink(missing_ok=True)
        for d in (self.hb, self.consumers):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
        self.index.touch()

    def announce(self, info: StreamInfo) -> None:
        atomic_write(self.stream_json, json.dumps(info.__dict__))

    def _refuse_if_live(self) -> None:
        try:
            old = StreamInfo.load(self.stream_json)
        except (ValueError, OSError, TypeError):
            return
        ended = any(e.kind == "E" for e in read_index(self.index))
        lost = self.lost_producer(old)
        if not ended and lost is None:
            raise RuntimeError(
                f"{self.root}: another producer (run {old.run_id}) is still writing this stream "
                "(its heartbeats are fresh and it has not ended); use another filename or stop it first"
            )

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

    def lost_producer(self, info: StreamInfo) -> str | None:
        """A reason string if a producer rank stopped beating (dead for > 1.5 heartbeats), else None."""
        limit = 1.5 * info.heartbeat
        for rank, age in self.heartbeat_ages(info.producers).items():
            if age > limit:
                what = "never started" if age == float("inf") else f"no heartbeat for {age:.2f} s"
                return f"producer rank {rank} lost: {what} (heartbeat every {info.heartbeat:g} s)"
        return None

    # -- consumer groups -------------------------------------------------------------------------
    def group_path(self, group: str) -> Path:
        return self.consumers / f"{check_group(group)}.json"

    def load_group(self, group: str) -> GroupState | None:
        try:
            return GroupState(**json.loads(self.group_path(group).read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def save_group(self, group: str, state: GroupState) -> None:
        state.updated = time.time()
        atomic_write(self.group_path(group), json.dumps(state.__dict__))

    def groups(self, run_id: str) -> dict[str, GroupState]:
        out = {}
        if self.consumers.is_dir():
            for p in self.consumers.glob("*.json"):
                st = self.load_group(p.stem)
                if st is not None and st.run_id == run_id:
                    out[p.stem] = st
        return out

    def collect_garbage(self, run_id: str, published: list[Entry]) -> None:
        """Delete every published step that all registered consumer groups have released."""
        groups = self.groups(run_id)
        if not groups:
            return
        done = min(g.released_seq for g in groups.values())
        for e in published:
            if e.seq <= done:
                p = self.step_path(e.step)
                if p.exists():
                    shutil.rmtree(p, ignore_errors=True)


class Heartbeat:
    """A helper process that refreshes ``hb/<rank>`` while this process lives.

    A separate process rather than a thread: a thread would starve while this process sits in a long
    MPI or HDF5 call holding the GIL, and a starved heartbeat would look like a crash. The helper
    exits by itself when its parent dies, so a killed producer stops beating at once.
    """

    _SCRIPT = (
        "import os,sys,time\n"
        "path,period,parent=sys.argv[1],float(sys.argv[2]),int(sys.argv[3])\n"
        "while os.getppid()==parent:\n"
        "    try:\n"
        "        os.utime(path)\n"
        "    except FileNotFoundError:\n"
        "        break\n"
        "    time.sleep(period)\n"
    )

    def __init__(self, path: Path, interval: float) -> None:
        path.write_text(f"{socket.gethostname()} {os.getpid()}\n")
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self._SCRIPT, str(path), str(interval / 2), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, env={"PATH": os.environ.get("PATH", "")},
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def new_run_id() -> str:
    return uuid.uuid4().hex
