"""What the hdf5 transport's step files share, whatever their layout: the rows a rank writes, the file's
attributes and ``meta.json`` text, one slab of a dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import h5py
import numpy as np

from h5flow.model import StepMeta
from h5flow.transports.hdf5 import _h5

if TYPE_CHECKING:
    from h5flow.transports._phases import Phases
    from h5flow.transports.hdf5.settings import Hdf5Settings

STEP_FORMAT = "h5flow-step"


class StagedBlock(NamedTuple):
    """One block of this rank as the step's write takes it: its id and ``block_payload``'s rows."""

    block_id: int
    payload: list[tuple[str, np.ndarray]]


def write_slab(dset: Any, offset: int, data: np.ndarray | None, dxpl: Any, ncomp: int) -> None:
    """Write rows [offset, offset+len(data)) of a (count, ncomp) dataset; ``None`` = empty collective part."""
    fspace = dset.id.get_space()
    if data is None or data.shape[0] == 0:
        fspace.select_none()
        mspace = h5py.h5s.create_simple((1, ncomp))
        mspace.select_none()
        dset.id.write(mspace, fspace, np.zeros((1, ncomp), dtype=dset.dtype), dxpl=dxpl)
        return
    fspace.select_hyperslab((offset, 0), (data.shape[0], ncomp))
    mspace = h5py.h5s.create_simple(data.shape)
    dset.id.write(mspace, fspace, data, dxpl=dxpl)


class StepFiles:
    """Mixin of :class:`~h5flow.transports.hdf5.writer.Hdf5Writer` for its layouts (``layout_*.py``): what
    every step file is given."""

    comm: Any
    settings: Hdf5Settings
    _phase: Phases
    _wcomm: Any  # the communicator of the step's collectives (a duplicate on the write thread)
    _json: tuple[StepMeta | None, str]

    def _meta_json(self, meta: StepMeta) -> str:
        """``meta.to_json()``, computed once per step (rank 0 needs it to size, write and embed the step)."""
        if self._json[0] is not meta:
            self._json = (meta, meta.to_json())
        return self._json[1]

    def _write_attrs(self, f: Any, meta: StepMeta, **more: Any) -> None:
        """The step file's attributes (a new file: none exist yet), ``more`` after them. ``f``: an
        ``h5py.File`` or a low-level ``FileID``."""
        _h5.write_new_attrs(f, {"format": STEP_FORMAT, "version": 1, "step": meta.step, "time": meta.time,
                                "producers": meta.producers, "layout": self.settings.layout, **more})
