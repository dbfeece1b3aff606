"""Semantic restructuring of one dataset of an h5flow_log container (``h5flow restructure``).

A container stores each dataset as per-writer append-only logs: ideal for N writers appending, poor for
reading along another axis (a column of a 2-D dataset written row by row touches every write). A
restructure rewrites **one** dataset's current contents (latest write wins, read through the connector's
merged index) into *shards* of a requested shape, described in constant size — ``order="column"`` (one
shard per index of the last dimension), ``order="row"`` (one per index of the first) or ``chunks=(a, b,
...)`` (a general reshard) — and switches readers to them with one atomic rename of the dataset's
``@dataset`` sidecar. No other object of the container is touched. Reads stay transparent (h5py, h5dump,
any HDF5 program with the plugin); later writes go to ordinary logs and win over the shards.
docs/FORMAT.md, "Restructured datasets", has the format and the crash-safety argument.

The work is done by the connector itself (the plugin's ``h5flow_log_restructure``) on a dataset of the
container opened through :mod:`h5flow.connectors.logvol` (in any process, whatever ``HDF5_VOL_CONNECTOR``
says).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from h5flow.connectors import logvol
from h5flow.connectors.h5flow_log import not_a_container

ORDERS = {"row": 1, "column": 2}
CHUNKS = 3


def _request(order: str | None, chunks: Sequence[int] | None) -> tuple[int, list[int]]:
    if (order is None) == (chunks is None):
        raise ValueError("give exactly one of order ('row' or 'column') and chunks (a shard shape)")
    if order is not None:
        if order not in ORDERS:
            raise ValueError(f"unknown order {order!r}: 'row' or 'column'")
        return ORDERS[order], []
    assert chunks is not None
    sizes = [int(c) for c in chunks]
    if not sizes or any(c < 1 for c in sizes):
        raise ValueError(f"shard sizes must be positive integers, one per dimension (got {list(chunks)})")
    return CHUNKS, sizes


def _run(container: str, dataset: str, code: int, sizes: list[int]) -> dict[str, Any]:
    import h5py

    with logvol.open_container(container, "r") as f:
        obj = f[dataset]
        if not isinstance(obj, h5py.Dataset):
            raise ValueError(f"{container}: {dataset} is not a dataset")
        arr = (ctypes.c_uint64 * max(1, len(sizes)))(*sizes)
        rc, text = logvol.call_json("restructure", obj.id.id, code, arr, len(sizes))
    if rc != 0:
        raise RuntimeError(f"restructure of {dataset} in {container}: {text}")
    result: dict[str, Any] = json.loads(text)
    result["dataset"] = dataset
    return result


def restructure(container: str | os.PathLike[str], dataset: str, *, order: str | None = None,
                chunks: Sequence[int] | None = None) -> dict[str, Any]:
    """Rewrite ``dataset`` of ``container`` into shards: ``order="column"``, ``order="row"`` or
    ``chunks=(a, b, ...)``. Returns a summary (``order``, ``chunks``, ``shards``, ``shard_bytes``,
    ``bytes``, ``generation``, ``epoch``, ``removed``: superseded files removed). No process may write the
    dataset meanwhile (as for h5repack); readers may, they see the old or the new layout."""
    code, sizes = _request(order, chunks)
    if not logvol.is_container(container):
        raise ValueError(not_a_container(container))
    return _run(str(container), dataset, code, sizes)


def _chunks_arg(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--chunks wants comma-separated integers, e.g. 64,64 (got {text!r})")


def _cmd(args: argparse.Namespace) -> int:
    res = restructure(args.container, args.dataset, order=args.order, chunks=args.chunks)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{args.dataset}: {res['shards']} shards of {'x'.join(map(str, res['chunks']))} "
              f"({res['order']} order, {res['shard_bytes']} bytes each, generation {res['generation']}); "
              f"{res['removed']} superseded files removed")
    return 0


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("container", type=Path, help="the h5flow_log container (a directory)")
    p.add_argument("dataset", help="the dataset to restructure (HDF5 path)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--order", choices=sorted(ORDERS), help="column: one shard per index of the last "
                   "dimension (columns of a 2-D dataset are contiguous); row: one per index of the first")
    g.add_argument("--chunks", type=_chunks_arg, help="shard shape, one size per dimension (a,b,...)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("restructure", help="rewrite one dataset of an h5flow_log container into new shards",
                       description="Rewrite one dataset's physical layout into shards of a requested shape "
                       "(--order column|row, or --chunks a,b,...), crash-safely, touching no other object; "
                       "reads stay transparent and later writes win (docs/FORMAT.md).")
    _add_arguments(p)
    p.set_defaults(func=_cmd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m h5flow.restructure")
    _add_arguments(p)
    args = p.parse_args(argv)
    try:
        return _cmd(args)
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        print(f"h5flow restructure: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
