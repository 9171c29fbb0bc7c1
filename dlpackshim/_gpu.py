"""Devices and streams, as the C library's rules say (csrc/gpu/).

The C side does the work: it opens the CUDA driver (``libcuda.so.1``, or
``$DLPACKSHIM_LIBCUDA``) or the HIP runtime (``libamdhip64.so``, or
``$DLPACKSHIM_LIBHIP``) on first use, checks stream values by the array API
standard, makes a consumer stream wait on an event recorded on the producer
stream, and copies between host and device. This module holds what the
package's Python asks of it: the device types, which memory the host reads,
a device's default stream, and what ``python -m dlpackshim info`` reports.
Nothing here loads a GPU runtime until a GPU function is called.
"""

from __future__ import annotations

from . import _ffi

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

# The C library's host-accessible set (csrc/core/validate.c): asked, never copied.
_host_accessible = _ffi.host_accessible


def _message(lib: Any, ffi: Any) -> str:
    return ffi.string(lib.dlpackshim_last_error()).decode("utf-8", "replace")


def is_host_accessible(device_type: int) -> bool:
    """True when the CPU reads memory of `device_type` directly (pinned and
    managed memory too): the C library's rule, for any int (device types are
    int32 values: no other is)."""
    return -2**31 <= device_type < 2**31 and _host_accessible(device_type) == 1


def default_stream(device_type: int) -> int:
    """The stream ``stream=None`` stands for on `device_type`, as the C library
    says (``dlpackshim_stream_check`` without a stream): 1 for the CUDA
    family, 0 for ROCm, -1 for devices without streams."""
    out = _ffi.ffi.new("int64_t *")
    return int(out[0]) if _ffi.lib.dlpackshim_stream_check(device_type, 0, 0, out) == _OK else -1


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


def runtime_info() -> Dict[str, Dict[str, Any]]:
    """What ``python -m dlpackshim info`` reports about GPUs: for ``"cuda"``
    and ``"rocm"``, ``available``, and either ``library``, ``driver_version``,
    ``runtime_version`` (ROCm; None for CUDA) and ``devices`` (names), or
    ``error`` (e.g. "CUDA driver not found: tried libcuda.so.1 (...)")."""
    return {"cuda": _runtime(CUDA, _ffi.lib, _ffi.ffi), "rocm": _runtime(ROCM, _ffi.lib, _ffi.ffi)}


def format_version(version: Optional[int], rocm: bool = False) -> str:
    """CUDA 12040 -> "12.4"; HIP 60242132 -> "6.2.42132"."""
    if not version:
        return "n/a"
    if rocm:
        return f"{version // 10000000}.{version // 100000 % 100}.{version % 100000}"
    return f"{version // 1000}.{version % 1000 // 10}"
