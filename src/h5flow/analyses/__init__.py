"""Analyses: what consumer ranks run on the blocks a reader delivers (histogram, statistics, ...).

One module per analysis, registered in :data:`registry` under the name SENSEI XML uses in
``<analysis type="...">``; third parties use the ``h5flow.analyses`` entry-point group.
"""

from h5flow._registry import Registry

registry: Registry = Registry("analysis", "h5flow.analyses")

__all__ = ["registry"]
