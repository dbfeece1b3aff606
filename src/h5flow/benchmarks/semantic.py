"""Active analysis in h5flow_log: statistics queries vs full scans, and the cost of computing them.

Three rows, measured in one run and shown side by side (table, JSON, PNG in --out):

* **largest value per shard** — a float64 dataset of --size GiB written through h5flow_log in --shards
  writes (a shard is one write; docs/FORMAT.md, "Statistics"): the largest value of every shard and where
  it is, from the per-write statistics (``h5flow.stats.dataset_stats``: the @stats sidecars and the index
  logs, no data read) vs a full scan (h5py reads each shard's rows + numpy ``argmax``), warm page cache,
  median of --reps. Both answers are compared (values and positions); the goal is >= 100x.
* **write overhead** — --ranks MPI ranks each write their part of a --size GiB float64 dataset in
  --write-mib writes into --dir (default /dev/shm: memory bandwidth, no disk), with statistics on and off,
  alternating, median of --reps; the goal is <= 5 %. "Off" is ``H5FLOW_LOG_STATS=0`` in the environment
  of every rank: the same connector, the same write path (data log, index, data checksum, crash
  consistency) without the statistics and the user data function — the fair baseline for what they
  cost. Beside them, in the same rounds: the same ranks ``os.pwrite`` the same bytes in the same
  --write-mib writes into one file each (raw POSIX N-N, what the container's layout amounts to) and copy
  them in memory (``memcpy``, numpy ``copyto`` into a reused buffer): write bandwidth vs those.

* **pack** — ``h5flow pack`` of a container vs ``h5repack`` of a native file with the same content
  (:func:`bench_pack`, --size GiB capped at --pack-mib, alternating, median of --reps); the goal is >= 0.8x
  h5repack's throughput. Also on its own: ``h5flow bench pack``.

Full size: ``h5flow bench semantic`` (1 GiB, 4 ranks). Quick: ``h5flow bench semantic --quick``
(64 MiB, 2 reps).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from h5flow.benchmarks import perf

ROW = 1 << 17  # float64 elements per dataset row (1 MiB)

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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=float, default=1.0, help="GiB per dataset (default 1.0; --quick 0.0625)")
    p.add_argument("--shards", type=int, default=64, help="writes of the query dataset (default 64)")
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks of the write-overhead row (default 4)")
    p.add_argument("--write-mib", type=int, default=16, help="MiB per write in the write-overhead row (16)")
    p.add_argument("--reps", type=int, default=5, help="repetitions, median reported (default 5; --quick 2)")
    p.add_argument("--dir", type=Path, default=None, help="where containers go (default /dev/shm)")
    p.add_argument("--out", type=Path, default=Path("bench-results/semantic"), help="table/JSON/PNG directory")
    p.add_argument("--pack-mib", type=float, default=256.0, help="MiB packed in the pack row (default 256)")
    p.add_argument("--quick", action="store_true", help="64 MiB, 2 repetitions (a smoke run)")


def _env() -> dict[str, str]:
    from h5flow.query.source import connector_env

    return dict(os.environ, **connector_env())


def _worker_query(path: str, reps: int) -> dict[str, Any]:
    import h5py

    from h5flow import stats

    with h5py.File(path, "r") as f:
        d = f["d"]
        t_stats, t_scan = [], []
        for _ in range(reps + 1):  # the first round warms the page cache and the index; not counted
            t0 = time.perf_counter()
            sh = stats.dataset_stats(d)["shards"]
            got = sorted((s["first"][0], s["max"], s["argmax"]) for s in sh)
            t1 = time.perf_counter()
            want = []
            for s in sh:  # the same shards (rows), read and scanned
                a, b = s["first"][0], s["last"][0] + 1
                x = d[a:b]
                i = int(np.argmax(x))
                want.append((a, float(x.flat[i]), [a + i // x.shape[1], i % x.shape[1]]))
            want.sort()
            t2 = time.perf_counter()
            t_stats.append(t1 - t0)
            t_scan.append(t2 - t1)
        sources = sorted({s["source"] for s in sh})
    return {"stats_s": t_stats[1:], "scan_s": t_scan[1:], "same": got == want, "shards": len(got),
            "sources": sources}


def _worker_write(path: str, nbytes: int, write_mib: int, mode: str = "h5") -> None:
    """One round of the write-overhead row under mpiexec. ``mode``: ``h5`` (h5py through h5flow_log;
    statistics on or off by the environment), ``posix`` (os.pwrite of the same bytes, one file per rank)
    or ``memcpy`` (the same bytes copied into a reused buffer)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rows = max(comm.size, nbytes // (ROW * 8) // comm.size * comm.size)
    per = rows // comm.size
    step = max(1, write_mib * (1 << 20) // (ROW * 8))
    rng = np.random.default_rng(comm.rank)
    block = rng.standard_normal((step, ROW))
    parts = [(r, min(step, (comm.rank + 1) * per - r)) for r in range(comm.rank * per, (comm.rank + 1) * per, step)]
    cpu0 = time.process_time()  # CPU seconds of this rank: less sensitive than wall time to a busy machine
    if mode == "h5":
        import h5py

        with h5py.File(path, "w", driver="mpio", comm=comm) as f:
            d = f.create_dataset("d", shape=(rows, ROW), dtype="f8")
            comm.Barrier()
            t0 = MPI.Wtime()
            for r, n in parts:
                d[r:r + n] = block[:n]
    elif mode == "posix":
        os.makedirs(path, exist_ok=True)
        comm.Barrier()
        t0 = MPI.Wtime()
        fd = os.open(os.path.join(path, f"rank{comm.rank}.dat"), os.O_WRONLY | os.O_CREAT, 0o644)
        off = 0
        for _, n in parts:
            off += os.pwrite(fd, memoryview(block[:n]).cast("B"), off)
        os.close(fd)
    else:
        dst = np.empty_like(block)
        comm.Barrier()
        t0 = MPI.Wtime()
        for _, n in parts:
            np.copyto(dst[:n], block[:n])
    t = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    cpu = comm.allreduce(time.process_time() - cpu0, op=MPI.SUM)
    if comm.rank == 0:
        print("H5FLOW_SEMANTIC " + json.dumps({"seconds": t, "cpu": cpu, "bytes": rows * ROW * 8}), flush=True)


def _write_row(work: Path, nbytes: int, ranks: int, write_mib: int, reps: int) -> dict[str, Any]:
    """The write-overhead row: statistics off and on, raw POSIX and memcpy, in rotating order each round
    (medians of ``reps``); overhead = on / off - 1."""
    modes = ["off", "on", "posix", "memcpy"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    wbytes = 0
    for rep in range(reps):
        for mode in modes[rep % len(modes):] + modes[:rep % len(modes)]:
            wpath = work / f"write-{mode}.h5"
            env = _env()
            env["H5FLOW_LOG_STATS"] = "0" if mode == "off" else "1"
            code = ("import sys; from h5flow.benchmarks.semantic import _worker_write; "
                    "_worker_write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])")
            kind = mode if mode in ("posix", "memcpy") else "h5"
            out = subprocess.run([perf.mpiexec(), "-n", str(ranks), sys.executable, "-c", code, str(wpath),
                                  str(nbytes), str(write_mib), kind], env=env, check=True, capture_output=True,
                                 text=True).stdout
            r = json.loads(next(ln for ln in out.splitlines() if ln.startswith("H5FLOW_SEMANTIC "))[16:])
            times[mode].append(r["seconds"])
            cpu[mode].append(r["cpu"])
            wbytes = r["bytes"]
            if mode == "on" and not list((wpath / "d").glob("@stats.*")):
                raise RuntimeError("statistics were on but no @stats sidecar was written")
            if mode == "off" and list((wpath / "d").glob("@stats.*")):
                raise RuntimeError("statistics were off (H5FLOW_LOG_STATS=0) but a @stats sidecar was written")
            shutil.rmtree(wpath, ignore_errors=True)
    med = {m: statistics.median(times[m]) for m in modes}
    w: dict[str, Any] = {"ranks": ranks, "write_mib": write_mib, "overhead_pct": (med["on"] / med["off"] - 1) * 100}
    for m in modes:
        w[f"{m}_s"], w[f"{m}_gbs"], w[f"runs_{m}"] = med[m], wbytes / med[m] / 1e9, times[m]
    w["on_vs_posix"] = med["posix"] / med["on"]  # write bandwidth with statistics / raw POSIX N-N
    w["off_vs_posix"] = med["posix"] / med["off"]
    w["on_vs_memcpy"] = med["memcpy"] / med["on"]
    # the same in CPU seconds of all ranks (the statistics are CPU work: on a machine shared with other
    # jobs this is the steadier measure; reported beside the wall-time overhead, never instead of it)
    w["overhead_cpu_pct"] = (statistics.median(cpu["on"]) / statistics.median(cpu["off"]) - 1) * 100
    w["runs_cpu_on"], w["runs_cpu_off"] = cpu["on"], cpu["off"]
    return w


def _make_query_data(path: Path, nbytes: int, shards: int) -> None:
    code = f"""
import h5py, numpy as np
rows = max({shards}, {nbytes} // ({ROW} * 8) // {shards} * {shards})
step = rows // {shards}
rng = np.random.default_rng(7)
with h5py.File({str(path)!r}, "w") as f:
    d = f.create_dataset("d", shape=(rows, {ROW}), dtype="f8")
    for k in range({shards}):
        x = rng.standard_normal((step, {ROW}))
        x.flat[rng.integers(x.size)] = 10 + k  # one wave per shard, somewhere
        d[k * step:(k + 1) * step] = x
"""
    subprocess.run([sys.executable, "-c", code], env=_env(), check=True)


def _plot(png: Path, res: dict[str, Any]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    q = res["query"]
    a.bar(["statistics", "full scan"], [q["stats_s"], q["scan_s"]], color=["tab:green", "tab:gray"])
    a.set_yscale("log")
    a.set_ylabel("seconds (median)")
    a.set_title(f"largest value per shard ({q['shards']} shards): {q['speedup']:.0f}x")
    w = res["write"]
    b.bar(["stats off", "stats on", "raw POSIX"], [w["off_gbs"], w["on_gbs"], w["posix_gbs"]],
          color=["tab:gray", "tab:green", "tab:blue"])
    b.set_ylabel("GB/s (median)")
    b.set_title(f"write, {w['ranks']} ranks: overhead {w['overhead_pct']:+.1f} %")
    fig.suptitle(f"h5flow_log active analysis, {res['gib']:.3g} GiB per dataset")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def launch(args: argparse.Namespace) -> int:
    if args.quick:
        args.size, args.reps = 0.0625, 2
    nbytes = int(args.size * (1 << 30))
    base = Path(args.dir) if args.dir else perf.default_dir()
    work = Path(tempfile.mkdtemp(prefix="h5flow-semantic-", dir=base))
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        qpath = work / "query.h5"
        print(f"[semantic] writing {args.size:g} GiB in {args.shards} shards to {qpath}", flush=True)
        _make_query_data(qpath, nbytes, args.shards)
        code = ("import json,sys; from h5flow.benchmarks.semantic import _worker_query; "
                "print('H5FLOW_SEMANTIC ' + json.dumps(_worker_query(sys.argv[1], int(sys.argv[2]))))")
        out = subprocess.run([sys.executable, "-c", code, str(qpath), str(args.reps)], env=_env(), check=True,
                             capture_output=True, text=True).stdout
        q = json.loads(next(ln for ln in out.splitlines() if ln.startswith("H5FLOW_SEMANTIC "))[16:])
        shutil.rmtree(qpath)
        q["stats_s"], q["scan_s"] = statistics.median(q["stats_s"]), statistics.median(q["scan_s"])
        q["speedup"] = q["scan_s"] / q["stats_s"]
        w = _write_row(work, nbytes, args.ranks, args.write_mib, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pk = bench_pack(min(args.pack_mib, args.size * 1024), args.dir, repeat=args.reps)
    res = {"gib": args.size, "dir": str(base), "query": q, "write": w, "pack": pk}
    print()
    print(f"{'row':34} {'with statistics':>16} {'without':>14} {'ratio':>9}  {'goal':>7}  check")
    print(f"{'largest value per shard':34} {q['stats_s'] * 1e3:13.2f} ms {q['scan_s'] * 1e3:11.1f} ms "
          f"{q['speedup']:8.0f}x  {'>=100x':>7}  same answer: {q['same']} ({q['shards']} shards, {q['sources']})")
    print(f"{'write overhead, ' + str(args.ranks) + ' ranks':34} {w['on_gbs']:11.2f} GB/s {w['off_gbs']:9.2f} GB/s "
          f"{w['overhead_pct']:+8.1f}%  {'<=5%':>7}  {args.size:g} GiB, {args.write_mib} MiB writes, {base}; "
          f"CPU time {w['overhead_cpu_pct']:+.1f}%")
    print(f"{'  same bytes: raw POSIX N-N, memcpy':34} {w['posix_gbs']:11.2f} GB/s {w['memcpy_gbs']:9.2f} GB/s "
          f"{w['on_vs_posix']:8.2f}x  {'':>7}  stats on / POSIX (off: {w['off_vs_posix']:.2f}x), "
          f"on / memcpy {w['on_vs_memcpy']:.2f}x")
    print(f"{'pack vs h5repack':34} {pk['pack_mib_s']:9.0f} MiB/s {pk['h5repack_mib_s']:7.0f} MiB/s "
          f"{pk['ratio']:8.2f}x  {'>=0.8x':>7}  {pk['size_mib']:g} MiB")
    (args.out / "semantic.json").write_text(json.dumps(res, indent=1))
    png = args.out / "semantic.png"
    made = _plot(png, res)
    print(f"wrote {args.out / 'semantic.json'}" + (f", {png}" if made else " (no PNG: matplotlib missing)"))
    return 0 if q["same"] else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m h5flow.benchmarks.semantic")
    add_arguments(p)
    sys.exit(launch(p.parse_args()))
