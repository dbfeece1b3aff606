"""Claiming a socket stream's name: one producer at a time, atomically.

Producer rank 0 holds the stream's claim (:class:`h5flow.transports._claim.Claim`: an exclusive ``flock``)
on ``<filename>.socket.lock`` for as long as it serves the stream. The kernel grants it to one process only
and releases it when that process exits, killed or not, so there is no stale claim to clean up and no
window in which two producers both believe they own the stream. The holder writes who it is (host, pid, run
id, since) into the file; a second producer fails at once with that owner's name. On close the file is
removed (the contact file's staleness check reads it). (File systems without working locks: the
contact-file ping in ``writer._live_producer`` remains as a second check.)
"""

from __future__ import annotations

from pathlib import Path

from h5flow.transports._claim import Claim, ClaimError

LOCK_SUFFIX = ".socket.lock"


def lock_path(filename: str) -> Path:
    return Path(filename + LOCK_SUFFIX)


def claim_stream(filename: str, run_id: str) -> Claim:
    """Claim the stream ``filename`` for run ``run_id``; :class:`ClaimError` names the producer serving it.
    Release with ``release(remove=True)``."""
    path = lock_path(filename)
    try:
        return Claim.acquire(path, f"stream {filename}", run_id)
    except ClaimError as e:
        o = e.owner
        who = f"pid {o.pid} on {o.host}, run {o.run}, since {o.since()}" if o else \
            f"holding {path}, which does not name it yet"
        raise ClaimError(f"{filename}: another producer ({who}) is still serving this stream; use another "
                         "filename or stop it first", o) from None
