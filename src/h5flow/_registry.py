"""Name → implementation registries, one per extension point.

Each extension point (transports, partitioners, analyses) owns one :class:`Registry`. Built-in
implementations register themselves in their package's ``__init__``; third-party packages add theirs
through the entry-point group named by the registry (for example ``h5flow.transports``), loaded lazily
the first time a name is looked up, or at run time with :meth:`Registry.register`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownPluginError(KeyError):
    """A name was looked up that no implementation is registered under."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


class Registry(Generic[T]):
    """Lower-case names mapped to factories of one kind of plugin."""

    def __init__(self, kind: str, entry_point_group: str) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, Callable[[], T]] = {}
        self._entry_points_loaded = False
        self._lock = threading.Lock()

    def register(self, name: str, loader: Callable[[], T], *, replace: bool = False) -> None:
        """Register ``loader`` (called on first use, so optional imports stay lazy) under ``name``."""
        key = name.lower()
        if not key.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"{self.kind} name {name!r} must be letters, digits, '-' or '_'")
        with self._lock:
            if key in self._items and not replace:
                raise ValueError(f"a {self.kind} named {key!r} is already registered; pass replace=True")
            self._items[key] = loader

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name.lower() not in self._items:
                self._items[ep.name.lower()] = ep.load

    def get(self, name: str) -> T:
        """The implementation registered as ``name`` (case-insensitive)."""
        with self._lock:
            self._load_entry_points()
            loader = self._items.get(name.lower())
        if loader is None:
            known = ", ".join(sorted(self._items)) or "none registered"
            raise UnknownPluginError(f"unknown {self.kind} {name!r}; known: {known}")
        return loader()

    def names(self) -> list[str]:
        with self._lock:
            self._load_entry_points()
            return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
