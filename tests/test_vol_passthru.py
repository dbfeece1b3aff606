"""The pass-through core (native/connectors/passthru) and the stacking connectors built on it.

The C side (passthru/tests/test_core.c, run by ctest, normal and under ASan/UBSan, with h5flow_async's
C tests beside it) builds a connector from the core inside the test program; here unmodified h5py goes through h5flow_async, a plugin made from the
core, stacked on native and on h5flow_log. Every script checks that the stacking connector really served
the file and that the connector below really stored it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir
from test_vol_h5flow_log import NATIVE_ROOT, _cmake_build

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
STACKS = {
    "native": "h5flow_async under_vol=0;under_info={}",
    "h5flow_log": "h5flow_async under_vol=h5flow_log;under_info={}",
    "native-no-info": "h5flow_async",
}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_async.so").exists(),
                                reason="h5flow_async not built (make setup)")

SCRIPT = r"""
import sys, os, numpy as np, h5py
from h5flow import _hdf5lib
path, below = sys.argv[1], sys.argv[2]
with h5py.File(path, "w") as f:
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_async", _hdf5lib.connector_name(f.id.id)
    f.create_group("a/b/c")
    f["a/data"] = np.arange(100, dtype="f4")
    d = f.create_dataset("grow", shape=(0, 3), maxshape=(None, 3), dtype="i8", chunks=(4, 3))
    for k in range(5):
        d.resize((k + 1, 3))
        d[k] = [k, k * k, -k]
    f["a"].attrs["units"] = "m"
    f["soft"] = h5py.SoftLink("/a/data")
    second = h5py.File(path, "r+")          # a second handle on the same file
    second["a/data"][5] = -1.5
    second.close()
    assert f["a/data"][5] == -1.5
    assert f["a/data"].file == f and hash(f["a"]) == hash(f["a"])
# what stored it: a native file, or an h5flow_log container (a directory)
assert os.path.isdir(path) == (below == "h5flow_log"), (below, os.path.isdir(path))
with h5py.File(path, "r") as f:
    data = f["a/data"]
    assert _hdf5lib.connector_name(data.id.id) == "h5flow_async"
    assert list(f.keys()) == ["a", "grow", "soft"], list(f.keys())
    seen = []
    f.visit(seen.append)
    assert seen == ["a", "a/b", "a/b/c", "a/data", "grow"], seen  # objects once: not the soft link
    want = np.arange(100, dtype="f4"); want[5] = -1.5
    assert np.array_equal(f["soft"][:], want)
    assert np.array_equal(f["grow"][:, 1], [k * k for k in range(5)])
    assert f.get("a/data", getclass=True) is h5py.Dataset
    assert f["a"].attrs["units"] == "m" and "a/b/c" in f and len(f["a"]) == 2
print("stack OK")
"""


@pytest.mark.parametrize("below", sorted(STACKS))
def test_h5py_round_trip_through_a_core_connector(below: str, tmp_path: Path) -> None:
    env = dict(os.environ, HDF5_VOL_CONNECTOR=STACKS[below], HDF5_PLUGIN_PATH=str(PLUGIN_DIR))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "f.h5"), below.split("-")[0]],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stack OK" in proc.stdout


def test_a_bad_info_string_is_an_error_that_names_the_setting(tmp_path: Path) -> None:
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_async bogus=1;under_vol=0;under_info={}",
               HDF5_PLUGIN_PATH=str(PLUGIN_DIR))
    code = "import h5py, sys; h5py.File(sys.argv[1], 'w')"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f.h5")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "bogus" in proc.stderr and "h5flow_async" in proc.stderr, proc.stderr
    assert not (tmp_path / "f.h5").exists()


@pytest.mark.parametrize("suite", ["passthru", "h5flow_async"])
@pytest.mark.parametrize("variant", ["normal", pytest.param("sanitized", marks=pytest.mark.full_only)])
def test_ctest_suites(variant: str, suite: str) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake not available")
    if variant == "normal":
        build, plugins = NATIVE_ROOT / "build" / "native", PLUGIN_DIR
    else:
        build = NATIVE_ROOT / "build" / "native-asan"
        _cmake_build(build, "-DH5FLOW_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug",
                     targets=("connectors/h5flow_log/all", "connectors/passthru/all", "connectors/h5flow_async/all"))
        plugins = build / "plugins"
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(plugins), ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    r = subprocess.run(["ctest", "--output-on-failure", "--test-dir", str(build / "connectors" / suite)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tests passed" in r.stdout
