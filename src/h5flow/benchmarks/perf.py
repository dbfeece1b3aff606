"""h5perf-compatible parallel I/O: raw POSIX N-N, MPI-IO, HDF5 (independent, collective), subfiling, h5flow_log.

Runs the C kernel ``h5flow-perf`` (``native/benchmarks/perf``; the timings are HDF5's own, as in h5perf)
under ``mpiexec`` once per (processes, pattern, transfer size, API group) and collects its results:
write and read throughput in MiB/s with and without file open/close, every byte read back and
verified, each API's ratio to raw POSIX N-N and to native HDF5. Writes JSON, CSV and a PNG plot
(throughput vs processes per API).

APIs: ``posix`` (one file per process: the physical bound), ``mpiio`` (one shared file,
MPI_File_write_at), ``native`` (HDF5 mpio driver, independent), ``native-collective`` (the same,
collective), ``subfiling`` (HDF5 subfiling VFD), ``h5flow_log`` (the native pattern with
HDF5_VOL_CONNECTOR=h5flow_log; skipped with a note when that connector is not built).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h5flow import _paths
from h5flow.benchmarks._args import csv_list

MIB = 1 << 20
LOG_CONNECTOR = "h5flow_log"
KERNEL = "h5flow-perf"
RESULT_PREFIX = "H5FLOW_PERF "
SEED_XFER = "1M+10"  # seed 001: interleaved, unaligned 1 MiB + 10 B transfers
TARGET_PROCS = 4
TARGET_LOG_VS_NATIVE = 3.0
TARGET_LOG_VS_POSIX = 0.8


@dataclass(frozen=True)
class Api:
    """How one benchmark API maps onto the kernel: its ``-A`` name, ``-C``, and the VOL it must run through."""

    name: str
    kernel_api: str
    collective: bool = False
    vol: str | None = None  # the connector HDF5 must report (None: not an HDF5 API)


APIS: dict[str, Api] = {
    a.name: a
    for a in (
        Api("posix", "posix"),
        Api("mpiio", "mpiio"),
        Api("native", "phdf5", vol="native"),
        Api("native-collective", "phdf5", collective=True, vol="native"),
        Api("subfiling", "subfiling", vol="native"),
        Api(LOG_CONNECTOR, "phdf5", vol=LOG_CONNECTOR),
    )
}
PATTERNS = ("contiguous", "interleaved")


def parse_size(text: str) -> int:
    """``256K``, ``1M``, ``1M+10`` → bytes (K/M/G are powers of 1024, as in h5perf)."""
    total = 0
    for part in text.strip().split("+"):
        part = part.strip()
        mult = 1
        if part[-1:].upper() in ("K", "M", "G"):
            mult = 1 << {"K": 10, "M": 20, "G": 30}[part[-1].upper()]
            part = part[:-1]
        if not part.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r} is not a size (examples: 256K, 1M, 1M+10)")
        total += int(part) * mult
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be positive")
    return total


def format_size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        base = n >> shift << shift
        if base and n - base < 1024 and n >= 1 << shift:
            rest = n - base
            return f"{base >> shift}{unit}" + (f"+{rest}" if rest else "")
    return str(n)


def _size_list(text: str) -> list[int]:
    return [parse_size(t) for t in text.split(",") if t.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "h5perf option mapping: -A (API list; h5flow names), -p/-P (process counts: P, P/2, ... >= p, one\n"
        "mpiexec job each), -e (bytes per process per dataset), -d (datasets), -i (iterations), -I\n"
        "(interleaved only), -x (transfer sizes: a list here, since 1M+10 is not on h5perf's doubling\n"
        "-x..-X range), -a/-T (alignment). Verification (-D v) is always on. -e is rounded down to a\n"
        "multiple of each transfer size. Files go to --dir (default $HDF5_PARAPREFIX, else /dev/shm)."
    )
    p.add_argument("-A", "--api", type=csv_list(list(APIS)), default=list(APIS),
                   help=f"APIs, comma separated (default all: {','.join(APIS)})")
    p.add_argument("-p", "--min-procs", type=int, default=1, help="fewest processes (default 1)")
    p.add_argument("-P", "--max-procs", type=int, default=None,
                   help="most processes; the run halves from here down to -p (default 8, --quick 4)")
    p.add_argument("-x", "--transfer-sizes", type=_size_list, default=None,
                   help="transfer sizes, comma separated (default 1M,1M+10)")
    p.add_argument("-e", "--bytes-per-process", type=parse_size, default=None,
                   help="bytes per process per dataset (default 8M, --quick 2M)")
    p.add_argument("-d", "--datasets", type=int, default=None, help="datasets per file (default 4, --quick 2)")
    p.add_argument("-i", "--iterations", type=int, default=None,
                   help="iterations; the fastest counts as in h5perf's Maximum Throughput (default 3, --quick 1)")
    p.add_argument("-I", "--interleaved", action="store_true", help="interleaved pattern only (h5perf -I)")
    p.add_argument("--patterns", type=csv_list(PATTERNS), default=None,
                   help="block patterns, comma separated (default contiguous,interleaved)")
    p.add_argument("-a", "--alignment", type=parse_size, default=None, help="HDF5 alignment (H5Pset_alignment)")
    p.add_argument("-T", "--threshold", type=parse_size, default=None, help="HDF5 alignment threshold")
    add_output_arguments(p, "perf", "small sizes and at most 4 processes (CI)")


def add_output_arguments(p: argparse.ArgumentParser, name: str, quick_help: str) -> None:
    """--dir, --out, --json, --quick: the options every C-kernel benchmark here shares."""
    p.add_argument("--dir", type=Path, default=None,
                   help="directory for the test files (default $HDF5_PARAPREFIX, else /dev/shm or the temp dir)")
    p.add_argument("--out", type=Path, default=Path(f"h5flow-bench-{name}"),
                   help=f"directory for {name}.json, {name}.csv, {name}.png (default ./h5flow-bench-{name})")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the JSON here instead")
    p.add_argument("--quick", action="store_true", help=quick_help)


def work_dir(args: argparse.Namespace) -> Path:
    """The directory for test files (--dir or the default), checked writable; creates --out."""
    directory = args.dir or default_dir()
    if not directory.is_dir() or not os.access(directory, os.W_OK):
        raise ValueError(f"{directory} is not a writable directory (choose another with --dir)")
    args.out.mkdir(parents=True, exist_ok=True)
    return directory


# ---------------------------------------------------------------- running the kernel


def kernel_path(name: str = KERNEL) -> Path:
    """The built C kernel ``name`` (``build/native/bin``), or an error that says how to build it."""
    exe = _paths.native_tool(name)
    if not exe.is_file():
        raise RuntimeError(f"{exe} not found: build the native code (`make setup`, or "
                           f"`cmake --build {_paths.build_dir() / 'native'}`)")
    return exe


def mpiexec() -> str:
    exe = shutil.which("mpiexec")
    if exe is None:
        raise RuntimeError("mpiexec not found on PATH; run `make setup` and `source build/stack.env`")
    return exe


def default_dir() -> Path:
    env = os.environ.get("HDF5_PARAPREFIX")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def run_kernel(procs: int, kernel_args: list[str], env: dict[str, str] | None = None,
               timeout: float = 900) -> list[dict[str, Any]]:
    """Run ``mpiexec -n procs h5flow-perf kernel_args`` and return its ``H5FLOW_PERF`` records."""
    cmd = [mpiexec(), "-n", str(procs), str(kernel_path()), *kernel_args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(cmd)} did not finish within {timeout:.0f} s") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
    records = [json.loads(line[len(RESULT_PREFIX):]) for line in proc.stdout.splitlines()
               if line.startswith(RESULT_PREFIX)]
    if not records:
        raise RuntimeError(f"{' '.join(cmd)} printed no result line:\n{proc.stdout[-2000:]}")
    return records


def log_connector_dir() -> Path | None:
    """The plugin directory holding the h5flow_log VOL connector, or None when it is not built."""
    from h5flow import connectors

    for directory in [_paths.default_plugin_dir(), *connectors.plugin_path()]:
        if any(c.name == LOG_CONNECTOR for c in connectors.find([directory])):
            return directory
    return None


def _env_for(api: Api, plugin_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    if api.vol == LOG_CONNECTOR:
        assert plugin_dir is not None
        env["HDF5_VOL_CONNECTOR"] = LOG_CONNECTOR
        env["HDF5_PLUGIN_PATH"] = str(plugin_dir)
    return env


@dataclass(frozen=True)
class Job:
    """One mpiexec launch: several APIs that share the kernel's -C flag and environment."""

    procs: int
    pattern: str
    xfer: int
    apis: tuple[Api, ...]


def plan(apis: list[Api], procs: list[int], patterns: list[str], xfers: list[int]) -> list[Job]:
    groups: dict[tuple[bool, str | None], list[Api]] = {}
    for a in apis:
        groups.setdefault((a.collective, a.vol if a.vol == LOG_CONNECTOR else None), []).append(a)
    jobs = []
    for n in procs:
        for pat in patterns:
            for x in xfers:
                for g in groups.values():
                    # HDF5 1.14.5's subfiling VFD hangs on one rank (the kernel refuses it there)
                    members = tuple(a for a in g if n > 1 or a.name != "subfiling")
                    if members:
                        jobs.append(Job(n, pat, x, members))
    return jobs


def run_job(job: Job, args: argparse.Namespace, directory: Path, plugin_dir: Path | None) -> list[dict[str, Any]]:
    e = max(1, args.bytes_per_process // job.xfer) * job.xfer
    kargs = ["-A", ",".join(a.kernel_api for a in job.apis), "-e", str(e), "-x", str(job.xfer),
             "-X", str(job.xfer), "-d", str(args.datasets), "-i", str(args.iterations), "-D", "v",
             "-f", str(directory)]
    if job.pattern == "interleaved":
        kargs.append("-I")
    if job.apis[0].collective:
        kargs.append("-C")
    if args.alignment:
        kargs += ["-a", str(args.alignment)]
    if args.threshold:
        kargs += ["-T", str(args.threshold)]
    records = run_kernel(job.procs, kargs, _env_for(job.apis[0], plugin_dir))
    by_kernel = {a.kernel_api: a for a in job.apis}
    rows = []
    for rec in records:
        api = by_kernel[rec["api"]]
        if not rec.get("verified"):
            raise RuntimeError(f"{api.name}: the kernel ran without verification")
        if api.vol is not None and rec["vol"] != api.vol:
            raise RuntimeError(f"{api.name}: HDF5 served the file with the {rec['vol']!r} VOL connector, "
                               f"not {api.vol!r} (check HDF5_PLUGIN_PATH / HDF5_VOL_CONNECTOR)")
        rows.append(dict(rec, api=api.name, kernel_api=rec["api"]))
    return rows


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's write/read throughput over raw POSIX N-N's and native HDF5's in the same configuration."""
    index = {(r["api"], r["pattern"], r["processes"], r["transfer_size"]): r for r in rows}
    for r in rows:
        for ref in ("posix", "native"):
            base = index.get((ref, r["pattern"], r["processes"], r["transfer_size"]))
            for op in ("write", "read"):
                key = f"{op}_vs_{ref}"
                r[key] = (r[f"{op}_mib_s"] / base[f"{op}_mib_s"]
                          if base and base.get(f"{op}_mib_s") and f"{op}_mib_s" in r else None)


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's two target ratios, stated whether or not they were measured."""
    xfer = parse_size(SEED_XFER)
    where = f"interleaved, {SEED_XFER} B transfers, {TARGET_PROCS} processes, write without open/close"
    row = next((r for r in rows if r["api"] == LOG_CONNECTOR and r["pattern"] == "interleaved"
                and r["processes"] == TARGET_PROCS and r["transfer_size"] == xfer), None)
    lines = []
    for ref, goal in (("native", TARGET_LOG_VS_NATIVE), ("posix", TARGET_LOG_VS_POSIX)):
        label = f"target h5flow_log / {'native HDF5 (mpio, independent)' if ref == 'native' else 'raw POSIX N-N'}"
        ratio = row.get(f"write_vs_{ref}") if row else None
        if ratio is None:
            lines.append(f"{label} >= {goal:g}x ({where}): not measured in this run")
        else:
            verdict = "met" if ratio >= goal else "NOT met"
            lines.append(f"{label} >= {goal:g}x ({where}): {ratio:.2f}x — {verdict}")
    return lines


# ---------------------------------------------------------------- output

CSV_COLUMNS = ("api", "pattern", "processes", "transfer_size", "block_size", "bytes_per_process", "datasets",
               "iterations", "vol", "collective", "verified", "write_mib_s", "write_open_close_mib_s",
               "write_raw_mib_s", "read_mib_s", "read_open_close_mib_s", "read_raw_mib_s", "write_vs_posix",
               "write_vs_native", "read_vs_posix", "read_vs_native", "write_avg_mib_s", "write_min_mib_s",
               "read_avg_mib_s", "read_min_mib_s", "write_open_close_s", "read_open_close_s")


def write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str] = CSV_COLUMNS) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})


def plot(path: Path, rows: list[dict[str, Any]]) -> bool:
    """Throughput vs processes per API, one panel per (operation, pattern, transfer size)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    combos = sorted({(r["pattern"], r["transfer_size"]) for r in rows})
    fig, axes = plt.subplots(2, len(combos), figsize=(4.2 * len(combos), 7), squeeze=False)
    for col, (pattern, xfer) in enumerate(combos):
        for row_i, op in enumerate(("write", "read")):
            ax = axes[row_i][col]
            for api in APIS:
                pts = sorted((r["processes"], r[f"{op}_mib_s"]) for r in rows
                             if r["api"] == api and r["pattern"] == pattern and r["transfer_size"] == xfer)
                if pts:
                    ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=api)
            ax.set_title(f"{op}, {pattern}, {format_size(xfer)} B", fontsize=10)
            ax.set_xlabel("processes")
            ax.set_ylabel("MiB/s")
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("h5flow bench perf (h5perf patterns; write/read without file open/close)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(rows: list[dict[str, Any]], notes: list[str], directory: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))

    def num(v: float | None, fmt: str = ".0f") -> str:
        return "-" if v is None else format(v, fmt)

    for pattern, xfer in sorted({(r["pattern"], r["transfer_size"]) for r in rows}):
        t = Table(title=f"{pattern}, transfer {format_size(xfer)} B ({xfer} B) on {directory}  [MiB/s]")
        for c in ("API", "procs", "write", "write o/c", "read", "read o/c", "w/posix", "w/native", "r/posix",
                  "r/native"):
            t.add_column(c, justify="right")
        sel = [r for r in rows if r["pattern"] == pattern and r["transfer_size"] == xfer]
        for r in sorted(sel, key=lambda r: (list(APIS).index(r["api"]), r["processes"])):
            t.add_row(r["api"], str(r["processes"]), num(r["write_mib_s"]), num(r["write_open_close_mib_s"]),
                      num(r.get("read_mib_s")), num(r.get("read_open_close_mib_s")),
                      num(r["write_vs_posix"], ".2f"), num(r["write_vs_native"], ".2f"),
                      num(r["read_vs_posix"], ".2f"), num(r["read_vs_native"], ".2f"))
        console.print(t)
    for line in notes:
        console.print(line, highlight=False, markup=False)


# ---------------------------------------------------------------- launch


def _process_counts(lo: int, hi: int) -> list[int]:
    counts = []
    n = hi
    while n >= lo:
        counts.append(n)
        n //= 2
    return sorted(counts)


def _resolve(args: argparse.Namespace) -> None:
    quick = args.quick
    if args.max_procs is None:
        args.max_procs = 4 if quick else 8
    if args.transfer_sizes is None:
        args.transfer_sizes = [parse_size("1M"), parse_size(SEED_XFER)]
    if args.bytes_per_process is None:
        args.bytes_per_process = parse_size("2M" if quick else "8M")
    if args.datasets is None:
        args.datasets = 2 if quick else 4
    if args.iterations is None:
        args.iterations = 1 if quick else 3
    if args.patterns is None:
        args.patterns = ["interleaved"] if args.interleaved else list(PATTERNS)
    for name in ("min_procs", "max_procs", "datasets", "iterations"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if args.min_procs > args.max_procs:
        raise ValueError("-p/--min-procs must not exceed -P/--max-procs")
    if not args.transfer_sizes:
        raise ValueError("-x/--transfer-sizes needs at least one size")


def launch(args: argparse.Namespace) -> int:
    _resolve(args)
    kernel_path()
    mpiexec()
    directory = work_dir(args)
    json_path = args.json or args.out / "perf.json"

    notes: list[str] = []
    apis = [APIS[name] for name in args.api]
    plugin_dir = None
    if any(a.vol == LOG_CONNECTOR for a in apis):
        plugin_dir = log_connector_dir()
        if plugin_dir is None:
            notes.append(f"h5flow_log: skipped — no {LOG_CONNECTOR} VOL connector in "
                         f"{_paths.default_plugin_dir()} (build it from native/connectors to measure it)")
            apis = [a for a in apis if a.vol != LOG_CONNECTOR]
    procs = _process_counts(args.min_procs, args.max_procs)
    if 1 in procs and any(a.name == "subfiling" for a in apis):
        notes.append("subfiling: not run on 1 process (HDF5 1.14.5's subfiling VFD hangs on a single rank)")
    jobs = plan(apis, procs, args.patterns, args.transfer_sizes)

    from rich.progress import Progress

    rows: list[dict[str, Any]] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("h5flow bench perf", total=len(jobs))
        for job in jobs:
            names = ",".join(a.name for a in job.apis)
            bar.update(task, description=f"{job.procs} procs, {job.pattern}, {format_size(job.xfer)}: {names}")
            rows.extend(run_job(job, args, directory, plugin_dir))
            bar.advance(task)
    add_ratios(rows)
    notes.append("verified: every byte read back equals what was written (h5perf -D v), every configuration")
    notes.extend(targets(rows))
    render(rows, notes, directory)

    meta = {"benchmark": "perf", "directory": str(directory), "processes": procs, "patterns": args.patterns,
            "transfer_sizes": args.transfer_sizes, "datasets": args.datasets, "iterations": args.iterations,
            "bytes_per_process": args.bytes_per_process, "apis": [a.name for a in apis],
            "units": "MiB/s (2^20 bytes); write/read exclude file open/close, *_open_close include it",
            "notes": notes}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(dict(meta, results=rows), indent=2))
    csv_path = args.out / "perf.csv"
    write_csv(csv_path, rows)
    png_path = args.out / "perf.png"
    made_png = plot(png_path, rows)
    print(f"wrote {json_path}, {csv_path}" + (f", {png_path}" if made_png else
                                             " (no PNG: matplotlib missing; pip install 'h5flow[bench]')"))
    return 0
