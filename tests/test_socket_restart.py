"""A socket consumer restarted more than 1.5 heartbeats after it died (issue 11): its group was declared lost
and the producer dropped the steps it had not taken. That is the memory transport's semantics, but it is never
silent: the producer's error and exit status and the restarted consumer name the dropped steps and say why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

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


def _start_mpi(n: int, role: str, config: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["mpiexec", "-n", str(n), sys.executable, ACTORS, role, json.dumps(config), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _taken(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("CHECKED")]


class _RankZeroPinger(threading.Thread):
    """Keeps consumer group ``group`` alive on producer rank 0 only (what separate heartbeat timers on the
    producer ranks could do by themselves): PING to rank 0 every 0.1 s, none to the other ranks."""

    def __init__(self, filename: str, group: str) -> None:
        super().__init__(daemon=True)
        from h5flow.transports.socket.contact import Contact, contact_path

        self.contact = Contact.load(contact_path(filename))
        self.group = group
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        import zmq

        from h5flow.transports.socket import protocol as P

        ctx = zmq.Context()
        s = P.dealer(ctx, self.contact.ranks[0].reachable())
        while not self.halt.wait(0.1):
            s.send_multipart(P.request(self.contact.token.encode(), P.PING, group=self.group))
        s.close(0)
        ctx.term()


def test_producer_ranks_agree_on_a_group_alive_on_rank_0_only(tmp_path: Path) -> None:
    """2 producer ranks; the consumer dies holding step 2 while its group is kept alive on rank 0 only. A rank
    that decided alone would drop the group's steps while rank 0 kept them; the restarted consumer must
    resume at step 2 and get every step, none lost, none missed."""
    heartbeat = 0.5
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": heartbeat}
    producer = _start_mpi(2, "produce", config, "--steps", "12", "--sleep", "0.3")
    first = _start("consume", config, "--check", "--hold-at", "2", "--timeout", "30")
    lines: list[str] = []
    pinger = None
    try:
        _, _, pid = _wait_for(first, "HOLDING", 60, lines).split()
        pinger = _RankZeroPinger(config["filename"], "default")
        os.kill(int(pid), signal.SIGKILL)
        first.communicate(timeout=30)
        time.sleep(6 * heartbeat)  # rank 1 hears nothing from the group for 4 of its heartbeat limits
        second = _start("consume", config, "--check", "--timeout", "30")
        out2, err2 = second.communicate(timeout=90)
        pinger.halt.set()
        out, err = producer.communicate(timeout=60)
    finally:
        if pinger is not None:
            pinger.halt.set()
        _kill(producer, first)
    assert _taken("\n".join(lines)) == [0, 1], lines
    assert "STATUS end_of_stream" in out2, out2 + err2
    assert _taken(out2) == list(range(2, 12)), out2 + err2
    assert _steps(out2, "LOST") == [] and _steps(out2, "MISSED") == [], out2
    assert producer.returncode == 0, err


def test_consumer_that_closed_its_reader_and_restarts_resumes_at_the_next_step(tmp_path: Path) -> None:
    """A consumer that closes its reader (BYE; what Ctrl-C does through its ``with`` block) and is started again
    at once takes the stream up exactly where it left off."""
    heartbeat = 2.0
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": heartbeat}
    producer = _start("produce", config, "--steps", "14", "--sleep", "0.15")
    try:
        first = _start("consume", config, "--check", "--max-steps", "3", "--timeout", "30")
        out1, err1 = first.communicate(timeout=60)
        second = _start("consume", config, "--check", "--timeout", "30")
        out2, err2 = second.communicate(timeout=90)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(producer)
    assert _taken(out1) == [0, 1, 2] and "STATUS stopped" in out1, out1 + err1
    assert "STATUS end_of_stream" in out2, out2 + err2
    assert _taken(out2) == list(range(3, 14)), out2 + err2
    assert _steps(out2, "LOST") == [] and _steps(out2, "MISSED") == [], out2
    assert producer.returncode == 0, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_a_new_producer_and_a_consumer_started_after_a_dead_producer_work(tmp_path: Path, sig: int) -> None:
    """A producer stopped by Ctrl-C (or killed): a new producer of the stream, then a consumer 0.5 s later. The
    dead producer's contact file must neither make the consumer fail nor leave the new producer waiting."""
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": 1.0}
    old = _start("produce", config, "--steps", "1000", "--sleep", "0.2", "--no-close")
    lines: list[str] = []
    try:
        _wait_for(old, "PUBLISHED 1", 60, lines)
        os.killpg(old.pid, sig)
        old.communicate(timeout=30)
        producer = _start("produce", config, "--steps", "4", "--sleep", "0.1")
        time.sleep(0.5)
        consumer = _start("consume", config, "--check", "--timeout", "30")
        out2, err2 = consumer.communicate(timeout=90)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(old)
    assert "STATUS end_of_stream" in out2 and _taken(out2) == [0, 1, 2, 3], out2 + err2
    assert producer.returncode == 0, err


def test_a_producer_that_fails_tells_its_consumer_why(tmp_path: Path) -> None:
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": 0.5}
    go = tmp_path / "fail-now"
    producer = _start("produce", config, "--steps", "6", "--fail-at", "2", "--fail-when", str(go))
    consumer = _start("consume", config, "--check", "--timeout", "30")
    lines: list[str] = []
    try:
        _wait_for(consumer, "CHECKED 1", 60, lines)
        go.touch()
        out2, err2 = consumer.communicate(timeout=60)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(producer, consumer)
    status = next(line for line in out2.splitlines() if line.startswith("STATUS"))
    assert status.startswith("STATUS error") and \
        "producer rank 0 failed: RuntimeError: the simulation failed before step 2; last step seen 1" in status, \
        out2 + err2
    assert producer.returncode == 1 and "the simulation failed before step 2" in err, err


def test_a_producer_that_never_closes_delivers_what_it_published(tmp_path: Path) -> None:
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": 0.5}
    ready = tmp_path / "ready"
    consumer = _start("consume", config, "--check", "--timeout", "30", "--ready", str(ready))
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        producer = _start("produce", config, "--steps", "2", "--no-close")
        out, err = producer.communicate(timeout=60)
        out2, err2 = consumer.communicate(timeout=60)
    finally:
        _kill(consumer)
    assert "STATUS end_of_stream" in out2 and _taken(out2) == [0, 1], out2 + err2
    assert producer.returncode == 0 and "was not closed; closing it at exit" in err, err


def test_a_step_dropped_just_after_a_group_attached_again_is_named_to_it() -> None:
    """Group g is lost; step 1 is stored while it is lost (let go at once) and announced only after g's HELLO.
    The answer to g's first NEXT must name step 1 as dropped for it (and not step 0, which it took)."""
    import zmq

    from h5flow.transports.socket import protocol as P
    from h5flow.transports.socket.server import Held, Server, Store

    st = Store(0, 30.0)
    ctx = zmq.Context()
    srv = Server(ctx, st, b"token", "run", "")
    sent: list[tuple[bytes, dict]] = []
    srv._send = lambda ident, parts: sent.append((parts[0], json.loads(parts[1])))  # type: ignore[method-assign]
    try:
        def held(seq: int) -> Held:
            return Held(seq, seq, 0.0, 0, {}, meta_json="{}")

        srv._on_hello(b"c", {"group": "g", "consumers": 1})
        st.add(held(0))
        st.announced.append(0)
        srv._on_release(b"c", {"group": "g", "seq": 0})
        with st.cond:  # what the heartbeat check does to a group that stopped pinging (dead_consumer="drop")
            st.groups["g"].lost = st.groups["g"].dropped = True
            st.losses["g"] = ["consumer group 'g' declared lost for the test"]
        st.add(held(1))  # no live group: let go at once, announced only after the next HELLO
        assert 1 not in st.held
        srv._on_hello(b"c", {"group": "g", "consumers": 1})
        kind, hello = sent[-1]
        assert kind == P.OK and hello["first"] == 2 and hello["resume"] == 1, hello
        st.announced.append(1)
        st.add(held(2))
        st.announced.append(2)
        srv._on_next(b"c", {"group": "g", "seq": hello["resume"], "floor": hello["first"], "ev": 0})
        kind, step = sent[-1]
        assert kind == P.STEP and step["seq"] == 2, step
        assert step["dropped"] == [[1, "consumer group 'g' declared lost for the test"]] and step["missed"] == [], step
    finally:
        srv.stop()
        ctx.term()


def test_a_group_that_closed_its_reader_and_never_returns_fails_the_producer(tmp_path: Path) -> None:
    """A consumer that closes its reader after 2 of 8 steps and is not started again: the steps it did not take
    are dropped for its group once it is declared lost, and the producer does not exit 0 over them."""
    config = {"type": "socket", "filename": str(tmp_path / "s"), "heartbeat": 0.5}
    producer = _start("produce", config, "--steps", "8", "--sleep", "0.2")
    consumer = _start("consume", config, "--check", "--max-steps", "2", "--timeout", "30")
    try:
        out2, err2 = consumer.communicate(timeout=60)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(producer, consumer)
    assert _taken(out2) == [0, 1], out2 + err2
    assert producer.returncode == 1, err
    assert "dropped for consumer group 'default' without being taken: steps 2-7" in err, err
    assert "detached (closed its reader) after step 1" in err, err


_API_CONSUMER = """
import sys, time
import h5flow
with h5flow.open(sys.argv[1], "r", type="socket", heartbeat=2.0) as s:
    for st in s.steps(timeout=30):
        print("GOT", st.step, flush=True)
        time.sleep(0.3)
print("STATUS", s.status, flush=True)
"""


def test_ctrl_c_of_an_api_consumer_and_a_restart_resume_where_it_left_off(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT: KeyboardInterrupt through the ``with`` blocks, the reader sends BYE) while the consumer
    holds step S; started again at once, it gets S again (it was never released) and every step after."""
    name = str(tmp_path / "s")
    config = {"type": "socket", "filename": name, "heartbeat": 2.0}
    script = tmp_path / "consumer.py"
    script.write_text(_API_CONSUMER)
    producer = _start("produce", config, "--steps", "12", "--sleep", "0.1")

    def consumer() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    first = consumer()
    lines: list[str] = []
    try:
        _wait_for(first, "GOT 3", 60, lines)
        os.killpg(first.pid, signal.SIGINT)
        first.communicate(timeout=30)
        second = consumer()
        out2, err2 = second.communicate(timeout=90)
        out, err = producer.communicate(timeout=60)
    finally:
        _kill(producer, first)
    got = [int(line.split()[1]) for line in out2.splitlines() if line.startswith("GOT")]
    assert got == list(range(3, 12)) and "STATUS end_of_stream" in out2, out2 + err2
    assert producer.returncode == 0, err


def test_a_producer_rank_found_gone_is_reported_with_the_reason_its_rank_0_writes_just_after(tmp_path: Path) -> None:
    """A failing producer's rank 1 closes its connections before its rank 0 has written the reason: the
    consumer that finds rank 1 gone reports that reason (written 0.3 s later), not a loss; a producer that
    writes none (killed) is reported lost within one heartbeat."""
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import open_reader
    from h5flow.transports.socket.contact import Contact, ended_path, write_private

    name = str(tmp_path / "s")
    reader = open_reader(MPI.COMM_SELF, TransportConfig.of(type="socket", filename=name, heartbeat=1.0))
    contact = Contact("run-1", "token", 2, 1.0)
    lost = "producer rank 1 lost while sequence 0 was being read: its connection closed"
    failed = "producer rank 1 failed: RuntimeError: the simulation diverged"
    try:
        t0 = time.time()
        assert reader._why_lost(lost, contact) == lost  # type: ignore[attr-defined]
        assert 0.9 < time.time() - t0 < 5.0
        later = threading.Timer(0.3, write_private, (ended_path(name), {"run_id": "run-1", "ended": time.time(),
                                                                        "published": 2, "dropped": {},
                                                                        "failed": failed}))
        later.start()
        assert reader._why_lost(lost, contact) == failed  # type: ignore[attr-defined]
        later.join()
        # another run's reason is not this one's
        assert reader._why_lost(lost, Contact("run-2", "token", 2, 0.2)) == lost  # type: ignore[attr-defined]
    finally:
        reader.close()
