"""The capsule half of libdlpackshim's C API, driven through plain ctypes.

No cffi and no ``dlpackshim`` package here: these tests pin down what the C
library itself promises (csrc/dlpackshim.h, "Python capsules"), against NumPy
and PyTorch as real producers and consumers. The library is loaded from
``$DLPACKSHIM_LIBRARY`` (``make check`` sets it), else from the dlpackshim
package under test (see conftest.py), else from the build tree.

Two bindings of the same library are used, as a real caller would:
``C`` (``ctypes.CDLL``: the GIL is released during the call, like ABI-mode
cffi) for the functions that take the GIL themselves, and ``P``
(``ctypes.PyDLL``: the GIL is kept) for those that return a new reference.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
import sys
import threading
import weakref

import pytest

np = pytest.importorskip("numpy")  # the producer and consumer these tests drive

try:
    import torch
except ImportError:  # pragma: no cover - torch is in the dev venv
    torch = None

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_python



def _library() -> str:
    """The library under test, found as dlpackshim._ffi finds it but without
    importing the package: $DLPACKSHIM_LIBRARY, else the copy bundled in the
    dlpackshim package under test (conftest.py chose it), else the build tree's."""
    override = os.environ.get("DLPACKSHIM_LIBRARY")
    if override:
        return override
    spec = importlib.util.find_spec("dlpackshim")
    if spec is not None and spec.origin:
        bundled = os.path.join(os.path.dirname(spec.origin), "libdlpackshim.so.2")
        if os.path.exists(bundled):
            return bundled
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "csrc", ".libs", "libdlpackshim.so.2")


LIBRARY = _library()
C = ctypes.CDLL(LIBRARY)
P = ctypes.PyDLL(LIBRARY)

# ---- status codes and flags (csrc/dlpackshim.h) --------------------------
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_INVALID_TENSOR = -3
ERR_VERSION = -5
ERR_CAPSULE = -6
ERR_TYPE = -8
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
kDLCPU = 1


# ---- the DLPack structs ---------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # raw, so that tests can clear and restore it
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensorVersioned) == 80
assert ctypes.sizeof(DLManagedTensor) == 64

RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # deleter(self), GIL released
i64p = ctypes.POINTER(ctypes.c_int64)
ssize = ctypes.c_ssize_t


def _bind(lib, name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_NEW_ARGS = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, i64p, i64p,
             ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint64]
tensor_new = _bind(C, "dlpackshim_tensor_new", ctypes.c_void_p,
                   _NEW_ARGS + [ctypes.c_uint64, ctypes.c_void_p, RELEASE])
tensor_new_legacy = _bind(C, "dlpackshim_tensor_new_legacy", ctypes.c_void_p,
                          _NEW_ARGS + [ctypes.c_void_p, RELEASE])
tensor_free = _bind(C, "dlpackshim_tensor_free", None, [ctypes.c_void_p])
tensor_free_legacy = _bind(C, "dlpackshim_tensor_free_legacy", None, [ctypes.c_void_p])
last_error = _bind(C, "dlpackshim_last_error", ctypes.c_char_p, [])
last_status = _bind(C, "dlpackshim_last_status", ctypes.c_int, [])
clear_error = _bind(C, "dlpackshim_clear_error", None, [])
python_available = _bind(C, "dlpackshim_python_available", ctypes.c_int, [])
capsule_consume = _bind(C, "dlpackshim_capsule_consume", ctypes.c_int,
                        [ssize, ctypes.POINTER(ctypes.c_void_p)])
capsule_import = _bind(C, "dlpackshim_capsule_import", ssize, [ssize])
owner_info = _bind(C, "dlpackshim_owner_info", ctypes.c_int,
                   [ssize, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                    ctypes.POINTER(ctypes.c_uint64)])
owner_tensor = _bind(C, "dlpackshim_owner_tensor", ssize, [ssize])
py_retain = _bind(C, "dlpackshim_py_retain", None, [ssize])
py_release = _bind(C, "dlpackshim_py_release", None, [ctypes.c_void_p])
capsule_new = _bind(P, "dlpackshim_capsule_new", ctypes.py_object, [ctypes.c_void_p, ctypes.c_int])
capsule_export = _bind(P, "dlpackshim_capsule_export", ctypes.py_object,
                       [ssize, ssize, ctypes.c_uint64, ctypes.c_int])
capsule_export_copy = _bind(P, "dlpackshim_capsule_export_copy", ctypes.py_object,
                            [ssize, ctypes.c_uint64, ctypes.c_int])
# dlpackshim_py_release as a release callback for dlpackshim_tensor_new.
PY_RELEASE = RELEASE(ctypes.cast(C.dlpackshim_py_release, ctypes.c_void_p).value)

# CPython's own capsule API, GIL held (pythonapi is a PyDLL).
_api = ctypes.pythonapi
Capsule_GetName = _bind(_api, "PyCapsule_GetName", ctypes.c_char_p, [ctypes.py_object])
Capsule_GetPointer = _bind(_api, "PyCapsule_GetPointer", ctypes.c_void_p,
                           [ctypes.py_object, ctypes.c_char_p])
Capsule_SetName = _bind(_api, "PyCapsule_SetName", ctypes.c_int, [ctypes.py_object, ctypes.c_void_p])
Capsule_New = _bind(_api, "PyCapsule_New", ctypes.py_object,
                    [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])

# Capsule names must outlive their capsules: module-level buffers.
_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"foreign_tensor", b"used_dltensor", b"used_dltensor_versioned",
           b"dltensor_versioned", b"dltensor")}


def name_ptr(name: bytes) -> int:
    return ctypes.addressof(_NAMES[name])


# ---- helpers -------------------------------------------------------------
_DTYPE_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


def dl_dtype(dtype: np.dtype) -> tuple[int, int, int]:
    return _DTYPE_CODES[dtype.kind], dtype.itemsize * 8, 1


class Counter:
    """A release callback that counts its calls (owner is ignored)."""

    def __init__(self) -> None:
        self.n = 0
        self.cb = RELEASE(self._release)

    def _release(self, owner) -> None:
        self.n += 1


def _layout(arr: np.ndarray):
    shape = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
    strides = (ctypes.c_int64 * max(arr.ndim, 1))(*(s // arr.itemsize for s in arr.strides))
    return shape, strides


def new_tensor(arr: np.ndarray, counter: Counter | None = None, *, flags: int = 0,
               legacy: bool = False) -> int:
    """A managed tensor viewing arr's memory (the caller keeps arr alive)."""
    shape, strides = _layout(arr)
    code, bits, lanes = dl_dtype(arr.dtype)
    release = counter.cb if counter is not None else RELEASE()
    if legacy:
        t = tensor_new_legacy(arr.ctypes.data, kDLCPU, 0, arr.ndim, shape, strides, code, bits,
                              lanes, 0, None, release)
    else:
        t = tensor_new(arr.ctypes.data, kDLCPU, 0, arr.ndim, shape, strides, code, bits, lanes, 0,
                       flags, None, release)
    assert t, last_error()
    return t


def dltensor_of(arr: np.ndarray, *, null_strides: bool = False):
    """A DLTensor describing arr; returns (struct, keepalive)."""
    shape, strides = _layout(arr)
    code, bits, lanes = dl_dtype(arr.dtype)
    t = DLTensor(arr.ctypes.data, DLDevice(kDLCPU, 0), arr.ndim, DLDataType(code, bits, lanes),
                 ctypes.cast(shape, i64p), None if null_strides else ctypes.cast(strides, i64p), 0)
    return t, (shape, strides)


class Producer:
    """Hands out one ready capsule through __dlpack__, and forgets it."""

    def __init__(self, capsule) -> None:
        self.capsule = capsule

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return (kDLCPU, 0)


def consume(capsule):
    """dlpackshim_capsule_consume -> (status, managed tensor address)."""
    out = ctypes.c_void_p(12345)
    st = capsule_consume(id(capsule), ctypes.byref(out))
    return st, out.value


def info(capsule):
    major, minor, flags = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint64()
    st = owner_info(id(capsule), ctypes.byref(major), ctypes.byref(minor), ctypes.byref(flags))
    return st, major.value, minor.value, flags.value


def managed(address: int, versioned: bool):
    return (DLManagedTensorVersioned if versioned else DLManagedTensor).from_address(address)


def shape_of(t: DLTensor):
    return tuple(t.shape[i] for i in range(t.ndim))


def strides_of(t: DLTensor):
    return None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))


def collect():
    gc.collect()


def capsule_name(capsule) -> bytes:
    return Capsule_GetName(capsule)


# ---- the interpreter is found at run time ----------------------------------
def test_python_is_available_inside_python():
    assert python_available() == 1


# ---- capsules we produce: dlpackshim_capsule_new -------------------------
@pytest.mark.parametrize("versioned", [1, 0])
def test_capsule_new_names_the_capsule_by_abi(versioned):
    a = np.arange(6.0)
    counter = Counter()
    t = new_tensor(a, counter, legacy=not versioned)
    cap = capsule_new(t, versioned)
    assert capsule_name(cap) == (b"dltensor_versioned" if versioned else b"dltensor")
    assert Capsule_GetPointer(cap, capsule_name(cap)) == t
    assert counter.n == 0
    del cap
    collect()
    assert counter.n == 1  # an unconsumed capsule deletes its tensor, once


def test_capsule_new_null_tensor_is_value_error():
    with pytest.raises(ValueError, match="NULL"):
        capsule_new(None, 1)


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("versioned", [1, 0])
def test_numpy_consumes_our_capsule_sharing_memory(versioned):
    a = np.arange(12.0).reshape(3, 4)
    counter = Counter()
    cap = capsule_new(new_tensor(a, counter, legacy=not versioned), versioned)
    b = np.from_dlpack(Producer(cap))
    assert capsule_name(cap).startswith(b"used_")
    assert info(cap)[0] == ERR_CAPSULE  # NumPy owns the tensor now, not this capsule
    del cap
    collect()
    assert counter.n == 0  # the consumed capsule left the tensor to NumPy
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    if versioned:  # a legacy import is read-only in NumPy >= 2.3
        b[1, 2] = -1.0
        assert a[1, 2] == -1.0
    del b
    collect()
    assert counter.n == 1


@pytest.mark.numpy_min("2.1")
def test_numpy_honours_read_only_flag_of_our_capsule():
    a = np.arange(4.0)
    counter = Counter()
    cap = capsule_new(new_tensor(a, counter, flags=FLAG_READ_ONLY), 1)
    b = np.from_dlpack(Producer(cap))
    del cap
    assert not b.flags.writeable
    del b
    collect()
    assert counter.n == 1


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("versioned", [1, 0])
def test_torch_consumes_our_capsule_sharing_memory(versioned):
    a = np.arange(10, dtype=np.int32)[::2]  # strided view
    counter = Counter()
    cap = capsule_new(new_tensor(a, counter, legacy=not versioned), versioned)
    t = torch.from_dlpack(Producer(cap))
    del cap
    collect()
    assert counter.n == 0
    assert t.data_ptr() == a.ctypes.data
    assert t.stride() == (2,)
    assert t.tolist() == a.tolist()
    t[1] = 99
    assert a[1] == 99
    del t  # PyTorch calls the deleter without the GIL: the ctypes callback takes it
    collect()
    assert counter.n == 1


# ---- consuming: dlpackshim_capsule_consume / import ------------------------
VIEWS = {
    "contiguous": lambda: np.arange(24, dtype=np.float32).reshape(4, 6),
    "column_step": lambda: np.arange(24, dtype=np.int64).reshape(4, 6)[:, ::2],
    "reversed": lambda: np.arange(24, dtype=np.int16).reshape(4, 6)[::-1],
    "transposed": lambda: np.arange(24, dtype=np.float64).reshape(4, 6).T,
    "scalar": lambda: np.array(3.5),
    "empty": lambda: np.zeros((0, 3), dtype=np.uint8),
}


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("versioned", [True, False])
def test_consume_numpy_capsule_reads_its_layout(view, versioned):
    a = VIEWS[view]()
    base = a.base if a.base is not None else a
    refs = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    st, address = consume(cap)
    assert st == (1 if versioned else 0), last_error()
    assert capsule_name(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    m = managed(address, versioned)
    t = m.dl_tensor
    assert t.ndim == a.ndim
    assert shape_of(t) == a.shape
    if t.strides:
        assert strides_of(t) == tuple(s // a.itemsize for s in a.strides) or a.size == 0
    else:
        assert a.flags.c_contiguous
    assert (t.data or 0) + t.byte_offset == a.ctypes.data or a.size == 0
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == dl_dtype(a.dtype)
    assert t.device.device_type == kDLCPU
    assert info(cap) == ((1, m.version.major, m.version.minor, m.flags) if versioned
                         else (0, 0, 0, FLAG_READ_ONLY))  # legacy: writability unknown
    # NumPy's manager holds a reference to the array until its deleter runs:
    assert sys.getrefcount(a) > refs
    del cap, m, t
    collect()
    assert sys.getrefcount(a) == refs  # the owner capsule called the deleter, exactly once
    del base


@pytest.mark.numpy_min("2.1")
def test_consume_read_only_numpy_array_reports_the_flag():
    a = np.arange(5.0)
    a.flags.writeable = False
    cap = a.__dlpack__(max_version=(1, 0))
    st, _ = consume(cap)
    assert st == 1
    st, major, _minor, flags = info(cap)
    assert (st, major) == (1, 1)
    assert flags & FLAG_READ_ONLY


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("versioned", [True, False])
def test_consume_torch_capsule_reads_its_layout(versioned):
    x = torch.arange(30, dtype=torch.float32).reshape(5, 6)[1:, ::3]
    cap = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    st, address = consume(cap)
    assert st == (1 if versioned else 0), last_error()
    assert capsule_name(cap).startswith(b"used_")
    t = managed(address, versioned).dl_tensor
    assert shape_of(t) == tuple(x.shape)
    assert strides_of(t) == tuple(x.stride())
    assert t.data + t.byte_offset == x.data_ptr()
    assert (t.dtype.code, t.dtype.bits) == (2, 32)


@pytest.mark.numpy_min("2.1")
def test_import_returns_the_dltensor_address():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:]
    cap = a.__dlpack__(max_version=(1, 0))
    address = capsule_import(id(cap))
    assert address != 0, last_error()
    t = DLTensor.from_address(address)
    assert t.data + t.byte_offset == a.ctypes.data
    assert shape_of(t) == (3, 3)
    assert strides_of(t) == (4, 1)
    assert capsule_name(cap) == b"used_dltensor_versioned"
    # the address is the snapshot the capsule's record holds, taken at import;
    # the version and flags are the producer's
    st, major, minor, flags = info(cap)
    assert (st, major) == (1, 1) and not flags

    legacy = a.__dlpack__()
    address_l = capsule_import(id(legacy))
    assert address_l != 0
    assert DLManagedTensor.from_address(address_l).dl_tensor.data == t.data
    assert info(legacy) == (0, 0, 0, FLAG_READ_ONLY)
    # what only the capsule was kept for: the same address again
    assert owner_tensor(id(cap)) == address
    assert owner_tensor(id(legacy)) == address_l


@pytest.mark.numpy_min("2.1")
def test_owner_tensor_refuses_what_dlpackshim_does_not_own():
    a = np.arange(3.0)
    fresh = a.__dlpack__(max_version=(1, 0))
    clear_error()
    assert owner_tensor(id(fresh)) == 0
    assert last_status() == ERR_CAPSULE
    assert b"not a capsule owning a tensor" in last_error()
    assert capsule_name(fresh) == b"dltensor_versioned"  # left untouched
    assert owner_tensor(id(object())) == 0
    assert last_status() == ERR_TYPE
    assert owner_tensor(0) == 0
    assert last_status() == ERR_INVALID_ARGUMENT
    # a capsule another consumer took: the used_ name, but not our destructor
    assert Capsule_SetName(fresh, name_ptr(b"used_dltensor_versioned")) == 0
    try:
        assert owner_tensor(id(fresh)) == 0
        assert last_status() == ERR_CAPSULE
    finally:  # give it back to NumPy's destructor
        Capsule_SetName(fresh, name_ptr(b"dltensor_versioned"))


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("versioned", [True, False])
def test_consuming_twice_is_a_capsule_error(versioned):
    a = np.arange(3.0)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    assert consume(cap)[0] >= 0
    clear_error()
    st, address = consume(cap)
    assert (st, address) == (ERR_CAPSULE, None)
    assert last_status() == ERR_CAPSULE
    assert b"already consumed" in last_error()
    clear_error()
    assert capsule_import(id(cap)) == 0
    assert last_status() == ERR_CAPSULE
    assert b"already consumed" in last_error()


@pytest.mark.parametrize("obj, type_name", [([], b"list"), (3, b"int"), (np.arange(2), b"ndarray"),
                                            (object(), b"object")])
def test_consuming_a_non_capsule_is_a_type_error(obj, type_name):
    clear_error()
    st, address = consume(obj)
    assert (st, address) == (ERR_TYPE, None)
    assert b"expected a DLPack PyCapsule" in last_error()
    assert type_name in last_error()
    assert capsule_import(id(obj)) == 0
    assert last_status() == ERR_TYPE


def test_consume_null_arguments():
    assert capsule_consume(0, ctypes.byref(ctypes.c_void_p())) == ERR_INVALID_ARGUMENT
    cap = np.arange(2.0).__dlpack__()
    assert capsule_consume(id(cap), None) == ERR_INVALID_ARGUMENT
    assert capsule_name(cap) == b"dltensor"  # untouched: no ownership taken
    assert capsule_import(0) == 0
    assert last_status() == ERR_INVALID_ARGUMENT


@pytest.mark.parametrize("name", [b"foreign_tensor", b"used_dltensor"])
def test_capsule_with_another_name_is_refused_and_not_deleted(name):
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter)
    cap = Capsule_New(t, name_ptr(name), None)
    clear_error()
    st, _ = consume(cap)
    assert st == ERR_CAPSULE
    if name == b"foreign_tensor":
        assert b"foreign_tensor" in last_error()
    else:
        assert b"already consumed" in last_error()
    assert capsule_name(cap) == name  # not renamed
    del cap
    collect()
    assert counter.n == 0  # the deleter was not ours to call
    tensor_free(t)
    assert counter.n == 1


negotiate_version = _bind(C, "dlpackshim_negotiate_version", ctypes.c_int,
                          [ctypes.c_uint32] * 4 + [ctypes.POINTER(ctypes.c_uint32)] * 2)


def test_caller_sets_the_negotiated_minor_version_after_tensor_new():
    """The documented rule: tensor_new stamps 1.3; before handing the tensor
    over the caller may write the minor version negotiated with the consumer,
    and the consumer sees it."""
    major, minor = ctypes.c_uint32(), ctypes.c_uint32()
    assert negotiate_version(1, 3, 1, 1, ctypes.byref(major), ctypes.byref(minor)) == 0
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter)
    m = DLManagedTensorVersioned.from_address(t)
    assert (m.version.major, m.version.minor) == (1, 3)
    m.version.minor = minor.value
    cap = capsule_new(t, 1)
    assert consume(cap)[0] == 1  # versioned, validated, taken
    assert info(cap) == (1, 1, 1, 0)  # the consumer reads version 1.1
    del cap, m
    collect()
    assert counter.n == 1
    # NumPy, a consumer of its own, takes the 1.1 tensor too.
    t = new_tensor(a, counter)
    DLManagedTensorVersioned.from_address(t).version.minor = 1
    assert np.from_dlpack(Producer(capsule_new(t, 1))).tolist() == a.tolist()
    collect()
    assert counter.n == 2


def test_unsupported_major_version_is_deleted_at_once():
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter)
    DLManagedTensorVersioned.from_address(t).version.major = 2
    DLManagedTensorVersioned.from_address(t).version.minor = 7
    cap = capsule_new(t, 1)
    clear_error()
    st, address = consume(cap)
    assert (st, address) == (ERR_VERSION, None)
    assert counter.n == 1
    msg = last_error()
    assert b"2.7" in msg and b"1.3" in msg
    assert capsule_name(cap) == b"used_dltensor_versioned"  # ownership was taken
    assert info(cap)[0] == ERR_CAPSULE  # ... and the tensor is gone: no owner to ask
    del cap
    collect()
    assert counter.n == 1  # never twice


def _break_ndim(t: DLTensor):
    t.ndim = -1


def _break_dtype(t: DLTensor):
    t.dtype.code = 99


def _break_shape(t: DLTensor):
    t.shape[0] = -3


def _break_data(t: DLTensor):
    t.data = None


@pytest.mark.parametrize("breaker, said", [(_break_ndim, b"ndim"), (_break_dtype, b"99"),
                                           (_break_shape, b"-3"), (_break_data, b"data")])
@pytest.mark.parametrize("versioned", [True, False])
def test_invalid_tensor_is_deleted_once_and_reported(breaker, said, versioned):
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter, legacy=not versioned)
    breaker(managed(t, versioned).dl_tensor)
    cap = capsule_new(t, int(versioned))
    clear_error()
    assert capsule_import(id(cap)) == 0
    assert last_status() == ERR_INVALID_TENSOR
    assert last_error().startswith(b"invalid DLPack tensor: ")
    assert said in last_error()  # the validator's own words, kept across the deleter call
    assert counter.n == 1
    assert capsule_name(cap).startswith(b"used_")
    assert consume(cap)[0] == ERR_CAPSULE  # a second try must not reach the freed tensor
    del cap
    collect()
    assert counter.n == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_null_deleter_is_never_called(versioned):
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter, legacy=not versioned)
    m = managed(t, versioned)
    deleter, m.deleter = m.deleter, None
    # consumed: the owner capsule skips the NULL deleter
    cap = capsule_new(t, int(versioned))
    assert consume(cap)[0] == int(versioned)
    del cap
    collect()
    # never consumed: the producer capsule skips it too
    cap = capsule_new(t, int(versioned))
    del cap
    collect()
    assert counter.n == 0
    DELETER(deleter)(t)  # the real deleter is still ours to call: once
    assert counter.n == 1


def test_null_deleter_with_bad_version_is_not_called():
    a = np.arange(4.0)
    counter = Counter()
    t = new_tensor(a, counter)
    m = managed(t, True)
    deleter, m.deleter = m.deleter, None
    m.version.major = 3
    cap = capsule_new(t, 1)
    assert consume(cap)[0] == ERR_VERSION
    del cap
    collect()
    assert counter.n == 0
    DELETER(deleter)(t)
    assert counter.n == 1


# ---- exporting: dlpackshim_capsule_export -----------------------------------
@pytest.mark.numpy_min("2.1")
def test_export_keeps_the_owner_alive_until_the_consumer_dies():
    a = np.arange(12.0).reshape(3, 4)
    alive = weakref.ref(a)
    dlt, keep = dltensor_of(a)
    refs = sys.getrefcount(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, 1)
    assert capsule_name(cap) == b"dltensor_versioned"
    assert sys.getrefcount(a) == refs + 1
    data = a.ctypes.data
    del a
    collect()
    assert alive() is not None  # the capsule holds it
    b = np.from_dlpack(Producer(cap))
    del cap
    collect()
    assert alive() is not None  # now the consumer holds it
    assert b.ctypes.data == data
    np.testing.assert_array_equal(b, np.arange(12.0).reshape(3, 4))
    del b
    collect()
    assert alive() is None


@pytest.mark.parametrize("versioned", [1, 0])
def test_unconsumed_export_releases_the_owner(versioned):
    a = np.arange(5, dtype=np.int8)
    dlt, keep = dltensor_of(a)
    refs = sys.getrefcount(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, versioned)
    assert capsule_name(cap) == (b"dltensor_versioned" if versioned else b"dltensor")
    assert sys.getrefcount(a) == refs + 1
    del cap
    collect()
    assert sys.getrefcount(a) == refs


@pytest.mark.parametrize("versioned", [1, 0])
def test_export_copies_shape_and_fills_compact_strides(versioned):
    a = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    dlt, (shape, _) = dltensor_of(a, null_strides=True)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, versioned)
    shape[0] = 99  # the capsule has its own copy
    st, address = consume(cap)
    assert st == versioned
    m = managed(address, bool(versioned))
    t = m.dl_tensor
    assert shape_of(t) == (2, 3, 4)
    assert strides_of(t) == (12, 4, 1)
    assert t.data == a.ctypes.data and t.byte_offset == 0
    assert ctypes.addressof(t.shape.contents) != ctypes.addressof(shape)
    if versioned:
        assert (m.version.major, m.version.minor, m.flags) == (1, 3, 0)


@pytest.mark.numpy_min("2.1")
def test_export_of_0d_tensor():
    a = np.array(7, dtype=np.int64)
    dlt, keep = dltensor_of(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, 1)
    b = np.from_dlpack(Producer(cap))
    assert b.shape == () and int(b) == 7


@pytest.mark.numpy_min("2.1")
def test_export_read_only_versioned_is_read_only_in_numpy():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), FLAG_READ_ONLY, 1)
    assert consume(cap)[0] == 1
    assert info(cap)[3] == FLAG_READ_ONLY
    cap = capsule_export(id(a), ctypes.addressof(dlt), FLAG_READ_ONLY, 1)
    assert not np.from_dlpack(Producer(cap)).flags.writeable


def test_legacy_export_of_read_only_is_buffer_error():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    refs = sys.getrefcount(a)
    with pytest.raises(BufferError, match=r"read-only tensor through the legacy .*max_version"):
        capsule_export(id(a), ctypes.addressof(dlt), FLAG_READ_ONLY, 0)
    assert sys.getrefcount(a) == refs  # nothing retained on failure


def test_export_invalid_tensor_is_buffer_error():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    dlt.dtype.code = 42
    refs = sys.getrefcount(a)
    with pytest.raises(BufferError, match="invalid DLPack tensor: .*code 42"):
        capsule_export(id(a), ctypes.addressof(dlt), 0, 1)
    assert sys.getrefcount(a) == refs


def test_export_null_arguments_are_value_errors():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    with pytest.raises(ValueError, match="owner"):
        capsule_export(0, ctypes.addressof(dlt), 0, 1)
    with pytest.raises(ValueError, match="src"):
        capsule_export(id(a), 0, 0, 1)


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_consumes_an_export_and_drops_the_owner_without_the_gil():
    a = np.arange(6.0)
    alive = weakref.ref(a)
    dlt, keep = dltensor_of(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, 1)
    del a
    t = torch.from_dlpack(Producer(cap))
    del cap
    collect()
    assert alive() is not None
    assert t.sum().item() == 15.0
    del t  # PyTorch's deleter call comes without the GIL: ours takes it
    collect()
    assert alive() is None


# ---- exporting a copy --------------------------------------------------------
@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("versioned", [1, 0])
def test_export_copy_is_a_fresh_compact_copy(versioned):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2]  # not contiguous
    dlt, keep = dltensor_of(a)
    cap = capsule_export_copy(ctypes.addressof(dlt), FLAG_READ_ONLY if versioned else 0, versioned)
    assert capsule_name(cap) == (b"dltensor_versioned" if versioned else b"dltensor")
    st, address = consume(cap)
    assert st == versioned
    m = managed(address, bool(versioned))
    t = m.dl_tensor
    assert t.data != a.ctypes.data
    assert shape_of(t) == a.shape
    assert strides_of(t) in (None, (3, 1))
    if versioned:
        _, _, _, flags = info(cap)
        assert flags & FLAG_IS_COPIED
        assert not flags & FLAG_READ_ONLY  # a fresh copy is writable
    cap2 = capsule_export_copy(ctypes.addressof(dlt), 0, versioned)
    b = np.from_dlpack(Producer(cap2))
    np.testing.assert_array_equal(b, a)
    assert not np.shares_memory(b, a)


def test_export_copy_of_invalid_tensor_raises():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    dlt.ndim = -2
    with pytest.raises(BufferError):
        capsule_export_copy(ctypes.addressof(dlt), 0, 1)
    with pytest.raises(ValueError):
        capsule_export_copy(0, 0, 1)


# ---- deleters from threads without the GIL -----------------------------------
def _take_pointer(cap) -> int:
    """Take the tensor out of an unconsumed capsule the way a C consumer would."""
    name = capsule_name(cap)
    ptr = Capsule_GetPointer(cap, name)
    assert Capsule_SetName(cap, name_ptr(b"used_" + name)) == 0
    return ptr


def _in_thread(fn, *args):
    worker = threading.Thread(target=fn, args=args)
    worker.start()
    worker.join()


@pytest.mark.parametrize("versioned", [1, 0])
def test_export_deleter_from_a_thread_without_the_gil(versioned):
    a = np.arange(8.0)
    alive = weakref.ref(a)
    dlt, keep = dltensor_of(a)
    refs = sys.getrefcount(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, versioned)
    ptr = _take_pointer(cap)
    del cap
    collect()
    assert sys.getrefcount(a) == refs + 1
    # ctypes.CDLL releases the GIL: the deleter runs on a thread that lacks it.
    _in_thread(tensor_free if versioned else tensor_free_legacy, ptr)
    assert sys.getrefcount(a) == refs
    del a
    collect()
    assert alive() is None


def test_py_release_as_owner_callback_from_a_thread():
    a = np.arange(8.0)
    refs = sys.getrefcount(a)
    py_retain(id(a))
    assert sys.getrefcount(a) == refs + 1
    shape, strides = _layout(a)
    t = tensor_new(a.ctypes.data, kDLCPU, 0, 1, shape, strides, 2, 64, 1, 0, 0, id(a), PY_RELEASE)
    assert t
    _in_thread(tensor_free, t)
    assert sys.getrefcount(a) == refs


def test_py_retain_release_balance():
    obj = object()
    refs = sys.getrefcount(obj)
    for _ in range(5):
        py_retain(id(obj))
    assert sys.getrefcount(obj) == refs + 5
    for _ in range(5):
        py_release(id(obj))
    assert sys.getrefcount(obj) == refs
    py_retain(0)  # NULL-safe
    py_release(None)


# ---- interpreter shutdown ------------------------------------------------------
_SHUTDOWN_SCRIPT = r"""
import ctypes, os, sys
LIB = os.environ["DLPACKSHIM_LIBRARY"]
C, P, libc = ctypes.CDLL(LIB), ctypes.PyDLL(LIB), ctypes.CDLL(None)
C.dlpackshim_tensor_new.restype = ctypes.c_void_p
C.dlpackshim_tensor_new.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16,
    ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]
P.dlpackshim_capsule_new.restype = ctypes.py_object
P.dlpackshim_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
C.dlpackshim_capsule_import.restype = ctypes.c_ssize_t
C.dlpackshim_capsule_import.argtypes = [ctypes.c_ssize_t]
libc.getenv.restype = ctypes.c_void_p
libc.getenv.argtypes = [ctypes.c_char_p]
PUTS = ctypes.cast(libc.puts, ctypes.c_void_p).value
DATA = (ctypes.c_double * 4)()
SHAPE = (ctypes.c_int64 * 1)(4)
def make(var):
    # release = puts(owner): the owner string lives in the environment block,
    # which outlives the interpreter, and puts needs no Python.
    return C.dlpackshim_tensor_new(ctypes.addressof(DATA), 1, 0, 1, SHAPE, None, 2, 64, 1, 0, 0,
                                   libc.getenv(var), PUTS)
UNCONSUMED = P.dlpackshim_capsule_new(make(b"MARK_UNCONSUMED"), 1)
CONSUMED = P.dlpackshim_capsule_new(make(b"MARK_CONSUMED"), 1)
assert C.dlpackshim_capsule_import(id(CONSUMED))
CYCLE = [UNCONSUMED, CONSUMED]
CYCLE.append(CYCLE)  # freed only by the interpreter's last collections
print("exiting", flush=True)
"""


def test_capsule_destructors_still_delete_during_interpreter_shutdown():
    """Py_IsInitialized() reads 0 while Py_FinalizeEx deallocates modules; the
    capsule destructors must still call the deleters then (exactly once)."""
    env = dict(DLPACKSHIM_LIBRARY=LIBRARY, MARK_UNCONSUMED="deleted:unconsumed",
               MARK_CONSUMED="deleted:consumed")
    if "ASAN_OPTIONS" in os.environ:  # CPython's own exit-time leaks would set the exit code
        env["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"
    proc = run_python("-c", _SHUTDOWN_SCRIPT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0] == "exiting"
    assert sorted(lines[1:]) == ["deleted:consumed", "deleted:unconsumed"], proc.stdout


# ---- no leaks --------------------------------------------------------------
class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]


def _malloc_in_use():
    """Bytes malloc has handed out (glibc mallinfo2), or None if unknown
    (other libc, or a sanitizer that replaces malloc and reports nothing)."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return None
    fn.restype = _MallInfo2
    used = fn().uordblks
    return used or None


ROUNDS = 10_000


def _round_trip(a, dlt_address):
    # ours -> ours
    cap = capsule_export(id(a), dlt_address, 0, 1)
    assert capsule_import(id(cap))
    del cap
    # ours -> numpy (legacy)
    b = np.from_dlpack(Producer(capsule_export(id(a), dlt_address, 0, 0)))
    del b
    # numpy -> ours
    cap = a.__dlpack__(max_version=(1, 0))
    assert capsule_import(id(cap))
    del cap
    # an unconsumed copy
    capsule_export_copy(dlt_address, 0, 1)
    # a failure path: already consumed
    cap = a.__dlpack__()
    consume(cap)
    consume(cap)


@pytest.mark.numpy_min("2.1")
def test_no_reference_or_memory_leak_over_many_rounds():
    a = np.arange(64.0).reshape(8, 8)
    dlt, keep = dltensor_of(a)
    address = ctypes.addressof(dlt)
    for _ in range(200):  # warm caches, free lists, arenas
        _round_trip(a, address)
    collect()
    refs = sys.getrefcount(a)
    before = _malloc_in_use()
    for _ in range(ROUNDS):
        _round_trip(a, address)
    collect()
    after = _malloc_in_use()
    assert sys.getrefcount(a) == refs
    if before is not None and after is not None:
        # A leaked export block alone would be >= 80 bytes x 3 x ROUNDS (2.4 MB).
        assert after - before < 256 * 1024, (before, after)


# ---- properties ----------------------------------------------------------------
_DTYPES = st.sampled_from([np.int8, np.uint16, np.int32, np.float32, np.float64, np.complex64,
                           np.bool_])


@st.composite
def strided_views(draw):
    ndim = draw(st.integers(0, 4))
    shape = draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    dtype = draw(_DTYPES)
    base = np.arange(int(np.prod([s * 2 for s in shape] or [1])) or 1).astype(dtype)
    a = base[: int(np.prod([s * 2 for s in shape] or [1]))].reshape([s * 2 for s in shape] or ())
    index = tuple(slice(None, None, draw(st.sampled_from([1, 2, -1, -2]))) for _ in range(ndim))
    a = a[index + (Ellipsis,)][tuple(slice(0, s) for s in shape) + (Ellipsis,)]  # 0-d stays an array
    if ndim >= 2 and draw(st.booleans()):
        a = a.T
    return a


@pytest.mark.numpy_min("2.1")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=strided_views(), versioned=st.sampled_from([0, 1]), null_strides=st.booleans())
def test_export_then_consume_round_trips_the_layout(a, versioned, null_strides):
    if null_strides:
        a = np.ascontiguousarray(a)
    dlt, keep = dltensor_of(a, null_strides=null_strides)
    refs = sys.getrefcount(a)
    cap = capsule_export(id(a), ctypes.addressof(dlt), 0, versioned)
    st_, address = consume(cap)
    assert st_ == versioned, last_error()
    t = managed(address, bool(versioned)).dl_tensor
    assert shape_of(t) == a.shape
    expected = tuple(s // a.itemsize for s in a.strides)
    if a.ndim == 0:
        assert not t.shape and not t.strides
    elif null_strides:  # compact strides filled in, NumPy's convention for zero extents
        assert strides_of(t) == tuple(
            int(np.prod([max(e, 1) for e in a.shape[i + 1:]], dtype=np.int64))
            for i in range(a.ndim))
    else:
        assert strides_of(t) == expected
    assert t.data == a.ctypes.data
    b = np.from_dlpack(Producer(capsule_export(id(a), ctypes.addressof(dlt), 0, 1)))
    np.testing.assert_array_equal(b, a)
    del cap, t, b
    collect()
    assert sys.getrefcount(a) == refs


@pytest.mark.numpy_min("2.1")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=strided_views(), versioned=st.booleans())
def test_consume_numpy_capsule_round_trips_the_layout(a, versioned):
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    address = capsule_import(id(cap))
    assert address, last_error()
    t = DLTensor.from_address(address)
    assert shape_of(t) == a.shape
    if a.size > 1 and t.strides:
        used = [i for i in range(a.ndim) if a.shape[i] > 1]
        assert [t.strides[i] for i in used] == [a.strides[i] // a.itemsize for i in used]
    if a.size:
        assert t.data + t.byte_offset == a.ctypes.data
    # Hand the same memory back through an export and compare element by element.
    b = np.from_dlpack(Producer(capsule_export(id(cap), address, 0, 1)))
    np.testing.assert_array_equal(b, a)
