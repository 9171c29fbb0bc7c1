"""Safe by construction: the Tensor lifetime model under threads, hostile
producers, interrupts, shutdown, subinterpreters and re-imports.

Each test names the case of the "Safe by construction" issue it covers. Cases
that crashed before run in a child process, so that a crash fails the test
rather than the run.
"""

import gc
import ctypes
import os
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # producers.py
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

import dlpackshim as ds  # noqa: E402
from conftest import run_python  # noqa: E402

np = pytest.importorskip("numpy")


def _run(code, timeout=300):
    """Run `code` in a fresh interpreter (this package, the test helpers on
    the path); returns the CompletedProcess."""
    return run_python("-c", textwrap.dedent(code), env={"PYTHONFAULTHANDLER": "1"},
                      timeout=timeout)


def _assert_ok(r, expect=None):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    for bad in ("Fatal Python error", "Segmentation fault", "SystemError", "double free",
                "ERROR: AddressSanitizer", "corrupted"):
        assert bad not in out, out[-4000:]
    if expect is not None:
        assert expect in r.stdout, out[-4000:]


# ---- 1. close() from another thread --------------------------------------------

def test_close_from_another_thread_never_frees_memory_in_use():
    """Case 1: every operation completes with the right data or raises
    ValueError (closed), while another thread closes the only Tensor
    (ABI-mode cffi releases the GIL during each C call)."""
    r = _run("""
        import sys, threading, time, numpy as np, dlpackshim as ds
        big = np.arange(2048 * 2048, dtype=np.float64).reshape(2048, 2048)
        big_want = np.ascontiguousarray(big[:, ::2]).tobytes()
        done = 0
        # The issue's case: a long strided copy of a view only t holds, closed
        # mid-way; then copy=True, whose copy runs without the GIL.
        reads = [("tobytes", lambda t: t.tobytes(), 0.002, 6),
                 ("copy=True", lambda t: ds.from_dlpack(t, copy=True).tobytes(), 0.0005, 12)]
        for name, read, step, rounds in reads:
            for i in range(rounds):
                t = ds.from_dlpack(big.copy()[:, ::2])
                th = threading.Thread(target=lambda: (time.sleep(step * i), t.close()))
                th.start()
                try:
                    if read(t) != big_want:
                        sys.exit(name + ": wrong bytes")
                    done += 1
                except ValueError as e:
                    assert "closed" in str(e), e
                th.join()
                del t
        sys.setswitchinterval(1e-6)
        base = np.arange(256 * 256, dtype=np.float64).reshape(256, 256)
        want = np.ascontiguousarray(base[:, ::2]).tobytes()
        ops = {
            "shape": lambda t: t.shape == (256, 128) or sys.exit("shape"),
            "nbytes": lambda t: t.nbytes == len(want) or sys.exit("nbytes"),
            "is_contiguous": lambda t: t.is_contiguous is False or sys.exit("contig"),
            "array_interface": lambda t: np.asarray(t).tobytes() == want or sys.exit("iface"),
            # NumPy takes no capsules: dlpackshim consumes the copy's capsule
            "export_slow": lambda t: ds.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True)
                                                    ).tobytes() == want or sys.exit("slow"),
            "export_fast": lambda t: np.from_dlpack(t).tobytes() == want or sys.exit("fast"),
            # 256 KiB: copied with the GIL released, from t's own holder
            "copy": lambda t: ds.from_dlpack(t, copy=True).tobytes() == want or sys.exit("copy"),
        }
        for name, op in ops.items():
            for i in range(40):
                t = ds.from_dlpack(base.copy()[:, ::2])
                th = threading.Thread(target=t.close)
                th.start()
                try:
                    op(t)
                    done += 1
                except ValueError as e:
                    assert "closed" in str(e), e
                th.join()
                del t
        print("ok", done)
    """)
    _assert_ok(r, "ok")


def test_closed_tensor_raises_value_error_everywhere():
    t = ds.from_dlpack(np.arange(6.0))
    t.close()
    for op in (lambda: t.tobytes(), lambda: t.shape, lambda: t.nbytes,
               lambda: t.is_contiguous, lambda: t.__dlpack__(),
               lambda: t.__dlpack__(max_version=(1, 3), copy=True),
               lambda: t.__array_interface__, lambda: ds.from_dlpack(t)):
        with pytest.raises(ValueError, match="closed"):
            op()


def test_a_held_pin_keeps_the_memory_after_close():
    """The lifetime rule itself: what _pin returned outlives close()."""
    a = np.arange(8.0)
    t = ds.from_dlpack(a)
    holder, addr = t._pin()
    del a
    t.close()
    data_ptr = ctypes.c_void_p.from_address(addr).value  # DLTensor.data comes first
    data = ctypes.cast(ctypes.c_void_p(data_ptr), ctypes.POINTER(ctypes.c_double))
    assert [data[i] for i in range(8)] == list(range(8))
    del holder


# A tracer that closes the Tensor under test at the k-th line the package's
# Python code runs: a close() from another thread can land at any of them.
_CLOSE_AT = """
import os, sys, numpy as np, dlpackshim as ds
PKG = os.path.dirname(ds.__file__) + os.sep

class CloseAt:
    def __init__(self, k, t):
        self.k, self.n, self.t = k, 0, t

    def __call__(self, frame, event, arg):  # sys.settrace: a new frame
        return self.line if frame.f_code.co_filename.startswith(PKG) else None

    def line(self, frame, event, arg):
        if event == "line":
            if self.n == self.k:
                self.t.close()
            self.n += 1
        return self.line

def lines_run(op, t):
    tracer = CloseAt(-1, t)
    sys.settrace(tracer)
    try:
        op(t)
    finally:
        sys.settrace(None)
    return tracer.n

def run_closing_at(k, op, t):
    sys.settrace(CloseAt(k, t))
    try:
        return op(t)
    finally:
        sys.settrace(None)
"""


def test_a_close_at_any_line_of_an_operation_never_frees_data_in_use():
    """Issue 19, item 1 (np.asarray racing close()), made exhaustive: each
    operation is run once per line of the package's code it executes, with
    the only Tensor over the data closed at that line. It completes with the
    source's bytes (read after the freed memory was reused), or raises
    ValueError; an array made through an interface keeps its memory, and
    from_pointer's owner, as long as it lives."""
    r = _run(_CLOSE_AT + """
import gc, weakref
N = 4096
want = (np.arange(N, dtype=np.float64) + 1).tobytes()
want_strided = (np.arange(2 * N, dtype=np.float64) + 1)[::2].tobytes()

class Owner:  # from_pointer's owner: alive as long as the data is in use
    pass

def fresh(kind):
    src = np.arange((2 if kind == "strided" else 1) * N, dtype=np.float64) + 1
    if kind == "strided":
        return ds.from_dlpack(src[::2]), None  # only the Tensor holds the data
    if kind == "pointer":
        owner = Owner()
        owner.src = src
        return ds.from_pointer(src.__array_interface__["data"][0], (N,), "float64",
                               owner=owner), weakref.ref(owner)
    if kind == "cuda":  # a CUDA pointer is never read: the owner tells
        owner = Owner()
        return ds.from_pointer(0xD00000000000, (N,), "float64", device=(2, 0),
                               owner=owner), weakref.ref(owner)
    return ds.from_dlpack(src), None

def as_bytes(x):
    return x if isinstance(x, bytes) else np.asarray(x).tobytes()

OPS = {
    "np.asarray": ("plain", lambda t: np.asarray(t)),
    "np.asarray strided": ("strided", lambda t: np.asarray(t)),
    "np.asarray from_pointer": ("pointer", lambda t: np.asarray(t)),
    "__cuda_array_interface__": ("cuda", lambda t: t.__cuda_array_interface__),
    "tobytes": ("plain", lambda t: t.tobytes()),
    "tobytes strided": ("strided", lambda t: t.tobytes()),
    "np.from_dlpack": ("plain", lambda t: np.from_dlpack(t)),
    "__dlpack__ copy": ("plain", lambda t: ds.from_dlpack(
        t.__dlpack__(max_version=(1, 3), copy=True))),
    "__dlpack__ legacy copy": ("strided", lambda t: ds.from_dlpack(
        t.__dlpack__(copy=True))),
    "from_dlpack": ("plain", lambda t: ds.from_dlpack(t)),
    "from_dlpack copy": ("strided", lambda t: ds.from_dlpack(t, copy=True)),
    "from_dlpack cpu": ("plain", lambda t: ds.from_dlpack(t, device=(1, 0))),
}
closes = 0
for name, (kind, op) in OPS.items():
    t, _ = fresh(kind)
    n = lines_run(op, t)
    t.close()
    for k in range(n + 1):
        t, owner = fresh(kind)
        try:
            out = run_closing_at(k, op, t)
        except ValueError as e:
            assert "closed" in str(e), (name, k, e)
            continue
        closes += t.closed
        if kind == "cuda":  # the consumer's array would hold t, as here
            gc.collect()
            assert out["data"][0] == 0xD00000000000, (name, k)
            assert owner() is not None, f"{name}: owner freed, closed at line {k}"
            continue
        del t
        gc.collect()
        junk = [np.full(2 * N, -1.0) for _ in range(8)]  # reuses freed memory
        got = as_bytes(out)
        expected = want_strided if kind == "strided" else want
        assert got == expected, f"{name}: wrong bytes after a close() at line {k}"
        if owner is not None:
            assert owner() is not None, f"{name}: owner freed, closed at line {k}"
        del out, junk
print("ok", closes)
""")
    _assert_ok(r, "ok")


def test_np_asarray_racing_close_from_a_thread():
    """Issue 19, item 1 as found: a thread closes the only Tensor while
    np.asarray(t) runs. The main thread yields the GIL at a chosen line of the
    package's code (every line in turn) with a 1 us switch interval, so the
    close() lands anywhere, the property's body included. The array always
    holds the source's bytes."""
    r = _run(_CLOSE_AT + """
import threading, time
sys.setswitchinterval(1e-6)
N = 4096
want = (np.arange(N, dtype=np.float64) + 1).tobytes()

class YieldAt(CloseAt):
    def line(self, frame, event, arg):
        if event == "line":
            if self.n == self.k:
                time.sleep(0.0005)  # the closing thread runs now
            self.n += 1
        return self.line

def asarray(t):
    return np.asarray(t)

t = ds.from_dlpack(np.arange(N, dtype=np.float64) + 1)
n = lines_run(asarray, t)
done = closed_first = 0
for i in range(6 * (n + 1)):
    t = ds.from_dlpack(np.arange(N, dtype=np.float64) + 1)
    go = threading.Event()
    th = threading.Thread(target=lambda: (go.wait(), t.close()))
    th.start()
    sys.settrace(YieldAt(i % (n + 1), t))
    go.set()
    try:
        a = asarray(t)
    except ValueError:
        closed_first += 1
        continue
    finally:
        sys.settrace(None)
        th.join()
    del t
    junk = [np.full(N, -1.0) for _ in range(8)]  # reuses freed memory
    assert a.tobytes() == want, f"try {i}: the array lost its memory"
    done += 1
    del a, junk
print("ok", done, closed_first)
""")
    _assert_ok(r, "ok")


# ---- 2. long chains of re-imports ----------------------------------------------

def test_reimport_chain_does_not_nest():
    """Case 2: 300,000 re-imports, then the whole chain freed: no deep
    recursion (capsule destructor -> deleter -> next destructor)."""
    r = _run("""
        import numpy as np, dlpackshim as ds
        a = np.arange(16.0)
        # from_pointer: a writable versioned source, whatever NumPy's DLPack
        t = ds.from_pointer(a.ctypes.data, (16,), "float64", owner=a)
        for i in range(300_000):
            t = ds.from_dlpack(t)
        for i in range(1000):
            t = ds.from_dlpack(t.__dlpack__())  # legacy in, legacy out: allowed
        for i in range(1000):
            t = ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
        assert t.tobytes() == a.tobytes()
        del t
        print("ok")
    """)
    _assert_ok(r, "ok")


def test_reexport_references_the_root_owner():
    a = np.arange(4.0)
    t0 = ds.from_dlpack(a)
    t1 = ds.from_dlpack(t0)
    t2 = ds.from_dlpack(t1)
    t0.close()
    t1.close()
    assert np.from_dlpack(t2).tolist() == [0.0, 1.0, 2.0, 3.0]


def _manager_ctx(cap, name):
    """The manager_ctx of the DLManagedTensor(Versioned) a capsule points at."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    # DLManagedTensorVersioned: version (2 x uint32), then manager_ctx;
    # DLManagedTensor: the DLTensor (48 bytes on 64-bit), then manager_ctx.
    offset = 8 if name == b"dltensor_versioned" else 48
    return ctypes.c_void_p.from_address(get(cap, name) + offset).value


@pytest.mark.parametrize("versioned", [True, False])
def test_exports_of_a_reimported_export_reference_the_root_holder(versioned):
    """A Tensor made from a capsule of our own export shares the first
    Tensor's holder (the export's view is let go): however long the chain,
    nothing nests, every export references that holder, and it outlives every
    Tensor of the chain."""
    a = np.arange(4.0)
    t = ds.from_dlpack(a)
    root = t._holder
    kw = {"max_version": (1, 3)} if versioned else {}
    name = b"dltensor_versioned" if versioned else b"dltensor"
    for _ in range(3):
        t = ds.from_dlpack(t.__dlpack__(**kw))
        assert t._holder is root
        cap = t.__dlpack__(**kw)
        assert _manager_ctx(cap, name) == id(root)
    b = ds.from_dlpack(cap)
    del t, root
    gc.collect()
    assert b.tobytes() == a.tobytes()


# ---- 4. producers that change their struct after import -----------------------

def test_reexport_uses_the_snapshot_taken_at_import():
    """Case 4: the producer sets ndim = -1 and rewrites its shape after the
    import; our Tensor and its exports keep what was validated."""
    cap, rec = P.make_capsule(shape=(2, 3), dtype=(2, 64, 1), fill=bytes(range(48)))
    t = ds.from_dlpack(cap)
    rec.managed.dl_tensor.ndim = -1
    rec.managed.dl_tensor.shape[0] = 1 << 40
    assert t.shape == (2, 3)
    b = np.from_dlpack(t)
    assert b.shape == (2, 3) and b.tobytes() == bytes(range(48))
    legacy = ds.from_dlpack(t.__dlpack__())
    assert legacy.shape == (2, 3)
    assert t.tobytes() == bytes(range(48))


def test_null_strides_become_explicit_in_the_snapshot():
    cap, rec = P.make_capsule(shape=(2, 3), dtype=(2, 32, 1), null_strides=True,
                              version=(1, 1))
    t = ds.from_dlpack(cap)
    assert t.strides == (3, 1)
    assert np.from_dlpack(t).strides == (12, 4)


# ---- 5. writability is never laundered -----------------------------------------

def test_legacy_import_is_read_only_and_reexported_read_only():
    """Case 5: a legacy capsule has unknown writability."""
    prod = P.LegacyProducer(shape=(4,), dtype=(2, 64, 1))
    t = ds.from_dlpack(prod)
    assert t.dlpack_version is None
    assert t.readonly
    b = np.from_dlpack(t)  # NumPy asks for a versioned capsule: READ_ONLY set
    assert not b.flags.writeable
    assert not np.asarray(t).flags.writeable  # the array interface says read-only too
    # ... and it may still leave through the legacy ABI it came in by.
    cap = t.__dlpack__()
    assert P.capsule_name(cap) == b"dltensor"
    del cap


@pytest.mark.numpy_min("2.1")
def test_read_only_versioned_data_stays_behind_the_legacy_abi():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = ds.from_dlpack(a)
    assert t.readonly
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()
    assert not np.from_dlpack(t).flags.writeable


def test_jax_arrays_stay_immutable_through_dlpackshim():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(4.0)
    b = np.from_dlpack(ds.from_dlpack(x))
    assert not b.flags.writeable
    with pytest.raises(ValueError):
        b[0] = 42.0
    assert float(x[0]) == 0.0


@pytest.mark.numpy_min("2.1")
def test_writable_versioned_data_stays_writable():
    a = np.arange(4.0)
    b = np.from_dlpack(ds.from_dlpack(a))
    b[0] = 7.0
    assert a[0] == 7.0


def _flagless_dltensor_entry():
    """dltensor_from_py_object_no_sync of the library's exchange table,
    callable from Python with the GIL kept (as a C consumer calls it)."""
    table = ctypes.PyDLL(ds._ffi.library_path).dlpackshim_exchange_api
    table.restype = ctypes.c_void_p
    # DLPackExchangeAPI: the header (version, prev_api), then the allocator,
    # managed_tensor_from_py_object_no_sync, managed_tensor_to_py_object_no_sync,
    # dltensor_from_py_object_no_sync.
    address = ctypes.c_void_p.from_address(table() + 16 + 3 * 8).value
    proto = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(P.DLTensor))
    return proto(address)


def test_the_exchange_tables_bare_dltensor_follows_the_legacy_rule():
    """Issue 19, item 2: dltensor_from_py_object_no_sync hands out a DLTensor,
    which has no flags, as a legacy capsule has none: one rule for both.
    Read-only data is refused with BufferError (the table's contract: -1 and
    a Python exception), so nothing can write into a bytes object through it;
    data that came in flagless may leave flagless; padded sub-byte data is
    refused (it would be read packed); writable data is handed out."""
    entry = _flagless_dltensor_entry()
    view = P.DLTensor()
    src = bytes(range(8))
    t = ds.from_dlpack(src)
    with pytest.raises(BufferError, match="read-only"):
        entry(t, ctypes.byref(view))
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()  # the same rule, the same words
    assert src == bytes(range(8))
    legacy = ds.from_dlpack(P.LegacyProducer(shape=(4,), dtype=(2, 64, 1)))
    assert legacy.readonly
    assert entry(legacy, ctypes.byref(view)) == 0
    assert view.data == legacy.data_ptr
    cap, rec = P.make_capsule(shape=(4,), dtype=(0, 4, 1), padded=True)
    with pytest.raises(BufferError, match="padded"):
        entry(ds.from_dlpack(cap), ctypes.byref(view))
    a = np.arange(4.0)
    assert entry(ds.from_dlpack(a), ctypes.byref(view)) == 0
    assert view.data == a.__array_interface__["data"][0]


# ---- 6. padded sub-byte tensors ------------------------------------------------

def test_padded_subbyte_refused_through_the_legacy_abi():
    """Case 6: the legacy ABI cannot carry IS_SUBBYTE_TYPE_PADDED."""
    cap, rec = P.make_capsule(shape=(4,), dtype=(0, 4, 1), padded=True)
    t = ds.from_dlpack(cap)
    with pytest.raises(BufferError, match="padded"):
        t.__dlpack__()
    v = ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    assert v._flags & 4  # IS_SUBBYTE_TYPE_PADDED kept
    assert v.nbytes == 4


# ---- 12. use during interpreter finalization -----------------------------------

def test_from_dlpack_in_a_del_at_shutdown():
    """Case 12: works, or raises a real exception; never SystemError."""
    r = _run("""
        import os, numpy as np, dlpackshim as ds
        class Late:
            def __del__(self):
                try:
                    t = ds.from_dlpack(np.arange(3.0))
                    os.write(1, b"late " + repr(np.from_dlpack(t).tolist()).encode() + b"\\n")
                except Exception as e:
                    os.write(1, b"late raised " + type(e).__name__.encode() + b"\\n")
        keep = Late()
        keep.self = keep  # a cycle: collected during finalization
        print("ok")
    """)
    _assert_ok(r, "ok")


def test_every_route_works_in_a_del_at_shutdown():
    """Issue 19, item 3: a __del__ run by Py_FinalizeEx (Py_IsInitialized()
    already reads 0, sys.meta_path is None, the caller holds the GIL). Every
    import and export route works there as before shutdown: no SystemError
    (NULL without an exception), no "CPython is not running", no lazy import,
    no crash (a copy's capsule used to be NULL without an exception, which
    ctypes dereferences)."""
    r = _run("""
        import os, numpy as np, dlpackshim as ds
        try:
            import torch
        except ImportError:
            torch = None
        PINNED = 3  # kDLCUDAHost: host memory; the host waits for its stream
        ROUTES = {
            "from_dlpack(Tensor)": lambda: ds.from_dlpack(T),
            "from_dlpack(bytearray)": lambda: ds.from_dlpack(bytearray(b"abcd")),
            "from_dlpack(memoryview)": lambda: ds.from_dlpack(memoryview(b"abcd")),
            "from_dlpack(array interface)": lambda: ds.from_dlpack(Iface()),
            "from_dlpack(capsule)": lambda: ds.from_dlpack(A.__dlpack__(max_version=(1, 0))),
            "from_dlpack(copy=True)": lambda: ds.from_dlpack(A, copy=True),
            "from_dlpack(pinned, device=cpu)": lambda: ds.from_dlpack(P, device=(1, 0)),
            "from_dlpack_many": lambda: ds.from_dlpack_many([T, A, bytearray(3)]),
            "from_pointer": lambda: ds.from_pointer(A.__array_interface__["data"][0], (3,),
                                                    "float64", owner=A),
            "np.from_dlpack(Tensor)": lambda: np.from_dlpack(T),
            "np.from_dlpack(copy=True)": lambda: np.from_dlpack(T, copy=True),
            "np.from_dlpack(pinned, cpu)": lambda: np.from_dlpack(P, device="cpu"),
            "np.asarray(Tensor)": lambda: np.asarray(T),
            "__dlpack__(copy=True)": lambda: T.__dlpack__(max_version=(1, 3), copy=True),
            "__dlpack__(legacy copy)": lambda: T.__dlpack__(copy=True),
            "tobytes": lambda: T.tobytes(),
        }
        if torch is not None:
            ROUTES["torch.from_dlpack(Tensor)"] = lambda: torch.from_dlpack(T)
            ROUTES["from_dlpack(torch)"] = lambda: ds.from_dlpack(X)

        class Iface:
            def __init__(self):
                self.__array_interface__ = dict(A.__array_interface__)

        class Late:
            def __del__(self):
                for name, route in ROUTES.items():
                    try:
                        route()
                        os.write(1, f"{name}: ok\\n".encode())
                    except BaseException as e:
                        os.write(1, f"{name}: {type(e).__name__}: {e}\\n".encode())

        A = np.arange(3.0)
        T = ds.from_dlpack(np.arange(4.0))
        P = ds.from_pointer(A.__array_interface__["data"][0], (3,), "float64",
                            device=(PINNED, 0), owner=A)
        X = torch.arange(3.0) if torch is not None else None
        keep = Late()
        keep.self = keep  # a cycle: collected during finalization
        os.write(1, b"main done\\n")
    """)
    _assert_ok(r, "main done")
    results = [line for line in r.stdout.splitlines() if ": " in line]
    assert len(results) >= 16, r.stdout
    assert all(line.endswith(": ok") for line in results), r.stdout


def test_a_call_without_the_gil_at_shutdown_works_on_the_finalizing_thread():
    """During finalization only the thread that finalizes may take the GIL
    (another thread doing so hangs or ends; the library refuses it): C
    functions that take the GIL themselves, called there through cffi (which
    drops it), work and hang nothing: dlpackshim_capsule_import and
    dlpackshim_capsule_info (dlpackshim_py_retain refuses then, as
    documented: a reference taken then could never be dropped)."""
    r = _run("""
        import ctypes, os, sys, numpy as np, dlpackshim as ds
        from dlpackshim._ffi import ffi, lib
        A = np.arange(3.0)
        class Late:
            def __del__(self):
                obj = object()
                st = lib.dlpackshim_py_retain(ffi.cast("void *", id(obj)))
                os.write(1, f"retain {st}\\n".encode())
                cap = A.__dlpack__(max_version=(1, 0))
                t = ffi.new("const DLTensor **")
                st = lib.dlpackshim_capsule_import(ffi.cast("void *", id(cap)), t)
                msg = ffi.string(lib.dlpackshim_last_error()).decode()
                os.write(1, f"capsule_import {st} {t[0].shape[0]}: {msg}\\n".encode())
                t2 = ffi.new("const DLTensor **")
                st = lib.dlpackshim_capsule_info(ffi.cast("void *", id(cap)), t2, ffi.NULL,
                                                 ffi.NULL, ffi.NULL)
                os.write(1, f"capsule_info {st} {t2[0] == t[0]}\\n".encode())
        keep = Late()
        keep.self = keep
    """)
    _assert_ok(r, "retain -7")
    _assert_ok(r, "capsule_import 0 3: ")
    _assert_ok(r, "capsule_info 0 True")


@pytest.mark.parametrize("how", ["exit", "by hand", "by hand inside the exit"])
def test_atexit_functions_run_by_hand_are_not_the_interpreters_exit(how):
    """`atexit._run_exitfuncs()` called by a framework runs the package's
    hook, and Python goes on: other threads' releases must go on too (on
    3.11 and 3.12 every export freed on another thread leaked from then on:
    1.6 GiB for 200 copies of 8 MiB). CPython drops every handler then, so
    at the real exit a thread still takes the GIL in the atexit handlers
    that run (retain 0), where the package's hook would have refused it on
    3.11 and 3.12 (retain -7), as it still does when a handler runs them by
    hand inside the exit."""
    r = _run(f"""
        import atexit, os, threading

        # Another thread, started now: 3.12 starts no thread at exit. It
        # retains an object when asked, as a release from a worker would.
        ask, answered, said = threading.Event(), threading.Event(), []
        def other_thread():
            obj = object()
            while ask.wait():
                ask.clear()
                from dlpackshim._ffi import ffi, lib   # imported by then: the hook's order kept
                st = lib.dlpackshim_py_retain(ffi.cast("void *", id(obj)))
                if st == 0:
                    lib.dlpackshim_py_release(ffi.cast("void *", id(obj)))
                said.append(st)
                answered.set()
        threading.Thread(target=other_thread, daemon=True).start()

        def retain_in_a_thread(what):
            answered.clear()
            ask.set()
            answered.wait(60)
            os.write(1, f"{{what}} retain {{said[-1] if said else None}}\\n".encode())

        atexit.register(retain_in_a_thread, "exit")   # runs after the package's hook
        import dlpackshim as ds
        if {how!r} == "by hand":
            atexit._run_exitfuncs()
            atexit.register(retain_in_a_thread, "exit")
        if {how!r} == "by hand inside the exit":
            done = []
            def flush_all():   # runs them again, once, inside the exit
                if not done:
                    done.append(1)
                    atexit._run_exitfuncs()
            atexit.register(flush_all)
        import ctypes, gc, weakref
        buf = bytearray(8)
        addr = ctypes.addressof((ctypes.c_char * 8).from_buffer(buf))
        class Owner:
            pass
        refs = []
        def worker():   # a leaked release keeps its owner alive (RSS cannot tell under ASan)
            for _ in range(40):
                owner = Owner()
                refs.append(weakref.ref(owner))
                t = ds.from_pointer(addr, (8,), "uint8", owner=owner)
                cap = t.__dlpack__(max_version=(1, 3))
                del t, cap, owner   # the export's deleter runs on this thread
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        gc.collect()
        print("released", all(r() is None for r in refs), flush=True)
        retain_in_a_thread("running")
    """)
    _assert_ok(r, "released True")
    _assert_ok(r, "running retain 0")
    # 3.13 tells finalization itself (Py_IsFinalizing), which begins after
    # the atexit functions: a thread may still take the GIL there.
    refused = how != "by hand" and sys.version_info < (3, 13)
    _assert_ok(r, "exit retain -7" if refused else "exit retain 0")
    assert ("exit retain -7" in r.stdout) == refused, r.stdout


def test_exports_in_an_atexit_handler_run_after_the_packages_are_released():
    """Issue 31.2: an atexit handler registered before `import dlpackshim`
    runs after the package's own; the exports it makes of an mmap (through
    NumPy, through a capsule, through memoryview) are released when dropped,
    so m.close() works (it raised "cannot close exported pointers exist":
    the library took its own exit mark for finalization and kept every owner
    forever)."""
    r = _run("""
        import atexit, mmap, os
        def late():
            m = mmap.mmap(-1, 4096)
            t = ds.from_dlpack(m)
            a = np.from_dlpack(t)
            b = ds.from_dlpack(t.__dlpack__(max_version=(1, 0)))
            v = memoryview(t)
            del a, b, t, v
            m.close()
            os.write(1, b"closed\\n")
        atexit.register(late)
        import numpy as np, dlpackshim as ds
    """)
    _assert_ok(r, "closed")


def test_ctrl_c_anywhere_never_hangs_a_later_read():
    """Issue 31.5: a KeyboardInterrupt landing anywhere (the package's
    import, the first metadata read, a copy, pickling) leaves nothing locked:
    every later read works. The lazy parse of C type strings under cffi's
    lock, which hung them, is gone: no C declaration is parsed at run time."""
    r = _run("""
        import pickle, random, signal, sys, time
        signal.signal(signal.SIGALRM, signal.default_int_handler)
        rng = random.Random(31)
        def arm(lo, hi):  # one shot: at most one KeyboardInterrupt per arm
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(lo, hi))
        imports = hits = 0
        while "ds" not in globals():
            try:
                try:
                    arm(1e-3, 6e-2)
                    import dlpackshim as ds
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:  # also one landing in the finally
                imports += 1
        end = time.monotonic() + 2
        while time.monotonic() < end:
            try:
                try:
                    arm(1e-5, 3e-4)
                    t = ds.from_dlpack(bytearray(range(64)))
                    t.shape, t.strides, t.dtype, t.size, t.c_contiguous
                    u = ds.from_dlpack(t, copy=True)
                    memoryview(u).tobytes()
                    pickle.loads(pickle.dumps(u, protocol=5))
                    ds.from_pointer(t.data_ptr, (8,), "float64", owner=t).strides
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                hits += 1
        t = ds.from_dlpack(bytearray(range(64)))
        assert t.shape == (64,) and t.strides == (1,) and t.tobytes() == bytes(range(64))
        assert "pycparser" not in sys.modules
        print("ok", imports, hits)
    """, timeout=120)
    _assert_ok(r, "ok")
    assert int(r.stdout.split()[-1]) > 0, r.stdout  # interrupts did land


# ---- 13. subinterpreters -------------------------------------------------------

def test_subinterpreter_import_is_refused_and_main_is_unaffected():
    """Case 13: dlpackshim refuses to load in a subinterpreter (ImportError),
    and the main interpreter's Tensors stay of its own class."""
    try:
        import _interpreters  # noqa: F401 - 3.13+ (concurrent.interpreters' base in 3.14)
    except ImportError:
        pytest.importorskip("_xxsubinterpreters")  # 3.12
    r = _run("""
        import numpy as np, dlpackshim as ds
        try:
            import _interpreters as si  # 3.13+
        except ImportError:
            import _xxsubinterpreters as si
        # Own GIL (cffi refuses first) and shared GIL (our own check refuses).
        for config in (("isolated", "legacy") if hasattr(si, "exec") else (None,)):
            interp = si.create(config) if config else si.create()
            try:
                if config:
                    err = si.exec(interp, "import dlpackshim")
                    print(config, "imported" if err is None else
                          f"refused {err.type.__name__} {err.msg[:200]}")
                else:
                    si.run_string(interp, "import dlpackshim")
                    print(config, "imported")
            except Exception as e:
                print(config, "refused", type(e).__name__, str(e)[:200])
            finally:
                si.destroy(interp)
        t = ds.from_dlpack(np.arange(3.0))
        assert type(t) is ds.Tensor
        assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]
        print("ok")
    """)
    _assert_ok(r, "ok")
    tried = [line for line in r.stdout.splitlines() if line != "ok"]
    assert tried and all("refused" in line and "ImportError" in line for line in tried), r.stdout


@pytest.mark.xfail(sys.version_info[:2] == (3, 12), strict=True, run=True,
                   reason="CPython 3.12 and cffi: cffi refused in a subinterpreter, then NumPy and "
                          "cffi in the main one crash at exit, without dlpackshim (docs/behaviour.md)")
def test_a_refused_subinterpreter_import_leaves_the_exit_clean():
    """Case 13, the subinterpreter first and alive until the main one
    exits (its id held: 3.11 ends it with the last reference): its refused
    import left a cffi function in its atexit list, which hung CPython
    3.11's exit once NumPy had started its threads. Nothing is registered
    before the refusal."""
    try:
        import _interpreters  # noqa: F401 - 3.13+
    except ImportError:
        pytest.importorskip("_xxsubinterpreters")
    r = _run("""
        try:
            import _interpreters as si  # 3.13+: a shared GIL, as 3.11's
            interp = si.create("legacy")
            err = si.exec(interp, "import dlpackshim")
            print("refused", err.type.__name__)
        except ImportError:
            import _xxsubinterpreters as si
            interp = si.create()
            try:
                si.run_string(interp, "import dlpackshim")
            except Exception as e:
                print("refused", type(e).__name__, str(e)[:200])
        import numpy as np, dlpackshim as ds
        assert np.from_dlpack(ds.from_dlpack(np.arange(3.0))).tolist() == [0.0, 1.0, 2.0]
        print("ok")
    """, timeout=60)
    _assert_ok(r, "ok")
    assert "refused" in r.stdout and "ImportError" in r.stdout, r.stdout


# ---- 14. the producer's capsule destructor is kept --------------------------

_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # a dying capsule: no py_object


def test_producer_capsule_destructor_still_runs():
    """Case 14: the producer's capsule destructor runs once, when its capsule
    goes, which the import lets go of (as NumPy does): it sees the "used_"
    name and leaves the tensor, deleted once with the last Tensor."""
    calls = []
    rec = P.make_managed(shape=(3,), dtype=(2, 32, 1))

    @_DESTRUCTOR
    def destructor(cap):
        calls.append(("destructor", rec.deleter_calls))

    # A prototype of our own: the shared ctypes.pythonapi entry keeps its types.
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)(
        ("PyCapsule_New", ctypes.pythonapi))
    cap = new(rec.address, b"dltensor_versioned", destructor)
    t = ds.from_dlpack(cap)
    del cap
    collect()
    assert calls == [("destructor", 0)]  # the tensor is the Tensor's now
    del t
    collect()
    assert calls == [("destructor", 0)] and rec.deleter_calls == 1


def test_producer_destructor_sees_its_own_pointer_and_context():
    """The import leaves the capsule's pointer and context alone: its
    destructor sees them and a "used_" name, as after any consumer."""
    seen = []
    rec = P.make_managed(shape=(3,), dtype=(2, 32, 1))
    api = ctypes.pythonapi
    get_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api))
    get_ctx = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(("PyCapsule_GetContext", api))
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", api))
    set_ctx = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
        ("PyCapsule_SetContext", api))
    context = ctypes.create_string_buffer(8)

    @_DESTRUCTOR
    def destructor(cap):
        name = get_name(cap)
        seen.append((name, get_ptr(cap, name), get_ctx(cap), rec.deleter_calls))

    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)(
        ("PyCapsule_New", api))
    cap = new(rec.address, b"dltensor_versioned", destructor)
    assert set_ctx(cap, ctypes.addressof(context)) == 0
    t = ds.from_dlpack(cap)
    del cap
    collect()
    assert t.shape == (3,)
    assert seen == [(b"used_dltensor_versioned", rec.address, ctypes.addressof(context), 0)]
    del t
    collect()
    assert rec.deleter_calls == 1


# ---- 15. array interface of types NumPy cannot read ------------------------------

def test_complex32_has_no_array_interface():
    cap, rec = P.make_capsule(shape=(2,), dtype=(5, 32, 1))
    t = ds.from_dlpack(cap)
    assert not hasattr(t, "__array_interface__")
    assert t.tobytes() == bytes(8)


# ---- 16. an interrupt never frees twice ---------------------------------------

def test_interrupts_during_copies_do_not_double_free():
    """Case 16: KeyboardInterrupt raised at random points of
    from_dlpack(memoryview, copy=True) and of from_pointer."""
    r = _run("""
        import signal, time, numpy as np, dlpackshim as ds
        import os
        active = True
        pkg = os.path.dirname(ds.__file__)
        def boom(signum, frame):
            # Only inside the package: an interrupt of the test's own lines
            # would test nothing and could escape its try.
            if active and frame is not None and frame.f_code.co_filename.startswith(pkg):
                raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, boom)
        mv = memoryview(bytearray(range(64)))
        a = np.arange(16.0)
        end = time.monotonic() + 3
        n = hits = 0
        while active:
            try:
                if n == 0 and hits == 0:
                    signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
                if time.monotonic() > end:
                    active = False
                    break
                t = ds.from_dlpack(mv, copy=True)
                assert t.tobytes() == bytes(range(64))
                u = ds.from_pointer(a.ctypes.data, (16,), "float64", owner=a)
                assert np.from_dlpack(u)[3] == 3.0
                n += 1
            except KeyboardInterrupt:
                hits += 1
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        print("ok", n, hits)
    """)
    _assert_ok(r, "ok")


# ---- 17. re-importing the package ------------------------------------------------

def test_reimported_package_accepts_old_tensors():
    """Case 17: autoreload-style re-import. The new package binds the
    library anew: Tensors made from then on are of its class, by the old
    package's functions too, and the old Tensors and capsules still work.
    The docstrings the library keeps are copied once per process (under
    `make check-asan` a re-import's second copy was reported lost)."""
    r = _run("""
        import sys, numpy as np
        import dlpackshim as ds1
        a = np.arange(4.0)
        t1 = ds1.from_pointer(a.ctypes.data, (4,), "float64", owner=a)  # writable, versioned
        cap1 = t1.__dlpack__(max_version=(1, 3))
        class OldSub(ds1.Tensor):
            __slots__ = ()
        t6 = ds1.from_dlpack(a)
        t6.__class__ = OldSub   # a subclass of the old import's class
        for name in [m for m in sys.modules if m == "dlpackshim" or m.startswith("dlpackshim.")]:
            del sys.modules[name]
        import dlpackshim as ds2
        assert ds2.Tensor is not ds1.Tensor
        t2 = ds2.from_dlpack(t1)
        assert type(t2) is ds2.Tensor, type(t2)
        assert np.from_dlpack(t2).tolist() == [0.0, 1.0, 2.0, 3.0]
        t3 = ds2.from_dlpack(cap1)
        assert type(t3) is ds2.Tensor, type(t3)
        assert np.from_dlpack(t3).tolist() == [0.0, 1.0, 2.0, 3.0]
        t4 = ds1.from_dlpack(bytearray(16))
        assert type(t4) is ds2.Tensor, type(t4)
        assert isinstance(t1, ds1.Tensor) and t1.tobytes() == a.tobytes()
        t5 = ds1.from_dlpack(t2)
        assert np.from_dlpack(t5).tolist() == [0.0, 1.0, 2.0, 3.0]
        import copy, pickle
        for old in (t1, t6):  # old Tensors pickle and copy, as the new class
            for p in range(6):
                back = pickle.loads(pickle.dumps(old, protocol=p))
                assert type(back) is ds2.Tensor and back.tobytes() == a.tobytes(), p
            for how in (copy.copy, copy.deepcopy):
                c = how(old)
                assert type(c) is ds2.Tensor and c.tobytes() == a.tobytes()
        assert ds2.from_dlpack.__doc__ == ds1.from_dlpack.__doc__ and ds2.from_dlpack.__doc__
        assert ds2.from_dlpack_many.__doc__ == ds1.from_dlpack_many.__doc__
        assert "max_version" in ds2.Tensor.__dlpack__.__doc__
        print("ok")
    """)
    _assert_ok(r, "ok")


def test_reimports_leave_py_atexit_its_places():
    """Each import registers the package's exit hook, and the hook asked
    CPython's Py_AtExit (32 places for the whole process) for one each
    time: 40 re-imports left none for the next library."""
    r = _run("""
        import atexit, ctypes, sys

        def last():   # registered first: runs after every dlpackshim hook
            libc = ctypes.CDLL(None)
            ctypes.pythonapi.Py_AtExit.argtypes = [ctypes.c_void_p]
            print("Py_AtExit:", ctypes.pythonapi.Py_AtExit(ctypes.cast(libc.sync, ctypes.c_void_p)))

        atexit.register(last)
        for _ in range(40):
            for name in [m for m in sys.modules if m == "dlpackshim" or m.startswith("dlpackshim.")]:
                del sys.modules[name]
            import dlpackshim
    """)
    _assert_ok(r, "Py_AtExit: 0")


def test_the_library_outlives_the_handle_cffi_closes():
    """The Tensor type, the builtins and every capsule destructor point into
    libdlpackshim, so it stays loaded once Python is bound. cffi closes its
    handle when its Lib object dies, at exit before those objects: a pytest
    run of one test file crashed at exit under `make check-asan` when that
    close unloaded the library."""
    r = _run("""
        import numpy as np
        import dlpackshim as ds
        from dlpackshim import _ffi
        t = ds.from_dlpack(np.arange(3.0))
        cap = t.__dlpack__(max_version=(1, 3))
        _ffi.ffi.dlclose(_ffi.lib)   # the last handle to the library
        print(np.from_dlpack(ds.from_dlpack(np.arange(3.0))).tolist(), ds.from_dlpack(cap).shape)
        del t, cap
    """)
    _assert_ok(r, "[0.0, 1.0, 2.0] (3,)")


# ---- the stress test -----------------------------------------------------------

def test_stress_four_threads_import_export_close():
    """import / export / close / tobytes / np.from_dlpack from 4 threads with
    a 1 us switch interval, for a bounded time: no crash, right bytes."""
    r = _run("""
        import random, sys, threading, time, numpy as np, dlpackshim as ds
        sys.setswitchinterval(1e-6)
        base = np.arange(4096, dtype=np.int32).reshape(64, 64)
        want = {False: base.tobytes(), True: np.ascontiguousarray(base[:, ::2]).tobytes()}
        shared = [ds.from_dlpack(base) for _ in range(8)]
        errors, end = [], time.monotonic() + 4
        def worker(seed):
            rng = random.Random(seed)
            try:
                while time.monotonic() < end:
                    i = rng.randrange(len(shared))
                    t = shared[i]
                    op = rng.randrange(7)
                    try:
                        if op == 0:
                            shared[i] = ds.from_dlpack(base[:, ::2] if rng.random() < .5 else base)
                        elif op == 1:
                            t.close()
                        elif op == 2:
                            b = t.tobytes()
                            assert b in want.values(), "tobytes"
                        elif op == 3:
                            assert np.from_dlpack(t).tobytes() in want.values(), "export"
                        elif op == 4:
                            shared[i] = ds.from_dlpack(t)
                        elif op == 5:
                            assert np.asarray(t).tobytes() in want.values(), "iface"
                        else:
                            c = ds.from_dlpack(t, copy=True)
                            assert c.tobytes() in want.values(), "copy"
                    except ValueError as e:
                        assert "closed" in str(e), e
            except BaseException as e:
                errors.append(repr(e))
        ths = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for th in ths: th.start()
        for th in ths: th.join()
        assert not errors, errors
        print("ok")
    """)
    _assert_ok(r, "ok")


def test_the_cached_metadata_is_written_by_the_library_alone():
    """The package cached a Tensor's metadata (shape, strides, dtype, device,
    address) in a writable `_meta` slot, which tobytes, pickles and
    __array_interface__ trust: a caller who replaced it had them read
    anywhere (SIGSEGV). The C base now reads it from the holder's DLTensor
    itself, and the slot is read-only."""
    r = _run("""
        import pickle
        import numpy as np, dlpackshim as ds
        a = np.arange(3)
        t = ds.from_dlpack(a)
        assert t._meta is None           # not read yet
        lie = ((1 << 20,), (1,), ds.DType("int64"), ds.Device(2, 0), 0x1000)
        for tensor in (t, ds.from_dlpack(a)):
            tensor.shape if tensor is t else None
            for attempt in (lambda: setattr(tensor, "_meta", lie),
                            lambda: object.__setattr__(tensor, "_meta", lie),
                            lambda: delattr(tensor, "_meta")):
                try:
                    attempt()
                    raise SystemExit("_meta was written")
                except AttributeError:
                    pass
        assert t._meta[0] == (3,) and t._meta[4] == a.ctypes.data
        assert t.tobytes() == a.tobytes()
        for protocol in (2, 5):
            assert pickle.loads(pickle.dumps(t, protocol=protocol)).tobytes() == a.tobytes()
        i = t.__array_interface__
        assert i["data"][0] == a.ctypes.data and i["shape"] == (3,), i
        t.close()
        try:
            t._get_meta()
            raise SystemExit("a closed Tensor's metadata")
        except ValueError as e:
            assert "closed" in str(e)
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
