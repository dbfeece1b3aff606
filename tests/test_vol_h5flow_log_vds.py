"""h5flow_log: virtual datasets (h5py `create_virtual_dataset`, H5Pset_virtual), checked against native HDF5
running the same script (`same_as_native`): sources in other files and in the same file ("."), fill values
for unmapped elements and missing sources, strided and partial reads,
writes through the virtual dataset, close/reopen and object copy; unlimited and printf-style mappings in
both views; and a container mapping a native file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5flow.testing.pytest_mpi import mpi_assert
from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR, same_as_native

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


def test_virtual_datasets_read_write_like_native(tmp_path: Path) -> None:
    got = same_as_native("""
        for i in range(3):
            with check_connector(h5py.File(f"src{i}.h5", "w")) as s:
                s.create_dataset("data", data=np.arange(10, dtype="f8") + 100 * i)
        with check_connector(h5py.File("part.h5", "w")) as s:
            s.create_dataset("data", data=np.arange(4, dtype="f8") - 50)
        lay = h5py.VirtualLayout(shape=(5, 10), dtype="f8")
        for i in range(3):
            lay[i] = h5py.VirtualSource(f"src{i}.h5", "data", shape=(10,))
        lay[3] = h5py.VirtualSource("missing.h5", "data", shape=(10,))   # no such file: fill value
        lay[4, 2:6] = h5py.VirtualSource("part.h5", "data", shape=(4,))   # the rest of the row: unmapped
        with check_connector(h5py.File("vds.h5", "w")) as f:
            v = f.create_virtual_dataset("v", lay, fillvalue=-1)
            out("is_virtual", v.is_virtual); out("nsources", len(v.virtual_sources()))
            out("all", v[...]); out("strided", v[1:5:2, ::3]); out("point", v[2, 7])
            out("fancy", v[[0, 4], 2:6])
            out("none", list(v[4:4].shape))
            v[1, 2:4] = [7.5, 8.5]                                   # writes reach the source
            f.create_dataset("local", data=np.arange(6, dtype="i4").reshape(2, 3))
            lay2 = h5py.VirtualLayout(shape=(3, 2), dtype="i4")
            lay2[:, 0] = h5py.VirtualSource(".", "local", shape=(2, 3))[0, :]    # the same file
            lay2[:2, 1] = h5py.VirtualSource(".", "local", shape=(2, 3))[1, 1:]
            out("same_file", f.create_virtual_dataset("v2", lay2, fillvalue=9)[...])
        with h5py.File("src1.h5", "r") as s:
            out("written", s["data"][...])
        with h5py.File("vds.h5", "r") as f:                        # close / reopen
            out("reopen", f["v"][...]); out("reopen2", f["v2"][...])
            out("dcpl", [f["v"].virtual_sources()[0].file_name, f["v"].virtual_sources()[0].dset_name])
        with h5py.File("vds.h5", "r+") as f:
            f.copy("v", "vcopy")
            out("copy", f["vcopy"][...])
    """, tmp_path)
    assert got["all"][4] == [-1, -1, -50, -49, -48, -47, -1, -1, -1, -1]
    assert got["all"][3] == [-1] * 10
    assert got["written"][2:4] == [7.5, 8.5]


def test_unlimited_mappings_follow_their_sources_like_native(tmp_path: Path) -> None:
    """Unlimited mappings (an unlimited block, and an unlimited count of strided blocks over several
    sources): the extent follows the sources' current extents in both views, reads stop where each source
    ends (fill value beyond), writes reach the sources, and a reopen sees the same."""
    got = same_as_native("""
        U = h5py.h5s.UNLIMITED
        def view(f, name, first_missing):
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            dapl.set_virtual_view(h5py.h5d.VDS_FIRST_MISSING if first_missing else h5py.h5d.VDS_LAST_AVAILABLE)
            return h5py.Dataset(h5py.h5d.open(f.id, name.encode(), dapl=dapl))
        with check_connector(h5py.File("c.h5", "w")) as f:
            s = f.create_dataset("source", data=np.arange(20).reshape(10, 2), maxshape=(None, 2), chunks=(10, 1),
                                 fillvalue=-1)
            lay = h5py.VirtualLayout((10, 1), "i8", maxshape=(None, 1))
            lay[:U, 0] = h5py.VirtualSource(s)[:U, 1]
            v = f.create_virtual_dataset("virtual", lay)
            out("shape0", list(v.shape)); out("v0", v[...])
            s.resize(14, axis=0)
            out("shape1", list(v.shape)); out("v1", v[...]); out("v1_tail", v[8:])
            s[10:, 1] = [70, 71, 72, 73]
            out("v2", v[...])
            v[12, 0] = 99                                           # written through to the source
            out("source", s[...])
        for n, rows in enumerate((20, 3, 7)):                       # strided blocks, one source each
            with check_connector(h5py.File(f"raw{n}.h5", "w")) as r:
                r.create_dataset("data", data=np.full((rows, 2), n, "i2"), maxshape=(None, 2))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array([-5], "i2"))
        vspace = h5py.h5s.create_simple((1, 2), (U, 2))
        for n, rows in enumerate((20, 3, 7)):
            src = h5py.h5s.create_simple((rows, 2), (U, 2))
            src.select_hyperslab((0, 0), (U, 1), stride=(1, 1), block=(1, 2))
            vspace.select_hyperslab((n, 0), (U, 1), stride=(3, 1), block=(1, 2))
            dcpl.set_virtual(vspace, f"raw{n}.h5".encode(), b"data", src)
        with check_connector(h5py.File("strided.h5", "w")) as f:
            h5py.h5d.create(f.id, b"data", h5py.h5t.NATIVE_INT16, vspace, dcpl=dcpl)
            out("strided_last", list(f["data"].shape)); out("strided", f["data"][:, 0])
            out("first_missing", list(view(f, "data", True).shape)); out("fm", view(f, "data", True)[:, 1])
            out("window", f["data"][5:14:2, 1])
        with h5py.File("raw1.h5", "a") as r:                       # a source grows
            r["data"].resize(30, axis=0)
            r["data"][3:] = 11
        with h5py.File("strided.h5", "r") as f:
            out("grown_last", list(f["data"].shape)); out("grown", f["data"][:, 0])
            out("grown_fm", list(view(f, "data", True).shape))
        with h5py.File("c.h5", "r") as f:
            out("reopen", f["virtual"][...]); out("reopen_shape", list(f["virtual"].shape))
    """, tmp_path)
    assert got["shape0"] == [10, 1] and got["shape1"] == [14, 1]
    assert got["strided_last"] == [58, 2] and got["first_missing"] == [10, 2]


def test_printf_mappings_find_their_sources_like_native(tmp_path: Path) -> None:
    """printf-style source names (%b, one source per block, %% a literal %): the extent reaches the last
    source found (gaps up to the access list's printf gap) or stops at the first missing one, by view."""
    got = same_as_native("""
        U = h5py.h5s.UNLIMITED
        def opened(f, first_missing, gap):
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            dapl.set_virtual_view(h5py.h5d.VDS_FIRST_MISSING if first_missing else h5py.h5d.VDS_LAST_AVAILABLE)
            dapl.set_virtual_printf_gap(gap)
            return h5py.Dataset(h5py.h5d.open(f.id, b"v", dapl=dapl))
        for b in (0, 1, 3, 6):                                       # blocks 2, 4 and 5 are missing
            with check_connector(h5py.File(f"part%{b}.h5", "w")) as r:
                r.create_dataset(f"d{b}", data=np.arange(6, dtype="i4").reshape(2, 3) + 10 * b)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array([-1], "i4"))
        vspace = h5py.h5s.create_simple((0, 3), (U, 3))
        vspace.select_hyperslab((0, 0), (U, 1), stride=(2, 1), block=(2, 3))
        src = h5py.h5s.create_simple((2, 3))
        dcpl.set_virtual(vspace, b"part%%%b.h5", b"d%b", src)
        with check_connector(h5py.File("vds.h5", "w")) as f:
            h5py.h5d.create(f.id, b"v", h5py.h5t.NATIVE_INT32, vspace, dcpl=dcpl)
        with h5py.File("vds.h5", "r") as f:
            for fm in (False, True):      # one open at a time: native HDF5 keeps the first open's view
                for gap in (0, 1, 2, 5):
                    v = opened(f, fm, gap)
                    out(f"shape_{fm}_{gap}", list(v.shape)); out(f"data_{fm}_{gap}", v[...])
                    del v
            v = opened(f, False, 2)
            out("rows", v[1:8:3, 2]); out("point", v[6, 1])
            del v
            v2 = opened(f, False, 0)
            with h5py.File("part%2.h5", "w") as r:                  # block 2 appears
                r.create_dataset("d2", data=np.full((2, 3), 7, "i4"))
            out("after", list(v2.shape)); out("after_data", v2[...])
    """, tmp_path)
    assert got["shape_False_0"] == [4, 3] and got["shape_False_2"] == [14, 3]
    assert got["shape_True_5"] == [4, 3] and got["after"] == [8, 3]


def test_a_container_maps_a_native_file(tmp_path: Path) -> None:
    """A source that is a native HDF5 file is opened through the native connector, even with
    HDF5_VOL_CONNECTOR naming h5flow_log."""
    with h5py.File(tmp_path / "native.h5", "w") as s:  # this process: native HDF5
        s.create_dataset("data", data=np.arange(12, dtype="i2").reshape(3, 4))
    script = textwrap.dedent("""
        import os, sys, h5py, numpy as np
        os.chdir(sys.argv[1])
        lay = h5py.VirtualLayout(shape=(2, 4), dtype="i2")
        lay[0] = h5py.VirtualSource("native.h5", "data", shape=(3, 4))[2]
        lay[1] = h5py.VirtualSource(os.path.abspath("native.h5"), "data", shape=(3, 4))[0]
        with h5py.File("c.h5", "w") as f:
            print(f.create_virtual_dataset("v", lay)[...].tolist())
        print(os.path.isdir("c.h5"))
    """)
    env = dict(os.environ)
    env.update(LOG_ENV)
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split("\n")[:2] == [str([[8, 9, 10, 11], [0, 1, 2, 3]]), "True"], p.stdout
    # its @dataset carries version 3, which connectors before virtual datasets refuse (they would read it
    # as a dataset without data, all fill value)
    raw = (tmp_path / "c.h5" / "v" / "@dataset").read_bytes()
    assert raw[:8] == b"H5FLDS01" and int.from_bytes(raw[8:12], "little") == 3


@pytest.mark.mpi(n=2, env=LOG_ENV, timeout=120)
def test_mpi_unlimited_mapping_extent_is_an_error_on_every_rank(comm, mpi_tmp_path: Path) -> None:
    """With more than one MPI process the extent of an unlimited mapping (which opens its source) is refused
    on every rank that asks, with a message, instead of a source open that would wait for the other ranks."""
    path = mpi_tmp_path / "vds.h5"
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        s = f.create_dataset("s", shape=(4,), maxshape=(None,), dtype="i8", chunks=(4,))
        lay = h5py.VirtualLayout((4,), "i8", maxshape=(None,))
        lay[:h5py.h5s.UNLIMITED] = h5py.VirtualSource(s)[:h5py.h5s.UNLIMITED]
        f.create_virtual_dataset("v", lay)
    with h5py.File(path, "r", driver="mpio", comm=comm) as f:
        try:
            shape, msg = f["v"].shape, ""
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            shape, msg = None, str(e)
    mpi_assert(comm, shape is None and "in one process only" in msg, f"rank {comm.rank}: {shape} {msg}")


SOURCE_LOOKUP = """
    import os
    os.makedirs("sub", exist_ok=True)
    for d, v in (("pa", 1), ("pb", 2), ("pc", 3), ("sub", 4), (".", 5)):
        os.makedirs(d, exist_ok=True)
        with h5py.File(os.path.join(d, "src.h5"), "w") as s:   # native files: the same bytes in both runs
            s.create_dataset("data", data=np.full(4, v, dtype="i4"))
    os.makedirs("junk", exist_ok=True)
    with open(os.path.join("junk", "src.h5"), "wb") as fh:      # exists, but is no HDF5 file
        fh.write(b"not hdf5" * 64)
    def read(d):
        try:
            return d[...].tolist()
        except OSError:
            return "OSError"
    def make(name, src):
        lay = h5py.VirtualLayout(shape=(4,), dtype="i4")
        lay[:] = h5py.VirtualSource(src, "data", shape=(4,))
        with check_connector(h5py.File(os.path.join("sub", name), "w")) as f:
            f.create_virtual_dataset("v", lay, fillvalue=-1)
    def opened(f, prefix=None, first_missing=None):
        dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
        if prefix is not None:
            dapl.set_virtual_prefix(prefix.encode())
        if first_missing is not None:
            dapl.set_virtual_view(h5py.h5d.VDS_FIRST_MISSING if first_missing else h5py.h5d.VDS_LAST_AVAILABLE)
        return h5py.Dataset(h5py.h5d.open(f.id, b"v", dapl=dapl))
    make("rel.h5", "src.h5")
    make("gone.h5", os.path.join(os.getcwd(), "moved", "src.h5"))   # absolute, no longer there
"""


def test_source_files_are_found_in_native_order(tmp_path: Path) -> None:
    """Which file a virtual dataset reads is native HDF5's choice: the access list's prefix (with
    `${ORIGIN}`), the container's directory, the working directory; a candidate that exists but is no HDF5 file
    fails the read (native's error; not the fill value); an absolute name that is gone is looked for by its
    last component. Two handles of one
    dataset share the first open's prefix and view, as native keeps them; after both close, a new prefix
    applies."""
    got = same_as_native(textwrap.dedent(SOURCE_LOOKUP) + textwrap.dedent("""
        with h5py.File("sub/rel.h5", "r") as f:
            out("none", opened(f)[...])                             # next to the container: sub/
            out("pa", opened(f, "pa")[...])
            out("origin", opened(f, "${ORIGIN}/../pb")[...])
            out("junk", read(opened(f, "junk")))                    # junk/src.h5 is no HDF5 file: an error
            a = opened(f, "pa"); b = opened(f, "pb")                 # the second open: the first's prefix
            out("shared", [a[...].tolist(), b[...].tolist()])
            out("plist", b.id.get_access_plist().get_virtual_prefix().decode())
            a.id.close(); b.id.close()
            out("again", opened(f, "pb")[...])                      # all closed: this open's prefix
        import shutil
        shutil.rmtree("sub/src.h5") if os.path.isdir("sub/src.h5") else os.remove("sub/src.h5")
        with h5py.File("sub/rel.h5", "r") as f:
            out("cwd", opened(f)[...])                              # then the working directory
        with h5py.File("sub/gone.h5", "r") as f:
            out("gone", opened(f)[...])                             # "src.h5" by its last component
            out("gone_pc", opened(f, "pc")[...])
    """), tmp_path)
    assert got["pa"] == [1] * 4 and got["junk"] == "OSError" and got["shared"] == [[1] * 4, [1] * 4]
    assert got["again"] == [2] * 4 and got["cwd"] == [5] * 4 and got["gone_pc"] == [3] * 4


def test_environment_prefix_list_comes_before_the_access_list(tmp_path: Path) -> None:
    """$HDF5_VDS_PREFIX (a ':' list, tried in order, missing entries passed over) is searched before the access
    list's prefix, which native HDF5 then ignores; the view of the first open stays for a second handle."""
    got = same_as_native(textwrap.dedent(SOURCE_LOOKUP) + textwrap.dedent("""
        with h5py.File("sub/rel.h5", "r") as f:
            out("env", opened(f)[...])
            out("env_over_plist", opened(f, "pa")[...])
            a = opened(f, first_missing=True); b = opened(f, first_missing=False)
            out("views", [a.id.get_access_plist().get_virtual_view(), b.id.get_access_plist().get_virtual_view()])
    """), tmp_path, extra_env={"HDF5_VDS_PREFIX": "nowhere::pc:pb"})
    assert got["env"] == [3] * 4 and got["env_over_plist"] == [3] * 4
    assert got["views"][0] == got["views"][1]


def test_external_file_prefix_of_an_open_like_native(tmp_path: Path) -> None:
    """External storage opened with a prefix reads the files under it (the dataset was created without
    one); a second handle with another prefix is refused while the first is open, as native refuses it;
    $HDF5_EXTFILE_PREFIX comes before the access list's."""
    body = """
        import os
        os.makedirs("ext", exist_ok=True)
        with check_connector(h5py.File("c.h5", "w")) as f:
            f.create_dataset("e", (5,), "<i4", external=[("e.bin", 0, h5py.h5f.UNLIMITED)])[...] = np.arange(5)
            f.create_dataset("plain", data=np.arange(3))
        if os.path.exists("e.bin"):                              # (with $HDF5_EXTFILE_PREFIX it is in ext/)
            os.replace("e.bin", os.path.join("ext", "e.bin"))
        with open("e.bin", "wb") as fh:                        # a decoy where the name alone points
            fh.write(np.full(5, 99, "<i4").tobytes())
        def opened(f, name, prefix):
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            dapl.set_efile_prefix(prefix.encode())
            return h5py.Dataset(h5py.h5d.open(f.id, name.encode(), dapl=dapl))
        with h5py.File("c.h5", "r") as f:
            out("default", f["e"][...])
            a = opened(f, "e", "ext")
            out("prefixed", a[...])
            for name in ("e", "plain"):
                keep = opened(f, name, "ext")
                try:
                    opened(f, name, "elsewhere")
                    out("second_" + name, "opened")
                except Exception as e:
                    out("second_" + name, type(e).__name__)
                keep.id.close()
    """
    got = same_as_native(body, tmp_path / "plist")
    assert got["default"] == [99] * 5 and got["prefixed"] == list(range(5))
    assert got["second_e"] != "opened"
    env = same_as_native(body.replace('out("second_" + name, type(e).__name__)', 'out("second_" + name, "refused")'),
                         tmp_path / "env", extra_env={"HDF5_EXTFILE_PREFIX": "ext"})
    assert env["default"] == list(range(5))
