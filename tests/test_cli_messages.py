"""What ``h5flow stats`` says when the file or the dataset is not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from h5flow._paths import default_plugin_dir


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_stats_names_what_is_missing_once(tmp_path: Path) -> None:
    c = tmp_path / "c.h5"
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(default_plugin_dir()))
    subprocess.run([sys.executable, "-c", "import h5py, sys\nwith h5py.File(sys.argv[1], 'w') as f:\n"
                    "    f['x'] = [1.0, 2.0]\n    f['g/y'] = [3, 4]", str(c)], env=env, check=True, timeout=120)
    r = _cli("stats", str(c), "/nope")
    assert r.returncode == 1, r
    assert r.stderr.strip() == f"h5flow stats: error: no dataset /nope in {c}; datasets: /g/y, /x", r.stderr
    r = _cli("stats", str(tmp_path / "nothere.h5"))
    assert r.returncode == 1 and "no such file" in r.stderr and r.stderr.count("error:") == 1, r.stderr
    r = _cli("stats", str(c), "/x")
    assert r.returncode == 0 and "/x" in r.stdout, r.stderr
