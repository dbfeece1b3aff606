"""Consumer side of the socket transport: find the next step, pull this rank's blocks, release."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from h5flow.config import TransportConfig
from h5flow.model import Association, Block, StepMeta
from h5flow.transports._buffers import ReadBuffers
from h5flow.transports._common import assemble_blocks, check_association, check_group, dtype_of
from h5flow.transports._mpiutil import bcast_from_root
from h5flow.transports._phases import Phases
from h5flow.transports.base import BeginStepResult, Reader, ReadStep, StepStatus, TransportError
from h5flow.transports.socket import cma
from h5flow.transports.socket import protocol as P
from h5flow.transports._grouplock import GroupLock
from h5flow.transports.socket.contact import (Contact, contact_path, dropped_message, ended_path, group_lock_path,
                                              load_ended)


class _Pinger(threading.Thread):
    """Consumer rank 0: pings every producer rank every heartbeat/2 on sockets of its own.

    The pings keep the group alive on the producers; the answers (``seen``) tell the reader a producer
    rank is alive, even while the consumer is busy in its analysis.
    """

    def __init__(self, ctx: zmq.Context, contact: Contact, group: str) -> None:
        super().__init__(name="h5flow-socket-pinger", daemon=True)
        self._ctx, self._contact, self._group = ctx, contact, group
        now = time.time()
        self.seen = {r.rank: now for r in contact.ranks}
        self.dropped: int | None = None  # a producer rank that declared this group lost
        self._halt = threading.Event()
        self.start()

    def run(self) -> None:
        token = self._contact.token.encode()
        socks = [P.dealer(self._ctx, r.reachable()) for r in self._contact.ranks]
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        period = self._contact.heartbeat / 2
        try:
            while not self._halt.is_set():
                for s in socks:
                    s.send_multipart(P.request(token, P.PING, group=self._group))
                due = time.time() + period
                while not self._halt.is_set() and (left := due - time.time()) > 0:
                    for s, _ in poller.poll(min(left, 0.1) * 1000):
                        try:
                            kind, body, _ = P.parse_reply(s.recv_multipart())
                        except ValueError:
                            continue
                        if kind == P.PONG:
                            self.seen[int(body["rank"])] = time.time()
                            if body.get("lost"):
                                self.dropped = int(body["rank"])
        finally:
            for s in socks:
                s.close(0)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


class _Fetcher:
    """One consumer rank's data links, one per producer rank it pulls from (connected when first used)."""

    def __init__(self, ctx: zmq.Context, contact: Contact, use_cma: bool = True,
                 explain: Callable[[str], str] = str) -> None:
        self._ctx = ctx
        self.contact = contact
        self.explain = explain  # a producer rank lost -> the reason the producer gave, when it gave one
        self.use_cma = use_cma  # the consumer's setting (cma="false": everything over the socket)
        self._cma_worked: set[int] = set()  # owners whose blocks were copied out of their memory at least once
        self._cma_broken: set[int] = set()  # owners whose memory could not be read: over the socket only
        self.buffers = ReadBuffers()  # what blocks are copied into, reused once the analysis let go of them
        self.token = contact.token.encode()
        self._links: dict[int, P.Link] = {}
        self._req = itertools.count()
        self.timeout = 5 * contact.heartbeat + 5.0  # no answer to a data request for this long: rank lost

    def link(self, rank: int) -> P.Link:
        if rank not in self._links:
            self._links[rank] = P.Link(self._ctx, self.contact.ranks[rank].reachable())
        return self._links[rank]

    def get(self, seq: int, mesh: str, wanted: dict[int, list[int]], paths: list[str],
            sizes: dict[int, list[int]]) -> dict[int, list[Any]]:
        """Ask every owner for its blocks at once, then collect: owner -> the arrays' bytes (zmq frames or
        read-only uint8 arrays), (id, path) order. ``sizes``: owner -> the bytes of each, from the metadata.

        An owner on this node is asked where the arrays lie and they are copied out of its memory
        (:mod:`.cma`); when that fails, the same blocks are asked for over the socket."""
        reqs = {}
        for owner, ids in wanted.items():
            reqs[owner] = self._ask(owner, seq, mesh, ids, paths, cma=self._cma_for(owner))
        out: dict[int, list[Any]] = {}
        for owner, req in reqs.items():
            body, frames = self._answer(owner, seq, mesh, req)
            if "cma" in body:
                try:
                    got = cma.read(cma.Lease.from_body(body["cma"]), sizes[owner], self.buffers)
                except ValueError as e:
                    got = str(e)
                if isinstance(got, str):
                    self._cma_failed(owner, got)
                    body, frames = self._answer(owner, seq, mesh,
                                                self._ask(owner, seq, mesh, wanted[owner], paths, cma=False))
                else:
                    self._cma_worked.add(owner)
                    frames = got
            out[owner] = frames
        return out

    def _ask(self, owner: int, seq: int, mesh: str, ids: list[int], paths: list[str], *, cma: bool) -> int:
        req = next(self._req)
        extra = {"cma": True} if cma else {}
        self.link(owner).sock.send_multipart(P.request(self.token, P.GET, req=req, seq=seq, mesh=mesh, ids=ids,
                                                       paths=paths, **extra))
        return req

    def _answer(self, owner: int, seq: int, mesh: str, req: int) -> tuple[dict[str, Any], list[Any]]:
        link = self.link(owner)
        while True:
            if not link.wait(self.timeout):
                what = "its connection closed" if link.broken() else f"no answer within {self.timeout:g} s"
                raise TransportError(self.explain(f"producer rank {owner} lost while sequence {seq} was being read: "
                                                  f"{what}"))
            kind, body, frames = P.parse_reply(link.sock.recv_multipart(copy=False))
            if body.get("req") != req:
                continue  # the answer to an earlier request that was given up
            if kind != P.DATA:
                raise TransportError(f"sequence {seq}, mesh {mesh!r}: {body.get('error', kind)}")
            return body, frames

    def _cma_for(self, owner: int) -> bool:
        """Copy this owner's blocks out of its memory: on its node, allowed, and not failed before it worked."""
        assert self.contact is not None
        return (self.use_cma and owner not in self._cma_broken
                and self.contact.ranks[owner].reachable() == self.contact.ranks[owner].local)

    def _cma_failed(self, owner: int, why: str) -> None:
        """A copy that failed (the blocks are then asked for over the socket): if it never worked with this
        owner, say why once and stop trying; after it worked, it was this step only (a dropped step)."""
        if owner not in self._cma_worked:
            self._cma_broken.add(owner)
            print(f"h5flow: socket stream: producer rank {owner} is on this node but its blocks cannot be copied "
                  f"out of its memory ({why}); they come over the socket", file=sys.stderr, flush=True)

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


class SocketReadStep(ReadStep):
    def __init__(self, step: int, time_: float, meta: StepMeta, assignment: dict[str, list[int]], seq: int,
                 fetcher: _Fetcher, phase: Phases) -> None:
        super().__init__(step, time_, meta, assignment)
        self.seq = seq
        self._fetcher = fetcher
        self._phase = phase

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        """This rank's blocks, pulled from the producer ranks that own them. The arrays are read-only: views
        of the received messages, or the copies out of a same-node producer's memory (docs/SOCKET.md)."""
        self._check_mesh(mesh)
        m = self.meta.meshes[mesh]
        ids = sorted(self.my_block_ids(mesh))
        wanted = check_association(m, arrays, association)
        layout = [(f"{a.association}/{a.name}", a.association, dtype_of(a.dtype), a.components, a.name)
                  for a in wanted]
        if m.kind == "particles":
            layout.append(("geometry/positions", "point", np.dtype("<f8"), 3, ""))
        by_owner: dict[int, list[int]] = {}
        for i in ids:
            by_owner.setdefault(m.blocks[i].owner, []).append(i)
        sizes = {owner: [m.blocks[i].count(assoc) * ncomp * dtype.itemsize  # type: ignore[arg-type]
                         for i in oids for _, assoc, dtype, ncomp, _ in layout] for owner, oids in by_owner.items()}
        with self._phase("read"):  # the blocks arriving from their producer ranks
            frames = self._fetcher.get(self.seq, mesh, by_owner, [p for p, *_ in layout], sizes) if ids else {}
        values: dict[str, dict[int, np.ndarray]] = {a.name: {} for a in wanted}
        positions: dict[int, np.ndarray] = {}
        for owner, oids in by_owner.items():
            got = frames[owner]
            if len(got) != len(oids) * len(layout):
                raise TransportError(f"producer rank {owner} sent {len(got)} arrays for {len(oids)} blocks of mesh "
                                     f"{mesh!r} × {len(layout)} arrays")
            it, expected = iter(got), iter(sizes[owner])
            for i in oids:
                for path, assoc, dtype, ncomp, name in layout:
                    frame, nbytes = next(it), next(expected)
                    count = m.blocks[i].count(assoc)  # type: ignore[arg-type]
                    if len(frame) != nbytes:
                        raise TransportError(f"block {i} of mesh {mesh!r}, {path}: {len(frame)} bytes received, "
                                             f"{nbytes} expected")
                    data = frame.buffer if isinstance(frame, zmq.Frame) else frame
                    arr = np.frombuffer(data, dtype=dtype).reshape(count, ncomp)
                    if name:
                        values[name][i] = arr
                    else:
                        positions[i] = arr
        return assemble_blocks(m, ids, wanted, values, positions)


@dataclass
class _Found:
    status: StepStatus
    info: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    seen: float = 0.0
    contact: Contact | None = None


class SocketReader(Reader):
    """Reads the steps of a socket stream as one consumer group (all ranks of ``comm``)."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        check_group(self.settings.group)
        try:
            self.path = contact_path(config.filename)
        except ValueError as e:
            raise TransportError(str(e)) from None
        self.contact: Contact | None = None
        self.events: list[dict[str, float | int]] = []
        self.discarded: list[tuple[int, str]] = []  # (step, reason) dropped by the producer
        self.missed: list[int] = []  # steps published before this group attached, gone since
        # steps the producer dropped for this group after declaring it lost (a restarted consumer), and why
        self.dropped: list[tuple[int, str]] = []
        P.tune_allocator()
        self._ctx = zmq.Context()
        self._ctrl: list[P.Link] = []  # rank 0: one per producer rank
        self._pinger: _Pinger | None = None
        self._fetcher: _Fetcher | None = None
        self._next_seq = 0
        self._floor = 0
        self._ev = 0
        self._waiting = False  # rank 0: a NEXT request is out
        self._end: _Found | None = None
        self._last_step: int | None = None
        self._stale = ""  # why the contact file found last was not tried (left by a producer that is gone)
        self._opened = time.time()  # an ended file written after this is of the run this reader waited for
        self._step_t0 = 0.0
        self._info: dict[str, Any] = {}
        self._seen = 0.0
        self._phase = Phases()  # per-step phase times, in each released step's event ("phases")
        self._group_lock: GroupLock | None = None  # rank 0, from its first attach: this group's one live consumer

    # -- rank 0 ----------------------------------------------------------------------------------
    def _attach(self) -> bool:
        """HELLO: producer rank 0 decides where this group starts (one decision: new, resumed, or attaching
        again after it was dropped), then every other rank is told that decision. False: no stream to attach
        to yet (no contact file, or one known to be left by a producer that is gone: ``self._stale``)."""
        if self._group_lock is None and self.path.parent.is_dir():  # one live consumer per group
            self._group_lock = GroupLock.acquire(group_lock_path(self.config.filename, self.settings.group),
                                                 self.config.filename, self.settings.group)
        try:
            contact = Contact.load(self.path)
        except FileNotFoundError:
            self._check_ended()
            return False
        stale = contact.stale(self.config.filename)
        if stale:
            self._stale = f"{self.path} is {stale}"
            return False
        ctrl = [P.Link(self._ctx, r.reachable(), linger_ms=250) for r in contact.ranks]
        try:
            wait = 1.5 * contact.heartbeat
            hello = {"group": self.settings.group, "consumers": self.comm.size}
            answer = self._hello(contact, ctrl, [0], wait, hello)
            if answer is None:
                return False
            first = int(answer["first"])
            if self._hello(contact, ctrl, list(range(1, len(ctrl))), wait, {**hello, "first": first}) is None:
                return False
        except BaseException:
            for link in ctrl:
                link.close()
            raise
        self.contact, self._ctrl = contact, ctrl
        self._floor = first
        # the answers to NEXT name every step from here on this group will never get (missed or dropped)
        self._next_seq = int(answer["resume"])
        self._pinger = _Pinger(self._ctx, contact, self.settings.group)
        return True

    def _hello(self, contact: Contact, ctrl: list[P.Link], ranks: list[int], wait: float,
               body: dict[str, Any]) -> dict[str, Any] | None:
        """HELLO to ``ranks`` at once; rank 0's answer (or the last one). None when a rank does not answer and
        the contact file is known to be stale (the links are closed then)."""
        token = contact.token.encode()
        for r in ranks:
            ctrl[r].sock.send_multipart(P.request(token, P.HELLO, **body))
        deadline = time.time() + wait
        answer: dict[str, Any] = {}
        for r in ranks:
            if not ctrl[r].sock.poll(max(0.0, deadline - time.time()) * 1000):
                stale = contact.stale(self.config.filename)
                if stale:
                    self._stale = f"{self.path} is {stale}"
                    for link in ctrl:
                        link.close()
                    return None
                raise TransportError(self._why_lost(
                    f"producer rank {r} lost: no answer within {wait:g} s at {contact.ranks[r].reachable()} (pid "
                    f"{contact.ranks[r].pid} on {contact.ranks[r].host}); {self.path} may be left by a producer "
                    "that died", contact))
            kind, got, _ = P.parse_reply(ctrl[r].sock.recv_multipart())
            if kind != P.OK:
                raise TransportError(f"producer rank {r}: {got.get('error', kind)}")
            answer = answer or got
        return answer

    def _report_dropped(self, d: dict[str, Any]) -> None:
        self.dropped.extend((int(step), str(d["reason"])) for step in d["steps"])
        print(f"h5flow: {dropped_message(self.config.filename, self.settings.group, d)}", file=sys.stderr, flush=True)

    def _news(self, body: dict[str, Any]) -> None:
        """What a NEXT answer says this group will never get: discarded, missed, dropped (reported)."""
        self.discarded.extend((int(s), str(r)) for s, r in body.get("discarded", []))
        self.missed.extend(int(s) for s in body.get("missed", []))
        by_reason: dict[str, list[int]] = {}
        for step, why in body.get("dropped", []):
            by_reason.setdefault(str(why), []).append(int(step))
        for why, steps in by_reason.items():
            self._report_dropped({"steps": steps, "reason": why})
        self._ev = int(body.get("ev", self._ev))

    def _failure(self, contact: Contact) -> str:
        """Why the producer run of ``contact`` stopped, when it said so (its ended file), else ""."""
        try:
            ended = load_ended(self.config.filename)
        except (OSError, ValueError, TransportError):
            return ""
        if isinstance(ended, dict) and ended.get("run_id") == contact.run_id:
            return str(ended.get("failed") or "")
        return ""

    def _why_lost(self, lost: str, contact: Contact) -> str:
        """``lost`` (a producer rank found gone), or the reason the producer gave if it stopped on an error. Its
        ranks stop at once while its rank 0 writes that reason, so a rank found gone first waits for the reason
        up to one heartbeat: a failure is reported as ``producer rank R failed: ...``, never as a loss."""
        deadline = time.time() + contact.heartbeat
        while True:
            failed = self._failure(contact)
            if failed or time.time() >= deadline:
                return failed or lost
            time.sleep(0.05)

    def _check_ended(self) -> None:
        """No contact file: if the producer that ended there dropped steps of this group, or failed after this
        reader opened (before it could attach), say so (an ERROR)."""
        try:
            ended = load_ended(self.config.filename)
            d = ended["dropped"].get(self.settings.group)
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            return
        failed = ended.get("failed") if isinstance(ended, dict) else None
        if failed:
            when = time.strftime("%H:%M:%S", time.localtime(float(ended.get("ended", 0))))
            if float(ended.get("ended", 0)) >= self._opened:  # the run it waited for failed before it attached
                raise TransportError(f"{failed} (the stream stopped at {when}, run {ended.get('run_id')}, "
                                     f"{ended.get('published')} steps published, before this consumer attached)")
            # a run that failed before this reader opened: it waits for a new run, and says why once
            stale = f"the last run, {ended.get('run_id')}, stopped at {when} before this consumer opened: {failed}"
            if stale != self._stale:
                self._stale = stale
                print(f"h5flow: socket stream {self.config.filename}: {stale}; waiting for a new producer run",
                      file=sys.stderr, flush=True)
        if d:
            self._report_dropped(d)
            when = time.strftime("%H:%M:%S", time.localtime(float(ended.get("ended", 0))))
            raise TransportError(f"the stream ended at {when} (run {ended.get('run_id')}, {ended.get('published')} "
                                 f"steps published) while this consumer group was away: "
                                 f"{dropped_message(self.config.filename, self.settings.group, d)}; remove "
                                 f"{ended_path(self.config.filename)} to wait for a new stream instead")

    def _lost(self) -> str:
        assert self._pinger is not None and self.contact is not None
        hb = self.contact.heartbeat
        if self._pinger.dropped is not None:
            return (f"producer rank {self._pinger.dropped} dropped consumer group {self.settings.group!r}: it missed "
                    f"its heartbeats (every {hb / 2:g} s) for longer than {1.5 * hb:g} s")
        for rank, link in enumerate(self._ctrl):
            if link.broken():
                return f"producer rank {rank} lost: its connection closed (heartbeat every {hb:g} s)"
        now = time.time()
        for rank, seen in self._pinger.seen.items():
            if now - seen > 1.5 * hb:
                return f"producer rank {rank} lost: no heartbeat for {now - seen:.2f} s (heartbeat every {hb:g} s)"
        return ""

    def _poll(self, timeout: float | None) -> _Found:
        cfg = self.settings
        deadline = None if timeout is None else time.time() + timeout
        delay = cfg.poll_min
        while self.contact is None:
            try:
                if self._attach():
                    break
            except (TransportError, ValueError, OSError, zmq.ZMQError) as e:
                return _Found(StepStatus.ERROR, reason=f"{self.path}: {e}" if isinstance(e, zmq.ZMQError) else str(e))
            if deadline is not None and time.time() >= deadline:
                stale = f" ({self._stale}: waiting for a new producer)" if self._stale else ""
                return _Found(StepStatus.NOT_READY, reason=f"no stream yet in {self.path} after {timeout:g} s{stale}")
            time.sleep(delay)
            delay = min(delay * 2, cfg.poll_max)
        ctrl = self._ctrl[0].sock
        if not self._waiting:
            ctrl.send_multipart(P.request(self.contact.token.encode(), P.NEXT, group=cfg.group, seq=self._next_seq,
                                          floor=self._floor, ev=self._ev))
            self._waiting = True
        tick = min(0.05, self.contact.heartbeat / 4)
        while True:
            left = tick if deadline is None else min(tick, deadline - time.time())
            if ctrl.poll(max(0.0, left) * 1000):
                self._waiting = False
                try:
                    kind, body, _ = P.parse_reply(ctrl.recv_multipart())
                except ValueError as e:
                    return _Found(StepStatus.ERROR, reason=f"producer rank 0: {e}")
                self._news(body)
                if kind == P.STEP:
                    return _Found(StepStatus.OK, body, seen=time.time())
                if kind == P.END:
                    return _Found(StepStatus.END_OF_STREAM)
                if body.get("failed"):  # the producer stopped on an error: its reason
                    return _Found(StepStatus.ERROR, reason=f"{body['failed']}; {self._seen_so_far()}")
                return _Found(StepStatus.ERROR, reason=f"producer rank 0: {body.get('error', kind)}")
            lost = self._lost()
            if lost:
                return _Found(StepStatus.ERROR, reason=f"{self._why_lost(lost, self.contact)}; {self._seen_so_far()}")
            if deadline is not None and time.time() >= deadline:
                return _Found(StepStatus.NOT_READY, reason=f"waiting for sequence {self._next_seq} of {self.path} "
                                                           f"after {timeout:g} s")

    def _seen_so_far(self) -> str:
        return f"last step seen {'none' if self._last_step is None else self._last_step}"

    # -- the Reader contract ---------------------------------------------------------------------
    def _do_begin_step(self, timeout: float | None) -> BeginStepResult:
        comm = self.comm
        t0 = time.time()
        found = None
        self._phase.take()  # a step's phases start at its begin_step
        t_discover = time.perf_counter()
        if comm.rank == 0:
            found = self._end or self._poll(timeout)
            if found.status in (StepStatus.END_OF_STREAM, StepStatus.ERROR):
                self._end = found
            if found.status is StepStatus.OK and self._fetcher is None:
                found.contact = self.contact
        found = bcast_from_root(comm, found)
        # waiting for the step (rank 0 asks producer rank 0, the others sleep in the broadcast)
        self._phase.add("discover", time.perf_counter() - t_discover)
        if found.contact is not None and self._fetcher is None:
            contact = found.contact
            self._fetcher = _Fetcher(self._ctx, contact, self.settings.cma,
                                     explain=lambda lost: self._why_lost(lost, contact))
        if self._fetcher is not None:
            self._fetcher.buffers.next_step()  # the last step's arrays the analysis let go of
        if found.status is not StepStatus.OK:
            return BeginStepResult(found.status, None, found.reason)
        info = found.info
        meta = StepMeta.from_json(info["meta"])
        assignment = self.assignment(meta)
        assert self._fetcher is not None
        self._step_t0, self._seen, self._info = t0, found.seen, info
        self._last_step = int(info["step"])
        return BeginStepResult(StepStatus.OK, SocketReadStep(int(info["step"]), float(info["time"]), meta, assignment,
                                                             int(info["seq"]), self._fetcher, self._phase))

    def _do_release(self, step: ReadStep) -> None:
        assert isinstance(step, SocketReadStep)
        t_barrier = time.perf_counter()
        barrier = self.agree_seconds  # every rank has its blocks: Reader.release agreed on it
        self._phase.add("barrier", barrier)
        now = time.time()
        if self.comm.rank == 0:
            assert self.contact is not None
            token = self.contact.token.encode()
            for link in self._ctrl:
                link.sock.send_multipart(P.request(token, P.RELEASE, group=self.settings.group, seq=step.seq))
        self._phase.add("release", time.perf_counter() - t_barrier)
        self._next_seq = self._floor = step.seq + 1
        info = self._info
        self.events.append({"step": step.step, "seq": step.seq, "published": info["published_at"],
                            "visible": self._seen, "begin": self._step_t0, "released": now, "nbytes": info["nbytes"],
                            "barrier": barrier, "phases": self._phase.take()})

    def _do_close(self) -> None:
        if self.comm.rank == 0 and self.contact is not None and self._end is None:
            token = self.contact.token.encode()
            # detach; a reader stopped by an error says which (the producer reports it with the steps not taken)
            error = {"error": self.failure[:2000]} if self.failure else {}
            for link in self._ctrl:
                link.sock.send_multipart(P.request(token, P.BYE, group=self.settings.group, **error))
        if self._pinger is not None:
            self._pinger.stop()
            self._pinger = None
        for link in self._ctrl:
            link.close()
        self._ctrl = []
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None
        self._ctx.term()
        if self._group_lock is not None:
            self._group_lock.release()
            self._group_lock = None
