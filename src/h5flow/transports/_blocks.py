"""Blocks rebuilt on the consumer side from a step's metadata and the rows read for them (all transports)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h5flow.model import ArrayMeta, Association, Block, ImageBlock, MeshMeta, ParticleBlock


def check_wanted(mesh: MeshMeta, arrays: Sequence[str], association: Association) -> list[ArrayMeta]:
    """The metadata of the arrays a consumer asked for; an image array of the other association is refused."""
    wanted = [mesh.array(name) for name in arrays]
    for a in wanted:
        if mesh.kind == "image" and a.association != association:
            raise KeyError(f"array {a.name!r} of mesh {mesh.name!r} is a {a.association} array, not {association}")
    return wanted


def assemble(mesh: MeshMeta, block_id: int, wanted: Sequence[ArrayMeta], rows: dict[str, np.ndarray],
             positions: np.ndarray | None = None) -> Block:
    """Block ``block_id`` of ``mesh`` from its rows: ``rows[name]`` is ``(count, components)``."""
    bm = mesh.blocks[block_id]
    if mesh.kind == "image":
        blk = ImageBlock(block_id, tuple(bm.origin), tuple(bm.spacing), tuple(bm.extent), bm.ghost)  # type: ignore[arg-type]
        for a in wanted:
            shape = bm.shape(a.association) + ((a.components,) if a.components > 1 else ())
            blk.arrays(a.association)[a.name] = rows[a.name].reshape(shape)
        return blk
    arrs = {a.name: (rows[a.name] if a.components > 1 else rows[a.name][:, 0]) for a in wanted}
    assert positions is not None
    return ParticleBlock(block_id, positions, arrs)
