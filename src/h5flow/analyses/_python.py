"""``<analysis type="python" script="my_analysis.py" .../>``: an analysis written as a Python script.

Modelled on SENSEI's Python analysis adaptor. The script defines

* ``initialize(comm, params)`` (optional): once, with the consumer communicator and the element's other
  XML attributes as a ``dict`` of strings (``script`` and ``enabled`` excluded);
* ``execute(step)`` (required): once per step, with the same :class:`h5flow.Step` the Python API's
  ``for st in s.steps()`` gives (``step.read(name)``, ``step.blocks(...)``); what it returns is the
  step's result (the run record keeps the last one);
* ``finalize()`` (optional): once after the last step; its return value is the summary.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from h5flow.analyses.base import Analysis, AnalysisSettings
from h5flow.settings import free, setting
from h5flow.stepview import Step
from h5flow.xmlnode import XmlNode

if TYPE_CHECKING:
    from h5flow.config import AnalysisConfig

_counter = itertools.count()


def resolve_script(script: str, source: str = "") -> Path:
    """``script`` as given if it exists, else relative to the directory of the XML file it came from."""
    path = Path(script).expanduser()
    if path.is_file() or path.is_absolute():
        return path
    xml = source.rsplit(":", 1)[0] if source else ""
    if xml and not xml.startswith("<"):
        beside = Path(xml).parent / path
        if beside.is_file():
            return beside
    return path


def load_script(path: Path) -> ModuleType:
    """Import the analysis script ``path`` as a fresh module."""
    if not path.is_file():
        raise ValueError(f"python analysis script {path} does not exist: give script=\"...\" as a path relative to "
                         "the working directory or to the XML file")
    spec = importlib.util.spec_from_file_location(f"h5flow_user_analysis_{next(_counter)}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"python analysis script {path} cannot be imported (give a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[spec.name]
        raise ValueError(f"python analysis script {path} failed to import: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "execute", None)):
        raise ValueError(f"python analysis script {path} defines no execute(step) function; it needs execute(step) "
                         "and may define initialize(comm, params) and finalize()")
    return module


@dataclass
class PythonSettings(AnalysisSettings):
    """``<analysis type="python" script="my_analysis.py" .../>``: the script, and every other attribute (stripped)
    in ``params``, which the script's ``initialize(comm, params)`` receives."""

    XML_ANY: ClassVar[bool] = True

    script: str = setting("", "the script defining `execute(step)` (a path relative to the working directory or "
                              "to the XML file)", default_doc="(required)")
    params: dict[str, str] = free(dict, "every other attribute, stripped")

    @classmethod
    def from_xml(cls, node: XmlNode) -> PythonSettings:
        script = node.require("script", "give script=\"my_analysis.py\" (a script defining execute(step))")
        if not resolve_script(script, node.source).is_file():
            raise node.bad_value("script", "the script does not exist; give a path relative to the working "
                                           "directory or to this XML file")
        params = {k: v.strip() for k, v in node.el.attrs.items() if k not in ("type", "enabled", "script")}
        settings: PythonSettings = cls.build_from_xml(node, {"script": script, "params": params})
        return settings


class PythonAnalysis(Analysis):
    name = "python"
    SETTINGS = PythonSettings

    def __init__(self, script: str | Path, params: dict[str, str] | None = None, source: str = "") -> None:
        self.path = resolve_script(str(script), source)
        self.params = dict(params or {})
        self.module = load_script(self.path)

    @classmethod
    def from_config(cls, cfg: AnalysisConfig) -> PythonAnalysis:
        params = dict(cfg.settings.params)
        script = cfg.settings.script or params.pop("script", "")
        if not script:
            raise ValueError(f"{cfg.source or 'analysis'}: <analysis type=\"python\"> needs script=\"file.py\" "
                             "(a script defining execute(step))")
        return cls(script, params, cfg.source)

    def initialize(self, comm: Any) -> None:
        super().initialize(comm)
        init = getattr(self.module, "initialize", None)
        if callable(init):
            init(comm, dict(self.params))

    def execute(self, step: Any) -> Any:
        return self.module.execute(step if isinstance(step, Step) else Step(step))

    def finalize(self) -> Any:
        fin = getattr(self.module, "finalize", None)
        return fin() if callable(fin) else None
