"""`python3 -m dlpackshim check`: the producer conformance checker.

Run against NumPy, PyTorch and JAX (what each fails is recorded here, so a
library upgrade that fixes or breaks a rule shows up as a test failure to
update), against dlpackshim's own Tensor, and against deliberately broken
producers built with tests/python/producers.py, each of which must fail
exactly the rule it breaks.
"""
from __future__ import annotations

import ctypes
import json

import pytest

import producers as P
from conftest import asan_options, run_python
import dlpackshim as ds
from dlpackshim.testing import TensorSpec, make_producer
from dlpackshim.testing.producer_check import check_producer, run_check
from dlpackshim.testing.report import FAIL, NA, PASS

EXAMPLES = 10

ALL_RULES = {
    "producer.methods", "device.tuple", "keywords.2023_12", "capsule.legacy",
    "capsule.versioned", "version.reported", "tensor.valid", "dtype.code", "shape.matches",
    "device.matches", "strides.non_null", "byte_offset", "elements.match", "flags.read_only",
    "copy.true",
    "copy.false", "dl_device.own", "dl_device.unsupported", "stream.cpu",
    "deleter.unconsumed", "deleter.used_capsule", "deleter.consumed", "refcount.restored",
    "exchange.table",
    "views.hypothesis",
}


def _cli(*args, timeout=300):
    # `make check-asan`: GCC 12's LeakSanitizer crashes ("Tracer caught
    # signal 11") stopping the threads of these children when pytest started
    # them; the same checks run in-process above, under LSan.
    env = asan_options("detect_leaks=0")
    return run_python("-m", "dlpackshim", "check", *args, env=env, timeout=timeout)


def _failed(report):
    return set(report.ids(FAIL))


# ---------------------------------------------------------------------------
# The big libraries: what they pass and fail today
# ---------------------------------------------------------------------------

@pytest.mark.numpy_min("2.4")
def test_numpy_passes_everything(np):
    rep = check_producer(lambda: np.arange(12.0).reshape(3, 4), target="numpy", examples=EXAMPLES)
    assert {r.id for r in rep.rules} == ALL_RULES
    assert _failed(rep) == set(), rep.table()
    assert rep.ids("error") == []
    # NumPy 2.x exports version 1.0 (strides present): the 1.2 rule does not apply.
    assert rep.status("strides.non_null") == NA
    assert "(1, 3)->(1, 0)" in rep["version.reported"].evidence
    assert rep.status("flags.read_only") == PASS and "0x1" in rep["flags.read_only"].evidence
    assert rep.status("copy.true") == PASS and "IS_COPIED set" in rep["copy.true"].evidence
    assert rep.exit_status == 0


@pytest.mark.numpy_min("2.4")
def test_numpy_dtypes_and_0d(np):
    for make in (lambda: np.zeros((2, 3), dtype=np.bool_),
                 lambda: np.arange(6, dtype=np.int16)[::2],
                 lambda: np.array(3.5, dtype=np.float32),
                 lambda: np.zeros((0, 4), dtype=np.complex64)):
        rep = check_producer(make, examples=5)
        assert _failed(rep) == set(), rep.table()


def test_torch_fails_is_copied_and_dl_device(torch):
    rep = check_producer(lambda: torch.arange(12.0).reshape(3, 4), target="torch",
                         examples=EXAMPLES)
    # PyTorch copies on copy=True but does not set IS_COPIED, and answers an
    # unsupported dl_device with NotImplementedError instead of BufferError.
    assert _failed(rep) == {"copy.true", "dl_device.unsupported"}, rep.table()
    assert "IS_COPIED NOT set" in rep["copy.true"].evidence
    assert "in a fresh buffer" in rep["copy.true"].evidence
    assert "NotImplementedError" in rep["dl_device.unsupported"].evidence
    # No read-only tensors in PyTorch; version 1.3 with strides.
    assert rep.status("flags.read_only") == NA
    assert rep.status("strides.non_null") == PASS
    assert rep.status("views.hypothesis") == PASS
    assert "negative steps not supported" in rep["views.hypothesis"].evidence
    assert rep.exit_status == 1


@pytest.mark.parametrize("defect, evidence", [
    ("exchange-major-2", "no table of major version 1"),
    ("exchange-bad-name", "named 'not_dlpack_exchange_api'"),
    ("exchange-null-entries", "required entries are NULL: managed_tensor_allocator"),
    ("exchange-fails-silently", "managed_tensor_from_py_object_no_sync returned -1 with no "
                                "exception set"),
    ("exchange-null-out", "managed_tensor_from_py_object_no_sync returned 0 and no tensor"),
])
def test_a_broken_exchange_table_fails_its_rule(defect, evidence):
    keep = []

    def factory():
        obj, holder = make_producer(TensorSpec(shape=(3, 4), seed=1, defect=defect))
        keep.append(holder)
        return obj

    rep = check_producer(factory, examples=EXAMPLES)
    assert rep.status("exchange.table") == FAIL
    assert evidence in rep["exchange.table"].evidence


def test_an_exchange_table_attribute_that_raises_fails_the_rule():
    class Meta(type):
        def __getattribute__(cls, name):
            if name == "__dlpack_c_exchange_api__":
                raise RuntimeError("the metaclass says no")
            return super().__getattribute__(name)

    class Odd(metaclass=Meta):
        def __init__(self):
            self.t = ds.from_dlpack(bytearray(range(12)))

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    rep = check_producer(Odd, examples=EXAMPLES)
    assert rep.status("exchange.table") == FAIL
    assert "raised RuntimeError: the metaclass says no" in rep["exchange.table"].evidence
    assert rep.ids("error") == []


def test_exchange_tables_that_work_pass_and_a_type_without_one_is_na():
    rep = check_producer(lambda: ds.from_dlpack(bytearray(range(12))), examples=EXAMPLES)
    assert rep.status("exchange.table") == PASS, rep["exchange.table"].evidence
    assert "exports what __dlpack__ does" in rep["exchange.table"].evidence
    np = pytest.importorskip("numpy")
    assert check_producer(lambda: np.arange(3.0), examples=EXAMPLES).status("exchange.table") == NA
    torch = pytest.importorskip("torch")
    rep = check_producer(lambda: torch.arange(12.0).reshape(3, 4), examples=EXAMPLES)
    assert rep.status("exchange.table") == PASS, rep["exchange.table"].evidence


def test_views_transpose_an_array_api_array_through_its_namespace():
    """The array API has no .transpose/.permute method: permute_dims of the
    array's namespace (array-api-strict's arrays have only that)."""
    xp = pytest.importorskip("array_api_strict")
    rep = check_producer(lambda: xp.reshape(xp.arange(12, dtype=xp.float32), (3, 4)),
                         target="array_api_strict", examples=EXAMPLES)
    assert rep.status("views.hypothesis") == PASS, rep["views.hypothesis"].evidence
    assert "transposes" in rep["views.hypothesis"].evidence


def test_jax_fails_legacy_capsules():
    jnp = pytest.importorskip("jax.numpy")
    rep = check_producer(lambda: jnp.arange(12.0).reshape(3, 4), target="jax",
                         examples=EXAMPLES)
    # JAX takes max_version but always returns a legacy "dltensor" capsule:
    # no version, so no READ_ONLY for its immutable arrays and no IS_COPIED.
    assert _failed(rep) == {"capsule.versioned", "flags.read_only", "copy.true"}, rep.table()
    assert 'legacy "dltensor"' in rep["capsule.versioned"].evidence
    assert rep.status("version.reported") == NA
    # JAX's capsule destructor calls its deleter function directly, not through
    # the struct's field, and holds no Python reference: not observable.
    assert rep.status("deleter.unconsumed") == NA
    assert rep.status("deleter.consumed") == PASS
    assert rep.status("dl_device.unsupported") == PASS


def test_dlpackshim_tensor_passes(np):
    import dlpackshim
    rep = check_producer(lambda: dlpackshim.from_dlpack(np.arange(12.0).reshape(3, 4)),
                         target="dlpackshim", examples=EXAMPLES)
    assert _failed(rep) == set(), rep.table()
    assert rep.status("capsule.versioned") == PASS
    assert "v1.3" in rep["capsule.versioned"].evidence
    assert rep.status("copy.true") == PASS


# ---------------------------------------------------------------------------
# Deliberately broken producers: each fails the rule it breaks
# ---------------------------------------------------------------------------

class _VP(P.VersionedProducer):
    """A VersionedProducer that tells where its first element is."""

    def data_ptr(self):
        return self.data_address + self.kw["byte_offset"]


def _vp(**kw):
    kw.setdefault("shape", (3, 4))
    kw.setdefault("dtype", (2, 32, 1))
    return lambda: _VP(**kw)


def _failed_ctypes(rep):
    """Failed rules of a producers.py producer, which ignores `stream` (so
    stream.cpu always fails, rightly)."""
    assert rep.status("stream.cpu") == FAIL, rep.table()
    return _failed(rep) - {"stream.cpu"}


def test_conforming_ctypes_producer_passes():
    rep = check_producer(_vp(), examples=0)
    assert _failed_ctypes(rep) == set(), rep.table()
    assert rep.status("views.hypothesis") == NA  # no slicing on this producer
    assert rep.status("deleter.unconsumed") == PASS
    assert rep.status("deleter.used_capsule") == PASS


def test_legacy_only_producer():
    rep = check_producer(lambda: P.LegacyProducer(shape=(3, 4), dtype=(2, 32, 1)), examples=0)
    failed = _failed(rep)
    assert {"keywords.2023_12", "capsule.versioned", "copy.true", "copy.false",
            "dl_device.own"} <= failed, rep.table()
    assert "TypeError" in rep["keywords.2023_12"].evidence
    assert rep.status("capsule.legacy") == PASS
    assert rep.status("deleter.consumed") == PASS


def test_byte_offset():
    rep = check_producer(_vp(byte_offset=48), examples=0)
    assert rep.status("byte_offset") == PASS, rep.table()

    class Shifted(_VP):
        def data_ptr(self):  # the array starts 16 bytes further than exported
            return super().data_ptr() + 16

    rep = check_producer(lambda: Shifted(shape=(3, 4), dtype=(2, 32, 1)), examples=0)
    assert _failed_ctypes(rep) == {"byte_offset"}, rep.table()


def test_wrong_capsule_name():
    rep = check_producer(_vp(capsule_name=b"tensor_of_sorts"), examples=0)
    assert rep.status("capsule.legacy") == FAIL
    assert rep.status("capsule.versioned") == FAIL
    assert "'tensor_of_sorts'" in rep["capsule.versioned"].evidence
    # the checker does not guess a layout for a foreign name: it reads nothing
    assert rep.status("deleter.unconsumed") == NA
    assert "not one of DLPack's capsule names" in rep["tensor.valid"].evidence, rep.table()


def test_null_strides_with_version_1_3():
    rep = check_producer(_vp(null_strides=True), examples=0)
    assert _failed_ctypes(rep) == {"strides.non_null"}, rep.table()
    assert "strides NULL" in rep["strides.non_null"].evidence
    # The same layout under version 1.1 is allowed.
    rep = check_producer(_vp(null_strides=True, version=(1, 1)), examples=0)
    assert rep.status("strides.non_null") == NA


def test_wrong_major_version():
    rep = check_producer(_vp(version=(2, 0)), examples=0)
    assert rep.status("version.reported") == FAIL
    assert "(2, 0)" in rep["version.reported"].evidence
    assert rep.status("tensor.valid") == FAIL
    # Nothing past the version is read, so no rule judges fields it never saw
    # (flags, device) as if they were 0 or absent.
    for rid in ("copy.true", "copy.false", "dl_device.own"):
        assert rep.status(rid) == FAIL and "cannot look into" in rep[rid].evidence, rep.table()
    assert "checker" not in {r.id for r in rep.rules}, rep.table()


def test_a_versioned_struct_under_the_legacy_name_is_not_read_as_legacy():
    """A DLManagedTensorVersioned in a capsule named "dltensor": read as the
    legacy layout it is garbage, and its "deleter" field is the shape pointer.
    The tensor fails validation and the deleter is not watched (swapping and
    calling that field crashed the checker)."""
    rep = check_producer(_vp(capsule_name=b"dltensor"), examples=0)
    assert rep.status("tensor.valid") == FAIL, rep.table()
    assert rep.status("capsule.legacy") == PASS, rep.table()   # max_version None: legacy

    class VersionedAlways(_VP):
        def __dlpack__(self, **kw):
            return super().__dlpack__(**{**kw, "max_version": (1, 3)})

    # capsule.legacy passed it: the name was right, the tensor never looked at
    rep = check_producer(lambda: VersionedAlways(shape=(3, 4), dtype=(2, 32, 1),
                                                 capsule_name=b"dltensor"), examples=0)
    assert rep.status("capsule.legacy") == FAIL, rep.table()
    assert "its DLManagedTensor is invalid" in rep["capsule.legacy"].evidence
    for rid in ("deleter.unconsumed", "deleter.used_capsule", "deleter.consumed"):
        assert rep.status(rid) == NA and "invalid tensor" in rep[rid].evidence, rep.table()


def test_copy_true_without_is_copied():
    rep = check_producer(_vp(ignore_copy=True), examples=0)
    assert _failed_ctypes(rep) == {"copy.true"}, rep.table()
    assert "NOT set" in rep["copy.true"].evidence and "NOT copied" in rep["copy.true"].evidence


class _Patched:
    """A NumPy array whose every versioned export `patch(managed, keywords)`
    edits in place (its DLManagedTensorVersioned), and which NumPy reads
    through __array_interface__: one defect at a time."""

    def __init__(self, a, patch):
        self.a, self.patch = a, patch
        self.shape, self.dtype = a.shape, a.dtype

    @property
    def flags(self):
        return self.a.flags

    def copy(self):
        return _Patched(self.a.copy(), self.patch)

    def setflags(self, **kw):
        self.a.setflags(**kw)

    @property
    def __array_interface__(self):
        return self.a.__array_interface__

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, **kw):
        cap = self.a.__dlpack__(**kw)
        p = P.PyCapsule_GetName(id(cap))
        if ctypes.string_at(p) == b"dltensor_versioned":
            self.patch(P.DLManagedTensorVersioned.from_address(P.PyCapsule_GetPointer(id(cap), p)),
                       kw)
        return cap


def _strip_read_only(m, kw):
    """The bug of many producers (numpy#20337, jax#40789)."""
    m.flags &= ~P.FLAG_READ_ONLY


@pytest.mark.numpy_min("2.4")
def test_missing_read_only(np):
    rep = check_producer(lambda: _Patched(np.arange(12.0).reshape(3, 4), _strip_read_only),
                         examples=0)
    assert _failed(rep) == {"flags.read_only"}, rep.table()
    assert "flags 0x0" in rep["flags.read_only"].evidence



class _NoPointer(_Patched):
    """A library whose data pointer the checker cannot read."""

    @property
    def __array_interface__(self):
        raise AttributeError("no __array_interface__")

    def copy(self):
        return _NoPointer(self.a.copy(), self.patch)


@pytest.mark.parametrize("kind", [_Patched, _NoPointer])
def test_read_only_memory_said_copied_fails_read_only(np, kind):
    """READ_ONLY's bit confused with IS_COPIED's on the array's own memory:
    the export was taken for a writable copy (it passed), also where the
    array's pointer cannot be read to tell."""
    def copied_for_read_only(m, kw):
        if m.flags & P.FLAG_READ_ONLY:
            m.flags = P.FLAG_IS_COPIED

    rep = check_producer(lambda: kind(np.arange(12.0).reshape(3, 4), copied_for_read_only),
                         examples=0)
    assert rep.status("flags.read_only") == FAIL, rep.table()

class _NoDestructor:
    """Capsules without a destructor: an unconsumed one leaks (deleter never called)."""

    def __init__(self):
        self.buf = (ctypes.c_float * 12)()

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = max_version is not None and max_version[0] >= 1
        cap, _ = P.make_capsule(versioned=versioned, data=self.buf, shape=(3, 4),
                                dtype=(2, 32, 1), destructor=False)
        return cap


def test_deleter_never_called():
    rep = check_producer(_NoDestructor, examples=0)
    assert rep.status("deleter.unconsumed") == FAIL, rep.table()
    assert "never called" in rep["deleter.unconsumed"].evidence
    assert rep.status("refcount.restored") == FAIL
    assert rep.status("deleter.consumed") == PASS  # a consumer calls it all the same


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _careless_destructor_impl(cap):
    """Calls the deleter whatever the name says, twice (a double-free bug)."""
    try:
        p = P.PyCapsule_GetName(cap)
        ptr = P.PyCapsule_GetPointer(cap, p)
        m = P.DLManagedTensorVersioned.from_address(ptr)
        fn = ctypes.cast(m.deleter, ctypes.c_void_p).value
        if fn:
            call = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(fn)
            call(ptr)
            call(ptr)
    except BaseException:
        pass


_CARELESS = _DESTRUCTOR(_careless_destructor_impl)


class _DoubleDeleter:
    """Its destructor ignores "used_" names and calls the deleter twice. The
    checker's counting deleter only forwards the first call, so nothing is
    really freed twice (and producers.py counts a double call anyway)."""

    def __init__(self):
        self.buf = (ctypes.c_float * 12)()

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        rec = P.make_managed(versioned=True, data=self.buf, shape=(3, 4), dtype=(2, 32, 1))
        return P.PyCapsule_New(rec.address, P.static_name(P.NAME_VERSIONED), _CARELESS)


def test_deleter_called_twice():
    rep = check_producer(_DoubleDeleter, examples=0)
    assert rep.status("deleter.unconsumed") == FAIL, rep.table()
    assert "2 times" in rep["deleter.unconsumed"].evidence
    assert rep.status("deleter.used_capsule") == FAIL
    # dlpackshim keeps the producer's capsule destructor (as PyTorch does), so
    # one that deletes a consumed ("used_") capsule's tensor is caught there too
    assert rep.status("deleter.consumed") == FAIL


def test_dl_device_and_stream_ignored():
    class Lax(P.VersionedProducer):
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            return super().__dlpack__(max_version=max_version, copy=copy)

    rep = check_producer(lambda: Lax(shape=(2,), dtype=(2, 32, 1)), examples=0)
    assert {"dl_device.unsupported", "stream.cpu"} <= _failed(rep), rep.table()
    assert "exported anyway" in rep["dl_device.unsupported"].evidence


@pytest.mark.numpy_min("2.4")
def test_a_copy_of_other_elements_fails_copy_true(np):
    """copy=True gave a fresh buffer with IS_COPIED, full of zeros: only the
    flags and the pointer were checked (it passed)."""
    def zero_the_copy(m, kw):
        if kw.get("copy"):
            ctypes.memset(m.dl_tensor.data + m.dl_tensor.byte_offset, 0, 96)

    rep = check_producer(lambda: _Patched(np.arange(1.0, 13.0).reshape(3, 4), zero_the_copy),
                         examples=0)
    assert _failed(rep) == {"copy.true"}, rep.table()
    assert "DIFFER" in rep["copy.true"].evidence
    assert "the same elements" in check_producer(
        lambda: _Patched(np.arange(12.0), lambda m, kw: None), examples=0)["copy.true"].evidence


@pytest.mark.numpy_min("2.4")
def test_wrong_strides_on_an_array_that_cannot_be_sliced_fail_elements_match(np):
    """F-order strides on a C-order array without __getitem__: only the views
    rule read elements, so nothing failed."""
    def f_strides(m, kw):
        t = m.dl_tensor
        t.strides[0], t.strides[1] = 1, 3

    rep = check_producer(lambda: _Patched(np.arange(12.0).reshape(3, 4), f_strides), examples=5)
    assert _failed(rep) == {"elements.match"}, rep.table()
    assert rep["views.hypothesis"].status == NA
    good = check_producer(lambda: _Patched(np.arange(12.0).reshape(3, 4), lambda m, kw: None),
                          examples=0)
    assert good["elements.match"].status == PASS, good.table()



class _FreshEachExport:
    """Every export is a new array's, freed when its capsule goes: a copy
    (copy=True) is right, copy=False is not (it always copies)."""

    def __init__(self, np):
        self.a = np.arange(12.0)

    def __dlpack__(self, **kw):
        return (self.a + 0).__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __array__(self, dtype=None, copy=None):
        return self.a


@pytest.mark.numpy_min("2.4")
def test_the_copy_rules_hold_the_plain_export_so_no_copy_gets_its_address(np):
    """The plain export that tells the array's memory was freed before the
    copies were made: copy=True got its address and failed ("NOT copied"),
    and copy=False passed."""
    for _ in range(3):
        rep = check_producer(lambda: _FreshEachExport(np), examples=0)
        assert rep["copy.true"].status == PASS, rep.table()
        assert rep["copy.false"].status == FAIL, rep.table()


@pytest.mark.numpy_min("2.4")
def test_an_export_of_other_size_than_the_array_fails_elements_match(np):
    """5 elements exported for an array of 12 (NumPy's read, no .shape to
    compare): n/a, "not compared"."""

    class Shorter(_FreshEachExport):
        def __dlpack__(self, **kw):
            return self.a[:5].__dlpack__(**kw)

    rep = check_producer(lambda: Shorter(np), examples=0)
    assert rep["elements.match"].status == FAIL, rep.table()
    assert "5 elements exported, 12 read by numpy.asarray(x)" in rep["elements.match"].evidence


@pytest.mark.numpy_min("2.4")
def test_copy_true_holds_one_copy_while_asking_for_another(np):
    """A producer that copies into one buffer, again each time: a consumer's
    copy changes under it. One copy was asked for, and it passed."""
    class OneBuffer(_FreshEachExport):
        def __init__(self, np):
            super().__init__(np)
            self.buf = np.empty_like(self.a)

        def __dlpack__(self, **kw):
            if not kw.get("copy"):
                return self.a.__dlpack__(**kw)
            self.buf[...] = self.a
            cap = self.buf.__dlpack__(max_version=kw["max_version"])   # NumPy copies no more
            p = P.PyCapsule_GetName(id(cap))
            P.DLManagedTensorVersioned.from_address(
                P.PyCapsule_GetPointer(id(cap), p)).flags |= P.FLAG_IS_COPIED
            return cap

    rep = check_producer(lambda: OneBuffer(np), examples=0)
    assert rep["copy.true"].status == FAIL, rep.table()
    assert "a second copy in the same buffer" in rep["copy.true"].evidence


@pytest.mark.parametrize("device", [(1, 0.5), ("1", "0"), [1, 0], (True, 0)])
def test_a_device_answer_is_read_as_it_is(np, device):
    """int() made (1, 0.5) and ("1", "0") pass as (1, 0); a list passed too."""
    class Says(_FreshEachExport):
        def __dlpack_device__(self):
            return device

    assert check_producer(lambda: Says(np), examples=0)["device.tuple"].status == FAIL


@pytest.mark.numpy_min("2.4")
def test_a_producer_that_must_copy_and_says_so_passes(np):
    """Big-endian data: every export is a native copy with IS_COPIED, and
    copy=False is refused. byte_offset, elements.match (raw big-endian bytes),
    flags.read_only and views.hypothesis failed it."""
    class BigEndian(_FreshEachExport):
        def __init__(self, np, a=None):
            self.np, self.a = np, np.arange(12.0).reshape(3, 4).astype(">f8") if a is None else a
            self.shape = self.a.shape

        def __getitem__(self, i):
            return BigEndian(self.np, self.a[i])

        @property
        def __array_interface__(self):
            return self.a.__array_interface__

        def copy(self):
            return BigEndian(self.np, self.a.copy())

        def setflags(self, **kw):
            self.a.setflags(**kw)

        @property
        def flags(self):
            return self.a.flags

        def __dlpack__(self, **kw):
            if kw.get("copy") is False:
                raise BufferError("big-endian data: a copy is needed")
            kw.pop("copy", None)
            cap = self.a.astype("=f8").__dlpack__(**kw)
            p = P.PyCapsule_GetName(id(cap))
            if ctypes.string_at(p) == b"dltensor_versioned":
                P.DLManagedTensorVersioned.from_address(
                    P.PyCapsule_GetPointer(id(cap), p)).flags |= P.FLAG_IS_COPIED
            return cap

    rep = check_producer(lambda: BigEndian(np), examples=5)
    assert _failed(rep) == set(), rep.table()
    assert "IS_COPIED: a copy" in rep["byte_offset"].evidence


@pytest.mark.numpy_min("2.4")
def test_is_copied_on_an_export_of_the_arrays_own_memory_fails_byte_offset(np):
    """IS_COPIED on a plain export that did not copy: a consumer told so may
    write into the producer's memory. Nothing looked."""
    def copied_on_plain(m, kw):
        if kw.get("copy") is None:
            m.flags |= P.FLAG_IS_COPIED

    rep = check_producer(lambda: _Patched(np.arange(12.0), copied_on_plain), examples=0)
    assert rep["byte_offset"].status == FAIL, rep.table()
    assert "but the array's own memory" in rep["byte_offset"].evidence


def test_an_empty_tensor_has_no_memory_to_point_at():
    """An empty tensor with data NULL, legal: tensor.valid passed it and
    byte_offset failed it against the array's pointer."""
    rep = check_producer(_vp(shape=(0, 3), null_data=True), examples=0)
    assert rep.status("tensor.valid") == PASS, rep.table()
    assert rep.status("byte_offset") == NA, rep.table()

@pytest.mark.numpy_min("2.4")
def test_an_invalid_copy_false_export_elsewhere_fails_copy_false(np):
    """copy=False gave an invalid tensor (lanes 0) at another address: the
    excuse made for empty exports must not cover it."""
    def elsewhere(m, kw):
        if kw.get("copy") is False:
            m.dl_tensor.dtype.lanes = 0
            m.dl_tensor.byte_offset += 8

    rep = check_producer(lambda: _Patched(np.arange(12.0), elsewhere), examples=0)
    assert rep["copy.false"].status == FAIL, rep.table()


@pytest.mark.numpy_min("2.4")
def test_an_empty_array_with_null_data_passes_copy_true(np):
    """Empty exports with data NULL (as PyTorch's): copy=True's fresh-buffer
    test compared NULL with NULL and failed a conforming producer."""
    def null_data(m, kw):
        m.dl_tensor.data, m.dl_tensor.byte_offset = None, 0

    rep = check_producer(lambda: _Patched(np.zeros((0, 3)), null_data), examples=0)
    assert rep["copy.true"].status == PASS, rep.table()
    assert "empty" in rep["copy.true"].evidence


def test_an_array_the_producer_refuses_to_export_is_not_applicable(np):
    """NumPy refuses byte-swapped data (BufferError, as the standard
    allows): the rules are n/a with why, not a false "does not take
    max_version" and a checker error."""
    rep = check_producer(lambda: np.arange(6).astype(">f4"), examples=0)
    assert rep.exit_status == 0 and not _failed(rep), rep.table()
    assert "refuses to export" in rep["capsule.versioned"].evidence
    assert "checker" not in {r.id for r in rep.rules}


def test_an_export_that_is_no_capsule_fails_the_capsule_rules():
    class Int:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            return 42

    rep = check_producer(Int, examples=0)
    assert _failed(rep) == {"capsule.legacy", "capsule.versioned"}, rep.table()
    assert "type int, not a PyCapsule" in rep["capsule.legacy"].evidence
    assert "checker" not in {r.id for r in rep.rules}


def test_views_of_a_dtype_numpy_lacks_compare_no_elements(torch):
    """torch bfloat16: numpy.asarray raises; the views rule errored (exit 1)."""
    rep = check_producer(lambda: torch.ones(3, 4, dtype=torch.bfloat16), examples=5)
    assert rep["views.hypothesis"].status == PASS, rep.table()
    assert rep["elements.match"].status == NA


def test_lying_shape_and_dtype(np):
    class Liar(P.VersionedProducer):
        shape = (4, 3)
        dtype = np.dtype("float64")

    rep = check_producer(lambda: Liar(shape=(3, 4), dtype=(2, 32, 1)), examples=0)
    assert {"shape.matches", "dtype.code"} <= _failed(rep), rep.table()


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------

@pytest.mark.numpy_min("2.4")
def test_cli_numpy_table_and_json(np):
    proc = _cli("numpy:arange(12.).reshape(3,4)", "--examples", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "views.hypothesis" in proc.stdout and "0 failed" in proc.stdout
    proc = _cli("numpy:arange(12.).reshape(3,4)", "--examples", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["exit_status"] == 0 and data["summary"]["fail"] == 0
    assert {r["id"] for r in data["rules"]} == ALL_RULES
    assert all(set(r) == {"id", "spec", "status", "evidence"} for r in data["rules"])


def test_cli_jax_fails_with_status_1():
    pytest.importorskip("jax")
    proc = _cli("jax.numpy:arange(12.).reshape(3,4)", "--examples", "3", "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    failed = {r["id"] for r in data["rules"] if r["status"] == "fail"}
    assert failed == {"capsule.versioned", "flags.read_only", "copy.true"}


def test_cli_reports_a_producer_that_crashes_the_check():
    """A producer whose exports crash the process (views whose strides reach
    memory the array does not have crash whatever reads them): the CLI runs
    the check in a child, so that is a report (exit 1, the rule it crashed
    in), not a dead checker. The rules it finished before the crash keep
    their results (they were lost: the report had the error row alone)."""
    pytest.importorskip("numpy")
    pytest.importorskip("hypothesis")
    proc = _cli("producers:AbortsOnViews()", "--examples", "5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the producer's exports crashed it" in proc.stdout, proc.stdout
    assert "in rule views.hypothesis" in proc.stdout, proc.stdout
    proc = _cli("producers:AbortsOnViews()", "--examples", "5", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rules = {r["id"]: r for r in json.loads(proc.stdout)["rules"]}
    assert set(rules) == ALL_RULES - {"views.hypothesis"} | {"checker"}, sorted(rules)
    assert rules["checker"]["status"] == "error"
    assert rules["capsule.versioned"]["status"] == "pass", rules["capsule.versioned"]
    assert rules["version.reported"]["status"] == "pass", rules["version.reported"]


def test_cli_a_class_is_called_and_a_hang_times_out():
    """A class as the target is instantiated (it was checked as the class
    object); a producer that hangs stops the check after --timeout (it ran
    for ever), with an error row naming the rule."""
    pytest.importorskip("numpy")
    proc = _cli("producers:HangsOnCopy", "--examples", "0", "--timeout", "5", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no answer within 5 s (--timeout bounds the whole check), in rule copy.true: the " \
        "producer hangs" in proc.stdout, proc.stdout


def test_cli_a_killed_check_leaves_no_worker(tmp_path):
    """The check's worker leads its own process group: a parent killed by
    `timeout` or SIGTERM left it running, holding the output pipe."""
    import os
    import signal
    import subprocess
    import time
    pytest.importorskip("numpy")
    proc = run_python("-m", "dlpackshim", "check", "producers:HangsOnCopy()", "--examples", "0",
                      env=asan_options("detect_leaks=0"), popen=True,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:   # the worker is up once the parent has a child
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                workers = [int(c) for c in f.read().split()]
            if workers:
                break
            time.sleep(0.1)
        assert workers, "the check started no worker"
        time.sleep(2)   # into the rules
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{w}") and
                                              open(f"/proc/{w}/stat").read().split()[2] != "Z"
                                              for w in workers):
        time.sleep(0.1)
    alive = [w for w in workers if os.path.exists(f"/proc/{w}")
             and open(f"/proc/{w}/stat").read().split()[2] != "Z"]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    assert not alive, "the worker outlived the check"


def test_cli_broken_producer_from_tests():
    proc = _cli("producers:VersionedProducer(shape=(3,4), null_strides=True)", "--examples", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL strides.non_null" in proc.stdout


@pytest.mark.parametrize("target, words", [
    ("numpy", "MODULE:EXPR"),
    ("no_such_module_xyz:f()", "cannot import"),
    ("json:undefined_name_xyz", "NameError"),  # a module every Python has
    ("builtins:int(3)", "no __dlpack__"),
])
def test_cli_usage_errors_exit_2(target, words):
    proc = _cli(target)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr
    # a place only in the user's code, never the package's or importlib's
    assert "targets.py" not in proc.stderr and "<frozen" not in proc.stderr, proc.stderr


def test_cli_a_target_that_does_not_parse_names_no_place_of_ours():
    proc = _cli("numpy:arange(")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "SyntaxError" in proc.stderr and " at " not in proc.stderr.split("SyntaxError")[1], \
        proc.stderr



def test_cli_a_factory_that_raises_at_once_is_a_usage_error_with_its_place(tmp_path):
    """Exit 2 said only the exception; it names the file and line too."""
    (tmp_path / "broken_factory.py").write_text("def make():\n    raise RuntimeError('no')\n")
    proc = run_python("-m", "dlpackshim", "check", "broken_factory:make",
                      env={"PYTHONPATH": str(tmp_path)}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "RuntimeError: no at broken_factory.py:2" in proc.stderr

def test_cli_argparse_error_exit_2():
    proc = _cli("--examples", "many", "numpy:arange(3)")
    assert proc.returncode == 2


@pytest.mark.numpy_min("2.4")
def test_run_check_in_process(np, capsys):
    assert run_check("numpy:arange(6)", examples=3, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["fail"] == 0
    assert run_check("numpy", examples=0) == 2


def test_a_ctrl_c_swallowed_by_the_last_gc_callback_still_interrupts(monkeypatch):
    """A SIGINT that lands in a gc callback (hypothesis installs one) is
    swallowed by the collector. The checker's last collection runs under its
    Ctrl-C guard, so a press there still ends the check as interrupted, not
    as a pass (CI once saw `check` exit 0 so)."""
    import gc
    import signal

    from dlpackshim.testing import producer_check
    from dlpackshim.testing.report import Interrupted
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT has another handler in this process (a test runner's)")
    armed = []

    def press_ctrl_c_in_the_callback(phase, info):
        if phase == "start" and armed:
            armed.clear()
            signal.raise_signal(signal.SIGINT)   # Python's handler runs at the next line
            armed.clear()

    unwrap_all = producer_check.unwrap_all

    def unwrap_then_arm(wraps):   # what runs right before the last collection
        unwrap_all(wraps)
        armed.append(True)

    monkeypatch.setattr(producer_check, "unwrap_all", unwrap_then_arm)
    gc.callbacks.append(press_ctrl_c_in_the_callback)
    try:
        with pytest.raises(Interrupted) as stop:
            check_producer(_vp(), examples=0)
    finally:
        gc.callbacks.remove(press_ctrl_c_in_the_callback)
    assert [r for r in stop.value.report.rules if r.status == PASS]   # the rules it reached


def test_a_factory_that_raises_is_a_checker_error_with_its_place(np):
    """check_producer's first array was made outside its guard: a factory
    that raised there ended the check with the bare exception, which the
    command line reported as a crash "in rule ?". Now the report says the
    factory raised, and where (file and line, not a bare line number)."""
    calls = []

    def second_call_fails():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("second call fails")
        return np.arange(6.0)

    second_call_fails()
    rep = check_producer(second_call_fails, examples=0)
    [row] = rep.rules
    assert row.id == "checker" and row.status == "error", rep.table()
    assert "the factory raised RuntimeError: second call fails at test_check.py:" in row.evidence
    assert rep.exit_status == 1


def test_a_crash_before_the_first_rule_says_so(tmp_path, monkeypatch):
    """A target whose import crashes was reported "in rule ?"."""
    (tmp_path / "crashes_at_import.py").write_text("import ctypes\nctypes.string_at(0)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    # `make check-asan`: the crash is the result (ASan's handler would report it)
    proc = run_python("-m", "dlpackshim", "check", "crashes_at_import:make",
                      env=asan_options("detect_leaks=0", "handle_segv=0"), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "in rule none yet (importing the module or making the first array)" in proc.stdout


def test_a_producer_raising_keyboardinterrupt_is_no_ctrl_c(tmp_path, monkeypatch):
    """A __dlpack__ that raises KeyboardInterrupt (no signal sent) was taken
    for Ctrl-C: every rule "not run", a partial report, exit 130."""
    (tmp_path / "kbi_producer.py").write_text(
        "import numpy as np\n"
        "class P:\n"
        "    def __dlpack_device__(self): return (1, 0)\n"
        "    def __dlpack__(self, **kw): raise KeyboardInterrupt\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = _cli("kbi_producer:P", "--examples", "2", "--timeout", "120")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "KeyboardInterrupt at kbi_producer.py:4" in proc.stdout
    assert "interrupted (Ctrl-C)" not in proc.stdout
    assert "stopped under way (see checker)" in proc.stdout
