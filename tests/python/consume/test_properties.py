"""Hypothesis property tests: random layouts and dtypes through every path.

Random shapes (0..8 dims, zero extents), strides (steps, negative,
permuted, zero), every DLPack 1.3 dtype code, sub-byte types packed and
padded, random byte_offset; built through from_pointer, the ctypes
VersionedProducer and LegacyProducer; round-tripped through capsules and
NumPy. Expected bytes come from NumPy views of the same memory (void dtype
of the element size), never from dlpackshim.
"""
import ctypes
import gc
import os
import random
import sys
import tracemalloc

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402

np = pytest.importorskip("numpy")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dlpackshim as ds  # noqa: E402
from dlpackshim.testing import strategies as dst  # noqa: E402

# DLPACKSHIM_HYPOTHESIS_EXAMPLES (as in test_hostile.py): fewer examples for the
# install matrix's extra interpreters (.ci/install-matrix.sh).
_EXAMPLES = int(os.environ.get("DLPACKSHIM_HYPOTHESIS_EXAMPLES", "100"))
SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
FAST = settings(SETTINGS, max_examples=min(30, _EXAMPLES))

MAX_SPAN = 1 << 19   # bytes a generated view may span
MAX_NUMEL = 4096


def collect():
    gc.collect()


no_double_delete = P.no_double_delete_fixture(passes=1)   # collect() above: one pass


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------
NUMPY_OF = {
    (0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
    (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
    (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
    (5, 64): np.complex64, (5, 128): np.complex128, (6, 8): np.bool_,
}

# The cases come from the public strategies (dlpackshim.testing.strategies), the
# ones other projects fuzz their consumers with; the checks below stay independent
# of them (ctypes producers, NumPy views of the same memory).
dtypes = dst.dtypes(subbyte=False)
numpy_dtypes = dst.dtypes(codes=(0, 1, 2, 5, 6)).filter(lambda d: d[:2] in NUMPY_OF)
assert set(dst.BYTE_DTYPES) == {(c, b, 1) for c, b in P.VALID_DTYPES}


def layouts(itemsize=16, allow_zero=True, compact=False):
    """(shape, strides) of up to 8 dims over one allocation of at most MAX_SPAN bytes
    (dst.layouts without its byte_offset: these tests draw their own)."""
    return dst.layouts(dst.shapes(max_dims=8, max_side=5, max_numel=MAX_NUMEL),
                       compact=compact, allow_zero=allow_zero, allow_huge=False, max_offset=0,
                       max_span_elems=MAX_SPAN // itemsize).map(lambda lay: (lay.shape, lay.strides))


def fill_bytes(seed, n):
    return random.Random(seed).randbytes(n)


def view_bytes(origin, shape, strides, itemsize):
    """C-order bytes of the view at origin (an address), read with NumPy."""
    if P.numel(shape) == 0:
        return b""
    lo, hi = P.byte_span(shape, strides, itemsize)
    raw = (ctypes.c_char * (hi - lo)).from_address(origin + lo)
    base = np.frombuffer(raw, dtype=np.uint8)
    v = np.ndarray(shape, dtype=np.dtype((np.void, itemsize)), buffer=base, offset=-lo,
                   strides=tuple(s * itemsize for s in strides))
    return v.tobytes()


class Buffer:
    """Random-filled memory big enough for a view; origin = first element."""

    def __init__(self, shape, strides, dtype, byte_offset, seed, padded=False):
        code, bits, lanes = dtype
        self.itemsize = P.element_bytes(bits, lanes)
        packed = bits * lanes < 8 and not padded
        if packed:
            lo, hi = 0, (P.numel(shape) * bits * lanes + 7) // 8
        else:
            lo, hi = P.byte_span(shape, strides, self.itemsize)
        self.raw, self.data = P.alloc_for(shape, strides, dtype, byte_offset, padded=padded,
                                          fill=fill_bytes(seed, max(hi - lo, 0)))
        self.origin = self.data + byte_offset


def check_tensor(t, shape, strides, dtype, origin, expect, device=(1, 0)):
    assert t.shape == shape
    assert t.ndim == len(shape)
    assert t.size == P.numel(shape)
    assert t.strides == strides
    assert t.dtype == dtype
    assert t.device == device
    if P.numel(shape):
        assert t.data_ptr == origin
    itemsize = P.element_bytes(dtype[1], dtype[2])
    assert t.nbytes == P.numel(shape) * itemsize
    assert t.tobytes() == expect


def check_capsule(cap, versioned, shape, strides, dtype, origin):
    d = P.describe_capsule(cap)
    assert d["name"] == (b"dltensor_versioned" if versioned else b"dltensor")
    if versioned:
        assert d["version"][0] == 1
    assert d["ndim"] == len(shape)
    assert d["dtype"] == dtype
    assert d["device"] == (1, 0)
    if shape:
        assert d["shape"] == shape
        if versioned and d["version"] >= (1, 2):
            # dlpack.h >= 1.2: strides "can not be NULL if ndim != 0"
            assert d["strides"] is not None
        if d["strides"] is not None:
            assert d["strides"] == strides or P.numel(shape) == 0
    if P.numel(shape):
        assert d["data"] + d["byte_offset"] == origin
    return d


# ---------------------------------------------------------------------------
# from_pointer
# ---------------------------------------------------------------------------
@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 40))
def test_from_pointer_any_layout(dtype, layout, seed, offset):
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, offset, seed)
    itemsize = buf.itemsize
    expect = view_bytes(buf.origin, shape, strides, itemsize)
    owner = buf.raw
    base = sys.getrefcount(owner)
    t = ds.from_pointer(buf.origin, shape, dtype, strides=strides, owner=owner)
    check_tensor(t, shape, strides, dtype, buf.origin, expect)
    assert not t.readonly and not t.is_copied

    for mv in ((1, 3), None):
        cap = t.__dlpack__(max_version=mv)
        d = check_capsule(cap, mv is not None, shape, strides, dtype, buf.origin)
        if mv is not None:
            assert d["flags"] & (P.FLAG_READ_ONLY | P.FLAG_IS_COPIED) == 0
        t2 = ds.from_dlpack(cap)
        check_tensor(t2, shape, strides, dtype, buf.origin, expect)
        t3 = ds.from_dlpack(t2)
        check_tensor(t3, shape, strides, dtype, buf.origin, expect)
        del cap, t2, t3
    del t
    collect()
    assert sys.getrefcount(owner) == base


@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32))
def test_from_pointer_read_only(dtype, layout, seed):
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, 0, seed)
    expect = view_bytes(buf.origin, shape, strides, buf.itemsize)
    t = ds.from_pointer(buf.origin, shape, dtype, strides=strides, readonly=True, owner=buf.raw)
    assert t.readonly
    assert t.tobytes() == expect
    d = P.describe_capsule(t.__dlpack__(max_version=(1, 3)))
    assert d["flags"] & P.FLAG_READ_ONLY
    with pytest.raises(BufferError):
        t.__dlpack__()
    t2 = ds.from_dlpack(t)
    assert t2.readonly
    assert t2.tobytes() == expect


# ---------------------------------------------------------------------------
# ctypes producers
# ---------------------------------------------------------------------------
@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 64),
       version=st.sampled_from([(1, 0), (1, 1), (1, 2), (1, 3)]), readonly=st.booleans(),
       copied=st.booleans(), null_strides=st.booleans())
def test_versioned_producer_any_layout(dtype, layout, seed, offset, version, readonly, copied,
                                       null_strides):
    shape, strides = layout
    if null_strides:
        if version >= (1, 2) or not shape:
            null_strides = False
        else:
            strides = P.compact_strides(shape)
    buf = Buffer(shape, strides, dtype, offset, seed)
    expect = view_bytes(buf.origin, shape, strides, buf.itemsize)
    p = P.VersionedProducer(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype,
                            byte_offset=offset, version=version, readonly=readonly, copied=copied,
                            null_strides=null_strides)
    t = ds.from_dlpack(p)
    check_tensor(t, shape, strides, dtype, buf.origin, expect)
    assert t.readonly == readonly
    assert t.is_copied == copied
    assert t.dlpack_version == version
    assert p.deleter_calls == 0

    cap = t.__dlpack__(max_version=(1, 3))
    d = check_capsule(cap, True, shape, strides, dtype, buf.origin)
    assert bool(d["flags"] & P.FLAG_READ_ONLY) == readonly
    t2 = ds.from_dlpack(cap)
    check_tensor(t2, shape, strides, dtype, buf.origin, expect)
    assert t2.readonly == readonly
    if not readonly:
        t3 = ds.from_dlpack(t.__dlpack__())
        check_tensor(t3, shape, strides, dtype, buf.origin, expect)
        del t3
    t.close()
    del cap, t2
    collect()
    assert p.exports == 1
    assert p.deleter_calls == 1


@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 64),
       null_strides=st.booleans())
def test_legacy_producer_any_layout(dtype, layout, seed, offset, null_strides):
    shape, strides = layout
    if null_strides:
        strides = P.compact_strides(shape)
    buf = Buffer(shape, strides, dtype, offset, seed)
    expect = view_bytes(buf.origin, shape, strides, buf.itemsize)
    p = P.LegacyProducer(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype,
                         byte_offset=offset, null_strides=null_strides)
    t = ds.from_dlpack(p)
    check_tensor(t, shape, strides, dtype, buf.origin, expect)
    assert t.dlpack_version is None and t.readonly  # legacy: writability unknown
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 3))]
    for cap, versioned in zip(caps, (False, True)):
        check_capsule(cap, versioned, shape, strides, dtype, buf.origin)
    t2 = ds.from_dlpack(caps[1])
    check_tensor(t2, shape, strides, dtype, buf.origin, expect)
    del t, t2, caps, cap
    collect()
    assert p.deleter_calls == 1


@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 32),
       versioned=st.booleans())
def test_raw_capsule_any_layout(dtype, layout, seed, offset, versioned):
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, offset, seed)
    expect = view_bytes(buf.origin, shape, strides, buf.itemsize)
    cap, rec = P.make_capsule(versioned=versioned, data=buf.data, keep=buf.raw, shape=shape,
                              strides=strides, dtype=dtype, byte_offset=offset)
    t = ds.from_dlpack(cap)
    check_tensor(t, shape, strides, dtype, buf.origin, expect)
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    del t, cap
    collect()
    assert rec.deleter_calls == 1


# ---------------------------------------------------------------------------
# copies
# ---------------------------------------------------------------------------
@SETTINGS
@given(dtype=dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 16))
def test_copies_are_compact_and_equal(dtype, layout, seed, offset):
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, offset, seed)
    expect = view_bytes(buf.origin, shape, strides, buf.itemsize)
    base = sys.getrefcount(buf.raw)
    t = ds.from_pointer(buf.origin, shape, dtype, strides=strides, owner=buf.raw)
    cap = t.__dlpack__(max_version=(1, 3), copy=True)
    d = P.describe_capsule(cap)
    assert d["flags"] & P.FLAG_IS_COPIED
    assert d["shape"] == shape or (not shape and d["shape"] is None)
    c = ds.from_dlpack(cap)
    assert c.is_copied and not c.readonly
    assert c.shape == shape and c.dtype == dtype
    if P.numel(shape):
        assert c.strides == P.compact_strides(shape)
        assert c.data_ptr != buf.origin
    assert c.tobytes() == expect
    c2 = ds.from_dlpack(t, copy=True)
    assert c2.is_copied
    assert c2.tobytes() == expect
    t.close()
    del t
    collect()
    rc = sys.getrefcount(buf.raw)
    assert rc == base, "copies must not hold the source"
    assert c.tobytes() == expect and c2.tobytes() == expect


# ---------------------------------------------------------------------------
# NumPy round trips
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
@SETTINGS
@given(dtype=numpy_dtypes, layout=layouts(), seed=st.integers(0, 2**32), offset=st.integers(0, 64),
       readonly=st.booleans())
def test_numpy_round_trip(dtype, layout, seed, offset, readonly):
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, offset, seed)
    itemsize = buf.itemsize
    expect = view_bytes(buf.origin, shape, strides, itemsize)
    p = P.VersionedProducer(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype,
                            byte_offset=offset, readonly=readonly)
    t = ds.from_dlpack(p)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(NUMPY_OF[dtype[:2]])
    assert a.shape == shape
    assert a.flags.writeable == (not readonly)
    assert a.tobytes() == expect
    if P.numel(shape):
        assert a.ctypes.data == buf.origin
        assert a.strides == tuple(s * itemsize for s in strides)
    t2 = ds.from_dlpack(a)
    want = strides if P.numel(shape) else t2.strides
    if tuple(int(v) for v in np.__version__.split(".")[:2]) < (2, 4):
        # NumPy < 2.4 exports its own stride for an extent-1 dimension (where
        # any stride addresses the same element); 2.4 keeps the array's.
        want = tuple(got if n == 1 else s for n, s, got in zip(shape, want, t2.strides))
    check_tensor(t2, shape, want, dtype, buf.origin, expect)
    assert t2.readonly == readonly
    a2 = np.asarray(t2)
    assert a2.tobytes() == expect
    del t, a, t2, a2
    collect()
    assert p.deleter_calls == 1


@SETTINGS
@given(dtype=numpy_dtypes, layout=layouts(allow_zero=False), seed=st.integers(0, 2**32))
def test_numpy_source_any_view(dtype, layout, seed):
    """Any NumPy view (from as_strided on a random buffer) -> shim -> NumPy."""
    shape, strides = layout
    npdt = np.dtype(NUMPY_OF[dtype[:2]])
    itemsize = npdt.itemsize
    lo, hi = P.byte_span(shape, strides, itemsize)
    base = np.frombuffer(bytearray(fill_bytes(seed, hi - lo + itemsize)), dtype=np.uint8)
    v = np.ndarray(shape, dtype=npdt, buffer=base, offset=-lo,
                   strides=tuple(s * itemsize for s in strides))
    rc = sys.getrefcount(base)
    t = ds.from_dlpack(v)
    assert t.shape == shape and t.dtype == dtype
    assert t.tobytes() == v.tobytes()
    if v.size:
        # The stride of an extent-1 axis is never used; NumPy < 2.1 exports it as 1.
        assert all(got == want for got, want, n in zip(t.strides, strides, shape) if n > 1)
        assert t.data_ptr == v.ctypes.data
    b = np.from_dlpack(t)
    assert b.tobytes() == v.tobytes()
    del t, b
    collect()
    assert sys.getrefcount(base) == rc


# ---------------------------------------------------------------------------
# sub-byte types
# ---------------------------------------------------------------------------
subbyte = st.sampled_from(dst.SUBBYTE_DTYPES)
assert set(dst.SUBBYTE_DTYPES) == {(c, b, 1) for c, b in P.SUBBYTE_DTYPES}


def packed_equal(got, raw, numel, bits):
    """Equal as packed sub-byte data: the unused high bits of the last byte are
    not part of the tensor."""
    nbits = numel * bits
    nbytes = (nbits + 7) // 8
    assert len(got) == nbytes
    if nbytes == 0:
        return
    assert got[:nbits // 8] == raw[:nbits // 8]
    rem = nbits % 8
    if rem:
        mask = (1 << rem) - 1
        assert got[-1] & mask == raw[nbytes - 1] & mask


@SETTINGS
@given(dtype=subbyte, layout=layouts(compact=True), seed=st.integers(0, 2**32),
       path=st.sampled_from(["pointer", "versioned", "legacy"]))
def test_subbyte_packed(dtype, layout, seed, path):
    shape, strides = layout
    code, bits, lanes = dtype
    n = P.numel(shape)
    nbytes = (n * bits + 7) // 8
    buf = Buffer(shape, strides, dtype, 0, seed)
    raw = ctypes.string_at(buf.origin, nbytes) if nbytes else b""
    p = None
    if path == "pointer":
        t = ds.from_pointer(buf.origin, shape, dtype, owner=buf.raw)
    else:
        cls = P.VersionedProducer if path == "versioned" else P.LegacyProducer
        p = cls(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype)
        t = ds.from_dlpack(p)
    assert t.shape == shape and t.dtype == dtype
    assert t.nbytes == nbytes
    packed_equal(t.tobytes(), raw, n, bits)
    cap = t.__dlpack__(max_version=(1, 3))
    d = P.describe_capsule(cap)
    assert d["dtype"] == dtype
    assert not d["flags"] & P.FLAG_IS_SUBBYTE_TYPE_PADDED
    t2 = ds.from_dlpack(cap)
    assert t2.nbytes == nbytes
    packed_equal(t2.tobytes(), raw, n, bits)
    c = ds.from_dlpack(t, copy=True)
    assert c.nbytes == nbytes
    packed_equal(c.tobytes(), raw, n, bits)
    del t, t2, cap, c
    collect()
    if p is not None:
        assert p.deleter_calls == 1


@SETTINGS
@given(dtype=subbyte, layout=layouts(itemsize=1), seed=st.integers(0, 2**32),
       offset=st.integers(0, 8))
def test_subbyte_padded(dtype, layout, seed, offset):
    """IS_SUBBYTE_TYPE_PADDED: one element per byte, any strides; the flag must
    survive re-export or consumers would misread the data as packed."""
    shape, strides = layout
    buf = Buffer(shape, strides, dtype, offset, seed, padded=True)
    expect = view_bytes(buf.origin, shape, strides, 1)
    p = P.VersionedProducer(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype,
                            byte_offset=offset, padded=True)
    t = ds.from_dlpack(p)
    assert t.shape == shape and t.strides == strides and t.dtype == dtype
    assert t.nbytes == P.numel(shape)
    assert t.tobytes() == expect
    d = P.describe_capsule(t.__dlpack__(max_version=(1, 3)))
    assert d["flags"] & P.FLAG_IS_SUBBYTE_TYPE_PADDED
    t2 = ds.from_dlpack(t)
    assert t2.nbytes == P.numel(shape) and t2.tobytes() == expect
    del t, t2, d
    collect()
    assert p.deleter_calls == 1


# ---------------------------------------------------------------------------
# deleters, references and memory over many rounds
# ---------------------------------------------------------------------------
@FAST
@given(specs=st.lists(st.tuples(dtypes, layouts(), st.booleans(), st.integers(0, 2**16)),
                      min_size=1, max_size=12))
def test_deleter_called_exactly_once_per_tensor(specs):
    producers = []
    tensors = []
    for dtype, (shape, strides), versioned, seed in specs:
        buf = Buffer(shape, strides, dtype, 0, seed)
        cls = P.VersionedProducer if versioned else P.LegacyProducer
        p = cls(data=buf.data, keep=buf.raw, shape=shape, strides=strides, dtype=dtype)
        producers.append(p)
        t = ds.from_dlpack(p)
        tensors.append(t)
        tensors.append(ds.from_dlpack(t.__dlpack__(max_version=(1, 3))))
        tensors.append(ds.from_dlpack(t))
        if seed % 3 == 0:
            t.close()
    del t
    random.Random(len(specs)).shuffle(tensors)
    while tensors:
        tensors.pop()
    collect()
    for p in producers:
        assert p.exports == 1
        assert p.deleter_calls == 1


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _one_round(i):
    a = np.full(16384, float(i))                      # 128 KiB
    t = ds.from_dlpack(a)
    t2 = ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    b = np.from_dlpack(t2)
    c = ds.from_dlpack(t2, copy=True)                  # 128 KiB owned by the shim
    cc = ds.from_dlpack(c.__dlpack__(max_version=(1, 3), copy=True))
    assert cc.tobytes()[:8] == a.tobytes()[:8]
    legacy = t.__dlpack__()
    p = P.VersionedProducer(data=a, shape=(16384,), dtype=(2, 64, 1))
    tp = ds.from_dlpack(p)
    ai = np.asarray(tp)
    tb = ds.from_dlpack(bytearray(4096))
    tpp = ds.from_pointer(a.ctypes.data, (128, 128), "float64", owner=a)
    unconsumed = tpp.__dlpack__(max_version=(1, 3))
    t.close()
    c.close()
    del t, t2, b, c, cc, legacy, tp, ai, tb, tpp, unconsumed
    return p.records[0]    # not p: it holds `a`


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="ASan's quarantine grows RSS on purpose; the plain run measures it")
@pytest.mark.numpy_min("2.1")
def test_no_memory_growth_over_many_rounds():
    for i in range(30):
        _one_round(i)
    collect()
    rss0 = _rss()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    records = [_one_round(i) for i in range(400)]
    collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown_py = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    grown_rss = _rss() - rss0
    assert all(r.deleter_calls == 1 for r in records)
    # 400 rounds of >= 256 KiB each: leaking one buffer per round is > 50 MiB.
    assert grown_rss < 32 * 2**20, f"RSS grew by {grown_rss / 2**20:.1f} MiB"
    assert grown_py < 8 * 2**20, f"Python allocations grew by {grown_py / 2**20:.1f} MiB"


def test_no_reference_leak_over_many_rounds():
    a = np.arange(64, dtype=np.float32)
    obj = bytearray(64)
    base_a, base_o = sys.getrefcount(a), sys.getrefcount(obj)
    for _ in range(500):
        t = ds.from_dlpack(a)
        u = ds.from_dlpack(obj)
        np.from_dlpack(t)
        ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
        t.__dlpack__()
        ds.from_pointer(a.ctypes.data, (64,), "float32", owner=obj)
        u.close()
    del t, u
    collect()
    assert sys.getrefcount(a) == base_a
    assert sys.getrefcount(obj) == base_o
