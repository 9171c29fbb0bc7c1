"""Lifetime: close(), context manager, exports outliving tensors, sources dying
first, reference cycles, threads and interpreter shutdown.

Deleter calls are counted by the ctypes producers of producers.py, which are
independent of dlpackshim.
"""
import os
import sys
import textwrap
import threading
import time
import weakref

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # producers.py
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

import dlpackshim as ds  # noqa: E402
from conftest import asan_options, run_python  # noqa: E402

np = pytest.importorskip("numpy")


class Owner:
    """A weak-referenceable owner for from_pointer."""

    def __init__(self, nbytes=64):
        self.buf = (P.ctypes.c_uint8 * nbytes)(*range(nbytes % 256 or 1))
        self.addr = P.ctypes.addressof(self.buf)


def wrap(cap):
    return P.CapsuleReturningProducer(lambda **kw: cap)


# ---------------------------------------------------------------------------
# close()
# ---------------------------------------------------------------------------
USES = [
    ("shape", lambda t: t.shape),
    ("strides", lambda t: t.strides),
    ("dtype", lambda t: t.dtype),
    ("data_ptr", lambda t: t.data_ptr),
    ("nbytes", lambda t: t.nbytes),
    ("size", lambda t: t.size),
    ("ndim", lambda t: t.ndim),
    ("tobytes", lambda t: t.tobytes()),
    ("__dlpack__", lambda t: t.__dlpack__(max_version=(1, 3))),
    ("__dlpack__legacy", lambda t: t.__dlpack__()),
    ("__array_interface__", lambda t: t.__array_interface__),
    ("np.from_dlpack", lambda t: np.from_dlpack(t)),
    ("ds.from_dlpack", lambda t: ds.from_dlpack(t)),
]


@pytest.mark.parametrize("use", USES, ids=[u[0] for u in USES])
def test_use_after_close_is_ValueError(use):
    t = ds.from_dlpack(np.arange(4.0))
    t.close()
    with pytest.raises(ValueError):
        use[1](t)


def test_close_twice_is_safe_and_deleter_runs_once():
    p = P.VersionedProducer(shape=(4,))
    t = ds.from_dlpack(p)
    assert p.deleter_calls == 0
    t.close()
    assert p.deleter_calls == 1, "close() releases the producer's tensor at once"
    t.close()
    del t
    collect()
    assert p.deleter_calls == 1


def test_close_then_del_legacy():
    p = P.LegacyProducer(shape=(4,))
    t = ds.from_dlpack(p)
    t.close()
    assert p.deleter_calls == 1
    t.close()
    del t
    collect()
    assert p.deleter_calls == 1


def test_repr_works_open_and_closed():
    t = ds.from_dlpack(np.arange(3, dtype=np.int16))
    r = repr(t)
    assert "int16" in r and "(3,)" in r
    t.close()
    r2 = repr(t)   # repr must not raise on a closed tensor
    assert isinstance(r2, str) and "clos" in r2.lower()


def test_del_without_close_releases():
    p = P.VersionedProducer(shape=(4,))
    t = ds.from_dlpack(p)
    del t
    collect()
    assert p.deleter_calls == 1


def test_from_pointer_owner_released_on_close():
    owner = Owner()
    base = sys.getrefcount(owner)
    wr = weakref.ref(owner)
    t = ds.from_pointer(owner.addr, (8,), "uint8", owner=owner)
    assert sys.getrefcount(owner) > base
    assert t.tobytes() == bytes(owner.buf)[:8]
    t.close()
    collect()
    assert sys.getrefcount(owner) == base
    del owner
    collect()
    assert wr() is None


def test_from_pointer_owner_kept_alive_by_tensor():
    owner = Owner()
    expect = bytes(owner.buf)[:16]
    wr = weakref.ref(owner)
    t = ds.from_pointer(owner.addr, (16,), "uint8", owner=owner)
    del owner
    collect()
    assert wr() is not None
    assert t.tobytes() == expect
    del t
    collect()
    assert wr() is None


# ---------------------------------------------------------------------------
# context manager
# ---------------------------------------------------------------------------
def test_context_manager_returns_self_and_closes():
    p = P.VersionedProducer(shape=(3,))
    with ds.from_dlpack(p) as t:
        assert isinstance(t, ds.Tensor)
        assert t.shape == (3,)
        assert p.deleter_calls == 0
    assert p.deleter_calls == 1
    with pytest.raises(ValueError):
        t.shape


def test_context_manager_closes_on_exception():
    p = P.VersionedProducer(shape=(3,))
    with pytest.raises(KeyError):
        with ds.from_dlpack(p) as t:
            raise KeyError("x")
    assert p.deleter_calls == 1
    with pytest.raises(ValueError):
        t.tobytes()


def test_exception_survives_release_during_unwinding():
    """A foreign deleter run while an exception propagates (the last reference
    dies with the frame) must not clobber that exception: call deleters
    "preserving any pending exception"."""
    p = P.VersionedProducer(shape=(3,))

    def f():
        t = ds.from_dlpack(p)  # noqa: F841 - dies during unwinding
        raise KeyError("must arrive intact")

    with pytest.raises(KeyError, match="must arrive intact"):
        f()
    collect()
    assert p.deleter_calls == 1


def test_exception_survives_release_of_export_during_unwinding():
    a = np.arange(3.0)

    def f():
        t = ds.from_dlpack(a)
        cap = t.__dlpack__(max_version=(1, 3))  # noqa: F841 - unconsumed, dies with the frame
        b = np.from_dlpack(t)  # noqa: F841
        raise LookupError("intact")

    base = sys.getrefcount(a)
    with pytest.raises(LookupError, match="intact"):
        f()
    collect()
    assert sys.getrefcount(a) == base


# ---------------------------------------------------------------------------
# exports outliving the tensor
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_capsule_outlives_closed_tensor():
    a = np.arange(6, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(6,))
    t = ds.from_dlpack(p)
    cap = t.__dlpack__(max_version=(1, 3))
    t.close()
    collect()
    assert p.deleter_calls == 0, "the export still needs the producer's memory"
    b = np.from_dlpack(wrap(cap))
    assert b.tobytes() == a.tobytes()
    assert b.ctypes.data == a.ctypes.data
    del b
    collect()
    assert p.deleter_calls == 1
    del cap
    collect()
    assert p.deleter_calls == 1


def test_unconsumed_capsule_outlives_tensor_then_dies():
    p = P.VersionedProducer(shape=(6,))
    t = ds.from_dlpack(p)
    caps = [t.__dlpack__(max_version=(1, 3)), t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    del t
    collect()
    assert p.deleter_calls == 0
    del caps
    collect()
    assert p.deleter_calls == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_an_export_whose_fresh_name_was_set_back_is_deleted(versioned):
    """A consumer that sets a capsule's fresh name back with a string of its
    own (it took nothing): the export is deleted when the capsule dies, as
    NumPy's are (a defect: the destructor compared the name's address, and
    every such export kept its holder for good)."""
    p = P.VersionedProducer(shape=(6,))
    t = ds.from_dlpack(p)
    name = P.NAME_VERSIONED if versioned else P.NAME_LEGACY
    for _ in range(3):
        cap = t.__dlpack__(max_version=(1, 3) if versioned else None)
        assert P.PyCapsule_SetName(id(cap), P.static_name(name)) == 0
        del cap
    t.close()
    del t
    collect()
    assert p.deleter_calls == 1  # no export keeps the holder


@pytest.mark.parametrize("via", ["from_dlpack", "capsule_import"])
def test_an_export_our_consumer_took_then_renamed_back_is_not_deleted_again(via):
    """One of our consumers took our export (renamed "used_..."); a third
    party then sets the fresh name back: no consumer of ours takes it again,
    and the capsule's death leaves the tensor alone, it is the consumer's
    (defects: taken twice, or deleted twice by the destructor reading the
    name as text; crashes, so in a child)."""
    r = run_python("-c", textwrap.dedent(f"""
        import ctypes, gc
        import numpy as np, dlpackshim as ds
        import producers as P
        src = np.arange(6.0)
        t = ds.from_dlpack(src)
        cap = t.__dlpack__(max_version=(1, 3))
        if "{via}" == "from_dlpack":
            u = ds.from_dlpack(cap)
        else:
            from dlpackshim._ffi import ffi, lib
            out = ffi.new("const DLTensor **")
            assert lib.dlpackshim_capsule_import(ffi.cast("void *", id(cap)), out) == 0
        assert P.PyCapsule_SetName(id(cap), P.static_name(P.NAME_VERSIONED)) == 0
        try:  # not taken a second time
            ds.from_dlpack(cap)
            raise SystemExit("taken twice")
        except BufferError as e:
            assert "already consumed" in str(e), e
        from dlpackshim._ffi import ffi, lib
        out = ffi.new("const DLTensor **")
        assert lib.dlpackshim_capsule_import(ffi.cast("void *", id(cap)), out) < 0
        t.close()
        del cap, t
        gc.collect()
        if "{via}" == "from_dlpack":
            assert np.from_dlpack(u).tolist() == list(range(6)), "freed under the consumer"
            del u
            gc.collect()
        print("ok")
    """))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.numpy_min("2.1")
def test_numpy_view_outlives_tensor():
    a = np.arange(10, dtype=np.int64)
    p = P.VersionedProducer(data=a, shape=(10,), dtype=(0, 64, 1))
    t = ds.from_dlpack(p)
    b = np.from_dlpack(t)
    t.close()
    del t
    collect()
    assert p.deleter_calls == 0
    assert b.tolist() == list(range(10))
    b[3] = 99
    assert a[3] == 99
    del b
    collect()
    assert p.deleter_calls == 1


def test_chain_of_reimports():
    a = np.arange(5, dtype=np.float64)
    p = P.VersionedProducer(data=a, shape=(5,), dtype=(2, 64, 1))
    t = ds.from_dlpack(p)
    chain = [t]
    for i in range(20):
        chain.append(ds.from_dlpack(chain[-1] if i % 2 else chain[-1].__dlpack__(max_version=(1, 3))))
    last = chain[-1]
    assert last.data_ptr == a.ctypes.data
    del chain, t
    collect()
    assert p.deleter_calls == 0
    assert last.tobytes() == a.tobytes()
    last.close()
    del last
    collect()
    assert p.deleter_calls == 1


def test_closing_intermediate_of_chain_keeps_others_valid():
    a = np.arange(5, dtype=np.float64)
    t1 = ds.from_dlpack(a)
    t2 = ds.from_dlpack(t1)
    t3 = ds.from_dlpack(t2)
    t2.close()
    t1.close()
    assert t3.tobytes() == a.tobytes()


# ---------------------------------------------------------------------------
# the source dying first
# ---------------------------------------------------------------------------
def test_numpy_source_deleted_first():
    a = np.arange(1000, dtype=np.float64) * 3
    expect = a.tobytes()
    wr = weakref.ref(a)
    t = ds.from_dlpack(a)
    del a
    collect()
    assert wr() is not None, "the tensor keeps its source alive"
    for _ in range(3):
        np.ones(1000) * 7  # reuse freed memory if it was freed
    assert t.tobytes() == expect
    t.close()
    collect()
    assert wr() is None


def test_numpy_refcount_returns_to_baseline():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = sys.getrefcount(a)
    t = ds.from_dlpack(a)
    b = np.from_dlpack(t)
    c = ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    d = np.asarray(t)
    cap = t.__dlpack__()
    assert sys.getrefcount(a) > base
    del t, b, c, d, cap
    collect()
    assert sys.getrefcount(a) == base


def test_buffer_source_released():
    ba = bytearray(b"0123456789abcdef")
    t = ds.from_dlpack(ba)
    with pytest.raises(BufferError):
        ba.append(1)   # exported buffer: resizing must be refused while the view lives
    t.close()
    collect()
    ba.append(1)       # released: resizing works again
    assert len(ba) == 17


def test_buffer_source_released_on_del():
    import array
    arr = array.array("d", [1.0, 2.0, 3.0])
    t = ds.from_dlpack(arr)
    b = np.from_dlpack(t)
    del t
    collect()
    with pytest.raises(BufferError):
        arr.append(4.0)
    assert b.tolist() == [1.0, 2.0, 3.0]
    del b
    collect()
    arr.append(4.0)
    assert arr.tolist() == [1.0, 2.0, 3.0, 4.0]


# ---------------------------------------------------------------------------
# gc cycles
# ---------------------------------------------------------------------------
def test_tensor_in_python_cycle_is_collected():
    p = P.VersionedProducer(shape=(4,))

    class Holder:
        pass

    h = Holder()
    h.self = h
    h.t = ds.from_dlpack(p)
    h.cap = h.t.__dlpack__(max_version=(1, 3))
    del h
    collect()
    assert p.deleter_calls == 1


def test_owner_referencing_its_tensor_is_collected():
    """owner -> tensor -> owner: a cycle through the tensor's owner reference."""
    owner = Owner()
    wr = weakref.ref(owner)
    owner.t = ds.from_pointer(owner.addr, (4,), "uint8", owner=owner)
    del owner
    collect()
    assert wr() is None, "a cycle through from_pointer's owner is never collected (leak)"


def test_producer_referencing_its_import_is_collected():
    a = np.arange(4.0)

    class Src:
        def __init__(self):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    base = sys.getrefcount(a)
    s = Src()
    s.t = ds.from_dlpack(s)
    wr = weakref.ref(s)
    del s
    collect()
    assert wr() is None
    assert sys.getrefcount(a) == base


# ---------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_threads_import_export_close():
    shared_np = np.arange(256, dtype=np.float32)
    producers = [P.VersionedProducer(data=shared_np, shape=(256,), keep_capsules=False),
                 P.VersionedProducer(data=shared_np, shape=(16, 16), keep_capsules=False),
                 P.LegacyProducer(data=shared_np, shape=(64, 4), keep_capsules=False),
                 P.VersionedProducer(data=shared_np, shape=(8, 8), strides=(1, 8),
                                     readonly=True, keep_capsules=False)]
    expect = {id(p): None for p in producers}
    base = sys.getrefcount(shared_np)
    errors = []
    counts = [0] * 8
    stop = time.monotonic() + 2.0

    def work(k):
        i = 0
        try:
            while time.monotonic() < stop:
                p = producers[(k + i) % len(producers)]
                t = ds.from_dlpack(p)
                cap = t.__dlpack__(max_version=(1, 3))
                t2 = ds.from_dlpack(cap)
                if i % 3 == 0:
                    b = np.from_dlpack(t2)
                    assert b.ctypes.data == shared_np.ctypes.data
                    del b
                if i % 2 == 0:
                    t.close()
                data = t2.tobytes()
                if expect[id(p)] is None:
                    expect[id(p)] = data
                assert data == expect[id(p)]
                if i % 5 == 0:
                    t3 = ds.from_dlpack(t2, copy=True)
                    assert t3.tobytes() == data
                    t3.close()
                t2.close()
                t2.close()
                del t, t2, cap
                i += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        counts[k] = i

    threads = P.run_threads(work, [(k,) for k in range(8)], 30)
    assert not any(th.is_alive() for th in threads)
    assert not errors, errors[:3]
    assert sum(counts) > 100
    collect()
    for p in producers:
        assert p.exports > 0
        assert all(r.deleter_calls == 1 for r in p.records), "deleter counts unbalanced"
    assert sys.getrefcount(shared_np) == base


def test_threads_release_on_other_thread():
    """Tensors created on one thread and released on another."""
    p = P.VersionedProducer(shape=(32,), keep_capsules=False)
    tensors = [ds.from_dlpack(p) for _ in range(200)]
    caps = [t.__dlpack__(max_version=(1, 3)) for t in tensors[:100]]
    errors = []

    def release(chunk):
        try:
            for t in chunk:
                t.close()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    P.run_threads(release, [(tensors[i::4],) for i in range(4)])
    assert not errors
    collect()
    assert p.deleter_calls == 100  # the other 100 are held by unconsumed capsules
    th = threading.Thread(target=caps.clear)
    th.start()
    th.join()
    collect()
    assert p.deleter_calls == 200


# ---------------------------------------------------------------------------
# interpreter shutdown
# ---------------------------------------------------------------------------
def _run(code, timeout=120, lsan=True):
    env = {"PYTHONFAULTHANDLER": "1"}
    if not lsan:
        # LeakSanitizer's exit scan of this child crashes in LSan's own tracer
        # ("Tracer caught signal 11 ... fatal error", no report) under
        # make check-asan: AddressSanitizer still checks every access, the
        # plain and valgrind runs check the leaks.
        env.update(asan_options("detect_leaks=0"))
    return run_python("-X", "dev", "-c", textwrap.dedent(code), env=env, timeout=timeout)


def _assert_clean(r):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for bad in ("Fatal Python error", "Segmentation fault", "Traceback", "Exception ignored",
                "double free", "corrupted"):
        assert bad not in out, out


def test_shutdown_with_live_tensors_and_unconsumed_capsules():
    r = _run("""
        import gc, numpy as np, dlpackshim as ds, producers as P
        a = np.arange(100.0)
        t = ds.from_dlpack(a)
        caps = [t.__dlpack__(max_version=(1, 3)), t.__dlpack__()]
        copycap = t.__dlpack__(max_version=(1, 3), copy=True)
        b = np.from_dlpack(t)
        t2 = ds.from_dlpack(caps[0])
        buf = bytearray(1000)
        t3 = ds.from_dlpack(buf)
        class Cyc: pass
        c = Cyc(); c.c = c; c.t = ds.from_dlpack(np.ones(10)); c.cap = c.t.__dlpack__(max_version=(1, 3))
        tp = ds.from_pointer(a.ctypes.data, (10,), "float64", owner=a)
        print("ok")
    """, lsan=False)
    _assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_shutdown_with_ctypes_producer_tensors_alive():
    """Tensors holding foreign (ctypes callback) deleters alive at exit: the
    deleter may run during shutdown while Python still works, never after
    finalisation."""
    r = _run("""
        import sys, dlpackshim as ds, producers as P
        p = P.VersionedProducer(shape=(10,))
        t = ds.from_dlpack(p)
        caps = [t.__dlpack__(max_version=(1, 3)) for _ in range(3)]
        q = P.LegacyProducer(shape=(5,))
        u = ds.from_dlpack(q)
        class Cyc: pass
        c = Cyc(); c.c = c; c.t = ds.from_dlpack(P.VersionedProducer(shape=(3,)))
        # a tensor kept alive forever (leaked on purpose)
        leak = ds.from_dlpack(P.VersionedProducer(shape=(2,)))
        sys.modules["__leak__"] = leak
        print("ok")
    """)
    _assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_shutdown_with_tensor_in_daemon_thread():
    r = _run("""
        import threading, time, numpy as np, dlpackshim as ds
        a = np.arange(1000.0)
        def spin():
            while True:
                t = ds.from_dlpack(a)
                c = t.__dlpack__(max_version=(1, 3))
                t2 = ds.from_dlpack(c)
                t2.close()
        for _ in range(2):
            threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.3)
        print("ok")
    """)
    _assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_deleters_run_before_finalisation():
    """Live tensors of a ctypes producer release their memory while the
    interpreter still runs (module teardown), exactly once each."""
    r = _run("""
        import atexit, os, dlpackshim as ds, producers as P
        p = P.VersionedProducer(shape=(4,))
        t = ds.from_dlpack(p)
        fd = os.dup(1)
        def report():
            import gc; gc.collect()
        atexit.register(report)
        def on_delete(rec):
            os.write(fd, b"deleted %d\\n" % rec.deleter_calls)
        t2 = ds.from_dlpack(P.make_capsule(shape=(4,), on_delete=on_delete)[0])
        del t2
        import gc; gc.collect()
        t3 = ds.from_dlpack(P.make_capsule(shape=(4,), on_delete=on_delete)[0])
        print("end", flush=True)
    """)
    _assert_clean(r)
    lines = r.stdout.split()
    assert r.stdout.count("deleted 1") >= 1
    assert "end" in lines


@pytest.mark.numpy_min("2.1")
def test_foreign_deleter_called_with_pending_exception_is_preserved():
    """NumPy rejects a bfloat16 capsule: it sets its exception, then drops the
    capsule. That last reference releases the shim's export, which releases a
    ctypes producer's tensor. The producer's deleter must run "preserving any
    pending exception" (called with it cleared and restored after), so that
    NumPy's own error arrives, not a SystemError."""
    p = P.VersionedProducer(shape=(4,), dtype=(4, 16, 1))
    t = ds.from_dlpack(p)
    caps = [t.__dlpack__(max_version=(1, 3))]
    t.close()
    del t
    collect()
    assert p.deleter_calls == 0

    class Handoff:
        def __dlpack__(self, **kw):
            return caps.pop()   # NumPy holds the only reference

        def __dlpack_device__(self):
            return (1, 0)

    before = P.COUNTERS["deleter_pending_exception"]
    with pytest.raises(Exception) as ei:
        np.from_dlpack(Handoff())
    assert not isinstance(ei.value, SystemError), repr(ei.value)
    assert "dtype" in str(ei.value).lower() or "bfloat" in str(ei.value).lower(), repr(ei.value)
    collect()
    assert p.deleter_calls == 1
    assert P.COUNTERS["deleter_pending_exception"] == before, \
        "the producer's deleter ran with NumPy's exception pending"
