"""The high-level API (``h5flow.open``): its errors, settings and shared-file checks. Its M:N round trips
(every value equal to what was written, each element delivered exactly once) run against every transport in
the contract suite (tests/contract)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


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
