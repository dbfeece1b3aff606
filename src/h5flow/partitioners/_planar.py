"""SENSEI's ``PlanarPartitioner``: round-robin over consumer ranks in chunks of ``plane_size`` blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from h5flow.model import BlockMeta
from h5flow.partitioners.base import PartitionError, Partitioner, PartitionerSettings
from h5flow.settings import setting

if TYPE_CHECKING:
    from h5flow.config import PartitionerConfig


@dataclass
class PlanarSettings(PartitionerSettings):
    """``<partitioner type="planar" plane_size="..."/>``."""

    XML_NOTES: ClassVar[dict[str, str]] = {
        "cycle_size": "SENSEI's header documents cycle_size but its code reads plane_size; use plane_size"}

    plane_size: int = setting(1, "blocks per round-robin chunk", minimum=1)


class PlanarPartitioner(Partitioner):
    """Block index ``i`` belongs to chunk ``i // plane_size``; chunk ``c`` goes to rank ``c % N``.

    SENSEI's header names the XML attribute ``cycle_size`` but its code reads ``plane_size``; h5flow
    follows the code.
    """

    name = "planar"
    SETTINGS = PlanarSettings

    def __init__(self, plane_size: int = 1) -> None:
        if isinstance(plane_size, bool) or not isinstance(plane_size, int) or plane_size < 1:
            raise PartitionError(f"planar partitioner: plane_size must be an integer >= 1, got {plane_size!r}")
        self.plane_size = plane_size

    @classmethod
    def from_config(cls, cfg: PartitionerConfig) -> PlanarPartitioner:
        return cls(cfg.settings.plane_size)

    def owners(self, blocks: Sequence[BlockMeta], n_consumers: int) -> list[int]:
        if n_consumers < 1:
            raise PartitionError(f"n_consumers must be at least 1, got {n_consumers}")
        return [(i // self.plane_size) % n_consumers for i in range(len(blocks))]

    def __repr__(self) -> str:
        return f"PlanarPartitioner(plane_size={self.plane_size})"
