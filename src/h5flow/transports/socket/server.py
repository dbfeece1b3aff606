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
import os
import secrets
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from h5flow.transports._common import check_group
from h5flow.transports.socket import protocol as P
from h5flow.transports.socket.cma import regions_of
from h5flow.transports.socket.contact import advertised, bind_address, local_endpoint

MAX_INT = 1 << 53  # every integer of a request (seq, req, ev, ...) lies in 0..MAX_INT
MAX_IDS = 1 << 16  # most block ids in one GET
MAX_PATHS = 256  # most dataset paths in one GET
MAX_CONTAINERS = 8  # most '[' plus '{' in a request body: valid ones have at most 3, and this bounds nesting
MAX_GROUPS = 256  # most consumer groups registered on a rank at once
REFUSAL_REPLIES = 8  # refused requests answered per peer identity; later ones are dropped unanswered
REFUSAL_PEERS = 4096  # peer identities remembered for that count
LOG_PERIOD = 10.0  # seconds between two summaries of refused or bad requests on stderr
LOG_FIRST = 5  # refused or bad requests logged one by one before the summaries start


class BadRequest(ValueError):
    """A request with the valid token whose body is not what its command takes."""


def _int(body: dict[str, Any], key: str, low: int = 0, high: int = MAX_INT) -> int:
    v = body.get(key)
    if type(v) is not int or not low <= v <= high:  # bool, float (1e400 is inf), str, None are refused
        raise BadRequest(f"field {key!r} must be an integer in {low}..{high}, got {_show(v)}")
    return v


def _str(body: dict[str, Any], key: str, limit: int = 128) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= limit:
        raise BadRequest(f"field {key!r} must be a string of 1-{limit} characters, got {_show(v)}")
    return v


def _group(body: dict[str, Any]) -> str:
    try:
        return check_group(body.get("group"))  # type: ignore[arg-type]
    except ValueError as e:
        raise BadRequest(str(e)[:200]) from None


def _list(body: dict[str, Any], key: str, limit: int) -> list[Any]:
    v = body.get(key)
    if not isinstance(v, list) or len(v) > limit:
        raise BadRequest(f"field {key!r} must be a list of at most {limit} items, got {_show(v)}")
    return v


def _show(v: Any) -> str:
    text = repr(v) if not isinstance(v, (list, dict)) else f"a {type(v).__name__} of {len(v)} items"
    return text if len(text) <= 40 else text[:37] + "..."


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body: a JSON object of bounded nesting, integers and strings (no floats, NaN or Infinity)."""
    if raw.count(b"[") + raw.count(b"{") > MAX_CONTAINERS:
        raise BadRequest(f"body nests or holds more than {MAX_CONTAINERS} lists/objects")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"body is not JSON ({e})"[:200]) from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _no_constant(name: str) -> Any:
    raise BadRequest(f"body holds {name}, which is not a number")


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
    # a random non-zero nonce while the step is held, 0 once it is let go (same-node readers check it: .cma)
    stamp: np.ndarray = field(default_factory=lambda: np.array([secrets.randbits(62) + 1], dtype=np.int64))


@dataclass
class Group:
    released_seq: int
    last_ping: float
    lost: bool = False
    got_end: bool = False
    dropped: bool = False  # lost, and its steps no longer kept (dead_consumer="drop", or it closed its reader)


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
    #: a group that stopped beating: its steps are kept ("wait", "error": the producer decides when blocked on it)
    #: or not ("drop")
    dead_consumer: str = "wait"
    cond: threading.Condition = field(default_factory=threading.Condition)
    held: dict[int, Held] = field(default_factory=dict)
    stored: int = 0  # steps stored so far: the next seq
    announced: list[int] = field(default_factory=list)  # rank 0: the step of each announced seq
    discards: list[tuple[int, str]] = field(default_factory=list)  # rank 0: (step, reason)
    groups: dict[str, Group] = field(default_factory=dict)
    ever: bool = False  # a consumer group has registered at some point
    end_count: int | None = None  # rank 0: set by close(): the number of announced steps
    refused: int = 0  # requests refused for a missing or wrong token
    bad: int = 0  # requests with the token that were not valid
    # group name -> [first, last released] seq of each attachment (rank 0: what each group took)
    history: dict[str, list[list[int]]] = field(default_factory=dict)
    losses: dict[str, list[str]] = field(default_factory=dict)  # group name -> why it was declared lost, each time
    detached: dict[str, int] = field(default_factory=dict)  # group name -> last seq it released before its BYE
    bye_error: dict[str, str] = field(default_factory=dict)  # group name -> the error its reader closed on, if any
    retired: list[Held] = field(default_factory=list)  # let go at the last collect, freed at the next (.cma)
    # rank 0 decides every question about a group (new, resumed, lost, what it missed); the other ranks let
    # go of a step only once rank 0 has (its ``upto``, handed to them at each step: ``root_upto``), so they
    # hold whatever rank 0 may still hand out
    upto: int = -1  # rank 0: every seq up to this one has been let go
    root_upto: int = -1  # other ranks: rank 0's ``upto`` as of the last step
    failure: str = ""  # rank 0: why the producer stopped (``producer rank R failed: ...``), told to consumers

    def skipped(self, name: str, start: int, stop: int) -> tuple[list[int], list[list[Any]]]:
        """Rank 0: the announced steps of seqs ``start..stop-1`` that group ``name`` skips, as (missed: published
        before the group first attached; dropped: ``[step, reason]``, published since and never released by any
        attachment of it). Every NEXT answer carries them, so a group learns every step it will never get,
        whenever it was dropped (after it attached again included)."""
        spans = self.history.get(name) or [[stop, stop - 1]]
        why = "; ".join(self.losses.get(name, [])) or \
            f"consumer group {name!r} had not released it when the producer let it go"
        missed, dropped = [], []
        for s in range(start, min(stop, len(self.announced))):
            if s < spans[0][0]:
                missed.append(self.announced[s])
            elif not any(a <= s <= b for a, b in spans):
                dropped.append([self.announced[s], why])
        return missed, dropped

    def resume_at(self, name: str) -> int:
        """Rank 0: the seq a group attaching again counts from (after the last step any attachment released;
        0 for a group never seen, so its first answer names what it missed)."""
        spans = self.history.get(name)
        return max(b for _, b in spans) + 1 if spans else 0

    def dropped_for(self, name: str) -> dict[str, Any] | None:
        """Rank 0: the steps group ``name`` lost because it was declared lost (announced, never released by any
        attachment of it, no longer held), and why; None when it lost none."""
        why = self.losses.get(name)
        spans = self.history.get(name)
        if not why or not spans:
            return None
        start = spans[0][0]
        steps = [self.announced[s] for s in range(start, len(self.announced))
                 if s not in self.held and not any(a <= s <= b for a, b in spans)]
        return {"steps": steps, "reason": "; ".join(why)} if steps else None

    def all_dropped(self) -> dict[str, dict[str, Any]]:
        """Rank 0: :meth:`dropped_for` of every group that lost steps."""
        out = {}
        for name in self.losses:
            d = self.dropped_for(name)
            if d:
                out[name] = d
        return out

    def holds_for(self, g: Group) -> bool:
        """Whether steps are kept for group ``g``: while it beats, and after it stopped unless it was dropped
        (``dead_consumer="drop"``, or a closed reader that did not come back: :meth:`drops`)."""
        return not g.dropped

    def drops(self, name: str) -> bool:
        """Whether group ``name``, declared lost, is dropped: with ``dead_consumer="drop"``, and with "wait" when
        it closed its reader (BYE) and did not come back within the heartbeat limit: it left on purpose or on an
        error, and nobody would restart it for the producer, so waiting for it would be waiting for ever
        ("error" stops the stream instead)."""
        return self.dead_consumer == "drop" or (self.dead_consumer == "wait" and name in self.detached)

    def closed_text(self, name: str) -> str:
        """How group ``name`` left when it closed its reader ("" when it did not)."""
        if name not in self.detached:
            return ""
        last = self.detached[name]
        step = self.announced[last] if 0 <= last < len(self.announced) else "none"
        why = self.bye_error.get(name)
        return f"it closed its reader after step {step}" + (f" on an error: {why}" if why else "")

    def revive(self, g: Group) -> None:
        """A group that stopped beating and whose steps were kept is heard from again: it counts as live."""
        if g.lost and not g.dropped:
            g.lost = False

    def released(self) -> int:
        """Every seq up to this one needs no holding: the slowest group steps are kept for released it.

        No such group: if one was registered and all are gone (dropped, or said BYE), the stream has lost its
        consumers and nothing is held back; if none ever registered, nothing is released (``block`` waits for
        the first group, as the hdf5 transport does).
        """
        live = [g.released_seq for g in self.groups.values() if self.holds_for(g)]
        if live:
            return min(live)
        return self.stored - 1 if self.ever else -1

    def unreleased(self) -> list[Held]:
        r = self.released()
        return [h for h in self.held.values() if h.seq > r]

    def collect(self) -> None:
        """Drop the steps no live group needs any more (their buffers go once zmq has sent them).

        A dropped step's stamp is zeroed first and its arrays are kept until the next collection that drops
        steps, so a same-node consumer copying them (:mod:`.cma`) reads the zero if any byte may be reused."""
        r = self.released() if self.rank == 0 else self.root_upto
        if self.rank == 0:
            self.upto = max(self.upto, r)
        gone = [s for s in self.held if s <= r]
        if not gone:
            return
        self.retired = []
        for seq in gone:
            held = self.held.pop(seq)
            held.stamp[0] = 0
            self.retired.append(held)

    def follow(self, upto: int) -> None:
        """A rank other than 0: let go of what rank 0 has let go of."""
        with self.cond:
            self.root_upto = max(self.root_upto, upto)
            self.collect()

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
        return all(g.released_seq >= last for g in self.groups.values() if self.holds_for(g))

    def live_groups(self) -> list[str]:
        return sorted(name for name, g in self.groups.items() if not g.lost)

    def told_end(self) -> bool:
        return all(g.got_end for g in self.groups.values() if not g.lost)


class _RateLog:
    """stderr lines about refused or bad requests: the first :data:`LOG_FIRST` one by one, then one summary
    every :data:`LOG_PERIOD` seconds at most, so a flood of requests cannot flood the log."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.count = 0
        self.pending: dict[str, int] = {}
        self.since = time.time()

    def wants(self) -> bool:
        return self.count < LOG_FIRST

    def note(self, kind: str, text: str) -> None:
        self.count += 1
        if self.count <= LOG_FIRST and text:
            print(f"h5flow: socket stream, producer rank {self.rank}: {text}"
                  + (" (further ones are summarised)" if self.count == LOG_FIRST else ""), file=sys.stderr, flush=True)
            self.since = time.time()
        else:
            self.pending[kind] = self.pending.get(kind, 0) + 1
            self.flush()

    def flush(self, force: bool = False) -> None:
        now = time.time()
        if self.pending and (force or now - self.since >= LOG_PERIOD):
            what = ", ".join(f"{n} {kind}" for kind, n in sorted(self.pending.items()))
            print(f"h5flow: socket stream, producer rank {self.rank}: {what} request(s) in the last "
                  f"{now - self.since:.0f} s", file=sys.stderr, flush=True)
            self.pending.clear()
            self.since = now


class Server(threading.Thread):
    """Serves one producer rank's :class:`Store` on a ROUTER socket, on its own thread."""

    def __init__(self, ctx: zmq.Context, store: Store, token: bytes, run_id: str, interface: str,
                 cma: bool = False) -> None:
        super().__init__(name=f"h5flow-socket-server-{store.rank}", daemon=True)
        self.store = store
        self.cma = cma  # answer a GET with "cma" by where the arrays lie (this process can be read: .cma.offer)
        self._token = token
        self._run_id = run_id
        self._waiters: list[_Waiter] = []
        self._answered = threading.Event()
        self._router = ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 1000)  # at close: let the last replies (END) go out
        self._router.setsockopt(zmq.SNDHWM, 0)
        self._router.setsockopt(zmq.RCVHWM, 1000)  # per peer: a flooding peer is made to wait (TCP), not queued
        self._log = _RateLog(store.rank)
        self._refusals: OrderedDict[bytes, int] = OrderedDict()  # peer identity -> refused requests
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

    def fail(self, reason: str) -> None:
        """Rank 0, the producer stopping on an error: every waiting and later ``NEXT`` is answered ``ERR`` with
        ``reason`` (``producer rank R failed: ...``)."""
        with self.store.cond:
            self.store.failure = reason
        if self.is_alive():  # a serving thread that stopped answers nobody (its wake socket is closed)
            self.wake()

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
                self._log.flush()
        except Exception as e:  # noqa: BLE001 - reported; the consumers then see this rank lost
            print(f"h5flow: socket stream, producer rank {self.store.rank}: serving thread failed: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            self._log.flush(force=True)
            self._router.close()
            self._wake_in.close(0)

    def _send(self, ident: bytes, parts: list[Any]) -> None:
        self._router.send_multipart([ident, *parts], copy=False)

    def _handle(self, frames: list[zmq.Frame]) -> None:
        """One request. Nothing a peer sends stops this thread: a refused or bad request is answered ``ERR``
        (refused ones at most :data:`REFUSAL_REPLIES` times per peer) and logged at a bounded rate."""
        ident = frames[0].bytes
        if len(frames) != 4 or not hmac.compare_digest(frames[1].bytes, self._token):
            self._refuse(ident, frames)  # before anything of the request is parsed or stored
            return
        cmd = frames[2].bytes
        req: Any = None
        try:
            body = parse_body(frames[3].bytes)
            req = body.get("req") if type(body.get("req")) is int else None
            if cmd not in P.COMMANDS:
                raise BadRequest(f"unknown command {cmd[:16]!r}")
            getattr(self, f"_on_{cmd.decode().lower()}")(ident, body)
        except (BadRequest, KeyError) as e:
            self._bad(ident, req, f"bad request to producer rank {self.store.rank}: {e}")
        except Exception as e:  # noqa: BLE001 - a request must never stop the serving thread
            self._bad(ident, req, f"producer rank {self.store.rank} could not serve a request: {type(e).__name__}: "
                                  f"{str(e)[:200]}")

    def _bad(self, ident: bytes, req: Any, error: str) -> None:
        self.store.bad += 1
        self._log.note("bad", error)
        self._send(ident, P.reply(P.ERR, req=req, error=error))

    def _refuse(self, ident: bytes, frames: list[zmq.Frame]) -> None:
        self.store.refused += 1
        what = "without a token" if len(frames) < 4 else \
            "with a wrong token" if len(frames) == 4 else f"of {len(frames) - 1} frames (requests have 3)"
        if self._log.wants():
            try:
                peer = frames[-1].get("Peer-Address")
            except zmq.ZMQError:
                peer = "unknown"
            self._log.note("refused", f"refused a request {what} from {peer} (refusal {self.store.refused})")
        else:
            self._log.note("refused", "")
        answered = self._refusals.pop(ident, 0)
        if answered < REFUSAL_REPLIES:  # a flood is not answered: unread answers would pile up in memory here
            self._send(ident, P.reply(P.ERR, error=f"refused: a request {what}; every request must carry the run's "
                                                   "token from the stream's contact file"))
        self._refusals[ident] = answered + 1  # most recent last
        if len(self._refusals) > REFUSAL_PEERS:
            del self._refusals[next(iter(self._refusals))]

    # -- commands ------------------------------------------------------------------------------------
    def _on_ping(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        name = _group(body)
        with st.cond:
            g = st.groups.get(name)
            if g is not None:
                st.revive(g)
            lost = g is not None and g.lost
            if g is not None and not g.lost:
                g.last_ping = time.time()
        self._send(ident, P.reply(P.PONG, rank=st.rank, lost=lost))

    def _on_hello(self, ident: bytes, body: dict[str, Any]) -> None:
        """Producer rank 0 decides where the group starts (``first``) and from which seq it counts what it
        skipped (``resume``); the consumer then tells the other ranks that decision (``first`` in the body)."""
        st = self.store
        name = _group(body)
        _int(body, "consumers", 1, 1 << 24)
        with st.cond:
            g = st.groups.get(name)
            if g is not None:
                st.revive(g)  # a restarted consumer of a group whose steps were kept resumes
            resumed = g is not None and not g.lost
            if g is None and sum(not x.lost for x in st.groups.values()) >= MAX_GROUPS:
                raise BadRequest(f"{MAX_GROUPS} consumer groups are attached already")
            if st.rank != 0:
                first = _int(body, "first")
                if first <= st.root_upto:  # rank 0 decided on what it held: this rank holds at least that
                    raise BadRequest(f"producer rank {st.rank} no longer holds sequence {first}")
                st.groups[name] = Group(first - 1, time.time())
            elif resumed:
                assert g is not None
                first = g.released_seq + 1  # a restarted group resumes at its first unreleased step
                g.last_ping = time.time()
            else:
                first = min(st.held) if st.held else st.stored
                resume = st.resume_at(name)
                st.groups[name] = Group(first - 1, time.time())
                st.history.setdefault(name, []).append([first, first - 1])
            st.ever = True
            st.detached.pop(name, None)  # it is back
            st.bye_error.pop(name, None)
            st.cond.notify_all()
        extra = {} if st.rank != 0 else {"resume": first if resumed else resume}
        self._send(ident, P.reply(P.OK, rank=st.rank, run_id=self._run_id, first=first, resumed=resumed, **extra))

    def _on_release(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        name, seq = _group(body), _int(body, "seq")
        with st.cond:
            g = st.groups.get(name)
            if g is not None:
                st.revive(g)
            if g is not None and not g.lost:
                g.released_seq = max(g.released_seq, min(seq, st.stored - 1))
                g.last_ping = time.time()
                spans = st.history.get(name)  # rank 0 alone keeps what each group took
                if spans:
                    spans[-1][1] = g.released_seq
                st.collect()
                st.cond.notify_all()

    def _on_bye(self, ident: bytes, body: dict[str, Any]) -> None:
        """The group closed its reader. It stays registered, its steps held: a consumer restarted soon
        (Ctrl-C, then run again) resumes at its first unreleased step. Whether it comes back is the
        heartbeat's to decide, as for a consumer that died."""
        st = self.store
        name = _group(body)
        error = _str(body, "error", 2000) if "error" in body else ""
        with st.cond:
            g = st.groups.get(name)
            if g is not None and not g.lost:
                st.detached[name] = g.released_seq
                if error:
                    st.bye_error[name] = error
                if error and st.rank == 0:  # (every rank gets the BYE: rank 0 alone says it)
                    print(f"h5flow: consumer group {name!r} closed its reader on an error: {error}", file=sys.stderr,
                          flush=True)

    def _on_get(self, ident: bytes, body: dict[str, Any]) -> None:
        st = self.store
        req, seq, mesh = _int(body, "req"), _int(body, "seq"), _str(body, "mesh")
        ids = [_int({"id": i}, "id") for i in _list(body, "ids", MAX_IDS)]
        paths = [_str({"path": p}, "path") for p in _list(body, "paths", MAX_PATHS)]
        with st.cond:
            held = st.held.get(seq)
            if held is None:
                self._send(ident, P.reply(P.ERR, req=req, error=f"producer rank {st.rank} no longer holds sequence "
                                                                f"{seq}: it was released or dropped"))
                return
            out = []
            for i in ids:
                arrays = held.arrays.get((mesh, i))
                if arrays is None:
                    raise KeyError(f"producer rank {st.rank} holds no block {i} of mesh {mesh!r} in step {held.step}")
                for p in paths:
                    if p not in arrays:
                        raise KeyError(f"block {i} of mesh {mesh!r} has no array {p!r} in step {held.step}")
                    out.append(arrays[p])
            if body.get("cma") is True and self.cma:  # the same node: where they lie, not the bytes (.cma)
                lease = {"pid": os.getpid(), "stamp": int(held.stamp.ctypes.data), "nonce": int(held.stamp[0]),
                         "regions": regions_of(out)}
                self._send(ident, P.reply(P.DATA, req=req, cma=lease))
                return
        self._send(ident, [*P.reply(P.DATA, req=req), *out])

    def _on_next(self, ident: bytes, body: dict[str, Any]) -> None:
        if self.store.rank != 0:
            raise BadRequest("NEXT goes to producer rank 0")
        w = _Waiter(ident, _group(body), _int(body, "seq"), _int(body, "floor"), _int(body, "ev"))
        # one outstanding NEXT per peer (a consumer never sends more): a newer one replaces it
        self._waiters = [x for x in self._waiters if x.ident != ident] + [w]
        self._answer_waiters()

    def _answer_waiters(self) -> None:
        st = self.store
        with st.cond:
            keep = []
            for w in self._waiters:
                start = max(w.seq, w.floor)
                ready = [s for s in st.held if start <= s < len(st.announced)]
                news = {"discarded": st.discards[min(w.ev, len(st.discards)):], "ev": len(st.discards)}
                if st.failure:
                    self._send(w.ident, P.reply(P.ERR, error=st.failure, failed=st.failure))
                elif ready:
                    h = st.held[min(ready)]
                    missed, dropped = st.skipped(w.group, w.seq, h.seq)
                    self._send(w.ident, P.reply(P.STEP, seq=h.seq, step=h.step, time=h.time, nbytes=h.nbytes,
                                                published_at=h.published_at, meta=h.meta_json, missed=missed,
                                                dropped=dropped, **news))
                elif st.end_count is not None and start >= st.end_count:
                    missed, dropped = st.skipped(w.group, w.seq, st.end_count)
                    self._send(w.ident, P.reply(P.END, count=st.end_count, missed=missed, dropped=dropped, **news))
                    g = st.groups.get(w.group)
                    if g is not None:
                        g.got_end = True
                    st.cond.notify_all()
                else:
                    keep.append(w)
            self._waiters = keep

    def _check_groups(self) -> None:
        st = self.store
        if st.rank != 0:  # rank 0 alone declares a group lost: the other ranks follow its upto (Store.collect)
            return
        now = time.time()
        limit = 1.5 * st.heartbeat
        with st.cond:
            for name, g in st.groups.items():
                if not g.lost and now - g.last_ping > limit:
                    g.lost = True
                    if not st.drops(name):  # kept: the producer applies the policy when blocked on it
                        continue
                    g.dropped = True
                    closed = st.closed_text(name)
                    what = f"{closed} and did not come back" if closed else "no heartbeat"
                    st.losses.setdefault(name, []).append(
                        f"consumer group {name!r} declared lost at {time.strftime('%H:%M:%S')}: {what} for "
                        f"{now - g.last_ping:.2f} s (limit 1.5 heartbeats of {st.heartbeat:g} s); the producer "
                        "does not keep steps for a lost group")
                    st.collect()
                    st.cond.notify_all()
                    print(f"h5flow: consumer group {name!r} lost: {what} for {now - g.last_ping:.2f} s (heartbeat "
                          f"every {st.heartbeat:g} s); the producer no longer holds steps for it (dead_consumer="
                          f"{st.dead_consumer!r})", file=sys.stderr, flush=True)
