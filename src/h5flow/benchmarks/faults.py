"""Fault injection: randomized trials of faults over the hdf5 and socket transports, classified by what arrived.

Each trial runs the oscillator on M producer ranks (``mpiexec``) and one consumer (``_fault_actor``) through a
transport, injects one fault, and checks what the consumer received against what the producer published: every
block's CRC-32 against the block computed here, every step published against the steps received or reported
(discarded, missed, dropped for a lost group, or a clear error), the exit status of every process, and a
wall-time limit. Fault kinds:

* ``kill``: ``kill -9`` of a random producer rank or the consumer at a random moment; a killed consumer is
  restarted after a random delay (0-2 s), as an operator would.
* ``full``: the stream's directory on a small tmpfs the trial mounts (``unshare -m`` + ``mount -t tmpfs``, as
  root), random size; without mount rights, ``RLIMIT_FSIZE`` on the producers instead. hdf5 only.
* ``duplicate``: two producers of the same stream name opening at the same instant.
* ``hostile``: while the stream runs, requests with the token but malformed bodies (``1e400``, deep nesting,
  wrong types, random bytes) and floods of requests without the token. socket only.

Outcome of a trial (the worst that applies): ``hang`` (over its deadline, then killed), ``crash`` (a process
the trial did not kill exited non-zero without a clear error: a traceback of another type, a signal, an MPI
abort), ``corrupt`` (a block whose checksum differs), ``duplicated`` (a step delivered twice to one consumer,
or re-delivered after it was released, or two producers both serving one stream), ``lost`` (a published step
neither received nor reported while every surviving process ended normally), ``clear error`` (a surviving
process failed with a TransportError, or an OSError of an actionable cause such as no space left on device) or ``ok`` (everything published arrived,
every process ended normally). ``ok`` and ``clear error`` are the acceptable outcomes of a fault.
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

KINDS = ("kill", "full", "duplicate", "hostile")
TRANSPORTS = ("hdf5", "socket")
NOT_APPLICABLE = {("full", "socket"): "the socket transport stores nothing", ("hostile", "hdf5"):
                  "the hdf5 transport has no request protocol"}
OUTCOMES = ("ok", "clear error", "lost", "duplicated", "corrupt", "hang", "crash")
WORST_FIRST = ("hang", "crash", "corrupt", "duplicated", "lost", "clear error", "ok")
CLEAR_TYPES = ("TransportError", "StreamClaimed")
CLEAR_OS_CAUSES = ("No space left on device", "File too large", "Disk quota exceeded", "Permission denied")
QUICK_SEED = 81  # kills a socket consumer mid-stream and restarts it late; kills an hdf5 producer rank
QUICK_TRIALS = {"kill": 1, "full": 1, "duplicate": 1, "hostile": 1}
ACTOR = [sys.executable, "-m", "h5flow.benchmarks._fault_actor"]


@dataclass
class TrialSpec:
    kind: str
    transport: str
    index: int
    seed: int
    workdir: str
    steps: int = 8
    shape: tuple[int, int, int] = (16, 16, 16)
    blocks: int = 4
    producers: int = 2
    heartbeat: float = 0.5
    deadline: float = 60.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Proc:
    label: str  # producer, producer#2, consumer, consumer#2
    cmd: list[str]
    out_path: str
    err_path: str
    rc: int | None = None
    killed: bool = False  # by the trial (its fault), not a failure
    popen: Any = None

    def out(self) -> str:
        return Path(self.out_path).read_text(errors="replace") if Path(self.out_path).exists() else ""

    def err(self) -> str:
        return Path(self.err_path).read_text(errors="replace") if Path(self.err_path).exists() else ""


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


# -- one trial ------------------------------------------------------------------------------------

def trial_params(kind: str, transport: str, rng: random.Random, producers: int) -> dict[str, Any]:
    if kind == "kill":
        target = rng.choice([f"producer {r}" for r in range(producers)] + ["consumer"])
        return {"target": target, "at": round(rng.uniform(0.3, 3.0), 3), "restart_after": round(rng.uniform(0, 2), 3)}
    if kind == "full":
        return {"size_kib": rng.choice([32, 48, 64, 96, 128, 192])}
    if kind == "hostile":
        return {"fuzz_seed": rng.randrange(1 << 30)}
    return {}


def transport_json(spec: TrialSpec, stream: Path) -> str:
    cfg: dict[str, Any] = {"type": spec.transport, "filename": str(stream), "heartbeat": spec.heartbeat,
                           "queue_limit": 8}
    if spec.transport == "socket":  # the trials count the steps a killed consumer's group loses (its steps dropped)
        cfg["dead_consumer"] = "drop"
    return json.dumps(cfg)


def _start(proc: Proc, env: dict[str, str], preexec: Callable[[], None] | None = None) -> Proc:
    with open(proc.out_path, "w") as out, open(proc.err_path, "w") as err:
        proc.popen = subprocess.Popen(proc.cmd, stdout=out, stderr=err, start_new_session=True, env=env,
                                      preexec_fn=preexec)
    return proc


def _pid_of(proc: Proc, role: str, rank: int) -> int | None:
    m = re.search(rf"^PID {role} {rank} (\d+)$", proc.out(), re.M)
    return int(m.group(1)) if m else None


def _fsize_limit(nbytes: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


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
        cmd = [*ACTOR, "consume", cfg, "--shape", *map(str, spec.shape), "--blocks", str(spec.blocks),
               "--timeout", "15", "--sleep", "0.3" if spec.kind == "full" else "0.05"]
        return _start(Proc(label, cmd, str(work / f"{label}.out"), str(work / f"{label}.err")), env)

    t0 = time.time()
    fault = spec.kind
    if spec.kind == "duplicate":
        start_at = f"{time.time() + 2.5:.3f}"
        procs += [producer("producer", "--start-at", start_at), producer("producer#2", "--start-at", start_at)]
        fault = "two producers opening together"
        # the consumer comes once one producer gave up (or after 15 s): a producer waits for a consumer before it
        # closes, so the first cannot finish before the second opens, however late that one starts
        while all(x.popen.poll() is None for x in procs) and time.time() - t0 < 15:
            time.sleep(0.05)
        procs.insert(0, consumer("consumer"))
    else:
        procs.append(consumer("consumer"))
        procs.append(producer("producer"))
    hostile: _Intruder | None = None
    if spec.kind == "hostile":
        hostile = _Intruder(work, stream, p["fuzz_seed"], env)
        fault = "malformed requests with the token, floods without it"
    if spec.kind == "full":
        fault = f"{p['size_kib']} KiB file system" if not p.get("fsize") else f"RLIMIT_FSIZE {p['fsize']} bytes"
    killed_at = None
    restarted = False
    deadline = t0 + spec.deadline
    hang = False
    while True:
        now = time.time()
        if spec.kind == "kill" and killed_at is None and now - t0 >= p["at"]:
            fault = f"kill -9 {p['target']} at {now - t0:.2f} s"
            role, _, rank = p["target"].partition(" ")
            victim = procs[1] if role == "producer" else procs[0]
            if victim.popen.poll() is not None:
                killed_at = now
                fault += " (it had already exited)"
            else:
                pid = _pid_of(victim, "produce" if role == "producer" else "consume", int(rank or 0))
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    victim.killed = True
                    killed_at = now
        if (spec.kind == "kill" and killed_at is not None and not restarted and p["target"] == "consumer"
                and procs[0].killed and procs[0].popen.poll() is not None and now - killed_at >= p["restart_after"]):
            procs.append(consumer("consumer#2"))
            restarted = True
            fault += f", restarted after {p['restart_after']:.2f} s"
        if all(x.popen.poll() is not None for x in procs) and (
                spec.kind != "kill" or killed_at is not None and (restarted or p["target"] != "consumer"
                                                                   or not procs[0].killed)):
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
    return classify(spec, procs, hang, fault, wall, hostile.sent if hostile else 0)


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


def _dropped_steps(text: str) -> list[int]:
    """Steps named in 'were dropped for consumer group ... steps 1-5, 7 (' messages."""
    out: list[int] = []
    for m in re.finditer(r"were dropped for consumer group .*? without being taken: steps ([0-9, -]+) \(", text):
        for part in m.group(1).split(","):
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
        steps = {int(m.group(1)) for m in re.finditer(r"^PUBLISHED (\d+) 1$", x.out(), re.M)}
        published |= steps
        serving += bool(steps)
    received: dict[int, set[int]] = {}
    corrupt: set[int] = set()
    duplicated: set[int] = set()
    released_before: set[int] = set()
    explained: set[int] = set()
    for x in consumers:
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
    for x in producers:
        explained |= set(_dropped_steps(x.err()))
    complete = {s for s, blocks in received.items() if blocks == set(ref.get(s, {}))}
    corrupt |= {s for s in received if s not in complete and s in published and not _failed(consumers)}
    messages, crashed, clear = [], [], []
    for x in procs:
        if x.killed or x.rc == 0 or (hang and x.rc in (-signal.SIGKILL, 137)):
            continue
        failed = [line[len("FAILED: "):] for line in x.err().splitlines() if line.startswith("FAILED: ")]
        if failed and _clear(failed[0]):
            clear.append(x.label)
            messages.append(f"{x.label}: {failed[0][:300]}")
        else:
            crashed.append(x.label)
            tail = (failed[0] if failed else x.err().strip().splitlines()[-1:] or [f"exit {x.rc}"])
            messages.append(f"{x.label} (exit {x.rc}): {str(tail if isinstance(tail, str) else tail[0])[:300]}")
    unreceived = published - complete - explained
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
              "clear error": "; ".join(messages), "ok": f"{len(complete)} steps delivered"}[outcome]
    if sent:
        detail += f" ({sent} hostile requests sent)"
    return Outcome(spec.kind, spec.transport, spec.index, spec.seed, outcome, fault, detail, wall, sorted(published),
                   sorted(lost), sorted(s for s in duplicated if s >= 0), sorted(corrupt), messages,
                   {x.label: x.rc for x in procs})


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
    p.add_argument("--transports", type=csv_list(TRANSPORTS), default=list(TRANSPORTS),
                   help="transports, comma-separated (default: hdf5,socket)")
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


def plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(kind, transport, trials) of every applicable pair, in run order."""
    out = []
    for kind in args.kinds:
        for t in args.transports:
            if (kind, t) in NOT_APPLICABLE:
                continue
            n = QUICK_TRIALS[kind] if args.quick else args.trials or (50 if kind == "kill" else 10)
            out.append((kind, t, n))
    return out


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
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for o in outcomes:
        r = rows.setdefault((o.kind, o.transport), {"kind": o.kind, "transport": o.transport, "trials": 0,
                                                   **{k: 0 for k in OUTCOMES}})
        r["trials"] += 1
        r[o.outcome] += 1
    return list(rows.values())


def print_table(rows: list[dict[str, Any]], outcomes: list[Outcome]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="h5flow fault trials (outcome of each trial; ok and clear error are acceptable)",
              title_justify="left")
    for col in ("fault", "transport", "trials", "ok", "clear errors", "lost", "duplicated", "corrupt", "hangs",
                "crashes"):
        t.add_column(col, justify="left" if col in ("fault", "transport") else "right")
    for r in rows:
        t.add_row(r["kind"], r["transport"], str(r["trials"]), *(str(r[k]) for k in OUTCOMES))
    console = Console(width=160)
    console.print(t)
    for o in outcomes:
        if o.outcome not in ("ok", "clear error"):
            console.print(f"  {o.kind}/{o.transport} trial {o.index} ({o.fault}): {o.outcome}: {o.detail}",
                          highlight=False, markup=False)
    for (kind, transport), why in NOT_APPLICABLE.items():
        console.print(f"  not run: {kind} on {transport} ({why})", highlight=False, markup=False)


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
                d = work / f"{kind}-{transport}-{i}"
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                spec = TrialSpec(kind, transport, i, seed, str(d), deadline=args.deadline,
                                 params=trial_params(kind, transport, rng, 2))
                bar.update(task, description=f"{kind} / {transport} #{i}")
                if kind == "full" and mount:
                    out = run_in_tmpfs(spec)
                else:
                    if kind == "full":
                        spec.params["fsize"] = spec.params["size_kib"] * 1024 // 4
                    out = run_trial(spec)
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
