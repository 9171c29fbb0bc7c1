"""Devices and streams of the Python package, against the fake GPU runtimes.

tests/fakegpu builds libfakecuda.so and libfakehip.so (``make check``, or
``make check TESTS=`` to build without running): look-alikes of libcuda.so.1
and libamdhip64.so whose "device memory" lives in host RAM at addresses the
CPU cannot touch, with a log of every driver call and failure injection.
DLPACKSHIM_LIBCUDA / DLPACKSHIM_LIBHIP point the C library at them.

The C library loads a runtime once per process, and other test modules use
it without the fakes, so every test here runs in a fresh interpreter: the
pytest test spawns ``python test_gpu_fake.py <test name>`` with the fakes
configured, which runs the same function's body (:func:`in_child`). The
fakes' helpers (call log, allocations, streams) are reached through ctypes
on the very files the C library opened (dlopen hands back its instance).

What is checked, against the log: ``__dlpack__(stream=s)`` records an event
on the Tensor's stream and makes `s` wait on it, with no host
synchronisation; -1, None on the default stream and the same stream make no
driver call; disallowed stream values raise ValueError; host copies
(``dl_device=(kDLCPU, 0)``), GPU copies (``copy=True``) and ``tobytes`` move
the right bytes, strided layouts included; ``from_dlpack(x, stream=...,
device=..., copy=...)`` with CuPy-, PyTorch- and legacy-style producers; the
CUDA array interface both ways (stream field, device of the pointer);
pinned and managed memory; driver failures and a missing driver.

And the cases of issue 14, against fakes written from the vendors'
documentation (see docs/gpu.md, "What the fake runtimes model"): a HIP
runtime without devices, the ROCm 7 soname and a runtime already loaded
(RTLD_NOLOAD), ROCm 7's sticky last error, a producer on cuda:1 while
device 0 is current, managed memory's ordinal, the per-thread stream 2,
device-to-device pitches and the synchronised free of a GPU copy, the CUDA
array interface on ROCm, stream=0, pointer queries from worker threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import io
import json
import os
import sys

import pytest

from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BUILD = os.environ.get("top_builddir") or ROOT
FAKECUDA = os.path.join(BUILD, "tests", "fakegpu", ".libs", "libfakecuda.so")
FAKEHIP = os.path.join(BUILD, "tests", "fakegpu", ".libs", "libfakehip.so")
CHILD = os.environ.get("DLPACKSHIM_FAKEGPU_CHILD") == "1"

CPU0 = (1, 0)
kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM, kDLROCMHost, kDLCUDAManaged = 1, 2, 3, 10, 11, 13
KIND_DEVICE, KIND_PINNED, KIND_MANAGED = 0, 1, 2
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
SKIP_RC = 77


# ---- running each test in its own process ------------------------------------


def _child_env(extra):
    """The child's changes to the environment (run_python's env): the fakes, then `extra`."""
    return {"DLPACKSHIM_LIBCUDA": FAKECUDA, "DLPACKSHIM_LIBHIP": FAKEHIP,
            "DLPACKSHIM_FAKEGPU_CHILD": "1", **extra}


def in_child(fn=None, **env):
    """Run the test's body in a fresh interpreter with the fake runtimes.

    Keyword arguments are extra environment variables (None removes one).
    """
    if fn is None:
        return functools.partial(in_child, **env)

    @functools.wraps(fn)
    def wrapper(**kwargs):  # pytest passes parameters by name
        if CHILD:
            return fn(**kwargs)
        missing = [p for p in (FAKECUDA, FAKEHIP) if not os.path.exists(p)]
        if missing:
            pytest.skip(f"fake GPU runtimes not built ({', '.join(missing)}): run "
                        "`make check` (or `make check TESTS=`) and export top_builddir")
        r = run_python(os.path.abspath(__file__), fn.__name__, json.dumps(kwargs),
                       env=_child_env(env))
        if r.returncode == SKIP_RC:
            pytest.skip(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "skipped")
        if r.returncode != 0:
            pytest.fail(f"{fn.__name__} failed in its process (status {r.returncode}):\n"
                        f"{r.stdout}\n{r.stderr}", pytrace=False)

    return wrapper


# ---- the fakes' helpers ----------------------------------------------------------


class Fake:
    """ctypes handle on a fake runtime: memory, streams, the call log, failures."""

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        for name, res, args in [
            ("fake_log_text", ctypes.c_char_p, ()), ("fake_log_clear", None, ()),
            ("fake_calls", i, (ctypes.c_char_p,)), ("fake_fail_next", None, (ctypes.c_char_p, i)),
            ("fake_alloc", vp, (i, i, sz)), ("fake_free", i, (vp,)), ("fake_backing", vp, (vp,)),
            ("fake_live_allocs", i, ()), ("fake_stream_create", vp, (i, vp)),
            ("fake_live_events", i, ()),
        ]:
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args

    def log(self):
        return self.lib.fake_log_text().decode()

    def lines(self):
        return [ln for ln in self.log().splitlines() if ln]

    def clear(self):
        self.lib.fake_log_clear()

    def calls(self, fn):
        return self.lib.fake_calls(fn.encode())

    def fail_next(self, fn, code):
        self.lib.fake_fail_next(fn.encode(), code)

    def alloc(self, nbytes, kind=KIND_DEVICE, device=0, fill=None):
        p = self.lib.fake_alloc(kind, device, nbytes)
        assert p, "fake allocation failed"
        if fill is not None:
            self.write(p, fill)
        return p

    def write(self, p, data):
        ctypes.memmove(self.lib.fake_backing(p), bytes(data), len(data))

    def read(self, p, n):
        return ctypes.string_at(self.lib.fake_backing(p), n)

    def stream(self, device=0):
        return self.lib.fake_stream_create(device, None)

    def live_allocs(self):
        return self.lib.fake_live_allocs()


_fakes = {}


def cuda():
    if "cuda" not in _fakes:
        _fakes["cuda"] = Fake(FAKECUDA)
    return _fakes["cuda"]


def hip():
    if "hip" not in _fakes:
        _fakes["hip"] = Fake(FAKEHIP)
    return _fakes["hip"]


def ds():
    import dlpackshim

    return dlpackshim


def describe(cap):
    import producers

    return producers.describe_capsule(cap)


def cuda_tensor(nbytes=64, shape=(4, 4), dtype="float32", device=0, strides=None,
                kind=KIND_DEVICE):
    """A Tensor over fake CUDA memory filled with bytes 0, 1, 2, ...; and its pointer."""
    f = cuda()
    p = f.alloc(nbytes, kind=kind, device=device, fill=bytes(i % 251 for i in range(nbytes)))
    dev = {KIND_DEVICE: (kDLCUDA, device), KIND_PINNED: (kDLCUDAHost, 0),
           KIND_MANAGED: (kDLCUDAManaged, 0)}[kind]
    return ds().from_pointer(p, shape, dtype, strides=strides, device=dev), p


class FakeCupy:
    """A CuPy-like producer: ``__dlpack__`` hands out a capsule of a Tensor over
    fake device memory (so the stream handling is dlpackshim's own, on the
    fake driver). `refuse`: the exception it raises for a ``dl_device`` other
    than its own (None: it exports to the host itself, by copy)."""

    def __init__(self, tensor, refuse=None):
        self.t = tensor
        self.refuse = refuse
        self.calls = []

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append(dict(stream=stream, max_version=max_version, dl_device=dl_device,
                               copy=copy))
        if dl_device is not None and tuple(dl_device) != tuple(self.t.device) and self.refuse:
            raise self.refuse(f"FakeCupy cannot export to {dl_device}")
        return self.t.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device,
                                 copy=copy)


class LegacyGpu:
    """A producer from before 2023.12: ``__dlpack__(stream=None)`` only."""

    def __init__(self, tensor):
        self.t = tensor
        self.calls = []

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, stream=None):
        self.calls.append(dict(stream=stream))
        return self.t.__dlpack__(stream=stream)


class CAI:
    """Nothing but ``__cuda_array_interface__``."""

    def __init__(self, iface):
        self.__cuda_array_interface__ = iface


def expected_strided(data, offset, shape, strides, itemsize):
    """The C-order bytes of a strided view (strides in elements) of `data`."""
    out = bytearray()

    def walk(dim, off):
        if dim == len(shape):
            out.extend(data[off:off + itemsize])
            return
        for i in range(shape[dim]):
            walk(dim + 1, off + i * strides[dim] * itemsize)

    walk(0, offset)
    return bytes(out)


# ---- the runtime ---------------------------------------------------------------------


@in_child
def test_runtime_info_reports_the_fake_devices():
    from dlpackshim import _gpu

    info = _gpu.runtime_info()
    assert info["cuda"]["available"] and info["cuda"]["library"] == FAKECUDA
    assert info["cuda"]["driver_version"] == 12040
    assert info["cuda"]["devices"] == ["Fake CUDA Device 0", "Fake CUDA Device 1"]
    assert info["rocm"]["available"] and len(info["rocm"]["devices"]) == 2
    from dlpackshim.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["info"]) == 0
    text = out.getvalue()
    assert "CUDA driver       driver 12.4" in text and "Fake CUDA Device 1" in text
    assert "ROCm/HIP runtime  driver 6.2" in text


@in_child(DLPACKSHIM_LIBCUDA="/nonexistent/libcuda.so.1",
          DLPACKSHIM_LIBHIP="/nonexistent/libamdhip64.so")
def test_missing_driver_is_a_clear_error():
    t = ds().from_pointer(0xD00000000000, (4,), "float32", device=(kDLCUDA, 0))
    with pytest.raises(BufferError, match="CUDA driver not found.*nonexistent"):
        t.__dlpack__(stream=2)
    with pytest.raises(BufferError, match="CUDA driver not found"):
        t.__dlpack__(dl_device=CPU0, copy=True, max_version=(1, 3))
    with pytest.raises(BufferError, match="CUDA driver not found"):
        t.tobytes()
    # Nothing to synchronise needs no driver.
    t.__dlpack__(stream=1)
    t.__dlpack__(stream=-1)
    # The array interface: no driver to ask for the device -> (kDLCUDA, 0).
    u = ds().from_dlpack(CAI({"shape": (4,), "typestr": "<f4", "version": 3,
                              "data": (0xD00000000000, False), "stream": 1}))
    assert u.device == (kDLCUDA, 0)
    with pytest.raises(BufferError, match="stream 1 wait for the producer's stream 2.*"
                                          "CUDA driver not found"):
        ds().from_dlpack(CAI({"shape": (4,), "typestr": "<f4", "version": 3,
                              "data": (0xD00000000000, False), "stream": 2}))
    # A stream that is no address is refused before any driver is asked.
    with pytest.raises(ValueError, match="producer stream 9 is not a CUDA stream"):
        ds().from_dlpack(CAI({"shape": (4,), "typestr": "<f4", "version": 3,
                              "data": (0xD00000000000, False), "stream": 9}))
    from dlpackshim import _gpu

    assert not _gpu.runtime_info()["cuda"]["available"]


@in_child
def test_failing_cuInit_is_reported_with_the_drivers_words():
    cuda().fail_next("cuInit", 100)  # before the library loads the driver
    t = ds().from_pointer(0xD00000000000, (4,), "float32", device=(kDLCUDA, 0))
    with pytest.raises(BufferError, match="cuInit.*no CUDA-capable device is detected"):
        t.__dlpack__(stream=2)


# ---- __dlpack__(stream=...) ------------------------------------------------------------


@in_child
def test_dlpack_stream_records_an_event_and_the_consumer_waits():
    f = cuda()
    t, p = cuda_tensor()
    s = f.stream()
    assert t.stream == 1  # legacy default stream
    f.clear()
    cap = t.__dlpack__(stream=s, max_version=(1, 3))
    log = f.log()
    assert "cuEventRecord(E1, legacy)" in log
    assert "cuStreamWaitEvent(S1, E1 recorded on legacy, 0)" in log
    assert f.calls("cuStreamSynchronize") == 0 and f.calls("cuCtxSynchronize") == 0
    assert describe(cap)["data"] == p and describe(cap)["device"] == (kDLCUDA, 0)
    # The event is pooled: a second export creates none.
    f.clear()
    t.__dlpack__(stream=s, max_version=(1, 3))
    assert f.calls("cuEventCreate") == 0 and f.calls("cuStreamWaitEvent") == 1


@in_child
def test_no_driver_call_for_minus_one_default_and_same_stream():
    f = cuda()
    t, _ = cuda_tensor()
    f.clear()
    for stream in (-1, None, 1):
        t.__dlpack__(stream=stream, max_version=(1, 3))
        t.__dlpack__(stream=stream)
    assert f.log() == ""
    s = f.stream()
    u = ds().from_dlpack(FakeCupy(t), stream=s)
    assert u.stream == s
    f.clear()
    u.__dlpack__(stream=s, max_version=(1, 3))  # the stream it is ready on
    u.__dlpack__(stream=-1, max_version=(1, 3))
    assert f.log() == ""


@in_child
def test_per_thread_default_stream_is_a_stream_of_its_own():
    f = cuda()
    t, _ = cuda_tensor()
    f.clear()
    t.__dlpack__(stream=2, max_version=(1, 3))
    assert "cuStreamWaitEvent(per-thread, E1 recorded on legacy, 0)" in f.log()


@in_child
def test_disallowed_stream_values():
    t, _ = cuda_tensor()
    f = cuda()
    f.clear()
    with pytest.raises(ValueError, match="stream 0 is not allowed for CUDA"):
        t.__dlpack__(stream=0, max_version=(1, 3))
    with pytest.raises(ValueError, match="negative"):
        t.__dlpack__(stream=-5)
    with pytest.raises(TypeError, match="stream"):
        t.__dlpack__(stream="legacy")
    with pytest.raises(TypeError, match="stream"):
        t.__dlpack__(stream=True)
    assert f.log() == ""
    h = hip()
    r = ds().from_pointer(h.alloc(16), (4,), "float32", device=(kDLROCM, 0))
    for bad in (1, 2):
        with pytest.raises(ValueError, match="not allowed for ROCm"):
            r.__dlpack__(stream=bad, max_version=(1, 3))
    c = ds().from_dlpack(bytearray(8))
    for bad in (1, 2, 7):
        with pytest.raises(ValueError, match="CPU"):
            c.__dlpack__(stream=bad)
    c.__dlpack__(stream=-1)  # documented: "no synchronisation" is fine on the CPU


def test_refused_streams_say_has_stream_in_c_and_none_in_python():
    """Issue 21: the C API names "no stream" in C (has_stream = 0); the Python
    layer translates where it raises (None). No runtime is loaded."""
    from dlpackshim import _gpu
    import gpu_calls
    from dlpackshim._ffi import ffi, lib

    assert lib.dlpackshim_stream_check(kDLCPU, 1, 7, ffi.NULL) == lib.DLPACKSHIM_ERR_STREAM
    assert ffi.string(lib.dlpackshim_last_error()).decode() == (
        "stream 7 is not allowed for kDLCPU: it takes no stream (has_stream = 0) or -1")
    c = ds().from_dlpack(bytearray(8))
    with pytest.raises(ValueError) as info:
        c.__dlpack__(stream=7)
    assert str(info.value) == "stream 7 is not allowed for kDLCPU: it takes no stream (None) or -1"
    with pytest.raises(ValueError, match=r"the default stream is 0 \(or no stream, None\)$"):
        gpu_calls.check_stream(kDLROCM, 2)
    with pytest.raises(BufferError, match=r"device type 7: .* no stream \(None\) or -1$"):
        gpu_calls.check_stream(7, 3)


def test_device_rules_are_the_c_librarys():
    """The host-accessible set and what stream=None means per device type are
    the C library's answers (one home), as the standard states them."""
    from dlpackshim import _gpu
    import gpu_calls

    types = range(-2, 40)
    assert {t for t in types if _gpu.is_host_accessible(t)} == {
        kDLCPU, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged}
    assert {t for t in types if gpu_calls.is_on_device(t)} == {kDLCUDA, kDLROCM}
    expected = {kDLCPU: -1, kDLCUDA: 1, kDLCUDAHost: 1, kDLCUDAManaged: 1, kDLROCM: 0,
                kDLROCMHost: 0, 7: -1, 14: -1, 99: -1}
    assert {t: _gpu.default_stream(t) for t in expected} == expected
    assert {t: gpu_calls.check_stream(t, None) for t in expected} == expected
    assert not gpu_calls.has_streams(kDLCPU) and gpu_calls.has_streams(kDLCUDAHost)


@in_child
def test_stream_of_another_device_uses_that_devices_context():
    f = cuda()
    t, _ = cuda_tensor(device=1)
    s = f.stream(device=1)
    f.clear()
    t.__dlpack__(stream=s, max_version=(1, 3))
    log = f.log()
    assert "cuCtxPushCurrent_v2(ctx1)" in log
    assert "cuStreamWaitEvent(S1, E1 recorded on legacy, 0) [ctx1]" in log


@in_child
def test_rocm_stream_sync_and_default_stream():
    h = hip()
    p = h.alloc(16, fill=bytes(range(16)))
    t = ds().from_pointer(p, (4,), "float32", device=(kDLROCM, 0))
    assert t.stream == 0
    s = h.stream()
    h.clear()
    t.__dlpack__(stream=0, max_version=(1, 3))
    t.__dlpack__(stream=None, max_version=(1, 3))
    t.__dlpack__(stream=-1, max_version=(1, 3))
    assert h.log() == ""
    t.__dlpack__(stream=s, max_version=(1, 3))
    log = h.log()
    assert "hipEventRecord(E1, null)" in log and "hipStreamWaitEvent(S1, E1 recorded on null" in log
    assert h.calls("hipStreamSynchronize") == 0
    assert t.tobytes() == bytes(range(16))


@in_child
def test_injected_driver_failure_is_buffer_error_with_the_drivers_words():
    f = cuda()
    t, _ = cuda_tensor()
    s = f.stream()
    t.__dlpack__(stream=s)  # loads the driver, makes the event
    f.fail_next("cuStreamWaitEvent", 700)
    with pytest.raises(BufferError, match="cuStreamWaitEvent.*an illegal memory access"):
        t.__dlpack__(stream=s, max_version=(1, 3))
    f.fail_next("cuMemcpyDtoHAsync_v2", 1)
    with pytest.raises(BufferError, match="cuMemcpyDtoHAsync_v2.*invalid argument"):
        t.__dlpack__(dl_device=CPU0, copy=True, max_version=(1, 3))
    f.fail_next("cuStreamSynchronize", 700)
    with pytest.raises(BufferError, match="cuStreamSynchronize"):
        t.tobytes()
    live = f.live_allocs()
    with pytest.raises(ValueError, match="stream 0 is not allowed"):
        t.__dlpack__(copy=True, stream=0, max_version=(1, 3))
    assert f.live_allocs() == live  # checked before any work
    f.fail_next("cuMemAlloc_v2", 2)
    with pytest.raises(BufferError, match="out of memory"):
        t.__dlpack__(copy=True, max_version=(1, 3))
    # Every failure left the context stack as it was, and it all still works.
    assert cuda().lib.fake_ctx_depth() == 0
    t.__dlpack__(stream=s, max_version=(1, 3))
    assert t.tobytes()[:4] == bytes(range(4))


@in_child
def test_memory_allocated_in_a_scope_that_will_not_close_is_freed():
    """cuMemAlloc succeeds, then popping the context fails: the copy raises
    the pop's error, and the memory it had is freed, not lost."""
    f = cuda()
    t, _ = cuda_tensor()
    ds().from_dlpack(t, copy=True)  # loads the driver, makes the context
    gc.collect()
    live = f.live_allocs()
    for _ in range(3):
        f.fail_next("cuCtxPopCurrent_v2", 999)
        with pytest.raises(BufferError, match="cuCtxPopCurrent_v2"):
            ds().from_dlpack(t, copy=True)
    gc.collect()
    assert f.live_allocs() == live


# ---- copies ---------------------------------------------------------------------------


@in_child
def test_host_copy_through_dl_device_has_the_device_bytes():
    f = cuda()
    t, p = cuda_tensor(nbytes=64, shape=(4, 4))
    f.clear()
    cap = t.__dlpack__(dl_device=CPU0, copy=True, max_version=(1, 3))
    d = describe(cap)
    assert d["device"] == CPU0 and d["flags"] & FLAG_IS_COPIED
    assert d["data"] % 256 == 0
    h = ds().from_dlpack(cap)
    assert h.device == CPU0 and h.is_copied
    assert h.tobytes() == f.read(p, 64)
    log = f.log()
    assert "cuMemcpyDtoHAsync_v2(dst=host, src=dev0:A1+0, 64, legacy)" in log
    assert "cuStreamSynchronize(legacy)" in log  # the host reads it next
    # copy=None: a copy is needed, so it is made.
    cap = t.__dlpack__(dl_device=CPU0, max_version=(1, 3))
    assert ds().from_dlpack(cap).tobytes() == f.read(p, 64)
    # tobytes does the same.
    assert t.tobytes() == f.read(p, 64)


@pytest.mark.parametrize("layout", ["every_other_column", "transposed", "reversed", "offset"])
@in_child
def test_host_copy_of_strided_layouts(layout):
    f = cuda()
    p = f.alloc(6 * 8 * 4, fill=bytes(i % 251 for i in range(6 * 8 * 4)))
    base = f.read(p, 6 * 8 * 4)
    shape, strides, offset = {
        "every_other_column": ((6, 4), (8, 2), 0),
        "transposed": ((8, 6), (1, 8), 0),
        "reversed": ((6, 8), (8, -1), 7),
        "offset": ((4, 5), (8, 1), 2 * 8 + 3),
    }[layout]
    t = ds().from_pointer(p + offset * 4, shape, "float32", strides=strides, device=(kDLCUDA, 0))
    want = expected_strided(base, offset * 4, shape, strides, 4)
    h = ds().from_dlpack(t.__dlpack__(dl_device=CPU0, copy=True, max_version=(1, 3)))
    assert h.shape == shape and h.is_contiguous and h.tobytes() == want
    assert t.tobytes() == want
    assert ds().from_dlpack(FakeCupy(t, refuse=BufferError), device=CPU0).tobytes() == want


@in_child
def test_copy_false_across_devices_is_buffer_error():
    t, _ = cuda_tensor()
    cuda().clear()
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(dl_device=CPU0, copy=False, max_version=(1, 3))
    with pytest.raises(BufferError, match="between a GPU and the host"):
        t.__dlpack__(dl_device=(kDLCUDA, 1), max_version=(1, 3))
    with pytest.raises(ValueError, match="CPU"):  # a CPU consumer has no stream
        t.__dlpack__(dl_device=CPU0, copy=True, stream=5)
    assert cuda().log() == ""


@in_child
def test_copy_true_on_the_device_is_new_memory_ordered_before_the_consumer():
    f = cuda()
    t, p = cuda_tensor()
    s = f.stream()
    live = f.live_allocs()
    f.clear()
    cap = t.__dlpack__(copy=True, stream=s, max_version=(1, 3))
    d = describe(cap)
    assert d["device"] == (kDLCUDA, 0) and d["flags"] & FLAG_IS_COPIED and d["data"] != p
    lines = f.lines()
    copy = next(i for i, ln in enumerate(lines) if ln.startswith("cuMemcpyDtoDAsync_v2"))
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("cuStreamWaitEvent(S1"))
    assert "legacy" in lines[copy] and copy < wait  # the consumer waits for the copy
    assert f.read(d["data"], 64) == f.read(p, 64)
    c = ds().from_dlpack(cap)
    assert c.is_copied and c.tobytes() == f.read(p, 64)
    assert f.live_allocs() == live + 1
    del c, cap
    import gc

    gc.collect()
    assert f.live_allocs() == live  # freed with the last holder
    assert f.calls("cuMemFree_v2") == 1


# ---- from_dlpack(stream=..., device=..., copy=...) ----------------------------------------


@in_child
def test_from_dlpack_passes_the_stream_to_a_gpu_producer():
    f = cuda()
    t, p = cuda_tensor()
    s = f.stream()
    prod = FakeCupy(t)
    f.clear()
    u = ds().from_dlpack(prod, stream=s)
    assert prod.calls[-1]["stream"] == s and prod.calls[-1]["max_version"] == (1, 3)
    assert "cuStreamWaitEvent(S1, E1 recorded on legacy, 0)" in f.log()
    assert u.stream == s and u.data_ptr == p
    # The Tensor is ready on s: a consumer on the legacy stream waits for s.
    f.clear()
    u.__dlpack__(max_version=(1, 3))
    assert "cuStreamWaitEvent(legacy, E1 recorded on S1, 0)" in f.log()
    # ... and its CUDA array interface says so.
    assert u.__cuda_array_interface__["stream"] == s
    # Default: the legacy stream named explicitly (older PyTorch reads None as
    # "no synchronisation"); it is the Tensor's own stream: no event.
    f.clear()
    v = ds().from_dlpack(prod)
    assert prod.calls[-1]["stream"] == 1 and v.stream == 1
    assert f.calls("cuEventRecord") == 0 and f.calls("cuStreamSynchronize") == 0
    # 1 is the default: recorded as such.
    assert ds().from_dlpack(prod, stream=1).stream == 1
    # A legacy producer gets the stream too (stream predates max_version).
    old = LegacyGpu(t)
    w = ds().from_dlpack(old, stream=s)
    assert old.calls[-1] == {"stream": s} and w.stream == s


@in_child
def test_from_dlpack_checks_the_stream_before_calling_the_producer():
    t, _ = cuda_tensor()
    prod = FakeCupy(t)
    with pytest.raises(ValueError, match="stream 0 is not allowed"):
        ds().from_dlpack(prod, stream=0)
    with pytest.raises(TypeError):
        ds().from_dlpack(prod, stream=1.5)
    assert prod.calls == []
    r = ds().from_pointer(hip().alloc(16), (4,), "float32", device=(kDLROCM, 0))
    rprod = FakeCupy(r)
    with pytest.raises(ValueError, match="ROCm"):
        ds().from_dlpack(rprod, stream=1)
    assert rprod.calls == []
    s = hip().stream()
    hip().clear()
    assert ds().from_dlpack(rprod, stream=s).stream == s
    assert "hipStreamWaitEvent(S1" in hip().log()


@in_child
def test_cpu_producers_never_get_a_stream():
    import producers

    p = producers.VersionedProducer(shape=(3,))
    ds().from_dlpack(p, stream=-1)
    assert p.calls[-1]["stream"] is None
    with pytest.raises(ValueError, match="CPU"):
        ds().from_dlpack(producers.VersionedProducer(shape=(3,)), stream=5)
    with pytest.raises(ValueError, match="CPU"):
        ds().from_dlpack(bytearray(4), stream=5)
    assert cuda().log() == ""


@in_child
def test_from_dlpack_capsule_records_the_stream():
    f = cuda()
    t, _ = cuda_tensor()
    s = f.stream()
    u = ds().from_dlpack(t.__dlpack__(stream=s, max_version=(1, 3)), stream=s)
    assert u.stream == s
    with pytest.raises(ValueError):
        ds().from_dlpack(t.__dlpack__(max_version=(1, 3)), stream=0)


@in_child
def test_a_capsule_that_owns_its_data_alone_imported_with_a_stream():
    """The Tensor made of the capsule is its data's only owner when the
    stream is recorded: the data must outlive that first Tensor (a use after
    free under ASan before)."""
    f = cuda()
    t, p = cuda_tensor(nbytes=64, shape=(16,))
    cap = t.__dlpack__(max_version=(1, 3))
    del t
    gc.collect()
    s = f.stream()
    u = ds().from_dlpack(cap, stream=s)
    assert u.stream == s and u.shape == (16,) and u.data_ptr == p
    assert u.tobytes() == f.read(p, 64)


@pytest.mark.parametrize("refuse", ["none", "BufferError", "NotImplementedError", "TypeError"])
@in_child
def test_from_dlpack_to_host(refuse):
    f = cuda()
    t, p = cuda_tensor(nbytes=64, shape=(16,))
    exc = {"none": None, "BufferError": BufferError, "NotImplementedError": NotImplementedError,
           "TypeError": TypeError}[refuse]
    for copy in (True, None):
        prod = FakeCupy(t, refuse=exc)
        h = ds().from_dlpack(prod, device=CPU0, copy=copy)
        assert h.device == CPU0 and h.is_copied and h.tobytes() == f.read(p, 64)
        if exc is not TypeError or copy:  # (TypeError: the type is cached as not
            # taking dl_device after the first call)
            assert prod.calls[0]["dl_device"] == CPU0  # the producer is asked first
            assert prod.calls[0]["stream"] is None  # a CPU consumer has no stream
        if exc is not None:  # then taken as it is, and copied by dlpackshim
            assert prod.calls[-1]["dl_device"] is None
    # With a stream: the import is ordered before it, the copy runs on it.
    s = f.stream()
    prod = FakeCupy(t, refuse=BufferError if exc is None else exc)
    f.clear()
    h = ds().from_dlpack(prod, device=CPU0, stream=s)
    assert h.tobytes() == f.read(p, 64)
    assert prod.calls[-1]["stream"] == s
    assert "cuMemcpyDtoHAsync_v2(dst=host, src=dev0:A1+0, 64, S1)" in f.log()
    assert "cuStreamSynchronize(S1)" in f.log()
    # copy=False: ValueError (the standard's from_dlpack rule), producer not called.
    prod = FakeCupy(t, refuse=exc)
    with pytest.raises(ValueError, match="copy=False"):
        ds().from_dlpack(prod, device=CPU0, copy=False)
    assert prod.calls == []


@in_child
def test_a_legacy_gpu_producer_is_named_the_stream_on_every_route():
    """A producer from before 2023.12 (``__dlpack__(stream=None)``, PyTorch
    1.10-1.12, which reads a missing stream as "no synchronisation") got no
    stream on a plain import or with copy=True: the work queued on its side
    went unordered. Its device is asked once the keywords are refused."""
    t, _ = cuda_tensor()
    for kw in ({}, {"copy": True}, {"device": CPU0}):
        old = LegacyGpu(t)
        ds().from_dlpack(old, **kw)
        assert old.calls and all(c == {"stream": 1} for c in old.calls), (kw, old.calls)


@in_child
def test_copy_true_makes_the_producers_device_current_and_names_the_stream():
    """A PyTorch-like producer on cuda:1 exports only while its device is
    current: copy=True asked it with no device made current and no stream
    (BufferError), where a plain import and device= made it current."""
    f = cuda()
    current = f.lib.fake_current_ctx_device
    current.restype = ctypes.c_int
    t1, p = cuda_tensor(device=1)

    class TorchLike(FakeCupy):
        def __dlpack__(self, **kw):
            self.calls.append(dict(kw, current=current()))
            if current() != 1:
                raise BufferError("Can't export tensors on a different CUDA device index")
            return self.t.__dlpack__(**kw)

    for kw in ({}, {"device": CPU0}, {"copy": True}):
        x = TorchLike(t1)
        got = ds().from_dlpack(x, **kw)
        assert got.tobytes() == f.read(p, 64), kw
        last = x.calls[-1]   # (a plain import asks plainly first, as NumPy does)
        # (no stream with a host dl_device: a host consumer has none)
        assert last["current"] == 1 and last.get("stream") == (None if kw.get("device") else 1), \
            (kw, x.calls)
        assert len(x.calls) == (2 if not kw else 1), (kw, x.calls)
    assert current() == -1  # restored


@in_child
def test_from_dlpack_copy_true_on_the_gpu_of_a_legacy_producer():
    f = cuda()
    t, p = cuda_tensor()
    c = ds().from_dlpack(LegacyGpu(t), copy=True)
    assert c.device == (kDLCUDA, 0) and c.is_copied and c.data_ptr != p
    assert c.tobytes() == f.read(p, 64)


# ---- __cuda_array_interface__ -----------------------------------------------------------


@in_child
def test_cuda_array_interface_export():
    f = cuda()
    t, p = cuda_tensor(nbytes=96, shape=(4, 6), dtype="int32")
    cai = t.__cuda_array_interface__
    assert cai == {"shape": (4, 6), "typestr": "<i4", "descr": [("", "<i4")],
                   "data": (p, False), "strides": None, "version": 3, "stream": 1,
                   "mask": None}
    v = ds().from_pointer(p, (4, 3), "int32", strides=(6, 2), device=(kDLCUDA, 0),
                          readonly=True)
    cai = v.__cuda_array_interface__
    assert cai["strides"] == (24, 8) and cai["data"] == (p, True)
    empty = ds().from_pointer(0, (0,), "float32", device=(kDLCUDA, 0))
    assert empty.__cuda_array_interface__["data"] == (0, False)
    s = f.stream()
    assert ds().from_dlpack(FakeCupy(t), stream=s).__cuda_array_interface__["stream"] == s
    assert not hasattr(t, "__array_interface__")


@in_child
def test_cuda_array_interface_import_finds_the_device_and_waits_on_its_stream():
    f = cuda()
    t, p = cuda_tensor(device=1)
    s1 = f.stream(device=1)
    f.clear()
    u = ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=s1)))
    assert u.device == (kDLCUDA, 1) and u.data_ptr == p and u.stream == 1
    log = f.log()
    assert "cuPointerGetAttribute(9, dev1:A1+0)" in log  # DEVICE_ORDINAL
    assert "cuEventRecord(E1, S1) [ctx1]" in log
    assert "cuStreamWaitEvent(legacy, E1 recorded on S1, 0) [ctx1]" in log
    # Our own stream waits instead, and the Tensor remembers it.
    s2 = f.stream(device=1)
    f.clear()
    w = ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=s1)), stream=s2)
    assert "cuStreamWaitEvent(S2, E1 recorded on S1, 0)" in f.log() and w.stream == s2
    # None: ready, nothing to wait for; v2: no stream key at all.
    f.clear()
    ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=None)))
    ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, version=2, stream=s1)))
    assert f.calls("cuStreamWaitEvent") == 0
    # -1: the consumer synchronises itself.
    ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=s1)), stream=-1)
    assert f.calls("cuStreamWaitEvent") == 0
    # Data on device 0, ready on a stream of device 1 (CuPy names the current
    # device's stream): recorded there, waited for by device 0's legacy
    # stream (it was device 1's: device 0's was never ordered).
    t0, p0 = cuda_tensor(device=0)
    f.clear()
    v = ds().from_dlpack(CAI(dict(t0.__cuda_array_interface__, stream=s1)))
    assert v.device == (kDLCUDA, 0) and v.stream == 1
    log = f.log()
    assert "cuEventRecord(E1, S1) [ctx1]" in log
    assert "cuStreamWaitEvent(legacy, E1 recorded on S1, 0) [ctx0]" in log, log


@in_child
def test_cuda_array_interface_round_trip_and_errors():
    f = cuda()
    t, p = cuda_tensor(nbytes=64, shape=(4, 2), strides=(4, 2))  # every other float
    back = ds().from_dlpack(CAI(t.__cuda_array_interface__))
    assert back.device == t.device and back.data_ptr == p
    assert back.shape == (4, 2) and back.strides == (4, 2)
    assert back.tobytes() == t.tobytes()
    with pytest.raises(ValueError, match="stream 0"):
        ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=0)))
    # A stream of the wrong type is a TypeError, as every other field's (it
    # was a ValueError); no stream is negative; an int past int64 says so.
    for bad, exc, match in ((True, TypeError, "must be None or an int"),
                            (1.0, TypeError, "must be None or an int"),
                            ("1", TypeError, "must be None or an int"),
                            (-1, ValueError, "stream -1 is not a stream"),
                            (2**64, ValueError, "out of range")):
        with pytest.raises(exc, match=match):
            ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, stream=bad)))
    with pytest.raises(ValueError, match="mask"):
        ds().from_dlpack(CAI(dict(t.__cuda_array_interface__, mask=object())))
    host = ctypes.create_string_buffer(64)
    with pytest.raises(BufferError, match="not CUDA memory"):
        ds().from_dlpack(CAI(dict(t.__cuda_array_interface__,
                                  data=(ctypes.addressof(host), False))))
    f.fail_next("cuPointerGetAttribute", 700)
    with pytest.raises(BufferError, match="illegal memory access"):
        ds().from_dlpack(CAI(t.__cuda_array_interface__))


# ---- pinned and managed memory ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pinned", "managed"])
@in_child
def test_pinned_and_managed_memory(kind):
    from dlpackshim import _gpu
    import gpu_calls

    f = cuda()
    k = KIND_PINNED if kind == "pinned" else KIND_MANAGED
    want = kDLCUDAHost if kind == "pinned" else kDLCUDAManaged
    p = f.alloc(32, kind=k, fill=bytes(range(32)))
    assert gpu_calls.pointer_device(p) == (want, 0)
    # Through the CUDA array interface (managed memory), or DLPack (both).
    if kind == "managed":
        u = ds().from_dlpack(CAI({"shape": (8,), "typestr": "<f4", "version": 3,
                                  "data": (p, False), "stream": None}))
        assert u.device == (want, 0)
    t = ds().from_pointer(p, (8,), "float32", device=(want, 0))
    # Host-accessible: exported as kDLCPU without a copy, after the host waited.
    f.clear()
    cap = t.__dlpack__(dl_device=CPU0, max_version=(1, 3))
    assert describe(cap)["device"] == CPU0 and describe(cap)["data"] == p
    assert "cuStreamSynchronize(legacy)" in f.log()
    f.clear()
    h = ds().from_dlpack(t, device=CPU0, copy=False)
    assert h.device == CPU0 and h.data_ptr == p
    # The array interface (NumPy interop), after the same wait.
    f.clear()
    iface = t.__array_interface__
    assert iface["data"] == (p, False) and "cuStreamSynchronize(legacy)" in f.log()
    assert t.tobytes() == bytes(range(32))
    np = pytest.importorskip("numpy")
    assert np.asarray(t).tobytes() == bytes(range(32))
    assert np.from_dlpack(h).tobytes() == bytes(range(32))
    # A copy is made by the CPU, on kDLCPU.
    c = ds().from_dlpack(t, copy=True)
    assert c.is_copied and c.data_ptr != p and c.tobytes() == bytes(range(32))
    # Streams: CUDA's rules, an event wait, no host wait.
    s = f.stream()
    f.clear()
    t.__dlpack__(stream=s, max_version=(1, 3))
    assert "cuStreamWaitEvent(S1" in f.log() and f.calls("cuStreamSynchronize") == 0


@in_child
def test_rocm_pinned_memory_is_host_accessible():
    from dlpackshim import _gpu
    import gpu_calls

    h = hip()
    p = h.alloc(16, kind=KIND_PINNED, fill=bytes(range(16)))
    assert gpu_calls.pointer_device(p, kDLROCM) == (kDLROCMHost, 0)
    t = ds().from_pointer(p, (4,), "float32", device=(kDLROCMHost, 0))
    h.clear()
    assert t.__array_interface__["data"][0] == p
    assert "hipStreamSynchronize(null)" in h.log()
    assert t.tobytes() == bytes(range(16))


# ---- issue 14: the drivers as documented ----------------------------------------------------


def _fn(f, name, res, *args):
    fn = getattr(f.lib, name)
    fn.restype, fn.argtypes = res, list(args)
    return fn


@in_child(FAKEHIP_DEVICES="0", FAKEHIP_RUNTIME_VERSION="70000000")
def test_hip_without_a_gpu_leaves_host_pointers_to_the_cpu():
    """Case 1: a HIP package on a machine without an AMD GPU."""
    from dlpackshim import _gpu
    import gpu_calls

    host = ctypes.create_string_buffer(64)
    assert gpu_calls.pointer_device(ctypes.addressof(host)) == (kDLCPU, 0)  # any runtime
    assert gpu_calls.pointer_device(ctypes.addressof(host), kDLROCM) == (kDLCPU, 0)
    info = _gpu.runtime_info()["rocm"]
    assert info["available"] and info["devices"] == []
    assert hip().calls("hipPointerGetAttribute") == 0  # a runtime without devices is not asked
    assert _fn(hip(), "fake_peek_last_error", ctypes.c_int)() == 0  # nothing left pending
    # CUDA memory is still found, through the CUDA driver.
    t, p = cuda_tensor(device=1)
    assert ds().from_dlpack(CAI(t.__cuda_array_interface__)).device == (kDLCUDA, 1)


def _run_script(code, env):
    r = run_python("-c", code, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_rocm7_soname_and_the_runtime_already_loaded(tmp_path):
    """Case 2: libamdhip64.so.7 is found (newest first), and a HIP runtime
    already in the process (PyTorch's, CuPy's) is used, not a second one."""
    if not os.path.exists(FAKEHIP):
        pytest.skip("fake GPU runtimes not built: run `make check TESTS=` and export top_builddir")
    import shutil

    shutil.copy(FAKEHIP, tmp_path / "libamdhip64.so.7")  # a copy: another file, another instance
    os.symlink(FAKEHIP, tmp_path / "libamdhip64.so.6")
    env = _child_env({"DLPACKSHIM_LIBHIP": None, "LD_LIBRARY_PATH": str(tmp_path)})
    out = _run_script("from dlpackshim import _gpu\n"
                      "print(_gpu.runtime_info()['rocm']['library'])", env)
    assert out == "libamdhip64.so.7"
    out = _run_script(
        "import ctypes\n"
        "pre = ctypes.CDLL('libamdhip64.so.6')  # as if PyTorch had loaded it\n"
        "from dlpackshim import _gpu\n"
        "info = _gpu.runtime_info()['rocm']\n"
        "print(info['library'], pre.fake_calls(b'hipGetDeviceCount'))", env)
    assert out == "libamdhip64.so.6 1"  # the loaded instance answered, not the .so.7 copy


@in_child(FAKEHIP_RUNTIME_VERSION="70000000")
def test_rocm7_sticky_last_error_is_cleared_when_we_caused_it():
    """Case 3: ROCm 7 keeps a failed call's error until hipGetLastError."""
    from dlpackshim import _gpu
    import gpu_calls

    h = hip()
    peek = _fn(h, "fake_peek_last_error", ctypes.c_int)
    set_error = _fn(h, "fake_set_last_error", None, ctypes.c_int)
    host = ctypes.create_string_buffer(64)
    assert gpu_calls.pointer_device(ctypes.addressof(host), kDLROCM) == (kDLCPU, 0)
    assert "hipErrorInvalidValue" in h.log() and peek() == 0
    h.fail_next("hipEventRecord", 1)
    r = ds().from_pointer(h.alloc(16), (4,), "float32", device=(kDLROCM, 0))
    with pytest.raises(BufferError, match="hipEventRecord failed: hipErrorInvalidValue"):
        r.__dlpack__(stream=h.stream(), max_version=(1, 3))
    assert peek() == 0
    set_error(700)  # pending from someone else's kernel: not ours to clear
    h.clear()
    gpu_calls.pointer_device(ctypes.addressof(host), kDLROCM)
    assert peek() != 0 and h.calls("hipGetLastError") == 0
    set_error(0)


class DeviceCheckingProducer:
    """Behaves as ``torch.Tensor.__dlpack__`` does on several GPUs: refuses
    to export unless the tensor's device is the current one."""

    def __init__(self, tensor, current):
        self.t = tensor
        self.current = current
        self.seen = []

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        dev = self.current()
        self.seen.append((dev, stream))
        if dev != self.t.device[1]:
            raise BufferError(f"Can't export tensors on a different CUDA device index. "
                              f"Expected: {self.t.device[1]}. Current device: {dev}.")
        return self.t.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device,
                                 copy=copy)


@in_child
def test_gpu_producer_is_called_with_its_device_current():
    """Case 4: a tensor on cuda:1 while device 0 (or none) is current."""
    f = cuda()
    current = _fn(f, "fake_current_ctx_device", ctypes.c_int)
    t, p = cuda_tensor(device=1)
    prod = DeviceCheckingProducer(t, current)
    s1 = f.stream(device=1)
    for kwargs in ({}, {}, {"stream": s1}, {"device": CPU0}):
        u = ds().from_dlpack(prod, **kwargs)
        assert u.data_ptr == p or u.device == CPU0
    # A plain call goes out as NumPy's (no stream, no device asked); refused
    # on the wrong device, it is made again on the device __dlpack_device__
    # names, current, with the default stream named. Asked for a stream or a
    # device, the producer's device is made current first.
    assert prod.seen == [(-1, None), (1, 1), (-1, None), (1, 1), (1, s1), (1, None)]
    assert f.lib.fake_ctx_depth() == 0 and current() == -1  # and put back
    # ROCm: hipSetDevice around the call, the previous device restored.
    h = hip()
    cur = _fn(h, "fake_current_device", ctypes.c_int)
    r = ds().from_pointer(h.alloc(16, device=1), (4,), "float32", device=(kDLROCM, 1))
    rprod = DeviceCheckingProducer(r, cur)
    ds().from_dlpack(rprod)
    assert rprod.seen == [(0, None), (1, 0)] and cur() == 0  # device 0 restored


@in_child
def test_copy_false_is_asked_as_every_keyword_is():
    """from_dlpack(x, copy=False) of a GPU producer asks __dlpack_device__,
    makes that device current and names the default stream, as copy=True
    and copy=None with a stream do (docs/gpu.md): it went out as a plain
    call, stream None, and PyTorch refused it from another device."""
    f = cuda()
    current = _fn(f, "fake_current_ctx_device", ctypes.c_int)
    t, p = cuda_tensor(device=1)
    prod = DeviceCheckingProducer(t, current)
    u = ds().from_dlpack(prod, copy=False)
    assert u.data_ptr == p and u.stream == 1
    assert prod.seen == [(1, 1)] and current() == -1


@in_child
def test_a_host_copy_records_no_stream():
    """A CPU Tensor has no stream, whatever stream the import was asked
    with: a pinned or managed producer asked with copy=True and a stream
    hands over a host copy."""
    f = cuda()
    s = f.stream()
    for kind in (KIND_PINNED, KIND_MANAGED):
        t, _ = cuda_tensor(kind=kind)
        u = ds().from_dlpack(t, copy=True, stream=s)
        assert u.device == CPU0 and u.stream is None and u.is_copied
        v = ds().from_dlpack(t, stream=s)  # the memory itself: its stream kept
        assert v.device == t.device and v.stream == s


@in_child(DLPACKSHIM_LIBCUDA="/nonexistent")
def test_cuda_array_interface_streams_1_and_2_are_hips_default_for_pinned_memory_too():
    """The interface's 1 and 2 (its names for the default stream) are HIP's 0
    for ROCm pinned memory as for device memory (docs/gpu.md)."""
    h = hip()
    for kind, dev in ((KIND_DEVICE, (kDLROCM, 0)), (KIND_PINNED, (kDLROCMHost, 0))):
        p = h.alloc(64, kind=kind)
        for st in (1, 2):
            u = ds().from_dlpack(CAI({"shape": (16,), "typestr": "<f4", "version": 3,
                                      "data": (p, False), "stream": st}))
            assert u.device == dev


@in_child
def test_a_dl_device_no_one_can_reach_is_buffer_error_on_every_device():
    """__dlpack__(dl_device=<unknown type>) is BufferError for a GPU Tensor
    as for a CPU one (it was ValueError: the stream was judged for a device
    type without stream rules), and from_dlpack's device= alike."""
    g, _ = cuda_tensor()
    c = ds().from_dlpack(bytearray(64))
    for t in (g, c):
        for dd in ((99, 0), (0, 0), (kDLROCM, 0)):
            with pytest.raises(BufferError, match="cannot place data"):
                t.__dlpack__(dl_device=dd, max_version=(1, 3))
    with pytest.raises(BufferError, match="cannot place data"):
        ds().from_dlpack(FakeCupy(g), device=(99, 0))


@in_child
def test_managed_memory_keeps_its_device_ordinal():
    """Case 4: managed memory allocated against device 1 is waited for in
    device 1's context, not device 0's."""
    from dlpackshim import _gpu
    import gpu_calls

    f = cuda()
    p = f.alloc(32, kind=KIND_MANAGED, device=1, fill=bytes(range(32)))
    assert gpu_calls.pointer_device(p) == (kDLCUDAManaged, 1)
    t = ds().from_dlpack(CAI({"shape": (8,), "typestr": "<f4", "version": 3,
                              "data": (p, False), "stream": None}))
    assert t.device == (kDLCUDAManaged, 1)
    f.clear()
    assert t.tobytes() == bytes(range(32))
    assert "cuCtxPushCurrent_v2(ctx1)" in f.log() and "cuStreamSynchronize(legacy) [ctx1]" in f.log()
    s1 = f.stream(device=1)
    f.clear()
    t.__dlpack__(stream=s1, max_version=(1, 3))
    assert "cuStreamWaitEvent(S1, E1 recorded on legacy, 0) [ctx1]" in f.log()


@in_child
def test_per_thread_default_stream_is_not_recorded_on_a_tensor():
    """Case 4: stream 2 is another stream in every thread; the data is moved
    onto the legacy stream at import (event, no host wait) and 1 recorded."""
    import threading

    f = cuda()
    t, _ = cuda_tensor()
    f.clear()
    u = ds().from_dlpack(FakeCupy(t), stream=2)
    assert u.stream == 1
    log = f.lines()
    waits = [ln for ln in log if ln.startswith("cuStreamWaitEvent")]
    assert waits[0].startswith("cuStreamWaitEvent(per-thread, E1 recorded on legacy")
    assert waits[1].startswith("cuStreamWaitEvent(legacy, E") and "recorded on per-thread" in waits[1]
    assert f.calls("cuStreamSynchronize") == 0
    assert u.__cuda_array_interface__["stream"] == 1
    # Another thread's consumer stream waits on the legacy stream, not on
    # "its" per-thread stream.
    s = f.stream()
    f.clear()
    th = threading.Thread(target=lambda: u.__dlpack__(stream=s, max_version=(1, 3)))
    th.start()
    th.join()
    assert "recorded on legacy" in f.log() and "per-thread" not in f.log()
    # A capsule imported with stream=2 is treated the same.
    v = ds().from_dlpack(t.__dlpack__(stream=2, max_version=(1, 3)), stream=2)
    assert v.stream == 1


@in_child
def test_gpu_copy_is_freed_only_after_the_device_is_synchronised():
    """Case 5: cuMemFree only "may" wait; the copy's memory is freed after
    cuCtxSynchronize. Device-to-device pitches not from cuMemAllocPitch
    fall back to one copy a row."""
    import gc

    f = cuda()
    p = f.alloc(4 * 8 * 4, fill=bytes(i % 251 for i in range(128)))
    base = f.read(p, 128)
    t = ds().from_pointer(p, (4, 4), "float32", strides=(8, 1), device=(kDLCUDA, 0))
    f.clear()
    c = ds().from_dlpack(t.__dlpack__(copy=True, max_version=(1, 3)))
    log = f.log()
    assert "cuMemcpy2DAsync_v2(src=? pitch 32, dst=? pitch 16, 16x4, legacy) [ctx0] -> " \
           "CUDA_ERROR_INVALID_VALUE" in log
    assert f.calls("cuMemcpyDtoDAsync_v2") == 4
    assert c.tobytes() == expected_strided(base, 0, (4, 4), (8, 1), 4)
    f.clear()
    del c
    gc.collect()
    lines = f.lines()
    sync = next(i for i, ln in enumerate(lines) if ln.startswith("cuCtxSynchronize()"))
    free = next(i for i, ln in enumerate(lines) if ln.startswith("cuMemFree_v2"))
    assert sync < free and "in use by queued work" not in lines[free]


@in_child(DLPACKSHIM_LIBCUDA="/nonexistent/libcuda.so.1")
def test_cuda_array_interface_on_rocm_is_labelled_rocm():
    """Case 6: CuPy and PyTorch on ROCm expose __cuda_array_interface__."""
    h = hip()
    p = h.alloc(64, device=1, fill=bytes(range(64)))
    s1 = h.lib.fake_stream_create(1, None)
    h.clear()
    t = ds().from_dlpack(CAI({"shape": (16,), "typestr": "<f4", "version": 3,
                              "data": (p, False), "stream": s1}))
    assert t.device == (kDLROCM, 1) and t.stream == 0
    log = h.log()
    assert "hipEventRecord(E1, S1) [dev1]" in log
    assert "hipStreamWaitEvent(null, E1 recorded on S1, 0) [dev1]" in log
    assert t.tobytes() == bytes(range(64))
    # The interface's 1 (CuPy's name for the null stream) is HIP's 0: the same stream.
    h.clear()
    ds().from_dlpack(CAI({"shape": (16,), "typestr": "<f4", "version": 3,
                          "data": (p, False), "stream": 1}))
    assert h.calls("hipStreamWaitEvent") == 0
    with pytest.raises(ValueError, match="not allowed for ROCm"):
        ds().from_dlpack(CAI({"shape": (16,), "typestr": "<f4", "version": 3,
                              "data": (p, False), "stream": None}), stream=1)
    pinned = h.alloc(16, kind=KIND_PINNED)
    u = ds().from_dlpack(CAI({"shape": (4,), "typestr": "<f4", "version": 3,
                              "data": (pinned, False), "stream": None}))
    assert u.device == (kDLROCMHost, 0)
    assert _fn(h, "fake_peek_last_error", ctypes.c_int)() == 0


@in_child
def test_stream_zero_is_refused_with_the_reason():
    """Case 6: PyTorch 1.10-1.12 consumers pass stream=0; the standard
    disallows it for CUDA (ambiguous). Refused, saying why; and ROCm
    producers get their default stream 0 named."""
    t, _ = cuda_tensor()
    with pytest.raises(ValueError, match="PyTorch 1.10-1.12 consumers pass 0"):
        t.__dlpack__(stream=0)
    h = hip()
    r = ds().from_pointer(h.alloc(16), (4,), "float32", device=(kDLROCM, 0))
    prod = FakeCupy(r)
    ds().from_dlpack(prod)
    assert prod.calls[-1]["stream"] == 0


@in_child
def test_pointer_lookup_from_worker_threads():
    """Case 7: fresh threads have no current context (cuda.h lists
    CUDA_ERROR_INVALID_CONTEXT for cuPointerGetAttribute)."""
    import threading

    f = cuda()
    t, p = cuda_tensor(device=1)
    iface = t.__cuda_array_interface__
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(ds().from_dlpack(CAI(iface)).device)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and results == [(kDLCUDA, 1)] * 80
    assert "CUDA_ERROR_INVALID_CONTEXT" in f.log()  # what each fresh thread first got
    assert f.lib.fake_ctx_depth() == 0


# ---- fork(): a GPU runtime does not survive it (seen on an H200: a check-consumer worker
# forked from a process that had used CUDA got CUDA_ERROR_NOT_INITIALIZED) ------------------


def _in_forked_child(body):
    """Run body() in a fork()ed child; fails with its exception when it raised."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        os.close(r)
        try:
            body()
            msg = b""
        except BaseException as exc:  # reported to the parent
            msg = f"{type(exc).__name__}: {exc}".encode() or b"?"
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    assert not out, f"in the forked child: {out}"


@in_child
def test_a_forked_child_sees_the_runtimes_it_used_as_missing():
    from dlpackshim import _gpu

    pinned, _ = cuda_tensor(16, shape=(4,), kind=KIND_PINNED)
    device, _ = cuda_tensor(16, shape=(4,))
    assert pinned.tobytes() == bytes(range(16))  # the parent synchronised: CUDA is in use
    assert _gpu.runtime_info()["rocm"]["available"]
    f = cuda()

    def child():
        info = _gpu.runtime_info()
        for runtime in ("cuda", "rocm"):
            assert not info[runtime]["available"] and "fork()" in info[runtime]["error"], info
        f.clear()
        # Host-accessible memory: no GPU work of this process can be pending.
        assert pinned.tobytes() == bytes(range(16))
        # Device memory and streams: a clear error, and the driver is not called.
        with pytest.raises(BufferError, match="fork"):
            device.tobytes()
        with pytest.raises(BufferError, match="fork"):
            device.__dlpack__(stream=f.stream(0), max_version=(1, 3))
        assert f.log() == "", f.log()

    _in_forked_child(child)
    f.clear()  # the parent goes on using CUDA
    assert device.tobytes() == bytes(range(16)) and "cuMemcpy" in f.log()


@in_child
def test_a_child_forked_after_someone_else_initialised_cuda():
    """PyTorch (say) initialised CUDA, dlpackshim had not: in the child the
    driver refuses cuInit, which dlpackshim reports as a missing runtime."""
    from dlpackshim import _gpu

    f = cuda()
    assert _fn(f, "cuInit", ctypes.c_int, ctypes.c_uint)(0) == 0
    pinned = ds().from_pointer(f.alloc(8, kind=KIND_PINNED, fill=bytes(8)), (8,), "uint8",
                               device=(kDLCUDAHost, 0))

    def child():
        info = _gpu.runtime_info()["cuda"]
        assert not info["available"] and "CUDA_ERROR_NOT_INITIALIZED" in info["error"], info
        assert pinned.tobytes() == bytes(8)

    _in_forked_child(child)
    assert _gpu.runtime_info()["cuda"]["available"]  # the parent's own first use


# ---- running one test in this process (the child side) -------------------------------------


def _main(name, kwargs):
    try:
        globals()[name](**json.loads(kwargs))
    except pytest.skip.Exception as exc:
        print(f"skipped: {exc}")
        return SKIP_RC
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "{}"))
