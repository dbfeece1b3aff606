"""A producer's step numbers and times are checked at the call, in Python as in the C library: an integer
>= 0 that increases, a finite time; arrays of a dtype no transport can stream are refused at write()."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(params=["hdf5", "socket"])
def stream(request: pytest.FixtureRequest, tmp_path: Path):  # noqa: ANN201
    from mpi4py import MPI

    import h5flow

    with h5flow.open(str(tmp_path / "s"), "w", comm=MPI.COMM_SELF, type=request.param, queue_limit=0) as s:
        yield s


@pytest.fixture
def hdf5_stream(tmp_path: Path):  # noqa: ANN201
    """For the tests that publish steps: a socket producer's close would wait for a consumer to take them."""
    from mpi4py import MPI

    import h5flow

    with h5flow.open(str(tmp_path / "s"), "w", comm=MPI.COMM_SELF, type="hdf5", queue_limit=0) as s:
        yield s


@pytest.mark.parametrize("step, time, message", [
    (-1, 0.0, r"step\(-1\): steps must be >= 0 and increasing"),
    (1.5, 0.0, r"step\(1\.5\): the step number must be an integer, not float"),
    (True, 0.0, r"the step number must be an integer, not bool"),
    (0, float("nan"), r"step\(0\): the time nan is not a finite number"),
    (0, float("inf"), r"step\(0\): the time inf is not a finite number"),
    (0, "soon", r"step\(0\): the time 'soon' is not a number"),
])
def test_bad_step_numbers_and_times_are_refused_at_the_call(stream, step: object, time: object,  # noqa: ANN001
                                                            message: str) -> None:
    from h5flow.transports.base import TransportError

    with pytest.raises(TransportError, match=message):
        stream.step(step, time=time)


def test_a_repeated_or_decreasing_step_is_refused_and_the_stream_goes_on(hdf5_stream) -> None:  # noqa: ANN001
    from h5flow.transports.base import TransportError

    stream = hdf5_stream

    with stream.step(3) as st:
        st.write("x", np.arange(4.0))
    for again in (3, 2):
        with pytest.raises(TransportError, match=rf"step\({again}\): steps must be >= 0 and increasing \(the last "
                                                 r"was 3\)"):
            stream.step(again)
    with stream.step(4) as st:
        st.write("x", np.arange(4.0))


def test_the_block_level_writer_checks_the_same(tmp_path: Path) -> None:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import open_writer
    from h5flow.transports.base import TransportError

    w = open_writer(MPI.COMM_SELF, TransportConfig.of("hdf5", str(tmp_path / "b"), queue_limit=0))
    try:
        w.begin_step(0, 0.0)
        w.end_step()
        with pytest.raises(TransportError, match=r"begin_step\(0\): steps must be >= 0 and increasing"):
            w.begin_step(0, 1.0)
    finally:
        w.close()


@pytest.mark.parametrize("data", [np.array([{"a": 1}, None], dtype=object), np.array(["ab", "cd"]),
                                  np.zeros(2, dtype=[("a", "<f8"), ("s", "U2")])],
                         ids=["object", "unicode", "struct-with-a-string"])
def test_arrays_no_transport_streams_are_refused_at_write(hdf5_stream, data: np.ndarray) -> None:  # noqa: ANN001
    with hdf5_stream.step(0) as st:
        with pytest.raises(ValueError, match=r"write\('x'\): arrays of dtype .* cannot be streamed; give booleans"):
            st.write("x", data)
        st.write("y", np.arange(3, dtype=np.int16))  # the step itself goes on
