"""``h5flow advise``: rules over an HDF5 call trace that find the seeds' tuning mistakes (docs/TRACE.md, "Advise").

``advise(df)`` applies every rule to the DataFrame of :func:`h5flow.trace.load` and returns the findings
ranked by the time the calls they are about took. Rule families: :mod:`.datatype`, :mod:`.storage`,
:mod:`.metadata`, :mod:`.parallel`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pandas as pd

from h5flow.advise.base import SEVERITIES, Finding, Rule, TraceFormatError, check_frame
from h5flow.advise.datatype import CollectiveFallback, DatatypeConversion
from h5flow.advise.metadata import FileReopen, LibverEarliest, OpenCloseLoop
from h5flow.advise.parallel import MpiHints, RankImbalance, SmallIndependentWrites
from h5flow.advise.storage import Alignment, ChunkCache, ChunkShape, FillTime

RULE_CLASSES: tuple[type[Rule], ...] = (
    DatatypeConversion, CollectiveFallback, FillTime, LibverEarliest, Alignment, SmallIndependentWrites,
    ChunkShape, ChunkCache, OpenCloseLoop, FileReopen, RankImbalance, MpiHints)
RULE_IDS = tuple(c.id for c in RULE_CLASSES)

__all__ = ["Finding", "RULE_CLASSES", "RULE_IDS", "TraceFormatError", "advise", "load_config", "rules"]


def load_config(path: str | Path) -> dict[str, dict[str, Any]]:
    """Threshold overrides from a JSON file: ``{"rule-id": {"setting": value, ...}, ...}``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"advise config {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"advise config {path}: expected an object of rule ids, got {type(data).__name__}")
    return data


def rules(config: dict[str, dict[str, Any]] | None = None, only: list[str] | None = None) -> list[Rule]:
    """The rules, each with its settings (defaults, overridden by ``config``); ``only`` picks rule ids."""
    config = config or {}
    unknown = [r for r in list(config) + list(only or []) if r not in RULE_IDS]
    if unknown:
        raise ValueError(f"unknown rule id(s) {', '.join(unknown)}: the rules are {', '.join(RULE_IDS)}")
    out = []
    for cls in RULE_CLASSES:
        if only and cls.id not in only:
            continue
        over = config.get(cls.id, {})
        names = cls.settings_class.names()
        bad = [k for k in over if k not in names]
        if bad:
            raise ValueError(f"rule {cls.id} has no setting(s) {', '.join(bad)}; its settings: {', '.join(names)}")
        defaults = cls.settings_class()
        try:
            typed = {k: type(getattr(defaults, k))(v) for k, v in over.items()}
        except (TypeError, ValueError) as e:
            raise ValueError(f"rule {cls.id}: a setting has a value of the wrong kind ({e}); the defaults: "
                             + ", ".join(f"{n}={getattr(defaults, n)!r}" for n in names)) from None
        out.append(cls(dataclasses.replace(defaults, **typed)))
    return out


def advise(df: pd.DataFrame, config: dict[str, dict[str, Any]] | None = None,
           only: list[str] | None = None) -> list[Finding]:
    """Every rule's findings on a trace, the costliest first (then by severity)."""
    check_frame(df)
    found: list[Finding] = []
    for rule in rules(config, only):
        found.extend(rule.check(df))
    return sorted(found, key=lambda f: (-f.time_s, SEVERITIES.index(f.severity), f.rule, f.file))
