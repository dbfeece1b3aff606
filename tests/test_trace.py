"""h5flow_trace, the tracing pass-through connector, and its loader and commands (docs/TRACE.md).

Every traced program runs in a subprocess (the connector is chosen by the environment before HDF5 starts) and
checks the data it reads back, so a connector that changed data fails here as well as one that recorded wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir
from h5flow.trace import TraceError, load
from h5flow.trace import _format as fmt

PLUGIN_DIR = Path(os.environ.get("H5FLOW_TRACE_PLUGIN_DIR", default_plugin_dir()))
ROOT = Path(__file__).resolve().parents[1]
KNOWN = ROOT / "build" / "native" / "connectors" / "h5flow_trace" / "h5ft_known"

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_trace.so").exists(),
                                reason="h5flow_trace plugin not built (run make setup)")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(PLUGIN_DIR))
    env.pop("HDF5_VOL_CONNECTOR", None)
    env.update(extra)
    return env


def _h5flow(*args: str, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _trace(monkeypatch: pytest.MonkeyPatch, out: Path, *command: str, **env: str) -> int:
    """``h5flow trace --out OUT -- COMMAND`` in this process (the traced command is still a process of its own)."""
    from h5flow.trace.cli import main

    for k, v in _env(**env).items():
        monkeypatch.setenv(k, v)
    if "HDF5_VOL_CONNECTOR" not in env:
        monkeypatch.delenv("HDF5_VOL_CONNECTOR", raising=False)
    return main(["--out", str(out), "--", *command])


def _write(tmp: Path, name: str, body: str) -> Path:
    p = tmp / name
    p.write_text(textwrap.dedent(body))
    return p


def test_known_c_program_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of a known C program (run by h5flow trace), with what each moved, selected and converted."""
    assert KNOWN.exists(), f"{KNOWN} not built"
    out = tmp_path / "t"
    assert _trace(monkeypatch, out, str(KNOWN), str(tmp_path / "k.h5")) == 0
    df = load(out)
    user = df[~df["op"].isin(["file_optional", "dataset_get", "file_get", "object_get", "link_get",
                              "file_specific", "dataset_optional", "link_specific", "object_specific"])]
    assert list(user["op"]) == [
        "file_create", "group_create", "dataset_create", "dataset_write", "attr_create", "attr_write",
        "attr_close", "dataset_read", "dataset_close", "group_close", "file_close",
        "file_open", "dataset_open", "attr_open", "attr_read", "attr_close", "dataset_read", "dataset_close",
        "file_close"]
    assert set(df["rank"]) == {0} and df["ok"].all()
    assert (df["file"] == str(tmp_path / "k.h5")).all()
    assert df["t0"].min() == 0.0 and (df["dur"] >= 0).all() and df["t0"].is_monotonic_increasing
    rows = {(op, i): row for op, g in user.groupby("op") for i, (_, row) in enumerate(g.iterrows())}
    create = rows[("dataset_create", 0)]
    assert (create["obj"], create["shape"], create["ndims"], create["file_type"]) == ("/g/d", "100x10", 2, "f32le")
    props = json.loads(create["props"])
    assert props == {"layout": "chunked", "chunk": [10, 10], "fill_time": "never", "alloc_time": "early",
                     "fill_value_set": "default", "filters": []}
    w = rows[("dataset_write", 0)]
    assert (w["bytes"], w["npoints"], w["nblocks"], w["mem_type"], w["file_type"], w["conv"], w["xfer"]) == \
        (20 * 10 * 8, 200, 2, "f64le", "f32le", True, "independent")
    full = rows[("dataset_read", 0)]
    assert (full["bytes"], full["npoints"], full["nblocks"], full["conv"]) == (4000, 1000, 1, False)
    pts = rows[("dataset_read", 1)]
    assert (pts["bytes"], pts["npoints"], pts["nblocks"], pts["obj"]) == (20, 5, 5, "/g/d")
    aw = rows[("attr_write", 0)]
    assert (aw["obj"], aw["bytes"], aw["shape"], aw["mem_type"], aw["xfer"]) == ("/g/d/@units", 8, "scalar",
                                                                                 "str(8)", "")
    ar = rows[("attr_read", 0)]
    assert (rows[("attr_open", 0)]["obj"], ar["obj"], ar["bytes"]) == ("/g/d/@units", "/g/d/@units", 8)
    fo = json.loads(rows[("file_open", 0)]["props"])
    assert fo["libver"] == ["v110", "v114"] and fo["driver"] == "sec2"
    assert json.loads(rows[("file_create", 0)]["props"])["libver"] == ["earliest", "v114"]


def test_small_blocks_give_the_same_trace(tmp_path: Path) -> None:
    """Records flushed every 2 (strings before the records that use them) read as the default blocks do."""
    frames = []
    for block in ("2", "4096"):
        out = tmp_path / f"t{block}"
        r = subprocess.run([str(KNOWN), str(tmp_path / f"k{block}.h5")], capture_output=True, text=True, timeout=60,
                           env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(out),
                                    H5FLOW_TRACE_BLOCK=block))
        assert r.returncode == 0, r.stderr
        frames.append(load(out)[["op", "obj", "bytes", "npoints", "nblocks", "shape", "mem_type", "file_type",
                                 "props"]])
    assert len(frames[0]) > 10 and frames[0].equals(frames[1])


def test_records_read_without_h5flow_by_the_documented_dtype(tmp_path: Path) -> None:
    """docs/TRACE.md's numpy dtype and string-table reader give the loader's rows."""
    out = tmp_path / "t"
    r = subprocess.run([str(KNOWN), str(tmp_path / "k.h5")], capture_output=True, text=True, timeout=60,
                       env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(out)))
    assert r.returncode == 0, r.stderr
    doc = (ROOT / "docs" / "TRACE.md").read_text()
    snippets = [b.split("```", 1)[0] for b in doc.split("```python\n")[1:]]
    blocks = [next(b for b in snippets if "RECORD = np.dtype" in b), next(b for b in snippets if "def strings" in b)]
    ns: dict[str, object] = {}
    os.chdir(out)
    try:
        exec(blocks[0], ns)  # noqa: S102 - the documentation's own snippet, run as a user would
        exec(blocks[1], ns)  # noqa: S102
        names = ns["strings"]("rank-0.strings")  # type: ignore[operator]
    finally:
        os.chdir(ROOT)
    recs = ns["recs"]
    assert ns["RECORD"] == fmt.RECORD
    df = load(out)
    assert recs["op"][-1] == 0xFFFF and recs["npoints"][-1] == len(df) == len(recs) - 1  # type: ignore[index]
    assert sorted(names[i] for i in recs["obj"][:-1]) == sorted(df["obj"])  # type: ignore[index]


def test_h5py_program_traced_end_to_end_and_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`h5flow trace -- python prog.py`, then `h5flow trace show`: tables and the timeline PNG."""
    prog = _write(tmp_path, "prog.py", """
        import sys, numpy as np, h5py
        with h5py.File(sys.argv[1], "w", libver="latest") as f:
            d = f.create_dataset("x", shape=(64, 8), dtype="f4", chunks=(16, 8))
            d[0:16] = np.arange(128, dtype="f8").reshape(16, 8)
            d.attrs["n"] = np.int32(7)
        with h5py.File(sys.argv[1], "r") as f:
            assert np.array_equal(f["x"][0:16], np.arange(128, dtype="f4").reshape(16, 8))
            assert f["x"].attrs["n"] == 7
        """)
    out = tmp_path / "trace"
    env = _env()
    r = _h5flow("trace", "--out", str(out), "--", sys.executable, str(prog), str(tmp_path / "p.h5"), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    df = load(out)
    w = df[df["op"] == "dataset_write"]
    assert len(w) == 1
    row = w.iloc[0]
    assert (row["obj"], row["bytes"], row["npoints"], row["mem_type"], row["file_type"], row["conv"]) == \
        ("/x", 16 * 8 * 8, 128, "f64le", "f32le", True)
    assert json.loads(df[df["op"] == "file_create"].iloc[0]["props"])["libver"] == ["v114", "v114"]
    assert "attr_write" in set(df["op"]) and "/x/@n" in set(df["obj"])
    # a second run into the same directory is refused (two runs would read as one)
    from h5flow.trace.cli import main

    assert main(["--out", str(out), "--", sys.executable, str(prog), str(tmp_path / "p.h5")]) == 2
    assert "already holds a trace" in capsys.readouterr().err

    assert main(["show", str(out), "--png", str(tmp_path / "tl.png")]) == 0
    shown = capsys.readouterr().out
    for text in ("time per operation", "dataset_write", "top", "/x", "per rank", "imbalance"):
        assert text in shown, shown
    png = (tmp_path / "tl.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000


def test_mpi_four_ranks_collective_and_converted_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 ranks under mpiexec: one trace per rank, requested and actual transfer modes and HDF5's causes."""
    mpiexec = shutil.which("mpiexec")
    assert mpiexec, "mpiexec not on PATH"
    prog = _write(tmp_path, "mpi_prog.py", """
        import sys, numpy as np, h5py
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        r = comm.rank
        with h5py.File(sys.argv[1], "w", driver="mpio", comm=comm) as f:
            same = f.create_dataset("same", shape=(4 * 25, 10), dtype="f8")
            conv = f.create_dataset("conv", shape=(4 * 25, 10), dtype="f4")
            block = np.full((25, 10), r, dtype="f8")
            with same.collective:
                same[r * 25:(r + 1) * 25] = block
            with conv.collective:
                conv[r * 25:(r + 1) * 25] = block
            same[r * 25:r * 25 + 1] = block[:1]          # independent
        with h5py.File(sys.argv[1], "r", driver="mpio", comm=comm) as f:
            want = np.repeat(np.arange(4), 25)[:, None] * np.ones(10)
            assert np.array_equal(f["same"][...], want) and np.array_equal(f["conv"][...], want)
        """)
    out = tmp_path / "trace"
    assert _trace(monkeypatch, out, mpiexec, "-n", "4", sys.executable, str(prog), str(tmp_path / "m.h5"),
                  H5FLOW_TRACE_BLOCK="2") == 0
    assert sorted(p.name for p in out.glob("rank-*.trace")) == [f"rank-{i}.trace" for i in range(4)]
    df = load(out)
    assert sorted(df["rank"].unique()) == [0, 1, 2, 3]
    w = df[df["op"] == "dataset_write"]
    for rank in range(4):
        mine = w[w["rank"] == rank]
        same, conv, indep = (mine.iloc[i] for i in range(3))
        assert (same["obj"], same["xfer"], same["conv"], same["npoints"]) == ("/same", "collective", False, 250)
        assert same["io_actual"] == "contiguous-collective" and same["no_coll_cause"] == ""
        assert (conv["obj"], conv["xfer"], conv["conv"], conv["file_type"]) == ("/conv", "collective", True, "f32le")
        assert conv["io_actual"] != ""
        assert (indep["xfer"], indep["io_actual"]) == ("independent", "none")
        assert "independent" in indep["no_coll_cause"]
    create = json.loads(df[(df["op"] == "file_create") & (df["rank"] == 0)].iloc[0]["props"])
    assert create["driver"] == "mpio" and isinstance(create["mpi_hints"], dict)


def test_trace_failing_on_one_rank_fails_the_open_on_every_rank(tmp_path: Path) -> None:
    """One rank's trace cannot be opened: every rank's collective open fails (none waits in it), naming it."""
    mpiexec = shutil.which("mpiexec")
    assert mpiexec, "mpiexec not on PATH"
    prog = _write(tmp_path, "mpi_fail.py", """
        import sys, h5py
        from mpi4py import MPI
        try:
            h5py.File(sys.argv[1], "w", driver="mpio", comm=MPI.COMM_WORLD)
        except OSError as e:
            print(f"rank {MPI.COMM_WORLD.rank}: {e}", file=sys.stderr)
            sys.exit(3)
        """)
    env = _env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(tmp_path / "t"))
    cmd = [sys.executable, str(prog), str(tmp_path / "m.h5")]
    r = subprocess.run([mpiexec, "-n", "2", *cmd, ":", "-n", "1", "-env", "H5FLOW_TRACE_BLOCK", "bad", *cmd, ":",
                        "-n", "1", *cmd], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    for rank in (0, 1, 3):
        assert f"rank {rank}: " in r.stderr and "the trace of rank 2" in r.stderr, r.stderr
    assert "rank 2: " in r.stderr and "H5FLOW_TRACE_BLOCK=bad" in r.stderr, r.stderr


@pytest.mark.parametrize("below", ["h5flow_log", "h5flow_async under_vol=h5flow_log;under_info={}"])
def test_stacked_over_other_connectors(below: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing HDF5_VOL_CONNECTOR stays, below the trace connector: the file is an h5flow_log container."""
    for lib in ("libh5flow_log.so", "libh5flow_async.so"):
        assert (PLUGIN_DIR / lib).exists(), f"{lib} not built"
    prog = _write(tmp_path, "prog.py", """
        import sys, numpy as np, h5py
        from h5flow import _hdf5lib
        with h5py.File(sys.argv[1], "w") as f:
            f["a"] = np.arange(1000, dtype="i4")
        with h5py.File(sys.argv[1], "r") as f:
            assert np.array_equal(f["a"][...], np.arange(1000, dtype="i4"))
        """)
    out = tmp_path / "trace"
    assert _trace(monkeypatch, out, sys.executable, str(prog), str(tmp_path / "c.h5"), HDF5_VOL_CONNECTOR=below) == 0
    assert (tmp_path / "c.h5").is_dir(), "the file was not written by h5flow_log"
    df = load(out)
    w = df[df["op"] == "dataset_write"].iloc[0]
    assert (w["obj"], w["bytes"], w["file_type"], w["conv"]) == ("/a", 4000, "i32le", False)
    assert w["io_actual"] == ""  # HDF5 reports the actual I/O mode only for MPI-IO under native


def test_a_file_of_another_driver_leaves_mpi_alone(tmp_path: Path) -> None:
    """Describing the driver of a serial file (h5py's file-like object driver) must not initialize MPI: naming
    HDF5's subfiling driver registers it, and that initializes MPI in a program that never asked for it."""
    prog = _write(tmp_path, "fileobj.py", """
        import io, h5py, mpi4py
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        from mpi4py import MPI
        with h5py.File(io.BytesIO(), "w") as f:
            f["x"] = [1, 2, 3]
        assert not MPI.Is_initialized(), "opening a serial file initialized MPI"
        """)
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60,
                       env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(tmp_path / "t")))
    assert r.returncode == 0, r.stdout + r.stderr


def test_forked_child_does_not_repeat_the_parents_records(tmp_path: Path) -> None:
    """A child forked after some calls exits normally: the parent's buffered records are written once."""
    prog = _write(tmp_path, "fork.py", """
        import os, sys, numpy as np, h5py
        f = h5py.File(sys.argv[1], "w")
        f["a"] = np.arange(10)
        pid = os.fork()
        if pid == 0:
            with h5py.File(sys.argv[1] + ".child", "w") as g:
                g["b"] = np.arange(3)
            sys.exit(0)          # atexit: HDF5 closes, the child's trace is written
        assert os.waitpid(pid, 0)[1] == 0
        f.close()
        """)
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, str(prog), str(tmp_path / "f.h5")], capture_output=True, text=True,
                       timeout=60, env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(out)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list(out.glob("rank-0*.trace"))) == 2  # the parent's and the child's (rank-0-<pid>)
    df = load(out)
    writes = df[df["op"] == "dataset_write"]
    assert sorted(writes["obj"]) == ["/a", "/b"], writes[["pid", "obj"]]
    assert df[df["obj"] == "/a"]["pid"].nunique() == 1


def test_process_ending_without_closing_hdf5_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A program that exits 0 but never lets HDF5 close (os._exit) lost its last records: not a success."""
    prog = _write(tmp_path, "quit.py", """
        import os, sys, numpy as np, h5py
        f = h5py.File(sys.argv[1], "w")
        f["a"] = np.arange(10)
        f.flush()
        os._exit(0)
        """)
    assert _trace(monkeypatch, tmp_path / "t", sys.executable, str(prog), str(tmp_path / "q.h5")) == 1
    assert "lack their end record" in capsys.readouterr().err


def test_unwritable_trace_directory_fails_the_open(tmp_path: Path) -> None:
    """A trace that cannot be written is an error at the file open, not a silently missing trace."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    prog = _write(tmp_path, "prog.py", """
        import sys, h5py
        try:
            h5py.File(sys.argv[1], "w")
        except OSError as e:
            print(e, file=sys.stderr)
            sys.exit(3)
        """)
    r = subprocess.run([sys.executable, str(prog), str(tmp_path / "x.h5")], capture_output=True, text=True,
                       timeout=60, env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(blocker / "t")))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "trace directory" in r.stderr and str(blocker / "t") in r.stderr
    # a block size that is not one is refused the same way
    r = subprocess.run([sys.executable, str(prog), str(tmp_path / "x.h5")], capture_output=True, text=True,
                       timeout=60, env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(tmp_path / "t"),
                                            H5FLOW_TRACE_BLOCK="4k"))
    assert r.returncode == 3 and "H5FLOW_TRACE_BLOCK=4k" in r.stderr, r.stderr


def test_loader_truncated_and_foreign_files(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = subprocess.run([str(KNOWN), str(tmp_path / "k.h5")], capture_output=True, text=True, timeout=60,
                       env=_env(HDF5_VOL_CONNECTOR="h5flow_trace", H5FLOW_TRACE_DIR=str(out)))
    assert r.returncode == 0, r.stderr
    full = load(out)
    assert full.attrs["incomplete"] == []
    trace = out / "rank-0.trace"
    data = trace.read_bytes()
    trace.write_bytes(data[:-30])  # a process killed inside a write: the partial record is not a row
    cut = load(out)
    assert len(cut) == len(full) and cut.attrs["incomplete"] == [str(trace)]
    trace.write_bytes(data[:-110])  # ... and a record before it lost
    assert len(load(out)) == len(full) - 1
    trace.write_bytes(data[:-160] + data[-80:])  # the end record counts records that are not there
    with pytest.raises(TraceError, match="end record counts"):
        load(out)
    trace.write_bytes(b"NOTATRACE" + data[9:])
    with pytest.raises(TraceError, match="not an h5flow trace"):
        load(out)
    with pytest.raises(TraceError, match="no such trace directory"):
        load(tmp_path / "missing")


@pytest.mark.parametrize("argv", [["--help"], ["show", "--help"]])
def test_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from h5flow.trace.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "h5flow trace" in capsys.readouterr().out


def test_info_lists_the_connector() -> None:
    r = _h5flow("info", "--json", env=_env())
    assert r.returncode == 0, r.stderr
    assert "h5flow_trace" in r.stdout


@pytest.mark.full_only
def test_sanitized_connector_on_its_c_test() -> None:
    """The connector built with ASan/UBSan runs the known C program (ctest) cleanly."""
    from test_vol_h5flow_log import _cmake_build

    build = ROOT / "build" / "native-asan"
    _cmake_build(build, "-DH5FLOW_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug",
                 targets=("connectors/h5flow_trace/all",))
    env = dict(os.environ, HDF5_PLUGIN_PATH=str(build / "plugins"), ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    r = subprocess.run(["ctest", "--output-on-failure", "--test-dir", str(build / "connectors" / "h5flow_trace")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tests passed" in r.stdout


def test_bench_trace_runs_both_sides_and_checks_the_trace(tmp_path: Path) -> None:
    """`h5flow bench trace` (small): a row per case, the traced side verified by its own trace."""
    out = tmp_path / "rows.json"
    r = _h5flow("bench", "trace", "--reps", "1", "--bulk-mib", "8", "--write-mib", "4", "--meta-count", "50",
                "--dir", str(tmp_path), "--json", str(out), env=_env(), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {row["case"]: row for row in json.loads(out.read_text())}
    assert rows["bulk"]["calls"] == 2 and rows["meta"]["calls"] == 150
    assert all(row["native_s"] > 0 and row["traced_s"] > 0 for row in rows.values())
