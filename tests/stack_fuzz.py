"""Random h5py programs for the differential test of the stacking connectors (tests/test_vol_stack_differential.py).

A program is a list of operations (plain JSON) generated from a seed by `generate`; `execute` runs one in the
current process, whatever connector `HDF5_VOL_CONNECTOR` names, and returns what every read returned (and
every error raised); `dump` reads a whole file back. The test runs the same programs natively and through
each stack, in a process per stack, and compares the two logs and the two final files.

    python tests/stack_fuzz.py run OUT.pkl DIR SEED [SEED ...]     # execute the seeds' programs, then dump
    python tests/stack_fuzz.py run-ops OUT.pkl DIR OPS.json        # execute one given program
    python tests/stack_fuzz.py dump OUT.pkl FILE [FILE ...]        # read files back (the current connector)
    python tests/stack_fuzz.py minimise OUT.json SEED REF STACK [BOTTOM]  # shrink a program that differs
                                        # (REF/STACK: HDF5_VOL_CONNECTOR, "" native; BOTTOM reads STACK's file)

The generator keeps a model of the file (which datasets exist, their shapes) only so that most operations are
valid; the executor does not trust it: an operation on something that does not exist is logged as skipped,
and an exception is logged by its type, so that a program with operations removed (the minimiser) still runs.
"""

from __future__ import annotations

import gc
import json
import pickle
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# dtypes a dataset can have: name -> numpy dtype (strings and the compound built below)
COMPOUND = [("a", "<i4"), ("b", "<f8"), ("c", "S3")]
DTYPES = ["<f8", "<f4", "<i4", "<u1", "<i8", "<i2", "S6", "compound", "vlen"]
NUMERIC = {"<f8", "<f4", "<i4", "<u1", "<i8", "<i2"}
ALIASES = ["l0", "l1", "g/l2"]
NAMES = ["d0", "d1", "d2", "g/d3", "g/d4", "g/h/d5"]


def np_dtype(name: str) -> Any:
    import h5py

    if name == "compound":
        return np.dtype(COMPOUND)
    if name == "vlen":
        return h5py.string_dtype()
    return np.dtype(name)


# ------------------------------------------------------------------------------------------ generator


@dataclass
class DsModel:
    dtype: str
    shape: list[int]
    maxshape: list[int | None] | None


@dataclass
class Gen:
    rng: random.Random
    ds: dict[str, DsModel] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # link name -> dataset path
    second: bool = False  # a second file handle is open
    second_writable: bool = False  # ... in mode "a" (writes through a read-only handle are refused by some)

    def names_of(self, path: str) -> list[str]:
        return [path] + [a for a, p in self.aliases.items() if p == path]

    def selection(self, shape: list[int]) -> list[Any]:
        """One index per dimension, as JSON: ["all"], ["int", i], ["slice", a, b, step], ["list", [...]]."""
        rng = self.rng
        sel: list[Any] = []
        listed = False
        for n in shape:
            r = rng.random()
            if n == 0 or r < 0.25:
                sel.append(["all"])
            elif r < 0.45:
                sel.append(["int", rng.randrange(n)])
            elif r < 0.85 or listed:
                a = rng.randrange(n)
                b = rng.randrange(a, n + 1)
                step = rng.choice([1, 1, 1, 2, 3])
                sel.append(["slice", a, b if b > a else a + 1, step])
            else:
                listed = True
                k = rng.randint(1, min(n, 4))
                sel.append(["list", sorted(rng.sample(range(n), k))])
        return sel

    def delete(self, path: str) -> dict[str, Any]:
        for a in [a for a, p in self.aliases.items() if p == path]:
            del self.aliases[a]
        del self.ds[path]
        return {"op": "delete", "name": path}

    def new_shape(self, rank: int) -> list[int]:
        return [self.rng.randint(1, 9 if rank > 1 else 40) for _ in range(rank)]

    def op(self) -> dict[str, Any]:
        rng = self.rng
        existing = sorted(self.ds)
        r = rng.random()
        if not existing or r < 0.08:
            name = rng.choice(NAMES)
            rank = rng.choice([0, 1, 1, 2, 2, 3]) if rng.random() < 0.9 else 1
            dtype = rng.choice(DTYPES)
            layout = rng.choice(["contiguous", "chunked", "resizable", "resizable", "compressed"]) if rank else "contiguous"
            if dtype == "vlen" and layout == "compressed":
                layout = "chunked"  # h5flow_log filters no variable-length data (an error, docs/FORMAT.md)
            shape = self.new_shape(rank)
            maxshape = [None] * rank if layout == "resizable" else None
            chunks = [rng.randint(1, max(1, s)) for s in shape] if layout != "contiguous" else None
            fill = rng.choice([None, 7, -3]) if dtype in NUMERIC else None
            if dtype == "<u1" and fill == -3:
                fill = 250
            if name in self.ds:
                return self.delete(name)  # the name is taken: free it first
            self.ds[name] = DsModel(dtype, shape, maxshape)
            return {"op": "create", "name": name, "dtype": dtype, "shape": shape, "maxshape": maxshape,
                    "chunks": chunks, "compression": layout == "compressed", "fill": fill,
                    "data": rng.random() < 0.2, "seed": rng.getrandbits(31)}
        path = rng.choice(existing)
        m = self.ds[path]
        name = rng.choice(self.names_of(path))
        handle = rng.choice(["f", "f", "f2", "held"] if self.second else ["f", "f", "held"])
        if (r < 0.40 or 0.62 <= r < 0.68) and handle != "f" and not self.second_writable:
            handle = "f"  # writes and resizes: a held handle may be of a read-only second file
        if r < 0.40:
            kind = rng.choice(["setitem", "setitem", "setitem", "broadcast", "write_direct"])
            if m.dtype == "compound" and rng.random() < 0.3:
                kind = "field"
            if kind == "write_direct" and m.dtype == "vlen":
                kind = "setitem"
            src = m.dtype
            if m.dtype in NUMERIC and rng.random() < 0.3:
                src = rng.choice(sorted(NUMERIC))  # converted by HDF5
            return {"op": "write", "name": name, "handle": handle, "kind": kind, "sel": self.selection(m.shape),
                    "src": src, "seed": rng.getrandbits(31)}
        if r < 0.62:
            as_type = rng.choice(sorted(NUMERIC)) if m.dtype in NUMERIC and rng.random() < 0.25 else None
            return {"op": "read", "name": name, "handle": handle, "sel": self.selection(m.shape),
                    "as_type": as_type, "direct": m.dtype != "vlen" and rng.random() < 0.15}
        if r < 0.68 and m.maxshape is not None:
            shape = [max(0, s + rng.randint(-4, 5)) for s in m.shape]
            m.shape = shape
            return {"op": "resize", "name": name, "handle": handle, "shape": shape}
        if r < 0.72:
            return {"op": "attr", "name": rng.choice([name, "/", "g"]), "key": rng.choice(["x", "y"]),
                    "value": rng.randrange(1000)}
        if r < 0.74:
            return {"op": "read_attrs", "name": rng.choice([name, "/", "g"])}
        if r < 0.77:
            alias = rng.choice(ALIASES)
            if alias in self.aliases or alias in self.ds:
                return {"op": "flush"}
            self.aliases[alias] = path
            return {"op": "link", "alias": alias, "target": path, "soft": rng.random() < 0.5}
        if r < 0.80:
            return self.delete(path)
        if r < 0.84:
            return {"op": "flush"}
        if r < 0.88:
            self.second = not self.second
            mode = rng.choice(["r", "a"])
            self.second_writable = self.second and mode == "a"
            return {"op": "second", "open": self.second, "mode": mode}
        if r < 0.92:
            return {"op": "hold", "name": name, "handle": "f2" if self.second and rng.random() < 0.5 else "f"}
        if r < 0.95:
            self.second = self.second_writable = False
            return {"op": "reopen"}
        if r < 0.975:
            free = [n for n in NAMES if n not in self.ds and n not in self.aliases]
            if not free or path in self.aliases.values():
                return {"op": "flush"}
            to, copy = rng.choice(free), rng.random() < 0.5
            self.ds[to] = DsModel(m.dtype, list(m.shape), m.maxshape)
            if not copy:
                del self.ds[path]
            return {"op": "copy" if copy else "move", "name": path, "to": to}
        return {"op": "read", "name": name, "handle": handle, "sel": [["all"]] * len(m.shape), "as_type": None,
                "direct": False}


def generate(seed: int, length: int = 60) -> list[dict[str, Any]]:
    g = Gen(random.Random(seed))
    return [g.op() for _ in range(length)]


# ------------------------------------------------------------------------------------------- executor


def key_of(sel: list[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for s in sel:
        if s[0] == "all":
            out.append(slice(None))
        elif s[0] == "int":
            out.append(int(s[1]))
        elif s[0] == "slice":
            out.append(slice(s[1], s[2], s[3]))
        else:
            out.append(list(s[1]))
    return tuple(out)


def values(dtype: str, shape: tuple[int, ...], seed: int) -> Any:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype == "compound":
        v = np.zeros(n, dtype=np_dtype("compound"))
        v["a"] = rng.integers(-1000, 1000, n)
        v["b"] = rng.normal(size=n)
        v["c"] = [bytes(rng.integers(97, 123, 3).astype("u1")) for _ in range(n)]
        return v.reshape(shape)
    if dtype == "vlen":
        return np.array(["s" * int(k) + str(int(k)) for k in rng.integers(0, 12, n)], dtype=object).reshape(shape)
    if dtype.startswith("S"):
        return np.array([bytes(rng.integers(97, 123, int(k)).astype("u1")) for k in rng.integers(0, 7, n)],
                        dtype=dtype).reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = rng.normal(scale=100.0, size=n).astype(dt)
    else:
        info = np.iinfo(dt)
        v = rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), n, endpoint=True).astype(dt)
    return v.reshape(shape)


def encode(x: Any) -> Any:
    """A read's result in a form that pickles and compares exactly (NaN-safe: by bytes)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "O":
            return ("obj", x.shape, [v if isinstance(v, (str, bytes)) else repr(v) for v in x.ravel().tolist()])
        return ("arr", x.dtype.str if x.dtype.names is None else repr(x.dtype.descr), x.shape, x.tobytes())
    if isinstance(x, np.generic):
        return encode(np.asarray(x))
    return ("py", repr(x))


class Runner:
    """Executes one program on one file; `log` gets (op index, what happened) for every read and error."""

    def __init__(self, path: str) -> None:
        import h5py

        self.h5py = h5py
        self.path = path
        self.f = h5py.File(path, "w")
        self.f2: Any = None
        self.held: dict[str, Any] = {}
        self.log: list[tuple[int, Any]] = []

    def handle(self, which: str) -> Any:
        if which == "f2" and self.f2 is not None:
            return self.f2
        return self.f

    def dset(self, op: dict[str, Any]) -> Any:
        if op.get("handle") == "held" and op["name"] in self.held:
            return self.held[op["name"]]
        h = self.handle(op.get("handle", "f"))
        if op["name"] not in h:
            return None
        obj = h[op["name"]]
        return obj if isinstance(obj, self.h5py.Dataset) else None

    def run(self, ops: list[dict[str, Any]]) -> list[tuple[int, Any]]:
        for i, op in enumerate(ops):
            try:
                out = getattr(self, "op_" + op["op"])(op)
            except Exception as e:  # every error is part of the behaviour compared
                out = ("error", type(e).__name__)
            if out is not None:
                self.log.append((i, out))
        try:
            self.close_all()
        except Exception as e:
            self.log.append((len(ops), ("error at the final close", type(e).__name__, str(e))))
        return self.log

    def close_all(self) -> None:
        self.held.clear()
        if self.f2 is not None:
            self.f2.close()
            self.f2 = None
        gc.collect()
        self.f.close()

    def op_create(self, op: dict[str, Any]) -> Any:
        shape = tuple(op["shape"])
        kw: dict[str, Any] = {}
        if op["maxshape"] is not None:
            kw["maxshape"] = tuple(op["maxshape"])
        if op["chunks"] is not None:
            kw["chunks"] = tuple(op["chunks"])
        if op["compression"]:
            kw["compression"] = "gzip"
            kw["shuffle"] = True
        if op["fill"] is not None:
            kw["fillvalue"] = op["fill"]
        if op["chunks"] is None:
            # contiguous storage gets the fill value when allocated: by default native HDF5 writes none, and
            # elements never written would read as whatever the space held before (a deleted dataset's data),
            # which differs between runs that allocate in another order or free space later, neither wrong.
            # (The order of that allocation through h5flow_cache has its own test.)
            kw["fill_time"] = "alloc"
        if op["data"] or op["dtype"] == "compound":
            # a compound written field by field takes the other fields from the file, which native HDF5 reads
            # even where nothing was written yet (a deleted dataset's bytes, fill_time or not): start written
            kw["data"] = values(op["dtype"], shape, op["seed"])
        self.f.create_dataset(op["name"], shape=shape, dtype=np_dtype(op["dtype"]), **kw)
        return None

    def op_write(self, op: dict[str, Any]) -> Any:
        d = self.dset(op)
        if d is None:
            return ("skip",)
        key = key_of(op["sel"])
        target = np.empty(d.shape, dtype=np.uint8)[key]
        if op["kind"] == "broadcast":
            v = values(op["src"], (), op["seed"])
            d[key] = v if v.dtype.names else v[()]  # h5py takes a compound scalar as a 0-d array only
        elif op["kind"] == "field":
            v = values("compound", target.shape, op["seed"])
            d[key + ("b",)] = v["b"]  # one field: the others stay as they were
        elif op["kind"] == "write_direct":
            v = np.ascontiguousarray(values(op["src"], target.shape, op["seed"]))
            if v.dtype != d.dtype and d.dtype.kind in "SV":
                v = v.astype(d.dtype)
            d.write_direct(v, dest_sel=key if key else None)
        else:
            d[key] = values(op["src"], target.shape, op["seed"])
        return None

    def op_read(self, op: dict[str, Any]) -> Any:
        d = self.dset(op)
        if d is None:
            return ("skip",)
        key = key_of(op["sel"])
        if op["direct"]:
            out = np.zeros(np.empty(d.shape, dtype=np.uint8)[key].shape, dtype=d.dtype)
            d.read_direct(out, source_sel=key if key else None)
            return encode(out)
        src = d.astype(op["as_type"]) if op["as_type"] else d
        return encode(src[key] if key else src[()])

    def op_resize(self, op: dict[str, Any]) -> Any:
        d = self.dset(op)
        if d is None:
            return ("skip",)
        d.resize(tuple(op["shape"]))
        return None

    def op_attr(self, op: dict[str, Any]) -> Any:
        if op["name"] not in self.f:
            return ("skip",)
        self.f[op["name"]].attrs[op["key"]] = op["value"]
        return None

    def op_read_attrs(self, op: dict[str, Any]) -> Any:
        if op["name"] not in self.f:
            return ("skip",)
        return sorted((k, repr(v)) for k, v in self.f[op["name"]].attrs.items())

    def op_link(self, op: dict[str, Any]) -> Any:
        if op["target"] not in self.f or op["alias"] in self.f:
            return ("skip",)
        if op["soft"]:
            self.f[op["alias"]] = self.h5py.SoftLink("/" + op["target"])
        else:
            self.f[op["alias"]] = self.f[op["target"]]
        return None

    def op_delete(self, op: dict[str, Any]) -> Any:
        if op["name"] not in self.f:
            return ("skip",)
        obj = self.f[op["name"]]
        # the links that name it go too (soft links would dangle; hard links would keep it)
        for alias in ALIASES:
            link = self.f.get(alias, getlink=True)
            if isinstance(link, self.h5py.SoftLink):
                gone = link.path == "/" + op["name"]
            else:
                gone = link is not None and self.f[alias] == obj
            if gone:
                del self.f[alias]
        del obj
        del self.f[op["name"]]
        self.held.pop(op["name"], None)
        gc.collect()
        return None

    def op_move(self, op: dict[str, Any]) -> Any:
        if op["name"] not in self.f or op["to"] in self.f:
            return ("skip",)
        self.f.move(op["name"], op["to"])
        if op["name"] in self.held:
            self.held[op["to"]] = self.held.pop(op["name"])  # the handle follows the object
        return None

    def op_copy(self, op: dict[str, Any]) -> Any:
        if op["name"] not in self.f or op["to"] in self.f:
            return ("skip",)
        self.f.copy(op["name"], op["to"])
        return None

    def op_flush(self, op: dict[str, Any]) -> Any:
        self.f.flush()
        return None

    def op_second(self, op: dict[str, Any]) -> Any:
        if op["open"] and self.f2 is None:
            self.f2 = self.h5py.File(self.path, op["mode"])
        elif not op["open"] and self.f2 is not None:
            for k in [k for k, v in self.held.items() if v.file.id == self.f2.id]:
                del self.held[k]
            self.f2.close()
            self.f2 = None
            gc.collect()
        return None

    def op_hold(self, op: dict[str, Any]) -> Any:
        h = self.handle(op["handle"])
        if op["name"] not in h:
            return ("skip",)
        self.held[op["name"]] = h[op["name"]]
        return None

    def op_reopen(self, op: dict[str, Any]) -> Any:
        self.held.clear()
        if self.f2 is not None:
            self.f2.close()
            self.f2 = None
        gc.collect()
        self.f.close()
        self.f = self.h5py.File(self.path, "a")
        return None


def execute(ops: list[dict[str, Any]], path: str) -> list[tuple[int, Any]]:
    return Runner(path).run(ops)


def dump(path: str) -> Any:
    """Everything a file holds, in comparable form: objects, links, types, shapes, fill values, data, attributes."""
    import h5py

    out: dict[str, Any] = {}
    with h5py.File(path, "r") as f:
        def visit(name: str, link: Any) -> None:
            if isinstance(link, h5py.SoftLink):
                out[name] = ("soft", link.path)
                return
            obj = f[name]
            attrs = sorted((k, repr(v)) for k, v in obj.attrs.items())
            if isinstance(obj, h5py.Dataset):
                out[name] = ("dataset", str(obj.dtype), obj.shape, obj.maxshape, repr(obj.fillvalue),
                             encode(obj[()]), attrs)
            else:
                out[name] = ("group", attrs)

        f.visititems_links(visit)
        out["/"] = ("group", sorted((k, repr(v)) for k, v in f.attrs.items()))
    return out


def outcome(ops: list[dict[str, Any]], conn: str, bottom: str, folder: Path) -> Any:
    """Run ops in a fresh process through conn ("" = native), then dump the file through bottom."""
    import os
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tier").mkdir(exist_ok=True)
    (folder / "ops.json").write_text(json.dumps(ops))
    results = []
    for args, c in ((["run-ops", str(folder / "log.pkl"), str(folder), str(folder / "ops.json")], conn),
                    (["dump", str(folder / "dump.pkl"), str(folder / "ops.h5")], bottom)):
        env = {k: v for k, v in os.environ.items() if k != "HDF5_VOL_CONNECTOR"}
        env["H5FLOW_CACHE_QUIET"] = "1"
        if c:
            env["HDF5_VOL_CONNECTOR"] = c.replace("{tier}", str(folder / "tier"))
        proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            return ("crash", proc.stderr[-300:])
        results.append(pickle.loads(Path(args[1]).read_bytes()))
    return results[0]["ops"]["log"], list(results[1].values())[0]


def minimise(ops: list[dict[str, Any]], ref: str, conn: str, folder: Path, bottom: str | None = None
             ) -> list[dict[str, Any]]:
    """Delta debugging: the shortest program found whose outcome through conn differs from through ref."""
    count = 0

    def differs(candidate: list[dict[str, Any]]) -> bool:
        nonlocal count
        count += 1
        a = outcome(candidate, ref, ref, folder / f"a{count}")
        b = outcome(candidate, conn, ref if bottom is None else bottom, folder / f"b{count}")
        return a != b

    assert differs(ops), "the program does not differ"
    n = 2
    while len(ops) >= 2:
        size = max(1, len(ops) // n)
        for start in range(0, len(ops), size):
            candidate = ops[:start] + ops[start + size:]
            if candidate and differs(candidate):
                ops, n = candidate, max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(len(ops), n * 2)
    return ops


def main(argv: list[str]) -> int:
    cmd, out = argv[0], argv[1]
    result: dict[str, Any] = {}
    if cmd == "run":
        folder = Path(argv[2])
        for seed in argv[3:]:
            path = str(folder / f"s{seed}.h5")
            result[seed] = {"log": execute(generate(int(seed)), path)}
    elif cmd == "run-ops":
        ops = json.loads(Path(argv[3]).read_text())
        result["ops"] = {"log": execute(ops, str(Path(argv[2]) / "ops.h5"))}
    elif cmd == "dump":
        for p in argv[2:]:
            try:
                result[p] = dump(p)
            except Exception as e:
                result[p] = ("error", type(e).__name__, str(e))
    elif cmd == "minimise":  # minimise SEED REF STACK [STACK_BOTTOM] (out: the program, as JSON)
        ops = minimise(generate(int(argv[2])), argv[3], argv[4], Path(out + ".d"), argv[5] if len(argv) > 5 else None)
        Path(out).write_text(json.dumps(ops, indent=1))
        print("\n".join(json.dumps(op) for op in ops))
        return 0
    else:
        raise SystemExit(f"unknown command {cmd!r}: run, run-ops, dump or minimise")
    Path(out).write_bytes(pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
