"""`h5flow bench query`: every method answers like the numpy scan; the report has every part."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks import query


def test_thresholds_hit_the_requested_selectivity(tmp_path: Path) -> None:
    p = tmp_path / "d.h5"
    info = query.make_data(p, 0.002, progress=False)
    th = query.thresholds(p, [0.001, 0.01], info)
    for s in (0.001, 0.01):
        exprs = query.expressions(th, s)
        n_field = query.numpy_scan(p, exprs["field temp > t"][0]).size
        assert abs(n_field - s * info["n"] ** 3) <= max(2, 0.01 * s * info["n"] ** 3), (s, n_field)
        n_z = query.numpy_scan(p, exprs["catalog z > t (random order)"][0]).size
        assert abs(n_z - s * info["rows"]) <= 2, (s, n_z)


@pytest.mark.slow
def test_bench_query_quick_without_pytables(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "query", "--quick", "--size", "0.002", "--selectivities",
         "0.01", "--ranks", "1,2", "--skip", "pytables", "--dir", str(work), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "query.json").read_text())
    methods = {(r["query"], r["method"]) for r in doc["rows"]}
    for q in ("field temp > t", "boss plate & fiber", "catalog z > t (random order)"):
        assert {(q, m) for m in ("numpy scan", "h5flow zonemap/chunk", "h5flow zonemap", "h5flow bitmap")} <= methods
    assert all(r["note"] == "" for r in doc["rows"])  # the benchmark raises when an answer differs
    assert [m["ranks"] for m in doc["mpi"]] == [1, 2] and all(m["count"] == m["scan_count"] for m in doc["mpi"])
    assert doc["pytables"] == {"error": "skipped (--skip pytables)"}
    assert {c["dataset"] for c in doc["codec"]} == {"/field/temp", "/catalog/z"}
    assert (tmp_path / "out" / "query.png").is_file() and not list(work.glob("*.h5"))
