"""Indexes: per-block min/max (zone maps) and binned, compressed bitmaps, in a sidecar HDF5 file.

Storage (docs/QUERY.md, 'Index storage'): ``<FILE>.h5flow-index.h5`` next to the file or container, a
native HDF5 file that h5dump and h5py read like any other. The indexed file is never written, so its
h5dump output and checksums do not change, read-only files can be indexed, and h5flow_log containers
(directories owned by their connector) stay untouched. Layout::

    /                        attrs h5flow_index_format=2, source (absolute path at build time)
    /datasets/<dataset path>/minmax/   min, max (dataset dtype), nan (int64), crc32 (uint32), per block;
                                       sub_min, sub_max, sub_nan per sub-slab (format 2, attr sub_blocks)
    /datasets/<dataset path>/bitmap/   bin_min, bin_max (dataset dtype), bin_count (int64), offsets (uint64),
                                       blob (uint8: the bins' portable Roaring bitmaps, one after another),
                                       bin_crc32 (uint32: each bin's bitmap bytes)

Each kind's ``content_crc32`` attribute is the CRC-32 of its arrays (all but ``blob``) and of the attributes
that say what they mean (:func:`content_crc`): a damaged index is refused, never used.

Each kind's group records ``fingerprint`` (file size + mtime, or the dataset's log files in a container),
``shape``, ``dtype``, ``block_shape``, ``built_unix`` and ``build_seconds``. An index whose fingerprint no
longer matches is *stale* and is never used to answer a query (see :class:`StalePolicy` in the engine).
The sidecar is rewritten into a temporary file and renamed, so readers see the old or the new index.
"""

from __future__ import annotations

import array
import math
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from h5flow._mpi import sleepy_allgather, sleepy_bcast, sleepy_gather
from h5flow.query.blocks import BlockGrid, grid_for
from h5flow.query.source import Source, native_file

if TYPE_CHECKING:
    import h5py

SUFFIX = ".h5flow-index.h5"
FORMAT = 2  # 2: zone maps also per sub-slab (sub_min/sub_max/sub_nan, attr sub_blocks); 1: per block only
ZONE_ELEMENTS = 1024  # default zone size: sub-slabs of about this many elements (docs/QUERY.md "Indexes")
MAX_SUB_BLOCKS = 65536
KINDS = ("minmax", "bitmap")
Kind = Literal["minmax", "bitmap"]
DEFAULT_BINS = 64
MAX_BINS = 4096
SAMPLE_ELEMENTS = 1 << 20
SAMPLE_BLOCKS = 64


class IndexError_(ValueError):
    """An index that cannot be built, read or used."""


def sidecar_path(source: Path) -> Path:
    return source.with_name(source.name + SUFFIX)


def bitmap_class(n: int) -> Any:
    import pyroaring

    return pyroaring.BitMap if n < (1 << 32) else pyroaring.BitMap64


def is_numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf"


#: LRU of per-file-version chunk maps: (dataset, file name, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)
#: -> (file address of every block's stored chunk, -1 where it cannot be pread; whether pread was checked good)
_CHUNK_MAPS: OrderedDict[tuple[Any, ...], tuple[np.ndarray, bool]] = OrderedDict()
CHUNK_MAPS_KEPT = 64
_BUFFERS = threading.local()  # read buffers, one per slot (a dataset of the expression), reused query after query


def _buffer(slot: Any, nbytes: int) -> np.ndarray:
    """A reused uint8 buffer of at least ``nbytes`` for reader slot ``slot`` of this thread (its pages stay
    mapped from query to query). The caller is done with its contents before the slot is read again."""
    pool = getattr(_BUFFERS, "pool", None)
    if pool is None:
        pool = _BUFFERS.pool = {}
    b = pool.get(slot)
    if b is None or b.size < nbytes:
        b = pool[slot] = np.empty(max(nbytes, 1 << 16), np.uint8)
    return b


def file_identity(f: h5py.File) -> tuple[int, tuple[Any, ...]] | None:
    """(HDF5's own file descriptor, identity key) for a native file opened read-only with the sec2 driver (or
    the log driver of a handle kept between queries, which reads the same way) and no user block, else None.
    The key (device, inode, size, mtime and ctime in ns) changes with any write to the file, in place or by
    replacing it (ctime cannot be set back by ``utime``), so what is cached under it is never
    used for other contents; reads go through HDF5's own descriptor, so they see the file HDF5 opened."""
    import h5py

    try:
        fid = f.id
        if (fid.get_intent() != h5py.h5f.ACC_RDONLY
                or fid.get_access_plist().get_driver() not in (h5py.h5fd.SEC2, h5py.h5fd.LOG)
                or fid.get_create_plist().get_userblock() != 0):
            return None
        fd = int(fid.get_vfd_handle())
        st = os.fstat(fd)
        name = f.filename
    except Exception:  # noqa: BLE001 - any doubt: no pread
        return None
    return fd, (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def forget_chunk_maps() -> None:
    _CHUNK_MAPS.clear()


class BlockReader:
    """Reads the blocks of one dataset as flat arrays in the block's C order (bool read as uint8).

    Where a block is an unfiltered chunk of a native file, the chunk's bytes are read as stored
    (``H5Dread_chunk``): half the cost of a hyperslab read, which matters when a query reads only the
    candidate blocks. Chunks never written (fill value), filtered ones, and every other layout or
    connector take the hyperslab read, so the values are the same either way.

    ``reuse``: stored chunks are read into a buffer that the next read overwrites (one per ``slot`` and
    thread, kept from query to query: no page faults on fresh memory); only for a caller that is done with
    a block before it reads the next.

    :meth:`rows` reads a run of rows of a block (zones). Of an unfiltered chunk in a file opened read-only
    with the sec2 driver and no user block, those rows are one contiguous byte range of the stored chunk, at
    the chunk's address: they are read with one ``pread`` on HDF5's own descriptor. The addresses of every
    chunk come from one ``H5Dchunk_iter`` walk of the chunk index, kept per file version (device, inode,
    size, mtime, ctime: :func:`file_identity`), so repeated queries on an unchanged file do not walk it
    again, and a changed file never gets the old addresses. The first pread of a file version is checked
    against ``H5Dread_chunk`` of a whole chunk and any mismatch or doubt turns this path off (then the rows
    come from a hyperslab read). Another chunk is read whole once (HDF5 decodes a filtered chunk whole for
    any part of it) and its runs are sliced from it; blocks that are not chunks (slabs) are read per run as
    hyperslabs."""

    def __init__(self, dset: h5py.Dataset, grid: BlockGrid, native: bool, reuse: bool = False, slot: int = 0,
                 ident: tuple[int, tuple[Any, ...]] | None = None, name: str | None = None) -> None:
        self.dset, self.grid = dset, grid
        self.name = name
        self.reuse, self.slot = reuse, slot
        self.direct = False
        self.dtype = dset.dtype
        chunks = dset.chunks
        try:
            dt = self.dtype
            self.direct = (chunks is not None and tuple(chunks) == grid.block
                           and dt.kind in "biuf" and dt.shape == () and native
                           and dset.id.get_create_plist().get_nfilters() == 0)
        except Exception:  # noqa: BLE001 - any doubt: the hyperslab read
            self.direct = False
        # a chunk is read (and decoded) whole for any part of it: read it once, slice the runs
        self.whole_chunks = chunks is not None and native and tuple(chunks) == grid.block
        self._whole: tuple[int, np.ndarray] | None = None  # (block, values) of the last block read whole
        self.reads = 0  # read requests made (chunk, pread or hyperslab)
        self._ident = ident
        self._fd: int | None = None
        self._addr: np.ndarray | None = None  # per block: address of its stored chunk, -1: not by pread
        self._pread: bool | None = None  # None: not tried yet
        self._nbytes = math.prod(grid.block) * self.dtype.itemsize if grid.block else self.dtype.itemsize

    def _pread_ok(self) -> bool:
        if self._pread is None:
            self._pread = False
            if self.direct and self.reuse:
                try:
                    ident = self._ident if self._ident is not None else file_identity(self.dset.file)
                    if ident is not None:
                        fd, fkey = ident
                        key = (self.name or self.dset.name,) + fkey
                        entry = _CHUNK_MAPS.get(key)
                        if entry is None:
                            addr = self._chunk_addresses()
                            entry = (addr, self._check_pread(fd, addr))
                            _CHUNK_MAPS[key] = entry
                            while len(_CHUNK_MAPS) > CHUNK_MAPS_KEPT:
                                _CHUNK_MAPS.popitem(last=False)
                        else:
                            _CHUNK_MAPS.move_to_end(key)
                        self._fd = fd
                        self._addr, self._pread = entry
                except Exception:  # noqa: BLE001 - any doubt: the hyperslab read
                    self._pread = False
        return bool(self._pread)

    def _chunk_addresses(self) -> np.ndarray:
        """Address of every block's stored chunk (-1: not allocated, filtered or not of full size), from one
        walk of the chunk index."""
        grid, nbytes = self.grid, self._nbytes
        addr = np.full(grid.nblocks, -1, np.int64)
        found: list[tuple[tuple[int, ...], int]] = []

        def visit(info: Any) -> None:
            if info.byte_offset is not None and info.filter_mask == 0 and info.size == nbytes:
                found.append((tuple(info.chunk_offset), int(info.byte_offset)))

        self.dset.id.chunk_iter(visit)
        if found:
            coords = np.array([c for c, _ in found], dtype=np.int64).reshape(len(found), -1)
            ok = np.all(coords < np.asarray(grid.shape, np.int64), axis=1)
            ks = np.ravel_multi_index(tuple((coords[ok] // np.asarray(grid.block, np.int64)).T), grid.counts)
            addr[ks] = np.array([a for _, a in found], np.int64)[ok]
        return addr

    def _check_pread(self, fd: int, addr: np.ndarray) -> bool:
        """pread of the first allocated chunk equals H5Dread_chunk of it."""
        ks = np.flatnonzero(addr >= 0)
        if not ks.size:
            return False
        k = int(ks[0])
        mask, raw = self.dset.id.read_direct_chunk(self.grid.origin(k))
        return mask == 0 and len(raw) == self._nbytes and os.pread(fd, self._nbytes, int(addr[k])) == bytes(raw)

    def _pread_rows(self, k: int, r0: int, r1: int) -> np.ndarray | None:
        if not self._pread_ok():
            return None
        assert self._addr is not None and self._fd is not None
        addr = int(self._addr[k])
        if addr < 0:
            return None
        block, dt = self.grid.block, self.dtype
        inner = math.prod(block[1:])
        n = (r1 - r0) * inner * dt.itemsize
        buf = _buffer(self.slot, self._nbytes)
        self.reads += 1
        self._whole = None
        if os.preadv(self._fd, [memoryview(buf)[:n]], addr + r0 * inner * dt.itemsize) != n:
            return None
        v = buf[:n].view(dt)
        if len(block) > 1:
            ext = self.grid.extent(k)
            if tuple(ext[1:]) != tuple(block[1:]):
                v = v.reshape((r1 - r0,) + tuple(block[1:]))[(slice(None),) + tuple(slice(0, e) for e in ext[1:])]
                v = v.reshape(-1)
        return v

    def read_runs(self, ks: np.ndarray, r0s: np.ndarray, r1s: np.ndarray, sizes: np.ndarray, slot: Any
                  ) -> np.ndarray:
        """Rows ``[r0s[j], r1s[j])`` of blocks ``ks[j]`` one after the other in one flat array (``sizes[j]``
        elements each: the run's positions), in a reused buffer of ``slot`` (bool read as uint8). Runs that
        are stored rows of an unfiltered chunk are read with ``preadv`` straight into the buffer, runs
        adjacent in the file as one call; every other run is read as :meth:`rows` reads it and copied."""
        dt = self.dtype
        total = int(sizes.sum())
        buf = _buffer(slot, total * dt.itemsize)
        out = buf[:total * dt.itemsize].view(dt)
        inner = math.prod(self.grid.block[1:]) if self.grid.block else 1
        direct = self.grid.block and self._pread_ok()
        if direct:
            assert self._addr is not None
            addr = self._addr[ks]
            # rows of a chunk are one byte range only where the block is not cut along an inner axis
            full = (addr >= 0) & (sizes == (r1s - r0s) * inner)
            foff = addr + r0s * (inner * dt.itemsize)
        else:
            full = np.zeros(len(ks), bool)
            foff = np.zeros(len(ks), np.int64)
        nbytes = sizes * dt.itemsize
        boff = np.zeros(len(ks) + 1, np.int64)
        np.cumsum(nbytes, out=boff[1:])
        mv = memoryview(buf)
        fd = self._fd
        j, n = 0, len(ks)
        full_l, foff_l, boff_l = full.tolist(), foff.tolist(), boff.tolist()
        while j < n:
            if full_l[j]:
                # extend over the next runs that continue this one in the file and in the buffer
                e = j + 1
                while e < n and full_l[e] and foff_l[e] == foff_l[e - 1] + (boff_l[e] - boff_l[e - 1]):
                    e += 1
                self.reads += 1
                got = os.preadv(fd, [mv[boff_l[j]:boff_l[e]]], foff_l[j])  # type: ignore[arg-type]
                if got == boff_l[e] - boff_l[j]:
                    j = e
                    continue
                for i in range(j, e):  # a short read (the file shrank?): these runs the ordinary way
                    full_l[i] = False
            v = self.rows(int(ks[j]), int(r0s[j]), int(r1s[j]))
            out[boff_l[j] // dt.itemsize:boff_l[j + 1] // dt.itemsize] = v.view(dt) if v.dtype != dt else v
            j += 1
        self._whole = None
        return out.view(np.uint8) if dt == np.bool_ else out

    def __call__(self, k: int) -> np.ndarray:
        self.reads += 1
        self._whole = None  # the reused buffer is about to be overwritten
        if self.direct:
            v = self._chunk(k)
            if v is not None:
                return v.view(np.uint8) if v.dtype == np.bool_ else v
        v = np.asarray(self.dset[self.grid.slices(k)]).reshape(-1)
        return v.view(np.uint8) if v.dtype == np.bool_ else v

    def rows(self, k: int, r0: int, r1: int) -> np.ndarray:
        """Rows ``[r0, r1)`` of block k (relative to its origin, along the first axis) as a flat array in
        C order: the block's positions ``r0 * inner .. r1 * inner - 1``. The whole block when that is all."""
        if not self.grid.block:
            return self(k)
        v = self._pread_rows(k, r0, r1)
        if v is not None:
            return v.view(np.uint8) if v.dtype == np.bool_ else v
        if r0 == 0 and r1 >= self.grid.extent(k)[0]:
            return self(k)
        if self.whole_chunks:  # no pread: one chunk read, the runs sliced from it
            if self._whole is None or self._whole[0] != k:
                v = self(k)
                self._whole = (k, v)
            inner = math.prod(self.grid.extent(k)[1:])
            return self._whole[1][r0 * inner:r1 * inner]
        sl = self.grid.slices(k)
        a = sl[0].start
        self.reads += 1
        v = np.asarray(self.dset[(slice(a + r0, a + r1),) + sl[1:]]).reshape(-1)
        return v.view(np.uint8) if v.dtype == np.bool_ else v

    def _chunk(self, k: int) -> np.ndarray | None:
        origin = self.grid.origin(k)
        block = self.grid.block
        nbytes = self._nbytes
        try:
            if self.reuse:
                mask, raw = self.dset.id.read_direct_chunk(origin, out=_buffer(self.slot, nbytes)[:nbytes])
            else:
                mask, raw = self.dset.id.read_direct_chunk(origin)
        except Exception:  # noqa: BLE001 - e.g. a chunk never written: the fill value comes from a hyperslab read
            return None
        if mask != 0 or len(raw) != nbytes:
            return None
        v = np.frombuffer(raw, dtype=self.dset.dtype)
        ext = self.grid.extent(k)
        if ext != block:
            v = v.reshape(block)[tuple(slice(0, e) for e in ext)].reshape(-1)
        return v


def default_sub(grid: BlockGrid) -> int:
    """Zones per block by default: sub-slabs of about :data:`ZONE_ELEMENTS` elements (capped at the block's rows)."""
    n = math.prod(grid.block) if grid.block else 1
    return grid.clamp_sub(min(MAX_SUB_BLOCKS, -(-n // ZONE_ELEMENTS)))


def block_stats(v: np.ndarray) -> tuple[Any, Any, int]:
    """(min, max, NaN count) of a flat block; min/max NaN when every element is NaN."""
    if v.size == 0:
        return (np.nan, np.nan, 0)
    if v.dtype.kind == "f":
        return (np.fmin.reduce(v), np.fmax.reduce(v), int(np.count_nonzero(np.isnan(v))))
    return (v.min(), v.max(), 0)


def sub_stats(v: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(min, max, NaN count) of each piece ``v[bounds[j]:bounds[j+1]]`` of a flat block (NaN ignored;
    an empty or all-NaN piece gets min/max NaN for floats, 0 for integers: its size or NaN count rules it out)."""
    n = len(bounds) - 1
    sizes = np.diff(bounds)
    ne = np.flatnonzero(sizes)
    lo, hi = np.zeros(n, v.dtype), np.zeros(n, v.dtype)
    nan = np.zeros(n, np.int64)
    if v.dtype.kind == "f":
        lo[:], hi[:] = np.nan, np.nan
    if ne.size:
        starts = bounds[ne]
        if v.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                lo[ne], hi[ne] = np.fmin.reduceat(v, starts), np.fmax.reduceat(v, starts)
            nan[ne] = np.add.reduceat(np.isnan(v).view(np.uint8), starts, dtype=np.int64)
        else:
            lo[ne], hi[ne] = np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts)
    return lo, hi, nan


def interval_status(lo: np.ndarray, hi: np.ndarray, n_nan: np.ndarray, n: np.ndarray, op: str, v: float | int,
                    anynum: np.ndarray | None = None, clean: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For groups of elements known only by (min, max, NaN count, count): which groups certainly all
    satisfy ``x op v`` and which certainly have no element that does (numpy semantics: NaN satisfies only
    ``!=``). Everything else must be read and checked. ``anynum`` (a group holds a number: ``n - n_nan > 0``)
    and ``clean`` (``anynum`` and no NaN) may be given precomputed."""
    lo, hi = np.asarray(lo), np.asarray(hi)
    n_nan, n = np.asarray(n_nan), np.asarray(n)
    if anynum is None:
        anynum = (n - n_nan) > 0
    if clean is None:
        clean = anynum & (n_nan == 0)
    with np.errstate(invalid="ignore"):
        if isinstance(v, float) and np.isnan(v):
            everything = np.ones(lo.shape, bool)
            return (everything, ~everything) if op == "!=" else (~everything, everything)
        if op == "!=":
            outside = anynum & ((hi < v) | (lo > v))
            all_ok = ~anynum | outside
            none = clean & (lo == v) & (hi == v)
            return all_ok, none
        if op == "<":
            a, z = hi < v, lo >= v
        elif op == "<=":
            a, z = hi <= v, lo > v
        elif op == ">":
            a, z = lo > v, hi <= v
        elif op == ">=":
            a, z = lo >= v, hi < v
        elif op == "==":
            a, z = (lo == v) & (hi == v), (v < lo) | (v > hi)
        else:
            raise ValueError(f"unknown operator {op!r}")
    all_ok = np.logical_and(clean, a, out=a)
    none = np.logical_or(~anynum, z, out=z)
    return all_ok, none


# ---------------------------------------------------------------- checksums of the index's own content

#: the attributes an index's content checksum covers (what the arrays mean; not ``fingerprint``, which
#: ``verify`` re-stamps, nor the build's timings)
SEALED_ATTRS = ("shape", "block_shape", "dtype", "nblocks", "sub_blocks", "nbins")


def content_crc(arrays: dict[str, np.ndarray], attrs: dict[str, Any]) -> int:
    """CRC-32 of an index kind's arrays (all but the bitmap ``blob``, whose bins carry their own CRCs in
    ``bin_crc32``) and of the attributes that say what they mean, in a canonical byte order."""
    crc = 0
    for name in sorted(arrays):
        if name == "blob":
            continue
        a = np.asarray(arrays[name])
        a = a.astype(a.dtype.newbyteorder("<"), copy=False) if a.dtype.byteorder not in ("|",) else a
        crc = zlib.crc32(f"{name}:{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), crc)
    for name in SEALED_ATTRS:
        if name in attrs:
            v = attrs[name]
            v = np.asarray(v).tolist() if not isinstance(v, (str, bytes)) else v
            crc = zlib.crc32(f"{name}={v}".encode(), crc)
    return crc


def bin_crcs(offsets: np.ndarray, blob: np.ndarray) -> np.ndarray:
    """CRC-32 of each bin's serialized bitmap ``blob[offsets[i]:offsets[i+1]]``."""
    raw = np.asarray(blob, dtype=np.uint8)
    return np.array([zlib.crc32(raw[int(a):int(z)]) for a, z in zip(offsets[:-1], offsets[1:])], np.uint32)


class DamagedIndexError(IndexError_):
    """An index whose content does not match its checksum, or (``verify``) the data it describes."""


# ---------------------------------------------------------------- loaded indexes


@dataclass
class MinMax:
    """Zone maps: per block (``min``, ``max``, ``nan``, ``crc32``) and per sub-slab (``sub_*``, ``sub``
    sub-slabs per block; an index of format 1 has none, then ``sub == 1`` and they are the block's)."""

    grid: BlockGrid
    min: np.ndarray
    max: np.ndarray
    nan: np.ndarray
    crc32: np.ndarray
    fingerprint: str
    built_unix: float
    build_seconds: float
    sub: int = 1
    sub_min: np.ndarray | None = None
    sub_max: np.ndarray | None = None
    sub_nan: np.ndarray | None = None
    format1: bool = False  # written by index format 1 (no zone maps below the block)

    def unit_offsets(self) -> np.ndarray:
        """Position ranges of the units :meth:`status` speaks of (sub-slabs, or blocks)."""
        return self.grid.sub_offsets(self.sub)

    _prep: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict, compare=False, repr=False)

    def status(self, op: str, v: float | int) -> tuple[np.ndarray, np.ndarray]:
        """Per sub-slab (per block when ``sub == 1``): certainly all match, certainly none does."""
        per_block = self.sub == 1 or self.sub_min is None
        prep = self._prep.get(self.sub)
        if prep is None:  # what does not depend on the condition, once per loaded index
            sizes = np.diff(self.unit_offsets())
            lo, hi, nan = (self.min, self.max, self.nan) if per_block else (self.sub_min, self.sub_max, self.sub_nan)
            anynum = (sizes - nan) > 0
            prep = self._prep[self.sub] = (lo, hi, nan, sizes, anynum, anynum & (nan == 0))
        lo, hi, nan, sizes, anynum, clean = prep
        return interval_status(lo, hi, nan, sizes, op, v, anynum=anynum, clean=clean)


@dataclass
class StatsZones:
    """Zone maps of an h5flow_log dataset derived from the connector's per-write statistics
    (``h5flow.stats``: every write still visible, its first and last element and the min, max and NaN count
    of its visible values) — no index to build, never stale. A block's bounds are those of every write whose
    row-major range meets the block, and the fill value where writes that fill their ranges completely do not
    cover the block (elements no write covers read as it): conservative, so answers stay exact after the
    candidate check. A block meeting a write without numeric statistics is
    never skipped nor taken as sure."""

    lo: np.ndarray
    hi: np.ndarray
    nan: np.ndarray  # 1 where a NaN may be present
    unknown: np.ndarray  # bool: no bounds for this block
    writes: int
    grid: BlockGrid

    def unit_offsets(self) -> np.ndarray:
        return self.grid.offsets

    def status(self, op: str, v: float | int) -> tuple[np.ndarray, np.ndarray]:
        # count + 1: every block may hold a number (conservative for interval_status)
        all_ok, none = interval_status(self.lo, self.hi, self.nan, self.nan + 1, op, v)
        return all_ok & ~self.unknown, none & ~self.unknown


def stats_zones(dset: h5py.Dataset, grid: BlockGrid) -> StatsZones | None:
    """Zone maps from the per-write statistics of an h5flow_log dataset on a slab grid (blocks are row-major
    ranges); None when they cannot be had (then the query reads every block, as without an index)."""
    from h5flow.stats import dataset_stats

    dtype = np.dtype(np.uint8) if dset.dtype == np.bool_ else dset.dtype
    if not is_numeric(dtype) or grid.nblocks == 0 or tuple(grid.block[1:]) != tuple(grid.shape[1:]):
        return None
    try:
        shards = dataset_stats(dset)["shards"]
    except Exception:  # noqa: BLE001 - no statistics: no skipping
        return None
    nb = grid.nblocks
    off = grid.offsets
    work = np.float64 if dtype.kind == "f" else np.dtype(object)
    lo = np.full(nb, np.nan if dtype.kind == "f" else None, dtype=work)
    hi = lo.copy()
    nan = np.zeros(nb, np.int64)
    unknown = np.zeros(nb, bool)
    fill = dset.fillvalue
    fill_nan = dtype.kind == "f" and np.isnan(fill)

    def widen(a: int, z: int, mn: Any, mx: Any) -> None:
        for k in range(a, z):
            lo[k] = mn if lo[k] is None or (work == np.float64 and np.isnan(lo[k])) else min(lo[k], mn)
            hi[k] = mx if hi[k] is None or (work == np.float64 and np.isnan(hi[k])) else max(hi[k], mx)

    dense: list[tuple[int, int]] = []  # row-major ranges some write fills completely (no fill value there)
    for sh in shards:
        first, last = sh.get("first"), sh.get("last")
        if first is None or last is None:
            return None
        a = int(np.ravel_multi_index(tuple(int(x) for x in first), grid.shape)) if grid.shape else 0
        z = int(np.ravel_multi_index(tuple(int(x) for x in last), grid.shape)) if grid.shape else 0
        if int(sh.get("visible") or 0) == z - a + 1:
            dense.append((a, z))
        ka, kz = int(np.searchsorted(off, a, side="right") - 1), int(np.searchsorted(off, z, side="right") - 1)
        if sh.get("nan"):
            nan[ka:kz + 1] = 1
        if sh.get("min") is None:
            if int(sh.get("nan") or 0) < int(sh.get("visible") or 0):
                unknown[ka:kz + 1] = True  # numbers without bounds
            continue
        widen(ka, kz + 1, sh["min"], sh["max"])
    # blocks some element of which no write covers hold the fill value too
    covered = np.zeros(nb, bool)
    if dense:
        dense.sort()
        merged = [list(dense[0])]
        for a, z in dense[1:]:
            if a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], z)
            else:
                merged.append([a, z])
        starts = np.array([m[0] for m in merged])
        for k in range(nb):
            j = int(np.searchsorted(starts, off[k], side="right")) - 1
            covered[k] = j >= 0 and merged[j][1] >= off[k + 1] - 1
    fv = fill.item() if hasattr(fill, "item") else fill
    for k in np.flatnonzero(~covered):
        if fill_nan:
            nan[k] = 1
        else:
            widen(int(k), int(k) + 1, fv, fv)
    # bounds in the stored dtype (the statistics are stored values, exact in float64 / Python ints), so that
    # interval_status compares them with the literal as numpy compares the stored elements: a float32 0.1
    # against the literal 0.1 in float32, not in float64
    try:
        lo, hi = lo.astype(dtype), hi.astype(dtype)
    except (TypeError, OverflowError, ValueError):
        return None
    return StatsZones(lo, hi, nan, unknown, len(shards), grid)


@dataclass
class Bitmap:
    grid: BlockGrid
    bin_min: np.ndarray
    bin_max: np.ndarray
    bin_count: np.ndarray
    offsets: np.ndarray
    blob: Any  # h5py Dataset (read lazily) or bytes
    fingerprint: str
    built_unix: float
    build_seconds: float
    bins_requested: int = DEFAULT_BINS
    _cache: dict[int, Any] = field(default_factory=dict)
    bin_crc32: np.ndarray | None = None  # per bin, of its serialized bitmap (None: a sidecar without them)
    where: str = ""  # the sidecar and dataset, for messages

    @property
    def nbins(self) -> int:
        return len(self.bin_count)

    def status(self, op: str, v: float | int) -> tuple[np.ndarray, np.ndarray]:
        return interval_status(self.bin_min, self.bin_max, np.where(np.isnan(self.bin_min.astype(float)) &
                                                                     (self.bin_count > 0), self.bin_count, 0),
                               self.bin_count, op, v)

    def bins(self, ids: Sequence[int]) -> list[Any]:
        """The bitmaps of bins ``ids``, reading consecutive bins in one request."""
        cls = bitmap_class(self.grid.size)
        want = sorted(int(i) for i in ids if int(i) not in self._cache and self.bin_count[int(i)] > 0)
        run: list[int] = []
        for b in want + [-2]:
            if run and b != run[-1] + 1:
                a, z = int(self.offsets[run[0]]), int(self.offsets[run[-1] + 1])
                raw = bytes(np.asarray(self.blob[a:z], dtype=np.uint8))
                for r in run:
                    s, e = int(self.offsets[r]) - a, int(self.offsets[r + 1]) - a
                    if self.bin_crc32 is not None and zlib.crc32(raw[s:e]) != int(self.bin_crc32[r]):
                        raise DamagedIndexError(
                            f"the bitmap index {self.where} is damaged: bin {r}'s bitmap does not match its "
                            "checksum; rebuild it (h5flow index build --kind bitmap) or drop it (h5flow index drop)")
                    self._cache[r] = cls.deserialize(raw[s:e])
                run = []
            run.append(b)
        return [self._cache.get(int(i)) or cls() for i in ids]

    def union(self, ids: Sequence[int]) -> Any:
        cls = bitmap_class(self.grid.size)
        ids = [int(i) for i in ids if self.bin_count[int(i)] > 0]
        if not ids:
            return cls()
        return cls.union(*self.bins(ids)) if len(ids) > 1 else self.bins(ids)[0].copy()


@dataclass
class DatasetIndex:
    path: str
    minmax: MinMax | None
    bitmap: Bitmap | None
    current: str  # the dataset's fingerprint now
    damaged: dict[str, str] = field(default_factory=dict)  # kind -> why its content cannot be trusted

    def fresh(self, kind: Kind) -> bool:
        idx = self.minmax if kind == "minmax" else self.bitmap
        return idx is not None and idx.fingerprint == self.current and kind not in self.damaged


# ---------------------------------------------------------------- the sidecar


def _group_path(dset_path: str) -> str:
    return "/datasets/" + "/".join(c for c in dset_path.split("/") if c)


@dataclass
class IndexRow:
    dataset: str
    kind: str
    status: str  # fresh / stale / incomplete
    blocks: int
    bins: int
    index_bytes: int
    data_bytes: int
    build_seconds: float
    built: str


#: sidecar path -> ((path, device, inode, size, mtime_ns, ctime_ns), open file,
#:                  {(dataset, shape, block): (MinMax, Bitmap), 'format': int})
_LOADED: dict[str, tuple[tuple[Any, ...], Any, dict[tuple[Any, ...], tuple[Any, Any]]]] = {}


def forget_loaded() -> None:
    """Close the sidecars :meth:`IndexStore.load` keeps open (they are also closed at exit)."""
    for _, f, _ in _LOADED.values():
        try:
            f.close()
        except Exception:  # noqa: BLE001
            pass
    _LOADED.clear()


import atexit  # noqa: E402

atexit.register(forget_loaded)


class IndexStore:
    """The sidecar of one source."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.path = sidecar_path(source.path)
        self._file: h5py.File | None = None

    def _open(self) -> h5py.File | None:
        if self._file is None and self.path.exists():
            self._file = native_file(self.path, "r", locking=False)
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> IndexStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, dset_path: str) -> bool:
        f = self._open()
        return f is not None and _group_path(dset_path) in f

    def load(self, dset_path: str, grid: BlockGrid) -> DatasetIndex | None:
        """The dataset's indexes (fresh or stale: check :meth:`DatasetIndex.fresh`); None if there are none.
        An index built over another block grid is skipped (it cannot describe these blocks).

        Loaded indexes stay in memory for the process, keyed by the sidecar's identity (inode, size,
        mtime): a rebuilt or dropped index is a new sidecar file, so the cache cannot serve old content.
        Freshness against the data is checked on every call."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        key = (str(self.path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        entry = _LOADED.get(str(self.path))
        if entry is None or entry[0] != key:
            if entry is not None:
                entry[1].close()
            f = native_file(self.path, "r", locking=False)  # kept open: no lock (the sidecar is only ever
            entry = (key, f, {})                             # replaced by a rename, never written in place)
            _LOADED[str(self.path)] = entry
        _, f, cache = entry
        fmt = cache.get("format")  # type: ignore[call-overload]
        if fmt is None:
            fmt = cache["format"] = int(f.attrs.get("h5flow_index_format", 1))  # type: ignore[index]
        if fmt > FORMAT:
            raise IndexError_(f"{self.path} has index format {fmt}, written by a newer h5flow (this one reads "
                              f"formats 1 to {FORMAT}): upgrade h5flow, or rebuild the index with "
                              f"`h5flow index build {self.source.path} {dset_path}`")
        ck = (dset_path, grid.shape, grid.block)
        if ck not in cache:
            cache[ck] = self._read(f, dset_path, grid)
        mm, bm, damaged = cache[ck]
        if mm is None and bm is None:
            return None
        return DatasetIndex(dset_path, mm, bm, self.source.fingerprint(dset_path), damaged)

    @staticmethod
    def _read(f: h5py.File, dset_path: str, grid: BlockGrid) -> tuple[MinMax | None, Bitmap | None, dict[str, str]]:
        if _group_path(dset_path) not in f:
            return None, None, {}
        g = f[_group_path(dset_path)]
        mm = bm = None
        damaged: dict[str, str] = {}
        read: dict[str, dict[str, np.ndarray]] = {}  # kind -> its arrays but the blob, each read once
        for kind in KINDS:
            if kind in g:
                arrays = read[kind] = {k: g[kind][k][()] for k in g[kind] if k != "blob"}
            if kind in g and "content_crc32" in g[kind].attrs:  # sidecars written before checksums have none
                if content_crc(arrays, dict(g[kind].attrs)) != int(g[kind].attrs["content_crc32"]):
                    damaged[kind] = (f"the {kind} index of {dset_path} in {f.filename} is damaged: its content "
                                     "does not match its checksum")
        if "minmax" in g:
            m = g["minmax"]
            a = dict(m.attrs)
            if a.get("complete", False) and tuple(a["block_shape"]) == grid.block and tuple(a["shape"]) == grid.shape:
                r = read["minmax"]
                mm = MinMax(grid, r["min"], r["max"], r["nan"], r["crc32"],
                            str(a["fingerprint"]), float(a["built_unix"]), float(a["build_seconds"]))
                mm.format1 = "sub_blocks" not in a
                sub = int(a.get("sub_blocks", 1))  # format 1: none (zone maps per block)
                if sub > 1 and "sub_min" in m and len(m["sub_min"]) == grid.nblocks * sub:
                    mm.sub, mm.sub_min, mm.sub_max, mm.sub_nan = sub, r["sub_min"], r["sub_max"], r["sub_nan"]
        if "bitmap" in g:
            b = g["bitmap"]
            a = dict(b.attrs)
            if a.get("complete", False) and tuple(a["block_shape"]) == grid.block and tuple(a["shape"]) == grid.shape:
                r = read["bitmap"]
                bm = Bitmap(grid, r["bin_min"], r["bin_max"], r["bin_count"], r["offsets"], b["blob"],
                            str(a["fingerprint"]), float(a["built_unix"]), float(a["build_seconds"]),
                            int(a.get("bins_requested", DEFAULT_BINS)),
                            bin_crc32=r.get("bin_crc32"),
                            where=f"of {dset_path} in {f.filename}")
        return mm, bm, damaged

    def rows(self) -> list[IndexRow]:
        f = self._open()
        out: list[IndexRow] = []
        if f is None:
            return out

        def visit(name: str, obj: Any) -> None:
            import h5py

            if not isinstance(obj, h5py.Group) or obj.name.rsplit("/", 1)[-1] not in KINDS or "kind" not in obj.attrs:
                return
            dpath = str(obj.attrs["dataset"])
            status = "incomplete"
            if obj.attrs.get("complete", False):
                try:
                    status = "fresh" if self.source.fingerprint(dpath) == obj.attrs["fingerprint"] else "stale"
                except (KeyError, OSError):
                    status = "stale (dataset gone)"
                if "content_crc32" in obj.attrs and content_crc({k: obj[k][()] for k in obj if k != "blob"},
                                                                dict(obj.attrs)) != int(obj.attrs["content_crc32"]):
                    status = "damaged"
            size = sum(obj[k].id.get_storage_size() for k in obj if isinstance(obj[k], h5py.Dataset))
            shape = tuple(obj.attrs["shape"])
            data_bytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(str(obj.attrs["dtype"])).itemsize
            out.append(IndexRow(dpath, str(obj.attrs["kind"]), status, int(obj.attrs.get("nblocks", 0)),
                                int(obj.attrs.get("nbins", 0)), int(size), data_bytes,
                                float(obj.attrs.get("build_seconds", 0.0)),
                                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(obj.attrs.get("built_unix", 0))))))

        f["/"].visititems(visit)
        return out

    def rewrite(self, drop: set[tuple[str, str]], add: dict[tuple[str, str], dict[str, Any]]) -> None:
        """Write a new sidecar: the old one's indexes minus ``drop`` and those ``add`` replaces, plus ``add``
        ({(dataset, kind): {"arrays": {...}, "attrs": {...}}}); renamed over the old one."""
        self.close()
        entry = _LOADED.pop(str(self.path), None)
        if entry is not None:
            entry[1].close()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        kept = 0
        try:
            with native_file(tmp, "w") as out:
                out.attrs["h5flow_index_format"] = FORMAT
                out.attrs["source"] = str(self.source.path)
                out.attrs["about"] = "h5flow query indexes (zone maps, bitmaps) of the file named in 'source'; docs/QUERY.md"
                if self.path.exists():
                    with native_file(self.path, "r", locking=False) as old:
                        fmt = int(old.attrs.get("h5flow_index_format", 1))
                        if fmt > FORMAT:
                            raise IndexError_(f"{self.path} has index format {fmt}, written by a newer h5flow "
                                              f"(this one writes {FORMAT}): upgrade h5flow, or remove the sidecar "
                                              "and build the indexes again")
                        for row in IndexStore(self.source).rows():
                            key = (row.dataset, row.kind)
                            if key in drop or key in add:
                                continue
                            gp = _group_path(row.dataset)
                            parent = out.require_group(gp)
                            old.copy(old[gp + "/" + row.kind], parent, row.kind)
                            kept += 1
                for (dpath, kind), content in add.items():
                    g = out.require_group(_group_path(dpath)).create_group(kind)
                    arrays = dict(content["arrays"])
                    if "blob" in arrays:
                        arrays["bin_crc32"] = bin_crcs(arrays["offsets"], arrays["blob"])
                    for name, arr in arrays.items():
                        g.create_dataset(name, data=arr)
                    for k, v in content["attrs"].items():
                        g.attrs[k] = v
                    g.attrs["content_crc32"] = np.uint32(content_crc(arrays, dict(g.attrs)))
                    g.attrs["kind"] = kind
                    g.attrs["dataset"] = dpath
                    g.attrs["complete"] = True
                    kept += 1
            if kept:
                os.replace(tmp, self.path)
            else:
                tmp.unlink()
                self.path.unlink(missing_ok=True)
        finally:
            if tmp.exists():
                tmp.unlink()


# ---------------------------------------------------------------- building


@dataclass
class BuildConfig:
    kind: Kind = "minmax"
    bins: int = DEFAULT_BINS
    progress: bool = True
    sub_blocks: int | None = None  # zone maps per block: sub-slabs along its first axis (capped at its rows);
    # None: about ZONE_ELEMENTS elements each (default_sub)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"index kind {self.kind!r}: choose minmax or bitmap")
        if not 2 <= self.bins <= MAX_BINS:
            raise ValueError(f"bins must be between 2 and {MAX_BINS}, got {self.bins}")
        if self.sub_blocks is not None and not 1 <= self.sub_blocks <= MAX_SUB_BLOCKS:
            raise ValueError(f"sub_blocks must be between 1 (zone maps per block) and {MAX_SUB_BLOCKS}, "
                             f"got {self.sub_blocks}")


@dataclass
class BuildResult:
    dataset: str
    kind: str
    blocks: int
    bins: int
    index_bytes: int
    data_bytes: int
    seconds: float
    ranks: int


def _edges(sample: np.ndarray, dtype: np.dtype, bins: int) -> np.ndarray:
    """Bin lower edges from a sample. Integers with at most ``bins`` distinct values: one bin per value
    (exact, no candidate checks). Otherwise half the edges at sample quantiles (equal-frequency bins,
    fine where the data is dense) and half at equal widths between the sample's min and max (fine in the
    tails, where selective queries cut). Measured on the benchmark's field: quantile-only bins cost 31 %
    of the data, the mix 22 %, equal widths 11 % (but equal widths leave the dense range in few bins)."""
    s = sample[~np.isnan(sample)] if sample.dtype.kind == "f" else sample
    if s.size == 0:
        return np.zeros(1, dtype=dtype)
    if dtype.kind in "biu":
        uniq = np.unique(s)
        if uniq.size <= bins:
            return uniq.astype(dtype)
    f = s.astype(np.float64)
    q = np.quantile(f, np.linspace(0, 1, bins // 2 + 1)[:-1], method="inverted_cdf")
    fin = f[np.isfinite(f)]  # equal widths between finite ends (±inf get the quantile edges only)
    t = np.linspace(0.0, 1.0, bins - bins // 2 + 1)[:-1]
    with np.errstate(over="ignore"):  # lo * (1 - t) + hi * t: no hi - lo, which overflows for ±max
        w = float(fin.min()) * (1.0 - t) + float(fin.max()) * t if fin.size else q[:0]
    e = np.concatenate([q, w])
    if dtype.kind in "biu":
        # edges only sort values into bins (each bin records its own min and max): the float64 rounding of
        # large integers is harmless, but the cast back must stay inside the dtype's range
        info = np.iinfo(dtype)
        e = np.floor(e)
        e = np.array([min(max(int(x), int(info.min)), int(info.max)) for x in e.tolist()], dtype=dtype)
        return np.unique(e)
    with np.errstate(over="ignore"):
        return np.unique(e.astype(dtype))


def _iterate(ids: np.ndarray, progress: bool, label: str) -> Iterator[int]:
    if not progress:
        yield from (int(k) for k in ids)
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=len(ids))
        for k in ids:
            yield int(k)
            bar.advance(task)


def _check_data_inside(dset: Any, dset_path: str) -> None:
    """Refuse a dataset whose data lives outside its file's own storage: a virtual dataset (its sources) or
    external storage (the files it names) change without the file's fingerprint changing, so an index of
    it could go stale unseen and answer wrongly."""
    import h5py

    dcpl = dset.id.get_create_plist()
    where = ("the sources of a virtual dataset" if dcpl.get_layout() == h5py.h5d.VIRTUAL
             else "external files" if dcpl.get_external_count() > 0 else None)
    if where:
        raise IndexError_(f"{dset_path} keeps its data in {where}, which can change without the index "
                          "noticing; query it without an index (every block is read)")


def build_index(path: str | os.PathLike[str], dset_path: str, config: BuildConfig | None = None,
                comm: Any = None) -> BuildResult:
    """Build one index of one dataset (collective over ``comm`` when given: the blocks are split across the
    ranks, rank 0 merges and writes the sidecar). Returns the same result on every rank."""
    config = config or BuildConfig()
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    source = Source.of(path)
    t0 = time.perf_counter()
    error: str | None = None
    payload: Any = None
    try:
        with source.open() as f:
            dset = _dataset(f, dset_path, path)
            dtype = dset.dtype
            if not is_numeric(dtype):
                raise IndexError_(f"{dset_path} has type {dtype}; only integer, float and bool datasets are indexed")
            _check_data_inside(dset, dset_path)
            fp0 = source.fingerprint(dset_path)
            grid = grid_for(dset.shape, dtype.itemsize, dset.chunks, native=not source.container)
            vdtype = np.dtype(np.uint8) if dtype == np.bool_ else dtype
            mine = grid.split(size, rank)
            edges = None
            if config.kind == "bitmap":
                picks = np.unique(np.linspace(0, grid.nblocks - 1, min(grid.nblocks, SAMPLE_BLOCKS)).astype(np.int64)) \
                    if grid.nblocks else np.zeros(0, np.int64)
                per_block = max(1, SAMPLE_ELEMENTS // max(1, len(picks)))
                reader = BlockReader(dset, grid, not source.container)
                part = [reader(int(k)) for k in grid.split(size, rank, picks)]
                part = [p[:: max(1, p.size // per_block)] for p in part]
                sample = np.concatenate(part) if part else np.zeros(0, vdtype)
                if comm is not None:
                    sample = np.concatenate(sleepy_allgather(comm, sample))
                edges = _edges(sample, vdtype, config.bins)
            sub = default_sub(grid) if config.sub_blocks is None else grid.clamp_sub(config.sub_blocks)
            payload = _build_share(BlockReader(dset, grid, not source.container), mine, vdtype, edges, sub,
                                   config.progress and rank == 0)
            fp1 = source.fingerprint(dset_path)
            if fp1 != fp0:
                raise IndexError_(f"{path}: the data changed while the index was being built; build it again")
            meta = {"shape": grid.shape, "block": grid.block, "dtype": str(vdtype), "fp": fp0, "edges": edges,
                    "sub": sub}
    except Exception as e:  # noqa: BLE001 - reported on every rank below
        if comm is None:
            raise
        error = f"rank {rank}: {type(e).__name__}: {e}"
    if comm is not None:
        errors = [e for e in sleepy_allgather(comm, error) if e]
        if errors:
            raise IndexError_("index build failed: " + "; ".join(errors))
        parts = sleepy_gather(comm, (payload, meta), root=0)
    else:
        parts = [(payload, meta)]
    result: BuildResult | None = None
    error = None
    if rank == 0:
        try:
            result = _write(source, dset_path, config, parts, time.perf_counter() - t0, size)
        except Exception as e:  # noqa: BLE001
            if comm is None:
                raise
            error = f"{type(e).__name__}: {e}"
    if comm is not None:
        result, error = sleepy_bcast(comm, (result, error), root=0)
        if error:
            raise IndexError_(f"index build failed writing {sidecar_path(source.path)}: {error}")
    assert result is not None
    return result


def _dataset(f: h5py.File, dset_path: str, path: str | os.PathLike[str]) -> h5py.Dataset:
    """The dataset ``dset_path`` of the open file ``f``, or an error that lists the datasets there are."""
    import h5py

    obj = f.get(dset_path)
    if isinstance(obj, h5py.Dataset):
        return obj
    names: list[str] = []
    f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
    what = "no dataset" if obj is None else "not a dataset:"
    raise IndexError_(f"{what} {dset_path} in {path}; datasets: {', '.join(sorted(names)[:20]) or 'none'}"
                      + (f" ... ({len(names)} in all)" if len(names) > 20 else ""))


def _build_share(reader: BlockReader, ids: np.ndarray, vdtype: np.dtype, edges: np.ndarray | None, sub: int,
                 progress: bool) -> dict[str, Any]:
    dset, grid = reader.dset, reader.grid
    n = len(ids)
    mins = np.zeros(n, vdtype)
    maxs = np.zeros(n, vdtype)
    nans = np.zeros(n, np.int64)
    crcs = np.zeros(n, np.uint32)
    smin, smax, snan = np.zeros((n, sub), vdtype), np.zeros((n, sub), vdtype), np.zeros((n, sub), np.int64)
    sub_off = grid.sub_offsets(sub)
    out: dict[str, Any] = {"ids": ids, "min": mins, "max": maxs, "nan": nans, "crc32": crcs,
                           "sub_min": smin, "sub_max": smax, "sub_nan": snan}
    if edges is not None:
        nb = len(edges) + (1 if vdtype.kind == "f" else 0)  # the last bin holds NaNs
        cls = bitmap_class(grid.size)
        bms = [cls() for _ in range(nb)]
        bmin = np.zeros(nb, vdtype)
        bmax = np.zeros(nb, vdtype)
        bcount = np.zeros(nb, np.int64)
        if vdtype.kind == "f":
            bmin[:] = np.nan
            bmax[:] = np.nan
        seen = np.zeros(nb, bool)
    for i, k in enumerate(_iterate(ids, progress, f"indexing {dset.name}")):
        v = reader(k)
        mins[i], maxs[i], nans[i] = block_stats(v)
        smin[i], smax[i], snan[i] = sub_stats(v, sub_off[k * sub:(k + 1) * sub + 1] - sub_off[k * sub])
        crcs[i] = zlib.crc32(np.ascontiguousarray(v).view(np.uint8))
        if edges is None or v.size == 0:
            continue
        b = (np.searchsorted(edges, v, side="right") - 1).clip(0, len(edges) - 1).astype(np.uint16)
        if vdtype.kind == "f":
            b[np.isnan(v)] = nb - 1
        order = np.argsort(b, kind="stable")
        sb = b[order]
        present, starts, counts = np.unique(sb, return_index=True, return_counts=True)
        sv = v[order]
        lo = np.minimum.reduceat(sv, starts) if vdtype.kind != "f" else np.fmin.reduceat(sv, starts)
        hi = np.maximum.reduceat(sv, starts) if vdtype.kind != "f" else np.fmax.reduceat(sv, starts)
        base = int(grid.offsets[k])
        pos = (order + base).astype(np.uint32 if grid.size < (1 << 32) else np.uint64)
        for j, bin_id in enumerate(present.tolist()):
            s, c = int(starts[j]), int(counts[j])
            chunk = pos[s:s + c]
            bms[bin_id] |= cls(array.array("I" if chunk.dtype == np.uint32 else "Q", chunk.tobytes()))
            if seen[bin_id]:
                bmin[bin_id] = np.fmin(bmin[bin_id], lo[j]) if vdtype.kind == "f" else min(bmin[bin_id], lo[j])
                bmax[bin_id] = np.fmax(bmax[bin_id], hi[j]) if vdtype.kind == "f" else max(bmax[bin_id], hi[j])
            else:
                bmin[bin_id], bmax[bin_id], seen[bin_id] = lo[j], hi[j], True
            bcount[bin_id] += c
    if edges is not None:
        for bm in bms:
            bm.run_optimize()
        out.update(bitmaps=[bm.serialize() for bm in bms], bin_min=bmin, bin_max=bmax, bin_count=bcount, seen=seen)
    return out


def _write(source: Source, dset_path: str, config: BuildConfig, parts: list[tuple[dict[str, Any], dict[str, Any]]],
           seconds: float, ranks: int) -> BuildResult:
    meta = parts[0][1]
    grid = BlockGrid(tuple(meta["shape"]), tuple(meta["block"]))
    vdtype = np.dtype(meta["dtype"])
    nb = grid.nblocks
    sub = int(meta["sub"])
    arrays = {"min": np.zeros(nb, vdtype), "max": np.zeros(nb, vdtype), "nan": np.zeros(nb, np.int64),
              "crc32": np.zeros(nb, np.uint32), "sub_min": np.zeros((nb, sub), vdtype),
              "sub_max": np.zeros((nb, sub), vdtype), "sub_nan": np.zeros((nb, sub), np.int64)}
    for p, _ in parts:
        for key in arrays:
            arrays[key][p["ids"]] = p[key]
    for key in ("sub_min", "sub_max", "sub_nan"):
        arrays[key] = arrays[key].reshape(-1)  # sub-slab j of block k at k * sub_blocks + j
    attrs = {"fingerprint": meta["fp"], "shape": np.asarray(grid.shape, np.int64),
             "block_shape": np.asarray(grid.block, np.int64), "dtype": str(vdtype), "nblocks": nb,
             "built_unix": time.time(), "build_seconds": seconds, "ranks": ranks}
    add = {(dset_path, "minmax"): {"arrays": arrays, "attrs": dict(attrs, sub_blocks=sub)}}
    nbins = 0
    if config.kind == "bitmap":
        cls = bitmap_class(grid.size)
        first = parts[0][0]
        nbins = len(first["bin_count"])
        bmin, bmax = first["bin_min"].copy(), first["bin_max"].copy()
        seen = first["seen"].copy()
        count = first["bin_count"].copy()
        merged = [cls.deserialize(b) for b in first["bitmaps"]]
        for p, _ in parts[1:]:
            for j in range(nbins):
                if not p["seen"][j]:
                    continue
                merged[j] |= cls.deserialize(p["bitmaps"][j])
                if seen[j]:
                    bmin[j] = np.fmin(bmin[j], p["bin_min"][j]) if vdtype.kind == "f" else min(bmin[j], p["bin_min"][j])
                    bmax[j] = np.fmax(bmax[j], p["bin_max"][j]) if vdtype.kind == "f" else max(bmax[j], p["bin_max"][j])
                else:
                    bmin[j], bmax[j], seen[j] = p["bin_min"][j], p["bin_max"][j], True
                count[j] += p["bin_count"][j]
        blobs = []
        for bm in merged:
            bm.run_optimize()
            blobs.append(bm.serialize())
        offsets = np.zeros(nbins + 1, np.uint64)
        np.cumsum([len(b) for b in blobs], out=offsets[1:])
        blob = np.frombuffer(b"".join(blobs), dtype=np.uint8) if offsets[-1] else np.zeros(0, np.uint8)
        add[(dset_path, "bitmap")] = {
            "arrays": {"bin_min": bmin, "bin_max": bmax, "bin_count": count, "offsets": offsets, "blob": blob},
            "attrs": dict(attrs, nbins=nbins, bins_requested=config.bins, codec="roaring-portable",
                          edges_from="sample: half quantiles, half equal widths; integers: one bin per value when few")}
    store = IndexStore(source)
    store.rewrite(set(), add)
    size = 0
    data_bytes = grid.size * vdtype.itemsize
    for row in IndexStore(source).rows():
        if row.dataset == dset_path and (row.kind == config.kind or (config.kind == "bitmap" and row.kind == "minmax")):
            size += row.index_bytes
    return BuildResult(dset_path, config.kind, nb, nbins, size, data_bytes, seconds, ranks)


def drop_index(path: str | os.PathLike[str], dset_path: str, kind: str | None = None) -> list[tuple[str, str]]:
    """Remove the dataset's indexes (one kind, or all); returns what was removed."""
    source = Source.of(path)
    store = IndexStore(source)
    rows = store.rows()
    store.close()
    gone = {(r.dataset, r.kind) for r in rows if r.dataset == dset_path and (kind is None or r.kind == kind)}
    if not gone:
        have = ", ".join(sorted({f"{r.dataset} ({r.kind})" for r in rows})) or "none"
        raise KeyError(f"no {kind + ' ' if kind else ''}index on {dset_path} in {store.path} (indexes: {have})")
    store.rewrite(gone, {})
    return sorted(gone)


def verify_index(path: str | os.PathLike[str], dset_path: str) -> tuple[int, int]:
    """Re-read the dataset, compare every block with the checksums taken at build time, and check the index
    against the data: each kind's content checksum, then (when the data is the indexed data) every zone's
    min, max and NaN count recomputed, and every bitmap bin's positions, count and bounds against the values
    at those positions. When all match, stamp the indexes fresh again (e.g. the file was rewritten with the
    same data). Returns (blocks, mismatching data blocks); mismatches leave the indexes stale. An index that
    disagrees with the data it was built from raises :class:`DamagedIndexError` (rebuild it)."""
    source = Source.of(path)
    with source.open() as f:
        dset = _dataset(f, dset_path, path)
        grid = grid_for(dset.shape, dset.dtype.itemsize, dset.chunks, native=not source.container)
        store = IndexStore(source)
        try:
            idx = store.load(dset_path, grid)
            if idx is None or idx.minmax is None:
                raise KeyError(f"no index on {dset_path} in {store.path}: build one with `h5flow index build`")
            if idx.damaged:
                raise DamagedIndexError("; ".join(idx.damaged.values()) + f": rebuild it (h5flow index build "
                                        f"{source.path} {dset_path})")
            fp = source.fingerprint(dset_path)
            reader = BlockReader(dset, grid, not source.container)
            bad = sum(1 for k in range(grid.nblocks)
                      if zlib.crc32(np.ascontiguousarray(reader(k)).view(np.uint8)) != idx.minmax.crc32[k])
            if bad == 0:
                problems = _check_against_data(idx, reader, grid)
                if problems:
                    more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
                    raise DamagedIndexError(
                        f"the index of {dset_path} in {store.path} does not describe the data it was built from: "
                        + "; ".join(problems[:8]) + more + f". Rebuild it (h5flow index build {source.path} "
                        f"{dset_path})")
        finally:
            store.close()
    if bad == 0 and source.fingerprint(dset_path) == fp:
        _restamp(source, dset_path, fp)
    return grid.nblocks, bad


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise equality with NaN equal to NaN."""
    a, b = np.asarray(a), np.asarray(b)
    eq = a == b
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def _check_against_data(idx: DatasetIndex, reader: BlockReader, grid: BlockGrid) -> list[str]:
    """What of the index disagrees with the data (read block by block): zone maps recomputed and compared;
    each bitmap position in exactly one bin, each bin's count, min and max those of the values it holds."""
    problems: list[str] = []
    mm, bm = idx.minmax, idx.bitmap
    assert mm is not None
    sub = mm.sub if mm.sub_min is not None else 1
    sub_off = grid.sub_offsets(sub) if sub > 1 else None
    bin_of = None
    if bm is not None:
        bin_of = np.full(grid.size, -1, np.int32)
        total = 0
        for b in range(bm.nbins):
            pos = np.asarray(bm.bins([b])[0].to_array(), dtype=np.int64) if bm.bin_count[b] > 0 else np.zeros(0, np.int64)
            total += pos.size
            if pos.size != int(bm.bin_count[b]):
                problems.append(f"bitmap bin {b} holds {pos.size} positions, its count says {int(bm.bin_count[b])}")
            if pos.size and (int(pos[-1]) >= grid.size or np.any(bin_of[pos] >= 0)):
                problems.append(f"bitmap bin {b} holds positions outside the data or of another bin")
                continue
            bin_of[pos] = b
        if total != grid.size or np.any(bin_of < 0):
            problems.append(f"the bitmap bins hold {total} positions, the data {grid.size}")
            bin_of = None
    if bm is not None and bin_of is not None:
        fdt = np.float64 if bm.bin_min.dtype.kind == "f" else None
        bmin = np.full(bm.nbins, np.nan) if fdt else None
        bmax = np.full(bm.nbins, np.nan) if fdt else None
        imin: dict[int, Any] = {}
        imax: dict[int, Any] = {}
    for k in range(grid.nblocks):
        v = reader(k)
        if v.size == 0:
            continue
        v = v.view(np.uint8) if v.dtype == np.bool_ else v
        lo, hi, nan = block_stats(v)
        if not (_same(lo, mm.min[k]) and _same(hi, mm.max[k]) and nan == int(mm.nan[k])):
            problems.append(f"block {k}: zone map min {mm.min[k]!r} max {mm.max[k]!r} NaNs {int(mm.nan[k])}, "
                            f"data {lo!r} {hi!r} {nan}")
        if sub_off is not None and v.size:
            assert mm.sub_min is not None and mm.sub_max is not None and mm.sub_nan is not None
            slo, shi, snan = sub_stats(v, sub_off[k * sub:(k + 1) * sub + 1] - sub_off[k * sub])
            ok = _same(slo, mm.sub_min[k * sub:(k + 1) * sub]) & _same(shi, mm.sub_max[k * sub:(k + 1) * sub]) \
                & (snan == mm.sub_nan[k * sub:(k + 1) * sub])
            if not ok.all():
                j = int(np.flatnonzero(~ok)[0])
                problems.append(f"block {k} sub-slab {j}: zone map min {mm.sub_min[k * sub + j]!r} max "
                                f"{mm.sub_max[k * sub + j]!r}, data {slo[j]!r} {shi[j]!r}")
        if bm is not None and bin_of is not None and v.size:
            o = int(grid.offsets[k])
            bb = bin_of[o:o + v.size]
            if fdt:
                assert bmin is not None and bmax is not None
                with np.errstate(invalid="ignore"):
                    np.fmin.at(bmin, bb, v.astype(np.float64))
                    np.fmax.at(bmax, bb, v.astype(np.float64))
            else:
                for b in np.unique(bb).tolist():
                    sel = v[bb == b]
                    lo_b, hi_b = sel.min(), sel.max()
                    imin[b] = lo_b if b not in imin else min(imin[b], lo_b)
                    imax[b] = hi_b if b not in imax else max(imax[b], hi_b)
    if bm is not None and bin_of is not None:
        if fdt:
            got_lo, got_hi = bmin.astype(bm.bin_min.dtype), bmax.astype(bm.bin_max.dtype)  # type: ignore[union-attr]
        else:
            got_lo, got_hi = bm.bin_min.copy(), bm.bin_max.copy()
            for b in range(bm.nbins):
                if b in imin:
                    got_lo[b], got_hi[b] = imin[b], imax[b]
        held = bm.bin_count > 0
        ok = ~held | (_same(got_lo, bm.bin_min) & _same(got_hi, bm.bin_max))
        for b in np.flatnonzero(~ok)[:8].tolist():
            problems.append(f"bitmap bin {b}: min {bm.bin_min[b]!r} max {bm.bin_max[b]!r}, its values "
                            f"{got_lo[b]!r} {got_hi[b]!r}")
    return problems


def _restamp(source: Source, dset_path: str, fp: str) -> None:
    """Write the fresh fingerprint into a copy of the sidecar and rename it over the sidecar: never an
    in-place write, which would need the sidecar's lock while other processes that queried the file (and
    keep the sidecar open) are alive."""
    import shutil

    path = sidecar_path(source.path)
    entry = _LOADED.pop(str(path), None)
    if entry is not None:
        entry[1].close()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(path, tmp)
        with native_file(tmp, "r+") as f:
            g = f[_group_path(dset_path)]
            for kind in KINDS:
                if kind in g:
                    g[kind].attrs["fingerprint"] = fp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)