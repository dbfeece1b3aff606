"""Producer and consumer programs for the stream tests, run as separate processes (and MPI jobs).

    python tests/stream_actors.py produce CONFIG_JSON [--steps N] [--shape X Y Z] [--blocks B] [--sleep S]
                                          [--fsize-limit BYTES [--fsize-rank R]]
                                          [--start-on-stdin] [--no-close] [--fail-at STEP [--fail-when FILE]]
    python tests/stream_actors.py consume CONFIG_JSON [--timeout T] [--max-steps K] [--hold-at STEP]
                                          [--raise-at STEP]
                                          [--sleep S] [--check] [--shape X Y Z] [--blocks B] [--ready FILE]

CONFIG_JSON is a TransportConfig as JSON (the keywords of ``TransportConfig.of``). Output lines (rank 0 unless noted) are parsed by the tests:
``PUBLISHED <step> <0|1> <waited_s>``, ``STEP <step> <seq> <rank> <block ids comma-separated>`` (every
rank), ``CHECKED <step>``, ``STATUS <status> <time> <reason>``, ``DISCARDED <steps>``, ``MISSED <steps>``,
``LOST <steps>`` (socket: dropped for this group while it was declared lost).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def _config(text: str):  # noqa: ANN202
    from h5flow.config import PartitionerConfig, TransportConfig

    d = json.loads(text)
    part = PartitionerConfig.of(**d.pop("partitioner", {}))
    return TransportConfig.of(partitioner=part, **d)


def _osc(args: argparse.Namespace):  # noqa: ANN202
    from h5flow.miniapps.oscillator import OscillatorConfig

    return OscillatorConfig(shape=tuple(args.shape), nblocks=args.blocks, steps=args.steps)


def produce(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from h5flow.miniapps.oscillator import Simulation
    from h5flow.transports import open_writer

    comm = MPI.COMM_WORLD
    if args.fsize_limit is not None and args.fsize_rank in (-1, comm.rank):
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize_limit, args.fsize_limit))
    sim = Simulation(_osc(args), comm.rank, comm.size)
    if args.start_on_stdin:  # several producers started together open their writers at the same instant
        print("READY", flush=True)
        sys.stdin.readline()
    w = open_writer(comm, _config(args.config))
    if args.no_close:  # a producer that never closes its writer: it publishes, then the program ends
        _publish(args, comm, sim, w)
        return
    with w:
        _publish(args, comm, sim, w)


def _publish(args: argparse.Namespace, comm, sim, w) -> None:  # noqa: ANN001
    for s in range(args.steps):
        if s == args.fail_at:  # the simulation fails (once FILE exists: the test says when)
            while args.fail_when and not os.path.exists(args.fail_when):
                time.sleep(0.02)
            raise RuntimeError(f"the simulation failed before step {s}")
        t = sim.advance(s)
        w.begin_step(s, t)
        for b in sim.blocks():
            w.put("mesh", b)
        info = w.end_step()
        if comm.rank == 0:
            print(f"PUBLISHED {s} {int(info.published)} {w.events[-1].get('waited', 0.0):.4f}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)


def consume(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from h5flow.analyses._histogram import Histogram, histogram_of
    from h5flow.miniapps.oscillator import Simulation
    from h5flow.transports import StepStatus, TransportError, open_reader

    comm = MPI.COMM_WORLD
    reader = open_reader(comm, _config(args.config))
    if args.ready and comm.rank == 0:
        open(args.ready, "w").close()  # the test may start the producer now
    hist = Histogram(bins=10)
    hist.initialize(comm)
    ref = Simulation(_osc(args), 0, 1) if args.check else None
    done = 0
    while True:
        res = reader.begin_step(args.timeout)
        if res.status is not StepStatus.OK:
            if comm.rank == 0:
                print(f"STATUS {res.status.value} {time.time():.4f} {res.reason}", flush=True)
            break
        st = res.step
        ids = st.my_block_ids("mesh")
        print(f"STEP {st.step} {st.seq} {comm.rank} {','.join(map(str, ids))}", flush=True)
        if args.raise_at is not None and st.step == args.raise_at:
            raise RuntimeError(f"the analysis failed on step {st.step}")  # the process dies holding the step
        if args.hold_at is not None and st.step == args.hold_at:
            print(f"HOLDING {st.step} {os.getpid()}", flush=True)
            time.sleep(120)  # the test kills -9 this process while it holds an unreleased step
        if ref is not None:
            try:
                result = hist.execute(st)
            except TransportError as e:  # socket: a producer rank died before this rank had its blocks
                print(f"STATUS error {time.time():.4f} {e}", flush=True)
                break
            if comm.rank == 0:
                _, _, counts = histogram_of(ref.global_field(st.step), 10)
                assert np.array_equal(result.counts, counts), f"step {st.step}: {result.counts} != {counts}"
                print(f"CHECKED {st.step}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
        reader.release()
        done += 1
        if args.max_steps is not None and done >= args.max_steps:
            if comm.rank == 0:
                print(f"STATUS stopped {time.time():.4f} after {done} steps", flush=True)
            break
    if comm.rank == 0:
        print("DISCARDED " + ",".join(str(s) for s, _ in reader.discarded), flush=True)
        print("MISSED " + ",".join(map(str, reader.missed)), flush=True)
        print("LOST " + ",".join(str(s) for s, _ in getattr(reader, "dropped", [])), flush=True)
    reader.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["produce", "consume"])
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--shape", type=int, nargs=3, default=[16, 16, 16])
    p.add_argument("--blocks", type=int, default=None)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--hold-at", type=int, default=None)
    p.add_argument("--raise-at", type=int, default=None, help="consume: the analysis raises on this step")
    p.add_argument("--check", action="store_true")
    p.add_argument("--fsize-limit", type=int, default=None, help="produce: RLIMIT_FSIZE in bytes (files larger fail)")
    p.add_argument("--fsize-rank", type=int, default=-1, help="produce: the rank --fsize-limit applies to (-1: all)")
    p.add_argument("--start-on-stdin", action="store_true",
                   help="produce: print READY once set up, open the writer when a line arrives on stdin")
    p.add_argument("--ready", default=None, help="consume: create this file once the reader is open")
    p.add_argument("--no-close", action="store_true", help="produce: never close the writer")
    p.add_argument("--fail-at", type=int, default=None, help="produce: raise before this step")
    p.add_argument("--fail-when", default=None, help="produce: ... once this file exists")
    args = p.parse_args()
    produce(args) if args.role == "produce" else consume(args)


if __name__ == "__main__":
    sys.exit(main())
