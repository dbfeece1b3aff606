"""In-transit transports side by side: the paper's Table 1 design (Fig. 2-4) scaled to this machine.

For every producer count M and M:N ratio (N = M / ratio >= 1), and every transport (hdf5 on tmpfs, hdf5
on disk, socket, adios2 SST, adios2 BP5), the oscillator on M ranks publishes S steps of a fixed number of
bytes per rank (weak scaling) and a histogram runs on N ranks, through `h5flow run`'s runner: two
concurrent mpiexec jobs. Each configuration is repeated R times; the median time to solution is
reported with the bytes moved, the peak RSS of every rank, the publish → visible latency and the time
spent inside the transport. In the same run it measures the physical bound: a raw POSIX write + read
of the same bytes in the same directory, and a memcpy of them.

Outputs (in --out): transit.csv, transit.json, records/ (one run record per run), fig2-left.png
(time vs M at one ratio), fig2-right.png (hdf5 vs socket vs SST over all configurations),
fig3-memory-<transport>.png and fig4-progress-<transport>-<ratio>.png.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MIB = 1 << 20
TRANSPORTS = ("hdf5-tmpfs", "hdf5-disk", "socket", "adios2-sst", "adios2-bp5")
QUICK = {"producers": [2], "ratios": [1, 2], "mib_per_rank": 1.0, "steps": 3, "reps": 1}


@dataclass
class Row:
    transport: str
    producers: int
    consumers: int
    ratio: int
    bytes_per_rank_step: int
    steps: int
    reps: int
    time_to_solution: float  # median over reps (s)
    time_to_solution_all: list[float]
    transport_seconds: float  # median of (write + read time inside the transport)
    bytes: int  # bytes moved per run (all ranks, all steps)
    peak_rss_bytes: int  # largest peak RSS of any rank
    peak_rss_producer_bytes: int
    peak_rss_consumer_bytes: int
    latency_median_s: float  # publish → visible
    posix_write_read_s: float  # raw POSIX write + read of the same bytes in the same directory
    memcpy_s: float
    directory: str
    vs_sst: float | None = None  # time_to_solution / adios2-sst's, same configuration
    overhead_vs_posix: float | None = None  # transport_seconds / posix_write_read_s
    record: str = ""


@dataclass
class Plan:
    producers: list[int]
    ratios: list[int]
    bytes_per_rank: int
    steps: int
    reps: int
    transports: list[str]
    tmpfs: Path
    disk: Path
    out: Path
    queue_limit: int
    timeout: float
    hdf5_layout: str = "n-1"
    skipped: dict[str, str] = field(default_factory=dict)

    def configurations(self) -> list[tuple[int, int, int]]:
        """(M, N, ratio) with N = M / ratio a whole number >= 1."""
        return [(m, m // r, r) for m in self.producers for r in self.ratios if m % r == 0 and m // r >= 1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--producers", "-M", type=int, nargs="+", default=[2, 4, 8], metavar="M",
                   help="producer rank counts (default 2 4 8)")
    p.add_argument("--ratios", type=int, nargs="+", default=[1, 2, 4, 8], metavar="R",
                   help="M:N ratios; N = M/R, only whole N >= 1 are run (default 1 2 4 8)")
    p.add_argument("--mib-per-rank", type=float, default=32.0,
                   help="MiB each producer rank publishes per step (default 32)")
    p.add_argument("--steps", "-S", type=int, default=10, help="steps per run (default 10)")
    p.add_argument("--reps", "-R", type=int, default=3, help="repetitions; the median is reported (default 3)")
    p.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS), metavar="T",
                   help=f"transports to run (default all: {' '.join(TRANSPORTS)})")
    p.add_argument("--tmpfs-dir", type=Path, default=None,
                   help="memory-backed directory for hdf5-tmpfs, socket/adios2 names and BP5 (default /dev/shm)")
    p.add_argument("--disk-dir", type=Path, default=None,
                   help="disk directory for hdf5-disk, the paper's Lustre column (default /var/tmp)")
    p.add_argument("--queue-limit", type=int, default=4,
                   help="unreleased steps a producer may run ahead, every transport (default 4; 0 = unlimited)")
    p.add_argument("--hdf5-layout", choices=["n-1", "n-n"], default="n-1",
                   help="hdf5 transport layout: n-1 (one shared file per step, SENSEI's) or n-n (default n-1)")
    p.add_argument("--timeout", type=float, default=120.0, help="consumer step timeout in seconds (default 120)")
    p.add_argument("--out", type=Path, default=Path("h5flow-transit"), help="output directory (default ./h5flow-transit)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the results JSON here")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke preset: M=2, ratios 1 and 2, 1 MiB per rank, 3 steps, 1 repetition")


def _default_tmpfs() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _default_disk() -> Path:
    return Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path(tempfile.gettempdir())


def _unavailable(transport: str) -> str | None:
    """Why a transport cannot run here (None: it can)."""
    from h5flow.transports import registry

    kind = transport.split("-")[0]
    if kind not in registry:
        return f"transport {kind!r} is not registered in this build (known: {', '.join(registry.names())})"
    if kind == "adios2":
        from h5flow.transports.adios2 import missing_reason

        return missing_reason()
    return None


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) == _DEFAULTS[k]:
                setattr(args, k, v)
    for name in ("steps", "reps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1")
    if args.mib_per_rank <= 0 or any(m < 1 for m in args.producers) or any(r < 1 for r in args.ratios):
        raise ValueError("--mib-per-rank, --producers and --ratios must be positive")
    plan = Plan(sorted(set(args.producers)), sorted(set(args.ratios)), int(args.mib_per_rank * MIB), args.steps,
                args.reps, list(dict.fromkeys(args.transports)), args.tmpfs_dir or _default_tmpfs(),
                args.disk_dir or _default_disk(), args.out, args.queue_limit, args.timeout, args.hdf5_layout)
    if not plan.configurations():
        raise ValueError("no configuration: every ratio leaves N < 1 or a fraction; give ratios that divide M")
    for d in (plan.tmpfs, plan.disk):
        if not d.is_dir():
            raise ValueError(f"directory {d} does not exist")
    for t in plan.transports:
        why = _unavailable(t)
        if why:
            plan.skipped[t] = why
    return plan


_DEFAULTS = {"producers": [2, 4, 8], "ratios": [1, 2, 4, 8], "mib_per_rank": 32.0, "steps": 10, "reps": 3}


# -- the producer's data size ------------------------------------------------------------------------

def oscillator_shape(bytes_per_rank: int, producers: int) -> tuple[int, int, int]:
    """A global grid whose regular split into ``producers`` blocks gives each rank ~bytes_per_rank of float32."""
    cells = max(1, bytes_per_rank // 4)
    side = 1 << max(0, int(math.log2(round(cells ** (1 / 3)))))
    nz = max(1, cells // (side * side))
    return (side, side, nz * producers)


# -- the physical bound ---------------------------------------------------------------------------

def posix_write_read(directory: Path, chunk: int, count: int) -> float:
    """Seconds to write ``count`` files of ``chunk`` bytes into ``directory`` and read them back (one process)."""
    buf = os.urandom(min(chunk, MIB)) * (chunk // min(chunk, MIB)) + os.urandom(chunk % min(chunk, MIB))
    back = bytearray(chunk)
    d = Path(tempfile.mkdtemp(prefix="h5flow-posix-", dir=directory))
    try:
        t0 = time.perf_counter()
        for i in range(count):
            fd = os.open(d / f"{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, buf)
            finally:
                os.close(fd)
        for i in range(count):
            with open(d / f"{i}", "rb", buffering=0) as f:
                f.readinto(back)
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def memcpy(chunk: int, count: int) -> float:
    import numpy as np

    src = np.ones(chunk, dtype=np.uint8)
    dst = np.empty_like(src)
    t0 = time.perf_counter()
    for _ in range(count):
        np.copyto(dst, src)
    return time.perf_counter() - t0


# -- one run ----------------------------------------------------------------------------------------

def transport_xml(transport: str, stream: str, queue_limit: int, hdf5_layout: str = "n-1") -> str:
    if transport.startswith("hdf5"):
        el = (f'<transport type="hdf5" filename="{stream}" method="stream" layout="{hdf5_layout}" '
              f'queue_limit="{queue_limit}"/>')
    elif transport == "socket":
        el = f'<transport type="socket" filename="{stream}" queue_limit="{queue_limit}"/>'
    else:
        engine = transport.split("-")[1]
        el = f'<transport type="adios2" engine="{engine}" filename="{stream}" buffer_size="{queue_limit}"/>'
    return (f"<sensei>\n  {el}\n"
            '  <analysis type="histogram" mesh="mesh" array="data" association="cell" bins="10"/>\n</sensei>\n')


def run_one(plan: Plan, transport: str, m: int, n: int, rep: int) -> dict[str, Any]:
    from h5flow.runner import RunOptions, run

    base = plan.disk if transport == "hdf5-disk" else plan.tmpfs
    work = Path(tempfile.mkdtemp(prefix=f"h5flow-transit-{transport}-", dir=base))
    try:
        config = work / "config.xml"
        config.write_text(transport_xml(transport, str(work / "stream"), plan.queue_limit, plan.hdf5_layout))
        shape = oscillator_shape(plan.bytes_per_rank, m)
        osc = ("--shape", *map(str, shape), "--blocks", str(m), "--ghost-cells", "0")
        record = run(RunOptions(config, m, n, osc, plan.steps, plan.timeout, workdir=work, show_progress=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["bench_transport"] = transport
    record["directory"] = str(base)
    return record


def _peak(part: dict[str, Any]) -> int:
    return max((max(s[1] for s in r["rss"]) for r in part["ranks"] if r["rss"]), default=0)


def summarize(plan: Plan, transport: str, m: int, n: int, records: list[dict[str, Any]], bound: dict[str, float],
              record_path: str) -> Row:
    tts = [r["time_to_solution"] for r in records]
    tsec = [r["transport_seconds"]["write"] + r["transport_seconds"]["read"] for r in records]
    peak_p = max(_peak(r["producer"]) for r in records)
    peak_c = max(_peak(r["consumer"]) for r in records)
    lat = [r["latency"].get("median_s", float("nan")) for r in records if r.get("latency")]
    posix = bound["posix_disk"] if transport == "hdf5-disk" else bound["posix_tmpfs"]
    med = statistics.median(tsec)
    return Row(transport, m, n, m // n, plan.bytes_per_rank, plan.steps, len(records), statistics.median(tts), tts,
               med, int(records[0]["bytes"]), max(peak_p, peak_c), peak_p, peak_c,
               statistics.median(lat) if lat else float("nan"), posix, bound["memcpy"],
               records[0]["directory"], overhead_vs_posix=med / posix if posix > 0 else None, record=record_path)


# -- outputs ---------------------------------------------------------------------------------------

def write_outputs(plan: Plan, rows: list[Row], bounds: dict[tuple[int, int], dict[str, float]],
                  json_path: Path | None) -> list[Path]:
    out = plan.out
    by_cfg: dict[tuple[int, int], dict[str, Row]] = {}
    for r in rows:
        by_cfg.setdefault((r.producers, r.consumers), {})[r.transport] = r
    for cfg_rows in by_cfg.values():
        sst = cfg_rows.get("adios2-sst")
        for r in cfg_rows.values():
            r.vs_sst = r.time_to_solution / sst.time_to_solution if sst and sst.time_to_solution > 0 else None
    dicts = [asdict(r) for r in rows]
    csv_path = out / "transit.csv"
    with open(csv_path, "w", newline="") as f:
        cols = [k for k in dicts[0] if k != "time_to_solution_all"] if dicts else []
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(dicts)
    doc = {"benchmark": "transit", "machine": {"cpus": os.cpu_count(), "host": os.uname().nodename},
           "plan": {"producers": plan.producers, "ratios": plan.ratios, "bytes_per_rank_step": plan.bytes_per_rank,
                    "steps": plan.steps, "reps": plan.reps, "queue_limit": plan.queue_limit,
                    "hdf5_layout": plan.hdf5_layout,
                    "tmpfs": str(plan.tmpfs), "disk": str(plan.disk)},
           "skipped": [{"transport": t, "reason": why} for t, why in plan.skipped.items()],
           "bounds": [{"producers": m, "consumers": n, **b} for (m, n), b in bounds.items()],
           "results": dicts}
    json_out = out / "transit.json"
    json_out.write_text(json.dumps(doc, indent=1))
    paths = [csv_path, json_out]
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=1))
        paths.append(json_path)
    return paths


def _plt() -> Any:
    from h5flow.plot import _plt as plt

    return plt()


def fig2(plan: Plan, rows: list[Row]) -> list[Path]:
    plt = _plt()
    paths = []
    ratios = sorted({r.ratio for r in rows})
    # LEFT: time vs M at one ratio (the one with the most producer counts; the larger on ties)
    ratio = max(ratios, key=lambda q: (len({r.producers for r in rows if r.ratio == q}), q))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for t in TRANSPORTS:
        pts = sorted((r.producers, r.time_to_solution) for r in rows if r.transport == t and r.ratio == ratio)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t)
    ax.set_xlabel("producer ranks M")
    ax.set_ylabel("time to solution (s), median")
    ax.set_xticks(sorted({r.producers for r in rows}))
    ax.set_title(f"Fig. 2 left: M:N = {ratio}:1, {plan.bytes_per_rank / MIB:g} MiB/rank/step, {plan.steps} steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(plan.out / "fig2-left.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    # RIGHT: hdf5 vs socket vs SST over every configuration
    cfgs = sorted({(r.producers, r.consumers) for r in rows})
    shown = [t for t in ("hdf5-tmpfs", "socket", "adios2-sst") if any(r.transport == t for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(cfgs) + 2), 4.2))
    width = 0.8 / max(1, len(shown))
    for k, t in enumerate(shown):
        vals = {(r.producers, r.consumers): r.time_to_solution for r in rows if r.transport == t}
        xs = [i + k * width for i, c in enumerate(cfgs) if c in vals]
        ax.bar(xs, [vals[c] for c in cfgs if c in vals], width=width, label=t)
    ax.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(cfgs))])
    ax.set_xticklabels([f"{m}:{n}" for m, n in cfgs])
    ax.set_xlabel("M:N")
    ax.set_ylabel("time to solution (s), median")
    ax.set_title("Fig. 2 right: hdf5 (tmpfs) vs socket vs ADIOS2 SST")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(plan.out / "fig2-right.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def fig3_fig4(plan: Plan, rows: list[Row]) -> list[Path]:
    from h5flow.plot import fig3_memory, fig4_progress

    paths = []
    m = max(r.producers for r in rows)
    at_m = [r for r in rows if r.producers == m]
    hi, lo = max(r.ratio for r in at_m), min(r.ratio for r in at_m)
    for r in at_m:
        rec = json.loads(Path(r.record).read_text())
        if r.ratio == hi:
            paths.append(fig3_memory(rec, plan.out / f"fig3-memory-{r.transport}.png"))
        if r.ratio in (hi, lo) and r.transport in ("hdf5-tmpfs", "socket", "adios2-sst"):
            paths.append(fig4_progress(rec, plan.out / f"fig4-progress-{r.transport}-{r.producers}to{r.consumers}.png"))
    return paths


def print_summary(plan: Plan, rows: list[Row], bounds: dict[tuple[int, int], dict[str, float]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    shown = [t for t in TRANSPORTS if any(r.transport == t for r in rows)]
    t = Table(title=f"h5flow bench transit: oscillator → histogram, {plan.bytes_per_rank / MIB:g} MiB per producer "
                    f"rank per step, {plan.steps} steps, median of {plan.reps}; time to solution (s) and ÷ ADIOS2 SST")
    t.add_column("M:N", justify="right")
    for name in shown:
        t.add_column(name, justify="right")
    t.add_column("POSIX w+r tmpfs / disk (s)", justify="right")
    t.add_column("memcpy (s)", justify="right")
    cfgs = sorted({(r.producers, r.consumers) for r in rows})
    for m, n in cfgs:
        cells = []
        for name in shown:
            r = next((x for x in rows if x.transport == name and (x.producers, x.consumers) == (m, n)), None)
            if r is None:
                cells.append("-")
                continue
            vs = f" ({r.vs_sst:.2f}×)" if r.vs_sst is not None else ""
            cells.append(f"{r.time_to_solution:.2f}{vs}")
        b = bounds[(m, n)]
        t.add_row(f"{m}:{n}", *cells, f"{b['posix_tmpfs']:.3f} / {b['posix_disk']:.3f}", f"{b['memcpy']:.3f}")
    console.print(t)
    o = Table(title="time inside the transport (write + read, s) and ÷ the POSIX write+read of the same bytes")
    o.add_column("M:N", justify="right")
    for name in shown:
        o.add_column(name, justify="right")
    for m, n in cfgs:
        cells = []
        for name in shown:
            r = next((x for x in rows if x.transport == name and (x.producers, x.consumers) == (m, n)), None)
            cells.append("-" if r is None else f"{r.transport_seconds:.2f} ({r.overhead_vs_posix:.2f}×)"
                         if r.overhead_vs_posix is not None else f"{r.transport_seconds:.2f}")
        o.add_row(f"{m}:{n}", *cells)
    console.print(o)


# -- driver ----------------------------------------------------------------------------------------

def launch(args: argparse.Namespace) -> int:
    if shutil.which("mpiexec") is None:
        print("h5flow bench transit: mpiexec not found on PATH; run `make setup` and `source build/stack.env`",
              file=sys.stderr)
        return 2
    plan = make_plan(args)
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "records").mkdir(exist_ok=True)
    for t, why in plan.skipped.items():
        print(f"h5flow bench transit: skipping {t}: {why}")
    transports = [t for t in plan.transports if t not in plan.skipped]
    cfgs = plan.configurations()
    print(f"h5flow bench transit: {len(cfgs)} configurations (M:N {', '.join(f'{m}:{n}' for m, n, _ in cfgs)}) × "
          f"{len(transports)} transports × {plan.reps} repetitions; {plan.bytes_per_rank / MIB:g} MiB per rank per "
          f"step, {plan.steps} steps; tmpfs {plan.tmpfs}, disk {plan.disk}; output in {plan.out}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rows: list[Row] = []
    bounds: dict[tuple[int, int], dict[str, float]] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as bar:
        task = bar.add_task("runs", total=len(cfgs) * (len(transports) * plan.reps + 1))
        for m, n, _ in cfgs:
            chunk, count = plan.bytes_per_rank, m * plan.steps
            bar.update(task, description=f"{m}:{n} POSIX/memcpy bound")
            bounds[(m, n)] = {"posix_tmpfs": posix_write_read(plan.tmpfs, chunk, count),
                              "posix_disk": posix_write_read(plan.disk, chunk, count), "memcpy": memcpy(chunk, count)}
            bar.advance(task)
            for transport in transports:
                records = []
                for rep in range(plan.reps):
                    bar.update(task, description=f"{m}:{n} {transport} rep {rep + 1}/{plan.reps}")
                    records.append(run_one(plan, transport, m, n, rep))
                    bar.advance(task)
                rec_path = plan.out / "records" / f"{transport}-{m}to{n}.json"
                rec_path.write_text(json.dumps(records[0]))
                rows.append(summarize(plan, transport, m, n, records, bounds[(m, n)], str(rec_path)))
    paths = write_outputs(plan, rows, bounds, args.json)
    if rows:
        paths += fig2(plan, rows) + fig3_fig4(plan, rows)
        print_summary(plan, rows, bounds)
    for p in paths:
        print(f"wrote {p}")
    return 0
