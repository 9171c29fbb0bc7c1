"""JAX <-> dlpackshim, both directions (CPU backend).

Behaviour of JAX 0.10 (CPU) used here, checked by experiment:
- jax.Array.__dlpack__ accepts the 2023.12 keywords but always returns a
  legacy "dltensor" capsule (even for max_version=(1, 3)); bool (6, 8, 1),
  bfloat16 (4, 16, 1), float8 codes 7-14, float4_e2m1fn as (17, 4, 1) whose
  memory is one byte per element (unpacked, though DLPack's default for
  sub-byte types is packed and a legacy capsule cannot say "padded");
  int4/uint4 are refused (JaxRuntimeError "has no DLPack equivalent").
- jax.dlpack.from_dlpack(x) calls x.__dlpack__(stream=None, max_version=None,
  dl_device=None, copy=None): it always asks for the LEGACY ABI, so read-only
  data cannot reach JAX (the producer must refuse with BufferError).
- It is zero-copy only for data aligned to 64 bytes (else it copies);
  accepts transposed (permuted compact) layouts, NULL strides, 0-d and
  zero-size; refuses non-compact strides (steps, negative, broadcast) with
  JaxRuntimeError UNIMPLEMENTED; refuses codes 15, 16 and packed fp4.
- jnp.from_dlpack(x, copy=True) does not pass copy to the producer.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")
np = pytest.importorskip("numpy")
import dlpackshim as ds  # noqa: E402

jax.config.update("jax_enable_x64", True)
try:
    jax.config.update("jax_platforms", "cpu")   # host memory only in this file
except Exception:  # pragma: no cover - backends already initialised
    pass


# (numpy/ml_dtypes dtype name, shim name, code)
DTYPES = [
    ("bool", "bool", (6, 8, 1)),
    ("int8", "int8", (0, 8, 1)),
    ("int16", "int16", (0, 16, 1)),
    ("int32", "int32", (0, 32, 1)),
    ("int64", "int64", (0, 64, 1)),
    ("uint8", "uint8", (1, 8, 1)),
    ("uint16", "uint16", (1, 16, 1)),
    ("uint32", "uint32", (1, 32, 1)),
    ("uint64", "uint64", (1, 64, 1)),
    ("float16", "float16", (2, 16, 1)),
    ("float32", "float32", (2, 32, 1)),
    ("float64", "float64", (2, 64, 1)),
    ("complex64", "complex64", (5, 64, 1)),
    ("complex128", "complex128", (5, 128, 1)),
    ("bfloat16", "bfloat16", (4, 16, 1)),
    ("float8_e3m4", "float8_e3m4", (7, 8, 1)),
    ("float8_e4m3", "float8_e4m3", (8, 8, 1)),
    ("float8_e4m3b11fnuz", "float8_e4m3b11fnuz", (9, 8, 1)),
    ("float8_e4m3fn", "float8_e4m3fn", (10, 8, 1)),
    ("float8_e4m3fnuz", "float8_e4m3fnuz", (11, 8, 1)),
    ("float8_e5m2", "float8_e5m2", (12, 8, 1)),
    ("float8_e5m2fnuz", "float8_e5m2fnuz", (13, 8, 1)),
    ("float8_e8m0fnu", "float8_e8m0fnu", (14, 8, 1)),
]


def np_dtype(name):
    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


DTYPES = [d for d in DTYPES if hasattr(jnp, d[0])]


def host_sample(name, shape=(3, 4)):
    """A NumPy array of that dtype with distinct, valid bit patterns."""
    dt = np_dtype(name)
    n = int(np.prod(shape))
    if dt == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    if dt.kind in "iu":
        return (np.arange(n) % 100 + 1).astype(dt).reshape(shape)
    return (np.arange(n) % 7 * 0.5 + 0.25).astype(np.float32).astype(dt).reshape(shape)


def aligned_copy(a, align=256):
    """a copied into a buffer whose data pointer is 256-byte aligned."""
    raw = np.empty(a.nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    out = raw[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def raw_bytes(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes() if a.size else b""


def jax_ptr(y):
    return y.unsafe_buffer_pointer()


# ---------------------------------------------------------------------------
# JAX -> shim
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,sname,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_jax_to_shim_every_dtype(name, sname, code):
    h = host_sample(name)
    x = jnp.asarray(h)
    assert x.dtype == h.dtype
    t = ds.from_dlpack(x)
    assert t.dtype == code
    assert t.dtype == sname
    assert t.shape == (3, 4) and t.strides == (4, 1)
    assert t.data_ptr == jax_ptr(x)
    assert t.dlpack_version is None          # JAX only speaks the legacy ABI
    assert t.readonly                        # legacy: writability unknown, never granted
    assert t.tobytes() == raw_bytes(h)


def test_jax_transposed_to_shim():
    x = jnp.arange(12.0).reshape(3, 4).T   # JAX materialises it row-major
    t = ds.from_dlpack(x)
    assert t.shape == (4, 3)
    assert t.tobytes() == raw_bytes(np.asarray(x))


def test_jax_0d_and_zero_size_to_shim():
    t = ds.from_dlpack(jnp.float32(2.5))
    assert t.shape == () and t.ndim == 0 and t.size == 1
    assert t.tobytes() == np.float32(2.5).tobytes()
    z = ds.from_dlpack(jnp.zeros((0, 3)))
    assert z.shape == (0, 3) and z.size == 0 and z.tobytes() == b""


def test_jax_float4_is_read_as_dlpack_says():
    """JAX exports float4_e2m1fn as (17, 4, 1) in a legacy capsule. DLPack
    says sub-byte data is packed unless the (versioned-only) PADDED flag is
    set: the shim must report the packed size, ceil(n / 2) bytes."""
    if not hasattr(jnp, "float4_e2m1fn"):
        pytest.skip("no float4 in this JAX")
    x = jnp.array([0.5, 1, 1.5, 2, 3, 4], dtype=jnp.float4_e2m1fn)
    t = ds.from_dlpack(x)
    assert t.dtype == (17, 4, 1)
    assert t.shape == (6,)
    assert t.nbytes == 3


def test_jax_refuses_int4_export():
    x = jnp.zeros(4, dtype=jnp.int4)
    with pytest.raises(Exception) as ei:
        ds.from_dlpack(x)
    assert "DLPack" in str(ei.value) or isinstance(ei.value, BufferError)


def test_jax_source_deleted_first():
    x = jnp.arange(1000, dtype=jnp.float64) * 3
    expect = raw_bytes(np.asarray(x))
    t = ds.from_dlpack(x)
    del x
    collect()
    junk = [jnp.full((1000,), -1.0) for _ in range(5)]  # noqa: F841
    assert t.tobytes() == expect
    b = np.from_dlpack(t)
    assert b.tobytes() == expect


def test_jax_copy_True_into_shim():
    x = jnp.arange(6, dtype=jnp.int32)
    t = ds.from_dlpack(x, copy=True)
    assert t.data_ptr != jax_ptr(x)
    assert t.tobytes() == raw_bytes(np.asarray(x))
    assert not t.readonly
    assert t.is_copied    # JAX answers with a legacy capsule: no flag, yet a copy


# ---------------------------------------------------------------------------
# shim -> JAX
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,sname,code", DTYPES, ids=[d[0] for d in DTYPES])
def test_shim_to_jax_every_dtype(name, sname, code):
    h = aligned_copy(host_sample(name))
    t = ds.from_pointer(h.ctypes.data, h.shape, sname, owner=h)
    y = jax.dlpack.from_dlpack(t)
    assert y.dtype == h.dtype
    assert y.shape == h.shape
    assert jax_ptr(y) == h.ctypes.data      # aligned: zero-copy
    assert raw_bytes(np.asarray(y)) == raw_bytes(h)


def test_shim_to_jax_unaligned_is_copied_correctly():
    base = aligned_copy(np.arange(20, dtype=np.float32))
    v = base[1:9]                          # 4 bytes past a 256-byte boundary
    t = ds.from_dlpack(v)
    y = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(y), v)


def test_shim_to_jax_transposed():
    h = aligned_copy(np.arange(12, dtype=np.float32).reshape(3, 4))
    t = ds.from_dlpack(h.T)
    assert t.strides == (1, 4)
    y = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(y), h.T)


@pytest.mark.parametrize("view", ["stepped", "negative", "broadcast"])
def test_shim_to_jax_non_compact_is_refused_without_leak(view):
    h = aligned_copy(np.arange(24, dtype=np.float32))
    v = {"stepped": h[::2], "negative": h[::-1],
         "broadcast": np.broadcast_to(h[:4], (3, 4))}[view]
    if view == "broadcast":
        v = v.copy()
        p = P.VersionedProducer(data=h, shape=(3, 4), strides=(0, 1))
        t = ds.from_dlpack(p)
    else:
        t = ds.from_dlpack(v)
        p = None
    base = sys.getrefcount(h)
    with pytest.raises(Exception) as ei:
        jax.dlpack.from_dlpack(t)
    assert "stride" in str(ei.value).lower() or isinstance(ei.value, BufferError)
    del ei
    collect()
    assert sys.getrefcount(h) == base, "the refused export was not released"
    if p is not None:
        t.close()
        collect()
        assert p.deleter_calls == 1


def test_shim_to_jax_0d_and_zero_size():
    h = aligned_copy(np.array([4.5]))[0:1].reshape(())
    y = jax.dlpack.from_dlpack(ds.from_pointer(h.ctypes.data, (), "float64", owner=h))
    assert y.shape == () and float(y) == 4.5
    z = jax.dlpack.from_dlpack(ds.from_dlpack(np.zeros((0, 2), dtype=np.float32)))
    assert z.shape == (0, 2)


def test_shim_read_only_cannot_reach_jax():
    """JAX asks for the legacy ABI, which cannot carry READ_ONLY: refused."""
    h = aligned_copy(np.arange(4.0))
    h.flags.writeable = False
    t = ds.from_dlpack(h)
    assert t.readonly
    with pytest.raises(BufferError):
        jax.dlpack.from_dlpack(t)
    t2 = ds.from_dlpack(b"\x00" * 16)
    with pytest.raises(BufferError):
        jax.dlpack.from_dlpack(t2)


def test_jax_asks_shim_for_legacy_and_gets_it():
    h = aligned_copy(np.arange(8, dtype=np.int32))
    t = ds.from_dlpack(h)
    calls = []

    class Spy:
        def __dlpack__(self, **kw):
            calls.append(kw)
            return t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    y = jax.dlpack.from_dlpack(Spy())
    assert calls and calls[0].get("max_version") is None
    assert jax_ptr(y) == h.ctypes.data
    np.testing.assert_array_equal(np.asarray(y), h)


def test_byte_offset_producer_through_shim_to_jax():
    h = aligned_copy(np.arange(64, dtype=np.float32))
    p = P.VersionedProducer(data=h, shape=(2, 4), dtype=(2, 32, 1), byte_offset=64)
    t = ds.from_dlpack(p)
    y = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(y), h[16:24].reshape(2, 4))
    assert jax_ptr(y) == h.ctypes.data + 64
    del y
    t.close()
    collect()
    assert p.deleter_calls == 1


def test_jax_view_outlives_shim_and_source():
    h = aligned_copy(np.arange(100, dtype=np.float64))
    expect = h.copy()
    base = sys.getrefcount(h)
    t = ds.from_dlpack(h)
    y = jax.dlpack.from_dlpack(t)
    t.close()
    del t
    collect()
    assert sys.getrefcount(h) > base, "JAX's zero-copy view must keep the source alive"
    np.testing.assert_array_equal(np.asarray(y), expect)
    y.delete()
    del y
    collect()
    assert sys.getrefcount(h) == base


def test_round_trip_jax_shim_jax():
    x = jnp.arange(16, dtype=jnp.bfloat16).reshape(4, 4)
    t = ds.from_dlpack(x)
    y = jax.dlpack.from_dlpack(t)
    assert y.dtype == x.dtype
    assert jax_ptr(y) == jax_ptr(x)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def test_jax_to_shim_to_numpy_to_torch_chain():
    torch = pytest.importorskip("torch")
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    t = ds.from_dlpack(x)
    a = np.from_dlpack(t)
    t2 = ds.from_dlpack(a)
    z = torch.from_dlpack(t2)
    assert z.data_ptr() == jax_ptr(x)
    assert z.tolist() == np.asarray(x).tolist()
