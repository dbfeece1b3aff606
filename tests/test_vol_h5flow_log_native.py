"""Native HDF5 files through h5flow_log (docs/FORMAT.md "Native HDF5 files through h5flow_log").

With HDF5_VOL_CONNECTOR=h5flow_log set for a whole job, an ordinary native file (made without the
connector) still opens, reads and changes through the native connector underneath; drivers a container
cannot live in (h5py's file-object driver, file images, split, family) make native files; operations that
would mix a container and a native file are refused with a message that says what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from h5flow._paths import default_plugin_dir
from h5flow.testing.tools_matrix import tool_path

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

PRELUDE = """
import io, os, sys, numpy as np, h5py
from h5flow import _hdf5lib
assert os.environ["HDF5_VOL_CONNECTOR"] == "h5flow_log"
def served(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log", _hdf5lib.connector_name(f.id.id)
    return f
"""


def with_connector(body: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, **LOG_ENV)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc


def without_connector(body: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    proc = subprocess.run([sys.executable, "-c", "import os, sys, numpy as np, h5py\n" + textwrap.dedent(body)],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc


MAKE_NATIVE = """
with h5py.File("n.h5", "w") as f:
    f["x"] = np.arange(10, dtype="i4")
    f.create_dataset("g/c", data=np.arange(12.0).reshape(3, 4), chunks=(1, 4), compression="gzip")
    f["g"].attrs["units"] = "K"
    f["s"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
    f["soft"] = h5py.SoftLink("/x")
"""


@pytest.fixture
def native(tmp_path: Path) -> Path:
    without_connector(MAKE_NATIVE, tmp_path)
    return tmp_path / "n.h5"


def test_native_file_opens_reads_and_changes(native: Path, tmp_path: Path) -> None:
    with_connector("""
        with served(h5py.File("n.h5", "r+")) as f:
            assert f["x"][()].tolist() == list(range(10))
            assert f["g/c"][1].tolist() == [4.0, 5.0, 6.0, 7.0] and f["g"].attrs["units"] == "K"
            assert f["s"].asstr()[()].tolist() == ["a", "bc"] and f["soft"][3] == 3
            assert f.id.get_vfd_handle() > 0           # a native-only call answers on a native file
            assert f["soft"] == f["x"] and f["x"] != f["g/c"]  # tokens compared by the native connector
            assert h5py.h5o.get_info(f["x"].id).addr == h5py.h5o.get_info(f["soft"].id).addr
            ref = f["x"].ref                            # an object reference, dereferenced natively
            assert f[ref].name == "/x"
            f["x"][0] = 100
            f["new"] = np.ones(3)
            f["g"].attrs["more"] = 2
            del f["s"]
            names = []
            f.visit(names.append)
            assert sorted(names) == ["g", "g/c", "new", "x"], names
            # what a container does differently, done natively: committed types, scales, region references
            f["t"] = np.dtype([("a", "i4"), ("b", "f8")])
            d = f.create_dataset("d", shape=(2,), dtype=f["t"])
            d[0] = (1, 2.5)
            f["sc"] = np.arange(3.0)
            f["sc"].make_scale("sc")
            f["g/c"].dims[0].attach_scale(f["sc"])
            f["r"] = f["g/c"].regionref[1:2, 0:2]
            f.copy("x", "xc")
        with h5py.File("n.h5", "r") as f:
            assert f["d"].id.get_type().committed() and f["d"][0].tolist() == (1, 2.5)
            assert f["g/c"].dims[0][0].name == "/sc" and f["g/c"][f["r"][()]].tolist() == [[4.0, 5.0]]
            assert f["xc"][0] == 100
        assert os.path.isfile("n.h5")                   # still one native file, no container beside it
        assert h5py.is_hdf5("n.h5")
    """, tmp_path)
    out = without_connector("""
        with h5py.File("n.h5", "r") as f:
            print(f["x"][:2].tolist(), f["new"][()].tolist(), f["g"].attrs["more"], "s" in f)
            print(f["g/c"].dims[0][0].name, f["g/c"][f["r"][()]].tolist(), f["d"].id.get_type().committed())
    """, tmp_path)
    assert out.stdout.strip() == "[100, 1] [1.0, 1.0, 1.0] 2 False\n/sc [[4.0, 5.0]] True"


def _tool(name: str) -> str:
    """The stack's HDF5 tool: make setup installs it, so a missing one is a broken setup, not a skip."""
    found = tool_path(name)
    assert found, f"{name} not found: the stack installs it (run make setup, then source build/stack.env)"
    return found


@pytest.mark.parametrize("tool", [["h5dump"], ["h5ls", "-r", "-v"]])
def test_tools_read_a_native_file_with_the_connector_set(tool: list[str], native: Path) -> None:
    """h5dump and h5ls print the same with and without HDF5_VOL_CONNECTOR=h5flow_log."""
    outs = []
    for env in ({k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}, dict(os.environ, **LOG_ENV)):
        proc = subprocess.run([_tool(tool[0]), *tool[1:], native.name], env=env, cwd=native.parent,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    assert "units" in outs[1] if tool[0] == "h5dump" else "/g/c" in outs[1]


def test_file_object_driver_makes_a_native_image(tmp_path: Path) -> None:
    """h5py.File(BytesIO): created and read back through h5py's driver, the bytes are a native file."""
    with_connector("""
        buf = io.BytesIO()
        with served(h5py.File(buf, "w")) as f:
            f["d"] = np.arange(6)
            f["d"].attrs["a"] = 1
        assert buf.getvalue()[:8] == b"\\x89HDF\\r\\n\\x1a\\n"
        with h5py.File(buf, "r") as f:
            assert f["d"][()].tolist() == list(range(6)) and f["d"].attrs["a"] == 1
        with open("image.h5", "wb") as fh:
            fh.write(buf.getvalue())
        assert sorted(os.listdir(".")) == ["image.h5"]   # nothing named after the object's repr
    """, tmp_path)
    out = without_connector("print(h5py.File('image.h5', 'r')['d'][()].tolist())", tmp_path)
    assert out.stdout.strip() == "[0, 1, 2, 3, 4, 5]"


def test_file_image_opens_natively(native: Path, tmp_path: Path) -> None:
    """A file image (H5Pset_file_image on a core driver list) opens as the native file it is."""
    with_connector("""
        image = open("n.h5", "rb").read()
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_fapl_core(backing_store=False)
        fapl.set_file_image(image)
        fid = h5py.h5f.open(b"in-memory", h5py.h5f.ACC_RDONLY, fapl=fapl)
        with h5py.File(fid) as f:
            assert f["x"][()].tolist() == list(range(10))
        assert not os.path.exists("in-memory")
    """, tmp_path)


@pytest.mark.parametrize("driver", ["family", "split"])
def test_multi_file_drivers_make_native_files(driver: str, tmp_path: Path) -> None:
    name = "f%d.h5" if driver == "family" else "s.h5"
    with_connector(f"""
        with served(h5py.File({name!r}, "w", driver={driver!r})) as f:
            f["x"] = np.arange(4)
        with h5py.File({name!r}, "r", driver={driver!r}) as f:
            assert f["x"][()].tolist() == [0, 1, 2, 3]
        assert not any(os.path.isdir(p) for p in os.listdir(".")), os.listdir(".")
    """, tmp_path)


def test_external_links_both_ways(native: Path, tmp_path: Path) -> None:
    """A container's external link into a native file and a native file's link into a container open their
    objects (the native file made without the connector)."""
    without_connector("""
        with h5py.File("n2.h5", "w") as f:
            f["to_c"] = h5py.ExternalLink("c.h5", "/grp")
    """, tmp_path)
    with_connector("""
        with served(h5py.File("c.h5", "w")) as c:
            c["grp/v"] = np.arange(3)
            c["to_n"] = h5py.ExternalLink("n.h5", "/g")
        with served(h5py.File("c.h5", "r")) as c:
            assert c["to_n/c"][2].tolist() == [8.0, 9.0, 10.0, 11.0] and c["to_n"].attrs["units"] == "K"
        with served(h5py.File("n2.h5", "r")) as n:
            assert n["to_c/v"][()].tolist() == [0, 1, 2] and n["to_c"]["v"][1] == 1
            assert "to_c/v" in n and "to_c/nope" not in n
    """, tmp_path)


def test_mixing_a_container_and_a_native_file_is_refused_clearly(native: Path, tmp_path: Path) -> None:
    proc = with_connector("""
        import os
        c = served(h5py.File("c.h5", "w"))
        n = h5py.File("n.h5", "r+")
        assert os.path.isdir("c.h5")
        c["q"] = np.arange(3)
        def attempt(what, fn):
            try:
                fn()
            except Exception as e:
                print(what, "refused:", type(e).__name__, e)
            else:
                print(what, "DONE")
        attempt("copy n->c", lambda: c.copy(n["x"], "x"))
        attempt("copy c->n", lambda: n.copy(c["q"], "q"))
        attempt("hard n->c", lambda: c.__setitem__("h", n["x"]))
        attempt("hard c->n", lambda: n.__setitem__("h", c["q"]))
        attempt("move c->n", lambda: c.id.links.move(b"q", n.id, b"q2"))
        print("same file:", c.id == n.id, c == n)
        print("kept:", sorted(c), sorted(n))
        # a committed type of the other file: the new object keeps a copy (as native across files)
        c["tc"] = np.dtype("f4")
        n["tn"] = np.dtype("i2")
        n.create_dataset("from_c", data=[1.5, 2.5], dtype=c["tc"])
        c.create_dataset("from_n", data=[3, 4], dtype=n["tn"])
        n.attrs.create("from_c", data=[5.5], dtype=c["tc"])
        c.attrs.create("from_n", data=[6], dtype=n["tn"])
        c.close(); n.close()
        with h5py.File("n.h5", "r") as n, h5py.File("c.h5", "r") as c:
            print("copies:", n["from_c"][()].tolist(), c["from_n"][()].tolist(), n.attrs["from_c"].tolist(),
                  c.attrs["from_n"].tolist(), n["from_c"].id.get_type().committed())
    """, tmp_path)
    out = proc.stdout
    for what in ("copy n->c", "copy c->n", "hard n->c", "hard c->n", "move c->n"):
        line = next(ln for ln in out.splitlines() if ln.startswith(what))
        assert "refused" in line and "h5flow unpack" in line and "h5flow pack" in line, line
    assert "same file: False False" in out
    assert "kept: ['q'] ['g', 's', 'soft', 'x']" in out, out
    assert "copies: [1.5, 2.5] [3, 4] [5.5] [6] False" in out, out


def test_h5flow_commands_say_a_native_file_is_not_a_container(native: Path) -> None:
    for cmd in (["stats", str(native)], ["ls", str(native)]):
        proc = subprocess.run([sys.executable, "-c", "import sys; from h5flow.cli import main; sys.exit(main())",
                               *cmd], capture_output=True, text=True, timeout=60, env=dict(os.environ, **LOG_ENV))
        assert proc.returncode != 0
        assert "is a native HDF5 file, not an h5flow_log container" in proc.stderr, proc.stderr


def test_delete_and_accessible_on_a_native_file(native: Path, tmp_path: Path) -> None:
    """H5Fis_accessible is true for a native file; H5Fdelete removes it (and a container still)."""
    with_connector("""
        import ctypes
        lib = ctypes.CDLL(str(_hdf5lib.library_path()))
        lib.H5Fis_accessible.restype = ctypes.c_int
        lib.H5Fdelete.argtypes = [ctypes.c_char_p, ctypes.c_int64]
        lib.H5Fis_accessible.argtypes = [ctypes.c_char_p, ctypes.c_int64]
        with served(h5py.File("c.h5", "w")) as f:
            f["x"] = 1
        assert lib.H5Fis_accessible(b"n.h5", 0) == 1 and lib.H5Fis_accessible(b"c.h5", 0) == 1
        assert lib.H5Fdelete(b"n.h5", 0) >= 0 and lib.H5Fdelete(b"c.h5", 0) >= 0
        assert os.listdir(".") == [], os.listdir(".")
    """, tmp_path)


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_ranks_share_a_native_file(comm, mpi_tmp_path: Path) -> None:  # noqa: ANN001
    """Two ranks open one native file (made through h5py's file-object driver) with the mpio driver
    through the connector: each writes its row collectively, both read the other's."""
    import io

    import h5py

    from h5flow import _hdf5lib
    from h5flow.testing.pytest_mpi import mpi_assert

    path = mpi_tmp_path / "shared.h5"
    if comm.rank == 0:
        buf = io.BytesIO()
        with h5py.File(buf, "w") as f:
            f.create_dataset("rows", shape=(comm.size, 4), dtype="i4")
        path.write_bytes(buf.getvalue())
    comm.Barrier()
    with h5py.File(path, "r+", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "h5flow_log", "not served by h5flow_log")
        with f["rows"].collective:
            f["rows"][comm.rank] = np.full(4, comm.rank + 1, dtype="i4")
    comm.Barrier()
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        got = f["rows"][()]
    mpi_assert(comm, got.tolist() == [[r + 1] * 4 for r in range(comm.size)], f"rank {comm.rank} read {got}")
    mpi_assert(comm, path.is_file(), "the native file became something else")
