"""What the adios2 transport's producers and consumers agree on: names, the announcement, engine settings.

For ``filename="/dev/shm/run/s"``:

* ``/dev/shm/run/s.adios2.json`` — the announcement, written atomically by producer rank 0 after it
  removed every file of an earlier run: ``{"format": "h5flow-adios2", "version": 2, "run_id": …,
  "producers": M, "engine": "sst"|"bp5", "created": …}``. Consumers wait for it, then open the streams.
* ``/dev/shm/run/s.r<rank:05d>`` — producer rank ``rank``'s ADIOS2 stream (SST: the contact file
  ``s.r00000.sst``; BP5: the directory ``s.r00000``).

Each ADIOS2 step of stream ``r`` holds, for step N of the producer:

* ``info`` (string): JSON ``{"step": N, "time": t, "rank": r, "run_id": …, "published": unix time
  just before the writer's EndStep}``;
* ``meta`` (string, stream 0 only): the step's global :class:`~h5flow.model.StepMeta` as JSON;
* ``payload`` (1-D ``uint8``, format version 3): every dataset of rank ``r``'s blocks of the step of at
  least :data:`INLINE_BYTES`, in one variable, placed by :func:`payload_layout` from the step's metadata
  alone: mesh by mesh (sorted by name), dataset by dataset (``<association>/<array>``,
  ``geometry/positions``; sorted), the rows of the rank's blocks of that mesh concatenated in block-id
  order (the hdf5 transport's n-n layout), each dataset starting at a multiple of :data:`ALIGN` bytes;
  absent when the rank has no such dataset;
* ``inline`` (string): the smaller datasets, packed the same way, base64: a string travels with the
  step's metadata, so they cost the consumer no data request.

One data variable per stream and step, because SST serves each variable of a ``Get`` as its own request
on the producer's side: with the producer computing, every further request of a step costs another wait
for the producer's data thread (five small arrays beside a 32 MiB one made a step's read ~3× slower, see
docs/ADIOS2.md). Version 2 sent one variable per dataset; version 1 a ``(rows, components)`` shape, which
ADIOS2's reader copies one row at a time.

Stream ``r`` is read by consumer rank :func:`stream_reader` ``(r, M, N)`` (SENSEI's contiguous block
mapping), which opens it with ``RendezvousReaderCount=1``: the SST writer's ``Open`` waits for that reader.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import StepMeta
from h5flow._split import contiguous_owner, contiguous_range
from h5flow.transports._common import dataset_layout

FORMAT = "h5flow-adios2"
VERSION = 3  # 3: one payload variable per stream and step (2: one 1-D variable per dataset; 1: (rows, components))
ALIGN = 64  # bytes: every dataset in a payload starts at a multiple of this (any dtype's alignment)
PAYLOAD = "payload"  # the variable holding a stream's datasets of a step
INLINE = "inline"  # the string variable holding its small datasets (base64)
INLINE_BYTES = 64 << 10  # datasets below this size travel inline
ENGINES = {"sst": "SST", "bp5": "BP5"}
OPEN_TIMEOUT_S = 60  # a consumer waits this long for a producer stream to appear (SST's default)


@dataclass
class Announcement:
    run_id: str
    producers: int
    engine: str
    created: float
    format: str = FORMAT
    version: int = VERSION

    @staticmethod
    def load(path: Path) -> Announcement:
        d = json.loads(path.read_text())
        if d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"{path} is not an h5flow adios2 stream of format version {VERSION}")
        return Announcement(d["run_id"], int(d["producers"]), d["engine"], float(d["created"]))


@dataclass(frozen=True)
class Slot:
    """Where one dataset of a producer rank's blocks lies in that rank's ``payload`` of a step."""

    mesh: str
    path: str  # dataset path inside the mesh: ``<association>/<array>`` or ``geometry/positions``
    dtype: np.dtype
    components: int
    offset: int  # bytes from the start of the payload (or of the inline bytes)
    inline: bool  # in the ``inline`` string instead of the ``payload`` variable
    spans: tuple[tuple[int, int, int], ...]  # (block id, first row, rows) of each of the rank's blocks

    @property
    def rows(self) -> int:
        return sum(n for _, _, n in self.spans)

    @property
    def nbytes(self) -> int:
        return self.rows * self.components * self.dtype.itemsize


def payload_layout(meta: StepMeta, rank: int) -> tuple[list[Slot], int, int]:
    """The datasets producer rank ``rank`` sends for the step ``meta`` describes, the size of its ``payload``
    and of its inline bytes. Writer and reader both compute it from the step's global metadata, so the
    stream carries no layout of its own."""
    slots: list[Slot] = []
    size = {True: 0, False: 0}
    for name in sorted(meta.meshes):
        mesh = meta.meshes[name]
        mine = sorted((b for b in mesh.blocks if b.owner == rank), key=lambda b: b.block_id)
        if not mine:
            continue
        for path, assoc, dtype, ncomp in dataset_layout(mesh):
            spans, start = [], 0
            for b in mine:
                spans.append((b.block_id, start, b.count(assoc)))
                start += b.count(assoc)
            nbytes = start * ncomp * np.dtype(dtype).itemsize
            inline = nbytes < INLINE_BYTES
            offset = -(-size[inline] // ALIGN) * ALIGN
            slots.append(Slot(name, path, np.dtype(dtype), ncomp, offset, inline, tuple(spans)))
            size[inline] = offset + nbytes
    return slots, size[False], size[True]


def announcement_path(filename: str) -> Path:
    if not filename:
        raise ValueError("the adios2 transport needs a filename (the streams' path prefix)")
    return Path(filename + ".adios2.json")


def stream_name(filename: str, rank: int) -> str:
    return f"{filename}.r{rank:05d}"


def engine_name(cfg: TransportConfig) -> str:
    engine = (cfg.settings.engine or "sst").lower()
    if engine not in ENGINES:
        raise ValueError(f"{cfg.source or 'config'}: adios2 engine {cfg.settings.engine!r}; "
                         f"accepted: {', '.join(ENGINES)}")
    return engine


def stream_reader(stream: int, producers: int, consumers: int) -> int:
    """The consumer rank that reads producer ``stream`` (contiguous ranges, as SENSEI's block partitioner)."""
    return contiguous_owner(stream, producers, consumers)


def streams_of(consumer: int, producers: int, consumers: int) -> list[int]:
    """The producer streams consumer rank ``consumer`` reads (none when there are more consumers)."""
    return list(contiguous_range(producers, consumers, consumer))


def remove_run(filename: str) -> None:
    """Delete the announcement and every stream of an earlier run (producer rank 0 at open; the runner)."""
    announcement_path(filename).unlink(missing_ok=True)
    for p in glob.glob(glob.escape(filename) + ".r[0-9][0-9][0-9][0-9][0-9]*"):
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            Path(p).unlink(missing_ok=True)


def retract(filename: str, run_id: str) -> None:
    """Delete the announcement of run ``run_id`` if it is still the current one (producer rank 0 at the close
    of an SST stream: a finished SST run cannot be read, and a consumer that found its announcement would
    attach to the next run's streams under the old run's identity)."""
    path = announcement_path(filename)
    try:
        if Announcement.load(path).run_id == run_id:
            path.unlink(missing_ok=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass


def announce(filename: str, info: Announcement) -> None:
    from h5flow._fileio import atomic_write

    atomic_write(announcement_path(filename), json.dumps(asdict(info)))


def writer_parameters(cfg: TransportConfig, engine: str) -> dict[str, str]:
    if engine == "sst":
        return {"RendezvousReaderCount": "1", "RegistrationMethod": "File",
                "QueueLimit": str(cfg.settings.queue_limit), "QueueFullPolicy": cfg.settings.queue_policy.capitalize()}
    return {}


def reader_parameters(cfg: TransportConfig, engine: str) -> dict[str, str]:
    params = {"OpenTimeoutSecs": str(OPEN_TIMEOUT_S)}
    if engine == "bp5":
        # BP5 polls the file for new steps; its 1 s default adds ~0.6 s median latency per step
        params["BeginStepPollingFrequencySecs"] = repr(cfg.settings.poll_max)
    return params
