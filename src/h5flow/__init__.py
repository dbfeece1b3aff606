"""h5flow: HDF5 as the vehicle that moves scientific data.

Layers (see docs/ARCHITECTURE.md):

* ``h5flow.transports``   — writer/reader pairs that move time steps (HDF5 files, sockets, ADIOS2)
* ``h5flow.partitioners`` — M:N assignment of producer blocks to consumer ranks
* ``h5flow.analyses``     — in-transit analyses run on what a reader delivers
* ``h5flow.connectors``   — locating and loading the C VOL connectors built from ``native/``
* ``h5flow.benchmarks``   — benchmark drivers (``h5flow bench ...``)
"""

__version__ = "0.1.0"
