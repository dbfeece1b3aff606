"""`h5flow bench transit --quick`: every available transport through the same producer and analysis."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks import transit


@pytest.mark.slow
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
    if "adios2-sst" not in skipped:  # the plain ADIOS2 references run beside the transport
        assert {"adios2-sst-plain", "adios2-bp5-plain"} <= expected
    for r in rows:
        assert r["steps"] == 3 and r["bytes_per_rank_step"] == 1 << 20
        # 2 producers x 3 steps x 1 MiB (float32 cells plus the tiny 'oscillators' mesh; plain: float64)
        assert 6 << 20 <= r["bytes"] < (6 << 20) + 4096
        assert r["time_to_solution"] > 0 and r["peak_rss_bytes"] > 10 << 20
        assert r["posix_write_read_s"] > 0 and r["memcpy_s"] > 0 and r["latency_median_s"] >= 0
        assert r["null_time_to_solution"] > 0 and r["vs_null"] == r["time_to_solution"] / r["null_time_to_solution"]
        assert len(r["peak_rss_producer_ranks"]) == 2 and len(r["peak_rss_consumer_ranks"]) == r["consumers"]
        assert r["time_to_solution_min"] <= r["time_to_solution"] <= r["time_to_solution_max"]
        if "adios2-sst" in expected:
            assert r["vs_sst"] is not None and r["vs_sst_plain"] is not None
        if r["transport"] in ("adios2-sst", "adios2-bp5"):
            assert r["transport_vs_plain"] is not None and r["transport_vs_plain"] > 0
    assert doc["bounds"] and all(b["posix_tmpfs_map"] > 0 for b in doc["bounds"])
    load = doc["load_average"]
    assert len(load["start"]) == len(load["end"]) == 3
    assert "load average at start" in proc.stdout and "at end" in proc.stdout
    assert ("WARNING the machine was busy" in proc.stdout) == load["busy"]
    assert "÷ the null transport" in proc.stdout and "peak RSS per rank" in proc.stdout
    with open(out / "transit.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    figures = ("fig2-left.png", "fig2-right.png", "fig3-memory-hdf5-tmpfs.png",
               "fig4-progress-hdf5-tmpfs-2to1.png", "fig4-progress-hdf5-tmpfs-2to2.png")
    for png in figures:
        assert (out / png).stat().st_size > 1000, png
    # --quick draws Fig. 3 and Fig. 4 of the first transport only: each figure's code runs, once
    assert sorted(p.name for p in out.glob("*.png")) == sorted(figures)
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


def _record(tts: float, grow: int = 0) -> dict:
    t0 = 1000.0
    # 4 steps of 1 s; the RSS reaches 60 MiB in the first step (a full queue), then grows by ``grow`` per step
    producer = {"ranks": [{"rank": 0, "io": [[s, t0 + s, t0 + s + 1, 0.0] for s in range(4)],
                           "rss": [[t0, 50 << 20]] + [[t0 + s + 1, (60 << 20) + s * grow] for s in range(4)]}]}
    consumer = {"ranks": [{"rank": 0, "io": [[0, 0.1]], "rss": [[t0, 40 << 20]]}]}
    return {"time_to_solution": tts, "transport_seconds": {"write": 0.5, "read": 0.5}, "bytes": 1 << 20,
            "latency": {"median_s": 0.001}, "producer": producer, "consumer": consumer, "directory": "/dev/shm"}


def test_reps_give_median_min_max_and_producer_growth(tmp_path: Path) -> None:
    plan = transit.Plan([1], [1], 1 << 20, 2, 3, ["socket"], tmp_path, tmp_path, tmp_path, 4, 10.0)
    bound = {"posix_tmpfs": 0.25, "posix_disk": 0.5, "memcpy": 0.01, "null": 2.0}
    row = transit.summarize(plan, "socket", 1, 1, [_record(5.0), _record(3.0), _record(4.0, grow=50 << 20)],
                            bound, "")
    assert (row.time_to_solution, row.time_to_solution_min, row.time_to_solution_max) == (4.0, 3.0, 5.0)
    assert row.vs_null == 2.0 and row.overhead_vs_posix == 4.0
    assert row.peak_rss_producer_ranks == [60 << 20] and row.peak_rss_consumer_ranks == [40 << 20]
    # a producer whose RSS keeps growing with the steps is reported (peak 210 MiB in steps 2-3 vs 110 MiB in
    # steps 0-1), one that does not is not
    assert row.rss_growth_producer_bytes == 100 << 20 > transit.rss_growth_limit(1 << 20)
    assert transit.summarize(plan, "socket", 1, 1, [_record(1.0)], bound, "").rss_growth_producer_bytes == 0


def test_busy_machine_is_warned(capsys: pytest.CaptureFixture[str]) -> None:
    transit._warn_busy([transit.busy_load() + 0.5, 0.0, 0.0], "start")
    assert "WARNING the machine was busy at the start" in capsys.readouterr().out
    transit._warn_busy([0.0, 9.0, 9.0], "end")  # only the 1-minute average counts
    assert capsys.readouterr().out == ""


def test_breakdown_takes_the_slowest_rank_per_step_and_the_mean_over_steps(tmp_path: Path) -> None:
    part = {"ranks": [{"rank": 0, "events": [{"step": 0, "phases": {"write": 0.010, "create": 0.002}},
                                             {"step": 1, "phases": {"write": 0.030}}]},
                      {"rank": 1, "events": [{"step": 0, "phases": {"write": 0.020}},
                                             {"step": 1, "phases": {"write": 0.010, "create": 0.004}}]}]}
    phases = transit.phase_seconds(part)
    assert phases == pytest.approx({"write": (0.020 + 0.030) / 2, "create": (0.002 + 0.004) / 2})
    assert transit.phase_seconds({"ranks": [{"rank": 0, "events": [{"step": 0}]}]}) == {}  # socket, adios2
    plan = transit.Plan([1], [1], 1 << 20, 2, 1, ["hdf5-tmpfs"], tmp_path, tmp_path, tmp_path, 4, 10.0)
    rec = _record(1.0)
    rec["producer"]["ranks"][0]["events"] = part["ranks"][0]["events"]
    row = transit.summarize(plan, "hdf5-tmpfs:log", 1, 1, [rec], {"posix_tmpfs": 0.25, "posix_disk": 0.5,
                                                                 "memcpy": 0.01, "null": 2.0}, "")
    assert row.phases_producer == pytest.approx({"write": 0.020, "create": 0.001}) and row.phases_consumer == {}
    assert transit.split_layout("hdf5-tmpfs:log") == ("hdf5-tmpfs", "log")
    assert transit.split_layout("hdf5-disk", "n-n") == ("hdf5-disk", "n-n")
    plan.hdf5_more_layouts = ["log"]
    assert transit.with_layouts(plan, ["hdf5-tmpfs", "socket"]) == ["hdf5-tmpfs", "hdf5-tmpfs:log", "socket"]
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(transit.breakdown_table([row], 2))
    text = console.export_text()
    assert "hdf5-tmpfs:log" in text and "P write" in text and "20.0" in text


def test_a_failed_plain_pair_does_not_hang_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """One process of a plain ADIOS2 pair failing (a writer crashed in SST's rendezvous) left its peers
    blocked for timeout + 60 s per step, 12 min in one run: the others are now killed a few seconds later,
    and what every process printed is kept."""
    import time

    from h5flow.benchmarks import adios2_plain

    monkeypatch.setattr(adios2_plain, "FAILED_GRACE_S", 1.0)  # its length proves nothing; the kill after it does
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; print('peer', flush=True); time.sleep(120)"],
                               stdout=subprocess.PIPE, text=True)
    failing = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.5); print('x' * 200000); "
                                "sys.exit(3)"], stdout=subprocess.PIPE, text=True)
    t0 = time.time()
    outs = adios2_plain._wait_all([sleeper, failing], time.time() + 300)
    assert time.time() - t0 < adios2_plain.FAILED_GRACE_S + 10
    assert sleeper.returncode != 0 and failing.returncode == 3
    assert outs[0] == "peer\n" and outs[1] == "x" * 200000 + "\n"  # a pipe larger than its buffer, read whole


def test_a_plain_pair_is_retried_then_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from h5flow.benchmarks import adios2_plain

    calls = []

    def flaky(*args: object, **kw: object) -> dict[str, object]:
        calls.append(args)
        if len(calls) < 2:
            raise RuntimeError("plain ADIOS2 producer 2 exited with -11")
        return {"transport": "adios2-sst-plain"}

    monkeypatch.setattr(adios2_plain, "run_pair", flaky)
    plan = transit.Plan(producers=[1], ratios=[1], bytes_per_rank=1, steps=1, reps=1, transports=["adios2-sst-plain"],
                        tmpfs=tmp_path, disk=tmp_path, out=tmp_path, queue_limit=1, timeout=1)
    rec = transit.run_one(plan, "adios2-sst-plain", 1, 1, 0)
    assert len(calls) == 2 and rec["failed_attempts"] == ["plain ADIOS2 producer 2 exited with -11"]

    def broken(*args: object, **kw: object) -> dict[str, object]:
        raise RuntimeError("plain ADIOS2 consumer 1 exited with 1")

    monkeypatch.setattr(adios2_plain, "run_pair", broken)
    with pytest.raises(transit.PlainPairFailed, match=f"{transit.PLAIN_ATTEMPTS} attempts failed"):
        transit.run_one(plan, "adios2-sst-plain", 1, 1, 0)
    assert list(tmp_path.glob("h5flow-transit-*")) == []  # nothing left behind


def test_posix_bound_uses_page_aligned_buffers(tmp_path: Path) -> None:
    """The bound's buffers start pages, like the file offsets it writes and reads at: the kernel copies
    between same-aligned buffers at full speed on every CPU (on AMD EPYC a destination 16 bytes past the
    source modulo 4 KiB was 3-4x slower), so the bound is the machine at its best."""
    for n in (1, 4096, (1 << 20) + 5):
        buf = transit.page_aligned(n)
        assert buf.nbytes == n and buf.ctypes.data % 4096 == 0 and buf.flags.writeable
    assert transit.posix_write_read(tmp_path, (1 << 20) + 5, 3) > 0
    assert transit.posix_write_read(tmp_path, (1 << 20) + 5, 3, mapped=True) > 0  # the bound of a mapping reader
    assert list(tmp_path.iterdir()) == []  # its files are gone


def _plan_of(argv: list[str]) -> transit.Plan:
    import argparse

    parser = argparse.ArgumentParser()
    transit.add_arguments(parser)
    return transit.make_plan(parser.parse_args(argv))


def test_mib_per_rank_takes_several_sizes(tmp_path: Path) -> None:
    where = ["--tmpfs-dir", str(tmp_path), "--disk-dir", str(tmp_path), "--transports", "socket"]
    one = _plan_of(where)
    assert one.sizes == [32 << 20] and one.bytes_per_rank == 32 << 20  # the single size as before
    sweep = _plan_of([*where, "--mib-per-rank", "32", "1", "0.5", "32"])
    assert sweep.sizes == [1 << 19, 1 << 20, 32 << 20] and sweep.bytes_per_rank == 1 << 19
    with pytest.raises(ValueError, match="positive"):
        _plan_of([*where, "--mib-per-rank", "8", "0"])


def test_sweep_prints_and_plots_every_size_with_each_transports_worst_cell(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = transit.Plan([1], [1], 1 << 20, 2, 1, ["socket", "adios2-sst", "adios2-sst-plain"], tmp_path, tmp_path,
                        tmp_path, 4, 10.0, sizes=[1 << 20, 8 << 20])
    bound = {"posix_tmpfs": 0.25, "posix_disk": 0.5, "memcpy": 0.01, "null": 2.0}
    rows = []
    for size, seconds in ((1 << 20, {"socket": 0.5, "adios2-sst": 1.0, "adios2-sst-plain": 1.0}),
                          (8 << 20, {"socket": 0.5, "adios2-sst": 3.0, "adios2-sst-plain": 1.0})):
        size_rows = []
        for t, sec in seconds.items():
            rec = _record(1.0)
            rec["transport_seconds"] = {"write": sec / 2, "read": sec / 2}
            row = transit.summarize(transit.replace(plan, bytes_per_rank=size), t, 1, 1, [rec], bound, "")
            size_rows.append(row)
        (tmp_path / f"{size}").mkdir()
        transit.write_outputs(transit.replace(plan, out=tmp_path / f"{size}"), size_rows, {}, None)  # the ratios
        rows += size_rows
    assert [transit.vs_plain(r) for r in rows] == pytest.approx([0.5, 1.0, 1.0, 0.5, 3.0, 1.0])
    worst = transit.worst_cells(rows)
    assert worst["adios2-sst"]["vs_plain"] == {"ratio": pytest.approx(3.0), "mib_per_rank": 8.0, "producers": 1,
                                               "consumers": 1}
    assert worst["socket"]["vs_posix"]["ratio"] == pytest.approx(2.0)  # 0.5 s over the 0.25 s bound
    paths = transit.write_sweep(plan, rows, tmp_path / "copy.json")
    assert {p.name for p in paths} == {"sweep.csv", "sweep.json", "copy.json", "sweep.png"}
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    with open(tmp_path / "sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 6 and table[4]["mib_per_rank"] == "8" and table[4]["vs_plain"] == "3.000"
    assert json.loads((tmp_path / "sweep.json").read_text())["worst"]["adios2-sst"]["vs_plain"]["mib_per_rank"] == 8
    transit.print_sweep(plan, rows)
    out = capsys.readouterr().out
    assert "2.00× / 0.50×" in out  # socket at each size: ÷ POSIX / ÷ plain SST
    assert "3.00× (8 MiB, 1:1)" in out  # adios2-sst's worst cell


def test_plain_pair_writer_can_compute_the_oscillator(tmp_path: Path) -> None:
    from h5flow.transports.adios2 import missing_reason

    if missing_reason() is not None:
        pytest.skip(str(missing_reason()))
    from h5flow.benchmarks.adios2_plain import run_pair

    rec = run_pair(str(tmp_path / "s"), "sst", 1, 1, 1 << 20, 2, timeout=60, oscillator=True)
    assert rec["steps_consumed"] == 2 and rec["bytes"] == 2 << 20  # float32 cells of the oscillator, 1 MiB a step


def test_async_staging_plans_4_to_1_with_each_stack_and_configures_it(tmp_path: Path) -> None:
    """--async-staging: 4:1, hdf5 on tmpfs and disk, the write thread's rows then each connector stack's, whose
    XML names the stack (and the cache's directory: the tmpfs); an explicit option still wins."""
    import xml.etree.ElementTree as ET

    where = ["--tmpfs-dir", str(tmp_path), "--disk-dir", str(tmp_path)]
    plan = _plan_of([*where, "--async-staging"])
    assert (plan.producers, plan.ratios, plan.steps, plan.reps) == ([4], [4], 4, 1)
    assert plan.transports == ["hdf5-tmpfs", "hdf5-disk"] and plan.configurations() == [(4, 1, 4)]
    assert plan.hdf5_layout == "n-n" and plan.hdf5_more_layouts == ["n-n-vol-async", "n-n-vol-cache-async"]
    assert transit.with_layouts(plan, plan.transports)[:3] == [
        "hdf5-tmpfs", "hdf5-tmpfs:n-n-vol-async", "hdf5-tmpfs:n-n-vol-cache-async"]
    assert _plan_of([*where, "--async-staging", "--steps", "7"]).steps == 7
    for layout, stack, cache in (("n-n", None, None), ("n-n-vol-async", "async", None),
                                 ("n-n-vol-cache-async", "cache,async", str(tmp_path))):
        el = ET.fromstring(transit.transport_xml("hdf5-disk", "s", 4, layout, str(tmp_path))).find("transport")
        assert (el.get("layout"), el.get("vol_stack"), el.get("cache_path")) == ("n-n", stack, cache)
