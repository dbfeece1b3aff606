"""What a run leaves behind: hdf5-iotest's CSV (column for column), a JSON record, throughput plots,
and the console tables."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from h5flow.benchmarks.iotest.runner import METRICS, Result, StoragePath

MIB = 1 << 20

# hdf5-iotest's CSV header (src/utils.c create_output_file, current HEAD), verbatim
CSV_HEADER = ("steps,arrays,rows,cols,scaling,proc-rows,proc-cols,slowdim,rank,version,alignment-increment,"
              "alignment-threshold,meta-block-size,layout,fill,fmt,io, async, wall [s],fsize [B],"
              "write-phase-min [s],write-phase-max [s],creat-min [s],creat-max [s],write-min [s],write-max [s],"
              "read-phase-min [s],read-phase-max [s],read-min [s],read-max [s]")
CSV_COLUMNS = CSV_HEADER.split(",")


def csv_row(r: Result) -> str:
    """One CSV line in hdf5-iotest's formats (``%.4f`` seconds, ``%.0f`` bytes, quoted version)."""
    c, m = r.case, r.metrics
    conf = [c.steps, c.arrays, c.rows, c.cols, c.scaling, c.prows, c.pcols, c.slowdim, c.rank, f'"{r.hdf5_version}"',
            c.align_inc, c.align_thr, c.mblk, c.layout, c.fill, c.fmt_low, c.io, 0]
    times = [f"{m['wall']:.4f}", f"{m['fsize']:.0f}"] + [f"{m[k]:.4f}" for k in METRICS[2:]]
    return ",".join(str(x) for x in conf + times)


class CsvLog:
    """Appends one row per finished case, hdf5-iotest style (``restart`` resumes from what is there)."""

    def __init__(self, path: Path, *, resume: bool) -> None:
        self.path = path
        self.rows_before = 0
        if resume and path.is_file():
            lines = path.read_text().splitlines()
            if lines and lines[0] == CSV_HEADER:
                self.rows_before = len(lines) - 1
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CSV_HEADER + "\n")

    def append(self, r: Result) -> None:
        with self.path.open("a") as f:
            f.write(csv_row(r) + "\n")


def throughput(r: Result, phase: str) -> float:
    """MiB/s of a case's write or read phase (slowest rank), 0 for metadata cases."""
    t = r.metrics[f"{phase}-phase-max"]
    return r.case.data_bytes / MIB / t if t > 0 and r.case.data_bytes else 0.0


def result_record(r: Result) -> dict[str, Any]:
    return {"case": asdict(r.case), "impl": r.impl, "path": r.path.name, "vfd": r.path.vfd, "vol": r.path.vol,
            "nprocs": r.case.nprocs, "hdf5": r.hdf5_version, "metrics": r.metrics, "checked": r.checked,
            "io_time_s": r.io_time, "data_bytes": r.case.data_bytes,
            "write_mib_s": throughput(r, "write"), "read_mib_s": throughput(r, "read")}


def write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)


def geomean(xs: Iterable[float]) -> float:
    vals = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan")


def relative_table(results: Sequence[Result], paths: Sequence[StoragePath], base: StoragePath) -> list[dict[str, Any]]:
    """Per (process count, case): the base path's I/O time and every path's time relative to it."""
    by_key: dict[tuple[int, int], dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.case.nprocs, r.case.index), {})[r.path.name] = r
    rows = []
    for (nprocs, index), per_path in sorted(by_key.items()):
        b = per_path.get(base.name)
        row: dict[str, Any] = {"nprocs": nprocs, "index": index, "case": next(iter(per_path.values())).case.label(),
                               "base_s": b.io_time if b else None}
        for p in paths:
            r = per_path.get(p.name)
            row[p.name] = (r.io_time / b.io_time) if (r and b and b.io_time > 0) else None
        rows.append(row)
    return rows


def plot_throughput(path: Path, series: dict[str, list[tuple[int, float, float]]], title: str, *,
                    what: str = "median over cases", styles: dict[str, dict[str, Any]] | None = None) -> None:
    """Two panels (write, read): MiB/s against process count, one line per series name (``styles``: extra
    matplotlib line arguments per series)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for ax, k, label in ((axes[0], 1, "write"), (axes[1], 2, "read")):
        for name, pts in sorted(series.items()):
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[k] for p in pts], marker="o", label=name, **(styles or {}).get(name, {}))
        ax.set_xlabel("MPI processes")
        ax.set_ylabel(f"{label} MiB/s (slowest rank, {what})")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.set_xticks(sorted({p[0] for pts in series.values() for p in pts}))
    axes[1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["CSV_COLUMNS", "CSV_HEADER", "CsvLog", "csv_row", "geomean", "plot_throughput", "relative_table",
           "result_record", "throughput", "write_json"]
