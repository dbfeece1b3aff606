"""h5flow_log: committed (named) datatypes, H5Tcommit2/H5Topen2 (h5py `f["t"] = np.dtype(...)`), and datasets
and attributes created with them, checked against native HDF5 running the same script (`same_as_native`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_committed_datatypes(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["t"] = np.dtype([("a", "i4"), ("b", "f8")])
            t = f["t"]
            out("t", [type(t).__name__, str(t.dtype), t.name])
            d = f.create_dataset("d", (2,), dtype=t)
            d[0] = (1, 2.5)
            out("committed", [d.id.get_type().committed(), d.id.get_type() == t.id])  # native links them
            f.attrs.create("a", data=np.array([(3, 4.5)], dtype=t.dtype), dtype=t)
            f["g/t2"] = np.dtype("i8")
            f["vs"] = h5py.string_dtype()
            out("keys", [sorted(f.keys()), list(f["g"].keys())])
            out("getclass", f.get("t", getclass=True).__name__)
            try:
                f["t"] = np.dtype("i2")
                out("dup", "no error")
            except (KeyError, ValueError, RuntimeError, OSError) as e:
                out("dup", type(e).__name__)
        with h5py.File("c.h5", "r+") as f:
            out("reopen", [str(f["t"].dtype), f["d"][...].tolist(), f.attrs["a"].tolist(), str(f["g/t2"].dtype)])
            out("committed2", f["d"].id.get_type().committed())
            at = h5py.h5a.open(f.id, b"a").get_type()
            out("acommitted", [at.committed(), at == f["t"].id])
            seen = []
            f.visititems(lambda n, o: seen.append((n, type(o).__name__)))
            out("visit", seen)
            out("isdt", isinstance(f["vs"], h5py.Datatype))
            f.move("g/t2", "t3"); del f["t"]
            out("after", sorted(f.keys())); out("t3", str(f["t3"].dtype))
            out("_orphan", [str(f["d"].dtype), f["d"].id.get_type().committed()])  # native keeps the unlinked type object alive (refcount); h5flow_log hands out a copy
    """, tmp_path)
    assert got["t"][0] == "Datatype"
    assert got["committed"] == [True, True] and got["acommitted"] == [True, True]
    assert got["after"] == ["d", "g", "t3", "vs"]


def test_copied_objects_never_take_a_stranger_committed_type(tmp_path: Path) -> None:
    """A dataset or attribute created with a committed type and copied into another container must read
    its own values: the type id it recorded means nothing there (another container mints the same ids),
    and handing out the destination's committed type of that id would convert the data to a foreign type."""
    got = same_as_native("""
        with check_connector(h5py.File("a.h5", "w")) as a, check_connector(h5py.File("b.h5", "w")) as b:
            a["ta"] = np.dtype("f8")
            d = a.create_dataset("d", data=np.array([1.5, -2.25]), dtype=a["ta"])
            d.attrs.create("at", np.array([0.75]), dtype=a["ta"])
            b["tb"] = np.dtype("i1")                           # B's first committed type
            b.create_dataset("e", data=np.array([3, 4], "i1"), dtype=b["tb"])
            a.copy(a["d"], b, "d")
            out("dtype", str(b["d"].dtype)); out("values", b["d"][...]); out("attr", b["d"].attrs["at"])
            out("e", [str(b["e"].dtype), b["e"][...]])
        with h5py.File("b.h5", "r") as b:
            out("reopen", [str(b["d"].dtype), b["d"][...], b["d"].attrs["at"]])
    """, tmp_path)
    assert got["values"] == [1.5, -2.25] and got["attr"] == [0.75]


LEFT_OPEN = """
import ctypes, os, sys, h5py, numpy as np
from h5flow import _hdf5lib
with h5py.File(sys.argv[1], "w") as f:
    f["t"] = np.dtype([("p", "f4"), ("q", "i8")])
    f.create_dataset("typed", data=np.array([(1.5, 2)], dtype=f["t"].dtype), dtype=f["t"])
lib = _hdf5lib.lib()
for fn, args in (("H5Fopen", [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int64]),
                 ("H5Topen2", [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64]),
                 ("H5Dopen2", [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64]),
                 ("H5Dget_type", [ctypes.c_int64]), ("H5Fclose", [ctypes.c_int64])):
    getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, ctypes.c_int64
lib.H5close.restype = ctypes.c_int
fid = lib.H5Fopen(sys.argv[1].encode(), 0, 0)                 # H5F_ACC_RDONLY, H5P_DEFAULT
tids = [lib.H5Topen2(fid, b"/t", 0), lib.H5Topen2(fid, b"/t", 0)]
did = lib.H5Dopen2(fid, b"/typed", 0)
dtid = lib.H5Dget_type(did)                                    # the dataset's committed type, opened again
assert fid > 0 and min(tids) > 0 and did > 0 and dtid > 0, (fid, tids, did, dtid)
lib.H5Fclose(fid)                                              # the types and the dataset stay open
print("H5close", lib.H5close(), flush=True)                    # closes them, datatype ids among datatype ids
os._exit(0)                                                    # h5py's own ids are gone with the library
"""


def test_committed_type_left_open_at_library_close(tmp_path: Path) -> None:
    """A committed datatype left open until H5close (h5dump -x does so) is closed by HDF5 while it tears
    down every datatype id: the connector held the type as a datatype id of its own and closed it from
    the committed type's close, after HDF5 had freed it (a segfault at exit). Both connectors exit cleanly."""
    native = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    for name, env in (("native.h5", native), ("container.h5", dict(native, **LOG_ENV))):
        r = subprocess.run([sys.executable, "-c", LEFT_OPEN, str(tmp_path / name)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.split() == ["H5close", "0"], \
            f"{env.get('HDF5_VOL_CONNECTOR', 'native')}: rc {r.returncode}\n{r.stdout}{r.stderr[-3000:]}"


def test_variable_length_datasets_report_fill_on_allocation(tmp_path: Path) -> None:
    """Native HDF5 forces fill time "on allocation" for a dataset of a variable-length type (a string, a
    compound with a string member, a sequence), whatever the creation list asked; the connector returned the
    list as given ("if set"), which h5dump -x prints. Now the same, at creation and after reopening."""
    got = same_as_native("""
        def times(f):
            return {n: f[n].id.get_create_plist().get_fill_time() for n in sorted(f)}
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["s"] = np.array(["x", "yz", ""], dtype=h5py.string_dtype())
            f["cv"] = np.array([(1, "x")], dtype=[("a", "i4"), ("s", h5py.string_dtype())])
            f.create_dataset("seq", (2,), dtype=h5py.vlen_dtype("i4"))
            f["i"] = np.arange(3)
            out("created", times(f))
        with h5py.File("c.h5", "r") as f:
            out("reopened", times(f))
            out("values", [f["s"].asstr()[...].tolist(), f["cv"]["s"].tolist(), len(f["seq"][0])])
    """, tmp_path)
    alloc, ifset = 0, 2  # H5D_FILL_TIME_ALLOC, H5D_FILL_TIME_IFSET
    assert got["reopened"] == {"cv": alloc, "i": ifset, "s": alloc, "seq": alloc}


def test_vlen_compound_converted_memory_types(tmp_path: Path) -> None:
    """Values with variable-length members read and written with a memory type other than the stored one
    (members reordered and widened, a subset with a background, a selection), as HDF5's tools do with
    `H5Tget_native_type`: every value the same as native HDF5's, for datasets and attributes. In C: h5py
    converts such values itself and never hands HDF5 another memory type."""
    prefix = Path(os.environ["H5FLOW_HDF5_DIR"])
    exe = tmp_path / "vlen_convert"
    cmd = ["mpicc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-Wshadow",
           f"-I{prefix / 'include'}", str(Path(__file__).parent / "native" / "vlen_convert.c"),
           f"-L{prefix / 'lib'}", f"-Wl,-rpath,{prefix / 'lib'}", "-lhdf5", "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    native_env = {k: v for k, v in os.environ.items() if k not in LOG_ENV}
    runs = {}
    for side, env in (("native", native_env), ("h5flow_log", {**os.environ, **LOG_ENV})):
        r = subprocess.run([str(exe), str(tmp_path / f"{side}.h5")], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, f"{side}: {r.stdout}{r.stderr}"
        runs[side] = r.stdout
    assert runs["native"].splitlines()[-1] == "done"
    assert runs["h5flow_log"] == runs["native"]
    assert (tmp_path / "h5flow_log.h5").is_dir()


def test_vlen_compound_partial_write_refused(tmp_path: Path) -> None:
    """A write of values with variable-length parts that gives only some members is refused with a message
    saying so (the container replaces whole values), and the stored values are unchanged."""
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent("""
        import h5py, numpy as np
        dt = np.dtype([("a", "<i4"), ("s", h5py.string_dtype())])
        with h5py.File("c.h5", "w") as f:
            d = f.create_dataset("cv", data=np.array([(1, "x")], dtype=dt))
            part = np.dtype([("s", h5py.string_dtype())])
            try:
                d.id.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([("y",)], part),
                           mtype=h5py.h5t.py_create(part))
                print("no error")
            except Exception as e:
                print("error", e)
            print(d[0]["a"], d[0]["s"].decode())
    """))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, **LOG_ENV},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "1 x"
    assert "lacks members of the stored datatype" in r.stdout + r.stderr


def test_committed_datatype_reference_count_counts_users(tmp_path: Path) -> None:
    """A committed datatype's reference count is its names plus the datasets and attributes created with it,
    as native HDF5 counts it (h5stat's "Max. # of links to object"); deleting a user lowers it."""
    same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["t"] = np.dtype([("p", "f4"), ("q", "i8")])
            t = f["t"]
            rc = lambda: h5py.h5o.get_info(t.id).rc
            out("alone", rc())
            f.create_dataset("d", (2,), dtype=t)
            out("dataset", rc())
            f.create_dataset("g/e", (1,), dtype=t)
            out("nested", rc())
            f["g"].attrs.create("a", data=np.zeros(1, t.dtype), dtype=t)
            f.attrs.create("r", data=np.zeros(1, t.dtype), dtype=t)
            out("attributes", rc())
            f["u"] = np.dtype("i2")
            out("unused", h5py.h5o.get_info(f["u"].id).rc)
            del f["d"]
            del f["g"].attrs["a"]
            out("deleted", rc())
        with h5py.File("c.h5", "r") as f:
            out("reopened", h5py.h5o.get_info(f["t"].id).rc)
            out("by_name", h5py.h5o.get_info(f.id, b"t").rc)
    """, tmp_path)


def test_copied_dataset_names_the_copied_committed_datatype(tmp_path: Path) -> None:
    """`H5Ocopy` of a group holding a committed datatype and a dataset created with it: the copied dataset's
    type is the copied committed type (h5copy, h5dump print it by name), within a container and into
    another, a type linked twice (in the object store) included; within a container the copy names the
    original type, as native."""
    got = same_as_native("""
        def typed(d):
            t = d.id.get_type()
            return [t.committed(), h5py.h5i.get_name(t).decode() if t.committed() else None]
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["g/t"] = np.dtype([("p", "f4"), ("q", "i8")])
            f.create_dataset("g/typed", data=np.array([(1.5, 2)], dtype=f["g/t"].dtype), dtype=f["g/t"])
            f["h/t"] = np.dtype("<i2")
            f["h/t2"] = f["h/t"]                                # a second name: the type moves to the store
            f.create_dataset("h/s/x", data=np.arange(3, dtype="<i2"), dtype=f["h/t"])
            f["out"] = np.dtype("<u4")
            f.create_dataset("g/outside", data=np.arange(2, dtype="<u4"), dtype=f["out"])
            f.copy("g", "gc")
            f.copy("h", "hc")
            out("same", [typed(f["gc/typed"]), typed(f["hc/s/x"]), typed(f["gc/outside"])])
            with check_connector(h5py.File("d.h5", "w")) as o:
                f.copy(f["g"], o, "copy")
                f.copy(f["h"], o, "hcopy")
        with h5py.File("d.h5", "r") as o:
            out("other", [typed(o["copy/typed"]), typed(o["hcopy/s/x"]), o["copy/typed"][...].tolist()])
            # native copies a type left outside as an unnamed committed type; h5flow_log keeps a copy only
            out("_outside", o["copy/outside"].id.get_type().committed())
    """, tmp_path)
    assert got["_outside"] is False
