"""Command-line argument types shared by the benchmark drivers."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def csv_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list whose items must all be in ``choices``."""

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{text!r}: accepted {', '.join(choices)} (comma-separated; unknown: {', '.join(bad) or 'none given'})")
        return items

    return parse


def positive_int(v: str) -> int:
    """An argparse ``type``: a whole number >= 1."""
    try:
        x = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a whole number") from None
    if x < 1:
        raise argparse.ArgumentTypeError(f"{v!r}: must be >= 1")
    return x
