"""Looking into DLPack capsules without consuming them, and counting deleter calls.

``PyCapsule_GetName`` and ``PyCapsule_GetPointer`` (through a private
``ctypes.PyDLL`` handle on the interpreter) give the managed struct, which is
read field by field with cffi and validated by the C library
(``dlpackshim_tensor_validate``, which reads no more than ``ndim`` entries of
shape/strides, after checking ndim).

How "deleter exactly once" is measured: before a capsule is consumed or
dropped, the ``deleter`` field of its managed struct is swapped for a counting deleter (a ctypes callback) that
remembers the original function pointer. Its first call forwards to the
original with the GIL held (``PYFUNCTYPE``: NumPy's deleter takes the GIL
itself, others expect it held); later calls are only counted, never
forwarded, so a consumer or producer calling twice is reported instead of
freeing twice. The field stays swapped (the original deleter frees the struct;
nothing of the producer reads its own deleter field back). Swapped capsules
are always consumed or dropped by the checker itself before it returns, and
"consumed by someone else" is simulated by renaming the capsule
``used_...`` (as a consumer that keeps the producer's destructor does) and
then calling the deleter by hand.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Dict, List, Optional, Tuple

from .._ffi import FLAG_IS_COPIED, FLAG_READ_ONLY, ffi, lib

__all__ = ["FLAG_IS_COPIED", "FLAG_READ_ONLY", "CapsuleView", "count_calls_by_hand",
           "is_capsule", "rename_used", "unwrap_all"]

# ---- the C API, through a private handle (argtypes do not leak into ctypes.pythonapi)
_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_GetName = _api.PyCapsule_GetName
_GetName.restype = ctypes.c_void_p
_GetName.argtypes = [ctypes.py_object]
_GetPointer = _api.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_void_p]
_SetName = _api.PyCapsule_SetName
_SetName.restype = ctypes.c_int
_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]
_ErrClear = _api.PyErr_Clear
_ErrClear.restype = None
_ErrClear.argtypes = []

# Capsule names must outlive every capsule carrying them: module-level buffers.
_USED_V = ctypes.create_string_buffer(b"used_dltensor_versioned")
_USED_L = ctypes.create_string_buffer(b"used_dltensor")

_DELETER_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)     # called by C
_DELETER_CALL = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)  # we call it, GIL kept

# Offsets of `deleter` in the two managed structs (dlpack.h 1.3, LP64 and ILP32 alike
# up to pointer size): versioned: version(8) + manager_ctx(ptr); legacy: DLTensor + ctx.
_PTR = ctypes.sizeof(ctypes.c_void_p)
_DELETER_OFF_V = 8 + _PTR
_DELETER_OFF_L = ffi.sizeof("DLTensor") + _PTR
_DLTENSOR_OFF_V = ffi.offsetof("DLManagedTensorVersioned", "dl_tensor")



class _Wrap:
    __slots__ = ("original", "calls")

    def __init__(self, original: int) -> None:
        self.original = original
        self.calls = 0


_WRAPS: Dict[int, _Wrap] = {}
_STRAY = [0]  # calls for addresses no longer (or never) wrapped


def _counting_deleter_impl(addr: int) -> None:
    try:
        w = _WRAPS.get(addr)
        if w is None:
            _STRAY[0] += 1
            return
        w.calls += 1
        if w.calls == 1 and w.original:
            _DELETER_CALL(w.original)(addr)
    except BaseException:  # never let an exception escape a C callback
        pass


_COUNTING_DELETER = _DELETER_CB(_counting_deleter_impl)
_COUNTING_DELETER_ADDR = ctypes.cast(_COUNTING_DELETER, ctypes.c_void_p).value


# ---- looking into capsules ---------------------------------------------------------

def is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


class CapsuleView:
    """What an (unconsumed) DLPack capsule holds, read without consuming it."""

    def __init__(self, cap: Any) -> None:
        if not is_capsule(cap):
            raise TypeError(f"not a PyCapsule: {type(cap).__name__}")
        p = _GetName(cap)
        self.name = ctypes.string_at(p).decode("latin-1") if p else None
        if not p:
            _ErrClear()
        self.managed = _GetPointer(cap, p) or 0
        if not self.managed:
            _ErrClear()
        self.versioned = self.name in ("dltensor_versioned", "used_dltensor_versioned")
        self.version: Optional[Tuple[int, int]] = None
        self.flags = 0
        self.valid_error: Optional[str] = None
        self.shape: Optional[Tuple[int, ...]] = None
        self.strides: Optional[Tuple[int, ...]] = None
        # What an unreadable capsule leaves: dl_addr 0, and valid_error says why.
        self.dl_addr = self.deleter_off = self.data = self.byte_offset = 0
        self.ndim: Optional[int] = None
        self.dtype: Optional[Tuple[int, int, int]] = None
        self.device: Optional[Tuple[int, int]] = None
        self.shape_null = self.strides_null = True
        if not self.managed:
            self.valid_error = "the capsule holds no pointer"
            return
        if not self.known:  # a struct of unknown layout: read nothing from it
            self.valid_error = f"{self.name!r} is not one of DLPack's capsule names"
            return
        if self.versioned:
            m = ffi.cast("DLManagedTensorVersioned *", self.managed)
            self.version = (int(m.version.major), int(m.version.minor))
            self.deleter_off = _DELETER_OFF_V
            if self.version[0] != 1:  # another layout: read nothing else
                self.valid_error = f"version {self.version}: a layout this checker cannot read"
                return
            self.flags = int(m.flags)
            self.dl_addr = self.managed + _DLTENSOR_OFF_V
        else:
            self.deleter_off = _DELETER_OFF_L
            self.dl_addr = self.managed
        t = ffi.cast("DLTensor *", self.dl_addr)
        self.ndim = int(t.ndim)
        self.dtype = (int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes))
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.data = int(ffi.cast("uintptr_t", t.data))
        self.byte_offset = int(t.byte_offset)
        self.shape_null = t.shape == ffi.NULL
        self.strides_null = t.strides == ffi.NULL
        lib.dlpackshim_clear_error()
        if lib.dlpackshim_tensor_validate(t, self.flags) != 0:
            self.valid_error = ffi.string(lib.dlpackshim_last_error()).decode("utf-8", "replace")
        if 0 < self.ndim <= 1024 and not self.shape_null and self.valid_error is None:
            self.shape = tuple(ffi.unpack(t.shape, self.ndim))
            if not self.strides_null:
                self.strides = tuple(ffi.unpack(t.strides, self.ndim))
        elif self.ndim == 0:
            self.shape = ()
            self.strides = () if not self.strides_null else None

    @property
    def deleter(self) -> int:
        return ctypes.c_void_p.from_address(self.managed + self.deleter_off).value or 0

    @property
    def empty(self) -> bool:
        """A valid tensor of no element: its data pointer points at nothing."""
        return self.valid_error is None and self.shape is not None and math.prod(self.shape) == 0

    @property
    def known(self) -> bool:
        """The name is one of DLPack's four: the struct's layout is known."""
        return self.name in ("dltensor", "dltensor_versioned", "used_dltensor",
                             "used_dltensor_versioned") and bool(self.managed)

    def wrap_deleter(self) -> _Wrap:
        """Swap in the counting deleter (see the module docstring)."""
        if not self.known:
            raise ValueError(f"capsule {self.name!r}: unknown layout, deleter not swapped")
        slot = ctypes.c_void_p.from_address(self.managed + self.deleter_off)
        w = _Wrap(slot.value or 0)
        _WRAPS[self.managed] = w
        slot.value = _COUNTING_DELETER_ADDR
        return w

    def describe(self) -> str:
        if not self.dl_addr:
            return f"capsule {self.name!r}: {self.valid_error}"
        s = f"{self.name!r}"
        if self.versioned:
            s += f" v{self.version[0]}.{self.version[1]} flags={self.flags:#x}"
        s += (f" dtype={self.dtype} device={self.device} ndim={self.ndim} shape={self.shape}"
              f" strides={'NULL' if self.strides_null else self.strides}"
              f" byte_offset={self.byte_offset}")
        return s


def unwrap_all(ws: List[Tuple[int, _Wrap]]) -> None:
    for addr, w in ws:
        if _WRAPS.get(addr) is w:
            del _WRAPS[addr]


def rename_used(cap: Any, versioned: bool) -> None:
    """Rename `cap` ``used_dltensor[_versioned]``, as a consumer that took it does."""
    _SetName(cap, ctypes.addressof(_USED_V if versioned else _USED_L))


def count_calls_by_hand(managed: int) -> None:
    """Call the counting deleter for `managed` as a consumer would (the first call
    frees through the original)."""
    _COUNTING_DELETER(managed)
