"""The data copy: each dataset cut into slabs of bounded size, the slabs shared between the ranks, and
copied — through h5py, or for fixed-size types without references on the raw path (the source's own type on
both sides, one reused buffer; from a container the stored bytes read with ``pread`` from its data logs,
their checksums verified on the way, whole chunks written with ``H5Dwrite_chunk``)."""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from h5flow.connectors import logvol
from h5flow.packing.report import PackError

if TYPE_CHECKING:
    from h5flow.packing.objects import Copier

# pack reads a container's stored bytes through one reused buffer of about this size (the L2 cache: the
# checksum and the write read them while they are hot), rounded to whole chunks
PIECE_BYTES = 1 << 20


@dataclass
class Dset:
    src: str
    dst: str
    blocks: list[tuple[slice, ...]]
    itemsize: int
    refs: bool
    vlen: bool
    shape: tuple[int, ...] = ()
    # the destination's chunk shape when whole chunks can be written as they are (H5Dwrite_chunk): no
    # filters, and every chunk is one run of the row-major element order (it spans the trailing dims)
    raw_chunks: tuple[int, ...] | None = None


def slabs_of(shape: tuple[int, ...], itemsize: int, chunks: tuple[int, ...] | None,
            slab_bytes: int) -> list[tuple[slice, ...]]:
    """Row-major slabs of at most ``slab_bytes`` (at least one element) covering ``shape``."""
    if not shape or 0 in shape:
        return [()] if not shape else []
    # the innermost dims that fit whole, then a run of the next one
    n = len(shape)
    inner = 1
    d = n
    while d > 0 and inner * shape[d - 1] * itemsize <= slab_bytes:
        inner *= shape[d - 1]
        d -= 1
    if d == 0:
        return [tuple(slice(0, s) for s in shape)]
    k = max(1, slab_bytes // (inner * itemsize))  # elements of dim d-1 per slab
    if chunks is not None and chunks[d - 1] <= k:
        k -= k % chunks[d - 1]  # whole chunks
    out: list[tuple[slice, ...]] = []
    lead = shape[: d - 1]

    def rec(prefix: tuple[slice, ...], i: int) -> None:
        if i == len(lead):
            for s in range(0, shape[d - 1], k):
                out.append(prefix + (slice(s, min(s + k, shape[d - 1])),) + tuple(slice(0, x) for x in shape[d:]))
            return
        for j in range(lead[i]):
            rec(prefix + (slice(j, j + 1),), i + 1)

    rec((), 0)
    return out


def sel_bytes(sel: tuple[slice, ...], itemsize: int) -> int:
    n = 1
    for s in sel:
        n *= s.stop - s.start
    return n * itemsize


def assign(dsets: list[Dset], rank: int, size: int) -> list[tuple[Dset, tuple[slice, ...]]]:
    """This rank's slabs: contiguous runs of the (dataset, slab) sequence with equal shares of the bytes."""
    items = [(d, b, max(1, sel_bytes(b, d.itemsize))) for d in dsets for b in d.blocks]
    total = sum(n for _, _, n in items)
    lo, hi = total * rank // size, total * (rank + 1) // size
    out, pos = [], 0
    for d, b, n in items:
        mid = pos + n // 2
        if lo <= mid < hi or (rank == size - 1 and mid >= hi):
            out.append((d, b))
        pos += n
    return out


def _fmt_sel(b: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in b) + "]" if b else ""


class _Raw:
    """The data path without h5py's per-slab machinery, for datasets of fixed-size types without references:
    the source's own datatype as the memory type on both sides (no conversion), one reused buffer, and for
    a container source its stored bytes copied with pread from the connector's data logs into one reused
    cache-sized buffer and written out from it at once (``h5flow_log_read_stored``: each write's data
    checksum is computed from that buffer as its bytes go by, and compared when its last byte is read, or
    from the mapped log where it is not read whole and in order: the same writes a read rejects make the
    pack fail, and a failed pack leaves nothing). Whole chunks go in with ``H5Dwrite_chunk`` where the
    destination stores them unfiltered (under MPI too: parallel HDF5
    allocates every chunk of an unfiltered dataset when it is created, so a direct write changes no metadata
    and is independent I/O like the rest)."""

    def __init__(self, cp: Copier, nbytes: int) -> None:
        from h5flow import _hdf5lib

        self.report = cp.report

        self.lib = logvol.hdf5()
        hid, hsize_p = _hdf5lib.hid_t, ctypes.POINTER(ctypes.c_uint64)
        self.lib.H5Dwrite.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
        self.lib.H5Dread.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
        self.lib.H5Dwrite_chunk.argtypes = [hid, hid, ctypes.c_uint32, hsize_p, ctypes.c_size_t, ctypes.c_void_p]
        for f in (self.lib.H5Dwrite, self.lib.H5Dread, self.lib.H5Dwrite_chunk):
            f.restype = ctypes.c_int
        self.read: Any = None
        if cp.direction == "pack" and os.environ.get("H5FLOW_PACK_DIRECT", "1") != "0":
            so = logvol.plugin()  # the copy HDF5 loaded, its functions bound
            self.read = so.h5flow_log_read_stored
            self.read_done = so.h5flow_log_read_done
        # the checksum of the write being read in order (h5flow_log_read_stored), of the open source dataset
        self.state = (ctypes.c_uint64 * 4)()
        self.state_dset: Any = None
        self.agree: list[tuple[Dset, Any, int, bytes]] = []  # (dataset, type, element, its bytes) to check
        self._piece: Any = None
        self.direct_chunks = cp.direction == "pack"
        self.nbytes = max(1, nbytes)
        self._buf: Any = None
        self.err = ctypes.create_string_buffer(1024)

    @property
    def buf(self) -> Any:
        """The reused buffer, made at first use (a container's data rarely needs it): zeroed, so that its
        pages are in memory before the first copy."""
        import numpy as np

        if self._buf is None:
            self._buf = np.zeros(self.nbytes, dtype=np.uint8)
        return self._buf

    def _io(self, write: bool, did: Any, mtype: Any, mspace: Any, fspace: Any, addr: int, nbytes: int) -> None:
        """H5Dread/H5Dwrite of ``nbytes`` at ``addr``; on failure the same call through h5py, which turns
        HDF5's error stack (the connector's message: a checksum mismatch, a damaged log) into the error."""
        import numpy as np

        fn = self.lib.H5Dwrite if write else self.lib.H5Dread
        if fn(did.id, mtype.id, mspace.id, fspace.id, 0, addr) >= 0:
            return
        try:
            (did.write if write else did.read)(mspace, fspace, np.zeros(nbytes, dtype=np.uint8), mtype)
        except Exception as e:  # noqa: BLE001 - its message is the one to report
            raise PackError(f"{'H5Dwrite' if write else 'H5Dread'} failed: {e}") from e
        raise PackError(f"{'H5Dwrite' if write else 'H5Dread'} failed (no HDF5 error message)")

    def _agrees_bytes(self, d: Dset, sd: Any, mtype: Any, pos: int, want: bytes) -> None:
        """A slab's end element read through H5Dread (the connector's own read path) must be the bytes pread
        gave for it: a cheap guard against the stored-run lookup and the read path ever disagreeing (a layout
        the lookup does not know), which would otherwise copy wrong data silently."""
        import h5py

        idx, rest = [], pos
        for x in reversed(d.shape):
            idx.append(rest % x)
            rest //= x
        fspace = sd.id.get_space()
        fspace.select_hyperslab(tuple(reversed(idx)), (1,) * len(d.shape))
        one = ctypes.create_string_buffer(d.itemsize)
        mspace = h5py.h5s.create_simple((1,))  # kept referenced: h5py closes the id with the object
        self._io(False, sd.id, mtype, mspace, fspace, ctypes.addressof(one), d.itemsize)
        if one.raw != want:
            raise PackError(f"element {pos} (row-major) reads differently through H5Dread than from its stored "
                            "run (h5flow_log_read_stored): the run lookup does not match the connector's read "
                            "path, so the pack stops (leaving nothing). Report this; H5FLOW_PACK_DIRECT=0 in the "
                            "environment packs through H5Dread")

    def copy(self, d: Dset, b: tuple[slice, ...], sd: Any, dd: Any, mtype: Any) -> None:
        import h5py

        # a slab is single indices, then one range (dimension `k`), then whole trailing dimensions: one run
        # of the row-major element order
        shape = d.shape
        k = next((i for i, s in enumerate(b) if s.stop - s.start != 1 or i == len(b) - 1), 0) if b else 0
        inner = 1
        for x in shape[k + 1:]:
            inner *= x
        if self.read is not None and b:
            r = self._pread(d, b, k, inner, sd, dd, mtype)
            if r is None:
                return
            b = b[:k] + (slice(r, b[k].stop),) + b[k + 1:]  # the rest (from row r) through H5Dread
        n = sel_bytes(b, 1) if b else 1
        fspace = sd.id.get_space()
        if b:
            fspace.select_hyperslab(tuple(s.start for s in b), tuple(s.stop - s.start for s in b))
        # shaped as the selection: HDF5 maps a chunked write element by element where they differ
        mspace = (h5py.h5s.create_simple(tuple(s.stop - s.start for s in b)) if b
                  else h5py.h5s.create(h5py.h5s.SCALAR))
        self._io(False, sd.id, mtype, mspace, fspace, self.buf.ctypes.data, n * d.itemsize)
        dspace = dd.id.get_space()
        if b:
            dspace.select_hyperslab(tuple(s.start for s in b), tuple(s.stop - s.start for s in b))
        self._io(True, dd.id, mtype, mspace, dspace, self.buf.ctypes.data, n * d.itemsize)

    def finish(self) -> None:
        """The end of the reads from the open source dataset: the write whose checksum was being accumulated
        (h5flow_log_read_stored) and was not read to its end is checked now (from the mapped log)."""
        if self.state_dset is not None and self.read is not None:
            sd, self.state_dset = self.state_dset, None
            agree, self.agree = self.agree, []
            if self.read_done(sd.id.id, self.state, self.err, len(self.err)) < 0:
                raise PackError(self.err.value.decode("utf-8", "replace"))
            for d, mtype, pos, want in agree:
                self._agrees_bytes(d, sd, mtype, pos, want)
        for i in range(4):
            self.state[i] = 0

    def _pread(self, d: Dset, b: tuple[slice, ...], k: int, inner: int, sd: Any, dd: Any,
               mtype: Any) -> int | None:
        """Slab b through one reused cache-sized buffer: its stored bytes copied in with pread
        (h5flow_log_read_stored, which checks each write's checksum from that buffer as it goes by), written
        out at once (whole chunks with H5Dwrite_chunk, other rows with H5Dwrite). None when the whole slab
        went this way, else the first row (of dimension k) not stored so (the caller reads the rest)."""
        import numpy as np

        shape, es = d.shape, d.itemsize
        row = inner * es
        c0 = d.raw_chunks[0] if d.raw_chunks and self.direct_chunks and k == 0 else 0
        # rows per piece: about PIECE_BYTES (the L2 cache), whole chunks where chunks go in as they are
        per = max(1, PIECE_BYTES // row)
        if c0:
            per = max(c0, per - per % c0)
        if self._piece is None or self._piece.nbytes < per * row:
            self._piece = np.empty(per * row, dtype=np.uint8)  # made once: its pages fault in once
        addr = self._piece.ctypes.data
        if self.state_dset is not sd:
            self.finish()
            self.state_dset = sd
        lead = 0
        for i, s in enumerate(b[:k]):
            lead = lead * shape[i] + s.start
        r0, r1 = b[k].start, b[k].stop
        base = lead * shape[k] if k < len(shape) else lead  # linear index of row 0 of dim k in this slab
        r = r0
        first = True
        while r < r1:
            # up to the next chunk boundary when unaligned, then `per` rows (whole chunks)
            e = min(r1, (r // c0 + 1) * c0 if c0 and r % c0 else r + per)
            want = (e - r) * inner
            pos, got = (base + r) * inner, 0
            while got < want:
                m = self.read(sd.id.id, pos + got, want - got, addr + got * es, self.state, self.err, len(self.err))
                if m < 0:
                    raise PackError(self.err.value.decode("utf-8", "replace"))
                if m == 0:
                    break
                got += m
            full = got // inner  # whole rows read
            if full == 0:
                return r
            e = r + full
            # checked in finish(), once every write read is checked: an H5Dread now would check the write
            # it touches from the mapped log
            if first:
                self.agree.append((d, mtype, (base + r) * inner, ctypes.string_at(addr, es)))
                first = False
            if e == r1 or full * inner < want:
                self.agree.append((d, mtype, (base + e) * inner - 1,
                                   ctypes.string_at(addr + (full * inner - 1) * es, es)))
            self.report.direct_bytes += full * row
            if c0 and r % c0 == 0 and (e - r) >= c0:
                last = r + (e - r) // c0 * c0
                off = (ctypes.c_uint64 * len(shape))()
                for c in range(r, last, c0):
                    off[0] = c
                    if self.lib.H5Dwrite_chunk(dd.id.id, 0, 0, off, c0 * row, addr + (c - r) * row) < 0:
                        raise PackError(f"H5Dwrite_chunk of the chunk at row {c} failed")
                    self.report.direct_chunks += 1
                self._rows(d, b, k, dd, mtype, last, e, addr + (last - r) * row, inner)
            else:
                self._rows(d, b, k, dd, mtype, r, e, addr, inner)
            if full * inner < want:
                return e
            r = e
        return None

    def _rows(self, d: Dset, b: tuple[slice, ...], k: int, dd: Any, mtype: Any, r0: int, r1: int, addr: int,
              inner: int) -> None:
        """H5Dwrite of rows [r0, r1) of dimension k of slab b from memory at addr."""
        import h5py

        if r1 <= r0:
            return
        sel0 = tuple(s.start for s in b[:k]) + (r0,) + (0,) * (len(b) - k - 1)
        cnt = (1,) * k + (r1 - r0,) + tuple(d.shape[k + 1:])
        dspace = dd.id.get_space()
        dspace.select_hyperslab(sel0, cnt)
        mspace = h5py.h5s.create_simple(cnt)  # shaped as the selection (see copy)
        self._io(True, dd.id, mtype, mspace, dspace, addr, (r1 - r0) * inner * d.itemsize)


def copy_data(cp: Copier, mine: list[tuple[Dset, tuple[slice, ...]]], progress: bool) -> None:
    import numpy as np

    total = sum(sel_bytes(b, d.itemsize) for d, b in mine)
    bar: Any = None
    task: Any = None
    if progress and total:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)
        from rich.console import Console

        bar = Progress(TextColumn(f"{cp.direction}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                       TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
        bar.start()
        task = bar.add_task(cp.direction, total=total)
    fixed = [sel_bytes(b, d.itemsize) for d, b in mine if not (d.refs or d.vlen)]
    raw = _Raw(cp, max(fixed)) if fixed else None
    opened: dict[str, tuple[Any, Any, Any]] = {}
    try:
        for d, b in mine:
            if d.src not in opened:
                if raw is not None:
                    raw.finish()  # before its source dataset closes
                opened.clear()  # one dataset pair open at a time (slabs of a dataset are consecutive)
                sd = cp.sf[d.src]
                opened[d.src] = (sd, cp.df[d.dst], sd.id.get_type())
            sd, dd, mtype = opened[d.src]
            try:
                if raw is not None and not (d.refs or d.vlen):
                    raw.copy(d, b, sd, dd, mtype)
                else:
                    arr = sd[b]
                    if d.refs:
                        arr = cp._remap(np.asarray(arr), d.src)
                    dd[b] = arr
            except PackError as e:
                raise PackError(f"{d.src}{_fmt_sel(b)}: {e}") from e
            except Exception as e:
                raise PackError(f"{d.src}{_fmt_sel(b)}: {type(e).__name__}: {e}") from e
            if bar is not None:
                bar.update(task, advance=sel_bytes(b, d.itemsize))
        if raw is not None:
            try:
                raw.finish()
            except PackError as e:
                raise PackError(f"{mine[-1][0].src}: {e}") from e
    finally:
        opened.clear()
        if bar is not None:
            bar.stop()
