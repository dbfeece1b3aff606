"""Streams that trust nothing they do not control: side files checked as data, other users' artefacts refused,
mapped arrays that outside writers cannot change, producer mistakes refused instead of published, and consumer
groups that cannot silently share (and lose) steps."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("H5FLOW_NATIVE_BUILD", ROOT / "build" / "native"))
N = 65536


def _values(step: int) -> np.ndarray:
    return np.arange(N, dtype=np.float64) + 1000.0 * step


def _produce(name: str, steps: int = 1, **settings: object) -> None:
    """``steps`` steps of one 1-D array of N float64 (each element distinct) on this process, kept on disk."""
    from mpi4py import MPI

    import h5flow

    opts = {"type": "hdf5", "keep": "all", "queue_limit": 0, "heartbeat": 2.0, **settings}
    with h5flow.open(name, "w", comm=MPI.COMM_SELF, **opts) as s:
        for t in range(steps):
            with s.step(t) as st:
                st.write("x", _values(t))


def _read(name: str, group: str = "g", array: str | tuple[str, ...] = "x", **settings: object) -> list[Any]:
    """Every step's ``array`` (or, for a tuple of names, a list of those arrays per step)."""
    from mpi4py import MPI

    import h5flow

    out: list[Any] = []
    with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5", group=group, **settings) as s:
        for st in s.steps(timeout=20):
            if isinstance(array, tuple):
                out.append([st.read(a).array().copy() for a in array])
            else:
                out.append(st.read(array).array().copy())
    return out


def _extents(tmp_path: Path) -> Path:
    (ext,) = sorted((tmp_path / "s.h5flow").glob("step-*/rank-00000.extents.json"))
    return ext


def _rewrite(path: Path, data: bytes) -> None:
    os.chmod(path, 0o600)
    path.write_bytes(data)


# -- side files are data -------------------------------------------------------------------------------------

def test_extents_carry_a_checksum_and_raw_reads_equal_what_was_written(tmp_path: Path) -> None:
    from h5flow.transports.hdf5 import _h5

    _produce(str(tmp_path / "s"))
    ext = _extents(tmp_path)
    data = ext.read_bytes()
    doc = _h5.parse_extents(ext, data)
    assert doc is not None and doc["version"] == 2 and data.endswith(b'"}')
    assert stat.S_IMODE(ext.stat().st_mode) == 0o400  # published read-only, the rank file too
    assert stat.S_IMODE(ext.with_name("rank-00000.h5").stat().st_mode) == 0o400
    (got,) = _read(str(tmp_path / "s"))
    np.testing.assert_array_equal(got, _values(0))


def _tampered_offset(offset: int) -> object:
    def change(text: str) -> str:
        doc = json.loads(text)
        doc["datasets"]["x/cell/x"][0] = offset
        return json.dumps(doc, separators=(",", ":"))
    return change


TAMPERINGS = {
    # an offset that still lies inside the file: without the checksum these read wrong values silently
    "offset 6136": _tampered_offset(6136), "offset 6140": _tampered_offset(6140), "offset 0": _tampered_offset(0),
    "offset 4096": _tampered_offset(4096),
    "json true": lambda text: "true",
    "malformed json": lambda text: text[: len(text) // 2],
    "deep nesting": lambda text: "[" * 100000 + "]" * 100000,
    "list of datasets": lambda text: text.replace('"datasets":{', '"datasets":[{', 1),
}


@pytest.mark.parametrize("how", sorted(TAMPERINGS))
def test_a_tampered_extents_file_is_a_transport_error_never_wrong_values(tmp_path: Path, how: str) -> None:
    from h5flow.api import StreamError

    _produce(str(tmp_path / "s"))
    ext = _extents(tmp_path)
    _rewrite(ext, TAMPERINGS[how](ext.read_text()).encode())
    with pytest.raises(StreamError, match=str(ext)):
        _read(str(tmp_path / "s"))


@pytest.mark.parametrize("how", ["offset past the end", "overlapping datasets", "nbytes of another shape"])
def test_extents_with_a_valid_checksum_but_inconsistent_content_are_refused(tmp_path: Path, how: str) -> None:
    """A producer bug (a checksum over wrong content) is caught by the checks against the rank file."""
    from h5flow.api import StreamError
    from h5flow.transports.hdf5 import _h5

    _produce(str(tmp_path / "s"))
    ext = _extents(tmp_path)
    doc = json.loads(ext.read_text())
    entry = doc["datasets"]["x/cell/x"]
    if how == "offset past the end":
        entry[0] = doc["file_size"] - 8
    elif how == "overlapping datasets":
        doc["datasets"]["x/cell/y"] = [entry[0] + 8, 8, "<f8", [1, 1]]
    else:
        entry[1] += 8
    del doc["crc32"]
    body = json.dumps(doc, separators=(",", ":"))[:-1].encode()
    _rewrite(ext, body + _h5.CHECKSUM_KEY + b"%08x" % zlib.crc32(body) + b'"}')
    with pytest.raises(StreamError, match="corrupt extents file"):
        _read(str(tmp_path / "s"))


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "symlink rank file"])
def test_special_side_files_are_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    from h5flow.api import StreamError

    _produce(str(tmp_path / "s"))
    ext = _extents(tmp_path)
    rank_file = ext.with_name("rank-00000.h5")
    if kind == "symlink to /dev/zero":
        ext.unlink()
        ext.symlink_to("/dev/zero")
    elif kind == "fifo":
        ext.unlink()
        os.mkfifo(ext)
    else:
        copy = tmp_path / "elsewhere.h5"
        copy.write_bytes(rank_file.read_bytes())
        rank_file.unlink()
        rank_file.symlink_to(copy)
    with pytest.raises(StreamError, match="symbolic link|FIFO"):
        _read(str(tmp_path / "s"))


def test_extents_of_a_c_producer_pass_the_same_checks(tmp_path: Path) -> None:
    exe = BUILD / "bin" / "h5flow-heat2d"
    assert exe.exists(), f"{exe} is missing: run `make setup`"
    stream = tmp_path / "heat"
    xml = tmp_path / "p.xml"
    xml.write_text(f'<sensei><transport type="hdf5" filename="{stream}" layout="n-n" keep="all"/></sensei>\n')
    res = subprocess.run(["mpiexec", "-n", "2", str(exe), str(xml), "--steps", "1", "--shape", "8", "6"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    from h5flow.transports.hdf5 import _h5

    for r in range(2):
        ext = Path(f"{stream}.h5flow") / "step-000000000" / f"rank-{r:05d}.extents.json"
        doc = _h5.parse_extents(ext, ext.read_bytes())
        assert doc is not None and doc["version"] == 2
        assert stat.S_IMODE(ext.stat().st_mode) == 0o400


# -- another user's artefacts --------------------------------------------------------------------------------

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A sticky world-writable directory (like /tmp or /dev/shm) that another user can reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user (setpriv)")
    d = Path(tempfile.mkdtemp(prefix="h5flow-shared-", dir="/tmp"))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)


def _as_nobody(*cmd: str) -> None:
    subprocess.run([*NOBODY, *cmd], check=True)


@pytest.mark.parametrize("mode", ["0777", "0700"])
def test_a_staging_directory_of_another_user_is_refused(shared_dir: Path, mode: str) -> None:
    from h5flow.transports.base import TransportError

    _as_nobody("mkdir", "-m", mode, str(shared_dir / "s.h5flow"))
    with pytest.raises(TransportError, match=r"refusing the stream directory: it is owned by .*uid 65534.*not by you"):
        _produce(str(shared_dir / "s"))
    assert os.listdir(shared_dir / "s.h5flow") == []  # nothing written into it


def test_a_staging_directory_writable_by_others_is_refused_and_streams_are_created_private(shared_dir: Path) -> None:
    from h5flow.transports.base import TransportError

    (shared_dir / "s.h5flow").mkdir()
    os.chmod(shared_dir / "s.h5flow", 0o777)
    with pytest.raises(TransportError, match=r"it is writable by group and others \(mode 0777\)"):
        _produce(str(shared_dir / "s"))
    _produce(str(shared_dir / "t"))
    root = shared_dir / "t.h5flow"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for sub in ("hb", "consumers", "step-000000000"):
        assert stat.S_IMODE((root / sub).stat().st_mode) & 0o077 == 0, sub


def test_a_consumer_refuses_a_stream_directory_of_another_user(shared_dir: Path) -> None:
    from h5flow.api import StreamError

    _produce(str(shared_dir / "s"))
    subprocess.run(["chown", "-R", "65534:65534", str(shared_dir / "s.h5flow")], check=True)
    with pytest.raises(StreamError, match="refusing the stream directory: it is owned by"):
        _read(str(shared_dir / "s"))


def test_a_socket_contact_file_of_another_user_is_refused(shared_dir: Path) -> None:
    from mpi4py import MPI

    import h5flow
    from h5flow.api import StreamError

    contact = {"run_id": "r", "token": "t" * 64, "producers": 1, "heartbeat": 1.0,
               "ranks": [{"rank": 0, "endpoint": "tcp://127.0.0.1:9", "host": "h", "pid": 1, "local": ""}],
               "created": 0.0, "format": "h5flow-socket", "version": 1}
    path = shared_dir / "s.socket.json"
    _as_nobody(sys.executable, "-c", f"import json; open({str(path)!r}, 'w').write(json.dumps({contact!r}))")
    assert path.stat().st_uid == 65534 and stat.S_IMODE(path.stat().st_mode) & 0o044
    with h5flow.open(str(shared_dir / "s"), "r", comm=MPI.COMM_SELF, type="socket") as s:
        with pytest.raises(StreamError, match=r"refusing the stream's contact file: it is owned by .*uid 65534"):
            next(iter(s.steps(timeout=5)))


def test_the_c_library_refuses_a_staging_directory_of_another_user(shared_dir: Path, tmp_path: Path) -> None:
    exe = _build_c(tmp_path)
    _as_nobody("mkdir", "-m", "0777", str(shared_dir / "s.h5flow"))
    res = subprocess.run(["mpiexec", "-n", "1", str(exe), "open", str(shared_dir / "s")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "refusing the stream directory: it is owned by uid 65534, not by you" in res.stdout, res.stdout
    res = subprocess.run(["mpiexec", "-n", "1", str(exe), "open", str(shared_dir / "t")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert stat.S_IMODE((shared_dir / "t.h5flow").stat().st_mode) == 0o700


# -- mapped arrays stay right --------------------------------------------------------------------------------

MAPPED_KEEPER = r"""
import os, sys
import numpy as np
from mpi4py import MPI
import h5flow
from h5flow.transports.hdf5 import reader as hdf5_reader

name, action = sys.argv[1], sys.argv[2]
hdf5_reader.MAP_MIN = 1
kept = []
with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5", group="m", map_reads="true", keep="all") as s:
    for st in s.steps(timeout=20):
        a = st.read("x").array()
        assert not a.flags.owndata and a.base is not None  # a view of a mapping
        kept.append(a)
f = sorted(__import__("glob").glob(name + ".h5flow/step-*/rank-00000.h5"))[0]
fd = os.open(f, os.O_WRONLY)
if action == "overwrite":
    os.pwrite(fd, b"\xff" * (os.fstat(fd).st_size - 4096), 4096)
else:
    os.ftruncate(fd, 0)
os.close(fd)
expect = np.arange(65536, dtype=np.float64)
assert np.array_equal(kept[0], expect), "a kept array changed with its file"
print("kept arrays unchanged", flush=True)
"""


@pytest.mark.parametrize("action", ["overwrite", "truncate"])
def test_an_array_kept_past_release_is_not_changed_or_killed_by_its_file(tmp_path: Path, action: str) -> None:
    """In a subprocess: a SIGBUS there fails the test instead of killing pytest."""
    _produce(str(tmp_path / "s"))
    res = subprocess.run([sys.executable, "-c", MAPPED_KEEPER, str(tmp_path / "s"), action], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "kept arrays unchanged" in res.stdout, (res.returncode, res.stdout, res.stderr)


def test_a_file_changed_while_its_step_is_read_stops_the_stream(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from mpi4py import MPI

    import h5flow
    from h5flow.api import StreamError
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    _produce(str(tmp_path / "s"), steps=2)
    (first,) = sorted((tmp_path / "s.h5flow").glob("step-000000000/rank-00000.h5"))
    with h5flow.open(str(tmp_path / "s"), "r", comm=MPI.COMM_SELF, type="hdf5", group="m", map_reads="true") as s:
        it = s.steps(timeout=20)
        st = next(it)
        st.read("x")
        fd = os.open(first, os.O_WRONLY)
        os.pwrite(fd, b"\xff" * 64, 4096)
        os.close(fd)
        with pytest.raises(StreamError, match="changed while the step was read"):
            next(it)


def test_deleting_a_step_while_a_late_group_reads_it_is_no_change(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A group that attaches late reads the oldest step on disk while another group's garbage collection, which
    did not see it registered yet, deletes that step: the files it opened lose their names (status change time
    moves) but not one byte. That is no change: the values are the published ones and the stream goes on. A
    mode change and a write (the same bytes back, modification time restored) is still one."""
    from mpi4py import MPI

    import h5flow
    from h5flow.api import StreamError
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    _produce(str(tmp_path / "s"), steps=3)
    with h5flow.open(str(tmp_path / "s"), "r", comm=MPI.COMM_SELF, type="hdf5", group="late", map_reads="true") as s:
        it = s.steps(timeout=20)
        st = next(it)
        before = st.read("x").array().copy()
        shutil.rmtree(tmp_path / "s.h5flow" / "step-000000000")  # what a collector does, after its rename
        assert np.array_equal(st.read("x").array(), before)
        st = next(it)  # released without an error
        assert st.step == 1
        (f,) = sorted((tmp_path / "s.h5flow").glob("step-000000001/rank-00000.h5"))
        st.read("x")
        old = f.stat()
        os.chmod(f, 0o600)
        fd = os.open(f, os.O_WRONLY)
        os.pwrite(fd, os.pread(os.open(f, os.O_RDONLY), 64, 4096), 4096)
        os.close(fd)
        os.utime(f, ns=(old.st_atime_ns, old.st_mtime_ns))
        os.chmod(f, 0o400)
        with pytest.raises(StreamError, match="changed while the step was read"):
            next(it)


# -- producer mistakes are refused ---------------------------------------------------------------------------

def test_the_same_array_written_twice_by_one_rank_is_refused_at_the_call(tmp_path: Path) -> None:
    from mpi4py import MPI

    import h5flow

    with h5flow.open(str(tmp_path / "s"), "w", comm=MPI.COMM_SELF, type="hdf5", queue_limit=0) as s:
        with s.step(0) as st:
            st.write("x", np.zeros(4), offset=(0,), global_shape=(8,))
            with pytest.raises(ValueError, match=r"already wrote a piece of 'x' at offset \(0,\) shape \(4,\), which "
                                                 r"overlaps this one at offset \(2,\) shape \(4,\)"):
                st.write("x", np.zeros(4), offset=(2,), global_shape=(8,))
            st.write("x", np.ones(4), offset=(4,), global_shape=(8,))  # the rest of it: fine


@pytest.mark.mpi(n=2)
def test_overlapping_pieces_of_two_ranks_are_refused_on_every_rank(tmp_path: Path) -> None:
    from mpi4py import MPI

    import h5flow

    comm = MPI.COMM_WORLD
    name = comm.bcast(str(tmp_path / "s") if comm.rank == 0 else None)
    with h5flow.open(name, "w", comm=comm, type="hdf5", queue_limit=0) as s:
        with pytest.raises(ValueError, match=r"the piece of rank 0 at offset \(0, 0\) shape \(3, 4\) and the piece of "
                                             r"rank 1 at offset \(2, 0\) shape \(3, 4\) overlap"):
            with s.step(0) as st:
                st.write("x", np.zeros((3, 4)), offset=(2 * comm.rank, 0), global_shape=(5, 4))


def _build_c(tmp_path: Path) -> Path:
    exe = tmp_path / "clib_trust"
    build = subprocess.run(["mpicc", "-std=c11", "-Wall", "-Wextra", "-Werror",
                            str(ROOT / "tests" / "native" / "clib_trust.c"), f"-I{BUILD / 'include'}",
                            f"-L{BUILD / 'lib'}", f"-Wl,-rpath,{BUILD / 'lib'}", "-lh5flow", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


@pytest.mark.parametrize(("mode", "ranks"), [("overlap-same", 1), ("overlap-ranks", 2), ("type-change", 2),
                                            ("empty", 2)])
def test_the_c_library_refuses_overlapping_pieces_and_type_changes(tmp_path: Path, mode: str, ranks: int) -> None:
    """... and publishes an array with no element on any rank as an array of shape (0,)."""
    exe = _build_c(tmp_path)
    res = subprocess.run(["mpiexec", "-n", str(ranks), str(exe), mode, str(tmp_path / "s")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    from h5flow.transports.hdf5.staging import read_index

    published = [e.step for e in read_index(tmp_path / "s.h5flow" / "index") if e.kind == "P"]
    assert published == ([0] if mode in ("type-change", "empty") else []), published  # none past the error
    if mode == "empty":
        got = _read(str(tmp_path / "s"), array=("p", "x"))
        assert [(a.dtype, a.shape) for a in got[0]] == [(np.int32, (0,)), (np.float64, (4,))], got
        assert got[0][1].tolist() == [0.0, 1.0, 2.0, 3.0], got


# -- consumer groups are explicit ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["hdf5", "socket"])
def test_a_second_live_consumer_of_a_group_is_refused(tmp_path: Path, kind: str) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader, open_writer

    name = str(tmp_path / "s")
    wcfg = TransportConfig.of(kind, name, queue_limit=0, heartbeat=2.0)
    with open_writer(MPI.COMM_SELF.Dup(), wcfg) as w:
        w.begin_step(0, 0.0)
        from h5flow.model import ImageBlock

        w.put("m", ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 1, 0, 1, 0, 1), 0,
                              cell_arrays={"x": np.zeros((2, 2, 2))}))
        w.end_step()
        first = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of(kind, name))
        second = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of(kind, name))
        other = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of(kind, name, group="other"))
        try:
            assert first.begin_step(10.0).status is StepStatus.OK
            res = second.begin_step(10.0)
            assert res.status is StepStatus.ERROR
            assert "consumer group 'default'" in res.reason and "already read by a live consumer" in res.reason
            assert "group='my-analysis'" in res.reason, res.reason
            assert other.begin_step(10.0).status is StepStatus.OK  # another group: every step
            other.release()
            first.release()
        finally:
            for r in (first, second, other):
                r.close()
        again = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of(kind, name))  # the first one closed: free
        try:
            res = again.begin_step(0.5)
            assert res.status is not StepStatus.ERROR, res.reason
        finally:
            again.close()


def test_missed_steps_are_public_and_an_error_at_the_end_unless_gaps_are_allowed(tmp_path: Path) -> None:
    """Group "a" reads steps 0-1 (they are deleted once released); group "b" attaches after that: it gets step 2
    only, and says so."""
    import warnings

    from mpi4py import MPI

    import h5flow
    from h5flow.api import StreamError
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader

    name = str(tmp_path / "s")
    with h5flow.open(name, "w", comm=MPI.COMM_SELF, type="hdf5", queue_limit=0, heartbeat=2.0) as w:
        for t in range(2):
            with w.step(t) as st:
                st.write("x", _values(t))
        a = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of("hdf5", name, group="a"))
        for _ in range(2):
            assert a.begin_step(10.0).status is StepStatus.OK
            a.release()
        a.close()  # deletes what it released
        with w.step(2) as st:
            st.write("x", _values(2))
    with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5", group="b") as s:
        got = []
        with pytest.raises(StreamError, match=r"consumer group 'b' missed 2 of its steps \(0-1\)"):
            for st in s.steps(timeout=10):
                got.append(st.step)
        assert got == [2] and s.missed == [0, 1]
    for gaps in ("warn", "allow"):
        with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5", group=f"c-{gaps}") as s, \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert [st.step for st in s.steps(timeout=10, gaps=gaps)] == [2] and s.missed == [0, 1]
            assert any("missed 2 of its steps" in str(m.message) for m in caught) == (gaps == "warn")


def test_a_socket_consumer_group_that_attached_late_reports_its_missed_steps(tmp_path: Path) -> None:
    """Group "a" took steps 0-1 (the producer let them go); group "b" attached after that gets step 2 and
    ``missed`` lists 0-1 (the end-of-stream error is the API's, shared with hdf5 above)."""
    from mpi4py import MPI

    import h5flow
    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader

    name = str(tmp_path / "s")
    with h5flow.open(name, "w", comm=MPI.COMM_SELF, type="socket", queue_limit=0, heartbeat=2.0) as w:
        a = open_reader(MPI.COMM_SELF.Dup(), TransportConfig.of("socket", name, group="a"))
        for t in range(2):
            with w.step(t) as st:
                st.write("x", _values(t))
            assert a.begin_step(10.0).status is StepStatus.OK
            a.release()
        with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="socket", group="b") as b:
            it = b.steps(timeout=10)
            with w.step(2) as st:
                st.write("x", _values(2))
            got = next(it)
            assert got.step == 2 and b.missed == [0, 1]
            np.testing.assert_array_equal(got.read("x").array(), _values(2))
            b.reader.release()  # b took step 2 (a loop moving on would release it)
            it.close()
        assert a.begin_step(10.0).status is StepStatus.OK  # every group takes every step: the producer closes clean
        a.release()
        a.close()


@pytest.mark.mpi(n=2)
def test_a_file_changed_while_read_on_one_consumer_rank_stops_every_rank(tmp_path: Path) -> None:
    from mpi4py import MPI

    import h5flow
    from h5flow.api import StreamError

    comm = MPI.COMM_WORLD
    name = comm.bcast(str(tmp_path / "s") if comm.rank == 0 else None)
    if comm.rank == 0:
        _produce(name, steps=2)
    comm.Barrier()
    with h5flow.open(name, "r", comm=comm, type="hdf5", group="m", keep="all") as s:
        it = s.steps(timeout=20)
        st = next(it)
        share = st.read("x")  # one piece: consumer rank 0 reads it
        assert (len(share.pieces) == 1) == (comm.rank == 0)
        if comm.rank == 0:
            (first,) = sorted(Path(name + ".h5flow").glob("step-000000000/rank-00000.h5"))
            fd = os.open(first, os.O_WRONLY)
            os.pwrite(fd, b"\xff" * 64, 4096)
            os.close(fd)
        with pytest.raises(StreamError, match="consumer rank 0: step 0: published file"):
            next(it)


def test_a_fifo_in_place_of_a_shared_step_file_is_refused_without_blocking(tmp_path: Path) -> None:
    from h5flow.api import StreamError

    _produce(str(tmp_path / "s"), layout="n-1")
    (data,) = sorted((tmp_path / "s.h5flow").glob("step-*/data.h5"))
    data.unlink()
    os.mkfifo(data)
    with pytest.raises(StreamError, match="data.h5: the step's shared file is a FIFO"):
        _read(str(tmp_path / "s"))
