"""No deadlock on a full file system (``queue_policy="block"``): what holds the room is let go while everyone
waits. Each scenario runs on a small tmpfs in a private mount namespace (see test_stream_faults_storage.py) that
fills mid-stream:

* an analysis loop that keeps the last step's arrays (``sh = st.read(...)``) over mapped reads while the
  producer needs the room of the step before;
* the file system full at the moment a consumer saves its group state: it deletes the steps it released (its
  own releases counted from memory) and saves again while it waits, so the producer gets room;
* a consumer that holds its steps while the producer waits: after a bound the producer says who holds the room.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from test_stream_faults_storage import can_mount, rc, run_scenario, text

ROOT = Path(__file__).resolve().parents[1]
HEAT_C = Path(os.environ.get("H5FLOW_NATIVE_BUILD", ROOT / "build" / "native")) / "bin" / "h5flow-heat2d"

PRODUCER = """
import sys, numpy as np, h5flow
from mpi4py import MPI
name, steps, nbytes, heartbeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with h5flow.open(name, "w", comm=MPI.COMM_SELF, type="hdf5", queue_policy="block", heartbeat=heartbeat) as s:
    for t in range(steps):
        with s.step(t) as st:
            st.write("x", np.full(nbytes // 8, float(t)))
        print("PUBLISHED", t, flush=True)
"""

CONSUMER = """
import sys, time, numpy as np, h5flow
from mpi4py import MPI
name, pause, hold_at, hold = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
array = sys.argv[5] if len(sys.argv) > 5 else "x"
n = 0
with h5flow.open(name, "r", comm=MPI.COMM_SELF, type="hdf5", group="g", heartbeat=0.5) as s:
    for st in s.steps(timeout=25):
        sh = st.read(array)  # the loop keeps the last step's share while it waits for the next one
        if array == "x":
            assert float(sh.array()[0]) == st.step and float(sh.array()[-1]) == st.step, st.step
        n += 1
        time.sleep(hold if st.step == hold_at else pause)
print("CONSUMED", n, flush=True)
"""

STEP = 262144  # bytes of payload a step


def _scenario(tmp_path: Path, size: str, steps: int, pause: float, fill: bool = False, hold_at: int = -1,
              hold: float = 0.0, heartbeat: float = 0.5, c_producer: bool = False) -> Path:
    if not can_mount():
        pytest.skip("needs a private mount namespace (unshare -m) to fill a tmpfs of its own")
    (tmp_path / "stage").mkdir()
    (tmp_path / "prod.py").write_text(PRODUCER)
    (tmp_path / "cons.py").write_text(CONSUMER)
    py = shlex.quote(sys.executable)
    if c_producer:  # libh5flow's example: a 256 x 128 float64 plate a step (256 KiB)
        assert HEAT_C.exists(), f"{HEAT_C} is missing: run `make setup`"
        (tmp_path / "p.xml").write_text(f'<sensei><transport type="hdf5" filename="{tmp_path}/stage/s" '
                                        f'queue_policy="block" heartbeat="{heartbeat}"/></sensei>\n')
        prod = f"{HEAT_C} {tmp_path}/p.xml --steps {steps} --shape 256 128"
        array = "temperature"
    else:
        prod, array = f"{py} {tmp_path}/prod.py $STAGE/s {steps} {STEP} {heartbeat}", "x"
    body = (f"(timeout 40 {prod} > $OUT/prod.out 2> $OUT/prod.err; echo $? > $OUT/prod.rc) &\n"
            f"(timeout 40 {py} {tmp_path}/cons.py $STAGE/s {pause} {hold_at} {hold} {array} > $OUT/cons.out "
            "2> $OUT/cons.err; echo $? > $OUT/cons.rc) &\n")
    if fill:  # once the consumer registered and the producer waits for room, another file takes every byte left
        body += ("for i in $(seq 400); do test -e $STAGE/s.h5flow/consumers/g.json && grep -q 'waiting for room' "
                 "$OUT/prod.err 2>/dev/null && break; sleep 0.05; done\n"
                 "dd if=/dev/zero of=$STAGE/filler bs=4k 2>/dev/null\n")
    body += "wait\n"
    out, _ = run_scenario(tmp_path, body, size=size)
    return out


def test_a_loop_that_keeps_mapped_arrays_does_not_hold_the_room_the_producer_needs(tmp_path: Path) -> None:
    """Room for fewer than two steps on a tmpfs (mapped reads): the array the loop still holds when it asks for
    the next step is the consumer's own copy by then, so deleting its step frees the room."""
    out = _scenario(tmp_path, "640k", steps=12, pause=0.02)
    assert "waiting for room" in text(out, "prod"), text(out, "prod")  # the disk did fill
    assert rc(out, "prod") == 0 and rc(out, "cons") == 0, text(out, "prod") + text(out, "cons")
    assert "CONSUMED 12" in text(out, "cons"), text(out, "cons")


def test_a_consumer_that_cannot_save_its_state_frees_the_steps_it_released(tmp_path: Path) -> None:
    """The disk is full when the consumer saves its group state: it reads on, deletes the steps it released and
    saves again while it waits, so the producer gets room (before, the steps it released stayed: a deadlock)."""
    out = _scenario(tmp_path, "1536k", steps=10, pause=0.2, fill=True)
    cons = text(out, "cons")
    assert "cannot save its state" in cons, cons  # the state save did hit the full disk
    assert rc(out, "prod") == 0 and rc(out, "cons") == 0, text(out, "prod") + cons
    assert "CONSUMED 10" in cons and "state saved again" in cons, cons


@pytest.mark.parametrize("producer", ["python", "c"])
def test_a_producer_waiting_for_room_says_who_holds_it(tmp_path: Path, producer: str) -> None:
    """A consumer that holds its steps (a long analysis of step 1): after ten heartbeats (2 s at least) the
    producer names the group, the steps it has not released and their bytes, and what lies outside the stream
    (the Python producer and the C library alike)."""
    out = _scenario(tmp_path, "1m", steps=5, pause=0.0, hold_at=1, hold=3.0, heartbeat=0.2,
                    c_producer=producer == "c")
    prod = text(out, "prod")
    assert rc(out, "prod") == 0 and rc(out, "cons") == 0, prod + text(out, "cons")
    assert "s for room in" in prod, prod
    if producer == "c":
        assert "consumer groups g hold" in prod and "unreleased steps" in prod, prod
    else:
        assert "consumer group 'g' has not released" in prod, prod
        assert "bytes are outside this stream's published steps" in prod, prod
