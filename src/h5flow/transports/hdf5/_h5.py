"""HDF5 file opening for the hdf5 transport: the mpio and subfiling drivers on a given communicator."""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5flow import _hdf5lib
from h5flow.transports import _mapped

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
    from h5flow.packing import PackError, open_container

    try:
        return open_container(path, mode)
    except PackError as e:  # the connector is not built or cannot be loaded
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


def create_rank_file(path: Path) -> Any:
    """A new (truncated) HDF5 file at ``path``: its low-level ``FileID``; :func:`close_rank_file` closes it."""
    pl = _plists()
    return h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_TRUNC, fapl=pl["fapl"], fcpl=pl["fcpl"])


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
EXTENTS_VERSION = 1


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


def write_extents(rank_file: Path, extents: dict[str, list[Any] | None]) -> None:
    """Next to a closed rank file: its size and its datasets' extents (read by consumers with ``pread``,
    docs/STREAM.md "Raw reads"). Written inside the step's .tmp directory, published with it."""
    doc = {"format": EXTENTS_FORMAT, "version": EXTENTS_VERSION, "file_size": rank_file.stat().st_size,
           "datasets": extents}
    extents_path(rank_file).write_text(json.dumps(doc, separators=(",", ":")))


class RawFile:
    """A consumer's raw view of one published rank file: its extents (checked against the file), one
    descriptor, ``pread`` into the caller's buffer. :meth:`open` returns ``None`` where the producer left
    no usable extents (steps of older producers, chunked data): the caller reads through HDF5 instead."""

    def __init__(self, fd: int, datasets: dict[str, list[Any] | None], size: int) -> None:
        self.fd = fd
        self.datasets = datasets
        self.size = size  # checked against what the producer recorded

    @classmethod
    def open(cls, rank_file: Path) -> RawFile | None:
        try:
            doc = json.loads(extents_path(rank_file).read_text())
        except FileNotFoundError:
            return None
        if doc.get("format") != EXTENTS_FORMAT or doc.get("version") != EXTENTS_VERSION:
            return None
        fd = os.open(rank_file, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        if size != doc.get("file_size"):  # not the file the extents describe: never read it raw
            os.close(fd)
            raise OSError(f"{rank_file}: {size} bytes, but its extents describe a file of {doc.get('file_size')} "
                          "bytes (the step's files were changed after publication)")
        return cls(fd, doc.get("datasets") or {}, size)

    def can_read(self, path: str, dtype: Any, ncomp: int, last_row: int) -> bool:
        """Whether rows up to ``last_row`` of dataset ``path`` can be read raw as ``dtype`` × ``ncomp``."""
        ext = self.datasets.get(path)
        if not ext:
            return False
        offset, nbytes, dt, shape = ext
        dtype = np.dtype(dtype)
        return (dt == dtype.str and len(shape) == 2 and shape[1] == ncomp and last_row <= shape[0]
                and nbytes == shape[0] * ncomp * dtype.itemsize and 0 <= int(offset)
                and int(offset) + nbytes <= self.size)

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
            n = os.preadv(self.fd, [view[done:]], pos + done)
            if n <= 0:
                raise OSError(f"short read: {done} of {len(view)} bytes of {path} at offset {pos}")
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
