"""Exchanges with real CUDA arrays (PyTorch, CuPy, JAX): skipped without a GPU.

CI has no GPU; tests/c/test_gpu.c covers the C side against fake drivers.
These tests check what only real hardware can: that a consumer stream
really waits for a producer's kernel (ordering), that copies to the host
return the right bytes, and that __cuda_array_interface__ round-trips.

Ordering is made observable with a kernel that takes a long time: the
producer stream sleeps (``torch.cuda._sleep``) and then fills the array;
a consumer that did not wait would read the old contents.

Written against the public API of the package: ``dlpackshim.from_dlpack(x,
stream=...)`` (the consumer's stream, passed on to ``x.__dlpack__``; the
resulting Tensor remembers it as the stream its data is ordered on:
``Tensor.stream``), ``Tensor.__dlpack__(stream=..., dl_device=..., copy=...)``,
``Tensor.__cuda_array_interface__`` and ``dlpackshim._gpu``. Host capsules
are read back through ``dlpackshim.from_dlpack(capsule)``: NumPy's
``from_dlpack`` takes objects with ``__dlpack__``, not capsules.

Not run in CI (no GPU there). Written against the fake-driver suite
(test_gpu_fake.py) without a GPU; first run on one NVIDIA H200 on
2026-11-26 (PyTorch 2.11.0+cu130, CuPy 14.2.0, JAX 0.11.2; docs/gpu.md says
what it found). The two-GPU test skips on a one-GPU machine. Skipped
cleanly when dlpackshim, its C library, a CUDA driver the library can load,
or a GPU library (PyTorch/CuPy) is missing.
"""

from __future__ import annotations

import pytest

try:
    import dlpackshim
    from dlpackshim import _gpu
    import gpu_calls
except (ImportError, OSError) as _exc:  # OSError: libdlpackshim not found
    pytest.skip(f"dlpackshim cannot be imported: {_exc}", allow_module_level=True)

CPU = (1, 0)
SLEEP_CYCLES = 200_000_000  # ~0.1 s on current GPUs: far longer than a launch


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch")
    return torch


def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device for CuPy")
    except Exception as exc:  # CuPy without a driver raises its own error types
        pytest.skip(f"CuPy cannot reach a GPU: {exc}")
    return cupy


def _have_gpu() -> bool:
    found = False
    try:
        import torch

        found = torch.cuda.is_available()
    except Exception:  # ImportError, or a broken install
        pass
    if not found:
        try:
            import cupy

            found = cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            found = False
    if not found:
        return False
    try:  # our C library must reach the driver too
        info = _gpu.runtime_info()["cuda"]
    except Exception:  # a library without the GPU functions
        return False
    return bool(info.get("available") and info.get("devices"))


pytestmark = pytest.mark.skipif(not _have_gpu(),
                                reason="needs a CUDA GPU, its driver and PyTorch or CuPy")


def _host(capsule):
    """A host capsule as a NumPy array (through a dlpackshim Tensor)."""
    np = pytest.importorskip("numpy")
    t = dlpackshim.from_dlpack(capsule)
    assert tuple(t.__dlpack_device__()) == CPU and t.is_copied
    return np.from_dlpack(t)


# ---- the runtime --------------------------------------------------------------


def test_runtime_info_sees_the_devices():
    torch = _torch_cuda()
    info = _gpu.runtime_info()["cuda"]
    assert info["available"], info
    assert len(info["devices"]) == torch.cuda.device_count()
    assert info["devices"][0] == torch.cuda.get_device_name(0)
    assert info["driver_version"] >= 11000


def test_pointer_device_of_device_pinned_and_host_memory():
    torch = _torch_cuda()
    last = torch.cuda.device_count() - 1
    x = torch.empty(16, device=f"cuda:{last}")
    assert gpu_calls.pointer_device(x.data_ptr() + 4) == (_gpu.CUDA, last)
    pinned = torch.empty(16, pin_memory=True)
    assert gpu_calls.pointer_device(pinned.data_ptr()) == (_gpu.CUDA_HOST, 0)
    host = torch.empty(16)
    assert gpu_calls.pointer_device(host.data_ptr(), _gpu.CUDA) == (_gpu.CPU, 0)


# ---- ordering ---------------------------------------------------------------------


def test_dlpackshim_producer_makes_the_consumer_stream_wait():
    """Our Tensor as producer: __dlpack__(stream=consumer) must order the
    consumer after the work on the stream the data was imported on."""
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(7.0)
        t = dlpackshim.from_dlpack(x, stream=producer.cuda_stream)
    assert t.stream == producer.cuda_stream
    assert t.__cuda_array_interface__["stream"] == producer.cuda_stream
    with torch.cuda.stream(consumer):
        y = torch.from_dlpack(t)  # PyTorch passes the consumer's stream
        z = y.clone()
    consumer.synchronize()
    assert bool((z == 7.0).all())


def test_torch_producer_orders_our_consumer_stream():
    """PyTorch as producer, our consumer stream: after from_dlpack(stream=c),
    work queued on c sees the producer's kernel finished."""
    torch = _torch_cuda()
    consumer = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)  # on the current (default) stream
    x.fill_(3.0)
    t = dlpackshim.from_dlpack(x, stream=consumer.cuda_stream)
    with torch.cuda.stream(consumer):
        z = torch.from_dlpack(t).clone()
    consumer.synchronize()
    assert bool((z == 3.0).all())


def test_stream_sync_directly_with_torch_streams():
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(5.0)
    gpu_calls.sync(_gpu.CUDA, x.device.index, producer.cuda_stream, consumer.cuda_stream)
    with torch.cuda.stream(consumer):
        z = x.clone()
    consumer.synchronize()
    assert bool((z == 5.0).all())


def test_export_to_another_stream_waits_on_the_gpu_not_the_host():
    """The consumer's stream waits through an event: right after
    __dlpack__(stream=other) the producer's stream is still busy (the host
    did not wait), and the consumer's work still sees the data."""
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(4.0)
        t = dlpackshim.from_dlpack(x, stream=producer.cuda_stream)
    t.__dlpack__(stream=consumer.cuda_stream, max_version=(1, 3))
    assert not producer.query()  # still sleeping: the host did not block
    with torch.cuda.stream(consumer):
        z = x.clone()
    consumer.synchronize()
    assert bool((z == 4.0).all())
    # -1: nothing at all is done, so the consumer is on its own.
    t.__dlpack__(stream=-1, max_version=(1, 3))
    producer.synchronize()


# ---- copies -------------------------------------------------------------------------


@pytest.mark.parametrize("view", ["contiguous", "transposed", "strided", "offset", "expanded"])
def test_copy_to_host(view):
    torch = _torch_cuda()
    np = pytest.importorskip("numpy")
    base = torch.arange(6 * 8 * 5, dtype=torch.float32, device="cuda").reshape(6, 8, 5)
    x = {
        "contiguous": base,
        "transposed": base.transpose(0, 2),
        "strided": base[:, ::2, 1:4],
        # (torch.flip copies: PyTorch has no negative strides; CuPy's are
        # tested in test_cupy_negative_strides.)
        "offset": base[2:, 3:, 1:],
        "expanded": base[:, :1, :].expand(6, 8, 5),  # a zero stride
    }[view]
    assert view == "contiguous" or not x.is_contiguous()
    t = dlpackshim.from_dlpack(x)
    host = _host(t.__dlpack__(dl_device=CPU, copy=True, max_version=(1, 3)))
    np.testing.assert_array_equal(host, x.cpu().numpy())
    np.testing.assert_array_equal(np.frombuffer(t.tobytes(), np.float32).reshape(x.shape),
                                  x.cpu().numpy())
    also = dlpackshim.from_dlpack(x, device=CPU, copy=True)
    np.testing.assert_array_equal(np.from_dlpack(also), x.cpu().numpy())


def test_copy_to_host_on_a_busy_stream_waits_for_it():
    torch = _torch_cuda()
    np = pytest.importorskip("numpy")
    producer = torch.cuda.Stream()
    x = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(9.0)
        t = dlpackshim.from_dlpack(x, stream=producer.cuda_stream)
    assert t.stream == producer.cuda_stream
    host = _host(t.__dlpack__(dl_device=CPU, copy=True, max_version=(1, 3)))
    assert (host == 9.0).all()


# ---- __cuda_array_interface__ --------------------------------------------------------


class _CAIOnly:
    """An object that offers nothing but __cuda_array_interface__."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


def test_cuda_array_interface_round_trip():
    torch = _torch_cuda()
    x = torch.arange(24, dtype=torch.int32, device="cuda").reshape(4, 6)[:, 1:5]
    t = dlpackshim.from_dlpack(x)
    cai = t.__cuda_array_interface__
    assert cai["data"][0] == x.data_ptr()
    assert tuple(cai["shape"]) == (4, 4)
    assert cai["stream"] == 1  # imported on the default stream
    y = torch.as_tensor(_CAIOnly(cai), device="cuda")
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(y, x)
    # Back in: the device is found from the pointer.
    back = dlpackshim.from_dlpack(_CAIOnly(cai))
    assert tuple(back.__dlpack_device__()) == (_gpu.CUDA, x.device.index)
    assert torch.equal(torch.from_dlpack(back), x)


# ---- CuPy and JAX -------------------------------------------------------------------------


def _cupy_sleep(cupy, stream):
    """A kernel that keeps `stream` busy for ~0.1 s (CuPy has no _sleep)."""
    kernel = cupy.RawKernel(r"""
    extern "C" __global__ void spin(long long cycles) {
        long long start = clock64();
        while (clock64() - start < cycles) { }
    }""", "spin")
    with stream:
        kernel((1,), (1,), (cupy.int64(SLEEP_CYCLES),))


def test_cupy_producer_and_consumer_on_different_streams():
    """CuPy's work on one non-blocking stream, our import on another: the
    consumer stream must wait for CuPy's (the old test used one stream for
    both, which synchronised nothing)."""
    cupy = _cupy()
    producer = cupy.cuda.Stream(non_blocking=True)
    consumer = cupy.cuda.Stream(non_blocking=True)
    a = cupy.zeros(1 << 16, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    _cupy_sleep(cupy, producer)
    with producer:
        a.fill(6.0)
        t = dlpackshim.from_dlpack(a, stream=consumer.ptr)  # CuPy: producer -> consumer
    assert t.stream == consumer.ptr
    with consumer:
        b = cupy.from_dlpack(t).copy()
    consumer.synchronize()
    assert bool((b == 6.0).all())


def test_cupy_negative_strides():
    cupy = _cupy()
    np = pytest.importorskip("numpy")
    a = cupy.arange(60, dtype=cupy.int32).reshape(6, 10)[::-1, ::-2]
    assert any(st < 0 for st in a.strides)
    try:
        t = dlpackshim.from_dlpack(a)
    except BufferError as exc:
        # CuPy before cupy/cupy#10228 (issue #10172; 14.2.0 has it) divides a
        # negative byte stride by the unsigned itemsize, so its capsule says
        # (2**64 - 40) // 4 for -10 elements. Refusing that, with the value
        # named, is right; the CUDA array interface carries byte strides and
        # is the way round it.
        assert str((a.strides[0] + 2**64) // 4) in str(exc), exc
        t = dlpackshim.from_dlpack(_CAIOnly(a.__cuda_array_interface__))
    assert t.strides == tuple(st // 4 for st in a.strides)
    host = _host(t.__dlpack__(dl_device=CPU, copy=True, max_version=(1, 3)))
    np.testing.assert_array_equal(host, cupy.asnumpy(a))
    np.testing.assert_array_equal(np.frombuffer(t.tobytes(), np.int32).reshape(a.shape),
                                  cupy.asnumpy(a))
    back = cupy.from_dlpack(t)
    assert back.data.ptr == a.data.ptr and bool((back == a).all())


def test_cupy_cuda_array_interface():
    cupy = _cupy()
    a = cupy.arange(12, dtype=cupy.int16).reshape(3, 4)
    t = dlpackshim.from_dlpack(_CAIOnly(a.__cuda_array_interface__))
    assert tuple(t.__dlpack_device__()) == (_gpu.CUDA, a.device.id)
    assert bool((cupy.asarray(_CAIOnly(t.__cuda_array_interface__)) == a).all())


def test_jax_gpu_arrays():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    np = pytest.importorskip("numpy")
    x = jax.device_put(jax.numpy.arange(20.0).reshape(4, 5), gpu)
    t = dlpackshim.from_dlpack(x)
    assert tuple(t.__dlpack_device__())[0] == _gpu.CUDA
    y = jax.numpy.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    host = dlpackshim.from_dlpack(x, device=CPU, copy=True)
    np.testing.assert_array_equal(np.from_dlpack(host), np.asarray(x))


# ---- issue 14: what only real drivers show ----------------------------------------------


class _LegacyProducer:
    """A producer from before 2023.12: __dlpack__(stream=None) only."""

    def __init__(self, x):
        self.x = x

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.x.__dlpack__(stream=stream)


def test_legacy_producer_with_an_explicit_consumer_stream():
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(2.0)
        t = dlpackshim.from_dlpack(_LegacyProducer(x), stream=consumer.cuda_stream)
    assert t.stream == consumer.cuda_stream
    with torch.cuda.stream(consumer):
        z = torch.from_dlpack(t).clone()
    consumer.synchronize()
    assert bool((z == 2.0).all())


def test_our_tensor_to_a_legacy_consumer_with_an_explicit_stream():
    """The reverse: a consumer that asks for the legacy capsule with a stream."""
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(8.0)
        t = dlpackshim.from_dlpack(x, stream=producer.cuda_stream)
    cap = t.__dlpack__(stream=consumer.cuda_stream)  # legacy "dltensor" capsule
    with torch.cuda.stream(consumer):
        z = torch.utils.dlpack.from_dlpack(cap).clone()
    consumer.synchronize()
    assert bool((z == 8.0).all())


def test_default_stream_is_named_for_the_producer():
    """from_dlpack(x) with no stream: the producer is asked for stream 1
    (older PyTorch reads None as "no synchronisation"), so work PyTorch
    queued on a side stream is ordered before the legacy stream."""
    torch = _torch_cuda()
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(1.5)
        t = dlpackshim.from_dlpack(x)
    assert t.stream == 1
    host = _host(t.__dlpack__(dl_device=CPU, copy=True, max_version=(1, 3)))
    assert (host == 1.5).all()


def test_cuda_array_interface_stream_differs_from_the_consumers():
    torch = _torch_cuda()
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(3.5)
        cai = dict(x.__cuda_array_interface__)
    # PyTorch (2.11 seen) gives version 2, which has no "stream"; a v3 producer
    # (CuPy, Numba) names the stream its data is ordered on.
    if cai["version"] < 3:
        cai.update(version=3, stream=producer.cuda_stream)
    assert cai["stream"] == producer.cuda_stream
    t = dlpackshim.from_dlpack(_CAIOnly(cai), stream=consumer.cuda_stream)
    assert t.stream == consumer.cuda_stream
    with torch.cuda.stream(consumer):
        z = torch.from_dlpack(t).clone()
    consumer.synchronize()
    assert bool((z == 3.5).all())


def test_calls_from_worker_threads():
    """Fresh threads have no current CUDA context: pointer queries, stream
    waits and host copies from them."""
    import threading

    torch = _torch_cuda()
    np = pytest.importorskip("numpy")
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    cai = x.__cuda_array_interface__
    errors = []

    def work():
        try:
            t = dlpackshim.from_dlpack(_CAIOnly(cai))
            assert tuple(t.__dlpack_device__()) == (_gpu.CUDA, x.device.index)
            s = torch.cuda.Stream()
            t.__dlpack__(stream=s.cuda_stream, max_version=(1, 3))
            host = np.frombuffer(t.tobytes(), np.float32)
            np.testing.assert_array_equal(host, np.arange(1000, dtype=np.float32))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_many_threads_exporting_at_once():
    import threading

    torch = _torch_cuda()
    x = torch.ones(1 << 16, device="cuda")
    t = dlpackshim.from_dlpack(x)
    streams = [torch.cuda.Stream() for _ in range(8)]
    errors = []

    def work(s):
        try:
            for _ in range(200):
                cap = t.__dlpack__(stream=s.cuda_stream, max_version=(1, 3))
                dlpackshim.from_dlpack(cap)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in streams]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    torch.cuda.synchronize()


def test_second_gpu_while_device_0_is_current():
    torch = _torch_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    x = torch.arange(16, dtype=torch.float32, device="cuda:1")
    s = torch.cuda.Stream(device=0)
    t = dlpackshim.from_dlpack(x)  # PyTorch refuses unless cuda:1 is current
    assert tuple(t.__dlpack_device__()) == (_gpu.CUDA, 1)
    assert torch.cuda.current_device() == 0  # put back
    u = dlpackshim.from_dlpack(x, stream=torch.cuda.Stream(device=1).cuda_stream)
    assert tuple(u.__dlpack_device__()) == (_gpu.CUDA, 1)
    assert torch.equal(torch.from_dlpack(t).cpu(), x.cpu())
    # The array interface finds device 1 from the pointer.
    v = dlpackshim.from_dlpack(_CAIOnly(x.__cuda_array_interface__))
    assert tuple(v.__dlpack_device__()) == (_gpu.CUDA, 1)
    del s


def test_per_thread_default_stream():
    torch = _torch_cuda()
    x = torch.zeros(1 << 16, device="cuda")
    torch.cuda.synchronize()
    ours = dlpackshim.from_dlpack(x)
    u = dlpackshim.from_dlpack(ours, stream=2)  # our producer takes 2; PyTorch refuses it
    assert u.stream == 1  # moved onto the legacy stream at import, never recorded as 2
    try:  # PyTorch 2.x refuses 2 ("per-thread default stream is not supported")
        v = dlpackshim.from_dlpack(x, stream=2)
    except BufferError:
        pass
    else:
        assert v.stream == 1


def test_stream_zero_is_refused():
    torch = _torch_cuda()
    t = dlpackshim.from_dlpack(torch.zeros(4, device="cuda"))
    with pytest.raises(ValueError, match="stream 0 is not allowed"):
        t.__dlpack__(stream=0)
    with pytest.raises(ValueError, match="stream 0 is not allowed"):
        dlpackshim.from_dlpack(torch.zeros(4, device="cuda"), stream=0)


def test_gpu_copy_true_and_its_free():
    import gc

    torch = _torch_cuda()
    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")[::2]  # strided: a 2-D copy
    t = dlpackshim.from_dlpack(x)
    free_before = torch.cuda.mem_get_info()[0]
    for _ in range(20):
        cap = t.__dlpack__(copy=True, max_version=(1, 3))
        c = dlpackshim.from_dlpack(cap)
        assert c.is_copied and c.data_ptr != t.data_ptr
        y = torch.from_dlpack(c)
        assert torch.equal(y, x)
        del y, c, cap
        gc.collect()
    torch.cuda.synchronize()
    # 20 copies of 128 KiB freed: the driver's free memory is back (within 2 MiB).
    assert torch.cuda.mem_get_info()[0] >= free_before - (2 << 20)


@pytest.mark.parametrize("kind", ["pinned", "managed"])
def test_host_accessible_memory_right_after_a_side_stream_write(kind):
    cupy = _cupy()
    np = pytest.importorskip("numpy")
    n = 1 << 16
    if kind == "pinned":
        mem = cupy.cuda.alloc_pinned_memory(n * 4)
        ptr = mem.ptr
    else:
        mem = cupy.cuda.malloc_managed(n * 4)
        ptr = mem.ptr
    dev = gpu_calls.pointer_device(ptr)
    assert dev[0] == (_gpu.CUDA_HOST if kind == "pinned" else _gpu.CUDA_MANAGED)
    side = cupy.cuda.Stream(non_blocking=True)
    view = cupy.ndarray((n,), cupy.float32,
                        cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, n * 4, mem), 0))
    _cupy_sleep(cupy, side)
    with side:
        view.fill(5.0)
    t0 = dlpackshim.from_pointer(ptr, (n,), "float32", device=dev)
    # Recorded as the stream the data is ready on (a capsule's stream is only recorded).
    t = dlpackshim.from_dlpack(t0.__dlpack__(stream=-1, max_version=(1, 3)), stream=side.ptr)
    assert t.stream == side.ptr
    h = dlpackshim.from_dlpack(t.__dlpack__(dl_device=CPU, max_version=(1, 3)))
    assert (np.from_dlpack(h) == 5.0).all()  # the host waited for the side stream
