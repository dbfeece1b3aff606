"""HDF5's subfiling VFD from 4 ranks, then h5fuse into one file that plain h5py reads identically."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.pytest_mpi import mpi_assert

N_PER_RANK = 50_000


def _subfiling_fapl():  # noqa: ANN202 - h5py.h5p.PropFAID
    """A file-access property list selecting the subfiling VFD with its default configuration."""
    import h5py

    from h5flow import _hdf5lib

    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    set_subfiling = _hdf5lib.lib().H5Pset_fapl_subfiling
    set_subfiling.argtypes = [_hdf5lib.hid_t, ctypes.c_void_p]
    set_subfiling.restype = _hdf5lib.herr_t
    assert set_subfiling(fapl.id, None) >= 0, "H5Pset_fapl_subfiling failed"
    return fapl


def _values(rank: int) -> np.ndarray:
    return np.arange(rank * N_PER_RANK, (rank + 1) * N_PER_RANK, dtype=np.int64) * 3 + 1


@pytest.mark.mpi(n=4)
def test_subfiling_write_read_and_h5fuse(comm, mpi_tmp_path: Path) -> None:
    import h5py
    from mpi4py import MPI

    mpi_assert(comm, MPI.Query_thread() == MPI.THREAD_MULTIPLE,
               "the subfiling VFD needs MPI initialised with MPI_THREAD_MULTIPLE")
    rank, size = comm.rank, comm.size
    path = mpi_tmp_path / "sub.h5"
    mine = np.s_[rank * N_PER_RANK : (rank + 1) * N_PER_RANK]

    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fapl=_subfiling_fapl())
    with h5py.File(fid) as f:
        dset = f.create_dataset("values", shape=(size * N_PER_RANK,), dtype="i8")
        dset[mine] = _values(rank)
        f.attrs["writer_ranks"] = size
    comm.Barrier()

    subfiles = sorted(p.name for p in mpi_tmp_path.iterdir() if ".subfile_" in p.name)
    mpi_assert(comm, any(n.endswith(".config") for n in subfiles) and len(subfiles) >= 2,
               f"no subfiles and config written: {subfiles}")

    fid = h5py.h5f.open(str(path).encode(), h5py.h5f.ACC_RDONLY, fapl=_subfiling_fapl())
    with h5py.File(fid) as f:
        other = (rank + 1) % size
        back = f["values"][other * N_PER_RANK : (other + 1) * N_PER_RANK]
        attr = int(f.attrs["writer_ranks"])
    mpi_assert(comm, np.array_equal(back, _values((rank + 1) % size)) and attr == size,
               "subfiling parallel read-back differs")
    comm.Barrier()

    fused_ok, message = True, ""
    if rank == 0:
        config = next(p for p in mpi_tmp_path.iterdir() if p.name.endswith(".config"))
        proc = subprocess.run(["h5fuse", "-q", "-f", str(config)], cwd=mpi_tmp_path, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0:
            fused_ok, message = False, f"h5fuse failed: {proc.stdout}{proc.stderr}"
        else:
            with h5py.File(path, "r") as f:  # plain sec2 driver, no MPI, no subfiling
                whole = f["values"][...]
                fused_ok = np.array_equal(whole, np.concatenate([_values(r) for r in range(size)]))
                fused_ok = fused_ok and int(f.attrs["writer_ranks"]) == size
                message = "fused file differs from what was written"
    mpi_assert(comm, comm.bcast(fused_ok, root=0), comm.bcast(message, root=0))
