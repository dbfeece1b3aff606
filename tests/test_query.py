"""h5flow.query against a numpy oracle: every operator and combination, NaN, empty results, zone maps and
bitmaps (exact at bin edges), stale indexes, metadata conditions, bad expressions, subset, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5flow.query import (ApplyOptions, BuildConfig, Q, QueryError, QuerySyntaxError, StaleIndexError, apply,
                          build_index, drop_index, parse, verify_index)
from h5flow.query.expr import And, DataCond, Or, Query
from h5flow.query.index import IndexStore, sidecar_path
from h5flow.query.source import Source
from h5flow.query.subset import subset

OPS = ("==", "!=", "<", "<=", ">", ">=")
NP_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
          ">=": np.greater_equal}
SHAPE = (60, 50)
KINDS = ("none", "minmax", "bitmap")


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    f = rng.normal(size=SHAPE).astype("f4")
    f[rng.random(SHAPE) < 0.05] = np.nan
    f[:12] = np.nan  # whole blocks of NaN
    smooth = np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1]) / 100.0)  # zone maps prune this one
    ints = rng.integers(-3, 4, size=SHAPE).astype("i2")  # few distinct values: exact bins
    u8 = rng.integers(0, 255, size=SHAPE, dtype="u1")
    return {"/t/f": f, "/t/smooth": smooth, "/t/i": ints, "/t/u": u8}


DATA = _data()


def _write(path: Path) -> None:
    with h5py.File(path, "w") as h:
        for p, a in DATA.items():
            h.create_dataset(p, data=a, chunks=(12, 20))
        h.create_dataset("/t/contig", data=np.arange(1000.0))
        h.create_dataset("/empty", shape=(0,), maxshape=(None,), dtype="f8", chunks=(4,))
        h.create_dataset("/scalar", data=3.0)
        h.create_dataset("/names", data=np.array([b"a", b"b"]))
        h["/t"].attrs["units"] = "K"
        h["/t/f"].attrs["units"] = "K"
        h["/t/smooth"].attrs["units"] = "m"
        h["/t/f"].attrs["calib_gain"] = 2.5
        h["/t/i"].attrs["calib_offset"] = np.arange(3)
        h.create_group("fibers/fiber_001")
        h.create_group("fibers/fiber_002").attrs["plate"] = 4322


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("query")
    out = {}
    for kind in KINDS:
        p = d / f"{kind}.h5"
        _write(p)
        if kind != "none":
            for ds in DATA:
                build_index(p, ds, BuildConfig(kind=kind, bins=8, progress=False))  # type: ignore[arg-type]
        out[kind] = p
    return out


def _oracle(q: Query) -> np.ndarray:
    if isinstance(q, DataCond):
        with np.errstate(invalid="ignore"):
            return NP_OPS[q.op](DATA[q.path], q.value)
    assert isinstance(q, (And, Or))
    a, b = _oracle(q.left), _oracle(q.right)
    return a & b if isinstance(q, And) else a | b


def _check(path: Path, q: Query | str) -> None:
    qq = parse(q) if isinstance(q, str) else q
    with apply(path, qq) as r:
        assert r.datasets, "no dataset in the result"
        exp = np.argwhere(_oracle(qq))
        for d in r.datasets:
            coords, values = d.to_arrays(with_values=True)
            assert d.count == len(exp), (str(qq), d.path, d.count, len(exp))
            np.testing.assert_array_equal(coords, exp)
            flat = np.concatenate(list(d.flat()) or [np.zeros(0, np.int64)])
            np.testing.assert_array_equal(np.sort(flat), np.ravel_multi_index(tuple(exp.T), d.shape))
            np.testing.assert_array_equal(values, DATA[d.path][tuple(exp.T)])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("ds", ["/t/f", "/t/smooth", "/t/i"])
def test_every_operator_matches_numpy(files: dict[str, Path], kind: str, op: str, ds: str) -> None:
    a = DATA[ds]
    finite = a[~np.isnan(a)] if a.dtype.kind == "f" else a
    # values inside the data (bin edges included), between values, beyond both ends, and NaN/inf
    values = [finite.min(), finite.max(), np.median(finite), finite.ravel()[17], float(finite.ravel()[3]) + 1e-3,
              1e9, -float("inf")]
    if op in ("==", "!="):
        values.append(float("nan"))
    for v in values:
        _check(files[kind], DataCond(ds, op, v.item() if hasattr(v, "item") else v))  # type: ignore[arg-type]


def _cond(draw: st.DrawFn) -> DataCond:
    ds = draw(st.sampled_from(list(DATA)))
    a = DATA[ds]
    finite = a[~np.isnan(a)] if a.dtype.kind == "f" else a
    v = draw(st.one_of(st.sampled_from(finite.ravel()[:200].tolist()), st.floats(-5, 60, allow_nan=False),
                       st.integers(-5, 300)))
    return DataCond(ds, draw(st.sampled_from(OPS)), v)


@st.composite
def _expr(draw: st.DrawFn, depth: int = 0) -> Query:
    if depth >= 2 or draw(st.booleans()):
        return _cond(draw)
    left, right = draw(_expr(depth + 1)), draw(_expr(depth + 1))
    return And(left, right) if draw(st.booleans()) else Or(left, right)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=_expr(), kind=st.sampled_from(KINDS))
def test_random_combinations_match_numpy(files: dict[str, Path], q: Query, kind: str) -> None:
    _check(files[kind], q)


@pytest.mark.parametrize("kind", KINDS)
def test_text_queries_ranges_and_aligned_columns(files: dict[str, Path], kind: str) -> None:
    for text in ("-0.5 < /t/f <= 0.5", "/t/i == 2 & /t/smooth < 20.3", "(/t/i == -3 | /t/u >= 250) & /t/f != nan",
                 "40 >= /t/smooth > 10.25 | /t/i < -2", "/t/f > inf", "/t/u < 0"):
        _check(files[kind], text)


def test_zone_maps_and_bitmaps_skip_blocks(files: dict[str, Path]) -> None:
    for kind in ("minmax", "bitmap"):
        with apply(files[kind], "/t/smooth < 11") as r:
            plan = r.datasets[0].selection.explain()
            assert plan["leaves"][0]["index"] == kind
            assert plan["candidate_blocks"] < plan["blocks"] / 2, plan
    with apply(files["bitmap"], "/t/i == 2") as r:  # one bin per distinct value: no candidate at all
        d = r.datasets[0]
        assert d.count == int((DATA["/t/i"] == 2).sum())
        assert d.selection.explain()["candidate_blocks"] == 0 and d.selection.blocks_read == 0
    with apply(files["none"], "/t/smooth < 11") as r:
        assert r.datasets[0].selection.explain()["candidate_blocks"] == r.datasets[0].selection.grid.nblocks


def test_block_reads_and_flat_indices_agree_with_hyperslab_reads(tmp_path: Path) -> None:
    """Blocks read as stored chunks (unfiltered native chunks) and every other way give the same hits:
    edge chunks, chunks never written (fill value), big-endian data, a filtered dataset; flat indices
    equal raveled coordinates in 3-D."""
    from h5flow.query.blocks import BlockGrid

    rng = np.random.default_rng(3)
    a = rng.normal(size=(9, 10, 11))
    p = tmp_path / "blocks.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("le", data=a, chunks=(4, 3, 5))
        h.create_dataset("be", data=a.astype(">f8"), chunks=(4, 3, 5))
        h.create_dataset("gz", data=a, chunks=(4, 3, 5), compression="gzip", shuffle=True)
        part = h.create_dataset("part", shape=a.shape, dtype="f8", chunks=(4, 3, 5), fillvalue=7.5)
        part[:4, :3, :5] = a[:4, :3, :5]  # one chunk written, the rest are the fill value
    full = np.where(np.zeros(a.shape, bool), 0, 7.5)
    full[:4, :3, :5] = a[:4, :3, :5]
    for kind in ("minmax", "bitmap"):
        for ds in ("le", "be", "gz", "part"):
            build_index(p, f"/{ds}", BuildConfig(kind=kind, bins=8, progress=False))
            ref = full if ds == "part" else a
            for cond in (("> 0.3", ref > 0.3), ("< 8", ref < 8), ("== 7.5", ref == 7.5)):
                with apply(p, f"/{ds} {cond[0]}") as r:
                    d = r.datasets[0]
                    flat = np.sort(np.concatenate(list(d.flat()) or [np.zeros(0, np.int64)]))
                    np.testing.assert_array_equal(flat, np.flatnonzero(cond[1]), err_msg=f"{ds} {cond[0]}")
    g = BlockGrid((9, 10, 11), (4, 3, 5))
    for k in range(g.nblocks):
        n = int(np.prod(g.extent(k)))
        for local, asc in ((np.arange(n)[::2], False), (np.arange(n)[::2], True), (np.arange(n), True),
                           (np.arange(n)[1:], True)):  # runs of consecutive indices are sliced when ascending
            np.testing.assert_array_equal(g.flat(k, local, ascending=asc),
                                          np.ravel_multi_index(tuple(g.coords(k, local).T), g.shape))


def test_empty_results_empty_and_scalar_datasets(files: dict[str, Path]) -> None:
    with apply(files["bitmap"], "/t/f > 100") as r:
        assert r.datasets[0].count == 0 and list(r.datasets[0].coords()) == [] and not r.nonempty()
    with apply(files["none"], "/empty > 0") as r:
        assert r.datasets[0].count == 0
    with apply(files["none"], "/scalar == 3") as r:
        assert r.datasets[0].count == 1 and r.datasets[0].to_arrays()[0].shape == (1, 0)
    build_index(files["none"], "/empty", BuildConfig(kind="bitmap", progress=False))
    with apply(files["none"], "/empty > 0") as r:
        assert r.datasets[0].count == 0
    drop_index(files["none"], "/empty")
    assert not sidecar_path(files["none"]).exists()


def test_unnamed_condition_is_every_numeric_dataset(files: dict[str, Path]) -> None:
    with apply(files["minmax"], "* > 250") as r:
        got = {d.path: d.count for d in r.datasets}
    assert "/names" not in got and got["/t/contig"] == 749 and got["/t/u"] == int((DATA["/t/u"] > 250).sum())
    assert got["/t/f"] == 0 and got["/scalar"] == 0


def test_metadata_conditions_and_their_combinations(files: dict[str, Path]) -> None:
    p = files["none"]
    with apply(p, '@units == "K"') as r:
        assert sorted(o for _, o, _ in r.attributes) == ["/t", "/t/f"] and not r.datasets
    with apply(p, Q.attr_name("calib*")) as r:
        assert sorted((o, a) for _, o, a in r.attributes) == [("/t/f", "calib_gain"), ("/t/i", "calib_offset")]
    with apply(p, 'link_name("fiber_*") & @plate == 4322') as r:
        assert [o for _, o in r.objects] == ["/fibers/fiber_002"]
    with apply(p, Q.link_name("fiber_*") | Q.link_name("smooth")) as r:
        assert sorted(o for _, o in r.objects) == ["/fibers/fiber_001", "/fibers/fiber_002", "/t/smooth"]
    # element condition AND attribute on the same object (H5Q AND): only /t/f has units K
    with apply(p, 'smooth > 50 & units == "K"') as r:
        assert not r.datasets
    with apply(p, 'f > 1 & units == "K"') as r:
        assert [d.path for d in r.datasets] == ["/t/f"]
        assert r.datasets[0].count == int(np.nansum(DATA["/t/f"] > 1))
    with apply(p, (Q.data("/t/u") > 200) | (Q.attr("calib_offset") >= 2)) as r:
        assert [d.path for d in r.datasets] == ["/t/u"] and [o for _, o, _ in r.attributes] == ["/t/i"]
    with apply(p, Q.attr("calib_gain") > 2) as r:
        assert [o for _, o, _ in r.attributes] == ["/t/f"]


@pytest.mark.parametrize("text,pos,fragment", [
    ("temp >", 6, "expected a dataset, attribute or value"),
    ("temp = 3", 5, "'=' is not an operator"),
    ("(a > 1", 6, "expected ')'"),
    ("a > 1 b < 2", 6, "combine conditions with & or |"),
    ("a > b", 4, "not with another dataset"),
    ("1 < 2", 0, "needs a dataset or attribute"),
    ("a > 'x", 4, "unterminated string"),
    ("a && b", 2, "single '&'"),
    ("1 < a > 3", 6, "point the same way"),
    ("", 0, "empty query"),
    ("a > 1 #", 6, "unexpected character"),
    ("/t/f == 'K'", 8, "compare with numbers"),
    ("attr_name(x)", 10, "quoted pattern"),
    ("/a < nan", 5, "never holds"),
])
def test_bad_expressions_report_their_position(text: str, pos: int, fragment: str) -> None:
    with pytest.raises(QuerySyntaxError) as e:
        parse(text)
    assert e.value.pos == pos and fragment in str(e.value)
    assert str(e.value).splitlines()[-1] == "    " + " " * pos + "^"


def test_binding_errors(files: dict[str, Path], tmp_path: Path) -> None:
    p = tmp_path / "dup.h5"
    with h5py.File(p, "w") as h:
        h["a/x"] = np.arange(3.0)
        h["b/x"] = np.arange(3.0)
        h["c"] = np.arange(4.0)
    with pytest.raises(QuerySyntaxError) as e:
        apply(p, "c > 0 & x > 1")
    assert e.value.pos == 8 and "names 2 datasets" in str(e.value)
    with pytest.raises(QueryError, match="aligned"):
        apply(p, "/a/x > 0 & /c > 1")
    with pytest.raises(QuerySyntaxError, match="no dataset /nope"):
        apply(p, "/nope > 1")
    with pytest.raises(QueryError, match="cannot be combined element-wise"):
        apply(p, (Q.data() > 1) & (Q.data("/c") > 0))
    with pytest.raises(TypeError, match="no truth value"):
        bool(Q.data("/c") > 1)
    with pytest.raises(QuerySyntaxError, match=r"no dataset or attribute named 'nothing': datasets /a/x, /b/x, /c"):
        apply(p, "nothing == 3")  # a name that names nothing is a mistake: what exists is listed
    with h5py.File(p, "a") as h:
        h["c"].attrs["nothing"] = 3
    with apply(p, "nothing == 3") as r:  # a name that is no dataset but an attribute is an attribute name
        assert not r.datasets and r.attributes == [(str(p), "/c", "nothing")]
    with apply(p, "@absent == 3") as r:  # '@': an attribute, present or not
        assert not r.datasets and not r.attributes


def test_stale_index_is_refused_scanned_or_rebuilt(tmp_path: Path) -> None:
    p = tmp_path / "s.h5"
    a = np.arange(10000.0)
    with h5py.File(p, "w") as h:
        h.create_dataset("x", data=a, chunks=(1000,))
    build_index(p, "/x", BuildConfig(kind="bitmap", bins=16, progress=False))
    with apply(p, "/x >= 9990") as r:
        assert r.datasets[0].count == 10
    with h5py.File(p, "r+") as h:  # overwrite data after the build
        h["x"][5000:5100] = 1e6
    with pytest.raises(StaleIndexError, match="stale"):
        apply(p, "/x >= 9990")
    rows = {r.kind: r.status for r in IndexStore(Source.of(p)).rows()}
    assert rows == {"bitmap": "stale", "minmax": "stale"}
    with apply(p, "/x >= 9990", ApplyOptions(on_stale="scan")) as r:
        assert r.datasets[0].count == 110 and r.datasets[0].selection.leaves[0].index == "stale (ignored)"
    assert verify_index(p, "/x") == (10, 1)  # the one block that was overwritten differs
    with apply(p, "/x >= 9990", ApplyOptions(on_stale="rebuild")) as r:
        assert r.datasets[0].count == 110 and r.datasets[0].selection.leaves[0].index == "bitmap"
    assert {r.status for r in IndexStore(Source.of(p)).rows()} == {"fresh"}
    os.utime(p, ns=(1, 1))  # metadata-only change: stale until verified
    with pytest.raises(StaleIndexError):
        apply(p, "/x >= 9990")
    assert verify_index(p, "/x") == (10, 0)
    with apply(p, "/x >= 9990") as r:
        assert r.datasets[0].count == 110


def test_an_index_is_stale_after_a_write_that_sets_the_mtime_back(tmp_path: Path) -> None:
    """Size and mtime are not enough: a same-size overwrite whose mtime is restored (rsync -a, cp -p, a
    tool that keeps timestamps) left the index looking fresh and answered with the old data's hits."""
    p = tmp_path / "s.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("x", data=np.arange(10000.0), chunks=(1000,))
    build_index(p, "/x", BuildConfig(kind="minmax", progress=False))
    st = p.stat()
    with h5py.File(p, "r+") as h:
        h["x"][5000:5100] = 1e6  # same size: only chunk contents change
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(StaleIndexError, match="stale"):
        apply(p, "/x >= 9990")
    with apply(p, "/x >= 9990", ApplyOptions(on_stale="scan")) as r:
        assert r.datasets[0].count == 110
    # another file put in its place (same size and mtime, a new inode): stale too
    q = tmp_path / "t.h5"
    with h5py.File(q, "w") as h:
        h.create_dataset("x", data=np.arange(10000.0) + 1, chunks=(1000,))
    build_index(p, "/x", BuildConfig(kind="minmax", progress=False))
    st = p.stat()
    assert q.stat().st_size == st.st_size
    os.utime(q, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(q, p)
    with pytest.raises(StaleIndexError, match="stale"):
        apply(p, "/x >= 9990")


def test_subset_writes_values_coordinates_and_sources(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "sub.h5"
    rep = subset(files["bitmap"], "/t/i == 2 & /t/f > 0", out, include=["/t/u"])
    mask = (DATA["/t/i"] == 2) & (DATA["/t/f"] > 0)
    assert rep.datasets == {"/t/i": int(mask.sum()), "/t/f": int(mask.sum()), "/t/u": int(mask.sum())}
    with h5py.File(out, "r") as h:
        for ds in ("/t/i", "/t/f", "/t/u"):
            c = h[ds]["coords"][()]
            assert sorted(map(tuple, c.tolist())) == sorted(map(tuple, np.argwhere(mask).tolist()))
            np.testing.assert_array_equal(h[ds]["values"][()], DATA[ds][tuple(c.T)])
            assert h[ds].attrs["source_path"] == ds and h[ds].attrs["source_file"] == str(files["bitmap"])
    with pytest.raises(QueryError, match="include"):
        subset(files["bitmap"], "/t/i == 2", out, include=["/t/contig"])


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


def test_cli_query_index_subset(tmp_path: Path) -> None:
    p = tmp_path / "c.h5"
    _write(p)
    r = _cli("index", "build", str(p), "/t/smooth", "/t/i", "--kind", "bitmap", "--bins", "8")
    assert r.returncode == 0 and "bitmap index" in r.stdout, r.stderr
    assert {(x.dataset, x.kind, x.status) for x in IndexStore(Source.of(p)).rows()} >= {("/t/i", "bitmap", "fresh")}
    r = _cli("query", str(p), "smooth < 3 & i >= 0", "--json", "--limit", "0", "--values")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    mask = (DATA["/t/smooth"] < 3) & (DATA["/t/i"] >= 0)
    for d in out["datasets"]:
        assert d["count"] == int(mask.sum())
        assert sorted(map(tuple, d["coords"])) == sorted(map(tuple, np.argwhere(mask).tolist()))
    r = _cli("query", str(p), "smooth < 3 &")
    assert r.returncode == 1 and "at position 12" in r.stderr and r.stderr.rstrip().endswith("^")
    r = _cli("index", "drop", str(p), "/t/i", "/t/smooth")
    assert r.returncode == 0 and "dropped bitmap index of /t/i" in r.stdout
    assert not sidecar_path(p).exists()


CONTAINER_SCRIPT = """
import json, sys, h5py, numpy as np
from h5flow import _hdf5lib
from h5flow.query import BuildConfig, ApplyOptions, StaleIndexError, apply, build_index
c = sys.argv[1]
f = h5py.File(c, "w"); assert _hdf5lib.connector_name(f.id.id) == "h5flow_log"
x = np.arange(300000, dtype="f8"); x[::7] = np.nan
f["t/x"] = x; f["t/y"] = (np.arange(300000) % 1000).astype("i4"); f.close()
out = {}
for step in ("none", "bitmap"):
    if step == "bitmap":
        build_index(c, "/t/x", BuildConfig(kind="bitmap", progress=False))
        build_index(c, "/t/y", BuildConfig(kind="bitmap", progress=False))
    with apply(c, "x > 299990 | (y < 2 & x < 5000)") as r:
        d = r.datasets[0]
        out[step] = {"coords": d.to_arrays()[0][:, 0].tolist(), "index": sorted({p.index for p in d.selection.leaves})}
f = h5py.File(c, "r+"); f["t/x"][0:10] = 1e9; f.close()  # appended to the logs after the build
try:
    apply(c, "x > 299990")
    out["stale"] = "not detected"
except StaleIndexError as e:
    out["stale"] = "refused"
with apply(c, "x > 299990", ApplyOptions(on_stale="scan")) as r:
    out["scan"] = r.datasets[0].count
print("RESULT " + json.dumps(out))
"""


def test_h5flow_log_container(tmp_path: Path) -> None:
    from h5flow._paths import default_plugin_dir

    if not (Path(default_plugin_dir()) / "libh5flow_log.so").exists():
        pytest.skip("h5flow_log plugin not built")
    c = tmp_path / "cont"
    env = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(default_plugin_dir())}
    proc = subprocess.run([sys.executable, "-c", CONTAINER_SCRIPT, str(c)], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.split("RESULT ", 1)[1])
    x = np.arange(300000, dtype="f8")
    x[::7] = np.nan
    y = np.arange(300000) % 1000
    mask = (x > 299990) | ((y < 2) & (x < 5000))
    for step in ("none", "bitmap"):
        index = ["write statistics (1 writes)"] if step == "none" else [step]  # no index: the connector's stats
        assert res[step]["coords"] == np.flatnonzero(mask).tolist() and res[step]["index"] == index
    assert res["stale"] == "refused" and res["scan"] == int(np.sum(x > 299990)) + 10
    assert sidecar_path(c).is_file() and not any(p.name.endswith(".h5") for p in c.rglob("*"))
    # the command line runs itself again with the connector's environment
    r = _cli("query", str(c), "y == 999 & x < 3000", "--json", "--limit", "0", "--stale", "scan")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["datasets"][0]
    assert [c[0] for c in d["coords"]] == [999, 1999, 2999] and d["count"] == 3


STATS_SCRIPT = """
import json, sys, h5py, numpy as np
from h5flow.query import ApplyOptions, apply
c = sys.argv[1]
n = 12 * (1 << 17)
with h5py.File(c, "w") as f:
    d = f.create_dataset("v", shape=(n,), dtype="f8", fillvalue=-5.0)
    for w in range(0, 10 * (1 << 17), 1 << 16):          # 20 writes, increasing values; the tail stays fill
        d[w:w + (1 << 16)] = np.linspace(w, w + (1 << 16) - 1, 1 << 16)
    d[1000:1010] = np.nan
    d[700000:700005] = 1e9                                # an overwrite: the stats follow it
    d[3 << 17] = -7.0
    i = f.create_dataset("i", shape=(n,), dtype="i8")
    for w in range(0, n, 1 << 17):                        # 12 writes, one per block
        i[w:w + (1 << 17)] = np.arange(w, w + (1 << 17)) // 1000
out = {}
for q in ("v > 1100000", "v < 0", "v == -5", "v != -5", "v >= 1e9", "v <= 10", "v > 5e8", "i == 3", "i != 1000"):
    for kinds in (("minmax",), ()):
        with apply(c, q, ApplyOptions(kinds=kinds) if kinds else ApplyOptions(use_index=False)) as r:
            ds = r.datasets[0]
            flat = np.concatenate(list(ds.flat()) or [np.zeros(0, np.int64)])
            ex = ds.selection.explain()
            out[q + " " + str(bool(kinds))] = {"hits": np.sort(flat).tolist(), "read": ex["blocks_read"],
                                               "blocks": ex["blocks"], "index": [l["index"] for l in ex["leaves"]]}
print("RESULT " + json.dumps(out))
"""


def test_container_queries_use_the_connectors_write_statistics(tmp_path: Path) -> None:
    """An h5flow_log dataset without an index is pruned with the per-write statistics the connector keeps
    (h5flow.stats), never stale: answers equal numpy's with overwrites, NaNs, a fill-value tail and
    integers, and fewer blocks are read than a scan reads."""
    from h5flow._paths import default_plugin_dir

    c = tmp_path / "stats"
    env = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(default_plugin_dir())}
    proc = subprocess.run([sys.executable, "-c", STATS_SCRIPT, str(c)], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.split("RESULT ", 1)[1])
    n = 12 * (1 << 17)
    v = np.full(n, -5.0)
    for w in range(0, 10 * (1 << 17), 1 << 16):
        v[w:w + (1 << 16)] = np.linspace(w, w + (1 << 16) - 1, 1 << 16)
    v[1000:1010] = np.nan
    v[700000:700005] = 1e9
    v[3 << 17] = -7.0
    i = np.arange(n) // 1000
    arrays = {"v": v, "i": i}
    for key, got in res.items():
        q, used = key.rsplit(" ", 1)
        name, op, val = q.split(" ")
        with np.errstate(invalid="ignore"):
            exp = np.flatnonzero(NP_OPS[op](arrays[name], float(val)))
        assert got["hits"] == exp.tolist(), key
        if used == "True":
            assert got["index"][0].startswith("write statistics"), key
    # block 8 holds the threshold, block 5 the overwrite's 1e9 (read); block 9 matches entirely (sure,
    # not read); the scan reads all 12
    assert res["v > 1100000 True"]["read"] == 2 and res["v > 1100000 False"]["read"] == 12
    assert res["v >= 1e9 True"]["read"] == 1 and res["i == 3 True"]["read"] == 1


def _smooth_3d(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Values rising along the slowest axis (a sub-slab of a chunk is a run of its first-axis rows), in
    chunks with edge chunks cut on every axis; little-endian, big-endian and gzip copies."""
    rng = np.random.default_rng(11)
    a = np.arange(20.0)[:, None, None] + rng.uniform(0, 0.5, size=(20, 7, 9))
    p = tmp_path / "sub.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("le", data=a, chunks=(16, 4, 5))
        h.create_dataset("be", data=a.astype(">f8"), chunks=(16, 4, 5))
        h.create_dataset("gz", data=a, chunks=(16, 4, 5), compression="gzip")
    return p, a


def test_sub_block_zone_maps_read_only_the_sub_slabs_that_can_match(tmp_path: Path) -> None:
    """Zone maps per sub-slab (index format 2): of a partly matching chunk only the sub-slabs that can
    match are read, those entirely inside the condition are sure without a read; answers stay exact."""
    p, a = _smooth_3d(tmp_path)
    for ds in ("le", "be", "gz"):
        build_index(p, f"/{ds}", BuildConfig(kind="minmax", sub_blocks=8, progress=False))  # 2 rows per sub-slab
        for text, ref in (("> 13.2", a > 13.2), ("< 3.3", a < 3.3), (">= 17", a >= 17), ("== 100", a == 100)):
            with apply(p, f"/{ds} {text}") as r:
                d = r.datasets[0]
                flat = np.sort(np.concatenate(list(d.flat()) or [np.zeros(0, np.int64)]))
                np.testing.assert_array_equal(flat, np.flatnonzero(ref), err_msg=f"{ds} {text}")
        with apply(p, f"/{ds} > 13.2") as r:
            d = r.datasets[0]
            assert d.count == int((a > 13.2).sum())
            plan = d.selection.explain()
            # rows 14..19 are all > 13.2 (sure: 3 sub-slabs of 2 rows); rows 12..13 may match (candidates)
            assert plan["sure"] == 6 * 7 * 9 and plan["candidates"] == 2 * 7 * 9, plan
            assert plan["elements_read"] == 2 * 7 * 9, plan  # per chunk: only its candidate sub-slab
    with apply(p, "/le > 13.2", ApplyOptions(sub_slabs=False)) as r:  # the same zone maps per chunk
        d = r.datasets[0]
        assert d.count == int((a > 13.2).sum())
        plan = d.selection.explain()
        assert plan["sure"] == 4 * 7 * 9 and plan["elements_read"] == 16 * 7 * 9, plan
    build_index(p, "/le", BuildConfig(kind="minmax", sub_blocks=16, progress=False))  # one row per sub-slab
    with apply(p, "/le > 13.2") as r:  # evaluated at the index's finer sub-slabs: only row 13 is read
        d = r.datasets[0]
        assert d.count == int((a > 13.2).sum())
        plan = d.selection.explain()
        assert plan["sub_blocks"] == 16 and plan["elements_read"] == 7 * 9 and plan["sure"] == 6 * 7 * 9, plan
    with pytest.raises(ValueError, match="sub_blocks must be between 1"):
        BuildConfig(sub_blocks=0)


def test_a_filtered_chunk_is_decoded_once_for_all_its_candidate_sub_slabs(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Sub-slabs of a gzip chunk alternate between 'cannot match' and 'may match': the chunk is read
    (decoded) once and its candidate runs sliced from it, not one hyperslab read (a whole decode) per run.
    (Candidate runs closer than Selection.GAP_ELEMENTS are merged by default: off here to see each run.)"""
    from h5flow.query.selection import Selection

    monkeypatch.setattr(Selection, "GAP_ELEMENTS", 0)
    rng = np.random.default_rng(5)
    a = np.empty((64, 8, 8))
    for r in range(64):
        a[r] = ((r // 8) % 2) * 10 + rng.uniform(0, 0.5, (8, 8))  # sub-slabs of 8 rows: 0, 10, 0, 10, ...
    p = tmp_path / "gz.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("x", data=a, chunks=(32, 8, 8), compression="gzip")
    build_index(p, "/x", BuildConfig(kind="minmax", sub_blocks=4, progress=False))
    with apply(p, "/x > 10.25") as r:
        d = r.datasets[0]
        assert d.count == int((a > 10.25).sum())
        plan = d.selection.explain()
        assert plan["candidate_blocks"] == 2 and plan["elements_read"] == 32 * 8 * 8, plan
        assert plan["reads"] == 2, plan  # one per chunk, for its two candidate runs


def test_index_format_1_is_used_per_block_and_a_newer_format_is_refused(tmp_path: Path) -> None:
    """A sidecar written before sub-block zone maps (format 1: no sub_min/sub_max/sub_nan) still answers
    exactly, at chunk granularity, and says so in the plan; a sidecar from a newer h5flow is refused."""
    from h5flow.query.index import IndexError_, forget_loaded

    p, a = _smooth_3d(tmp_path)
    build_index(p, "/le", BuildConfig(kind="minmax", progress=False))
    side = sidecar_path(p)
    forget_loaded()
    with h5py.File(side, "r+") as h:
        h.attrs["h5flow_index_format"] = 1
        g = h["/datasets/le/minmax"]
        for name in ("sub_min", "sub_max", "sub_nan"):
            del g[name]
        del g.attrs["sub_blocks"]
        del g.attrs["content_crc32"]  # format 1 had no checksums
    with apply(p, "/le > 13.2") as r:
        d = r.datasets[0]
        assert d.count == int((a > 13.2).sum())
        plan = d.selection.explain()
        assert plan["leaves"][0]["index"].startswith("minmax (per block: format 1"), plan
        # per chunk: the edge chunk (rows 16..19) is sure, the first (rows 0..15) is read whole
        assert plan["sure"] == 4 * 7 * 9 and plan["candidates"] == 16 * 7 * 9, plan
    forget_loaded()
    with h5py.File(side, "r+") as h:
        h.attrs["h5flow_index_format"] = 3
    with pytest.raises(IndexError_, match="newer h5flow"):
        apply(p, "/le > 13.2")
    with pytest.raises(IndexError_, match="newer h5flow"):  # a build would copy it into an older format
        build_index(p, "/be", BuildConfig(progress=False))
    forget_loaded()


def test_a_chunk_read_whole_is_not_served_again_after_the_buffer_was_reused(tmp_path: Path) -> None:
    """Without pread (the file is open with the core driver), a partly matching chunk is read whole into the
    reader's reused buffer and its runs sliced from it; reading another chunk into that buffer must not
    leave the first one's runs served from it (evaluated again when the memo of hits is off)."""
    rng = np.random.default_rng(9)
    a = np.empty((64, 8, 8))
    for r in range(32):
        a[r] = ((r // 8) % 2) * 10 + rng.uniform(0, 0.5, (8, 8))  # chunk 0: sub-slabs 0, 10, 0, 10
    a[32:] = 10 + rng.uniform(0, 0.5, (32, 8, 8))  # chunk 1: every sub-slab may match
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("x", data=a, chunks=(32, 8, 8))
    build_index(p, "/x", BuildConfig(kind="minmax", sub_blocks=4, progress=False))
    want = np.flatnonzero(a > 10.25)
    with h5py.File(p, "r", driver="core") as h:
        r = apply(h["/"], "/x > 10.25")
        d = r.datasets[0]
        d.selection.MEMO_ELEMENTS = 0  # every pass reads again
        for _ in range(3):
            np.testing.assert_array_equal(np.sort(np.concatenate(list(d.flat()))), want)
        assert d.count == want.size


def test_a_condition_the_indexes_decide_for_a_run_is_not_read_for_it(tmp_path: Path) -> None:
    """H5Boss: inside the plate range the zone maps make ``plate`` conditions sure, so only ``fiber`` is
    read there; ``plate`` is read only in the chunks at the range's ends."""
    plate = np.repeat(np.arange(100, 140), 100).astype("i4")  # 4000 rows ordered by plate
    fiber = np.tile(np.arange(1, 101), 40).astype("i2")
    p = tmp_path / "boss.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("plate", data=plate, chunks=(500,))
        h.create_dataset("fiber", data=fiber, chunks=(500,))
    for ds in ("/plate", "/fiber"):
        build_index(p, ds, BuildConfig(kind="minmax", sub_blocks=1, progress=False))
    with apply(p, "/plate >= 112 & /plate < 133 & /fiber < 10") as r:  # rows 1200..3299: chunks 2..6
        d = r.datasets[0]
        want = np.flatnonzero((plate >= 112) & (plate < 133) & (fiber < 10))
        np.testing.assert_array_equal(np.sort(np.concatenate(list(d.flat()))), want)
        sel = d.selection
        assert sel.explain()["candidate_blocks"] == 5
        # plate: chunks 2 and 6 only; fiber: all five, chunks adjacent in the file in one preadv (3..5 are
        # one group: the zone maps decide plate alike on them)
        assert 2 <= sel.readers["/fiber"].reads <= 5 and sel.readers["/plate"].reads == 2, \
            (sel.readers["/fiber"].reads, sel.readers["/plate"].reads)
        assert sel.elements_read == 2500


def test_a_rewritten_file_never_gets_the_cached_chunk_addresses(tmp_path: Path) -> None:
    """Chunk addresses (and the pread check) are cached per file version: device, inode, size, mtime and
    ctime. A file rewritten in place with other data at other addresses, even with its size kept and its
    mtime set back, is queried from its new chunks (the old addresses would read the old bytes' places)."""
    from h5flow.query.index import _CHUNK_MAPS

    p = tmp_path / "r.h5"
    rng = np.random.default_rng(1)
    a = rng.normal(size=40000)
    b = rng.normal(size=40000) + 0.5
    with h5py.File(p, "w") as h:
        h.create_dataset("pad", data=np.zeros(5000))  # before /x's chunks in the first version only
        h.create_dataset("x", data=a, chunks=(4096,))
        h.create_dataset("y", data=np.zeros(3000))
    build_index(p, "/x", BuildConfig(kind="minmax", progress=False))
    with apply(p, "/x > 1.5") as r:
        got = np.sort(np.concatenate(list(r.datasets[0].flat())))
    np.testing.assert_array_equal(got, np.flatnonzero(a > 1.5))
    assert any(k[0] == "/x" for k in _CHUNK_MAPS)
    st = os.stat(p)
    with h5py.File(p, "w") as h:  # same inode (truncated in place), other layout, other data, same size
        h.create_dataset("y", data=np.zeros(3000))
        h.create_dataset("x", data=b, chunks=(4096,))
        h.create_dataset("pad", data=np.zeros(5000))
    assert os.stat(p).st_size == st.st_size and os.stat(p).st_ino == st.st_ino
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: only ctime tells the versions apart
    build_index(p, "/x", BuildConfig(kind="minmax", progress=False))
    for opts in (ApplyOptions(), ApplyOptions(use_index=False)):
        with apply(p, "/x > 1.5", opts) as r:
            got = np.sort(np.concatenate(list(r.datasets[0].flat())))
        np.testing.assert_array_equal(got, np.flatnonzero(b > 1.5))


def test_parsed_queries_are_cached_and_errors_are_not() -> None:
    assert parse("/a > 1 & /b < 2") is parse("/a > 1 & /b < 2")
    for _ in range(2):
        with pytest.raises(QuerySyntaxError):
            parse("/a >")


def test_default_zones_are_about_1024_elements_and_answers_stay_exact(tmp_path: Path) -> None:
    """Default zone maps: sub-slabs of ~1024 elements (capped at a chunk's rows); --sub-blocks up to 65536;
    NaN, empty and full results equal numpy's; the index stays small."""
    from h5flow.query.index import MAX_SUB_BLOCKS

    rng = np.random.default_rng(4)
    x = np.sort(rng.normal(size=300000)).astype("f4")  # ordered: zone maps decide most zones
    x[rng.random(x.size) < 0.01] = np.nan
    x[100000:101500] = np.nan  # whole zones of NaN
    f3 = np.add.outer(np.arange(40.0), np.zeros((64, 64)))  # 3-D: zones are rows of a chunk
    p = tmp_path / "z.h5"
    with h5py.File(p, "w") as h:
        h.create_dataset("x", data=x, chunks=(65536,))
        h.create_dataset("f3", data=f3, chunks=(32, 64, 64))
    rx = build_index(p, "/x", BuildConfig(kind="minmax", progress=False))
    assert rx.index_bytes <= 0.3 * rx.data_bytes
    with apply(p, "/x > 1") as r:
        plan = r.datasets[0].selection.explain()
        assert plan["sub_blocks"] == 64, plan  # 65536 / 1024
    build_index(p, "/f3", BuildConfig(kind="minmax", progress=False))
    with apply(p, "/f3 >= 20.5") as r:
        d = r.datasets[0]
        assert d.selection.sub == 32 and d.count == int((f3 >= 20.5).sum())  # 128 capped at the chunk's 32 rows
        assert d.selection.explain()["elements_read"] == 0  # every row decided by its zone map
    for text in ("/x > 1", "/x != nan", "/x == nan", "/x < -100", "/x > -100", "/x != 0.5", "-0.1 <= /x < 0.1"):
        qq = parse(text)
        with apply(p, qq) as r:
            d = r.datasets[0]
            got = np.sort(np.concatenate(list(d.flat()) or [np.zeros(0, np.int64)]))
            with np.errstate(invalid="ignore"):
                want = np.flatnonzero(_np_eval(qq, {"/x": x}))
            np.testing.assert_array_equal(got, want, err_msg=text)
            assert d.count == want.size
    build_index(p, "/x", BuildConfig(kind="minmax", sub_blocks=MAX_SUB_BLOCKS, progress=False))  # capped: 65536 rows
    with apply(p, "/x > 1") as r:
        assert r.datasets[0].selection.sub == 65536 and r.datasets[0].count == int(np.sum(x > 1))
    with pytest.raises(ValueError, match="sub_blocks must be between 1"):
        BuildConfig(sub_blocks=MAX_SUB_BLOCKS + 1)


def _np_eval(q: Query, arrays: dict[str, np.ndarray]) -> np.ndarray:
    if isinstance(q, DataCond):
        return NP_OPS[q.op](arrays[q.path], q.value)
    assert isinstance(q, (And, Or))
    a, b = _np_eval(q.left, arrays), _np_eval(q.right, arrays)
    return a & b if isinstance(q, And) else a | b


def test_conditions_with_zone_maps_of_different_sizes_combine_exactly(tmp_path: Path) -> None:
    """Two aligned columns indexed with different zone sizes (and one not indexed): the coarser zones are
    carried to the finer ones; answers equal numpy's, and an AND with a condition no zone can match reads
    nothing."""
    n = 200000
    a = np.arange(n) // 1000  # ordered
    b = np.tile(np.arange(1000), n // 1000)  # periodic
    c = (np.arange(n) * 7919 % 1000).astype("f8")
    p = tmp_path / "m.h5"
    with h5py.File(p, "w") as h:
        for name, v in (("a", a), ("b", b), ("c", c)):
            h.create_dataset(name, data=v, chunks=(50000,))
    build_index(p, "/a", BuildConfig(kind="minmax", sub_blocks=7, progress=False))
    build_index(p, "/b", BuildConfig(kind="minmax", sub_blocks=500, progress=False))
    arrays = {"/a": a, "/b": b, "/c": c}
    for text in ("/a >= 37 & /a < 61 & /b < 100", "/a == 150 | /b >= 990", "(/a < 3 | /a > 196) & /c > 900",
                 "/b < 100 & /c != 5 | /a == 100", "/a > 500 & /b < 10"):
        qq = parse(text)
        with apply(p, qq) as r:
            d = r.datasets[0]
            got = np.sort(np.concatenate(list(d.flat()) or [np.zeros(0, np.int64)]))
            np.testing.assert_array_equal(got, np.flatnonzero(_np_eval(qq, arrays)), err_msg=text)
            if text == "/a > 500 & /b < 10":
                assert d.selection.explain()["elements_read"] == 0
