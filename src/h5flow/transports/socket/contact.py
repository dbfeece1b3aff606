"""The contact file of a socket stream: where each producer rank listens, and the run's token.

``<filename>.socket.json`` (docs/SOCKET.md), written by producer rank 0 once every producer rank serves,
atomically (a temporary file created with mode 0600, fsync'd, renamed over the target) and removed when
the producer closes. The token in it is the only credential: every request a consumer sends carries it,
so only who can read this file (its owner: mode 0600) can read the stream.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from h5flow.transports import _ownership
from h5flow.transports._common import dropped_message, step_ranges  # noqa: F401 - used by reader and writer
from h5flow.transports.base import TransportError

FORMAT = "h5flow-socket"
VERSION = 1
SUFFIX = ".socket.json"
LOOPBACK = "127.0.0.1"


def contact_path(filename: str) -> Path:
    if not filename:
        raise ValueError("the socket transport needs a filename (the stream's name; its contact file is "
                         f"<filename>{SUFFIX})")
    return Path(filename + SUFFIX)


def group_lock_path(filename: str, group: str) -> Path:
    """The lock file consumer group ``group``'s live consumer holds (:mod:`h5flow.transports._grouplock`)."""
    return Path(f"{filename}.socket.group-{group}.lock")


ENDED_SUFFIX = ".socket.ended.json"


def ended_path(filename: str) -> Path:
    """Where a producer that closed leaves what its consumers need to know afterwards (docs/SOCKET.md)."""
    return Path(filename + ENDED_SUFFIX)


def load_ended(filename: str) -> dict:
    """The ended file of stream ``filename`` (see :func:`ended_path`), checked to be this user's own;
    ``FileNotFoundError``, ``ValueError`` (not JSON) or :class:`TransportError` (not this user's)."""
    return json.loads(_ownership.read_own_file(ended_path(filename), "stream's ended file"))


def write_private(path: Path, data: dict) -> None:
    """Write JSON atomically with mode 0600 (a temporary file in the same directory, fsync'd, renamed)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def new_token() -> str:
    return secrets.token_hex(32)


def bind_address(interface: str) -> str:
    """The zmq TCP address to bind for ``interface``: an IP address, a host name, a network interface name
    (``eth0``, ``ib0``) or ``*`` (every interface); empty means loopback only."""
    iface = interface.strip() or LOOPBACK
    if any(c in iface for c in "/;\"' \t"):
        raise ValueError(f"interface {interface!r} is not an address, host name or interface name")
    return f"tcp://{iface}:*"


def advertised(endpoint: str) -> str:
    """The endpoint a consumer on another node can connect to, from a socket's bound LAST_ENDPOINT."""
    host, _, port = endpoint.rpartition(":")
    if host in ("tcp://0.0.0.0", "tcp://[::]", "tcp://*"):
        return f"tcp://{socket.getfqdn()}:{port}"
    return endpoint


def use_local() -> bool:
    """Same-host consumers connect over IPC unless ``H5FLOW_SOCKET_LOCAL=0`` (then always TCP)."""
    return sys.platform.startswith("linux") and os.environ.get("H5FLOW_SOCKET_LOCAL", "1") != "0"


def local_endpoint(run_id: str, rank: int) -> str:
    """A Linux abstract-namespace IPC endpoint for consumers on the producer's own node ("" elsewhere):
    several times faster than TCP over loopback, and it leaves no file behind."""
    return f"ipc://@h5flow-{run_id}-{rank}" if use_local() else ""


@dataclass
class RankContact:
    rank: int
    endpoint: str  # tcp://host:port the rank's ROUTER socket serves
    host: str  # the node's host name
    pid: int
    local: str = ""  # the same ROUTER socket for consumers on the same host (ipc://@...), or ""

    def reachable(self) -> str:
        """The endpoint to connect to from this process: the local one on the producer's host."""
        return self.local if self.local and self.host == socket.gethostname() and use_local() else self.endpoint


@dataclass
class Contact:
    run_id: str
    token: str
    producers: int
    heartbeat: float
    ranks: list[RankContact] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    format: str = FORMAT
    version: int = VERSION

    def write(self, path: Path) -> None:
        """Write atomically with mode 0600 (the token must not be readable by others, not even briefly)."""
        parent = path.parent
        if not parent.is_dir():
            raise RuntimeError(f"the directory {parent} of the stream's filename does not exist: create it or "
                               "point filename elsewhere")
        tmp = parent / f".{path.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # O_CREAT's mode is only used for a new file
            os.write(fd, json.dumps(asdict(self)).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def stale(self, filename: str) -> str:
        """Why this contact file is known to be left by a producer that is gone ("" when it may be live): its
        rank 0 ran on this host under a pid that no longer exists, or the stream's claim (``.socket.lock``,
        :mod:`.claim`) is gone or names another run (a new producer has claimed the name and will replace
        this file)."""
        from h5flow.transports._claim import Owner
        from h5flow.transports.socket.claim import lock_path

        first = self.ranks[0] if self.ranks else None
        if first is not None and first.host == socket.gethostname() and not _pid_exists(first.pid):
            return f"left by run {self.run_id} of pid {first.pid} on {first.host}, which is gone"
        try:
            claim = Owner.parse(lock_path(filename).read_text())
        except FileNotFoundError:
            return f"left by run {self.run_id}, whose producer released its claim {lock_path(filename)}"
        except OSError:
            return ""  # unreadable: not known to be stale
        owner = claim.run if claim is not None else None  # None: being written
        if owner and owner != self.run_id:
            return f"left by run {self.run_id}; run {owner} has claimed the stream since and is starting"
        return ""

    @staticmethod
    def load(path: Path) -> Contact:
        """Read a contact file; FileNotFoundError when there is none, ValueError when it is not one, or when it is
        not this user's own (another user's, or writable by others: :mod:`h5flow.transports._ownership`)."""
        try:
            text = _ownership.read_own_file(path, "stream's contact file").decode("utf-8", "replace")
        except TransportError as e:  # another user's, or writable by others: never trusted
            raise ValueError(str(e)) from None
        except PermissionError:
            raise ValueError(f"{path}: cannot read the stream's contact file (permission denied): the consumer must "
                             "run as the user that started the producer") from None
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT or d.get("version") != VERSION:
                raise ValueError(f"{path}: not an h5flow socket stream contact file of format version {VERSION} "
                                 f"(found {d.get('format')} version {d.get('version')})")
            d["ranks"] = [RankContact(**r) for r in d["ranks"]]
            c = Contact(**d)
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"{path}: corrupt contact file ({e})") from None
        if len(c.ranks) != c.producers or [r.rank for r in c.ranks] != list(range(c.producers)):
            raise ValueError(f"{path}: corrupt contact file (lists ranks {[r.rank for r in c.ranks]} for "
                             f"{c.producers} producers)")
        return c
