"""``h5flow bench async``: how much I/O the stacking connectors hide behind compute (docs/ASYNC.md).

Every case runs the same kernel (:mod:`h5flow.benchmarks.async_kernel`) in a fresh process, so that
``HDF5_VOL_CONNECTOR`` selects its stack: a compute + write loop (compute time and bytes per step, 1..N
ranks) on each storage directory, with native, h5flow_async over native, h5flow_log and h5flow_async over
h5flow_log (and the cache connector's stacks, when it is built). Cases alternate within each repetition
so that the machine's load falls on all of them alike; medians are reported.

Columns: time to solution; the I/O time left exposed (time to solution minus the compute); the fraction of
the plain stack's I/O time hidden (1 - exposed / exposed of the plain stack); the overhead when there is
nothing to hide (a run without compute, against the plain stack). A metadata run times attribute writes
and reports the microseconds each operation costs, per stack. A file run times h5py's create + close of
small files, per stack: the first file of a process (what a connector sets up once) and the median of the
others, each against the plain stack.

``--kernel c`` runs the write loop in the C program ``h5flow-async-loop`` (native/benchmarks/async_loop)
instead: the same loop, each row written as h5py writes it, timed per step in C, so that the table adds the
per-step columns (median write and its CPU time, the two ``H5Sclose`` after it, the first step, the memcpy
floor, the file's close). Every C run names the connector its file went through and reads the file back; a
run through another connector than the stack's, or one whose rows differ from what was written, is an error.
One rank only. The metadata run stays with the Python kernel (h5py attribute writes).

``--mode explicit`` (C kernel) writes through HDF5's event-set API instead: ``H5Dwrite_async`` of each step
from two row buffers used in turn, ``H5ESwait`` for a step's write after the next step's compute; the
foreground write time then includes the wait's blocking time. Its stacks add ``h5flow_async`` with
``explicit_copy=0`` (the write reads the program's buffer, nothing copied) over native and over h5flow_log.
With the native connector the same calls run at the call. ``--mode both`` puts both loops in one table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from h5flow import connectors
from h5flow.benchmarks.perf import kernel_path

C_KERNEL = "h5flow-async-loop"
# the connector at the top of each stack: what the C kernel must report its file went through
_TOP = {"native": "native", "async": "h5flow_async", "async-nocopy": "h5flow_async", "cache": "h5flow_cache",
        "cache+async": "h5flow_cache", "log": "h5flow_log", "async/log": "h5flow_async",
        "async-nocopy/log": "h5flow_async"}
# the stacks that differ from another only in event-set writes: run in explicit mode alone
_EXPLICIT_ONLY = ("async-nocopy", "async-nocopy/log")
# the C kernel's per-step fields, as (JSON field, column title, width, format)
_STEP_COLUMNS = (("med_write_ms", "write ms", 8, ".2f"), ("med_cpu_ms", "cpu ms", 7, ".2f"),
                 ("post_ms", "Sclose ms", 9, ".3f"), ("wait_ms", "wait ms", 7, ".3f"), ("step0_ms", "step0 ms", 8, ".2f"),
                 ("memcpy_floor_ms", "floor ms", 8, ".3f"), ("close_s", "close s", 8, ".4f"))


def _stacks() -> dict[str, str | None]:
    """name -> HDF5_VOL_CONNECTOR (None: native) of every stack the built connectors allow."""
    names = {c.name for c in connectors.find()}
    stacks: dict[str, str | None] = {"native": None}
    if "h5flow_async" in names:
        stacks["async"] = "h5flow_async under_vol=0;under_info={}"
        stacks["async-nocopy"] = "h5flow_async explicit_copy=0;under_vol=0;under_info={}"
    if "h5flow_cache" in names:
        stacks["cache"] = "h5flow_cache under_vol=0;under_info={}"
        if "h5flow_async" in names:
            stacks["cache+async"] = "h5flow_cache under_vol=312;under_info={under_vol=0;under_info={}}"
    if "h5flow_log" in names:
        stacks["log"] = "h5flow_log"
        if "h5flow_async" in names:
            stacks["async/log"] = "h5flow_async under_vol=311;under_info={}"
            stacks["async-nocopy/log"] = "h5flow_async explicit_copy=0;under_vol=311;under_info={}"
    return stacks


def _plain(stack: str) -> str:
    """The stack without the stacking connectors (what its hidden fraction is measured against)."""
    return "log" if stack.endswith("log") else "native"


def _run(stack_env: str | None, path: Path, ranks: int, extra: list[str], kernel: str = "python") -> dict:
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)
    if stack_env:
        env["HDF5_VOL_CONNECTOR"] = stack_env
    if kernel == "c":
        cmd = [str(kernel_path(C_KERNEL)), str(path), *extra]
    else:
        cmd = [sys.executable, "-m", "h5flow.benchmarks.async_kernel", str(path), *extra]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd, "--mpi"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"kernel failed ({stack_env or 'native'}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _run_c(name: str, stack_env: str | None, path: Path, extra: list[str]) -> dict:
    """One run of the C kernel, checked: its file went through the stack's top connector and read back intact."""
    out = _run(stack_env, path, 1, extra, kernel="c")
    mode = extra[extra.index("--mode") + 1] if "--mode" in extra else "implicit"
    if out.get("mode") != mode:
        raise RuntimeError(f"stack {name}: the C kernel ran the {out.get('mode')!r} loop, not the {mode!r} one")
    if out.get("connector") != _TOP[name]:
        raise RuntimeError(f"stack {name}: the file went through {out.get('connector')!r}, not {_TOP[name]!r} "
                           f"(HDF5_VOL_CONNECTOR={stack_env!r}; is HDF5_PLUGIN_PATH the built plugins?)")
    if out.get("verified") is not True:
        raise RuntimeError(f"stack {name}: the C kernel did not read its file back")
    return out


def _medians(samples: list[dict]) -> dict[str, float]:
    """The median of each numeric field over the repetitions (names and flags are not averaged)."""
    keys = [k for k, v in samples[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: statistics.median(s[k] for s in samples) for k in keys}


def _remove(path: Path) -> None:
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=20, help="steps of the loop (default 20)")
    p.add_argument("--step-mib", type=float, default=16.0, help="MiB each rank writes per step (default 16)")
    p.add_argument("--compute-ms", type=float, default=100.0, help="compute per step in ms (default 100)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1], help="rank counts (default 1)")
    p.add_argument("--dirs", nargs="+", default=["/var/tmp", "/dev/shm"],
                   help="storage directories (default /var/tmp = disk, /dev/shm = tmpfs; scripts/slow-disk.sh mounts a "
                        "sync ext4, storage slower than the page cache)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions; medians reported (default 3)")
    p.add_argument("--metadata-ops", type=int, default=2000,
                   help="attribute writes of the metadata run (0: no metadata run; default 2000)")
    p.add_argument("--file-ops", type=int, default=20,
                   help="files created and closed per process in the file run, after the first (0: no file run; "
                        "default 20)")
    p.add_argument("--png", default="bench-async.png", help="the figure (default bench-async.png)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--kernel", choices=("python", "c"), default="python",
                   help="the write loop's program: the h5py kernel (default) or the C program h5flow-async-loop, "
                        "which adds per-step columns (one rank only)")
    p.add_argument("--mode", choices=("implicit", "explicit", "both"), default="implicit",
                   help="with --kernel c: implicit (default: plain H5Dwrite, as h5py writes), explicit (HDF5's "
                        "event sets: H5Dwrite_async from two buffers in turn, H5ESwait for a step's write after "
                        "the next step's compute; adds the stacks async-nocopy and async-nocopy/log, h5flow_async "
                        "with explicit_copy=0), or both, side by side in one table")


def launch(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.step_mib <= 0 or args.compute_ms < 0 or args.repeat < 1 or min(args.ranks) < 1:
        raise ValueError("--steps, --repeat, --ranks >= 1; --step-mib > 0; --compute-ms >= 0")
    if args.mode != "implicit" and args.kernel != "c":
        raise ValueError(f"--mode {args.mode} needs --kernel c: the h5py kernel has no event sets")
    if args.kernel == "c" and max(args.ranks) > 1:
        raise ValueError(f"--kernel c runs one rank only (--ranks {' '.join(map(str, args.ranks))} given): "
                         "use --ranks 1, or the Python kernel for several ranks")
    stacks = _stacks()
    modes = ("implicit", "explicit") if args.mode == "both" else (args.mode,)
    # (mode, stack name, HDF5_VOL_CONNECTOR) of every case, run in this order in each repetition
    cases = [(mode, name, env) for mode in modes for name, env in stacks.items()
             if mode == "explicit" or name not in _EXPLICIT_ONLY]
    step_bytes = max(8, int(args.step_mib * (1 << 20)) // 8 * 8)
    rows: list[dict] = []
    for d in args.dirs:
        for ranks in args.ranks:
            for compute_ms in sorted({args.compute_ms, 0.0}):
                samples: dict[tuple[str, str], list[dict]] = {(mode, name): [] for mode, name, _ in cases}
                for _ in range(args.repeat):
                    for mode, name, env in cases:
                        with tempfile.TemporaryDirectory(dir=d, prefix="h5flow-bench-async-") as tmp:
                            path = Path(tmp) / "f.h5"
                            loop = ["--steps", str(args.steps), "--step-bytes", str(step_bytes),
                                    "--compute-s", str(compute_ms / 1000)]
                            samples[mode, name].append(_run_c(name, env, path, [*loop, "--mode", mode])
                                                       if args.kernel == "c" else _run(env, path, ranks, loop))
                            _remove(path)
                med = {key: _medians(v) for key, v in samples.items()}
                for (mode, name), m in med.items():
                    exposed = max(0.0, m["total_s"] - m["compute_s"])
                    base = med[mode, _plain(name)]  # the plain stack in the same mode
                    base_exposed = max(1e-9, base["total_s"] - base["compute_s"])
                    rows.append({"dir": d, "ranks": ranks, "compute_ms": compute_ms, "mode": mode, "stack": name,
                                 "total_s": m["total_s"], "exposed_io_s": exposed,
                                 "hidden": 1 - exposed / base_exposed if name != _plain(name) else 0.0,
                                 "vs_plain": m["total_s"] / base["total_s"],
                                 **{k: m[k] for k, *_ in _STEP_COLUMNS if args.kernel == "c"}})
    meta: list[dict] = []
    if args.metadata_ops:
        for name, env in stacks.items():
            if name in _EXPLICIT_ONLY:  # the same connector settings for attribute writes as its copying twin
                continue
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(dir=args.dirs[-1], prefix="h5flow-bench-async-") as tmp:
                    runs.append(_run(env, Path(tmp) / "m.h5", 1, ["--metadata-ops", str(args.metadata_ops)]))
            meta.append({"stack": name, "per_op_us": statistics.median(r["per_op_us"] for r in runs)})
        base = {m["stack"]: m["per_op_us"] for m in meta}
        for m in meta:
            m["added_us"] = m["per_op_us"] - base[_plain(m["stack"])]
    # a file's create + close does not depend on explicit_copy: the copying twin's row stands for it
    files = _file_run({n: e for n, e in stacks.items() if n not in _EXPLICIT_ONLY}, args) if args.file_ops else []
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rows": rows, "metadata": meta, "files": files, "loadavg": load}, indent=2))
    else:
        print(f"h5flow bench async: {args.steps} steps x {args.step_mib} MiB per rank, compute "
              f"{args.compute_ms} ms/step (and 0), median of {args.repeat}, {args.kernel} kernel, "
              f"{' and '.join(modes)} mode; "
              f"load average {load:.2f}")
        steps = _STEP_COLUMNS if args.kernel == "c" else ()
        print(f"{'dir':10} {'ranks':>5} {'comp ms':>7} {'mode':8} {'stack':16} {'total s':>8} {'exposed s':>9} "
              f"{'hidden':>7} {'vs plain':>8}" + "".join(f" {title:>{w}}" for _, title, w, _ in steps))
        for r in rows:
            print(f"{r['dir']:10} {r['ranks']:5d} {r['compute_ms']:7.0f} {r['mode']:8} {r['stack']:16} "
                  f"{r['total_s']:8.3f} "
                  f"{r['exposed_io_s']:9.3f} {r['hidden'] * 100:6.1f}% {r['vs_plain']:8.3f}"
                  + "".join(f" {r[k]:{w}{fmt}}" for k, _, w, fmt in steps))
        for m in meta:
            print(f"metadata: {m['stack']:12} {m['per_op_us']:8.1f} us/op ({m['added_us']:+.1f} us vs plain)")
        for r in files:
            print(f"files:    {r['stack']:12} first {r['first_file_ms']:8.2f} ms ({r['first_added_ms']:+.2f} ms vs "
                  f"plain), then {r['per_file_us']:8.1f} us/file ({r['added_us']:+.1f} us vs plain)")
    _figure(rows, Path(args.png))
    print(f"figure: {args.png}")
    return 0


def _file_run(stacks: dict[str, str | None], args: argparse.Namespace) -> list[dict]:
    """Each stack's cost of a file's create + close (h5py, one dataset, nothing written): the first file of a
    fresh process and the median of the next ``--file-ops``, medians over ``--repeat`` processes, stacks
    alternating; on the last of ``--dirs``."""
    runs: dict[str, list[dict]] = {s: [] for s in stacks}
    for _ in range(args.repeat):
        for name, env in stacks.items():
            with tempfile.TemporaryDirectory(dir=args.dirs[-1], prefix="h5flow-bench-async-") as tmp:
                runs[name].append(_run(env, Path(tmp) / "o.h5", 1, ["--file-ops", str(args.file_ops)]))
    out = [{"stack": name, **_medians(r)} for name, r in runs.items()]
    base = {r["stack"]: r for r in out}
    for r in out:
        plain = base[_plain(r["stack"])]
        r["first_added_ms"] = r["first_file_ms"] - plain["first_file_ms"]
        r["added_us"] = r["per_file_us"] - plain["per_file_us"]
    return out


def _figure(rows: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["dir"], r["ranks"], r["compute_ms"]) for r in rows})
    series = list(dict.fromkeys((r["mode"], r["stack"]) for r in rows))
    modes = {mode for mode, _ in series}
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) * (len(series) / 6 if len(series) > 6 else 1)), 4))
    width = 0.8 / max(1, len(series))
    for k, (mode, s) in enumerate(series):
        ys = [next((r["total_s"] for r in rows if (r["dir"], r["ranks"], r["compute_ms"]) == g
                    and (r["mode"], r["stack"]) == (mode, s)), 0.0) for g in groups]
        ax.bar([i + k * width for i in range(len(groups))], ys, width,
               label=s if len(modes) == 1 else f"{s} ({mode})")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))],
                  [f"{d}\n{n} rank(s), {c:.0f} ms" for d, n, c in groups], fontsize=8)
    ax.set_ylabel("time to solution (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
