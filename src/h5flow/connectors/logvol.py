"""The h5flow_log connector's Python low level: the one place that loads it, registers it and binds its
exported functions.

Everything in h5flow that opens an h5flow_log container (pack and unpack, statistics, restructuring,
queries and indexes, the hdf5 transport's ``layout="log"``) goes through this module, as h5py's high level
goes through ``h5p``/``h5f``. A container is selected **by the file access list** (:func:`fapl`): HDF5
loads the plugin from h5flow's plugin directory the first time it is needed, in any process, whatever
``HDF5_VOL_CONNECTOR`` says, and other files of the process stay native. Setting the environment
(``HDF5_PLUGIN_PATH`` + ``HDF5_VOL_CONNECTOR=h5flow_log`` before HDF5 starts) is the way for *unmodified*
programs (h5dump, a user's h5py script); h5flow's own code never needs it.

The plugin that HDF5 loaded is the one whose functions :func:`plugin` binds (``dlopen`` of the same path
returns the same handle), so ``h5flow_log_stats_json`` and the others act on the objects HDF5 opened.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Any

from h5flow.connectors.h5flow_log import MARKER

NAME = "h5flow_log"
LIBRARY = "libh5flow_log.so"
#: the connectors of h5flow's plugin directory this module registers: h5flow_log and the stacking ones that the
#: hdf5 transport puts above native (connectors/stack.py)
LOADABLE = (NAME, "h5flow_async", "h5flow_cache")
# The names handed to H5VLregister_connector_by_name, kept for the life of the process: HDF5's plugin cache
# keeps the pointer a plugin was first loaded by and compares later searches by name against it, so a name
# whose memory is freed and reused could make a search for one connector load another.
_KEPT_NAMES: dict[str, bytes] = {name: name.encode() for name in LOADABLE}
UDF_PROP = b"h5flow_log.udf"
UDF_SPEC_MAX = 1024  # bytes of the property (include/h5flow_udf.h)


class ConnectorError(RuntimeError):
    """The h5flow_log connector is not built, cannot be loaded, or refused what was asked of it."""


def environment() -> dict[str, str]:
    """The environment that makes an *unmodified* HDF5 program (h5dump, a user's h5py script) open files
    through h5flow_log: to be set before HDF5 starts in that program."""
    from h5flow._paths import default_plugin_dir

    return {"HDF5_VOL_CONNECTOR": NAME, "HDF5_PLUGIN_PATH": str(default_plugin_dir())}


def is_container(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an h5flow_log container: a directory holding the ``@h5flow_log`` marker."""
    return (Path(path) / MARKER).is_file()


@functools.cache
def hdf5() -> ctypes.CDLL:
    """The HDF5 library this process loaded (h5py's), with the VOL and plugin calls used here bound."""
    from h5flow import _hdf5lib

    lib = _hdf5lib.lib()
    hid = _hdf5lib.hid_t
    lib.H5PLappend.argtypes = [ctypes.c_char_p]
    lib.H5PLappend.restype = _hdf5lib.herr_t
    lib.H5VLregister_connector_by_name.argtypes = [ctypes.c_char_p, hid]
    lib.H5VLregister_connector_by_name.restype = hid
    lib.H5VLget_connector_id_by_name.argtypes = [ctypes.c_char_p]
    lib.H5VLget_connector_id_by_name.restype = hid
    lib.H5Pset_vol.argtypes = [hid, hid, ctypes.c_void_p]
    lib.H5Pset_vol.restype = _hdf5lib.herr_t
    lib.H5VLclose.argtypes = [hid]
    lib.H5VLclose.restype = _hdf5lib.herr_t
    return lib


@functools.cache
def _plugin_dir_appended(connector: str = NAME) -> Path:
    from h5flow._paths import default_plugin_dir

    d = default_plugin_dir()
    library = f"lib{connector}.so"
    if not (d / library).is_file():
        raise ConnectorError(f"the {connector} connector is not built ({d / library} is missing): run `make setup` "
                             "(or set H5FLOW_BUILD_DIR to the build directory holding plugins/)")
    if hdf5().H5PLappend(os.fsencode(d)) < 0:
        raise ConnectorError(f"H5PLappend({d}) failed: HDF5 cannot add the plugin directory")
    return d


@functools.cache
def vol_id(connector: str = NAME) -> int:
    """The id of ``connector`` (``"native"`` or one of :data:`LOADABLE`), registered once and kept for the life
    of the process: the connector looks itself up by name (e.g. to recognise its own committed datatypes),
    which finds it only while an id of it is registered."""
    lib = hdf5()
    if connector == "native":
        vol = lib.H5VLget_connector_id_by_name(b"native")
    elif connector in LOADABLE:
        _plugin_dir_appended(connector)
        vol = lib.H5VLregister_connector_by_name(_KEPT_NAMES[connector], 0)
    else:
        raise ValueError(f"connector {connector!r}: 'native' or one of {', '.join(LOADABLE)}")
    if vol < 0:
        raise ConnectorError(f"HDF5 cannot load the {connector} VOL connector"
                             + (f" (is build/plugins/lib{connector}.so built? run `make setup`)"
                                if connector != "native" else ""))
    return int(vol)


def fapl(comm: Any = None, connector: str = NAME, *, locking: bool = True) -> Any:
    """A new file access list (h5py ``PropFAID``) selecting ``connector`` (``"h5flow_log"`` or ``"native"``,
    the latter for native files in a process whose environment names another connector), with the MPI-IO
    driver on ``comm`` if given; ``locking=False`` turns HDF5's file locking off."""
    import h5py

    plist = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    if comm is not None:
        from mpi4py import MPI

        plist.set_fapl_mpio(comm, MPI.INFO_NULL)
    if connector == "native":
        plist.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    if not locking:
        plist.set_file_locking(False, True)
    if hdf5().H5Pset_vol(plist.id, vol_id(connector), None) < 0:
        raise ConnectorError(f"H5Pset_vol({connector}) failed")
    return plist


def open_container(path: str | os.PathLike[str], mode: str = "r", *, comm: Any = None,
                   track_order: bool = False) -> Any:
    """Open (``r``, ``r+``) or create (``w``: refused if it exists) an h5flow_log container as an
    ``h5py.File``, serially or on ``comm``. ``track_order`` (``w``): track the root group's link and
    attribute creation order."""
    import h5py

    access = fapl(comm)
    name = os.fsencode(path)
    if mode == "w":
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        if track_order:
            flags = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED
            fcpl.set_link_creation_order(flags)
            fcpl.set_attr_creation_order(flags)
        return h5py.File(h5py.h5f.create(name, h5py.h5f.ACC_EXCL, fcpl=fcpl, fapl=access))
    if mode not in ("r", "r+"):
        raise ValueError(f"mode {mode!r}: use 'r', 'r+' or 'w'")
    return h5py.File(h5py.h5f.open(name, h5py.h5f.ACC_RDWR if mode == "r+" else h5py.h5f.ACC_RDONLY, fapl=access))


def open_native(path: str | os.PathLike[str], mode: str, *, comm: Any = None, locking: bool = True) -> Any:
    """Open (``r``, ``r+``) or create (``w``: truncating) a native HDF5 file through the native connector
    explicitly, whatever ``HDF5_VOL_CONNECTOR`` says."""
    import h5py

    access = fapl(comm, "native", locking=locking)
    name = os.fsencode(path)
    if mode == "w":
        return h5py.File(h5py.h5f.create(name, h5py.h5f.ACC_TRUNC, fapl=access))
    if mode not in ("r", "r+"):
        raise ValueError(f"mode {mode!r}: use 'r', 'r+' or 'w'")
    return h5py.File(h5py.h5f.open(name, h5py.h5f.ACC_RDWR if mode == "r+" else h5py.h5f.ACC_RDONLY, fapl=access))


def plugin_path() -> str:
    """The path of the h5flow_log plugin HDF5 loaded into this process (loading it first)."""
    vol_id()
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            if os.path.basename(path) == LIBRARY:
                return path
    raise ConnectorError("HDF5 registered the h5flow_log connector but its library is not mapped in this process")


@functools.cache
def plugin() -> ctypes.CDLL:
    """The plugin HDF5 loaded, with its exported functions bound (docs/FORMAT.md): statistics
    (``h5flow_log_stats_json``/``_free``), restructuring (``h5flow_log_restructure``/``_free``) and pack's
    stored-bytes reader (``h5flow_log_read_stored``, ``h5flow_log_read_done``)."""
    from h5flow import _hdf5lib

    so = ctypes.CDLL(plugin_path())
    hid, u64 = _hdf5lib.hid_t, ctypes.c_uint64
    so.h5flow_log_stats_json.argtypes = [hid, ctypes.POINTER(ctypes.c_void_p)]
    so.h5flow_log_stats_json.restype = ctypes.c_int
    so.h5flow_log_stats_free.argtypes = [ctypes.c_void_p]
    so.h5flow_log_stats_free.restype = None
    so.h5flow_log_restructure.argtypes = [hid, ctypes.c_uint, ctypes.POINTER(u64), ctypes.c_uint,
                                          ctypes.POINTER(ctypes.c_void_p)]
    so.h5flow_log_restructure.restype = ctypes.c_int
    so.h5flow_log_restructure_free.argtypes = [ctypes.c_void_p]
    so.h5flow_log_restructure_free.restype = None
    so.h5flow_log_read_stored.argtypes = [hid, u64, u64, ctypes.c_void_p, ctypes.POINTER(u64), ctypes.c_char_p,
                                          ctypes.c_size_t]
    so.h5flow_log_read_stored.restype = ctypes.c_int64
    so.h5flow_log_read_done.argtypes = [hid, ctypes.POINTER(u64), ctypes.c_char_p, ctypes.c_size_t]
    so.h5flow_log_read_done.restype = ctypes.c_int
    return so


def call_json(fn: str, dset_id: int, *args: Any) -> tuple[int, str]:
    """Call one of the plugin's functions that return a JSON text it allocated (``fn`` is the name without
    ``h5flow_log_``: ``stats_json`` or ``restructure``) on the dataset ``dset_id``; returns (status, text)."""
    so = plugin()
    out = ctypes.c_void_p()
    rc = getattr(so, f"h5flow_log_{fn}")(int(dset_id), *args, ctypes.byref(out))
    text = ctypes.string_at(out.value).decode("utf-8") if out.value else ""
    free = so.h5flow_log_stats_free if fn == "stats_json" else so.h5flow_log_restructure_free
    free(out)
    return int(rc), text


def set_udf(plist: Any, library: str | os.PathLike[str], symbol: str) -> None:
    """Name the user data function ``symbol`` of the shared library ``library`` in a dataset creation
    property list (an h5py ``PropDCID`` or an integer id), as ``h5flow_udf_set`` in C does. Pass the
    list to ``create_dataset(..., dcpl=plist)``; the connector stores the function with the dataset."""
    from h5flow import _hdf5lib

    lib_b, sym_b = os.fsencode(os.path.abspath(library)), symbol.encode()
    if not sym_b or b"\n" in lib_b or b"\n" in sym_b or len(lib_b) + len(sym_b) + 2 > UDF_SPEC_MAX:
        raise ValueError(f"user data function {library}:{symbol}: names must be non-empty, without newlines, "
                         f"and together shorter than {UDF_SPEC_MAX - 1} bytes")
    spec = ctypes.create_string_buffer(lib_b + b"\n" + sym_b, UDF_SPEC_MAX)
    pid = int(getattr(plist, "id", plist))
    h5 = hdf5()
    h5.H5Pexist.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p]
    h5.H5Pexist.restype = _hdf5lib.htri_t
    h5.H5Pset.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p, ctypes.c_void_p]
    h5.H5Pset.restype = _hdf5lib.herr_t
    h5.H5Pinsert2.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p] + \
        [ctypes.c_void_p] * 6
    h5.H5Pinsert2.restype = _hdf5lib.herr_t
    ex = h5.H5Pexist(pid, UDF_PROP)
    if ex < 0:
        raise RuntimeError(f"H5Pexist on property list {pid} failed: is it a dataset creation property list?")
    rc = h5.H5Pset(pid, UDF_PROP, spec) if ex > 0 else \
        h5.H5Pinsert2(pid, UDF_PROP, UDF_SPEC_MAX, spec, None, None, None, None, None, None)
    if rc < 0:
        raise RuntimeError(f"cannot set the property {UDF_PROP.decode()} on property list {pid}")
