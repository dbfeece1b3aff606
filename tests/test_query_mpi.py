"""h5flow.query under MPI: index build and query evaluation split across ranks give the serial answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.pytest_mpi import mpi_assert


def _make(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    plate = np.repeat(np.arange(4000, 4040), 1000).astype("i4")
    fiber = np.tile(np.arange(1, 1001), 40).astype("i2")
    z = rng.random(plate.size)
    z[rng.random(z.size) < 0.01] = np.nan
    field = np.add.outer(np.sin(np.arange(64) / 9.0), np.cos(np.arange(96) / 7.0)).astype("f4")
    return {"/cat/plate": plate, "/cat/fiber": fiber, "/cat/z": z, "/field": field}


@pytest.mark.mpi(n=2)
def test_parallel_build_query_subset_equal_serial(comm, mpi_tmp_path: Path) -> None:
    import h5py

    from h5flow.query import ApplyOptions, BuildConfig, apply, build_index
    from h5flow.query.subset import subset

    data = _make(mpi_tmp_path)
    serial, par = mpi_tmp_path / "serial.h5", mpi_tmp_path / "par.h5"
    if comm.rank == 0:
        for p in (serial, par):
            with h5py.File(p, "w") as f:
                for k, v in data.items():
                    f.create_dataset(k, data=v, chunks=(4096,) if v.ndim == 1 else (16, 32))
        for k in data:
            build_index(serial, k, BuildConfig(kind="bitmap", bins=16, progress=False))
    comm.Barrier()
    for k in data:
        r = build_index(par, k, BuildConfig(kind="bitmap", bins=16, progress=False), comm=comm)
        mpi_assert(comm, r.ranks == 2, "the build did not run on 2 ranks")
    # the index files agree element for element
    with h5py.File(mpi_tmp_path / "serial.h5.h5flow-index.h5") as a, h5py.File(mpi_tmp_path / "par.h5.h5flow-index.h5") as b:
        for k in data:
            for kind, names in (("minmax", ("min", "max", "nan", "crc32")),
                                ("bitmap", ("bin_min", "bin_max", "bin_count", "offsets", "blob"))):
                for n in names:
                    x, y = a[f"datasets{k}/{kind}/{n}"][()], b[f"datasets{k}/{kind}/{n}"][()]
                    mpi_assert(comm, np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f"{k} {kind}/{n} differs")
    texts = ("/cat/plate == 4022 & /cat/fiber < 100", "/cat/z > 0.99 | /cat/fiber == 7", "/field > 1.5",
             "-0.1 < /field < 0.1", "/cat/z != nan & /cat/plate >= 4039", "/cat/plate < 0")
    for text, kinds in [(t, k) for t in texts for k in (("bitmap", "minmax"), ("minmax",))]:
        # bitmap plans (Roaring sets) and zone-map plans (numpy masks over the zones) alike
        with apply(serial, text, ApplyOptions(kinds=kinds)) as rs, \
                apply(par, text, ApplyOptions(comm=comm, kinds=kinds)) as rp:
            for ds, dp in zip(rs.datasets, rp.datasets):
                cs, cp = ds.to_arrays(with_values=True), dp.to_arrays(with_values=True)
                mpi_assert(comm, ds.count == dp.count and np.array_equal(cs[0], cp[0]) and
                           np.array_equal(cs[1], cp[1], equal_nan=cs[1].dtype.kind == "f"),
                           f"{text} {kinds}: parallel answer differs from serial")
    out_s, out_p = mpi_tmp_path / "sub-s.h5", mpi_tmp_path / "sub-p.h5"
    q = "/cat/plate == 4022 & /cat/fiber < 100"
    if comm.rank == 0:
        subset(serial, q, out_s, include=["/cat/z"])
    comm.Barrier()
    rep = subset(par, q, out_p, include=["/cat/z"], options=ApplyOptions(comm=comm))
    mpi_assert(comm, rep.datasets == {"/cat/plate": 99, "/cat/fiber": 99, "/cat/z": 99}, f"subset counts {rep.datasets}")
    with h5py.File(out_s) as a, h5py.File(out_p) as b:
        for k in ("/cat/plate", "/cat/fiber", "/cat/z"):
            mpi_assert(comm, np.array_equal(a[k]["coords"][()], b[k]["coords"][()]) and
                       np.array_equal(a[k]["values"][()], b[k]["values"][()], equal_nan=True), f"subset {k} differs")
