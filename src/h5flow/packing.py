"""``h5flow pack`` / ``h5flow unpack``: an h5flow_log container to one native HDF5 file and back.

:func:`pack` writes a single native ``.h5`` file that any HDF5 program reads without the plugin;
:func:`unpack` makes a container from a native file. Both copy, object by object:

* the group tree in link order (creation order where the group tracks it, else by name), hard links, soft
  links and external links (their values as they are);
* committed datatypes, and datasets created with them keep using the copy;
* every dataset with its datatype, dataspace (current and maximum shape) and creation property list
  (chunk shape, fill value and fill/allocation times, attribute creation order; filters where the source
  has them; ``strip_filters=True`` drops them on unpack);
* attributes, in creation order where tracked;
* object references (``h5py.ref_dtype``, also as fields of compound types), remapped to the copies of the
  objects they name; dimension scales (``H5DSset_scale``/``H5DSattach_scale`` on the copies, in the
  reference form of the destination's connector).

Data moves in slabs of at most ``slab_bytes`` (default 64 MiB; whole trailing rows, cut at chunk
boundaries of the first dimension where possible), so memory stays bounded whatever the dataset size.

The containers are opened with the h5flow_log connector through their file access property list
(:mod:`h5flow.connectors.logvol`), the native file with the native connector, so both work in one process
whatever ``HDF5_VOL_CONNECTOR`` says.

Output is atomic: everything is written under ``.<name>.h5flow-tmp.<host>-<pid>.<token>`` in the
destination's directory and renamed to the destination only after a successful close; a failing pack removes
it, and the next pack or unpack to the same name removes those of killed processes of this host.

Under MPI (``comm`` with more than one rank; the command line uses ``COMM_WORLD`` under ``mpiexec``), every
rank makes the same metadata calls on the destination, which is opened with the ``mpio`` driver (native) or
the connector's communicator (container), and the data slabs are split between the ranks (contiguous runs of
slabs of equal total size); each rank reads its slabs from the source, opened independently per rank, and
writes them with independent I/O. See docs/FORMAT.md, "Pack and unpack".
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from h5flow.connectors import logvol
from h5flow.connectors.h5flow_log import MARKER

DEFAULT_SLAB_BYTES = 64 << 20
# pack reads a container's stored bytes through one reused buffer of about this size (the L2 cache: the
# checksum and the write read them while they are hot), rounded to whole chunks
PIECE_BYTES = 1 << 20
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# attributes H5DS writes itself: re-created through H5DS on the copy (the reference type differs between
# connectors: 1.10 object references natively, H5T_STD_REF in a container)
_DS_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST")


class PackError(ValueError):
    """The source cannot be copied faithfully, or the destination cannot be written."""


@dataclass
class PackReport:
    """What one :func:`pack`/:func:`unpack` copied (counts are of the whole copy, ``data_bytes`` too)."""

    src: str
    dst: str
    direction: str  # "pack" or "unpack"
    groups: int = 0
    datasets: int = 0
    datatypes: int = 0
    attributes: int = 0
    soft_links: int = 0
    external_links: int = 0
    hard_links: int = 0  # second and further names of an object
    references: int = 0  # object references remapped (datasets and attributes)
    scales: int = 0  # dimension scales attached
    data_bytes: int = 0  # bytes of dataset data in memory form (vlen data: the element handles)
    slabs: int = 0  # copy steps (all ranks)
    # pack: bytes written to the native file straight from the container's mapped data logs (no read buffer;
    # the rest went through H5Dread), and how many whole chunks of them went in with H5Dwrite_chunk (all ranks)
    direct_bytes: int = 0
    direct_chunks: int = 0
    ranks: int = 1
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- file access (the connector per fapl)


def _fapl(connector: str, comm: Any) -> Any:
    """A file access list selecting ``connector`` ("native" or "h5flow_log"), with ``comm`` if given."""
    try:
        return logvol.fapl(comm, connector)
    except logvol.ConnectorError as e:
        raise PackError(str(e)) from None


def _open(path: Path, connector: str, comm: Any = None) -> Any:
    import h5py

    fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY, fapl=_fapl(connector, comm))
    return h5py.File(fid)


def _create(path: Path, connector: str, src_file: Any, comm: Any) -> Any:
    import h5py

    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    # the root group's creation list: h5flow_log's H5Fget_create_plist reports a default list
    scpl = src_file["/"].id.get_create_plist()
    # only creation-order tracking: a container refuses native layout settings (sizes, file space); a
    # userblock is not carried (neither its size nor its bytes)
    fcpl.set_link_creation_order(scpl.get_link_creation_order())
    fcpl.set_attr_creation_order(scpl.get_attr_creation_order())
    fid = h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_EXCL, fcpl=fcpl, fapl=_fapl(connector, comm))
    return h5py.File(fid)


def is_native(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as fh:
        head = fh.read(8)
    return head == HDF5_SIGNATURE  # (a user block would move the signature: not supported here)


# ---------------------------------------------------------------- the copy


def _key(oid: Any) -> tuple[int, ...]:
    """Identity of an object (file number + object number, as h5py's object equality)."""
    import h5py

    st = h5py.h5g.get_objinfo(oid, b".")
    return (*st.fileno, *st.objno)


def _has_ref(tid: Any) -> bool:
    import h5py

    cls = tid.get_class()
    if cls == h5py.h5t.REFERENCE:
        return True
    if cls == h5py.h5t.COMPOUND:
        return any(_has_ref(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if cls in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _has_ref(tid.get_super())
    return False


def _check_refs(tid: Any, where: str) -> None:
    """Refuse references that cannot be remapped to the copy's objects (rather than copy stale ones)."""
    import h5py

    cls = tid.get_class()
    if cls == h5py.h5t.REFERENCE:
        if not tid.equal(h5py.h5t.STD_REF_OBJ):
            raise PackError(f"{where}: holds region or H5R_ref_t (H5T_STD_REF) references; only object "
                            "references (H5T_STD_REF_OBJ, h5py.ref_dtype) can be copied (remapped to the copies)")
    elif cls == h5py.h5t.COMPOUND:
        for i in range(tid.get_nmembers()):
            _check_refs(tid.get_member_type(i), where)
    elif cls in (h5py.h5t.ARRAY, h5py.h5t.VLEN) and _has_ref(tid):
        raise PackError(f"{where}: holds object references inside an array or variable-length type, which "
                        "cannot be remapped to the copies; only references as the type or as compound members")


def _has_vlen(tid: Any) -> bool:
    import h5py

    cls = tid.get_class()
    if cls == h5py.h5t.VLEN or (cls == h5py.h5t.STRING and tid.is_variable_str()):
        return True
    if cls == h5py.h5t.COMPOUND:
        return any(_has_vlen(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if cls == h5py.h5t.ARRAY:
        return _has_vlen(tid.get_super())
    return False


def _blocks(shape: tuple[int, ...], itemsize: int, chunks: tuple[int, ...] | None,
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


def _slab_bytes(sel: tuple[slice, ...], itemsize: int) -> int:
    n = 1
    for s in sel:
        n *= s.stop - s.start
    return n * itemsize


@dataclass
class _Dset:
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


class _Copier:
    def __init__(self, sf: Any, df: Any, *, direction: str, report: PackReport, comm: Any,
                 slab_bytes: int, strip_filters: bool) -> None:
        self.sf, self.df = sf, df
        self.direction = direction
        self.to_container = direction == "unpack"
        self.report = report
        self.comm = comm
        self.slab_bytes = slab_bytes
        self.strip_filters = strip_filters
        self.objmap: dict[tuple[int, ...], str] = {}  # source object -> its copy's path
        self.types: dict[tuple[int, ...], Any] = {}  # source committed type -> the copy (TypeID, kept open)
        self.dsets: list[_Dset] = []  # datasets with data to copy
        self.all_dsets: list[str] = []
        self.dst_groups: set[str] = {"/"}  # groups of the copy created so far
        self.early: set[str] = set()  # committed datatypes copied ahead of the walk
        self.ref_attrs: list[tuple[str, str, bytes]] = []  # (src object, dst object, name): after the tree
        self._dst_refs: dict[tuple[int, ...], Any] = {}

    # ---- tree

    def copy_tree(self) -> None:
        sroot, droot = self.sf["/"], self.df["/"]
        self.objmap[_key(sroot.id)] = "/"
        self._attrs(sroot, droot, "/", "/")
        self._group(sroot.id, droot.id, "/")

    @staticmethod
    def _join(parent: str, name: str) -> str:
        return ("/" if parent == "/" else parent + "/") + name

    def _link_names(self, gid: Any) -> list[bytes]:
        import h5py

        tracked = gid.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        names: list[bytes] = []
        gid.links.iterate(lambda n: names.append(n),
                          idx_type=h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME)
        return names

    def _group(self, sgid: Any, dgid: Any, path: str) -> None:
        import h5py

        for name in self._link_names(sgid):
            child = self._join(path, name.decode("utf-8", "surrogateescape"))
            info = sgid.links.get_info(name)
            if info.type == h5py.h5l.TYPE_SOFT:
                dgid.links.create_soft(name, sgid.links.get_val(name))
                self.report.soft_links += 1
                continue
            if info.type == h5py.h5l.TYPE_EXTERNAL:
                fname, opath = sgid.links.get_val(name)
                dgid.links.create_external(name, fname, opath)
                self.report.external_links += 1
                continue
            if info.type != h5py.h5l.TYPE_HARD:
                raise PackError(f"{child}: a user-defined link (type {info.type}); only hard, soft and external "
                                "links can be copied")
            oid = h5py.h5o.open(sgid, name)
            key = _key(oid)
            if key in self.objmap and self.objmap[key] == child and child in self.early:
                continue  # a committed datatype copied before its link was reached (_dtype_for)
            if key in self.objmap:  # a second name of an object already copied
                try:
                    dgid.links.create_hard(name, self.df.id, self.objmap[key].encode("utf-8", "surrogateescape"))
                except Exception as e:
                    raise PackError(f"{child} is a second hard link to {self.objmap[key]}, which the destination "
                                    f"refuses ({e}); a container before format 4 allows one name per object: "
                                    "replace it by a soft link in the source") from e
                self.report.hard_links += 1
                continue
            self.objmap[key] = child
            kind = h5py.h5i.get_type(oid)
            if kind == h5py.h5i.GROUP:
                scpl = oid.get_create_plist()
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_link_creation_order(scpl.get_link_creation_order())
                gcpl.set_attr_creation_order(scpl.get_attr_creation_order())
                ngid = h5py.h5g.create(dgid, name, gcpl=gcpl)
                self.dst_groups.add(child)
                self.report.groups += 1
                self._attrs(h5py.Group(oid), h5py.Group(ngid), child, child)
                self._group(oid, ngid, child)
            elif kind == h5py.h5i.DATASET:
                self._dataset(oid, dgid, name, child)
            elif kind == h5py.h5i.DATATYPE:
                tid = oid.copy()
                tid.commit(dgid, name)
                self.types[key] = tid
                self.report.datatypes += 1
                if h5py.h5a.get_num_attrs(oid):
                    self._attrs(h5py.Datatype(oid), h5py.Datatype(tid), child, child)
            else:
                raise PackError(f"{child}: an object of HDF5 type {kind} cannot be copied")

    def _dtype_for(self, stype: Any, where: str) -> Any:
        import h5py

        if stype.committed():
            key = _key(stype)
            if key in self.types:
                return self.types[key]
            # linked later in the walk: commit the copy now under its name, if its group is copied already
            name = (h5py.h5i.get_name(stype) or b"").decode("utf-8", "surrogateescape")
            parent, _, base = name.rpartition("/")
            parent = parent or "/"
            if name.startswith("/") and base and key not in self.objmap and parent in self.dst_groups:
                tid = stype.copy()
                tid.commit(self.df[parent].id, base.encode("utf-8", "surrogateescape"))
                self.types[key] = tid
                self.objmap[key] = name
                self.early.add(name)
                self.report.datatypes += 1
                return tid
            self.report.warnings.append(f"{where}: its committed datatype is linked after it (or outside the "
                                        "file); the copy stores the type itself, not committed")
        return stype.copy()

    def _dataset(self, sdid: Any, dgid: Any, name: bytes, path: str) -> None:
        import h5py

        stype = sdid.get_type()
        _check_refs(stype, path)
        dtype = self._dtype_for(stype, path)
        space = sdid.get_space()
        dcpl = sdid.get_create_plist()
        nfilters = dcpl.get_nfilters()
        if nfilters and self.to_container and self.strip_filters:  # asked for: copied without its filters
            names = ", ".join(dcpl.get_filter(i)[3].decode("ascii", "replace") or str(dcpl.get_filter(i)[0])
                              for i in range(nfilters))
            dcpl.remove_filter(h5py.h5z.FILTER_ALL)
            self.report.warnings.append(f"{path}: filters ({names}) not copied (strip_filters)")
        virtual = dcpl.get_layout() == h5py.h5d.VIRTUAL
        if virtual and self.to_container:
            # the container maps the same sources (native files or containers, docs/FORMAT.md)
            ndid = h5py.h5d.create(dgid, name, dtype, space, dcpl=dcpl)
            self.report.datasets += 1
            self.all_dsets.append(path)
            self._attrs(h5py.Dataset(sdid), h5py.Dataset(ndid), path, path)
            return
        if virtual:
            # into a native file: the values, so that any HDF5 program reads them without the plugin (a
            # mapping would name sources that may be containers)
            dcpl = self._materialized_dcpl(dcpl, stype, space)
            self.report.warnings.append(f"{path}: virtual dataset written with its values (not its mappings)")
        ndid = h5py.h5d.create(dgid, name, dtype, space, dcpl=dcpl)
        self.report.datasets += 1
        self.all_dsets.append(path)
        sd, dd = h5py.Dataset(sdid), h5py.Dataset(ndid)
        self._attrs(sd, dd, path, path)
        if space.get_simple_extent_type() == h5py.h5s.NULL:
            return
        shape = space.shape
        itemsize = stype.get_size()
        chunks = dcpl.get_chunk() if dcpl.get_layout() == h5py.h5d.CHUNKED else None
        blocks = _blocks(tuple(shape), itemsize, tuple(chunks) if chunks else None, self.slab_bytes)
        raw_chunks = None
        if chunks and not dcpl.get_nfilters() and tuple(chunks[1:]) == tuple(shape[1:]):
            raw_chunks = tuple(chunks)
        self.dsets.append(_Dset(path, path, blocks, itemsize, _has_ref(stype), _has_vlen(stype), tuple(shape),
                                raw_chunks))

    @staticmethod
    def _materialized_dcpl(vdcpl: Any, stype: Any, space: Any) -> Any:
        """A virtual dataset's creation list as a plain one: its fill value, contiguous (chunked when its
        maximum extent exceeds its extent)."""
        import h5py
        import numpy as np

        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        shape, maxshape = space.shape, space.get_simple_extent_dims(True)
        if tuple(maxshape) != tuple(shape):
            from h5py._hl.filters import guess_chunk

            dcpl.set_chunk(guess_chunk(shape, maxshape, stype.get_size()))
        variable = stype.get_class() == h5py.h5t.VLEN or (stype.get_class() == h5py.h5t.STRING
                                                          and stype.is_variable_str())
        if vdcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED and not variable:
            fill = np.zeros(1, dtype=stype.dtype)
            vdcpl.get_fill_value(fill)
            dcpl.set_fill_value(fill)
        return dcpl

    def _attr_names(self, obj: Any) -> list[bytes]:
        import h5py

        oid = obj.id
        try:
            cpl = oid.get_create_plist()
            tracked = cpl.get_attr_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        except Exception:  # committed datatypes: no creation list to ask
            tracked = 0
        names: list[bytes] = []
        h5py.h5a.iterate(oid, lambda n: names.append(n),
                         index_type=h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME)
        return names

    def _attrs(self, sobj: Any, dobj: Any, spath: str, dpath: str) -> None:
        import h5py

        for name in self._attr_names(sobj):
            if name.decode("utf-8", "surrogateescape") in _DS_ATTRS:
                continue  # re-created by H5DS after the tree (copy_scales)
            aid = h5py.h5a.open(sobj.id, name)
            if _has_ref(aid.get_type()):
                _check_refs(aid.get_type(), f"{spath} attribute {name.decode('utf-8', 'surrogateescape')!r}")
                self.ref_attrs.append((spath, dpath, name))
                continue
            self._attr(aid, dobj.id, name, spath, remap=False)

    def _attr(self, aid: Any, doid: Any, name: bytes, where: str, remap: bool) -> None:
        import h5py
        import numpy as np

        atype = aid.get_type()
        space = aid.get_space()
        naid = h5py.h5a.create(doid, name, self._dtype_for(atype, f"{where} attribute {name!r}"), space)
        self.report.attributes += 1
        if aid.shape is None:  # null dataspace: no value
            return
        dtype = aid.dtype
        htype = h5py.h5t.py_create(dtype)
        shape = aid.shape
        if dtype.subdtype is not None:
            sub, subshape = dtype.subdtype
            shape, dtype = shape + subshape, sub
        arr = np.zeros(shape, dtype=dtype, order="C")
        aid.read(arr, mtype=htype)
        if remap:
            arr = self._remap(arr, where)
        naid.write(arr, mtype=htype)

    # ---- references

    def _remap(self, arr: Any, where: str) -> Any:
        import h5py
        import numpy as np

        if arr.dtype.names:
            out = arr.copy()
            for n in arr.dtype.names:
                if h5py.check_ref_dtype(arr.dtype[n]) is not None or arr.dtype[n].names:
                    out[n] = self._remap(arr[n], where)
            return out
        kind = h5py.check_ref_dtype(arr.dtype)
        if kind is None:
            return arr
        if kind is not h5py.Reference:
            raise PackError(f"{where}: region references are not copied (pack remaps object references only; "
                            "a region reference would have to be made anew on the copy of its dataset)")
        out = np.empty(arr.shape, dtype=h5py.ref_dtype)
        flat_in, flat_out = arr.reshape(-1), out.reshape(-1)
        for i, r in enumerate(flat_in):
            flat_out[i] = self._dst_ref(r, where)
        return out

    def _dst_ref(self, r: Any, where: str) -> Any:
        import h5py

        if not r:
            return h5py.Reference()  # null reference
        obj = self.sf[r]
        key = _key(obj.id)
        if key not in self._dst_refs:
            path = self.objmap.get(key)
            if path is None:
                raise PackError(f"{where}: holds a reference to {obj.name!r}, which the copy does not have "
                                "(an object with no link in the file)")
            self._dst_refs[key] = self.df[path].ref
            self.report.references += 1
        return self._dst_refs[key]

    def copy_ref_attrs(self) -> None:
        import h5py

        for spath, dpath, name in self.ref_attrs:
            sobj, dobj = self.sf[spath], self.df[dpath]
            self._attr(h5py.h5a.open(sobj.id, name), dobj.id, name, spath, remap=True)

    # ---- dimension scales

    def copy_scales(self) -> None:
        import h5py

        for d in self.dsets_all():
            sd = self.sf[d]
            if h5py.h5ds.is_scale(sd.id):
                dd = self.df[d]
                had_name = "NAME" in dd.attrs
                if not had_name:
                    h5py.h5ds.set_scale(dd.id, b"")
                    if "NAME" not in sd.attrs and "NAME" in dd.attrs:
                        del dd.attrs["NAME"]  # H5DSset_scale wrote NAME="" for the empty name
                else:
                    h5py.h5ds.set_scale(dd.id, h5py.h5ds.get_scale_name(sd.id) or b"")
        for d in self.dsets_all():
            sd = self.sf[d]
            if "DIMENSION_LIST" not in sd.attrs:
                continue
            dd = self.df[d]
            for dim in range(len(sd.shape or ())):
                found: list[Any] = []
                h5py.h5ds.iterate(sd.id, dim, lambda sid: found.append(_key(sid)))
                for key in found:
                    path = self.objmap.get(key)
                    if path is None:
                        raise PackError(f"{d}: dimension {dim} has a scale without a link in the file")
                    h5py.h5ds.attach_scale(dd.id, self.df[path].id, dim)
                    self.report.scales += 1

    def dsets_all(self) -> list[str]:
        return self.all_dsets


def _assign(dsets: list[_Dset], rank: int, size: int) -> list[tuple[_Dset, tuple[slice, ...]]]:
    """This rank's slabs: contiguous runs of the (dataset, slab) sequence with equal shares of the bytes."""
    items = [(d, b, max(1, _slab_bytes(b, d.itemsize))) for d in dsets for b in d.blocks]
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

    def __init__(self, cp: _Copier, nbytes: int) -> None:
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
        self.agree: list[tuple[_Dset, Any, int, bytes]] = []  # (dataset, type, element, its bytes) to check
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

    def _agrees_bytes(self, d: _Dset, sd: Any, mtype: Any, pos: int, want: bytes) -> None:
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

    def copy(self, d: _Dset, b: tuple[slice, ...], sd: Any, dd: Any, mtype: Any) -> None:
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
        n = _slab_bytes(b, 1) if b else 1
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

    def _pread(self, d: _Dset, b: tuple[slice, ...], k: int, inner: int, sd: Any, dd: Any,
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

    def _rows(self, d: _Dset, b: tuple[slice, ...], k: int, dd: Any, mtype: Any, r0: int, r1: int, addr: int,
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


def _copy_data(cp: _Copier, mine: list[tuple[_Dset, tuple[slice, ...]]], progress: bool) -> None:
    import numpy as np

    total = sum(_slab_bytes(b, d.itemsize) for d, b in mine)
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
    fixed = [_slab_bytes(b, d.itemsize) for d, b in mine if not (d.refs or d.vlen)]
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
                bar.update(task, advance=_slab_bytes(b, d.itemsize))
        if raw is not None:
            try:
                raw.finish()
            except PackError as e:
                raise PackError(f"{mine[-1][0].src}: {e}") from e
    finally:
        opened.clear()
        if bar is not None:
            bar.stop()


# ---------------------------------------------------------------- destination handling


def _check_paths(src: Path, dst: Path, force: bool, want: str) -> None:
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file or container")
    if want == "container" and not logvol.is_container(src):
        raise PackError(f"{src} is not an h5flow_log container (a directory holding {MARKER})"
                        + ("; it is a native HDF5 file: use `h5flow unpack` to make a container of it"
                           if is_native(src) else ""))
    if want == "native" and not is_native(src):
        raise PackError(f"{src} is not a native HDF5 file"
                        + ("; it is an h5flow_log container: use `h5flow pack` to make a native file of it"
                           if logvol.is_container(src) else ""))
    if dst.resolve() == src.resolve():
        raise PackError(f"{dst}: the destination is the source")
    if (dst.exists() or dst.is_symlink()) and not force:
        raise FileExistsError(f"{dst} exists: choose another name or pass --force (force=True) to replace it")
    if not dst.parent.is_dir():
        raise FileNotFoundError(f"{dst.parent}: the destination's directory does not exist")


_HOST = socket.gethostname().replace("/", "_")


def _interrupted_outputs(dst: Path, kind: str = "tmp") -> list[Path]:
    """Temporary outputs (``.<name>.h5flow-tmp.<host>-<pid>.<token>``; ``kind="old"``: a previous
    destination moved aside by ``--force``, ``.<name>.h5flow-old.<host>-<pid>.<token>``) of a pack or unpack
    to ``dst`` whose process, on this host, is gone (killed before it could remove them). Those of live
    processes, of other hosts and of a reused pid are left alone."""
    pat = re.compile(rf"\.{re.escape(dst.name)}\.h5flow-{kind}\.(?P<host>.+)-(?P<pid>\d+)\.[0-9a-f]{{12}}")
    out = []
    try:
        names = os.listdir(dst.parent)
    except OSError:
        return []
    for n in names:
        m = pat.fullmatch(n)
        if m is None or m.group("host") != _HOST or int(m.group("pid")) == os.getpid():
            continue
        try:
            os.kill(int(m.group("pid")), 0)
        except ProcessLookupError:
            out.append(dst.parent / n)
        except OSError:  # alive (another user's process): not ours to remove
            pass
    return sorted(out)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _install(tmp: Path, dst: Path) -> None:
    """Rename ``tmp`` to ``dst``; an existing ``dst`` (--force) is moved aside first and removed after."""
    if dst.exists() or dst.is_symlink():
        if tmp.is_file() and dst.is_file() and not dst.is_symlink():
            os.replace(tmp, dst)  # atomic
            return
        old = dst.parent / f".{dst.name}.h5flow-old.{_HOST}-{os.getpid()}.{uuid.uuid4().hex[:12]}"
        os.rename(dst, old)
        try:
            os.rename(tmp, dst)
        except OSError:
            os.rename(old, dst)
            raise
        _remove(old)
    else:
        os.rename(tmp, dst)


def _clean_interrupted(dstp: Path) -> list[str]:
    """Remove what killed packs and unpacks to ``dstp`` left (their temporary outputs), and finish an
    interrupted ``--force`` replacement; returns what was done, as warnings."""
    warnings: list[str] = []
    for old in _interrupted_outputs(dstp):  # of a pack/unpack to the same name that was killed
        _remove(old)
        warnings.append(f"removed {old}, the temporary output of an interrupted pack or unpack to {dstp.name}")
    for old in _interrupted_outputs(dstp, "old"):  # --force killed between its two renames
        if dstp.exists() or dstp.is_symlink():  # the new destination was in place: the old one is garbage
            _remove(old)
            warnings.append(f"removed {old}, the previous {dstp.name} an interrupted --force replaced")
        else:  # killed before the new one was in place: the previous destination comes back
            os.rename(old, dstp)
            warnings.append(f"restored {dstp} from {old}, where an interrupted --force had moved it")
    return warnings


def _run(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, direction: str, force: bool,
         slab_bytes: int, progress: bool, comm: Any, strip_filters: bool) -> PackReport:
    import h5py  # noqa: F401  (loads HDF5 before the ctypes calls)

    if slab_bytes < 1:
        raise PackError(f"slab_bytes must be at least 1 (got {slab_bytes})")
    if comm is not None and comm.size == 1:
        comm = None
    rank, size = (0, 1) if comm is None else (comm.rank, comm.size)
    t0 = time.perf_counter()
    srcp, dstp = Path(src), Path(dst)
    src_kind, dst_kind = ("h5flow_log", "native") if direction == "pack" else ("native", "h5flow_log")
    err: BaseException | None = None
    cleaned: list[str] = []
    try:
        if rank == 0:
            cleaned = _clean_interrupted(dstp)
    except BaseException as e:  # noqa: BLE001 - re-raised below, on every rank
        err = e
    if comm is not None:
        comm.Barrier()  # the destination as the cleanup left it, on every rank
    try:
        if err is None:
            _check_paths(srcp, dstp, force, "container" if direction == "pack" else "native")
    except BaseException as e:  # noqa: BLE001 - re-raised below, on every rank
        err = e
    if comm is not None:
        errs = comm.allgather(None if err is None else repr(err))
        if err is None and any(errs):
            raise PackError(f"rank {next(i for i, e in enumerate(errs) if e)}: {next(e for e in errs if e)}")
    if err is not None:
        if cleaned:  # what the cleanup did must not go unsaid
            raise PackError(f"{err}; before that: {'; '.join(cleaned)}") from err
        raise err
    report = PackReport(src=str(srcp), dst=str(dstp), direction=direction, ranks=size, warnings=cleaned)
    token = None
    if rank == 0:
        token = f"{_HOST}-{os.getpid()}.{uuid.uuid4().hex[:12]}"
    if comm is not None:
        token = comm.bcast(token, root=0)
    tmp = dstp.parent / f".{dstp.name}.h5flow-tmp.{token}"
    sf = df = None
    ok = False
    try:
        sf = _open(srcp, src_kind)  # every rank reads independently
        df = _create(tmp, dst_kind, sf, comm)
        cp = _Copier(sf, df, direction=direction, report=report, comm=comm, slab_bytes=slab_bytes,
                     strip_filters=strip_filters)
        cp.copy_tree()
        report.data_bytes = sum(_slab_bytes(b, d.itemsize) for d in cp.dsets for b in d.blocks)
        report.slabs = sum(len(d.blocks) for d in cp.dsets)
        # parallel HDF5 cannot write variable-length data or references to a native file ("Parallel IO does
        # not support writing VL or region reference datatypes"): under MPI rank 0 writes those datasets
        # after the collective close
        later = [d for d in cp.dsets if d.vlen or d.refs] if comm is not None and dst_kind == "native" else []
        mine = _assign([d for d in cp.dsets if d not in later], rank, size)
        failure: str | None = None
        try:
            _copy_data(cp, mine, progress and rank == 0)
        except Exception as e:  # noqa: BLE001 - every rank must reach the collective close
            failure = f"{type(e).__name__}: {e}"
        if comm is not None:
            report.direct_bytes = comm.allreduce(report.direct_bytes)
            report.direct_chunks = comm.allreduce(report.direct_chunks)
            fails = comm.allgather(failure)
            failure = next((f"rank {i}: {f}" for i, f in enumerate(fails) if f), None)
        if failure is not None:
            raise PackError(f"copying the data of {srcp} failed: {failure}")
        cp.copy_ref_attrs()
        cp.copy_scales()
        cp.types.clear()
        df.close()
        df = None
        if later and rank == 0:
            import h5py

            df = h5py.File(h5py.h5f.open(os.fsencode(tmp), h5py.h5f.ACC_RDWR, fapl=_fapl("native", None)))
            cp.df = df
            _copy_data(cp, [(d, b) for d in later for b in d.blocks], progress)
            df.close()
            df = None
        ok = True
    finally:
        if df is not None:
            try:
                df.close()
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
        if sf is not None:
            sf.close()
        if comm is not None:
            oks = comm.allgather(ok)
            ok = all(oks)
        if rank == 0:
            if ok:
                _install(tmp, dstp)
            else:
                _remove(tmp)
        if comm is not None:
            comm.Barrier()
    if not ok:
        raise PackError(f"{direction} of {srcp} failed on another rank; nothing was written to {dstp}")
    report.seconds = time.perf_counter() - t0
    return report


def pack(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, force: bool = False,
         slab_bytes: int = DEFAULT_SLAB_BYTES, progress: bool = False, comm: Any = None) -> PackReport:
    """Copy the h5flow_log container ``src`` into the new native HDF5 file ``dst``.

    ``force`` replaces an existing ``dst``; ``slab_bytes`` bounds the data held in memory per copy step;
    ``progress`` shows a progress bar on stderr (rank 0); ``comm`` (an mpi4py communicator, all its ranks
    calling) shares the data between the ranks. Raises :class:`PackError` (a ``ValueError``),
    ``FileNotFoundError`` or ``FileExistsError`` with a message saying what to do; on any error nothing is
    left at ``dst`` (or the previous ``dst`` stays)."""
    return _run(src, dst, direction="pack", force=force, slab_bytes=slab_bytes, progress=progress, comm=comm,
                strip_filters=False)


def unpack(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, force: bool = False,
           slab_bytes: int = DEFAULT_SLAB_BYTES, progress: bool = False, comm: Any = None,
           strip_filters: bool = False) -> PackReport:
    """Copy the native HDF5 file ``src`` into the new h5flow_log container ``dst`` (see :func:`pack`).

    Filtered (compressed) datasets keep their filters (the container applies them per write);
    ``strip_filters`` copies them without."""
    return _run(src, dst, direction="unpack", force=force, slab_bytes=slab_bytes, progress=progress, comm=comm,
                strip_filters=strip_filters)


# ---------------------------------------------------------------- command line


def _comm_world() -> Any:
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) <= 1:
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD if MPI.COMM_WORLD.size > 1 else None


def _cmd(direction: str) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        comm = _comm_world()
        progress = {"auto": sys.stderr.isatty(), "always": True, "never": False}[args.progress]
        fn = pack if direction == "pack" else unpack
        kw: dict[str, Any] = {"strip_filters": args.strip_filters} if direction == "unpack" else {}
        r = fn(args.src, args.dst, force=args.force, slab_bytes=int(args.slab_mib * (1 << 20)), progress=progress,
               comm=comm, **kw)
        if comm is None or comm.rank == 0:
            mib = r.data_bytes / (1 << 20)
            print(f"{direction}ed {r.src} -> {r.dst}: {r.groups} group(s), {r.datasets} dataset(s), "
                  f"{r.attributes} attribute(s), {r.soft_links + r.external_links + r.hard_links} link(s), "
                  f"{r.datatypes} committed type(s); {mib:.1f} MiB in {r.seconds:.2f} s"
                  + (f" on {r.ranks} ranks" if r.ranks > 1 else ""))
            for w in r.warnings:
                sys.stdout.flush()
                print(f"warning: {w}", file=sys.stderr)
        return 0

    return run


def _slab_mib(text: str) -> float:
    """``--slab-mib``: a finite number of MiB that makes at least one byte."""
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v * (1 << 20) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite size of at least 1 byte, in MiB (e.g. 64)")
    return v


def add_commands(sub: Any) -> None:
    for direction, what in (("pack", "an h5flow_log container into one native HDF5 file"),
                            ("unpack", "a native HDF5 file into an h5flow_log container")):
        src_name, dst_name = ("CONTAINER", "OUT.h5") if direction == "pack" else ("IN.h5", "CONTAINER")
        p = sub.add_parser(direction, help=f"copy {what}",
                           description=f"Copy {what}: groups, links, committed datatypes, datasets (type, shape, "
                           "max shape, chunking, fill value), attributes, object references and dimension scales "
                           "(docs/FORMAT.md, 'Pack and unpack'). Written under a temporary name and renamed on "
                           "success. Under mpiexec the ranks share the data.")
        p.add_argument("src", metavar=src_name)
        p.add_argument("dst", metavar=dst_name)
        p.add_argument("--force", action="store_true", help=f"replace {dst_name} if it exists")
        p.add_argument("--slab-mib", type=_slab_mib, default=DEFAULT_SLAB_BYTES / (1 << 20),
                       help="data held in memory per copy step, MiB (default %(default)g)")
        p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                       help="progress bar on stderr (auto: when stderr is a terminal)")
        if direction == "unpack":
            p.add_argument("--strip-filters", action="store_true",
                           help="copy compressed/filtered datasets without their filters (default: they keep "
                           "them)")
        p.set_defaults(func=_cmd(direction))
