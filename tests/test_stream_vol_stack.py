"""The hdf5 transport's ``vol_stack``: each rank's step file written through h5flow_async and/or h5flow_cache
(docs/STREAM.md "Connector stack"). Consumers get the data of the plain run; a step is published only once
its file is on storage; a failure in a connector's background fails the producer and publishes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_stream_async_write import _block, _config, _read_steps

STACKS = ["async", "cache", "cache,async", "async,cache"]
ROOT = Path(__file__).resolve().parents[1]


def _stack_keywords(stack: str, cache_dir: Path) -> dict[str, object]:
    return {"vol_stack": stack, **({"cache_path": str(cache_dir)} if "cache" in stack else {})}


def test_settings_from_xml_and_keywords_alike(tmp_path: Path) -> None:
    """The same settings from XML attributes and from keywords; bad values and combinations name the setting."""
    from h5flow.config import TransportConfig
    from h5flow.xmlconfig import load
    from h5flow.xmlnode import ConfigError

    def xml(attrs: str) -> Path:
        path = tmp_path / "c.xml"
        path.write_text(f'<sensei>\n  <transport type="hdf5" filename="{tmp_path}/s" {attrs}/>\n</sensei>\n')
        return path

    given = dict(vol_stack="cache,async", async_max_mem="64MiB", cache_path=str(tmp_path), cache_capacity="1GiB")
    from_xml = load(xml(" ".join(f'{k}="{v}"' for k, v in given.items()))).transport().settings
    from_keywords = TransportConfig.of(filename=f"{tmp_path}/s", **given).settings
    assert from_xml == from_keywords
    assert (from_xml.vol_stack, from_xml.async_max_mem, from_xml.cache_capacity) == ("cache,async", 64 << 20, 1 << 30)
    from h5flow.connectors.stack import info_string

    assert info_string(from_xml.connector_layers()) == (
        f"path={tmp_path};capacity={1 << 30};under_vol=312;under_info={{max_mem={64 << 20};under_vol=0;"
        "under_info={}}")
    for attrs, words in (('vol_stack="lustre"', ["vol_stack", "accepted: none, async, cache"]),
                         ('vol_stack="async" async_max_mem="10"', ["async_max_mem", "at least 1MiB"]),
                         ('vol_stack="cache" cache_path="/a;b"', ["cache_path", "without ';'"]),
                         ('vol_stack="async" layout="n-1"', ["vol_stack", 'layout="n-1"']),
                         ('cache_capacity="1GiB"', ["cache_capacity", 'vol_stack="none" does not stack it'])):
        with pytest.raises(ConfigError) as xml_error:
            load(xml(attrs))
        keywords = dict(a.split("=", 1) for a in attrs.replace('"', "").split())
        with pytest.raises(ValueError) as keyword_error:
            TransportConfig.of(filename=f"{tmp_path}/s", **keywords)
        for text in (str(xml_error.value), str(keyword_error.value)):
            assert all(w in text for w in words), (attrs, text)
        assert "c.xml:2" in str(xml_error.value)
    # settings changed after they were checked are refused by the writer
    from mpi4py import MPI

    from h5flow.transports import open_writer
    from h5flow.transports.base import TransportError

    cfg = TransportConfig.of(filename=f"{tmp_path}/s", vol_stack="async")
    cfg.settings.layout = "log"
    with pytest.raises(TransportError, match="vol_stack='async' needs layout 'n-n', not 'log'"):
        open_writer(MPI.COMM_SELF, cfg)
    # a cache directory that is not there is said at the open, not at the first step's file create
    cfg = TransportConfig.of(filename=f"{tmp_path}/s", vol_stack="cache", cache_path=f"{tmp_path}/none")
    with pytest.raises(TransportError, match=f"rank 0: cache_path='{tmp_path}/none' is not a writable directory"):
        open_writer(MPI.COMM_SELF, cfg)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_gives_consumers_the_plain_runs_data(tmp_path: Path, stack: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's file goes through the named top connector; consumers read (raw reads, from the extents
    the producer recorded after the queue drained) exactly what the plain run gives them."""
    from mpi4py import MPI

    from h5flow import _hdf5lib
    from h5flow.transports import open_writer
    from h5flow.transports.hdf5 import _h5

    served: list[str] = []
    create = _h5.create_rank_file

    def recording(path: Path, fapl: object = None) -> object:
        fid = create(path, fapl)
        served.append(_hdf5lib.connector_name(fid.id))
        return fid

    monkeypatch.setattr(_h5, "create_rank_file", recording)
    (tmp_path / "cache-dir").mkdir()
    results = {}
    for name, keywords in (("plain", {}), (stack, _stack_keywords(stack, tmp_path / "cache-dir"))):
        (tmp_path / name).mkdir()
        cfg = _config(tmp_path / name, "n-n", **keywords)
        field = np.zeros((3, 4, 6))
        served.clear()
        with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
            assert w._async
            for s in range(3):
                field[...] = np.sin(np.arange(field.size) * (s + 1.0)).reshape(field.shape)
                w.begin_step(s, float(s))
                w.put("mesh", _block(s, field))
                assert w.end_step().published
                field[...] = np.nan  # the next step begins in place: the connector must have its own copy
        top = "native" if name == "plain" else f"h5flow_{stack.split(',')[0]}"
        assert served == [top] * 3
        results[name] = [a.tobytes() for a in _read_steps(cfg, 3)]
        if name != "plain":
            extents = (Path(cfg.filename + ".h5flow") / "step-000000002" / "rank-00000.extents.json").read_text()
            assert '"datasets":{"mesh/cell/data":[' in extents  # raw reads have the data's offset
    assert results[stack] == results["plain"]
    assert not list((tmp_path / "cache-dir").iterdir())  # the cache's directories are gone after each close


def _defer_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connectors write nothing below until the file is waited for (async ``defer=1``, cache
    ``background=off``): a step published before its file was flushed would hold no data."""
    from h5flow.connectors import stack

    layer_info = stack._own
    extra = {"async": "defer=1;", "cache": "background=off;"}
    monkeypatch.setattr(stack, "_own", lambda layer: layer_info(layer) + extra[layer.kind])


@pytest.mark.parametrize("stack,async_write", [("async", True), ("cache,async", True), ("cache,async", False)])
def test_a_step_is_published_only_with_its_data_on_storage(tmp_path: Path, stack: str, async_write: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """At the moment of publication (the rename of step-N.tmp), the rank file is closed and a native read of
    it, outside the connectors, already returns every value of the step; with the write thread and without."""
    from mpi4py import MPI

    from h5flow.connectors.logvol import open_native
    from h5flow.transports import open_writer
    from h5flow.transports.hdf5 import writer as writer_module

    _defer_everything(monkeypatch)
    checked: list[int] = []
    expected: dict[int, np.ndarray] = {}
    rename = os.replace

    def publish(src: object, dst: object) -> None:
        step_dir = Path(str(src))
        if Path(str(dst)).name.startswith("step-") and step_dir.is_dir():  # a step's publication
            with open_native(step_dir / "rank-00000.h5", "r") as f:
                step = int(f.attrs["step"])
                np.testing.assert_array_equal(f["mesh/cell/data"][:, 0], expected[step].ravel())
            checked.append(step)
        rename(src, dst)

    monkeypatch.setattr(writer_module.os, "replace", publish)  # os.replace everywhere: only steps are checked
    (tmp_path / "cache").mkdir()
    cfg = _config(tmp_path, "n-n", async_write=async_write, **_stack_keywords(stack, tmp_path / "cache"))
    field = np.zeros((3, 4, 6))
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        assert w._async is async_write
        for s in range(3):
            field[...] = s + np.arange(field.size).reshape(field.shape) / 7.0
            expected[s] = field.copy()
            w.begin_step(s, float(s))
            w.put("mesh", _block(s, field))
            w.end_step()
    assert checked == [0, 1, 2]


_FAILING_PRODUCER = """
import resource, signal, sys
import numpy as np
from mpi4py import MPI
sys.path.insert(0, {tests!r})
from test_stream_async_write import _config
from h5flow.model import ImageBlock
from h5flow.transports import open_writer
from h5flow.transports.hdf5 import staging
from pathlib import Path


def big_block():  # 2 MiB of rows
    blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 63, 0, 63, 0, 63), 0)
    blk.arrays("cell")["data"] = np.ones((64, 64, 64))
    return blk


cfg = _config(Path({tmp!r}), "n-n", **{keywords!r})
# files may not grow past 256 KiB: the step's 2 MiB of rows fail when the connector writes
# them below, in its background (EFBIG, SIGXFSZ ignored); the stream's small files still fit. Admission
# does not see the limit (as with a quota statvfs does not show), so the step gets as far as its write.
staging._file_size_limit = lambda: 1 << 62
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
        for s in range(3):
            w.begin_step(s, float(s))
            w.put("mesh", big_block())
            w.end_step()
except Exception as e:
    print("PRODUCER FAILED:", e)
    sys.exit(3)
print("PRODUCER SUCCEEDED")
"""


@pytest.mark.parametrize("stack", ["async", "cache,async"])
def test_a_failure_below_fails_the_producer_and_publishes_nothing(tmp_path: Path, stack: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from h5flow.transports.hdf5.staging import read_index

    (tmp_path / "cache").mkdir()
    keywords = _stack_keywords(stack, tmp_path / "cache")
    code = _FAILING_PRODUCER.format(tests=str(ROOT / "tests"), tmp=str(tmp_path), keywords=keywords)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 3, out
    assert "PRODUCER FAILED: " in out and "step 0 was not published" in out and "rank 0: writing" in out, out
    # the rows went to the connector and failed in its background: the file's flush found the failure, or, under
    # the cache, the next write did (it reports its migration's failure at once)
    assert "H5Fflush failed" in out or "the write below failed" in out, out
    staging = Path(str(tmp_path / "s") + ".h5flow")
    assert not [e for e in read_index(staging / "index") if e.kind == "P"]
    assert not list(staging.glob("step-*")), list(staging.iterdir())


@pytest.mark.mpi(n=3)
def test_2_producers_through_cache_and_async_to_1_consumer(comm, mpi_tmp_path: Path) -> None:  # noqa: ANN001
    from test_stream_mn import _run_mn

    cache = mpi_tmp_path / "cache"
    if comm.rank == 0:
        cache.mkdir()
    comm.Barrier()
    _run_mn(comm, mpi_tmp_path, 2, "block", vol_stack="cache,async", cache_path=str(cache), layout="n-n")


@pytest.mark.mpi(n=2)
def test_a_failure_below_on_one_rank_fails_every_rank(comm, mpi_tmp_path: Path) -> None:  # noqa: ANN001
    """Rank 1's connector fails to write its rows in the background (files may not grow past 256 KiB there):
    both ranks' producers fail, each naming rank 1, and no step is published."""
    import resource
    import signal

    from h5flow.model import ImageBlock
    from h5flow.testing.pytest_mpi import mpi_assert
    from h5flow.transports import open_writer
    from h5flow.transports.base import TransportError
    from h5flow.transports.hdf5.staging import read_index

    cfg = _config(mpi_tmp_path, "n-n", vol_stack="async")
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    error = ""
    try:
        with open_writer(comm, cfg) as w:
            if comm.rank == 1:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, limits[1]))
            for s in range(3):
                blk = ImageBlock(comm.rank, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0),
                                 (64 * comm.rank, 64 * comm.rank + 63, 0, 63, 0, 63), 0)
                blk.arrays("cell")["data"] = np.full((64, 64, 64), float(s))  # 2 MiB of rows per rank
                w.begin_step(s, float(s))
                w.put("mesh", blk)
                w.end_step()
    except TransportError as e:
        error = str(e)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    mpi_assert(comm, "rank 1: writing" in error and "step 0 was not published" in error
               and "H5Fflush failed" in error, error)  # found by the flush: the connector's background write
    index = read_index(Path(cfg.filename + ".h5flow") / "index")
    mpi_assert(comm, not [e for e in index if e.kind == "P"], f"published: {index}")
