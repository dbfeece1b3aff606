"""The socket transport's settings: its XML attributes, checked, and its cleanup of a finished run's files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from h5flow.config import TransportConfig
from h5flow.transports.plugin import (LIVENESS_ATTRIBUTES, POLLING_ATTRIBUTES, QUEUE_ATTRIBUTES, TransportEntry,
                                      TransportSettings, WriterReader, check_dead_consumer, read_liveness,
                                      read_polling, read_queue)
from h5flow.xmlnode import XmlNode


@dataclass
class SocketSettings(TransportSettings):
    """``<transport type="socket">`` (docs/SOCKET.md); ``config.settings`` of its TransportConfig."""

    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = QUEUE_ATTRIBUTES | POLLING_ATTRIBUTES | LIVENESS_ATTRIBUTES | {"interface", "quota", "cma"}

    interface: str = ""  # address, host or interface name the producers listen on ("*": all); "" = 127.0.0.1
    quota_bytes: int = 0  # max staged bytes of unreleased steps; 0 = unlimited
    queue_limit: int = 0  # max unreleased steps staged; 0 = unlimited
    queue_policy: str = "block"  # block (producer waits) | discard (the new step is dropped)
    group: str = "default"  # consumer group name (each group sees every step)
    # heartbeat period (s) of producer ranks and consumer groups; one is lost after 1.5x this without one
    heartbeat: float = 1.0
    # producer blocked on a consumer group that stopped beating: wait (say so) | drop (go on without it) | error
    dead_consumer: str = "wait"
    poll_min: float = 0.0005  # consumer polling: first interval (s), doubled up to poll_max
    poll_max: float = 0.02
    # same-node consumers copy the blocks straight out of the producer's memory (Cross Memory Attach,
    # docs/SOCKET.md); false: every byte goes over the socket. Producer: offer it; consumer: use it
    cma: bool = True

    def __post_init__(self) -> None:
        check_dead_consumer(self.dead_consumer)

    @classmethod
    def from_xml(cls, node: XmlNode) -> SocketSettings:
        s = cls()
        read_queue(node, s)
        read_polling(node, s)
        read_liveness(node, s)
        s.interface = node.string("interface", s.interface)
        s.quota_bytes = node.nbytes("quota", s.quota_bytes)
        s.cma = node.boolean("cma", s.cma)
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
