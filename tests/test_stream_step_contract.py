"""A step is a contract: a step left open, a write after its end and an array whose dtype changes are errors at
the call; an array empty on every rank reaches consumers with shape (0, ...); structured (particle) arrays stream
on every transport that can carry them, and the others refuse them at ``write()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from h5flow.testing.matrix import TransportCase, params

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.mpi(n=1, timeout=60)
def test_a_step_left_open_and_a_write_after_the_end_are_errors(comm, mpi_tmp_path: Path) -> None:
    """... and write() checks the supported dtypes (one MPI job for both)."""
    import h5flow

    _check_supported_dtypes(comm, mpi_tmp_path)

    name = str(mpi_tmp_path / "s")
    with h5flow.open(name, "w", comm=comm, keep="all") as s:
        with s.step(0) as st:
            st.write("x", np.arange(3.0))
        with pytest.raises(ValueError, match=r"write\('x'\): step 0 has ended"):
            st.write("x", np.arange(3.0))  # after the block: refused, not dropped
        with s.step(1) as st:
            st.write("y", np.zeros(2, np.int32), offset=(0,), global_shape=(4,))
            with pytest.raises(ValueError, match=r"wrote a piece of 'y' as int32 in step 1, and this one is int64"):
                st.write("y", np.zeros(2, np.int64), offset=(2,), global_shape=(4,))
            st.write("y", np.zeros(2, np.int32), offset=(2,), global_shape=(4,))
        ctx = s.step(2)
        ctx.__enter__().write("x", np.arange(3.0))  # entered, never exited
        with pytest.raises(ValueError, match=r"step\(3\): step 2 is still open"):
            s.step(3)
        ctx.__exit__(None, None, None)  # ends it: published
        with s.step(3) as st:
            st.write("x", np.arange(3.0))
    with h5flow.open(name, "r", comm=comm, keep="all") as r:
        assert [st.step for st in r.steps(timeout=10)] == [0, 1, 2, 3]
    # leaving the stream with a step open: an error, and no end-of-stream mark
    with pytest.raises(h5flow.RankFailed, match=r"producer rank 0 failed: ValueError: closing the stream: step 0 is "
                                                 r"still open"):
        with h5flow.open(str(mpi_tmp_path / "t"), "w", comm=comm) as s:
            s.step(0).__enter__()


@pytest.mark.mpi(n=2, timeout=60)
def test_an_array_keeps_its_dtype_on_every_rank(comm, mpi_tmp_path: Path) -> None:
    import h5flow
    from h5flow.testing.pytest_mpi import mpi_assert

    name = str(comm.bcast(str(mpi_tmp_path / "s")))
    r = comm.rank
    with pytest.raises(h5flow.RankFailed) as info:
        with h5flow.open(name, "w", comm=comm) as s:
            with s.step(0) as st:
                st.write("a", np.full(2, r, np.float64), offset=(2 * r,), global_shape=(4,))
            with s.step(1) as st:
                if r == 0:  # rank 1 writes no piece of 'a' in this step: it learns the error from rank 0
                    st.write("a", np.zeros(4, np.float32), offset=(0,), global_shape=(4,))
    msg = str(info.value)
    mpi_assert(comm, "producer rank 0 failed" in msg and "array 'a' was float64 in earlier steps and is float32 now"
               in msg, msg)


def _actor(role: str, case: TransportCase, name: str, keywords: dict) -> subprocess.Popen:
    code = textwrap.dedent("""
        import json, sys
        import numpy as np
        from mpi4py import MPI
        import h5flow
        from h5flow.testing.matrix import case
        role, cname, name, kw = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
        case(cname).register()
        P = np.dtype([("code", "<i4"), ("x", "<f8", (3,)), ("w", "<f4")])
        DTYPES = {"p": P, "b": "?", "h": "<f2", "g": np.longdouble, "s": ">f8", "c": "<c8", "i": ">i2", "u": "<u8"}
        def values(key, t):
            if key == "p":
                a = np.zeros(2 * t, P)
                a["code"], a["x"], a["w"] = np.arange(2 * t) + 10 * t, 1.5 * t, t
                return a
            return ((np.arange(5) + t) % (2 if key == "b" else 100)).astype(DTYPES[key])
        if role == "w":
            with h5flow.open(name, "w", comm=MPI.COMM_SELF, **kw) as s:
                for t in range(3):
                    with s.step(t) as st:
                        st.write("e", np.zeros((0, 4), "<i8"), offset=(0, 0), global_shape=(0, 4))
                        for key in DTYPES:
                            a = values(key, t)
                            try:
                                st.write(key, a, offset=(0,), global_shape=a.shape)
                            except ValueError as e:
                                print("REFUSED", key, e, flush=True)
        else:
            with h5flow.open(name, "r", comm=MPI.COMM_SELF, **kw) as s:
                for st in s.steps(timeout=30):
                    e = st.read("e").array()
                    assert e.shape == (0, 4) and e.dtype == np.dtype("<i8"), (e.shape, e.dtype)
                    for key in set(st.names) - {"e"}:
                        a = st.read(key).array()
                        assert a.dtype == np.dtype(DTYPES[key]) and np.array_equal(a, values(key, st.step)), (key, a)
                    print("STEP", st.step, "".join(sorted(st.names)), flush=True)
    """)
    return subprocess.Popen([sys.executable, "-c", code, role, case.name, name, json.dumps(keywords)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")])})


@pytest.mark.parametrize("case", params(names=("hdf5-n-n", "hdf5-log", "socket", "adios2-bp5")))
def test_empty_and_structured_arrays_on_every_transport(case: TransportCase, tmp_path: Path) -> None:
    """Particles as a structured array, and an array with no element on any rank, through each transport: a
    transport that cannot carry structured arrays refuses them at write() with its reason."""
    name = str(tmp_path / "s")
    kw = case.keywords()
    consumer = _actor("r", case, name, kw)
    producer = _actor("w", case, name, kw)
    out_w, _ = producer.communicate(timeout=60)
    out_r, _ = consumer.communicate(timeout=60)
    assert producer.returncode == 0 and consumer.returncode == 0, out_w + out_r
    refused = {line.split()[1]: line for line in out_w.splitlines() if line.startswith("REFUSED")}
    # ADIOS2's Python API has no compound, bool, float16 or long double variables, and native byte order only
    expected = set("pbhgsi") if case.type == "adios2" else set()
    assert set(refused) == expected, out_w
    for key, why in {"p": "cannot stream structured arrays", "b": "cannot stream bool arrays",
                     "s": "native byte order only"}.items():
        assert key not in expected or why in refused[key], refused[key]
    names = "".join(sorted(set("ebhgscipu") - expected))
    assert [line for line in out_r.splitlines() if line.startswith("STEP")] == \
        [f"STEP {t} {names}" for t in range(3)], out_r



def _check_supported_dtypes(comm, mpi_tmp_path: Path) -> None:  # noqa: ANN001
    import h5flow

    with h5flow.open(str(mpi_tmp_path / "d"), "w", comm=comm) as s:
        with s.step(0) as st:
            for bad in (np.zeros(2, [("o", object)]), np.array(["2020-01-01"], "datetime64[D]"),
                        np.zeros(2, [("t", "m8[s]")])):
                with pytest.raises(ValueError, match="cannot be streamed"):
                    st.write("a", bad)
            st.write("a", np.zeros(2, [("code", "<i4"), ("sub", [("v", "<f4", (2,))])]))  # nested fields of numbers
    # the block-level writer checks the same rule when the step ends (it was an I/O error "... bytes free")
    from h5flow.config import TransportConfig
    from h5flow.model import ParticleBlock
    from h5flow.transports import open_writer
    from h5flow.transports.base import RankFailed

    with pytest.raises(RankFailed, match=r"producer rank 0 failed: .*array 'tag': arrays of dtype object cannot be "
                                         r"streamed"):
        with open_writer(comm, TransportConfig.of("hdf5", str(mpi_tmp_path / "b"))) as w:
            w.begin_step(0, 0.0)
            w.put("p", ParticleBlock(0, np.zeros((2, 3)), {"tag": np.array([None, "x"], dtype=object)}))
            w.end_step()
