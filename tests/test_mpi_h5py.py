"""Parallel h5py on the project's stack: 4 ranks write disjoint hyperslabs of one dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.pytest_mpi import mpi_assert

ROWS_PER_RANK, COLS = 64, 96


def _expected(rank: int) -> np.ndarray:
    """A slab whose every value encodes (rank, row, column), so a misplaced row cannot go unnoticed."""
    r = np.arange(ROWS_PER_RANK)[:, None]
    c = np.arange(COLS)[None, :]
    return (rank * 1_000_000 + r * 1000 + c).astype(np.float64)


@pytest.mark.mpi(n=4)
@pytest.mark.parametrize("transfer", ["collective", "independent"])
def test_disjoint_hyperslabs_read_back_exactly(comm, mpi_tmp_path: Path, transfer: str) -> None:
    import h5py

    path = mpi_tmp_path / f"slabs-{transfer}.h5"
    rank, size = comm.rank, comm.size
    rows = np.s_[rank * ROWS_PER_RANK : (rank + 1) * ROWS_PER_RANK]

    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        assert f.driver == "mpio"
        dset = f.create_dataset("field", shape=(size * ROWS_PER_RANK, COLS), dtype="f8")
        if transfer == "collective":
            with dset.collective:
                dset[rows, :] = _expected(rank)
        else:
            dset[rows, :] = _expected(rank)
    comm.Barrier()

    # Parallel read-back, each rank reading a *different* rank's slab (no help from its own buffers),
    # collectively and independently.
    other = (rank + 1) % size
    other_rows = np.s_[other * ROWS_PER_RANK : (other + 1) * ROWS_PER_RANK]
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        dset = f["field"]
        with dset.collective:
            coll = dset[other_rows, :]
        indep = dset[other_rows, :]
    mpi_assert(comm, np.array_equal(coll, _expected(other)), "collective parallel read-back differs")
    mpi_assert(comm, np.array_equal(indep, _expected(other)), "independent parallel read-back differs")

    # Serial read-back: rank 0 alone, default (sec2) driver, the whole dataset.
    ok = True
    if rank == 0:
        with h5py.File(path, "r") as f:
            assert f.driver == "sec2"
            whole = f["field"][...]
        ok = whole.shape == (size * ROWS_PER_RANK, COLS) and all(
            np.array_equal(whole[r * ROWS_PER_RANK : (r + 1) * ROWS_PER_RANK], _expected(r)) for r in range(size)
        )
    mpi_assert(comm, comm.bcast(ok, root=0), "serial read-back of the whole dataset differs")


@pytest.mark.mpi(n=4)
def test_threadsafe_hdf5_under_mpi_thread_multiple(comm, mpi_tmp_path: Path) -> None:
    """h5flow's HDF5 is thread-safe: threads of one rank read and write concurrently through h5py."""
    import threading

    import h5py
    from mpi4py import MPI

    from h5flow import _hdf5lib

    mpi_assert(comm, MPI.Query_thread() == MPI.THREAD_MULTIPLE, "MPI did not grant MPI_THREAD_MULTIPLE")
    mpi_assert(comm, _hdf5lib.is_threadsafe(), "HDF5 is not thread-safe")
    path = mpi_tmp_path / f"threads-{comm.rank}.h5"
    errors: list[BaseException] = []
    with h5py.File(path, "w") as f:

        def work(t: int) -> None:
            try:
                for i in range(20):
                    f[f"t{t}/d{i}"] = np.full(1000, t * 100 + i, dtype="i4")
                    assert f[f"t{t}/d{i}"][17] == t * 100 + i
            except BaseException as e:  # collected and re-raised on the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        count = sum(len(f[f"t{t}"]) for t in range(4))
    mpi_assert(comm, not errors and count == 80, f"threaded h5py failed: {errors!r}, {count} datasets")
