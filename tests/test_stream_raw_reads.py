"""Raw reads of n-n step files (issue 14): a consumer reads contiguous datasets with pread at the offsets the
producer's HDF5 gave them, recorded next to each rank file, instead of opening every rank file through
HDF5. Checked against reads through HDF5, with every fallback and the refusal of a changed file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _blocks(step: int) -> list[tuple[str, object]]:
    from h5flow.model import ImageBlock, ParticleBlock

    rng = np.random.default_rng(step)
    out: list[tuple[str, object]] = []
    for b in range(3):  # three blocks of one rank: rows of one dataset, read at their offsets
        blk = ImageBlock(b, (0.0, 0.0, 4.0 * b), (1.0, 1.0, 1.0), (0, 3, 0, 4, 4 * b, 4 * b + 3), 0)
        blk.arrays("cell")["data"] = rng.random((4, 5, 4))
        blk.arrays("cell")["ids"] = rng.integers(-9, 9, (4, 5, 4)).astype(np.int32)
        blk.arrays("point")["v"] = rng.random((5, 6, 5, 3)).astype(np.float32)
        out.append(("mesh", blk))
    n = 7 + step
    out.append(("particles", ParticleBlock(0, rng.random((n, 3)), {"mass": rng.random(n)})))
    return out


def _stream(tmp_path: Path, name: str, steps: int, **settings: object) -> object:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import open_writer

    cfg = TransportConfig.of(filename=str(tmp_path / name), heartbeat=2.0, queue_limit=0, layout="n-n",
                             keep="all", **settings)
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        for s in range(steps):
            w.begin_step(s, float(s))
            for mesh, blk in _blocks(s):
                w.put(mesh, blk)
            assert w.end_step().published
    return cfg


def _read_all(cfg: object, steps: int, raw: bool, before_read: object = None) -> list[dict[str, np.ndarray]]:
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader

    cfg.settings.raw_reads = raw
    cfg.settings.group = "raw" if raw else "hdf5"  # each reading is its own consumer group: every step again
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    out = []
    try:
        for _ in range(steps):
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            if before_read is not None:
                before_read(res.step)
            got = {}
            for b in res.step.blocks("mesh", ["data", "ids"], "cell"):
                got[f"data{b.block_id}"] = b.arrays("cell")["data"].copy()
                got[f"ids{b.block_id}"] = b.arrays("cell")["ids"].copy()
            for b in res.step.blocks("mesh", ["v"], "point"):
                got[f"v{b.block_id}"] = b.arrays("point")["v"].copy()
            for b in res.step.blocks("particles", ["mass"]):
                got["mass"], got["pos"] = b.arrays["mass"].copy(), b.positions.copy()
            got["_raw"] = np.array([r is not None for r in res.step._raws.values()])
            got["_hdf5_files"] = np.array(len(res.step._files))
            out.append(got)
            reader.release()
    finally:
        reader.close()
    return out


def test_raw_reads_equal_reads_through_hdf5_and_what_was_written(tmp_path: Path) -> None:
    cfg = _stream(tmp_path, "s", 3)
    raw = _read_all(cfg, 3, raw=True)
    via_hdf5 = _read_all(cfg, 3, raw=False)
    for s in range(3):
        assert raw[s]["_raw"].all() and raw[s]["_raw"].size == 1 and int(raw[s]["_hdf5_files"]) == 0
        assert via_hdf5[s]["_raw"].size == 0 and int(via_hdf5[s]["_hdf5_files"]) == 1
        blocks = _blocks(s)
        for b in range(3):
            img = blocks[b][1]
            np.testing.assert_array_equal(raw[s][f"data{b}"], img.arrays("cell")["data"])
            np.testing.assert_array_equal(raw[s][f"ids{b}"], img.arrays("cell")["ids"])
            np.testing.assert_array_equal(raw[s][f"v{b}"], img.arrays("point")["v"])
        np.testing.assert_array_equal(raw[s]["mass"], blocks[3][1].arrays["mass"])
        np.testing.assert_array_equal(raw[s]["pos"], blocks[3][1].positions)
        for k in raw[s]:
            if not k.startswith("_"):
                assert raw[s][k].dtype == via_hdf5[s][k].dtype, k
                np.testing.assert_array_equal(raw[s][k], via_hdf5[s][k], err_msg=k)


def test_a_rank_file_changed_after_publication_is_refused_not_read(tmp_path: Path) -> None:
    cfg = _stream(tmp_path, "s", 1)
    (f,) = sorted((tmp_path / "s.h5flow").glob("step-*/rank-00000.h5"))

    def grow(step: object) -> None:
        with open(f, "ab") as out:
            out.write(b"\0" * 16)

    from h5flow.transports.base import TransportError

    with pytest.raises(TransportError, match="extents describe a file of"):
        _read_all(cfg, 1, raw=True, before_read=grow)


def test_without_extents_the_consumer_reads_through_hdf5(tmp_path: Path) -> None:
    """A step written by a producer that records no extents (the C producer, an older h5flow) is read through
    HDF5, as are datasets whose extents don't fit the read (another dtype)."""
    import json

    from h5flow.transports.hdf5 import _h5

    cfg = _stream(tmp_path, "s", 2)
    files = sorted((tmp_path / "s.h5flow").glob("step-*/rank-00000.extents.json"))
    assert len(files) == 2
    files[0].unlink()
    doc = json.loads(files[1].read_text())
    doc["datasets"]["mesh/cell/data"][2] = "<f4"  # claims another dtype: this dataset goes through HDF5
    doc["datasets"]["mesh/cell/data"][3][1] *= 2  # (of the same bytes: twice the components)
    files[1].write_bytes(_h5.extents_document(doc["file_size"], doc["datasets"]))  # a valid document
    got = _read_all(cfg, 2, raw=True)
    assert not got[0]["_raw"].any() and int(got[0]["_hdf5_files"]) == 1
    assert got[1]["_raw"].all() and int(got[1]["_hdf5_files"]) == 1
    for s in range(2):
        np.testing.assert_array_equal(got[s]["data0"], _blocks(s)[0][1].arrays("cell")["data"])
        np.testing.assert_array_equal(got[s]["v2"], _blocks(s)[2][1].arrays("point")["v"])


def test_raw_reads_setting_from_xml() -> None:
    from h5flow.xmlconfig import loads

    cfg = loads('<sensei><transport type="hdf5" filename="/dev/shm/x" raw_reads="false"/></sensei>')
    assert cfg.transport().settings.raw_reads is False
    cfg = loads('<sensei><transport type="hdf5" filename="/dev/shm/x"/></sensei>')
    assert cfg.transport().settings.raw_reads is True


def test_read_threads_read_the_same_bytes_and_an_error_on_one_is_raised(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw reads of a rank's several blocks run side by side on ``read_threads`` threads: the same bytes as one
    after the other; a failing read raises its error once every read of the batch has ended."""
    import threading

    from h5flow.transports.hdf5 import _h5

    cfg = _stream(tmp_path, "serial", 2)  # each reading its own stream (the same steps: _blocks is seeded)
    cfg.settings.read_threads = 1
    serial = _read_all(cfg, 2, raw=True)
    cfg = _stream(tmp_path, "threads", 2)
    cfg.settings.read_threads = 3
    real = _h5.RawFile.read_rows
    threads: set[str] = set()

    def noting(self: object, *args: object) -> None:
        threads.add(threading.current_thread().name)
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_h5.RawFile, "read_rows", noting)
    threaded = _read_all(cfg, 2, raw=True)
    # mesh's three blocks on the pool; particles' one block is read in place
    assert len({t for t in threads if t.startswith("h5flow-read")}) >= 2 and "MainThread" in threads, threads
    for s in range(2):
        for k in serial[s]:
            np.testing.assert_array_equal(threaded[s][k], serial[s][k], err_msg=k)
    ended: list[int] = []

    def one_fails(self: object, path: str, first: int, out: np.ndarray) -> None:
        if first == 0:
            raise OSError("short read: injected")
        real(self, path, first, out)
        ended.append(first)

    monkeypatch.setattr(_h5.RawFile, "read_rows", one_fails)
    cfg = _stream(tmp_path, "failing", 1)
    cfg.settings.read_threads = 3
    from h5flow.transports.base import RankFailed

    # the reader closed in a finally agrees on the error (every rank raises it, naming the rank)
    with pytest.raises(RankFailed, match="consumer rank 0 failed: OSError: short read: injected"):
        _read_all(cfg, 1, raw=True)
    assert len(ended) == 2  # blocks 1 and 2 of "mesh" were read to the end before the error was raised


def test_read_threads_setting_from_xml() -> None:
    from h5flow.xmlconfig import ConfigError, loads

    t = loads('<sensei><transport type="hdf5" filename="/dev/shm/x" read_threads="4"/></sensei>').transport()
    assert t.settings.read_threads == 4
    assert loads('<sensei><transport type="hdf5" filename="/dev/shm/x"/></sensei>').transport().settings.read_threads == 2
    with pytest.raises(ConfigError, match="read_threads"):
        loads('<sensei><transport type="hdf5" filename="/dev/shm/x" read_threads="0"/></sensei>')


# -- mapped reads (map_reads): large blocks are mapped from the rank file, private and copy-on-write --------

def _is_mapped(a: np.ndarray) -> bool:
    """Whether ``a``'s memory is a mapping made by h5flow.transports._mapped (its base is a ctypes array)."""
    import ctypes

    from h5flow.transports import _mapped

    return isinstance(_mapped.owner_of(a), ctypes.Array)


def test_mapped_reads_equal_copies_and_what_was_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)  # every block mapped, whatever its size
    mapped = _read_all(_stream(tmp_path, "mapped", 3, map_reads="true"), 3, raw=True)
    copied = _read_all(_stream(tmp_path, "copied", 3, map_reads="false"), 3, raw=True)  # the same steps (seeded)
    for s in range(3):
        blocks = _blocks(s)
        for b in range(3):
            np.testing.assert_array_equal(mapped[s][f"data{b}"], blocks[b][1].arrays("cell")["data"])
            np.testing.assert_array_equal(mapped[s][f"v{b}"], blocks[b][1].arrays("point")["v"])
        np.testing.assert_array_equal(mapped[s]["mass"], blocks[3][1].arrays["mass"])
        for k in mapped[s]:
            if not k.startswith("_"):
                assert mapped[s][k].dtype == copied[s][k].dtype, k
                np.testing.assert_array_equal(mapped[s][k], copied[s][k], err_msg=k)


def _one_step(cfg: object, group: str) -> tuple[object, object]:
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader

    cfg.settings.group = group
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    res = reader.begin_step(10.0)
    assert res.status is StepStatus.OK, res.reason
    return reader, res.step


def test_a_mapped_array_is_private_and_outlives_its_deleted_step(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing into a mapped array changes neither the file nor another reader's view; an array the analysis
    kept keeps the written values after the step was released and its files deleted."""
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    cfg = _stream(tmp_path, "s", 1, map_reads="true")
    written = [_blocks(0)[b][1].arrays("cell")["data"] for b in range(3)]
    reader, step = _one_step(cfg, "only")
    kept = {b.block_id: b.arrays("cell")["data"] for b in step.blocks("mesh", ["data"], "cell")}
    assert all(_is_mapped(a) and a.flags.writeable for a in kept.values())
    kept[1][...] = -7.0  # private: the file keeps what the producer wrote
    other_reader, other = _one_step(cfg, "other")
    (again,) = [b for b in other.blocks("mesh", ["data"], "cell") if b.block_id == 1]
    assert _is_mapped(again.arrays("cell")["data"])
    np.testing.assert_array_equal(again.arrays("cell")["data"], written[1])
    other_reader.release()
    other_reader.close()
    del step
    reader.release()
    reader.close()
    # what garbage collection does to a released step: renamed out of the stream, its files unlinked
    step_dir = tmp_path / "s.h5flow" / "step-000000000"
    gone = step_dir.with_name(".step-000000000.gc")
    step_dir.rename(gone)
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    np.testing.assert_array_equal(kept[0], written[0])  # untouched pages of an unlinked file stay
    np.testing.assert_array_equal(kept[2], written[2])
    assert (kept[1] == -7.0).all()


def test_map_reads_auto_maps_on_tmpfs_only() -> None:
    from h5flow.transports import _mapped
    from h5flow.transports.hdf5.settings import Hdf5Settings

    mounts = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        mounts[fields[1]] = fields[2]
    disk = next((m for m, t in mounts.items() if t in ("ext4", "xfs", "btrfs", "overlay")), None)
    shm = next((m for m, t in mounts.items() if t == "tmpfs"), None)
    if shm is not None:
        assert _mapped.memory_fs(shm) == "tmpfs"
        assert Hdf5Settings().maps_reads(Path(shm)) and not Hdf5Settings(map_reads="false").maps_reads(Path(shm))
    if disk is not None:
        assert _mapped.memory_fs(disk) is None
        assert not Hdf5Settings().maps_reads(Path(disk)) and Hdf5Settings(map_reads="true").maps_reads(Path(disk))
    assert shm is not None or disk is not None
    with pytest.raises(ValueError, match="map_reads='yes'"):
        Hdf5Settings(map_reads="yes")


def test_extents_past_the_end_of_the_file_are_refused_never_mapped(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapping past a file's end would fault (SIGBUS) on first touch: such extents (even in a document with a
    valid checksum) are refused before anything is read or mapped."""
    import json

    from h5flow.transports.base import TransportError
    from h5flow.transports.hdf5 import _h5
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    cfg = _stream(tmp_path, "s", 1, map_reads="true")
    (ext,) = sorted((tmp_path / "s.h5flow").glob("step-*/rank-00000.extents.json"))
    doc = json.loads(ext.read_text())
    doc["datasets"]["mesh/cell/data"][0] = doc["file_size"] - 8  # starts 8 bytes before the end
    ext.write_bytes(_h5.extents_document(doc["file_size"], doc["datasets"]))
    with pytest.raises(TransportError, match="are not within the file's"):
        _read_all(cfg, 1, raw=True)
    with pytest.raises(ValueError, match="not within the file"):
        from h5flow.transports import _mapped

        _mapped.map_range(0, doc["file_size"] - 8, 64, doc["file_size"])


def test_large_blocks_on_tmpfs_are_mapped_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default settings on tmpfs: blocks of MAP_MIN bytes and more are mapped, smaller ones copied. On
    /dev/shm where it is tmpfs; elsewhere in tmp_path, with the file system reported as tmpfs (the policy is
    what is tested; the mapping works on any local file system)."""
    import shutil
    import tempfile

    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import _mapped, open_writer
    from h5flow.transports.hdf5 import reader as hdf5_reader

    if _mapped.memory_fs("/dev/shm") is not None:
        d = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="h5flow-test-"))
    else:
        d = Path(tempfile.mkdtemp(dir=tmp_path))
        monkeypatch.setattr(_mapped, "memory_fs", lambda path: "tmpfs")
    try:
        cfg = TransportConfig.of(filename=str(d / "s"), heartbeat=2.0, layout="n-n")
        big = np.random.default_rng(1).random((64, 32, 32))  # 512 KiB
        small = np.arange(8.0).reshape(2, 2, 2)
        with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
            w.begin_step(0, 0.0)
            w.put("m", _image(0, big))
            w.put("m", _image(1, small))
            assert w.end_step().published
        reader, step = _one_step(cfg, "g")
        got = {b.block_id: b.arrays("cell")["data"] for b in step.blocks("m", ["data"], "cell")}
        assert hdf5_reader.MAP_MIN <= big.nbytes and _is_mapped(got[0]) and not _is_mapped(got[1])
        np.testing.assert_array_equal(got[0], big)
        np.testing.assert_array_equal(got[1], small)
        reader.release()
        reader.close()
    finally:
        shutil.rmtree(d)


def _image(block_id: int, data: np.ndarray) -> object:
    from h5flow.model import ImageBlock

    nz, ny, nx = data.shape  # C order, x fastest
    blk = ImageBlock(block_id, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, nx - 1, 0, ny - 1, 0, nz - 1), 0)
    blk.arrays("cell")["data"] = data
    return blk


def test_map_reads_setting_from_xml() -> None:
    from h5flow.xmlconfig import ConfigError, loads

    t = loads('<sensei><transport type="hdf5" filename="/dev/shm/x" map_reads="false"/></sensei>').transport()
    assert t.settings.map_reads == "false"
    assert loads('<sensei><transport type="hdf5" filename="/dev/shm/x"/></sensei>').transport().settings.map_reads == "auto"
    with pytest.raises(ConfigError, match="map_reads"):
        loads('<sensei><transport type="hdf5" filename="/dev/shm/x" map_reads="yes"/></sensei>')


def test_a_refused_mapping_is_copied_instead_and_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Too many mappings (vm.max_map_count) or no memory: the kernel refuses; the rows are copied, the same bytes."""
    import errno

    from h5flow.transports.hdf5 import _h5
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    real = _h5.RawFile.map_rows
    calls = []

    def refuse_some(self: object, path: str, first: int, count: int) -> np.ndarray:
        calls.append(first)
        if first == 0:
            raise OSError(errno.ENOMEM, "mmap: Cannot allocate memory (injected)")
        return real(self, path, first, count)  # type: ignore[arg-type]

    monkeypatch.setattr(_h5.RawFile, "map_rows", refuse_some)
    cfg = _stream(tmp_path, "s", 2, map_reads="true")
    cfg.settings.read_threads = 2
    got = _read_all(cfg, 2, raw=True)
    assert calls and 0 in calls
    for s in range(2):
        for b in range(3):
            np.testing.assert_array_equal(got[s][f"data{b}"], _blocks(s)[b][1].arrays("cell")["data"])
            np.testing.assert_array_equal(got[s][f"v{b}"], _blocks(s)[b][1].arrays("point")["v"])
        np.testing.assert_array_equal(got[s]["mass"], _blocks(s)[3][1].arrays["mass"])
    err = capsys.readouterr().err
    assert err.count("a mapped read was refused") == 1 and "injected" in err


@pytest.mark.parametrize("how", ["mapped", "copied", "hdf5"])
def test_a_step_replaced_by_a_new_run_is_refused_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          how: str) -> None:
    """A consumer between begin_step and blocks() while a new producer run of the same stream name clears it and
    publishes its own step of the same number: the consumer opens its files only then, so it must not return the
    new run's bytes under the old run's metadata; it raises."""
    from mpi4py import MPI

    from h5flow.transports import StepStatus, TransportError, open_reader, open_writer
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    cfg = _stream(tmp_path, "s", 1, map_reads="true" if how == "mapped" else "false")
    cfg.settings.raw_reads = how != "hdf5"
    cfg.settings.group = "old"
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    try:
        res = reader.begin_step(10.0)
        assert res.status is StepStatus.OK, res.reason
        with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:  # the new run: same name, same shapes, other values
            w.begin_step(0, 0.0)
            for mesh, blk in _blocks(0):
                for arrays in ((blk.arrays("cell"), blk.arrays("point")) if mesh == "mesh" else (blk.arrays,)):
                    for name in list(arrays):
                        arrays[name] = arrays[name] + 1000
                w.put(mesh, blk)
            assert w.end_step().published
        with pytest.raises(TransportError, match="new producer run"):
            res.step.blocks("mesh", ["data"], "cell")
    finally:
        reader.close()


def test_an_analysis_keeping_arrays_of_many_steps_makes_the_reader_copy(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A view of a mapped block keeps its whole rank file in memory (the staging file system's room) after the
    step was deleted. Keeping the current and the previous step is fine; an analysis that keeps slices of
    every step makes the reader copy from then on (said once), and every kept value stays what was written."""
    from mpi4py import MPI

    from h5flow.transports import StepStatus, open_reader
    from h5flow.transports.hdf5 import reader as hdf5_reader

    monkeypatch.setattr(hdf5_reader, "MAP_MIN", 1)
    cfg = _stream(tmp_path, "s", 6, map_reads="true")
    cfg.settings.group = "series"
    reader = open_reader(MPI.COMM_SELF.Dup(), cfg)
    series, mapped_steps = [], []
    try:
        previous = None
        for s in range(6):
            res = reader.begin_step(10.0)
            assert res.status is StepStatus.OK, res.reason
            data = {b.block_id: b.arrays("cell")["data"] for b in res.step.blocks("mesh", ["data"], "cell")}
            mapped_steps.append(_is_mapped(data[0]))
            if s < 2:
                previous = data  # the last step only: never more than two steps held
            else:
                series.append(data[0][0, 0, :])  # a slice of every step from step 2 on
            del data, res
            reader.release()
    finally:
        reader.close()
    assert previous is not None
    assert mapped_steps[:3] == [True, True, True] and not any(mapped_steps[4:]), mapped_steps
    assert capsys.readouterr().err.count("keeps arrays of earlier steps") == 1
    for k, s in enumerate(range(2, 6)):
        np.testing.assert_array_equal(series[k], _blocks(s)[0][1].arrays("cell")["data"][0, 0, :])


def test_map_reads_true_never_maps_on_a_network_file_system(monkeypatch: pytest.MonkeyPatch) -> None:
    from h5flow.transports import _mapped
    from h5flow.transports.hdf5.settings import Hdf5Settings

    monkeypatch.setattr(_mapped, "fs_type", lambda path: 0x6969)  # NFS
    assert not Hdf5Settings(map_reads="true").maps_reads(Path("/any")) and not _mapped.local_fs("/any")
    monkeypatch.setattr(_mapped, "fs_type", lambda path: 0xEF53)  # ext4
    assert Hdf5Settings(map_reads="true").maps_reads(Path("/any")) and not Hdf5Settings().maps_reads(Path("/any"))
