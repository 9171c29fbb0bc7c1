"""Hand-written DLPack producers built with ctypes only.

This module is deliberately independent of dlpackshim: it defines the DLPack
1.3 ABI structs itself (from dlpack.h), allocates shape/strides/data with
ctypes, installs a deleter that is a ctypes callback counting its calls per
tensor, and builds PyCapsules through the C API (PyCapsule_New) with a
destructor that only calls the deleter while the capsule name is still the
unconsumed one.

Main entry points
-----------------
make_managed(...)   -> TensorRecord (the DLManagedTensor[Versioned] plus its memory)
make_capsule(...)   -> (capsule, TensorRecord)
VersionedProducer   -> object with __dlpack__(*, stream, max_version, dl_device, copy)
LegacyProducer      -> object with the pre-2023 signature __dlpack__(self, stream=None)
COUNTERS            -> global counters ("created", "deleted", "double", "unknown", ...)

Every TensorRecord has `deleter_calls` (exact count for that tensor, double
calls included) so tests can assert "deleter called exactly once".

Knobs to misbehave: version=(2, 0), null_strides, null_shape, ndim=..., byte_offset,
readonly/copied/padded flags (or raw flags=), null_deleter, arbitrary
dtype/device/shape/strides, null_data, capsule_name (foreign or "used_..."),
no capsule destructor, ignore_copy (a view, without IS_COPIED, for copy=True).

Limitation: a ctypes callback cannot preserve a pending Python exception (the
interpreter turns "returned a result with an exception set" into SystemError,
which ctypes prints and clears). So an unconsumed capsule of ours that dies
while a consumer is raising loses that exception; tests of rejected capsules
keep the capsule alive (keep_capsules=True, or a local variable). Such events
are counted: COUNTERS["destructor_error"] (destructor ran with an exception
pending) and COUNTERS["deleter_pending_exception"] (a consumer called our
deleter with an exception pending - a consumer bug: deleters must be called
"preserving any pending exception").
"""
from __future__ import annotations

import collections
import ctypes
import gc
import itertools
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_int, c_int32,
                    c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p,
                    py_object)

import pytest

# ---------------------------------------------------------------------------
# The ABI (dlpack.h 1.3)
# ---------------------------------------------------------------------------
DLPACK_MAJOR, DLPACK_MINOR = 1, 3

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2

# device types
kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL = 1, 2, 3, 4
kDLVulkan, kDLMetal, kDLVPI, kDLROCM, kDLROCMHost = 7, 8, 9, 10, 11
kDLExtDev, kDLCUDAManaged, kDLOneAPI, kDLWebGPU = 12, 13, 14, 15
kDLHexagon, kDLMAIA, kDLTrn = 16, 17, 18
HOST_ACCESSIBLE = (kDLCPU, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged)
DEVICE_TYPES = {
    "kDLCPU": 1, "kDLCUDA": 2, "kDLCUDAHost": 3, "kDLOpenCL": 4, "kDLVulkan": 7,
    "kDLMetal": 8, "kDLVPI": 9, "kDLROCM": 10, "kDLROCMHost": 11, "kDLExtDev": 12,
    "kDLCUDAManaged": 13, "kDLOneAPI": 14, "kDLWebGPU": 15, "kDLHexagon": 16,
    "kDLMAIA": 17, "kDLTrn": 18,
    "kDLTPU": 19, "kDLTPUHost": 20, "kDLAscend": 21,  # dlpack main, after 1.3
}

# dtype codes
DTYPE_CODES = {
    "kDLInt": 0, "kDLUInt": 1, "kDLFloat": 2, "kDLOpaqueHandle": 3, "kDLBfloat": 4,
    "kDLComplex": 5, "kDLBool": 6, "kDLFloat8_e3m4": 7, "kDLFloat8_e4m3": 8,
    "kDLFloat8_e4m3b11fnuz": 9, "kDLFloat8_e4m3fn": 10, "kDLFloat8_e4m3fnuz": 11,
    "kDLFloat8_e5m2": 12, "kDLFloat8_e5m2fnuz": 13, "kDLFloat8_e8m0fnu": 14,
    "kDLFloat6_e2m3fn": 15, "kDLFloat6_e3m2fn": 16, "kDLFloat4_e2m1fn": 17,
    "kDLBcomplex": 18,  # dlpack main, after 1.3
}

# (code, bits) pairs that dlpack.h 1.3 and the common libraries agree on.
VALID_DTYPES = (
    [(0, b) for b in (8, 16, 32, 64)]
    + [(1, b) for b in (8, 16, 32, 64)]
    + [(2, b) for b in (16, 32, 64)]
    + [(4, 16)]
    + [(5, 64), (5, 128)]
    + [(6, 8)]
    + [(c, 8) for c in range(7, 15)]
)
SUBBYTE_DTYPES = [(0, 4), (1, 4), (17, 4), (15, 6), (16, 6)]

_DELETER_V = CFUNCTYPE(None, c_void_p)   # void (*)(DLManagedTensorVersioned *)
_DELETER_L = CFUNCTYPE(None, c_void_p)   # void (*)(DLManagedTensor *)
_CAPSULE_DESTRUCTOR = CFUNCTYPE(None, c_void_p)  # void (*)(PyObject *), never py_object!


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", c_void_p),
        ("deleter", _DELETER_L),
    ]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", _DELETER_V),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


assert ctypes.sizeof(DLTensor) == 48, ctypes.sizeof(DLTensor)
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert DLManagedTensorVersioned.dl_tensor.offset == 32

# ---------------------------------------------------------------------------
# C API access (a private PyDLL so that argtypes set here do not leak into
# ctypes.pythonapi, which the package under test may use too)
# ---------------------------------------------------------------------------
_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)

PyCapsule_New = _api.PyCapsule_New
PyCapsule_New.restype = py_object
PyCapsule_New.argtypes = [c_void_p, c_void_p, _CAPSULE_DESTRUCTOR]

PyCapsule_IsValid = _api.PyCapsule_IsValid
PyCapsule_IsValid.restype = c_int
PyCapsule_IsValid.argtypes = [c_void_p, c_void_p]

PyCapsule_GetPointer = _api.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = c_void_p
PyCapsule_GetPointer.argtypes = [c_void_p, c_void_p]

PyCapsule_GetName = _api.PyCapsule_GetName
PyCapsule_GetName.restype = c_void_p
PyCapsule_GetName.argtypes = [c_void_p]

PyCapsule_SetName = _api.PyCapsule_SetName
PyCapsule_SetName.restype = c_int
PyCapsule_SetName.argtypes = [c_void_p, c_void_p]

_PyErr_Occurred = _api.PyErr_Occurred
_PyErr_Occurred.restype = c_void_p
_PyErr_Occurred.argtypes = []
_PyErr_Clear = _api.PyErr_Clear
_PyErr_Clear.restype = None
_PyErr_Clear.argtypes = []

_Py_IncRef = _api.Py_IncRef
_Py_IncRef.restype = None
_Py_IncRef.argtypes = [py_object]
_Py_DecRef = _api.Py_DecRef
_Py_DecRef.restype = None
_Py_DecRef.argtypes = [py_object]


def _leak(obj):
    """Keep obj alive forever (statically allocated, as capsule names must be)."""
    _Py_IncRef(obj)
    return obj


_STATIC_NAMES: dict[bytes, ctypes.Array] = {}


def static_name(name: bytes) -> int:
    """Address of a NUL-terminated copy of name that is never freed."""
    buf = _STATIC_NAMES.get(name)
    if buf is None:
        buf = _leak(ctypes.create_string_buffer(name))
        _STATIC_NAMES[name] = buf
    return ctypes.addressof(buf)


NAME_VERSIONED = b"dltensor_versioned"
NAME_LEGACY = b"dltensor"
for _n in (NAME_VERSIONED, NAME_LEGACY, b"used_dltensor_versioned", b"used_dltensor"):
    static_name(_n)


def capsule_name(cap) -> bytes | None:
    """The current name of a capsule (None for a NULL name)."""
    p = PyCapsule_GetName(id(cap))
    if not p:
        if _PyErr_Occurred():
            _PyErr_Clear()
        return None
    return ctypes.string_at(p)


# ---------------------------------------------------------------------------
# Global bookkeeping
# ---------------------------------------------------------------------------
_LOCK = threading.RLock()   # re-entrant: a deleter may run from gc inside a locked section
COUNTERS = collections.Counter()
_LIVE: dict[int, "TensorRecord"] = {}   # managed-struct address -> record
_DEAD: dict[int, "TensorRecord"] = {}   # same, for deleted records still in the graveyard
_GRAVEYARD = collections.deque()
_GRAVEYARD_MAX = 2048  # each record is ~10 GC-tracked objects: every gc.collect() of the suite walks them
_SERIAL = itertools.count(1)


def live_records():
    with _LOCK:
        return list(_LIVE.values())


def live_count() -> int:
    return len(_LIVE)


def reset_counters():
    with _LOCK:
        COUNTERS.clear()


# ---------------------------------------------------------------------------
# Test scaffolding shared by the suites that use these producers. The
# fixtures are opt-in: a test module gets them by importing them, e.g.
#     from producers import collect, no_double_delete  # noqa: F401
# ---------------------------------------------------------------------------
def collect(passes: int = 3):
    """Run the cyclic garbage collector `passes` times."""
    for _ in range(passes):
        gc.collect()


# COUNTERS that must not move during a test: each is a producer-bookkeeping error.
BOOKKEEPING_ERRORS = ("double", "unknown", "deleter_error", "destructor_error",
                      "deleter_pending_exception")


def no_double_delete_fixture(passes: int = 3):
    """An autouse fixture failing a test that moved a BOOKKEEPING_ERRORS counter
    (checked after collect(passes))."""
    @pytest.fixture(autouse=True)
    def no_double_delete():
        keys = BOOKKEEPING_ERRORS
        before = [COUNTERS[k] for k in keys]
        yield
        collect(passes)
        after = [COUNTERS[k] for k in keys]
        assert after == before, \
            f"producer bookkeeping broke: {dict(zip(keys, after))} was {before}"
    return no_double_delete


no_double_delete = no_double_delete_fixture()


def run_threads(target, args_list, timeout=None):
    """Runs target(*args) in one thread per args tuple, started together;
    returns the threads once each is joined (or `timeout` s passed)."""
    threads = [threading.Thread(target=target, args=tuple(args)) for args in args_list]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    return threads


def _bury(rec, _DEAD=_DEAD, _GRAVEYARD=_GRAVEYARD, _GRAVEYARD_MAX=_GRAVEYARD_MAX):
    """Keep the managed struct's memory after its deletion (bounded), so a
    double delete is detected and counted instead of reading freed memory."""
    _DEAD[rec.address] = rec
    _GRAVEYARD.append(rec)
    while len(_GRAVEYARD) > _GRAVEYARD_MAX:
        old = _GRAVEYARD.popleft()
        if _DEAD.get(old.address) is old:
            del _DEAD[old.address]


def _deleter_impl(addr, _PyErr_Occurred=_PyErr_Occurred, COUNTERS=COUNTERS, _LOCK=_LOCK,
                  _LIVE=_LIVE, _DEAD=_DEAD, _Py_DecRef=_Py_DecRef):
    # Everything it needs is bound as a default: the deleter may run during
    # interpreter shutdown, after this module's globals were cleared.
    try:
        try:
            _PyErr_Occurred()   # a PyDLL call raises the pending exception, if any
        except BaseException:
            COUNTERS["deleter_pending_exception"] += 1
        with _LOCK:
            rec = _LIVE.pop(addr, None)
            if rec is None:
                rec = _DEAD.get(addr)
                if rec is None:
                    COUNTERS["unknown"] += 1
                    return
                rec.deleter_calls += 1
                COUNTERS["double"] += 1
                return
            rec.deleter_calls += 1
            COUNTERS["deleted"] += 1
            if rec.on_delete is not None:
                try:
                    rec.on_delete(rec)
                except Exception:  # pragma: no cover - test hook
                    COUNTERS["on_delete_error"] += 1
            rec.keep = None       # drop data buffers / owners now
            rec.bury(rec)
            _Py_DecRef(rec)       # the reference make_managed took for the consumer
    except BaseException:  # never let an exception escape a C callback
        COUNTERS["deleter_error"] += 1


_DELETER_V_FN = _leak(_DELETER_V(_deleter_impl))
_DELETER_L_FN = _leak(_DELETER_L(_deleter_impl))


def _capsule_destructor_impl(cap):
    """The destructor of an unconsumed DLPack capsule: call the deleter unless
    the capsule was consumed (renamed "used_...") or never held a tensor."""
    try:
        _PyErr_Occurred()   # a PyDLL call raises the pending exception, if any
    except BaseException:
        # cannot be preserved from a ctypes callback (see the module docstring)
        COUNTERS["destructor_error"] += 1
    try:
        p = PyCapsule_GetName(cap)
        if not p:
            if _PyErr_Occurred():
                _PyErr_Clear()
            COUNTERS["destructor_null_name"] += 1
            return
        name = ctypes.string_at(p)
        if name.startswith(b"used_"):
            COUNTERS["destructor_skipped_used"] += 1
            return
        if not PyCapsule_IsValid(cap, p):
            return
        ptr = PyCapsule_GetPointer(cap, p)
        if not ptr:
            if _PyErr_Occurred():
                _PyErr_Clear()
            return
        with _LOCK:
            rec = _LIVE.get(ptr) or _DEAD.get(ptr)
        COUNTERS["destructor_deleted"] += 1
        if rec is not None and rec.null_deleter:
            return
        if rec is not None and rec.versioned:
            m = DLManagedTensorVersioned.from_address(ptr)
        elif rec is not None:
            m = DLManagedTensor.from_address(ptr)
        else:
            # unknown pointer (not made here): trust the name
            m = (DLManagedTensorVersioned if name.endswith(b"versioned")
                 else DLManagedTensor).from_address(ptr)
        if m.deleter:
            m.deleter(ptr)
    except BaseException:
        COUNTERS["destructor_error"] += 1


_CAPSULE_DESTRUCTOR_FN = _leak(_CAPSULE_DESTRUCTOR(_capsule_destructor_impl))
_NO_DESTRUCTOR = _CAPSULE_DESTRUCTOR()  # NULL


# ---------------------------------------------------------------------------
# Layout helpers
# ---------------------------------------------------------------------------
def element_bytes(bits: int, lanes: int = 1) -> int:
    """Bytes per element as dlpack.h's GetDataSize counts them."""
    return (bits * lanes + 7) // 8


def compact_strides(shape):
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(shape[i]), 1)
    return tuple(strides)


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def byte_span(shape, strides, itemsize):
    """[lo, hi) in bytes, relative to the first element, touched by the view."""
    if numel(shape) == 0:
        return 0, 0
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n <= 0:
            continue
        ext = (n - 1) * s * itemsize
        if ext < 0:
            lo += ext
        else:
            hi += ext
    return lo, hi + itemsize


def _address_of(data):
    """(address, keepalive) for supported data objects."""
    if data is None:
        return None, None
    if isinstance(data, int):
        return data, None
    ai = getattr(data, "__array_interface__", None)
    if ai is not None:
        return ai["data"][0], data
    if isinstance(data, ctypes.Array) or isinstance(data, ctypes._SimpleCData):
        return ctypes.addressof(data), data
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), c_void_p).value, data
    mv = memoryview(data)
    if mv.readonly:
        raise TypeError("read-only buffers other than bytes need an address")
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(arr), (data, arr)


def alloc_for(shape, strides, dtype, byte_offset=0, padded=False, fill=None):
    """(ctypes buffer, data address) big enough for the view described: the
    origin element sits at data + byte_offset; 256-byte aligned data when it can
    be. `fill` bytes are copied to the lowest byte the view touches."""
    code, bits, lanes = (tuple(dtype) + (1,))[:3]
    shape = tuple(shape)
    strides = compact_strides(shape) if strides is None else tuple(strides)
    itemsize = element_bytes(bits, lanes)
    valid = all(s >= 0 for s in shape) and len(strides) == len(shape)
    if bits * lanes < 8 and not padded:
        lo, hi = 0, ((numel(shape) * bits * lanes + 7) // 8 if valid else 0)
    else:
        lo, hi = byte_span(shape, strides, itemsize) if valid else (0, 0)
    need = hi - lo
    shift = max(0, -lo - int(byte_offset))
    raw, base = _aligned_buffer(int(byte_offset) + shift + max(need, 0) + 8)
    if fill is not None and need > 0:
        fill = bytes(fill)
        ctypes.memmove(base + shift + int(byte_offset) + lo, fill, min(len(fill), need))
    return raw, base + shift


def _aligned_buffer(nbytes, align=256):
    raw = (ctypes.c_uint8 * (nbytes + align))()
    addr = ctypes.addressof(raw)
    pad = (-addr) % align
    return raw, addr + pad


# ---------------------------------------------------------------------------
# Managed tensors
# ---------------------------------------------------------------------------
class TensorRecord:
    """One DLManagedTensor[Versioned] made here, with everything it owns."""

    __slots__ = ("serial", "versioned", "managed", "address", "deleter_calls",
                 "keep", "null_deleter", "data_address", "origin", "buffer",
                 "shape", "strides", "dtype", "device", "byte_offset", "flags",
                 "version", "on_delete", "bury", "__weakref__")

    def __init__(self):
        self.deleter_calls = 0
        self.on_delete = None

    @property
    def deleted(self):
        return self.deleter_calls > 0

    def __repr__(self):
        return (f"<TensorRecord #{self.serial} {'v' if self.versioned else 'legacy'}"
                f" shape={self.shape} dtype={self.dtype} deleter_calls={self.deleter_calls}>")


def make_managed(*, versioned=True, data=None, shape=(), strides=None, dtype=(2, 32, 1),
                 device=(1, 0), byte_offset=0, version=(DLPACK_MAJOR, DLPACK_MINOR),
                 readonly=False, copied=False, padded=False, flags=None,
                 null_deleter=False, null_strides=False, null_shape=False, ndim=None,
                 null_data=False, fill=None, keep=None, on_delete=None):
    """Build a DLManagedTensor(Versioned) with ctypes.

    data: None (allocate a zeroed, 256-byte aligned buffer big enough for the
    view, or `fill` bytes copied in), an int address, a numpy array, a ctypes
    object, bytes, or a writable buffer. shape/strides in elements; strides
    None = explicit compact strides. `ndim` overrides len(shape) (for invalid
    tensors). The record keeps `keep` and the data object alive until the
    deleter runs.
    """
    code, bits, lanes = (tuple(dtype) + (1,))[:3] if len(dtype) == 2 else tuple(dtype)
    shape = tuple(int(s) for s in shape)
    strides_t = compact_strides(shape) if strides is None else tuple(int(s) for s in strides)
    rec = TensorRecord()
    rec.serial = next(_SERIAL)
    rec.versioned = bool(versioned)
    rec.null_deleter = bool(null_deleter)
    rec.shape, rec.strides, rec.dtype = shape, (None if null_strides else strides_t), (code, bits, lanes)
    rec.device, rec.byte_offset, rec.version = tuple(device), int(byte_offset), tuple(version)
    rec.on_delete = on_delete
    keepalive = [keep]

    buffer = None
    if null_data:
        data_addr = None
    elif data is None:
        buffer, data_addr = alloc_for(shape, strides_t, (code, bits, lanes), byte_offset,
                                      padded=padded, fill=fill)
        keepalive.append(buffer)
    else:
        data_addr, ka = _address_of(data)
        keepalive.append(ka)
    rec.data_address = data_addr
    rec.origin = None if data_addr is None else data_addr + int(byte_offset)
    rec.buffer = buffer

    nd = len(shape) if ndim is None else int(ndim)
    shape_arr = (c_int64 * max(len(shape), 1))(*shape) if shape else (c_int64 * 1)()
    strides_arr = (c_int64 * max(len(strides_t), 1))(*strides_t) if strides_t else (c_int64 * 1)()
    keepalive += [shape_arr, strides_arr]

    if versioned:
        m = DLManagedTensorVersioned()
        m.version.major, m.version.minor = version
        if flags is None:
            flags = ((FLAG_READ_ONLY if readonly else 0) | (FLAG_IS_COPIED if copied else 0)
                     | (FLAG_IS_SUBBYTE_TYPE_PADDED if padded else 0))
        m.flags = flags
        m.deleter = _DELETER_V() if null_deleter else _DELETER_V_FN
    else:
        m = DLManagedTensor()
        m.deleter = _DELETER_L() if null_deleter else _DELETER_L_FN
        flags = 0
    rec.flags = flags
    t = m.dl_tensor
    t.data = data_addr
    t.device.device_type, t.device.device_id = device
    t.ndim = nd
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
    if not null_shape and (shape or nd > 0):
        t.shape = ctypes.cast(shape_arr, POINTER(c_int64))
    if not null_strides and (strides_t or nd > 0):
        t.strides = ctypes.cast(strides_arr, POINTER(c_int64))
    t.byte_offset = int(byte_offset)
    m.manager_ctx = rec.serial

    rec.managed = m
    rec.address = ctypes.addressof(m)
    rec.keep = keepalive
    rec.bury = _bury
    with _LOCK:
        _LIVE[rec.address] = rec
        COUNTERS["created"] += 1
    # Like a C producer's malloc: the managed tensor, its shape/strides and
    # data stay allocated until the deleter runs, even if this module is torn
    # down first at interpreter exit (the deleter drops this reference).
    _Py_IncRef(rec)
    if null_deleter:
        # Nobody will ever call a deleter: the producer keeps the memory.
        _NULL_DELETER_KEEP.append(rec)
    return rec


_NULL_DELETER_KEEP = collections.deque(maxlen=5000)


def make_capsule(*, versioned=True, capsule_name=None, destructor=True, **kw):
    """(capsule, record): a PyCapsule holding a fresh managed tensor.

    capsule_name: bytes to use instead of the standard name (foreign or
    "used_..." names). destructor=False makes a capsule without destructor.
    """
    rec = make_managed(versioned=versioned, **kw)
    name = capsule_name if capsule_name is not None else (
        NAME_VERSIONED if versioned else NAME_LEGACY)
    cap = PyCapsule_New(rec.address, static_name(name),
                        _CAPSULE_DESTRUCTOR_FN if destructor else _NO_DESTRUCTOR)
    return cap, rec


def managed_from_capsule(cap, versioned=None):
    """Read the DLManagedTensor[Versioned] a capsule points to (any name)."""
    p = PyCapsule_GetName(id(cap))
    ptr = PyCapsule_GetPointer(id(cap), p)
    name = ctypes.string_at(p) if p else b""
    if versioned is None:
        versioned = name.endswith(b"versioned")
    cls = DLManagedTensorVersioned if versioned else DLManagedTensor
    return cls.from_address(ptr)


def describe_capsule(cap):
    """A dict describing the tensor inside an (unconsumed or used) capsule."""
    name = capsule_name(cap)
    versioned = name.endswith(b"versioned")
    m = managed_from_capsule(cap, versioned)
    t = m.dl_tensor
    nd = t.ndim
    d = {
        "name": name,
        "versioned": versioned,
        "version": (m.version.major, m.version.minor) if versioned else None,
        "flags": m.flags if versioned else 0,
        "data": t.data or 0,
        "device": (t.device.device_type, t.device.device_id),
        "ndim": nd,
        "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
        "shape": tuple(t.shape[i] for i in range(nd)) if t.shape else None,
        "strides": tuple(t.strides[i] for i in range(nd)) if t.strides else None,
        "byte_offset": t.byte_offset,
        "has_deleter": bool(m.deleter),
    }
    return d


# ---------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------
class _ProducerBase:
    """Common state of the producers. Each __dlpack__ call makes a fresh
    managed tensor (recorded in self.records) viewing the same data."""

    def __init__(self, data=None, shape=(), dtype=(2, 32, 1), strides=None, byte_offset=0,
                 device=(1, 0), version=(DLPACK_MAJOR, DLPACK_MINOR), readonly=False,
                 copied=False, padded=False, flags=None, null_deleter=False,
                 null_strides=False, null_shape=False, ndim=None, null_data=False,
                 raise_on_dlpack=None, dlpack_device=None, capsule_name=None,
                 fill=None, keep=None, keep_capsules=False, ignore_copy=False):
        self.keep_capsules = keep_capsules
        self.ignore_copy = ignore_copy   # answer copy=True with a view (no IS_COPIED)
        self.capsules = []
        self.kw = dict(shape=shape, dtype=dtype, strides=strides, byte_offset=byte_offset,
                       device=device, version=version, padded=padded,
                       null_deleter=null_deleter, null_strides=null_strides,
                       null_shape=null_shape, ndim=ndim, null_data=null_data)
        self.readonly = readonly
        self.copied = copied
        self.flags = flags
        self.device = tuple(device)
        self.raise_on_dlpack = raise_on_dlpack
        self.dlpack_device = dlpack_device
        self.capsule_name = capsule_name
        self.calls = []
        self.records = []
        self.keep = keep
        if data is None and not null_data:
            # one shared buffer for all exports, so every export views the same memory
            self._buffer, data = alloc_for(shape, strides, dtype, byte_offset,
                                           padded=padded, fill=fill)
        self.data = data

    # -- helpers ---------------------------------------------------------
    @property
    def deleter_calls(self):
        return sum(r.deleter_calls for r in self.records)

    @property
    def exports(self):
        return len(self.records)

    @property
    def live_exports(self):
        return sum(1 for r in self.records if r.deleter_calls == 0)

    @property
    def data_address(self):
        return _address_of(self.data)[0] if self.data is not None else 0

    def _make(self, versioned, copy=None, device=None):
        data = self.data
        kw = dict(self.kw)
        if device is not None:
            kw["device"] = device
        if copy:
            # a real copy of the bytes the view spans (same layout, new memory)
            code, bits, lanes = (tuple(kw["dtype"]) + (1,))[:3]
            itemsize = element_bytes(bits, lanes)
            shape = kw["shape"]
            strides = kw["strides"] if kw["strides"] is not None else compact_strides(shape)
            lo, hi = byte_span(shape, strides, itemsize)
            if bits * lanes < 8 and not kw["padded"]:
                lo, hi = 0, (numel(shape) * bits * lanes + 7) // 8
            src = _address_of(data)[0] + kw["byte_offset"]
            raw, base = _aligned_buffer(hi - lo + kw["byte_offset"] + 8)
            if hi > lo:
                ctypes.memmove(base + kw["byte_offset"], src + lo, hi - lo)
            addr = base - lo
            rec = make_managed(versioned=versioned, data=addr, keep=raw,
                               readonly=False, copied=True, flags=self.flags, **kw)
        else:
            rec = make_managed(versioned=versioned, data=data,
                               keep=(self.keep, self.data, getattr(self, "_buffer", None)),
                               readonly=self.readonly, copied=self.copied, flags=self.flags,
                               **kw)
        self.records.append(rec)
        name = self.capsule_name if self.capsule_name is not None else (
            NAME_VERSIONED if versioned else NAME_LEGACY)
        cap = PyCapsule_New(rec.address, static_name(name), _CAPSULE_DESTRUCTOR_FN)
        if self.keep_capsules:
            # See "Limitation" in the module docstring: hold the capsule so it
            # cannot die while a consumer that rejected it is raising. Only
            # for tests of rejection: a consumer that keeps the consumed
            # capsule as the tensor's owner releases nothing until this list
            # is cleared.
            self.capsules.append(cap)
        return cap

    def __dlpack_device__(self):
        if self.dlpack_device is not None:
            return self.dlpack_device
        return self.device


class VersionedProducer(_ProducerBase):
    """A DLPack >= 1.0 producer (the array API 2023.12 signature).

    It answers max_version None/major 0 with a legacy capsule (refusing
    read-only data with BufferError, as NumPy does) and major >= 1 with a
    versioned capsule. dl_device other than its own (or (kDLCPU, 0) for
    host memory) -> BufferError. copy=True -> a fresh buffer with IS_COPIED.
    Every call's keyword arguments are appended to self.calls.
    """

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(dict(stream=stream, max_version=max_version,
                               dl_device=dl_device, copy=copy))
        if self.raise_on_dlpack is not None:
            raise self.raise_on_dlpack
        if max_version is not None and not (isinstance(max_version, tuple)
                                            and len(max_version) == 2):
            raise TypeError("max_version must be a 2-tuple")
        device = None
        if dl_device is not None:
            if not isinstance(dl_device, tuple):
                raise TypeError("dl_device must be a tuple")
            if tuple(dl_device) == (kDLCPU, 0) and self.device[0] in HOST_ACCESSIBLE:
                device = (kDLCPU, 0)     # pinned/managed host memory: same pointer
            elif tuple(dl_device) != self.device:
                raise BufferError(f"cannot export to device {dl_device}")
        versioned = max_version is not None and max_version[0] >= 1
        if not versioned and (self.readonly or (self.flags or 0) & FLAG_READ_ONLY):
            raise BufferError("cannot export read-only data through the legacy DLPack ABI")
        return self._make(versioned, copy=None if self.ignore_copy else copy, device=device)


class LegacyProducer(_ProducerBase):
    """A pre-2023 producer: __dlpack__(self, stream=None) only (NumPy 1.24,
    PyTorch 1.13, JAX). Unknown keywords raise TypeError from Python itself.
    readonly=True makes it refuse with BufferError, as NumPy 1.x did."""

    def __dlpack__(self, stream=None):
        self.calls.append(dict(stream=stream))
        if self.raise_on_dlpack is not None:
            raise self.raise_on_dlpack
        if self.readonly:
            raise BufferError("Cannot export readonly array since signalling readonly "
                              "is unsupported by DLPack.")
        return self._make(False)


class CapsuleReturningProducer:
    """__dlpack__ returns whatever `fn(**kwargs)` returns (a capsule or
    garbage); __dlpack_device__ returns `device` (or is absent when device is
    the string "missing" - use make_producer_class for that)."""

    def __init__(self, fn, device=(1, 0)):
        self.fn = fn
        self.device = device
        self.calls = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        kw = dict(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        self.calls.append(kw)
        return self.fn(**kw)

    def __dlpack_device__(self):
        return self.device


class NoDeviceProducer:
    """Has __dlpack__ (versioned) but no __dlpack_device__ at all."""

    def __init__(self, **kw):
        self._inner = VersionedProducer(**kw)

    @property
    def records(self):
        return self._inner.records

    @property
    def deleter_calls(self):
        return self._inner.deleter_calls

    @property
    def calls(self):
        return self._inner.calls

    def __dlpack__(self, **kw):
        return self._inner.__dlpack__(**kw)


class HangsOnCopy:
    """A NumPy array whose copy=True export never returns (a stuck device
    sync, a deadlock): `python -m dlpackshim check --timeout` reports it."""

    def __init__(self):
        import numpy
        self.a = numpy.arange(6.0)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kw):
        if kw.get("copy"):
            import time
            time.sleep(3600)
        return self.a.__dlpack__(**kw)


class AbortsOnViews:
    """A NumPy array whose views abort the process when exported: what a
    producer whose views' strides reach memory it does not have does to
    whatever reads them, without a read a sanitizer would report. Sliceable
    and transposable, so that `python -m dlpackshim check` exports views."""

    def __init__(self, a=None, view=False):
        import numpy
        self.a = numpy.arange(12.0).reshape(3, 4) if a is None else a
        self.view = view

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)

    def __getitem__(self, index):
        return AbortsOnViews(self.a[index], True)

    def transpose(self, perm):
        return AbortsOnViews(self.a.transpose(perm), True)

    def __array__(self, *args, **kw):
        import numpy
        return numpy.asarray(self.a, *args, **kw)

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kw):
        if self.view:
            import os
            os.abort()
        return self.a.__dlpack__(**kw)


# ---- an exchange table whose entry exports and also sets an exception --------------

# C, since a Python callback cannot leave an exception set (ctypes reports and
# clears it); CPython's functions are resolved from the running interpreter,
# so no Python.h is needed.
_EXPORT_AND_RAISE_C = r"""
typedef struct { unsigned major, minor; void *prev; } header;
typedef struct { header h; void *e[5]; } table;
extern void PyErr_SetString(void *, const char *);
extern void *PyExc_RuntimeError;
static table copy;
static const table *real;
static int from_py(void *obj, void **out) {
  int rc = ((int (*)(void *, void **))real->e[1])(obj, out);
  PyErr_SetString(PyExc_RuntimeError, "set after a successful export");
  return rc;
}
void *export_and_raise(const void *of) {
  real = of;
  copy = *real;
  copy.e[1] = (void *)from_py;
  return &copy;
}
"""
_KEEP = []  # the compiled helpers and capsule names: the tables point into them


def compile_shared(source: str, path, *flags: str) -> str:
    """`source` (C) built into the shared library `path` with the system's
    compiler (and `flags`); the test is skipped where there is none (the suite also runs
    from wheels on machines without one). The compiler runs without the
    sanitizer runtime `make check-asan` preloads: its own leaks would be
    reported as the suite's."""
    import os
    import shutil
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    c_file = str(path) + ".c"
    with open(c_file, "w") as f:
        f.write(source)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS")}
    subprocess.run([cc, "-shared", "-fPIC", *flags, "-o", str(path), c_file], check=True, env=env)
    return str(path)


def export_and_raise_table(real_table: int, tmp_path) -> object:
    """A capsule for ``__dlpack_c_exchange_api__``: a copy of the 1.x table at
    address `real_table` whose managed_tensor_from_py_object_no_sync exports
    through the real one and then sets a RuntimeError, returning 0."""
    so = compile_shared(_EXPORT_AND_RAISE_C, tmp_path / "entry.so")
    helper = ctypes.PyDLL(so)
    helper.export_and_raise.restype = ctypes.c_void_p
    helper.export_and_raise.argtypes = [ctypes.c_void_p]
    name = ctypes.create_string_buffer(b"dlpack_exchange_api")
    _KEEP.append((helper, name))
    new_capsule = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle).PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return new_capsule(helper.export_and_raise(real_table), ctypes.addressof(name), None)
