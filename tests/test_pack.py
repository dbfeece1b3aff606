"""``h5flow pack`` / ``h5flow unpack`` (src/h5flow/packing/): container -> native HDF5 file -> container.

Verification with HDF5's ``h5diff``: container against the packed native file (``--vol-name-2=native``,
the connector loaded for the container) for everything but references — h5diff cannot compare those with
a container (see docs/FORMAT.md, "Pack and unpack") — and, for files with references and dimension
scales, the packed file against pack(unpack(packed file)), native against native, where h5diff compares
everything including the referenced objects. The creation properties h5diff does not compare (chunk shape,
max shape, fill value, committed types, creation order) are checked with h5py.

Containers are made and inspected in subprocesses (``_py``), so the pytest process never loads the
connector.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir

PLUGIN_DIR = default_plugin_dir()
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

# every supported kind of object, no references (h5diff compares all of it between a container and a native file)
MAKE_PLAIN = """
import numpy as np, h5py
from h5flow.connectors.logvol import open_container
with open_container(PATH, "w", track_order=True) as f:
    f.attrs["title"] = "packed"
    f.attrs.create("fixed", np.bytes_("abc"), dtype="S5")
    f.attrs["big_endian"] = np.arange(6, dtype=">i4").reshape(2, 3)
    f.attrs["empty"] = h5py.Empty("f4")
    f["t"] = np.dtype([("a", "<i4"), ("b", "<f8")])
    g = f.create_group("g", track_order=True)
    g.create_group("zz")
    g.create_group("aa")
    d = g.create_dataset("data", shape=(50, 7), maxshape=(None, 7), chunks=(8, 7), dtype="f4", fillvalue=-1.5)
    d[:30] = np.arange(210, dtype="f4").reshape(30, 7)
    d.attrs["units"] = "m"
    f.create_dataset("comp", data=np.array([(1, 2.0), (3, 4.5)], dtype=[("a", "<i4"), ("b", "<f8")]))
    c = f.create_dataset("ctyped", shape=(3,), dtype=f["t"])
    c[0] = (7, 8.0)
    f.create_dataset("enum", data=np.array([0, 1, 1, 0], dtype="u1"),
                     dtype=h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="u1"))
    a = f.create_dataset("arrt", shape=(4,), dtype=np.dtype(("<i2", (3,))))
    a[1] = [1, 2, 3]
    f.create_dataset("vstr", data=np.array(["a", "bbb", "\u00e9t\u00e9"], dtype=object), dtype=h5py.string_dtype())
    f.create_dataset("fstr", data=np.array([b"ab", b"cde"]), dtype="S4")
    vl = f.create_dataset("vlen", shape=(3,), dtype=h5py.vlen_dtype("i8"))
    vl[0] = [1, 2, 3]
    vl[2] = [9]
    # variable-length members: h5diff reads them with a converted memory type (H5Tget_native_type)
    dt = np.dtype([("id", "<i4"), ("name", h5py.string_dtype()), ("seq", h5py.vlen_dtype("f4"))])
    cv = f.create_dataset("cv", shape=(3,), dtype=dt)
    cv[0] = (1, "abc", np.array([1.5, 2.5], dtype="f4"))
    cv[2] = (3, "z", np.array([], dtype="f4"))
    f.attrs.create("cattr", data=np.array([(5, "x", np.array([1.0], dtype="f4"))], dtype=dt))
    f.create_dataset("scalar", data=3.25)
    f.create_dataset("empty", shape=(0, 4), maxshape=(None, 4), chunks=(2, 4), dtype="i2")
    f.create_dataset("null", data=h5py.Empty("f8"))
    f.create_dataset("u64_be", data=np.arange(10, dtype=">u8"))
    f["soft"] = h5py.SoftLink("/g/data")
    f["dangling"] = h5py.SoftLink("/nowhere")
    f["ext"] = h5py.ExternalLink("other.h5", "/x")
    big = f.create_dataset("big", shape=(1000, 33), dtype="i8", chunks=(64, 33))
    big[...] = np.arange(33000).reshape(1000, 33)
"""

MAKE_REFS = """
import numpy as np, h5py
from h5flow.connectors.logvol import open_container
with open_container(PATH, "w") as f:
    f["g/data"] = np.arange(12.0).reshape(3, 4)
    f.create_group("h")
    refs = f.create_dataset("refs", shape=(3,), dtype=h5py.ref_dtype)
    refs[0] = f["g/data"].ref
    refs[1] = f["h"].ref                   # refs[2] stays a null reference
    f["g/data"].attrs["myref"] = f["h"].ref
    x = f.create_dataset("x", data=np.arange(3.0))
    x.make_scale("the x")
    y = f.create_dataset("y", data=np.arange(4.0))
    y.make_scale()
    f["g/data"].dims[0].attach_scale(x)
    f["g/data"].dims[1].attach_scale(y)
    f["g/data"].dims[0].label = "rows"
"""


def _py(code: str, *, connector: bool = False, check: bool = True, **subst: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    env.pop("HDF5_PLUGIN_PATH", None)
    if connector:
        env.update(LOG_ENV)
    for k, v in subst.items():
        code = code.replace(k, repr(str(v)))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=180)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _h5flow(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _h5diff(*args: str, connector: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    if connector:
        env.update(LOG_ENV)
    return subprocess.run(["h5diff", "-v", *map(str, args)], env=env, capture_output=True, text=True, timeout=120)


def _assert_same(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "differences found" in out  # it compared something
    for line in out.splitlines():
        if "differences found" in line:
            assert line.startswith("0 differences found"), out
        assert not line.startswith("Not comparable") or "is an empty dataset" in line, out


def _props(path: Path, container: bool) -> dict:
    """What h5diff does not compare: creation properties, link and attribute order, committed types."""
    proc = _py("""
        import json, h5py
        from h5flow.connectors.logvol import open_container
        f = open_container(PATH) if CONTAINER == "True" else h5py.File(PATH, "r")
        out = {}
        def walk(name, obj):
            e = {"type": type(obj).__name__}
            if isinstance(obj, h5py.Dataset):
                e.update(shape=obj.shape, maxshape=obj.maxshape, chunks=obj.chunks, dtype=str(obj.dtype),
                         fill=str(obj.fillvalue), committed=obj.id.get_type().committed(),
                         attrs=list(obj.attrs))
            if isinstance(obj, h5py.Group):
                e.update(keys=list(obj.keys()), attrs=list(obj.attrs),
                         order=obj.id.get_create_plist().get_link_creation_order())
            out[name] = e
        f.visititems(walk)
        out["/"] = {"keys": list(f.keys()), "attrs": list(f.attrs)}
        print(json.dumps(out))
    """, PATH=path, CONTAINER=container)
    return json.loads(proc.stdout)


def test_pack_h5diff_identical_and_unpack_round_trip(tmp_path: Path) -> None:
    src, out, back = tmp_path / "c.h5", tmp_path / "out.h5", tmp_path / "back.h5"
    _py(MAKE_PLAIN, PATH=src)
    proc = _h5flow("pack", str(src), str(out))
    assert "packed" in proc.stdout and "14 dataset(s)" in proc.stdout, proc.stdout
    assert out.is_file() and out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir() if "h5flow-tmp" in p.name] == []
    # h5diff: the container through the connector, the packed file natively
    _assert_same(_h5diff("--vol-value-2=0", "--vol-name-2=native", src, out))
    # readable without the plugin (no HDF5_PLUGIN_PATH, no connector)
    got = _py("""
        import h5py
        with h5py.File(PATH, "r") as f:
            print(f["g/data"][29, 6], f["vstr"][2].decode(), list(f["vlen"][0]), f["ctyped"][0])
    """, PATH=out).stdout.split()
    assert got[:2] == ["209.0", "\u00e9t\u00e9"], got
    # what h5diff does not compare
    ps, po = _props(src, True), _props(out, False)
    assert ps == po
    assert po["g/data"]["chunks"] == [8, 7] and po["g/data"]["maxshape"] == [None, 7]
    assert po["g/data"]["fill"] == "-1.5" and po["ctyped"]["committed"] is True
    assert po["g"]["keys"] == ["zz", "aa", "data"]
    assert po["/"]["attrs"] == ["title", "fixed", "big_endian", "empty", "cattr"]
    # unpack: a container again, identical to the original (h5diff through the connector on both sides) and to
    # the native file
    proc = _h5flow("unpack", str(out), str(back))
    assert (back / "@h5flow_log").is_file()
    _assert_same(_h5diff(src, back))
    _assert_same(_h5diff("--vol-value-1=0", "--vol-name-1=native", out, back))
    assert _props(back, True) == ps


def test_h5diff_sees_a_difference(tmp_path: Path) -> None:
    """The comparison used above can fail: one changed element of the packed file is reported."""
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py(MAKE_PLAIN, PATH=src)
    _h5flow("pack", str(src), str(out))
    _py("""
        import h5py
        with h5py.File(PATH, "r+") as f:
            f["big"][999, 32] = -7
    """, PATH=out)
    proc = _h5diff("--vol-value-2=0", "--vol-name-2=native", src, out)
    assert proc.returncode == 1 and "1 differences found" in proc.stdout, proc.stdout + proc.stderr


def test_references_and_dimension_scales(tmp_path: Path) -> None:
    src, out, back, again = (tmp_path / n for n in ("c.h5", "out.h5", "back.h5", "again.h5"))
    _py(MAKE_REFS, PATH=src)
    _h5flow("pack", str(src), str(out))
    check = """
        import json, h5py
        from h5flow.connectors.logvol import open_container
        f = open_container(PATH) if CONTAINER == "True" else h5py.File(PATH, "r")
        r = f["refs"][...]
        d = f["g/data"]
        print(json.dumps({
            "refs": [f[x].name if x else None for x in r],
            "attr": f[d.attrs["myref"]].name,
            "dims": [[s.name for s in d.dims[i].values()] for i in range(2)],
            "label": d.dims[0].label,
            "scales": [h5py.h5ds.is_scale(f[n].id) for n in ("x", "y", "g/data")],
            "names": [h5py.h5ds.get_scale_name(f[n].id) and h5py.h5ds.get_scale_name(f[n].id).decode()
                      for n in ("x",)] + ["NAME" in f["y"].attrs],
        }))
    """
    want = {"refs": ["/g/data", "/h", None], "attr": "/h", "dims": [["/x"], ["/y"]], "label": "rows",
            "scales": [True, True, False], "names": ["the x", True]}
    assert json.loads(_py(check, PATH=out, CONTAINER=False).stdout) == want
    _h5flow("unpack", str(out), str(back))
    assert json.loads(_py(check, PATH=back, CONTAINER=True).stdout) == want
    _h5flow("pack", str(back), str(again))
    # native against native: h5diff compares references (the objects they point to) and the H5DS attributes
    proc = _h5diff(out, again, connector=False)
    assert proc.returncode == 0 and "attribute: <DIMENSION_LIST of </g/data>>" in proc.stdout, proc.stdout
    assert "dataset: </refs> and </refs>" in proc.stdout and "differences found" in proc.stdout


def test_slabs_are_bounded_and_cover_the_dataset() -> None:
    import itertools

    import numpy as np

    from h5flow.packing.data import slabs_of

    for shape, itemsize, chunks, slab in [((1000, 33), 8, (64, 33), 8 * 33 * 100), ((5, 6, 7), 4, None, 4 * 7 * 2),
                                           ((3, 1 << 12), 1, (1, 100), 1000), ((10,), 2, None, 1), ((), 8, None, 1),
                                           ((4, 0), 8, None, 64), ((7, 9), 16, (3, 9), 1 << 20)]:
        blocks = slabs_of(shape, itemsize, chunks, slab)
        seen = np.zeros(shape, dtype=int)
        for b in blocks:
            n = int(np.prod([s.stop - s.start for s in b])) if b else 1
            assert n * itemsize <= max(slab, itemsize), (shape, b)
            seen[b] += 1
        assert (seen == 1).all(), shape  # every element exactly once
        if chunks and len(blocks) > 1 and shape == (1000, 33):
            assert all(b[0].start % chunks[0] == 0 for b in blocks)  # whole chunks
    del itertools


def test_large_dataset_streams_in_slabs(tmp_path: Path) -> None:
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py("""
        import numpy as np
        from h5flow.connectors.logvol import open_container
        with open_container(PATH, "w") as f:
            d = f.create_dataset("d", shape=(16384, 256), dtype="f8", chunks=(128, 256))
            for i in range(0, 16384, 512):
                d[i:i + 512] = np.arange(i * 256, (i + 512) * 256, dtype="f8").reshape(512, 256)
    """, PATH=src)
    rep = json.loads(_py("""
        import dataclasses, json, tracemalloc
        import h5flow
        import h5py, numpy, h5flow.packing  # imported before tracing starts: module code is not the data's memory
        tracemalloc.start()  # numpy's buffers included
        r = h5flow.pack(SRC, DST, slab_bytes=1 << 20)  # the package-level API
        print(json.dumps(dict(dataclasses.asdict(r), peak=tracemalloc.get_traced_memory()[1])))
    """, SRC=src, DST=out).stdout)
    assert rep["data_bytes"] == 32 << 20 and rep["slabs"] == 32  # 1 MiB slabs of whole 128-row chunks
    assert rep["peak"] < 8 << 20, rep  # the 32 MiB dataset is never in memory at once (a few slabs at most)
    _assert_same(_h5diff("--vol-value-2=0", "--vol-name-2=native", src, out))


@pytest.mark.slow
def test_cli_errors_and_force(tmp_path: Path) -> None:
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    assert "CONTAINER" in _h5flow("pack", "--help").stdout and "--strip-filters" in _h5flow("unpack", "--help").stdout
    p = _h5flow("pack", str(tmp_path / "missing"), str(out), check=False)
    assert p.returncode == 1 and "no such file or container" in p.stderr
    _py(MAKE_REFS, PATH=src)
    _h5flow("pack", str(src), str(out))
    p = _h5flow("pack", str(src), str(out), check=False)
    assert p.returncode == 1 and "exists" in p.stderr and "--force" in p.stderr
    p = _h5flow("pack", str(out), str(tmp_path / "x.h5"), check=False)
    assert p.returncode == 1 and "h5flow unpack" in p.stderr  # a native file given to pack
    p = _h5flow("unpack", str(src), str(tmp_path / "y.h5"), check=False)
    assert p.returncode == 1 and "h5flow pack" in p.stderr
    p = _h5flow("unpack", str(out), str(src), check=False)  # onto an existing container
    assert p.returncode == 1 and "--force" in p.stderr and (src / "@h5flow_log").is_file()
    before = out.stat().st_ino
    _h5flow("pack", "--force", str(src), str(out))
    assert out.stat().st_ino != before and out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    _h5flow("unpack", "--force", str(out), str(src))  # replaces a container (a directory)
    assert (src / "@h5flow_log").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.h5", "out.h5"]


def test_failed_pack_leaves_nothing_behind(tmp_path: Path) -> None:
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py(MAKE_PLAIN, PATH=src)
    dat = next((src / "big").glob("@log.*.dat"))
    raw = bytearray(dat.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # the data checksum no longer matches: reading /big fails
    dat.write_bytes(bytes(raw))
    p = _h5flow("pack", str(src), str(out), check=False)
    assert p.returncode == 1 and "/big" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.h5"]
    # with --force over an existing file: the old file stays as it was
    out.write_bytes(b"previous")
    p = _h5flow("pack", "--force", str(src), str(out), check=False)
    assert p.returncode == 1 and out.read_bytes() == b"previous"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.h5", "out.h5"]


def test_unpack_keeps_filters_and_pack_keeps_them_back(tmp_path: Path) -> None:
    """gzip + shuffle survive native -> container -> native: the data and the filter pipeline of every
    step; --strip-filters still copies without them."""
    native, cont, back, plain = tmp_path / "n.h5", tmp_path / "c.h5", tmp_path / "back.h5", tmp_path / "plain.h5"
    _py("""
        import numpy as np, h5py
        with h5py.File(PATH, "w") as f:
            f.create_dataset("z", data=np.arange(100000) % 977, chunks=(10000,), compression="gzip",
                             compression_opts=6, shuffle=True)
            f.create_dataset("f", data=np.linspace(0, 1, 5000).reshape(50, 100), chunks=(10, 100), shuffle=True)
    """, PATH=native)
    _h5flow("unpack", str(native), str(cont))
    _h5flow("pack", str(cont), str(back))
    got = _py("""
        import json, numpy as np, h5py
        from h5flow.connectors.logvol import open_container
        out = {}
        for name, f in (("native", h5py.File(NATIVE, "r")), ("container", open_container(CONT)),
                        ("back", h5py.File(BACK, "r"))):
            out[name] = {d: [[int(c) for c in f[d].id.get_create_plist().get_filter(i)[:1]] +
                             [list(f[d].id.get_create_plist().get_filter(i)[2])]
                             for i in range(f[d].id.get_create_plist().get_nfilters())] for d in ("z", "f")}
            out[name + "_equal"] = bool(np.array_equal(f["z"][()], np.arange(100000) % 977) and
                                        np.array_equal(f["f"][()], np.linspace(0, 1, 5000).reshape(50, 100)))
            f.close()
        print(json.dumps(out))
    """, NATIVE=native, CONT=cont, BACK=back)
    res = json.loads(got.stdout)
    assert res["native_equal"] and res["container_equal"] and res["back_equal"], res
    shuffle, gzip = 2, 1
    assert [f[0] for f in res["native"]["z"]] == [shuffle, gzip] and res["native"]["z"][1][1] == [6], res
    assert res["container"] == res["native"] and res["back"] == res["native"], res
    p = _h5flow("unpack", "--strip-filters", str(native), str(plain))
    assert "filters" in p.stderr  # warned
    _assert_same(_h5diff("--vol-value-1=0", "--vol-name-1=native", native, plain))


SLOW_PACK = """
import sys, time
import h5flow.packing as pk
import h5flow.packing.data as pkdata
def stop(*a, **k):  # the output exists, half written: wait here to be killed
    print("copying", flush=True)
    time.sleep(120)
pkdata.copy_data = stop
pk.DIRECTION(sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize("direction", ["pack", "unpack"])
def test_a_killed_pack_leaves_an_output_the_next_one_removes(tmp_path: Path, direction: str) -> None:
    import signal

    src, native, out = tmp_path / "c.h5", tmp_path / "n.h5", tmp_path / "out"
    _py(MAKE_PLAIN, PATH=src)
    _h5flow("pack", str(src), str(native))
    source = src if direction == "pack" else native
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    killed = subprocess.Popen([sys.executable, "-c", SLOW_PACK.replace("DIRECTION", direction), str(source), str(out)],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout is not None and killed.stdout.readline().strip() == "copying"
        left = [p for p in tmp_path.iterdir() if ".h5flow-tmp." in p.name]
        assert len(left) == 1 and left[0].name.startswith(".out.h5flow-tmp."), left
        # a pack to the same name while the first one is alive leaves its output alone
        _h5flow(direction, str(source), str(tmp_path / "other"))
        assert left[0].exists()
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed.stdout is not None
        killed.stdout.close()
    assert left[0].exists()  # SIGKILL: nothing cleaned up
    p = _h5flow(direction, str(source), str(out))
    assert "removed" in p.stderr and left[0].name in p.stderr, p.stderr
    assert [p.name for p in tmp_path.iterdir() if ".h5flow-tmp." in p.name] == []
    assert out.exists()


def test_an_interrupted_force_replacement_is_finished_by_the_next_pack(tmp_path: Path) -> None:
    """--force moves the previous destination aside, renames the new one in, removes the old one: killed
    between the renames, the next pack puts the previous one back (then refuses without --force); killed
    after them, it removes the old copy."""
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py(MAKE_PLAIN, PATH=src)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid whose process is gone
    import socket

    aside = tmp_path / f".out.h5.h5flow-old.{socket.gethostname()}-{dead.pid}.0123456789ab"
    aside.write_bytes(b"previous")
    p = _h5flow("pack", str(src), str(out), check=False)
    assert p.returncode == 1 and "exists" in p.stderr and "restored" in p.stderr, p.stderr
    assert out.read_bytes() == b"previous" and not aside.exists()
    aside.write_bytes(b"older")
    p = _h5flow("pack", "--force", str(src), str(out))
    assert "removed" in p.stderr and not aside.exists() and out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"


def test_slab_mib_must_be_a_finite_size(tmp_path: Path) -> None:
    for bad in ("nan", "inf", "0", "-1", "x"):
        p = _h5flow("pack", "--slab-mib", bad, str(tmp_path / "c.h5"), str(tmp_path / "o.h5"), check=False)
        assert p.returncode == 2 and "--slab-mib" in p.stderr and "Traceback" not in p.stderr, (bad, p.stderr)


def test_progress_bar(tmp_path: Path) -> None:
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py(MAKE_PLAIN, PATH=src)
    p = _py("""
        import io, re, rich.console, h5flow.packing as pk
        from rich.console import Console
        buf = io.StringIO()
        real = Console
        rich.console.Console = lambda **k: real(file=buf, force_terminal=True, width=100)
        pk.pack(SRC, DST, progress=True, slab_bytes=4096)
        v = buf.getvalue()
        print("BAR" if v.count("pack") > 1 and re.search(r"([0-9.]+)/\\1 kB", v) else "NOBAR", repr(v[-300:]))
    """, SRC=src, DST=out)
    assert p.stdout.startswith("BAR"), p.stdout


@pytest.mark.mpi(n=2, timeout=180)
def test_mpi_pack_and_unpack_equal_serial(comm, mpi_tmp_path: Path) -> None:
    from h5flow.packing import pack, unpack
    from h5flow.testing.pytest_mpi import mpi_assert

    src, serial, par, back, again = (mpi_tmp_path / n for n in ("c.h5", "s.h5", "p.h5", "b.h5", "a.h5"))
    if comm.rank == 0:
        _py(MAKE_PLAIN, PATH=src)
        _py(MAKE_REFS.replace('"g/data"', '"g2/data"').replace(
            'open_container(PATH, "w")', 'open_container(PATH, "r+")'), PATH=src)
        pack(src, serial)
    comm.Barrier()
    r = pack(src, par, comm=comm, slab_bytes=64 << 10)
    mpi_assert(comm, r.ranks == 2 and r.slabs > 2 and r.direct_chunks > 0, f"pack report {r}")
    ok, msg = True, ""
    if comm.rank == 0:
        proc = _h5diff(serial, par, connector=False)
        ok, msg = proc.returncode == 0 and "differences found" in proc.stdout, proc.stdout + proc.stderr
    mpi_assert(comm, comm.bcast(ok), f"h5diff serial vs parallel pack: {comm.bcast(msg)[-3000:]}")
    unpack(par, back, comm=comm, slab_bytes=16 << 10)
    comm.Barrier()
    if comm.rank == 0:
        pack(back, again)
        proc = _h5diff(serial, again, connector=False)
        ok, msg = proc.returncode == 0 and "differences found" in proc.stdout, proc.stdout + proc.stderr
        leftovers = [p.name for p in mpi_tmp_path.iterdir() if "h5flow-" in p.name]
        ok, msg = ok and not leftovers, msg + f" leftovers {leftovers}"
    mpi_assert(comm, comm.bcast(ok), f"h5diff serial pack vs pack(parallel unpack): {comm.bcast(msg)[-3000:]}")


def test_unremappable_references_refused(tmp_path: Path) -> None:
    """References that cannot be remapped are refused (never copied pointing at the source's objects); nothing
    is left behind. (Second hard links unpack into a container since format 4:
    tests/test_vol_h5flow_log_hardlinks.py.)"""
    native = tmp_path / "n.h5"
    _py("""
        import numpy as np, h5py
        with h5py.File(PATH, "w") as f:
            f["a"] = np.arange(3)
            v = f.create_dataset("vref", shape=(1,), dtype=h5py.vlen_dtype(h5py.ref_dtype))
            v[0] = np.array([f["a"].ref], dtype=h5py.ref_dtype)
    """, PATH=native)
    p = _h5flow("unpack", str(native), str(tmp_path / "c1.h5"), check=False)
    assert p.returncode == 1 and "/vref" in p.stderr and "cannot be remapped" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["n.h5"]


def test_virtual_datasets_pack_as_values_and_unpack_as_mappings(tmp_path: Path) -> None:
    """A container's virtual dataset (its source a container) packs into a plain dataset holding its values
    and fill value, readable without the plugin; a native file's virtual dataset (source a native file)
    unpacks into a container virtual dataset mapping the same source."""
    _py("""
        import os, h5py, numpy as np
        os.chdir(DIR)
        with h5py.File("src.h5", "w") as s:
            s["data"] = np.arange(5.0)
        lay = h5py.VirtualLayout((7,), "f8"); lay[1:6] = h5py.VirtualSource("src.h5", "data", shape=(5,))
        with h5py.File("c.h5", "w") as f:
            f.create_virtual_dataset("v", lay, fillvalue=-1)
    """, connector=True, DIR=tmp_path)
    _h5flow("pack", str(tmp_path / "c.h5"), str(tmp_path / "out.h5"))
    out = _py("""
        import h5py
        with h5py.File(P, "r") as f:
            print(f["v"].is_virtual, f["v"][...].tolist(), f["v"].fillvalue)
    """, P=tmp_path / "out.h5").stdout
    assert out.split("\n")[0] == "False [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, -1.0] -1.0", out
    _py("""
        import os, h5py, numpy as np
        os.chdir(DIR)
        with h5py.File("nsrc.h5", "w") as s:
            s["data"] = np.arange(3, dtype="i4")
        lay = h5py.VirtualLayout((3,), "i4"); lay[:] = h5py.VirtualSource("nsrc.h5", "data", shape=(3,))
        with h5py.File("n.h5", "w") as f:
            f.create_virtual_dataset("v", lay, fillvalue=9)
    """, DIR=tmp_path)
    _h5flow("unpack", str(tmp_path / "n.h5"), str(tmp_path / "back.h5"))
    out = _py("""
        import h5py
        with h5py.File(P, "r") as f:
            print(f["v"].is_virtual, f["v"][...].tolist())
    """, connector=True, P=tmp_path / "back.h5").stdout
    assert out.split("\n")[0] == "True [0, 1, 2]", out


def test_data_goes_straight_from_the_logs_and_matches_numpy(tmp_path: Path) -> None:
    """pack hands the container's stored runs to the native file without a read buffer (whole chunks with
    H5Dwrite_chunk, the rest with H5Dwrite), and reads through the connector what is not one stored run:
    overwrites (latest write wins, runs out of log order), unwritten parts (fill value), partial edge chunks,
    slabs split inside trailing dimensions. Checked element by element against numpy."""
    src, out = tmp_path / "c.h5", tmp_path / "out.h5"
    _py("""
        import numpy as np
        from h5flow.connectors.logvol import open_container
        with open_container(PATH, "w") as f:
            a = f.create_dataset("a", shape=(100, 8), chunks=(16, 8), dtype="<i4")
            a[:] = np.arange(800).reshape(100, 8)
            a[10:40] = -np.arange(240).reshape(30, 8)           # overwrite: another run, later in the log
            b = f.create_dataset("b", shape=(4, 5, 6), dtype=">f8", fillvalue=7.5)
            for j in range(4):                                # column by column: runs inside the rows
                b[:, j] = np.arange(24.0).reshape(4, 6) + 100 * j   # b[:, 4] stays the fill value
            c = f.create_dataset("c", shape=(3, 50), chunks=(2, 10), dtype="u2")  # chunks not whole rows
            c[:] = np.arange(150).reshape(3, 50)
            f["e"] = np.arange(960.0).reshape(3, 40, 8)        # slabs (1, 16, 8): split inside dimension 1
    """, PATH=src)
    rep = json.loads(_py("""
        import dataclasses, json
        import h5flow
        print(json.dumps(dataclasses.asdict(h5flow.pack(SRC, DST, slab_bytes=1024))))
    """, SRC=src, DST=out).stdout)
    assert rep["direct_chunks"] >= 4 and 0 < rep["direct_bytes"] < rep["data_bytes"], rep
    _py("""
        import h5py, numpy as np
        a = np.arange(800).reshape(100, 8)
        a[10:40] = -np.arange(240).reshape(30, 8)
        b = np.full((4, 5, 6), 7.5)
        for j in range(4):
            b[:, j] = np.arange(24.0).reshape(4, 6) + 100 * j
        with h5py.File(PATH, "r") as f:
            assert (f["a"][()] == a).all() and f["a"].dtype == "<i4" and f["a"].chunks == (16, 8)
            assert (f["b"][()] == b).all() and f["b"].dtype == ">f8" and f["b"].fillvalue == 7.5
            assert (f["c"][()] == np.arange(150).reshape(3, 50)).all() and f["c"].chunks == (2, 10)
            assert (f["e"][()] == np.arange(960.0).reshape(3, 40, 8)).all()
    """, PATH=out)
    _assert_same(_h5diff("--vol-value-2=0", "--vol-name-2=native", src, out))
    # H5FLOW_PACK_DIRECT=0: everything through H5Dread, the same file
    os.environ["H5FLOW_PACK_DIRECT"] = "0"
    try:
        rep = json.loads(_py("""
            import dataclasses, json
            import h5flow
            print(json.dumps(dataclasses.asdict(h5flow.pack(SRC, DST, slab_bytes=1024))))
        """, SRC=src, DST=tmp_path / "through_read.h5").stdout)
    finally:
        del os.environ["H5FLOW_PACK_DIRECT"]
    assert rep["direct_bytes"] == 0 and rep["direct_chunks"] == 0, rep
    _assert_same(_h5diff("--vol-value-1=0", "--vol-name-1=native", "--vol-value-2=0", "--vol-name-2=native", out,
                         tmp_path / "through_read.h5", connector=False))


def test_bench_pack_checks_every_copy_and_reports_the_references(tmp_path: Path) -> None:
    """`h5flow bench pack`: every copy is compared with the native file (h5diff); the command, pack() in-process,
    a plain h5py copy and a POSIX copy of the raw bytes are all timed side by side."""
    row = json.loads(_py("""
        import json
        from h5flow.benchmarks.semantic import bench_pack
        print(json.dumps(bench_pack(1.0, WORK, repeat=1)))
    """, WORK=tmp_path).stdout)
    assert row["same"] is True and row["size_mib"] > 0.9, row
    for k in ("pack_s", "api_s", "h5repack_s", "h5py_s", "posix_s"):
        assert row[k] > 0, (k, row)
    assert row["startup_s"] == pytest.approx(row["pack_s"] - row["api_s"], abs=1e-3)
    assert {"ratio", "ratio_api", "api_vs_h5py", "api_vs_posix", "ratio_cpu", "ratio_api_cpu"} <= set(row)
    assert row["api_cpu_s"] > 0 and row["h5repack_cpu_s"] > 0 and row["posix_cpu_s"] > 0
    # the oracle can say no: a packed file that differs from the native one
    proc = _py("""
        import h5py, os, shutil
        from pathlib import Path
        from h5flow.benchmarks.semantic import _same
        w = Path(WORK)
        shutil.copy(w / "content.h5", w / "changed.h5")
        with h5py.File(w / "changed.h5", "r+") as f:
            f["table/id"][3] = -1
        env = dict(os.environ)
        print(_same(w / "content.h5", w / "packed_api.h5", env), _same(w / "content.h5", w / "changed.h5", env))
    """, WORK=tmp_path)
    assert proc.stdout.split() == ["True", "False"], proc.stdout


def test_pack_command_does_not_load_the_other_commands(tmp_path: Path) -> None:
    """`h5flow pack`/`unpack` are timed against C tools: their parser does not import every other command's
    and benchmark's module (~0.1 s of CPU at start-up)."""
    out = _py("""
        import sys
        from h5flow import cli
        rc = cli.main(["pack", MISSING, OUT])
        print(rc, sorted(m for m in sys.modules if m.startswith(("h5flow.benchmarks", "h5flow.query"))))
    """, MISSING=tmp_path / "missing", OUT=tmp_path / "o.h5")
    assert out.stdout.split() == ["1", "[]"], out.stdout + out.stderr
    assert "no such file or container" in out.stderr


def test_pack_reads_the_logs_with_pread_not_page_faults(tmp_path: Path) -> None:
    """pack copies a container's stored bytes with pread through one reused buffer (checksummed there while
    hot) instead of touching the mapped logs: no page fault per few KiB of the logs. Before, a 48 MiB pack took
    ~800 minor faults on tmpfs (one per 16 pages of mapped log, fault-around) and no read(2) of the data; now
    a handful of faults, and the bytes come in through pread (/proc/self/io rchar)."""
    import shutil
    import tempfile

    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="h5flow-test-pack-", dir=shm)) if shm.is_dir() else tmp_path
    try:
        _pread_not_faults(work)
    finally:
        if work != tmp_path:
            shutil.rmtree(work, ignore_errors=True)


def _pread_not_faults(tmp_path: Path) -> None:
    src = tmp_path / "c.h5"
    proc = _py("""
        import resource, numpy as np
        import h5flow
        from h5flow.connectors.logvol import open_container
        with open_container(SRC, "w") as f:
            d = f.create_dataset("d", shape=(4096, 1024), chunks=(128, 1024), dtype="f8")   # 32 MiB, 1 MiB chunks
            for i in range(0, 4096, 512):                                                 # 4 MiB writes
                d[i:i + 512] = np.arange(i * 1024, (i + 512) * 1024, dtype="f8").reshape(512, 1024)
            f["t"] = np.arange(4 << 20, dtype="i4")                                      # 16 MiB contiguous
        h5flow.pack(SRC, DST)  # the first pack makes the reused buffers
        def rchar():
            with open("/proc/self/io", encoding="ascii") as f:
                return next(int(ln.split()[1]) for ln in f if ln.startswith("rchar:"))
        r0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, rchar()
        rep = h5flow.pack(SRC, DST, force=True)  # opens the container anew: fresh mappings
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0, rchar() - c0, rep.direct_bytes,
              rep.data_bytes)
    """, SRC=src, DST=tmp_path / "out.h5")
    faults, read, direct, total = map(int, proc.stdout.split())
    assert direct == total == 48 << 20, proc.stdout
    assert read >= total, f"{read} bytes read(2) packing 48 MiB: the data logs were not read with pread"
    if str(tmp_path).startswith("/dev/shm/"):  # tmpfs: a fault per 16 pages of a mapped log
        assert faults < 48, f"{faults} minor page faults packing 48 MiB (the logs were faulted in, not read)"
    _assert_same(_h5diff("--vol-value-2=0", "--vol-name-2=native", src, tmp_path / "out.h5"))


def test_pack_checks_checksums_exactly_where_a_read_does(tmp_path: Path) -> None:
    """The pread path checks each write's checksum from its buffer as the bytes go by, across slabs (a write
    cut by a slab boundary), and from the mapped log where a write is not read whole and in order (a write
    partly overwritten: its dead bytes are still checked, as a read checks them; a write whose tail a shrink
    discarded, read in part to the end of the dataset: checked when pack is done with it). A damaged byte in a
    write a read would reject makes pack fail and leave nothing; H5FLOW_LOG_VERIFY=0 packs unchecked."""
    src = tmp_path / "c.h5"
    proc = _py("""
        import os, shutil, subprocess, sys
        from pathlib import Path
        import numpy as np, h5py
        import h5flow
        from h5flow.connectors.logvol import open_container
        from h5flow.packing import PackError
        src = Path(SRC)
        with open_container(src, "w") as f:
            d = f.create_dataset("d", shape=(4096, 256), chunks=(64, 256), dtype="f8")   # 8 MiB
            for i in range(0, 4096, 1024):                                              # four 2 MiB writes
                d[i:i + 1024] = np.arange(i * 256, (i + 1024) * 256, dtype="f8").reshape(1024, 256)
            d[100:200] = -1.0                                                           # overwrites 100 rows
            s = f.create_dataset("s", shape=(1024, 256), maxshape=(None, 256), chunks=(64, 256), dtype="f8")
            s[:] = np.full((1024, 256), 1.5)                                            # one write ...
            s.resize((1000, 256))                      # ... its tail discarded: read in part, to the end
        w = 1024 * 256 * 8  # bytes of one write
        cases = {"inside write 1": ("d", w + 12345), "dead bytes of write 0": ("d", 150 * 2048 + 7),
                 "last byte of write 3": ("d", 4 * w - 1), "inside the overwrite": ("d", 4 * w + 100 * 2048 // 2),
                 "discarded tail": ("s", 1010 * 2048)}
        for name, (dset, off) in cases.items():
            bad = src.parent / "bad.h5"
            shutil.rmtree(bad, ignore_errors=True)
            shutil.copytree(src, bad)
            dat = next((bad / dset).glob("@log.*.dat"))
            raw = bytearray(dat.read_bytes())
            raw[off] ^= 0x40
            dat.write_bytes(bytes(raw))
            try:
                with open_container(bad) as f:
                    f[dset][()]
                read = "ok"
            except Exception as e:
                read = "checksum mismatch" in str(e)
            out = src.parent / "out.h5"
            try:
                h5flow.pack(bad, out, slab_bytes=300 << 10)  # slabs end inside writes
                packed = "ok"
            except PackError as e:
                packed = "checksum mismatch" in str(e)
            left = sorted(p.name for p in src.parent.iterdir())
            env = dict(os.environ, H5FLOW_LOG_VERIFY="0")
            unchecked = subprocess.run([sys.executable, "-c", "import sys, h5flow; "
                                        "h5flow.pack(sys.argv[1], sys.argv[2], slab_bytes=300 << 10)",
                                        str(bad), str(out)], env=env, capture_output=True, text=True).returncode
            print(name, read, packed, left, unchecked, out.exists())
            out.unlink(missing_ok=True)
        h5flow.pack(src, src.parent / "good.h5", slab_bytes=300 << 10)
        print("good ok")
    """, connector=True, SRC=src)
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "good ok" and len(lines) == 6, proc.stdout + proc.stderr
    for ln in lines[:-1]:
        assert ln.endswith(" True True ['bad.h5', 'c.h5'] 0 True"), proc.stdout
    _assert_same(_h5diff("--vol-value-2=0", "--vol-name-2=native", src, tmp_path / "good.h5"))


def test_pack_command_starts_no_blas_threads(tmp_path: Path) -> None:
    """`h5flow pack` does no linear algebra: numpy's OpenBLAS must not start worker threads that spin
    (~0.1 s of CPU per command, measured 0.36 -> 0.26 s for 256 MiB); a value the user set is kept."""
    code = """
        import os, sys
        from h5flow import cli
        rc = cli.main(["pack", MISSING, OUT])
        import numpy
        print(rc, os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
    """
    out = _py(code, MISSING=tmp_path / "missing", OUT=tmp_path / "o.h5")
    rc, blas, threads = out.stdout.split()
    assert (rc, blas) == ("1", "1"), out.stdout + out.stderr
    os.environ["OPENBLAS_NUM_THREADS"] = "2"
    try:
        out = _py(code, MISSING=tmp_path / "missing", OUT=tmp_path / "o.h5")
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]
    assert out.stdout.split()[:2] == ["1", "2"], out.stdout
    assert int(out.stdout.split()[2]) > int(threads), out.stdout  # the user's setting took effect
