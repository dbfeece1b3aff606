"""h5flow_log: direct chunk I/O and chunk queries through h5py (docs/FORMAT.md "Direct chunk I/O"), each
scenario run natively and through the connector and compared; errors; MPI writers of chunks. The C side
(every query, chunk bytes and masks against native HDF5, shrink and growth) is the ctest
``h5flow_log.test_chunk``, run normally and under ASan/UBSan by test_vol_h5flow_log.py::test_ctest_suites."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_vol_h5flow_log import LOG_ENV, run_script

from h5flow.testing.pytest_mpi import mpi_assert

SCENARIO = """
import sys, zlib, numpy as np, h5py
from h5flow import _hdf5lib
p = sys.argv[1]
out = {}
def chunks(d):
    it = []
    d.id.chunk_iter(lambda si: it.append(si))
    return it
with h5py.File(p, "w") as f:
    # gzip + shuffle, 10x7 in 4x3 chunks, written by overlapping writes: every chunk's bytes
    g = f.create_dataset("gz", shape=(10, 7), chunks=(4, 3), dtype="i4", compression="gzip", shuffle=True,
                         fillvalue=-5)
    g[...] = np.arange(70).reshape(10, 7)
    g[2:5, 1:5] = -np.arange(12).reshape(3, 4)
    offs = [(r, c) for r in range(0, 10, 4) for c in range(0, 7, 3)]
    out["gz"] = [g.id.read_direct_chunk(o) for o in offs]
    out["gz_info"] = [(g.id.get_chunk_info_by_coord(o).size, g.id.get_chunk_info_by_coord(o).filter_mask)
                      for o in offs]
    out["gz_iter"] = [(si.filter_mask, si.size) for si in chunks(g)]
    out["gz_n"] = g.id.get_num_chunks()
    # a compressed chunk copied into another dataset with write_direct_chunk, then read as data
    c = f.create_dataset("copy", shape=(10, 7), chunks=(4, 3), dtype="i4", compression="gzip", shuffle=True,
                         fillvalue=-5)
    for o, (mask, raw) in zip(offs[:4], out["gz"][:4]):
        c.id.write_direct_chunk(o, raw, filter_mask=mask)
    out["copy"] = c[...].tolist()
    # an unfiltered edge chunk written directly; the dataset grows, shrinks, grows
    e = f.create_dataset("edge", shape=(5, 3), maxshape=(None, None), chunks=(4, 2), dtype="i4", fillvalue=-1)
    e.id.write_direct_chunk((4, 2), (np.arange(8, dtype="i4") + 100).tobytes())
    out["edge"] = [e[...].tolist(), e.id.read_direct_chunk((4, 2))]
    e.resize((8, 4))
    out["edge_grown"] = e[...].tolist()
    e.resize((5, 3))
    e.resize((8, 4))
    out["edge_regrown"] = e[...].tolist()
    # ... growing the first dimension only (the index is not rebuilt), shrinking into the edge chunk
    r = f.create_dataset("rows", shape=(5, 3), maxshape=(None, 3), chunks=(4, 2), dtype="i4", fillvalue=-1)
    r[...] = 0
    r.id.write_direct_chunk((4, 2), (np.arange(8, dtype="i4") + 100).tobytes())
    out["rows"] = r[...].tolist()  # (the index is built here, at the extent before the growth)
    r.resize((8, 3))
    out["rows_grown"] = r[...].tolist()
    r.resize((6, 3))
    r.resize((8, 3))
    out["rows_regrown"] = r[...].tolist()
    # a chunk written by normal writes, one element at a time, read as a chunk
    u = f.create_dataset("u", shape=(6, 6), chunks=(3, 3), dtype="f8", fillvalue=0.5)
    for i in range(6):
        u[i, (i * 5) % 6] = i / 3
    out["u"] = [u.id.read_direct_chunk((r, c)) for r in (0, 3) for c in (0, 3)]
    # all filters skipped
    raw = f.create_dataset("raw", shape=(1, 4, 4), dtype="f4", compression="gzip")
    raw.id.write_direct_chunk((0, 0, 0), np.arange(16).tobytes(), filter_mask=0xFFFFFFFF)
    print("CONN", _hdf5lib.connector_name(f.id.id))
with h5py.File(p, "r") as f:
    out["raw"] = f["raw"].id.read_direct_chunk((0, 0, 0))
    out["copy_again"] = f["copy"][...].tolist()
    out["edge_again"] = f["edge"][...].tolist()
    out["rows_again"] = f["rows"][...].tolist()
    out["gz_again"] = [f["gz"].id.read_direct_chunk(o) for o in offs]
    si = chunks(f["gz"])[0]
    print("OFFSETS", si.chunk_offset is None, si.byte_offset is None)
print(repr(out))
"""


def _run(env_extra: dict[str, str], path: Path) -> str:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", SCENARIO, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return proc.stdout


STACKS = {
    "h5flow_log": "h5flow_log",
    # the writes a stacked connector holds back reach the container before a chunk operation runs
    "cache/h5flow_log": "h5flow_cache path={tier};under_vol=311;under_info={{}}",
    "async/h5flow_log": "h5flow_async under_vol=h5flow_log;under_info={{}}",
}


@pytest.mark.parametrize("stack", list(STACKS))
def test_direct_chunks_and_queries_match_native(stack: str, tmp_path: Path) -> None:
    """Chunk bytes, masks, sizes and the data read back are native's, for gzip+shuffle, unfiltered, edge
    chunks, a chunk written element by element and a chunk with every filter skipped."""
    (tmp_path / "tier").mkdir()
    native = _run({}, tmp_path / "n.h5").splitlines()
    env = dict(LOG_ENV, HDF5_VOL_CONNECTOR=STACKS[stack].format(tier=tmp_path / "tier"))
    log = _run(env, tmp_path / "l.h5").splitlines()
    top = STACKS[stack].split()[0]
    assert native[0] == "CONN native" and log[0] == f"CONN {top}", (native[0], log[0])
    # h5py turns a chunk's offset into None when its address is HADDR_UNDEF (the container's answer)
    assert native[1] == "OFFSETS False False" and log[1] == "OFFSETS True True", (native[1], log[1])
    assert log[2] == native[2]


def test_direct_chunk_errors(tmp_path: Path) -> None:
    proc = run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            d = f.create_dataset("d", shape=(8, 8), chunks=(4, 4), dtype="i4")
            cont = f.create_dataset("cont", data=np.arange(4))
            s = f.create_dataset("s", shape=(4,), chunks=(2,), dtype=h5py.string_dtype())
            cases = {
                "unaligned": lambda: d.id.write_direct_chunk((1, 0), bytes(64)),
                "outside": lambda: d.id.write_direct_chunk((8, 0), bytes(64)),
                "size": lambda: d.id.write_direct_chunk((0, 0), bytes(60)),
                "contiguous": lambda: cont.id.read_direct_chunk((0,)),
                "vlen": lambda: s.id.read_direct_chunk((0,)),
                "unwritten": lambda: (d.__setitem__((5, 5), 1), d.id.read_direct_chunk((0, 0))),
            }
            for name, call in cases.items():
                try:
                    call()
                except Exception as e:
                    print(name, "|", e)
                else:
                    print(name, "| no error")
            print("n", d.id.get_num_chunks(), d.id.get_chunk_info_by_coord((0, 0)).size)
    """, str(tmp_path / "e.h5"))
    out = dict(line.split(" | ", 1) for line in proc.stdout.splitlines() if " | " in line)
    assert "not a multiple of the chunk size" in out["unaligned"], out
    assert "outside the dataset's extent" in out["outside"], out
    assert "must give the chunk's 64 bytes" in out["size"], out
    assert "not a chunked dataset" in out["contiguous"], out
    assert "variable-length parts" in out["vlen"], out
    assert "chunk storage is not allocated" in out["unwritten"], out
    assert "n 1 0" in proc.stdout, proc.stdout


def test_statistics_and_queries_see_only_the_extent(tmp_path: Path) -> None:
    """An edge chunk written directly holds elements past the extent: the per-write statistics and a query
    describe only the element inside it (and all four once the dataset grows)."""
    proc = run_script("""
        import json
        from h5flow.stats import read_stats
        from h5flow.query import apply
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            d = f.create_dataset("x", shape=(5,), maxshape=(None,), chunks=(4,), dtype="i4", fillvalue=0)
            d[0:4] = [-4, -3, -2, -1]
            d.id.write_direct_chunk((4,), np.array([1, 2, 3, 4], "i4").tobytes())
        def show(tag):
            recs = read_stats(p, "x", as_frame=False)
            with apply(p, "x > 1") as r:
                hits = r.count
            print(tag, json.dumps([(r["visible"], r["count"], r["min"], r["max"]) for r in recs]), hits)
        show("edge")
        with opened(h5py.File(p, "a")) as f:
            f["x"].resize((8,))
        show("grown")
    """, str(tmp_path / "s.h5"))
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["edge"] == "[[4, 4, -4, -1], [1, 1, 1, 1]] 0", proc.stdout
    assert lines["grown"] == "[[4, 4, -4, -1], [4, 4, 1, 4]] 3", proc.stdout


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=180)
def test_mpi_direct_chunk_writers(comm, mpi_tmp_path: Path) -> None:
    """Each rank writes its own compressed chunks directly; after a flush every rank reads every chunk, as
    data and as chunk bytes, and lists the same chunks."""
    import zlib

    import h5py
    import numpy as np

    from h5flow import _hdf5lib

    path = mpi_tmp_path / "chunks.h5"
    n = comm.size
    want = np.arange(8 * n * 6, dtype="i8").reshape(8 * n, 6)
    comp = [zlib.compress(want[4 * k:4 * k + 4].tobytes(), 6) for k in range(2 * n)]
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == "h5flow_log", "h5flow_log not loaded")
        d = f.create_dataset("d", shape=want.shape, dtype="i8", chunks=(4, 6), compression="gzip")
        for k in range(comm.rank, 2 * n, n):
            d.id.write_direct_chunk((4 * k, 0), comp[k])
        f.flush()
        got = d[...]
        mpi_assert(comm, np.array_equal(got, want), "data read after the flush differs")
        chunks = [d.id.read_direct_chunk((4 * k, 0)) for k in range(2 * n)]
        mpi_assert(comm, all(m == 0 and b == comp[k] for k, (m, b) in enumerate(chunks)), "chunk bytes differ")
        listed = []
        d.id.chunk_iter(lambda si: listed.append((si.filter_mask, si.size)))
        mpi_assert(comm, listed == [(0, len(c)) for c in comp], f"listed {listed}")
        # an edge chunk written by rank 0, seen by every rank through growth and a collective shrink
        e = f.create_dataset("edge", shape=(5, 3), maxshape=(None, 3), chunks=(4, 2), dtype="i4", fillvalue=-1)
        if comm.rank == 0:
            e.id.write_direct_chunk((4, 2), (np.arange(8, dtype="i4") + 100).tobytes())
        f.flush()
        first = e[...]                     # every rank has built its index at this extent
        e.resize((8, 3))
        grown = e[...]
        e.resize((6, 3))                   # the shrink drops what the edge chunk held past row 6
        e.resize((8, 3))
        f.flush()
        regrown = e[...]
        want_e = np.full((8, 3), -1, "i4")
        want_e[4:8, 2] = [100, 102, 104, 106]
        mpi_assert(comm, np.array_equal(first, want_e[:5]) and np.array_equal(grown, want_e),
                   f"edge chunk on growth: {first.tolist()} {grown.tolist()}")
        want_e[6:, 2] = -1
        mpi_assert(comm, np.array_equal(regrown, want_e), f"edge chunk after the shrink: {regrown.tolist()}")
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        mpi_assert(comm, np.array_equal(f["d"][...], want), "data read after reopening differs")
