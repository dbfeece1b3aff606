"""`h5flow bench rw`: the parallel h5py bandwidth run that `make demo` shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_rw_runs_verifies_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "rw.json"
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "rw", "--ranks", "2", "--mib-per-rank", "2", "--reps", "2",
         "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["mode"] for r in rows] == ["collective", "independent"]
    for r in rows:
        assert r["ranks"] == 2 and r["bytes_total"] == 2 * 2 * (1 << 20)
        assert r["write_s"] > 0 and r["read_s"] > 0 and r["write_mib_s"] > 0
    assert not list(tmp_path.glob("h5flow-rw-*.h5")), "benchmark left its file behind"


def test_bench_rw_rejects_bad_rank_count() -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "rw", "--ranks", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--ranks must be at least 1" in proc.stderr
