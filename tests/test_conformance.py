"""HDF5's VOL API tests (h5_api_test) per connector: no group may pass fewer tests than recorded.

The expected counts live in ``tests/data/conformance.json`` and are re-recorded with
``h5flow conformance --connector NAME --record`` (which also rewrites the table in docs/CONFORMANCE.md).
Each (connector, group) pair is one test and one h5_api_test process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h5flow.testing import conformance as c

RECORD = Path(__file__).parent / "data" / "conformance.json"
RECORDED = json.loads(RECORD.read_text())["connectors"]
CASES = [(conn, group) for conn, groups in RECORDED.items() for group in groups]


@pytest.mark.parametrize(("connector", "group"), CASES, ids=[f"{c_}-{g}" for c_, g in CASES])
def test_no_regression(connector: str, group: str) -> None:
    want = RECORDED[connector][group]
    r = c.run_group(group, connector, timeout=120)
    assert r.passed >= want["passed"], c.compare([r], RECORDED[connector])
    if r.complete:
        # The parser agrees with HDF5's own count of passed and skipped tests (which includes the few
        # verdicts the suite prints outside any test).
        stray = r.stray_verdicts
        assert (r.passed + stray.count("passed"), r.skipped + stray.count("skipped")) == (
            r.hdf5_summary["passed"], r.hdf5_summary["skipped"]), (r.hdf5_summary, stray)


def test_native_and_pass_through_are_recorded() -> None:
    for conn in ("native", "pass_through"):
        assert set(c.DEFAULT_GROUPS) <= set(RECORDED.get(conn, {})), f"{conn} not recorded for every group"


SAMPLE = """\
Running API tests with VOL connector 'x' and info string ''

Testing group creation                                              PASSED
Testing H5Gcreate with invalid parameters
  Testing H5Gcreate2 with an invalid loc_id                           PASSED
  Testing H5Gcreate2 with an invalid name                           HDF5-DIAG: Error detected in HDF5 (1.14.5):
  #000: H5G.c line 1 in H5Gcreate2(): boom
    major: Symbol table
*FAILED*
    couldn't create group
  Testing H5Gcreate2 with empty part
Testing something long enough that the status ends up alone on the next line
 -SKIP-
Testing group info                                                  *FAILED*
Testing crash here                                                  \
"""


def test_parse_output() -> None:
    p = c.parse_output(SAMPLE + "\n")
    tests, summary, pending = p.tests, p.summary, p.pending
    got = [(t.name, t.status) for t in tests]
    assert got == [
        ("group creation", "passed"),
        ("H5Gcreate with invalid parameters / H5Gcreate2 with an invalid loc_id", "passed"),
        ("H5Gcreate with invalid parameters / H5Gcreate2 with an invalid name", "failed"),
        ("H5Gcreate with invalid parameters / H5Gcreate2 with empty part", "unreported"),
        ("something long enough that the status ends up alone on the next line", "skipped"),
        ("group info", "failed"),
    ]
    assert "H5Gcreate2(): boom" in tests[2].detail and "couldn't create group" in tests[2].detail
    assert summary is None  # no summary lines: the process did not finish
    assert pending == "crash here"
    p = c.parse_output(
        "Testing a   PASSED\n"
        " PASSED\n"
        "1/2 (50.00%) API tests passed with VOL connector 'native'\n"
        "1/2 (50.00%) API tests did not pass with VOL connector 'native'\n"
        "0/2 (0.00%) API tests were skipped with VOL connector 'native'\n")
    assert p.summary == {"run": 2, "passed": 1, "failed": 1, "skipped": 0} and p.pending is None
    assert [t.status for t in p.tests] == ["passed"] and p.stray == ["passed"]


def test_unknown_connector_and_group_are_refused() -> None:
    with pytest.raises(c.ConformanceError, match="no VOL connector named 'no_such_connector'"):
        c.run_group("file", "no_such_connector")
    with pytest.raises(c.ConformanceError, match="unknown API test group 'files'"):
        c.run_group("files", "native")


def test_a_crash_is_reported_not_hidden(tmp_path: Path) -> None:
    """A group whose process dies is incomplete, with the signal and the test in progress named."""
    fake = tmp_path / "h5_api_test"
    fake.write_text("#!/bin/sh\necho 'Testing first   PASSED'\necho 'Testing second      '\nkill -SEGV $$\n")
    fake.chmod(0o755)
    r = c.run_group("group", "native", executable=fake, timeout=30)
    assert not r.complete and "SIGSEGV" in r.problem and "second" in r.problem
    assert (r.passed, r.failed) == (1, 1)
