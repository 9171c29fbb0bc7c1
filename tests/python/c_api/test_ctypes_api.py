"""The capsule half of libdlpackshim's C API, driven through plain ctypes.

No cffi and no ``dlpackshim`` package here: these tests pin down what the C
library itself promises (csrc/dlpackshim.h, "Python capsules", and its
"Conventions": an int status, results through out-parameters written only on
success, a NULL out-parameter is _INVALID_ARGUMENT), against NumPy and
PyTorch as real producers and consumers. The library is loaded from
``$DLPACKSHIM_LIBRARY`` (``make check`` sets it), else from the dlpackshim
package under test (see conftest.py), else from the build tree.

Two bindings of the same library are used, as a real caller would:
``C`` (``ctypes.CDLL``: the GIL is released during the call, like ABI-mode
cffi) for the public functions, which take the GIL themselves, and ``P``
(``ctypes.PyDLL``: the GIL is kept, and a Python exception left set is
raised) to show that those functions leave none set.

Exports are made as a C extension makes them with the public API
(:func:`export_view`: ``dlpackshim_py_retain``, ``dlpackshim_tensor_new``
with ``dlpackshim_py_release`` as the release callback, then
``dlpackshim_capsule_new``); the Python package's own exports
(``Tensor.__dlpack__``, its exchange table) are tested through the package.
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

from conftest import asan_options, run_python



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
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
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
ERR_NO_PYTHON = -7
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
vpp = ctypes.POINTER(ctypes.c_void_p)  # T ** out-parameters (DLManagedTensor **, void **, ...)
u32p = ctypes.POINTER(ctypes.c_uint32)
u64p = ctypes.POINTER(ctypes.c_uint64)
vp = ctypes.c_void_p  # a Python object is a void * holding id(obj)

#: What an out-parameter holds before a call; a failing call must leave it so
#: (csrc/dlpackshim.h: "written only on success").
SENTINEL = 0x5EED0


def _bind(lib, name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_NEW_ARGS = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, i64p, i64p,
             ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint64]
tensor_new = _bind(C, "dlpackshim_tensor_new", ctypes.c_int,
                   _NEW_ARGS + [ctypes.c_uint64, ctypes.c_void_p, RELEASE, vpp])
tensor_new_legacy = _bind(C, "dlpackshim_tensor_new_legacy", ctypes.c_int,
                          _NEW_ARGS + [ctypes.c_void_p, RELEASE, vpp])
tensor_free = _bind(C, "dlpackshim_tensor_free", None, [ctypes.c_void_p])
tensor_free_legacy = _bind(C, "dlpackshim_tensor_free_legacy", None, [ctypes.c_void_p])
last_error = _bind(C, "dlpackshim_last_error", ctypes.c_char_p, [])
last_status = _bind(C, "dlpackshim_last_status", ctypes.c_int, [])
clear_error = _bind(C, "dlpackshim_clear_error", None, [])
python_available = _bind(C, "dlpackshim_python_available", ctypes.c_int, [])
py_release = _bind(C, "dlpackshim_py_release", None, [vp])

# The capsule functions take the GIL themselves and never leave a Python
# exception set, so any binding may call them. Each is bound twice: through C
# (ctypes.CDLL drops the GIL, as ABI-mode cffi does), and through P
# (ctypes.PyDLL keeps it and raises whatever exception a call left set: a
# call through P that returns a status proves that none was left).
_CAPSULE_API = {
    "dlpackshim_capsule_new": (ctypes.c_int, [vp, ctypes.c_int, vpp]),
    "dlpackshim_capsule_import": (ctypes.c_int, [vp, vpp]),
    "dlpackshim_capsule_info": (ctypes.c_int, [vp, vpp, u32p, u32p, u64p]),
    "dlpackshim_py_retain": (ctypes.c_int, [vp]),
}
capsule_new_c, capsule_import_c, capsule_info_c, py_retain = (
    _bind(C, name, *sig) for name, sig in _CAPSULE_API.items())
capsule_new_p, capsule_import_p, capsule_info_p, py_retain_p = (
    _bind(P, name, *sig) for name, sig in _CAPSULE_API.items())

# dlpackshim_py_release as a release callback for dlpackshim_tensor_new.
PY_RELEASE = RELEASE(ctypes.cast(C.dlpackshim_py_release, ctypes.c_void_p).value)

# CPython's own API, GIL held: a private PyDLL, so that the argtypes set here
# do not leak into ctypes.pythonapi, which the package may use too.
_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
Capsule_GetName = _bind(_api, "PyCapsule_GetName", ctypes.c_char_p, [ctypes.py_object])
Capsule_GetPointer = _bind(_api, "PyCapsule_GetPointer", ctypes.c_void_p,
                           [ctypes.py_object, ctypes.c_char_p])
Capsule_SetName = _bind(_api, "PyCapsule_SetName", ctypes.c_int, [ctypes.py_object, ctypes.c_void_p])
Capsule_New = _bind(_api, "PyCapsule_New", ctypes.py_object,
                    [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
Py_DecRef = _bind(_api, "Py_DecRef", None, [ctypes.c_void_p])

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
    out = ctypes.c_void_p(SENTINEL)
    if legacy:
        st = tensor_new_legacy(arr.ctypes.data, kDLCPU, 0, arr.ndim, shape, strides, code, bits,
                               lanes, 0, None, release, ctypes.byref(out))
    else:
        st = tensor_new(arr.ctypes.data, kDLCPU, 0, arr.ndim, shape, strides, code, bits, lanes, 0,
                        flags, None, release, ctypes.byref(out))
    assert st == OK, last_error()
    assert out.value and out.value != SENTINEL
    return out.value


def steal(address: int):
    """The Python object of a new reference handed over as a void *: the
    reference becomes the returned object's (none is added, none is lost)."""
    obj = ctypes.cast(ctypes.c_void_p(address), ctypes.py_object).value  # a reference of our own...
    Py_DecRef(address)  # ... so the one handed over goes
    return obj


def capsule_new(managed_address, versioned: int):
    """dlpackshim_capsule_new through C (GIL dropped): the capsule, whose one
    reference is the caller's."""
    out = ctypes.c_void_p(SENTINEL)
    st = capsule_new_c(managed_address, versioned, ctypes.byref(out))
    assert st == OK, last_error()
    assert out.value and out.value != SENTINEL
    return steal(out.value)


def export_view(owner, dlt: DLTensor, flags: int, versioned: int):
    """A capsule of the memory `dlt` describes that keeps `owner` alive until
    the tensor is deleted, made as a C extension makes one with the public
    API: a reference to owner (py_retain), tensor_new (or _legacy, which
    carries no flags) whose release is dlpackshim_py_release, capsule_new.
    The capsule's one reference is the caller's."""
    assert py_retain(id(owner)) == OK, last_error()
    layout = (dlt.data, dlt.device.device_type, dlt.device.device_id, dlt.ndim, dlt.shape,
              dlt.strides, dlt.dtype.code, dlt.dtype.bits, dlt.dtype.lanes, dlt.byte_offset)
    out = ctypes.c_void_p(SENTINEL)
    if versioned:
        st = tensor_new(*layout, flags, id(owner), PY_RELEASE, ctypes.byref(out))
    else:
        assert not flags, "the legacy ABI carries no flags"
        st = tensor_new_legacy(*layout, id(owner), PY_RELEASE, ctypes.byref(out))
    if st != OK:  # release is never called on failure: the reference is still ours
        py_release(id(owner))
        raise AssertionError(last_error())
    return capsule_new(out.value, versioned)


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


def consume(capsule, *, fn=None):
    """dlpackshim_capsule_import -> (status, address of the DLTensor snapshot,
    or None on failure, when the out-parameter must be left untouched)."""
    out = ctypes.c_void_p(SENTINEL)
    st = (fn or capsule_import_c)(id(capsule), ctypes.byref(out))
    if st != OK:
        assert st < 0 and out.value == SENTINEL, (st, out.value)
        return st, None
    assert out.value and out.value != SENTINEL
    return st, out.value


def info(capsule, *, fn=None):
    """dlpackshim_capsule_info -> (status, major, minor, flags); on failure
    the out-parameters must be left untouched, and the values are None."""
    t, major, minor, flags = (ctypes.c_void_p(SENTINEL), ctypes.c_uint32(77),
                              ctypes.c_uint32(77), ctypes.c_uint64(77))
    st = (fn or capsule_info_c)(id(capsule), ctypes.byref(t), ctypes.byref(major),
                                ctypes.byref(minor), ctypes.byref(flags))
    if st != OK:
        assert st < 0
        assert (t.value, major.value, minor.value, flags.value) == (SENTINEL, 77, 77, 77)
        return st, None, None, None
    return st, major.value, minor.value, flags.value


def owned_tensor(capsule) -> int | None:
    """The DLTensor address dlpackshim_capsule_info reports, or None (failed)."""
    t = ctypes.c_void_p(SENTINEL)
    st = capsule_info_c(id(capsule), ctypes.byref(t), None, None, None)
    if st != OK:
        assert t.value == SENTINEL
        return None
    return t.value


def producer_managed(capsule, versioned: bool):
    """The managed tensor a fresh capsule holds (the producer's own struct)."""
    return managed(Capsule_GetPointer(capsule, capsule_name(capsule)), versioned)


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


@pytest.mark.parametrize("fn", [capsule_new_c, capsule_new_p], ids=["CDLL", "PyDLL"])
@pytest.mark.parametrize("versioned", [1, 0])
def test_capsule_new_hands_the_caller_exactly_one_reference(fn, versioned):
    """The capsule comes back through the void ** as one new reference that
    belongs to the caller: dropping it (and nothing else) runs the capsule's
    destructor, at once and exactly once. Capsules take no weak references
    and are not tracked by the collector: the destructor is the witness."""
    a = np.arange(6.0)
    counter = Counter()
    t = new_tensor(a, counter, legacy=not versioned)
    out = ctypes.c_void_p(SENTINEL)
    assert fn(t, versioned, ctypes.byref(out)) == OK, last_error()
    cap = ctypes.cast(out, ctypes.py_object).value  # a second reference, our own
    with_library_ref = sys.getrefcount(cap)
    Py_DecRef(out.value)  # the one the library handed over
    assert sys.getrefcount(cap) == with_library_ref - 1
    assert capsule_name(cap) == (b"dltensor_versioned" if versioned else b"dltensor")
    assert counter.n == 0
    del cap  # the last reference: no collection needed
    assert counter.n == 1
    collect()
    assert counter.n == 1  # never twice


def test_capsule_new_reference_is_not_leaked_over_many_calls():
    """Each capsule made and dropped deletes its tensor: none outlives its
    last reference (a leaked reference would keep capsule and tensor alive)."""
    a = np.arange(4.0)
    counter = Counter()
    for i in range(1, 201):
        cap = capsule_new(new_tensor(a, counter), 1)
        assert counter.n == i - 1
        del cap
        assert counter.n == i


@pytest.mark.parametrize("fn", [capsule_new_c, capsule_new_p], ids=["CDLL", "PyDLL"])
def test_capsule_new_null_arguments_are_invalid_and_leave_no_exception(fn):
    """A status and a message, never a Python exception (a call through
    PyDLL would raise it), and the out-parameter untouched; on failure the
    tensor is still the caller's."""
    out = ctypes.c_void_p(SENTINEL)
    clear_error()
    assert fn(None, 1, ctypes.byref(out)) == ERR_INVALID_ARGUMENT
    assert last_status() == ERR_INVALID_ARGUMENT
    assert b"managed is NULL" in last_error()
    assert out.value == SENTINEL
    a = np.arange(3.0)
    counter = Counter()
    t = new_tensor(a, counter)
    clear_error()
    assert fn(t, 1, None) == ERR_INVALID_ARGUMENT
    assert last_status() == ERR_INVALID_ARGUMENT
    assert b"capsule_out is NULL" in last_error()
    collect()
    assert counter.n == 0  # not wrapped, not deleted: still ours
    tensor_free(t)
    assert counter.n == 1


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


# ---- consuming: dlpackshim_capsule_import / dlpackshim_capsule_info ----------
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
    m = producer_managed(cap, versioned)  # NumPy's own struct, before the import
    produced = (m.version.major, m.version.minor, m.flags) if versioned else None
    st, address = consume(cap)
    assert st == OK, last_error()
    assert capsule_name(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    t = DLTensor.from_address(address)
    assert address != ctypes.addressof(m.dl_tensor)  # a snapshot, not the producer's struct
    assert t.ndim == a.ndim
    assert shape_of(t) == a.shape
    if a.ndim:  # the snapshot's strides are always explicit
        assert t.strides
        assert strides_of(t) == tuple(s // a.itemsize for s in a.strides) or a.size == 0
    else:
        assert not t.shape and not t.strides
    assert (t.data or 0) + t.byte_offset == a.ctypes.data or a.size == 0
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == dl_dtype(a.dtype)
    assert t.device.device_type == kDLCPU
    assert info(cap) == ((OK,) + produced if versioned
                         else (OK, 0, 0, FLAG_READ_ONLY))  # legacy: writability unknown
    assert owned_tensor(cap) == address
    # NumPy's manager holds a reference to the array until its deleter runs:
    assert sys.getrefcount(a) > refs
    del cap, m, t
    collect()
    assert sys.getrefcount(a) == refs  # the owner capsule called the deleter, exactly once
    del base


_NO_PACKAGE_SCRIPT = r"""
import ctypes, os, sys
import numpy as np
C = ctypes.CDLL(os.environ["DLPACKSHIM_LIBRARY"])
C.dlpackshim_capsule_import.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
a = np.arange(6.0)
cap = a.__dlpack__(max_version=(1, 0))
out = ctypes.c_void_p()
st = C.dlpackshim_capsule_import(id(cap), ctypes.byref(out))
data = ctypes.c_void_p.from_address(out.value).value if st == 0 else None  # DLTensor.data
refs = sys.getrefcount(a)
del cap  # the owner capsule deletes NumPy's tensor: its reference to a goes
print(st, data == a.ctypes.data, sys.getrefcount(a) == refs - 1, "dlpackshim" in sys.modules)
"""


@pytest.mark.numpy_min("2.1")
def test_capsule_import_works_in_a_process_that_never_imported_the_package():
    """A C caller of the library alone: the import's holder types are made on
    first use (they were made by the package's import only: a NULL type
    crashed the process)."""
    proc = run_python("-c", _NO_PACKAGE_SCRIPT, env={"DLPACKSHIM_LIBRARY": LIBRARY}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "True", "True", "False"]


@pytest.mark.numpy_min("2.1")
def test_consume_read_only_numpy_array_reports_the_flag():
    a = np.arange(5.0)
    a.flags.writeable = False
    cap = a.__dlpack__(max_version=(1, 0))
    st, _ = consume(cap)
    assert st == OK
    st, major, _minor, flags = info(cap)
    assert (st, major) == (OK, 1)
    assert flags & FLAG_READ_ONLY


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("versioned", [True, False])
def test_consume_torch_capsule_reads_its_layout(versioned):
    x = torch.arange(30, dtype=torch.float32).reshape(5, 6)[1:, ::3]
    cap = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    st, address = consume(cap)
    assert st == OK, last_error()
    assert capsule_name(cap).startswith(b"used_")
    assert info(cap)[1] == (1 if versioned else 0)  # legacy reports version 0.0
    t = DLTensor.from_address(address)
    assert shape_of(t) == tuple(x.shape)
    assert strides_of(t) == tuple(x.stride())
    assert t.data + t.byte_offset == x.data_ptr()
    assert (t.dtype.code, t.dtype.bits) == (2, 32)


@pytest.mark.numpy_min("2.1")
def test_import_returns_the_dltensor_address():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:]
    cap = a.__dlpack__(max_version=(1, 0))
    st, address = consume(cap)
    assert st == OK, last_error()
    t = DLTensor.from_address(address)
    assert t.data + t.byte_offset == a.ctypes.data
    assert shape_of(t) == (3, 3)
    assert strides_of(t) == (4, 1)
    assert capsule_name(cap) == b"used_dltensor_versioned"
    # the address is the snapshot the capsule's record holds, taken at import;
    # the version and flags are the producer's
    st, major, minor, flags = info(cap)
    assert (st, major) == (OK, 1) and not flags

    legacy = a.__dlpack__()
    st, address_l = consume(legacy)
    assert st == OK
    assert DLTensor.from_address(address_l).data == t.data
    assert info(legacy) == (OK, 0, 0, FLAG_READ_ONLY)
    # what only the capsule was kept for: the same address again
    assert owned_tensor(cap) == address
    assert owned_tensor(legacy) == address_l
    # every out-parameter of capsule_info may be NULL
    assert capsule_info_c(id(cap), None, None, None, None) == OK


@pytest.mark.numpy_min("2.1")
def test_capsule_info_refuses_what_dlpackshim_does_not_own():
    """dlpackshim_capsule_info (was dlpackshim_owner_tensor/_owner_info)
    answers only for a capsule that dlpackshim_capsule_import consumed."""
    a = np.arange(3.0)
    fresh = a.__dlpack__(max_version=(1, 0))
    clear_error()
    assert owned_tensor(fresh) is None
    assert last_status() == ERR_CAPSULE
    assert b"not a capsule owning a tensor" in last_error()
    assert info(fresh)[0] == ERR_CAPSULE  # out-parameters untouched (see info)
    assert capsule_name(fresh) == b"dltensor_versioned"  # left untouched
    assert owned_tensor(object()) is None
    assert last_status() == ERR_TYPE
    clear_error()
    t = ctypes.c_void_p(SENTINEL)
    assert capsule_info_c(None, ctypes.byref(t), None, None, None) == ERR_INVALID_ARGUMENT
    assert last_status() == ERR_INVALID_ARGUMENT
    assert b"capsule is NULL" in last_error()
    assert t.value == SENTINEL
    # a capsule another consumer took: the used_ name, but not our destructor
    assert Capsule_SetName(fresh, name_ptr(b"used_dltensor_versioned")) == 0
    try:
        assert owned_tensor(fresh) is None
        assert last_status() == ERR_CAPSULE
    finally:  # give it back to NumPy's destructor
        Capsule_SetName(fresh, name_ptr(b"dltensor_versioned"))


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("fn", [capsule_import_c, capsule_import_p], ids=["CDLL", "PyDLL"])
@pytest.mark.parametrize("versioned", [True, False])
def test_consuming_twice_is_a_capsule_error(versioned, fn):
    a = np.arange(3.0)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    assert consume(cap, fn=fn)[0] == OK
    before = owned_tensor(cap)
    clear_error()
    st, address = consume(cap, fn=fn)
    assert (st, address) == (ERR_CAPSULE, None)
    assert last_status() == ERR_CAPSULE
    assert b"already consumed" in last_error()
    assert owned_tensor(cap) == before  # the first import's tensor is still the capsule's


def test_capsule_info_reports_every_flag_but_the_private_one():
    """Bits no DLPack defines yet are the producer's: reported as they came
    (bits 32-62 were dropped); bit 63 is the library's own mark."""
    a = np.arange(4.0)
    later = (1 << 20) | (1 << 40) | (1 << 62)
    cap = capsule_new(new_tensor(a, flags=later | FLAG_READ_ONLY | (1 << 63)), 1)
    assert consume(cap)[0] == OK
    assert info(cap) == (OK, 1, 3, later | FLAG_READ_ONLY)


@pytest.mark.parametrize("fn", [capsule_import_c, capsule_import_p], ids=["CDLL", "PyDLL"])
@pytest.mark.parametrize("versioned", [1, 0])
def test_a_taken_capsule_renamed_back_is_still_consumed(versioned, fn):
    """A capsule dlpackshim_capsule_import took owns its tensor whatever its
    name says: renamed back to "dltensor...", it is refused, and its tensor
    deleted once, when it goes (it was taken again: deleted twice, a crash)."""
    a = np.arange(4.0)
    counter = Counter()
    cap = capsule_new(new_tensor(a, counter, legacy=not versioned), versioned)
    assert consume(cap, fn=fn)[0] == OK
    before = owned_tensor(cap)
    fresh = b"dltensor_versioned" if versioned else b"dltensor"
    assert Capsule_SetName(cap, name_ptr(fresh)) == 0
    clear_error()
    assert consume(cap, fn=fn) == (ERR_CAPSULE, None)
    assert b"already consumed" in last_error() and fresh in last_error()
    assert capsule_name(cap) == fresh  # refused: left as it was
    assert owned_tensor(cap) == before
    assert counter.n == 0
    del cap
    collect()
    assert counter.n == 1


@pytest.mark.parametrize("fn", [capsule_import_c, capsule_import_p], ids=["CDLL", "PyDLL"])
@pytest.mark.parametrize("obj, type_name", [([], b"list"), (3, b"int"), (np.arange(2), b"ndarray"),
                                            (object(), b"object")])
def test_consuming_a_non_capsule_is_a_type_error(obj, type_name, fn):
    clear_error()
    st, address = consume(obj, fn=fn)
    assert (st, address) == (ERR_TYPE, None)
    assert last_status() == ERR_TYPE
    assert b"expected a DLPack PyCapsule" in last_error()
    assert type_name in last_error()
    clear_error()
    assert info(obj, fn=capsule_info_p)[0] == ERR_TYPE
    assert last_status() == ERR_TYPE
    assert type_name in last_error()


@pytest.mark.parametrize("fn", [capsule_import_c, capsule_import_p], ids=["CDLL", "PyDLL"])
def test_consume_null_arguments(fn):
    out = ctypes.c_void_p(SENTINEL)
    clear_error()
    assert fn(None, ctypes.byref(out)) == ERR_INVALID_ARGUMENT
    assert last_status() == ERR_INVALID_ARGUMENT
    assert b"capsule is NULL" in last_error()
    assert out.value == SENTINEL
    cap = np.arange(2.0).__dlpack__()
    clear_error()
    assert fn(id(cap), None) == ERR_INVALID_ARGUMENT
    assert b"tensor_out is NULL" in last_error()
    assert capsule_name(cap) == b"dltensor"  # untouched: no ownership taken
    assert consume(cap)[0] == OK  # ... so it can still be imported


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


@pytest.mark.numpy_min("2.1")
def test_capsule_failures_leave_no_python_exception_set():
    """Every failure of the capsule functions is a status and a message
    (dlpackshim_last_error), never a pending Python exception: each call
    here goes through PyDLL, which would raise one."""
    a = np.arange(4.0)
    counter = Counter()
    broken = new_tensor(a, counter)
    managed(broken, True).dl_tensor.dtype.code = 99
    cases = {
        "import: not a capsule": (lambda: consume(object(), fn=capsule_import_p)[0],
                                  ERR_TYPE, b"expected a DLPack PyCapsule"),
        "import: foreign name": (lambda: consume(Capsule_New(a.ctypes.data,
                                                             name_ptr(b"foreign_tensor"), None),
                                                 fn=capsule_import_p)[0],
                                 ERR_CAPSULE, b"foreign_tensor"),
        "import: invalid tensor": (lambda: consume(capsule_new(broken, 1),
                                                   fn=capsule_import_p)[0],
                                   ERR_INVALID_TENSOR, b"invalid DLPack tensor: "),
        "info: not imported": (lambda: info(a.__dlpack__(), fn=capsule_info_p)[0],
                               ERR_CAPSULE, b"not a capsule owning a tensor"),
        "info: not a capsule": (lambda: info([], fn=capsule_info_p)[0],
                                ERR_TYPE, b"expected a DLPack PyCapsule"),
        "new: NULL tensor": (lambda: capsule_new_p(None, 0, ctypes.byref(ctypes.c_void_p())),
                             ERR_INVALID_ARGUMENT, b"managed is NULL"),
        "py_retain: NULL": (lambda: py_retain_p(None), ERR_INVALID_ARGUMENT, b"obj is NULL"),
    }
    for what, (call, status, said) in cases.items():
        clear_error()
        assert call() == status, what
        assert last_status() == status, what
        assert said in last_error(), (what, last_error())
    collect()
    assert counter.n == 1  # the invalid tensor was deleted, once


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
    assert consume(cap)[0] == OK  # validated, taken
    assert info(cap) == (OK, 1, 1, 0)  # versioned: the consumer reads version 1.1
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
    assert consume(cap) == (ERR_INVALID_TENSOR, None)
    assert last_status() == ERR_INVALID_TENSOR
    assert last_error().startswith(b"invalid DLPack tensor: ")
    assert said in last_error()  # the validator's own words, kept across the deleter call
    assert counter.n == 1
    assert capsule_name(cap).startswith(b"used_")
    assert info(cap)[0] == ERR_CAPSULE  # nothing owned: the tensor is gone
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
    assert consume(cap)[0] == OK
    assert info(cap)[1] == int(versioned)
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


# ---- exporting a view that keeps its owner alive (export_view) --------------
@pytest.mark.numpy_min("2.1")
def test_export_keeps_the_owner_alive_until_the_consumer_dies():
    a = np.arange(12.0).reshape(3, 4)
    alive = weakref.ref(a)
    dlt, keep = dltensor_of(a)
    refs = sys.getrefcount(a)
    cap = export_view(a, dlt, 0, 1)
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
    cap = export_view(a, dlt, 0, versioned)
    assert capsule_name(cap) == (b"dltensor_versioned" if versioned else b"dltensor")
    assert sys.getrefcount(a) == refs + 1
    del cap
    collect()
    assert sys.getrefcount(a) == refs


@pytest.mark.parametrize("versioned", [1, 0])
def test_export_copies_shape_and_fills_compact_strides(versioned):
    a = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    dlt, (shape, _) = dltensor_of(a, null_strides=True)
    cap = export_view(a, dlt, 0, versioned)
    shape[0] = 99  # the capsule has its own copy
    m = producer_managed(cap, bool(versioned))  # the exported tensor itself
    exported = m.dl_tensor
    assert shape_of(exported) == (2, 3, 4)
    assert strides_of(exported) == (12, 4, 1)  # NULL strides made explicit
    assert exported.data == a.ctypes.data and exported.byte_offset == 0
    assert ctypes.addressof(exported.shape.contents) != ctypes.addressof(shape)
    if versioned:
        assert (m.version.major, m.version.minor, m.flags) == (1, 3, 0)
    st, address = consume(cap)
    assert st == OK, last_error()
    t = DLTensor.from_address(address)
    assert shape_of(t) == (2, 3, 4)
    assert strides_of(t) == (12, 4, 1)
    assert t.data == a.ctypes.data and t.byte_offset == 0
    assert info(cap) == ((OK, 1, 3, 0) if versioned else (OK, 0, 0, FLAG_READ_ONLY))


@pytest.mark.numpy_min("2.1")
def test_export_of_0d_tensor():
    a = np.array(7, dtype=np.int64)
    dlt, keep = dltensor_of(a)
    cap = export_view(a, dlt, 0, 1)
    b = np.from_dlpack(Producer(cap))
    assert b.shape == () and int(b) == 7


@pytest.mark.numpy_min("2.1")
def test_export_read_only_versioned_is_read_only_in_numpy():
    a = np.arange(3.0)
    dlt, keep = dltensor_of(a)
    cap = export_view(a, dlt, FLAG_READ_ONLY, 1)
    assert consume(cap)[0] == OK
    assert info(cap) == (OK, 1, 3, FLAG_READ_ONLY)
    cap = export_view(a, dlt, FLAG_READ_ONLY, 1)
    assert not np.from_dlpack(Producer(cap)).flags.writeable


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_consumes_an_export_and_drops_the_owner_without_the_gil():
    a = np.arange(6.0)
    alive = weakref.ref(a)
    dlt, keep = dltensor_of(a)
    cap = export_view(a, dlt, 0, 1)
    del a
    t = torch.from_dlpack(Producer(cap))
    del cap
    collect()
    assert alive() is not None
    assert t.sum().item() == 15.0
    del t  # PyTorch calls the deleter without the GIL: dlpackshim_py_release takes it
    collect()
    assert alive() is None


# ---- exporting a copy: dlpackshim_tensor_clone in a capsule -----------------------
def clone_capsule(dlt: DLTensor, flags: int):
    """A capsule of a fresh copy of what dlt describes (dlpackshim_tensor_clone,
    versioned: the copy's flags need the versioned ABI)."""
    out = ctypes.c_void_p(SENTINEL)
    assert tensor_clone(ctypes.byref(dlt), flags, ctypes.byref(out)) == OK, last_error()
    return capsule_new(out.value, 1)


@pytest.mark.numpy_min("2.1")
def test_cloned_export_is_a_fresh_compact_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2]  # not contiguous
    dlt, keep = dltensor_of(a)
    cap = clone_capsule(dlt, FLAG_READ_ONLY)
    assert capsule_name(cap) == b"dltensor_versioned"
    exported = producer_managed(cap, True).dl_tensor
    assert strides_of(exported) == (3, 1)
    st, address = consume(cap)
    assert st == OK, last_error()
    t = DLTensor.from_address(address)
    assert t.data != a.ctypes.data
    assert t.data == exported.data
    assert shape_of(t) == a.shape
    assert strides_of(t) == (3, 1)  # the snapshot's strides are explicit
    st, major, _, flags = info(cap)
    assert (st, major) == (OK, 1)
    assert flags & FLAG_IS_COPIED
    assert not flags & FLAG_READ_ONLY  # a fresh copy is writable
    b = np.from_dlpack(Producer(clone_capsule(dlt, 0)))
    np.testing.assert_array_equal(b, a)
    assert not np.shares_memory(b, a)


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
    cap = export_view(a, dlt, 0, versioned)
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
    assert py_retain(id(a)) == OK
    assert sys.getrefcount(a) == refs + 1
    shape, strides = _layout(a)
    out = ctypes.c_void_p(SENTINEL)
    assert tensor_new(a.ctypes.data, kDLCPU, 0, 1, shape, strides, 2, 64, 1, 0, 0, id(a),
                      PY_RELEASE, ctypes.byref(out)) == OK, last_error()
    t = out.value
    assert t and t != SENTINEL
    _in_thread(tensor_free, t)
    assert sys.getrefcount(a) == refs


def test_py_retain_release_balance():
    obj = object()
    refs = sys.getrefcount(obj)
    for _ in range(5):
        assert py_retain(id(obj)) == OK
    assert py_retain_p(id(obj)) == OK  # with the GIL held too
    assert sys.getrefcount(obj) == refs + 6
    for _ in range(6):
        py_release(id(obj))
    assert sys.getrefcount(obj) == refs
    py_release(None)  # NULL-safe


@pytest.mark.parametrize("fn", [py_retain, py_retain_p], ids=["CDLL", "PyDLL"])
def test_py_retain_null_is_invalid_argument(fn):
    clear_error()
    assert fn(None) == ERR_INVALID_ARGUMENT
    assert last_status() == ERR_INVALID_ARGUMENT
    assert b"py_retain: obj is NULL" in last_error()


# ---- interpreter shutdown ------------------------------------------------------
_SHUTDOWN_SCRIPT = r"""
import ctypes, os, sys
LIB = os.environ["DLPACKSHIM_LIBRARY"]
C, libc = ctypes.CDLL(LIB), ctypes.CDLL(None)
P = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
VP, VPP = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
C.dlpackshim_tensor_new.restype = ctypes.c_int
C.dlpackshim_tensor_new.argtypes = [VP, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
    VP, VP, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint16,
    ctypes.c_uint64, ctypes.c_uint64, VP, VP, VPP]
C.dlpackshim_capsule_new.restype = ctypes.c_int
C.dlpackshim_capsule_new.argtypes = [VP, ctypes.c_int, VPP]
C.dlpackshim_capsule_import.restype = ctypes.c_int
C.dlpackshim_capsule_import.argtypes = [VP, VPP]
P.Py_DecRef.restype = None
P.Py_DecRef.argtypes = [VP]
libc.getenv.restype = VP
libc.getenv.argtypes = [ctypes.c_char_p]
PUTS = ctypes.cast(libc.puts, VP).value
DATA = (ctypes.c_double * 4)()
SHAPE = (ctypes.c_int64 * 1)(4)
def make(var):
    # release = puts(owner): the owner string lives in the environment block,
    # which outlives the interpreter, and puts needs no Python.
    t = VP()
    assert C.dlpackshim_tensor_new(ctypes.addressof(DATA), 1, 0, 1, SHAPE, None, 2, 64, 1, 0, 0,
                                   libc.getenv(var), PUTS, ctypes.byref(t)) == 0
    cap = VP()
    assert C.dlpackshim_capsule_new(t, 1, ctypes.byref(cap)) == 0
    obj = ctypes.cast(cap, ctypes.py_object).value
    P.Py_DecRef(cap)  # the caller's one reference is now obj's
    return obj
UNCONSUMED = make(b"MARK_UNCONSUMED")
CONSUMED = make(b"MARK_CONSUMED")
assert C.dlpackshim_capsule_import(id(CONSUMED), ctypes.byref(VP())) == 0
CYCLE = [UNCONSUMED, CONSUMED]
CYCLE.append(CYCLE)  # freed only by the interpreter's last collections
print("exiting", flush=True)
"""


def test_capsule_destructors_still_delete_during_interpreter_shutdown():
    """Py_IsInitialized() reads 0 while Py_FinalizeEx deallocates modules; the
    capsule destructors must still call the deleters then (exactly once)."""
    env = dict(DLPACKSHIM_LIBRARY=LIBRARY, MARK_UNCONSUMED="deleted:unconsumed",
               MARK_CONSUMED="deleted:consumed")
    env.update(asan_options("detect_leaks=0"))  # CPython's own exit-time leaks: the exit code
    proc = run_python("-c", _SHUTDOWN_SCRIPT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0] == "exiting"
    assert sorted(lines[1:]) == ["deleted:consumed", "deleted:unconsumed"], proc.stdout


_EMBED_C = r"""
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int (*tensor_new_fn)(void *, int32_t, int32_t, int32_t, const int64_t *, const int64_t *,
                             uint8_t, uint8_t, uint16_t, uint64_t, uint64_t, void *,
                             void (*)(void *), void **);
typedef int (*capsule_new_fn)(void *, int, void **);
typedef int (*capsule_import_fn)(void *, const void **);
typedef int (*capsule_info_fn)(void *, const void **, uint32_t *, uint32_t *, uint64_t *);

/* A program that embeds CPython, uses the package, finalizes, then calls
 * the capsule functions: they must say DLPACKSHIM_ERR_NO_PYTHON. */
int main(int argc, char **argv) {
  static float buf[4];
  int64_t shape[1] = {4};
  void *lib = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) : NULL, *t = NULL, *cap = NULL;
  const void *dl = NULL;
  if (lib == NULL) return 10;
  tensor_new_fn tensor_new = (tensor_new_fn)dlsym(lib, "dlpackshim_tensor_new");
  capsule_new_fn capsule_new = (capsule_new_fn)dlsym(lib, "dlpackshim_capsule_new");
  capsule_import_fn capsule_import = (capsule_import_fn)dlsym(lib, "dlpackshim_capsule_import");
  capsule_info_fn capsule_info = (capsule_info_fn)dlsym(lib, "dlpackshim_capsule_info");
  int (*available)(void) = (int (*)(void))dlsym(lib, "dlpackshim_python_available");
  void (*tensor_free)(void *) = (void (*)(void *))dlsym(lib, "dlpackshim_tensor_free");
  Py_Initialize();
  PyObject *m = PyImport_ImportModule("dlpackshim");
  if (m == NULL) {
    PyErr_Print();
    return 11;
  }
  Py_DecRef(m);
  if (Py_FinalizeEx() != 0) return 12;
  if (tensor_new(buf, 1, 0, 1, shape, NULL, 2, 32, 1, 0, 0, NULL, NULL, &t) != 0) return 13;
  printf("%d %d %d %d\n", available(), capsule_new(t, 1, &cap), capsule_import(buf, &dl),
         capsule_info(buf, &dl, NULL, NULL, NULL));
  tensor_free(t);
  return 0;
}
"""


def test_capsule_functions_after_an_embedding_program_finalized_python(tmp_path):
    """A program that embeds CPython and imported the package, after
    Py_FinalizeEx returned: the capsule functions took the GIL of an
    interpreter that was gone (a crash); now DLPACKSHIM_ERR_NO_PYTHON."""
    import shutil
    import site
    import subprocess
    import sysconfig
    cc = shutil.which("cc") or shutil.which("gcc")
    include, libdir = sysconfig.get_config_var("INCLUDEPY"), sysconfig.get_config_var("LIBDIR")
    if cc is None or not include or not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip("no C compiler, or no Python.h")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        pytest.skip("this CPython has no libpython to link against")
    source, program = tmp_path / "embed.c", tmp_path / "embed"
    source.write_text(_EMBED_C)
    quiet = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    subprocess.run([cc, "-o", str(program), str(source), f"-I{include}", f"-L{libdir}",
                    f"-Wl,-rpath,{libdir}", f"-lpython{sysconfig.get_config_var('LDVERSION')}",
                    "-ldl"], check=True, env=quiet)
    import dlpackshim
    root = os.path.dirname(os.path.dirname(dlpackshim.__file__))
    env = dict(os.environ, DLPACKSHIM_LIBRARY=LIBRARY,
               PYTHONPATH=os.pathsep.join([root, *site.getsitepackages()]))
    env.update(asan_options("detect_leaks=0"))  # CPython's own exit-time leaks
    proc = subprocess.run([str(program), LIBRARY], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.split() == ["0", str(ERR_NO_PYTHON), str(ERR_NO_PYTHON),
                                   str(ERR_NO_PYTHON)], proc.stdout


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
    dlt = DLTensor.from_address(dlt_address)
    # ours -> ours
    cap = export_view(a, dlt, 0, 1)
    assert consume(cap)[0] == OK
    del cap
    # ours -> numpy (legacy)
    b = np.from_dlpack(Producer(export_view(a, dlt, 0, 0)))
    del b
    # numpy -> ours
    cap = a.__dlpack__(max_version=(1, 0))
    assert consume(cap)[0] == OK
    assert info(cap)[0] == OK
    del cap
    # a tensor of our own, in a capsule of dlpackshim_capsule_new: the
    # caller's one reference, dropped, frees capsule and tensor
    cap = capsule_new(new_tensor(a), 1)
    assert consume(cap)[0] == OK
    del cap
    capsule_new(new_tensor(a, legacy=True), 0)  # unconsumed
    # an unconsumed copy
    clone_capsule(dlt, 0)
    # a failure path: already consumed
    cap = a.__dlpack__()
    assert consume(cap)[0] == OK
    assert consume(cap)[0] == ERR_CAPSULE
    assert info(object())[0] == ERR_TYPE


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
        # A leaked export block alone would be >= 80 bytes x 3 x ROUNDS (2.4 MB);
        # a leaked capsule_new reference keeps capsule and tensor (> 150 bytes).
        assert after - before < 256 * 1024, (before, after)


# ---- the same convention in the rest of the API ---------------------------------
# Every fallible function returns 0 or a negative status and writes its results
# through out-parameters, only on success; a NULL out-parameter is
# _INVALID_ARGUMENT (csrc/dlpackshim.h, "Conventions").
DLTensorP = ctypes.POINTER(DLTensor)
ERR_UNSUPPORTED = -4
ERR_DEVICE = -9
kDLCUDA = 2
LAYOUT_NONE, LAYOUT_C, LAYOUT_F, LAYOUT_BOTH = 0, 1, 2, 3
tensor_clone = _bind(C, "dlpackshim_tensor_clone", ctypes.c_int, [DLTensorP, ctypes.c_uint64, vpp])
tensor_numel = _bind(C, "dlpackshim_tensor_numel", ctypes.c_int, [DLTensorP, i64p])
tensor_itemsize = _bind(C, "dlpackshim_tensor_itemsize", ctypes.c_int,
                        [DLTensorP, ctypes.c_uint64, i64p])
tensor_nbytes = _bind(C, "dlpackshim_tensor_nbytes", ctypes.c_int,
                      [DLTensorP, ctypes.c_uint64, i64p])
tensor_layout = _bind(C, "dlpackshim_tensor_layout", ctypes.c_int,
                      [DLTensorP, ctypes.POINTER(ctypes.c_int32)])
copy = _bind(C, "dlpackshim_copy", ctypes.c_int, [DLTensorP, DLTensorP, ctypes.c_int64])
pointer_device = _bind(C, "dlpackshim_pointer_device", ctypes.c_int,
                       [ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                        ctypes.POINTER(ctypes.c_int32)])
gpu_library = _bind(C, "dlpackshim_gpu_library", ctypes.c_int,
                    [ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p)])

#: Public names the redesign removed or renamed (csrc/dlpackshim.h, 2.0.0), and
#: private ones the package's rewrite (issue 30) removed: it exports, imports
#: and makes its exchange table's capsule in its own builtins now.
REMOVED = ["dlpackshim_capsule_consume", "dlpackshim_owner_tensor", "dlpackshim_owner_info",
           "dlpackshim_tensor_is_contiguous", "dlpackshim_device_copy", "dlpackshim_stream_sync",
           "dlpackshim_capsule_export", "dlpackshim_capsule_export_copy",
           "dlpackshim_buffer_address", "dlpackshim_exchange_api_capsule",
           "dlpackshim_exchange_import", "dlpackshim_counted_attach",
           "dlpackshim_counted_calls", "dlpackshim_counted_free",
           "dlpackshim__capsule_export", "dlpackshim__capsule_export_copy",
           "dlpackshim__buffer_address", "dlpackshim__exchange_api_capsule",
           "dlpackshim__exchange_import", "dlpackshim__py_builtin",
           "dlpackshim__py_from_dlpack", "dlpackshim__py_from_dlpack_many",
           "dlpackshim__py_tensor_base"]
#: The private names the package calls (dlpackshim/_ffi.py, dlpackshim.testing).
PRIVATE = ["dlpackshim__py_base", "dlpackshim__py_tensor_class", "dlpackshim__py_bind",
           "dlpackshim__py_entry_points", "dlpackshim__host_accessible",
           "dlpackshim__py_at_exit", "dlpackshim__counted_attach",
           "dlpackshim__counted_calls", "dlpackshim__counted_free"]


def test_removed_names_are_gone_and_their_replacements_exported():
    lib = ctypes.CDLL(LIBRARY)  # a fresh binding: nothing cached
    for name in REMOVED:
        with pytest.raises(AttributeError):
            getattr(lib, name)
    for name in PRIVATE + ["dlpackshim_capsule_import", "dlpackshim_capsule_info",
                           "dlpackshim_stream_wait", "dlpackshim_copy",
                           "dlpackshim_tensor_layout"]:
        assert getattr(lib, name) is not None, name


@pytest.mark.parametrize("legacy", [False, True])
def test_tensor_new_failures_write_nothing_and_call_no_release(legacy):
    a = np.arange(6.0)
    shape, strides = _layout(a)
    counter = Counter()

    def new(code, out):
        if legacy:
            return tensor_new_legacy(a.ctypes.data, kDLCPU, 0, 1, shape, strides, code, 64, 1, 0,
                                     None, counter.cb, out)
        return tensor_new(a.ctypes.data, kDLCPU, 0, 1, shape, strides, code, 64, 1, 0, 0, None,
                          counter.cb, out)

    out = ctypes.c_void_p(SENTINEL)
    clear_error()
    assert new(99, ctypes.byref(out)) == ERR_INVALID_TENSOR  # no such dtype code
    assert last_status() == ERR_INVALID_TENSOR and b"99" in last_error()
    assert out.value == SENTINEL
    clear_error()
    assert new(2, None) == ERR_INVALID_ARGUMENT
    assert b"tensor_out is NULL" in last_error()
    assert counter.n == 0  # on failure release is not called
    assert new(2, ctypes.byref(out)) == OK
    assert out.value != SENTINEL
    assert managed(out.value, not legacy).dl_tensor.data == a.ctypes.data
    (tensor_free_legacy if legacy else tensor_free)(out.value)
    assert counter.n == 1


def test_tensor_clone_through_an_out_parameter():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)[::2, 1::2]
    dlt, keep = dltensor_of(a)
    out = ctypes.c_void_p(SENTINEL)
    assert tensor_clone(ctypes.byref(dlt), FLAG_READ_ONLY, ctypes.byref(out)) == OK, last_error()
    m = managed(out.value, True)
    t = m.dl_tensor
    assert m.flags == FLAG_IS_COPIED  # READ_ONLY cleared
    assert shape_of(t) == a.shape and strides_of(t) == (3, 1)
    assert t.data % 256 == 0 and t.data != a.ctypes.data
    nbytes = a.size * a.itemsize
    copied = np.frombuffer(ctypes.string_at(t.data + t.byte_offset, nbytes), dtype=a.dtype)
    np.testing.assert_array_equal(copied.reshape(a.shape), a)
    tensor_free(out.value)
    out = ctypes.c_void_p(SENTINEL)
    clear_error()
    assert tensor_clone(ctypes.byref(dlt), 0, None) == ERR_INVALID_ARGUMENT
    assert b"tensor_out is NULL" in last_error()
    dlt.ndim = -1
    assert tensor_clone(ctypes.byref(dlt), 0, ctypes.byref(out)) < 0
    assert out.value == SENTINEL
    dlt.ndim = a.ndim
    dlt.device.device_type = kDLCUDA  # not host-accessible
    assert tensor_clone(ctypes.byref(dlt), 0, ctypes.byref(out)) == ERR_UNSUPPORTED
    assert out.value == SENTINEL


@pytest.mark.parametrize("view", list(VIEWS))
def test_numel_itemsize_nbytes_through_out_parameters(view):
    a = VIEWS[view]()
    dlt, keep = dltensor_of(a)
    for fn, args, want in ((tensor_numel, (), a.size), (tensor_itemsize, (0,), a.itemsize),
                           (tensor_nbytes, (0,), a.nbytes)):
        out = ctypes.c_int64(SENTINEL)
        assert fn(ctypes.byref(dlt), *args, ctypes.byref(out)) == OK, last_error()
        assert out.value == want, fn.__name__
        clear_error()
        assert fn(ctypes.byref(dlt), *args, None) == ERR_INVALID_ARGUMENT, fn.__name__
        assert b"_out is NULL" in last_error(), fn.__name__


def test_numel_itemsize_nbytes_failures_leave_the_out_parameter():
    a = np.arange(4.0)
    dlt, keep = dltensor_of(a)
    dlt.ndim = -1
    dlt.dtype.code = 99
    for fn, args in ((tensor_numel, ()), (tensor_itemsize, (0,)), (tensor_nbytes, (0,))):
        out = ctypes.c_int64(SENTINEL)
        st = fn(ctypes.byref(dlt), *args, ctypes.byref(out))
        assert st < 0 and st == last_status(), fn.__name__
        assert out.value == SENTINEL, fn.__name__
    out = ctypes.c_int64(SENTINEL)
    assert tensor_numel(None, ctypes.byref(out)) < 0 and out.value == SENTINEL
    assert tensor_itemsize(None, 0, ctypes.byref(out)) == ERR_INVALID_ARGUMENT
    assert out.value == SENTINEL


@pytest.mark.parametrize("view", list(VIEWS) + ["fortran", "one_row"])
@pytest.mark.parametrize("null_strides", [False, True])
def test_layout_and_layout_c_replace_is_contiguous(view, null_strides):
    """dlpackshim_tensor_is_contiguous(t) is (layout & DLPACKSHIM_LAYOUT_C):
    as NumPy's C_CONTIGUOUS, and NULL strides are C order."""
    more = {"fortran": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
            "one_row": lambda: np.arange(12.0).reshape(1, 12)[:, ::3]}
    a = (VIEWS.get(view) or more[view])()
    if null_strides:
        a = np.ascontiguousarray(a)
    dlt, keep = dltensor_of(a, null_strides=null_strides)
    layout = ctypes.c_int32(SENTINEL)
    assert tensor_layout(ctypes.byref(dlt), ctypes.byref(layout)) == OK, last_error()
    assert bool(layout.value & LAYOUT_C) == a.flags.c_contiguous
    assert bool(layout.value & LAYOUT_F) == a.flags.f_contiguous
    clear_error()
    assert tensor_layout(ctypes.byref(dlt), None) == ERR_INVALID_ARGUMENT
    dlt.ndim = -1
    layout = ctypes.c_int32(SENTINEL)
    assert tensor_layout(ctypes.byref(dlt), ctypes.byref(layout)) < 0
    assert layout.value == SENTINEL


@pytest.mark.parametrize("stream", [0, 1, -1, 0x7FFF0000])
def test_copy_between_host_tensors_ignores_the_stream(stream):
    """dlpackshim_copy took over dlpackshim_device_copy's stream argument;
    two host-accessible tensors are copied on the host, whatever it says."""
    src = np.arange(24, dtype=np.float32).reshape(4, 6).T
    dst = np.zeros((6, 4), dtype=np.float32)
    s_dlt, keep_s = dltensor_of(src)
    d_dlt, keep_d = dltensor_of(dst)
    assert copy(ctypes.byref(d_dlt), ctypes.byref(s_dlt), stream) == OK, last_error()
    np.testing.assert_array_equal(dst, src)
    wrong = np.zeros((4, 6), dtype=np.float32)
    w_dlt, keep_w = dltensor_of(wrong)
    clear_error()
    assert copy(ctypes.byref(w_dlt), ctypes.byref(s_dlt), stream) == ERR_INVALID_ARGUMENT
    assert not wrong.any()
    assert copy(None, ctypes.byref(s_dlt), stream) == ERR_INVALID_ARGUMENT
    assert copy(ctypes.byref(d_dlt), None, stream) == ERR_INVALID_ARGUMENT


def test_pointer_device_takes_a_pointer_and_writes_only_on_success():
    host = (ctypes.c_double * 4)()
    dev_type, dev_id = ctypes.c_int32(77), ctypes.c_int32(77)
    assert pointer_device(0, ctypes.addressof(host), ctypes.byref(dev_type),
                          ctypes.byref(dev_id)) == OK, last_error()
    assert (dev_type.value, dev_id.value) == (kDLCPU, 0)  # plain malloc'd host memory
    dev_type, dev_id = ctypes.c_int32(77), ctypes.c_int32(77)
    for runtime, ptr, outs in ((0, ctypes.addressof(host), (None, ctypes.byref(dev_id))),
                               (0, ctypes.addressof(host), (ctypes.byref(dev_type), None)),
                               (0, None, (ctypes.byref(dev_type), ctypes.byref(dev_id))),
                               (kDLCPU, ctypes.addressof(host),
                                (ctypes.byref(dev_type), ctypes.byref(dev_id)))):
        clear_error()
        assert pointer_device(runtime, ptr, *outs) == ERR_INVALID_ARGUMENT
        assert last_status() == ERR_INVALID_ARGUMENT and last_error()
        assert (dev_type.value, dev_id.value) == (77, 77)


def test_gpu_library_through_an_out_parameter():
    path = ctypes.c_char_p(b"untouched")
    clear_error()
    assert gpu_library(kDLCPU, ctypes.byref(path)) == ERR_INVALID_ARGUMENT
    assert b"no GPU runtime" in last_error()
    assert path.value == b"untouched"
    assert gpu_library(kDLCUDA, None) == ERR_INVALID_ARGUMENT
    assert b"path_out is NULL" in last_error()
    st = gpu_library(kDLCUDA, ctypes.byref(path))
    if st == OK:  # a CUDA driver here
        assert path.value and b"cuda" in path.value.lower()
    else:
        assert st == ERR_DEVICE, last_error()
        assert path.value == b"untouched"


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
    cap = export_view(a, dlt, 0, versioned)
    st_, address = consume(cap)
    assert st_ == OK, last_error()
    assert info(cap)[1] == versioned
    t = DLTensor.from_address(address)
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
    b = np.from_dlpack(Producer(export_view(a, dlt, 0, 1)))
    np.testing.assert_array_equal(b, a)
    del cap, t, b
    collect()
    assert sys.getrefcount(a) == refs


@pytest.mark.numpy_min("2.1")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=strided_views(), versioned=st.booleans())
def test_consume_numpy_capsule_round_trips_the_layout(a, versioned):
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    st_, address = consume(cap)
    assert st_ == OK, last_error()
    t = DLTensor.from_address(address)
    assert shape_of(t) == a.shape
    if a.size > 1 and t.strides:
        used = [i for i in range(a.ndim) if a.shape[i] > 1]
        assert [t.strides[i] for i in used] == [a.strides[i] // a.itemsize for i in used]
    if a.size:
        assert t.data + t.byte_offset == a.ctypes.data
    # Hand the same memory back through an export and compare element by element.
    b = np.from_dlpack(Producer(export_view(cap, t, 0, 1)))
    np.testing.assert_array_equal(b, a)
