"""third_party/hdf5/patches/0001: h5py's 1.10-API calls work on a non-native terminal VOL connector.

h5py is compiled with ``H5_USE_110_API``: ``keys()``, iteration, ``visititems``, ``get(getclass=True)``,
``get(getlink=True)`` and ``h5o.get_info`` reach ``H5Literate_by_name1``, ``H5Ovisit*1``,
``H5Oget_info_by_name1`` and ``H5Lget_info1``, which stock HDF5 1.14.5 refuses for objects of any
connector but native ("... is only meant to be used with the native VOL connector"). The connector used
first, ``tests/native/testonly_memvol.c``, is a tiny in-memory terminal connector that exists only for
this test (the test compiles it itself) and whose tokens are predictable; the second is the project's
``h5flow_log``. Without the patch every check fails with HDF5's refusal, which the failure shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CONNECTOR_SRC = HERE / "native" / "testonly_memvol.c"
REFUSAL = "is only meant to be used with the native VOL connector"

# Every h5py call that goes through a 1.10 shim, each checked separately so a failure names the call.
SCRIPT = r"""
import json, sys, h5py
from h5flow import _hdf5lib

path, expect = sys.argv[1], sys.argv[2]
f = h5py.File(path, "w")
conn = _hdf5lib.connector_name(f.id.id)
for name in ("a", "a/b", "c", "a/d"):
    f.create_group(name)
checks = {}

def check(label, fn):
    try:
        checks[label] = {"ok": True, "value": fn()}
    except Exception as e:  # report the library's message, whatever the call
        checks[label] = {"ok": False, "error": f"{type(e).__name__}: {e}"}

check("keys", lambda: list(f.keys()))
check("iter", lambda: [k for k in f["a"]])
check("visititems", lambda: (lambda seen: (f.visititems(lambda n, o: seen.append([n, type(o).__name__])), seen)[1])([]))
check("visititems_links", lambda: (lambda seen: (f.visititems_links(lambda n, l: seen.append([n, type(l).__name__])), seen)[1])([]))
check("getclass", lambda: f.get("a/b", getclass=True).__name__)
check("getlink", lambda: type(f.get("a", getlink=True)).__name__)
check("h5o.get_info", lambda: (lambda i: [i.type == h5py.h5o.TYPE_GROUP, int(i.addr)])(h5py.h5o.get_info(f.id, b"a/b")))
check("h5o.get_info self", lambda: int(h5py.h5o.get_info(f["a/d"].id).addr))
check("h5o.visit info", lambda: (lambda seen: (h5py.h5o.visit(f.id, lambda n, i: seen.append([n.decode(), int(i.addr)]), info=True), seen)[1])([]))
check("h5l.get_info", lambda: (lambda i: [i.type == h5py.h5l.TYPE_HARD, int(i.u)])(f.id.links.get_info(b"c")))
f.close()
print(json.dumps({"connector": conn, "checks": checks}))
"""

EXPECTED = {
    "keys": ["a", "c"],
    "iter": ["b", "d"],
    "visititems": [["a", "Group"], ["a/b", "Group"], ["a/d", "Group"], ["c", "Group"]],
    "visititems_links": [["a", "HardLink"], ["a/b", "HardLink"], ["a/d", "HardLink"], ["c", "HardLink"]],
    "getclass": "Group",
    "getlink": "HardLink",
}


@pytest.fixture(scope="module")
def memvol_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the test-only connector with the project's C flags into a private plugin directory."""
    prefix = Path(os.environ["H5FLOW_HDF5_DIR"])
    out = tmp_path_factory.mktemp("memvol-plugin")
    cmd = ["mpicc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-Wshadow",
           "-Wstrict-prototypes", "-Wmissing-prototypes", "-shared", "-fPIC", f"-I{prefix / 'include'}",
           str(CONNECTOR_SRC), f"-L{prefix / 'lib'}", f"-Wl,-rpath,{prefix / 'lib'}", "-lhdf5",
           "-o", str(out / "libtestonly_memvol.so")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"building {CONNECTOR_SRC.name} failed:\n{proc.stderr}"
    return out


def _run(tmp_path: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "f.h5"), ""], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _failed(checks: dict) -> dict[str, str]:
    return {k: v["error"] for k, v in checks.items() if not v["ok"]}


def _checked(out: dict, connector: str) -> dict:
    """The checks' values, after failing with HDF5's refusal if the patch is missing."""
    assert out["connector"] == connector, f"HDF5 did not load {connector} (it used {out['connector']})"
    failed = _failed(out["checks"])
    if any(REFUSAL in msg for msg in failed.values()):
        pytest.fail("HDF5 refuses the 1.10 API for non-native objects: patch "
                    "third_party/hdf5/patches/0001-deprecated-110-api-non-native-vol.patch is not in the "
                    f"library h5py loaded (run `make setup`). Failures: {json.dumps(failed, indent=1)}")
    assert not failed, json.dumps(failed, indent=1)
    checks = {k: v["value"] for k, v in out["checks"].items()}
    for label, want in EXPECTED.items():
        assert checks[label] == want, (label, checks[label])
    visited = dict(checks["h5o.visit info"])
    assert visited["a/b"] == checks["h5o.get_info"][1] and visited["a/d"] == checks["h5o.get_info self"]
    assert visited["c"] == checks["h5l.get_info"][1]
    return checks


def test_h5py_110_calls_on_a_non_native_terminal_connector(memvol_dir: Path, tmp_path: Path) -> None:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(memvol_dir), HDF5_VOL_CONNECTOR="testonly_memvol")
    checks = _checked(_run(tmp_path, env), "testonly_memvol")
    # The 1.10 "address" of a non-native object is its token's first 8 bytes: for this connector the
    # node number (root 1, then a=2, a/b=3, c=4, a/d=5 in creation order).
    assert checks["h5o.get_info"] == [True, 3]
    assert checks["h5l.get_info"] == [True, 4]
    assert checks["h5o.get_info self"] == 5
    assert checks["h5o.visit info"] == [["a", 2], ["a/b", 3], ["a/d", 5], ["c", 4]]


def test_h5py_110_calls_on_h5flow_log(tmp_path: Path) -> None:
    """The same through the project's own terminal connector (its tokens, its addresses)."""
    from h5flow import connectors

    if not any(c.name == "h5flow_log" for c in connectors.find()):
        pytest.fail(f"h5flow_log is not built in {connectors.plugin_path()}: run `make setup`")
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log")
    env.setdefault("HDF5_PLUGIN_PATH", os.pathsep.join(map(str, connectors.plugin_path())))
    checks = _checked(_run(tmp_path, env), "h5flow_log")
    addrs = [checks["h5o.get_info"][1], checks["h5l.get_info"][1], checks["h5o.get_info self"]]
    assert len(set(addrs)) == 3, f"three objects, one 1.10 address: {addrs}"


def test_native_objects_unchanged(tmp_path: Path) -> None:
    """The same calls on native: real file addresses, from H5VL_native_token_to_addr as before."""
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    checks = _checked(_run(tmp_path, env), "native")
    import h5py

    with h5py.File(tmp_path / "f.h5", "r") as f:
        addr_b = h5py.h5g.get_objinfo(f.id, b"a/b").objno[0]  # H5Gget_objinfo: not one of the shims
    assert checks["h5o.get_info"] == [True, addr_b] and addr_b > 96  # past the superblock
    assert checks["h5l.get_info"][0] and checks["h5l.get_info"][1] > 96
