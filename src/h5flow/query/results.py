"""What :func:`h5flow.query.apply` returns: the hits per dataset and the matching objects and attributes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5flow.query.expr import Query, QueryError
from h5flow.query.selection import Selection


@dataclass
class DatasetHits:
    """The elements of one dataset a query selected (a region reference in H5Qapply's view)."""

    file: str
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    selection: Selection

    @property
    def count(self) -> int:
        return self.selection.count()

    def coords(self) -> Iterator[np.ndarray]:
        """Batches of coordinates, (n, ndim) int64, one batch per block (block order; sorted in a block)."""
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            yield grid.coords(k, local)

    def flat(self) -> Iterator[np.ndarray]:
        """Batches of C-order flat indices into the dataset (int64, ``np.unravel_index``-able), one
        batch per block (block order; sorted in a block). The cheapest form of the hits."""
        yield from self.selection.flat_blocks()

    def flat_array(self) -> np.ndarray:
        """Every hit as a C-order flat index, one int64 array in block order (``np.sort`` it for C order;
        sorted already for a 1-D dataset): :meth:`flat` concatenated, without a copy where it can."""
        return self.selection.flat_array()

    def runs(self) -> Iterator[tuple[tuple[int, ...], int]]:
        """Hyperslab runs: (start coordinate, length along the last axis), block by block."""
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            ext = grid.extent(k)
            last = ext[-1] if ext else 1
            brk = np.flatnonzero((np.diff(local) != 1) | ((local[1:] % last) == 0)) + 1
            starts = np.concatenate(([0], brk))
            lengths = np.diff(np.concatenate((starts, [local.size])))
            c = grid.coords(k, local[starts])
            for row, n in zip(c, lengths):
                yield tuple(int(x) for x in row), int(n)

    def values(self, path: str | None = None) -> Iterator[np.ndarray]:
        """Batches of the selected values (of this dataset, or of another aligned dataset ``path``)."""
        dset = self.selection.file[path or self.path]
        if tuple(dset.shape) != self.shape:
            raise QueryError(f"{path}: shape {dset.shape} is not aligned with {self.path} {self.shape}")
        grid = self.selection.grid
        for k, local in self.selection.blocks():
            yield np.asarray(dset[grid.slices(k)]).reshape(-1)[local]

    def to_arrays(self, with_values: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """All coordinates (n, ndim) in C order of the dataset, and the values if asked (materialized)."""
        cs = list(self.coords())
        c = np.concatenate(cs) if cs else np.zeros((0, len(self.shape)), np.int64)
        order = np.lexsort(c.T[::-1]) if c.shape[1] and len(c) else np.arange(len(c))
        vals = None
        if with_values:
            vs = list(self.values())
            vals = (np.concatenate(vs) if vs else np.zeros(0, self.dtype))[order]
        return c[order], vals


@dataclass
class QueryResult:
    """What H5Qapply's view holds: region hits per dataset, matching objects, matching attributes."""

    query: Query
    datasets: list[DatasetHits] = field(default_factory=list)
    objects: list[tuple[str, str]] = field(default_factory=list)  # (file, object path)
    attributes: list[tuple[str, str, str]] = field(default_factory=list)  # (file, object path, attribute)
    _files: list[Any] = field(default_factory=list, repr=False)

    def nonempty(self) -> list[DatasetHits]:
        return [d for d in self.datasets if d.count > 0]

    @property
    def count(self) -> int:
        return sum(d.count for d in self.datasets)

    def close(self) -> None:
        for f in self._files:
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass
        self._files.clear()

    def __enter__(self) -> QueryResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
