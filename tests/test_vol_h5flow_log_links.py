"""h5flow_log: soft links, object copy (H5Ocopy within and across containers), creation order, and HDF5's
command-line tools (h5ls, h5dump, h5stat, h5copy, h5diff, h5repack) against a container.

Scenarios run through `same_as_native` (tests/test_vol_h5flow_log_handles.py): the same script natively and
through the connector, every recorded value compared.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from h5flow.testing.tools_matrix import tool_path

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, _run, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_soft_links(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.create_group("g/h")
            f["g/h/d"] = np.arange(5)
            f["s"] = h5py.SoftLink("/g/h")                 # absolute
            f["g/rel"] = h5py.SoftLink("h/d")              # relative to the group holding the link
            f["dang"] = h5py.SoftLink("/nowhere")          # dangling
            f["loop"] = h5py.SoftLink("/loop")
            out("via_abs", f["s/d"][...]); out("via_rel", f["g/rel"][...])
            out("getlink", f.get("s", getlink=True).path)
            out("getlink_class", type(f.get("dang", getlink=True)).__name__)
            out("getclass", f.get("s", getclass=True, getlink=True).__name__)
            out("dangling_in", "dang" in f); out("dangling_get", f.get("dang") is None)
            out("keys", sorted(f.keys())); out("gkeys", sorted(f["g"].keys()))
            out("info_type", f.id.links.get_info(b"s").type); out("val", f.id.links.get_val(b"s").decode())
            out("same_object", f["s"] == f["g/h"])
            f["s/new"] = 1                                  # create through a soft link
            out("created", sorted(f["g/h"].keys()))
            try:
                f["dang/x"]
            except KeyError:
                out("dangling_path", "KeyError")
            try:
                f["loop"]
            except (KeyError, RuntimeError) as e:   # native: RuntimeError (too many links)
                out("loop", "refused"); out("_loop", str(e))
            try:
                f["s"] = h5py.SoftLink("/g")
            except (ValueError, OSError, RuntimeError) as e:
                out("exists", type(e).__name__)
            links = []
            f.id.links.visit(lambda n: links.append(n.decode()))
            out("lvisit", links)
            objs = []
            f.visit(objs.append)
            out("ovisit", objs)
            f.move("s", "g/s2")
            out("moved", f["g/s2/d"][...])
            del f["g/s2"]
            out("after_del", sorted(f["g"].keys())); out("target_kept", "g/h/d" in f)
        with h5py.File("c.h5", "r") as f:
            out("reopened", f["g/rel"][...]); out("reval", f.get("dang", getlink=True).path)
    """, tmp_path)
    assert got["via_rel"] == [0, 1, 2, 3, 4]
    assert got["getlink_class"] == "SoftLink" and got["dangling_in"] is True


def test_creation_order_of_committed_datatypes(tmp_path: Path) -> None:
    """A committed datatype's link takes its place in a tracking group's creation order like any other link
    (it had none: it came last whatever its age; h5flow pack copied that order)."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w", track_order=True)) as f:
            f.create_group("z")
            f["t"] = np.dtype("<i4")
            f["a"] = np.arange(3)
            out("keys", list(f.keys()))
            out("corder", f.id.links.get_info(b"t").corder)
        with h5py.File("c.h5", "r") as f:
            out("reopened", list(f.keys()))
    """, tmp_path)
    assert got["keys"] == ["z", "t", "a"]


def test_external_links_between_containers(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("t.h5", "w")) as t:
            t["g/d"] = np.arange(4)
            t["g/s"] = h5py.SoftLink("/g/d")             # absolute: resolved in t.h5, not in a.h5
        with check_connector(h5py.File("a.h5", "w")) as f:
            f["g/d"] = np.arange(9)                      # same path in the linking file
            f["e"] = h5py.ExternalLink("t.h5", "/g")
            f["ed"] = h5py.ExternalLink("t.h5", "/g/s")
            f["bad"] = h5py.ExternalLink("missing.h5", "/x")
            l = f.get("e", getlink=True)
            out("link", [type(l).__name__, l.filename, l.path])
            out("via", f["e/d"][...]); out("via_soft", f["ed"][...]); out("keys", sorted(f["e"].keys()))
            out("info", f.id.links.get_info(b"e").type); out("bad_in", "bad" in f); out("bad_get", f.get("bad"))
            f["e/d"][0] = 42                              # written through the link into t.h5
            out("written", f["e/d"][...]); out("name", f["e"].name)
            ro = f.get("e", elink_mode="r")               # H5Pset_elink_acc_flags
            out("elink_mode", ro.file.mode)
            try:
                ro["new"] = 1
            except (ValueError, OSError, RuntimeError) as e:
                out("elink_ro_write", "refused")
            del ro
            out("file", os.path.basename(f["e"].file.filename))
            try:
                f["bad"]
            except KeyError:
                out("bad", "KeyError")
            f.copy("e", "ecopy")                          # H5Ocopy through an external link
            f["ecopy/d"][0] = -5                          # the copy is a.h5's own: t.h5 keeps its data
            out("ecopy", f["ecopy/d"][...])
            del f["e"]
            out("after_del", sorted(f.keys()))
        with h5py.File("t.h5", "r") as t:
            out("target", t["g/d"][...])
        with h5py.File("a.h5", "r") as f:
            out("reopened", f["ed"][...])
    """, tmp_path)
    assert got["written"] == [42, 1, 2, 3] and got["target"] == [42, 1, 2, 3]


def test_external_links_honour_access_flags_and_file_access_list(tmp_path: Path) -> None:
    """The link access list's SWMR flag (h5py elink_swmr) and file access list (elink_locking) reach the
    file an external link opens; without them the linking file's SWMR mode is inherited, as natively."""
    got = same_as_native("""
        with check_connector(h5py.File("t.h5", "w", libver="latest")) as t:
            t.create_group("g"); t["g/d"] = [1, 2, 3]
        with h5py.File("c.h5", "w", libver="latest") as f:
            f["e"] = h5py.ExternalLink("t.h5", "/g")
        with h5py.File("c.h5", "r", swmr=True) as f:
            g = f.get("e", elink_swmr=False); out("swmr_off", [g.file.mode, g.file.swmr_mode]); del g
            g = f["e"]; out("inherited", g.file.swmr_mode); del g
        with h5py.File("c.h5", "a") as f:
            g = f.get("e", elink_mode="r", elink_swmr=True); out("swmr_on", [g.file.mode, g.file.swmr_mode]); del g
        with h5py.File("c.h5", "r", locking=False) as f:
            for lock in (True, False, "best-effort"):
                g = f.get("e", elink_locking=lock)
                out(f"locking {lock}", list(g.file.id.get_access_plist().get_file_locking())); del g
            out("data", f.get("e/d", elink_locking=True)[...])
    """, tmp_path)
    assert got["swmr_off"] == ["r", False] and got["inherited"] is True and got["swmr_on"] == ["r", True]
    assert got["locking True"] == [True, False] and got["locking best-effort"] == [True, True]


def test_second_open_with_other_file_locking_is_refused_as_native(tmp_path: Path) -> None:
    """A file open twice in one process shares its file locking settings: native HDF5 refuses a second
    open with other settings (h5py's TestFileLocking), and so does the connector."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w", locking=True)) as f:
            f.flush()
            for lock in (False, True, "best-effort"):
                try:
                    with h5py.File("c.h5", "r", locking=lock):
                        out(f"lock {lock}", "opened")
                except OSError:
                    out(f"lock {lock}", "OSError")
    """, tmp_path)
    assert got == {"lock False": "OSError", "lock True": "opened", "lock best-effort": "OSError"}


def test_external_link_to_a_native_file_opens_its_object_natively(tmp_path: Path) -> None:
    body = """
        import subprocess
        env = dict(os.environ); env.pop("HDF5_VOL_CONNECTOR")
        subprocess.run([sys.executable, "-c", "import h5py; h5py.File('n.h5', 'w')['g/x'] = [1, 2]"], env=env,
                       check=True)
        with check_connector(h5py.File("a.h5", "w")) as f:
            f["n"] = h5py.ExternalLink("n.h5", "/g/x")
            f["g"] = h5py.ExternalLink("n.h5", "/g")
        with check_connector(h5py.File("a.h5", "r")) as f:
            out("n", f["n"][()].tolist())
            out("g/x", f["g/x"][()].tolist())
            out("exists", ["g/x" in f, "g/nope" in f])
            out("file", f["g"].file.filename)
    """
    got = _run(body, tmp_path, connector=True)
    # the file is found beside the linking file, by its absolute name, as native HDF5 finds and names it
    assert got == {"n": [1, 2], "g/x": [1, 2], "exists": [True, False],
                   "file": os.path.join(os.path.realpath(tmp_path), "n.h5")}, got


def test_object_copy_within_and_across_containers(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("a.h5", "w")) as f:
            f.create_group("g/h")
            d = f.create_dataset("g/d", data=np.arange(10), maxshape=(None,)); d.attrs["u"] = "m"
            d[3] = 99                                     # buffered, not flushed: the copy must see it
            f["g/h/s"] = np.array(["x", "yy"], dtype=h5py.string_dtype())
            f["g/h/c"] = np.array([(1, 2.5)], dtype=[("a", "i4"), ("b", "f8")])
            f["g/link"] = h5py.SoftLink("/g/d")
            f.copy("g", "g2")
            f.copy(f["g/d"], f["g/h"], name="dcopy")
            f.copy("g", "g/h/inside")                     # a group into itself
            f["g2/d"][0] = -1                             # the copy is independent of the original
            f["g/d"][1] = -2
            f["g/d"].resize((12,))
            out("orig", f["g/d"][...]); out("copy", f["g2/d"][...]); out("copy2", f["g/h/dcopy"][...])
            out("shape", f["g2/d"].maxshape); out("attrs", dict(f["g2/d"].attrs))
            out("g2", sorted(f["g2"].keys())); out("g2link", f.get("g2/link", getlink=True).path)
            out("inside", sorted(f["g/h/inside/h"].keys()))
            f.copy("g/d", "noattr", without_attrs=True); out("noattr", dict(f["noattr"].attrs))
            f.copy("g", "shallow", shallow=True); out("shallow", sorted(f["shallow/h"].keys()))
            try:
                f.copy("g", "g2")
            except (ValueError, RuntimeError, OSError) as e:
                out("exists", type(e).__name__)
        with h5py.File("a.h5", "a") as f:                 # a later session: logs of earlier epochs are copied
            f.copy("g/d", "d_old")
            f["d_old"][0] = 1000; f["d_old"][5] = 5000
            out("later_session", f["d_old"][...]); out("orig_kept", f["g/d"][:6])
            with h5py.File("b.h5", "w") as b:
                f.copy("g", b, name="x")
                f.copy("/", b, name="root")
                b["x/d"][1] = 7
            with h5py.File("b.h5", "r") as b:
                out("b_d", b["x/d"][...]); out("b_s", [v.decode() for v in b["x/h/s"][...]])
                out("b_c", b["x/h/c"][...].tolist()); out("b_attrs", dict(b["x/d"].attrs))
                out("b_root", sorted(b["root"].keys())); out("b_root_d", b["root/g2/d"][...])
    """, tmp_path)
    assert got["copy"][:4] == [-1, 1, 2, 99] and got["orig"][:4] == [0, -2, 2, 99]
    assert got["b_d"][:4] == [0, 7, 2, 99]
    assert not [p for p in (tmp_path / "log" / "a.h5").iterdir() if p.name.startswith("@tmp")]


def test_creation_order_tracked(tmp_path: Path) -> None:
    """track_order=True: links and attributes come back in creation order, also after moves, deletions,
    renames and reopening; h5py decides the order from the creation property lists the connector reports."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w", track_order=True)) as f:
            for n in ["z", "a", "m"]:
                f.create_group(n)
            f["b"] = np.arange(3)
            f["s"] = h5py.SoftLink("/z")
            out("keys", list(f.keys()))
            g = f.create_group("g", track_order=True)
            for n in ["3", "1", "2"]:
                g.attrs[n] = int(n)
            out("attrs", list(g.attrs))
            d = f.create_dataset("d", data=[1], track_order=True)
            d.attrs["y"] = 1; d.attrs["x"] = 2
            out("dattrs", list(d.attrs))
            del g.attrs["1"]; g.attrs["0"] = 0
            out("attrs2", list(g.attrs))
            f.move("a", "g/a"); f.move("z", "zz")
            out("moved", list(f.keys())); out("gkeys", list(f["g"].keys()))
            out("corder", f.id.links.get_info(b"m").corder)
            f.copy("g", "gc")
            out("copied", list(f.keys()))
            out("gcpl", f["g"].id.get_create_plist().get_link_creation_order())
            u = f.create_group("u")  # not tracked: by name
            for n in ["q", "p"]:
                u.create_group(n)
            out("untracked", list(u.keys()))
            seen = []
            f.id.links.visit(lambda n: seen.append(n.decode()), idx_type=h5py.h5.INDEX_CRT_ORDER)
            out("visit", seen)
            try:
                u.id.links.iterate(lambda n: None, idx_type=h5py.h5.INDEX_CRT_ORDER)
                out("untracked_iterate", "ok")
            except Exception as e:
                out("untracked_iterate", type(e).__name__)
            useen = []
            u.id.links.visit(lambda n: useen.append(n.decode()), idx_type=h5py.h5.INDEX_CRT_ORDER)
            out("untracked_visit", useen)
        with h5py.File("c.h5", "r") as f:
            out("reopened", list(f.keys())); out("reattrs", list(f["g"].attrs))
            out("by_idx", h5py.h5l.LinkProxy.get_name_by_idx(f.id.links, 0, index_type=h5py.h5.INDEX_CRT_ORDER)
                if hasattr(h5py.h5l.LinkProxy, "get_name_by_idx") else None)
    """, tmp_path)
    assert got["keys"] == ["z", "a", "m", "b", "s"] and got["attrs"] == ["3", "1", "2"]
    assert got["untracked"] == ["p", "q"]


# ---------------------------------------------------------------- HDF5's command-line tools
def _tool(name: str) -> str:
    """The stack's HDF5 tool: make setup installs it, so a missing one is a broken setup, not a skip."""
    found = tool_path(name)
    assert found, f"{name} not found: the stack installs it (run make setup, then source build/stack.env)"
    return found


def _run_tool(args: list[str], connector: bool = True, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    if connector:
        env.update(LOG_ENV)
    proc = subprocess.run([_tool(args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


MAKE = """
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    g = f.create_group("g"); g.attrs["title"] = "t"; g.attrs["n"] = np.arange(3)
    d = f.create_dataset("g/d", data=np.arange(20.).reshape(4, 5), chunks=(2, 5), maxshape=(None, 5))
    d.attrs["units"] = "m"; d[1] = -1
    f["g/s"] = np.array(["ab", "cde"], dtype=h5py.string_dtype())
    f["g/c"] = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "i4"), ("b", "f8")])
    f.create_group("e")
    f["link"] = h5py.SoftLink("/g/d")
"""


@pytest.fixture
def container(tmp_path: Path) -> Path:
    import sys

    path = tmp_path / "c.h5"
    env = dict(os.environ, **LOG_ENV)
    subprocess.run([sys.executable, "-c", MAKE, str(path)], env=env, check=True, timeout=120)
    assert (path / "@h5flow_log").exists()
    return path


def test_tools_h5ls_h5dump_h5stat(container: Path) -> None:
    ls = _run_tool(["h5ls", "-r", str(container)]).stdout
    assert "/g/d" in ls and "Dataset {4/Inf, 5}" in ls and "Soft Link {/g/d}" in ls
    dump = _run_tool(["h5dump", str(container)]).stdout
    assert 'SOFTLINK "link"' in dump and 'LINKTARGET "/g/d"' in dump and '"cde"' in dump
    assert "-1, -1, -1, -1, -1" in dump
    stat = _run_tool(["h5stat", str(container)]).stdout
    assert "# of unique groups: 3" in stat and "# of unique datasets: 3" in stat
    size = sum(p.stat().st_size for p in container.rglob("*") if p.is_file())
    assert f"Total space: {size} bytes" in stat   # H5Fget_filesize: the container's files


def test_tools_h5copy_and_h5diff(container: Path, tmp_path: Path) -> None:
    dst = tmp_path / "copy.h5"
    _run_tool(["h5copy", "-i", str(container), "-o", str(dst), "-s", "/g", "-d", "/g"])
    assert (dst / "@h5flow_log").exists() and (dst / "g" / "d" / "@dataset").exists()
    _run_tool(["h5diff", str(container), str(dst), "/g", "/g"])
    _run_tool(["h5copy", "-i", str(container), "-o", str(dst), "-s", "/g/d", "-d", "/x/y", "-p"])
    _run_tool(["h5diff", str(container), str(dst), "/g/d", "/x/y"])
    # a failing copy (destination exists) leaves the destination as it was
    before = sorted(p.name for p in dst.iterdir())
    proc = _run_tool(["h5copy", "-i", str(container), "-o", str(dst), "-s", "/g", "-d", "/g"], check=False)
    assert proc.returncode != 0
    assert sorted(p.name for p in dst.iterdir()) == before


def test_tools_h5repack_container_to_native_and_back(container: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.h5"
    _run_tool(["h5repack", str(container), str(again)])  # container -> container: H5Ocopy, H5Lcopy (soft link)
    _run_tool(["h5diff", str(container), str(again)])
    assert "Soft Link {/g/d}" in _run_tool(["h5ls", "-r", str(again)]).stdout
    # soft and external links cross connectors too (HDF5 patch 0008: made anew from their values, where
    # h5repack's H5Lcopy was refused between two VOL connectors)
    import sys

    env = dict(os.environ, **LOG_ENV)
    subprocess.run([sys.executable, "-c", "import h5py, sys; f = h5py.File(sys.argv[1], 'a'); "
                    "f['ext'] = h5py.ExternalLink('other.h5', '/x/y'); f['g/dangling'] = h5py.SoftLink('/nope')",
                    str(container)], env=env, check=True, timeout=60)
    native = tmp_path / "native.h5"
    _run_tool(["h5repack", "--dst-vol-value=0", "--dst-vol-name=native", str(container), str(native)])
    with open(native, "rb") as fh:
        assert fh.read(8) == b"\x89HDF\r\n\x1a\n"
    ls = _run_tool(["h5ls", "-r", str(native)], connector=False).stdout
    assert "Soft Link {/g/d}" in ls and "External Link {other.h5//x/y}" in ls and "Soft Link {/nope}" in ls, ls
    _run_tool(["h5diff", "--vol-value-2=0", "--vol-name-2=native", str(container), str(native)])
    back = tmp_path / "back.h5"
    _run_tool(["h5repack", "--src-vol-value=0", "--src-vol-name=native", str(native), str(back)])
    assert (back / "@h5flow_log").exists()
    assert _run_tool(["h5ls", "-r", str(back)]).stdout == _run_tool(["h5ls", "-r", str(container)]).stdout
    _run_tool(["h5diff", str(container), str(back)])
    _run_tool(["h5diff", "--vol-value-1=0", "--vol-name-1=native", str(native), str(back)])
    dump_native = _run_tool(["h5dump", "-d", "/g/d", str(native)], connector=False).stdout
    dump_log = _run_tool(["h5dump", "-d", "/g/d", str(back)]).stdout
    assert dump_native.split("DATA {", 1)[1] == dump_log.split("DATA {", 1)[1]


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_soft_links_creation_order_and_copy(comm, mpi_tmp_path: Path) -> None:
    """Collective link creation, creation-order tracking and H5Ocopy agree on every rank; each rank's
    buffered writes reach the copy."""
    import h5py
    import numpy as np

    from h5flow.testing.pytest_mpi import mpi_assert

    path = mpi_tmp_path / "links.h5"
    r = comm.rank
    with h5py.File(path, "w", driver="mpio", comm=comm, track_order=True) as f:
        for n in ("z", "a"):
            f.create_group(n)
        d = f.create_dataset("z/x", shape=(comm.size, 3), dtype="i8", fillvalue=-1)
        d[r] = r + 1                                  # buffered on each rank
        f["z/x"][...]                                 # every rank has built its read index
        d[r, 0] = 70 + r                              # written after it: the copy must see it anyway
        f["s"] = h5py.SoftLink("/z/x")
        f.copy("z", "zc")
        f["s2"] = h5py.SoftLink("/zc")
        e = f.create_dataset("s2/y", shape=(comm.size,), dtype="i8")   # created through a soft link
        e[r] = 10 + r
        mpi_assert(comm, e.name == "/zc/y" or e.name == "/s2/y", f"rank {r}: name {e.name}")
        keys = list(f.keys())
        mpi_assert(comm, keys == ["z", "a", "s", "zc", "s2"], f"rank {r} keys {keys}")
        f.flush()
        ys = f["zc/y"][...]
        mpi_assert(comm, ys.tolist() == [10 + k for k in range(comm.size)], f"rank {r} read {ys.tolist()}")
        got = f["zc/x"][...]
        via = f["s"][...]
    want = np.array([[70 + k] + [k + 1] * 2 for k in range(comm.size)])
    mpi_assert(comm, np.array_equal(got, want), f"rank {r} copy read {got.tolist()}")
    mpi_assert(comm, np.array_equal(via, want), f"rank {r} soft link read {via.tolist()}")


def test_expanding_a_soft_link_cycle_is_a_clear_error(tmp_path: Path) -> None:
    """Native HDF5 copies a group whose soft link names the group itself, with expand_soft, by making a second
    hard link to the copy; h5flow_log cannot store that and says so, leaving nothing behind."""
    got = _run("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.create_group("g/h")
            f["g/h/up"] = h5py.SoftLink("/g")
            try:
                f.copy("g", "g2", expand_soft=True)
                out("copy", "done")
            except RuntimeError as e:
                out("copy", str(e))
            out("keys", sorted(f.keys()))
            f.copy("g", "g3")                             # without expansion the link is copied
            out("g3", f.get("g3/h/up", getlink=True).path)
    """, tmp_path, connector=True)
    assert "a group that contains it" in got["copy"] and got["keys"] == ["g"] and got["g3"] == "/g"


def test_external_link_targets_are_found_in_native_order(tmp_path: Path) -> None:
    """An external link's file is the one native HDF5 opens: $HDF5_EXT_PREFIX's entries (a ':' list) first,
    then the link access list's prefix (h5py has no keyword for it: H5Pset_elink_prefix), then beside the
    linking file, then the working directory; an absolute name that is gone is looked for by its last
    component. A traversal callback on the link access list is an error here, never ignored."""
    body = """
        import os
        for d, v in (("pa", 1), ("pb", 2), ("sub", 3), (".", 4)):
            os.makedirs(d, exist_ok=True)
            with check_connector(h5py.File(os.path.join(d, "t.h5"), "w")) as t:
                t["d"] = np.full(3, v)
        with check_connector(h5py.File("sub/a.h5", "w")) as f:
            f["rel"] = h5py.ExternalLink("t.h5", "/d")
            f["gone"] = h5py.ExternalLink(os.path.join(os.getcwd(), "moved", "t.h5"), "/d")
        def via(f, name, prefix=None):
            lapl = h5py.h5p.create(h5py.h5p.LINK_ACCESS)
            if prefix is not None:
                lapl.set_elink_prefix(prefix.encode())
            return h5py.Dataset(h5py.h5o.open(f.id, name.encode(), lapl=lapl))[...]
        with h5py.File("sub/a.h5", "r") as f:
            out("rel", via(f, "rel")); out("rel_pa", via(f, "rel", "pa"))
            out("gone", via(f, "gone")); out("gone_pb", via(f, "gone", "pb"))
    """
    got = same_as_native(body, tmp_path / "plain")
    assert got["rel"] == [3] * 3 and got["rel_pa"] == [1] * 3 and got["gone"] == [3] * 3 and got["gone_pb"] == [2] * 3
    env = same_as_native(body, tmp_path / "env", extra_env={"HDF5_EXT_PREFIX": "nowhere:pb"})
    assert env["rel"] == [2] * 3 and env["rel_pa"] == [2] * 3
    cb = _run("""
        import ctypes
        with check_connector(h5py.File("a.h5", "w")) as f:
            f.create_group("g"); f["e"] = h5py.ExternalLink("a.h5", "/g")
        from h5flow import _hdf5lib
        lib = _hdf5lib.lib()
        CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.POINTER(ctypes.c_uint), ctypes.c_int64, ctypes.c_void_p)
        veto = CB(lambda *a: -1)                       # a callback that refuses every traversal
        lapl = h5py.h5p.create(h5py.h5p.LINK_ACCESS)
        assert lib.H5Pset_elink_cb(ctypes.c_int64(lapl.id), veto, None) >= 0
        with h5py.File("a.h5", "r") as f:
            try:
                h5py.h5o.open(f.id, b"e", lapl=lapl)
                out("cb", "opened")
            except Exception as e:
                out("cb", type(e).__name__)
    """, tmp_path / "cb", connector=True)
    assert cb["cb"] != "opened"
