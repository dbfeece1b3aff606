"""Data files kept open between queries (source.kept_file) and the batched evaluation of candidate runs:
a changed file is never answered from a handle of its older version, the user's own h5py opens and writes
(in this process and in others) are not blocked, and the batched evaluation (with and without the compiled
kernels, in one batch or many) equals numpy."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5flow.query import ApplyOptions, BuildConfig, apply, build_index
from h5flow.query import _kernels, source
from h5flow.query.selection import Selection

RACY = 0.05  # seconds: the tests wait this long after a write before a handle may be kept


@pytest.fixture(autouse=True)
def _kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "RACY_NS", int(RACY * 1e9))
    source.forget_open_files()
    old = source.keep_files_open(4)
    yield
    source.forget_open_files()
    source.keep_files_open(old)


def _write(p: Path, plate: np.ndarray, fiber: np.ndarray, chunk: int = 500, reverse: bool = False) -> None:
    """``reverse``: fiber first: the same file size, its objects and chunks at other addresses."""
    with h5py.File(p, "w") as h:
        for name, a in (("fiber", fiber), ("plate", plate)) if reverse else (("plate", plate), ("fiber", fiber)):
            h.create_dataset(name, data=a, chunks=(chunk,))


def _table(seed: int, rows: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    plate = np.sort(rng.integers(100, 140, rows)).astype("i4")
    fiber = rng.integers(1, 101, rows).astype("i2")
    return plate, fiber


Q = "/plate >= 112 & /plate < 133 & /fiber < 10"


def _oracle(plate: np.ndarray, fiber: np.ndarray) -> np.ndarray:
    return np.flatnonzero((plate >= 112) & (plate < 133) & (fiber < 10))


def _query(p: Path, opts: ApplyOptions | None = None) -> np.ndarray:
    with apply(p, Q, opts) as r:
        return np.sort(r.datasets[0].flat_array())


def _settle() -> None:
    time.sleep(RACY * 1.5)


def _is_kept(p: Path) -> bool:
    return str(p.resolve()) in source._KEPT


def _indexed(p: Path) -> None:
    for ds in ("/plate", "/fiber"):
        build_index(p, ds, BuildConfig(kind="minmax", progress=False))


@pytest.mark.parametrize("how", ["in place", "rename", "same size, mtime put back"])
def test_a_changed_file_is_never_answered_from_the_kept_handle(tmp_path: Path, how: str) -> None:
    p = tmp_path / "t.h5"
    a = _table(1)
    _write(p, *a)
    _settle()
    opts = ApplyOptions(on_stale="scan")  # the indexes go stale with the data; the answers must not
    np.testing.assert_array_equal(_query(p, opts), _oracle(*a))
    assert _is_kept(p)
    st = p.stat()
    b = _table(2)
    # each new version has its objects at other addresses: a handle of the old version would read wrong data
    if how == "in place":
        with h5py.File(p, "r+") as h:
            h["plate"][...] = b[0]
            del h["fiber"]
            h.create_dataset("fiber", data=b[1], chunks=(500,))
    elif how == "rename":
        q = tmp_path / "new.h5"
        _write(q, *b, reverse=True)
        os.replace(q, p)
    else:
        _write(p, *b, reverse=True)  # same size
        assert p.stat().st_size == st.st_size
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert p.stat().st_mtime_ns == st.st_mtime_ns
    np.testing.assert_array_equal(_query(p, opts), _oracle(*b))
    _settle()
    np.testing.assert_array_equal(_query(p, opts), _oracle(*b))
    assert _is_kept(p)


def test_a_recently_changed_file_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "RACY_NS", 3600 * 10**9)
    p = tmp_path / "t.h5"
    a = _table(1)
    _write(p, *a)
    np.testing.assert_array_equal(_query(p), _oracle(*a))
    assert not _is_kept(p)


def test_the_users_own_opens_and_writes_work_while_a_handle_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "t.h5"
    a = _table(1)
    _write(p, *a)
    _settle()
    mine = h5py.File(p, "r")  # opened before: stays usable
    np.testing.assert_array_equal(_query(p), _oracle(*a))
    assert mine["plate"][0] == a[0][0]
    mine.close()
    np.testing.assert_array_equal(_query(p), _oracle(*a))
    assert _is_kept(p)
    b = _table(3)
    with h5py.File(p, "a") as h:  # read-write in this process
        h["fiber"][...] = b[1]
        h.attrs["note"] = "written"
    np.testing.assert_array_equal(_query(p, ApplyOptions(on_stale="scan")), _oracle(a[0], b[1]))
    with h5py.File(p, "w") as h:  # truncated in this process
        h.create_dataset("plate", data=b[0], chunks=(300,))
        h.create_dataset("fiber", data=b[1], chunks=(300,))
    np.testing.assert_array_equal(_query(p, ApplyOptions(use_index=False)), _oracle(*b))
    # another process writes (HDF5 takes its exclusive lock: the kept handle holds none)
    _settle()
    np.testing.assert_array_equal(_query(p, ApplyOptions(use_index=False)), _oracle(*b))
    assert _is_kept(p)
    c = _table(4)
    code = ("import h5py, numpy as np, sys; f = h5py.File(sys.argv[1], 'a'); "
            "f['fiber'][...] = np.load(sys.argv[2]); f.close()")
    np.save(tmp_path / "fiber.npy", c[1])
    subprocess.run([sys.executable, "-c", code, str(p), str(tmp_path / "fiber.npy")], check=True)
    np.testing.assert_array_equal(_query(p, ApplyOptions(use_index=False)), _oracle(b[0], c[1]))


def test_a_file_the_user_has_open_for_writing_is_queried_through_that_open(tmp_path: Path) -> None:
    """HDF5 shares an open file within a process: with the user's read-write handle open, a query goes through
    it (and sees the user's writes, flushed or not), as without kept handles, and keeps nothing."""
    p = tmp_path / "t.h5"
    a = _table(1)
    _write(p, *a)
    _settle()
    np.testing.assert_array_equal(_query(p), _oracle(*a))
    assert _is_kept(p)
    b = _table(5)
    with h5py.File(p, "r+") as h:
        h["fiber"][...] = b[1]  # not flushed
        np.testing.assert_array_equal(_query(p, ApplyOptions(use_index=False)), _oracle(a[0], b[1]))
        assert not _is_kept(p)
    np.testing.assert_array_equal(_query(p, ApplyOptions(use_index=False)), _oracle(a[0], b[1]))


def test_a_writer_holding_the_lock_in_another_process_is_respected(tmp_path: Path) -> None:
    p = tmp_path / "t.h5"
    a = _table(1)
    _write(p, *a)
    _settle()
    code = ("import h5py, sys, time; f = h5py.File(sys.argv[1], 'a'); print('open', flush=True); "
            "sys.stdin.readline(); f.close()")
    # the writer always locks; this process follows its environment as HDF5 does: with locking off
    # (HDF5_USE_FILE_LOCKING=FALSE) HDF5 opens the locked file anyway, and so must the query
    locking_here = os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() not in ("FALSE", "0")
    with subprocess.Popen([sys.executable, "-c", code, str(p)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env={**os.environ, "HDF5_USE_FILE_LOCKING": "TRUE"}) as w:
        assert w.stdin is not None and w.stdout is not None
        try:
            assert w.stdout.readline().strip() == "open"
            if locking_here:
                with pytest.raises(OSError):  # HDF5's own answer to an open of a locked file
                    _query(p)
                assert not _is_kept(p)
            else:
                np.testing.assert_array_equal(_query(p), _oracle(*a))
        finally:
            w.stdin.write("\n")
            w.stdin.flush()
            w.wait(timeout=30)
    np.testing.assert_array_equal(_query(p), _oracle(*a))


def test_kept_handles_are_bounded_released_and_can_be_turned_off(tmp_path: Path) -> None:
    paths = []
    for i in range(6):
        p = tmp_path / f"t{i}.h5"
        _write(p, *_table(i))
        paths.append(p)
    _settle()
    for p in paths:
        _query(p)
    assert sum(_is_kept(p) for p in paths) == 4 and _is_kept(paths[-1]) and not _is_kept(paths[0])
    # a result still open keeps its handle usable after the file was replaced and the handle with it (an
    # evaluation after an in-place write reads the new bytes, as it did with a handle of its own)
    r = apply(paths[-1], Q)
    kept = source._KEPT[str(paths[-1].resolve())]
    b = _table(9)
    _write(tmp_path / "new.h5", *b)
    os.replace(tmp_path / "new.h5", paths[-1])
    np.testing.assert_array_equal(_query(paths[-1], ApplyOptions(on_stale="scan")), _oracle(*b))
    assert kept.fid.valid and kept.dropped  # still used by r
    np.testing.assert_array_equal(np.sort(r.datasets[0].flat_array()), _oracle(*_table(5)))  # its own version
    r.close()
    assert not kept.fid.valid
    assert source.keep_files_open(0) == 4
    assert not source._KEPT
    _query(paths[0])
    assert not source._KEPT


# ---------------------------------------------------------------- batched evaluation


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("batch", [1 << 21, 700])
def test_batched_evaluation_equals_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernels: bool,
                                         batch: int) -> None:
    """Runs the indexes decide differently (groups), several batches, NaN, empty answers, 1-D and 3-D grids,
    the numpy fallback of the kernels."""
    monkeypatch.setattr(Selection, "BATCH_ELEMENTS", batch)
    monkeypatch.setattr(_kernels, "_LIB", [] if kernels else [None, None])
    rng = np.random.default_rng(11)
    n = 20000
    plate = np.sort(rng.integers(0, 60, n)).astype("i4")
    x = rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    x[5000:6500] = np.nan
    cube = np.add.outer(np.add.outer(np.arange(20.0), np.arange(30.0)), np.arange(40.0))
    cube[3:5] = np.nan
    p = tmp_path / "b.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("plate", data=plate, chunks=(1500,))
        h.create_dataset("x", data=x, chunks=(1500,))
        h.create_dataset("cube", data=cube, chunks=(6, 7, 9))
    for ds in ("/plate", "/x", "/cube"):
        build_index(p, ds, BuildConfig(kind="minmax", sub_blocks=16, progress=False))
    cases = [("/plate >= 12 & /plate < 41 & /x < 0.3", (plate >= 12) & (plate < 41) & (x < 0.3)),
             ("/plate < 5 | /x > 1.5", (plate < 5) | (x > 1.5)),
             ("/x != 0.2 & /plate > 30", (x != 0.2) & (plate > 30)),
             ("/plate > 100 & /x < 0", np.zeros(n, bool)),
             ("/x == nan", np.zeros(n, bool)),
             ("/cube > 40.5 & /cube <= 60", (cube > 40.5) & (cube <= 60)),
             ("/cube != 30", cube != 30)]
    for kinds in (("minmax",), ()):
        for expr, want in cases:
            with apply(p, expr, ApplyOptions(kinds=kinds)) as r:
                d = r.datasets[0]
                np.testing.assert_array_equal(np.sort(d.flat_array()), np.flatnonzero(want), err_msg=expr)
                assert d.count == int(want.sum())
                c, _ = d.to_arrays()
                np.testing.assert_array_equal(c, np.argwhere(want), err_msg=expr)


def test_flat_arrays_are_the_callers_to_change(tmp_path: Path) -> None:
    """flat()/flat_array() hand out arrays the caller may change: later passes still give the right answer."""
    plate, fiber = _table(1)
    p = tmp_path / "t.h5"
    _write(p, plate, fiber)
    _indexed(p)
    with apply(p, Q) as r:
        d = r.datasets[0]
        assert d.count == _oracle(plate, fiber).size  # fills the memo
        for a in d.flat():
            a += 1
        d.flat_array()[:] = -1
        np.testing.assert_array_equal(np.sort(d.flat_array()), _oracle(plate, fiber))
        np.testing.assert_array_equal(d.to_arrays()[0][:, 0], _oracle(plate, fiber))


def test_positions_kernels_equal_flatnonzero() -> None:
    rng = np.random.default_rng(3)
    for n in list(range(0, 200)) + [4095, 4096, 4097, 100003]:
        for d in (0.0, 0.01, 0.5, 0.99, 1.0):
            m = rng.random(n) < d
            for base in (0, 7, -3):
                np.testing.assert_array_equal(_kernels.positions(m, base), np.flatnonzero(m) + base)
    m = rng.integers(0, 4, 1000).astype(np.uint8).view(np.bool_)  # bytes other than 0 and 1
    np.testing.assert_array_equal(_kernels.positions(m), np.flatnonzero(m))
    masks = [rng.random(300) < 0.3, rng.random(50) < 0.9]
    kind = np.array([_kernels.MASK, _kernels.ALL, _kernels.COPY, _kernels.MASK, _kernels.ALL], np.int8)
    length = np.array([120, 5, 3, 50, 0], np.int64)
    base = np.array([1000, 2000, 10, 5000, 9], np.int64)
    seg_mask = np.array([0, 0, 0, 1, 0], np.int64)
    seg_off = np.array([100, 0, 0, 0, 0], np.int64)
    copies = {2: np.array([3, 4, 8], np.int64)}
    want = np.concatenate([np.flatnonzero(masks[0][100:220]) + 1000, np.arange(2000, 2005), [13, 14, 18],
                           np.flatnonzero(masks[1]) + 5000])
    out, ends = _kernels.segments(kind, length, base, masks, seg_mask, seg_off, copies)
    np.testing.assert_array_equal(out, want)
    assert ends[-1] == want.size and ends[1] - ends[0] == 5
