"""Semantic-level benchmarks: whole-file operations measured against HDF5's own tools.

Each ``bench_*`` function runs one comparison side by side in one run and returns a dict (one row of
``h5flow bench semantic`` when that command exists; ``h5flow bench pack`` runs :func:`bench_pack` alone).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PACK_GOAL = 0.8  # issue 15: pack throughput >= 0.8x h5repack's on a native file of the same content


def _content(f: Any, size_bytes: int) -> None:
    """The benchmark file's content: mostly one chunked float64 field and a contiguous int32 table, plus
    small metadata (groups, attributes, a variable-length string dataset)."""
    import numpy as np

    field_bytes = size_bytes * 3 // 4
    rows = max(1, field_bytes // (512 * 8))
    d = f.create_dataset("field/temp", shape=(rows, 512), dtype="f8", chunks=(min(rows, 256), 512))
    step = max(1, (16 << 20) // (512 * 8))
    for i in range(0, rows, step):
        n = min(step, rows - i)
        d[i:i + n] = np.arange(i * 512, (i + n) * 512, dtype="f8").reshape(n, 512) * 0.5
    d.attrs["units"] = "K"
    n = max(1, (size_bytes - field_bytes) // 4)
    t = f.create_dataset("table/id", shape=(n,), dtype="i4")
    step = 4 << 20
    for i in range(0, n, step):
        k = min(step, n - i)
        t[i:i + k] = np.arange(i, i + k, dtype="i4")
    for g in range(16):
        grp = f.create_group(f"meta/g{g}")
        grp.attrs["index"] = g
        grp["small"] = np.arange(100, dtype="f4") + g
    import h5py

    f.create_dataset("meta/names", data=np.array([f"name-{i}" for i in range(1000)], dtype=object),
                     dtype=h5py.string_dtype())


def _time(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def bench_pack(size_mib: float = 256.0, workdir: str | os.PathLike[str] | None = None, ranks: int = 1,
               repeat: int = 3, slab_mib: float = 64.0) -> dict[str, Any]:
    """Pack throughput against ``h5repack`` of a native file with the same content, side by side.

    Writes a container and a native file of ``size_mib`` MiB of data (same content), then ``repeat`` times,
    alternating: ``h5flow pack`` of the container (``mpiexec -n ranks`` when ``ranks`` > 1) and ``h5repack``
    of the native file, each into a new file; the page cache is warm for both. Times are wall times of the
    commands (interpreter start included for ``h5flow pack``; ``pack_api_s`` is the time inside
    :func:`h5flow.packing.pack`, serial only). Returns the medians, throughputs in MiB/s and
    ``ratio`` = pack throughput / h5repack throughput (goal >= 0.8)."""
    import h5py

    from h5flow import packing

    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="h5flow-bench-pack-") if own else workdir)
    work.mkdir(parents=True, exist_ok=True)
    container, native = work / "content.h5flow", work / "content.h5"
    try:
        for p in (container, native):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        size = int(size_mib * (1 << 20))
        with packing.open_container(container, "w") as f:
            _content(f, size)
        with h5py.File(native, "w") as f:
            _content(f, size)
        env = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR",)}
        h5repack = shutil.which("h5repack")
        if h5repack is None:
            raise RuntimeError("h5repack is not on PATH: source build/stack.env first")
        pack_cmd = [sys.executable, "-m", "h5flow.cli", "pack", "--force", "--progress", "never",
                    "--slab-mib", str(slab_mib), str(container), str(work / "packed.h5")]
        if ranks > 1:
            pack_cmd = ["mpiexec", "-n", str(ranks), *pack_cmd]
        pack_s, repack_s, api_s = [], [], []
        for _ in range(repeat):
            pack_s.append(_time(pack_cmd, env))
            (work / "repacked.h5").unlink(missing_ok=True)
            repack_s.append(_time([h5repack, str(native), str(work / "repacked.h5")], env))
            if ranks == 1:
                r = packing.pack(container, work / "packed_api.h5", force=True, slab_bytes=int(slab_mib * (1 << 20)))
                api_s.append(r.seconds)
        data = packing.pack(container, work / "packed_api.h5", force=True).data_bytes / (1 << 20)
        p, q = statistics.median(pack_s), statistics.median(repack_s)
        row: dict[str, Any] = {
            "benchmark": "pack", "size_mib": round(data, 1), "ranks": ranks, "repeat": repeat, "slab_mib": slab_mib,
            "pack_s": round(p, 3), "h5repack_s": round(q, 3),
            "pack_mib_s": round(data / p, 1), "h5repack_mib_s": round(data / q, 1),
            "ratio": round(q / p, 3), "goal": PACK_GOAL,
        }
        if api_s:
            a = statistics.median(api_s)
            row.update(pack_api_s=round(a, 3), pack_api_mib_s=round(data / a, 1), ratio_api=round(q / a, 3))
        row["meets_goal"] = row["ratio"] >= PACK_GOAL
        return row
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
