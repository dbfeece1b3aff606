"""Crashes: a producer rank killed with SIGKILL mid-stream, a consumer killed while holding a step.

The hdf5 stream keeps a killed consumer's steps on disk and lets it resume; the socket stream holds steps
in the producer's memory only, so it drops a consumer group that stops beating instead of stalling.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h5flow.testing.matrix import TransportCase, params
from h5flow.transports.hdf5.staging import read_index, staging_dir

ACTORS = str(Path(__file__).with_name("stream_actors.py"))


def _start(role: str, config: dict, *args: str, ranks: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, ACTORS, role, json.dumps(config), *args]
    if ranks is not None:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _read_until(proc: subprocess.Popen, prefix: str, timeout: float, lines: list[str]) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} line within {timeout} s; got {lines[-10:]}")


def _cleanup(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()


def _producer_pid(transport: str, filename: str, rank: int) -> int:
    if transport == "hdf5":
        return int((staging_dir(filename) / "hb" / str(rank)).read_text().split()[1])
    from h5flow.transports.socket.contact import Contact, contact_path

    return Contact.load(contact_path(filename)).ranks[rank].pid


@pytest.mark.parametrize("tc", params(["hdf5-n-n", "hdf5-log", "socket"]))
def test_killed_producer_rank_is_an_error_within_two_heartbeats(tmp_path: Path, tc: TransportCase) -> None:
    heartbeat = 1.0
    transport = tc.type
    config = {"filename": str(tmp_path / "s"), **tc.keywords(heartbeat)}
    producer = _start("produce", config, "--steps", "100000", "--shape", "24", "24", "24", ranks=2)
    consumer = _start("consume", config, "--check", "--shape", "24", "24", "24", "--timeout", "60")
    lines: list[str] = []
    try:
        for _ in range(3):
            _read_until(consumer, "CHECKED", 60, lines)
        pid = _producer_pid(transport, config["filename"], 1)
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        status = _read_until(consumer, "STATUS", 30, lines)
        out, err = consumer.communicate(timeout=30)
    finally:
        _cleanup(producer, consumer)
    _, what, at, *reason = status.split()
    assert what == "error", status
    assert "producer rank" in " ".join(reason) and "lost" in " ".join(reason), status
    detected = float(at) - killed_at
    assert detected < 2 * heartbeat, f"producer loss reported after {detected:.2f} s (heartbeat {heartbeat} s)"

    # Every step the consumer was shown was complete: it checked each one against the oscillator.
    steps = [int(line.split()[1]) for line in lines if line.startswith("STEP")]
    checked = [int(line.split()[1]) for line in lines if line.startswith("CHECKED")]
    # (socket: the step being read when its producer rank died fails with that error instead)
    assert steps and (checked == steps or transport == "socket" and checked == steps[:-1]
                      and "lost while sequence" in status), (steps, checked, status)
    if transport != "hdf5":
        return
    # Nothing half-written was published: the step the crash interrupted (if any) is only a hidden
    # temporary directory, never in the index.
    root = staging_dir(config["filename"])
    published = {e.step for e in read_index(root / "index") if e.kind == "P"}
    partial = [int(p.name.split("-")[1].split(".")[0]) for p in root.glob(".step-*.tmp")]
    assert not published & set(partial)
    for step in published:
        d = root / f"step-{step:09d}"
        assert not d.exists() or (d / "meta.json").exists() and (d / "data.h5").exists()


def test_restarted_consumer_resumes_at_its_first_unreleased_step(tmp_path: Path) -> None:
    config = {"filename": str(tmp_path / "s"), "heartbeat": 1.0}
    producer = _start("produce", config, "--steps", "8")
    first = _start("consume", config, "--check", "--hold-at", "3", "--timeout", "30")
    lines: list[str] = []
    try:
        _, _, pid = _read_until(first, "HOLDING", 60, lines).split()
        os.kill(int(pid), signal.SIGKILL)  # dies holding step 3, never released
        first.communicate(timeout=30)
        assert producer.wait(timeout=60) == 0
        second = _start("consume", config, "--check", "--timeout", "30")
        out, err = second.communicate(timeout=60)
    finally:
        _cleanup(producer, first)
    assert [int(line.split()[1]) for line in lines if line.startswith("CHECKED")] == [0, 1, 2]
    steps = [int(line.split()[1]) for line in out.splitlines() if line.startswith("STEP")]
    assert steps == [3, 4, 5, 6, 7], out + err
    assert "STATUS end_of_stream" in out, out + err
    # released steps were garbage-collected; nothing is left once the restarted consumer finished
    assert not list(staging_dir(config["filename"]).glob("step-*"))


@pytest.mark.mpi(n=1)
def test_subfiling_stream_on_one_consumer_rank_is_a_clear_error(comm, mpi_tmp_path: Path) -> None:
    """HDF5 1.14.5's subfiling VFD hangs opening a file on one rank: the reader refuses instead."""
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader
    from h5flow.transports.hdf5.staging import Staging, StreamInfo, append_line

    cfg = TransportConfig(filename=str(mpi_tmp_path / "s"))
    staging = Staging(cfg.filename)
    staging.reset()
    (staging.hb / "0").write_text("host 1\n")
    staging.announce(StreamInfo("run", 1, "n-1", "subfiling", 60.0, time.time()))
    (staging.step_path(0)).mkdir()
    (staging.step_path(0) / "meta.json").write_text('{"step":0,"time":0.0,"producers":1,"meshes":{}}')
    append_line(staging.index, f"P 0 0 0.0 0 {time.time()!r}")
    res = open_reader(comm, cfg).begin_step(5.0)
    assert res.status is StepStatus.ERROR
    assert "subfiling" in res.reason and "2 or more consumer ranks" in res.reason


@pytest.mark.parametrize("policy", ["block", "discard"])
def test_socket_producer_outlives_a_killed_consumer(tmp_path: Path, policy: str) -> None:
    """A consumer killed while it holds a step, dead_consumer="drop": the producer drops its group after 1.5
    heartbeats and goes on (block: it stops waiting for it; discard: it stops dropping), then ends, naming the
    dropped steps in its error and exit status."""
    heartbeat = 0.5
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": heartbeat, "queue_limit": 2,
              "queue_policy": policy, "dead_consumer": "drop"}
    producer = _start("produce", config, "--steps", "12", "--sleep", "0.05")
    # steps 0 and 1 fill the empty queue, so they are published (and held) under either policy
    consumer = _start("consume", config, "--check", "--hold-at", "1", "--timeout", "30")
    lines: list[str] = []
    try:
        _, _, pid = _read_until(consumer, "HOLDING", 60, lines).split()
        os.kill(int(pid), signal.SIGKILL)
        killed_at = time.time()
        out, err = producer.communicate(timeout=30)
        ended_at = time.time()
    finally:
        _cleanup(producer, consumer)
    # the steps the dead consumer never took are not silently lost: the producer names them and fails
    assert producer.returncode == 1, out + err
    assert "consumer group 'default' lost" in err, err
    assert "were dropped for consumer group 'default' without being taken: steps 1" in err, err
    published = [line.split() for line in out.splitlines() if line.startswith("PUBLISHED")]
    assert [int(p[1]) for p in published] == list(range(12)), out
    # after the loss nothing waits for the dead consumer (a stall would last until the 30 s timeout above);
    # the bounds are loose only because the test machine may be heavily loaded
    assert ended_at - killed_at < 10.0, (ended_at - killed_at, err)
    assert max(float(p[3]) for p in published) < 3 * heartbeat + 3.0, out
    from h5flow.transports.socket.contact import contact_path

    assert not contact_path(config["filename"]).exists(), "a producer that ended must remove its contact file"
