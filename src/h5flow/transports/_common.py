"""Code both transports share: step metadata from the producers' puts, admission (queue_limit, quota),
and turning received arrays back into blocks on the consumer side.

Producer side: :class:`StepPuts` collects a rank's ``put`` calls; its :meth:`StepPuts.gather` builds the
step's global :class:`~h5flow.model.StepMeta` on every rank (validated, the same on all ranks);
:func:`block_payload` gives a block's arrays as ``(count, components)`` rows, the unit both transports
move. :func:`admission` applies ``queue_limit`` / ``quota_bytes``. Consumer side: :func:`assemble_blocks`.
"""

from __future__ import annotations

import json
import re
import sys
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5flow.model import ArrayMeta, Association, Block, BlockMeta, ImageBlock, MeshMeta, ParticleBlock, StepMeta
from h5flow.transports._mpiutil import bcast_from_root
from h5flow.transports.base import PublishInfo, TransportError, Writer, agree

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")


def dtype_text(dtype: np.dtype) -> str:
    """A dtype as step metadata carries it: numpy's ``str`` (``'<f8'``), or for a structured dtype its fields as
    JSON (``'[["code", "<i4"], ["x", "<f8"]]'``), which ``str`` would reduce to opaque bytes (``'|V12'``)."""
    dtype = np.dtype(dtype)
    if dtype.fields is None:
        return dtype.str
    return json.dumps(np.lib.format.dtype_to_descr(dtype))


#: the numpy kinds every transport's step metadata and rank files carry, alone or as a record's fields
STREAM_KINDS = "biufc"


def _plain_fields(dtype: np.dtype) -> bool:
    """Whether a dtype is of a kind in STREAM_KINDS, or a record (nested ones and sub-arrays included) whose
    every field is."""
    if dtype.fields is not None:
        return all(_plain_fields(f[0]) for f in dtype.fields.values())
    if dtype.subdtype is not None:
        return _plain_fields(dtype.subdtype[0])
    return dtype.kind in STREAM_KINDS


def dtype_problem(dtype: np.dtype) -> str:
    """Why arrays of ``dtype`` cannot be streamed by any transport ("" when they can: docs/API.md "Supported
    dtypes")."""
    if _plain_fields(np.dtype(dtype)):
        return ""
    return (f"arrays of dtype {dtype} cannot be streamed; give booleans, integers, floats or complex numbers "
            "(numpy kinds b, i, u, f, c), or a structured dtype whose fields are such numbers")


def _descr(value: Any) -> Any:
    """JSON lists back into the tuples numpy's descr has."""
    if isinstance(value, list):
        return [tuple(_descr(v) for v in field) if isinstance(field, list) else field for field in value]
    return value


def dtype_of(text: str) -> np.dtype:
    """The dtype of :func:`dtype_text`'s text."""
    if text.startswith("["):
        return np.lib.format.descr_to_dtype(_descr(json.loads(text)))
    return np.dtype(text)


def dataset_layout(mesh: MeshMeta) -> list[tuple[str, str, np.dtype, int]]:
    """(path, association, dtype, components) of every dataset a mesh group holds."""
    out = [(f"{a.association}/{a.name}", a.association, dtype_of(a.dtype), a.components) for a in mesh.arrays]
    if mesh.kind == "particles":
        out.append(("geometry/positions", "point", np.dtype("<f8"), 3))
    return sorted(out)


def check_name(kind: str, name: str) -> str:
    """Mesh and array names become HDF5 link names: keep them plain so nothing escapes its group."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 140 else \
            f"{name[:128]!r}... ({len(name)} characters)"
        raise TransportError(f"{kind} name {shown} is not allowed: use 1-128 letters, digits, '_', '.', '+', "
                             "'-', not starting with '.', '+' or '-'")
    return name


_GROUP_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_group(group: str) -> str:
    """A consumer group name: 1-64 letters, digits, '-' or '_' (it names files and appears in messages)."""
    if not isinstance(group, str) or not _GROUP_RE.match(group):
        shown = repr(group) if not isinstance(group, str) or len(group) <= 70 else \
            f"{group[:64]!r}... ({len(group)} characters)"
        raise ValueError(f"consumer group name {shown} must be 1-64 letters, digits, '-' or '_'")
    return group


def array_sig(block: Block) -> list[tuple[str, str, str, int]]:
    """(name, association, dtype, components) of every array of a block, sorted."""
    out = []
    if isinstance(block, ImageBlock):
        for assoc in ("cell", "point"):
            n = block.num_cells if assoc == "cell" else block.num_points
            for name, arr in block.arrays(assoc).items():
                if (arr.size % n) if n else arr.size:
                    raise TransportError(f"block {block.block_id}: {assoc} array {name!r} has {arr.size} values, "
                                         f"not a multiple of the block's {n} {assoc}s (ghosts included)")
                out.append((name, assoc, dtype_text(arr.dtype), arr.size // n if n else 1))
    else:
        n = block.num_points
        for name, arr in block.arrays.items():
            if arr.shape[0] != n:
                raise TransportError(f"particle block {block.block_id}: array {name!r} has {arr.shape[0]} entries "
                                     f"for {n} particles")
            out.append((name, "point", dtype_text(arr.dtype), arr.size // n if n else 1))
    arrays = block.arrays("cell") | block.arrays("point") if isinstance(block, ImageBlock) else block.arrays
    for name, *_ in out:
        check_name("array", name)
        why = dtype_problem(arrays[name].dtype)
        if why:
            raise TransportError(f"block {block.block_id}: array {name!r}: {why}")
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


Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offset, shape) of a piece in its global array


def boxes_overlap(a: Box, b: Box) -> bool:
    """Whether two non-empty boxes share an element."""
    return all(oa < ob + nb and ob < oa + na for oa, na, ob, nb in zip(a[0], a[1], b[0], b[1], strict=True))


def first_overlap(boxes: Sequence[tuple[Box, Any]]) -> tuple[tuple[Box, Any], tuple[Box, Any]] | None:
    """The first two of ``boxes`` (each a non-empty (offset, shape) with a tag) that share an element, or ``None``:
    a sweep along the first axis, so a slab decomposition costs about one comparison per box."""
    order = sorted(boxes, key=lambda t: t[0][0][0])
    active: list[tuple[Box, Any]] = []
    for box in order:
        start = box[0][0][0]
        active = [a for a in active if a[0][0][0] + a[0][1][0] > start]
        for a in active:
            if boxes_overlap(a[0], box[0]):
                return a, box
        active.append(box)
    return None


def step_ranges(steps: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    out: list[str] = []
    for s in sorted(steps):
        if out and s == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def step_nbytes(meta: StepMeta) -> int:
    total = 0
    for mesh in meta.meshes.values():
        for a in mesh.arrays:
            total += mesh.offsets(a.association)[-1] * a.components * dtype_of(a.dtype).itemsize
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
                out.append((f"{assoc}/{name}", np.ascontiguousarray(arr).reshape(n, arr.size // n if n else 1)))
    else:
        out.append(("geometry/positions", np.ascontiguousarray(block.positions, dtype=np.float64).reshape(-1, 3)))
        for name, arr in sorted(block.arrays.items()):
            n = block.num_points
            out.append((f"point/{name}", np.ascontiguousarray(arr).reshape(n, arr.size // n if n else 1)))
    return out


class StepPuts:
    """The blocks one producer rank put during a step."""

    def __init__(self) -> None:
        self.blocks: dict[str, list[Block]] = {}

    def add(self, mesh: str, block: Block) -> None:
        check_name("mesh", mesh)
        if not isinstance(block, (ImageBlock, ParticleBlock)):
            raise TransportError(f"put({mesh!r}, ...) needs an ImageBlock or ParticleBlock, got {type(block).__name__}")
        self.blocks.setdefault(mesh, []).append(block)

    def mine(self, mesh: str) -> list[Block]:
        """This rank's blocks of ``mesh`` in block-id order."""
        return sorted(self.blocks.get(mesh, []), key=lambda b: b.block_id)

    def local_meta(self, rank: int) -> dict[str, tuple[str, list[BlockMeta], list]]:
        local = {}
        for mesh, blocks in self.blocks.items():
            kinds = {"image" if isinstance(b, ImageBlock) else "particles" for b in blocks}
            if len(kinds) > 1:
                raise TransportError(f"mesh {mesh!r} mixes image and particle blocks")
            local[mesh] = (kinds.pop(), [BlockMeta.of(b, rank) for b in blocks], [array_sig(b) for b in blocks])
        return local

    def gather(self, comm: Any, step: int, time_: float, error: str = "") -> StepMeta:
        """Collective: every rank's block metadata merged into the step's metadata (same on every rank). This
        is the step's agreement (:func:`~h5flow.transports.base.agree`): a rank's error (``error``: this rank
        cannot go on, its transport's own check failed), or a rank elsewhere (closing, leaving on an
        exception), raises :class:`~h5flow.transports.base.RankFailed` on every rank."""
        try:
            local = self.local_meta(comm.rank)
            err = error
        except TransportError as e:
            local, err = {}, str(e)
        gathered = agree(comm, "producer", f"end_step {step}", err, local)  # yields/sleeps while it waits
        return build_step_meta(step, time_, comm.size, gathered)


@dataclass
class Decision:
    """Producer rank 0's verdict on a step, broadcast to every producer rank."""

    publish: bool
    seq: int = -1
    reason: str = ""
    error: str = ""
    waited: float = 0.0


def dropped_message(filename: str, group: str, d: dict) -> str:
    """The producer's error for steps dropped for a consumer group (``d``: ``{"steps": [...], "reason": ...}``)."""
    steps = d["steps"]
    return (f"{filename}: {len(steps)} published step(s) were dropped for consumer group {group!r} without being "
            f"taken: steps {step_ranges(steps)} ({d['reason']})")


def quota_error(settings: Any, step: int, nbytes: int) -> str:
    """The error for a step that alone exceeds ``settings.quota_bytes`` ("" when it fits)."""
    if settings.quota_bytes and nbytes > settings.quota_bytes:
        return (f"step {step} holds {nbytes} bytes, more than the staging quota of {settings.quota_bytes} bytes: "
                "raise the quota")
    return ""


def queue_full(settings: Any, unreleased: int, staged: int, nbytes: int) -> str:
    """Why the queue cannot take a step of ``nbytes`` ("" when it can): ``settings.queue_limit``, then
    ``settings.quota_bytes``.

    ``unreleased``: published steps some consumer group has not released; ``staged``: their bytes still held.
    """
    if settings.queue_limit and unreleased >= settings.queue_limit:
        return f"queue full: {unreleased} unreleased steps, queue_limit {settings.queue_limit}"
    if settings.quota_bytes and staged + nbytes > settings.quota_bytes:
        return f"staging quota: {staged} unreleased bytes staged + {nbytes} > quota {settings.quota_bytes}"
    return ""


class PutsWriter(Writer):
    """A writer that collects a step's puts in ``self._puts`` until ``end_step`` and keeps ``events``. Its
    ``_do_end_step`` must begin with ``self._puts.gather`` (the step's agreement: ``agrees_in_end_step``)."""

    agrees_in_end_step = True

    def __init__(self, comm: Any, config: Any) -> None:
        super().__init__(comm, config)
        if self.settings.queue_policy not in ("block", "discard"):
            raise TransportError(f"queue_policy {self.settings.queue_policy!r}; accepted: block, discard")
        self.events: list[dict[str, float | int | bool | str]] = []
        self._puts = StepPuts()
        self._step_time = 0.0
        self._step_begin = 0.0

    def _do_begin_step(self, step: int, time_: float) -> None:
        self._puts = StepPuts()
        self._step_time = float(time_)
        self._step_begin = time.time()

    def _do_put(self, mesh: str, block: Block) -> None:
        self._puts.add(mesh, block)


class AdmittingWriter(PutsWriter):
    """What both writers do in ``end_step`` before moving any data (not :class:`h5flow.StepWriter`, the
    application's writer of one step): gather the step's metadata, let rank 0
    admit it (``queue_limit`` / ``quota_bytes`` with the ``block`` or ``discard`` policy) and broadcast the
    verdict. A transport supplies :meth:`_queue_state`, :meth:`_record_discard` and may override
    :meth:`_wait_for_consumers`.
    """

    def __init__(self, comm: Any, config: Any) -> None:
        super().__init__(comm, config)
        self._seq = 0
        self._told_dead: set[str] = set()  # rank 0: consumer groups said to have stopped beating (dead_consumer)

    def _admit_step(self) -> tuple[StepMeta, int, Decision, float] | PublishInfo:
        """Collective: (the step's metadata, its payload bytes, rank 0's decision to publish, start time), or the
        :class:`PublishInfo` of a dropped step. Raises :class:`TransportError` on every rank on a quota error."""
        comm = self.comm
        t0 = time.time()
        step = self._step
        assert step is not None
        meta = self._puts.gather(comm, step, self._step_time, self._local_error())
        self._gathered_at = time.time()  # every rank has reached end_step (phase timers: "gather")
        nbytes = step_nbytes(meta)
        decision = self._admit(step, nbytes, meta) if comm.rank == 0 else None
        decision = bcast_from_root(comm, decision)
        if decision.error:
            raise TransportError(decision.error)
        if not decision.publish:
            self._puts = StepPuts()
            self.events.append({"step": step, "begin": self._step_begin, "end_step": t0, "admitted": time.time(),
                                "published": False, "nbytes": nbytes, "reason": decision.reason})
            return PublishInfo(step, False, nbytes, decision.reason, time.time() - t0)
        return meta, nbytes, decision, t0

    def _published_info(self, step: int, nbytes: int, decision: Decision, times: dict[str, float],
                        phases: dict[str, float] | None = None) -> PublishInfo:
        """Record a published step in ``events`` (``times``: end_step, admitted, written, publish; ``phases``:
        seconds per phase of this rank's ``end_step``, for ``bench transit --breakdown``)."""
        self._puts = StepPuts()
        self.events.append({"step": step, "begin": self._step_begin, **times, "published": True, "nbytes": nbytes,
                            "waited": decision.waited, **({"phases": phases} if phases else {})})
        return PublishInfo(step, True, nbytes, "", time.time() - times["end_step"])

    def _admit(self, step: int, nbytes: int, meta: StepMeta | None = None) -> Decision:
        """Rank 0: the next ``seq`` once the queue has room (``block``), or drop the step (``discard``).

        ``meta`` (the step's metadata) lets a transport estimate more than the payload (file overhead)."""
        cfg = self.settings
        error = quota_error(cfg, step, nbytes)
        if error:
            return Decision(False, error=error)
        t0 = time.time()
        delay = cfg.poll_min
        announced = False
        while True:
            unreleased, staged, groups = self._queue_state()
            why = queue_full(cfg, unreleased, staged, nbytes)
            if not why:
                seq = self._seq
                self._seq += 1
                return Decision(True, seq=seq, waited=time.time() - t0)
            if cfg.queue_policy == "discard":
                reason = f"step {step} discarded ({why})"
                self._record_discard(step, why)
                print(f"h5flow: {reason}", file=sys.stderr, flush=True)
                return Decision(False, reason=reason)
            error = self._check_dead(f"before step {step}")
            if error:
                return Decision(False, error=error)
            if not announced and time.time() - t0 > 5.0:
                names = ", ".join(sorted(groups)) or "no consumer group attached yet"
                print(f"h5flow: producer waiting for consumers before step {step} ({why}; groups: {names})",
                      file=sys.stderr, flush=True)
                announced = True
            self._wait_for_consumers(delay)
            delay = min(delay * 2, cfg.poll_max)

    def _check_dead(self, when: str) -> str:
        """Rank 0, blocked on its consumers (``when``: "before step N", "at close"): apply ``dead_consumer`` to
        every consumer group that stopped beating while holding unreleased steps. Returns the error that stops
        the stream ("" to go on waiting). ``wait`` says so once per group (and again when it beats again),
        ``drop`` lets the group go (:meth:`_drop_group`), ``error`` stops the stream."""
        dead = self._dead_groups()
        if not dead and not self._told_dead:
            return ""
        for name in sorted(self._told_dead - set(dead)):
            self._told_dead.discard(name)
            print(f"h5flow: consumer group {name!r} beats again; the producer goes on", file=sys.stderr, flush=True)
        policy = getattr(self.settings, "dead_consumer", "wait")
        for name, what in sorted(dead.items()):
            if policy == "error":
                return (f"{what}; the stream is stopped {when} (dead_consumer='error'; with 'wait' the producer "
                        "waits for the group to be restarted, with 'drop' it goes on without it)")
            if policy == "drop":
                self._drop_group(name, f"{what}; dropped {when} (dead_consumer='drop')")
                print(f"h5flow: {what}; the producer drops it {when} and goes on (dead_consumer='drop'): the steps it "
                      "did not take are not kept for it, and the producer fails at its end naming them",
                      file=sys.stderr, flush=True)
            elif name not in self._told_dead:
                self._told_dead.add(name)
                print(f"h5flow: {what}; the producer waits for it {when} (dead_consumer='wait'): restart its "
                      f"consumer (group='{name}') to resume at its first unreleased step, or set dead_consumer="
                      "'drop' or 'error'", file=sys.stderr, flush=True)
        return ""

    def _dead_groups(self) -> dict[str, str]:
        """Rank 0: consumer group -> what is known of it, for every group that stopped beating while it holds
        unreleased steps (a transport without consumer heartbeats has none)."""
        return {}

    def _drop_group(self, name: str, reason: str) -> None:
        """Rank 0, ``dead_consumer="drop"``: no longer keep steps for group ``name``; remember what it lost."""

    def _local_error(self) -> str:
        """Why this rank cannot go on ("" when it can), checked at every ``end_step`` and shared with every rank
        by the step's gather (a transport's own liveness check: the hdf5 heartbeat helper)."""
        return ""

    @abstractmethod
    def _queue_state(self) -> tuple[int, int, list[str]]:
        """Rank 0: (unreleased published steps, their bytes still held, names of the live consumer groups)."""

    @abstractmethod
    def _record_discard(self, step: int, why: str) -> None:
        """Rank 0: tell the consumers that ``step`` was dropped."""

    def _wait_for_consumers(self, delay: float) -> None:
        time.sleep(delay)


def check_association(mesh: MeshMeta, arrays: Sequence[str], association: Association) -> list[ArrayMeta]:
    """The named arrays of ``mesh``; image arrays must have the requested association."""
    wanted = [mesh.array(name) for name in arrays]
    for a in wanted:
        if mesh.kind == "image" and a.association != association:
            raise KeyError(f"array {a.name!r} of mesh {mesh.name!r} is a {a.association} array, not {association}")
    return wanted


def assemble_blocks(mesh: MeshMeta, ids: Sequence[int], wanted: Sequence[ArrayMeta],
                    values: dict[str, dict[int, np.ndarray]], positions: dict[int, np.ndarray]) -> list[Block]:
    """Blocks ``ids`` of ``mesh`` from their arrays' ``(count, components)`` rows (``values[name][block_id]``)
    and, for particles, their positions."""
    out: list[Block] = []
    for i in ids:
        bm: BlockMeta = mesh.blocks[i]
        if mesh.kind == "image":
            blk = ImageBlock(i, tuple(bm.origin), tuple(bm.spacing), tuple(bm.extent), bm.ghost)  # type: ignore[arg-type]
            for a in wanted:
                shape = bm.shape(a.association) + ((a.components,) if a.components > 1 else ())
                blk.arrays(a.association)[a.name] = values[a.name][i].reshape(shape)
            out.append(blk)
        else:
            arrs = {a.name: (values[a.name][i] if a.components > 1 else values[a.name][i][:, 0]) for a in wanted}
            out.append(ParticleBlock(i, positions[i], arrs))
    return out
