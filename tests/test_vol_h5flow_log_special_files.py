"""h5flow_log: a file of a container's layout replaced by a FIFO, a device or a symbolic link (to /dev/zero, or
anywhere out of the container) is refused with an error that names it — never opened blocking (a FIFO's open
waits for ever for a writer), never followed — by h5py, h5dump and `h5flow ls` alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

MAKE = """
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    f["d"] = np.arange(10.)
    f["d"].attrs["units"] = "m"
"""

READ = """
import sys, h5py
try:
    with h5py.File(sys.argv[1], "r") as f:
        f["d"][...]
        print("READ OK")
except Exception as e:
    print("ERROR", e)
"""


def _container(tmp_path: Path) -> Path:
    path = tmp_path / "c.h5"
    subprocess.run([sys.executable, "-c", MAKE, str(path)], env=dict(os.environ, **LOG_ENV), check=True, timeout=60)
    return path


def _one(path: Path, suffix: str) -> Path:
    return next(p for p in (path / "d").iterdir() if p.name.startswith("@log.") and p.name.endswith(suffix))


@pytest.mark.parametrize("what", ["fifo-dat", "fifo-idx", "devzero-dat", "devzero-idx", "outside-idx"])
def test_special_files_are_refused_without_blocking(what: str, tmp_path: Path) -> None:
    path = _container(tmp_path)
    victim = _one(path, ".dat" if what.endswith("dat") else ".idx")
    outside = tmp_path / "outside"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    if what.startswith("fifo"):
        os.mkfifo(victim)
    else:
        victim.symlink_to("/dev/zero" if what.startswith("devzero") else outside)
    env = dict(os.environ, **LOG_ENV)
    p = subprocess.run([sys.executable, "-c", READ, str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("ERROR") and victim.name in p.stdout, p.stdout + p.stderr
    assert ("FIFO" if what.startswith("fifo") else "symbolic link") in p.stdout, p.stdout
    from test_vol_h5flow_log_links import _tool

    d = subprocess.run([_tool("h5dump"), str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert d.returncode != 0


@pytest.mark.parametrize("what", ["fifo", "devzero"])
def test_h5flow_ls_refuses_special_index_logs(what: str, tmp_path: Path) -> None:
    path = _container(tmp_path)
    victim = _one(path, ".idx")
    victim.unlink()
    if what == "fifo":
        os.mkfifo(victim)
    else:
        victim.symlink_to("/dev/zero")
    p = subprocess.run([sys.executable, "-m", "h5flow.cli", "ls", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and victim.name in p.stderr, p.stdout + p.stderr
