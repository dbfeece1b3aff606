"""h5flow_log: committed (named) datatypes, H5Tcommit2/H5Topen2 (h5py `f["t"] = np.dtype(...)`), and datasets
and attributes created with them, checked against native HDF5 running the same script (`same_as_native`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_committed_datatypes(tmp_path: Path) -> None:
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["t"] = np.dtype([("a", "i4"), ("b", "f8")])
            t = f["t"]
            out("t", [type(t).__name__, str(t.dtype), t.name])
            d = f.create_dataset("d", (2,), dtype=t)
            d[0] = (1, 2.5)
            out("committed", [d.id.get_type().committed(), d.id.get_type() == t.id])  # native links them
            f.attrs.create("a", data=np.array([(3, 4.5)], dtype=t.dtype), dtype=t)
            f["g/t2"] = np.dtype("i8")
            f["vs"] = h5py.string_dtype()
            out("keys", [sorted(f.keys()), list(f["g"].keys())])
            out("getclass", f.get("t", getclass=True).__name__)
            try:
                f["t"] = np.dtype("i2")
                out("dup", "no error")
            except (KeyError, ValueError, RuntimeError, OSError) as e:
                out("dup", type(e).__name__)
        with h5py.File("c.h5", "r+") as f:
            out("reopen", [str(f["t"].dtype), f["d"][...].tolist(), f.attrs["a"].tolist(), str(f["g/t2"].dtype)])
            out("committed2", f["d"].id.get_type().committed())
            at = h5py.h5a.open(f.id, b"a").get_type()
            out("acommitted", [at.committed(), at == f["t"].id])
            seen = []
            f.visititems(lambda n, o: seen.append((n, type(o).__name__)))
            out("visit", seen)
            out("isdt", isinstance(f["vs"], h5py.Datatype))
            f.move("g/t2", "t3"); del f["t"]
            out("after", sorted(f.keys())); out("t3", str(f["t3"].dtype))
            out("_orphan", [str(f["d"].dtype), f["d"].id.get_type().committed()])  # native keeps the unlinked type object alive (refcount); h5flow_log hands out a copy
    """, tmp_path)
    assert got["t"][0] == "Datatype"
    assert got["committed"] == [True, True] and got["acommitted"] == [True, True]
    assert got["after"] == ["d", "g", "t3", "vs"]


def test_copied_objects_never_take_a_stranger_committed_type(tmp_path: Path) -> None:
    """A dataset or attribute created with a committed type and copied into another container must read
    its own values: the type id it recorded means nothing there (another container mints the same ids),
    and handing out the destination's committed type of that id would convert the data to a foreign type."""
    got = same_as_native("""
        with check_connector(h5py.File("a.h5", "w")) as a, check_connector(h5py.File("b.h5", "w")) as b:
            a["ta"] = np.dtype("f8")
            d = a.create_dataset("d", data=np.array([1.5, -2.25]), dtype=a["ta"])
            d.attrs.create("at", np.array([0.75]), dtype=a["ta"])
            b["tb"] = np.dtype("i1")                           # B's first committed type
            b.create_dataset("e", data=np.array([3, 4], "i1"), dtype=b["tb"])
            a.copy(a["d"], b, "d")
            out("dtype", str(b["d"].dtype)); out("values", b["d"][...]); out("attr", b["d"].attrs["at"])
            out("e", [str(b["e"].dtype), b["e"][...]])
        with h5py.File("b.h5", "r") as b:
            out("reopen", [str(b["d"].dtype), b["d"][...], b["d"].attrs["at"]])
    """, tmp_path)
    assert got["values"] == [1.5, -2.25] and got["attr"] == [0.75]
