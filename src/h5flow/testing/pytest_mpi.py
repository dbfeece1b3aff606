"""pytest plugin: run tests marked ``@pytest.mark.mpi(n=4)`` under ``mpiexec -n 4``.

A plain ``pytest`` run (the *parent*) collects everything. For an MPI-marked test it does not call the
test function itself: it launches ``mpiexec -n N python -m pytest <node id>`` (the *children*), where each
rank runs the test with ``MPI.COMM_WORLD``, and the parent passes only if **every** rank reports that the
test ran and passed. A rank that fails prints its report and aborts the job, so a failure never becomes a
hang; a job that still hangs is killed after the marker's ``timeout`` (seconds).

Marker arguments: ``n`` (ranks, default 4), ``env`` (extra environment for the children, for example
``HDF5_VOL_CONNECTOR``, which HDF5 reads once at start-up), ``timeout`` (default 240).

Fixtures: ``comm`` (``MPI.COMM_WORLD`` in a child), ``mpi_tmp_path`` (one directory shared by all ranks
of the job).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

CHILD_ENV = "H5FLOW_MPI_CHILD"
TMP_ENV = "H5FLOW_MPI_TMP"
RESULT_ENV = "H5FLOW_MPI_RESULTS"
IS_CHILD = os.environ.get(CHILD_ENV) == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "mpi(n=4, env=None, timeout=240): run the test on n MPI ranks under mpiexec"
    )
    if IS_CHILD and not config.option.basetemp:
        # A rank's own base directory under the job's shared one: pytest's numbered directories in the
        # user's temporary directory, made and cleaned by every rank (and every other pytest) at once, race
        # (an iterator of a directory removed meanwhile was left open: a ResourceWarning, an error under -W
        # error). `tmp_path` in a child is then the rank's own directory.
        rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or str(os.getpid())
        config.option.basetemp = str(Path(os.environ[TMP_ENV]) / f".pytest-rank-{rank}")


@pytest.fixture
def mpi_tmp_path(request: pytest.FixtureRequest) -> Path:
    """A directory every rank of the MPI job sees (the parent's ``tmp_path``).

    Children never touch pytest's own temporary-directory machinery: several ranks cleaning the same
    base directory at once would race.
    """
    if IS_CHILD:
        return Path(os.environ[TMP_ENV])
    return request.getfixturevalue("tmp_path")


@pytest.fixture
def comm():  # noqa: ANN201 - mpi4py.MPI.Comm, imported lazily
    """``MPI.COMM_WORLD`` on each rank of an MPI test."""
    if not IS_CHILD:
        return None  # the parent only launches the job
    from mpi4py import MPI

    return MPI.COMM_WORLD


def mpi_assert(comm, condition: bool, message: str) -> None:  # noqa: ANN001
    """Assert ``condition`` on every rank at once: all ranks fail together, none waits forever."""
    results = comm.allgather(bool(condition))
    if not all(results):
        bad = [r for r, ok in enumerate(results) if not ok]
        raise AssertionError(f"{message} (failed on ranks {bad})")


def _rank() -> int:
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


if IS_CHILD:

    def pytest_runtest_logreport(report: pytest.TestReport) -> None:
        results = os.environ.get(RESULT_ENV)
        if results is None:
            return
        rank = _rank()
        if report.failed:
            Path(results, f"rank-{rank}").write_text(f"failed in {report.when}\n")
            sys.stderr.write(f"\n===== rank {rank}: {report.nodeid} failed during {report.when} =====\n")
            sys.stderr.write(str(report.longrepr) + "\n")
            sys.stderr.flush()
            if report.when == "call":
                try:
                    from mpi4py import MPI

                    MPI.COMM_WORLD.Abort(1)
                except Exception:  # pragma: no cover - abort is best effort
                    traceback.print_exc()
        elif report.when == "call" and report.passed:
            Path(results, f"rank-{rank}").write_text("passed\n")
        elif report.skipped:
            Path(results, f"rank-{rank}").write_text("skipped\n")

else:

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
        marker = pyfuncitem.get_closest_marker("mpi")
        if marker is None:
            return None
        _launch(pyfuncitem, marker)
        return True


def _launch(item: pytest.Function, marker: pytest.Mark) -> None:
    n = int(marker.kwargs.get("n", 4))
    timeout = float(marker.kwargs.get("timeout", 240))
    shared = item.funcargs.get("mpi_tmp_path")
    own_shared = shared is None
    if own_shared:
        shared = Path(tempfile.mkdtemp(prefix="h5flow-mpi-"))
    results = Path(tempfile.mkdtemp(prefix="h5flow-mpi-results-"))
    try:
        _run_job(item, n, timeout, marker, Path(shared), results)
    finally:  # every test left two directories in /tmp behind (hundreds per `make test`)
        shutil.rmtree(results, ignore_errors=True)
        if own_shared:
            shutil.rmtree(shared, ignore_errors=True)


def _run_job(item: pytest.Function, n: int, timeout: float, marker: pytest.Mark, shared: Path,
             results: Path) -> None:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (marker.kwargs.get("env") or {}).items()})
    # the children load no plugin by entry point but pytest-timeout: every rank of every job would otherwise
    # import xdist and hypothesis's plugin first (about 1 s of CPU per rank); a test module that uses
    # hypothesis imports it itself
    env.update({CHILD_ENV: "1", TMP_ENV: str(shared), RESULT_ENV: str(results), "PYTHONFAULTHANDLER": "1",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    cmd = ["mpiexec", "-n", str(n), sys.executable, "-m", "pytest", "-q", "--no-header", "-p", "no:cacheprovider",
           "-p", "pytest_timeout", "-o", "addopts=", "-W", "error", "--timeout", str(int(timeout)), item.nodeid]
    proc = subprocess.Popen(cmd, cwd=item.config.rootpath, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"MPI job hung for {timeout + 30:.0f}s and was killed: {' '.join(cmd)}\n{out[-6000:]}",
                    pytrace=False)
    outcomes = {p.name: p.read_text().strip() for p in results.iterdir()}
    expected = {f"rank-{r}" for r in range(n)}
    passed = {k for k, v in outcomes.items() if v == "passed"}
    if proc.returncode != 0 or passed != expected:
        missing = sorted(expected - set(outcomes))
        pytest.fail(
            f"MPI test on {n} ranks: exit code {proc.returncode}, outcomes {dict(sorted(outcomes.items()))}"
            + (f", no report from {missing}" if missing else "")
            + f"\ncommand: {' '.join(cmd)}\n--- output (last 6000 chars) ---\n{out[-6000:]}",
            pytrace=False,
        )
