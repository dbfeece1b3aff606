"""The null transport's settings (it has none of its own) and its registry entry."""

from __future__ import annotations

from dataclasses import dataclass

from h5flow.transports.plugin import TransportEntry, TransportSettings, WriterReader


@dataclass
class NullSettings(TransportSettings):
    """``<transport type="null" filename="..."/>``: only the stream's name, which pairs the writer and the reader
    opened in the same process."""


def _load() -> WriterReader:
    from h5flow.transports.null.stream import NullReader, NullWriter

    return NullWriter, NullReader


ENTRY = TransportEntry(load=_load, settings=NullSettings)
