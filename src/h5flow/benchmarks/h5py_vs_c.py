"""h5py vs C: seed 004's table — the same cases through the C kernel and through h5py, timed side by side.

Rows (seed 004, "H5py vs. HDF5 Performance"): 1k file creations, 1k object scans (open a group, open every
member: groups, datasets, soft links), and bulk I/O — independent and collective, weak scaling (a fixed
MiB per process) and strong scaling (the same total on every process count) — on 1..N processes. The C
side is ``h5flow-iotest`` (native/benchmarks/iotest); the h5py side is its twin
``h5flow.benchmarks.iotest.h5py_kernel``, reading the same case file. Each repetition runs both, in
alternating order; the best (``--stat min``, h5perf's "maximum throughput" convention, the least
disturbed by other load on the machine) or the median repetition counts. Bulk time = slowest rank's write phase + read phase (create, write,
close, reopen, read), and every value read back is verified. Output: the table (h5py time / C time and
h5py performance as % of C, seed 004's measure), ``h5py-vs-c.json``, ``h5py-vs-c.csv``, and a plot of
throughput against processes per implementation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from h5flow.benchmarks._args import positive_int as _positive
from h5flow.benchmarks.iotest import report, run_data_dir
from h5flow.benchmarks.iotest.cases import Case
from h5flow.benchmarks.iotest.runner import BenchError, Launch, Result, StoragePath, run_launch

MIB = 1 << 20
COLS = 1024  # doubles per tile row: a tile row is 8 KiB
ARRAYS = 4  # datasets per bulk case (one step)

# seed 004's "H5py Performance / HDF5 Performance" (single node, multi-node)
SEED = {
    "file creation": ("63.8%", ""),
    "object scan": ("60.0%", ""),
    "independent weak": ("97.8%", "100%"),
    "independent strong": ("100%", "97.1%"),
    "collective weak": ("100%", "90%"),
    "collective strong": ("98.6%", "87%"),
}


def _ranks(v: str) -> list[int]:
    try:
        out = sorted({int(x) for x in v.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r}: process counts, comma-separated (for example 1,2,4)") from None
    if not out or out[0] < 1:
        raise argparse.ArgumentTypeError(f"{v!r}: process counts must be >= 1")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=_ranks, default=None, help="process counts for bulk I/O (default 1,2,4)")
    p.add_argument("--mib-per-rank", type=_positive, default=None,
                   help="weak scaling MiB per process, and strong scaling MiB in total (default 64; seed 004 "
                        "used 800 MB)")
    p.add_argument("--files", type=_positive, default=None, help="files created by the file-creation row (1000)")
    p.add_argument("--objects", type=_positive, default=None, help="group members scanned (1000)")
    p.add_argument("--reps", type=_positive, default=None, help="repetitions (default 3)")
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="which repetition counts: the fastest (default, as h5perf's maximum throughput) or the median")
    p.add_argument("--quick", action="store_true",
                   help="a fast check: ranks 1,2, 4 MiB, 200 files, 300 objects, 1 repetition")
    p.add_argument("--dir", type=Path, default=None, help="directory for the HDF5 files (default: a private "
                   "directory made for this run under /dev/shm, removed afterwards)")
    p.add_argument("-o", "--out", type=Path, default=None,
                   help="directory for JSON, CSV and plot (default ./h5py-vs-c-UTCSTAMP)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")


@dataclass(frozen=True)
class Row:
    name: str  # seed 004's row: "1k file creation", "independent weak", ...
    case: Case


def plan(ranks: list[int], mib: int, files: int, objects: int) -> dict[int, list[Row]]:
    """The cases of the table, grouped by process count (one kernel launch each)."""
    rows: dict[int, list[Row]] = {1: [Row("file creation", Case(index=1, op="filecreate", count=files)),
                                      Row("object scan", Case(index=2, op="objscan", count=objects))]}
    index = 10
    for n in ranks:
        for scaling in ("weak", "strong"):
            total_rows = mib * MIB // (ARRAYS * COLS * 8)  # rows of one rank (weak) or of all ranks (strong)
            if scaling == "strong":
                total_rows -= total_rows % n
            for io in ("independent", "collective"):
                case = Case(index=index, op="iotest", steps=1, arrays=ARRAYS, rows=max(total_rows, 2 * n), cols=COLS,
                            prows=n, pcols=1, scaling=scaling, rank=2, slowdim="step", layout="contiguous",
                            fill="false", fmt_low="earliest", io=io)
                rows.setdefault(n, []).append(Row(f"{io} {scaling}", case))
                index += 1
    return rows


def launch(args: argparse.Namespace) -> int:
    try:
        with run_data_dir(args.dir, "h5flow-h5py-vs-c-") as data_dir:
            return _launch(args, data_dir)
    except BenchError as e:
        print(f"h5flow bench h5py-vs-c: {e}", file=sys.stderr)
        return 2


def _launch(args: argparse.Namespace, data_dir: Path) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    q = args.quick
    ranks = args.ranks or ([1, 2] if q else [1, 2, 4])
    mib = args.mib_per_rank or (4 if q else 64)
    files = args.files or (200 if q else 1000)
    objects = args.objects or (300 if q else 1000)
    reps = args.reps or (1 if q else 3)
    out = args.out or Path(f"h5py-vs-c-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    groups = plan(ranks, mib, files, objects)
    names = {row.case.index: row.name for rows in groups.values() for row in rows}
    times: dict[tuple[str, int], list[Result]] = {}
    total = 2 * reps * sum(len(r) for r in groups.values())
    console.print(f"h5flow bench h5py-vs-c: ranks {ranks}, {mib} MiB/rank (weak) and {mib} MiB total (strong), "
                  f"{files} files, {objects} objects, {reps} repetition(s), files in {data_dir}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("cases", total=total)
        for rep in range(reps):
            order = ("c", "h5py") if rep % 2 == 0 else ("h5py", "c")
            for n, rows in groups.items():
                for impl in order:
                    bar.update(task, description=f"rep {rep + 1}/{reps}: {impl}, {n} ranks")
                    lp = Launch(impl, StoragePath(), n, [r.case for r in rows])
                    for r in run_launch(lp, data_dir, f"h5py-vs-c-{impl}-#.h5"):
                        times.setdefault((impl, r.case.index), []).append(r)
                        bar.advance(task)

    pick = min if args.stat == "min" else statistics.median

    def med(impl: str, index: int, key) -> float:  # noqa: ANN001
        return pick(key(r) for r in times[(impl, index)])

    table = []
    for n, rows in groups.items():
        for row in rows:
            c = row.case
            if c.op == "iotest":
                key = lambda r: r.io_time  # noqa: E731
                wkey = lambda r: r.metrics["write-phase-max"]  # noqa: E731
                rkey = lambda r: r.metrics["read-phase-max"]  # noqa: E731
            else:
                key = wkey = lambda r: r.metrics["wall"]  # noqa: E731
                rkey = None
            ct, pt = med("c", c.index, key), med("h5py", c.index, key)
            entry = {"row": row.name, "ranks": n, "c_s": ct, "h5py_s": pt, "h5py_over_c": pt / ct,
                     "h5py_pct_of_c": 100.0 * ct / pt, "count": c.count or None,
                     "bytes": c.data_bytes or None,
                     "c_write_s": med("c", c.index, wkey), "h5py_write_s": med("h5py", c.index, wkey)}
            if rkey is not None:
                entry.update(c_read_s=med("c", c.index, rkey), h5py_read_s=med("h5py", c.index, rkey))
                for impl in ("c", "h5py"):
                    entry[f"{impl}_write_mib_s"] = c.data_bytes / MIB / entry[f"{impl}_write_s"]
                    entry[f"{impl}_read_mib_s"] = c.data_bytes / MIB / entry[f"{impl}_read_s"]
            table.append(entry)
    summary = []
    for name in SEED:
        pcts = [e["h5py_pct_of_c"] for e in table if e["row"] == name]
        ratios = [e["h5py_over_c"] for e in table if e["row"] == name]
        summary.append({"row": name, "h5py_over_c": report.geomean(ratios), "h5py_pct_of_c": report.geomean(pcts),
                        "seed_single_node": SEED[name][0], "seed_multi_node": SEED[name][1]})
    _print(console, table, summary, args.stat)
    bulk = [e for e in table if e["bytes"]]
    bulk_pct = report.geomean(e["h5py_pct_of_c"] for e in bulk)
    console.print(f"bulk I/O: h5py runs at {bulk_pct:.1f}% of C (geometric mean of {len(bulk)} rows; target >= 95%)")
    report.write_json(out / "h5py-vs-c.json", {
        "benchmark": "h5py-vs-c", "ranks": ranks, "mib_per_rank": mib, "files": files, "objects": objects,
        "reps": reps, "stat": args.stat, "data_dir": str(data_dir), "rows": table, "summary": summary, "bulk_pct_of_c": bulk_pct,
        "results": [dict(report.result_record(r), row=names[idx]) for (_, idx), rs in times.items() for r in rs],
    })
    cols = ["row", "ranks", "c_s", "h5py_s", "h5py_over_c", "h5py_pct_of_c"]
    (out / "h5py-vs-c.csv").write_text("\n".join([",".join(cols)] + [
        ",".join(f"{e[k]:.6g}" if isinstance(e[k], float) else str(e[k]) for k in cols) for e in table]) + "\n")
    if not args.no_plot and bulk:
        series: dict[str, list[tuple[int, float, float]]] = {}
        for e in bulk:
            for impl in ("c", "h5py"):
                series.setdefault(f"{impl} {e['row']}", []).append(
                    (e["ranks"], e[f"{impl}_write_mib_s"], e[f"{impl}_read_mib_s"]))
        colours = dict(zip(sorted({e["row"] for e in bulk}), ("C0", "C1", "C2", "C3")))
        styles = {f"{impl} {row}": {"color": colour, "linestyle": "-" if impl == "c" else "--"}
                  for row, colour in colours.items() for impl in ("c", "h5py")}
        report.plot_throughput(out / "h5py-vs-c-throughput.png", series,
                               f"h5py (dashed) vs C (solid), bulk I/O ({mib} MiB/rank weak, {mib} MiB strong)",
                               what=f"{'fastest' if args.stat == 'min' else 'median'} of {reps}", styles=styles)
    console.print(f"verified: every case read back what it wrote; results in {out}/")
    return 0


def _print(console, table: list[dict], summary: list[dict], stat: str) -> None:  # noqa: ANN001
    from rich.table import Table

    which = "fastest" if stat == "min" else "median"
    t = Table(title=f"h5py vs C, per case ({which} repetition; time = write + read phase for bulk I/O)")
    for col in ("operation", "ranks", "C s", "h5py s", "h5py/C time", "h5py % of C"):
        t.add_column(col, justify="right" if col != "operation" else "left")
    for e in table:
        what = f"{e['row']} ({e['bytes'] / MIB:.0f} MiB)" if e["bytes"] else f"{e['row']} x{e['count']}"
        t.add_row(what, str(e["ranks"]), f"{e['c_s']:.4f}", f"{e['h5py_s']:.4f}", f"{e['h5py_over_c']:.2f}",
                  f"{e['h5py_pct_of_c']:.1f}%")
    console.print(t)
    s = Table(title="seed 004's table: h5py performance / HDF5 (C) performance")
    for col in ("operation", "h5py/C time", "this run", "seed single node", "seed multi-node"):
        s.add_column(col, justify="right" if col != "operation" else "left")
    for e in summary:
        s.add_row(e["row"], f"{e['h5py_over_c']:.2f}", f"{e['h5py_pct_of_c']:.1f}%", e["seed_single_node"],
                  e["seed_multi_node"] or "-")
    console.print(s)


__all__ = ["add_arguments", "launch", "plan"]
