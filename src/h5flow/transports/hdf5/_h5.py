"""HDF5 file opening for the hdf5 transport: the mpio and subfiling drivers on a given communicator."""

from __future__ import annotations

import ctypes
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5flow import _hdf5lib
from h5flow.transports import _mapped, _safefile
from h5flow.transports.base import TransportError

DRIVERS = ("mpio", "subfiling")


def _subfiling_fapl(comm: Any) -> h5py.h5p.PropFAID:
    from mpi4py import MPI

    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        raise RuntimeError("driver='subfiling' needs MPI initialised with MPI_THREAD_MULTIPLE "
                           "(mpi4py does this by default; do not lower mpi4py.rc.thread_level)")
    lib = _hdf5lib.lib()
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    lib.H5Pset_mpi_params.argtypes = [_hdf5lib.hid_t, ctypes.c_int, ctypes.c_int]
    lib.H5Pset_mpi_params.restype = _hdf5lib.herr_t
    if lib.H5Pset_mpi_params(fapl.id, MPI._handleof(comm), MPI._handleof(MPI.INFO_NULL)) < 0:
        raise RuntimeError("H5Pset_mpi_params failed")
    lib.H5Pset_fapl_subfiling.argtypes = [_hdf5lib.hid_t, ctypes.c_void_p]
    lib.H5Pset_fapl_subfiling.restype = _hdf5lib.herr_t
    if lib.H5Pset_fapl_subfiling(fapl.id, None) < 0:
        raise RuntimeError("H5Pset_fapl_subfiling failed")
    return fapl


def open_shared(path: Path, mode: str, comm: Any, driver: str) -> h5py.File:
    """Open ``path`` collectively on ``comm`` with the mpio or the subfiling driver."""
    if driver == "mpio":
        return h5py.File(path, mode, driver="mpio", comm=comm, libver=("v110", "latest"))
    if driver == "subfiling":
        fapl = _subfiling_fapl(comm)
        name = str(path).encode()
        if mode == "w":
            fid = h5py.h5f.create(name, h5py.h5f.ACC_TRUNC, fapl=fapl)
        else:
            fid = h5py.h5f.open(name, h5py.h5f.ACC_RDONLY, fapl=fapl)
        return h5py.File(fid)
    raise ValueError(f"unknown driver {driver!r}; accepted: {', '.join(DRIVERS)}")


def open_log(path: Path, mode: str) -> h5py.File:
    """Open (``r``, ``r+``) or create (``w``) the step container ``path`` through the h5flow_log connector,
    serially (no communicator: no MPI call inside the connector). The connector is chosen by this file's
    access list, so other files of the process stay native whatever ``HDF5_VOL_CONNECTOR`` says."""
    from h5flow.connectors import logvol

    try:
        return logvol.open_container(path, mode)
    except logvol.ConnectorError as e:  # the connector is not built or cannot be loaded
        raise RuntimeError(f"layout='log' needs the h5flow_log connector: {e}") from None


_SCALAR_TYPES: dict[type, Any] = {}


def _attr_type(value: Any) -> tuple[Any, Any]:
    """(HDF5 type, numpy array) of one attribute value, as h5py's ``attrs[name] = value`` stores it: a str
    as a variable-length UTF-8 string, an int as a 64-bit integer, a float as a 64-bit float."""
    if isinstance(value, str):
        dt = h5py.string_dtype("utf-8")
        if str not in _SCALAR_TYPES:
            _SCALAR_TYPES[str] = h5py.h5t.py_create(dt, logical=True)
        return _SCALAR_TYPES[str], np.array(value, dtype=dt)
    arr = np.asarray(value)
    if arr.dtype.kind not in "if" or arr.ndim:
        raise TypeError(f"fast attributes take str, int or float scalars, not {type(value).__name__}")
    key = arr.dtype.type
    if key not in _SCALAR_TYPES:
        _SCALAR_TYPES[key] = h5py.h5t.py_create(arr.dtype)
    return _SCALAR_TYPES[key], arr


def write_new_attrs(obj: Any, attrs: dict[str, Any]) -> None:
    """Create the scalar attributes ``attrs`` on ``obj`` (an h5py object or a low-level identifier), which has
    none of these names yet (a new file or group), with HDF5's low-level calls: what
    ``obj.attrs[name] = value`` stores, at about a third of the cost (h5py's high-level path checks for an
    existing attribute, writes under a temporary name and renames; 0.13 ms per attribute measured, 7 per
    step file)."""
    oid = obj.id if isinstance(obj, h5py.HLObject) else obj
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    for name, value in attrs.items():
        tid, arr = _attr_type(value)
        attr = h5py.h5a.create(oid, name.encode(), tid, space)
        attr.write(arr)


# -- a producer rank's step file (layout n-n), through HDF5's low-level calls ---------------------------
#
# The same file ``h5py.File(path, "w", libver=("v110", "latest"))`` + ``create_group`` + ``create_dataset(
# name, data=...)`` makes (the property lists below are the ones h5py's high-level calls set up), without
# their per-call Python work: ~0.5 ms less per step file, measured on the 2-core VM (1.1 -> 0.6 ms for a
# file of one small dataset). The lists are built once per process and never changed after.

_PLISTS: dict[str, Any] = {}


def _plists() -> dict[str, Any]:
    if not _PLISTS:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_V110, h5py.h5f.LIBVER_LATEST)
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)  # what h5py's File.close does: every object closes with it
        lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)  # h5py's: intermediate groups, UTF-8 link names
        lcpl.set_create_intermediate_group(True)
        lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)  # h5py's default: no modification times stored
        dcpl.set_obj_track_times(False)
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)  # the same for groups
        gcpl.set_obj_track_times(False)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)  # and for the root group
        fcpl.set_obj_track_times(False)
        _PLISTS.update(fapl=fapl, fcpl=fcpl, lcpl=lcpl, dcpl=dcpl, gcpl=gcpl)
    return _PLISTS


def create_rank_file(path: Path, fapl: Any = None) -> Any:
    """A new (truncated) HDF5 file at ``path``: its low-level ``FileID``; :func:`close_rank_file` closes it.
    ``fapl``: the access list of :func:`stacked_fapl` (a connector stack), else native's."""
    pl = _plists()
    return h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_TRUNC, fapl=fapl or pl["fapl"], fcpl=pl["fcpl"])


def stacked_fapl(layers: list[Any]) -> tuple[Any, str]:
    """The rank files' access list with the VOL connector ``layers`` (:mod:`h5flow.connectors.stack`) above
    native, and what HDF5 was given (``"<connector> <info string>"``)."""
    from h5flow.connectors.stack import set_stack

    fapl = _plists()["fapl"].copy()
    return fapl, set_stack(fapl, layers)


def create_group(parent: Any, name: str) -> Any:
    """Group ``name`` under the low-level ``parent``, and the groups on its path that do not exist yet (each
    made as h5py's ``create_group`` makes one): its ``GroupID``."""
    pl = _plists()
    for part in name.encode().split(b"/"):
        if part and parent.links.exists(part):
            parent = h5py.h5g.open(parent, part)
        elif part:
            parent = h5py.h5g.create(parent, part, lcpl=pl["lcpl"], gcpl=pl["gcpl"])
    return parent


def write_new_dataset(parent: Any, name: str, data: np.ndarray) -> Any:
    """Dataset ``name`` under the low-level ``parent`` (the groups on its path made as :func:`create_group`
    does), contiguous, of ``data``'s shape and type, holding ``data``: its ``DatasetID``."""
    pl = _plists()
    head, _, name = name.rpartition("/")
    if head:
        parent = create_group(parent, head)
    data = np.ascontiguousarray(data)
    tid = h5py.h5t.py_create(data.dtype, logical=True)
    space = h5py.h5s.create_simple(data.shape)
    dset = h5py.h5d.create(parent, name.encode(), tid, space, dcpl=pl["dcpl"], lcpl=pl["lcpl"])
    write_all(dset, tid, data)
    return dset


def write_all(dset: Any, tid: Any, data: np.ndarray) -> None:
    """``H5Dwrite`` of all of ``data`` (C-contiguous, of the dataset's shape; ``tid`` its memory type) into the
    low-level ``dset``. With a thread-safe HDF5 the call goes through :mod:`ctypes`, which lets go of Python's
    GIL for its length: a step written on the producer's write thread (``async_write``) does not stop the
    simulation's Python thread (h5py's own call holds the GIL while HDF5 copies the data: a Python loop on
    the main thread ran at 0.71 of its speed beside a thread writing 8 MiB files through h5py, at 1.0 beside
    one writing them with ``os.write``). HDF5's own lock keeps it safe; a failed call is made again through
    h5py, whose exception carries HDF5's error stack (a full file system is recognised by its text)."""
    if data.nbytes and _hdf5lib.is_threadsafe():
        lib = _hdf5lib.lib()
        if lib.H5Dwrite(dset.id, tid.id, 0, 0, 0, ctypes.c_void_p(data.ctypes.data)) >= 0:  # H5S_ALL, H5P_DEFAULT
            return
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, data)


def close_rank_file(fid: Any) -> None:
    fid.close()


# -- raw extents of a rank file (layout n-n) -------------------------------------------------------------

EXTENTS_FORMAT = "h5flow-extents"
EXTENTS_VERSION = 2  # version 1 had no checksum: its files are read through HDF5
#: the extents document ends with this key and the CRC-32 (zlib's) of every byte before it, as 8 hex digits
CHECKSUM_KEY = b',"crc32":"'
PUBLISHED_MODE = 0o400  # a published rank file and its extents: read-only, even to their owner


def extents_path(rank_file: Path) -> Path:
    """``rank-<r>.h5`` → ``rank-<r>.extents.json``: where its datasets' raw data lie in it."""
    return rank_file.with_name(rank_file.name[: -len(".h5")] + ".extents.json")


def dataset_extent(dset: Any) -> list[Any] | None:
    """``[offset, nbytes, dtype, shape]`` of a contiguous, unfiltered dataset's raw data as HDF5 placed it in
    the file (``H5Dget_offset``: the absolute byte position), or ``None`` (chunked, filtered, or no storage).
    ``dset``: an ``h5py.Dataset`` or a low-level ``DatasetID``."""
    did = dset.id if isinstance(dset, h5py.HLObject) else dset
    offset = did.get_offset()
    if offset is None or did.get_create_plist().get_layout() != h5py.h5d.CONTIGUOUS:
        return None
    return [int(offset), int(did.get_storage_size()), did.dtype.str, list(did.shape)]


def contiguous_offset(dset: h5py.Dataset) -> int | None:
    """The file offset of a contiguous dataset's first element, or ``None`` (chunked, or no storage yet)."""
    if dset.chunks is not None:
        return None
    offset = dset.id.get_offset()
    return None if offset is None else int(offset)


def extents_document(file_size: int, extents: dict[str, list[Any] | None]) -> bytes:
    """The extents file's bytes: compact JSON whose last key, ``crc32``, is the checksum of what precedes it
    (native/lib/extents.c writes the same bytes)."""
    doc = {"format": EXTENTS_FORMAT, "version": EXTENTS_VERSION, "file_size": file_size, "datasets": extents}
    body = json.dumps(doc, separators=(",", ":"))[:-1].encode()  # without the closing brace
    return body + CHECKSUM_KEY + b"%08x" % zlib.crc32(body) + b'"}'


def write_extents(rank_file: Path, extents: dict[str, list[Any] | None]) -> None:
    """Next to a closed rank file: its size and its datasets' extents (read by consumers with ``pread``,
    docs/STREAM.md "Raw reads"). Written inside the step's .tmp directory, published with it. Both files are
    made read-only (0400): a published step's files are never written (docs/STREAM.md "Mapped reads")."""
    ext = extents_path(rank_file)
    ext.write_bytes(extents_document(rank_file.stat().st_size, extents))
    for p in (rank_file, ext):
        os.chmod(p, PUBLISHED_MODE)


def _is_count(x: Any) -> bool:
    return type(x) is int and x >= 0  # noqa: E721 - a bool is not a count


def parse_extents(path: Path, data: bytes) -> dict[str, Any] | None:
    """The checked extents document of ``path`` (its bytes ``data``), or ``None`` for a document of an older
    format (no checksum: the caller reads through HDF5). Anything else that is not exactly what a producer
    writes raises :class:`TransportError` naming the file: the checksum, the structure, each extent's size
    against its dtype and shape, each extent inside the file, no two extents overlapping."""
    def bad(why: str) -> TransportError:
        return TransportError(f"{path}: corrupt extents file ({why}); the step's raw data is not read from a "
                              "file whose extents cannot be trusted (the step's files were changed after "
                              "publication, or the producer's storage is failing)")

    at = data.rfind(CHECKSUM_KEY)
    if at < 0:
        try:
            old = json.loads(data)
        except (ValueError, RecursionError):
            raise bad("not JSON") from None
        if isinstance(old, dict) and old.get("format") == EXTENTS_FORMAT and old.get("version") == 1:
            return None
        raise bad("no checksum")
    tail = data[at + len(CHECKSUM_KEY):].rstrip(b"\n")
    try:
        stored = int(tail[:8], 16) if len(tail) == 10 and tail[8:] == b'"}' else -1
    except ValueError:
        stored = -1
    if stored < 0:
        raise bad("its checksum is not 8 hexadecimal digits at the end")
    if zlib.crc32(data[:at]) != stored:
        raise bad(f"checksum {zlib.crc32(data[:at]):08x} of its content, {stored:08x} recorded")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise bad("not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != EXTENTS_FORMAT or doc.get("version") != EXTENTS_VERSION:
        raise bad(f"not an {EXTENTS_FORMAT} document of version {EXTENTS_VERSION}")
    size, datasets = doc.get("file_size"), doc.get("datasets")
    if not _is_count(size) or not isinstance(datasets, dict):
        raise bad("no file_size or datasets")
    spans = []
    for name, ext in datasets.items():
        if ext is None:
            continue
        if not (isinstance(ext, list) and len(ext) == 4 and _is_count(ext[0]) and _is_count(ext[1])
                and isinstance(ext[2], str) and isinstance(ext[3], list) and len(ext[3]) == 2
                and all(_is_count(n) for n in ext[3])):
            raise bad(f"dataset {name!r}: {ext!r} is not [offset, nbytes, dtype, [rows, components]]")
        offset, nbytes, dt, shape = ext
        try:
            itemsize = np.dtype(dt).itemsize
        except TypeError:
            raise bad(f"dataset {name!r}: dtype {dt!r}") from None
        if nbytes != shape[0] * shape[1] * itemsize:
            raise bad(f"dataset {name!r}: {nbytes} bytes for {shape[0]} x {shape[1]} values of {dt}")
        if offset + nbytes > size:
            raise bad(f"dataset {name!r}: bytes {offset}..{offset + nbytes} are not within the file's {size} bytes")
        if nbytes:
            spans.append((offset, offset + nbytes, name))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise bad(f"datasets {a!r} and {b!r} overlap")
    return doc


class RawFile:
    """A consumer's raw view of one published rank file: its extents (checked against the file), one
    descriptor, ``pread`` into the caller's buffer. :meth:`open` returns ``None`` where the producer left
    no usable extents (steps of older producers, chunked data): the caller reads through HDF5 instead."""

    def __init__(self, fd: int, datasets: dict[str, list[Any] | None], size: int, path: Path | None = None) -> None:
        self.fd = fd
        self.datasets = datasets
        self.size = size  # checked against what the producer recorded
        self.path = path
        st0 = os.fstat(fd) if fd >= 0 else None
        self.identity = _identity(st0) if st0 is not None else ()
        self.mode = stat.S_IMODE(st0.st_mode) if st0 is not None else 0

    @classmethod
    def open(cls, rank_file: Path) -> RawFile | None:
        ext = extents_path(rank_file)
        try:
            data = _safefile.read_regular(ext, "extents file")
        except FileNotFoundError:
            return None
        doc = parse_extents(ext, data)
        if doc is None:
            return None
        try:
            fd = _safefile.open_regular(rank_file, "rank file")
        except FileNotFoundError:
            raise TransportError(f"{rank_file}: the step's rank file is gone (its extents are there)") from None
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        if size != doc["file_size"]:  # not the file the extents describe: never read it raw
            os.close(fd)
            raise TransportError(f"{rank_file}: {size} bytes, but its extents describe a file of {doc['file_size']} "
                                 "bytes (the step's files were changed after publication)")
        return cls(fd, doc["datasets"], size, rank_file)

    def changed(self) -> str:
        """"" while the open file is as it was opened, else what changed (size, modification or status change
        time: a write, a truncation or a change of mode since). Its deletion alone (no name left, size, mode and
        modification time as opened) is no change: what was opened is what was published."""
        if self.fd < 0:
            return ""
        try:
            st = os.fstat(self.fd)
            now = _identity(st)
        except OSError as e:
            return f"it cannot be inspected ({e.strerror or e})"
        if now == self.identity:
            return ""
        if now[:2] == self.identity[:2] and st.st_nlink == 0 and stat.S_IMODE(st.st_mode) == self.mode:
            # only the status change time moved, and the file has no name left: it was deleted (the garbage
            # collection of a step that a group attaching late still reads), not written — a write moves the
            # modification time, and opening it for writing needs a change of its 0400 mode first
            return ""
        names = ("size", "modification time", "status change time")
        return ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(names, self.identity, now) if a != b)

    def can_read(self, path: str, dtype: Any, ncomp: int, last_row: int) -> bool:
        """Whether rows up to ``last_row`` of dataset ``path`` can be read raw as ``dtype`` × ``ncomp``."""
        ext = self.datasets.get(path)
        if not ext:
            return False
        _offset, _nbytes, dt, shape = ext  # checked by parse_extents: size, bounds, no overlap
        dtype = np.dtype(dtype)
        return dt == dtype.str and shape[1] == ncomp and last_row <= shape[0]

    def row_offset(self, path: str, first: int) -> int:
        """The file offset of row ``first`` of dataset ``path`` (which :meth:`can_read`)."""
        offset, _nbytes, dt, shape = self.datasets[path]
        return int(offset) + first * int(shape[1]) * np.dtype(dt).itemsize

    def read_rows(self, path: str, first: int, out: Any) -> None:
        """Rows ``first ..`` of dataset ``path`` into the C-contiguous array ``out`` (every byte of it)."""
        view = memoryview(out).cast("B")
        pos = self.row_offset(path, first)  # can_read checked that out's dtype is the dataset's
        done = 0
        while done < len(view):
            try:
                n = os.preadv(self.fd, [view[done:]], pos + done)
            except OSError as e:
                raise TransportError(f"{self.path}: reading {path} at offset {pos}: {e.strerror or e}") from None
            if n <= 0:
                raise TransportError(f"{self.path}: short read: {done} of {len(view)} bytes of {path} at offset "
                                     f"{pos} (the file shrank after publication)")
            done += n

    def map_rows(self, path: str, first: int, count: int) -> np.ndarray:
        """Rows ``first .. first + count`` of dataset ``path`` (which :meth:`can_read`) as a writable array
        over a private mapping of the file (no copy; :mod:`h5flow.transports._mapped`)."""
        _offset, _nbytes, dt, shape = self.datasets[path]
        dtype, ncomp = np.dtype(dt), int(shape[1])
        raw = _mapped.map_range(self.fd, self.row_offset(path, first), count * ncomp * dtype.itemsize, self.size)
        return raw.view(dtype).reshape(count, ncomp)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
