"""Per-write statistics and user data function results of h5flow_log datasets (``h5flow stats``).

While a process writes a numeric dataset through h5flow_log, the connector records for every write (a
*shard*: one ``H5Dwrite`` of one writer) the element count, min, max, sum, NaN count, where the min and
max are, and a 16-bin histogram over [min, max], plus what the dataset's user data function reported for
that write (docs/FORMAT.md, "Statistics and user data functions"). :func:`read_stats` returns them as
records (a pandas DataFrame when pandas is installed and asked for): one per write that still has visible
elements, latest write wins. Each record says where its numbers come from:

``source``
    ``"stats"``: the write's statistics record (the data log was not read); ``"data"``: computed from the
    visible elements of the write (no intact record, or part of the write was overwritten since);
    ``"none"``: no statistics for this datatype.
``udf_status``
    ``"ok"`` (``udf`` holds key -> value), ``"failed"`` (``udf_error`` says why; the write itself
    landed), ``"stale"`` (the function's output describes the write as written, part of which has since
    been overwritten), ``"none"`` (no function), ``"unknown"`` (no intact record of this write).

The numbers come from the connector itself (the plugin's ``h5flow_log_stats_json``), on a dataset of a
container opened through :mod:`h5flow.connectors.logvol` (in any process, whatever ``HDF5_VOL_CONNECTOR``
says).

Query engines (:mod:`h5flow.query`) can use :func:`zone_map` for per-write min/max without reading data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from h5flow.connectors import logvol
from h5flow.connectors.h5flow_log import not_a_container

_PREFIX = "h5flow stats: error: "
UDF_PROP, UDF_SPEC_MAX = logvol.UDF_PROP, logvol.UDF_SPEC_MAX
set_udf = logvol.set_udf


def dataset_stats(dset: Any) -> dict[str, Any]:
    """The statistics of one open h5py dataset of an h5flow_log container: ``{"dataset", "dtype",
    "shape", "shards": [...]}`` (the records of :func:`read_stats`, without their ``dataset`` field)."""
    rc, text = logvol.call_json("stats_json", dset.id.id)
    if rc != 0:
        raise RuntimeError(f"statistics of {dset.name}: {text}")
    return json.loads(text)  # NaN / Infinity literals are accepted


def _records(result: dict[str, Any]) -> list[dict[str, Any]]:
    recs = []
    for s in result["shards"]:
        if s.get("layer") == "restructured":  # h5flow restructure's shards (docs/FORMAT.md)
            r = {"dataset": result["dataset"], "shard": f"r{s['generation']}." +
                 ("*" if s["write"] is None else str(s["write"]))}
        else:
            r = {"dataset": result["dataset"], "shard": f"{s['epoch']}.{s['writer']}.{s['write']}"}
        r.update(s)
        recs.append(r)
    return recs


def _collect(container: str | os.PathLike[str], dataset: str | None) -> list[dict[str, Any]]:
    import h5py

    recs: list[dict[str, Any]] = []
    with logvol.open_container(container, "r") as f:
        names: list[str] = []
        obj = f.get(dataset) if dataset is not None else None
        if dataset is not None and isinstance(obj, h5py.Dataset):
            return _records(dataset_stats(obj))
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        if dataset is not None:  # what the user can ask for instead
            listing = ", ".join("/" + n for n in sorted(names)) or "none"
            what = "no dataset" if obj is None else "not a dataset:"
            raise ValueError(f"{what} {dataset} in {container}; datasets: {listing}")
        for n in sorted(names):
            recs.extend(_records(dataset_stats(f[n])))
    return recs


def read_stats(container: str | os.PathLike[str], dataset: str | None = None, *,
               as_frame: bool | None = None) -> Any:
    """Statistics records of every dataset of ``container`` (or of ``dataset`` only): a list of dicts,
    one per write still visible (``dataset``, ``shard``, ``epoch``, ``writer``, ``write``, ``source``,
    ``visible``, ``written``, ``first``, ``last``, ``count``, ``nan``, ``min``, ``max``, ``sum``,
    ``argmin``, ``argmax``, ``hist``, ``udf_status``, ``udf`` / ``udf_error``). A pandas DataFrame
    instead when ``as_frame`` is true, or when it is None and pandas imports."""
    if not os.path.lexists(container):
        raise FileNotFoundError(f"no such file or directory: {container}")
    if not logvol.is_container(container):
        raise ValueError(not_a_container(container))
    recs = _collect(container, dataset)
    if as_frame is False:
        return recs
    try:
        import pandas as pd  # type: ignore[import-untyped]
    except ImportError:
        if as_frame:
            raise
        return recs
    return pd.DataFrame.from_records(recs)


def zone_map(container: str | os.PathLike[str], dataset: str) -> list[tuple[list[int], list[int], Any, Any]]:
    """``(first, last, min, max)`` per visible write of ``dataset``: coordinates of the first and last
    element a write still covers, and bounds of its visible values (NaN ignored). A write's elements lie
    between first and last in row-major order but need not fill that range (strided selections), so a
    zone map built on this is conservative per linear range."""
    return [(r["first"], r["last"], r["min"], r["max"]) for r in read_stats(container, dataset, as_frame=False)
            if r.get("min") is not None]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return "(" + ",".join(str(x) for x in v) + ")"
    return "-" if v is None else str(v)


def format_table(recs: list[dict[str, Any]]) -> str:
    """The records as the table ``h5flow stats`` prints."""
    head = ["dataset", "shard", "writer", "extent", "elems", "src", "min", "max", "sum", "nan", "argmax",
            "udf"]
    rows = []
    for r in recs:
        if r.get("udf_status") == "failed":
            udf = "FAILED: " + r.get("udf_error", "")
        elif r.get("udf"):
            udf = ("" if r["udf_status"] == "ok" else r["udf_status"].upper() + ": ") + \
                " ".join(f"{k}={_fmt(v)}" for k, v in r["udf"].items())
        else:
            udf = r.get("udf_status", "")
        rows.append([r["dataset"], r["shard"], _fmt(r["writer"]), f"{_fmt(r['first'])}..{_fmt(r['last'])}",
                     str(r["visible"]), r["source"], _fmt(r.get("min")), _fmt(r.get("max")), _fmt(r.get("sum")),
                     _fmt(r.get("nan")), _fmt(r.get("argmax")), udf])
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _cmd_stats(args: argparse.Namespace) -> int:
    recs = read_stats(args.container, args.dataset, as_frame=False)
    if args.json:
        print(json.dumps(recs))
    else:
        print(format_table(recs) if recs else f"{args.container}: no written elements")
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("container", type=Path, help="the h5flow_log container (a directory)")
    p.add_argument("dataset", nargs="?", help="one dataset (default: every dataset)")
    p.add_argument("--json", action="store_true", help="print the records as one JSON list")


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stats", help="per-write statistics and user function results of an h5flow_log container",
                       description="Show, per write (shard) still visible: writer, extent covered, element "
                       "count, where the numbers come from (stats record or data), min, max, sum, NaN count, "
                       "position of the max, and the user data function's keys (docs/FORMAT.md).")
    _add_arguments(p)
    p.set_defaults(func=_cmd_stats)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m h5flow.stats")
    _add_arguments(p)
    args = p.parse_args(argv)
    try:
        return _cmd_stats(args)
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        print(f"{_PREFIX}{e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
