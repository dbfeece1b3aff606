"""`h5flow bench tuning`: the seeds' tuning facts measured side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks import tuning


def test_grid_is_near_cubic() -> None:
    assert tuning._grid(8) == (2, 2, 2)
    assert sorted(tuning._grid(4)) == [1, 2, 2]
    assert tuning._grid(125) == (5, 5, 5)


@pytest.mark.slow
def test_bench_tuning_quick_runs_every_case(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "tuning", "--quick", "--dir", str(work), "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("seed says") == 4 and proc.stdout.count("here ") >= 4
    assert "verified" in proc.stdout
    doc = json.loads((tmp_path / "out" / "tuning.json").read_text())
    cases = {c["case"]: c for c in doc["cases"]}
    assert set(cases) == {"libver", "dtype", "fill", "hacc"}
    assert "2.25x" in cases["libver"]["seed_says"] and "527 s" in cases["dtype"]["seed_says"]
    assert "40 min" in cases["fill"]["seed_says"]
    variants = {(r["case"], r["variant"]) for r in doc["results"]}
    assert ("libver", "earliest") in variants and ("libver", "latest") in variants
    assert ("fill", "FILL_TIME_NEVER") in variants and ("dtype", "f8 from float64, 100^3") in variants
    assert len([v for v in variants if v[0] == "hacc"]) == 4
    for r in doc["results"]:
        assert (r["seconds"] or 0) > 0 or (r["mib_s"] or 0) > 0, r
    # the float32-from-float64 write is the one HDF5 cannot do collectively (the seed's mechanism)
    # (--quick: 4 ranks, so each rank's 100^3/4 float64 selection exceeds HDF5's 1 MiB conversion buffer)
    f4 = next(r for r in doc["results"] if r["variant"] == "f (float32) from float64, 100^3")
    assert "datatype conversion" in f4["detail"]["no_collective_cause"]
    f8 = next(r for r in doc["results"] if r["variant"] == "f8 from float64, 100^3")
    assert f8["detail"]["no_collective_cause"] == ["none"]
    fills = {r["variant"]: r["detail"]["file_bytes"] for r in doc["results"] if r["case"] == "fill"}
    assert min(fills.values()) >= 120 * 312500 * 4  # both allocate the whole dataset at creation
    assert (tmp_path / "out" / "tuning.csv").exists() and (tmp_path / "out" / "tuning.png").stat().st_size > 0
    assert list(work.iterdir()) == []


def test_bench_tuning_rejects_unknown_case(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "tuning", "--cases", "bogus", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "unknown case(s) bogus" in proc.stderr
