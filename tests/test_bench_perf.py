"""`h5flow bench perf`: the h5perf-compatible kernel (native/benchmarks/perf) and its driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow import _paths
from h5flow.benchmarks import perf

KERNEL = _paths.native_tool("h5flow-perf")
API_NAMES = {"posix", "mpiio", "native", "native-collective", "subfiling", "h5flow_log"}


def _kernel(n: int, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([perf.mpiexec(), "-n", str(n), str(KERNEL), *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_sizes_parse_like_h5perf_plus_sums() -> None:
    assert perf.parse_size("256K") == 256 * 1024
    assert perf.parse_size("1M+10") == (1 << 20) + 10
    assert perf.format_size((1 << 20) + 10) == "1M+10" and perf.format_size(1 << 20) == "1M"
    with pytest.raises(Exception, match="not a size"):
        perf.parse_size("1.5M")


def test_plan_groups_launches_and_keeps_subfiling_off_one_rank() -> None:
    apis = [perf.APIS[a] for a in ("posix", "native", "native-collective", "subfiling", "h5flow_log")]
    jobs = perf.plan(apis, [1, 2], ["interleaved"], [perf.parse_size("1M+10")])
    one = [j for j in jobs if j.procs == 1]
    assert all("subfiling" not in [a.name for a in j.apis] for j in one)
    two = {tuple(a.name for a in j.apis) for j in jobs if j.procs == 2}
    # -C and the VOL environment apply to a whole launch, so those APIs get launches of their own
    assert two == {("posix", "native", "subfiling"), ("native-collective",), ("h5flow_log",)}


def test_kernel_prints_h5perf_report_verifies_and_cleans_up(tmp_path: Path) -> None:
    proc = _kernel(2, "-A", "posix,mpiio,phdf5,subfiling", "-I", "-d", "2", "-e", "2M+20", "-x", "1M+10",
                   "-X", "1M+10", "-i", "2", "-D", "vrt", "-f", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for title in ("POSIX (one file per process)", "MPIO", "PHDF5 (w/MPI-IO driver)", "PHDF5 (w/subfiling driver)"):
        assert f"IO API = {title}" in proc.stdout
    assert "Raw Data Write (2 iteration(s)):" in proc.stdout and "Read Open-Close" in proc.stdout
    recs = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("H5FLOW_PERF")]
    assert [r["api"] for r in recs] == ["posix", "mpiio", "phdf5", "subfiling"]
    for r in recs:
        assert r["verified"] is True and r["pattern"] == "interleaved" and r["transfer_size"] == (1 << 20) + 10
        assert r["bytes_total"] == 2 * 2 * ((2 << 20) + 20)
        assert r["write_mib_s"] > 0 and r["read_mib_s"] > 0 and r["write_open_close_mib_s"] > 0
    assert [r["vol"] for r in recs] == ["none", "none", "native", "native"]
    assert list(tmp_path.iterdir()) == [], "the kernel left files behind"


@pytest.mark.parametrize("api", ["posix", "mpiio", "phdf5"])
def test_a_verification_failure_fails_the_run(tmp_path: Path, api: str) -> None:
    env = dict(os.environ, H5FLOW_PERF_INJECT_CORRUPTION="1")
    proc = _kernel(2, "-A", api, "-I", "-e", "2M", "-x", "1M", "-X", "1M", "-D", "v", "-f", str(tmp_path), env=env)
    assert proc.returncode == 1
    assert "verification failed" in proc.stderr and "H5FLOW_PERF" not in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_kernel_rejects_bad_input(tmp_path: Path) -> None:
    bad = _kernel(1, "-e", "4", "-x", "3", "-X", "3", "-f", str(tmp_path))
    assert bad.returncode == 2 and "must divide the bytes per process" in bad.stderr
    sub = _kernel(1, "-A", "subfiling", "-f", str(tmp_path))
    assert sub.returncode == 2 and "2 or more processes" in sub.stderr
    api = _kernel(1, "-A", "hdf4", "-f", str(tmp_path))
    assert api.returncode == 2 and "unknown API 'hdf4'" in api.stderr
    nodir = _kernel(1, "-f", str(tmp_path / "missing"))
    assert nodir.returncode == 2 and "not a writable directory" in nodir.stderr


@pytest.mark.slow
def test_bench_perf_quick_writes_json_csv_png(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "perf", "--quick", "-p", "2", "-P", "2", "-x", "1M+10",
         "--dir", str(work), "--out", str(out), "--json", str(tmp_path / "perf.json")],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "perf.json").read_text())
    rows = doc["results"]
    have_log = perf.log_connector_dir() is not None
    expected = {"posix", "mpiio", "native", "native-collective", "subfiling"} | ({"h5flow_log"} if have_log else set())
    assert {r["api"] for r in rows} == expected
    assert {r["pattern"] for r in rows} == {"contiguous", "interleaved"}
    for r in rows:
        assert r["api"] in API_NAMES and r["processes"] == 2 and r["transfer_size"] == (1 << 20) + 10
        assert isinstance(r["write_mib_s"], float | int) and r["write_mib_s"] > 0 and r["read_mib_s"] > 0
        assert r["verified"] is True
        if r["api"] == "posix":
            assert r["write_vs_posix"] == pytest.approx(1.0)
        if r["api"] == "native":
            assert r["read_vs_native"] == pytest.approx(1.0)
    if not have_log:
        assert "h5flow_log: skipped" in proc.stdout
    assert "target h5flow_log / native HDF5 (mpio, independent) >= 3x" in proc.stdout
    assert "target h5flow_log / raw POSIX N-N >= 0.8x" in proc.stdout
    assert (out / "perf.csv").read_text().startswith("api,pattern,processes,transfer_size")
    assert (out / "perf.png").stat().st_size > 0
    assert list(work.iterdir()) == []


def test_bench_perf_reports_a_failing_kernel(tmp_path: Path) -> None:
    env = dict(os.environ, H5FLOW_PERF_INJECT_CORRUPTION="1")
    proc = subprocess.run(
        [sys.executable, "-m", "h5flow.cli", "bench", "perf", "--quick", "-A", "native", "-p", "2", "-P", "2",
         "-x", "1M", "-I", "--dir", str(tmp_path), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 1
    assert "verification failed" in proc.stderr
    assert not (tmp_path / "out" / "perf.json").exists()


@pytest.mark.parametrize("collective", [False, True])
def test_mpiio_and_hdf5_place_every_block_at_the_same_logical_offset(tmp_path: Path, collective: bool) -> None:
    """Two independent placements (MPI-IO byte offsets, HDF5 strided hyperslabs) must agree byte for byte."""
    import h5py
    import numpy as np

    env = dict(os.environ, HDF5_NOCLEANUP="1")
    env.pop("HDF5_VOL_CONNECTOR", None)
    args = ["-A", "mpiio,phdf5", "-I", "-B", "256K+3", "-d", "2", "-e", "2M+24", "-x", "1M+12", "-X", "1M+12",
            "-D", "v", "-f", str(tmp_path)] + (["-C"] if collective else [])
    proc = _kernel(3, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    (mpio,) = tmp_path.glob("*.mpio")
    (h5,) = tmp_path.glob("*.h5")
    with h5py.File(h5, "r") as f:
        datasets = [f[f"Dataset{k}"][()] for k in range(2)]
    raw = np.fromfile(mpio, dtype=np.uint8)
    assert raw.size == sum(d.size for d in datasets) == 2 * 3 * ((2 << 20) + 24)
    assert np.array_equal(raw, np.concatenate(datasets))
    assert len(np.unique(raw[:4096])) > 200, "the pattern should look random, not constant"
