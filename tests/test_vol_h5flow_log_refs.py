"""h5flow_log: object references (h5py `.ref`, `f[ref]`, `h5py.ref_dtype` datasets and attributes).

A reference holds the referenced object's persistent id (docs/FORMAT.md "Object references"): it must
resolve to the same object after close/reopen, after the object (or a group above it) is renamed, and in a
copy of the container directory; it must never resolve to another object (a deleted object's reference
fails). Each scenario runs natively and through the connector (`same_as_native`), needs HDF5 patch 0003
(third_party/hdf5/patches) for the 1.10 H5Rcreate/H5Rdereference2 h5py calls.
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


def test_region_and_new_style_references_are_refused_clearly(tmp_path: Path) -> None:
    p = _run_log("""
        with h5py.File("c.h5", "w") as f:
            d = f.create_dataset("d", data=np.arange(10))
            for what, fn in [("regionref", lambda: d.regionref[1:3]),
                             ("regionref_dtype", lambda: f.create_dataset("r", (2,), dtype=h5py.regionref_dtype))]:
                try:
                    fn(); print("NOERROR", what)
                except Exception as e:
                    print("ERROR", what, e)
            f.create_dataset("after", data=[1])             # errors stay specific, the file stays usable
            try:
                f["nonexistent"]
            except KeyError as e:
                print("KEYERROR", e)
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NOERROR" not in p.stdout, p.stdout
    assert "region" in p.stdout, p.stdout
    assert "Failed to extract" not in p.stdout, p.stdout


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
    the same ids for its own objects — a copied id would open a stranger. Within one container they stay."""
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
            out("mine", b[b["mine"][()]].name)
        with h5py.File("b.h5", "r") as b:
            out("reopen", [bool(r) for r in b["refs"][...]] + [bool(b["refs"].attrs["aref"])])
    """, tmp_path)
    assert got["b"] == [False, False] and got["battr"] is False and got["a2"] == ["/d", None]


def test_copy_flags_not_supported_are_refused_not_ignored(tmp_path: Path) -> None:
    """expand_refs (H5O_COPY_EXPAND_REFERENCE_FLAG) and expand_external meeting an external link are refused
    with a message: ignoring them would give a copy whose references/links still name the originals."""
    p = _run_log("""
        with h5py.File("o.h5", "w") as o:
            o["x"] = [1]
        with h5py.File("c.h5", "w") as f:
            f["bar"] = [4, 5, 6]
            f["foo"] = [1, 2, 3]
            f["foo"].attrs["bar"] = f["bar"].ref
            f["g/ext"] = h5py.ExternalLink("o.h5", "/x")
            f.create_group("h")["d"] = [7]
            for args in (("foo", "baz"), ("g", "g2")):
                try:
                    f.copy(*args, expand_refs=args[0] == "foo", expand_external=args[0] == "g")
                    print("COPIED", args[1])
                except Exception as e:
                    print("ERROR", e)
            f.copy("h", "h2", expand_external=True)                       # no external link met: fine
            print("LEFT", sorted(f.keys()), f["h2/d"][0])
    """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "COPIED" not in p.stdout, p.stdout
    assert "H5O_COPY_EXPAND_REFERENCE_FLAG" in p.stdout and "H5O_COPY_EXPAND_EXT_LINK_FLAG" in p.stdout, p.stdout
    assert "LEFT ['bar', 'foo', 'g', 'h', 'h2'] 7" in p.stdout, p.stdout
