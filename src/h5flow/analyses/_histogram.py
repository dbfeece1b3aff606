"""SENSEI's histogram analysis (``<analysis type="histogram" mesh= array= association= bins= file=/>``).

The algorithm is SENSEI's (``sensei/Histogram.cxx``, ``HistogramInternals.cxx``):

1. each consumer rank takes the min/max over the interiors of its blocks (ghost layers left out);
2. the global min/max come from one all-reduce (a rank without blocks contributes +inf/-inf);
3. ``width = (max - min) / bins``; each value goes to slot ``floor((v - min) / width)`` clipped to
   ``0 .. bins``, so ``bins + 1`` slots, the extra one catching ``v == max``;
4. the slot counts are summed onto rank 0, which merges the extra slot into the last bin.

Where h5flow differs from SENSEI, on purpose:

* **Constant field.** SENSEI fails when ``max - min < 1e-6``. h5flow returns a valid histogram instead:
  when every value is the same (``max == min``) the binning range becomes ``[min, min + d]`` with
  ``d = 1e-6 * max(1, |min|)``, so all counts land in the first bin and ``range``/``edges`` stay
  increasing. A range that is small but not zero is binned normally.
* **No data.** When no rank holds any finite value the result has zero counts and a NaN range/edges.
* **Non-finite values** (NaN, ±inf) are left out of the min/max and the counts, and counted in
  :attr:`HistogramResult.nonfinite` (SENSEI's min/max would be poisoned by them).
* Values are binned in float64 whatever the array's dtype, so the analysis and :func:`histogram_of`
  agree bit for bit.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from h5flow.analyses.base import Analysis, AnalysisSettings, mesh_setting
from h5flow.model import Association
from h5flow.settings import setting
from h5flow.transports.base import ReadStep

if TYPE_CHECKING:
    from h5flow.config import AnalysisConfig

#: the relative width of the binning range of a constant field (SENSEI's failure threshold, made relative)
CONSTANT_FIELD_WIDTH = 1e-6


@dataclass
class HistogramResult:
    """One step's histogram, as rank 0 holds it."""

    step: int
    time: float
    mesh: str
    array: str
    bins: int
    range: tuple[float, float]  # the binning range: (global min, global max) unless the field is constant
    edges: np.ndarray  # bins + 1 float64 edges, edges[0] == range[0], edges[-1] == range[1]
    counts: np.ndarray  # bins int64 counts; the last bin includes values equal to the max
    nonfinite: int = 0  # NaN/inf values left out
    association: str = "cell"

    @property
    def total(self) -> int:
        """Values counted (non-finite ones excluded)."""
        return int(self.counts.sum())

    def to_text(self) -> str:
        """SENSEI's file format."""
        return (
            f"step : {self.step}\n"
            f"time : {_num(self.time)}\n"
            f"num bins : {self.bins}\n"
            f"range : {_num(self.range[0])} {_num(self.range[1])}\n"
            f"bin edges : {' '.join(_num(e) for e in self.edges)}\n"
            f"counts : {' '.join(str(int(c)) for c in self.counts)}\n"
        )


def _num(x: float) -> str:
    """Shortest text that reads back as the same float64."""
    return repr(float(x))


def _check_bins(bins: int) -> int:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"histogram: bins must be an integer >= 1, got {bins!r}")
    return int(bins)


def _finite_values(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``values`` flattened without NaN/inf, and how many were dropped.

    Floating-point arrays keep their dtype (converting to float64 is exact, so it is left to
    :func:`slot_counts`, chunk by chunk); other dtypes become float64 here.
    """
    v = np.asarray(values)
    if v.dtype.kind != "f" or v.dtype.itemsize > 8:
        v = v.astype(np.float64)
    v = v.ravel()
    finite = np.isfinite(v)
    if finite.all():
        return v, 0
    return v[finite], int(v.size - np.count_nonzero(finite))


def binning_range(vmin: float, vmax: float) -> tuple[float, float]:
    """The range the bins span, given the global min/max of the finite values.

    ``(vmin, vmax)`` unless ``vmin == vmax`` (constant field: ``(vmin, vmin + d)``, see the module doc),
    and ``(nan, nan)`` when there is no data (``vmin > vmax``, the +inf/-inf of empty reductions).
    """
    if not vmin <= vmax:
        return math.nan, math.nan
    if vmax > vmin:
        return float(vmin), float(vmax)
    return float(vmin), float(vmin + CONSTANT_FIELD_WIDTH * max(1.0, abs(vmin)))


def _scale(lo: float, hi: float) -> float:
    """1, or 0.5 when ``hi - lo`` overflows float64 (exact rescaling keeps the arithmetic finite)."""
    return 1.0 if math.isfinite(hi - lo) else 0.5


def bin_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """``bins + 1`` edges ``lo + i * width``, the last one exactly ``hi``."""
    bins = _check_bins(bins)
    if not lo <= hi:
        return np.full(bins + 1, np.nan)
    s = _scale(lo, hi)
    width = (hi * s - lo * s) / bins
    edges = (lo * s + width * np.arange(bins + 1, dtype=np.float64)) / s
    edges[0], edges[-1] = lo, hi
    return edges


#: values binned per pass: small enough that the float64 scratch stays in cache
_CHUNK = 1 << 16


def slot_counts(values: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Counts of finite ``values`` in SENSEI's ``bins + 1`` slots over ``[lo, hi]``, computed in float64.

    Slot of ``v``: ``floor((v*s - lo*s) / width)`` clipped to ``0 .. bins`` (``s`` from :func:`_scale`),
    evaluated in float64 over cache-sized chunks (the same arithmetic, in place, without whole-array
    temporaries).
    """
    out = np.zeros(bins + 1, dtype=np.int64)
    if values.size == 0 or not lo <= hi:
        return out
    s = _scale(lo, hi)
    width = (hi * s - lo * s) / bins
    flat = values.ravel()
    buf = np.empty(min(_CHUNK, flat.size), dtype=np.float64)
    idx = np.empty(buf.size, dtype=np.intp)
    for start in range(0, flat.size, _CHUNK):
        part = flat[start : start + _CHUNK]
        b = buf[: part.size]
        if s != 1.0:
            np.multiply(part, s, out=b, dtype=np.float64)
            np.subtract(b, lo * s, out=b)
        else:
            np.subtract(part, lo, out=b, dtype=np.float64)
        np.divide(b, width, out=b)
        np.floor(b, out=b)
        np.clip(b, 0, bins, out=b)
        i = idx[: part.size]
        i[...] = b
        out += np.bincount(i, minlength=bins + 1)
    return out


def merge_extra_slot(slots: np.ndarray) -> np.ndarray:
    """``bins + 1`` slots → ``bins`` counts: the extra slot (values equal to the max) joins the last bin."""
    counts = slots[:-1].copy()
    counts[-1] += slots[-1]
    return counts


def histogram_of(values: np.ndarray, bins: int) -> tuple[float, float, np.ndarray]:
    """In-process reference with the analysis's exact binning: ``(lo, hi, counts)``.

    ``lo``/``hi`` are the binning range (:func:`binning_range`), ``counts`` has ``bins`` int64 entries.
    Non-finite values are ignored.
    """
    bins = _check_bins(bins)
    v, _ = _finite_values(values)
    vmin, vmax = (float(v.min()), float(v.max())) if v.size else (math.inf, -math.inf)
    lo, hi = binning_range(vmin, vmax)
    return lo, hi, merge_extra_slot(slot_counts(v, lo, hi, bins))


@dataclass
class HistogramSettings(AnalysisSettings):
    """``<analysis type="histogram" .../>`` (SENSEI's histogram)."""

    mesh: str = mesh_setting()
    array: str = setting("data", "the array to histogram")
    association: str = setting("cell", "where the array lives", choices=("cell", "point"))
    bins: int = setting(10, "number of bins", minimum=1)
    file: str | None = setting(None, "write `<file>_<mesh>_<array>_<step>.txt` (SENSEI's format); absent = no files",
                               default_doc="none", accepted_doc="a non-empty path prefix")


class Histogram(Analysis):
    """The histogram of one array of one mesh, over all consumer ranks; rank 0 holds the result."""

    name = "histogram"
    SETTINGS = HistogramSettings

    def __init__(self, mesh: str = "mesh", array: str = "data", association: Association = "cell",
                 bins: int = 10, file: str | os.PathLike[str] | None = None) -> None:
        if association not in ("cell", "point"):
            raise ValueError(f"histogram: association must be 'cell' or 'point', got {association!r}")
        if not mesh or not array:
            raise ValueError(f"histogram: mesh and array must be named (mesh={mesh!r}, array={array!r})")
        self.mesh = mesh
        self.array = array
        self.association: Association = association
        self.bins = _check_bins(bins)
        self.file = os.fspath(file) if file else None
        self.comm: Any = None
        self.last: HistogramResult | None = None

    @classmethod
    def from_config(cls, cfg: AnalysisConfig) -> Histogram:
        s: HistogramSettings = cfg.settings  # parsed and checked by its declarations
        return cls(s.mesh, s.array, "cell" if s.association == "cell" else "point", s.bins, s.file)

    def _check_meta(self, step: ReadStep) -> None:
        """Checks on the step's global metadata, so every rank raises the same error (no rank left waiting)."""
        meshes = step.meta.meshes
        if self.mesh not in meshes:
            known = ", ".join(sorted(meshes)) or "none"
            raise KeyError(f"histogram: step {step.step} has no mesh {self.mesh!r}; meshes: {known}")
        meta = meshes[self.mesh].array(self.array)
        if meta.association != self.association:
            raise ValueError(f"histogram: array {self.array!r} of mesh {self.mesh!r} is a {meta.association} "
                             f"array; set association=\"{meta.association}\"")
        if meta.components != 1:
            raise ValueError(f"histogram: array {self.array!r} of mesh {self.mesh!r} has {meta.components} "
                             "components; only single-component arrays can be histogrammed")

    def _local_values(self, step: ReadStep) -> tuple[list[np.ndarray], int]:
        values, nonfinite = [], 0
        for block in step.blocks(self.mesh, [self.array], self.association):
            v, bad = _finite_values(block.interior(self.array, self.association))
            nonfinite += bad
            if v.size:
                values.append(v)
        return values, nonfinite

    def execute(self, step: ReadStep) -> HistogramResult | None:
        from mpi4py import MPI

        comm = self.comm
        if comm is None:
            raise RuntimeError("histogram: call initialize(comm) before execute()")
        self._check_meta(step)
        values, nonfinite = self._local_values(step)
        # -min and max in one MAX all-reduce; a rank without values sends -inf for both
        local = np.array([-math.inf, -math.inf], dtype=np.float64)
        for v in values:
            local[0] = max(local[0], -float(v.min()))
            local[1] = max(local[1], float(v.max()))
        glob = np.empty(2, dtype=np.float64)
        comm.Allreduce(local, glob, op=MPI.MAX)
        lo, hi = binning_range(-float(glob[0]), float(glob[1]))

        slots = np.zeros(self.bins + 2, dtype=np.int64)  # bins + 1 slots, then the non-finite count
        for v in values:
            slots[:-1] += slot_counts(v, lo, hi, self.bins)
        slots[-1] = nonfinite
        total = np.zeros_like(slots) if comm.Get_rank() == 0 else None
        comm.Reduce(slots, total, op=MPI.SUM, root=0)
        if total is None:
            self.last = None
            return None
        result = HistogramResult(
            step=step.step, time=float(step.time), mesh=self.mesh, array=self.array, bins=self.bins,
            range=(lo, hi), edges=bin_edges(lo, hi, self.bins), counts=merge_extra_slot(total[:-1]),
            nonfinite=int(total[-1]), association=self.association)
        if self.file:
            write_result(result, self.file)
        self.last = result
        return result

    def finalize(self) -> HistogramResult | None:
        """The last step's result on rank 0, else ``None``."""
        return self.last


def result_path(prefix: str | os.PathLike[str], mesh: str, array: str, step: int) -> Path:
    """SENSEI's file name: ``<prefix>_<mesh>_<array>_<step>.txt``."""
    return Path(f"{os.fspath(prefix)}_{mesh}_{array}_{step}.txt")


def write_result(result: HistogramResult, prefix: str | os.PathLike[str]) -> Path:
    """Write ``result`` in SENSEI's format (atomically, parent directories created); returns the path."""
    path = result_path(prefix, result.mesh, result.array, result.step)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(result.to_text())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_result(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """The ``key : values`` lines of a histogram file, values split on whitespace."""
    out: dict[str, list[str]] = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(" : ")
        out[key] = rest.split()
    return out


__all__ = ["Histogram", "HistogramResult", "bin_edges", "binning_range", "histogram_of", "read_result",
           "result_path", "write_result"]
