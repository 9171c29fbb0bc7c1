"""dlpackshim.Tensor: a DLPack tensor held by Python, and its export path.

The Tensor's state lives in its C base (csrc/python/pytensor.c): ``_owner``, the
*holder* that keeps the memory alive (a capsule the library consumed, whose
record holds a snapshot of the tensor taken and validated at import; a
buffer's held export, ``_BufferExport``, with the same record inside; or a
``(holder, keep)`` tuple when a Python object keeps the memory valid too),
``_addr`` (the snapshot's address), ``_flags``, ``_stream``. Exports
reference the holder, not the Tensor, so closing a Tensor never invalidates
a capsule or a consumer's array made from it.

Lifetime rule: code that reads the data or the DLTensor first takes the
holder with :meth:`Tensor._pin` into a local variable and keeps it for as
long as it uses the address. ``close()`` only drops the Tensor's own
reference, so another thread closing the Tensor (ABI-mode cffi releases the
GIL during every C call) never frees memory a call is using.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Optional, Tuple

from . import _device, _gpu
from ._base import TensorBase, c_class
from ._errors import _check
from ._ffi import (
    FLAG_IS_COPIED,
    FLAG_IS_SUBBYTE_TYPE_PADDED,
    FLAG_READ_ONLY,
    NULL,
    builtins,
    capsule_export,
    capsule_export_copy,
    ffi,
    lib,
)
from ._types import Device, DType, _dtype, as_device
from ._types import _device as _make_device

_CLOSED = "operation on a closed dlpackshim.Tensor"
_UINT32_MAX = 0xFFFFFFFF  # DLPackVersion's major and minor are uint32
_CPU0 = Device(_device.CPU, 0)

# Array-interface typestr kind per DLPack code (int, uint, float, complex,
# bool), with the element sizes in bits that NumPy can read for it (no
# complex32, no float128 guesses).
_TYPESTR_KIND = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_TYPESTR_BITS = {"i": (8, 16, 32, 64), "u": (8, 16, 32, 64), "f": (16, 32, 64),
                 "c": (64, 128), "b": (8,)}
_ORDER = "<" if sys.byteorder == "little" else ">"


@c_class
class Tensor(TensorBase):
    """A DLPack tensor: a view of memory owned elsewhere, with its lifetime.

    Made by :func:`dlpackshim.from_dlpack` or :func:`dlpackshim.from_pointer`
    (not by calling the class). A Tensor is itself a DLPack producer
    (``__dlpack__``, ``__dlpack_device__``) and, for host memory, exposes
    ``__array_interface__``; for CUDA memory ``__cuda_array_interface__``.

    The memory stays alive while the Tensor, or any capsule or consumer array
    made from it through ``__dlpack__``, lives. :meth:`close` drops the
    Tensor's own hold at once; using the Tensor afterwards raises ValueError.
    Every method is safe against a :meth:`close` from another thread: it
    completes with the data it started with, or raises ValueError.
    """

    __slots__ = ()

    # The fields (_owner, _addr, _flags, ...), weak references, __dlpack__
    # and close are the C base's: _base.pyi types them. The class itself is
    # a C type with these methods copied onto it (c_class).

    def __new__(cls, *args: Any, **kwargs: Any) -> "Tensor":
        raise TypeError(
            "dlpackshim.Tensor is not built directly; use dlpackshim.from_dlpack() "
            "or dlpackshim.from_pointer()"
        )

    # ---- the one way to reach the data -------------------------------------------

    def _pin(self) -> Tuple[Any, int]:
        """``(holder, address of the DLTensor)``: keep `holder` in a local
        variable for as long as the address is used.

        Raises
        ------
        ValueError
            The Tensor is closed.
        """
        holder = self._owner  # one read: a close() after it cannot free the memory
        if holder is None:
            raise ValueError(_CLOSED)
        return holder, self._addr

    # ---- lazily read metadata -------------------------------------------------

    def _get_meta(self) -> Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]:
        meta = self._meta
        if meta is None:
            holder, addr = self._pin()
            meta = self._meta = _read_meta(addr)
            del holder
        elif self._owner is None:
            raise ValueError(_CLOSED)
        return meta

    # ---- properties -----------------------------------------------------------

    @property
    def shape(self) -> Tuple[int, ...]:
        """Extents, one per dimension (``()`` for a 0-d tensor)."""
        return self._get_meta()[0]

    @property
    def strides(self) -> Tuple[int, ...]:
        """Strides in elements (not bytes), as DLPack counts them.

        A producer older than DLPack 1.2 may send no strides: they are then
        the compact row-major ones.
        """
        return self._get_meta()[1]

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._get_meta()[0])

    @property
    def size(self) -> int:
        """Number of elements (1 for a 0-d tensor)."""
        n = 1
        for extent in self._get_meta()[0]:
            n *= extent
        return n

    @property
    def nbytes(self) -> int:
        """Bytes the elements take when stored compactly (packed sub-byte
        types round up to whole bytes)."""
        holder, addr = self._pin()
        return _nbytes(addr, self._flags)

    @property
    def dtype(self) -> DType:
        """The element type, e.g. ``DType('float32')`` (equal to ``"float32"``)."""
        return self._get_meta()[2]

    @property
    def device(self) -> Device:
        """The device, equal to its ``(device_type, device_id)`` tuple."""
        return self._get_meta()[3]

    @property
    def data_ptr(self) -> int:
        """Address of the first element (``data + byte_offset``); may be 0 when empty."""
        return self._get_meta()[4]

    @property
    def readonly(self) -> bool:
        """True when dlpackshim must not grant write access to the data.

        That is when the producer marked it READ_ONLY, and when it came as
        a legacy (pre-1.0) capsule, which carries no flags: its writability
        is unknown, so it is taken as read-only (as NumPy >= 2.3 does).
        Such a Tensor is re-exported through versioned capsules with
        READ_ONLY set, and still through the legacy ABI it came by.
        """
        if self._owner is None:
            raise ValueError(_CLOSED)
        return bool(self._flags & FLAG_READ_ONLY)

    @property
    def is_copied(self) -> bool:
        """True when the producer set IS_COPIED: the data is a copy no one else views."""
        if self._owner is None:
            raise ValueError(_CLOSED)
        return bool(self._flags & FLAG_IS_COPIED)

    @property
    def dlpack_version(self) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the imported DLPack tensor; None for a legacy capsule."""
        if self._owner is None:
            raise ValueError(_CLOSED)
        major = self._major
        return (major, self._minor) if major else None

    @property
    def is_contiguous(self) -> bool:
        """True when the data is compact row-major (C order), NumPy's way.

        The same as :attr:`c_contiguous`.
        """
        return self.c_contiguous

    @property
    def c_contiguous(self) -> bool:
        """True when the data is compact row-major (C order), as NumPy's
        ``flags.c_contiguous``: strides of extent-1 axes are ignored, and an
        empty or 0-d tensor is both C- and F-contiguous."""
        return bool(self._layout() & lib.DLPACKSHIM_LAYOUT_C)

    @property
    def f_contiguous(self) -> bool:
        """True when the data is compact column-major (Fortran order), as
        NumPy's ``flags.f_contiguous`` (the rules of :attr:`c_contiguous`)."""
        return bool(self._layout() & lib.DLPACKSHIM_LAYOUT_F)

    def _layout(self) -> int:
        """The dlpackshim_layout bits of the tensor (dlpackshim_tensor_layout)."""
        holder, addr = self._pin()
        return _layout_of(addr)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._owner is None

    # ---- the producer side ----------------------------------------------------

    # __dlpack__ is the C base's (csrc/python/pytensor.c): the plain exchange in one
    # C call; every other case lands in _dlpack_slow, documented here.
    def _dlpack_slow(self, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
        """The cases of ``__dlpack__`` the C base leaves to Python (see
        ``_base._DLPACK_DOC``: devices, copies, streams, argument errors)."""
        versioned = _versioned(max_version)
        if copy is not None and not isinstance(copy, bool):
            raise TypeError(f"copy must be True, False or None, not {copy!r}")
        holder, src = self._pin()  # held to the end: exports reference it, C reads src
        flags = self._flags
        own = self.device
        producer = self._stream_handle()
        target = own if dl_device is None else as_device(dl_device, "dl_device")
        if target != own:
            if target != _CPU0 or not (_device.is_host_accessible(own[0])
                                       or _device.is_on_device(own[0])):
                raise BufferError(
                    f"cannot export a tensor on {own!r} to {target!r}: dlpackshim moves data "
                    "between a GPU and the host (kDLCPU, 0) only"
                )
            # The consumer is on the CPU: only None (or -1) as its stream.
            _device.check_stream(_device.CPU, stream)
            if _device.is_on_device(own[0]):
                if copy is False:
                    raise BufferError(
                        f"copy=False, but exporting a tensor on {own!r} to {target!r} needs a "
                        "copy to the host"
                    )
                host = _host_copy(self)  # synchronises the stream: the bytes are there
                return _export_whole(host, versioned)
            # Pinned or managed memory: the same bytes, labelled (kDLCPU, 0),
            # once the GPU work on them is done.
            if stream != -1:
                _device.host_synchronize(own[0], own[1], producer)
            if copy:
                return capsule_export_copy(src, flags & FLAG_IS_SUBBYTE_TYPE_PADDED, versioned)
            view = ffi.new("DLTensor *", ffi.cast("DLTensor *", src)[0])  # alive for the call
            view.device.device_type = _device.CPU
            view.device.device_id = 0
            return capsule_export(id(holder), int(ffi.cast("intptr_t", view)),
                                  flags & ~FLAG_IS_COPIED, versioned)
        if copy and _device.is_host_accessible(own[0]):
            _device.check_stream(own[0], stream)
            if stream != -1:  # the host reads the data: the GPU must be done with it
                _device.host_synchronize(own[0], own[1], producer)
            return capsule_export_copy(src, flags & FLAG_IS_SUBBYTE_TYPE_PADDED, versioned)
        if copy:
            _device.check_stream(own[0], stream)  # before any work
            c = _clone(self)
            # A GPU copy was queued on our stream: the consumer waits for it.
            _device.export_sync(own[0], own[1], producer, stream)
            return _export_whole(c, versioned)
        _device.export_sync(own[0], own[1], producer, stream)
        return capsule_export(id(holder), src, flags & ~FLAG_IS_COPIED, versioned)

    def _stream_handle(self, device_type: Optional[int] = None) -> int:
        """The stream the data is ready on, as the runtime's handle (-1: none).
        `device_type`: the Tensor's, from metadata the caller read already."""
        s = self._stream
        if s is not None:
            return s
        return _device.default_stream(self.device[0] if device_type is None else device_type)

    @property
    def stream(self) -> Optional[int]:
        """The stream the data is ready on, as the runtime's handle (an int).

        CUDA data: 1 (the legacy default stream) unless the Tensor was
        imported with ``from_dlpack(x, stream=s)``, which makes the producer
        order its work before `s`: then `s`. ROCm: 0 (the default stream) or
        that `s`. None for devices without streams (CPU). ``__dlpack__``
        makes a consumer's stream wait on this one, and copies run on it.
        """
        s = self._stream_handle()
        return None if s == -1 else s

    def __dlpack_device__(self) -> Device:
        """``(device_type, device_id)`` of the data (array API standard).

        Returns
        -------
        Device
            A tuple subclass: ``(DeviceType, int)``.
        """
        return self._get_meta()[3]

    # ---- other interfaces -----------------------------------------------------

    def _interface(self, cuda: bool) -> Dict[str, Any]:
        """The dict of ``__array_interface__`` (`cuda` False) or
        ``__cuda_array_interface__`` (True); see those.

        The consumer's array references this Tensor, not the holder: the
        holder is pinned before anything is read and kept in ``_pinned``, so
        the memory stays as long as the Tensor lives, closed or not (a close()
        from another thread meanwhile changes nothing)."""
        holder, addr = self._pin()
        meta = self._meta
        if meta is None:  # not read yet, or closed since the pin: the pinned snapshot
            meta = self._meta = _read_meta(addr)
        shape, strides, dtype, device, data = meta
        stream = self._stream_handle(device[0])
        if cuda:
            if device[0] not in (_device.CUDA, _device.CUDA_MANAGED):
                raise AttributeError(
                    f"__cuda_array_interface__: the data is on {device!r}, not a CUDA device"
                )
        elif not _device.is_host_accessible(device[0]):
            raise AttributeError(
                f"__array_interface__: the data is on {device!r}, not host-accessible"
            )
        kind = _TYPESTR_KIND.get(int(dtype.code))
        if kind is None or dtype.lanes != 1 or dtype.bits not in _TYPESTR_BITS[kind]:
            raise AttributeError(
                f"a Tensor of dtype {dtype.name} has no array interface typestr "
                "(use __dlpack__ instead)"
            )
        if not cuda and device[0] != _device.CPU:
            _device.host_synchronize(device[0], device[1], stream)
        readonly = bool(self._flags & FLAG_READ_ONLY)
        itemsize = dtype.bits // 8
        typestr = ("|" if itemsize == 1 else _ORDER) + kind + str(itemsize)
        contiguous = _layout_of(addr) & lib.DLPACKSHIM_LAYOUT_C
        iface: Dict[str, Any] = {
            "shape": shape,
            "typestr": typestr,
            "descr": [("", typestr)],
            "data": (data, readonly),
            "strides": None if contiguous else tuple(s * itemsize for s in strides),
            "version": 3,
        }
        if cuda:
            # v3 "stream": where the consumer must synchronise - the stream
            # the data is ready on (1, the legacy default stream, unless the
            # Tensor was imported on another). Never 0 (disallowed), and
            # never None: dlpackshim cannot tell that no work is pending.
            iface["stream"] = stream
            iface["mask"] = None
            if 0 in shape:
                iface["data"] = (0, readonly)  # the interface's rule for empty arrays
        # From now on close() must not release the memory (see close()).
        self._pinned = holder
        return iface

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """NumPy's array interface (v3), for host-accessible memory only.

        CPU memory, and pinned or managed GPU memory (kDLCUDAHost,
        kDLCUDAManaged, kDLROCMHost): for those the host first waits for the
        work queued on the Tensor's stream (``cuStreamSynchronize``; nothing
        when no GPU runtime is present), as the interface has no streams.

        Raises
        ------
        AttributeError
            The data is not host-accessible, or its dtype has no typestr
            (bfloat16, float8, sub-byte, vector lanes): ``hasattr`` says False.
        BufferError
            Waiting for the stream failed (a driver error).
        ValueError
            The Tensor is closed.
        """
        return self._interface(cuda=False)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Numba's CUDA array interface (v3), for CUDA device and managed memory.

        ``shape``, ``typestr``, ``descr``, ``data`` (``(pointer, readonly)``;
        0 for an empty tensor), ``strides`` (bytes; None when C-contiguous),
        ``mask`` (None), ``version`` 3 and ``stream``: the stream the data is
        ready on (:attr:`stream`: 1, the legacy default stream, unless the
        Tensor was imported on another stream), on which the consumer must
        synchronise before use, as v3 asks. The consumer's array keeps the
        Tensor alive.

        Raises
        ------
        AttributeError
            The data is not CUDA memory, or its dtype has no typestr.
        ValueError
            The Tensor is closed.
        """
        return self._interface(cuda=True)

    def tobytes(self) -> bytes:
        """A C-order (row-major) copy of the elements as bytes.

        Returns
        -------
        bytes
            ``nbytes`` bytes; packed sub-byte types as stored.

        GPU memory (kDLCUDA, kDLROCM) is copied to the host first
        (``dlpackshim_copy`` on the Tensor's stream, waited for);
        pinned and managed memory is read once the host waited for that
        stream.

        Raises
        ------
        BufferError
            The data is on a device dlpackshim cannot read, or a GPU
            runtime is missing or failed.
        ValueError
            The Tensor is closed.
        """
        holder, addr = self._pin()  # the data stays valid to the end, whoever closes
        dev = self.device
        if _device.is_on_device(dev[0]):
            host = _host_copy(self)
            try:
                return host.tobytes()
            finally:
                host.close()
        if not _device.is_host_accessible(dev[0]):
            raise BufferError(f"tobytes: the data is on {dev!r}, not host-accessible")
        if dev[0] != _device.CPU:
            _device.host_synchronize(dev[0], dev[1], self._stream_handle())
        nbytes = self.nbytes
        if nbytes == 0:
            return b""
        if self.is_contiguous:
            return ffi.buffer(ffi.cast("char *", self.data_ptr), nbytes)[:]
        # A compact copy made in C (it knows how padded sub-byte types are
        # stored), read out, then freed.
        clone = _clone_c(holder, self._flags & FLAG_IS_SUBBYTE_TYPE_PADDED)
        data = ffi.cast("DLTensor *", clone._addr).data  # compact, at offset 0
        return ffi.buffer(ffi.cast("char *", data), nbytes)[:]

    # ---- lifetime -------------------------------------------------------------

    # close() is the C base's (csrc/python/pytensor.c): the only code that changes
    # _owner, which Python cannot assign.

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._owner is None:
            return "<dlpackshim.Tensor (closed)>"
        shape, strides, dtype, device, data = self._get_meta()
        extra = ""
        if not self.c_contiguous:
            extra += f", strides={strides}"
        if self.readonly:
            extra += ", readonly=True"
        if self.is_copied:
            extra += ", is_copied=True"
        return f"dlpackshim.Tensor(shape={shape}, dtype={dtype.name}, device={device!r}{extra})"


# ---- helpers shared by the import paths -----------------------------------------

def _nbytes(addr: int, flags: int) -> int:
    """dlpackshim_tensor_nbytes of the DLTensor at `addr`."""
    out = ffi.new("int64_t *")
    _check(lib.dlpackshim_tensor_nbytes(ffi.cast("DLTensor *", addr), flags, out))
    return int(out[0])


_bound = builtins(Tensor)
#: _import_tensor(capsule) -> Tensor: consumes a DLPack capsule (one C call).
_import_capsule = _bound["_import_tensor"]
#: _export(holder, versioned) -> capsule of the tensor a holder owns.
_export_holder = _bound["_export"]
#: _view(...) -> Tensor: a view of memory its `keep` keeps alive, validated
#: as dlpackshim_tensor_new validates; _clone(holder, flags) -> Tensor: a
#: dlpackshim_tensor_clone and the Tensor owning it. Each is
#: one C call, so no Python code ever owns the new tensor: an interrupt can
#: neither leak it nor free it twice.
_view_c = _bound["_view"]
_clone_c = _bound["_clone"]


def _new_view(
    data: int,
    device: Tuple[int, int],
    shape: Tuple[int, ...],
    strides: Optional[Tuple[int, ...]],
    dtype: DType,
    flags: int,
    owner: Any,
    byte_offset: int = 0,
) -> Tensor:
    """A Tensor viewing memory at `data` that `owner` (any Python object, or
    None) keeps alive.

    The owner is held from Python, not from C: in the Tensor's holder, a
    ``(capsule, owner)`` tuple that every export references too. The garbage
    collector sees those references, so an owner that refers back to its
    Tensor forms a cycle that is collected; a reference held in C would leak
    it.
    """
    ndim = len(shape)
    c_shape = ffi.new("int64_t[]", list(shape)) if ndim else NULL
    c_strides = ffi.new("int64_t[]", list(strides)) if (ndim and strides is not None) else NULL
    return _view_c(data, device[0], device[1], ndim, _address(c_shape), _address(c_strides),
                   dtype.code, dtype.bits, dtype.lanes, byte_offset, flags, owner)


def _read_meta(addr: int) -> Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]:
    """(shape, strides, dtype, device, data + byte_offset) of the DLTensor at
    `addr`, whose holder the caller pins."""
    t = ffi.cast("DLTensor *", addr)
    ndim = t.ndim
    shape = tuple(ffi.unpack(t.shape, ndim)) if ndim else ()
    if ndim and t.strides != NULL:
        strides = tuple(ffi.unpack(t.strides, ndim))
    elif ndim:  # NULL strides (DLPack < 1.2): compact row-major
        buf = ffi.new("int64_t[]", ndim)
        _check(lib.dlpackshim_compact_strides(ndim, t.shape, lib.DLPACKSHIM_LAYOUT_C, buf))
        strides = tuple(buf)
    else:
        strides = ()
    dtype = _dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    device = _make_device(t.device.device_type, t.device.device_id)
    return shape, strides, dtype, device, int(ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)


def _layout_of(addr: int) -> int:
    """The dlpackshim_layout bits of the DLTensor at `addr`, whose holder the
    caller pins."""
    out = ffi.new("int32_t *")
    _check(lib.dlpackshim_tensor_layout(ffi.cast("DLTensor *", addr), out))
    return out[0]


def _address(array: Any) -> int:
    return int(ffi.cast("intptr_t", array))


def _clone(t: Tensor) -> Tensor:
    """A compact copy of `t`'s data, owned by the new Tensor, IS_COPIED.

    Host-accessible data: a 256-byte aligned copy on (kDLCPU, 0), made by the
    CPU once the GPU work queued on pinned/managed memory is done. GPU
    memory (kDLCUDA, kDLROCM): new memory on the same device (``cuMemAlloc``
    / ``hipMalloc``), filled by a copy queued on `t`'s stream; the new Tensor
    records the same stream.
    """
    own = t.device
    flags = t._flags
    if _device.is_on_device(own[0]):
        return _device_clone(t, flags)
    if not _device.is_host_accessible(own[0]):
        raise BufferError(f"cannot copy a tensor on {own!r}: dlpackshim copies host-accessible "
                          "memory and CUDA/ROCm device memory only")
    _device.host_synchronize(own[0], own[1], t._stream_handle())
    return _clone_c(t._pin()[0], flags & FLAG_IS_SUBBYTE_TYPE_PADDED)


# Host buffers for copies from a GPU are written at once: no need to clear them.
_alloc_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def _host_copy(t: Tensor) -> Tensor:
    """A compact copy of `t` in host memory, on (kDLCPU, 0), IS_COPIED.

    GPU memory is copied by ``dlpackshim_copy`` on `t`'s stream,
    which is synchronised before this returns: the bytes are there.
    Host-accessible data is copied by the CPU (as :func:`_clone` does).

    Raises
    ------
    BufferError
        The GPU runtime is missing or a driver call failed (the message has
        the driver's words).
    """
    if not _device.is_on_device(t.device[0]):
        return _clone(t)

    def host_memory(nbytes: int) -> Tuple[int, Any]:
        buf = _alloc_uncleared("char[]", nbytes + 256)
        return (int(ffi.cast("uintptr_t", buf)) + 255) & ~255, buf  # 256-byte aligned

    return _copy_to(t, t._flags, _CPU0, host_memory)


def _copy_to(t: Tensor, flags: int, device: Tuple[int, int],
             memory: Callable[[int], Tuple[int, Any]]) -> Tensor:
    """A compact IS_COPIED copy of GPU tensor `t` on `device`, in memory from
    ``memory(nbytes) -> (address, keeper)``, copied by ``dlpackshim_copy`` on
    `t`'s stream (waited for when the copy lands in host memory)."""
    holder, addr = t._pin()
    data, keep = memory(_nbytes(addr, flags))
    c = _new_view(data, device, t.shape, None, t.dtype,
                  FLAG_IS_COPIED | (flags & FLAG_IS_SUBBYTE_TYPE_PADDED), keep)
    if device != _CPU0:
        c._stream = t._stream  # consumers of the copy wait for it on the same stream
    try:
        _device.copy(c._addr, addr, t._stream_handle())
    except BaseException:
        c.close()
        raise
    return c


class _DeviceMemory:
    """GPU memory from ``dlpackshim_gpu_alloc``, freed when the last holder goes."""

    __slots__ = ("device_type", "device_id", "ptr")

    def __init__(self, device_type: int, device_id: int, nbytes: int) -> None:
        self.ptr = 0
        self.device_type = device_type
        self.device_id = device_id
        self.ptr = _gpu.alloc(device_type, device_id, nbytes)

    def __del__(self) -> None:
        ptr, self.ptr = self.ptr, 0
        if ptr:
            try:  # cuMemFree/hipFree wait for the work queued on the memory
                lib.dlpackshim_gpu_free(self.device_type, self.device_id, ffi.cast("void *", ptr))
            except Exception:  # interpreter shutdown: leak rather than fail
                pass


def _device_clone(t: Tensor, flags: int) -> Tensor:
    """A compact copy of GPU tensor `t` in new memory of the same device, IS_COPIED.

    The copy is queued on `t`'s stream (not waited for); the clone records
    the same stream, so that consumers of the clone wait for the copy.
    """
    own = t.device

    def device_memory(nbytes: int) -> Tuple[int, Any]:
        mem = _DeviceMemory(int(own[0]), int(own[1]), max(nbytes, 1))
        return mem.ptr, mem

    return _copy_to(t, flags, own, device_memory)


def _export_whole(t: Tensor, versioned: int) -> Any:
    """A capsule of all of `t` with its own flags (IS_COPIED kept): for copies."""
    holder, addr = t._pin()  # referenced by id(): keep it in a local
    return capsule_export(id(holder), addr, t._flags, versioned)


def _host_view(t: Tensor) -> Tensor:
    """`t` re-labelled as (kDLCPU, 0): for pinned/managed memory, no copy
    (once the GPU work queued on its stream is done)."""
    _device.host_synchronize(t.device[0], t.device[1], t._stream_handle())
    holder, addr = t._pin()
    return _new_view(t.data_ptr, _CPU0, t.shape, t.strides, t.dtype,
                     t._flags & FLAG_READ_ONLY, holder)


def _versioned(max_version: Any) -> int:
    """1 when `max_version` asks for the versioned ABI, 0 for legacy.

    Raises
    ------
    TypeError
        Not None and not a 2-tuple of ints (array API standard).
    ValueError
        A number that is not a DLPack version (a uint32 of DLPackVersion).
    """
    if max_version is None:
        return 0
    if (isinstance(max_version, tuple) and len(max_version) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in max_version)):
        if not all(0 <= v <= _UINT32_MAX for v in max_version):
            raise ValueError(f"max_version must be a (major, minor) pair of version numbers "
                             f"from 0 to {_UINT32_MAX}, not {max_version!r}")
        return 1 if max_version[0] >= 1 else 0
    raise TypeError(f"max_version must be None or a tuple of two ints, not {max_version!r}")
