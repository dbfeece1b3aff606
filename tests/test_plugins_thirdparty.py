"""A third-party transport and partitioner (tests/plugins/h5flow_dirstream) named in XML with no change to
h5flow: registered with register() in this process, and through entry points for `h5flow run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

PLUGINS = Path(__file__).resolve().parent / "plugins"
sys.path.insert(0, str(PLUGINS))

import h5flow_dirstream as plugin  # noqa: E402


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin registered with register(); the registries are restored after the test."""
    from h5flow import analyses, partitioners, transports

    for reg in (transports.registry, partitioners.registry, analyses.registry):
        monkeypatch.setattr(reg, "_items", dict(reg._items))
    plugin.register_all()


def _xml(stream: Path, attrs: str = 'poll="0.002" label="from-xml" sync="1"', part: str = 'stride="2"') -> str:
    return (f'<sensei>\n<transport type="dirstream" filename="{stream}"\n  {attrs}>\n'
            f'  <partitioner type="reverse" {part}/>\n</transport>\n</sensei>\n')


def test_registered_transport_and_partitioner_from_xml_through_the_api(tmp_path: Path, registered: None) -> None:
    import h5flow
    from h5flow.xmlconfig import load
    from mpi4py import MPI

    xml = tmp_path / "run.xml"
    xml.write_text(_xml(tmp_path / "s"))
    cfg = load(xml).transport()
    assert cfg.type == "dirstream" and cfg.filename == str(tmp_path / "s")
    assert cfg.settings == plugin.DirSettings(poll=0.002, label="from-xml", sync=True)
    assert cfg.partitioner.type == "reverse" and cfg.partitioner.params == {"stride": "2"}

    data = np.arange(6 * 4 * 5, dtype=np.float32).reshape(6, 4, 5)
    with h5flow.open(xml, "w", comm=MPI.COMM_SELF) as s:
        for t in range(2):
            with s.step(t) as st:
                for z in range(0, 6, 2):  # three pieces: three blocks
                    st.write("t", data[z:z + 2] + t, offset=(z, 0, 0), global_shape=data.shape)
    assert json.loads((tmp_path / "s.dirstream" / "settings.json").read_text())["label"] == "from-xml"
    seen = []
    with h5flow.open(xml, "r", comm=MPI.COMM_SELF) as r:
        assert isinstance(r.reader.partitioner, plugin.ReversePartitioner) and r.reader.partitioner.stride == 2
        for st in r.steps(timeout=10):
            np.testing.assert_array_equal(st.read("t").array(), data + st.step)
            seen.append(st.step)
    assert seen == [0, 1]

    # the transport's own settings as keywords of h5flow.open
    with h5flow.open(str(tmp_path / "k"), "w", comm=MPI.COMM_SELF, type="dirstream", label="kw", copies=2) as w:
        assert w.config.settings == plugin.DirSettings(label="kw", copies=2)
    with pytest.raises(TypeError, match=r"unknown transport setting\(s\) \['colour'\]; accepted: .*copies.*label"):
        h5flow.open(str(tmp_path / "k"), "w", comm=MPI.COMM_SELF, type="dirstream", colour="red")


@pytest.mark.parametrize(("attrs", "part", "message"), [
    ('poll="5"', "", r"x.xml:3: bad value '5' for attribute 'poll' on <transport type=\"dirstream\">; "
                     r"accepted: a number from 0.001 to 1$"),
    ('copies="9"', "", r"x.xml:3: bad value '9' for attribute 'copies'.*accepted: an integer from 1 to 4$"),
    ('sync="maybe"', "", r"x.xml:3: bad value 'maybe' for attribute 'sync'.*accepted: 0, 1, true, false$"),
    ('pol="1"', "", r"x.xml:3: unknown attribute 'pol' on <transport type=\"dirstream\">; did you mean 'poll'\? "
                    r"accepted: copies, enabled, filename, label, poll, sync, type$"),
    ('layout="n-n"', "", r"x.xml:3: unknown attribute 'layout'.*'layout' belongs to type=\"hdf5\""),
    ('label="forbidden"', "", r"x.xml:2: settings refused on <transport type=\"dirstream\">: label 'forbidden' is "
                              r"reserved; give another label; accepted attributes: copies, label, poll, sync$"),
    ("", 'stride="0"', r"x.xml:4: <partitioner type=\"reverse\"> refused its settings: stride '0'; accepted: an "
                       r"integer >= 1"),
    ("", 'strid="2"', r"x.xml:4: <partitioner type=\"reverse\"> refused its settings: unknown setting\(s\) "
                      r"\['strid'\]; accepted: stride"),
])
def test_plugin_settings_are_checked_with_file_and_line(tmp_path: Path, registered: None, attrs: str, part: str,
                                                        message: str) -> None:
    from h5flow.xmlconfig import ConfigError, loads

    with pytest.raises(ConfigError, match=message):
        loads(_xml(tmp_path / "s", attrs, part), "x.xml")


def test_registered_names_are_listed_in_type_errors(tmp_path: Path, registered: None) -> None:
    from h5flow.xmlconfig import ConfigError, loads

    with pytest.raises(ConfigError, match=r"accepted: adios1, adios2, dirstream, hdf5, null, socket"):
        loads('<sensei><transport type="dirstreem" filename="x"/></sensei>')
    with pytest.raises(ConfigError, match=r"\(partitioner type\); accepted: block, mapped, planar, reverse$"):
        loads('<sensei><transport type="hdf5" filename="x"><partitioner type="revers"/></transport></sensei>')


def test_entry_point_plugin_runs_from_xml_with_h5flow_run(tmp_path: Path) -> None:
    """Entry points only (a dist-info on PYTHONPATH): 2 producers → dirstream → 2 consumers, reverse partitioner."""
    site = tmp_path / "site"
    plugin.install_entry_points(site)
    stream = tmp_path / "s"
    xml = tmp_path / "run.xml"
    xml.write_text(_xml(stream, attrs='label="entry-point"', part='stride="1"'))
    analysis = tmp_path / "analysis.xml"
    analysis.write_text('<sensei><analysis type="owned-blocks" mesh="mesh"/></sensei>')
    stale = stream.parent / "s.dirstream" / "step000000"  # an earlier run's step: cleanup() must remove it
    stale.mkdir(parents=True)
    (stale / "complete").write_text("not json")
    out = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), str(site), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "run", str(xml), "-a", str(analysis), "-M", "2",
                           "-N", "2", "--steps", "2", "--shape", "8", "8", "8", "--json", str(out)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    assert (record["transport"], record["steps_consumed"], record["status"]) == ("dirstream", 2, "end_of_stream")
    assert record["latency"]["count"] == 2  # the plugin's telemetry reached the run record
    blocks = record["producer"]["blocks"]
    owned = record["consumer"]["last_results"][0]
    assert owned["step"] == 1 and blocks >= 2
    assert owned["owned"] == [list(range(1, blocks, 2)), list(range(0, blocks, 2))]  # reverse, stride 1
    assert json.loads((stream.parent / "s.dirstream" / "settings.json").read_text())["label"] == "entry-point"
    # the record names the transport's own settings, not hdf5's layout and driver
    assert record["settings"] == record["producer"]["settings"] == asdict(plugin.DirSettings(label="entry-point"))
    assert "layout" not in record and "driver" not in record and "layout" not in record["producer"]
    assert "dirstream (poll 0.005," in proc.stdout  # the summary prints them too


def test_registration_forms_and_mistakes(registered: None) -> None:
    from h5flow import partitioners, transports
    from h5flow.config import TransportConfig
    from h5flow.transports import TransportSettings, entry, register, registry
    from mpi4py import MPI

    registry.register("pair", lambda: (plugin.DirWriter, plugin.DirReader))  # an entry point's (writer, reader)
    assert entry("pair").classes() == (plugin.DirWriter, plugin.DirReader) and entry("pair").settings is TransportSettings
    registry.register("notone", lambda: 42)
    with pytest.raises(TypeError, match=r"transport 'notone' is registered as 42; register a TransportEntry"):
        entry("notone")
    with pytest.raises(TypeError, match=r"give writer= and reader= classes, or load="):
        register("half", plugin.DirWriter)
    with pytest.raises(TypeError, match=r"settings= must be a TransportSettings dataclass subclass"):
        register("bad", plugin.DirWriter, plugin.DirReader, settings=dict)  # type: ignore[arg-type]
    register("swapped", plugin.DirReader, plugin.DirWriter)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must return \(Writer subclass, Reader subclass\)"):
        transports.open_writer(MPI.COMM_SELF, TransportConfig(type="swapped", filename="x"))
    with pytest.raises(TypeError, match=r"a partitioner must subclass h5flow.partitioners.Partitioner"):
        partitioners.register("nope", dict)  # type: ignore[arg-type]


def test_a_config_built_in_code_gets_the_transports_default_settings(tmp_path: Path, registered: None) -> None:
    from h5flow.config import TransportConfig
    from h5flow.transports import open_writer
    from mpi4py import MPI

    cfg = TransportConfig(type="dirstream", filename=str(tmp_path / "s"))
    assert cfg.settings == plugin.DirSettings()  # set at construction: never None
    with open_writer(MPI.COMM_SELF, cfg) as w:
        assert w.config.settings is cfg.settings and w.settings is cfg.settings
    with pytest.raises(TypeError, match=r"settings=DirSettings\(\.\.\.\) given for transport 'hdf5', whose "
                                        r"settings are Hdf5Settings"):
        TransportConfig(type="hdf5", filename="x", settings=plugin.DirSettings())
    assert TransportConfig.of("dirstream", "x", label="kw").settings == plugin.DirSettings(label="kw")
