"""h5flow: HDF5 as the vehicle that moves scientific data.

Layers (see docs/ARCHITECTURE.md):

* ``h5flow.transports``   — writer/reader pairs that move time steps (HDF5 files, sockets, ADIOS2)
* ``h5flow.partitioners`` — M:N assignment of producer blocks to consumer ranks
* ``h5flow.analyses``     — in-transit analyses run on what a reader delivers
* ``h5flow.connectors``   — locating and loading the C VOL connectors built from ``native/``
* ``h5flow.benchmarks``   — benchmark drivers (``h5flow bench ...``)

The public API (docs/API.md): :func:`open` a stream for writing (``"w"``) or reading (``"r"``), write
decomposed numpy arrays step by step, read this rank's share of them; :mod:`h5flow.analyses` to register
analyses named in XML.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from h5flow.api import (Piece, RankFailed, ReadStream, Share, Step, StepWriter, StreamError, StreamTimeout,
                            WriteStream, open)

_API_NAMES = frozenset({"Piece", "RankFailed", "ReadStream", "Share", "Step", "StepWriter", "StreamError",
                        "StreamTimeout", "WriteStream", "open"})


def __getattr__(name: str) -> Any:
    """The stream API is imported on first use (PEP 562): tools such as ``h5flow pack`` import
    ``h5flow.packing`` without paying for the transports, MPI and XML layers they never touch."""
    if name in _API_NAMES:
        import h5flow.api as _api

        value = getattr(_api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'h5flow' has no attribute {name!r}")

__version__ = "0.1.0"


def pack(src, dst, **kwargs):  # noqa: ANN001, ANN003, ANN201 - see h5flow.packing.pack
    """An h5flow_log container to one native HDF5 file: :func:`h5flow.packing.pack` (``h5flow pack``)."""
    from h5flow.packing import pack as _pack

    return _pack(src, dst, **kwargs)


def unpack(src, dst, **kwargs):  # noqa: ANN001, ANN003, ANN201 - see h5flow.packing.unpack
    """A native HDF5 file to an h5flow_log container: :func:`h5flow.packing.unpack` (``h5flow unpack``)."""
    from h5flow.packing import unpack as _unpack

    return _unpack(src, dst, **kwargs)


__all__ = ["Piece", "RankFailed", "ReadStream", "Share", "Step", "StepWriter", "StreamError", "StreamTimeout",
           "WriteStream", "__version__", "open", "pack", "unpack"]
