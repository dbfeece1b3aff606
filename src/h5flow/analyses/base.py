"""The analysis contract: what a consumer rank runs on each step a reader delivers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from h5flow.settings import Settings, free, setting
from h5flow.xmlnode import XmlNode

if TYPE_CHECKING:
    from h5flow.transports.base import ReadStep


@dataclass
class AnalysisSettings(Settings):
    """Base of an analysis' settings: its fields are the attributes of ``<analysis type="...">`` besides
    ``type`` and ``enabled`` (declared as a transport's are, :mod:`h5flow.settings`), reaching it as
    ``cfg.settings``."""

    WHAT: ClassVar[str] = "analysis setting"


def mesh_setting(default: str = "mesh") -> Any:
    return setting(default, "the mesh (array) to read")


@dataclass
class PluginAnalysisSettings(AnalysisSettings):
    """The settings of an analysis without a settings class of its own: ``mesh``, ``array`` and ``association``
    as fields, every other attribute, stripped, in ``params`` (strings, for the analysis to check)."""

    XML_ANY: ClassVar[bool] = True

    mesh: str = mesh_setting()
    array: str = setting("data", "the array to read")
    association: str = setting("cell", "where the array lives")
    params: dict[str, str] = free(dict, "every other attribute, stripped")

    @classmethod
    def from_xml(cls, node: XmlNode) -> PluginAnalysisSettings:
        values = cls.xml_values(node)
        declared = {d.xml for d in cls.declarations()}
        params = {k: v.strip() for k, v in node.el.attrs.items() if k not in ("type", "enabled", *declared)}
        settings: PluginAnalysisSettings = cls.build_from_xml(node, {**values, "params": params})
        return settings


class Analysis(ABC):
    """An in-transit analysis. All methods are collective over the consumer communicator."""

    #: the name used in XML: ``<analysis type="...">``
    name: str = ""
    #: its settings dataclass; ``None``: :class:`PluginAnalysisSettings` (``mesh``, ``array``, ``association``
    #: and the other attributes as strings in ``params``)
    SETTINGS: ClassVar[type[AnalysisSettings] | None] = None

    def initialize(self, comm: Any) -> None:  # noqa: B027 - optional hook
        """Called once with the consumer communicator before the first step."""
        self.comm = comm

    @abstractmethod
    def execute(self, step: ReadStep) -> Any:
        """Process one step: ``step.blocks(mesh, arrays, association)`` gives this rank's blocks.

        Returns the step's result on the rank that holds it (rank 0 for reductions), else ``None``.
        """

    def finalize(self) -> Any:  # noqa: B027 - optional hook
        """Called once after the last step; returns a summary or ``None``."""
        return None
