"""Layout n-n of the hdf5 transport (the default): one serial HDF5 file per rank and step, with the extents of
its raw data for consumers' raw reads.

A rank file is written in two halves: :meth:`PerRankLayout._queue_per_rank` creates it and hands its rows to
HDF5 (through a ``vol_stack`` of connectors, each write returns once the connector has copied its buffer), and
:meth:`PerRankLayout._finish_per_rank` waits for the file to be on storage (flush and close), then writes its
extents. Without a write thread both run inside ``end_step``; with ``vol_stack`` and the write thread, the
first runs in ``end_step`` and the second on the thread, before the step is published."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h5flow import _hdf5lib
from h5flow.model import StepMeta
from h5flow.transports._common import dataset_layout
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5._layout import StagedBlock, StepFiles


@dataclass
class QueuedRankFile:
    """A rank file whose rows HDF5 (or the connector stack) has taken, not known to be on storage yet."""

    path: Path
    fid: Any = None  # low-level FileID; None once closed or when the create failed
    datasets: dict[str, Any] = field(default_factory=dict)  # "mesh/path" -> DatasetID, for the extents
    error: str = ""  # the create or a write failed: the file is closed, this is raised by the finish


class PerRankLayout(StepFiles):
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`: this rank's ``rank-<r>.h5``."""

    _fapl: Any  # the connector stack's access list (vol_stack), or None: native

    def _write_per_rank(self, path: Any, meta: StepMeta, staged: dict[str, list[StagedBlock]]) -> None:
        """This rank's step file, written and on storage when this returns."""
        self._finish_per_rank(self._queue_per_rank(Path(path), meta, staged))

    def _queue_per_rank(self, path: Path, meta: StepMeta, staged: dict[str, list[StagedBlock]]) -> QueuedRankFile:
        """Create this rank's step file and write its rows through HDF5's low-level calls (``_h5``: the file
        h5py's high-level calls would make, with less Python per step). Never raises: a failure is kept in the
        result (the file closed) for :meth:`_finish_per_rank` to raise."""
        rank, phase = self.comm.rank, self._phase
        queued = QueuedRankFile(path)
        try:
            with phase("create"):
                queued.fid = _h5.create_rank_file(path, self._fapl)
            with phase("metadata"):
                self._write_attrs(queued.fid, meta, rank=rank)
            for name, mesh in meta.meshes.items():
                g = _h5.create_group(queued.fid, name)
                mine = staged[name]
                for i, (path_, _assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    parts = [b.payload[i][1] for b in mine]
                    # one block (the usual case) is written from the simulation's array, without a copy
                    data = (parts[0] if len(parts) == 1 else np.concatenate(parts) if parts
                            else np.zeros((0, ncomp), dtype=dtype))
                    with phase("write"):
                        queued.datasets[f"{name}/{path_}"] = _h5.write_new_dataset(g, path_, data.astype(dtype,
                                                                                                       copy=False))
                del g
        except Exception as e:  # noqa: BLE001 - raised by the finish, in the step's agreement
            queued.error = str(e) or repr(e)
            self._discard_rank_file(queued)
        return queued

    def _finish_per_rank(self, queued: QueuedRankFile) -> None:
        """Wait until the rank file is on storage (with a connector stack: flushed first, its queues drained and
        their errors raised), close it and write its extents next to it."""
        if queued.error:
            raise RuntimeError(queued.error)
        phase = self._phase
        try:
            if self._fapl is not None:
                with phase("flush"):  # the GIL is let go while the connectors' queues for the file drain
                    _hdf5lib.flush_file(queued.fid.id)
            extents = {name: _h5.dataset_extent(dset) for name, dset in queued.datasets.items()}
            queued.datasets.clear()
            with phase("close"):
                fid, queued.fid = queued.fid, None
                _h5.close_rank_file(fid)
        except BaseException:
            self._discard_rank_file(queued)
            raise
        with phase("close"):  # where HDF5 put the raw data, for consumers' raw reads (the file is closed)
            _h5.write_extents(queued.path, extents)

    @staticmethod
    def _discard_rank_file(queued: QueuedRankFile) -> None:
        """Close a rank file whose step will not be published (errors ignored: the step failed already)."""
        queued.datasets.clear()
        fid, queued.fid = queued.fid, None
        if fid is not None:
            try:
                _h5.close_rank_file(fid)
            except Exception:  # noqa: BLE001 - a connector that reports the failure again at its close
                pass
