"""The hdf5 transport: steps staged as HDF5 files on fast storage (tmpfs, NVMe, burst buffer).

Writer: :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`; reader:
:class:`~h5flow.transports.hdf5.reader.Hdf5Reader`; on-disk protocol: :mod:`.staging` (docs/STREAM.md).
"""

from __future__ import annotations

import importlib
from typing import Any

# imported on first use, so that reading this transport's settings (:mod:`.settings`) stays light
_LAZY = {"Hdf5Reader": "reader", "Hdf5Writer": "writer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Hdf5Reader", "Hdf5Writer"]
