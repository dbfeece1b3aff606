"""``h5flow pack`` / ``h5flow unpack``: an h5flow_log container to one native HDF5 file and back.

:func:`pack` writes a single native ``.h5`` file that any HDF5 program reads without the plugin;
:func:`unpack` makes a container from a native file. Both copy, object by object:

* the group tree in link order (creation order where the group tracks it, else by name), hard links, soft
  links and external links (their values as they are);
* committed datatypes, and datasets created with them keep using the copy;
* every dataset with its datatype, dataspace (current and maximum shape) and creation property list
  (chunk shape, fill value and fill/allocation times, attribute creation order; filters where the source
  has them; ``strip_filters=True`` drops them on unpack);
* attributes, in creation order where tracked;
* object references (``h5py.ref_dtype``, also as fields of compound types), remapped to the copies of the
  objects they name; dimension scales (``H5DSset_scale``/``H5DSattach_scale`` on the copies, in the
  reference form of the destination's connector).

Data moves in slabs of at most ``slab_bytes`` (default 64 MiB; whole trailing rows, cut at chunk
boundaries of the first dimension where possible), so memory stays bounded whatever the dataset size.

The containers are opened with the h5flow_log connector through their file access property list
(:mod:`h5flow.connectors.logvol`), the native file with the native connector, so both work in one process
whatever ``HDF5_VOL_CONNECTOR`` says.

Output is atomic: everything is written under ``.<name>.h5flow-tmp.<host>-<pid>.<token>`` in the
destination's directory and renamed to the destination only after a successful close; a failing pack removes
it, and the next pack or unpack to the same name removes those of killed processes of this host.

Under MPI (``comm`` with more than one rank; the command line uses ``COMM_WORLD`` under ``mpiexec``), every
rank makes the same metadata calls on the destination, which is opened with the ``mpio`` driver (native) or
the connector's communicator (container), and the data slabs are split between the ranks (contiguous runs of
slabs of equal total size); each rank reads its slabs from the source, opened independently per rank, and
writes them with independent I/O. See docs/FORMAT.md, "Pack and unpack".
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from h5flow.packing import data
from h5flow.packing.files import (HOST, check_paths, clean_interrupted, create_file, fapl, install_output, is_native,
                                  open_file, remove_output)
from h5flow.packing.objects import Copier
from h5flow.packing.report import PackError, PackReport

__all__ = ["DEFAULT_SLAB_BYTES", "PackError", "PackReport", "is_native", "pack", "unpack"]

DEFAULT_SLAB_BYTES = 64 << 20


def _run(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, direction: str, force: bool,
         slab_bytes: int, progress: bool, comm: Any, strip_filters: bool) -> PackReport:
    import h5py  # noqa: F401  (loads HDF5 before the ctypes calls)

    if slab_bytes < 1:
        raise PackError(f"slab_bytes must be at least 1 (got {slab_bytes})")
    if comm is not None and comm.size == 1:
        comm = None
    rank, size = (0, 1) if comm is None else (comm.rank, comm.size)
    t0 = time.perf_counter()
    srcp, dstp = Path(src), Path(dst)
    src_kind, dst_kind = ("h5flow_log", "native") if direction == "pack" else ("native", "h5flow_log")
    err: BaseException | None = None
    cleaned: list[str] = []
    try:
        if rank == 0:
            cleaned = clean_interrupted(dstp)
    except BaseException as e:  # noqa: BLE001 - re-raised below, on every rank
        err = e
    if comm is not None:
        comm.Barrier()  # the destination as the cleanup left it, on every rank
    try:
        if err is None:
            check_paths(srcp, dstp, force, "container" if direction == "pack" else "native")
    except BaseException as e:  # noqa: BLE001 - re-raised below, on every rank
        err = e
    if comm is not None:
        errs = comm.allgather(None if err is None else repr(err))
        if err is None and any(errs):
            raise PackError(f"rank {next(i for i, e in enumerate(errs) if e)}: {next(e for e in errs if e)}")
    if err is not None:
        if cleaned:  # what the cleanup did must not go unsaid
            raise PackError(f"{err}; before that: {'; '.join(cleaned)}") from err
        raise err
    report = PackReport(src=str(srcp), dst=str(dstp), direction=direction, ranks=size, warnings=cleaned)
    token = None
    if rank == 0:
        token = f"{HOST}-{os.getpid()}.{uuid.uuid4().hex[:12]}"
    if comm is not None:
        token = comm.bcast(token, root=0)
    tmp = dstp.parent / f".{dstp.name}.h5flow-tmp.{token}"
    sf = df = None
    ok = False
    try:
        sf = open_file(srcp, src_kind)  # every rank reads independently
        df = create_file(tmp, dst_kind, sf, comm)
        cp = Copier(sf, df, direction=direction, report=report, comm=comm, slab_bytes=slab_bytes,
                     strip_filters=strip_filters)
        cp.copy_tree()
        report.data_bytes = sum(data.sel_bytes(b, d.itemsize) for d in cp.dsets for b in d.blocks)
        report.slabs = sum(len(d.blocks) for d in cp.dsets)
        # parallel HDF5 cannot write variable-length data or references to a native file ("Parallel IO does
        # not support writing VL or region reference datatypes"): under MPI rank 0 writes those datasets
        # after the collective close
        later = [d for d in cp.dsets if d.vlen or d.refs] if comm is not None and dst_kind == "native" else []
        mine = data.assign([d for d in cp.dsets if d not in later], rank, size)
        failure: str | None = None
        try:
            data.copy_data(cp, mine, progress and rank == 0)
        except Exception as e:  # noqa: BLE001 - every rank must reach the collective close
            failure = f"{type(e).__name__}: {e}"
        if comm is not None:
            report.direct_bytes = comm.allreduce(report.direct_bytes)
            report.direct_chunks = comm.allreduce(report.direct_chunks)
            fails = comm.allgather(failure)
            failure = next((f"rank {i}: {f}" for i, f in enumerate(fails) if f), None)
        if failure is not None:
            raise PackError(f"copying the data of {srcp} failed: {failure}")
        cp.copy_ref_attrs()
        cp.copy_scales()
        cp.types.clear()
        df.close()
        df = None
        if later and rank == 0:
            import h5py

            df = h5py.File(h5py.h5f.open(os.fsencode(tmp), h5py.h5f.ACC_RDWR, fapl=fapl("native", None)))
            cp.df = df
            data.copy_data(cp, [(d, b) for d in later for b in d.blocks], progress)
            df.close()
            df = None
        ok = True
    finally:
        if df is not None:
            try:
                df.close()
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
        if sf is not None:
            sf.close()
        if comm is not None:
            oks = comm.allgather(ok)
            ok = all(oks)
        if rank == 0:
            if ok:
                install_output(tmp, dstp)
            else:
                remove_output(tmp)
        if comm is not None:
            comm.Barrier()
    if not ok:
        raise PackError(f"{direction} of {srcp} failed on another rank; nothing was written to {dstp}")
    report.seconds = time.perf_counter() - t0
    return report


def pack(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, force: bool = False,
         slab_bytes: int = DEFAULT_SLAB_BYTES, progress: bool = False, comm: Any = None) -> PackReport:
    """Copy the h5flow_log container ``src`` into the new native HDF5 file ``dst``.

    ``force`` replaces an existing ``dst``; ``slab_bytes`` bounds the data held in memory per copy step;
    ``progress`` shows a progress bar on stderr (rank 0); ``comm`` (an mpi4py communicator, all its ranks
    calling) shares the data between the ranks. Raises :class:`PackError` (a ``ValueError``),
    ``FileNotFoundError`` or ``FileExistsError`` with a message saying what to do; on any error nothing is
    left at ``dst`` (or the previous ``dst`` stays)."""
    return _run(src, dst, direction="pack", force=force, slab_bytes=slab_bytes, progress=progress, comm=comm,
                strip_filters=False)


def unpack(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, force: bool = False,
           slab_bytes: int = DEFAULT_SLAB_BYTES, progress: bool = False, comm: Any = None,
           strip_filters: bool = False) -> PackReport:
    """Copy the native HDF5 file ``src`` into the new h5flow_log container ``dst`` (see :func:`pack`).

    Filtered (compressed) datasets keep their filters (the container applies them per write);
    ``strip_filters`` copies them without."""
    return _run(src, dst, direction="unpack", force=force, slab_bytes=slab_bytes, progress=progress, comm=comm,
                strip_filters=strip_filters)
