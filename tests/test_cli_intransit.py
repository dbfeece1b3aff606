"""The in-transit commands end to end: `h5flow run`, `h5flow plot`, XML errors at the door."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEED_PRODUCER = """<sensei>
<analysis type="hdf5" filename="{path}"
method="stream" enabled="1" />
</sensei>
"""


def _h5flow(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_run_seed_producer_config_with_sensei_style_consumer_files(tmp_path: Path) -> None:
    """The seed's producer XML (only the path differs), a SENSEI consumer transport file and an analysis file."""
    stream = tmp_path / "bb" / "file"
    stream.parent.mkdir()
    producer = tmp_path / "producer.xml"
    producer.write_text(SEED_PRODUCER.format(path=stream))
    consumer = tmp_path / "consumer.xml"
    consumer.write_text(f'<sensei><transport type="hdf5" file_name="{stream}" method="s">'
                        '<partitioner type="planar" plane_size="1"/></transport></sensei>')
    analysis = tmp_path / "analysis.xml"
    analysis.write_text(f'<sensei><analysis type="histogram" mesh="mesh" array="data" association="cell" '
                        f'bins="7" file="{tmp_path / "hist"}"/></sensei>')
    out = tmp_path / "run.json"
    proc = _h5flow("run", str(producer), "--consumer-config", str(consumer), "-a", str(analysis), "-M", "2",
                   "-N", "2", "--steps", "3", "--shape", "16", "16", "16", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    for key, value in (("transport", "hdf5"), ("producers", 2), ("consumers", 2), ("steps", 3), ("layout", "n-n"),
                       ("driver", "mpio")):  # the seed's producer.xml gives no layout: the default, n-n
        assert record[key] == value
    assert record["settings"]["layout"] == "n-n" and record["settings"]["queue_limit"] == 0  # hdf5's own settings
    assert record["bytes"] > 16**3 * 4 * 3 and record["time_to_solution"] > 0
    assert record["latency"]["count"] == 3 and record["latency"]["median_s"] >= 0
    for r in record["producer"]["ranks"] + record["consumer"]["ranks"]:
        assert len(r["rss"]) >= 2  # memory sampled over time on every rank
    # SENSEI's histogram file format, one file per step
    text = (tmp_path / "hist_mesh_data_2.txt").read_text().splitlines()
    assert text[0].startswith("step : 2") and text[2] == "num bins : 7"
    assert sum(int(c) for c in text[5].split(":")[1].split()) == 16**3
    assert "time to solution" in proc.stdout

    pngs = _h5flow("plot", str(out), "--out", str(tmp_path / "plots"))
    assert pngs.returncode == 0, pngs.stderr
    files = sorted(Path(p).name for p in pngs.stdout.split())
    assert files == ["run-fig3-memory.png", "run-fig4-progress.png"]
    assert all((tmp_path / "plots" / f).stat().st_size > 10_000 for f in files)


def test_bad_xml_is_refused_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text('<sensei>\n  <transport type="hdf5" filenme="/x" />\n</sensei>\n')
    proc = _h5flow("run", str(bad), "--steps", "1")
    assert proc.returncode != 0
    assert "bad.xml:2" in proc.stderr and "filename" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plot_refuses_a_file_that_is_not_a_run_record(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text("{}")
    proc = _h5flow("plot", str(p))
    assert proc.returncode != 0 and "not an h5flow run record" in proc.stderr


def test_seed_config_verbatim_names_the_missing_burst_buffer() -> None:
    """The seed's file, byte for byte: it parses, and on a machine without /burst/buffer the producer says
    what is missing instead of creating directories outside any container."""
    seed = EXAMPLES / "config" / "producer.xml"
    assert 'filename="/burst/buffer/file"' in seed.read_text()
    if Path("/burst/buffer").exists():
        return  # a machine with that burst buffer runs it for real
    proc = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-m", "h5flow.cli", "produce", str(seed),
                           "--steps", "1", "--shape", "8", "8", "8"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "/burst/buffer" in proc.stderr and "does not exist" in proc.stderr, proc.stderr
    assert not Path("/burst").exists()
