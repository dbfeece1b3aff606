"""The advise rules on hand-built trace DataFrames (columns of docs/TRACE.md): each rule finds its case and
stays silent just below its threshold. The real-trace validation is in test_advise_programs.py."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from h5flow.advise import RULE_IDS, TraceFormatError, advise

MPIO = json.dumps({"libver": ["v110", "latest"], "alignment": [65536, 1048576], "meta_block_size": 2048,
                   "driver": "mpio", "mpi_hints": {}})
SEC2 = json.dumps({"libver": ["v110", "latest"], "alignment": [1, 1], "meta_block_size": 2048, "driver": "sec2"})


class Trace:
    """Rows appended call by call with the trace's columns and defaults."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.t = 0.0

    def add(self, op: str, *, rank: int = 0, file: str = "a.h5", obj: str = "", dur: float = 1e-4, **kw) -> "Trace":
        row = dict(rank=rank, op=op, file=file, obj=obj, t0=self.t, t1=self.t + dur, dur=dur, bytes=0, npoints=0,
                   nblocks=0, ndims=0, shape="", mem_type="", file_type="", conv=False, xfer="", io_actual="",
                   no_coll_cause="", props="")
        row.update(kw)
        self.rows.append(row)
        self.t += dur
        return self

    def open(self, ranks=(0,), file="a.h5", props=SEC2, op="file_create") -> "Trace":
        for r in ranks:
            self.add(op, rank=r, file=file, props=props)
        return self

    def create(self, obj: str, shape: str, ftype: str = "f64le", ranks=(0,), file="a.h5", dur=1e-4, **p) -> "Trace":
        base = {"layout": "contiguous", "fill_time": "ifset", "alloc_time": "late", "fill_value_set": "default",
                "filters": []}
        base.update(p)
        for r in ranks:
            self.add("dataset_create", rank=r, file=file, obj=obj, shape=shape, file_type=ftype, dur=dur,
                     props=json.dumps(base))
        return self

    def io(self, obj: str, nbytes: int, *, op="dataset_write", rank=0, file="a.h5", mem="f64le", ftype="f64le",
           xfer="independent", n=1, dur=1e-3, **kw) -> "Trace":
        for _ in range(n):
            self.add(op, rank=rank, file=file, obj=obj, bytes=nbytes, npoints=nbytes // 8, nblocks=1, mem_type=mem,
                     file_type=ftype, conv=mem != ftype, xfer=xfer, dur=dur, **kw)
        return self

    def df(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def rules_found(t: Trace, **config) -> list[str]:
    return sorted({f.rule for f in advise(t.df(), config or None)})


def warp(conv_breaks: bool) -> Trace:
    t = Trace().open((0, 1), props=MPIO).create("/field", "128x128x128", "f32le", ranks=(0, 1))
    for r in (0, 1):
        t.io("/field", 8 << 20, rank=r, mem="f64le", ftype="f32le", xfer="collective",
             io_actual="none" if conv_breaks else "contiguous-collective",
             no_coll_cause="datatype-conversion,no-selection-io" if conv_breaks else "")  # as HDF5 1.14 reports it
    return t


def test_dtype_conversion_breaking_collective_is_high_and_only_that_rule() -> None:
    found = advise(warp(True).df())
    assert [f.rule for f in found] == ["dtype-conversion"]
    assert found[0].severity == "HIGH" and found[0].evidence.detail["collective_broken"] == 2
    assert "f64le" in found[0].message and "f32le" in found[0].message
    assert [f.severity for f in advise(warp(False).df())] == ["WARN"]


def test_collective_fallback_names_hdf5s_cause() -> None:
    t = Trace().open((0, 1), props=MPIO).create("/x", "1000", ranks=(0, 1))
    for r in (0, 1):
        t.io("/x", 4000, rank=r, xfer="collective", io_actual="none", no_coll_cause="data-transforms")
    (f,) = advise(t.df())
    assert f.rule == "collective-fallback" and "data-transforms" in f.message and "H5Pset_data_transform" in f.message
    t2 = Trace().open((0, 1), props=MPIO).create("/x", "1000", ranks=(0, 1))
    t2.io("/x", 4000, xfer="collective", io_actual="contiguous-collective")
    assert rules_found(t2) == []
    t3 = Trace().open((0, 1), props=MPIO).create("/x", "1000", ranks=(0, 1))
    t3.io("/x", 4000, xfer="collective", io_actual="none", no_coll_cause="no-selection-io")
    (f,) = advise(t3.df())
    assert f.rule == "collective-fallback" and "H5Pset_selection_io" in f.message


def test_fill_time_on_large_parallel_dataset() -> None:
    def case(fill_time: str, rows: int) -> Trace:
        return (Trace().open((0, 1), props=MPIO)
                .create("/data", f"{rows}x437500", "f32le", ranks=(0, 1), dur=0.4, layout="chunked",
                        chunk=[60, 15625], fill_time=fill_time))
    (f,) = advise(case("ifset", 600).df())
    assert f.rule == "fill-time" and f.evidence.detail["dataset_bytes"] == 600 * 437500 * 4
    assert rules_found(case("never", 600)) == []
    assert rules_found(case("ifset", 6)) == []  # 10 MiB: below the threshold


def test_libver_earliest_with_many_objects() -> None:
    def case(low: str, n: int) -> Trace:
        t = Trace().open(props=json.dumps({"libver": [low, "latest"], "driver": "sec2"}))
        for i in range(n):
            t.add("group_create", obj=f"/g{i}")
        return t
    assert rules_found(case("earliest", 1000)) == ["libver-earliest"]
    assert rules_found(case("earliest", 999)) == []
    assert rules_found(case("v110", 5000)) == []


def test_alignment_suggests_numbers_that_fit() -> None:
    def case(props: str) -> Trace:
        t = Trace().open((0, 1), props=props).create("/v", "4194304", ranks=(0, 1))
        for r in (0, 1):
            t.io("/v", 4 << 20, rank=r, xfer="collective", n=2, io_actual="contiguous-collective")
        return t
    unaligned = json.dumps({"libver": ["v110", "latest"], "alignment": [1, 1], "meta_block_size": 2048,
                            "driver": "mpio"})
    (f,) = advise(case(unaligned).df())
    assert f.rule == "alignment"
    assert f.evidence.detail["suggested_alignment"] == [65536, 4 << 20]
    assert "alignment_interval=4194304" in f.fix_h5py and "H5Pset_alignment(fapl, 65536, 4194304)" in f.fix_c
    assert rules_found(case(MPIO)) == []


def test_small_independent_writes_to_a_shared_file() -> None:
    t = Trace().open((0, 1), props=MPIO).create("/p", "100000", ranks=(0, 1))
    for r in (0, 1):
        t.io("/p", 800, rank=r, n=32)
    assert rules_found(t) == ["small-independent-writes"]
    assert rules_found(t, **{"small-independent-writes": {"min_calls": 65}}) == []


def test_tiny_and_spanning_chunks() -> None:
    t = Trace().open().create("/c", "1000000", layout="chunked", chunk=[64]).io("/c", 8 << 20)
    (f,) = advise(t.df())
    assert f.rule == "chunk-shape" and "tiny" in f.message and f.evidence.detail["suggested_chunk"] == [131072]
    t = Trace().open().create("/c", "4096x4096", layout="chunked", chunk=[16, 16]).io("/c", 1 << 20, n=8)
    assert [f.rule for f in advise(t.df())] == ["chunk-shape"]
    t = Trace().open().create("/c", "4096x4096", layout="chunked", chunk=[256, 256]).io("/c", 1 << 20, n=8)
    assert rules_found(t) == []


def test_chunk_cache_thrashing_on_filtered_chunks() -> None:
    def case(filters: list[str], chunk: list[int], dur: float = 5e-3) -> Trace:
        return (Trace().open().create("/z", "2048x1024", "f32le", layout="chunked", chunk=chunk, filters=filters)
                .io("/z", 4096, op="dataset_read", mem="f32le", ftype="f32le", n=16, dur=dur))
    assert rules_found(case(["deflate"], [512, 1024])) == ["chunk-cache"]
    assert rules_found(case(["deflate"], [512, 1024], dur=5e-5)) == []  # answered from a cache set at open
    assert rules_found(case([], [512, 1024])) == []
    assert rules_found(case(["deflate"], [128, 1024])) == []


def test_open_close_loop_and_file_reopen_are_told_apart() -> None:
    t = Trace().open().create("/d", "1000")
    for i in range(60):
        t.add("object_open", obj="/d").io("/d", 8).add("dataset_close", obj="/d")
    assert rules_found(t) == ["open-close-loop"]
    t = Trace()
    for i in range(12):
        t.open(op="file_open").add("object_open", obj="/d").io("/d", 8).add("file_close")
    assert rules_found(t) == ["file-reopen"]


def test_rank_imbalance() -> None:
    t = Trace().open((0, 1), props=MPIO).create("/d", "1000", ranks=(0, 1))
    t.io("/d", 1 << 20, rank=0, dur=0.9).io("/d", 1 << 16, rank=1, dur=0.05)
    (f,) = advise(t.df())
    assert f.rule == "rank-imbalance" and "rank 0" in f.message
    t = Trace().open((0, 1), props=MPIO).create("/d", "1000", ranks=(0, 1))
    t.io("/d", 1 << 20, rank=0, dur=0.06).io("/d", 1 << 16, rank=1, dur=0.01)
    assert rules_found(t) == []  # ratio reached, but 0.025 s over the mean is below min_seconds
    t = Trace()  # one file per rank: compared over the ranks' own files
    for r, dur in ((0, 0.9), (1, 0.05)):
        t.open((r,), file=f"out-{r}.h5").create("/d", "1000", ranks=(r,), file=f"out-{r}.h5")
        t.io("/d", 1 << 20, rank=r, dur=dur, file=f"out-{r}.h5")
    (f,) = advise(t.df())
    assert f.rule == "rank-imbalance" and f.file == "(one file per rank)" and "its own files" in f.message


def test_mpi_hints_against_collective_buffering() -> None:
    hinted = json.dumps({"libver": ["v110", "latest"], "alignment": [65536, 1048576], "driver": "mpio",
                         "mpi_hints": {"romio_cb_write": "disable", "romio_ds_write": "enable"}})
    t = Trace().open((0, 1), props=hinted).create("/d", "1000", ranks=(0, 1))
    for r in (0, 1):
        t.io("/d", 4000, rank=r, xfer="collective", io_actual="contiguous-collective")
    (f,) = advise(t.df())
    assert f.rule == "mpi-hints" and "romio_cb_write=disable" in f.message
    assert 'info.Set("romio_cb_write", "enable")' in f.fix_h5py and 'info.Set("romio_ds_write", "disable")' in f.fix_h5py


def test_findings_ranked_by_time_and_config_checked() -> None:
    t = warp(True)
    t.open(file="b.h5", props=json.dumps({"libver": ["earliest", "latest"], "driver": "sec2"}))
    for i in range(1000):
        t.add("group_create", file="b.h5", obj=f"/g{i}", dur=0.01)
    assert [f.rule for f in advise(t.df())] == ["libver-earliest", "dtype-conversion"]
    with pytest.raises(ValueError, match="no setting"):
        advise(t.df(), {"libver-earliest": {"objects": 5}})
    with pytest.raises(ValueError, match="wrong kind.*min_objects=1000"):
        advise(t.df(), {"libver-earliest": {"min_objects": "many"}})
    assert [f.rule for f in advise(t.df(), {"libver-earliest": {"min_objects": "1001"}})] == ["dtype-conversion"]
    with pytest.raises(ValueError, match="unknown rule"):
        advise(t.df(), only=["nope"])
    with pytest.raises(TraceFormatError, match="h5flow.trace.load"):
        advise(t.df().drop(columns=["conv"]))
    assert len(RULE_IDS) == 12
