"""Analyses: what consumer ranks run on the blocks a reader delivers (histogram, statistics, ...).

One module per analysis, registered in :data:`registry` under the name SENSEI XML uses in
``<analysis type="...">``; third parties use the ``h5flow.analyses`` entry-point group or :func:`register`.
``type="python"`` runs a user's script (:mod:`h5flow.analyses._python`, SENSEI's Python analysis adaptor).

A registry entry loads an :class:`~h5flow.analyses.base.Analysis` subclass; :func:`make_analysis` builds it
with its ``from_config(cfg)`` classmethod when it has one, else by calling the class with ``cfg``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from h5flow._registry import Registry, UnknownPluginError
from h5flow.analyses.base import Analysis, AnalysisSettings, PluginAnalysisSettings

if TYPE_CHECKING:
    from h5flow.config import AnalysisConfig

registry: Registry[type[Analysis]] = Registry("analysis", "h5flow.analyses")


def _load_histogram() -> type[Analysis]:
    from h5flow.analyses._histogram import Histogram

    return Histogram


registry.register("histogram", _load_histogram)


def _load_python() -> type[Analysis]:
    from h5flow.analyses._python import PythonAnalysis

    return PythonAnalysis


registry.register("python", _load_python)


def register(name: str, analysis: type[Analysis] | Callable[[], type[Analysis]], *, replace: bool = False) -> None:
    """Make ``<analysis type="name" .../>`` run ``analysis`` (an :class:`Analysis` subclass, or a function
    returning one, called on first use). Its XML attributes other than ``type`` and ``enabled`` are the fields
    of its ``SETTINGS`` dataclass (an :class:`AnalysisSettings`), given as ``cfg.settings``; without
    ``SETTINGS`` they arrive in :class:`PluginAnalysisSettings` (``cfg.mesh``, ``cfg.array``,
    ``cfg.association``, the rest as strings in ``cfg.params``). It is built with
    ``analysis.from_config(cfg)`` when it has that classmethod, else ``analysis(cfg)``.

    The name only exists in this process: ``h5flow consume``/``h5flow run`` see analyses registered through
    the ``h5flow.analyses`` entry-point group (or written as ``type="python"`` scripts).
    """
    if isinstance(analysis, type):
        if not issubclass(analysis, Analysis):
            raise TypeError(f"register({name!r}, {analysis.__name__}): an analysis must subclass "
                            "h5flow.analyses.Analysis")
        cls = analysis
        registry.register(name, lambda: cls, replace=replace)
    elif callable(analysis):
        registry.register(name, analysis, replace=replace)
    else:
        raise TypeError(f"register({name!r}, ...): give an Analysis subclass or a function returning one")


def settings_class(name: str) -> type[AnalysisSettings]:
    """The settings dataclass of analysis ``name``: its ``SETTINGS``, else :class:`PluginAnalysisSettings` (also
    for a name not registered, which :func:`make_analysis` refuses)."""
    try:
        cls = registry.get(name)
    except UnknownPluginError:
        return PluginAnalysisSettings
    settings = getattr(cls, "SETTINGS", None)
    if settings is None:
        return PluginAnalysisSettings
    if not (isinstance(settings, type) and issubclass(settings, AnalysisSettings)):
        raise TypeError(f"analysis {name!r}: SETTINGS must be an AnalysisSettings dataclass, not {settings!r}")
    return settings


def make_analysis(cfg: AnalysisConfig) -> Analysis:
    """The analysis ``cfg.type`` names, built from ``cfg`` (call ``initialize(comm)`` on it next).

    Raises :class:`~h5flow._registry.UnknownPluginError` (listing the known types) for an unknown type
    and ``ValueError`` for parameters the analysis refuses (for example ``bins < 1``).
    """
    cls = registry.get(cfg.type)
    from_config = getattr(cls, "from_config", None)
    analysis = from_config(cfg) if callable(from_config) else cls(cfg)
    if not isinstance(analysis, Analysis):
        raise TypeError(f"analysis {cfg.type!r} built {type(analysis).__name__}, not an Analysis")
    return analysis


__all__ = ["Analysis", "AnalysisSettings", "PluginAnalysisSettings", "make_analysis", "register", "registry",
           "settings_class"]
