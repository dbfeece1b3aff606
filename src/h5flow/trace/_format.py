"""The on-disk trace format of the ``h5flow_trace`` connector (docs/TRACE.md "Format")."""

from __future__ import annotations

import numpy as np

MAGIC = b"H5FTRACE"
VERSION = 1
HEADER_SIZE = 128

HEADER = np.dtype([
    ("magic", "S8"), ("version", "<u4"), ("header_size", "<u4"), ("record_size", "<u4"),
    ("rank", "<u4"), ("nranks", "<u4"), ("pid", "<u4"), ("mono_ns", "<u8"), ("wall_ns", "<u8"),
    ("host", "S64"), ("reserved", "u1", (16,)),
])

RECORD = np.dtype([
    ("t0_ns", "<u8"), ("t1_ns", "<u8"), ("bytes", "<u8"), ("npoints", "<u8"), ("nblocks", "<u8"),
    ("op", "<u2"), ("ndims", "u1"), ("xfer", "u1"), ("io_actual", "u1"), ("flags", "u1"), ("ncount", "<u2"),
    ("no_coll_local", "<u4"), ("no_coll_global", "<u4"),
    ("file", "<u4"), ("obj", "<u4"), ("shape", "<u4"), ("mem_type", "<u4"), ("file_type", "<u4"), ("props", "<u4"),
])
assert HEADER.itemsize == HEADER_SIZE and RECORD.itemsize == 80

#: op of the last record of a complete trace (npoints: records before it; bytes: strings in the table)
OP_END = 0xFFFF

FLAG_CONV = 1
FLAG_FAILED = 2

_GROUPS: list[tuple[int, str, tuple[str, ...]]] = [
    (1, "attr", ("create", "open", "read", "write", "get", "specific", "optional", "close")),
    (10, "dataset", ("create", "open", "read", "write", "get", "specific", "optional", "close")),
    (20, "datatype", ("commit", "open", "get", "specific", "optional", "close")),
    (30, "file", ("create", "open", "get", "specific", "optional", "close")),
    (40, "group", ("create", "open", "get", "specific", "optional", "close")),
    (50, "link", ("create", "copy", "move", "get", "specific", "optional")),
    (60, "object", ("open", "copy", "get", "specific", "optional")),
    (70, "introspect", ("get_conn_cls", "get_cap_flags", "opt_query")),
    (80, "request", ("wait", "notify", "cancel", "specific", "optional", "free")),
    (90, "blob", ("put", "get", "specific", "optional")),
    (100, "token", ("cmp", "to_str", "from_str")),
]

#: operation code -> name (the DataFrame's ``op``)
OPS: dict[int, str] = {base + i: f"{cls}_{name}" for base, cls, names in _GROUPS for i, name in enumerate(names)}
OPS[110] = "optional"

XFER = {0: "", 1: "independent", 2: "collective"}
IO_ACTUAL = {0: "", 1: "none", 2: "chunk-independent", 3: "chunk-collective", 4: "chunk-mixed",
             5: "contiguous-collective"}

#: H5D_mpio_no_collective_cause_t bits, lowest first
NO_COLL_CAUSES = ("independent", "datatype-conversion", "data-transforms", "mpi-opt-types-disabled",
                  "not-simple-or-scalar-dataspaces", "not-contiguous-or-chunked",
                  "parallel-filtered-writes-disabled", "error-while-checking", "no-selection-io")


def decode_causes(local: int, global_: int) -> str:
    """The names of the bits set in either cause mask, comma-separated ("" when none)."""
    bits = int(local) | int(global_)
    return ",".join(name for i, name in enumerate(NO_COLL_CAUSES) if bits & (1 << i))
