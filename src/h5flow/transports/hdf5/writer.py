"""Producer side of the hdf5 transport: one HDF5 file (n-1) or one file per rank (n-n) per step."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import ArrayMeta, Block, BlockMeta, ImageBlock, MeshMeta, ParticleBlock, StepMeta
from h5flow.transports._mpiutil import bcast_from_root
from h5flow.transports.base import PublishInfo, TransportError, Writer
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5.staging import (Entry, Heartbeat, IndexTail, Staging, StreamInfo, append_line,
                                            atomic_write, new_run_id)

STEP_FORMAT = "h5flow-step"
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")


def check_name(kind: str, name: str) -> str:
    """Mesh and array names become HDF5 link names: keep them plain so nothing escapes its group."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise TransportError(f"{kind} name {name!r} is not allowed: use 1-128 letters, digits, '_', '.', '+', "
                             "'-', not starting with '.', '+' or '-'")
    return name


def _array_sig(block: Block) -> list[tuple[str, str, str, int]]:
    """(name, association, dtype, components) of every array of a block, sorted."""
    out = []
    if isinstance(block, ImageBlock):
        for assoc in ("cell", "point"):
            n = block.num_cells if assoc == "cell" else block.num_points
            for name, arr in block.arrays(assoc).items():
                if arr.size % n:
                    raise TransportError(f"block {block.block_id}: {assoc} array {name!r} has {arr.size} values, "
                                         f"not a multiple of the block's {n} {assoc}s (ghosts included)")
                out.append((name, assoc, arr.dtype.str, arr.size // n))
    else:
        n = block.num_points
        for name, arr in block.arrays.items():
            if arr.shape[0] != n:
                raise TransportError(f"particle block {block.block_id}: array {name!r} has {arr.shape[0]} entries "
                                     f"for {n} particles")
            out.append((name, "point", arr.dtype.str, arr.size // n if n else 1))
    for name, *_ in out:
        check_name("array", name)
    return sorted(out)


def build_step_meta(step: int, time_: float, producers: int,
                    gathered: list[dict[str, tuple[str, list[BlockMeta], list]]]) -> StepMeta:
    """Merge every rank's local block metadata into the step's global metadata (validated)."""
    meshes: dict[str, MeshMeta] = {}
    names = sorted({m for local in gathered for m in local})
    for mesh in names:
        kinds = {local[mesh][0] for local in gathered if mesh in local}
        if len(kinds) != 1:
            raise TransportError(f"mesh {mesh!r} mixes block kinds {sorted(kinds)} across ranks")
        blocks: list[BlockMeta] = []
        sigs = []
        for local in gathered:
            if mesh in local:
                blocks.extend(local[mesh][1])
                sigs.extend(local[mesh][2])
        blocks.sort(key=lambda b: b.block_id)
        ids = [b.block_id for b in blocks]
        if ids != list(range(len(ids))):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise TransportError(f"mesh {mesh!r}: block ids must be 0..{len(ids) - 1}, each put by exactly one "
                                 f"rank; got {ids[:20]}{'...' if len(ids) > 20 else ''}"
                                 + (f" (duplicates {dup})" if dup else ""))
        distinct = {tuple(map(tuple, s)) for s in sigs}
        if len(distinct) > 1:
            raise TransportError(f"mesh {mesh!r}: blocks carry different arrays: {sorted(distinct)}")
        arrays = [ArrayMeta(n, a, d, c) for n, a, d, c in (sigs[0] if sigs else [])]
        kind = kinds.pop()
        extent: tuple[int, ...] = ()
        if kind == "image" and blocks:
            e = np.array([b.extent for b in blocks])
            extent = (int(e[:, 0].min()), int(e[:, 1].max()), int(e[:, 2].min()), int(e[:, 3].max()),
                      int(e[:, 4].min()), int(e[:, 5].max()))
        meshes[mesh] = MeshMeta(mesh, kind, blocks, arrays, extent)
    return StepMeta(step, time_, producers, meshes)


def local_meta(puts: dict[str, list[Block]], rank: int) -> dict[str, tuple[str, list[BlockMeta], list]]:
    """This rank's part of a step's metadata: per mesh, the block kind, block metadata and array signatures."""
    local = {}
    for mesh, blocks in puts.items():
        kinds = {"image" if isinstance(b, ImageBlock) else "particles" for b in blocks}
        if len(kinds) > 1:
            raise TransportError(f"mesh {mesh!r} mixes image and particle blocks")
        local[mesh] = (kinds.pop(), [BlockMeta.of(b, rank) for b in blocks], [_array_sig(b) for b in blocks])
    return local


def gather_step_meta(comm: Any, step: int, time_: float, puts: dict[str, list[Block]]) -> StepMeta:
    """Collective: every rank's blocks of the step merged into its validated global metadata.

    A rank's invalid put is reported on every rank (so no rank is left waiting in a later collective).
    """
    try:
        local = local_meta(puts, comm.rank)
        err = ""
    except TransportError as e:
        local, err = {}, f"rank {comm.rank}: {e}"
    gathered = comm.allgather((local, err))
    errors = [e for _, e in gathered if e]
    if errors:
        raise TransportError("; ".join(errors))
    return build_step_meta(step, time_, comm.size, [g for g, _ in gathered])


def step_nbytes(meta: StepMeta) -> int:
    total = 0
    for mesh in meta.meshes.values():
        for a in mesh.arrays:
            total += mesh.offsets(a.association)[-1] * a.components * np.dtype(a.dtype).itemsize
        if mesh.kind == "particles":
            total += mesh.offsets("point")[-1] * 3 * 8
    return total


def block_payload(block: Block) -> list[tuple[str, np.ndarray]]:
    """(dataset path inside the mesh group, data as (count, components) C-contiguous) of a block."""
    out = []
    if isinstance(block, ImageBlock):
        for assoc in ("cell", "point"):
            n = block.num_cells if assoc == "cell" else block.num_points
            for name, arr in sorted(block.arrays(assoc).items()):
                out.append((f"{assoc}/{name}", np.ascontiguousarray(arr).reshape(n, -1)))
    else:
        out.append(("geometry/positions", np.ascontiguousarray(block.positions, dtype=np.float64).reshape(-1, 3)))
        for name, arr in sorted(block.arrays.items()):
            out.append((f"point/{name}", np.ascontiguousarray(arr).reshape(block.num_points, -1)))
    return out


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


class BufferingWriter(Writer):
    """A writer that collects a step's blocks in ``self._puts`` (mesh → blocks) until ``end_step``."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        self._puts: dict[str, list[Block]] = {}
        self._step_time = 0.0
        self._step_begin = 0.0

    def _do_begin_step(self, step: int, time_: float) -> None:
        self._puts = {}
        self._step_time = float(time_)
        self._step_begin = time.time()

    def _do_put(self, mesh: str, block: Block) -> None:
        check_name("mesh", mesh)
        if not isinstance(block, (ImageBlock, ParticleBlock)):
            raise TransportError(f"put({mesh!r}, ...) needs an ImageBlock or ParticleBlock, got {type(block).__name__}")
        self._puts.setdefault(mesh, []).append(block)


@dataclass
class _Decision:
    publish: bool
    seq: int = -1
    reason: str = ""
    error: str = ""
    waited: float = 0.0


class Hdf5Writer(BufferingWriter):
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
        self._seq = 0
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
        comm, cfg = self.comm, self.config
        t0 = time.time()
        step = self._step
        assert step is not None
        meta = gather_step_meta(comm, step, self._step_time, self._puts)
        nbytes = step_nbytes(meta)

        decision = self._admit(step, nbytes) if comm.rank == 0 else None
        decision = bcast_from_root(comm, decision)
        if decision.error:
            raise TransportError(decision.error)
        if not decision.publish:
            self._puts = {}
            self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": time.time(),
                                "published": False, "nbytes": nbytes, "reason": decision.reason})
            return PublishInfo(step, False, nbytes, decision.reason, time.time() - t0)
        t_admit = time.time()

        tmp = self.staging.tmp_step(step)
        if comm.rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        comm.Barrier()
        if cfg.layout == "n-1":
            self._write_shared(tmp / "data.h5", meta)
        else:
            self._write_per_rank(tmp / f"rank-{comm.rank:05d}.h5", meta)
            comm.Barrier()
        t_written = time.time()
        published_at = 0.0
        if comm.rank == 0:
            atomic_write(tmp / "meta.json", meta.to_json())
            os.replace(tmp, self.staging.step_path(step))
            published_at = time.time()
            append_line(self.staging.index,
                        f"P {decision.seq} {step} {self._step_time!r} {nbytes} {published_at!r}")
        published_at = comm.bcast(published_at, root=0)
        self._puts = {}
        self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": t_admit,
                            "written": t_written, "publish": published_at, "published": True,
                            "nbytes": nbytes, "waited": decision.waited})
        return PublishInfo(step, True, nbytes, "", time.time() - t0)

    def _admit(self, step: int, nbytes: int) -> _Decision:
        """Rank 0: apply queue_limit / quota with the block or discard policy; garbage-collect."""
        cfg = self.config
        if cfg.quota_bytes and nbytes > cfg.quota_bytes:
            return _Decision(False, error=f"step {step} holds {nbytes} bytes, more than the staging quota of "
                                          f"{cfg.quota_bytes} bytes: raise the quota")
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
            why = ""
            if cfg.queue_limit and unreleased >= cfg.queue_limit:
                why = f"queue full: {unreleased} unreleased steps, queue_limit {cfg.queue_limit}"
            elif cfg.quota_bytes and staged + nbytes > cfg.quota_bytes:
                why = f"staging quota: {staged} unreleased bytes staged + {nbytes} > quota {cfg.quota_bytes}"
            if not why:
                seq = self._seq
                self._seq += 1
                return _Decision(True, seq=seq, waited=time.time() - t0)
            if cfg.queue_policy == "discard":
                reason = f"step {step} discarded ({why})"
                append_line(self.staging.index, f"D {step} {self._step_time!r} {why}")
                print(f"h5flow: {reason}", file=sys.stderr, flush=True)
                return _Decision(False, reason=reason)
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
                mine = sorted(self._puts.get(name, []), key=lambda b: b.block_id)
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
                mine = sorted(self._puts.get(name, []), key=lambda b: b.block_id)
                for i, (path_, _assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    parts = [block_payload(b)[i][1] for b in mine]
                    data = np.concatenate(parts) if parts else np.zeros((0, ncomp), dtype=dtype)
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

