"""Transports: writer/reader pairs that move time steps from M producer ranks to N consumer ranks.

Each transport lives in its own module of this package and registers a ``(make_writer, make_reader)``
pair in :data:`registry` under a lower-case name (``hdf5``, ``socket``, ``adios2``). Third parties add
transports through the ``h5flow.transports`` entry-point group. Data flows one way:
producer → writer → storage/socket → reader → partitioner → analysis.
"""

from h5flow._registry import Registry

registry: Registry = Registry("transport", "h5flow.transports")

__all__ = ["registry"]
