"""Storage rules: fill at creation, alignment of raw data, chunk shapes, the chunk cache."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from h5flow.advise.base import (REF_DARSHAN, RW_OPS, SEED_002, SEED_003, SEED_004, Finding, Rule, Settings, dataset_creates,
                                dims, file_props, human_bytes, nbytes, pow2_ceil, pow2_floor, type_size)


def _parallel(file_p: dict, ranks: int) -> bool:
    return "mpio" in str(file_p.get("driver", "")) or ranks > 1


@dataclass
class FillSettings(Settings):
    min_bytes: int = 64 << 20  # dataset size from which filling it at creation is reported


class FillTime(Rule):
    id = "fill-time"
    title = "fill values written into a large dataset at creation"
    source = (f"{SEED_003}, 'Use Low-level API': a 900 GB chunked dataset created with FILL_TIME_NEVER, "
              "40 minutes -> less than 1 second")
    settings_class = FillSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: FillSettings = self.settings  # type: ignore[assignment]
        fprops = file_props(df)
        ranks = df.groupby("file")["rank"].nunique()
        out = []
        for row in dataset_creates(df).itertuples():
            p = row.p
            size = nbytes(row.shape, row.file_type)
            if size < s.min_bytes or p.get("fill_time") == "never" or p.get("fill_value_set") == "undefined":
                continue
            if p.get("layout") != "chunked":
                continue  # contiguous storage allocated at creation is not filled there (measured: docs/TRACE.md)
            early = p.get("alloc_time") == "early" or _parallel(fprops.get(row.file, {}), int(ranks.get(row.file, 1)))
            if not (p.get("fill_time") == "alloc" or early):
                continue  # filled chunk by chunk at first write: nothing spent at creation
            rows = df[(df["op"] == "dataset_create") & (df["file"] == row.file) & (df["obj"] == row.obj)]
            out.append(self.finding(
                row.file, rows,
                f"dataset {row.obj} ({human_bytes(size)}, {p.get('layout')}) is created with fill time "
                f"'{p.get('fill_time')}' and allocated at creation: HDF5 writes the fill value into all of it "
                f"before the first write ({rows['dur'].max():.3f} s in the create call)",
                detail={"dataset_bytes": size, "fill_time": p.get("fill_time"), "alloc_time": p.get("alloc_time")},
                fix_h5py="""
# only if every element is written before it is read: unwritten elements then read as whatever the
# storage held, not as the fill value
dset = f.create_dataset(name, shape, dtype, chunks=chunks, fill_time="never")
# (low level: dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE); dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER))""",
                fix_c="""
/* only if every element is written before it is read */
hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
H5Pset_chunk(dcpl, rank, chunk_dims);
H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
hid_t dset = H5Dcreate2(file, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);"""))
        return out


@dataclass
class AlignmentSettings(Settings):
    min_write_bytes: int = 1 << 20   # a raw-data write from this size is "large"
    min_total_bytes: int = 8 << 20   # large writes to the file, all ranks, from which it is reported
    max_align: int = 4 << 20         # the largest alignment suggested (a typical stripe: 1-4 MiB)


class Alignment(Rule):
    id = "alignment"
    title = "large raw-data writes not aligned (no alignment, default metadata block)"
    source = (f"{SEED_002}, HACC-IO: 'HDF5 writes 2048 bytes metadata at the beginning of the file. This causes "
              "the alignment issue for the data writes'; 'proper alignment or metadata block size can deliver "
              "similar HDF5 performance as a pure MPI-IO implementation'")
    settings_class = AlignmentSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: AlignmentSettings = self.settings  # type: ignore[assignment]
        out = []
        big = df[(df["op"] == "dataset_write") & (df["bytes"] >= s.min_write_bytes)]
        fprops = file_props(df)
        ranks = df.groupby("file")["rank"].nunique()
        for file, g in big.groupby("file", sort=False):
            p = fprops.get(file, {})
            if not _parallel(p, int(ranks.get(file, 1))) or g["bytes"].sum() < s.min_total_bytes:
                continue
            threshold, align = (list(p.get("alignment") or [1, 1]) + [1, 1])[:2]
            meta_block = int(p.get("meta_block_size") or 2048)
            align_ok = int(align) > 1 and int(threshold) <= int(g["bytes"].min())
            if align_ok or meta_block >= s.min_write_bytes:
                continue
            suggest = min(pow2_floor(int(g["bytes"].median())), s.max_align)
            thr = min(suggest, 64 << 10)
            objs = int(df[(df["file"] == file) & df["op"].isin(("dataset_create", "group_create"))].shape[0])
            mblock = max(64 << 10, min(pow2_ceil(objs * 1024), s.max_align))
            out.append(self.finding(
                file, g,
                f"{len(g)} raw-data writes of {human_bytes(g['bytes'].median())} (median) to a file with alignment "
                f"({threshold}, {align}) and metadata block {meta_block} B: the data start wherever HDF5's "
                f"metadata ends, so every write straddles stripe and block boundaries",
                detail={"alignment": [threshold, align], "meta_block_size": meta_block,
                        "suggested_alignment": [thr, suggest], "suggested_meta_block_size": mblock},
                fix_h5py=f"""
# align every object of {human_bytes(thr)} or more on {human_bytes(suggest)} (use your stripe size if larger):
f = h5py.File(name, "w", driver="mpio", comm=comm, alignment_threshold={thr}, alignment_interval={suggest})
# or reserve a metadata block, so that the raw data start after it:
f = h5py.File(name, "w", driver="mpio", comm=comm, meta_block_size={mblock})""",
                fix_c=f"""
hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
H5Pset_fapl_mpio(fapl, comm, info);
H5Pset_alignment(fapl, {thr}, {suggest});          /* threshold, alignment (the stripe size) */
/* or: H5Pset_meta_block_size(fapl, {mblock}); */
hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);"""))
        return out


def _chunk_bytes(p: dict, file_type: str) -> int:
    return math.prod(int(c) for c in p.get("chunk") or [0]) * type_size(file_type)


@dataclass
class ChunkSettings(Settings):
    tiny_bytes: int = 4 << 10            # chunks below this size are tiny
    min_dataset_bytes: int = 1 << 20     # ... when the dataset is at least this large
    span_chunks: int = 64                # an access (median) touching at least this many chunks is mismatched
    min_calls: int = 8                   # accesses of the dataset needed to call chunks mismatched


class ChunkShape(Rule):
    id = "chunk-shape"
    title = "tiny or mismatched chunks"
    source = (f"{REF_DARSHAN}: chunk dims against access lengths (H5D_CHUNK_SIZE_D*, H5D_ACCESS*_LENGTH); "
              f"{SEED_004}: chunking, one of the h5py features beyond numpy arrays that decide the I/O")
    settings_class = ChunkSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: ChunkSettings = self.settings  # type: ignore[assignment]
        out = []
        rw = df[df["op"].isin(RW_OPS)]
        for row in dataset_creates(df).itertuples():
            p = row.p
            if p.get("layout") != "chunked":
                continue
            cbytes = _chunk_bytes(p, row.file_type)
            size = nbytes(row.shape, row.file_type)
            acc = rw[(rw["file"] == row.file) & (rw["obj"] == row.obj)]
            if cbytes <= 0 or acc.empty:
                continue
            access = acc["npoints"].median() * type_size(row.file_type)
            tiny = cbytes < s.tiny_bytes and size >= s.min_dataset_bytes
            spans = len(acc) >= s.min_calls and access >= s.span_chunks * cbytes
            if not (tiny or spans):
                continue
            chunk = [int(c) for c in p["chunk"]]
            shape = dims(row.shape)
            # a chunk of ~1 MiB keeping the chunk's aspect, never larger than the dataset
            scale = (float(1 << 20) / cbytes) ** (1.0 / max(len(chunk), 1))
            better = [max(1, min(d, int(c * scale))) for c, d in zip(chunk, shape or chunk)]
            why = (f"chunks of {chunk} = {human_bytes(cbytes)} are tiny for a {human_bytes(size)} dataset "
                   f"({size // max(cbytes, 1):,} chunks, each an index entry and a separate I/O)") if tiny else \
                  (f"each access (median {human_bytes(access)}) touches about {int(access // cbytes):,} chunks of "
                   f"{chunk} = {human_bytes(cbytes)}")
            out.append(self.finding(
                row.file, acc, f"dataset {row.obj}: {why}",
                detail={"chunk": chunk, "chunk_bytes": cbytes, "median_access_bytes": int(access),
                        "suggested_chunk": better},
                fix_h5py=f"""
# chunks of about 1 MiB, shaped like the accesses (here {better}):
dset = f.create_dataset(name, shape={tuple(shape)}, dtype=dtype, chunks={tuple(better)})""",
                fix_c=f"""
hsize_t chunk[{len(better)}] = {{{', '.join(map(str, better))}}};   /* about 1 MiB, shaped like the accesses */
H5Pset_chunk(dcpl, {len(better)}, chunk);"""))
        return out


@dataclass
class CacheSettings(Settings):
    cache_bytes: int = 1 << 20         # HDF5's default chunk cache per dataset (rdcc_nbytes)
    min_calls: int = 16                # partial-chunk accesses of a filtered dataset from which it is reported
    min_median_seconds: float = 0.0005  # ... when most of them take this long (a cached chunk answers in µs)


class ChunkCache(Rule):
    id = "chunk-cache"
    title = "chunk cache thrashing (filtered chunks larger than the cache)"
    source = (f"{SEED_003}, 'HDF5 I/O Tuning' (chunking and the low-level API for chunk settings); HDF5's chunk "
              "cache is 1 MiB per dataset by default (H5Pset_chunk_cache)")
    settings_class = CacheSettings

    def check(self, df: pd.DataFrame) -> list[Finding]:
        s: CacheSettings = self.settings  # type: ignore[assignment]
        out = []
        rw = df[df["op"].isin(RW_OPS)]
        for row in dataset_creates(df).itertuples():
            p = row.p
            cbytes = _chunk_bytes(p, row.file_type)
            cache = s.cache_bytes
            if p.get("layout") != "chunked" or not p.get("filters") or cbytes <= cache:
                continue
            acc = rw[(rw["file"] == row.file) & (rw["obj"] == row.obj)]
            partial = acc[acc["npoints"] * type_size(row.file_type) < cbytes]
            # the trace does not carry the cache size set at open; a cache that holds the revisited chunks
            # shows as partial accesses answered from memory, so most of them must be slow
            if len(partial) < s.min_calls or partial["dur"].median() < s.min_median_seconds:
                continue
            want = pow2_ceil(cbytes * 4)
            out.append(self.finding(
                row.file, partial,
                f"dataset {row.obj}: {len(partial)} partial-chunk accesses ({partial['dur'].sum():.3f} s) to "
                f"{human_bytes(cbytes)} chunks filtered by {', '.join(map(str, p['filters']))}, median "
                f"{partial['dur'].median() * 1e3:.1f} ms each: a chunk does not fit the default {human_bytes(cache)} "
                "chunk cache, so each access reads and decodes its whole chunk again",
                detail={"chunk_bytes": cbytes, "cache_bytes": cache, "suggested_cache_bytes": want},
                fix_h5py=f"""
# a chunk cache that holds the chunks an access pattern revisits ({human_bytes(want)} here):
f = h5py.File(name, "r", rdcc_nbytes={want}, rdcc_nslots=10007)
# (or make the chunks smaller than the default 1 MiB cache when the file is written)""",
                fix_c=f"""
hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
H5Pset_chunk_cache(dapl, 10007, {want}, 1.0);   /* slots (a prime), bytes, w0 */
hid_t dset = H5Dopen2(file, name, dapl);"""))
        return out
