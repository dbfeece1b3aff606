"""Running the in-transit job: the producer loop, the consumer loop, and both as two MPI jobs.

``produce`` runs on the M producer ranks (oscillator → transport writer), ``consume`` on the N
consumer ranks (transport reader → partitioner → analyses). Each writes a *part record* (JSON, rank 0)
with per-rank step events and RSS samples; :func:`run` launches both with ``mpiexec`` concurrently, as
the paper does, and merges the parts into one *run record*.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.config import AnalysisConfig, SenseiConfig
from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
from h5flow.model import ParticleBlock
from h5flow.transports import StepStatus, TransportError, open_reader, open_writer
from h5flow.transports import entry as transport_entry
from h5flow._fileio import atomic_write


class RssSampler:
    """Samples this process's resident set size every ``period`` seconds on a daemon thread."""

    def __init__(self, period: float = 0.05) -> None:
        import psutil

        self._proc = psutil.Process()
        self.period = period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._proc.memory_info().rss))
            self._stop.wait(self.period)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self._proc.memory_info().rss))
        return self.samples


def _progress(path: str | None, done: int, total: int | None) -> None:
    if path:
        try:
            atomic_write(Path(path), json.dumps({"done": done, "total": total}))
        except OSError:
            pass  # only the progress bar's; a full file system must not stop the run


def _gather_and_write(comm: Any, part: dict[str, Any], rank_data: dict[str, Any], record: str | None) -> None:
    ranks = comm.gather(rank_data, root=0)
    if comm.rank == 0 and record:
        part["ranks"] = ranks
        atomic_write(Path(record), json.dumps(part, default=_json_default))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    return repr(o)  # a user's analysis may return anything: the record keeps its text


def oscillators_block(sim: Simulation) -> ParticleBlock:
    """SENSEI's ``oscillators`` mesh: one block, held by producer rank 0 only (the others own none)."""
    osc = sim.oscillators
    kinds = {"damped": 0, "decaying": 1, "periodic": 2}
    return ParticleBlock(0, np.array([o.center for o in osc], dtype=np.float64).reshape(-1, 3), {
        "radius": np.array([o.radius for o in osc], dtype=np.float32),
        "omega0": np.array([o.omega0 for o in osc], dtype=np.float32),
        "zeta": np.array([o.zeta for o in osc], dtype=np.float32),
        "type": np.array([kinds[o.type] for o in osc], dtype=np.int32),
    })


def publish_step(writer: Any, sim: Simulation, rank: int) -> None:
    """Put every mesh of the oscillator's current step: ``mesh``, ``oscillators`` and ``particles``."""
    for b in sim.blocks():
        writer.put("mesh", b)
    if rank == 0:
        writer.put("oscillators", oscillators_block(sim))
    if sim.num_particles:
        for b in sim.particle_blocks():
            writer.put("particles", b)


def produce(comm: Any, config: SenseiConfig, osc: OscillatorConfig, record: str | None = None,
            progress: str | None = None) -> dict[str, Any]:
    """The producer loop on ``comm``: oscillator steps published through the configured transport."""
    start = time.time()
    rss = RssSampler()
    tcfg = config.transport()
    sim = Simulation(osc, comm.rank, comm.size)
    steps = sim.num_steps()
    compute: list[tuple[int, float, float]] = []
    io: list[tuple[int, float, float, float]] = []  # (step, start, end, backpressure wait) of each publish
    published = discarded = 0
    nbytes = 0
    lost: TransportError | None = None
    writer = open_writer(comm, tcfg)
    with writer:
        for s in range(steps):
            t0 = time.time()
            t = sim.advance(s)
            compute.append((s, t0, time.time()))
            t1 = time.time()
            writer.begin_step(s, t)
            publish_step(writer, sim, comm.rank)
            info = writer.end_step()
            waited = float(writer.events[-1].get("waited", 0.0)) if writer.events else 0.0
            io.append((s, t1, time.time(), waited))
            published += info.published
            discarded += not info.published
            nbytes += info.nbytes if info.published else 0
            if comm.rank == 0:
                _progress(progress, s + 1, steps)
        try:
            writer.close()
        except TransportError as e:
            if not writer.dropped:
                raise
            lost = e  # steps dropped for a lost consumer group: recorded, then the producer fails
    end = time.time()
    part = {"role": "producer", "transport": tcfg.type, "settings": asdict(tcfg.settings),
            "producers": comm.size, "steps": steps, "published": published, "discarded": discarded,
            "bytes": nbytes, "shape": list(osc.shape), "blocks": sim.num_blocks,
            "dropped": writer.dropped}
    rank_data = {"rank": comm.rank, "start": start, "end": end, "compute": compute, "io": io,
                 "events": writer.events, "rss": rss.stop()}
    _gather_and_write(comm, part, rank_data, record)
    if lost is not None:
        raise lost
    return part


def _time_reads(step: Any) -> list[float]:
    """Time the step's ``blocks()`` calls (where lazy transports read): ``[seconds]``, updated in place."""
    total = [0.0]
    blocks = step.blocks

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return blocks(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - t

    step.blocks = timed
    return total


def default_analysis() -> AnalysisConfig:
    return AnalysisConfig.of("histogram", mesh="mesh", array="data", association="cell", bins=10)


def consume(comm: Any, config: SenseiConfig, timeout: float = 60.0, record: str | None = None,
            progress: str | None = None, total: int | None = None, quiet: bool = False) -> dict[str, Any]:
    """The consumer loop on ``comm``: every step through the configured analyses, until end of stream."""
    from h5flow.analyses import make_analysis

    start = time.time()
    rss = RssSampler()
    tcfg = config.transport()
    status, reason = "end_of_stream", ""
    n = 0
    last: list[Any] = []
    analysis_times: list[tuple[int, float, float]] = []
    # (step, seconds this rank spent reading: after discovery, blocks(), release; of them, seconds it waited at
    # release for the other consumer ranks)
    io: list[tuple[int, float, float]] = []
    reader: Any = None
    current: int | None = None  # the step being analysed
    try:
        acfgs = [a for a in config.analyses if a.enabled] or [default_analysis()]
        analyses = [make_analysis(a) for a in acfgs]
        for a in analyses:
            a.initialize(comm)
        reader = open_reader(comm, tcfg)
        while True:
            res = reader.begin_step(timeout)
            if res.status is not StepStatus.OK:
                status, reason = res.status.value, res.reason
                break
            t0 = time.time()
            reads = _time_reads(res.step)
            current = res.step.step
            last = [a.execute(res.step) for a in analyses]
            current = None
            analysis_times.append((res.step.step, t0, time.time()))
            t_rel = time.time()
            reader.release()
            ev = reader.events[-1] if reader.events else {}
            visible = float(ev.get("visible", t0))
            io.append((res.step.step, max(0.0, t0 - visible) + reads[0] + time.time() - t_rel,
                       float(ev.get("barrier", 0.0))))
            n += 1
            if comm.rank == 0:
                _progress(progress, n, total)
    except BaseException as e:
        # this rank leaves (the job is then aborted): the others may be in a collective call, so this rank
        # writes what it knows itself instead of gathering. Whatever the analysis did: raised, failed to load or
        # initialize, or called sys.exit (which would end the job with its status, the stream unread)
        where = "before the first step" if n == 0 and current is None else \
            f"at step {current}" if current is not None else f"after {n} steps"
        what = (f"the analysis called sys.exit({e.code!r}) {where}" if isinstance(e, SystemExit)
                else f"interrupted {where}" if isinstance(e, KeyboardInterrupt) else f"{e}")
        if record:
            part = {"role": "consumer", "transport": tcfg.type, "consumers": comm.size, "steps": n,
                    "status": "error", "reason": f"consumer rank {comm.rank}: {what}", "incomplete": True,
                    "partitioner": tcfg.partitioner.type, "discarded": [], "missed": [], "last_results": [],
                    "ranks": [{"rank": comm.rank, "start": start, "end": time.time(), "analysis": analysis_times,
                               "io": io, "events": reader.events if reader is not None else [],
                               "rss": rss.stop()}]}
            try:
                atomic_write(Path(record), json.dumps(part, default=_json_default))
            except OSError:
                pass
        if isinstance(e, SystemExit):  # an error: the consumer stopped before the end of the stream
            raise RuntimeError(f"{what}; the consumer stops before the end of the stream") from None
        raise
    finally:
        if reader is not None:
            reader.close()
    for a in analyses:
        a.finalize()
    end = time.time()
    results = [asdict(r) if r is not None and hasattr(r, "__dataclass_fields__") else r for r in last]
    part = {"role": "consumer", "transport": tcfg.type, "consumers": comm.size, "steps": n, "status": status,
            "reason": reason, "partitioner": tcfg.partitioner.type,
            "discarded": [list(d) for d in reader.discarded], "missed": list(reader.missed),
            "dropped": [list(d) for d in reader.dropped], "last_results": results}
    rank_data = {"rank": comm.rank, "start": start, "end": end, "analysis": analysis_times, "io": io,
                 "events": reader.events, "rss": rss.stop()}
    _gather_and_write(comm, part, rank_data, record)
    if status == "error":
        raise TransportError(f"consumer stopped on error: {reason}")
    if status == "not_ready":
        raise TransportError(f"consumer gave up: {reason}")
    return part


# -- the whole job: two concurrent MPI jobs ---------------------------------------------------------

@dataclass
class RunOptions:
    config: Path
    producers: int = 2
    consumers: int = 1
    osc_args: tuple[str, ...] = ()
    steps: int | None = None
    timeout: float = 120.0
    workdir: Path | None = None
    show_progress: bool = True
    consumer_config: Path | None = None
    analysis: tuple[Path, ...] = ()


def _latency_stats(events: list[dict[str, Any]]) -> dict[str, float]:
    """Publish → visible: from the later of the step's publication and the consumer asking for it.

    A step published while the consumer is still busy with an earlier one waits in the queue; that
    wait is backpressure, reported separately as ``queue_wait``, not discovery latency.
    """
    lat = [e["visible"] - max(e["published"], e["begin"]) for e in events if "visible" in e]
    wait = [max(0.0, e["begin"] - e["published"]) for e in events if "visible" in e]
    if not lat:
        return {}
    a = np.maximum(np.array(lat), 0.0)
    return {"median_s": float(np.median(a)), "p95_s": float(np.percentile(a, 95)), "max_s": float(a.max()),
            "min_s": float(a.min()), "count": len(lat), "queue_wait_median_s": float(np.median(wait))}


def _io_seconds(part: dict[str, Any]) -> float:
    """Seconds the transport took on one side, summed over steps.

    Producer (``(step, start, end, waited)``; publishing is collective): from the last rank's arrival to
    the last rank's return, less the backpressure wait, so a rank waiting for a slower one's compute does
    not count. Consumer (``(step, seconds, barrier)``): the same rule at the release's barrier, where the
    ranks wait for each other (mostly for the slowest one's analysis): the slowest rank's reading time
    without its wait there, plus the wait of the rank that came last (the barrier's own cost). With one
    consumer rank that is its reading time. Records of ``(step, seconds)`` (the plain ADIOS2 pair's, and
    records written before the barrier was kept): the slowest rank's time.
    """
    per_step: dict[int, list[list[float]]] = {}
    for r in part["ranks"]:
        for step, *t in r.get("io", []):
            per_step.setdefault(step, []).append(t)
    total = 0.0
    for ts in per_step.values():
        if len(ts[0]) == 3:
            total += max(0.0, max(t[1] for t in ts) - max(t[0] for t in ts) - max(t[2] for t in ts))
        elif len(ts[0]) == 2:
            total += max(t[0] - t[1] for t in ts) + min(t[1] for t in ts)
        else:
            total += max(t[0] for t in ts)
    return total


def merge(prod: dict[str, Any], cons: dict[str, Any], launched: float, finished: float) -> dict[str, Any]:
    """The run record: both parts, time to solution, bytes, throughput, publish→visible latency."""
    first_start = min(r["start"] for r in prod["ranks"])
    last_end = max(r["end"] for r in cons["ranks"])
    tts = last_end - launched
    rank0 = next(r for r in cons["ranks"] if r["rank"] == 0)
    settings = prod.get("settings") or {}  # the transport's own settings (dataclasses.asdict)
    return {
        "transport": prod["transport"], "settings": settings,
        **{k: settings[k] for k in ("layout", "driver") if k in settings},  # hdf5's, kept at the top level
        "producers": prod["producers"], "consumers": cons["consumers"], "steps": prod["steps"],
        "steps_consumed": cons["steps"], "bytes": prod["bytes"],
        "time_to_solution": tts, "time_in_processes": last_end - first_start,
        "transport_seconds": {"write": _io_seconds(prod), "read": _io_seconds(cons)},
        "throughput_mib_s": prod["bytes"] / (1 << 20) / tts if tts > 0 else 0.0,
        "latency": _latency_stats(rank0["events"]), "discarded": cons["discarded"], "status": cons["status"],
        "launched": launched, "finished": finished, "producer": prod, "consumer": cons,
    }


def run(opts: RunOptions) -> dict[str, Any]:
    """Launch producers and consumers as two concurrent ``mpiexec`` jobs and merge their records."""
    from h5flow.xmlconfig import load

    cfg = load(opts.config)
    tcfg = cfg.transport()
    work = opts.workdir or Path(tcfg.filename).parent
    work.mkdir(parents=True, exist_ok=True)
    cleanup = transport_entry(tcfg.type).cleanup
    if cleanup is not None:  # an earlier run's state must not be mistaken for this one's (each transport knows its own)
        cleanup(tcfg)
    rec_p, rec_c = work / "producer.record.json", work / "consumer.record.json"
    prog_p, prog_c = work / "producer.progress", work / "consumer.progress"
    for p in (rec_p, rec_c, prog_p, prog_c):
        p.unlink(missing_ok=True)
    py = [sys.executable, "-m", "h5flow.cli"]
    steps = ["--steps", str(opts.steps)] if opts.steps is not None else []
    pcmd = ["mpiexec", "-n", str(opts.producers), *py, "produce", str(opts.config), *opts.osc_args, *steps,
            "--record", str(rec_p), "--progress-file", str(prog_p)]
    extra = [a for p in opts.analysis for a in ("--analysis", str(p))]
    ccmd = ["mpiexec", "-n", str(opts.consumers), *py, "consume", str(opts.consumer_config or opts.config), *extra,
            "--timeout", str(opts.timeout),
            "--record", str(rec_c), "--progress-file", str(prog_c), "--quiet"]
    launched = time.time()
    procs = [subprocess.Popen(cmd, start_new_session=True) for cmd in (pcmd, ccmd)]
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        """SIGTERM/SIGHUP/SIGINT to `h5flow run` goes to both jobs (each in its own session): no orphans."""
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signum)
                except ProcessLookupError:
                    pass

    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, forward) for sig in handled}
    heartbeat = float(getattr(tcfg.settings, "heartbeat", 1.0))
    try:
        failed, stopped = _watch(procs, prog_p, prog_c, opts, grace=max(STOP_GRACE, 4 * heartbeat))
    except BaseException:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _reap(procs)
    finished = time.time()
    codes = [p.returncode for p in procs]
    missing = [name for name, path in (("producer", rec_p), ("consumer", rec_c)) if not path.is_file()]
    if received or codes != [0, 0] or missing:
        if received:
            why = f"interrupted by signal {signal.Signals(received[0]).name} (forwarded to both jobs)"
        elif failed:
            why = f"the {failed} job failed (exit {codes[0 if failed == 'producer' else 1]})" + (
                f"; the {stopped} job was stopped (it would have waited for the other)" if stopped else "")
        elif codes != [0, 0]:
            why = "in-transit run failed"
        else:
            why = f"the {' and '.join(missing)} job(s) exited 0 without writing their record ({', '.join(missing)}.record.json)"
        raise RunFailed(f"{why}: producer job exit {codes[0]}, consumer job exit {codes[1]} (their messages are "
                        "above)", _partial_record(rec_p, rec_c, codes, launched, finished, why))
    return merge(json.loads(rec_p.read_text()), json.loads(rec_c.read_text()), launched, finished)


class RunFailed(RuntimeError):
    """``h5flow run`` failed; ``record`` holds what the jobs wrote (the run record of a failed run)."""

    def __init__(self, message: str, record: dict[str, Any]) -> None:
        super().__init__(message)
        self.record = record


def _reap(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    """Wait for both jobs; one that does not exit within ``grace`` seconds of a signal is killed."""
    deadline = time.time() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _partial_record(rec_p: Path, rec_c: Path, codes: list[int | None], launched: float, finished: float,
                    why: str) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for name, path in (("producer", rec_p), ("consumer", rec_c)):
        try:
            parts[name] = json.loads(path.read_text())
        except (OSError, ValueError):
            parts[name] = None
    consumer = parts["consumer"] or {}
    return {"status": "failed", "reason": why, "exit_codes": {"producer": codes[0], "consumer": codes[1]},
            "consumer_status": consumer.get("status"), "consumer_reason": consumer.get("reason"),
            "launched": launched, "finished": finished, **parts}


def _read_progress(path: Path) -> tuple[int, int | None]:
    try:
        d = json.loads(path.read_text())
        return int(d["done"]), d.get("total")
    except (OSError, ValueError, KeyError):
        return 0, None


#: seconds a job may go on after the other failed before it is stopped (at least 4 heartbeats: a producer told
#: to drop or error on a dead consumer group, or a consumer told the producer's error, ends by itself)
STOP_GRACE = 5.0


class _Stopper:
    """Stops the job still running ``grace`` seconds after the other one failed (a producer would wait for its
    dead consumer group, a consumer for its dead producer): nothing of ``h5flow run`` waits for ever."""

    def __init__(self, procs: list[subprocess.Popen], grace: float) -> None:
        self.procs = procs
        self.grace = grace
        self.failed = ""  # the job that failed first
        self.stopped = ""  # the job stopped because of it
        self._at: float | None = None

    def check(self) -> None:
        names = ("producer", "consumer")
        if not self.failed:
            for i, p in enumerate(self.procs):
                if p.poll() not in (None, 0):
                    self.failed = names[i]
                    if self.procs[1 - i].poll() is None:
                        self._at = time.time() + self.grace
                    break
        if self._at is not None and time.time() >= self._at:
            self._at = None
            for i, p in enumerate(self.procs):
                if p.poll() is None:
                    print(f"h5flow: the {self.failed} job failed; stopping the {names[i]} job", file=sys.stderr,
                          flush=True)
                    self.stopped = names[i]
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass


def _watch(procs: list[subprocess.Popen], prog_p: Path, prog_c: Path, opts: RunOptions,
           grace: float = STOP_GRACE) -> tuple[str, str]:
    """Wait for both jobs (with a progress bar when ``opts.show_progress``); (the job that failed first, the job
    stopped because of it), "" for none."""
    stopper = _Stopper(procs, grace)
    if not opts.show_progress:
        while any(p.poll() is None for p in procs):
            stopper.check()
            time.sleep(0.1)
        stopper.check()
        return stopper.failed, stopper.stopped
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as bar:
        tp = bar.add_task(f"produced ({opts.producers} ranks)", total=None)
        tc = bar.add_task(f"consumed ({opts.consumers} ranks)", total=None)
        while any(p.poll() is None for p in procs):
            stopper.check()
            dp, total = _read_progress(prog_p)
            dc, _ = _read_progress(prog_c)
            bar.update(tp, completed=dp, total=total)
            bar.update(tc, completed=dc, total=total)
            time.sleep(0.1)
    stopper.check()
    return stopper.failed, stopper.stopped
