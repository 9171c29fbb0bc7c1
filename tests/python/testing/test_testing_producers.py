"""dlpackshim.testing.producers against the independent ctypes oracle (producers.py).

For the same knobs, the C-built producer and the ctypes one must give the same
struct fields, the same bytes and the same deleter counts. The oracle shares no
code with the library: its structs, capsules and deleters are ctypes only.
"""
import ctypes
import gc
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dlpackshim as ds  # noqa: E402
from dlpackshim._ffi import ffi  # noqa: E402
from dlpackshim.testing import producers as tp  # noqa: E402
from dlpackshim.testing import strategies as dst  # noqa: E402
from conftest import run_python  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
no_double_delete = P.no_double_delete_fixture(passes=1)


def oracle_capsule(spec, versioned, mem):
    """The oracle's capsule for the same knobs, over a copy of the same bytes."""
    fill = ctypes.string_at(mem.origin + mem.lo, mem.hi - mem.lo) if mem.hi > mem.lo else b""
    return P.make_capsule(versioned=versioned, shape=spec.shape, strides=spec.elem_strides,
                          dtype=spec.dtype, byte_offset=spec.byte_offset, device=spec.device,
                          version=spec.version, readonly=spec.readonly, copied=spec.copied,
                          padded=spec.padded, null_strides=spec.null_strides, fill=fill)


def oracle_view_bytes(d, spec):
    """C-order bytes of the view a describe_capsule() dict describes, read with ctypes."""
    origin = d["data"] + d["byte_offset"]
    shape = d["shape"] or ()
    if P.numel(shape) == 0:
        return b""
    code, bits, lanes = d["dtype"]
    if bits * lanes < 8 and not spec.padded:
        return ctypes.string_at(origin, (P.numel(shape) * bits * lanes + 7) // 8)
    size = P.element_bytes(bits, lanes)
    strides = d["strides"] if d["strides"] is not None else P.compact_strides(shape)
    offs = [0]
    for n, s in zip(shape, strides):
        offs = [o + i * s * size for o in offs for i in range(n)]
    return b"".join(ctypes.string_at(origin + o, size) for o in offs)


FIELDS = ("name", "versioned", "version", "flags", "device", "ndim", "dtype", "shape",
          "strides", "has_deleter")


@SETTINGS
@given(spec=dst.tensor_specs(protocols=("capsule-versioned", "capsule-legacy")))
def test_public_producer_matches_the_oracle(spec):
    versioned = spec.protocol == "capsule-versioned"
    cap, mt = tp.make_capsule(spec)
    ocap, rec = oracle_capsule(spec, versioned, mt.mem)
    ours, theirs = P.describe_capsule(cap), P.describe_capsule(ocap)
    for k in FIELDS:
        assert ours[k] == theirs[k], (k, ours[k], theirs[k])
    assert ours["data"] + ours["byte_offset"] == mt.mem.origin
    expect = tp.expected_bytes(spec)
    assert oracle_view_bytes(ours, spec) == expect
    assert oracle_view_bytes(theirs, spec) == expect
    # the same consumer, the same deleter counts: none while the view lives, one after
    a, b = ds.from_dlpack(cap), ds.from_dlpack(ocap)
    assert a.tobytes() == b.tobytes() == expect or spec.dtype[1] < 8
    assert mt.deleter_calls == rec.deleter_calls == 0
    del a, b, cap, ocap
    gc.collect()
    assert mt.deleter_calls == rec.deleter_calls == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_unconsumed_capsules_delete_once_like_the_oracle(versioned):
    spec = tp.TensorSpec(shape=(3, 2), seed=3)
    cap, mt = tp.make_capsule(spec, versioned=versioned)
    ocap, rec = oracle_capsule(spec, versioned, mt.mem)
    del cap, ocap
    gc.collect()
    assert mt.deleter_calls == rec.deleter_calls == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_double_calls_are_counted_never_freed_twice(versioned):
    """A consumer calling the deleter twice is counted (2), and nothing is freed twice:
    the oracle counts the same way."""
    spec = tp.TensorSpec(shape=(4,), seed=1)
    cap, mt = tp.make_capsule(spec, versioned=versioned)
    ocap, rec = oracle_capsule(spec, versioned, mt.mem)
    for c in (cap, ocap):
        m = P.managed_from_capsule(c)
        addr = ctypes.addressof(m)
        m.deleter(addr)
        m.deleter(addr)
    assert mt.deleter_calls == rec.deleter_calls == 2
    assert P.COUNTERS["double"] >= 1
    # both capsules still hold the standard name: their destructors call a third time
    del cap, ocap, c, m
    gc.collect()
    assert mt.deleter_calls == 3 and rec.deleter_calls == 3
    P.COUNTERS["double"] -= 2   # expected here: not a bookkeeping error


def test_counted_free_restores_and_deletes_once():
    spec = tp.TensorSpec(shape=(2, 2), seed=2)
    mt = tp.ManagedTensor(spec, True, tp.storage(spec))
    assert mt.deleter_calls == 0
    mt.free()
    mt.free()   # idempotent
    assert mt.freed


def test_counted_attach_refuses_null():
    # Private entry points (csrc/core/internal.h), bound by dlpackshim.testing.
    from dlpackshim._ffi import lib
    from dlpackshim.testing._lib import pylib
    lib.dlpackshim_clear_error()
    assert pylib.dlpackshim__counted_attach(None, 1) is None
    assert lib.dlpackshim_last_status() == -1
    assert ffi.string(lib.dlpackshim_last_error()) != b""
    assert pylib.dlpackshim__counted_calls(None) == 0
    pylib.dlpackshim__counted_free(None)


def test_counted_names_are_private():
    """The counted deleters left the public API: only dlpackshim__ names."""
    from dlpackshim._ffi import lib
    from dlpackshim.testing._lib import pylib
    for name in ("dlpackshim_counted_attach", "dlpackshim_counted_calls",
                 "dlpackshim_counted_free"):
        with pytest.raises(AttributeError):
            getattr(pylib, name)
        with pytest.raises(AttributeError):
            getattr(lib, name)


@pytest.mark.parametrize("name", sorted(tp.DEFECTS))
def test_each_defect_is_built_and_dlpackshim_answers_as_tagged(name):
    """Every defect applies to a plain 2x3 float32 producer, and dlpackshim's own
    consumer gives the answer the tag asks for, with the deleter counts it asks for."""
    spec = tp.TensorSpec(shape=(2, 3), seed=5, defect=name)
    assert tp.applicable(spec)
    obj, holder = tp.make_producer(spec)
    d = tp.DEFECTS[name]
    try:
        out = ds.from_dlpack(obj)
    except Exception as e:  # noqa: BLE001
        assert d.expect != "accept", e
        if ":" in d.expect:
            assert type(e).__name__ in d.expect.split(":")[1].split(",") or isinstance(e, BufferError)
    else:
        cuda = d.expect.startswith("raise-or-cuda:")
        assert d.expect in ("accept", "no-crash") or cuda
        if cuda:   # dlpackshim holds device tensors: imported, and saying CUDA
            assert out.device == (2, 0)
        del out
    del obj
    gc.collect()
    want = d.deleter_calls
    assert [t.deleter_calls for t in holder.tensors] == [want] * len(holder.tensors)


def _table_of(obj):
    """The cffi view of obj's type's __dlpack_c_exchange_api__ table."""
    from dlpackshim.testing.producers import _xffi
    cap = type(obj).__dlpack_c_exchange_api__
    api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)   # our own prototypes
    name, ptr = api.PyCapsule_GetName, api.PyCapsule_GetPointer
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    ptr.restype, ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    x = _xffi()
    return name(cap), x.cast("XTable *", ptr(cap, name(cap))), x


@pytest.mark.parametrize("protocol", ["both", "legacy"])
def test_exchange_tables_with_bad_entries(protocol):
    """The table defects are what they say: entries that fail without an exception,
    entries that succeed with a NULL result, NULL entries; a 1.3 header each."""
    base = tp.TensorSpec(shape=(2, 3), protocol=protocol)
    silent, _ = tp.make_producer(base.with_(defect="exchange-fails-silently"))
    null_out, _ = tp.make_producer(base.with_(defect="exchange-null-out"))
    null_entries, _ = tp.make_producer(base.with_(defect="exchange-null-entries"))
    for obj in (silent, null_out, null_entries):
        name, table, x = _table_of(obj)
        assert name == b"dlpack_exchange_api"
        assert (table.header.version.major, table.header.version.minor) == (1, 3)
    _, table, x = _table_of(null_entries)
    assert all(table.entries[i] == x.NULL for i in range(5))
    kinds = ("int(void *, void **, void *, void *)", "int(void *, void **)",
             "int(void *, void **)", "int(void *, void *)", "int(int, int32_t, void **)")
    sentinel = x.cast("void *", 0x1234)
    for obj, rc in ((silent, -1), (null_out, 0)):
        _, table, x = _table_of(obj)
        for i, kind in enumerate(kinds):
            fn = x.cast(kind.replace("(", "(*)(", 1), table.entries[i])
            out = x.new("void **", sentinel)
            if i == 0:
                got = fn(x.NULL, out, x.NULL, x.NULL)
            elif i == 4:
                got = fn(2, 0, out)
            else:
                got = fn(x.NULL, out)
            assert got == rc, (obj, i)
            # a silent failure leaves the result alone; a NULL success writes NULL
            # (dltensor_from_py_object_no_sync fills nothing either way)
            assert out[0] == (sentinel if rc == -1 or i == 3 else x.NULL), (obj, i)
            occurred = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle).PyErr_Occurred
            occurred.restype, occurred.argtypes = ctypes.c_void_p, []
            assert occurred() is None, (obj, i)   # no exception set, success or not
    # dlpackshim's consumer: a clear exception, or the __dlpack__ route, never a crash
    with pytest.raises(RuntimeError, match="without setting an exception"):
        ds.from_dlpack(silent)
    with pytest.raises(BufferError):
        ds.from_dlpack(null_out)
    assert bytes(ds.from_dlpack(null_entries).tobytes()) == tp.expected_bytes(base)


def test_producer_honours_dl_device_as_cupy_does():
    cuda = tp.TensorSpec(shape=(2, 3), device=(2, 0), seed=4)
    p = tp.Producer(cuda)
    assert p.__dlpack_device__() == (2, 0)
    d = P.describe_capsule(p.__dlpack__(max_version=(1, 3)))
    assert d["device"] == (2, 0)      # labelled device memory
    cap = p.__dlpack__(max_version=(1, 3), dl_device=(1, 0))  # a host copy
    d = P.describe_capsule(cap)
    assert d["device"] == (1, 0)
    assert d["flags"] & P.FLAG_IS_COPIED and d["data"] + d["byte_offset"] != p.mem.origin
    t = ds.from_dlpack(cap)
    assert t.device == (1, 0) and t.tobytes() == tp.expected_bytes(cuda)
    del t, cap
    with pytest.raises(BufferError):
        p.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError):
        p.__dlpack__(max_version=(1, 3), dl_device=(2, 1))
    # the liar lives on (kDLCUDA, 0) and answers every dl_device with its CUDA tensor
    liar = tp.Producer(tp.TensorSpec(shape=(2, 3), defect="ignores-dl-device"))
    assert liar.__dlpack_device__() == (2, 0)
    d = P.describe_capsule(liar.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert d["device"] == (2, 0) and not d["flags"] & P.FLAG_IS_COPIED
    with pytest.raises(BufferError):   # dlpackshim checks what it got (no CUDA driver here)
        ds.from_dlpack(liar, device=(1, 0))
    assert liar.calls[-1]["dl_device"] == (1, 0)
    gc.collect()
    assert p.deleter_calls == 2 and liar.deleter_calls == 2


def test_version_major_2_hides_the_tensor():
    spec = tp.TensorSpec(shape=(2, 3), defect="version-major-2", protocol="capsule-versioned")
    cap, mt = tp.make_capsule(spec)
    m = mt.managed
    assert (m.version.major, m.version.minor) == (2, 0)
    assert m.dl_tensor.ndim == 0x7FFFFFFF and m.dl_tensor.shape == ffi.NULL
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    del cap
    gc.collect()
    assert mt.deleter_calls == 1


def test_producer_follows_the_2023_12_rules():
    p = tp.Producer(tp.TensorSpec(shape=(2, 2), readonly=True))
    with pytest.raises(BufferError):
        p.__dlpack__()                      # read-only through the legacy ABI
    with pytest.raises(TypeError):
        p.__dlpack__(max_version=[1, 0])
    with pytest.raises(BufferError):
        p.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    cap = p.__dlpack__(max_version=(1, 3), copy=True)
    d = P.describe_capsule(cap)
    assert d["flags"] & P.FLAG_IS_COPIED and not d["flags"] & P.FLAG_READ_ONLY
    assert d["data"] + d["byte_offset"] != p.mem.origin
    del cap
    gc.collect()
    assert p.deleter_calls == 1
    lp = tp.LegacyProducer(tp.TensorSpec(shape=(2,)))
    with pytest.raises(TypeError):
        lp.__dlpack__(max_version=(1, 0))


def test_import_dlpackshim_does_not_import_hypothesis():
    code = ("import sys, dlpackshim, dlpackshim.testing, dlpackshim.testing.producers; "
            "assert 'hypothesis' not in sys.modules, 'hypothesis imported'; "
            "import dlpackshim.testing.strategies; assert 'hypothesis' in sys.modules")
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_strategies_compose(data):
    shape = data.draw(dst.shapes(min_dims=1, max_dims=3, min_side=1))
    lay = data.draw(dst.layouts(shape, allow_negative=False, allow_zero=False, allow_huge=False))
    assert lay.shape == shape and all(s > 0 for s in lay.strides)
    spec = data.draw(dst.tensor_specs(dtypes=dst.dtypes(codes=(2,)), layouts=st.just(lay),
                                      protocols=("both",), readonly=True))
    assert spec.dtype[0] == 2 and spec.readonly and spec.shape == shape
    t = data.draw(dst.tensors(protocols=("both",), dtypes=st.just((0, 32, 1))))
    got = ds.from_dlpack(t.obj)
    assert got.tobytes() == t.expected
    hostile = data.draw(dst.hostile_specs(defects=["null-shape", "foreign-name"]))
    assert hostile.defect in ("null-shape", "foreign-name") and tp.applicable(hostile)
    assert hostile.expect == tp.DEFECTS[hostile.defect].expect


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_shapes_keep_max_numel_and_min_side(data):
    """Every shape fits max_numel, also where min_side stops the halving of
    one extent before the product fits (3 x 4 x 4 = 48 > 30 once slipped)."""
    min_side, max_numel = data.draw(st.sampled_from([(3, 30), (2, 16), (1, 5), (0, 7)]))
    shape = data.draw(dst.shapes(min_dims=1, max_dims=6, min_side=min_side, max_numel=max_numel))
    assert P.numel(shape) <= max_numel and all(n >= min_side for n in shape) and shape


def test_shapes_that_cannot_fit_are_refused_up_front():
    with pytest.raises(hypothesis.errors.InvalidArgument, match="max_numel=26"):
        dst.shapes(min_dims=3, min_side=3, max_numel=26)
