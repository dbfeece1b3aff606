"""Producer side of the adios2 transport: one ADIOS2 stream (SST or BP5) per producer rank."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import StepMeta
from h5flow.transports.adios2.stream import (ENGINES, INLINE, PAYLOAD, Announcement, Slot, announce, engine_name,
                                             payload_layout, remove_run, retract, stream_name, writer_parameters)
from h5flow.transports._common import PutsWriter, StepPuts, block_payload, step_nbytes
from h5flow.transports._phases import Phases
from h5flow.transports.base import PublishInfo, TransportError


class Adios2Writer(PutsWriter):
    """Publishes each step with one ADIOS2 ``BeginStep``/``Put``/``EndStep`` per producer rank."""

    def dtype_refused(self, dtype: Any) -> str:
        """ADIOS2's Python API defines variables of native-order integers, float32/float64 and complex numbers."""
        dtype = np.dtype(dtype)
        if dtype.fields is not None:
            return ("the adios2 transport cannot stream structured arrays (ADIOS2's Python API defines no compound "
                    "variables); write each field as an array of its own, or use type='hdf5' or 'socket'")
        if dtype.kind == "b" or (dtype.kind in "fc" and dtype.itemsize not in (4, 8, 16)) or \
                (dtype.kind == "f" and dtype.itemsize == 16):
            return (f"the adios2 transport cannot stream {dtype} arrays (ADIOS2's Python API has no such variable "
                    "type); convert it (bool to uint8, float16 or longdouble to float32 or float64), or use "
                    "type='hdf5' or 'socket'")
        if not dtype.isnative:
            return (f"the adios2 transport streams native byte order only, not {dtype.str}; convert it with "
                    f".astype({dtype.newbyteorder('=').str!r})")
        return ""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        import adios2.bindings as ab

        self._ab = ab
        try:
            self.engine = engine_name(config)
        except ValueError as e:
            raise TransportError(str(e)) from None
        self._vars: dict[str, Any] = {}
        self._packed = np.empty(0, dtype=np.uint8)  # the payload buffer, reused from step to step
        self._keep: np.ndarray | None = None  # the array of the step's deferred put, until its EndStep
        self._phase = Phases()  # per-step phase times, in each published step's event ("phases")
        info, error = None, ""
        if comm.rank == 0:
            parent = Path(config.filename).parent
            if not parent.is_dir():
                error = f"the adios2 stream's directory {parent} does not exist: create it first"
            else:
                try:
                    remove_run(config.filename)
                    info = Announcement(uuid.uuid4().hex, comm.size, self.engine, time.time())
                    announce(config.filename, info)
                except OSError as e:
                    error = f"cannot start the adios2 stream {config.filename}: {e}"
        info, error = comm.bcast((info, error), root=0)
        if error:
            raise TransportError(error)
        self.info: Announcement = info
        self._adios = ab.ADIOS()
        self._io = self._adios.DeclareIO(f"h5flow-writer-{comm.rank}")
        self._io.SetEngine(ENGINES[self.engine])
        self._io.SetParameters(writer_parameters(config, self.engine))
        # SST: returns once this stream's consumer rank has connected (RendezvousReaderCount=1)
        self._engine = self._io.Open(stream_name(config.filename, comm.rank), ab.Mode.Write)
        self._open = True

    def _variable(self, name: str, data: np.ndarray) -> Any:
        var = self._vars.get(name)
        shape = list(data.shape)
        if var is None:
            var = self._io.DefineVariable(name, data, shape, [0] * data.ndim, shape, False)
            self._vars[name] = var
        else:
            var.SetShape(shape)
            var.SetSelection([[0] * data.ndim, shape])
        return var

    def _string(self, name: str) -> Any:
        if name not in self._vars:
            self._vars[name] = self._io.DefineVariable(name, "")
        return self._vars[name]

    def _do_end_step(self) -> PublishInfo:
        comm = self.comm
        t0 = time.time()
        step = self._step
        assert step is not None
        meta = self._puts.gather(comm, step, self._step_time)
        nbytes = step_nbytes(meta)
        t_admit = time.time()
        self._phase.add("gather", t_admit - t0)
        with self._phase("begin"):  # SST: waits here while the queue is full (QueueFullPolicy=Block)
            self._engine.BeginStep()
        with self._phase("put"):
            self._put_payload(meta)  # a deferred put: the buffer is not touched again before EndStep
        published = time.time()
        info = {"step": step, "time": self._step_time, "rank": comm.rank, "run_id": self.info.run_id,
                "published": published}
        self._engine.Put(self._string("info"), json.dumps(info))
        if comm.rank == 0:
            self._engine.Put(self._string("meta"), meta.to_json())
        with self._phase("end"):  # the deferred puts are marshalled (copied) into the step's buffer here
            self._engine.EndStep()
        self._keep = None
        done = time.time()
        self._puts = StepPuts()
        self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": t_admit,
                            "written": done, "publish": published, "published": True, "nbytes": nbytes,
                            "phases": self._phase.take()})
        return PublishInfo(step, True, nbytes, "", done - t0)

    def _put_payload(self, meta: StepMeta) -> None:
        """Put this rank's datasets of the step as :func:`payload_layout` places them: the large ones as one
        ``payload`` variable (one request per stream and step on the consumer's side), the small ones in the
        ``inline`` string. A payload that is one block's array as it is goes out without a copy."""
        slots, size, inline_size = payload_layout(meta, self.comm.rank)
        arrays = {(mesh, b.block_id): dict(block_payload(b)) for mesh in meta.meshes for b in self._puts.mine(mesh)}
        big = [slot for slot in slots if not slot.inline]
        if size:
            direct = self._as_is(meta, big, arrays) if len(big) == 1 else None
            if direct is None:
                if self._packed.size != size:  # same size every step in a steady run: no new pages to fault in
                    self._packed = np.empty(size, dtype=np.uint8)
                self._pack(meta, big, arrays, self._packed)
                direct = self._packed
            self._keep = direct  # a deferred put: the array must live, unchanged, until EndStep
            self._engine.Put(self._variable(PAYLOAD, direct), direct, self._ab.Mode.Deferred)
        if inline_size:
            small = np.empty(inline_size, dtype=np.uint8)
            self._pack(meta, [slot for slot in slots if slot.inline], arrays, small)
            self._engine.Put(self._string(INLINE), base64.b64encode(small.tobytes()).decode("ascii"))

    @staticmethod
    def _source(meta: StepMeta, slot: Slot, arrays: dict[tuple[str, int], dict[str, np.ndarray]], block_id: int,
                rows: int) -> np.ndarray:
        src = arrays.get((slot.mesh, block_id), {}).get(slot.path)
        if src is None or src.shape != (rows, slot.components):
            got = "none" if src is None else f"shape {src.shape}"
            raise TransportError(f"step {meta.step}: block {block_id} of mesh {slot.mesh!r} put {got} for "
                                 f"{slot.path}, its metadata says ({rows}, {slot.components})")
        return src

    def _as_is(self, meta: StepMeta, big: list[Slot], arrays: dict[tuple[str, int], dict[str, np.ndarray]]
               ) -> np.ndarray | None:
        """The payload as the producer's own array (bytes), when it is one block's array in the dataset's dtype."""
        slot = big[0]
        if len(slot.spans) != 1:
            return None
        block_id, _, rows = slot.spans[0]
        src = self._source(meta, slot, arrays, block_id, rows)
        if src.dtype != slot.dtype or not src.flags.c_contiguous:
            return None
        return src.reshape(-1).view(np.uint8)

    def _pack(self, meta: StepMeta, slots: list[Slot], arrays: dict[tuple[str, int], dict[str, np.ndarray]],
              out: np.ndarray) -> None:
        for slot in slots:
            dst = out[slot.offset:slot.offset + slot.nbytes].view(slot.dtype).reshape(slot.rows, slot.components)
            for block_id, first, rows in slot.spans:
                # converted to the dataset's dtype, as every transport stores it
                dst[first:first + rows] = self._source(meta, slot, arrays, block_id, rows)

    def _do_close(self) -> None:
        if self._open:
            self._open = False
            self._engine.Close()  # SST: waits until the reader has taken every queued step
            if self.engine == "sst" and self.comm.rank == 0:
                retract(self.config.filename, self.info.run_id)

    def _do_abort(self) -> None:
        # No Close(): an SST reader then reports the writer as failed (BeginStep → OtherError) instead of
        # taking the truncated stream for a complete one.
        self._open = False
