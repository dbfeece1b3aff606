"""Liveness of an hdf5 stream's producer: its heartbeat starts wherever the producer does, is checked at open,
and a heartbeat that stops while the producer runs is reported by the producer itself, with the reason reaching
the consumers."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from h5flow.transports.hdf5.staging import Heartbeat, read_index, staging_dir

ACTORS = str(Path(__file__).with_name("stream_actors.py"))


def _libpythons(exe: str) -> list[str]:
    """Every libpython the loader finds for ``exe`` without LD_LIBRARY_PATH (its RUNPATH, the ld.so cache)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    found: set[str] = set()
    out = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libpython") and len(parts) >= 3 and parts[2].startswith("/"):
            found.add(parts[2])
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    stem = f"libpython{sys.version_info.major}.{sys.version_info.minor}"
    for line in cache.splitlines():
        if stem in line and "=>" in line:
            found.add(line.split("=>")[-1].strip())
    return sorted(p for p in found if os.path.exists(p))


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def test_hdf5_stream_runs_with_an_interpreter_that_needs_ld_library_path(tmp_path: Path) -> None:
    """The issue's reproduction: every libpython the loader finds on its own is hidden (a mount namespace), so
    the interpreter starts only through LD_LIBRARY_PATH. A stream of many heartbeats is read to its end."""
    if not _unshare_works():
        pytest.skip("no mount namespace here (unshare -m fails); test_heartbeat_helper_gets_the_whole_environment "
                    "covers the stripped environment")
    exe = os.path.realpath(sys.executable)
    libs = _libpythons(exe)
    if not libs:
        pytest.skip(f"{exe} does not load a libpython (statically linked): nothing for LD_LIBRARY_PATH to find")
    private = tmp_path / "lib"
    private.mkdir()
    for lib in libs:
        shutil.copy2(lib, private / os.path.basename(lib))
    heartbeat = 0.2
    config = json.dumps({"type": "hdf5", "filename": str(tmp_path / "s"), "heartbeat": heartbeat, "queue_limit": 3})
    steps = 16  # with --sleep 0.1: about 1.6 s, 8 heartbeats
    script = tmp_path / "repro.sh"
    ld = f"{private}:{os.environ['LD_LIBRARY_PATH']}" if os.environ.get("LD_LIBRARY_PATH") else str(private)
    script.write_text(f"""
set -u
for f in {' '.join(libs)}; do mount --bind /dev/null "$f" || exit 90; done
env -i PATH="$PATH" {exe} -c pass 2>/dev/null && {{ echo "HIDE-FAILED"; exit 91; }}
export LD_LIBRARY_PATH={ld}
{sys.executable} {ACTORS} consume '{config}' --check --timeout 60 > {tmp_path}/consumer.out 2> {tmp_path}/consumer.err &
c=$!
{sys.executable} {ACTORS} produce '{config}' --steps {steps} --sleep 0.1 > {tmp_path}/producer.out 2> {tmp_path}/producer.err
p=$?
wait $c
echo "RC $p $?"
""")
    done = subprocess.run(["unshare", "-m", "timeout", "120", "bash", str(script)], capture_output=True, text=True,
                          timeout=150)
    out = {name: (tmp_path / name).read_text() if (tmp_path / name).exists() else ""
           for name in ("producer.out", "producer.err", "consumer.out", "consumer.err")}
    assert "HIDE-FAILED" not in done.stdout, "libpython was not hidden: the test would prove nothing"
    assert done.stdout.strip().endswith("RC 0 0"), (done.stdout, done.stderr, out)
    checked = [line for line in out["consumer.out"].splitlines() if line.startswith("CHECKED")]
    assert len(checked) == steps, out
    assert "STATUS end_of_stream" in out["consumer.out"], out


def test_heartbeat_helper_gets_the_whole_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper starts with the producer's environment (LD_LIBRARY_PATH, PYTHONHOME, ... as the producer got
    them), not a stripped one."""
    monkeypatch.setenv("H5FLOW_TEST_MARK", "kept")
    hb = Heartbeat(tmp_path / "0", 0.2)
    try:
        environ = Path(f"/proc/{hb.proc.pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in environ if b"=" in item)
        assert env.get("H5FLOW_TEST_MARK") == "kept"
        for key in ("LD_LIBRARY_PATH", "PATH", "HDF5_PLUGIN_PATH"):
            assert env.get(key) == os.environ.get(key), key
    finally:
        hb.stop()


def test_heartbeat_that_cannot_start_fails_at_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter that cannot start (here: one that prints the loader's error and exits) is an error at open,
    quoting what it said, instead of a stream whose producer every consumer reports lost."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so.1.0: cannot open "
                    "shared object file' >&2\nexit 127\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import TransportError, open_writer

    cfg = TransportConfig.of(type="hdf5", filename=str(tmp_path / "s"), heartbeat=0.2)
    t0 = time.time()
    with pytest.raises(TransportError) as err:
        open_writer(MPI.COMM_SELF, cfg)
    assert time.time() - t0 < 10
    text = str(err.value)
    assert "heartbeat helper" in text and "exited with status 127" in text, text
    assert "libpython3.11.so.1.0: cannot open shared object file" in text, text
    assert not (staging_dir(cfg.filename) / "stream.json").exists(), "a stream without heartbeat was announced"


def _failure_within(hb: Heartbeat, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while not hb.failure() and time.monotonic() < deadline:
        time.sleep(0.02)
    return hb.failure()


def test_heartbeat_helper_says_why_when_a_new_run_removes_its_directory(tmp_path: Path) -> None:
    """A new run clears consumers/ (the group's .hb and the helper's .log with it): the helper's reason for
    stopping still reaches this process, instead of "exited with status 1" and nothing else."""
    directory = tmp_path / "consumers"
    directory.mkdir()
    hb = Heartbeat(directory / "g.hb", 0.1)
    try:
        shutil.rmtree(directory)
        failure = _failure_within(hb, 5)
        assert "g.hb was removed" in failure and "a new run of the stream" in failure, failure
    finally:
        hb.stop()


def test_heartbeat_helper_never_beats_a_file_that_replaced_its_own(tmp_path: Path) -> None:
    """A heartbeat file removed and written again (by another run, another helper) is not this helper's: it
    stops, says so, and leaves the new file's mtime alone."""
    path = tmp_path / "0"
    hb = Heartbeat(path, 0.1)
    try:
        path.unlink()
        path.write_text("other-host 1\n")
        os.utime(path, (0, 0))
        failure = _failure_within(hb, 5)
        assert "was replaced by another file" in failure, failure
        assert path.stat().st_mtime == 0, "the helper beat another run's heartbeat file"
    finally:
        hb.stop()


def test_heartbeat_lease_stops_the_beat_and_progress_resumes_it(tmp_path: Path) -> None:
    """A lease overrun stops the beat and writes <file>.stalled; progress_done removes it and the beat resumes."""
    path = tmp_path / "0"
    hb = Heartbeat(path, 0.1)
    try:
        hb.expect_progress(0.2, "writing step 7")
        stalled = Path(f"{path}.stalled")
        deadline = time.monotonic() + 5
        while not stalled.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stalled.read_text() == "writing step 7\n"
        before = path.stat().st_mtime
        time.sleep(0.3)
        assert path.stat().st_mtime == before, "the helper beat past its lease"
        hb.progress_done()
        deadline = time.monotonic() + 5
        while (stalled.exists() or path.stat().st_mtime == before) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not stalled.exists() and path.stat().st_mtime > before and not hb.failure()
    finally:
        hb.stop()


def test_consumer_never_attaches_to_a_run_a_new_producer_is_clearing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Run 2's consumer starting while run 2's producer clears run 1 (read to its end by the same group): the
    consumer may read run 1's stream.json and then an index already cleared. It must not take that for run 1
    still going (its heartbeat file would then be removed by the clear, and its group registered for a run
    that is gone): it attaches to no run until stream.json is consistent."""
    import numpy as np
    from mpi4py import MPI

    import h5flow
    from h5flow.config import TransportConfig
    from h5flow.transports import open_reader
    from h5flow.transports.hdf5.reader import Hdf5Reader
    from h5flow.transports.hdf5.staging import Staging, new_run_id

    name = str(tmp_path / "s")
    with h5flow.open(name, "w", comm=MPI.COMM_SELF, type="hdf5", heartbeat=0.5) as s:
        with s.step(0) as st:
            st.write("x", np.zeros(2))
    with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5") as s:
        assert [st.step for st in s.steps(timeout=10)] == [0]
    run1 = json.loads((staging_dir(name) / "stream.json").read_text())["run_id"]

    nothing_left = Hdf5Reader._nothing_left

    def clear_first(self: Hdf5Reader, *args: object) -> bool:  # run 2's producer clears meanwhile
        staging = Staging(name)
        staging.reset(new_run_id())
        staging.release_claim()
        return nothing_left(self, *args)

    monkeypatch.setattr(Hdf5Reader, "_nothing_left", clear_first)
    reader = open_reader(MPI.COMM_SELF, TransportConfig.of(type="hdf5", filename=name, heartbeat=0.5))
    try:
        attached = reader._attach()
        assert not attached and reader.info is None, f"attached to run {run1}, which a new run was clearing"
    finally:
        reader.close()


def test_heartbeat_that_stops_is_reported_by_the_producer(tmp_path: Path) -> None:
    """The helper killed while the producer runs: the producer's next end_step fails with the reason, and the
    stream's consumers are told why (an X line naming the producer rank), not just "no heartbeat"."""
    import numpy as np
    from mpi4py import MPI

    import h5flow
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, TransportError, open_reader

    filename = str(tmp_path / "s")
    cfg = dict(type="hdf5", filename=filename, heartbeat=0.2)
    data = np.arange(24.0).reshape(2, 3, 4)
    with pytest.raises(TransportError) as err:
        with h5flow.open(filename, "w", comm=MPI.COMM_SELF, **{k: v for k, v in cfg.items() if k != "filename"}) as s:
            with s.step(0) as st:
                st.write("T", data)
            s.flush()
            hb = s.writer._heartbeat
            os.kill(hb.proc.pid, signal.SIGKILL)
            hb.proc.wait()
            with s.step(1) as st:
                st.write("T", data)
            s.flush()
    text = str(err.value)
    assert "heartbeat helper" in text and "stopped with status -9" in text, text
    stops = [e for e in read_index(staging_dir(filename) / "index") if e.kind == "X"]
    assert stops and "producer rank 0 failed:" in stops[0].reason and "heartbeat helper" in stops[0].reason, stops
    reader = open_reader(MPI.COMM_SELF, TransportConfig.of(**cfg))
    try:
        res = reader.begin_step(5)
        assert res.status is StepStatus.OK and res.step.step == 0
        reader.release()
        res = reader.begin_step(5)
        assert res.status is StepStatus.ERROR and "producer rank 0 failed:" in res.reason, res.reason
        assert "heartbeat helper" in res.reason, res.reason
    finally:
        reader.close()


def test_producer_error_reaches_consumers_with_its_reason(tmp_path: Path) -> None:
    """A producer that stops on an exception: its consumers fail with "producer rank R failed: <reason>"."""
    import numpy as np
    from mpi4py import MPI

    import h5flow
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader

    filename = str(tmp_path / "s")
    with pytest.raises(h5flow.RankFailed, match="producer rank 0 failed: ZeroDivisionError") as err:
        with h5flow.open(filename, "w", comm=MPI.COMM_SELF, type="hdf5", heartbeat=0.2) as s:
            with s.step(0) as st:
                st.write("T", np.zeros((2, 2, 2)))
            s.flush()
            1 / 0
    assert isinstance(err.value.__cause__, ZeroDivisionError)  # the agreed error, chained from the rank's own
    assert (staging_dir(filename) / "hb" / "0.error").read_text() == \
        "producer rank 0 failed: ZeroDivisionError: division by zero"
    reader = open_reader(MPI.COMM_SELF, TransportConfig.of(type="hdf5", filename=filename))
    try:
        assert reader.begin_step(5).status is StepStatus.OK
        reader.release()
        res = reader.begin_step(5)
        assert res.status is StepStatus.ERROR
        assert "producer rank 0 failed: ZeroDivisionError: division by zero" in res.reason, res.reason
    finally:
        reader.close()


def _start(role: str, config: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, ACTORS, role, json.dumps(config), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()


def _wait_stderr(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """Read ``proc``'s stderr until a line holds ``text`` (the lines read so far are returned with it), at most
    ``timeout`` seconds (a reader thread: a silent process does not hold the test)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stderr.readline, "")],
                     daemon=True).start()
    seen: list[str] = []
    deadline = time.time() + timeout
    while (left := deadline - time.time()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"no stderr line with {text!r} within {timeout} s: {''.join(seen)[-2000:]}")


@pytest.mark.parametrize("transport", ["hdf5", "socket"])
@pytest.mark.parametrize("policy", ["wait", "drop", "error"])
def test_producer_blocked_on_a_dead_consumer_applies_dead_consumer(tmp_path: Path, transport: str,
                                                                   policy: str) -> None:
    """An analysis that raises on step 3 with queue_limit=2: the producer, blocked on the dead group, says so within
    a few heartbeats (which group, its last step released, how to resume) and waits (a restarted consumer then
    resumes and the run ends well), drops the group (the run ends, failing with the steps the group never took),
    or stops with an error. Nothing waits for ever."""
    heartbeat = 0.3
    config = {"type": transport, "filename": str(tmp_path / "s"), "heartbeat": heartbeat, "queue_limit": 2,
              "dead_consumer": policy}
    steps = 12
    consumer = _start("consume", config, "--raise-at", "3", "--timeout", "30")
    producer = _start("produce", config, "--steps", str(steps), "--sleep", "0.02")
    restarted = None
    try:
        consumer.communicate(timeout=60)
        died = time.time()
        assert consumer.returncode != 0
        if policy == "wait":
            said = _wait_stderr(producer, "dead_consumer='wait'", 15)
            assert time.time() - died < 10 * heartbeat + 3, said
            assert "consumer group 'default' stopped beating" in said, said
            assert "last step it released: 2" in said and "restart its consumer (group='default')" in said, said
            assert producer.poll() is None, "a producer told to wait stopped"
            restarted = _start("consume", config, "--timeout", "30")
            out, err = producer.communicate(timeout=60)
            assert producer.returncode == 0, err
            rout, rerr = restarted.communicate(timeout=60)
            got = [int(line.split()[1]) for line in rout.splitlines() if line.startswith("STEP")]
            assert got == list(range(3, steps)), (rout, rerr)
            assert "STATUS end_of_stream" in rout, rout
        else:
            out, err = producer.communicate(timeout=60)
            assert time.time() - died < 20 * heartbeat + 10, err
            assert producer.returncode != 0, err
            if policy == "drop":
                assert "the producer drops it" in err or "lost: no heartbeat" in err, err
                published = [line for line in out.splitlines() if line.startswith("PUBLISHED")]
                assert len(published) == steps, out
                assert "were dropped for consumer group 'default' without being taken: steps 3" in err, err
            else:
                assert "consumer group 'default' stopped beating" in err and "dead_consumer='error'" in err, err
    finally:
        _stop(producer, consumer, *([restarted] if restarted else []))


def test_producer_blocked_on_its_consumers_reports_its_own_heartbeat_stopping(tmp_path: Path) -> None:
    """Rank 0 waiting for room in the queue is the rank consumers watch: a helper that dies meanwhile ends the
    wait with the reason, instead of a producer that waits while every consumer reports it lost."""
    import threading

    import numpy as np
    from mpi4py import MPI

    import h5flow
    from h5flow.transports import TransportError
    from h5flow.transports.hdf5.staging import GroupState, Staging

    filename = str(tmp_path / "s")
    with pytest.raises(TransportError) as err:
        with h5flow.open(filename, "w", comm=MPI.COMM_SELF, type="hdf5", heartbeat=0.2, queue_limit=1,
                         async_write=False) as s:
            staging = Staging(filename)  # a group that registered and never releases (it does not beat either)
            staging.save_group("g", GroupState(s.writer.info.run_id, -1, 1))
            with s.step(0) as st:
                st.write("T", np.zeros((2, 2, 2)))
            proc = s.writer._heartbeat.proc
            threading.Timer(0.5, os.kill, (proc.pid, signal.SIGKILL)).start()
            t0 = time.time()
            with s.step(1) as st:  # blocked: the queue holds step 0, unreleased
                st.write("T", np.zeros((2, 2, 2)))
    assert time.time() - t0 < 5
    assert "rank 0: its heartbeat helper" in str(err.value) and "stopped with status -9" in str(err.value), err.value


def test_socket_producer_reports_its_serving_thread_stopping(tmp_path: Path) -> None:
    """The socket transport's counterpart of the heartbeat helper: a producer rank whose serving thread stopped
    fails its next end_step saying so, instead of carrying on unreachable."""
    import numpy as np
    from mpi4py import MPI

    import h5flow
    from h5flow.transports import TransportError

    with pytest.raises(TransportError) as err:
        with h5flow.open(str(tmp_path / "s"), "w", comm=MPI.COMM_SELF, type="socket", heartbeat=0.2) as s:
            s.writer._server.stop()
            with s.step(0) as st:
                st.write("T", np.zeros((2, 2, 2)))
    assert "producer rank 0 failed: its serving thread stopped" in str(err.value), err.value
