"""hdf5-iotest's internal sweep, expanded into cases, and the case-file lines the kernels read.

The sweep order is hdf5-iotest's (``src/hdf5_iotest.c``, outer to inner): dataset rank {2, 3, 4},
slowest dimension {step, array}, layout {contiguous, chunked}, fill values {true, false}, alignment
{(1, 0), the ini's}, metadata block size {2048, the ini's}, libver low bound {earliest, latest}, MPI-IO
mode {independent, collective} (parallel runs only). The second alignment / block-size pass is skipped
when the ini keeps the default; a key set in the ini pins its dimension (see :mod:`.ini`).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

from h5flow.benchmarks.iotest.ini import LIBVERS, IniError, IotestConfig


@dataclass(frozen=True)
class Case:
    index: int  # 1-based position in the sweep (hdf5-iotest's case number)
    op: str  # iotest, filecreate, objscan
    steps: int = 1
    arrays: int = 1
    rows: int = 2
    cols: int = 2
    prows: int = 1
    pcols: int = 1
    scaling: str = "weak"
    rank: int = 2
    slowdim: str = "step"
    layout: str = "contiguous"
    fill: str = "true"
    align_inc: int = 1
    align_thr: int = 0
    mblk: int = 2048
    fmt_low: str = "earliest"
    fmt_high: str = "latest"
    io: str = "independent"
    split: int = 0
    gzip: int = -1
    szip_mask: int = 0
    szip_ppb: int = 0
    delay_us: int = 0
    count: int = 0

    @property
    def nprocs(self) -> int:
        return self.prows * self.pcols

    @property
    def data_bytes(self) -> int:
        """Bytes of doubles written (and read) by all ranks together."""
        if self.op != "iotest":
            return 0
        if self.scaling == "weak":
            return self.steps * self.arrays * self.rows * self.cols * self.nprocs * 8
        return self.steps * self.arrays * self.rows * self.cols * 8

    def label(self) -> str:
        if self.op != "iotest":
            return f"{self.op} x{self.count}"
        align = "" if (self.align_inc, self.align_thr) == (1, 0) else f" align={self.align_inc}:{self.align_thr}"
        mblk = "" if self.mblk == 2048 else f" mblk={self.mblk}"
        return (f"rk{self.rank} {self.slowdim} {'cont' if self.layout == 'contiguous' else 'chkd'} "
                f"fill={'T' if self.fill == 'true' else 'F'}{align}{mblk} {self.fmt_low[:3]} "
                f"{ {'independent': 'indep', 'collective': 'coll'}.get(self.io, self.io)}")

    def line(self, file: Path, vfd: str, *, seed: int = 0, read_seed: int | None = None) -> str:
        """The case-file line (``file=`` last: it runs to the end of the line)."""
        d = asdict(self)
        keys = ["index", "op", "steps", "arrays", "rows", "cols", "prows", "pcols", "scaling", "rank", "slowdim",
                "layout", "fill", "align_inc", "align_thr", "mblk", "fmt_low", "fmt_high", "io", "split", "gzip",
                "szip_mask", "szip_ppb", "delay_us"]
        parts = [f"{k.replace('_', '-')}={d[k]}" for k in keys]
        if self.op != "iotest":
            parts.append(f"count={self.count}")
        parts += [f"vfd={vfd}", f"seed={seed}", f"read-seed={seed if read_seed is None else read_seed}"]
        if "\n" in str(file):
            raise IniError(f"file name {str(file)!r} contains a newline")
        return " ".join(parts) + f" file={file}"


def _pin(value, sweep):  # noqa: ANN001, ANN202
    return [value] if value is not None else list(sweep)


def expand(cfg: IotestConfig, grid: tuple[int, int] | None = None) -> list[Case]:
    """Every case of the sweep for ``cfg`` (on ``grid`` = (process-rows, process-columns) if given)."""
    prows, pcols = grid or (cfg.process_rows, cfg.process_columns)
    if cfg.scaling == "strong" and (cfg.rows % prows or cfg.columns % pcols):
        raise IniError(f"strong scaling on a {prows} x {pcols} grid needs rows ({cfg.rows}) and columns "
                       f"({cfg.columns}) divisible by it ({cfg.at('rows')})")
    nprocs = prows * pcols
    if cfg.split and nprocs > 1:
        raise IniError(f"{cfg.at('split')}: split = 1 with {nprocs} ranks: HDF5's split driver is not "
                       "parallel (with 2 ranks the data read back differs from what was written); use 1 rank")
    fill = None if cfg.fill_values is None else ("true" if cfg.fill_values else "false")
    aligns = [(1, 0)]
    if (cfg.alignment_increment, cfg.alignment_threshold) != (1, 0):
        aligns.append((cfg.alignment_increment, cfg.alignment_threshold))
    mblks = [2048] + ([cfg.meta_block_size] if cfg.meta_block_size != 2048 else [])
    if nprocs == 1:
        ios = [cfg.single_process]
    elif cfg.split:
        ios = ["independent"]  # the split driver cannot do collective I/O
    else:
        ios = _pin(cfg.mpi_io, ["independent", "collective"])
    fmts = [f for f in _pin(cfg.libver_bound_low, ["earliest", "latest"])
            if LIBVERS.index(f) <= LIBVERS.index(cfg.libver_bound_high)]
    gzip = -1 if cfg.gzip is None else cfg.gzip
    szip = cfg.szip or (0, 0)
    cases: list[Case] = []
    for rank, slow, layout, fl, (ainc, athr), mblk, fmt, io in itertools.product(
        _pin(cfg.dataset_rank, [2, 3, 4]), _pin(cfg.slowest_dimension, ["step", "array"]),
        _pin(cfg.layout, ["contiguous", "chunked"]), _pin(fill, ["true", "false"]), aligns, mblks,
        fmts, ios,
    ):
        cases.append(Case(
            index=len(cases) + 1, op="iotest", steps=cfg.steps, arrays=cfg.arrays, rows=cfg.rows,
            cols=cfg.columns, prows=prows, pcols=pcols, scaling=cfg.scaling, rank=rank, slowdim=slow,
            layout=layout, fill=fl, align_inc=ainc, align_thr=athr, mblk=mblk, fmt_low=fmt,
            fmt_high=cfg.libver_bound_high, io=io, split=int(cfg.split), gzip=gzip, szip_mask=szip[0],
            szip_ppb=szip[1], delay_us=cfg.delay_us,
        ))
    if cfg.one_case is not None:
        if cfg.one_case > len(cases):
            raise IniError(f"{cfg.at('one_case')}: one-case = {cfg.one_case}, but the sweep has only "
                           f"{len(cases)} cases")
        cases = [cases[cfg.one_case - 1]]
    return cases


def case_file_name(pattern: str, index: int) -> str:
    """hdf5-iotest's ``hdf5-file``: a ``#`` becomes the 4-digit case number."""
    return pattern.replace("#", f"{index:04d}")


__all__ = ["Case", "case_file_name", "expand"]
