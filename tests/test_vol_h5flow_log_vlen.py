"""h5flow_log: variable-length sequences and compound/array types with variable-length members, in datasets
and attributes (h5py `vlen_dtype`), checked against native HDF5 running the same script (`same_as_native`).

Stored per element as one encoded byte string (docs/FORMAT.md "Variable-length sequences"), in the logs
with the (offset, length) pairs of variable-length strings: latest write wins, data checksums apply.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_vlen_sequences_in_datasets(tmp_path: Path) -> None:
    got = same_as_native("""
        vi = h5py.vlen_dtype(np.int32)
        with check_connector(h5py.File("c.h5", "w")) as f:
            d = f.create_dataset("v", (5,), dtype=vi, maxshape=(None,))
            d[0] = np.arange(3, dtype=np.int32); d[2] = np.arange(5, dtype=np.int32)
            d[1:3] = [np.array([7], dtype=np.int32), np.array([], dtype=np.int32)]   # latest write wins
            out("v", [x.tolist() for x in d[...]])
            out("strided", [x.tolist() for x in d[::2]])
            d.resize((7,)); d[6] = np.array([9, 9], dtype=np.int32)
            out("grown", [x.tolist() for x in d[...]])
            f.create_dataset("f", data=np.array([np.array([1.5]), np.array([2.5, 3.5])], dtype=object),
                             dtype=h5py.vlen_dtype(np.float64))
            g = f.create_dataset("g", (2, 2), dtype=vi)
            g[1, 1] = np.array([4, 5], dtype=np.int32)
            out("g", [[x.tolist() for x in row] for row in g[...]])
        with h5py.File("c.h5", "r") as f:
            out("reopen", [x.tolist() for x in f["v"][...]])
            out("f", [x.tolist() for x in f["f"][...]])
            out("dtype", str(h5py.check_vlen_dtype(f["v"].dtype)))
    """, tmp_path)
    assert got["v"] == [[0, 1, 2], [7], [], [], []]


def test_compounds_with_vlen_members_datasets_and_attributes(tmp_path: Path) -> None:
    got = same_as_native("""
        dt = np.dtype([("a", np.int32), ("s", h5py.string_dtype()), ("v", h5py.vlen_dtype(np.float64))])
        with check_connector(h5py.File("c.h5", "w")) as f:
            c = f.create_dataset("c", (3,), dtype=dt)
            c[0] = (1, "hé", np.array([1.5, 2.5]))
            c[2] = (3, "z", np.array([], dtype=np.float64))
            f.attrs.create("va", data=[np.arange(2), np.arange(3)], dtype=h5py.vlen_dtype(np.int64))
            f.attrs.create("ca", data=np.array([(1, "x", np.array([0.5]))], dtype=dt))
            f.attrs["vs"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
        with h5py.File("c.h5", "r") as f:
            c = f["c"][...]
            out("c", [(int(r["a"]), r["s"].decode(), r["v"].tolist()) for r in c])
            out("va", [x.tolist() for x in f.attrs["va"]])
            ca = f.attrs["ca"]
            out("ca", [(int(r["a"]), r["s"].decode(), r["v"].tolist()) for r in ca])
            out("vs", [x for x in f.attrs["vs"]])
    """, tmp_path)
    assert got["va"] == [[0, 1], [0, 1, 2]]


def test_dimension_scales(tmp_path: Path) -> None:
    """H5DS on a non-native connector stores H5T_STD_REF references (DIMENSION_LIST: a variable-length
    sequence of them, REFERENCE_LIST: a compound with one): netCDF-4's building block."""
    got = same_as_native("""
        with check_connector(h5py.File("c.h5", "w")) as f:
            f["x"] = np.arange(3.0); f["y"] = np.arange(4.0)
            d = f.create_dataset("data", (3, 4), dtype="f4")
            f["x"].make_scale("x"); f["y"].make_scale("ycoord")
            d.dims[0].attach_scale(f["x"]); d.dims[1].attach_scale(f["y"])
            d.dims[0].label = "lx"
            e = f.create_dataset("other", (3,), dtype="f4"); e.dims[0].attach_scale(f["x"])
            out("labels", [dim.label for dim in d.dims]); out("keys", [list(dim.keys()) for dim in d.dims])
        with h5py.File("c.h5", "r") as f:
            d = f["data"]
            out("labels2", [dim.label for dim in d.dims]); out("keys2", [list(dim.keys()) for dim in d.dims])
            out("scale", [d.dims[1][0].name, f["x"].is_scale, f["data"].is_scale])
            out("values", d.dims[0][0][...])
        with h5py.File("c.h5", "a") as f:
            f["data"].dims[0].detach_scale(f["x"])
            out("after", [len(dim) for dim in f["data"].dims]); out("other", len(f["other"].dims[0]))
    """, tmp_path)
    assert got["keys2"] == [["x"], ["ycoord"]]
    assert got["after"] == [0, 1]
