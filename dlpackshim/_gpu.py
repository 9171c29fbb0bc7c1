"""Devices and streams, as the C library's rules say (csrc/gpu/).

The C side does the work: it opens the CUDA driver (``libcuda.so.1``, or
``$DLPACKSHIM_LIBCUDA``) or the HIP runtime (``libamdhip64.so``, or
``$DLPACKSHIM_LIBHIP``) on first use, checks stream values by the array API
standard, makes a consumer stream wait on an event recorded on the producer
stream, and copies between host and device. This module is its Python face:
thin wrappers for the Tensor's own methods, ``python -m dlpackshim info`` and
the tests. Nothing here loads a GPU runtime until a GPU function is called.

Every function takes optional ``lib``/``ffi`` objects (the cffi handles of
:mod:`dlpackshim._ffi` by default), so that a test can bind another copy of
the library.
"""

from __future__ import annotations

from . import _ffi
from ._errors import STATUS_TO_EXCEPTION

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

# DLDeviceType values (dlpack.h, through the generated cdef).
CPU = _ffi.lib.kDLCPU
CUDA = _ffi.lib.kDLCUDA
CUDA_HOST = _ffi.lib.kDLCUDAHost
ROCM = _ffi.lib.kDLROCM
ROCM_HOST = _ffi.lib.kDLROCMHost
CUDA_MANAGED = _ffi.lib.kDLCUDAManaged

_OK = 0
#: How the C library's messages say "no stream" (Python's None).
_C_NO_STREAM = "has_stream = 0"

# The C library's host-accessible set (csrc/core/validate.c): asked, never copied.
_host_accessible = _ffi.host_accessible


def _bind(lib: Any = None, ffi: Any = None) -> Tuple[Any, Any]:
    return (_ffi.lib if lib is None else lib), (_ffi.ffi if ffi is None else ffi)


def _message(lib: Any, ffi: Any) -> str:
    return ffi.string(lib.dlpackshim_last_error()).decode("utf-8", "replace")


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


def is_host_accessible(device_type: int) -> bool:
    """True when the CPU reads memory of `device_type` directly (pinned and
    managed memory too): the C library's rule, for any int (device types are
    int32 values: no other is)."""
    return -2**31 <= device_type < 2**31 and _host_accessible(device_type) == 1


def default_stream(device_type: int, *, lib: Any = None, ffi: Any = None) -> int:
    """The stream ``stream=None`` stands for on `device_type`, as the C library
    says (``dlpackshim_stream_check`` without a stream): 1 for the CUDA
    family, 0 for ROCm, -1 for devices without streams."""
    lib, ffi = _bind(lib, ffi)
    out = ffi.new("int64_t *")
    return int(out[0]) if lib.dlpackshim_stream_check(device_type, 0, 0, out) == _OK else -1


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
        return default_stream(device_type, lib=lib, ffi=ffi)
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


def synchronize(device_type: int, device_id: int, stream: int, *, lib: Any = None,
                ffi: Any = None) -> None:
    """Block the host until `stream` (a runtime handle as an int) has finished its work."""
    lib, ffi = _bind(lib, ffi)
    _check(lib.dlpackshim_stream_synchronize(device_type, device_id, _stream_int(stream)),
           lib, ffi)


def copy(dst_tensor_addr: int, src_tensor_addr: int, stream: int = 1, *, lib: Any = None,
         ffi: Any = None) -> None:
    """``dlpackshim_copy`` between two DLTensors (addresses as ints), either
    on a GPU, queued on `stream` (waited for when host memory is involved)."""
    lib, ffi = _bind(lib, ffi)
    dst = ffi.cast("const DLTensor *", dst_tensor_addr)
    src = ffi.cast("const DLTensor *", src_tensor_addr)
    _check(lib.dlpackshim_copy(dst, src, _stream_int(stream)), lib, ffi)


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


def alloc(device_type: int, device_id: int, nbytes: int, *, lib: Any = None,
          ffi: Any = None) -> int:
    """Device memory (``cuMemAlloc`` / ``hipMalloc``) as an int address; free with :func:`free`."""
    lib, ffi = _bind(lib, ffi)
    out = ffi.new("void **")
    _check(lib.dlpackshim_gpu_alloc(device_type, device_id, nbytes, out), lib, ffi)
    return int(ffi.cast("intptr_t", out[0]))


def free(device_type: int, device_id: int, ptr: int, *, lib: Any = None,
         ffi: Any = None) -> None:
    """Free memory from :func:`alloc` (0 is fine)."""
    lib, ffi = _bind(lib, ffi)
    _check(lib.dlpackshim_gpu_free(device_type, device_id, ffi.cast("void *", ptr)), lib, ffi)


def set_device(device_type: int, device_id: int, *, lib: Any = None, ffi: Any = None) -> int:
    """Make (`device_type`, `device_id`) this thread's current device; returns
    the token :func:`restore_device` takes to undo it."""
    lib, ffi = _bind(lib, ffi)
    out = ffi.new("int64_t *")
    _check(lib.dlpackshim_gpu_set_device(device_type, device_id, out), lib, ffi)
    return int(out[0])


def restore_device(device_type: int, token: int, *, lib: Any = None, ffi: Any = None) -> None:
    """Undo :func:`set_device` (`token` as it returned it)."""
    lib, ffi = _bind(lib, ffi)
    _check(lib.dlpackshim_gpu_restore_device(device_type, token), lib, ffi)


def device_count(device_type: int, *, lib: Any = None, ffi: Any = None) -> int:
    """How many devices the runtime of `device_type`'s family sees; 0 when it
    is missing (loads the runtime: once per process, in C)."""
    lib, ffi = _bind(lib, ffi)
    out = ffi.new("int *")
    ok = lib.dlpackshim_gpu_runtime_info(device_type, ffi.NULL, ffi.NULL, out) == _OK
    return int(out[0]) if ok else 0


def _runtime(device_type: int, lib: Any, ffi: Any) -> Dict[str, Any]:
    driver = ffi.new("int *")
    runtime = ffi.new("int *")
    count = ffi.new("int *")
    status = lib.dlpackshim_gpu_runtime_info(device_type, driver, runtime, count)
    if status != _OK:
        return {"available": False, "error": _message(lib, ffi)}
    path = ffi.new("const char **")
    lib.dlpackshim_gpu_library(device_type, path)  # loaded above: it cannot fail now
    info: Dict[str, Any] = {
        "available": True,
        "library": ffi.string(path[0]).decode("utf-8", "replace") if path[0] != ffi.NULL else None,
        "driver_version": int(driver[0]),
        "runtime_version": int(runtime[0]) or None,
        "devices": [],
    }
    name = ffi.new("char[256]")
    for i in range(int(count[0])):
        if lib.dlpackshim_gpu_device_name(device_type, i, name, 256) == _OK:
            info["devices"].append(ffi.string(name).decode("utf-8", "replace"))
        else:
            info["devices"].append(f"<{_message(lib, ffi)}>")
    return info


def runtime_info(*, lib: Any = None, ffi: Any = None) -> Dict[str, Dict[str, Any]]:
    """What ``python -m dlpackshim info`` reports about GPUs: for ``"cuda"``
    and ``"rocm"``, ``available``, and either ``library``, ``driver_version``,
    ``runtime_version`` (ROCm; None for CUDA) and ``devices`` (names), or
    ``error`` (e.g. "CUDA driver not found: tried libcuda.so.1 (...)")."""
    lib, ffi = _bind(lib, ffi)
    return {"cuda": _runtime(CUDA, lib, ffi), "rocm": _runtime(ROCM, lib, ffi)}


def format_version(version: Optional[int], rocm: bool = False) -> str:
    """CUDA 12040 -> "12.4"; HIP 60242132 -> "6.2.42132"."""
    if not version:
        return "n/a"
    if rocm:
        return f"{version // 10000000}.{version // 100000 % 100}.{version % 100000}"
    return f"{version // 1000}.{version % 1000 // 10}"
