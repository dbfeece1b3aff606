"""Small metadata gaps h5py's own test suite found through h5flow_log: SWMR flags (h5py ``swmr_mode``),
the link name character set, ``track_times=False``."""

from __future__ import annotations

from pathlib import Path

from test_vol_h5flow_log import run_script
from test_vol_h5flow_log_handles import same_as_native


def test_swmr_flags_and_reading_while_writing(tmp_path: Path) -> None:
    out = run_script("""
        p = sys.argv[1]
        with opened(h5py.File(p, "w")) as f:
            f.create_dataset("d", data=np.arange(4.0), chunks=(4,), maxshape=(None,))
        w = opened(h5py.File(p, "a"))
        print("before", w.swmr_mode)
        w.swmr_mode = True                                   # H5Fstart_swmr_write
        print("writer", w.swmr_mode, bool(w.id.get_intent() & h5py.h5f.ACC_SWMR_WRITE))
        r = opened(h5py.File(p, "r", swmr=True))
        print("reader", r.swmr_mode, bool(r.id.get_intent() & h5py.h5f.ACC_SWMR_READ))
        try:
            r.swmr_mode = True
            print("read-only started")
        except Exception as e:
            print("read-only refused:", str(e)[-90:])
        rd = r["d"]
        wd = w["d"]
        wd.resize((6,)); wd[4:] = [7, 8]; wd.flush()
        rd.refresh()
        print("seen", rd[...].tolist())
        r.close(); w.close()
        with opened(h5py.File(p, "r")) as f:
            print("plain", f.swmr_mode)
    """, str(tmp_path / "s.h5")).stdout
    assert "before False" in out and "writer True True" in out and "reader True True" in out, out
    assert "read-only refused:" in out and "read-only" in out.split("read-only refused:")[1], out
    assert "seen [0.0, 1.0, 2.0, 3.0, 7.0, 8.0]" in out and "plain False" in out, out


def test_link_name_charset(tmp_path: Path) -> None:
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_group("plain name")
            f.create_group("\\u4500x")
            f["d"] = 1
            for n in ("plain name", "\\u4500x", "d"):
                print(repr(n), f.id.links.get_info(n.encode()).cset)
    """, str(tmp_path / "c.h5")).stdout
    assert f"'plain name' {0}" in out and f"'\u4500x' {1}" in out and f"'d' {0}" in out, out


def test_track_times_off_reports_zero_times(tmp_path: Path) -> None:
    out = run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            on = f.create_dataset("on", (4,), dtype="f4", track_times=True)
            dflt = f.create_dataset("dflt", (4,), dtype="f4")     # h5py default: off, as natively
            off = f.create_dataset("off", (4,), dtype="f4", track_times=False)
            like = f.create_dataset_like("like", off)
            for n in ("on", "off", "like", "dflt"):
                d = f[n]
                i = h5py.h5o.get_info(d.id)
                print(n, h5py.h5g.get_objinfo(d.id).mtime > 0, i.ctime > 0)
    """, str(tmp_path / "t.h5")).stdout
    assert "on True True" in out and "off False False" in out and "like False False" in out and "dflt False False" in out, out


def test_external_storage_as_native(tmp_path: Path) -> None:
    """External storage (h5py `external=`): the elements go to the named files, laid out as native HDF5 lays
    them out (the bytes of each file compared with native's), over several segments, relative names under
    the prefix (`${ORIGIN}`: the file's directory), reads of unwritten parts as zeros, a resizable dataset,
    reopening; a list too small for the dataset is refused, as native."""
    got = same_as_native("""
        import os
        here = os.getcwd()
        with check_connector(h5py.File(os.path.join(here, "c.h5"), "w")) as f:
            data = np.arange(600, dtype="<f8").reshape(6, 100) / 7
            a = f.create_dataset("a", data.shape, dtype="<f8", external=[("ea.bin", 0, h5py.h5f.UNLIMITED)],
                                 efile_prefix="${ORIGIN}")
            a[...] = data
            out("prefix", os.path.relpath(a.id.get_access_plist().get_efile_prefix().decode(), here))
            b = f.create_dataset("b", (6, 100), dtype="<i4", external=[("eb.bin", 8, 1200), ("eb.bin", 2000, 1200)],
                                 efile_prefix="${ORIGIN}")
            b[1:5, 10:20] = np.arange(40, dtype="<i4").reshape(4, 10)
            b[5, 90:] = np.arange(10)
            out("b", [b[1, 10:14].tolist(), int(b[4, 19]), int(b[0, 0]), b[5, 88:].tolist()])
            out("b_list", [(os.path.basename(n), o, s) for n, o, s in b.external])
            x = f.create_dataset("x", (4, 3), "<i2", maxshape=(None, 3), external=[("ex.bin", 0, h5py.h5f.UNLIMITED)],
                                 efile_prefix="${ORIGIN}")
            x[...] = 1
            x.id.set_extent((6, 3)); x[4:] = 2
            out("x", [x.chunks, x.shape, x[...].tolist()])
            try:
                f.create_dataset("small", (10,), "<f8", external=[("es.bin", 0, 16)])
                out("small", "created")
            except Exception as e:
                out("small", type(e).__name__)
        with h5py.File("c.h5", "r") as f:
            out("reopened", [bool(np.array_equal(f["a"][...], np.arange(600).reshape(6, 100) / 7)),
                             f["b"][4, 10:20].tolist(), f["x"][5].tolist()])
        for n in ("ea.bin", "eb.bin", "ex.bin"):
            with open(n, "rb") as fh:
                out("bytes_" + n, fh.read().hex())
    """, tmp_path)
    assert got["prefix"] == "." and got["x"][1] == [6, 3] and got["small"] == "ValueError"


def test_query_of_data_outside_the_logs_reads_it(tmp_path: Path) -> None:
    """A virtual dataset and a dataset with external storage have no per-write statistics (their data is
    not in their logs): a query reads their data and counts what numpy counts, instead of taking the
    missing statistics for "nothing written"; an index of them is refused (it could go stale unseen)."""
    import os
    import subprocess
    import sys

    import numpy as np

    proc = run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f["src"] = np.linspace(0, 1, 100, dtype="f4")
            lay = h5py.VirtualLayout((100,), "f4"); lay[:] = h5py.VirtualSource(f["src"])
            f.create_virtual_dataset("v", lay)
            x = f.create_dataset("x", (100,), "f4", external=[(sys.argv[1] + ".ex.bin", 0, h5py.h5f.UNLIMITED)])
            x[...] = np.linspace(0, 1, 100, dtype="f4")
    """, str(tmp_path / "c.h5"))
    assert proc.returncode == 0, proc.stderr
    want = int((np.linspace(0, 1, 100, dtype="f4") > 0.5).sum())
    for name in ("v", "x"):
        q = subprocess.run([sys.executable, "-m", "h5flow.cli", "query", str(tmp_path / "c.h5"), f"{name} > 0.5",
                            "--count"], capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert q.returncode == 0, q.stderr
        assert f"{want} element(s)" in q.stdout, (name, q.stdout)
        b = subprocess.run([sys.executable, "-m", "h5flow.cli", "index", "build", str(tmp_path / "c.h5"), name],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert b.returncode != 0 and "can change without the index noticing" in b.stderr, b.stderr
