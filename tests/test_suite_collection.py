"""The suite's own collection (tests/conftest.py): what keeps `make test` short without changing what it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_collection_keeps_the_rewritten_test_modules_under_pythondontwritebytecode(tmp_path: Path) -> None:
    """Under PYTHONDONTWRITEBYTECODE (CI images) pytest kept no assertion-rewritten bytecode, so each xdist
    worker and each rank of each MPI job rewrote its test modules again. Collection writes it now; here into a
    PYTHONPYCACHEPREFIX of this test's own, so that the tree's caches are left as they are."""
    prefix = tmp_path / "pyc"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(prefix),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                        "pytest_timeout", "tests/test_xmlconfig.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(prefix.rglob("test_xmlconfig.*-pytest-*.pyc")), sorted(str(p) for p in prefix.rglob("*pytest*"))


def test_bytecode_writing_is_as_the_environment_says_once_collection_is_over() -> None:
    assert sys.dont_write_bytecode == bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
