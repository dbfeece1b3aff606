"""Reading a trace directory (docs/TRACE.md "Format") into pandas."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from h5flow.trace import _format as fmt

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ["rank", "op", "file", "obj", "t0", "t1", "dur", "bytes", "npoints", "nblocks", "ndims", "shape",
           "mem_type", "file_type", "conv", "xfer", "io_actual", "no_coll_cause", "props", "ok", "host", "pid"]


class TraceError(ValueError):
    """A trace directory or file that is not what the connector writes."""


@dataclass(frozen=True)
class RankTrace:
    """One process's trace: its header fields, its records and its string table."""

    path: Path
    rank: int
    nranks: int
    pid: int
    host: str
    mono_ns: int
    wall_ns: int
    records: np.ndarray
    strings: list[str]
    complete: bool  # the end record is there: nothing of this process's trace was lost


def _read_strings(path: Path) -> list[str]:
    if not path.exists():
        raise TraceError(f"{path}: the string table of a trace is missing (every rank-*.trace has a .strings "
                         "file beside it)")
    data = path.read_bytes()
    out, pos = [""], 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        if pos + 4 + n > len(data):
            break  # a partial last entry: the process stopped while writing it
        out.append(data[pos + 4:pos + 4 + n].decode("utf-8", errors="replace"))
        pos += 4 + n
    return out


def read_rank(path: str | os.PathLike[str]) -> RankTrace:
    """Read one ``rank-*.trace`` file and the string table beside it."""
    path = Path(path)
    raw = path.read_bytes()
    if len(raw) < fmt.HEADER_SIZE or raw[:8] != fmt.MAGIC:
        raise TraceError(f"{path}: not an h5flow trace (no {fmt.MAGIC.decode()} header)")
    hdr = np.frombuffer(raw, fmt.HEADER, count=1)[0]
    if int(hdr["version"]) != fmt.VERSION:
        raise TraceError(f"{path}: trace format version {int(hdr['version'])}; this h5flow reads version "
                         f"{fmt.VERSION}")
    if int(hdr["record_size"]) != fmt.RECORD.itemsize or int(hdr["header_size"]) != fmt.HEADER_SIZE:
        raise TraceError(f"{path}: header size {int(hdr['header_size'])} / record size {int(hdr['record_size'])}"
                         f" differ from the format's {fmt.HEADER_SIZE} / {fmt.RECORD.itemsize}")
    count = (len(raw) - fmt.HEADER_SIZE) // fmt.RECORD.itemsize
    records = np.frombuffer(raw, fmt.RECORD, count=count, offset=fmt.HEADER_SIZE)
    strings = _read_strings(path.with_suffix(".strings"))
    complete = bool(count) and int(records[-1]["op"]) == fmt.OP_END
    if complete:
        end = records[-1]
        records = records[:-1]
        if int(end["npoints"]) != len(records) or int(end["bytes"]) != len(strings) - 1:
            raise TraceError(f"{path}: the end record counts {int(end['npoints'])} records and "
                             f"{int(end['bytes'])} strings, the files hold {len(records)} and {len(strings) - 1}: "
                             "the trace was changed after it was written")
    ids = np.concatenate([records[f] for f in ("file", "obj", "shape", "mem_type", "file_type", "props")]) \
        if count else np.zeros(0, np.uint32)
    if ids.size and int(ids.max()) >= len(strings):
        raise TraceError(f"{path}: a record refers to string {int(ids.max())}, the string table holds "
                         f"{len(strings) - 1}")
    return RankTrace(path=path, rank=int(hdr["rank"]), nranks=int(hdr["nranks"]), pid=int(hdr["pid"]),
                     host=bytes(hdr["host"]).rstrip(b"\0").decode(errors="replace"),
                     mono_ns=int(hdr["mono_ns"]), wall_ns=int(hdr["wall_ns"]), records=records, strings=strings,
                     complete=complete)


def trace_files(directory: str | os.PathLike[str]) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        raise TraceError(f"{d}: no such trace directory (h5flow trace --out DIR, or H5FLOW_TRACE_DIR)")
    files = sorted(d.glob("rank-*.trace"))
    if not files:
        raise TraceError(f"{d}: no rank-*.trace files: nothing was traced (did the program open an HDF5 file "
                         "with the h5flow_trace connector on HDF5_VOL_CONNECTOR?)")
    return files


def _lookup(codes: np.ndarray, name: Callable[[int], str]) -> np.ndarray:
    """``name(code)`` for every code, computed once per distinct code."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    return np.array([name(int(c)) for c in uniq], dtype=object)[inverse] if len(codes) else \
        np.zeros(0, dtype=object)


def _frame(rt: RankTrace, origin_wall_ns: int) -> dict[str, np.ndarray]:
    r = rt.records
    strings = np.array(rt.strings, dtype=object)
    # absolute times on the wall clock: t_ns is relative to the monotonic origin read with wall_ns
    shift = rt.wall_ns - origin_wall_ns
    t0 = (r["t0_ns"].astype(np.int64) + shift) / 1e9
    t1 = (r["t1_ns"].astype(np.int64) + shift) / 1e9
    ops = _lookup(r["op"], lambda c: fmt.OPS.get(c, f"op{c}"))
    causes = _lookup(r["no_coll_local"] | r["no_coll_global"], lambda bits: fmt.decode_causes(bits, 0))
    n = len(r)
    objs = _name_anonymous(strings[r["obj"]], ops, strings[r["props"]])
    return {
        "rank": np.full(n, rt.rank, dtype=np.int64), "op": ops,
        "file": strings[r["file"]], "obj": objs, "t0": t0, "t1": t1, "dur": t1 - t0,
        "bytes": r["bytes"].astype(np.int64), "npoints": r["npoints"].astype(np.int64),
        "nblocks": r["nblocks"].astype(np.int64), "ndims": r["ndims"].astype(np.int64),
        "shape": strings[r["shape"]], "mem_type": strings[r["mem_type"]], "file_type": strings[r["file_type"]],
        "conv": (r["flags"] & fmt.FLAG_CONV) != 0,
        "xfer": _lookup(r["xfer"], lambda x: fmt.XFER.get(x, "")),
        "io_actual": _lookup(r["io_actual"], lambda x: fmt.IO_ACTUAL.get(x, "")),
        "no_coll_cause": causes, "props": strings[r["props"]],
        "ok": (r["flags"] & fmt.FLAG_FAILED) == 0,
        "host": np.full(n, rt.host, dtype=object), "pid": np.full(n, rt.pid, dtype=np.int64),
    }


def _name_anonymous(objs: np.ndarray, ops: np.ndarray, props: np.ndarray) -> np.ndarray:
    """Objects created without a name (h5py's ``f["x"] = data``) carry a placeholder path (``#anonymous-N``)
    until a hard link names them; the link's record says which placeholder it named. Every row gets the name."""
    names: dict[str, str] = {}
    for i in np.flatnonzero(ops == "link_create"):
        if props[i].startswith("{"):
            placeholder = json.loads(props[i]).get("names")
            if placeholder:
                names[placeholder] = objs[i]
    if not names:
        return objs

    def named(o: str) -> str:
        head, sep, rest = o.partition("/")
        return names[head] + sep + rest if o.startswith("#") and head in names else o

    uniq, inverse = np.unique(objs.astype(str), return_inverse=True)
    return np.array([named(o) for o in uniq], dtype=object)[inverse]


def incomplete(directory: str | os.PathLike[str]) -> list[Path]:
    """The trace files of a directory that lack their end record (the process ended before HDF5 closed, or
    a write of its trace failed): their last records are lost."""
    return [p for p in trace_files(directory) if not read_rank(p).complete]


def load(directory: str | os.PathLike[str]) -> pd.DataFrame:
    """Every record of a trace directory as one DataFrame (columns: docs/TRACE.md "The DataFrame").
    ``df.attrs["incomplete"]`` lists the files that lack their end record (see :func:`incomplete`)."""
    import pandas as pd

    ranks = [read_rank(p) for p in trace_files(directory)]
    cut = [str(rt.path) for rt in ranks if not rt.complete]
    nonempty = [rt for rt in ranks if len(rt.records)]
    if not nonempty:
        df = pd.DataFrame({c: pd.Series(dtype=_EMPTY_DTYPES.get(c, object)) for c in COLUMNS})
        df.attrs["incomplete"] = cut
        return df
    # the earliest record's start on the wall clock (a rank's t_ns counts from its header's clock origin)
    origin = min(rt.wall_ns + int(rt.records["t0_ns"].min()) for rt in nonempty)
    parts = [_frame(rt, origin) for rt in nonempty]
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    df = pd.DataFrame(cols, columns=COLUMNS).sort_values(["t0", "rank"], kind="stable").reset_index(drop=True)
    df.attrs["incomplete"] = cut
    return df


_EMPTY_DTYPES = {"rank": "int64", "t0": "float64", "t1": "float64", "dur": "float64", "bytes": "int64",
                 "npoints": "int64", "nblocks": "int64", "ndims": "int64", "conv": "bool", "ok": "bool",
                 "pid": "int64"}
