"""Read an h5flow_log container's layout directly from the file system (``h5flow ls``).

The container format (docs/FORMAT.md) is plain directories and small files, so its tree, shapes, types
and per-dataset writer counts can be listed without loading the connector. Datatypes and dataspaces are
stored in HDF5's own serialized form (``H5Tencode``/``H5Sencode2``), decoded here with h5py's
``h5t.decode``/``h5s.decode``, which touch no file and no VOL connector.
"""

from __future__ import annotations

import argparse
import re
import struct
from dataclasses import dataclass
from pathlib import Path

MARKER = "@h5flow_log"
GROUP_FILE = "@group"
DSET_FILE = "@dataset"
ATTR_PREFIX = "@attr."
LOG_RE = re.compile(r"^@log\.(\d+)\.(\d+)\.(idx|dat)$")
SIDECAR_MAGIC = b"H5FLDS01"
FORMAT_VERSION = 1
_SAFE = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+,=")


class ContainerError(ValueError):
    """The path is not a readable h5flow_log container."""


def unescape(component: str) -> str | None:
    """The user name a directory entry stands for, or None for the layout's own files (mirrors C)."""
    raw = component.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == 0x25:  # '%'
            h = raw[i + 1:i + 3]
            if len(h) != 2 or not all(ch in b"0123456789ABCDEF" for ch in h):
                return None
            v = int(h, 16)
            if v == 0 or (v in _SAFE and not (i == 0 and v == 0x2E)):
                return None
            out.append(v)
            i += 3
        elif c in _SAFE and not (i == 0 and c == 0x2E):
            out.append(c)
            i += 1
        else:
            return None
    return out.decode("utf-8", "surrogateescape") if out else None


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


@dataclass(frozen=True)
class Entry:
    path: str
    kind: str  # "group" or "dataset"
    shape: tuple[int, ...] | None = None
    maxshape: tuple[int | None, ...] | None = None
    dtype: str | None = None
    writers: int = 0
    data_bytes: int = 0
    attrs: int = 0


def _read_sidecar(path: Path) -> tuple[str, tuple[int, ...], tuple[int | None, ...]]:
    from h5py import h5s, h5t

    raw = path.read_bytes()
    if len(raw) < 28 or raw[:8] != SIDECAR_MAGIC:
        raise ContainerError(f"{path}: not an h5flow_log dataset sidecar")
    if len(raw) < 4096 and struct.unpack("<I", raw[-4:])[0] != _crc32c(raw[:-4]):
        raise ContainerError(f"{path}: checksum mismatch (corrupt metadata)")
    version, lt, ls, _lp = struct.unpack("<IIII", raw[8:24])
    if version != FORMAT_VERSION:
        raise ContainerError(f"{path}: format {version}, this h5flow reads {FORMAT_VERSION}")
    tid = h5t.decode(raw[24:24 + lt])
    sid = h5s.decode(raw[24 + lt:24 + lt + ls])
    try:
        dtype = str(tid.dtype)
    except (TypeError, ValueError):
        dtype = f"hdf5 class {tid.get_class()}"
    shape = tuple(sid.shape) if sid.get_simple_extent_type() == h5s.SIMPLE else ()
    maxshape = tuple(None if m == h5s.UNLIMITED else m for m in (sid.get_simple_extent_dims(True)
                                                                 if shape else ()))
    return dtype, shape, maxshape


def scan(container: str | Path) -> list[Entry]:
    """Every group and dataset of the container, depth first in name order."""
    root = Path(container)
    if not (root / MARKER).is_file():
        raise ContainerError(f"{root} is not an h5flow_log container (no {MARKER}); "
                             "was it written with HDF5_VOL_CONNECTOR=h5flow_log?")
    entries: list[Entry] = []

    def visit(d: Path, path: str) -> None:
        names = sorted((n, c) for c in d.iterdir() if c.is_dir() and (n := unescape(c.name)) is not None)
        attrs = sum(1 for c in d.iterdir() if c.name.startswith(ATTR_PREFIX))
        if (d / DSET_FILE).is_file():
            dtype, shape, maxshape = _read_sidecar(d / DSET_FILE)
            logs = [c for c in d.iterdir() if LOG_RE.match(c.name)]
            writers = sum(1 for c in logs if c.name.endswith(".idx"))
            size = sum(c.stat().st_size for c in logs if c.name.endswith(".dat"))
            entries.append(Entry(path, "dataset", shape, maxshape, dtype, writers, size, attrs))
            return
        if d != root and not (d / GROUP_FILE).is_file():
            return  # a creation that never completed
        entries.append(Entry(path, "group", attrs=attrs))
        for name, child in names:
            visit(child, (path.rstrip("/") + "/" + name))

    visit(root, "/")
    return entries


def format_entries(entries: list[Entry]) -> str:
    width = max((len(e.path) for e in entries), default=1)
    lines = []
    for e in entries:
        if e.kind == "group":
            lines.append(f"{e.path:<{width}}  group" + (f"  attrs={e.attrs}" if e.attrs else ""))
        else:
            shape = "x".join(str(s) for s in e.shape) if e.shape else "scalar"
            maxs = ""
            if e.maxshape and e.maxshape != e.shape:
                maxs = "/" + "x".join("inf" if m is None else str(m) for m in e.maxshape)
            lines.append(f"{e.path:<{width}}  dataset  {e.dtype}  {shape}{maxs}  writers={e.writers}  "
                         f"bytes={e.data_bytes}" + (f"  attrs={e.attrs}" if e.attrs else ""))
    return "\n".join(lines)


def _cmd_ls(args: argparse.Namespace) -> int:
    print(format_entries(scan(args.path)))
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("ls", help="list an h5flow_log container (tree, shapes, types, writers)",
                       description="Show an h5flow_log container's groups and datasets with shapes, types, "
                       "the number of writer logs per dataset and their data bytes, read straight from "
                       "the container's directories (no HDF5 connector needed).")
    p.add_argument("path", type=Path, help="the container (a directory written through h5flow_log)")
    p.set_defaults(func=_cmd_ls)


__all__ = ["ContainerError", "Entry", "add_command", "format_entries", "scan", "unescape"]
