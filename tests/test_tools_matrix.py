"""HDF5's command-line tools × containers holding each feature, compared with the same tools on native twins
(h5flow.testing.tools_matrix; the table in docs/FORMAT.md "HDF5's tools on a container").

`make test` runs every tool the stack installs on a quick subset of the features (the ones that reached
HDF5 1.14.5's tool crashes: links, references, dimension scales; and the compound with a variable-length
member and the committed datatype, which tools read and copy through converted and committed types); `pytest tests/test_tools_matrix.py
--tools-matrix` (or `make test-full`) runs every feature, with the connector built with AddressSanitizer/UBSan (the tools
themselves are HDF5's; the sanitizer runtime is preloaded). `h5flow conformance --tools` is the same matrix
as a command, printing the table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from h5flow.testing import tools_matrix as tm
from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

QUICK_FEATURES = ("soft_links", "external_links", "object_refs", "dimension_scales", "compound_vlen",
                  "committed_type")
INVOCATIONS = tuple(tm.available())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        features = tuple(tm.FEATURES) if _full(metafunc.config) else QUICK_FEATURES
        metafunc.parametrize("cell", [(inv.name, f) for inv in INVOCATIONS for f in features],
                             ids=[f"{_ascii(inv.name)}-{f}" for inv in INVOCATIONS for f in features],
                             indirect=True)


def _full(config: pytest.Config) -> bool:
    """--tools-matrix, or --full (`make test-full`): every feature, under the sanitized connector."""
    return bool(config.getoption("--tools-matrix") or config.getoption("--full"))


def _ascii(name: str) -> str:
    """A test id for an invocation: "h5repack c→n" is h5repack_c2n, "h5dump -x" h5dump_x."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name.replace("→", "2"))


@pytest.fixture(scope="module")
def matrix_setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tm.Setup:
    full = _full(request.config)
    plugins, asan = PLUGIN_DIR, None
    if full:  # the whole matrix runs against the sanitized connector
        from test_vol_h5flow_log import NATIVE_ROOT, _cmake_build
        from test_vol_h5flow_log_diskfull import _asan_runtime

        asan = _asan_runtime()
        if asan is None:
            pytest.skip("the compiler has no libasan")
        build = NATIVE_ROOT / "build" / "native-asan"
        _cmake_build(build, "-DH5FLOW_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug")
        plugins = build / "plugins"
    native_env, container_env = tm.environments(plugins, asan)
    features = tuple(tm.FEATURES) if full else QUICK_FEATURES
    return tm.make_fixtures(tmp_path_factory.mktemp("tools"), features, native_env, container_env)


@pytest.fixture
def cell(request: pytest.FixtureRequest, matrix_setup: tm.Setup) -> tm.Cell:
    name, feature = request.param
    inv = next(i for i in INVOCATIONS if i.name == name)
    return tm.run_cell(matrix_setup, inv, feature)


def test_tool_on_container_as_on_native(cell: tm.Cell) -> None:
    """Exit status, output and written result as native's, or a documented difference (never a crash)."""
    assert cell.ok, cell.report()


def test_matrix_covers_every_installed_tool() -> None:
    """Every tool HDF5 installs that works on files has a column (a new tool cannot slip past the matrix)."""
    hdf5 = Path(os.environ["H5FLOW_HDF5_DIR"]) / "bin"
    covered = {inv.tool for inv in tm.INVOCATIONS}
    # not file tools: compiler wrappers, benchmarks, the mirror VFD's server, h5fuse (joins subfiling's
    # subfiles); ph5diff is h5diff's code under mpiexec
    others = {"h5cc", "h5pcc", "h5hlcc", "h5perf", "h5perf_serial", "mirror_server", "mirror_server_stop",
              "h5fuse", "h5fuse.sh", "ph5diff", "h5redeploy"}
    installed = {p.name for p in hdf5.iterdir() if p.name.startswith(("h5", "ph5", "mirror"))}
    assert installed - others <= covered, f"tools without a column: {sorted(installed - others - covered)}"


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([tm.tool_path(args[0]) or args[0], *args[1:]], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_h5diff_std_ref_against_ref_obj_in_two_native_files(tmp_path: Path) -> None:
    """Two native files whose DIMENSION_LIST is a vlen of H5T_STD_REF in one and of H5T_STD_REF_OBJ in the
    other: h5diff compared both with one memory type and crashed, either way round (valgrind: reads past the
    8-byte references); now both ways report no difference, clean under valgrind where it is installed."""
    native_env, container_env = tm.environments(PLUGIN_DIR)
    s = tm.make_fixtures(tmp_path, ["dimension_scales"], native_env, container_env)
    std = tmp_path / "std_ref.h5"   # the container repacked to native keeps its H5T_STD_REF references
    r = _run(["h5repack", "--dst-vol-name=native", "--dst-vol-value=0",
              str(s.container_dir / "dimension_scales.h5"), str(std)], container_env)
    assert r.returncode == 0, r.stderr
    dump = _run(["h5dump", "-A", str(std)], native_env).stdout
    assert "H5T_VLEN { H5T_REFERENCE { H5T_STD_REF } }" in dump and f'DATASET "{std}/x"' in dump
    obj = s.native_dir / "dimension_scales.h5"
    valgrind = shutil.which("valgrind")
    for a, b in ((std, obj), (obj, std)):
        r = _run(["h5diff", "-r", str(a), str(b)], native_env)
        assert r.returncode == 0, f"h5diff {a.name} {b.name}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        assert "DIMENSION_LIST" in r.stdout and "differences found" in r.stdout
        if valgrind:
            v = subprocess.run([valgrind, "--error-exitcode=99", "-q", tm.tool_path("h5diff") or "h5diff",
                                str(a), str(b)], env=native_env, capture_output=True, text=True, timeout=300)
            assert v.returncode == 0, v.stderr[-3000:]


def test_h5repack_rewrites_scale_references_to_the_output(tmp_path: Path) -> None:
    """h5repack container→container of a dimension scale aborted (double free after the connector refused
    references into the source); the copy's DIMENSION_LIST and REFERENCE_LIST now name the copy's objects."""
    native_env, container_env = tm.environments(PLUGIN_DIR)
    s = tm.make_fixtures(tmp_path, ["dimension_scales"], native_env, container_env)
    out = tmp_path / "out.h5"
    r = _run(["h5repack", str(s.container_dir / "dimension_scales.h5"), str(out)], container_env)
    assert r.returncode == 0, r.stderr
    dump = _run(["h5dump", "-A", str(out)], container_env).stdout
    assert f'(DATASET "{out}/x"), (DATASET "{out}/y")' in " ".join(dump.split()).replace("(1): ", ""), dump
    assert f'DATASET "{out}/data"' in dump
    check = """
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["data"]
    assert [dim[0].name for dim in d.dims] == ["/x", "/y"], [dim.keys() for dim in d.dims]
    assert f["x"].is_scale and d.dims[0][0][...].tolist() == [0.0, 1.0, 2.0]
print("ok")
"""
    import sys

    r = subprocess.run([sys.executable, "-c", check, str(out)], env=dict(container_env, **LOG_ENV),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


NATIVE_TOKEN = """
import ctypes, sys, h5py
from h5flow import _hdf5lib


class Token(ctypes.Structure):  # H5O_token_t, passed by value to H5VLnative_token_to_addr
    _fields_ = [("data", ctypes.c_ubyte * 16)]


lib = _hdf5lib.lib()
lib.H5VLnative_addr_to_token.argtypes = [ctypes.c_int64, ctypes.c_uint64, ctypes.POINTER(Token)]
lib.H5VLnative_token_to_addr.argtypes = [ctypes.c_int64, Token, ctypes.POINTER(ctypes.c_uint64)]
with h5py.File(sys.argv[1], "w") as f:
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log"
    token, addr = Token(), ctypes.c_uint64(0)
    print(lib.H5VLnative_addr_to_token(f.id.id, 4096, ctypes.byref(token)),
          lib.H5VLnative_token_to_addr(f.id.id, token, ctypes.byref(addr)))
"""


def test_native_token_functions_refuse_another_connectors_object(tmp_path: Path) -> None:
    """H5VLnative_addr_to_token/token_to_addr treated a container's file object as a native H5F_t (checked
    only by a debug-build assert): h5dump -x reached it and crashed. Both now fail with an error."""
    import sys

    r = subprocess.run([sys.executable, "-c", NATIVE_TOKEN, str(tmp_path / "c.h5")],
                       env=dict(os.environ, **LOG_ENV), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["-1", "-1"], r.stdout


def test_h5diff_unread_vlen_buffer_is_not_reclaimed(tmp_path: Path) -> None:
    """h5diff reclaimed the variable-length data of a buffer that H5Dread had failed to fill (a compound with a
    variable-length string member the connector then read only with its stored type): "double free
    detected", an abort. Neither way round aborts (the connector converts such values now, and h5diff's own
    error path no longer reclaims an unfilled buffer)."""
    native_env, container_env = tm.environments(PLUGIN_DIR)
    s = tm.make_fixtures(tmp_path, ["compound_vlen"], native_env, container_env)
    c, n = s.container_dir / "compound_vlen.h5", s.native_dir / "compound_vlen.h5"
    for args in (["--vol-name-2=native", "--vol-value-2=0", str(c), str(n)],
                 ["--vol-name-1=native", "--vol-value-1=0", str(n), str(c)]):
        r = _run(["h5diff", "-r", *args], container_env)
        assert r.returncode in (0, 1, 2), f"h5diff {' '.join(args)}: rc {r.returncode}\n{r.stderr[-2000:]}"
        assert "double free" not in r.stderr and "AddressSanitizer" not in r.stderr
