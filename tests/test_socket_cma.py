"""The socket transport's same-node data path (Cross Memory Attach, ``transports/socket/cma.py``).

A consumer on the producer's node copies the blocks out of the producer's memory. It must get exactly the
published bytes, from another process as from its own; and never bytes that were not the step's: a step the
producer lets go of while it is being copied (its stamp zeroed, its memory reused) must give the data over
the socket or an error, never the reused bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Cross Memory Attach is Linux only")


def _config(tmp_path: Path, **settings: object) -> object:
    from h5flow.config import TransportConfig

    return TransportConfig.of(type="socket", filename=str(tmp_path / "s"), heartbeat=2.0, **settings)


def _publish(w: object, s: int) -> np.ndarray:
    from h5flow.model import ImageBlock

    field = np.arange(3 * 4 * 6, dtype=np.float64).reshape(3, 4, 6) + 1000.0 * s
    blk = ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 5, 0, 3, 0, 2), 0)
    blk.arrays("cell")["data"] = field
    w.begin_step(s, float(s))  # type: ignore[attr-defined]
    w.put("mesh", blk)  # type: ignore[attr-defined]
    assert w.end_step().published  # type: ignore[attr-defined]
    return field.reshape(-1, 1).copy()


def test_a_lease_reads_another_process_exactly_and_refuses_what_does_not_match() -> None:
    from h5flow.transports.socket import cma

    src = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
    stamp = np.array([12345], dtype=np.int64)
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, numpy as np
        a = np.arange(1 << 18, dtype=np.float64); s = np.array([12345], dtype=np.int64)
        print(a.ctypes.data, s.ctypes.data, flush=True); sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert cma.offer() == "", cma.offer()
        addr, stamp_addr = map(int, child.stdout.readline().split())  # type: ignore[union-attr]
        lease = cma.Lease(child.pid, stamp_addr, 12345, [(addr, src.nbytes), (addr + 8, 16)])
        got = cma.read(lease, [src.nbytes, 16])
        assert not isinstance(got, str), got
        assert np.array_equal(got[0].view(np.float64), src) and got[1].view(np.float64).tolist() == [1.0, 2.0]
        assert not got[0].flags.writeable
        # the stamp read back is not the nonce: the step is no longer held
        assert "no longer held" in cma.read(cma.Lease(child.pid, stamp_addr, 999, lease.regions), [src.nbytes, 16])
        # sizes other than the metadata's are never read
        assert "other sizes" in cma.read(lease, [src.nbytes, 8])
        # an address the process does not map
        assert "process_vm_readv" in cma.read(cma.Lease(child.pid, stamp_addr, 12345, [(8, 16)]), [16])
    finally:
        child.kill()
        child.communicate()
    assert "process_vm_readv" in cma.read(cma.Lease(child.pid, int(stamp.ctypes.data), 12345, [(addr, 16)]), [16])
    with pytest.raises(ValueError, match="nonce is 0"):
        cma.Lease.from_body({"pid": 1, "stamp": 8, "nonce": 0, "regions": []})
    with pytest.raises(ValueError, match="regions"):
        cma.Lease.from_body({"pid": 1, "stamp": 8, "nonce": 3, "regions": [[1, 2, 3]]})
    with pytest.raises(ValueError, match="address"):
        cma.Lease.from_body({"pid": 1, "stamp": 8, "nonce": 3, "regions": [[-1, 2]]})


def test_a_dropped_step_is_stamped_zero_and_its_arrays_outlive_one_more_collection() -> None:
    from h5flow.transports.socket.server import Group, Held, Store

    st = Store(0, 1.0)
    st.groups["g"] = Group(-1, 0.0)
    st.ever = True
    first = Held(0, 0, 0.0, 8, {("mesh", 0): {"cell/data": np.ones(1)}})
    assert first.stamp[0] != 0
    st.add(first)
    st.add(Held(1, 1, 0.0, 8, {("mesh", 0): {"cell/data": np.ones(1)}}))
    st.groups["g"].released_seq = 0
    st.collect()
    assert 0 not in st.held and first.stamp[0] == 0 and st.retired == [first]
    st.collect()  # nothing new dropped: still kept
    assert st.retired == [first]
    st.groups["g"].released_seq = 1
    st.collect()
    assert first not in st.retired and len(st.retired) == 1


def test_a_consumer_in_another_process_copies_the_steps_out_of_the_producer(tmp_path: Path) -> None:
    """The real case: producer and consumer are two processes on one node; every step's bytes arrive and the
    consumer says they came by Cross Memory Attach (and, with cma="false", over the socket)."""
    from mpi4py import MPI

    from h5flow.transports import open_writer

    for use in (True, False):
        cfg = _config(tmp_path / str(use), cma=use)
        (tmp_path / str(use)).mkdir()
        consumer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import json, numpy as np
            from mpi4py import MPI
            from h5flow.config import TransportConfig
            from h5flow.transports import StepStatus, open_reader
            cfg = TransportConfig.of(type="socket", filename={cfg.filename!r}, heartbeat=2.0, cma={use})
            r = open_reader(MPI.COMM_SELF.Dup(), cfg)
            sums = []
            while True:
                res = r.begin_step(20.0)
                if res.status is not StepStatus.OK:
                    break
                (blk,) = res.step.blocks("mesh", ["data"], "cell")
                sums.append(np.asarray(blk.arrays("cell")["data"]).tolist())
                r.release()
            print(json.dumps({{"steps": sums, "cma": sorted(r._fetcher._cma_worked)}}))
            r.close()
            """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with open_writer(MPI.COMM_SELF.Dup(), cfg) as w:
            assert w.cma_off == ("" if use else 'cma="false"')
            expected = [_publish(w, s) for s in range(4)]
        out, err = consumer.communicate(timeout=60)
        assert consumer.returncode == 0, err
        got = json.loads(out.strip().splitlines()[-1])
        assert [np.asarray(s).reshape(-1, 1).tolist() for s in got["steps"]] == [e.tolist() for e in expected]
        assert got["cma"] == ([0] if use else []), (got["cma"], err)


@pytest.fixture
def pair(tmp_path: Path):  # noqa: ANN201
    """A producer and a consumer of one socket stream in this process (its own memory is read by CMA)."""
    from mpi4py import MPI

    from h5flow.transports import open_reader, open_writer

    cfg = _config(tmp_path)
    w = open_writer(MPI.COMM_SELF.Dup(), cfg)
    r = open_reader(MPI.COMM_SELF.Dup(), cfg)
    yield w, r
    r.close()
    w.abort("the test ends here")


def _read_one(r: object) -> object:
    from h5flow.transports import StepStatus

    res = r.begin_step(10.0)  # type: ignore[attr-defined]
    assert res.status is StepStatus.OK, res.reason
    return res.step


def test_memory_reused_while_being_copied_never_reaches_the_consumer(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the producer's answer and the copy, the step is let go of and its memory overwritten: the
    consumer must not return the overwritten bytes. Here the step is still held by the socket path (the
    stamp alone was zeroed), so the consumer gets the true data over the socket; when the step is gone
    for good, it gets an error naming it."""
    from h5flow.transports import TransportError
    from h5flow.transports.socket import cma, reader

    w, r = pair
    expected = _publish(w, 0)
    real = cma.read
    held = w.store.held[0]

    def reuse_then_read(lease: cma.Lease, *args: object) -> object:
        saved = held.arrays[("mesh", 0)]["cell/data"].copy()
        held.stamp[0] = 0
        held.arrays[("mesh", 0)]["cell/data"][...] = -7.0  # what a new step would write there
        got = real(lease, *args)
        held.arrays[("mesh", 0)]["cell/data"][...] = saved  # (the socket path then serves the true bytes)
        return got

    monkeypatch.setattr(reader.cma, "read", reuse_then_read)
    step = _read_one(r)
    (blk,) = step.blocks("mesh", ["data"], "cell")
    assert np.array_equal(np.asarray(blk.arrays("cell")["data"]).reshape(-1, 1), expected)
    assert r._fetcher._cma_broken == {0}  # it never worked with this producer: the socket from now on
    r.release()

    # the step is dropped for good while being copied: an error, not data
    monkeypatch.setattr(reader.cma, "read", real)
    r._fetcher._cma_broken.clear()
    _publish(w, 1)
    step = _read_one(r)

    def dropped(lease: cma.Lease, *args: object) -> object:
        with w.store.cond:
            gone = w.store.held.pop(step.seq)
            gone.stamp[0] = 0
            gone.arrays[("mesh", 0)]["cell/data"][...] = -7.0
        return real(lease, *args)

    monkeypatch.setattr(reader.cma, "read", dropped)
    with pytest.raises(TransportError, match="no longer holds sequence 1"):
        step.blocks("mesh", ["data"], "cell")


def test_cma_works_in_process_and_is_used_for_every_step(pair) -> None:
    w, r = pair
    for s in range(3):
        expected = _publish(w, s)
        step = _read_one(r)
        (blk,) = step.blocks("mesh", ["data"], "cell")
        arr = np.asarray(blk.arrays("cell")["data"])
        assert np.array_equal(arr.reshape(-1, 1), expected) and not arr.flags.writeable
        r.release()
        if s == 0:
            kept = arr  # an analysis keeping a step's array: its buffer is never reused
        del arr, blk, step
    assert np.array_equal(kept.reshape(-1, 1), expected - 2000.0)
    assert r._fetcher._cma_worked == {0} and not r._fetcher._cma_broken
    assert r._fetcher.buffers.reused >= 1  # the analysis let go of the last step's array: copied into it again
