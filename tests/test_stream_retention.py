"""Retention is the stream's: ``keep="all"`` set by the producer is recorded in stream.json and honoured by every
consumer, whatever the consumer's own ``keep`` (a consumer may keep more, never delete what the producer keeps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.mark.mpi(n=1, timeout=60)
def test_the_producers_keep_all_is_honoured_by_consumers_that_do_not_set_it(comm, mpi_tmp_path: Path) -> None:
    import h5flow

    name = str(mpi_tmp_path / "s")
    with h5flow.open(name, "w", comm=comm, keep="all", queue_limit=0) as s:
        for t in range(3):
            with s.step(t) as st:
                st.write("x", np.arange(4.0) + t)
    root = Path(f"{name}.h5flow")
    assert json.loads((root / "stream.json").read_text())["keep"] == "all"
    for group in ("a", "b"):  # neither consumer sets keep: each still gets every step, none is deleted
        with h5flow.open(name, "r", comm=comm, group=group) as r:
            got = [(st.step, st.read("x").array().tolist()) for st in r.steps(timeout=10)]
        assert got == [(t, (np.arange(4.0) + t).tolist()) for t in range(3)], (group, got)
        assert sorted(p.name for p in root.glob("step-*")) == [f"step-{t:09d}" for t in range(3)], group
    # without keep on the producer, a consumer deletes what it released (and a consumer's keep="all" keeps it)
    other = str(mpi_tmp_path / "t")
    with h5flow.open(other, "w", comm=comm, queue_limit=0) as s:
        with s.step(0) as st:
            st.write("x", np.arange(4.0))
    assert json.loads(Path(f"{other}.h5flow/stream.json").read_text())["keep"] == "released"
    with h5flow.open(other, "r", comm=comm, group="a", keep="all") as r:
        assert [st.step for st in r.steps(timeout=10)] == [0]
    assert Path(f"{other}.h5flow/step-000000000").is_dir()
