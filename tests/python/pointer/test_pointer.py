"""from_pointer: raw memory exposed as DLPack, and its owner's lifetime."""

from __future__ import annotations

import ctypes
import gc
import weakref

import pytest

import dlpackshim as ds


class Owner:
    """Memory with a weakref-able owner, to watch its lifetime."""

    def __init__(self, n):
        self.buf = (ctypes.c_float * n)(*range(n))
        self.ptr = ctypes.addressof(self.buf)


def test_ctypes_memory_to_numpy_zero_copy(np):
    o = Owner(6)
    t = ds.from_pointer(o.ptr, (2, 3), "float32", owner=o)
    assert t.shape == (2, 3) and t.dtype == "float32" and t.data_ptr == o.ptr
    a = np.from_dlpack(t)
    assert a.ctypes.data == o.ptr and a.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_owner_kept_alive_by_the_tensor_and_its_exports(np):
    o = Owner(4)
    wr = weakref.ref(o)
    t = ds.from_pointer(o.ptr, (4,), "float32", owner=o)
    del o
    gc.collect()
    assert wr() is not None
    a = np.from_dlpack(t)
    t.close()
    gc.collect()
    assert wr() is not None  # the NumPy array still views it
    assert a.tolist() == [0, 1, 2, 3]
    del a
    gc.collect()
    assert wr() is None


@pytest.mark.parametrize("dtype", ["float32", ds.DType(2, 32, 1), (2, 32, 1), (2, 32)])
def test_dtype_forms(dtype):
    o = Owner(2)
    assert ds.from_pointer(o.ptr, (2,), dtype, owner=o).dtype == "float32"


def test_strides_in_elements_and_reversed(np):
    o = Owner(6)
    t = ds.from_pointer(o.ptr + 5 * 4, (3,), "float32", strides=(-2,), owner=o)
    assert np.from_dlpack(t).tolist() == [5, 3, 1]


@pytest.mark.numpy_min("2.1")
def test_readonly_and_device_forms(np):
    o = Owner(2)
    t = ds.from_pointer(o.ptr, (2,), "float32", readonly=True, device=ds.DeviceType.kDLCPU,
                        owner=o)
    assert t.readonly and t.device == (1, 0)
    assert not np.from_dlpack(t).flags.writeable


def test_gpu_pointer_is_described_not_touched():
    t = ds.from_pointer(0x7F0000000000, (8,), "float16", device=(2, 1))
    assert t.device == (ds.DeviceType.kDLCUDA, 1) and t.data_ptr == 0x7F0000000000
    assert t.__cuda_array_interface__["data"] == (0x7F0000000000, False)
    with pytest.raises(BufferError):
        t.tobytes()
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 0))


def test_sub_byte_packed_type():
    buf = ctypes.create_string_buffer(b"\x21\x43", 2)
    t = ds.from_pointer(ctypes.addressof(buf), (4,), "int4", owner=buf)
    assert t.dtype == (0, 4, 1) and t.nbytes == 2 and t.tobytes() == b"\x21\x43"


def test_zero_size_may_be_null():
    t = ds.from_pointer(0, (0, 5), "int32")
    assert t.size == 0 and t.data_ptr == 0


@pytest.mark.parametrize("kwargs, exc", [
    (dict(ptr=0, shape=(2,), dtype="float32"), BufferError),        # NULL data, not empty
    (dict(ptr=64, shape=(-1,), dtype="float32"), BufferError),      # negative extent
    (dict(ptr=64, shape=(2,), dtype="floaty32"), ValueError),       # unknown name
    (dict(ptr=64, shape=(2,), dtype="float33"), ValueError),        # C: no 33-bit float
    (dict(ptr=64, shape=(2,), dtype=3.5), TypeError),
    (dict(ptr=64, shape=2, dtype="float32"), TypeError),
    (dict(ptr=64, shape=(2,), dtype="float32", strides=(1, 1)), ValueError),
    (dict(ptr=64, shape=(2,), dtype="float32", device="cpu"), TypeError),
    (dict(ptr=64, shape=(2,), dtype="float32", device=(99, 0)), BufferError),
    (dict(ptr="0x40", shape=(2,), dtype="float32"), TypeError),
])
def test_bad_descriptions(kwargs, exc):
    with pytest.raises(exc):
        ds.from_pointer(**kwargs)


def test_integers_with_index_are_taken_for_ptr_shape_and_strides(np):
    """NumPy integers (and any __index__), as the rest of the API takes them."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ds.from_pointer(np.uint64(a.ctypes.data), (np.int64(4), np.int32(3)), "float32",
                        strides=(np.int64(1), np.intp(4)), owner=a)
    assert t.shape == (4, 3) and t.strides == (1, 4) and t.data_ptr == a.ctypes.data
    assert all(type(v) is int for v in t.shape + t.strides)
    assert np.from_dlpack(t).tolist() == a.T.tolist()
    ptr, n = np.array([a.ctypes.data, 12], dtype=np.uint64)
    assert ds.from_pointer(ptr, tuple(np.array([n])), "float32", owner=a).shape == (12,)


@pytest.mark.parametrize("kwargs", [dict(ptr=64.0, shape=(2,)), dict(ptr=True, shape=(2,)),
                                    dict(ptr=64, shape=(2.0,)), dict(ptr=64, shape=(True,)),
                                    dict(ptr=64, shape=(2,), strides=(1.0,))])
def test_integers_without_index_and_bools_are_type_errors(np, kwargs):
    with pytest.raises(TypeError, match="must be an int"):
        ds.from_pointer(dtype="float32", **kwargs)
    if "shape" in kwargs and not isinstance(kwargs["shape"][0], bool):
        kwargs = dict(kwargs, shape=tuple(np.float64(v) for v in kwargs["shape"]))
        with pytest.raises(TypeError, match="must be an int"):
            ds.from_pointer(dtype="float32", **kwargs)


def test_owner_referencing_its_tensor_is_collected(np):
    o = Owner(4)
    wr = weakref.ref(o)
    o.t = ds.from_pointer(o.ptr, (4,), "float32", owner=o)
    del o
    gc.collect()
    assert wr() is None


def test_failed_build_releases_the_owner():
    o = Owner(1)
    wr = weakref.ref(o)
    with pytest.raises(BufferError):
        ds.from_pointer(0, (2,), "float32", owner=o)
    del o
    gc.collect()
    assert wr() is None


def test_a_numpy_sub_byte_dtype_describes_padded_memory():
    """ml_dtypes' int4 arrays hold one element a byte; DLPack packs int4 two
    a byte unless the tensor says IS_SUBBYTE_TYPE_PADDED. A NumPy dtype given
    to from_pointer describes NumPy's layout (padded); the name, DLPack's."""
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1, 2, 3, 4, -1, -2], dtype=ml_dtypes.int4)
    t = ds.from_pointer(a.ctypes.data, a.shape, a.dtype, owner=a)
    padded = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    assert t._flags & padded and t.nbytes == a.nbytes == 6
    assert t.tobytes() == a.tobytes()
    packed = ds.from_pointer(a.ctypes.data, (6,), "int4", owner=a)
    assert not packed._flags & padded and packed.nbytes == 3
