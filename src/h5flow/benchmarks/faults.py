"""Fault injection: randomized trials of faults over the hdf5 and socket transports, classified by what arrived.

Each trial runs the oscillator on 2-3 producer ranks (``mpiexec``) and one or two consumer groups (one
``_fault_actor`` process each) through a transport of the matrix (:mod:`h5flow.testing.matrix`), injects one
fault, and checks what each group received against what the producers published: every block's CRC-32
against the block computed here, every step published against the steps each group received or was told
about (discarded, missed, dropped for a lost group, or a clear error), the exit status of every process, and
a wall-time limit. Fault kinds:

* ``kill``: ``kill -9`` of a random producer rank or of a group's consumer, a random moment after a random
  step was published; a killed consumer is restarted after a random delay (0-2 s), as an operator would.
* ``full``: the stream's directory on a tmpfs the trial mounts (``unshare -m`` + ``mount -t tmpfs``, as root)
  with room for a few steps, while the consumers hold their steps (they take 0.5 s per step), so it fills
  mid-stream; without mount rights, ``RLIMIT_FSIZE`` on the producers instead. hdf5 only.
* ``full-mid-stream``: the stream on a tmpfs with room to spare; a random moment after a random step was
  published, a file of another job takes every byte left, and stays, while producers write and consumers save
  their state: the stream must go on with the room its released steps free (a consumer that cannot save its
  state deletes what it released) or stop with a clear error. A producer that waits for room must say who holds
  it (after ten heartbeats); the trial then removes the file, as an operator told so would. hdf5 only, and only
  with mount rights (``not tested`` without them).
* ``foreign-owner``: before the run, another user (uid 65534, as root) owns the stream's artefact in a sticky
  shared directory: the hdf5 staging directory (mode 0777 or 0755; producer and consumers run) or the socket
  contact file (0644, naming another run's endpoint; the consumers run alone: the trial runs as root, and a
  root producer would replace the file, which another user's sticky directory does not let an ordinary one
  do). The only acceptable outcome is a clear error naming the refusal; a stream that used the artefact is
  ``trusted`` (bad). Without root the artefact cannot be made: ``not tested``.
* ``duplicate``: two producers of the same stream name opening at the same instant.
* ``hostile``: while the stream runs, requests with the token but malformed bodies (``1e400``, deep nesting,
  wrong types, random bytes) and floods of requests without the token. socket only.
* ``dead-consumer``: ``kill -9`` of one group's consumer, never restarted, with ``queue_limit=2`` and the
  stream's ``dead_consumer`` policy ``drop`` or ``error``: the producer must go on (naming the steps the group
  lost) or stop with an error, never wait for ever.
* ``rank-error``: one producer rank raises inside a step, or puts blocks that disagree with the other ranks'
  (another dtype); no rank aborts the MPI job itself, so what the other ranks and the consumers do is the
  library's own behaviour. Every other producer rank must fail with an error of its own, and a consumer
  that stops must be told the reason (``producer rank R failed: ...``): one that only hears the producer
  was lost is counted as a crash.

A fault that could not be injected is not a result: a kill whose target had already exited, a full-storage
trial whose file system never filled or was full before the first step. Such a trial is tried again with
new random parameters (up to ``RETRIES`` times) and, if the fault still did not happen, reported as ``not
tested``, never as ``ok``.

Outcome of a trial (the worst that applies): ``trusted`` (``foreign-owner``: another user's artefact was used
instead of refused), ``hang`` (over its deadline, then killed), ``crash`` (a process
the trial did not kill exited non-zero without a clear error: a traceback of another type, a signal, an MPI
abort), ``corrupt`` (a block whose checksum differs), ``duplicated`` (a step delivered twice to one consumer
group, or re-delivered after it was released, or two producers both serving one stream), ``lost`` (a published
step neither received nor reported to a group while every surviving process ended normally), ``clear error``
(a surviving process failed with a TransportError, or an OSError of an actionable cause such as no space left
on device) or ``ok`` (everything published arrived, every process ended normally); ``not tested`` when the
fault did not happen. ``ok`` and ``clear error`` are the acceptable outcomes of a fault.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from h5flow.benchmarks._args import csv_list
from h5flow.testing.matrix import case as matrix_case
from h5flow.testing.matrix import cases as matrix_cases

KINDS = ("kill", "full", "full-mid-stream", "foreign-owner", "duplicate", "hostile", "dead-consumer", "rank-error")
#: the matrix's transports whose producers and consumers watch each other (a heartbeat and a queue)
TRANSPORTS = tuple(c.name for c in matrix_cases() if c.liveness and c.queue)
DEFAULT_TRANSPORTS = ("hdf5-n-n", "socket")
NOT_APPLICABLE = {("full", "socket"): "the socket transport stores nothing",
                  ("full-mid-stream", "socket"): "the socket transport stores nothing",
                  ("hostile", "hdf5"): "the hdf5 transport has no request protocol"}  # (kind, transport type)
BAD = ("lost", "duplicated", "corrupt", "hang", "crash", "trusted")
OUTCOMES = ("ok", "clear error", *BAD, "not tested")
WORST_FIRST = ("trusted", "hang", "crash", "corrupt", "duplicated", "lost", "clear error", "ok")
#: what a refusal of another user's artefact says (transports/_ownership.py)
REFUSAL = re.compile(r"refusing the stream|owned by .*not by you|writable by group and others")
FOREIGN_UID = 65534  # nobody
CLEAR_TYPES = ("TransportError", "StreamClaimed", "StreamError", "RankFailed")  # RankFailed: the agreed error, naming the rank
CLEAR_OS_CAUSES = ("No space left on device", "File too large", "Disk quota exceeded", "Permission denied")
QUICK_SEED = 81
QUICK_TRIALS = {k: 1 for k in KINDS}
RETRIES = 2  # further tries of a trial whose fault did not happen
STEPS = 8
ACTOR = [sys.executable, "-m", "h5flow.benchmarks._fault_actor"]


@dataclass
class TrialSpec:
    kind: str
    transport: str  # a matrix case name (hdf5-n-n, socket, ...)
    index: int
    seed: int
    workdir: str
    steps: int = STEPS
    shape: tuple[int, int, int] = (16, 16, 16)
    blocks: int = 4
    producers: int = 2
    groups: int = 1
    heartbeat: float = 0.5
    deadline: float = 60.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Proc:
    label: str  # producer, producer#2, consumer-g0, consumer-g0#2 (restarted), ...
    cmd: list[str]
    out_path: str
    err_path: str
    rc: int | None = None
    killed: bool = False  # by the trial (its fault), not a failure
    popen: Any = None
    faulted: bool = False  # a rank of it failed on purpose (rank-error): its non-zero exit is the fault

    def out(self) -> str:
        return Path(self.out_path).read_text(errors="replace") if Path(self.out_path).exists() else ""

    def err(self) -> str:
        return Path(self.err_path).read_text(errors="replace") if Path(self.err_path).exists() else ""

    @property
    def group(self) -> str:
        """The consumer group of a consumer process (``consumer-g1#2`` → ``g1``; ``consumer``: the default group)."""
        return self.label.split("-", 1)[1].split("#")[0] if self.label.startswith("consumer-") else "default"


@dataclass
class Outcome:
    kind: str
    transport: str
    index: int
    seed: int
    outcome: str
    fault: str
    detail: str
    wall_s: float
    published: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    corrupt: list[int] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    exits: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1  # tries it took to inject the fault (a trial is retried when it did not happen)
    params: dict[str, Any] = field(default_factory=dict)


# -- one trial ------------------------------------------------------------------------------------

def trial_params(kind: str, transport: str, rng: random.Random, producers: int, steps: int = STEPS) -> dict[str, Any]:
    if kind == "kill":
        target = rng.choice([f"producer {r}" for r in range(producers)] + ["consumer"])
        return {"target": target, "after_step": rng.randrange(0, steps - 2), "delay": round(rng.uniform(0, 0.3), 3),
                "restart_after": round(rng.uniform(0, 2), 3)}
    if kind == "full":
        return {"steps_fit": rng.choice([2, 3, 4, 5])}
    if kind == "full-mid-stream":
        # at least 4 steps are left to write after the fill (0.1 s apart at least), so the producer meets it
        return {"steps_fit": rng.choice([4, 5, 6]), "after_step": rng.randrange(0, steps - 4),
                "delay": round(rng.uniform(0, 0.2), 3), "sleep": rng.choice([0.05, 0.3])}
    if kind == "foreign-owner":
        return {"mode": rng.choice(["0777", "0755"])}
    if kind == "hostile":
        return {"fuzz_seed": rng.randrange(1 << 30)}
    if kind == "dead-consumer":
        return {"policy": rng.choice(["drop", "error"]), "after_step": rng.randrange(0, 3),
                "delay": round(rng.uniform(0, 0.3), 3)}
    if kind == "rank-error":
        return {"how": rng.choice(["raise", "disagree"]), "rank": rng.randrange(producers),
                "at": rng.randrange(1, steps - 2)}
    return {}


def transport_json(spec: TrialSpec, stream: Path) -> str:
    more: dict[str, Any] = {"queue_limit": 8}
    if spec.transport == "socket":  # the trials count the steps a killed consumer's group loses (its steps dropped)
        more["dead_consumer"] = "drop"
    if spec.kind == "dead-consumer":
        more = {"queue_limit": 2, "dead_consumer": spec.params["policy"]}
    cfg = matrix_case(spec.transport).keywords(spec.heartbeat, **more)
    return json.dumps({"filename": str(stream), **cfg})


def _start(proc: Proc, env: dict[str, str], preexec: Callable[[], None] | None = None) -> Proc:
    with open(proc.out_path, "w") as out, open(proc.err_path, "w") as err:
        proc.popen = subprocess.Popen(proc.cmd, stdout=out, stderr=err, start_new_session=True, env=env,
                                      preexec_fn=preexec)
    return proc


def _pid_of(proc: Proc, role: str, rank: int) -> int | None:
    m = re.search(rf"PID {role} {rank} (\d+)", proc.out())  # no anchors: mpiexec may join two ranks' lines
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_rank(proc: Proc, role: str, rank: int) -> str | None:
    """``kill -9`` of one rank of ``proc``; the reason it could not be done (None: done)."""
    pid = _pid_of(proc, role, rank)
    if proc.popen.poll() is not None:
        return f"{proc.label} had already exited"
    if pid is None:
        return f"{proc.label} rank {rank} had not started"
    if not _alive(pid):
        return f"{proc.label} rank {rank} (pid {pid}) had already exited"
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return f"{proc.label} rank {rank} (pid {pid}) had already exited"
    proc.killed = True
    return None


def _fsize_limit(nbytes: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


def _published(proc: Proc) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^PUBLISHED (\d+) 1$", proc.out(), re.M)]


def run_trial(spec: TrialSpec) -> Outcome:
    """Run one trial in ``spec.workdir`` (which must exist); the stream lives in its ``fs`` (for ``full``, the small
    file system mounted there)."""
    work = Path(spec.workdir)
    (work / "fs").mkdir(exist_ok=True)  # the stream's directory: the small file system of a ``full`` trial
    stream = work / "fs" / "stream"
    cfg = transport_json(spec, stream)
    osc = ["--steps", str(spec.steps), "--shape", *map(str, spec.shape), "--blocks", str(spec.blocks)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = spec.params
    preexec = _fsize_limit(p["fsize"]) if spec.kind == "full" and p.get("fsize") else None
    procs: list[Proc] = []

    def producer(label: str, *extra: str) -> Proc:
        cmd = ["mpiexec", "-n", str(spec.producers), *ACTOR, "produce", cfg, *osc, "--sleep", "0.1", *extra]
        return _start(Proc(label, cmd, str(work / f"{label}.out"), str(work / f"{label}.err")), env, preexec)

    def consumer(label: str) -> Proc:
        group = label.split("-", 1)[1].split("#")[0]
        gcfg = json.dumps({**json.loads(cfg), "group": group})
        pause = 0.5 if spec.kind == "full" else p.get("sleep", 0.05)
        cmd = [*ACTOR, "consume", gcfg, "--shape", *map(str, spec.shape), "--blocks", str(spec.blocks),
               "--timeout", "15", "--sleep", str(pause)]
        return _start(Proc(label, cmd, str(work / f"{label}.out"), str(work / f"{label}.err")), env)

    t0 = time.time()
    fault = spec.kind
    if spec.kind == "foreign-owner":
        why, fault = _plant_foreign(spec, stream)
        if why:
            return Outcome(spec.kind, spec.transport, spec.index, spec.seed, "not tested", fault,
                           f"the fault did not happen: {why}", 0.0, params=dict(p))
    filler = _Filler(work / "fs" / "filler", p) if spec.kind == "full-mid-stream" else None
    if spec.kind == "duplicate":
        go = work / "go"
        procs += [producer("producer", "--start-when", str(go)), producer("producer#2", "--start-when", str(go))]
        fault = "two producers opening together"
        # both set up (imports, MPI, the simulation: READY on their output), then the file both poll for makes them
        # open their writers together
        while (not all(re.search(r"^READY$", x.out(), re.M) for x in procs)
               and all(x.popen.poll() is None for x in procs) and time.time() - t0 < 15):
            time.sleep(0.01)
        go.touch()
        # the consumer comes once one producer gave up (or after 15 s): a producer waits for a consumer before it
        # closes, so the first cannot finish before the second opens, however late that one starts
        while all(x.popen.poll() is None for x in procs) and time.time() - t0 < 15:
            time.sleep(0.05)
        procs.insert(0, consumer("consumer-g0"))
    else:
        procs += [consumer(f"consumer-g{g}") for g in range(spec.groups)]
        extra: list[str] = []
        if spec.kind == "rank-error":
            extra = ["--fail-rank", str(p["rank"]), "--fail-at", str(p["at"]), "--fail-how", p["how"]]
            fault = f"producer rank {p['rank']} {'raises' if p['how'] == 'raise' else 'puts float64 blocks'} " \
                    f"in step {p['at']}"
        if spec.kind != "foreign-owner" or matrix_case(spec.transport).type != "socket":
            procs.append(producer("producer", *extra))  # (a root producer would replace the contact file: the
            procs[-1].faulted = spec.kind == "rank-error"  # consumers alone meet another user's)
    prod = next((x for x in procs if x.label == "producer"), procs[0])
    hostile: _Intruder | None = None
    if spec.kind == "hostile":
        hostile = _Intruder(work, stream, p["fuzz_seed"], env)
        fault = "malformed requests with the token, floods without it"
    if spec.kind == "full":
        fault = (f"tmpfs of {p['size_kib']} KiB (room for about {p['steps_fit']} steps)" if not p.get("fsize")
                 else f"RLIMIT_FSIZE {p['fsize']} bytes")
    killing = spec.kind in ("kill", "dead-consumer")
    target = p.get("target", "consumer") if killing else ""
    killed_at: float | None = None
    reached_at: float | None = None
    not_tested = ""
    restarted = False
    deadline = t0 + spec.deadline
    hang = False
    while True:
        now = time.time()
        if killing and killed_at is None and not not_tested:
            if reached_at is None and p["after_step"] in _published(prod):
                reached_at = now
            elif reached_at is None and prod.popen.poll() is not None:
                if prod.popen.returncode == 0:
                    not_tested = f"the producer ended before step {p['after_step']} was published"
                else:  # it failed by itself first: that is the result, classified as such
                    killed_at, restarted = now, True
                    fault = f"{spec.kind}: not injected, the producer failed before step {p['after_step']}"
            if reached_at is not None and now - reached_at >= p["delay"]:
                role, _, rank = target.partition(" ")
                victim = prod if role == "producer" else procs[0]
                why = kill_rank(victim, "produce" if role == "producer" else "consume", int(rank or 0))
                fault = f"kill -9 {'consumer of group g0' if role == 'consumer' else target} " \
                        f"{p['delay']:.2f} s after step {p['after_step']} was published"
                if spec.kind == "dead-consumer":
                    fault += f", never restarted (dead_consumer=\"{p['policy']}\")"
                if why:
                    not_tested = why
                else:
                    killed_at = now
        if filler is not None and not not_tested:
            not_tested = filler.poll(now, prod, procs)
        if not_tested:
            break
        if (spec.kind == "kill" and killed_at is not None and not restarted and target == "consumer"
                and procs[0].popen.poll() is not None and now - killed_at >= p["restart_after"]):
            procs.append(consumer("consumer-g0#2"))
            restarted = True
            fault += f", restarted after {p['restart_after']:.2f} s"
        if all(x.popen.poll() is not None for x in procs) and (
                not killing or killed_at is not None and (restarted or target != "consumer"
                                                          or spec.kind == "dead-consumer")):
            break
        if now > deadline:
            hang = True
            break
        if hostile is not None:
            hostile.poll()
        time.sleep(0.05)
    if hostile is not None:
        hostile.stop()
        if hostile.crashed:
            fault += f" (the intruder's own process crashed {hostile.crashed} time(s) and was restarted)"
    for x in procs:
        if x.popen.poll() is None:
            os.killpg(x.popen.pid, signal.SIGKILL)
        x.rc = x.popen.wait()
    wall = time.time() - t0
    if not not_tested and spec.kind == "full":
        not_tested = _not_filled(procs)
    if filler is not None:
        filler.remove()
        fault = filler.fault or fault
        not_tested = not_tested or filler.not_tested(procs)
    if not_tested:
        return Outcome(spec.kind, spec.transport, spec.index, spec.seed, "not tested", fault,
                       f"the fault did not happen: {not_tested}", wall, params=dict(p),
                       exits={x.label: x.rc for x in procs})
    if spec.kind == "full":
        m = re.search(r"step (\d+) was not published: (no room|the file system is full|a file size limit)",
                      "".join(x.err() for x in procs))
        fault += f"; full from step {m.group(1)} on" if m else ""
    out = classify(spec, procs, hang, fault, wall, hostile.sent if hostile else 0)
    out.params = dict(p)
    return judge_foreign(out) if spec.kind == "foreign-owner" else out


def judge_foreign(out: Outcome) -> Outcome:
    """``foreign-owner``: only a refusal is acceptable; ``ok``, or a clear error about something else, means the
    other user's artefact was used (``trusted``)."""
    if out.outcome in ("ok", "clear error") and not any(REFUSAL.search(m) for m in out.messages):
        out.outcome = "trusted"
        out.detail = f"another user's artefact was used, not refused: {out.detail}"
    return out


def _plant_foreign(spec: TrialSpec, stream: Path) -> tuple[str, str]:
    """``foreign-owner``: another user's artefact where the stream will be: (why it could not be made or "", the
    fault's text). The stream's directory becomes a sticky shared one (like /tmp or /dev/shm)."""
    kind = matrix_case(spec.transport).type
    shared = stream.parent
    if os.geteuid() != 0:
        return "making another user's files needs root (chown)", "foreign-owner: not made"
    os.chmod(shared, 0o1777)
    if kind == "hdf5":
        target = Path(f"{stream}.h5flow")
        target.mkdir(mode=0o700)
        os.chmod(target, int(spec.params["mode"], 8))
        fault = f"the staging directory {target.name} made by uid {FOREIGN_UID}, mode {spec.params['mode']}"
    elif kind == "socket":
        from h5flow.transports.socket.contact import contact_path

        target = contact_path(str(stream))
        target.write_text(json.dumps({"run_id": "foreign", "token": "f" * 64, "producers": 1, "heartbeat": 1.0,
                                      "ranks": [{"rank": 0, "endpoint": "tcp://127.0.0.1:9", "host": "elsewhere",
                                                 "pid": 1, "local": ""}], "created": time.time(),
                                      "format": "h5flow-socket", "version": 1}))
        os.chmod(target, 0o644)
        fault = f"the contact file {target.name} made by uid {FOREIGN_UID} (0644), naming another run"
    else:
        return f"no foreign artefact is known for transport type {kind!r}", "foreign-owner: not made"
    os.chown(target, FOREIGN_UID, FOREIGN_UID)
    return "", fault


class _Filler:
    """``full-mid-stream``: once step ``after_step`` was published and ``delay`` passed, a file (another job's)
    takes every byte left on the trial's tmpfs; it is removed once a producer said who holds the room."""

    def __init__(self, path: Path, params: dict[str, Any]) -> None:
        self.path, self.p = path, params
        self.reached: float | None = None
        self.filled = -1  # bytes the file took; -1: not filled yet
        self.removed = False
        self.fault = ""

    def poll(self, now: float, prod: Proc, procs: list[Proc]) -> str:
        """One look; the reason the fault cannot happen ("" while it can or did)."""
        if self.filled < 0:
            if self.reached is None and self.p["after_step"] in _published(prod):
                self.reached = now
            elif self.reached is None and prod.popen.poll() is not None:
                return f"the producer ended before step {self.p['after_step']} was published"
            if self.reached is not None and now - self.reached >= self.p["delay"]:
                self.filled = _fill(self.path)
                self.fault = (f"another file took the {self.filled // 1024} KiB left on the tmpfs "
                              f"{self.p['delay']:.2f} s after step {self.p['after_step']} was published")
        elif not self.removed and any("s for room in" in x.err() for x in procs if x.label.startswith("producer")):
            self.remove()
            self.fault += "; removed after the producer said who holds the room"
        return ""

    def remove(self) -> None:
        if self.filled >= 0 and not self.removed:
            self.path.unlink(missing_ok=True)
            self.removed = True

    def not_tested(self, procs: list[Proc]) -> str:
        if self.filled < 0:
            return f"the file system was never filled (step {self.p['after_step']} not reached)"
        text = "".join(x.err() for x in procs)
        if not re.search(r"no room for it|No space left|the file system is full", text):
            return "nothing wrote to the file system while it was full (the stream had ended)"
        return ""


def _fill(path: Path) -> int:
    """Write ``path`` until the file system is full (down to its last 512 bytes); the bytes written."""
    n, size = 0, 65536
    with open(path, "wb", buffering=0) as f:
        while size >= 512:
            try:
                n += f.write(b"\0" * size)
            except OSError:
                size //= 2
    return n


def _not_filled(procs: list[Proc]) -> str:
    """Why a full-storage trial did not test a file system that fills mid-stream ("" when it did)."""
    text = "".join(x.err() for x in procs)
    full = re.search(r"no room for it|the file system is full|No space left|File too large", text)
    published = {s for x in procs if x.label.startswith("producer") for s in _published(x)}
    if not full:
        return "the file system never filled"
    if not published:
        return "the file system was full before the first step (not mid-stream)"
    return ""


# -- classification ---------------------------------------------------------------------------------

def reference(spec: TrialSpec) -> dict[int, dict[int, int]]:
    """step -> block id -> CRC-32 of the block's cell array (ghosts included), computed here."""
    from h5flow.benchmarks._fault_actor import block_crc
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    sim = Simulation(OscillatorConfig(shape=spec.shape, nblocks=spec.blocks, steps=spec.steps), 0, 1)
    out = {}
    for s in range(spec.steps):
        sim.advance(s)
        out[s] = {b.block_id: block_crc(b.arrays("cell")["data"]) for b in sim.blocks()}
    return out


def _lists(text: str, label: str) -> list[int]:
    out = []
    for m in re.finditer(rf"^{label} ([0-9,]*)$", text, re.M):
        out += [int(s) for s in m.group(1).split(",") if s]
    return out


def _dropped_steps(text: str, group: str | None = None) -> list[int]:
    """Steps named in 'were dropped for consumer group 'G' ... steps 1-5, 7 (' messages (of ``group`` only, if
    given)."""
    out: list[int] = []
    for m in re.finditer(r"were dropped for consumer group '?([\w-]*)'? .*?without being taken: steps ([0-9, -]+) \(",
                         text):
        if group is not None and m.group(1) != group:
            continue
        for part in m.group(2).split(","):
            a, _, b = part.strip().partition("-")
            out += list(range(int(a), int(b or a) + 1))
    return out


def classify(spec: TrialSpec, procs: list[Proc], hang: bool, fault: str, wall: float, sent: int = 0) -> Outcome:
    ref = reference(spec)
    published: set[int] = set()
    producers = [x for x in procs if x.label.startswith("producer")]
    consumers = [x for x in procs if x.label.startswith("consumer")]
    serving = 0
    for x in producers:
        steps = set(_published(x))
        published |= steps
        serving += bool(steps)
    corrupt: set[int] = set()
    duplicated: set[int] = set()
    unreceived: set[int] = set()
    complete_any: set[int] = set()
    produced_err = "".join(x.err() for x in producers)
    for group in sorted({x.group for x in consumers}):
        received: dict[int, set[int]] = {}
        released_before: set[int] = set()
        explained = set(_dropped_steps(produced_err, group))
        members = [x for x in consumers if x.group == group]
        for x in members:
            text = x.out()
            seen: set[tuple[int, int]] = set()
            for m in re.finditer(r"^B (\d+) (\d+) (\d+)$", text, re.M):
                step, block, crc = int(m.group(1)), int(m.group(2)), int(m.group(3))
                if ref.get(step, {}).get(block) != crc:
                    corrupt.add(step)
                if (step, block) in seen or step in released_before:
                    duplicated.add(step)
                seen.add((step, block))
                received.setdefault(step, set()).add(block)
            released_before |= {int(m.group(1)) for m in re.finditer(r"^R (\d+)$", text, re.M)}
            for label in ("DISCARDED", "MISSED", "LOST"):
                explained |= set(_lists(text, label))
            explained |= set(_dropped_steps(x.err()))
        complete = {s for s, blocks in received.items() if blocks == set(ref.get(s, {}))}
        complete_any |= complete
        corrupt |= {s for s in received if s not in complete and s in published and not _failed(members)}
        unreceived |= published - complete - explained
    messages, crashed, clear = [], [], []
    for x in procs:
        if x.killed or x.rc == 0 or (hang and x.rc in (-signal.SIGKILL, 137)):
            continue
        failed = _failures(x.err())
        if x.faulted:  # rank-error: the injected failure is the fault; every other rank must fail clearly
            failed = [f for f in failed if not f.startswith("InjectedFault")]
            others = spec.producers - (1 if spec.params.get("how") == "raise" else 0)
            if len(failed) < others:
                failed = [f"{others - len(failed)} of the other producer ranks ended without an error of their own "
                          f"(exit {x.rc})"] + failed
            elif all(_clear(f) for f in failed):
                clear.append(x.label)
                messages.append(f"{x.label}: {failed[0][:300]}")
                continue
            failed.sort(key=_clear)
        if (spec.kind == "rank-error" and x.label.startswith("consumer") and failed and _clear(failed[0])
                and not re.search(r"producer rank \d+ failed", failed[0])):
            failed[0] = f"the consumer was not told why the producer stopped: {failed[0]}"  # only "lost"
        if failed and _clear(failed[0]):
            clear.append(x.label)
            messages.append(f"{x.label}: {failed[0][:300]}")
        else:
            crashed.append(x.label)
            tail = (failed[0] if failed else x.err().strip().splitlines()[-1:] or [f"exit {x.rc}"])
            messages.append(f"{x.label} (exit {x.rc}): {str(tail if isinstance(tail, str) else tail[0])[:300]}")
    lost = set() if clear else unreceived
    if spec.kind == "duplicate" and serving > 1 and not clear:
        duplicated.add(-1)  # both producers served the stream, neither failed
    outcome = ("hang" if hang else "crash" if crashed else "corrupt" if corrupt else "duplicated" if duplicated
               else "lost" if lost else "clear error" if clear else "ok")
    detail = {"hang": f"over the {spec.deadline:g} s deadline: "
                      + ", ".join(x.label for x in procs if x.rc in (-signal.SIGKILL, 137) and not x.killed),
              "crash": "; ".join(messages), "corrupt": f"steps {sorted(corrupt)}",
              "duplicated": "both producers served the stream" if -1 in duplicated else f"steps {sorted(duplicated)}",
              "lost": f"published, never received nor reported: steps {sorted(lost)}",
              "clear error": "; ".join(messages), "ok": f"{len(complete_any)} steps delivered"}[outcome]
    if sent:
        detail += f" ({sent} hostile requests sent)"
    return Outcome(spec.kind, spec.transport, spec.index, spec.seed, outcome, fault, detail, wall, sorted(published),
                   sorted(lost), sorted(s for s in duplicated if s >= 0), sorted(corrupt), messages,
                   {x.label: x.rc for x in procs})


def _failures(err: str) -> list[str]:
    """The ``FAILED: <type>: <message>`` reports in a process's stderr. The ranks of an MPI job share one stderr
    through ``mpiexec``, which may join one rank's line onto the unfinished line of another
    (``h5flow: error: ...FAILED: RankFailed: ...``): a report starts wherever ``FAILED: `` does, not only at the
    start of a line, and ends at the line's end or where the next report starts."""
    return [m.group(1) for m in re.finditer(r"FAILED: (.*?)(?=FAILED: |$)", err, re.M)]


def _clear(failure: str) -> bool:
    """A failure that names its problem: a TransportError, or an OSError of a cause an operator can act on."""
    kind, _, message = failure.partition(": ")
    return kind in CLEAR_TYPES or kind in ("OSError", "PermissionError") and any(
        cause in message for cause in CLEAR_OS_CAUSES)


def _failed(consumers: list[Proc]) -> bool:
    return any("FAILED: " in x.err() for x in consumers)


# -- hostile peer -----------------------------------------------------------------------------------

class _Intruder:
    """The hostile peer of a ``hostile`` trial: ``_fault_actor intrude`` in a process of its own, so that a crash
    of the intruder's own libzmq (libzmq 4.3.5 aborts in ``session_base_t::clean_pipes`` when a connection it is
    sending a multipart message on dies: libzmq issue 3442) ends the intruder, not the suite. One that exits
    while the trial runs is started again; what each sent is the last ``SENT`` line of its output."""

    def __init__(self, work: Path, stream: Path, seed: int, env: dict[str, str]) -> None:
        self._work, self._stream, self._seed, self._env = work, stream, seed, env
        self.procs: list[Proc] = []
        self._start()

    def _start(self) -> None:
        n = len(self.procs)
        label = "intruder" if n == 0 else f"intruder#{n + 1}"
        cmd = [*ACTOR, "intrude", str(self._stream), "--seed", str(self._seed + n)]
        self.procs.append(_start(Proc(label, cmd, str(self._work / f"{label}.out"), str(self._work / f"{label}.err")),
                                 self._env))

    def poll(self) -> None:
        """Start another one where the last has exited."""
        if self.procs[-1].popen.poll() is not None and len(self.procs) < 20:
            self._start()

    def stop(self) -> None:
        for x in self.procs:
            if x.popen.poll() is None:
                os.killpg(x.popen.pid, signal.SIGTERM)
        for x in self.procs:
            try:
                x.rc = x.popen.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(x.popen.pid, signal.SIGKILL)
                x.rc = x.popen.wait()

    @property
    def sent(self) -> int:
        return sum(int(m[-1]) if (m := re.findall(r"^SENT (\d+)$", x.out(), re.M)) else 0 for x in self.procs)

    @property
    def crashed(self) -> int:
        """Intruder processes that ended on a signal other than the SIGTERM that stopped them."""
        return sum(1 for x in self.procs if x.rc is not None and x.rc < 0 and x.rc != -signal.SIGTERM)


# -- the whole suite ----------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kinds", type=csv_list(KINDS), default=list(KINDS),
                   help=f"fault kinds, comma-separated (default: all of {', '.join(KINDS)})")
    p.add_argument("--transports", type=csv_list(TRANSPORTS), default=list(DEFAULT_TRANSPORTS),
                   help=f"transports of the matrix, comma-separated, of {', '.join(TRANSPORTS)} "
                        f"(default: {','.join(DEFAULT_TRANSPORTS)})")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="trials per fault kind and transport, 1-10000 (default: 50 kill, 10 of the others)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    p.add_argument("--quick", action="store_true",
                   help=f"the deterministic subset run by `make test`: seed {QUICK_SEED}, one trial per kind and "
                        "transport")
    p.add_argument("--deadline", type=float, default=60.0,
                   help="seconds a trial may take before it is a hang, 5-3600 (default 60)")
    p.add_argument("--workdir", type=Path, default=None, help="where trials run (default: a temporary directory)")
    p.add_argument("--json", type=Path, default=None, help="write every trial and the table as JSON here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def not_applicable(kind: str, transport: str) -> str | None:
    return NOT_APPLICABLE.get((kind, matrix_case(transport).type))


def plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(kind, transport, trials) of every applicable pair, in run order."""
    out = []
    for kind in args.kinds:
        for t in args.transports:
            if not_applicable(kind, t):
                continue
            n = QUICK_TRIALS[kind] if args.quick else args.trials or (50 if kind == "kill" else 10)
            out.append((kind, t, n))
    return out


def full_size_kib(spec: TrialSpec, steps_fit: int) -> int:
    """A file system with room for the stream's fixed files, the hdf5 writer's reservation for one step (its
    generous estimate: payload, per-file and per-dataset overhead) and about ``steps_fit`` steps as they are
    stored: it fills once the consumers hold that many."""
    from h5flow.transports.hdf5.staging import EMERGENCY_RESERVE
    from h5flow.transports.hdf5.writer import DATASET_OVERHEAD, FILE_OVERHEAD

    g = 1  # the oscillator's ghost layer on each side of a block
    payload = 4 * spec.blocks * (spec.shape[0] // spec.blocks + 2 * g) * (spec.shape[1] + 2 * g) \
        * (spec.shape[2] + 2 * g)
    layout = matrix_case(spec.transport).settings.get("layout", "n-n")
    files = 1 if layout == "n-1" else spec.producers
    reservation = payload + files * (FILE_OVERHEAD + 6 * DATASET_OVERHEAD) + 32 * 1024
    stored = payload + files * 8 * 1024 + 8 * 1024
    return (EMERGENCY_RESERVE + 64 * 1024 + reservation + steps_fit * stored) // 1024


def new_spec(kind: str, transport: str, i: int, seed: int, work: Path, deadline: float, rng: random.Random,
             attempt: int, mount: bool) -> TrialSpec:
    d = work / (f"{kind}-{transport}-{i}" + ("" if attempt == 1 else f"-try{attempt}"))
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    producers = rng.choice([2, 3])
    groups = 1 if kind == "duplicate" else rng.choice([1, 2])
    spec = TrialSpec(kind, transport, i, seed, str(d), deadline=deadline, producers=producers, groups=groups,
                     params=trial_params(kind, transport, rng, producers))
    if kind in ("full", "full-mid-stream"):
        spec.params["size_kib"] = full_size_kib(spec, spec.params["steps_fit"])
        if not mount and kind == "full":
            spec.params["fsize"] = spec.params["size_kib"] * 1024 // 4
    return spec


def _can_mount() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("unshare") is not None \
        and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def run_in_tmpfs(spec: TrialSpec) -> Outcome:
    """A ``full`` trial inside its own mount namespace, its directory a tmpfs of ``size_kib``."""
    spec_file = Path(spec.workdir + ".spec.json")
    result = Path(spec.workdir + ".result.json")
    spec_file.write_text(json.dumps(asdict(spec)))
    proc = subprocess.run(["unshare", "-m", sys.executable, "-m", "h5flow.benchmarks.faults", "--run-trial",
                           str(spec_file), str(result)], capture_output=True, text=True, timeout=spec.deadline + 60)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"the full-storage trial could not run in its namespace: {proc.stderr.strip()[-500:]}")
    return Outcome(**json.loads(result.read_text()))


def _trial_in_namespace(spec_file: str, result: str) -> int:
    d = json.loads(Path(spec_file).read_text())
    d["shape"] = tuple(d["shape"])
    spec = TrialSpec(**d)
    fs = Path(spec.workdir) / "fs"
    fs.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={spec.params['size_kib']}k", "tmpfs", str(fs)], check=True)
    out = run_trial(spec)
    Path(result).write_text(json.dumps(asdict(out)))
    return 0


def table(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One row per fault kind and transport: trials, then ok, clear error, each bad outcome and not tested;
    ``failed`` is the sum of the bad ones."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for o in outcomes:
        r = rows.setdefault((o.kind, o.transport), {"kind": o.kind, "transport": o.transport, "trials": 0,
                                                   **{k: 0 for k in OUTCOMES}, "failed": 0})
        r["trials"] += 1
        r[o.outcome] += 1
        r["failed"] += o.outcome in BAD
    return list(rows.values())


def print_table(rows: list[dict[str, Any]], outcomes: list[Outcome]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="h5flow fault trials (ok and clear error are acceptable; not tested: the fault did not happen)",
              title_justify="left")
    cols = ("fault", "transport", "trials", "ok", "clear errors", "failed", "not tested", "lost", "duplicated",
            "corrupt", "hangs", "crashes", "trusted")
    for col in cols:
        t.add_column(col, justify="left" if col in ("fault", "transport") else "right")
    for r in rows:
        t.add_row(r["kind"], r["transport"], str(r["trials"]), str(r["ok"]), str(r["clear error"]), str(r["failed"]),
                  str(r["not tested"]), *(str(r[k]) for k in BAD))
    console = Console(width=170)
    console.print(t)
    for o in outcomes:
        if o.outcome not in ("ok", "clear error"):
            console.print(f"  {o.kind}/{o.transport} trial {o.index} ({o.fault}): {o.outcome}: {o.detail}",
                          highlight=False, markup=False)
    for (kind, kind_type), why in NOT_APPLICABLE.items():
        console.print(f"  not run: {kind} on {kind_type} ({why})", highlight=False, markup=False)


def run_one(spec: TrialSpec, mount: bool) -> Outcome:
    if spec.kind == "full-mid-stream" and not mount:
        return Outcome(spec.kind, spec.transport, spec.index, spec.seed, "not tested", spec.kind,
                       "the fault did not happen: filling a file system mid-stream needs mount rights (a tmpfs of "
                       "the trial's own)", 0.0, params=dict(spec.params))
    return run_in_tmpfs(spec) if spec.kind in ("full", "full-mid-stream") and mount else run_trial(spec)


def launch(args: argparse.Namespace) -> int:
    if args.trials is not None and not 1 <= args.trials <= 10000:
        raise SystemExit(f"--trials {args.trials}: accepted 1-10000")
    if not 5 <= args.deadline <= 3600:
        raise SystemExit(f"--deadline {args.deadline:g}: accepted 5-3600 seconds")
    seed = QUICK_SEED if args.quick else args.seed if args.seed is not None else int(time.time()) % 100000
    work = args.workdir or Path(tempfile.mkdtemp(prefix="h5flow-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    mount = _can_mount()
    pairs = plan(args)
    total = sum(n for *_, n in pairs)
    print(f"h5flow bench faults: {total} trials, seed {seed}, in {work}"
          + ("" if mount else "; full storage by RLIMIT_FSIZE (no mount rights)"), flush=True)
    outcomes: list[Outcome] = []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, disable=args.no_progress) as bar:
        task = bar.add_task("fault trials", total=total)
        for kind, transport, n in pairs:
            for i in range(n):
                rng = random.Random(f"{seed}-{kind}-{transport}-{i}")
                bar.update(task, description=f"{kind} / {transport} #{i}")
                for attempt in range(1, RETRIES + 2):  # a fault that did not happen is tried again
                    spec = new_spec(kind, transport, i, seed, work, args.deadline, rng, attempt, mount)
                    out = run_one(spec, mount)
                    out.attempts = attempt
                    if out.outcome != "not tested":
                        break
                outcomes.append(out)
                bar.advance(task)
    rows = table(outcomes)
    print_table(rows, outcomes)
    if args.json:
        args.json.write_text(json.dumps({"seed": seed, "mount": mount, "table": rows,
                                         "trials": [asdict(o) for o in outcomes]}, indent=1))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--run-trial":
        sys.exit(_trial_in_namespace(sys.argv[2], sys.argv[3]))
    raise SystemExit("run it as `h5flow bench faults` (see --help)")
