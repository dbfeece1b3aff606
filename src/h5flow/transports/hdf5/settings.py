"""The hdf5 transport's settings: its XML attributes, checked, and its cleanup of a finished run's files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from h5flow.config import TransportConfig
from h5flow.transports.plugin import (LIVENESS_ATTRIBUTES, POLLING_ATTRIBUTES, QUEUE_ATTRIBUTES, TransportEntry,
                                      TransportSettings, WriterReader, check_dead_consumer, read_liveness,
                                      read_polling, read_queue)
from h5flow.xmlnode import XmlNode

LAYOUTS = ("n-1", "n-n", "log")
MAP_READS = ("auto", "true", "false")
#: the layout when none is given and no shared-file setting asks for n-1 (docs/STREAM.md, "Layouts": why n-n)
DEFAULT_LAYOUT = "n-n"
_WHERE = "the stream's name; for hdf5 the steps are staged in <filename>.h5flow/"


@dataclass
class Hdf5Settings(TransportSettings):
    """``<transport type="hdf5">`` (docs/CONFIG.md); ``config.settings`` of its TransportConfig."""

    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = QUEUE_ATTRIBUTES | POLLING_ATTRIBUTES | LIVENESS_ATTRIBUTES | {
        "file_name", "method", "collective", "layout", "driver", "quota", "keep", "raw_reads", "async_write",
        "read_threads", "map_reads"}

    method: str = "stream"  # SENSEI's method; only streaming is supported
    collective: bool = False  # collective MPI-IO transfers (SENSEI: second method character 'c'); n-1 only
    # n-n (default): one native file per producer rank | n-1: one shared native file per step (collective
    # MPI-IO open/close) | log: one logical file per step through the h5flow_log connector (per-rank logs, no
    # MPI-IO). Left out (""): n-n, or n-1 when collective / method "sc" / driver "subfiling" ask for a shared
    # file (docs/CONFIG.md); resolved in __post_init__, so a built Hdf5Settings always names its layout.
    layout: str = ""
    driver: str = "mpio"  # mpio | subfiling; subfiling is n-1 only
    quota_bytes: int = 0  # max staged bytes of unreleased steps; 0 = unlimited
    keep: str = "released"  # released: delete a step once every consumer group released it | all
    # consumer, layout n-n: read contiguous datasets with pread at the offsets the producer's HDF5 gave them
    # (rank-<r>.extents.json, checked against the file) instead of opening each rank file through HDF5
    raw_reads: bool = True
    # consumer, raw reads: a rank reads the rank files of its blocks with this many threads at once (the copies
    # out of the page cache run side by side where the node has the cores; 1: one after the other)
    read_threads: int = 2
    # consumer, raw reads: blocks of 256 KiB and more are mapped from the rank file (private, copy-on-write;
    # no copy out of the page cache) instead of read into buffers. auto: where the stream lies on tmpfs or
    # ramfs | true: on any local file system (never on network ones: NFS, Lustre, GPFS, ...) | false
    # (docs/STREAM.md "Mapped reads")
    map_reads: str = "auto"
    # producer: end_step copies the rank's blocks, decides and returns; a write thread writes and publishes the
    # step while the simulation computes the next one (at most one step in flight; docs/STREAM.md "Write-behind")
    async_write: bool = True
    queue_limit: int = 0  # max unreleased steps staged; 0 = unlimited
    queue_policy: str = "block"  # block (producer waits) | discard (the new step is dropped)
    group: str = "default"  # consumer group name (each group sees every step)
    # heartbeat period (s) of producer ranks and consumer groups; one is lost after 1.5x this without one
    heartbeat: float = 1.0
    # producer blocked on a consumer group that stopped beating: wait (say so) | drop (go on without it) | error
    dead_consumer: str = "wait"
    poll_min: float = 0.0005  # consumer polling: first interval (s), doubled up to poll_max
    poll_max: float = 0.02

    def __post_init__(self) -> None:
        check_dead_consumer(self.dead_consumer)
        if self.map_reads not in MAP_READS:
            raise ValueError(f"map_reads={self.map_reads!r}: accepted: {', '.join(MAP_READS)}")
        if self.method[1:2].lower() == "c":
            self.collective = True  # SENSEI's "sc": collective transfers (from XML, a contradiction is refused)
        conflict = self.shared_only()
        if not self.layout:
            self.layout = "n-1" if conflict else DEFAULT_LAYOUT
        elif conflict and self.layout != "n-1":
            raise ValueError("; ".join(layout_conflict(self.layout, conflict)))

    def maps_reads(self, staging: Path) -> bool:
        """Whether a consumer of the stream staged in ``staging`` maps its raw reads (``map_reads``)."""
        from h5flow.transports import _mapped

        if self.map_reads == "auto":
            return _mapped.memory_fs(staging) is not None
        return self.map_reads == "true" and _mapped.local_fs(staging)  # never on NFS, Lustre, GPFS, ...

    def shared_only(self) -> str:
        """The setting that only acts on a shared file (layout n-1), as written in XML; "" when none is given."""
        if self.driver == "subfiling":
            return 'driver="subfiling"'
        if self.method[1:2].lower() == "c":
            return f'method="{self.method}"'
        return 'collective="true"' if self.collective else ""

    @classmethod
    def read_filename(cls, node: XmlNode) -> str:
        """``filename`` (SENSEI's writer) or ``file_name`` (SENSEI's reader), not both."""
        filename, file_name = node.get("filename"), node.get("file_name")
        if filename is not None and file_name is not None:
            raise node.error(f"both 'filename' and 'file_name' on {node.describe()}",
                             "give one of them (SENSEI's reader spells it file_name, its writer filename)",
                             attr="file_name")
        return node.require("file_name" if file_name is not None else "filename", f"give filename=\"...\" ({_WHERE})")

    @classmethod
    def from_xml(cls, node: XmlNode) -> Hdf5Settings:
        s = cls()
        _method(node, s)
        s.driver = node.choice("driver", s.driver, ("mpio", "subfiling"))
        conflict = s.shared_only()
        given = node.get("layout")
        s.layout = node.choice("layout", "n-1" if conflict else DEFAULT_LAYOUT, LAYOUTS,
                               hint="n-n (the default): one file per producer rank, n-1: one shared file per step, "
                                    "log: one logical file per step written through the h5flow_log connector")
        if given is not None and conflict and s.layout != "n-1":
            what, hint = layout_conflict(s.layout, conflict)
            raise node.error(f"{what} (on {node.describe()})", hint, attr="layout")
        s.quota_bytes = node.nbytes("quota", s.quota_bytes)
        s.keep = node.choice("keep", s.keep, ("released", "all"))
        s.raw_reads = node.boolean("raw_reads", s.raw_reads)
        s.read_threads = node.integer("read_threads", s.read_threads, minimum=1)
        s.map_reads = node.choice("map_reads", s.map_reads, MAP_READS,
                                  hint="auto (the default): map where the stream lies on tmpfs or ramfs; true: "
                                       "map on any local file system; false: always copy")
        s.async_write = node.boolean("async_write", s.async_write)
        read_queue(node, s)
        read_polling(node, s)
        read_liveness(node, s)
        return s


def layout_conflict(layout: str, setting: str) -> tuple[str, str]:
    """Why ``setting`` (collective, method "sc", driver subfiling) cannot go with ``layout``, and what to do."""
    what = ("one file per producer rank, written independently" if layout == "n-n"
            else "per-rank logs through the h5flow_log connector, no MPI-IO")
    return (f'{setting} only acts on a shared file (layout="n-1"), but layout="{layout}" writes {what}, where it '
            f'would be ignored', f'give layout="n-1" (or leave layout out: {setting} then implies it), or drop '
            f'{setting} to keep layout="{layout}"')


def _method(node: XmlNode, s: Hdf5Settings) -> None:
    """SENSEI's ``method``: first character 's' = streaming (required), second 'c' = collective transfers."""
    method = node.get("method")
    from_method = False
    if method is not None:
        if not method or method[0].lower() != "s":
            raise node.bad_value(
                "method", "h5flow only streams (one staged file per step, read while the producer runs); SENSEI's "
                          "default non-streaming method, read after the writer finished, is not offered; "
                          "accepted: a value starting with 's': stream, s, sc (a second character 'c' asks for "
                          "collective transfers)")
        s.method = method
        from_method = len(method) > 1 and method[1].lower() == "c"
    collective = node.get("collective")
    s.collective = node.boolean("collective", from_method)
    if from_method and collective is not None and not s.collective:
        raise node.error(f'method="{method}" asks for collective transfers but collective="{collective}" refuses '
                         f"them on {node.describe()}", "drop one of the two, or make them agree", attr="collective")


def _load() -> WriterReader:
    from h5flow.transports.hdf5.reader import Hdf5Reader
    from h5flow.transports.hdf5.writer import Hdf5Writer

    return Hdf5Writer, Hdf5Reader


def cleanup(config: TransportConfig) -> None:
    """A stale stream of an earlier run must not be mistaken for this one (refused while a producer holds it)."""
    from h5flow.transports.hdf5.staging import Staging

    Staging(config.filename).clear()


ENTRY = TransportEntry(load=_load, settings=Hdf5Settings, cleanup=cleanup)
