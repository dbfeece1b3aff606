"""Layout log of the hdf5 transport: one h5flow_log container per step; rank 0 creates its structure, each rank
appends its rows to its own logs (no MPI-IO)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import h5py
import numpy as np

from h5flow.model import StepMeta
from h5flow.transports._common import dataset_layout
from h5flow.transports._mpiutil import bcast_from_root
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5._layout import StagedBlock, StepFiles, write_slab


class LogLayout(StepFiles):
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`: the step's container ``data.h5``."""

    _log_file: h5py.File | None  # rank 0: the step's container from admission to its own writes

    def _create_log(self, path: Path, meta: StepMeta) -> str:
        """Rank 0: the step's container with its structure, kept open in ``self._log_file``; "" or the error."""
        try:
            with self._phase("create"):
                self._log_file = _h5.open_log(path, "w")
            with self._phase("metadata"):
                self._write_log_structure(self._log_file, meta)
        except Exception as e:  # noqa: BLE001 - every rank learns it (with the decision, or broadcast)
            self._close_log_file()
            return f"rank 0: creating {path}: {e}"
        return ""

    def _close_log_file(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(Exception):  # the step is not published: its directory goes
                self._log_file.close()
            self._log_file = None

    def _write_log(self, path: Path, meta: StepMeta, staged: dict[str, list[StagedBlock]], structured: bool) -> str:
        """Collective (no MPI-IO; at most one sleepy barrier): the step as one logical file through h5flow_log;
        "" or this rank's error.

        Rank 0 creates the container with the step's whole structure (attributes, ``meta``, groups, datasets
        of their full shapes): at admission (``structured``: every rank learnt the outcome with the decision),
        or here, broadcasting the outcome. Then every rank holding blocks opens it serially and appends its
        rows to its own logs (the connector gives each open its own epoch, so the ranks share no file). A
        rank's error does not leave the sequence: the outcome is agreed on by the allgather in
        :meth:`_write_step`, and the step is published only after every rank has closed."""
        comm, phase = self._wcomm, self._phase
        error = ""
        if not structured:
            if comm.rank == 0:
                error = self._create_log(path, meta)
            with phase("agree"):
                failed = bcast_from_root(comm, error)
            if failed:
                self._close_log_file()
                return error or f"rank {comm.rank}: another rank failed"
        f, self._log_file = self._log_file, None
        mine = staged
        if not any(mine.values()):
            if f is not None:
                f.close()
            return ""  # nothing of this step on this rank: no open at all
        try:
            if f is None:
                with phase("create"):  # "open": serial, this rank's own epoch and logs
                    f = _h5.open_log(path, "r+")
            dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
            with phase("write"):
                for name, mesh in meta.meshes.items():
                    if not mine[name]:
                        continue
                    for i, (path_, assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                        dset, offsets = f[name][path_], mesh.offsets(assoc)
                        for b in mine[name]:
                            payload = b.payload
                            write_slab(dset, offsets[b.block_id], payload[i][1].astype(dtype, copy=False), dxpl,
                                       ncomp)
        except Exception as e:  # noqa: BLE001 - decided together in _write_step
            error = f"rank {comm.rank}: writing {path}: {e}"
        if f is not None:
            try:
                with phase("close"):
                    f.close()  # the connector's buffered appends reach the logs here
            except Exception as e:  # noqa: BLE001
                error = error or f"rank {comm.rank}: closing {path}: {e}"
        return error

    def _write_log_structure(self, f: h5py.File, meta: StepMeta) -> None:
        """Rank 0: the step container's attributes, ``meta``, groups and datasets of their full shapes (no data)."""
        self._write_attrs(f, meta)
        f.create_dataset("meta", data=np.frombuffer(self._meta_json(meta).encode(), dtype=np.uint8))
        for name, mesh in meta.meshes.items():
            g = f.create_group(name)
            g.attrs["kind"] = mesh.kind
            for path_, assoc, dtype, ncomp in dataset_layout(mesh):
                g.create_dataset(path_, shape=(mesh.offsets(assoc)[-1], ncomp), dtype=dtype)
