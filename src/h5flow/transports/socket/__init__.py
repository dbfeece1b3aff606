"""The socket transport: memory to memory over zmq, each consumer rank pulling exactly its blocks.

Writer: :class:`~h5flow.transports.socket.writer.SocketWriter` (a serving thread per producer rank,
:mod:`.server`); reader: :class:`~h5flow.transports.socket.reader.SocketReader`; rendezvous and token:
:mod:`.contact`; messages: :mod:`.protocol` (docs/SOCKET.md).
"""

from h5flow.transports.socket.reader import SocketReader
from h5flow.transports.socket.writer import SocketWriter

__all__ = ["SocketReader", "SocketWriter"]
