"""Pack throughput (h5flow pack of a container) vs h5repack of a native file with the same content.

Runs :func:`h5flow.benchmarks.semantic.bench_pack`: both commands side by side, alternating, in one run;
prints the medians and the ratio (goal: pack >= 0.8x h5repack's throughput; issue 15).
"""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mib", type=float, default=256.0, help="MiB of data in the file (default 256)")
    p.add_argument("--ranks", type=int, default=1, help="MPI ranks for h5flow pack (default 1: serial)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each command; medians reported (default 3)")
    p.add_argument("--slab-mib", type=float, default=64.0, help="h5flow pack --slab-mib (default 64)")
    p.add_argument("--dir", default=None,
                   help="where the files go (default: a temporary directory in /dev/shm, removed)")
    p.add_argument("--json", action="store_true", help="print the row as JSON")


def launch(args: argparse.Namespace) -> int:
    from h5flow.benchmarks.semantic import bench_pack

    if args.size_mib <= 0 or args.repeat < 1 or args.ranks < 1:
        raise ValueError("--size-mib must be > 0, --repeat and --ranks >= 1")
    row = bench_pack(args.size_mib, args.dir, ranks=args.ranks, repeat=args.repeat, slab_mib=args.slab_mib)
    if args.json:
        print(json.dumps(row, indent=2))
        return 0 if row["same"] else 1
    print(f"pack vs h5repack, {row['size_mib']} MiB, {row['ranks']} rank(s), median of {row['repeat']} "
          f"(load average {row['loadavg']:.2f}):")
    print(f"  h5flow pack   {row['pack_s']:8.3f} s  {row['pack_mib_s']:8.1f} MiB/s  (command: start-up included)")
    if "api_s" in row:
        print(f"  pack() API    {row['api_s']:8.3f} s  {row['api_mib_s']:8.1f} MiB/s  (in-process)")
        print(f"  h5py copy     {row['h5py_s']:8.3f} s  {row['h5py_mib_s']:8.1f} MiB/s  (read whole, write whole)")
    print(f"  h5repack      {row['h5repack_s']:8.3f} s  {row['h5repack_mib_s']:8.1f} MiB/s")
    print(f"  POSIX copy    {row['posix_s']:8.3f} s  {row['posix_mib_s']:8.1f} MiB/s  (the data logs' bytes)")
    print(f"  ratio {row['ratio']:.2f} (goal >= {row['goal']}): {'met' if row['meets_goal'] else 'NOT met'}")
    if "ratio_api" in row:
        print(f"  pack() in-process: {row['ratio_api']:.2f}x h5repack "
              f"({'met' if row['meets_goal_api'] else 'NOT met'}), {row['api_vs_h5py']:.2f}x the h5py copy, "
              f"{row['api_vs_posix']:.2f}x the POSIX copy; start-up {row['startup_s']:.2f} s")
    print(f"  CPU time (user + system): h5flow pack {row['pack_cpu_s']:.3f} s, h5repack {row['h5repack_cpu_s']:.3f} s"
          + (f", pack() {row['api_cpu_s']:.3f} s" if "api_cpu_s" in row else "")
          + f", POSIX copy {row['posix_cpu_s']:.3f} s"
          + f"; ratios {row['ratio_cpu']:.2f}" + (f", {row['ratio_api_cpu']:.2f}" if "ratio_api_cpu" in row else ""))
    print(f"  every copy identical to the native file (h5diff): {row['same']}")
    if not row["same"]:
        return 1
    return 0
