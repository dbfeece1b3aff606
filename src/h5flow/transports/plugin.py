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

import math
import re
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from h5flow.config import TransportConfig
from h5flow.transports.base import Reader, Writer
from h5flow.xmlnode import XmlNode

WriterReader = tuple[type[Writer], type[Reader]]


@dataclass
class TransportSettings:
    """Base of a transport's own settings: a dataclass whose fields are its XML attributes.

    The default :meth:`from_xml` reads each field from the attribute of the same name by the field's type
    (``bool``, ``int``, ``float``, ``str``), with limits from the field's metadata
    (``field(default=4, metadata={"minimum": 1, "maximum": 64})``; ``{"choices": ("a", "b")}`` for a string),
    then builds the dataclass, whose ``__post_init__`` may refuse a combination by raising ``ValueError``
    (the message becomes a :class:`~h5flow.xmlconfig.ConfigError` naming the element's line).
    A transport with other spellings overrides :meth:`from_xml` and lists its attributes in ``XML_ATTRIBUTES``.
    """

    #: the XML attributes it reads, besides ``type``, ``enabled`` and ``filename``; ``None``: its field names
    XML_ATTRIBUTES: ClassVar[frozenset[str] | None] = None
    #: attribute → why it is refused (shown in the error when the attribute is given)
    XML_NOTES: ClassVar[dict[str, str]] = {}

    @classmethod
    def xml_attributes(cls) -> frozenset[str]:
        if cls.XML_ATTRIBUTES is not None:
            return cls.XML_ATTRIBUTES
        return frozenset(f.name for f in fields(cls) if f.init)

    @classmethod
    def read_filename(cls, node: XmlNode) -> str:
        """The stream's name (``filename``, required)."""
        return node.require("filename", "give filename=\"...\" (the stream's name)")

    @classmethod
    def from_xml(cls, node: XmlNode) -> TransportSettings:
        """Read and validate this transport's attributes of ``node`` (a ``<transport>``/``<analysis>``)."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if not f.init or f.name not in node.el.attrs:
                continue
            kind, meta = hints.get(f.name), f.metadata
            default = f.default if f.default is not MISSING else None
            if kind is bool:
                values[f.name] = node.boolean(f.name, bool(default))
            elif kind is int:
                value = node.integer(f.name, 0, minimum=int(meta.get("minimum", 0)))
                if value > meta.get("maximum", math.inf):
                    raise node.bad_value(f.name, f"accepted: an integer from {meta.get('minimum', 0)} to "
                                                 f"{meta['maximum']}")
                values[f.name] = value
            elif kind is float:
                values[f.name] = node.number(f.name, 0.0, minimum=float(meta.get("minimum", -math.inf)),
                                             maximum=float(meta.get("maximum", math.inf)))
            elif kind is str:
                choices = meta.get("choices")
                values[f.name] = (node.choice(f.name, "", tuple(choices)) if choices
                                  else node.string(f.name, ""))
            else:
                raise TypeError(f"{cls.__name__}.{f.name}: a settings field read from XML must be bool, int, float "
                                f"or str (got {kind!r}); override from_xml to read it")
        try:
            return cls(**values)
        except (TypeError, ValueError) as e:
            raise node.error(f"settings refused on {node.describe()}: {e}",
                             f"accepted attributes: {', '.join(sorted(cls.xml_attributes()))}") from None

    @classmethod
    def from_keywords(cls, settings: dict[str, Any]) -> TransportSettings:
        """Build from keyword settings (:func:`h5flow.open`, :meth:`TransportConfig.of`); a name that is not
        one of :meth:`keywords` raises ``TypeError`` listing the accepted ones."""
        accepted = cls.keywords()
        bad = sorted(set(settings) - accepted)
        if bad:
            raise TypeError(f"unknown transport setting(s) {bad}; accepted: "
                            f"{', '.join(sorted(accepted)) or 'none'} ({cls.__name__})")
        return cls(**settings)

    @classmethod
    def keywords(cls) -> frozenset[str]:
        """The keyword settings :meth:`from_keywords` takes (its init fields)."""
        return frozenset(f.name for f in fields(cls) if f.init)

    def apply(self, config: TransportConfig) -> None:
        """Store these settings in ``config`` (the transport's writer and reader read ``config.settings``)."""
        config.settings = self


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


# -- readers the built-in transports share ----------------------------------------------------------

#: heartbeat period: below 0.05 s file time stamps and scheduling make a live producer look lost
HEARTBEAT_RANGE = (0.05, 3600.0)
POLL_RANGE = (1e-5, 60.0)
QUEUE_ATTRIBUTES = frozenset({"queue_limit", "queue_policy", "group"})
POLLING_ATTRIBUTES = frozenset({"heartbeat", "poll_min", "poll_max"})
LIVENESS_ATTRIBUTES = frozenset({"dead_consumer"})
#: what a producer blocked on a consumer group that stopped beating does (``dead_consumer``): wait for it (saying
#: so: a restarted group resumes), drop the group (its steps are no longer kept; the producer fails at its end,
#: naming them), or stop the stream with an error on every producer rank
DEAD_CONSUMER = ("wait", "drop", "error")


def check_dead_consumer(value: str) -> str:
    if value not in DEAD_CONSUMER:
        raise ValueError(f"dead_consumer={value!r}: accepted: {', '.join(DEAD_CONSUMER)} (what a producer blocked on a "
                         "consumer group that stopped beating does)")
    return value


def read_liveness(node: XmlNode, settings: Any) -> None:
    """``dead_consumer`` into ``settings``."""
    settings.dead_consumer = node.choice(
        "dead_consumer", settings.dead_consumer, DEAD_CONSUMER,
        hint="wait (the default): keep waiting for a consumer group that stopped beating, saying so (restarting it "
             "resumes); drop: go on without it (the producer fails at its end, naming the steps it never took); "
             "error: stop the stream")


def read_queue(node: XmlNode, settings: Any) -> None:
    """``queue_limit``, ``queue_policy`` and ``group`` into ``settings`` (fields of those names)."""
    settings.queue_limit = node.integer("queue_limit", settings.queue_limit, minimum=0)
    settings.queue_policy = node.choice("queue_policy", settings.queue_policy, ("block", "discard"))
    read_group(node, settings)


def read_group(node: XmlNode, settings: Any) -> None:
    group = node.get("group")
    if group is not None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", group):
            raise node.bad_value("group", "a consumer group name is letters, digits, '-' and '_' only")
        settings.group = group


def read_polling(node: XmlNode, settings: Any) -> None:
    """``heartbeat``, ``poll_min`` and ``poll_max`` (seconds) into ``settings``."""
    settings.heartbeat = node.seconds("heartbeat", settings.heartbeat, minimum=HEARTBEAT_RANGE[0],
                                      maximum=HEARTBEAT_RANGE[1])
    settings.poll_min = node.seconds("poll_min", settings.poll_min, minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])
    settings.poll_max = node.seconds("poll_max", settings.poll_max, minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])
    if settings.poll_min > settings.poll_max:
        attr = "poll_min" if "poll_min" in node.el.attrs else "poll_max"
        raise node.error(f"poll_min {settings.poll_min:g} s is larger than poll_max {settings.poll_max:g} s on "
                         f"{node.describe()}", "give poll_min <= poll_max (defaults 0.0005 and 0.02)", attr=attr)
