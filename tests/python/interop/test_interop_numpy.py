"""NumPy <-> dlpackshim, both directions.

Behaviour of NumPy 2.4 used here (checked by experiment, see the report):
- ndarray.__dlpack__ answers any max_version >= (1, 0) with version (1, 0);
  read-only arrays get READ_ONLY, and are refused through the legacy ABI
  (BufferError); copy=True sets IS_COPIED; stream other than None ->
  RuntimeError; dl_device not a tuple -> TypeError, another device -> BufferError.
- It exports bool as (kDLBool, 8, 1), complex64 as (5, 64, 1), float16, all
  ints; refuses bfloat16/float8/int4 (ml_dtypes), longdouble, non-native byte
  order, structured/void/str/datetime with BufferError.
- np.from_dlpack sends max_version=(1, 0); imports legacy capsules read-only
  (NumPy >= 2.3); rejects lanes != 1, bfloat16, float8, sub-byte, (5, 32)
  with RuntimeError("Unsupported dtype/lanes in DLTensor").
- Zero-size arrays are exported with strides (0, ...) and a non-NULL pointer.
"""
import array
import ctypes
import mmap
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

np = pytest.importorskip("numpy")
import dlpackshim as ds  # noqa: E402


DTYPES = [
    ("bool", np.bool_, (6, 8, 1)),
    ("int8", np.int8, (0, 8, 1)),
    ("int16", np.int16, (0, 16, 1)),
    ("int32", np.int32, (0, 32, 1)),
    ("int64", np.int64, (0, 64, 1)),
    ("uint8", np.uint8, (1, 8, 1)),
    ("uint16", np.uint16, (1, 16, 1)),
    ("uint32", np.uint32, (1, 32, 1)),
    ("uint64", np.uint64, (1, 64, 1)),
    ("float16", np.float16, (2, 16, 1)),
    ("float32", np.float32, (2, 32, 1)),
    ("float64", np.float64, (2, 64, 1)),
    ("complex64", np.complex64, (5, 64, 1)),
    ("complex128", np.complex128, (5, 128, 1)),
]


def sample(npdt, shape=(3, 4)):
    n = int(np.prod(shape))
    if npdt is np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    a = np.arange(1, n + 1).astype(npdt)
    if np.issubdtype(npdt, np.complexfloating):
        a = a + 1j * a[::-1]
        a = a.astype(npdt)
    return a.reshape(shape)


def elem_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


class LegacyWrap:
    """Exposes an array through the pre-2023 protocol only (like NumPy 1.24)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


# ---------------------------------------------------------------------------
# dtypes, both directions
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("name,npdt,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_numpy_to_shim_every_dtype(name, npdt, code):
    a = sample(npdt)
    t = ds.from_dlpack(a)
    assert t.dtype == name
    assert t.dtype == code
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == code
    assert t.shape == (3, 4) and t.ndim == 2 and t.size == 12
    assert t.strides == elem_strides(a)
    assert t.nbytes == a.nbytes
    assert t.device == (1, 0) and t.device == (ds.DeviceType.kDLCPU, 0)
    assert t.data_ptr == a.ctypes.data
    assert not t.readonly and not t.is_copied
    assert t.dlpack_version == (1, 0)   # what NumPy 2.x exports
    assert t.tobytes() == a.tobytes()


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("name,npdt,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_shim_to_numpy_every_dtype(name, npdt, code):
    a = sample(npdt)
    t = ds.from_pointer(a.ctypes.data, a.shape, name, owner=a)
    b = np.from_dlpack(t)
    assert b.dtype == np.dtype(npdt)
    assert b.shape == a.shape and b.strides == a.strides
    assert b.ctypes.data == a.ctypes.data
    assert b.flags.writeable
    np.testing.assert_array_equal(b, a)
    b.flat[1] = b.flat[0]
    assert a.flat[1] == a.flat[0]


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("name,npdt,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_round_trip_numpy_shim_numpy_every_dtype(name, npdt, code):
    a = sample(npdt, (5,))
    b = np.from_dlpack(ds.from_dlpack(a))
    assert b.dtype == a.dtype
    assert np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)
    b[2] = a[0]
    assert a[2] == a[0]


# ---------------------------------------------------------------------------
# views: strided, transposed, negative, offset, 0-d, zero-size
# ---------------------------------------------------------------------------
_BASE = np.arange(60, dtype=np.float64).reshape(6, 10)
VIEWS = {
    "contiguous": lambda: _BASE.copy(),
    "transposed": lambda: _BASE.copy().T,
    "stepped": lambda: _BASE.copy()[::2, ::3],
    "negative_1d": lambda: np.arange(10, dtype=np.int32)[::-1],
    "negative_2d": lambda: _BASE.copy()[:, ::-1],
    "negative_both": lambda: _BASE.copy()[::-2, ::-3],
    "offset": lambda: _BASE.copy()[1:, 2:],
    "fortran": lambda: np.asfortranarray(_BASE),
    "3d_permuted": lambda: np.arange(24, dtype=np.int16).reshape(2, 3, 4).transpose(2, 0, 1),
    "size1_dims": lambda: np.arange(5.0).reshape(1, 5, 1),
    "0d": lambda: np.array(3.5),
    "0d_complex": lambda: np.array(1 + 2j, dtype=np.complex64),
    "zero_size": lambda: np.zeros((0, 3)),
    "zero_size_view": lambda: _BASE.copy()[:, 4:4],
    "broadcast": lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    "unaligned": lambda: np.frombuffer(bytearray(17), np.int32, offset=1, count=4),
    "8d": lambda: np.arange(256, dtype=np.uint8).reshape((2,) * 8),
}


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
def test_numpy_view_to_shim_and_back(view):
    v = VIEWS[view]()
    t = ds.from_dlpack(v)
    assert t.shape == v.shape
    assert t.ndim == v.ndim
    assert t.size == v.size
    assert t.nbytes == v.nbytes
    assert t.tobytes() == v.tobytes()
    assert t.readonly == (not v.flags.writeable)
    if v.size:
        assert t.strides == elem_strides(v)
        assert t.data_ptr == v.ctypes.data
    b = np.from_dlpack(t)
    assert b.shape == v.shape and b.dtype == v.dtype
    np.testing.assert_array_equal(b, v)
    assert b.flags.writeable == v.flags.writeable
    if v.size:
        assert b.ctypes.data == v.ctypes.data
        assert b.strides == v.strides
        assert np.shares_memory(b, v)
    if v.size and v.flags.writeable:
        idx = (0,) * v.ndim
        b[idx] = 77
        assert v[idx] == 77
        assert t.tobytes() == v.tobytes()


def test_negative_stride_data_ptr_is_first_element():
    a = np.arange(10, dtype=np.float32)
    v = a[::-1]
    t = ds.from_dlpack(v)
    assert t.strides == (-1,)
    assert t.data_ptr == a.ctypes.data + 9 * 4
    assert np.frombuffer(t.tobytes(), np.float32).tolist() == list(range(9, -1, -1))


def test_offset_view_data_ptr_includes_offset():
    a = np.arange(60, dtype=np.float64).reshape(6, 10)
    v = a[2:, 3:]
    t = ds.from_dlpack(v)
    assert t.data_ptr == a.ctypes.data + (2 * 10 + 3) * 8
    cap = t.__dlpack__(max_version=(1, 3))
    d = P.describe_capsule(cap)
    assert d["data"] + d["byte_offset"] == t.data_ptr
    assert d["strides"] == (10, 1) and d["shape"] == (4, 7)


def test_zero_d():
    a = np.array(2.5, dtype=np.float32)
    t = ds.from_dlpack(a)
    assert t.shape == () and t.strides == () and t.ndim == 0 and t.size == 1 and t.nbytes == 4
    b = np.from_dlpack(t)
    assert b.shape == () and b == 2.5


def test_zero_size():
    a = np.zeros((0, 3), dtype=np.int64)
    t = ds.from_dlpack(a)
    assert t.shape == (0, 3) and t.size == 0 and t.nbytes == 0 and t.tobytes() == b""
    b = np.from_dlpack(t)
    assert b.shape == (0, 3) and b.dtype == np.int64


@pytest.mark.numpy_min("2.1")
def test_array_interface_to_numpy():
    a = sample(np.int32, (4, 5))[:, ::2]
    t = ds.from_dlpack(a)
    ai = t.__array_interface__
    assert ai["version"] == 3
    assert ai["shape"] == a.shape
    assert ai["data"][0] == a.ctypes.data
    assert ai["data"][1] is False
    b = np.asarray(t)
    np.testing.assert_array_equal(b, a)
    assert b.ctypes.data == a.ctypes.data
    b[0, 0] = -5
    assert a[0, 0] == -5


@pytest.mark.numpy_min("2.1")
def test_array_interface_read_only():
    a = sample(np.float32)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    assert t.__array_interface__["data"][1] is True
    b = np.asarray(t)
    assert not b.flags.writeable
    np.testing.assert_array_equal(b, a)


# ---------------------------------------------------------------------------
# read-only
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_read_only_numpy_stays_read_only():
    a = sample(np.float64)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    assert t.readonly
    cap = t.__dlpack__(max_version=(1, 3))
    assert P.describe_capsule(cap)["flags"] & P.FLAG_READ_ONLY
    b = np.from_dlpack(t)
    assert not b.flags.writeable
    with pytest.raises(ValueError):
        b[0, 0] = 1
    with pytest.raises(BufferError):
        t.__dlpack__()      # the legacy ABI cannot carry READ_ONLY


def test_read_only_shim_refused_by_legacy_consumer():
    """JAX-style consumers (no max_version) cannot get read-only data."""
    t = ds.from_dlpack(b"abcdef")
    assert t.readonly
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=None)


@pytest.mark.numpy_min("2.1")
def test_numpy_legacy_capsule_import_is_read_only_in_shim():
    """A legacy capsule says nothing of writability: dlpackshim never grants
    write access its source did not grant (NumPy >= 2.3 does the same)."""
    a = sample(np.int16)
    t = ds.from_dlpack(LegacyWrap(a))
    assert t.dlpack_version is None
    assert t.readonly
    assert t.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)       # NumPy asks the shim for a versioned capsule: READ_ONLY
    assert not b.flags.writeable
    assert np.array_equal(b, a)


def test_numpy_imports_legacy_capsules_read_only():
    """NumPy >= 2.3 marks legacy imports read-only (documented NumPy behaviour)."""
    a = sample(np.int16)
    t = ds.from_dlpack(a)
    b = np.from_dlpack(LegacyWrap(t))
    assert b.ctypes.data == a.ctypes.data
    if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 3):
        assert not b.flags.writeable


# ---------------------------------------------------------------------------
# copies
# ---------------------------------------------------------------------------
def test_from_dlpack_copy_True_from_numpy():
    a = sample(np.float32)[:, ::-1]
    t = ds.from_dlpack(a, copy=True)
    assert t.is_copied
    assert not t.readonly
    assert t.data_ptr != a.ctypes.data
    assert t.tobytes() == a.tobytes()
    a[...] = 0
    assert t.tobytes() != a.tobytes()


@pytest.mark.numpy_min("2.1")
def test_numpy_from_dlpack_copy_True_from_shim():
    a = sample(np.int64)
    t = ds.from_dlpack(a)
    b = np.from_dlpack(t, copy=True)
    assert b.ctypes.data != a.ctypes.data
    assert b.flags.writeable
    np.testing.assert_array_equal(a, b)
    b[0, 0] = -1
    assert a[0, 0] != -1


@pytest.mark.numpy_min("2.1")
def test_shim_copy_of_read_only_numpy_is_writable_copy():
    a = sample(np.int64)
    a.flags.writeable = False
    t = ds.from_dlpack(a, copy=True)
    assert t.is_copied and not t.readonly
    b = np.from_dlpack(t)
    assert b.flags.writeable
    np.testing.assert_array_equal(a, b)


@pytest.mark.numpy_min("2.1")
def test_copy_False_from_numpy_is_zero_copy():
    a = sample(np.float32)
    t = ds.from_dlpack(a, copy=False)
    assert t.data_ptr == a.ctypes.data and not t.is_copied
    b = np.from_dlpack(t, copy=False)
    assert b.ctypes.data == a.ctypes.data


@pytest.mark.numpy_min("2.1")
def test_device_cpu_keyword():
    a = sample(np.float32)
    t = ds.from_dlpack(a, device=(1, 0))
    assert t.device == (1, 0)
    b = np.from_dlpack(t, device="cpu")
    assert b.ctypes.data == a.ctypes.data


# ---------------------------------------------------------------------------
# lifetime and reference counts
# ---------------------------------------------------------------------------
def test_delete_numpy_first_shim_still_reads_right():
    a = sample(np.float64, (50, 20))
    expect = a.tobytes()
    t = ds.from_dlpack(a)
    del a
    collect()
    junk = [np.full((50, 20), -1.0) for _ in range(5)]  # noqa: F841
    assert t.tobytes() == expect
    b = np.from_dlpack(t)
    t.close()
    assert b.tobytes() == expect


@pytest.mark.numpy_min("2.1")
def test_refcount_returns_to_baseline():
    a = sample(np.float32)
    base = sys.getrefcount(a)
    t = ds.from_dlpack(a)
    exports = [np.from_dlpack(t), np.asarray(t), t.__dlpack__(max_version=(1, 3)),
               t.__dlpack__(), ds.from_dlpack(t), np.from_dlpack(t, copy=True)]
    assert sys.getrefcount(a) > base
    t.close()
    assert sys.getrefcount(a) > base, "live exports keep the source alive"
    del exports, t
    collect()
    assert sys.getrefcount(a) == base


def test_refcount_after_copy_import():
    a = sample(np.float32)
    base = sys.getrefcount(a)
    t = ds.from_dlpack(a, copy=True)
    collect()
    assert sys.getrefcount(a) == base, "a copy must not keep the source"
    del t


def test_refcount_after_rejected_export():
    """NumPy refuses bfloat16: the shim's export must still be released."""
    buf = np.zeros(8, dtype=np.uint16)
    base = sys.getrefcount(buf)
    t = ds.from_pointer(buf.ctypes.data, (8,), "bfloat16", owner=buf)
    with pytest.raises((RuntimeError, BufferError)):
        np.from_dlpack(t)
    t.close()
    del t
    collect()
    assert sys.getrefcount(buf) == base


# ---------------------------------------------------------------------------
# what NumPy rejects
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2", (2, 32, 2), (5, 32, 1)],
                         ids=str)
def test_numpy_rejects_dtypes_it_lacks(dtype):
    buf = np.zeros(16, dtype=np.uint64)
    t = ds.from_pointer(buf.ctypes.data, (4,), dtype, owner=buf)
    with pytest.raises((RuntimeError, BufferError)):
        np.from_dlpack(t)


@pytest.mark.numpy_min("2.1")
def test_numpy_refusing_to_export_propagates_BufferError():
    """ndarray.__dlpack__ raises BufferError for non-native byte order; the
    standard says from_dlpack must propagate it."""
    a = np.arange(4, dtype=">i4")
    with pytest.raises(BufferError):
        a.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError):
        ds.from_dlpack(a)


def test_ml_dtypes_bfloat16_numpy_array():
    ml = pytest.importorskip("ml_dtypes")
    a = np.arange(4).astype(ml.bfloat16)
    with pytest.raises(BufferError):
        a.__dlpack__(max_version=(1, 0))   # NumPy itself refuses
    with pytest.raises(BufferError):
        ds.from_dlpack(a)


def test_numpy_stream_rule():
    """NumPy raises RuntimeError for a stream on CPU (ValueError from NumPy 2.5 on);
    dlpackshim raises ValueError."""
    a = np.zeros(3)
    numpy_raises = (ValueError if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 5)
                    else RuntimeError)
    with pytest.raises(numpy_raises):
        a.__dlpack__(stream=1)
    with pytest.raises(ValueError):
        ds.from_dlpack(a).__dlpack__(stream=1)


# ---------------------------------------------------------------------------
# buffer protocol and __array_interface__ sources, read by NumPy
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_bytes_read_only():
    data = b"hello world!"
    t = ds.from_dlpack(data)
    assert t.readonly and t.dtype == "uint8" and t.shape == (12,)
    assert t.tobytes() == data
    b = np.from_dlpack(t)
    assert not b.flags.writeable
    assert b.tobytes() == data


@pytest.mark.numpy_min("2.1")
def test_bytearray_writable_shared():
    ba = bytearray(b"\x00" * 8)
    t = ds.from_dlpack(ba)
    assert not t.readonly and t.shape == (8,) and t.dtype == "uint8"
    b = np.from_dlpack(t)
    b[3] = 200
    assert ba[3] == 200
    assert t.data_ptr == b.ctypes.data


def test_memoryview_cast_2d_and_strided():
    ba = bytearray(np.arange(12, dtype=np.float32).tobytes())
    mv = memoryview(ba).cast("B").cast("f", (3, 4))
    t = ds.from_dlpack(mv)
    assert t.shape == (3, 4) and t.dtype == "float32" and t.strides == (4, 1)
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(12, dtype=np.float32).reshape(3, 4))
    src = np.arange(10, dtype=np.int64)
    mv2 = memoryview(src)[::3]
    t2 = ds.from_dlpack(mv2)
    assert t2.shape == (4,) and t2.strides == (3,) and t2.dtype == "int64"
    assert np.from_dlpack(t2).tolist() == [0, 3, 6, 9]


@pytest.mark.numpy_min("2.1")
def test_memoryview_read_only_stays_read_only():
    src = np.arange(6, dtype=np.int16)
    mv = memoryview(src).toreadonly()
    t = ds.from_dlpack(mv)
    assert t.readonly
    assert not np.from_dlpack(t).flags.writeable


@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("code,npdt", [("d", np.float64), ("f", np.float32), ("i", np.intc),
                                       ("b", np.int8), ("B", np.uint8), ("q", np.int64),
                                       ("H", np.uint16)])
def test_array_array(code, npdt):
    arr = array.array(code, [1, 2, 3, 4])
    t = ds.from_dlpack(arr)
    assert t.shape == (4,) and not t.readonly
    b = np.from_dlpack(t)
    assert b.dtype == np.dtype(npdt)
    assert b.tolist() == [1, 2, 3, 4]
    b[0] = 9
    assert arr[0] == 9


@pytest.mark.parametrize("ctype,npdt", [(ctypes.c_int32, np.int32), (ctypes.c_double, np.float64),
                                        (ctypes.c_uint16, np.uint16), (ctypes.c_int8, np.int8),
                                        (ctypes.c_float, np.float32), (ctypes.c_bool, np.bool_)])
def test_ctypes_array(ctype, npdt):
    arr = (ctype * 6)(*([1] * 6))
    t = ds.from_dlpack(arr)
    assert t.shape == (6,)
    assert t.data_ptr == ctypes.addressof(arr)
    b = np.from_dlpack(t)
    assert b.dtype == np.dtype(npdt)
    assert b.tolist() == [1] * 6 or b.tolist() == [True] * 6


def test_ctypes_2d_array():
    arr = ((ctypes.c_int16 * 3) * 2)((1, 2, 3), (4, 5, 6))
    t = ds.from_dlpack(arr)
    assert t.shape == (2, 3) and t.dtype == "int16"
    assert np.from_dlpack(t).tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.mark.numpy_min("2.1")
def test_mmap_writable_and_released():
    m = mmap.mmap(-1, 4096)
    t = ds.from_dlpack(m)
    assert t.shape == (4096,) and not t.readonly
    b = np.from_dlpack(t)
    b[10] = 42
    assert m[10] == 42
    with pytest.raises(BufferError):
        m.close()   # still exported
    del b
    t.close()
    del t
    collect()
    m.close()


def test_mmap_read_only():
    import tempfile
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 100)
        f.flush()
        m = mmap.mmap(f.fileno(), 100, access=mmap.ACCESS_READ)
        t = ds.from_dlpack(m)
        assert t.readonly
        assert t.tobytes() == b"x" * 100
        t.close()
        del t
        collect()
        m.close()


class ArrayInterface:
    def __init__(self, a, readonly=False, strides=None, version=3):
        self.a = a
        self.__array_interface__ = {
            "shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, readonly),
            "strides": strides, "version": version,
        }


def test_array_interface_v3_object():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    obj = ArrayInterface(a)
    t = ds.from_dlpack(obj)
    assert t.shape == (3, 4) and t.dtype == "float32" and t.strides == (4, 1)
    assert t.data_ptr == a.ctypes.data and not t.readonly
    np.testing.assert_array_equal(np.from_dlpack(t), a)


@pytest.mark.numpy_min("2.1")
def test_array_interface_v3_strided_read_only():
    base = np.arange(24, dtype=np.int64)
    v = base[::-2]
    obj = ArrayInterface(v, readonly=True, strides=v.strides)
    t = ds.from_dlpack(obj)
    assert t.readonly and t.strides == (-2,)
    assert t.data_ptr == v.ctypes.data
    assert np.from_dlpack(t).tolist() == v.tolist()


@pytest.mark.parametrize("typestr,name", [("|b1", "bool"), ("<c8", "complex64"), ("<f2", "float16"),
                                          ("|u1", "uint8"), ("<i8", "int64")])
def test_array_interface_typestr(typestr, name):
    a = np.zeros(4, dtype=np.dtype(typestr))
    t = ds.from_dlpack(ArrayInterface(a))
    assert t.dtype == name
    assert np.from_dlpack(t).dtype == a.dtype


def test_array_interface_keeps_its_object_alive():
    a = np.arange(5.0)
    obj = ArrayInterface(a)
    base = sys.getrefcount(obj)
    t = ds.from_dlpack(obj)
    assert sys.getrefcount(obj) > base
    del t
    collect()
    assert sys.getrefcount(obj) == base


# ---------------------------------------------------------------------------
# producers independent of both (ctypes) read by NumPy through the shim
# ---------------------------------------------------------------------------
def test_ctypes_producer_through_shim_to_numpy_byte_offset():
    a = np.arange(20, dtype=np.int32)
    p = P.VersionedProducer(data=a, shape=(2, 3), strides=(5, 1), dtype=(0, 32, 1), byte_offset=12)
    t = ds.from_dlpack(p)
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data + 12
    assert b.tolist() == [[3, 4, 5], [8, 9, 10]]
    del b
    t.close()
    collect()
    assert p.deleter_calls == 1
