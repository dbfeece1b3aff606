"""What a pack or unpack reports: :class:`PackReport` on success, :class:`PackError` otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field


class PackError(ValueError):
    """The source cannot be copied faithfully, or the destination cannot be written."""


@dataclass
class PackReport:
    """What one :func:`pack`/:func:`unpack` copied (counts are of the whole copy, ``data_bytes`` too)."""

    src: str
    dst: str
    direction: str  # "pack" or "unpack"
    groups: int = 0
    datasets: int = 0
    datatypes: int = 0
    attributes: int = 0
    soft_links: int = 0
    external_links: int = 0
    hard_links: int = 0  # second and further names of an object
    references: int = 0  # object references remapped (datasets and attributes)
    scales: int = 0  # dimension scales attached
    data_bytes: int = 0  # bytes of dataset data in memory form (vlen data: the element handles)
    slabs: int = 0  # copy steps (all ranks)
    # pack: bytes written to the native file straight from the container's mapped data logs (no read buffer;
    # the rest went through H5Dread), and how many whole chunks of them went in with H5Dwrite_chunk (all ranks)
    direct_bytes: int = 0
    direct_chunks: int = 0
    ranks: int = 1
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
