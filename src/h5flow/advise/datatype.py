"""Datatype rules: conversions on read/write, and collective I/O that HDF5 did independently."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from h5flow.advise.base import RW_OPS, SEED_003, SEED_004, Finding, Rule, Settings, human_bytes

CONVERSION_CAUSE = "datatype-conversion"


def causes(text: str) -> set[str]:
    return {c.strip() for c in (text or "").split(",") if c.strip()}


@dataclass
class ConversionSettings(Settings):
    min_bytes: int = 1 << 20  # converted bytes per file below which a conversion is not reported


class DatatypeConversion(Rule):
    id = "dtype-conversion"
    title = "datatype conversion on read/write"
    source = (f"{SEED_003}, 'Avoid Datatype Conversions': 527 s -> 1.3 s writing a 100x100x100 float64 array "
              f"into a float32 dataset from 5x5x5 processes; {SEED_004}, Warp case study: HDF5 refuses "
              "collective I/O when the types differ")
    settings_class = ConversionSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: ConversionSettings = self.settings  # type: ignore[assignment]
        rows = df[df["op"].isin(RW_OPS) & df["conv"].astype(bool)]
        out = []
        for file, g in rows.groupby("file", sort=False):
            broke = g[(g["xfer"] == "collective") & g["no_coll_cause"].map(lambda c: CONVERSION_CAUSE in causes(c))]
            if g["bytes"].sum() < s.min_bytes and broke.empty:
                continue
            pairs = g.groupby(["mem_type", "file_type"]).size().sort_values(ascending=False)
            (mem, ftype), _ = next(iter(pairs.items()))
            kinds = "/".join(sorted(o.split("_")[1] + "s" for o in g["op"].unique()))
            msg = (f"{len(g)} dataset {kinds} ({human_bytes(g['bytes'].sum())}, {g['dur'].sum():.3f} s) convert "
                   f"between memory type {mem} and file type {ftype}")
            if not broke.empty:
                msg += (f"; {len(broke)} of them asked for collective I/O and HDF5 did them independently "
                        f"(no-collective cause: {CONVERSION_CAUSE})")
            out.append(self.finding(
                file, g, msg, severity="HIGH" if not broke.empty else "WARN",
                detail={"mem_type": mem, "file_type": ftype, "collective_broken": int(len(broke))},
                fix_h5py=f"""
# give HDF5 the file's type, so that it moves bytes without converting them:
dset = f.create_dataset(name, shape, dtype=data.dtype)   # the file keeps what memory holds ({mem})
# or, to keep {ftype} in the file, convert once in numpy before the write:
dset[sel] = data.astype(dset.dtype)""",
                fix_c=f"""
/* memory type == file type: no conversion inside H5Dwrite/H5Dread */
hid_t dset = H5Dcreate2(file, name, H5T_NATIVE_DOUBLE /* the type of buf ({mem}) */, fspace,
                        H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, buf);
/* or keep {ftype} in the file: convert buf into a buffer of that type first, then write it */"""))
        return out


CAUSE_FIX = {
    "data-transforms": "a data transform on the transfer property list (H5Pset_data_transform): apply it to the "
                       "buffer in memory instead",
    "not-contiguous-or-chunked": "a compact, virtual or external-storage dataset: create it contiguous or chunked",
    "not-simple-or-scalar-dataspaces": "a null or non-simple dataspace in the transfer",
    "mpi-opt-types-disabled": "HDF5_MPI_OPT_TYPES=0 in the environment: unset it",
    "parallel-filtered-writes-disabled": "a filtered dataset written by a build without parallel filtered "
                                         "writes: use HDF5 >= 1.10.2 or drop the filter",
    "no-selection-io": "selection I/O turned off (H5Pset_selection_io): leave it at its default",
    "error-while-checking": "an error while HDF5 checked whether collective I/O was possible",
}


def _other_causes(text: str) -> set[str]:
    """The causes this rule reports: not a type conversion (the dtype-conversion rule's), not "independent"
    (requested), and "no-selection-io" only alone (HDF5 1.14 turns selection I/O off because of a conversion
    or a transform and reports both)."""
    c = causes(text) - {CONVERSION_CAUSE, "independent"}
    if len(causes(text) - {"independent", "no-selection-io"}) > 0:
        c.discard("no-selection-io")
    return c


@dataclass
class FallbackSettings(Settings):
    min_calls: int = 1


class CollectiveFallback(Rule):
    id = "collective-fallback"
    title = "collective I/O requested, independent I/O done"
    severity = "HIGH"
    source = (f"{SEED_003}, 'MPI-I/O Collective Mode' and h5py's collective writes (2x with 1K processes on Cori); "
              f"{SEED_004}, Warp: 'Refuses to use collective I/O in case of inconsistency'")
    settings_class = FallbackSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: FallbackSettings = self.settings  # type: ignore[assignment]
        coll = df[df["op"].isin(RW_OPS) & (df["xfer"] == "collective")]
        if coll.empty:
            return []
        # causes other than a type conversion (the dtype-conversion rule reports that one, with its fix)
        other = coll["no_coll_cause"].map(_other_causes)
        rows = coll[other.map(bool)]
        out = []
        for file, g in rows.groupby("file", sort=False):
            if len(g) < s.min_calls:
                continue
            found = sorted(set().union(*other[g.index]))
            why = "; ".join(f"{c}: {CAUSE_FIX.get(c, 'see H5Pget_mpio_no_collective_cause')}" for c in found)
            out.append(self.finding(
                file, g, f"{len(g)} reads/writes asked for collective I/O and HDF5 did them independently "
                         f"({g['dur'].sum():.3f} s, {human_bytes(g['bytes'].sum())}). HDF5's cause: {why}",
                detail={"causes": found, "io_actual": sorted(g["io_actual"].unique().tolist())},
                fix_h5py="""
# remove what HDF5 names as the cause; e.g. a data transform "x*2" becomes numpy work:
with dset.collective:
    dset[sel] = data * 2
# check what HDF5 did: h5py.h5p DATASET_XFER list + H5Pget_mpio_no_collective_cause (ctypes)""",
                fix_c="""
/* remove the cause, then check what HDF5 did: */
H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);          /* no H5Pset_data_transform on dxpl */
H5Dwrite(dset, memtype, mspace, fspace, dxpl, buf);
uint32_t local, global;
H5Pget_mpio_no_collective_cause(dxpl, &local, &global); /* 0 = collective done */"""))
        return out
