"""Shared test set-up: the MPI plugin and a check that the h5flow stack is the environment."""

from __future__ import annotations

import os
import shutil

import pytest

pytest_plugins = ["h5flow.testing.pytest_mpi"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tools-matrix", action="store_true", default=False,
                     help="tests/test_tools_matrix.py: every feature (not the quick subset), under the "
                     "connector built with AddressSanitizer")


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [tool for tool in ("mpiexec", "h5fuse", "h5dump") if shutil.which(tool) is None]
    if missing or "H5FLOW_HDF5_DIR" not in os.environ:
        raise pytest.UsageError(
            f"the h5flow stack is not on this shell's environment (missing: {missing or 'H5FLOW_HDF5_DIR'}). "
            "Run the tests with `make test`, or `source build/stack.env` after `make setup`."
        )
