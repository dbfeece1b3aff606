"""Backpressure, quotas, garbage collection and consumer groups of the streams (docs/STREAM.md, docs/SOCKET.md).

Producer and consumers are separate processes (``tests/stream_actors.py``), MPI singletons or
``mpiexec`` jobs, talking only through the transport: the staging directory ``<tmp>/s.h5flow`` (hdf5) or
sockets found through ``<tmp>/s.socket.json`` (socket). Tests parametrized with ``actors`` run for both
transports; the others check what only the hdf5 transport has (files on disk, persistent groups).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5flow.testing.matrix import cases

pytestmark = pytest.mark.timeout(60)

ACTORS = Path(__file__).with_name("stream_actors.py")
SHAPE = (16, 16, 16)
DT = 0.01  # OscillatorConfig's default: step s has time s * DT
WAIT = 30.0  # seconds any one actor may take before the test gives up on it


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def lines(self, tag: str) -> list[list[str]]:
        return [ln.split()[1:] for ln in self.out.splitlines() if ln.split()[:1] == [tag]]

    def published(self) -> list[tuple[int, bool, float]]:
        """(step, published, waited seconds) of every ``PUBLISHED`` line of a producer."""
        return [(int(s), f == "1", float(w)) for s, f, w in self.lines("PUBLISHED")]

    def steps(self) -> list[int]:
        """Steps a consumer received (rank 0's ``STEP`` lines), in order."""
        return [int(p[0]) for p in self.lines("STEP") if p[2] == "0"]

    def checked(self) -> list[int]:
        return [int(p[0]) for p in self.lines("CHECKED")]

    def statuses(self) -> list[str]:
        return [p[0] for p in self.lines("STATUS")]

    def _list(self, tag: str) -> list[int]:
        got = self.lines(tag)
        assert len(got) == 1, f"expected one {tag} line:\n{self.out}"
        return [int(s) for s in got[0][0].split(",")] if got[0] else []

    def discarded(self) -> list[int]:
        return self._list("DISCARDED")

    def missed(self) -> list[int]:
        return self._list("MISSED")

    def __str__(self) -> str:
        return f"exit {self.rc}\n--- stdout ---\n{self.out}--- stderr ---\n{self.err[-4000:]}"


class Actors:
    """Starts actor processes (each in its own session) and kills whatever is left at the end."""

    def __init__(self, tmp: Path, transport: str = "hdf5") -> None:
        self.transport = transport
        self.filename = str(tmp / "s")
        self.root = Path(self.filename + ".h5flow")
        self.procs: list[subprocess.Popen[str]] = []

    @property
    def hdf5(self) -> bool:
        return self.transport == "hdf5"

    def stream_files(self) -> list[Path]:
        """What the transport leaves in the stream's directory (the staging directory, or the contact file)."""
        return sorted(Path(self.filename).parent.glob(Path(self.filename).name + ".*"))

    def config(self, **kw: object) -> str:
        return json.dumps({"type": self.transport, "filename": self.filename, "heartbeat": 2.0, **kw})

    def start(self, role: str, config: str, *args: object, ranks: int | None = None) -> subprocess.Popen[str]:
        cmd = [sys.executable, str(ACTORS), role, config, *map(str, args)]
        if ranks is not None:
            cmd = ["mpiexec", "-n", str(ranks), *cmd]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def wait(self, p: subprocess.Popen[str], timeout: float = WAIT) -> Result:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            report = self.kill_all()
            pytest.fail(f"actor {p.args} hung for {timeout} s; every actor was killed:\n{report}", pytrace=False)
        return Result(p.returncode, out, err)

    def kill_all(self) -> str:
        """Kill every actor still running (its whole session: mpiexec and its ranks); their outputs."""
        report = []
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if p.stdout is not None and not p.stdout.closed:
                out, err = p.communicate(timeout=10)
                report.append(f"=== {p.args}\n{Result(p.returncode, out, err)}")
        return "\n".join(report)

    def run(self, producer_args: tuple, consumer_args: tuple, config: str, *, ranks: int | None = None,
            consumer_first: float = 0.0) -> tuple[Result, Result]:
        """One producer and one consumer on ``config``; returns (producer, consumer)."""
        if consumer_first:
            c = self.start("consume", config, *consumer_args)
            time.sleep(consumer_first)
            p = self.start("produce", config, *producer_args, ranks=ranks)
        else:
            p = self.start("produce", config, *producer_args, ranks=ranks)
            c = self.start("consume", config, *consumer_args)
        return self.wait(p), self.wait(c)

    def until(self, what: str, cond: Callable[[], bool], timeout: float = WAIT) -> None:
        deadline = time.time() + timeout
        while not cond():
            if time.time() > deadline:
                pytest.fail(f"no {what} after {timeout} s:\n{self.kill_all()}", pytrace=False)
            time.sleep(0.005)

    def register_groups(self, *groups: str) -> None:
        """Register consumer groups of the running stream before their consumers start.

        A group exists for the producer and the garbage collector once ``consumers/<group>.json`` holds
        the run's run_id (a reader writes it when it attaches); writing it ahead of the consumers makes
        sure no step is released, and deleted, before every group is known.
        """
        from h5flow.transports.hdf5.staging import GroupState, Staging, StreamInfo

        self.until("stream.json", (self.root / "stream.json").exists)
        staging = Staging(self.filename)
        run_id = StreamInfo.load(staging.stream_json).run_id
        for g in groups:
            staging.save_group(g, GroupState(run_id))

    def step_dirs(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("step-*")) if self.root.is_dir() else []

    def unreleased_step_dirs(self) -> list[str]:
        """The staged steps no consumer group released yet: what a quota counts. A released step may wait
        for its garbage collection beside them (up to the reader's backlog), which the quota lets be.
        Listed before the groups' states are read: a release in between can only make the count smaller."""
        dirs = self.step_dirs()
        steps: list[int] = []
        for g in (self.root / "consumers").glob("*.json") if self.root.is_dir() else []:
            try:
                steps.append(int(json.loads(g.read_text()).get("released_step", -1)))
            except (OSError, ValueError):
                steps.append(-1)
        released = min(steps, default=-1)  # released by every group
        return [d for d in dirs if int(d.split("-")[1]) > released]

    def index(self) -> list[list[str]]:
        return [ln.split() for ln in (self.root / "index").read_text().splitlines() if ln.strip()]


#: the transport types of the matrix's cases these tests run (hdf5 with its default layout)
TRANSPORTS = [pytest.param(c.type, id=c.type) for c in cases(["hdf5-n-n", "socket"])]


@pytest.fixture
def actors(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Actors]:
    """hdf5 actors; ``@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)`` picks the transport."""
    a = Actors(tmp_path, getattr(request, "param", "hdf5"))
    try:
        yield a
    finally:
        a.kill_all()


def step_bytes(nblocks: int | None = None) -> int:
    """Payload bytes of one oscillator step (ghost cells included), as the writer counts them."""
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    sim = Simulation(OscillatorConfig(shape=SHAPE, nblocks=nblocks, steps=1), 0, 1)
    sim.advance(0)
    return sum(b.arrays("cell")["data"].nbytes for b in sim.blocks())


def assert_ok_consumer(c: Result, steps: list[int]) -> None:
    assert c.rc == 0, c
    assert c.steps() == steps, c
    assert c.statuses() == ["end_of_stream"], c
    assert c.missed() == [], c


# -- 1. queue_limit + block ------------------------------------------------------------------------------


@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)
def test_queue_limit_block_waits_and_loses_nothing(actors: Actors) -> None:
    cfg = actors.config(queue_limit=2, queue_policy="block")
    p, c = actors.run(("--steps", 8), ("--check", "--steps", 8, "--timeout", 10, "--sleep", 0.15), cfg)
    assert p.rc == 0, p
    pub = p.published()
    assert [s for s, _, _ in pub] == list(range(8)), p
    assert all(ok for _, ok, _ in pub), p
    assert any(w > 0.05 for _, _, w in pub), f"the producer never waited for the slow consumer\n{p}"
    assert "discarded" not in p.err, p
    assert_ok_consumer(c, list(range(8)))
    assert c.checked() == list(range(8)), c
    assert c.discarded() == [], c
    if actors.hdf5:
        assert [e[0] for e in actors.index()] == ["P"] * 8 + ["E"]


# -- 2. queue_limit + discard ----------------------------------------------------------------------------


@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)
def test_queue_limit_discard_drops_the_new_step(actors: Actors) -> None:
    n = 12
    cfg = actors.config(queue_limit=1, queue_policy="discard")
    p, c = actors.run(("--steps", n, "--sleep", 0.05), ("--check", "--steps", n, "--timeout", 10, "--sleep", 0.15),
                      cfg)
    assert p.rc == 0, p
    pub = p.published()
    assert [s for s, _, _ in pub] == list(range(n)), p
    dropped = [s for s, ok, _ in pub if not ok]
    kept = [s for s, ok, _ in pub if ok]
    assert dropped, f"a consumer 3x slower than the producer never made it drop a step\n{p}\n{c}"
    assert kept[0] == 0  # the queue was empty for the first step
    assert all(w < 0.05 for _, _, w in pub), f"discard must never wait\n{p}"
    # the consumer learns exactly the dropped steps from the index, and gets every other one, in order
    assert c.discarded() == dropped, c
    assert_ok_consumer(c, kept)
    assert c.checked() == kept, c
    assert sorted(c.steps() + c.discarded()) == list(range(n))
    for s in dropped:
        assert f"step {s} discarded" in p.err, p
    if not actors.hdf5:
        return
    d_lines = [e for e in actors.index() if e[0] == "D"]
    assert [int(e[1]) for e in d_lines] == dropped
    assert all("queue full" in " ".join(e[3:]) for e in d_lines), d_lines
    # P lines carry consecutive sequence numbers over the published steps only
    p_lines = [e for e in actors.index() if e[0] == "P"]
    assert [(int(e[1]), int(e[2])) for e in p_lines] == list(enumerate(kept))
    assert actors.index()[-1] == ["E", str(len(kept))]


# -- 3. byte quota ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)
def test_quota_smaller_than_a_step_fails_clearly(actors: Actors) -> None:
    nbytes = step_bytes()
    p = actors.wait(actors.start("produce", actors.config(quota_bytes=nbytes // 2), "--steps", 3))
    assert p.rc != 0, p
    assert "quota" in p.err and str(nbytes) in p.err and str(nbytes // 2) in p.err, p
    assert p.published() == [], p
    if actors.hdf5:
        assert actors.step_dirs() == []
        # no end-of-stream: the error the producer stopped on, which consumers report
        index = actors.index()
        assert len(index) == 1 and index[0][0] == "X" and "producer rank 0 failed:" in " ".join(index[0]), index
        assert "quota" in " ".join(index[0]), index
    else:  # the contact file of a failed producer goes; what is left says why it failed, for its consumers
        ended = Path(actors.filename + ".socket.ended.json")
        assert actors.stream_files() == [ended], actors.stream_files()
        assert "producer rank 0 failed: " in json.loads(ended.read_text())["failed"] and "quota" in ended.read_text()


@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)
def test_quota_of_two_steps_blocks_like_a_queue(actors: Actors) -> None:
    nbytes = step_bytes()
    cfg = actors.config(quota_bytes=nbytes * 5 // 2, queue_policy="block")
    most = [0]
    stop = threading.Event()

    def sample() -> None:  # the unreleased staged steps never hold more than the quota (hdf5)
        while not stop.is_set():
            most[0] = max(most[0], len(actors.unreleased_step_dirs()))
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        p, c = actors.run(("--steps", 8), ("--check", "--steps", 8, "--timeout", 10, "--sleep", 0.15), cfg)
    finally:
        stop.set()
        t.join(5)
    assert p.rc == 0, p
    pub = p.published()
    assert [s for s, ok, _ in pub if ok] == list(range(8)), p
    assert any(w > 0.05 for _, _, w in pub), f"the producer never waited on the quota\n{p}"
    assert_ok_consumer(c, list(range(8)))
    assert c.checked() == list(range(8)) and c.discarded() == [], c
    if actors.hdf5:
        assert most[0] == 2, f"at most 2 unreleased steps of {nbytes} bytes fit a quota of {nbytes * 5 // 2}; saw {most[0]}"


def test_quota_counts_unreleased_steps_only_with_keep_all(actors: Actors) -> None:
    """keep="all" retains released steps on disk; they must not use up the quota of unreleased data."""
    nbytes = step_bytes()
    cfg = actors.config(quota_bytes=nbytes * 5 // 2, keep="all", queue_policy="discard")
    p, c = actors.run(("--steps", 6, "--sleep", 0.3), ("--check", "--steps", 6, "--timeout", 10), cfg)
    assert p.rc == 0, p
    assert [s for s, ok, _ in p.published() if ok] == list(range(6)), p
    assert_ok_consumer(c, list(range(6)))
    assert c.discarded() == [] and len(actors.step_dirs()) == 6


# -- 4. garbage collection and keep ----------------------------------------------------------------------


def test_released_steps_are_deleted(actors: Actors) -> None:
    p, c = actors.run(("--steps", 5), ("--check", "--steps", 5, "--timeout", 10), actors.config())
    assert p.rc == 0, p
    assert_ok_consumer(c, list(range(5)))
    assert actors.step_dirs() == []
    assert not list(actors.root.glob(".step-*")), "a temporary step directory was left behind"
    group = json.loads((actors.root / "consumers" / "default.json").read_text())
    stream = json.loads((actors.root / "stream.json").read_text())
    assert group["run_id"] == stream["run_id"] and group["released_seq"] == 4
    assert stream["format"] == "h5flow-stream" and stream["version"] == 1


@pytest.mark.parametrize(("layout", "step_files"), [(None, ["rank-00000.h5", "rank-00000.extents.json"]),
                                                     ("n-1", ["data.h5"])], ids=["default-n-n", "n-1"])
def test_keep_all_keeps_readable_step_files(actors: Actors, layout: str | None, step_files: list[str]) -> None:
    """Each kept step is a plain HDF5 file h5py reads without MPI: one per producer rank in the default layout
    (n-n, with where its datasets' raw data lie for consumers' raw reads), one shared data.h5 in n-1."""
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    n, nblocks = 4, 3
    cfg = actors.config(keep="all", **({"layout": layout} if layout else {}))
    p, c = actors.run(("--steps", n, "--blocks", nblocks),
                      ("--check", "--steps", n, "--blocks", nblocks, "--timeout", 10), cfg)
    assert p.rc == 0, p
    assert_ok_consumer(c, list(range(n)))
    assert actors.step_dirs() == [f"step-{s:09d}" for s in range(n)]
    sim = Simulation(OscillatorConfig(shape=SHAPE, nblocks=nblocks, steps=n), 0, 1)
    for s in range(n):
        d = actors.root / f"step-{s:09d}"
        assert sorted(x.name for x in d.iterdir()) == sorted([*step_files, "meta.json"])
        step_file = step_files[0]
        meta_json = json.loads((d / "meta.json").read_text())
        sim.advance(s)
        expected = np.concatenate([b.arrays("cell")["data"].ravel() for b in sim.blocks()])  # block-id order
        with h5py.File(d / step_file, "r") as f:  # plain h5py, no MPI
            assert f.attrs["format"] == "h5flow-step" and f.attrs["version"] == 1
            assert f.attrs["step"] == s and f.attrs["time"] == pytest.approx(s * DT)
            assert f.attrs["layout"] == (layout or "n-n") and f.attrs["producers"] == 1
            data = f["mesh/cell/data"]
            assert data.shape == (expected.size, 1) and data.dtype == np.float32
            np.testing.assert_array_equal(data[:, 0], expected)
            if layout == "n-1":  # the shared file describes itself; a rank file has meta.json beside it
                assert f["mesh"].attrs["kind"] == "image"
                assert json.loads(f["meta"][()].tobytes()) == meta_json
            else:
                assert f.attrs["rank"] == 0
        assert meta_json["step"] == s
        assert [b["block_id"] for b in meta_json["meshes"]["mesh"]["blocks"]] == list(range(nblocks))


# -- 5. consumer groups ----------------------------------------------------------------------------------


def test_two_groups_each_get_every_step(actors: Actors) -> None:
    n = 8
    cfg_a = actors.config(queue_limit=2)
    cfg_b = actors.config(queue_limit=2, group="b")
    # both groups are registered at the start of the stream; group b is 6x slower than "default"
    p = actors.start("produce", cfg_a, "--steps", n)
    actors.register_groups("default", "b")
    a = actors.start("consume", cfg_a, "--check", "--steps", n, "--timeout", 10, "--sleep", 0.05)
    b = actors.start("consume", cfg_b, "--check", "--steps", n, "--timeout", 10, "--sleep", 0.3)
    rp, ra, rb = actors.wait(p), actors.wait(a), actors.wait(b)
    assert rp.rc == 0, rp
    assert all(ok for _, ok, _ in rp.published()) and len(rp.published()) == n, rp
    # the producer was held back by the slow group b (0.3 s a step), not only by the default group
    assert max(w for _, _, w in rp.published()) > 0.2, rp
    for r in (ra, rb):
        assert_ok_consumer(r, list(range(n)))
        assert r.checked() == list(range(n)) and r.discarded() == [], r
    groups = {g.stem: json.loads(g.read_text())["released_seq"] for g in (actors.root / "consumers").glob("*.json")}
    assert groups == {"default": n - 1, "b": n - 1}
    assert actors.step_dirs() == []


def test_gc_waits_for_every_group_and_a_group_resumes(actors: Actors) -> None:
    n = 6
    cfg_a = actors.config()
    cfg_b = actors.config(group="b")
    p = actors.start("produce", cfg_a, "--steps", n, "--sleep", 0.1)
    actors.register_groups("default", "b")
    a = actors.start("consume", cfg_a, "--steps", n, "--timeout", 10, "--sleep", 0.05)
    b = actors.start("consume", cfg_b, "--steps", n, "--timeout", 10, "--sleep", 0.1, "--max-steps", 2)
    rp, ra, rb = actors.wait(p), actors.wait(a), actors.wait(b)
    assert rp.rc == 0, rp
    assert_ok_consumer(ra, list(range(n)))
    assert rb.rc == 0 and rb.steps() == [0, 1] and rb.statuses() == ["stopped"], rb
    # group b released steps 0 and 1 only: everything after stays staged although "default" released it
    assert actors.step_dirs() == [f"step-{s:09d}" for s in range(2, n)]
    assert json.loads((actors.root / "consumers" / "b.json").read_text())["released_seq"] == 1
    # b comes back (after the producer ended): it resumes at its first unreleased step
    rb2 = actors.wait(actors.start("consume", cfg_b, "--check", "--steps", n, "--timeout", 10))
    assert_ok_consumer(rb2, list(range(2, n)))
    assert rb2.checked() == list(range(2, n)), rb2
    assert actors.step_dirs() == []


@pytest.mark.parametrize("actors", ["socket"], indirect=True)
def test_socket_two_groups_attached_first_each_get_every_step(actors: Actors) -> None:
    """The socket stream has no group files to register ahead: both groups attach before the producer
    starts, and the slower one (b) holds the producer back, the steps staying in memory for it."""
    n = 4
    cfg_a = actors.config(queue_limit=2)
    cfg_b = actors.config(queue_limit=2, group="b")
    # each consumer takes >= 0.3 s a step, so the other has attached before any step is released
    ready = [Path(actors.filename + f".ready-{g}") for g in ("a", "b")]
    a = actors.start("consume", cfg_a, "--check", "--steps", n, "--timeout", 20, "--sleep", 0.3, "--ready", ready[0])
    b = actors.start("consume", cfg_b, "--check", "--steps", n, "--timeout", 20, "--sleep", 0.5, "--ready", ready[1])
    actors.until("both consumers waiting for the stream", lambda: all(r.exists() for r in ready))
    for r in ready:
        r.unlink()
    p = actors.start("produce", cfg_a, "--steps", n)
    rp, ra, rb = actors.wait(p), actors.wait(a), actors.wait(b)
    assert rp.rc == 0, rp
    assert all(ok for _, ok, _ in rp.published()) and len(rp.published()) == n, rp
    assert max(w for _, _, w in rp.published()) > 0.2, rp  # held back by the slow group b
    for r in (ra, rb):
        assert_ok_consumer(r, list(range(n)))
        assert r.checked() == list(range(n)) and r.discarded() == [], r
    assert actors.stream_files() == []


# -- 6. n-n layout ---------------------------------------------------------------------------------------


def test_n_n_two_producer_ranks(actors: Actors) -> None:
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    n, nblocks = 3, 3
    cfg = actors.config(layout="n-n", keep="all", queue_limit=2)
    p, c = actors.run(("--steps", n, "--blocks", nblocks),
                      ("--check", "--steps", n, "--blocks", nblocks, "--timeout", 10), cfg, ranks=2)
    assert p.rc == 0, p
    assert_ok_consumer(c, list(range(n)))
    assert c.checked() == list(range(n)), c
    assert c.lines("STEP")[0][3] == "0,1,2"  # one consumer rank gets every block
    assert json.loads((actors.root / "stream.json").read_text())["layout"] == "n-n"
    sims = [Simulation(OscillatorConfig(shape=SHAPE, nblocks=nblocks, steps=n), r, 2) for r in range(2)]
    for s in range(n):
        d = actors.root / f"step-{s:09d}"
        assert sorted(x.name for x in d.iterdir()) == ["meta.json", "rank-00000.extents.json", "rank-00000.h5",
                                                       "rank-00001.extents.json", "rank-00001.h5"]
        owners = [b["owner"] for b in json.loads((d / "meta.json").read_text())["meshes"]["mesh"]["blocks"]]
        assert sorted(set(owners)) == [0, 1]
        for r, sim in enumerate(sims):
            sim.advance(s)
            expected = np.concatenate([b.arrays("cell")["data"].ravel() for b in sim.blocks()])
            with h5py.File(d / f"rank-{r:05d}.h5", "r") as f:
                assert f.attrs["rank"] == r and f.attrs["step"] == s and f.attrs["layout"] == "n-n"
                np.testing.assert_array_equal(f["mesh/cell/data"][:, 0], expected)


# -- 7. a consumer that starts first ---------------------------------------------------------------------


@pytest.mark.parametrize("actors", TRANSPORTS, indirect=True)
def test_consumer_before_producer_waits(actors: Actors) -> None:
    cfg = actors.config(queue_limit=2)
    # alone, a consumer only reports NOT_READY (never ERROR) when its timeout expires
    alone = actors.wait(actors.start("consume", cfg, "--timeout", 0.3))
    assert alone.rc == 0 and alone.statuses() == ["not_ready"], alone
    assert "no stream yet" in alone.out, alone
    assert actors.stream_files() == [], "a consumer must not create the stream's files"
    # started 1.5 s before the producer, within a 5 s timeout: it waits, then gets every step
    p, c = actors.run(("--steps", 5), ("--check", "--steps", 5, "--timeout", 5), cfg, consumer_first=1.5)
    assert p.rc == 0, p
    assert_ok_consumer(c, list(range(5)))
    assert c.checked() == list(range(5)), c
    assert "not_ready" not in c.out and "error" not in c.out, c


# -- regression: stream.json is announced only once every producer rank beats --------------------------

_SLOW_HEARTBEAT = """
import runpy, sys, time
import h5flow.transports.hdf5.writer as w
class SlowHeartbeat(w.Heartbeat):
    def __init__(self, *a, **k):
        time.sleep(0.5)  # a loaded node: the heartbeat helper starts late
        super().__init__(*a, **k)
w.Heartbeat = SlowHeartbeat
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_waiting_consumer_never_sees_a_stream_without_heartbeats(actors: Actors) -> None:
    """Formerly a consumer attaching between stream.json and hb/<rank> reported "rank 0 lost: never started"."""
    cfg = actors.config(heartbeat=5.0)
    c = actors.start("consume", cfg, "--steps", 3, "--timeout", 10)
    time.sleep(0.5)
    p = subprocess.Popen([sys.executable, "-c", _SLOW_HEARTBEAT, str(ACTORS), "produce", cfg, "--steps", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    actors.procs.append(p)
    rp, rc = actors.wait(p), actors.wait(c)
    assert rp.rc == 0, rp
    assert_ok_consumer(rc, [0, 1, 2])
