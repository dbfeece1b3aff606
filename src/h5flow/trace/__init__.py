"""Traces of HDF5 calls written by the ``h5flow_trace`` VOL connector (docs/TRACE.md).

``load(dir)`` reads every rank's trace of a run into one pandas DataFrame, one row per callback.
"""

from __future__ import annotations

from h5flow.trace._load import TraceError, incomplete, load, read_rank

__all__ = ["TraceError", "incomplete", "load", "read_rank"]
