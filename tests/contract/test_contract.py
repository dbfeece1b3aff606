"""The transport contract: one suite run against every transport of the matrix (``h5flow.testing.matrix``).

Each case states what every transport must do, whatever its storage: M:N round trips deliver every element
written exactly once and unchanged, a stream name can be used again, a producer rank killed with SIGKILL is
an error at the consumer within a bound (a timeout where the transport has no liveness), a consumer killed
with SIGKILL or one that raises or exits leaves no producer waiting for ever, a producer rank that raises
or disagrees with the others ends every producer rank with an error naming it and reaches the consumer as
that reason, and a run whose interpreter finds ``libpython`` only through ``LD_LIBRARY_PATH`` works.

The cases that exercise the transport's own protocol run on every transport; those whose behaviour lives
above the transport (the Python API, the heartbeat's process) run on one representative of each kind.
Streams are short (3-12 steps of a few hundred bytes per rank) and heartbeats 0.5 s, so the suite stays fast.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from h5flow.testing.matrix import TransportCase, params

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

ACTOR = str(Path(__file__).with_name("contract_actor.py"))
HEARTBEAT = 0.5
#: seconds within which a peer's death must be reported (a few heartbeats, plus process start-up on a loaded
#: machine: the clock starts at the kill, after both jobs are running)
BOUND = 10.0
GROUP = "contract"


EVERY = params()


def some(*names: str) -> list[object]:
    return params(names)


# -- M:N round trips and re-runs, in one MPI job per transport ------------------------------------------------

RATIOS = [(2, 1), (1, 2), (2, 3)]


@pytest.mark.mpi(n=5, timeout=150)
@pytest.mark.parametrize("tc", EVERY)
def test_round_trips_deliver_every_element_once_and_a_name_runs_again(comm, mpi_tmp_path: Path,
                                                                      tc: TransportCase) -> None:
    """2:1, 1:2 and 2:3, each element checked against what was written; then 2:3 again on the name of the
    first run (a new reader must get the second run's values, never the first run's)."""
    from mpi4py import MPI

    import contract_actor as actor

    kw = actor.keywords(tc.name, {"heartbeat": 2.0, "queue_limit": 2})
    runs = [(m, n, f"mn{m}{n}", 0) for m, n in RATIOS] + [(2, 3, f"mn{RATIOS[0][0]}{RATIOS[0][1]}", 1)]
    for m, n, stream, run in runs:
        color = 0 if comm.rank < m else 1 if comm.rank < m + n else MPI.UNDEFINED
        sub = comm.Split(color, comm.rank)
        name = str(mpi_tmp_path / stream)
        if run == 1 and tc.name == "adios2-bp5":
            # BP5 keeps a finished run readable (post hoc): a reader started before the new producer may
            # attach to the old run, and then fails when the new run rewrites its files. Re-run it as
            # `h5flow run` does, after the transport's cleanup of the earlier run.
            if comm.rank == 0:
                _cleanup(name, kw)
            comm.Barrier()
        if color == 0:
            actor.produce(sub, name, kw, 3, run=run)
        elif color == 1:
            got = actor.consume(sub, name, kw, m, run=run, timeout=30)
            what = f"{tc.name} {m}:{n} run {run}"
            assert not got.problems, f"{what}: {got.problems}"
            assert (got.steps, got.status) == ([0, 1, 2], "end_of_stream"), f"{what}: {got}"
        if sub != MPI.COMM_NULL:
            sub.Free()
        comm.Barrier()


def _cleanup(name: str, kw: dict) -> None:
    from h5flow.config import TransportConfig
    from h5flow.transports import entry

    settings = dict(kw)
    kind = settings.pop("type", "hdf5")
    clean = entry(kind).cleanup
    if clean is not None:
        clean(TransportConfig.of(kind, name, **settings))


# -- separate jobs: a producer job and a consumer job, as users run them ---------------------------------------

@dataclass
class Job:
    proc: subprocess.Popen
    out: Path
    err: Path

    def text(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def lines(self, prefix: str) -> list[str]:
        return [ln for ln in self.out.read_text(errors="replace").splitlines() if ln.startswith(prefix)]

    def pid(self, role: str, rank: int) -> int:
        # (mpiexec may join two ranks' lines: no anchors)
        m = re.search(rf"PID {role} {rank} (\d+)", self.out.read_text(errors="replace"))
        assert m, f"no pid of {role} rank {rank}: {self.text()}"
        return int(m.group(1))

    def wait_for(self, pattern: str, seconds: float) -> None:
        deadline = time.time() + seconds
        while not re.search(pattern, self.out.read_text(errors="replace"), re.M):
            assert self.proc.poll() is None or re.search(pattern, self.out.read_text(errors="replace"), re.M), \
                f"ended (rc {self.proc.returncode}) before {pattern!r}: {self.text()}"
            assert time.time() < deadline, f"no {pattern!r} within {seconds} s: {self.text()}"
            time.sleep(0.05)

    def ends_within(self, seconds: float) -> int | None:
        """The exit status if the job ends within ``seconds``, else None (the job is left running)."""
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return None


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for j in started:
        if j.proc.poll() is None:
            os.killpg(j.proc.pid, signal.SIGKILL)
        j.proc.wait()


def start(jobs: list[Job], tmp: Path, role: str, tc: TransportCase, ranks: int, *args: object,
          settings: dict | None = None, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()) -> Job:
    label = f"{role}{len(jobs)}"
    s = {"heartbeat": HEARTBEAT, **(settings or {})}
    cmd = [*prefix, "mpiexec", "-n", str(ranks), sys.executable, ACTOR, role, tc.name, str(tmp / "s"),
           "--settings", json.dumps(s), *map(str, args)]
    out, err = tmp / f"{label}.out", tmp / f"{label}.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, start_new_session=True, env=env)
    jobs.append(Job(proc, out, err))
    return jobs[-1]


def failures(job: Job) -> dict[int, str]:
    """Rank → the message of the exception that ended it (``FAILED rank R: ...`` lines; no anchor: mpiexec may
    join one rank's line to the middle of another's traceback line, or another rank's line to its end)."""
    # a rank's line may also run on into another rank's (each writes its line and its newline apart)
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"FAILED rank (\d+): (.*?)(?=FAILED rank \d+: |$)", job.text(), re.M)}


@pytest.mark.parametrize("tc", EVERY)
def test_killed_producer_rank_is_an_error_at_the_consumer(tmp_path: Path, jobs: list[Job], tc: TransportCase) -> None:
    """kill -9 of producer rank 1 of 2 mid-stream: the consumer stops within a bound, with "producer rank R
    lost" where the transport has liveness (R may be 0: mpiexec takes the job's other ranks down with it) and
    a timeout or an error where it has none; it never reports a clean end."""
    timeout = 4.0
    consumer = start(jobs, tmp_path, "consume", tc, 1, "--producers", 2, "--steps", 40, "--timeout", timeout)
    producer = start(jobs, tmp_path, "produce", tc, 2, "--steps", 40, "--sleep", 0.2)
    consumer.wait_for(r"^GOT 1$", 60)
    os.kill(producer.pid("produce", 1), signal.SIGKILL)
    killed = time.time()
    rc = consumer.ends_within(BOUND + timeout)
    assert rc is not None, f"{tc.name}: the consumer still runs {BOUND + timeout:g} s after the kill: {consumer.text()}"
    took = time.time() - killed
    assert rc != 0 and not consumer.lines("END end_of_stream"), consumer.text()
    why = failures(consumer).get(0, "")
    if tc.liveness:
        assert re.search(r"producer rank \d+ lost", why), f"{tc.name}: {consumer.text()}"
        assert took < BOUND, f"{tc.name}: reported after {took:.1f} s"
    else:
        assert "StreamTimeout" in why or "StreamError" in why, f"{tc.name}: {consumer.text()}"


def _dead_group_named(text: str) -> bool:
    """A producer line that names the consumer group and says it stopped (lost, dead, no heartbeat)."""
    return any(GROUP in ln and re.search(r"\b(lost|dead|died|stopped|no heartbeat|not beating)\b", ln)
               for ln in text.splitlines())


@pytest.mark.parametrize("tc", some("hdf5-n-n", "hdf5-n-1", "hdf5-log", "socket", "dirstream"))
def test_killed_consumer_never_leaves_the_producer_waiting(tmp_path: Path, jobs: list[Job], tc: TransportCase) -> None:
    """kill -9 of the consumer while the producer is held by ``queue_limit``: with ``dead_consumer="error"`` the
    producer stops within a bound with an error naming the group (a transport without a queue never waits)."""
    settings = {"queue_limit": 2, "dead_consumer": "error", "group": GROUP}
    consumer = start(jobs, tmp_path, "consume", tc, 1, "--producers", 2, "--steps", 12, settings=settings)
    producer = start(jobs, tmp_path, "produce", tc, 2, "--steps", 12, "--sleep", 0.05, settings=settings)
    consumer.wait_for(r"^GOT 1$", 60)
    os.kill(consumer.pid("consume", 0), signal.SIGKILL)
    rc = producer.ends_within(BOUND)
    assert rc is not None, f"{tc.name}: the producer still waits {BOUND:g} s after its consumer died: {producer.text()}"
    if tc.queue:
        assert rc != 0 and _dead_group_named(producer.text()), f"{tc.name}: {producer.text()}"
    else:
        assert rc == 0, producer.text()


@pytest.mark.parametrize("tc", some("hdf5-n-n", "socket"))
def test_killed_consumer_with_the_default_policy_is_reported_by_the_producer(tmp_path: Path, jobs: list[Job],
                                                                             tc: TransportCase) -> None:
    """The default policy keeps waiting (a restarted consumer resumes), but says so within a bound: which group
    stopped."""
    settings = {"queue_limit": 2, "group": GROUP}
    consumer = start(jobs, tmp_path, "consume", tc, 1, "--producers", 1, "--steps", 12, settings=settings)
    # paced, so that the kill lands mid-stream (a consumer as fast as its producer could take all 12 steps first)
    producer = start(jobs, tmp_path, "produce", tc, 1, "--steps", 12, "--sleep", 0.3, settings=settings)
    consumer.wait_for(r"^GOT 1$", 60)
    os.kill(consumer.pid("consume", 0), signal.SIGKILL)
    deadline = time.time() + BOUND
    while not _dead_group_named(producer.text()) and producer.proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert _dead_group_named(producer.text()), f"{tc.name}: nothing said within {BOUND:g} s: {producer.text()}"


HOW = {"hdf5-n-n": "raise", "socket": "exit"}


@pytest.mark.parametrize("tc", some(*HOW))
def test_consumer_rank_that_raises_or_exits_ends_both_jobs(tmp_path: Path, jobs: list[Job], tc: TransportCase) -> None:
    """Consumer rank 1 of 2 raises (or calls ``sys.exit(0)``) after step 1: the whole consumer job ends within a
    bound, non-zero, the other rank's error naming rank 1; the producer (``dead_consumer="error"``) ends too."""
    settings = {"queue_limit": 2, "dead_consumer": "error", "group": GROUP}
    fault = ["--raise-at", 1] if HOW[tc.name] == "raise" else ["--exit-at", 1]
    consumer = start(jobs, tmp_path, "consume", tc, 2, "--producers", 1, "--steps", 10, "--raise-rank", 1, *fault,
                     settings=settings)
    producer = start(jobs, tmp_path, "produce", tc, 1, "--steps", 10, settings=settings)
    rc = consumer.ends_within(BOUND + 20)
    assert rc is not None, f"{tc.name}: the consumer job still runs: {consumer.text()}"
    assert rc != 0 and not consumer.lines("END end_of_stream"), consumer.text()
    assert "rank 1" in failures(consumer).get(0, ""), f"rank 0 does not name rank 1: {consumer.text()}"
    rc = producer.ends_within(BOUND)
    assert rc is not None and rc != 0, f"{tc.name}: producer rc {rc}: {producer.text()}"


def _one_failing_rank(tmp_path: Path, jobs: list[Job], tc: TransportCase, fault: list[object], reason: str,
                      names_rank: bool = True) -> None:
    consumer = start(jobs, tmp_path, "consume", tc, 1, "--producers", 2, "--steps", 6, "--timeout", 30)
    # the consumer waits for this run before it starts: a reader opened after a failed run waits for the next one
    consumer.wait_for(r"^OPEN$", 60)
    producer = start(jobs, tmp_path, "produce", tc, 2, "--steps", 6, *fault)
    rc = producer.ends_within(BOUND + 20)
    assert rc is not None, f"{tc.name}: the producer job still runs: {producer.text()}"
    said = failures(producer)
    assert rc != 0 and set(said) == {0, 1}, f"{tc.name}: every producer rank must fail: {producer.text()}"
    assert reason in said[0] and ("rank 1" in said[0] or not names_rank), f"{tc.name}: rank 0's error: {said[0]}"
    rc = consumer.ends_within(BOUND)
    assert rc is not None and rc != 0, f"{tc.name}: consumer rc {rc}: {consumer.text()}"
    why = failures(consumer).get(0, "")
    assert re.search(r"producer rank \d+ failed", why) and reason in why, \
        f"{tc.name}: the consumer's error lacks the reason: {consumer.text()}"


@pytest.mark.parametrize("tc", some("hdf5-n-n", "socket"))
def test_one_producer_rank_that_raises_fails_every_rank_with_its_reason(tmp_path: Path, jobs: list[Job],
                                                                        tc: TransportCase) -> None:
    _one_failing_rank(tmp_path, jobs, tc, ["--raise-rank", 1, "--raise-at", 2], "raises inside step 2")


@pytest.mark.parametrize("tc", some("hdf5-n-1"))
def test_producer_ranks_that_disagree_fail_every_rank_with_the_reason(tmp_path: Path, jobs: list[Job],
                                                                      tc: TransportCase) -> None:
    """The last of 2 ranks gives another global shape at step 2 than rank 0."""
    _one_failing_rank(tmp_path, jobs, tc, ["--disagree-at", 2], "disagree", names_rank=False)


# -- an interpreter that finds libpython only through LD_LIBRARY_PATH -----------------------------------------

HIDE_AND_RUN = r"""
set -u
for f in $HIDE; do [ -e "$f" ] && mount --bind /dev/null "$f"; done
if env -i PATH="$PATH" "$PY" -c pass 2>/dev/null; then echo "NOT HIDDEN: $PY starts without LD_LIBRARY_PATH"; exit 97; fi
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mpiexec -n 1 "$PY" "$ACTOR" consume "$CASE" "$NAME" --producers 2 --steps 8 --timeout 30 \
    --settings '{"heartbeat": 0.5}' > "$WORK/c.out" 2> "$WORK/c.err" &
consumer=$!
mpiexec -n 2 "$PY" "$ACTOR" produce "$CASE" "$NAME" --steps 8 --sleep 0.25 --settings '{"heartbeat": 0.5}' \
    > "$WORK/p.out" 2> "$WORK/p.err"
echo "PRODUCER $?"
wait $consumer
echo "CONSUMER $?"
"""


def _libpythons() -> list[str]:
    """Every libpython of this interpreter's version the loader finds without LD_LIBRARY_PATH."""
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}"
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    paths = {ln.rsplit("=>", 1)[1].strip() for ln in found.splitlines() if name in ln and "=>" in ln}
    here = Path(os.path.realpath(sys.executable)).parent.parent / "lib"
    paths |= {str(p) for p in here.glob(f"{name}.so*")}
    return sorted(p for p in paths if os.path.exists(p))


def _can_unshare() -> str | None:
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return "needs root and `unshare -m` (a mount namespace to hide libpython in)"
    if not _libpythons():
        return "this interpreter links libpython statically: there is nothing to hide"
    return None


@pytest.mark.skipif(_can_unshare() is not None, reason=str(_can_unshare()))
@pytest.mark.parametrize("tc", some("hdf5-n-n"))
def test_a_run_whose_interpreter_needs_ld_library_path(tmp_path: Path, tc: TransportCase) -> None:
    """In a mount namespace where every libpython the loader finds by itself is /dev/null, the interpreter
    starts only through LD_LIBRARY_PATH (a relocated stack, most sites' `module load python`): a stream of 8
    steps, over 2 s with a 0.5 s heartbeat, is delivered whole and both jobs exit 0."""
    import shutil

    hide = _libpythons()
    libdir = tmp_path / "lib"
    libdir.mkdir()
    for p in hide:
        if ".so." in Path(p).name:
            shutil.copy2(p, libdir / Path(p).name)
    env = {**os.environ, "HIDE": " ".join(hide), "PY": sys.executable, "LIBDIR": str(libdir), "ACTOR": ACTOR,
           "CASE": tc.name, "NAME": str(tmp_path / "s"), "WORK": str(tmp_path)}
    proc = subprocess.run(["unshare", "-m", "bash", "-c", HIDE_AND_RUN], env=env, capture_output=True, text=True,
                          timeout=120)
    out = {p.name: p.read_text() for p in tmp_path.glob("[cp].*") if p.is_file()}
    assert "PRODUCER 0" in proc.stdout and "CONSUMER 0" in proc.stdout, (proc.stdout, proc.stderr, out)
    assert [int(x) for x in re.findall(r"^GOT (\d+)$", out["c.out"], re.M)] == list(range(8)), out
    assert "END end_of_stream" in out["c.out"], out
