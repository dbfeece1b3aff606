"""Opening the files a consumer trusts for offsets and sizes without trusting what they are.

A stream's side files (``rank-<r>.extents.json``, ``meta.json``) and the rank files they describe are opened
with ``O_NOFOLLOW`` (a symbolic link in their place is refused, wherever it points) and ``O_NONBLOCK`` (a FIFO
or a device opens at once instead of waiting for a writer), then checked with ``fstat`` to be regular
files; reads are bounded. Whatever is wrong raises :class:`~h5flow.transports.base.TransportError` naming
the file; a missing file raises ``FileNotFoundError`` (the caller decides whether that is an error).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from h5flow.transports.base import TransportError

#: side files are small (a few kB per step); a larger one is not one h5flow wrote
SIDE_FILE_LIMIT = 16 << 20


def open_regular(path: Path, what: str) -> int:
    """A read-only descriptor of the regular file ``path`` (``what`` names it in messages)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TransportError(f"{path}: the {what} is a symbolic link; a stream's files are never links, so it "
                                 "is not read (remove it, or the stream, and run the producer again)") from None
        raise TransportError(f"{path}: cannot open the {what}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        os.close(fd)
        raise TransportError(f"{path}: cannot inspect the {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise TransportError(f"{path}: the {what} is {kind}, not a regular file; it is not read (a stream's files "
                             "are regular files written by its producer)")
    return fd


def read_regular(path: Path, what: str, limit: int = SIDE_FILE_LIMIT) -> bytes:
    """All bytes of the regular file ``path``, at most ``limit`` of them (a larger file is refused)."""
    fd = open_regular(path, what)
    try:
        chunks, total = [], 0
        while True:
            try:
                data = os.read(fd, min(1 << 20, limit + 1 - total))
            except OSError as e:
                raise TransportError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
            if not data:
                break
            chunks.append(data)
            total += len(data)
            if total > limit:
                raise TransportError(f"{path}: the {what} is larger than {limit} bytes, which no h5flow producer "
                                     "writes; it is not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_regular(path: Path, what: str) -> None:
    """Raise unless ``path`` is a regular file (not a link, FIFO or device): before a library (HDF5) opens it."""
    os.close(open_regular(path, what))
