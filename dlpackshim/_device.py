"""Device rules in one place: host access, stream values, GPU hooks.

Today the C library handles CPU-accessible memory only. Everything that
depends on a GPU runtime goes through the functions here, so that the CUDA
and ROCm back-ends of the C library (a later issue) replace these bodies and
nothing else.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

from ._types import DeviceType

CPU = int(DeviceType.kDLCPU)
CUDA = int(DeviceType.kDLCUDA)
ROCM = int(DeviceType.kDLROCM)
CUDA_MANAGED = int(DeviceType.kDLCUDAManaged)

#: Device types whose memory the CPU reads directly (pinned and managed host
#: memory: the standard lets such data be exported as kDLCPU).
HOST_ACCESSIBLE = frozenset(
    {CPU, int(DeviceType.kDLCUDAHost), int(DeviceType.kDLROCMHost), CUDA_MANAGED}
)


def is_host_accessible(device_type: int) -> bool:
    """True when the CPU can read memory of `device_type` directly."""
    return device_type in HOST_ACCESSIBLE


def check_stream(device_type: int, stream: Any) -> None:
    """Validate a ``__dlpack__(stream=...)`` value for `device_type`.

    Array API standard, ``array.__dlpack__``: CPU takes ``None`` only (``-1``,
    "no synchronisation", is accepted as well); CUDA takes ``None``, ``-1``,
    ``1`` (legacy default), ``2`` (per-thread default) or a ``cudaStream_t``
    as an int (``0`` is disallowed); ROCm takes ``None``, ``0``, ``-1`` or a
    ``hipStream_t`` (``1`` and ``2`` are disallowed).

    Raises
    ------
    ValueError
        A value the standard does not allow for the device. (NumPy raises
        RuntimeError for a CPU stream; the standard says ValueError.)
    """
    if stream is None:
        return
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise ValueError(f"stream must be None or an int, not {stream!r}")
    if stream == -1:
        return
    if device_type in HOST_ACCESSIBLE and device_type != CUDA_MANAGED:
        raise ValueError(
            f"stream={stream} is not allowed for a CPU-accessible tensor: "
            "the array API standard allows only None (or -1)"
        )
    if device_type in (CUDA, CUDA_MANAGED):
        if stream == 0:
            raise ValueError(
                "stream=0 is ambiguous for CUDA and disallowed by the array API standard; "
                "use 1 (legacy default stream), 2 (per-thread default stream) or a cudaStream_t"
            )
        if stream < -1:
            raise ValueError(f"stream={stream} is not a CUDA stream")
        return
    if device_type == ROCM:
        if stream in (1, 2):
            raise ValueError(
                f"stream={stream} is disallowed for ROCm by the array API standard; "
                "use None or 0 (default stream) or a hipStream_t"
            )
        if stream < -1:
            raise ValueError(f"stream={stream} is not a ROCm stream")
        return
    raise ValueError(f"stream={stream} given for a device of type {device_type}, "
                     "which has no streams dlpackshim knows")


def export_sync(device_type: int, device_id: int, stream: Optional[int]) -> None:
    """Make the consumer's `stream` safe to use the tensor's data on.

    Data of tensors the shim holds is taken as ready on the device's default
    (legacy) stream: that is the stream the shim names (``stream=None``) when
    it imports from a producer. So CPU data, ``None``, ``-1`` and the default
    stream itself need nothing; any other stream needs an event wait, which
    the GPU back-end of the C library will provide.

    Raises
    ------
    BufferError
        A synchronisation this build cannot do.
    """
    if device_type in HOST_ACCESSIBLE and device_type != CUDA_MANAGED:
        return
    if stream is None or stream == -1:
        return
    if device_type in (CUDA, CUDA_MANAGED) and stream == 1:
        return
    if device_type == ROCM and stream == 0:
        return
    raise BufferError(
        f"cannot synchronise stream {stream} on device ({device_type}, {device_id}): "
        "this build of dlpackshim has no GPU stream support; pass stream=None or -1"
    )


# ---- CUDA pointers (for __cuda_array_interface__ imports) --------------------

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_libcuda: Any = None


def _cuda_driver() -> Any:
    """libcuda through ctypes, initialised, or raise BufferError."""
    global _libcuda
    if _libcuda is None:
        try:
            drv = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise BufferError(f"CUDA memory needs the CUDA driver (libcuda.so.1): {exc}") from None
        if drv.cuInit(0) != 0:
            raise BufferError("CUDA driver: cuInit(0) failed (no usable GPU?)")
        _libcuda = drv
    return _libcuda


def cuda_pointer_device(ptr: int) -> int:
    """The ordinal of the CUDA device that owns `ptr` (0 for a NULL pointer).

    ``__cuda_array_interface__`` does not carry the device; the consumer asks
    the driver (``cuPointerGetAttribute``, DEVICE_ORDINAL), as CuPy does.

    Raises
    ------
    BufferError
        No CUDA driver, or the pointer is not CUDA memory.
    """
    if ptr == 0:
        return 0
    drv = _cuda_driver()
    ordinal = ctypes.c_int(0)
    rc = drv.cuPointerGetAttribute(ctypes.byref(ordinal), _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   ctypes.c_uint64(ptr))
    if rc != 0:
        raise BufferError(f"0x{ptr:x} is not a CUDA device pointer (cuPointerGetAttribute: {rc})")
    return ordinal.value


def cuda_interface_sync(stream: Optional[int], device_id: int) -> None:
    """Honour a ``__cuda_array_interface__`` v3 ``stream`` before using the data.

    ``None`` means the data is ready; otherwise the consumer must synchronise
    on the producer's stream before touching the data.

    Raises
    ------
    ValueError
        ``0`` (disallowed by the interface), or not an int.
    BufferError
        The synchronisation needs a GPU stream back-end this build lacks.
    """
    if stream is None:
        return
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise ValueError(f"__cuda_array_interface__ stream must be None or an int, not {stream!r}")
    if stream == 0:
        raise ValueError(
            "__cuda_array_interface__ stream 0 is disallowed (ambiguous between the legacy "
            "and per-thread default streams)"
        )
    raise BufferError(
        f"cannot synchronise on the producer's stream {stream} (device {device_id}): this build "
        "of dlpackshim has no GPU stream support"
    )
