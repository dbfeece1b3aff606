"""The files of a pack or unpack: the source and the destination opened, each with its own connector through
its file access list (:mod:`h5flow.connectors.logvol`: both work in one process whatever
``HDF5_VOL_CONNECTOR`` says), and the output written under a temporary name in the destination's directory,
installed by rename, the leftovers of killed processes of this host removed."""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

from h5flow.connectors import logvol
from h5flow.connectors.h5flow_log import MARKER
from h5flow.packing.report import PackError

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


# ---------------------------------------------------------------- file access (the connector per fapl)


def fapl(connector: str, comm: Any) -> Any:
    """A file access list selecting ``connector`` ("native" or "h5flow_log"), with ``comm`` if given."""
    try:
        return logvol.fapl(comm, connector)
    except logvol.ConnectorError as e:
        raise PackError(str(e)) from None


def open_file(path: Path, connector: str, comm: Any = None) -> Any:
    import h5py

    fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY, fapl=fapl(connector, comm))
    return h5py.File(fid)


def create_file(path: Path, connector: str, src_file: Any, comm: Any) -> Any:
    import h5py

    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    # the root group's creation list: h5flow_log's H5Fget_create_plist reports a default list
    scpl = src_file["/"].id.get_create_plist()
    # only creation-order tracking: a container refuses native layout settings (sizes, file space); a
    # userblock is not carried (neither its size nor its bytes)
    fcpl.set_link_creation_order(scpl.get_link_creation_order())
    fcpl.set_attr_creation_order(scpl.get_attr_creation_order())
    fid = h5py.h5f.create(os.fsencode(path), h5py.h5f.ACC_EXCL, fcpl=fcpl, fapl=fapl(connector, comm))
    return h5py.File(fid)


def is_native(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as fh:
        head = fh.read(8)
    return head == HDF5_SIGNATURE  # (a user block would move the signature: not supported here)


# ---------------------------------------------------------------- destination handling


def check_paths(src: Path, dst: Path, force: bool, want: str) -> None:
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


HOST = socket.gethostname().replace("/", "_")


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
        if m is None or m.group("host") != HOST or int(m.group("pid")) == os.getpid():
            continue
        try:
            os.kill(int(m.group("pid")), 0)
        except ProcessLookupError:
            out.append(dst.parent / n)
        except OSError:  # alive (another user's process): not ours to remove
            pass
    return sorted(out)


def remove_output(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def install_output(tmp: Path, dst: Path) -> None:
    """Rename ``tmp`` to ``dst``; an existing ``dst`` (--force) is moved aside first and removed after."""
    if dst.exists() or dst.is_symlink():
        if tmp.is_file() and dst.is_file() and not dst.is_symlink():
            os.replace(tmp, dst)  # atomic
            return
        old = dst.parent / f".{dst.name}.h5flow-old.{HOST}-{os.getpid()}.{uuid.uuid4().hex[:12]}"
        os.rename(dst, old)
        try:
            os.rename(tmp, dst)
        except OSError:
            os.rename(old, dst)
            raise
        remove_output(old)
    else:
        os.rename(tmp, dst)


def clean_interrupted(dstp: Path) -> list[str]:
    """Remove what killed packs and unpacks to ``dstp`` left (their temporary outputs), and finish an
    interrupted ``--force`` replacement; returns what was done, as warnings."""
    warnings: list[str] = []
    for old in _interrupted_outputs(dstp):  # of a pack/unpack to the same name that was killed
        remove_output(old)
        warnings.append(f"removed {old}, the temporary output of an interrupted pack or unpack to {dstp.name}")
    for old in _interrupted_outputs(dstp, "old"):  # --force killed between its two renames
        if dstp.exists() or dstp.is_symlink():  # the new destination was in place: the old one is garbage
            remove_output(old)
            warnings.append(f"removed {old}, the previous {dstp.name} an interrupted --force replaced")
        else:  # killed before the new one was in place: the previous destination comes back
            os.rename(old, dstp)
            warnings.append(f"restored {dstp} from {old}, where an interrupted --force had moved it")
    return warnings
