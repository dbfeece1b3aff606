"""The partitioner contract: which consumer rank reads which block (M producers → N consumers).

Blocks are elemental, as in SENSEI: a partitioner never splits a block, it only assigns whole blocks.
Partitioners are pure functions of the mesh's global block metadata and the consumer count, so they
are tested without MPI.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from h5flow.model import BlockMeta, MeshMeta
from h5flow.settings import Settings


class PartitionError(ValueError):
    """The partitioner's parameters do not fit the step (for example a mapped owner out of range)."""


@dataclass
class PartitionerSettings(Settings):
    """Base of a partitioner's settings: its fields are the attributes of ``<partitioner type="...">`` besides
    ``type`` (declared as a transport's are, :mod:`h5flow.settings`), reaching it as ``cfg.settings``."""

    WHAT: ClassVar[str] = "partitioner setting"

    def _parse_fields(self) -> None:
        try:
            super()._parse_fields()
        except PartitionError:
            raise
        except ValueError as e:  # a partitioner's settings refused: a PartitionError, as its own checks raise
            raise PartitionError(str(e)) from None


class Partitioner(ABC):
    """Assign every block of a mesh to exactly one of ``n_consumers`` ranks."""

    #: the name used in XML: ``<partitioner type="...">``
    name: str = ""
    #: its settings dataclass; ``None``: a partitioner that reads its XML attributes from ``cfg.params``
    SETTINGS: ClassVar[type[PartitionerSettings] | None] = None

    @abstractmethod
    def owners(self, blocks: Sequence[BlockMeta], n_consumers: int) -> list[int]:
        """The consumer rank of each block, in the order of ``blocks`` (sorted by block id)."""

    def assign(self, mesh: MeshMeta, n_consumers: int, rank: int) -> list[int]:
        """Block ids of ``mesh`` that consumer ``rank`` reads."""
        if n_consumers < 1:
            raise PartitionError(f"n_consumers must be at least 1, got {n_consumers}")
        if not 0 <= rank < n_consumers:
            raise PartitionError(f"rank {rank} is outside 0..{n_consumers - 1}")
        owners = self.owners(mesh.blocks, n_consumers)
        return [b.block_id for b, o in zip(mesh.blocks, owners, strict=True) if o == rank]
