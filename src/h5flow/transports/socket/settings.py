"""The socket transport's settings: its XML attributes, checked, and its cleanup of a finished run's files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from h5flow.settings import setting
from h5flow.transports.plugin import StreamSettings, TransportEntry, WriterReader

if TYPE_CHECKING:
    from h5flow.config import TransportConfig


@dataclass
class SocketSettings(StreamSettings):
    """``<transport type="socket">`` (docs/SOCKET.md); ``config.settings`` of its TransportConfig."""

    interface: str = setting(
        "", "where the producers listen: an IP address, host name, network interface name, or `*` for all",
        side="producer", default_doc="127.0.0.1", accepted_doc="a non-empty string, e.g. `*`, `ib0`, `10.1.2.3`")
    quota_bytes: int = setting(0, "most payload bytes of unreleased steps held in producer memory; 0 = unlimited",
                               side="producer", unit="bytes", xml="quota")
    cma: bool = setting(
        True, "a consumer rank on its producer rank's node copies the blocks out of the producer's memory (Cross "
              "Memory Attach, `process_vm_readv`), the socket carrying only control messages; `false`: every byte "
              "over the socket (docs/SOCKET.md). Producer: offer it; consumer: use it")


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
