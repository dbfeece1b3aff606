"""Guard: the adios2 transport reads a step at about the cost of a plain ADIOS2 reader of the same bytes.

Issue 14 §1: through h5flow's adios2 transport SST read ~10x slower than SST itself. Two causes: the wire
layout (each block's rows went out as a ``(rows, 1)`` variable, which ADIOS2 copies one four-byte row at a
time on the reader) and a fresh fetch array per step (page faults on every step's copy). This runs the plain pair (:mod:`h5flow.benchmarks.adios2_plain`, no h5flow code) and
the transport at 1:1 with the same bytes per step, one after the other, and compares their per-step read cost
(lower quartile): a ratio, never an absolute time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.transports.adios2 import missing_reason

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

ACTOR = Path(__file__).with_name("adios2_pair_actor.py")
NBYTES, STEPS = 40 << 20, 8
# 40 MiB: above glibc's largest mmap threshold (32 MiB), where a fresh array per step is a fresh mmap whose
# every page faults again (the second defect: 3.6-6.4x here before the reader reused its fetch buffers).
# The goal is 1.5x (issue 14). The machine is 2 cores shared with other jobs and a step costs a few
# milliseconds, so even the lower quartile of 8 steps moves with the load (0.6-1.2x measured with both
# fixes): the guard allows 3x. The old (rows, 1) layout measured 6.0x at 8 MiB.
MAX_RATIO = 3.0
ATTEMPTS = 3


def _lower_quartile(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 4]


def _transport_read_costs(where: Path, engine: str) -> list[float]:
    where.mkdir(parents=True, exist_ok=True)
    prefix = str(where / "h5flow")
    w = subprocess.Popen([sys.executable, str(ACTOR), "write", prefix, engine, str(NBYTES), str(STEPS)])
    try:
        r = subprocess.run([sys.executable, str(ACTOR), "read", prefix, engine], capture_output=True, text=True,
                           timeout=120)
    finally:
        w.wait(timeout=60)
    assert r.returncode == 0 and w.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])["read"]


@pytest.mark.parametrize("engine", ["sst"])
def test_transport_read_cost_is_within_a_small_factor_of_plain_adios2(tmp_path: Path, engine: str) -> None:
    from h5flow.benchmarks.adios2_plain import run_pair

    # Up to three measurements, each the plain pair then the transport back to back: a burst of load from other
    # jobs can land on either side of one measurement (5.2x was seen once at load 13), but a real regression
    # (6.0x before the fix) is slow in every one. The best of the three is the one judged.
    seen: list[str] = []
    for attempt in range(ATTEMPTS):
        plain = run_pair(str(tmp_path / f"plain{attempt}"), engine, 1, 1, NBYTES, STEPS, timeout=60)
        plain_costs = [t for _, t in plain["consumer"]["ranks"][0]["io"]]
        ours = _transport_read_costs(tmp_path / f"ours{attempt}", engine)
        assert len(plain_costs) == len(ours) == STEPS
        # the lower quartile of each: the cost of the step itself, little disturbed by the other jobs' load
        ours_q, plain_q = _lower_quartile(ours), _lower_quartile(plain_costs)
        ratio = ours_q / plain_q
        if ratio <= MAX_RATIO:
            return
        seen.append(f"{ratio:.1f}x ({ours_q * 1e3:.2f} ms vs {plain_q * 1e3:.2f} ms)")
    pytest.fail(f"{engine}: the transport's read of a {NBYTES >> 20} MiB step (lower quartile of {STEPS} steps) cost "
                f"more than {MAX_RATIO}x the plain ADIOS2 reader's in each of {ATTEMPTS} measurements: "
                + ", ".join(seen))


def test_an_array_the_analysis_keeps_is_not_overwritten_by_the_next_step(tmp_path: Path) -> None:
    """The reader reuses its fetch buffers; never one a block handed out earlier still refers to."""
    import numpy as np
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader

    actors = Path(__file__).with_name("stream_actors.py")
    cfg = {"type": "adios2", "engine": "sst", "filename": str(tmp_path / "s")}
    w = subprocess.Popen([sys.executable, str(actors), "produce", json.dumps(cfg), "--steps", "3", "--shape", "16",
                          "16", "16", "--blocks", "1"], stdout=subprocess.DEVNULL)
    kept, copies = [], []
    try:
        with open_reader(MPI.COMM_SELF, TransportConfig.of(**cfg)) as r:
            while (res := r.begin_step(60.0)).status is StepStatus.OK:
                data = res.step.blocks("mesh", ["data"])[0].cell_arrays["data"]
                if not kept:
                    kept.append(data)  # held past release, as an analysis accumulating steps would
                copies.append(data.copy())
                r.release()
            assert res.status is StepStatus.END_OF_STREAM, res.reason
    finally:
        w.wait(timeout=60)
    assert len(copies) == 3 and not np.array_equal(copies[0], copies[1])  # the steps differ
    np.testing.assert_array_equal(kept[0], copies[0])
