"""The adios2 transport's settings: its XML attributes (SENSEI's spellings included), checked, and its
cleanup of a finished run's announcement and stream files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from h5flow.config import TransportConfig
from h5flow.transports.plugin import QUEUE_ATTRIBUTES, TransportEntry, TransportSettings, WriterReader, read_group
from h5flow.xmlnode import XmlNode

_T = TypeVar("_T")
ENGINES = ("sst", "bp5")


@dataclass
class Adios2Settings(TransportSettings):
    """``<transport type="adios2">`` (docs/CONFIG.md); ``config.settings`` of its TransportConfig."""

    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = QUEUE_ATTRIBUTES | {"engine", "buffer_size", "buffer_mode"}

    engine: str = "sst"  # sst | bp5 ("" also means sst)
    queue_limit: int = 0  # max unreleased steps staged; 0 = unlimited
    queue_policy: str = "block"  # block (producer waits) | discard (the new step is dropped)
    group: str = "default"  # consumer group name (each group sees every step)
    poll_min: float = field(default=0.0005, init=False)  # consumer polling (s), doubled up to poll_max; not a setting
    poll_max: float = field(default=0.02, init=False)

    @classmethod
    def from_xml(cls, node: XmlNode) -> Adios2Settings:
        s = cls()
        engine = node.get("engine")
        if engine is not None and engine.lower() == "bp4":
            raise node.bad_value("engine", "BP4 is not offered; use bp5 (or sst for memory-to-memory streaming)")
        s.engine = node.choice("engine", s.engine, ENGINES)
        s.queue_limit = _either(node, "buffer_size", "queue_limit",
                                lambda n: node.integer(n, s.queue_limit, minimum=0), s.queue_limit)
        s.queue_policy = _either(node, "buffer_mode", "queue_policy",
                                 lambda n: node.choice(n, s.queue_policy, ("block", "discard")), s.queue_policy)
        read_group(node, s)
        return s


def _either(node: XmlNode, sensei: str, h5flow: str, read: Callable[[str], _T], default: _T) -> _T:
    """Read SENSEI's spelling ``sensei`` or h5flow's ``h5flow`` of one setting, refusing both at once."""
    if sensei in node.el.attrs and h5flow in node.el.attrs:
        raise node.error(f"both '{sensei}' and '{h5flow}' on {node.describe()}",
                         f"give one of them ({sensei} is SENSEI's name for h5flow's {h5flow})", attr=h5flow)
    if sensei in node.el.attrs:
        return read(sensei)
    if h5flow in node.el.attrs:
        return read(h5flow)
    return default


def _load() -> WriterReader:
    from h5flow.transports.adios2 import load

    return load()


def cleanup(config: TransportConfig) -> None:
    """An earlier run's announcement and stream files must not be read as this run's."""
    from h5flow.transports.adios2.stream import remove_run

    remove_run(config.filename)


ENTRY = TransportEntry(load=_load, settings=Adios2Settings, cleanup=cleanup)
