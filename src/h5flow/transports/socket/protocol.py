"""Messages of the socket transport (zmq multipart; docs/SOCKET.md).

A consumer's DEALER socket sends requests ``[token, command, json body]`` to a producer rank's ROUTER
socket; a reply is ``[kind, json body, data frames...]``. Commands:

=========  ==================================================  =========================================
command    body                                                reply
=========  ==================================================  =========================================
HELLO      group, consumers                                    OK: rank, run_id, first (seq to start at)
PING       group                                               PONG: rank
NEXT       group, seq, floor, ev (rank 0 only)                 STEP or END, possibly held until available
GET        req, seq, mesh, ids, paths                          DATA: req + one frame per (id, path)
RELEASE    group, seq                                          none
BYE        group                                               none
=========  ==================================================  =========================================

A request whose token is missing or wrong is answered ``ERR`` (``refused``) and never served.
"""

from __future__ import annotations

import json
from typing import Any

import zmq

HELLO, PING, NEXT, GET, RELEASE, BYE = b"HELLO", b"PING", b"NEXT", b"GET", b"RELEASE", b"BYE"
COMMANDS = (HELLO, PING, NEXT, GET, RELEASE, BYE)
OK, PONG, STEP, END, DATA, ERR = b"OK", b"PONG", b"STEP", b"END", b"DATA", b"ERR"
MAX_REQUEST = 1 << 20  # bytes of one inbound frame a producer accepts (requests are small)


def request(token: bytes, command: bytes, **body: Any) -> list[bytes]:
    return [token, command, json.dumps(body).encode()]


def reply(kind: bytes, **body: Any) -> list[bytes]:
    return [kind, json.dumps(body).encode()]


def parse_reply(frames: list[Any]) -> tuple[bytes, dict[str, Any], list[Any]]:
    """(kind, body, data frames) of a reply received with ``copy=False`` (frames) or as bytes."""
    if len(frames) < 2:
        raise ValueError(f"malformed reply of {len(frames)} frame(s)")
    kind = frames[0].bytes if isinstance(frames[0], zmq.Frame) else frames[0]
    raw = frames[1].bytes if isinstance(frames[1], zmq.Frame) else frames[1]
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("malformed reply body")
    return kind, body, frames[2:]


def dealer(ctx: zmq.Context, endpoint: str, *, linger_ms: int = 0) -> zmq.Socket:
    """A DEALER socket connected to ``endpoint`` (a producer rank's ROUTER)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, linger_ms)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(endpoint)
    return s
