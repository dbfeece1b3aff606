"""h5flow_async (docs/ASYNC.md) under unmodified h5py and MPI, and its C tests.

The C tests (native/connectors/h5flow_async/tests/test_async.c: event sets, implicit mode, merged and
batched writes, failures through the event set and at flush/close) run through ctest, normally and
under ASan/UBSan; `make tsan` runs them under ThreadSanitizer. Here: h5py's patterns through the
connector stacked on native and on h5flow_log, the counters that say what was merged, parallel files,
and the refusal of an MPI without MPI_THREAD_MULTIPLE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

from h5flow._paths import default_plugin_dir
from h5flow.testing.pytest_mpi import mpi_assert

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
ASYNC_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_async under_vol=0;under_info={}", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_async.so").exists(),
                                reason="h5flow_async not built (make setup)")

H5PY_SCRIPT = r"""
import json, sys, numpy as np, h5py
from h5flow import _hdf5lib
path, stats = sys.argv[1], sys.argv[2]
rows, cols = 200, 33
want = np.arange(rows * cols, dtype="f8").reshape(rows, cols)
with h5py.File(path, "w") as f:
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_async"
    d = f.create_dataset("d", shape=(rows, cols), dtype="f8")
    g = f.create_dataset("g", shape=(0, cols), maxshape=(None, cols), dtype="i4", chunks=(16, cols))
    buf = np.empty(cols)
    for r in range(rows):
        buf[:] = want[r]
        d[r] = buf            # returns once copied: the buffer is reused at once
        buf[:] = -1
    for r in range(10):       # resize (waits for the queue) then write, as appending code does
        g.resize((r + 1, cols))
        g[r] = np.full(cols, r)
    d[5, 3:7] = 0.5           # an overlapping later write wins
    want[5, 3:7] = 0.5
    second = h5py.File(path, "r")   # a second handle sees everything written so far
    assert np.array_equal(second["d"][:], want)
    second.close()
    f.attrs["done"] = 1
    assert np.array_equal(d[:], want) and np.array_equal(g[:, 0], np.arange(10))
with h5py.File(path, "r") as f:
    assert np.array_equal(f["d"][:], want)
lines = [json.loads(x) for x in open(stats)]  # one per closed handle: the writer's has the writes
print(json.dumps(max(lines, key=lambda x: x["writes"])))
"""


# explicit_copy=0 leaves plain writes alone: the script changes each buffer at once, the writes stay queued (defer=1)
@pytest.mark.parametrize("below, extra", [("0", ""), ("h5flow_log", ""), ("0", "explicit_copy=0;")])
def test_h5py_writes_return_at_once_and_every_value_arrives(below: str, extra: str, tmp_path: Path) -> None:
    stats = tmp_path / "stats.jsonl"
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR),
               HDF5_VOL_CONNECTOR=f"h5flow_async defer=1;{extra}stats={stats};under_vol={below};under_info={{}}")
    proc = subprocess.run([sys.executable, "-c", H5PY_SCRIPT, str(tmp_path / "f.h5"), str(stats)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    # deferred until waited for: the 200 row writes are adjacent and became one call below
    assert counts["writes"] == 211 and counts["failures"] == 0 and counts["uncopied"] == 0, counts
    assert counts["merged"] >= 199 and counts["calls_below"] <= 12, counts


def test_a_tight_memory_bound_makes_writes_wait_not_lose(tmp_path: Path) -> None:
    script = r"""
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    d = f.create_dataset("d", shape=(64, 1000), dtype="f8")
    for r in range(64):
        d[r] = np.full(1000, r, dtype="f8")
with h5py.File(sys.argv[1], "r") as f:
    assert np.array_equal(f["d"][:, 17], np.arange(64)), f["d"][:, 17]
print("ok")
"""
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR),
               HDF5_VOL_CONNECTOR="h5flow_async max_mem=20K;under_vol=0;under_info={}")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "f.h5")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("setting, says", [("max_mem=lots", "K, M, G or T"), ("explicit_copy=maybe", "1 or 0")])
def test_settings_are_checked(tmp_path: Path, setting: str, says: str) -> None:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR),
               HDF5_VOL_CONNECTOR=f"h5flow_async {setting};under_vol=0;under_info={{}}")
    proc = subprocess.run([sys.executable, "-c", "import h5py, sys; h5py.File(sys.argv[1], 'w')",
                           str(tmp_path / "f.h5")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and setting in proc.stderr and says in proc.stderr, proc.stderr


def test_mpi_without_thread_multiple_is_refused_at_open(tmp_path: Path) -> None:
    script = r"""
import sys, mpi4py
mpi4py.rc.thread_level = "single"
from mpi4py import MPI
import h5py
try:
    h5py.File(sys.argv[1], "w", driver="mpio", comm=MPI.COMM_WORLD)
except OSError as e:
    print("refused:", e)
"""
    env = dict(os.environ, **ASYNC_ENV)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "f.h5")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout and "MPI_THREAD_MULTIPLE" in proc.stdout, proc.stdout
    assert "MPI_THREAD_SINGLE" in proc.stdout


ASYNC_LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_async under_vol=h5flow_log;under_info={}",
                 "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}


@pytest.mark.mpi(n=2, env=ASYNC_ENV, timeout=180)
def test_mpi_collective_writes_through_the_background_thread(comm, mpi_tmp_path: Path) -> None:
    """Both ranks write their rows collectively; metadata operations between them (collective in parallel
    HDF5) wait for the queue, so every rank makes them in the same order."""
    _mpi_round_trip(comm, mpi_tmp_path / "par.h5")


@pytest.mark.mpi(n=2, env=ASYNC_LOG_ENV, timeout=180)
def test_mpi_round_trip_over_h5flow_log(comm, mpi_tmp_path: Path) -> None:
    _mpi_round_trip(comm, mpi_tmp_path / "par-log.h5")


def _mpi_round_trip(comm, path: Path) -> None:
    import h5py

    from h5flow import _hdf5lib

    rows, cols = 8, 1000
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "h5flow_async", "h5flow_async not loaded")
        for k in range(3):
            d = f.create_dataset(f"d{k}", shape=(rows * comm.size, cols), dtype="f8")
            with d.collective:
                for r in range(rows):
                    d[comm.rank * rows + r] = np.full(cols, k * 1000 + comm.rank * rows + r, dtype="f8")
            d.attrs["k"] = k
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        for k in range(3):
            col = f[f"d{k}"][:, 5]
            mpi_assert(comm, np.array_equal(col, k * 1000 + np.arange(rows * comm.size)), f"d{k}: {col}")


def _last_column_and_stats(comm, path: Path, cols: int, rows: int, stats: Path, keys: tuple[str, ...]) -> dict:
    """Checks that row i of dataset d of path holds i (its last column read back on every rank), then sums the
    counters `keys` over every closed file handle's line of the stats file (read and removed by rank 0)."""
    import h5py

    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        col = f["d"][:, cols - 1]
    mpi_assert(comm, np.array_equal(col, np.arange(rows * comm.size)), f"read back {col}")
    comm.Barrier()
    total = None
    if comm.rank == 0:
        lines = [json.loads(x) for x in stats.read_text().splitlines()]
        stats.unlink()
        total = {k: sum(x[k] for x in lines) for k in keys}
    return comm.bcast(total)


ADAPT_STATS = Path(tempfile.gettempdir()) / f"h5fa-adapt-{uuid.uuid4().hex}.jsonl"
ADAPT_ENV = {"HDF5_VOL_CONNECTOR": f"h5flow_async stats={ADAPT_STATS};under_vol=0;under_info={{}}",
             "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}


@pytest.mark.mpi(n=2, env=ADAPT_ENV, timeout=180)
def test_mpi_back_to_back_large_collective_writes(comm, mpi_tmp_path: Path) -> None:
    """Rows of 1.5 MiB written collectively back to back: the adapt rule may run some at the call (on either rank,
    by timing) after the queue; the collectives still match and every value arrives."""
    import h5py

    stats = Path(os.environ["HDF5_VOL_CONNECTOR"].split("stats=")[1].split(";")[0])
    path = mpi_tmp_path / "adapt.h5"
    rows, cols = 6, 3 << 16
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        d = f.create_dataset("d", shape=(rows * comm.size, cols), dtype="f8")
        with d.collective:
            for r in range(rows):
                d[comm.rank * rows + r] = np.full(cols, comm.rank * rows + r, dtype="f8")
    total = _last_column_and_stats(comm, path, cols, rows, stats, ("writes", "queued", "ran_at_call", "failures"))
    mpi_assert(comm, total["writes"] == rows * comm.size and total["failures"] == 0, f"stats {total}")
    # which writes run at the call depends on timing (whether a write found the previous one still queued or
    # had to wait for it); every write is one or the other, and the values above arrived either way
    mpi_assert(comm, total["queued"] + total["ran_at_call"] == total["writes"], f"stats {total}")


NOCOPY_STATS = Path(tempfile.gettempdir()) / f"h5fa-nocopy-{uuid.uuid4().hex}.jsonl"
NOCOPY_ENV = {"HDF5_VOL_CONNECTOR": f"h5flow_async explicit_copy=0;stats={NOCOPY_STATS};under_vol=0;under_info={{}}",
              "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}


@pytest.mark.mpi(n=2, env=NOCOPY_ENV, timeout=180)
def test_mpi_event_set_writes_from_the_programs_buffers(comm, mpi_tmp_path: Path) -> None:
    """explicit_copy=0 on an MPI-IO file: collective H5Dwrite_async calls (through ctypes, on the library h5py
    uses: h5py has no event sets) queued uncopied, written by the background thread from each rank's own
    buffers, with a collective attribute write among them (it waits for the queue on every rank); after
    H5ESwait the buffers are reused and the file keeps what was in them at the wait."""
    import ctypes

    import h5py
    from h5py import h5fd, h5p, h5s, h5t

    from h5flow import _hdf5lib

    h5 = _hdf5lib.lib()
    h5.H5EScreate.restype = _hdf5lib.hid_t
    h5.H5Dwrite_async.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint] + [_hdf5lib.hid_t] * 5 + \
        [ctypes.c_void_p, _hdf5lib.hid_t]
    h5.H5Dwrite_async.restype = _hdf5lib.herr_t
    h5.H5ESwait.argtypes = [_hdf5lib.hid_t, ctypes.c_uint64, ctypes.POINTER(ctypes.c_size_t),
                            ctypes.POINTER(_hdf5lib.hbool_t)]
    h5.H5ESwait.restype = _hdf5lib.herr_t
    h5.H5ESclose.argtypes = [_hdf5lib.hid_t]
    h5.H5ESclose.restype = _hdf5lib.herr_t
    stats = Path(os.environ["HDF5_VOL_CONNECTOR"].split("stats=")[1].split(";")[0])
    path = mpi_tmp_path / "nocopy.h5"
    rows, cols = 6, 4096
    first = comm.rank * rows
    bufs = [np.full(cols, first + r, dtype="f8") for r in range(rows)]
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        d = f.create_dataset("d", shape=(rows * comm.size, cols), dtype="f8")
        dxpl = h5p.create(h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)
        mspace = h5s.create_simple((cols,))
        es = h5.H5EScreate()
        mpi_assert(comm, es >= 0, "H5EScreate failed")
        for r in range(rows):
            fspace = d.id.get_space()
            fspace.select_hyperslab((first + r, 0), (1, cols))
            rc = h5.H5Dwrite_async(b"test_vol_async.py", b"nocopy", 0, d.id.id, h5t.NATIVE_DOUBLE.id, mspace.id,
                                   fspace.id, dxpl.id, bufs[r].ctypes.data, es)
            mpi_assert(comm, rc >= 0, f"H5Dwrite_async of row {r} failed")
            if r == 2:
                d.attrs["between"] = 1
        pending, failed = ctypes.c_size_t(), _hdf5lib.hbool_t()
        rc = h5.H5ESwait(es, 2**64 - 1, ctypes.byref(pending), ctypes.byref(failed))
        mpi_assert(comm, rc >= 0 and pending.value == 0 and not failed.value, f"H5ESwait: {rc} {pending} {failed}")
        for b in bufs:
            b[:] = -1.0  # the writes have completed: the file keeps the values they had
        mpi_assert(comm, h5.H5ESclose(es) >= 0, "H5ESclose failed")
    total = _last_column_and_stats(comm, path, cols, rows, stats, ("writes", "queued", "uncopied", "failures"))
    want = rows * comm.size
    mpi_assert(comm, total == {"writes": want, "queued": want, "uncopied": want, "failures": 0}, f"stats {total}")


def test_c_suite() -> None:
    """The C tests of test_async.c (event sets, implicit mode, merging, failures, per-file waits, second handles
    and external links, MPI left alone by serial files) through ctest, on the plugin built here."""
    build = Path(__file__).resolve().parents[1] / "build" / "native" / "connectors" / "h5flow_async"
    assert (build / "h5fa_test_async").exists(), "the C test is built with the connector (make setup)"
    r = subprocess.run(["ctest", "--output-on-failure", "--test-dir", str(build)], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR)))
    assert r.returncode == 0 and "tests passed" in r.stdout, r.stdout + r.stderr


def test_info_lists_the_connector_with_its_value() -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "info", "--json"], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR)))
    assert proc.returncode == 0, proc.stderr
    found = {c["name"]: c["value"] for c in json.loads(proc.stdout)["connectors"]}
    assert found.get("h5flow_async") == 312, found


@pytest.mark.slow
def test_bench_async_runs_every_stack(tmp_path: Path) -> None:
    """`h5flow bench async` at its smallest: every stack built here gets a row, with and without compute."""
    png = tmp_path / "b.png"
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "async", "--steps", "2", "--step-mib",
                           "0.05", "--compute-ms", "5", "--repeat", "1", "--dirs", str(tmp_path),
                           "--metadata-ops", "20", "--file-ops", "2", "--png", str(png), "--json"],
                          capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout[:proc.stdout.rindex("}") + 1])
    stacks = {r["stack"] for r in out["rows"]}
    assert {"native", "async", "log", "async/log"} <= stacks, stacks
    assert {r["compute_ms"] for r in out["rows"]} == {0.0, 5.0}
    assert all(r["total_s"] > 0 for r in out["rows"]) and len(out["metadata"]) == len(stacks)
    assert {r["stack"] for r in out["files"]} == stacks and all(r["per_file_us"] > 0 for r in out["files"])
    assert png.stat().st_size > 0


def test_a_forked_child_does_not_wait_for_the_parents_thread(tmp_path: Path) -> None:
    """After fork() the child has no background thread: its writes must not wait for one (they did)."""
    script = r"""
import os, sys, numpy as np, h5py
p = sys.argv[1]
with h5py.File(p + ".parent.h5", "w") as f:
    f["x"] = np.arange(10)          # the parent's background thread has started
pid = os.fork()
if pid == 0:
    with h5py.File(p + ".child.h5", "w") as f:
        f["y"] = np.arange(5)
    with h5py.File(p + ".child.h5", "r") as f:
        os._exit(0 if list(f["y"][:]) == [0, 1, 2, 3, 4] else 3)
_, status = os.waitpid(pid, 0)
print("child exit", os.waitstatus_to_exitcode(status))
"""
    env = dict(os.environ, **ASYNC_ENV)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "f")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "child exit 0" in proc.stdout, proc.stdout + proc.stderr


def test_a_program_that_never_closes_its_file_still_stores_every_write(tmp_path: Path) -> None:
    """Exit with the file open: the library's shutdown closes it, and the close waits for the queue."""
    script = r"""
import sys, numpy as np, h5py
f = h5py.File(sys.argv[1], "w")
d = f.create_dataset("x", shape=(8, 1 << 18), dtype="i4")
for k in range(8):
    d[k] = np.arange(1 << 18, dtype="i4") + k
"""
    path = tmp_path / "open.h5"
    proc = subprocess.run([sys.executable, "-c", script, str(path)], env=dict(os.environ, **ASYNC_ENV),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import h5py

    with h5py.File(path, "r") as f:
        assert np.array_equal(f["x"][:, 5], 5 + np.arange(8))


ERROR_BELOW_SCRIPT = r"""
import resource, signal, sys, numpy as np, h5py
path, limit, ok = sys.argv[1], int(sys.argv[2]), [int(r) for r in sys.argv[3].split(",")]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)        # a write past the limit fails with EFBIG instead
n = 16384                                           # rows larger than the sieve buffer: written directly
rows = {r: np.arange(n, dtype="f8") + r * n for r in range(64)}
f = h5py.File(path, "w")
d = f.create_dataset("d", shape=(64, n), dtype="f8")
f.flush()
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
for r in (0, 1, 2, 40, 3):                           # row 40 lies past the limit; rows 0-3 do not
    try:
        d[r] = rows[r]
    except OSError as e:
        print("write", r, "failed at the call")
try:
    f.flush()
    print("flush succeeded")
except (OSError, RuntimeError) as e:
    print("flush failed:", str(e).splitlines()[0][:200])
for r in ok:
    assert np.array_equal(d[r], rows[r]), f"row {r} read back wrong before the close"
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
try:
    f.close()
except (OSError, RuntimeError) as e:
    print("close failed:", e)
    f.close()
print("done")
"""


# native: row 40 lies past the limit, rows 0-3 below it; h5flow_log appends every write to its data log, so
# the fourth write (row 40) is the one that crosses the limit
@pytest.mark.parametrize(("below", "limit", "ok"), [("0", 2 << 20, "0,1,2,3"), ("h5flow_log", 450 << 10, "0,1,2")])
def test_an_error_below_surfaces_and_what_was_written_reads_right(below: str, limit: int, ok: str,
                                                                   tmp_path: Path) -> None:
    """A queued write past a file size limit (RLIMIT_FSIZE) fails in the background: the flush reports it
    (natively the write itself does), and the rows written read back as written, through the handle and
    after the close."""
    path = tmp_path / "f.h5"
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR),
               HDF5_VOL_CONNECTOR=f"h5flow_async defer=1;under_vol={below};under_info={{}}")
    proc = subprocess.run([sys.executable, "-c", ERROR_BELOW_SCRIPT, str(path), str(limit), ok], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout + proc.stderr
    reported = "write 40 failed at the call" in proc.stdout or "flush failed" in proc.stdout
    assert reported and "flush succeeded" not in proc.stdout, proc.stdout
    read_env = dict(env)
    if below == "0":
        read_env.pop("HDF5_VOL_CONNECTOR")
    else:
        read_env["HDF5_VOL_CONNECTOR"] = "h5flow_log"
    check = subprocess.run([sys.executable, "-c", (
        "import sys, numpy as np, h5py\n"
        "with h5py.File(sys.argv[1], 'r') as f:\n"
        "    d = f['d']\n"
        "    for r in map(int, sys.argv[2].split(',')):\n"
        "        assert np.array_equal(d[r], np.arange(16384) + r * 16384), r\n"
        "print('ok')\n"), str(path), ok], env=read_env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "ok" in check.stdout, check.stdout + check.stderr


TWO_HANDLES_SCRIPT = r"""
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("x", shape=(20,), dtype="i4", chunks=(4,))
    f.create_dataset("y", shape=(20,), dtype="i4")
    d1, d2, y = f["x"], f["x"], f["y"]   # two handles of one dataset
    d1[0:5] = 1
    d2[3:8] = 2                          # overlaps the write before it: must win
    y[0:3] = 9
    d1[6:9] = 3
    d2[1:4] = 5
    d1[2:3] = 6
    print(f["x"][:10].tolist(), f["y"][:4].tolist())
"""


@pytest.mark.parametrize("below", ["0", "h5flow_log"])
def test_writes_through_two_handles_of_one_dataset_keep_their_order(below: str, tmp_path: Path) -> None:
    """Queued writes of several datasets of a file are batched into one multi-dataset call; two handles of
    one dataset are one dataset there (never twice in one call: the order of its writes would be the
    connector below's, and h5flow_log refuses the call)."""
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR),
               HDF5_VOL_CONNECTOR=f"h5flow_async defer=1;under_vol={below};under_info={{}}")
    proc = subprocess.run([sys.executable, "-c", TWO_HANDLES_SCRIPT, str(tmp_path / "f.h5")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split("\n")[0] == "[1, 5, 6, 5, 2, 2, 3, 3, 3, 0] [9, 9, 9, 0]", proc.stdout
