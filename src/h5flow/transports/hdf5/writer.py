"""Producer side of the hdf5 transport: one HDF5 file (n-1) or one file per rank (n-n) per step."""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

import h5py
import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import Block, MeshMeta, StepMeta
from h5flow.transports._common import Decision, StepPuts, block_payload, queue_full, quota_error, step_nbytes
from h5flow.transports._mpiutil import bcast_from_root, sleepy_wait
from h5flow.transports.base import PublishInfo, TransportError, Writer
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


class Hdf5Writer(Writer):
    """Publishes each step as ``step-N/`` in the staging directory, atomically, the moment it is closed."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        if config.layout not in ("n-1", "n-n"):
            raise TransportError(f"{config.source or 'config'}: layout {config.layout!r}; accepted: n-1, n-n")
        if config.driver not in _h5.DRIVERS:
            raise TransportError(f"{config.source or 'config'}: driver {config.driver!r}; accepted: mpio, subfiling")
        if config.queue_policy not in ("block", "discard"):
            raise TransportError(f"queue_policy {config.queue_policy!r}; accepted: block, discard")
        self.staging = Staging(config.filename)
        self.events: list[dict[str, float | int | bool | str]] = []
        self._puts = StepPuts()
        self._seq = 0
        self._published: list[Entry] = []
        self._step_time = 0.0
        self._step_begin = 0.0
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
    def _do_begin_step(self, step: int, time_: float) -> None:
        self._puts = StepPuts()
        self._step_time = float(time_)
        self._step_begin = time.time()

    def _do_put(self, mesh: str, block: Block) -> None:
        self._puts.add(mesh, block)

    def _do_end_step(self) -> PublishInfo:
        comm, cfg = self.comm, self.config
        t0 = time.time()
        step = self._step
        assert step is not None
        meta = self._puts.gather(comm, step, self._step_time)
        nbytes = step_nbytes(meta)

        decision = self._admit(step, nbytes) if comm.rank == 0 else None
        decision = bcast_from_root(comm, decision)
        if decision.error:
            raise TransportError(decision.error)
        if not decision.publish:
            self._puts = StepPuts()
            self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": time.time(),
                                "published": False, "nbytes": nbytes, "reason": decision.reason})
            return PublishInfo(step, False, nbytes, decision.reason, time.time() - t0)
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
        self._puts = StepPuts()
        self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": t_admit,
                            "written": t_written, "publish": published_at, "published": True,
                            "nbytes": nbytes, "waited": decision.waited})
        return PublishInfo(step, True, nbytes, "", time.time() - t0)

    def _admit(self, step: int, nbytes: int) -> Decision:
        """Rank 0: apply queue_limit / quota with the block or discard policy; garbage-collect."""
        cfg = self.config
        error = quota_error(cfg, step, nbytes)
        if error:
            return Decision(False, error=error)
        t0 = time.time()
        delay = cfg.poll_min
        announced = False
        while True:
            self._published.extend(e for e in self._tail.read_new() if e.kind == "P")
            if cfg.keep != "all":
                self.staging.collect_garbage(self.info.run_id, self._published)
            groups = self.staging.groups(self.info.run_id)
            released = min((g.released_seq for g in groups.values()), default=-1)
            unreleased = sum(1 for e in self._published if e.seq > released)
            # the quota bounds unreleased data; with keep="all" released steps stay on disk but do not count
            staged = sum(e.nbytes for e in self._published
                         if e.seq > released and self.staging.step_path(e.step).exists())
            why = queue_full(cfg, unreleased, staged, nbytes)
            if not why:
                seq = self._seq
                self._seq += 1
                return Decision(True, seq=seq, waited=time.time() - t0)
            if cfg.queue_policy == "discard":
                reason = f"step {step} discarded ({why})"
                append_line(self.staging.index, f"D {step} {self._step_time!r} {why}")
                print(f"h5flow: {reason}", file=sys.stderr, flush=True)
                return Decision(False, reason=reason)
            if not announced and time.time() - t0 > 5.0:
                names = ", ".join(sorted(groups)) or "no consumer group attached yet"
                print(f"h5flow: producer waiting for consumers before step {step} ({why}; groups: {names})",
                      file=sys.stderr, flush=True)
                announced = True
            time.sleep(delay)
            delay = min(delay * 2, cfg.poll_max)

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

