"""trace: the h5flow_trace connector's overhead on bulk writes and on metadata calls.

Runs the C kernel ``h5flow-trace-bench`` (native/benchmarks/trace) twice per repetition, in alternating order:
over native HDF5 and with the trace connector stacked on it (``HDF5_VOL_CONNECTOR=h5flow_trace``). Bulk: one
float64 dataset written in hyperslabs, then closed (time of the writes and the close); overhead in % of the
native time. Metadata: group create + close + link exists (3 VOL callbacks) per iteration; overhead in µs per
callback. The kernel's CPU time in the timed part is compared (``--clock cpu``; ``--clock wall`` for wall time).
The fastest repetition of each side counts (``--stat min``, the least disturbed by other load, as in
``bench h5py-vs-c``), or the median. Every traced run's trace is loaded and its callbacks counted, so a run
where the connector was not loaded cannot pass for a cheap one. Goals (docs/TRACE.md): <= 3 % on bulk I/O,
<= 5 µs per metadata call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from h5flow.benchmarks._args import positive_int as _positive
from h5flow.benchmarks.perf import default_dir, kernel_path

KERNEL = "h5flow-trace-bench"
BULK_GOAL_PCT = 3.0
META_GOAL_US = 5.0


@dataclass(frozen=True)
class Row:
    """One case: native and traced seconds (the counted repetition of each), and the overhead."""

    case: str
    native_s: float
    traced_s: float
    calls: int
    overhead_pct: float
    overhead_us_per_call: float
    goal: str
    met: bool


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=_positive, default=5, help="repetitions of each pair (default 5)")
    p.add_argument("--bulk-mib", type=_positive, default=256, help="MiB written by the bulk case (default 256)")
    p.add_argument("--write-mib", type=_positive, default=4, help="MiB per write call (default 4)")
    p.add_argument("--meta-count", type=_positive, default=5000,
                   help="iterations of the metadata case, 3 callbacks each (default 5000)")
    p.add_argument("--dir", type=Path, default=None, help="directory for the HDF5 files (default /dev/shm)")
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="which repetition counts: the fastest of each side (default) or the median")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="what is timed: the kernel's CPU time in the timed part (default; waiting for a core on a "
                        "loaded machine does not count) or its wall time")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON to this file")


def _run(argv: list[str], traced: Path | None, clock: str) -> tuple[float, int]:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    if traced is not None:
        env["HDF5_VOL_CONNECTOR"] = "h5flow_trace"
        env["H5FLOW_TRACE_DIR"] = str(traced)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{' '.join(argv)} printed no RESULT line: {r.stdout!r}")
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return float(fields["seconds" if clock == "wall" else "cpu"]), int(fields["calls"])


def _traced_calls(trace: Path, op: str) -> int:
    from h5flow.trace import load

    df = load(trace)
    return int((df["op"] == op).sum())


def measure(args: argparse.Namespace, work: Path) -> list[Row]:
    exe = str(kernel_path(KERNEL))
    cases = {
        "bulk": ([exe, "bulk", str(work / "bulk.h5"), str(args.bulk_mib), str(args.write_mib)], "dataset_write"),
        "meta": ([exe, "meta", str(work / "meta.h5"), str(args.meta_count)], "group_create"),
    }
    rows = []
    for case, (argv, op) in cases.items():
        native, traced, calls = [], [], 0
        for rep in range(args.reps):
            order = (False, True) if rep % 2 == 0 else (True, False)
            for with_trace in order:
                tdir = work / f"trace-{case}-{rep}"
                seconds, calls = _run(argv, tdir if with_trace else None, args.clock)
                if with_trace:
                    want = calls if case == "bulk" else calls // 3
                    got = _traced_calls(tdir, op)
                    if got != want:
                        raise RuntimeError(f"{case}: the trace holds {got} {op} calls, the kernel made {want}: "
                                           "the connector was not loaded (HDF5_PLUGIN_PATH?)")
                    shutil.rmtree(tdir)
                    traced.append(seconds)
                else:
                    native.append(seconds)
        pick = min if args.stat == "min" else statistics.median
        n, t = pick(native), pick(traced)
        pct = 100.0 * (t - n) / n if n > 0 else 0.0
        us = 1e6 * (t - n) / calls if calls else 0.0
        if case == "bulk":
            goal, met = f"<= {BULK_GOAL_PCT:g} %", pct <= BULK_GOAL_PCT
        else:
            goal, met = f"<= {META_GOAL_US:g} µs/call", us <= META_GOAL_US
        rows.append(Row(case=case, native_s=n, traced_s=t, calls=calls, overhead_pct=pct,
                        overhead_us_per_call=us, goal=goal, met=met))
    return rows


def render(rows: list[Row], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"h5flow_trace overhead ({args.clock} time, {args.stat} of {args.reps}; "
                    f"bulk {args.bulk_mib} MiB in {args.write_mib} MiB writes; metadata {args.meta_count} x 3 callbacks)")
    for c in ("case", "native", "traced", "callbacks", "overhead", "per callback", "goal", "met"):
        t.add_column(c, justify="left" if c in ("case", "goal") else "right")
    for r in rows:
        t.add_row(r.case, f"{r.native_s:.4f} s", f"{r.traced_s:.4f} s", str(r.calls), f"{r.overhead_pct:+.2f} %",
                  f"{r.overhead_us_per_call:+.2f} µs", r.goal, "yes" if r.met else "NO")
    Console().print(t)


def launch(args: argparse.Namespace) -> int:
    base = args.dir or default_dir()
    work = Path(tempfile.mkdtemp(prefix="h5flow-bench-trace-", dir=base))
    try:
        rows = measure(args, work)
    except RuntimeError as e:
        print(f"h5flow bench trace: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    render(rows, args)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0
