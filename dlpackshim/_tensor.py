"""dlpackshim.Tensor: a DLPack tensor held by Python, and its export path.

Every Tensor has the same kind of owner: a PyCapsule that
``dlpackshim_capsule_import`` consumed (renamed ``used_dltensor...``, its
destructor replaced by one that calls the tensor's deleter). The Tensor keeps
that capsule and the integer address of its DLTensor; everything else is
read from C on first use and cached. Exports (``__dlpack__``) reference the
*owner capsule*, not the Tensor, so closing a Tensor never invalidates a
capsule or a consumer's array made from it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from . import _device
from ._errors import _check, _raise_last
from ._ffi import (
    FLAG_IS_COPIED,
    FLAG_IS_SUBBYTE_TYPE_PADDED,
    FLAG_READ_ONLY,
    NULL,
    capsule_export,
    capsule_export_copy,
    capsule_new,
    fast_export,
    fast_import,
    ffi,
    lib,
)
from ._types import Device, DType, _dtype, as_device
from ._types import _device as _make_device

_CLOSED = "operation on a closed dlpackshim.Tensor"
_CPU0 = Device(_device.CPU, 0)

# Array-interface typestr kind per DLPack code (int, uint, float, complex, bool).
_TYPESTR_KIND = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_LITTLE = ffi.cast("uint16_t *", ffi.new("uint8_t[2]", [1, 0]))[0] == 1
_ORDER = "<" if _LITTLE else ">"


class Tensor:
    """A DLPack tensor: a view of memory owned elsewhere, with its lifetime.

    Made by :func:`dlpackshim.from_dlpack` or :func:`dlpackshim.from_pointer`
    (not by calling the class). A Tensor is itself a DLPack producer
    (``__dlpack__``, ``__dlpack_device__``) and, for host memory, exposes
    ``__array_interface__``; for CUDA memory ``__cuda_array_interface__``.

    The memory stays alive while the Tensor, or any capsule or consumer array
    made from it through ``__dlpack__``, lives. :meth:`close` drops the
    Tensor's own hold at once; using the Tensor afterwards raises ValueError.
    """

    __slots__ = ("_owner", "_keep", "_addr", "_flags", "_version", "_meta", "_pinned",
                 "__weakref__")

    _owner: Any
    _keep: Any
    _addr: int
    _flags: Optional[int]
    _version: Optional[Tuple[int, int]]
    _meta: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]]
    _pinned: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> "Tensor":
        raise TypeError(
            "dlpackshim.Tensor is not built directly; use dlpackshim.from_dlpack() "
            "or dlpackshim.from_pointer()"
        )

    # ---- lazily read metadata -------------------------------------------------

    def _load_flags(self) -> int:
        owner = self._owner
        if owner is None:
            raise ValueError(_CLOSED)
        out = ffi.new("uint64_t[3]")  # major, minor, flags (one allocation)
        major = ffi.cast("uint32_t *", out)
        versioned = _check(lib.dlpackshim_owner_info(id(owner), major, major + 1, out + 2))
        self._version = (int(major[0]), int(major[1])) if versioned else None
        flags = self._flags = int(out[2])
        return flags

    def _get_meta(self) -> Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]:
        meta = self._meta
        if meta is None:
            if self._owner is None:
                raise ValueError(_CLOSED)
            t = ffi.cast("DLTensor *", self._addr)
            ndim = t.ndim
            shape = tuple(ffi.unpack(t.shape, ndim)) if ndim else ()
            if ndim and t.strides != NULL:
                strides = tuple(ffi.unpack(t.strides, ndim))
            else:  # NULL strides (DLPack < 1.2): compact row-major
                strides = _compact_strides(shape)
            dtype = _dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
            device = _make_device(t.device.device_type, t.device.device_id)
            data = int(ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
            meta = self._meta = (shape, strides, dtype, device, data)
        return meta

    def _dl(self) -> Any:
        """The DLTensor as a cffi pointer (valid while the Tensor is open)."""
        if self._owner is None:
            raise ValueError(_CLOSED)
        return ffi.cast("DLTensor *", self._addr)

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
        flags = self._flags if self._flags is not None else self._load_flags()
        return _check(lib.dlpackshim_tensor_nbytes(self._dl(), flags))

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
        """True when the producer marked the data READ_ONLY.

        A legacy (pre-1.0) capsule carries no flags: its data is taken as
        writable, as PyTorch does (NumPy >= 2.3 takes it as read-only).
        """
        flags = self._flags if self._flags is not None else self._load_flags()
        return bool(flags & FLAG_READ_ONLY)

    @property
    def is_copied(self) -> bool:
        """True when the producer set IS_COPIED: the data is a copy no one else views."""
        flags = self._flags if self._flags is not None else self._load_flags()
        return bool(flags & FLAG_IS_COPIED)

    @property
    def dlpack_version(self) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the imported DLPack tensor; None for a legacy capsule."""
        if self._flags is None:
            self._load_flags()
        return self._version

    @property
    def is_contiguous(self) -> bool:
        """True when the data is compact row-major (C order), NumPy's way."""
        return bool(_check(lib.dlpackshim_tensor_is_contiguous(self._dl())))

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._owner is None

    # ---- the producer side ----------------------------------------------------

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """Export the tensor as a DLPack capsule (array API standard ``__dlpack__``).

        Parameters
        ----------
        stream : int or None, optional
            The consumer's stream. CPU data takes only None (or -1, "no
            synchronisation"); any other value raises ValueError, as the
            standard says (NumPy raises RuntimeError here). CUDA: None, -1, 1,
            2 or a stream handle (0 is disallowed); ROCm: None, 0, -1 or a
            handle (1 and 2 are disallowed).
        max_version : tuple of two ints or None, optional
            The newest DLPack version the consumer speaks. Major >= 1 gives a
            ``"dltensor_versioned"`` capsule (version 1.3, with READ_ONLY and
            IS_COPIED flags); None or major 0 the legacy ``"dltensor"``.
        dl_device : tuple or None, optional
            Device for the capsule: None or the tensor's own device; data in
            host-accessible memory (pinned, managed) may also go to
            ``(kDLCPU, 0)`` without a copy.
        copy : bool or None, optional
            True: always a fresh compact copy (IS_COPIED set). False: never
            copy. None: copy only when needed (never, today).

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
        ValueError
            `stream` is not allowed for the device, or the Tensor is closed.
        BufferError
            `dl_device` cannot be reached, ``copy=False`` where a copy is
            needed, a read-only tensor asked for through the legacy ABI (as
            NumPy refuses it; pass ``max_version=(1, 0)`` or newer), or a
            stream synchronisation this build cannot do.
        """
        owner = self._owner
        if owner is None:
            raise ValueError(_CLOSED)
        # Fast path: standard arguments of a CPU exchange, one C call.
        if max_version is None:
            versioned = 0
        elif (type(max_version) is tuple and len(max_version) == 2
              and type(max_version[0]) is int and type(max_version[1]) is int):
            versioned = 1 if max_version[0] >= 1 else 0
        else:
            versioned = _versioned(max_version)
        if stream is None and dl_device is None and copy is None and self._keep is None:
            return fast_export(owner, versioned)
        flags = self._flags
        if flags is None:
            flags = self._load_flags()
        return self._dlpack_slow(stream, versioned, dl_device, copy, flags)

    def _dlpack_slow(self, stream: Any, versioned: int, dl_device: Any, copy: Any,
                     flags: int) -> Any:
        if copy is not None and not isinstance(copy, bool):
            raise TypeError(f"copy must be True, False or None, not {copy!r}")
        own = self.device
        src = self._addr
        keep = None  # keeps a re-labelled DLTensor alive for the C call
        if dl_device is not None:
            target = as_device(dl_device, "dl_device")
            if target != own:
                if target == _CPU0 and _device.is_host_accessible(own[0]):
                    keep = ffi.new("DLTensor *", self._dl()[0])
                    keep.device.device_type = _device.CPU
                    keep.device.device_id = 0
                    src = int(ffi.cast("intptr_t", keep))
                else:
                    raise BufferError(
                        f"cannot export a tensor on {own!r} to {target!r}: this build of "
                        "dlpackshim moves no data between devices"
                    )
        dev = target if dl_device is not None else own
        _device.check_stream(dev[0], stream)
        _device.export_sync(own[0], own[1], stream)
        if copy:
            if not _device.is_host_accessible(own[0]):
                raise BufferError(f"cannot copy a tensor on {own!r}: this build of dlpackshim "
                                  "copies host-accessible memory only")
            return capsule_export_copy(src, flags & FLAG_IS_SUBBYTE_TYPE_PADDED, versioned)
        holder = self._export_owner()
        return capsule_export(id(holder), src, flags & ~FLAG_IS_COPIED, versioned)

    def _export_owner(self) -> Any:
        """What an export must keep alive: the owner capsule, and the Python
        object that keeps the memory valid when there is one. The pair is a
        tuple, which the garbage collector traverses, so a cycle through a
        from_pointer owner that references its Tensor is still collected."""
        keep = self._keep
        return self._owner if keep is None else (self._owner, keep)

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
        shape, strides, dtype, device, data = self._get_meta()
        kind = _TYPESTR_KIND.get(int(dtype.code))
        if kind is None or dtype.lanes != 1 or dtype.bits % 8 or (kind == "b" and dtype.bits != 8):
            raise AttributeError(
                f"a Tensor of dtype {dtype.name} has no array interface typestr "
                "(use __dlpack__ instead)"
            )
        itemsize = dtype.bits // 8
        typestr = ("|" if itemsize == 1 else _ORDER) + kind + str(itemsize)
        contiguous = strides == _compact_strides(shape)
        iface: Dict[str, Any] = {
            "shape": shape,
            "typestr": typestr,
            "descr": [("", typestr)],
            "data": (data, self.readonly),
            "strides": None if contiguous else tuple(s * itemsize for s in strides),
            "version": 3,
        }
        if cuda:
            # Data the shim holds is ready on the legacy default stream (the
            # stream it names when importing): say so (v3 "stream": 1).
            iface["stream"] = 1
            iface["mask"] = None
        # The consumer's array keeps this Tensor (not the owner) alive: from
        # now on close() must not release the memory (see close()).
        self._pinned = True
        return iface

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """NumPy's array interface (v3), for host-accessible memory only.

        Raises
        ------
        AttributeError
            The data is not host-accessible, or its dtype has no typestr
            (bfloat16, float8, sub-byte, vector lanes): ``hasattr`` says False.
        """
        if self._owner is None:
            raise ValueError(_CLOSED)
        if not _device.is_host_accessible(self.device[0]):
            raise AttributeError(
                f"__array_interface__: the data is on {self.device!r}, not host-accessible"
            )
        return self._interface(cuda=False)

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """Numba's CUDA array interface (v3), for CUDA device memory only.

        Raises
        ------
        AttributeError
            The data is not CUDA memory, or its dtype has no typestr.
        """
        if self._owner is None:
            raise ValueError(_CLOSED)
        if self.device[0] not in (_device.CUDA, _device.CUDA_MANAGED):
            raise AttributeError(
                f"__cuda_array_interface__: the data is on {self.device!r}, not a CUDA device"
            )
        return self._interface(cuda=True)

    def tobytes(self) -> bytes:
        """A C-order (row-major) copy of the elements as bytes.

        Returns
        -------
        bytes
            ``nbytes`` bytes; packed sub-byte types as stored.

        Raises
        ------
        BufferError
            The data is not host-accessible.
        ValueError
            The Tensor is closed.
        """
        t = self._dl()
        if not _device.is_host_accessible(self.device[0]):
            raise BufferError(f"tobytes: the data is on {self.device!r}, not host-accessible")
        nbytes = self.nbytes
        if nbytes == 0:
            return b""
        if self.is_contiguous:
            return ffi.buffer(ffi.cast("char *", self.data_ptr), nbytes)[:]
        # A compact copy made in C (it knows how padded sub-byte types are
        # stored), read out, then freed.
        flags = self._flags if self._flags is not None else self._load_flags()
        clone = lib.dlpackshim_tensor_clone(t, flags & FLAG_IS_SUBBYTE_TYPE_PADDED)
        if clone == NULL:
            _raise_last()
        try:
            return ffi.buffer(ffi.cast("char *", clone.dl_tensor.data), nbytes)[:]
        finally:
            lib.dlpackshim_tensor_free(clone)

    # ---- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Drop this Tensor's hold on the memory now; safe to call twice.

        Capsules and consumer arrays made through ``__dlpack__`` keep the
        memory alive on their own. Arrays made through
        ``__array_interface__`` reference the Tensor itself, so once one was
        made the memory is kept until the Tensor is garbage-collected; the
        Tensor is closed all the same.
        """
        owner = self._owner
        if owner is None:
            return
        if self._pinned:
            self._pinned = (owner, self._keep)
        self._owner = None
        self._keep = None
        self._addr = 0
        self._meta = None

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._owner is None:
            return "<dlpackshim.Tensor (closed)>"
        shape, strides, dtype, device, data = self._get_meta()
        extra = ""
        if strides != _compact_strides(shape):
            extra += f", strides={strides}"
        if self.readonly:
            extra += ", readonly=True"
        if self.is_copied:
            extra += ", is_copied=True"
        return f"dlpackshim.Tensor(shape={shape}, dtype={dtype.name}, device={device!r}{extra})"


# ---- helpers shared by the import paths -----------------------------------------

_new = object.__new__


def _wrap(cap: Any, addr: int) -> Tensor:
    """A Tensor owning `cap`, a capsule that dlpackshim_capsule_import consumed."""
    t = _new(Tensor)
    t._owner = cap
    t._keep = None
    t._addr = addr
    t._flags = None
    t._meta = None
    t._pinned = False
    return t


def _import_capsule(cap: Any) -> Tensor:
    """Consume a DLPack capsule (one C call) into a Tensor; raises on failure."""
    return _wrap(cap, fast_import(cap))


def _adopt(managed: Any) -> Tensor:
    """A Tensor owning `managed`, a DLManagedTensorVersioned* the shim built.

    It goes through a capsule like any producer's tensor, so that every
    Tensor has the same kind of owner. On failure the tensor is freed.
    """
    if managed == NULL:
        _raise_last()
    try:
        cap = capsule_new(int(ffi.cast("intptr_t", managed)), 1)
    except BaseException:
        lib.dlpackshim_tensor_free(managed)
        raise
    return _import_capsule(cap)


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

    The owner is held from Python, not from C: by the Tensor (``_keep``) and
    by each export (a ``(capsule, owner)`` tuple). The garbage collector sees
    those references, so an owner that refers back to its Tensor forms a
    cycle that is collected; a reference held in C would leak it.
    """
    ndim = len(shape)
    c_shape = ffi.new("int64_t[]", list(shape)) if ndim else NULL
    c_strides = ffi.new("int64_t[]", list(strides)) if (ndim and strides is not None) else NULL
    managed = lib.dlpackshim_tensor_new(
        ffi.cast("void *", data), device[0], device[1], ndim, c_shape, c_strides,
        dtype.code, dtype.bits, dtype.lanes, byte_offset, flags, NULL, NULL,
    )
    t = _adopt(managed)
    t._keep = owner
    return t


def _clone(t: Tensor) -> Tensor:
    """A compact, 256-byte aligned copy of `t`'s data, owned by the new Tensor."""
    if not _device.is_host_accessible(t.device[0]):
        raise BufferError(f"cannot copy a tensor on {t.device!r}: this build of dlpackshim "
                          "copies host-accessible memory only")
    flags = t._flags if t._flags is not None else t._load_flags()
    return _adopt(lib.dlpackshim_tensor_clone(t._dl(), flags & FLAG_IS_SUBBYTE_TYPE_PADDED))


def _host_view(t: Tensor) -> Tensor:
    """`t` re-labelled as (kDLCPU, 0): for pinned/managed memory, no copy."""
    flags = t._flags if t._flags is not None else t._load_flags()
    return _new_view(t.data_ptr, _CPU0, t.shape, t.strides, t.dtype,
                     flags & ~FLAG_IS_COPIED, t._export_owner())


def _compact_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Row-major strides in elements (zero extents count as 1, as NumPy does)."""
    out = []
    s = 1
    for extent in reversed(shape):
        out.append(s)
        if extent > 1:
            s *= extent
    return tuple(reversed(out))


def _versioned(max_version: Any) -> int:
    """1 when `max_version` asks for the versioned ABI, 0 for legacy.

    Raises
    ------
    TypeError
        Not None and not a 2-tuple of ints (array API standard).
    """
    if (isinstance(max_version, tuple) and len(max_version) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in max_version)):
        return 1 if max_version[0] >= 1 else 0
    raise TypeError(f"max_version must be None or a tuple of two ints, not {max_version!r}")
