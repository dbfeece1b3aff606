"""h5flow_log: two processes creating the same name in one container at the same moment.

Native HDF5 refuses a second creation of a name; so must the connector, whoever wins the race: exactly one
creator succeeds, the other gets an error, and what is read back afterwards (in a fresh process) is the
winner's object and data — never one writer's datatype over the other's bytes (docs/FORMAT.md "Creating a
name"). Each race is two worker processes released together by a barrier, over datasets of different
dtypes (created by name, or anonymously and then named as h5py's `f[name] = array` does), groups, committed
datatypes, soft, external and hard links, with either worker delayed a little in
some trials so that both orders occur. A creation killed half-way is recovered: the name stays free.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from test_vol_h5flow_log_handles import LOG_ENV, PLUGIN_DIR

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

KINDS = ("dataset", "assigned", "group", "datatype", "soft", "external", "hard")

# Worker w of 2: opens the container once, then for every trial waits at the barrier and creates the trial's
# name with its own content; reports per trial whether the creation (and, for a dataset, its write) succeeded.
RACE = r"""
import json, multiprocessing as mp, os, sys, time
KINDS = json.loads(sys.argv[3])

def worker(w, path, trials, barrier, q):
    import numpy as np, h5py
    res = []
    with h5py.File(path, "a") as f:
        for i in range(trials):
            kind = KINDS[i % len(KINDS)]
            name = f"t{i}"
            barrier.wait()
            if (i // len(KINDS)) % 3 == 1 + w:      # a third of the trials delay worker 0, a third worker 1
                time.sleep(0.002)
            try:
                if kind == "dataset":
                    f.create_dataset(name, data=np.full(6, 7, "i4") if w == 0 else np.full(6, 2.5, "f4"))
                elif kind == "assigned":  # h5py: an anonymous dataset, written, then named (H5Olink)
                    f[name] = np.full(6, 7, "i4") if w == 0 else np.full(6, 2.5, "f4")
                elif kind == "group":
                    f.create_group(name).attrs["who"] = w
                elif kind == "datatype":
                    f[name] = np.dtype("i4") if w == 0 else np.dtype("f8")
                elif kind == "soft":
                    f[name] = h5py.SoftLink(f"/target{w}")
                elif kind == "external":
                    f[name] = h5py.ExternalLink(f"other{w}.h5", "/x")
                else:
                    f.id.links.create_hard(name.encode(), f.id, f"target{w}".encode())
                f.flush()
                res.append(True)
            except Exception as e:  # the loser: any HDF5 error (h5py maps it to ValueError/OSError/...)
                res.append(type(e).__name__)
    q.put((w, res))

if __name__ == "__main__":
    path, trials = sys.argv[1], int(sys.argv[2])
    import numpy as np, h5py
    with h5py.File(path, "w") as f:
        for w in (0, 1):
            f.create_group(f"target{w}").attrs["who"] = w
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(w, path, trials, barrier, q)) for w in (0, 1)]
    for p in ps:
        p.start()
    got = {}
    while len(got) < 2:  # a worker that died (exit code set) without reporting fails the run
        try:
            w, res = q.get(timeout=1)
            got[w] = res
        except Exception:
            dead = [p.exitcode for p in ps if p.exitcode not in (None, 0)]
            if dead:
                sys.exit(f"a worker died with exit code {dead}")
    for p in ps:
        p.join(60)
    print("RESULT " + json.dumps([got[0], got[1]]))
"""

# A fresh process reads every trial's name back and says whose it is (0, 1) or what is wrong with it.
READ = r"""
import json, sys, numpy as np, h5py
path, trials, kinds = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
out = []
with h5py.File(path, "r") as f:
    for i in range(trials):
        kind, name = kinds[i % len(kinds)], f"t{i}"
        try:
            if kind in ("dataset", "assigned"):
                v = f[name][...]
                out.append(0 if v.dtype == np.int32 and (v == 7).all() else
                           1 if v.dtype == np.float32 and (v == 2.5).all() else f"{v.dtype}:{v.tolist()}")
            elif kind == "group":
                out.append(int(f[name].attrs["who"]))
            elif kind == "datatype":
                t = f[name].dtype
                out.append(0 if t == np.dtype("i4") else 1 if t == np.dtype("f8") else str(t))
            elif kind == "soft":
                v = f.get(name, getlink=True).path
                out.append({"/target0": 0, "/target1": 1}.get(v, v))
            elif kind == "external":
                v = f.get(name, getlink=True).filename
                out.append({"other0.h5": 0, "other1.h5": 1}.get(v, v))
            else:
                out.append(int(f[name].attrs["who"]))
        except Exception as e:
            out.append(f"{type(e).__name__}: {e}")
print("RESULT " + json.dumps(out))
"""


def _py(code: str, *args: str, cwd: Path, timeout: float = 240, file: Path | None = None,
        env: dict[str, str] | None = None) -> object:
    env = env or dict(os.environ, **LOG_ENV)
    p = subprocess.run([sys.executable, *([str(file)] if file else ["-c", code]), *args], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])


def _race(tmp_path: Path, trials: int, env: dict[str, str] | None = None) -> None:
    path = tmp_path / "race.h5"
    kinds = json.dumps(KINDS)
    script = tmp_path / "race.py"  # a file: spawned workers import their function from it
    script.write_text(RACE)
    res0, res1 = _py(script.read_text(), str(path), str(trials), kinds, cwd=tmp_path, file=script, env=env)
    owners = _py(READ, str(path), str(trials), kinds, cwd=tmp_path, env=env)
    bad = []
    for i in range(trials):
        kind = KINDS[i % len(KINDS)]
        won = [w for w, r in ((0, res0[i]), (1, res1[i])) if r is True]
        if len(won) != 1:
            bad.append((i, kind, "both succeeded" if won else "both failed", res0[i], res1[i]))
        elif owners[i] != won[0]:
            bad.append((i, kind, f"winner {won[0]}, read back {owners[i]!r}"))
    assert not bad, f"{len(bad)} of {trials} races went wrong, e.g. {bad[:5]}"
    winners = {(0 if r is True else 1) for r in res0}
    assert winners == {0, 1}, "every race had the same winner: the delays did not give both orders"


def test_same_name_created_by_two_processes_exactly_one_wins(tmp_path: Path) -> None:
    _race(tmp_path, 6 * len(KINDS) * 6)  # 252 races, 36 of each kind


def test_same_name_races_under_asan(tmp_path: Path) -> None:
    """The races again with the connector built with ASan/UBSan (a shorter run)."""
    from test_vol_h5flow_log_diskfull import asan_env

    env = asan_env()
    _race(tmp_path, 2 * len(KINDS) * 3, env)


# A child creating datasets one after the other, killed at a random moment of it.
CREATOR = r"""
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "a") as f:
    for i in range(100000):
        f.create_group(f"{sys.argv[2]}{i}")
        f.create_dataset(f"{sys.argv[2]}{i}/d", data=np.full(4, i, "i8"))
        f.flush()
        print(i, flush=True)
"""

# Every name the killed child may have reached: whole if there, refused a second time; free if not.
CHECK_AND_CREATE = r"""
import json, sys, numpy as np, h5py
path, prefix = sys.argv[1], sys.argv[2]
out = {"bad": [], "created": 0, "refused": 0}
with h5py.File(path, "a") as f:
    i = missing = 0
    while missing < 3:
        g = f"{prefix}{i}"
        if g in f and "d" in f[g]:
            v = f[g + "/d"][...]  # killed after the creation, before or during the write: the fill value
            if not ((v == i).all() or (v == 0).all()):
                out["bad"].append(g)
            try:
                f.create_dataset(g + "/d", data=np.zeros(1))
                out["bad"].append(g + ": created twice")
            except Exception:
                out["refused"] += 1
        else:  # never created, or killed half-way: the names are free
            missing += 1
            f.require_group(g).create_dataset("d", data=np.full(4, i, "i8"))
            out["created"] += 1
        i += 1
print("RESULT " + json.dumps(out))
"""


def test_a_creation_killed_half_way_leaves_the_name_free(tmp_path: Path) -> None:
    """A writer killed (SIGKILL) in the middle of creating groups and datasets: every name that exists reads
    back whole, and every other one can be created (nothing half-made blocks it or is taken for an object)."""
    import random

    path = tmp_path / "k.h5"
    env = dict(os.environ, **LOG_ENV)
    subprocess.run([sys.executable, "-c", "import h5py,sys; h5py.File(sys.argv[1], 'w').close()", str(path)],
                   env=env, check=True, timeout=60)
    rng = random.Random(7)
    for k in range(4):
        p = subprocess.Popen([sys.executable, "-c", CREATOR, str(path), f"k{k}_"], env=env, stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout is not None
        p.stdout.readline()  # at least one creation is through: kill it somewhere in the next ones
        time.sleep(rng.uniform(0.0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        p.stdout.close()
        got = _py(CHECK_AND_CREATE, str(path), f"k{k}_", cwd=tmp_path)
        assert got["bad"] == [], got
        assert got["refused"] > 0


def test_incomplete_directories_of_the_earlier_protocol_are_taken_over(tmp_path: Path) -> None:
    """What a writer of the earlier protocol left when killed between `mkdir` and its marker (an empty
    directory, or one with some of the object's files but no marker) and a private creation directory left by
    a killed writer are no objects: the names are created over them, whatever kind is created."""
    path = tmp_path / "s.h5"
    env = dict(os.environ, **LOG_ENV)
    subprocess.run([sys.executable, "-c", "import h5py,sys; h5py.File(sys.argv[1], 'w').close()", str(path)],
                   env=env, check=True, timeout=60)
    for n in ("d", "g", "t", "s", "h"):
        (path / n).mkdir()
    (path / "d" / "@crt").write_text("3\n")
    (path / "d" / "@tmp.99.@dataset").write_bytes(b"half")
    (path / "g" / "sub").mkdir()
    (path / "g" / "sub" / "@x").write_text("x")
    (path / "@tmp.new.1.0").mkdir()
    got = _py(textwrap.dedent("""
        import json, sys, numpy as np, h5py
        with h5py.File(sys.argv[1], "a") as f:
            out = {"before": sorted(f.keys())}
            f["d"] = np.arange(3); f.create_group("g").attrs["a"] = 1; f["t"] = np.dtype("i2")
            f["s"] = h5py.SoftLink("/d"); f.id.links.create_hard(b"h", f.id, b"g")
        with h5py.File(sys.argv[1], "r") as f:
            out["after"] = [f["d"][...].tolist(), int(f["g"].attrs["a"]), str(f["t"].dtype), f["s"][...].tolist(),
                            f["h"] == f["g"], sorted(f["g"].keys())]
        print("RESULT " + json.dumps(out))
    """), str(path), cwd=tmp_path)
    assert got == {"before": [], "after": [[0, 1, 2], 1, "int16", [0, 1, 2], True, []]}
