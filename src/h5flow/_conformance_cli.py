"""``h5flow conformance``: HDF5's VOL API tests against a connector (see h5flow.testing.conformance)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TABLE_BEGIN = "<!-- conformance-table:begin (written by `h5flow conformance --record`) -->"
TABLE_END = "<!-- conformance-table:end -->"


def add_commands(sub: argparse._SubParsersAction) -> None:
    from h5flow.testing import conformance as c

    p = sub.add_parser(
        "conformance", help="run HDF5's VOL API tests (h5_api_test) against a connector",
        description="Run HDF5 1.14.5's own VOL API test suite (h5_api_test, built by `make setup`) against a "
        "VOL connector, one process per test group, and report passed/failed/skipped per group. The "
        "connector is selected through HDF5_VOL_CONNECTOR and HDF5_PLUGIN_PATH, as for any HDF5 program.",
    )
    p.add_argument("--connector", default="native",
                   help="'native', 'pass_through', a plugin's name (e.g. h5flow_log) or a full connector string "
                   "with its info (default: native)")
    p.add_argument("--groups", nargs="+", metavar="GROUP", default=list(c.DEFAULT_GROUPS),
                   choices=list(c.ALL_GROUPS),
                   help=f"test groups to run (default: {' '.join(c.DEFAULT_GROUPS)}; all: {' '.join(c.ALL_GROUPS)})")
    p.add_argument("--timeout", type=float, default=c.DEFAULT_TIMEOUT, help="seconds allowed per group (default 300)")
    p.add_argument("--json", action="store_true", help="print the results (every test's outcome) as JSON")
    p.add_argument("--failures", action="store_true", help="list the failed tests grouped by the reason each printed (its last line that is not an "
                   "HDF5 error stack); --json has every test's full output")
    p.add_argument("--logs", type=Path, default=None, metavar="DIR", help="keep each group's raw output in DIR")
    p.add_argument("--record", nargs="?", const="", default=None, metavar="JSON",
                   help="store the counts as the expected ones (default file: tests/data/conformance.json) "
                   "and rewrite the table in docs/CONFORMANCE.md next to it")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if any group passes fewer tests than recorded for this connector")
    p.set_defaults(func=_cmd_conformance)


def _cmd_conformance(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from h5flow.testing import conformance as c

    console = Console(stderr=True)
    record_path = None
    if args.record is not None or args.check:
        record_path = Path(args.record) if args.record else c.default_record_path()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(f"h5_api_test on {args.connector}", total=len(args.groups))

        def done(r: c.GroupResult) -> None:
            progress.update(task, advance=1, description=f"h5_api_test on {args.connector}: {r.group} done")

        results = c.run(args.connector, args.groups, timeout=args.timeout, on_group=done, keep_output=args.logs)
    if args.json:
        json.dump({"connector": args.connector, "groups": c.to_json(results)}, sys.stdout, indent=1)
        print()
    else:
        _print_table(results, console=Console())
    if args.failures:
        for cause, tests in c.failures_by_cause(results).items():
            print(f"\n{len(tests)} x {cause}")
            for name in tests:
                print(f"    {name}")
    rc = 0
    if args.check:
        expected = c.load_record(record_path)["connectors"].get(args.connector)
        if expected is None:
            print(f"h5flow conformance: nothing recorded for {args.connector!r} in {record_path}", file=sys.stderr)
            rc = 1
        else:
            for line in c.compare(results, expected):
                print(f"REGRESSION {line}", file=sys.stderr)
                rc = 1
    if args.record is not None:
        data = c.record(results, record_path)
        doc = record_path.parents[2] / "docs" / "CONFORMANCE.md" if not args.record else None
        if doc is not None and doc.is_file():
            write_doc_table(doc, data)
            console.print(f"recorded in {record_path} and {doc}")
        else:
            console.print(f"recorded in {record_path}")
    return rc


def _print_table(results: list, console) -> None:  # noqa: ANN001
    from rich.table import Table

    t = Table(title=f"HDF5 VOL API tests against {results[0].connector if results else '?'}")
    for col in ("group", "run", "passed", "failed", "skipped", "seconds", "note"):
        t.add_column(col, justify="left" if col in ("group", "note") else "right")
    for r in results:
        t.add_row(r.group, str(r.run), str(r.passed), str(r.failed), str(r.skipped), f"{r.seconds:.2f}",
                  r.problem.splitlines()[0] if r.problem else "")
    tot = {k: sum(getattr(r, k) for r in results) for k in ("run", "passed", "failed", "skipped")}
    t.add_row("total", *(str(tot[k]) for k in ("run", "passed", "failed", "skipped")),
              f"{sum(r.seconds for r in results):.2f}", "")
    console.print(t)


def doc_table(data: dict) -> str:
    """The Markdown table of recorded counts (one row per connector and group)."""
    lines = ["| connector | group | run | passed | failed | skipped |", "|---|---|---:|---:|---:|---:|"]
    for conn, groups in data["connectors"].items():
        tot = dict.fromkeys(("run", "passed", "failed", "skipped"), 0)
        for g, v in groups.items():
            note = "" if v.get("complete", True) else f" ({v.get('problem', 'incomplete')})"
            lines.append(f"| {conn} | {g}{note} | {v['run']} | {v['passed']} | {v['failed']} | {v['skipped']} |")
            for k in tot:
                tot[k] += v[k]
        lines.append(f"| **{conn}** | **all recorded** | {tot['run']} | {tot['passed']} | {tot['failed']} | {tot['skipped']} |")
    return "\n".join(lines)


def write_doc_table(doc: Path, data: dict) -> None:
    text = doc.read_text()
    pattern = re.compile(re.escape(TABLE_BEGIN) + r".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{doc} has no {TABLE_BEGIN!r} … {TABLE_END!r} section to rewrite")
    doc.write_text(pattern.sub(lambda _m: f"{TABLE_BEGIN}\n{doc_table(data)}\n{TABLE_END}", text))
