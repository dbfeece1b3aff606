"""h5py's own test suite (``pytest --pyargs h5py``) against a VOL connector, one test file per process.

Each of h5py's test files runs in its own ``python -m pytest`` process with a timeout, in a scratch
directory (also its TMPDIR, where h5py's tests create their files), with an empty pytest configuration
(the project's ``-W error`` and ``--strict-markers`` fail 7 of h5py's tests even on native; given through
PYTEST_ADDOPTS so that the pytest processes h5py's tests start themselves get it too) and the
connector chosen by the environment: ``native`` (HDF5_VOL_CONNECTOR unset) or a plugin's name from
h5flow's plugin directory. A file whose process dies or hangs is reported as crashed (with the signal
or the timeout and the test it was in); the verdicts it printed before still count.

Failures are grouped by cause with CAUSES below: the first (test-id pattern, message pattern) pair that
matches names the cause; ``native_only`` causes are tests that inspect native-file internals (or read
native HDF5 files shipped with h5py), excluded from the "passes through the connector" ratio.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from h5flow._paths import default_plugin_dir

DEFAULT_TIMEOUT = 300.0

# (cause, native_only, test-id regex, message regex): first match wins; data, not code.
CAUSES: list[tuple[str, bool, str, str]] = [
    ("fails natively too (run as root: permissions not enforced; h5py's MPI tests need mpiexec)",
     False, r"test_append_permissions|TestMPI", r""),
    ("native-only: native file properties (a userblock written through the file's name, page buffering, "
     "file space strategy) and native-only calls on an in-memory container (the core driver without a "
     "backing store: file image, VFD handle)",
     True,
     r"TestUserblock|TestPageBuffering|TestSpaceStrategy|test_in_memory|test_descriptor_core",
     r"file driver|core driver without a backing store|userblock|page buffer|free space inside"),
    ("native-only: native file-format internals (storage offsets and alignment, VFD handle, metadata cache)",
     True,
     r"TestFileAlignment|TestFileMetaBlockSize|TestFileID|TestCacheConfig",
     r"native HDF5 only|'dataset optional' method"),
    ("h5py gives no chunk offset for a chunk without a file address (a container's chunks have none: "
     "HADDR_UNDEF; docs/FORMAT.md \"Direct chunk I/O\")", False,
     r"test_h5d_direct_chunk\.py::TestReadDirectChunkToOut::test_compressed_data", r""),
    ("native-only: treats the file as one regular file (a container is a directory: os.path.isfile in "
     "h5py.is_hdf5, open() on its name)", True, r"test_is_hdf5", r"IsADirectoryError"),
    ("virtual datasets (refused)", False, r"", r"virtual datasets"),
    ("external storage (refused)", False, r"", r"external storage"),
    ("hard links (refused: an object copy that meets its object again inside itself, or a hard link to the "
     "root group inside a copied group)", False, r"", r"hard link"),
    ("h5py cannot read H5T_STD_REF attributes (dimension scales on non-native connectors)", False, r"",
     r"Unknown reference type"),
]
OTHER = "other (see --failures)"


@dataclass
class FileResult:
    file: str
    connector: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    errors: int = 0
    crashed: bool = False
    problem: str = ""
    seconds: float = 0.0
    tests: dict[str, str] = field(default_factory=dict)    # test id -> passed/failed/skipped/xfail/error/crashed
    messages: dict[str, str] = field(default_factory=dict)  # failed test id -> message


def h5py_tests_dir() -> Path:
    import h5py

    return Path(h5py.__file__).resolve().parent / "tests"


def test_files() -> list[str]:
    """h5py's test files, relative to its tests directory."""
    root = h5py_tests_dir()
    return sorted(str(p.relative_to(root)) for p in root.rglob("test_*.py"))


def _env(connector: str, scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH", "PYTEST_ADDOPTS", "H5FLOW_LOG_VERIFY"):
        env.pop(k, None)
    if connector != "native":
        env["HDF5_VOL_CONNECTOR"] = connector
        # H5FLOW_LOG_PLUGIN_DIR: another build (as for tests/test_vol_h5flow_log.py)
        env["HDF5_PLUGIN_PATH"] = os.environ.get("H5FLOW_LOG_PLUGIN_DIR") or str(default_plugin_dir())
    env["TMPDIR"] = str(scratch)
    env["COLUMNS"] = "1000"  # pytest's short summary keeps the whole message
    return env


_LINE = re.compile(r"^(\S*::.+?) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)\b")
_SHORT = re.compile(r"^(FAILED|ERROR) (\S*::.+?)(?: - (.*))?$")
_START = re.compile(r"^(\S*::.+?) ?$")


def parse(out: str, res: FileResult) -> None:
    last_started = None
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            tid, st = m.group(1), m.group(2)
            st = {"XPASS": "passed", "XFAIL": "xfail"}.get(st, st.lower())
            prev = res.tests.get(tid)
            if prev is None or st in ("failed", "error"):  # a teardown error after a pass counts as error
                res.tests[tid] = st
            continue
        m = _SHORT.match(line)
        if m:
            res.messages.setdefault(m.group(2), (m.group(3) or "").strip())
            continue
        m = _START.match(line)
        if m:
            last_started = m.group(1)
    if res.crashed and last_started and last_started not in res.tests:
        res.tests[last_started] = "crashed"
    counts = {"passed": 0, "failed": 0, "skipped": 0, "xfail": 0, "error": 0, "crashed": 0}
    for st in res.tests.values():
        counts[st] = counts.get(st, 0) + 1
    res.passed, res.failed, res.skipped = counts["passed"], counts["failed"] + counts["crashed"], counts["skipped"]
    res.xfailed, res.errors = counts["xfail"], counts["error"]


def run_file(rel: str, connector: str, timeout: float = DEFAULT_TIMEOUT) -> FileResult:
    res = FileResult(rel, connector)
    path = h5py_tests_dir() / rel
    with tempfile.TemporaryDirectory(prefix="h5py-suite-") as tmp:
        scratch = Path(tmp)
        (scratch / "pytest.ini").write_text("[pytest]\n")
        env = _env(connector, scratch)
        # also for the pytest processes h5py's own tests start (common.insubprocess): without it they find
        # the project's configuration above the venv and fail on its --strict-markers
        env["PYTEST_ADDOPTS"] = f"-c {scratch / 'pytest.ini'} --rootdir {scratch} -p no:cacheprovider"
        # h5py's tests use no plugin installed beside pytest (xdist, hypothesis's, pytest-timeout): each of
        # these processes would import them first
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "--tb=line", "-o", "console_output_style=classic",
               str(path)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            res.crashed, res.problem = True, f"hung: killed after {timeout:.0f} s"
        res.seconds = time.monotonic() - t0
        if proc.returncode is not None and proc.returncode < 0 and not res.crashed:
            res.crashed = True
            res.problem = f"crashed: {signal.Signals(-proc.returncode).name}"
        elif proc.returncode not in (0, 1, 5) and not res.crashed:  # 5: nothing collected
            res.crashed = True
            res.problem = f"pytest exited with status {proc.returncode}: " + out.strip().splitlines()[-1][:200] \
                if out.strip() else f"pytest exited with status {proc.returncode}"
    parse(out, res)
    return res


def classify(test_id: str, message: str) -> tuple[str, bool]:
    for cause, native_only, id_re, msg_re in CAUSES:
        if (id_re and re.search(id_re, test_id)) or (msg_re and re.search(msg_re, message or "")):
            return cause, native_only
    return OTHER, False


def summarize(native: list[FileResult], conn: list[FileResult]) -> dict:
    """Totals per connector, the failures of `conn` grouped by cause, and the pass ratio of the tests
    native passes (without the native-only ones)."""
    def totals(rs: list[FileResult]) -> dict:
        return {k: sum(getattr(r, k) for r in rs) for k in ("passed", "failed", "skipped", "xfailed", "errors")} | {
            "crashed_files": sorted(r.file for r in rs if r.crashed)}

    def tid(r: FileResult, t: str) -> str:
        return f"{r.file}{t}" if t.startswith("::") else t

    nat_pass = {tid(r, t) for r in native for t, s in r.tests.items() if s == "passed"}
    got = {tid(r, t): s for r in conn for t, s in r.tests.items()}
    msgs = {tid(r, t): m for r in conn for t, m in r.messages.items()}
    causes: dict[str, list[str]] = {}
    excluded = set()
    for t, s in sorted(got.items()):
        if s in ("failed", "error", "crashed"):
            cause, native_only = classify(t, msgs.get(t, ""))
            causes.setdefault(cause, []).append(t)
            if native_only:
                excluded.add(t)
    considered = nat_pass - excluded
    both = {t for t in considered if got.get(t) == "passed"}
    both_all = {t for t in nat_pass if got.get(t) == "passed"}
    return {"native": totals(native), "connector": totals(conn),
            "native_passed_considered": len(considered), "also_pass": len(both),
            "ratio": round(len(both) / len(considered), 4) if considered else 0.0,
            "native_passed": len(nat_pass), "also_pass_all": len(both_all),
            "ratio_all": round(len(both_all) / len(nat_pass), 4) if nat_pass else 0.0,
            "excluded_native_only": len(excluded),
            "failures_by_cause": {k: sorted(v) for k, v in sorted(causes.items(), key=lambda kv: -len(kv[1]))}}
