"""The socket transport's settings: its XML attributes, checked, and its cleanup of a finished run's files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from h5flow.config import TransportConfig
from h5flow.transports.plugin import (POLLING_ATTRIBUTES, QUEUE_ATTRIBUTES, BuiltinSettings, TransportEntry,
                                      WriterReader, read_polling, read_queue)
from h5flow.xmlnode import XmlNode


@dataclass
class SocketSettings(BuiltinSettings):
    """``<transport type="socket">`` (docs/SOCKET.md); copied into the TransportConfig fields of these names."""

    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = QUEUE_ATTRIBUTES | POLLING_ATTRIBUTES | {"interface", "quota"}

    interface: str = TransportConfig.interface
    quota_bytes: int = TransportConfig.quota_bytes
    queue_limit: int = TransportConfig.queue_limit
    queue_policy: str = TransportConfig.queue_policy
    group: str = TransportConfig.group
    heartbeat: float = TransportConfig.heartbeat
    poll_min: float = TransportConfig.poll_min
    poll_max: float = TransportConfig.poll_max

    @classmethod
    def from_xml(cls, node: XmlNode) -> SocketSettings:
        s = cls()
        read_queue(node, s)
        read_polling(node, s)
        s.interface = node.string("interface", s.interface)
        s.quota_bytes = node.nbytes("quota", s.quota_bytes)
        return s


def _load() -> WriterReader:
    from h5flow.transports.socket.reader import SocketReader
    from h5flow.transports.socket.writer import SocketWriter

    return SocketWriter, SocketReader


def cleanup(config: TransportConfig) -> None:
    """A dead producer's contact file would make the consumers report it lost; an earlier run's end file
    would end this run's consumers at once."""
    from h5flow.transports.socket.contact import contact_path, ended_path

    contact_path(config.filename).unlink(missing_ok=True)
    ended_path(config.filename).unlink(missing_ok=True)


ENTRY = TransportEntry(load=_load, settings=SocketSettings, cleanup=cleanup)
