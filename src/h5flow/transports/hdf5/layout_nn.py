"""Layout n-n of the hdf5 transport (the default): one serial HDF5 file per rank and step, with the extents of
its raw data for consumers' raw reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from h5flow.model import StepMeta
from h5flow.transports._common import dataset_layout
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5._layout import StagedBlock, StepFiles


class PerRankLayout(StepFiles):
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`: this rank's ``rank-<r>.h5``."""

    def _write_per_rank(self, path: Any, meta: StepMeta, staged: dict[str, list[StagedBlock]]) -> None:
        """This rank's step file through HDF5's low-level calls (``_h5.create_rank_file``: the file h5py's
        high-level calls would make, with less Python per step)."""
        rank, phase = self.comm.rank, self._phase
        with phase("create"):
            fid = _h5.create_rank_file(path)
        extents: dict[str, list[Any] | None] = {}
        try:
            with phase("metadata"):
                self._write_attrs(fid, meta, rank=rank)
            for name, mesh in meta.meshes.items():
                g = _h5.create_group(fid, name)
                mine = staged[name]
                for i, (path_, _assoc, dtype, ncomp) in enumerate(dataset_layout(mesh)):
                    parts = [b.payload[i][1] for b in mine]
                    # one block (the usual case) is written from the simulation's array, without a copy
                    data = (parts[0] if len(parts) == 1 else np.concatenate(parts) if parts
                            else np.zeros((0, ncomp), dtype=dtype))
                    with phase("write"):
                        dset = _h5.write_new_dataset(g, path_, data.astype(dtype, copy=False))
                    extents[f"{name}/{path_}"] = _h5.dataset_extent(dset)
                    del dset
                del g
        finally:
            with phase("close"):
                _h5.close_rank_file(fid)
        with phase("close"):  # where HDF5 put the raw data, for consumers' raw reads (the file is closed)
            _h5.write_extents(Path(path), extents)
