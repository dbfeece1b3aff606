"""The analysis contract: what a consumer rank runs on each step a reader delivers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from h5flow.transports.base import ReadStep


class Analysis(ABC):
    """An in-transit analysis. All methods are collective over the consumer communicator."""

    #: the name used in XML: ``<analysis type="...">``
    name: str = ""

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
