"""The C library's GPU calls the package makes only from C, wrapped for the
tests (tests/python/gpu): stream checks and waits, pointer queries."""

from __future__ import annotations

from typing import Any, Tuple

from dlpackshim import _ffi
from dlpackshim._errors import STATUS_TO_EXCEPTION
from dlpackshim._gpu import _OK, _message, default_stream, is_host_accessible

#: How the C library's messages say "no stream" (Python's None).
_C_NO_STREAM = "has_stream = 0"


def _bind(lib: Any = None, ffi: Any = None) -> Tuple[Any, Any]:
    return (_ffi.lib if lib is None else lib), (_ffi.ffi if ffi is None else ffi)


def _check(status: int, lib: Any, ffi: Any) -> int:
    """Raise the exception the status maps to, with the C library's message."""
    if status >= 0:
        return status
    raise STATUS_TO_EXCEPTION.get(status, BufferError)(_message(lib, ffi).replace(_C_NO_STREAM, "None"))


def _stream_int(stream: Any) -> int:
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"stream must be None or an int, not {type(stream).__name__}")
    if not -(2**63) <= stream < 2**63:
        raise ValueError(f"stream={stream} does not fit in 64 bits")
    return stream


def has_streams(device_type: int) -> bool:
    """True for the device types whose work is ordered by CUDA or HIP streams."""
    return default_stream(device_type) != -1


def is_on_device(device_type: int) -> bool:
    """True for GPU memory the CPU cannot read (kDLCUDA, kDLROCM)."""
    return has_streams(device_type) and not is_host_accessible(device_type)


def check_stream(device_type: int, stream: Any, *, lib: Any = None, ffi: Any = None) -> int:
    """Check a ``__dlpack__(stream=...)`` value for `device_type`; return it normalised.

    Array API standard: CUDA takes None (= 1), 1 (legacy default), 2
    (per-thread default), -1 (no synchronisation) or a ``cudaStream_t``; 0 is
    disallowed. ROCm takes None (= 0), 0, -1 or a ``hipStream_t``; 1 and 2
    are disallowed. CPU takes None (and -1) only.

    Raises
    ------
    TypeError
        `stream` is neither None nor an int.
    ValueError
        A value the standard does not allow for the device.
    BufferError
        A stream for a device type dlpackshim cannot synchronise.
    """
    if stream is None:
        return default_stream(device_type)
    lib, ffi = _bind(lib, ffi)
    out = ffi.new("int64_t *")
    _check(lib.dlpackshim_stream_check(device_type, 1, _stream_int(stream), out), lib, ffi)
    return int(out[0])


def sync(device_type: int, device_id: int, producer_stream: int, consumer_stream: Any, *,
         lib: Any = None, ffi: Any = None) -> None:
    """Make `consumer_stream` (checked; None allowed, -1 does nothing) wait for
    the work queued on `producer_stream`: an event, the host never blocks."""
    lib, ffi = _bind(lib, ffi)
    consumer = check_stream(device_type, consumer_stream, lib=lib, ffi=ffi)
    _check(lib.dlpackshim_stream_wait(device_type, device_id, _stream_int(producer_stream),
                                      consumer), lib, ffi)


def pointer_device(ptr: int, runtime: int = 0, *, lib: Any = None,
                   ffi: Any = None) -> Tuple[int, int]:
    """The DLPack ``(device_type, device_id)`` of memory at `ptr`, asked of the
    CUDA driver and/or the HIP runtime (`runtime`: ``CUDA``, ``ROCM`` or 0 for
    either); memory no runtime knows gives ``(kDLCPU, 0)``."""
    lib, ffi = _bind(lib, ffi)
    dev_type = ffi.new("int32_t *")
    dev_id = ffi.new("int32_t *")
    _check(lib.dlpackshim_pointer_device(runtime, ffi.cast("const void *", ptr), dev_type,
                                         dev_id), lib, ffi)
    return int(dev_type[0]), int(dev_id[0])
