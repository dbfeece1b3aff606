"""Validation by construction on real traces: the h5py and C programs of examples/advise (one tuning mistake per
rule, a clean one), traced by the h5flow_trace connector; each program's file is found by exactly its rule, the
clean program and every fixed variant by none; ``h5flow advise --verify`` measures a gain; a Darshan log is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from h5flow.advise import RULE_IDS, advise
from h5flow.advise.parallel import ImbalanceSettings
from h5flow._advise_cli import FIX_ENV
from h5flow.cli import main as h5flow_main

ROOT = Path(__file__).resolve().parents[1]
PY_PROGRAM = ROOT / "examples" / "advise" / "faulty.py"
C_PROGRAM = ROOT / "build" / "native" / "bin" / "h5flow-advise-faulty"


def _traced(tmp: Path, command: list[str]) -> Path:
    """Run ``command`` under ``h5flow trace`` (the connector stacked by the trace runner); the trace directory."""
    out = tmp / "trace"
    env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", FIX_ENV)}
    res = subprocess.run([sys.executable, "-m", "h5flow.cli", "trace", "--out", str(out), "--", *command],
                         cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out


def _check_programs(tmp: Path, command: list[str], html: bool) -> None:
    from h5flow.trace import load

    trace = _traced(tmp, [*command, "--dir", str(tmp / "faulty"), "--fixed-dir", str(tmp / "fixed"), "all"])
    findings = advise(load(trace))
    found: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        found[f.file].add(f.rule)
    for rule in RULE_IDS:
        assert found.get(str(tmp / "faulty" / f"{rule}.h5")) == {rule}, (rule, dict(found))
    # the program's imbalance clears the rule's seconds threshold twice over, on a fast machine too (it adds time
    # steps until the busiest rank has written 0.3 s), so that the rule's absolute threshold never decides
    (imbalance,) = [f for f in findings if f.rule == "rank-imbalance"]
    assert imbalance.time_s >= 2 * ImbalanceSettings.min_seconds, imbalance.message  # time_s: slowest - mean
    clean = str(tmp / "faulty" / "clean.h5")
    fixed = {f: r for f, r in found.items() if f.startswith(str(tmp / "fixed"))}
    assert clean not in found and not fixed, (found.get(clean), fixed)
    assert len(found) == len(RULE_IDS)
    if html:  # the command line on the same trace: an HTML report with its plots
        page = tmp / "report.html"
        assert h5flow_main(["advise", "--html", str(page), str(trace)]) == 0
        assert page.read_text().count("data:image/png;base64,") == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_h5py_programs_each_found_by_exactly_its_rule(tmp_path: Path) -> None:
    _check_programs(tmp_path, ["mpiexec", "-n", "2", sys.executable, str(PY_PROGRAM)], html=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_c_programs_each_found_by_exactly_its_rule(tmp_path: Path) -> None:
    assert C_PROGRAM.exists(), f"{C_PROGRAM} is not built: make setup (or cmake --build build/native)"
    _check_programs(tmp_path, ["mpiexec", "-n", "2", str(C_PROGRAM)], html=False)


@pytest.mark.timeout(300)
def test_verify_reruns_the_fixed_variant_and_prints_the_gain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert C_PROGRAM.exists(), f"{C_PROGRAM} is not built: make setup (or cmake --build build/native)"
    os.environ.pop(FIX_ENV, None)
    rc = h5flow_main(["advise", "--json", "--verify", "--out", str(tmp_path / "runs"), "--", "mpiexec", "-n", "2",
                      str(C_PROGRAM), "--dir", str(tmp_path / "out"), "small-independent-writes", "fill-time"])
    cap = capsys.readouterr()
    assert rc == 0, cap.out + cap.err
    before = json.loads(cap.out)  # standard output is the JSON object alone; the table goes to standard error
    assert sorted({f["rule"] for f in before["findings"]}) == ["fill-time", "small-independent-writes"]
    assert f"{FIX_ENV}=fill-time,small-independent-writes" in cap.err
    assert "fill-time (fill-time.h5): the same calls (s)" in cap.err and cap.err.count("no finding") == 2
    assert "time in HDF5 calls, busiest rank (s)" in cap.err


def test_darshan_log_read_through_pydarshan() -> None:
    """PyDarshan's shipped HDF5 log (IOR, 4 processes on Cori): its H5D counters show rank 3 an order of magnitude
    faster than ranks 1 and 2 in the same shared file."""
    import darshan.examples.example_logs as logs

    from h5flow.advise.darshan_input import DARSHAN_RULES, frame

    df = frame(Path(logs.__file__).parent / "ior_hdf5_example.darshan")
    assert (df["op"] == "dataset_write").sum() == 12 and set(df["rank"]) == {1, 2, 3}
    found = advise(df, only=list(DARSHAN_RULES))
    assert [(f.rule, f.evidence.ranks) for f in found] == [("rank-imbalance", [1])]
    assert found[0].file == "/global/cscratch1/sd/ssnyder/test123.h5"


def test_darshan_log_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import darshan.examples.example_logs as logs

    log = str(Path(logs.__file__).parent / "ior_hdf5_example.darshan")
    assert h5flow_main(["advise", "--json", log]) == 0
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["rank-imbalance"]
    config = tmp_path / "thresholds.json"
    config.write_text(json.dumps({"rank-imbalance": {"ratio": 20}}))  # the log's slowest/fastest is about 13
    assert h5flow_main(["advise", "--json", "--config", str(config), log]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    config.write_text(json.dumps({"rank-imbalance": {"slowest": 20}}))
    assert h5flow_main(["advise", "--config", str(config), log]) == 2
    assert "no setting(s) slowest" in capsys.readouterr().err
    assert h5flow_main(["advise", "--rules", "fill-time", log]) == 2
    assert "applies to a Darshan log" in capsys.readouterr().err
    assert h5flow_main(["advise", "/nonexistent/trace"]) == 2
    assert "no such trace directory" in capsys.readouterr().err
