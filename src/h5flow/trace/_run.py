"""``h5flow trace -- COMMAND...``: run a program with the ``h5flow_trace`` connector stacked over its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from h5flow.connectors import plugin_path

CONNECTOR = "h5flow_trace"


@dataclass(frozen=True)
class TraceRun:
    """What a traced run needs: the trace directory, the command, the environment it started from."""

    out: Path
    command: list[str]


def connector_string(existing: str | None) -> str:
    """The ``HDF5_VOL_CONNECTOR`` value that stacks the trace connector over ``existing`` (the program's own
    setting, ``"name info"`` or ``"name"``), or over native when there is none. The trace directory goes in
    ``H5FLOW_TRACE_DIR`` (a path may hold the info string's separators)."""
    existing = (existing or "").strip()
    if not existing:
        return CONNECTOR
    name, _, info = existing.partition(" ")
    if name == CONNECTOR:
        raise ValueError(f"HDF5_VOL_CONNECTOR is already {existing!r}: the program is traced already "
                         "(unset it, or run the program without h5flow trace)")
    return f"{CONNECTOR} under_vol={name};under_info={{{info.strip()}}}"


def environment(out: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the connector stacked over the program's own and h5flow's plugins on the plugin path."""
    new = dict(env)
    new["HDF5_VOL_CONNECTOR"] = connector_string(env.get("HDF5_VOL_CONNECTOR"))
    paths = [str(p) for p in plugin_path()]
    for p in (env.get("HDF5_PLUGIN_PATH") or "").split(os.pathsep):
        if p and p not in paths:
            paths.append(p)
    new["HDF5_PLUGIN_PATH"] = os.pathsep.join(paths)
    new["H5FLOW_TRACE_DIR"] = str(out)
    return new


def default_out() -> Path:
    return Path(f"h5flow-trace-{time.strftime('%Y%m%d-%H%M%S')}")


def prepare_out(out: Path) -> None:
    if out.exists() and any(out.glob("rank-*.trace")):
        raise ValueError(f"{out} already holds a trace: give another --out, or remove it first (traces of two "
                         "runs in one directory would be read as one run)")
    out.mkdir(parents=True, exist_ok=True)


def run(spec: TraceRun) -> int:
    """Run the command traced; its exit status, or 1 when it succeeded but left no trace."""
    if not spec.command:
        raise ValueError("no command: h5flow trace [--out DIR] -- COMMAND [ARGS...]")
    prepare_out(spec.out)
    env = environment(spec.out.resolve(), dict(os.environ))
    try:
        rc = subprocess.call(spec.command, env=env)
    except FileNotFoundError:
        raise ValueError(f"{spec.command[0]}: command not found") from None
    files = sorted(spec.out.glob("rank-*.trace"))
    if rc != 0:
        print(f"h5flow trace: the command exited with status {rc}; trace (possibly partial) in {spec.out}",
              file=sys.stderr)
        return rc
    if not files:
        print(f"h5flow trace: the command opened no HDF5 file through the {CONNECTOR} connector; nothing was "
              f"traced into {spec.out} (is the program linked to the HDF5 h5flow was built with?)", file=sys.stderr)
        return 1
    from h5flow.trace import incomplete

    cut = incomplete(spec.out)
    if cut:
        print(f"h5flow trace: the command succeeded but {len(cut)} trace file(s) lack their end record, so their "
              f"last calls are lost (a process ended before HDF5 closed, or a trace write failed): "
              f"{', '.join(p.name for p in cut)}", file=sys.stderr)
        return 1
    print(f"h5flow trace: {len(files)} rank file(s) in {spec.out}; summary: h5flow trace show {spec.out}",
          file=sys.stderr)
    return 0
