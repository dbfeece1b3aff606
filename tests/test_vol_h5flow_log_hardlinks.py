"""h5flow_log: second hard links (H5Lcreate_hard, h5py `g["b"] = g["a"]`, H5Lcopy/H5Lmove of hard links, link
counts), checked against native HDF5 running the same script (`same_as_native`), plus the on-disk guarantees
of docs/FORMAT.md "Hard links": the container format, the order of the steps (a container stopped between
two of them opens and reads the same values), object copy and `h5flow pack`.
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


def test_second_name_reads_writes_counts_and_deletes_like_native(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(6)
            f.create_group("g")
            f["g/b"] = f["a"]                                   # a second name
            out("same_id", f["a"].id == f["g/b"].id)
            out("rc", h5py.h5o.get_info(f["a"].id).rc)
            out("objinfo_nlink", h5py.h5g.get_objinfo(f.id, b"g/b").nlink)
            f["g/b"][1] = 42                                    # written through one name, read through the other
            out("via_a", f["a"][...])
            out("link_types", [f.id.links.get_info(n).type for n in (b"a", b"g/b")])
            out("same_token", f.id.links.get_info(b"a").u == f.id.links.get_info(b"g/b").u)
            out("keys", sorted(f.keys())); out("gkeys", sorted(f["g"].keys()))
            d = f["a"]
            del f["a"]                                          # the first name goes, the object stays
            out("after_del", f["g/b"][...]); out("rc2", h5py.h5o.get_info(f["g/b"].id).rc)
            out("open_handle", d[...]); out("keys2", sorted(f.keys()))
        with check_connector(h5py.File("c.h5", "a")) as f:      # persists
            out("reopen", f["g/b"][...]); out("rc3", h5py.h5o.get_info(f["g/b"].id).rc)
            f.id.links.create_hard(b"c", f.id, b"g/b")          # H5Lcreate_hard by name
            f.move("c", "g/c")                                  # H5Lmove of a hard link
            out("moved", sorted(f["g"].keys())); out("moved_val", f["g/c"][...])
            out("rc4", h5py.h5o.get_info(f["g/c"].id).rc)
            del f["g/b"]; del f["g/c"]                          # the last name: the object goes
            out("keys3", sorted(f["g"].keys()))
            try:
                f.id.links.create_hard(b"x", f.id, b"nowhere")
                out("dangling", "created")
            except Exception as e:
                out("dangling", type(e).__name__)
    """, tmp_path)
    assert got["same_id"] is True and got["rc"] == 2 and got["via_a"] == [0, 42, 2, 3, 4, 5]
    assert got["after_del"] == [0, 42, 2, 3, 4, 5] and got["rc2"] == 1 and got["keys3"] == []


def test_groups_linked_into_themselves_visit_once_like_native(tmp_path: Path) -> None:
    """H5Ovisit visits each object once, H5Lvisit each link once, and neither loops on a group linked into its
    own subtree (or the root group linked below itself)."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            g = f.create_group("g")
            g["x"] = np.arange(3)
            g["self"] = g                                       # a cycle
            f["g2"] = g
            f["g/h/root"] = f["/"]                              # the root group below itself
            objs = []; f.visit(objs.append); out("visit", objs)
            links = []; f.visit_links(links.append); out("visit_links", links)
            items = []; f["g"].visititems(lambda n, o: items.append((n, type(o).__name__))); out("items", items)
            out("deep", f["g/self/self/h/root/g2/x"][...])
            out("root_rc", h5py.h5o.get_info(f.id).rc)
            out("g_rc", h5py.h5o.get_info(f["g"].id).rc)
            del f["g"]                                          # g keeps two names (g2, g2/self)
            out("after", sorted(f.keys())); out("g2x", f["g2/x"][...]); out("g_rc2", h5py.h5o.get_info(f["g2"].id).rc)
            del f["g2/h/root"]
            out("root_rc2", h5py.h5o.get_info(f.id).rc)
    """, tmp_path)
    assert got["visit"] == ["g", "g/h", "g/x"] and got["deep"] == [0, 1, 2] and got["g_rc"] == 3


def test_object_references_resolve_from_any_name(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(4)
            r1 = f["a"].ref                                     # made before the second name
            f["b"] = f["a"]
            r2 = f["b"].ref
            f.attrs["r"] = r1
            out("same_ref_target", f[r1].id == f[r2].id)
            del f["a"]
            out("deref", f[r1][...]); out("deref2", f[f.attrs["r"]][...])
            g = f.create_group("g"); rg = g.ref; f["g2"] = g
            out("group_deref", sorted(f[rg].keys()) == sorted(f["g2"].keys()))
            f["r"] = f["/"]                                     # the root group by a second name
            rr = f["r"].ref
            out("root_ref", [f[rr].id == f["/"].id, f[rr].id == f["r"].id])
        with check_connector(h5py.File("c.h5", "r")) as f:
            out("reopen_deref", f[f.attrs["r"]][...])
    """, tmp_path)
    assert got["same_ref_target"] is True and got["deref"] == [0, 1, 2, 3] and got["root_ref"] == [True, True]


def test_link_copy_of_a_hard_link_and_creation_order(tmp_path: Path) -> None:
    """H5Lcopy of a hard link makes one more name (native does); the link keeps its creation order when its
    object moves into the store, and a group emptied of links restarts its order at 0 (as native)."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w", track_order=True)) as f:
            f["z"] = np.arange(2)
            f["y"] = np.arange(3)
            f["x"] = f["z"]                                     # z moves into the store; its order stays 0
            out("order", list(f.keys()))
            out("corder", [f.id.links.get_info(n.encode()).corder for n in f.keys()])
            g = f.create_group("e", track_order=True)
            g["one"] = f["y"]; g["two"] = f["y"]
            del g["one"]; del g["two"]
            g["three"] = f["y"]                                 # the emptied group restarts at 0
            out("restart", g.id.links.get_info(b"three").corder)
            out("rc", h5py.h5o.get_info(f["y"].id).rc)
    """, tmp_path)
    assert got["order"] == ["z", "y", "x"] and got["restart"] == 0


def test_h5lcopy_of_a_hard_link(tmp_path: Path) -> None:
    """H5Lcopy (not wrapped by h5py: called through ctypes on the HDF5 library h5py uses)."""
    got = same_as_native("""
        import ctypes
        lib = _hdf5lib.lib()
        lib.H5Lcopy.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                                ctypes.c_int64]
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(3)
            g = f.create_group("g")                             # (kept: its id must stay open)
            out("copy", lib.H5Lcopy(f.id.id, b"a", g.id.id, b"c", 0, 0))
            out("same", f["a"].id == f["g/c"].id); out("rc", h5py.h5o.get_info(f["a"].id).rc)
            f["g/c"][0] = 7; out("a", f["a"][...])
    """, tmp_path)
    assert got["copy"] >= 0 and got["same"] is True and got["rc"] == 2


def _run_log(body: str, tmp_path: Path) -> dict:
    return _run(body, tmp_path, connector=True)


def test_format_4_only_once_a_hard_link_exists(tmp_path: Path) -> None:
    """The marker says format 3 until the first second name is created, then 4: a connector that does not
    know hard link stubs refuses the container rather than showing half of it."""
    got = _run_log("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = 1
        out("before", open("c.h5/@h5flow_log").read().split("\\n")[1])
        with check_connector(h5py.File("c.h5", "a")) as f:
            out("reopened", open("c.h5/@h5flow_log").read().split("\\n")[1])
            f["b"] = f["a"]
            out("after", open("c.h5/@h5flow_log").read().split("\\n")[1])
        with check_connector(h5py.File("c.h5", "a")) as f:
            out("kept", open("c.h5/@h5flow_log").read().split("\\n")[1])
    """, tmp_path)
    assert got == {"before": "format 3", "reopened": "format 3", "after": "format 4", "kept": "format 4"}


def test_steps_stopped_half_way_leave_a_readable_container(tmp_path: Path) -> None:
    """The states a crash can leave (docs/FORMAT.md "Hard links"), made by hand: a stub at the store slot that
    no name uses yet (before the exchange), a link count above the number of names (after the count was
    raised, before the new stub), and a stub whose @hardlink was removed (a deletion stopped half-way). Each
    opens and reads the same values; a stub naming a missing object is an error that says so."""
    got = _run_log("""
        import struct, shutil
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(4); f["keep"] = np.arange(2)
            f["b"] = f["a"]
        store = [n for n in os.listdir("c.h5/@objects")]
        out("store", len(store))
        sid = store[0]; out("sid", sid)
        # 1. a stub left in a store slot (a conversion stopped before its exchange)
        os.mkdir("c.h5/@objects/" + "8" + "0" * 14 + "9")
        shutil.copy("c.h5/a/@hardlink", "c.h5/@objects/" + "8" + "0" * 14 + "9/@hardlink")
        # 2. a count above the names
        open(f"c.h5/@objects/{sid}/@nlink", "w").write("3\\n")
        # 3. a deletion stopped after the stub lost its @hardlink
        os.mkdir("c.h5/half")
        with check_connector(h5py.File("c.h5", "r")) as f:
            out("keys", sorted(f.keys())); out("a", f["a"][...]); out("b", f["b"][...])
            out("rc", h5py.h5o.get_info(f["a"].id).rc)
            objs = []; f.visit(objs.append); out("visit", objs)
        with check_connector(h5py.File("c.h5", "a")) as f:
            del f["a"]; del f["b"]                              # count 3 -> 1: the object stays (a leak, no loss)
            out("left", sorted(os.listdir("c.h5/@objects")))
            f["c"] = f["keep"]; out("c", f["c"][...])
        # a stub whose object is missing
        kid = struct.unpack("<Q", open("c.h5/c/@hardlink", "rb").read()[:8])[0]
        shutil.rmtree(f"c.h5/@objects/{kid:016x}")
        with check_connector(h5py.File("c.h5", "r")) as f:
            try:
                f["keep"][...]
                out("missing", "read")
            except Exception as e:
                out("missing", str(e))
    """, tmp_path)
    assert got["store"] == 1 and got["keys"] == ["a", "b", "keep"] and got["a"] == [0, 1, 2, 3]
    assert got["b"] == [0, 1, 2, 3] and got["rc"] == 3 and got["visit"] == ["a", "keep"]
    assert got["c"] == [0, 1] and "missing from the object store" in got["missing"], got
    assert got["sid"] in got["left"]


def test_copying_a_group_with_hard_links_copies_each_object_once_like_native(tmp_path: Path) -> None:
    """H5Ocopy of a group holding two names of one object copies the object once and links the copy twice
    (as native), within a container and into another one."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f, check_connector(h5py.File("o.h5", "w")) as o:
            f["g/a"] = np.arange(3)
            f["g/b"] = f["g/a"]; f["g/s/c"] = f["g/a"]
            f.copy("g", "g2"); f.copy("g", o, "x")
            for h, n in ((f, "g2"), (o, "x")):
                out(n, [sorted(h[n].keys()), h[n + "/a"].id == h[n + "/b"].id, h[n + "/a"].id == h[n + "/s/c"].id,
                        h5py.h5o.get_info(h[n + "/a"].id).rc])
            out("not_the_original", f["g2/a"].id != f["g/a"].id)
            f["g2/b"][0] = 9
            out("copy_written", f["g2/s/c"][...]); out("original", f["g/a"][...])
            f.copy("g/a", "single")                             # the object itself: one new object, one name
            out("single", [f["single"][...].tolist(), h5py.h5o.get_info(f["single"].id).rc])
    """, tmp_path)
    assert got["g2"] == [["a", "b", "s"], True, True, 3] and got["copy_written"] == [9, 1, 2]
    assert got["original"] == [0, 1, 2] and got["single"] == [[0, 1, 2], 1]


def test_copying_a_group_linked_into_itself_refuses_clearly(tmp_path: Path) -> None:
    """Native H5Ocopy links the copy of a group into itself where the original is; h5flow_log refuses that copy
    with a message naming the link (never a second, separate copy of the group), and leaves nothing."""
    got = _run_log("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["g/a"] = np.arange(3)
            f["g/self"] = f["g"]
            try:
                f.copy("g", "g2")
                out("copy", "done")
            except Exception as e:
                out("copy", str(e))
            out("keys", sorted(f.keys())); out("store", len(os.listdir("c.h5/@objects")))
            out("tmp", [n for n in os.listdir("c.h5") if n.startswith("@tmp")])
    """, tmp_path)
    assert "reached again inside itself" in got["copy"] and "/g/self" in got["copy"], got
    assert got["keys"] == ["g"] and got["store"] == 1 and got["tmp"] == []


def test_pack_and_unpack_keep_hard_links(tmp_path: Path) -> None:
    """`h5flow pack` (container -> native file) and `unpack` (native -> container) keep two names of one
    object as two hard links of one object."""
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    _run_log("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(5); f["g/b"] = f["a"]; f["g/self"] = f["g"]
    """, tmp_path)
    for args in (["pack", str(tmp_path / "c.h5"), str(tmp_path / "p.h5")],
                 ["unpack", str(tmp_path / "p.h5"), str(tmp_path / "u.h5")]):
        p = subprocess.run([sys.executable, "-m", "h5flow.cli", *args], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    check = """
        with h5py.File(NAME, "r") as f:
            out("same", f["a"].id == f["g/b"].id); out("self", f["g"].id == f["g/self"].id)
            out("rc", h5py.h5o.get_info(f["a"].id).rc); out("val", f["g/b"][...])
    """
    native = _run(check.replace("NAME", repr(str(tmp_path / "p.h5"))), tmp_path / "n", connector=False)
    back = _run(check.replace("NAME", repr(str(tmp_path / "u.h5"))), tmp_path / "u", connector=True)
    assert native == back == {"same": True, "self": True, "rc": 2, "val": [0, 1, 2, 3, 4]}


def test_incr_decr_refcount_like_native(tmp_path: Path) -> None:
    """H5Oincr_refcount/H5Odecr_refcount change the count H5Oget_info reports; an object whose count is above
    its names outlives their deletion and is still reached by a reference, as in native HDF5."""
    got = same_as_native("""
        import ctypes
        lib = _hdf5lib.lib()
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["d"] = np.arange(3); g = f.create_group("g")
            d = f["d"]
            out("incr", lib.H5Oincr_refcount(ctypes.c_int64(d.id.id)))
            out("rc", h5py.h5o.get_info(d.id).rc)
            out("decr", lib.H5Odecr_refcount(ctypes.c_int64(d.id.id)))
            out("rc2", h5py.h5o.get_info(d.id).rc)
            out("gincr", lib.H5Oincr_refcount(ctypes.c_int64(g.id.id))); out("grc", h5py.h5o.get_info(g.id).rc)
            r = d.ref
            lib.H5Oincr_refcount(ctypes.c_int64(d.id.id))
            del d
            del f["d"]                                          # its only name; the count keeps it
            out("keys", sorted(f.keys()))
            out("by_ref", f[r][...]); out("rc3", h5py.h5o.get_info(f[r].id).rc)
            out("g_value", sorted(f["g"].keys()))
    """, tmp_path)
    assert got["incr"] >= 0 and got["rc"] == 2 and got["rc2"] == 1 and got["by_ref"] == [0, 1, 2]


def test_copy_committed_datatype_like_native(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f, check_connector(h5py.File("o.h5", "w")) as o:
            f["t"] = np.dtype([("a", "i4"), ("b", "f8")])
            f["t"].attrs["note"] = "x"
            f.copy("t", "t2"); f.copy("t", o, "t3")
            for h, n in ((f, "t2"), (o, "t3")):
                out(n, [str(h[n].dtype), type(h[n]).__name__, h[n].attrs["note"]])
            out("differs", f["t"].id != f["t2"].id)
            f.create_dataset("d", (2,), dtype=f["t2"])
            out("uses", f["d"].dtype == f["t2"].dtype)
    """, tmp_path)
    assert got["t2"][1:] == ["Datatype", "x"]


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_hard_links_agree_on_every_rank(comm, mpi_tmp_path: Path) -> None:
    """A second name created collectively while every rank holds the dataset open (with buffered writes): the
    open handles follow the object into the store on every rank, each rank's writes reach it, and deleting
    the names agrees on every rank."""
    import h5py
    import numpy as np

    from h5flow.testing.pytest_mpi import mpi_assert

    path = mpi_tmp_path / "hard.h5"
    r = comm.rank
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        d = f.create_dataset("g/x", shape=(comm.size, 2), dtype="i8", fillvalue=-1)
        d[r] = r + 1                                  # buffered on each rank
        f["h"] = f["g"]                               # g (holding the open x) moves into the store
        d[r, 1] = 50 + r                              # written through the handle opened before
        f["y"] = f["h/x"]                             # x itself gets a second name
        f.flush()
        got = f["y"][...]
        rc = (h5py.h5o.get_info(f["g"].id).rc, h5py.h5o.get_info(f["y"].id).rc)
        del f["g"]
        keys = sorted(f.keys())
        via = f["h/x"][...]
    want = np.array([[k + 1, 50 + k] for k in range(comm.size)])
    mpi_assert(comm, np.array_equal(got, want), f"rank {r} read {got.tolist()}")
    mpi_assert(comm, rc == (2, 2), f"rank {r} counts {rc}")
    mpi_assert(comm, keys == ["h", "y"] and np.array_equal(via, want), f"rank {r} keys {keys} via {via.tolist()}")


def test_anonymous_committed_datatype_like_native(tmp_path: Path) -> None:
    """H5Tcommit_anon + H5Olink names an anonymous committed datatype (one never linked goes away at close,
    as native)."""
    got = same_as_native("""
        import ctypes
        lib = _hdf5lib.lib()
        for fn in (lib.H5Tcommit_anon, lib.H5Olink):
            fn.restype = ctypes.c_int
        with check_connector(h5py.File("c.h5", "w")) as f:
            t = h5py.h5t.py_create(np.dtype("<i2")).copy()
            out("commit_anon", lib.H5Tcommit_anon(ctypes.c_int64(f.id.id), ctypes.c_int64(t.id), 0, 0))
            out("committed", t.committed())
            out("olink", lib.H5Olink(ctypes.c_int64(t.id), ctypes.c_int64(f.id.id), b"named", 0, 0))
            out("named", [type(f["named"]).__name__, str(f["named"].dtype)])
            u = h5py.h5t.py_create(np.dtype("<f4")).copy()
            lib.H5Tcommit_anon(ctypes.c_int64(f.id.id), ctypes.c_int64(u.id), 0, 0)
            u.close()                                           # never linked: gone
        out("_leftovers", [n for n in os.listdir("c.h5") if n.startswith("@anon")] if os.path.isdir("c.h5") else [])
    """, tmp_path)
    assert got["commit_anon"] >= 0 and got["olink"] >= 0 and got["named"] == ["Datatype", "int16"]
    assert got["_leftovers"] == []


def test_visit_from_an_attribute_like_native(tmp_path: Path) -> None:
    """H5Ovisit started from an attribute visits from the object holding it (native)."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.create_group("g/h"); f["g/d"] = 1
            f["g"].attrs["a"] = 1
            a = h5py.h5a.open(f["g"].id, b"a")
            seen = []
            h5py.h5o.visit(a, lambda n: seen.append(n.decode()))
            out("visit_from_attr", seen)
    """, tmp_path)
    assert got["visit_from_attr"] == ["d", "h"]


def test_attribute_creation_order_on_a_committed_datatype_like_native(tmp_path: Path) -> None:
    """A committed datatype's creation list asking for attribute creation order is honoured (H5Aiterate by
    creation order on it), named or anonymous."""
    got = same_as_native("""
        import ctypes
        lib = _hdf5lib.lib()
        lib.H5Pcreate.restype = ctypes.c_int64
        with check_connector(h5py.File("c.h5", "w")) as f:
            tcpl = lib.H5Pcreate(ctypes.c_int64.in_dll(lib, "H5P_CLS_DATATYPE_CREATE_ID_g"))
            out("set", lib.H5Pset_attr_creation_order(ctypes.c_int64(tcpl), 1))
            t = h5py.h5t.py_create(np.dtype("<i8")).copy()
            out("commit", lib.H5Tcommit2(ctypes.c_int64(f.id.id), b"t", ctypes.c_int64(t.id), ctypes.c_int64(0),
                                         ctypes.c_int64(tcpl), ctypes.c_int64(0)))
            u = h5py.h5t.py_create(np.dtype("<i4")).copy()
            lib.H5Tcommit_anon(ctypes.c_int64(f.id.id), ctypes.c_int64(u.id), ctypes.c_int64(tcpl), ctypes.c_int64(0))
            lib.H5Olink(ctypes.c_int64(u.id), ctypes.c_int64(f.id.id), b"u", 0, 0)
            for n in ("t", "u"):
                for a in ("zz", "aa", "mm"):
                    f[n].attrs[a] = 1
                names = []
                h5py.h5a.iterate(f[n].id, lambda name, *rest: names.append(name.decode()),
                                 index_type=h5py.h5.INDEX_CRT_ORDER)
                out(n, names)
    """, tmp_path)
    assert got["t"] == got["u"] == ["zz", "aa", "mm"]


def test_h5flow_ls_lists_each_object_once_and_its_other_names(tmp_path: Path) -> None:
    """`h5flow ls` reads the container's directories without HDF5: format 4, each object under its first
    name in name order, further names as hard links to it, a group linked into itself without looping."""
    from h5flow.connectors import h5flow_log

    _run_log("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(4); f["g/b"] = f["a"]; f["g/self"] = f["g"]; f["g/r"] = f["/"]
    """, tmp_path)
    got = [(e.path, e.kind, e.target) for e in h5flow_log.scan(tmp_path / "c.h5")]
    assert got == [("/", "group", None), ("/a", "dataset", None), ("/g", "group", None),
                   ("/g/b", "hardlink", "/a"), ("/g/r", "hardlink", "/"), ("/g/self", "hardlink", "/g")], got


def test_hdf5_tools_see_hard_links_as_native(tmp_path: Path) -> None:
    """h5ls/h5dump show a second name as a hard link ("same as", HARDLINK), and h5repack keeps it both ways
    (container -> native -> container), h5diff finding no difference."""
    from test_vol_h5flow_log_links import _run_tool

    _run_log("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(5); f["g/b"] = f["a"]; f["g/self"] = f["g"]; f["g/c"] = np.arange(2)
    """, tmp_path)
    c, n, back = tmp_path / "c.h5", tmp_path / "n.h5", tmp_path / "back.h5"
    ls = _run_tool(["h5ls", "-r", str(c)]).stdout
    assert "/g/b                     Dataset, same as /a" in ls and "/g/self                  Group, same as /g" in ls
    assert 'HARDLINK "/a"' in _run_tool(["h5dump", "-H", str(c)]).stdout
    _run_tool(["h5repack", "--dst-vol-value=0", "--dst-vol-name=native", str(c), str(n)])
    _run_tool(["h5repack", "--src-vol-value=0", "--src-vol-name=native", str(n), str(back)])
    _run_tool(["h5diff", "--vol-value-2=0", "--vol-name-2=native", str(c), str(n)])
    _run_tool(["h5diff", str(c), str(back)])
    check = """
        with h5py.File(NAME, "r") as f:
            out("same", [f["a"].id == f["g/b"].id, f["g"].id == f["g/self"].id, h5py.h5o.get_info(f["a"].id).rc])
    """
    assert _run(check.replace("NAME", repr(str(n))), tmp_path / "x", connector=False)["same"] == [True, True, 2]
    assert _run(check.replace("NAME", repr(str(back))), tmp_path / "y", connector=True)["same"] == [True, True, 2]
