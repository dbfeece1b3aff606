"""`h5flow info`: the stack report, checked against the C toolchain's own view of HDF5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow import _paths, connectors

REQUIRED_KEYS = {"hdf5_version", "parallel", "subfiling", "threadsafe", "mpi_library", "h5py_version",
                 "h5py_mpi", "mpi4py_version", "plugin_path", "connectors"}


def _h5flow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(scope="module")
def info() -> dict:
    proc = _h5flow("info", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_info_json_has_every_documented_key(info: dict) -> None:
    assert REQUIRED_KEYS <= info.keys()


def test_info_reports_the_parallel_stack(info: dict) -> None:
    assert info["hdf5_version"] == "1.14.5"
    assert info["parallel"] is True
    assert info["subfiling"] is True
    assert info["h5py_mpi"] is True
    assert info["mpi_library"].startswith("MPICH Version:"), info["mpi_library"]
    assert info["h5py_version"] and info["mpi4py_version"]


def test_info_is_threadsafe_as_built(info: dict) -> None:
    """docs/BUILD.md: the stack is built thread-safe unless H5FLOW_THREADSAFE=OFF chose otherwise."""
    settings = Path(os.environ["H5FLOW_HDF5_DIR"], "lib", "libhdf5.settings").read_text()
    line = next(line for line in settings.splitlines() if "Threadsafety:" in line)
    built = line.split(":", 1)[1].strip().upper() in ("ON", "YES")
    assert built is (os.environ.get("H5FLOW_THREADSAFE", "ON").upper() == "ON")
    assert info["threadsafe"] is built


def test_info_agrees_with_the_c_toolchain(info: dict) -> None:
    tool = _paths.native_tool("h5flow-config")
    assert tool.exists(), f"{tool} not built: run `make setup`"
    c = json.loads(subprocess.run([str(tool)], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert c["header_version"] == c["library_version"] == info["hdf5_version"]
    assert c["parallel"] is info["parallel"]
    assert c["subfiling"] is info["subfiling"]
    assert c["threadsafe"] is c["threadsafe_header"] is info["threadsafe"]
    assert " ".join(c["mpi_library"].split()) == info["mpi_library"]


def test_info_table_is_readable() -> None:
    proc = _h5flow("info")
    assert proc.returncode == 0, proc.stderr
    for word in ("HDF5", "1.14.5", "parallel", "subfiling", "MPICH", "h5py", "plugin path"):
        assert word in proc.stdout


@pytest.mark.parametrize("command", [[], ["info"], ["bench"], ["bench", "rw"]])
def test_every_command_has_help(command: list[str]) -> None:
    proc = _h5flow(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: h5flow" in proc.stdout


def test_unknown_command_is_a_clear_error() -> None:
    proc = _h5flow("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


FAKE_PLUGIN = r"""
#include <hdf5.h>
#include <H5PLextern.h>
#include <H5VLconnector.h>
static const H5VL_class_t cls = {.version = H5VL_VERSION, .value = (H5VL_class_value_t)300,
                                 .name = "%s"};
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }
const void *H5PLget_plugin_info(void) { return &cls; }
"""


def _build_fake_plugin(directory: Path, name: str) -> Path:
    src = directory / f"{name}.c"
    src.write_text(FAKE_PLUGIN % name)
    so = directory / f"lib{name}.so"
    prefix = os.environ["H5FLOW_HDF5_DIR"]
    subprocess.run(["mpicc", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{prefix}/include", str(src), "-o", str(so)],
                   check=True, timeout=120)
    return so


def test_connectors_on_the_plugin_path_are_listed_by_name(tmp_path: Path) -> None:
    """A VOL plugin library is identified by the name in its H5VL_class_t, not by its file name."""
    ours = _build_fake_plugin(tmp_path, "h5flow_probe")
    _build_fake_plugin(tmp_path, "someone_else")
    (tmp_path / "libnot_a_plugin.so").write_bytes(b"\x7fELF garbage")
    found = connectors.find([tmp_path])
    assert [(c.name, c.value, c.file) for c in found] == [("h5flow_probe", 300, ours)]
    others = {p.name for p in connectors.scan([tmp_path])}
    assert others == {"h5flow_probe", "someone_else"}

    env = dict(os.environ, HDF5_PLUGIN_PATH=str(tmp_path))
    proc = _h5flow("info", "--json", env=env)
    data = json.loads(proc.stdout)
    assert data["plugin_path"] == [str(tmp_path)]
    assert [c["name"] for c in data["connectors"]] == ["h5flow_probe"]
