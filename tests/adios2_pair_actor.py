"""The adios2 transport at 1:1 with a fixed payload (no oscillator, no analysis), for the read-cost guard.

    python tests/adios2_pair_actor.py write PREFIX ENGINE NBYTES STEPS
    python tests/adios2_pair_actor.py read PREFIX ENGINE

The reader prints one JSON line: ``{"read": [seconds per step]}``, each step's cost counted as
``h5flow.runner.consume`` counts it (visible → ``begin_step`` returned, plus ``release``).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.model import ImageBlock
    from h5flow.transports import StepStatus, open_reader, open_writer

    role, prefix, engine = argv[0], argv[1], argv[2]
    cfg = TransportConfig.of("adios2", prefix, engine=engine, queue_limit=4)
    comm = MPI.COMM_SELF
    if role == "write":
        nbytes, steps = int(argv[3]), int(argv[4])
        nx = 256
        nz = max(1, nbytes // 4 // (nx * nx))
        data = np.random.default_rng(0).random(nx * nx * nz, dtype=np.float32)
        with open_writer(comm, cfg) as w:
            for s in range(steps):
                w.begin_step(s, float(s))
                w.put("mesh", ImageBlock(0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, nx - 1, 0, nx - 1, 0, nz - 1), 0,
                                         {"data": data}))
                w.end_step()
        return 0
    costs = []
    with open_reader(comm, cfg) as r:
        while True:
            res = r.begin_step(60.0)
            returned = time.time()
            if res.status is not StepStatus.OK:
                break
            res.step.blocks("mesh", ["data"])
            t = time.time()
            r.release()
            costs.append(returned - float(r.events[-1]["visible"]) + time.time() - t)
        if res.status is not StepStatus.END_OF_STREAM:
            print(f"reader stopped: {res.status} {res.reason}", file=sys.stderr)
            return 1
    print(json.dumps({"read": costs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
