"""DLPack producers on demand, built by the C library, for testing consumers.

Every tensor is made by ``dlpackshim_tensor_new`` (or ``_new_legacy``) and
wrapped in a capsule by ``dlpackshim_capsule_new``; its deleter is then
swapped for a counting one (``dlpackshim__counted_attach``), so a checker
knows exactly how often a consumer called it, double calls included, and a
double call never frees twice. Malformed tensors are built valid and then
broken field by field (the C library refuses to build them).

Everything is described by a plain, printable :class:`TensorSpec` (no
pointers), so a spec can be drawn by hypothesis in one process and built in
another, and a failing spec is its own minimal reproducer.

Main entry points
-----------------
:class:`TensorSpec`     the knobs: dtype, shape, strides, byte_offset, device,
                        version, flags, ``protocol`` and ``defect``
:func:`make_capsule`    ``(capsule, ManagedTensor)``: a raw capsule
:class:`Producer`       an object with ``__dlpack__``/``__dlpack_device__``
:func:`make_producer`   the producer (or raw capsule) a spec describes
:func:`expected_bytes`  the C-order bytes a correct consumer must see
:data:`DEFECTS`         every way to break a producer, with what the standard
                        asks of a consumer that meets it
"""

from __future__ import annotations

import collections
import ctypes
import random
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

from .._gpu import is_host_accessible  # the C library's rule, asked
from .._ffi import ffi, lib
from ._lib import capsule_new, pylib

__all__ = [
    "DEFECTS",
    "Defect",
    "ManagedTensor",
    "Producer",
    "LegacyProducer",
    "TensorSpec",
    "applicable",
    "byte_span",
    "compact_strides",
    "expected_bytes",
    "make_capsule",
    "make_producer",
    "numel",
    "storage",
]

FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
FLAG_IS_SUBBYTE_TYPE_PADDED = 4
kDLCPU, kDLCUDA = 1, 2

# ---- a private handle on the C API (argtypes do not leak into ctypes.pythonapi)
_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_CapsuleNew = _api.PyCapsule_New
_CapsuleNew.restype = ctypes.py_object
_CapsuleNew.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_SetName = _api.PyCapsule_SetName
_SetName.restype = ctypes.c_int
_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]

_NAMES: Dict[bytes, Any] = {}


def _static_name(name: bytes) -> int:
    """A NUL-terminated copy of name kept for the life of the process (capsule
    names must outlive their capsules)."""
    buf = _NAMES.get(name)
    if buf is None:
        buf = _NAMES[name] = ctypes.create_string_buffer(name)
    return ctypes.addressof(buf)


# ---- layouts -------------------------------------------------------------------------

def numel(shape: Tuple[int, ...]) -> int:
    """The number of elements of `shape` (1 for 0-d)."""
    n = 1
    for s in shape:
        n *= int(s)
    return n


def compact_strides(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Row-major strides in elements (extents of 0 count as 1)."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(shape[i]), 1)
    return tuple(strides)


def byte_span(shape: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> Tuple[int, int]:
    """[lo, hi): the bytes a strided view touches, relative to its first element."""
    if numel(shape) == 0:
        return 0, 0
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n > 1:
            ext = (n - 1) * s * itemsize
            if ext < 0:
                lo += ext
            else:
                hi += ext
    return lo, hi + itemsize


#: Defects: name -> (what the consumer must do, deleter calls expected in total).
#: "raise:BufferError,ValueError" = raise one of these classes; "raise-or-cuda:..." = the
#: same, or (a consumer that holds device tensors) import it as (kDLCUDA, 0) memory;
#: "raise" = raise any Exception; "accept" = import it; "no-crash" = any outcome but a
#: crash. Deleter calls are counted after the consumer's result and every capsule died.
@dataclass(frozen=True)
class Defect:
    """One way a producer breaks the rules, and what a consumer must do."""

    name: str
    expect: str  # "raise:<classes, comma-separated>", "raise-or-cuda:<classes>", "raise",
                 # "accept" or "no-crash"
    deleter_calls: int  # expected total once everything died
    doc: str


DEFECTS: Dict[str, Defect] = {d.name: d for d in [
    Defect("version-major-2", "raise:BufferError,ValueError", 1,
           "versioned capsule of major version 2 (and garbage after flags): call the deleter, "
           "read nothing else, raise BufferError"),
    Defect("ndim-negative", "raise:BufferError,ValueError", 1, "ndim = -1"),
    Defect("ndim-huge", "raise:BufferError,ValueError", 1, "ndim = 2**31 - 1 (no shape behind it)"),
    Defect("null-shape", "raise:BufferError,ValueError", 1, "ndim > 0 with shape NULL"),
    Defect("negative-extent", "raise:BufferError,ValueError", 1, "an extent of -3"),
    Defect("overflowing-extents", "raise:BufferError,ValueError", 1,
           "extents whose product overflows int64 (2**40 x 2**40)"),
    Defect("bad-dtype-code", "raise:BufferError,ValueError", 1, "dtype code 99"),
    Defect("bad-dtype-bits", "raise:BufferError,ValueError", 1, "float of 7 bits"),
    Defect("lanes-zero", "raise:BufferError,ValueError", 1, "dtype lanes = 0"),
    Defect("null-data", "no-crash", 1, "data NULL for a non-empty tensor"),
    Defect("null-deleter", "accept", 0, "deleter NULL (legal: the consumer never calls it)"),
    Defect("foreign-name", "raise", 0,
           "capsule named 'not_a_dltensor': not the consumer's to take, deleter not called"),
    Defect("used-name", "raise", 0,
           "capsule already named 'used_dltensor[_versioned]': deleter not called"),
    Defect("not-a-capsule", "raise", 0, "__dlpack__ returns an int"),
    Defect("dlpack-raises", "raise:BufferError", 0,
           "__dlpack__ raises BufferError: the consumer lets it through"),
    Defect("ignores-copy", "accept", 1,
           "__dlpack__(copy=True) answers with a view of its own memory, without IS_COPIED "
           "(the consumer must notice and copy itself)"),
    Defect("device-lie", "no-crash", 1,
           "__dlpack_device__ says (kDLCUDA, 0); the capsule holds host memory on kDLCPU"),
    Defect("capsule-cuda", "raise-or-cuda:BufferError,ValueError", 1,
           "__dlpack_device__ says CPU, the capsule says (kDLCUDA, 0): refuse it, or (a "
           "consumer that holds device tensors) import it as CUDA memory"),
    Defect("exchange-major-2", "no-crash", 1,
           "__dlpack_c_exchange_api__ table of major version 2 with NULL entries (and a "
           "working __dlpack__)"),
    Defect("exchange-bad-name", "no-crash", 1,
           "__dlpack_c_exchange_api__ is a capsule named 'not_dlpack_exchange_api'"),
    Defect("exchange-fails-silently", "no-crash", 1,
           "a 1.3 __dlpack_c_exchange_api__ table whose every entry returns -1 without "
           "setting a Python exception (and a working __dlpack__): an exception or the "
           "__dlpack__ route, never a crash or a NULL result"),
    Defect("exchange-null-out", "no-crash", 1,
           "a 1.3 __dlpack_c_exchange_api__ table whose entries return 0 (success) but "
           "leave the result NULL"),
    Defect("exchange-null-entries", "no-crash", 1,
           "a 1.3 __dlpack_c_exchange_api__ table whose every entry is NULL"),
    Defect("ignores-dl-device", "raise-or-cuda:BufferError,ValueError", 1,
           "a (kDLCUDA, 0) producer whose __dlpack__ ignores dl_device: asked for "
           "dl_device=(kDLCPU, 0) it still answers with its CUDA tensor; a consumer that "
           "asked for the host must refuse it (and one that did not ask refuses CUDA "
           "memory, or imports it as CUDA)"),
]}

#: Defects whose producer type carries a ``__dlpack_c_exchange_api__`` table: defect ->
#: the table's kind (see :func:`_exchange_capsule`).
EXCHANGE_DEFECTS = {"exchange-major-2": "major-2", "exchange-bad-name": "bad-name",
                    "exchange-fails-silently": "fails-silently", "exchange-null-out": "null-out",
                    "exchange-null-entries": "null-entries"}


@dataclass(frozen=True)
class TensorSpec:
    """Everything a test producer is made of; printable, picklable, no pointers.

    Parameters
    ----------
    dtype : (code, bits, lanes)
    shape : tuple of int
    strides : tuple of int or None
        In elements; None is compact row-major.
    byte_offset : int
        Bytes between ``data`` and the first element.
    device : (device_type, device_id)
        What the tensor (and ``__dlpack_device__``) say; the memory is host memory.
    version : (major, minor)
        Of versioned capsules.
    readonly, copied, padded : bool
        The READ_ONLY, IS_COPIED and IS_SUBBYTE_TYPE_PADDED flags.
    null_strides : bool
        Strides NULL (allowed before DLPack 1.2: compact row-major).
    protocol : str
        ``"both"``: a 2023.12 ``__dlpack__`` (legacy capsule for ``max_version``
        None or major 0, versioned otherwise); ``"legacy"``: the pre-2023
        ``__dlpack__(stream=None)``, legacy capsules only; ``"capsule-versioned"``
        and ``"capsule-legacy"``: a raw capsule, no producer object.
    defect : str or None
        A key of :data:`DEFECTS`.
    seed : int
        The random contents of the memory.
    """

    dtype: Tuple[int, int, int] = (2, 32, 1)
    shape: Tuple[int, ...] = ()
    strides: Optional[Tuple[int, ...]] = None
    byte_offset: int = 0
    device: Tuple[int, int] = (1, 0)
    version: Tuple[int, int] = (1, 3)
    readonly: bool = False
    copied: bool = False
    padded: bool = False
    null_strides: bool = False
    protocol: str = "both"
    defect: Optional[str] = None
    seed: int = 0

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory (a packed sub-byte dtype counts 1 for the span)."""
        _, bits, lanes = self.dtype
        return (bits * lanes + 7) // 8

    @property
    def packed(self) -> bool:
        """A sub-byte dtype stored packed (several elements per byte)."""
        return self.dtype[1] * self.dtype[2] < 8 and not self.padded

    @property
    def elem_strides(self) -> Tuple[int, ...]:
        return compact_strides(self.shape) if self.strides is None else tuple(self.strides)

    @property
    def flags(self) -> int:
        return ((FLAG_READ_ONLY if self.readonly else 0) | (FLAG_IS_COPIED if self.copied else 0)
                | (FLAG_IS_SUBBYTE_TYPE_PADDED if self.padded else 0))

    @property
    def versioned_capsule(self) -> bool:
        """The raw capsule is versioned (protocols "capsule-versioned")."""
        return self.protocol == "capsule-versioned"

    @property
    def expect(self) -> str:
        """What a consumer must do with it (see :class:`Defect`); "accept" when valid."""
        return DEFECTS[self.defect].expect if self.defect else "accept"

    def describe(self) -> str:
        """A short one-line reproducer (the non-default fields)."""
        base = TensorSpec()
        parts = [f"{k}={getattr(self, k)!r}" for k in self.__dataclass_fields__
                 if getattr(self, k) != getattr(base, k)]
        return "TensorSpec(" + ", ".join(parts) + ")"

    def with_(self, **kw: Any) -> "TensorSpec":
        """A copy with some fields changed."""
        return replace(self, **kw)


# ---- memory --------------------------------------------------------------------------

class Storage:
    """Random-filled host memory for one spec: ``data`` (256-byte aligned) and
    ``origin`` = data + byte_offset, the first element."""

    def __init__(self, spec: TensorSpec) -> None:
        if spec.packed:
            lo, hi = 0, (numel(spec.shape) * spec.dtype[1] * spec.dtype[2] + 7) // 8
        else:
            lo, hi = byte_span(spec.shape, spec.elem_strides, spec.itemsize)
        shift = -(-max(0, -lo - spec.byte_offset) // 256) * 256
        size = shift + spec.byte_offset + max(hi, 0) + 8
        self.raw = (ctypes.c_uint8 * (size + 256))()
        base = ctypes.addressof(self.raw)
        base += (-base) % 256
        self.data = base + shift
        self.origin = self.data + spec.byte_offset
        self.lo, self.hi = lo, hi
        n = hi - lo
        if n > 0:
            ctypes.memmove(self.origin + lo, random.Random(spec.seed).randbytes(n), n)

    def view_bytes(self, spec: TensorSpec, origin: Optional[int] = None) -> bytes:
        """C-order bytes of the view at `origin` (default: ours)."""
        origin = self.origin if origin is None else origin
        return _gather(origin, spec)


def _gather(origin: int, spec: TensorSpec) -> bytes:
    shape = spec.shape
    n = numel(shape)
    if n == 0:
        return b""
    if spec.packed:
        return ctypes.string_at(origin, (n * spec.dtype[1] * spec.dtype[2] + 7) // 8)
    size = spec.itemsize
    strides = [s * size for s in spec.elem_strides]
    if list(strides) == [s * size for s in compact_strides(shape)]:
        return ctypes.string_at(origin, n * size)
    out = bytearray()
    offsets = [0]
    for ext, st in zip(shape, strides):
        offsets = [o + i * st for o in offsets for i in range(ext)]
    for o in offsets:
        out += ctypes.string_at(origin + o, size)
    return bytes(out)


def storage(spec: TensorSpec) -> Storage:
    """The memory :func:`make_capsule` would fill for `spec`."""
    return Storage(spec)


def expected_bytes(spec: TensorSpec) -> bytes:
    """The C-order bytes (element after element, ``itemsize`` each; packed sub-byte
    types: the packed bytes) a correct consumer of `spec` sees."""
    return Storage(spec).view_bytes(spec)


# ---- managed tensors -----------------------------------------------------------------

# Lifetimes. A consumer may keep a zero-copy view long after the producer object
# is gone (``np.from_dlpack(Producer(spec))``), so a tensor's struct and memory
# stay referenced here until its deleter was called; then the record waits in
# _DEAD (its struct still valid, so a late double call is still counted safely)
# until _DEAD_MAX newer ones pushed it out and it is freed. A consumer that never
# calls the deleter leaks the tensor: never a use after free.
_LIVE: Dict[int, "ManagedTensor"] = {}
_DEAD: "collections.deque[ManagedTensor]" = collections.deque()
_DEAD_MAX = 512


def _reap() -> None:
    for key, mt in list(_LIVE.items()):
        if mt.deleter_calls > 0:
            del _LIVE[key]
            mt.mem = None          # the consumer is done with the data
            _DEAD.append(mt)
    while len(_DEAD) > _DEAD_MAX:
        _DEAD.popleft().free()


class ManagedTensor:
    """One C-built managed tensor with a counting deleter.

    ``deleter_calls`` is exact (double calls included). The struct is really
    freed by :meth:`free` (or when this object dies after its deleter ran):
    until then a late or double call reads valid memory.
    """

    def __init__(self, spec: TensorSpec, versioned: bool, mem: Storage,
                 keep: Any = None) -> None:
        self.spec = spec
        self.versioned = bool(versioned)
        self.mem = mem
        self.keep = keep
        shape = ffi.new("int64_t[]", list(spec.shape) or [0])
        strides = ffi.new("int64_t[]", list(spec.elem_strides) or [0])
        code, bits, lanes = spec.dtype
        data = ffi.cast("void *", mem.data)
        dev_type, dev_id = spec.device
        if not is_host_accessible(dev_type):
            dev_type, dev_id = 1, 0    # built on the CPU; the defect may relabel it
        nd = len(spec.shape)
        # (device memory is host memory relabelled by _apply_struct_defect)
        if self.versioned:
            out = ffi.new("DLManagedTensorVersioned **")
            status = lib.dlpackshim_tensor_new(data, dev_type, dev_id, nd, shape, strides, code,
                                               bits, lanes, spec.byte_offset, spec.flags,
                                               ffi.NULL, ffi.NULL, out)
        else:
            out = ffi.new("DLManagedTensor **")
            status = lib.dlpackshim_tensor_new_legacy(data, dev_type, dev_id, nd, shape, strides,
                                                      code, bits, lanes, spec.byte_offset,
                                                      ffi.NULL, ffi.NULL, out)
        if status != 0:
            raise ValueError(f"dlpackshim_tensor_new refused {spec.describe()}: "
                             + ffi.string(lib.dlpackshim_last_error()).decode())
        m = out[0]
        self.address = int(ffi.cast("uintptr_t", m))
        self.counter = pylib.dlpackshim__counted_attach(self.address, 1 if self.versioned else 0)
        if not self.counter:
            (lib.dlpackshim_tensor_free if self.versioned
             else lib.dlpackshim_tensor_free_legacy)(m)
            raise MemoryError("dlpackshim__counted_attach failed")
        self.managed = ffi.cast("DLManagedTensorVersioned *" if self.versioned
                                else "DLManagedTensor *", m)
        self.freed = False
        _apply_struct_defect(self, spec)
        _reap()
        _LIVE[self.address] = self

    @property
    def dl_tensor(self) -> Any:
        """The cffi ``DLTensor`` inside the managed struct."""
        return self.managed.dl_tensor

    @property
    def deleter_calls(self) -> int:
        """Calls of this tensor's deleter so far, double calls included."""
        return self._final_calls if self.freed else int(pylib.dlpackshim__counted_calls(self.counter))

    def free(self) -> None:
        """Delete the tensor for good (the original deleter, once), whatever its count.
        Only when nobody can call its deleter any more."""
        if not self.freed:
            _LIVE.pop(self.address, None)
            self._final_calls = int(pylib.dlpackshim__counted_calls(self.counter))
            pylib.dlpackshim__counted_free(self.counter)
            self.freed = True
            self.mem = None


def _apply_struct_defect(mt: ManagedTensor, spec: TensorSpec) -> None:
    m = mt.managed
    t = m.dl_tensor
    if spec.null_strides and t.ndim > 0:
        t.strides = ffi.NULL
    if mt.versioned:
        m.version.major, m.version.minor = spec.version
    if not is_host_accessible(spec.device[0]):
        t.device.device_type, t.device.device_id = spec.device
    d = spec.defect
    if d is None:
        return
    if d == "version-major-2" and mt.versioned:
        m.version.major, m.version.minor = 2, 0
        t.ndim = 0x7FFFFFFF    # a consumer reading past flags meets garbage
        t.shape = ffi.NULL
        t.dtype.code = 250
    elif d == "ndim-negative":
        t.ndim = -1
    elif d == "ndim-huge":
        t.ndim = 0x7FFFFFFF
        t.shape = ffi.NULL
        t.strides = ffi.NULL
    elif d == "null-shape" and t.ndim > 0:
        t.shape = ffi.NULL
    elif d == "negative-extent" and t.ndim > 0:
        t.shape[0] = -3
    elif d == "overflowing-extents" and t.ndim > 1:
        t.shape[0] = 1 << 40
        t.shape[1] = 1 << 40
    elif d == "bad-dtype-code":
        t.dtype.code = 99
    elif d == "bad-dtype-bits":
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 7, 1
    elif d == "lanes-zero":
        t.dtype.lanes = 0
    elif d == "null-data":
        t.data = ffi.NULL
    elif d == "null-deleter":
        m.deleter = ffi.NULL
    elif d == "capsule-cuda":
        t.device.device_type, t.device.device_id = kDLCUDA, 0


# Which defects need a tensor of at least this many dimensions, or non-empty.
DEFECT_MIN_NDIM = {"null-shape": 1, "negative-extent": 1, "overflowing-extents": 2}
DEFECT_NONEMPTY = {"null-data"}
DEFECT_NEEDS_OBJECT = {"not-a-capsule", "ignores-copy", "dlpack-raises", "device-lie", "capsule-cuda",
                       "ignores-dl-device"} | set(EXCHANGE_DEFECTS)
DEFECT_VERSIONED_ONLY = {"version-major-2"}


def applicable(spec: TensorSpec) -> bool:
    """Whether spec's defect can be applied to its layout and protocol."""
    d = spec.defect
    if d is None:
        return True
    if len(spec.shape) < DEFECT_MIN_NDIM.get(d, 0):
        return False
    if d in DEFECT_NONEMPTY and numel(spec.shape) == 0:
        return False
    if d in DEFECT_NEEDS_OBJECT and spec.protocol.startswith("capsule"):
        return False
    if d in DEFECT_VERSIONED_ONLY and spec.protocol in ("legacy", "capsule-legacy"):
        return False
    return True


def _capsule_of(mt: ManagedTensor, spec: TensorSpec) -> Any:
    d = spec.defect
    if d in ("foreign-name", "used-name"):
        name = (b"not_a_dltensor" if d == "foreign-name" else
                b"used_dltensor_versioned" if mt.versioned else b"used_dltensor")
        # No destructor: a capsule that is nobody's to take is freed by its producer.
        return _CapsuleNew(mt.address, _static_name(name), None)
    cap = capsule_new(mt.address, 1 if mt.versioned else 0)
    if isinstance(cap, int):
        raise MemoryError("dlpackshim_capsule_new: " + ffi.string(lib.dlpackshim_last_error()).decode())
    return cap


def make_capsule(spec: TensorSpec, *, versioned: Optional[bool] = None,
                 mem: Optional[Storage] = None) -> Tuple[Any, ManagedTensor]:
    """A raw DLPack capsule for `spec` and the record counting its deleter.

    versioned: the capsule kind (default: ``spec.protocol == "capsule-versioned"``).
    mem: memory to view (default: fresh memory filled from ``spec.seed``).
    """
    if versioned is None:
        versioned = spec.versioned_capsule
    mem = Storage(spec) if mem is None else mem
    mt = ManagedTensor(spec, versioned, mem)
    return _capsule_of(mt, spec), mt


class Producer:
    """A DLPack producer (the array API 2023.12 ``__dlpack__``) of one spec.

    Each ``__dlpack__`` call exports a fresh C-built tensor viewing the same
    memory (:attr:`mem`); :attr:`tensors` holds their records and :attr:`calls`
    the keyword arguments of every call. ``max_version`` None or major 0 gets a
    legacy capsule (read-only data is refused with BufferError, as NumPy does),
    major >= 1 a versioned one. ``dl_device`` is honoured as CuPy does: its own
    device (or ``(kDLCPU, 0)`` for host-accessible memory) exports a view,
    ``(kDLCPU, 0)`` for device memory exports a host copy with IS_COPIED (a
    BufferError with ``copy=False``), any other device is a BufferError;
    ``copy=True`` exports a fresh copy with IS_COPIED.

    Device memory (a spec whose device is not host-accessible, or the
    ``ignores-dl-device`` defect, which lives on ``(kDLCUDA, 0)``) is host
    memory labelled with that device: a consumer must never read it as host
    memory, and this producer lets a test see whether it did.
    """

    def __init__(self, spec: TensorSpec) -> None:
        if spec.defect == "ignores-dl-device" and is_host_accessible(spec.device[0]):
            spec = spec.with_(device=(kDLCUDA, 0))
        self.spec = spec
        self.mem = Storage(spec)
        self.tensors: List[ManagedTensor] = []
        self.calls: List[Dict[str, Any]] = []

    @property
    def deleter_calls(self) -> int:
        """Deleter calls of every tensor exported so far."""
        return sum(t.deleter_calls for t in self.tensors)

    def _export(self, versioned: bool, copy: Any = None, to_host: bool = False) -> Any:
        spec = self.spec
        if spec.defect == "dlpack-raises":
            raise BufferError("this producer refuses to export (dlpackshim.testing)")
        if spec.defect == "not-a-capsule":
            return 12345
        if to_host or (copy and spec.defect != "ignores-copy"):
            mem = Storage(spec)
            spec2 = spec.with_(copied=True, readonly=False)
            if to_host:
                spec2 = spec2.with_(device=(kDLCPU, 0))
            mt = ManagedTensor(spec2, versioned, mem)
        else:
            mt = ManagedTensor(spec, versioned, self.mem)
        self.tensors.append(mt)
        return _capsule_of(mt, spec)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        self.calls.append(dict(stream=stream, max_version=max_version, dl_device=dl_device,
                               copy=copy))
        if max_version is not None and not (isinstance(max_version, tuple)
                                            and len(max_version) == 2):
            raise TypeError("max_version must be None or a 2-tuple")
        to_host = False
        if dl_device is not None and self.spec.defect != "ignores-dl-device":
            if not isinstance(dl_device, tuple):
                raise TypeError("dl_device must be a tuple")
            own = tuple(self.spec.device)
            if tuple(dl_device) == (kDLCPU, 0) and not is_host_accessible(own[0]):
                if copy is False:
                    raise BufferError(f"exporting {own} memory to the host needs a copy")
                to_host = True
            elif tuple(dl_device) != own and not (tuple(dl_device) == (kDLCPU, 0)
                                                  and is_host_accessible(own[0])):
                raise BufferError(f"cannot export to device {dl_device}")
        versioned = max_version is not None and max_version[0] >= 1
        if not versioned and self.spec.readonly and not copy:
            raise BufferError("cannot export read-only data through the legacy DLPack ABI")
        return self._export(versioned, copy, to_host)

    def __dlpack_device__(self) -> Tuple[int, int]:
        if self.spec.defect == "device-lie":
            return (kDLCUDA, 0)
        if self.spec.defect == "capsule-cuda":
            return (kDLCPU, 0)
        return tuple(self.spec.device)  # type: ignore[return-value]


class LegacyProducer(Producer):
    """A pre-2023 producer: ``__dlpack__(self, stream=None)`` (NumPy < 2.1,
    PyTorch < 2.4, JAX); other keywords are a TypeError from Python itself."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore[override]
        self.calls.append(dict(stream=stream))
        if self.spec.readonly:
            raise BufferError("cannot export read-only data through the legacy DLPack ABI")
        return self._export(False)


# ---- exchange tables -----------------------------------------------------------------

_XFFI = None


def _xffi() -> Any:
    global _XFFI
    if _XFFI is None:
        import cffi
        x = cffi.FFI()
        x.cdef("""
        typedef struct { uint32_t major; uint32_t minor; } XVersion;
        typedef struct XHeader { XVersion version; struct XHeader *prev_api; } XHeader;
        typedef struct { XHeader header; void *entries[5]; } XTable;
        """)
        _XFFI = x
    return _XFFI


_TABLES: Dict[str, Tuple[Any, ...]] = {}

def _null_result(out: Any) -> int:
    out[0] = _xffi().NULL
    return 0


# Per entry, in table order (dlpack.h 1.3's DLPackExchangeAPI): its C type and what
# it does in a "null-out" table (return 0, success, with no result).
_ENTRIES = (
    ("int(void *, void **, void *, void *)",          # managed_tensor_allocator
     lambda proto, out, ctx, set_error: _null_result(out)),
    ("int(void *, void **)",                          # managed_tensor_from_py_object_no_sync
     lambda obj, out: _null_result(out)),
    ("int(void *, void **)",                          # managed_tensor_to_py_object_no_sync
     lambda tensor, out: _null_result(out)),
    ("int(void *, void *)",                           # dltensor_from_py_object_no_sync:
     lambda obj, out: 0),                             # success, the DLTensor left unwritten
    ("int(int, int32_t, void **)",                    # current_work_stream
     lambda dev_type, dev_id, out: _null_result(out)),
)


def _fail_silently(*args: Any) -> int:
    return -1            # and no Python exception set: the entry lies about its error


def _exchange_capsule(kind: str) -> Any:
    """A capsule for ``__dlpack_c_exchange_api__`` that a consumer must survive:
    kind "major-2" (a version-2 table, every entry NULL), "bad-name" (a 1.3 table
    in a capsule of the wrong name), "null-entries" (1.3, every entry NULL),
    "fails-silently" (1.3, every entry returns -1 without setting an exception)
    or "null-out" (1.3, every entry returns 0 and leaves its result NULL).
    Tables, entries and capsules live for the process."""
    if kind not in _TABLES:
        x = _xffi()
        table = x.new("XTable *")
        table.header.version.major = 2 if kind == "major-2" else 1
        table.header.version.minor = 0 if kind == "major-2" else 3
        entries = []
        if kind in ("fails-silently", "null-out"):
            for i, (ctype, null_out) in enumerate(_ENTRIES):
                cb = x.callback(ctype, _fail_silently if kind == "fails-silently" else null_out,
                                error=-1)
                entries.append(cb)
                table.entries[i] = x.cast("void *", cb)
        name = b"not_dlpack_exchange_api" if kind == "bad-name" else b"dlpack_exchange_api"
        cap = _CapsuleNew(int(x.cast("uintptr_t", table)), _static_name(name), None)
        _TABLES[kind] = (table, cap, entries)
    return _TABLES[kind][1]


_EXCHANGE_TYPES: Dict[Tuple[str, type], type] = {}


def _with_exchange(cls: type, kind: str) -> type:
    key = (kind, cls)
    if key not in _EXCHANGE_TYPES:
        _EXCHANGE_TYPES[key] = type(f"{cls.__name__}WithExchange_{kind.replace('-', '_')}", (cls,),
                                    {"__dlpack_c_exchange_api__": _exchange_capsule(kind)})
    return _EXCHANGE_TYPES[key]


def make_producer(spec: TensorSpec) -> Tuple[Any, Any]:
    """``(obj, holder)``: what to give a consumer for `spec`, and what to ask for the
    deleter counts afterwards (``holder.deleter_calls``; ``holder.tensors``).

    Protocols "both" and "legacy" give a :class:`Producer` or
    :class:`LegacyProducer`; "capsule-versioned" and "capsule-legacy" a raw capsule
    (the holder is then a :class:`CapsuleHolder`).
    """
    if spec.protocol.startswith("capsule"):
        cap, mt = make_capsule(spec)
        return cap, CapsuleHolder([mt], mt.mem)
    cls: type = LegacyProducer if spec.protocol == "legacy" else Producer
    if spec.defect in EXCHANGE_DEFECTS:
        cls = _with_exchange(cls, EXCHANGE_DEFECTS[spec.defect])
    p = cls(spec)
    return p, p


@dataclass
class CapsuleHolder:
    """The records behind raw capsules (see :func:`make_producer`)."""

    tensors: List[ManagedTensor] = field(default_factory=list)
    mem: Optional[Storage] = None

    @property
    def deleter_calls(self) -> int:
        return sum(t.deleter_calls for t in self.tensors)
