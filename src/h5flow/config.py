"""Typed configuration: what the SENSEI-style XML front (:mod:`h5flow.xmlconfig`) produces.

Everything inside h5flow works on these dataclasses; XML is only one way to build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionerConfig:
    type: str = "block"  # block | planar | mapped | a registered partitioner's name
    plane_size: int = 1  # planar: blocks per round-robin chunk
    block_ids: list[int] | None = None  # mapped: the blocks listed ...
    block_owners: list[int] | None = None  # ... and the consumer rank of each
    params: dict[str, str] = field(default_factory=dict)  # a registered partitioner's own XML attributes


@dataclass
class TransportConfig:
    """One stream's transport. ``type``, ``filename``, ``enabled``, ``partitioner`` are every transport's;
    the fields from ``method`` to ``interface`` are the built-in transports' settings (their settings classes,
    e.g. :class:`h5flow.transports.hdf5.settings.Hdf5Settings`, copy them here); a registered transport's
    own settings object (its :class:`h5flow.transports.TransportSettings` dataclass) is ``settings``."""

    type: str = "hdf5"  # hdf5 | socket | adios2 | a registered transport's name
    filename: str = ""  # the stream's name; hdf5: staging directory is filename + ".h5flow"
    method: str = "stream"  # SENSEI's method; only streaming is supported
    collective: bool = False  # collective MPI-IO transfers (SENSEI: second method character 'c')
    layout: str = "n-1"  # hdf5: n-1 (one shared file per step) | n-n (one file per producer rank)
    driver: str = "mpio"  # hdf5: mpio | subfiling
    queue_limit: int = 0  # max unreleased steps staged; 0 = unlimited
    queue_policy: str = "block"  # block (producer waits) | discard (the new step is dropped)
    quota_bytes: int = 0  # max staged bytes of unreleased steps; 0 = unlimited
    keep: str = "released"  # released: delete a step once every consumer group released it | all
    heartbeat: float = 1.0  # producer heartbeat period (s); a producer is lost after 1.5x this without one
    poll_min: float = 0.0005  # consumer polling: first interval (s), doubled up to poll_max
    poll_max: float = 0.02
    group: str = "default"  # consumer group name (each group sees every step)
    engine: str = ""  # adios2: sst | bp5
    interface: str = ""  # socket: address, host or interface name the producers listen on ("*": all); "" = 127.0.0.1
    enabled: bool = True
    partitioner: PartitionerConfig = field(default_factory=PartitionerConfig)
    source: str = ""  # where it was defined ("file.xml:3"), for messages
    mapped_from: str = ""  # a legacy SENSEI transport this one stands in for ('adios1 method="FLEXPATH"'), else ""
    settings: Any = None  # a registered transport's own settings (its TransportSettings dataclass), else None


@dataclass
class AnalysisConfig:
    type: str = "histogram"
    mesh: str = "mesh"
    array: str = "data"
    association: str = "cell"  # cell | point
    bins: int = 10
    file: str | None = None  # histogram: write <file>_<mesh>_<array>_<step>.txt (SENSEI's format)
    enabled: bool = True
    params: dict[str, str] = field(default_factory=dict)  # further attributes of other analyses
    source: str = ""


@dataclass
class SenseiConfig:
    path: str = "<memory>"
    transports: list[TransportConfig] = field(default_factory=list)
    analyses: list[AnalysisConfig] = field(default_factory=list)

    def transport(self) -> TransportConfig:
        """The one enabled transport (producer ``<analysis type="hdf5">`` or ``<transport>``)."""
        enabled = [t for t in self.transports if t.enabled]
        if len(enabled) != 1:
            raise ValueError(f"{self.path}: expected exactly one enabled transport, found {len(enabled)}")
        return enabled[0]
