"""`h5flow bench async --kernel c` and its C program h5flow-async-loop (native/benchmarks/async_loop).

The program runs the write loop of the Python kernel with each row written as h5py writes it, through the
stack HDF5_VOL_CONNECTOR selects, and prints one JSON line of per-step times; it reads its file back and
reports the connector the file went through. Two steps of a small row, so each run takes milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir, native_tool

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
KERNEL = native_tool("h5flow-async-loop")
ASYNC = "h5flow_async under_vol=0;under_info={}"
FIELDS = {"total_s", "in_write_s", "close_s", "compute_s", "memcpy_floor_ms", "med_write_ms", "med_cpu_ms",
          "post_ms", "step0_ms", "steps", "step_bytes", "connector", "verified"}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_async.so").exists(),
                                reason="h5flow_async not built (make setup)")


def _env(connector: str | None) -> dict[str, str]:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR))
    env.pop("HDF5_VOL_CONNECTOR", None)
    if connector:
        env["HDF5_VOL_CONNECTOR"] = connector
    return env


@pytest.mark.parametrize("connector, top", [(None, "native"), (ASYNC, "h5flow_async")])
def test_the_c_loop_prints_every_field_through_each_stack(tmp_path: Path, connector: str | None, top: str) -> None:
    proc = subprocess.run([str(KERNEL), str(tmp_path / "f.h5"), "--steps", "2", "--step-bytes", str(4 << 20),
                           "--compute-s", "0.005"], env=_env(connector), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == FIELDS, out
    assert out["connector"] == top and out["verified"] is True
    assert out["steps"] == 2 and out["step_bytes"] == 4 << 20 and out["compute_s"] == pytest.approx(0.01)
    assert out["total_s"] >= out["compute_s"] + out["in_write_s"] > out["compute_s"]
    # the steady-state write is step 1's, timed with its two H5Sclose inside it
    assert out["in_write_s"] * 1e3 == pytest.approx(out["step0_ms"] + out["med_write_ms"], abs=0.01)
    assert 0 < out["post_ms"] <= out["med_write_ms"] and 0 < out["med_cpu_ms"]
    # a copy of 4 MiB takes tens of microseconds at least (more than 100 GB/s would be a copy that did not happen)
    assert out["memcpy_floor_ms"] > 0.04 and out["close_s"] > 0
    import h5py

    with h5py.File(tmp_path / "f.h5", "r") as f:
        d = f["steps"]
        assert d.shape == (2, 1 << 19) and list(d[:, 0]) == [0.0, 1.0] and d[1, 3] == 1.5


@pytest.mark.parametrize("argv, message", [
    ([], "one FILE expected"),
    (["f.h5", "--step-bytes", "12"], "--step-bytes wants a multiple of 8"),
    (["f.h5", "--steps", "0"], "--steps wants a whole number >= 1"),
    (["f.h5", "--compute-s", "soon"], "--compute-s wants seconds >= 0"),
])
def test_the_c_loop_refuses_bad_arguments_with_a_message(tmp_path: Path, argv: list[str], message: str) -> None:
    proc = subprocess.run([str(KERNEL), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "f.h5").exists()


def test_the_c_loop_has_a_usage_text() -> None:
    proc = subprocess.run([str(KERNEL), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "usage: h5flow-async-loop FILE" in proc.stdout and "--step-bytes" in proc.stdout


def _bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "async", "--kernel", "c", "--steps", "2",
                           "--step-mib", "0.05", "--compute-ms", "5", "--repeat", "1", "--dirs", str(tmp_path),
                           "--metadata-ops", "0", "--png", str(tmp_path / "b.png"), *extra],
                          capture_output=True, text=True, timeout=120,
                          env=dict(_env(None), H5FLOW_CACHE_DIR=str(tmp_path)))


def test_bench_async_with_the_c_kernel_adds_the_per_step_columns(tmp_path: Path) -> None:
    proc = _bench(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "c kernel" in lines[0]
    assert lines[1].split()[-12:] == ["write", "ms", "cpu", "ms", "Sclose", "ms", "step0", "ms", "floor", "ms",
                                      "close", "s"], lines[1]
    rows = {(ln.split()[3], ln.split()[2]): [float(v.rstrip("%")) for v in ln.split()[4:]]
            for ln in lines[2:] if ln.startswith(str(tmp_path))}
    assert {("native", "0"), ("native", "5"), ("async", "0"), ("async", "5")} <= set(rows), rows
    for (stack, _), values in rows.items():
        total, exposed, hidden, vs_plain, write, cpu, sclose, step0, floor, close = values
        assert total > 0 and write > 0 and cpu > 0 and sclose >= 0 and step0 > 0 and floor >= 0 and close > 0, \
            (stack, values)


def test_bench_async_with_the_c_kernel_refuses_several_ranks(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--ranks", "1", "2")
    assert proc.returncode == 1 and "--kernel c runs one rank only" in proc.stderr, proc.stderr


@pytest.mark.parametrize("connector", [None, ASYNC])
def test_the_file_run_times_the_first_file_and_the_others(tmp_path: Path, connector: str | None) -> None:
    """The kernel's file run: the first file of the process and the median create + close of the next ones."""
    proc = subprocess.run([sys.executable, "-m", "h5flow.benchmarks.async_kernel", str(tmp_path / "o.h5"),
                           "--file-ops", "3"], env=_env(connector), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"first_file_ms", "per_file_us"} and out["first_file_ms"] > 0 and out["per_file_us"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"o-{i}.h5" for i in range(4)]

