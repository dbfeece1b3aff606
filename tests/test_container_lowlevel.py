"""The h5flow_log connector's Python low level (h5flow.connectors.logvol) is the only place that loads,
registers or binds the connector; the rest of h5flow opens containers through its file access list, in any
process, without ``HDF5_VOL_CONNECTOR``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "h5flow"
LOWLEVEL = {SRC / "connectors" / "logvol.py", SRC / "connectors" / "h5flow_log.py"}
# what only the low level may do: load or register the plugin, bind its functions, spell its marker, or make
# h5flow's own process (rather than a program it runs) depend on the environment
FORBIDDEN = re.compile(r"H5VLregister_connector|H5PLappend|_plugin_path\(|\.h5flow_log_\w+\.(argtypes|restype)"
                       r"|\"@h5flow_log\"|os\.execve|def is_container|def open_container|def _native_fapl"
                       r"|\"-m\", \"h5flow\.(stats|restructure)\"")


def test_only_the_low_level_loads_or_registers_the_connector() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path in LOWLEVEL:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "outside h5flow/connectors/logvol.py:\n" + "\n".join(offenders)


SCRIPT = """
import sys, numpy as np
from h5flow.connectors import logvol
from h5flow import stats, restructure, query
from h5flow.packing import pack
c = sys.argv[1]
with logvol.open_container(c, "w") as f:
    d = f.create_dataset("g/d", data=np.arange(64, dtype="f8").reshape(8, 8))
recs = stats.read_stats(c, "g/d", as_frame=False)
assert recs and recs[0]["max"] == 63.0, recs
restructure.restructure(c, "/g/d", order="column")
with query.apply(c, "d > 60") as res:
    assert res.count == 3, res.count
pack(c, c + ".h5")
import h5py
with h5py.File(c + ".h5", "r") as f:
    assert np.array_equal(f["g/d"][()], np.arange(64, dtype="f8").reshape(8, 8))
print("ok")
"""


def test_containers_work_in_a_process_without_the_environment(tmp_path: Path) -> None:
    """Statistics, restructuring, a query and pack of a container in one process whose environment names no connector:
    no helper process, no re-run with another environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "c.h5")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout + p.stderr
