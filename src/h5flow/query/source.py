"""What a query or an index reads: a native HDF5 file or an h5flow_log container (a directory).

Containers are read through h5py with the h5flow_log VOL connector, which HDF5 only loads when
``HDF5_VOL_CONNECTOR=h5flow_log`` and ``HDF5_PLUGIN_PATH`` are set before it starts. :func:`open_source`
refuses a container in a process without that environment (the command line re-runs itself with it).
Index sidecars are native HDF5 files, opened with the native connector explicitly so that they stay
ordinary ``.h5`` files in either environment.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import h5py

CONTAINER_MARKER = "@h5flow_log"


def is_container(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / CONTAINER_MARKER).is_file()


def connector_env() -> dict[str, str]:
    """The environment that makes HDF5 serve h5flow_log containers."""
    from h5flow._paths import default_plugin_dir

    return {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(default_plugin_dir())}


def container_env_active() -> bool:
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
                raise ValueError(f"{path} is a directory but not an h5flow_log container (no {CONTAINER_MARKER})")
            return Source(p, True)
        return Source(p, False)

    def open(self) -> h5py.File:
        import h5py

        if self.container and not container_env_active():
            env = connector_env()
            raise RuntimeError(f"{self.path} is an h5flow_log container: HDF5 must load the connector before "
                               f"h5py starts; run with HDF5_VOL_CONNECTOR={env['HDF5_VOL_CONNECTOR']} "
                               f"HDF5_PLUGIN_PATH={env['HDF5_PLUGIN_PATH']} (the h5flow command does this itself)")
        if not self.container and container_env_active():
            return native_file(self.path, "r")
        if self.container:
            return h5py.File(self.path, "r")
        # h5py.File's defaults (sec2, libver earliest..latest), with a file access list made once
        return h5py.File(h5py.h5f.open(os.fsencode(self.path), h5py.h5f.ACC_RDONLY, fapl=_read_fapl()))

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


def _native_fapl() -> Any:
    import h5py

    from h5flow import _hdf5lib

    lib = _hdf5lib.lib()
    lib.H5VLget_connector_id_by_name.argtypes = [ctypes.c_char_p]
    lib.H5VLget_connector_id_by_name.restype = _hdf5lib.hid_t
    lib.H5Pset_vol.argtypes = [_hdf5lib.hid_t, _hdf5lib.hid_t, ctypes.c_void_p]
    lib.H5VLclose.argtypes = [_hdf5lib.hid_t]
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
    vol = lib.H5VLget_connector_id_by_name(b"native")
    if vol < 0:
        raise RuntimeError("HDF5 has no native VOL connector registered")
    try:
        if lib.H5Pset_vol(fapl.id, vol, None) < 0:
            raise RuntimeError("H5Pset_vol(native) failed")
    finally:
        lib.H5VLclose(vol)
    return fapl


def native_file(path: str | os.PathLike[str], mode: str) -> h5py.File:
    """Open (``r``, ``r+``) or create (``w``) a native HDF5 file even when HDF5_VOL_CONNECTOR names another."""
    import h5py

    if not container_env_active():
        return h5py.File(path, mode)
    name = os.fsencode(path)
    fapl = _native_fapl()
    if mode == "w":
        fid = h5py.h5f.create(name, h5py.h5f.ACC_TRUNC, fapl=fapl)
    else:
        fid = h5py.h5f.open(name, h5py.h5f.ACC_RDWR if mode == "r+" else h5py.h5f.ACC_RDONLY, fapl=fapl)
    return h5py.File(fid)
