"""The cases of tests/test_query_exact.py: each dtype's stored values and literals, numpy's answers, and the
query engine's on each path. A module of its own, importing neither pytest nor hypothesis: each container case
runs in a subprocess that imports it, and those two imports were most of its start-up beyond h5py's."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

OPS = ("==", "!=", "<", "<=", ">", ">=")
NP_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
          ">=": np.greater_equal}
DTYPES = ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "?")
BLOCK = 4


def stored_values(dt: np.dtype) -> list[Any]:
    """Distinct non-NaN values the dataset of ``dt`` holds, ascending."""
    if dt.kind == "b":
        return [False, True]
    if dt.kind in "iu":
        info = np.iinfo(dt)
        cands = [int(info.min), int(info.min) + 1, -1, 0, 1, 2, 100, 2 ** 53 + 1, int(info.max) - 1, int(info.max)]
        return sorted({c for c in cands if info.min <= c <= info.max})
    info = np.finfo(dt)
    cands = [-np.inf, -float(info.max), -1.5, -0.0, float(info.smallest_subnormal), 0.1, 0.5, 0.9, 1.0,
             16777217.0, float(info.max), np.inf]
    out: list[Any] = []
    for c in cands:
        with np.errstate(over="ignore"):
            v = dt.type(c)
        if not any(v == o and np.signbit(v) == np.signbit(o) for o in out):
            out.append(v)
    return sorted(out, key=float)


def data_for(dt: np.dtype) -> np.ndarray:
    """Blocks of one value each, then blocks of two neighbouring values, then (floats) NaN blocks."""
    vals = stored_values(dt)
    blocks = [[v] * BLOCK for v in vals]
    blocks += [[a, b, b, a] for a, b in zip(vals, vals[1:])]
    if dt.kind == "f":
        blocks += [[np.nan] * BLOCK, [vals[3], np.nan, vals[-3], np.nan]]
    return np.array([x for b in blocks for x in b], dtype=dt)


def literals(dt: np.dtype) -> list[int | float]:
    vals = stored_values(dt)
    out: list[int | float] = [float("nan"), float("inf"), float("-inf"), 0, 1, -1, 0.1, 0.9, 0.5, 2 ** 70, -(2 ** 70),
                              2 ** 64, float(2 ** 63), float(2 ** 64), 16777217, 2 ** 53 + 1]
    for v in vals:
        if dt.kind in "iub":
            s = int(v)
            out += [s, s - 1, s + 1, float(s), s + 0.5, s - 0.5]
        else:
            s = float(v)
            if math.isinf(s):
                continue
            with np.errstate(over="ignore"):
                out += [s, float(np.nextafter(v, dt.type(np.inf))), float(np.nextafter(v, dt.type(-np.inf))),
                        float(np.nextafter(s, np.inf)), float(np.nextafter(s, -np.inf))]
    return list({(type(x).__name__, repr(x)): x for x in out}.values())


def expected(dt: np.dtype, op: str, lit: int | float) -> int | str:
    """numpy's count of ``op(array, lit)``, or 'error' where numpy refuses the comparison. A bool dataset
    compares as its 0/1 integers (numpy refuses a bool array against an integer beyond int64; h5flow answers
    as for uint8 0/1, which numpy compares)."""
    a = data_for(dt)
    if dt.kind == "b":
        a = a.view(np.uint8)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return int(np.count_nonzero(NP_OPS[op](a, lit)))
    except (OverflowError, TypeError, ValueError):
        return "error"


def evaluate(codes: list[str], paths: dict[str, str], path_kinds: dict[str, tuple[Any, ...]]
             ) -> dict[str, int | str]:
    """Count of every (dtype, op, literal) on every path (``kind -> (file, ApplyOptions)``)."""
    from h5flow.query import Q, apply

    out: dict[str, int | str] = {}
    for code in codes:
        dt = np.dtype(code)
        for li, lit in enumerate(literals(dt)):
            for op in OPS:
                for kind, (file, opts) in path_kinds.items():
                    q = NP_OPS_Q[op](Q.data(paths[code]), lit)
                    try:
                        with warnings.catch_warnings(), np.errstate(all="ignore"):
                            warnings.simplefilter("ignore")
                            with apply(file, q, opts) as r:
                                got: int | str = r.datasets[0].count if r.datasets else 0
                    except (OverflowError, TypeError, ValueError):
                        got = "error"
                    out[f"{code}|{op}|{li}|{kind}"] = got
    return out


NP_OPS_Q = {"==": lambda d, v: d == v, "!=": lambda d, v: d != v, "<": lambda d, v: d < v,
            "<=": lambda d, v: d <= v, ">": lambda d, v: d > v, ">=": lambda d, v: d >= v}
