"""Full storage under the hdf5 transport: a staging file system that fills up while producers write.

Each scenario runs in a private mount namespace (``unshare -m``) on a 1 MiB tmpfs mounted there, so the
disk really fills (ENOSPC). Where mounting is impossible the same scenario runs on the ordinary
temporary directory with ``RLIMIT_FSIZE`` on the producer ranks (SIGXFSZ ignored: writes past the limit
fail with EFBIG); the properties checked are the same: no hang, no partial step published, a clear error
(or, with ``block`` on a real full disk, a wait with a message), every published step readable.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pytest

from h5flow.testing.matrix import HDF5_LAYOUTS

ACTORS = str(Path(__file__).with_name("stream_actors.py"))
SHAPE = ["--shape", "40", "40", "40"]  # 256 KiB payload a step: 3 steps fill 1 MiB
FSIZE = 200_000  # fallback: below one step's file, so the first step fails (EFBIG)


@lru_cache(maxsize=1)
def can_mount() -> bool:
    if os.environ.get("H5FLOW_TEST_NO_MOUNT"):  # to exercise the fallback where mounting works
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                           capture_output=True)
    return probe.returncode == 0


def _q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def stream(tmp_path: Path) -> str:
    """The stream's filename inside the scenario's staging file system."""
    (tmp_path / "stage").mkdir(exist_ok=True)
    return str(tmp_path / "stage" / "s")


def run_scenario(tmp_path: Path, body: str, timeout: float = 90, size: str = "1m") -> tuple[Path, bool]:
    """Run ``body`` (sh) with $STAGE (tmp_path/stage) a tmpfs of ``size`` (or a plain directory, the fallback)
    and $OUT = tmp_path/out."""
    out = tmp_path / "out"
    out.mkdir()
    stage = tmp_path / "stage"
    mounted = can_mount()
    head = f"set -u\nSTAGE={_q(str(stage))}\nOUT={_q(str(out))}\n"
    if mounted:
        head += f"mount -t tmpfs -o size={size} tmpfs \"$STAGE\" || exit 99\n"
    script = tmp_path / "scenario.sh"
    script.write_text(head + body)
    cmd = ["unshare", "-m", "sh", str(script)] if mounted else ["sh", str(script)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"scenario failed ({time.time() - t0:.1f} s): {proc.stdout}{proc.stderr}"
    return out, mounted


def producer(config: dict, steps: int, name: str = "prod", ranks: int = 2, extra: str = "",
             deadline: int = 40) -> str:
    """sh: run the producer in the background; its rc lands in $OUT/<name>.rc."""
    limit = "" if can_mount() else f" --fsize-limit {FSIZE}"
    return (f"(timeout {deadline} mpiexec -n {ranks} {_q(sys.executable, ACTORS, 'produce', json.dumps(config))} "
            f"--steps {steps} {_q(*SHAPE)}{limit} {extra} > $OUT/{name}.out 2> $OUT/{name}.err; "
            f"echo $? > $OUT/{name}.rc) &\n")


def consumer(config: dict, name: str, extra: str = "", deadline: int = 40) -> str:
    return (f"timeout {deadline} {_q(sys.executable, ACTORS, 'consume', json.dumps(config))} --check {_q(*SHAPE)} "
            f"{extra} > $OUT/{name}.out 2> $OUT/{name}.err; echo $? > $OUT/{name}.rc\n")


SAVE_STAGE = "cp $STAGE/s.h5flow/index $OUT/index; ls -a $STAGE/s.h5flow > $OUT/listing\n"


def lines(out: Path, name: str, prefix: str) -> list[list[str]]:
    return [ln.split() for ln in (out / f"{name}.out").read_text().splitlines() if ln.startswith(prefix)]


def text(out: Path, name: str) -> str:
    return (out / f"{name}.out").read_text() + (out / f"{name}.err").read_text()


def rc(out: Path, name: str) -> int:
    return int((out / f"{name}.rc").read_text())


def check_published_complete(out: Path) -> list[int]:
    """Every P line names a step that was complete; no step directory of a step that was not published."""
    index = (out / "index").read_text().splitlines()
    published = [int(ln.split()[2]) for ln in index if ln.startswith("P ")]
    assert len(published) == len(set(published)), index
    listing = (out / "listing").read_text().split()
    for name in listing:
        if name.startswith("step-"):
            assert int(name[5:]) in published, (name, index)
    return published


@pytest.mark.parametrize("layout", HDF5_LAYOUTS)
def test_full_disk_with_block_waits_for_room_and_delivers_every_step(tmp_path: Path, layout: str) -> None:
    """The consumer is slower than the producer: the disk fills, the producer waits (saying so), and goes
    on as the consumer releases steps; every step arrives complete."""
    config = {"filename": stream(tmp_path), "heartbeat": 0.5, "layout": layout, "queue_policy": "block"}
    body = (producer(config, 8) + consumer(config, "cons", "--sleep 0.3 --timeout 20") + "wait\n" + SAVE_STAGE)
    out, mounted = run_scenario(tmp_path, body)
    if not mounted:  # a file size limit is not a full disk: nothing frees room, the stream stops clearly
        assert rc(out, "prod") not in (0, 124) and "File too large" in text(out, "prod")
        assert "the producer stopped the stream" in text(out, "cons")
        return
    assert rc(out, "prod") == 0, text(out, "prod")
    assert rc(out, "cons") == 0, text(out, "cons")
    assert "waiting for room (queue_policy='block')" in text(out, "prod"), text(out, "prod")
    assert "needs about" in text(out, "prod")
    assert [int(x[1]) for x in lines(out, "cons", "CHECKED")] == list(range(8)), text(out, "cons")
    assert "STATUS end_of_stream" in text(out, "cons")
    assert check_published_complete(out) == list(range(8))


def test_full_disk_without_block_stops_the_stream_and_earlier_steps_stay_readable(tmp_path: Path) -> None:
    """keep="all" and no consumer: the disk fills. The producer stops with a clear error (what, where, how
    many bytes), publishes no partial step; a consumer attached before sees ERROR within 2 heartbeats; a
    consumer that attaches after the disk is full reads every published step (reading needs no room)."""
    heartbeat = 0.5
    config = {"filename": stream(tmp_path), "heartbeat": heartbeat, "keep": "all", "queue_policy": "discard"}
    waiting = dict(config, group="early")
    late = dict(config, group="late")
    body = ("mkdir -p $OUT\n"
            + f"(timeout 40 {_q(sys.executable, ACTORS, 'consume', json.dumps(waiting))} --max-steps 1 "
              "--timeout 30 > $OUT/early.out 2> $OUT/early.err; echo $? > $OUT/early.rc) &\n"
            + "sleep 1\n" + producer(config, 30, deadline=60) + "wait\n" + SAVE_STAGE
            + "df -B1 $STAGE > $OUT/df\n" + consumer(late, "late", "--timeout 5"))
    out, mounted = run_scenario(tmp_path, body)
    prod = text(out, "prod")
    assert rc(out, "prod") not in (0, 124), prod  # not a hang (124), not a silent success
    assert "was not published" in prod and "s.h5flow" in prod and "needs about" in prod, prod
    assert ("No space left on device" if mounted else "File too large") in prod, prod
    published = check_published_complete(out)
    assert (1 if mounted else 0) <= len(published) < 30
    index = (out / "index").read_text().splitlines()
    x_lines = [ln for ln in index if ln.startswith("X ")]
    assert len(x_lines) == 1 and index[-1] == x_lines[0], index
    # the early consumer took step 0 and stopped; nothing else was waiting. The late one, on the full disk:
    late_out = text(out, "late")
    assert rc(out, "late") == 0, late_out
    assert [int(x[1]) for x in lines(out, "late", "CHECKED")] == published, late_out
    status = lines(out, "late", "STATUS")[0]
    assert status[1] == "error" and "the producer stopped the stream" in " ".join(status), late_out
    assert f"last step delivered {published[-1] if published else 'none'}" in " ".join(status), late_out


def test_consumer_waiting_for_the_next_step_sees_the_stop_within_two_heartbeats(tmp_path: Path) -> None:
    heartbeat = 0.5
    config = {"filename": stream(tmp_path), "heartbeat": heartbeat, "keep": "all", "queue_policy": "discard"}
    body = ("(timeout 40 " + _q(sys.executable, ACTORS, "consume", json.dumps(config)) + " --timeout 30 "
            "> $OUT/cons.out 2> $OUT/cons.err; echo $? > $OUT/cons.rc) &\n"
            + producer(config, 30, deadline=60) + "wait\n" + SAVE_STAGE)
    out, _ = run_scenario(tmp_path, body)
    index = (out / "index").read_text().splitlines()
    stopped_at = float(index[-1].split()[1])
    assert index[-1].startswith("X "), index
    status = lines(out, "cons", "STATUS")[0]
    assert status[1] == "error" and "the producer stopped the stream" in " ".join(status), text(out, "cons")
    assert float(status[2]) - stopped_at < 2 * heartbeat, (status, stopped_at)
    steps = [int(x[1]) for x in lines(out, "cons", "STEP")]
    assert steps == check_published_complete(out), text(out, "cons")


@pytest.mark.parametrize("layout", HDF5_LAYOUTS)
def test_write_error_on_one_rank_is_one_decision_on_every_rank(tmp_path: Path, layout: str) -> None:
    """Rank 1 alone cannot write (its file size limit is below its share of the step) while rank 0 can:
    the ranks agree, nobody hangs in a collective, the step is not published and the error names rank 1."""
    out = tmp_path / "o"
    out.mkdir()
    config = {"filename": str(tmp_path / "s"), "heartbeat": 0.5, "layout": layout}
    cons = subprocess.Popen([sys.executable, ACTORS, "consume", json.dumps(config), "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        prod = subprocess.run(["mpiexec", "-n", "2", sys.executable, ACTORS, "produce", json.dumps(config),
                               "--steps", "3", *SHAPE, "--fsize-limit", "50000", "--fsize-rank", "1"],
                              capture_output=True, text=True, timeout=60)
        cout, cerr = cons.communicate(timeout=30)
    finally:
        if cons.poll() is None:
            cons.kill()
    err = prod.stdout + prod.stderr
    assert prod.returncode != 0, err
    assert "step 0 was not published" in err and "rank 1: writing" in err and "File too large" in err, err
    from h5flow.transports.hdf5.staging import read_index, staging_dir

    entries = read_index(staging_dir(config["filename"]) / "index")
    assert [e.kind for e in entries] == ["X"], entries
    assert not list(staging_dir(config["filename"]).glob("*step-*")), "a failed step must leave nothing behind"
    assert "STATUS error" in cout and "rank 1: writing" in cout, cout + cerr


def test_step_larger_than_the_file_system_stops_instead_of_waiting_forever(tmp_path: Path) -> None:
    """queue_policy='block' waits for room only where room can come: a step bigger than the whole staging
    file system (less what the stream keeps for good) stops the stream with a clear error at once."""
    config = {"filename": stream(tmp_path), "heartbeat": 0.5, "queue_policy": "block"}
    body = (producer(config, 3, extra="--shape 64 64 64", deadline=30) + "wait\n"
            + consumer(config, "late", "--timeout 10", deadline=30))  # attaches after the stream stopped
    out, mounted = run_scenario(tmp_path, body)
    assert rc(out, "prod") not in (0, 124), text(out, "prod")  # 124: timeout killed it (it waited forever)
    if mounted:
        assert "less than one step" in text(out, "prod"), text(out, "prod")
    # the stopped run is this group's news: an ERROR, not "a finished run already read" and a wait
    assert "STATUS error" in text(out, "late") and rc(out, "late") != 124, text(out, "late")


def test_plenty_of_room_reserves_nothing(tmp_path: Path) -> None:
    """Rank 0 reserves a step's room before the step is written; on tmpfs a real allocation zeroes every page
    of it (as costly as writing the step, for the whole step, on one rank). With plenty of room nothing is
    allocated. (Tight room is allocated for real: the full-disk scenarios above, on a 1 MiB tmpfs.)"""
    from h5flow.transports.hdf5.staging import Staging, free_bytes

    staging = Staging(str(tmp_path / "s"))
    staging.reset("run")
    try:
        assert free_bytes(staging.root) >= 64 << 20
        assert staging.reserve_space(1 << 20) == ""
        assert not staging.space.exists(), "1 MiB reserved on a file system with plenty of room"
    finally:
        staging.release_claim()
