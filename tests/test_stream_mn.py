"""M:N through each transport inside one MPI job (producers and consumers split from COMM_WORLD).

Every step's histogram must equal the one computed in-process from the same oscillator state (no
transport), and every block must be delivered exactly once per consumer group. Each test runs for every
transport (``hdf5`` with its layouts and transfer modes, ``socket``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.matrix import TransportCase, params

STEPS = 3
SHAPE = (16, 12, 10)


def _run_mn(comm, tmp: Path, m: int, partitioner: str, particles: int = 0, **transport) -> None:  # noqa: ANN001
    from h5flow.analyses._histogram import Histogram, histogram_of
    from h5flow.config import PartitionerConfig, TransportConfig
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
    from h5flow.runner import publish_step
    from h5flow.transports import StepStatus, open_reader, open_writer

    producer = comm.rank < m
    sub = comm.Split(0 if producer else 1, comm.rank)
    n = comm.size - m
    nblocks = 2 * max(m, n) + 1  # never a multiple of either side
    osc = OscillatorConfig(shape=SHAPE, nblocks=nblocks, steps=STEPS, particles=particles)
    part = PartitionerConfig.of(partitioner, **({"plane_size": 2} if partitioner == "planar" else {}))
    beat = {} if transport.get("type") == "adios2" else {"heartbeat": 2.0}  # adios2 has no heartbeat setting
    cfg = TransportConfig.of(filename=str(tmp / "stream"), queue_limit=2, partitioner=part, **beat, **transport)
    ok, message = True, ""
    if producer:
        sim = Simulation(osc, sub.rank, sub.size)
        with open_writer(sub, cfg) as w:
            for s in range(STEPS):
                t = sim.advance(s)
                w.begin_step(s, t)
                publish_step(w, sim, sub.rank)  # mesh; oscillators (rank 0 only); particles
                assert w.end_step().published
    else:
        ref = Simulation(osc, 0, 1)
        hist = Histogram(bins=10)
        hist.initialize(sub)
        reader = open_reader(sub, cfg)
        seen = []
        while True:
            res = reader.begin_step(30.0)
            if res.status is not StepStatus.OK:
                ok = ok and res.status is StepStatus.END_OF_STREAM
                message = message or f"{res.status}: {res.reason}"
                break
            step = res.step
            blocks = step.blocks("mesh", ["data"], "cell")
            ids = [b.block_id for b in blocks]
            every = sub.allgather(ids)
            flat = sorted(i for part_ids in every for i in part_ids)
            if flat != list(range(nblocks)):
                ok, message = False, f"step {step.step}: blocks delivered {every}"
            # each block's interior equals the in-process field at its extent
            field = ref.global_field(step.step)
            for b in blocks:
                i0, i1, j0, j1, k0, k1 = b.extent
                if not np.array_equal(b.interior("data"), field[k0 : k1 + 1, j0 : j1 + 1, i0 : i1 + 1]):
                    ok, message = False, f"step {step.step}: block {b.block_id} differs from the oscillator"
            # 'oscillators' has one block, put by producer rank 0 only (the other ranks own none)
            osc_blocks = step.blocks("oscillators", ["radius", "type"], "point")
            n_osc = sub.allreduce(sum(b.num_points for b in osc_blocks))
            if n_osc != len(ref.oscillators):
                ok, message = False, f"step {step.step}: {n_osc} oscillators delivered"
            if particles:
                pblocks = step.blocks("particles", ["pid", "velocity"], "point")
                pids = sorted(int(p) for blk in pblocks for p in blk.arrays["pid"])
                every_pid = sorted(p for part_pids in sub.allgather(pids) for p in part_pids)
                if every_pid != list(range(particles)) or any(b.arrays["velocity"].shape != (b.num_points, 3)
                                                             for b in pblocks):
                    ok, message = False, f"step {step.step}: particles delivered wrongly"
            result = hist.execute(step)
            if sub.rank == 0:
                _, _, counts = histogram_of(field, 10)
                if not np.array_equal(result.counts, counts):
                    ok, message = False, f"step {step.step}: histogram {result.counts} != {counts}"
            seen.append(step.step)
            reader.release()
        reader.close()
        if seen != list(range(STEPS)):
            ok, message = False, f"steps seen {seen}"
    # A failing consumer raises at once (the MPI plugin then aborts the job); a collective assert would
    # leave the producers waiting on backpressure until the timeout.
    assert ok, message
    comm.Barrier()


SOCKET = pytest.param({"type": "socket"}, id="socket")


@pytest.mark.mpi(n=3)
@pytest.mark.parametrize("tc", params(["hdf5-n-1", "hdf5-n-n", "hdf5-log", "socket"]))
def test_2_to_1(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    _run_mn(comm, mpi_tmp_path, 2, "block", **tc.keywords())


@pytest.mark.mpi(n=6)
@pytest.mark.parametrize("transport", [pytest.param({"collective": True}, id="hdf5-collective"), SOCKET])
def test_4_to_2_planar(comm, mpi_tmp_path: Path, transport: dict) -> None:
    _run_mn(comm, mpi_tmp_path, 4, "planar", particles=50, **transport)


@pytest.mark.mpi(n=6)
@pytest.mark.parametrize("transport", [pytest.param({}, id="hdf5"), pytest.param({"layout": "log"}, id="hdf5-log"),
                                       SOCKET])
def test_2_to_4_block(comm, mpi_tmp_path: Path, transport: dict) -> None:
    particles = 30 if transport.get("layout") == "log" else 0  # the log layout's particle datasets too
    _run_mn(comm, mpi_tmp_path, 2, "block", particles=particles, **transport)


@pytest.mark.mpi(n=5)
def test_3_to_2_mapped_reads(comm, mpi_tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block mapped (map_reads, MAP_MIN lowered to one byte) on consumer ranks reading other ranks' files:
    the same fields, oscillators and particles as the simulation computes in process."""
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    _run_mn(comm, mpi_tmp_path, 3, "block", particles=30, layout="n-n", map_reads="true")


@pytest.mark.mpi(n=4, env={"H5FLOW_SOCKET_LOCAL": "0"})
def test_2_to_2_socket_over_tcp(comm, mpi_tmp_path: Path) -> None:
    """Same-host consumers normally use the producers' IPC endpoints; this run moves everything over TCP."""
    from h5flow.transports.socket.contact import RankContact, local_endpoint

    assert local_endpoint("run", 0) == ""
    assert RankContact(0, "tcp://127.0.0.1:1", "h", 1, "ipc://@x").reachable() == "tcp://127.0.0.1:1"
    _run_mn(comm, mpi_tmp_path, 2, "block", type="socket")


@pytest.mark.mpi(n=4)
def test_2_to_2_subfiling(comm, mpi_tmp_path: Path) -> None:
    """HDF5's subfiling VFD on the producer communicator, read back with it on the consumer one."""
    _run_mn(comm, mpi_tmp_path, 2, "block", driver="subfiling")


@pytest.mark.mpi(n=2)
def test_log_layout_step_is_one_logical_file_packable_to_native(comm, mpi_tmp_path: Path) -> None:
    """layout="log": each staged step is one h5flow_log container holding every rank's blocks (one log pair
    per rank, no MPI-IO), and ``h5flow pack`` turns it into a native file plain h5py reads."""
    import h5py

    from h5flow.config import TransportConfig
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
    from h5flow.packing import pack
    from h5flow.runner import publish_step
    from h5flow.transports import open_writer
    from h5flow.transports.hdf5.staging import staging_dir

    osc = OscillatorConfig(shape=SHAPE, nblocks=3, steps=2, ghost=0)
    cfg = TransportConfig.of(filename=str(mpi_tmp_path / "stream"), layout="log", keep="all", heartbeat=2.0)
    sim = Simulation(osc, comm.rank, comm.size)
    with open_writer(comm, cfg) as w:
        for s in range(2):
            w.begin_step(s, sim.advance(s))
            publish_step(w, sim, comm.rank)
            assert w.end_step().published
            w.flush()  # async_write: the step's phases are known once its write thread has published it
            # where the step's time went (bench transit --breakdown): no collective open, no flush phase
            assert {"create", "write", "close", "agree", "publish"} <= set(w.events[-1]["phases"]), w.events[-1]
            assert "flush" not in w.events[-1]["phases"]
    if comm.rank == 0:
        step = staging_dir(cfg.filename) / "step-000000001"
        logs = sorted(p.name for p in (step / "data.h5" / "mesh" / "cell" / "data").iterdir()
                      if p.name.endswith(".idx"))
        assert len(logs) == 2, logs  # one writer log per producer rank, in one logical file
        report = pack(step / "data.h5", mpi_tmp_path / "step1.h5")
        assert report.datasets >= 2
        with h5py.File(mpi_tmp_path / "step1.h5", "r") as f:  # native: no connector involved
            assert f.attrs["layout"] == "log" and f.attrs["step"] == 1 and f.attrs["producers"] == 2
            meta = json.loads(bytes(f["meta"][()]).decode())
            assert meta["step"] == 1 and [b["owner"] for b in meta["meshes"]["mesh"]["blocks"]] == [0, 0, 1]
            field = Simulation(osc, 0, 1).global_field(1)
            data = f["mesh/cell/data"][:, 0]
            assert data.size == field.size
            blocks = meta["meshes"]["mesh"]["blocks"]
            start = 0
            for b in blocks:  # each block's rows, in block-id order, equal the oscillator at its extent
                i0, i1, j0, j1, k0, k1 = b["extent"]
                part = field[k0 : k1 + 1, j0 : j1 + 1, i0 : i1 + 1]
                assert np.array_equal(data[start : start + part.size].reshape(part.shape), part), b
                start += part.size
    comm.Barrier()


def _adios2_missing() -> str | None:
    from h5flow.transports.adios2 import missing_reason

    return missing_reason()


needs_adios2 = pytest.mark.skipif(_adios2_missing() is not None, reason=str(_adios2_missing()))


@pytest.mark.mpi(n=3, timeout=120)
@pytest.mark.parametrize("tc", params(types=["adios2"]))
def test_adios2_2_to_1(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    """ADIOS2 (one stream per producer rank) through the same producer, partitioner and histogram."""
    _run_mn(comm, mpi_tmp_path, 2, "block", **tc.keywords())


@pytest.mark.mpi(n=5, timeout=120)
@pytest.mark.parametrize("tc", params(types=["adios2"]))
def test_adios2_3_to_2_planar(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    """Blocks whose stream another consumer rank reads are handed over with MPI."""
    _run_mn(comm, mpi_tmp_path, 3, "planar", particles=40, **tc.keywords())


@needs_adios2
@pytest.mark.mpi(n=1, timeout=60)
def test_adios2_clear_errors(comm, mpi_tmp_path: Path) -> None:
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, TransportError, open_reader, open_writer

    with pytest.raises(TransportError, match="does not exist: create it first"):
        open_writer(comm, TransportConfig.of(type="adios2", engine="sst", filename=str(mpi_tmp_path / "no" / "s")))
    with pytest.raises(ValueError, match="engine='bp4': BP4 is not offered; use bp5"):  # refused as built
        TransportConfig.of(type="adios2", engine="bp4", filename=str(mpi_tmp_path / "s"))
    with open_reader(comm, TransportConfig.of(type="adios2", engine="bp5", filename=str(mpi_tmp_path / "s"))) as r:
        res = r.begin_step(0.2)
        assert res.status is StepStatus.NOT_READY and "no adios2 stream yet" in res.reason


def test_adios2_absent_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from h5flow.transports import TransportError, entry

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "adios2" else real(name, *a))
    with pytest.raises(TransportError, match=r"needs the optional 'adios2' package.*h5flow\[adios2\]"):
        entry("adios2").classes()
