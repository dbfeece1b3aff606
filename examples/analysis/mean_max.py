"""A Python analysis for ``<analysis type="python" script="mean_max.py" array="temperature" out="..."/>``.

h5flow calls ``initialize(comm, params)`` once (``params``: the element's other attributes, as strings),
``execute(step)`` per step (``step`` is the :class:`h5flow.Step` of the Python API) and ``finalize()``.
It computes the global mean and maximum of one array per step; rank 0 appends them to ``out`` (JSON lines)
when given.
"""

from __future__ import annotations

import json

from mpi4py import MPI

state: dict = {}


def initialize(comm, params):  # noqa: ANN001, ANN201
    state.update(comm=comm, array=params.get("array", "temperature"), out=params.get("out"), steps=0)
    if comm.rank == 0 and state["out"]:
        open(state["out"], "w").close()


def execute(step):  # noqa: ANN001, ANN201
    comm = state["comm"]
    share = step.read(state["array"])
    total = comm.allreduce(sum(float(p.data.sum()) for p in share))
    count = comm.allreduce(sum(p.data.size for p in share))
    peak = comm.allreduce(max((float(p.data.max()) for p in share), default=float("-inf")), op=MPI.MAX)
    state["steps"] += 1
    result = {"step": step.step, "mean": total / count, "max": peak}
    if comm.rank == 0 and state["out"]:
        with open(state["out"], "a") as f:
            f.write(json.dumps(result) + "\n")
    return result if comm.rank == 0 else None


def finalize():  # noqa: ANN201
    return {"steps": state["steps"]}
