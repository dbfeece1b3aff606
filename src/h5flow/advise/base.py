"""The rule interface of ``h5flow advise``: settings, findings, and what every rule shares.

A rule reads the trace DataFrame of :func:`h5flow.trace.load` (columns in docs/TRACE.md) and returns
findings. Each finding carries the time the calls it is about took (the ranking key), the evidence
(calls, seconds, bytes), the fix as h5py and C code, and the seed fact the rule rests on.
"""

from __future__ import annotations

import abc
import json
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, ClassVar

import pandas as pd

from h5flow.trace._show import _fmt_bytes as human_bytes  # the same units as h5flow trace show

SEVERITIES = ("HIGH", "WARN", "INFO")

# The trace contract: the columns every rule may read (docs/TRACE.md, "The DataFrame").
COLUMNS: dict[str, str] = {
    "rank": "int", "op": "str", "file": "str", "obj": "str", "t0": "float", "t1": "float", "dur": "float",
    "bytes": "int", "npoints": "int", "nblocks": "int", "ndims": "int", "shape": "str", "mem_type": "str",
    "file_type": "str", "conv": "bool", "xfer": "str", "io_actual": "str", "no_coll_cause": "str", "props": "str",
}

RW_OPS = ("dataset_write", "dataset_read")
OBJECT_CREATE_OPS = ("group_create", "dataset_create", "attr_create", "datatype_commit", "link_create")
FILE_OPEN_OPS = ("file_create", "file_open")
OBJECT_OPEN_OPS = ("dataset_open", "group_open", "attr_open", "object_open", "datatype_open")

# Where each rule's fact comes from (paths relative to the repository's shared/ tree).
SEED_003 = "shared/seeds/003_58478181737fad0f.txt (NERSC I/O tuning guide: MPI-IO, HDF5, h5py)"
SEED_004 = "shared/seeds/004_5080582885e39cc5.txt (Performance vs. Productivity, NERSC data seminar 2017)"
SEED_002 = "shared/seeds/002_7f92edba8d6859d3.txt (HDF5 ECP/ExaIO talks: HACC-IO, Recorder, Darshan)"
REF_DARSHAN = "shared/reference/bench.md §6 (Darshan HDF5 counters: fastest/slowest rank, access sizes)"


class TraceFormatError(ValueError):
    """The DataFrame does not have the trace's columns."""


def check_frame(df: pd.DataFrame) -> None:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise TraceFormatError(f"the trace has no column(s) {', '.join(missing)}: advise reads the DataFrame of "
                               "h5flow.trace.load(dir) (columns in docs/TRACE.md); load the trace with it")


@dataclass
class Evidence:
    calls: int
    seconds: float  # summed over every rank
    bytes: int
    ranks: list[int]
    objects: list[str]  # the most frequent (up to 5)
    ops: list[str]
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    rule: str
    title: str
    severity: str
    file: str
    message: str
    evidence: Evidence
    fix_h5py: str
    fix_c: str
    source: str
    time_s: float  # the busiest rank's seconds in the calls the finding is about: the ranking key

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class Settings:
    """A rule's thresholds; a rule subclasses this with its own fields (all with defaults)."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


class Rule(abc.ABC):
    """One check over a trace. Subclasses set the class attributes and implement :meth:`check`."""

    id: ClassVar[str]
    title: ClassVar[str]
    severity: ClassVar[str] = "WARN"
    source: ClassVar[str]
    settings_class: ClassVar[type[Settings]] = Settings

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else self.settings_class()

    @abc.abstractmethod
    def check(self, df: pd.DataFrame) -> list[Finding]:
        """The findings of this rule in the trace ``df`` (one row per callback, docs/TRACE.md)."""

    def finding(self, file: str, rows: pd.DataFrame, message: str, fix_h5py: str, fix_c: str, *,
                severity: str | None = None, detail: dict[str, Any] | None = None,
                seconds: float | None = None) -> Finding:
        """A finding whose evidence is ``rows`` (the calls it is about)."""
        ev = evidence(rows, detail)
        if seconds is None:  # the busiest rank's time in these calls (ranks run them side by side)
            seconds = float(rows.groupby("rank")["dur"].sum().max()) if len(rows) else 0.0
        return Finding(self.id, self.title, severity or self.severity, file, message, ev,
                       fix_h5py.strip("\n"), fix_c.strip("\n"), self.source, seconds)


def evidence(rows: pd.DataFrame, detail: dict[str, Any] | None = None) -> Evidence:
    objs = [o for o in rows["obj"].value_counts().index[:5] if o]
    return Evidence(int(len(rows)), float(rows["dur"].sum()), int(rows["bytes"].sum()),
                    sorted(int(r) for r in rows["rank"].unique()), objs, sorted(rows["op"].unique()),
                    dict(detail or {}))


def same_calls(df: pd.DataFrame, f: Finding) -> pd.DataFrame:
    """The calls of another run of the program that correspond to a finding's: same file, operations, objects."""
    rows = df[(df["file"] == f.file) & df["op"].isin(f.evidence.ops)]
    return rows[rows["obj"].isin(f.evidence.objects)] if f.evidence.objects else rows


# ---------------------------------------------------------------- helpers over the trace's strings


@lru_cache(maxsize=4096)
def props(text: str) -> dict[str, Any]:
    """The property JSON of a record (``{}`` where there is none or it does not parse)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dims(shape: str) -> tuple[int, ...]:
    """``"100x200"`` -> (100, 200); ``"scalar"`` -> (); ``"null"``/empty -> ()."""
    return tuple(int(x) for x in re.findall(r"\d+", shape or ""))


_ATOMIC = re.compile(r"^[fiu](\d+)(le|be)$")
_SIZED = re.compile(r"\((\d+)\)$")


def type_size(name: str) -> int:
    """Bytes of one element of a trace datatype string (``f32le`` -> 4, ``compound(24)`` -> 24, 0 unknown)."""
    m = _ATOMIC.match(name or "")
    if m:
        return int(m.group(1)) // 8
    m = _SIZED.search(name or "")
    return int(m.group(1)) if m else 0


def nbytes(shape: str, file_type: str) -> int:
    n = 1
    for d in dims(shape):
        n *= d
    return n * type_size(file_type)


def pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def pow2_ceil(n: int) -> int:
    n = max(int(n), 1)
    return 1 << (n - 1).bit_length()


def dataset_creates(df: pd.DataFrame) -> pd.DataFrame:
    """One row per created dataset (first create per file and path), with its parsed properties in ``p``."""
    rows = df[df["op"] == "dataset_create"].drop_duplicates(["file", "obj"]).copy()
    rows["p"] = [props(t) for t in rows["props"]]
    return rows


def file_props(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The file access/creation properties of each file, from its first create or open record."""
    out: dict[str, dict[str, Any]] = {}
    for f, text in df[df["op"].isin(FILE_OPEN_OPS)][["file", "props"]].itertuples(index=False):
        if f not in out and props(text):
            out[f] = props(text)
    return out


def nranks(df: pd.DataFrame) -> int:
    return int(df["rank"].nunique()) if len(df) else 0
