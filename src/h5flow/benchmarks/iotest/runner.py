"""Launching the kernels: the C one (``h5flow-iotest``) or its h5py twin, under ``mpiexec``, on one storage
path (a VFD and a VOL connector), reading one ``RESULT`` line per case as it arrives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from h5flow import connectors
from h5flow._paths import build_dir
from h5flow.benchmarks.iotest.cases import Case, case_file_name

KERNEL = "h5flow-iotest"
IMPLS = ("c", "h5py")
VFDS = ("mpio", "subfiling")
VOLS = ("native", "h5flow_log")
METRICS = ("wall", "fsize", "write-phase-min", "write-phase-max", "creat-min", "creat-max", "write-min",
           "write-max", "read-phase-min", "read-phase-max", "read-min", "read-max")


class BenchError(RuntimeError):
    """The benchmark could not run or a case failed (the message says which and why)."""


@dataclass(frozen=True)
class StoragePath:
    vfd: str = "mpio"
    vol: str = "native"

    @property
    def name(self) -> str:
        return f"{self.vfd}+{self.vol}"


@dataclass
class Result:
    case: Case
    impl: str
    path: StoragePath
    metrics: dict[str, float]
    checked: int
    hdf5_version: str

    @property
    def io_time(self) -> float:
        """HDF5 time of the case: slowest rank's write phase + slowest rank's read phase."""
        return self.metrics["write-phase-max"] + self.metrics["read-phase-max"]


@dataclass
class Skipped:
    path: StoragePath
    reason: str


@dataclass
class Launch:
    """One kernel launch: the cases of one process count on one path with one implementation."""

    impl: str
    path: StoragePath
    nprocs: int
    cases: list[Case]
    env: dict[str, str] = field(default_factory=dict)


def kernel_path() -> Path:
    return build_dir() / "native" / "bin" / KERNEL


def mpiexec() -> str:
    exe = shutil.which("mpiexec")
    if exe is None:
        raise BenchError("mpiexec not found on PATH; run `make setup` and `source build/stack.env`")
    return exe


def path_env(path: StoragePath) -> tuple[dict[str, str] | None, str]:
    """The environment a path runs in, or ``None`` and the reason it cannot run here."""
    env = dict(os.environ)
    env.pop("HDF5_VOL_CONNECTOR", None)  # "native" means the native connector, whatever the shell says
    if path.vol == "native":
        return env, ""
    found = {c.name: c for c in connectors.find()}
    if path.vol not in found:
        where = os.pathsep.join(str(p) for p in connectors.plugin_path())
        return None, (f"the {path.vol} VOL connector is not built (no {path.vol} plugin in {where}); build it "
                      f"(native/connectors/{path.vol}) to run this path")
    env["HDF5_VOL_CONNECTOR"] = path.vol
    env["HDF5_PLUGIN_PATH"] = str(found[path.vol].file.parent)
    return env, ""


def usable(path: StoragePath, nprocs: int) -> str:
    """Why ``path`` cannot run ``nprocs`` ranks here ("" when it can)."""
    if path.vfd == "subfiling" and nprocs < 2:
        return ("HDF5 1.14.5's subfiling driver hangs opening a file on a single rank; subfiling cases need "
                "2 or more ranks")
    if path.vol == "h5flow_log" and path.vfd != "mpio":
        return (f"h5flow_log refuses the {path.vfd} driver (its files are directories of POSIX files; "
                "docs/FORMAT.md, 'File drivers and file properties'): run h5flow_log with --vfd mpio")
    return path_env(path)[1]


def unsupported(case: Case, path: StoragePath) -> str:
    """Why ``case`` cannot run on ``path`` with this HDF5 ("" when it can)."""
    if path.vfd == "subfiling" and case.op == "iotest" and case.layout == "chunked" and case.io == "collective":
        return ("HDF5 1.14.5's subfiling driver rejects collective I/O on chunked datasets "
                "(H5FD__subfiling_io_helper: \"collective I/O is currently unsupported\")")
    if path.vfd == "subfiling" and case.op == "iotest" and case.layout == "chunked" and case.fill == "true":
        return ("HDF5 1.14.5's subfiling driver can lose independent writes that follow the fill values "
                "written when chunks are allocated (measured on 2 ranks: rank-3/4 chunked fill=true cases read "
                "back wrong data in 7 of 12 runs, from the C and the h5py kernel alike; mpio never)")
    return ""


def command(impl: str, nprocs: int, case_file: Path) -> list[str]:
    if impl == "c":
        exe = kernel_path()
        if not exe.is_file():
            raise BenchError(f"the C kernel {exe} is not built; run `make setup` (or `cmake --build build/native`)")
        prog = [str(exe)]
    elif impl == "h5py":
        prog = [sys.executable, "-m", "h5flow.benchmarks.iotest.h5py_kernel"]
    else:
        raise BenchError(f"unknown implementation {impl!r}; accepted: {', '.join(IMPLS)}")
    return [mpiexec(), "-n", str(nprocs), *prog, str(case_file)]


def parse_result(line: str) -> tuple[int, dict[str, float], int]:
    fields = dict(tok.split("=", 1) for tok in line.split()[1:])
    return int(fields["index"]), {k: float(fields[k]) for k in METRICS}, int(fields["checked"])


def run_launch(launch: Launch, workdir: Path, hdf5_file: str, on_result: Callable[[Result], None] | None = None,
               *, seed: int = 0, read_seed: int | None = None, timeout: float | None = None) -> list[Result]:
    """Run ``launch.cases`` in one ``mpiexec``; return their results in order (raise :class:`BenchError`)."""
    env, why = path_env(launch.path)
    if env is None:
        raise BenchError(why)
    env.update(launch.env)
    by_index = {c.index: c for c in launch.cases}
    with tempfile.TemporaryDirectory(prefix="h5flow-iotest-") as tmp:
        case_file = Path(tmp) / "cases.txt"
        lines = [c.line(workdir / case_file_name(hdf5_file, c.index), launch.path.vfd, seed=seed,
                        read_seed=read_seed) for c in launch.cases]
        case_file.write_text("\n".join(lines) + "\n")
        err_file = Path(tmp) / "stderr.txt"
        cmd = command(launch.impl, launch.nprocs, case_file)
        results: list[Result] = []
        version = ""
        with open(err_file, "w+") as err, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                                           env=env) as proc:
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    if line.startswith("HDF5 "):
                        version = line.split()[1]
                    elif line.startswith("RESULT "):
                        index, metrics, checked = parse_result(line)
                        r = Result(by_index[index], launch.impl, launch.path, metrics, checked, version)
                        results.append(r)
                        if on_result is not None:
                            on_result(r)
                rc = proc.wait(timeout=timeout)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            err.seek(0)
            stderr = err.read()
    if rc != 0 or len(results) != len(launch.cases):
        done = len(results)
        failed = launch.cases[done] if done < len(launch.cases) else None
        if failed is not None:  # an aborted kernel leaves its files: remove them (never a directory)
            from h5flow.benchmarks.iotest.h5py_kernel import remove_case_files

            remove_case_files(str(workdir / case_file_name(hdf5_file, failed.index)), directories=False)
        what = f"case {failed.index} ({failed.label()})" if failed else "the run"
        kind = "verification failed (data read back differs from data written)" if rc == 3 else f"exit status {rc}"
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise BenchError(f"{launch.impl} kernel on {launch.path.name}, {launch.nprocs} ranks: {what}: {kind}\n{tail}")
    return results


def group_by_nprocs(cases: Sequence[Case]) -> dict[int, list[Case]]:
    groups: dict[int, list[Case]] = {}
    for c in cases:
        groups.setdefault(c.nprocs, []).append(c)
    return groups


__all__ = ["BenchError", "IMPLS", "Launch", "METRICS", "Result", "Skipped", "StoragePath", "VFDS", "VOLS",
           "command", "group_by_nprocs", "unsupported", "kernel_path", "path_env", "run_launch", "usable"]
