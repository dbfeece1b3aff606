"""h5flow_cache, the node-local write cache VOL connector, under unmodified h5py (docs/CACHE.md).

The connector is chosen by the environment only (``HDF5_VOL_CONNECTOR``), so each serial case runs a
script in a subprocess; each script checks that h5flow_cache served the file. The target files are then
read back with the native connector, which proves the cached writes reached the layer below.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from h5flow._paths import default_plugin_dir
from h5flow.testing.pytest_mpi import mpi_assert
from test_vol_h5flow_log import _cmake_build

PLUGIN_DIR = Path(os.environ.get("H5FLOW_CACHE_PLUGIN_DIR", default_plugin_dir()))
NATIVE_ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import os, sys, glob, numpy as np, h5py
from h5flow import _hdf5lib
def opened(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_cache", _hdf5lib.connector_name(f.id.id)
    return f
def cached_bytes(tier):
    total = 0
    for p in glob.glob(os.path.join(tier, "h5flow-cache.*", "seg.*")):
        try:
            total += os.path.getsize(p)
        except FileNotFoundError:  # migrated and deleted meanwhile
            pass
    return total
def cache_dirs(tier):
    return glob.glob(os.path.join(tier, "h5flow-cache.*"))
"""


@pytest.fixture
def tier(tmp_path: Path) -> Path:
    """The node-local cache directory of one test."""
    path = tmp_path / "tier"
    path.mkdir()
    return path


def connector(tier: Path, *extra: str, under: str = "under_vol=0;under_info={}") -> str:
    return "h5flow_cache " + ";".join([f"path={tier}", *extra, under])


def run_script(body: str, conn: str, *args: str, check: bool = True, timeout: int = 120,
               env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR), HDF5_VOL_CONNECTOR=conn, **(env_extra or {}))
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def native_read(path: Path, name: str) -> np.ndarray:
    import h5py

    with h5py.File(path, "r") as f:
        return f[name][()]


def test_plugin_is_built() -> None:
    assert (PLUGIN_DIR / "libh5flow_cache.so").exists(), f"h5flow_cache not built in {PLUGIN_DIR} (make setup)"


def test_writes_land_in_the_tier_then_reach_the_file(tmp_path: Path, tier: Path) -> None:
    """With background migration off the writes stay in the tier until the flush; reads in the same run
    (any selection, a second handle) see them; after the close the cache directory is gone and the native
    connector reads the same values from the target."""
    target = tmp_path / "t.h5"
    run_script("""
        p, tier = sys.argv[1], sys.argv[2]
        rng = np.random.default_rng(1)
        a = rng.integers(0, 1 << 30, size=(64, 50)).astype("i4")
        with opened(h5py.File(p, "w")) as f:
            d = f.create_dataset("a", shape=a.shape, dtype="i4", chunks=(16, 10))
            e = f.create_dataset("e", shape=(1000,), dtype=">f8")
            d[:32] = a[:32]
            d[32:, ::2] = a[32:, ::2]            # strided
            d[32:, 1::2] = a[32:, 1::2]
            d[5, 7] = -1; a[5, 7] = -1            # a write over a cached one
            e[:] = np.linspace(0, 1, 1000)        # converted to big-endian on the way
            assert cached_bytes(tier) >= a.nbytes + 8000, cached_bytes(tier)
            # read after write, same run, before any flush: served from the cache
            assert np.array_equal(d[()], a)
            assert np.array_equal(d[10:40, 3:47:4], a[10:40, 3:47:4])
            assert np.array_equal(d[[1, 5, 60], 7], a[[1, 5, 60], 7])
            assert d[5, 7] == -1 and d.astype("f8")[5, 7] == -1.0
            assert np.allclose(e[100:110], np.linspace(0, 1, 1000)[100:110])
            # a second handle of the same file sees the cached writes
            with h5py.File(p, "r") as g:
                assert np.array_equal(g["a"][20:30], a[20:30])
            f.flush()
            assert cached_bytes(tier) == 0, cached_bytes(tier)
        assert cache_dirs(tier) == [], cache_dirs(tier)
        with opened(h5py.File(p, "r")) as g:                # only reading: no cache directory at all
            assert np.array_equal(g["a"][7], a[7]) and cache_dirs(tier) == []
        np.save(sys.argv[3], a)
    """, connector(tmp_path / "tier", "background=off"), str(target), str(tier), str(tmp_path / "a.npy"))
    assert np.array_equal(native_read(target, "a"), np.load(tmp_path / "a.npy"))
    assert np.allclose(native_read(target, "e"), np.linspace(0, 1, 1000))


def test_h5py_patterns(tmp_path: Path, tier: Path) -> None:
    """h5py's usual patterns with writes still cached: a dataset written through ``f[name][...] =`` (its
    handle closes at once, the connector keeps it open below), opened again by name; appending with
    ``resize`` (growing keeps the earlier appends cached); attributes and groups made meanwhile; a dataset deleted and made again under its name;
    ``len``/``shape``/``dtype``/``keys``."""
    target = tmp_path / "p.h5"
    run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            f.create_dataset("x", shape=(1000,), dtype="i4")
            f["x"][100:200] = np.arange(100)                 # the Dataset object is gone after this line
            assert cached_bytes(sys.argv[2]) > 0
            assert np.array_equal(f["x"][150:160], np.arange(50, 60))   # a new handle sees the cached write
            f["x"].attrs["units"] = "K"
            f.create_group("g/h")
            a = f.create_dataset("a", shape=(0, 8), maxshape=(None, 8), dtype="f8", chunks=(4, 8))
            before = cached_bytes(sys.argv[2])
            for i in range(6):                               # append: growing keeps the earlier rows cached
                a.resize((i + 1) * 3, axis=0)
                a[i * 3:(i + 1) * 3] = i
            assert cached_bytes(sys.argv[2]) - before >= 6 * 3 * 8 * 8, cached_bytes(sys.argv[2]) - before
            a[1:4, 2:5] = -1.0                               # over rows cached before two resizes
            assert np.array_equal(a[0:5, 2], [0, -1, -1, -1, 1])
            a[1:4, 2:5] = [[0.0] * 3, [0.0] * 3, [1.0] * 3]
            assert a.shape == (18, 8) and a.dtype == np.float64 and len(a) == 18
            assert np.array_equal(a[:, 0], np.repeat(np.arange(6.0), 3))
            b = f.create_dataset("b", shape=(10,), maxshape=(None,), dtype="i2")
            b[:] = np.arange(10)
            b.resize((4,))                                   # shrinking migrates first
            b.resize((6,))
            assert list(b[()]) == [0, 1, 2, 3, 0, 0]
            f["y"] = np.ones(10)
            del f["y"]
            f["y"] = np.full(4, 2.5)                         # another dataset under the same name
            assert np.array_equal(f["y"][()], np.full(4, 2.5))
            assert sorted(f.keys()) == ["a", "b", "g", "x", "y"]
        assert cache_dirs(sys.argv[2]) == []
    """, connector(tier, "background=off"), str(target), str(tier))
    import h5py

    with h5py.File(target, "r") as f:
        x = f["x"][()]
        assert np.array_equal(x[100:200], np.arange(100)) and not x[:100].any() and not x[200:].any()
        assert f["x"].attrs["units"] == "K"
        assert np.array_equal(f["a"][:, 7], np.repeat(np.arange(6.0), 3))
        assert np.array_equal(f["y"][()], np.full(4, 2.5))


def test_first_write_of_a_contiguous_dataset_is_not_reordered_after_a_delete(tmp_path: Path, tier: Path) -> None:
    """A contiguous dataset's storage is allocated by its first write. Cached and migrated after a later
    delete, that allocation reused the deleted dataset's space, and the elements the write did not cover read
    back the deleted data instead of 0 (native HDF5 writes no fill value there by default). The first write
    now also writes its first element below at once, which allocates the storage; the writes stay cached."""
    run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            f.create_dataset("old", data=np.full(4096, 0x7F7F7F7F, dtype="i4"))
            d = f.create_dataset("new", shape=(4096,), dtype="i4")
            d[1000:1001] = 5          # cached; allocates "new" below, in the program's order
            d[2000:2001] = 6          # cached
            del f["old"]              # frees its space
            assert cached_bytes(sys.argv[2]) >= 8, "the writes should still be cached"
            d[3000:3001] = 7
            s = f.create_dataset("scalar", shape=(), dtype="f8")
            s[()] = 2.5               # a scalar's first write: its one element allocates it
        with h5py.File(p, "r") as f:
            assert f["scalar"][()] == 2.5
            got = f["new"][()]
        want = np.zeros(4096, dtype="i4")
        want[1000], want[2000], want[3000] = 5, 6, 7
        assert np.array_equal(got, want), np.unique(got)
    """, connector(tier, "background=off"), str(tmp_path / "c.h5"), str(tier))


def test_background_migration_and_capacity(tmp_path: Path, tier: Path) -> None:
    """Background migration empties the tier while the program computes; a capacity smaller than the
    writes keeps the tier at most that full (block), and write_through still stores every value."""
    body = """
        import time
        p, tier, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
        with opened(h5py.File(p, "w")) as f:
            d = f.create_dataset("d", shape=(40, 65536), dtype="f4")
            peak = 0
            for i in range(40):
                d[i] = np.full(65536, i, dtype="f4")
                peak = max(peak, cached_bytes(tier))
            assert peak <= cap, (peak, cap)
            t0 = time.time()
            while cached_bytes(tier) and time.time() - t0 < 20:  # "compute": the migration runs meanwhile
                time.sleep(0.01)
            assert cached_bytes(tier) == 0
            assert np.array_equal(d[:, 5], np.arange(40, dtype="f4"))
        print("ok")
    """
    cap = 4 * 65536 * 4
    for policy in ("block", "write_through"):
        target = tmp_path / f"{policy}.h5"
        run_script(body, connector(tier, f"capacity={cap}", f"policy={policy}"), str(target), str(tier), str(cap))
        got = native_read(target, "d")
        assert np.array_equal(got, np.repeat(np.arange(40, dtype="f4")[:, None], 65536, axis=1))


STACKS = {
    # name: (HDF5_VOL_CONNECTOR with {tier} for the tier, connector that reads the result back)
    "cache/h5flow_log": ("h5flow_cache path={tier};under_vol=311;under_info={{}}", "h5flow_log"),
    "cache/async/native": ("h5flow_cache path={tier};under_vol=312;under_info={{under_vol=0;under_info={{}}}}",
                           None),
    "async/cache/native": ("h5flow_async under_vol=313;under_info={{path={tier};under_vol=0;under_info={{}}}}",
                           None),
}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_stacked(stack: str, tmp_path: Path, tier: Path) -> None:
    """The cache over h5flow_log, over h5flow_async, and under h5flow_async: a round trip with reads in the
    same run, read back through the connector that stores the file."""
    conn, reader = STACKS[stack]
    target = tmp_path / "stacked.h5"
    run_script("""
        with h5py.File(sys.argv[1], "w") as f:
            assert _hdf5lib.connector_name(f.id.id) == sys.argv[3], _hdf5lib.connector_name(f.id.id)
            d = f.create_dataset("x", shape=(100, 20), dtype="i8")
            for i in range(10):
                d[i * 10:(i + 1) * 10] = np.arange(200).reshape(10, 20) + i
            assert d[55, 3] == 5 * 20 + 3 + 5
            assert np.array_equal(d[::7, 19], (np.arange(200).reshape(10, 20)[np.arange(0, 100, 7) % 10, 19]
                                               + np.arange(0, 100, 7) // 10))
        assert glob.glob(os.path.join(sys.argv[2], "h5flow-cache.*")) == []
    """, conn.format(tier=tier), str(target), str(tier), conn.split()[0])
    check = run_script("""
        with h5py.File(sys.argv[1], "r") as f:
            x = f["x"][()]
        want = np.concatenate([np.arange(200).reshape(10, 20) + i for i in range(10)])
        assert np.array_equal(x, want)
    """, reader or "native", str(target))
    assert check.returncode == 0


SAME_FILE_STACKS = {
    "cache": "h5flow_cache path={tier};background=0;under_vol=0;under_info={{}}",
    "cache, background": "h5flow_cache path={tier};under_vol=0;under_info={{}}",
    "cache/async": "h5flow_cache path={tier};background=0;under_vol=312;under_info={{defer=1;under_vol=0;under_info={{}}}}",
    "async/cache": "h5flow_async defer=1;under_vol=313;under_info={{path={tier};background=0;under_vol=0;under_info={{}}}}",
    "async": "h5flow_async defer=1;under_vol=0;under_info={{}}",
}


@pytest.mark.parametrize("stack", sorted(SAME_FILE_STACKS))
def test_one_file_through_two_handles_and_an_external_link(stack: str, tmp_path: Path, tier: Path) -> None:
    """One file below, reached through two handles and through another file's external link: a read through
    any of them sees a write still cached or queued through another, and the last write made is what the file
    keeps (no older cached write is migrated over it at close)."""
    run_script("""
        a, b = sys.argv[1], sys.argv[2]
        want = np.arange(64 * 16, dtype="i4").reshape(64, 16)
        fb = h5py.File(b, "w")
        db = fb.create_dataset("d", shape=(64, 16), dtype="i4")
        fa = h5py.File(a, "w")
        fa["e"] = h5py.ExternalLink(b, "d")
        de = fa["e"]                      # lies in b, reached through a's handle
        de[...] = want
        assert np.array_equal(db[...], want), "b's handle misses a write made through a's link"
        db[...] = want + 1
        assert np.array_equal(de[...], want + 1), "a's link misses a write made through b's handle"
        second = h5py.File(b, "r")
        db[...] = want + 2
        assert np.array_equal(second["d"][...], want + 2), "a second handle misses a write"
        second.close()
        fa.close()
        fb.close()
        with h5py.File(b, "r") as f:
            assert np.array_equal(f["d"][...], want + 2), "the file did not keep the last write"
    """, SAME_FILE_STACKS[stack].format(tier=tier), str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert np.array_equal(native_read(tmp_path / "b.h5", "d"), np.arange(64 * 16).reshape(64, 16) + 2)


def test_error_below_surfaces_at_flush_and_close(tmp_path: Path, tier: Path) -> None:
    """The target file may not grow (RLIMIT_FSIZE): the cached write cannot migrate. The flush says so,
    the close says so, and no call reports success over the lost data."""
    proc = run_script("""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        n = 1 << 18
        f = opened(h5py.File(sys.argv[1], "w"))
        d = f.create_dataset("d", shape=(n,), dtype="i4")
        f.flush()
        resource.setrlimit(resource.RLIMIT_FSIZE, (n * 4 + 1024, resource.RLIM_INFINITY))
        d[:] = np.arange(n, dtype="i4")           # lands in the tier: returns
        assert d[n - 1] == n - 1
        try:
            f.flush()
        except Exception as e:
            print("FLUSH-ERROR", e)
        else:
            print("FLUSH-OK")
        del d
        try:
            f.close()
        except Exception as e:
            print("CLOSE-ERROR", e)
        else:
            print("CLOSE-OK")
    """, connector(tier, "background=off"), str(tmp_path / "full.h5"), check=False)
    out = proc.stdout + proc.stderr
    assert "FLUSH-ERROR" in out, out
    assert "h5flow_cache" in out and "failed" in out, out
    assert "FLUSH-OK" not in out and "CLOSE-OK" not in out, out


def test_kill_during_migration_leaves_the_last_flush(tmp_path: Path, tier: Path) -> None:
    """kill -9 while cached writes migrate (here inside H5Fflush, which migrates 64 MiB on the calling
    thread): the target opens natively, what was flushed is intact, and every element of the unflushed
    dataset holds either its flushed value or the value written, nothing else. The next run sweeps the dead
    process's cache directory."""
    target = tmp_path / "k.h5"
    n, rows = 1 << 16, 128
    body = """
        import time
        from h5py import h5d, h5p
        p, n, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        f = opened(h5py.File(p, "w"))
        f["a"] = np.arange(n, dtype="i8")
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)   # written in place: a partial migration shows
        b = f.create_dataset("b", shape=(rows, n), dtype="i8", dcpl=dcpl)
        b[:] = 7
        f.flush()
        print("flushed", flush=True)
        for i in range(rows):
            b[i] = np.arange(n, dtype="i8") + i * n
        print("queued", flush=True)
        f.flush()
        print("flush returned", flush=True)
        time.sleep(60)
    """
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR), HDF5_VOL_CONNECTOR=connector(tier, "background=off"))
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(target), str(n),
                             str(rows)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("queued"):
                break
        assert lines and lines[-1].startswith("queued"), "".join(lines) + proc.stderr.read()
        time.sleep(0.002)  # into the flush's migration of 64 MiB
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    left = sum(p.stat().st_size for p in tier.glob("h5flow-cache.*/seg.*"))  # what had not migrated
    assert left > 0, "the migration had finished before the kill: the test proves nothing"
    import h5py

    with h5py.File(target, "r") as f:
        assert np.array_equal(f["a"][()], np.arange(n, dtype="i8"))
        b = f["b"][()]
    written = np.arange(rows * n, dtype="i8").reshape(rows, n)
    assert np.all((b == 7) | (b == written)), "values that were never written"
    assert list(tier.glob("h5flow-cache.*")), "the dead process's cache directory should still be there"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f["z"] = np.zeros(3)
        assert cache_dirs(sys.argv[2]) == [], cache_dirs(sys.argv[2])
    """, connector(tier), str(tmp_path / "next.h5"), str(tier))


def test_forked_child_leaves_the_cache_to_its_parent(tmp_path: Path, tier: Path) -> None:
    """A child forked with the file open and writes cached exits (HDF5 closes the file at exit in the
    child too): it neither hangs on the parent's migration thread nor touches the parent's cache, and the
    parent's close writes everything."""
    target = tmp_path / "fork.h5"
    run_script("""
        import time
        f = opened(h5py.File(sys.argv[1], "w"))
        d = f.create_dataset("d", shape=(64, 4096), dtype="f8")
        for i in range(64):
            d[i] = np.full(4096, float(i))
        pid = os.fork()
        if pid == 0:                   # the child: a normal exit (atexit handlers, H5close) with the file open
            sys.exit(0)
        t0 = time.time()
        while time.time() - t0 < 30:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            raise AssertionError("the forked child hung at exit")
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert np.array_equal(d[:, 7], np.arange(64.0))
        f.close()
        assert cache_dirs(sys.argv[2]) == []
    """, connector(tier), str(target), str(tier), timeout=120)
    got = native_read(target, "d")
    assert np.array_equal(got[:, 4095], np.arange(64.0))


def test_program_exiting_with_the_file_open(tmp_path: Path, tier: Path) -> None:
    """A program that ends without closing its file: HDF5 closes it at exit (without its library lock), the
    migration thread may be writing at that moment, and every cached write still reaches the file."""
    target = tmp_path / "exit.h5"
    run_script("""
        f = opened(h5py.File(sys.argv[1], "w"))
        d = f.create_dataset("d", shape=(96, 8192), dtype="i8")
        for i in range(96):
            d[i] = np.arange(8192) + i * 8192
        # no close: the interpreter's exit and HDF5's atexit close the file
    """, connector(tier), str(target))
    got = native_read(target, "d")
    assert np.array_equal(got, np.arange(96 * 8192).reshape(96, 8192))
    assert not list(tier.glob("h5flow-cache.*"))


def test_automatic_directory_is_said(tmp_path: Path) -> None:
    """Without path= or H5FLOW_CACHE_DIR the connector picks a node-local directory and says which."""
    proc = run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f["x"] = np.arange(10)
            assert f["x"][3] == 3
    """, "h5flow_cache under_vol=0;under_info={}", str(tmp_path / "auto.h5"))
    assert "h5flow_cache: no cache directory given" in proc.stderr and "caching in /" in proc.stderr


def test_bad_setting_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_script("""
        h5py.File(sys.argv[1], "w")
    """, connector(tmp_path / "missing-dir"), str(tmp_path / "x.h5"), check=False)
    assert proc.returncode != 0
    assert "not a writable directory" in proc.stderr, proc.stderr


def test_h5flow_info_lists_the_connector() -> None:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR))
    proc = subprocess.run([sys.executable, "-c", "import sys; from h5flow.cli import main; sys.exit(main())", "info"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "h5flow_cache" in proc.stdout, proc.stdout


MPI_CONN = "h5flow_cache under_vol=0;under_info={}"


@pytest.mark.mpi(n=2, env={"HDF5_VOL_CONNECTOR": MPI_CONN, "HDF5_PLUGIN_PATH": str(PLUGIN_DIR),
                           "H5FLOW_CACHE_QUIET": "1"}, timeout=120)
def test_mpi_round_trip(comm, mpi_tmp_path: Path) -> None:
    """Two ranks write their rows (independent and collective) through the cache, read their own rows back
    before the flush, the other rank's after it; the file read natively holds every row. A compressed
    dataset, which HDF5 writes only collectively in an MPI file, is written through."""
    import h5py

    from h5flow import _hdf5lib

    path = mpi_tmp_path / "mpi.h5"
    n = 4096
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "h5flow_cache", "h5flow_cache not loaded")
        d = f.create_dataset("d", shape=(comm.size * 4, n), dtype="f8")
        for k in range(2):
            d[comm.rank * 4 + k] = np.full(n, comm.rank * 10 + k, dtype="f8")
        with d.collective:
            d[comm.rank * 4 + 2: comm.rank * 4 + 4] = np.full((2, n), comm.rank * 10 + 2, dtype="f8")
        z = f.create_dataset("z", shape=(comm.size, 256), dtype="i4", chunks=(1, 256), compression="gzip")
        with z.collective:  # a filtered dataset of an MPI file: HDF5 needs the write collective; not cached
            z[comm.rank] = np.arange(256, dtype="i4") * (comm.rank + 1)
        mine = d[comm.rank * 4: comm.rank * 4 + 4, 0]
        mpi_assert(comm, list(mine) == [comm.rank * 10, comm.rank * 10 + 1, comm.rank * 10 + 2,
                                        comm.rank * 10 + 2], f"own rows before flush: {mine}")
        f.flush()
        comm.Barrier()
        other = (comm.rank + 1) % comm.size
        got = d[other * 4, :5]
        mpi_assert(comm, np.all(got == other * 10), f"other rank's row after flush: {got}")
        zrow = z[other]
        mpi_assert(comm, np.array_equal(zrow, np.arange(256) * (other + 1)), f"filtered row: {zrow[:4]}")
    comm.Barrier()
    if comm.rank == 0:
        with h5py.File(path, "r", driver="core") as f:
            col = f["d"][:, 17]
        want = [r * 10 + k for r in range(comm.size) for k in (0, 1, 2, 2)]
        assert list(col) == want, col


SANITIZERS = {  # variant: (build directory, CMake options)
    "normal": ("native", ()),
    "asan-ubsan": ("native-asan", ("-DH5FLOW_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug")),
    "tsan": ("native-tsan", ("-DH5FLOW_TSAN=ON", "-DCMAKE_BUILD_TYPE=Debug")),
}


@pytest.mark.parametrize("variant", [v if v == "normal" else pytest.param(v, marks=pytest.mark.full_only)
                                     for v in sorted(SANITIZERS)])
def test_ctest_suites(variant: str) -> None:
    """The connector's C tests (the engine against a native twin, with its migration thread; the plugin
    under an unmodified HDF5 program), plain, under ASan/UBSan and under ThreadSanitizer."""
    assert shutil.which("cmake"), "cmake is part of the stack (make setup)"
    name, options = SANITIZERS[variant]
    build = NATIVE_ROOT / "build" / name
    plugins = PLUGIN_DIR
    if options:
        _cmake_build(build, *options, targets=("connectors/h5flow_cache/all",))
        plugins = build / "plugins"
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(plugins),
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1",
               UCX_MEM_EVENTS="no", UCX_MEM_MALLOC_HOOKS="no")  # as `make tsan` (docs/BUILD.md)
    r = subprocess.run(["ctest", "--output-on-failure", "--test-dir", str(build / "connectors" / "h5flow_cache")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "100% tests passed" in r.stdout, r.stdout


@pytest.mark.mpi(n=2, env={"HDF5_VOL_CONNECTOR": MPI_CONN, "HDF5_PLUGIN_PATH": str(PLUGIN_DIR),
                           "H5FLOW_CACHE_QUIET": "1", "H5FLOW_CACHE_BACKGROUND": "off"}, timeout=120)
def test_mpi_error_on_one_rank_fails_the_flush_on_every_rank(comm, mpi_tmp_path: Path) -> None:
    """Rank 1's cached write cannot reach the shared file (RLIMIT_FSIZE on rank 1 only). The collective
    flush fails on both ranks (neither waits for ever), the data stays cached, and once the cause is gone
    the close writes it: the file holds both rows."""
    import resource

    import h5py

    n = 1 << 17  # one row = 1 MiB
    path = mpi_tmp_path / "mpi-err.h5"
    f = h5py.File(path, "w", driver="mpio", comm=comm)
    d = f.create_dataset("d", shape=(comm.size, n), dtype="f8")
    f.flush()
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    if comm.rank == 1:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n * 8 + (n * 8) // 2, old[1]))
    d[comm.rank] = np.full(n, comm.rank + 1.0)
    failed = False
    try:
        f.flush()
    except Exception:
        failed = True
    mpi_assert(comm, failed, "the flush should fail on every rank")
    if comm.rank == 1:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    del d
    f.close()
    comm.Barrier()
    with h5py.File(path, "r", driver="mpio", comm=comm) as g:
        col = g["d"][:, 100]
    mpi_assert(comm, list(col) == [1.0, 2.0], f"after the retry: {col}")
