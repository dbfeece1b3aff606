"""h5py's own test suite through h5flow_log: a fixed subset of its test files must pass at least as many
tests as recorded (``h5flow conformance --h5py-suite --record``, tests/data/conformance.json), and never
crash or hang. The full measurement (every file, native and h5flow_log) is the CLI; this guard runs the
files below through the connector only, each in its own process (about 30-50 s in all)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h5flow._paths import default_plugin_dir
from h5flow.testing import h5py_suite as s

RECORD = json.loads((Path(__file__).parent / "data" / "conformance.json").read_text())["h5py_suite"]
CONN = RECORD["connector"]
GUARDED = ["test_attrs.py", "test_attrs_data.py", "test_dataset.py", "test_dataset_getitem.py", "test_group.py",
           "test_filters.py", "test_slicing.py", "test_file.py", "test_h5p.py", "test_dataset_swmr.py",
           "test_h5d_direct_chunk.py"]

pytestmark = pytest.mark.skipif(not (default_plugin_dir() / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")


@pytest.mark.slow
@pytest.mark.parametrize("name", GUARDED)
def test_h5py_file_passes_no_fewer(name: str) -> None:
    want = RECORD["files"][name][CONN]
    r = s.run_file(name, CONN, timeout=120)
    assert not r.crashed, f"h5py {name} through {CONN}: {r.problem}"
    failing = sorted(t for t, st in r.tests.items() if st in ("failed", "error"))
    assert r.passed >= want["passed"], (
        f"h5py {name} through {CONN}: {r.passed} passed, {want['passed']} recorded; failing now: {failing}")


def test_recorded_measure_meets_the_goal() -> None:
    """The recorded full run: no crash or hang, and >= 90 % of what native passes passes through the connector."""
    sm = RECORD["summary"]
    assert sm["connector"]["crashed_files"] == [], sm["connector"]["crashed_files"]
    assert sm["ratio"] >= 0.90, sm["ratio"]


def test_parse_counts_crash_and_teardown_error() -> None:
    out = ("a.py::T::test_x PASSED\n"
           "a.py::T::test_y[a b] FAILED\n"
           "a.py::T::test_y[a b] ERROR\n"
           "a.py::T::test_z SKIPPED (no)\n"
           "FAILED a.py::T::test_y[a b] - AssertionError: 1 != 2\n"
           "a.py::T::test_w \n")
    r = s.FileResult("a.py", "x", crashed=True)
    s.parse(out, r)
    assert r.tests == {"a.py::T::test_x": "passed", "a.py::T::test_y[a b]": "error", "a.py::T::test_z": "skipped",
                       "a.py::T::test_w": "crashed"}
    assert r.messages["a.py::T::test_y[a b]"] == "AssertionError: 1 != 2"
    assert (r.passed, r.failed, r.errors, r.skipped) == (1, 1, 1, 1)
    assert s.classify("test_file.py::TestPageBuffering::test_a", "")[1] is True
    assert s.classify("test_x.py::t", "OSError: ... page buffer ...")[1] is True
    # native files and drivers a container cannot hold are served natively: no longer excused
    assert s.classify("test_file_image.py::TestFileImage::test_a", "")[0] == s.OTHER
    assert s.classify("test_file2.py::TestFileObj::test_BytesIO", "")[0] == s.OTHER
    assert s.classify("test_x.py::t", "virtual datasets are not supported") == ("virtual datasets (refused)", False)
    assert s.classify("x::test_plain", "boom")[0] == s.OTHER
