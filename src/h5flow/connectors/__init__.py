"""The C VOL connectors built from ``native/connectors/``: where they are and what they are called.

This module only locates connectors and builds the ``HDF5_VOL_CONNECTOR`` / ``HDF5_PLUGIN_PATH``
settings; the connectors themselves are C and contain no Python.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from h5flow import _hdf5lib
from h5flow._paths import default_plugin_dir

CONNECTOR_PREFIX = "h5flow_"


@dataclass(frozen=True)
class Connector:
    name: str
    value: int | None
    file: Path


def plugin_path() -> list[Path]:
    """The directories HDF5 searches for plugins: ``HDF5_PLUGIN_PATH`` or h5flow's build directory."""
    env = os.environ.get("HDF5_PLUGIN_PATH")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [default_plugin_dir()]


def scan(paths: list[Path] | None = None) -> list[_hdf5lib.PluginInfo]:
    """Every HDF5 plugin library found in ``paths`` (default: :func:`plugin_path`)."""
    found: list[_hdf5lib.PluginInfo] = []
    for directory in paths if paths is not None else plugin_path():
        if not directory.is_dir():
            continue
        for so in sorted(directory.iterdir()):
            if so.is_file() and (so.suffix == ".so" or ".so." in so.name):
                info = _hdf5lib.inspect_plugin(so)
                if info is not None:
                    found.append(info)
    return found


def find(paths: list[Path] | None = None) -> list[Connector]:
    """The h5flow VOL connectors (names starting with ``h5flow_``) on the plugin path."""
    return [
        Connector(name=p.name, value=p.value, file=p.file)
        for p in scan(paths)
        if p.plugin_type == "vol" and p.name and p.name.startswith(CONNECTOR_PREFIX)
    ]


__all__ = ["Connector", "CONNECTOR_PREFIX", "find", "plugin_path", "scan"]
