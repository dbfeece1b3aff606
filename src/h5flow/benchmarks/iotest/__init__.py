"""hdf5-iotest's experiment from its .ini file, timed in C, on each storage path (VFD x VOL connector).

``h5flow bench iotest CONFIG.ini`` reads hdf5-iotest's configuration (same keys; see ``ini.py``), expands
its internal sweep (dataset rank, slowest dimension, layout, fill, alignment, metadata block size, libver
bound, MPI-IO mode), and runs every case through the C kernel ``h5flow-iotest`` (or its h5py twin with
``--impl h5py``) under ``mpiexec`` on each ``--vfd`` x ``--vol`` path. Every case writes, reads back and
verifies its data. Output: hdf5-iotest's CSV per path (``csv-file``; other paths get a ``.VFD-VOL`` suffix),
``iotest.json``, ``iotest-throughput.png``, and a table of each path's I/O time relative to native mpio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

from h5flow.benchmarks._args import csv_list
from h5flow.benchmarks.iotest import report
from h5flow.benchmarks.iotest.cases import Case, expand
from h5flow.benchmarks.iotest.ini import IniError, IotestConfig, parse
from h5flow.benchmarks.iotest.runner import (IMPLS, VFDS, VOLS, BenchError, Launch, Result, Skipped, StoragePath,
                                             run_launch, unsupported, usable)

BASELINE = StoragePath("mpio", "native")


def _grid(v: str) -> tuple[int, int]:
    try:
        r, c = (int(x) for x in v.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r}: a process grid is ROWSxCOLUMNS, for example 2x1") from None
    if r < 1 or c < 1:
        raise argparse.ArgumentTypeError(f"{v!r}: grid dimensions must be >= 1")
    return r, c


def default_data_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@contextlib.contextmanager
def run_data_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """Where one run's HDF5 files go: ``given`` (``--dir``), or else a fresh private directory under
    :func:`default_data_dir`, removed afterwards. The files have fixed names (``hdf5-file``), so two runs
    sharing one directory truncate and delete each other's files in the middle of a case (an h5flow_log
    rank then fails with "cannot open the write logs ...: No such file or directory")."""
    if given is not None:
        if not given.is_dir():
            raise BenchError(f"--dir {given} is not a directory")
        yield given
        return
    private = Path(tempfile.mkdtemp(prefix=prefix, dir=default_data_dir()))
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, metavar="CONFIG.ini", help="hdf5-iotest configuration file")
    p.add_argument("--vfd", type=csv_list(VFDS), action="extend", default=None,
                   help="storage driver(s): mpio, subfiling (comma-separated or repeated; default mpio)")
    p.add_argument("--vol", type=csv_list(VOLS), action="extend", default=None,
                   help="VOL connector(s): native, h5flow_log (default native); h5flow_log runs with "
                        "HDF5_VOL_CONNECTOR=h5flow_log and is skipped, with the reason, when not built")
    p.add_argument("--impl", choices=IMPLS, default="c",
                   help="c: the C kernel (hdf5-iotest's numbers, default); h5py: the same cases through h5py")
    p.add_argument("--grid", type=_grid, action="append", default=None, metavar="RxC",
                   help="run on this process grid instead of the ini's (repeat for a scaling plot)")
    p.add_argument("--quick", action="store_true",
                   help="shrink the problem (<= 2 steps, 3 arrays, 16x32 tiles) for a fast check; same sweep")
    p.add_argument("--dir", type=Path, default=None,
                   help="directory for the HDF5 files (default: a private directory made for this run under "
                        "/dev/shm if writable, else the temp dir, removed afterwards); "
                        "hdf5-file is taken relative to it")
    p.add_argument("-o", "--out", type=Path, default=None,
                   help="directory for the CSV, JSON and plot (default ./iotest-results-UTCSTAMP); "
                        "csv-file is taken relative to it")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")


def quick(cfg: IotestConfig) -> IotestConfig:
    """The same sweep on a tiny problem (what ``--quick`` and CI run)."""
    if cfg.scaling == "strong":
        rows = cfg.process_rows * max(1, min(cfg.rows // cfg.process_rows, 16))
        cols = cfg.process_columns * max(1, min(cfg.columns // cfg.process_columns, 32))
        rows, cols = max(rows, 2), max(cols, 2)
    else:
        rows, cols = min(cfg.rows, 16), min(cfg.columns, 32)
    return replace(cfg, steps=min(cfg.steps, 2), arrays=min(cfg.arrays, 3), rows=rows, columns=cols, delay_us=0)


def contained(base: Path, name: str, what: str, where: str) -> Path:
    """``name`` inside ``base``; absolute names and ``..`` escapes are errors."""
    if Path(name).is_absolute():
        raise IniError(f"{where}: {what} {name!r} must be a relative name (it is placed in {base})")
    target = (base / name).resolve()
    if not target.is_relative_to(base.resolve()):
        raise IniError(f"{where}: {what} {name!r} leaves {base}")
    return target


def check_filters(cfg: IotestConfig) -> None:
    if cfg.szip is not None:
        import h5py

        if not h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
            raise IniError(f"{cfg.at('szip')}: szip requested, but this HDF5 has no szip filter; use gzip")


def csv_name(csv_file: str, path: StoragePath) -> str:
    if path == BASELINE:
        return csv_file
    p = Path(csv_file)
    return str(p.with_name(f"{p.stem}.{path.vfd}-{path.vol}{p.suffix or '.csv'}"))


def launch(args: argparse.Namespace) -> int:
    try:
        with run_data_dir(args.dir, "h5flow-iotest-") as data_dir:
            return _launch(args, data_dir)
    except (IniError, BenchError) as e:
        print(f"h5flow bench iotest: {e}", file=sys.stderr)
        return 2


def _launch(args: argparse.Namespace, data_dir: Path) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console()
    cfg = parse(args.config)
    if args.quick:
        cfg = quick(cfg)
    check_filters(cfg)
    grids = args.grid or [(cfg.process_rows, cfg.process_columns)]
    vfds = list(dict.fromkeys(args.vfd or ["mpio"]))
    vols = list(dict.fromkeys(args.vol or ["native"]))
    paths = [BASELINE] + [p for p in (StoragePath(v, o) for v in vfds for o in vols) if p != BASELINE]
    out = args.out or Path(f"iotest-results-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    h5name = cfg.hdf5_file
    contained(data_dir, h5name, "hdf5-file", cfg.at("hdf5_file"))
    for p in paths:
        contained(out, csv_name(cfg.csv_file, p), "csv-file", cfg.at("csv_file"))
    sweeps = {g: expand(cfg, g) for g in grids}

    skipped: list[Skipped] = []
    plan: list[Launch] = []
    for g, cases in sweeps.items():
        nprocs = g[0] * g[1]
        for p in paths:
            why = usable(p, nprocs)
            if why:
                skipped.append(Skipped(p, f"{nprocs} ranks: {why}"))
                console.print(f"[yellow]skipped[/] {p.name} on {nprocs} ranks: {why}")
                continue
            runnable = [c for c in cases if not unsupported(c, p)]
            reasons: dict[str, int] = {}
            for c in cases:
                if why := unsupported(c, p):
                    reasons[why] = reasons.get(why, 0) + 1
            for why, n in reasons.items():
                skipped.append(Skipped(p, f"{n} cases on {nprocs} ranks: {why}"))
                console.print(f"[yellow]skipped[/] {n} of {len(cases)} cases on {p.name}: {why}")
            if runnable:
                plan.append(Launch(args.impl, p, nprocs, runnable))

    planned = list(dict.fromkeys(lp.path for lp in plan))
    logs = {p: report.CsvLog(out / csv_name(cfg.csv_file, p), resume=cfg.restart) for p in planned}
    results: list[Result] = []
    total = sum(len(lp.cases) for lp in plan)
    console.print(f"h5flow bench iotest: {args.config} -> {sum(len(c) for c in sweeps.values())} cases x "
                  f"{len(paths)} path(s) ({', '.join(p.name for p in paths)}), {args.impl} kernel, files in {data_dir}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("cases", total=total)
        for lp in plan:
            log = logs[lp.path]
            resumed = min(log.rows_before, len(lp.cases))  # restart: rows already in the CSV
            log.rows_before -= resumed
            todo = lp.cases[resumed:]
            bar.advance(task, len(lp.cases) - len(todo))
            if not todo:
                continue
            bar.update(task, description=f"{lp.path.name}, {lp.nprocs} ranks")

            def done(r: Result, _log: report.CsvLog = log) -> None:
                _log.append(r)
                results.append(r)
                bar.advance(task)

            run_launch(replace(lp, cases=todo), data_dir, h5name, done)

    summary = report.relative_table(results, paths, BASELINE)
    _print_summary(console, summary, paths)
    series: dict[str, list[tuple[int, float, float]]] = {}
    for p in paths:
        for nprocs in sorted({r.case.nprocs for r in results if r.path == p}):
            rs = [r for r in results if r.path == p and r.case.nprocs == nprocs]
            series.setdefault(p.name, []).append((nprocs, statistics.median(report.throughput(r, "write") for r in rs),
                                                  statistics.median(report.throughput(r, "read") for r in rs)))
    payload = {
        "benchmark": "iotest", "config_file": str(args.config), "quick": args.quick, "impl": args.impl,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("where", "source")},
        "data_dir": str(data_dir), "paths": [p.name for p in paths],
        "skipped": [{"path": s.path.name, "reason": s.reason} for s in skipped],
        "csv": {p.name: str(log.path) for p, log in logs.items()},
        "results": [report.result_record(r) for r in results], "summary": summary,
        "throughput_mib_s": {k: [{"nprocs": n, "write": w, "read": rd} for n, w, rd in v] for k, v in series.items()},
    }
    report.write_json(out / "iotest.json", payload)
    if not args.no_plot and series:
        report.plot_throughput(out / "iotest-throughput.png", series,
                               f"h5flow bench iotest ({args.impl} kernel): {args.config.name}")
    console.print(f"verified: every case read back what it wrote ({sum(r.checked for r in results)} values); "
                  f"results in {out}/")
    return 0


def _print_summary(console, rows: list[dict], paths: list[StoragePath]) -> None:  # noqa: ANN001
    from rich.table import Table

    t = Table(title=f"I/O time (write phase + read phase, slowest rank) relative to {BASELINE.name}")
    t.add_column("ranks", justify="right")
    t.add_column("#", justify="right")
    t.add_column("case")
    t.add_column(f"{BASELINE.name} s", justify="right")
    others = [p for p in paths if p != BASELINE]
    for p in others:
        t.add_column(f"{p.name} ×", justify="right")
    for row in rows:
        t.add_row(str(row["nprocs"]), str(row["index"]), row["case"],
                  "-" if row["base_s"] is None else f"{row['base_s']:.4f}",
                  *["-" if row[p.name] is None else f"{row[p.name]:.2f}" for p in others])
    if others and rows:
        t.add_row("", "", "geometric mean", "", *[f"{report.geomean(r[p.name] for r in rows if r[p.name]):.2f}"
                                                  if any(r[p.name] for r in rows) else "-" for p in others])
    console.print(t)


__all__ = ["BASELINE", "Case", "add_arguments", "launch", "quick"]
