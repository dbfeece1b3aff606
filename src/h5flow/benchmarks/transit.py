"""In-transit transports side by side: the paper's Table 1 design (Fig. 2-4) scaled to this machine.

For every producer count M and M:N ratio (N = M / ratio >= 1), and every transport (hdf5 on tmpfs, hdf5
on disk, socket, adios2 SST, adios2 BP5), the oscillator on M ranks publishes S steps of a fixed number of
bytes per rank (weak scaling) and a histogram runs on N ranks, through `h5flow run`'s runner: two
concurrent mpiexec jobs. Each configuration is repeated R times; the median time to solution is
reported with the bytes moved, the peak RSS of every rank, the publish → visible latency and the time
spent inside the transport (write + read; a rank waiting for another rank's compute or analysis is not
counted, on either side: docs/STREAM.md). In the same run it measures the references:

* ``adios2-sst-plain`` / ``adios2-bp5-plain``: a plain ADIOS2 writer/reader pair moving the same bytes per
  step with no h5flow code in between (:mod:`h5flow.benchmarks.adios2_plain`), M writers and N readers;
* the null transport (``h5flow.transports.null``): the oscillator and the analysis in one job of M ranks, the analysis reading the
  producer's blocks in place (zero copies, nothing moved), the fastest of at least three runs; every row's
  time to solution ÷ this;
* the physical bound: a raw POSIX write + read of the same bytes in the same directory, one new file per
  rank and step, from and into page-aligned buffers (every row's time inside the transport ÷ this); on tmpfs
  also with the files read by mapping them (``mmap`` populated, then unmapped), the bound of a reader that
  maps as the hdf5 consumers do there (``map_reads``); and a memcpy of them, each the fastest of three tries.

The 1-minute load average is printed at the start and the end; a busy machine (load ≥ half the cores,
at least 1) is warned about, since the rows then measure the other jobs as much as the transports.

Outputs (in --out): transit.csv, transit.json, records/ (one run record per run), fig2-left.png
(time vs M at one ratio), fig2-right.png (hdf5 vs socket vs SST over all configurations),
fig3-memory-<transport>.png and fig4-progress-<transport>-<ratio>.png. With several ``--mib-per-rank`` sizes (a
sweep) each size's outputs go to <size>MiB/ and the sweep's to sweep.csv, sweep.json and sweep.png (each
transport's ratios to POSIX and to the plain ADIOS2 pair against the size; its worst cell printed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from h5flow.miniapps.oscillator import oscillator_shape  # noqa: F401 - used here and re-exported
from h5flow.testing.matrix import ADIOS2_ENGINES, HDF5_LAYOUTS, TransportCase
from h5flow.testing.matrix import case as matrix_case

MIB = 1 << 20
#: hdf5 on memory and on disk (its layout from --hdf5-layout), then the matrix's socket and adios2 cases, then
#: the plain ADIOS2 references of each engine
PLAIN = tuple(f"adios2-{e}-plain" for e in ADIOS2_ENGINES)  # references: plain ADIOS2, no h5flow code
TRANSPORTS = ("hdf5-tmpfs", "hdf5-disk", "socket", *(f"adios2-{e}" for e in ADIOS2_ENGINES), *PLAIN)
#: a layout name with this suffix runs that layout with async_write="false": steps written inside end_step
SYNC = "-sync"
#: a layout name with this suffix runs that layout with map_reads="false": consumers copy every block out of
#: the page cache instead of mapping the large ones (n-n; docs/STREAM.md "Mapped reads")
COPY = "-copy"
#: layout n-n with each rank file written through a connector stack (vol_stack, docs/STREAM.md "Connector
#: stack"): h5flow_async alone, h5flow_cache over h5flow_async (the cache in the run's tmpfs directory)
VOL_STACKS = {"-vol-async": ' vol_stack="async"', "-vol-cache-async": ' vol_stack="cache,async"'}
#: --async-staging: the in-transit comparison of async staging against the plain write thread, at 4:1
ASYNC_STAGING = {"producers": [4], "ratios": [4], "mib_per_rank": [2.0], "steps": 4, "reps": 1}
ASYNC_STAGING_LAYOUTS = ["n-n", *(f"n-n{k}" for k in VOL_STACKS)]
DEFAULT_LAYOUT = "n-n"  # the hdf5 transport's own default (docs/STREAM.md, "The default is n-n")
QUICK = {"producers": [2], "ratios": [1, 2], "mib_per_rank": [1.0], "steps": 3, "reps": 1}


@dataclass
class Row:
    transport: str
    producers: int
    consumers: int
    ratio: int
    bytes_per_rank_step: int
    steps: int
    reps: int
    time_to_solution: float  # median over reps (s)
    time_to_solution_all: list[float]
    transport_seconds: float  # median of (write + read time inside the transport)
    bytes: int  # bytes moved per run (all ranks, all steps)
    peak_rss_bytes: int  # largest peak RSS of any rank
    peak_rss_producer_bytes: int
    peak_rss_consumer_bytes: int
    latency_median_s: float  # publish → visible
    posix_write_read_s: float  # raw POSIX write + read of the same bytes in the same directory
    memcpy_s: float
    directory: str
    time_to_solution_min: float = 0.0
    time_to_solution_max: float = 0.0
    peak_rss_producer_ranks: list[int] = field(default_factory=list)  # each producer rank's peak (first rep)
    peak_rss_consumer_ranks: list[int] = field(default_factory=list)
    rss_growth_producer_bytes: int = 0  # largest producer rank's peak RSS, second half of its steps - first
    null_time_to_solution: float | None = None  # the in-process null transport, same M
    vs_null: float | None = None  # time_to_solution / null_time_to_solution
    vs_sst: float | None = None  # time_to_solution / adios2-sst's, same configuration
    vs_sst_plain: float | None = None  # time_to_solution / adios2-sst-plain's
    transport_vs_plain: float | None = None  # adios2 rows: transport_seconds / the plain pair's, same engine
    inside_vs_sst_plain: float | None = None  # transport_seconds / adios2-sst-plain's, same configuration
    overhead_vs_posix: float | None = None  # transport_seconds / posix_write_read_s
    record: str = ""
    # seconds per step in each phase of the transport (hdf5, socket: --breakdown): per step the slowest rank's, then
    # the mean over the steps, median over the repetitions
    phases_producer: dict[str, float] = field(default_factory=dict)
    phases_consumer: dict[str, float] = field(default_factory=dict)


def busy_load() -> float:
    """The 1-minute load average from which the machine counts as busy: half its cores, at least 1."""
    return max(1.0, (os.cpu_count() or 1) / 2)


@dataclass
class Plan:
    producers: list[int]
    ratios: list[int]
    bytes_per_rank: int
    steps: int
    reps: int
    transports: list[str]
    tmpfs: Path
    disk: Path
    out: Path
    queue_limit: int
    timeout: float
    hdf5_layout: str = DEFAULT_LAYOUT
    # further hdf5 layouts run beside the first, as rows "<transport>:<layout>" (e.g. hdf5-tmpfs:log)
    hdf5_more_layouts: list[str] = field(default_factory=list)
    breakdown: bool = False
    # the sweep: bytes per producer rank per step of every size run (bytes_per_rank: the size being run)
    sizes: list[int] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: list[dict[str, Any]] = field(default_factory=list)  # reference rows left out after PLAIN_ATTEMPTS
    load_start: list[float] = field(default_factory=list)  # os.getloadavg() before the first run
    load_end: list[float] = field(default_factory=list)
    # --quick: Fig. 3 and Fig. 4 of the first transport run only (each figure's code is drawn once; the 13 of
    # every transport took about a third of the quick run)
    figures_of_first_transport: bool = False

    def busy(self) -> bool:
        """True when the 1-minute load average at the start or the end was at least half the cores (min 1)."""
        limit = busy_load()
        return any(load and load[0] >= limit for load in (self.load_start, self.load_end))

    def configurations(self) -> list[tuple[int, int, int]]:
        """(M, N, ratio) with N = M / ratio a whole number >= 1."""
        return [(m, m // r, r) for m in self.producers for r in self.ratios if m % r == 0 and m // r >= 1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--producers", "-M", type=int, nargs="+", default=[2, 4, 8], metavar="M",
                   help="producer rank counts (default 2 4 8)")
    p.add_argument("--ratios", type=int, nargs="+", default=[1, 2, 4, 8], metavar="R",
                   help="M:N ratios; N = M/R, only whole N >= 1 are run (default 1 2 4 8)")
    p.add_argument("--mib-per-rank", type=float, nargs="+", default=[32.0], metavar="MIB",
                   help="MiB each producer rank publishes per step (default 32); several sizes make a sweep: every "
                        "size is run in full (its outputs in OUT/<size>MiB/), then the ratios to POSIX and to the "
                        "plain ADIOS2 pair are printed per size, with each transport's worst cell, and plotted "
                        "against the size (sweep.png, sweep.csv, sweep.json in OUT)")
    p.add_argument("--steps", "-S", type=int, default=10, help="steps per run (default 10)")
    p.add_argument("--reps", "-R", type=int, default=3,
                   help="repetitions; the median is reported with the min-max range (default 3)")
    p.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS), metavar="T",
                   help=f"transports to run (default all: {' '.join(TRANSPORTS)})")
    p.add_argument("--tmpfs-dir", type=Path, default=None,
                   help="memory-backed directory for hdf5-tmpfs, socket/adios2 names and BP5 (default /dev/shm)")
    p.add_argument("--disk-dir", type=Path, default=None,
                   help="disk directory for hdf5-disk, the paper's Lustre column (default /var/tmp)")
    p.add_argument("--queue-limit", type=int, default=4,
                   help="unreleased steps a producer may run ahead, every transport (default 4; 0 = unlimited)")
    p.add_argument("--hdf5-layout", choices=[*HDF5_LAYOUTS, *(x + SYNC for x in HDF5_LAYOUTS), "n-n" + COPY,
                                             *(f"n-n{k}" for k in VOL_STACKS)],
                   nargs="+",
                   default=[DEFAULT_LAYOUT], metavar="L",
                   help="hdf5 transport layouts: n-1 (one shared file per step, SENSEI's), n-n (one file per "
                        "producer rank), log (one h5flow_log container per step), each also as <layout>-sync "
                        "(async_write=\"false\": the step is written inside end_step, not on the write thread), and n-n-copy "
                        "(map_reads=\"false\": consumers copy every block instead of mapping the large ones), "
                        "n-n-vol-async and n-n-vol-cache-async (vol_stack=\"async\" and \"cache,async\": each rank "
                        "file written through h5flow_async, or h5flow_cache over it); "
                        "the first is the hdf5 rows' layout, each further one adds rows named "
                        "<transport>:<layout> measured in the same run "
                        f"(default {DEFAULT_LAYOUT}, the transport's own default, with its write thread)")
    p.add_argument("--breakdown", action="store_true",
                   help="print where each hdf5, socket and adios2 row's time goes: seconds per step in each phase of the "
                        "producer (hdf5: wait: for the previous step's write thread, gather, admit, copy; then, on the "
                        "write thread with async_write, reserve, prepare, create, metadata, write, flush, agree, "
                        "close, meta.json, publish, collect: deleting released steps; socket: gather, admit, copy, "
                        "agree, publish; adios2: gather, begin, put, end: ADIOS2's EndStep) and the consumer (discover, "
                        "open, meta, read: for socket the blocks arriving, for adios2 the payload's Get and "
                        "PerformGets, exchange: blocks handed between consumer ranks, close, barrier: waiting for "
                        "the other consumer ranks at release, release)")
    p.add_argument("--timeout", type=float, default=120.0, help="consumer step timeout in seconds (default 120)")
    p.add_argument("--out", type=Path, default=Path("h5flow-transit"), help="output directory (default ./h5flow-transit)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the results JSON here")
    p.add_argument("--async-staging", action="store_true",
                   help="the in-transit comparison of async staging: 4 producers to 1 consumer, hdf5 on tmpfs and "
                        f"disk, layouts {' '.join(ASYNC_STAGING_LAYOUTS)} side by side (the write thread, "
                        "h5flow_async, h5flow_cache over h5flow_async), 2 MiB per rank, 4 steps, 1 repetition "
                        "(each one given explicitly wins); staging.png")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke preset: M=2, ratios 1 and 2, 1 MiB per rank, 3 steps, 1 repetition; Fig. 3 and Fig. 4 "
                        "of the first transport only")


def _default_tmpfs() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _default_disk() -> Path:
    return Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path(tempfile.gettempdir())


def matrix_entry(transport: str) -> TransportCase:
    """The matrix case a benchmark transport runs (hdf5-tmpfs and hdf5-disk: the hdf5 one of the default layout;
    a plain reference: its engine's adios2 case)."""
    if transport.startswith("hdf5"):
        return matrix_case(f"hdf5-{DEFAULT_LAYOUT}")
    return matrix_case(transport.removesuffix("-plain"))


def _unavailable(transport: str) -> str | None:
    """Why a transport cannot run here (None: it can)."""
    return matrix_entry(transport).missing()


def make_plan(args: argparse.Namespace) -> Plan:
    if getattr(args, "async_staging", False):
        for k, v in ASYNC_STAGING.items():
            if getattr(args, k) == _DEFAULTS[k]:
                setattr(args, k, v)
        if args.hdf5_layout == [DEFAULT_LAYOUT]:
            args.hdf5_layout = list(ASYNC_STAGING_LAYOUTS)
        if args.transports == list(TRANSPORTS):
            args.transports = ["hdf5-tmpfs", "hdf5-disk"]
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) == _DEFAULTS[k]:
                setattr(args, k, v)
    for name in ("steps", "reps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1")
    if any(x <= 0 for x in args.mib_per_rank) or any(m < 1 for m in args.producers) or any(r < 1 for r in args.ratios):
        raise ValueError("--mib-per-rank, --producers and --ratios must be positive")
    sizes = sorted({int(x * MIB) for x in args.mib_per_rank})
    plan = Plan(sorted(set(args.producers)), sorted(set(args.ratios)), sizes[0], args.steps,
                args.reps, list(dict.fromkeys(args.transports)), args.tmpfs_dir or _default_tmpfs(),
                args.disk_dir or _default_disk(), args.out, args.queue_limit, args.timeout, args.hdf5_layout[0],
                list(dict.fromkeys(x for x in args.hdf5_layout[1:] if x != args.hdf5_layout[0])), args.breakdown,
                sizes)
    plan.figures_of_first_transport = args.quick
    if not plan.configurations():
        raise ValueError("no configuration: every ratio leaves N < 1 or a fraction; give ratios that divide M")
    for d in (plan.tmpfs, plan.disk):
        if not d.is_dir():
            raise ValueError(f"directory {d} does not exist")
    for t in plan.transports:
        why = _unavailable(t)
        if why:
            plan.skipped[t] = why
    return plan


_DEFAULTS = {"producers": [2, 4, 8], "ratios": [1, 2, 4, 8], "mib_per_rank": [32.0], "steps": 10, "reps": 3}


# -- the producer's data size ------------------------------------------------------------------------

# -- the physical bound ---------------------------------------------------------------------------

def posix_write_read(directory: Path, chunk: int, count: int, mapped: bool = False) -> float:
    """Seconds to write ``count`` files of ``chunk`` bytes into ``directory`` and read them back (one process).
    ``mapped``: read each file by mapping it (``mmap`` with ``MAP_POPULATE``, then unmapped) instead of copying
    it: the bound of a reader that maps, as the hdf5 transport's consumers do on tmpfs (``map_reads``).

    Both buffers are page-aligned (:func:`page_aligned`), as the file offsets are: the kernel's copy between
    a buffer and the page cache is fastest when the two have the same alignment, and on some CPUs several
    times slower when the destination lies 1-31 bytes past the source modulo 4 KiB. Measured on the AMD
    EPYC development VM: 8 MiB read from offset 0 into a ``bytearray`` (its data 16 bytes into a page) in
    4.6-6.4 ms, into a page-aligned buffer in 1.5-1.9 ms. A bound at its best takes the fast case."""
    import mmap

    import numpy as np

    buf = page_aligned(chunk)
    step = min(chunk, MIB)
    for o in range(0, chunk, step):
        buf[o:o + step] = np.frombuffer(os.urandom(min(step, chunk - o)), dtype=np.uint8)
    back = page_aligned(chunk)
    d = Path(tempfile.mkdtemp(prefix="h5flow-posix-", dir=directory))
    try:
        t0 = time.perf_counter()
        for i in range(count):
            fd = os.open(d / f"{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, buf)
            finally:
                os.close(fd)
        for i in range(count):
            with open(d / f"{i}", "rb", buffering=0) as f:
                if mapped:
                    mmap.mmap(f.fileno(), chunk, flags=mmap.MAP_PRIVATE | mmap.MAP_POPULATE,
                              prot=mmap.PROT_READ).close()
                else:
                    f.readinto(back)
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def page_aligned(nbytes: int) -> Any:
    """A writable uint8 array of ``nbytes`` whose first byte starts a page (anonymous ``mmap``)."""
    import mmap

    import numpy as np

    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)[:nbytes]


BOUND_TRIES = 3  # the physical bounds are measured this many times; the fastest is the bound


def _best(measure: Callable[[], float], tries: int = BOUND_TRIES) -> float:
    """The fastest of ``tries`` measurements (a bound is what the machine can do, not what it did once)."""
    return min(measure() for _ in range(tries))


def memcpy(chunk: int, count: int) -> float:
    import numpy as np

    src = np.ones(chunk, dtype=np.uint8)
    dst = np.empty_like(src)
    t0 = time.perf_counter()
    for _ in range(count):
        np.copyto(dst, src)
    return time.perf_counter() - t0


# -- one run ----------------------------------------------------------------------------------------

def transport_xml(transport: str, stream: str, queue_limit: int, hdf5_layout: str = DEFAULT_LAYOUT,
                  cache_dir: str = "") -> str:
    """The run's XML; ``cache_dir``: h5flow_cache's directory for the layouts that stack it (the tmpfs)."""
    if transport.startswith("hdf5"):
        layout, more = hdf5_layout, ""
        for suffix, setting in ((SYNC, ' async_write="false"'), (COPY, ' map_reads="false"'), *VOL_STACKS.items()):
            if layout.endswith(suffix):
                layout, more = layout[: -len(suffix)], setting
        if "cache" in more and cache_dir:
            more += f' cache_path="{cache_dir}"'
        el = (f'<transport type="hdf5" filename="{stream}" method="stream" layout="{layout}" '
              f'queue_limit="{queue_limit}"{more}/>')
    elif transport == "socket":
        el = f'<transport type="socket" filename="{stream}" queue_limit="{queue_limit}"/>'
    else:
        engine = matrix_entry(transport).settings["engine"]
        el = f'<transport type="adios2" engine="{engine}" filename="{stream}" buffer_size="{queue_limit}"/>'
    return (f"<sensei>\n  {el}\n"
            '  <analysis type="histogram" mesh="mesh" array="data" association="cell" bins="10"/>\n</sensei>\n')


def split_layout(transport: str, default: str = DEFAULT_LAYOUT) -> tuple[str, str]:
    """``hdf5-tmpfs:log`` → (``hdf5-tmpfs``, ``log``); a name without a layout has ``default``."""
    name, _, layout = transport.partition(":")
    return name, layout or default


def with_layouts(plan: Plan, transports: list[str]) -> list[str]:
    """The transports to run: each hdf5 one followed by its rows of the further layouts."""
    return [v for t in transports for v in [t, *(f"{t}:{lay}" for lay in plan.hdf5_more_layouts
                                                 if t.startswith("hdf5"))]]


PLAIN_ATTEMPTS = 3  # tries of a plain ADIOS2 pair before its row is given up (SST's rendezvous can fail)


class PlainPairFailed(RuntimeError):
    """A plain ADIOS2 reference pair failed every attempt: its row is left out and reported."""


def run_one(plan: Plan, transport: str, m: int, n: int, rep: int) -> dict[str, Any]:
    from h5flow.runner import RunOptions, run

    label = transport
    transport, layout = split_layout(transport, plan.hdf5_layout)
    base = plan.disk if transport == "hdf5-disk" else plan.tmpfs
    work = Path(tempfile.mkdtemp(prefix=f"h5flow-transit-{transport}-", dir=base))
    if transport in PLAIN:
        from h5flow.benchmarks.adios2_plain import run_pair

        failures: list[str] = []
        try:
            while True:  # a reference: ADIOS2's own rendezvous failures are retried (and reported), not ours
                attempt = work / f"try{len(failures)}"
                attempt.mkdir()
                try:
                    record = run_pair(str(attempt / "stream"), transport.split("-")[1], m, n, plan.bytes_per_rank,
                                      plan.steps, plan.queue_limit, plan.timeout)
                    break
                except RuntimeError as e:
                    failures.append(str(e))
                    if len(failures) >= PLAIN_ATTEMPTS:
                        raise PlainPairFailed(f"{transport} {m}:{n}: {len(failures)} attempts failed: "
                                              + " | ".join(failures)) from e
                    print(f"h5flow bench transit: {transport} {m}:{n} failed ({e}); trying again", file=sys.stderr)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        record["failed_attempts"] = failures
        record["bench_transport"] = transport
        record["directory"] = str(base)
        return record
    try:
        config = work / "config.xml"
        config.write_text(transport_xml(transport, str(work / "stream"), plan.queue_limit, layout, str(plan.tmpfs)))
        shape = oscillator_shape(plan.bytes_per_rank, m)
        osc = ("--shape", *map(str, shape), "--blocks", str(m), "--ghost-cells", "0")
        record = run(RunOptions(config, m, n, osc, plan.steps, plan.timeout, workdir=work, show_progress=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["bench_transport"] = label
    record["directory"] = str(base)
    return record


# -- the null transport (h5flow.transports.null): producer and analysis in one job -----------------------

def null_job(shape: tuple[int, int, int], steps: int) -> dict[str, Any]:
    """One rank of the null run (under ``mpiexec -n M``): oscillator step, then the histogram on its blocks,
    handed over by the null transport (the producer's own arrays, in this process)."""
    from mpi4py import MPI

    from h5flow.analyses import make_analysis
    from h5flow.config import TransportConfig
    from h5flow.miniapps.oscillator import OscillatorConfig, Simulation
    from h5flow.runner import default_analysis
    from h5flow.transports import StepStatus, open_reader, open_writer

    comm = MPI.COMM_WORLD
    start = time.time()
    sim = Simulation(OscillatorConfig(shape=shape, nblocks=comm.size, ghost=0, steps=steps), comm.rank, comm.size)
    analysis = make_analysis(default_analysis())
    analysis.initialize(comm)
    cfg = TransportConfig(type="null", filename="bench-transit-null")
    writer = open_writer(comm, cfg)
    reader = open_reader(comm, cfg)
    for s in range(sim.num_steps()):
        t = sim.advance(s)
        writer.begin_step(s, t)
        for b in sim.blocks():
            writer.put("mesh", b)
        writer.end_step()
        got = reader.begin_step(0)
        if got.status is not StepStatus.OK or got.step is None:
            raise RuntimeError(f"null transport: step {s} not delivered ({got.status.value}: {got.reason})")
        analysis.execute(got.step)
        reader.release()
    writer.close()
    reader.close()
    analysis.finalize()
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ends = comm.gather((time.time(), peak), root=0)
    return {"start": start, "end": max(e for e, _ in ends), "peak_rss": [p for _, p in ends]} if ends else {}


def run_null(plan: Plan, m: int) -> float:
    """Seconds from launching the null job on ``m`` ranks to its end (the h5flow rows' time to solution ÷ this)."""
    import subprocess

    shape = oscillator_shape(plan.bytes_per_rank, m)
    launched = time.time()
    proc = subprocess.run(["mpiexec", "-n", str(m), sys.executable, "-m", "h5flow.benchmarks.transit", "null",
                           *map(str, shape), str(plan.steps)], capture_output=True, text=True,
                          timeout=plan.timeout + 60 * plan.steps)
    if proc.returncode != 0:
        raise RuntimeError(f"null-transport run on {m} ranks failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(out["end"]) - launched


def _peak(part: dict[str, Any]) -> int:
    return max((max(s[1] for s in r["rss"]) for r in part["ranks"] if r["rss"]), default=0)


def _rank_peaks(part: dict[str, Any]) -> list[int]:
    return [max((s[1] for s in r["rss"]), default=0) for r in sorted(part["ranks"], key=lambda r: r.get("rank", 0))]


def _rss_growth(part: dict[str, Any]) -> int:
    """Largest growth of a producer rank's peak RSS from the first half of its steps to the second: memory
    held per step keeps growing, while a transport's bounded queue is full by mid-run (``queue_limit`` steps)."""
    worst = 0
    for r in part["ranks"]:
        io = r.get("io") or []
        if len(io) < 2 or not r["rss"]:
            continue
        mid = io[len(io) // 2 - 1][2]  # the end of the first half's last step
        early = [b for t, b in r["rss"] if t <= mid]
        late = [b for t, b in r["rss"] if t > mid]
        if early and late:
            worst = max(worst, max(late) - max(early))
    return worst


def rss_growth_limit(bytes_per_rank_step: int) -> int:
    """Growth beyond this is reported: two steps' bytes, at least 32 MiB (allocator and import noise)."""
    return max(2 * bytes_per_rank_step, 32 * MIB)


def summarize(plan: Plan, transport: str, m: int, n: int, records: list[dict[str, Any]], bound: dict[str, float],
              record_path: str) -> Row:
    tts = [r["time_to_solution"] for r in records]
    tsec = [r["transport_seconds"]["write"] + r["transport_seconds"]["read"] for r in records]
    peak_p = max(_peak(r["producer"]) for r in records)
    peak_c = max(_peak(r["consumer"]) for r in records)
    lat = [r["latency"].get("median_s", float("nan")) for r in records if r.get("latency")]
    posix = bound["posix_disk"] if transport.startswith("hdf5-disk") else bound["posix_tmpfs"]
    med = statistics.median(tsec)
    return Row(transport, m, n, m // n, plan.bytes_per_rank, plan.steps, len(records), statistics.median(tts), tts,
               med, int(records[0]["bytes"]), max(peak_p, peak_c), peak_p, peak_c,
               statistics.median(lat) if lat else float("nan"), posix, bound["memcpy"],
               records[0]["directory"], time_to_solution_min=min(tts), time_to_solution_max=max(tts),
               peak_rss_producer_ranks=_rank_peaks(records[0]["producer"]),
               peak_rss_consumer_ranks=_rank_peaks(records[0]["consumer"]),
               rss_growth_producer_bytes=max(_rss_growth(r["producer"]) for r in records),
               null_time_to_solution=bound.get("null"),
               vs_null=statistics.median(tts) / bound["null"] if bound.get("null") else None,
               overhead_vs_posix=med / posix if posix > 0 else None, record=record_path,
               phases_producer=_median_phases([phase_seconds(r["producer"]) for r in records]),
               phases_consumer=_median_phases([phase_seconds(r["consumer"]) for r in records]))


def phase_seconds(part: dict[str, Any]) -> dict[str, float]:
    """Seconds per step in each phase of one side of a run: per step the slowest rank's, mean over steps
    (from the ``phases`` of the ranks' events; empty for transports that do not record them)."""
    per_step: dict[int, dict[str, float]] = {}
    for r in part.get("ranks", []):
        for e in r.get("events") or []:
            for name, sec in (e.get("phases") or {}).items():
                cur = per_step.setdefault(int(e["step"]), {})
                cur[name] = max(cur.get(name, 0.0), float(sec))
    if not per_step:
        return {}
    names = sorted({k for ph in per_step.values() for k in ph})
    return {k: sum(ph.get(k, 0.0) for ph in per_step.values()) / len(per_step) for k in names}


def _median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    names = sorted({k for r in runs for k in r})
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in names}


# -- outputs ---------------------------------------------------------------------------------------

def write_outputs(plan: Plan, rows: list[Row], bounds: dict[tuple[int, int], dict[str, float]],
                  json_path: Path | None) -> list[Path]:
    out = plan.out
    by_cfg: dict[tuple[int, int], dict[str, Row]] = {}
    for r in rows:
        by_cfg.setdefault((r.producers, r.consumers), {})[r.transport] = r
    for cfg_rows in by_cfg.values():
        sst, plain = cfg_rows.get("adios2-sst"), cfg_rows.get("adios2-sst-plain")
        for r in cfg_rows.values():
            r.vs_sst = r.time_to_solution / sst.time_to_solution if sst and sst.time_to_solution > 0 else None
            r.vs_sst_plain = (r.time_to_solution / plain.time_to_solution
                              if plain and plain.time_to_solution > 0 else None)
            ref = cfg_rows.get(f"{r.transport}-plain")
            if ref is not None and ref.transport_seconds > 0:
                r.transport_vs_plain = r.transport_seconds / ref.transport_seconds
            if plain is not None and plain.transport_seconds > 0:
                r.inside_vs_sst_plain = r.transport_seconds / plain.transport_seconds
    dicts = [asdict(r) for r in rows]
    csv_path = out / "transit.csv"
    with open(csv_path, "w", newline="") as f:
        cols = [k for k in dicts[0] if k != "time_to_solution_all"] if dicts else []
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(dicts)
    doc = {"benchmark": "transit", "machine": {"cpus": os.cpu_count(), "host": os.uname().nodename},
           "load_average": {"start": plan.load_start, "end": plan.load_end, "busy": plan.busy()},
           "plan": {"producers": plan.producers, "ratios": plan.ratios, "bytes_per_rank_step": plan.bytes_per_rank,
                    "steps": plan.steps, "reps": plan.reps, "queue_limit": plan.queue_limit,
                    "hdf5_layout": plan.hdf5_layout, "hdf5_more_layouts": plan.hdf5_more_layouts,
                    "tmpfs": str(plan.tmpfs), "disk": str(plan.disk)},
           "skipped": [{"transport": t, "reason": why} for t, why in plan.skipped.items()],
           "failed": plan.failed,
           "bounds": [{"producers": m, "consumers": n, **b} for (m, n), b in bounds.items()],
           "results": dicts}
    return [csv_path, *_write_json(doc, out / "transit.json", json_path)]


def _write_json(doc: dict[str, Any], path: Path, copy: Path | None) -> list[Path]:
    """``doc`` as JSON at ``path`` and, when given, at ``copy`` (``--json``); the paths written."""
    paths = [path, *([copy] if copy is not None else [])]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, indent=1))
    return paths


def _plt() -> Any:
    from h5flow.plot import _plt as plt

    return plt()


def fig2(plan: Plan, rows: list[Row]) -> list[Path]:
    plt = _plt()
    paths = []
    ratios = sorted({r.ratio for r in rows})
    # LEFT: time vs M at one ratio (the one with the most producer counts; the larger on ties)
    ratio = max(ratios, key=lambda q: (len({r.producers for r in rows if r.ratio == q}), q))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for t in TRANSPORTS:
        pts = sorted((r.producers, r.time_to_solution) for r in rows if r.transport == t and r.ratio == ratio)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t)
    ax.set_xlabel("producer ranks M")
    ax.set_ylabel("time to solution (s), median")
    ax.set_xticks(sorted({r.producers for r in rows}))
    ax.set_title(f"Fig. 2 left: M:N = {ratio}:1, {plan.bytes_per_rank / MIB:g} MiB/rank/step, {plan.steps} steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(plan.out / "fig2-left.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    # RIGHT: hdf5 vs socket vs SST over every configuration
    cfgs = sorted({(r.producers, r.consumers) for r in rows})
    shown = [t for t in ("hdf5-tmpfs", "socket", "adios2-sst") if any(r.transport == t for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(cfgs) + 2), 4.2))
    width = 0.8 / max(1, len(shown))
    for k, t in enumerate(shown):
        vals = {(r.producers, r.consumers): r.time_to_solution for r in rows if r.transport == t}
        xs = [i + k * width for i, c in enumerate(cfgs) if c in vals]
        ax.bar(xs, [vals[c] for c in cfgs if c in vals], width=width, label=t)
    ax.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(cfgs))])
    ax.set_xticklabels([f"{m}:{n}" for m, n in cfgs])
    ax.set_xlabel("M:N")
    ax.set_ylabel("time to solution (s), median")
    ax.set_title("Fig. 2 right: hdf5 (tmpfs) vs socket vs ADIOS2 SST")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(plan.out / "fig2-right.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def staging_figure(plan: Plan, rows: list[Row]) -> list[Path]:
    """``staging.png``: each hdf5 row's layouts side by side (time to solution, and its ratio to the first
    layout's), per configuration; drawn when more than one layout ran."""
    if not plan.hdf5_more_layouts:
        return []
    plt = _plt()
    layouts = [plan.hdf5_layout, *plan.hdf5_more_layouts]
    groups = [(base, m, n) for base in ("hdf5-tmpfs", "hdf5-disk") for m, n in
              sorted({(r.producers, r.consumers) for r in rows}) if _cell(rows, base, m, n)]
    if not groups:
        return []
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(groups) * len(layouts) / 2, 4.2))
    width = 0.8 / len(layouts)
    for i, layout in enumerate(layouts):
        xs, ys = [], []
        for g, (base, m, n) in enumerate(groups):
            r = _cell(rows, base if i == 0 else f"{base}:{layout}", m, n)
            if r is not None:
                xs.append(g + i * width)
                ys.append(r.time_to_solution)
        bars = ax.bar(xs, ys, width, label=layout)
        for g, (bar_, (base, m, n)) in enumerate(zip(bars, groups)):
            first = _cell(rows, base, m, n)
            if first is not None and first.time_to_solution > 0:
                ax.annotate(f"{bar_.get_height() / first.time_to_solution:.2f}x", (bar_.get_x() + width / 2,
                            bar_.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_xticks([g + width * (len(layouts) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{base}\n{m}:{n}" for base, m, n in groups], fontsize=8)
    ax.set_ylabel("time to solution (s), median")
    ax.set_title(f"hdf5 layouts side by side, {plan.bytes_per_rank / MIB:g} MiB/rank/step, {plan.steps} steps "
                 f"(ratio to {plan.hdf5_layout})", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = plan.out / "staging.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def fig3_fig4(plan: Plan, rows: list[Row]) -> list[Path]:
    from h5flow.plot import fig3_memory, fig4_progress

    paths = []
    m = max(r.producers for r in rows)
    at_m = [r for r in rows if r.producers == m]
    if plan.figures_of_first_transport:
        at_m = [r for r in at_m if r.transport == at_m[0].transport]
    hi, lo = max(r.ratio for r in at_m), min(r.ratio for r in at_m)
    for r in at_m:
        rec = json.loads(Path(r.record).read_text())
        if r.ratio == hi:
            paths.append(fig3_memory(rec, plan.out / f"fig3-memory-{r.transport.replace(':', '-')}.png"))
        if r.ratio in (hi, lo) and r.transport in ("hdf5-tmpfs", "socket", "adios2-sst"):
            paths.append(fig4_progress(rec, plan.out / f"fig4-progress-{r.transport}-{r.producers}to{r.consumers}.png"))
    return paths


def _cell(rows: list[Row], name: str, m: int, n: int) -> Row | None:
    return next((x for x in rows if x.transport == name and (x.producers, x.consumers) == (m, n)), None)


def _matrix(title: str, rows: list[Row], shown: list[str], cfgs: list[tuple[int, int]], cell: Any,
            extra: tuple[list[str], Any] | None = None) -> Any:
    """A table of M:N rows and one column per transport; ``cell(row)`` formats a present run, "-" marks an
    absent one; ``extra`` = (column names, ``(m, n) -> cells``) adds columns after the transports'."""
    from rich.table import Table

    tab = Table(title=title)
    tab.add_column("M:N", justify="right")
    for name in shown + (extra[0] if extra else []):
        tab.add_column(name, justify="right")
    for m, n in cfgs:
        cells = [("-" if (r := _cell(rows, name, m, n)) is None else cell(r)) for name in shown]
        tab.add_row(f"{m}:{n}", *cells, *(extra[1](m, n) if extra else []))
    return tab


def print_summary(plan: Plan, rows: list[Row], bounds: dict[tuple[int, int], dict[str, float]]) -> None:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    shown = list(dict.fromkeys(r.transport for r in rows))  # in the order they ran (layout rows beside theirs)
    cfgs = sorted({(r.producers, r.consumers) for r in rows})
    spread = f"median [min–max] of {plan.reps}" if plan.reps > 1 else "one repetition"

    def tts(r: Row) -> str:
        rng = f" [{r.time_to_solution_min:.2f}–{r.time_to_solution_max:.2f}]" if r.reps > 1 else ""
        return f"{r.time_to_solution:.2f}{rng}" + (f" ({r.vs_sst:.2f}×)" if r.vs_sst is not None else "")

    def bound_cells(m: int, n: int) -> list[str]:
        b = bounds[(m, n)]
        mapped = f" (map {b['posix_tmpfs_map']:.3f})" if "posix_tmpfs_map" in b else ""
        return [f"{b['null']:.2f}", f"{b['posix_tmpfs']:.3f}{mapped} / {b['posix_disk']:.3f}", f"{b['memcpy']:.3f}"]

    def vs_null(r: Row) -> str:
        vn = "-" if r.vs_null is None else f"{r.vs_null:.2f}×"
        return vn + ("" if r.vs_sst_plain is None else f" / {r.vs_sst_plain:.2f}×")

    def inside(r: Row) -> str:
        txt = f"{r.transport_seconds:.2f}"
        if r.overhead_vs_posix is not None:
            txt += f" ({r.overhead_vs_posix:.2f}× POSIX"
            txt += f", {r.transport_vs_plain:.2f}× plain)" if r.transport_vs_plain is not None else ")"
        return txt

    def rss(r: Row) -> str:
        p = " ".join(f"{x / MIB:.0f}" for x in r.peak_rss_producer_ranks)
        c = " ".join(f"{x / MIB:.0f}" for x in r.peak_rss_consumer_ranks)
        return f"{p} | {c}; +{max(0, r.rss_growth_producer_bytes) / MIB:.0f}"

    console.print(_matrix(f"h5flow bench transit: oscillator → histogram, {plan.bytes_per_rank / MIB:g} MiB per "
                          f"producer rank per step, {plan.steps} steps; time to solution (s), {spread}, and ÷ "
                          "h5flow's ADIOS2 SST", rows, shown, cfgs, tts,
                          (["null (s)", "POSIX w+r tmpfs (w+map) / disk (s)", "memcpy (s)"], bound_cells)))
    console.print(_matrix("time to solution ÷ the null transport (producer and analysis in one job of M ranks, "
                          "zero copies) and ÷ plain ADIOS2 SST (adios2-sst-plain)", rows, shown, cfgs, vs_null))
    console.print(_matrix("time inside the transport (write + read, s) ÷ the POSIX write+read of the same bytes; "
                          "adios2 rows also ÷ the plain ADIOS2 pair of the same engine", rows, shown, cfgs, inside))
    console.print(_matrix("peak RSS per rank (MiB), producers | consumers, first repetition; +growth of a producer "
                          "rank's peak RSS from the first half of its steps to the second", rows, shown, cfgs, rss))
    if plan.breakdown:
        console.print(breakdown_table(rows, plan.steps))


PRODUCER_PHASES = ("wait", "gather", "admit", "copy", "reserve", "prepare", "create", "metadata", "write", "flush", "agree", "close", "meta.json",
                   "publish", "collect", "begin", "put", "end")
CONSUMER_PHASES = ("discover", "open", "meta", "read", "exchange", "close", "barrier", "release")


def breakdown_table(rows: list[Row], steps: int) -> Any:
    """Milliseconds per step in each phase (slowest rank per step, mean over steps) of the rows that record
    phases (hdf5, socket, adios2), producer side then consumer side, beside the time inside the transport; only
    the phases some row recorded get a column."""
    from rich.table import Table

    producer = [k for k in PRODUCER_PHASES if any(k in r.phases_producer for r in rows)]
    consumer = [k for k in CONSUMER_PHASES if any(k in r.phases_consumer for r in rows)]

    tab = Table(title="where the time goes (--breakdown): ms per step, per step the slowest rank's; producer "
                      "phases | consumer phases (discover includes waiting for the producer); "
                      "inside = time inside the transport per step, × POSIX. With async_write (the default) "
                      "the producer's end_step is wait (for the previous step's write) + gather + admit + copy; "
                      "reserve to publish run on its write thread, beside the simulation; adios2's producer "
                      "phases are gather, begin, put, end (ADIOS2's EndStep), its consumer's read the payload's "
                      "Get and PerformGets")
    tab.add_column("transport")
    tab.add_column("M:N", justify="right")
    for name in producer:
        tab.add_column(f"P {name}", justify="right")
    for name in consumer:
        tab.add_column(f"C {name}", justify="right")
    tab.add_column("inside", justify="right")
    for r in rows:
        if not r.phases_producer and not r.phases_consumer:
            continue
        cells = [f"{1e3 * r.phases_producer[k]:.1f}" if k in r.phases_producer else "-" for k in producer]
        cells += [f"{1e3 * r.phases_consumer[k]:.1f}" if k in r.phases_consumer else "-" for k in consumer]
        ratio = f" ({r.overhead_vs_posix:.1f}×)" if r.overhead_vs_posix is not None else ""
        tab.add_row(r.transport, f"{r.producers}:{r.consumers}", *cells,
                    f"{1e3 * r.transport_seconds / max(1, steps):.1f}{ratio}")
    return tab


# -- driver ----------------------------------------------------------------------------------------

def launch(args: argparse.Namespace) -> int:
    if shutil.which("mpiexec") is None:
        print("h5flow bench transit: mpiexec not found on PATH; run `make setup` and `source build/stack.env`",
              file=sys.stderr)
        return 2
    plan = make_plan(args)
    plan.out.mkdir(parents=True, exist_ok=True)
    for t, why in plan.skipped.items():
        print(f"h5flow bench transit: skipping {t}: {why}")
    sizes = plan.sizes or [plan.bytes_per_rank]
    if len(sizes) == 1:
        run_size(plan, args.json)
        return 0
    print(f"h5flow bench transit: a sweep over {len(sizes)} sizes ({', '.join(f'{x / MIB:g}' for x in sizes)} MiB per "
          "rank per step), each run in full")
    rows: list[Row] = []
    loads: list[list[float]] = []
    for size in sizes:
        sub = replace(plan, bytes_per_rank=size, sizes=[size], out=plan.out / f"{size / MIB:g}MiB",
                      failed=[], load_start=[], load_end=[])
        rows += run_size(sub, None)
        loads += [sub.load_start, sub.load_end]
        plan.failed += sub.failed
    paths = write_sweep(plan, rows, args.json)
    print_sweep(plan, rows)
    for p in paths:
        print(f"wrote {p}")
    if any(load and load[0] >= busy_load() for load in loads):
        print("h5flow bench transit: WARNING the machine was busy during the sweep (see each size's load averages "
              "above): compare the cells of one size, and regenerate published tables on a quiet machine")
    return 0


def run_size(plan: Plan, json_path: Path | None) -> list[Row]:
    """Every configuration and transport at ``plan.bytes_per_rank``: the runs, their outputs in ``plan.out``, the
    tables; the rows."""
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "records").mkdir(exist_ok=True)
    transports = with_layouts(plan, [t for t in plan.transports if t not in plan.skipped])
    cfgs = plan.configurations()
    print(f"h5flow bench transit: {len(cfgs)} configurations (M:N {', '.join(f'{m}:{n}' for m, n, _ in cfgs)}) × "
          f"{len(transports)} transports × {plan.reps} repetitions; {plan.bytes_per_rank / MIB:g} MiB per rank per "
          f"step, {plan.steps} steps; tmpfs {plan.tmpfs}, disk {plan.disk}; output in {plan.out}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rows: list[Row] = []
    bounds: dict[tuple[int, int], dict[str, float]] = {}
    nulls: dict[int, list[float]] = {}
    plan.load_start = list(os.getloadavg())
    print(f"h5flow bench transit: load average at start {_loads(plan.load_start)} ({os.cpu_count()} cores)")
    _warn_busy(plan.load_start, "start")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as bar:
        # the null transport is a bound too: its fastest of at least BOUND_TRIES runs (a single first run
        # paid a cold start, 0.92 s against 0.57 s warm at M=1)
        null_runs = max(plan.reps, BOUND_TRIES)
        task = bar.add_task("runs", total=len(cfgs) * (len(transports) * plan.reps + 1)
                            + len({m for m, _, _ in cfgs}) * null_runs)
        for m, n, _ in cfgs:
            chunk, count = plan.bytes_per_rank, m * plan.steps
            if m not in nulls:
                nulls[m] = []
                for rep in range(null_runs):
                    bar.update(task, description=f"M={m} null transport rep {rep + 1}/{null_runs}")
                    nulls[m].append(run_null(plan, m))
                    bar.advance(task)
            bar.update(task, description=f"{m}:{n} POSIX/memcpy bound")
            # a bound at its best: the fastest of BOUND_TRIES (one try lands on a previous run's exit, or on
            # page-cache reclaim, as often as not: 0.22-0.83 s for the same 4:x bytes in one session)
            bounds[(m, n)] = {"posix_tmpfs": _best(lambda: posix_write_read(plan.tmpfs, chunk, count)),
                              "posix_tmpfs_map": _best(lambda: posix_write_read(plan.tmpfs, chunk, count, True)),
                              "posix_disk": _best(lambda: posix_write_read(plan.disk, chunk, count)),
                              "memcpy": _best(lambda: memcpy(chunk, count)),
                              "null": min(nulls[m])}
            bar.advance(task)
            for transport in transports:
                records = []
                for rep in range(plan.reps):
                    bar.update(task, description=f"{m}:{n} {transport} rep {rep + 1}/{plan.reps}")
                    try:
                        records.append(run_one(plan, transport, m, n, rep))
                    except PlainPairFailed as e:
                        plan.failed.append({"transport": transport, "producers": m, "consumers": n, "reason": str(e)})
                        print(f"h5flow bench transit: WARNING leaving out a reference row: {e}", file=sys.stderr)
                    bar.advance(task)
                if not records:
                    continue
                rec_path = plan.out / "records" / f"{transport.replace(':', '-')}-{m}to{n}.json"
                rec_path.write_text(json.dumps(records[0]))
                rows.append(summarize(plan, transport, m, n, records, bounds[(m, n)], str(rec_path)))
    plan.load_end = list(os.getloadavg())
    paths = write_outputs(plan, rows, bounds, json_path)
    if rows:
        paths += fig2(plan, rows) + fig3_fig4(plan, rows) + staging_figure(plan, rows)
        print_summary(plan, rows, bounds)
    for p in paths:
        print(f"wrote {p}")
    print(f"h5flow bench transit: load average at start {_loads(plan.load_start)}, at end {_loads(plan.load_end)} "
          f"({os.cpu_count()} cores)")
    _warn_busy(plan.load_end, "end")
    for f in plan.failed:
        print(f"h5flow bench transit: WARNING the row {f['transport']} {f['producers']}:{f['consumers']} is missing: "
              f"{f['reason']}", file=sys.stderr)
    for r in rows:
        if r.rss_growth_producer_bytes > rss_growth_limit(r.bytes_per_rank_step):
            print(f"h5flow bench transit: WARNING {r.transport} {r.producers}:{r.consumers}: a producer rank's RSS "
                  f"grew by {r.rss_growth_producer_bytes / MIB:.0f} MiB from the first half of its steps to the "
                  f"second (more than "
                  f"{rss_growth_limit(r.bytes_per_rank_step) / MIB:g} MiB): memory held per step?")
    return rows


# -- the size sweep ------------------------------------------------------------------------------------

def vs_plain(r: Row) -> float | None:
    """Time inside the transport ÷ the plain ADIOS2 pair's: the same engine's pair for an adios2 row, the SST
    pair's for the others (same configuration and size)."""
    return r.transport_vs_plain if r.transport_vs_plain is not None else r.inside_vs_sst_plain


def worst_cells(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Each transport's largest ratio to POSIX and to the plain pair over every size and M:N, with where."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        w = out.setdefault(r.transport, {})
        for key, val in (("vs_posix", r.overhead_vs_posix), ("vs_plain", vs_plain(r))):
            if val is not None and val > w.get(key, {}).get("ratio", -1.0):
                w[key] = {"ratio": val, "mib_per_rank": r.bytes_per_rank_step / MIB,
                          "producers": r.producers, "consumers": r.consumers}
    return out


def write_sweep(plan: Plan, rows: list[Row], json_path: Path | None) -> list[Path]:
    """sweep.csv, sweep.json and sweep.png (ratios against the size per rank) in ``plan.out``."""
    out = plan.out
    csv_path = out / "sweep.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mib_per_rank", "producers", "consumers", "transport", "transport_seconds", "vs_posix", "vs_plain"])
        for r in rows:
            w.writerow([f"{r.bytes_per_rank_step / MIB:g}", r.producers, r.consumers, r.transport,
                        f"{r.transport_seconds:.4f}", _fmt(r.overhead_vs_posix), _fmt(vs_plain(r))])
    doc = {"benchmark": "transit-sweep", "mib_per_rank": [x / MIB for x in plan.sizes], "steps": plan.steps,
           "reps": plan.reps, "failed": plan.failed, "worst": worst_cells(rows),
           "skipped": [{"transport": t, "reason": why} for t, why in plan.skipped.items()],
           "results": [asdict(r) for r in rows]}
    paths = [csv_path, *_write_json(doc, out / "sweep.json", json_path)]
    if rows:
        paths.append(sweep_figure(plan, rows))
    return paths


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def sweep_figure(plan: Plan, rows: list[Row]) -> Path:
    """Per transport, its worst ratio over the M:N configurations at each size: ÷ POSIX (left), ÷ plain (right)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, ratio, label in ((axes[0], lambda r: r.overhead_vs_posix, "time inside ÷ POSIX write+read"),
                             (axes[1], vs_plain, "time inside ÷ plain ADIOS2 pair")):
        for t in dict.fromkeys(r.transport for r in rows):
            pts: dict[float, float] = {}
            for r in rows:
                v = ratio(r)
                if r.transport == t and v is not None:
                    size = r.bytes_per_rank_step / MIB
                    pts[size] = max(pts.get(size, 0.0), v)
            if pts:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], marker="o", label=t)
        ax.set_xscale("log", base=2)
        sizes = sorted({r.bytes_per_rank_step / MIB for r in rows})
        ax.set_xticks(sizes)
        ax.set_xticklabels([f"{x:g}" for x in sizes])
        ax.minorticks_off()
        ax.set_xlabel("MiB per producer rank per step")
        ax.set_ylabel(f"{label} (worst M:N)")
        ax.grid(alpha=0.3)
    axes[1].axhline(1.5, color="grey", linestyle="--", linewidth=1)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"h5flow bench transit sweep: {plan.steps} steps, M:N "
                 + ", ".join(f"{m}:{n}" for m, n, _ in plan.configurations()))
    fig.tight_layout()
    path = plan.out / "sweep.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def print_sweep(plan: Plan, rows: list[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    shown = list(dict.fromkeys(r.transport for r in rows))
    tab = Table(title="the sweep: time inside the transport ÷ the POSIX write+read of the same bytes / ÷ the plain "
                      "ADIOS2 pair (adios2 rows: the same engine's pair; others: adios2-sst-plain)")
    tab.add_column("MiB/rank", justify="right")
    tab.add_column("M:N", justify="right")
    for t in shown:
        tab.add_column(t, justify="right")
    for size in sorted({r.bytes_per_rank_step for r in rows}):
        for m, n in sorted({(r.producers, r.consumers) for r in rows if r.bytes_per_rank_step == size}):
            cells = []
            for t in shown:
                r = next((x for x in rows if (x.transport, x.producers, x.consumers, x.bytes_per_rank_step)
                          == (t, m, n, size)), None)
                cells.append("-" if r is None else f"{_ratio(r.overhead_vs_posix)} / {_ratio(vs_plain(r))}")
            tab.add_row(f"{size / MIB:g}", f"{m}:{n}", *cells)
    console.print(tab)
    worst = worst_cells(rows)
    tab = Table(title="each transport's worst cell of the sweep (size, M:N)")
    tab.add_column("transport")
    tab.add_column("÷ POSIX", justify="right")
    tab.add_column("÷ plain ADIOS2 pair", justify="right")
    for t in shown:
        cells = []
        for key in ("vs_posix", "vs_plain"):
            c = worst.get(t, {}).get(key)
            cells.append("-" if c is None else
                         f"{c['ratio']:.2f}× ({c['mib_per_rank']:g} MiB, {c['producers']}:{c['consumers']})")
        tab.add_row(t, *cells)
    console.print(tab)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def _loads(load: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load) + " (1 / 5 / 15 min)"


def _warn_busy(load: list[float], when: str) -> None:
    if load and load[0] >= busy_load():
        print(f"h5flow bench transit: WARNING the machine was busy at the {when} (1-minute load average "
              f"{load[0]:.2f} >= {busy_load():g}, half of {os.cpu_count()} cores): the times include other jobs; "
              "compare rows of one run, and regenerate published tables on a quiet machine")


if __name__ == "__main__":  # the null-transport job: mpiexec -n M python -m h5flow.benchmarks.transit null X Y Z S
    if len(sys.argv) == 6 and sys.argv[1] == "null":
        out = null_job((int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])), int(sys.argv[5]))
        if out:
            print(json.dumps(out), flush=True)
    else:
        print("usage: mpiexec -n M python -m h5flow.benchmarks.transit null X Y Z STEPS", file=sys.stderr)
        sys.exit(2)
