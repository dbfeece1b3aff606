"""`h5flow run` when one job fails: the other is stopped, the command fails naming the job, and the run record
(--json) is written whatever the analysis did."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ANALYSES = {
    "exit": "import sys\n\ndef execute(step):\n    if step.step == 2:\n        sys.exit(0)\n",
    "raise": "def execute(step):\n    if step.step == 2:\n        raise ValueError('bad value in step 2')\n",
    "no-execute": "def initialize(comm, params):\n    pass\n",
    "initialize": "def initialize(comm, params):\n    raise RuntimeError('no input deck')\n\ndef execute(step):\n"
                  "    pass\n",
}
SAID = {
    "exit": "the analysis called sys.exit(0) at step 2",
    "raise": "bad value in step 2",
    "no-execute": "defines no execute(step) function",
    "initialize": "no input deck",
}

#: ``h5flow run`` with 1 s, not 5 s, before it stops the producer job waiting for the failed consumer's group (the
#: producer's own heartbeat rule, 4 heartbeats, still applies): that it is stopped and the run fails naming the
#: consumer job is what is checked, not the grace's length, which each case otherwise waited out
RUN_WITH_SHORT_GRACE = ("import sys\nimport h5flow.runner\nfrom h5flow.cli import main\n"
                        "h5flow.runner.STOP_GRACE = 1.0\nsys.exit(main(sys.argv[1:]))\n")


@pytest.mark.parametrize("analysis", ["exit", "raise", "no-execute", "initialize"])
def test_run_whose_analysis_fails_stops_the_producer_and_writes_the_record(tmp_path: Path, analysis: str) -> None:
    script = tmp_path / "analysis.py"
    script.write_text(ANALYSES[analysis])
    stream = tmp_path / "s"
    config = tmp_path / "run.xml"
    config.write_text(f'<sensei><transport type="hdf5" filename="{stream}" queue_limit="2" heartbeat="0.3"/>'
                      f'<analysis type="python" script="{script}"/></sensei>')
    out = tmp_path / "run.json"
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", RUN_WITH_SHORT_GRACE, "run", str(config), "-M", "1", "-N", "1",
                             "--steps", "12", "--shape", "8", "8", "8", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.terminate()  # h5flow run forwards SIGTERM to both jobs: none is left behind
        proc.communicate(timeout=30)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.time() - t0
    assert proc.returncode != 0, stdout + stderr
    assert took < 60, (took, stderr)
    assert "the consumer job failed" in stderr and "the producer job was stopped" in stderr, stderr
    assert "Errno 2" not in stderr and "Traceback" not in stderr, stderr
    record = json.loads(out.read_text())
    assert record["status"] == "failed" and record["exit_codes"]["consumer"] != 0, record
    assert SAID[analysis] in (record["consumer_reason"] or ""), record["consumer_reason"]
