"""Producer side of the hdf5 transport: one HDF5 file per rank (n-n, the default), one shared file (n-1) or one
h5flow_log container (log) per step.

:class:`Hdf5Writer` admits, stages, writes and publishes the steps; each layout's files are written by its own
mixin (``layout_nn.py``, ``layout_n1.py``, ``layout_log.py``, over ``_layout.py``), and ``async_write``'s thread
is kept by ``write_thread.py``."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5flow.config import TransportConfig
from h5flow.model import StepMeta
from h5flow.transports._common import (AdmittingWriter, Decision, StepPuts, block_payload, dataset_layout,
                                       dropped_message, step_ranges)
from h5flow.transports._mpiutil import bcast_from_root, sleepy_allgather, sleepy_wait
from h5flow.transports._phases import Phases
from h5flow.transports.base import PublishInfo, TransportError
from h5flow.transports.hdf5 import _h5
from h5flow.transports.hdf5._layout import StagedBlock
from h5flow.transports.hdf5.layout_log import LogLayout
from h5flow.transports.hdf5.layout_n1 import SharedLayout
from h5flow.transports.hdf5.layout_nn import PerRankLayout, QueuedRankFile
from h5flow.transports.hdf5.settings import LAYOUTS, Hdf5Settings, layout_conflict
from h5flow.transports.hdf5.write_thread import WriteThread, async_possible
from h5flow.transports.hdf5.staging import (DirWatch, Entry, Heartbeat, HeartbeatError, IndexTail, Staging, StreamInfo, atomic_write,
                                            EMERGENCY_RESERVE, capacity_bytes, free_bytes, is_full_error, is_waitable_full_error, new_run_id,
                                            read_index)

#: room reserved per step file beyond its payload (superblock, object headers, B-trees, page rounding)
FILE_OVERHEAD = 64 * 1024
DATASET_OVERHEAD = 8 * 1024
#: the write of one step must finish within this + its bytes at WRITE_RATE, or the heartbeat stops
WRITE_LEASE_MIN = 30.0
WRITE_RATE = 20e6
#: a step whose write found the file system full although its room was reserved is retried (queue_policy
#: "block") with twice the room each time, at most this many times, before the stream stops
WRITE_RETRIES = 3


#: what a step's write takes: this rank's rows per mesh, or (vol_stack on the write thread) its file given them
Staged = dict[str, list[StagedBlock]] | QueuedRankFile


def _short(text: str, limit: int = 500) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start (rank, file) and its end (the errno text
    that HDF5 and the connector put last)."""
    if len(text) <= limit:
        return text
    return text[: limit // 2] + " ... " + text[-(limit // 2):]


@dataclass
class _Prepared(Decision):
    """Rank 0's decision to publish, with the outcome of preparing the step ("" = ready)."""

    prepare_error: str = ""


def room_report_after(heartbeat: float) -> float:
    """Seconds a producer waits for room on the file system before it says who holds the room."""
    return max(2.0, 10.0 * heartbeat)


def _tree_bytes(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (-1: the directory is gone)."""
    if not path.is_dir():
        return -1
    total = 0
    for top, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, f)).st_blocks * 512
    return total


class Hdf5Writer(AdmittingWriter, PerRankLayout, SharedLayout, LogLayout, WriteThread):
    """Publishes each step as ``step-N/`` in the staging directory, atomically, the moment it is closed."""

    def __init__(self, comm: Any, config: TransportConfig) -> None:
        super().__init__(comm, config)
        s: Hdf5Settings = self.settings
        if s.layout not in LAYOUTS:
            raise TransportError(f"{config.source or 'config'}: layout {s.layout!r}; accepted: {', '.join(LAYOUTS)}")
        if s.driver not in _h5.DRIVERS:
            raise TransportError(f"{config.source or 'config'}: driver {s.driver!r}; accepted: mpio, subfiling")
        if s.layout != "n-1" and s.shared_only():  # settings changed after they were built
            what, hint = layout_conflict(s.layout, s.shared_only())
            raise TransportError(f"{config.source or 'config'}: {what}; {hint}")
        if s.vol_layers() and s.layout != "n-n":  # the same: vol_stack writes n-n rank files only
            raise TransportError(f"{config.source or 'config'}: vol_stack={s.vol_stack!r} needs layout 'n-n', not "
                                 f"{s.layout!r}")
        self.staging = Staging(config.filename)
        self._phase = Phases()  # per-step phase times, in each published step's event ("phases")
        self._log_file: h5py.File | None = None  # rank 0, layout "log": the step's container, from _prepare
        self._consumer_watch: DirWatch | None = None  # rank 0: wakes a producer blocked on a full queue
        self._published: list[Entry] = []
        self._dropped_groups: set[str] = set()  # rank 0: consumer groups dropped (dead_consumer="drop")
        self._doomed: list[int] = []  # rank 0, n-n write thread: released steps renamed out, their files deleted
        self._json: tuple[StepMeta | None, str] = (None, "")  # the step's meta.json text, made once per step
        # async_write (docs/STREAM.md "Write-behind"): the write thread, the step on it, the communicator its
        # collectives use (a duplicate: never matched with a collective of the simulation's thread), the
        # copies of this rank's rows (reused step after step), and the error that stopped the stream
        self._async, self.async_off, say = async_possible(comm, s.async_write, s.layout)
        self._wcomm: Any = comm.Dup() if self._async and comm.size > 1 else comm
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self._failed: str | None = None
        self._buffers: dict[tuple[str, int, str], np.ndarray] = {}
        if say and comm.rank == 0:
            print(f"h5flow: async_write is off: {self.async_off}", file=sys.stderr, flush=True)
        # vol_stack: each rank file's access list selects the connectors (docs/STREAM.md "Connector stack")
        self._fapl: Any = None
        self.vol_stack = ""  # what HDF5 is given, "<connector> <info string>"
        stack_error = ""
        if "cache" in s.vol_layers() and s.cache_path and not (os.path.isdir(s.cache_path)
                                                               and os.access(s.cache_path, os.W_OK | os.X_OK)):
            stack_error = (f"rank {comm.rank}: cache_path={s.cache_path!r} is not a writable directory on this "
                           "node; create it (node-local storage: /dev/shm, NVMe) or give another cache_path, or "
                           "leave it out for h5flow_cache's own choice")
        elif s.vol_layers():
            try:
                self._fapl, self.vol_stack = _h5.stacked_fapl(s.connector_layers())
            except (RuntimeError, ValueError) as e:
                stack_error = f"rank {comm.rank}: vol_stack={s.vol_stack!r}: {e}"
        stack_errors = [e for e in comm.allgather(stack_error) if e]
        if stack_errors:
            raise TransportError("; ".join(stack_errors))
        info = None
        error = ""
        if comm.rank == 0:
            info = StreamInfo(new_run_id(), comm.size, s.layout, s.driver, s.heartbeat, time.time(), keep=s.keep)
            try:
                self.staging.reset(info.run_id)
            except (OSError, RuntimeError) as e:
                error = f"cannot start stream in {self.staging.root}: {e}"
        info, error = comm.bcast((info, error), root=0)
        if error:
            raise TransportError(error)
        self.info: StreamInfo = info
        self._tail = IndexTail(self.staging.index)
        self._stopped = False
        error = ""
        try:
            self._heartbeat = Heartbeat(self.staging.hb / str(comm.rank), self.settings.heartbeat)
        except (OSError, HeartbeatError) as e:
            error = f"rank {comm.rank}: cannot start its heartbeat in {self.staging.hb}: {e}"
        errors = [e for e in comm.allgather(error) if e]
        if not errors and comm.rank == 0:
            try:
                self.staging.announce(info)
            except OSError as e:
                errors = [f"cannot announce the stream in {self.staging.root}: {e}"]
        errors = bcast_from_root(comm, errors)
        if errors:
            if hasattr(self, "_heartbeat"):
                self._heartbeat.stop()
            if comm.rank == 0:
                self.staging.release_claim()
            raise TransportError("; ".join(errors))

    # -- steps -----------------------------------------------------------------------------------
    def _local_error(self) -> str:
        """This rank's heartbeat helper stopped: the stream stops (consumers would report this rank lost)."""
        return self._heartbeat.failure()

    def _do_end_step(self) -> PublishInfo:
        t_enter = time.time()
        self._drain()  # async_write: the previous step's write, and its error, before this step is admitted
        waited_write = time.time() - t_enter
        admitted = self._admit_step()  # rank 0 has also reserved the step's room on disk (see _admit)
        if isinstance(admitted, PublishInfo):
            return admitted
        meta, nbytes, decision, t0 = admitted
        t_admit = time.time()
        # gather: the ranks' block metadata, waiting for the last rank to reach end_step (its compute, not
        # the transport); admit: rank 0's queue check and the decision's broadcast (what rank 0 did in
        # between is in its own phases: reserve, prepare, create, metadata)
        if waited_write:
            self._phase.add("wait", waited_write)
        self._phase.add("gather", self._gathered_at - t0)
        self._phase.add("admit", t_admit - self._gathered_at - sum(self._phase.seconds.get(k, 0.0) for k in (
            "reserve", "prepare", "create", "metadata")))
        with self._phase("copy" if self._async and self._fapl is None else "stage"):
            staged = self._stage(meta)
        if self._async and self._fapl is not None:
            # vol_stack on the write thread: the rows go to the connectors here (each write returns once they
            # copied its buffer); the thread waits for the file to be on storage, then publishes the step
            staged = self._queue_step(meta, decision, staged)
        self._puts = StepPuts()
        event: dict[str, Any] = {"step": meta.step, "begin": self._step_begin, "end_step": t0, "admitted": t_admit,
                                 "published": True, "nbytes": nbytes, "waited": decision.waited}
        self.events.append(event)
        if not self._async:
            self._publish(meta, nbytes, decision, staged, self._step_time, event)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="h5flow-write")
            self._pending = self._pool.submit(self._publish, meta, nbytes, decision, staged, self._step_time, event)
        return PublishInfo(meta.step, True, nbytes, "", time.time() - t_enter)

    def _queue_step(self, meta: StepMeta, decision: Decision,
                    staged: dict[str, list[StagedBlock]]) -> QueuedRankFile:
        """This rank's file of an admitted step, created and handed its rows (``vol_stack``); a file that could
        not be started (rank 0 failed to prepare the step's directory: every rank knows) holds that error."""
        path = self.staging.tmp_step(meta.step) / f"rank-{self.comm.rank:05d}.h5"
        prepare_error = decision.prepare_error if isinstance(decision, _Prepared) else ""
        if prepare_error:
            return QueuedRankFile(path, error=prepare_error)
        with self._phase("queue"):
            return self._queue_per_rank(path, meta, staged)

    def _stage(self, meta: StepMeta) -> dict[str, list[StagedBlock]]:
        """This rank's blocks of the step, per mesh in block-id order, as the rows the write needs. With
        ``async_write`` the rows are copied (into buffers kept from the previous step: no new pages per step),
        because the simulation may change its arrays the moment ``end_step`` returns; with a ``vol_stack`` the
        connectors copy them instead (:meth:`_queue_step`)."""
        out: dict[str, list[StagedBlock]] = {}
        for name in meta.meshes:
            blocks = []
            for b in self._puts.mine(name):
                payload = block_payload(b)
                if self._async and self._fapl is None:
                    payload = [(path, self._copy_of((name, b.block_id, path), data)) for path, data in payload]
                blocks.append(StagedBlock(b.block_id, payload))
            out[name] = blocks
        return out

    def _publish(self, meta: StepMeta, nbytes: int, decision: Decision, staged: Staged,
                 step_time: float, event: dict[str, Any]) -> None:
        """Collective over ``self._wcomm``: write the admitted step into its .tmp directory (retrying on a full
        file system), then rank 0 publishes it. In ``end_step`` or, with ``async_write``, on the write thread
        (then on a duplicate of the communicator, so it never meets the simulation's own collectives)."""
        try:
            self._write_and_publish(meta, nbytes, decision, staged, step_time, event)
        except BaseException as e:
            event.update(published=False, error=str(e))
            raise

    def _write_and_publish(self, meta: StepMeta, nbytes: int, decision: Decision,
                           staged: Staged, step_time: float, event: dict[str, Any]) -> None:
        comm, cfg, step = self._wcomm, self.settings, meta.step
        tmp = self.staging.tmp_step(step)
        # rank 0 prepared the step's directory (log: and its container) before broadcasting its decision
        prepared = decision.prepare_error if isinstance(decision, _Prepared) else None
        attempt = 0
        while True:
            failure = self._write_step(tmp, meta, nbytes, staged, prepared)  # the same on every rank
            prepared = None  # a retry prepares anew
            if failure is None:
                break
            waitable, message = failure
            attempt += 1
            error = ""
            if comm.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)  # never published, and its room is needed
                if waitable and cfg.queue_policy == "block" and isinstance(staged, QueuedRankFile):
                    # the connectors had the only copy of the rows: waiting for room cannot write them again
                    error = (f"{message}; the stream is stopped (with vol_stack={cfg.vol_stack!r} and the write "
                             "thread, a step's rows are handed to the connectors and not kept, so the step cannot "
                             "be written again once room is freed)")
                elif waitable and cfg.queue_policy == "block" and attempt <= WRITE_RETRIES:
                    error = self._wait_for_space(step, self._need(meta, nbytes) << attempt, after=message)
                elif waitable and cfg.queue_policy == "block":
                    error = f"{message}; the stream is stopped after {attempt} attempts to write it"
                else:
                    error = message
                if error:
                    self._stop_stream(error)
            error = bcast_from_root(comm, error)
            if error:
                raise TransportError(error)
        t_written = time.time()
        published_at, error = 0.0, ""
        t_publish = time.perf_counter()
        if comm.rank == 0:
            try:
                os.replace(tmp, self.staging.step_path(step))
                published_at = time.time()
                self.staging.append(f"P {decision.seq} {step} {step_time!r} {nbytes} {published_at!r}")
            except OSError as e:
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.rmtree(self.staging.step_path(step), ignore_errors=True)  # no P line: never visible
                error = f"step {step}: publishing it in {self.staging.root} failed: {e}"
                self._stop_stream(error)
        # The write thread has time the simulation does not wait for: it deletes the steps every group has
        # released, which the slower consumer would otherwise do inside its release (docs/STREAM.md "Garbage
        # collection"); the main thread's next admission comes after this (one step in flight). With n-n, rank 0
        # renames them out of the stream, each rank deletes its own files (freeing their pages is the cost:
        # shared, so no rank is left behind by it), and rank 0 removes the emptied directories a round later.
        collect = self._async and cfg.keep != "all"
        doomed: list[int] = []
        if collect and comm.rank == 0 and cfg.layout == "n-n" and not error:
            doomed = self.staging.retire_released(self.info.run_id, self._published)
        published_at, error, doomed = bcast_from_root(comm, (published_at, error, doomed))
        if error:
            raise TransportError(error)
        self._phase.add("publish", time.perf_counter() - t_publish)
        if collect:
            with self._phase("collect"):
                for gone in doomed:
                    try:
                        os.unlink(self.staging.gc_path(gone) / f"rank-{comm.rank:05d}.h5")
                    except FileNotFoundError:
                        pass
                if comm.rank == 0:
                    self._remove_doomed()
                    self._doomed = doomed
                    if cfg.layout != "n-n" and self._published:
                        self.staging.collect_garbage(self.info.run_id, self._published)
        event.update(written=t_written, publish=published_at, phases=self._phase.take())

    def _remove_doomed(self) -> None:
        """Rank 0: remove the directories of the released steps the ranks emptied (what is left in them)."""
        self.staging.remove_retired(self._doomed)
        self._doomed = []

    def _do_flush(self) -> None:
        self._drain()

    def _write_step(self, tmp: Path, meta: StepMeta, nbytes: int, staged: Staged,
                    prepared: str | None = None) -> tuple[bool, str] | None:
        """Collective: write the step into ``tmp``. ``None`` when every rank succeeded, else (waiting for room
        may help: the file system or quota was full, the message), the same on every rank: an I/O error on any
        rank is decided together, after every rank has made the same collective HDF5 calls, so none is left
        waiting in one. ``prepared``: rank 0's outcome of :meth:`_prepare`, already known to every rank (it
        came with the admission decision); ``None``: prepare here (one more broadcast). ``staged``: this rank's
        rows (:meth:`_stage`), or, with ``vol_stack`` on the write thread, its file already handed them
        (:meth:`_queue_step`): then the write waits for that file to be on storage."""
        comm, cfg, step = self._wcomm, self.settings, meta.step
        lease = WRITE_LEASE_MIN + 10 * cfg.heartbeat + nbytes / WRITE_RATE
        self._heartbeat.expect_progress(lease, f"writing step {step} into {tmp} for more than {lease:.0f} s")
        try:
            error = ""
            if prepared is None:  # a retry (the first attempt was prepared at admission)
                if comm.rank == 0:
                    error = self._prepare(tmp, meta, log_structure=False)
                # sleeping barriers: on an oversubscribed node a rank spinning in MPI takes the core from the
                # ranks (and consumers) it waits for
                with self._phase("agree"):
                    start_error = bcast_from_root(comm, error)
            else:
                start_error = prepared
            if not start_error:
                if cfg.layout in ("n-1", "log"):
                    try:
                        if cfg.layout == "n-1":
                            error = self._write_shared(tmp / "data.h5", meta, staged)
                        else:
                            error = self._write_log(tmp / "data.h5", meta, staged, structured=prepared is not None)
                    except Exception as e:  # noqa: BLE001 - out of step with the others: the lease catches a hang
                        error = f"rank {comm.rank}: writing {tmp / 'data.h5'}: {e}"
                else:
                    path = tmp / f"rank-{comm.rank:05d}.h5"
                    try:
                        if isinstance(staged, QueuedRankFile):
                            self._finish_per_rank(staged)
                        else:
                            self._write_per_rank(path, meta, staged)
                    except Exception as e:  # noqa: BLE001 - decided together below
                        error = f"rank {comm.rank}: writing {path}: {e}"
                if comm.rank == 0 and not error:
                    try:
                        with self._phase("meta.json"):
                            atomic_write(tmp / "meta.json", self._meta_json(meta))
                    except OSError as e:
                        error = f"rank 0: writing {tmp / 'meta.json'}: {e}"
            with self._phase("agree"):
                errors = [e for e in sleepy_allgather(comm, error) if e] if not start_error else [start_error]
        finally:
            self._heartbeat.progress_done()
        if not errors:
            return None
        full = any(is_full_error(RuntimeError(e)) for e in errors)
        errors = [e for e in errors if not e.endswith("another rank failed")] or errors
        waitable = all(is_waitable_full_error(RuntimeError(e)) for e in errors)
        need = self._need(meta, nbytes)
        free = free_bytes(self.staging.root)
        what = ("the file system is full" if waitable else "a file size limit" if full else "an I/O error")
        message = (f"step {step} was not published: {what} while writing it in {self.staging.root} "
                   f"(the step needs about {need} bytes, {free} bytes free now): "
                   + "; ".join(_short(e) for e in errors[:4]) + (f"; and {len(errors) - 4} more" if len(errors) > 4
                                                                  else ""))
        return full and waitable, message

    # -- room on disk ----------------------------------------------------------------------------
    def _need(self, meta: StepMeta, nbytes: int) -> int:
        """Bytes a step takes on disk, generously: payload, HDF5 overhead per file and dataset, meta.json."""
        files = 1 if self.settings.layout == "n-1" else self.comm.size  # log: one log pair per rank and dataset
        datasets = sum(len(dataset_layout(m)) + 1 for m in meta.meshes.values()) + 1
        return nbytes + 3 * len(self._meta_json(meta)) + files * (FILE_OVERHEAD + datasets * DATASET_OVERHEAD)

    def _admit(self, step: int, nbytes: int, meta: StepMeta | None = None) -> Decision:
        """Rank 0: the queue's verdict, then room on disk for the step (reserved until it is written), then the
        step's directory (and for layout "log" its container's structure), so that the decision's broadcast
        also tells every rank that they are ready: one synchronisation less per step (two for "log")."""
        decision = super()._admit(step, nbytes, meta)
        if decision.publish and meta is not None:
            with self._phase("reserve"):
                error = self._wait_for_space(step, self._need(meta, nbytes))
            if error:
                self._stop_stream(error)
                return Decision(False, error=error)
            prepare_error = self._prepare(self.staging.tmp_step(step), meta,
                                          log_structure=self.settings.layout == "log")
            return _Prepared(**dataclasses.asdict(decision), prepare_error=prepare_error)
        return decision

    def _prepare(self, tmp: Path, meta: StepMeta, log_structure: bool) -> str:
        """Rank 0: an empty ``tmp`` for the step (the room reserved at admission is released: it is the step's
        now) and, with ``log_structure``, the step's container with its structure, kept open in
        ``self._log_file`` for rank 0's own writes; "" or the error."""
        try:
            with self._phase("prepare"):
                if tmp.exists():
                    shutil.rmtree(tmp)
                tmp.mkdir(mode=0o700)
        except OSError as e:
            return f"rank 0: cannot create {tmp}: {e}"
        finally:
            self.staging.release_space()
        return self._create_log(tmp / "data.h5", meta) if log_structure else ""

    def _wait_for_space(self, step: int, need: int, after: str = "") -> str:
        """Rank 0: reserve ``need`` bytes for ``step``; "" once reserved, else the error that stops the stream.

        ``queue_policy="block"`` waits (saying so once on stderr) while garbage collection and other
        processes free room; ``"discard"`` stops the stream: a full file system is not backpressure."""
        cfg, root = self.settings, self.staging.root
        t0, delay, announced, reported = time.time(), cfg.poll_min, False, False
        while True:
            why = self.staging.reserve_space(need)
            if not why:
                if announced:
                    print(f"h5flow: room for step {step} in {root} after waiting {time.time() - t0:.1f} s; "
                          "going on", file=sys.stderr, flush=True)
                return ""
            message = after or (f"step {step} was not published: no room for it in {root} (it needs about {need} "
                                f"bytes, {free_bytes(root)} bytes free): {why}")
            if why.endswith("(waiting does not help)"):
                return f"{message}; the stream is stopped"
            cap = capacity_bytes(root)
            if cap >= 0:  # what the stream keeps for good: its emergency reserve, its index, small files
                try:
                    kept = self.staging.index.stat().st_size
                except OSError:
                    kept = 0
                cap -= EMERGENCY_RESERVE + kept + 64 * 1024
            if cap < need and capacity_bytes(root) >= 0:  # no amount of freed room makes a step bigger than the file system fit
                return (f"{message}; the file system can hold at most {max(cap, 0)} bytes of steps, less than one step: the stream is "
                        "stopped (waiting does not help; stage on a larger file system or write smaller steps)")
            if cfg.queue_policy != "block":
                return (f"{message}; the stream is stopped (queue_policy='{cfg.queue_policy}' does not wait for "
                        "room; with 'block' the producer waits until there is)")
            if not announced:
                print(f"h5flow: {message}; waiting for room (queue_policy='block'): consumers releasing steps or "
                      f"files removed from {root.parent} let it go on", file=sys.stderr, flush=True)
                announced = True
            after = ""
            self._queue_state(collect=True)  # deletes released steps
            if not reported and time.time() - t0 >= room_report_after(cfg.heartbeat):
                reported = True  # once per wait: who holds the room, so that someone can act
                print(f"h5flow: step {step} has waited {time.time() - t0:.0f} s for room in {root}: "
                      f"{self._room_holders()}; still waiting (queue_policy='block')", file=sys.stderr, flush=True)
            time.sleep(delay)
            delay = min(delay * 2, max(cfg.poll_max, 0.05))

    def _room_holders(self) -> str:
        """Rank 0: who holds the staging file system's room: each consumer group's unreleased steps, released
        steps not deleted yet, and what lies outside this stream's steps (other files)."""
        run = self.info.run_id
        on_disk = [(e, _tree_bytes(self.staging.step_path(e.step))) for e in self._published]
        on_disk = [(e, n) for e, n in on_disk if n >= 0]
        parts = []
        groups = self.staging.groups(run)
        for name, g in sorted(groups.items()):
            held = [(e, n) for e, n in on_disk if e.seq > g.released_seq]
            if held:
                parts.append(f"consumer group '{name}' has not released {len(held)} steps "
                             f"({step_ranges([e.step for e, _ in held])}, {sum(n for _, n in held)} bytes; its state "
                             f"was saved {time.time() - g.updated:.0f} s ago)")
        if not groups and on_disk:
            parts.append(f"no consumer group has registered yet: {len(on_disk)} published steps "
                         f"({sum(n for _, n in on_disk)} bytes) wait for the first one")
        done = self.staging.released_seq(run, groups) if groups else -1
        released = [(e, n) for e, n in on_disk if e.seq <= done]
        if released:
            parts.append(f"{len(released)} released steps not deleted yet ({sum(n for _, n in released)} bytes)")
        cap, free = capacity_bytes(self.staging.root), free_bytes(self.staging.root)
        if cap >= 0 and free >= 0:
            other = max(cap - free - sum(n for _, n in on_disk), 0)
            parts.append(f"{other} of the file system's {cap} bytes are outside this stream's published steps "
                         f"(other files in {self.staging.root.parent} or elsewhere on it, the stream's index and "
                         "reserve, a step being written)")
        return "; ".join(parts) or "nothing this producer can name"

    def _stop_stream(self, reason: str) -> None:
        """Rank 0: tell consumers the stream stopped on an error (``X`` line; the emergency reserve gives it
        room on a full file system). Consumers get every step published before, then ERROR."""
        if self._stopped:
            return
        self._stopped = True
        print(f"h5flow: error: {reason}", file=sys.stderr, flush=True)
        try:
            self.staging.append(f"X {time.time()!r} {' '.join(reason.split())}")
        except OSError as e:
            print(f"h5flow: cannot write the error to {self.staging.index} ({e}); consumers will see the producer "
                  "lost when its heartbeat stops", file=sys.stderr, flush=True)

    def _queue_state(self, collect: bool = False) -> tuple[int, int, list[str]]:
        """Rank 0: (unreleased steps, their bytes on disk, the consumer groups). ``collect``: delete the
        steps every group has released first. Consumers delete what they release (in their idle time,
        off their per-step path); the producer does when it is short of room, at close, and at every step
        under a quota (``quota_bytes`` bounds the bytes of steps on disk, released or not)."""
        cfg = self.settings
        self._published.extend(e for e in self._tail.read_new() if e.kind == "P")
        if cfg.keep != "all" and (collect or cfg.quota_bytes):
            self.staging.collect_garbage(self.info.run_id, self._published)
        groups = self.staging.groups(self.info.run_id)
        released = self.staging.released_seq(self.info.run_id, groups) if groups or self._dropped_groups else -1
        # forget released steps once nothing needs them (kept with keep="all"; deleted otherwise), so that
        # the per-step cost does not grow with the number of steps published
        self._published = [e for e in self._published if e.seq > released or (
            cfg.keep != "all" and self.staging.step_path(e.step).exists())]
        unreleased = sum(1 for e in self._published if e.seq > released)
        # the quota bounds unreleased data; with keep="all" released steps stay on disk but do not count
        staged = sum(e.nbytes for e in self._published
                     if e.seq > released and self.staging.step_path(e.step).exists())
        return unreleased, staged, list(groups)

    def _wait_for_consumers(self, delay: float) -> None:
        """Rank 0, queue full (``block``): sleep ``delay`` s, or less: until a consumer group's file changes
        (a release), where the file system tells (inotify, same host).

        A producer waiting here has time to spare: it deletes the steps every group has released first, which
        a consumer would otherwise do in its release (it has no idle time when it is the slower side:
        measured ~1 ms per 8 MiB on tmpfs, 4.4 ms per step of the one consumer at 8:1 on 16 cores)."""
        if self.settings.keep != "all" and self._published:
            self.staging.collect_garbage(self.info.run_id, self._published)
        if self._consumer_watch is None:
            self._consumer_watch = DirWatch(self.staging.consumers)
        self._consumer_watch.wait(delay)

    def _check_dead(self, when: str) -> str:
        """Rank 0 waiting for its consumers checks its own heartbeat too (it is the one its consumers watch)."""
        failure = self._heartbeat.failure()
        return f"rank 0: {failure}" if failure else super()._check_dead(when)

    def _dead_groups(self) -> dict[str, str]:
        """Rank 0: the consumer groups that stopped beating (``consumers/<group>.hb``) with steps unreleased."""
        now, last = time.time(), self._seq - 1
        out = {}
        for name, state in self.staging.groups(self.info.run_id).items():
            if state.released_seq < last:
                what = self.staging.dead_group(name, state, now)
                if what:
                    out[name] = what
        return out

    def _drop_group(self, name: str, reason: str) -> None:
        """Rank 0: mark the group dropped in its file (it then holds no step back; a restarted consumer of it
        learns why and resumes at its first unreleased step still in the stream)."""
        state = self.staging.load_group(name)
        if state is None:
            return
        state.dropped = reason
        self.staging.save_group(name, state)
        self._dropped_groups.add(name)

    def _dropped_steps(self) -> dict[str, dict[str, Any]]:
        """Rank 0 at close: group -> the published steps it never took, for each group dropped and not back."""
        out: dict[str, dict[str, Any]] = {}
        published = [e for e in read_index(self.staging.index) if e.kind == "P"]
        for name in sorted(self._dropped_groups):
            state = self.staging.load_group(name)
            if state is None or state.run_id != self.info.run_id or not state.dropped:
                continue  # a consumer of the group came back (it reports the steps it missed itself)
            steps = [e.step for e in published if e.seq > state.released_seq]
            if steps:
                out[name] = {"steps": steps, "reason": state.dropped}
        return out

    def _record_discard(self, step: int, why: str) -> None:
        self.staging.append(f"D {step} {self._step_time!r} {why}")

    # -- end -------------------------------------------------------------------------------------
    def _do_close(self) -> None:
        try:
            self._drain()
        finally:
            self._stop_write_thread()
        sleepy_wait(self.comm)
        error = ""
        if self.comm.rank == 0:
            try:
                self._published.extend(e for e in self._tail.read_new() if e.kind == "P")
                self.staging.append(f"E {self._seq}")
                if self.settings.keep != "all":
                    self.staging.collect_garbage(self.info.run_id, self._published)
                self._remove_doomed()
                self.dropped = self._dropped_steps()
            except OSError as e:
                error = f"cannot end the stream in {self.staging.root}: {e}"
            self._release_rank0()
        self._heartbeat.stop()
        error, self.dropped = bcast_from_root(self.comm, (error, self.dropped))
        if error:
            raise TransportError(error)
        if self.dropped:  # never silent: the producer's exit status says steps were lost
            raise TransportError("; ".join(dropped_message(self.config.filename, g, d)
                                           for g, d in sorted(self.dropped.items())))

    def _do_abort(self) -> None:
        # No end-of-stream: the reason the producer stopped goes where consumers look. Every rank leaves it in
        # hb/<rank>.error (read when that rank's heartbeat stops: a rank that failed alone is named), rank 0
        # also as an X line (consumers report it at once, after the steps published before). A step on the write
        # thread is finished first (every rank's thread takes part in its collectives, whatever the simulation
        # raised), or fails on its own.
        with contextlib.suppress(Exception):
            self._drain()
        self._stop_write_thread()
        line = self.failure_line()
        self.staging.record_failure(self.comm.rank, line)
        self._heartbeat.stop()
        if self.comm.rank == 0:
            self._stop_stream(line)
            self._remove_doomed()
            self._close_log_file()
            self._release_rank0()

    def _release_rank0(self) -> None:
        """Rank 0 at the end: its reservations, its directory watch, the claim."""
        self.staging.release_space()
        self.staging.emergency.unlink(missing_ok=True)
        if self._consumer_watch is not None:
            self._consumer_watch.close()
            self._consumer_watch = None
        self.staging.release_claim()


