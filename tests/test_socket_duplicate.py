"""Two producers started at the same instant on one socket stream name (issue 11): exactly one serves it, the
other fails at once, naming the owner (host, pid); a consumer gets every step from the winner."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ACTORS = str(Path(__file__).with_name("stream_actors.py"))


def test_two_producers_on_one_socket_stream_one_wins_the_other_fails_naming_it(tmp_path: Path) -> None:
    for trial in range(3):
        config = {"type": "socket", "filename": str(tmp_path / f"s{trial}"), "heartbeat": 1.0}
        producers = [subprocess.Popen([sys.executable, ACTORS, "produce", json.dumps(config), "--steps", "3",
                                       "--start-on-stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True) for _ in range(2)]
        try:
            # both import first and say so; then one line to each makes both open their writers together
            for p in producers:
                ready, _, _ = select.select([p.stdout], [], [], 60)
                assert ready and p.stdout.readline() == "READY\n", f"trial {trial}: a producer did not start"
            for p in producers:
                p.stdin.write("go\n")
                p.stdin.flush()
            # a producer that published its steps waits for a consumer before closing: the winner cannot end
            # before the loser's open, however late the loser starts, so the loser must fail on its own
            deadline = time.time() + 30
            while all(p.poll() is None for p in producers):
                assert time.time() < deadline, f"trial {trial}: neither producer failed: both serve the stream"
                time.sleep(0.05)
            loser = next(p for p in producers if p.poll() is not None)
            winner = next(p for p in producers if p is not loser)
            _, err = loser.communicate()
            consumer = subprocess.run([sys.executable, ACTORS, "consume", json.dumps(config), "--check",
                                       "--timeout", "20"], capture_output=True, text=True, timeout=60)
            try:
                winner.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"trial {trial}: the serving producer {winner.pid} hangs") from None
        finally:
            for p in producers:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.communicate()
        assert (loser.returncode, winner.returncode) == (1, 0), (trial, loser.returncode, winner.returncode, err)
        assert f"pid {winner.pid} on {socket.gethostname()}" in err and "is still serving this stream" in err, err
        assert [line for line in consumer.stdout.splitlines() if line.startswith("CHECKED")] == \
            ["CHECKED 0", "CHECKED 1", "CHECKED 2"], consumer.stdout + consumer.stderr
        assert not Path(config["filename"] + ".socket.json").exists()
        assert not Path(config["filename"] + ".socket.lock").exists()


def test_every_rank_of_a_losing_mpi_producer_says_why(tmp_path: Path) -> None:
    """`h5flow produce` on 2 ranks against a stream another producer serves: every rank fails with the reason.
    Each rank prints its error before MPI_Abort; mpiexec dropped output not yet forwarded when the first rank
    aborted, so a rank's message (sometimes every rank's) went missing."""
    xml = tmp_path / "p.xml"
    xml.write_text(f'<sensei><transport type="socket" filename="{tmp_path / "s"}" heartbeat="5"/></sensei>')
    first = subprocess.Popen([sys.executable, "-m", "h5flow.cli", "produce", str(xml), "--steps", "1", "--shape",
                              "8", "8", "8"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.time() + 60
        while not Path(f"{tmp_path / 's'}.socket.json").exists():
            assert time.time() < deadline and first.poll() is None, "the first producer did not start"
            time.sleep(0.05)
        for _ in range(3):
            second = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-m", "h5flow.cli", "produce", str(xml),
                                     "--steps", "1", "--shape", "8", "8", "8"], capture_output=True, text=True,
                                    timeout=60)
            assert second.returncode != 0
            for rank in (0, 1):
                assert f"h5flow (rank {rank}): error: " in second.stderr and \
                    f"another producer (pid {first.pid} on {socket.gethostname()}" in second.stderr, second.stderr
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
