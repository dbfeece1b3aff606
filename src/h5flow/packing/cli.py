"""``h5flow pack`` and ``h5flow unpack``: the command line over :func:`h5flow.packing.pack` and
:func:`h5flow.packing.unpack` (under ``mpiexec`` the ranks of ``COMM_WORLD`` share the data)."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from h5flow.packing import DEFAULT_SLAB_BYTES, pack, unpack


def _comm_world() -> Any:
    if int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) <= 1:
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD if MPI.COMM_WORLD.size > 1 else None


def _cmd(direction: str) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        comm = _comm_world()
        progress = {"auto": sys.stderr.isatty(), "always": True, "never": False}[args.progress]
        fn = pack if direction == "pack" else unpack
        kw: dict[str, Any] = {"strip_filters": args.strip_filters} if direction == "unpack" else {}
        r = fn(args.src, args.dst, force=args.force, slab_bytes=int(args.slab_mib * (1 << 20)), progress=progress,
               comm=comm, **kw)
        if comm is None or comm.rank == 0:
            mib = r.data_bytes / (1 << 20)
            print(f"{direction}ed {r.src} -> {r.dst}: {r.groups} group(s), {r.datasets} dataset(s), "
                  f"{r.attributes} attribute(s), {r.soft_links + r.external_links + r.hard_links} link(s), "
                  f"{r.datatypes} committed type(s); {mib:.1f} MiB in {r.seconds:.2f} s"
                  + (f" on {r.ranks} ranks" if r.ranks > 1 else ""))
            for w in r.warnings:
                sys.stdout.flush()
                print(f"warning: {w}", file=sys.stderr)
        return 0

    return run


def _slab_mib(text: str) -> float:
    """``--slab-mib``: a finite number of MiB that makes at least one byte."""
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v * (1 << 20) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite size of at least 1 byte, in MiB (e.g. 64)")
    return v


def add_commands(sub: Any) -> None:
    for direction, what in (("pack", "an h5flow_log container into one native HDF5 file"),
                            ("unpack", "a native HDF5 file into an h5flow_log container")):
        src_name, dst_name = ("CONTAINER", "OUT.h5") if direction == "pack" else ("IN.h5", "CONTAINER")
        p = sub.add_parser(direction, help=f"copy {what}",
                           description=f"Copy {what}: groups, links, committed datatypes, datasets (type, shape, "
                           "max shape, chunking, fill value), attributes, object references and dimension scales "
                           "(docs/FORMAT.md, 'Pack and unpack'). Written under a temporary name and renamed on "
                           "success. Under mpiexec the ranks share the data.")
        p.add_argument("src", metavar=src_name)
        p.add_argument("dst", metavar=dst_name)
        p.add_argument("--force", action="store_true", help=f"replace {dst_name} if it exists")
        p.add_argument("--slab-mib", type=_slab_mib, default=DEFAULT_SLAB_BYTES / (1 << 20),
                       help="data held in memory per copy step, MiB (default %(default)g)")
        p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                       help="progress bar on stderr (auto: when stderr is a terminal)")
        if direction == "unpack":
            p.add_argument("--strip-filters", action="store_true",
                           help="copy compressed/filtered datasets without their filters (default: they keep "
                           "them)")
        p.set_defaults(func=_cmd(direction))
