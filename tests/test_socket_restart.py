"""A socket consumer restarted more than 1.5 heartbeats after it died (issue 11): its group was declared lost
and the producer dropped the steps it had not taken. That is the memory transport's semantics, but it is never
silent: the producer's error and exit status and the restarted consumer name the dropped steps and say why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ACTORS = str(Path(__file__).with_name("stream_actors.py"))


def _start(role: str, config: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, ACTORS, role, json.dumps(config), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(proc: subprocess.Popen, prefix: str, timeout: float, lines: list[str]) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"no {prefix!r} line within {timeout} s; got {lines[-10:]}")


def _kill(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()


def _steps(out: str, prefix: str) -> list[int]:
    line = next(line for line in out.splitlines() if line.startswith(prefix + " ") or line == prefix)
    return [int(s) for s in line[len(prefix):].strip().split(",") if s]


def test_consumer_restarted_late_while_the_producer_runs_is_told_what_it_lost(tmp_path: Path) -> None:
    heartbeat = 0.5
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": heartbeat, "dead_consumer": "drop"}
    producer = _start("produce", config, "--steps", "16", "--sleep", "0.4")
    first = _start("consume", config, "--check", "--hold-at", "2", "--timeout", "30")
    lines: list[str] = []
    try:
        _, _, pid = _wait_for(first, "HOLDING", 60, lines).split()
        os.kill(int(pid), signal.SIGKILL)  # dies holding step 2
        first.communicate(timeout=30)
        time.sleep(4 * heartbeat)  # > 1.5 heartbeats: the group is declared lost, its steps dropped
        second = _start("consume", config, "--check", "--timeout", "30")
        out2, err2 = second.communicate(timeout=90)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(producer, first)
    taken1 = [int(line.split()[1]) for line in lines if line.startswith("CHECKED")]
    taken2 = [int(line.split()[1]) for line in out2.splitlines() if line.startswith("CHECKED")]
    lost = _steps(out2, "LOST")
    assert taken1 == [0, 1], lines
    assert "STATUS end_of_stream" in out2, out2 + err2
    # every step exactly once: taken by the first consumer, by the second, or named as dropped
    assert sorted(taken1 + lost + taken2) == list(range(16)), (taken1, lost, taken2)
    assert lost and lost[0] == 2 and taken2, (lost, taken2)
    assert "were dropped for consumer group 'default' without being taken" in err2, err2
    assert "declared lost" in err2 and "no heartbeat for" in err2, err2
    assert producer.returncode == 1, err
    from h5flow.transports.socket.contact import step_ranges

    assert f"steps {step_ranges(lost)} (consumer group 'default' declared lost" in err, err


def test_consumer_restarted_after_the_producer_ended_is_an_error_naming_the_dropped_steps(tmp_path: Path) -> None:
    heartbeat = 0.5
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": heartbeat, "dead_consumer": "drop"}
    producer = _start("produce", config, "--steps", "6", "--sleep", "0.05")
    first = _start("consume", config, "--check", "--hold-at", "1", "--timeout", "30")
    lines: list[str] = []
    try:
        _, _, pid = _wait_for(first, "HOLDING", 60, lines).split()
        os.kill(int(pid), signal.SIGKILL)
        first.communicate(timeout=30)
        out, err = producer.communicate(timeout=60)
        t0 = time.time()
        second = _start("consume", config, "--check", "--timeout", "20")
        out2, err2 = second.communicate(timeout=60)
        took = time.time() - t0
    finally:
        _kill(producer, first)
    assert producer.returncode == 1 and "steps 1-5 (consumer group 'default' declared lost" in err, err
    # not "no stream yet" after its whole timeout: at once, which steps its group lost and why
    assert "STATUS error" in out2 and "steps 1-5" in out2 and "while this consumer group was away" in out2, out2
    assert _steps(out2, "LOST") == [1, 2, 3, 4, 5], out2
    assert took < 15, took
