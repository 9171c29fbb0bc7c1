"""Device rules in one place: host access, stream values, GPU hooks.

The work is done by the C library (csrc/gpu/) through the
thin wrappers of :mod:`dlpackshim._gpu`; this module holds the package's
policy on top of them: which device types have streams, what a Tensor's
stream is by default, when the host must wait, and how a
``__cuda_array_interface__`` pointer finds its device.

Stream values are the array API standard's (``__dlpack__(stream=...)``):

* CUDA, CUDA pinned (kDLCUDAHost) and managed memory: None = 1 (the legacy
  default stream), 2 = the per-thread default stream, -1 = no
  synchronisation, 0 is disallowed, anything else is a ``cudaStream_t``.
* ROCm and ROCm pinned memory: None = 0 (the default stream), -1 = no
  synchronisation, 1 and 2 are disallowed, anything else a ``hipStream_t``.
* CPU: None only (dlpackshim also accepts -1, "no synchronisation").

Nothing here loads a GPU runtime for CPU data.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from . import _gpu
from ._types import DeviceType

CPU = int(DeviceType.kDLCPU)
CUDA = int(DeviceType.kDLCUDA)
CUDA_HOST = int(DeviceType.kDLCUDAHost)
ROCM = int(DeviceType.kDLROCM)
ROCM_HOST = int(DeviceType.kDLROCMHost)
CUDA_MANAGED = int(DeviceType.kDLCUDAManaged)

#: Device types whose memory the CPU reads directly (pinned and managed host
#: memory: the standard lets such data be exported as kDLCPU).
HOST_ACCESSIBLE = frozenset({CPU, CUDA_HOST, ROCM_HOST, CUDA_MANAGED})
#: Device types whose data is ordered by CUDA streams / by HIP streams.
CUDA_FAMILY = frozenset({CUDA, CUDA_HOST, CUDA_MANAGED})
ROCM_FAMILY = frozenset({ROCM, ROCM_HOST})
#: Memory only the GPU reads: moving it to the host needs a copy.
ON_DEVICE = frozenset({CUDA, ROCM})


def is_host_accessible(device_type: int) -> bool:
    """True when the CPU can read memory of `device_type` directly."""
    return device_type in HOST_ACCESSIBLE


def has_streams(device_type: int) -> bool:
    """True for the device types whose work is ordered by CUDA or HIP streams."""
    return device_type in CUDA_FAMILY or device_type in ROCM_FAMILY


def is_on_device(device_type: int) -> bool:
    """True for GPU memory the CPU cannot read (kDLCUDA, kDLROCM)."""
    return device_type in ON_DEVICE


def default_stream(device_type: int) -> int:
    """The stream data of `device_type` is taken to be ready on by default.

    1 (CUDA's legacy default stream) for the CUDA family, 0 (the default
    stream) for ROCm, -1 ("none") for devices without streams. These are
    also what ``stream=None`` means in ``__dlpack__``.
    """
    if device_type in CUDA_FAMILY:
        return 1
    if device_type in ROCM_FAMILY:
        return 0
    return -1


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
        return default_stream(device_type)  # no C call: the fast answer
    if stream == -1 and type(stream) is int:
        return -1
    return _gpu.check_stream(int(device_type), stream)


_COUNT: Dict[int, int] = {}


def device_count(device_type: int) -> int:
    """How many devices the GPU runtime of `device_type`'s family sees; 0
    when it is missing (asked once per process; loads the runtime)."""
    family = CUDA if device_type in CUDA_FAMILY else ROCM
    count = _COUNT.get(family)
    if count is None:
        from ._ffi import NULL, ffi, lib

        out = ffi.new("int *")
        count = (int(out[0]) if lib.dlpackshim_gpu_runtime_info(family, NULL, NULL, out) == 0
                 else 0)
        _COUNT[family] = count
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
