"""``h5flow info``: what the HDF5/MPI/Python stack under h5flow can do."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field


@dataclass
class StackInfo:
    hdf5_version: str
    parallel: bool
    subfiling: bool
    threadsafe: bool
    mpi_library: str
    mpi_standard: str
    h5py_version: str
    h5py_mpi: bool
    mpi4py_version: str
    plugin_path: list[str]
    connectors: list[dict[str, object]]
    other_plugins: list[dict[str, object]] = field(default_factory=list)
    hdf5_library: str = ""
    h5flow_version: str = ""
    python: str = ""


def collect() -> StackInfo:
    """Query the libraries actually loaded by this process (not what a build file claims)."""
    import h5py
    import mpi4py
    from mpi4py import MPI

    from h5flow import __version__, _hdf5lib, connectors

    paths = connectors.plugin_path()
    plugins = connectors.scan(paths)
    ours = connectors.find(paths)
    return StackInfo(
        hdf5_version=_hdf5lib.version(),
        parallel=_hdf5lib.has_symbol("H5Pset_fapl_mpio"),
        subfiling=_hdf5lib.has_symbol("H5Pset_fapl_subfiling"),
        threadsafe=_hdf5lib.is_threadsafe(),
        mpi_library=" ".join(MPI.Get_library_version().strip().splitlines()[0].split()),
        mpi_standard="%d.%d" % MPI.Get_version(),
        h5py_version=h5py.version.version,
        h5py_mpi=bool(h5py.get_config().mpi),
        mpi4py_version=mpi4py.__version__,
        plugin_path=[str(p) for p in paths],
        connectors=[{"name": c.name, "value": c.value, "file": str(c.file)} for c in ours],
        other_plugins=[
            {"type": p.plugin_type, "name": p.name, "value": p.value, "file": str(p.file)}
            for p in plugins
            if not (p.plugin_type == "vol" and p.name and p.name.startswith(connectors.CONNECTOR_PREFIX))
        ],
        hdf5_library=str(_hdf5lib.library_path()),
        h5flow_version=__version__,
        python=sys.version.split()[0],
    )


def _yes(v: bool) -> str:
    return "[green]yes[/]" if v else "[red]no[/]"


def render(info: StackInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(info), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"h5flow {info.h5flow_version} — stack", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("HDF5", f"{info.hdf5_version}  ({info.hdf5_library})")
    table.add_row("parallel", _yes(info.parallel))
    table.add_row("subfiling VFD", _yes(info.subfiling))
    table.add_row("thread-safe", _yes(info.threadsafe))
    table.add_row("MPI", f"{info.mpi_library} (MPI {info.mpi_standard})")
    table.add_row("h5py", f"{info.h5py_version}, MPI-enabled: {_yes(info.h5py_mpi)}")
    table.add_row("mpi4py", info.mpi4py_version)
    table.add_row("Python", info.python)
    table.add_row("plugin path", ":".join(info.plugin_path))
    names = ", ".join(f"{c['name']} (value {c['value']}, {c['file']})" for c in info.connectors)
    table.add_row("h5flow connectors", names or "none built yet")
    if info.other_plugins:
        table.add_row("other plugins", ", ".join(f"{p['type']}:{p['name'] or p['value']}" for p in info.other_plugins))
    Console().print(table)
