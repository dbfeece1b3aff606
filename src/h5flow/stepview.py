"""The step view a consumer rank reads: :class:`Step` (``read(name)`` → :class:`Share` of :class:`Piece` s).

:func:`h5flow.open` (``for st in s.steps()``) gives these, and so does the runner to a Python analysis
(``<analysis type="python">``): both wrap a transport's :class:`~h5flow.transports.base.ReadStep`. This module
knows no configuration and no analysis, so analyses import it without importing the API's stream opening.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5flow.model import ImageBlock
from h5flow.transports.base import ReadStep, StreamError, TransportError


def as_stream_error(call: Any) -> Any:
    """``call()``, its transport's error raised as :class:`StreamError` (a step's files that cannot be trusted, a
    file changed while read: the stream stopped, as the API's errors say)."""
    try:
        return call()
    except StreamError:
        raise
    except TransportError as e:
        raise StreamError(f"the stream stopped: {e}") from None



@dataclass
class Piece:
    """One block of an array: ``data`` sits at ``offset`` in the global array."""

    offset: tuple[int, ...]
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass
class Share:
    """This rank's share of a global array after M:N partitioning: whole pieces, as the producers wrote them."""

    name: str
    global_shape: tuple[int, ...]
    pieces: list[Piece] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pieces)

    def __iter__(self) -> Iterator[Piece]:
        return iter(self.pieces)

    @property
    def nbytes(self) -> int:
        return sum(p.data.nbytes for p in self.pieces)

    def bounds(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(offset, shape) of the box around every piece (a zero shape when this rank got none)."""
        nd = len(self.global_shape)
        if not self.pieces:
            return (0,) * nd, (0,) * nd
        lo = tuple(min(p.offset[a] for p in self.pieces) for a in range(nd))
        hi = tuple(max(p.offset[a] + p.data.shape[a] for p in self.pieces) for a in range(nd))
        return lo, tuple(h - l for l, h in zip(lo, hi, strict=True))

    @property
    def offset(self) -> tuple[int, ...]:
        return self.bounds()[0]

    def array(self) -> np.ndarray:
        """The pieces as one array (at :attr:`offset`) when they tile a box, which the ``block`` partitioner
        gives for slab decompositions; otherwise use :attr:`pieces` or :meth:`into`."""
        if len(self.pieces) == 1:
            return self.pieces[0].data
        lo, shape = self.bounds()
        if sum(p.data.size for p in self.pieces) != int(np.prod(shape)):
            raise ValueError(f"array {self.name!r}: this rank's {len(self.pieces)} pieces do not tile one box "
                             f"(box at {lo} of shape {shape}); iterate over .pieces or use .into(out)")
        dtype = self.pieces[0].data.dtype if self.pieces else np.float64
        out = np.empty(shape + self.pieces[0].data.shape[len(shape):] if self.pieces else shape, dtype=dtype)
        for p in self.pieces:
            out[tuple(slice(o - l, o - l + n) for o, l, n in zip(p.offset, lo, p.data.shape, strict=False))] = p.data
        return out

    def into(self, out: np.ndarray) -> np.ndarray:
        """Copy every piece to its place in ``out`` (shaped like the global array); returns ``out``."""
        for p in self.pieces:
            out[tuple(slice(o, o + n) for o, n in zip(p.offset, p.data.shape, strict=False))] = p.data
        return out


def _ndim(spacing: Sequence[float]) -> int:
    if len(spacing) == 3 and spacing[2] == 0.0:
        return 1 if spacing[1] == 0.0 else 2
    return 3


class Step:
    """One step on a consumer rank: :meth:`read` an array's share; ``step``, ``time``, :attr:`names`.

    The block-level view stays reachable: ``blocks``, ``my_block_ids`` and ``meta`` are those of the
    underlying :class:`~h5flow.transports.base.ReadStep` (:attr:`raw`), so analyses written for blocks
    accept this object too.
    """

    def __init__(self, raw: ReadStep) -> None:
        self.raw = raw
        self.step = raw.step
        self.time = raw.time
        self.meta = raw.meta

    def __getattr__(self, name: str) -> Any:  # blocks(), my_block_ids(), ...
        return getattr(self.raw, name)

    @property
    def names(self) -> list[str]:
        """The arrays (meshes) of this step."""
        return sorted(self.meta.meshes)

    def read(self, name: str, array: str | None = None) -> Share:
        """This rank's share of the array ``name``: every piece the partitioner gave this rank. Collective
        for some transports: call it on every consumer rank, in the same order."""
        if name not in self.meta.meshes:
            raise KeyError(f"step {self.step} has no array {name!r}; arrays: {', '.join(self.names) or 'none'}")
        mesh = self.meta.meshes[name]
        if mesh.kind != "image":
            raise ValueError(f"{name!r} is a particle mesh; read it with step.blocks({name!r}, [...], 'point')")
        if array is None:
            cells = [a.name for a in mesh.arrays if a.association == "cell"]
            if name in cells:
                array = name
            elif len(cells) == 1:
                array = cells[0]
            else:
                raise KeyError(f"mesh {name!r} carries cell arrays {cells}; give read({name!r}, array=...)")
        nd = _ndim(mesh.blocks[0].spacing) if mesh.blocks else 3
        e = mesh.global_extent
        gshape = (e[5] - e[4] + 1, e[3] - e[2] + 1, e[1] - e[0] + 1)[3 - nd:]
        share = Share(name, tuple(gshape))
        for b in as_stream_error(lambda: self.raw.blocks(name, [array], "cell")):
            assert isinstance(b, ImageBlock)
            data = b.interior(array, "cell")
            i0, _, j0, _, k0, _ = b.extent
            if nd < 3:
                data = data.reshape(data.shape[3 - nd:])
            share.pieces.append(Piece((k0, j0, i0)[3 - nd:], data))
        return share


__all__ = ["Piece", "Share", "Step", "as_stream_error"]
