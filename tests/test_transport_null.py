"""The null transport: a writer and a reader of one process, the reader getting the producer's own arrays."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import h5flow
from h5flow import transports, xmlconfig
from h5flow.transports import TransportError


def test_null_hands_each_step_to_the_reader_of_the_same_process() -> None:
    comm = MPI.COMM_SELF
    data = [np.arange(12, dtype=np.float64).reshape(3, 4) + s for s in range(3)]
    got = []
    with h5flow.open("nul-a", "w", comm=comm, type="null") as w, h5flow.open("nul-a", "r", comm=comm,
                                                                            type="null") as r:
        steps = r.steps(timeout=1)
        for s, arr in enumerate(data):
            with w.step(s, time=0.5 * s) as st:
                st.write("t", arr)
            step = next(steps)
            share = step.read("t")
            assert (step.step, step.time) == (s, 0.5 * s)
            got.append(share.array().copy())
            assert share.pieces[0].data.base is arr or np.shares_memory(share.pieces[0].data, arr)  # no copy
        w.close()
        assert list(steps) == []  # end of stream once the writer closed
    assert all(np.array_equal(g, d) for g, d in zip(got, data, strict=True))


def test_null_refuses_what_it_cannot_do() -> None:
    comm = MPI.COMM_SELF
    with pytest.raises(TransportError, match="no writer of it is open in this process"):
        h5flow.open("nul-b", "r", comm=comm, type="null")
    with h5flow.open("nul-b", "w", comm=comm, type="null") as w:
        with pytest.raises(TransportError, match="planar' partitioner cannot apply"):
            h5flow.open("nul-b", "r", comm=comm, type="null", partitioner="planar")
        with w.step(0) as st:
            st.write("t", np.zeros(4))
        with pytest.raises(TransportError, match="step 0 is not read yet; the null transport holds one step"):
            with w.step(1) as st:
                st.write("t", np.zeros(4))


def test_null_is_registered_like_the_others() -> None:
    assert "null" in transports.registry.names() and "null" in transports.BUILTIN
    cfg = xmlconfig.loads('<sensei><transport type="null" filename="x"/></sensei>').transport()
    assert cfg.type == "null" and type(cfg.settings).__name__ == "NullSettings"
