"""Consumer side of the adios2 transport: each consumer rank reads its share of the M producer streams."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import Association, Block, MeshMeta, StepMeta
from h5flow.transports._buffers import ReadBuffers
from h5flow.transports._common import assemble_blocks, check_association, step_nbytes
from h5flow.transports._phases import Phases
from h5flow.transports._mpiutil import bcast_from_root, sleepy_allgather, sleepy_wait
from h5flow.transports.adios2.stream import (ENGINES, INLINE, PAYLOAD, Announcement, announcement_path, engine_name,
                                             payload_layout, reader_parameters, stream_name, stream_reader, streams_of)
from h5flow.transports.base import BeginStepResult, Reader, ReadStep, StepStatus, TransportError

Rows = dict[str, dict[str, dict[int, np.ndarray]]]  # mesh → dataset path → block id → (count, components)
OWN_COPY_BYTES = 1 << 20  # datasets smaller than this are handed out as copies, not as views of the payload


class Adios2ReadStep(ReadStep):
    """A step whose blocks were all fetched in ``begin_step`` (one ``PerformGets`` per stream)."""

    def __init__(self, step: int, time_: float, meta: StepMeta, assignment: dict[str, list[int]],
                 seq: int, rows: Rows) -> None:
        super().__init__(step, time_, meta, assignment)
        self.seq = seq
        self._rows = rows

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        self._check_mesh(mesh)
        m = self.meta.meshes[mesh]
        wanted = check_association(m, arrays, association)
        rows = self._rows.get(mesh, {})
        values = {a.name: rows.get(f"{a.association}/{a.name}", {}) for a in wanted}
        return assemble_blocks(m, sorted(self.my_block_ids(mesh)), wanted, values, rows.get("geometry/positions", {}))


@dataclass
class _Stream:
    rank: int  # the producer rank that writes it
    io: Any
    engine: Any
    state: str = "idle"  # idle (between steps) | in_step | ended
    info: dict[str, Any] = field(default_factory=dict)


def _owners(partitioner: Any, mesh: MeshMeta, n: int) -> list[int]:
    return list(partitioner.owners(mesh.blocks, n)) if mesh.blocks else []


class Adios2Reader(Reader):
    """Reads an adios2 stream as one consumer group (all ranks of ``comm``)."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        import adios2.bindings as ab

        self._ab = ab
        try:
            self.engine_kind = engine_name(config)
        except ValueError as e:
            raise TransportError(str(e)) from None
        announcement_path(config.filename)  # validates the name on every rank
        self.info: Announcement | None = None
        self.events: list[dict[str, float | int]] = []
        self.discarded: list[tuple[int, str]] = []  # steps some producer streams skipped (SST Discard policy)
        self.missed: list[int] = []
        self._adios = ab.ADIOS()
        self._streams: list[_Stream] = []
        self._seq = 0
        self._step_t0 = 0.0
        self._seen = 0.0
        self._published = 0.0
        self._nbytes = 0
        self._buffers = ReadBuffers()  # fetch buffers, reused once no analysis refers to them
        self._phase = Phases()  # per-step phase times, in each released step's event ("phases")

    # -- attach ----------------------------------------------------------------------------------
    def _find_announcement(self, deadline: float | None) -> tuple[Announcement | None, str]:
        path = announcement_path(self.config.filename)
        delay = self.settings.poll_min
        while True:
            try:
                return Announcement.load(path), ""
            except FileNotFoundError:
                pass
            except (ValueError, KeyError, TypeError) as e:
                return None, str(e)
            if deadline is not None and time.time() >= deadline:
                return None, ""
            time.sleep(delay)
            delay = min(delay * 2, self.settings.poll_max)

    def _attach(self, deadline: float | None, timeout: float | None) -> BeginStepResult | None:
        """Collective: wait for the producers' announcement, then open this rank's streams."""
        found = self._find_announcement(deadline) if self.comm.rank == 0 else None
        info, error = bcast_from_root(self.comm, found)
        if error:
            return BeginStepResult(StepStatus.ERROR, None, error)
        if info is None:
            return BeginStepResult(StepStatus.NOT_READY, None, f"no adios2 stream yet at "
                                   f"{announcement_path(self.config.filename)} after {timeout:g} s")
        if info.engine != self.engine_kind:
            return BeginStepResult(StepStatus.ERROR, None, f"the producers write engine {info.engine!r}, this "
                                   f"consumer is configured for {self.engine_kind!r}: use the same engine")
        err = ""
        try:
            for r in streams_of(self.comm.rank, info.producers, self.comm.size):
                io = self._adios.DeclareIO(f"h5flow-reader-{r}")
                io.SetEngine(ENGINES[self.engine_kind])
                io.SetParameters(reader_parameters(self.config, self.engine_kind))
                engine = io.Open(stream_name(self.config.filename, r), self._ab.Mode.Read)
                self._streams.append(_Stream(r, io, engine))
        except Exception as e:  # noqa: BLE001 - ADIOS2 raises plain exceptions; reported as the stream's error
            err = f"rank {self.comm.rank}: cannot open producer stream {r}: {e}"
        errors = [e for e in sleepy_allgather(self.comm, err) if e]
        if errors:
            return BeginStepResult(StepStatus.ERROR, None, "; ".join(errors))
        self.info = info
        return None

    # -- steps -----------------------------------------------------------------------------------
    def _advance(self, s: _Stream, deadline: float | None) -> str:
        """Begin the next ADIOS2 step of an idle stream; returns an error message or ''."""
        ab = self._ab
        wait = -1.0 if deadline is None else max(0.0, deadline - time.time())
        status = s.engine.BeginStep(ab.StepMode.Read, wait)
        if status == ab.StepStatus.OK:
            info = json.loads(s.engine.Get(s.io.InquireVariable("info")))
            if info.get("run_id") != (self.info.run_id if self.info else None):
                return f"producer stream {s.rank} belongs to another run ({info.get('run_id')}): stale stream files?"
            if s.rank == 0:
                info["meta"] = s.engine.Get(s.io.InquireVariable("meta"))
            s.state, s.info = "in_step", info
        elif status == ab.StepStatus.EndOfStream:
            s.state = "ended"
        elif status == ab.StepStatus.OtherError:
            return f"producer stream {s.rank} failed (ADIOS2 BeginStep: OtherError; the producer rank was lost?)"
        return ""

    def _do_begin_step(self, timeout: float | None) -> BeginStepResult:
        comm = self.comm
        t0 = time.time()
        self._phase.take()  # a step's phases start at its begin_step
        self._buffers.next_step()
        deadline = None if timeout is None else t0 + timeout
        if self.info is None:
            res = self._attach(deadline, timeout)
            if res is not None:
                return res
        assert self.info is not None
        while True:
            err = ""
            for s in self._streams:
                if s.state == "idle" and not err:
                    try:
                        err = self._advance(s, deadline)
                    except Exception as e:  # noqa: BLE001
                        err = f"producer stream {s.rank}: {e}"
            everyone = sleepy_allgather(comm, (err, [(s.rank, s.state, s.info.get("step", -1)) for s in self._streams]))
            errors = [e for e, _ in everyone if e]
            if errors:
                return BeginStepResult(StepStatus.ERROR, None, "; ".join(errors))
            states = [st for _, part in everyone for st in part]
            steps = {step for _, state, step in states if state == "in_step"}
            if all(state == "ended" for _, state, _ in states):
                return BeginStepResult(StepStatus.END_OF_STREAM)
            ended = any(state == "ended" for _, state, _ in states)
            if steps and (len(steps) > 1 or ended):
                # Streams disagree: some producer streams dropped steps (SST's Discard policy). Skip the
                # older steps until every stream offers the same one.
                newest = max(steps)
                for s in self._streams:
                    if s.state == "in_step" and (ended or s.info["step"] < newest):
                        s.engine.EndStep()
                        s.state, s.info = "idle", {}
                skipped = sorted(st for st in steps if ended or st < newest)
                self.discarded.extend((st, "dropped by a producer stream (queue full)") for st in skipped
                                      if not any(d[0] == st for d in self.discarded))
                continue
            if any(state == "idle" for _, state, _ in states):
                if deadline is not None and time.time() >= deadline:
                    waiting = sorted(r for r, state, _ in states if state == "idle")
                    return BeginStepResult(StepStatus.NOT_READY, None, f"waiting for producer streams {waiting} "
                                           f"after {timeout:g} s")
                continue
            break
        self._seen = time.time()
        self._phase.add("discover", self._seen - t0)
        return self._read_step(t0)

    def _read_step(self, t0: float) -> BeginStepResult:
        comm = self.comm
        assert self.info is not None
        t_meta = time.perf_counter()
        head = next((s.info for s in self._streams if s.rank == 0), None)
        head = bcast_from_root(comm, head and {k: head[k] for k in ("step", "time", "meta")})
        published = comm.allreduce(max((s.info["published"] for s in self._streams), default=0.0), op=_max())
        meta = StepMeta.from_json(head["meta"])
        owners = {name: _owners(self.partitioner, m, comm.size) for name, m in meta.meshes.items()}
        self._phase.add("meta", time.perf_counter() - t_meta)
        rows: Rows = {}
        outgoing: list[list[tuple[str, str, int, np.ndarray]]] = [[] for _ in range(comm.size)]
        for s in self._streams:
            with self._phase("read"):
                fetched = self._fetch(s, meta)
            for mesh, by_path in fetched.items():
                for path, by_block in by_path.items():
                    for b, arr in by_block.items():
                        dest = owners[mesh][b]
                        if dest == comm.rank:
                            rows.setdefault(mesh, {}).setdefault(path, {})[b] = arr
                        else:
                            outgoing[dest].append((mesh, path, b, arr))
        if self._exchange_needed(meta, owners):
            with self._phase("exchange"):
                sleepy_wait(comm)
                for part in comm.alltoall(outgoing):
                    for mesh, path, b, arr in part:
                        rows.setdefault(mesh, {}).setdefault(path, {})[b] = arr
        assignment = {name: [b for b, o in enumerate(own) if o == comm.rank] for name, own in owners.items()}
        self._step_t0, self._published, self._nbytes = t0, published, step_nbytes(meta)
        step = Adios2ReadStep(meta.step, meta.time, meta, assignment, self._seq, rows)
        return BeginStepResult(StepStatus.OK, step)

    def _exchange_needed(self, meta: StepMeta, owners: dict[str, list[int]]) -> bool:
        """True when some block's stream is read by another consumer rank than the one it is assigned to."""
        assert self.info is not None
        m, n = self.info.producers, self.comm.size
        return any(stream_reader(bm.owner, m, n) != owners[name][bm.block_id]
                   for name, mesh in meta.meshes.items() for bm in mesh.blocks)

    def _fetch(self, s: _Stream, meta: StepMeta) -> Rows:
        """Every block stream ``s`` holds, all arrays: its ``payload`` in one deferred Get and one PerformGets,
        its small datasets from the ``inline`` string (stream.py)."""
        slots, size, inline_size = payload_layout(meta, s.rank)
        out: Rows = {}
        if not slots:
            return out
        # last step's buffer when nothing outside this reader refers to it any more: a fresh 32 MiB array is a
        # fresh mmap each step (above glibc's largest mmap threshold), every page faulted and zeroed again on
        # the copy, which cost more than the copy itself
        buf = self._buffers.take((size,), np.dtype(np.uint8))
        if size:
            var = self._variable(s, meta, PAYLOAD)
            if list(var.Shape()) != [size]:
                raise TransportError(f"step {meta.step}: producer stream {s.rank}'s {PAYLOAD} holds "
                                     f"{list(var.Shape())} bytes, the step's metadata says {size}: producer and "
                                     "consumer run different h5flow versions?")
            var.SetSelection([[0], [size]])
            s.engine.Get(var, buf, self._ab.Mode.Deferred)
            s.engine.PerformGets()
        small = np.empty(0, dtype=np.uint8)
        if inline_size:
            small = np.frombuffer(bytearray(base64.b64decode(s.engine.Get(self._variable(s, meta, INLINE)))),
                                  dtype=np.uint8)
            if small.size != inline_size:
                raise TransportError(f"step {meta.step}: producer stream {s.rank}'s {INLINE} holds {small.size} "
                                     f"bytes, the step's metadata says {inline_size}")
        for slot in slots:
            src = small if slot.inline else buf
            arr = src[slot.offset:slot.offset + slot.nbytes].view(slot.dtype).reshape(slot.rows, slot.components)
            if not slot.inline and slot.nbytes < OWN_COPY_BYTES:
                arr = arr.copy()  # a small array an analysis keeps must not hold the step's whole buffer
            out.setdefault(slot.mesh, {})[slot.path] = {b: arr[a:a + n] for b, a, n in slot.spans}
        return out

    @staticmethod
    def _variable(s: _Stream, meta: StepMeta, name: str) -> Any:
        var = s.io.InquireVariable(name)
        if var is None:
            raise TransportError(f"step {meta.step}: producer stream {s.rank} has no variable {name}")
        return var

    def _do_release(self, step: ReadStep) -> None:
        if isinstance(step, Adios2ReadStep):
            step._rows = {}  # the step's views of the fetch buffers go (blocks already handed out stay valid)
        with self._phase("release"):
            for s in self._streams:
                if s.state == "in_step":
                    s.engine.EndStep()
                    s.state, s.info = "idle", {}
        t_barrier = time.perf_counter()
        sleepy_wait(self.comm)
        barrier = time.perf_counter() - t_barrier
        self.events.append({"step": step.step, "seq": self._seq, "published": self._published,
                            "visible": self._seen, "begin": self._step_t0, "released": time.time(),
                            "nbytes": self._nbytes, "barrier": barrier,
                            "phases": {**self._phase.take(), "barrier": barrier}})
        self._seq += 1

    def _do_close(self) -> None:
        for s in self._streams:
            try:
                s.engine.Close()
            except Exception:  # noqa: BLE001, S110 - the producer may be gone already; nothing left to release
                pass
        self._streams = []


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
