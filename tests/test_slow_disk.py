"""scripts/slow-disk.sh: the sync-mounted ext4 for `h5flow bench async` (docs/ASYNC.md "Slow storage").

Mounting needs root, which the tests do not assume: here, the usage, and the refusals that come before any
mount (arguments, a directory that is already a mount point, one that is not mounted, a caller who is not
root). The mount itself is exercised by hand (docs/ASYNC.md gives the commands)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slow-disk.sh"


def _run(*argv: str, as_user: bool = False) -> subprocess.CompletedProcess:
    cmd = ["bash", str(SCRIPT), *argv]
    if as_user and os.geteuid() == 0:  # the refusal a user who is not root gets
        assert shutil.which("setpriv"), "setpriv (util-linux) is needed to run the script as another user"
        cmd = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def test_help_names_every_command_and_the_benchmark() -> None:
    proc = _run("--help")
    assert proc.returncode == 0
    for word in ("mount DIR [SIZE]", "umount DIR", "status DIR", "-o loop,sync", "h5flow bench async"):
        assert word in proc.stdout, proc.stdout


@pytest.mark.parametrize("argv, code, message", [
    ([], 2, "usage:"),
    (["format", "/x"], 2, "unknown command 'format'"),
    (["mount"], 2, "mount wants a directory"),
    (["mount", "/x", "12Q"], 2, "SIZE '12Q' is not a size"),
    (["umount", "/x", "y"], 2, "umount takes at most 1 argument(s)"),
    (["mount", "/"], 1, "/ is already a mount point"),
    (["umount", "/proc"], 1, "/proc is not a slow disk of this script"),
])
def test_bad_requests_are_refused_before_anything_is_mounted(argv: list[str], code: int, message: str) -> None:
    proc = _run(*argv)
    assert proc.returncode == code and message in proc.stderr, proc.stderr


def test_a_directory_that_is_not_mounted(tmp_path: Path) -> None:
    proc = _run("umount", str(tmp_path))
    assert proc.returncode == 1 and f"{tmp_path} is not mounted" in proc.stderr, proc.stderr
    proc = _run("status", str(tmp_path))
    assert proc.returncode == 1 and "not mounted" in proc.stdout, proc.stdout
    (tmp_path / "kept").write_text("x")
    proc = _run("mount", str(tmp_path))
    assert proc.returncode == 1 and "is not empty" in proc.stderr, proc.stderr


def test_mounting_needs_root(tmp_path: Path) -> None:
    target = tmp_path / "slow"
    proc = _run("mount", str(target), "64M", as_user=True)
    assert proc.returncode == 1 and "mount needs root" in proc.stderr, proc.stderr
    assert "sudo scripts/slow-disk.sh mount" in proc.stderr and not target.exists()
