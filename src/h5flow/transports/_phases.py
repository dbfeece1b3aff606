"""Per-step phase timers of a transport (``bench transit --breakdown``): where the time of a step goes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Seconds spent per named phase since the last :meth:`take` (wall time of this process)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def take(self) -> dict[str, float]:
        """The phases of the step that ended, and a fresh start for the next."""
        out, self.seconds = self.seconds, {}
        return out
