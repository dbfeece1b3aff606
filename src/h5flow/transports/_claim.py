"""An atomic, exclusive claim of a stream name by one producer: ``flock`` on a lock file.

Two producers that start at the same moment on one stream name must not both write it. A check followed
by a write ("is there a live owner? no: then I own it") is a race; ``flock(LOCK_EX | LOCK_NB)`` is not:
exactly one process gets the lock, and the kernel drops it the moment that process exits, however it
exits (``kill -9`` included), so a crashed owner never leaves a stale claim behind.

The winner writes who it is (host, pid, start time, run) into the lock file; a loser reads that and says
whom it lost to. The lock file is opened without following a symbolic link and must be a regular file of
this user (``_ownership``). Shared by the transports (the hdf5 transport claims ``<filename>.h5flow/owner``,
the socket transport ``<filename>.socket.lock``, consumer groups their group locks); reusable by any code
that needs one owner per name::

    claim = Claim.acquire(path, "stream /dev/shm/run/s")   # raises ClaimError naming the owner
    ...
    claim.release()                                        # or let the process exit; remove=True: the file too

Limits: ``flock`` is exact on one host and on local, tmpfs and NFSv4 file systems; on a parallel file
system mounted without coherent locks (Lustre ``localflock``) two hosts may both get it, so a transport
should keep its own liveness check (the hdf5 transport keeps its heartbeat check) as a second line.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from h5flow.transports import _ownership

ATTEMPTS = 10  # the lock file replaced under us this many times in a row: give up (never loop for ever)


class ClaimError(RuntimeError):
    """The name is claimed by another live process; the message names it (host, pid, start time)."""

    def __init__(self, message: str, owner: Owner | None) -> None:
        super().__init__(message)
        self.owner = owner


@dataclass
class Owner:
    host: str
    pid: int
    started: float  # Unix time the claim was taken
    run: str = ""  # optional: the run id of the owner

    def since(self) -> str:
        """When the claim was taken, local time."""
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))

    def describe(self) -> str:
        run = f", run {self.run}" if self.run else ""
        return f"host {self.host}, pid {self.pid}, started {self.since()}{run}"

    @staticmethod
    def parse(text: str) -> Owner | None:
        try:
            d = json.loads(text)
            return Owner(str(d["host"]), int(d["pid"]), float(d["started"]), str(d.get("run", "")))
        except (ValueError, KeyError, TypeError):
            return None


class Claim:
    """A held claim: the open, ``flock``-ed lock file. Release it, or exit."""

    def __init__(self, path: Path, fd: int, owner: Owner) -> None:
        self.path = path
        self._fd: int | None = fd
        self.owner = owner

    @staticmethod
    def acquire(path: Path, what: str, run: str = "", wait_for_details: float = 5.0) -> Claim:
        """Claim ``path`` for this process or raise :class:`ClaimError` naming the current owner.

        ``what`` names the claimed thing in the message ("stream /x/s"). Atomic: of processes calling this
        at the same moment exactly one succeeds. A loser waits up to ``wait_for_details`` seconds for the
        owner to write who it is (it does so right after locking; seconds later on a loaded machine).
        Raises ``OSError`` when the directory does not exist or the file cannot be opened, and
        :class:`~h5flow.transports.base.TransportError` when the file is not this user's.
        """
        if not path.parent.is_dir():
            raise FileNotFoundError(f"the directory {path.parent} of {what} does not exist: create it or point "
                                    "filename elsewhere")
        for _ in range(ATTEMPTS):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                _ownership.check_file_fd(fd, path, "claim file")  # not another user's
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd, wait_for_details)
                os.close(fd)
                who = owner.describe() if owner else "a process that has not written its details yet"
                raise ClaimError(f"{what} is already claimed by another producer ({who}); stop that producer "
                                 "first or use another filename", owner) from None
            except BaseException:
                os.close(fd)
                raise
            # the file may have been unlinked (and re-created) between our open and our lock: then the lock
            # we hold is on an orphan inode and means nothing; start over
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            owner = Owner(socket.gethostname(), os.getpid(), time.time(), run)
            data = json.dumps(asdict(owner)).encode()
            try:
                os.ftruncate(fd, 0)
                if os.pwrite(fd, data, 0) != len(data):
                    raise OSError(f"short write to {path}")
                os.fsync(fd)
            except BaseException:
                os.close(fd)  # drops the lock
                raise
            return Claim(path, fd, owner)
        raise OSError(f"could not claim {path} for {what}: it was replaced {ATTEMPTS} times in a row while being "
                      "locked")

    def release(self, remove: bool = False) -> None:
        """Give the claim up (idempotent). The lock file stays, free for the next owner; ``remove``: it is
        removed first, then unlocked (a process that locked the removed file retries on a new one)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if remove:
                try:
                    self.path.unlink(missing_ok=True)
                except OSError:
                    pass  # left in place: the next owner locks it as it is
            os.close(fd)  # closing the last descriptor of the open file drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_owner(fd: int, wait: float) -> Owner | None:
    """The details the owner wrote; it writes them just after locking, so wait a little for them."""
    deadline = time.time() + wait
    while True:
        try:
            owner = Owner.parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        except OSError:
            owner = None
        if owner is not None or time.time() >= deadline:
            return owner
        time.sleep(0.01)
