"""One producer per hdf5 stream: claiming a stream name is atomic and the loser names the owner."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h5flow.transports._claim import ClaimError
from h5flow.transports.hdf5.staging import Staging, read_index, staging_dir

ACTORS = str(Path(__file__).with_name("stream_actors.py"))


def test_second_reset_before_the_first_run_is_announced_is_refused(tmp_path: Path) -> None:
    """The window of the old check-then-write claim: the first producer has reset the directory but not yet
    announced the run (no stream.json). A second producer must still be refused, naming the first."""
    first = Staging(str(tmp_path / "s"))
    first.reset("run-a")
    second = Staging(str(tmp_path / "s"))
    try:
        second.reset("run-b")
    except ClaimError as e:
        msg = str(e)
    else:
        raise AssertionError("a second producer claimed a stream the first one holds")
    assert socket.gethostname() in msg and f"pid {os.getpid()}" in msg and "started" in msg, msg
    assert first.index.exists(), "the loser must not touch the owner's files"
    first.release_claim()
    second.reset("run-b")  # free again once released
    second.release_claim()


@pytest.mark.parametrize("layout", ["n-1", "log"])
def test_simultaneous_producers_exactly_one_writes(tmp_path: Path, layout: str) -> None:
    config = {"filename": str(tmp_path / "s"), "heartbeat": 0.5, "keep": "all", "layout": layout}
    cmd = [sys.executable, ACTORS, "produce", json.dumps(config), "--steps", "3", "--shape", "8", "8", "8",
           "--sleep", "0.3"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes[0] == 0 and codes[1] != 0, (codes, outs)
    loser = next(o for p, o in zip(procs, outs) if p.returncode != 0)
    winner = next(p for p in procs if p.returncode == 0)
    assert "already claimed by another producer" in loser[1], loser[1]
    assert f"pid {winner.pid}" in loser[1] and socket.gethostname() in loser[1], loser[1]
    entries = [e for e in read_index(staging_dir(config["filename"]) / "index") if e.kind == "P"]
    assert [e.seq for e in entries] == [0, 1, 2], entries


def test_a_running_producer_is_named_to_a_late_second_one(tmp_path: Path) -> None:
    config = {"filename": str(tmp_path / "s"), "heartbeat": 0.5}
    first = subprocess.Popen([sys.executable, ACTORS, "produce", json.dumps(config), "--steps", "1000",
                              "--shape", "8", "8", "8", "--sleep", "0.05"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("PUBLISHED"), first.stderr
        t0 = time.time()
        second = subprocess.run([sys.executable, ACTORS, "produce", json.dumps(config), "--steps", "1",
                                 "--shape", "8", "8", "8"], capture_output=True, text=True, timeout=60)
    finally:
        first.kill()
        first.communicate()
    assert second.returncode != 0 and time.time() - t0 < 30
    assert f"pid {first.pid}" in second.stderr and "started" in second.stderr, second.stderr


def test_a_claim_file_that_is_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    """Every transport claims through one :class:`Claim`, which opens the lock file without following a
    symbolic link: an ``owner`` planted as a link to another file is refused, and that file is not written."""
    from h5flow.transports._claim import Claim

    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "owner"
    link.symlink_to(target)
    with pytest.raises(OSError):
        Claim.acquire(link, "stream s")
    assert target.read_bytes() == b"keep me"


def test_socket_and_hdf5_claims_are_one_class(tmp_path: Path) -> None:
    """The socket transport's claim is the shared one: released with its file removed, free to claim again."""
    from h5flow.transports._claim import Claim
    from h5flow.transports.socket.claim import claim_stream, lock_path

    name = str(tmp_path / "s")
    c = claim_stream(name, "run-1")
    assert isinstance(c, Claim) and json.loads(lock_path(name).read_text())["run"] == "run-1"
    with pytest.raises(ClaimError, match=r"another producer \(pid \d+ on .*, run run-1, since .*\) is still serving"):
        claim_stream(name, "run-2")
    c.release(remove=True)
    assert not lock_path(name).exists()
    claim_stream(name, "run-3").release(remove=True)


def test_socket_contact_file_staleness_reads_the_shared_claim(tmp_path: Path) -> None:
    """A socket contact file is known stale when the stream's claim names another run, or is gone."""
    from h5flow.transports.socket.claim import claim_stream
    from h5flow.transports.socket.contact import Contact

    name = str(tmp_path / "s")
    old = Contact(run_id="run-old", token="t", producers=1, heartbeat=1.0)
    c = claim_stream(name, "run-new")
    assert "run run-new has claimed the stream since" in old.stale(name)
    assert Contact(run_id="run-new", token="t", producers=1, heartbeat=1.0).stale(name) == ""
    c.release(remove=True)
    assert "released its claim" in old.stale(name)
