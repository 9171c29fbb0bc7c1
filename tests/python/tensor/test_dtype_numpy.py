"""DType beside NumPy's dtypes: equality and hashing agree, conversion both ways,
comparisons as a NumPy user writes them, and no NumPy import until one is needed."""

from __future__ import annotations

import pickle

import pytest

import dlpackshim as ds
from conftest import run_python
from dlpackshim import DType

# NumPy's own scalar types with a DLPack twin: (NumPy name, DLPack fields).
NUMPY_TWINS = [
    ("bool", (6, 8, 1)), ("int8", (0, 8, 1)), ("int16", (0, 16, 1)), ("int32", (0, 32, 1)),
    ("int64", (0, 64, 1)), ("uint8", (1, 8, 1)), ("uint16", (1, 16, 1)),
    ("uint32", (1, 32, 1)), ("uint64", (1, 64, 1)), ("float16", (2, 16, 1)),
    ("float32", (2, 32, 1)), ("float64", (2, 64, 1)), ("complex64", (5, 64, 1)),
    ("complex128", (5, 128, 1)),
]
# ml_dtypes' types, named as DLPack names them.
ML_DTYPES_TWINS = ["bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
                   "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                   "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
                   "int4", "uint4", "int2", "uint2"]


@pytest.mark.parametrize("name", ["float32", "bool", "bfloat16", "int4", "float32x4",
                                  "dtype6_1", "bcomplex32"])
def test_a_dtype_and_its_name_are_one_key(name):
    dt = DType(name)
    assert dt == name and name == dt and hash(dt) == hash(name)
    assert dt in {name} and name in {dt}
    assert {dt: 1}[name] == 1 and {name: 1}[dt] == 1


def test_a_dtype_equals_its_fields_and_unpacks_as_them():
    dt = DType(2, 32, 1)
    assert dt == (2, 32, 1) and dt != (2, 32) and dt != (2, 64, 1)
    code, bits, lanes = dt
    assert (code, bits, lanes) == (ds.DTypeCode.kDLFloat, 32, 1) and dt[1] == 32 and len(dt) == 3
    assert dt._replace(bits=64) == "float64" and type(dt._replace(bits=64)) is DType


def test_a_dtype_is_a_value():
    dt = DType("float8_e4m3fn")
    assert pickle.loads(pickle.dumps(dt)) == dt
    with pytest.raises(AttributeError):
        dt.bits = 16
    assert dt != object() and dt != 32 and dt != "float8"


@pytest.mark.parametrize("fields, error", [((2, 0, 1), ValueError), ((256, 8, 1), ValueError),
                                           ((2, 32, 0), ValueError), ((2, 32, 65536), ValueError),
                                           ((2, "32", 1), TypeError), ((2.0, 32, 1), TypeError)])
def test_fields_outside_dldatatype_are_refused(fields, error):
    with pytest.raises(error):
        DType(*fields)


@pytest.mark.parametrize("name, fields", NUMPY_TWINS)
def test_numpy_dtype_of_a_tensor_dtype(np, name, fields):
    a = np.zeros(3, dtype=name)
    t = ds.from_dlpack(a)
    assert np.dtype(t.dtype) == a.dtype
    assert np.zeros(2, dtype=t.dtype).dtype == a.dtype    # NumPy's dtype= arguments too
    assert t.dtype.to_numpy() == a.dtype and DType.from_numpy(a.dtype) == t.dtype == fields


@pytest.mark.parametrize("name, fields", NUMPY_TWINS)
def test_compares_as_a_numpy_user_expects(np, name, fields):
    dt = DType(*fields)
    scalar_type = np.dtype(name).type
    assert dt == scalar_type and scalar_type == dt
    assert dt == np.dtype(name) and np.dtype(name) == dt
    assert not (dt != np.dtype(name)) and not (np.dtype(name) != dt)
    other = "float32" if name != "float32" else "int32"
    assert dt != np.dtype(other) and np.dtype(other) != dt and dt != np.dtype(other).type


def test_numpy_dtypes_and_scalar_types_are_accepted_where_dtypes_are(np):
    a = np.arange(6, dtype=np.int16)
    for spelling in (np.int16, np.dtype("int16"), np.dtype("<i2")):
        t = ds.from_pointer(a.ctypes.data, (2, 3), spelling, owner=a)
        assert t.dtype == "int16" and np.from_dlpack(t).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert DType.from_numpy("f4") == "float32"


@pytest.mark.parametrize("name", ML_DTYPES_TWINS)
def test_ml_dtypes_types_convert_both_ways(np, name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    theirs = getattr(ml_dtypes, name, None)
    if theirs is None:
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    dt = DType(name)
    assert DType.from_numpy(theirs) == dt and dt.to_numpy() == np.dtype(theirs)
    assert dt == theirs and dt == np.dtype(theirs) and np.dtype(dt) == np.dtype(theirs)


@pytest.mark.parametrize("spelling", [">f4", "float128", "V8", "O", "U3", "M8[ns]",
                                      [("a", "f4")], ("f4", (2,))])
def test_numpy_types_without_a_dlpack_twin_are_value_errors(np, spelling):
    npdt = np.dtype(spelling)
    if spelling == "float128" and npdt.itemsize <= 8:
        pytest.skip("long double is double here")
    with pytest.raises(ValueError, match="no DLPack equivalent"):
        DType.from_numpy(npdt)
    with pytest.raises(ValueError, match="no DLPack equivalent"):
        ds.from_pointer(8, (1,), npdt)
    assert all(DType(*f) != npdt for _, f in NUMPY_TWINS)   # equal to none, no error


@pytest.mark.parametrize("name", ["float32x4", "dtype6_1", "opaque64", "float128"])
def test_dlpack_types_without_a_numpy_twin_are_value_errors(np, name):
    dt = DType(name)
    with pytest.raises(ValueError, match="NumPy has no dtype"):
        dt.to_numpy()
    with pytest.raises(TypeError):
        np.dtype(dt)
    assert not hasattr(dt, "dtype")


def test_numpy_is_not_imported_until_a_conversion_needs_it(np):
    code = """if True:
        import sys
        import dlpackshim as ds
        t = ds.from_dlpack(bytearray(8))
        dt = ds.DType("float32")
        assert t.dtype == "uint8" and t.dtype != dt and dt in {"float32"} and dt == (2, 32, 1)
        assert ds.from_pointer(t.data_ptr, (2,), "float32", owner=t).dtype == dt
        assert not hasattr(dt, "dtype") and dt != object()
        assert "numpy" not in sys.modules, "imported NumPy"
        dt.to_numpy()
        assert "numpy" in sys.modules
        print("ok")
    """
    r = run_python("-c", code)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr
