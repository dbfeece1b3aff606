"""The ``h5flow`` command line."""

from __future__ import annotations

import argparse
import os
import sys

from h5flow import __version__


def _cmd_info(args: argparse.Namespace) -> int:
    from h5flow import info

    info.render(info.collect(), as_json=args.json)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    return int(args.bench_module.launch(args))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    from h5flow import benchmarks

    parser = argparse.ArgumentParser(
        prog="h5flow",
        description="HDF5 as the vehicle that moves scientific data: in-transit streams, VOL connectors, "
        "benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"h5flow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p_info = sub.add_parser(
        "info", help="show the HDF5/MPI/h5py stack and the h5flow connectors found",
        description="Report what the loaded HDF5, MPI, h5py and mpi4py can do, the plugin path, and the "
        "h5flow VOL connectors found on it.",
    )
    p_info.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p_info.set_defaults(func=_cmd_info)

    from h5flow import _intransit_cli

    _intransit_cli.add_commands(sub)

    from h5flow import _conformance_cli

    _conformance_cli.add_commands(sub)

    from h5flow.connectors import h5flow_log

    h5flow_log.add_command(sub)

    from h5flow import stats

    stats.add_command(sub)
    from h5flow import restructure

    restructure.add_command(sub)
    from h5flow.packing import cli as packing_cli

    packing_cli.add_commands(sub)

    from h5flow.trace import cli as trace_cli

    trace_cli.add_commands(sub)

    from h5flow import _advise_cli

    _advise_cli.add_command(sub)

    from h5flow.query import cli as query_cli

    query_cli.add_commands(sub)

    p_bench = sub.add_parser("bench", help="run a benchmark", description="Run one of h5flow's benchmarks.")
    bench_sub = p_bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name in benchmarks.BENCHMARKS:
        module = benchmarks.load(name)
        doc = (module.__doc__ or "").strip()
        bp = bench_sub.add_parser(name, help=doc.splitlines()[0] if doc else name, description=doc)
        module.add_arguments(bp)
        bp.set_defaults(func=_cmd_bench, bench_module=module)
    return parser


def _pack_parser() -> argparse.ArgumentParser:
    """Only ``pack`` and ``unpack``: they are timed against C tools (``h5repack``), and the full parser
    imports every command's and benchmark's module (~0.1 s of CPU before any work)."""
    # before numpy loads: pack and unpack do no linear algebra, and OpenBLAS starts a worker thread per core
    # that spins ~0.1 s of CPU waiting for work (h5flow pack of 256 MiB: 0.36 -> 0.26 s of CPU)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from h5flow.packing import cli as packing_cli

    parser = argparse.ArgumentParser(prog="h5flow")
    packing_cli.add_commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return parser


def _intransit_parser() -> argparse.ArgumentParser:
    """Only the in-transit commands: every ``mpiexec`` rank of ``h5flow run`` starts one, and the full parser's
    imports (query, packing, conformance, every benchmark: ~60 ms of CPU per process) are paid on every rank,
    on the critical path of the job's time to solution."""
    # one BLAS thread per MPI rank (an explicit OPENBLAS_NUM_THREADS is kept): OpenBLAS otherwise starts a
    # spinning worker per core in every rank, which an oversubscribed node pays for in every other process
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from h5flow import _intransit_cli

    parser = argparse.ArgumentParser(prog="h5flow")
    _intransit_cli.add_commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return parser


_INTRANSIT = (["produce"], ["consume"], ["run"], ["demo"], ["plot"])


def main(argv: list[str] | None = None) -> int:
    words = (sys.argv[1:] if argv is None else argv)[:1]
    parser = (_pack_parser() if words in (["pack"], ["unpack"]) else _intransit_parser() if words in _INTRANSIT
              else build_parser(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`h5flow query ... | head`): stop quietly, as Unix tools killed by SIGPIPE do;
        # stdout goes to /dev/null so that flushing it at exit does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        # Configuration, transport and file errors carry a message meant for the user; a traceback
        # would bury it (set H5FLOW_DEBUG=1 to see one).
        if os.environ.get("H5FLOW_DEBUG"):
            raise
        print(f"h5flow {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
