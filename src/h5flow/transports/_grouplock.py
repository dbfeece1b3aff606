"""One live consumer per consumer group: a ``flock`` held by the group's rank 0 while it reads.

Two analyses started on one stream without ``group=`` both name the group ``default``; as one group they
would share its steps (each step delivered to whichever asks first), and each would silently miss the
other's. A consumer group is a single job, so a second live consumer of a group is refused with how to give
each analysis its own group. The lock is the kernel's: it goes when the holder exits, however it exits, so a
crashed consumer never blocks its restart. Where ``flock`` does not reach across hosts (a parallel file
system mounted without coherent locks) two hosts may both get it, as with the producer's claim
(:mod:`h5flow.transports._claim`).
"""

from __future__ import annotations

from pathlib import Path

from h5flow.transports._claim import Claim, ClaimError
from h5flow.transports.base import TransportError


class GroupLock:
    """A held group lock; :meth:`release` (or exit) gives it up and removes the lock file."""

    def __init__(self, claim: Claim) -> None:
        self._claim = claim

    @staticmethod
    def acquire(path: Path, stream: str, group: str) -> GroupLock:
        """Lock ``path`` for consumer group ``group`` of ``stream``, or raise :class:`TransportError` naming the
        consumer that holds it and how to read the stream as another group."""
        try:
            return GroupLock(Claim.acquire(path, f"consumer group {group!r} of {stream}", wait_for_details=1.0))
        except ClaimError as e:
            who = e.owner.describe() if e.owner else "a process that has not written its details yet"
            raise TransportError(
                f"{stream}: consumer group {group!r} is already read by a live consumer ({who}). Each analysis of a "
                f"stream needs a group of its own, which then gets every step: give it another name, e.g. "
                f"h5flow.open(name, 'r', group='my-analysis') or group=\"my-analysis\" in the XML; two consumers in "
                "one group would each get only some of the steps") from None
        except OSError as e:
            raise TransportError(f"{stream}: cannot lock consumer group {group!r} at {path}: {e}") from None

    def release(self) -> None:
        """Remove the lock file, then unlock: a consumer waiting on the removed file retries on a new one."""
        self._claim.release(remove=True)
