"""``h5flow conformance``: HDF5's VOL API tests against a connector (see h5flow.testing.conformance)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TABLE_BEGIN = "<!-- conformance-table:begin (written by `h5flow conformance --record`) -->"
TABLE_END = "<!-- conformance-table:end -->"
SUITE_BEGIN = "<!-- h5py-suite:begin (written by `h5flow conformance --h5py-suite --record`) -->"
SUITE_END = "<!-- h5py-suite:end -->"


def add_commands(sub: argparse._SubParsersAction) -> None:
    from h5flow.testing import conformance as c

    p = sub.add_parser(
        "conformance", help="run HDF5's VOL API tests (h5_api_test) against a connector",
        description="Run HDF5 1.14.5's own VOL API test suite (h5_api_test, built by `make setup`) against a "
        "VOL connector, one process per test group, and report passed/failed/skipped per group. The "
        "connector is selected through HDF5_VOL_CONNECTOR and HDF5_PLUGIN_PATH, as for any HDF5 program.",
    )
    p.add_argument("--connector", default=None,
                   help="'native', 'pass_through', a plugin's name (e.g. h5flow_log) or a full connector string "
                   "with its info (default: native; with --h5py-suite: h5flow_log)")
    p.add_argument("--h5py-suite", action="store_true",
                   help="run h5py's own test suite instead: each of its test files in its own pytest process "
                   "(timeout per file), once natively and once through --connector, and compare")
    p.add_argument("--tools", action="store_true",
                   help="run HDF5's command-line tools on containers holding each feature and on their native "
                   "twins instead, and print the table of differences (exit 1 if a cell crashed or differs "
                   "without a documented reason; with --record: rewrite the table in docs/FORMAT.md)")
    p.add_argument("--features", nargs="+", metavar="FEATURE", default=None,
                   help="with --tools: only these features (default: all)")
    p.add_argument("--asan", action="store_true",
                   help="with --tools: the connector built with AddressSanitizer/UBSan (build/native-asan)")
    p.add_argument("--files", nargs="+", metavar="FILE", default=None,
                   help="with --h5py-suite: only these test files of h5py (e.g. test_group.py)")
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

    if args.h5py_suite:
        return _cmd_h5py_suite(args)
    if args.tools:
        return _cmd_tools(args)
    if args.connector is None:
        args.connector = "native"
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


# ---------------------------------------------------------------- h5py's own test suite
def _cmd_h5py_suite(args: argparse.Namespace) -> int:
    from h5flow.testing import conformance as c
    from h5flow.testing import h5py_suite as s

    conn = args.connector or "h5flow_log"
    files = args.files or s.test_files()
    timeout = args.timeout if args.timeout != c.DEFAULT_TIMEOUT else s.DEFAULT_TIMEOUT
    record_path = Path(args.record) if args.record else c.default_record_path()
    results: dict[str, list] = {}
    for name in ("native", conn):
        results[name] = []
        for f in files:
            r = s.run_file(f, name, timeout=timeout)
            results[name].append(r)
            print(f"{name:>12} {f:<32} passed {r.passed:4} failed {r.failed:4} skipped {r.skipped:4} errors "
                  f"{r.errors:3} {r.seconds:6.1f} s {r.problem}", file=sys.stderr, flush=True)
    summary = s.summarize(results["native"], results[conn])
    if args.json:
        json.dump({"connector": conn, "summary": summary,
                   "files": {r.file: {"native": vars(r), conn: vars(q)}
                             for r, q in zip(results["native"], results[conn])}}, sys.stdout, indent=1, default=str)
        print()
    else:
        print(suite_text(conn, summary))
    if args.failures:
        for cause, tests in summary["failures_by_cause"].items():
            print(f"\n{len(tests)} x {cause}")
            for t in tests:
                print(f"    {t}")
    rc = 0
    if args.check:
        rec = c.load_record(record_path).get("h5py_suite", {}).get("files", {})
        for q in results[conn]:
            want = rec.get(q.file, {}).get(conn)
            if want and (q.passed < want["passed"] or (q.crashed and not want.get("crashed"))):
                print(f"REGRESSION h5py {q.file} through {conn}: passed {q.passed} < {want['passed']} recorded"
                      f"{' (' + q.problem + ')' if q.problem else ''}", file=sys.stderr)
                rc = 1
    if args.record is not None:
        data = c.load_record(record_path) if record_path.is_file() else {"connectors": {}}
        import h5py

        data["h5py_suite"] = {
            "about": "h5py's own test suite, one process per test file, natively and through the connector; "
                     "recorded with `h5flow conformance --h5py-suite --record`. tests/test_conformance_h5py.py "
                     "fails if a guarded file passes fewer tests through the connector than recorded here.",
            "h5py": h5py.version.version, "connector": conn,
            "files": {r.file: {"native": _counts(r), conn: _counts(q)}
                      for r, q in zip(results["native"], results[conn])},
            "summary": summary}
        record_path.write_text(json.dumps(data, indent=1) + "\n")
        doc = record_path.parents[2] / "docs" / "CONFORMANCE.md" if not args.record else None
        if doc is not None and doc.is_file():
            text = doc.read_text()
            pattern = re.compile(re.escape(SUITE_BEGIN) + r".*?" + re.escape(SUITE_END), re.S)
            if not pattern.search(text):
                raise ValueError(f"{doc} has no {SUITE_BEGIN!r} … {SUITE_END!r} section to rewrite")
            doc.write_text(pattern.sub(lambda _m: f"{SUITE_BEGIN}\n{suite_doc(data['h5py_suite'])}\n{SUITE_END}", text))
        print(f"recorded in {record_path}", file=sys.stderr)
    return rc


def _counts(r) -> dict:  # noqa: ANN001
    return {"passed": r.passed, "failed": r.failed, "skipped": r.skipped, "xfailed": r.xfailed,
            "errors": r.errors, "crashed": r.crashed, "problem": r.problem}


def suite_text(conn: str, summary: dict) -> str:
    n, c_ = summary["native"], summary["connector"]
    return (f"h5py suite natively: passed {n['passed']}, failed {n['failed']}, errors {n['errors']}, skipped "
            f"{n['skipped']}, crashed files {len(n['crashed_files'])}\n"
            f"h5py suite through {conn}: passed {c_['passed']}, failed {c_['failed']}, errors {c_['errors']}, "
            f"skipped {c_['skipped']}, crashed files {len(c_['crashed_files'])} {c_['crashed_files'] or ''}\n"
            f"of the {summary['native_passed_considered']} tests native passes (without "
            f"{summary['excluded_native_only']} native-only ones), {summary['also_pass']} pass through {conn}: "
            f"{100 * summary['ratio']:.1f} %; of all {summary['native_passed']} tests native passes, "
            f"{summary['also_pass_all']}: {100 * summary['ratio_all']:.1f} %")


def suite_doc(rec: dict) -> str:
    conn, sm = rec["connector"], rec["summary"]
    lines = [f"h5py {rec['h5py']}; one pytest process per test file.", "",
             "| | passed | failed | errors | skipped | xfailed | crashed/hung files |", "|---|---:|---:|---:|---:|---:|---|"]
    for label, t in (("native", sm["native"]), (conn, sm["connector"])):
        lines.append(f"| {label} | {t['passed']} | {t['failed']} | {t['errors']} | {t['skipped']} | {t['xfailed']} | "
                     f"{', '.join(t['crashed_files']) or 'none'} |")
    lines += ["", f"Of the **{sm['native_passed_considered']}** tests native passes (not counting "
              f"{sm['excluded_native_only']} that inspect native-only internals, below), **{sm['also_pass']}** pass "
              f"through {conn}: **{100 * sm['ratio']:.1f} %**. Of **all {sm['native_passed']}** tests native passes, "
              f"**{sm['also_pass_all']}** pass through {conn}: **{100 * sm['ratio_all']:.1f} %**.", "",
              f"Failures (and errors) through {conn}, grouped by cause (`h5flow.testing.h5py_suite.CAUSES`):", ""]
    for cause, tests in sm["failures_by_cause"].items():
        lines.append(f"- **{len(tests)}** — {cause}")
        for t in tests:
            lines.append(f"  - `{t}`")
    lines += ["", "| h5py test file | native passed | " + conn + " passed | " + conn + " failed+errors |",
              "|---|---:|---:|---:|"]
    for f, v in rec["files"].items():
        q = v[conn]
        lines.append(f"| {f} | {v['native']['passed']} | {q['passed']} | {q['failed'] + q['errors']}"
                     f"{' (' + q['problem'] + ')' if q['problem'] else ''} |")
    return "\n".join(lines)


def _cmd_tools(args: argparse.Namespace) -> int:
    import shutil
    import subprocess
    import tempfile

    from h5flow.connectors import default_plugin_dir
    from h5flow.testing import tools_matrix as tm

    features = args.features or list(tm.FEATURES)
    unknown = [f for f in features if f not in tm.FEATURES]
    if unknown:
        print(f"h5flow conformance: unknown feature(s) {unknown}; known: {' '.join(tm.FEATURES)}", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[2]
    plugins, asan = default_plugin_dir(), None
    if args.asan:
        cc = shutil.which("mpicc") or shutil.which("cc") or "cc"
        asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
        plugins = root / "build" / "native-asan" / "plugins"
        if not (Path(asan).is_absolute() and (plugins / "libh5flow_log.so").exists()):
            print("h5flow conformance: --asan needs libasan and the sanitized connector: cmake -S native -B "
                  "build/native-asan -DH5FLOW_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug (and build it)", file=sys.stderr)
            return 2
    native_env, container_env = tm.environments(plugins, asan)
    with tempfile.TemporaryDirectory(prefix="h5flow-tools-") as tmp:
        setup = tm.make_fixtures(Path(tmp), features, native_env, container_env)
        cells = tm.run_matrix(setup, tm.available(), features,
                              on_cell=lambda c: print(f"{c.invocation} × {c.feature}: {c.status()}", file=sys.stderr))
    print(tm.main_text(cells))
    if args.record is not None:
        doc = root / "docs" / "FORMAT.md"
        tm.write_doc_table(doc, tm.table(cells))
        print(f"table written into {doc}", file=sys.stderr)
    return 0 if all(c.ok for c in cells) else 1
