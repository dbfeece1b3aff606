"""`h5flow bench transit --quick`: every available transport through the same producer and analysis."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from h5flow.benchmarks import transit


def test_quick_writes_csv_json_and_figures(tmp_path: Path) -> None:
    out, js = tmp_path / "out", tmp_path / "transit.json"
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "transit", "--quick", "--out", str(out), "--json", str(js),
         "--tmpfs-dir", str(tmp_path), "--disk-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(js.read_text())
    skipped = {s["transport"]: s["reason"] for s in doc["skipped"]}
    for t, why in skipped.items():  # a transport that cannot run here is named, with the reason, not dropped silently
        assert f"skipping {t}: {why}" in proc.stdout
    expected = {t for t in transit.TRANSPORTS if t not in skipped}
    assert {"hdf5-tmpfs", "hdf5-disk"} <= expected
    rows = doc["results"]
    assert {r["transport"] for r in rows} == expected
    assert {(r["producers"], r["consumers"]) for r in rows} == {(2, 2), (2, 1)}
    for r in rows:
        assert r["steps"] == 3 and r["bytes_per_rank_step"] == 1 << 20
        # 2 producers x 3 steps x 1 MiB of float32 cells (plus the tiny 'oscillators' mesh)
        assert 6 << 20 <= r["bytes"] < (6 << 20) + 4096
        assert r["time_to_solution"] > 0 and r["peak_rss_bytes"] > 10 << 20
        assert r["posix_write_read_s"] > 0 and r["memcpy_s"] > 0 and r["latency_median_s"] >= 0
        if "adios2-sst" in expected:
            assert r["vs_sst"] is not None
    with open(out / "transit.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    for png in ("fig2-left.png", "fig2-right.png", "fig3-memory-hdf5-tmpfs.png",
                "fig4-progress-hdf5-tmpfs-2to1.png", "fig4-progress-hdf5-tmpfs-2to2.png"):
        assert (out / png).stat().st_size > 1000, png
    assert not list(tmp_path.glob("h5flow-transit-*")), "a run left its staging directory behind"


def test_oscillator_shape_gives_the_bytes_per_rank() -> None:
    for mib, m in ((32, 2), (32, 8), (1, 4)):
        x, y, z = transit.oscillator_shape(mib << 20, m)
        assert x * y * z * 4 == m * (mib << 20)


def test_rejects_ratios_that_leave_no_consumer(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "transit", "--producers", "2", "--ratios",
                           "4", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "no configuration" in proc.stderr
