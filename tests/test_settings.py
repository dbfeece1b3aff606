"""One declaration per setting (h5flow.settings): keywords, XML and the C producer library read every setting by
the same rule with the same words, and the generated C table and docs/CONFIG.md tables match the declarations."""

from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path
from typing import Any

import pytest

from h5flow import settings_gen, xmlconfig
from h5flow.config import TransportConfig
from h5flow.settings import Declaration, declarations
from h5flow.transports.hdf5.settings import Hdf5Settings
from h5flow.transports.socket.settings import SocketSettings
from h5flow.xmlnode import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("H5FLOW_NATIVE_BUILD", ROOT / "build" / "native"))


def _clib() -> Any:
    path = BUILD / "lib" / "libh5flow.so"
    assert path.exists(), f"{path} is missing: run `make setup` (it builds native/ and libh5flow)"
    lib = ctypes.CDLL(str(path))
    lib.h5flow_config_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.h5flow_config_check.restype = ctypes.c_int
    return lib


def _c_check(path: Path) -> str:
    """"" when the C library accepts the XML file, else its message."""
    msg = ctypes.create_string_buffer(4096)
    rc = _clib().h5flow_config_check(str(path).encode(), msg, len(msg))
    text = msg.value.decode()
    assert (rc == 0) == (text == ""), (rc, text)
    return text


def _py_check(path: Path) -> str:
    try:
        xmlconfig.load(path)
    except ConfigError as e:
        return str(e)
    return ""


def _xml(path: Path, attrs: str) -> Path:
    path.write_text(f'<sensei>\n<transport type="hdf5" filename="{path.parent / "s"}" {attrs}/>\n</sensei>\n')
    return path


def test_keyword_strings_are_parsed_never_truthy() -> None:
    s = TransportConfig.of("hdf5", "s", raw_reads="false", async_write="0", collective="FALSE", queue_limit="2",
                           heartbeat="2.5", map_reads=False, quota_bytes="1KiB", read_threads="3").settings
    assert (s.raw_reads, s.async_write, s.collective, s.queue_limit, s.heartbeat, s.map_reads, s.quota_bytes,
            s.read_threads) == (False, False, False, 2, 2.5, "false", 1024, 3)
    assert type(s.queue_limit) is int and type(s.raw_reads) is bool
    assert SocketSettings(cma="false").cma is False and SocketSettings(cma=0).cma is False


# (keyword, its value, the same as an XML attribute: name and text)
BAD = [
    ("queue_limit", -1, "queue_limit", "-1"),
    ("queue_limit", "2x", "queue_limit", "2x"),
    ("queue_limit", 2.5, "queue_limit", "2.5"),
    ("queue_limit", 2**62 + 1, "queue_limit", str(2**62 + 1)),  # past what the C library holds
    ("heartbeat", 1e-9, "heartbeat", "1e-9"),
    ("heartbeat", math.nan, "heartbeat", "nan"),
    ("collective", "maybe", "collective", "maybe"),
    ("raw_reads", "perhaps", "raw_reads", "perhaps"),
    ("async_write", 2, "async_write", "2"),
    ("keep", "xyz", "keep", "xyz"),
    ("read_threads", 0, "read_threads", "0"),
    ("quota_bytes", -5, "quota", "-5"),
    ("map_reads", "yes", "map_reads", "yes"),
    ("layout", "n-3", "layout", "n-3"),
    ("group", "a b", "group", "a b"),
    ("method", "post", "method", "post"),
    ("dead_consumer", "x", "dead_consumer", "x"),
    ("poll_min", 0, "poll_min", "0"),
]


@pytest.mark.parametrize(("name", "value", "attr", "text"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_a_bad_value_is_refused_alike_by_keywords_xml_and_the_c_library(tmp_path: Path, name: str, value: Any,
                                                                        attr: str, text: str) -> None:
    with pytest.raises(ValueError) as kw:
        TransportConfig.of("hdf5", "s", **{name: value})
    xml = _xml(tmp_path / "p.xml", f'{attr}="{text}"')
    py, c = _py_check(xml), _c_check(xml)
    assert py and py == c, (py, c)
    hint = py.split(f"for attribute '{attr}' on <transport type=\"hdf5\">; ", 1)[1]
    assert str(kw.value) == f"{name}={value!r}: {hint}"


COMBINATIONS = ['poll_min="1" poll_max="0.5"', 'layout="n-n" collective="1"', 'method="sc" collective="0"',
                'layout="N-N" method="Sc"', 'bogus="1"', 'queue_limt="1"',
                'map_reads="false" raw_reads="0" read_threads="4" async_write="false" group="g-1" layout="log"',
                'driver="subfiling"']


@pytest.mark.parametrize("attrs", COMBINATIONS)
def test_the_c_library_refuses_with_pythons_message(tmp_path: Path, attrs: str) -> None:
    """Combinations and unknown attributes get the same message from both readers (Python may add a 'did you
    mean'); what only the C library refuses (layout="log", driver="subfiling") says why."""
    xml = _xml(tmp_path / "p.xml", attrs)
    py, c = _py_check(xml), _c_check(xml)
    assert c.startswith(f"{xml}:2: "), c
    if "log" in attrs or "subfiling" in attrs:
        assert py == "" and "C library" in c, (py, c)
    else:
        assert py == c or ("did you mean" in py and py.split(" did you mean")[0] == c.split(" accepted:")[0]
                           and py.split("? ", 1)[1] == c.split("; ", 1)[1]), (py, c)


def _valid(d: Declaration) -> str:
    """A value of ``d`` other than its default that both readers and the C library accept."""
    if d.kind == "bool":
        return "false" if d.default else "true"
    if d.kind == "int":
        return str(int(d.minimum or 0) + 1)
    if d.kind == "bytes":
        return "1 MiB"
    if d.kind == "seconds":
        return f"{max(d.minimum, 0.05) * 2:g}" if d.name == "heartbeat" else "0.002"
    if d.kind == "choice":
        refused = dict(d.c_refused)
        return next((c for c in d.choices if c not in refused and c != d.default), d.default).upper()
    return {"group": "g_1", "method": "s"}.get(d.name, "x")


def test_the_c_library_accepts_every_declared_setting(tmp_path: Path) -> None:
    """Every attribute docs/CONFIG.md lists for hdf5 (map_reads, async_write, read_threads, raw_reads ...) is
    read by the C library: the consumers' accepted, the producer's used."""
    decls = declarations(Hdf5Settings)
    # the connector stack writes layout n-n only, which the shared-file settings among these refuse: its
    # settings are given together, with layout n-n, in a second configuration
    stack = ("vol_stack", "async_max_mem", "cache_path", "cache_capacity")
    attrs = " ".join(f'{d.xml}="{_valid(d)}"' for d in decls if d.name not in stack)
    xml = _xml(tmp_path / "p.xml", attrs + ' file_name="x"')
    assert "both 'filename' and 'file_name'" in _c_check(xml)
    xml = _xml(tmp_path / "p.xml", attrs)
    assert _py_check(xml) == "" and _c_check(xml) == "", attrs
    stack_attrs = 'layout="n-n" vol_stack="CACHE,ASYNC" ' + " ".join(
        f'{d.xml}="{_valid(d)}"' for d in decls if d.name in stack[1:])
    xml = _xml(tmp_path / "p.xml", stack_attrs)
    assert _py_check(xml) == "" and _c_check(xml) == "", stack_attrs
    for name in ("map_reads", "async_write", "read_threads", "raw_reads", *stack):
        assert name in attrs + stack_attrs


def test_generated_files_match_the_declarations() -> None:
    """native/lib/config_table.h and docs/CONFIG.md's settings tables are what `python -m h5flow.settings_gen`
    writes from the declarations (run it after changing one)."""
    for path, text in settings_gen.outputs().items():
        assert path.read_text() == text, f"{path} is stale: run `python -m h5flow.settings_gen`"
    md = settings_gen.CONFIG_MD.read_text()
    for kind in ("hdf5", "socket", "adios2"):
        assert f"<!-- generated: settings {kind} -->" in md


def test_every_declared_setting_is_documented() -> None:
    from h5flow import transports

    for kind in transports.BUILTIN:
        for d in declarations(transports.entry(kind).settings):
            assert d.doc, f"{kind}: {d.name} has no doc"
            assert f"| `{d.xml}`" in settings_gen.doc_table(kind)


def test_plugin_partitioner_and_analysis_get_typed_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's SETTINGS class reads its XML attributes and keywords by the same declarations as the built-in
    ones (line-numbered errors, parsed values); the built-in partitioners and analyses have their own."""
    from dataclasses import dataclass

    from h5flow import analyses, partitioners
    from h5flow.analyses import Analysis, AnalysisSettings
    from h5flow.config import AnalysisConfig, PartitionerConfig
    from h5flow.partitioners import Partitioner, PartitionerSettings
    from h5flow.settings import setting

    @dataclass
    class EveryNthSettings(PartitionerSettings):
        stride: int = setting(1, "blocks per chunk", minimum=1)

    class EveryNth(Partitioner):
        SETTINGS = EveryNthSettings

        def __init__(self, stride: int) -> None:
            self.stride = stride

        @classmethod
        def from_config(cls, cfg: PartitionerConfig) -> EveryNth:
            return cls(cfg.settings.stride)

        def owners(self, blocks: Any, n: int) -> list[int]:
            return [(i // self.stride) % n for i in range(len(blocks))]

    @dataclass
    class CountSettings(AnalysisSettings):
        verbose: bool = setting(False, "say more")

    class Count(Analysis):
        SETTINGS = CountSettings

        def __init__(self, cfg: AnalysisConfig) -> None:
            self.verbose = cfg.settings.verbose

        def execute(self, step: Any) -> Any:
            return None

    for registry in (partitioners.registry, analyses.registry):  # registered for this test only
        registry.names()
        monkeypatch.setattr(registry, "_items", dict(registry._items))
    partitioners.register("every-nth", EveryNth)
    analyses.register("count", Count)
    cfg = xmlconfig.loads('<sensei>\n<transport type="hdf5" filename="f"><partitioner type="every-nth" '
                          'stride="3"/></transport>\n<analysis type="count" verbose="FALSE"/></sensei>')
    assert cfg.transport().partitioner == PartitionerConfig.of("every-nth", stride="3")
    assert cfg.transport().partitioner.settings == EveryNthSettings(stride=3)
    assert cfg.analyses[0].settings == CountSettings(verbose=False) and cfg.analyses[0].verbose is False
    with pytest.raises(ConfigError, match=r"<string>:2: bad value '0' for attribute 'stride' on <partitioner "
                                          r"type=\"every-nth\">; accepted: an integer >= 1"):
        xmlconfig.loads('<sensei>\n<transport type="hdf5" filename="f"><partitioner type="every-nth" '
                        'stride="0"/></transport></sensei>')
    with pytest.raises(ConfigError, match=r"<string>:1: unknown attribute 'verbos' on <analysis type=\"count\">; "
                                          r"did you mean 'verbose'\?"):
        xmlconfig.loads('<sensei><analysis type="count" verbos="1"/></sensei>')
    with pytest.raises(ValueError, match=r"verbose='maybe': accepted: 0, 1, true, false"):
        AnalysisConfig.of("count", verbose="maybe")
    for name in ("block", "planar", "mapped"):
        assert partitioners.settings_class(name) is not None
    for name in ("histogram", "python"):
        assert analyses.settings_class(name).__name__ != "PluginAnalysisSettings"


def _import_graph(src: Path) -> dict[str, set[str]]:
    """Module → the h5flow modules it imports anywhere in its body (type-checking-only imports left out)."""
    import ast

    mods = {}
    for p in (src / "h5flow").rglob("*.py"):
        parts = list(p.relative_to(src).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    class Imports(ast.NodeVisitor):
        def __init__(self, module: str, package: list[str]) -> None:
            self.module, self.package, self.names = module, package, []

        def visit_If(self, node: ast.If) -> None:  # noqa: N802 - ast's name
            if getattr(node.test, "id", getattr(node.test, "attr", "")) != "TYPE_CHECKING":
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
            self.names += [a.name for a in node.names]

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
            pkg = self.package
            base = (".".join(pkg[:len(pkg) - node.level + 1] + [node.module or ""]).strip(".") if node.level
                    else node.module or "")
            subs = [f"{base}.{a.name}" for a in node.names]
            self.names += subs if all(s in mods for s in subs) else [base, *subs]

    edges: dict[str, set[str]] = {}
    for m, p in mods.items():
        found = Imports(m, m.split(".") if p.name == "__init__.py" else m.split(".")[:-1])
        found.visit(ast.parse(p.read_text()))
        edges[m] = set()
        for name in found.names:
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != m:
                edges[m].add(name)
    return edges


def test_no_import_circle_but_the_documented_ones() -> None:
    """docs/ARCHITECTURE.md "Import order" names the only circles: lazy loads inside functions."""
    edges = _import_graph(ROOT / "src")
    circles = set()
    for start in edges:  # every module that reaches back to itself, with the modules on the way
        stack, seen = [start], {start}
        while stack:
            for nxt in edges[stack.pop()]:
                if nxt == start:
                    circles.add(start)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    assert circles == {"h5flow.transports.hdf5.settings", "h5flow.transports.hdf5.writer", "h5flow.query.expr",
                       "h5flow.query.grammar"}, sorted(circles)
