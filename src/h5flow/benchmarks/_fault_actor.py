"""The producer and consumer that ``h5flow bench faults`` runs (and kills): the oscillator through a transport,
every block a consumer receives reported with its CRC-32, so the suite can check it against what was published.

    python -m h5flow.benchmarks._fault_actor produce CONFIG_JSON --steps N --shape X Y Z --blocks B [--sleep S]
                                                     [--start-when FILE] [--fail-rank R --fail-at S --fail-how H]
    python -m h5flow.benchmarks._fault_actor consume CONFIG_JSON --shape X Y Z --blocks B [--timeout T] [--sleep S]
    python -m h5flow.benchmarks._fault_actor intrude STREAM --seed N    (socket: the hostile peer, until SIGTERM)

stdout lines: ``PID <role> <rank> <pid>`` (every rank, first), ``READY`` (producer rank 0, --start-when),
``PUBLISHED <step> <0|1>`` (producer rank 0), ``B <step> <block id> <crc32>`` (every consumer rank, each block
received), ``R <step>`` (consumer rank 0, the step released), ``END <status>`` and
``DISCARDED|MISSED|LOST <steps comma-separated>`` (consumer rank 0).
A failure is one stderr line ``FAILED: <exception type>: <message>`` and exit status 1 (producer) or 2 (consumer).

``--fail-how raise`` makes producer rank ``--fail-rank`` raise :class:`InjectedFault` inside step ``--fail-at``;
``--fail-how disagree`` makes it put that step's blocks with float64 data where the other ranks put float32.
Either way no rank calls ``MPI_Abort`` (which would end a rank the library left waiting): what the other
ranks do is the library's own behaviour, which the suite classifies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from typing import Any

import numpy as np


def transport_config(text: str) -> Any:
    from h5flow.config import PartitionerConfig, TransportConfig

    d = json.loads(text)
    return TransportConfig.of(partitioner=PartitionerConfig.of(**d.pop("partitioner", {})), **d)


def oscillator(args: argparse.Namespace) -> Any:
    from h5flow.miniapps.oscillator import OscillatorConfig

    return OscillatorConfig(shape=tuple(args.shape), nblocks=args.blocks, steps=args.steps)


def block_crc(data: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(data, dtype=np.float32).tobytes())


class InjectedFault(RuntimeError):
    """The exception a producer rank raises on purpose (``--fail-how raise``)."""


def produce(args: argparse.Namespace, comm: Any) -> None:
    from h5flow.miniapps.oscillator import Simulation
    from h5flow.transports import open_writer

    sim = Simulation(oscillator(args), comm.rank, comm.size)
    if args.start_when:  # every rank set up, READY; all open their writers once the file exists (1 ms polls)
        comm.Barrier()
        if comm.rank == 0:
            print("READY", flush=True)
        while not os.path.exists(args.start_when):
            time.sleep(0.001)
    with open_writer(comm, transport_config(args.config)) as w:
        for s in range(args.steps):
            t = sim.advance(s)
            w.begin_step(s, t)
            failing = comm.rank == args.fail_rank and s == args.fail_at
            if failing and args.fail_how == "raise":
                raise InjectedFault(f"injected: producer rank {comm.rank} raises inside step {s}")
            for b in sim.blocks():
                if failing and args.fail_how == "disagree":
                    b.cell_arrays["data"] = b.cell_arrays["data"].astype(np.float64)
                w.put("mesh", b)
            info = w.end_step()
            if comm.rank == 0:
                print(f"PUBLISHED {s} {int(info.published)}", flush=True)
            if args.sleep:
                time.sleep(args.sleep)


def consume(args: argparse.Namespace, comm: Any) -> None:
    from h5flow.transports import StepStatus, TransportError, open_reader

    reader = open_reader(comm, transport_config(args.config))
    try:
        while True:
            res = reader.begin_step(args.timeout)
            if res.status is not StepStatus.OK:
                if comm.rank == 0:
                    print(f"END {res.status.value}", flush=True)
                if res.status is not StepStatus.END_OF_STREAM:
                    raise TransportError(f"consumer stopped ({res.status.value}): {res.reason}")
                break
            st = res.step
            for blk in st.blocks("mesh", ["data"]):
                print(f"B {st.step} {blk.block_id} {block_crc(blk.arrays('cell')['data'])}", flush=True)
            if args.sleep:
                time.sleep(args.sleep)
            reader.release()
            if comm.rank == 0:
                print(f"R {st.step}", flush=True)
    finally:
        if comm.rank == 0:
            for name in ("discarded", "missed", "dropped"):
                items = getattr(reader, name, [])
                steps = [s if isinstance(s, int) else s[0] for s in items]
                label = "LOST" if name == "dropped" else name.upper()
                print(f"{label} {','.join(map(str, steps))}", flush=True)
        reader.close()


# malformed bodies; the well-formed ones name another group than the consumer's: a peer with the token that
# impersonates the consumer (BYE in its name) is outside the threat model (docs/SOCKET.md, Authentication)
HOSTILE_BODIES = [b'{"group": "intruder", "seq": 1e400, "floor": 0, "ev": 0}', b'{"req": 1, "seq": 1e400}',
                  b'{"group": ' + b"[" * 50000 + b"]" * 50000 + b"}", b'{"group": "intruder", "seq": NaN}',
                  b'{"group": "intruder", "seq": -1}', b'{"req": "x", "seq": 0, "mesh": [], "ids": {}, "paths": 1}',
                  b'"string"', b"\xff\xfe\x00", b"{}", b'{"group": "a/../b", "consumers": 1}',
                  b'{"group": "intruder", "consumers": -5}']
HOSTILE_COMMANDS = [b"HELLO", b"PING", b"NEXT", b"GET", b"RELEASE", b"BYE", b"???"]


def intrude(stream: str, seed: int) -> None:
    """Until SIGTERM: malformed requests with the run's token, and floods without it, to random producer ranks
    of the socket stream ``stream``; ``SENT <total>`` after each connection."""
    import random
    import signal
    import threading

    import zmq

    from h5flow.transports.socket.contact import Contact, contact_path

    halt = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: halt.set())
    rng = random.Random(seed)
    path = contact_path(stream)
    while not halt.is_set() and not path.exists():
        time.sleep(0.02)
    try:
        contact = Contact.load(path)
    except (OSError, ValueError):
        return
    sent = 0
    ctx = zmq.Context()
    try:
        while not halt.is_set():
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, 100)
            s.connect(rng.choice(contact.ranks).endpoint)
            try:
                if rng.random() < 0.5:
                    for _ in range(rng.randrange(1, 30)):
                        body = rng.choice(HOSTILE_BODIES) if rng.random() < 0.7 else rng.randbytes(rng.randrange(1, 200))
                        s.send_multipart([contact.token.encode(), rng.choice(HOSTILE_COMMANDS), body])
                        sent += 1
                else:
                    for _ in range(2000):
                        s.send_multipart([b"PING", b"{}"])
                        sent += 1
            except zmq.Again:
                pass
            finally:
                s.close(0)
            print(f"SENT {sent}", flush=True)
            halt.wait(0.05)
    finally:
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m h5flow.benchmarks._fault_actor")
    p.add_argument("role", choices=["produce", "consume", "intrude"])
    p.add_argument("config", help="the transport's settings as JSON (intrude: the socket stream's path)")
    p.add_argument("--seed", type=int, default=0, help="intrude: the random seed of its requests")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--shape", type=int, nargs=3, default=[16, 16, 16])
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--start-when", default=None, metavar="FILE",
                   help="produce: print READY once every rank is set up, open the writer once FILE exists")
    p.add_argument("--fail-rank", type=int, default=-1, help="produce: the rank that fails (--fail-how)")
    p.add_argument("--fail-at", type=int, default=-1, help="produce: the step it fails in")
    p.add_argument("--fail-how", choices=["raise", "disagree"], default="raise")
    args = p.parse_args(argv)
    if args.role == "intrude":  # no MPI: the hostile peer is a plain process
        intrude(args.config, args.seed)
        return 0
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    print(f"PID {args.role} {comm.rank} {os.getpid()}", flush=True)
    try:
        produce(args, comm) if args.role == "produce" else consume(args, comm)
    except Exception as e:  # noqa: BLE001 - the suite classifies the failure by its type and message
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if comm.size > 1 and args.fail_rank < 0:
            time.sleep(0.5)  # MPI_Abort tears the job down at once: mpiexec drops output it has not forwarded yet
            comm.Abort(1 if args.role == "produce" else 2)
        return 1 if args.role == "produce" else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
