"""The h5py twin of the C kernel ``h5flow-iotest``: the same case file, the same experiment, the same
``RESULT`` lines, written with h5py's high-level API (``create_dataset``, slicing, ``.collective``).

Run under MPI: ``mpiexec -n 2 python -m h5flow.benchmarks.iotest.h5py_kernel CASEFILE``. The file-access
property list is built with the same settings as the C kernel (MPI-IO or subfiling driver, collective
metadata operations and writes, alignment, metadata block size, libver bounds); h5py has no call for the
two collective-metadata settings, so they are set through the libhdf5 h5py itself loaded. Everything else
goes through h5py as a user would write it. Exit status: 0 ok, 2 bad case file, 3 data read back differs.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

_INT_KEYS = {"index", "steps", "arrays", "rows", "cols", "prows", "pcols", "rank", "align-inc", "align-thr",
             "mblk", "split", "gzip", "szip-mask", "szip-ppb", "delay-us", "seed", "read-seed", "count", "keep"}


# the C kernel's defaults (native/benchmarks/iotest/case.c)
_DEFAULTS: dict[str, Any] = {
    "index": 0, "op": "iotest", "steps": 1, "arrays": 1, "rows": 2, "cols": 2, "prows": 1, "pcols": 1,
    "scaling": "weak", "rank": 2, "slowdim": "step", "layout": "contiguous", "fill": "false", "align-inc": 1,
    "align-thr": 0, "mblk": 2048, "fmt-low": "earliest", "fmt-high": "latest", "io": "independent", "vfd": "mpio",
    "split": 0, "gzip": -1, "szip-mask": 0, "szip-ppb": 0, "delay-us": 0, "seed": 0, "count": 0, "keep": 0,
}


class CaseError(ValueError):
    pass


def parse_line(line: str, lineno: int) -> dict[str, Any]:
    head, sep, file = line.rstrip("\n").partition(" file=")
    if not sep or not file:
        raise CaseError(f"case line {lineno}: needs file= last")
    case: dict[str, Any] = dict(_DEFAULTS, file=file)
    for tok in head.split():
        key, eq, val = tok.partition("=")
        if not eq:
            raise CaseError(f"case line {lineno}: token without '=': {tok!r}")
        if key not in _DEFAULTS and key != "read-seed":
            raise CaseError(f"case line {lineno}: unknown key {key!r}")
        try:
            case[key] = int(val) if key in _INT_KEYS else val
        except ValueError:
            raise CaseError(f"case line {lineno}: bad value {val!r} for {key!r}") from None
    case.setdefault("read-seed", case["seed"])
    return case


def _lib():  # noqa: ANN202
    import ctypes

    from h5flow import _hdf5lib

    lib = _hdf5lib.lib()
    for name in ("H5Pset_all_coll_metadata_ops", "H5Pset_coll_metadata_write"):
        getattr(lib, name).argtypes = [_hdf5lib.hid_t, ctypes.c_bool]
        getattr(lib, name).restype = _hdf5lib.herr_t
    return lib


def _collective_metadata(fapl: Any) -> None:
    """H5Pset_all_coll_metadata_ops + H5Pset_coll_metadata_write, as the C kernel sets them."""
    lib = _lib()
    if lib.H5Pset_all_coll_metadata_ops(fapl.id, True) < 0 or lib.H5Pset_coll_metadata_write(fapl.id, True) < 0:
        raise RuntimeError("setting collective metadata operations failed")


def _uses_mpi(c: dict[str, Any], size: int) -> bool:
    return size > 1 or c["io"] not in ("posix", "core")


def make_fapl(c: dict[str, Any], comm: Any):  # noqa: ANN201
    import h5py
    from mpi4py import MPI

    from h5flow.transports.hdf5 import _h5

    if _uses_mpi(c, comm.size):
        if c["vfd"] == "subfiling":
            fapl = _h5._subfiling_fapl(comm)
        else:
            fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            fapl.set_fapl_mpio(comm, MPI.INFO_NULL)
        _collective_metadata(fapl)
    else:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        if c["io"] == "core":
            fapl.set_fapl_core(64 << 20, True)
        else:
            fapl.set_fapl_sec2()
    if c["split"]:
        member = fapl
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_fapl_split(b"-m.h5", member, b"-r.h5", member)
        if _uses_mpi(c, comm.size):
            _collective_metadata(fapl)
    fapl.set_alignment(c["align-thr"], c["align-inc"])
    fapl.set_meta_block_size(c["mblk"])
    lv = {"earliest": h5py.h5f.LIBVER_EARLIEST, "v18": h5py.h5f.LIBVER_V18, "v110": h5py.h5f.LIBVER_V110,
          "v112": h5py.h5f.LIBVER_V112, "v114": h5py.h5f.LIBVER_V114, "latest": h5py.h5f.LIBVER_LATEST}
    fapl.set_libver_bounds(lv[c["fmt-low"]], lv[c["fmt-high"]])
    return fapl


class _Geom:
    def __init__(self, c: dict[str, Any], rank: int) -> None:
        prow, pcol = divmod(rank, c["pcols"])
        if c["scaling"] == "strong":
            self.mr, self.mc, self.gr, self.gc = c["rows"] // c["prows"], c["cols"] // c["pcols"], c["rows"], c["cols"]
        else:
            self.mr, self.mc = c["rows"], c["cols"]
            self.gr, self.gc = c["rows"] * c["prows"], c["cols"] * c["pcols"]
        self.r0, self.c0 = prow * self.mr, pcol * self.mc


def _tile(c: dict[str, Any], g: _Geom, s: int, a: int, seed: int, out: np.ndarray) -> np.ndarray:
    """The (s, a) tile, generated into ``out`` (one buffer reused, as the C kernel reuses its own)."""
    rows = ((s * c["arrays"] + a) * g.gr + g.r0 + np.arange(g.mr, dtype=np.int64)) * g.gc + seed
    cols = g.c0 + np.arange(g.mc, dtype=np.int64)
    np.add(rows[:, None], cols[None, :], out=out, casting="unsafe")
    return out


def _layout(c: dict[str, Any], g: _Geom, s: int, a: int):  # noqa: ANN202
    """(name, shape, maxshape, chunks, selection) of the dataset (s, a) goes to."""
    tile = (slice(g.r0, g.r0 + g.mr), slice(g.c0, g.c0 + g.mc))
    slow_array = c["slowdim"] == "array"
    chunked = c["layout"] == "chunked"
    S, A = c["steps"], c["arrays"]
    if c["rank"] == 2:
        name = f"array={a}/step={s}" if slow_array else f"step={s}/array={a}"
        return name, (g.gr, g.gc), None, (g.mr, g.mc), tile
    if c["rank"] == 3:
        name = f"array={a}" if slow_array else f"step={s}"
        n0 = S if slow_array else A
        maxshape = ((None if chunked and slow_array else n0), g.gr, g.gc)
        return name, (n0, g.gr, g.gc), maxshape, (1, g.mr, g.mc), ((s if slow_array else a),) + tile
    if slow_array:
        shape, maxshape, chunks, sel = (A, S, g.gr, g.gc), (A, None if chunked else S, g.gr, g.gc), (A, 1, g.mr, g.mc), (a, s)
    else:
        shape, maxshape, chunks, sel = (S, A, g.gr, g.gc), (None if chunked else S, A, g.gr, g.gc), (1, A, g.mr, g.mc), (s, a)
    return "dataset", shape, maxshape, chunks, sel + tile


def _opens_at(c: dict[str, Any], a: int) -> bool:
    return c["rank"] == 2 or (c["rank"] == 3 and c["slowdim"] == "array") or a == 0


def _closes_at(c: dict[str, Any], a: int) -> bool:
    return c["rank"] == 2 or (c["rank"] == 3 and c["slowdim"] == "array") or a == c["arrays"] - 1


def _creates_at(c: dict[str, Any], s: int, a: int) -> bool:
    if c["rank"] == 2:
        return True
    if c["rank"] == 3:
        return s == 0 if c["slowdim"] == "array" else a == 0
    return s == 0 and a == 0


def remove_case_files(path: str, *, directories: bool = True) -> None:
    """The case's file (or, with ``directories``, the container directory a VOL connector made: an existing
    one is refused before the case starts), and what the split and subfiling drivers put beside it."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        if directories:
            shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)
    for q in [Path(path + "-m.h5"), Path(path + "-r.h5"), *p.parent.glob(p.name + ".subfile_*")]:
        if q.is_file() or q.is_symlink():
            q.unlink(missing_ok=True)


def _stored_bytes(p: Path) -> float:
    if p.is_symlink() or not p.exists():
        return 0.0
    if p.is_file():
        return float(p.stat().st_size)
    return float(sum(q.stat().st_size for q in p.rglob("*") if q.is_file() and not q.is_symlink()))


def run_iotest(c: dict[str, Any], comm: Any) -> tuple[list[float], float, float, int, int]:
    import h5py
    from mpi4py import MPI

    g = _Geom(c, comm.rank)
    t = [0.0] * 5  # write-phase, create, write, read-phase, read
    fapl = make_fapl(c, comm)
    collective = _uses_mpi(c, comm.size) and c["io"] == "collective" and not c["split"]
    filters_ok = comm.size == 1 or c["io"] == "collective"
    dkw: dict[str, Any] = {"dtype": "f8", "track_times": True,
                           "fill_time": "alloc" if c["fill"] == "true" else "never"}
    if c["layout"] == "chunked" and filters_ok and c["gzip"] >= 0:
        dkw.update(compression="gzip", compression_opts=c["gzip"])
    if c["layout"] == "chunked" and filters_ok and c["szip-mask"] > 0:
        dkw.update(compression="szip", compression_opts=("nn" if c["szip-mask"] == 32 else "ec", c["szip-ppb"]))
    buf = np.zeros((g.mr, g.mc))
    name_b = c["file"].encode()
    if comm.bcast(Path(c["file"]).is_dir() if comm.rank == 0 else None, root=0):
        raise CaseError(f"case {c['index']}: {c['file']} is an existing directory; the benchmark only writes and "
                        "removes files it creates: choose another hdf5-file or --dir")
    comm.Barrier()
    wall0 = MPI.Wtime()
    seg = t0 = MPI.Wtime()
    f = h5py.File(h5py.h5f.create(name_b, h5py.h5f.ACC_TRUNC, fapl=fapl))
    t[1] += MPI.Wtime() - t0
    dset = None
    for s in range(c["steps"]):
        for a in range(c["arrays"]):
            t[0] += MPI.Wtime() - seg
            _tile(c, g, s, a, c["seed"], buf)
            seg = MPI.Wtime()
            name, shape, maxshape, chunks, sel = _layout(c, g, s, a)
            t0 = MPI.Wtime()
            if _opens_at(c, a):
                if _creates_at(c, s, a):
                    # h5py chunks any dataset given a maxshape: pass one only with the chunked layout
                    chunked = c["layout"] == "chunked"
                    dset = f.create_dataset(name, shape=shape, maxshape=maxshape if chunked else None,
                                            chunks=chunks if chunked else None, **dkw)
                else:
                    dset = f[name]
            t1 = MPI.Wtime()
            t[1] += t1 - t0
            if collective:
                with dset.collective:
                    dset[sel] = buf
            else:
                dset[sel] = buf
            t[2] += MPI.Wtime() - t1
            if _closes_at(c, a):
                dset.id.close()
        if c["delay-us"] > 0 and s + 1 < c["steps"]:
            t[0] += MPI.Wtime() - seg
            time.sleep(c["delay-us"] / 1e6)
            seg = MPI.Wtime()
    t0 = MPI.Wtime()
    f.close()
    t1 = MPI.Wtime()
    t[1] += t1 - t0
    t[0] += t1 - seg

    bad = 0
    # read back into the buffer the data was generated in, as the C kernel does
    back, expect = buf, np.full((g.mr, g.mc), -1.0)
    back.fill(-1.0)
    comm.Barrier()
    seg = MPI.Wtime()
    f = h5py.File(h5py.h5f.open(name_b, h5py.h5f.ACC_RDONLY, fapl=fapl))
    t[3] += MPI.Wtime() - seg
    fsize = _file_size(c, f)
    seg = MPI.Wtime()
    for s in range(c["steps"]):
        for a in range(c["arrays"]):
            name, _, _, _, sel = _layout(c, g, s, a)
            if _opens_at(c, a):
                dset = f[name]
            t0 = MPI.Wtime()
            # read_direct into one reused array: h5py's zero-copy read (dset[sel] would allocate each time)
            if collective:
                with dset.collective:
                    dset.read_direct(back, source_sel=sel)
            else:
                dset.read_direct(back, source_sel=sel)
            t[4] += MPI.Wtime() - t0
            if _closes_at(c, a):
                dset.id.close()
            t[3] += MPI.Wtime() - seg
            bad += int(np.count_nonzero(back != _tile(c, g, s, a, c["read-seed"], expect)))
            back.fill(-1.0)  # a later read that does nothing must not pass
            seg = MPI.Wtime()
    f.close()
    t[3] += MPI.Wtime() - seg
    comm.Barrier()
    wall = MPI.Wtime() - wall0
    checked = c["steps"] * c["arrays"] * g.mr * g.mc
    if bad:
        print(f"h5flow-iotest (h5py): rank {comm.rank}, case {c['index']}: {bad} of {checked} values read back "
              "differ from what was written", file=sys.stderr, flush=True)
    if comm.rank == 0 and not c["keep"]:
        remove_case_files(c["file"])
    comm.Barrier()
    return t, wall, fsize, checked, bad


def _file_size(c: dict[str, Any], f: Any) -> float:
    if not c["split"]:
        try:
            return float(f.id.get_filesize())
        except RuntimeError:  # a VOL connector without the native file-size query: what it stored on disk
            return _stored_bytes(Path(c["file"]))
    return float(sum(Path(c["file"] + s).stat().st_size for s in ("-m.h5", "-r.h5") if Path(c["file"] + s).exists()))


def run_filecreate(c: dict[str, Any], comm: Any) -> tuple[float, int, int]:
    import h5py
    from mpi4py import MPI

    names = [f"{c['file']}.r{comm.rank}.{i}.h5" for i in range(c["count"])]
    comm.Barrier()
    t0 = MPI.Wtime()
    for name in names:
        h5py.File(name, "w").close()
    elapsed = MPI.Wtime() - t0
    made = sum(Path(n).exists() for n in names)
    if not c["keep"]:
        for n in names:
            Path(n).unlink(missing_ok=True)
    return elapsed, made, c["count"] - made


def run_objscan(c: dict[str, Any], comm: Any) -> tuple[float, int, int]:
    import h5py
    from mpi4py import MPI

    path = f"{c['file']}.r{comm.rank}.h5"
    n = c["count"]
    with h5py.File(path, "w") as f:
        g = f.create_group("scan")
        for i in range(n):
            name = f"obj{i:07d}"
            if i % 3 == 0:
                g.create_group(name)
            elif i % 3 == 1:
                g.create_dataset(name, data=np.array([1, 2, 3, 4], dtype=np.int32))
            else:
                g[name] = h5py.SoftLink("/scan/obj0000001")
    groups = datasets = other = 0
    comm.Barrier()
    t0 = MPI.Wtime()
    with h5py.File(path, "r") as f:
        for _, obj in f["scan"].items():
            if isinstance(obj, h5py.Group):
                groups += 1
            elif isinstance(obj, h5py.Dataset):
                datasets += 1
            else:
                other += 1
    elapsed = MPI.Wtime() - t0
    if not c["keep"]:
        Path(path).unlink(missing_ok=True)
    want_groups = (n + 2) // 3
    wrong = int(groups != want_groups or datasets != n - want_groups or other != 0)
    if wrong:
        print(f"h5flow-iotest (h5py): rank {comm.rank}, case {c['index']}: scan found {groups} groups, {datasets} "
              f"datasets, {other} other; expected {want_groups} groups, {n - want_groups} datasets",
              file=sys.stderr, flush=True)
    return elapsed, groups + datasets + other, wrong


def _result_line(index: int, wall: float, fsize: float, mins: list[float], maxs: list[float], checked: int) -> str:
    names = ["write-phase", "creat", "write", "read-phase", "read"]
    parts = [f"RESULT index={index}", f"wall={wall:.6f}", f"fsize={fsize:.0f}"]
    for n, lo, hi in zip(names, mins, maxs):
        parts += [f"{n}-min={lo:.6f}", f"{n}-max={hi:.6f}"]
    return " ".join(parts) + f" checked={checked}"


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if len(argv) != 1:
        if comm.rank == 0:
            print("usage: python -m h5flow.benchmarks.iotest.h5py_kernel CASEFILE", file=sys.stderr)
        return 2
    import h5py

    if comm.rank == 0:
        print("HDF5 " + ".".join(map(str, h5py.version.hdf5_version_tuple)), flush=True)
    for lineno, line in enumerate(Path(argv[0]).read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            c = parse_line(line, lineno)
        except CaseError as e:
            if comm.rank == 0:
                print(f"h5flow-iotest (h5py): {argv[0]}: {e}", file=sys.stderr)
            return 2
        zeros = [0.0] * 5
        try:
            if c["op"] == "iotest":
                t, wall, fsize, checked, bad = run_iotest(c, comm)
            else:
                elapsed, checked, bad = (run_filecreate if c["op"] == "filecreate" else run_objscan)(c, comm)
                t, wall, fsize = [elapsed] + zeros[1:], elapsed, 0.0
        except CaseError as e:
            if comm.rank == 0:
                print(f"h5flow-iotest (h5py): {e}", file=sys.stderr, flush=True)
            return 2
        wall = comm.reduce(wall, op=MPI.MAX, root=0)
        mins = [comm.reduce(x, op=MPI.MIN, root=0) for x in t]
        maxs = [comm.reduce(x, op=MPI.MAX, root=0) for x in t]
        checked = comm.reduce(checked, op=MPI.SUM, root=0)
        if comm.allreduce(bad, op=MPI.SUM):
            if comm.rank == 0:
                print(f"h5flow-iotest (h5py): case {c['index']}: verification failed: the data read back differs "
                      "from the data written", file=sys.stderr, flush=True)
            return 3
        if comm.rank == 0:
            print(_result_line(c["index"], wall, fsize, mins, maxs, checked), flush=True)
    return 0


def _run_or_abort(argv: list[str]) -> int:
    """``main``; an exception on one rank aborts every rank (the others would wait in a collective)."""
    try:
        return main(argv)
    except Exception:  # noqa: BLE001 - report and abort the whole job, as the C kernel's MPI_Abort does
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2)
        return 2


if __name__ == "__main__":
    sys.exit(_run_or_abort(sys.argv[1:]))
