"""What a query or an index reads: a native HDF5 file or an h5flow_log container (a directory).

Containers are read through h5py with the h5flow_log VOL connector, selected by the file access list
(:mod:`h5flow.connectors.logvol`): in any process, whatever ``HDF5_VOL_CONNECTOR`` says. Index sidecars
are native HDF5 files, opened with the native connector explicitly so that they stay ordinary ``.h5``
files in a process whose environment names h5flow_log.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import hashlib
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h5flow.connectors import logvol
from h5flow.connectors.h5flow_log import MARKER

if TYPE_CHECKING:
    import h5py

is_container = logvol.is_container


def container_env_active() -> bool:
    """Whether this process's environment makes h5flow_log HDF5's default connector (files opened by name,
    without a file access list, are then containers)."""
    return os.environ.get("HDF5_VOL_CONNECTOR", "").split(" ")[0] == "h5flow_log"


@dataclass(frozen=True)
class Source:
    """One file or container, by absolute path."""

    path: Path
    container: bool

    @staticmethod
    def of(path: str | os.PathLike[str]) -> Source:
        p = Path(path).resolve()
        if not p.exists():
            raise FileNotFoundError(f"{path}: no such file or h5flow_log container")
        if p.is_dir():
            if not is_container(p):
                raise ValueError(f"{path} is a directory but not an h5flow_log container (no {MARKER})")
            return Source(p, True)
        return Source(p, False)

    def open(self) -> h5py.File:
        import h5py

        if self.container:
            return logvol.open_container(self.path, "r")
        if container_env_active():
            return native_file(self.path, "r")
        # h5py.File's defaults (sec2, libver earliest..latest), with a file access list made once
        return h5py.File(h5py.h5f.open(os.fsencode(self.path), h5py.h5f.ACC_RDONLY, fapl=_read_fapl()))

    def open_kept(self) -> tuple[h5py.File, Any]:
        """The file opened read-only for a query, and what to close when the query's result is closed: a
        lease on a handle kept open between queries (:func:`kept_file`) where that is safe, else the file."""
        if not self.container and not container_env_active() and KEEP_OPEN[0] > 0:
            lease = kept_file(self.path)
            if lease is not None:
                return lease.file, lease
        f = self.open()
        return f, f

    def fingerprint(self, dset_path: str) -> str:
        """A token that changes whenever the dataset's data can have changed (docs/QUERY.md, 'Stale')."""
        if not self.container:
            # ctime: a write whose mtime was set back (rsync -a, cp -p, os.utime) still moves it; the inode:
            # another file renamed into this one's place
            st = self.path.stat()
            return (f"native:size={st.st_size}:mtime_ns={st.st_mtime_ns}:ctime_ns={st.st_ctime_ns}"
                    f":dev={st.st_dev}:ino={st.st_ino}")
        d = _container_dir(self.path, dset_path)
        h = hashlib.sha256()
        for c in sorted(d.iterdir()):
            if c.is_file() and not c.name.startswith(("@attr.", "@acrt.")):
                st = c.stat()
                h.update(f"{c.name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino};"
                         .encode("utf-8", "surrogateescape"))
        return f"h5flow_log:{h.hexdigest()[:32]}"


_FAPL: list[Any] = []


def _read_fapl() -> Any:
    """The file access property list h5py.File(path, "r") would make, made once (it costs as much as a
    third of opening the file)."""
    if not _FAPL:
        import h5py

        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
        _FAPL.append(fapl)
    return _FAPL[0]


def _container_dir(root: Path, dset_path: str) -> Path:
    from h5flow.connectors.h5flow_log import unescape

    d = root
    for comp in [c for c in dset_path.split("/") if c]:
        match = next((c for c in d.iterdir() if c.is_dir() and unescape(c.name) == comp), None)
        if match is None:
            raise KeyError(f"{dset_path}: not found in container {root}")
        d = match
    return d


# ---------------------------------------------------------------- native files whatever the environment


def native_file(path: str | os.PathLike[str], mode: str, locking: bool = True) -> h5py.File:
    """Open (``r``, ``r+``) or create (``w``) a native HDF5 file even when HDF5_VOL_CONNECTOR names another.
    ``locking=False``: without HDF5's file lock (for read-only handles kept between calls)."""
    import h5py

    if not container_env_active():
        return h5py.File(path, mode) if locking else h5py.File(path, mode, locking=False)
    return logvol.open_native(path, mode, locking=locking)


# ---------------------------------------------------------------- data files kept open between queries

#: how many data files queries keep open (least recently used closed first); 0: none, every query opens and
#: closes its file. ``H5FLOW_QUERY_KEEP_OPEN=0`` in the environment, or :func:`keep_files_open`, sets it.
KEEP_OPEN = [int(os.environ.get("H5FLOW_QUERY_KEEP_OPEN", "4") or 0)]
#: a file whose status changed (ctime) less than this before it was opened is not kept: a write within the
#: file system's timestamp granularity of the open could leave its size, mtime and ctime as they were
RACY_NS = 2_000_000_000


def _file_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Kept:
    """One kept handle: the file version it was opened on, and the queries using it."""

    __slots__ = ("key", "file", "users", "dropped", "fid")

    def __init__(self, key: tuple[int, ...], file: h5py.File) -> None:
        self.key, self.file, self.users, self.dropped = key, file, 0, False
        self.fid = file.id

    def release(self) -> None:
        with _KEPT_LOCK:
            self.users -= 1
            if self.dropped and self.users <= 0:
                self._close()

    def drop(self) -> None:
        """Out of the cache: closed now, or when the last query using it is closed."""
        self.dropped = True
        if self.users <= 0:
            self._close()

    def _close(self) -> None:
        try:
            self.file.close()
        except Exception:  # noqa: BLE001
            pass


class _Lease:
    """What a query result holds on a kept handle (``close()`` gives it back)."""

    __slots__ = ("kept", "file")

    def __init__(self, kept: _Kept) -> None:
        self.kept, self.file = kept, kept.file

    def close(self) -> None:
        if self.kept is not None:
            self.kept.release()
            self.kept = None  # type: ignore[assignment]


_KEPT: OrderedDict[str, _Kept] = OrderedDict()
_KEPT_LOCK = threading.RLock()


def keep_files_open(n: int) -> int:
    """Keep up to ``n`` data files open between queries (0: none; the kept ones are closed). Returns the
    previous setting."""
    old = KEEP_OPEN[0]
    KEEP_OPEN[0] = max(0, int(n))
    with _KEPT_LOCK:
        while len(_KEPT) > KEEP_OPEN[0]:
            _KEPT.popitem(last=False)[1].drop()
    return old


def forget_open_files() -> None:
    """Close the data files kept open between queries (those still used by a result close with it)."""
    with _KEPT_LOCK:
        while _KEPT:
            _KEPT.popitem(last=False)[1].drop()


atexit.register(forget_open_files)

_LOG_FAPL: list[Any] = []


def _kept_fapl() -> Any:
    """h5py.File's defaults, but the ``log`` driver with nothing logged, and no file lock held.

    The driver: HDF5 shares one open file between opens of it through the same driver in a process, and a
    read-only open shared that way makes a later ``h5py.File(path, "r+" / "a" / "w")`` of the user fail
    ("already open for read-only" / "unable to truncate a file which is already open"); through another
    driver HDF5 opens the file separately, so the user's opens are not affected. It reads with ``pread``
    like sec2. The lock: a read-only HDF5 open holds a shared ``flock`` until it is closed, which would
    make writers in other processes fail for as long as the handle is kept; :func:`kept_file` checks the
    lock at open instead (as HDF5 would) and holds none."""
    if not _LOG_FAPL:
        import h5py

        from h5flow import _hdf5lib

        lib = _hdf5lib.lib()
        lib.H5Pset_fapl_log.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_size_t]
        lib.H5Pset_fapl_log.restype = ctypes.c_int
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
        if lib.H5Pset_fapl_log(fapl.id, None, 0, 0) < 0:
            raise RuntimeError("H5Pset_fapl_log failed")
        fapl.set_file_locking(False, True)
        _LOG_FAPL.append(fapl)
    return _LOG_FAPL[0]


def _locking_on() -> bool:
    return os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() not in ("FALSE", "0")


def _writer_holds_lock(path: Path) -> bool:
    """Whether another open holds the exclusive lock HDF5 takes for writing (as HDF5's own open checks)."""
    if not _locking_on():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        return False  # no locks on this file system (HDF5 ignores that too with ignore_when_disabled)
    finally:
        os.close(fd)  # closing the descriptor drops the probe's lock
    return False


def _open_elsewhere(path: Path, st: os.stat_result, mine: set[int]) -> bool:
    """Whether HDF5 has the file open in this process other than through the kept handles (a user's own
    h5py.File): then a query uses that open (HDF5 shares it), which sees the user's unflushed writes."""
    import h5py

    n = h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)
    if n <= len(mine):
        return False
    for fid in h5py.h5f.get_obj_ids(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE):
        if fid.id in mine:
            continue
        try:
            o = os.stat(h5py.h5f.get_name(fid))
        except (OSError, ValueError):
            continue
        if (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def kept_file(path: Path) -> _Lease | None:
    """A lease on a read-only handle of the native file ``path`` kept open between queries, or None (the
    caller opens the file itself) when keeping one is not safe or not wanted.

    A kept handle is used only while ``stat(path)`` gives the (device, inode, size, mtime, ctime) it was
    opened on — the key the chunk-address cache and the index fingerprints use: a file rewritten in place,
    replaced by a rename, or rewritten with its size kept and its mtime put back (the ctime moves) gets a
    new handle, the old one is closed (when no result uses it any more). A file changed less than
    :data:`RACY_NS` before its open is not kept (a write within the timestamp granularity could keep the
    key). Not kept either: a file HDF5 already has open in this process (a user's h5py.File: that open is
    shared, as without the cache), one a writer holds locked (HDF5's own open then fails as it would)."""
    sp = str(path)
    try:
        st = os.stat(sp)
    except OSError:
        return None
    key = _file_key(st)
    with _KEPT_LOCK:
        mine = {k.fid.id for k in _KEPT.values() if k.fid.valid}
        if _open_elsewhere(path, st, mine):
            old = _KEPT.pop(sp, None)
            if old is not None:
                old.drop()
            return None
        k = _KEPT.get(sp)
        if k is not None:
            if k.key == key and k.fid.valid:
                _KEPT.move_to_end(sp)
                k.users += 1
                return _Lease(k)
            del _KEPT[sp]
            k.drop()
        if _writer_holds_lock(path):
            return None
        import h5py

        t0 = time.time_ns()
        try:
            f = h5py.File(h5py.h5f.open(os.fsencode(sp), h5py.h5f.ACC_RDONLY, fapl=_kept_fapl()))
        except Exception:  # noqa: BLE001 - the ordinary open says what is wrong
            return None
        try:
            now = _file_key(os.fstat(f.id.get_vfd_handle()))
        except Exception:  # noqa: BLE001
            now = None
        # what queries look up in an unchanged file, kept with its handle (engine._Handles, file identity)
        f._h5flow_cache = {}  # type: ignore[attr-defined]
        k = _Kept(key, f)
        if now != key or st.st_ctime_ns > t0 - RACY_NS:
            # changed while it was opened, or too recently to trust the key: this query only
            k.dropped = True
        else:
            _KEPT[sp] = k
            while len(_KEPT) > KEEP_OPEN[0]:
                _KEPT.popitem(last=False)[1].drop()
        k.users += 1
        return _Lease(k)
