"""dlpackshim.Tensor: a DLPack tensor held by Python.

The Tensor's C base (csrc/python/tensor.c) holds its state: ``_holder``, the
one object that keeps the memory alive (a snapshot of the layout taken and
validated at import, and the producer's tensor, the buffer export or the
object the memory came from), ``_flags``, ``_stream``; ``__dlpack__``,
``close()``, the buffer protocol and ``_place`` are C too. Capsules reference
the holder, not the Tensor; buffer views and arrays made through the array
interface reference the Tensor, which keeps the holder while it has lent the
data so (``_pinned``). Closing a Tensor never invalidates any of them.

Lifetime rule: code that reads the data or the DLTensor first takes the
holder with :meth:`Tensor._pin` into a local variable and keeps it for as
long as it uses the address. ``close()`` only drops the Tensor's own
reference, so another thread closing the Tensor (ABI-mode cffi releases the
GIL during every C call) never frees memory a call is using.
"""

from __future__ import annotations

import sys

from . import _gpu
from ._errors import _check
from ._ffi import FLAG_IS_COPIED, FLAG_IS_SUBBYTE_TYPE_PADDED, FLAG_READ_ONLY, ffi, lib
from ._ffi import py_base, py_tensor_class
from ._types import Device, DType, _dtype
from ._types import _device as _make_device

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

_CLOSED = "operation on a closed dlpackshim.Tensor"
# The most dimensions a memoryview has (CPython's PyBUF_MAX_NDIM).
_BUFFER_MAX_NDIM = 64

# Array-interface typestr kind per DLPack code (int, uint, float, complex,
# bool), with the element sizes in bits that NumPy can read for it.
_TYPESTR_KIND = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_TYPESTR_BITS = {"i": (8, 16, 32, 64), "u": (8, 16, 32, 64), "f": (16, 32, 64),
                 "c": (64, 128), "b": (8,)}
_ORDER = "<" if sys.byteorder == "little" else ">"

#: The docstring of ``Tensor.__dlpack__``, a method of the C base: the first
#: lines are its signature for inspect.
_DLPACK_DOC = """__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Export the tensor as a DLPack capsule (array API standard ``__dlpack__``).

Parameters
----------
stream : int or None, optional
    The consumer's stream, on which it will use the data. For CUDA
    and ROCm data the consumer's stream is made to wait for the work
    queued on the Tensor's own stream (:attr:`stream`): an event is
    recorded there and ``cuStreamWaitEvent``/``hipStreamWaitEvent``
    queued; the host never blocks, and the same stream on both sides
    needs nothing. Values (array API standard): CUDA (also pinned and
    managed memory) None = 1 (legacy default stream), 1, 2
    (per-thread default stream), -1 (no synchronisation) or a
    ``cudaStream_t`` as an int; 0 is disallowed. ROCm: None = 0
    (default stream), 0, -1 or a ``hipStream_t``; 1 and 2 are
    disallowed. CPU, and a ``dl_device`` of ``(kDLCPU, 0)``: only
    None (dlpackshim also accepts -1). A disallowed value raises
    ValueError (NumPy raises RuntimeError for a CPU stream, PyTorch
    AssertionError; CuPy maps 0 to 1 with a warning).
max_version : tuple of two ints or None, optional
    The newest DLPack version the consumer speaks. Major >= 1 gives a
    ``"dltensor_versioned"`` capsule (version 1.3, with READ_ONLY and
    IS_COPIED flags); None or major 0 the legacy ``"dltensor"``.
dl_device : tuple or None, optional
    Device for the capsule: None or the tensor's own device, or
    ``(kDLCPU, 0)``: data in host-accessible memory (kDLCUDAHost,
    kDLCUDAManaged, kDLROCMHost) goes there without a copy (the same
    bytes, after the host waited for the Tensor's stream); data in
    GPU memory (kDLCUDA, kDLROCM) is copied to the host
    (``dlpackshim_copy`` on the Tensor's stream, waited for)
    unless ``copy=False``.
copy : bool or None, optional
    True: always a fresh compact copy (IS_COPIED set): in host memory
    for host-accessible data or ``dl_device=(kDLCPU, 0)`` (BufferError
    for a ``dl_device`` naming pinned or managed memory's own device),
    else in new memory of the same GPU (queued on the Tensor's stream,
    which the consumer's stream then waits for). False: never copy
    (BufferError when one is needed). None: copy only when needed (a GPU
    tensor asked for on the CPU).

Returns
-------
PyCapsule
    It references the Tensor's owner, which stays alive as long as the
    capsule or the consumer's array does.

Raises
------
TypeError
    `max_version` or `dl_device` is not a 2-tuple of ints, `copy` is
    not a bool or None.
    (A `stream` that is not None or an int is a TypeError too.)
ValueError
    `stream` is not allowed for the device, `max_version` holds a number
    that is not a DLPack version (negative, or above 2**32 - 1), or the
    Tensor is closed.
BufferError
    `dl_device` cannot be reached (anything but the own device and
    ``(kDLCPU, 0)``), ``copy=False`` where a copy is needed, a
    read-only tensor asked for through the legacy ABI (as NumPy
    refuses it; pass ``max_version=(1, 0)`` or newer), a stream of a
    device type without stream support, or a GPU runtime that is
    missing or failed (the message carries the driver's error
    string, e.g. "CUDA: cuEventRecord failed: ...").
"""

if TYPE_CHECKING:  # what type checkers see of the C base (csrc/python/tensor.c)
    if sys.version_info >= (3, 13):
        from types import CapsuleType
    else:
        from typing_extensions import CapsuleType

    class TensorBase:
        @property
        def _holder(self) -> Any: ...  # what keeps the memory alive; None once closed
        @property
        def _flags(self) -> int: ...  # DLPack flags (bit 63: taken through the legacy ABI)
        @property
        def _major(self) -> int: ...  # DLPack version of the import; 0.0 for a legacy capsule
        @property
        def _minor(self) -> int: ...
        @property
        def _stream(self) -> Optional[int]: ...  # the stream the data is ready on; None: default
        _pinned: Any  # the holder, kept by close() while a view or an array interface reads it
        @property
        def _meta(self) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]]:
            ...  # what _get_meta read; None until then (written by the C base alone)
        def _get_meta(self) -> Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]: ...
        def __dlpack__(self, *, stream: Optional[int] = None,
                       max_version: Optional[Tuple[int, int]] = None,
                       dl_device: Optional[Tuple[int, int]] = None,
                       copy: Optional[bool] = None) -> CapsuleType: ...
        def close(self) -> None: ...
        def _place(self, *, device: Any = None, copy: Optional[bool] = None) -> Tensor: ...
        def _host_ready(self) -> None: ...  # the GPU is done with pinned/managed data
        def _lend(self) -> None: ...  # close() keeps the memory from now on
        @staticmethod
        def _from_memory(data: int, device: Any, shape: Tuple[int, ...],
                         strides: Optional[Tuple[int, ...]], dtype: Tuple[int, int, int],
                         flags: int, keep: Any) -> Tensor: ...
else:
    #: The C base: fields, __dlpack__, close, _place, the buffer protocol.
    TensorBase = py_base(_DLPACK_DOC)


class Tensor(TensorBase):
    """A DLPack tensor: a view of memory owned elsewhere, with its lifetime.

    Made by :func:`dlpackshim.from_dlpack` or :func:`dlpackshim.from_pointer`
    (not by calling the class). A Tensor is itself a DLPack producer
    (``__dlpack__``, ``__dlpack_device__``, the C exchange table) and, for
    memory the host reads, exports the buffer protocol (``memoryview(t)``,
    ``bytes(t)``) and ``__array_interface__``; for CUDA memory
    ``__cuda_array_interface__``. It pickles (protocol 5 hands the data out
    of band) and ``copy.copy`` copies the data, as NumPy does.

    The memory stays alive while the Tensor, or any capsule, buffer view or
    consumer array made from it, lives. :meth:`close` drops the Tensor's own
    hold at once; using the Tensor afterwards raises ValueError. Every
    method is safe against a :meth:`close` from another thread: it completes
    with the data it started with, or raises ValueError.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Tensor:
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
        holder = self._holder  # one read: a close() after it cannot free the memory
        if holder is None:
            raise ValueError(_CLOSED)
        return holder, holder._addr

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
        out = ffi.new("int64_t *")
        _check(lib.dlpackshim_tensor_nbytes(ffi.cast("DLTensor *", addr), self._flags, out))
        return int(out[0])

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
        if self._holder is None:
            raise ValueError(_CLOSED)
        return bool(self._flags & FLAG_READ_ONLY)

    @property
    def is_copied(self) -> bool:
        """True when the producer set IS_COPIED: the data is a copy no one else views."""
        if self._holder is None:
            raise ValueError(_CLOSED)
        return bool(self._flags & FLAG_IS_COPIED)

    @property
    def dlpack_version(self) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the imported DLPack tensor; None for a legacy capsule."""
        if self._holder is None:
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
        out = ffi.new("int32_t *")
        _check(lib.dlpackshim_tensor_layout(ffi.cast("DLTensor *", addr), out))
        return int(out[0])

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._holder is None

    # ---- the producer side: __dlpack__ is the C base's -------------------------------

    def _stream_handle(self, device_type: Optional[int] = None) -> int:
        """The stream the data is ready on, as the runtime's handle (-1: none).
        `device_type`: the Tensor's, from metadata the caller read already."""
        s = self._stream
        if s is not None:
            return int(s)
        return _gpu.default_stream(self.device[0] if device_type is None else device_type)

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
        holder is pinned before anything is read, and the Tensor lent
        (``_lend``) before the dict is made, so that close() keeps the memory
        as long as the Tensor lives (a close() from another thread before the
        lending raises ValueError here)."""
        holder, addr = self._pin()
        meta = self._meta   # written by the C base alone, from the holder
        # not read yet, or closed since the pin: the pinned snapshot
        shape, strides, dtype, device, data = meta if meta is not None else _read_meta(addr)
        stream = self._stream_handle(device[0])
        if cuda:
            if device[0] not in (_gpu.CUDA, _gpu.CUDA_MANAGED):
                raise AttributeError(
                    f"__cuda_array_interface__: the data is on {device!r}, not a CUDA device"
                )
        elif not _gpu.is_host_accessible(device[0]):
            raise AttributeError(
                f"__array_interface__: the data is on {device!r}, not host-accessible"
            )
        kind = _TYPESTR_KIND.get(int(dtype.code))
        if kind is None or dtype.lanes != 1 or dtype.bits not in _TYPESTR_BITS[kind]:
            raise AttributeError(
                f"a Tensor of dtype {dtype.name} has no array interface typestr "
                "(use __dlpack__ instead)"
            )
        if not cuda and device[0] != _gpu.CPU:
            self._host_ready()  # pinned or managed memory: the GPU is done with it
        # From now on close() keeps the memory (ValueError if one came first:
        # the address read under the pin must not be handed out then).
        self._lend()
        readonly = bool(self._flags & FLAG_READ_ONLY)
        itemsize = dtype.bits // 8
        typestr = ("|" if itemsize == 1 else _ORDER) + kind + str(itemsize)
        contiguous = self.c_contiguous
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

        GPU memory (kDLCUDA, kDLROCM) is copied to the host first, on the
        Tensor's stream (waited for); pinned and managed memory is read once
        the host waited for that stream.

        Raises
        ------
        BufferError
            The data is on a device dlpackshim cannot read, or a GPU runtime
            is missing or failed.
        ValueError
            The Tensor is closed.
        """
        holder, addr = self._pin()  # the data stays valid to the end, whoever closes
        dev = self.device
        if not _gpu.is_host_accessible(dev[0]):
            host = self._place(device=(_gpu.CPU, 0))  # BufferError when it cannot
            try:
                return host.tobytes()
            finally:
                host.close()
        if dev[0] != _gpu.CPU:
            self._host_ready()
        if self.nbytes == 0:
            return b""
        if not self.c_contiguous:  # a compact copy made in C, which knows sub-byte layouts
            copy = self._place(copy=True)
            try:
                return copy.tobytes()
            finally:
                copy.close()
        return ffi.buffer(ffi.cast("char *", self.data_ptr), self.nbytes)[:]

    # ---- copies and pickles ---------------------------------------------------

    def __sizeof__(self) -> int:
        """``sys.getsizeof(t)``: the object, and the data when the Tensor owns
        it (IS_COPIED: a copy, an unpickled Tensor), as NumPy counts an array
        that owns its data. Dask counts the data of every Tensor, as it does
        NumPy arrays' (the ``dask.sizeof`` entry point)."""
        own = object.__sizeof__(self)
        holder = self._holder
        if holder is not None and self._flags & FLAG_IS_COPIED:
            own += self.nbytes
        return own

    def __copy__(self) -> Tensor:
        """``copy.copy(t)``: a compact copy of the data (as NumPy's), owned by
        the new Tensor (IS_COPIED): GPU memory on the same GPU, host-readable
        memory (pinned, managed) on the host; of ``type(t)``, as NumPy keeps
        a subclass."""
        return _of_class(self._place(copy=True), type(self))

    def __deepcopy__(self, memo: Dict[int, Any]) -> Tensor:
        """``copy.deepcopy(t)``: as :meth:`__copy__` (the data is all there is)."""
        return _of_class(self._place(copy=True), type(self))

    def __reduce__(self) -> Tuple[Any, ...]:
        """As ``__reduce_ex__(2)`` (object's own would rebuild a closed Tensor)."""
        return self.__reduce_ex__(2)

    def __reduce_ex__(self, protocol: int) -> Tuple[Any, ...]:
        """Pickling: the data in C or Fortran order, its dtype, shape,
        READ_ONLY (the producer's: not the one a legacy import assumes) and
        IS_SUBBYTE_TYPE_PADDED flags, and the class when it is a subclass.
        Protocol 5 hands the data of a C- or Fortran-contiguous Tensor with a
        struct format dtype out of band, as a C-contiguous
        ``pickle.PickleBuffer`` over the Tensor's own memory (zero copy);
        other Tensors (as NumPy's), other dtypes and lower protocols carry
        C-order bytes in band. GPU memory is refused (TypeError): copy it to
        the host first. An empty Tensor goes in the order whose compact
        strides fit int64 (C first); one whose strides overflow in both orders
        is refused (ValueError), since nothing could rebuild it."""
        from pickle import PickleBuffer  # pickling imported pickle already
        shape, _, dtype, dev, _ = self._get_meta()  # ValueError when closed
        if dev[0] != _gpu.CPU and not _gpu.is_host_accessible(dev[0]):
            raise TypeError(
                f"cannot pickle a dlpackshim.Tensor on {dev!r}: the host cannot read it; copy "
                "it to the host first with dlpackshim.from_dlpack(t, device=(1, 0))")
        order = "C" if self.c_contiguous else "F" if self.f_contiguous else None
        if 0 in shape:  # empty: either order holds it, but one may lack compact strides
            order = _fitting_order(shape)
        # What arrives is a copy: read-only when the producer said so, not
        # when a legacy capsule said nothing (writable, as copy.copy's is).
        flags, key = self._flags, dtype._key
        readonly = bool(flags & FLAG_READ_ONLY) and self._major != 0
        meta = (shape, (int(key[0]), key[1], key[2]), order or "C", readonly,
                bool(flags & FLAG_IS_SUBBYTE_TYPE_PADDED))
        # pickle names _rebuild by its module: a re-imported package's own,
        # which keeps only a subclass of its own Tensor class
        module = sys.modules.get(__name__)
        rebuild, current = getattr(module, "_rebuild", _rebuild), getattr(module, "Tensor", Tensor)
        cls = (type(self),) if type(self) is not current and issubclass(type(self), current) else ()
        if dev[0] != _gpu.CPU:
            self._host_ready()  # pinned or managed memory: the GPU is done with it
        if protocol >= 5 and order is not None:
            # The buffer of a Tensor of its own (nobody else can close it)
            # over the same bytes, C-ordered (a Fortran-ordered Tensor's bytes
            # are its transpose's, as NumPy hands them out), holding the
            # memory through the holder: any consumer can write it to a file
            # or socket, and a garbage cycle through it frees nothing read.
            view_shape = shape if order == "C" else shape[::-1]
            if len(view_shape) > _BUFFER_MAX_NDIM:  # no memoryview holds it: flat
                view_shape = (self.size,)
            holder, _ = self._pin()  # the memory read below stays valid, whoever closes self
            try:
                view = Tensor._from_memory(self.data_ptr, (_gpu.CPU, 0), view_shape, None,
                                           meta[1], flags & FLAG_READ_ONLY, holder)
                return (rebuild, (PickleBuffer(view), meta) + cls)
            except BufferError:  # no struct format: the bytes in band
                pass
        return (rebuild, (_raw_bytes(self) if order == "F" else self.tobytes(), meta) + cls)

    # ---- lifetime -------------------------------------------------------------

    def __enter__(self) -> Tensor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._holder is None:
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


if not TYPE_CHECKING:
    #: The class Tensors are made of: a C subtype of the class above with its
    #: base's own deallocation (CPython's generic one for classes costs every
    #: Tensor ~20 ns; docs/design.md). Its methods are the class statement's.
    Tensor = py_tensor_class(Tensor)


def _read_meta(addr: int) -> Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]:
    """(shape, strides, dtype, device, data + byte_offset) of the DLTensor at
    `addr`, whose holder the caller pins."""
    t = ffi.cast("DLTensor *", addr)
    ndim = t.ndim
    shape = tuple(ffi.unpack(t.shape, ndim)) if ndim else ()
    strides = tuple(ffi.unpack(t.strides, ndim)) if ndim else ()  # a holder's are explicit
    dtype = _dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    device = _make_device(t.device.device_type, t.device.device_id)
    return shape, strides, dtype, device, int(ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)


def _raw_bytes(t: Tensor) -> bytes:
    """The bytes of compact data as they lie in memory (a Fortran-order Tensor's too)."""
    holder, addr = t._pin()
    return ffi.buffer(ffi.cast("char *", t.data_ptr), t.nbytes)[:]


def _of_class(t: Tensor, cls: type) -> Tensor:
    """`t`, made an instance of `cls` when that is a subclass of t's class
    (which adds no field); else as it is (a subclass of the Tensor class of
    an import the package was re-imported after)."""
    if cls is not type(t) and issubclass(cls, type(t)):
        t.__class__ = cls
    return t


def _compact_strides(shape: Tuple[int, ...], order: str) -> Tuple[int, ...]:
    """The compact strides of `shape` in `order` ("C" or "F"), in elements;
    ValueError when they overflow int64 (an empty shape beside a huge extent)."""
    out = ffi.new("int64_t[]", len(shape))
    layout = lib.DLPACKSHIM_LAYOUT_C if order == "C" else lib.DLPACKSHIM_LAYOUT_F
    try:
        _check(lib.dlpackshim_compact_strides(len(shape), shape, layout, out))
    except (OverflowError, BufferError) as exc:
        raise ValueError(str(exc)) from None
    return tuple(out)


def _fitting_order(shape: Tuple[int, ...]) -> str:
    """The order ("C", else "F") in which an empty `shape` has compact strides,
    the ones :func:`_rebuild` gives it; ValueError when neither fits int64."""
    try:
        _compact_strides(shape, "C")
        return "C"
    except ValueError:
        pass
    try:
        _compact_strides(shape, "F")
        return "F"
    except ValueError as exc:
        raise ValueError(f"cannot pickle this dlpackshim.Tensor: {exc}") from None


def _rebuild(data: Any, meta: Tuple[Any, ...], cls: type = Tensor) -> Tensor:
    """A Tensor of pickled data (see :meth:`Tensor.__reduce_ex__`): over the
    out-of-band buffer itself (zero copy) or the unpickled bytes, copied into
    writable memory when the Tensor was writable and the buffer is not.
    IS_COPIED unless it is over a ``PickleBuffer`` handed back to ``loads``,
    or a memoryview (of memoryviews) of one or of a Tensor (the memory of the
    pickled Tensor, shared in this process). A pickle whose bytes do not
    fill the shape and dtype it names exactly is refused with ValueError,
    never read past."""
    from pickle import PickleBuffer  # unpickling imported pickle already
    try:
        shape, dtype, order, readonly, padded = meta
    except (TypeError, ValueError):
        raise ValueError(f"corrupt dlpackshim.Tensor pickle: its description is a "
                         f"{type(meta).__name__}, not (shape, dtype, order, readonly, "
                         f"padded)") from None
    if order not in ("C", "F"):
        raise ValueError(f"corrupt dlpackshim.Tensor pickle: memory order {order!r}")
    try:
        flat = PickleBuffer(data).raw()  # a contiguous buffer's bytes, as they lie
    except (TypeError, BufferError) as exc:
        raise ValueError(f"corrupt dlpackshim.Tensor pickle: its data is not a contiguous "
                         f"buffer ({exc})") from None
    # A buffer handed to loads is the Tensor's own, as the pickle's bytes
    # are (Dask hands memoryviews of the frames it received), except what
    # dumps handed out, given back in this process: a PickleBuffer, or a
    # memoryview (of a memoryview...) of one or of a Tensor, shares the
    # pickled Tensor's memory.
    base = data
    while type(base) is memoryview:
        base = base.obj
    own = not isinstance(base, (PickleBuffer, TensorBase))
    if not readonly and flat.readonly:
        flat, own = bytearray(flat), True
    flags = ((FLAG_IS_COPIED if own else 0) | (FLAG_READ_ONLY if readonly else 0)
             | (FLAG_IS_SUBBYTE_TYPE_PADDED if padded else 0))
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise ValueError(f"corrupt dlpackshim.Tensor pickle: {cls!r} is not a Tensor class")
    try:
        strides = _compact_strides(shape, "F") if order == "F" else None
        return _of_class(Tensor._from_memory(flat, (_gpu.CPU, 0), shape, strides, dtype, flags,
                                             None), cls)
    except (TypeError, ValueError, BufferError, OverflowError) as exc:
        raise ValueError(f"corrupt dlpackshim.Tensor pickle: {exc}") from None