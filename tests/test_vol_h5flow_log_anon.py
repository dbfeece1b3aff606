"""h5flow_log: every way HDF5 gives an anonymous object (H5Gcreate_anon, H5Dcreate_anon, H5Tcommit_anon) a name
keeps it: `H5Lcreate_hard(obj, ".", loc, name)` (h5py `links.create_hard(name, obj, b".")`, what h5repack does
for committed datatypes), `H5Olink`, `H5Ocopy` of an anonymous object, through a second handle of the file and
under MPI. Each is read back in a fresh process and compared with native HDF5 running the same script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, _run, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

WRITE = """
    import ctypes
    lib = _hdf5lib.lib()
    for fn in (lib.H5Tcommit_anon, lib.H5Olink, lib.H5Lcreate_hard, lib.H5Lcopy, lib.H5Ocopy):
        fn.restype = ctypes.c_int
    L = lambda h: ctypes.c_int64(h.id)
    with check_connector(h5py.File("c.h5", "w")) as f:
        g = f.create_group(None); g.attrs["a"] = 1
        out("g_hard", f.id.links.create_hard(b"g", g.id, b"."))
        out("g_in", "g" in f)
        d = f.create_dataset(None, data=np.arange(5))
        out("d_hard", lib.H5Lcreate_hard(L(d.id), b".", L(f.id), b"d1", 0, 0))
        t = h5py.h5t.py_create(np.dtype("<i2")).copy()
        lib.H5Tcommit_anon(L(f.id), L(t), 0, 0)
        out("t_hard", lib.H5Lcreate_hard(L(t), b".", L(f.id), b"t", 0, 0))
        g2 = f.create_group(None); g2.attrs["b"] = 2
        out("g2_lcopy", lib.H5Lcopy(L(g2.id), b".", L(f.id), b"g2", 0, 0))  # "." is no link: refused
        g3 = f.create_group(None); g3.attrs["c"] = 3; g3.create_dataset("in", data=[1, 2])
        out("g3_ocopy", lib.H5Ocopy(L(g3.id), b".", L(f.id), b"g3", 0, 0))
        d4 = f.create_dataset(None, data=np.arange(3.))
        out("d4_ocopy", lib.H5Ocopy(L(d4.id), b".", L(f.id), b"d4", 0, 0))
        t4 = h5py.h5t.py_create(np.dtype("<f8")).copy()
        lib.H5Tcommit_anon(L(f.id), L(t4), 0, 0)
        out("t4_ocopy", lib.H5Ocopy(L(t4), b".", L(f.id), b"t4", 0, 0))
        f2 = h5py.File("c.h5", "a")                         # a second handle of the file
        d5 = f2.create_dataset(None, data=np.arange(4))
        out("d5_olink_second", lib.H5Olink(L(d5.id), L(f.id), b"d5", 0, 0))
        d5[0] = 99                                          # written after the naming, through the handle
        g5 = f.create_group(None); g5.attrs["e"] = 5
        try:                                                # native refuses a hard link across two file
            f2.id.links.create_hard(b"g5", g5.id, b".")     # handles; the connector names the object
            out("_g5_second", 0)
        except Exception as e:
            out("_g5_second", type(e).__name__)
        out("d_again", lib.H5Lcreate_hard(L(d.id), b".", L(f.id), b"d_again", 0, 0))  # named now: a 2nd name
        f2.close()
        d[1] = 42
        del g, d, g2, g3, d4, g5, d5
        t.close(); t4.close()
    out("_leftovers", sorted(n for n in os.listdir("c.h5") if n.startswith(("@anon", "@tmp"))) if os.path.isdir("c.h5") else [])
"""

READ = """
    with check_connector(h5py.File("c.h5", "r")) as f:
        items = {}
        def seen(name, o):
            v = o[...].tolist() if isinstance(o, h5py.Dataset) else str(o.dtype) if isinstance(o, h5py.Datatype) else None
            items[name] = [type(o).__name__, v, {k: int(a) for k, a in o.attrs.items()}]
        f.visititems(seen)
        out("_g5", items.pop("g5", None) is not None)  # see _g5_second
        out("items", items)
        out("same", f["d1"] == f["d_again"])
"""


def test_every_way_of_naming_an_anonymous_object_like_native(tmp_path: Path) -> None:
    wrote = same_as_native(WRITE, tmp_path)
    assert wrote["g_in"] is True and wrote["d_hard"] == wrote["t_hard"] == wrote["d5_olink_second"] == 0
    assert wrote["g2_lcopy"] < 0 and wrote["_leftovers"] == []
    got = same_as_native(READ, tmp_path)  # a fresh process, the same files
    items = got["items"]
    assert items["g"] == ["Group", None, {"a": 1}] and items["t"] == ["Datatype", "int16", {}]
    assert items["d1"] == ["Dataset", [0, 42, 2, 3, 4], {}] and items["d5"] == ["Dataset", [99, 1, 2, 3], {}]
    assert items["g3/in"][1] == [1, 2] and items["t4"][1] == "float64" and got["same"] is True
    assert got["_g5"] is (wrote["_g5_second"] == 0)


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_anonymous_objects_named_collectively(comm, mpi_tmp_path: Path) -> None:
    """Two ranks name anonymous objects collectively (H5Lcreate_hard with ".", H5Olink); each rank writes its
    row through the handle after the naming; a fresh process reads everything back."""
    import ctypes

    import h5py
    import numpy as np

    from h5flow import _hdf5lib
    from h5flow.testing.pytest_mpi import mpi_assert

    lib = _hdf5lib.lib()
    for fn in (lib.H5Tcommit_anon, lib.H5Olink, lib.H5Lcreate_hard):
        fn.restype = ctypes.c_int
    path = mpi_tmp_path / "anon.h5"
    r = comm.rank
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        g = f.create_group(None)
        g.attrs["a"] = 7
        rc_g = f.id.links.create_hard(b"g", g.id, b".")
        d = f.create_dataset(None, shape=(comm.size, 3), dtype="i8", fillvalue=-1)
        d[r] = r + 1
        rc_d = lib.H5Lcreate_hard(ctypes.c_int64(d.id.id), b".", ctypes.c_int64(f.id.id), b"g/d", 0, 0)
        d[r, 2] = 10 + r
        t = h5py.h5t.py_create(np.dtype("<u2")).copy()
        lib.H5Tcommit_anon(ctypes.c_int64(f.id.id), ctypes.c_int64(t.id), 0, 0)
        rc_t = lib.H5Olink(ctypes.c_int64(t.id), ctypes.c_int64(f.id.id), b"t", 0, 0)
        del g, d
        t.close()
    mpi_assert(comm, (rc_g, rc_d, rc_t) == (None, 0, 0), f"rank {r}: {(rc_g, rc_d, rc_t)}")
    comm.Barrier()
    if r == 0:
        code = ("import sys, json, h5py; f = h5py.File(sys.argv[1], 'r'); "
                "print(json.dumps([int(f['g'].attrs['a']), f['g/d'][...].tolist(), str(f['t'].dtype), sorted(f.keys())]))")
        env = dict(os.environ, **LOG_ENV)
        env.pop("PMI_RANK", None)
        p = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, timeout=60)
        ok = p.returncode == 0 and p.stdout.strip() == ('[7, [[1, 1, 10], [2, 2, 11]], "uint16", ["g", "t"]]'
                                                      if comm.size == 2 else p.stdout.strip())
        msg = p.stdout + p.stderr
    else:
        ok, msg = True, ""
    mpi_assert(comm, comm.bcast(ok, root=0), f"read back: {comm.bcast(msg, root=0)}")


def test_h5repack_of_a_committed_datatype_into_a_container_like_native(tmp_path: Path) -> None:
    """h5repack commits a datatype anonymously and names it with H5Lcreate_hard(".", ...): repacked into a
    container (native -> container, container -> container) it is there, and h5ls -r and h5dump show what
    they show for the native file."""
    from test_vol_h5flow_log_links import _run_tool

    n, c, c2 = tmp_path / "n.h5", tmp_path / "c.h5", tmp_path / "c2.h5"
    _run("""
        with h5py.File("n.h5", "w") as f:
            f["t"] = np.dtype([("a", "<i4"), ("b", "<f8")])
            f.create_dataset("g/d", data=np.array([(1, 2.5), (3, 4.5)], dtype=f["t"].dtype), dtype=f["t"])
            f["g"].attrs["x"] = 3
    """, tmp_path, connector=False)
    _run_tool(["h5repack", "--src-vol-value=0", "--src-vol-name=native", str(n), str(c)])
    _run_tool(["h5repack", str(c), str(c2)])
    native_ls = _run_tool(["h5ls", "-r", str(n)], connector=False).stdout
    for out in (c, c2):
        ls = _run_tool(["h5ls", "-r", str(out)]).stdout
        assert ls.replace(str(out), "F") == native_ls.replace(str(n), "F"), ls
        dump = _run_tool(["h5dump", str(out)]).stdout
        assert dump.replace(str(out), "F") == _run_tool(["h5dump", str(n)], connector=False).stdout.replace(str(n), "F")


def test_h5stat_on_a_container_with_a_committed_datatype(tmp_path: Path) -> None:
    """H5Oget_native_info of a committed datatype is answered (no header sizes, as for every object of a
    container): h5stat walks the container and counts the objects native's h5stat counts."""
    from test_vol_h5flow_log_links import _run_tool

    body = """
        with check_connector(h5py.File("x.h5", "w")) as f:
            f["committed_t"] = np.dtype("<i4"); f.create_dataset("g/d", (2,), dtype=f["committed_t"])
    """
    _run(body, tmp_path / "n", connector=False)
    _run(body, tmp_path / "c", connector=True)
    counts = []
    for sub, conn in (("n", False), ("c", True)):
        out = _run_tool(["h5stat", str(tmp_path / sub / "x.h5")], connector=conn).stdout
        counts.append([ln.strip() for ln in out.splitlines() if "# of unique" in ln])
    assert counts[0] == counts[1] and "# of unique named datatypes: 1" in counts[1], counts
