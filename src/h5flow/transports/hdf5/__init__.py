"""The hdf5 transport: steps staged as HDF5 files on fast storage (tmpfs, NVMe, burst buffer).

Writer: :class:`~h5flow.transports.hdf5.writer.Hdf5Writer`; reader:
:class:`~h5flow.transports.hdf5.reader.Hdf5Reader`; on-disk protocol: :mod:`.staging` (docs/STREAM.md).
"""

from h5flow.transports.hdf5.reader import Hdf5Reader
from h5flow.transports.hdf5.writer import Hdf5Writer

__all__ = ["Hdf5Reader", "Hdf5Writer"]
