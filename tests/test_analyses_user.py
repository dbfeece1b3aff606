"""Analyses users write: ``<analysis type="python" script=...>`` and analyses registered from code, named in XML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (8, 6, 5)
STEPS = 3


class ScaledSum:
    """A registered analysis: the global sum of an array times ``scale`` (an extra XML attribute)."""

    def __init__(self, cfg: Any) -> None:
        self.array, self.mesh = cfg.array, cfg.mesh
        self.scale = float(cfg.params["scale"])

    def initialize(self, comm: Any) -> None:
        self.comm = comm

    def execute(self, step: Any) -> Any:
        local = sum(float(b.interior(self.array).astype(np.float64).sum())
                    for b in step.blocks(self.mesh, [self.array], "cell"))
        total = self.comm.allreduce(local)
        return {"step": step.step, "value": self.scale * total} if self.comm.rank == 0 else None

    def finalize(self) -> None:
        return None


def _register() -> None:
    from h5flow.analyses import Analysis, register, registry

    cls = type("ScaledSumAnalysis", (ScaledSum, Analysis), {})
    if "scaled-sum" not in registry:
        register("scaled-sum", cls)


def test_xml_python_analysis_and_registered_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from h5flow.analyses import make_analysis, registry

    monkeypatch.setattr(registry, "_items", dict(registry._items))  # the registration below ends with the test
    from h5flow.xmlconfig import ConfigError, loads

    script = tmp_path / "a.py"
    script.write_text("def execute(step):\n    return step.step\n")
    cfg = loads(f'<sensei><analysis type="python" script="{script}" array="t" out="x.txt"/></sensei>')
    assert (cfg.analyses[0].script, cfg.analyses[0].params) == (str(script), {"array": "t", "out": "x.txt"})
    a = make_analysis(cfg.analyses[0])
    assert a.params == {"array": "t", "out": "x.txt"}
    with pytest.raises(ConfigError, match="missing attribute 'script'"):
        loads('<sensei><analysis type="python"/></sensei>')
    with pytest.raises(ConfigError, match=r"bad value 'nope.py' for attribute 'script'.*does not exist"):
        loads('<sensei><analysis type="python" script="nope.py"/></sensei>')
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no execute"):
        make_analysis(loads(f'<sensei><analysis type="python" script="{bad}"/></sensei>').analyses[0])
    _register()
    with pytest.raises(ConfigError, match=r"accepted: .*python.*scaled-sum"):  # registered names are listed
        loads('<sensei><analysis type="no-such-analysis"/></sensei>')
    cfg = loads('<sensei><analysis type="scaled-sum" mesh="mesh" array="data" scale="2"/></sensei>')
    assert cfg.analyses[0].type == "scaled-sum" and cfg.analyses[0].params == {"scale": "2"}


def test_register_refuses_non_analyses() -> None:
    from h5flow.analyses import register

    with pytest.raises(TypeError, match="must subclass"):
        register("not-an-analysis", dict)


@pytest.mark.mpi(n=3, timeout=120)
def test_registered_and_python_analyses_from_xml(comm, mpi_tmp_path: Path) -> None:
    """2 producers (oscillator) → 1 consumer running a registered analysis and a Python script named in XML."""
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
    from h5flow.runner import consume, produce
    from h5flow.xmlconfig import loads

    _register()
    script = mpi_tmp_path / "mean.py"
    if comm.rank == 0:
        script.write_text(
            "import numpy as np\nseen = []\n"
            "def initialize(comm, params):\n    seen.append(params['tag'])\n"
            "def execute(step):\n    part = step.read('mesh', array='data')\n"
            "    return {'step': step.step, 'sum': float(sum(p.data.astype(np.float64).sum() for p in part)),\n"
            "            'tag': seen[0], 'shape': list(part.global_shape)}\n"
            "def finalize():\n    return None\n")
    comm.Barrier()
    xml = (f'<sensei><transport type="hdf5" filename="{mpi_tmp_path / "s"}" heartbeat="2"/>'
           '<analysis type="scaled-sum" mesh="mesh" array="data" scale="2"/>'
           f'<analysis type="python" script="{script}" tag="hello"/></sensei>')
    cfg = loads(xml)
    osc = OscillatorConfig(shape=SHAPE, steps=STEPS)
    producer = comm.rank < 2
    sub = comm.Split(0 if producer else 1, comm.rank)
    if producer:
        produce(sub, cfg, osc)
    else:
        part = consume(sub, cfg, timeout=30)
        assert part["steps"] == STEPS and part["status"] == "end_of_stream"
        ref = Simulation(osc, 0, 1).global_field(STEPS - 1).astype(np.float64)
        scaled, mine = part["last_results"]
        assert scaled["step"] == STEPS - 1 and np.isclose(scaled["value"], 2 * ref.sum())
        assert mine["step"] == STEPS - 1 and mine["tag"] == "hello" and np.isclose(mine["sum"], ref.sum())
        assert mine["shape"] == list(ref.shape)
    comm.Barrier()


def test_python_analysis_with_h5flow_run(tmp_path: Path) -> None:
    """``h5flow run -a analysis.xml`` with examples/analysis/mean_max.py on the oscillator's mesh."""
    out = tmp_path / "mm.jsonl"
    (tmp_path / "run.xml").write_text(f'<sensei><transport type="hdf5" filename="{tmp_path / "s"}"/></sensei>')
    (tmp_path / "a.xml").write_text(
        f'<sensei><analysis type="python" script="{ROOT / "examples/analysis/mean_max.py"}" array="mesh" '
        f'out="{out}"/></sensei>')
    r = subprocess.run([sys.executable, "-m", "h5flow.cli", "run", str(tmp_path / "run.xml"), "-M", "2", "-N", "2",
                        "-a", str(tmp_path / "a.xml"), "--steps", str(STEPS), "--shape", *map(str, SHAPE),
                        "--json", str(tmp_path / "rec.json")], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation

    sim = Simulation(OscillatorConfig(shape=SHAPE, steps=STEPS), 0, 1)
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["step"] for g in got] == list(range(STEPS))
    for g in got:
        f = sim.global_field(g["step"]).astype(np.float64)
        assert np.isclose(g["mean"], f.mean()) and np.isclose(g["max"], f.max())
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert rec["steps_consumed"] == STEPS
