"""dlpackshim.Tensor, DType, Device and the enums: the issue's attribute list, rule by rule."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

import dlpackshim as ds
from dlpackshim import DeviceType, DType, DTypeCode


# ---- enums and value types ----------------------------------------------------

def test_dlpack_version_is_1_3():
    assert ds.DLPACK_VERSION == (1, 3)
    assert isinstance(ds.__version__, str) and ds.__version__


def test_device_type_has_all_1_3_values_and_the_later_ones():
    expected = {"kDLCPU": 1, "kDLCUDA": 2, "kDLCUDAHost": 3, "kDLOpenCL": 4, "kDLVulkan": 7,
                "kDLMetal": 8, "kDLVPI": 9, "kDLROCM": 10, "kDLROCMHost": 11, "kDLExtDev": 12,
                "kDLCUDAManaged": 13, "kDLOneAPI": 14, "kDLWebGPU": 15, "kDLHexagon": 16,
                "kDLMAIA": 17, "kDLTrn": 18,
                "kDLTPU": 19, "kDLTPUHost": 20, "kDLAscend": 21}  # dlpack main, after 1.3
    assert {m.name: m.value for m in DeviceType} == expected


def test_dtype_code_has_all_1_3_values_and_bcomplex():
    assert [m.value for m in DTypeCode] == list(range(19))
    assert DTypeCode.kDLBool == 6 and DTypeCode.kDLFloat4_e2m1fn == 17
    assert DTypeCode.kDLBcomplex == 18  # dlpack main, after 1.3


def test_enums_are_the_headers():
    """DeviceType, DTypeCode and the FLAG_* constants are generated from
    csrc/dlpackshim.h (through the cdef module), never copied by hand: they
    equal what the loaded library's cdef says, member for member."""
    from dlpackshim import _cdef, _ffi
    for enum_cls, c_name in ((DeviceType, "DLDeviceType"), (DTypeCode, "DLDataTypeCode")):
        assert {m.name: m.value for m in enum_cls} == _cdef.ENUMS[c_name]
        assert {m.name: m.value for m in enum_cls} == {
            name: value for value, name in _ffi.ffi.typeof(c_name).elements.items()}
    for name, value in _cdef.ENUMS["dlpackshim_flag"].items():
        assert getattr(_ffi, name.replace("DLPACKSHIM_", "")) == value


@pytest.mark.parametrize("device_type", [19, 20, 21])
def test_device_types_after_1_3_round_trip(device_type):
    np = pytest.importorskip("numpy")
    a = np.zeros(4, dtype=np.float32)
    t = ds.from_pointer(a.ctypes.data, (4,), "float32", device=(device_type, 3), owner=a)
    assert t.device == (device_type, 3) and isinstance(t.device.device_type, DeviceType)
    assert repr(t.device) == f"Device({DeviceType(device_type).name}, 3)"
    u = ds.from_dlpack(t)
    assert u.__dlpack_device__() == (device_type, 3) and u.data_ptr == t.data_ptr
    # Not host memory to dlpackshim: no copy, no move to the CPU.
    with pytest.raises(BufferError):
        ds.from_dlpack(t, copy=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(t, device=(1, 0))


def test_bcomplex_is_named_validated_and_round_trips():
    np = pytest.importorskip("numpy")
    assert DType(18, 32).name == "bcomplex32" and DType.from_name("bcomplex32") == (18, 32, 1)
    assert DType.from_name("bcomplex32x2") == (18, 32, 2)
    a = np.zeros(4, dtype=np.complex64)
    with pytest.raises(ValueError, match="needs 32 bits"):
        ds.from_pointer(a.ctypes.data, (2,), (18, 64, 1), owner=a)
    t = ds.from_pointer(a.ctypes.data, (4,), "bcomplex32", owner=a)
    u = ds.from_dlpack(t)
    assert u.dtype == "bcomplex32" and u.dtype.code is DTypeCode.kDLBcomplex
    assert u.data_ptr == t.data_ptr and u.dtype.itemsize == 4 and u.nbytes == 16
    # NumPy has no bfloat16-based complex: it refuses with its own error
    # (RuntimeError up to 2.4, BufferError from 2.5), and there is no
    # array-interface typestr either.
    with pytest.raises((RuntimeError, BufferError), match="(?i)unsupported dtype"):
        np.from_dlpack(t)
    with pytest.raises(AttributeError, match="bcomplex32"):
        t.__array_interface__


@pytest.mark.parametrize("name, fields", [
    ("int8", (0, 8, 1)), ("int64", (0, 64, 1)), ("uint16", (1, 16, 1)),
    ("float16", (2, 16, 1)), ("float32", (2, 32, 1)), ("float64", (2, 64, 1)),
    ("bfloat16", (4, 16, 1)), ("complex64", (5, 64, 1)), ("complex128", (5, 128, 1)),
    ("bool", (6, 8, 1)), ("float8_e3m4", (7, 8, 1)), ("float8_e4m3", (8, 8, 1)),
    ("float8_e4m3b11fnuz", (9, 8, 1)), ("float8_e4m3fn", (10, 8, 1)),
    ("float8_e4m3fnuz", (11, 8, 1)), ("float8_e5m2", (12, 8, 1)),
    ("float8_e5m2fnuz", (13, 8, 1)), ("float8_e8m0fnu", (14, 8, 1)),
    ("float6_e2m3fn", (15, 6, 1)), ("float6_e3m2fn", (16, 6, 1)),
    ("float4_e2m1fn", (17, 4, 1)), ("int4", (0, 4, 1)), ("uint1", (1, 1, 1)),
    ("int2", (0, 2, 1)), ("float32x4", (2, 32, 4)),
])
def test_dtype_names_round_trip(name, fields):
    dt = DType(*fields)
    assert dt.name == name
    assert dt == name and dt == fields
    assert DType.from_name(name) == dt
    assert hash(dt) == hash(name)   # equal to its name, so hashed as it
    assert str(dt) == name and name in repr(dt)
    assert eval(repr(dt), {"DType": DType}) == dt and DType(name) == dt  # the repr is a call


def test_dtype_of_a_name_takes_the_name_alone():
    with pytest.raises(TypeError, match="name alone"):
        DType("float32", 32)
    with pytest.raises(TypeError, match="code and bits"):
        DType(2)
    with pytest.raises(ValueError, match="unknown DLPack dtype"):
        DType("float33_e9")
    assert type(DType("int8")) is DType and DType("int8")._replace(bits=16) == "int16"


def test_dtype_unknown_name_is_value_error():
    with pytest.raises(ValueError, match="unknown DLPack dtype"):
        DType.from_name("float33_e9")


def test_dtype_is_not_equal_to_other_names():
    assert DType(2, 32) != "float64"
    assert not (DType(2, 32) == "int32")


def test_device_equals_its_tuple():
    d = ds.Device(DeviceType.kDLCPU, 0)
    assert d == (1, 0) and hash(d) == hash((1, 0))
    assert repr(d) == "Device(kDLCPU, 0)"


def test_a_device_made_from_plain_ints_shows_its_type_by_name():
    assert repr(ds.Device(1, 0)) == "Device(kDLCPU, 0)" == repr(ds.Device(DeviceType.kDLCPU, 0))
    assert repr(ds.Device(2, 3)) == "Device(kDLCUDA, 3)"
    assert repr(ds.Device(99, 0)) == "Device(99, 0)"   # a type newer than this package


# ---- attributes of an imported tensor ----------------------------------------------

@pytest.mark.numpy_min("2.1")
def test_attributes_of_a_numpy_import(np):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = ds.from_dlpack(a)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
    assert t.strides == (12, 4, 1)
    assert t.ndim == 3 and t.size == 24 and t.nbytes == 96
    assert t.dtype == "float32" and isinstance(t.dtype, DType)
    assert t.device == (1, 0) and isinstance(t.device, ds.Device)
    assert t.data_ptr == a.ctypes.data
    assert t.readonly is False and t.is_copied is False
    assert t.dlpack_version is not None and t.dlpack_version[0] == 1
    assert t.__dlpack_device__() == (DeviceType.kDLCPU, 0)


def test_strides_are_in_elements_and_data_ptr_is_the_first_element(np):
    a = np.arange(60, dtype=np.int16).reshape(6, 10)[1::2, ::-3]
    t = ds.from_dlpack(a)
    assert t.strides == tuple(s // 2 for s in a.strides)
    assert t.data_ptr == a.__array_interface__["data"][0]
    assert t.tobytes() == a.tobytes()


def test_zero_d_and_zero_size(np):
    t0 = ds.from_dlpack(np.array(3.5))
    assert t0.shape == () and t0.ndim == 0 and t0.size == 1 and t0.strides == ()
    assert t0.tobytes() == np.array(3.5).tobytes()
    te = ds.from_dlpack(np.zeros((3, 0), dtype=np.int32))
    assert te.shape == (3, 0) and te.size == 0 and te.nbytes == 0
    assert te.tobytes() == b""


def test_repr_is_useful(np):
    t = ds.from_dlpack(np.zeros((2, 3), dtype=np.float64)[:, ::2])
    r = repr(t)
    assert "shape=(2, 2)" in r and "float64" in r and "kDLCPU" in r and "strides=(3, 2)" in r
    t.close()
    assert "closed" in repr(t)


def test_tensor_is_not_constructible():
    with pytest.raises(TypeError, match="from_dlpack"):
        ds.Tensor()


# ---- close() and the context manager ---------------------------------------------

def test_close_then_use_raises_value_error_and_close_twice_is_safe(np):
    t = ds.from_dlpack(np.arange(4))
    t.close()
    t.close()
    assert t.closed
    for use in (lambda: t.shape, lambda: t.dtype, lambda: t.__dlpack__(),
                lambda: t.tobytes(), lambda: t.readonly, lambda: t.__array_interface__):
        with pytest.raises(ValueError, match="closed"):
            use()


def test_context_manager_closes(np):
    with ds.from_dlpack(np.arange(4)) as t:
        assert t.size == 4
    assert t.closed


def test_close_releases_the_producer(np):
    a = np.arange(10.0)
    wa = weakref.ref(a)
    t = ds.from_dlpack(a)
    del a
    gc.collect()
    assert wa() is not None
    t.close()
    gc.collect()
    assert wa() is None


@pytest.mark.numpy_min("2.1")
def test_exports_outlive_close(np):
    a = np.arange(10.0)
    t = ds.from_dlpack(a)
    b = np.from_dlpack(t)
    cap = t.__dlpack__(max_version=(1, 3))
    t.close()
    del a
    gc.collect()
    assert b.sum() == 45.0
    c = np.from_dlpack(_CapsuleHolder(cap))
    assert c.sum() == 45.0


class _CapsuleHolder:
    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kw):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


# ---- __dlpack__ (producer) ---------------------------------------------------------

def test_versioned_and_legacy_capsule_names(np):
    t = ds.from_dlpack(np.arange(3))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(2, 5)))
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))


def test_numpy_consumes_both_abis(np):
    a = np.arange(6, dtype=np.uint8)
    t = ds.from_dlpack(a)
    assert np.from_dlpack(t).ctypes.data == a.ctypes.data
    legacy = np.from_dlpack(_CapsuleHolder(t.__dlpack__()))
    assert legacy.ctypes.data == a.ctypes.data


@pytest.mark.parametrize("bad", [(1,), [1, 0], (1, 0, 0), ("1", "0"), 1, (1.0, 0)])
def test_max_version_not_a_2_tuple_of_ints_is_type_error(np, bad):
    t = ds.from_dlpack(np.arange(3))
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version=bad)


@pytest.mark.numpy_min("2.1")
def test_read_only_is_exported_as_read_only_and_refused_through_legacy(np):
    a = np.arange(4.0)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    assert t.readonly
    b = np.from_dlpack(t)
    assert not b.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()


@pytest.mark.numpy_min("2.1")
def test_copy_true_gives_a_fresh_buffer_with_is_copied(np):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:3]
    t = ds.from_dlpack(a)
    b = np.from_dlpack(_CapsuleHolder(t.__dlpack__(max_version=(1, 3), copy=True)))
    assert b.ctypes.data != a.ctypes.data and (b == a).all()
    back = ds.from_dlpack(_CapsuleHolder(t.__dlpack__(max_version=(1, 3), copy=True)))
    assert back.is_copied and back.data_ptr % 256 == 0


@pytest.mark.numpy_min("2.1")
def test_copy_false_and_own_device_are_fine(np):
    a = np.arange(3)
    t = ds.from_dlpack(a)
    b = np.from_dlpack(_CapsuleHolder(t.__dlpack__(max_version=(1, 3), copy=False,
                                                   dl_device=(1, 0))))
    assert b.ctypes.data == a.ctypes.data


def test_dl_device_elsewhere_is_buffer_error_and_not_a_tuple_is_type_error(np):
    t = ds.from_dlpack(np.arange(3))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=(DeviceType.kDLCUDA, 0))
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=(1, 3), dl_device="cpu")


@pytest.mark.parametrize("stream", [0, 1, 2, 12345])
def test_cpu_stream_other_than_none_is_value_error(np, stream):
    t = ds.from_dlpack(np.arange(3))
    with pytest.raises(ValueError, match="stream"):
        t.__dlpack__(stream=stream)


@pytest.mark.numpy_min("2.1")
def test_cpu_stream_none_and_minus_one_are_accepted(np):
    t = ds.from_dlpack(np.arange(3))
    for stream in (None, -1):
        assert np.from_dlpack(_CapsuleHolder(t.__dlpack__(stream=stream, max_version=(1, 3)))) \
            .tolist() == [0, 1, 2]


def test_is_copied_is_not_forwarded_on_a_sharing_export(np):
    t = ds.from_dlpack(np.arange(5.0), copy=True)
    assert t.is_copied
    again = ds.from_dlpack(t)
    assert again.data_ptr == t.data_ptr and not again.is_copied


# ---- array interfaces and tobytes --------------------------------------------------

@pytest.mark.numpy_min("2.1")
def test_array_interface_round_trip(np):
    a = np.arange(20, dtype=np.complex64).reshape(4, 5)[::2, 1:]
    t = ds.from_dlpack(a)
    iface = t.__array_interface__
    assert iface["version"] == 3 and iface["typestr"] == a.dtype.str
    assert iface["data"] == (a.__array_interface__["data"][0], False)
    b = np.asarray(t)
    assert b.__array_interface__["data"][0] == iface["data"][0]
    assert (b == a).all()


def test_array_interface_keeps_memory_after_close(np):
    t = ds.from_dlpack(np.arange(8, dtype=np.int64) * 7)
    b = np.asarray(t)
    t.close()
    gc.collect()
    assert b.tolist() == [0, 7, 14, 21, 28, 35, 42, 49]


def test_array_interface_absent_for_bfloat16(torch):
    t = ds.from_dlpack(torch.zeros(3, dtype=torch.bfloat16))
    assert not hasattr(t, "__array_interface__")
    assert not hasattr(t, "__cuda_array_interface__")


def test_cuda_array_interface_only_for_cuda(np):
    t = ds.from_dlpack(np.arange(3))
    with pytest.raises(AttributeError):
        t.__cuda_array_interface__


def test_tobytes_is_c_order(np):
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4).transpose(2, 0, 1)
    assert ds.from_dlpack(a).tobytes() == a.tobytes()


# ---- __dlpack__'s C fast path ---------------------------------------------------

def _capsule_kind(cap):
    import ctypes
    api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
    name = api.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return name(cap)


def test_dlpack_keywords_by_name_in_any_order_interned_or_not():
    """__dlpack__ reads its keywords by name on every call: interned names
    (a call written in Python) and names made at run time (NumPy builds its
    own), in any order, each call's own values."""
    t = ds.from_dlpack(bytearray(b"abcdefgh"))
    mv_name, copy_name = "".join(["max_", "version"]), "".join(["co", "py"])
    for mv, want in [((1, 3), b"dltensor_versioned"), (tuple([0, 9]), b"dltensor"),
                     (tuple([1, 0]), b"dltensor_versioned"), (None, b"dltensor"),
                     (tuple([0, 5]), b"dltensor"), (tuple([2, 0]), b"dltensor_versioned")]:
        for copy in (None, False, True):
            for kw in ({"max_version": mv, "copy": copy}, {"copy": copy, "max_version": mv},
                       {mv_name: mv, copy_name: copy},
                       {"max_version": mv, "dl_device": (1, 0), "copy": copy, "stream": None}):
                cap = t.__dlpack__(**kw)
                assert _capsule_kind(cap) == want, kw
                back = ds.from_dlpack(cap)
                copied = copy is True and want == b"dltensor_versioned"  # no flags in legacy
                assert back.tobytes() == b"abcdefgh" and back.is_copied == copied, kw
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.__dlpack__(max_versions=(1, 0))
    with pytest.raises(TypeError, match="unexpected keyword"):
        t.__dlpack__(max_version=(1, 0), copyy=None)
    with pytest.raises(TypeError, match="keyword arguments only"):
        t.__dlpack__((1, 0))


def test_dlpack_requests_it_cannot_honour():
    t = ds.from_dlpack(bytearray(8))
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=(2, 0))  # another device
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 1))  # another device id
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=[1, 0])                    # the standard's TypeError
    with pytest.raises(ValueError):
        t.__dlpack__(max_version=(1, 2**32))                # not a DLPack version


# ---- memory layout: c_contiguous / f_contiguous, NumPy's rules -------------------

def _layouts():
    np = pytest.importorskip("numpy")
    base = np.arange(24.0).reshape(2, 3, 4)
    return {
        "C": base, "F": np.asfortranarray(base), "transposed": base.T,
        "permuted": base.transpose(1, 0, 2), "sliced": base[:, ::2], "reversed": base[::-1],
        "extent-1 axes": base[:1, :, :1], "one axis": base[1, 2, :], "empty": base[:, :0],
        "0-d": base[0, 0, 0, ...], "broadcast": np.broadcast_to(base[0, 0, :1], (5,)),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_c_and_f_contiguous_match_numpy(name):
    a = _layouts()[name]
    t = ds.from_dlpack(a)
    assert (t.c_contiguous, t.f_contiguous) == (a.flags.c_contiguous, a.flags.f_contiguous)
    assert t.is_contiguous == t.c_contiguous


def test_fortran_array_is_described_not_transposed():
    np = pytest.importorskip("numpy")
    a = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    t = ds.from_dlpack(a)
    assert t.shape == (2, 3) and t.strides == (1, 2)
    assert t.f_contiguous and not t.c_contiguous
    assert "strides=(1, 2)" in repr(t)  # repr shows strides unless C order
    assert "strides" not in repr(ds.from_dlpack(np.ascontiguousarray(a)))


def test_layout_of_a_closed_tensor_is_value_error():
    np = pytest.importorskip("numpy")
    t = ds.from_dlpack(np.zeros(3))
    t.close()
    for attr in ("c_contiguous", "f_contiguous"):
        with pytest.raises(ValueError):
            getattr(t, attr)


def test_layout_follows_numpy_for_any_strided_view():
    np = pytest.importorskip("numpy")
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=200, deadline=None)
    @given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=4),
           steps=st.lists(st.sampled_from([1, 1, 2, -1]), min_size=4, max_size=4),
           perm_seed=st.randoms(use_true_random=False))
    def check(shape, steps, perm_seed):
        a = np.zeros(shape, dtype=np.int16)
        a = a[tuple(slice(None, None, s) for s in steps[:a.ndim])]
        axes = list(range(a.ndim))
        perm_seed.shuffle(axes)
        a = a.transpose(axes)
        t = ds.from_dlpack(a)
        assert (t.c_contiguous, t.f_contiguous) == (a.flags.c_contiguous, a.flags.f_contiguous)

    check()


def test_bcomplex_tensors_from_the_strategies_round_trip():
    """dlpackshim.testing draws bcomplex32 when asked (after_1_3) and the
    checker-built producers hand it over intact, on every layout."""
    from hypothesis import given, settings
    from dlpackshim.testing import strategies as dst

    assert (18, 32, 1) in dst.AFTER_1_3_DTYPES

    @settings(max_examples=30, deadline=None)
    @given(dst.tensors(dtypes=dst.dtypes(codes=[18], after_1_3=True)))
    def check(built):
        x = ds.from_dlpack(built.obj)
        assert x.dtype == "bcomplex32"
        assert x.tobytes() == built.expected

    check()


# ---- the class is a C type with the class statement's members ------------------

def test_tensor_class_is_its_statement_with_the_bases_own_deallocation():
    """dlpackshim.Tensor is a C subtype of _tensor.py's class statement (so
    the base's own deallocator frees its instances, not CPython's generic one
    for classes) that adds nothing: every method and property is the
    statement's, found by inheritance."""
    from dlpackshim import _tensor
    cls = ds.Tensor
    (statement,) = cls.__bases__
    assert statement.__bases__ == (_tensor.TensorBase,) and statement.__module__ == _tensor.__name__
    assert set(vars(cls)) <= {"__module__", "__doc__", "__dlpack_c_exchange_api__"}
    for name in ("shape", "strides", "dtype", "device", "tobytes", "_pin", "__repr__",
                 "__array_interface__", "__dlpack_device__", "__enter__", "__new__"):
        assert name in vars(statement) and getattr(cls, name) is getattr(statement, name), name
    assert cls.__qualname__ == "Tensor" and cls.__doc__ == statement.__doc__
    assert type(ds.from_dlpack(bytearray(1))) is cls


def test_tensor_class_may_add_no_fields_to_its_base():
    """The library sets every field of a new Tensor itself, without zeroing
    the object first, so a class that adds a field (an instance dict, a
    slot) would leave it as the allocator had it: py_tensor_class refuses
    one, and accepts an empty __slots__."""
    from dlpackshim._ffi import py_tensor_class

    class WithDict(ds.Tensor):
        pass

    class WithSlot(ds.Tensor):
        __slots__ = ("extra",)

    class Empty(ds.Tensor):
        __slots__ = ()

    for cls in (WithDict, WithSlot):
        with pytest.raises(TypeError, match="may add no fields"):
            py_tensor_class(cls)
    assert py_tensor_class(Empty).__bases__ == (Empty,)


def test_tensor_weak_references_and_no_instance_dict():
    t = ds.from_dlpack(bytearray(8))
    died = []
    ref = weakref.ref(t, lambda _: died.append(True))
    assert ref() is t
    with pytest.raises(AttributeError):
        t.anything = 1  # no __dict__, as with the __slots__ of before
    del t
    gc.collect()
    assert ref() is None and died == [True]


def test_tensor_can_be_subclassed_and_patched():
    class Sub(ds.Tensor):
        pass

    with pytest.raises(TypeError, match="not built directly"):
        Sub()
    t = ds.from_dlpack(bytes(4))
    ds.Tensor.answer = property(lambda self: 42)  # mocking libraries patch classes
    try:
        assert t.answer == 42
    finally:
        del ds.Tensor.answer
    assert not hasattr(t, "answer")


def test_a_reused_tensor_starts_afresh():
    """A Tensor made after many were freed (the allocator may hand back their
    memory) starts afresh: nothing of an old one may show."""
    for _ in range(40):  # fill the spares with Tensors that had every field set
        old = ds.from_dlpack(bytearray(b"old!"))
        old.__array_interface__  # pinned
        _ = old.shape, repr(old)  # cached metadata
        refs = [weakref.ref(old) for _ in range(2)]
        old.close()
        del old
        assert all(r() is None for r in refs)
    fresh = [ds.from_dlpack(bytes(range(i + 1))) for i in range(40)]
    for i, t in enumerate(fresh):
        assert type(t) is ds.Tensor and not t.closed
        assert t.shape == (i + 1,) and t.tobytes() == bytes(range(i + 1))
        assert t.stream is None and t.readonly and weakref.getweakrefcount(t) == 0
        assert gc.is_tracked(t)
    refs = [weakref.ref(t) for t in fresh]
    del fresh, t
    assert all(r() is None for r in refs)  # reference counts right: freed without the GC
    # A reused Tensor in a cycle (Tensor -> export -> exporter -> Tensor) is collected.

    class Buffer(bytearray):
        pass

    died = []
    for _ in range(3):
        b = Buffer(8)
        b.t = ds.from_dlpack(b)
        weakref.finalize(b, died.append, True)
        del b
    gc.collect()
    assert died == [True] * 3




def test_help_shows_plain_annotations():
    """Issue 34.9: help(Tensor) showed `-> "'Tensor'"` (an annotation quoted twice).
    Up to 3.13 pydoc shows a string annotation quoted once; 3.14's pydoc
    (annotationlib) shows it bare."""
    import pydoc
    text = pydoc.render_doc(ds.Tensor, renderer=pydoc.plaintext)
    shown = "-> Tensor" if sys.version_info >= (3, 14) else "-> 'Tensor'"
    assert shown in text and "\"'Tensor'\"" not in text


def test_a_subclass_that_overrides_dlpack_is_asked_through_it():
    """from_dlpack takes its own Tensors' holders directly; an instance of a
    subclass (made by __class__ assignment) whose __dlpack__ refuses is a
    producer like any other, as for the foreign types: its __dlpack__ says."""
    class Refusing(ds.Tensor):
        __slots__ = ()

        def __dlpack__(self, **kwargs):
            raise BufferError("this subclass exports nothing")

    t = ds.from_dlpack(bytearray(8))
    t.__class__ = Refusing
    for call in (ds.from_dlpack, lambda x: ds.from_dlpack(x, copy=True),
                 lambda x: ds.from_dlpack_many([x])[0]):
        with pytest.raises(BufferError, match="exports nothing"):
            call(t)
    t.__class__ = ds.Tensor
    assert ds.from_dlpack(t).nbytes == 8
