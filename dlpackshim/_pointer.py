"""from_pointer: raw memory described by hand, exposed as DLPack."""

from __future__ import annotations

import operator

from ._errors import _exception
from ._ffi import FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY, ffi, lib
from ._tensor import Tensor
from ._types import _numpy_dtype_of, as_dtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence


def _index(value: Any, what: str) -> int:
    """`value` as an int through ``__index__`` (ints, NumPy integers, ...), as
    the rest of the API takes integers; bools and floats are TypeErrors."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int (or have __index__), not {value!r}") from None


def _int_tuple(values: Any, what: str) -> tuple:
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, not {values!r}") from None
    out = tuple(_index(v, f"each {what} value") for v in items)
    for v in out:
        if not -2 ** 63 <= v < 2 ** 63:
            raise ValueError(f"{what} value {v} does not fit DLPack's int64")
    return out


def _check_dtype(dt: Any) -> None:
    """ValueError unless DLPack allows `dt` (the C library's rules, asked
    about a 0-d tensor so that only the dtype can be at fault)."""
    probe = ffi.new("DLTensor *")
    probe.data = ffi.cast("void *", 256)
    probe.device.device_type = 1
    probe.dtype.code, probe.dtype.bits, probe.dtype.lanes = dt.code, dt.bits, dt.lanes
    if lib.dlpackshim_tensor_validate(probe, 0) != 0:
        raise ValueError(f"dtype {dt!r}: " + str(_exception(lib.DLPACKSHIM_ERR_INVALID_ARGUMENT)))


def from_pointer(
    ptr: int,
    shape: Sequence[int],
    dtype: Any,
    *,
    strides: Optional[Sequence[int]] = None,
    device: Any = (1, 0),
    readonly: bool = False,
    owner: Any = None,
) -> Tensor:
    """Expose memory at address `ptr` as a :class:`dlpackshim.Tensor` (no copy).

    This is how a pure-Python project hands raw memory (a ctypes buffer, an
    mmap, a GPU pointer from another library) to DLPack consumers.

    Parameters
    ----------
    ptr : int
        Address of the first element. May be 0 only for an empty tensor.
        Here and in `shape` and `strides`, any integer with ``__index__``
        (a NumPy integer) will do.
    shape : sequence of int
        Extents (``()`` for a 0-d tensor).
    dtype : DType, str, tuple or NumPy dtype
        A :class:`DType`, a name such as ``"float32"``,
        ``(code, bits, lanes)``, or a NumPy dtype or scalar type
        (``numpy.float32``). A sub-byte type (``"int4"``) named so is
        packed, as DLPack lays it out (two int4 a byte); given as a NumPy
        dtype (ml_dtypes' ``int4``, whose arrays hold one a byte) it is
        padded: the Tensor carries IS_SUBBYTE_TYPE_PADDED.
    strides : sequence of int, optional
        Strides in *elements* (not bytes); negative and zero strides are
        allowed. None (default): compact row-major.
    device : Device, (device_type, device_id) tuple or DeviceType, optional
        Where the memory is; default ``(kDLCPU, 0)``.
    readonly : bool, optional
        Mark the data READ_ONLY (exported as such; refused through the
        legacy ABI).
    owner : object, optional
        An object that keeps the memory valid. dlpackshim holds a reference
        to it for as long as the Tensor or any export of it lives. With None
        the caller must keep the memory alive itself.

    Returns
    -------
    Tensor

    Raises
    ------
    TypeError
        `ptr`, `shape`, `strides`, `dtype` or `device` of the wrong kind.
    ValueError
        An unknown dtype name, a dtype DLPack does not allow (e.g. a
        33-bit float), or an address or extent out of range.
    BufferError
        The description breaks DLPack's rules (negative extents, NULL data
        for a non-empty tensor, unknown device type, sizes overflowing int64,
        strides for packed sub-byte types, ...); the C library says which.
    """
    ptr = _index(ptr, "ptr (an address)")
    if not 0 <= ptr < 2 ** 64:
        raise ValueError(f"ptr must be a non-negative address below 2**64, got {ptr}")
    shape_t = _int_tuple(shape, "shape")
    strides_t = None if strides is None else _int_tuple(strides, "strides")
    if strides_t is not None and len(strides_t) != len(shape_t):
        raise ValueError(f"{len(strides_t)} strides given for {len(shape_t)} dimensions")
    dt = as_dtype(dtype)
    _check_dtype(dt)
    flags = FLAG_READ_ONLY if readonly else 0
    if dt.bits < 8 and _numpy_dtype_of(dtype) is not None:
        # NumPy lays out an element per item (ml_dtypes' int4: one a byte),
        # where DLPack packs sub-byte types unless the tensor says padded
        flags |= FLAG_IS_SUBBYTE_TYPE_PADDED
    return Tensor._from_memory(ptr, device, shape_t, strides_t,
                               (int(dt.code), dt.bits, dt.lanes), flags, owner)
