"""libh5flow (native/lib, h5flow.h): a C producer read by Python consumers unchanged.

The C example examples/heat2d_c (built by ``make setup`` into build/native/bin/h5flow-heat2d) is the same
physics as examples/heat2d/heat2d.py; its steps must equal the in-process numpy computation. Producers and
consumers run as two concurrent ``mpiexec`` jobs, as a user runs them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from h5flow.transports.hdf5.staging import read_index

ROOT = Path(__file__).resolve().parents[1]
HEAT = ROOT / "examples" / "heat2d"
BUILD = Path(os.environ.get("H5FLOW_NATIVE_BUILD", ROOT / "build" / "native"))
HEAT_C = BUILD / "bin" / "h5flow-heat2d"

# A consumer on 1 rank: every step's whole plate saved as step-<n>.npy, plus status.txt.
CONSUMER = r"""
import sys
import numpy as np
from mpi4py import MPI
import h5flow
from h5flow.api import StreamError

out = sys.argv[2]
try:
    with h5flow.open(sys.argv[1], "r", comm=MPI.COMM_WORLD) as s:
        for st in s.steps(timeout=60):
            share = st.read("temperature")
            np.save(f"{out}/step-{st.step}.npy", share.into(np.zeros(share.global_shape)))
            with open(f"{out}/times.txt", "a") as f:
                f.write(f"{st.step} {st.time!r}\n")
    status = "end_of_stream"
except StreamError as e:
    status = f"error: {e}"
with open(f"{out}/status.txt", "w") as f:
    f.write(status)
"""


def _heat_reference(ny: int, nx: int, steps: int) -> list[np.ndarray]:
    sys.path.insert(0, str(HEAT))
    try:
        import heat2d
    finally:
        sys.path.remove(str(HEAT))
    return heat2d.serial(ny, nx, steps)


def _need_build() -> None:
    assert HEAT_C.exists(), f"{HEAT_C} is missing: run `make setup` (it builds native/, libh5flow and the C example)"


def _xml(path: Path, stream: Path, **attrs: str) -> Path:
    extra = "".join(f' {k}="{v}"' for k, v in attrs.items())
    path.write_text(f'<sensei>\n  <transport type="hdf5" filename="{stream}"{extra}/>\n</sensei>\n')
    return path


def _run(cmd: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("layout", ["n-1", "n-n", "n-n cache,async"])
def test_c_producer_on_two_ranks_python_consumer_on_one(tmp_path: Path, layout: str) -> None:
    """C heat2d on 2 ranks → Python consumer on 1 rank (h5flow.open(..., "r")), concurrently, through a queue of 2
    steps: every step equals examples/heat2d's serial numpy computation, exactly; in both layouts, and through
    the connector stack ``vol_stack`` (plugins from HDF5_PLUGIN_PATH, build/stack.env)."""
    _need_build()
    ny, nx, steps = 12, 10, 4
    stream = tmp_path / "heat"
    layout, _, stack = layout.partition(" ")
    extra = {"vol_stack": stack, "cache_path": str(tmp_path)} if stack else {}
    xml = _xml(tmp_path / "p.xml", stream, queue_limit="2", layout=layout, **extra)
    (tmp_path / "consume.py").write_text(CONSUMER)
    out = tmp_path / "out"
    out.mkdir()
    consumer = subprocess.Popen(["mpiexec", "-n", "1", sys.executable, "consume.py", str(stream), str(out)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        prod = _run(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", str(steps), "--shape", str(ny), str(nx)],
                    tmp_path, timeout=120)
        cons_out = consumer.communicate(timeout=120)[0]
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert prod.returncode == 0, f"C producer failed:\n{prod.stdout}\n{prod.stderr}"
    assert consumer.returncode == 0, f"consumer failed:\n{cons_out}"
    assert (out / "status.txt").read_text() == "end_of_stream"
    ref = _heat_reference(ny, nx, steps)
    times = [line.split() for line in (out / "times.txt").read_text().splitlines()]
    assert [int(s) for s, _ in times] == list(range(steps))
    assert [float(t) for _, t in times] == [s * 0.2 for s in range(steps)]
    for s in range(steps):
        got = np.load(out / f"step-{s}.npy")
        assert np.array_equal(got, ref[s]), f"step {s}: max difference {np.abs(got - ref[s]).max()}"
    # the index as the protocol has it: P 0..3 then E 4; every step released and collected
    index = read_index(Path(f"{stream}.h5flow") / "index")
    assert [(e.kind, e.seq, e.step) for e in index[:-1]] == [("P", s, s) for s in range(steps)]
    assert (index[-1].kind, index[-1].count) == ("E", steps)
    assert not list(Path(f"{stream}.h5flow").glob("step-*"))


def test_c_producer_discard_policy_is_read_by_python(tmp_path: Path) -> None:
    """queue_limit=1, queue_policy="discard" with no consumer: step 0 is published, steps 1-2 are dropped (D lines,
    said on stderr); a Python consumer attaching afterwards reads step 0, the discards, then end of stream."""
    _need_build()
    stream = tmp_path / "heat"
    xml = _xml(tmp_path / "p.xml", stream, queue_limit="1", queue_policy="discard")
    prod = _run(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", "3", "--shape", "8", "6"], tmp_path)
    assert prod.returncode == 0, prod.stderr
    assert "h5flow: step 1 discarded (queue full: 1 unreleased steps, queue_limit 1)" in prod.stderr
    kinds = [(e.kind, e.step) for e in read_index(Path(f"{stream}.h5flow") / "index")]
    assert kinds == [("P", 0), ("D", 1), ("D", 2), ("E", -1)]
    (tmp_path / "consume.py").write_text(CONSUMER)
    out = tmp_path / "out"
    out.mkdir()
    cons = _run(["mpiexec", "-n", "1", sys.executable, "consume.py", str(stream), str(out)], tmp_path)
    assert cons.returncode == 0, cons.stdout + cons.stderr
    assert (out / "status.txt").read_text() == "end_of_stream"
    assert sorted(p.name for p in out.glob("step-*.npy")) == ["step-0.npy"]
    assert np.array_equal(np.load(out / "step-0.npy"), _heat_reference(8, 6, 1)[0])


def test_c_producer_claim_and_heartbeat(tmp_path: Path) -> None:
    """A second C producer on a stream another one holds is refused, naming the owner; when the holder is killed
    its heartbeats stop and a Python consumer reports the producer lost (not a hang)."""
    _need_build()
    stream = tmp_path / "heat"
    xml = _xml(tmp_path / "p.xml", stream, queue_limit="1", heartbeat="0.2")
    # no consumer: the holder publishes step 0, then waits for room in the queue
    log = tmp_path / "holder.log"
    with open(log, "w") as f:
        holder = subprocess.Popen(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", "50", "--shape", "8", "6"],
                                  cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        index = Path(f"{stream}.h5flow") / "index"
        deadline = time.time() + 60
        while not (index.exists() and index.read_text().startswith("P 0 0 ")):
            assert holder.poll() is None, log.read_text()
            assert time.time() < deadline, "the holder published nothing within 60 s"
            time.sleep(0.05)
        # the staging directory itself names the same stream
        second = _run(["mpiexec", "-n", "1", str(HEAT_C), f"{stream}.h5flow", "--steps", "1", "--shape", "8", "6"],
                      tmp_path)
        assert second.returncode != 0
        assert "is already claimed by another producer (host " in second.stderr, second.stderr
        assert "stop that producer first or use another filename" in second.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    (tmp_path / "consume.py").write_text(CONSUMER)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.time()
    cons = _run(["mpiexec", "-n", "1", sys.executable, "consume.py", str(stream), str(out)], tmp_path)
    assert cons.returncode == 0, cons.stdout + cons.stderr
    status = (out / "status.txt").read_text()
    assert status.startswith("error: the stream stopped: producer rank ") and "lost: no heartbeat for" in status, status
    assert (out / "step-0.npy").exists()  # what was published before is delivered
    assert time.time() - t0 < 30


@pytest.mark.parametrize(("case", "expected"), [
    ("missing-dir", "does not exist: create it"),
    ("socket", 'the C library writes the hdf5 transport only; this transport is type="socket"'),
    ("subfiling", 'driver="subfiling" is not offered by the C library'),
    ("unknown-attr", "unknown attribute 'bogus' on <transport type=\"hdf5\">; accepted: async_max_mem, async_write, "
                     "cache_capacity, cache_path, collective, dead_consumer, driver, enabled, file_name, filename"),
    ("heartbeat", "bad value '0.001' for attribute 'heartbeat' on <transport type=\"hdf5\">; accepted: a number of "
                  "seconds from 0.05 to 3600"),
    ("not-xml", "not a well-formed XML file"),
    ("no-file", "cannot read the configuration file"),
    ("cache-path", "rank 0: cache_path='/nonexistent/cache' is not a writable directory on this node"),
    ("stack-layout", 'vol_stack="async" stacks connectors over the serial rank files of layout="n-n", but '
                     'layout="n-1" writes one shared file'),
])
def test_c_producer_bad_stream_or_xml_says_why(tmp_path: Path, case: str, expected: str) -> None:
    _need_build()
    stream = tmp_path / "s"
    xml = tmp_path / "x.xml"
    if case == "missing-dir":
        arg = str(tmp_path / "no" / "such" / "dir" / "s")
    elif case == "socket":
        xml.write_text(f'<sensei><transport type="socket" filename="{stream}"/></sensei>')
    elif case == "subfiling":
        _xml(xml, stream, driver="subfiling")
    elif case == "unknown-attr":
        _xml(xml, stream, bogus="1")
    elif case == "heartbeat":
        _xml(xml, stream, heartbeat="0.001")
    elif case == "not-xml":
        xml.write_text(f'<sensei><transport type="hdf5" filename="{stream}"></sensei>')
    elif case == "no-file":
        xml = tmp_path / "missing.xml"
    elif case == "cache-path":
        _xml(xml, stream, vol_stack="cache", cache_path="/nonexistent/cache")
    elif case == "stack-layout":
        _xml(xml, stream, vol_stack="async", layout="n-1")
    if case != "missing-dir":
        arg = str(xml)
    res = _run(["mpiexec", "-n", "1", str(HEAT_C), arg, "--steps", "1", "--shape", "4", "4"], tmp_path)
    assert res.returncode != 0
    assert "heat2d: opening the stream: " in res.stderr and expected in res.stderr, res.stderr
    assert not Path(f"{stream}.h5flow").exists() or case == "missing-dir"


@pytest.mark.parametrize(("attrs", "layout", "files"), [
    ({}, "n-n", ["meta.json", "rank-00000.extents.json", "rank-00000.h5", "rank-00001.extents.json",
                 "rank-00001.h5"]),
    ({"collective": "true"}, "n-1", ["data.h5", "meta.json"]),
    ({"method": "sc"}, "n-1", ["data.h5", "meta.json"]),
], ids=["default", "collective", "method-sc"])
def test_c_producer_default_layout_is_n_n_and_collective_implies_n_1(tmp_path: Path, attrs: dict[str, str],
                                                                     layout: str, files: list[str]) -> None:
    """The C producer's default layout is Python's (n-n); collective transfers, which only act on a shared file,
    imply n-1 when the layout is left out."""
    _need_build()
    stream = tmp_path / "heat"
    xml = _xml(tmp_path / "p.xml", stream, keep="all", **attrs)
    res = _run(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", "1", "--shape", "6", "4"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    root = Path(f"{stream}.h5flow")
    info = json.loads((root / "stream.json").read_text())
    assert info["layout"] == layout and info["keep"] == "all"  # the producer's retention, for every consumer
    assert sorted(p.name for p in (root / "step-000000000").iterdir()) == files
    if layout == "n-n":  # where HDF5 put each rank's data, as the Python producer records it (raw reads)
        import h5py

        from h5flow.transports.hdf5._h5 import RawFile, dataset_extent

        for r in range(2):
            rank_file = root / "step-000000000" / f"rank-{r:05d}.h5"
            doc = json.loads((root / "step-000000000" / f"rank-{r:05d}.extents.json").read_text())
            assert doc["format"] == "h5flow-extents" and doc["version"] == 2
            assert doc["file_size"] == rank_file.stat().st_size
            with h5py.File(rank_file, "r") as f:
                names = []
                f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
                assert sorted(doc["datasets"]) == sorted(names)
                for n in names:
                    assert doc["datasets"][n] == dataset_extent(f[n]), n
                    raw = RawFile.open(rank_file)
                    assert raw is not None
                    try:
                        rows, ncomp = f[n].shape
                        assert raw.can_read(n, f[n].dtype, ncomp, rows)
                        got = np.empty(f[n].shape, f[n].dtype)
                        raw.read_rows(n, 0, got)
                        np.testing.assert_array_equal(got, f[n][...])
                    finally:
                        raw.close()


@pytest.mark.parametrize("attr", ['collective="true"', 'method="sc"'])
def test_c_producer_refuses_collective_with_layout_n_n(tmp_path: Path, attr: str) -> None:
    """An explicit layout="n-n" with collective transfers is refused (they would be silently ignored), naming the
    conflict and what to do, as the Python producer does."""
    _need_build()
    stream = tmp_path / "s"
    xml = tmp_path / "x.xml"
    xml.write_text(f'<sensei>\n<transport type="hdf5" filename="{stream}" layout="n-n" {attr}/>\n</sensei>\n')
    res = _run(["mpiexec", "-n", "1", str(HEAT_C), str(xml), "--steps", "1", "--shape", "4", "4"], tmp_path)
    assert res.returncode != 0
    assert 'only acts on a shared file (layout="n-1"), but layout="n-n" writes one file per producer rank' in res.stderr
    assert 'give layout="n-1" (or leave layout out' in res.stderr, res.stderr
    assert f"{xml}:2" in res.stderr, res.stderr  # the element's line
    assert not Path(f"{stream}.h5flow").exists()


def test_c_producer_step_over_quota_says_why(tmp_path: Path) -> None:
    _need_build()
    stream = tmp_path / "heat"
    xml = _xml(tmp_path / "p.xml", stream, quota="100B")
    res = _run(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", "2", "--shape", "8", "6"], tmp_path)
    assert res.returncode != 0
    assert ("heat2d: publishing a step: step 0 holds 384 bytes, more than the staging quota of 100 bytes: raise the "
            "quota") in res.stderr, res.stderr
    assert read_index(Path(f"{stream}.h5flow") / "index") == []  # nothing published, no end of stream


def _test_program(tmp_path: Path, name: str) -> Path:
    """tests/native/<name>.c built with mpicc against build/native's libh5flow."""
    _need_build()
    exe = tmp_path / name
    build = subprocess.run(["mpicc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(ROOT / "tests" / "native" /
                            f"{name}.c"), f"-I{BUILD / 'include'}", f"-L{BUILD / 'lib'}",
                            f"-Wl,-rpath,{BUILD / 'lib'}", "-lh5flow", "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


def test_two_c_writers_keep_their_own_state_and_types_round_trip(tmp_path: Path) -> None:
    """Two writers in one process: an error on one leaves the other's message and stream alone (no shared state);
    1-D float32 and 3-D int64 arrays come back to Python as written, with their dtype and shape."""
    exe = _test_program(tmp_path, "clib_two_writers")
    a, b = tmp_path / "a", tmp_path / "b"
    res = _run(["mpiexec", "-n", "1", str(exe), str(a), str(b)], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(e.kind, e.step, e.time) for e in read_index(Path(f"{a}.h5flow") / "index")] == \
        [("P", 7, 1.25), ("E", -1, 0.0)]
    assert read_index(Path(f"{b}.h5flow") / "index") == []  # b ended without an end-of-stream mark
    code = ("import h5flow, numpy as np\n"
            f"with h5flow.open({str(a)!r}, 'r') as s:\n"
            "    for st in s.steps(timeout=30):\n"
            "        f, i = st.read('f32').array(), st.read('i64').array()\n"
            "        assert st.step == 7 and st.time == 1.25, (st.step, st.time)\n"
            "        assert f.dtype == np.float32 and f.tolist() == [0.5, 1.5, 2.5, 3.5, 4.5], f\n"
            "        assert i.dtype == np.int64 and i.shape == (2, 2, 2) and i.ravel().tolist() == list(range(-4, 4)), i\n"
            "print('read', s.status)\n")
    cons = _run(["mpiexec", "-n", "1", sys.executable, "-c", code], tmp_path)
    assert cons.returncode == 0 and "read end_of_stream" in cons.stdout, cons.stdout + cons.stderr


RAISING_CONSUMER = r"""
import sys
from mpi4py import MPI
import h5flow

with h5flow.open(sys.argv[1], "r", comm=MPI.COMM_WORLD, type="hdf5", heartbeat=0.3) as s:
    for st in s.steps(timeout=60):
        if st.step == 1:
            raise RuntimeError("the analysis failed on step 1")
"""


@pytest.mark.parametrize("policy", ["wait", "drop", "error"])
def test_c_producer_blocked_on_a_dead_consumer_applies_dead_consumer(tmp_path: Path, policy: str) -> None:
    """The C producer reads dead_consumer as the Python one does: a consumer group whose analysis raised on step 1
    (queue_limit=2) is said to have stopped beating and waited for, dropped (the producer fails at its end, naming
    the steps the group never took), or the stream stops with an error."""
    _need_build()
    stream = tmp_path / "heat"
    xml = _xml(tmp_path / "p.xml", stream, queue_limit="2", dead_consumer=policy)
    (tmp_path / "consume.py").write_text(RAISING_CONSUMER)
    cons = subprocess.Popen([sys.executable, "consume.py", str(stream)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    prod = subprocess.Popen(["mpiexec", "-n", "2", str(HEAT_C), str(xml), "--steps", "12", "--shape", "8", "6"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, cerr = cons.communicate(timeout=60)
        assert cons.returncode != 0 and "the analysis failed on step 1" in cerr, cerr
        try:
            out, err = prod.communicate(timeout=4 if policy == "wait" else 30)
        except subprocess.TimeoutExpired:
            assert policy == "wait", "the producer did not end"
            os.killpg(prod.pid, signal.SIGTERM)
            out, err = prod.communicate(timeout=30)
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGKILL)
            prod.communicate()
    import re

    said = re.search(r"consumer group 'default' stopped beating \(.*\); last step it released: (\d+) \(sequence \1\)", err)
    assert said, err
    released = int(said.group(1))  # the step the analysis raised on, or the one before (the API released it)
    assert released in (0, 1), err
    if policy == "wait":
        assert "the producer waits for it before step" in err and "restart its consumer (group='default')" in err, err
    elif policy == "drop":
        assert prod.returncode != 0, err
        lost = 11 - released
        assert (f"{lost} published step(s) were dropped for consumer group 'default' without being taken: steps "
                f"{released + 1}-11") in err, err
    else:
        assert prod.returncode != 0 and "dead_consumer='error'" in err, err
        index = read_index(Path(f"{stream}.h5flow") / "index")
        assert index[-1].kind == "X" and "stopped beating" in index[-1].reason, index


def _heartbeat_reason(stream: Path, rank: int, why: str) -> str:
    return (f"rank {rank}: its heartbeat file {stream}.h5flow/hb/{rank} {why}, so its heartbeat thread stopped; "
            f"hb/{rank} is no longer refreshed, so the stream's peers report this process lost")


def _run_taking_heartbeat(tmp_path: Path, then: str, take: Callable[[Path], None],
                          **attrs: str) -> tuple[Path, str, str]:
    """tests/native/clib_heartbeat_lost.c on 2 ranks (heartbeat 0.1 s): take(stream's staging directory) runs
    after step 0 is published, before the producer goes on (then="step": ends step 1; "close": closes)."""
    exe = _test_program(tmp_path, "clib_heartbeat_lost")
    stream = tmp_path / "s"
    xml = _xml(tmp_path / "p.xml", stream, heartbeat="0.1", **attrs)
    sync = tmp_path / "sync"
    sync.mkdir()
    proc = subprocess.Popen(["mpiexec", "-n", "2", str(exe), str(xml), str(sync), then], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not (sync / "ready").exists():
            assert proc.poll() is None and time.time() < deadline, proc.communicate(timeout=5)
            time.sleep(0.02)
        take(Path(f"{stream}.h5flow"))
        (sync / "go").touch()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()  # reaps it and closes its pipes
    return stream, out, err


@pytest.mark.parametrize(("taken", "then"), [("removed", "step"), ("replaced", "step"), ("removed", "close")])
def test_c_producer_whose_heartbeat_file_is_taken_fails_naming_the_rank_and_why(tmp_path: Path, taken: str,
                                                                                then: str) -> None:
    """hb/1 removed (a user, a cleanup tool) or replaced by another file while a 2-rank C producer computes: its
    heartbeat thread stops, never touching a replacement, and the next end_step (or close) fails on every rank
    naming rank 1 and why; the stream stops with that reason (X line), not an end-of-stream mark."""
    def take(root: Path) -> None:
        hb = root / "hb" / "1"
        hb.unlink()
        if taken == "replaced":
            hb.write_text("someone else\n")
            os.utime(hb, (1000.0, 1000.0))
        time.sleep(0.6)  # six heartbeat periods
        if taken == "replaced":
            assert hb.stat().st_mtime == 1000.0, "the heartbeat thread touched a file it did not make"

    stream, out, err = _run_taking_heartbeat(tmp_path, then, take)
    why = "was removed" if taken == "removed" else "was replaced by another file"
    reason = _heartbeat_reason(stream, 1, why)
    lines = sorted(out.splitlines())
    if then == "step":
        assert lines == sorted([f"rank {r} close rc=4" for r in (0, 1)] + [
            f"rank {r} end_step rc=4 published=0: step 1 was not published: {reason}" for r in (0, 1)]), out + err
    else:
        assert lines == [f"rank {r} close rc=4" for r in (0, 1)], out + err
    assert reason in err, err  # said on stderr, for a producer that does not print its errors
    index = read_index(Path(f"{stream}.h5flow") / "index")
    assert [e.kind for e in index] == ["P", "X"], index
    assert reason in index[-1].reason


def test_c_producer_waiting_for_consumers_fails_when_its_heartbeat_file_is_removed(tmp_path: Path) -> None:
    """Rank 0 waiting for room in the queue (queue_limit=1, no consumer) checks its own heartbeat: hb/0 removed
    meanwhile ends the wait (its consumers report it lost and would never release a step) with the reason on every
    rank, instead of waiting for ever."""
    def take(root: Path) -> None:
        (tmp_path / "sync" / "go").touch()
        deadline = time.time() + 30
        while not (tmp_path / "sync" / "ending").exists():
            assert time.time() < deadline, "the producer did not reach end_step within 30 s"
            time.sleep(0.02)
        time.sleep(0.5)  # rank 0 is waiting for room for step 1 now (its heartbeat checked at end_step's start)
        (root / "hb" / "0").unlink()

    stream, out, err = _run_taking_heartbeat(tmp_path, "step", take, queue_limit="1")
    reason = _heartbeat_reason(stream, 0, "was removed")
    assert sorted(out.splitlines()) == sorted([f"rank {r} close rc=4" for r in (0, 1)] + [
        f"rank {r} end_step rc=4 published=0: {reason}" for r in (0, 1)]), out + err
    index = read_index(Path(f"{stream}.h5flow") / "index")
    assert [e.kind for e in index] == ["P", "X"] and reason in index[-1].reason, index
