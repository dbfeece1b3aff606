"""Every pruning path decides as numpy compares the stored dtype with the literal.

For each numeric dtype a dataset holds boundary values (the dtype's extremes, 0, -0.0, 0.1 as stored, NaN,
±inf, values an int64 loses in float64) in 4-element blocks: blocks of one repeated value (min == max: the
"every element matches" decisions) and blocks of two neighbouring values. Each literal is a stored value,
one ulp (or one) either side in the stored dtype and in float64, a fraction beside it, out-of-range
integers, NaN and ±inf. Every (operator, literal) is answered with a scan, with zone maps, with bitmap bins
(native file) and with the connector's per-write statistics (h5flow_log container); every answer must be
numpy's ``op(stored_array, literal)``, bit for bit, or numpy's error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from query_exact_cases import (BLOCK, DTYPES, NP_OPS, NP_OPS_Q, OPS, data_for, evaluate, expected, literals,
                               stored_values)


def _compare(code: str, got: dict[str, int | str], kinds: tuple[str, ...]) -> None:
    dt = np.dtype(code)
    wrong = [f"{code} x {op} {lit!r} [{kind}]: {got[f'{code}|{op}|{li}|{kind}']}, numpy {exp}"
             for li, lit in enumerate(literals(dt)) for op in OPS if (exp := expected(dt, op, lit)) is not None
             for kind in kinds if got[f"{code}|{op}|{li}|{kind}"] != exp]
    assert not wrong, f"{len(wrong)} answers differ from numpy:\n" + "\n".join(wrong[:40])


@pytest.mark.parametrize("code", DTYPES)
def test_native_scan_zone_maps_and_bitmaps_decide_as_numpy(tmp_path: Path, code: str) -> None:
    from h5flow.query import ApplyOptions, BuildConfig, build_index

    files = {}
    for kind in ("minmax", "bitmap"):
        p = files[kind] = tmp_path / f"{kind}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("d", data=data_for(np.dtype(code)), chunks=(BLOCK,))
        build_index(p, "/d", BuildConfig(kind=kind, bins=4, sub_blocks=1, progress=False))  # type: ignore[arg-type]
    got = evaluate([code], {code: "/d"}, {"scan": (files["minmax"], ApplyOptions(use_index=False)),
                           "minmax": (files["minmax"], ApplyOptions(kinds=("minmax",))),
                           "bitmap": (files["bitmap"], ApplyOptions(kinds=("bitmap",)))})
    _compare(code, got, ("scan", "minmax", "bitmap"))


CONTAINER_SCRIPT = """
import json, sys
import numpy as np, h5py
sys.path.insert(0, sys.argv[2])
import query_exact_cases as T
import h5flow.query.blocks as B
from h5flow.query import ApplyOptions
B.SLAB_ELEMENTS = T.BLOCK  # blocks of 4 elements, as the native chunks: one write per block
c, code = sys.argv[1], sys.argv[3]
with h5py.File(c, "w") as f:
    a = T.data_for(np.dtype(code))
    d = f.create_dataset("d", shape=a.shape, dtype=a.dtype)
    for w in range(0, len(a), T.BLOCK):
        d[w:w + T.BLOCK] = a[w:w + T.BLOCK]
got = T.evaluate([code], {code: "/d"}, {"scan": (c, ApplyOptions(use_index=False)), "stats": (c, ApplyOptions(kinds=("minmax",)))})
print("RESULT " + json.dumps(got))
"""


@pytest.mark.parametrize("code", DTYPES)
def test_container_write_statistics_decide_as_numpy(tmp_path: Path, code: str) -> None:
    from h5flow._paths import default_plugin_dir

    c = tmp_path / "c"
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(default_plugin_dir()))
    proc = subprocess.run([sys.executable, "-c", CONTAINER_SCRIPT, str(c), str(Path(__file__).parent), code],
                          env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.split("RESULT ", 1)[1])
    _compare(code, got, ("scan", "stats"))


def test_float32_literal_between_stored_values_issue_example(tmp_path: Path) -> None:
    """0.1..0.9 stored as float32 in a container: 'x <= 0.1' counts the stored 0.1s (numpy casts the literal
    to float32), with the write statistics as without them."""
    from h5flow._paths import default_plugin_dir

    c = tmp_path / "c.h5"
    script = ("import h5py, numpy as np, sys\n"
              "with h5py.File(sys.argv[1], 'w') as f:\n"
              "    f['x'] = np.linspace(0.1, 0.9, 100001).astype('f4')\n")
    env = dict(os.environ, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(default_plugin_dir()))
    subprocess.run([sys.executable, "-c", script, str(c)], env=env, check=True, timeout=120)
    a = np.linspace(0.1, 0.9, 100001).astype("f4")
    for expr, exp in (("x <= 0.1", a <= 0.1), ("x >= 0.9", a >= 0.9), ("x == 0.1", a == 0.1),
                      ("x == 0.9", a == 0.9)):
        for extra in ((), ("--no-index",)):
            r = subprocess.run([sys.executable, "-m", "h5flow.cli", "query", str(c), expr, "--count", *extra],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            assert f"{int(np.count_nonzero(exp)):,} element(s)" in r.stdout, (expr, extra, r.stdout)


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, np.ndarray, str, int | float]:
    """A dtype, data drawn from its boundary values and random ones, an operator and a literal drawn from the
    boundaries around the data."""
    code = draw(st.sampled_from(DTYPES))
    dt = np.dtype(code)
    pool = stored_values(dt) + ([np.nan] if dt.kind == "f" else [])
    if dt.kind == "f":
        rnd = st.floats(width=8 * dt.itemsize if dt.itemsize in (2, 4, 8) else 64, allow_nan=True)
    elif dt.kind == "b":
        rnd = st.booleans()
    else:
        info = np.iinfo(dt)
        rnd = st.integers(int(info.min), int(info.max))
    vals = draw(st.lists(st.one_of(st.sampled_from(pool), rnd), min_size=1, max_size=40))
    a = np.array(vals, dtype=dt)
    lits: list[int | float] = literals(dt)
    for v in a[: 8].tolist():
        lits.append(v if not isinstance(v, bool) else int(v))
    lit = draw(st.sampled_from(lits))
    return code, a, draw(st.sampled_from(OPS)), lit


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_case())
def test_random_data_and_literals_decide_as_numpy(tmp_path_factory: pytest.TempPathFactory,
                                                  case: tuple[str, np.ndarray, str, int | float]) -> None:
    from h5flow.query import ApplyOptions, BuildConfig, Q, apply, build_index
    from h5flow.query.index import forget_loaded

    code, a, op, lit = case
    d = tmp_path_factory.mktemp("prop")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            exp: int | str = int(np.count_nonzero(NP_OPS[op](a.view(np.uint8) if a.dtype == np.bool_ else a, lit)))
        except (OverflowError, TypeError, ValueError):
            exp = "error"
    for kind in ("minmax", "bitmap"):
        p = d / f"{kind}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("d", data=a, chunks=(3,), maxshape=(None,))
        build_index(p, "/d", BuildConfig(kind=kind, bins=4, progress=False))  # type: ignore[arg-type]
        for opts in (ApplyOptions(use_index=False), ApplyOptions(kinds=(kind,))):
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    with apply(p, NP_OPS_Q[op](Q.data("/d"), lit), opts) as r:
                        got: int | str = r.datasets[0].count
            except (OverflowError, TypeError, ValueError):
                got = "error"
            assert got == exp, (code, a.tolist(), op, lit, kind, opts.use_index)
        forget_loaded()
