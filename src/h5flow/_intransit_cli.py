"""The in-transit commands of the CLI: produce, consume, run, demo, plot."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

DEMO_XML = """<sensei>
  <!-- h5flow demo: oscillator on the producers, each step staged as plain HDF5 files (one per producer rank,
       the default layout n-n), histogram on the consumers -->
  <transport type="hdf5" filename="{stream}" method="stream" queue_limit="4" queue_policy="block">
    <partitioner type="block"/>
  </transport>
  <analysis type="histogram" mesh="mesh" array="data" association="cell" bins="10" file="{hist}"/>
</sensei>
"""


def _shown(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def integer(lo: int, hi: int) -> Any:
    """An argparse type: an integer in [lo, hi]; the error gives the accepted range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{_shown(text)}: accepted: an integer from {lo} to {hi}")
        return value

    parse.__name__ = "integer"
    return parse


def seconds(lo: float, hi: float) -> Any:
    """An argparse type: a finite number of seconds in [lo, hi] (nan and inf refused)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: accepted: a finite number from {lo:g} to {hi:g}")
        return value

    parse.__name__ = "number"
    return parse


RANKS = integer(1, 4096)
TIMEOUT = seconds(0.001, 1e6)


def add_oscillator_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("oscillator (SENSEI's miniapp)")
    g.add_argument("--deck", type=Path, default=None, help="oscillator deck (.osc); default: the built-in sample")
    g.add_argument("--shape", type=integer(1, 1 << 20), nargs=3, metavar=("X", "Y", "Z"), default=None,
                   help="global cells (default 64 64 64)")
    g.add_argument("--blocks", type=integer(1, 1 << 24), default=None,
                   help="number of blocks (default: producer ranks)")
    g.add_argument("--steps", type=integer(1, 10**9), default=None, help="number of steps (default: t_end/dt)")
    g.add_argument("--dt", type=seconds(1e-12, 1e12), default=None, help="time step (default 0.01)")
    g.add_argument("--t-end", type=seconds(1e-12, 1e12), default=None, help="end time (default 10)")
    g.add_argument("--ghost-cells", type=integer(0, 64), default=None, help="ghost layers (default 1)")
    g.add_argument("--seed", type=int, default=None, help="random seed")
    g.add_argument("--particles", type=int, default=None,
                   help="particles advected by the field, published as mesh 'particles' (default 0; "
                   "negative: 64 per block)")


def oscillator_config(args: argparse.Namespace) -> Any:
    from h5flow.miniapps.oscillator import OscillatorConfig

    kw: dict[str, Any] = {}
    for name, key in (("deck", "deck"), ("blocks", "nblocks"), ("steps", "steps"), ("dt", "dt"),
                      ("t_end", "t_end"), ("ghost_cells", "ghost"), ("seed", "seed"), ("particles", "particles")):
        if getattr(args, name) is not None:
            kw[key] = getattr(args, name)
    if args.shape is not None:
        kw["shape"] = tuple(args.shape)
    return OscillatorConfig(**kw)


def oscillator_argv(args: argparse.Namespace) -> tuple[str, ...]:
    out: list[str] = []
    for name in ("deck", "blocks", "dt", "t_end", "ghost_cells", "seed", "particles"):
        v = getattr(args, name)
        if v is not None:
            out += [f"--{name.replace('_', '-')}", str(v)]
    if args.shape is not None:
        out += ["--shape", *map(str, args.shape)]
    return tuple(out)


def _load(path: Path) -> Any:
    from h5flow.xmlconfig import load

    cfg = load(path)
    t = cfg.transport()
    if t.mapped_from:
        print(f"h5flow: {t.source}: {t.mapped_from} is mapped to h5flow's {t.type} transport", file=sys.stderr)
    return cfg


def _mpi_main(fn: Any) -> int:
    """Run ``fn(comm)`` on COMM_WORLD; on error print it and abort the whole MPI job (no hang)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        fn(comm)
        return 0
    except Exception as e:  # noqa: BLE001 - reported, then the job is aborted
        print(f"h5flow (rank {comm.rank}): error: {e}", file=sys.stderr, flush=True)
        if os.environ.get("H5FLOW_DEBUG"):
            traceback.print_exc()
        if comm.size > 1:
            sys.stderr.flush()
            time.sleep(0.5)  # MPI_Abort tears the job down at once: mpiexec drops output it has not forwarded yet
            comm.Abort(1)
        return 1


def cmd_produce(args: argparse.Namespace) -> int:
    from h5flow.runner import produce

    cfg = _load(args.config)
    osc = oscillator_config(args)
    return _mpi_main(lambda comm: produce(comm, cfg, osc, args.record, args.progress_file))


def _with_analyses(cfg: Any, paths: list[Path] | None) -> Any:
    """Add the analyses of separate XML files (SENSEI's endpoint takes -t transport.xml -a analysis.xml)."""
    from h5flow.xmlconfig import load

    for p in paths or []:
        cfg.analyses.extend(load(p).analyses)
    return cfg


def cmd_consume(args: argparse.Namespace) -> int:
    from h5flow.runner import consume

    cfg = _with_analyses(_load(args.config), args.analysis)

    def body(comm: Any) -> None:
        part = consume(comm, cfg, args.timeout, args.record, args.progress_file)
        if comm.rank == 0 and not args.quiet:
            print(f"consumed {part['steps']} steps ({part['status']})")
    return _mpi_main(body)


def _summary(record: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="h5flow in-transit run", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    lat = record.get("latency") or {}
    settings = ", ".join(f"{k} {v}" for k, v in (record.get("settings") or {}).items())
    t.add_row("transport", f"{record['transport']} ({settings})" if settings else record["transport"])
    t.add_row("producers : consumers", f"{record['producers']} : {record['consumers']}")
    t.add_row("steps (published / consumed)", f"{record['producer']['published']} / {record['steps_consumed']}")
    t.add_row("bytes moved", f"{record['bytes'] / (1 << 20):.1f} MiB")
    t.add_row("time to solution", f"{record['time_to_solution']:.2f} s")
    t.add_row("throughput", f"{record['throughput_mib_s']:.0f} MiB/s")
    if lat:
        t.add_row("publish → visible", f"median {lat['median_s'] * 1e3:.2f} ms, p95 {lat['p95_s'] * 1e3:.2f} ms, "
                                       f"max {lat['max_s'] * 1e3:.2f} ms")
    if record["discarded"]:
        t.add_row("discarded", ", ".join(str(d[0]) for d in record["discarded"]))
    Console().print(t)
    for res in record["consumer"].get("last_results") or []:
        if isinstance(res, dict) and "counts" in res:
            lo, hi = res["range"]
            print(f"last histogram (step {res['step']}, {res['mesh']}/{res['array']}, range {lo:.4g} .. {hi:.4g}):")
            peak = max(max(res["counts"]), 1)
            edges = res["edges"]
            for i, c in enumerate(res["counts"]):
                print(f"  [{edges[i]:9.4g}, {edges[i + 1]:9.4g})  {c:9d}  {'#' * int(40 * c / peak)}")


def cmd_run(args: argparse.Namespace) -> int:
    from h5flow.runner import RunFailed, RunOptions, run

    _load(args.config)  # fail fast, with the file and line, before launching anything
    consumer_cfg = args.consumer_config or args.config
    _with_analyses(_load(consumer_cfg), args.analysis)
    try:
        record = run(RunOptions(args.config, args.producers, args.consumers, oscillator_argv(args), args.steps,
                                args.timeout, show_progress=sys.stderr.isatty() or args.progress,
                                consumer_config=args.consumer_config, analysis=tuple(args.analysis or ())))
    except RunFailed as e:
        if args.json:  # the record of a failed run: exit codes and what each job wrote
            args.json.write_text(json.dumps(e.record))
            print(f"run record (failed run): {args.json}", file=sys.stderr)
        raise
    _summary(record)
    if args.json:
        args.json.write_text(json.dumps(record))
        print(f"run record: {args.json}")
    return 0


def _demo_dir() -> Path:
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="h5flow-demo-", dir=base))


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil

    from h5flow.plot import plot_record
    from h5flow.runner import RunOptions, run

    stage = _demo_dir()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    config = out / "demo.xml"
    config.write_text(DEMO_XML.format(stream=stage / "stream", hist=out / "hist"))
    print(f"h5flow demo: oscillator {' '.join(map(str, args.shape))} on {args.producers} producer ranks → hdf5 "
          f"stream staged in {stage} → histogram on {args.consumers} consumer rank(s), {args.steps} steps")
    print(f"config: {config}")
    try:
        record = run(RunOptions(config, args.producers, args.consumers,
                                ("--shape", *map(str, args.shape)), args.steps, 120.0, workdir=stage,
                                show_progress=True))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _summary(record)
    rec = out / "run.json"
    rec.write_text(json.dumps(record))
    for p in plot_record(rec, out):
        print(f"plot: {p}")
    print(f"run record: {rec}; histograms: {out}/hist_mesh_data_<step>.txt")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from h5flow.plot import plot_record

    for p in plot_record(args.record, args.out):
        print(p)
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("produce", help="run the oscillator producer (under mpiexec -n M)",
                       description="Run SENSEI's oscillator on every rank of COMM_WORLD and publish each step "
                       "through the transport the XML configures. Launch with `mpiexec -n M h5flow produce ...`.")
    p.add_argument("config", type=Path, help="SENSEI-style XML (e.g. <analysis type=\"hdf5\" .../>)")
    add_oscillator_arguments(p)
    p.add_argument("--record", default=None, help="write the producer's part record (JSON) here")
    p.add_argument("--progress-file", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_produce)

    c = sub.add_parser("consume", help="run the consumer analyses (under mpiexec -n N)",
                       description="Read every step of the configured stream on the ranks of COMM_WORLD, "
                       "partition the blocks M:N and run the configured analyses (default: histogram).")
    c.add_argument("config", type=Path, help="SENSEI-style XML with <transport> and <analysis> elements")
    c.add_argument("--analysis", "-a", type=Path, action="append", default=None, metavar="XML",
                   help="XML file with <analysis> elements to run (repeatable; as SENSEIEndPoint -a)")
    c.add_argument("--timeout", type=TIMEOUT, default=60.0,
                   help="give up when no step arrives for this many seconds (default 60)")
    c.add_argument("--record", default=None, help="write the consumer's part record (JSON) here")
    c.add_argument("--progress-file", default=None, help=argparse.SUPPRESS)
    c.add_argument("--quiet", action="store_true", help="print nothing on success")
    c.set_defaults(func=cmd_consume)

    r = sub.add_parser("run", help="launch producers and consumers as two concurrent MPI jobs",
                       description="Launch `h5flow produce` on M ranks and `h5flow consume` on N ranks at once "
                       "(two mpiexec jobs, as the paper does) and report time to solution.")
    r.add_argument("config", type=Path, help="SENSEI-style XML (transport + analyses)")
    r.add_argument("--producers", "-M", type=RANKS, default=2, help="producer ranks (default 2)")
    r.add_argument("--consumers", "-N", type=RANKS, default=1, help="consumer ranks (default 1)")
    r.add_argument("--consumer-config", type=Path, default=None, metavar="XML",
                   help="the consumers' XML (<transport> with its <partitioner>); default: CONFIG")
    r.add_argument("--analysis", "-a", type=Path, action="append", default=None, metavar="XML",
                   help="XML file with the consumers' <analysis> elements (repeatable)")
    r.add_argument("--timeout", type=TIMEOUT, default=120.0, help="consumer step timeout in seconds (default 120)")
    r.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the run record here")
    r.add_argument("--progress", action="store_true", help="show progress bars even when not on a terminal")
    add_oscillator_arguments(r)
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="the embedded default in-transit run (what `make demo` runs)",
                       description="Oscillator on 2 producer ranks → hdf5 stream staged under /dev/shm → "
                       "histogram on 1 consumer rank; prints the summary and writes plots.")
    d.add_argument("--producers", type=RANKS, default=2, help="producer ranks (default 2)")
    d.add_argument("--consumers", type=RANKS, default=1, help="consumer ranks (default 1)")
    d.add_argument("--steps", type=integer(1, 10**9), default=40, help="steps (default 40)")
    d.add_argument("--shape", type=integer(1, 1 << 20), nargs=3, default=[128, 128, 128], metavar=("X", "Y", "Z"),
                   help="global cells (default 128 128 128: 8 MiB per step)")
    d.add_argument("--out", type=Path, default=Path("h5flow-demo"), help="output directory (default ./h5flow-demo)")
    d.set_defaults(func=cmd_demo)

    pl = sub.add_parser("plot", help="draw Fig. 3 (memory) and Fig. 4 (progress) of a run record",
                        description="Draw the paper's Fig. 3 and Fig. 4 from a run record written by "
                        "`h5flow run --json` or `h5flow demo`.")
    pl.add_argument("record", type=Path, help="run record (JSON)")
    pl.add_argument("--out", type=Path, default=None, help="output directory (default: beside the record)")
    pl.set_defaults(func=cmd_plot)
