"""C status codes to Python exceptions, through one table."""

from __future__ import annotations

from ._ffi import ffi, lib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Dict, Type

# dlpackshim_status (csrc/dlpackshim.h, through the generated cdef): the
# values are fixed forever.
OK = lib.DLPACKSHIM_OK
ERR_INVALID_ARGUMENT = lib.DLPACKSHIM_ERR_INVALID_ARGUMENT
ERR_NO_MEMORY = lib.DLPACKSHIM_ERR_NO_MEMORY
ERR_INVALID_TENSOR = lib.DLPACKSHIM_ERR_INVALID_TENSOR
ERR_UNSUPPORTED = lib.DLPACKSHIM_ERR_UNSUPPORTED
ERR_VERSION = lib.DLPACKSHIM_ERR_VERSION
ERR_CAPSULE = lib.DLPACKSHIM_ERR_CAPSULE
ERR_NO_PYTHON = lib.DLPACKSHIM_ERR_NO_PYTHON
ERR_TYPE = lib.DLPACKSHIM_ERR_TYPE
ERR_DEVICE = lib.DLPACKSHIM_ERR_DEVICE
ERR_STREAM = lib.DLPACKSHIM_ERR_STREAM
ERR_COPY_REQUIRED = lib.DLPACKSHIM_ERR_COPY_REQUIRED
ERR_READ_ONLY = lib.DLPACKSHIM_ERR_READ_ONLY
ERR_PYTHON = lib.DLPACKSHIM_ERR_PYTHON

# BufferError is the standard's "cannot exchange this data" error; ValueError
# and TypeError are for arguments, as the array API standard words them.
STATUS_TO_EXCEPTION: Dict[int, Type[BaseException]] = {
    ERR_INVALID_ARGUMENT: ValueError,
    ERR_NO_MEMORY: MemoryError,
    ERR_INVALID_TENSOR: BufferError,
    ERR_UNSUPPORTED: BufferError,
    ERR_VERSION: BufferError,
    ERR_CAPSULE: BufferError,
    ERR_NO_PYTHON: RuntimeError,
    ERR_TYPE: TypeError,
    ERR_DEVICE: BufferError,
    ERR_STREAM: ValueError,
    ERR_COPY_REQUIRED: BufferError,
    ERR_READ_ONLY: BufferError,
    ERR_PYTHON: RuntimeError,
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
