"""PyTorch <-> dlpackshim, both directions (CPU).

Behaviour of PyTorch 2.13 (CPU) used here, checked by experiment:
- Tensor.__dlpack__(max_version=(1, 3)) exports version (1, 3); with no
  max_version a legacy "dltensor". A list max_version is accepted (no TypeError).
- Exports every dtype incl. bool (6, 8, 1), bfloat16 (4, 16, 1), complex32
  (5, 32, 1), float8 e4m3fn/e5m2/e4m3fnuz/e5m2fnuz/e8m0fnu (codes 10-14) and
  float4_e2m1fn_x2 as (17, 4, 2). Quantized dtypes, requires_grad and
  conjugate-bit tensors -> BufferError.
- Storage offsets go into `data` (byte_offset 0); zero-size tensors have
  data NULL; expanded dims have stride 0.
- copy=True gives a fresh buffer but does NOT set IS_COPIED (off-spec).
- stream=1 on CPU -> AssertionError; dl_device=(2, 0) -> NotImplementedError.
- torch.from_dlpack sends max_version=(1, 0) (and stream=None on CPU); it
  ignores READ_ONLY (imports writable: PyTorch has no read-only tensors),
  honours byte_offset, accepts NULL strides, zero strides; rejects codes 7, 8,
  9, 15, 16, lanes != 1, int4 (BufferError); aborts the process
  (c10::Error, "Storage size calculation overflowed") on NEGATIVE strides, so
  no negative-stride tensor is ever handed to torch here.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
import dlpackshim as ds  # noqa: E402


def _dt(name):
    return getattr(torch, name, None)


# (torch dtype name, shim name, (code, bits, lanes))
DTYPES = [
    ("bool", "bool", (6, 8, 1)),
    ("uint8", "uint8", (1, 8, 1)),
    ("int8", "int8", (0, 8, 1)),
    ("int16", "int16", (0, 16, 1)),
    ("int32", "int32", (0, 32, 1)),
    ("int64", "int64", (0, 64, 1)),
    ("uint16", "uint16", (1, 16, 1)),
    ("uint32", "uint32", (1, 32, 1)),
    ("uint64", "uint64", (1, 64, 1)),
    ("float16", "float16", (2, 16, 1)),
    ("bfloat16", "bfloat16", (4, 16, 1)),
    ("float32", "float32", (2, 32, 1)),
    ("float64", "float64", (2, 64, 1)),
    ("complex32", "complex32", (5, 32, 1)),
    ("complex64", "complex64", (5, 64, 1)),
    ("complex128", "complex128", (5, 128, 1)),
    ("float8_e4m3fn", "float8_e4m3fn", (10, 8, 1)),
    ("float8_e4m3fnuz", "float8_e4m3fnuz", (11, 8, 1)),
    ("float8_e5m2", "float8_e5m2", (12, 8, 1)),
    ("float8_e5m2fnuz", "float8_e5m2fnuz", (13, 8, 1)),
    ("float8_e8m0fnu", "float8_e8m0fnu", (14, 8, 1)),
]
DTYPES = [d for d in DTYPES if _dt(d[0]) is not None]


def make(tname, shape=(3, 4)):
    """A tensor of that dtype with distinct bytes per element."""
    dt = _dt(tname)
    n = 1
    for s in shape:
        n *= s
    itemsize = torch.empty((), dtype=dt).element_size()
    raw = torch.arange(n * itemsize, dtype=torch.int64).remainder(97).add(1).to(torch.uint8)
    if tname == "bool":
        return (torch.arange(n) % 3 == 0).reshape(shape)
    return raw.view(dt).reshape(shape).clone()


def raw_bytes(x):
    """C-order bytes of a tensor of any dtype."""
    x = x.contiguous()
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    return x.reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""


class LegacyWrap:
    def __init__(self, x):
        self.x = x

    def __dlpack__(self, stream=None):
        return self.x.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


# ---------------------------------------------------------------------------
# dtypes, both directions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("tname,name,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_torch_to_shim_every_dtype(tname, name, code):
    x = make(tname)
    t = ds.from_dlpack(x)
    assert t.dtype == code
    assert t.dtype == name
    assert t.shape == (3, 4) and t.strides == tuple(x.stride())
    assert t.data_ptr == x.data_ptr()
    assert t.device == (1, 0)
    assert not t.readonly
    assert t.dlpack_version == (1, 3)
    assert t.nbytes == x.numel() * x.element_size()
    assert t.tobytes() == raw_bytes(x)


@pytest.mark.parametrize("tname,name,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_shim_to_torch_every_dtype(tname, name, code):
    x = make(tname)
    t = ds.from_pointer(x.data_ptr(), tuple(x.shape), name, owner=x)
    y = torch.from_dlpack(t)
    assert y.dtype == _dt(tname)
    assert tuple(y.shape) == (3, 4) and y.stride() == x.stride()
    assert y.data_ptr() == x.data_ptr()
    assert raw_bytes(y) == raw_bytes(x)


@pytest.mark.parametrize("tname,name,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_round_trip_torch_shim_torch_every_dtype(tname, name, code):
    x = make(tname, (6,))
    y = torch.from_dlpack(ds.from_dlpack(x))
    assert y.dtype == x.dtype
    assert y.data_ptr() == x.data_ptr()
    assert raw_bytes(y) == raw_bytes(x)
    y[1] = y[0]
    assert raw_bytes(x[1:2]) == raw_bytes(x[0:1])


def test_float4_e2m1fn_x2_export():
    """PyTorch exports float4_e2m1fn_x2 as (17, 4, 2): two fp4 per byte. The
    shim must either import it with one byte per element or refuse it with
    BufferError - never misjudge its size."""
    dt = _dt("float4_e2m1fn_x2")
    if dt is None:
        pytest.skip("no float4_e2m1fn_x2 in this torch")
    x = torch.arange(6, dtype=torch.uint8).view(dt)
    try:
        t = ds.from_dlpack(x)
    except BufferError:
        return
    assert t.dtype == (17, 4, 2)
    assert t.shape == (6,)
    assert t.nbytes == 6
    assert t.tobytes() == bytes(range(6))


# ---------------------------------------------------------------------------
# views
# ---------------------------------------------------------------------------
_BASE = torch.arange(60, dtype=torch.float32).reshape(6, 10)
VIEWS = {
    "contiguous": lambda: _BASE.clone(),
    "transposed": lambda: _BASE.clone().t(),
    "stepped": lambda: _BASE.clone()[::2, ::3],
    "offset": lambda: _BASE.clone()[2:, 3:],
    "offset_1d": lambda: torch.arange(20, dtype=torch.int64)[7:],
    "permuted_3d": lambda: torch.arange(24, dtype=torch.int16).reshape(2, 3, 4).permute(2, 0, 1),
    "expanded": lambda: torch.arange(3.0).expand(4, 3),
    "unsqueezed": lambda: torch.arange(5.0).unsqueeze(0).unsqueeze(-1),
    "0d": lambda: torch.tensor(3.5),
    "zero_size": lambda: torch.zeros(0, 3),
    "zero_size_view": lambda: _BASE.clone()[:, 4:4],
    "narrow_complex": lambda: (torch.arange(12.0) + 1j).reshape(3, 4)[:, 1:3],
}


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
def test_torch_view_to_shim_and_back(view):
    v = VIEWS[view]()
    t = ds.from_dlpack(v)
    assert t.shape == tuple(v.shape)
    assert t.size == v.numel()
    assert t.tobytes() == raw_bytes(v)
    if v.numel():
        assert t.strides == tuple(v.stride())
        assert t.data_ptr == v.data_ptr()
    y = torch.from_dlpack(t)
    assert tuple(y.shape) == tuple(v.shape) and y.dtype == v.dtype
    assert torch.equal(y, v)
    if v.numel():
        assert y.data_ptr() == v.data_ptr()
        assert y.stride() == v.stride()
    if v.numel() and view != "expanded":
        idx = (0,) * v.dim()
        y[idx] = 42
        assert v[idx].item() == 42
        assert t.tobytes() == raw_bytes(v)


def test_storage_offset_goes_into_data_ptr():
    x = torch.arange(60, dtype=torch.float64).reshape(6, 10)
    v = x[2:, 3:]
    t = ds.from_dlpack(v)
    assert t.data_ptr == x.data_ptr() + (2 * 10 + 3) * 8
    y = torch.from_dlpack(t)
    assert y.data_ptr() == t.data_ptr
    assert torch.equal(y, v)


def test_byte_offset_producer_through_shim_to_torch():
    """A byte_offset from a producer must survive the shim's re-export."""
    a = np.arange(20, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(2, 3), strides=(5, 1), byte_offset=8)
    t = ds.from_dlpack(p)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == a.ctypes.data + 8
    assert y.tolist() == [[2, 3, 4], [7, 8, 9]]
    del y
    t.close()
    collect()
    assert p.deleter_calls == 1


def test_zero_d_and_zero_size():
    t = ds.from_dlpack(torch.tensor(7, dtype=torch.int32))
    assert t.shape == () and t.ndim == 0 and t.size == 1
    assert torch.from_dlpack(t).item() == 7
    z = ds.from_dlpack(torch.zeros(0, 4, dtype=torch.float16))
    assert z.shape == (0, 4) and z.size == 0 and z.tobytes() == b""
    y = torch.from_dlpack(z)
    assert tuple(y.shape) == (0, 4) and y.dtype == torch.float16


# ---------------------------------------------------------------------------
# writes, copies, read-only
# ---------------------------------------------------------------------------
def test_writes_visible_both_ways():
    x = torch.zeros(4, 4)
    t = ds.from_dlpack(x)
    a = np.from_dlpack(t)
    x[1, 2] = 5
    assert a[1, 2] == 5
    a[3, 3] = 9
    assert x[3, 3].item() == 9
    y = torch.from_dlpack(t)
    y[0, 0] = -1
    assert x[0, 0].item() == -1


def test_from_dlpack_copy_True_from_torch():
    x = torch.arange(6.0)
    t = ds.from_dlpack(x, copy=True)
    assert t.data_ptr != x.data_ptr()
    assert t.tobytes() == raw_bytes(x)
    x.zero_()
    assert t.tobytes() != raw_bytes(x)
    assert not t.readonly
    # PyTorch copies but does not set IS_COPIED; the result is a copy all the same
    assert t.is_copied


def test_torch_from_dlpack_copy_True_from_shim():
    x = torch.arange(6.0)
    t = ds.from_dlpack(x)
    try:
        y = torch.from_dlpack(t, copy=True)
    except TypeError:
        pytest.skip("torch.from_dlpack has no copy keyword")
    assert y.data_ptr() != x.data_ptr()
    assert torch.equal(x, y)
    y[0] = 100
    assert x[0].item() == 0


def test_torch_ignores_read_only_flag():
    """Documented PyTorch behaviour: it has no read-only tensors and imports a
    READ_ONLY capsule as a normal tensor. The shim still marks the export."""
    a = np.arange(4.0)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    cap = t.__dlpack__(max_version=(1, 3))
    assert P.describe_capsule(cap)["flags"] & P.FLAG_READ_ONLY
    y = torch.from_dlpack(t)
    assert y.data_ptr() == a.ctypes.data
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_torch_legacy_capsule_import():
    x = torch.arange(5, dtype=torch.int32)
    t = ds.from_dlpack(LegacyWrap(x))
    assert t.dlpack_version is None
    assert t.readonly  # legacy: writability unknown, never granted
    assert t.data_ptr == x.data_ptr()
    assert t.tobytes() == raw_bytes(x)


def test_torch_versioned_export_flags_from_shim_view():
    x = torch.arange(5, dtype=torch.int32)
    t = ds.from_dlpack(x)
    d = P.describe_capsule(t.__dlpack__(max_version=(1, 3)))
    assert d["flags"] & (P.FLAG_READ_ONLY | P.FLAG_IS_COPIED) == 0
    assert d["data"] + d["byte_offset"] == x.data_ptr()


def test_torch_export_errors_propagate():
    x = torch.zeros(3, requires_grad=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(x)
    c = torch.zeros(3, dtype=torch.complex64).conj()
    with pytest.raises(BufferError):
        ds.from_dlpack(c)


def test_torch_rejects_what_it_lacks():
    buf = np.zeros(8, dtype=np.uint8)
    for dtype in ["float8_e3m4", "float6_e2m3fn", (2, 32, 2)]:
        try:
            t = ds.from_pointer(buf.ctypes.data, (4,) if dtype != "float6_e2m3fn" else (1,),
                                dtype, owner=buf)
        except (ValueError, TypeError, BufferError):
            continue
        with pytest.raises((BufferError, RuntimeError)):
            torch.from_dlpack(t)


# ---------------------------------------------------------------------------
# lifetime
# ---------------------------------------------------------------------------
def test_delete_torch_first_shim_still_reads_right():
    x = torch.arange(1000, dtype=torch.float64) * 2
    expect = raw_bytes(x)
    t = ds.from_dlpack(x)
    del x
    collect()
    junk = [torch.full((1000,), -1.0, dtype=torch.float64) for _ in range(5)]  # noqa: F841
    assert t.tobytes() == expect


def test_shim_closed_torch_view_still_reads_right():
    a = np.arange(100, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(100,))
    t = ds.from_dlpack(p)
    y = torch.from_dlpack(t)
    t.close()
    del t
    collect()
    assert p.deleter_calls == 0
    assert y.sum().item() == float(a.sum())
    del y
    collect()
    assert p.deleter_calls == 1


def test_torch_refcount_returns_to_baseline():
    x = torch.arange(12.0).reshape(3, 4)
    base = sys.getrefcount(x)
    t = ds.from_dlpack(x)
    y = torch.from_dlpack(t)
    cap = t.__dlpack__(max_version=(1, 3))
    t2 = ds.from_dlpack(cap)
    del y, cap, t2, t
    collect()
    assert sys.getrefcount(x) == base


def test_numpy_source_refcount_through_torch():
    a = np.arange(12.0)
    base = sys.getrefcount(a)
    t = ds.from_dlpack(a)
    y = torch.from_dlpack(t)
    z = ds.from_dlpack(y)
    del t, y
    collect()
    assert sys.getrefcount(a) > base
    assert z.tobytes() == a.tobytes()
    del z
    collect()
    assert sys.getrefcount(a) == base
