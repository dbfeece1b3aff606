"""h5flow_log active analysis: per-write statistics (@stats.*), user data functions, ``h5flow stats``.

Scripts run in a subprocess with the connector's environment (as in test_vol_h5flow_log.py); the MPI case
runs under the pytest MPI plugin. docs/FORMAT.md, "Statistics and user data functions", is the contract.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from h5flow._paths import build_dir, default_plugin_dir
from h5flow.testing.pytest_mpi import mpi_assert

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}
UDF_DIR = build_dir() / "native" / "udf"
WAVE = UDF_DIR / "liblargest_wave.so"
FAIL = UDF_DIR / "libh5fl_udf_fail.so"

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists() or not WAVE.exists(),
                                reason="h5flow_log plugin / example UDF not built (run make setup)")

PRELUDE = """
import os, sys, json, numpy as np, h5py
from h5flow import _hdf5lib, stats
def opened(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log", _hdf5lib.connector_name(f.id.id)
    return f
def udf_dataset(f, name, shape, dtype, lib, sym, maxshape=None):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    stats.set_udf(dcpl, lib, sym)
    return f.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl, maxshape=maxshape)
def shards(p, name):
    return stats.read_stats(p, name, as_frame=False)
"""


def run_script(body: str, *args: str, env: dict[str, str] | None = None) -> str:
    e = dict(os.environ, **LOG_ENV, **(env or {}))
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args], env=e,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def records(path: Path, dataset: str | None = None) -> list[dict]:
    from h5flow.stats import read_stats

    return read_stats(path, dataset, as_frame=False)  # a helper process with the connector's environment


def test_stats_per_write_match_numpy_without_reading_data(tmp_path: Path) -> None:
    """Every write of every numeric type gets count/min/max/sum/NaN/argmax/histogram, equal to numpy's; the
    numbers come from @stats alone: with the data log's bytes destroyed they are still given (source
    'stats') while reading the data fails its checksum."""
    p = tmp_path / "s.h5"
    run_script("""
        p = sys.argv[1]
        rng = np.random.default_rng(1)
        with opened(h5py.File(p, "w")) as f:
            for t in ["i1", "u2", "i4", "u8", "i8", "f4", "f8"]:
                d = f.create_dataset(t, shape=(6, 50), dtype=t)
                for k in range(3):
                    x = (rng.random((2, 50)) * 200 - (0 if t[0] == "u" else 100)).astype(t)
                    if t == "i8":
                        x[0, 0] = -(1 << 62) - 3; x[1, 7] = (1 << 62) + 5  # exact beyond 2**53
                    if t == "u8":
                        x[1, 3] = (1 << 64) - 2
                    if t[0] == "f":
                        x[1, 5:9] = np.nan
                    d[2 * k:2 * k + 2] = x
                    np.save(f"{p}.{t}.{k}.npy", x)
            f.create_dataset("s", data=np.array([b"ab", b"cd"]))  # no statistics for strings
    """, str(p))
    recs = records(p)
    for t in ["i1", "u2", "i4", "u8", "i8", "f4", "f8"]:
        rs = sorted((r for r in recs if r["dataset"] == f"/{t}"), key=lambda r: r["write"])
        assert [r["write"] for r in rs] == [0, 1, 2]
        for k, r in enumerate(rs):
            x = np.load(f"{p}.{t}.{k}.npy")
            assert r["source"] == "stats", r
            assert r["visible"] == r["written"] == r["count"] == 100
            assert r["first"] == [2 * k, 0] and r["last"] == [2 * k + 1, 49]
            assert r["nan"] == int(np.isnan(x).sum()) if t[0] == "f" else r["nan"] == 0
            assert r["min"] == np.nanmin(x) and r["max"] == np.nanmax(x), (t, r["min"], r["max"])
            assert type(r["max"]) is (float if t[0] == "f" else int)
            if t[0] == "f":
                assert r["sum"] == pytest.approx(float(np.nansum(x.astype("f8"))), rel=1e-9)
            else:  # integer sums are exact, rounded once to a double
                assert r["sum"] == float(sum(int(v) for v in x.flat))
            i, j = np.unravel_index(np.nanargmax(x), x.shape)
            assert r["argmax"] == [2 * k + int(i), int(j)]
            i, j = np.unravel_index(np.nanargmin(x), x.shape)
            assert r["argmin"] == [2 * k + int(i), int(j)]
            h = np.histogram(x[~np.isnan(x)] if t[0] == "f" else x.astype("f8"), bins=16,
                             range=(float(np.nanmin(x)), float(np.nanmax(x))))[0]
            assert sum(r["hist"]["counts"]) == 100 - r["nan"]
            if t not in ("i8", "u8"):  # float rounding of huge bin edges aside, numpy's bins
                assert r["hist"]["counts"] == h.tolist(), (t, r["hist"]["counts"], h.tolist())
    assert [r["source"] for r in recs if r["dataset"] == "/s"] == ["none"]
    # destroy the data: statistics still come from @stats; a read of the data detects the damage
    dat = next((p / "f8").glob("@log.*.dat"))
    dat.write_bytes(b"\xff" * dat.stat().st_size)
    rs = records(p, "f8")
    assert [r["source"] for r in rs] == ["stats"] * 3
    assert rs[0]["max"] == np.nanmax(np.load(f"{p}.f8.0.npy"))
    env = dict(os.environ, **LOG_ENV)
    bad = subprocess.run([sys.executable, "-c", "import h5py,sys; h5py.File(sys.argv[1],'r')['f8'][...]", str(p)],
                         env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "checksum" in bad.stderr.lower(), bad.stderr[-2000:]


def test_stats_stay_right_under_overwrites(tmp_path: Path) -> None:
    """Latest write wins: a write wholly overwritten disappears, a partly overwritten one is computed from
    its visible elements (source 'data', its UDF output flagged stale), also across processes."""
    p = tmp_path / "o.h5"
    run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            d = udf_dataset(f, "d", (100,), "f8", sys.argv[2], "largest_wave")
            d[0:50] = np.arange(50.0)        # write 0
            d[50:100] = np.arange(50.0) + 50 # write 1: max 99 at 99
            d[0:50] = -np.arange(50.0)       # write 2: hides write 0 entirely
            d[90:100] = 0.5                  # write 3: hides the max of write 1
    """, str(p), str(WAVE))
    rs = {r["write"]: r for r in records(p, "d")}
    assert sorted(rs) == [1, 2, 3]
    assert rs[1]["source"] == "data" and rs[1]["visible"] == 40 and rs[1]["written"] == 50
    assert rs[1]["max"] == 89.0 and rs[1]["argmax"] == [89] and rs[1]["min"] == 50.0
    assert rs[1]["sum"] == float(sum(range(50, 90)))
    assert rs[1]["udf_status"] == "stale" and rs[1]["udf"]["height"] == 99.0  # what the function saw
    assert rs[2]["source"] == "stats" and rs[2]["max"] == 0.0 and rs[2]["min"] == -49.0
    assert rs[2]["udf_status"] == "ok" and rs[2]["udf"]["index"] == 0
    assert rs[3]["source"] == "stats" and rs[3]["max"] == 0.5
    # another process (a later epoch) overwrites part of write 2: the same rules across epochs
    run_script("""
        with opened(h5py.File(sys.argv[1], "r+")) as f:
            f["d"][40:45] = 1000.0
    """, str(p))
    rs = records(p, "d")
    by = {(r["epoch"], r["write"]): r for r in rs}
    old = [r for r in rs if r["epoch"] == 1 and r["write"] == 2][0]
    assert old["source"] == "data" and old["visible"] == 45 and old["min"] == -49.0 and old["max"] == 0.0
    new = [r for r in rs if r["epoch"] == 2][0]
    assert new["source"] == "stats" and new["max"] == 1000.0 and new["argmax"] == [40]
    assert new["udf_status"] == "ok" and new["udf"]["height"] == 1000.0  # @udf applies in later epochs
    # every visible element is counted exactly once
    assert sum(r["visible"] for r in by.values()) == 100


def test_largest_wave_udf_through_h5py(tmp_path: Path) -> None:
    """The seed's example: the height of the largest wave and where it is, per write, via h5py."""
    p = tmp_path / "w.h5"
    out = run_script("""
        p = sys.argv[1]
        t = np.arange(4000)
        with opened(h5py.File(p, "w")) as f:
            d = udf_dataset(f, "sea/elevation", (0, 1000), "f4", sys.argv[2], "largest_wave", maxshape=(None, 1000))
            want = []
            for k in range(4):
                x = (np.sin(t[k * 1000:(k + 1) * 1000] / 13.0) * (1 + k % 3) + np.cos(t[:1000] * k)).astype("f4")
                d.resize((k + 1, 1000))
                d[k] = x
                want.append([float(x.max()), k, int(x.argmax())])
        got = [[r["udf"]["height"], int(r["udf"]["pos0"]), int(r["udf"]["pos1"])] for r in shards(p, "sea/elevation")]
        print(json.dumps({"want": want, "got": got,
                          "running": [r["udf"]["running_height"] for r in shards(p, "sea/elevation")]}))
    """, str(p), str(WAVE))
    r = json.loads(out.strip().splitlines()[-1])
    assert r["got"] == r["want"]
    assert r["running"] == list(np.maximum.accumulate([w[0] for w in r["want"]]))


def test_failing_udf_keeps_the_write_and_says_why(tmp_path: Path) -> None:
    """A UDF that returns an error: the write lands, its statistics are there, its UDF result is 'failed'
    with the function's message. A library that cannot be loaded: the same, naming the library."""
    p = tmp_path / "f.h5"
    run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            d = udf_dataset(f, "d", (20,), "i4", sys.argv[2], "udf_fail")
            d[:10] = np.arange(10)
            d[10:] = np.arange(10) + 10
            e = udf_dataset(f, "odd", (20,), "i4", sys.argv[2], "udf_fail_odd")
            for k in range(4):
                e[5 * k:5 * k + 5] = k
            g = udf_dataset(f, "gone", (4,), "f8", "/nonexistent/libnope.so", "fn")
            g[:] = 1.5
        with opened(h5py.File(p, "r")) as f:
            assert (f["d"][...] == np.arange(20)).all() and (f["gone"][...] == 1.5).all()
            assert (f["odd"][...] == np.repeat(np.arange(4), 5)).all()
    """, str(p), str(FAIL))
    rs = records(p, "d")
    assert [r["udf_status"] for r in rs] == ["failed", "failed"]
    assert rs[0]["udf_error"] == "udf_fail returned an error: sensor calibration missing for /d (10 elements)"
    assert [r["source"] for r in rs] == ["stats", "stats"] and rs[1]["max"] == 19
    odd = records(p, "odd")
    assert [r["udf_status"] for r in odd] == ["ok", "failed", "ok", "failed"]
    assert odd[0]["udf"] == {"n": 5.0} and odd[1]["udf_error"] == "udf_fail_odd returned an error: odd call 2"
    gone = records(p, "gone")
    assert gone[0]["udf_status"] == "failed" and "/nonexistent/libnope.so" in gone[0]["udf_error"]
    assert gone[0]["max"] == 1.5


def test_torn_damaged_or_foreign_stats_fall_back_to_data(tmp_path: Path) -> None:
    """A torn tail, a damaged record, or records that describe other data (same sequence numbers and log
    offsets, different bytes): never used; the numbers are computed from the committed data."""
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    body = """
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(30,), dtype="f8")
            for k in range(3):
                d[10 * k:10 * k + 10] = np.arange(10.0) * float(sys.argv[2]) + k
    """
    run_script(body, str(a), "1")
    run_script(body, str(b), "-1")
    sa = next((a / "d").glob("@stats.*"))
    sb = next((b / "d").glob("@stats.*"))
    # foreign: b's data with a's statistics records (same seqs and offsets, other data checksums)
    shutil.copy(sa, sb)
    rs = records(b, "d")
    assert [r["source"] for r in rs] == ["data"] * 3
    assert [r["max"] for r in rs] == [0.0, 1.0, 2.0] and [r["min"] for r in rs] == [-9.0, -8.0, -7.0]
    # torn tail: the last record cut in half
    raw = sa.read_bytes()
    n = len(raw) // 3
    sa.write_bytes(raw[:2 * n + n // 2])
    rs = records(a, "d")
    assert [r["source"] for r in rs] == ["stats", "stats", "data"] and rs[2]["max"] == 11.0
    # a damaged byte inside the second record: it and what follows come from the data
    bad = bytearray(raw)
    bad[n + 60] ^= 0x40
    sa.write_bytes(bytes(bad))
    rs = records(a, "d")
    assert [r["source"] for r in rs] == ["stats", "data", "data"]
    assert [r["max"] for r in rs] == [9.0, 10.0, 11.0]
    # a writer reopening in the same epoch cuts the torn tail and keeps appending intact records
    sa.write_bytes(raw[:2 * n + n // 2])
    run_script("""
        with opened(h5py.File(sys.argv[1], "r+")) as f:
            f["d"][0:5] = 7.0
    """, str(a))
    rs = records(a, "d")
    assert [r["source"] for r in rs] == ["data", "stats", "data", "stats"]
    assert [r["max"] for r in rs] == [9.0, 10.0, 11.0, 7.0]


def test_stats_off_and_old_containers(tmp_path: Path) -> None:
    """H5FLOW_LOG_STATS=0 writes no @stats (what the write-overhead benchmark compares against); such a
    dataset, like one of a format 2 container, gets its statistics from the data."""
    p = tmp_path / "off.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("d", data=np.arange(12.0).reshape(3, 4))
    """, str(p), env={"H5FLOW_LOG_STATS": "0"})
    assert not list((p / "d").glob("@stats.*"))
    marker = (p / "@h5flow_log").read_text()
    assert marker.startswith("h5flow_log\nformat 3\n")
    (p / "@h5flow_log").write_text(marker.replace("format 3", "format 2"))
    rs = records(p, "d")
    assert len(rs) == 1 and rs[0]["source"] == "data" and rs[0]["max"] == 11.0 and rs[0]["argmax"] == [2, 3]
    assert rs[0]["udf_status"] == "unknown"


def test_h5flow_stats_cli_table_and_json(tmp_path: Path) -> None:
    from h5flow.cli import main

    p = tmp_path / "c.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = udf_dataset(f, "g/wave", (2, 8), "f8", sys.argv[2], "largest_wave")
            d[0] = np.arange(8.0); d[1] = -np.arange(8.0)
    """, str(p), str(WAVE))
    env = dict(os.environ, **LOG_ENV)
    out = subprocess.run([sys.executable, "-m", "h5flow.cli", "stats", str(p)], env=env, capture_output=True,
                         text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["dataset", "shard", "writer", "extent", "elems", "src"]
    assert "/g/wave" in lines[1] and "(0,0)..(0,7)" in lines[1] and "height=7" in lines[1]
    assert "(1,0)..(1,7)" in lines[2] and "height=0" in lines[2]
    # without the connector's environment: the command (and read_stats) run a helper process
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "HDF5_PLUGIN_PATH")}
    js = subprocess.run([sys.executable, "-m", "h5flow.cli", "stats", "--json", str(p), "g/wave"], env=env,
                        capture_output=True, text=True, check=True).stdout
    assert [r["max"] for r in json.loads(js)] == [7.0, 0.0]
    assert main(["stats", str(tmp_path / "nope")]) == 1


@pytest.mark.mpi(n=3, env=LOG_ENV, timeout=240)
def test_mpi_stats_per_writer(comm, mpi_tmp_path: Path) -> None:
    """3 ranks write interleaved rows of one dataset with the example UDF: one @stats sidecar per rank,
    one record per write, each right; a rank's overwrite of another rank's row is accounted for."""
    import h5py

    from h5flow import stats

    path = mpi_tmp_path / "mpi.h5"
    rows = 3 * comm.size
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        stats.set_udf(dcpl, WAVE, "largest_wave")
        d = f.create_dataset("d", shape=(rows, 64), dtype="f8", dcpl=dcpl)
        for k in range(3):
            r = k * comm.size + comm.rank
            d[r] = np.arange(64.0) * (r + 1)
        comm.Barrier()
        if comm.rank == 1:
            d[0, 60:] = -1.0  # over rank 0's first row
    comm.Barrier()
    side = sorted(p.name for p in (path / "d").glob("@stats.*"))
    mpi_assert(comm, len(side) == comm.size, f"expected one statistics sidecar per rank: {side}")
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        res = stats.dataset_stats(f["d"])["shards"]
    ok = len(res) == rows + 1
    for s in res:
        if s["write"] == 3:  # rank 1's overwrite
            ok = ok and s["writer"] == 1 and s["max"] == -1.0 and s["source"] == "stats"
            continue
        r = s["write"] * comm.size + s["writer"]
        top = 63.0 * (r + 1) if r else 59.0
        ok = ok and s["max"] == top and s["first"][0] == r and s["source"] == ("data" if r == 0 else "stats")
        ok = ok and s["udf"]["height"] == 63.0 * (r + 1) and int(s["udf"]["pos0"]) == r
    mpi_assert(comm, ok, f"rank {comm.rank}: {json.dumps(res)[:3000]}")


def test_udf_given_when_opening_for_write(tmp_path: Path) -> None:
    """A UDF named in the access list at H5Dopen applies to that process's writes (not persisted); a
    process already writing the dataset refuses it with a message saying why."""
    p = tmp_path / "a.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("d", shape=(3, 10), dtype="f8")[0] = np.arange(10.0)
    """, str(p))
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "r+")) as f:
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            stats.set_udf(dapl, sys.argv[2], "largest_wave")
            d = h5py.Dataset(h5py.h5d.open(f.id, b"d", dapl=dapl))
            d[1] = np.arange(10.0) * 3
            try:
                h5py.h5d.open(f.id, b"d", dapl=dapl)
                print("no error")
            except Exception as e:
                print("refused:", e)
    """, str(p), str(WAVE))
    assert "refused:" in out and "already being written by this process" in out, out
    run_script("""
        with opened(h5py.File(sys.argv[1], "r+")) as f:
            f["d"][2] = 5.0
    """, str(p))
    rs = records(p, "d")
    assert [r["udf_status"] for r in rs] == ["none", "ok", "none"]
    assert rs[1]["udf"]["height"] == 27.0 and rs[1]["udf"]["pos0"] == 1 and rs[1]["udf"]["pos1"] == 9
    assert not (p / "d" / "@udf").exists()


# ---------------------------------------------------------------- large writes: the fused passes (stats.h)

TYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8"]


def _exact_sum(x: np.ndarray) -> float:
    """The sum of integers exactly (Python ints), rounded once to a double; floats: numpy's."""
    if x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # +inf and -inf: NaN
            return float(np.nansum(x.astype("f8")))
    if x.dtype.itemsize < 8:
        return float(int(x.astype("i8").sum()))
    hi, lo = (x >> 32).astype(x.dtype), (x & 0xFFFFFFFF).astype("u8")  # no 64-bit overflow
    return float((int(hi.astype("i8" if x.dtype.kind == "i" else "u8").sum()) << 32) + int(lo.sum()))


def oracle(x: np.ndarray) -> dict:
    """docs/FORMAT.md, "Statistics": count, NaN count, min, max, first position of each, sum, and the
    16-bin histogram over [min, max]: bin = floor(min(15, (v - min) * (16 / (max - min)))), v as a
    double, NaN not counted; none when min or max is infinite."""
    x = x.ravel()
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    v = x[~nan]
    o: dict = {"count": int(x.size), "nan": int(nan.sum()), "sum": _exact_sum(x)}
    if not v.size:
        return dict(o, min=None, max=None, argmin=None, argmax=None, hist=None)
    mn, mx = v.min(), v.max()
    o.update(min=mn.item(), max=mx.item(), argmin=int(np.flatnonzero(x == mn)[0]),
             argmax=int(np.flatnonzero(x == mx)[0]))
    lo, hi = float(mn), float(mx)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return dict(o, hist=None)
    sc = 16.0 / (hi - lo) if hi > lo else 0.0
    b = np.minimum((v.astype("f8") - lo) * sc, 15.0).astype("i8")
    return dict(o, hist={"lo": lo, "hi": hi, "counts": np.bincount(b, minlength=16).tolist()})


def check_record(r: dict, x: np.ndarray, start: int) -> None:
    o = oracle(x)
    assert r["count"] == o["count"] and r["nan"] == o["nan"], (r, o)
    assert r["min"] == o["min"] and r["max"] == o["max"], (r["min"], r["max"], o["min"], o["max"])
    if x.dtype.kind == "f":
        assert r["sum"] == pytest.approx(o["sum"], rel=1e-9, nan_ok=True)
    else:
        assert r["sum"] == o["sum"]
    for k in ("argmin", "argmax"):
        assert r[k] == (None if o[k] is None else [start + o[k]]), (k, r[k], o[k])
    assert r["hist"] == o["hist"], (x.dtype, r["hist"], o["hist"])


WRITES = """
def writes(t, rng):
    # (start, values) per write of a 1-D dataset; sizes chosen around the connector's thresholds:
    # 256 KiB (a write goes to the disk directly), 24 KiB checksum/scan blocks, 1 MiB histogram chunks
    info = np.iinfo(t) if t[0] != "f" else None
    n = (3 << 20) // np.dtype(t).itemsize + 13            # 3 MiB and a tail that is no multiple of 16
    def rand(k):
        if t[0] == "f":
            return (rng.standard_normal(k) * 100).astype(t)
        return rng.integers(info.min, info.max, size=k, dtype=t, endpoint=True)
    out, pos = [], 0
    x = rand(n)                                           # extremes in late blocks, the max twice
    lo, hi = (-1e6, 1e6) if t[0] == "f" else (info.min, info.max)  # (sums that cancel stay well-conditioned)
    x[n - 5] = lo; x[n // 2 + 7] = hi; x[n - 3] = hi; x[n - 2] = lo
    if t[0] == "f":
        x[100:130] = np.nan; x[n - 40:n - 38] = np.nan  # NaN in the first and in the last block
    out.append((pos, x)); pos += n
    x = rand(n // 3 + 1)                                  # the last block holds the only minimum
    x[-1] = x.min() - 1 if t[0] == "f" or x.min() > info.min else x.min()
    out.append((pos, x)); pos += x.size
    out.append((pos, np.full(700_000 // np.dtype(t).itemsize, 7, dtype=t))); pos += 700_000 // np.dtype(t).itemsize
    out.append((pos, rand(1))); pos += 1                  # one element
    out.append((pos, rand(5000))); pos += 5000            # buffered (under 256 KiB)
    if t[0] == "f":
        x = rand(400_000); x[3] = np.inf; x[7] = -np.inf; x[9] = np.nan
        out.append((pos, x)); pos += x.size               # infinite extremes: no histogram
        x = np.full(300_000, np.nan, dtype=t)
        out.append((pos, x)); pos += x.size               # nothing but NaN
    return out, pos
"""


@pytest.mark.parametrize("simd", ["best", "256", "0"])
def test_large_writes_match_numpy_every_type(tmp_path: Path, simd: str) -> None:
    """Writes large enough to go to the disk directly in pieces (the fused checksum + first pass, the
    histogram per piece) and small ones, of every numeric type, with extremes in late blocks, repeated
    maxima, NaN, +-inf, constant and one-element writes: the recorded statistics equal the numpy oracle
    of the documented definitions — with the widest vector code the processor has (best), with at most
    256-bit vectors (H5FLOW_LOG_STATS_SIMD=256) and with the portable code (=0). A write converted
    from another memory type (staged) too."""
    p = tmp_path / "big.h5"
    run_script(WRITES + textwrap.dedent("""
        p = sys.argv[1]
        rng = np.random.default_rng(5)
        with opened(h5py.File(p, "w")) as f:
            for t in sys.argv[2].split(","):
                ws, total = writes(t, rng)
                d = f.create_dataset(t, shape=(total,), dtype=t)
                for k, (s, x) in enumerate(ws):
                    d[s:s + x.size] = x
                    np.save(f"{p}.{t}.{k}.npy", x)
            d = f.create_dataset("conv", shape=(600_000,), dtype="f8")
            x = rng.integers(-30000, 30000, size=600_000).astype("i2")
            d.write_direct(x)                               # int16 in memory: converted, then appended
            np.save(f"{p}.conv.npy", x.astype("f8"))
    """), str(p), ",".join(TYPES), env={"H5FLOW_LOG_STATS_SIMD": simd})
    recs = records(p)
    for t in TYPES:
        rs = sorted((r for r in recs if r["dataset"] == f"/{t}"), key=lambda r: r["write"])
        assert len(rs) == (7 if t[0] == "f" else 5)
        for k, r in enumerate(rs):
            assert r["source"] == "stats", r
            x = np.load(f"{p}.{t}.{k}.npy")
            check_record(r, x, r["first"][0])
    (r,) = [r for r in recs if r["dataset"] == "/conv"]
    assert r["source"] == "stats"
    check_record(r, np.load(f"{p}.conv.npy"), 0)


def test_large_writes_overwritten_and_udf(tmp_path: Path) -> None:
    """Latest write wins over large writes: a partly overwritten large write is recomputed from its
    visible elements (equal to the oracle of those), the overwriting one keeps its record; the user data
    function sees every large write whole (its height is the write's max)."""
    p = tmp_path / "ow.h5"
    run_script("""
        p = sys.argv[1]
        rng = np.random.default_rng(9)
        with opened(h5py.File(p, "w")) as f:
            d = udf_dataset(f, "d", (2_000_000,), "f8", sys.argv[2], "largest_wave")
            a = rng.standard_normal(1_500_000); a[1_200_000] = 50.0
            b = rng.standard_normal(1_000_000); b[10] = 40.0
            d[0:1_500_000] = a        # write 0
            d[1_000_000:2_000_000] = b  # write 1 hides a[1_000_000:], with a's max
            np.save(p + ".a.npy", a); np.save(p + ".b.npy", b)
            big = np.zeros(1_500_000, dtype="i8")
            big[5] = 1 << 62; big[6] = 600; big[7] = -1; big[1_100_000] = 600  # exact sum 2**62 + 1199: as a
            # double 2**62 + 1024, but 2**62 + 2048 if the first million is rounded on its own first
            e = f.create_dataset("i8", shape=big.shape, dtype="i8")
            e[:] = big
            e[1_250_000:] = 3                 # 1.25 M visible: recomputed in more than one piece
            np.save(p + ".i8.npy", big)
    """, str(p), str(WAVE))
    a, b = np.load(f"{p}.a.npy"), np.load(f"{p}.b.npy")
    rs = {r["write"]: r for r in records(p, "d")}
    assert rs[0]["source"] == "data" and rs[0]["visible"] == 1_000_000 and rs[0]["written"] == 1_500_000
    check_record(rs[0], a[:1_000_000], 0)
    assert rs[0]["udf_status"] == "stale" and rs[0]["udf"]["height"] == 50.0
    assert rs[1]["source"] == "stats" and rs[1]["udf_status"] == "ok" and rs[1]["udf"]["height"] == 40.0
    check_record(rs[1], b, 1_000_000)
    # integer sums stay exact (rounded once) when the visible elements are read in several pieces
    rs = {r["write"]: r for r in records(p, "i8")}
    assert rs[0]["source"] == "data" and rs[0]["visible"] == 1_250_000
    check_record(rs[0], np.load(f"{p}.i8.npy")[:1_250_000], 0)
    assert rs[1]["source"] == "stats" and rs[1]["sum"] == 3.0 * 250_000


# ---------------------------------------------------------------- 1-byte integers: the count table (stats_bytes.c)

BYTE_WRITES = """
def byte_writes(t, rng):
    # (start, values) per write of one 1-D dataset, in order: the connector's count table is reused from
    # write to write, so narrow writes follow wide ones (a row left over from the last write would show)
    info = np.iinfo(t)
    lo, hi = int(info.min), int(info.max)
    def rand(k, a=lo, b=hi):
        return rng.integers(a, b, size=k, dtype=t, endpoint=True)
    out = [rng.permutation(np.arange(lo, hi + 1)).astype(t)]          # every value once (buffered)
    x = rand((3 << 20) + 7)                                            # every value, many times; direct
    x[5] = hi; x[(1 << 20) + 3] = lo; x[-1] = lo; x[-2] = hi           # (first positions: early max, late min)
    out.append(x)
    out.append(np.full(300_001, -5 if t == "i1" else 200, dtype=t))    # constant: min == max, width 0
    x = rand((1 << 20) + 13, lo + 40, lo + 100)                        # narrow; min and max improve in
    x[300_001] = lo + 30; x[700_003] = lo + 20; x[700_100] = lo + 20   # later blocks, each first position
    x[900_000] = lo + 20; x[(1 << 20) + 12] = lo + 20                  # before later equal ones
    x[50_000] = lo + 110; x[600_000] = lo + 120; x[600_001] = lo + 120
    out.append(x)
    if t == "i1":
        out.append(rand(500_003, -128, -1))                            # negative only
        out.append(rand(70_001, -3, 2))                                # around zero
    x = np.repeat(np.arange(hi, lo - 1, -1), 4099).astype(t)           # descending: a new min in every block
    out.append(x)
    out.append(np.repeat(np.arange(lo, hi + 1), 4099).astype(t))       # ascending: a new max in every block
    for k in (1, 3, 17, 255, 24 * 1024 + 1, (256 << 10) - 1, (256 << 10) + 1):  # odd lengths around the
        out.append(rand(k))                                            # block and direct-write sizes
    out.append(np.array([hi, lo, hi, lo], dtype=t))                    # both ends in a tiny write
    out.append(rand((1 << 20) + 1, lo + 1, lo + 1))                    # constant again, not the last value
    ws, pos = [], 0
    for x in out:
        ws.append((pos, x)); pos += x.size
    return ws, pos
"""


def test_byte_stats_count_table_match_numpy(tmp_path: Path) -> None:
    """int8 and uint8 statistics come from one count table (stats_bytes.c); they must equal the numpy
    oracle of the documented definitions bit for bit — min, max, the first position of each, the exact
    sum, the histogram (bins of the documented formula, the last one closed) — for every value at once, a
    constant write (width 0: every element in bin 0), negative int8, extremes first seen in late blocks,
    sorted data, odd lengths, many writes of one dataset (the table is reused from write to write), writes
    through a filter (statistics computed after the fused passes), and writes recomputed from their data
    (partly overwritten)."""
    p = tmp_path / "bytes.h5"
    run_script(BYTE_WRITES + textwrap.dedent("""
        p = sys.argv[1]
        rng = np.random.default_rng(8)
        with opened(h5py.File(p, "w")) as f:
            for t in ("i1", "u1"):
                ws, total = byte_writes(t, rng)
                d = f.create_dataset(t, shape=(total,), dtype=t)
                for k, (s, x) in enumerate(ws):
                    d[s:s + x.size] = x
                    np.save(f"{p}.{t}.{k}.npy", x)
                # a filtered copy of a few of the writes (whole chunks: one write, one record)
                z = f.create_dataset(t + "z", shape=(4 << 16,), dtype=t, chunks=(1 << 16,), compression="gzip")
                for k in range(4):
                    x = ws[1 + 2 * (k % 2)][1][(k << 16):((k + 1) << 16)].copy()  # wide, narrow
                    if k == 3:
                        x[:] = x[0]
                    z[k << 16:(k + 1) << 16] = x
                    np.save(f"{p}.{t}z.{k}.npy", x)
                # latest write wins: the first half of write 1 stays, recomputed from the data
                o = f.create_dataset(t + "o", shape=(3 << 20,), dtype=t)
                x = ws[1][1][:3 << 20]
                o[:] = x
                o[3 << 19:] = np.zeros(3 << 19, dtype=t)
                np.save(f"{p}.{t}o.npy", x)
    """), str(p))
    recs = records(p)
    for t in ("i1", "u1"):
        rs = sorted((r for r in recs if r["dataset"] == f"/{t}"), key=lambda r: r["write"])
        assert len(rs) == (17 if t == "i1" else 15)
        for k, r in enumerate(rs):
            assert r["source"] == "stats", r
            x = np.load(f"{p}.{t}.{k}.npy")
            check_record(r, x, r["first"][0])
            assert r["hist"]["counts"][15] >= 1 or r["min"] == r["max"]  # the last bin closed: max is in it
        assert rs[0]["hist"]["counts"] == [16] * 16 and rs[2]["hist"]["counts"] == [300_001] + [0] * 15
        rs = sorted((r for r in recs if r["dataset"] == f"/{t}z"), key=lambda r: r["write"])
        assert len(rs) == 4
        for k, r in enumerate(rs):
            assert r["source"] == "stats", r
            check_record(r, np.load(f"{p}.{t}z.{k}.npy"), k << 16)
        rs = sorted((r for r in recs if r["dataset"] == f"/{t}o"), key=lambda r: r["write"])
        x = np.load(f"{p}.{t}o.npy")
        assert rs[0]["source"] == "data" and rs[0]["visible"] == 3 << 19
        check_record(rs[0], x[:3 << 19], 0)
        check_record(rs[1], np.zeros(3 << 19, dtype=t), 3 << 19)
