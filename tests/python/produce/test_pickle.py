"""Pickling and copying a Tensor (issues 33.2, 33.3 and 31.6).

The rules (docs/behaviour.md, "Pickling and copying"):
- every protocol, 0 to 5, gives back a Tensor with the same bytes, dtype,
  class, shape, memory order (C or Fortran; any other layout comes back
  compact in C order) and READ_ONLY and IS_SUBBYTE_TYPE_PADDED flags; it owns
  its memory (IS_COPIED). No protocol loses data silently, and dumps refuses
  what loads could not rebuild;
- protocol 5 hands the data of a C- or Fortran-contiguous Tensor whose dtype
  has a struct format out of band (other layouts in band, as NumPy's), as
  a pickle.PickleBuffer over the Tensor's own memory (zero copy); with the
  buffers given back to loads, the new Tensor is over those buffers (zero
  copy) when it may be (writable buffers, or a read-only Tensor);
- GPU memory is refused with TypeError (copy it to the host first);
- copy.copy and copy.deepcopy copy the data, as NumPy's do.
"""
from __future__ import annotations

import copy
import pickle
import sys

import pytest

import producers as P

import dlpackshim as ds

np = pytest.importorskip("numpy")

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bool"]
LAYOUTS = {
    "C": lambda a: a,
    "F": np.asfortranarray,
    "every 2nd": lambda a: a[::2, 1::2],
    "reversed": lambda a: a[::-1],
    "transposed 3-D": lambda a: a.reshape(2, 3, 4).transpose(2, 0, 1),
    "0-d": lambda a: np.asarray(a[1, 1]),
    "empty": lambda a: a[:0],
}


def sample(dtype):
    a = np.arange(24).reshape(6, 4)
    if dtype == "bool":
        return a % 3 == 0
    if dtype.startswith("complex"):
        return (a - 0.5j * a).astype(dtype)
    if dtype.startswith("float"):
        return (a / 7).astype(dtype)
    return (a * 37 - 200).astype(dtype)


def order_of(t):
    return "C" if t.c_contiguous else ("F" if t.f_contiguous else None)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trips_are_bit_exact(dtype, layout, protocol):
    a = LAYOUTS[layout](sample(dtype))
    t = ds.from_dlpack(a)
    back = pickle.loads(pickle.dumps(t, protocol=protocol))
    assert isinstance(back, ds.Tensor)
    assert back.is_copied and not back.readonly
    assert (back.shape, back.dtype, back.device) == (t.shape, t.dtype, t.device)
    out = np.from_dlpack(back)
    assert out.dtype == a.dtype
    assert out.tobytes() == a.tobytes()  # the elements, in C order, bit for bit
    if layout == "F":
        assert back.f_contiguous and (a.ndim < 2 or not back.c_contiguous)
    elif layout in ("C", "every 2nd", "reversed", "transposed 3-D"):
        assert back.c_contiguous  # C order kept; other layouts made compact in C order


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_read_only_stays_read_only(protocol):
    a = np.arange(6.0)
    a.flags.writeable = False
    back = pickle.loads(pickle.dumps(ds.from_dlpack(a), protocol=protocol))
    assert back.readonly and back.is_copied
    assert not np.from_dlpack(back).flags.writeable


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("dtype, flags, fill", [
    ((4, 16, 1), 0, bytes(range(16))),  # bfloat16
    ((10, 8, 1), 0, bytes(range(8))),  # float8_e4m3fn
    ((0, 4, 1), 0, bytes([0x21, 0x43, 0x65, 0x87])),  # int4, packed
    ((0, 4, 1), P.FLAG_IS_SUBBYTE_TYPE_PADDED, bytes([1, 2, 3, 4, 5, 6, 7, 8])),  # padded
    ((2, 32, 4), P.FLAG_READ_ONLY, bytes(range(128))),  # float32x4, read-only
])
def test_dtypes_without_a_struct_format_travel_in_band(dtype, flags, fill, protocol):
    padded = bool(flags & P.FLAG_IS_SUBBYTE_TYPE_PADDED)
    cap, _ = P.make_capsule(dtype=dtype, shape=(8,), flags=flags, padded=padded, fill=fill)
    t = ds.from_dlpack(cap)
    buffers = []
    data = pickle.dumps(t, protocol=protocol, buffer_callback=buffers.append
                        if protocol >= 5 else None)
    assert buffers == []  # no struct format: no PickleBuffer, the bytes in band
    back = pickle.loads(data)
    assert back.tobytes() == t.tobytes() and back.dtype == t.dtype and back.shape == t.shape
    assert back._flags & 0xFF == flags | P.FLAG_IS_COPIED


@pytest.mark.parametrize("order", ["C", "F"])
def test_protocol_5_out_of_band_with_more_dimensions_than_a_memoryview_holds(order):
    """The library holds up to 1024 dimensions, a memoryview 64: a Tensor of
    more handed out a PickleBuffer that no memoryview (raw(), loads, Dask's
    frames) could read. Its elements now go out flat, and come back in the
    Tensor's shape and order."""
    shape = (1,) * 62 + (2, 1, 3)
    a = np.arange(6, dtype=np.int32).reshape(shape[-3:])
    a = a if order == "C" else np.asfortranarray(a)
    t = ds.from_pointer(a.ctypes.data, shape, "int32", strides=(0,) * 62 + tuple(
        s // 4 for s in a.strides), owner=a)
    assert t.ndim == 65 and (t.c_contiguous if order == "C" else t.f_contiguous)
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == 24
    for given in (buffers, [bytearray(buffers[0].raw())]):
        back = pickle.loads(data, buffers=given)
        assert back.shape == shape and back.tobytes() == t.tobytes()
        assert back.f_contiguous if order == "F" else back.c_contiguous


def test_protocol_5_hands_the_tensors_own_memory_out_of_band():
    a = np.arange(1 << 16, dtype=np.float32)
    t = ds.from_dlpack(a)
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(data) < 1000  # the megabytes are not in the pickle
    assert len(buffers) == 1
    raw = buffers[0].raw()
    assert np.frombuffer(raw, np.uint8).ctypes.data == a.ctypes.data  # zero copy
    # given back writable buffers, loads makes a Tensor over them (zero copy)
    target = bytearray(raw)
    back = pickle.loads(data, buffers=[target])
    assert np.from_dlpack(back).ctypes.data == np.frombuffer(target, np.uint8).ctypes.data
    assert np.array_equal(np.from_dlpack(back), a)
    # the PickleBuffers themselves, in this process: the pickled Tensor's own
    # memory, shared, so not IS_COPIED
    shared = pickle.loads(data, buffers=buffers)
    assert shared.data_ptr == a.ctypes.data and not shared.is_copied
    # nor is a memoryview of them (PickleBuffer.raw()) or of a Tensor, nor
    # one nested deeper (Dask's ensure_memoryview: PickleBuffer(view).raw())
    for given in ([b.raw() for b in buffers], [memoryview(t)],
                  [pickle.PickleBuffer(memoryview(buffers[0])).raw()],
                  [memoryview(memoryview(t)).cast("B")]):
        view = pickle.loads(data, buffers=given)
        assert not view.is_copied and view.data_ptr == a.ctypes.data
    assert pickle.loads(data, buffers=[memoryview(target)]).is_copied  # handed over
    assert back.is_copied  # a bytearray of its own
    # read-only buffers for a writable Tensor: copied into writable memory
    back2 = pickle.loads(data, buffers=[bytes(raw)])
    assert not back2.readonly
    np.from_dlpack(back2)[0] = 7.0
    assert np.from_dlpack(back2)[0] == 7.0 and a[0] == 0.0


def test_protocol_5_fortran_order_out_of_band():
    a = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    buffers = []
    data = pickle.dumps(ds.from_dlpack(a), protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1
    back = pickle.loads(data, buffers=buffers)
    assert back.f_contiguous and np.array_equal(np.from_dlpack(back), a)


def test_the_pickled_memory_outlives_the_closed_tensor():
    """A PickleBuffer keeps the memory like any buffer view: close() while
    one lives frees nothing (ASan: make check-asan)."""
    t = ds.from_dlpack(np.arange(100.0))
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    t.close()
    import gc
    gc.collect()
    back = pickle.loads(data, buffers=buffers)
    assert np.from_dlpack(back)[99] == 99.0


def test_a_close_during_pickling_frees_nothing_the_pickle_reads():
    """close() from another thread between __reduce_ex__'s reads of the data
    address and of the holder (here from a profile hook, at the return of
    data_ptr): the PickleBuffer still holds the memory it points into (it
    was read after the close: a use after free, ASan: make check-asan)."""
    import weakref
    a = np.full(1 << 16, 7, dtype=np.uint8)
    alive = weakref.ref(a)
    t = ds.from_dlpack(a)
    del a

    def close_after_data_ptr(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "data_ptr":
            sys.setprofile(None)
            t.close()

    sys.setprofile(close_after_data_ptr)
    try:
        rebuild, args = t.__reduce_ex__(5)
    finally:
        sys.setprofile(None)
    assert t.closed and alive() is not None  # the pickle's buffer holds the memory
    back = pickle.loads(pickle.dumps(rebuild(*args)))
    assert back.tobytes() == b"\x07" * (1 << 16)


def test_gpu_tensors_are_refused_with_type_error():
    cap, _ = P.make_capsule(dtype=(2, 32, 1), shape=(4,), device=(2, 0))
    g = ds.from_dlpack(cap)
    for protocol in PROTOCOLS:
        with pytest.raises(TypeError, match="cannot pickle.*copy it to the host"):
            pickle.dumps(g, protocol=protocol)


def test_a_closed_tensor_does_not_pickle():
    t = ds.from_dlpack(bytearray(4))
    t.close()
    for protocol in PROTOCOLS:
        with pytest.raises(ValueError, match="closed"):
            pickle.dumps(t, protocol=protocol)


def test_pinned_memory_pickles_from_the_host():
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(3,), device=(3, 0), fill=b"xyz")
    back = pickle.loads(pickle.dumps(ds.from_dlpack(cap), protocol=5))
    assert back.device == (1, 0) and back.tobytes() == b"xyz"


@pytest.mark.parametrize("how", [copy.copy, lambda t: copy.deepcopy(t, {})])
def test_copy_and_deepcopy_copy_the_data(how):
    a = np.arange(6.0).reshape(2, 3)[:, ::2]
    t = ds.from_dlpack(a)
    c = how(t)
    assert c.is_copied and c.c_contiguous and not c.readonly
    assert np.array_equal(np.from_dlpack(c), a)
    np.from_dlpack(c)[0, 0] = 42.0
    assert a[0, 0] == 0.0  # the copy is its own memory
    ro = np.arange(3.0)
    ro.flags.writeable = False
    assert not how(ds.from_dlpack(ro)).readonly  # fresh memory, writable (as NumPy's)


def test_deepcopy_inside_a_container_keeps_sharing():
    t = ds.from_dlpack(np.arange(3.0))
    box = [t, t]
    c = copy.deepcopy(box)
    assert c[0] is c[1] and c[0] is not t


class Forged:
    """Pickles as a Tensor whose metadata does not match its data."""

    def __init__(self, data, meta):
        self.data, self.meta = data, meta

    def __reduce__(self):
        from dlpackshim._tensor import _rebuild
        return _rebuild, (self.data, self.meta)


@pytest.mark.parametrize("data, meta, words", [
    (b"abcd", ((1000,), (2, 32, 1), "C", False, False), "4 bytes of data"),
    (b"abcd" * 3, ((2,), (2, 32, 1), "F", True, False), "12 bytes of data"),
    (b"", ((1,), (0, 4, 1), "C", False, True), "0 bytes"),
    (b"abcd", ((4,), (2, 32, 1), "K", False, False), "memory order"),
])
def test_a_forged_pickle_is_refused_not_read_past_its_end(data, meta, words):
    for protocol in PROTOCOLS:
        with pytest.raises(ValueError, match=words):
            pickle.loads(pickle.dumps(Forged(data, meta), protocol=protocol))


def test_getsizeof_counts_the_data_a_tensor_owns():
    """As NumPy: an array owning its data counts it, a view does not. Dask
    sizes what its workers hold with sys.getsizeof."""
    a = np.zeros(1 << 16, dtype=np.float64)
    view = ds.from_dlpack(a)
    assert sys.getsizeof(view) < 1024
    for owner in (copy.copy(view), pickle.loads(pickle.dumps(view, protocol=5))):
        assert owner.is_copied
        assert a.nbytes <= sys.getsizeof(owner) < a.nbytes + 1024
    view.close()
    assert sys.getsizeof(view) < 1024


def test_an_empty_tensor_that_nothing_could_rebuild_is_refused_by_dumps():
    """Extents of 0 and 2^62 whose compact strides overflow int64 in both
    orders: no Tensor of that shape can be made again. dumps refuses it (it
    wrote a pickle that only loads refused: a multiprocessing.Pool worker
    returning one hung its parent), as copy.copy does."""
    a = np.zeros(1, np.float32)
    shape = (2 ** 62, 4, 0, 4, 2 ** 62)
    t = ds.from_pointer(a.ctypes.data, shape, "float32", strides=(0,) * 5, owner=a)
    for protocol in PROTOCOLS:
        with pytest.raises(ValueError, match="cannot pickle.*overflow"):
            pickle.dumps(t, protocol=protocol)
    with pytest.raises(BufferError):
        copy.copy(t)


def test_an_empty_tensor_goes_in_the_order_loads_can_rebuild():
    """(0, 2^62, 4) has no C-order strides (2^64) but has Fortran ones
    (1, 1, 2^62): dumps wrote C and refused it, though loads rebuilds the
    Fortran pickle; both now agree, in every protocol."""
    a = np.zeros(1, np.float32)
    for shape in [(0, 2 ** 62, 4), (4, 2 ** 62, 0)]:
        t = ds.from_pointer(a.ctypes.data, shape, "float32", strides=(0, 0, 0), owner=a)
        for protocol in PROTOCOLS:
            back = pickle.loads(pickle.dumps(t, protocol=protocol))
            assert back.shape == shape and back.size == 0 and back.dtype == t.dtype


def test_reduce_called_directly_gives_the_data():
    """``t.__reduce__()`` was object's: it rebuilt a closed Tensor, silently."""
    t = ds.from_dlpack(np.arange(4.0))
    fn, args = t.__reduce__()[:2]
    back = fn(*args)
    assert not back.closed and back.tobytes() == t.tobytes() and back.shape == (4,)


class Sub(ds.Tensor):
    __slots__ = ()


@pytest.mark.parametrize("how", ["copy", "deepcopy"] + [f"pickle {p}" for p in PROTOCOLS])
def test_a_subclass_is_kept_by_copies_and_pickles(how):
    """As NumPy keeps an ndarray subclass."""
    t = ds.from_dlpack(np.arange(6.0).reshape(2, 3))
    t.__class__ = Sub
    if how.startswith("pickle"):
        back = pickle.loads(pickle.dumps(t, protocol=int(how.split()[1])))
    else:
        back = getattr(copy, how)(t)
    assert type(back) is Sub and back.tobytes() == t.tobytes() and back.is_copied
    plain = ds.from_dlpack(np.arange(3.0))
    assert type(pickle.loads(pickle.dumps(plain))) is ds.Tensor
    assert type(copy.copy(plain)) is ds.Tensor


def test_deepcopy_copies_whatever_a_subclass_copy_does():
    """deepcopy is the data's copy, never a subclass's shallow __copy__ (as
    NumPy's __deepcopy__ does not go through __copy__)."""
    class Cheap(ds.Tensor):
        __slots__ = ()

        def __copy__(self):
            return ds.from_dlpack(self)

    a = np.zeros(4)
    t = ds.from_dlpack(a)
    t.__class__ = Cheap
    d = copy.deepcopy(t)
    np.from_dlpack(d)[0] = 99.0
    assert a[0] == 0.0 and d.is_copied and type(d) is Cheap


def test_a_forged_class_is_refused():
    from dlpackshim._tensor import _rebuild
    meta = ((1,), (2, 32, 1), "C", False, False)
    for cls in (int, "Tensor", np.ndarray):
        with pytest.raises(ValueError, match="not a Tensor class"):
            _rebuild(b"abcd", meta, cls)


def test_a_layout_that_is_neither_c_nor_f_travels_in_band_as_numpy_s():
    """Its bytes are a copy anyway: in the pickle, as NumPy does, so that
    what loads makes owns them (IS_COPIED, counted by getsizeof), where a
    PickleBuffer over dumps' private copy came back as if it shared the
    pickled Tensor's memory."""
    a = np.arange(12.0).reshape(3, 4)
    t = ds.from_dlpack(a[:, ::2])
    buffers = []
    data = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    numpy_buffers = []
    pickle.dumps(a[:, ::2], protocol=5, buffer_callback=numpy_buffers.append)
    assert buffers == [] == numpy_buffers
    back = pickle.loads(data, buffers=buffers)
    assert back.is_copied and back.c_contiguous and back.tobytes() == t.tobytes()
    assert sys.getsizeof(back) >= back.nbytes
    np.from_dlpack(back)[0, 0] = 99.0
    assert a[0, 0] == 0.0
