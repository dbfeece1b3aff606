"""h5flow_log semantic restructuring (``h5flow restructure``): one dataset rewritten into shards.

docs/FORMAT.md, "Restructured datasets", is the contract: values read the same through any HDF5 program,
no other file of the container changes, a kill at any point leaves a container that reads the same values,
later writes win over the shards, statistics stay right. Scripts that need the connector run in a
subprocess with its environment (as in test_vol_h5flow_log.py); the MPI case runs under the pytest MPI
plugin.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import signal
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
def opened(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log", _hdf5lib.connector_name(f.id.id)
    return f
"""


def run_script(body: str, *args: str, env: dict[str, str] | None = None, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, **LOG_ENV, **(env or {}))
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args], env=e,
                          capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``h5flow ...`` as a user runs it: without the connector's environment (it starts a helper)."""
    e = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], env=e, capture_output=True, text=True,
                          timeout=120)


def values(path: Path, name: str = "g/d") -> np.ndarray:
    """The dataset's values read through the connector (h5py in a subprocess)."""
    tmp = path.parent / f"{path.name}.{name.replace('/', '_')}.npy"
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            np.save(sys.argv[3], f[sys.argv[2]][...])
    """, str(path), name, str(tmp))
    a = np.load(tmp)
    tmp.unlink()
    return a


def files(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file of the container (except under `skip`) with its SHA-256."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not (skip and skip in p.parents):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


ROWS, COLS = 48, 37


def make_container(p: Path) -> np.ndarray:
    """g/d (ROWS x COLS float64) written row-wise in many small writes over two sessions (two epochs, the
    second overwriting some rows), plus other objects that must not change."""
    run_script("""
        R, C = int(sys.argv[2]), int(sys.argv[3])
        a = np.arange(R * C, dtype="f8").reshape(R, C)
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("g/d", (R, C), dtype="f8", maxshape=(None, C), chunks=(8, C))
            for r in range(0, R, 2):
                d[r:r + 2] = a[r:r + 2]
            f.create_dataset("g/other", data=np.arange(100, dtype="i4"))
            f.create_dataset("top", data=np.ones((4, 4)))
            f["g/d"].attrs["units"] = "m"
            f.attrs["title"] = "restructure test"
        with opened(h5py.File(sys.argv[1], "a")) as f:
            d = f["g/d"]
            for r in range(5, R, 7):
                d[r] = -r
                a[r] = -r
            d[3, 4:9] = 1e6
            a[3, 4:9] = 1e6
        np.save(sys.argv[4], a)
    """, str(p), str(ROWS), str(COLS), str(p.parent / "expect.npy"))
    return np.load(p.parent / "expect.npy")


def sidecar_version(dset_dir: Path) -> int:
    return struct.unpack_from("<I", (dset_dir / "@dataset").read_bytes(), 8)[0]


def test_column_order_same_values_nothing_else_touched(tmp_path: Path) -> None:
    """--order column: every value reads the same (h5py, h5diff against a native copy), every file outside
    the dataset's directory is byte-identical (the marker too: no epoch is claimed), the superseded logs and
    statistics are gone, the sidecar has version 5, `h5flow ls` shows the layout."""
    p = tmp_path / "c.h5"
    a = make_container(p)
    before = files(p, skip=p / "g" / "d")
    attr = (p / "g" / "d" / next(x.name for x in (p / "g" / "d").iterdir() if x.name.startswith("@attr.")))
    attr_bytes = attr.read_bytes()
    assert sorted((p / "g" / "d").glob("@log.*.idx")) and sidecar_version(p / "g" / "d") == 1
    r = cli("restructure", str(p), "g/d", "--order", "column")
    assert r.returncode == 0, r.stderr
    assert f"{COLS} shards of {ROWS}x1" in r.stdout, r.stdout
    assert files(p, skip=p / "g" / "d") == before
    assert attr.read_bytes() == attr_bytes
    names = sorted(x.name for x in (p / "g" / "d").iterdir())
    assert names == sorted(["@dataset", "@shards.1.dat", attr.name]), names
    assert sidecar_version(p / "g" / "d") == 5
    # ROWS*COLS*8 bytes of shards and one CRC32C per shard: a constant-size description, no offsets
    assert (p / "g" / "d" / "@shards.1.dat").stat().st_size == ROWS * COLS * 8 + 4 * COLS
    assert np.array_equal(values(p), a)
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["g/d"]
            a = np.load(sys.argv[2])
            assert np.array_equal(d[:, [0, 3, 4, 36]], a[:, [0, 3, 4, 36]])
            assert np.array_equal(d[3:40:3, 2:30:5], a[3:40:3, 2:30:5])
            assert np.array_equal(d[47, :], a[47, :]) and d[3, 5] == 1e6
            assert d.attrs["units"] == "m" and d.chunks == (8, 37) and d.maxshape == (None, 37)
            # H5Dget_storage_size: the shard file (h5diff -c calls a dataset of size 0 empty)
            assert d.id.get_storage_size() == 48 * 37 * 8 + 4 * 37, d.id.get_storage_size()
            print("ok")
    """, str(p), str(tmp_path / "expect.npy"))
    assert out.stdout.strip() == "ok"
    ls = cli("ls", str(p))
    assert ls.returncode == 0, ls.stderr
    line = next(x for x in ls.stdout.splitlines() if x.startswith("/g/d "))
    assert "layout=column:48x1:gen1" in line and "writers=0" in line, ls.stdout
    # any HDF5 program with the plugin: h5diff finds the container equal to a native copy
    native = tmp_path / "native.h5"
    import h5py

    with h5py.File(native, "w") as f:
        f.create_dataset("g/d", data=a, maxshape=(None, COLS), chunks=(8, COLS)).attrs["units"] = "m"
    h5diff = shutil.which("h5diff")
    if h5diff:  # the stack's bin directory is on PATH under make test
        d = subprocess.run([h5diff, "--vol-name-2=native", "--vol-value-2=0", str(p), str(native), "/g/d"],
                           env=dict(os.environ, **LOG_ENV), capture_output=True, text=True, timeout=60)
        assert d.returncode == 0, d.stdout + d.stderr


def test_general_chunks_and_reshard_again(tmp_path: Path) -> None:
    """--chunks on a 3-D dataset with edge shards, hyperslab and point selections; a second restructure
    (--order row) supersedes the first generation's shard file."""
    p = tmp_path / "c.h5"
    run_script("""
        a = np.random.default_rng(7).integers(-1000, 1000, size=(5, 7, 11)).astype("i4")
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("g/d", a.shape, dtype="i4", fillvalue=-5)
            for i in range(5):
                for j in range(0, 7, 3):
                    d[i, j:j + 3] = a[i, j:j + 3]
            d[2, 6, :] = 9
            a[2, 6, :] = 9
        np.save(sys.argv[2], a)
    """, str(p), str(tmp_path / "a.npy"))
    a = np.load(tmp_path / "a.npy")
    r = cli("restructure", str(p), "g/d", "--chunks", "2,3,4")
    assert r.returncode == 0, r.stderr
    assert "27 shards of 2x3x4" in r.stdout, r.stdout  # 3 x 3 x 3 shards of 24 elements (edges padded)
    assert (p / "g" / "d" / "@shards.1.dat").stat().st_size == 27 * 24 * 4 + 27 * 4
    assert np.array_equal(values(p), a)
    run_script("""
        a = np.load(sys.argv[2])
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["g/d"]
            for sel in [np.s_[1:4, 2:7, 3:10], np.s_[4, :, 10], np.s_[:, 6, ::3], np.s_[[0, 2, 4], 1, :]]:
                assert np.array_equal(d[sel], a[sel]), sel
    """, str(p), str(tmp_path / "a.npy"))
    r = cli("restructure", str(p), "g/d", "--order", "row")
    assert r.returncode == 0, r.stderr
    assert sorted(x.name for x in (p / "g" / "d").iterdir()) == ["@dataset", "@shards.2.dat"]
    assert np.array_equal(values(p), a)
    bad = cli("restructure", str(p), "g/d", "--chunks", "2,3")
    assert bad.returncode == 1 and "3 dimensions" in bad.stderr and "3 shard sizes" in bad.stderr, bad.stderr


def test_writes_after_restructure_win(tmp_path: Path) -> None:
    """Latest write wins over the shards: overwrites, a grow (new rows), a shrink and regrow (fill value
    over the shards' rows), across reopen; a second restructure folds them in and removes their logs."""
    p = tmp_path / "c.h5"
    a = make_container(p)
    assert cli("restructure", str(p), "g/d", "--order", "column").returncode == 0
    run_script("""
        a = np.load(sys.argv[2])
        with opened(h5py.File(sys.argv[1], "a")) as f:
            d = f["g/d"]
            d[10:12, 3:6] = 7.5
            a[10:12, 3:6] = 7.5
            assert np.array_equal(d[:, 4], a[:, 4])  # own write, same session
            d.resize((a.shape[0] + 4, a.shape[1]))
            d[-4:] = 1.0
            a = np.concatenate([a, np.ones((4, a.shape[1]))])
            d.resize((40, a.shape[1]))   # shrink: rows 40.. discarded
            d.resize((a.shape[0], a.shape[1]))
            a[40:] = 0.0                  # regrown rows read as the fill value, not the shards
        np.save(sys.argv[2], a)
    """, str(p), str(tmp_path / "expect.npy"))
    a = np.load(tmp_path / "expect.npy")
    assert np.array_equal(values(p), a)
    assert sidecar_version(p / "g" / "d") == 5  # H5Dset_extent kept the layout
    r = cli("restructure", str(p), "g/d", "--chunks", "16,16")
    assert r.returncode == 0, r.stderr
    assert not list((p / "g" / "d").glob("@log.*")) and not list((p / "g" / "d").glob("@stats.*"))
    assert np.array_equal(values(p), a)
    run_script("""
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][0, 0] = 123.0
        with opened(h5py.File(sys.argv[1], "r")) as f:
            assert f["g/d"][0, 0] == 123.0 and f["g/d"][0, 1] == 1.0
    """, str(p))


def test_pack_of_a_restructured_dataset_with_later_writes(tmp_path: Path) -> None:
    """`h5flow pack` copies stored runs straight from the data logs (pack.c); a restructured dataset's
    values mostly live in the shard file, with later writes in logs over it. The packed native file (read
    without the plugin) holds exactly the values the connector reads: the shards where no later write
    covers them, the later writes where they do."""
    import h5py

    p, out = tmp_path / "c.h5", tmp_path / "packed.h5"
    a = make_container(p)
    assert cli("restructure", str(p), "g/d", "--order", "column").returncode == 0
    run_script("""
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][10:14, :] = -2.5
            f["g/d"][:, 7] = 9.0
    """, str(p))
    a[10:14, :] = -2.5
    a[:, 7] = 9.0
    r = cli("pack", str(p), str(out))
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert np.array_equal(f["g/d"][...], a)
        assert np.array_equal(f["g/other"][...], np.arange(100, dtype="i4"))


def test_stats_after_restructure(tmp_path: Path) -> None:
    """`h5flow stats` after a restructure: one row per shard, computed from the shards' visible
    elements; with a later overwrite, the overwritten elements count for the write, not the shard."""
    from h5flow.stats import read_stats

    p = tmp_path / "c.h5"
    a = make_container(p)
    assert cli("restructure", str(p), "g/d", "--order", "column").returncode == 0
    recs = read_stats(p, "g/d", as_frame=False)
    assert len(recs) == COLS and all(r["shard"].startswith("r1.") for r in recs)
    for r in recs:
        c = r["write"]
        assert r["visible"] == ROWS and r["first"] == [0, c] and r["last"] == [ROWS - 1, c]
        assert r["min"] == a[:, c].min() and r["max"] == a[:, c].max() and np.isclose(r["sum"], a[:, c].sum())
        assert r["argmax"] == [int(a[:, c].argmax()), c] and sum(r["hist"]["counts"]) == ROWS
    run_script("""
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][0:2, 0:2] = 5e6
    """, str(p))
    a[0:2, 0:2] = 5e6
    recs = read_stats(p, "g/d", as_frame=False)
    assert sum(r["visible"] for r in recs) == a.size
    assert np.isclose(sum(r["sum"] for r in recs), a.sum()) and max(r["max"] for r in recs) == 5e6
    col0 = next(r for r in recs if r["shard"] == "r1.0")
    assert col0["visible"] == ROWS - 2 and col0["max"] == a[2:, 0].max()
    table = cli("stats", str(p), "g/d")
    assert table.returncode == 0 and "r1.36" in table.stdout, table.stdout + table.stderr


@pytest.mark.parametrize("point", ["data", "before_switch", "after_switch", "cleanup"])
def test_kill_during_restructure(tmp_path: Path, point: str) -> None:
    """A restructure killed (SIGKILL) while writing the shards, before the switch, right after it, and in
    the middle of removing the superseded files: the container opens and reads the same values, no other
    file changed; the next restructure removes what was left and succeeds."""
    p = tmp_path / "c.h5"
    a = make_container(p)
    before = files(p, skip=p / "g" / "d")
    r = cli("restructure", str(p), "g/d", "--order", "column", env={"H5FLOW_LOG_RESTRUCTURE_KILL": point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout + r.stderr)  # the connector killed it
    assert np.array_equal(values(p), a)
    assert files(p, skip=p / "g" / "d") == before
    d = p / "g" / "d"
    switched = point in ("after_switch", "cleanup")
    assert sidecar_version(d) == (5 if switched else 1)
    if point == "after_switch":
        assert list(d.glob("@log.*")), "nothing should have been removed yet"
    ls = cli("ls", str(p))
    assert ls.returncode == 0 and ("layout=column" in ls.stdout) == switched, ls.stdout + ls.stderr
    r = cli("restructure", str(p), "g/d", "--chunks", "10,10")
    assert r.returncode == 0, r.stderr
    gen = 2 if switched else 1
    assert sorted(x.name for x in d.iterdir() if not x.name.startswith("@attr.")) == \
        ["@dataset", f"@shards.{gen}.dat"]
    assert np.array_equal(values(p), a)


def test_refusals_and_checksums(tmp_path: Path) -> None:
    """Filtered, variable-length and scalar datasets are refused with a message; a damaged shard fails
    the read that touches it (naming the file), while other shards still read: a column read does not
    touch the rest of the dataset."""
    p = tmp_path / "c.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("z", data=np.arange(1000.0), compression="gzip")
            f.create_dataset("s", data=["a", "bc"], dtype=h5py.string_dtype())
            f.create_dataset("scalar", data=3.0)
            f.create_dataset("d", data=np.arange(200.0).reshape(10, 20))
    """, str(p))
    for name, why in [("z", "filtered"), ("s", "variable-length"), ("scalar", "scalar")]:
        r = cli("restructure", str(p), name, "--order", "column")
        assert r.returncode == 1 and "cannot be restructured" in r.stderr and why in r.stderr, r.stderr
        assert sidecar_version(p / name) != 5
    assert cli("restructure", str(p), "d", "--order", "column").returncode == 0
    shards = p / "d" / "@shards.1.dat"
    raw = bytearray(shards.read_bytes())
    raw[7 * 10 * 8 + 3] ^= 0xFF  # column 7's shard
    shards.write_bytes(bytes(raw))
    r = run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            assert np.array_equal(f["d"][:, 3], np.arange(3.0, 200.0, 20.0))
            try:
                f["d"][:, 7]
            except OSError as e:
                print("refused", e)
    """, str(p))
    assert r.stdout.startswith("refused"), r.stdout + r.stderr
    assert "checksum mismatch" in r.stdout and "@shards.1.dat" in r.stdout, r.stdout


@pytest.mark.mpi(n=4, env=LOG_ENV, timeout=240)
def test_mpi_four_writers_then_restructure(comm, mpi_tmp_path: Path) -> None:
    """4 ranks write interleaved rows in many small writes (4 log pairs); rank 0 restructures the dataset
    by columns; every rank then reads every column set right, and writes after it win."""
    import h5py

    from h5flow.restructure import restructure

    path = mpi_tmp_path / "mpi.h5"
    rows, cols = 16 * comm.size, 24
    a = np.arange(rows * cols, dtype="f8").reshape(rows, cols)
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        d = f.create_dataset("d", (rows, cols), dtype="f8")
        for r in range(comm.rank, rows, comm.size):
            d[r] = a[r]
    comm.Barrier()
    logs = sorted(x.name for x in (path / "d").glob("@log.*.idx"))
    mpi_assert(comm, len(logs) == comm.size, f"one index log per rank: {logs}")
    err = ""
    if comm.rank == 0:
        try:
            res = restructure(path, "d", order="column")
            err = "" if res["shards"] == cols and res["removed"] >= 2 * comm.size else str(res)
        except Exception as e:  # reported by mpi_assert on every rank
            err = repr(e)
    err = comm.bcast(err, root=0)
    mpi_assert(comm, not err, err)
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        d = f["d"]
        ok = np.array_equal(d[...], a) and np.array_equal(d[:, [comm.rank, 20]], a[:, [comm.rank, 20]])
    mpi_assert(comm, ok, f"rank {comm.rank} read wrong values after the restructure")
    with h5py.File(path, "a", driver="mpio", comm=comm) as f:
        f["d"][comm.rank, :] = -1.0
    a[:comm.size, :] = -1.0
    comm.Barrier()
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        ok = np.array_equal(f["d"][...], a)
    mpi_assert(comm, ok, f"rank {comm.rank}: a write after the restructure does not win")


def test_copies_of_a_restructured_dataset(tmp_path: Path) -> None:
    """H5Ocopy (h5py copy) of a restructured dataset that was written again afterwards: within the
    container (shards and logs copied as they are) and into another container (data written anew, the
    copy not restructured: its sidecar drops the layout, no shard file) — both read the latest values."""
    p, q = tmp_path / "c.h5", tmp_path / "other.h5"
    a = make_container(p)
    assert cli("restructure", str(p), "g/d", "--order", "column").returncode == 0
    run_script("""
        a = np.load(sys.argv[3])
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][7, :] = 42.0
        a[7, :] = 42.0
        with opened(h5py.File(sys.argv[1], "a")) as f, opened(h5py.File(sys.argv[2], "w")) as g:
            f.copy("g/d", "g/d2")
            f.copy("g/d", g, "d")
        with opened(h5py.File(sys.argv[1], "r")) as f, opened(h5py.File(sys.argv[2], "r")) as g:
            assert np.array_equal(f["g/d2"][...], a) and np.array_equal(g["d"][...], a)
            assert np.array_equal(f["g/d"][...], a)
    """, str(p), str(q), str(tmp_path / "expect.npy"))
    assert sidecar_version(q / "d") == 1 and not list((q / "d").glob("@shards.*"))
    assert sidecar_version(p / "g" / "d2") == 5


def test_writer_opened_before_the_restructure_is_refused(tmp_path: Path) -> None:
    """A process that opened the container for writing (and wrote the dataset) before another process
    restructured it cannot write the dataset again in that open: its epoch orders before the shards, its
    writes would be hidden. It is refused with a message saying to reopen; after reopening it writes."""
    p = tmp_path / "c.h5"
    a = make_container(p)
    r = run_script("""
        import subprocess
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][0, 0] = 11.0
            f["g/d"].id.flush()
            f.flush()
            env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR",)}
            subprocess.run([sys.executable, "-m", "h5flow.cli", "restructure", sys.argv[1], "g/d",
                            "--order", "row"], env=env, check=True)
            try:
                f["g/d"][1, 1] = 12.0
                print("written")
            except OSError as e:
                print("refused", e)
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["g/d"][1, 1] = 12.0
        with opened(h5py.File(sys.argv[1], "r")) as f:
            print(f["g/d"][0, 0], f["g/d"][1, 1])
    """, str(p))
    lines = r.stdout.splitlines()
    msg = next((x for x in lines if x.startswith(("refused", "written"))), "")
    assert msg.startswith("refused") and "restructured" in msg and "open it again" in msg, r.stdout
    assert lines[-1] == "11.0 12.0", r.stdout


def test_reader_open_across_a_restructure(tmp_path: Path) -> None:
    """A reader whose index was built before a restructure in another process keeps reading the same
    values (its files stay mapped although removed); after refresh it reads from the shards, the same."""
    p = tmp_path / "c.h5"
    make_container(p)
    r = run_script("""
        import subprocess
        a = np.load(sys.argv[2])
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["g/d"]
            assert np.array_equal(d[:, 5], a[:, 5])  # the index is built: old logs mapped
            env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
            subprocess.run([sys.executable, "-m", "h5flow.cli", "restructure", sys.argv[1], "g/d",
                            "--order", "column"], env=env, check=True, capture_output=True)
            assert not [n for n in os.listdir(os.path.join(sys.argv[1], "g", "d")) if n.startswith("@log.")]
            assert np.array_equal(d[...], a)
            d.refresh()
            assert np.array_equal(d[...], a) and np.array_equal(d[:, [1, 30]], a[:, [1, 30]])
        print("ok")
    """, str(p), str(tmp_path / "expect.npy"))
    assert r.stdout.strip() == "ok", r.stdout + r.stderr
