"""Parallel rules: many small independent writes to a shared file, rank imbalance, MPI-IO hints."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from h5flow.advise.base import REF_DARSHAN, RW_OPS, SEED_003, Finding, Rule, Settings, file_props, human_bytes


@dataclass
class SmallWritesSettings(Settings):
    small_bytes: int = 64 << 10  # a write below this size is small
    min_calls: int = 64          # small independent writes to one shared file from which it is reported


class SmallIndependentWrites(Rule):
    id = "small-independent-writes"
    title = "many small independent writes to a shared file"
    source = (f"{SEED_003}, 'Collective Buffering': aggregators turn many small requests into large stripe-sized "
              "ones; 'Using 1K processes to write a 1TB file, collective IO achieved a 2X speedup on Cori'")
    settings_class = SmallWritesSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: SmallWritesSettings = self.settings  # type: ignore[assignment]
        out = []
        writes = df[df["op"] == "dataset_write"]
        for file, g in writes.groupby("file", sort=False):
            if g["rank"].nunique() < 2:
                continue  # not a shared file
            small = g[(g["xfer"] == "independent") & (g["bytes"] < s.small_bytes)]
            if len(small) < s.min_calls:
                continue
            out.append(self.finding(
                file, small, f"{len(small):,} independent writes of {human_bytes(small['bytes'].median())} "
                             f"(median) from {small['rank'].nunique()} ranks to one shared file "
                             f"({small['dur'].sum():.3f} s): each is its own MPI-IO request",
                detail={"median_bytes": int(small["bytes"].median())},
                fix_h5py="""
# one collective write per step, each rank's part as one selection:
with dset.collective:
    dset[start:stop] = block
# or let each rank append to its own log: HDF5_VOL_CONNECTOR=h5flow_log (docs/FORMAT.md)""",
                fix_c="""
hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, block);   /* one call with the rank's whole part */"""))
        return out


N_N = "(one file per rank)"  # the file of a finding over files that one rank each reads or writes


@dataclass
class ImbalanceSettings(Settings):
    ratio: float = 2.0         # slowest rank's read/write time over the fastest rank's
    min_seconds: float = 0.05  # ... and at least this many seconds more than the mean


class RankImbalance(Rule):
    id = "rank-imbalance"
    title = "ranks spend very different times in reads/writes of one file"
    source = (f"{REF_DARSHAN}: H5D_F_SLOWEST_RANK_TIME against H5D_F_FASTEST_RANK_TIME and "
              "H5D_F_VARIANCE_RANK_TIME/BYTES; the slowest rank sets the pace of every collective step")
    settings_class = ImbalanceSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: ImbalanceSettings = self.settings  # type: ignore[assignment]
        out = []
        rw = df[df["op"].isin(RW_OPS)]
        groups = [(file, g) for file, g in rw.groupby("file", sort=False) if g["rank"].nunique() >= 2]
        # files of one rank each (N-N): the ranks compared over all of them together
        own = rw.groupby("file")["rank"].transform("nunique") == 1
        if own.any():
            groups.append((N_N, rw[own]))
        for file, g in groups:
            if g["rank"].nunique() < 2:
                continue
            t = g.groupby("rank")["dur"].sum()
            b = g.groupby("rank")["bytes"].sum()
            mean = float(t.mean())
            slow = int(t.idxmax())
            if t.max() < s.ratio * t.min() or t.max() - mean < s.min_seconds:
                continue
            out.append(self.finding(
                file, g[g["rank"] == slow],
                f"rank {slow} spends {t.max():.3f} s in reads/writes of "
                f"{'its own files' if file == N_N else 'this file'}, the fastest rank "
                f"{t.min():.3f} s, the mean of {len(t)} ranks {mean:.3f} s; bytes per rank from {human_bytes(b.min())} to "
                f"{human_bytes(b.max())}",
                seconds=float(t.max() - mean),
                detail={"seconds_per_rank": {int(r): float(v) for r, v in t.items()},
                        "bytes_per_rank": {int(r): int(v) for r, v in b.items()}},
                fix_h5py="""
# give every rank an equal share of the elements (SENSEI's block split), then write collectively:
n, r, p = len_total, comm.rank, comm.size
start, stop = r * n // p, (r + 1) * n // p
with dset.collective:
    dset[start:stop] = data[start:stop]""",
                fix_c="""
/* equal shares: rank r writes [r*n/p, (r+1)*n/p) */
hsize_t start = (hsize_t)rank * n / nprocs, count = (hsize_t)(rank + 1) * n / nprocs - start;
H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL);"""))
        return out


# (hint, value that is a problem, why) -- seed 003's MPI-IO hints section
BAD_HINTS = (
    ("romio_cb_write", "disable", "collective buffering for writes is off: every rank writes its own pieces"),
    ("romio_cb_read", "disable", "collective buffering for reads is off"),
    ("romio_ds_write", "enable", "data sieving for writes is on: 'no longer used and can interfere with "
                                 "collective buffering'"),
)


@dataclass
class HintSettings(Settings):
    min_calls: int = 1  # collective transfers to the file from which its hints matter


class MpiHints(Rule):
    id = "mpi-hints"
    title = "MPI-IO hints that work against collective I/O"
    source = (f"{SEED_003}, 'MPI-I/O Hints': MPICH_MPIIO_HINTS=\"*:romio_cb_write=enable:romio_ds_write=disable\" "
              "forces collective buffering on and data sieving for writes off")
    settings_class = HintSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: HintSettings = self.settings  # type: ignore[assignment]
        out = []
        coll = df[df["op"].isin(RW_OPS) & (df["xfer"] == "collective")]
        for file, p in file_props(df).items():
            hints = {str(k): str(v).lower() for k, v in (p.get("mpi_hints") or {}).items()}
            bad = [(h, v, why) for h, v, why in BAD_HINTS if hints.get(h) == v]
            rows = coll[coll["file"] == file]
            if not bad or len(rows) < s.min_calls:
                continue
            sets = "".join(f'info.Set("{h}", "{"enable" if v == "disable" else "disable"}")\n' for h, v, _ in bad)
            csets = "".join(f'MPI_Info_set(info, "{h}", "{"enable" if v == "disable" else "disable"}");\n'
                            for h, v, _ in bad)
            out.append(self.finding(
                file, rows, f"{len(rows)} collective reads/writes ({rows['dur'].sum():.3f} s) under MPI-IO hints "
                            + "; ".join(f"{h}={v}: {why}" for h, v, why in bad),
                detail={"hints": hints},
                fix_h5py=f"""
from mpi4py import MPI
info = MPI.Info.Create()
{sets}f = h5py.File(name, "w", driver="mpio", comm=comm, info=info)
# or for every file: ROMIO_HINTS=<file of 'key value' lines> (MPICH), MPICH_MPIIO_HINTS (Cray MPICH)""",
                fix_c=f"""
MPI_Info info; MPI_Info_create(&info);
{csets}H5Pset_fapl_mpio(fapl, comm, info);"""))
        return out
