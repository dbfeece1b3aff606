"""Direct access to the HDF5 C library that h5py is linked against.

h5py does not expose everything h5flow needs (the subfiling VFD, VOL connector names, the thread-safety
flag, plugin introspection), so this module opens the *same* ``libhdf5`` that h5py loaded — found in
the process's memory map after ``import h5py`` — with :mod:`ctypes`. Using the very same library matters:
a second copy of HDF5 in the process would have its own global state and its own identifiers.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

hid_t = ctypes.c_int64
herr_t = ctypes.c_int
hbool_t = ctypes.c_bool
htri_t = ctypes.c_int


class HDF5LibraryError(RuntimeError):
    """The HDF5 C library could not be found or lacks a required feature."""


def _loaded_libhdf5_path() -> Path:
    import h5py  # noqa: F401  (loads libhdf5 into the process)

    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            name = os.path.basename(path)
            if name.startswith("libhdf5.so") or (name.startswith("libhdf5-") and ".so" in name):
                return Path(path)
    raise HDF5LibraryError(
        "h5py is imported but no libhdf5.so is mapped into the process; h5py was probably built with "
        "HDF5 linked statically. Rebuild the stack with `make setup`."
    )


@functools.cache
def lib() -> ctypes.CDLL:
    """The libhdf5 that h5py uses, with prototypes for the functions h5flow calls."""
    path = _loaded_libhdf5_path()
    h5 = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    h5.H5get_libversion.argtypes = [ctypes.POINTER(ctypes.c_uint)] * 3
    h5.H5get_libversion.restype = herr_t
    h5.H5is_library_threadsafe.argtypes = [ctypes.POINTER(hbool_t)]
    h5.H5is_library_threadsafe.restype = herr_t
    h5.H5VLget_connector_name.argtypes = [hid_t, ctypes.c_char_p, ctypes.c_size_t]
    h5.H5VLget_connector_name.restype = ctypes.c_ssize_t
    h5.H5Dwrite.argtypes = [hid_t, hid_t, hid_t, hid_t, hid_t, ctypes.c_void_p]
    h5.H5Dwrite.restype = herr_t
    return h5


class _ErrorRecord(ctypes.Structure):  # H5E_error2_t
    _fields_ = [("cls_id", hid_t), ("maj_num", hid_t), ("min_num", hid_t), ("line", ctypes.c_uint),
                ("func_name", ctypes.c_char_p), ("file_name", ctypes.c_char_p), ("desc", ctypes.c_char_p)]


_WALK = ctypes.CFUNCTYPE(herr_t, ctypes.c_uint, ctypes.POINTER(_ErrorRecord), ctypes.c_void_p)


def error_text() -> str:
    """The descriptions on this thread's HDF5 error stack, innermost last ("; "-joined), after a call made
    through :func:`lib` failed; the stack is cleared."""
    h5 = lib()
    h5.H5Ewalk2.argtypes = [hid_t, ctypes.c_int, _WALK, ctypes.c_void_p]
    h5.H5Ewalk2.restype = herr_t
    h5.H5Eclear2.argtypes = [hid_t]
    h5.H5Eclear2.restype = herr_t
    parts: list[str] = []

    def record(_n: int, err: Any, _data: Any) -> int:
        e = err.contents
        parts.append(f"{(e.func_name or b'?').decode(errors='replace')}: {(e.desc or b'').decode(errors='replace')}")
        return 0

    h5.H5Ewalk2(0, 0, _WALK(record), None)  # H5E_DEFAULT, H5E_WALK_UPWARD
    h5.H5Eclear2(0)
    return "; ".join(p for p in parts if p.strip(": ")) or "HDF5 gave no error description"


def flush_file(file_id: int) -> None:
    """``H5Fflush`` of a file (its local scope) through :mod:`ctypes`, which lets go of Python's GIL while HDF5
    works, e.g. while a VOL connector's queue for the file drains; raises ``RuntimeError`` with HDF5's error
    stack on failure."""
    h5 = lib()
    h5.H5Fflush.argtypes = [hid_t, ctypes.c_int]
    h5.H5Fflush.restype = herr_t
    if h5.H5Fflush(file_id, 1) < 0:  # H5F_SCOPE_LOCAL
        raise RuntimeError(f"H5Fflush failed: {error_text()}")


def has_symbol(name: str) -> bool:
    """Whether the library exports ``name`` (features such as subfiling are compiled in or not)."""
    return hasattr(lib(), name)


def library_path() -> Path:
    return _loaded_libhdf5_path()


def version() -> str:
    major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    if lib().H5get_libversion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release)) < 0:
        raise HDF5LibraryError("H5get_libversion failed")
    return f"{major.value}.{minor.value}.{release.value}"


@functools.cache
def is_threadsafe() -> bool:
    flag = hbool_t(False)
    if lib().H5is_library_threadsafe(ctypes.byref(flag)) < 0:
        raise HDF5LibraryError("H5is_library_threadsafe failed")
    return bool(flag.value)


def connector_name(obj_id: int) -> str:
    """Name of the VOL connector serving an HDF5 object (file, group, dataset) id.

    HDF5 silently falls back to the native connector when a requested one cannot be loaded, so tests
    of a connector must check this name on the object they use.
    """
    size = lib().H5VLget_connector_name(obj_id, None, 0)
    if size < 0:
        raise HDF5LibraryError(f"H5VLget_connector_name failed for id {obj_id}")
    buf = ctypes.create_string_buffer(size + 1)
    lib().H5VLget_connector_name(obj_id, buf, size + 1)
    return buf.value.decode()


@dataclass(frozen=True)
class PluginInfo:
    """One HDF5 plugin library found on a plugin path."""

    file: Path
    plugin_type: str  # "vol", "vfd", "filter" or "unknown"
    name: str | None  # the connector/driver name for VOL and VFD plugins
    value: int | None  # the registered class value (connector value, driver value or filter id)


_PLUGIN_TYPES = {0: "filter", 1: "vol", 2: "vfd"}


class _VOLClassHead(ctypes.Structure):
    # The first members of H5VL_class_t (H5VLconnector.h, HDF5 1.14): version, value, name.
    _fields_ = [("version", ctypes.c_uint), ("value", ctypes.c_int), ("name", ctypes.c_char_p)]


class _VFDClassHead(ctypes.Structure):
    # The first members of H5FD_class_t (H5FDdevelop.h, HDF5 1.14): version, value, name.
    _fields_ = [("version", ctypes.c_uint), ("value", ctypes.c_int), ("name", ctypes.c_char_p)]


def inspect_plugin(path: Path) -> PluginInfo | None:
    """Read a plugin library's type and name through its ``H5PLget_plugin_type``/``_info`` exports.

    Returns ``None`` for shared objects that are not HDF5 plugins.
    """
    lib()  # plugins resolve their HDF5 symbols against the library h5py already loaded
    try:
        so = ctypes.CDLL(str(path))
    except OSError:
        return None
    if not (hasattr(so, "H5PLget_plugin_type") and hasattr(so, "H5PLget_plugin_info")):
        return None
    so.H5PLget_plugin_type.restype = ctypes.c_int
    so.H5PLget_plugin_info.restype = ctypes.c_void_p
    kind = _PLUGIN_TYPES.get(so.H5PLget_plugin_type(), "unknown")
    info = so.H5PLget_plugin_info()
    name: str | None = None
    value: int | None = None
    if info and kind in ("vol", "vfd"):
        head_type = _VOLClassHead if kind == "vol" else _VFDClassHead
        head = head_type.from_address(info)
        name = head.name.decode() if head.name else None
        value = int(head.value)
    elif info and kind == "filter":
        value = ctypes.c_int.from_address(info + ctypes.sizeof(ctypes.c_int)).value  # H5Z_class2_t.id
    return PluginInfo(file=path, plugin_type=kind, name=name, value=value)
