"""What only the socket transport has: the contact file and its token, the interface it listens on, and
the seed paper's ADIOS 1 / FlexPath configuration running through it (docs/SOCKET.md).

The stream semantics it shares with the hdf5 transport (M:N, block/discard, quotas, crashes) are checked
by the parametrized tests of test_stream_mn.py, test_stream_backpressure.py and test_stream_failures.py.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.mpi(n=1)
def test_requests_without_the_token_are_refused(comm, mpi_tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    import zmq

    from h5flow.config import TransportConfig
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
    from h5flow.transports import open_writer
    from h5flow.transports.socket import protocol as P
    from h5flow.transports.socket.contact import Contact, contact_path

    cfg = TransportConfig.of(type="socket", filename=str(mpi_tmp_path / "s"), heartbeat=5.0)
    sim = Simulation(OscillatorConfig(shape=(8, 8, 8), nblocks=1, steps=1), 0, 1)
    w = open_writer(comm, cfg)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        path = contact_path(cfg.filename)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, oct(path.stat().st_mode)
        contact = Contact.load(path)
        assert len(contact.token) == 64 and contact.ranks[0].endpoint.startswith("tcp://127.0.0.1:")
        w.begin_step(0, sim.advance(0))
        for b in sim.blocks():
            w.put("mesh", b)
        assert w.end_step().published
        s.connect(contact.ranks[0].endpoint)

        def ask(frames: list[bytes]) -> tuple[bytes, dict, list]:
            s.send_multipart(frames)
            assert s.poll(5000), f"no answer to {frames[:2]}"
            return P.parse_reply(s.recv_multipart())

        get = {"req": 1, "seq": 0, "mesh": "mesh", "ids": [0], "paths": ["cell/data"]}
        for frames, what in (([P.GET, json.dumps(get).encode()], "without a token"),
                             ([b"", P.GET, json.dumps(get).encode()], "with a wrong token"),
                             (P.request(contact.token[:-1].encode() + b"x", P.GET, **get), "with a wrong token"),
                             (P.request(b"0" * 64, P.HELLO, group="g", consumers=1), "with a wrong token")):
            kind, body, data = ask(frames)
            assert kind == P.ERR and body["error"].startswith(f"refused: a request {what}"), body
            assert data == []  # nothing of the step is ever sent without the token
        assert w.store.refused == 4 and w.store.groups == {}  # and nothing changed
        # the same request with the token is served: the block's cells, ghosts included
        kind, body, data = ask(P.request(contact.token.encode(), P.GET, **get))
        assert kind == P.DATA and body["req"] == 1 and len(data) == 1
        assert data[0] == sim.blocks()[0].arrays("cell")["data"].tobytes()
    finally:
        s.close()
        ctx.term()
        w.abort("the test ends here")  # no consumer will ever take the step: leave without waiting for one
    err = capfd.readouterr().err
    assert err.count("refused a request") == 4 and "from 127.0.0.1" in err, err
    assert not contact_path(cfg.filename).exists()


@pytest.mark.mpi(n=1)
def test_a_bad_interface_and_a_live_stream_are_clear_errors(comm, mpi_tmp_path: Path) -> None:
    from h5flow.config import TransportConfig
    from h5flow.transports import TransportError, open_writer

    cfg = TransportConfig.of(type="socket", filename=str(mpi_tmp_path / "s"), interface="no-such-interface0")
    with pytest.raises(TransportError, match="cannot listen on interface 'no-such-interface0'"):
        open_writer(comm, cfg)
    cfg = TransportConfig.of(type="socket", filename=str(mpi_tmp_path / "missing" / "s"))
    with pytest.raises(TransportError, match="does not exist"):
        open_writer(comm, cfg)
    cfg = TransportConfig.of(type="socket", filename=str(mpi_tmp_path / "s"), interface="*")
    first = open_writer(comm, cfg)
    try:
        with pytest.raises(TransportError, match="another producer .* is still serving this stream"):
            open_writer(comm, cfg)
    finally:
        first.close()  # nothing published: closes at once


def test_seed_adios1_flexpath_config_runs_through_the_socket_transport(tmp_path: Path) -> None:
    """The seed paper's ``<analysis type="adios1" filename="./test" method="FLEXPATH"/>``, byte for byte,
    run as producer and consumer configuration in a fresh directory: it is mapped (and says so) to the socket
    transport, and the histograms arrive."""
    seed = EXAMPLES / "config" / "producer-adios1-flexpath.xml"
    assert 'type="adios1" filename="./test"' in seed.read_text()
    proc = subprocess.run([sys.executable, "-m", "h5flow.cli", "run", str(seed), "-M", "2", "-N", "1", "--steps", "3",
                           "--shape", "16", "16", "16", "--json", "run.json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "adios1 method=\"FLEXPATH\" is mapped to h5flow's socket transport" in proc.stderr, proc.stderr
    record = json.loads((tmp_path / "run.json").read_text())
    assert (record["transport"], record["producers"], record["consumers"]) == ("socket", 2, 1)
    assert record["steps_consumed"] == 3 and record["status"] == "end_of_stream"
    assert record["latency"]["count"] == 3
    counts = record["consumer"]["last_results"][0]["counts"]
    assert sum(counts) == 16**3
    assert not (tmp_path / "test.socket.json").exists()  # the producer removed its contact file


def test_socket_xml_attributes() -> None:
    from h5flow.xmlconfig import ConfigError, loads

    t = loads('<sensei><transport type="socket" filename="s" interface="*" quota="1MiB" queue_limit="2" '
              'queue_policy="discard" heartbeat="0.5"/></sensei>').transport()
    s = t.settings
    assert (t.type, s.interface, s.quota_bytes, s.queue_limit, s.queue_policy, s.heartbeat) == \
        ("socket", "*", 1 << 20, 2, "discard", 0.5)
    assert s.cma is True
    assert loads('<sensei><transport type="socket" filename="s" cma="false"/></sensei>').transport().settings.cma is False
    with pytest.raises(ConfigError, match="cma"):
        loads('<sensei><transport type="socket" filename="s" cma="perhaps"/></sensei>')
    with pytest.raises(ConfigError, match="unknown attribute 'layout'"):
        loads('<sensei><transport type="socket" filename="s" layout="n-n"/></sensei>')
