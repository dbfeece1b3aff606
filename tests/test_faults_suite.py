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


def test_groups_are_checked_one_by_one(tmp_path: Path) -> None:
    """With two consumer groups each must get every step: one group's steps do not cover the other's."""
    spec = _spec(tmp_path)
    ref = reference(spec)
    end = "END end_of_stream\nDISCARDED \nMISSED \nLOST \n"
    procs = [_proc(tmp_path, "producer", PUBLISHED), _proc(tmp_path, "consumer-g0", _blocks(ref, [0, 1, 2]) + end),
             _proc(tmp_path, "consumer-g1", _blocks(ref, [0, 2]) + end)]
    o = classify(spec, procs, False, "test", 1.0)
    assert (o.outcome, o.lost) == ("lost", [1]), o
    # a step the producer reports dropped for g1 is explained for g1 only
    dropped = "h5flow: s: 1 published step(s) were dropped for consumer group 'g1' without being taken: steps 1 (x)"
    procs[0] = _proc(tmp_path, "producer", PUBLISHED, dropped)
    assert classify(spec, procs, False, "test", 1.0).outcome == "ok"
    procs[0] = _proc(tmp_path, "producer", PUBLISHED, dropped.replace("'g1'", "'g0'"))
    assert classify(spec, procs, False, "test", 1.0).outcome == "lost"


def test_a_rank_error_needs_a_clear_error_from_every_other_rank(tmp_path: Path) -> None:
    """rank-error: the injected exception is the fault; the other producer ranks must each fail clearly."""
    spec = _spec(tmp_path, "rank-error")
    spec.params = {"how": "raise", "rank": 1, "at": 1}
    ref = reference(spec)
    consumer = _proc(tmp_path, "consumer-g0", _blocks(ref, [0]) + "END error\n",
                     "FAILED: TransportError: consumer stopped (error): producer rank 1 failed: injected", 2)

    def producer(err: str) -> Proc:
        x = _proc(tmp_path, "producer", "PUBLISHED 0 1\n", err, 1)
        x.faulted = True
        return x

    injected = "FAILED: InjectedFault: injected: producer rank 1 raises inside step 1\n"
    clear = "FAILED: TransportError: producer rank 1 failed: injected\n"
    assert classify(spec, [consumer, producer(injected + clear)], False, "t", 1.0).outcome == "clear error"
    # mpiexec joined one rank's report onto another rank's unfinished line: still two reports, both clear
    joined = injected + "h5flow: error: producer rank 1 failed: injected" + clear
    assert classify(spec, [consumer, producer(joined)], False, "t", 1.0).outcome == "clear error"
    # the consumer heard only that the producer was lost, not why it stopped
    lost = _proc(tmp_path, "consumer-g0", _blocks(ref, [0]) + "END error\n",
                 "FAILED: TransportError: consumer stopped (error): producer rank 0 lost: no heartbeat", 2)
    o = classify(spec, [lost, producer(injected + clear)], False, "t", 1.0)
    assert o.outcome == "crash" and "not told why" in o.detail, o
    # rank 0 ended (the launcher took it down) without saying why: not the collective error asked for
    assert classify(spec, [consumer, producer(injected)], False, "t", 1.0).outcome == "crash"
    assert classify(spec, [consumer, producer(injected + "FAILED: KeyError: 'x'\n")], False, "t", 1.0).outcome \
        == "crash"


FAKE_ACTOR = """
import os, sys, time
role = sys.argv[1]
rank = int(os.environ.get("PMI_RANK", "0"))
print(f"PID {role} {rank} {os.getpid()}", flush=True)
if role == "produce":
    if rank == int(os.environ.get("FAKE_EXITING_RANK", "-1")):
        sys.exit(0)
    for s in range(3):
        if rank == 0:
            print(f"PUBLISHED {s} 1", flush=True)
        time.sleep(0.3)
    time.sleep(float(os.environ.get("FAKE_PRODUCER_STAYS", "0")))
"""


@pytest.mark.parametrize("target, stays", [("consumer", "0"), ("producer 1", "3")])
def test_a_kill_that_finds_its_target_exited_is_not_tested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           target: str, stays: str) -> None:
    """The consumer exits at once (its job is over), or producer rank 1 exits while its job still runs: the
    kill finds no process, and the trial says "not tested" (never ok)."""
    monkeypatch.setattr(faults, "ACTOR", [sys.executable, "-c", FAKE_ACTOR])
    monkeypatch.setenv("FAKE_EXITING_RANK", "1")
    monkeypatch.setenv("FAKE_PRODUCER_STAYS", stays)
    spec = TrialSpec("kill", "socket", 0, 1, str(tmp_path), steps=3, shape=(8, 8, 8), blocks=2, deadline=30,
                     params={"target": target, "after_step": 1, "delay": 0.2, "restart_after": 0.0})
    o = faults.run_trial(spec)
    assert o.outcome == "not tested" and "had already exited" in o.detail, o


def test_another_users_artefact_must_be_refused(tmp_path: Path) -> None:
    """foreign-owner: a refusal is the one acceptable outcome; a stream that ran, or failed for another reason,
    used the other user's artefact."""
    def out(outcome: str, messages: list[str]) -> faults.Outcome:
        return faults.judge_foreign(faults.Outcome("foreign-owner", "socket", 0, 1, outcome, "f", "d", 1.0,
                                                   messages=messages))

    refused = "consumer-g0: TransportError: x.socket.json: refusing the stream's contact file: it is owned by nobody"
    assert out("clear error", [refused]).outcome == "clear error"
    assert out("ok", []).outcome == "trusted"
    assert out("clear error", ["consumer-g0: TransportError: producer lost"]).outcome == "trusted"
    assert out("hang", []).outcome == "hang"


def test_a_file_system_filled_mid_stream_by_another_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """full-mid-stream: the file takes the room once the step was published (and the delay passed), is removed
    once a producer said who holds the room, and a trial in which nothing met the full file system is not
    tested. (The file is written here with 3 blocks instead of filling the temporary directory's disk.)"""
    def fill(path: Path) -> int:
        path.write_bytes(b"\0" * 3 * 512)
        return 3 * 512

    monkeypatch.setattr(faults, "_fill", fill)
    filler = faults._Filler(tmp_path / "filler", {"after_step": 1, "delay": 0.0})
    prod = _proc(tmp_path, "producer", "PUBLISHED 0 1\n")

    class Running:
        @staticmethod
        def poll() -> None:
            return None

    prod.popen = Running()
    assert filler.poll(0.0, prod, [prod]) == "" and filler.filled < 0  # step 1 not published yet
    assert "never filled" in filler.not_tested([prod])
    prod = _proc(tmp_path, "producer", PUBLISHED)
    prod.popen = Running()
    filler.poll(1.0, prod, [prod])
    filler.poll(1.0, prod, [prod])  # the delay (0) passed: filled
    assert filler.filled == 1536 and (tmp_path / "filler").exists() and "after step 1 was published" in filler.fault
    assert "nothing wrote" in filler.not_tested([prod])
    waiting = _proc(tmp_path, "producer", PUBLISHED, "h5flow: step 3 was not published: no room for it in /x\n"
                    "h5flow: step 3 has waited 5 s for room in /x: consumer group 'g0' has not released ...\n")
    filler.poll(2.0, prod, [waiting])
    assert filler.removed and not (tmp_path / "filler").exists() and "said who holds" in filler.fault
    assert filler.not_tested([waiting]) == ""


def test_full_storage_that_never_filled_or_was_full_at_once_is_not_tested(tmp_path: Path) -> None:
    never = [_proc(tmp_path, "producer", PUBLISHED)]
    assert faults._not_filled(never) == "the file system never filled"
    at_once = [_proc(tmp_path, "producer", "", "h5flow: error: step 0 was not published: no room for it in /x", 1)]
    assert "before the first step" in faults._not_filled(at_once)
    mid = [_proc(tmp_path, "producer", "PUBLISHED 0 1\n", "h5flow: step 1 was not published: no room for it in /x")]
    assert faults._not_filled(mid) == ""


def test_a_fault_that_never_happens_is_retried_then_counted_not_tested(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    tries: list[TrialSpec] = []

    def never(spec: TrialSpec, mount: bool) -> faults.Outcome:
        tries.append(spec)
        return faults.Outcome(spec.kind, spec.transport, spec.index, spec.seed, "not tested", "kill", "gone", 0.1)

    monkeypatch.setattr(faults, "run_one", never)
    import argparse

    parser = argparse.ArgumentParser()
    faults.add_arguments(parser)
    js = tmp_path / "f.json"
    args = parser.parse_args(["--kinds", "kill", "--transports", "socket", "--trials", "1", "--workdir",
                              str(tmp_path / "w"), "--json", str(js), "--no-progress"])
    assert faults.launch(args) == 0
    assert len(tries) == faults.RETRIES + 1
    row = json.loads(js.read_text())["table"][0]
    assert (row["trials"], row["ok"], row["not tested"], row["failed"]) == (1, 0, 1, 0), row
    assert "not tested" in capsys.readouterr().out


#: the quick subset in two halves of about equal time, run side by side: each trial's random draws come from the
#: seed, its kind, transport and index alone, so the halves run exactly the trials one run of every kind would
QUICK_HALVES = (("full", "full-mid-stream", "duplicate"),
                ("kill", "foreign-owner", "hostile", "dead-consumer", "rank-error"))


@pytest.mark.slow
def test_quick_subset_runs_every_fault_and_every_row_is_acceptable(tmp_path: Path) -> None:
    """The deterministic subset (seed 81, one trial per fault kind and transport): every applicable pair runs,
    each fault happened (none is "not tested") and each outcome is acceptable: ok or a clear error."""
    assert sorted(k for half in QUICK_HALVES for k in half) == sorted(faults.KINDS)
    runs = []
    for n, kinds in enumerate(QUICK_HALVES):
        js = tmp_path / f"faults-{n}.json"
        cmd = [sys.executable, "-m", "h5flow.cli", "bench", "faults", "--quick", "--kinds", ",".join(kinds),
               "--json", str(js), "--workdir", str(tmp_path / f"w{n}"), "--deadline", "40", "--no-progress"]
        runs.append((js, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    outs = []
    try:
        outs = [proc.communicate(timeout=600)[0] for _, proc in runs]
    finally:  # one half that failed or hung leaves no process behind
        for _, proc in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for (_, proc), out in zip(runs, outs):
        assert proc.returncode == 0, out
    docs, stdout = [json.loads(js.read_text()) for js, _ in runs], "".join(outs)
    assert all(d["seed"] == faults.QUICK_SEED for d in docs) and docs[0]["mount"] == docs[1]["mount"]
    doc = {"mount": docs[0]["mount"], "table": [r for d in docs for r in d["table"]],
           "trials": [t for d in docs for t in d["trials"]]}
    rows = {(r["kind"], r["transport"]): r for r in doc["table"]}
    assert len(rows) == len(doc["table"])
    assert set(rows) == {(k, t) for k in faults.KINDS for t in faults.DEFAULT_TRANSPORTS
                         if not faults.not_applicable(k, t)}
    for key, r in rows.items():
        assert r["trials"] == 1 and sum(r[k] for k in faults.OUTCOMES) == 1
        assert r["ok"] + r["clear error"] == 1, (key, [t for t in doc["trials"] if (t["kind"], t["transport"]) == key])
    dup = next(t for t in doc["trials"] if (t["kind"], t["transport"]) == ("duplicate", "socket"))
    assert dup["outcome"] == "clear error" and "is still serving this stream" in dup["detail"], dup
    hostile = next(t for t in doc["trials"] if t["kind"] == "hostile")
    assert hostile["outcome"] == "ok" and "hostile requests sent" in hostile["detail"], hostile
    full = next(t for t in doc["trials"] if t["kind"] == "full")
    assert full["published"], full  # it filled mid-stream: steps were published before
    if doc["mount"]:  # another file took the room mid-stream; the stream went on or stopped clearly
        mid = next(t for t in doc["trials"] if t["kind"] == "full-mid-stream")
        assert mid["published"] and "another file took the" in mid["fault"], mid
    for t in (t for t in doc["trials"] if t["kind"] == "foreign-owner" and t["outcome"] != "not tested"):
        assert t["outcome"] == "clear error" and "refusing the stream" in t["detail"], t
    assert "clear errors" in stdout and "not tested" in stdout and "not run: full on socket" in stdout


@pytest.mark.parametrize("argv, message", [(["--trials", "0"], "accepted 1-10000"),
                                           (["--deadline", "1"], "accepted 5-3600"),
                                           (["--kinds", "kill,nope"], "accepted kill, full, full-mid-stream, "
                                                                       "foreign-owner, duplicate, hostile, dead-consumer, "
                                                                       "rank-error")])
def test_bad_arguments_say_what_is_accepted(argv: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "bench", "faults", *argv], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stdout + proc.stderr
