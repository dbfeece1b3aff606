"""h5flow_log when the disk fills up (ENOSPC) or a file reaches RLIMIT_FSIZE (EFBIG).

What must hold: no crash or heap corruption; the error surfaces at the write (or at a close, which then
keeps the handle's data and can be retried); every write that returned success reads back after
reopening; the container still opens (and works again once there is space); no temporary files are left.

A full disk is a small tmpfs mounted in a private mount namespace (``unshare -m``: we run as root). Where
mounting is impossible the "tmpfs" cases run with ``RLIMIT_FSIZE`` instead (SIGXFSZ ignored), and check
the same properties; the "rlimit" cases always do.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from test_vol_h5flow_log import LOG_ENV, NATIVE_ROOT, PLUGIN_DIR, PRELUDE, _cmake_build

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

# Runs each script (argv: root dir, previous script's stdout) in order and prints their outcomes as JSON.
# mode "tmpfs": a tmpfs of `limit` bytes is mounted on the root (run inside `unshare -m`, so it is private
# and goes away with the namespace); mode "rlimit": the first script runs with RLIMIT_FSIZE = limit.
DRIVER = r"""
import json, resource, signal, subprocess, sys
mode, root, limit, scripts = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
if mode == "tmpfs":
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={limit}", "tmpfs", root], check=True)
def limited():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
out, prev = [], ""
for i, s in enumerate(scripts):
    p = subprocess.run([sys.executable, "-c", s, root, prev], capture_output=True, text=True, timeout=300,
                       preexec_fn=limited if (mode == "rlimit" and i == 0) else None)
    out.append({"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr})
    prev = p.stdout
print(json.dumps(out))
"""

BAD_STDERR = ("malloc", "corrupted", "double free", "Segmentation", "Caught signal", "AddressSanitizer",
              "runtime error", "infinite loop closing library")


@functools.cache
def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs '{d}'"],
                           capture_output=True, timeout=30)
        return r.returncode == 0


def run_limited(mode: str, root: Path, limit: int, *scripts: str) -> list[dict]:
    """Run scripts (PRELUDE prepended) one after the other on a full-able root; the first one fills it."""
    if mode == "tmpfs" and not _can_mount_tmpfs():
        mode = "rlimit"  # same properties, checked through the file size limit
    cmd = [sys.executable, "-c", DRIVER, mode, str(root), str(limit),
           json.dumps([PRELUDE + textwrap.dedent(s) for s in scripts])]
    if mode == "tmpfs":
        cmd = ["unshare", "-m", *cmd]
    r = subprocess.run(cmd, env=dict(os.environ, **LOG_ENV), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def assert_clean(res: dict) -> dict:
    """The script exited normally, with no sign of a crash or heap corruption; its last line as JSON."""
    assert res["rc"] == 0, f"exit status {res['rc']}\n{res['stdout']}\n{res['stderr']}"
    for bad in BAD_STDERR:
        assert bad not in res["stderr"], res["stderr"]
    return json.loads(res["stdout"].strip().splitlines()[-1])


BLOCK = """
import json
def block(i, n):
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + i) & 0xFF).astype(np.uint8)
"""

# Fill the disk through h5py with buffered small writes (1000 B) and some large direct ones (300 KiB),
# then try an attribute, a group and another write; close everything, reporting every error.
FILL = BLOCK + """
root = sys.argv[1]
p = os.path.join(root, "c.h5")
with open(os.path.join(root, "ballast"), "wb") as b:  # the checker frees it to make room again
    b.write(b"\\1" * (256 << 10))
acked, errs = [], []
f = opened(h5py.File(p, "w"))
f.attrs["before"] = "kept"
d = f.create_dataset("d", shape=(1 << 30,), dtype="u1", chunks=(1 << 16,))
off, i = 0, 0
# until a write fails: the seed's mix of small buffered writes and large direct ones; then small buffered
# writes only, until one of them fails too (the large write may have failed with room left for small ones)
for small_only in (False, True):
    while i < 200000:
        n = (300 << 10) if (i % 40 == 39 and not small_only) else 1000
        try:
            d[off:off + n] = block(i, n)
        except Exception as e:
            errs.append(str(e))
            break
        acked.append((off, n, i))
        off += n
        i += 1
after = {}
def attr(): f.attrs["after"] = np.arange(2048.0)
def group(): f.create_group("g/h")
def write(): d[off:off + 10] = block(999999, 10)
for name, op in (("attr", attr), ("group", group), ("write", write)):
    try:
        op()
        after[name] = None
    except Exception as e:
        after[name] = str(e)
if after["write"] is None:
    acked.append((off, 10, 999999))
close_err = []
for what, op in (("dataset", d.id.close), ("file", f.close)):
    try:
        op()
    except Exception as e:
        close_err.append(f"{what}: {e}")
print(json.dumps({"acked": acked, "errs": errs, "after": after, "close_err": close_err}))
"""

CHECK = BLOCK + """
root = sys.argv[1]
w = json.loads(sys.argv[2].strip().splitlines()[-1])
p = os.path.join(root, "c.h5")
end = max(o + n for o, n, _ in w["acked"])
with opened(h5py.File(p, "r")) as f:  # the container opens read-only on the full disk
    got = f["d"][:end]
    bad = [[o, n, i] for o, n, i in w["acked"] if not np.array_equal(got[o:o + n], block(i, n))]
    attrs = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()}
    group = "g/h" in f
tmp = [str(q) for q in Path(p).rglob("@tmp.*")]
os.remove(os.path.join(root, "ballast"))  # make room: the container works again
with opened(h5py.File(p, "a")) as f:
    f["d"][end:end + 10] = block(7, 10)
    f.attrs["again"] = 1
with opened(h5py.File(p, "r")) as f:
    again = bool(np.array_equal(f["d"][end:end + 10], block(7, 10)) and f.attrs["again"] == 1)
    still = bool(np.array_equal(f["d"][:end], got))
print(json.dumps({"bad": bad[:5], "nbad": len(bad), "attrs": attrs, "group": group, "tmp": tmp,
                  "again": again, "still": still}))
"""
CHECK = "from pathlib import Path\n" + CHECK


@pytest.mark.parametrize("through", [False, True], ids=["reserve", "write_through"])
@pytest.mark.parametrize("mode", ["tmpfs", "rlimit"])
def test_full_disk_buffered_small_writes(mode: str, through: bool, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # write_through: the mode of file systems without fallocate, where each write is flushed at once
    monkeypatch.setenv("H5FLOW_LOG_WRITE_THROUGH", "1" if through else "0")
    writer, checker = run_limited(mode, tmp_path, 4 << 20, FILL, CHECK)
    w = assert_clean(writer)
    # the errors surfaced at writes (a mixed one, then a small buffered one), naming the dataset, the
    # log file, the errno and how many bytes did not fit
    assert len(w["errs"]) == 2, w["errs"]
    for err in w["errs"]:
        assert "'/d'" in err and "@log.1.0." in err and "bytes" in err, err
        assert ("No space left on device (errno 28)" in err) or ("File too large (errno 27)" in err), err
    assert len(w["acked"]) > 100, len(w["acked"])
    # with the failure reported at the write, closing has nothing left to fail on
    assert w["close_err"] == [], w["close_err"]
    assert "Exception ignored" not in writer["stderr"], writer["stderr"]
    c = assert_clean(checker)
    assert c["nbad"] == 0, f"{c['nbad']} acknowledged writes read back wrong, e.g. {c['bad']}"
    assert c["tmp"] == [], c["tmp"]
    assert c["attrs"]["before"] == "kept", c["attrs"]
    # what succeeded after the disk filled is there; what failed said which file and why, and left
    # nothing behind (no temporary file, the previous contents)
    for what, file in (("attr", "@attr.after"), ("group", "@group")):
        if w["after"][what] is not None:
            assert file in w["after"][what] and "errno" in w["after"][what], w["after"][what]
    assert ("after" in c["attrs"]) == (w["after"]["attr"] is None), (w["after"], c["attrs"])
    assert c["group"] == (w["after"]["group"] is None), (w["after"], c)
    assert c["again"] and c["still"], c


# Writes are acknowledged (buffered, their space secured), then the file size limit drops below the log,
# so the final flush fails when the dataset closes. A dataset close cannot fail safely in HDF5 1.14.5 (its
# wrapper is freed anyway and a stale id is left for H5Idec_ref/H5close), so the dataset's close succeeds
# and hands the data to the file: the file's close fails, naming the dataset, the log and the errno, until
# the limit is restored; the next close writes everything. "after_file": the dataset is closed after its
# file (no file id left to report through): the error goes to stderr and nothing crashes.
FAILED_CLOSE = BLOCK + """
import ctypes, resource, signal
from h5flow import _hdf5lib
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
p, how = os.path.join(sys.argv[1], "c.h5"), sys.argv[3]
lib = _hdf5lib.lib()
lib.H5Dclose.argtypes = [ctypes.c_int64]
f = opened(h5py.File(p, "w"))
d = f.create_dataset("d", shape=(1 << 20,), dtype="u1")
e = f.create_dataset("e", shape=(100,), dtype="i4")
for i in range(200):
    d[i * 1000:(i + 1) * 1000] = block(i, 1000)
e[:] = np.arange(100)
out = {}
if how == "after_file":
    f.id.close()  # only the file id: d stays open (the connector keeps the container alive for it)
    for i in range(200, 300):
        d[i * 1000:(i + 1) * 1000] = block(i, 1000)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
try:
    if how == "H5Dclose":  # HDF5 drops the id whatever the callback returns
        out["dclose"] = lib.H5Dclose(d.id.id)
    else:  # H5Idec_ref, h5py's way: a failing close would leave a stale id behind
        d.id.close()
        out["dclose"] = 0
except Exception as ex:
    out["dclose"] = str(ex)
if how != "after_file":
    try:
        f.close()
        out["fclose1"] = None
    except Exception as ex:
        out["fclose1"] = str(ex)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
if how != "after_file":
    try:
        f.close()
        out["fclose2"] = None
    except Exception as ex:
        out["fclose2"] = str(ex)
with opened(h5py.File(p, "r")) as g:
    got = g["d"][:200000]
    out["ok"] = bool(np.array_equal(got, np.concatenate([block(i, 1000) for i in range(200)])))
    out["e"] = bool(np.array_equal(g["e"][:], np.arange(100)))
print(json.dumps(out))
"""


def _run_failed_close(tmp_path: Path, how: str) -> tuple[dict, str]:
    env = dict(os.environ, **LOG_ENV)
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(FAILED_CLOSE), str(tmp_path), "", how],
                       env=env, capture_output=True, text=True, timeout=300)
    return assert_clean({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}), r.stderr


def _check_failed_close(how: str, out: dict, stderr: str) -> None:
    assert out["dclose"] == 0, out  # never fails (see above)
    assert out["ok"] and out["e"], out  # everything acknowledged before the file's close is there
    if how == "after_file":
        assert "closing dataset '/d' after its file" in stderr and "errno 27" in stderr, stderr
        return
    msg = out["fclose1"]  # the file cannot close while the data cannot be written; then it can
    assert msg and "'/d'" in msg and "@log.1.0.dat" in msg and "errno 27" in msg, out
    assert out["fclose2"] is None, out
    assert "Exception ignored" not in stderr, stderr


@pytest.mark.parametrize("how", ["H5Dclose", "H5Idec_ref", "after_file"])
def test_failed_dataset_close_keeps_data_and_retries(how: str, tmp_path: Path) -> None:
    out, stderr = _run_failed_close(tmp_path, how)
    _check_failed_close(how, out, stderr)


def _asan_runtime() -> str | None:
    cc = shutil.which("mpicc") or shutil.which("cc")
    if cc is None:
        return None
    r = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=60)
    lib = r.stdout.strip()
    return lib if r.returncode == 0 and os.path.isabs(lib) and os.path.exists(lib) else None


def asan_env() -> dict[str, str]:
    """The environment of a process running the connector's ASan/UBSan build (built here if needed; the test
    is skipped where the tool chain has no ASan)."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake/ninja not available")
    asan = _asan_runtime()
    if asan is None:
        pytest.skip("the compiler has no libasan")
    build = NATIVE_ROOT / "build" / "native-asan"
    _cmake_build(build, "-DH5FLOW_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug")
    env = dict(os.environ, LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    env.update(LOG_ENV, HDF5_PLUGIN_PATH=str(build / "plugins"))
    return env


def test_failed_close_under_asan(tmp_path: Path) -> None:
    """The H5Idec_ref case (a stale id closed again at exit) with the connector built with ASan/UBSan."""
    env = asan_env()
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(FAILED_CLOSE), str(tmp_path), "",
                        "H5Idec_ref"], env=env, capture_output=True, text=True, timeout=600)
    out = assert_clean({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr})
    _check_failed_close("H5Idec_ref", out, r.stderr)
