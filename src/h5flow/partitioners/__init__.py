"""Partitioners: decide which consumer rank receives which producer block (M:N redistribution).

One module per partitioner (``block``, ``planar``, ``mapped``), each registered in :data:`registry`;
third parties use :func:`register` or the ``h5flow.partitioners`` entry-point group (docs/CONFIG.md,
"Writing a partitioner"), and the name then works in ``<partitioner type="...">``. Partitioners are pure functions of the
step's global block metadata and the consumer count, so they are tested without MPI.

A registry entry loads a :class:`~h5flow.partitioners.base.Partitioner` subclass; :func:`make_partitioner`
builds it with its ``from_config(cfg)`` classmethod when it has one, else with no arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from h5flow._registry import Registry, UnknownPluginError
from h5flow.partitioners.base import PartitionError, Partitioner, PartitionerSettings

if TYPE_CHECKING:
    from h5flow.config import PartitionerConfig

registry: Registry[type[Partitioner]] = Registry("partitioner", "h5flow.partitioners")


def _load_block() -> type[Partitioner]:
    from h5flow.partitioners._block import BlockPartitioner

    return BlockPartitioner


def _load_planar() -> type[Partitioner]:
    from h5flow.partitioners._planar import PlanarPartitioner

    return PlanarPartitioner


def _load_mapped() -> type[Partitioner]:
    from h5flow.partitioners._mapped import MappedPartitioner

    return MappedPartitioner


registry.register("block", _load_block)
registry.register("planar", _load_planar)
registry.register("mapped", _load_mapped)


def register(name: str, partitioner: type[Partitioner] | Callable[[], type[Partitioner]], *,
             replace: bool = False) -> None:
    """Make ``<partitioner type="name" .../>`` (and ``h5flow.open(..., partitioner="name")``) use
    ``partitioner`` (a :class:`Partitioner` subclass, or a function returning one, called on first use).

    Its XML attributes other than ``type`` are the fields of its ``SETTINGS`` dataclass (a
    :class:`PartitionerSettings`), checked by their declarations and given as ``cfg.settings``; a partitioner
    without ``SETTINGS`` gets them as strings in ``cfg.params``. It is built with
    ``partitioner.from_config(cfg)`` when it has that classmethod, else ``partitioner()``. The XML reader
    builds it once while loading, so a ``ValueError`` (:class:`PartitionError`) it raises for bad settings
    is reported with the file and line. The name only exists in this process: ``h5flow consume``/``run``
    see partitioners registered through the ``h5flow.partitioners`` entry-point group.
    """
    if isinstance(partitioner, type):
        if not issubclass(partitioner, Partitioner):
            raise TypeError(f"register({name!r}, {partitioner.__name__}): a partitioner must subclass "
                            "h5flow.partitioners.Partitioner")
        cls = partitioner
        registry.register(name, lambda: cls, replace=replace)
    elif callable(partitioner):
        registry.register(name, partitioner, replace=replace)
    else:
        raise TypeError(f"register({name!r}, ...): give a Partitioner subclass or a function returning one")


def settings_class(name: str) -> type[PartitionerSettings] | None:
    """The settings dataclass of partitioner ``name`` (``None``: a plugin that reads ``cfg.params``, or a name not
    registered, refused when the partitioner is made)."""
    try:
        cls = registry.get(name)
    except UnknownPluginError:
        return None
    settings = getattr(cls, "SETTINGS", None)
    if settings is not None and not (isinstance(settings, type) and issubclass(settings, PartitionerSettings)):
        raise TypeError(f"partitioner {name!r}: SETTINGS must be a PartitionerSettings dataclass, not {settings!r}")
    return settings


def make_partitioner(cfg: PartitionerConfig) -> Partitioner:
    """The partitioner ``cfg.type`` names, built from ``cfg``.

    Raises :class:`~h5flow._registry.UnknownPluginError` (listing the known types) for an unknown type
    and :class:`PartitionError` for parameters that do not fit it (``plane_size < 1``, unpaired mapped lists).
    """
    cls = registry.get(cfg.type)
    from_config = getattr(cls, "from_config", None)
    part = from_config(cfg) if callable(from_config) else cls()
    if not isinstance(part, Partitioner):
        raise TypeError(f"partitioner {cfg.type!r} built {type(part).__name__}, not a Partitioner")
    return part


__all__ = ["PartitionError", "Partitioner", "PartitionerSettings", "make_partitioner", "register", "registry",
           "settings_class"]
