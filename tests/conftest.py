"""Shared test set-up: the MPI plugin and a check that the h5flow stack is the environment."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Generator

import pytest

pytest_plugins = ["h5flow.testing.pytest_mpi"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tools-matrix", action="store_true", default=False,
                     help="tests/test_tools_matrix.py: every feature (not the quick subset), under the "
                     "connector built with AddressSanitizer")
    parser.addoption("--full", action="store_true", default=False,
                     help="`make test-full`: the full variant of every test that runs a quick subset by default "
                     "(the sanitizer builds and C tests of every connector, and --tools-matrix)")


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [tool for tool in ("mpiexec", "h5fuse", "h5dump") if shutil.which(tool) is None]
    if missing or "H5FLOW_HDF5_DIR" not in os.environ:
        raise pytest.UsageError(
            f"the h5flow stack is not on this shell's environment (missing: {missing or 'H5FLOW_HDF5_DIR'}). "
            "Run the tests with `make test`, or `source build/stack.env` after `make setup`."
        )


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Test modules are collected with bytecode writing on, even under PYTHONDONTWRITEBYTECODE (CI images): pytest
    then keeps each module's assertion-rewritten code in tests/__pycache__ and every later process (each xdist
    worker, each rank of each MPI job) loads it instead of rewriting the module again (about 5 s of CPU per
    collection of the whole suite on the project machine). The setting is put back once collection is over."""
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full_only: runs in `make test-full` (--full) only: a sanitizer build and its C "
                            "tests that `make test` covers with a smaller set")
    config.addinivalue_line("markers", "slow: takes tens of seconds; scheduled first, so that the pytest workers do "
                            "not end with one of them running it while the others wait")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--full"):
        full_only = [item for item in items if item.get_closest_marker("full_only") is not None]
        if full_only:
            config.hook.pytest_deselected(items=full_only)
            items[:] = [item for item in items if item.get_closest_marker("full_only") is None]
    # the longest tests first (a stable sort: otherwise collection order), so that the workers finish together
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
