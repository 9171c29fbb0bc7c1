"""The package's device policy on top of the C library's device rules.

The rules live in C, once (csrc/gpu/streams.c: the array API standard's
stream values and what ``stream=None`` means per device type;
csrc/core/validate.c: which memory the CPU reads directly), and are reached
through the thin wrappers of :mod:`dlpackshim._gpu`; the tables below are
the C library's answers, asked once at import for every device type
dlpack.h names. This module adds only the package's policy: what a Tensor's
stream is by default, when the host must wait, and how a
``__cuda_array_interface__`` pointer finds its device.

Nothing here loads a GPU runtime for CPU data.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from . import _gpu
from ._ffi import NULL, ffi, lib
from ._gpu import CPU, CUDA, CUDA_MANAGED, ROCM
from ._types import DeviceType

_TYPES = tuple(int(t) for t in DeviceType)
#: Device types whose memory the CPU reads directly (pinned and managed host
#: memory: the standard lets such data be exported as kDLCPU).
HOST_ACCESSIBLE = frozenset(t for t in _TYPES if _gpu.host_accessible(t))
#: What ``stream=None`` stands for, per device type (-1: no streams).
_DEFAULT_STREAM = {t: _gpu.default_stream(t) for t in _TYPES}
#: Device types whose data is ordered by CUDA streams / by HIP streams: the
#: standard's default stream names the runtime (CUDA's legacy 1, ROCm's 0).
CUDA_FAMILY = frozenset(t for t, s in _DEFAULT_STREAM.items() if s == 1)
ROCM_FAMILY = frozenset(t for t, s in _DEFAULT_STREAM.items() if s == 0)
#: Memory only the GPU reads: moving it to the host needs a copy.
ON_DEVICE = (CUDA_FAMILY | ROCM_FAMILY) - HOST_ACCESSIBLE


def is_host_accessible(device_type: int) -> bool:
    """True when the CPU can read memory of `device_type` directly."""
    return device_type in HOST_ACCESSIBLE


def has_streams(device_type: int) -> bool:
    """True for the device types whose work is ordered by CUDA or HIP streams."""
    return _DEFAULT_STREAM.get(device_type, -1) != -1


def is_on_device(device_type: int) -> bool:
    """True for GPU memory the CPU cannot read (kDLCUDA, kDLROCM)."""
    return device_type in ON_DEVICE


def default_stream(device_type: int) -> int:
    """The stream data of `device_type` is taken to be ready on by default.

    1 (CUDA's legacy default stream) for the CUDA family, 0 (the default
    stream) for ROCm, -1 ("none") for devices without streams. These are
    also what ``stream=None`` means in ``__dlpack__`` (the C library's
    answer, asked once per device type at import).
    """
    return _DEFAULT_STREAM.get(device_type, -1)


def check_stream(device_type: int, stream: Any) -> int:
    """Validate a ``__dlpack__(stream=...)`` value for `device_type`.

    Returns
    -------
    int
        The value to use: None becomes 1 (CUDA), 0 (ROCm) or -1 (CPU); -1
        means "do not synchronise".

    Raises
    ------
    TypeError
        `stream` is neither None nor an int.
    ValueError
        A value the standard does not allow for the device: 0 for CUDA, 1
        or 2 for ROCm, anything but None (or -1) for CPU. (NumPy raises
        RuntimeError for a CPU stream and PyTorch AssertionError; the
        standard's wording is an argument error, hence ValueError.)
    BufferError
        A stream for a device type whose streams dlpackshim cannot handle.
    """
    if stream is None:
        return default_stream(device_type)  # the C library's answer, kept
    return _gpu.check_stream(int(device_type), stream)


_COUNT: Dict[int, int] = {}
if hasattr(os, "register_at_fork"):
    # A GPU runtime does not survive fork(): the C library marks it missing in
    # the child (csrc/gpu/loader.c), so the child asks again.
    os.register_at_fork(after_in_child=_COUNT.clear)


def device_count(device_type: int) -> int:
    """How many devices the GPU runtime of `device_type`'s family sees; 0
    when it is missing or `device_type` has none (asked once per process and
    device type; loads the runtime)."""
    count = _COUNT.get(device_type)
    if count is None:
        out = ffi.new("int *")
        count = (int(out[0])
                 if lib.dlpackshim_gpu_runtime_info(device_type, NULL, NULL, out) == 0 else 0)
        if has_streams(device_type):  # a bounded set of keys
            _COUNT[device_type] = count
    return count


def runtime_present(device_type: int) -> bool:
    """True when the GPU runtime of `device_type`'s family loads and sees a
    device (asked once per process; loads the runtime).

    Without one, no GPU can have work pending on the memory: the host has
    nothing to wait for.
    """
    return device_count(device_type) > 0


def export_sync(device_type: int, device_id: int, producer_stream: int, stream: Any) -> None:
    """Make the consumer's `stream` wait for the data, which is ready on `producer_stream`.

    Records an event on the producer stream and makes the consumer stream
    wait on it (``cuStreamWaitEvent`` / ``hipStreamWaitEvent``): the host
    does not block. -1, CPU data and the same stream on both sides do
    nothing (and load no runtime).

    Raises
    ------
    ValueError
        `stream` is not allowed for the device.
    BufferError
        The GPU runtime is missing or a driver call failed; the message has
        the driver's error string.
    """
    consumer = check_stream(device_type, stream)
    if consumer == -1 or consumer == producer_stream or not has_streams(device_type):
        return
    _gpu.sync(int(device_type), int(device_id), producer_stream, consumer)


def host_synchronize(device_type: int, device_id: int, stream: int) -> None:
    """Block the host until `stream` is done, before the CPU reads GPU-written memory.

    For pinned and managed memory handed to the CPU (``__array_interface__``,
    ``dl_device=(kDLCPU, 0)``, copies made on the host). Does nothing for
    devices without streams, for ``stream`` -1, and when the runtime is not
    present (then no GPU can have written the memory).

    Raises
    ------
    BufferError
        A driver call failed.
    """
    if stream == -1 or not has_streams(device_type) or not runtime_present(device_type):
        return
    _gpu.synchronize(int(device_type), int(device_id), stream)


def copy(dst_addr: int, src_addr: int, stream: int) -> None:
    """Copy between two DLTensors (addresses), either of them on a GPU, on `stream`.

    Returns once the stream is synchronised when host memory is involved;
    a GPU-to-GPU copy is only queued.

    Raises
    ------
    BufferError
        The runtime is missing, a driver call failed, or the copy is one the
        C library does not do (two different GPUs).
    """
    _gpu.copy(dst_addr, src_addr, stream)


# ---- __cuda_array_interface__ imports --------------------------------------


def cuda_pointer_device(ptr: int) -> Tuple[int, int]:
    """The DLPack device of ``__cuda_array_interface__`` memory at `ptr`.

    The interface does not carry the device; the consumer asks the driver,
    as CuPy and Numba do. CuPy and PyTorch on ROCm expose the interface too,
    so the runtime asked is the one that has devices: the CUDA driver
    (``cuPointerGetAttribute``) when it sees a GPU, else the HIP runtime
    (``hipPointerGetAttribute``). Device memory gives ``(kDLCUDA | kDLROCM,
    ordinal)``, pinned host memory ``(kDLCUDAHost | kDLROCMHost, 0)``, CUDA
    managed memory ``(kDLCUDAManaged, ordinal)``.

    A NULL pointer (empty arrays: the interface sends 0) and a process
    without a GPU runtime give ``(kDLCUDA, 0)``: nothing can be asked, and no
    GPU can use the memory in this process anyway.

    Raises
    ------
    BufferError
        The runtime does not know the memory (not GPU memory), or the call
        failed.
    """
    if ptr == 0:
        return (CUDA, 0)
    if runtime_present(CUDA):
        runtime, name = CUDA, "CUDA"
    elif runtime_present(ROCM):
        runtime, name = ROCM, "ROCm"
    else:
        return (CUDA, 0)
    dev = _gpu.pointer_device(ptr, runtime)
    if dev[0] == CPU:
        raise BufferError(
            f"__cuda_array_interface__: 0x{ptr:x} is not {name} memory (the {name} runtime "
            "does not know it)"
        )
    return dev


def cuda_interface_sync(iface_stream: Any, device: Tuple[int, int], consumer: int) -> None:
    """Honour a ``__cuda_array_interface__`` v3 ``stream`` before the data is used.

    ``None`` means the data is ready. Otherwise the consumer's stream
    (`consumer`, already checked: -1 means "no synchronisation") is made to
    wait for the work queued on the producer's stream, with an event; CuPy
    blocks the host (``cudaStreamSynchronize``) instead, which the interface
    allows too.

    Raises
    ------
    ValueError
        ``0`` (disallowed by the interface: ambiguous), or not an int.
    BufferError
        The synchronisation failed (no CUDA driver, a driver error); the
        message says which streams and why.
    """
    if iface_stream is None:
        return
    if not isinstance(iface_stream, int) or isinstance(iface_stream, bool):
        raise ValueError(
            f"__cuda_array_interface__ stream must be None or an int, not {iface_stream!r}"
        )
    if iface_stream == 0:
        raise ValueError(
            "__cuda_array_interface__ stream 0 is disallowed (ambiguous between the legacy "
            "and per-thread default streams)"
        )
    if device[0] in ROCM_FAMILY and iface_stream in (1, 2):
        # The interface's names for the default stream; HIP's is 0.
        iface_stream = 0
    if consumer == -1 or consumer == iface_stream:
        return
    try:
        _gpu.sync(int(device[0]), int(device[1]), iface_stream, consumer)
    except BufferError as exc:
        raise BufferError(
            f"__cuda_array_interface__: cannot make stream {consumer} wait for the producer's "
            f"stream {iface_stream}: {exc}"
        ) from None


def stream_or_none(device_type: int, stream: Optional[int], device_id: int = 0) -> Optional[int]:
    """What a Tensor records as its stream: None for the device's default
    (and for -1, "the consumer handles it"), else the stream.

    CUDA's per-thread default stream (2) is a different stream in every
    thread, so a Tensor cannot carry it: the data, ready on the importing
    thread's per-thread stream, is made ready on the legacy default stream
    instead (an event recorded on the one, waited on by the other; the host
    does not block), and the Tensor records the default (None).

    Raises
    ------
    BufferError
        That wait failed (a driver error).
    """
    if stream is None or stream == -1 or stream == default_stream(device_type):
        return None
    if stream == 2 and device_type in CUDA_FAMILY:
        _gpu.sync(int(device_type), int(device_id), 2, 1)
        return None
    return stream


class producer_device:
    """Context manager: the producer's GPU made the current device around its
    ``__dlpack__`` (CuPy does the same: PyTorch refuses to export a tensor of
    another device index than the current one, and takes the current stream
    of the current device). Does nothing for other devices, when the runtime
    is absent (the producer then fails on its own terms), and with a single
    GPU (which is always the current device)."""

    __slots__ = ("_type", "_token")

    def __init__(self, device: Tuple[int, int]) -> None:
        self._type = int(device[0])
        self._token = -1
        if self._type in ON_DEVICE and device_count(self._type) > 1:
            self._token = _gpu.set_device(self._type, int(device[1]))

    def __enter__(self) -> "producer_device":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._token >= 0:
            token, self._token = self._token, -1
            _gpu.restore_device(self._type, token)
