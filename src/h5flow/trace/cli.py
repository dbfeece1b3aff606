"""``h5flow trace``: trace a program's HDF5 calls; ``h5flow trace show``: summarize a trace (docs/TRACE.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_PREFIX = "h5flow trace: "


def _show_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="h5flow trace show",
        description="Summarize a trace directory: time per operation kind, bytes, the objects that took the most "
        "time, per-rank time and imbalance; and draw a per-rank timeline PNG.")
    p.add_argument("dir", type=Path, help="the trace directory (rank-*.trace files)")
    p.add_argument("--top", type=int, default=10, help="how many objects to list (default 10)")
    p.add_argument("--png", type=Path, default=None, help="where to draw the timeline (default DIR/timeline.png)")
    p.add_argument("--no-png", action="store_true", help="print the tables only")
    return p


def show(argv: list[str]) -> int:
    from h5flow.trace import load
    from h5flow.trace._show import render, summarize, timeline

    args = _show_parser().parse_args(argv)
    df = load(args.dir)
    if df.empty:
        print(f"{_PREFIX}{args.dir}: the trace holds no calls", file=sys.stderr)
        return 1
    render(args.dir, summarize(df, top=args.top))
    for path in df.attrs.get("incomplete", []):
        print(f"warning: {path} lacks its end record: the last calls of that process are not in the trace")
    if not args.no_png:
        png = timeline(df, args.png or args.dir / "timeline.png")
        print(f"timeline: {png}")
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from h5flow.trace import TraceError
    from h5flow.trace._run import TraceRun, default_out, run

    command = list(args.command)
    try:
        if command and command[0] == "show":
            return show(command[1:])
        if command and command[0] == "--":
            command = command[1:]
        return run(TraceRun(out=args.out or default_out(), command=command))
    except (TraceError, ValueError, OSError) as e:
        print(f"{_PREFIX}{e}", file=sys.stderr)
        return 2


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "trace", help="trace every HDF5 call of a program (h5flow_trace connector); 'trace show DIR' summarizes",
        description="Run COMMAND (serial, mpiexec ..., Python or C) with the h5flow_trace VOL connector stacked "
        "over the connector it would have used (an existing HDF5_VOL_CONNECTOR becomes the connector below), "
        "writing one trace per rank into --out. 'h5flow trace show DIR [--top N] [--png PATH]' prints a summary "
        "and draws a per-rank timeline. The format and the DataFrame of h5flow.trace.load: docs/TRACE.md.",
        usage="h5flow trace [--out DIR] -- COMMAND [ARGS...]\n       h5flow trace show DIR [--top N] [--png PATH]",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="trace directory (default h5flow-trace-<date>-<time>); must not hold a trace already")
    p.add_argument("command", nargs=argparse.REMAINDER, help="'-- COMMAND [ARGS...]', or 'show DIR ...'")
    p.set_defaults(func=_cmd_trace)


def main(argv: list[str] | None = None) -> int:
    """``h5flow trace ...`` on its own (``python -m h5flow.trace.cli``)."""
    p = argparse.ArgumentParser(prog="h5flow")
    add_commands(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["trace", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
