"""Transports: writer/reader pairs that move time steps from M producer ranks to N consumer ranks.

Each transport lives in its own module or folder of this package and registers a
``(writer_class, reader_class)`` pair in :data:`registry` under a lower-case name (``hdf5``, ``socket``,
``adios2``). Third parties add transports through the ``h5flow.transports`` entry-point
group. Data flows one way: producer → writer → storage/socket → reader → partitioner → analysis.
"""

from __future__ import annotations

from typing import Any

from h5flow._registry import Registry
from h5flow.config import TransportConfig
from h5flow.transports.base import (BeginStepResult, PublishInfo, Reader, ReadStep, StepStatus, TransportError,
                                    Writer)

registry: Registry = Registry("transport", "h5flow.transports")


def _hdf5() -> tuple[type[Writer], type[Reader]]:
    from h5flow.transports.hdf5 import Hdf5Reader, Hdf5Writer

    return Hdf5Writer, Hdf5Reader


registry.register("hdf5", _hdf5)


def _adios2() -> tuple[type[Writer], type[Reader]]:
    from h5flow.transports.adios2 import load

    return load()


registry.register("adios2", _adios2)


def _socket() -> tuple[type[Writer], type[Reader]]:
    from h5flow.transports.socket import SocketReader, SocketWriter

    return SocketWriter, SocketReader


registry.register("socket", _socket)


def open_writer(comm: Any, config: TransportConfig) -> Writer:
    """The producer side of ``config.type`` on ``comm`` (collective)."""
    writer_cls, _ = registry.get(config.type)
    return writer_cls(comm, config)


def open_reader(comm: Any, config: TransportConfig) -> Reader:
    """The consumer side of ``config.type`` on ``comm`` (collective)."""
    _, reader_cls = registry.get(config.type)
    return reader_cls(comm, config)


__all__ = ["BeginStepResult", "PublishInfo", "ReadStep", "Reader", "StepStatus", "TransportError", "Writer",
           "open_reader", "open_writer", "registry"]
