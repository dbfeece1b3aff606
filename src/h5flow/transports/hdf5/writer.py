"""Producer side of the hdf5 transport: one HDF5 file (n-1) or one file per rank (n-n) per step."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import h5py
import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import MeshMeta, StepMeta
from h5flow.transports._common import StepWriter, block_payload
from h5flow.transports._mpiutil import bcast_from_root, sleepy_wait
from h5flow.transports.base import PublishInfo, TransportError
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5.staging import (Entry, Heartbeat, IndexTail, Staging, StreamInfo, append_line,
                                            atomic_write, new_run_id)

STEP_FORMAT = "h5flow-step"


def dataset_layout(mesh: MeshMeta) -> list[tuple[str, str, np.dtype, int]]:
    """(path, association, dtype, components) of every dataset a mesh group holds."""
    out = [(f"{a.association}/{a.name}", a.association, np.dtype(a.dtype), a.components) for a in mesh.arrays]
    if mesh.kind == "particles":
        out.append(("geometry/positions", "point", np.dtype("<f8"), 3))
    return sorted(out)


def write_slab(dset: Any, offset: int, data: np.ndarray | None, dxpl: Any, ncomp: int) -> None:
    """Write rows [offset, offset+len(data)) of a (count, ncomp) dataset; ``None`` = empty collective part."""
    fspace = dset.id.get_space()
    if data is None or data.shape[0] == 0:
        fspace.select_none()
        mspace = h5py.h5s.create_simple((1, ncomp))
        mspace.select_none()
        dset.id.write(mspace, fspace, np.zeros((1, ncomp), dtype=dset.dtype), dxpl=dxpl)
        return
    fspace.select_hyperslab((offset, 0), (data.shape[0], ncomp))
    mspace = h5py.h5s.create_simple(data.shape)
    dset.id.write(mspace, fspace, data, dxpl=dxpl)


class Hdf5Writer(StepWriter):
    """Publishes each step as ``step-N/`` in the staging directory, atomically, the moment it is closed."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        if config.layout not in ("n-1", "n-n"):
            raise TransportError(f"{config.source or 'config'}: layout {config.layout!r}; accepted: n-1, n-n")
        if config.driver not in _h5.DRIVERS:
            raise TransportError(f"{config.source or 'config'}: driver {config.driver!r}; accepted: mpio, subfiling")
        self.staging = Staging(config.filename)
        self._published: list[Entry] = []
        info = None
        error = ""
        if comm.rank == 0:
            info = StreamInfo(new_run_id(), comm.size, config.layout, config.driver, config.heartbeat, time.time())
            try:
                self.staging.reset()
            except (OSError, RuntimeError) as e:
                error = f"cannot start stream in {self.staging.root}: {e}"
        info, error = comm.bcast((info, error), root=0)
        if error:
            raise TransportError(error)
        self.info: StreamInfo = info
        self._tail = IndexTail(self.staging.index)
        self._heartbeat = Heartbeat(self.staging.hb / str(comm.rank), config.heartbeat)
        comm.Barrier()
        if comm.rank == 0:
            self.staging.announce(info)
        comm.Barrier()

    # -- steps -----------------------------------------------------------------------------------
    def _do_end_step(self) -> PublishInfo:
        admitted = self._admit_step()
        if isinstance(admitted, PublishInfo):
            return admitted
        meta, nbytes, decision, t0 = admitted
        comm, cfg, step = self.comm, self.config, meta.step
        t_admit = time.time()

        tmp = self.staging.tmp_step(step)
        if comm.rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        # sleeping barriers: on an oversubscribed node a rank spinning in MPI takes the core from the
        # ranks (and consumers) it waits for
        sleepy_wait(comm)
        if cfg.layout == "n-1":
            self._write_shared(tmp / "data.h5", meta)
        else:
            self._write_per_rank(tmp / f"rank-{comm.rank:05d}.h5", meta)
            sleepy_wait(comm)
        t_written = time.time()
        published_at = 0.0
        if comm.rank == 0:
            atomic_write(tmp / "meta.json", meta.to_json())
            os.replace(tmp, self.staging.step_path(step))
            published_at = time.time()
            append_line(self.staging.index,
                        f"P {decision.seq} {step} {self._step_time!r} {nbytes} {published_at!r}")
        published_at = bcast_from_root(comm, published_at)
        return self._published_info(step, nbytes, decision, {"end_step": t0, "admitted": t_admit,
                                                              "written": t_written, "publish": published_at})

    def _queue_state(self) -> tuple[int, int, list[str]]:
        cfg = self.config
        self._published.extend(e for e in self._tail.read_new() if e.kind == "P")
        if cfg.keep != "all":
            self.staging.collect_garbage(self.info.run_id, self._published)
        groups = self.staging.groups(self.info.run_id)
        released = min((g.released_seq for g in groups.values()), default=-1)
        unreleased = sum(1 for e in self._published if e.seq > released)
        # the quota bounds unreleased data; with keep="all" released steps stay on disk but do not count
        staged = sum(e.nbytes for e in self._published
                     if e.seq > released and self.staging.step_path(e.step).exists())
        return unreleased, staged, list(groups)

    def _record_discard(self, step: int, why: str) -> None:
        append_line(self.staging.index, f"D {step} {self._step_time!r} {why}")

    def _write_shared(self, path: Any, meta: StepMeta) -> None:
        comm, cfg = self.comm, self.config
        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE if cfg.collective else h5py.h5fd.MPIO_INDEPENDENT)
        with _h5.open_shared(path, "w", comm, cfg.driver) as f:
            self._write_attrs(f, meta)
            f.create_dataset("meta", data=np.frombuffer(meta.to_json().encode(), dtype=np.uint8))
            for name, mesh in meta.meshes.items():
                g = f.create_group(name)
                g.attrs["kind"] = mesh.kind
                mine = self._puts.mine(name)
                payloads = [block_payload(b) for b in mine]
                n_calls = comm.allreduce(len(mine), op=_max()) if cfg.collective else len(mine)
                for i, (path_, assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    offsets = mesh.offsets(assoc)
                    dset = g.create_dataset(path_, shape=(offsets[-1], ncomp), dtype=dtype, fillvalue=None,
                                            fill_time="never")
                    for k in range(n_calls):
                        if k < len(mine):
                            data = payloads[k][i][1]
                            if data.dtype != dtype:
                                data = data.astype(dtype)
                            write_slab(dset, offsets[mine[k].block_id], data, dxpl, ncomp)
                        else:
                            write_slab(dset, 0, None, dxpl, ncomp)

    def _write_per_rank(self, path: Any, meta: StepMeta) -> None:
        rank = self.comm.rank
        with h5py.File(path, "w", libver=("v110", "latest")) as f:
            self._write_attrs(f, meta)
            f.attrs["rank"] = rank
            for name, mesh in meta.meshes.items():
                g = f.create_group(name)
                mine = self._puts.mine(name)
                for i, (path_, _assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    parts = [block_payload(b)[i][1] for b in mine]
                    # one block (the usual case) is written from the simulation's array, without a copy
                    data = (parts[0] if len(parts) == 1 else np.concatenate(parts) if parts
                            else np.zeros((0, ncomp), dtype=dtype))
                    g.create_dataset(path_, data=data.astype(dtype, copy=False))

    def _write_attrs(self, f: h5py.File, meta: StepMeta) -> None:
        f.attrs["format"] = STEP_FORMAT
        f.attrs["version"] = 1
        f.attrs["step"] = meta.step
        f.attrs["time"] = meta.time
        f.attrs["producers"] = meta.producers
        f.attrs["layout"] = self.config.layout

    # -- end -------------------------------------------------------------------------------------
    def _do_close(self) -> None:
        self.comm.Barrier()
        if self.comm.rank == 0:
            self._published.extend(e for e in self._tail.read_new() if e.kind == "P")
            append_line(self.staging.index, f"E {self._seq}")
            if self.config.keep != "all":
                self.staging.collect_garbage(self.info.run_id, self._published)
        self._heartbeat.stop()

    def _do_abort(self) -> None:
        # No end-of-stream: consumers report the producer as lost once the heartbeat stops.
        self._heartbeat.stop()


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX

