"""A damaged index is an error (or, asked for, ignored and scanned), never an answer; ``verify`` checks the
index against the data; a process that queried a file holds no lock that ``verify`` needs; names that name
nothing say what exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5flow.query import ApplyOptions, BuildConfig, apply, build_index, verify_index
from h5flow.query.index import forget_loaded, sidecar_path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True, timeout=120)


def _file(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(1_000_000, dtype="i8"), chunks=(62_500,))
    build_index(p, "/x", BuildConfig(kind=kind, progress=False))  # type: ignore[arg-type]
    forget_loaded()
    return p


def _damage_zone_maxes(p: Path) -> None:
    """Zero the last block's zone maxes (as a bit flip or a bad copy would)."""
    with h5py.File(sidecar_path(p), "r+") as h:
        g = h["/datasets/x/minmax"]
        mx = g["max"][()]
        mx[-1] = 0
        g["max"][...] = mx
        smx = g["sub_max"][()]
        smx[-g.attrs["sub_blocks"]:] = 0
        g["sub_max"][...] = smx


def _damage_bins(p: Path) -> None:
    with h5py.File(sidecar_path(p), "r+") as h:
        g = h["/datasets/x/bitmap"]
        g["bin_max"][...] = np.full(g["bin_max"].shape, -1, g["bin_max"].dtype)


@pytest.mark.parametrize("kind, damage", [("minmax", _damage_zone_maxes), ("bitmap", _damage_bins)])
def test_a_damaged_index_is_an_error_never_an_answer(tmp_path: Path, kind: str, damage) -> None:  # type: ignore[no-untyped-def]
    p = _file(tmp_path, kind)
    with apply(p, "x > 999990") as r:
        assert r.datasets[0].count == 9
    forget_loaded()
    damage(p)
    with pytest.raises(ValueError, match="damaged"):  # DamagedIndexError
        apply(p, "x > 999990")
    with apply(p, "x > 999990", ApplyOptions(on_stale="scan")) as r:  # asked for: ignored, scanned
        d = r.datasets[0]
        used = {lf.index for lf in d.selection.leaves}  # the damaged kind is not used (the other may be)
        assert d.count == 9 and used == ({"damaged (ignored)"} if kind == "minmax" else {"minmax"}), used
    r = _cli("query", str(p), "x > 999990", "--count")
    assert r.returncode == 1 and "damaged" in r.stderr and "element(s)" not in r.stdout, (r.stdout, r.stderr)
    r = _cli("index", "verify", str(p), "/x")
    assert r.returncode == 1 and "damaged" in r.stderr and "stamped fresh" not in r.stdout, (r.stdout, r.stderr)
    r = _cli("index", "list", str(p))
    assert "damaged" in r.stdout
    with apply(p, "x > 999990", ApplyOptions(on_stale="rebuild")) as r:  # rebuilt: sound again
        assert r.datasets[0].count == 9
    assert verify_index(p, "/x") == (16, 0)


def test_verify_checks_the_index_against_the_data_even_with_a_matching_checksum(tmp_path: Path) -> None:
    """An index whose checksum was recomputed over wrong content (a bug in a writer, not a bit flip) still
    fails verify: the zone maps and bins are recomputed from the data and compared."""
    from h5flow.query.index import content_crc

    for kind in ("minmax", "bitmap"):
        p = _file(tmp_path, kind)
        with h5py.File(sidecar_path(p), "r+") as h:
            g = h[f"/datasets/x/{kind}"]
            name = "max" if kind == "minmax" else "bin_max"
            a = g[name][()]
            a[-1] -= 5
            g[name][...] = a
            g.attrs["content_crc32"] = np.uint32(content_crc({k: g[k][()] for k in g if k != "blob"}, dict(g.attrs)))
        forget_loaded()
        with pytest.raises(ValueError, match="does not describe the data"):  # DamagedIndexError
            verify_index(p, "/x")


LIVE = """
import sys, time
from h5flow.query import apply
with apply(sys.argv[1], "x > 999990") as r:
    assert r.datasets[0].count == 9
print("queried", flush=True)
time.sleep(60)
"""


def test_verify_while_a_process_that_queried_the_file_is_alive(tmp_path: Path) -> None:
    p = _file(tmp_path, "minmax")
    live = subprocess.Popen([sys.executable, "-c", LIVE, str(p)], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "queried"
        r = _cli("index", "verify", str(p), "/x")
        assert r.returncode == 0 and "stamped fresh" in r.stdout, r.stderr
        r = _cli("index", "build", str(p), "/x")  # rebuilds too
        assert r.returncode == 0, r.stderr
    finally:
        live.kill()
        live.wait()
        assert live.stdout is not None
        live.stdout.close()


def test_a_name_that_names_nothing_says_what_exists(tmp_path: Path) -> None:
    p = tmp_path / "data.h5"
    with h5py.File(p, "w") as f:
        f["temperature"] = np.arange(10.0)
        t = np.zeros(5, dtype=[("vx", "f8"), ("vy", "f8")])
        f["table"] = t
        f["temperature"].attrs["units"] = "K"
    for expr, frag in (("temp > 3.5", "no dataset or attribute named 'temp': datasets /temperature"),
                       ("vx > 0.5", "'vx' is a field of the compound dataset(s) /table"),
                       ("table.z > 0.5", "/table has no field 'z' (its fields: vx, vy)"),
                       ("unit == 'K'", "attributes units")):
        r = _cli("query", str(p), expr)
        assert r.returncode == 1 and frag in r.stderr and "no match" not in r.stdout, (expr, r.stdout, r.stderr)
    r = _cli("query", str(p), "units == 'K'")
    assert r.returncode == 0 and "attribute /temperature @units" in r.stdout, r.stderr
    r = _cli("query", str(p), "@nope == 1")
    assert r.returncode == 0 and "no match" in r.stdout


def test_query_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    p = tmp_path / "data.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(100_000.0)
    proc = subprocess.Popen(f"{sys.executable} -m h5flow.cli query {p} 'x >= 0' --limit 0 | head -2",
                            shell=True, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert len(out.splitlines()) == 2 and "Broken pipe" not in err and "Traceback" not in err, err


def test_ls_refuses_special_files_and_symlinks_out_of_a_container_without_blocking(tmp_path: Path) -> None:
    import os

    from h5flow._paths import default_plugin_dir

    c = tmp_path / "c"
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(default_plugin_dir()))
    subprocess.run([sys.executable, "-c", "import h5py, sys; h5py.File(sys.argv[1], 'w')['x'] = [1, 2, 3]", str(c)],
                   env=env, check=True, timeout=120)
    logs = sorted((c / "x").glob("*.idx"))
    assert logs, sorted(p.name for p in (c / "x").iterdir())
    r = _cli("ls", str(c))
    assert r.returncode == 0 and "/x" in r.stdout, r.stderr
    for target in ("/dev/zero", "fifo", str(tmp_path / "outside")):
        logs[0].unlink()
        if target == "fifo":
            os.mkfifo(logs[0])
        else:
            if not target.startswith("/dev"):
                Path(target).write_bytes(b"\0" * 64)
            logs[0].symlink_to(target)
        r = _cli("ls", str(c))  # within _cli's timeout: a blocking open or an endless read fails the test
        assert r.returncode == 1 and "refused" in r.stderr, (target, r.stdout, r.stderr)


def test_index_commands_name_the_datasets_there_are(tmp_path: Path) -> None:
    p = tmp_path / "d.h5"
    with h5py.File(p, "w") as f:
        f["a"] = np.arange(10.0)
        f["g/b"] = np.arange(10)
    for action in ("build", "verify"):
        r = _cli("index", action, str(p), "/nope")
        assert r.returncode == 1 and f"no dataset /nope in {p}; datasets: /a, /g/b" in r.stderr, r.stderr
        assert r.stderr.count("error:") == 1 and "synchronously" not in r.stderr, r.stderr
