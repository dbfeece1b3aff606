"""Querying and indexing HDF5 data: H5Q's queries, FastBit-style indexes, H5Boss-style subsets.

See docs/QUERY.md. The pieces: :mod:`expr` (query objects, ``Q``), :mod:`grammar` (the text form),
:mod:`blocks` (chunks/slabs), :mod:`index` (zone maps, bitmaps, the sidecar file), :mod:`engine`
(:func:`apply`: binding, object conditions) over :mod:`options`, :mod:`plan` (what the indexes decide),
:mod:`selection` (reading and checking candidates) and :mod:`results`, :mod:`subset` (copy the hits
to a new file), :mod:`cli` (``h5flow query/index/subset``).
"""

from __future__ import annotations

from h5flow.query.engine import apply
from h5flow.query.expr import Q, Query, QueryError
from h5flow.query.grammar import QuerySyntaxError, parse
from h5flow.query.index import BuildConfig, BuildResult, IndexStore, build_index, drop_index, verify_index
from h5flow.query.options import ApplyOptions, StaleIndexError
from h5flow.query.results import DatasetHits, QueryResult
from h5flow.query.source import forget_open_files, keep_files_open

__all__ = ["ApplyOptions", "BuildConfig", "BuildResult", "DatasetHits", "IndexStore", "Q", "Query", "QueryError",
           "QueryResult", "QuerySyntaxError", "StaleIndexError", "apply", "build_index", "drop_index",
           "forget_open_files", "keep_files_open", "parse", "verify_index"]
