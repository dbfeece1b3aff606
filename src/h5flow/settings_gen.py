"""What is generated from the settings declarations (:mod:`h5flow.settings`): the C producer library's table of
the hdf5 transport's settings (``native/lib/config_table.h``) and the settings tables of docs/CONFIG.md.

``python -m h5flow.settings_gen`` rewrites both from the declarations; ``--check`` only says whether they
match (tests/test_settings.py runs the same comparison). The C table is checked in, so a fresh clone builds
without Python.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from h5flow.settings import INT_MAX, Declaration, Settings, declarations

ROOT = Path(__file__).resolve().parents[2]
C_TABLE = ROOT / "native" / "lib" / "config_table.h"
CONFIG_MD = ROOT / "docs" / "CONFIG.md"
_BEGIN = re.compile(r"<!-- generated: settings (\S+) -->\n")
_END = "<!-- end of generated table -->"

_C_KINDS = {"bool": "H5FL_BOOL", "int": "H5FL_INT", "bytes": "H5FL_BYTES", "seconds": "H5FL_SECONDS",
            "float": "H5FL_FLOAT", "choice": "H5FL_CHOICE", "pattern": "H5FL_PATTERN", "string": "H5FL_STRING"}
_C_SIDES = {"producer": "H5FL_PRODUCER", "consumer": "H5FL_CONSUMER", "both": "H5FL_BOTH"}


def _c_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)  # a C string literal for ASCII text


def _c_number(x: float | None, fallback: float) -> str:
    value = fallback if x is None or not math.isfinite(x) else x
    return repr(float(value))


def _c_pairs(name: str, pairs: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    if not pairs:
        return "", "NULL, 0"
    rows = ",\n".join(f"    {{{_c_string(v)}, {_c_string(r)}}}" for v, r in pairs)
    return f"static const h5fl_refusal {name}[] = {{\n{rows}\n}};\n", f"{name}, {len(pairs)}"


def c_table(cls: type[Settings] | None = None) -> str:
    """``native/lib/config_table.h``: every declared setting of the hdf5 transport, for ``config.c``."""
    if cls is None:
        from h5flow.transports.hdf5.settings import Hdf5Settings

        cls = Hdf5Settings
    out = [
        "/* Generated from the declarations of " + cls.__name__ + " (" + cls.__module__ + ") by\n"
        " * `python -m h5flow.settings_gen`: do not edit; tests/test_settings.py checks that it matches. */\n"
        "#ifndef H5FLOW_CONFIG_TABLE_H\n#define H5FLOW_CONFIG_TABLE_H\n\n#include <stddef.h>\n\n"
        "typedef enum { H5FL_BOOL, H5FL_INT, H5FL_BYTES, H5FL_SECONDS, H5FL_FLOAT, H5FL_CHOICE, H5FL_PATTERN, "
        "H5FL_STRING } h5fl_kind;\n"
        "typedef enum { H5FL_PRODUCER, H5FL_CONSUMER, H5FL_BOTH } h5fl_side;\n"
        "typedef struct { const char *value, *reason; } h5fl_refusal;\n"
        "typedef struct {\n"
        "    const char *name; /* the settings field */\n"
        "    const char *xml; /* its XML attribute */\n"
        "    const char *alias; /* another accepted attribute name, or NULL */\n"
        "    h5fl_kind kind;\n"
        "    h5fl_side side;\n"
        "    double minimum, maximum; /* int, bytes, seconds, float */\n"
        "    const char *const *choices; /* choice: lower case, in declared order */\n"
        "    size_t n_choices;\n"
        "    const char *pattern; /* pattern: a POSIX extended regular expression the whole value matches */\n"
        "    const char *accepted; /* what the error message says is accepted */\n"
        "    const h5fl_refusal *refused; /* values refused everywhere, with their reason */\n"
        "    size_t n_refused;\n"
        "    const h5fl_refusal *c_refused; /* values the C library refuses, with the reason */\n"
        "    size_t n_c_refused;\n"
        "} h5fl_setting;\n\n"]
    rows = []
    for d in declarations(cls):
        if len(d.aliases) > 1:
            raise ValueError(f"{cls.__name__}.{d.name}: the C table holds one alias per setting")
        choices = "NULL, 0"
        if d.choices:
            out.append(f"static const char *const H5FL_CHOICES_{d.name}[] = "
                       f"{{{', '.join(_c_string(c) for c in d.choices)}}};\n")
            choices = f"H5FL_CHOICES_{d.name}, {len(d.choices)}"
        decl, refused = _c_pairs(f"H5FL_REFUSED_{d.name}", d.refused)
        c_decl, c_refused = _c_pairs(f"H5FL_C_REFUSED_{d.name}", d.c_refused)
        out.append(decl + c_decl)
        low = _c_number(d.minimum, -1e308)
        high = _c_number(d.maximum, INT_MAX if d.kind in ("int", "bytes") else 1e308)
        alias = _c_string(d.aliases[0]) if d.aliases else "NULL"
        pattern = _c_string(f"^({d.pattern})$") if d.pattern else "NULL"
        rows.append(f"    {{{_c_string(d.name)}, {_c_string(d.xml)}, {alias}, {_C_KINDS[d.kind]}, "
                    f"{_C_SIDES[d.side]}, {low}, {high}, {choices}, {pattern},\n     {_c_string(d.accepted)},\n"
                    f"     {refused}, {c_refused}}},")
    out.append("\nstatic const h5fl_setting H5FL_SETTINGS[] = {\n" + "\n".join(rows) + "\n};\n")
    extra = sorted(getattr(cls, "XML_EXTRA", ()))
    out.append("/* attributes read by hand in config.c besides the table's */\n"
               f"static const char *const H5FL_EXTRA_ATTRS[] = {{{', '.join(_c_string(a) for a in extra)}}};\n"
               "\n#endif\n")
    return "".join(out)


# -- docs/CONFIG.md ------------------------------------------------------------------------------------


def _default_doc(d: Declaration) -> str:
    if d.default_doc:
        return d.default_doc
    if isinstance(d.default, bool):
        return f"`{str(d.default).lower()}`"
    return f"`{d.default}`"


def _c_doc(d: Declaration) -> str:
    parts = []
    if d.side == "consumer":
        parts.append("accepted, not used (a consumer setting)")
    elif d.c:
        parts.append(f"accepted: {d.c}")
    else:
        parts.append("used")
    parts += [f"`{v}` refused: {r}" for v, r in d.c_refused]
    return "; ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _other_table(what: str, name: str) -> str:
    """The table of a partitioner's or an analysis' attributes (``what``: partitioner | analysis)."""
    from h5flow import analyses, partitioners

    cls: type[Settings] | None = (partitioners.settings_class(name) if what == "partitioner"
                                  else analyses.settings_class(name))
    rows = ["| attribute | meaning | default | accepted values |", "|---|---|---|---|",
            f"| `type` | the {what} | (required) | `{name}` |"]
    if what == "analysis":
        rows.append(f"| `enabled` | run this {what} | `1` | boolean |")
    for d in declarations(cls) if cls is not None else ():
        rows.append(f"| `{d.xml}` | {_cell(d.doc)} | {_cell(_default_doc(d))} | {_cell(d.accepted_doc)} |")
    return "\n".join(rows) + "\n"


def doc_table(kind: str) -> str:
    """The markdown table of ``kind``'s attributes (its settings class's declarations): a transport's name, or
    ``partitioner:NAME`` / ``analysis:NAME``."""
    from h5flow import transports

    if ":" in kind:
        return _other_table(*kind.split(":", 1))

    cls = transports.entry(kind).settings
    with_c = kind == "hdf5"
    used = " used |" if with_c else ""
    head = "| attribute | meaning | side | default | accepted values |" + (" C library |" if with_c else "")
    rule = "|---|---|---|---|---|" + ("---|" if with_c else "")
    rows = [head, rule,
            f"| `type` | the transport | both | (required) | `{kind}` |{used}",
            f"| `filename` | the stream's name | both | (required) | a non-empty string |{used}"]
    for name, doc in sorted(getattr(cls, "XML_EXTRA_DOC", {}).items()):
        rows.append(f"| `{name}` | {_cell(doc)} | both | | a non-empty string |{used}")
    rows.append(f"| `enabled` | use this transport | both | `1` | boolean |{used}")
    for d in declarations(cls):
        attr = f"`{d.xml}`" + "".join(f" (or `{a}`)" for a in d.aliases)
        row = f"| {attr} | {_cell(d.doc)} | {d.side} | {_cell(_default_doc(d))} | {_cell(d.accepted_doc)} |"
        if with_c:
            row += f" {_cell(_c_doc(d))} |"
        rows.append(row)
    return "\n".join(rows) + "\n"


def config_md(text: str) -> str:
    """``text`` (docs/CONFIG.md) with every generated table regenerated."""
    out, pos = [], 0
    for m in _BEGIN.finditer(text):
        end = text.find(_END, m.end())
        if end < 0:
            raise ValueError(f"docs/CONFIG.md: {m.group(0).strip()} has no {_END}")
        out += [text[pos:m.end()], doc_table(m.group(1))]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def outputs() -> dict[Path, str]:
    """Each generated file with the text it must have."""
    return {C_TABLE: c_table(), CONFIG_MD: config_md(CONFIG_MD.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m h5flow.settings_gen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which generated files differ (exit 1)")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'regenerated'}: {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
