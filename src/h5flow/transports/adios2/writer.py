"""Producer side of the adios2 transport: one ADIOS2 stream (SST or BP5) per producer rank."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import StepMeta
from h5flow.transports.adios2.stream import (ENGINES, Announcement, announce, engine_name, remove_run, retract,
                                             stream_name, writer_parameters)
from h5flow.transports._common import PutsWriter, StepPuts, block_payload, dataset_layout, step_nbytes
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
        self._engine.BeginStep()
        keep = self._put_rows(meta)  # deferred puts: the arrays must live until EndStep
        published = time.time()
        info = {"step": step, "time": self._step_time, "rank": comm.rank, "run_id": self.info.run_id,
                "published": published}
        self._engine.Put(self._string("info"), json.dumps(info))
        if comm.rank == 0:
            self._engine.Put(self._string("meta"), meta.to_json())
        self._engine.EndStep()
        del keep
        done = time.time()
        self._puts = StepPuts()
        self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": t_admit,
                            "written": done, "publish": published, "published": True, "nbytes": nbytes})
        return PublishInfo(step, True, nbytes, "", done - t0)

    def _put_rows(self, meta: StepMeta) -> list[np.ndarray]:
        """Put this rank's rows of every dataset (its blocks concatenated in block-id order)."""
        keep: list[np.ndarray] = []
        for name, mesh in meta.meshes.items():
            mine = self._puts.mine(name)
            if not mine:
                continue
            payloads = [block_payload(b) for b in mine]
            for i, (path, _assoc, dtype, _ncomp) in enumerate(dataset_layout(mesh)):
                parts = [p[i][1] for p in payloads]
                data = parts[0] if len(parts) == 1 else np.concatenate(parts)
                # one dimension on the wire: ADIOS2 copies a (rows, 1) selection row by row (8 M four-byte
                # copies per 32 MiB: 3-5x slower reads than the same bytes as a 1-D variable)
                data = np.ascontiguousarray(data, dtype=dtype).reshape(-1)
                if data.shape[0] == 0:
                    continue
                self._engine.Put(self._variable(f"{name}/{path}", data), data, self._ab.Mode.Deferred)
                keep.append(data)
        return keep

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
