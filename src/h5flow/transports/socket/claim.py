"""Claiming a socket stream's name: one producer at a time, atomically.

Producer rank 0 holds an exclusive ``flock`` on ``<filename>.socket.lock`` for as long as it serves the
stream. The kernel grants it to one process only and releases it when that process exits, killed or not,
so there is no stale claim to clean up and no window in which two producers both believe they own the
stream. The holder writes who it is (host, pid, run id, since) into the file; a second producer fails at
once with that owner's name. (File systems without working locks: the contact-file ping in
``writer._live_producer`` remains as a second check.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from h5flow.transports import _ownership
from h5flow.transports.base import TransportError

LOCK_SUFFIX = ".socket.lock"


def lock_path(filename: str) -> Path:
    return Path(filename + LOCK_SUFFIX)


class StreamClaimed(RuntimeError):
    """Another live producer owns the stream."""


class Claim:
    """An exclusive claim on a stream name; :meth:`release` (or process exit) gives it up."""

    def __init__(self, filename: str, run_id: str) -> None:
        self.path = lock_path(filename)
        if not self.path.parent.is_dir():
            raise OSError(f"the directory {self.path.parent} of the stream's filename does not exist: create it or "
                          "point filename elsewhere")
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                _ownership.check_file_fd(fd, self.path, "stream's lock file")  # not another user's
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StreamClaimed(f"{filename}: another producer ({self._owner()}) is still serving this stream; use "
                                    "another filename or stop it first") from None
            except (OSError, TransportError):
                os.close(fd)
                raise
            try:  # the file we locked may have been removed by a producer closing meanwhile: lock the new one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise StreamClaimed(f"{filename}: could not claim {self.path}: it keeps being replaced")
        self._fd: int | None = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id,
                                  "since": time.time()}).encode(), 0)

    def _owner(self) -> str:
        deadline = time.time() + 5.0
        while True:  # the holder writes its name right after taking the lock (seconds later on a loaded machine)
            try:
                d = json.loads(self.path.read_text())
                return f"pid {d['pid']} on {d['host']}, run {d['run_id']}, since " \
                       f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(d['since']))}"
            except (OSError, ValueError, KeyError, TypeError):
                if time.time() > deadline:
                    return f"holding {self.path}, which does not name it yet"
                time.sleep(0.02)

    def release(self) -> None:
        """Remove the lock file, then unlock (a producer that locked the removed file retries on a new one)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None
