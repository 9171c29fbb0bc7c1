"""Imports that are not DLPack.

The buffer protocol and ``__array_interface__`` are imported in C, each
rule once (csrc/python/interfaces.c): from_dlpack's hot path and a type's
first sight call the same builtins, :func:`from_buffer` and
:func:`from_array_interface`. ``__cuda_array_interface__`` is read here (its
device and stream need the GPU layer), its layout by the same C parser.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _device
from ._ffi import FLAG_READ_ONLY
from ._tensor import Tensor, _bound, _new_view
from ._types import Device, DType

#: from_buffer(obj) -> Tensor: `obj` through the buffer protocol, zero copy.
#: The Tensor holds an export of `obj` (its Py_buffer, as a memoryview would:
#: bytearray cannot resize, mmap cannot close under it, until the Tensor and
#: every export of it are gone); read-only buffers give read-only
#: Tensors; device ``(kDLCPU, 0)``. BufferError for a format DLPack cannot
#: describe (structs, non-native byte order, sub-offsets, strides that are
#: not whole elements).
from_buffer = _bound["_import_buffer"]

#: from_array_interface(obj) -> Tensor: `obj` through NumPy's
#: ``__array_interface__`` (v3), zero copy. ``data`` may be ``(address,
#: readonly)``, an object with the buffer protocol, or absent/None (then
#: `obj`'s own buffer), ``offset`` bytes in for the last two, which must hold
#: every element addressed. TypeError for fields of the wrong type, ValueError
#: for values out of range, BufferError for what DLPack cannot describe
#: (typestr, masks, structured descr).
from_array_interface = _bound["_import_array_interface"]

_interface_layout = _bound["_interface_layout"]


def from_cuda_array_interface(obj: Any, stream: Optional[int] = None) -> Tensor:
    """Import an object with ``__cuda_array_interface__`` (v2 or v3), zero copy.

    Reads ``shape``, ``typestr`` (native byte order), ``descr`` (one field
    only), ``data`` (``(pointer, readonly)``; 0 for empty arrays),
    ``strides`` (bytes; None: C-contiguous), ``mask`` and, from v3,
    ``stream``.

    The device is asked of the CUDA driver (the interface does not carry
    it): ``cuPointerGetAttribute`` gives ``(kDLCUDA, ordinal)`` for device
    memory, ``(kDLCUDAHost, 0)`` for pinned and ``(kDLCUDAManaged, 0)`` for
    managed memory. A NULL pointer, and a process without a CUDA driver,
    give ``(kDLCUDA, 0)``: nothing can be asked then, and no GPU of this
    process can have the memory anyway.

    v3 ``stream``: None means the data is ready; 0 is disallowed
    (ValueError); any other value is the producer's stream, and the
    consumer's `stream` (None: the legacy default stream 1; -1: no
    synchronisation) is made to wait for its work (an event recorded on it,
    ``cuStreamWaitEvent`` on ours; CuPy blocks the host instead). The Tensor
    records `stream` as the stream its data is ready on.

    Parameters
    ----------
    obj : object
        Has ``__cuda_array_interface__``; the Tensor keeps it alive.
    stream : int or None, optional
        The consumer's CUDA stream (checked as ``__dlpack__`` checks it).

    Raises
    ------
    BufferError
        Unsupported typestr or descr, version < 2, a pointer the CUDA driver
        does not know, or a synchronisation that failed (no driver, a driver
        error: the message says which).
    ValueError
        A non-None ``mask`` (DLPack has no masks; CuPy raises ValueError
        too), a ``stream`` of 0 or not an int, or a consumer `stream` not
        allowed for CUDA.
    """
    iface = obj.__cuda_array_interface__
    what = "__cuda_array_interface__"
    if not isinstance(iface, dict):
        raise BufferError(f"{what} of {type(obj).__name__} is not a dict")
    version = iface.get("version")
    if not isinstance(version, int) or version < 2:
        raise BufferError(f"{what} version {version!r}: dlpackshim reads versions 2 and 3")
    if iface.get("mask") is not None:
        raise ValueError(f"{what}: masked arrays are not supported (DLPack has no mask)")
    shape, strides, code, bits = _interface_layout(iface, what)
    dtype = DType(code, bits, 1)
    data = iface.get("data")
    if not (isinstance(data, tuple) and len(data) == 2):
        raise BufferError(f"{what}: 'data' must be (address, readonly), not {data!r}")
    address, readonly = int(data[0]), bool(data[1])
    device = _device.cuda_pointer_device(address)  # CUDA's, or ROCm's (see there)
    consumer = _device.check_stream(device[0], stream)
    # The stream key exists from v3; v2 producers' data is ready.
    if version >= 3:
        _device.cuda_interface_sync(iface.get("stream"), device, consumer)
    flags = FLAG_READ_ONLY if readonly else 0
    t = _new_view(address, Device(*device), shape, strides, dtype, flags, obj)
    t._stream = _device.stream_or_none(device[0], consumer, device[1])
    return t
