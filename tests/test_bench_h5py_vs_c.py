"""`h5flow bench h5py-vs-c`: seed 004's table from the C kernel and its h5py twin, side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks import h5py_vs_c


def test_plan_covers_seed_004_rows() -> None:
    groups = h5py_vs_c.plan([1, 2], mib=4, files=10, objects=10)
    names = {row.name for rows in groups.values() for row in rows}
    assert names == set(h5py_vs_c.SEED)
    strong = [r.case for rows in groups.values() for r in rows if r.name == "collective strong"]
    assert {c.data_bytes for c in strong} == {4 << 20}  # strong: the same total on every process count
    weak = {r.case.nprocs: r.case.data_bytes for rows in groups.values() for r in rows if r.name == "independent weak"}
    assert weak == {1: 4 << 20, 2: 8 << 20}


@pytest.mark.slow
def test_h5py_vs_c_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "h5py-vs-c", "--quick", "--mib-per-rank", "1", "--files", "20",
         "--objects", "30", "--dir", str(tmp_path), "-o", str(out)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seed 004" in proc.stdout and "verified" in proc.stdout
    payload = json.loads((out / "h5py-vs-c.json").read_text())
    rows = payload["rows"]
    assert len(rows) == 2 + 2 * 4
    for e in rows:
        assert e["c_s"] > 0 and e["h5py_s"] > 0
        assert abs(e["h5py_over_c"] * e["h5py_pct_of_c"] - 100.0) < 1e-6
    assert {e["row"] for e in payload["summary"]} == set(h5py_vs_c.SEED)
    assert (out / "h5py-vs-c.csv").read_text().startswith("row,ranks,c_s,h5py_s,h5py_over_c,h5py_pct_of_c\n")
    assert (out / "h5py-vs-c-throughput.png").stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == ["out"], "the benchmark left files behind"
