"""Producer side of the socket transport: the steps a rank holds in memory, and the thread serving them.

Every producer rank runs one :class:`Server` thread owning a zmq ROUTER socket. It answers the consumers'
requests (docs/SOCKET.md) from the rank's :class:`Store` while the simulation computes: data requests
(``GET``) are answered from the step's arrays without copying them (zmq sends the numpy buffers
themselves), so a consumer pulls exactly its blocks from exactly the ranks that own them. Producer rank 0
also answers ``NEXT`` (which step comes next) and holds the stream's event log (published, discarded,
end of stream).
"""

from __future__ import annotations

import hmac
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from h5flow.transports.socket import protocol as P
from h5flow.transports.socket.contact import advertised, bind_address, local_endpoint


@dataclass
class Held:
    """One published step on one producer rank."""

    seq: int
    step: int
    time: float
    nbytes: int  # the whole step's payload (all ranks)
    arrays: dict[tuple[str, int], dict[str, np.ndarray]]  # (mesh, block id) -> dataset path -> (count, ncomp)
    published_at: float = 0.0  # rank 0
    meta_json: str = ""  # rank 0


@dataclass
class Group:
    released_seq: int
    last_ping: float
    lost: bool = False
    got_end: bool = False


@dataclass
class _Waiter:
    ident: bytes
    group: str
    seq: int
    floor: int
    ev: int


@dataclass
class Store:
    """What one producer rank holds and knows about the consumer groups. Guarded by ``cond``."""

    rank: int
    heartbeat: float
    cond: threading.Condition = field(default_factory=threading.Condition)
    held: dict[int, Held] = field(default_factory=dict)
    stored: int = 0  # steps stored so far: the next seq
    announced: list[int] = field(default_factory=list)  # rank 0: the step of each announced seq
    discards: list[tuple[int, str]] = field(default_factory=list)  # rank 0: (step, reason)
    groups: dict[str, Group] = field(default_factory=dict)
    ever: bool = False  # a consumer group has registered at some point
    end_count: int | None = None  # rank 0: set by close(): the number of announced steps
    refused: int = 0  # requests refused for a missing or wrong token

    def released(self) -> int:
        """Every seq up to this one needs no holding: the slowest live group released it.

        No live group: if one was registered and all are gone (lost, or said BYE), the stream has lost its
        consumers and nothing is held back (a vanished consumer never stalls the producer); if none ever
        registered, nothing is released (``block`` waits for the first group, as the hdf5 transport does).
        """
        live = [g.released_seq for g in self.groups.values() if not g.lost]
        if live:
            return min(live)
        return self.stored - 1 if self.ever else -1

    def unreleased(self) -> list[Held]:
        r = self.released()
        return [h for h in self.held.values() if h.seq > r]

    def collect(self) -> None:
        """Drop the steps no live group needs any more (their buffers go once zmq has sent them)."""
        r = self.released()
        for seq in [s for s in self.held if s <= r]:
            del self.held[seq]

    def add(self, held: Held) -> None:
        with self.cond:
            self.held[held.seq] = held
            self.stored = held.seq + 1
            self.collect()

    def drained(self) -> bool:
        """Every live group released every step (or nobody ever will: groups gone, or nothing published)."""
        if not self.ever:
            return self.stored == 0
        last = self.stored - 1
        return all(g.released_seq >= last for g in self.groups.values() if not g.lost)

    def live_groups(self) -> list[str]:
        return sorted(name for name, g in self.groups.items() if not g.lost)

    def told_end(self) -> bool:
        return all(g.got_end for g in self.groups.values() if not g.lost)


class Server(threading.Thread):
    """Serves one producer rank's :class:`Store` on a ROUTER socket, on its own thread."""

    def __init__(self, ctx: zmq.Context, store: Store, token: bytes, run_id: str, interface: str) -> None:
        super().__init__(name=f"h5flow-socket-server-{store.rank}", daemon=True)
        self.store = store
        self._token = token
        self._run_id = run_id
        self._waiters: list[_Waiter] = []
        self._answered = threading.Event()
        self._router = ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 1000)  # at close: let the last replies (END) go out
        self._router.setsockopt(zmq.SNDHWM, 0)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.MAXMSGSIZE, P.MAX_REQUEST)
        try:
            self._router.bind(bind_address(interface))
        except zmq.ZMQError as e:
            self._router.close(0)
            raise RuntimeError(f"cannot listen on interface {interface or '127.0.0.1'!r}: {e}") from None
        self.endpoint = advertised(self._router.getsockopt_string(zmq.LAST_ENDPOINT))
        self.local = local_endpoint(run_id, store.rank)
        if self.local:
            try:
                self._router.bind(self.local)
            except zmq.ZMQError:
                self.local = ""  # consumers use TCP then
        address = f"inproc://h5flow-socket-wake-{id(self)}"
        self._wake_in = ctx.socket(zmq.PULL)
        self._wake_in.bind(address)
        self._wake = ctx.socket(zmq.PUSH)  # used by the producer's main thread only
        self._wake.setsockopt(zmq.LINGER, 0)
        self._wake.connect(address)
        self.start()

    # -- called from the producer's main thread ------------------------------------------------------
    def wake(self) -> None:
        """Answer waiting ``NEXT`` requests now (a step was announced, or the stream ended).

        Waits (at most 50 ms) until they are answered: the serving thread needs the GIL, which a producer
        going straight on to compute its next step would hand over only after Python's switch interval
        (5 ms), and that would be the consumers' discovery latency.
        """
        waiting = bool(self._waiters)
        self._answered.clear()
        self._wake.send(b"W")
        if waiting:
            self._answered.wait(0.05)

    def stop(self) -> None:
        if self.is_alive():
            self._wake.send(b"S")
            self.join(10)
        self._wake.close(0)

    # -- the thread ----------------------------------------------------------------------------------
    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._wake_in, zmq.POLLIN)
        tick = min(0.25, self.store.heartbeat / 4) * 1000
        try:
            while True:
                events = dict(poller.poll(tick))
                if self._wake_in in events:
                    stop = False
                    while self._wake_in.poll(0):
                        stop = self._wake_in.recv() == b"S" or stop
                    if stop:
                        return
                    self._answer_waiters()
                    self._answered.set()
                if self._router in events:
                    for _ in range(64):  # a burst, then look at the other socket again
                        try:
                            frames = self._router.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        self._handle(frames)
                self._check_groups()
        except Exception as e:  # noqa: BLE001 - reported; the consumers then see this rank lost
            print(f"h5flow: socket stream, producer rank {self.store.rank}: serving thread failed: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            self._router.close()
            self._wake_in.close(0)

    def _send(self, ident: bytes, parts: list[Any]) -> None:
        self._router.send_multipart([ident, *parts], copy=False)

    def _handle(self, frames: list[zmq.Frame]) -> None:
        ident = frames[0].bytes
        if len(frames) < 4 or not hmac.compare_digest(frames[1].bytes, self._token):
            self._refuse(ident, frames)
            return
        cmd = frames[2].bytes
        body: Any = None
        try:
            body = json.loads(frames[3].bytes)
            if not isinstance(body, dict) or cmd not in P.COMMANDS:
                raise ValueError(f"unknown command {cmd[:16]!r}")
            getattr(self, f"_on_{cmd.decode().lower()}")(ident, body)
        except (ValueError, KeyError, TypeError) as e:
            self._send(ident, P.reply(P.ERR, req=body.get("req") if isinstance(body, dict) else None,
                                      error=f"bad request to producer rank {self.store.rank}: {e}"))

    def _refuse(self, ident: bytes, frames: list[zmq.Frame]) -> None:
        self.store.refused += 1
        try:
            peer = frames[-1].get("Peer-Address")
        except zmq.ZMQError:
            peer = "unknown"
        what = "without a token" if len(frames) < 4 else "with a wrong token"
        print(f"h5flow: socket stream, producer rank {self.store.rank}: refused a request {what} from {peer} "
              f"(refusal {self.store.refused})", file=sys.stderr, flush=True)
        self._send(ident, P.reply(P.ERR, error=f"refused: a request {what}; every request must carry the run's "
                                               "token from the stream's contact file"))

    # -- commands ------------------------------------------------------------------------------------
    def _on_ping(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        with st.cond:
            g = st.groups.get(str(body["group"]))
            lost = g is not None and g.lost
            if g is not None and not g.lost:
                g.last_ping = time.time()
        self._send(ident, P.reply(P.PONG, rank=st.rank, lost=lost))

    def _on_hello(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        name = str(body["group"])
        with st.cond:
            g = st.groups.get(name)
            resumed = g is not None and not g.lost
            if g is not None and not g.lost:
                first = g.released_seq + 1  # a restarted group resumes at its first unreleased step
                g.last_ping = time.time()
            else:
                first = min(st.held) if st.held else st.stored
                st.groups[name] = Group(first - 1, time.time())
            st.ever = True
            st.cond.notify_all()
        self._send(ident, P.reply(P.OK, rank=st.rank, run_id=self._run_id, first=first, resumed=resumed))

    def _on_release(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        with st.cond:
            g = st.groups.get(str(body["group"]))
            if g is not None and not g.lost:
                g.released_seq = max(g.released_seq, int(body["seq"]))
                g.last_ping = time.time()
                st.collect()
                st.cond.notify_all()

    def _on_bye(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        with st.cond:
            st.groups.pop(str(body["group"]), None)
            st.collect()
            st.cond.notify_all()

    def _on_get(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        req, seq, mesh = body["req"], int(body["seq"]), str(body["mesh"])
        with st.cond:
            held = st.held.get(seq)
            if held is None:
                self._send(ident, P.reply(P.ERR, req=req, error=f"producer rank {st.rank} no longer holds sequence "
                                                                f"{seq}: it was released or dropped"))
                return
            out = []
            for i in body["ids"]:
                arrays = held.arrays.get((mesh, int(i)))
                if arrays is None:
                    raise KeyError(f"producer rank {st.rank} holds no block {i} of mesh {mesh!r} in step {held.step}")
                out.extend(arrays[str(p)] for p in body["paths"])
        self._send(ident, [*P.reply(P.DATA, req=req), *out])

    def _on_next(self, ident: bytes, body: dict[str, Any]) -> None:
        self._waiters.append(_Waiter(ident, str(body["group"]), int(body["seq"]), int(body["floor"]),
                                     int(body["ev"])))
        self._answer_waiters()

    def _answer_waiters(self) -> None:
        st = self.store
        with st.cond:
            keep = []
            for w in self._waiters:
                start = max(w.seq, w.floor)
                ready = [s for s in st.held if start <= s < len(st.announced)]
                news = {"discarded": st.discards[w.ev:], "ev": len(st.discards)}
                if ready:
                    h = st.held[min(ready)]
                    self._send(w.ident, P.reply(P.STEP, seq=h.seq, step=h.step, time=h.time, nbytes=h.nbytes,
                                                published_at=h.published_at, meta=h.meta_json,
                                                missed=st.announced[w.seq : h.seq], **news))
                elif st.end_count is not None and start >= st.end_count:
                    self._send(w.ident, P.reply(P.END, count=st.end_count, missed=st.announced[w.seq : st.end_count],
                                                **news))
                    g = st.groups.get(w.group)
                    if g is not None:
                        g.got_end = True
                    st.cond.notify_all()
                else:
                    keep.append(w)
            self._waiters = keep

    def _check_groups(self) -> None:
        st = self.store
        now = time.time()
        limit = 1.5 * st.heartbeat
        with st.cond:
            for name, g in st.groups.items():
                if not g.lost and now - g.last_ping > limit:
                    g.lost = True
                    st.collect()
                    st.cond.notify_all()
                    if st.rank == 0:
                        print(f"h5flow: consumer group {name!r} lost: no heartbeat for {now - g.last_ping:.2f} s "
                              f"(heartbeat every {st.heartbeat:g} s); the producer no longer holds steps for it",
                              file=sys.stderr, flush=True)
