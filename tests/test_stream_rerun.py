"""Re-running a stream on a used name (issue 13 §5): a second run must be read, whichever side starts first;
a consumer never reports success on a run it did not read."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

PRODUCER = """
import sys, numpy as np, h5flow
from mpi4py import MPI
name, kind, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
with h5flow.open(name, "w", comm=MPI.COMM_WORLD, type=kind, heartbeat=1.0) as s:
    for t in range(3):
        with s.step(t) as st:
            st.write("x", np.full(4, 100.0 * run + t))
"""

CONSUMER = """
import sys, h5flow
from mpi4py import MPI
name, kind = sys.argv[1], sys.argv[2]
with h5flow.open(name, "r", comm=MPI.COMM_WORLD, type=kind) as s:
    for st in s.steps(timeout=float(sys.argv[3])):
        print("got", st.step, float(st.read("x").array()[0]), flush=True)
print("status", s.status, flush=True)
"""


def _start(tmp: Path, script: str, *args: str) -> subprocess.Popen:
    path = tmp / ("producer.py" if script is PRODUCER else "consumer.py")
    path.write_text(script)
    return subprocess.Popen(["mpiexec", "-n", "1", sys.executable, str(path), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _done(p: subprocess.Popen, what: str) -> str:
    try:
        out = p.communicate(timeout=90)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        out = p.communicate()[0]
        pytest.fail(f"{what} hung:\n{out}")
    assert p.returncode == 0, f"{what} failed:\n{out}"
    return out


def _values(out: str) -> list[float]:
    return [float(line.split()[2]) for line in out.splitlines() if line.startswith("got ")]


def _wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["hdf5", "socket"])
def test_rerun_consumer_first_then_producer_first(tmp_path: Path, kind: str) -> None:
    name = str(tmp_path / "stream")
    # run 1: both sides, in the usual order
    c = _start(tmp_path, CONSUMER, name, kind, "60")
    _done(_start(tmp_path, PRODUCER, name, kind, "1"), "producer run 1")
    assert _values(_done(c, "consumer run 1")) == [100.0, 101.0, 102.0]
    # run 2, consumer first: it must not report the finished run 1 as its stream, but follow run 2
    c = _start(tmp_path, CONSUMER, name, kind, "60")
    time.sleep(1.5)
    assert c.poll() is None, f"the consumer ended on the finished run 1:\n{c.communicate()[0]}"
    _done(_start(tmp_path, PRODUCER, name, kind, "2"), "producer run 2")
    out = _done(c, "consumer run 2")
    assert _values(out) == [200.0, 201.0, 202.0] and "status end_of_stream" in out, out
    # run 3, producer first
    p = _start(tmp_path, PRODUCER, name, kind, "3")
    if kind == "hdf5":
        _done(p, "producer run 3")  # finished before any consumer started: its steps wait on disk
    else:
        _wait_for(Path(name + ".socket.json"))
    out = _done(_start(tmp_path, CONSUMER, name, kind, "60"), "consumer run 3")
    assert _values(out) == [300.0, 301.0, 302.0], out
    if kind != "hdf5":
        _done(p, "producer run 3")


def test_rerun_consumer_alone_on_finished_run_does_not_succeed(tmp_path: Path) -> None:
    """With no new producer, a consumer of a run its group already read times out saying so (exit != 0)."""
    name = str(tmp_path / "stream")
    c = _start(tmp_path, CONSUMER, name, "hdf5", "60")
    _done(_start(tmp_path, PRODUCER, name, "hdf5", "1"), "producer")
    _done(c, "consumer")
    c = _start(tmp_path, CONSUMER, name, "hdf5", "1.5")
    out = c.communicate(timeout=60)[0]
    assert c.returncode != 0 and "status end_of_stream" not in out, out
    assert "a finished run" in out and "already read" in out, out
