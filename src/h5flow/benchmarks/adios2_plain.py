"""The reference for the adios2 transport: a plain ADIOS2 writer/reader pair with no h5flow code in between.

``h5flow bench transit`` runs it as the rows ``adios2-sst-plain`` and ``adios2-bp5-plain``: M writer
processes each open their own stream (``<prefix>.r<rank:05d>``, the adios2 transport's names) with the
same engine parameters as the transport (SST: ``RendezvousReaderCount=1``, ``RegistrationMethod=File``,
``QueueLimit``, ``QueueFullPolicy=Block``; BP5 readers poll every 20 ms, as the transport's), and publish
one 1-D float64 variable of the same bytes per step; N reader processes read the streams
:func:`~h5flow.transports.adios2.stream.streams_of` gives them (SENSEI's contiguous mapping, as the
transport) with ``BeginStep`` / deferred ``Get`` / ``PerformGets`` / ``EndStep``. The PyPI wheel has no
MPI, so no MPI either: plain processes.

The actors (``python adios2_plain.py write|read …``, run as a *file*, so nothing of h5flow is imported
there, except h5flow's oscillator in a writer asked to compute it: ``run_pair(..., oscillator=True)``, the
reference for what SST costs when its writer process computes as the transport's producer does) print one JSON line: per-step times, peak RSS samples. :func:`run_pair` launches them and returns a
record shaped like :func:`h5flow.runner.run`'s (``time_to_solution``, ``transport_seconds``, ``latency``,
``producer``/``consumer`` ``ranks`` with ``rss``) so the benchmark summarizes both alike. Time inside the
transport is counted as for the transport: a writer's ``BeginStep`` → ``EndStep`` return (SST's queue-full
wait included, as for the transport's writer), a reader's time from the step being visible on all its
streams to its last ``EndStep`` (``Get``, ``PerformGets``, ``EndStep``), the slowest process per step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENGINES = {"sst": "SST", "bp5": "BP5"}
POLL_S = 0.02  # BP5 reader polling, the adios2 transport's poll_max


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _io(adios: Any, name: str, engine: str, params: dict[str, str]) -> Any:
    io = adios.DeclareIO(name)
    io.SetEngine(ENGINES[engine])
    io.SetParameters(params)
    return io


def _oscillator(nbytes: int) -> Any:
    """``step -> float32 array`` of h5flow's oscillator on one rank, ``nbytes`` per step (the benchmark's producer)."""
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation, oscillator_shape

    sim = Simulation(OscillatorConfig(shape=oscillator_shape(nbytes, 1), nblocks=1, ghost=0), 0, 1)

    def advance(step: int) -> Any:
        sim.advance(step)
        return sim.blocks()[0].cell_arrays["data"].reshape(-1)

    return advance


def write(stream: str, engine: str, nbytes: int, steps: int, queue_limit: int,
          oscillator: bool = False) -> dict[str, Any]:
    """One writer process: ``steps`` steps of one variable of ``nbytes`` bytes (float64; ``oscillator``: float32,
    computed by h5flow's oscillator before each step, as the transport's producer computes it)."""
    import adios2.bindings as ab
    import numpy as np

    start = time.time()
    rss = [(start, _rss())]
    advance = _oscillator(nbytes) if oscillator else None
    data = advance(0) if advance else np.random.default_rng(0).random(max(1, nbytes // 8))
    n = data.size
    params = ({"RendezvousReaderCount": "1", "RegistrationMethod": "File", "QueueLimit": str(queue_limit),
               "QueueFullPolicy": "Block"} if engine == "sst" else {})
    adios = ab.ADIOS()  # must outlive its IO and engine
    io = _io(adios, "plain-writer", engine, params)
    var = io.DefineVariable("data", data, [n], [0], [n], True)
    eng = io.Open(stream, ab.Mode.Write)
    io_times: list[tuple[int, float, float, float]] = []
    published: list[float] = []
    for s in range(steps):
        if advance is not None:
            data = advance(s)
        t0 = time.time()
        eng.BeginStep()
        eng.Put(var, data, ab.Mode.Deferred)
        published.append(time.time())
        eng.EndStep()
        io_times.append((s, t0, time.time(), 0.0))
        rss.append((time.time(), _rss()))
    eng.Close()
    rss.append((time.time(), _rss()))
    return {"start": start, "end": time.time(), "io": io_times, "published": published, "rss": rss,
            "bytes": data.nbytes * steps}


def read(streams: list[str], engine: str, timeout: float) -> dict[str, Any]:
    """One reader process: every step of ``streams`` into reused buffers until the end of the streams."""
    import adios2.bindings as ab
    import numpy as np

    start = time.time()
    rss = [(start, _rss())]
    adios = ab.ADIOS()
    params = {"OpenTimeoutSecs": str(int(timeout))}
    if engine == "bp5":
        params["BeginStepPollingFrequencySecs"] = repr(POLL_S)
    deadline = time.time() + timeout
    engines = []
    for i, name in enumerate(streams):
        # BP5's reader needs the writer's directory; SST's waits for the contact file itself (opening as
        # soon as the file is complete hung the second stream's first BeginStep here)
        while engine == "bp5" and not os.path.isdir(name) and time.time() < deadline:
            time.sleep(POLL_S)
        io = _io(adios, f"plain-reader-{i}", engine, params)
        engines.append((io, io.Open(name, ab.Mode.Read)))
    bufs: dict[int, Any] = {}
    io_times: list[tuple[int, float]] = []
    events: list[dict[str, float]] = []
    step = 0
    while engines:
        ask = time.time()
        # blocking BeginStep, as a plain reader does; run_pair kills a hung reader
        status = [e.BeginStep(ab.StepMode.Read, -1.0) for _, e in engines]
        if any(st != ab.StepStatus.OK for st in status):
            if all(st == ab.StepStatus.EndOfStream for st in status):
                break
            raise RuntimeError(f"plain ADIOS2 reader: BeginStep returned {status} at step {step}")
        visible = time.time()
        for k, (io, e) in enumerate(engines):
            var = io.InquireVariable("data")
            n = var.Shape()[0]
            if k not in bufs or bufs[k].size != n:
                bufs[k] = np.empty(n, dtype=np.float32 if var.Type() == "float" else np.float64)
            var.SetSelection([[0], [n]])
            e.Get(var, bufs[k], ab.Mode.Deferred)
            e.PerformGets()
        for _, e in engines:
            e.EndStep()
        done = time.time()
        io_times.append((step, done - visible))
        events.append({"step": step, "begin": ask, "visible": visible, "released": done})
        rss.append((done, _rss()))
        deadline = done + timeout
        step += 1
    for _, e in engines:
        e.Close()
    rss.append((time.time(), _rss()))
    return {"start": start, "end": time.time(), "io": io_times, "events": events, "rss": rss, "steps": step}


FAILED_GRACE_S = 5.0  # once one process of a pair has failed, the others get this long before they are killed


def _wait_all(procs: list[subprocess.Popen[str]], deadline: float) -> list[str]:
    """Every process's standard output, in order, once all have ended; read as it comes, so a full pipe
    blocks none. When one fails (SST's rendezvous can: a writer crashed, a reader timed out), the others
    would wait for their peer until ``deadline`` (a writer blocks in ``Open`` until its reader comes): they
    are killed ``FAILED_GRACE_S`` later. Whatever still runs at ``deadline`` is killed."""
    import selectors

    sel = selectors.DefaultSelector()
    got: dict[int, list[bytes]] = {}
    for i, p in enumerate(procs):
        assert p.stdout is not None
        sel.register(p.stdout.fileno(), selectors.EVENT_READ, i)
        got[i] = []
    open_fds = len(procs)
    stop_at = deadline
    while open_fds and time.time() < stop_at:
        for key, _ in sel.select(timeout=0.2):
            part = os.read(key.fd, 1 << 16)  # the raw descriptor: nothing is buffered in the text wrapper
            if part:
                got[key.data].append(part)
            else:  # end of file: the process closed its output (exited)
                sel.unregister(key.fd)
                open_fds -= 1
        if any(p.poll() not in (None, 0) for p in procs):
            stop_at = min(stop_at, time.time() + FAILED_GRACE_S)
    sel.close()
    outs = []
    for i, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
        p.wait()
        assert p.stdout is not None
        while part := os.read(p.stdout.fileno(), 1 << 16):
            got[i].append(part)
        p.stdout.close()
        outs.append(b"".join(got[i]).decode(errors="replace"))
    return outs


def run_pair(prefix: str, engine: str, producers: int, consumers: int, nbytes: int, steps: int,
             queue_limit: int = 4, timeout: float = 120.0, oscillator: bool = False) -> dict[str, Any]:
    """Launch ``producers`` writers and ``consumers`` readers of ``nbytes`` per writer per step; the run record.
    ``oscillator``: each writer computes h5flow's oscillator before each step (the transport's producer's work)."""
    from h5flow.runner import _io_seconds, _latency_stats
    from h5flow.transports.adios2.stream import stream_name, streams_of

    if engine not in ENGINES:
        raise ValueError(f"plain ADIOS2 engine {engine!r}; accepted: {', '.join(ENGINES)}")
    me = [sys.executable, str(Path(__file__).resolve())]
    launched = time.time()
    writers = [subprocess.Popen([*me, "write", stream_name(prefix, r), engine, str(nbytes), str(steps),
                                 str(queue_limit), *(["oscillator"] if oscillator else [])], stdout=subprocess.PIPE,
                                text=True) for r in range(producers)]
    readers = [subprocess.Popen([*me, "read", ",".join(stream_name(prefix, r) for r in
                                                       streams_of(c, producers, consumers)), engine, str(timeout)],
                                stdout=subprocess.PIPE, text=True) for c in range(consumers)]
    procs = [("consumer", rank, p) for rank, p in enumerate(readers)] + \
        [("producer", rank, p) for rank, p in enumerate(writers)]
    outs = _wait_all([p for _, _, p in procs], launched + timeout + 60 * steps)
    parts: dict[str, list[dict[str, Any]]] = {"producer": [], "consumer": []}
    errors = []
    for (role, rank, p), out in zip(procs, outs):
        if p.returncode != 0 or not out.strip():
            errors.append(f"plain ADIOS2 {role} {rank} exited with {p.returncode}")
            continue
        parts[role].append({"rank": rank, **json.loads(out.strip().splitlines()[-1])})
    finished = time.time()
    if errors:
        raise RuntimeError("; ".join(errors))
    prod, cons = {"ranks": parts["producer"]}, {"ranks": parts["consumer"]}
    # latency as the transport's: the step's last stream published → visible on the reader
    published = [max(w["published"][s] for w in parts["producer"]) for s in range(steps)]
    events = [{**e, "published": published[e["step"]]} for e in cons["ranks"][0]["events"] if e["step"] < steps]
    return {"transport": f"adios2-{engine}-plain", "producers": producers, "consumers": consumers, "steps": steps,
            "steps_consumed": min(r["steps"] for r in parts["consumer"]),
            "bytes": sum(w["bytes"] for w in parts["producer"]),
            "time_to_solution": max(r["end"] for r in parts["consumer"]) - launched,
            "transport_seconds": {"write": _io_seconds(prod), "read": _io_seconds(cons)},
            "latency": _latency_stats(events), "discarded": [], "status": "end_of_stream",
            "launched": launched, "finished": finished, "producer": prod, "consumer": cons}


def main(argv: list[str]) -> int:
    role = argv[0] if argv else ""
    if role == "write" and len(argv) in (6, 7) and argv[6:] in ([], ["oscillator"]):
        out = write(argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6:] == ["oscillator"])
    elif role == "read" and len(argv) == 4:
        out = read(argv[1].split(","), argv[2], float(argv[3]))
    else:
        print("usage: adios2_plain.py write STREAM sst|bp5 NBYTES STEPS QUEUE_LIMIT [oscillator]\n"
              "       adios2_plain.py read STREAM[,STREAM...] sst|bp5 TIMEOUT_S", file=sys.stderr)
        return 2
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
