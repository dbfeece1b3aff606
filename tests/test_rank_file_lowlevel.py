"""The n-n producer writes its rank file through HDF5's low-level calls (``transports/hdf5/_h5.py``); the
file must be the one h5py's high-level calls made before: same attributes, groups, datasets, types, layout
and property lists as ``h5dump`` shows them, same values, and the same raw-data offsets for raw reads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np

from h5flow.transports.hdf5 import _h5

ATTRS = {"format": "h5flow-step", "version": 1, "step": 7, "time": 0.25, "producers": 2, "layout": "n-n", "rank": 1}
DATA = {("mesh", "cell/data"): np.arange(3000, dtype="<f4").reshape(1000, 3),
        ("mesh", "point/ids"): np.arange(17, dtype="<i8").reshape(17, 1),
        ("particles", "geometry/positions"): np.linspace(0, 1, 30).reshape(10, 3),
        ("particles", "point/empty"): np.zeros((0, 2), dtype="<u2")}


def _high_level(path: Path) -> dict:
    extents = {}
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        _h5.write_new_attrs(f, ATTRS)
        for (mesh, name), data in DATA.items():
            g = f.require_group(mesh)
            extents[f"{mesh}/{name}"] = _h5.dataset_extent(g.create_dataset(name, data=data))
    return extents


def _low_level(path: Path) -> dict:
    extents = {}
    fid = _h5.create_rank_file(path)
    try:
        _h5.write_new_attrs(fid, ATTRS)
        groups = {}
        for (mesh, name), data in DATA.items():
            if mesh not in groups:
                groups[mesh] = _h5.create_group(fid, mesh)
            extents[f"{mesh}/{name}"] = _h5.dataset_extent(_h5.write_new_dataset(groups[mesh], name, data))
    finally:
        _h5.close_rank_file(fid)
    return extents


def test_low_level_rank_file_is_the_high_level_one(tmp_path: Path) -> None:
    hl, ll = tmp_path / "hl.h5", tmp_path / "ll.h5"
    ext_hl, ext_ll = _high_level(hl), _low_level(ll)
    assert ext_ll == ext_hl  # same raw-data offsets, sizes, types and shapes
    assert hl.stat().st_size == ll.stat().st_size
    with h5py.File(ll, "r") as f:
        assert dict(f.attrs) == ATTRS
        for (mesh, name), data in DATA.items():
            d = f[mesh][name]
            assert d.dtype == data.dtype and d.shape == data.shape and d.chunks is None
            np.testing.assert_array_equal(d[()], data)
    assert shutil.which("h5dump"), "h5dump is part of the stack: `make setup`, then `source build/stack.env`"
    dumps = [subprocess.run(["h5dump", "-p", "-H", str(p)], capture_output=True, text=True, check=True).stdout
             .replace(str(p), "FILE") for p in (hl, ll)]
    assert dumps[0] == dumps[1]


def test_rank_file_closes_every_object(tmp_path: Path) -> None:
    """Closing the file closes the groups and datasets made in it (as h5py's File.close does): the file can
    be opened and removed at once, and a new step file can take its name."""
    path = tmp_path / "r.h5"
    for value in (1.0, 2.0):
        fid = _h5.create_rank_file(path)
        g = _h5.create_group(fid, "mesh")
        _h5.write_new_dataset(g, "cell/data", np.full((5, 1), value))
        _h5.close_rank_file(fid)
        with h5py.File(path, "r") as f:
            assert f["mesh/cell/data"][()].min() == value
