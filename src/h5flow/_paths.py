"""Where an h5flow checkout keeps what it builds."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path | None:
    """The source checkout h5flow runs from (editable install), or ``None`` for an installed wheel."""
    here = Path(__file__).resolve()
    root = here.parents[2]  # src/h5flow/_paths.py → checkout root
    return root if (root / "pyproject.toml").is_file() and (root / "native").is_dir() else None


def build_dir() -> Path:
    env = os.environ.get("H5FLOW_BUILD_DIR")
    if env:
        return Path(env)
    root = project_root()
    if root is None:
        raise RuntimeError(
            "h5flow is not running from a source checkout and H5FLOW_BUILD_DIR is not set; "
            "point H5FLOW_BUILD_DIR at the directory scripts/setup.sh built into"
        )
    return root / "build"


def default_plugin_dir() -> Path:
    return build_dir() / "plugins"


def native_tool(name: str) -> Path:
    """Path of a C tool built from ``native/tools`` (for example ``h5flow-config``)."""
    return build_dir() / "native" / "bin" / name
