"""Mapped reads: a consumer's view of a published file's bytes without copying them (the hdf5 transport's
``map_reads``, docs/STREAM.md "Mapped reads").

A file on tmpfs lives in the page cache: reading it copies each byte from there into the reader's buffer, and
the analysis then reads the copy. Mapping the file's range instead gives the analysis the page-cache pages
themselves. Measured on the 2-core development VM, 8 files of 32 MiB on /dev/shm: ``pread`` into reused
page-aligned buffers 7.3 ms per file, a populated private mapping 3.1-3.8 ms; with a sum over the data after
it, 10.4 against 7.5 ms.

What makes it safe:

* The mapping is private (``MAP_PRIVATE``) and writable: an analysis that changes its array changes a
  private copy of the touched page, never the file, and other readers of the file never see it.
* A published step's files are never written again: a producer writes a step into ``.step-N.tmp``, makes
  its rank files read-only (0400) and renames the directory when the step is complete; garbage collection
  renames a released step out of the stream and unlinks its files. A file changed all the same (by root, or
  after a change of its mode) while a step is read is found at the step's release (its size, modification
  and status change times are compared with those at open) and stops the stream with an error.
* An array still held when its step is released is made the process's own (:func:`privatize`: one copy,
  then the file's pages are replaced at the same address), so nothing done to the file afterwards (a write,
  a truncation, its deletion) changes it or faults on it.
* The range is checked against the file's size before it is mapped (a page past the end of a file faults
  with SIGBUS instead of returning data); the caller checked the size against what the producer recorded.
* The pages are faulted in by the mapping call (``MADV_POPULATE_READ``; where the kernel lacks it, by
  touching one byte per page), so the reading cost stays inside the transport's read, not in the analysis.

Each mapping is owned by a small buffer object whose finalizer unmaps it when the last array over it is
gone; no file descriptor is kept (Python's ``mmap`` keeps a duplicate of the descriptor per mapping, which a
run holding many blocks would exhaust).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
MADV_POPULATE_READ = 22  # Linux 5.14 and later
#: statfs f_type of the file systems whose files live in memory (tmpfs, ramfs)
MEMORY_FS = {0x01021994: "tmpfs", 0x858458F6: "ramfs"}
#: ... and of network and user-space file systems, where another node can delete a file whose pages a mapping
#: still needs (NFS: a later fault on a reclaimed page of a deleted file is a SIGBUS): never mapped
NETWORK_FS = {0x6969: "nfs", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x0BD00BD0: "lustre", 0x47504653: "gpfs",
              0x19830326: "beegfs", 0x00C36400: "ceph", 0x65735546: "fuse", 0x013111A8: "ibrix",
              0x6B414653: "afs", 0x5346414F: "openafs", 0xAAD7AAEA: "panfs"}

#: mremap's system call number (:func:`privatize` calls it directly); -1 where not known: nothing is mapped there
SYS_MREMAP = {"x86_64": 25, "aarch64": 216, "ppc64le": 163}.get(os.uname().machine, -1)

_libc: Any = None


def _c() -> Any:
    global _libc  # the C library handle, loaded once; no per-file state
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.syscall.restype = ctypes.c_long
        lib.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        _libc = lib
    return _libc


def available() -> bool:
    """Whether this platform maps files the way :func:`map_range` and :func:`privatize` need (Linux, on a
    processor whose ``mremap`` system call number is known)."""
    return sys.platform.startswith("linux") and SYS_MREMAP > 0


def fs_type(path: str | os.PathLike[str]) -> int | None:
    """``statfs``'s f_type of the file system ``path`` lies on (``None``: not Linux, or the call failed)."""
    if not available():
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux; f_type comes first
    if _c().statfs(os.fsencode(Path(path)), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def memory_fs(path: str | os.PathLike[str]) -> str | None:
    """The name of the in-memory file system ``path`` lies on (``"tmpfs"``, ``"ramfs"``), else ``None``
    (another file system, not Linux, or ``statfs`` failed)."""
    t = fs_type(path)
    return None if t is None else MEMORY_FS.get(t)


def local_fs(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies on a file system of this node that mapped reads may use: known to ``statfs`` and
    not a network or user-space one (:data:`NETWORK_FS`)."""
    t = fs_type(path)
    return t is not None and t not in NETWORK_FS


def _unmap(addr: int, length: int) -> None:
    _c().munmap(addr, length)


def map_range(fd: int, offset: int, nbytes: int, file_size: int) -> np.ndarray:
    """Bytes ``offset .. offset + nbytes`` of the open file ``fd`` as a writable 1-D uint8 array backed by a
    private, populated mapping (copy-on-write: writes to it never reach the file). ``file_size``: the file's
    size as the caller checked it; a range past it is refused (``ValueError``). ``OSError`` when the kernel
    refuses the mapping."""
    if offset < 0 or nbytes <= 0 or offset + nbytes > file_size:
        raise ValueError(f"bytes {offset}..{offset + nbytes} are not within the file's {file_size} bytes")
    start = offset - offset % PAGE
    length = offset + nbytes - start
    lib = _c()
    addr = lib.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, start)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        e = ctypes.get_errno()
        raise OSError(e, f"mmap of {length} bytes at offset {start}: {os.strerror(e)}")
    owner = (ctypes.c_char * length).from_address(addr)
    done = weakref.finalize(owner, _unmap, addr, length)  # unmapped when the last array over it is gone
    done.atexit = False  # never at interpreter exit, while arrays over it may still be read; the exit unmaps it
    if lib.madvise(addr, length, MADV_POPULATE_READ) != 0:  # the GIL is released during the call (ctypes)
        e = ctypes.get_errno()
        if e != errno.EINVAL:  # EFAULT: the file shrank under us, ENOMEM: out of memory
            raise OSError(e, f"populating {length} mapped bytes at offset {start}: {os.strerror(e)}")
        np.frombuffer(owner, dtype=np.uint8)[::PAGE].max()  # kernels before 5.14: one read fault per page
    return np.frombuffer(owner, dtype=np.uint8, count=nbytes, offset=offset - start)


MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)
MAP_FAILED = ctypes.c_void_p(-1).value


def privatize(owner: Any) -> None:
    """Make the mapping owned by ``owner`` (:func:`owner_of` of a :func:`map_range` array) the process's own
    memory, at the same address: its bytes are copied into an anonymous mapping, which then replaces the file's
    pages in one ``mremap``. Every array over it keeps its values, and from then on no change to the file (a
    write, a truncation, its deletion) reaches them; the file's pages are no longer held. ``OSError`` when the
    kernel refuses (the arrays then still map the file)."""
    addr, length = ctypes.addressof(owner), ctypes.sizeof(owner)
    lib = _c()
    new = lib.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0)  # its pages faulted in by the call, not one fault per page during the copy
    if new is None or new == MAP_FAILED:
        e = ctypes.get_errno()
        raise OSError(e, f"an anonymous mapping of {length} bytes: {os.strerror(e)}")
    ctypes.memmove(new, addr, length)
    # the system call itself: libc's mremap may be interposed by a library's memory hooks (measured: the mremap
    # ctypes found returned NULL for MREMAP_FIXED once mpi4py and h5py were loaded, and worked without them)
    got = lib.syscall(ctypes.c_long(SYS_MREMAP), ctypes.c_void_p(new), ctypes.c_size_t(length),
                      ctypes.c_size_t(length), ctypes.c_int(MREMAP_MAYMOVE | MREMAP_FIXED), ctypes.c_void_p(addr))
    if got != addr:
        e = ctypes.get_errno()
        _unmap(new, length)
        raise OSError(e, f"moving {length} copied bytes over the mapping at {addr:#x}: {os.strerror(e)}")


def owner_of(a: np.ndarray) -> Any:
    """The object that owns the mapping under ``a`` (a view of :func:`map_range`'s array): it lives, and the
    mapping with it, as long as any view of it does."""
    base: Any = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base
