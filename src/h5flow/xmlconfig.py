"""SENSEI-compatible XML front for h5flow's typed configuration (:mod:`h5flow.config`).

A configuration file is SENSEI's ``<sensei>`` document. Transports (``hdf5``, ``socket``, ``adios2``, any
transport registered in :data:`h5flow.transports.registry` or its entry-point group, and the legacy
``adios1 method="FLEXPATH"``) may be given as ``<analysis>`` (SENSEI's write side) or as ``<transport>``
(SENSEI's read side); analyses (``histogram``, ``python``, registered ones) as ``<analysis>``. The accepted
elements, attributes and values are listed in ``docs/CONFIG.md``.

This module reads only what every transport shares (``type``, ``enabled``, ``filename``, ``<partitioner>``,
``<mesh>``); each transport's own attributes are read and checked by its settings class (the ``settings``
of its :class:`~h5flow.transports.TransportEntry`), partitioners registered by plugins get their attributes
in ``params`` and are built once here to check them.

Every mistake raises :class:`ConfigError` with ``"<file>:<line>: <what is wrong>; <what is accepted>"``
(the generic element reader with line numbers is :mod:`h5flow.xmlnode`).
"""

from __future__ import annotations

from pathlib import Path

from h5flow.config import AnalysisConfig, PartitionerConfig, SenseiConfig, TransportConfig
from h5flow.xmlnode import ConfigError, XmlNode, parse_xml

__all__ = ["ConfigError", "XmlNode", "load", "loads"]

_Node = XmlNode


# --------------------------------------------------------------------------------------------------
# The schema


_LEGACY_TRANSPORTS = ("adios1",)  # SENSEI names read here and mapped onto a registered transport
_COMMON_TRANSPORT = frozenset({"type", "enabled", "filename"})
_TRANSPORT_ATTR_NOTES = {
    "steps_per_file": "SENSEI's ADIOS2 file series is not offered",
    "frequency": "h5flow transports send every step",
    "timeout": "h5flow consumers wait for the producer's heartbeat instead",
}
_TRANSPORT_CHILD_NOTES = {
    "engine_parameters": "ADIOS2 engine parameters are not passed through; use buffer_size/buffer_mode",
}
_ADIOS1_METHODS = ("flexpath",)
_BUILTIN_PARTITIONERS = ("block", "mapped", "planar")


def _transport_types() -> list[str]:
    """Every name ``type`` may give a transport: the registered ones (entry points included) and adios1."""
    from h5flow.transports import registry

    return sorted(set(registry.names()) | set(_LEGACY_TRANSPORTS))


def _owner_notes(kind: str, accepted: frozenset[str]) -> dict[str, str]:
    """``'engine' belongs to type="adios2"`` for the attributes of the other registered transports."""
    from h5flow import transports

    notes: dict[str, str] = {}
    for name in sorted(transports.registry.names(), key=lambda n: (n not in transports.BUILTIN, n)):
        if name == kind:
            continue
        try:
            attrs = transports.entry(name).settings.xml_attributes()
        except Exception:  # noqa: BLE001 - a broken plugin must not hide this message
            continue
        for attr in sorted(attrs - accepted):
            notes.setdefault(attr, f"'{attr}' belongs to type=\"{name}\"")
    return notes


def _transport(node: _Node, kind: str) -> TransportConfig:
    if kind == "adios1":
        return _adios1(node)
    from h5flow import transports

    settings_cls = transports.entry(kind).settings
    accepted = _COMMON_TRANSPORT | settings_cls.xml_attributes()
    if set(node.el.attrs) - accepted:
        notes = {**_owner_notes(kind, accepted), **_TRANSPORT_ATTR_NOTES, **settings_cls.XML_NOTES}
        node.check_attributes(accepted, notes)
    cfg = TransportConfig(type=kind, source=node.source, enabled=node.boolean("enabled", True))
    cfg.filename = settings_cls.read_filename(node)
    settings_cls.from_xml(node).apply(cfg)
    _transport_children(node, cfg)
    return cfg


def _adios1(node: _Node) -> TransportConfig:
    """SENSEI's ``adios1 method="FLEXPATH"``: h5flow's socket transport stands in for it."""
    node.check_attributes(_COMMON_TRANSPORT | {"method"}, {**_owner_notes("adios1", frozenset({"method"})),
                                                            **_TRANSPORT_ATTR_NOTES})
    cfg = TransportConfig(type="socket", source=node.source, enabled=node.boolean("enabled", True))
    cfg.filename = node.require("filename", "give filename=\"...\" (the stream's name)")
    method = node.get("method")
    if method is None or method.lower() not in _ADIOS1_METHODS:
        what = (f"missing attribute 'method' on {node.describe()}" if method is None else
                f"adios1 method {node.el.attrs['method']!r} is not offered on {node.describe()}")
        raise node.error(what, "accepted: FLEXPATH (mapped to h5flow's socket transport); for staging "
                               "through files use type=\"hdf5\" method=\"stream\"", attr="method")
    cfg.mapped_from = f'adios1 method="{method}"'
    _transport_children(node, cfg)
    return cfg


def _transport_children(node: _Node, cfg: TransportConfig) -> None:
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


def _partitioner(node: _Node) -> PartitionerConfig:
    from h5flow.partitioners import make_partitioner, registry, settings_class

    known = registry.names()  # the built-in ones and every registered one (entry points included)
    kind = node.require("type", f"accepted: {', '.join(known)}")
    if kind.lower() not in known:
        raise node.bad_value("type", f"accepted: {', '.join(known)}", what=" (partitioner type)")
    kind = kind.lower()
    settings_cls = settings_class(kind)
    if settings_cls is None:  # a plugin partitioner that reads its attributes from params
        node.children(())
        cfg = PartitionerConfig(type=kind, params={k: v.strip() for k, v in node.el.attrs.items() if k != "type"})
    else:  # its own settings class reads and checks its attributes (and children)
        cfg = PartitionerConfig(type=kind, settings=settings_cls.from_element(node, frozenset({"type"})))
    if kind in _BUILTIN_PARTITIONERS:
        return cfg  # whether a mapped partitioner's lists fit a step is known only when it runs
    try:  # built once here, so that the settings it refuses are reported with this element's line
        make_partitioner(cfg)
    except (ValueError, TypeError) as e:  # PartitionError is a ValueError
        raise node.error(f"{node.describe()} refused its settings: {e}",
                         "fix the attributes as the message says (this partitioner's documentation lists them)"
                         ) from None
    return cfg


def _analysis(node: _Node, kind: str) -> AnalysisConfig:
    from h5flow.analyses import registry, settings_class

    if kind not in registry:
        known = sorted(set(_transport_types()) | set(registry.names()))
        raise node.bad_value("type", f"accepted: {', '.join(known)}", what=" (analysis type)")
    enabled = node.boolean("enabled", True)
    settings = settings_class(kind).from_element(node, frozenset({"type", "enabled"}))
    return AnalysisConfig(type=kind, source=node.source, enabled=enabled, settings=settings)


def _config(root: _Element, path: str) -> SenseiConfig:
    top = _Node(root, path)
    if root.tag != "sensei":
        raise top.error(f"the root element is <{root.tag}>", "a configuration's root element must be <sensei>")
    top.check_attributes(())
    cfg = SenseiConfig(path=path)
    transport_types = _transport_types()
    for node in top.children(("analysis", "transport")):
        kind = node.require("type", f"accepted: {', '.join(transport_types)}"
                                    + (", histogram" if node.el.tag == "analysis" else ""))
        kind = kind.lower()
        if kind in transport_types:
            cfg.transports.append(_transport(node, kind))
        elif node.el.tag == "analysis":
            cfg.analyses.append(_analysis(node, kind))
        else:
            raise node.bad_value("type", f"accepted: {', '.join(transport_types)} (analyses such as histogram "
                                         "go in <analysis>)", what=" (transport type)")
    return cfg


# --------------------------------------------------------------------------------------------------
# Entry points


def loads(text: str, path: str = "<string>") -> SenseiConfig:
    """Parse the XML configuration ``text``; ``path`` names it in messages and ``source`` fields."""
    # the text is already decoded: expat reads our UTF-8 bytes whatever the XML declaration says
    return _config(parse_xml(text.encode("utf-8"), path, encoding="utf-8"), path)


def load(path: str | Path) -> SenseiConfig:
    """Read and parse the XML configuration file ``path`` (its XML declaration picks the encoding)."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read the configuration file: {e.strerror or e}; "
                          "check the path (give a SENSEI <sensei> XML file)", path=name) from None
    return _config(parse_xml(data, name, encoding=None), name)
