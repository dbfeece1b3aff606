"""Transports: writer/reader pairs that move time steps from M producer ranks to N consumer ranks.

Each transport lives in its own module or folder of this package and registers a
:class:`~h5flow.transports.plugin.TransportEntry` in :data:`registry` under a lower-case name (``hdf5``,
``socket``, ``adios2``, ``null``): its writer and reader, its settings dataclass (which reads and checks its own XML
attributes) and its cleanup of stale state. Third parties add transports with :func:`register` or through
the ``h5flow.transports`` entry-point group (docs/CONFIG.md, "Writing a transport"); a registered name
works in XML, in :func:`h5flow.open` and in ``h5flow run`` like a built-in one. Data flows one way:
producer → writer → storage/socket → reader → partitioner → analysis.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from h5flow._registry import Registry
from h5flow.transports.base import (BeginStepResult, PublishInfo, Reader, ReadStep, StepStatus, TransportError,
                                    Writer)
from h5flow.transports.plugin import TransportEntry, TransportSettings, WriterReader, as_entry

if TYPE_CHECKING:
    from h5flow.config import TransportConfig

#: name → :class:`TransportEntry` (or, from an entry point, a ``(writer, reader)`` pair or a function
#: returning either); use :func:`entry` to look one up
registry: Registry[Any] = Registry("transport", "h5flow.transports")

BUILTIN = ("adios2", "hdf5", "null", "socket")


def _builtin(name: str) -> Callable[[], TransportEntry]:
    def load() -> TransportEntry:
        entry: TransportEntry = importlib.import_module(f"h5flow.transports.{name}.settings").ENTRY
        return entry

    return load


for _name in BUILTIN:
    registry.register(_name, _builtin(_name))


def entry(name: str) -> TransportEntry:
    """The registry entry of transport ``name`` (raises :class:`~h5flow._registry.UnknownPluginError`)."""
    return as_entry(name, registry.get(name))


def register(name: str, writer: type[Writer] | None = None, reader: type[Reader] | None = None, *,
             load: Callable[[], WriterReader] | None = None,
             settings: type[TransportSettings] = TransportSettings,
             cleanup: Callable[[TransportConfig], None] | None = None, replace: bool = False) -> None:
    """Make ``type="name"`` (XML ``<transport>``/``<analysis>``, :func:`h5flow.open`, ``h5flow run``) use
    ``writer`` and ``reader`` (or the pair ``load()`` returns on first use, for optional imports).

    ``settings`` is the transport's :class:`TransportSettings` dataclass: its fields are the XML attributes
    it accepts besides ``type``, ``enabled`` and ``filename``; the parsed object reaches the writer and
    reader as ``config.settings``. ``cleanup(config)`` removes an earlier run's state before ``h5flow run``
    starts the producers. The name only exists in this process: ``h5flow run`` (which starts new processes)
    sees transports registered through the ``h5flow.transports`` entry-point group.
    """
    if load is None:
        if writer is None or reader is None:
            raise TypeError(f"register({name!r}, ...): give writer= and reader= classes, or load=")
        pair: WriterReader = (writer, reader)

        def load() -> WriterReader:
            return pair
    elif writer is not None or reader is not None:
        raise TypeError(f"register({name!r}, ...): give writer= and reader=, or load=, not both")
    if not (isinstance(settings, type) and issubclass(settings, TransportSettings)):
        raise TypeError(f"register({name!r}, ...): settings= must be a TransportSettings dataclass subclass")
    made = TransportEntry(load=load, settings=settings, cleanup=cleanup)
    registry.register(name, lambda: made, replace=replace)


def open_writer(comm: Any, config: TransportConfig) -> Writer:
    """The producer side of ``config.type`` on ``comm`` (collective)."""
    found = entry(config.type)
    writer_cls, _ = found.classes()
    return writer_cls(comm, config)


def open_reader(comm: Any, config: TransportConfig) -> Reader:
    """The consumer side of ``config.type`` on ``comm`` (collective)."""
    found = entry(config.type)
    _, reader_cls = found.classes()
    return reader_cls(comm, config)


__all__ = ["BeginStepResult", "PublishInfo", "ReadStep", "Reader", "StepStatus", "TransportEntry", "TransportError",
           "TransportSettings", "Writer", "entry", "open_reader", "open_writer", "register", "registry"]
