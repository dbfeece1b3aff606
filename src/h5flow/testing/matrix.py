"""The transport matrix: every transport and hdf5 layout that h5flow's own suites run, defined once.

The contract suite (``tests/contract/``), the fault suite (``h5flow bench faults``) and the transit benchmark
(``h5flow bench transit``) all take their transports from :data:`MATRIX`. A case names a registered transport,
the settings that make it that case (``layout`` for hdf5, ``engine`` for adios2) and what the transport
promises, so a suite asks a case what to expect instead of spelling transports out:

* ``liveness``: a consumer reports a producer rank that died (``producer rank R lost``) within a few
  heartbeats; without it a consumer only times out.
* ``heartbeat``: the transport has the ``heartbeat`` setting (seconds).
* ``queue``: the transport has ``queue_limit`` (a producer may wait for consumers) and the ``dead_consumer``
  policy that decides what a producer does about a consumer group that stopped.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TransportCase:
    """One row of the matrix: ``name`` (as suites and their outputs show it), the registered transport
    ``type`` and the ``settings`` (keywords of ``TransportConfig.of``) that make this case."""

    name: str
    type: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    liveness: bool = True
    heartbeat: bool = True
    queue: bool = True
    plugin: str = ""  # a module that registers the transport (``register_all()``), for test-only transports
    note: str = ""  # what a suite should know about it

    def keywords(self, heartbeat: float | None = None, **more: Any) -> dict[str, Any]:
        """``type`` and this case's settings, plus ``heartbeat`` where the transport has it, plus ``more``
        (only those the transport has: ``queue_limit`` and ``dead_consumer`` are dropped without ``queue``)."""
        out: dict[str, Any] = {"type": self.type, **self.settings}
        if heartbeat is not None and self.heartbeat:
            out["heartbeat"] = heartbeat
        for key, value in more.items():
            if key in ("queue_limit", "dead_consumer", "queue_policy", "group") and not self.queue:
                continue
            out[key] = value
        return out

    def missing(self) -> str | None:
        """Why this case cannot run in this environment (None: it can)."""
        if self.plugin:
            if importlib.util.find_spec(self.plugin) is None:
                return f"the test plugin {self.plugin!r} is not importable (tests/plugins is not on sys.path)"
            return None
        from h5flow.transports import registry

        if self.type not in registry:
            return f"transport {self.type!r} is not registered in this build (known: {', '.join(registry.names())})"
        if self.type == "adios2":
            from h5flow.transports.adios2 import missing_reason

            return missing_reason()
        return None

    def register(self) -> None:
        """Make the transport known in this process (test plugins register at run time)."""
        if self.plugin:
            importlib.import_module(self.plugin).register_all()


MATRIX: tuple[TransportCase, ...] = (
    TransportCase("hdf5-n-n", "hdf5", {"layout": "n-n"}),
    TransportCase("hdf5-n-1", "hdf5", {"layout": "n-1"}),
    TransportCase("hdf5-log", "hdf5", {"layout": "log"}),
    TransportCase("socket", "socket"),
    TransportCase("adios2-sst", "adios2", {"engine": "sst"}, liveness=False, heartbeat=False,
                  note="SST's own reader and writer timeouts decide when a peer is gone"),
    TransportCase("adios2-bp5", "adios2", {"engine": "bp5"}, liveness=False, heartbeat=False,
                  note="a BP5 file has no live producer to lose"),
    TransportCase("dirstream", "dirstream", liveness=False, heartbeat=False, queue=False, plugin="h5flow_dirstream",
                  note="the third-party transport of tests/plugins: no heartbeat, no queue"),
)

#: the hdf5 transport's layouts, in the matrix's order
HDF5_LAYOUTS: tuple[str, ...] = tuple(c.settings["layout"] for c in MATRIX if c.type == "hdf5")
#: the adios2 transport's engines
ADIOS2_ENGINES: tuple[str, ...] = tuple(c.settings["engine"] for c in MATRIX if c.type == "adios2")


def case(name: str) -> TransportCase:
    """The case called ``name``; a clear error naming the known ones otherwise."""
    for c in MATRIX:
        if c.name == name:
            return c
    raise KeyError(f"no transport case {name!r}; known: {', '.join(c.name for c in MATRIX)}")


def cases(names: Iterable[str] | None = None, types: Iterable[str] | None = None) -> list[TransportCase]:
    """The cases called ``names`` (in that order), or every case of the transports ``types``, or all."""
    if names is not None:
        return [case(n) for n in names]
    wanted = None if types is None else set(types)
    return [c for c in MATRIX if wanted is None or c.type in wanted]


def params(names: Iterable[str] | None = None, types: Iterable[str] | None = None) -> list[Any]:
    """pytest parameters of :func:`cases` (``names`` or ``types``), each a :class:`TransportCase` with its name as
    the test id; a case that cannot run in this environment is skipped with the reason."""
    import pytest

    out = []
    for c in cases(names, types):
        why = c.missing()
        out.append(pytest.param(c, id=c.name, marks=[pytest.mark.skipif(why is not None, reason=f"{c.name}: {why}")]))
    return out
