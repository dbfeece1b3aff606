"""The copy of the object tree: groups and links in link order, committed datatypes, datasets with their
creation properties, attributes, object references remapped to the copies, dimension scales. The data of
the datasets is :mod:`h5flow.packing.data`'s: the walk records each dataset's slabs (:class:`Dset`)."""

from __future__ import annotations

from typing import Any

from h5flow.packing.data import Dset, slabs_of
from h5flow.packing.report import PackError, PackReport

# attributes H5DS writes itself: re-created through H5DS on the copy (the reference type differs between
# connectors: 1.10 object references natively, H5T_STD_REF in a container)
_DS_ATTRS = ("DIMENSION_LIST", "REFERENCE_LIST")


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


class Copier:
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
        self.dsets: list[Dset] = []  # datasets with data to copy
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
        blocks = slabs_of(tuple(shape), itemsize, tuple(chunks) if chunks else None, self.slab_bytes)
        raw_chunks = None
        if chunks and not dcpl.get_nfilters() and tuple(chunks[1:]) == tuple(shape[1:]):
            raw_chunks = tuple(chunks)
        self.dsets.append(Dset(path, path, blocks, itemsize, _has_ref(stype), _has_vlen(stype), tuple(shape),
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
