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

The numbers come from the connector itself (the plugin's ``h5flow_log_stats_json``), through the h5py
dataset object, so the process must run with ``HDF5_VOL_CONNECTOR=h5flow_log``; :func:`read_stats` runs
a helper process with that environment when this one lacks it.

Query engines (:mod:`h5flow.query`) can use :func:`zone_map` for per-write min/max without reading data.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

UDF_PROP = b"h5flow_log.udf"
_PREFIX = "h5flow stats: error: "
UDF_SPEC_MAX = 1024  # bytes of the property (include/h5flow_udf.h)


def set_udf(plist: Any, library: str | os.PathLike[str], symbol: str) -> None:
    """Name the user data function ``symbol`` of the shared library ``library`` in a dataset creation
    property list (an h5py ``PropDCID`` or an integer id), as ``h5flow_udf_set`` in C does. Pass the
    list to ``create_dataset(..., dcpl=plist)``; the connector stores the function with the dataset."""
    from h5flow import _hdf5lib

    lib_b, sym_b = os.fsencode(os.path.abspath(library)), symbol.encode()
    if not sym_b or b"\n" in lib_b or b"\n" in sym_b or len(lib_b) + len(sym_b) + 2 > UDF_SPEC_MAX:
        raise ValueError(f"user data function {library}:{symbol}: names must be non-empty, without newlines, "
                         f"and together shorter than {UDF_SPEC_MAX - 1} bytes")
    spec = ctypes.create_string_buffer(lib_b + b"\n" + sym_b, UDF_SPEC_MAX)
    pid = int(getattr(plist, "id", plist))
    h5 = _hdf5lib.lib()
    h5.H5Pexist.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p]
    h5.H5Pexist.restype = _hdf5lib.htri_t
    h5.H5Pset.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p, ctypes.c_void_p]
    h5.H5Pset.restype = _hdf5lib.herr_t
    h5.H5Pinsert2.argtypes = [_hdf5lib.hid_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p] + \
        [ctypes.c_void_p] * 6
    h5.H5Pinsert2.restype = _hdf5lib.herr_t
    ex = h5.H5Pexist(pid, UDF_PROP)
    if ex < 0:
        raise RuntimeError(f"H5Pexist on property list {pid} failed: is it a dataset creation property list?")
    rc = h5.H5Pset(pid, UDF_PROP, spec) if ex > 0 else \
        h5.H5Pinsert2(pid, UDF_PROP, UDF_SPEC_MAX, spec, None, None, None, None, None, None)
    if rc < 0:
        raise RuntimeError(f"cannot set the property {UDF_PROP.decode()} on property list {pid}")


def _plugin_path() -> str:
    """The h5flow_log plugin that HDF5 loaded into this process (the same copy: its state is shared)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            if os.path.basename(path) == "libh5flow_log.so":
                return path
    raise RuntimeError("the h5flow_log connector is not loaded in this process: open the container with "
                       "HDF5_VOL_CONNECTOR=h5flow_log and HDF5_PLUGIN_PATH set before h5py starts")


@functools.lru_cache(maxsize=1)
def _plugin() -> ctypes.CDLL:
    so = ctypes.CDLL(_plugin_path())
    so.h5flow_log_stats_json.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
    so.h5flow_log_stats_json.restype = ctypes.c_int
    so.h5flow_log_stats_free.argtypes = [ctypes.c_void_p]
    so.h5flow_log_stats_free.restype = None
    return so


def dataset_stats(dset: Any) -> dict[str, Any]:
    """The statistics of one open h5py dataset of an h5flow_log container: ``{"dataset", "dtype",
    "shape", "shards": [...]}`` (the records of :func:`read_stats`, without their ``dataset`` field)."""
    so = _plugin()
    out = ctypes.c_void_p()
    rc = so.h5flow_log_stats_json(int(dset.id.id), ctypes.byref(out))
    text = ctypes.string_at(out.value).decode("utf-8") if out.value else ""
    so.h5flow_log_stats_free(out)
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
    with h5py.File(str(container), "r") as f:
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


def _connector_active() -> bool:
    return os.environ.get("HDF5_VOL_CONNECTOR", "").split(" ")[0] == "h5flow_log"


def read_stats(container: str | os.PathLike[str], dataset: str | None = None, *,
               as_frame: bool | None = None) -> Any:
    """Statistics records of every dataset of ``container`` (or of ``dataset`` only): a list of dicts,
    one per write still visible (``dataset``, ``shard``, ``epoch``, ``writer``, ``write``, ``source``,
    ``visible``, ``written``, ``first``, ``last``, ``count``, ``nan``, ``min``, ``max``, ``sum``,
    ``argmin``, ``argmax``, ``hist``, ``udf_status``, ``udf`` / ``udf_error``). A pandas DataFrame
    instead when ``as_frame`` is true, or when it is None and pandas imports."""
    if not os.path.lexists(container):
        raise FileNotFoundError(f"no such file or directory: {container}")
    if not (Path(container) / "@h5flow_log").is_file():
        raise ValueError(f"{container} is not an h5flow_log container (no @h5flow_log marker)")
    if _connector_active():
        recs = _collect(container, dataset)
    else:  # HDF5 loads connectors only at start: ask a process that has the environment
        from h5flow._paths import default_plugin_dir

        env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(default_plugin_dir()))
        cmd = [sys.executable, "-m", "h5flow.stats", "--json", str(container)] + ([dataset] if dataset else [])
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if p.returncode != 0:  # the helper's own message, without its prefix (the caller adds one)
            msg = p.stderr.strip().removeprefix(_PREFIX)
            raise RuntimeError(msg or f"{' '.join(cmd)} failed ({p.returncode})")
        recs = json.loads(p.stdout)
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
