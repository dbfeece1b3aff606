"""The README's "stream your own simulation" and Python-analysis examples, and examples/heat2d + examples/analysis,
run as a user would: producers and consumers as two concurrent ``mpiexec`` jobs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HEAT = ROOT / "examples" / "heat2d"
MEAN_MAX = ROOT / "examples" / "analysis" / "mean_max.py"


def _block(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```", text, re.S)
    assert m, f"README.md has no code block after <!-- {marker} -->"
    return m.group(1)


def _both(producer: list[str], consumer: list[str], cwd: Path, timeout: float = 180) -> tuple[str, str]:
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd in (consumer, producer)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    cons, prod = outs
    assert procs[1].returncode == 0, f"producer failed:\n{prod}"
    assert procs[0].returncode == 0, f"consumer failed:\n{cons}"
    return prod, cons


def test_readme_producer_and_consumer(tmp_path: Path) -> None:
    stream = str(tmp_path / "my-sim")
    (tmp_path / "my_sim.py").write_text(_block("readme-producer").replace("/dev/shm/my-sim", stream))
    (tmp_path / "my_reader.py").write_text(_block("readme-consumer").replace("/dev/shm/my-sim", stream))
    _, out = _both(["mpiexec", "-n", "2", sys.executable, "my_sim.py"],
                   ["mpiexec", "-n", "1", sys.executable, "my_reader.py"], tmp_path)
    lines = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [int(x[0]) for x in lines] == list(range(10)), out
    # rank 0's rows hold t + 1, rank 1's rows 1 + t + 1: the whole plate's mean is t + 1.5
    assert [float(x[-1]) for x in lines] == [t + 1.5 for t in range(10)], out


def test_readme_python_analysis_with_h5flow_consume(tmp_path: Path) -> None:
    stream = str(tmp_path / "my-sim")
    (tmp_path / "my_sim.py").write_text(_block("readme-producer").replace("/dev/shm/my-sim", stream))
    xml = _block("readme-analysis").replace("/dev/shm/my-sim", stream).replace(
        "examples/analysis/mean_max.py", str(MEAN_MAX))
    (tmp_path / "analysis.xml").write_text(xml)
    _both(["mpiexec", "-n", "2", sys.executable, "my_sim.py"],
          ["mpiexec", "-n", "2", sys.executable, "-m", "h5flow.cli", "consume", "analysis.xml", "--quiet"], tmp_path)
    got = [json.loads(line) for line in (tmp_path / "mean_max.jsonl").read_text().splitlines()]
    assert [(r["step"], r["mean"], r["max"]) for r in got] == [(t, t + 1.5, t + 2.0) for t in range(10)]


def test_heat2d_example_with_python_analysis(tmp_path: Path) -> None:
    """examples/heat2d on 2 ranks → ``h5flow consume`` on 1 rank running examples/analysis/mean_max.py;
    equal to the serial computation; then examples/heat2d/consume.py on 2 ranks reads a second run."""
    sys.path.insert(0, str(HEAT))
    try:
        import heat2d
    finally:
        sys.path.remove(str(HEAT))
    ny, nx, steps = 11, 9, 6
    ref = heat2d.serial(ny, nx, steps)
    stream = tmp_path / "heat"
    (tmp_path / "c.xml").write_text(
        f'<sensei>\n  <transport type="hdf5" filename="{stream}"/>\n'
        f'  <analysis type="python" script="{MEAN_MAX}" array="temperature" out="{tmp_path / "out.jsonl"}"/>\n'
        "</sensei>\n")
    producer = ["mpiexec", "-n", "2", sys.executable, str(HEAT / "heat2d.py"), str(stream), "--steps", str(steps),
                "--shape", str(ny), str(nx)]
    _both(producer, ["mpiexec", "-n", "1", sys.executable, "-m", "h5flow.cli", "consume", "c.xml", "--quiet"],
          tmp_path)
    got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == list(range(steps))
    for r, field in zip(got, ref, strict=True):
        assert np.isclose(r["mean"], field.mean(), rtol=1e-12) and r["max"] == field.max()
    # the same stream name again (a new run), read by the example consumer on 2 ranks
    _, out = _both(producer, ["mpiexec", "-n", "2", sys.executable, str(HEAT / "consume.py"), str(stream)], tmp_path)
    means = [float(line.split()[5]) for line in out.splitlines() if line.startswith("step ")]
    assert np.allclose(means, [f.mean() for f in ref], rtol=1e-6), out
