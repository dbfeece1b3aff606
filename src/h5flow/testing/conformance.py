"""VOL API conformance: HDF5's own API test suite (``h5_api_test``) run against a connector.

``scripts/setup.sh`` builds ``h5_api_test`` from the same HDF5 1.14.5 source as the library
(``test/API``, CMake ``-DHDF5_TEST_API=ON``) into ``<prefix>/libexec/``. The suite selects the
connector the way every HDF5 program does (``HDF5_VOL_CONNECTOR`` + ``HDF5_PLUGIN_PATH``), refuses to
run if that connector did not register (so a run never silently falls back to native), and skips the
tests whose ``H5VL_CAP_FLAG_*`` bits the connector does not set.

Each test group (``file``, ``group``, ``dataset``, ...) runs as its own process in its own scratch
directory: a connector that crashes or hangs in one group costs only that group. The output is parsed
into per-test verdicts, and the counts are those verdicts (HDF5's own summary line is kept beside them:
it counts a few things twice, see docs/CONFORMANCE.md). A process that dies keeps the verdicts it
printed, and the test it died in counts as failed.

Used by ``h5flow conformance`` and by ``tests/test_conformance.py``, which compares against the
counts recorded in ``tests/data/conformance.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: Test groups of h5_api_test (test/API/H5_api_test.c, without the optional "async").
ALL_GROUPS = ("file", "group", "dataset", "datatype", "attribute", "link", "object", "misc")
#: The groups h5flow records: the data model a storage connector has to serve.
DEFAULT_GROUPS = ("file", "group", "dataset", "attribute", "link", "object")
#: Connectors HDF5 has built in, and the HDF5_VOL_CONNECTOR string that selects each.
BUILTIN_CONNECTORS = {"native": None, "pass_through": "pass_through under_vol=0;under_info={}"}
DEFAULT_TIMEOUT = 300.0

_STATUS = {"PASSED": "passed", "*FAILED*": "failed", "-SKIP-": "skipped"}
_TESTING = re.compile(r"^(?P<indent>\s*)Testing (?P<rest>.*)$")
_STATUS_AT_END = re.compile(r"(?:\s(PASSED)|(\*FAILED\*)|\s(-SKIP-))\s*$")
_SUMMARY = re.compile(
    r"^(?P<n>\d+)/(?P<run>\d+) \([\d.]+%\) API tests (?P<what>passed|did not pass|were skipped) with VOL connector"
)


class ConformanceError(RuntimeError):
    """The API test suite cannot be run (not built, unknown group, connector not found)."""


@dataclass
class TestOutcome:
    __test__ = False  # not a pytest test class

    name: str  # "<test>" or "<multi-part test> / <part>"
    status: str  # "passed", "failed", "skipped" or "unreported" (a part that ended without a verdict)
    detail: str = ""  # failures only: what the test printed from its start to the next test


@dataclass
class GroupResult:
    """One group's outcome. ``run`` counts the tests that started (``unreported`` ones included)."""

    group: str
    connector: str
    run: int
    passed: int
    failed: int
    skipped: int
    complete: bool  # the process printed HDF5's summary and exited on its own
    returncode: int | None
    seconds: float
    tests: list[TestOutcome] = field(default_factory=list)
    problem: str = ""  # why the run is incomplete (crash, timeout, refused to start)
    # HDF5's own summary line. Its "did not pass" counts a failed part of a multi-part test twice
    # (H5_FAILED then PART_ERROR), so the counts above are the per-test verdicts parsed instead.
    hdf5_summary: dict[str, int] = field(default_factory=dict)
    stray_verdicts: list[str] = field(default_factory=list)  # counted by HDF5's summary, no test of ours

    def counts(self) -> dict[str, int]:
        return {"run": self.run, "passed": self.passed, "failed": self.failed, "skipped": self.skipped}

    def failures(self) -> list[TestOutcome]:
        return [t for t in self.tests if t.status == "failed"]


# ---- locating the suite and selecting the connector -------------------------------------------------


def api_test_executable() -> Path:
    """The ``h5_api_test`` built by ``scripts/setup.sh`` (``H5FLOW_API_TEST`` overrides)."""
    env = os.environ.get("H5FLOW_API_TEST")
    if env:
        path = Path(env)
    else:
        prefix = os.environ.get("H5FLOW_HDF5_DIR")
        if not prefix:
            raise ConformanceError(
                "H5FLOW_HDF5_DIR is not set: run `make setup` and `source build/stack.env` first"
            )
        path = Path(prefix) / "libexec" / "h5_api_test"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ConformanceError(
            f"HDF5's API test executable {path} does not exist: the dependency cache predates it. "
            "Run `make setup` (it builds h5_api_test together with HDF5) and `source build/stack.env`"
        )
    return path


def connector_string(connector: str) -> str | None:
    """The ``HDF5_VOL_CONNECTOR`` value for ``connector`` (``None``: native, the variable unset).

    ``connector`` is a built-in name (``native``, ``pass_through``), a plugin's name (for example
    ``h5flow_log``) or a full connector string with its info (``"name info..."``).
    """
    name = connector.strip()
    if not name:
        raise ConformanceError("empty connector name; use 'native', 'pass_through' or a plugin's name")
    return BUILTIN_CONNECTORS.get(name, name)


def _check_plugin(connector: str, plugin_dirs: list[Path]) -> None:
    """Fail early, with the places looked at, if a plugin connector is not on the plugin path."""
    name = connector.split()[0]
    if name in BUILTIN_CONNECTORS:
        return
    from h5flow import connectors

    found = {p.name for p in connectors.scan(plugin_dirs) if p.plugin_type == "vol"}
    if name not in found:
        dirs = ", ".join(str(d) for d in plugin_dirs) or "(none)"
        raise ConformanceError(
            f"no VOL connector named {name!r} on the plugin path ({dirs}); connectors there: "
            f"{sorted(found) or 'none'}. Build it (`cmake --build build/native`) or set HDF5_PLUGIN_PATH"
        )


def group_env(connector: str, plugin_dirs: list[Path]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    env.pop("HDF5_DRIVER", None)
    conn = connector_string(connector)
    if conn is not None:
        env["HDF5_VOL_CONNECTOR"] = conn
    env["HDF5_PLUGIN_PATH"] = os.pathsep.join(str(d) for d in plugin_dirs)
    prefix = os.environ.get("H5FLOW_HDF5_DIR")
    if prefix:
        lib = str(Path(prefix) / "lib")
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


# ---- parsing h5_api_test's output -------------------------------------------------------------------


def _split_testing_line(rest: str) -> tuple[str, str | None, str]:
    """``<name><padding>[status]`` → name, status (or ``None``), whatever else was printed on the line."""
    status = None
    end = _STATUS_AT_END.search(rest)
    if end:
        status = _STATUS[next(g for g in end.groups() if g)]
        rest = rest[: end.start()]
    extra = ""
    diag = re.search(r"\S+-DIAG: ", rest)  # an error stack (HDF5's or a connector's) before the verdict
    if diag:
        rest, extra = rest[: diag.start()], rest[diag.start():]
    parts = re.split(r"\s{2,}", rest.strip(), maxsplit=1)  # %-62s padding ends the name
    if len(parts) > 1:
        extra = (parts[1] + " " + extra).strip()
    return parts[0].strip(), status, extra


@dataclass
class ParsedOutput:
    tests: list[TestOutcome]
    summary: dict[str, int] | None  # HDF5's summary lines; None if the process did not get there
    pending: str | None  # the test that started and got no verdict (where a crash happened)
    stray: list[str]  # verdicts printed outside any test (the suite has a few double PASSED())


def parse_output(text: str) -> ParsedOutput:
    """Per-test outcomes of one h5_api_test run, from its output.

    A test prints ``Testing <name>`` (padded to 62 columns), then ``PASSED``, ``*FAILED*`` or ``-SKIP-``
    at the end of that line or, when the test printed something first (an error stack), on a later
    line. A multi-part test prints a ``Testing <name>`` header that gets no verdict, then its parts as
    ``  Testing <part>``; parts are named ``<test> / <part>`` here. A part that ends without a verdict
    (HDF5's PART_EMPTY) is recorded as ``unreported``. A failure's ``detail`` is what was printed
    between its start and the next test.
    """
    tests: list[TestOutcome] = []
    pending: str | None = None  # test started, verdict not seen yet
    pending_top = False  # pending is a top-level "Testing" line (could be a multi-part header)
    header: str | None = None
    detail: list[str] = []
    summary: dict[str, int] = {}
    stray: list[str] = []
    attach = True  # lines after a failed verdict still explain that failure

    def close(status: str) -> None:
        nonlocal pending, detail
        assert pending is not None
        tests.append(TestOutcome(pending, status, "\n".join(detail).strip() if status == "failed" else ""))
        pending, detail = None, []

    # Progress counters are printed with "\r" ("\r 1/100\r 2/100 ..."): keep them on their line.
    for line in text.replace("\r", " ").split("\n"):
        m = _SUMMARY.match(line)
        if m:
            key = {"passed": "passed", "did not pass": "failed", "were skipped": "skipped"}[m["what"]]
            summary[key] = int(m["n"])
            summary["run"] = int(m["run"])
            continue
        m = _TESTING.match(line)
        if m:
            attach = True
            sub = bool(m["indent"])
            name, status, extra = _split_testing_line(m["rest"])
            if pending is not None:
                if sub and pending_top and not detail:
                    header, pending, detail = pending, None, []  # it was a multi-part header
                else:
                    close("unreported")
            if not sub:
                header = None
            pending = f"{header} / {name}" if (sub and header) else name
            pending_top = not sub
            if extra:
                detail.append(extra)
            if status:
                close(status)
            continue
        word = line.strip()
        if pending is None:
            if word in _STATUS:
                stray.append(_STATUS[word])
            # What a test prints after H5_FAILED() ("    couldn't open group") explains the failure.
            elif word.startswith(("Cleaning up testing files", "*****")):
                attach = False  # the suite's epilogue or a group banner: explains no test
            elif word and attach and tests and tests[-1].status == "failed":
                tests[-1].detail = (tests[-1].detail + "\n" + word).strip()
            continue
        end = _STATUS_AT_END.search(" " + word) if word not in _STATUS else None
        if word in _STATUS:
            close(_STATUS[word])
        elif end:
            detail.append(word[: len(word) + 1 - len(end.group(0))].strip())
            close(_STATUS[next(g for g in end.groups() if g)])
        elif word:
            detail.append(word)
    complete = {"run", "passed", "failed", "skipped"} <= summary.keys()
    return ParsedOutput(tests, summary if complete else None, pending, stray)


_STACK_LINE = re.compile(r"^(\S+-DIAG: |#\d{3}:|major:|minor:)")  # HDF5 or a connector error stack


_AT_LINE = re.compile(r"^at \S+:\d+ in \w+\(\)\.\.\.$")  # h5test.h's AT(): where, not why


def failure_cause(t: TestOutcome) -> str:
    """The line a failed test printed to say why: its last line that is not part of an HDF5 error
    stack nor a bare source location, else the last HDF5 error (the innermost), else the location."""
    lines = [ln.strip() for ln in t.detail.splitlines() if ln.strip()]
    said = [ln for ln in lines if not _STACK_LINE.match(ln) and not _AT_LINE.match(ln)]
    if said:
        return said[-1]
    stack = [ln for ln in lines if re.match(r"^#\d{3}:", ln)]
    if stack:
        return re.sub(r"^#\d{3}: \S+ line \d+ in ", "", stack[-1])
    return lines[-1] if lines else "(no message)"


def failures_by_cause(results: Iterable[GroupResult]) -> dict[str, list[str]]:
    """``cause → ["group: test", ...]``, most frequent cause first."""
    causes: dict[str, list[str]] = {}
    for r in results:
        for t in r.failures():
            causes.setdefault(failure_cause(t), []).append(f"{r.group}: {t.name}")
    return dict(sorted(causes.items(), key=lambda kv: -len(kv[1])))


# ---- running ----------------------------------------------------------------------------------------


def run_group(
    group: str,
    connector: str = "native",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    plugin_dirs: list[Path] | None = None,
    executable: Path | None = None,
    keep_output: Path | None = None,
) -> GroupResult:
    """Run one test group of ``h5_api_test`` against ``connector`` in a scratch directory."""
    if group not in ALL_GROUPS:
        raise ConformanceError(f"unknown API test group {group!r}; the groups are: {', '.join(ALL_GROUPS)}")
    from h5flow import connectors

    dirs = plugin_dirs if plugin_dirs is not None else connectors.plugin_path()
    _check_plugin(connector, dirs)
    exe = executable or api_test_executable()
    env = group_env(connector, dirs)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"h5flow-conf-{group}-") as scratch:
        proc = subprocess.Popen([str(exe), group], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                errors="replace", start_new_session=True)
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    seconds = time.monotonic() - t0
    if keep_output is not None:
        keep_output.mkdir(parents=True, exist_ok=True)
        (keep_output / f"{connector.split()[0]}-{group}.log").write_text(out)
    parsed = parse_output(out)
    tests, summary, unfinished = parsed.tests, parsed.summary, parsed.pending
    rc = proc.returncode
    problem = ""
    if timed_out:
        problem = f"killed after {timeout:.0f} s" + (f" in test {unfinished!r}" if unfinished else "")
    elif rc is not None and rc < 0:
        problem = f"died of signal {signal.Signals(-rc).name}" + (f" in test {unfinished!r}" if unfinished else "")
    elif summary is None:
        last = "\n".join(out.strip().splitlines()[-5:])
        problem = f"exited with status {rc} before HDF5's summary; last output:\n{last}"
    if unfinished and problem and not any(t.name == unfinished for t in tests):
        tests.append(TestOutcome(unfinished, "failed", problem))
    return GroupResult(group=group, connector=connector, complete=not problem, returncode=rc,
                       seconds=round(seconds, 3), tests=tests, problem=problem, hdf5_summary=summary or {},
                       stray_verdicts=parsed.stray,
                       run=len(tests), passed=sum(t.status == "passed" for t in tests),
                       failed=sum(t.status == "failed" for t in tests),
                       skipped=sum(t.status == "skipped" for t in tests))


def run(
    connector: str = "native",
    groups: Iterable[str] = DEFAULT_GROUPS,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    plugin_dirs: list[Path] | None = None,
    on_group: Callable[[GroupResult], None] | None = None,
    keep_output: Path | None = None,
) -> list[GroupResult]:
    """Run several groups against ``connector``, one process per group."""
    groups = list(groups)
    for g in groups:
        if g not in ALL_GROUPS:
            raise ConformanceError(f"unknown API test group {g!r}; the groups are: {', '.join(ALL_GROUPS)}")
    exe = api_test_executable()
    results = []
    for g in groups:
        r = run_group(g, connector, timeout=timeout, plugin_dirs=plugin_dirs, executable=exe,
                      keep_output=keep_output)
        results.append(r)
        if on_group is not None:
            on_group(r)
    return results


# ---- the recorded expectations ----------------------------------------------------------------------


def default_record_path() -> Path:
    from h5flow._paths import project_root

    root = project_root()
    if root is None:
        raise ConformanceError("not running from a source checkout: give the record file explicitly")
    return root / "tests" / "data" / "conformance.json"


def load_record(path: Path) -> dict:
    if not path.is_file():
        return {"about": _RECORD_ABOUT, "connectors": {}}
    return json.loads(path.read_text())


_RECORD_ABOUT = (
    "Counts of HDF5 1.14.5's VOL API tests (h5_api_test) per connector and group, recorded with "
    "`h5flow conformance --connector NAME --record`. tests/test_conformance.py fails if a group passes "
    "fewer tests than recorded here. Failed test names are listed for docs/CONFORMANCE.md."
)


def record(results: list[GroupResult], path: Path) -> dict:
    """Store ``results`` (one connector) in the record file, replacing that connector's groups run."""
    data = load_record(path)
    data["about"] = _RECORD_ABOUT
    if not results:
        return data
    conn = results[0].connector
    entry = data["connectors"].setdefault(conn, {})
    for r in results:
        entry[r.group] = dict(r.counts(), complete=r.complete, failed_tests=[t.name for t in r.failures()])
        if r.problem:
            entry[r.group]["problem"] = r.problem.splitlines()[0]
    data["connectors"] = {k: data["connectors"][k] for k in sorted(data["connectors"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return data


def compare(results: list[GroupResult], expected: dict) -> list[str]:
    """Regressions of ``results`` against the recorded ``expected`` entry of one connector."""
    problems = []
    for r in results:
        want = expected.get(r.group)
        if want is None:
            continue
        if r.passed < want["passed"]:
            known = set(want.get("failed_tests", []))
            lost = sorted(t.name for t in r.tests if t.status in ("failed", "unreported") and t.name not in known)
            problems.append(
                f"{r.connector}/{r.group}: {r.passed} passed, recorded {want['passed']}"
                + (f" ({r.problem.splitlines()[0]})" if r.problem else "")
                + (f"; skipped {r.skipped}, recorded {want['skipped']}" if r.skipped != want["skipped"] else "")
                + (f"; newly failing: {lost[:10]}" if lost else "")
            )
    return problems


def to_json(results: list[GroupResult]) -> list[dict]:
    return [asdict(r) for r in results]
