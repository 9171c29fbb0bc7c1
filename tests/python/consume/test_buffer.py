"""Imports through the buffer protocol and the two array interfaces."""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import sys
import weakref

import pytest

import dlpackshim as ds

BIG = ">" if sys.byteorder == "little" else "<"


def _addr(obj) -> int:
    c = ctypes.c_char.from_buffer(obj) if not isinstance(obj, bytes) else None
    return ctypes.addressof(c)


def test_bytes_is_read_only_uint8():
    b = b"hello"
    t = ds.from_dlpack(b)
    assert t.dtype == "uint8" and t.shape == (5,) and t.readonly
    assert t.tobytes() == b
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # legacy export of read-only data


@pytest.mark.numpy_min("2.1")
def test_bytearray_is_writable_zero_copy_and_pinned(np):
    b = bytearray(b"\x01\x02\x03\x04")
    t = ds.from_dlpack(b)
    assert not t.readonly and t.data_ptr == _addr(b)
    np.from_dlpack(t)[0] = 9
    assert b[0] == 9
    with pytest.raises(BufferError):
        b.append(5)  # exported: cannot resize under the tensor
    t.close()
    gc.collect()
    b.append(5)


def test_buffer_tensor_holds_one_export_of_its_exporter():
    # The holder is the export itself (the Py_buffer, as a memoryview holds
    # it): the exporter lives, and stays pinned, until the last user goes.
    arr = array.array("d", [1.5, 2.5])
    wr = weakref.ref(arr)
    t = ds.from_dlpack(arr)
    holder = t._holder
    assert type(holder).__name__ == "_Holder"
    with pytest.raises(TypeError):
        type(holder)()  # only the library makes them
    del arr
    gc.collect()
    assert wr() is not None and t.tobytes() == array.array("d", [1.5, 2.5]).tobytes()
    with pytest.raises(BufferError):
        wr().append(3.5)  # exported: cannot move under the tensor
    t.close()
    del holder
    gc.collect()
    assert wr() is None


def test_buffer_exporter_referencing_its_tensor_is_collected():
    # A cycle through the exporter (bytearray subclass -> its __dict__ -> the
    # Tensor -> the holder -> the exporter): the collector sees it all.
    class Owned(bytearray):
        pass

    b = Owned(b"abcdefgh")
    b.tensor = ds.from_dlpack(b)
    wr = weakref.ref(b)
    del b
    gc.collect()
    assert wr() is None


def test_ctypes_arrays_without_strides():
    # ctypes exports no strides (C-contiguous): taken as DLPack's compact.
    grid = ((ctypes.c_int16 * 3) * 2)((1, 2, 3), (4, 5, 6))
    t = ds.from_dlpack(grid)
    assert t.shape == (2, 3) and t.strides == (3, 1) and t.dtype == "int16"
    assert t.tobytes() == bytes(grid)
    scalar = ctypes.c_int32(-7)
    s = ds.from_dlpack(scalar)
    assert s.shape == () and s.tobytes() == bytes(scalar)


def test_ctypes_view_of_bytearray_keeps_it_pinned():
    # ctypes' from_buffer holds an export of the bytearray for as long as
    # the ctypes object lives, so holding the ctypes object pins it too.
    ba = bytearray(8)
    view = (ctypes.c_uint8 * 8).from_buffer(ba)
    t = ds.from_dlpack(view)
    del view
    gc.collect()
    with pytest.raises(BufferError):
        ba.append(1)
    t.close()
    gc.collect()
    ba.append(1)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is Python 3.12+ (PEP 688)")
def test_python_buffer_class_is_kept_exported():
    # A class whose __buffer__ returns a memoryview has no bf_releasebuffer
    # of its own, and its export is a wrapper CPython makes: the object alone
    # does not keep the memory, so the Tensor holds a memoryview (an export).
    class Exporter:
        def __init__(self):
            self.data = bytearray(b"abcd")

        def __buffer__(self, flags):
            return memoryview(self.data)

    e = Exporter()
    t = ds.from_dlpack(e)
    assert t.tobytes() == b"abcd"
    with pytest.raises(BufferError):
        e.data.append(1)  # would move the bytes under the tensor
    t.close()
    gc.collect()
    e.data.append(1)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ is Python 3.12+ (PEP 688)")
def test_release_that_raises_keeps_the_pending_exception():
    # The holder releases its export when it goes, which runs the exporter's
    # __release_buffer__: its error is reported as unraisable, and an
    # exception being handled around the release stays the one handled.
    class Raising:
        def __init__(self):
            self.data = bytearray(b"12345678")

        def __buffer__(self, flags):
            return memoryview(self.data)

        def __release_buffer__(self, view):
            raise ValueError("release failed")

    seen = []
    old, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(u.exc_value)
    try:
        # (the first sight of the type classifies it with a memoryview that
        # is released too: one more error, also unraisable)
        t = ds.from_dlpack(Raising())
        assert t.tobytes() == b"12345678"
        del seen[:]
        try:
            raise KeyError("pending")
        except KeyError:
            t.close()
            del t
            gc.collect()
            assert isinstance(sys.exc_info()[1], KeyError)
    finally:
        sys.unraisablehook = old
    assert len(seen) == 1 and isinstance(seen[0], ValueError)


def test_memoryview_non_contiguous_and_negative(np):
    a = np.arange(48, dtype=np.int32).reshape(6, 8)
    mv = memoryview(a)[::2]
    t = ds.from_dlpack(mv)
    assert t.shape == (3, 8) and t.strides == (16, 1) and t.data_ptr == a.ctypes.data
    neg = a[::-1, ::-3]
    t2 = ds.from_dlpack(memoryview(neg))
    assert t2.strides == (-8, -3)
    assert t2.data_ptr == neg.__array_interface__["data"][0]
    assert t2.tobytes() == neg.tobytes()


@pytest.mark.parametrize("code, dtype", [
    ("b", "int8"), ("B", "uint8"), ("h", "int16"), ("H", "uint16"), ("i", "int32"),
    ("I", "uint32"), ("l", "int64"), ("L", "uint64"), ("q", "int64"), ("Q", "uint64"),
    ("f", "float32"), ("d", "float64"),
])
def test_array_array_formats(code, dtype):
    if code in "lL" and array.array(code).itemsize != 8:
        dtype = dtype.replace("64", "32")
    arr = array.array(code, [1, 2, 3])
    t = ds.from_dlpack(arr)
    assert t.dtype == dtype and t.data_ptr == arr.buffer_info()[0]
    assert t.tobytes() == arr.tobytes()


def test_mmap_cannot_close_while_imported():
    m = mmap.mmap(-1, 4096)
    m[:4] = b"abcd"
    t = ds.from_dlpack(m)
    assert t.shape == (4096,) and t.tobytes()[:4] == b"abcd"
    with pytest.raises(BufferError):
        m.close()
    t.close()
    gc.collect()
    m.close()


def test_ctypes_arrays_with_native_formats():
    a = (ctypes.c_double * 3)(1.0, 2.0, 3.0)
    t = ds.from_dlpack(a)
    assert t.dtype == "float64" and t.data_ptr == ctypes.addressof(a)
    m = ((ctypes.c_int16 * 4) * 2)()
    t2 = ds.from_dlpack(m)
    assert t2.shape == (2, 4) and t2.dtype == "int16"
    tl = ds.from_dlpack((ctypes.c_long * 2)())
    assert tl.dtype.bits == ctypes.sizeof(ctypes.c_long) * 8  # '<l' with itemsize 8
    tb = ds.from_dlpack((ctypes.c_bool * 2)(True, False))
    assert tb.dtype == "bool"


def test_half_and_complex_formats(np):
    t = ds.from_dlpack(memoryview(np.zeros(3, np.float16)))
    assert t.dtype == "float16"
    tc = ds.from_dlpack(memoryview(np.zeros(3, np.complex128)))
    assert tc.dtype == "complex128"


def test_non_native_byte_order_is_buffer_error(np):
    with pytest.raises(BufferError, match="endian"):
        ds.from_dlpack(memoryview(np.zeros(3, dtype=BIG + "f4")))
    swapped = ctypes.c_int32.__ctype_be__ if BIG == ">" else ctypes.c_int32.__ctype_le__
    with pytest.raises(BufferError, match="endian"):
        ds.from_dlpack((swapped * 2)())


def test_unknown_format_is_buffer_error_naming_it(np):
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]
    with pytest.raises(BufferError, match="format"):
        ds.from_dlpack((Pair * 2)())


@pytest.mark.parametrize("member", [ctypes.c_int16, ctypes.c_float, ctypes.c_double])
def test_a_union_is_not_read_as_a_wider_integer(member):
    """ctypes exports a Union as format "B" with the union's size as the
    item size: a record, not a 2-, 4- or 8-byte unsigned integer (its
    values would be wrong). Every code's item size is its own; only c_long
    and c_ulong ("<l", "<L") come in the native size besides the standard 4."""
    class U(ctypes.Union):
        _fields_ = [("a", member), ("b", member)]
    assert memoryview(U()).format == "B" and memoryview(U()).itemsize == ctypes.sizeof(member)
    for obj in (U(), (U * 3)()):
        with pytest.raises(BufferError, match="'B' has %d-byte items" % ctypes.sizeof(member)):
            ds.from_dlpack(obj)
    assert ds.from_dlpack(memoryview(b"\x00" * 8).cast("B")).dtype == "uint8"


def test_buffer_owner_lives_while_the_tensor_lives(np):
    a = np.arange(6.0)
    wa = weakref.ref(a)
    t = ds.from_dlpack(memoryview(a))
    del a
    gc.collect()
    assert wa() is not None and t.tobytes() == np.arange(6.0).tobytes()
    t.close()
    gc.collect()
    assert wa() is None


# ---- __array_interface__ -----------------------------------------------------------

class AI:
    def __init__(self, iface, keep=None):
        self.__array_interface__ = iface
        self.keep = keep


@pytest.mark.numpy_min("2.1")
def test_array_interface_pointer_and_strides(np):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    obj = AI({"shape": (3, 2), "typestr": "<i4", "strides": (16, 8), "version": 3,
              "data": (a.ctypes.data, True)}, keep=a)
    t = ds.from_dlpack(obj)
    assert t.shape == (3, 2) and t.strides == (4, 2) and t.readonly
    assert np.from_dlpack(t).tolist() == [[0, 2], [4, 6], [8, 10]]


def test_array_interface_owner_kept_alive(np):
    a = np.arange(4.0)
    obj = AI(dict(a.__array_interface__), keep=a)
    wr = weakref.ref(obj)
    t = ds.from_dlpack(obj)
    del obj, a
    gc.collect()
    assert wr() is not None and t.tobytes() == np.arange(4.0).tobytes()
    t.close()
    gc.collect()
    assert wr() is None


def test_array_interface_data_from_a_buffer_with_offset():
    buf = bytearray(range(16))
    obj = AI({"shape": (4,), "typestr": "|u1", "version": 3, "data": buf, "offset": 4})
    t = ds.from_dlpack(obj)
    assert t.tobytes() == bytes([4, 5, 6, 7]) and not t.readonly
    with pytest.raises(BufferError):
        buf.append(0)  # its export is held, as for a buffer imported directly
    t.close()
    gc.collect()
    buf.append(0)


# Issue 10, item 3: a buffer given as `data` has a known length; a layout that
# reaches past either end of it would read (or write) memory not its own.
@pytest.mark.parametrize("layout", [
    {"shape": (1 << 20,)},                                   # far too long
    {"shape": (16,), "offset": 1},                           # one byte past the end
    {"shape": (1,), "offset": 16},                           # offset past the end
    {"shape": (0,), "offset": 17},                           # even an empty array's
    {"shape": (1,), "offset": -1},                           # before the start
    {"shape": (2,), "strides": (8,), "offset": 8},           # a stride past the end
    {"shape": (3,), "strides": (-4,), "offset": 4},          # a negative stride before 0
    {"shape": (2, 3), "strides": (16, 1)},                   # 2-d, the last row too far
    {"shape": (2, 2), "typestr": "<u4", "offset": 4},        # wider items
    {"shape": (2, 2), "strides": (1, 8), "offset": 7},       # F order, one byte too far
    # a span near INT64_MAX: offset + span overflowed, and passed (then read
    # 2**63 bytes away)
    {"shape": (2,), "strides": ((1 << 63) - 6,), "offset": 10},
])
def test_array_interface_data_buffer_is_bounds_checked(layout):
    iface = {"typestr": "|u1", "version": 3, "data": bytearray(16)}
    iface.update(layout)
    with pytest.raises(BufferError, match="buffer"):
        ds.from_dlpack(AI(iface))


@pytest.mark.parametrize("layout, values", [
    ({"shape": (4,), "offset": 12}, [12, 13, 14, 15]),                     # ends at the end
    ({"shape": (4,), "strides": (-4,), "offset": 12}, [12, 8, 4, 0]),     # down to 0
    ({"shape": (2, 2), "strides": (1, 8), "offset": 6}, [[6, 14], [7, 15]]),  # F order, to the end
    ({"shape": (3, 0), "offset": 16}, [[], [], []]),                      # empty at the end
    ({"shape": (), "offset": 15}, 15),                                    # 0-d, last byte
])
def test_array_interface_data_buffer_layouts_inside_are_kept(layout, values, np):
    buf = bytearray(range(16))
    iface = {"typestr": "|u1", "version": 3, "data": buf}
    iface.update(layout)
    t = ds.from_dlpack(AI(iface))
    assert np.from_dlpack(t).tolist() == values
    assert np.asarray(AI(iface)).tolist() == values  # numpy reads the same


def test_array_interface_non_contiguous_data_buffer_is_refused(np):
    data = memoryview(bytearray(16))[::2]
    with pytest.raises(BufferError, match="non-contiguous"):
        ds.from_dlpack(AI({"shape": (8,), "typestr": "|u1", "version": 3, "data": data}))


def test_array_interface_bool_and_complex(np):
    for arr in (np.array([True, False]), np.arange(3, dtype=np.complex64)):
        t = ds.from_dlpack(AI(dict(arr.__array_interface__), keep=arr))
        assert t.tobytes() == arr.tobytes()


@pytest.mark.parametrize("iface, match", [
    ({"shape": (2,), "typestr": "<M8", "version": 3, "data": (8, False)}, "typestr"),
    ({"shape": (2,), "typestr": "|V8", "version": 3, "data": (8, False)}, "typestr"),
    ({"shape": (2,), "typestr": BIG + "f4", "version": 3, "data": (8, False)}, "byte order"),
    ({"shape": (2,), "typestr": "<f4", "version": 3, "data": (8, False), "mask": object()},
     "mask"),
    ({"shape": (2,), "typestr": "<f4", "version": 3, "data": (8, False), "strides": (6,)},
     "multiple"),
    ({"typestr": "<f4", "version": 3, "data": (8, False)}, "shape"),
])
def test_array_interface_errors(iface, match):
    with pytest.raises(BufferError, match=match):
        ds.from_dlpack(AI(iface))


# ---- __cuda_array_interface__ ------------------------------------------------------

class CAI:
    def __init__(self, iface):
        self.__cuda_array_interface__ = iface


def test_cuda_interface_empty_array_needs_no_driver():
    t = ds.from_dlpack(CAI({"shape": (0,), "typestr": "<f4", "version": 3,
                            "data": (0, False), "stream": None}))
    assert t.device == (ds.DeviceType.kDLCUDA, 0) and t.size == 0
    iface = t.__cuda_array_interface__
    assert iface["shape"] == (0,) and iface["version"] == 3
    assert not hasattr(t, "__array_interface__")


@pytest.mark.parametrize("iface, exc, match", [
    ({"shape": (0,), "typestr": "<f4", "version": 3, "data": (0, False), "stream": 0},
     ValueError, "stream 0"),
    ({"shape": (0,), "typestr": "<f4", "version": 3, "data": (0, False), "mask": object()},
     ValueError, "mask"),  # CuPy raises ValueError too
    ({"shape": (0,), "typestr": "<f4", "version": 1, "data": (0, False)},
     BufferError, "version"),
    # Not an address (a real driver would dereference it: a crash on an H200).
    ({"shape": (0,), "typestr": "<f4", "version": 3, "data": (0, False), "stream": 7},
     ValueError, "stream 7 is not a CUDA stream"),
])
def test_cuda_interface_rules(iface, exc, match):
    with pytest.raises(exc, match=match):
        ds.from_dlpack(CAI(iface))


def test_cuda_interface_v2_ignores_stream_key():
    t = ds.from_dlpack(CAI({"shape": (0,), "typestr": "<i8", "version": 2,
                            "data": (0, False), "stream": 0}))
    assert t.dtype == "int64"


def test_cuda_interface_without_a_gpu_runtime_is_cuda_device_0(monkeypatch):
    # The interface does not carry the device; with no runtime to ask (the
    # fake drivers of test_gpu_fake.py ask one), no GPU of this process can
    # use the memory: (kDLCUDA, 0), and nothing reads it.
    monkeypatch.setenv("DLPACKSHIM_LIBCUDA", "/nonexistent/libcuda.so.1")
    monkeypatch.setenv("DLPACKSHIM_LIBHIP", "/nonexistent/libamdhip64.so")
    t = ds.from_dlpack(CAI({"shape": (4,), "typestr": "<f4", "version": 3,
                            "data": (0x7F0000001000, True)}))
    assert t.device == (2, 0) and t.readonly and t.data_ptr == 0x7F0000001000
    with pytest.raises(BufferError):
        t.tobytes()  # not host memory, and no runtime to copy it


def test_buffer_holders_release_the_export_and_start_afresh():
    """A buffer import's holder releases the export when it goes, and
    nothing of one import shows in the next."""
    import array

    grow = bytearray(b"abc")
    for _ in range(40):
        t = ds.from_dlpack(grow)
        with pytest.raises(BufferError):
            grow.append(0)  # the holder's export pins it
        del t
        grow.append(0)  # released when the holder went
    sources = [bytes(range(5)), bytearray(b"xy"), array.array("d", [1.5, 2.5]), memoryview(b"q")]
    for _ in range(20):
        for src in sources:
            t = ds.from_dlpack(src)
            assert t.tobytes() == bytes(memoryview(src).cast("B"))
            assert t.readonly == memoryview(src).readonly
            assert t.dtype == ("float64" if isinstance(src, array.array) else "uint8")


def test_a_memoryview_in_a_garbage_cycle_is_never_cleared_under_its_export():
    """CPython's memoryview tp_clear drops its buffer even while exported
    (ours), and its dealloc then crashes (seen at a Dask cluster's exit, the
    frames being memoryviews): the holder does not hand a memoryview it
    exports from to the garbage collector."""
    from conftest import run_python
    r = run_python("-c", """if True:
        import gc, pickle
        import dlpackshim as ds
        class Box: pass
        gc.disable()
        for _ in range(50):
            m = memoryview(bytearray(range(64)))  # older than the cycle: cleared first
            t = ds.from_dlpack(m)
            b = Box(); b.t = t; b.self = b
            del m, b, t
            gc.collect()
        for _ in range(50):
            frame = memoryview(bytearray(64))
            t = pickle.loads(pickle.dumps(ds.from_dlpack(bytearray(64)), protocol=5,
                                          buffer_callback=lambda b: False), buffers=[frame])
            b = Box(); b.t = t; b.self = b
            del frame, b, t
            gc.collect()
        print("ok")
    """, env={"PYTHONFAULTHANDLER": "1"}, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    assert "exported buffer" not in r.stderr, r.stderr
