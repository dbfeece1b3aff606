"""HDF5's built-in pass_through VOL connector, stacked on native, under h5py.

Guards the plugin mechanism later connectors rely on: the connector is chosen from the environment
(``HDF5_VOL_CONNECTOR``), and the test proves it really served the file (HDF5 falls back to native
silently otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.pytest_mpi import mpi_assert

PASS_THROUGH = "pass_through under_vol=0;under_info={}"

SCRIPT = r"""
import sys, numpy as np, h5py
from h5flow import _hdf5lib
path = sys.argv[1]
with h5py.File(path, "w") as f:
    assert _hdf5lib.connector_name(f.id.id) == "pass_through", _hdf5lib.connector_name(f.id.id)
    f.create_group("a/b/c")
    f["a/data"] = np.arange(100, dtype="f4")
    f["top"] = np.ones((3, 4))
    f["a"].attrs["units"] = "m"
with h5py.File(path, "r") as f:
    data = f["a/data"]  # keep a reference: the id closes when the object is collected
    assert _hdf5lib.connector_name(data.id.id) == "pass_through"
    assert list(f.keys()) == ["a", "top"], list(f.keys())
    assert list(f["a"].keys()) == ["b", "data"]
    seen = []
    f.visit(seen.append)
    assert seen == ["a", "a/b", "a/b/c", "a/data", "top"], seen
    assert "a/b/c" in f and len(f["a"]) == 2
    assert isinstance(f.get("a/data", getclass=True), type) and f.get("a/data", getclass=True) is h5py.Dataset
    assert np.array_equal(f["a/data"][10:20], np.arange(10, 20, dtype="f4"))
    assert f["a"].attrs["units"] == "m"
print("pass_through OK")
"""


def test_pass_through_serial_under_h5py(tmp_path: Path) -> None:
    env = dict(os.environ, HDF5_VOL_CONNECTOR=PASS_THROUGH)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "pt.h5")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass_through OK" in proc.stdout


def test_without_the_variable_native_serves_the_file(tmp_path: Path) -> None:
    """The check above is meaningful: without HDF5_VOL_CONNECTOR the same assertion fails."""
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "native.h5")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "native" in proc.stderr


@pytest.mark.mpi(n=2, env={"HDF5_VOL_CONNECTOR": PASS_THROUGH})
def test_pass_through_parallel_under_h5py(comm, mpi_tmp_path: Path) -> None:
    import h5py

    from h5flow import _hdf5lib

    path = mpi_tmp_path / "pt-mpio.h5"
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "pass_through", "pass_through not loaded")
        for r in range(comm.size):
            f.create_group(f"rank{r}")
        d = f.create_dataset("d", shape=(comm.size, 8), dtype="i4")
        with d.collective:
            d[comm.rank] = np.full(8, comm.rank)
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        keys = list(f.keys())
        rows = f["d"][...]
    mpi_assert(comm, keys == ["d"] + [f"rank{r}" for r in range(comm.size)], f"keys() gave {keys}")
    mpi_assert(comm, np.array_equal(rows, np.repeat(np.arange(comm.size), 8).reshape(comm.size, 8)),
               "parallel read through pass_through differs")
