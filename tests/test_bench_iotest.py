"""`h5flow bench iotest`: hdf5-iotest's ini format, its sweep and CSV, the C and h5py kernels, storage paths."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks.iotest import cases, ini, quick, report, runner
from h5flow.benchmarks.iotest.cases import Case
from h5flow.benchmarks.iotest.runner import BenchError, Launch, StoragePath

ROOT = Path(__file__).resolve().parents[1]

# hdf5-iotest's CSV header, as recorded in shared/reference/bench.md (src/utils.c, HEAD 179b5af)
IOTEST_CSV_HEADER = (
    "steps,arrays,rows,cols,scaling,proc-rows,proc-cols,slowdim,rank,version,alignment-increment,"
    "alignment-threshold,meta-block-size,layout,fill,fmt,io, async, wall [s],fsize [B],write-phase-min [s],"
    "write-phase-max [s],creat-min [s],creat-max [s],write-min [s],write-max [s],read-phase-min [s],"
    "read-phase-max [s],read-min [s],read-max [s]"
)

# hdf5-iotest's documented keys (src/configuration.c check_options and README) with a valid value each
DOCUMENTED = {
    "version": "0", "steps": "3", "arrays": "5", "rows": "16", "columns": "32", "process-rows": "2",
    "process-columns": "1", "scaling": "strong", "dataset-rank": "3", "slowest-dimension": "array",
    "layout": "chunked", "fill-values": "false", "mpi-io": "collective", "libver-bound-low": "v110",
    "libver-bound-high": "latest", "alignment-increment": "4096", "alignment-threshold": "1024",
    "meta-block-size": "4096", "single-process": "core", "hdf5-file": "out-#.h5", "csv-file": "out.csv",
    "restart": "0", "split": "0", "one-case": "2", "gzip": "4", "async": "0", "delay": "100ms",
}


def _ini(tmp_path: Path, text: str, name: str = "t.ini") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_documented_key_parses(tmp_path: Path) -> None:
    body = "[DEFAULT]\n" + "".join(f"{k} = {v}\n" for k, v in DOCUMENTED.items())
    cfg = ini.parse(_ini(tmp_path, body))
    assert (cfg.steps, cfg.arrays, cfg.rows, cfg.columns) == (3, 5, 16, 32)
    assert (cfg.process_rows, cfg.process_columns, cfg.scaling) == (2, 1, "strong")
    assert (cfg.dataset_rank, cfg.slowest_dimension, cfg.layout, cfg.fill_values) == (3, "array", "chunked", False)
    assert (cfg.mpi_io, cfg.libver_bound_low, cfg.libver_bound_high) == ("collective", "v110", "latest")
    assert (cfg.alignment_increment, cfg.alignment_threshold, cfg.meta_block_size) == (4096, 1024, 4096)
    assert (cfg.single_process, cfg.hdf5_file, cfg.csv_file) == ("core", "out-#.h5", "out.csv")
    assert (cfg.one_case, cfg.gzip, cfg.delay_us) == (2, 4, 100_000)
    assert cfg.at("steps") == f"{tmp_path / 't.ini'}:3"
    assert set(DOCUMENTED) | {"szip"} == set(ini.KEYS)


def test_hdf5_iotest_default_ini_and_sections(tmp_path: Path) -> None:
    text = ("; hdf5-iotest default\n[DEFAULT]\nversion = 0\nsteps = 20\narrays = 500\nrows = 100\ncolumns = 200\n"
            "process-rows = 1\nprocess-columns = 1\nscaling = weak\ndataset-rank = 4\nslowest-dimension = step\n"
            "layout = contiguous\nmpi-io = independent\nhdf5-file = hdf5_iotest.h5\ncsv-file = hdf5_iotest.csv\n"
            "\n[CUSTOM]\nsteps: 7   ; inline comment\n# full-line comment\nlayout = chunked\n")
    cfg = ini.parse(_ini(tmp_path, text))
    assert cfg.steps == 7 and cfg.arrays == 500 and cfg.layout == "chunked"
    assert cfg.at("steps").endswith("t.ini:19")


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("[DEFAULT]\nsteps = 2\nstepz = 3\n", 3, "unknown key 'stepz' in [DEFAULT]"),
    ("[DEFAULT]\nsteps = 2\n[CUSTOM]\nlayout = chunked\nfrobnicate = 1\n", 5, "unknown key 'frobnicate' in [CUSTOM]"),
    ("[DEFAULT]\nsteps = two\n", 2, "bad value 'two' for 'steps'"),
    ("[DEFAULT]\nrows = 1\n", 2, "bad value '1' for 'rows'"),
    ("[DEFAULT]\nscaling = medium\n", 2, "accepted: weak, strong"),
    ("[DEFAULT]\nversion = 1\n", 2, "only configuration version 0"),
    ("steps = 2\n", 1, "outside any section"),
    ("[DEFAULT]\nsteps\n", 2, "expected `key = value`"),
    ("[DEFAULT]\nasync = 1\n", 2, "async VOL connector"),
    ("[DEFAULT]\nlibver-bound-low = latest\nlibver-bound-high = v110\n", 2, "newer than libver-bound-high"),
    ("[DEFAULT]\nscaling = strong\nrows = 101\nprocess-rows = 2\n", 3, "divisible by"),
])
def test_ini_errors_name_key_and_file_line(tmp_path: Path, text: str, line: int, needle: str) -> None:
    path = _ini(tmp_path, text)
    with pytest.raises(ini.IniError) as e:
        ini.parse(path)
    assert f"{path}:{line}" in str(e.value)
    assert needle in str(e.value)


def test_sweep_sizes_follow_hdf5_iotest() -> None:
    base = ini.IotestConfig()
    assert len(cases.expand(base)) == 48  # 1 rank: 3 x 2 x 2 x 2 x 2
    assert len(cases.expand(base, (2, 1))) == 96
    tuned = ini.IotestConfig(alignment_increment=1 << 20, meta_block_size=1 << 16)
    assert len(cases.expand(tuned, (2, 2))) == 384
    pinned = ini.IotestConfig(dataset_rank=4, mpi_io="collective", layout="chunked")
    got = cases.expand(pinned, (2, 1))
    assert len(got) == 8 and {(c.rank, c.io, c.layout) for c in got} == {(4, "collective", "chunked")}
    order = cases.expand(base, (2, 1))[:4]
    assert [(c.fmt_low, c.io) for c in order] == [("earliest", "independent"), ("earliest", "collective"),
                                                  ("latest", "independent"), ("latest", "collective")]
    assert [c.index for c in cases.expand(ini.IotestConfig(one_case=5))] == [5]
    assert cases.case_file_name("f-#.h5", 7) == "f-0007.h5"
    with pytest.raises(ini.IniError, match="split driver is not parallel"):
        cases.expand(ini.IotestConfig(split=True), (2, 1))


def test_csv_header_is_hdf5_iotests(tmp_path: Path) -> None:
    assert report.CSV_HEADER == IOTEST_CSV_HEADER
    log = report.CsvLog(tmp_path / "x.csv", resume=False)
    c = Case(index=1, op="iotest", steps=2, arrays=3, rows=4, cols=5)
    r = runner.Result(c, "c", StoragePath(), {k: 0.5 for k in runner.METRICS}, 60, "1.14.5")
    log.append(r)
    head, row = (tmp_path / "x.csv").read_text().splitlines()
    assert head == IOTEST_CSV_HEADER
    assert len(row.split(",")) == len(head.split(","))
    assert row.startswith('2,3,4,5,weak,1,1,step,2,"1.14.5",1,0,2048,contiguous,true,earliest,independent,0,0.5000,0,')


def _tiny(tmp_path: Path, **over: str) -> Path:
    keys = {"steps": "2", "arrays": "2", "rows": "8", "columns": "16", "process-rows": "2", "process-columns": "1",
            "libver-bound-low": "latest", "fill-values": "false", "hdf5-file": "t-#.h5", "csv-file": "t.csv"}
    keys.update(over)
    return _ini(tmp_path, "[DEFAULT]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))


def _bench(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_iotest_runs_every_path_and_writes_csv_json_png(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    proc = _bench("iotest", str(_tiny(tmp_path, **{"slowest-dimension": "step", "mpi-io": "collective"})), "--vfd", "mpio,subfiling", "--vol", "native,h5flow_log",
                  "--dir", str(data), "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())
    assert "verified" in text
    have_log = any(c.name == "h5flow_log" for c in runner.connectors.find())
    if not have_log:
        assert "skipped mpio+h5flow_log on 2 ranks: the h5flow_log VOL connector is not built" in text
    payload = json.loads((out / "iotest.json").read_text())
    by_path: dict[str, list[dict]] = {}
    for r in payload["results"]:
        by_path.setdefault(r["path"], []).append(r)
    if have_log:  # h5flow_log refuses drivers it cannot honour: that path is skipped, not mislabelled
        assert "skipped subfiling+h5flow_log on 2 ranks: h5flow_log refuses the subfiling driver" in text
    if have_log:  # built: the same cases ran through it (HDF5_VOL_CONNECTOR=h5flow_log) and verified
        assert len(by_path["mpio+h5flow_log"]) == 6
        assert len((out / "t.mpio-h5flow_log.csv").read_text().splitlines()) == 7
    assert len(by_path["mpio+native"]) == 6  # 3 dataset ranks x 2 layouts
    assert len(by_path["subfiling+native"]) == 3  # chunked + collective is unsupported by subfiling
    for rs in by_path.values():
        for r in rs:
            assert r["checked"] == 2 * 2 * 8 * 16 * 2  # every value of every rank verified
            assert r["metrics"]["write-max"] > 0 and r["metrics"]["read-max"] > 0 and r["metrics"]["fsize"] > 0
    rows = list(csv.reader((out / "t.csv").read_text().splitlines()))
    assert ",".join(rows[0]) == IOTEST_CSV_HEADER and len(rows) == 7
    assert len((out / "t.subfiling-native.csv").read_text().splitlines()) == 4
    assert "skipped 3 of 6 cases on subfiling+native" in text
    assert (out / "iotest-throughput.png").stat().st_size > 0
    assert not list(data.iterdir()), "the benchmark left files behind"
    assert {row["index"] for row in payload["summary"]} == set(range(1, 7))


def test_iotest_h5py_kernel_quick_and_restart(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path, **{"dataset-rank": "4", "restart": "1"})
    proc = _bench("iotest", str(cfg), "--impl", "h5py", "--quick", "--dir", str(tmp_path), "-o", str(tmp_path / "o"),
                  "--no-plot")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (tmp_path / "o" / "t.csv").read_text().splitlines()
    assert len(lines) == 9
    # restart = 1: a second run resumes after the rows already in the CSV (drop the last two)
    (tmp_path / "o" / "t.csv").write_text("\n".join(lines[:-2]) + "\n")
    proc = _bench("iotest", str(cfg), "--impl", "h5py", "--quick", "--dir", str(tmp_path), "-o", str(tmp_path / "o"),
                  "--no-plot")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = (tmp_path / "o" / "t.csv").read_text().splitlines()
    assert len(again) == 9 and again[:7] == lines[:7]
    assert len(json.loads((tmp_path / "o" / "iotest.json").read_text())["results"]) == 2


def test_iotest_grids_give_throughput_against_processes(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path, **{"dataset-rank": "4", "layout": "contiguous", "slowest-dimension": "step"})
    proc = _bench("iotest", str(cfg), "--grid", "1x1", "--grid", "2x1", "--dir", str(tmp_path), "-o",
                  str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads((tmp_path / "o" / "iotest.json").read_text())
    assert [p["nprocs"] for p in payload["throughput_mib_s"]["mpio+native"]] == [1, 2]
    assert {(r["nprocs"], r["case"]["io"]) for r in payload["results"]} == {(1, "posix"), (2, "independent"),
                                                                          (2, "collective")}
    assert (tmp_path / "o" / "iotest-throughput.png").stat().st_size > 0


@pytest.mark.parametrize("impl", ["c", "h5py"])
def test_verification_failure_is_an_error(tmp_path: Path, impl: str) -> None:
    cs = cases.expand(quick(ini.IotestConfig(process_rows=2, dataset_rank=3, libver_bound_low="latest",
                                             mpi_io="collective", fill_values=False)))
    with pytest.raises(BenchError, match="verification failed") as e:
        runner.run_launch(Launch(impl, StoragePath(), 2, cs), tmp_path, "v-#.h5", seed=0, read_seed=1)
    assert "case 1" in str(e.value)
    assert not list(tmp_path.glob("v-*")), "a failed case left its file behind"


def test_kernel_rejects_bad_case_lines(tmp_path: Path) -> None:
    bad = tmp_path / "cases.txt"
    bad.write_text("index=1 op=iotest colour=blue file=/nonexistent/x.h5\n")
    for cmd in (runner.command("c", 1, bad), runner.command("h5py", 1, bad)):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "unknown key" in proc.stderr and "colour" in proc.stderr


@pytest.mark.parametrize("impl", ["c", "h5py"])
def test_kernels_refuse_an_existing_directory_as_their_file(tmp_path: Path, impl: str) -> None:
    (tmp_path / "v-0001.h5").mkdir()
    (tmp_path / "v-0001.h5" / "keep.txt").write_text("user data")
    cs = cases.expand(quick(ini.IotestConfig(process_rows=1, dataset_rank=2, libver_bound_low="latest",
                                             layout="contiguous", fill_values=False, slowest_dimension="step")))
    with pytest.raises(BenchError, match="is an existing directory"):
        runner.run_launch(Launch(impl, StoragePath(), 1, cs), tmp_path, "v-#.h5")
    assert (tmp_path / "v-0001.h5" / "keep.txt").read_text() == "user data"


def test_user_file_names_stay_in_their_directory(tmp_path: Path) -> None:
    proc = _bench("iotest", str(_tiny(tmp_path, **{"csv-file": "../escape.csv"})), "--dir", str(tmp_path),
                  "-o", str(tmp_path / "o"))
    assert proc.returncode == 2 and "leaves" in proc.stderr and "t.ini:" in proc.stderr
    assert not (tmp_path / "escape.csv").exists()
    proc = _bench("iotest", str(_tiny(tmp_path, **{"hdf5-file": "/etc/x.h5"})), "--dir", str(tmp_path),
                  "-o", str(tmp_path / "o"))
    assert proc.returncode == 2 and "must be a relative name" in proc.stderr


def test_h5flow_log_path_is_skipped_with_reason_when_not_built(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HDF5_PLUGIN_PATH", str(tmp_path))
    env, why = runner.path_env(StoragePath("mpio", "h5flow_log"))
    assert env is None and "h5flow_log VOL connector is not built" in why and str(tmp_path) in why
    env, why = runner.path_env(StoragePath("mpio", "native"))
    assert env is not None and "HDF5_VOL_CONNECTOR" not in env and why == ""
    assert "2 or more ranks" in runner.usable(StoragePath("subfiling", "native"), 1)


def test_subfiling_skips_what_hdf5_1_14_5_cannot_do() -> None:
    sub, mpio = StoragePath("subfiling", "native"), StoragePath()
    coll_chunked = Case(index=1, op="iotest", layout="chunked", io="collective", fill="false")
    fill_chunked = Case(index=2, op="iotest", layout="chunked", io="independent", fill="true")
    fine = Case(index=3, op="iotest", layout="contiguous", io="collective", fill="true")
    assert "collective I/O is currently unsupported" in runner.unsupported(coll_chunked, sub)
    assert "fill values" in runner.unsupported(fill_chunked, sub)
    assert runner.unsupported(fine, sub) == ""
    assert all(runner.unsupported(c, mpio) == "" for c in (coll_chunked, fill_chunked, fine))


def test_shipped_examples_parse() -> None:
    for name in ("simple.ini", "quick.ini", "strong-collective.ini"):
        cfg = ini.parse(ROOT / "examples" / "iotest" / name)
        assert cases.expand(cfg)
    simple = ini.parse(ROOT / "examples" / "iotest" / "simple.ini")
    assert (simple.rows, simple.columns) == (100, 200) and simple.steps * simple.arrays * 50 == 20 * 500


def test_concurrent_runs_without_dir_do_not_share_files(tmp_path: Path) -> None:
    """Two runs of one config at once, without --dir: each writes into a private directory it removes
    afterwards. (A shared default directory made them truncate and delete each other's case files while
    a rank was writing: h5flow_log then failed "cannot open the write logs of dataset ...: No such file".)"""
    cfg = _tiny(tmp_path, **{"dataset-rank": "2", "layout": "contiguous", "slowest-dimension": "step",
                             "hdf5-file": f"{tmp_path.name}-#.h5"})
    cmd = [sys.executable, "-m", "h5flow.cli", "bench", "iotest", str(cfg), "--vol", "native,h5flow_log", "--no-plot"]
    procs = [subprocess.Popen([*cmd, "-o", str(tmp_path / f"o{k}")], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for k in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
    dirs = {json.loads((tmp_path / f"o{k}" / "iotest.json").read_text())["data_dir"] for k in range(2)}
    assert len(dirs) == 2, f"both runs wrote into {dirs}"
    assert not any(Path(d).exists() for d in dirs), "a run left its private data directory behind"
