"""h5flow_log: every handle of one object in a process sees every write made through any other handle.

Native HDF5 keeps one object header per object whatever the number of open handles, so writing through one
handle and reading through another (h5py's `f["x"]` opens a new handle each time) returns what was written.
These tests hold the connector to that, and to the relatives of the same defect: attributes, extents after a
resize, renames of the object or of a group above it, deletion of an open object, a container opened twice.
Each scenario runs in a subprocess with the connector selected and is checked against native HDF5 running
the same script in this process's environment (no connector), so the expected values are native's own.
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
from h5flow.testing.pytest_mpi import mpi_assert

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

PRELUDE = """
import os, sys, json, numpy as np, h5py
from h5flow import _hdf5lib
os.chdir(sys.argv[1])
OUT = {}
def check_connector(f):
    want = "h5flow_log" if os.environ.get("HDF5_VOL_CONNECTOR") else "native"
    assert _hdf5lib.connector_name(f.id.id) == want, _hdf5lib.connector_name(f.id.id)
    return f
def out(key, value):
    OUT[key] = np.asarray(value).tolist() if isinstance(value, np.ndarray) else value
"""
EPILOGUE = """
print("RESULT " + json.dumps(OUT, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))
"""


def _run(body: str, workdir: Path, connector: bool, extra_env: dict[str, str] | None = None) -> dict:
    import json

    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    env.update(extra_env or {})
    if connector:
        env.update(LOG_ENV)
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body) + EPILOGUE, str(workdir)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{'h5flow_log' if connector else 'native'}:\n{proc.stdout}{proc.stderr}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def same_as_native(body: str, tmp_path: Path, extra_env: dict[str, str] | None = None) -> dict:
    """Run `body` natively and through h5flow_log (both with `extra_env` added to the environment); every
    value it records must agree."""
    native = _run(body, tmp_path / "native", connector=False, extra_env=extra_env)
    ours = _run(body, tmp_path / "log", connector=True, extra_env=extra_env)
    assert ours.keys() == native.keys()
    for key in native:
        if key.startswith("_"):  # recorded, not compared (where native HDF5 is knowingly different)
            continue
        assert ours[key] == native[key], f"{key}: h5flow_log gave {ours[key]!r}, native HDF5 {native[key]!r}"
    return ours


def test_second_dataset_handle_sees_writes(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            d = f.create_dataset("x", data=np.arange(1, 6.))
            out("fresh", f["x"][...])                   # a new handle while d (with buffered data) is open
            d[0] = 100
            out("after", f["x"][...]); out("first", d[...])
            e = f["x"]; e[1] = -1                       # and back: written through e, read through d
            out("back", d[...])
            f["s"] = np.array(["ab", "cdé"], dtype=h5py.string_dtype())
            out("strings", [v.decode() for v in f["s"][...]])
            s = f["s"]; f["s"][0] = "zz"
            out("strings2", [v.decode() for v in s[...]])
    """, tmp_path)
    assert got["after"] == [100.0, 2.0, 3.0, 4.0, 5.0]
    assert got["strings2"] == ["zz", "cdé"]


def test_second_attribute_handle_sees_writes(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.attrs["t"] = np.arange(3)
            a1 = h5py.h5a.open(f.id, b"t"); a2 = h5py.h5a.open(f.id, b"t")
            a1.write(np.array([7, 8, 9]))
            buf = np.zeros(3, dtype=a2.dtype); a2.read(buf)
            out("a2", buf); out("attrs", f.attrs["t"])
            f.attrs.modify("t", np.array([1, 1, 1]))
            a1.read(buf); out("a1", buf)
            a1.close(); a2.close()
    """, tmp_path)
    assert got["a2"] == [7, 8, 9] and got["a1"] == [1, 1, 1]


def test_extent_change_seen_by_every_handle(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            d1 = f.create_dataset("x", shape=(2, 3), maxshape=(None, None), chunks=(1, 3), dtype="i4",
                                  fillvalue=-1)
            d1[...] = 5
            d2 = f["x"]; out("before", d2[...])
            d1.resize((3, 4))
            out("shape2", list(d2.shape)); out("grown", d2[...])
            d2[2, 3] = 9
            d2.resize((1, 2))
            out("shape1", list(d1.shape)); out("shrunk", d1[...])
            d1.resize((2, 2)); out("regrown", d2[...])
    """, tmp_path)
    assert got["shape2"] == [3, 4] and got["regrown"] == [[5, 5], [-1, -1]]


def test_open_handles_follow_moves(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            x = f.create_dataset("x", data=np.arange(4))
            g = f.create_group("g"); y = g.create_dataset("y", data=np.zeros(3)); y.attrs["u"] = "K"
            f.move("x", "x2")
            out("xname", x.name); x[0] = 10                # writing through the moved handle works
            out("x2", f["x2"][...]); out("xread", x[...])
            f.move("g", "h/i") if "h" in f else (f.create_group("h"), f.move("g", "h/i"))
            # native HDF5 1.14 renames the moved object's handles but leaves stale names on handles of
            # objects under a moved group (H5Iget_name is best effort there); h5flow_log renames both
            out("_yname", y.name); out("gname", g.name)
            y[1] = 5; out("y", f["h/i/y"][...]); out("yattr", y.attrs["u"])
            g["new"] = np.ones(2)                          # a link created through the moved group handle
            out("new", f["h/i/new"][...])
            out("keys", sorted(f.keys()))
        with h5py.File("c.h5", "r") as f:
            out("reopened", [f["x2"][...].tolist(), f["h/i/y"][...].tolist()])
    """, tmp_path)
    assert got["xname"] == "/x2" and got["_yname"] == "/h/i/y" and got["y"] == [0.0, 5.0, 0.0]


def test_deleted_open_object_lives_on_and_name_reuse_is_separate(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            d = f.create_dataset("x", data=np.arange(3.))
            d[0] = 11                                      # buffered in the writer
            del f["x"]
            f["x"] = np.zeros(2)                           # the name is reused by another dataset
            d[1] = 7                                       # must not land in the new "x"
            out("old", d[...]); out("new", f["x"][...]); out("exists", "x" in f)
            g = f.create_group("g"); gd = g.create_dataset("k", data=[1, 2])
            del f["g"]
            out("gd", gd[...]); out("g_in", "g" in f)
        with h5py.File("c.h5", "r") as f:
            out("after", f["x"][...]); out("keys", sorted(f.keys()))
    """, tmp_path)
    assert got["old"] == [11.0, 7.0, 2.0] and got["new"] == [0.0, 0.0] and got["keys"] == ["x"]
    # the deleted objects are gone from the container once nothing holds them
    leftovers = _run("""
        with h5py.File("c.h5", "a") as f:                  # a writable open removes what no one holds
            pass
        out("gone", sorted(p for p in os.listdir("c.h5") if p.startswith("@gone.")))
    """, tmp_path / "log", connector=True)
    assert leftovers["gone"] == []


def test_attribute_rename_and_delete_with_open_handles(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.attrs["a"] = 1
            a = h5py.h5a.open(f.id, b"a")
            h5py.h5a.rename(f.id, b"a", b"b")
            out("name", a.name.decode()); out("b", int(f.attrs["b"]))
            a.write(np.array(5, dtype=a.dtype)); out("b2", int(f.attrs["b"]))
            a.close()
            f.attrs["c"] = 3
            c = h5py.h5a.open(f.id, b"c")
            del f.attrs["c"]
            f.attrs["c"] = 4                               # a new attribute with the old name
            # native HDF5 1.14 still reads 3 here while the deleted attribute's handle is open (its
            # attribute cache keeps the old object); the value last written is 4
            out("_c", int(f.attrs["c"]))
            c.close()
    """, tmp_path)
    assert got["_c"] == 4 and got["b2"] == 5


def test_container_opened_twice(tmp_path: Path) -> None:
    got = same_as_native("""
        f1 = check_connector(h5py.File("c.h5", "w"))
        d = f1.create_dataset("x", data=np.arange(4))
        d[0] = 9                                           # still in the writer's buffer
        f1.attrs["v"] = 1
        f2 = h5py.File("c.h5", "r")                        # the same container, a second file handle
        out("x", f2["x"][...]); out("v", int(f2.attrs["v"]))
        d[1] = 8; out("x2", f2["x"][...])
        try:
            h5py.File("c.h5", "w")                         # truncating an open file is refused
            out("truncate", "allowed")
        except OSError:
            out("truncate", "refused")
        out("still", f1["x"][...])
        f2.close(); f1.close()
        with h5py.File("c.h5", "r") as f:
            out("reopened", f["x"][...])
    """, tmp_path)
    assert got["x2"] == [9, 8, 2, 3] and got["truncate"] == "refused"


def test_two_writable_handles_keep_the_order_of_writes(tmp_path: Path) -> None:
    """A later write through the first handle wins over an earlier one through a second writable handle (a
    second open that started an epoch of its own put all of its writes after all of the first's), and the
    names and ids both handles mint (anonymous datasets, deleted open objects, references) stay apart."""
    got = same_as_native("""
        f = check_connector(h5py.File("c.h5", "w"))
        f2 = h5py.File("c.h5", "a")
        f.create_dataset("d", shape=(17,), dtype="u1", fillvalue=7)
        f2["d"][5:12:2] = np.array([1, 2, 3, 4], "u1")
        f["d"][7:9] = np.array([50, 60], "u1")            # later: wins at 7
        out("f", f["d"][...]); out("f2", f2["d"][...])
        f["a"] = np.arange(3); f2["b"] = np.arange(4)     # anonymous creation, then a link, through each
        held = [f["a"], f2["b"]]
        del f["a"]; del f2["b"]                           # deleted while open, through each
        held[0][0] = 5; held[1][0] = 6
        out("held", [h[...] for h in held])
        f["r"] = f["d"].ref; f2["s"] = f2["d"].ref        # object references minted through each
        out("refs", [f[f["r"][()]].name, f2[f2["s"][()]].name])
        f2.close()
        f["d"][5] = 99
        f2 = h5py.File("c.h5", "a")                       # opened again while the first is open
        f2["d"][5] = 98
        f.close(); f2.close()
        with h5py.File("c.h5", "r") as f:
            out("after", f["d"][...]); out("keys", sorted(f.keys()))
    """, tmp_path)
    assert got["f"][7] == 50 and got["after"][5] == 98


def test_file_close_closes_its_objects_like_native(tmp_path: Path) -> None:
    """h5py's File.close closes the objects H5Fget_obj_ids reports; the connector reports its own."""
    same_as_native("""
        f = check_connector(h5py.File("c.h5", "w"))
        f["x"] = np.arange(3); d = f["x"]; g = f.create_group("g")
        out("count", [h5py.h5f.get_obj_count(f.id, h5py.h5f.OBJ_DATASET), h5py.h5f.get_obj_count(f.id, h5py.h5f.OBJ_GROUP),
                      h5py.h5f.get_obj_count(f.id, h5py.h5f.OBJ_ALL)])
        f.close()
        out("valid", [bool(d.id.valid), bool(g.id.valid)])
    """, tmp_path)


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_moves_and_second_handles(comm, mpi_tmp_path: Path) -> None:
    """Every rank's open handles follow a collective move; a second handle on each rank sees that rank's
    buffered writes before any flush."""
    import h5py

    path = mpi_tmp_path / "moves.h5"
    r = comm.rank
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        d = f.create_dataset("g/x", shape=(comm.size, 4), dtype="i8", fillvalue=-1)
        d[r] = r + 1
        mine = f["g/x"][r]                         # a second handle, same rank, before any flush
        mpi_assert(comm, np.array_equal(mine, np.full(4, r + 1)), f"rank {r} second handle read {mine}")
        f.move("g", "h")
        mpi_assert(comm, d.name == "/h/x", f"rank {r}: handle name {d.name}")
        d[r, 0] = 100 + r                          # written through the moved handle
        f.flush()
        got = f["h/x"][...]
    want = np.array([[100 + k] + [k + 1] * 3 for k in range(comm.size)])
    mpi_assert(comm, np.array_equal(got, want), f"rank {r} read {got.tolist()}")


def test_fill_values_match_native(tmp_path: Path) -> None:
    """Unwritten elements read as the dataset's fill value, variable-length strings included; a fill value
    that does not convert to the datatype is refused at creation, as native HDF5 does."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            for name, dt, fv in (("b", h5py.string_dtype("ascii"), b"bar"),
                                 ("u", h5py.string_dtype("utf-8"), "bár".encode())):
                d = f.create_dataset(name, (4,), dtype=dt, fillvalue=fv, maxshape=(None,), chunks=(2,))
                d[1] = b"x"
                out(name, [v.decode() for v in d[...]])
                d.resize((1,)); d.resize((3,))
                out(name + "_regrown", [v.decode() for v in d[...]])
            out("plain", [v for v in f.create_dataset("p", (2,), dtype=h5py.string_dtype())[...]])
            try:
                f.create_dataset("bogus", (10,), dtype=[("a", "i4"), ("b", "f4")], fillvalue=42)
                out("bogus", "created")
            except (ValueError, TypeError, OSError):
                out("bogus", "refused")
            out("keys", sorted(f.keys()))
            d = f.create_dataset("n", (4,), "f4", fillvalue=4.0, fill_time="never", chunks=(2,))
            out("_never", d[...].tolist())
    """, tmp_path)
    assert got["b"] == ["bar", "x", "bar", "bar"] and got["u_regrown"] == ["bár", "bár", "bár"]
    assert got["bogus"] == "refused" and got["_never"] != [4.0] * 4


def test_shrink_after_reopen_discards_what_was_written(tmp_path: Path) -> None:
    """A dataset closed and opened again has no writer yet; its shrink's fill record must still order after
    the writes its logs hold (numbered below them, it made the read fail as a corrupt index)."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.create_dataset("d", shape=(5, 5), dtype="u1", maxshape=(None, None), chunks=(1, 4), fillvalue=7)
            f["d"][4, :] = np.arange(5, dtype="u1")       # each f["d"] is a fresh handle, closed at once
            f["d"].resize((2, 2))
            out("small", f["d"][...])
            f["d"].resize((5, 5))
            out("regrown", f["d"][...])
        with h5py.File("c.h5", "r") as f:
            out("after", f["d"][...])
    """, tmp_path)
    assert got["regrown"] == [[7] * 5] * 5


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_shrink_after_reopen_discards_every_ranks_writes(comm, mpi_tmp_path: Path) -> None:
    """The same with the rows written by rank 1 alone: the fill record (rank 0's log) must order after them,
    or the rows they wrote come back when the dataset grows again, instead of the fill value."""
    import h5py

    path = mpi_tmp_path / "shrink.h5"
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        f.create_dataset("d", shape=(5, 4), maxshape=(None, 4), chunks=(1, 4), dtype="i4", fillvalue=-1)
        d = f["d"]
        if comm.rank == 1:
            for k in range(6):                 # several records: rank 1's sequence runs ahead of rank 0's
                d[3:5] = k
        d.id.close()                           # the handle with the writers, closed
        del d
        f.flush()
        f["d"].resize((2, 4))                  # a fresh handle: no writer open on any rank
        f["d"].resize((5, 4))
        f.flush()
        rows = f["d"][...]
    mpi_assert(comm, np.array_equal(rows, np.full((5, 4), -1, "i4")), f"rank {comm.rank} read {rows.tolist()}")
