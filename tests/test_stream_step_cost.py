"""What an hdf5 stream does per step, kept off the per-step path (issue 14: time inside the transport and
time to solution): released steps are deleted in the consumer's idle time with a bounded backlog, the
producer's bookkeeping does not grow with the number of steps, and an ``mpiexec`` rank of ``h5flow run``
starts without importing the modules of unrelated commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def _block(value: float) -> object:
    from h5flow.model import ImageBlock

    blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 3, 0, 3, 0, 3), 0)
    blk.arrays("cell")["data"] = np.full((4, 4, 4), value, dtype=np.float32)
    return blk


def _step_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step-")) if root.is_dir() else []


def test_released_steps_are_deleted_in_idle_time_with_a_bounded_backlog(tmp_path: Path) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader, open_writer
    from h5flow.transports.hdf5.reader import GARBAGE_BACKLOG
    from h5flow.transports.hdf5.staging import staging_dir

    cfg = TransportConfig.of(filename=str(tmp_path / "s"), heartbeat=2.0, queue_limit=0, poll_min=0.01,
                             poll_max=0.05)
    root = staging_dir(cfg.filename)
    steps = 8
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
        for s in range(steps):  # every step published before the consumer reads: it never waits
            w.begin_step(s, float(s))
            w.put("mesh", _block(float(s)))
            assert w.end_step().published
        seen = []
        for s in range(steps):
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            blocks = res.step.blocks("mesh", ["data"])
            seen.append(float(blocks[0].arrays("cell")["data"].mean()))
            reader.release()
            released_on_disk = [d for d in _step_dirs(root) if int(d.split("-")[1]) <= s]
            # a consumer with no idle time still deletes: never more than the backlog of released steps
            assert len(released_on_disk) <= GARBAGE_BACKLOG, (s, released_on_disk)
        assert seen == [float(s) for s in range(steps)]
        # the consumer now waits for a step that is not there: that idle time deletes what it released
        res = reader.begin_step(0.3)
        assert res.status is StepStatus.NOT_READY
        assert _step_dirs(root) == [], "released steps left on disk while the consumer was idle"
    reader.close()
    assert _step_dirs(root) == []


def test_a_closing_consumer_deletes_what_it_released(tmp_path: Path) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader, open_writer
    from h5flow.transports.hdf5.staging import staging_dir

    cfg = TransportConfig.of(filename=str(tmp_path / "s"), heartbeat=2.0, queue_limit=0)
    root = staging_dir(cfg.filename)
    w = open_writer(MPI.COMM_SELF.Dup(), cfg)
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    try:
        for s in range(2):
            w.begin_step(s, float(s))
            w.put("mesh", _block(1.0))
            assert w.end_step().published
        for _ in range(2):
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            reader.release()
    finally:
        reader.close()
    try:
        assert _step_dirs(root) == []
    finally:
        w.close()


def test_producer_bookkeeping_does_not_grow_with_the_number_of_steps(tmp_path: Path) -> None:
    """The producer scanned every step it ever published at every admission (a stat per step: the per-step
    cost grew with the run's length); released steps are now forgotten once deleted."""
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader, open_writer

    cfg = TransportConfig.of(filename=str(tmp_path / "s"), heartbeat=2.0, queue_limit=2)
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
        sizes = []
        for s in range(40):
            w.begin_step(s, float(s))
            w.put("mesh", _block(float(s)))
            assert w.end_step().published
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            reader.release()
            sizes.append(len(w._published))  # noqa: SLF001 - the bookkeeping under test
        reader.close()
    assert max(sizes[10:]) <= 4, f"the producer's list of published steps grows with the run: {sizes}"


def test_intransit_commands_start_without_the_other_commands_modules() -> None:
    """Every rank of ``h5flow run`` starts ``h5flow produce``/``consume``: the full parser imported the query
    engine, packing, conformance and every benchmark on every rank, on the job's critical path."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    for cmd in ("produce", "consume", "run"):
        p = subprocess.run([sys.executable, "-m", "h5flow.cli", cmd, "--help"], capture_output=True, text=True,
                           env=env, timeout=60)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "usage: h5flow " + cmd in p.stdout
        imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time")}
        unrelated = sorted(m for m in imported if m.startswith(("h5flow.query", "h5flow.packing",
                                                                 "h5flow.benchmarks", "h5flow.testing")))
        assert not unrelated, f"h5flow {cmd} imports {unrelated}"


def test_step_metadata_json_is_what_asdict_gives() -> None:
    """The step's meta.json is serialised without dataclasses.asdict's deep copies: the same JSON, byte for
    byte (the format consumers parse), and it reads back to the same metadata."""
    import dataclasses
    import json

    from h5flow.model import ArrayMeta, BlockMeta, MeshMeta, StepMeta

    img = MeshMeta("mesh", "image",
                   [BlockMeta(i, i % 3, "image", 64, 125, (0, 3, 0, 3, 4 * i, 4 * i + 3), (0.0, 0.5, 1.0),
                              (0.25, 0.25, 0.25), 1) for i in range(5)],
                   [ArrayMeta("data", "cell", "<f8"), ArrayMeta("v", "point", "<f4", 3)], (0, 3, 0, 3, 0, 19))
    parts = MeshMeta("particles", "particles", [BlockMeta(0, 0, "particles", 0, 17)],
                     [ArrayMeta("mass", "point", "<f8")])
    meta = StepMeta(7, 0.125, 3, {"mesh": img, "particles": parts})
    text = meta.to_json()
    assert text == json.dumps(dataclasses.asdict(meta), separators=(",", ":"))
    assert StepMeta.from_json(text) == meta


def test_step_file_attributes_are_what_h5py_writes(tmp_path: Path) -> None:
    """The writer's low-level attribute path stores what ``attrs[name] = value`` would: same names, HDF5
    types and values, read back by h5py as the same Python/numpy values."""
    import h5py

    from h5flow.transports.hdf5._h5 import write_new_attrs

    values = {"format": "h5flow-step", "version": 1, "step": 12, "time": 0.375, "producers": 4,
              "layout": "n-n", "rank": 3, "neg": -2, "big": 1 << 40, "nan": float("nan"), "np": np.float64(2.5),
              "unicode": "Ünïcode"}
    with h5py.File(tmp_path / "fast.h5", "w") as f:
        write_new_attrs(f, values)
    with h5py.File(tmp_path / "slow.h5", "w") as f:
        for k, v in values.items():
            f.attrs[k] = v
    with h5py.File(tmp_path / "fast.h5", "r") as a, h5py.File(tmp_path / "slow.h5", "r") as b:
        assert list(a.attrs) == list(b.attrs)
        for k in values:
            fa, fb = a.attrs.get_id(k), b.attrs.get_id(k)
            assert fa.get_type().equal(fb.get_type()), k
            assert fa.shape == fb.shape, k
            va, vb = a.attrs[k], b.attrs[k]
            assert type(va) is type(vb), k
            assert (va == vb) or (va != va and vb != vb), k
    with h5py.File(tmp_path / "fast.h5", "r+") as f, pytest.raises(Exception):
        write_new_attrs(f, {"step": 1})  # not for overwriting: an existing name is an error, never a silent keep
    with pytest.raises(TypeError), h5py.File(tmp_path / "other.h5", "w") as f:
        write_new_attrs(f, {"list": [1, 2]})
