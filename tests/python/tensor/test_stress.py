"""Concurrency and lifetime under stress.

- 8 threads importing/exporting/closing shared producers (NumPy arrays, shim
  Tensors, ctypes producers) for a bounded time: no crash, no double free,
  every deleter called exactly once, reference counts back where they were.
- Interpreter shutdown with live tensors, unconsumed capsules, tensors whose
  producers are gone, consumer arrays of other libraries and a daemon thread
  still exchanging (subprocesses): exit status 0, no fatal error, and no
  deleter running once Python has finalised.
- 10^6 import/export rounds: RSS flat (< 1 MiB growth).

Knobs: DLPACKSHIM_STRESS_SECONDS (thread test, default 3),
DLPACKSHIM_STRESS_ROUNDS (default 10^6).
"""
from __future__ import annotations

import collections
import gc
import os
import random
import sys
import textwrap
import threading
import time

import pytest

import producers as P
from conftest import run_python

import dlpackshim as ds

np = pytest.importorskip("numpy")

SECONDS = float(os.environ.get("DLPACKSHIM_STRESS_SECONDS", "3"))
ROUNDS = int(os.environ.get("DLPACKSHIM_STRESS_ROUNDS", str(10 ** 6)))
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "") or "asan" in os.environ.get(
    "LD_PRELOAD", "")


_no_double_delete = P.no_double_delete_fixture(passes=1)


# ---------------------------------------------------------------------------
# 8 threads
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_eight_threads_shared_producers():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    ro = np.arange(8, dtype=np.int64)
    ro.flags.writeable = False
    shared_t = ds.from_dlpack(a)
    vp = P.VersionedProducer(shape=(3, 5), dtype=(2, 64, 1))
    lp = P.LegacyProducer(shape=(7,), dtype=(0, 32, 1))
    base_a, base_ro, base_vp = sys.getrefcount(a), sys.getrefcount(ro), sys.getrefcount(vp)
    handoff = collections.deque(maxlen=64)  # tensors closed by another thread
    errors = []
    ops = collections.Counter()
    stop = time.monotonic() + SECONDS

    def work(seed):
        rnd = random.Random(seed)
        try:
            while time.monotonic() < stop:
                k = rnd.randrange(10)
                ops[k] += 1
                if k == 0:
                    t = ds.from_dlpack(a)
                    b = np.from_dlpack(t)
                    assert b[1, 2] == 8.0
                    t.close()
                elif k == 1:
                    t = ds.from_dlpack(shared_t)
                    handoff.append(t)
                elif k == 2:
                    cap = shared_t.__dlpack__(max_version=(1, 3))
                    if rnd.random() < 0.5:
                        ds.from_dlpack(cap).close()
                    del cap  # unconsumed: the destructor deletes
                elif k == 3:
                    t = ds.from_dlpack(vp)
                    assert t.shape == (3, 5)
                    handoff.append(t)
                elif k == 4:
                    t = ds.from_dlpack(lp)
                    t.close()
                elif k == 5:
                    t = ds.from_dlpack(a, copy=True)
                    assert t.is_copied or t.data_ptr != a.ctypes.data
                    np.from_dlpack(t)
                elif k == 6:
                    try:
                        handoff.popleft().close()
                    except IndexError:
                        pass
                elif k == 7:
                    t = ds.from_dlpack(ro)
                    assert t.readonly
                    cap = t.__dlpack__(max_version=(1, 0))
                    t.close()
                    u = ds.from_dlpack(cap)
                    assert u.readonly
                elif k == 8:
                    cap, rec = P.make_capsule(shape=(2, 2), versioned=rnd.random() < 0.5)
                    t = ds.from_dlpack(cap)
                    del cap
                    handoff.append(t)
                else:
                    t = ds.from_dlpack(shared_t)
                    for _ in range(3):
                        t = ds.from_dlpack(t)  # re-export chains
                    t.close()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: races show up sooner
    try:
        P.run_threads(work, [(i,) for i in range(8)])
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:3]
    assert sum(ops.values()) > 1000, ops
    handoff.clear()
    shared_t.close()
    del shared_t
    gc.collect()
    assert sys.getrefcount(a) == base_a - 1  # shared_t's hold is gone too
    assert sys.getrefcount(ro) == base_ro
    assert sys.getrefcount(vp) == base_vp
    for p in (vp, lp):
        assert p.exports > 0
        assert all(r.deleter_calls == 1 for r in p.records), \
            [r for r in p.records if r.deleter_calls != 1][:5]


def test_threads_importing_one_capsule():
    """Many threads race to consume the same capsule: exactly one wins, the
    others get BufferError, the deleter runs once."""
    for _ in range(200):
        cap, rec = P.make_capsule(shape=(4,))
        results = []
        barrier = threading.Barrier(8)

        def take():
            barrier.wait()
            try:
                results.append(ds.from_dlpack(cap))
            except BufferError as e:
                results.append(e)

        P.run_threads(take, [()] * 8)
        tensors = [r for r in results if isinstance(r, ds.Tensor)]
        assert len(tensors) == 1, results
        assert all("already consumed" in str(r) for r in results if not isinstance(r, ds.Tensor))
        assert rec.deleter_calls == 0
        del tensors, results, cap
        gc.collect()
        assert rec.deleter_calls == 1


# ---------------------------------------------------------------------------
# Interpreter shutdown
# ---------------------------------------------------------------------------
# Every deleter of the ctypes producers below writes one line to a pipe (a
# raw fd: no Python buffering that finalisation could lose): "D <serial>
# <phase>", phase being "run" before the atexit handler ran and "exit" after
# (module teardown). A deleter called once Python has finalised cannot run
# Python code: it would crash the process (a ctypes callback on a dead
# interpreter), which the exit status and stderr show. The parent checks: exit
# status 0, no fatal error, every line well-formed, no serial deleted twice.
SHUTDOWN_PRELUDE = r"""
import atexit, gc, os, sys, threading
import producers as P
import dlpackshim as ds
import numpy as np
FD = int(sys.argv[1])
PHASE = ["run"]
def on_delete(rec, _w=os.write, _fd=FD, _phase=PHASE):
    _w(_fd, ("D %d %s\n" % (rec.serial, _phase[0])).encode())
_mm = P.make_managed
def make_managed(*a, **kw):
    kw.setdefault("on_delete", on_delete)
    return _mm(*a, **kw)
P.make_managed = make_managed
def _atexit(_w=os.write, _fd=FD):
    PHASE[0] = "exit"
    _w(_fd, b"ATEXIT\n")
atexit.register(_atexit)
"""

SCENARIOS = {
    "live_tensors_and_capsules": r"""
a = np.arange(10.0)
t1 = ds.from_dlpack(a)                      # live Tensor of a NumPy array
vp = P.VersionedProducer(shape=(3,))
t2 = ds.from_dlpack(vp)                     # live Tensor of a ctypes producer
cap_unconsumed, rec = P.make_capsule(shape=(2,))    # never consumed
cap_legacy, rec2 = P.make_capsule(shape=(2,), versioned=False)
export = t1.__dlpack__(max_version=(1, 3))   # our own capsule, unconsumed
b = np.from_dlpack(t2)                      # a NumPy array over a shim Tensor
class Cycle: pass
c = Cycle(); c.self = c; c.t = ds.from_dlpack(P.VersionedProducer(shape=(4,)))
""",
    "producers_gone": r"""
vp = P.VersionedProducer(shape=(5,))
t = ds.from_dlpack(vp)
view = np.from_dlpack(t)
del vp                                       # the producer object is gone
cap = t.__dlpack__(max_version=(1, 3))
t.close(); del t                             # the Tensor too: capsule and view live
p = ds.from_pointer(P.make_managed(shape=(4,)).data_address, (4,), "float32",
                    owner=bytearray(16))
""",
    "daemon_thread_exchanging": r"""
a = np.arange(100.0)
vp = P.VersionedProducer(shape=(8,))
started = threading.Event()
def spin():
    started.set()
    while True:
        t = ds.from_dlpack(a); np.from_dlpack(t); t.close()
        ds.from_dlpack(vp).close()
        c = ds.from_dlpack(a).__dlpack__(max_version=(1, 3)); del c
threading.Thread(target=spin, daemon=True).start()
started.wait()
keep = [ds.from_dlpack(vp) for _ in range(50)]
""",
    "torch_consumers_at_exit": r"""
import torch
vp = P.VersionedProducer(shape=(6,))
t = ds.from_dlpack(vp)
x = torch.from_dlpack(t)                     # torch holds our export (its deleter runs w/o GIL)
y = torch.arange(6.0)
u = ds.from_dlpack(y)                        # we hold torch's tensor
z = np.from_dlpack(u)
del t
""",
    "exception_pending_at_exit": r"""
vp = P.VersionedProducer(shape=(3,))
keep = [ds.from_dlpack(vp) for _ in range(5)]
caps = [P.make_capsule(shape=(2,))[0] for _ in range(5)]
raise SystemExit(0)
""",
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_shutdown(name, tmp_path):
    if name.startswith("torch"):
        pytest.importorskip("torch")
    code = SHUTDOWN_PRELUDE + textwrap.dedent(SCENARIOS[name])
    # The child's log goes to a file, not a pipe: nothing reads a pipe until
    # the child ends, and a daemon thread's deleters can write more than a
    # pipe holds (a full pipe blocked one inside producers' lock, which the
    # main thread then waited for: a hang of the test, not of the library).
    log = str(tmp_path / "deletes.log")
    w = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = run_python("-c", code, str(w), pass_fds=(w,), timeout=120)
    finally:
        os.close(w)
    with open(log) as f:
        lines = f.read().splitlines()
    err = proc.stderr
    assert proc.returncode == 0, (proc.returncode, err[-3000:])
    for bad in ("Fatal Python error", "Segmentation fault", "Exception ignored",
                "Traceback", "AddressSanitizer"):
        assert bad not in err, err[-3000:]
    assert "ATEXIT" in lines, lines
    deletes = [ln for ln in lines if ln != "ATEXIT"]
    assert all(ln.split()[0] == "D" and ln.split()[2] in ("run", "exit") for ln in deletes), lines
    serials = [ln.split()[1] for ln in deletes]
    assert len(serials) == len(set(serials)), f"a deleter ran twice: {lines}"
    # what ran after the atexit handler did so during module teardown, in order
    after = lines[lines.index("ATEXIT") + 1:]
    assert all(ln.endswith(" exit") for ln in after), lines


# ---------------------------------------------------------------------------
# 10^6 rounds: memory flat
# ---------------------------------------------------------------------------
def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.skipif(UNDER_ASAN, reason="ASan's quarantine grows RSS on purpose; "
                                       "LeakSanitizer checks leaks in that run")
@pytest.mark.numpy_min("2.1")
def test_million_rounds_memory_flat():
    # (no ctypes producer here: producers.py keeps up to 20000 deleted
    # records on purpose, which would look like growth)
    a = np.arange(12.0).reshape(3, 4)
    fd, nfd = ds.from_dlpack, np.from_dlpack

    def rounds(n):
        for i in range(n):
            t = fd(a)                                  # import (versioned)
            b = nfd(t)                                 # export to NumPy
            c = t.__dlpack__(max_version=(1, 3))       # export, consumed by us
            u = fd(c)
            d = u.__dlpack__()                         # legacy export, unconsumed
            if not i % 100:
                fd(a, copy=True).close()               # the copy path
                fd(bytearray(8))                       # the buffer protocol
            del t, b, c, u, d

    rounds(20000)  # warm caches, free lists and arenas
    gc.collect()
    before = _rss()
    start = time.perf_counter()
    rounds(ROUNDS)
    elapsed = time.perf_counter() - start
    gc.collect()
    growth = _rss() - before
    print(f"{ROUNDS} rounds in {elapsed:.1f} s, RSS growth {growth / 1024:.0f} KiB")
    assert growth < 1024 * 1024, f"RSS grew by {growth} bytes over {ROUNDS} rounds"
