"""`h5flow bench async --kernel c` and its C program h5flow-async-loop (native/benchmarks/async_loop).

The program runs the write loop of the Python kernel with each row written as h5py writes it, through the
stack HDF5_VOL_CONNECTOR selects, and prints one JSON line of per-step times; it reads its file back and
reports the connector the file went through. Two steps of a small row, so each run takes milliseconds.
Its explicit mode writes through an event set (H5Dwrite_async from two buffers in turn, H5ESwait).
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
          "post_ms", "wait_ms", "step0_ms", "steps", "step_bytes", "mode", "connector", "verified"}

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
    assert out["connector"] == top and out["verified"] is True and out["mode"] == "implicit" and out["wait_ms"] == 0
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


@pytest.mark.parametrize("copy", [1, 0])
def test_the_c_loop_in_explicit_mode_writes_through_the_event_set(tmp_path: Path, copy: int) -> None:
    """--mode explicit: every row is an H5Dwrite_async (the connector's stats count them: uncopied with
    explicit_copy=0, since the loop leaves each buffer alone until its wait), every row read back intact."""
    stats = tmp_path / "stats.jsonl"
    connector = f"h5flow_async explicit_copy={copy};stats={stats};under_vol=0;under_info={{}}"
    proc = subprocess.run([str(KERNEL), str(tmp_path / "f.h5"), "--steps", "4", "--step-bytes", str(2 << 20),
                           "--compute-s", "0.005", "--mode", "explicit"], env=_env(connector), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == FIELDS and out["mode"] == "explicit" and out["connector"] == "h5flow_async", out
    assert out["verified"] is True and out["wait_ms"] >= 0 and out["wait_ms"] <= out["med_write_ms"]
    writer = max((json.loads(x) for x in stats.read_text().splitlines()), key=lambda x: x["writes"])
    assert writer["writes"] == 4 and writer["queued"] == 4 and writer["failures"] == 0, writer
    assert writer["uncopied"] == (0 if copy else 4), writer
    import h5py

    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert list(f["steps"][:, 0]) == [0.0, 1.0, 2.0, 3.0] and f["steps"][3, 5] == 2.5


@pytest.mark.parametrize("argv, message", [
    ([], "one FILE expected"),
    (["f.h5", "--mode", "sometimes"], "--mode wants implicit or explicit"),
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


def test_bench_async_with_the_c_kernel_adds_the_per_step_columns_for_both_modes(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--mode", "both")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "c kernel, implicit and explicit mode" in lines[0]
    assert lines[1].split()[4:6] == ["mode", "stack"], lines[1]
    assert lines[1].split()[-14:] == ["write", "ms", "cpu", "ms", "Sclose", "ms", "wait", "ms", "step0", "ms",
                                      "floor", "ms", "close", "s"], lines[1]
    rows = {(ln.split()[3], ln.split()[4], ln.split()[2]): [float(v.rstrip("%")) for v in ln.split()[5:]]
            for ln in lines[2:] if ln.startswith(str(tmp_path))}
    for mode in ("implicit", "explicit"):
        assert {(mode, s, c) for s in ("native", "async", "log", "async/log") for c in ("0", "5")} <= set(rows), rows
    # explicit_copy=0 changes event-set writes only: its stacks are in the explicit rows alone
    assert {("explicit", "async-nocopy", "5"), ("explicit", "async-nocopy/log", "5")} <= set(rows), rows
    assert not any(mode == "implicit" and "nocopy" in stack for mode, stack, _ in rows), rows
    for (mode, stack, _), values in rows.items():
        total, exposed, hidden, vs_plain, write, cpu, sclose, wait, step0, floor, close = values
        assert total > 0 and write > 0 and cpu > 0 and sclose >= 0 and step0 > 0 and floor >= 0 and close > 0, \
            (mode, stack, values)
        assert wait == 0 if mode == "implicit" else wait >= 0, (mode, stack, values)
        if stack in ("native", "log"):
            assert vs_plain == 1.0, (mode, stack, values)  # each mode against its own plain stack


def test_bench_async_explicit_mode_needs_the_c_kernel(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "async", "--mode", "explicit", "--steps", "2",
                           "--dirs", str(tmp_path), "--metadata-ops", "0"], capture_output=True, text=True,
                          timeout=60, env=_env(None))
    assert proc.returncode == 1 and "--mode explicit needs --kernel c" in proc.stderr, proc.stderr


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

