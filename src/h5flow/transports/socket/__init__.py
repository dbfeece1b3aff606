"""The socket transport: memory to memory over zmq, each consumer rank pulling exactly its blocks.

Writer: :class:`~h5flow.transports.socket.writer.SocketWriter` (a serving thread per producer rank,
:mod:`.server`); reader: :class:`~h5flow.transports.socket.reader.SocketReader`; rendezvous and token:
:mod:`.contact`; messages: :mod:`.protocol` (docs/SOCKET.md).
"""

from __future__ import annotations

import importlib
from typing import Any

# imported on first use, so that reading this transport's settings (:mod:`.settings`) stays light
_LAZY = {"SocketReader": "reader", "SocketWriter": "writer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SocketReader", "SocketWriter"]
