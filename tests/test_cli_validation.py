"""Input refused at the edge: numbers out of range (CLI and XML alike), huge names, run records and
signals of `h5flow run`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h5flow.xmlconfig import ConfigError, loads


def _h5flow(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "h5flow.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _xml(tmp_path: Path, attrs: str = "") -> Path:
    p = tmp_path / "c.xml"
    p.write_text(f'<sensei><transport type="hdf5" filename="{tmp_path / "s"}" {attrs}/></sensei>')
    return p


@pytest.mark.parametrize("args, accepted", [
    (["run", "{xml}", "--steps", "-3"], "an integer from 1 to"),
    (["run", "{xml}", "-M", "0"], "an integer from 1 to 4096"),
    (["run", "{xml}", "-N", "0"], "an integer from 1 to 4096"),
    (["run", "{xml}", "--timeout", "nan"], "a finite number from"),
    (["consume", "{xml}", "--timeout", "nan"], "a finite number from"),
    (["consume", "{xml}", "--timeout", "inf"], "a finite number from"),
    (["produce", "{xml}", "--shape", "0", "8", "8"], "an integer from 1 to"),
    (["produce", "{xml}", "--dt", "-1"], "a finite number from"),
])
def test_numbers_out_of_range_are_refused_at_once(tmp_path: Path, args: list[str], accepted: str) -> None:
    xml = str(_xml(tmp_path))
    t0 = time.time()
    proc = _h5flow(*[a.replace("{xml}", xml) for a in args], timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert accepted in proc.stderr, proc.stderr
    assert time.time() - t0 < 20


@pytest.mark.parametrize("attr", ['heartbeat="1e-300"', 'heartbeat="1e300"', 'poll_min="1e-300"'])
def test_xml_seconds_out_of_range_name_the_range(attr: str) -> None:
    with pytest.raises(ConfigError, match=r"accepted: a number of seconds from [0-9.e-]+ to [0-9.e+]+"):
        loads(f'<sensei><transport type="hdf5" filename="/x/s" {attr}/></sensei>')


def test_a_huge_group_name_gives_a_short_message(tmp_path: Path) -> None:
    name = "g" * 10_000_000
    with pytest.raises(ConfigError) as e:
        loads(f'<sensei><transport type="hdf5" filename="/x/s" group="{name}."/></sensei>')
    assert len(str(e.value)) < 1000 and "10000001 characters" in str(e.value)
    from h5flow.transports._common import check_group

    with pytest.raises(ValueError) as e2:
        check_group(name)
    assert len(str(e2.value)) < 1000 and "10000000 characters" in str(e2.value)


def test_error_text_names_the_last_step_delivered(tmp_path: Path) -> None:
    """After steps were delivered, a producer loss must not read 'last step seen none'."""
    actors = str(Path(__file__).with_name("stream_actors.py"))
    config = {"filename": str(tmp_path / "s"), "heartbeat": 0.5}
    prod = subprocess.Popen([sys.executable, actors, "produce", json.dumps(config), "--steps", "100000",
                             "--shape", "8", "8", "8", "--sleep", "0.05"], stdout=subprocess.PIPE, text=True)
    cons = subprocess.Popen([sys.executable, actors, "consume", json.dumps(config), "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert cons.stdout is not None
        for _ in range(3):
            line = cons.stdout.readline()
            assert line.startswith("STEP"), line
        prod.kill()
        out, err = cons.communicate(timeout=30)
    finally:
        for p in (prod, cons):
            if p.poll() is None:
                p.kill()
        prod.communicate()
    status = next(ln for ln in out.splitlines() if ln.startswith("STATUS"))
    assert "lost" in status and "last step seen none" not in status, status
    assert "last step delivered" in status, status


def test_sigterm_to_run_reaches_both_jobs_and_the_record_is_written(tmp_path: Path) -> None:
    xml = _xml(tmp_path, 'heartbeat="0.5"')
    record = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "h5flow.cli", "run", str(xml), "-M", "1", "-N", "1",
                             "--steps", "100000", "--shape", "8", "8", "8", "--json", str(record)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    progress = tmp_path / "consumer.progress"
    deadline = time.time() + 60
    while not progress.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert progress.exists(), "the consumer never consumed a step"
    children = subprocess.run(["pgrep", "-f", f"h5flow.cli (produce|consume) {xml}"], capture_output=True,
                              text=True).stdout.split()
    assert children
    os.kill(proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0 and "SIGTERM" in err, err
    time.sleep(0.5)
    alive = [pid for pid in children if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    for pid in alive:
        os.kill(int(pid), signal.SIGKILL)
    assert not alive, "h5flow run left jobs running after SIGTERM"
    rec = json.loads(record.read_text())
    assert rec["status"] == "failed" and "SIGTERM" in rec["reason"]
