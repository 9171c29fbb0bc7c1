"""The DLPack C exchange API (dlpack.h 1.3, ``__dlpack_c_exchange_api__``), both sides.

Producer: dlpackshim.Tensor carries the library's table. Consumer:
from_dlpack / from_dlpack_many use a producer type's table (ours, PyTorch's,
and a table-carrying producer written here with ctypes callbacks), checking
the major version along prev_api, falling back to ``__dlpack__`` when the
table is unusable, and propagating the table's errors.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
from ctypes import (CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, byref, c_char_p, c_int, c_int32,
                    c_int64, c_uint32, c_void_p, py_object)

import pytest

import dlpackshim
from dlpackshim import _consume
from dlpackshim._ffi import ffi, lib

import producers
from conftest import run_python
from producers import DLManagedTensorVersioned, DLTensor, make_managed

# ---- the table's C layout -------------------------------------------------------


class Header(Structure):
    pass


Header._fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev_api", POINTER(Header))]

# Called by the consumer with the GIL held: the ctypes callbacks take it anyway.
FROM_PY = CFUNCTYPE(c_int, py_object, POINTER(c_void_p))
# Our own entries need the GIL kept while called from Python: PYFUNCTYPE.
P_ALLOC = PYFUNCTYPE(c_int, POINTER(DLTensor), POINTER(c_void_p), c_void_p, c_void_p)
P_FROM_PY = PYFUNCTYPE(c_int, py_object, POINTER(c_void_p))
P_TO_PY = PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
P_DLTENSOR = PYFUNCTYPE(c_int, py_object, POINTER(DLTensor))
P_STREAM = PYFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))
SET_ERROR = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)


class API(Structure):
    _fields_ = [("header", Header), ("managed_tensor_allocator", c_void_p),
                ("managed_tensor_from_py_object_no_sync", c_void_p),
                ("managed_tensor_to_py_object_no_sync", c_void_p),
                ("dltensor_from_py_object_no_sync", c_void_p),
                ("current_work_stream", c_void_p)]


_pyapi = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_PyErr_SetString = _pyapi.PyErr_SetString
_PyErr_SetString.argtypes = [py_object, c_char_p]
_PyErr_SetString.restype = None
_Py_DecRef = _pyapi.Py_DecRef
_Py_DecRef.argtypes = [py_object]
_Py_DecRef.restype = None
_PyCapsule_New = _pyapi.PyCapsule_New
_PyCapsule_New.argtypes = [c_void_p, c_void_p, c_void_p]
_PyCapsule_New.restype = py_object
_PyCapsule_GetPointer = _pyapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.argtypes = [py_object, c_char_p]
_PyCapsule_GetPointer.restype = c_void_p
_PyCapsule_SetName = _pyapi.PyCapsule_SetName
_PyCapsule_SetName.argtypes = [py_object, c_void_p]
_PyCapsule_SetName.restype = c_int
_API_NAME = ctypes.create_string_buffer(b"dlpack_exchange_api")  # kept: capsules keep the pointer


def api_of(capsule) -> API:
    return API.from_address(_PyCapsule_GetPointer(capsule, _API_NAME))


def make_producer_type(*, major=1, minor=3, prev=None, null_entry=False, behaviour=None):
    """A producer type carrying a ctypes-built table (and a __dlpack__ fallback).

    behaviour(obj) -> (status, address): what managed_tensor_from_py_object_no_sync does.
    Instances count how each path was taken.
    """
    calls = {"table": 0, "dunder": 0}

    def from_py(obj, out):
        calls["table"] += 1
        if behaviour is not None:
            status, addr = behaviour(obj)
        else:
            rec = make_managed(data=obj.data, shape=obj.data.shape, dtype=(2, 64, 1))
            obj.records.append(rec)
            status, addr = 0, rec.address
        if addr is not None:
            out[0] = addr
        return status

    cb = FROM_PY(from_py)
    api = API()
    api.header.major, api.header.minor = major, minor
    if prev is not None:
        api.header.prev_api = ctypes.cast(ctypes.addressof(prev), POINTER(Header))
    api.managed_tensor_from_py_object_no_sync = (
        None if null_entry else ctypes.cast(cb, c_void_p).value)
    capsule = _PyCapsule_New(ctypes.addressof(api), ctypes.addressof(_API_NAME), None)

    class Producer:
        __dlpack_c_exchange_api__ = capsule
        _keep = (cb, api, prev)

        def __init__(self, data):
            self.data = data
            self.records = []

        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            calls["dunder"] += 1
            return self.data.__dlpack__(max_version=max_version)

        def __dlpack_device__(self):
            return (1, 0)

    Producer.calls = calls
    Producer.api = api
    return Producer


@pytest.fixture(autouse=True)
def fresh_memo():
    """Each test starts with foreign tables on and an empty memo (a type made
    by one test may share the address of another's, freed)."""
    _consume._configure(True, True)
    yield
    _consume._configure(True, True)


@pytest.fixture
def torch_dunder_calls(torch, monkeypatch):
    """Counts the calls of torch.Tensor.__dlpack__ (replaced on torch.Tensor
    itself, beside its table, which still stands for it): 0 after an import
    means that PyTorch's table was used."""
    calls = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        calls.append(type(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    return calls


# ---- the producer side: dlpackshim.Tensor's table --------------------------------

def test_tensor_type_carries_a_versioned_table():
    cap = dlpackshim.Tensor.__dlpack_c_exchange_api__
    assert type(cap).__name__ == "PyCapsule"
    api = api_of(cap)
    assert (api.header.major, api.header.minor) == (1, 3)
    assert not api.header.prev_api
    for name, _ in API._fields_[1:]:
        assert getattr(api, name), name
    # The capsule points at the table the C API hands out.
    assert int(ffi.cast("uintptr_t", lib.dlpackshim_exchange_api())) == ctypes.addressof(api)


def _entries():
    api = api_of(dlpackshim.Tensor.__dlpack_c_exchange_api__)
    return (P_ALLOC(api.managed_tensor_allocator),
            P_FROM_PY(api.managed_tensor_from_py_object_no_sync),
            P_TO_PY(api.managed_tensor_to_py_object_no_sync),
            P_DLTENSOR(api.dltensor_from_py_object_no_sync),
            P_STREAM(api.current_work_stream))


@pytest.mark.numpy_min("2.4")
def test_own_table_entries_called_from_c(np):
    alloc, from_py, to_py, dltensor, stream = _entries()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dlpackshim.from_dlpack(a)
    view = DLTensor()
    assert dltensor(t, byref(view)) == 0
    assert view.data == a.ctypes.data and view.ndim == 2
    assert [view.shape[i] for i in range(2)] == [3, 4]
    assert [view.strides[i] for i in range(2)] == [4, 1]

    out = c_void_p()
    holder = t._holder
    before = sys.getrefcount(holder)
    assert from_py(t, byref(out)) == 0
    m = DLManagedTensorVersioned.from_address(out.value)
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.dl_tensor.data == a.ctypes.data
    assert sys.getrefcount(holder) == before + 1  # the export holds the holder
    # to_py steals the managed tensor and gives a Tensor viewing the same data.
    obj = c_void_p()
    assert to_py(out.value, byref(obj)) == 0
    t2 = ctypes.cast(obj, py_object).value
    _Py_DecRef(t2)  # the new reference to_py gave; t2 holds its own
    assert isinstance(t2, dlpackshim.Tensor)
    assert t2.shape == (3, 4) and t2.data_ptr == a.ctypes.data
    del t2
    gc.collect()
    assert sys.getrefcount(holder) == before  # deleter ran once: reference dropped

    s = c_void_p(123)
    assert stream(1, 0, byref(s)) == 0 and not s.value
    assert stream(2, 0, byref(s)) == 0 and not s.value


@pytest.mark.parametrize("route", ["table", "legacy capsule"])
def test_export_deleter_on_a_thread_without_the_gil_drops_the_holder(np, route):
    """An export's deleter may come on any thread, without the GIL (PyTorch
    calls it so): it takes the GIL itself to drop the holder. ABI-mode cffi
    calls run without the GIL (docs: DLPACK_NOTES.md)."""
    t = dlpackshim.from_dlpack(np.arange(8.0))
    holder = t._holder
    before = sys.getrefcount(holder)
    if route == "table":
        out = c_void_p()
        assert _entries()[1](t, byref(out)) == 0
        free = lib.dlpackshim_tensor_free
        managed = ffi.cast("DLManagedTensorVersioned *", out.value)
    else:  # taken out of the capsule, as a C consumer takes it
        cap = t.__dlpack__()
        address = _PyCapsule_GetPointer(cap, b"dltensor")
        assert _PyCapsule_SetName(cap, producers.static_name(b"used_dltensor")) == 0
        del cap
        free = lib.dlpackshim_tensor_free_legacy
        managed = ffi.cast("DLManagedTensor *", address)
    del t
    gc.collect()
    assert sys.getrefcount(holder) == before  # the export holds it, not the Tensor
    worker = threading.Thread(target=free, args=(managed,))
    worker.start()
    worker.join()
    assert sys.getrefcount(holder) == before - 1


def test_own_table_allocator(np):
    alloc = _entries()[0]
    shape = (c_int64 * 2)(5, 7)
    proto = DLTensor()
    proto.device.device_type, proto.ndim = 1, 2
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
    proto.shape = ctypes.cast(shape, POINTER(c_int64))
    out = c_void_p()
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    assert alloc(byref(proto), byref(out), None, ctypes.cast(set_error, c_void_p)) == 0
    m = DLManagedTensorVersioned.from_address(out.value)
    assert m.dl_tensor.device.device_type == 1 and m.dl_tensor.data % 256 == 0
    assert [m.dl_tensor.strides[i] for i in range(2)] == [7, 1]
    lib.dlpackshim_tensor_free(ffi.cast("DLManagedTensorVersioned *", out.value))
    proto.device.device_type = 2  # CUDA: not ours to allocate
    assert alloc(byref(proto), byref(out), None, ctypes.cast(set_error, c_void_p)) == -1
    assert errors and errors[0][0] == b"BufferError"
    # Host memory is (kDLCPU, 0): another id is refused as the same error,
    # not made into a Tensor that to_py or __dlpack__ refuses later.
    for device_id in (-1, 7):
        errors.clear()
        proto.device.device_type, proto.device.device_id = 1, device_id
        assert alloc(byref(proto), byref(out), None, ctypes.cast(set_error, c_void_p)) == -1
        assert errors[0][0] == b"BufferError" and b"(kDLCPU, 0)" in errors[0][1]
    # An invalid prototype is a wrong argument: ValueError, naming the fault.
    proto.device.device_id = 0
    shape[0] = -3
    errors.clear()
    assert alloc(byref(proto), byref(out), None, ctypes.cast(set_error, c_void_p)) == -1
    assert errors[0][0] == b"ValueError" and b"shape[0]" in errors[0][1]
    # A valid one without compact strides (empty, beside 2^62) is no wrong
    # argument: BufferError, as copy.copy of such a Tensor says.
    wide = (c_int64 * 3)(0, 2 ** 62, 4)
    proto.ndim, proto.shape = 3, ctypes.cast(wide, POINTER(c_int64))
    errors.clear()
    assert alloc(byref(proto), byref(out), None, ctypes.cast(set_error, c_void_p)) == -1
    assert errors[0][0] == b"BufferError" and b"overflow int64" in errors[0][1]


def test_own_table_entries_refuse_a_null_object():
    """A NULL object is refused as a NULL out is (ValueError), not read."""
    api = api_of(dlpackshim.Tensor.__dlpack_c_exchange_api__)
    from_py = PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))(api.managed_tensor_from_py_object_no_sync)
    dltensor = PYFUNCTYPE(c_int, c_void_p, POINTER(DLTensor))(api.dltensor_from_py_object_no_sync)
    with pytest.raises(ValueError, match="NULL argument"):
        from_py(None, byref(c_void_p()))
    with pytest.raises(ValueError, match="NULL argument"):
        dltensor(None, byref(DLTensor()))


def test_own_table_rejects_other_objects_and_closed_tensors(np):
    from_py, dltensor = _entries()[1], _entries()[3]
    out = c_void_p()
    with pytest.raises(TypeError):
        from_py(np.ones(3), byref(out))
    t = dlpackshim.from_dlpack(np.ones(3))
    t.close()
    with pytest.raises(ValueError, match="closed"):
        from_py(t, byref(out))
    with pytest.raises(ValueError, match="closed"):
        dltensor(t, byref(DLTensor()))
    with pytest.raises(ValueError, match="closed"):
        dlpackshim.from_dlpack(t)



def test_own_bare_dltensor_of_read_only_data_is_refused_with_advice_that_fits(np):
    """The refusal advised max_version=, which the C entry has none of."""
    a = np.arange(3.0)
    a.flags.writeable = False
    with pytest.raises(BufferError, match="managed_tensor_from_py_object_no_sync"):
        _entries()[3](dlpackshim.from_dlpack(a), byref(DLTensor()))

@pytest.mark.numpy_min("2.1")
def test_own_tensor_is_imported_sharing_its_holder_before_any_table(np, monkeypatch):
    """consume.c, rule 2: a dlpackshim.Tensor is recognised before its type's
    table or __dlpack__ is looked at; the new Tensor shares its holder."""
    P = make_producer_type()  # a counting table and __dlpack__, put in place of ours
    monkeypatch.setattr(dlpackshim.Tensor, "__dlpack_c_exchange_api__",
                        P.__dlpack_c_exchange_api__)
    monkeypatch.setattr(dlpackshim.Tensor, "__dlpack__", P.__dlpack__)
    a = np.arange(6.0)
    a.flags.writeable = False
    t = dlpackshim.from_dlpack(a)
    t2 = dlpackshim.from_dlpack(t)
    (t3,) = dlpackshim.from_dlpack_many([t])
    assert P.calls == {"table": 0, "dunder": 0}
    assert t2._holder is t._holder and t3._holder is t._holder
    assert t2.data_ptr == t.data_ptr and t2.shape == (6,) and t2.readonly
    monkeypatch.undo()
    del t, a
    gc.collect()
    assert np.from_dlpack(t2).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_tensors_built_in_c_read_their_metadata_on_first_use(np):
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    src = dlpackshim.from_dlpack(a)
    t, u, w = dlpackshim.from_dlpack_many([src, src, src])
    assert t._meta is None  # not read yet: the batch path makes no Python objects per Tensor
    assert t.shape == (3, 2) and t.strides == (4, 2) and t.data_ptr == a.ctypes.data
    assert t._meta is not None
    # every other first use goes through the same lookup
    assert np.from_dlpack(u).tolist() == a.tolist()
    assert bytes(w.tobytes()) == a.tobytes()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.shape
    with pytest.raises(ValueError, match="closed"):
        w.__dlpack__()


def test_dropping_imports_of_own_tensor_releases_the_holder(np):
    src = dlpackshim.from_dlpack(np.arange(4.0))
    holder = src._holder
    before = sys.getrefcount(holder)
    many = dlpackshim.from_dlpack_many([src] * 50)
    assert sys.getrefcount(holder) == before + 50  # one per Tensor sharing it
    del many
    assert sys.getrefcount(holder) == before


def test_table_export_keeps_a_from_pointer_owner_alive(np):
    buf = np.arange(4, dtype=np.int32)
    t = dlpackshim.from_pointer(buf.ctypes.data, (4,), "int32", owner=buf)
    del buf
    t2 = dlpackshim.from_dlpack(t)
    del t
    gc.collect()
    assert np.from_dlpack(t2).tolist() == [0, 1, 2, 3]


def test_tvm_ffi_consumes_and_produces_through_our_table(np):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    fn = tvm_ffi.get_global_func("testing.schema_id_tensor")
    t = dlpackshim.from_dlpack(np.arange(5.0))
    r = fn(t)  # our table in (from_py) and out (to_py)
    assert isinstance(r, dlpackshim.Tensor)
    assert r.data_ptr == t.data_ptr and np.from_dlpack(r).tolist() == [0, 1, 2, 3, 4]


def test_tvm_ffi_tensors_are_copied_by_dlpackshim_when_tvm_cannot(np):
    """apache-tvm-ffi's __dlpack__ raises BufferError("copy not yet
    supported") for copy=True: from_dlpack copies what the plain call gives
    (it did so only with a device= given too)."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = np.arange(4.0)
    x = tvm_ffi.from_dlpack(a)
    t = dlpackshim.from_dlpack(x, copy=True)
    assert t.is_copied and t.data_ptr != a.ctypes.data
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0, 3.0]


# ---- the consumer side -------------------------------------------------------------

def test_torch_table_is_used(torch, np, torch_dunder_calls):
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")
    x = torch.arange(6.0).reshape(2, 3)
    t = dlpackshim.from_dlpack(x)
    assert dlpackshim.from_dlpack_many([x])[0].data_ptr == x.data_ptr()
    assert torch_dunder_calls == []  # the table, not __dlpack__
    assert t.shape == (2, 3) and t.data_ptr == x.data_ptr()
    _consume._configure(False, True)  # the counter sees __dlpack__ when it is used
    assert dlpackshim.from_dlpack(x).data_ptr == x.data_ptr()
    assert torch_dunder_calls == [torch.Tensor]
    _consume._configure(True, True)
    x[0, 0] = 42.0  # shared memory
    assert np.from_dlpack(t)[0, 0] == 42.0
    y = torch.from_dlpack(t)  # and back to torch
    assert y.data_ptr() == x.data_ptr()
    del x, y
    gc.collect()
    assert np.from_dlpack(t).tolist()[0] == [42.0, 1.0, 2.0]


def test_table_producer_deleter_called_once(np):
    P = make_producer_type()
    p = P(np.arange(3.0))
    t = dlpackshim.from_dlpack(p)
    assert P.calls == {"table": 1, "dunder": 0}
    rec = p.records[0]
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0] and rec.deleter_calls == 0
    del t
    gc.collect()
    assert rec.deleter_calls == 1


@pytest.mark.numpy_min("2.1")
def test_version_mismatch_without_prev_api_falls_back_to_dunder(np):
    P = make_producer_type(major=2, minor=0)
    t = dlpackshim.from_dlpack(P(np.arange(3.0)))
    assert P.calls == {"table": 0, "dunder": 1}
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


def test_version_mismatch_follows_prev_api(np):
    old = make_producer_type()  # a valid 1.3 table
    P = make_producer_type(major=2, minor=0, prev=old.api, null_entry=True)
    p = P(np.arange(3.0))
    t = dlpackshim.from_dlpack(p)
    assert old.calls["table"] == 1 and P.calls == {"table": 0, "dunder": 0}
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.numpy_min("2.1")
def test_null_entry_falls_back_to_dunder(np):
    P = make_producer_type(null_entry=True)
    dlpackshim.from_dlpack(P(np.arange(2.0)))
    assert P.calls == {"table": 0, "dunder": 1}


@pytest.mark.parametrize("attribute", ["int", "other capsule"])
def test_attribute_that_is_not_a_table_capsule_is_ignored(np, attribute):
    calls = []

    class P:
        # a capsule of another name is not a table, whatever it points at
        __dlpack_c_exchange_api__ = 12345 if attribute == "int" else np.ones(1).__dlpack__()

        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            calls.append(kw)
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    assert dlpackshim.from_dlpack(P(np.ones(2))).shape == (2,)
    assert dlpackshim.from_dlpack_many([P(np.ones(3))])[0].shape == (3,)
    assert len(calls) == 2


def test_table_error_propagates_as_the_python_exception(np):
    # A C table that raises: ours, carried by a type whose objects are not
    # Tensors. (A ctypes callback cannot leave an exception set.)
    class Fake:
        __dlpack_c_exchange_api__ = dlpackshim.Tensor.__dlpack_c_exchange_api__

        def __dlpack__(self, **kw):  # never called: the table is usable
            raise AssertionError

    with pytest.raises(TypeError, match="not a dlpackshim.Tensor"):
        dlpackshim.from_dlpack(Fake())
    with pytest.raises(TypeError, match="not a dlpackshim.Tensor"):
        dlpackshim.from_dlpack_many([dlpackshim.from_dlpack(np.ones(2)), Fake()])


def test_table_failing_without_exception_is_a_runtime_error(np):
    P = make_producer_type(behaviour=lambda obj: (-1, None))
    with pytest.raises(RuntimeError, match="without setting an exception"):
        dlpackshim.from_dlpack(P(np.ones(2)))



def test_a_tensor_handed_out_with_a_failure_is_deleted_once(np):
    """dlpack.h says NULL on failure: a producer that failed and wrote a
    tensor all the same leaked it (deleted only when it claimed success)."""
    recs = []

    def fails_with_a_tensor(obj):
        recs.append(make_managed(shape=(2,)))
        return -1, recs[-1].address

    P = make_producer_type(behaviour=fails_with_a_tensor)
    with pytest.raises(RuntimeError, match="without setting an exception"):
        dlpackshim.from_dlpack(P(None))
    with pytest.raises(RuntimeError, match="without setting an exception"):
        dlpackshim.from_dlpack_many([P(None)])
    assert [r.deleter_calls for r in recs] == [1, 1]

def test_table_returning_no_tensor_is_a_buffer_error(np):
    P = make_producer_type(behaviour=lambda obj: (0, None))
    with pytest.raises(BufferError, match="no tensor"):
        dlpackshim.from_dlpack(P(np.ones(2)))


@pytest.mark.parametrize("fault, message", [
    (dict(version=(2, 0)), "version 2.0"),
    (dict(ndim=-1), "invalid DLPack tensor"),
], ids=["other_major_version", "invalid"])
def test_refused_tensor_is_deleted(np, fault, message):
    recs = []

    def behaviour(obj):
        rec = make_managed(shape=(2,), **fault)
        recs.append(rec)
        return 0, rec.address

    P = make_producer_type(behaviour=behaviour)
    with pytest.raises(BufferError, match=message):
        dlpackshim.from_dlpack(P(None))
    assert recs[0].deleter_calls == 1


def test_copy_true_of_own_tensor_is_a_fresh_copy(np):
    a = np.arange(4.0)
    t = dlpackshim.from_dlpack(dlpackshim.from_dlpack(a), copy=True)
    assert t.is_copied and t.data_ptr != a.ctypes.data
    assert np.from_dlpack(t).tolist() == a.tolist()


@pytest.mark.numpy_min("2.1")
def test_configure_switches_foreign_tables_off_and_on(np):
    P = make_producer_type()
    _consume._configure(False, True)
    dlpackshim.from_dlpack(P(np.ones(2)))
    dlpackshim.from_dlpack_many([P(np.ones(2))])
    assert P.calls == {"table": 0, "dunder": 2}
    _consume._configure(True, True)
    dlpackshim.from_dlpack(P(np.ones(2)))
    dlpackshim.from_dlpack_many([P(np.ones(2))])
    assert P.calls == {"table": 2, "dunder": 2}


# Our own table on a type whose objects are not Tensors: used, it raises
# TypeError; skipped, the type's __dlpack__ gives a Tensor's capsule.
_ENV_SCRIPT = r"""
import dlpackshim

class Fake:
    __dlpack_c_exchange_api__ = dlpackshim.Tensor.__dlpack_c_exchange_api__
    calls = 0

    def __dlpack__(self, **kw):
        Fake.calls += 1
        return dlpackshim.from_dlpack(b"abcd").__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)

try:
    t = dlpackshim.from_dlpack(Fake())
except TypeError as exc:
    print("table", Fake.calls, "not a dlpackshim.Tensor" in str(exc))
else:
    print("dunder", Fake.calls, t.shape == (4,))
"""


@pytest.mark.parametrize("value, disabled", [("1", True), ("true", True), ("0", False),
                                             ("", False), (None, False)])
def test_environment_variable_read_at_import_turns_foreign_tables_off(value, disabled):
    proc = run_python("-c", _ENV_SCRIPT, env={_consume.ENV_DISABLE: value}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == (["dunder", "1", "True"] if disabled else ["table", "0", "True"])


# ---- from_dlpack_many -------------------------------------------------------------

def test_from_dlpack_many_mixed_inputs(np):
    P = make_producer_type()
    a = np.arange(3.0)
    shim = dlpackshim.from_dlpack(np.arange(4.0))
    objs = [shim, a, P(np.arange(5.0)), b"abc", shim]
    try:
        import torch
        objs.append(torch.arange(2.0))
    except ImportError:
        pass
    for seq in (objs, tuple(objs), iter(objs)):
        out = dlpackshim.from_dlpack_many(seq)
        assert all(isinstance(t, dlpackshim.Tensor) for t in out)
        assert [t.shape for t in out][:5] == [(4,), (3,), (5,), (3,), (4,)]
    assert out[1].data_ptr == a.ctypes.data
    assert dlpackshim.from_dlpack_many([]) == []


def test_from_dlpack_many_imports_any_iterable_as_from_dlpack_does(np):
    """One builtin (consume.c): whatever the iterable, each item in order,
    exactly as from_dlpack imports it (a table-carrying type by its table)."""
    import inspect

    public = dlpackshim.from_dlpack_many
    assert type(public).__name__ == "builtin_function_or_method"
    assert str(inspect.signature(public)) == "(objs, /)"

    class Items(list):
        pass

    P = make_producer_type()
    shim = dlpackshim.from_dlpack(np.arange(4.0))
    frozen = np.arange(2.0)
    frozen.flags.writeable = False
    for make in (list, tuple, Items, iter, lambda xs: (x for x in xs)):
        objs = [shim, np.arange(3.0), P(np.arange(5.0)), b"ab", frozen]
        got, want = public(make(objs)), [dlpackshim.from_dlpack(x) for x in objs]
        assert [(t.shape, t.dtype, t.readonly, t.data_ptr) for t in got] == \
            [(t.shape, t.dtype, t.readonly, t.data_ptr) for t in want]
    assert P.calls == {"table": 10, "dunder": 0}


def test_from_dlpack_many_fails_at_the_first_bad_item(np):
    """Items are imported in order, table or not (issue 30, defect 5: items
    with a C table were imported before the others were tried, so a closed
    Tensor's ValueError came before item 0's NotArrayLikeError)."""
    closed = dlpackshim.from_dlpack(np.arange(3.0))
    closed.close()
    P = make_producer_type()
    for items in ([object(), closed], [object(), P(np.arange(2.0))]):
        with pytest.raises(dlpackshim.NotArrayLikeError, match="builtins.object"):
            dlpackshim.from_dlpack_many(items)
    with pytest.raises(ValueError, match="closed"):
        dlpackshim.from_dlpack_many([np.arange(2.0), closed, object()])


def test_from_dlpack_many_releases_what_it_made_on_failure(np):
    good = make_producer_type()
    bad = make_producer_type(behaviour=lambda obj: (-1, None))
    g = good(np.arange(2.0))
    with pytest.raises(RuntimeError):
        dlpackshim.from_dlpack_many([g, bad(None)])
    gc.collect()
    assert g.records[0].deleter_calls == 1


# ---- threads --------------------------------------------------------------------

def test_many_threads_exchanging(np):
    P = make_producer_type()
    base = np.arange(8.0)
    shim = dlpackshim.from_dlpack(base)
    try:
        import torch
        tt = torch.arange(8.0)
    except ImportError:
        tt = base
    errors = []
    producers_made = []

    def work():
        try:
            p = P(base)
            producers_made.append(p)
            for i in range(300):
                for t in (dlpackshim.from_dlpack(shim), dlpackshim.from_dlpack(tt),
                          dlpackshim.from_dlpack(p)):
                    assert t.shape == (8,)
                many = dlpackshim.from_dlpack_many([shim, tt, p, base])
                assert np.from_dlpack(many[2])[7] == 7.0
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    producers.run_threads(work, [()] * 8)
    assert not errors, errors[:3]
    gc.collect()
    recs = [r for p in producers_made for r in p.records]
    assert len(recs) == 8 * 300 * 2
    assert all(r.deleter_calls == 1 for r in recs)


def test_torch_table_views_it_would_not_export_are_refused(np, torch):
    """PyTorch's table exports conjugate/negative views raw (silently wrong
    values) and grad-requiring tensors; its __dlpack__ refuses them: so do we."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")
    bad = {"gradient": torch.zeros(3, requires_grad=True),
           "conjugate": torch.tensor([1 + 2j], dtype=torch.complex64).conj(),
           "negative": torch.tensor([1.0, 2.0])._neg_view(),
           # checked after the export: the conjugate bit lives on complex tensors only
           "negative bit": torch.tensor([1 + 2j], dtype=torch.complex128).conj().imag,
           # the table fails (no storage); the guard gives torch's own message
           "layout torch.sparse_coo": torch.ones(3).to_sparse(),
           "layout torch.sparse_csr": torch.eye(2).to_sparse_csr()}
    for message, x in bad.items():
        with pytest.raises(BufferError, match=message):
            dlpackshim.from_dlpack(x)
        with pytest.raises(BufferError, match=message):
            dlpackshim.from_dlpack_many([torch.ones(1), x])
    # Through __dlpack__ (a device or a stream asked for, or tables off) the
    # same checks run: PyTorch's __dlpack__ exports a negative view raw too
    # (values [1, 2] for [-1, -2]).
    for kw in ({"device": (1, 0)}, {"stream": -1}, {"device": (1, 0), "copy": True}, {}):
        if not kw:
            _consume._configure(False, True)
        try:
            for message in ("negative", "negative bit"):
                with pytest.raises(BufferError, match=message):
                    dlpackshim.from_dlpack(bad[message], **kw)
            got = dlpackshim.from_dlpack(torch.tensor([1.0, 2.0]).neg(), **kw)
            assert np.from_dlpack(got).tolist() == [-1.0, -2.0]
        finally:
            _consume._configure(True, True)
    ok = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    assert np.from_dlpack(dlpackshim.from_dlpack(ok)).tolist() == [1 + 2j, 3 - 4j]
    assert np.from_dlpack(dlpackshim.from_dlpack(ok.conj().resolve_conj())).tolist() == \
        [1 - 2j, 3 + 4j]


# ---- guards: checks made before a type's table is used ---------------------------
# _consume._guard_for(type) -> None, NotImplemented, or (callable, checks), each
# check (name, expected, call, code): code -1 before the export, else after an
# export of that DLDataTypeCode. C asks once per type and table (the memo).

@pytest.fixture
def guard_for():
    """Installs a guard factory in place of the package's (_configure's third
    argument); the memo's verdicts are dropped on either side, so that no
    type keeps the package's guard (or the test's)."""
    def install(factory):
        _consume._configure(True, True, factory)
    yield install
    _consume._configure(True, True, _consume._guard_for)


def test_guard_runs_the_callable_only_when_a_value_differs(np, guard_for):
    Producer = make_producer_type()
    Producer.flag = False
    Producer.kind = lambda self: "plain"
    refused = []

    def refuse(obj):
        refused.append(obj)
        if obj.flag == "veto":
            raise BufferError("vetoed by the guard")

    guard_for(lambda tp: (refuse, (("flag", False, False, -1), ("kind", "plain", True, -1)))
              if tp is Producer else None)
    ok = Producer(np.arange(3.0))
    assert dlpackshim.from_dlpack(ok).shape == (3,)
    assert refused == [] and Producer.calls["table"] == 1
    odd = Producer(np.arange(2.0))
    odd.kind = lambda: "odd"  # a method result that differs: the callable decides
    assert dlpackshim.from_dlpack(odd).shape == (2,) and refused == [odd]
    vetoed = Producer(np.arange(2.0))
    vetoed.flag = "veto"
    with pytest.raises(BufferError, match="vetoed by the guard"):
        dlpackshim.from_dlpack_many([ok, vetoed])
    assert Producer.calls["table"] == 3  # ok twice and odd; vetoed never reached the table


def test_guard_is_asked_once_per_type_and_table(np, guard_for):
    """The memo keeps the verdict with the table it judged: guard_for runs
    again only for another table (or after _configure forgot it)."""
    Producer, Other = make_producer_type(), make_producer_type()
    asked = []

    def factory(tp):
        asked.append(tp)
        return None

    guard_for(factory)
    for _ in range(3):
        dlpackshim.from_dlpack(Producer(np.arange(2.0)))
    dlpackshim.from_dlpack_many([Producer(np.arange(2.0))] * 3)
    assert asked == [Producer] and Producer.calls["table"] == 6
    Producer.__dlpack_c_exchange_api__ = Other.__dlpack_c_exchange_api__
    dlpackshim.from_dlpack(Producer(np.arange(2.0)))
    assert asked == [Producer, Producer] and Other.calls["table"] == 1
    _consume._configure(True, True)
    dlpackshim.from_dlpack(Producer(np.arange(2.0)))
    assert asked == [Producer] * 3


def test_guard_check_errors_propagate(np, guard_for):
    Producer = make_producer_type()

    def boom(self):
        raise KeyError("from the producer's method")

    Producer.check = boom
    guard_for(lambda tp: (lambda obj: None, (("check", None, True, -1),))
              if tp is Producer else None)
    with pytest.raises(KeyError, match="from the producer's method"):
        dlpackshim.from_dlpack(Producer(np.arange(3.0)))
    assert Producer.calls == {"table": 0, "dunder": 0}


def test_guard_check_with_a_dtype_code_is_made_after_the_export_of_that_dtype(np, guard_for):
    """A check with a code >= 0 waits for the export's dtype: made only for
    tensors of that DLDataTypeCode (PyTorch's conjugate bit exists only on
    complex tensors), and a refusal there deletes the export."""
    recs, asked = [], []

    def behaviour(obj):
        rec = make_managed(shape=(2,), dtype=obj.data)  # data: the dtype to export
        recs.append(rec)
        return 0, rec.address

    Producer = make_producer_type(behaviour=behaviour)

    def conj(self):
        asked.append(self)
        return self.conj_bit

    Producer.is_conj = conj
    Producer.conj_bit = False

    def refuse(obj):
        raise BufferError("conjugate refused by the guard")

    guard_for(lambda tp: (refuse, (("is_conj", False, True, 5),)) if tp is Producer else None)
    real, cplx = Producer((2, 64, 1)), Producer((5, 64, 1))
    assert [t.dtype.code for t in dlpackshim.from_dlpack_many([real, cplx])] == [2, 5]
    assert asked == [cplx]  # the float64 export never asked
    cplx.conj_bit = True
    with pytest.raises(BufferError, match="conjugate refused"):
        dlpackshim.from_dlpack(cplx)
    real.conj_bit = True  # not checked for a float64 export
    assert dlpackshim.from_dlpack(real).dtype.code == 2
    assert Producer.calls["table"] == 4 and asked == [cplx, cplx]
    cplx.conj_bit = KeyError  # the check itself fails after the export
    Producer.is_conj = lambda self: (_ for _ in ()).throw(KeyError("from is_conj"))
    with pytest.raises(KeyError, match="from is_conj"):
        dlpackshim.from_dlpack_many([real, cplx])
    gc.collect()
    # every export deleted once: the refused one, the failed check's, and the
    # batch's first item, dropped with the batch
    assert len(recs) == 6 and [r.deleter_calls for r in recs] == [1] * 6


def test_a_guard_check_after_the_export_that_closes_the_new_tensor(np, guard_for):
    """A check made after the export runs Python code, which can reach the
    new Tensor (through gc) and close it: what the import needs of that
    Tensor afterwards was read before (a use after free under ASan)."""
    data = np.arange(4, dtype=np.complex64)

    def behaviour(obj):
        rec = make_managed(data=data, shape=(4,), dtype=(5, 64, 1))
        obj.records.append(rec)
        return 0, rec.address

    Producer = make_producer_type(behaviour=behaviour)

    def is_conj(self):
        for o in gc.get_objects():
            if type(o) is dlpackshim.Tensor and not o.closed and o.data_ptr == data.ctypes.data:
                o.close()
        return False

    Producer.is_conj = is_conj
    guard_for(lambda tp: (lambda obj: None, (("is_conj", False, True, 5),))
              if tp is Producer else None)
    p = Producer(data)
    t = dlpackshim.from_dlpack(p)
    assert t.closed and Producer.calls == {"table": 1, "dunder": 0}
    gc.collect()
    assert [r.deleter_calls for r in p.records] == [1]


@pytest.mark.parametrize("guard_raises", [True, False])
def test_a_failing_table_asks_the_guard_for_its_error(np, guard_for, guard_raises):
    """When the table fails, the guard's callable is asked: its exception
    (the producer's own words) replaces the table's; if it raises none, the
    table's stands."""
    Producer = make_producer_type(behaviour=lambda obj: (0, None))  # "no tensor"
    seen = []

    def explain(obj):
        seen.append(obj)
        if guard_raises:
            raise BufferError("the guard knows why")

    guard_for(lambda tp: (explain, (("flag", None, False, -1),)) if tp is Producer else None)
    Producer.flag = None
    p = Producer(np.ones(2))
    with pytest.raises(BufferError, match="the guard knows why" if guard_raises else "no tensor"):
        dlpackshim.from_dlpack(p)
    assert seen == [p] and Producer.calls["table"] == 1
    # Only a refusal (BufferError) is explained: a broken producer's error stays.
    Broken = make_producer_type(behaviour=lambda obj: (-1, None))
    guard_for(lambda tp: (explain, (("flag", None, False, -1),))
              if tp in (Producer, Broken) else None)
    Broken.flag = None
    with pytest.raises(RuntimeError, match="without setting an exception"):
        dlpackshim.from_dlpack(Broken(np.ones(2)))
    assert seen == [p]


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("bad", [
    "raises", len, 5, (len,), (len, (), ()), (len, []), (len, [("n", 2, False, -1)]),
    (len, ("n",)), (len, (("n", 2, False),)), (len, ((1, 2, False, -1),)),
    (len, (("n", 2, 1, -1),)),
    # a code is -1 or a DLDataTypeCode (a uint8_t), nothing else
    (len, (("n", 2, False, "5"),)), (len, (("n", 2, False, -2),)),
    (len, (("n", 2, False, 256),)), (len, (("n", 2, False, 1 << 70),)),
    (len, (("n", 2, False, True),))],
    ids=lambda bad: repr(bad).replace("<built-in function len>", "len"))
def test_unusable_guard_falls_back_to_dunder(np, guard_for, bad):
    """A guard_for that raises or answers in another form gives no checks to
    make: the table is not used (a malformed one crashed the process), and
    __dlpack__, which makes its own checks, is."""
    Producer = make_producer_type()

    def factory(tp):
        if tp is not Producer:
            return None
        if bad == "raises":
            raise RuntimeError("guard_for failed")
        return bad

    guard_for(factory)
    t = dlpackshim.from_dlpack(Producer(np.arange(4.0)))
    assert dlpackshim.from_dlpack_many([Producer(np.arange(2.0))])[0].shape == (2,)
    assert t.shape == (4,) and Producer.calls == {"table": 0, "dunder": 2}


def test_a_ctrl_c_in_guard_for_is_not_swallowed(np, guard_for):
    """KeyboardInterrupt (and SystemExit) are not failures of the guard:
    they reach the caller, and nothing is remembered of the type."""
    Producer = make_producer_type()
    hits = []

    def factory(tp):
        if tp is Producer and not hits:
            hits.append(tp)
            raise KeyboardInterrupt
        return None

    guard_for(factory)
    with pytest.raises(KeyboardInterrupt):
        dlpackshim.from_dlpack(Producer(np.arange(4.0)))
    assert Producer.calls == {"table": 0, "dunder": 0}
    assert dlpackshim.from_dlpack(Producer(np.arange(4.0))).shape == (4,)  # asked again
    assert Producer.calls == {"table": 1, "dunder": 0}


# ---- issue 10: the memo, overrides, errors, snapshots ---------------------------------

@pytest.mark.numpy_min("2.1")
def test_a_batch_judges_a_types_table_once_and_the_next_batch_again(np):
    """from_dlpack_many reads a type's table verdict once a call: a table
    deleted by the producer during the batch is used for the rest of it (the
    table itself is static), and not by the next call."""
    P = make_producer_type()
    orig = P.__dlpack_c_exchange_api__
    out = dlpackshim.from_dlpack_many([P(np.arange(2.0)) for _ in range(3)])
    assert [t.tobytes() for t in out] == [np.arange(2.0).tobytes()] * 3
    assert P.calls == {"table": 3, "dunder": 0}
    del P.__dlpack_c_exchange_api__
    out = dlpackshim.from_dlpack_many([P(np.arange(2.0)) for _ in range(2)])
    assert P.calls == {"table": 3, "dunder": 2}
    P.__dlpack_c_exchange_api__ = orig


@pytest.mark.numpy_min("2.1")
def test_a_deleted_table_is_not_used_from_the_memo(np):
    """Item 10: the memo may speed things up, never change the answer."""
    P = make_producer_type()
    assert dlpackshim.from_dlpack(P(np.arange(3.0))).tobytes() == np.arange(3.0).tobytes()
    assert P.calls == {"table": 1, "dunder": 0}
    del P.__dlpack_c_exchange_api__
    t = dlpackshim.from_dlpack(P(np.arange(4.0)))
    assert t.tobytes() == np.arange(4.0).tobytes()
    assert P.calls == {"table": 1, "dunder": 1}  # through __dlpack__ now
    # from_dlpack_many and copy=True (which never takes a table) too
    assert dlpackshim.from_dlpack_many([P(np.arange(2.0))])[0].shape == (2,)
    assert dlpackshim.from_dlpack(P(np.arange(2.0)), copy=True).shape == (2,)
    assert P.calls == {"table": 1, "dunder": 3}


def test_a_replaced_table_is_used_at_once(np):
    P = make_producer_type()
    Q = make_producer_type()
    dlpackshim.from_dlpack(P(np.arange(3.0)))
    P.__dlpack_c_exchange_api__ = Q.__dlpack_c_exchange_api__
    dlpackshim.from_dlpack(P(np.arange(3.0)))
    assert P.calls["table"] == 1 and Q.calls["table"] == 1


@pytest.mark.numpy_min("2.1")
def test_an_evicted_stale_table_falls_back_to_dunder(np):
    """Item 10: once 16 other table types evict it, TypeError was raised."""
    P = make_producer_type()
    dlpackshim.from_dlpack(P(np.arange(3.0)))
    del P.__dlpack_c_exchange_api__
    others = [make_producer_type() for _ in range(20)]
    for O in others:
        dlpackshim.from_dlpack(O(np.arange(1.0)))
    t = dlpackshim.from_dlpack(P(np.arange(5.0)))
    assert t.shape == (5,) and P.calls["dunder"] == 1


def test_a_dunder_assigned_later_is_honoured(np):
    """Item 7 and 10: a __dlpack__ defined on a subclass after its table was cached."""
    P = make_producer_type()

    class Sub(P):
        pass

    dlpackshim.from_dlpack(Sub(np.arange(3.0)))
    assert P.calls["table"] == 1

    def refuse(self, **kw):
        raise BufferError("Sub refuses")

    Sub.__dlpack__ = refuse
    with pytest.raises(BufferError, match="Sub refuses"):
        dlpackshim.from_dlpack(Sub(np.arange(3.0)))
    with pytest.raises(BufferError, match="Sub refuses"):
        dlpackshim.from_dlpack_many([Sub(np.arange(3.0))])
    assert P.calls["table"] == 1


def test_a_subclass_dunder_is_not_bypassed_by_the_inherited_table(np):
    """Item 7: the table stands for the __dlpack__ of the class that carries it."""
    P = make_producer_type()

    class G(P):
        def __dlpack__(self, **kw):
            raise BufferError("G's own __dlpack__")

    for route in (dlpackshim.from_dlpack, lambda x: dlpackshim.from_dlpack_many([x])[0]):
        with pytest.raises(BufferError, match="G's own"):
            route(G(np.arange(3.0)))
    assert P.calls == {"table": 0, "dunder": 0}

    class H(P):  # sets the table itself next to its own __dlpack__: its claim
        __dlpack_c_exchange_api__ = P.__dlpack_c_exchange_api__

        def __dlpack__(self, **kw):
            raise BufferError("unused")

    assert dlpackshim.from_dlpack(H(np.arange(3.0))).shape == (3,)
    assert P.calls == {"table": 1, "dunder": 0}

    class Plain(P):  # inherits both: the table stands for the __dlpack__
        pass

    for route in (dlpackshim.from_dlpack, lambda x: dlpackshim.from_dlpack_many([x])[0]):
        assert route(Plain(np.arange(3.0))).shape == (3,)
    assert P.calls == {"table": 3, "dunder": 0}


def test_torch_subclass_dunder_is_not_bypassed(torch, torch_dunder_calls):
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")

    class G(torch.Tensor):
        def __dlpack__(self, *a, **kw):
            raise BufferError("G refuses export")

    g = torch.arange(3.0).as_subclass(G)
    with pytest.raises(BufferError, match="G refuses"):
        dlpackshim.from_dlpack(g)
    with pytest.raises(BufferError, match="G refuses"):
        dlpackshim.from_dlpack_many([torch.arange(2.0), g])

    class Plain(torch.Tensor):
        pass

    torch_dunder_calls.clear()
    p = torch.arange(3.0).as_subclass(Plain)
    assert dlpackshim.from_dlpack(p).data_ptr == p.data_ptr()
    assert dlpackshim.from_dlpack_many([p])[0].data_ptr == p.data_ptr()
    assert torch_dunder_calls == []  # through the table, as torch.Tensor


_TORCH_REFUSED = {
    "quantized": lambda torch: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
    "meta": lambda torch: torch.empty(3, device="meta"),
    "bits8": lambda torch: torch.zeros(3, dtype=torch.uint8).view(torch.bits8),
}


@pytest.mark.parametrize("kind", sorted(_TORCH_REFUSED))
def test_torch_table_refusals_are_buffer_errors(kind, torch, np):
    """Item 9: the same class and a readable message on every route."""
    x = _TORCH_REFUSED[kind](torch)
    with pytest.raises(BufferError) as ref:
        np.from_dlpack(x)
    expected = str(ref.value)
    routes = {
        "from_dlpack": dlpackshim.from_dlpack,
        "from_dlpack copy": lambda x: dlpackshim.from_dlpack(x, copy=True),
        "from_dlpack_many": lambda x: dlpackshim.from_dlpack_many([torch.ones(1), x]),
        "dunder": lambda x: dlpackshim.from_dlpack(x.__dlpack__(max_version=(1, 0))),
    }
    for name, route in routes.items():
        with pytest.raises(BufferError) as got:
            route(x)
        assert str(got.value) == expected, name
        assert "Exception raised from" not in str(got.value), name


def test_other_table_errors_keep_their_class(np):
    """Only RuntimeError/NotImplementedError mean "cannot export"; a foreign
    table's other errors pass as they are (here: a copy of our own table,
    which raises TypeError for anything but a dlpackshim.Tensor)."""
    ours = api_of(dlpackshim.Tensor.__dlpack_c_exchange_api__)
    copy = API()
    ctypes.pointer(copy)[0] = ours
    cap = _PyCapsule_New(ctypes.addressof(copy), ctypes.addressof(_API_NAME), None)

    class Foreign:
        __dlpack_c_exchange_api__ = cap
        _keep = copy

        def __dlpack__(self, **kw):
            raise AssertionError("not called: the table is usable")

    for route in (dlpackshim.from_dlpack, lambda x: dlpackshim.from_dlpack_many([x])):
        with pytest.raises(TypeError, match="not a dlpackshim.Tensor") as got:
            route(Foreign())
        assert type(got.value) is TypeError


def test_from_dlpack_many_snapshots_a_shrinking_list(np):
    """Item 11: a producer that shrinks the list mid-call."""
    objs = []

    def behaviour(obj):
        del objs[1:]  # the list shrinks while the C side walks it
        rec = make_managed(data=obj.data, shape=obj.data.shape, dtype=(2, 64, 1))
        obj.records.append(rec)
        return 0, rec.address

    P = make_producer_type(behaviour=behaviour)
    items = [P(np.arange(1.0)), np.arange(2.0), P(np.arange(3.0)), b"abcd"]
    objs.extend(items)
    out = dlpackshim.from_dlpack_many(objs)
    assert [t.shape for t in out] == [(1,), (2,), (3,), (4,)]
    assert len(objs) == 1


def test_from_dlpack_many_snapshot_against_a_growing_list(np):
    objs = []

    def behaviour(obj):
        objs.append(np.arange(9.0))  # grows: the extra items are not the caller's
        rec = make_managed(data=obj.data, shape=obj.data.shape, dtype=(2, 64, 1))
        obj.records.append(rec)
        return 0, rec.address

    P = make_producer_type(behaviour=behaviour)
    objs.extend([P(np.arange(1.0)), P(np.arange(2.0))])
    out = dlpackshim.from_dlpack_many(objs)
    assert [t.shape for t in out] == [(1,), (2,)]


def test_from_dlpack_many_when_a_producer_reassigns_the_classes_of_its_batch(np):
    """A producer whose export moves every item of the batch to another
    class, and drops its own class: the batch holds the type of its current
    run (a freed type's address could come back as another's), and each
    item goes through the table of the class it has when it is reached."""
    objs = []

    def moving(obj):
        for o in objs:
            o.__class__ = Q
        rec = make_managed(data=obj.data, shape=obj.data.shape, dtype=(2, 64, 1))
        obj.records.append(rec)
        return 0, rec.address

    P = make_producer_type(behaviour=moving)
    Q = make_producer_type()
    refs = []
    for _ in range(3):
        objs[:] = [P(np.arange(float(i + 1))) for i in range(6)]
        out = dlpackshim.from_dlpack_many(objs)
        assert [t.tobytes() for t in out] == [np.arange(float(i + 1)).tobytes() for i in range(6)]
        assert all(type(o) is Q for o in objs)
        del out
        objs.clear()
        gc.collect()
        refs.append((sys.getrefcount(P), sys.getrefcount(Q)))
    assert refs[1] == refs[2]  # the type each run held was let go (the first call fills caches)


def test_dltensor_view_of_a_null_strides_source(np):
    """Item 15: a Tensor whose producer gave NULL strides (pre-1.2) still has a non-owning view."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    cap, rec = producers.make_capsule(versioned=False, data=a, shape=a.shape,
                                      dtype=(2, 32, 1), null_strides=True)
    t = dlpackshim.from_dlpack(cap)
    dltensor = _entries()[3]
    views = [DLTensor(), DLTensor()]
    for v in views:
        assert dltensor(t, byref(v)) == 0
    for v in views:
        assert v.data == a.ctypes.data and v.ndim == 3
        assert [v.strides[i] for i in range(3)] == [12, 4, 1]
    assert ctypes.addressof(views[0].strides.contents) == ctypes.addressof(views[1].strides.contents)
    assert np.from_dlpack(t).tolist() == a.tolist()  # __dlpack__ agrees
    t2 = dlpackshim.from_dlpack(t)  # shares the owner: the same strides
    v2 = DLTensor()
    assert dltensor(t2, byref(v2)) == 0 and [v2.strides[i] for i in range(3)] == [12, 4, 1]
    del t, t2, cap
    gc.collect()  # the owner's destructor frees them (checked for leaks under ASan)
    assert rec.deleter_calls == 1
    z = dlpackshim.from_dlpack(producers.make_capsule(versioned=False, shape=(0, 5),
                                                      null_strides=True)[0])
    v = DLTensor()
    assert dltensor(z, byref(v)) == 0 and [v.strides[i] for i in range(2)] == [5, 1]


@pytest.mark.numpy_min("2.1")
def test_a_deleted_dunder_is_not_called_once_its_route_was_taken(np):
    """Item 10, the rest of its kind: how a type's objects were imported is
    not remembered past a change of the type."""
    calls = []

    class P:
        def __init__(self, a):
            self.a = a
            self.__array_interface__ = a.__array_interface__

        def __dlpack__(self, **kw):
            calls.append(kw)
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    a = np.arange(3.0)
    for _ in range(2):  # seen twice: a memo would know the type by now
        assert dlpackshim.from_dlpack(P(a)).data_ptr == a.ctypes.data
    assert len(calls) == 2
    del P.__dlpack__
    t = dlpackshim.from_dlpack(P(a))  # now through __array_interface__
    assert t.data_ptr == a.ctypes.data and len(calls) == 2

    class Q(P):
        def __dlpack__(self, **kw):
            raise AttributeError("the producer's own AttributeError")

    for _ in range(2):  # not taken for "no __dlpack__", the first time or later
        with pytest.raises(AttributeError, match="producer's own"):
            dlpackshim.from_dlpack(Q(a))


def test_torch_subclass_torch_function_is_not_bypassed(torch, np, torch_dunder_calls):
    """Item 7, the rest of its kind: torch.Tensor.__dlpack__ runs a subclass's
    __torch_function__, which PyTorch's table skips."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")

    class G(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__dlpack__:
                raise BufferError("G: no export")
            return super().__torch_function__(func, types, args, kwargs or {})

    g = torch.arange(3.0).as_subclass(G)
    with pytest.raises(BufferError, match="G: no export"):
        np.from_dlpack(g)  # the reference
    with pytest.raises(BufferError, match="G: no export"):
        dlpackshim.from_dlpack(g)
    with pytest.raises(BufferError, match="G: no export"):
        dlpackshim.from_dlpack_many([g])

    class Off(torch.Tensor):  # the documented way to turn it off: the table is fine
        __torch_function__ = torch._C._disabled_torch_function_impl

    torch_dunder_calls.clear()
    o = torch.arange(3.0).as_subclass(Off)
    assert dlpackshim.from_dlpack(o).data_ptr == o.data_ptr()
    assert dlpackshim.from_dlpack_many([o])[0].data_ptr == o.data_ptr()
    assert torch_dunder_calls == []  # through the table



def test_an_entry_that_exports_and_raises_fails_and_its_tensor_is_deleted(tmp_path):
    cap = producers.export_and_raise_table(
        int(ffi.cast("uintptr_t", lib.dlpackshim_exchange_api())), tmp_path)
    Sub = type("Sub", (dlpackshim.Tensor,), {"__slots__": (), "__dlpack_c_exchange_api__": cap})
    buf = bytearray(range(8))
    for imp in (dlpackshim.from_dlpack, lambda t: dlpackshim.from_dlpack_many([t])):
        t = dlpackshim.from_dlpack(buf)
        t.__class__ = Sub
        # The entry's own error (PyTorch's RuntimeError rule: a BufferError),
        # never a SystemError for a result returned with an exception set.
        with pytest.raises(BufferError, match="set after a successful export"):
            imp(t)
        t.close()
        del t
        gc.collect()
        buf.append(0)  # every export of buf is gone: the tensor exported was deleted
        del buf[-1]
