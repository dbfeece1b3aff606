"""Benchmark drivers, one module per benchmark, run as ``h5flow bench <name>``.

Each module exposes ``add_arguments(parser)`` (its command-line options) and ``launch(args)`` (runs it,
starting ``mpiexec`` itself when the benchmark is parallel). :data:`BENCHMARKS` maps the command name
to the module, imported only when needed (modules also run as ``python -m`` under ``mpiexec``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

BENCHMARKS: dict[str, str] = {"rw": "h5flow.benchmarks.parallel_rw", "transit": "h5flow.benchmarks.transit"}
BENCHMARKS["perf"] = "h5flow.benchmarks.perf"
BENCHMARKS["tuning"] = "h5flow.benchmarks.tuning"
BENCHMARKS["iotest"] = "h5flow.benchmarks.iotest"
BENCHMARKS["h5py-vs-c"] = "h5flow.benchmarks.h5py_vs_c"
BENCHMARKS["query"] = "h5flow.benchmarks.query"
BENCHMARKS["faults"] = "h5flow.benchmarks.faults"
BENCHMARKS["semantic"] = "h5flow.benchmarks.semantic"
BENCHMARKS["pack"] = "h5flow.benchmarks.pack"
BENCHMARKS["async"] = "h5flow.benchmarks.async_io"


def load(name: str) -> ModuleType:
    return importlib.import_module(BENCHMARKS[name])


__all__ = ["BENCHMARKS", "load"]
