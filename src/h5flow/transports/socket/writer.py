"""Producer side of the socket transport: steps held in memory, served to consumers over zmq."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

import numpy as np
import zmq

from h5flow.config import TransportConfig
from h5flow.transports._common import AdmittingWriter, block_payload
from h5flow.transports._mpiutil import bcast_from_root, sleepy_allgather, sleepy_wait
from h5flow.transports.base import PublishInfo, TransportError
from h5flow.transports.socket import protocol as P
from h5flow.transports.socket.cma import offer
from h5flow.transports._claim import Claim, ClaimError
from h5flow.transports.socket.claim import claim_stream
from h5flow.transports.socket.contact import (Contact, RankContact, contact_path, dropped_message, ended_path,
                                              new_token, step_ranges, write_private)
from h5flow.transports.socket.server import Held, Server, Store


def _live_producer(path: Any, ctx: zmq.Context) -> str:
    """A message if the contact file at ``path`` belongs to a producer that still answers, else ""."""
    try:
        old = Contact.load(path)
    except (FileNotFoundError, ValueError):
        return ""
    try:
        s = P.dealer(ctx, old.ranks[0].reachable())
    except zmq.ZMQError:
        return ""  # not an endpoint anyone can serve
    try:
        s.send_multipart(P.request(old.token.encode(), P.PING, group=""))
        if s.poll(min(1.5 * old.heartbeat, 3.0) * 1000):
            return (f"{path}: another producer (run {old.run_id}, pid {old.ranks[0].pid} on {old.ranks[0].host}) is "
                    "still serving this stream; use another filename or stop it first")
        return ""
    finally:
        s.close(0)


class SocketWriter(AdmittingWriter):
    """Holds each published step in memory until every consumer group released it; serves it on demand."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        try:
            self.path = contact_path(config.filename)
        except ValueError as e:
            raise TransportError(str(e)) from None
        P.tune_allocator()
        self._ctx = zmq.Context()
        self.store = Store(comm.rank, self.settings.heartbeat, self.settings.dead_consumer)
        self._server: Server | None = None
        self._claim: Claim | None = None
        self.cma_off = ""  # why same-node consumers get the blocks over the socket ("": they copy them, .cma)
        # after close: consumer group -> {"steps": [...], "reason": ...} for steps published but dropped for a group
        # that was declared lost, never taken by it
        self.dropped: dict[str, dict[str, Any]] = {}
        run = None
        error = ""
        if comm.rank == 0:
            run = (new_token(), f"{time.time_ns():x}-{new_token()[:16]}")
            try:
                self._claim = claim_stream(config.filename, run[1])  # atomic: one producer per stream name
            except ClaimError as e:
                error = str(e)
            except OSError as e:
                error = f"cannot claim stream {config.filename}: {e}"
            error = error or _live_producer(self.path, self._ctx)  # one on another host, without shared locks
            if not error:
                ended_path(config.filename).unlink(missing_ok=True)  # an earlier run's end no longer applies
                self.path.unlink(missing_ok=True)  # a dead producer's contact file: no consumer must try it now
        run, error = comm.bcast((run, error), root=0)
        try:
            if error:
                raise TransportError(error)
            token, self.run_id = run
            try:
                self.cma_off = offer() if self.settings.cma else "cma=\"false\""
                self._server = Server(self._ctx, self.store, token.encode(), self.run_id, self.settings.interface,
                                      cma=not self.cma_off)
                mine = RankContact(comm.rank, self._server.endpoint, socket.gethostname(), os.getpid(),
                                   self._server.local)
                error = ""
            except (RuntimeError, ValueError) as e:
                mine, error = None, f"producer rank {comm.rank}: {e}"
            gathered = sleepy_allgather(comm, (mine, error))
            errors = [e for _, e in gathered if e]
            if errors:
                raise TransportError("; ".join(errors))
            error = ""
            if comm.rank == 0:
                self.contact = Contact(self.run_id, token, comm.size, self.settings.heartbeat, [m for m, _ in gathered])
                try:
                    self.contact.write(self.path)  # the announcement: every rank serves already
                except (OSError, RuntimeError) as e:
                    error = f"cannot start stream {config.filename}: {e}"
            error = comm.bcast(error, root=0)
            if error:
                raise TransportError(error)
        except BaseException:
            self._shutdown(remove=False)
            raise

    # -- steps -----------------------------------------------------------------------------------
    def _do_end_step(self) -> PublishInfo:
        admitted = self._admit_step()
        if isinstance(admitted, PublishInfo):
            return admitted
        meta, nbytes, decision, t0 = admitted
        comm, step = self.comm, meta.step
        t_admit = time.time()
        # One copy into buffers the transport owns: the producer may overwrite its arrays after end_step.
        arrays = {(mesh, b.block_id): {path: np.array(data, copy=True, order="C") for path, data in block_payload(b)}
                  for mesh in self._puts.blocks for b in self._puts.mine(mesh)}
        self.store.add(Held(decision.seq, step, self._step_time, nbytes, arrays))
        t_written = time.time()
        # the step is visible only once every rank holds its blocks; the same collective hands rank 0's upto
        # to the other ranks (they let go of what rank 0 let go of: Store)
        upto = sleepy_allgather(comm, self.store.upto if comm.rank == 0 else None)[0]
        if comm.rank != 0:
            self.store.follow(upto)
        published_at = time.time()
        phases = {"gather": self._gathered_at - t0, "admit": t_admit - self._gathered_at, "copy": t_written - t_admit,
                  "agree": published_at - t_written}
        if comm.rank == 0:
            with self.store.cond:
                held = self.store.held.get(decision.seq)
                if held is not None:  # (dropped at once when every consumer group is gone)
                    held.meta_json, held.published_at = meta.to_json(), published_at
                self.store.announced.append(step)
            assert self._server is not None
            self._server.wake()
        phases["publish"] = time.time() - published_at
        return self._published_info(step, nbytes, decision, {"end_step": t0, "admitted": t_admit,
                                                              "written": t_written, "publish": published_at}, phases)

    def _queue_state(self) -> tuple[int, int, list[str]]:
        st = self.store
        with st.cond:
            st.collect()
            unreleased = st.unreleased()
            return len(unreleased), sum(h.nbytes for h in unreleased), st.live_groups()

    def _local_error(self) -> str:
        """This rank's serving thread stopped (it answers the consumers' pings): the stream stops, said by the
        producer itself rather than found by its consumers as a lost rank."""
        if self._server is not None and not self._server.is_alive():
            return ("its serving thread stopped (its last words, if any, are above on stderr); consumers can no "
                    "longer reach this rank and would report it lost")
        return ""

    def _dead_groups(self) -> dict[str, str]:
        """Rank 0: the groups that stopped pinging it while their steps are kept and some are unreleased."""
        st, now = self.store, time.time()
        out = {}
        with st.cond:
            for name, g in st.groups.items():
                if g.lost and st.holds_for(g) and g.released_seq < st.stored - 1:
                    last = (f"{st.announced[g.released_seq]} (sequence {g.released_seq})"
                            if 0 <= g.released_seq < len(st.announced) else "none")
                    closed = st.closed_text(name)
                    out[name] = (f"consumer group {name!r} stopped beating (no ping for {now - g.last_ping:.1f} s, "
                                 f"heartbeat every {st.heartbeat:g} s; its rank 0 pings"
                                 f"{'; ' + closed if closed else ''}); last step it released: {last}")
        return out

    def _record_discard(self, step: int, why: str) -> None:
        with self.store.cond:
            self.store.discards.append((step, why))

    def _wait_for_consumers(self, delay: float) -> None:
        with self.store.cond:  # woken early by a release, a new group or a lost one
            self.store.cond.wait(max(delay, 0.05))

    # -- end -------------------------------------------------------------------------------------
    def _do_close(self) -> None:
        comm, st = self.comm, self.store
        error = ""
        if comm.rank == 0:
            t0 = time.time()
            announced = False
            with st.cond:
                while not st.drained():  # every group steps are kept for has every step
                    if not announced and time.time() - t0 > 5.0:
                        names = ", ".join(st.live_groups()) or "no consumer group attached yet"
                        print(f"h5flow: producer waiting for consumers to take the last steps before closing "
                              f"(groups: {names})", file=sys.stderr, flush=True)
                        announced = True
                    st.cond.wait(min(0.5, st.heartbeat / 4))
                    error = self._check_dead("at close")
                    if error:
                        break
                st.end_count = None if error else len(st.announced)
        error = bcast_from_root(comm, error)  # stopped on a dead consumer group (dead_consumer="error")
        if error:
            self._shutdown(remove=comm.rank == 0)
            raise TransportError(error)
        if comm.rank == 0:
            assert self._server is not None
            self._server.wake()
            limit = time.time() + 10 * self.settings.heartbeat
            with st.cond:
                while not st.told_end() and time.time() < limit:  # ... and was told that the stream ended
                    st.cond.wait(0.1)
                if not st.told_end():  # a consumer that took every step and stopped asking
                    untold = ", ".join(n for n, g in st.groups.items() if not g.lost and not g.got_end)
                    print(f"h5flow: producer closing although consumer group(s) {untold} did not ask for the end of "
                          "the stream; they will see the producer gone", file=sys.stderr, flush=True)
                self.dropped = st.all_dropped()
                for name, last in sorted(st.detached.items()):  # on purpose, but said: they did not take these
                    if (name not in st.groups or st.groups[name].lost) and last < len(st.announced) - 1:
                        print(f"h5flow: consumer group {name!r} detached (closed its reader) after step "
                              f"{st.announced[last] if last >= 0 else 'none'}; it did not take steps "
                              f"{step_ranges(st.announced[last + 1:])}", file=sys.stderr, flush=True)
            try:  # a consumer restarted after this producer ended learns what its group lost, and why
                if self.dropped:
                    write_private(ended_path(self.config.filename), {
                        "run_id": self.run_id, "ended": time.time(), "published": len(st.announced),
                        "dropped": self.dropped})
            except OSError as e:
                print(f"h5flow: cannot write {ended_path(self.config.filename)}: {e}", file=sys.stderr, flush=True)
            self.path.unlink(missing_ok=True)
        sleepy_wait(comm)  # the other ranks serve their blocks until rank 0 is done
        self._shutdown(remove=False)
        self.dropped = comm.bcast(self.dropped, root=0)
        if self.dropped:  # never silent: the producer's exit status says steps were lost
            raise TransportError("; ".join(dropped_message(self.config.filename, g, d)
                                           for g, d in sorted(self.dropped.items())))

    def _do_abort(self) -> None:
        # No end of stream. Rank 0 tells its consumers why: at once to those waiting for a step, and in the ended
        # file to those that find it gone; without a reason (killed) they see the producer lost.
        if self.comm.rank == 0 and self.failure and self._server is not None:
            self._server.fail(self.failure)
            try:
                write_private(ended_path(self.config.filename), {
                    "run_id": self.run_id, "ended": time.time(), "published": len(self.store.announced),
                    "dropped": {}, "failed": self.failure})
            except OSError:
                pass  # the consumers see the producer lost
        self._shutdown(remove=self.comm.rank == 0)

    def _shutdown(self, remove: bool) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if remove:
            self.path.unlink(missing_ok=True)
        if self._claim is not None:
            self._claim.release(remove=True)
            self._claim = None
        if not self._ctx.closed:
            self._ctx.term()

