"""One declaration per setting: the base of every settings dataclass (transports, partitioners, analyses).

A setting is a dataclass field declared once with :func:`setting` (or, for plugins written before it, a plain
``field(metadata={"minimum": .., "maximum": .., "choices": (..)})``): its type (the field's annotation), range
or choices, unit, default, side (producer, consumer or both) and documentation. From that one declaration

* keyword settings (``h5flow.open(..., queue_limit=2)``, ``Hdf5Settings(raw_reads="false")``) are parsed and
  checked when the dataclass is built (:meth:`Settings.__post_init__`): strings such as ``"false"`` or ``"2"``
  are parsed by the field's type, never taken as truthy, and a value out of range raises ``ValueError`` naming
  the setting and what it accepts;
* XML attributes are read by the same rule (:meth:`Settings.from_xml`), the message being
  ``<file>:<line>: bad value 'x' for attribute 'a' on <transport type="t">; <the same accepted text>``;
* the C producer library's table (``native/lib/config_table.h``) and the tables of docs/CONFIG.md are
  generated (:mod:`h5flow.settings_gen`), and tests check that the checked-in files match.

A combination of settings that cannot go together is refused in ``check()`` (a method of the settings class,
run after every field was parsed) by raising :class:`Conflict`.
"""

from __future__ import annotations

import math
import numbers
import re
import typing
from dataclasses import MISSING, dataclass, field, fields
from fractions import Fraction
from typing import Any, ClassVar

from h5flow.xmlnode import SIZE_UNITS, SIZE_UNITS_TEXT, XmlNode

__all__ = ["Conflict", "Declaration", "Settings", "declarations", "free", "setting"]

SIDES = ("producer", "consumer", "both")
_INTEGER = re.compile(r"[+]?[0-9]+")
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)")
_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}
#: the largest integer a setting takes (the C library stores them in 64 bits)
INT_MAX = 2**62


class Conflict(ValueError):
    """Settings that cannot go together: ``what`` is wrong, ``hint`` says what to do, ``names`` are the
    fields involved (the XML error points at the first one given)."""

    def __init__(self, what: str, hint: str, *names: str) -> None:
        super().__init__(f"{what}; {hint}")
        self.what, self.hint, self.names = what, hint, names


class BadValue(ValueError):
    """One setting's value refused: ``hint`` is the accepted text shared by keywords, XML and C."""

    def __init__(self, name: str, value: Any, hint: str) -> None:
        super().__init__(f"{name}={value!r}: {hint}")
        self.name, self.value, self.hint = name, value, hint


def setting(default: Any, doc: str = "", *, side: str = "both", minimum: float | None = None,
            maximum: float | None = None, choices: tuple[str, ...] | None = None, unit: str = "",
            pattern: str = "", accepted: str = "", accepted_doc: str = "", hint: str = "", xml: str = "",
            aliases: tuple[str, ...] = (), refused: dict[str, str] | None = None, default_doc: str = "",
            c: str = "", c_refused: dict[str, str] | None = None) -> Any:
    """Declare one setting as a dataclass field (its annotation gives the type: bool, int, float, str).

    ``unit``: ``"s"`` (seconds) or ``"bytes"`` (a size, ``512MiB``); ``side``: which side of a stream reads it;
    ``pattern`` (a regular expression a string must match) with ``accepted`` (the text saying so) and
    ``accepted_doc`` (the same for the docs table); ``hint``: said before the choices of a closed set;
    ``xml``: the attribute's name when it is not the field's; ``aliases``: other accepted attribute names (one
    at a time); ``refused``: values refused with a reason of their own; ``default_doc``: the default as the docs
    say it; ``c``: what the C producer library does with it when it is more than "uses it"; ``c_refused``: values
    the C library refuses, with the reason.
    """
    if side not in SIDES:
        raise ValueError(f"side={side!r}: accepted: {', '.join(SIDES)}")
    meta: dict[str, Any] = {"doc": doc, "side": side, "unit": unit, "pattern": pattern, "accepted": accepted,
                            "accepted_doc": accepted_doc, "hint": hint, "xml": xml, "aliases": aliases,
                            "refused": refused or {}, "default_doc": default_doc, "c": c, "c_refused": c_refused or {}}
    for key, value in (("minimum", minimum), ("maximum", maximum), ("choices", choices)):
        if value is not None:
            meta[key] = value
    return field(default=default, metadata=meta)


def free(default_factory: Any, doc: str = "") -> Any:
    """A field that is not a declared setting: the settings class reads it (``from_xml``) and checks it
    (``check()``) itself, e.g. a list given as child elements."""
    return field(default_factory=default_factory, metadata={"free": True, "doc": doc})


@dataclass(frozen=True)
class Declaration:
    """What a settings field declares, resolved: how a value of it is parsed, checked and documented."""

    name: str  # the field
    kind: str  # bool | int | bytes | seconds | float | choice | pattern | string
    default: Any
    xml: str  # the XML attribute
    aliases: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str = ""
    side: str = "both"
    doc: str = ""
    refused: tuple[tuple[str, str], ...] = ()
    c_refused: tuple[tuple[str, str], ...] = ()
    c: str = ""
    default_doc: str = ""
    hint_text: str = ""
    accepted_text: str = ""
    accepted_doc_text: str = ""

    @property
    def accepted(self) -> str:
        """What the setting accepts, as every error message says it (keywords, XML and the C library)."""
        if self.kind == "bool":
            return "accepted: 0, 1, true, false"
        if self.kind == "int":
            if self.maximum is None:
                return f"accepted: an integer >= {self.minimum:g}"
            return f"accepted: an integer from {self.minimum:g} to {self.maximum:g}"
        if self.kind == "bytes":  # a size whose 0 is not "unlimited" says what it is instead (``accepted``)
            return self.accepted_text or f"accepted: {SIZE_UNITS_TEXT}"
        if self.kind in ("seconds", "float"):
            what = "a number of seconds" if self.kind == "seconds" else "a number"
            return f"accepted: {what} from {self.minimum:g} to {self.maximum:g}"
        if self.kind == "choice":
            return f"{self.hint_text}{'; ' if self.hint_text else ''}accepted: {', '.join(self.choices)}"
        if self.kind == "pattern":
            return self.accepted_text
        return "give a non-empty value or leave the attribute out"

    @property
    def accepted_doc(self) -> str:
        """What the setting accepts, as the docs table says it."""
        if self.accepted_doc_text:
            return self.accepted_doc_text
        if self.kind == "bool":
            return "boolean"
        if self.kind == "int":
            if self.maximum is None:
                return f"integer ≥ {self.minimum:g}"
            return f"integer, {self.minimum:g} to {self.maximum:g}"
        if self.kind == "bytes":
            return "size, e.g. `512MiB`, `2GiB`, `100MB`"
        if self.kind in ("seconds", "float"):
            return f"{'seconds' if self.kind == 'seconds' else 'number'}, {self.minimum:g} to {self.maximum:g}"
        if self.kind == "choice":
            return ", ".join(f"`{c}`" for c in self.choices)
        return "a non-empty string"

    def parse(self, value: Any) -> Any:
        """``value`` (a keyword's value or an XML attribute's text) as the field's type, checked; raises
        :class:`BadValue` with :attr:`accepted` otherwise."""
        text = value.strip() if isinstance(value, str) else None
        if text is not None and text.lower() in dict(self.refused):
            raise BadValue(self.name, value, dict(self.refused)[text.lower()])
        try:
            parsed = self._convert(value, text)
        except (ValueError, TypeError, OverflowError, ZeroDivisionError):
            parsed = None
        if parsed is None:
            raise BadValue(self.name, value, self.accepted)
        return parsed

    def _convert(self, value: Any, text: str | None) -> Any:
        kind = self.kind
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, numbers.Integral) and int(value) in (0, 1):
                return bool(value)
            return _BOOLEANS.get(text.lower()) if text is not None else None
        if kind in ("int", "bytes"):
            if isinstance(value, bool):
                return None
            if isinstance(value, numbers.Integral):
                number = int(value)
            elif text is None:
                return None
            elif kind == "int":
                number = int(text) if _INTEGER.fullmatch(text) else -1
            else:
                m = _SIZE.fullmatch(text)
                if m is None or m.group(2).lower() not in SIZE_UNITS:
                    return None
                number = int(Fraction(m.group(1)) * SIZE_UNITS[m.group(2).lower()])
            low = self.minimum if self.minimum is not None else 0
            high = self.maximum if self.maximum is not None else INT_MAX
            return number if low <= number <= high else None
        if kind in ("seconds", "float"):
            if isinstance(value, bool):
                return None
            if isinstance(value, numbers.Real):
                number = float(value)
            elif text is not None:
                number = float(text)
            else:
                return None
            low = self.minimum if self.minimum is not None else -math.inf
            high = self.maximum if self.maximum is not None else math.inf
            return number if math.isfinite(number) and low <= number <= high else None
        if isinstance(value, bool) and kind == "choice" and str(value).lower() in self.choices:
            return str(value).lower()  # map_reads=False
        if text is None:
            return None
        if kind == "choice":
            return text.lower() if text.lower() in self.choices else None
        if not text:
            return None
        if kind == "pattern":
            return text if re.fullmatch(self.pattern, text) else None
        return text


def declarations(cls: type) -> list[Declaration]:
    """The declarations of the settings dataclass ``cls``, in field order (the init fields only)."""
    cached = cls.__dict__.get("_declarations")
    if cached is not None:
        return list(cached)
    hints = typing.get_type_hints(cls)
    found = []
    for f in fields(cls):
        if not f.init or f.metadata.get("free"):
            continue  # "free": a field the class reads and checks itself (a mapped partitioner's lists)
        meta, kind_type = f.metadata, hints.get(f.name)
        optional = typing.get_args(kind_type)
        if len(optional) == 2 and type(None) in optional:  # str | None: None is the default, "not given"
            kind_type = next(t for t in optional if t is not type(None))
        unit = meta.get("unit", "")
        if kind_type is bool:
            kind = "bool"
        elif kind_type is int:
            kind = "bytes" if unit == "bytes" else "int"
        elif kind_type is float:
            kind = "seconds" if unit == "s" else "float"
        elif kind_type is str:
            kind = "choice" if meta.get("choices") else "pattern" if meta.get("pattern") else "string"
        else:
            continue  # not a setting it can declare (a list, a dict): the class reads and checks it itself
        minimum = meta.get("minimum", 0 if kind in ("int", "bytes") else None)
        if kind in ("seconds", "float"):
            minimum = -math.inf if minimum is None else minimum
        maximum = meta.get("maximum", math.inf if kind in ("seconds", "float") else None)
        found.append(Declaration(
            name=f.name, kind=kind, default=f.default if f.default is not MISSING else None,
            xml=meta.get("xml") or f.name, aliases=tuple(meta.get("aliases", ())), minimum=minimum, maximum=maximum,
            choices=tuple(meta.get("choices") or ()), pattern=meta.get("pattern", ""), side=meta.get("side", "both"),
            doc=meta.get("doc", ""), refused=tuple(meta.get("refused", {}).items()),
            c_refused=tuple(meta.get("c_refused", {}).items()), c=meta.get("c", ""),
            default_doc=meta.get("default_doc", ""), hint_text=meta.get("hint", ""),
            accepted_text=meta.get("accepted", ""), accepted_doc_text=meta.get("accepted_doc", "")))
    setattr(cls, "_declarations", tuple(found))
    return found


def _checked_post_init(own: Any) -> Any:
    def __post_init__(self: Settings) -> None:
        Settings._parse_fields(self)
        own(self)

    __post_init__._settings_checked = True  # type: ignore[attr-defined]
    return __post_init__


@dataclass
class Settings:
    """Base of a settings dataclass: every field a declared setting, parsed and checked when it is built.

    A subclass may define ``__post_init__`` (it runs after the fields were parsed; older plugins do) and
    ``check()`` (combinations: raise :class:`Conflict`). :meth:`from_xml` reads each declared field from its
    XML attribute by the same rule; a subclass with other spellings or elements overrides it.
    """

    #: what one of its settings is called in messages ("unknown transport setting(s) ...")
    WHAT: ClassVar[str] = "setting"
    #: the XML attributes it reads besides those of its declared fields
    XML_EXTRA: ClassVar[frozenset[str]] = frozenset()
    #: attribute → why it is refused (shown in the error when the attribute is given)
    XML_NOTES: ClassVar[dict[str, str]] = {}
    #: child elements ``from_xml`` reads (none: a child is refused)
    XML_CHILDREN: ClassVar[tuple[str, ...]] = ()
    #: True: every attribute is accepted (``from_xml`` keeps the undeclared ones, e.g. a script's parameters)
    XML_ANY: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "_settings_checked", False):
            cls.__post_init__ = _checked_post_init(own)  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        self._parse_fields()

    def _parse_fields(self) -> None:
        """Parse every declared field's value (strings by the field's type), then ``check()`` the whole."""
        for d in declarations(type(self)):
            value = getattr(self, d.name)
            if value == d.default and type(value) is type(d.default):
                continue  # the declared default is always accepted ("" may mean "decide later")
            object.__setattr__(self, d.name, d.parse(value))
        self.check()

    def check(self) -> None:
        """Refuse a combination of settings by raising :class:`Conflict` (none here)."""

    # -- the ways in --------------------------------------------------------------------------------

    @classmethod
    def declarations(cls) -> list[Declaration]:
        return declarations(cls)

    @classmethod
    def keywords(cls) -> frozenset[str]:
        """The keyword settings :meth:`from_keywords` takes (its init fields)."""
        return frozenset(f.name for f in fields(cls) if f.init)

    @classmethod
    def from_keywords(cls, settings: dict[str, Any]) -> Settings:
        """Build from keyword settings; a name that is not one of :meth:`keywords` raises ``TypeError`` listing
        the accepted ones, a value refused raises ``ValueError`` saying what is accepted."""
        accepted = cls.keywords()
        bad = sorted(set(settings) - accepted)
        if bad:
            raise TypeError(f"unknown {cls.WHAT}(s) {bad}; accepted: {', '.join(sorted(accepted)) or 'none'} "
                            f"({cls.__name__})")
        return cls(**settings)

    @classmethod
    def xml_attributes(cls) -> frozenset[str]:
        """Every XML attribute it reads: each declared field's name and aliases, and ``XML_EXTRA``."""
        names = {a for d in declarations(cls) for a in (d.xml, *d.aliases)}
        return frozenset(names) | cls.XML_EXTRA

    @classmethod
    def xml_values(cls, node: XmlNode) -> dict[str, Any]:
        """The declared fields given on ``node``, parsed (``bad value ...`` with the attribute's line)."""
        values: dict[str, Any] = {}
        for d in declarations(cls):
            given = [a for a in (d.xml, *d.aliases) if a in node.el.attrs]
            if len(given) > 1:
                raise node.error(f"both '{given[1]}' and '{given[0]}' on {node.describe()}",
                                 f"give one of them ({', '.join(given)} name the same setting)", attr=given[0])
            if given:
                try:
                    values[d.name] = d.parse(node.get(given[0]))
                except BadValue as e:
                    raise node.bad_value(given[0], e.hint) from None
        return values

    @classmethod
    def build_from_xml(cls, node: XmlNode, values: dict[str, Any]) -> Any:
        """``cls(**values)``, a :class:`Conflict` reported at the first attribute it names."""
        try:
            return cls(**values)
        except Conflict as e:
            attrs = {d.name: d.xml for d in declarations(cls)}
            given = [attrs.get(n, n) for n in e.names if attrs.get(n, n) in node.el.attrs]
            raise node.error(f"{e.what} (on {node.describe()})", e.hint,
                             attr=given[0] if given else None) from None
        except (TypeError, ValueError) as e:
            raise node.error(f"settings refused on {node.describe()}: {e}",
                             f"accepted attributes: {', '.join(sorted(cls.xml_attributes()))}") from None

    @classmethod
    def from_element(cls, node: XmlNode, common: frozenset[str]) -> Any:
        """Read ``node`` whole: no attribute but ``common`` and its own (unless ``XML_ANY``), no child but
        ``XML_CHILDREN`` (read by its :meth:`from_xml`)."""
        if not cls.XML_ANY:
            node.check_attributes(common | cls.xml_attributes(), cls.XML_NOTES)
        if not cls.XML_CHILDREN:
            node.children(())
        return cls.from_xml(node)

    @classmethod
    def from_xml(cls, node: XmlNode) -> Any:
        """Read and validate the declared settings of ``node`` (the element's other attributes are the
        caller's: it checked that none is unknown)."""
        return cls.build_from_xml(node, cls.xml_values(node))


def check_poll(settings: Any) -> None:
    """``poll_min`` <= ``poll_max`` (the consumers' polling intervals)."""
    if settings.poll_min > settings.poll_max:
        raise Conflict(f"poll_min {settings.poll_min:g} s is larger than poll_max {settings.poll_max:g} s",
                       "give poll_min <= poll_max (defaults 0.0005 and 0.02)", "poll_min", "poll_max")
