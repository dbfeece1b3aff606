"""Darshan logs as a second input: the HDF5 module's counters (H5F, H5D) as trace rows for the rules they support.

A Darshan log has per-rank counters, not calls. Each H5D record (a dataset on a rank; shared records,
rank -1, are skipped) becomes ``H5D_WRITES`` write rows and ``H5D_READS`` read rows whose size and
duration are the record's means (``H5D_BYTES_WRITTEN / H5D_WRITES``, ``H5D_F_WRITE_TIME / H5D_WRITES``),
its transfer mode from ``H5D_USE_MPIIO_COLLECTIVE``, ``H5D_OPENS`` open rows, and one creation row with
the dataspace (flattened to ``H5D_DATASPACE_NPOINTS``), the element size and the chunk dims
(``H5D_CHUNK_SIZE_D*``). Each H5F record becomes ``H5F_OPENS`` open rows. Darshan records no datatypes,
property lists or collective fallbacks, so only the rules in :data:`DARSHAN_RULES` are applied.
Reading a log needs PyDarshan (``pip install darshan``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from h5flow.advise.base import COLUMNS

DARSHAN_RULES = ("small-independent-writes", "rank-imbalance", "chunk-shape", "file-reopen", "open-close-loop")


def _row(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: ("" if t == "str" else False if t == "bool" else 0) for c, t in COLUMNS.items()}
    row.update(kw)
    return row


def frame(path: str | Path) -> pd.DataFrame:
    """The rows a Darshan log's H5F/H5D counters stand for (module docstring), trace columns."""
    try:
        import darshan
    except ImportError as e:
        raise RuntimeError("reading a Darshan log needs PyDarshan: pip install darshan") from e
    report = darshan.DarshanReport(str(path), read_all=True)
    if "H5D" not in report.modules and "H5F" not in report.modules:
        raise ValueError(f"{path}: the log has no HDF5 module records (Darshan built without --enable-hdf5-mod?); "
                         f"modules: {', '.join(report.modules)}")
    names = report.name_records
    rows: list[dict[str, Any]] = []
    mpio: set[str] = set()
    if "H5F" in report.modules:
        h5f = report.records["H5F"].to_df()
        for c, fc in zip(h5f["counters"].to_dict("records"), h5f["fcounters"].to_dict("records")):
            if c["rank"] < 0:
                continue
            file = names.get(c["id"], str(c["id"]))
            if c.get("H5F_USE_MPIIO"):
                mpio.add(file)
            per = float(fc.get("H5F_F_META_TIME", 0.0)) / max(int(c["H5F_OPENS"]), 1)
            t = float(fc.get("H5F_F_OPEN_START_TIMESTAMP", 0.0))
            for _ in range(int(c["H5F_OPENS"])):
                rows.append(_row(rank=int(c["rank"]), op="file_open", file=file, t0=t, t1=t + per, dur=per,
                                 props=json.dumps({"driver": "mpio" if file in mpio else "unknown"})))
                t += per
    if "H5D" in report.modules:
        h5d = report.records["H5D"].to_df()
        for c, fc in zip(h5d["counters"].to_dict("records"), h5d["fcounters"].to_dict("records")):
            if c["rank"] < 0:
                continue
            file, _, obj = names.get(c["id"], str(c["id"])).rpartition(":")
            rank, size = int(c["rank"]), int(c.get("H5D_DATATYPE_SIZE", 0))
            ftype = f"opaque({size})"
            chunk = [int(c[f"H5D_CHUNK_SIZE_D{d}"]) for d in range(5, 0, -1) if c.get(f"H5D_CHUNK_SIZE_D{d}", 0) > 0]
            t = float(fc.get("H5D_F_OPEN_START_TIMESTAMP", 0.0))
            shape = str(int(c.get("H5D_DATASPACE_NPOINTS", 0)))
            rows.append(_row(rank=rank, op="dataset_create", file=file, obj=obj, t0=t, t1=t, shape=shape,
                             file_type=ftype, props=json.dumps({"layout": "chunked" if chunk else "contiguous",
                                                                "chunk": chunk, "filters": []})))
            for _ in range(int(c.get("H5D_OPENS", 0))):
                rows.append(_row(rank=rank, op="dataset_open", file=file, obj=obj, t0=t, t1=t))
            xfer = "collective" if c.get("H5D_USE_MPIIO_COLLECTIVE") else "independent"
            for op, n, nb, secs in (("dataset_write", c["H5D_WRITES"], c["H5D_BYTES_WRITTEN"], fc["H5D_F_WRITE_TIME"]),
                                    ("dataset_read", c["H5D_READS"], c["H5D_BYTES_READ"], fc["H5D_F_READ_TIME"])):
                n = int(n)
                for _ in range(n):
                    b, d = int(nb) // n, float(secs) / n
                    rows.append(_row(rank=rank, op=op, file=file, obj=obj, t0=t, t1=t + d, dur=d, bytes=b,
                                     npoints=b // max(size, 1), nblocks=1, file_type=ftype, mem_type=ftype,
                                     xfer=xfer, shape=shape))
                    t += d
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if len(df):
        df["t0"] -= df["t0"].min()
        df["t1"] = df["t0"] + df["dur"]
    return df.sort_values("t0", kind="stable").reset_index(drop=True)


def is_darshan_log(path: str | Path) -> bool:
    p = Path(path)
    return p.is_file() and p.suffix == ".darshan"
