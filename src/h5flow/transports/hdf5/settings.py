"""The hdf5 transport's settings: its XML attributes, checked, and its cleanup of a finished run's files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from h5flow.settings import Conflict, setting
from h5flow.transports.plugin import StreamSettings, TransportEntry, WriterReader
from h5flow.xmlnode import SIZE_UNITS_TEXT, XmlNode

if TYPE_CHECKING:
    from h5flow.config import TransportConfig

LAYOUTS = ("n-1", "n-n", "log")
MAP_READS = ("auto", "true", "false")
#: ``vol_stack``: the VOL connectors a producer's step files are written through, from the top down (native
#: below the last); "none": native alone
VOL_STACKS = ("none", "async", "cache", "cache,async", "async,cache")
DEFAULT_ASYNC_MAX_MEM = 512 * 2**20  # h5flow_async's own default (docs/ASYNC.md)
_INFO_VALUE = r"[^;{}=]*"  # a value inside a connector's info string (connectors/stack.py)
_SIZE_TEXT = SIZE_UNITS_TEXT.split(";")[0]  # without "0 = unlimited"
#: the layout when none is given and no shared-file setting asks for n-1 (docs/STREAM.md, "Layouts": why n-n)
DEFAULT_LAYOUT = "n-n"
_WHERE = "the stream's name; for hdf5 the steps are staged in <filename>.h5flow/"
_C_SYNC = ("the C library writes each step inside `h5flow_end_step` (as Python does without "
           "`MPI_THREAD_MULTIPLE`)")


@dataclass
class Hdf5Settings(StreamSettings):
    """``<transport type="hdf5">`` (docs/CONFIG.md); ``config.settings`` of its TransportConfig."""

    XML_EXTRA: ClassVar[frozenset[str]] = frozenset({"file_name"})
    XML_EXTRA_DOC: ClassVar[dict[str, str]] = {
        "file_name": "the stream's name, SENSEI's reader spelling of `filename`; give one of the two"}

    method: str = setting(
        "stream", "SENSEI's method: first character `s` = streaming, second `c` = collective transfers",
        pattern=r"[sS].*", accepted_doc="a value starting with `s`: `stream`, `s`, `sc`, ...",
        accepted="h5flow only streams (one staged file per step, read while the producer runs); SENSEI's default "
                 "non-streaming method, read after the writer finished, is not offered; accepted: a value starting "
                 "with 's': stream, s, sc (a second character 'c' asks for collective transfers)")
    collective: bool = setting(
        False, "collective MPI-IO transfers; a shared file only: implies `layout=\"n-1\"`", side="producer",
        default_doc="second character of `method` is `c`")
    # Left out (""): n-n, or n-1 when collective / method "sc" / driver "subfiling" ask for a shared file;
    # resolved in check(), so a built Hdf5Settings always names its layout.
    layout: str = setting(
        "", "`n-n`: one file per producer rank, serial HDF5; `n-1`: one shared file per step (collective MPI-IO "
            "open/close); `log`: one logical file per step through the h5flow_log connector, each rank appending "
            "to its own logs, no MPI-IO (docs/STREAM.md \"Layouts\" says why n-n is the default)",
        side="producer", choices=LAYOUTS,
        default_doc="`n-n`, or `n-1` when `collective=\"true\"`, `method=\"sc\"` or `driver=\"subfiling\"` is given",
        hint="n-n (the default): one file per producer rank, n-1: one shared file per step, log: one logical file "
             "per step written through the h5flow_log connector",
        c_refused={"log": "the C library writes the layouts n-n and n-1; layout=\"log\" needs the h5flow_log "
                          "connector, which only the Python producer drives: give n-n or n-1, or write from Python"})
    driver: str = setting(
        "mpio", "HDF5 file driver for the shared step file; `subfiling` implies `layout=\"n-1\"`", side="producer",
        choices=("mpio", "subfiling"),
        c_refused={"subfiling": "driver=\"subfiling\" is not offered by the C library; use driver=\"mpio\" or "
                                "leave the attribute out, or write subfiling from Python"})
    quota_bytes: int = setting(0, "most bytes of unreleased steps staged; 0 = unlimited", side="producer",
                               unit="bytes", xml="quota")
    keep: str = setting(
        "released", "`released`: delete a step once every consumer group released it; `all`: keep every step",
        choices=("released", "all"))
    raw_reads: bool = setting(
        True, "consumer, `layout=\"n-n\"`: read contiguous datasets with `pread` at the offsets the producer's "
              "HDF5 gave them (`rank-<r>.extents.json`, checked against the file) instead of opening each rank file "
              "through HDF5; `false`: every read through HDF5 (docs/STREAM.md \"Raw reads\")", side="consumer")
    read_threads: int = setting(
        2, "consumer, raw reads: a rank reads its blocks' rows with this many threads side by side (`pread` "
           "releases the GIL); `1`: one after the other (docs/STREAM.md \"Raw reads\")", side="consumer",
        minimum=1)
    map_reads: str = setting(
        "auto", "consumer, raw reads: blocks of 256 KiB and more are mapped from the rank file (private, "
                "copy-on-write: writable arrays that never change the file; populated inside the read; unmapped at "
                "release unless the analysis kept them) instead of copied out of the page cache. `auto`: where the "
                "stream lies on tmpfs or ramfs; `true`: on any local file system, never on a network or user-space "
                "one (NFS, Lustre, GPFS, CephFS, SMB, FUSE); `false`: always copy. An analysis that keeps arrays of "
                "more than two steps makes the reader copy from then on (a kept view of a mapping holds its whole "
                "rank file) (docs/STREAM.md \"Mapped reads\")", side="consumer", choices=MAP_READS,
        hint="auto (the default): map where the stream lies on tmpfs or ramfs; true: map on any local file system; "
             "false: always copy")
    async_write: bool = setting(
        True, "producer, layouts n-n and log (n-1 only on one rank): `end_step` copies the rank's rows and returns; "
              "its write thread writes and publishes the step while the simulation computes the next one (one step "
              "in flight; costs one step's payload of memory per rank; needs `MPI_THREAD_MULTIPLE` with more than "
              "one rank, else the step is written inside `end_step`). With `vol_stack` the connectors take the copy in "
              "`end_step` and the thread waits for the file to be on storage, then publishes it. `false`: written "
              "inside `end_step` (docs/STREAM.md \"Write-behind\")", side="producer", c=_C_SYNC)

    vol_stack: str = setting(
        "none", "producer, layout n-n: the VOL connectors each rank's step file is written through, top first, "
                "native below: `async` (h5flow_async: a write returns once its buffer is copied), `cache` "
                "(h5flow_cache: writes land in `cache_path` and migrate in the background), or both in either "
                "order. A step is published only once its file is closed and the connectors' queues for it have "
                "reached storage; a failure below fails the producer on every rank and publishes nothing "
                "(docs/STREAM.md \"Connector stack\")", side="producer", choices=VOL_STACKS,
        hint="none (the default): native HDF5; async: h5flow_async; cache: h5flow_cache; cache,async and "
             "async,cache: both, the first on top",
        c="the C library writes each step through the stack inside `h5flow_end_step` and waits for its close")
    async_max_mem: int = setting(
        DEFAULT_ASYNC_MAX_MEM, "producer, `vol_stack` with `async`: bytes of copied write buffers h5flow_async "
                               "queues per step file (its `max_mem`); past it a write waits", side="producer",
        unit="bytes", minimum=2**20, accepted=f"accepted: {_SIZE_TEXT}, at least 1MiB")
    cache_path: str = setting(
        "", "producer, `vol_stack` with `cache`: the node-local directory h5flow_cache stages writes in (its "
            "`path`; it must exist and be writable)", side="producer", pattern=_INFO_VALUE,
        accepted="a directory path without ';', '{', '}' or '='",
        accepted_doc="a directory without `;`, `{`, `}` or `=`",
        default_doc="chosen by h5flow_cache: `H5FLOW_CACHE_DIR`, else the first writable of `/dev/shm`, `$TMPDIR`, "
                    "`/var/tmp`, `/tmp` (docs/CACHE.md)")
    cache_capacity: int = setting(
        0, "producer, `vol_stack` with `cache`: bytes of cached writes not yet migrated per step file (its "
           "`capacity`); past it a write migrates older ones first. 0: h5flow_cache's default (half the cache "
           "directory's free space, at most 4 GiB)", side="producer", unit="bytes",
        accepted=f"accepted: {_SIZE_TEXT}; 0 = h5flow_cache's default")

    def check(self) -> None:
        super().check()
        if self.method[1:2].lower() == "c":
            self.collective = True  # SENSEI's "sc": collective transfers (from XML, a contradiction is refused)
        conflict = self.shared_only()
        if not self.layout:
            self.layout = "n-1" if conflict else DEFAULT_LAYOUT
        elif conflict and self.layout != "n-1":
            raise Conflict(*layout_conflict(self.layout, conflict), "layout")
        self._check_vol_stack()

    def _check_vol_stack(self) -> None:
        """``vol_stack`` writes n-n rank files only, and a connector's option needs its connector."""
        layers = self.vol_layers()
        if layers and self.layout != "n-n":
            raise Conflict(f'vol_stack="{self.vol_stack}" stacks connectors over the serial rank files of '
                           f'layout="n-n", but layout="{self.layout}" writes '
                           + ("one shared file through MPI-IO" if self.layout == "n-1"
                              else "through the h5flow_log connector"),
                           'give layout="n-n" (the default) with vol_stack, or drop vol_stack', "vol_stack", "layout")
        for name, layer, given in (("async_max_mem", "async", self.async_max_mem != DEFAULT_ASYNC_MAX_MEM),
                                   ("cache_path", "cache", bool(self.cache_path)),
                                   ("cache_capacity", "cache", bool(self.cache_capacity))):
            if given and layer not in layers:
                raise Conflict(f'{name} sets h5flow_{layer}, but vol_stack="{self.vol_stack}" does not stack it',
                               f'give vol_stack="{layer}" (or one of {", ".join(VOL_STACKS[3:])}), or drop {name}',
                               name, "vol_stack")

    def vol_layers(self) -> list[str]:
        """``vol_stack`` as its layers, top first (``[]`` for native alone)."""
        return [] if self.vol_stack == "none" else self.vol_stack.split(",")

    def connector_layers(self) -> list[Any]:
        """The stack of :func:`h5flow.connectors.stack.set_stack`, each layer with its options from these
        settings."""
        from h5flow.connectors.stack import Layer

        options = {"async": (("max_mem", str(self.async_max_mem)),),
                   "cache": tuple((k, v) for k, v in (("path", self.cache_path),
                                                      ("capacity", str(self.cache_capacity or ""))) if v)}
        return [Layer(kind, options[kind]) for kind in self.vol_layers()]

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
        values = cls.xml_values(node)
        method, collective = node.get("method"), node.get("collective")
        if method is not None and method[1:2].lower() == "c" and collective is not None and not values["collective"]:
            raise node.error(f'method="{method}" asks for collective transfers but collective="{collective}" refuses '
                             f"them on {node.describe()}", "drop one of the two, or make them agree",
                             attr="collective")
        settings: Hdf5Settings = cls.build_from_xml(node, values)
        return settings


def layout_conflict(layout: str, setting: str) -> tuple[str, str]:
    """Why ``setting`` (collective, method "sc", driver subfiling) cannot go with ``layout``, and what to do."""
    what = ("one file per producer rank, written independently" if layout == "n-n"
            else "per-rank logs through the h5flow_log connector, no MPI-IO")
    return (f'{setting} only acts on a shared file (layout="n-1"), but layout="{layout}" writes {what}, where it '
            f'would be ignored', f'give layout="n-1" (or leave layout out: {setting} then implies it), or drop '
            f'{setting} to keep layout="{layout}"')


def _load() -> WriterReader:
    from h5flow.transports.hdf5.reader import Hdf5Reader
    from h5flow.transports.hdf5.writer import Hdf5Writer

    return Hdf5Writer, Hdf5Reader


def cleanup(config: TransportConfig) -> None:
    """A stale stream of an earlier run must not be mistaken for this one (refused while a producer holds it)."""
    from h5flow.transports.hdf5.staging import Staging

    Staging(config.filename).clear()


ENTRY = TransportEntry(load=_load, settings=Hdf5Settings, cleanup=cleanup)
