"""The adios2 transport's settings: its XML attributes (SENSEI's spellings included), checked, and its
cleanup of a finished run's announcement and stream files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from h5flow.settings import setting
from h5flow.transports.plugin import (TransportEntry, TransportSettings, WriterReader, group_setting,
                                      queue_limit_setting, queue_policy_setting)

if TYPE_CHECKING:
    from h5flow.config import TransportConfig

ENGINES = ("sst", "bp5")


@dataclass
class Adios2Settings(TransportSettings):
    """``<transport type="adios2">`` (docs/CONFIG.md); ``config.settings`` of its TransportConfig."""

    engine: str = setting("sst", "the ADIOS2 engine", choices=ENGINES,
                          accepted_doc="`sst`, `bp5` (any case); `BP4` is refused: use `bp5`",
                          refused={"bp4": "BP4 is not offered; use bp5 (or sst for memory-to-memory streaming)"})
    queue_limit: int = queue_limit_setting(
        "most unreleased steps staged at once, SST `QueueLimit` (SENSEI's `buffer_size`; give one spelling); "
        "0 = unlimited", aliases=("buffer_size",))
    queue_policy: str = queue_policy_setting(
        "what a full queue does, SST `QueueFullPolicy` (SENSEI's `buffer_mode`; give one spelling): the producer "
        "waits, or the new step is dropped", aliases=("buffer_mode",))
    group: str = group_setting("accepted for symmetry; ADIOS2 has no consumer groups here (one reader per stream)")
    poll_min: float = field(default=0.0005, init=False)  # consumer polling (s), doubled up to poll_max; not a setting
    poll_max: float = field(default=0.02, init=False)


def _load() -> WriterReader:
    from h5flow.transports.adios2 import load

    return load()


def cleanup(config: TransportConfig) -> None:
    """An earlier run's announcement and stream files must not be read as this run's."""
    from h5flow.transports.adios2.stream import remove_run

    remove_run(config.filename)


ENTRY = TransportEntry(load=_load, settings=Adios2Settings, cleanup=cleanup)
