"""The adios2 transport: ADIOS2's SST (memory to memory) and BP5 (through files) engines.

It exists so that h5flow's hdf5 and socket transports can be compared with ADIOS2 through the *same*
producer, partitioner and analyses (``h5flow bench transit``), not through a separate program.

The ``adios2`` package is an optional extra (``pip install 'h5flow[adios2]'``; ``scripts/setup.sh``
installs it when PyPI has a wheel for this Python). Its PyPI wheel is built without MPI, so each
producer rank writes **its own stream** (``<filename>.r<rank:05d>``; SST leaves a contact file
``….sst`` beside it, BP5 a directory) and each stream is read by exactly one consumer rank, chosen
by SENSEI's contiguous block mapping of the M streams onto the N consumers. The configured
partitioner then decides which consumer analyses which block; a block whose stream is read by
another consumer rank is handed over with MPI. The wire format and the rules are in
:mod:`h5flow.transports.adios2.stream`.
"""

from __future__ import annotations

import importlib.util


def missing_reason() -> str | None:
    """Why the adios2 transport cannot run here, or None when the ``adios2`` package is importable."""
    if importlib.util.find_spec("adios2") is None:
        return ("the adios2 transport needs the optional 'adios2' package (ADIOS2's Python wheel): "
                "`pip install 'h5flow[adios2]'` or re-run scripts/setup.sh")
    return None


def load() -> tuple[type, type]:
    """The (writer, reader) classes; a clear error when the ``adios2`` package is absent."""
    reason = missing_reason()
    if reason is not None:
        from h5flow.transports.base import TransportError

        raise TransportError(reason)
    from h5flow.transports.adios2.reader import Adios2Reader
    from h5flow.transports.adios2.writer import Adios2Writer

    return Adios2Writer, Adios2Reader


__all__ = ["load", "missing_reason"]
