"""h5flow_log: object references (h5py `.ref`, `f[ref]`, `h5py.ref_dtype` datasets and attributes).

A reference holds the referenced object's persistent id (docs/FORMAT.md "Object references"): it must
resolve to the same object after close/reopen, after the object (or a group above it) is renamed, and in a
copy of the container directory; it must never resolve to another object (a deleted object's reference
fails). Each scenario runs natively and through the connector (`same_as_native`), needs HDF5 patches 0003
and 0004 (third_party/hdf5/patches) for the 1.10 H5Rcreate/H5Rdereference2/H5Rget_region h5py calls.
Region references (h5py `regionref`) keep their selection in the connector's blob store; the 1.12 API
(`H5R_ref_t`, what h5dump and h5diff use) reads and writes stored object references too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_object_refs_roundtrip_reopen_and_move(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            g = f.create_group("g/h"); d = f.create_dataset("g/d", data=np.arange(4))
            out("null", bool(h5py.Reference()))
            r_root, r_g, r_d = f.ref, g.ref, d.ref
            out("root", f[r_root].name); out("g", f[r_g].name); out("d", f[r_d][...])
            out("type", [str(h5py.h5r.get_obj_type(r, f.id)) for r in (r_g, r_d)])
            ds = f.create_dataset("refs", (3,), dtype=h5py.ref_dtype)
            ds[0] = r_g; ds[1] = r_d
            f.attrs.create("aref", r_d, dtype=h5py.ref_dtype)
            f.attrs["arefs"] = np.array([r_g, r_d], dtype=h5py.ref_dtype)
            out("same", f[r_d] == d)
        with h5py.File("c.h5", "r+") as f:                 # after close/reopen
            refs = f["refs"][...]
            out("reopen", [f[refs[0]].name, f[refs[1]].name, bool(refs[2])])
            out("attr", f[f.attrs["aref"]][...]); out("attrs", [f[r].name for r in f.attrs["arefs"]])
            f.move("g", "moved")                             # the referenced objects move
            out("moved", [f[r].name for r in f["refs"][:2]])
            out("moved_data", f[f["refs"][1]][...])
        with h5py.File("c.h5", "r") as f:                  # read-only: stored references still resolve
            out("ro", [f[r].name for r in f["refs"][:2]])
    """, tmp_path)
    assert got["moved"] == ["/moved/h", "/moved/d"]
    assert got["reopen"] == ["/g/h", "/g/d", False]


def _script(body: str) -> str:
    return "import os, sys, numpy as np, h5py\nos.chdir(sys.argv[1])\n" + textwrap.dedent(body)


def _run_log(body: str, workdir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(LOG_ENV)
    return subprocess.run([sys.executable, "-c", _script(body), str(workdir)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_reference_to_deleted_object_fails_through_connector(tmp_path: Path) -> None:
    p = _run_log("""
        with h5py.File("c.h5", "w") as f:
            f.create_dataset("a", data=[1, 2])
            f["refs"] = np.array([f["a"].ref], dtype=h5py.ref_dtype)
            del f["a"]
            for i in range(20):
                f.create_dataset(f"n{i}", data=[i])
            try:
                print("OPENED", f[f["refs"][0]].name)
            except Exception as e:
                print("ERROR", e)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ERROR" in p.stdout and "OPENED" not in p.stdout, p.stdout
    assert "does not exist" in p.stdout + p.stderr


def test_references_survive_a_copy_of_the_container(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    p = _run_log("""
        with h5py.File("c.h5", "w") as f:
            for i in range(30):
                f.create_dataset(f"d{i}", data=[i])
            f["refs"] = np.array([f[f"d{i}"].ref for i in range(30)], dtype=h5py.ref_dtype)
    """, a)
    assert p.returncode == 0, p.stdout + p.stderr
    b = tmp_path / "b"
    b.mkdir()
    shutil.copytree(a / "c.h5", b / "c.h5")  # new inodes everywhere
    shutil.rmtree(a / "c.h5")
    p = _run_log("""
        with h5py.File("c.h5", "r") as f:
            got = [int(f[r][0]) for r in f["refs"][...]]
            assert got == list(range(30)), got
            print("OK")
    """, b)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr


def test_region_references_roundtrip_like_native(tmp_path: Path) -> None:
    """1.10 region references (h5py `regionref`, `h5py.regionref_dtype`): the selection lives in the
    connector's blob store (HDF5 patch 0004); reading one gives the referenced dataset and selection, after
    reopening too, and onto the dataset's current extent."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            d = f.create_dataset("g/d", data=np.arange(20).reshape(4, 5), maxshape=(None, 5))
            r = d.regionref[1:3, 2:4]
            out("bool", bool(r)); out("name", f[r].name); out("sel", d[r])
            out("shape", list(d.regionref.shape(r))); out("selection", list(d.regionref.selection(r)))
            out("type", str(h5py.h5r.get_obj_type(r, f.id)))
            rs = f.create_dataset("rs", (4,), dtype=h5py.regionref_dtype)
            rs[0] = r; rs[1] = d.regionref[0, ::2]; rs[3] = d.regionref[:0]
            f.attrs.create("ar", d.regionref[3], dtype=h5py.regionref_dtype)
            d.attrs["self"] = np.array([d.regionref[2, 1:4], d.regionref[0]], dtype=h5py.regionref_dtype)
        with h5py.File("c.h5", "r+") as f:
            d, rs = f["g/d"], f["rs"][...]
            out("reopen", [d[x].tolist() for x in rs[:2]]); out("null", bool(rs[2]))
            out("empty", d[rs[3]].tolist())
            out("attr", d[f.attrs["ar"]]); out("attrs", [d[x].tolist() for x in d.attrs["self"]])
            out("getname", h5py.h5r.get_name(rs[0], f.id).decode())
            d.resize((6, 5)); d[4:] = 7
            out("resized", d[rs[0]])
            f.move("g", "moved")
            out("moved", [f[rs[0]].name, d[rs[1]].tolist()])
    """, tmp_path)
    assert got["sel"] == [[7, 8], [12, 13]] and got["reopen"][1] == [[0, 2, 4]]
    assert got["attr"] == [[15, 16, 17, 18, 19]]


def test_region_references_into_another_container_and_blob_damage(tmp_path: Path) -> None:
    """A region reference names a blob of its own container: copied into another container it becomes a
    null reference (as object references do), never a reference to another container's blob; a damaged
    blob is an error, never another selection."""
    p = _run_log("""
        with h5py.File("a.h5", "w") as f, h5py.File("b.h5", "w") as g:
            d = f.create_dataset("d", data=np.arange(10))
            f.create_dataset("rs", data=np.array([d.regionref[2:5]], dtype=h5py.regionref_dtype))
            gd = g.create_dataset("d", data=np.arange(10) * 10)
            g.create_dataset("mine", data=np.array([gd.regionref[7:9]], dtype=h5py.regionref_dtype))
            f.copy(f["rs"], g, "rs")
            print("COPIED", bool(g["rs"][0]), "OWN", g["d"][g["mine"][0]].tolist(), flush=True)
        import glob
        (blob,) = glob.glob("a.h5/@blobs/*")
        with open(blob, "r+b") as fh:
            fh.seek(-5, 2); b = fh.read(1); fh.seek(-5, 2); fh.write(bytes([b[0] ^ 1]))
        with h5py.File("a.h5", "r") as f:
            try:
                print("READ", f["d"][f["rs"][0]].tolist())
            except Exception as e:
                print("ERROR", e)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COPIED False OWN [70, 80]" in p.stdout, p.stdout + p.stderr
    assert "ERROR" in p.stdout and "READ" not in p.stdout, p.stdout + p.stderr
    assert "is damaged" in p.stdout, p.stdout


def test_an_id_held_twice_is_refused_not_guessed(tmp_path: Path) -> None:
    p = _run_log("""
        with h5py.File("c.h5", "w") as f:
            f.create_dataset("a", data=[1]); f.create_dataset("b", data=[2])
            f["refs"] = np.array([f["a"].ref], dtype=h5py.ref_dtype)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.copy(tmp_path / "c.h5" / "a" / "@id", tmp_path / "c.h5" / "b" / "@id")  # a hand-made duplicate
    p = _run_log("""
        with h5py.File("c.h5", "r") as f:
            try:
                print("OPENED", f[f["refs"][0]].name)
            except Exception as e:
                print("ERROR", e)
    """, tmp_path)
    assert "ERROR" in p.stdout and "OPENED" not in p.stdout, p.stdout + p.stderr
    assert "held by 2 objects" in p.stdout + p.stderr


def test_object_copies_are_other_objects_for_references(tmp_path: Path) -> None:
    """H5Ocopy makes another object: a reference made to a copy opens the copy, and a reference made
    before the copy still opens the original, within one container and from one container into another
    (an object id copied along would make both ambiguous, or open a stranger in the destination)."""
    got = same_as_native("""
        with check_connector(h5py.File("a.h5", "w")) as a, check_connector(h5py.File("b.h5", "w")) as b:
            d = a.create_dataset("g/d", data=np.arange(4))
            r_orig = d.ref                                   # mints the original's id
            a.copy("g", "g2")                                 # same container
            b.create_dataset("x", data=np.full(3, 7))
            r_x = b["x"].ref                                  # the destination's own object
            a.copy(a["g"], b, "gc")                           # into another container
            r_copy, r_bcopy = a["g2/d"].ref, b["gc/d"].ref
            out("orig", a[r_orig][...]); out("orig_name", a[r_orig].name)
            out("copy_name", a[r_copy].name); out("bcopy_name", b[r_bcopy].name)
            out("x", b[r_x][...])
            a["g2/d"][0] = 100                                # the copy is not the original
            out("after", [a[r_orig][0], a[r_copy][0]])
        with h5py.File("a.h5", "r") as a, h5py.File("b.h5", "r") as b:
            out("reopen", [a[r_orig].name, a[r_copy].name, b[r_bcopy].name, b[r_x].name])
    """, tmp_path)
    assert got["copy_name"] == "/g2/d" and got["bcopy_name"] == "/gc/d"
    assert got["after"] == [0, 100]


def test_references_copied_into_another_container_are_null_like_native(tmp_path: Path) -> None:
    """A reference dataset or attribute copied into another container (no H5O_COPY_EXPAND_REFERENCE_FLAG)
    holds NULL references there, as native HDF5 does: the ids mean nothing in the destination, which mints
    the same ids for its own objects — a copied id would open a stranger. Within one container a dataset's
    stay, an attribute's become NULL (native's copy resets a reference attribute whatever the file)."""
    got = same_as_native("""
        with check_connector(h5py.File("a.h5", "w")) as a, check_connector(h5py.File("b.h5", "w")) as b:
            d = a.create_dataset("d", data=np.arange(3))
            rs = a.create_dataset("refs", (2,), dtype=h5py.ref_dtype); rs[0] = d.ref
            rs.attrs.create("aref", d.ref, dtype=h5py.ref_dtype)
            b.create_dataset("stranger", data=np.full(3, 9)); b["mine"] = b["stranger"].ref
            a.copy(a["refs"], b, "refs")
            a.copy(a["refs"], a, "refs2")
            out("b", [bool(r) for r in b["refs"][...]]); out("battr", bool(b["refs"].attrs["aref"]))
            out("a2", [a[r].name if r else None for r in a["refs2"][...]])
            out("a2attr", bool(a["refs2"].attrs["aref"]))             # an attribute's: NULL, as native
            out("mine", b[b["mine"][()]].name)
        with h5py.File("b.h5", "r") as b:
            out("reopen", [bool(r) for r in b["refs"][...]] + [bool(b["refs"].attrs["aref"])])
    """, tmp_path)
    assert got["b"] == [False, False] and got["battr"] is False and got["a2"] == ["/d", None]
    assert got["a2attr"] is False


def test_copy_expanding_references_like_native(tmp_path: Path) -> None:
    """H5O_COPY_EXPAND_REFERENCE_FLAG (h5py expand_refs=True): the objects the copied references name are
    copied too, once, and the copies' references name those copies: an object inside the copied tree is its
    copy there, any other is copied without a name (and what it references in turn). Attributes' references
    are expanded within a container and into another one, datasets' into another one only (native keeps a
    dataset's references within a file); read back in a fresh process, as native HDF5."""
    got = same_as_native("""
        import subprocess
        DEREF = ["def deref(f, ref):",
                 "    if not ref:",
                 "        return None",
                 "    o = f[ref]",   # an object without a name: native names it /~obj_pointed_by_<address>
                 "    n = None if o.name is None or o.name.startswith('/~obj_pointed_by_') else o.name",
                 "    return [n, o[...].tolist() if isinstance(o, h5py.Dataset) else sorted(o.keys())]"]
        exec("\\n".join(DEREF))
        with check_connector(h5py.File("a.h5", "w")) as a, check_connector(h5py.File("b.h5", "w")) as b:
            a["other"] = [7, 7]
            a["bar"] = [4, 5, 6]; a["bar"].attrs["next"] = a["other"].ref    # a chain outside the tree
            a["foo"] = [1, 2, 3]; a["foo"].attrs["bar"] = a["bar"].ref
            g = a.create_group("g"); g["d2"] = [9]
            g["d2"].attrs["up"] = g.ref                                      # the tree's own top
            rs = g.create_dataset("refs", (4,), dtype=h5py.ref_dtype)
            rs[0] = g["d2"].ref; rs[1] = a["bar"].ref; rs[3] = a["foo"].ref   # rs[2]: NULL
            a.copy("foo", "baz", expand_refs=True)
            out("baz", deref(a, a["baz"].attrs["bar"]))
            out("baz_is_bar", a[a["baz"].attrs["bar"]] == a["bar"])
            out("baz_chain", deref(a, a[a["baz"].attrs["bar"]].attrs["next"]))
            a.copy("g", "g2", expand_refs=True)
            out("g2", [deref(a, r) for r in a["g2/refs"][...]])
            out("g2_up", deref(a, a["g2/d2"].attrs["up"]))
            out("g2_one_bar", a[a["g2/refs"][1]] == a[a[a["g2/refs"][3]].attrs["bar"]])
            a.copy("g", b, "g", expand_refs=True)
            a.copy("/", b, "all", expand_refs=True)
            out("b_g", [deref(b, r) for r in b["g/refs"][...]])
            out("b_all", [deref(b, r) for r in b["all/g/refs"][...]])
            out("b_all_same", [b[b["all/g/refs"][1]] == b["all/bar"], b[b["all/foo"].attrs["bar"]] == b["all/bar"]])
            out("orig", [deref(a, r) for r in a["g/refs"][...]])
        child = DEREF + [
            "with h5py.File('a.h5', 'r') as a, h5py.File('b.h5', 'r') as b:",
            "    print(json.dumps([[deref(a, r) for r in a['g2/refs'][...]], deref(a, a['baz'].attrs['bar']),",
            "                      [deref(b, r) for r in b['g/refs'][...]], deref(b, b['g/d2'].attrs['up']),",
            "                      deref(b, b[b['all/foo'].attrs['bar']].attrs['next'])]))"]
        p = subprocess.run([sys.executable, "-c", "import json, h5py\\n" + "\\n".join(child)],
                           capture_output=True, text=True, timeout=120)
        out("fresh", p.stdout.strip() or p.stderr[-2000:])
    """, tmp_path)
    assert got["baz"] == [None, [4, 5, 6]] and got["baz_is_bar"] is False
    assert got["baz_chain"] == [None, [7, 7]] and got["g2_up"][0] == "/g2"   # attributes: always expanded
    assert got["g2"] == got["orig"]                      # a dataset's references within a container: kept
    assert got["b_g"][0] == ["/g/d2", [9]] and got["b_g"][1] == [None, [4, 5, 6]]
    assert got["b_all"][1] == ["/all/bar", [4, 5, 6]] and got["b_all_same"] == [True, True]


def test_expand_external_is_refused_not_ignored(tmp_path: Path) -> None:
    """expand_external meeting an external link is refused with a message: ignoring it would give a copy
    whose links still name the originals."""
    p = _run_log("""
        with h5py.File("o.h5", "w") as o:
            o["x"] = [1]
        with h5py.File("c.h5", "w") as f:
            f["g/ext"] = h5py.ExternalLink("o.h5", "/x")
            f.create_group("h")["d"] = [7]
            try:
                f.copy("g", "g2", expand_external=True)
                print("COPIED g2")
            except Exception as e:
                print("ERROR", e)
            f.copy("h", "h2", expand_external=True)                       # no external link met: fine
            print("LEFT", sorted(f.keys()), f["h2/d"][0])
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COPIED" not in p.stdout, p.stdout
    assert "H5O_COPY_EXPAND_EXT_LINK_FLAG" in p.stdout, p.stdout
    assert "LEFT ['g', 'h', 'h2'] 7" in p.stdout, p.stdout


def test_object_references_read_and_written_as_h5r_ref_t_like_native(tmp_path: Path) -> None:
    """h5dump, h5diff and every program on the 1.12 reference API read references with the H5T_STD_REF
    memory type; a container's stored H5T_STD_REF_OBJ values convert to H5R_ref_t of the container (and
    back on write), as natively."""
    got = same_as_native("""
        import ctypes
        from h5flow import _hdf5lib
        lib, hid = _hdf5lib.lib(), _hdf5lib.hid_t
        std_ref = hid.in_dll(lib, "H5T_STD_REF_g").value
        lib.H5Dread.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
        lib.H5Aread.argtypes = [hid, hid, ctypes.c_void_p]
        lib.H5Awrite.argtypes = [hid, hid, ctypes.c_void_p]
        lib.H5Rget_obj_name.argtypes = [ctypes.c_void_p, hid, ctypes.c_char_p, ctypes.c_size_t]
        lib.H5Rget_obj_name.restype = ctypes.c_ssize_t
        lib.H5Rcreate_object.argtypes = [hid, ctypes.c_char_p, hid, ctypes.c_void_p]
        lib.H5Rdestroy.argtypes = [ctypes.c_void_p]

        def names(buf, n):
            res = []
            for i in range(n):
                ref = ctypes.byref(buf, 64 * i)
                if bytes(buf[64 * i:64 * (i + 1)]) == bytes(64):
                    res.append(None); continue
                name = ctypes.create_string_buffer(256)
                res.append(name.value.decode() if lib.H5Rget_obj_name(ref, 0, name, 256) > 0 else "ERROR")
                lib.H5Rdestroy(ref)
            return res

        with check_connector(h5py.File("c.h5", "w")) as f:
            f["a"] = np.arange(3); g = f.create_group("g")
            r = f.create_dataset("r", shape=(3,), dtype=h5py.ref_dtype); r[0] = f["a"].ref; r[1] = g.ref
            f["a"].attrs["ar"] = g.ref
            f.attrs["two"] = np.array([f["a"].ref, f.ref], dtype=h5py.ref_dtype)
        with h5py.File("c.h5", "r+") as f:
            # (every handle kept in a variable: a temporary's id is closed when it is collected)
            d, ar, two = f["r"], h5py.h5a.open(f["a"].id, b"ar"), h5py.h5a.open(f.id, b"two")
            buf = (ctypes.c_ubyte * (64 * 3))()
            out("dread", lib.H5Dread(d.id.id, std_ref, 0, 0, 0, buf)); out("dnames", names(buf, 3))
            out("aread", lib.H5Aread(ar.id, std_ref, buf)); out("anames", names(buf, 1))
            out("aread2", lib.H5Aread(two.id, std_ref, buf)); out("anames2", names(buf, 2))
            # writing H5R_ref_t values into the H5T_STD_REF_OBJ dataset and attribute
            buf = (ctypes.c_ubyte * (64 * 3))()
            for i, path in enumerate([b"g", b"a"]):
                lib.H5Rcreate_object(f.id.id, path, 0, ctypes.byref(buf, 64 * i))
            out("dwrite", lib.H5Dwrite(d.id.id, std_ref, 0, 0, 0, buf))
            out("awrite", lib.H5Awrite(ar.id, std_ref, ctypes.byref(buf, 64)))
            d.id.close(); ar.close(); two.close()
            for i in range(2):
                lib.H5Rdestroy(ctypes.byref(buf, 64 * i))
        with h5py.File("c.h5", "r") as f:
            # not compared: native HDF5 1.14.5 stores only the first of several H5R_ref_t written to an
            # H5T_STD_REF_OBJ dataset in one H5Dwrite (the others read back as null references)
            out("_written", [f[x].name if x else None for x in f["r"][...]])
            out("awritten", f[f["a"].attrs["ar"]].name)
    """, tmp_path)
    assert got["dnames"] == ["/a", "/g", None] and got["anames"] == ["/g"] and got["anames2"] == ["/a", "/"]
    assert got["_written"] == ["/g", "/a", None] and got["awritten"] == "/a"


def test_h5r_ref_t_of_another_file_is_refused_on_write(tmp_path: Path) -> None:
    """A reference into another file cannot be stored in a container's H5T_STD_REF_OBJ dataset (its token
    means nothing there): the write fails and the stored values stay."""
    p = _run_log("""
        import ctypes
        from h5flow import _hdf5lib
        lib, hid = _hdf5lib.lib(), _hdf5lib.hid_t
        std_ref = hid.in_dll(lib, "H5T_STD_REF_g").value
        lib.H5Rcreate_object.argtypes = [hid, ctypes.c_char_p, hid, ctypes.c_void_p]
        lib.H5Eprint2.argtypes = [hid, ctypes.c_void_p]
        with h5py.File("c.h5", "w") as f, h5py.File("o.h5", "w") as o:
            f["a"] = [1]; o["x"] = [2]
            r = f.create_dataset("r", data=np.array([f["a"].ref], dtype=h5py.ref_dtype))
            buf = (ctypes.c_ubyte * 64)()
            lib.H5Rcreate_object(o.id.id, b"x", 0, buf)
            print("WRITE", lib.H5Dwrite(r.id.id, std_ref, 0, 0, 0, buf), flush=True)
            lib.H5Eprint2(0, None)
            print("KEPT", f[r[0]].name)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "WRITE -1" in p.stdout and "KEPT /a" in p.stdout, p.stdout + p.stderr
    assert "another file" in p.stderr, p.stderr


MAKE_REFS = """
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    f["a"] = np.arange(3); g = f.create_group("g")
    r = f.create_dataset("r", shape=(3,), dtype=h5py.ref_dtype); r[0] = f["a"].ref; r[1] = g.ref
    f["a"].attrs["ar"] = g.ref
    f.attrs["refs"] = np.array([f["a"].ref, f.ref], dtype=h5py.ref_dtype)
    d = f["a"]
    f.create_dataset("rs", data=np.array([d.regionref[1:3], d.regionref[[0, 2]]], dtype=h5py.regionref_dtype))
    f.attrs.create("reg", d.regionref[1:], dtype=h5py.regionref_dtype)
"""


def test_h5dump_and_h5diff_see_object_references_as_native(tmp_path: Path) -> None:
    """h5dump reads references with the 1.12 API (H5T_STD_REF): it printed `DATA { }` with rc 0 for a
    container's object references; now its output is native's, file names aside, region references
    included."""
    from test_vol_h5flow_log_links import _run_tool

    native, cont = tmp_path / "n.h5", tmp_path / "c.h5"
    subprocess.run([sys.executable, "-c", MAKE_REFS, str(native)], env={k: v for k, v in os.environ.items()
                   if k != "HDF5_VOL_CONNECTOR"}, check=True, timeout=60)
    subprocess.run([sys.executable, "-c", MAKE_REFS, str(cont)], env=dict(os.environ, **LOG_ENV), check=True,
                   timeout=60)
    dn = _run_tool(["h5dump", str(native)], connector=False).stdout.replace(str(native), "F").replace("n.h5", "F")
    dc = _run_tool(["h5dump", str(cont)]).stdout.replace(str(cont), "F").replace("c.h5", "F")
    assert dc == dn
    assert 'DATASET "F/a"' in dc and 'GROUP "F/g"' in dc and "NULL" in dc
    assert "REGION_TYPE BLOCK  (1)-(2)" in dc and "REGION_TYPE BLOCK  (0)-(0), (2)-(2)" in dc
    diff = _run_tool(["h5diff", "-v", "--vol-value-2=0", "--vol-name-2=native", str(cont), str(native)])
    assert "0 differences found" in diff.stdout and "differences found" not in diff.stdout.replace("0 diff", "")


def test_region_references_read_and_written_as_h5r_ref_t(tmp_path: Path) -> None:
    """A stored 1.10 region reference reads as an H5R_ref_t region reference (what h5dump prints), and an
    H5R_ref_t region reference written to an H5T_STD_REF_DSETREG dataset reads back as that region. (Not
    compared with native: HDF5 1.14.5 itself writes such a conversion with a bad global-heap index, and
    reading it back fails with "bad heap index".)"""
    p = _run_log("""
        import ctypes
        from h5flow import _hdf5lib
        lib, hid = _hdf5lib.lib(), _hdf5lib.hid_t
        std_ref = hid.in_dll(lib, "H5T_STD_REF_g").value
        lib.H5Dread.argtypes = [hid, hid, hid, hid, hid, ctypes.c_void_p]
        lib.H5Rcreate_region.argtypes = [hid, ctypes.c_char_p, hid, hid, ctypes.c_void_p]
        lib.H5Ropen_region.argtypes = [ctypes.c_void_p, hid, hid]
        lib.H5Ropen_region.restype = hid
        lib.H5Rget_obj_name.argtypes = [ctypes.c_void_p, hid, ctypes.c_char_p, ctypes.c_size_t]
        lib.H5Rget_obj_name.restype = ctypes.c_ssize_t
        lib.H5Rdestroy.argtypes = [ctypes.c_void_p]
        lib.H5Sget_select_npoints.argtypes = [hid]
        lib.H5Sget_select_npoints.restype = ctypes.c_int64
        out = lambda k, v: print(k, v)
        with h5py.File("c.h5", "w") as f:
            f.create_dataset("g/d", data=np.arange(10))
            f.create_dataset("rs", (1,), dtype=h5py.regionref_dtype)
        with h5py.File("c.h5", "r+") as f:
            d, rs = f["g/d"], f["rs"]
            sp = h5py.h5s.create_simple((10,)); sp.select_hyperslab((3,), (4,))
            buf = (ctypes.c_ubyte * 64)()
            out("create", lib.H5Rcreate_region(f.id.id, b"g/d", sp.id, 0, buf))
            out("write", lib.H5Dwrite(rs.id.id, std_ref, 0, 0, 0, buf)); lib.H5Rdestroy(buf)
            out("read", d[rs[0]].tolist())
            back = (ctypes.c_ubyte * 64)()
            out("read_std", lib.H5Dread(rs.id.id, std_ref, 0, 0, 0, back))
            s2 = lib.H5Ropen_region(back, 0, 0)
            name = ctypes.create_string_buffer(64)
            out("region", [lib.H5Sget_select_npoints(s2), lib.H5Rget_obj_name(back, 0, name, 64),
                           name.value.decode()])
            h5py.h5s.SpaceID(s2).close(); lib.H5Rdestroy(back)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "write 0" in p.stdout and "read [3, 4, 5, 6]" in p.stdout and "read_std 0" in p.stdout, p.stdout
    assert "region [4, 4, '/g/d']" in p.stdout, p.stdout


def test_attribute_of_vlen_ref_obj_keeps_its_reference_type(tmp_path: Path) -> None:
    """An attribute of variable-length H5T_STD_REF_OBJ (a native file's DIMENSION_LIST, as h5repack writes
    it into a container) read back as variable-length H5T_STD_REF, which its stored values do not match
    ("damaged data"; h5py: "Unknown reference type"): the stored type's inner reference was compared with
    the memory types in its on-disk form. It reads back as written, as natively."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["x"] = np.arange(3.); f["y"] = np.arange(2.)
            dt = h5py.vlen_dtype(h5py.ref_dtype)
            a = np.empty(3, dtype=dt)
            a[0] = np.array([f["x"].ref], dtype=h5py.ref_dtype)
            a[1] = np.array([f["x"].ref, f["y"].ref], dtype=h5py.ref_dtype)
            a[2] = np.array([], dtype=h5py.ref_dtype)
            f.attrs.create("vr", a, dtype=dt)
        with h5py.File("c.h5", "r") as f:
            inner = h5py.h5a.open(f.id, b"vr").get_type().get_super()
            out("inner", [inner.get_size(), inner.equal(h5py.h5t.STD_REF_OBJ)])
            out("targets", [[f[r].name for r in row] for row in f.attrs["vr"]])
    """, tmp_path)
    assert got["inner"] == [8, True]
    assert got["targets"] == [["/x"], ["/x", "/y"], []]
