"""h5flow_log: virtual datasets (h5py `create_virtual_dataset`, H5Pset_virtual), checked against native HDF5
running the same script (`same_as_native`): sources in other files and in the same file ("."), fill values
for unmapped elements and missing sources, strided and partial reads,
writes through the virtual dataset, close/reopen and object copy; and a container mapping a native file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_virtual_datasets_read_write_like_native(tmp_path: Path) -> None:
    got = same_as_native("""
        for i in range(3):
            with check_connector(h5py.File(f"src{i}.h5", "w")) as s:
                s.create_dataset("data", data=np.arange(10, dtype="f8") + 100 * i)
        with check_connector(h5py.File("part.h5", "w")) as s:
            s.create_dataset("data", data=np.arange(4, dtype="f8") - 50)
        lay = h5py.VirtualLayout(shape=(5, 10), dtype="f8")
        for i in range(3):
            lay[i] = h5py.VirtualSource(f"src{i}.h5", "data", shape=(10,))
        lay[3] = h5py.VirtualSource("missing.h5", "data", shape=(10,))   # no such file: fill value
        lay[4, 2:6] = h5py.VirtualSource("part.h5", "data", shape=(4,))   # the rest of the row: unmapped
        with check_connector(h5py.File("vds.h5", "w")) as f:
            v = f.create_virtual_dataset("v", lay, fillvalue=-1)
            out("is_virtual", v.is_virtual); out("nsources", len(v.virtual_sources()))
            out("all", v[...]); out("strided", v[1:5:2, ::3]); out("point", v[2, 7])
            out("fancy", v[[0, 4], 2:6])
            out("none", list(v[4:4].shape))
            v[1, 2:4] = [7.5, 8.5]                                   # writes reach the source
            f.create_dataset("local", data=np.arange(6, dtype="i4").reshape(2, 3))
            lay2 = h5py.VirtualLayout(shape=(3, 2), dtype="i4")
            lay2[:, 0] = h5py.VirtualSource(".", "local", shape=(2, 3))[0, :]    # the same file
            lay2[:2, 1] = h5py.VirtualSource(".", "local", shape=(2, 3))[1, 1:]
            out("same_file", f.create_virtual_dataset("v2", lay2, fillvalue=9)[...])
        with h5py.File("src1.h5", "r") as s:
            out("written", s["data"][...])
        with h5py.File("vds.h5", "r") as f:                        # close / reopen
            out("reopen", f["v"][...]); out("reopen2", f["v2"][...])
            out("dcpl", [f["v"].virtual_sources()[0].file_name, f["v"].virtual_sources()[0].dset_name])
        with h5py.File("vds.h5", "r+") as f:
            f.copy("v", "vcopy")
            out("copy", f["vcopy"][...])
    """, tmp_path)
    assert got["all"][4] == [-1, -1, -50, -49, -48, -47, -1, -1, -1, -1]
    assert got["all"][3] == [-1] * 10
    assert got["written"][2:4] == [7.5, 8.5]


def test_unsupported_virtual_mappings_are_refused_clearly(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import os, sys, h5py, numpy as np
        os.chdir(sys.argv[1])
        with h5py.File("s.h5", "w") as s:
            s.create_dataset("data", data=np.arange(4))
        with h5py.File("v.h5", "w") as f:
            lay = h5py.VirtualLayout(shape=(4,), dtype="i8", maxshape=(None,))
            lay[:h5py.h5s.UNLIMITED] = h5py.VirtualSource("s.h5", "data", shape=(4,), maxshape=(None,))[:h5py.h5s.UNLIMITED]
            try:
                f.create_virtual_dataset("u", lay)
                print("CREATED")
            except Exception as e:
                print("ERROR", e)
            print("LEFT", list(f.keys()))
    """)
    env = dict(os.environ)
    env.update(LOG_ENV)
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "unlimited mappings are not supported" in p.stdout, p.stdout
    assert "CREATED" not in p.stdout and "LEFT []" in p.stdout


def test_a_container_maps_a_native_file(tmp_path: Path) -> None:
    """A source that is a native HDF5 file is opened through the native connector, even with
    HDF5_VOL_CONNECTOR naming h5flow_log."""
    with h5py.File(tmp_path / "native.h5", "w") as s:  # this process: native HDF5
        s.create_dataset("data", data=np.arange(12, dtype="i2").reshape(3, 4))
    script = textwrap.dedent("""
        import os, sys, h5py, numpy as np
        os.chdir(sys.argv[1])
        lay = h5py.VirtualLayout(shape=(2, 4), dtype="i2")
        lay[0] = h5py.VirtualSource("native.h5", "data", shape=(3, 4))[2]
        lay[1] = h5py.VirtualSource(os.path.abspath("native.h5"), "data", shape=(3, 4))[0]
        with h5py.File("c.h5", "w") as f:
            print(f.create_virtual_dataset("v", lay)[...].tolist())
        print(os.path.isdir("c.h5"))
    """)
    env = dict(os.environ)
    env.update(LOG_ENV)
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split("\n")[:2] == [str([[8, 9, 10, 11], [0, 1, 2, 3]]), "True"], p.stdout
    # its @dataset carries version 3, which connectors before virtual datasets refuse (they would read it
    # as a dataset without data, all fill value)
    raw = (tmp_path / "c.h5" / "v" / "@dataset").read_bytes()
    assert raw[:8] == b"H5FLDS01" and int.from_bytes(raw[8:12], "little") == 3
