"""How a query is applied (:class:`ApplyOptions`) and the error of an index that no longer matches its data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from h5flow.query.expr import QueryError

StalePolicy = Literal["error", "scan", "rebuild"]


class StaleIndexError(QueryError):
    """An index whose dataset changed after it was built (it would give wrong answers)."""


@dataclass
class ApplyOptions:
    """How :func:`apply` runs."""

    use_index: bool = True  # False: ignore indexes (full scan, blockwise)
    on_stale: StalePolicy = "error"  # stale index: refuse, ignore it and scan, or rebuild it first
    comm: Any = None  # an mpi4py communicator: blocks are split across its ranks, hits gathered on all
    kinds: tuple[str, ...] = ("bitmap", "minmax")  # index kinds a query may use, in order of preference
    sub_slabs: bool = True  # False: zone maps per block and candidate blocks read whole (as index format 1)

    def __post_init__(self) -> None:
        if self.on_stale not in ("error", "scan", "rebuild"):
            raise ValueError(f"on_stale must be error, scan or rebuild, got {self.on_stale!r}")
        bad = [k for k in self.kinds if k not in ("bitmap", "minmax")]
        if bad:
            raise ValueError(f"unknown index kind(s) {bad}: use bitmap and/or minmax")
