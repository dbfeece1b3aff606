"""The hdf5 transport's write thread (``async_write``, docs/STREAM.md "Write-behind"): whether it can run, the
copies of a rank's rows it writes from, waiting for its step and its error, stopping it."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from h5flow.transports.base import TransportError


def async_possible(comm: Any, wanted: bool, layout: str) -> tuple[bool, str, bool]:
    """(write steps on a thread, why not when it was asked for, whether to say so on stderr).

    The thread makes MPI calls (its collectives on a duplicate communicator) while the simulation's thread
    may make its own: with more than one rank that needs MPI_THREAD_MULTIPLE. And every wait of the thread
    for another rank must let go of Python's GIL: mpi4py keeps the GIL inside a blocking collective, so a
    simulation thread waiting in one on rank B while rank A's write thread holds the GIL waiting for B's
    write thread would deadlock. n-n and log wait only in h5flow's sleeping collectives; n-1's collective
    HDF5 calls (the mpio driver's open, close and collective transfers) go through h5py, which holds the
    GIL inside them, so n-1 on more than one rank writes inside end_step."""
    if not wanted:
        return False, "", False
    if comm.size > 1:
        from mpi4py import MPI

        if layout == "n-1":
            return False, ("layout n-1's collective HDF5 calls hold Python's GIL while they wait for the other "
                           "ranks (through h5py); steps are written inside end_step"), False
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            return False, ("MPI was initialised without MPI_THREAD_MULTIPLE (mpi4py's default; do not lower "
                           "mpi4py.rc.thread_level), which a write thread needs; steps are written inside end_step"
                           ), True
    return True, "", False


class WriteThread:
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`: its write thread and what it holds."""

    comm: Any
    _wcomm: Any  # the thread's communicator: a duplicate of ``comm`` when there is more than one rank
    _pool: ThreadPoolExecutor | None
    _pending: Future[None] | None
    _failed: str | None
    _buffers: dict[tuple[str, int, str], np.ndarray]

    def _copy_of(self, key: tuple[str, int, str], data: np.ndarray) -> np.ndarray:
        buf = self._buffers.get(key)
        if buf is None or buf.shape != data.shape or buf.dtype != data.dtype:
            buf = self._buffers[key] = np.empty(data.shape, dtype=data.dtype)
        np.copyto(buf, data)
        return buf

    def _drain(self) -> None:
        """Wait for the step on the write thread (if any); raise its error. After an error every later call
        raises it again: the stream is stopped (the X line is written) and no step may follow it."""
        if self._failed is not None:
            raise TransportError(self._failed)
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except TransportError as e:
            self._failed = str(e)
            raise
        except Exception as e:  # noqa: BLE001 - a bug on the write thread: the stream cannot go on
            self._failed = f"rank {self.comm.rank}: writing a step in the background failed: {e!r}"
            raise TransportError(self._failed) from e

    def _stop_write_thread(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._wcomm is not self.comm:
            with contextlib.suppress(Exception):
                self._wcomm.Free()
            self._wcomm = self.comm
        self._buffers.clear()
