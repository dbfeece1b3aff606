"""Differential test of the stacking connectors: random h5py programs through every stack, against native.

Each seed's program (tests/stack_fuzz.py: datasets of many types and layouts, writes and reads of random
selections, resizes, attributes, links, deletes, flushes, a second file handle, held dataset handles,
close and reopen) runs once with nothing stacked and once through each stack below, in a process per stack.
Every read and every error must be the same, and so must the final file, read back afterwards without the
stacking connectors (natively, or through h5flow_log alone for the stacks over it). h5flow_log alone is not
held to native here: native HDF5 reads the unwritten elements of a contiguous dataset from whatever its
storage held (space a deleted dataset freed, by default no fill value is written there), the container reads
zeros, so the two differ where neither is wrong.

`make test` runs a few seeds per stack; `make test-full` (--full) many. A difference fails with the seed,
the stack and the first operation whose result differs; `python tests/stack_fuzz.py minimise ...` shrinks
such a program (see its docstring).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from h5flow._paths import default_plugin_dir

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
FUZZ = Path(__file__).with_name("stack_fuzz.py")

pytestmark = pytest.mark.skipif(
    not all((PLUGIN_DIR / f"lib{n}.so").exists() for n in ("h5flow_async", "h5flow_cache", "h5flow_log")),
    reason="the stacking connectors are not built (make setup)")

NATIVE = "0;under_info={{}}"  # str.format doubles the braces
LOG = "311;under_info={{}}"
# name: (HDF5_VOL_CONNECTOR, with {tier} for the cache directory; the bottom: "native" or "log")
STACKS: dict[str, tuple[str, str]] = {
    "async": ("h5flow_async under_vol=" + NATIVE, "native"),
    "async-defer": ("h5flow_async defer=1;under_vol=" + NATIVE, "native"),
    "async-nomerge-noadapt": ("h5flow_async merge=0;adapt=off;under_vol=" + NATIVE, "native"),
    "async-small": ("h5flow_async max_mem=3K;adapt=1K;under_vol=" + NATIVE, "native"),
    "cache": ("h5flow_cache path={tier};under_vol=" + NATIVE, "native"),
    "cache-full-block": ("h5flow_cache path={tier};capacity=1K;under_vol=" + NATIVE, "native"),
    "cache-full-through": ("h5flow_cache path={tier};capacity=1K;policy=write_through;under_vol=" + NATIVE,
                           "native"),
    "cache-fg": ("h5flow_cache path={tier};background=off;under_vol=" + NATIVE, "native"),
    "cache/async": ("h5flow_cache path={tier};capacity=2K;under_vol=312;under_info={{defer=1;under_vol="
                    + NATIVE + "}}", "native"),
    "async/cache": ("h5flow_async merge=1;under_vol=313;under_info={{path={tier};background=off;under_vol="
                    + NATIVE + "}}", "native"),
    "async/log": ("h5flow_async under_vol=" + LOG, "log"),
    "async-defer/log": ("h5flow_async defer=1;adapt=off;under_vol=" + LOG, "log"),
    "cache/log": ("h5flow_cache path={tier};under_vol=" + LOG, "log"),
    "cache-full/log": ("h5flow_cache path={tier};capacity=1K;under_vol=" + LOG, "log"),
}
BOTTOM = {"native": None, "log": "h5flow_log"}
FULL_SEEDS = list(range(1, 41))


def env_for(conn: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
    env["HDF5_PLUGIN_PATH"] = str(PLUGIN_DIR)
    env["H5FLOW_CACHE_QUIET"] = "1"
    if conn:
        env["HDF5_VOL_CONNECTOR"] = conn
    return env


def start(args: list[str], conn: str | None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(FUZZ), *args], env=env_for(conn), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], out: Path, what: str) -> Any:
    try:
        text, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
        raise AssertionError(f"{what}: no result in 240 s (a hang?):\n{text[-3000:]}") from None
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}:\n{text[-3000:]}"
    return pickle.loads(out.read_bytes())


def run_stacks(names: list[str], seeds: list[int], tmp: Path) -> list[str]:
    """Run the seeds natively, on h5flow_log and through each named stack; return the differences found."""
    seeds_s = [str(s) for s in seeds]
    bottoms = sorted({STACKS[n][1] for n in names})
    runs: dict[str, tuple[subprocess.Popen[str], Path, Path]] = {}
    for label, conn in [(f"ref-{b}", BOTTOM[b]) for b in bottoms] + [
            (n, STACKS[n][0].format(tier=tmp / f"tier-{i}")) for i, n in enumerate(names)]:
        folder = tmp / f"run-{len(runs)}"
        folder.mkdir()
        if "{tier}" in STACKS.get(label, ("", ""))[0]:
            (tmp / f"tier-{names.index(label)}").mkdir()
        out = folder / "log.pkl"
        runs[label] = (start(["run", str(out), str(folder), *seeds_s], conn), out, folder)
    logs = {label: finish(p, out, f"run {label}") for label, (p, out, _) in runs.items()}
    # the final files, read back by the bottom connector alone
    dumps: dict[str, Any] = {}
    for b in bottoms:
        labels = [f"ref-{b}"] + [n for n in names if STACKS[n][1] == b]
        files = [str(runs[label][2] / f"s{s}.h5") for label in labels for s in seeds_s]
        out = tmp / f"dump-{b}.pkl"
        dumps.update(finish(start(["dump", str(out), *files], BOTTOM[b]), out, f"dump {b}"))
    problems = []
    for n in names:
        ref = f"ref-{STACKS[n][1]}"
        for s in seeds_s:
            problems += compare(logs[ref][s]["log"], logs[n][s]["log"], f"stack {n} seed {s}")
            want, got = (dumps[str(runs[label][2] / f"s{s}.h5")] for label in (ref, n))
            if want != got:
                problems.append(f"stack {n} seed {s}: the final file differs: {diff_dump(want, got)}")
    return problems


def compare(want: list[tuple[int, Any]], got: list[tuple[int, Any]], what: str) -> list[str]:
    w, g = dict(want), dict(got)
    for i in sorted(set(w) | set(g)):
        if w.get(i) != g.get(i):
            return [f"{what}: operation {i} gave {short(g.get(i))}, natively {short(w.get(i))}"]
    return []


def short(x: Any) -> str:
    text = repr(x)
    return text if len(text) < 300 else text[:300] + "..."


def diff_dump(want: Any, got: Any) -> str:
    if not isinstance(want, dict) or not isinstance(got, dict):
        return f"{short(got)} instead of {short(want)}"
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            return f"object {k!r}: {short(got.get(k))} instead of {short(want.get(k))}"
    return "?"


GROUPS = {  # run together, a process per stack (the quick variant runs the first ones of each)
    "async": ["async", "async-defer", "async/log", "async-nomerge-noadapt", "async-small", "async-defer/log"],
    "cache": ["cache-full-block", "cache/async", "async/cache", "cache/log", "cache", "cache-full-through",
              "cache-fg", "cache-full/log"],
}
QUICK_STACKS = 3
QUICK_SEEDS = [1, 2]


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_random_programs_read_the_same_through_every_stack(group: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    full = request.config.getoption("--full")
    stacks = GROUPS[group] if full else GROUPS[group][:QUICK_STACKS]
    problems = run_stacks(stacks, FULL_SEEDS if full else QUICK_SEEDS, tmp_path)
    assert not problems, "\n".join(problems)


if __name__ == "__main__":  # exploration: python tests/test_vol_stack_differential.py STACK[,STACK] SEED...
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        found = run_stacks(sys.argv[1].split(","), [int(s) for s in sys.argv[2:]], Path(d))
    print("\n".join(found) or "no difference")


# ------------------------------------------------------------------------------------ two ranks, MPI-IO

MPI_STACKS = {
    "cache/async": "h5flow_cache under_vol=312;under_info={under_vol=0;under_info={}}",
    "async/cache": "h5flow_async under_vol=313;under_info={under_vol=0;under_info={}}",
}


def _mpi_env(stack: str) -> dict[str, str]:
    return {"HDF5_VOL_CONNECTOR": MPI_STACKS[stack], "HDF5_PLUGIN_PATH": str(PLUGIN_DIR), "H5FLOW_CACHE_QUIET": "1"}


def _mpi_round_trip(comm: Any, path: Path, top: str) -> None:
    """Each rank writes its rows (independent and collective writes, overwrites of its own rows), reads them
    back at once, then, after a flush and a barrier, reads the other rank's rows (what native guarantees),
    grows the dataset collectively and writes again; the file read natively afterwards holds every row."""
    import h5py

    from h5flow import _hdf5lib
    from h5flow.testing.pytest_mpi import mpi_assert

    n, r, other = 3000, comm.rank, (comm.rank + 1) % comm.size
    with h5py.File(path, "w", driver="mpio", comm=comm) as f:
        mpi_assert(comm, _hdf5lib.connector_name(f.id.id) == top, f"{top} not loaded")
        d = f.create_dataset("d", shape=(comm.size * 4, n), maxshape=(None, n), chunks=(1, n), dtype="i8",
                             fillvalue=-1)
        for k in range(3):
            d[r * 4 + k] = np.arange(n) + (r * 10 + k) * n       # independent
        d[r * 4 + 1, ::7] = 5                                     # an overwrite of a queued/cached row
        with d.collective:
            d[r * 4 + 3] = np.full(n, r * 10 + 3)
        want = np.stack([np.arange(n) + (r * 10 + k) * n for k in range(3)] + [np.full(n, r * 10 + 3)])
        want[1, ::7] = 5
        mpi_assert(comm, np.array_equal(d[r * 4: r * 4 + 4], want), "own rows read back before the flush")
        f.flush()
        comm.Barrier()
        got = d[other * 4, :4]
        mpi_assert(comm, np.array_equal(got, np.arange(4) + other * 10 * n), f"other rank's row: {got}")
        d.resize((comm.size * 5, n))                              # collective; grown rows read as fill
        d[comm.size * 4 + r] = np.full(n, 100 + r)
        f.flush()
        comm.Barrier()
        mpi_assert(comm, np.all(d[comm.size * 4 + other] == 100 + other), "other rank's row after the resize")
    comm.Barrier()
    if r == 0:
        with h5py.File(path, "r", driver="core") as f:
            col = f["d"][:, 7]
        rows = [x * 10 * n + 7 + k * n if k < 3 else x * 10 + 3 for x in range(comm.size) for k in range(4)]
        rows = [5 if (i % 4 == 1) else v for i, v in enumerate(rows)]  # column 7 of row 1 was overwritten
        assert list(col) == rows + [100 + x for x in range(comm.size)], list(col)


@pytest.mark.mpi(n=2, env=_mpi_env("cache/async"), timeout=180)
def test_mpi_round_trip_cache_over_async(comm: Any, mpi_tmp_path: Path) -> None:
    _mpi_round_trip(comm, mpi_tmp_path / "ca.h5", "h5flow_cache")


@pytest.mark.mpi(n=2, env=_mpi_env("async/cache"), timeout=180)
def test_mpi_round_trip_async_over_cache(comm: Any, mpi_tmp_path: Path) -> None:
    _mpi_round_trip(comm, mpi_tmp_path / "ac.h5", "h5flow_async")
