"""Compiled kernels of the query engine (``native/query``, built by ``make setup`` into
``<build>/native/lib/libh5flow_query.so``), loaded with ctypes; numpy does the same work where the library
is not built (``H5FLOW_QUERY_KERNELS=0`` forces that, for comparison)."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

_LIB: list[Any] = []


def _load() -> None:
    if not _LIB:
        fns: list[Any] = [None, None]
        if os.environ.get("H5FLOW_QUERY_KERNELS", "1") != "0":
            try:
                from h5flow._paths import build_dir

                so = ctypes.CDLL(str(build_dir() / "native" / "lib" / "libh5flow_query.so"))
                fn = so.h5flow_query_positions
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
                fn.restype = ctypes.c_int64
                seg = so.h5flow_query_segments
                seg.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 5 + [ctypes.c_int64, ctypes.c_void_p]
                seg.restype = ctypes.c_int64
                fns = [fn, seg]
            except (OSError, AttributeError, RuntimeError):
                fns = [None, None]
        _LIB.extend(fns)


def _lib() -> Any:
    _load()
    return _LIB[0]


def available() -> bool:
    """Whether the compiled kernels are in use."""
    _load()
    return _LIB[0] is not None


MASK, ALL, COPY = 0, 1, 2


def segments(kind: np.ndarray, length: np.ndarray, base: np.ndarray, masks: list[np.ndarray],
             seg_mask: np.ndarray, seg_off: np.ndarray, copies: dict[int, np.ndarray], hits: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """The positions of segments one after the other in one new int64 array, and the end of each segment in
    it. Segment s, by ``kind[s]``: MASK, the positions ``base[s] + i`` of the hits of
    ``masks[seg_mask[s]][seg_off[s]:seg_off[s] + length[s]]`` (bool); ALL, ``base[s] .. base[s] + length[s]
    - 1``; COPY, ``copies[s] + base[s]`` (``length[s]`` int64 values). ``hits``: how many hits the MASK
    segments hold, if the caller knows (else counted per segment). One pass in C where the kernels are built,
    into an array of the exact size (a larger one costs more in page faults than counting)."""
    n = len(kind)
    mk = kind == MASK
    if hits is None:
        hits = sum(int(np.count_nonzero(masks[int(seg_mask[s])][int(seg_off[s]):int(seg_off[s] + length[s])]))
                   for s in np.flatnonzero(mk).tolist())
    cap = int(length[~mk].sum()) + int(hits)
    out = np.empty(cap, np.int64)
    ends = np.empty(n, np.int64)
    _load()
    fn = _LIB[1]
    if fn is not None and n:
        src = np.zeros(n, np.int64)
        if mk.any():
            addr = np.array([m.ctypes.data for m in masks], np.int64)
            src[mk] = addr[seg_mask[mk]] + seg_off[mk]
        for s, v in copies.items():
            src[s] = v.ctypes.data
        kind64 = np.ascontiguousarray(kind, np.int64)
        length64 = np.ascontiguousarray(length, np.int64)
        base64 = np.ascontiguousarray(base, np.int64)
        got = fn(n, kind64.ctypes.data, src.ctypes.data, length64.ctypes.data, base64.ctypes.data,
                 out.ctypes.data, cap, ends.ctypes.data)
        if got != cap:
            raise RuntimeError(f"h5flow_query_segments wrote {got} positions, {cap} counted")
    else:
        at = 0
        for s in range(n):
            k, ln, b = int(kind[s]), int(length[s]), int(base[s])
            if k == MASK:
                o = int(seg_off[s])
                v = np.flatnonzero(masks[int(seg_mask[s])][o:o + ln])
                v += b
            elif k == ALL:
                v = np.arange(b, b + ln, dtype=np.int64)
            else:
                v = copies[s] + b
            out[at:at + v.size] = v
            at += v.size
            ends[s] = at
        got = at
    if got != cap:
        raise RuntimeError(f"{got} positions written, {cap} counted")
    return out, ends


def positions(mask: np.ndarray, base: int = 0) -> np.ndarray:
    """``np.flatnonzero(mask) + base`` (int64) for a contiguous 1-D bool array: with the compiled kernel,
    one count (numpy) and one pass that skips zero words, several times faster than ``flatnonzero`` on the
    masks of selective queries."""
    fn = _lib()
    if fn is None or mask.dtype != np.bool_ or mask.ndim != 1 or not mask.flags.c_contiguous:
        out = np.flatnonzero(mask)
        if base:
            out += base
        return out
    cnt = int(np.count_nonzero(mask))
    out = np.empty(cnt, np.int64)
    if cnt:
        got = fn(mask.ctypes.data, mask.size, base, out.ctypes.data, cnt)
        if got != cnt:  # cannot happen (the mask changed under us?): numpy's answer
            raise RuntimeError(f"h5flow_query_positions found {got} positions, count_nonzero {cnt}")
    return out
