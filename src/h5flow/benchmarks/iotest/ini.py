"""hdf5-iotest's ``.ini`` format: the same keys, a ``[DEFAULT]`` section, other sections overriding it.

hdf5-iotest parses its configuration with inih: ``key = value`` (or ``key: value``) lines, ``;`` and ``#``
comment lines, inline ``;`` comments after a blank, sections in brackets. Keys in ``[DEFAULT]`` are read
first; keys of any other section (``[CUSTOM]``, ``[combinator]``, ...) then override them in file order.
Unknown keys and bad values are errors that name the key and the ``file:line`` they came from.

One deliberate extension: hdf5-iotest sweeps dataset rank, slowest dimension, layout, fill values,
libver low bound and MPI-IO mode internally and ignores those keys. Here a key that is *set* pins its
sweep dimension to that value (what hdf5-iotest's ``combinator.sh`` run files intend); unset keys sweep.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIBVERS = ("earliest", "v18", "v110", "v112", "v114", "latest")


class IniError(ValueError):
    """A configuration the benchmark cannot run; the message names the file, line and key."""


@dataclass
class IotestConfig:
    """The parsed ``.ini`` (defaults are hdf5-iotest's ``src/hdf5_iotest.ini``)."""

    version: int = 0
    steps: int = 20
    arrays: int = 500
    rows: int = 100
    columns: int = 200
    process_rows: int = 1
    process_columns: int = 1
    scaling: str = "weak"
    dataset_rank: int | None = None
    slowest_dimension: str | None = None
    layout: str | None = None
    fill_values: bool | None = None
    mpi_io: str | None = None
    libver_bound_low: str | None = None
    libver_bound_high: str = "latest"
    alignment_increment: int = 1
    alignment_threshold: int = 0
    meta_block_size: int = 2048
    single_process: str = "posix"
    hdf5_file: str = "hdf5_iotest.h5"
    csv_file: str = "hdf5_iotest.csv"
    restart: bool = False
    split: bool = False
    one_case: int | None = None
    gzip: int | None = None
    szip: tuple[int, int] | None = None
    async_io: bool = False
    delay_us: int = 0
    source: Path | None = None
    where: dict[str, str] = field(default_factory=dict)  # attribute -> "file:line" it was set at

    @property
    def nprocs(self) -> int:
        return self.process_rows * self.process_columns

    def at(self, attr: str) -> str:
        """Where ``attr`` was set (``file:line``), or where its default came from."""
        return self.where.get(attr, f"{self.source or '<defaults>'} (default)")


def _uint(minimum: int) -> Callable[[str], int]:
    def conv(v: str) -> int:
        if not re.fullmatch(r"\d+", v):
            raise ValueError(f"expected a whole number >= {minimum}")
        x = int(v)
        if x < minimum:
            raise ValueError(f"must be >= {minimum}")
        return x

    return conv


def _choice(*names: str) -> Callable[[str], str]:
    def conv(v: str) -> str:
        if v not in names:
            raise ValueError(f"accepted: {', '.join(names)}")
        return v

    return conv


def _bool(v: str) -> bool:
    low = v.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError("accepted: true, false (or 1, 0)")


def _flag(v: str) -> bool:
    if v not in ("0", "1"):
        raise ValueError("accepted: 0, 1")
    return v == "1"


def _version(v: str) -> int:
    if v.strip() != "0":
        raise ValueError("only configuration version 0 exists")
    return 0


def _rank(v: str) -> int:
    if v not in ("2", "3", "4"):
        raise ValueError("accepted: 2, 3, 4")
    return int(v)


def _path(v: str) -> str:
    if not v:
        raise ValueError("empty file name")
    return v


def _gzip(v: str) -> int:
    if not re.fullmatch(r"\d", v):
        raise ValueError("a deflate level 0..9")
    return int(v)


_SZIP_MASKS = {"ec": 4, "nn": 32}


def _szip(v: str) -> tuple[int, int]:
    parts = [p.strip().lower() for p in v.split(",")]
    if len(parts) != 2:
        raise ValueError("expected MASK, PIXELS_PER_BLOCK (for example `nn, 16`)")
    mask = _SZIP_MASKS.get(parts[0]) if not parts[0].isdigit() else int(parts[0])
    if mask is None or not parts[1].isdigit() or not (2 <= int(parts[1]) <= 32 and int(parts[1]) % 2 == 0):
        raise ValueError("mask is ec, nn or a number; pixels per block an even number 2..32")
    return mask, int(parts[1])


_DELAY_UNITS = {"us": 1, "ms": 1000, "s": 1_000_000, "min": 60_000_000}


def _delay(v: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d*)?)?\s*(us|ms|s|min)?", v.strip())
    if not m or (m.group(1) is None and m.group(2) is None):
        raise ValueError("expected a duration such as 1s, 100ms, 50us, 2min")
    amount = float(m.group(1)) if m.group(1) is not None else 1.0
    return int(round(amount * _DELAY_UNITS[m.group(2) or "s"]))


# ini key -> (IotestConfig attribute, converter)
KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "version": ("version", _version),
    "steps": ("steps", _uint(1)),
    "arrays": ("arrays", _uint(1)),
    "rows": ("rows", _uint(2)),
    "columns": ("columns", _uint(2)),
    "process-rows": ("process_rows", _uint(1)),
    "process-columns": ("process_columns", _uint(1)),
    "scaling": ("scaling", _choice("weak", "strong")),
    "dataset-rank": ("dataset_rank", _rank),
    "slowest-dimension": ("slowest_dimension", _choice("step", "array")),
    "layout": ("layout", _choice("contiguous", "chunked")),
    "fill-values": ("fill_values", _bool),
    "mpi-io": ("mpi_io", _choice("independent", "collective")),
    "libver-bound-low": ("libver_bound_low", _choice(*LIBVERS)),
    "libver-bound-high": ("libver_bound_high", _choice(*LIBVERS)),
    "alignment-increment": ("alignment_increment", _uint(1)),
    "alignment-threshold": ("alignment_threshold", _uint(0)),
    "meta-block-size": ("meta_block_size", _uint(0)),
    "single-process": ("single_process", _choice("posix", "core", "mpi-io-uni")),
    "hdf5-file": ("hdf5_file", _path),
    "csv-file": ("csv_file", _path),
    "restart": ("restart", _flag),
    "split": ("split", _flag),
    "one-case": ("one_case", _uint(1)),
    "gzip": ("gzip", _gzip),
    "szip": ("szip", _szip),
    "async": ("async_io", _flag),
    "delay": ("delay_us", _delay),
}

_SECTION = re.compile(r"\[\s*([^\]]+?)\s*\]\s*(?:[;#].*)?")


def _strip_comment(value: str) -> str:
    # inih: an inline comment starts with ';' after whitespace
    m = re.search(r"\s;", value)
    return (value[: m.start()] if m else value).strip()


def parse_text(text: str, source: Path | str = "<string>") -> IotestConfig:
    """Parse ``.ini`` text; ``source`` names it in error messages."""
    src = Path(source) if not isinstance(source, Path) else source
    entries: list[tuple[str, str, str, int]] = []  # section, key, value, line
    section: str | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        m = _SECTION.fullmatch(line)
        if m:
            section = m.group(1)
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise IniError(f"{src}:{lineno}: expected `key = value` or `[section]`, found {raw.strip()!r}")
        if section is None:
            raise IniError(f"{src}:{lineno}: key {line[:sep].strip()!r} outside any section; "
                           "put it under [DEFAULT]")
        entries.append((section, line[:sep].strip().lower(), _strip_comment(line[sep + 1 :]), lineno))

    cfg = IotestConfig(source=src)
    # [DEFAULT] first, then every other section in file order
    ordered = [e for e in entries if e[0] == "DEFAULT"] + [e for e in entries if e[0] != "DEFAULT"]
    for sect, key, value, lineno in ordered:
        if key not in KEYS:
            raise IniError(f"{src}:{lineno}: unknown key {key!r} in [{sect}]; hdf5-iotest keys are: "
                           f"{', '.join(KEYS)}")
        attr, conv = KEYS[key]
        try:
            setattr(cfg, attr, conv(value))
        except ValueError as e:
            raise IniError(f"{src}:{lineno}: bad value {value!r} for {key!r}: {e}") from None
        cfg.where[attr] = f"{src}:{lineno}"
    _check(cfg)
    return cfg


def parse(path: Path) -> IotestConfig:
    """Parse an hdf5-iotest ``.ini`` file."""
    try:
        text = path.read_text()
    except OSError as e:
        raise IniError(f"cannot read configuration {path}: {e.strerror or e}") from None
    return parse_text(text, path)


def _check(cfg: IotestConfig) -> None:
    if cfg.scaling == "strong":
        if cfg.rows % cfg.process_rows:
            raise IniError(f"{cfg.at('rows')}: strong scaling needs rows ({cfg.rows}) divisible by "
                           f"process-rows ({cfg.process_rows}, {cfg.at('process_rows')})")
        if cfg.columns % cfg.process_columns:
            raise IniError(f"{cfg.at('columns')}: strong scaling needs columns ({cfg.columns}) divisible by "
                           f"process-columns ({cfg.process_columns}, {cfg.at('process_columns')})")
    order = list(LIBVERS)
    if cfg.libver_bound_low is not None and order.index(cfg.libver_bound_low) > order.index(cfg.libver_bound_high):
        raise IniError(f"{cfg.at('libver_bound_low')}: libver-bound-low {cfg.libver_bound_low!r} is newer than "
                       f"libver-bound-high {cfg.libver_bound_high!r} ({cfg.at('libver_bound_high')})")
    if cfg.async_io:
        raise IniError(f"{cfg.at('async_io')}: async = 1 needs the HDF5 async VOL connector, which this stack "
                       "does not build; set async = 0")
    if cfg.gzip is not None and cfg.szip is not None:
        raise IniError(f"{cfg.at('szip')}: set gzip or szip, not both (gzip at {cfg.at('gzip')})")


__all__ = ["IniError", "IotestConfig", "KEYS", "LIBVERS", "parse", "parse_text"]
