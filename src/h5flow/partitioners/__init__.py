"""Partitioners: decide which consumer rank receives which producer block (M:N redistribution).

One module per partitioner (``block``, ``planar``, ``mapped``), each registered in :data:`registry`;
third parties use the ``h5flow.partitioners`` entry-point group. Partitioners are pure functions of the
step's global block metadata and the consumer count, so they are tested without MPI.
"""

from h5flow._registry import Registry

registry: Registry = Registry("partitioner", "h5flow.partitioners")

__all__ = ["registry"]
