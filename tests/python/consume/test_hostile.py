"""Hostile producers: hypothesis builds misbehaving producers and capsules and
checks, for every one, what dlpackshim documents.

For every input: the documented exception type (BufferError for capsules and
tensors that break DLPack's rules, TypeError for objects of the wrong kind,
the producer's own exception unchanged), a message naming the fault, no
crash, the deleter called exactly once when ownership was taken (a DLPack
capsule of the right name) and never otherwise, and no reference leaked
(sys.getrefcount of the producer, the capsule and the owner before/after).

The same for from_pointer arguments and __array_interface__ /
__cuda_array_interface__ dictionaries of random garbage.

DLPACKSHIM_HYPOTHESIS_EXAMPLES scales the example counts (the valgrind run
of `make check-valgrind-python` sets it low).
"""
from __future__ import annotations

import ctypes
import datetime
import gc
import os
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import producers as P

import dlpackshim as ds

N = int(os.environ.get("DLPACKSHIM_HYPOTHESIS_EXAMPLES", "200"))
SETTINGS = settings(max_examples=N, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

# A small buffer every faulty tensor may point at: validation must fail before
# anything reads it, and nothing may ever write it.
_SCRATCH = (ctypes.c_uint8 * 4096)()
SCRATCH = ctypes.addressof(_SCRATCH)


_no_double_delete = P.no_double_delete_fixture(passes=1)


def refs(obj):
    return sys.getrefcount(obj)


# ---------------------------------------------------------------------------
# Faults of the tensor fields: (make_managed keywords, words the message has)
# ---------------------------------------------------------------------------
I64 = 2 ** 63 - 1

field_faults = st.one_of(
    st.builds(lambda n: (dict(shape=(2,), ndim=n), ["ndim"]),
              st.sampled_from([-1, -7, -2 ** 31, 1025, 4096, 2 ** 31 - 1])),
    st.builds(lambda n: (dict(shape=(1,) * n, null_shape=True), ["shape is NULL"]),
              st.integers(1, 6)),
    st.builds(lambda shape, i, v: (dict(shape=shape[:i] + (v,) + shape[i + 1:]), ["shape["]),
              st.lists(st.integers(0, 4), min_size=1, max_size=4).map(tuple),
              st.integers(0, 3), st.integers(-2 ** 63, -1)).filter(lambda c: len(c[0]["shape"]) > 0),
    st.builds(lambda a, b: (dict(shape=(a, b)), ["overflow"]),
              st.integers(2 ** 32, I64), st.integers(2 ** 32, I64)),
    st.builds(lambda s: (dict(shape=(3, 2), strides=(s, 1)), ["strides", "overflow"]),
              st.sampled_from([2 ** 62, -(2 ** 62), I64, -I64])),
    st.builds(lambda o: (dict(shape=(2,), byte_offset=o), ["byte_offset"]),
              st.sampled_from([2 ** 63, 2 ** 64 - 1, I64, I64 - 4])),
    st.builds(lambda c, b: (dict(shape=(2,), dtype=(c, b, 1)), ["dtype", "unknown type code"]),
              st.integers(19, 255), st.sampled_from([8, 16, 32])),
    st.builds(lambda c, b: (dict(shape=(2,), dtype=(c, b, 1)), ["dtype", "needs"]),
              st.sampled_from([0, 1, 2, 4, 5, 7, 15, 17, 18]),
              st.sampled_from([0, 3, 7, 12, 33, 255])),
    st.builds(lambda c: (dict(shape=(2,), dtype=(c, 32, 0)), ["lanes"]),
              st.sampled_from([0, 1, 2])),
    st.builds(lambda d: (dict(shape=(2,), device=(d, 0)), ["device.device_type"]),
              st.sampled_from([0, 5, 6, 22, 100, 2 ** 31 - 1, -1, -2 ** 31])),
    st.builds(lambda i: (dict(shape=(2,), device=(1, i)), ["device.device_id"]),
              st.integers(-2 ** 31, -1)),
    st.builds(lambda shape: (dict(shape=shape, null_data=True), ["data is NULL"]),
              st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)),
)

version_faults = st.builds(lambda ma, mi: ((ma, mi), ["version"]),
                           st.sampled_from([0, 2, 3, 255, 2 ** 32 - 1]), st.integers(0, 2 ** 32 - 1))


def _with_data(kw):
    kw = dict(kw)
    kw.setdefault("dtype", (2, 32, 1))
    if not kw.get("null_data"):
        kw["data"] = SCRATCH  # never allocate for absurd shapes
    return kw


@SETTINGS
@given(fault=field_faults, versioned=st.booleans(), null_deleter=st.booleans(),
       via=st.sampled_from(["capsule", "producer"]))
def test_invalid_tensor_fields(fault, versioned, null_deleter, via):
    """Every field fault: BufferError naming the field; the tensor was taken,
    so its deleter ran exactly once (never for a NULL deleter)."""
    kw, words = fault
    kw = _with_data(kw)
    if via == "capsule":
        obj, rec = P.make_capsule(versioned=versioned, null_deleter=null_deleter, **kw)
        recs = [rec]
    else:
        cls = P.VersionedProducer if versioned else P.LegacyProducer
        obj = cls(null_deleter=null_deleter, keep_capsules=True, **kw)
        recs = obj.records
    before = refs(obj)
    with pytest.raises(BufferError) as ei:
        ds.from_dlpack(obj)
    msg = str(ei.value)
    assert any(w in msg for w in words), (msg, words)
    assert "invalid DLPack tensor" in msg
    assert len(recs) == 1
    assert recs[0].deleter_calls == (0 if null_deleter else 1)
    del ei
    assert refs(obj) == before
    if via == "producer":
        obj.capsules.clear()
    del obj
    gc.collect()
    assert recs[0].deleter_calls == (0 if null_deleter else 1)


@SETTINGS
@given(fault=version_faults, via=st.sampled_from(["capsule", "producer"]),
       null_deleter=st.booleans())
def test_unknown_major_version(fault, via, null_deleter):
    """Major version != 1: BufferError naming both versions; deleter once."""
    version, words = fault
    assume(version[0] != 1)
    if via == "capsule":
        obj, rec = P.make_capsule(version=version, null_deleter=null_deleter, shape=(2,))
    else:
        obj = P.VersionedProducer(version=version, null_deleter=null_deleter, shape=(2,),
                                  keep_capsules=True)
    with pytest.raises(BufferError) as ei:
        ds.from_dlpack(obj)
    msg = str(ei.value)
    assert f"{version[0]}.{version[1]}" in msg and "version" in msg, msg
    rec = rec if via == "capsule" else obj.records[0]
    assert rec.deleter_calls == (0 if null_deleter else 1)


# ---------------------------------------------------------------------------
# Capsules of the wrong name or kind, and objects that are no capsule
# ---------------------------------------------------------------------------
names = st.one_of(
    st.sampled_from([b"used_dltensor", b"used_dltensor_versioned"]),
    st.sampled_from([b"", b"dltensor_", b"DLTENSOR", b"dltensor_versioned2", b"tensor",
                     b"used_", b"numpy.core._multiarray_umath._ARRAY_API", b"x" * 200]),
    # printable ASCII only: other bytes hit the bug of test_capsule_name_not_utf8
    st.binary(min_size=1, max_size=40).filter(lambda b: all(32 <= c < 127 for c in b) and b not in (
        b"dltensor", b"dltensor_versioned")),
)


@SETTINGS
@given(name=names, versioned=st.booleans(), via=st.sampled_from(["capsule", "producer"]))
def test_capsule_names(name, versioned, via):
    """A capsule that is not ours to take: BufferError, deleter NOT called by
    dlpackshim, capsule left as it was; the producer's destructor then deletes
    it (unless the name says used_, which means someone else owns it)."""
    cap, rec = P.make_capsule(versioned=versioned, capsule_name=name, shape=(2,))
    obj = cap if via == "capsule" else P.CapsuleReturningProducer(lambda **kw: cap)
    before = refs(cap)
    with pytest.raises(BufferError) as ei:
        ds.from_dlpack(obj)
    msg = str(ei.value)
    if name.startswith(b"used_dltensor") and name in (b"used_dltensor",
                                                       b"used_dltensor_versioned"):
        assert "already consumed" in msg
    else:
        assert "expected a capsule named" in msg
    del ei
    assert rec.deleter_calls == 0
    assert P.capsule_name(cap) == name
    assert refs(cap) == before
    del obj, cap
    gc.collect()
    assert rec.deleter_calls == (0 if name.startswith(b"used_") else 1)


@pytest.mark.parametrize("versioned", [True, False])
def test_a_capsule_the_c_api_took_renamed_back(versioned):
    """from_dlpack of a capsule dlpackshim_capsule_import took, renamed back
    to its fresh name: BufferError, the capsule still the C API's (it was
    taken a second time, and the tensor deleted twice, a crash)."""
    from dlpackshim._ffi import ffi, lib
    cap, rec = P.make_capsule(versioned=versioned, shape=(2,))
    out = ffi.new("const DLTensor **")
    assert lib.dlpackshim_capsule_import(ffi.cast("void *", id(cap)), out) == 0
    fresh = P.NAME_VERSIONED if versioned else P.NAME_LEGACY
    assert P.PyCapsule_SetName(id(cap), P.static_name(fresh)) == 0
    with pytest.raises(BufferError, match="already consumed"):
        ds.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        ds.from_dlpack(P.CapsuleReturningProducer(lambda **kw: cap))
    assert rec.deleter_calls == 0
    del cap
    gc.collect()
    assert rec.deleter_calls == 1


@pytest.mark.parametrize("name", [b"dltensor\xff", b"caf\xc3\xa9", b"a" + "\u00e9".encode() * 60],
                         ids=["latin1", "utf8-short", "utf8-cut"])
def test_capsule_name_not_utf8(name):
    """A foreign name that is not UTF-8 (or is cut inside a character) is
    escaped in the message: still a BufferError, never UnicodeDecodeError."""
    cap, rec = P.make_capsule(capsule_name=name, shape=(2,))
    with pytest.raises(BufferError, match="expected a capsule named") as ei:
        ds.from_dlpack(cap)
    assert "\\x" in str(ei.value)  # the non-ASCII bytes are shown as \xNN
    assert rec.deleter_calls == 0


def test_unnamed_capsule():
    rec = P.make_managed(shape=(2,))
    cap = P.PyCapsule_New(rec.address, None, P._CAPSULE_DESTRUCTOR_FN)
    with pytest.raises(BufferError, match="unnamed capsule"):
        ds.from_dlpack(cap)
    assert rec.deleter_calls == 0
    P._DELETER_V_FN(rec.address)  # the producer keeps what nobody took
    assert rec.deleter_calls == 1


NOT_CAPSULES = [42, -1, 0, 3.5, "dltensor", b"dltensor", None, (), [], {}, object(),
                bytearray(b"x"), Ellipsis, NotImplemented, type, sys]


@pytest.mark.parametrize("bad", NOT_CAPSULES + [datetime.datetime_CAPI],
                         ids=lambda b: type(b).__name__)
def test___dlpack___returning_garbage(bad):
    """__dlpack__ returning a non-capsule: TypeError naming the type; another
    kind of capsule: BufferError naming the names expected."""
    p = P.CapsuleReturningProducer(lambda **kw: bad)
    shared = bad is None or isinstance(bad, (int, type)) or bad in (Ellipsis, NotImplemented, sys)
    before = refs(bad)
    if type(bad).__name__ == "PyCapsule":
        with pytest.raises(BufferError, match="expected a capsule named"):
            ds.from_dlpack(p)
    else:
        with pytest.raises(TypeError, match="expected a DLPack PyCapsule, got " + type(bad).__name__):
            ds.from_dlpack(p)
    if not shared:  # the count of None, small ints, types... moves on its own
        assert refs(bad) == before


# ---------------------------------------------------------------------------
# Producers that raise, lie about their device, or have odd signatures
# ---------------------------------------------------------------------------
class HostileError(Exception):
    pass


class HostileBufferError(BufferError):
    pass


exceptions = st.builds(
    lambda cls, text: cls(text),
    st.sampled_from([ValueError, KeyError, RuntimeError, BufferError, HostileError,
                     HostileBufferError, ZeroDivisionError, OverflowError, MemoryError,
                     AttributeError, IndexError, NotImplementedError, OSError]),
    st.text(max_size=30))


@SETTINGS
@given(exc=exceptions, device=st.sampled_from([None, (1, 0)]),
       copy=st.sampled_from([None, True, False]), cls=st.sampled_from(["versioned", "legacy"]))
def test___dlpack___raising(exc, device, copy, cls):
    """Whatever __dlpack__ raises propagates unchanged (the same object);
    nothing is exported, so no deleter runs."""
    p = (P.VersionedProducer if cls == "versioned" else P.LegacyProducer)(
        shape=(2,), raise_on_dlpack=exc)
    before = refs(p)
    with pytest.raises(type(exc)) as ei:
        ds.from_dlpack(p, device=device, copy=copy)
    assert ei.value is exc
    del ei
    exc.__traceback__ = exc.__context__ = None  # its frames reference p
    assert p.records == []
    assert refs(p) == before


def test___dlpack___raising_TypeError_propagates_TypeError():
    exc = TypeError("nope")
    p = P.VersionedProducer(shape=(2,), raise_on_dlpack=exc)
    with pytest.raises(TypeError):
        ds.from_dlpack(p)
    with pytest.raises(TypeError):
        ds.from_dlpack(p, copy=True)


def _device_liar(answer):
    """A fresh type per call: from_dlpack caches how to call a producer per type."""
    class Liar(P.VersionedProducer):
        def __dlpack_device__(self):
            if isinstance(answer, BaseException):
                raise answer
            return answer
    return Liar


# A 2-tuple of ints is believed only as far as it goes: the capsule says where
# the data is, so lies that still let the producer export to the CPU give a
# correct CPU Tensor; other answers are TypeError/ValueError, or the
# producer's own exception.
LIES = [((2, 0), None), ((99, 0), None), ((1, -1), None), ((10, 3), None),
        ("cpu", TypeError), ((1,), (TypeError, ValueError)), ((1, 0, 0), (TypeError, ValueError)),
        (None, TypeError), (3, TypeError), (("1", "0"), TypeError),
        (HostileError("device?"), HostileError)]


@pytest.mark.parametrize("answer, expected", LIES, ids=[repr(a) for a, _ in LIES])
def test___dlpack_device___lying(answer, expected):
    """__dlpack_device__ is asked only when a device is requested; its lies
    raise a documented error (or the producer's own) or are overruled by the
    capsule, and every capsule handed out is deleted exactly once."""
    p = _device_liar(answer)(shape=(2,))
    t = ds.from_dlpack(p)  # no device asked: the capsule's own device counts
    assert t.device == (1, 0)
    t.close()
    del t
    gc.collect()
    assert p.deleter_calls == 1
    before = refs(p)
    if expected is None:
        t = ds.from_dlpack(p, device=(1, 0))
        assert t.device == (1, 0) and t.data_ptr == p.data_address
        t.close()
        del t
    else:
        with pytest.raises(expected) as ei:
            ds.from_dlpack(p, device=(1, 0))
        assert str(ei.value)
        del ei
    if isinstance(answer, BaseException):
        answer.__traceback__ = answer.__context__ = None
    gc.collect()
    assert all(r.deleter_calls == 1 for r in p.records), p.records
    assert refs(p) == before


def test___dlpack_device___missing():
    p = P.NoDeviceProducer(shape=(2,))
    t = ds.from_dlpack(p)
    t.close()
    with pytest.raises(TypeError, match="no __dlpack_device__"):
        ds.from_dlpack(p, device=(1, 0))
    del t
    gc.collect()
    assert all(r.deleter_calls == 1 for r in p.records)


def _odd(fn):
    tp = type("Odd", (), {"__dlpack__": fn, "__dlpack_device__": lambda self: (1, 0)})
    return tp()


def _good_capsule(**kw):
    cap, rec = P.make_capsule(shape=(2,), versioned=kw.get("max_version") is not None)
    _good_capsule.recs.append(rec)
    return cap


_good_capsule.recs = []

ARITIES = [
    ("no keywords", lambda self: _good_capsule(), None),
    ("positional stream", lambda self, stream=None: _good_capsule(), None),
    ("**kwargs", lambda self, **kw: _good_capsule(**kw), None),
    ("required positional", lambda self, a: _good_capsule(), TypeError),
    ("no self", staticmethod(lambda: _good_capsule()), None),
    ("not callable", 5, TypeError),
    ("None", None, TypeError),
    ("rejects max_version", lambda self, *, stream=None: _good_capsule(), None),
]


@pytest.mark.parametrize("label, fn, expected", ARITIES, ids=[a[0] for a in ARITIES])
def test___dlpack___arities(label, fn, expected):
    """Old or odd signatures: called the way they take (the legacy fall-back),
    or a TypeError; every capsule handed out is deleted exactly once."""
    _good_capsule.recs.clear()
    p = _odd(fn)
    if expected is None:
        t = ds.from_dlpack(p)
        assert t.shape == (2,)
        t.close()
        del t
    else:
        with pytest.raises(expected):
            ds.from_dlpack(p)
    gc.collect()
    assert all(r.deleter_calls == 1 for r in _good_capsule.recs), _good_capsule.recs


# ---------------------------------------------------------------------------
# Valid tensors, mixed in: imported, deleter once when done, nothing leaked
# ---------------------------------------------------------------------------
@SETTINGS
@given(shape=st.lists(st.integers(0, 5), max_size=4).map(tuple), versioned=st.booleans(),
       null_deleter=st.booleans(), readonly=st.booleans(), via=st.sampled_from(["capsule",
                                                                                  "producer"]),
       copy=st.sampled_from([None, True]))
def test_valid_tensors(shape, versioned, null_deleter, readonly, via, copy):
    readonly = readonly and versioned
    if via == "capsule":
        obj, rec = P.make_capsule(versioned=versioned, null_deleter=null_deleter, shape=shape,
                                  readonly=readonly)
        recs = [rec]
    else:
        cls = P.VersionedProducer if versioned else P.LegacyProducer
        obj = cls(null_deleter=null_deleter, shape=shape, readonly=readonly)
        recs = obj.records
    before = refs(obj)
    t = ds.from_dlpack(obj, copy=copy)
    assert t.shape == shape
    assert all(r.deleter_calls == 0 for r in recs) or copy
    t.close()
    del t
    gc.collect()
    assert refs(obj) == before  # a consumed capsule too: nothing keeps it
    del obj
    gc.collect()
    assert all(r.deleter_calls == (0 if null_deleter else 1) for r in recs), recs


# ---------------------------------------------------------------------------
# from_pointer: random arguments
# ---------------------------------------------------------------------------
ints = st.one_of(st.integers(-2 ** 70, 2 ** 70), st.sampled_from([0, 1, -1, 2 ** 63, 2 ** 64]))
garbage = st.one_of(st.none(), st.floats(allow_nan=True), st.text(max_size=8), st.booleans(),
                    st.binary(max_size=4), st.just(object()))
shapes = st.one_of(st.lists(st.integers(-3, 6), max_size=4).map(tuple),
                   st.lists(ints, max_size=3).map(tuple),
                   st.lists(st.one_of(st.integers(0, 3), garbage), max_size=3).map(tuple),
                   garbage)
dtypes = st.one_of(st.sampled_from(["float32", "int8", "bool", "complex64", "uint64",
                                    "bfloat16", "float4_e2m1fn", "float33", "", "int",
                                    "object"]),
                   st.tuples(st.integers(-1, 300), st.integers(-1, 300), st.integers(-1, 70000)),
                   garbage)
devices = st.one_of(st.sampled_from([(1, 0), (2, 0), (3, 0), (5, 0), (1, -1), (99, 0), "cpu",
                                     (1,), None]),
                    st.tuples(st.integers(-2 ** 40, 2 ** 40), st.integers(-2 ** 40, 2 ** 40)))
DOCUMENTED = (TypeError, ValueError, BufferError)


@SETTINGS
@given(ptr=st.one_of(st.just("scratch"), ints, garbage), shape=shapes, dtype=dtypes,
       strides=st.one_of(st.none(), shapes), device=devices, readonly=st.booleans())
def test_from_pointer_garbage(ptr, shape, dtype, strides, device, readonly):
    """Either a Tensor or TypeError/ValueError/BufferError with a message
    (the documented three); the owner's reference count is restored."""
    if ptr == "scratch":
        ptr = SCRATCH
    owner = object()
    before = refs(owner)
    try:
        t = ds.from_pointer(ptr, shape, dtype, strides=strides, device=device,
                            readonly=readonly, owner=owner)
    except DOCUMENTED as e:
        assert str(e), type(e)
    else:
        assert refs(owner) > before
        t.close()
        del t
        gc.collect()
    assert refs(owner) == before


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(ptr=-1, shape=(2,), dtype="float32"), ValueError, "negative"),
    (dict(ptr=1.5, shape=(2,), dtype="float32"), TypeError, "ptr"),
    (dict(ptr=SCRATCH, shape=(-1,), dtype="float32"), BufferError, "shape[0]"),
    (dict(ptr=0, shape=(2,), dtype="float32"), BufferError, "data is NULL"),
    (dict(ptr=SCRATCH, shape=(2,), dtype="float33"), ValueError, "float33"),
    (dict(ptr=SCRATCH, shape=(2,), dtype=(99, 8, 1)), ValueError, "unknown type code"),
    (dict(ptr=SCRATCH, shape=(2,), dtype="float32", strides=(1, 1)), ValueError, "strides"),
    (dict(ptr=SCRATCH, shape=("2",), dtype="float32"), TypeError, "shape"),
    (dict(ptr=SCRATCH, shape=(2,), dtype="float32", device=(99, 0)), (ValueError, BufferError),
     "99"),
    (dict(ptr=SCRATCH, shape=(2 ** 40, 2 ** 40), dtype="float32"), BufferError, "overflow"),
])
def test_from_pointer_documented_errors(kwargs, exc, words):
    kwargs = dict(kwargs)
    with pytest.raises(exc) as ei:
        ds.from_pointer(kwargs.pop("ptr"), kwargs.pop("shape"), kwargs.pop("dtype"), **kwargs)
    assert words in str(ei.value), str(ei.value)


# ---------------------------------------------------------------------------
# __array_interface__ / __cuda_array_interface__ dictionaries of garbage
# ---------------------------------------------------------------------------
typestrs = st.one_of(st.sampled_from(["<f4", "|u1", "<i8", "|b1", "<c8", ">f4", "<f3", "|V8",
                                      "<M8", "O", "", "<f", "f4", "<b2", "=f4", "<u0"]),
                     st.text(max_size=5), garbage)
datas = st.one_of(st.tuples(st.just(SCRATCH), st.booleans()),
                  st.tuples(ints, st.booleans()),
                  st.tuples(st.just(SCRATCH)), st.tuples(st.just(SCRATCH), st.booleans(),
                                                         st.booleans()),
                  st.tuples(garbage, st.booleans()), garbage, st.just(bytearray(64)))
iface_dicts = st.fixed_dictionaries(
    {},
    optional={
        "shape": shapes,
        "typestr": typestrs,
        "data": datas,
        "strides": st.one_of(st.none(), shapes),
        "version": st.one_of(st.sampled_from([0, 1, 2, 3, 4, -1]), garbage),
        "descr": st.one_of(st.none(), st.just([("", "<f4")]),
                           st.just([("a", "<f4"), ("b", "<i4")]), garbage),
        "mask": st.one_of(st.none(), st.just(bytearray(8)), garbage),
        "offset": st.one_of(st.integers(-8, 64), garbage),
        "stream": st.one_of(st.none(), st.sampled_from([0, 1, 2, -1]), garbage),
    })


class ArrayIface:
    def __init__(self, d):
        self.d = d

    @property
    def __array_interface__(self):
        return self.d


class CudaIface:
    def __init__(self, d):
        self.d = d

    @property
    def __cuda_array_interface__(self):
        return self.d


def Iface(d, cuda):
    # two types: from_dlpack remembers per type which interface it uses
    return CudaIface(d) if cuda else ArrayIface(d)


@SETTINGS
@given(d=st.one_of(iface_dicts, garbage), cuda=st.booleans())
def test_array_interface_garbage(d, cuda):
    """Either a Tensor or a documented error with a message; the object's
    reference count is restored."""
    obj = Iface(d, cuda)
    before = refs(obj)
    try:
        t = ds.from_dlpack(obj)
    except DOCUMENTED as e:
        assert str(e), type(e)
    else:
        assert not cuda or t.device[0] == 2
        t.close()
        del t
    gc.collect()
    assert refs(obj) == before


@pytest.mark.parametrize("d, words", [
    (dict(shape=(2,), typestr="<f4", data=(SCRATCH, False), version=3, mask=bytearray(2)), "mask"),
    (dict(shape=(2,), typestr="|V8", data=(SCRATCH, False), version=3), "typestr"),
    (dict(shape=(2,), typestr=">f4", data=(SCRATCH, False), version=3), "byte order"),
    (dict(shape=(2,), typestr="<f4", data=(SCRATCH, False), version=2), "version"),
    (dict(shape=(-2,), typestr="<f4", data=(SCRATCH, False), version=3), "shape[0]"),
    (dict(shape=(2,), typestr="<f4", data=(SCRATCH, False), strides=(3,), version=3),
     "multiple of the item size"),
    (dict(shape=(2,), typestr="<f4", data=(SCRATCH,), version=3), "'data'"),
    (dict(typestr="<f4", data=(SCRATCH, False), version=3), "shape"),
    (dict(shape=(2, 2), typestr="<f4", data=(SCRATCH, False), strides=(4,), version=3),
     "strides for 2 dimensions"),
])
def test_array_interface_documented_errors(d, words):
    with pytest.raises(BufferError) as ei:
        ds.from_dlpack(Iface(d, cuda=False))
    assert words in str(ei.value), str(ei.value)


BIG = 2 ** 64


@pytest.mark.parametrize("cuda", [False, True], ids=["array", "cuda"])
@pytest.mark.parametrize("change, exc, words", [
    # issue 31.7: numbers out of every C range raised OverflowError
    (dict(data=(BIG, False)), ValueError, "not a pointer value"),
    (dict(data=(-1, False)), ValueError, "not a pointer value"),
    (dict(data=(2 ** 70, False)), ValueError, "not a pointer value"),
    (dict(data=(1.5, False)), TypeError, "'data' address must be an int"),
    (dict(version=2 ** 70), BufferError, "version"),
    (dict(version=-1), BufferError, "version"),
    (dict(version="3"), TypeError, "'version' must be an int"),
    (dict(shape=(BIG,)), ValueError, "out of range"),
    (dict(shape=(2 ** 63,)), ValueError, "out of range"),
    (dict(shape=("2",)), TypeError, "must be an int"),
    (dict(strides=(BIG,)), ValueError, "out of range"),
    (dict(strides=(-BIG,)), ValueError, "out of range"),
    # a bool is no extent, stride or address (NumPy: "an integer is required"),
    # as from_pointer says; shape (True,) was taken for (1,)
    (dict(shape=(True,)), TypeError, "must be an int, not a bool"),
    (dict(strides=(True,)), TypeError, "must be an int, not a bool"),
    (dict(data=(True, False)), TypeError, "must be an int, not a bool"),
    # the message showed '<f4' (cut at the NUL) and called it no typestr
    (dict(typestr="<f4\x00x"), TypeError, "typestr holds a NUL character"),
])
def test_interface_numbers_out_of_range(cuda, change, exc, words):
    """Every number of an interface dict that no C type holds gets the
    standard's kinds of error (TypeError, ValueError, BufferError), never
    OverflowError, and the message names the interface and the key."""
    d = dict(shape=(2,), typestr="<f4", data=(SCRATCH, False), version=3)
    d.update(change)
    with pytest.raises(exc) as ei:
        ds.from_dlpack(Iface(d, cuda))
    assert not isinstance(ei.value, OverflowError)
    assert words in str(ei.value), str(ei.value)
    if "data" in change or "version" in change:
        assert ("__cuda_array_interface__" if cuda else "__array_interface__") in str(ei.value)


@pytest.mark.parametrize("stream, exc, words", [
    (BIG, ValueError, "'stream'"),
    (1.5, TypeError, "'stream'"),    # a wrong type, as for every other field
    (0, ValueError, "stream 0 is disallowed"),
])
def test_cuda_interface_stream_numbers(stream, exc, words):
    d = dict(shape=(2,), typestr="<f4", data=(SCRATCH, False), version=3, stream=stream)
    with pytest.raises(exc, match=words):
        ds.from_dlpack(Iface(d, cuda=True))
