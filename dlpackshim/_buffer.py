"""Imports that are not DLPack: the buffer protocol and the two array interfaces.

Each builds a DLManagedTensorVersioned over the object's memory that holds a
reference to a Python object keeping that memory valid (a memoryview for
buffers, the object itself for the interfaces), then goes through the same
capsule path as every other Tensor.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Dict, Optional, Tuple

from . import _device
from ._errors import _check
from ._ffi import FLAG_READ_ONLY, buffer_address
from ._tensor import Tensor, _new_view
from ._types import Device, DType, DTypeCode

_NATIVE = "<" if sys.byteorder == "little" else ">"

# struct-module codes -> DLPack code; the width comes from the itemsize, not
# from the code (ctypes exports c_long as "<l" with itemsize 8).
_STRUCT_CODES = {
    "b": DTypeCode.kDLInt, "h": DTypeCode.kDLInt, "i": DTypeCode.kDLInt,
    "l": DTypeCode.kDLInt, "q": DTypeCode.kDLInt, "n": DTypeCode.kDLInt,
    "B": DTypeCode.kDLUInt, "H": DTypeCode.kDLUInt, "I": DTypeCode.kDLUInt,
    "L": DTypeCode.kDLUInt, "Q": DTypeCode.kDLUInt, "N": DTypeCode.kDLUInt,
    "c": DTypeCode.kDLUInt,  # a char (ctypes c_char arrays): one byte of data
    "e": DTypeCode.kDLFloat, "f": DTypeCode.kDLFloat, "d": DTypeCode.kDLFloat,
    "?": DTypeCode.kDLBool,
    "Zf": DTypeCode.kDLComplex, "Zd": DTypeCode.kDLComplex,
}


def dtype_from_format(fmt: str, itemsize: int) -> DType:
    """The DType of a PEP 3118 format string of one native-order scalar.

    Parameters
    ----------
    fmt : str
        E.g. ``"f"``, ``"<d"``, ``"@i"``, ``"=H"``, ``"Zd"``, ``"?"``.
    itemsize : int
        Bytes per element, as the exporter reports it.

    Raises
    ------
    BufferError
        Non-native byte order, or a format that is not one scalar of a
        supported kind (structs, pointers, padding, repeat counts, ...).
    """
    code = fmt
    if code[:1] in ("@", "=", "<", ">", "!"):
        order, code = code[0], code[1:]
        if order in ("<", ">", "!") and (">" if order == "!" else order) != _NATIVE:
            raise BufferError(
                f"buffer format {fmt!r} is {'big' if order != '<' else 'little'}-endian; "
                "DLPack data is in native byte order"
            )
    kind = _STRUCT_CODES.get(code)
    if kind is None or itemsize <= 0:
        raise BufferError(
            f"buffer format {fmt!r} is not a supported scalar type (expected one of the struct "
            "codes b B h H i I l L q Q n N c e f d ? Zf Zd, in native byte order)"
        )
    if kind == DTypeCode.kDLBool and itemsize != 1:
        raise BufferError(f"buffer format {fmt!r}: a bool of {itemsize} bytes")
    return DType(kind, itemsize * 8, 1)


def _element_strides(byte_strides: Tuple[int, ...], itemsize: int, what: str) -> Tuple[int, ...]:
    out = []
    for s in byte_strides:
        if s % itemsize:
            raise BufferError(
                f"{what}: stride {s} bytes is not a multiple of the item size {itemsize}; "
                "DLPack counts strides in elements"
            )
        out.append(s // itemsize)
    return tuple(out)


def from_buffer(obj: Any) -> Tensor:
    """Import an object that has the buffer protocol (zero copy).

    The Tensor holds a memoryview of `obj` (an export, so bytearray cannot
    resize and mmap cannot close under it). Read-only buffers give read-only
    tensors. Device is ``(kDLCPU, 0)``.

    Raises
    ------
    TypeError
        `obj` has no buffer protocol.
    BufferError
        Unsupported format or byte order, sub-offsets, or strides that are
        not whole elements.
    """
    mv = memoryview(obj)
    if mv.suboffsets:
        raise BufferError("buffers with sub-offsets (PIL-style) cannot be described by DLPack")
    dtype = dtype_from_format(mv.format, mv.itemsize)
    shape = tuple(mv.shape)
    strides = _element_strides(tuple(mv.strides), mv.itemsize, "buffer")
    flags = FLAG_READ_ONLY if mv.readonly else 0
    return _new_view(_address(mv), (_device.CPU, 0), shape, strides, dtype, flags, mv)


def _address(mv: memoryview) -> int:
    """The address of `mv`'s first element (the caller keeps `mv`)."""
    out = ctypes.c_ssize_t()
    _check(buffer_address(id(mv), ctypes.byref(out)))
    return out.value


# ---- __array_interface__ / __cuda_array_interface__ ---------------------------

_TYPESTR_KINDS = {
    "i": DTypeCode.kDLInt, "u": DTypeCode.kDLUInt, "f": DTypeCode.kDLFloat,
    "c": DTypeCode.kDLComplex, "b": DTypeCode.kDLBool,
}


def dtype_from_typestr(typestr: str) -> DType:
    """The DType of an array-interface ``typestr`` such as ``"<f4"`` or ``"|b1"``.

    Raises
    ------
    BufferError
        Non-native byte order, or a kind DLPack has no code for (datetime,
        object, void, strings, ...).
    """
    if not isinstance(typestr, str) or len(typestr) < 3:
        raise BufferError(f"bad array interface typestr {typestr!r}")
    order, kind, size = typestr[0], typestr[1], typestr[2:]
    code = _TYPESTR_KINDS.get(kind)
    if code is None or not size.isdigit() or int(size) <= 0:
        raise BufferError(
            f"array interface typestr {typestr!r}: DLPack has no type for it "
            "(supported kinds: b i u f c)"
        )
    nbytes = int(size)
    if order not in ("|", "<", ">", "="):
        raise BufferError(f"array interface typestr {typestr!r}: bad byte order {order!r}")
    if nbytes > 1 and order in ("<", ">") and order != _NATIVE:
        raise BufferError(f"array interface typestr {typestr!r} is not in native byte order")
    if code == DTypeCode.kDLBool and nbytes != 1:
        raise BufferError(f"array interface typestr {typestr!r}: a bool of {nbytes} bytes")
    return DType(code, nbytes * 8, 1)


def _interface_layout(
    iface: Dict[str, Any], what: str
) -> Tuple[Tuple[int, ...], Optional[Tuple[int, ...]], DType]:
    try:
        shape = tuple(int(n) for n in iface["shape"])
        typestr = iface["typestr"]
    except (KeyError, TypeError, ValueError) as exc:
        raise BufferError(f"{what} needs 'shape' (a tuple of ints) and 'typestr': {exc}") from None
    dtype = dtype_from_typestr(typestr)
    descr = iface.get("descr")
    if descr is not None and len(descr) > 1:
        raise BufferError(f"{what}: structured dtypes (descr {descr!r}) are not supported")
    byte_strides = iface.get("strides")
    strides = None
    if byte_strides is not None:
        byte_strides = tuple(int(s) for s in byte_strides)
        if len(byte_strides) != len(shape):
            raise BufferError(f"{what}: {len(byte_strides)} strides for {len(shape)} dimensions")
        strides = _element_strides(byte_strides, dtype.itemsize, what)
    return shape, strides, dtype


def _check_within(mv: memoryview, offset: Any, shape: Tuple[int, ...],
                  strides: Optional[Tuple[int, ...]], dtype: DType, what: str) -> int:
    """The interface's ``offset`` (bytes), once every element that `shape`
    and `strides` (elements; None: C order) address from it lies inside the
    buffer `mv`: its length is known, so an array reaching past either end
    would read (or write) memory that is not its own. Raises BufferError."""
    try:
        offset = int(offset)
    except (TypeError, ValueError):
        raise BufferError(f"{what}: 'offset' must be an int, not {offset!r}") from None
    if not (mv.c_contiguous or mv.f_contiguous):
        raise BufferError(f"{what}: 'data' is a non-contiguous buffer; its extent is unknown")
    nbytes = mv.nbytes
    if any(n < 0 for n in shape):
        raise BufferError(f"{what}: negative extent in shape {shape}")
    if offset < 0 or offset > nbytes:
        raise BufferError(f"{what}: offset {offset} lies outside the {nbytes}-byte buffer")
    if 0 in shape:
        return offset  # no element is addressed
    itemsize = dtype.itemsize
    if strides is None:
        lo, hi = 0, itemsize
        for n in shape:
            hi *= n
    else:
        lo = hi = 0
        for n, s in zip(shape, strides):
            step = (n - 1) * s * itemsize
            if step < 0:
                lo += step
            else:
                hi += step
        hi += itemsize
    if offset + lo < 0 or offset + hi > nbytes:
        raise BufferError(
            f"{what}: shape {shape} with strides {strides} (elements of {itemsize} bytes) from "
            f"offset {offset} addresses bytes [{offset + lo}, {offset + hi}) of a "
            f"{nbytes}-byte buffer")
    return offset


def from_array_interface(obj: Any) -> Tensor:
    """Import an object with NumPy's ``__array_interface__`` (v3), zero copy.

    ``data`` may be ``(address, readonly)``, an object with the buffer
    protocol, or absent/None (then `obj`'s own buffer), with ``offset``
    added in the last two cases. A non-None ``mask`` is refused.

    Raises
    ------
    BufferError
        Unsupported typestr, masks, structured descr, a bad layout, or (when
        ``data`` is a buffer) a shape, strides and offset that address bytes
        outside that buffer.
    """
    iface = obj.__array_interface__
    what = "__array_interface__"
    if not isinstance(iface, dict):
        raise BufferError(f"{what} of {type(obj).__name__} is not a dict")
    if iface.get("version", 3) < 3:
        raise BufferError(f"{what} version {iface.get('version')!r}: dlpackshim reads version 3")
    if iface.get("mask") is not None:
        raise BufferError(f"{what}: masked arrays are not supported (DLPack has no mask)")
    shape, strides, dtype = _interface_layout(iface, what)
    data = iface.get("data")
    owner: Any = obj
    if isinstance(data, tuple):
        if len(data) != 2:
            raise BufferError(f"{what}: 'data' must be (address, readonly), not {data!r}")
        address, readonly = int(data[0]), bool(data[1])
    else:
        # Memory shared through a buffer object: its memoryview is the owner.
        mv = memoryview(obj if data is None else data)
        offset = _check_within(mv, iface.get("offset", 0), shape, strides, dtype, what)
        address = _address(mv) + offset
        readonly = mv.readonly
        owner = (obj, mv)
    flags = FLAG_READ_ONLY if readonly else 0
    return _new_view(address, (_device.CPU, 0), shape, strides, dtype, flags, owner)


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
    shape, strides, dtype = _interface_layout(iface, what)
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
