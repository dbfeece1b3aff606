"""The generic XML node reader: a small element tree with line numbers and typed attribute getters.

It knows nothing of transports or analyses: :mod:`h5flow.xmlconfig` reads SENSEI's ``<sensei>`` document
with it, and each transport's settings class (:class:`h5flow.transports.TransportSettings`) reads its own
attributes with it. Every getter raises :class:`ConfigError` with ``"<file>:<line>: <what is wrong>;
<what is accepted>"``, the line being the attribute's own.

Line numbers come from expat: the standard library's ``ElementTree`` drops them, so this module builds
its own small tree from expat events, remembering the line of each element and of each attribute.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from xml.parsers import expat

__all__ = ["ConfigError", "XmlNode", "parse_xml"]


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message is ``"<file>:<line>: <what>; <accepted>"``."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


# --------------------------------------------------------------------------------------------------
# A small element tree with line numbers, built from expat events


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    line: int
    attr_lines: dict[str, int] = field(default_factory=dict)
    children: list[_Element] = field(default_factory=list)
    text: str = ""
    text_line: int = 0  # line of the first non-blank character data


# A start tag as expat has already accepted it: its attribute region, then each ``name = "value"``.
_START_TAG = re.compile(rb"<[^\s/>]+((?:\s+[^\s=/>]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*/?>")
_ATTRIBUTE = re.compile(rb"([^\s=/>]+)\s*=\s*(?:\"[^\"]*\"|'[^']*')")


class _TreeBuilder:
    def __init__(self, data: bytes, *, encoding: str | None) -> None:
        self._data = data
        self._parser = expat.ParserCreate(encoding)
        self._parser.StartElementHandler = self._start
        self._parser.EndElementHandler = self._end
        self._parser.CharacterDataHandler = self._chars
        self._stack: list[_Element] = []
        self.root: _Element | None = None

    def parse(self) -> _Element:
        self._parser.Parse(self._data, True)
        assert self.root is not None  # expat refuses a document without an element
        return self.root

    def _attribute_lines(self, line: int, attrs: dict[str, str]) -> dict[str, int]:
        """The line of each attribute, found by re-reading the start tag expat has just accepted."""
        start = self._parser.CurrentByteIndex
        lines: dict[str, int] = {}
        if not attrs or start < 0:
            return lines
        tag = _START_TAG.match(self._data, start)
        if tag is None:  # a document in an encoding that is not ASCII-compatible: use the element's line
            return lines
        for m in _ATTRIBUTE.finditer(self._data, tag.start(1), tag.end(1)):
            name = m.group(1).decode("utf-8", "replace")
            lines[name] = line + self._data.count(b"\n", start, m.start(1))
        return lines

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        line = self._parser.CurrentLineNumber
        el = _Element(tag, dict(attrs), line, self._attribute_lines(line, attrs))
        if self._stack:
            self._stack[-1].children.append(el)
        else:
            self.root = el
        self._stack.append(el)

    def _end(self, tag: str) -> None:
        self._stack.pop()

    def _chars(self, data: str) -> None:
        if not self._stack:
            return
        el = self._stack[-1]
        if not el.text.strip() and data.strip():
            el.text_line = self._parser.CurrentLineNumber + data[: len(data) - len(data.lstrip())].count("\n")
        el.text += data


def parse_xml(data: bytes, path: str, *, encoding: str | None) -> _Element:
    try:
        return _TreeBuilder(data, encoding=encoding).parse()
    except expat.ExpatError as e:
        raise ConfigError(
            f"{path}:{e.lineno}: malformed XML: {expat.ErrorString(e.code)} (column {e.offset + 1}); "
            "fix the XML syntax (every element closed, attribute values in quotes, one root <sensei>)",
            path=path, line=e.lineno) from None


# --------------------------------------------------------------------------------------------------
# Reading attributes with checks and messages


_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}
_INTEGER = re.compile(r"[+]?[0-9]+")
_GROUP_NAME = re.compile(r"[A-Za-z0-9_-]+")
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)")
SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
SIZE_UNITS_TEXT = "a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB " \
                   "(powers of 1024), e.g. 512MiB, 2GiB, 100MB; 0 = unlimited"


class XmlNode:
    """One element with the file it came from: typed attribute getters that raise :class:`ConfigError`."""

    def __init__(self, el: _Element, path: str) -> None:
        self.el = el
        self.path = path

    @property
    def source(self) -> str:
        return f"{self.path}:{self.el.line}"

    def describe(self) -> str:
        kind = self.el.attrs.get("type")
        return f'<{self.el.tag} type="{kind.strip()}">' if kind is not None else f"<{self.el.tag}>"

    def error(self, what: str, hint: str, *, attr: str | None = None, line: int | None = None) -> ConfigError:
        if line is None:
            line = self.el.attr_lines.get(attr, self.el.line) if attr is not None else self.el.line
        return ConfigError(f"{self.path}:{line}: {what}; {hint}", path=self.path, line=line)

    def bad_value(self, attr: str, hint: str, what: str = "") -> ConfigError:
        raw = self.el.attrs[attr]
        shown = repr(raw) if len(raw) <= 60 else f"{raw[:60]!r}... ({len(raw)} characters)"
        return self.error(f"bad value {shown} for attribute '{attr}' on {self.describe()}{what}", hint, attr=attr)

    # -- structure ---------------------------------------------------------------------------------

    def check_attributes(self, accepted: Iterable[str], notes: dict[str, str] | None = None) -> None:
        known = sorted(accepted)
        for name in self.el.attrs:
            if name in known:
                continue
            hint = f"accepted: {', '.join(known)}" if known else f"{self.describe()} takes no attributes"
            if notes and name in notes:
                hint = f"{notes[name]}; {hint}"
            else:
                close = difflib.get_close_matches(name, known, n=1)
                if close:
                    hint = f"did you mean '{close[0]}'? {hint}"
            raise self.error(f"unknown attribute '{name}' on {self.describe()}", hint, attr=name)

    def children(self, accepted: Sequence[str], *, notes: dict[str, str] | None = None) -> list[XmlNode]:
        """The child elements, each of a tag in ``accepted``; no loose text is allowed here."""
        self.check_no_text()
        nodes = []
        for child in self.el.children:
            if child.tag not in accepted:
                where = f"inside {self.describe()}"
                hint = (f"accepted: {', '.join(f'<{t}>' for t in sorted(accepted))}" if accepted
                        else f"{self.describe()} has no child elements")
                if notes and child.tag in notes:
                    hint = f"{notes[child.tag]}; {hint}"
                raise ConfigError(f"{self.path}:{child.line}: unknown element <{child.tag}> {where}; {hint}",
                                  path=self.path, line=child.line)
            nodes.append(XmlNode(child, self.path))
        return nodes

    def check_no_text(self) -> None:
        text = self.el.text.strip()
        if text:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise self.error(f"unexpected text {shown!r} inside {self.describe()}",
                             "only <block_id> and <block_owner> (and the ignored <mesh>) hold text; "
                             "put settings in attributes", line=self.el.text_line or self.el.line)

    # -- attribute values --------------------------------------------------------------------------

    def get(self, name: str) -> str | None:
        value = self.el.attrs.get(name)
        return None if value is None else value.strip()

    def string(self, name: str, default: str) -> str:
        value = self.get(name)
        if value is None:
            return default
        if not value:
            raise self.bad_value(name, "give a non-empty value or leave the attribute out")
        return value

    def require(self, name: str, hint: str) -> str:
        value = self.get(name)
        if value is None:
            raise self.error(f"missing attribute '{name}' on {self.describe()}", hint)
        if not value:
            raise self.bad_value(name, hint)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if value.lower() not in _BOOLEANS:
            raise self.bad_value(name, "accepted: 0, 1, true, false")
        return _BOOLEANS[value.lower()]

    def integer(self, name: str, default: int, *, minimum: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        if not _INTEGER.fullmatch(value) or int(value) < minimum:
            raise self.bad_value(name, f"accepted: an integer >= {minimum}")
        return int(value)

    def seconds(self, name: str, default: float, *, minimum: float, maximum: float) -> float:
        value = self.get(name)
        if value is None:
            return default
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and minimum <= seconds <= maximum):
            raise self.bad_value(name, f"accepted: a number of seconds from {minimum:g} to {maximum:g}")
        return seconds

    def number(self, name: str, default: float, *, minimum: float = -math.inf, maximum: float = math.inf) -> float:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and minimum <= number <= maximum):
            raise self.bad_value(name, f"accepted: a number from {minimum:g} to {maximum:g}")
        return number

    def choice(self, name: str, default: str, choices: Sequence[str], *, hint: str = "") -> str:
        value = self.get(name)
        if value is None:
            return default
        if value.lower() not in choices:
            raise self.bad_value(name, f"{hint}{'; ' if hint else ''}accepted: {', '.join(choices)}")
        return value.lower()

    def nbytes(self, name: str, default: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        m = _SIZE.fullmatch(value)
        if m is None or m.group(2).lower() not in SIZE_UNITS:
            raise self.bad_value(name, f"accepted: {SIZE_UNITS_TEXT}")
        return int(Fraction(m.group(1)) * SIZE_UNITS[m.group(2).lower()])


_Node = XmlNode  # the name xmlconfig used
