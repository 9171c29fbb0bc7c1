"""The buffer protocol of Tensor (issue 33.1): memoryview(t), bytes(t),
hashlib, files, sockets, pyarrow.

The rules (docs/behaviour.md, "The buffer protocol"):
- host-readable memory only (kDLCPU, kDLCUDAHost, kDLCUDAManaged, ...);
  GPU memory is a BufferError;
- zero copy, with format, itemsize, shape and strides in bytes;
- dtypes without a struct format (bfloat16, float8, sub-byte, lanes > 1)
  are a BufferError that says t.tobytes() gives the bytes;
- a read-only Tensor never gives a writable buffer;
- a live buffer holds the memory: close() is deferred until the last view
  is released (the Tensor reads as closed at once).
"""
from __future__ import annotations

import array
import ctypes
import gc
import hashlib
import pickle
import socket
import struct
import sys
import weakref

import pytest

import producers as P

import dlpackshim as ds

np = pytest.importorskip("numpy")

# PyObject_GetBuffer's request flags (Include/pybuffer.h).
PyBUF_SIMPLE, PyBUF_WRITABLE = 0, 0x1
PyBUF_STRIDES = 0x10 | 0x8
PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS = (
    0x20 | PyBUF_STRIDES, 0x40 | PyBUF_STRIDES, 0x80 | PyBUF_STRIDES)


def get_buffer(obj, flags):
    """PyObject_GetBuffer(obj, flags), then PyBuffer_Release: what a C
    consumer asking exactly these flags gets (an exception, or nothing)."""
    view = (ctypes.c_char * 256)()  # a Py_buffer is about 80 bytes
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes, get.restype = (ctypes.py_object, ctypes.c_void_p, ctypes.c_int), ctypes.c_int
    get(obj, view, flags)  # PyDLL: raises the exception set
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes, release.restype = (ctypes.c_void_p,), None
    release(view)


FORMATS = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float16": "e", "float32": "f", "float64": "d",
    "complex64": "Zf", "complex128": "Zd", "bool": "?",
}

LAYOUTS = {
    "C": lambda a: a,
    "F": lambda a: np.asfortranarray(a),
    "every 2nd": lambda a: a[::2, ::2],
    "reversed": lambda a: a[::-1, ::-1],
    "transposed": lambda a: a.T,
    "0-d": lambda a: a[1, 1],
    "empty": lambda a: a[:0],
    "row": lambda a: a[2],
}


def sample(dtype, shape=(6, 5)):
    a = np.arange(np.prod(shape)).reshape(shape)
    if dtype == "bool":
        return (a % 3 == 0)
    if dtype.startswith("complex"):
        return (a + 1j * a[::-1]).astype(dtype)
    return a.astype(dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FORMATS)
def test_memoryview_is_the_tensors_memory(dtype, layout):
    a = np.asarray(LAYOUTS[layout](sample(dtype)))
    t = ds.from_dlpack(a)
    m = memoryview(t)
    assert m.format == FORMATS[dtype]
    assert m.itemsize == a.itemsize
    assert m.shape == a.shape
    assert m.strides == a.strides
    assert m.ndim == a.ndim and m.nbytes == a.nbytes
    assert not m.readonly
    if a.size:  # the same memory: zero copy
        assert np.asarray(m).__array_interface__["data"][0] == a.__array_interface__["data"][0]
    assert np.array_equal(np.asarray(m), a)
    if FORMATS[dtype] not in ("e", "Zf", "Zd"):  # formats memoryview itself cannot unpack
        assert m.tolist() == a.tolist()


@pytest.mark.parametrize("dtype", FORMATS)
def test_bytes_of_a_tensor_are_its_c_order_bytes(dtype):
    for layout in ("C", "F", "every 2nd"):
        a = LAYOUTS[layout](sample(dtype))
        t = ds.from_dlpack(a)
        # bytes() copies any layout in C order, as for a NumPy view
        assert bytes(t) == a.tobytes() and bytearray(t) == a.tobytes()
        assert memoryview(t).tobytes() == a.tobytes()


def test_the_padded_flag_of_whole_byte_elements_changes_nothing():
    """IS_SUBBYTE_TYPE_PADDED on float32 (a producer may set it; DLPack
    defines it for sub-byte types only): whole-byte elements lie the same
    padded or packed, so the buffer is float32's 'f' (it was refused: "no
    struct format"), pickle protocol 5 goes out of band, a legacy export is
    allowed, and the flag itself travels on."""
    a = np.arange(12, dtype=np.float32)
    cap, _ = P.make_capsule(versioned=True, data=a, shape=(12,), dtype=(2, 32, 1), padded=True)
    t = ds.from_dlpack(cap)
    assert t._flags & P.FLAG_IS_SUBBYTE_TYPE_PADDED
    m = memoryview(t)
    assert m.format == "f" and m.tolist() == a.tolist()
    assert bytes(t) == a.tobytes()
    buffers = []
    back = pickle.loads(pickle.dumps(t, protocol=5, buffer_callback=buffers.append),
                        buffers=buffers)
    assert len(buffers) == 1 and back.tobytes() == a.tobytes()
    assert back._flags & P.FLAG_IS_SUBBYTE_TYPE_PADDED
    assert np.array_equal(np.from_dlpack(t), a)
    assert ds.from_dlpack(t.__dlpack__()).tobytes() == a.tobytes()   # a legacy capsule
    # a padded sub-byte type keeps its refusals: no struct format, no legacy export
    cap4, _ = P.make_capsule(versioned=True, shape=(4,), dtype=(1, 4, 1), padded=True)
    t4 = ds.from_dlpack(cap4)
    with pytest.raises(BufferError, match="no struct format"):
        memoryview(t4)
    with pytest.raises(BufferError, match="padded sub-byte"):
        t4.__dlpack__()


def test_without_numpy_a_bytearray_tensor_is_viewed_without_a_copy():
    data = bytearray(b"hello world")
    t = ds.from_dlpack(data)
    m = memoryview(t)
    m[0] = ord("H")  # writes through to the bytearray
    assert data == b"Hello world" and m.format == "B" and m.shape == (11,)
    arr = array.array("d", [1.5, 2.5])
    m2 = memoryview(ds.from_dlpack(arr))
    assert m2.format == "d" and m2.tolist() == [1.5, 2.5]


def test_consumers_of_buffers_take_a_tensor(tmp_path):
    data = bytes(range(256)) * 16
    t = ds.from_dlpack(data)
    assert hashlib.sha256(t).hexdigest() == hashlib.sha256(data).hexdigest()
    path = tmp_path / "out.bin"
    with open(path, "wb") as f:
        assert f.write(t) == len(data)
    assert path.read_bytes() == data
    a, b = socket.socketpair()
    with a, b:
        a.sendall(ds.from_dlpack(data[:1000]))
        got = b''
        while len(got) < 1000:
            got += b.recv(1000)
    assert got == data[:1000]
    assert struct.unpack_from("<4B", t) == (0, 1, 2, 3)


def test_pyarrow_takes_a_tensor():
    pa = pytest.importorskip("pyarrow")
    a = np.arange(10, dtype=np.float64)
    buf = pa.py_buffer(ds.from_dlpack(a))
    assert buf.address == a.ctypes.data and buf.size == a.nbytes


def test_read_only_never_gives_a_writable_buffer():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    m = memoryview(t)
    assert m.readonly
    with pytest.raises(TypeError):
        m[0] = 1.0
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(t, PyBUF_WRITABLE)
    get_buffer(t, PyBUF_SIMPLE)  # a read-only request is served
    with pytest.raises(TypeError, match="not writable"):
        ctypes.c_char.from_buffer(t)
    with pytest.raises((TypeError, BufferError)):
        socket.socket().recv_into(t)
    assert ds.from_dlpack(b"abc").readonly and memoryview(ds.from_dlpack(b"abc")).readonly


@pytest.mark.parametrize("dtype, bits, lanes, padded", [
    ("bfloat16", 16, 1, False), ("float8_e4m3fn", 8, 1, False), ("int4", 4, 1, False),
    ("int4", 4, 1, True), ("float32x4", 32, 4, False),
])
def test_dtypes_without_a_struct_format_are_a_buffer_error(dtype, bits, lanes, padded):
    code = {"bfloat16": 4, "float8_e4m3fn": 10, "int4": 0, "float32x4": 2}[dtype]
    cap, _ = P.make_capsule(dtype=(code, bits, lanes), shape=(4,), padded=padded,
                            fill=bytes(range(64)))
    t = ds.from_dlpack(cap)
    with pytest.raises(BufferError, match="no struct format.*tobytes"):
        memoryview(t)
    assert len(t.tobytes()) == t.nbytes  # the bytes are there another way


def test_gpu_memory_is_a_buffer_error():
    # A capsule of kDLCUDA memory is imported without touching it (no driver
    # needed); any buffer of it is refused.
    cap, _ = P.make_capsule(dtype=(2, 32, 1), shape=(4,), device=(2, 0))
    g = ds.from_dlpack(cap)
    assert g.device == (2, 0)
    with pytest.raises(BufferError, match="host cannot read"):
        memoryview(g)


def test_pinned_memory_gives_a_buffer():
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(3,), device=(3, 0), fill=b"abc")
    assert bytes(ds.from_dlpack(cap)) == b"abc"


def test_close_while_a_view_lives_is_deferred():
    a = np.arange(1000.0)
    t = ds.from_dlpack(a)
    m = memoryview(t)
    t.close()
    assert t.closed
    with pytest.raises(ValueError, match="closed"):
        memoryview(t)
    del a
    gc.collect()
    # the view still reads the memory: the holder went with it
    assert m[999] == 999.0 and m.tolist()[:3] == [0.0, 1.0, 2.0]
    m.release()


def test_the_last_view_frees_the_memory():
    rec_cap, rec = P.make_capsule(dtype=(2, 64, 1), shape=(8,))
    t = ds.from_dlpack(rec_cap)
    del rec_cap
    m = memoryview(t)
    n = m[1:3]
    t.close()
    gc.collect()
    assert rec.deleter_calls == 0
    m.release()
    assert rec.deleter_calls == 0  # n still views it
    del n
    gc.collect()
    assert rec.deleter_calls == 1


def test_buffer_requests_that_need_contiguity():
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    t = ds.from_dlpack(a)
    for flags in (PyBUF_SIMPLE, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS):
        with pytest.raises(BufferError, match="not contiguous"):
            get_buffer(t, flags)
    assert memoryview(t).shape == (3, 2)  # a strided request is served
    f = ds.from_dlpack(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    assert np.asarray(memoryview(f)).flags.f_contiguous
    get_buffer(f, PyBUF_F_CONTIGUOUS)
    get_buffer(f, PyBUF_ANY_CONTIGUOUS)
    with pytest.raises(BufferError, match="not contiguous"):
        get_buffer(f, PyBUF_C_CONTIGUOUS)


def test_an_empty_tensors_huge_strides_are_not_multiplied_past_int64():
    """An empty tensor may carry any strides (no element is addressed), so
    their byte values can overflow: each is the producer's where it fits,
    else the itemsize (UBSan reported the overflow: make check-asan)."""
    t = ds.from_pointer(0, (0, 4), "float32", strides=(1 << 62, -(1 << 62)))
    m = memoryview(t)
    assert m.shape == (0, 4) and m.strides == (4, 4) and m.nbytes == 0
    t = ds.from_pointer(0, (0, 4), "float32", strides=(1 << 40, 3))
    assert memoryview(t).strides == (4 << 40, 12)


class PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p)]


@pytest.mark.parametrize("flags", [0x8, 0x8 | 0x4, PyBUF_STRIDES, PyBUF_STRIDES | 0x4,
                                   PyBUF_C_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS])
def test_a_scalar_buffer_has_no_shape_nor_strides(flags):
    """CPython's buffer protocol: for ndim 0, "shape, strides and suboffsets
    MUST be NULL", as NumPy's are."""
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes, get.restype = (ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int), ctypes.c_int
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes, release.restype = (ctypes.POINTER(PyBuffer),), None
    for obj in (np.array(5.0), ds.from_dlpack(np.array(5.0))):
        view = PyBuffer()
        get(obj, ctypes.byref(view), flags)
        try:
            assert (view.ndim, bool(view.shape), bool(view.strides), view.len) == (0, False, False, 8)
        finally:
            release(ctypes.byref(view))
    m = memoryview(ds.from_dlpack(np.array(5.0)))
    assert (m.ndim, m.shape, m.strides, m.tolist()) == (0, (), (), 5.0)


def test_views_do_not_leak_references():
    t = ds.from_dlpack(np.arange(4.0))
    before = sys.getrefcount(t)
    for _ in range(100):
        memoryview(t).release()
    assert sys.getrefcount(t) == before


@pytest.mark.parametrize("export", [memoryview, pickle.PickleBuffer])
def test_a_cycle_through_a_view_of_the_tensor_is_collected(export):
    """source -> view -> Tensor -> holder -> source: the view references the
    Tensor (seen by the collector), not the holder behind the collector's
    back, so the cycle is collected, as one through a bytearray's own view."""
    class Source(bytearray):
        pass

    died = []
    for _ in range(3):
        src = Source(1 << 16)
        src.view = export(ds.from_dlpack(src))
        weakref.finalize(src, died.append, True)
        del src
        gc.collect()
    assert died == [True] * 3


def test_close_keeps_lent_memory_and_the_lending_is_the_librarys_own():
    """A closed Tensor keeps its holder (_pinned) only while it has lent the
    data: a view until it goes, an array interface for good. _pinned cannot
    be set from Python (dropping it would free what a view reads), and
    nothing is lent by a closed Tensor."""
    t = ds.from_dlpack(np.arange(8.0))
    m = memoryview(t)
    t.close()
    assert t._pinned is not None
    with pytest.raises(AttributeError):
        t._pinned = None
    assert m[7] == 7.0
    m.release()
    assert t._pinned is None  # the last view went: nothing keeps the memory
    with pytest.raises(ValueError, match="closed"):
        t._lend()
    u = ds.from_dlpack(np.arange(8.0))
    # the interface's address goes to an array that references u, not its holder
    view = type("View", (), {"__array_interface__": u.__array_interface__, "tensor": u})()
    arr = np.asarray(view)
    u.close()
    assert u._pinned is not None and arr[7] == 7.0 and arr.base is view



def test_a_release_that_releases_the_same_view_again():
    """The last view of a closed Tensor drops its holder, which may run
    Python code (an owner's __del__) that releases the same view again: the
    second release finds nothing to do (it freed the export twice and took
    the Tensor's reference twice)."""
    buf = (ctypes.c_char * 64)()
    calls = []

    class Owner:
        def __del__(self):
            calls.append(True)
            pb.release()

    t = ds.from_pointer(ctypes.addressof(buf), (64,), "uint8", owner=Owner())
    pb = pickle.PickleBuffer(t)
    t.close()
    before = sys.getrefcount(t)
    pb.release()
    assert calls == [True] and sys.getrefcount(t) == before - 1
    with pytest.raises(ValueError):
        pb.raw()
