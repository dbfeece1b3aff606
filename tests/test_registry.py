"""The name → implementation registry every extension point uses."""

from __future__ import annotations

import pytest

from h5flow import analyses, partitioners, transports
from h5flow._registry import Registry, UnknownPluginError


def test_register_lookup_is_case_insensitive_and_lazy() -> None:
    calls: list[str] = []
    reg: Registry[str] = Registry("widget", "h5flow.test-widgets")

    def load() -> str:
        calls.append("loaded")
        return "impl"

    reg.register("Fast", load)
    assert calls == []  # nothing imported until first use
    assert reg.get("FAST") == "impl" and calls == ["loaded"]
    assert "fast" in reg and reg.names() == ["fast"]


def test_duplicate_and_bad_names_are_refused() -> None:
    reg: Registry[int] = Registry("widget", "h5flow.test-widgets")
    reg.register("a", lambda: 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("A", lambda: 2)
    reg.register("a", lambda: 3, replace=True)
    assert reg.get("a") == 3
    with pytest.raises(ValueError, match="letters, digits"):
        reg.register("../evil", lambda: 4)


def test_unknown_name_lists_what_is_known() -> None:
    reg: Registry[int] = Registry("transport", "h5flow.test-widgets")
    reg.register("hdf5", lambda: 1)
    with pytest.raises(UnknownPluginError, match=r"unknown transport 'zmq'; known: hdf5"):
        reg.get("zmq")


def test_each_extension_point_has_its_registry() -> None:
    assert (transports.registry.kind, partitioners.registry.kind, analyses.registry.kind) == (
        "transport", "partitioner", "analysis")
    assert transports.registry.entry_point_group == "h5flow.transports"
