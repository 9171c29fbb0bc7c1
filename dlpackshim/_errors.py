"""C status codes to Python exceptions, through one table."""

from __future__ import annotations

from ._ffi import ffi, lib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Dict, Type

# dlpackshim_status (csrc/dlpackshim.h, through the generated cdef; the values
# are fixed forever). BufferError is the standard's "cannot exchange this
# data" error; ValueError and TypeError are for arguments, as the array API
# standard words them.
STATUS_TO_EXCEPTION: Dict[int, Type[BaseException]] = {
    lib.DLPACKSHIM_ERR_INVALID_ARGUMENT: ValueError,
    lib.DLPACKSHIM_ERR_NO_MEMORY: MemoryError,
    lib.DLPACKSHIM_ERR_INVALID_TENSOR: BufferError,
    lib.DLPACKSHIM_ERR_UNSUPPORTED: BufferError,
    lib.DLPACKSHIM_ERR_VERSION: BufferError,
    lib.DLPACKSHIM_ERR_CAPSULE: BufferError,
    lib.DLPACKSHIM_ERR_NO_PYTHON: RuntimeError,
    lib.DLPACKSHIM_ERR_TYPE: TypeError,
    lib.DLPACKSHIM_ERR_DEVICE: BufferError,
    lib.DLPACKSHIM_ERR_STREAM: ValueError,
    lib.DLPACKSHIM_ERR_COPY_REQUIRED: BufferError,
    lib.DLPACKSHIM_ERR_READ_ONLY: BufferError,
    lib.DLPACKSHIM_ERR_PYTHON: RuntimeError,
}


def _exception(status: int) -> BaseException:
    """The exception for `status`, carrying this thread's last C error text."""
    text = ffi.string(lib.dlpackshim_last_error()).decode("utf-8", "replace")
    if not text:
        text = ffi.string(lib.dlpackshim_strerror(status)).decode("utf-8", "replace")
    return STATUS_TO_EXCEPTION.get(status, RuntimeError)(text)


def _check(status: int) -> int:
    """Return `status` if it is not negative, else raise its exception."""
    if status < 0:
        raise _exception(status)
    return status


class NotArrayLikeError(TypeError, AttributeError):
    """Raised by :func:`dlpackshim.from_dlpack` for an object it cannot import.

    A :class:`TypeError` (the object is not array-like) that is also an
    :class:`AttributeError`, the error the array API standard names for an
    object without ``__dlpack__``/``__dlpack_device__``, so that code written
    against either catches it.
    """
