"""Streams are per-user: a stream's directory, contact file and lock files are trusted only when they belong
to the user running (or to root) and nobody else can write them.

The rule is ssh's ``StrictModes``: another user who can write a stream's directory can swap its steps for
others, and one who owns a contact file can point a consumer at another stream, so both are refused, with
what to do. Streams are created private (directories 0700, files 0600); a directory in a shared sticky
directory such as ``/tmp`` or ``/dev/shm`` cannot be removed or renamed by others, so it stays ours.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from h5flow.transports.base import TransportError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def trusted_owner(uid: int) -> bool:
    """The running user or root (root can change any file anyway)."""
    return uid in (os.geteuid(), 0)


def untrusted(st: os.stat_result) -> str:
    """Why a file or directory with status ``st`` must not be trusted ("" when it may)."""
    if not trusted_owner(st.st_uid):
        return f"it is owned by {_user(st.st_uid)}, not by you ({_user(os.geteuid())})"
    if st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "its group"
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _refusal(path: Path, what: str, why: str, todo: str) -> TransportError:
    return TransportError(f"{path}: refusing the {what}: {why}, so another user could change what the stream "
                          f"delivers. {todo} (streams are per-user, as ssh's StrictModes trusts only the user's own, "
                          "not group- or world-writable files)")


def check_dir(path: Path, what: str = "stream directory") -> None:
    """Raise :class:`TransportError` unless ``path`` is a directory (not a link) that only this user (or root)
    can write. Its parent may be shared only if it is sticky (``/tmp``, ``/dev/shm``): otherwise another user
    could rename the directory away and put their own in its place."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _refusal(path, what, "it is not a directory (a symbolic link or a file)",
                       "Remove it, or choose another filename")
    why = untrusted(st)
    if why:
        raise _refusal(path, what, why, "Remove it (its owner or root can), or choose another filename, and let h5flow "
                       "create the directory itself (mode 0700)")
    parent = path.parent
    try:
        pst = os.stat(parent)
    except OSError:
        return
    if pst.st_mode & 0o002 and not pst.st_mode & stat.S_ISVTX and not trusted_owner(pst.st_uid):
        raise _refusal(path, what, f"its directory {parent} is writable by others without the sticky bit (mode "
                       f"{stat.S_IMODE(pst.st_mode):04o})", f"Put the stream in a directory of your own, or ask its "
                       f"owner to set the sticky bit (chmod +t {parent})")


def make_dir(path: Path, what: str = "stream directory") -> None:
    """Create ``path`` private (0700) unless it exists, then :func:`check_dir` it."""
    try:
        os.mkdir(path, PRIVATE_DIR)
    except FileExistsError:
        pass
    check_dir(path, what)


def check_file_fd(fd: int, path: Path, what: str) -> None:
    """Raise :class:`TransportError` unless the open file ``fd`` (of ``path``) is a regular file that only this
    user (or root) owns and can write."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _refusal(path, what, "it is not a regular file", "Remove it")
    why = untrusted(st)
    if why:
        raise _refusal(path, what, why, "Remove it (its owner or root can) and run the producer again; a contact "
                       "file of your own stream is always yours, mode 0600")


def read_own_file(path: Path, what: str) -> bytes:
    """The bytes of ``path`` after :func:`check_file_fd` (no link followed, no FIFO waited on);
    ``FileNotFoundError`` when it is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if isinstance(e, (FileNotFoundError, PermissionError)):
            raise
        raise _refusal(path, what, f"it cannot be opened as a file ({e.strerror or e})", "Remove it") from None
    try:
        check_file_fd(fd, path, what)
        out = []
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                return b"".join(out)
            out.append(data)
    finally:
        os.close(fd)
