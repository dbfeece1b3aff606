"""h5flow_log: filters (deflate, shuffle, fletcher32, scale-offset, h5py's LZF, unavailable ones) applied per
written extent (docs/FORMAT.md "Filters"): round trips with partial overwrites, the filters reported by the
creation list, h5dump/h5repack, corruption of filtered data, containers written before filters existed, MPI writers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_vol_h5flow_log import LOG_ENV, run_script
from test_vol_h5flow_log_links import _tool

from h5flow.testing.pytest_mpi import mpi_assert

DATA = Path(__file__).resolve().parent / "data"


def test_filters_round_trip_latest_write_wins(tmp_path: Path) -> None:
    proc = run_script("""
        p = sys.argv[1]
        rng = np.random.default_rng(7)
        specs = {
            "gzip": dict(dtype="i4", compression="gzip", compression_opts=6, shuffle=True, fletcher32=True),
            "lzf": dict(dtype="f8", compression="lzf"),                 # h5py registers it: a user filter
            "sof": dict(dtype="i2", scaleoffset=0),
            "fl32": dict(dtype="f4", fletcher32=True),
        }
        model = {}
        with opened(h5py.File(p, "w")) as f:
            for name, kw in specs.items():
                d = f.create_dataset(name, shape=(60, 40), chunks=(16, 8), maxshape=(None, 40), fillvalue=3, **kw)
                m = np.full((60, 40), 3, dtype=d.dtype)
                d[...] = m = (np.arange(2400).reshape(60, 40) % 97).astype(d.dtype)
                for k in range(40):                                   # overlapping partial overwrites
                    r0, c0 = rng.integers(0, 55), rng.integers(0, 35)
                    h, w = rng.integers(1, 6), rng.integers(1, 6)
                    v = rng.integers(-50, 50, size=(h, w)).astype(d.dtype)
                    d[r0:r0 + h, c0:c0 + w] = v
                    m[r0:r0 + h, c0:c0 + w] = v
                    if k % 9 == 0:                                    # reads between writes
                        assert (d[...] == m).all(), name
                d[[1, 5, 9], 2] = np.array([7, 8, 9], dtype=d.dtype)  # a point selection
                m[[1, 5, 9], 2] = [7, 8, 9]
                d.resize((70, 40))                                     # grown rows read as the fill value
                m = np.concatenate([m, np.full((10, 40), 3, dtype=d.dtype)])
                d[65:70, ::3] = 11
                m[65:70, ::3] = 11
                assert (d[...] == m).all(), name
                model[name] = m
            big = f.create_dataset("big", data=np.zeros(1 << 20, "i8"), chunks=(1 << 16,), compression="gzip")
        with opened(h5py.File(p, "r")) as f:
            for name, m in model.items():
                d = f[name]
                assert (d[...] == m).all(), name
                assert (d[17:23, 5:31] == m[17:23, 5:31]).all(), name
            g = f["gzip"]
            print("gzip", g.compression, g.compression_opts, g.shuffle, g.fletcher32)
            print("lzf", f["lzf"].compression, "sof", f["sof"].scaleoffset, "fl32", f["fl32"].fletcher32)
            assert (f["big"][...] == 0).all()
            plist = g.id.get_create_plist()
            print("nfilters", plist.get_nfilters(), [plist.get_filter(i)[0] for i in range(plist.get_nfilters())])
            print("shuffle cd", plist.get_filter(0)[2])                # set_local gave it the element size
    """, str(tmp_path / "f.h5"))
    out = proc.stdout
    assert "gzip gzip 6 True True" in out
    assert "lzf lzf sof 0 fl32 True" in out
    assert "nfilters 3 [2, 1, 3]" in out  # shuffle, deflate, fletcher32: h5py's order
    assert "shuffle cd (4,)" in out
    # the data really is compressed: 8 MiB of zeros written once
    big = sum(p.stat().st_size for p in (tmp_path / "f.h5" / "big").glob("@log.*.dat"))
    assert 0 < big < 100_000, big
    # h5flow ls reads filtered datasets' sidecars and index records (flag 8)
    from h5flow.cli import main
    from h5flow.connectors import h5flow_log

    entries = {e.path: e for e in h5flow_log.scan(tmp_path / "f.h5")}
    assert entries["/gzip"].shape == (70, 40) and entries["/big"].data_bytes == big
    assert main(["ls", str(tmp_path / "f.h5")]) == 0


def test_filters_corrupt_data_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "c.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("z", data=np.arange(10000, dtype="i4"), chunks=(1000,), compression="gzip")
            f.create_dataset("f", data=np.arange(10000, dtype="i4"), chunks=(1000,), fletcher32=True)
    """, str(p))
    for name in ("z", "f"):
        dat = next((p / name).glob("@log.*.dat"))
        b = bytearray(dat.read_bytes())
        b[len(b) // 2] ^= 0x5A
        dat.write_bytes(bytes(b))
    read = """
        with opened(h5py.File(sys.argv[1], "r")) as f:
            for name in ("z", "f"):
                try:
                    v = f[name][...]
                    print(name, "READ", (v == np.arange(10000)).all())
                except OSError as e:
                    print(name, "ERROR", str(e).replace(chr(10), " ")[:400])
    """
    out = run_script(read, str(p)).stdout
    assert out.count("data checksum mismatch") == 2, out  # the log's own data checksum catches it first
    old = os.environ.get("H5FLOW_LOG_VERIFY")
    os.environ["H5FLOW_LOG_VERIFY"] = "0"
    try:
        out = run_script(read, str(p)).stdout
    finally:
        if old is None:
            del os.environ["H5FLOW_LOG_VERIFY"]
        else:
            os.environ["H5FLOW_LOG_VERIFY"] = old
    # without it, the filters themselves refuse the bytes (inflate fails; fletcher32 mismatches): never data
    assert "READ" not in out, out
    assert out.count("failed to decode") == 2, out


def test_filters_refused_with_reasons(tmp_path: Path) -> None:
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            try:
                f.create_dataset("x", shape=(8,), chunks=(4,), dtype=h5py.string_dtype(), compression="gzip")
                print("created")
            except (ValueError, RuntimeError, OSError) as e:
                print("refused:", str(e).replace(chr(10), " ")[-300:])
            print("exists", "x" in f)
            # a filter HDF5 does not have: created as natively (checked when data is written); h5py's
            # allow_unknown_filter makes it optional: skipped (filter mask), the data stored unfiltered
            d = f.create_dataset("opt", shape=(8,), chunks=(4,), dtype="i4", compression=32019,
                                 allow_unknown_filter=True)
            d[...] = np.arange(8)
            print("optional", d[...].tolist())
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((4,))
            dcpl.set_filter(32019, 0, ())                       # mandatory
            sid = h5py.h5s.create_simple((8,))
            d = h5py.Dataset(h5py.h5d.create(f.id, b"mand", h5py.h5t.NATIVE_INT32, sid, dcpl=dcpl))
            print("mandatory read", d[...].tolist())              # unwritten: fill values
            try:
                d[...] = np.arange(8)
                print("mandatory written")
            except (ValueError, RuntimeError, OSError) as e:
                print("write refused:", str(e).replace(chr(10), " ")[-300:])
            print("mandatory after", d[...].tolist())
        with opened(h5py.File(sys.argv[1], "r")) as f:
            print("reopened", f["opt"][...].tolist())
    """, str(tmp_path / "r.h5")).stdout
    assert "created" not in out and "refused:" in out and "variable-length parts" in out, out
    assert "exists False" in out
    assert "optional [0, 1, 2, 3, 4, 5, 6, 7]" in out, out
    assert "mandatory read [0, 0, 0, 0, 0, 0, 0, 0]" in out, out
    assert "mandatory written" not in out and "filter 32019 is not available" in out, out
    assert "mandatory after [0, 0, 0, 0, 0, 0, 0, 0]" in out, out  # nothing of the failed write is stored
    assert "reopened [0, 1, 2, 3, 4, 5, 6, 7]" in out, out


def test_container_written_before_filters_reads_and_writes(tmp_path: Path) -> None:
    """tests/data/pre_filters_container was written by main (ce60537) before this format change."""
    p = tmp_path / "old"
    shutil.copytree(DATA / "pre_filters_container", p)
    run_script("""
        p = sys.argv[1]
        want = np.arange(1200, dtype="i4").reshape(40, 30)
        want[5:9, 3:20] = -7
        want = np.concatenate([want, np.zeros((10, 30), "i4")]); want[45:50] = 99
        with opened(h5py.File(p, "r")) as f:
            assert (f["c"][...] == want).all()
            assert list(f["s"].asstr()[...]) == ["ab", "cde"]
            assert f["c"].compression is None
        with opened(h5py.File(p, "a")) as f:
            f["c"][0, :] = 5
            want[0, :] = 5
            f.create_dataset("z", data=np.arange(50), chunks=(10,), compression="gzip")
        with opened(h5py.File(p, "r")) as f:
            assert (f["c"][...] == want).all()
            assert (f["z"][...] == np.arange(50)).all()
    """, str(p))


def test_h5dump_and_h5repack_show_filters(tmp_path: Path) -> None:
    src = tmp_path / "s.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", data=np.arange(400, dtype="i4").reshape(20, 20), chunks=(5, 20),
                                 compression="gzip", compression_opts=5, shuffle=True)
            d[2:4] = -1
    """, str(src))
    env = dict(os.environ, **LOG_ENV)
    dump = subprocess.run([_tool("h5dump"), "-p", "-H", str(src)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert dump.returncode == 0, dump.stderr
    assert "SHUFFLE" in dump.stdout and "COMPRESSION DEFLATE { LEVEL 5 }" in dump.stdout, dump.stdout
    native = tmp_path / "n.h5"
    rp = subprocess.run([_tool("h5repack"), "--dst-vol-value=0", "--dst-vol-name=native", str(src), str(native)],
                        env=env, capture_output=True, text=True, timeout=120)
    assert rp.returncode == 0, rp.stdout + rp.stderr
    back = tmp_path / "b.h5"
    rp = subprocess.run([_tool("h5repack"), "--src-vol-value=0", "--src-vol-name=native", str(native), str(back)],
                        env=env, capture_output=True, text=True, timeout=120)
    assert rp.returncode == 0, rp.stdout + rp.stderr
    menv = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    check = subprocess.run(["python", "-c", """
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "r") as f:
    d = f["d"]; want = np.arange(400, dtype="i4").reshape(20, 20); want[2:4] = -1
    print("native", d.compression, d.compression_opts, d.shuffle, (d[...] == want).all())
""", str(native)], env=menv, capture_output=True, text=True, timeout=120)
    assert "native gzip 5 True True" in check.stdout, check.stdout + check.stderr
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"]; want = np.arange(400, dtype="i4").reshape(20, 20); want[2:4] = -1
            print("back", d.compression, d.compression_opts, d.shuffle, (d[...] == want).all())
    """, str(back)).stdout
    assert "back gzip 5 True True" in out, out


@pytest.mark.mpi(n=3, env=LOG_ENV, timeout=240)
def test_mpi_filtered_writes_latest_wins(comm, mpi_tmp_path: Path) -> None:
    """3 ranks write rows of a gzip+shuffle dataset independently, then overwrite each other's rows in turns
    (separated by collective flushes); every rank reads the merged result."""
    import h5py
    import numpy as np

    from h5flow import _hdf5lib

    path = mpi_tmp_path / "mf.h5"
    n = comm.size
    want = np.zeros((4 * n, 50), "i8")
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "h5flow_log", "h5flow_log not loaded")
        d = f.create_dataset("d", shape=want.shape, dtype="i8", chunks=(2, 50), compression="gzip", shuffle=True)
        for r in range(n):
            want[4 * r:4 * r + 4] = np.arange(200).reshape(4, 50) + 1000 * r
        d[4 * comm.rank:4 * comm.rank + 4] = want[4 * comm.rank:4 * comm.rank + 4]
        f.flush()
        for turn in range(n):  # rank `turn` overwrites a stripe crossing every rank's rows
            want[:, 10 * turn:10 * turn + 5] = -(turn + 1)
            if comm.rank == turn:
                d[:, 10 * turn:10 * turn + 5] = -(turn + 1)
            f.flush()
        got = d[...]
        mpi_assert(comm, np.array_equal(got, want), "read after flush differs")
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        d = f["d"]
        mpi_assert(comm, np.array_equal(d[...], want) and d.compression == "gzip" and d.shuffle,
                   "read back after reopen differs")
    comm.Barrier()


def test_statistics_of_filtered_writes_come_from_their_records(tmp_path: Path) -> None:
    """A filtered write's statistics record is used (not recomputed from the data), and both ways give
    numpy's numbers: the record must be checked against the write's unfiltered length."""
    run_script("""
        import glob, json
        from h5flow.stats import dataset_stats
        p = sys.argv[1]
        x = np.random.default_rng(1).normal(size=(64, 100)); x[5, 7] = np.nan
        with h5py.File(p, "w") as f:
            d = f.create_dataset("d", shape=x.shape, dtype="f8", chunks=(8, 100), compression="gzip", shuffle=True)
            for i in range(0, 64, 8):
                d[i:i + 8] = x[i:i + 8]
            d[10:12] = 3.0
        ref = x.copy(); ref[10:12] = 3.0
        for damaged in (False, True):
            if damaged:
                for s in glob.glob(p + "/d/@stats.*"):
                    open(s, "r+b").truncate(10)
            with h5py.File(p, "r") as f:
                sh = dataset_stats(f["d"])["shards"]
            src = [s["source"] for s in sh]
            assert src.count("stats" if not damaged else "data") == (8 if not damaged else 9), src
            assert np.isclose(max(s["max"] for s in sh), np.nanmax(ref)) and np.isclose(min(s["min"] for s in sh), np.nanmin(ref))
            assert np.isclose(sum(s["sum"] for s in sh), np.nansum(ref)) and sum(s["nan"] for s in sh) == 1
    """, str(tmp_path / "c.h5"))
