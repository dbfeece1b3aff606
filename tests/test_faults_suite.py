"""`h5flow bench faults`: its classification of a trial's evidence, and its deterministic quick subset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from h5flow.benchmarks import faults
from h5flow.benchmarks.faults import Proc, TrialSpec, classify, reference


def _spec(tmp_path: Path, kind: str = "kill") -> TrialSpec:
    return TrialSpec(kind, "socket", 0, 1, str(tmp_path), steps=3, shape=(8, 8, 8), blocks=2)


def _proc(tmp_path: Path, label: str, out: str, err: str = "", rc: int = 0, killed: bool = False) -> Proc:
    (tmp_path / f"{label}.out").write_text(out)
    (tmp_path / f"{label}.err").write_text(err)
    return Proc(label, [], str(tmp_path / f"{label}.out"), str(tmp_path / f"{label}.err"), rc=rc, killed=killed)


def _blocks(ref: dict, steps: list[int]) -> str:
    """The consumer's lines for ``steps``: each block with its checksum, then the step released."""
    return "".join("".join(f"B {s} {b} {c}\n" for b, c in ref[s].items()) + f"R {s}\n" for s in steps)


PUBLISHED = "PUBLISHED 0 1\nPUBLISHED 1 1\nPUBLISHED 2 1\n"


def test_classification_of_a_trials_evidence(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ref = reference(spec)

    def outcome(consumer_out: str, consumer_err: str = "", consumer_rc: int = 0, producer_err: str = "",
                producer_rc: int = 0, hang: bool = False) -> faults.Outcome:
        procs = [_proc(tmp_path, "producer", PUBLISHED, producer_err, producer_rc),
                 _proc(tmp_path, "consumer", consumer_out, consumer_err, consumer_rc)]
        return classify(spec, procs, hang, "test", 1.0)

    end = "END end_of_stream\nDISCARDED \nMISSED \nLOST \n"
    assert outcome(_blocks(ref, [0, 1, 2]) + end).outcome == "ok"
    # step 1 published, never received, nobody said so, everyone exited 0: silently lost
    o = outcome(_blocks(ref, [0, 2]) + end)
    assert (o.outcome, o.lost) == ("lost", [1])
    # ... unless it is reported: dropped for a lost group (producer message) or listed by the consumer
    dropped = "h5flow: s: 1 published step(s) were dropped for consumer group 'default' without being taken: " \
              "steps 1 (consumer group 'default' declared lost at 12:00:00: ...)"
    assert outcome(_blocks(ref, [0, 2]) + end, producer_err=dropped).outcome == "ok"
    assert outcome(_blocks(ref, [0, 2]) + "END end_of_stream\nLOST 1\n").outcome == "ok"
    # or a surviving process failed with a clear error
    o = outcome(_blocks(ref, [0]), "FAILED: TransportError: consumer stopped (error): producer rank 1 lost", 2)
    assert o.outcome == "clear error" and "producer rank 1 lost" in o.detail
    # a block with another checksum
    bad = _blocks(ref, [0, 1, 2]).replace(f"B 1 0 {ref[1][0]}", f"B 1 0 {ref[1][0] ^ 1}")
    assert outcome(bad + end).corrupt == [1]
    # a released step delivered again
    again = _blocks(ref, [0, 1, 2]) + f"B 1 0 {ref[1][0]}\nB 1 1 {ref[1][1]}\n"
    assert (outcome(again + end).outcome, outcome(again + end).duplicated) == ("duplicated", [1])
    # a failure that is not a clear error, and a hang
    assert outcome(_blocks(ref, [0]), "Traceback ...\nKeyError: 'x'", 1).outcome == "crash"
    assert outcome(_blocks(ref, [0]), "FAILED: KeyError: 'seq'", 2).outcome == "crash"
    assert outcome(_blocks(ref, [0]), "FAILED: OSError: [Errno 28] No space left on device", 2).outcome == "clear error"
    assert outcome(_blocks(ref, [0]), "FAILED: OSError: Unable to open file (open failed)", 2).outcome == "crash"
    assert outcome(_blocks(ref, [0]), "", -9, hang=True).outcome == "hang"
    # a killed process's own exit is the fault, not a crash; a restarted consumer may get the unreleased step again
    procs = [_proc(tmp_path, "producer", PUBLISHED),
             _proc(tmp_path, "consumer", _blocks(ref, [0]) + f"B 1 0 {ref[1][0]}\n", rc=-9, killed=True),
             _proc(tmp_path, "consumer#2", _blocks(ref, [1, 2]) + end)]
    assert classify(spec, procs, False, "kill", 1.0).outcome == "ok"


def test_two_producers_that_both_serve_are_duplicated(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "duplicate")
    ref = reference(spec)
    procs = [_proc(tmp_path, "producer", PUBLISHED), _proc(tmp_path, "producer#2", PUBLISHED),
             _proc(tmp_path, "consumer", _blocks(ref, [0, 1, 2]) + "END end_of_stream\n")]
    o = classify(spec, procs, False, "duplicate", 1.0)
    assert o.outcome == "duplicated" and "both producers" in o.detail


def test_an_intruder_that_crashes_is_restarted_and_the_suite_goes_on(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The hostile peer runs in processes of its own: one that aborts (as libzmq 4.3.5 does in clean_pipes when
    a connection dies under a multipart send) is counted and replaced; what each sent is summed."""
    import os
    import signal
    import time

    script = "import os, sys; print('SENT 5', flush=True); os.abort()"
    monkeypatch.setattr(faults, "ACTOR", [sys.executable, "-c", script])
    intruder = faults._Intruder(tmp_path, tmp_path / "stream", 1, dict(os.environ))
    deadline = time.time() + 20
    while len(intruder.procs) < 3 and time.time() < deadline:
        intruder.poll()
        time.sleep(0.05)
    intruder.stop()
    assert len(intruder.procs) >= 3
    assert intruder.crashed >= 2 and all(x.rc == -signal.SIGABRT for x in intruder.procs[:-1])
    assert intruder.sent == 5 * sum(1 for x in intruder.procs if "SENT" in x.out())


def test_quick_subset_runs_every_fault_and_the_socket_rows_are_clean(tmp_path: Path) -> None:
    """The deterministic subset (seed 81, one trial per fault kind and transport): every applicable pair runs
    and is classified; the socket transport's rows show only acceptable outcomes. (The hdf5 rows report what
    this branch does; its full-storage and duplicate-producer fixes are another change.)"""
    js = tmp_path / "faults.json"
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "faults", "--quick", "--json", str(js),
                           "--workdir", str(tmp_path / "w"), "--deadline", "40"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(js.read_text())
    rows = {(r["kind"], r["transport"]): r for r in doc["table"]}
    assert set(rows) == {("kill", "hdf5"), ("kill", "socket"), ("full", "hdf5"), ("duplicate", "hdf5"),
                         ("duplicate", "socket"), ("hostile", "socket")}
    for r in rows.values():
        assert r["trials"] == 1 and sum(r[k] for k in faults.OUTCOMES) == 1
    for key in (("kill", "socket"), ("duplicate", "socket"), ("hostile", "socket")):
        assert rows[key]["ok"] + rows[key]["clear error"] == 1, (key, [t for t in doc["trials"]
                                                                        if (t["kind"], t["transport"]) == key])
    dup = next(t for t in doc["trials"] if (t["kind"], t["transport"]) == ("duplicate", "socket"))
    assert dup["outcome"] == "clear error" and "is still serving this stream" in dup["detail"], dup
    hostile = next(t for t in doc["trials"] if t["kind"] == "hostile")
    assert hostile["outcome"] == "ok" and "hostile requests sent" in hostile["detail"], hostile
    assert "clear errors" in proc.stdout and "not run: full on socket" in proc.stdout, proc.stdout


@pytest.mark.parametrize("argv, message", [(["--trials", "0"], "accepted 1-10000"),
                                           (["--deadline", "1"], "accepted 5-3600"),
                                           (["--kinds", "kill,nope"], "accepted kill, full, duplicate, hostile")])
def test_bad_arguments_say_what_is_accepted(argv: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "faults", *argv], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stdout + proc.stderr
