"""Metadata rules: libver bounds with many objects, open/close loops, files reopened every step."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from h5flow.advise.base import (FILE_OPEN_OPS, OBJECT_CREATE_OPS, OBJECT_OPEN_OPS, SEED_003, SEED_004, Finding, Rule,
                                Settings, props)

CLOSE_OPS = ("dataset_close", "group_close", "attr_close", "datatype_close")


@dataclass
class LibverSettings(Settings):
    min_objects: int = 1000  # objects created in one file from which the format version matters


class LibverEarliest(Rule):
    id = "libver-earliest"
    title = "libver 'earliest' for a file with many objects"
    source = (f"{SEED_003}, 'Choose the most modern format in file creation': 1 process creating 1 file with 8000 "
              f"objects, libver='latest' 2.25X faster; {SEED_004}, 'Optimal HDF5 file creation 2.25X'")
    settings_class = LibverSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: LibverSettings = self.settings  # type: ignore[assignment]
        out = []
        creates = df[df["op"].isin(OBJECT_CREATE_OPS)]
        if creates.empty:
            return []
        # the lower bound in force at each creation: that of the file's last open/create on that rank before it
        opens = df[df["op"].isin(FILE_OPEN_OPS)][["file", "rank", "t0", "props"]]
        opens = opens.assign(low=[str((props(t).get("libver") or ["?"])[0]) for t in opens["props"]])
        merged = pd.merge_asof(creates.reset_index().sort_values("t0"), opens.drop(columns="props").sort_values("t0"),
                               on="t0", by=["file", "rank"], direction="backward")
        early = creates.loc[merged.loc[merged["low"] == "earliest", "index"]]
        for file, g in early.groupby("file", sort=False):
            lows = ["earliest"]
            if len(g) < s.min_objects:
                continue
            out.append(self.finding(
                file, g, f"{len(g):,} objects created ({g['dur'].sum():.3f} s in their create calls) in a file "
                         "whose lower format bound is 'earliest': HDF5 keeps the 1.8-era object headers, symbol "
                         "tables and B-trees",
                detail={"objects": int(len(g)), "libver_low": sorted(lows)},
                fix_h5py="""
# the newer format (readable by HDF5 >= 1.10 with 'v110'; 'latest' needs the newest library to read):
f = h5py.File(name, "w", libver=("v110", "latest"))""",
                fix_c="""
hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);"""))
        return out


@dataclass
class OpenLoopSettings(Settings):
    min_opens: int = 50  # opens of one object per open of its file from which it is a loop


class OpenCloseLoop(Rule):
    id = "open-close-loop"
    title = "objects opened and closed in a loop"
    source = (f"{SEED_004}, h5py metadata cost: 1K object scans 4.5 s in h5py vs 2.7 s in C (60 %); every "
              "f['name'] opens the object again")
    settings_class = OpenLoopSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: OpenLoopSettings = self.settings  # type: ignore[assignment]
        out = []
        opens = df[df["op"].isin(OBJECT_OPEN_OPS) & (df["obj"] != "")]
        sessions = df[df["op"].isin(FILE_OPEN_OPS)].groupby(["file", "rank"]).size()
        for file, g in opens.groupby("file", sort=False):
            per = g.groupby(["rank", "obj"]).size()
            loops = [(r, o, n) for (r, o), n in per.items() if n / max(int(sessions.get((file, r), 1)), 1) >= s.min_opens]
            if not loops:
                continue
            objs = {o for _, o, _ in loops}
            rows = df[(df["file"] == file) & df["op"].isin(OBJECT_OPEN_OPS + CLOSE_OPS) & df["obj"].isin(objs)]
            top = max(loops, key=lambda x: x[2])
            out.append(self.finding(
                file, rows, f"{len(objs)} object(s) opened again and again: {top[1]} {top[2]:,} times on rank "
                            f"{top[0]}; {len(rows):,} open/close calls took {rows['dur'].sum():.3f} s",
                detail={"objects": sorted(objs), "max_opens": int(top[2])},
                fix_h5py="""
dset = f["field"]            # open once, outside the loop
for i in range(n):
    dset[i] = values[i]      # not f["field"][i] = ..., which opens and closes the dataset every time""",
                fix_c="""
hid_t dset = H5Dopen2(file, "field", H5P_DEFAULT);   /* once */
for (i = 0; i < n; i++) { /* select row i */ H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, H5P_DEFAULT, &v[i]); }
H5Dclose(dset);"""))
        return out


@dataclass
class ReopenSettings(Settings):
    min_opens: int = 10  # opens of one file by one rank from which it is "every step"


class FileReopen(Rule):
    id = "file-reopen"
    title = "file opened and closed again every step"
    source = (f"{SEED_004}, h5py metadata cost: 1K file creations 4.7 s in h5py vs 3.0 s in C, i.e. 3-5 ms per "
              "create/close that a file kept open does not pay")
    settings_class = ReopenSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: ReopenSettings = self.settings  # type: ignore[assignment]
        out = []
        per = df[df["op"].isin(FILE_OPEN_OPS)].groupby(["file", "rank"]).size()
        for file in dict.fromkeys(f for (f, _r), n in per.items() if n >= s.min_opens):
            rows = df[(df["file"] == file) & df["op"].isin(FILE_OPEN_OPS + ("file_close",))]
            n = int(per[file].max())
            out.append(self.finding(
                file, rows, f"the file is opened {n} times by one rank ({len(rows)} open/close calls, "
                            f"{rows['dur'].sum():.3f} s): each open reads the superblock and root group again, "
                            "each close flushes and evicts every cached object",
                detail={"opens_per_rank": n},
                fix_h5py="""
f = h5py.File(name, "a")          # once, before the step loop
for step in steps:
    f["field"][step] = compute(step)
    f.flush()                     # if another process reads the file while it is written
f.close()""",
                fix_c="""
hid_t file = H5Fopen(name, H5F_ACC_RDWR, fapl);   /* once, before the step loop */
for (step = 0; step < nsteps; step++) { write_step(file, step); H5Fflush(file, H5F_SCOPE_LOCAL); }
H5Fclose(file);"""))
        return out
