"""What a transport registers: its writer and reader, its own settings, and its cleanup of stale state.

ADIOS2's engine factory, one entry per engine with its own parameters, is the model. A transport's
:class:`TransportEntry` carries

* ``load()`` → ``(writer_class, reader_class)`` (called on first use, so optional imports stay lazy);
* ``settings``: a :class:`TransportSettings` dataclass holding the transport's own settings, which reads
  and validates its XML attributes (:meth:`TransportSettings.from_xml`) and keyword settings
  (:meth:`TransportSettings.from_keywords`) and stores itself in the :class:`~h5flow.config.TransportConfig`
  (:meth:`TransportSettings.apply`: ``config.settings`` by default);
* ``cleanup(config)``: removes what an earlier, finished run of the same stream left behind (``h5flow run``
  calls it before launching the producers), or ``None``.

Only what every transport has is a field of :class:`~h5flow.config.TransportConfig`: ``type``,
``filename``, ``enabled``, ``partitioner`` (read by :mod:`h5flow.xmlconfig` itself), ``source``,
``mapped_from`` and ``settings``; everything else (the built-in transports' ``layout``, ``queue_limit``,
``heartbeat``, ``engine``, ...) is a field of the transport's settings class, read as ``config.settings.x``
(``self.settings`` in a :class:`~h5flow.transports.base.Writer`/``Reader``) and given as keywords to
:func:`h5flow.open` and :meth:`~h5flow.config.TransportConfig.of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from h5flow.settings import Conflict, Settings, check_poll, setting
from h5flow.transports.base import Reader, Writer
from h5flow.xmlnode import XmlNode

if TYPE_CHECKING:
    from h5flow.config import TransportConfig

WriterReader = tuple[type[Writer], type[Reader]]

__all__ = ["Conflict", "StreamSettings", "TransportEntry", "TransportSettings", "WriterReader", "as_entry", "setting"]


@dataclass
class TransportSettings(Settings):
    """Base of a transport's own settings: a dataclass whose fields are its XML attributes and keywords.

    Each field is one declared setting (:func:`h5flow.settings.setting`, or ``field(default=4,
    metadata={"minimum": 1, "maximum": 64})``; ``{"choices": ("a", "b")}`` for a string): keywords and XML
    attributes are parsed and checked by the field's type and limits (:mod:`h5flow.settings`), then the
    dataclass's ``check()`` (or ``__post_init__``) may refuse a combination by raising ``ValueError``
    (:class:`~h5flow.settings.Conflict` to name the attributes; from XML the message names the element's line).
    A transport with other spellings overrides :meth:`from_xml`.
    """

    WHAT: ClassVar[str] = "transport setting"
    #: the XML attributes it reads, besides ``type``, ``enabled`` and ``filename``; ``None``: its declared ones
    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = None

    @classmethod
    def xml_attributes(cls) -> frozenset[str]:
        if cls.XML_ATTRIBUTES is not None:
            return cls.XML_ATTRIBUTES
        return super().xml_attributes()

    @classmethod
    def read_filename(cls, node: XmlNode) -> str:
        """The stream's name (``filename``, required)."""
        return node.require("filename", "give filename=\"...\" (the stream's name)")

    def apply(self, config: TransportConfig) -> None:
        """Store these settings in ``config`` (the transport's writer and reader read ``config.settings``)."""
        config.settings = self


# -- settings the built-in transports share, each declared once ----------------------------------------

#: heartbeat period: below 0.05 s file time stamps and scheduling make a live producer look lost
HEARTBEAT_RANGE = (0.05, 3600.0)
POLL_RANGE = (1e-5, 60.0)
#: what a producer blocked on a consumer group that stopped beating does (``dead_consumer``): wait for it (saying
#: so: a restarted group resumes), drop the group (its steps are no longer kept; the producer fails at its end,
#: naming them), or stop the stream with an error on every producer rank
DEAD_CONSUMER = ("wait", "drop", "error")


def queue_limit_setting(doc: str = "most unreleased steps staged at once; 0 = unlimited", **more: Any) -> Any:
    return setting(0, doc, side="producer", minimum=0, **more)


def queue_policy_setting(doc: str = "what a full queue does: the producer waits, or the new step is dropped",
                         **more: Any) -> Any:
    return setting("block", doc, side="producer", choices=("block", "discard"), **more)


def group_setting(doc: str = "consumer group name; each group sees every step, and has one live consumer at a time "
                             "(a second one is refused: give each analysis its own group)") -> Any:
    return setting("default", doc, side="consumer", pattern=r"[A-Za-z0-9_-]+",
                   accepted="a consumer group name is letters, digits, '-' and '_' only",
                   accepted_doc="letters, digits, `-`, `_`")


@dataclass
class StreamSettings(TransportSettings):
    """What the hdf5 and socket transports share: admission (queue), consumer groups, heartbeats, polling."""

    queue_limit: int = queue_limit_setting()
    queue_policy: str = queue_policy_setting()
    group: str = group_setting()
    heartbeat: float = setting(
        1.0, "seconds between heartbeats of producer ranks and consumer groups; a producer rank is reported lost "
             "after 1.5× this without one, so a crash is an ERROR within 2×; a consumer group has stopped beating "
             "after 1.5×", unit="s", minimum=HEARTBEAT_RANGE[0], maximum=HEARTBEAT_RANGE[1])
    dead_consumer: str = setting(
        "wait", "what a producer blocked on a consumer group that stopped beating does: wait for it (saying so; a "
                "restarted consumer resumes), drop the group (the producer fails at its end naming the steps the "
                "group never took), or stop the stream with an error", side="producer", choices=DEAD_CONSUMER,
        hint="wait (the default): keep waiting for a consumer group that stopped beating, saying so (restarting it "
             "resumes); drop: go on without it (the producer fails at its end, naming the steps it never took); "
             "error: stop the stream")
    poll_min: float = setting(0.0005, "polling (a consumer waiting for a step, a producer waiting for room): "
                                      "first wait in seconds, doubled up to `poll_max`", unit="s", minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])
    poll_max: float = setting(0.02, "polling: longest wait in seconds", unit="s",
                              minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])

    def check(self) -> None:
        check_poll(self)


@dataclass(frozen=True)
class TransportEntry:
    """One transport in :data:`h5flow.transports.registry`."""

    load: Callable[[], WriterReader]
    settings: type[TransportSettings] = TransportSettings
    cleanup: Callable[[TransportConfig], None] | None = None

    def classes(self) -> WriterReader:
        writer, reader = self.load()
        for cls, base in ((writer, Writer), (reader, Reader)):
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"a transport's load() must return (Writer subclass, Reader subclass); got {cls!r} "
                                f"where a {base.__name__} subclass belongs")
        return writer, reader


def as_entry(name: str, obj: Any) -> TransportEntry:
    """What a registry name or entry point gives, as a :class:`TransportEntry`: an entry, a
    ``(writer, reader)`` pair, or a function returning one of these."""
    if callable(obj) and not isinstance(obj, (TransportEntry, tuple, type)):
        obj = obj()
    if isinstance(obj, TransportEntry):
        return obj
    if isinstance(obj, tuple) and len(obj) == 2:
        pair = obj
        return TransportEntry(load=lambda: pair)
    raise TypeError(f"transport {name!r} is registered as {obj!r}; register a TransportEntry, a (writer, reader) "
                    "pair of classes, or a function returning one of them")
