"""A file access list that stacks h5flow_async and/or h5flow_cache above native HDF5, for one file.

The hdf5 transport's ``vol_stack`` setting (docs/STREAM.md "Connector stack") names the layers from the top
down; each layer's own info-string keys (docs/ASYNC.md, docs/CACHE.md) come from the transport's settings.
The stack is chosen by the file access list, so the process's other files stay as they are, whatever
``HDF5_VOL_CONNECTOR`` says; the plugins load from h5flow's plugin directory (:mod:`logvol` registers them).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from h5flow.connectors.logvol import ConnectorError, hdf5, vol_id

#: the layers a stack may hold: its name in ``vol_stack`` -> (registered connector name, connector value)
LAYERS: dict[str, tuple[str, int]] = {"async": ("h5flow_async", 312), "cache": ("h5flow_cache", 313)}
#: characters an info-string value cannot hold (they delimit keys and nested strings)
INFO_DELIMITERS = ";{}="


@dataclass(frozen=True)
class Layer:
    """One connector of a stack: ``kind`` (a key of :data:`LAYERS`) and its own ``key=value`` options."""

    kind: str
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def info_string(layers: list[Layer]) -> str:
    """The info string of the top layer: its options, then ``under_vol``/``under_info`` down to native."""
    inner = "under_vol=0;under_info={}"
    for layer in reversed(layers[1:]):
        inner = f"under_vol={LAYERS[layer.kind][1]};under_info={{{_own(layer)}{inner}}}"
    return _own(layers[0]) + inner


def _own(layer: Layer) -> str:
    for key, value in layer.options:
        bad = [c for c in INFO_DELIMITERS if c in value]
        if bad:
            raise ValueError(f"{LAYERS[layer.kind][0]} option {key}={value!r}: a value cannot hold "
                             f"{' '.join(repr(c) for c in bad)} (they delimit the connector's info string)")
    return "".join(f"{key}={value};" for key, value in layer.options)


def set_stack(fapl: Any, layers: list[Layer]) -> str:
    """Select the stack ``layers`` (top first) on the h5py file access list ``fapl``; returns what HDF5 was
    given, ``"<connector> <info string>"``, for messages. Every layer's plugin is registered first, so the
    connectors below are found by value."""
    if not layers:
        raise ValueError("a connector stack needs at least one layer")
    for layer in layers:
        if layer.kind not in LAYERS:
            raise ValueError(f"connector layer {layer.kind!r}: accepted: {', '.join(LAYERS)}")
        vol_id(LAYERS[layer.kind][0])
    top = LAYERS[layers[0].kind][0]
    text = info_string(layers)
    lib = hdf5()
    lib.H5VLconnector_str_to_info.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
    lib.H5VLconnector_str_to_info.restype = ctypes.c_int
    lib.H5VLfree_connector_info.argtypes = [ctypes.c_int64, ctypes.c_void_p]
    lib.H5VLfree_connector_info.restype = ctypes.c_int
    top_id = vol_id(top)
    info = ctypes.c_void_p()
    if lib.H5VLconnector_str_to_info(text.encode(), top_id, ctypes.byref(info)) < 0:
        raise ConnectorError(f"{top} refused the info string {text!r}")
    try:
        if lib.H5Pset_vol(fapl.id, top_id, info) < 0:
            raise ConnectorError(f"H5Pset_vol({top}, {text!r}) failed")
    finally:
        lib.H5VLfree_connector_info(top_id, info)
    return f"{top} {text}"
