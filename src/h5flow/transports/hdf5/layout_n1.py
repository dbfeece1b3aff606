"""Layout n-1 of the hdf5 transport: one shared file per step, written by every rank through MPI-IO."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5flow.model import StepMeta
from h5flow.transports._common import dataset_layout
from h5flow.transports._mpiutil import sleepy_allgather
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5._layout import StagedBlock, StepFiles, write_slab


class SharedLayout(StepFiles):
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`: the step's ``data.h5`` (collective)."""

    def _write_shared(self, path: Path, meta: StepMeta, staged: dict[str, list[StagedBlock]]) -> str:
        """Collective: write the step's shared file; "" or this rank's error.

        A failed data write (a full file system) does not leave the collective sequence: the rank keeps
        making every collective call (with nothing to write), flushes, and the ranks agree on the outcome
        (``allgather``) before the collective close, so they all leave the file the same way."""
        comm, cfg = self._wcomm, self.settings
        error = ""

        def failed(what: str, e: BaseException) -> None:
            nonlocal error
            if not error:
                error = f"rank {comm.rank}: {what} {path}: {e}"

        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE if cfg.collective else h5py.h5fd.MPIO_INDEPENDENT)
        phase = self._phase
        try:
            with phase("create"):
                f = _h5.open_shared(path, "w", comm, cfg.driver)
        except Exception as e:  # noqa: BLE001 - the open is collective: it fails on every rank or none
            failed("creating", e)
            return error
        try:
            with phase("metadata"):
                self._write_attrs(f, meta)
                f.create_dataset("meta", data=np.frombuffer(self._meta_json(meta).encode(), dtype=np.uint8))
            for name, mesh in meta.meshes.items():
                with phase("metadata"):
                    g = f.create_group(name)
                    g.attrs["kind"] = mesh.kind
                mine = staged[name]
                payloads = [b.payload for b in mine]
                n_calls = comm.allreduce(len(mine), op=_max()) if cfg.collective else len(mine)
                for i, (path_, assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    offsets = mesh.offsets(assoc)
                    with phase("metadata"):
                        dset = g.create_dataset(path_, shape=(offsets[-1], ncomp), dtype=dtype, fillvalue=None,
                                                fill_time="never")
                    t_write = time.perf_counter()
                    for k in range(n_calls):
                        if k < len(mine) and not error:
                            data = payloads[k][i][1]
                            if data.dtype != dtype:
                                data = data.astype(dtype)
                            try:
                                write_slab(dset, offsets[mine[k].block_id], data, dxpl, ncomp)
                            except Exception as e:  # noqa: BLE001 - decided together; a failed collective
                                failed("writing", e)  # write has been made by every rank already
                        elif cfg.collective:
                            write_slab(dset, 0, None, dxpl, ncomp)
                    phase.add("write", time.perf_counter() - t_write)
            try:
                with phase("flush"):
                    f.flush()
            except Exception as e:  # noqa: BLE001
                failed("flushing", e)
            with phase("agree"):
                agreed = [e for e in sleepy_allgather(comm, error) if e]
        finally:
            try:
                with phase("close"):
                    f.close()
            except Exception as e:  # noqa: BLE001
                failed("closing", e)
        return error or (f"rank {comm.rank}: another rank failed" if agreed else "")


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
