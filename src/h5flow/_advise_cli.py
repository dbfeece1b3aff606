"""``h5flow advise``: findings from a trace directory, a Darshan log, or a command traced first (the rules:
:mod:`h5flow.advise`)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas and the rules are imported when a command runs, not when the parser is built
    import pandas as pd

_PREFIX = "h5flow advise: "
FIX_ENV = "H5FLOW_ADVISE_FIX"


@dataclass
class Run:
    """One traced run of a command: where its trace is, how long it took, what advise found in it."""

    out: Path
    rc: int
    wall_s: float
    df: pd.DataFrame
    findings: list


def hdf5_seconds(df: pd.DataFrame) -> float:
    """Time in HDF5 calls of the busiest rank (the trace's callbacks do not nest)."""
    return float(df.groupby("rank")["dur"].sum().max()) if len(df) else 0.0


def _load(path: Path) -> tuple[pd.DataFrame, list[str] | None]:
    """The rows of a trace directory or Darshan log, and the rules that apply to it (None: all)."""
    from h5flow.advise import darshan_input

    if darshan_input.is_darshan_log(path):
        return darshan_input.frame(path), list(darshan_input.DARSHAN_RULES)
    from h5flow.trace import load

    return load(path), None


def _run_to_stderr(spec: object) -> int:
    """The traced run with the command's standard output sent to standard error (keeps ``--json`` output whole)."""
    from h5flow.trace._run import run

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        return run(spec)  # type: ignore[arg-type]
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def traced(command: list[str], out: Path, config: dict, only: list[str] | None, fix: str = "",
           stdout_to_stderr: bool = False) -> Run:
    from h5flow.advise import advise
    from h5flow.trace import load
    from h5flow.trace._run import TraceRun, run

    saved = os.environ.get(FIX_ENV)
    if fix:
        os.environ[FIX_ENV] = fix
    try:
        t0 = time.perf_counter()
        spec = TraceRun(out=out, command=command)
        rc = _run_to_stderr(spec) if stdout_to_stderr else run(spec)
        wall = time.perf_counter() - t0
    finally:
        if saved is None:
            os.environ.pop(FIX_ENV, None)
        else:
            os.environ[FIX_ENV] = saved
    if rc != 0:
        raise RuntimeError(f"the traced command exited with status {rc}" + (f" ({FIX_ENV}={fix})" if fix else ""))
    df = load(out)
    return Run(out, rc, wall, df, advise(df, config, only))


def verify(before: Run, command: list[str], out: Path, config: dict, only: list[str] | None,
           json_out: bool = False) -> tuple[Run, int]:
    """Re-run the command with the found rules' fixes asked for and print the measured gain."""
    from rich.console import Console
    from rich.table import Table

    from h5flow.advise.base import same_calls

    console = Console(width=max(Console().width, 120), stderr=json_out)  # stdout stays one JSON object
    ids = sorted({f.rule for f in before.findings})
    after = traced(command, out, config, only, fix=",".join(ids), stdout_to_stderr=json_out)
    left = {f.rule for f in after.findings} & set(ids)
    table = Table(title=f"h5flow advise --verify: {FIX_ENV}={','.join(ids)}")
    for col in ("", "as written", "fixed", "gain"):
        table.add_column(col, justify="right" if col else "left")
    for label, a, b in (("wall time of the command (s)", before.wall_s, after.wall_s),
                        ("time in HDF5 calls, busiest rank (s)", hdf5_seconds(before.df), hdf5_seconds(after.df))):
        table.add_row(label, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}x" if b > 0 else "-")
    for f in before.findings:
        calls = same_calls(after.df, f)
        t2 = float(calls.groupby("rank")["dur"].sum().max()) if len(calls) else 0.0
        table.add_row(f"{f.rule} ({Path(f.file).name}): the same calls (s)", f"{f.time_s:.3f}", f"{t2:.3f}",
                      f"{f.time_s / t2:.2f}x" if t2 > 0 else "-")
    for rule in ids:
        table.add_row(f"{rule}: finding after the fix", "yes", "yes" if rule in left else "no finding", "")
    console.print(table)
    if left:
        console.print(f"[red]still found after the fix: {', '.join(sorted(left))}[/red] (does the program read "
                      f"{FIX_ENV}? examples/advise/faulty.py shows how)")
        return after, 1
    return after, 0


def _report(findings: list, source: str, df: pd.DataFrame, args: argparse.Namespace, extra: dict | None = None) -> None:
    from h5flow.advise import report

    if args.json:
        print(report.to_json(findings, source, extra))
    else:
        report.print_text(findings, source)
    if args.html:
        args.html.write_text(report.to_html(findings, source, df))
        print(f"{_PREFIX}HTML report: {args.html}", file=sys.stderr)


def _list_rules() -> int:
    from rich.console import Console
    from rich.table import Table

    from h5flow.advise import RULE_CLASSES

    table = Table(title="h5flow advise rules")
    for col in ("id", "severity", "title", "settings (defaults)"):
        table.add_column(col)
    for cls in RULE_CLASSES:
        s = cls.settings_class()
        table.add_row(cls.id, cls.severity, cls.title, ", ".join(f"{n}={getattr(s, n)}" for n in s.names()))
    Console(width=max(Console().width, 120)).print(table)
    return 0


def _cmd_advise(args: argparse.Namespace) -> int:
    from h5flow.advise import advise, load_config

    try:
        if args.list_rules:
            return _list_rules()
        config = load_config(args.config) if args.config else {}
        only = args.rules
        rest = list(args.target)
        if rest and rest[0] == "--":
            rest = rest[1:]
        if not rest:
            raise ValueError("give a trace directory, a Darshan log, or -- COMMAND (see h5flow advise --help)")
        if args.target[0] != "--":
            if not Path(rest[0]).exists():
                raise ValueError(f"{rest[0]}: no such trace directory or Darshan log (a command goes after --: "
                                 "h5flow advise -- COMMAND...)")
            if args.verify or len(rest) != 1:
                raise ValueError("--verify and extra arguments need a command: h5flow advise --verify -- COMMAND...")
            df, subset = _load(Path(rest[0]))
            use = only
            if subset is not None:  # a Darshan log: the rules its counters support
                use = [r for r in (only or subset) if r in subset]
                if not use:
                    raise ValueError(f"none of the rules {', '.join(only or [])} applies to a Darshan log; those that "
                                     f"do: {', '.join(subset)}")
            findings = advise(df, config, use)
            _report(findings, rest[0], df, args)
            return 0
        out = args.out or Path(f"h5flow-advise-{time.strftime('%Y%m%d-%H%M%S')}")
        before = traced(rest, out / "as-written", config, only, stdout_to_stderr=args.json)
        _report(before.findings, f"{' '.join(rest)} (trace: {before.out})", before.df, args)
        if not args.verify:
            return 0
        if not before.findings:
            print(f"{_PREFIX}no finding, nothing to verify", file=sys.stderr)
            return 0
        _after, rc = verify(before, rest, out / "fixed", config, only, json_out=args.json)
        return rc
    except (ValueError, RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"{_PREFIX}{e}", file=sys.stderr)
        return 2


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "advise", help="find HDF5 tuning mistakes in a trace, a Darshan log, or a command traced first",
        description="Apply h5flow's tuning rules (datatype conversion, collective fallback, fill time, libver, "
        "alignment, small independent writes, chunk shape, chunk cache, open/close loops, files reopened, rank "
        "imbalance, MPI-IO hints) to a trace directory of h5flow trace, to a Darshan log (.darshan, with "
        "PyDarshan; the rules its counters support), or to COMMAND, traced first. Findings come costliest "
        "first, each with its evidence, the fix for h5py and for C, and the source it rests on. "
        f"--verify re-runs COMMAND with {FIX_ENV}=<rule ids found> in its environment (a program that reads it "
        "runs its fixed variant, as examples/advise/faulty.py does) and prints the measured gain. "
        "Rules and thresholds: docs/TRACE.md, 'Advise'.",
        usage="h5flow advise [options] TRACE_DIR|LOG.darshan\n       h5flow advise [options] [--out DIR] [--verify] "
              "-- COMMAND [ARGS...]\n       h5flow advise --list-rules")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON object instead of text")
    p.add_argument("--html", type=Path, default=None, help="also write a standalone HTML report with plots here")
    p.add_argument("--config", type=Path, default=None,
                   help='JSON file of threshold overrides: {"rule-id": {"setting": value}}')
    p.add_argument("--rules", type=lambda s: [r.strip() for r in s.split(",") if r.strip()], default=None,
                   help="only these rule ids, comma separated")
    p.add_argument("--out", type=Path, default=None,
                   help="with a command: directory for its traces (default h5flow-advise-<date>-<time>)")
    p.add_argument("--verify", action="store_true",
                   help=f"with a command: re-run it with {FIX_ENV} set to the rules found and print the gain")
    p.add_argument("--list-rules", action="store_true", help="list the rules and their default thresholds")
    p.add_argument("target", nargs=argparse.REMAINDER, help="TRACE_DIR, LOG.darshan, or -- COMMAND [ARGS...]")
    p.set_defaults(func=_cmd_advise)
