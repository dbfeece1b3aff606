"""SENSEI-compatible XML front for h5flow's typed configuration (:mod:`h5flow.config`).

A configuration file is SENSEI's ``<sensei>`` document. Transports (``hdf5``, ``socket``, ``adios2`` and
the legacy ``adios1 method="FLEXPATH"``) may be given as ``<analysis>`` (SENSEI's write side) or as
``<transport>`` (SENSEI's read side); analyses (``histogram``) as ``<analysis>``. The accepted elements,
attributes and values are listed in ``docs/CONFIG.md``.

Every mistake raises :class:`ConfigError` with ``"<file>:<line>: <what is wrong>; <what is accepted>"``.
Line numbers come from expat: the standard library's ``ElementTree`` drops them, so this module builds
its own small tree from expat events, remembering the line of each element and of each attribute.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TypeVar
from xml.parsers import expat

from h5flow.config import AnalysisConfig, PartitionerConfig, SenseiConfig, TransportConfig

__all__ = ["ConfigError", "load", "loads"]

_T = TypeVar("_T")


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


def _parse_xml(data: bytes, path: str, *, encoding: str | None) -> _Element:
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
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_UNITS_TEXT = "a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB " \
                   "(powers of 1024), e.g. 512MiB, 2GiB, 100MB; 0 = unlimited"


class _Node:
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

    def children(self, accepted: Sequence[str], *, notes: dict[str, str] | None = None) -> list[_Node]:
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
            nodes.append(_Node(child, self.path))
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
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            raise self.bad_value(name, f"accepted: {_SIZE_UNITS_TEXT}")
        return int(Fraction(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


# --------------------------------------------------------------------------------------------------
# The schema


#: heartbeat period: below 0.05 s file time stamps and scheduling make a live producer look lost
HEARTBEAT_RANGE = (0.05, 3600.0)
POLL_RANGE = (1e-5, 60.0)
_TRANSPORT_TYPES = ("adios1", "adios2", "hdf5", "socket")
_COMMON_TRANSPORT = {"type", "enabled", "filename"}
_QUEUE = {"queue_limit", "queue_policy", "group"}
_CONSUMER_POLLING = {"heartbeat", "poll_min", "poll_max"}
_TRANSPORT_ATTRS: dict[str, set[str]] = {
    "hdf5": _COMMON_TRANSPORT | _QUEUE | _CONSUMER_POLLING
    | {"file_name", "method", "collective", "layout", "driver", "quota", "keep"},
    "socket": _COMMON_TRANSPORT | _QUEUE | _CONSUMER_POLLING | {"interface", "quota"},
    "adios2": _COMMON_TRANSPORT | _QUEUE | {"engine", "buffer_size", "buffer_mode"},
    "adios1": _COMMON_TRANSPORT | {"method"},
}
_TRANSPORT_ATTR_NOTES = {
    "steps_per_file": "SENSEI's ADIOS2 file series is not offered",
    "frequency": "h5flow transports send every step",
    "timeout": "h5flow consumers wait for the producer's heartbeat instead",
}
_TRANSPORT_CHILD_NOTES = {
    "engine_parameters": "ADIOS2 engine parameters are not passed through; use buffer_size/buffer_mode",
}
_ADIOS1_METHODS = ("flexpath",)
_ADIOS2_ENGINES = ("sst", "bp5")
_PARTITIONER_TYPES = ("block", "mapped", "planar")
_PARTITIONER_ATTRS = {"block": {"type"}, "planar": {"type", "plane_size"}, "mapped": {"type"}}
_HISTOGRAM_ATTRS = {"type", "enabled", "mesh", "array", "association", "bins", "file"}
_PLUGIN_ANALYSIS_FIELDS = ("mesh", "array", "association")


def _transport(node: _Node, kind: str) -> TransportConfig:
    accepted = _TRANSPORT_ATTRS[kind]
    notes = dict(_TRANSPORT_ATTR_NOTES)
    for name, owner in (("engine", "adios2"), ("buffer_size", "adios2"), ("buffer_mode", "adios2"),
                        ("file_name", "hdf5"), ("method", "hdf5"), ("collective", "hdf5"), ("layout", "hdf5"),
                        ("driver", "hdf5"), ("quota", "hdf5"), ("keep", "hdf5")):
        if name not in accepted:
            notes.setdefault(name, f"'{name}' belongs to type=\"{owner}\"")
    node.check_attributes(accepted, notes)
    cfg = TransportConfig(type=kind, source=node.source, enabled=node.boolean("enabled", True))
    where = "the stream's name; for hdf5 the steps are staged in <filename>.h5flow/"

    if kind == "hdf5":
        filename, file_name = node.get("filename"), node.get("file_name")
        if filename is not None and file_name is not None:
            raise node.error(f"both 'filename' and 'file_name' on {node.describe()}",
                             "give one of them (SENSEI's reader spells it file_name, its writer filename)",
                             attr="file_name")
        cfg.filename = node.require("file_name" if file_name is not None else "filename",
                                    f"give filename=\"...\" ({where})")
        _method(node, cfg)
        cfg.layout = node.choice("layout", cfg.layout, ("n-1", "n-n"),
                                 hint="n-1: one shared file per step, n-n: one file per producer rank")
        cfg.driver = node.choice("driver", cfg.driver, ("mpio", "subfiling"))
        cfg.quota_bytes = node.nbytes("quota", cfg.quota_bytes)
        cfg.keep = node.choice("keep", cfg.keep, ("released", "all"))
    elif kind == "adios1":
        cfg.type = "socket"
        cfg.filename = node.require("filename", f"give filename=\"...\" ({where})")
        method = node.get("method")
        if method is None or method.lower() not in _ADIOS1_METHODS:
            what = (f"missing attribute 'method' on {node.describe()}" if method is None else
                    f"adios1 method {node.el.attrs['method']!r} is not offered on {node.describe()}")
            raise node.error(what, "accepted: FLEXPATH (mapped to h5flow's socket transport); for staging "
                                   "through files use type=\"hdf5\" method=\"stream\"", attr="method")
        cfg.mapped_from = f'adios1 method="{method}"'
    else:
        cfg.filename = node.require("filename", f"give filename=\"...\" ({where})")

    if kind == "adios2":
        engine = node.get("engine")
        if engine is not None and engine.lower() == "bp4":
            raise node.bad_value("engine", "BP4 is not offered; use bp5 (or sst for memory-to-memory streaming)")
        cfg.engine = node.choice("engine", "sst", _ADIOS2_ENGINES)
        cfg.queue_limit = _either(node, "buffer_size", "queue_limit",
                                  lambda n: node.integer(n, cfg.queue_limit, minimum=0), cfg.queue_limit)
        cfg.queue_policy = _either(node, "buffer_mode", "queue_policy",
                                   lambda n: node.choice(n, cfg.queue_policy, ("block", "discard")),
                                   cfg.queue_policy)
    elif kind in ("hdf5", "socket"):
        cfg.queue_limit = node.integer("queue_limit", cfg.queue_limit, minimum=0)
        cfg.queue_policy = node.choice("queue_policy", cfg.queue_policy, ("block", "discard"))
        cfg.heartbeat = node.seconds("heartbeat", cfg.heartbeat, minimum=HEARTBEAT_RANGE[0],
                                     maximum=HEARTBEAT_RANGE[1])
        cfg.poll_min = node.seconds("poll_min", cfg.poll_min, minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])
        cfg.poll_max = node.seconds("poll_max", cfg.poll_max, minimum=POLL_RANGE[0], maximum=POLL_RANGE[1])
        if cfg.poll_min > cfg.poll_max:
            attr = "poll_min" if "poll_min" in node.el.attrs else "poll_max"
            raise node.error(f"poll_min {cfg.poll_min:g} s is larger than poll_max {cfg.poll_max:g} s on "
                             f"{node.describe()}", "give poll_min <= poll_max (defaults 0.0005 and 0.02)", attr=attr)
    if kind == "socket":
        cfg.interface = node.string("interface", cfg.interface)
        cfg.quota_bytes = node.nbytes("quota", cfg.quota_bytes)
    if "group" in accepted:
        group = node.get("group")
        if group is not None:
            if not _GROUP_NAME.fullmatch(group):
                raise node.bad_value("group", "a consumer group name is letters, digits, '-' and '_' only")
            cfg.group = group

    partitioners: list[_Node] = []
    for child in node.children(("mesh", "partitioner"), notes=_TRANSPORT_CHILD_NOTES):
        if child.el.tag == "partitioner":
            if partitioners:
                first = partitioners[0].el.line
                raise child.error(f"a second <partitioner> inside {node.describe()}",
                                  f"give one partitioner per transport (the first is on line {first})")
            partitioners.append(child)
        # <mesh> is SENSEI's data-requirements subset: accepted and ignored, h5flow sends every array
    if partitioners:
        cfg.partitioner = _partitioner(partitioners[0])
    return cfg


def _either(node: _Node, sensei: str, h5flow: str, read: Callable[[str], _T], default: _T) -> _T:
    """Read SENSEI's spelling ``sensei`` or h5flow's ``h5flow`` of one setting, refusing both at once."""
    if sensei in node.el.attrs and h5flow in node.el.attrs:
        raise node.error(f"both '{sensei}' and '{h5flow}' on {node.describe()}",
                         f"give one of them ({sensei} is SENSEI's name for h5flow's {h5flow})", attr=h5flow)
    if sensei in node.el.attrs:
        return read(sensei)
    if h5flow in node.el.attrs:
        return read(h5flow)
    return default


def _method(node: _Node, cfg: TransportConfig) -> None:
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
        cfg.method = method
        from_method = len(method) > 1 and method[1].lower() == "c"
    collective = node.get("collective")
    cfg.collective = node.boolean("collective", from_method)
    if from_method and collective is not None and not cfg.collective:
        raise node.error(f'method="{method}" asks for collective transfers but collective="{collective}" refuses '
                         f"them on {node.describe()}", "drop one of the two, or make them agree", attr="collective")


def _partitioner(node: _Node) -> PartitionerConfig:
    kind = node.require("type", f"accepted: {', '.join(_PARTITIONER_TYPES)}")
    if kind.lower() not in _PARTITIONER_TYPES:
        raise node.bad_value("type", f"accepted: {', '.join(_PARTITIONER_TYPES)}", what=" (partitioner type)")
    kind = kind.lower()
    node.check_attributes(_PARTITIONER_ATTRS[kind], {
        "cycle_size": "SENSEI's header documents cycle_size but its code reads plane_size; use plane_size"})
    cfg = PartitionerConfig(type=kind)
    if kind == "planar":
        cfg.plane_size = node.integer("plane_size", cfg.plane_size, minimum=1)
    if kind != "mapped":
        node.children(())
        return cfg
    lists: dict[str, tuple[_Node, list[tuple[int, int]]]] = {}
    for child in node.children(("block_id", "block_owner")):
        tag = child.el.tag
        if tag in lists:
            raise child.error(f"a second <{tag}> inside {node.describe()}",
                              f"list all values in one <{tag}> (the first is on line {lists[tag][0].el.line})")
        child.check_attributes(())
        for grandchild in child.el.children:
            raise ConfigError(f"{node.path}:{grandchild.line}: unknown element <{grandchild.tag}> inside <{tag}>; "
                              f"<{tag}> holds only integers separated by spaces or commas",
                              path=node.path, line=grandchild.line)
        lists[tag] = (child, _int_list(child))
    for tag in ("block_id", "block_owner"):
        if tag not in lists:
            raise node.error(f"missing <{tag}> inside {node.describe()}",
                             "a mapped partitioner needs <block_id>0 1 2</block_id> and "
                             "<block_owner>0 1 0</block_owner> of equal length")
    (ids_node, ids), (owners_node, owners) = lists["block_id"], lists["block_owner"]
    if len(ids) != len(owners):
        raise owners_node.error(f"<block_owner> lists {len(owners)} ranks but <block_id> (line {ids_node.el.line}) "
                                f"lists {len(ids)} blocks inside {node.describe()}",
                                "give one owner rank per block id", line=owners_node.el.text_line or None)
    seen: dict[int, int] = {}
    for block, line in ids:
        if block in seen:
            raise ids_node.error(f"block id {block} is listed twice in <block_id> (first on line {seen[block]})",
                                 "list each block once, with its owner at the same position in <block_owner>",
                                 line=line)
        seen[block] = line
    cfg.block_ids, cfg.block_owners = [b for b, _ in ids], [r for r, _ in owners]
    return cfg


def _int_list(node: _Node) -> list[tuple[int, int]]:
    """The integers of ``<block_id>``/``<block_owner>``, each with the line it is on."""
    text = node.el.text
    first = len(text) - len(text.lstrip())
    values = []
    for m in re.finditer(r"[^\s,]+", text):
        token, line = m.group(), (node.el.text_line or node.el.line) + text.count("\n", first, m.start())
        if not token.isdigit() or not token.isascii():
            raise node.error(f"bad value {token!r} in <{node.el.tag}>",
                             "accepted: integers >= 0 separated by spaces or commas", line=line)
        values.append((int(token), line))
    if not values:
        raise node.error(f"empty <{node.el.tag}>", "list integers >= 0 separated by spaces or commas")
    return values


def _analysis(node: _Node, kind: str) -> AnalysisConfig:
    if kind == "histogram":
        node.check_attributes(_HISTOGRAM_ATTRS)
        node.children(())
        cfg = AnalysisConfig(type=kind, source=node.source, enabled=node.boolean("enabled", True))
        cfg.mesh = node.string("mesh", cfg.mesh)
        cfg.array = node.string("array", cfg.array)
        cfg.association = node.choice("association", cfg.association, ("cell", "point"))
        cfg.bins = node.integer("bins", cfg.bins, minimum=1)
        file = node.get("file")
        if file is not None:
            cfg.file = node.string("file", "")
        return cfg
    # an analysis registered by a plugin: its own attributes go to ``params`` for it to check
    from h5flow.analyses import registry

    if kind not in registry:
        known = sorted(set(_TRANSPORT_TYPES) | set(registry.names()))
        raise node.bad_value("type", f"accepted: {', '.join(known)}", what=" (analysis type)")
    cfg = AnalysisConfig(type=kind, source=node.source, enabled=node.boolean("enabled", True))
    node.children(())
    if kind == "python":  # SENSEI's Python adaptor: every other attribute goes to the script's params
        from h5flow.analyses._python import resolve_script

        script = node.require("script", "give script=\"my_analysis.py\" (a script defining execute(step))")
        if not resolve_script(script, node.source).is_file():
            raise node.bad_value("script", "the script does not exist; give a path relative to the working "
                                           "directory or to this XML file")
        cfg.params = {k: v.strip() for k, v in node.el.attrs.items() if k not in ("type", "enabled")}
        return cfg
    for name in _PLUGIN_ANALYSIS_FIELDS:
        setattr(cfg, name, node.string(name, getattr(cfg, name)))
    cfg.params = {k: v.strip() for k, v in node.el.attrs.items()
                  if k not in ("type", "enabled", *_PLUGIN_ANALYSIS_FIELDS)}
    return cfg


def _config(root: _Element, path: str) -> SenseiConfig:
    top = _Node(root, path)
    if root.tag != "sensei":
        raise top.error(f"the root element is <{root.tag}>", "a configuration's root element must be <sensei>")
    top.check_attributes(())
    cfg = SenseiConfig(path=path)
    for node in top.children(("analysis", "transport")):
        kind = node.require("type", f"accepted: {', '.join(_TRANSPORT_TYPES)}"
                                    + (", histogram" if node.el.tag == "analysis" else ""))
        kind = kind.lower()
        if kind in _TRANSPORT_TYPES:
            cfg.transports.append(_transport(node, kind))
        elif node.el.tag == "analysis":
            cfg.analyses.append(_analysis(node, kind))
        else:
            raise node.bad_value("type", f"accepted: {', '.join(_TRANSPORT_TYPES)} (analyses such as histogram "
                                         "go in <analysis>)", what=" (transport type)")
    return cfg


# --------------------------------------------------------------------------------------------------
# Entry points


def loads(text: str, path: str = "<string>") -> SenseiConfig:
    """Parse the XML configuration ``text``; ``path`` names it in messages and ``source`` fields."""
    # the text is already decoded: expat reads our UTF-8 bytes whatever the XML declaration says
    return _config(_parse_xml(text.encode("utf-8"), path, encoding="utf-8"), path)


def load(path: str | Path) -> SenseiConfig:
    """Read and parse the XML configuration file ``path`` (its XML declaration picks the encoding)."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read the configuration file: {e.strerror or e}; "
                          "check the path (give a SENSEI <sensei> XML file)", path=name) from None
    return _config(_parse_xml(data, name, encoding=None), name)
