"""h5flow_log: what is on disk is never silently falsified or lost (fault injection).

Each test injects one fault found by fault injection (docs/FORMAT.md "Crashes and corruption") and holds the
connector to the rule: either the right data comes back, or a clear HDF5 error does — never a crash, never
wrong values or fill values in place of written data. Scripts run in a subprocess with the connector selected
(HDF5 reads ``HDF5_VOL_CONNECTOR`` once, at start-up). Records are crafted here with this module's own
encoder (the format's record layout and CRC32C), independent of the connector's code.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from h5flow._paths import default_plugin_dir

PLUGIN_DIR = Path(os.environ.get("H5FLOW_LOG_PLUGIN_DIR", default_plugin_dir()))
LOG_ENV = {"HDF5_VOL_CONNECTOR": "h5flow_log", "HDF5_PLUGIN_PATH": str(PLUGIN_DIR)}

pytestmark = pytest.mark.skipif(not (PLUGIN_DIR / "libh5flow_log.so").exists(),
                                reason="h5flow_log plugin not built (run make setup)")

PRELUDE = """
import os, sys, numpy as np, h5py
from h5flow import _hdf5lib
def opened(f):
    assert _hdf5lib.connector_name(f.id.id) == "h5flow_log", _hdf5lib.connector_name(f.id.id)
    return f
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **LOG_ENV)
    env.pop("H5FLOW_LOG_VERIFY", None)
    env.update(extra)
    return env


def run_script(body: str, *args: str, check: bool = True, timeout: int = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args],
                          env=env or _env(), capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


READ_EXPECT_ERROR = """
    with opened(h5py.File(sys.argv[1], "r")) as f:
        try:
            v = f[sys.argv[2]][...]
        except (OSError, RuntimeError, ValueError) as e:
            print("error:", e)
        else:
            print("no error; values:", np.unique(v, return_counts=True))
"""


def h5dump(path: Path, dset: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["h5dump", "--enable-error-stack", "-d", dset, str(path)], env=_env(**env),
                          capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------- the record format, independently
def _crc_table() -> list[int]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


MAGIC = 0x58494C48
M64 = (1 << 64) - 1


def parse_records(raw: bytes) -> list[dict]:
    """Every complete record of an index log: its fields, with `ext` the raw bytes between the fixed
    header and the dims (the optional extension of a newer format, kept verbatim)."""
    out, pos = [], 0
    while pos + 8 <= len(raw):
        magic, ln = struct.unpack_from("<II", raw, pos)
        assert magic == MAGIC, f"bad magic at {pos}"
        if pos + ln > len(raw):
            break
        epoch, order, data_off, nbytes, nruns, rank, flags = struct.unpack_from("<QQQQQII", raw, pos + 8)
        ext_len = ln - 56 - 8 * rank - 16 * nruns - 4
        q = pos + 56 + ext_len
        dims = list(struct.unpack_from(f"<{rank}Q", raw, q))
        q += 8 * rank
        runs = [struct.unpack_from("<QQ", raw, q + 16 * i) for i in range(nruns)]
        out.append(dict(epoch=epoch, order=order, data_off=data_off, nbytes=nbytes, rank=rank, flags=flags,
                        dims=dims, runs=[list(r) for r in runs], ext=raw[pos + 56:pos + 56 + ext_len],
                        pos=pos, len=ln))
        pos += ln
    return out


def encode_record(r: dict, nruns: int | None = None, rank: int | None = None) -> bytes:
    """A record with a valid checksum; nruns/rank override the header fields only (inconsistent headers)."""
    body = struct.pack("<QQQQQII", r["epoch"] & M64, r["order"] & M64, r["data_off"] & M64,
                       r["nbytes"] & M64, (len(r["runs"]) if nruns is None else nruns) & M64,
                       (r["rank"] if rank is None else rank) & 0xFFFFFFFF, r["flags"] & 0xFFFFFFFF)
    body += r.get("ext", b"")
    body += b"".join(struct.pack("<Q", d & M64) for d in r["dims"])
    body += b"".join(struct.pack("<QQ", s & M64, n & M64) for s, n in r["runs"])
    head = struct.pack("<II", MAGIC, 8 + len(body) + 4)
    rec = head + body
    return rec + struct.pack("<I", crc32c(rec))


def one_idx(dset_dir: Path) -> Path:
    idx = sorted(dset_dir.glob("@log.*.idx"))
    assert len(idx) == 1, idx
    return idx[0]


# ---------------------------------------------------------------- 1. two writers opening at the same moment
CHILD = PRELUDE + """
p, go, ready, row, half = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
vals = np.arange(500, dtype="i4") + 1000 * row + 100000 * half
open(ready, "w").close()
while not os.path.exists(go):   # spin: both children leave this loop within microseconds
    pass
with opened(h5py.File(p, "a")) as f:
    f["d"][row, 500 * half:500 * half + 500] = vals
print("OK")
"""


def test_two_writers_opening_together_get_their_own_logs(tmp_path: Path) -> None:
    """Two processes open one container writable at the same moment, several times: each gets its own
    epoch (its own logs), and every element either wrote reads back."""
    rounds = 8  # the old code collided in 1 to 6 of 6 rounds
    p = tmp_path / "race.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("d", shape=(int(sys.argv[2]), 1000), dtype="i4", fillvalue=-1)
    """, str(p), str(rounds))
    for row in range(rounds):
        go = tmp_path / f"go.{row}"
        ready = [tmp_path / f"ready.{row}.{h}" for h in (0, 1)]
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(p), str(go), str(ready[h]), str(row), str(h)],
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for h in (0, 1)]
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.002)
        go.touch()
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and "OK" in out, out + err
    epochs = {f.name.split(".")[1] for f in (p / "d").glob("@log.*.idx")}
    assert len(epochs) == 2 * rounds, f"writers shared an epoch (and its logs): {sorted(epochs)}"
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"][...]
        for row in range(d.shape[0]):
            for half in (0, 1):
                want = np.arange(500, dtype="i4") + 1000 * row + 100000 * half
                got = d[row, 500 * half:500 * half + 500]
                assert (got == want).all(), (row, half, int((got != want).sum()), "elements wrong")
        print("OK")
    """, str(p))


# ---------------------------------------------------------------- 2. one flipped bit in a length field
def _ten_writes(p: Path) -> None:
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(1000,), dtype="i4", fillvalue=-1)
            for i in range(10):
                d[100 * i:100 * i + 100] = i
    """, str(p))


def test_flipped_length_bit_in_the_middle_is_an_error_not_a_torn_tail(tmp_path: Path) -> None:
    from h5flow.connectors import h5flow_log

    p = tmp_path / "len.h5"
    _ten_writes(p)
    idx = one_idx(p / "d")
    raw = bytearray(idx.read_bytes())
    recs = parse_records(bytes(raw))
    assert len([r for r in recs if r["runs"]]) == 10
    third = recs[2]["pos"]
    raw[third + 4 + 2] ^= 0x04  # bit 18 of record 3's length: it now claims to run past the end of the log
    idx.write_bytes(bytes(raw))
    proc = run_script(READ_EXPECT_ERROR, str(p), "d")
    assert "error:" in proc.stdout and "corrupt" in proc.stdout, proc.stdout
    assert f"byte {third}" in proc.stdout, proc.stdout  # where it is
    dump = h5dump(p, "/d")
    assert dump.returncode != 0 and "corrupt" in dump.stderr, dump.stdout + dump.stderr
    with pytest.raises(h5flow_log.ContainerError, match="corrupt"):  # h5flow ls agrees with the connector
        h5flow_log.scan(p)
    # a writer reopening the container does not cut the log at the damaged record either
    proc = run_script("""
        with opened(h5py.File(sys.argv[1], "a")) as f:
            f["d"][0] = 7
        print("wrote")
    """, str(p), check=False)
    assert idx.stat().st_size == len(raw), "the damaged log was truncated"
    proc = run_script(READ_EXPECT_ERROR, str(p), "d")
    assert "corrupt" in proc.stdout, proc.stdout
    _torn_tail_is_still_tolerated(tmp_path)
    _reopening_writer_does_not_cut_a_damaged_log(tmp_path)


def _reopening_writer_does_not_cut_a_damaged_log(tmp_path: Path) -> None:
    """A dataset closed and reopened in one file open appends to the same epoch's logs: damage found there
    is refused, not cut off with everything after it."""
    p = tmp_path / "reopen.h5"
    proc = run_script("""
        import gc, glob, struct
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(1000,), dtype="i4", fillvalue=-1)
            for i in range(10):
                d[100 * i:100 * i + 100] = i
            del d; gc.collect()                       # closed: its writer is gone
            idx, = glob.glob(os.path.join(sys.argv[1], "d", "@log.*.idx"))
            raw = bytearray(open(idx, "rb").read())
            pos = 0
            for _ in range(2):
                pos += struct.unpack_from("<I", raw, pos + 4)[0]
            raw[pos + 6] ^= 0x04                      # record 3's length runs past the end
            open(idx, "wb").write(raw)
            size = len(raw)
            try:
                f["d"][0] = 7                         # the reopened writer reads its log again
            except (OSError, RuntimeError) as e:
                print("error:", e)
            assert os.path.getsize(idx) == size, "the damaged log was cut"
        print("done")
    """, str(p))
    assert "error:" in proc.stdout and "corrupt" in proc.stdout and "done" in proc.stdout, proc.stdout


def _torn_tail_is_still_tolerated(tmp_path: Path) -> None:
    """The counterpart: an incomplete last record after the last flush is a crash, not corruption."""
    p = tmp_path / "torn.h5"
    proc = run_script("""
        f = opened(h5py.File(sys.argv[1], "w"))
        d = f.create_dataset("d", shape=(1000,), dtype="i4", fillvalue=-1)
        for i in range(5):
            d[100 * i:100 * i + 100] = i
        f.flush()
        d[500:600] = 5
        d.id.flush()
        sys.stdout.write("flushed\\n"); sys.stdout.flush()
        os._exit(0)   # dies without closing
    """, str(p), check=False)
    assert "flushed" in proc.stdout, proc.stdout + proc.stderr
    idx = one_idx(p / "d")
    raw = idx.read_bytes()
    recs = parse_records(raw)
    last = [r for r in recs if r["runs"]][-1]
    idx.write_bytes(raw[:last["pos"] + last["len"] // 2])  # the append of the last write died half-way
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"][...]
        assert (d[:500] == np.repeat(np.arange(5), 100)).all() and (d[600:] == -1).all(), d
        assert set(np.unique(d[500:600])) <= {-1, 5}
        print("OK")
    """, str(p))


# ---------------------------------------------------------------- 3. sizes that wrap past 2^64
def test_crafted_record_with_wrapping_run_length_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "wrap.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(1000,), dtype="i4", fillvalue=-1)
            d[...] = np.arange(1000)
    """, str(p))
    idx = one_idx(p / "d")
    recs = parse_records(idx.read_bytes())
    r = dict(recs[0])
    # runs: (2000, 2^62-2), (0, 1000), (3000, 2): 4 * (2^62 - 2 + 1000 + 2) wraps to 4000 bytes, the size
    # check passes, and the run the read uses starts 8 bytes before the data log's mapping
    r.update(ext=b"", flags=0, data_off=0, nbytes=4000, runs=[[2000, (1 << 62) - 2], [0, 1000], [3000, 2]])
    idx.write_bytes(encode_record(r))
    proc = run_script(READ_EXPECT_ERROR, str(p), "d")
    assert "error:" in proc.stdout and "corrupt" in proc.stdout, proc.stdout
    dump = h5dump(p, "/d")
    assert dump.returncode == 1 and "corrupt" in dump.stderr, (dump.returncode, dump.stdout + dump.stderr)
    # a run outside the extent the record says it was written under
    r.update(nbytes=4000, runs=[[1, 1000]])
    idx.write_bytes(encode_record(r))
    proc = run_script(READ_EXPECT_ERROR, str(p), "d")
    assert "error:" in proc.stdout and "corrupt" in proc.stdout, proc.stdout


FUZZ_READER = PRELUDE + """
import warnings
for case in sys.argv[1:]:
    print("case", case, flush=True)
    try:
        with h5py.File(case, "r") as f:
            for name in ("d", "s"):
                d = f[name]
                d[...]
                d[3:7]
                if d.ndim == 2:
                    d[:, 5]
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        print("  error:", str(e).splitlines()[0][:200], flush=True)
print("FUZZ-DONE", flush=True)
"""

INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 24, 25, 40, 1000, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 32) + 1,
               1 << 60, (1 << 61) - 1, 1 << 61, (1 << 62) - 2, (1 << 62) - 1, 1 << 62, (1 << 62) + 1, 1 << 63,
               M64 - 7, M64 - 3, M64 - 1, M64]


def _mutate(rng: random.Random, recs: list[dict], datsize: int, esize: int) -> tuple[bytes, str]:
    recs = [dict(r, runs=[list(x) for x in r["runs"]], dims=list(r["dims"])) for r in recs]
    data = [r for r in recs if r["runs"]]
    r = rng.choice(data)
    field = rng.choice(["epoch", "order", "data_off", "nbytes", "flags", "dims", "run_start", "run_len",
                        "run_len_wrap", "run_wrap_pair", "loff_wrap", "loff_wrap", "nruns", "rank", "dup",
                        "drop", "swap"])
    v = rng.choice(INTERESTING + [datsize, datsize - 1, datsize + 1, rng.getrandbits(64)])
    nruns = rank = None
    if field in ("epoch", "order", "data_off", "nbytes", "flags"):
        r[field] = v if field != "flags" else rng.choice([1, 2, 3, 4, 8, 1 << 31, v & 0xFFFFFFFF])
    elif field == "dims":
        r["dims"][rng.randrange(len(r["dims"]))] = v
    elif field == "run_start":
        rng.choice(r["runs"])[0] = v
    elif field == "run_len":
        rng.choice(r["runs"])[1] = v
    elif field == "run_len_wrap":  # the byte count of the runs wraps to the same nbytes
        rng.choice(r["runs"])[1] += rng.choice([1 << 62, 1 << 63, 3 << 62])
    elif field == "run_wrap_pair":  # one run grows by k/4 of 2^64, another shrinks: same total bytes
        a = rng.choice(r["runs"])
        k = rng.choice([1 << 62, (1 << 62) - 2, 1 << 61])
        a[1] = (a[1] + k) & M64
        r["runs"].append([rng.choice([0, 1, 5, 2000]), (-k) & ((1 << 62) - 1)])
    elif field == "loff_wrap":  # a far run first whose bytes wrap: the next run's data starts before the log
        delta = rng.choice([1, 2, 8, 64, r["runs"][0][1]])
        r["runs"].insert(0, [rng.choice([5000, 1 << 40]), (1 << 64) // esize - delta])
        r["runs"].append([rng.choice([6000, 1 << 41]), delta])
    elif field == "nruns":
        nruns = v
    elif field == "rank":
        rank = v & 0xFFFFFFFF
    out = []
    for x in recs:
        if x is r and field == "drop":
            continue
        enc = encode_record(x, nruns, rank) if x is r else encode_record(x)
        out.append(enc)
        if x is r and field == "dup":
            out.append(enc)
    if field == "swap" and len(out) > 1:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return b"".join(out), f"{field}={v:#x} on the record at byte {r['pos']}"


def test_fuzz_index_records_with_valid_checksums(tmp_path: Path) -> None:
    """Mutated records with valid CRCs (the reader cannot tell them from real ones by their checksum):
    every read ends in data or a clean error, never a crash. Bounded: ~a few seconds; seed printed."""
    seed = int(os.environ.get("H5FLOW_FUZZ_SEED", "20240611"))
    cases = int(os.environ.get("H5FLOW_FUZZ_CASES", "160"))
    print(f"fuzz seed {seed}, {cases} cases (H5FLOW_FUZZ_SEED / H5FLOW_FUZZ_CASES to change)")
    rng = random.Random(seed)
    base = tmp_path / "base.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(40, 25), maxshape=(None, 25), chunks=(8, 25), dtype="i4",
                                 fillvalue=-1)
            d[0:10] = np.arange(250).reshape(10, 25)
            d[5:20, 3:9] = 7
            d[[1, 3, 30], 4] = 9
            d.resize((40, 25))
            s = f.create_dataset("s", shape=(10,), dtype=h5py.string_dtype())
            s[0:4] = ["a", "bb", "", "dddd"]
            s[6] = "x" * 100
    """, str(base))
    targets = [("d", one_idx(base / "d")), ("s", one_idx(base / "s"))]
    parsed = {name: parse_records(idx.read_bytes()) for name, idx in targets}
    dat = {name: idx.with_suffix(".dat").stat().st_size for name, idx in targets}
    esize = {"d": 4, "s": 16}
    what: dict[str, str] = {}
    batch: list[str] = []
    for i in range(cases):
        case = tmp_path / f"case{i}.h5"
        shutil.copytree(base, case)
        name, idx = targets[rng.randrange(len(targets))]
        raw, desc = _mutate(rng, parsed[name], dat[name], esize[name])
        (case / name / idx.name).write_bytes(raw)
        what[str(case)] = f"{name}: {desc}"
        batch.append(str(case))
    for k in range(0, len(batch), 40):  # a few subprocesses: a crash names its case
        part = batch[k:k + 40]
        proc = subprocess.run([sys.executable, "-c", FUZZ_READER, *part], env=_env(H5FLOW_LOG_VERIFY="0"),
                              capture_output=True, text=True, timeout=300)
        last = [ln.split(" ", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("case ")]
        assert proc.returncode == 0 and "FUZZ-DONE" in proc.stdout, (
            f"seed {seed}: reader died (rc {proc.returncode}) on {last[-1] if last else '?'}: "
            f"{what.get(last[-1]) if last else ''}\n{proc.stderr[-2000:]}")


# ---------------------------------------------------------------- 4. out-of-range marker fields
@pytest.mark.parametrize("epoch", ["18446744073709551615", "-1", "0", "99999999999999999999999", "12x", " 3"])
def test_marker_epoch_out_of_range_is_refused(tmp_path: Path, epoch: str) -> None:
    p = tmp_path / "m.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            f.create_dataset("d", data=np.arange(10, dtype="i4"))
    """, str(p))
    (p / "@h5flow_log").write_text(f"h5flow_log\nformat 1\nepoch {epoch}\n")
    for mode in ("a", "r"):
        proc = run_script("""
            try:
                f = h5py.File(sys.argv[1], sys.argv[2])
            except OSError as e:
                print("error:", e)
            else:
                with f:
                    if sys.argv[2] == "a":
                        f["d"][0:5] = 100
                    print("opened; d =", f["d"][...])
        """, str(p), mode)
        assert "error:" in proc.stdout and "epoch" in proc.stdout, (mode, proc.stdout)
        assert "@h5flow_log" in proc.stdout, proc.stdout  # names the file


# ---------------------------------------------------------------- 5. a flipped byte in a data log
def test_flipped_data_byte_is_detected_and_the_check_can_be_skipped(tmp_path: Path) -> None:
    p = tmp_path / "data.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(1000,), dtype="i4", fillvalue=-1)
            d[0:500] = np.arange(500)
            d[500:1000] = np.arange(500, 1000)
            f["s"] = ["alpha", "beta", "gamma"]
    """, str(p))
    dat = one_idx(p / "d").with_suffix(".dat")
    raw = bytearray(dat.read_bytes())
    raw[4 * 700] ^= 0x01  # element 700: 700 -> 701
    dat.write_bytes(bytes(raw))
    proc = run_script(READ_EXPECT_ERROR, str(p), "d")
    assert "error:" in proc.stdout and "checksum" in proc.stdout and dat.name in proc.stdout, proc.stdout
    assert "H5FLOW_LOG_VERIFY=0" in proc.stdout, proc.stdout  # says how to read it anyway
    dump = h5dump(p, "/d")
    assert dump.returncode != 0 and "checksum" in dump.stderr, dump.stdout + dump.stderr
    # elements of the other, intact write still read (the check is per written extent)
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            assert (f["d"][0:500] == np.arange(500)).all()
        print("OK")
    """, str(p))
    # the switch: verification off reads what is there
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"][...]
        assert d[700] == 701 and (np.delete(d, 700) == np.delete(np.arange(1000), 700)).all()
        print("OK")
    """, str(p), env=_env(H5FLOW_LOG_VERIFY="0"))
    # variable-length strings: the string bytes are covered too
    sdat = one_idx(p / "s").with_suffix(".dat")
    raw = bytearray(sdat.read_bytes())
    raw[raw.index(b"gamma")] = ord("G")
    sdat.write_bytes(bytes(raw))
    proc = run_script(READ_EXPECT_ERROR, str(p), "s")
    assert "error:" in proc.stdout and "checksum" in proc.stdout, proc.stdout


def test_format_1_container_without_data_checksums_still_reads(tmp_path: Path) -> None:
    """What the format-1 connector wrote (marker 'format 1', records without the data checksum) reads."""
    p = tmp_path / "v1.h5"
    run_script("""
        with opened(h5py.File(sys.argv[1], "w")) as f:
            d = f.create_dataset("d", shape=(100,), dtype="i4", fillvalue=-1)
            d[0:50] = np.arange(50)
            d[25:75] = 7
    """, str(p))
    idx = one_idx(p / "d")
    recs = [r for r in parse_records(idx.read_bytes()) if r["runs"]]
    if all(not r["ext"] and r["flags"] == 0 for r in recs) and \
            (p / "@h5flow_log").read_text().startswith("h5flow_log\nformat 1\n"):
        pytest.fail("this connector writes format 1 (no data checksums): nothing to convert from")
    idx.write_bytes(b"".join(encode_record(dict(r, ext=b"", flags=0)) for r in recs))
    (p / "@h5flow_log").write_text("h5flow_log\nformat 1\nepoch 1\n")
    run_script("""
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"][...]
        assert (d[:25] == np.arange(25)).all() and (d[25:75] == 7).all() and (d[75:] == -1).all(), d
        with opened(h5py.File(sys.argv[1], "a")) as f:   # and a new writer continues it
            f["d"][90:] = 3
        with opened(h5py.File(sys.argv[1], "r")) as f:
            d = f["d"][...]
        assert (d[:25] == np.arange(25)).all() and (d[90:] == 3).all() and (d[75:90] == -1).all(), d
        print("OK")
    """, str(p))
