"""A third-party plugin for the tests: a transport, a partitioner and an analysis h5flow does not know.

``dirstream`` stages each step as one pickle per producer rank in ``<filename>.dirstream/run-<id>/step<N>/``
(rank 0 marks the step ``complete`` after a barrier); every consumer rank reads the small pickles, builds the
step's metadata and lets the base :class:`~h5flow.transports.Reader` partition it. Each producer run stages
into a directory of its own, named by ``current``; a consumer reads the run ``current`` names when it first
looks, and marks a run it read to its end ``read``: a later consumer waits for a newer run instead of reading
that one again, and no consumer ever mixes two runs' files. ``reverse`` gives block ``i`` to
consumer ``n - 1 - (i // stride) % n``. ``owned-blocks`` returns, on consumer rank 0, the block ids of
``mesh`` that each consumer rank was given. Only public h5flow names are used, as a plugin would.

Registered in the tests with ``register()`` (:func:`register_all`) and through entry points
(``h5flow.transports``: ``dirstream = h5flow_dirstream:ENTRY`` and likewise for the others).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from h5flow.analyses import Analysis
from h5flow.config import PartitionerConfig, TransportConfig
from h5flow.model import ArrayMeta, Association, Block, BlockMeta, ImageBlock, MeshMeta, StepMeta
from h5flow.partitioners import PartitionError, Partitioner
from h5flow.transports import (BeginStepResult, PublishInfo, Reader, ReadStep, StepStatus, TransportEntry,
                               TransportSettings, Writer)


@dataclass
class DirSettings(TransportSettings):
    """``<transport type="dirstream" filename=... poll=... label=... sync=...>``."""

    poll: float = field(default=0.005, metadata={"minimum": 0.001, "maximum": 1.0})  # consumer polling (s)
    label: str = "plain"  # written into the stream's settings.json (the test reads it back)
    sync: bool = False  # fsync each staged file
    copies: int = field(default=1, metadata={"minimum": 1, "maximum": 4})

    def __post_init__(self) -> None:
        if self.label == "forbidden":
            raise ValueError("label 'forbidden' is reserved; give another label")


def _root(config: TransportConfig) -> Path:
    return Path(config.filename + ".dirstream")


def _write(path: Path, data: bytes, sync: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


class DirWriter(Writer):
    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        self.settings: DirSettings = config.settings if config.settings is not None else DirSettings()
        top = _root(config)
        run = comm.bcast(uuid.uuid4().hex[:12] if comm.rank == 0 else None, root=0)
        self.root = top / f"run-{run}"
        if comm.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            _write(top / "settings.json", json.dumps(asdict(self.settings)).encode(), self.settings.sync)
            _write(top / "current", run.encode(), self.settings.sync)
        comm.barrier()
        self._blocks: dict[str, list[Block]] = {}
        self._step, self._time = 0, 0.0

    def _do_begin_step(self, step: int, time_: float) -> None:
        self._blocks, self._step, self._time = {}, step, time_

    def _do_put(self, mesh: str, block: Block) -> None:
        self._blocks.setdefault(mesh, []).append(block)

    def _do_end_step(self) -> PublishInfo:
        t0 = time.time()
        d = self.root / f"step{self._step:06d}"
        d.mkdir(exist_ok=True)
        data = pickle.dumps(self._blocks)
        _write(d / f"rank{self.comm.rank}.pkl", data, self.settings.sync)
        nbytes = self.comm.allreduce(len(data))
        self.comm.barrier()
        if self.comm.rank == 0:
            done = {"step": self._step, "time": self._time, "producers": self.comm.size, "published": time.time()}
            _write(d / "complete", json.dumps(done).encode(), self.settings.sync)
        self.comm.barrier()
        self.events.append({"step": self._step, "waited": 0.0, "nbytes": nbytes})
        return PublishInfo(self._step, True, nbytes, seconds=time.time() - t0)

    def _do_close(self) -> None:
        self.comm.barrier()
        if self.comm.rank == 0:
            _write(self.root / "end", json.dumps({"steps": len(self.events)}).encode(), self.settings.sync)


def _step_meta(step: int, time_: float, per_rank: list[dict[str, list[Block]]]) -> StepMeta:
    items: dict[str, list[tuple[Block, int]]] = {}
    for rank, meshes in enumerate(per_rank):
        for mesh, blocks in meshes.items():
            items.setdefault(mesh, []).extend((b, rank) for b in blocks)
    meshes_meta = {}
    for mesh, pairs in items.items():
        pairs.sort(key=lambda p: p[0].block_id)
        first = pairs[0][0]
        if isinstance(first, ImageBlock):
            kind = "image"
            arrays = [ArrayMeta(n, "cell", a.dtype.str) for n, a in first.cell_arrays.items()]
            arrays += [ArrayMeta(n, "point", a.dtype.str) for n, a in first.point_arrays.items()]
        else:
            kind = "particles"
            arrays = [ArrayMeta(n, "point", a.dtype.str) for n, a in first.arrays.items()]
        extent: tuple[int, ...] = ()
        if kind == "image":  # the whole grid: the union of the blocks' extents
            ext = [b.extent for b, _ in pairs if isinstance(b, ImageBlock)]
            extent = tuple(min(e[i] for e in ext) if i % 2 == 0 else max(e[i] for e in ext) for i in range(6))
        meshes_meta[mesh] = MeshMeta(mesh, kind, [BlockMeta.of(b, r) for b, r in pairs], arrays, extent)
    return StepMeta(step, time_, len(per_rank), meshes_meta)


class DirStep(ReadStep):
    def __init__(self, step: int, time_: float, meta: StepMeta, assignment: dict[str, list[int]],
                 blocks: dict[str, dict[int, Block]]) -> None:
        super().__init__(step, time_, meta, assignment)
        self._blocks = blocks

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        self._check_mesh(mesh)
        return [self._blocks[mesh][b] for b in self.my_block_ids(mesh)]


class DirReader(Reader):
    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        self.settings: DirSettings = config.settings if config.settings is not None else DirSettings()
        self.top = _root(config)
        self.root: Path | None = None  # the run this reader reads, once it found one
        self._next = 0
        self._visible = self._begin = self._published = 0.0

    def _attach(self) -> bool:
        """Rank 0: read the run ``current`` names, unless a consumer already read that one to its end."""
        try:
            run = (self.top / "current").read_text()
        except OSError:
            return False
        if (self.top / f"run-{run}" / "read").exists():
            return False
        self.root = self.top / f"run-{run}"
        return True

    def _poll(self, timeout: float | None) -> tuple[str, dict[str, Any]]:
        deadline = None if timeout is None else time.time() + timeout
        while True:
            if self.root is None and not self._attach():
                if deadline is not None and time.time() > deadline:
                    return "not_ready", {}
                time.sleep(self.settings.poll)
                continue
            done = self.root / f"step{self._next:06d}" / "complete"
            if done.exists():
                return "ok", json.loads(done.read_text())
            end = self.root / "end"
            if end.exists() and json.loads(end.read_text())["steps"] <= self._next:
                _write(self.root / "read", b"", self.settings.sync)
                return "end", {}
            if deadline is not None and time.time() > deadline:
                return "not_ready", {}
            time.sleep(self.settings.poll)

    def _do_begin_step(self, timeout: float | None) -> BeginStepResult:
        self._begin = time.time()
        found = (*self._poll(timeout), self.root and str(self.root)) if self.comm.rank == 0 else None
        status, info, root = self.comm.bcast(found, root=0)
        self.root = root and Path(root)
        if status == "end":
            return BeginStepResult(StepStatus.END_OF_STREAM)
        if status == "not_ready":
            return BeginStepResult(StepStatus.NOT_READY, reason=f"no step {self._next} yet")
        self._visible, self._published = time.time(), float(info["published"])
        d = self.root / f"step{self._next:06d}"
        per_rank = [pickle.loads((d / f"rank{r}.pkl").read_bytes()) for r in range(int(info["producers"]))]
        meta = _step_meta(int(info["step"]), float(info["time"]), per_rank)
        by_id = {m: {b.block_id: b for rank in per_rank for b in rank.get(m, [])} for m in meta.meshes}
        return BeginStepResult(StepStatus.OK, DirStep(meta.step, meta.time, meta, self.assignment(meta), by_id))

    def _do_release(self, step: ReadStep) -> None:
        self.events.append({"step": step.step, "published": self._published, "begin": self._begin,
                            "visible": self._visible})
        self._next += 1

    def _do_close(self) -> None:
        pass


def cleanup(config: TransportConfig) -> None:
    shutil.rmtree(_root(config), ignore_errors=True)


ENTRY = TransportEntry(load=lambda: (DirWriter, DirReader), settings=DirSettings, cleanup=cleanup)


class ReversePartitioner(Partitioner):
    """Block ``i`` to consumer ``n - 1 - (i // stride) % n``; ``stride`` from ``<partitioner stride="...">``."""

    name = "reverse"

    def __init__(self, stride: int = 1) -> None:
        self.stride = stride

    @classmethod
    def from_config(cls, cfg: PartitionerConfig) -> ReversePartitioner:
        unknown = sorted(set(cfg.params) - {"stride"})
        if unknown:
            raise PartitionError(f"unknown setting(s) {unknown}; accepted: stride")
        stride = cfg.params.get("stride", "1")
        if not stride.isdigit() or int(stride) < 1:
            raise PartitionError(f"stride {stride!r}; accepted: an integer >= 1")
        return cls(int(stride))

    def owners(self, blocks: Sequence[BlockMeta], n_consumers: int) -> list[int]:
        return [n_consumers - 1 - (i // self.stride) % n_consumers for i in range(len(blocks))]


class OwnedBlocks(Analysis):
    """On consumer rank 0: ``{"step": n, "owned": [[block ids of rank 0], [of rank 1], ...]}`` for ``mesh``."""

    name = "owned-blocks"

    def __init__(self, cfg: Any) -> None:
        self.mesh = cfg.mesh

    def execute(self, step: ReadStep) -> Any:
        mine = sorted(b.block_id for b in step.blocks(self.mesh))
        owned = self.comm.gather(mine, root=0)
        return {"step": step.step, "owned": owned} if self.comm.rank == 0 else None


def register_all() -> None:
    """Register the three in this process (the ``register()`` path)."""
    from h5flow import analyses, partitioners, transports

    transports.register("dirstream", DirWriter, DirReader, settings=DirSettings, cleanup=cleanup, replace=True)
    partitioners.register("reverse", ReversePartitioner, replace=True)
    analyses.register("owned-blocks", OwnedBlocks, replace=True)


ENTRY_POINTS = """\
[h5flow.transports]
dirstream = h5flow_dirstream:ENTRY

[h5flow.partitioners]
reverse = h5flow_dirstream:ReversePartitioner

[h5flow.analyses]
owned-blocks = h5flow_dirstream:OwnedBlocks
"""


def install_entry_points(site: Path) -> Path:
    """Write ``h5flow_dirstream-1.0.dist-info`` (METADATA + entry_points.txt) into ``site``, a directory that
    goes on ``sys.path`` / ``PYTHONPATH``: importlib.metadata then finds the entry points there."""
    info = site / "h5flow_dirstream-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: h5flow-dirstream\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return info
