"""Messages of the socket transport (zmq multipart; docs/SOCKET.md).

A consumer's DEALER socket sends requests ``[token, command, json body]`` to a producer rank's ROUTER
socket; a reply is ``[kind, json body, data frames...]``. Commands:

=========  ==================================================  =========================================
command    body                                                reply
=========  ==================================================  =========================================
HELLO      group, consumers                                    OK: rank, run_id, first (seq to start at)
PING       group                                               PONG: rank
NEXT       group, seq, floor, ev (rank 0 only)                 STEP or END, possibly held until available
GET        req, seq, mesh, ids, paths [, cma]                  DATA: req + one frame per (id, path); with
                                                               cma (same node): req, cma = where they lie
RELEASE    group, seq                                          none
BYE        group                                               none
=========  ==================================================  =========================================

A request whose token is missing or wrong is answered ``ERR`` (``refused``) and never served.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
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


class Link:
    """A DEALER socket to one producer rank, with a zmq monitor that notices the connection closing.

    A killed producer's connections are closed by its kernel at once: :meth:`broken` turns true then,
    long before a heartbeat could tell, so a consumer waiting for that rank's data does not wait in vain.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, *, linger_ms: int = 0) -> None:
        self.sock = dealer(ctx, endpoint, linger_ms=linger_ms)
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._broken = False

    def broken(self) -> bool:
        while not self._broken and self.monitor.poll(0):
            from zmq.utils.monitor import recv_monitor_message

            self._broken = recv_monitor_message(self.monitor)["event"] == zmq.EVENT_DISCONNECTED
        return self._broken

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a reply; False on timeout or when the connection closed."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.monitor, zmq.POLLIN)
        deadline = time.monotonic() + seconds
        while True:
            ready = dict(poller.poll(max(0.0, deadline - time.monotonic()) * 1000))
            if self.sock in ready:
                return True
            if self.broken() or time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close()


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_tuned = False


def tune_allocator() -> None:
    """Let glibc reuse big freed blocks instead of mapping fresh pages for every step.

    Step buffers (the producer's copies, the messages zmq receives into) are tens of MiB; glibc maps each
    allocation above 32 MiB anew and unmaps it on free, so every step pays a page fault per 4 KiB page,
    which measured slower than the transfer itself. Raising the mmap and trim thresholds to 1 GiB keeps
    such blocks in the heap for reuse. Once per process, Linux/glibc only; skipped when the user set
    ``MALLOC_MMAP_THRESHOLD_`` or ``H5FLOW_SOCKET_MALLOPT=0``.
    """
    global _tuned
    if _tuned or not sys.platform.startswith("linux") or os.environ.get("H5FLOW_SOCKET_MALLOPT") == "0" \
            or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    _tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    for option in (_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD):
        libc.mallopt(option, 1 << 30)
