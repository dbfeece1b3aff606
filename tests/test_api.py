"""The high-level API (``h5flow.open``): M producer ranks write decomposed numpy arrays, N consumer ranks
read their shares; every value must equal the in-process array, and each element be delivered exactly once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.matrix import TransportCase, params

STEPS = 3
GLOBAL_2D = (7, 5)
GLOBAL_3D = (3, 4, 5)


def field2d(t: int) -> np.ndarray:
    y, x = np.mgrid[0 : GLOBAL_2D[0], 0 : GLOBAL_2D[1]]
    return (100.0 * t + 10.0 * y + x).astype(np.float64)


def field3d(t: int) -> np.ndarray:
    return (np.arange(np.prod(GLOBAL_3D), dtype=np.int32).reshape(GLOBAL_3D) + 1000 * t)


def _slab(n: int, parts: int, rank: int) -> tuple[int, int]:
    q, r = divmod(n, parts)
    lo = rank * q + min(rank, r)
    return lo, lo + q + (rank < r)


def _run(comm, tmp: Path, m: int, **settings) -> None:  # noqa: ANN001
    import h5flow

    producer = comm.rank < m
    sub = comm.Split(0 if producer else 1, comm.rank)
    name = str(tmp / "stream")
    if producer:
        beat = {} if settings.get("type") == "adios2" else {"heartbeat": 2.0}  # adios2 has no heartbeat setting
        with h5flow.open(name, "w", comm=sub, queue_limit=2, **beat, **settings) as s:
            for t in range(STEPS):
                with s.step(t, time=0.5 * t) as st:
                    y0, y1 = _slab(GLOBAL_2D[0], sub.size, sub.rank)
                    st.write("temperature", field2d(t)[y0:y1], offset=(y0, 0), global_shape=GLOBAL_2D)
                    z0, z1 = _slab(GLOBAL_3D[2], sub.size, sub.rank)
                    st.write("density", field3d(t)[:, :, z0:z1], offset=(0, 0, z0), global_shape=GLOBAL_3D)
                assert st.info is not None and st.info.published
        comm.Barrier()
        return
    seen, problems = [], []
    with h5flow.open(name, "r", comm=sub, **settings) as s:
        for st in s.steps(timeout=30):
            seen.append((st.step, st.time))
            for arr, ref in (("temperature", field2d(st.step)), ("density", field3d(st.step))):
                share = st.read(arr)
                assert share.global_shape == ref.shape
                covered = np.zeros(ref.shape, dtype=np.int64)
                for p in share.pieces:
                    where = tuple(slice(o, o + n) for o, n in zip(p.offset, p.shape, strict=True))
                    if p.data.dtype != ref.dtype or not np.array_equal(p.data, ref[where]):
                        problems.append(f"step {st.step} {arr}: piece at {p.offset} differs")
                    covered[where] += 1
                total = sub.allreduce(covered)
                if not (total == 1).all():
                    problems.append(f"step {st.step} {arr}: coverage {total.ravel().tolist()}")
        assert s.status == "end_of_stream"
    assert seen == [(t, 0.5 * t) for t in range(STEPS)], seen
    assert not problems, problems
    comm.Barrier()


TRANSPORTS = params(["hdf5-n-n", "socket"])


@pytest.mark.mpi(n=3, timeout=120)
@pytest.mark.parametrize("tc", TRANSPORTS)
def test_api_2_to_1(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    _run(comm, mpi_tmp_path, 2, **tc.keywords())


@pytest.mark.mpi(n=3, timeout=120)
@pytest.mark.parametrize("tc", TRANSPORTS)
def test_api_1_to_2(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    _run(comm, mpi_tmp_path, 1, **tc.keywords())


@pytest.mark.mpi(n=5, timeout=120)
@pytest.mark.parametrize("tc", TRANSPORTS)
def test_api_3_to_2(comm, mpi_tmp_path: Path, tc: TransportCase) -> None:
    _run(comm, mpi_tmp_path, 3, **tc.keywords())


def _adios2_missing() -> str | None:
    from h5flow.transports.adios2 import missing_reason

    return missing_reason()


needs_adios2 = pytest.mark.skipif(_adios2_missing() is not None, reason=str(_adios2_missing()))


@needs_adios2
@pytest.mark.mpi(n=3, timeout=120)
@pytest.mark.parametrize("m", [2, 1], ids=["2_to_1", "1_to_2"])
def test_api_adios2(comm, mpi_tmp_path: Path, m: int) -> None:
    _run(comm, mpi_tmp_path, m, type="adios2", engine="bp5")


@needs_adios2
@pytest.mark.mpi(n=5, timeout=120)
def test_api_adios2_3_to_2(comm, mpi_tmp_path: Path) -> None:
    _run(comm, mpi_tmp_path, 3, type="adios2", engine="sst")


def test_api_errors(tmp_path: Path) -> None:
    import h5flow

    with pytest.raises(ValueError, match="give 'w'"):
        h5flow.open(str(tmp_path / "s"), "a")
    with pytest.raises(TypeError, match="unknown transport setting"):
        h5flow.open(str(tmp_path / "s"), "w", queue=3)
    # a keyword goes to the transport's own settings: another transport's setting is refused, not ignored
    with pytest.raises(TypeError, match=r"unknown transport setting\(s\) \['layout'\]; accepted: .*heartbeat, "
                                        r"interface, .*\(type='socket'\)"):
        h5flow.open(str(tmp_path / "s"), "w", type="socket", layout="n-n")
    with pytest.raises(TypeError, match=r"\['heartbeat'\]; accepted: enabled, engine, group, partitioner"):
        h5flow.open(str(tmp_path / "s"), "w", type="adios2", heartbeat=2.0)


def test_transport_config_of_sends_keywords_to_the_transports_settings() -> None:
    from h5flow.config import PartitionerConfig, TransportConfig
    from h5flow.transports.hdf5.settings import Hdf5Settings
    from h5flow.transports.socket.settings import SocketSettings

    cfg = TransportConfig.of("hdf5", "s", layout="n-n", queue_limit=2, partitioner="planar")
    assert cfg.settings == Hdf5Settings(layout="n-n", queue_limit=2)
    assert cfg.partitioner == PartitionerConfig(type="planar") and cfg.filename == "s"
    assert TransportConfig(type="socket").settings == SocketSettings()  # defaults when none is given
    assert not hasattr(cfg, "layout") and not hasattr(cfg, "queue_limit")  # no union of every transport's fields
    with pytest.raises(TypeError, match=r"unknown transport setting\(s\) \['engine'\]; accepted: .*layout.*"
                                        r"\(Hdf5Settings\)"):
        TransportConfig.of("hdf5", "s", engine="sst")
    with pytest.raises(TypeError, match=r"give settings=Hdf5Settings\(\.\.\.\) or the keywords \['layout'\]"):
        TransportConfig.of("hdf5", "s", settings=Hdf5Settings(), layout="n-n")


@pytest.mark.mpi(n=1, timeout=60)
def test_api_write_errors(comm, mpi_tmp_path: Path) -> None:
    import h5flow

    with h5flow.open(str(mpi_tmp_path / "s"), "w", comm=comm) as s:
        with s.step(0) as st:
            with pytest.raises(ValueError, match="axis 1: the piece covers"):
                st.write("a", np.zeros((2, 3)), offset=(0, 1), global_shape=(2, 3))
            with pytest.raises(ValueError, match="4-D array"):
                st.write("a", np.zeros((1, 1, 1, 1)))
            st.write("a", np.arange(4.0))  # one rank: the whole array
    with h5flow.open(str(mpi_tmp_path / "s"), "r", comm=comm) as s:
        got = [st.read("a").array() for st in s.steps(timeout=10)]
    assert len(got) == 1 and np.array_equal(got[0], np.arange(4.0))
    with h5flow.open(str(mpi_tmp_path / "none"), "r", comm=comm) as s:
        with pytest.raises(h5flow.StreamTimeout, match="no step within 0.2 s"):
            next(iter(s.steps(timeout=0.2)))


@pytest.mark.mpi(n=1, timeout=60)
def test_api_refuses_shared_file_settings_on_another_layout(comm, mpi_tmp_path: Path) -> None:
    """Collective transfers only act on layout n-1: h5flow.open keywords that ask for them with n-n are refused,
    and so are settings changed to that after they were built (the writer checks again); none is ignored."""
    import h5flow
    from h5flow.config import TransportConfig
    from h5flow.transports import TransportError

    name = str(mpi_tmp_path / "s")
    with pytest.raises(ValueError, match='collective="true" only acts on a shared file .*layout="n-n"'):
        h5flow.open(name, "w", comm=comm, layout="n-n", collective=True)
    cfg = TransportConfig.of("hdf5", name)
    assert cfg.settings.layout == "n-n"  # the default
    cfg.settings.collective = True
    with pytest.raises(TransportError, match='collective="true" only acts on a shared file.*give layout="n-1"'):
        h5flow.open(cfg, "w", comm=comm)
    assert not (mpi_tmp_path / "s.h5flow").exists()
