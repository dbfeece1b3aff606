"""Small metadata gaps h5py's own test suite found through h5flow_log: SWMR flags (h5py ``swmr_mode``),
the link name character set, ``track_times=False``."""

from __future__ import annotations

from pathlib import Path

from test_vol_h5flow_log import run_script


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
