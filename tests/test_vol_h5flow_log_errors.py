"""h5flow_log's errors under h5py: HDF5's error stack stays sound, and requests the connector cannot honour
are refused by name.

Each script runs in a subprocess with the connector chosen by the environment (as in
test_vol_h5flow_log.py). The C side of the error-stack checks is the ctest ``h5flow_log.test_hdf5_errstack``
(run, normal and under ASan/UBSan, by test_vol_h5flow_log.py::test_ctest_suites); the HDF5 fix is
third_party/hdf5/patches/0002.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

PRELUDE = """
import io, os, sys, numpy as np, h5py
from h5flow import _hdf5lib
def opened(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log", _hdf5lib.connector_name(f.id.id)
    return f
"""


def run_script(body: str, cwd: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, **LOG_ENV)
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"


# ---------------------------------------------------------------- 2. the error stack (HDF5 patch 0002)
def test_refused_reference_does_not_corrupt_later_errors(tmp_path: Path) -> None:
    """h5py's test_errors.py::test_unsilence_errors in miniature: it segfaulted (HDF5 freed its own
    H5E_VOL message when the stack of a call HDF5 refused for the connector was cleared -- a region
    reference then, a chunk query of a contiguous dataset now; printing a later error recursed)."""
    proc = run_script("""
        with opened(h5py.File("x.h5", "w")) as f:
            d = f.create_dataset("d", data=np.arange(20))
            try:
                d.id.get_chunk_info(0)
            except Exception as e:
                print("refused:", type(e).__name__, e)
            else:
                raise AssertionError("a chunk query of a contiguous dataset should be refused")
        f = opened(h5py.File("x.h5", "r"))
        h5py._errors.unsilence_errors()
        try:
            f["missing"]
        except KeyError as e:
            print("later:", e)
        h5py._errors.silence_errors()
    """, tmp_path)
    assert_ok(proc)
    out = proc.stdout
    # the refusal is described, with the connector's message
    assert "refused: RuntimeError" in out and "is not a chunked dataset" in out, out
    assert "object '/missing' does not exist" in out, out
    assert "Failed to extract" not in out + proc.stderr
    # the unsilenced error was printed, once, with HDF5's own VOL major message
    assert "Virtual Object Layer" in proc.stderr and proc.stderr.count("Error detected in HDF5") < 10


def test_errors_stay_specific_after_many_failures(tmp_path: Path) -> None:
    """200 failing calls of several kinds (among them refused references), then every error still reads
    as the connector wrote it, with the exception class h5py derives from it."""
    proc = run_script("""
        f = opened(h5py.File("x.h5", "w"))
        d = f.create_dataset("d", data=np.arange(20))
        kinds = [
            lambda i: d.id.get_chunk_info(0),
            lambda i: f[f"missing{i}"],
            lambda i: f.create_dataset("d", data=[1]),
            lambda i: d.attrs[f"nope{i}"],
            lambda i: h5py.File(f"absent{i}.h5", "r"),
            lambda i: d.ref and f[d.ref].id.get_chunk_info(1),
        ]
        seen = {}
        for i in range(200):
            try:
                kinds[i % len(kinds)](i)
            except Exception as e:
                seen.setdefault(i % len(kinds), f"{type(e).__name__}: {e}")
            else:
                raise AssertionError(f"call {i} should have failed")
        for k in sorted(seen):
            print(k, seen[k])
        try:
            f["zzz"]
        except KeyError as e:
            print("final:", e)
        try:
            f.create_dataset("d", data=[1])
        except ValueError as e:
            print("final2:", e)
    """, tmp_path)
    assert_ok(proc)
    out = proc.stdout
    assert "Failed to extract" not in out, out
    assert "final: \"Unable to synchronously open object (object '/zzz' does not exist)\"" in out, out
    assert "final2: Unable to synchronously create dataset (cannot create dataset '/d': a link with this name " \
           "already exists)" in out, out
    assert "1 KeyError" in out and "4 FileNotFoundError" in out, out


# ---------------------------------------------------------------- 3. drivers and file properties
REFUSED = {
    # name: (open expression, words the error must contain)
    "userblock": ("h5py.File(h5py.h5f.create(b'u.h5', fcpl=pl_huge))", ["userblock of 2147483648 bytes"]),
    "page_buffer": ("h5py.File('p.h5', 'w', page_buf_size=16384, fs_strategy='page')", ["page buffer"]),
    "fs_strategy": ("h5py.File('s.h5', 'w', fs_strategy='page')", ["file space strategy 1"]),
    "fs_persist": ("h5py.File('s.h5', 'w', fs_strategy='fsm', fs_persist=True)", ["persist 1"]),
    "fs_threshold": ("h5py.File('s.h5', 'w', fs_strategy='fsm', fs_threshold=7)", ["threshold 7"]),
    "fs_page_size": ("h5py.File(h5py.h5f.create(b's.h5', fcpl=pl_page))", ["page size 8192"]),
    "sizes": ("h5py.File(h5py.h5f.create(b's.h5', fcpl=pl_sizes))", ["H5Pset_sizes 4/4"]),
    "close_strong": ("h5py.File(h5py.h5f.create(b's.h5', fapl=pl_strong))", ["close degree"]),
    "open_core": ("h5py.File('exists.h5', 'r+', driver='core', backing_store=False)", ["without a backing store"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refuses_what_it_cannot_honour(case: str, tmp_path: Path) -> None:
    """Nothing is created (no directory named after a BytesIO's repr), the buffer stays untouched, and the
    error names the driver or property and says what to do."""
    expr, words = REFUSED[case]
    proc = run_script(f"""
        with opened(h5py.File("exists.h5", "w")):
            pass
        buf = io.BytesIO()
        pl_page = h5py.h5p.create(h5py.h5p.FILE_CREATE); pl_page.set_file_space_page_size(8192)
        pl_sizes = h5py.h5p.create(h5py.h5p.FILE_CREATE); pl_sizes.set_sizes(4, 4)
        pl_strong = h5py.h5p.create(h5py.h5p.FILE_ACCESS); pl_strong.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        pl_huge = h5py.h5p.create(h5py.h5p.FILE_CREATE); pl_huge.set_userblock(1 << 31)
        before = sorted(os.listdir("."))
        try:
            {expr}
        except OSError as e:
            print("refused:", e)
        else:
            raise AssertionError("not refused")
        assert sorted(os.listdir(".")) == before, (before, sorted(os.listdir(".")))
        assert buf.getvalue() == b""
    """, tmp_path)
    assert_ok(proc)
    assert "refused:" in proc.stdout
    for w in words:
        assert w in proc.stdout, (w, proc.stdout)
    assert not any("object at 0x" in p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("kwargs", [
    "driver='sec2'", "driver='stdio'", "libver='latest'", "alignment_threshold=4096, alignment_interval=4096",
    "meta_block_size=8192", "rdcc_nbytes=1 << 20", "locking=False", "fs_strategy='fsm'",
    "driver='core'", "driver='core', backing_store=True, block_size=1024",
])
def test_accepts_what_it_honours(kwargs: str, tmp_path: Path) -> None:
    """The supported drivers and the properties accepted without effect (docs/FORMAT.md) still work."""
    proc = run_script(f"""
        with opened(h5py.File("a.h5", "w", {kwargs})) as f:
            f["x"] = np.arange(5)
            assert f.driver == ({kwargs!r}.split("driver='")[1].split("'")[0] if "driver" in {kwargs!r} else "sec2")
        with opened(h5py.File("a.h5", "r", {kwargs if 'fs_' not in kwargs else ''})) as f:
            assert f["x"][()].tolist() == [0, 1, 2, 3, 4]
        assert os.path.isdir("a.h5")
    """, tmp_path)
    assert_ok(proc)


def test_core_driver_without_backing_store_stays_in_memory(tmp_path: Path) -> None:
    """The core driver without a backing store: the file works and reports the core driver, nothing appears
    under its name (an existing file there is left as it was), and nothing of it is left once closed;
    an existing container opens read-only that way, read-write is refused (its changes would reach the
    disk)."""
    proc = run_script("""
        import glob
        def mine():
            return sorted(glob.glob("/dev/shm/h5flow_log-core.*") + glob.glob(os.environ.get("TMPDIR", "/tmp")
                                                                                + "/h5flow_log-core.*"))
        before = mine()
        with opened(h5py.File("m.h5", "w", driver="core", backing_store=False, block_size=1024)) as f:
            f["x"] = np.arange(4)
            f["g/y"] = 1.5
            print("open", f.driver, f["x"][()].tolist(), float(f["g/y"][()]), os.path.exists("m.h5"),
                  len(mine()) - len(before))
        print("closed", os.path.exists("m.h5"), mine() == before)
        with opened(h5py.File("d.h5", "w")) as f:
            f["z"] = [1, 2]
        with opened(h5py.File("d.h5", "w", driver="core", backing_store=False)) as f:
            f["other"] = 3
        with opened(h5py.File("d.h5", "r", driver="core", backing_store=False)) as f:
            print("existing", f.driver, list(f), f["z"][()].tolist())
        try:
            h5py.File("d.h5", "r+", driver="core", backing_store=False)
            print("no error")
        except OSError as e:
            print("refused", "read-write" in str(e))
    """, tmp_path)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert "open core [0, 1, 2, 3] 1.5 False 1" in lines, lines
    assert "closed False True" in lines and "existing core ['z'] [1, 2]" in lines, lines
    assert "refused True" in lines, lines


def test_userblock_is_kept(tmp_path: Path) -> None:
    """A userblock is the container's file @userblock of that size, for the application to write (as the
    bytes before a native file's superblock); every open reports its size, as native HDF5 does, and h5py's
    check of the size asked for on reopening works."""
    proc = run_script("""
        with opened(h5py.File("u.h5", "w", userblock_size=1024)) as f:
            f["x"] = np.arange(3)
            print("created", f.userblock_size)
        ub = os.path.join("u.h5", "@userblock")
        with open(ub, "r+b") as fh:
            fh.write(b"hello")
        with opened(h5py.File("u.h5", "r")) as f:
            print("reopened", f.userblock_size, f["x"][()].tolist())
        with opened(h5py.File("u.h5", "a", userblock_size=1024)) as f:
            print("same", f.userblock_size)
        try:
            h5py.File("u.h5", "a", userblock_size=2048)
            print("no error")
        except ValueError as e:
            print("mismatch", e)
        with open(ub, "rb") as fh:
            data = fh.read()
        print("bytes", len(data), data[:5])
        with opened(h5py.File("n.h5", "w")) as f:
            print("none", f.userblock_size, os.path.exists("n.h5/@userblock"))
    """, tmp_path)
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert "created 1024" in lines and "reopened 1024 [0, 1, 2]" in lines and "same 1024" in lines, lines
    assert any(x.startswith("mismatch") for x in lines) and "bytes 1024 b'hello'" in lines, lines
    assert "none 0 False" in lines, lines


# ---------------------------------------------------------------- the build links the stack's HDF5
def test_native_build_links_the_stacks_hdf5() -> None:
    """The plugin and the C tests run against the HDF5 of this stack (the patched one), not one left over
    in a CMake cache from an earlier cache key: scripts/setup.sh reconfigured build/native with the new
    HDF5_ROOT, but CMake kept the old HDF5_DIR, so a new HDF5 patch was never tested."""
    prefix = Path(os.environ["H5FLOW_HDF5_DIR"]).resolve()
    build = Path(__file__).resolve().parents[1] / "build" / "native" / "connectors" / "h5flow_log"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for binary in (PLUGIN_DIR / "libh5flow_log.so", build / "h5fl_test_hdf5_errstack"):
        assert binary.exists(), f"{binary} not built (run make setup)"
        out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True, check=True).stdout
        libs = [line.split("=>")[1].split()[0] for line in out.splitlines() if "libhdf5.so" in line]
        assert libs and all(Path(p).resolve().is_relative_to(prefix) for p in libs), (binary, out)
