"""Read buffers a consumer reuses from step to step, only once nothing outside the pool refers to them.

Used by the hdf5 and adios2 readers. A consumer that reads each step into fresh ``np.empty`` arrays pays for new pages every step: glibc hands
multi-MiB blocks back to the kernel when they are freed, so the next step's buffers fault in and are zeroed
again. Measured on the 2-core development VM, eight 8 MiB HDF5 reads per step (one consumer, eight
producers' files): 41.6 ms per step into fresh arrays (3,576 page faults per step) against 20.6 ms into
reused ones (none).

Reuse must never change data a user still holds. The pool gives each buffer out as a view; numpy keeps
the buffer alive (as every view's ``base``) while any view of it, or any view of a view, or a memoryview
of it exists, and that shows in the buffer's reference count. At a step boundary (:meth:`ReadBuffers.next_step`)
a buffer is taken back only when the pool's own references are the only ones left; a buffer the analysis
kept (a running average, a list of last steps' arrays) is dropped from the pool and stays the user's.

Where the caller knows the file offset a buffer is read from (``phase``), the buffer starts at the same
offset within a 4 KiB page: the kernel's copy from the page cache is fastest between same-aligned
addresses, and on some CPUs 3-4x slower when the destination lies 1-31 bytes past the source modulo 4 KiB
(measured on the AMD EPYC development VM: 8 MiB from file offset 0 into an address 16 bytes into a page in
4.6-6.4 ms, same-aligned in 1.5-1.9 ms). Each pooled block is therefore one page longer than it serves, and
what the pool tracks is the block that owns the memory: numpy makes every view's ``base`` that owner, so
the owner's reference count sees every view, whatever slice of it was given out.
"""

from __future__ import annotations

import sys

import numpy as np


def _refcounts(items: list[np.ndarray]) -> list[int]:
    return [sys.getrefcount(b) for b in items]


# what _refcounts reports for a buffer that only its list refers to (calibrated, not assumed: the count
# of the loop's own references differs between Python versions)
_ONLY_LISTED = _refcounts([np.empty(1)])[0]


PAGE = 4096


class ReadBuffers:
    """Buffers for one reader's steps: :meth:`take` during a step, :meth:`next_step` between steps.

    Free buffers are kept up to the bytes the last step took; the others go back to the allocator."""

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []  # 1-D uint8 blocks (PAGE bytes of slack) nobody else refers to
        self._lent: list[np.ndarray] = []  # given out during the current step
        self.reused = 0  # buffers handed out again (for tests and the breakdown)
        self.allocated = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype, phase: int | None = None) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype``, reused where a block of the same
        size is free. ``phase``: the file offset it will be read from; the array then starts at the same
        offset within a page (else at the block's own alignment). The caller fills every element before
        anyone sees it."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        block = None
        for i, b in enumerate(self._free):
            if b.nbytes == nbytes + PAGE:
                block = self._free.pop(i)
                self.reused += 1
                break
        if block is None:
            block = np.empty(nbytes + PAGE, dtype=np.uint8)
            self.allocated += 1
        start = 0 if phase is None else (phase - block.ctypes.data) % PAGE
        self._lent.append(block)
        return block[start:start + nbytes].view(dtype).reshape(shape)

    def next_step(self) -> None:
        """The previous step's views are gone unless someone kept them: take back what nobody refers to."""
        counts = _refcounts(self._lent)
        back = [b for b, c in zip(self._lent, counts, strict=True) if c <= _ONLY_LISTED]
        self._lent = []
        lent_bytes = sum(b.nbytes for b in back)
        pool = back + self._free
        keep, total = [], 0
        for b in pool:  # the newest first: the next step most likely has the same sizes as the last
            if total + b.nbytes <= lent_bytes:
                keep.append(b)
                total += b.nbytes
        self._free = keep

    def clear(self) -> None:
        self._free = []
        self._lent = []
