"""The SENSEI-compatible XML front: what it accepts, what it builds, and what its errors say."""

from __future__ import annotations

from pathlib import Path

import pytest

from h5flow import analyses
from h5flow.config import AnalysisConfig, PartitionerConfig, SenseiConfig, TransportConfig
from h5flow.xmlconfig import ConfigError, load, loads
from h5flow.transports.hdf5.settings import Hdf5Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "config"

# The two configurations printed in the seed paper, verbatim (line breaks included).
SEED_HDF5 = """<sensei>

<analysis type="hdf5" filename="/burst/buffer/file"
method="stream" enabled="1" />

</sensei>
"""
SEED_ADIOS1 = """<sensei>

<analysis type="adios1" filename="./test"
method="FLEXPATH" enabled="1 "/>

</sensei>
"""

#: what every <transport type="hdf5"> accepts: the shared attributes and its settings' declared ones
HDF5_ACCEPTED = ", ".join(sorted({"type", "enabled", "filename"} | Hdf5Settings.xml_attributes()))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_transport(attrs: str, body: str = "", tag: str = "transport") -> TransportConfig:
    text = f"<sensei>\n<{tag} {attrs}>{body}</{tag}>\n</sensei>"
    cfg = loads(text, "t.xml")
    assert len(cfg.transports) == 1 and not cfg.analyses
    return cfg.transports[0]


def error_of(text: str, name: str = "bad.xml") -> str:
    with pytest.raises(ConfigError) as info:
        loads(text, name)
    return str(info.value)


def hdf5_error(attrs: str, body: str = "") -> str:
    return error_of(f'<sensei>\n<transport type="hdf5" filename="f" {attrs}>{body}</transport>\n</sensei>')


# ---------------------------------------------------------------------------------------------------
# The seed's configurations, verbatim


def test_seed_hdf5_config_verbatim(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, "producer.xml", SEED_HDF5))
    assert isinstance(cfg, SenseiConfig)
    assert cfg.path == str(tmp_path / "producer.xml")
    assert cfg.analyses == []
    t = cfg.transport()
    assert t == TransportConfig.of("hdf5", "/burst/buffer/file", method="stream", collective=False,
                                   enabled=True, source=f"{tmp_path / 'producer.xml'}:3")
    assert t.partitioner == PartitionerConfig()
    assert t.mapped_from == ""


def test_seed_adios1_flexpath_maps_to_socket(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, "adios.xml", SEED_ADIOS1))
    t = cfg.transport()
    assert t.type == "socket"
    assert t.filename == "./test"
    assert t.enabled is True  # enabled="1 " with its trailing space
    assert t.mapped_from == 'adios1 method="FLEXPATH"'
    assert t.source.endswith("adios.xml:3")


@pytest.mark.parametrize("method", ["flexpath", " FlexPath "])
def test_adios1_flexpath_case_and_space(method: str) -> None:
    t = one_transport(f'type="adios1" filename="x" method="{method}"', tag="analysis")
    assert t.type == "socket" and t.mapped_from == f'adios1 method="{method.strip()}"'


def test_examples_all_load() -> None:
    files = sorted(EXAMPLES.glob("*.xml"))
    names = {f.name for f in files}
    assert {"producer.xml", "consumer.xml", "histogram.xml", "partitioner-block.xml", "partitioner-planar.xml",
            "partitioner-mapped.xml"} <= names
    assert (EXAMPLES / "producer.xml").read_text() == SEED_HDF5
    for f in files:
        cfg = load(f)
        assert cfg.transports or cfg.analyses, f
    assert load(EXAMPLES / "histogram.xml").analyses[0].file == "hist"
    assert load(EXAMPLES / "consumer.xml").transport().settings.group == "histograms"
    mapped = load(EXAMPLES / "partitioner-mapped.xml").transport().partitioner
    assert mapped.block_ids == list(range(8)) and mapped.block_owners == [0, 1] * 4


# ---------------------------------------------------------------------------------------------------
# SENSEI's <transport> and its partitioners


def test_consumer_default_partitioner_and_file_name() -> None:
    t = one_transport('type="hdf5" file_name=" /bb/run " method="s"')
    assert t.filename == "/bb/run"
    assert t.partitioner == PartitionerConfig(type="block")
    assert t.source == "t.xml:2"


def test_consumer_block_partitioner() -> None:
    t = one_transport('type="hdf5" file_name="f"', '<partitioner type="Block"/>')
    assert t.partitioner == PartitionerConfig(type="block")


def test_consumer_planar_partitioner() -> None:
    t = one_transport('type="hdf5" filename="f"', '<partitioner type="planar" plane_size=" 3"/>')
    assert t.partitioner == PartitionerConfig.of("planar", plane_size=3)
    assert one_transport('type="hdf5" filename="f"', '<partitioner type="planar"/>').partitioner.plane_size == 1


def test_consumer_mapped_partitioner() -> None:
    body = """
      <partitioner type="mapped">
        <block_id> 3, 1 2
                   0 </block_id>
        <block_owner>1,0,1,0</block_owner>
      </partitioner>"""
    t = one_transport('type="hdf5" filename="f"', body)
    assert t.partitioner == PartitionerConfig.of("mapped", block_ids=[3, 1, 2, 0], block_owners=[1, 0, 1, 0])


def test_mesh_requirements_are_accepted_and_ignored() -> None:
    body = """
      <mesh name="mesh" structure_only="0"> <cell_arrays>data</cell_arrays> <point_arrays>p, q</point_arrays> </mesh>
      <mesh name="other"/>
      <partitioner type="planar" plane_size="2"/>"""
    t = one_transport('type="hdf5" filename="test.h5" method="s" enabled="1"', body)
    assert t.partitioner.plane_size == 2


def test_several_transports_and_enabled_zero() -> None:
    cfg = loads('<sensei>\n<transport type="hdf5" filename="a" enabled="0"/>\n'
                '<transport type="socket" filename="b" enabled="TRUE"/>\n</sensei>', "two.xml")
    assert [t.enabled for t in cfg.transports] == [False, True]
    assert cfg.transport().filename == "b"
    assert [t.source for t in cfg.transports] == ["two.xml:2", "two.xml:3"]


def test_disabled_elements_are_still_validated() -> None:
    msg = error_of('<sensei><transport type="hdf5" filename="a" enabled="0" layout="n-m"/></sensei>')
    assert "'n-m'" in msg and "layout" in msg and "n-1, n-n" in msg


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("1", True), ("true", True), ("False", False),
                                                 (" 1 ", True)])
def test_booleans(value: str, expected: bool) -> None:
    assert one_transport(f'type="socket" filename="x" enabled="{value}"').enabled is expected


# ---------------------------------------------------------------------------------------------------
# method and the h5flow extensions


@pytest.mark.parametrize(("method", "collective"), [("s", False), ("stream", False), ("streaming", False),
                                                    ("sc", True), ("SC", True), (" sc ", True)])
def test_method_first_character(method: str, collective: bool) -> None:
    t = one_transport(f'type="hdf5" filename="f" method="{method}"')
    assert t.settings.method == method.strip()
    assert t.settings.collective is collective


def test_method_defaults_to_stream_and_collective_attribute() -> None:
    t = one_transport('type="hdf5" filename="f"')
    assert (t.settings.method, t.settings.collective) == ("stream", False)
    assert one_transport('type="hdf5" filename="f" method="stream" collective="1"').settings.collective is True
    assert one_transport('type="hdf5" filename="f" method="sc" collective="true"').settings.collective is True


@pytest.mark.parametrize("method", ["default", "d", "post-hoc", ""])
def test_non_streaming_method_is_refused(method: str) -> None:
    msg = hdf5_error(f'method="{method}"')
    assert msg.startswith("bad.xml:2: ")
    assert f"'{method}'" in msg and "only streams" in msg and "not offered" in msg
    assert "stream, s, sc" in msg


def test_method_and_collective_that_disagree() -> None:
    msg = hdf5_error('method="sc" collective="0"')
    assert msg.startswith("bad.xml:2: ") and 'method="sc"' in msg and 'collective="0"' in msg


def test_all_extensions() -> None:
    t = one_transport('type="hdf5" filename="f" layout="N-1" driver="subfiling" collective="1" queue_limit="4" '
                      'queue_policy="Discard" quota="512MiB" keep="all" heartbeat="0.25" poll_min="0.001" '
                      'poll_max="0.5" group="ana_1-b"')
    s = t.settings
    assert (s.layout, s.driver, s.collective) == ("n-1", "subfiling", True)
    assert one_transport('type="hdf5" filename="f" layout="N-N"').settings.layout == "n-n"
    assert (s.queue_limit, s.queue_policy, s.quota_bytes, s.keep) == (4, "discard", 512 * 2**20, "all")
    assert (s.heartbeat, s.poll_min, s.poll_max, s.group) == (0.25, 0.001, 0.5, "ana_1-b")


def test_extension_defaults() -> None:

    t = one_transport('type="hdf5" filename="f"')
    assert t.settings == TransportConfig().settings == Hdf5Settings()
    assert (t.settings.layout, t.settings.driver, t.settings.queue_limit, t.settings.queue_policy, t.settings.keep,
            t.settings.heartbeat, t.settings.group) == ("n-n", "mpio", 0, "block", "released", 1.0, "default")


# collective transfers and the subfiling driver only act on a shared file (layout n-1): left out, the layout
# follows them; an explicit n-n or log with them is refused (a setting is never silently ignored)
SHARED_ONLY = [('collective="true"', {"collective": True}), ('method="sc"', {"method": "sc"}),
               ('driver="subfiling"', {"driver": "subfiling"})]


@pytest.mark.parametrize(("attr", "keywords"), SHARED_ONLY, ids=["collective", "method-sc", "subfiling"])
def test_shared_file_settings_imply_n_1_when_layout_is_left_out(attr: str, keywords: dict[str, object]) -> None:

    assert one_transport('type="hdf5" filename="f"').settings.layout == "n-n"  # the default without them
    assert one_transport(f'type="hdf5" filename="f" {attr}').settings.layout == "n-1"
    assert Hdf5Settings().layout == "n-n"
    assert Hdf5Settings(**keywords).layout == "n-1"  # type: ignore[arg-type]
    assert TransportConfig.of("hdf5", "f", **keywords).settings.layout == "n-1"
    assert one_transport(f'type="hdf5" filename="f" layout="n-1" {attr}').settings.layout == "n-1"


@pytest.mark.parametrize("layout", ["n-n", "log"])
@pytest.mark.parametrize(("attr", "keywords"), SHARED_ONLY, ids=["collective", "method-sc", "subfiling"])
def test_shared_file_settings_with_another_layout_are_refused(attr: str, keywords: dict[str, object],
                                                              layout: str) -> None:

    msg = hdf5_error(f'layout="{layout}" {attr}')
    assert msg.startswith("bad.xml:2: "), msg
    assert f'{attr} only acts on a shared file (layout="n-1"), but layout="{layout}" writes' in msg, msg
    assert f'give layout="n-1" (or leave layout out: {attr} then implies it), or drop {attr}' in msg, msg
    with pytest.raises(ValueError, match=f'only acts on a shared file .* but layout="{layout}"'):
        Hdf5Settings(layout=layout, **keywords)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='give layout="n-1"'):
        TransportConfig.of("hdf5", "f", layout=layout, **keywords)


@pytest.mark.parametrize(("quota", "nbytes"), [("0", 0), ("1048576", 2**20), ("512MiB", 512 * 2**20),
                                               ("2GiB", 2 * 2**30), ("100MB", 100 * 10**6), ("1.5 KiB", 1536),
                                               ("7kb", 7000), ("3 TB", 3 * 10**12), ("1tib", 2**40), ("10B", 10)])
def test_quota_units(quota: str, nbytes: int) -> None:
    assert one_transport(f'type="hdf5" filename="f" quota="{quota}"').settings.quota_bytes == nbytes


@pytest.mark.parametrize(("attr", "fragments"), [
    ('layout="n-2"', ["'n-2'", "'layout'", "n-1, n-n"]),
    ('driver="posix"', ["'posix'", "'driver'", "mpio, subfiling"]),
    ('collective="yes"', ["'yes'", "'collective'", "0, 1, true, false"]),
    ('enabled="2"', ["'2'", "'enabled'", "0, 1, true, false"]),
    ('queue_limit="-1"', ["'-1'", "'queue_limit'", "integer >= 0"]),
    ('queue_limit="1.5"', ["'1.5'", "integer >= 0"]),
    ('queue_policy="drop"', ["'drop'", "block, discard"]),
    ('quota="12 parsecs"', ["'12 parsecs'", "'quota'", "KiB", "512MiB"]),
    ('quota="-1GiB"', ["'-1GiB'", "'quota'"]),
    ('keep="none"', ["'none'", "released, all"]),
    ('heartbeat="0"', ["'0'", "'heartbeat'", "a number of seconds from"]),
    ('heartbeat="inf"', ["'inf'", "a number of seconds from"]),
    ('poll_min="abc"', ["'abc'", "'poll_min'", "a number of seconds from"]),
    ('poll_max="-1"', ["'-1'", "'poll_max'"]),
    ('group="my group"', ["'my group'", "'group'", "letters, digits, '-' and '_'"]),
    ('group=""', ["''", "'group'"]),
])
def test_bad_extension_values(attr: str, fragments: list[str]) -> None:
    msg = hdf5_error(attr)
    assert msg.startswith("bad.xml:2: bad value ")
    assert '<transport type="hdf5">' in msg
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)


def test_poll_min_above_poll_max() -> None:
    msg = hdf5_error('poll_min="0.5" poll_max="0.1"')
    assert msg.startswith("bad.xml:2: ") and "poll_min 0.5" in msg and "poll_max 0.1" in msg and "<=" in msg
    msg = hdf5_error('poll_min="0.5"')  # against the default poll_max
    assert "poll_max 0.02" in msg


# ---------------------------------------------------------------------------------------------------
# socket, adios2 and adios1


def test_socket_transport() -> None:
    t = one_transport('type="socket" filename="stream" queue_limit="2" group="g" heartbeat="3"',
                      '<partitioner type="planar" plane_size="4"/>')
    s = t.settings
    assert (t.type, t.filename, s.queue_limit, s.group, s.heartbeat) == ("socket", "stream", 2, "g", 3.0)
    assert t.partitioner.plane_size == 4 and t.mapped_from == ""


@pytest.mark.parametrize(("engine", "expected"), [("sst", "sst"), ("SST", "sst"), ("bp5", "bp5"), ("BP5", "bp5")])
def test_adios2_engines(engine: str, expected: str) -> None:
    t = one_transport(f'type="adios2" filename="test.bp" engine="{engine}"', tag="analysis")
    assert (t.type, t.settings.engine, t.filename) == ("adios2", expected, "test.bp")


def test_adios2_buffer_settings_map_to_queue() -> None:
    t = one_transport('type="adios2" filename="x" engine="sst" buffer_size="8" buffer_mode="Discard"')
    assert (t.settings.queue_limit, t.settings.queue_policy) == (8, "discard")
    t = one_transport('type="adios2" filename="x" queue_limit="3" queue_policy="block"')
    assert (t.settings.engine, t.settings.queue_limit, t.settings.queue_policy) == ("sst", 3, "block")


def test_adios2_bp4_is_refused() -> None:
    msg = error_of('<sensei>\n\n<transport type="adios2" filename="x" engine="BP4"/></sensei>', "a2.xml")
    assert msg.startswith("a2.xml:3: ") and "'BP4'" in msg and "BP4 is not offered; use bp5" in msg


def test_adios2_other_engine_is_refused() -> None:
    msg = error_of('<sensei><transport type="adios2" filename="x" engine="ssc"/></sensei>')
    assert "'ssc'" in msg and "accepted: sst, bp5" in msg


def test_adios2_buffer_bad_values_and_conflict() -> None:
    msg = error_of('<sensei><transport type="adios2" filename="x" buffer_mode="overwrite"/></sensei>')
    assert "'overwrite'" in msg and "'buffer_mode'" in msg and "block, discard" in msg
    msg = error_of('<sensei><transport type="adios2" filename="x" buffer_size="-2"/></sensei>')
    assert "'buffer_size'" in msg and "integer >= 0" in msg
    msg = error_of('<sensei><transport type="adios2" filename="x" buffer_size="2" queue_limit="2"/></sensei>')
    assert "both 'buffer_size' and 'queue_limit'" in msg and "give one of them" in msg


def test_adios2_engine_parameters_are_refused() -> None:
    msg = error_of('<sensei><transport type="adios2" filename="x">\n'
                   '<engine_parameters>QueueLimit = 2</engine_parameters></transport></sensei>')
    assert msg.startswith("bad.xml:2: unknown element <engine_parameters>")
    assert "not passed through" in msg and "accepted: <mesh>, <partitioner>" in msg


@pytest.mark.parametrize("method", ["BP", "MPI", "DATASPACES", "dimes"])
def test_adios1_other_methods_are_refused(method: str) -> None:
    msg = error_of(f'<sensei>\n<analysis type="adios1" filename="./test"\n  method="{method}" enabled="1"/></sensei>')
    assert msg.startswith("bad.xml:3: ")  # the line of the method attribute
    assert f"'{method}'" in msg and "accepted: FLEXPATH" in msg and "hdf5" in msg


def test_adios1_needs_a_method() -> None:
    msg = error_of('<sensei><analysis type="adios1" filename="./test"/></sensei>')
    assert "missing attribute 'method'" in msg and "FLEXPATH" in msg


def test_attributes_of_other_transports_are_named() -> None:
    msg = error_of('<sensei><transport type="socket" filename="x" engine="sst"/></sensei>')
    assert "unknown attribute 'engine' on <transport type=\"socket\">" in msg and 'type="adios2"' in msg
    msg = error_of('<sensei><transport type="adios2" filename="x" layout="n-n"/></sensei>')
    assert "unknown attribute 'layout'" in msg and 'type="hdf5"' in msg


# ---------------------------------------------------------------------------------------------------
# Analyses


def test_histogram_analysis(tmp_path: Path) -> None:
    text = ('<sensei>\n  <analysis type="histogram" mesh="mesh" array="data" association="point" bins=" 32 "\n'
            '            file="out/hist" enabled="1"/>\n</sensei>\n')
    cfg = load(write(tmp_path, "histogram.xml", text))
    assert cfg.transports == []
    assert cfg.analyses == [AnalysisConfig.of("histogram", mesh="mesh", array="data", association="point", bins=32,
                                              file="out/hist", enabled=True,
                                           source=f"{tmp_path / 'histogram.xml'}:2")]


def test_histogram_defaults_and_disabled() -> None:
    (a,) = loads('<sensei><analysis type="Histogram" enabled="false"/></sensei>').analyses
    assert (a.mesh, a.array, a.association, a.bins, a.file, a.enabled) == ("mesh", "data", "cell", 10, None, False)
    assert a.source == "<string>:1"


@pytest.mark.parametrize(("attr", "fragments"), [
    ('bins="0"', ["'0'", "'bins'", "integer >= 1"]),
    ('bins="ten"', ["'ten'", "integer >= 1"]),
    ('association="edge"', ["'edge'", "'association'", "cell, point"]),
    ('file=""', ["'file'", "non-empty"]),
    ('array=" "', ["'array'", "non-empty"]),
])
def test_histogram_bad_values(attr: str, fragments: list[str]) -> None:
    msg = error_of(f'<sensei>\n<analysis type="histogram" {attr}/></sensei>', "h.xml")
    assert msg.startswith("h.xml:2: ") and '<analysis type="histogram">' in msg
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)


def test_histogram_unknown_attribute() -> None:
    msg = error_of('<sensei>\n<analysis type="histogram" bin="3"/></sensei>', "h.xml")
    assert msg.startswith("h.xml:2: unknown attribute 'bin' on <analysis type=\"histogram\">")
    assert "did you mean 'bins'?" in msg
    assert "accepted: array, association, bins, enabled, file, mesh, type" in msg


def test_unknown_analysis_type() -> None:
    msg = error_of('<sensei>\n<analysis type="catalyst" pipeline="x.py"/></sensei>')
    assert msg.startswith("bad.xml:2: bad value 'catalyst' for attribute 'type'")
    assert "accepted: adios1, adios2, hdf5, histogram, null, python, socket" in msg


def test_plugin_analysis_gets_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(analyses.registry._items, "xmltest-stats", lambda: analyses.Analysis)
    (a,) = loads('<sensei><analysis type="xmltest-stats" array="pressure" order=" 2 " enabled="1"/></sensei>').analyses
    assert (a.type, a.array, a.mesh, a.params, a.enabled) == ("xmltest-stats", "pressure", "mesh", {"order": "2"},
                                                               True)


def test_histogram_on_transport_is_refused() -> None:
    msg = error_of('<sensei><transport type="histogram"/></sensei>')
    assert "'histogram'" in msg and "accepted: adios1, adios2, hdf5, null, socket" in msg and "<analysis>" in msg


# ---------------------------------------------------------------------------------------------------
# Structure errors: unknown names, missing attributes, partitioners


def test_unknown_attribute_names_file_line_and_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "producer.xml", '<sensei>\n<transport type="hdf5" filenme="f"/>\n</sensei>')
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value) == (f"{path}:2: unknown attribute 'filenme' on <transport type=\"hdf5\">; "
                               f"did you mean 'filename'? accepted: {HDF5_ACCEPTED}")
    assert info.value.path == str(path) and info.value.line == 2


def test_unknown_attribute_on_a_later_line_of_the_tag() -> None:
    msg = error_of('<sensei>\n<transport type="hdf5"\n   filename="f"\n   colective="1"/>\n</sensei>')
    assert msg.startswith("bad.xml:4: unknown attribute 'colective'")


@pytest.mark.parametrize("attrs", ['type="hdf5"', 'type="socket"', 'type="adios2"', 'type="adios1" method="FLEXPATH"'])
def test_missing_filename(attrs: str) -> None:
    msg = error_of(f"<sensei>\n<transport {attrs}/></sensei>")
    assert msg.startswith("bad.xml:2: missing attribute 'filename'"), msg
    assert 'give filename="..."' in msg


def test_blank_filename() -> None:
    msg = error_of('<sensei><transport type="hdf5" filename="  "/></sensei>')
    assert "bad value '  ' for attribute 'filename'" in msg


def test_filename_and_file_name_together() -> None:
    msg = hdf5_error('file_name="g"')
    assert "both 'filename' and 'file_name'" in msg and "give one of them" in msg


@pytest.mark.parametrize("tag", ["transport", "analysis"])
def test_missing_type(tag: str) -> None:
    msg = error_of(f'<sensei>\n\n<{tag} filename="f"/></sensei>')
    assert msg.startswith(f"bad.xml:3: missing attribute 'type' on <{tag}>")
    assert "accepted: adios1, adios2, hdf5, null, socket" in msg


def test_unknown_elements() -> None:
    msg = error_of('<sensei>\n<transprot type="hdf5"/></sensei>')
    assert msg.startswith("bad.xml:2: unknown element <transprot> inside <sensei>")
    assert "accepted: <analysis>, <transport>" in msg
    msg = error_of('<sensei><transport type="hdf5" filename="f">\n\n<partition type="block"/></transport></sensei>')
    assert msg.startswith("bad.xml:3: unknown element <partition>") and "<partitioner>" in msg
    msg = error_of('<sensei><analysis type="histogram">\n<mesh name="m"/></analysis></sensei>')
    assert msg.startswith("bad.xml:2: unknown element <mesh> inside <analysis type=\"histogram\">")


def test_root_must_be_sensei() -> None:
    msg = error_of('<?xml version="1.0"?>\n<config><transport type="hdf5" filename="f"/></config>')
    assert msg.startswith("bad.xml:2: the root element is <config>") and "<sensei>" in msg
    msg = error_of('<sensei version="5"/>')
    assert "unknown attribute 'version' on <sensei>" in msg and "takes no attributes" in msg


def test_loose_text_is_refused() -> None:
    msg = error_of('<sensei>\n<transport type="hdf5" filename="f">\n\n  method=s\n</transport></sensei>')
    assert msg.startswith("bad.xml:4: unexpected text 'method=s'") and "attributes" in msg


def test_partitioner_errors() -> None:
    msg = hdf5_error("", '\n<partitioner type="planar_slice" point="0 0 0"/>')
    assert msg.startswith("bad.xml:3: bad value 'planar_slice' for attribute 'type'")
    assert "accepted: block, mapped, planar" in msg
    msg = hdf5_error("", "<partitioner/>")
    assert "missing attribute 'type' on <partitioner>" in msg and "block, mapped, planar" in msg
    msg = hdf5_error("", '<partitioner type="planar" cycle_size="2"/>')
    assert "unknown attribute 'cycle_size'" in msg and "use plane_size" in msg
    msg = hdf5_error("", '<partitioner type="planar" plane_size="0"/>')
    assert "'0'" in msg and "'plane_size'" in msg and "integer >= 1" in msg
    msg = hdf5_error("", '<partitioner type="block" plane_size="2"/>')
    assert "unknown attribute 'plane_size' on <partitioner type=\"block\">; accepted: type" in msg
    msg = hdf5_error("", '<partitioner type="block"/>\n<partitioner type="planar"/>')
    assert msg.startswith("bad.xml:3: a second <partitioner>") and "line 2" in msg
    msg = hdf5_error("", '<partitioner type="block"><block_id>1</block_id></partitioner>')
    assert "unknown element <block_id> inside <partitioner type=\"block\">" in msg


def mapped_error(lists: str) -> str:
    return error_of(f'<sensei><transport type="hdf5" filename="f">\n<partitioner type="mapped">\n{lists}\n'
                    "</partitioner></transport></sensei>", "map.xml")


def test_mapped_partitioner_errors() -> None:
    msg = mapped_error("<block_id>0 1 2</block_id>\n<block_owner>0 1</block_owner>")
    assert msg.startswith("map.xml:4: <block_owner> lists 2 ranks but <block_id> (line 3) lists 3 blocks")
    msg = mapped_error("<block_id>0 1\n 2 x</block_id>\n<block_owner>0 1 0 1</block_owner>")
    assert msg.startswith("map.xml:4: bad value 'x' in <block_id>") and "integers >= 0" in msg
    msg = mapped_error("<block_id>0 1</block_id>\n<block_owner>0 -1</block_owner>")
    assert "bad value '-1' in <block_owner>" in msg
    msg = mapped_error("<block_id>0 1\n\n1</block_id>\n<block_owner>0 1 0</block_owner>")
    assert msg.startswith("map.xml:5: block id 1 is listed twice") and "first on line 3" in msg
    msg = mapped_error("<block_id>0 1</block_id>")
    assert msg.startswith("map.xml:2: missing <block_owner>") and "<block_id>0 1 2</block_id>" in msg
    msg = mapped_error("<block_id>0</block_id><block_owner>0</block_owner><block_id>1</block_id>")
    assert "a second <block_id>" in msg
    msg = mapped_error("<block_id> , </block_id><block_owner></block_owner>")
    assert msg.startswith("map.xml:3: empty <block_id>")
    msg = mapped_error('<block_id at="1">0</block_id><block_owner>0</block_owner>')
    assert "unknown attribute 'at' on <block_id>" in msg
    msg = mapped_error("<block_id><v>0</v></block_id><block_owner>0</block_owner>")
    assert "unknown element <v> inside <block_id>" in msg


# ---------------------------------------------------------------------------------------------------
# Files and malformed XML


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.xml"
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: cannot read the configuration file")
    assert "check the path" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("text", "line", "what"), [
    ('<sensei>\n<transport type="hdf5" filename="f">\n</sensei>', 3, "mismatched tag"),
    ('<sensei>\n\n<transport type="hdf5" filename="f" filename="g"/></sensei>', 3, "duplicate attribute"),
    ('<sensei>\n<transport type=hdf5/></sensei>', 2, "not well-formed"),
    ("", 1, "no element found"),
    ("<sensei/>\n<sensei/>", 2, "junk after document element"),
])
def test_malformed_xml(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = write(tmp_path, "broken.xml", text)
    with pytest.raises(ConfigError) as info:
        load(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: malformed XML: {what}"), msg
    assert "fix the XML syntax" in msg and info.value.line == line


def test_empty_sensei_and_string_path() -> None:
    cfg = loads("<sensei> <!-- nothing yet --> </sensei>")
    assert cfg == SenseiConfig(path="<string>")
    with pytest.raises(ValueError, match="expected exactly one enabled transport"):
        cfg.transport()


def test_encodings(tmp_path: Path) -> None:
    path = tmp_path / "latin1.xml"
    path.write_bytes('<?xml version="1.0" encoding="ISO-8859-1"?>\n<sensei>\n'
                     '<transport type="hdf5" filename="/données/f"/></sensei>'.encode("latin-1"))
    assert load(path).transport().filename == "/données/f"
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<sensei>\n<transport type="hdf5" filename="/données"\n' \
           '  keep="tout"/></sensei>'
    msg = error_of(text)
    assert msg.startswith("bad.xml:4: bad value 'tout'")  # the attribute's own line, after non-ASCII text


@pytest.mark.parametrize("kind", ["hdf5", "socket"])
def test_dead_consumer_is_read_and_checked(tmp_path: Path, kind: str) -> None:
    """The one setting for a dead consumer group, the same name and values for hdf5 and socket."""
    path = write(tmp_path, "p.xml", f'<sensei>\n<transport type="{kind}" filename="f" dead_consumer="drop"/>\n</sensei>')
    assert load(path).transport().settings.dead_consumer == "drop"
    path = write(tmp_path, "q.xml", f'<sensei>\n<transport type="{kind}" filename="f"/>\n</sensei>')
    assert load(path).transport().settings.dead_consumer == "wait"
    path = write(tmp_path, "r.xml", f'<sensei>\n<transport type="{kind}" filename="f" dead_consumer="retry"/>\n</sensei>')
    with pytest.raises(ConfigError) as info:
        load(path)
    assert "dead_consumer" in str(info.value) and "wait, drop, error" in str(info.value), info.value
