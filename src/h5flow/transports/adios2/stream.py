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
* ``<mesh>/<association>/<array>`` and ``<mesh>/geometry/positions``: the rows of rank ``r``'s blocks of
  that mesh concatenated in block-id order (the hdf5 transport's n-n layout), flattened to one
  dimension of ``rows × components`` values (format version 2: ADIOS2 copies a ``(rows, 1)`` selection
  one row at a time, 3-5× slower than the same bytes in 1-D); absent when the rank owns no block of
  the mesh.

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

from h5flow.config import TransportConfig
from h5flow._split import contiguous_owner, contiguous_range

FORMAT = "h5flow-adios2"
VERSION = 2  # 2: arrays are 1-D on the wire (1: (rows, components))
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
