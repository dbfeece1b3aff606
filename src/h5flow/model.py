"""The in-transit data model (SENSEI's, without VTK).

A *step* carries one or more *meshes*; a mesh is made of *blocks*; each block is owned by one producer
rank. Two block kinds exist:

* :class:`ImageBlock` — a uniform (image) grid block: ``origin``, ``spacing``, a cell ``extent``
  ``(i0, i1, j0, j1, k0, k1)`` (inclusive cell indices of the block's *interior* in the global grid),
  ``ghost`` layers around it, and cell/point arrays. A cell array has shape
  ``(nk + 2g, nj + 2g, ni + 2g[, ncomp])`` (C order: z, y, x), ghosts included; a point array has one
  more point per axis.
* :class:`ParticleBlock` — ``positions`` of shape ``(n, 3)`` and per-particle arrays of length ``n``.

:class:`BlockMeta` / :class:`MeshMeta` / :class:`StepMeta` are the *global* metadata of a step: every
block of every rank, with its owner, extent and sizes. Producers gather it once per step and the transport
stores it once; consumers read it first and then only the blocks their partitioner gives them.
"""

from __future__ import annotations

import json
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Association = Literal["cell", "point"]
BlockKind = Literal["image", "particles"]


@dataclass
class ImageBlock:
    block_id: int
    origin: tuple[float, float, float]
    spacing: tuple[float, float, float]
    extent: tuple[int, int, int, int, int, int]  # interior cells, inclusive: i0, i1, j0, j1, k0, k1
    ghost: int = 0
    cell_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    point_arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def cell_shape(self) -> tuple[int, int, int]:
        """(nk, nj, ni) of the interior cells."""
        i0, i1, j0, j1, k0, k1 = self.extent
        return (k1 - k0 + 1, j1 - j0 + 1, i1 - i0 + 1)

    @property
    def num_cells(self) -> int:
        """Cells stored, ghosts included."""
        g = self.ghost
        nk, nj, ni = self.cell_shape
        return (nk + 2 * g) * (nj + 2 * g) * (ni + 2 * g)

    @property
    def num_points(self) -> int:
        g = self.ghost
        nk, nj, ni = self.cell_shape
        return (nk + 2 * g + 1) * (nj + 2 * g + 1) * (ni + 2 * g + 1)

    def interior(self, name: str, association: Association = "cell") -> np.ndarray:
        """The array without its ghost layers."""
        arr = (self.cell_arrays if association == "cell" else self.point_arrays)[name]
        g = self.ghost
        return arr[g : arr.shape[0] - g, g : arr.shape[1] - g, g : arr.shape[2] - g] if g else arr

    def arrays(self, association: Association) -> dict[str, np.ndarray]:
        return self.cell_arrays if association == "cell" else self.point_arrays


@dataclass
class ParticleBlock:
    block_id: int
    positions: np.ndarray  # (n, 3)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # per particle, first axis n

    @property
    def num_points(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_cells(self) -> int:
        return 0

    def interior(self, name: str, association: Association = "point") -> np.ndarray:
        return self.arrays[name]


Block = ImageBlock | ParticleBlock


@dataclass
class ArrayMeta:
    name: str
    association: Association  # "cell" or "point" (particle arrays are "point")
    dtype: str  # numpy dtype string, e.g. "<f4"
    components: int = 1


@dataclass
class BlockMeta:
    block_id: int
    owner: int  # producer rank
    kind: BlockKind
    num_cells: int  # ghosts included
    num_points: int
    extent: tuple[int, ...] = ()  # image blocks: interior cells i0,i1,j0,j1,k0,k1
    origin: tuple[float, ...] = ()
    spacing: tuple[float, ...] = ()
    ghost: int = 0

    @staticmethod
    def of(block: Block, owner: int) -> BlockMeta:
        if isinstance(block, ImageBlock):
            return BlockMeta(block.block_id, owner, "image", block.num_cells, block.num_points,
                             tuple(block.extent), tuple(block.origin), tuple(block.spacing), block.ghost)
        return BlockMeta(block.block_id, owner, "particles", 0, block.num_points)

    def count(self, association: Association) -> int:
        """Tuples this block stores for an array of this association."""
        return self.num_cells if association == "cell" else self.num_points

    def shape(self, association: Association) -> tuple[int, ...]:
        """The block array's shape without the component axis."""
        if self.kind == "particles":
            return (self.num_points,)
        i0, i1, j0, j1, k0, k1 = self.extent
        extra = 2 * self.ghost + (1 if association == "point" else 0)
        return (k1 - k0 + 1 + extra, j1 - j0 + 1 + extra, i1 - i0 + 1 + extra)


@dataclass
class MeshMeta:
    name: str
    kind: BlockKind
    blocks: list[BlockMeta]  # sorted by block_id; block ids are 0..num_blocks-1
    arrays: list[ArrayMeta]
    global_extent: tuple[int, ...] = ()  # image meshes: whole grid's cells i0,i1,j0,j1,k0,k1

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def array(self, name: str) -> ArrayMeta:
        for a in self.arrays:
            if a.name == name:
                return a
        known = ", ".join(a.name for a in self.arrays) or "none"
        raise KeyError(f"mesh {self.name!r} has no array {name!r}; arrays: {known}")

    def offsets(self, association: Association) -> list[int]:
        """Start of each block (by block id) in the mesh's 1-D concatenation of an array."""
        out, acc = [], 0
        for b in self.blocks:
            out.append(acc)
            acc += b.count(association)
        return out + [acc]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(o: Any) -> Any:
    """What ``dataclasses.asdict`` gives for JSON, without its deep copies (~3× faster on a step's
    metadata, which rank 0 serialises every step)."""
    if hasattr(o, "__dataclass_fields__"):
        names = _FIELD_NAMES.get(type(o))
        if names is None:
            names = _FIELD_NAMES[type(o)] = tuple(f.name for f in dataclasses.fields(o))
        return {k: _plain(getattr(o, k)) for k in names}
    if isinstance(o, (list, tuple)):
        return [_plain(x) for x in o]
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    return o


@dataclass
class StepMeta:
    step: int
    time: float
    producers: int
    meshes: dict[str, MeshMeta]

    def to_json(self) -> str:
        return json.dumps(_plain(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> StepMeta:
        d = json.loads(text)
        meshes = {}
        for name, m in d["meshes"].items():
            blocks = [BlockMeta(**{**b, "extent": tuple(b["extent"]), "origin": tuple(b["origin"]),
                                   "spacing": tuple(b["spacing"])}) for b in m["blocks"]]
            arrays = [ArrayMeta(**a) for a in m["arrays"]]
            meshes[name] = MeshMeta(m["name"], m["kind"], blocks, arrays, tuple(m["global_extent"]))
        return StepMeta(d["step"], d["time"], d["producers"], meshes)


__all__ = ["ArrayMeta", "Association", "Block", "BlockKind", "BlockMeta", "ImageBlock", "MeshMeta",
           "ParticleBlock", "StepMeta"]
