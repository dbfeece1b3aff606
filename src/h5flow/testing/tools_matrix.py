"""HDF5's command-line tools on h5flow_log containers, compared with the same tools on native twins.

For each *feature* (groups, chunked+gzip resizable datasets, attributes, links, references, dimension scales,
compound, variable-length strings, enum, committed datatype) one script writes a container through the
connector and a native file without it, each in a directory of its own under the same name. Every *tool
invocation* (h5dump, h5dump -x, h5ls -r, h5stat, h5diff both ways, h5repack container→container,
native→container and container→native, h5copy, h5mkgrp, h5import, h5clear, h5format_convert, h5jam/h5unjam,
h5watch) then runs on the container and, the same way, on the native twin; a *cell* compares:

- the exit status (a signal, or an AddressSanitizer report, is a crash: always a failure);
- standard output, with the directories replaced and what differs by nature between two files (object
  addresses, XML ids, native-format sizes: see the normalisers) made equal;
- for a writing tool, its result read back (h5dump of the output, h5ls -r of a modified input).

A cell that differs from native is a failure unless KNOWN names it with its reason; a KNOWN cell that no
longer differs is a failure too (its row is stale). `h5flow conformance --tools` runs the whole matrix and
prints (or with --record writes into docs/FORMAT.md) the table; tests/test_tools_matrix.py runs a quick
subset in `make test` and the whole matrix with `--tools-matrix`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

# ---------------------------------------------------------------------------------------------- features
# Each value is the body of `def make(f, ext)`: `f` an open h5py.File, `ext` the name of the external link
# target (a file of the same kind beside it). h5py, numpy as np are imported.
FEATURES: dict[str, str] = {
    "groups": """
        f.create_group("a/b/c"); f.create_group("e")
        f["a"].attrs["n"] = 1
    """,
    "chunked_gzip": """
        d = f.create_dataset("d", data=np.arange(24.).reshape(4, 6), chunks=(2, 3), compression="gzip",
                             maxshape=(None, 6))
        d.resize((5, 6)); d[4] = -1
    """,
    "attributes": """
        g = f.create_group("g")
        g.attrs["i32"] = np.int32(7); g.attrs["f64"] = 2.5; g.attrs["u8"] = np.arange(3, dtype="u1")
        g.attrs["fixed"] = np.bytes_("fixed"); g.attrs["vstr"] = "text"
        g.attrs["vlist"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
        g.attrs["cmp"] = np.array([(1, 2.5)], dtype=[("a", "i4"), ("b", "f8")])
        g.attrs["m2"] = np.arange(6, dtype="i2").reshape(2, 3)
    """,
    "soft_links": """
        f["t"] = np.arange(4)
        f["soft"] = h5py.SoftLink("/t"); f["dangling"] = h5py.SoftLink("/nowhere")
    """,
    "hard_links": """
        f["t"] = np.arange(4); f.create_group("g")
        f["g/second"] = f["t"]
    """,
    "external_links": """
        f["t"] = np.arange(4)
        f["ext"] = h5py.ExternalLink(ext, "/t")
    """,
    "object_refs": """
        f["t"] = np.arange(4); f.create_group("g")
        f["refs"] = np.array([f["t"].ref, f["g"].ref], dtype=h5py.ref_dtype)
        f["t"].attrs["to_g"] = f["g"].ref
    """,
    "dimension_scales": """
        d = f.create_dataset("data", data=np.arange(12.).reshape(3, 4))
        f["x"] = np.arange(3.); f["y"] = np.arange(4.)
        f["x"].make_scale("x"); f["y"].make_scale("y")
        d.dims[0].attach_scale(f["x"]); d.dims[1].attach_scale(f["y"])
    """,
    "compound": """
        f["c"] = np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")], dtype=[("a", "i4"), ("b", "f8"), ("s", "S2")])
    """,
    "compound_vlen": """
        dt = np.dtype([("a", "i4"), ("s", h5py.string_dtype())])
        f["cv"] = np.array([(1, "x"), (2, "yz")], dtype=dt)
    """,
    "vlen_strings": """
        f["s"] = np.array(["x", "yz", ""], dtype=h5py.string_dtype())
    """,
    "enum": """
        et = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 7}, basetype="i1")
        f.create_dataset("e", data=np.array([0, 1, 7], dtype="i1"), dtype=et)
    """,
    "committed_type": """
        f["t"] = np.dtype([("p", "f4"), ("q", "i8")])
        f.create_dataset("typed", data=np.array([(1.5, 2)], dtype=f["t"].dtype), dtype=f["t"])
    """,
}

EXT_TARGET = "ext_target.h5"  # what external links name, written beside the features (one dataset /t)

MAKE_SCRIPT = """
import sys, textwrap, h5py, numpy as np
from pathlib import Path
out, ext = Path(sys.argv[1]), sys.argv[2]
features = eval(sys.argv[3])
with h5py.File(out / ext, "w") as f:
    f["t"] = np.arange(4)
for name, body in features.items():
    code = "def make(f, ext):\\n" + textwrap.indent(textwrap.dedent(body), "    ")
    ns = {"h5py": h5py, "np": np}
    exec(code, ns)
    with h5py.File(out / (name + ".h5"), "w") as f:
        ns["make"](f, ext)
"""


# ---------------------------------------------------------------------------------------------- tools
@dataclasses.dataclass(frozen=True)
class Invocation:
    """One way of running a tool: argv for an input file (`{in}`) and, for writing tools, an output."""

    name: str                     # column title, e.g. "h5repack c→n"
    tool: str                     # executable name
    argv: tuple[str, ...]         # with {in}, {out}, {other} (the twin of the other kind), {txt}, {cfg}
    output: str = "none"          # "none" | "new" (a file it creates) | "inplace" (it modifies a copy of {in})
    out_kind: str = "same"        # the kind of {out}: "same" as the input's, "native", "container"
    normalize: str = "text"       # name of the normaliser of standard output
    readback: str = "h5dump"      # how a written result is shown: "h5dump" or "h5ls"
    container_argv: tuple[str, ...] | None = None  # argv on the container side, where it differs
    timeout: float = 60.0
    expect_timeout: bool = False  # the tool runs until stopped (h5watch): a timeout is its normal end


NATIVE_VOL_2 = ("--vol-name-2=native", "--vol-value-2=0")
NATIVE_VOL_1 = ("--vol-name-1=native", "--vol-value-1=0")

INVOCATIONS: tuple[Invocation, ...] = (
    Invocation("h5dump", "h5dump", ("{in}",), normalize="h5dump"),
    Invocation("h5dump -x", "h5dump", ("-x", "{in}"), normalize="xml"),
    Invocation("h5ls -r", "h5ls", ("-r", "{in}")),
    Invocation("h5stat", "h5stat", ("{in}",), normalize="h5stat"),
    # the container against its native twin, either way round; natively the twin against a copy of itself
    Invocation("h5diff c→n", "h5diff", ("-r", "{in}", "{copy}"),
               container_argv=("-r", *NATIVE_VOL_2, "{in}", "{other}"), normalize="h5diff"),
    Invocation("h5diff n→c", "h5diff", ("-r", "{copy}", "{in}"),
               container_argv=("-r", *NATIVE_VOL_1, "{other}", "{in}"), normalize="h5diff"),
    Invocation("h5repack c→c", "h5repack", ("{in}", "{out}"), output="new"),
    Invocation("h5repack n→c", "h5repack", ("{in}", "{out}"), output="new", out_kind="container",
               container_argv=("--src-vol-name=native", "--src-vol-value=0", "{other}", "{out}")),
    Invocation("h5repack c→n", "h5repack", ("{in}", "{out}"), output="new", out_kind="native",
               container_argv=("--dst-vol-name=native", "--dst-vol-value=0", "{in}", "{out}")),
    Invocation("h5copy", "h5copy", ("-i", "{in}", "-o", "{out}", "-s", "/", "-d", "/copy"), output="new"),
    Invocation("h5mkgrp", "h5mkgrp", ("-p", "{in}", "/new/group"), output="inplace", readback="h5ls"),
    Invocation("h5import", "h5import", ("{txt}", "-c", "{cfg}", "-o", "{in}"), output="inplace"),
    Invocation("h5clear -s", "h5clear", ("-s", "{in}"), output="inplace"),
    Invocation("h5format_convert", "h5format_convert", ("{in}",), output="inplace"),
    Invocation("h5jam", "h5jam", ("-i", "{in}", "-u", "{txt}", "-o", "{out}"), output="new"),
    Invocation("h5unjam", "h5unjam", ("-i", "{in}", "-o", "{out}"), output="new"),
    Invocation("h5watch", "h5watch", ("--dim", "--polling=1", "{in}/{dset}"), timeout=3.0, expect_timeout=True),
    Invocation("h5delete", "h5delete", ("{in}",), output="inplace"),
    Invocation("h5debug", "h5debug", ("{in}",)),
    Invocation("h5repart", "h5repart", ("-m", "1k", "{in}", "{out}"), output="new"),
)

H5IMPORT_TXT = "1 2 3\n4 5 6\n"
H5IMPORT_CFG = """PATH /imported
INPUT-CLASS TEXTIN
RANK 2
DIMENSION-SIZES 2 3
OUTPUT-CLASS IN
OUTPUT-SIZE 32
"""

# A dataset of each feature (h5watch watches one)
WATCHED: dict[str, str] = {
    "groups": "a", "chunked_gzip": "d", "attributes": "g", "soft_links": "t", "hard_links": "t",
    "external_links": "t", "object_refs": "t", "dimension_scales": "data", "compound": "c", "compound_vlen": "cv",
    "vlen_strings": "s", "enum": "e", "committed_type": "typed",
}

# ---------------------------------------------------------------------------------------------- known rows
# (invocation, feature or "*") -> why the container's result differs from native's. Every entry is a
# difference that is the format's, or HDF5's own choice on a non-native connector, never a defect to fix.
KNOWN: dict[tuple[str, str], str] = {
    ("h5jam", "*"): "a user block is bytes in front of a native file's superblock; a container is a directory "
                    "with no superblock to put them before: h5jam exits 1 (\"Read error\")",
    ("h5copy", "dimension_scales"): "h5copy copies with H5Ocopy; copied into another container, references "
                                    "inside compound elements (a scale's REFERENCE_LIST) are refused with an "
                                    "error instead of being written as references the copy cannot resolve (natively "
                                    "they print as `<unknown>`; docs/FORMAT.md \"Object copy\"): h5copy exits 1",
    ("h5debug", "*"): "h5debug prints the native format's structures at file addresses (here the superblock) and "
                      "opens its file with the native connector (the project's HDF5 patch 0010): a container "
                      "has no superblock, it exits 1 (\"cannot open file\")",
    ("h5repart", "*"): "h5repart copies a native file's bytes into a family of member files; a container is a "
                       "directory of logs, not one byte stream: it exits 1",
    ("h5format_convert", "*"): "h5format_convert rewrites native-format structures (superblock version, "
                               "chunk indexes), which a container does not have: H5Fformat_convert and "
                               "H5Dformat_convert are refused and it exits 1",
}


# (invocation, feature or "*") -> a difference that is a defect still to fix, described for the table. These
# cells fail their tests like any other difference: the description only says what is wrong.
OPEN: dict[tuple[str, str], str] = {
}


@dataclasses.dataclass(frozen=True)
class Equivalence:
    """A difference in how a container prints one thing, rewritten to native's form before comparing."""

    name: str
    reason: str
    pattern: str
    replacement: str | Callable[[re.Match], str]
    features: tuple[str, ...] = ()   # () for every feature

    def apply(self, feature: str, text: str) -> tuple[str, bool]:
        if self.features and feature not in self.features:
            return text, False
        new = re.sub(self.pattern, self.replacement, text)
        return new, new != text


EQUIVALENCES: tuple[Equivalence, ...] = (
    Equivalence(
        "scale references",
        "HDF5's dimension scale API (H5DS, h5py `dims`) writes `DIMENSION_LIST` and `REFERENCE_LIST` with "
        "`H5T_STD_REF` references on any non-native connector and with `H5T_STD_REF_OBJ` on a native file "
        "(its own choice by connector); tools print an `H5T_STD_REF` object reference with its file name",
        r'H5T_REFERENCE \{ H5T_STD_REF \}|DATASET "[^"]*?\.h5(/[^"]*)"',
        lambda m: "H5T_REFERENCE { H5T_STD_REF_OBJECT }" if m.group(1) is None else f'DATASET ADDR "{m.group(1)}"',
        ("dimension_scales",)),
    Equivalence(
        "no file driver",
        "a container is opened by the connector, not through a virtual file driver: h5watch prints an empty "
        "driver name",
        r"with  driver\.", "with sec2 driver."),
)


# ---------------------------------------------------------------------------------------------- normalisers
def _renumber(pattern: str, text: str, prefix: str) -> str:
    """Replace each distinct match of `pattern` by `prefix<n>` in order of first appearance."""
    seen: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        return seen.setdefault(m.group(0), f"{prefix}{len(seen)}")

    return re.sub(pattern, sub, text)


def _same(text: str) -> str:
    return text


def _unwrap(text: str) -> str:
    """h5dump's data lines joined (where it wraps depends on how long the values print)."""
    return re.sub(r",\n\s*\(\d+(?:,\d+)*\): ", ", ", text)


def _norm_h5dump(text: str) -> str:
    # object addresses printed with references and hard links differ between any two files
    text = _unwrap(text)
    text = re.sub(r"\b(DATASET|GROUP|DATATYPE) \d+ ", r"\1 ADDR ", text)
    return re.sub(r'"/#\d+"|/#\d+', "/#ADDR", text)


def _norm_xml(text: str) -> str:
    text = _renumber(r"xid_[0-9a-fA-F-]+", text, "xid_")
    text = _renumber(r"#[0-9a-fA-F]{2,}\b", text, "#T")
    return re.sub(r"\b(DATASET|GROUP|DATATYPE) \d+ ", r"\1 ADDR ", text)


def _norm_h5stat(text: str) -> str:
    # a container has no native-format structures (object headers, B-trees, heaps, free space: h5stat
    # reports 0 for them, see docs/FORMAT.md): only the counts of objects and links are compared
    keep = [ln for ln in text.splitlines() if re.search(r"# of (unique )?(groups|datasets|datatypes|links|"
                                                         r"objects|other)|^Filename|Dataset dimension", ln)]
    return "\n".join(keep)


NORMALIZERS: dict[str, Callable[[str], str]] = {
    "text": _same, "h5dump": _norm_h5dump, "xml": _norm_xml, "h5stat": _norm_h5stat, "h5diff": _same,
}


# ---------------------------------------------------------------------------------------------- running
@dataclasses.dataclass
class Run:
    argv: list[str]
    rc: int | None              # None: timed out
    stdout: str
    stderr: str
    readback: str = ""
    readback_rc: int | None = 0

    @property
    def crashed(self) -> bool:
        return (self.rc is not None and (self.rc < 0 or self.rc in (134, 139))) or \
            "AddressSanitizer" in self.stderr or "runtime error:" in self.stderr or \
            (self.readback_rc is not None and (self.readback_rc < 0 or self.readback_rc in (134, 139)))


@dataclasses.dataclass
class Cell:
    invocation: str
    feature: str
    native: Run
    container: Run
    known: str | None = None
    equivalences: tuple[str, ...] = ()   # names of the Equivalences applied to the container's side

    def differences(self) -> list[str]:
        """What differs from native (empty: the same)."""
        out = []
        if self.container.crashed:
            out.append(f"crash (rc {self.container.rc})")
        if self.native.crashed:
            out.append(f"native crash (rc {self.native.rc})")
        if self.native.rc != self.container.rc:
            out.append(f"rc {self.container.rc} (native {self.native.rc})")
        if self.native.stdout != self.container.stdout:
            out.append("output")
        if self.native.readback != self.container.readback:
            out.append("result")
        return out

    @property
    def ok(self) -> bool:
        d = self.differences()
        if any(x.startswith(("crash", "native crash")) for x in d):
            return False
        return not d if self.known is None else bool(d)

    def status(self) -> str:
        d = self.differences()
        if not d:
            return "same" if self.known is None else "same (stale KNOWN row)"
        return ("differs: " if self.known is None else "known: ") + ", ".join(d)

    def report(self) -> str:
        """A failure message: what differs and both sides' commands and outputs."""
        import difflib

        lines = [f"{self.invocation} × {self.feature}: {self.status()}"]
        if self.known:
            lines.append(f"  KNOWN: {self.known}")
        for side, r in (("native", self.native), ("container", self.container)):
            lines.append(f"  {side}: {' '.join(r.argv)} -> rc {r.rc}")
            if r.stderr.strip():
                lines.append("    stderr: " + r.stderr.strip()[-1500:].replace("\n", "\n    "))
        for what in ("stdout", "readback"):
            a, b = getattr(self.native, what), getattr(self.container, what)
            if a != b:
                diff = difflib.unified_diff(a.splitlines(), b.splitlines(), "native", "container", lineterm="",
                                            n=1)
                lines.append(f"  {what} diff:\n    " + "\n    ".join(list(diff)[:60]))
        return "\n".join(lines)


def tool_path(name: str) -> str | None:
    hdf5 = os.environ.get("H5FLOW_HDF5_DIR") or os.environ.get("HDF5_DIR")
    if hdf5 and (Path(hdf5) / "bin" / name).exists():
        return str(Path(hdf5) / "bin" / name)
    return shutil.which(name)


def available(invocations: Iterable[Invocation] = INVOCATIONS) -> list[Invocation]:
    """The invocations whose tool the stack installs."""
    return [inv for inv in invocations if tool_path(inv.tool) is not None]


@dataclasses.dataclass
class Setup:
    """Where the fixtures are and the environments the two sides run in."""

    root: Path
    native_env: dict[str, str]
    container_env: dict[str, str]

    @property
    def native_dir(self) -> Path:
        return self.root / "native"

    @property
    def container_dir(self) -> Path:
        return self.root / "container"


def environments(plugin_dir: Path, asan: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(native, container) environments; `asan`: the ASan runtime to preload (a sanitized connector)."""
    base = {k: v for k, v in os.environ.items() if k not in ("HDF5_VOL_CONNECTOR", "LD_PRELOAD")}
    base["HDF5_USE_FILE_LOCKING"] = "FALSE"
    native = dict(base)
    container = dict(base, HDF5_VOL_CONNECTOR="h5flow_log", HDF5_PLUGIN_PATH=str(plugin_dir))
    if asan:
        container.update(LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                         UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return native, container


def make_fixtures(root: Path, features: Iterable[str], native_env: dict[str, str],
                  container_env: dict[str, str]) -> Setup:
    """Write each feature's container and native twin (and the external link targets) under root."""
    chosen = {name: FEATURES[name] for name in features}
    for kind, env in (("native", native_env), ("container", container_env)):
        out = root / kind
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-c", MAKE_SCRIPT, str(out), EXT_TARGET, repr(chosen)], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"writing the {kind} fixtures failed:\n{r.stderr}")
    (root / "input.txt").write_text(H5IMPORT_TXT)
    (root / "import.cfg").write_text(H5IMPORT_CFG)
    return Setup(root, native_env, container_env)


def _fresh_copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst)
    return dst


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           errors="replace")
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        def text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return None, text(e.stdout), text(e.stderr)


def run_side(setup: Setup, inv: Invocation, feature: str, side: str) -> Run:
    """Run one invocation on one side ("native" or "container") of one feature."""
    here = setup.native_dir if side == "native" else setup.container_dir
    other_dir = setup.container_dir if side == "native" else setup.native_dir
    env = setup.native_env if side == "native" else setup.container_env
    work = setup.root / "work" / side / inv.name.replace(" ", "_").replace("→", "-") / feature
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    name = f"{feature}.h5"
    inp = here / name
    if inv.output == "inplace":
        inp = _fresh_copy(inp, work / name)
        # an external link target beside the copy, as beside the original
        _fresh_copy(here / EXT_TARGET, work / EXT_TARGET)
    out = work / f"out-{name}"
    args = inv.container_argv if (side == "container" and inv.container_argv) else inv.argv
    copy = work / f"copy-{name}"
    if any("{copy}" in a for a in args):
        _fresh_copy(here / name, copy)
    subst = {"{in}": str(inp), "{out}": str(out), "{other}": str(other_dir / name), "{copy}": str(copy),
             "{txt}": str(setup.root / "input.txt"), "{cfg}": str(setup.root / "import.cfg"),
             "{dset}": WATCHED[feature]}
    argv = [tool_path(inv.tool) or inv.tool]
    for a in args:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    rc, stdout, stderr = _run(argv, env, here, inv.timeout)
    if rc is None and inv.expect_timeout:
        rc = 0
    dirs = {str(work): "WORK", str(here): "DIR", str(other_dir): "OTHER"}
    norm = NORMALIZERS[inv.normalize]

    def clean(text: str) -> str:
        for k in sorted(dirs, key=len, reverse=True):
            text = text.replace(k, dirs[k])
        return norm(text)

    result = Run([Path(argv[0]).name, *[clean(a) for a in argv[1:]]], rc, clean(stdout), stderr)
    if inv.output != "none":
        target = out if inv.output == "new" else inp
        out_kind = side if inv.out_kind == "same" else inv.out_kind
        if side == "native":
            out_kind = "native"  # the native reference writes native files throughout
        renv = setup.container_env if out_kind == "container" else setup.native_env
        if not target.exists():
            result.readback, result.readback_rc = "(no output)", 0
        else:
            reader = [tool_path("h5dump") or "h5dump", str(target)] if inv.readback == "h5dump" else \
                [tool_path("h5ls") or "h5ls", "-r", str(target)]
            rrc, rout, rerr = _run(reader, renv, work, 60)
            result.readback_rc = rrc
            result.readback = _norm_h5dump(clean(rout).replace(f"out-{name}", name)) + \
                (f"\n(read back: rc {rrc})" if rrc else "")
    return result


def run_cell(setup: Setup, inv: Invocation, feature: str) -> Cell:
    known = KNOWN.get((inv.name, feature)) or KNOWN.get((inv.name, "*"))
    native = run_side(setup, inv, feature, "native")
    container = run_side(setup, inv, feature, "container")
    used = []
    for eq in EQUIVALENCES:
        hit = False
        for what in ("stdout", "readback"):
            text, changed = eq.apply(feature, getattr(container, what))
            if changed and text != getattr(container, what) and getattr(native, what) != getattr(container, what):
                setattr(container, what, text)
                hit = True
        if hit:
            used.append(eq.name)
    return Cell(inv.name, feature, native, container, known, tuple(used))


def run_matrix(setup: Setup, invocations: Iterable[Invocation], features: Iterable[str],
               on_cell: Callable[[Cell], None] | None = None) -> list[Cell]:
    cells = []
    for inv in invocations:
        for feat in features:
            cell = run_cell(setup, inv, feat)
            cells.append(cell)
            if on_cell:
                on_cell(cell)
    return cells


# ---------------------------------------------------------------------------------------------- the table
TABLE_BEGIN = "<!-- tools-matrix:begin (written by `h5flow conformance --tools --record`) -->"
TABLE_END = "<!-- tools-matrix:end -->"


def table(cells: list[Cell]) -> str:
    """Markdown: one row per invocation, one column per feature; numbered notes give each known difference's
    reason and each equivalence's; a cell that fails says so in bold."""
    invs = list(dict.fromkeys(c.invocation for c in cells))
    feats = list(dict.fromkeys(c.feature for c in cells))
    by = {(c.invocation, c.feature): c for c in cells}
    notes: dict[str, int] = {}

    def note(text: str) -> str:
        return f"<sup>{notes.setdefault(text, len(notes) + 1)}</sup>"

    def mark(cell: Cell) -> str:
        d = cell.differences()
        eq = "".join(note(f"{e.name}: {e.reason}") for e in EQUIVALENCES if e.name in cell.equivalences)
        if any(x.startswith(("crash", "native crash")) for x in d):
            why = OPEN.get((cell.invocation, cell.feature))
            return "**crash**" + (note("to fix: " + why) if why else "")
        if not d:
            return ("same" + eq) if cell.known is None else "**same (stale known row)**"
        if cell.known:
            return "differs" + note(cell.known) + eq
        why = OPEN.get((cell.invocation, cell.feature)) or OPEN.get((cell.invocation, "*"))
        return "**differs: " + ", ".join(d) + "**" + (note("to fix: " + why) if why else "") + eq

    lines = ["| tool | " + " | ".join(f.replace("_", " ") for f in feats) + " |",
             "|---|" + "---|" * len(feats)]
    for inv in invs:
        lines.append(f"| `{inv}` | " + " | ".join(mark(by[(inv, f)]) if (inv, f) in by else "" for f in feats)
                     + " |")
    if notes:
        lines.append("")
        lines += [f"{n}. {text}" for text, n in notes.items()]
    return "\n".join(lines)


def write_doc_table(doc: Path, text: str) -> None:
    src = doc.read_text()
    if TABLE_BEGIN not in src or TABLE_END not in src:
        raise RuntimeError(f"{doc} has no tools-matrix markers ({TABLE_BEGIN!r} ... {TABLE_END!r})")
    head, rest = src.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    doc.write_text(head + TABLE_BEGIN + "\n" + text + "\n" + TABLE_END + tail)


def main_text(cells: list[Cell]) -> str:
    bad = [c for c in cells if not c.ok]
    out = [table(cells), "", f"{len(cells)} cells, {len(bad)} failing"]
    out += ["", *(c.report() for c in bad)]
    return "\n".join(out)
