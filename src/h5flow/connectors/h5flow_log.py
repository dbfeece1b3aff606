"""Read an h5flow_log container's layout directly from the file system (``h5flow ls``).

The container format (docs/FORMAT.md) is plain directories and small files, so its tree, shapes, types
and per-dataset writer counts can be listed without loading the connector. Datatypes and dataspaces are
stored in HDF5's own serialized form (``H5Tencode``/``H5Sencode2``), decoded here with h5py's
``h5t.decode``/``h5s.decode``, which touch no file and no VOL connector.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

MARKER = "@h5flow_log"
GROUP_FILE = "@group"
DSET_FILE = "@dataset"
SOFT_FILE = "@softlink"  # a directory holding it is a soft link; its bytes are the target path
ATTR_PREFIX = "@attr."
LOG_RE = re.compile(r"^@log\.(\d+)\.(\d+)\.(idx|dat)$")
SIDECAR_MAGIC = b"H5FLDS01"
FORMAT_VERSION = 1  # of the @dataset sidecar
FORMAT_VERSION_VLEN = 2  # ... of a dataset whose datatype has variable-length parts (docs/FORMAT.md)
FORMAT_VERSION_VDS = 3  # ... of a virtual dataset (no logs of its own)
FORMAT_VERSION_FILTER = 4  # ... of a dataset with filters (docs/FORMAT.md "Filters")
FORMAT_VERSION_LAYOUT = 5  # ... of a restructured dataset (docs/FORMAT.md "Restructured datasets")
LAYOUT_ORDERS = {1: "row", 2: "column", 3: "chunks"}
CONTAINER_FORMATS = (1, 2, 3, 4)  # the marker's "format" line: the versions this reader understands
HARD_FILE = "@hardlink"  # format 4: a directory holding it is a name of an object in the store (its id)
STORE_DIR = "@objects"  # format 4: objects with several names, one directory per id (16 hex digits)
EPOCH_MAX = (1 << 63) - 1
MARKER_RE = re.compile(rb"h5flow_log\nformat (0|[1-9][0-9]{0,19})\nepoch (0|[1-9][0-9]{0,19})\n")
REC_MAGIC = 0x58494C48
REC_HDR = 56
REC_FILL, REC_COMMIT, REC_DCRC, REC_FILTER = 1, 2, 4, 8
COMMIT_SIZE = REC_HDR + 4
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


def read_file(path: Path, root: Path | None = None) -> bytes:
    """The bytes of one of a container's files, refusing without blocking what is not a regular file (a FIFO
    would block ``open``, ``/dev/zero`` would never end) and a symlink that leads out of the container
    ``root``."""
    if root is not None and path.is_symlink():
        target = Path(os.path.realpath(path))
        top = Path(os.path.realpath(root))
        if top != target and top not in target.parents:
            raise ContainerError(f"{path} is a symbolic link out of the container (to {target}): refused")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ContainerError(f"{path}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ContainerError(f"{path} is not a regular file (a device, FIFO or socket): refused")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def read_marker(root: Path) -> tuple[int, int]:
    """(format, epoch) of the container's marker, every field checked as the connector checks it."""
    path = root / MARKER
    m = MARKER_RE.fullmatch(read_file(path, root))
    if not m:
        raise ContainerError(f"{path} is malformed: expected "
                             "'h5flow_log\\nformat <version>\\nepoch <number>\\n'")
    version, epoch = int(m.group(1)), int(m.group(2))
    if version not in CONTAINER_FORMATS:
        raise ContainerError(f"{path}: format {version}; this h5flow reads formats {CONTAINER_FORMATS}")
    if not 1 <= epoch <= EPOCH_MAX:
        raise ContainerError(f"{path}: epoch {epoch} is not in 1..{EPOCH_MAX} (the marker is damaged)")
    return version, epoch


def _record_size(rank: int, nruns: int, flags: int) -> int:
    return REC_HDR + (16 if flags & REC_DCRC else 0) + (16 if flags & REC_FILTER else 0) + 8 * rank + 16 * nruns + 4


def _is_commit_at(raw: bytes, q: int) -> bool:
    if q + COMMIT_SIZE > len(raw):
        return False
    magic, ln = struct.unpack_from("<II", raw, q)
    flags, = struct.unpack_from("<I", raw, q + 52)
    at, = struct.unpack_from("<Q", raw, q + 24)
    return (magic, ln, flags, at) == (REC_MAGIC, COMMIT_SIZE, REC_COMMIT, q) and \
        struct.unpack_from("<I", raw, q + COMMIT_SIZE - 4)[0] == _crc32c(raw[q:q + COMMIT_SIZE - 4])


def check_index(path: Path, root: Path | None = None) -> tuple[int, bool]:
    """Walk an index log's records as the connector does: (records, whether it ends in a torn tail).

    Checks the structure (magic, lengths, flags) and tells a torn tail (an incomplete record after the
    last commit record: a writer died while appending) from damage (an incomplete-looking record with a
    commit record after it); record and data checksums are the connector's to check (h5py, h5dump)."""
    raw = read_file(path, root)
    pos = count = 0
    magic_bytes = struct.pack("<I", REC_MAGIC)
    while pos < len(raw):
        if pos + 8 <= len(raw):
            magic, ln = struct.unpack_from("<II", raw, pos)
            if magic != REC_MAGIC or ln < REC_HDR + 4:
                raise ContainerError(f"{path}: corrupt index record at byte {pos} (bad magic or length)")
        else:
            ln = len(raw) - pos + 1
        if pos + ln > len(raw):  # incomplete: a torn tail, unless a commit record follows
            q = raw.find(magic_bytes, pos + 1)
            while q != -1:
                if _is_commit_at(raw, q):
                    raise ContainerError(f"{path}: corrupt index record at byte {pos}: its length runs past "
                                         f"the end, but the log was committed up to byte {q}")
                q = raw.find(magic_bytes, q + 1)
            return count, True
        nruns, rank, flags = struct.unpack_from("<QII", raw, pos + 40)
        if flags & ~(REC_FILL | REC_COMMIT | REC_DCRC | REC_FILTER) or rank > 32 or nruns > ln // 16 or \
                ln != _record_size(rank, nruns, flags):
            raise ContainerError(f"{path}: corrupt index record at byte {pos} (inconsistent header)")
        count += 0 if flags & REC_COMMIT else 1
        pos += ln
    return count, False


@dataclass(frozen=True)
class Entry:
    path: str
    kind: str  # "group", "dataset", "softlink" or "hardlink" (a further name of an object listed before)
    shape: tuple[int, ...] | None = None
    maxshape: tuple[int | None, ...] | None = None
    dtype: str | None = None
    writers: int = 0
    data_bytes: int = 0
    attrs: int = 0
    target: str | None = None  # soft links: the target path; hard links: the name the object is listed under
    layout: str | None = None  # restructured datasets: order, shard shape, generation


def _read_layout(path: Path, raw: bytes, at: int) -> tuple[str, int] | None:
    """The restructured layout of a version-5 sidecar (blobs end at ``at``): a description, the epoch."""
    order, rank, epoch, gen = struct.unpack_from("<IIQQ", raw, at)
    if order not in LAYOUT_ORDERS or not 1 <= rank <= 32 or len(raw) != at + 24 + 16 * rank + 4:
        raise ContainerError(f"{path}: corrupt restructured layout")
    chunk = struct.unpack_from(f"<{rank}Q", raw, at + 24 + 8 * rank)
    return f"{LAYOUT_ORDERS[order]}:{'x'.join(map(str, chunk))}:gen{gen}", epoch


def _read_sidecar(path: Path, root: Path | None = None) -> tuple[str, tuple[int, ...], tuple[int | None, ...]]:
    dtype, shape, maxshape, _ = _read_sidecar_layout(path, root)
    return dtype, shape, maxshape


def _read_sidecar_layout(path: Path, root: Path | None = None) -> tuple[str, tuple[int, ...], tuple[int | None, ...],
                                                                   tuple[str, int] | None]:
    from h5py import h5s, h5t

    raw = read_file(path, root)
    if len(raw) < 28 or raw[:8] != SIDECAR_MAGIC:
        raise ContainerError(f"{path}: not an h5flow_log dataset sidecar")
    if len(raw) < 4096 and struct.unpack("<I", raw[-4:])[0] != _crc32c(raw[:-4]):
        raise ContainerError(f"{path}: checksum mismatch (corrupt metadata)")
    version, lt, ls, lp = struct.unpack("<IIII", raw[8:24])
    if version not in (FORMAT_VERSION, FORMAT_VERSION_VLEN, FORMAT_VERSION_VDS, FORMAT_VERSION_FILTER,
                       FORMAT_VERSION_LAYOUT):
        raise ContainerError(f"{path}: format {version}, this h5flow reads {FORMAT_VERSION} to "
                             f"{FORMAT_VERSION_LAYOUT}")
    layout = _read_layout(path, raw, 24 + lt + ls + lp) if version == FORMAT_VERSION_LAYOUT else None
    tid = h5t.decode(raw[24:24 + lt])
    sid = h5s.decode(raw[24 + lt:24 + lt + ls])
    try:
        dtype = str(tid.dtype)
    except (TypeError, ValueError):
        dtype = f"hdf5 class {tid.get_class()}"
    shape = tuple(sid.shape) if sid.get_simple_extent_type() == h5s.SIMPLE else ()
    maxshape = tuple(None if m == h5s.UNLIMITED else m for m in (sid.get_simple_extent_dims(True)
                                                                 if shape else ()))
    return dtype, shape, maxshape, layout


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def is_native_file(path: str | os.PathLike[str]) -> bool:
    """A regular file with HDF5's signature (at 0, or after a userblock at 512, 1024, ...): what
    h5flow_log opens through HDF5's native connector instead of as a container."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return False
            off = 0
            while off + 8 <= size:
                fh.seek(off)
                if fh.read(8) == HDF5_SIGNATURE:
                    return True
                off = off * 2 if off else 512
    except OSError:
        return False
    return False


def not_a_container(path: str | os.PathLike[str]) -> str:
    """Why ``path`` is not a container, in words a user can act on."""
    if not os.path.lexists(path):
        return f"{path}: no such file or container"
    if is_native_file(path):
        return (f"{path} is a native HDF5 file, not an h5flow_log container (h5py and HDF5's tools read it "
                f"with or without HDF5_VOL_CONNECTOR=h5flow_log; `h5flow unpack {path} OUT` makes a "
                "container of it)")
    return (f"{path} is not an h5flow_log container (no {MARKER}); "
            "was it written with HDF5_VOL_CONNECTOR=h5flow_log?")


def scan(container: str | Path) -> list[Entry]:
    """Every group and dataset of the container, depth first in name order."""
    root = Path(container)
    if not os.path.lexists(root / MARKER):
        raise ContainerError(not_a_container(root))
    read_marker(root)
    entries: list[Entry] = []
    first_name: dict[int, str] = {}  # object id -> the name it was listed under (each object listed once)

    def visit(d: Path, path: str) -> None:
        if d != root and os.path.lexists(d / HARD_FILE):
            raw = read_file(d / HARD_FILE, root)
            if len(raw) != 12 or _crc32c(raw[:8]) != int.from_bytes(raw[8:], "little"):
                raise ContainerError(f"{d / HARD_FILE} is damaged (expected an object id and its CRC32C)")
            oid = int.from_bytes(raw[:8], "little")
            if oid in first_name:
                entries.append(Entry(path, "hardlink", target=first_name[oid]))
                return
            first_name[oid] = path
            d = root if oid == 1 << 63 else root / STORE_DIR / f"{oid:016x}"
            if not d.is_dir():
                raise ContainerError(f"{path}: hard link to object {oid:016x}, missing from {root / STORE_DIR}")
            if d == root:
                entries.append(Entry(path, "hardlink", target="/"))
                return
        if d != root and os.path.lexists(d / SOFT_FILE):
            entries.append(Entry(path, "softlink", target=read_file(d / SOFT_FILE, root).decode("utf-8", "replace")))
            return
        names = sorted((n, c) for c in d.iterdir() if c.is_dir() and (n := unescape(c.name)) is not None)
        for _, c in names:
            if c.is_symlink() and Path(os.path.realpath(root)) not in Path(os.path.realpath(c)).parents:
                raise ContainerError(f"{c} is a symbolic link out of the container (to {os.path.realpath(c)}): "
                                     "refused")
        attrs = sum(1 for c in d.iterdir() if c.name.startswith(ATTR_PREFIX))
        if os.path.lexists(d / DSET_FILE):
            dtype, shape, maxshape, layout = _read_sidecar_layout(d / DSET_FILE, root)
            superseded = layout[1] if layout else 0  # logs of this epoch or earlier are garbage, not read
            logs = [c for c in d.iterdir() if (m := LOG_RE.match(c.name)) and int(m.group(1)) > superseded]
            writers = 0
            for c in logs:
                if c.name.endswith(".idx"):
                    check_index(c, root)
                    writers += 1
            size = sum(c.stat().st_size for c in logs if c.name.endswith(".dat"))
            if layout:
                size += (d / f"@shards.{layout[0].rsplit('gen', 1)[1]}.dat").stat().st_size
            entries.append(Entry(path, "dataset", shape, maxshape, dtype, writers, size, attrs,
                                 layout=layout[0] if layout else None))
            return
        if d != root and not os.path.lexists(d / GROUP_FILE):
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
        if e.kind == "softlink":
            lines.append(f"{e.path:<{width}}  soft link -> {e.target}")
        elif e.kind == "hardlink":
            lines.append(f"{e.path:<{width}}  hard link -> {e.target} (listed there)")
        elif e.kind == "group":
            lines.append(f"{e.path:<{width}}  group" + (f"  attrs={e.attrs}" if e.attrs else ""))
        else:
            shape = "x".join(str(s) for s in e.shape) if e.shape else "scalar"
            maxs = ""
            if e.maxshape and e.maxshape != e.shape:
                maxs = "/" + "x".join("inf" if m is None else str(m) for m in e.maxshape)
            lines.append(f"{e.path:<{width}}  dataset  {e.dtype}  {shape}{maxs}  writers={e.writers}  "
                         f"bytes={e.data_bytes}" + (f"  layout={e.layout}" if e.layout else "")
                         + (f"  attrs={e.attrs}" if e.attrs else ""))
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


__all__ = ["ContainerError", "Entry", "add_command", "check_index", "format_entries", "read_marker", "scan",
           "unescape"]
