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

Not run in CI (no GPU there), and not run by the author either: no GPU was
available when it was written against the fake-driver suite
(test_gpu_fake.py). Skipped cleanly when dlpackshim, its C library, a CUDA
driver the library can load, or a GPU library (PyTorch/CuPy) is missing.
"""

from __future__ import annotations

import pytest

try:
    import dlpackshim
    from dlpackshim import _gpu
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
    assert _gpu.pointer_device(x.data_ptr() + 4) == (_gpu.CUDA, last)
    pinned = torch.empty(16, pin_memory=True)
    assert _gpu.pointer_device(pinned.data_ptr()) == (_gpu.CUDA_HOST, 0)
    host = torch.empty(16)
    assert _gpu.pointer_device(host.data_ptr(), _gpu.CUDA) == (_gpu.CPU, 0)


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
    _gpu.sync(_gpu.CUDA, x.device.index, producer.cuda_stream, consumer.cuda_stream)
    with torch.cuda.stream(consumer):
        z = x.clone()
    consumer.synchronize()
    assert bool((z == 5.0).all())


def test_no_sync_with_minus_one_does_not_block_the_host():
    torch = _torch_cuda()
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
    _gpu.sync(_gpu.CUDA, 0, producer.cuda_stream, -1)
    assert not producer.query()  # still sleeping: nothing waited on the host
    producer.synchronize()


# ---- copies -------------------------------------------------------------------------


@pytest.mark.parametrize("view", ["contiguous", "transposed", "strided", "reversed", "offset"])
def test_copy_to_host(view):
    torch = _torch_cuda()
    np = pytest.importorskip("numpy")
    base = torch.arange(6 * 8 * 5, dtype=torch.float32, device="cuda").reshape(6, 8, 5)
    x = {
        "contiguous": base,
        "transposed": base.transpose(0, 2),
        "strided": base[:, ::2, 1:4],
        "reversed": base.flip(1),
        "offset": base[2:, 3:, 1:],
    }[view]
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


def test_cupy_on_a_non_blocking_stream():
    cupy = _cupy()
    with cupy.cuda.Stream(non_blocking=True) as s:
        a = cupy.arange(1000, dtype=cupy.float64).reshape(10, 100)[:, ::3]
        t = dlpackshim.from_dlpack(a, stream=s.ptr)
        b = cupy.from_dlpack(t)
        assert b.data.ptr == a.data.ptr
        assert bool((b == a).all())
    s.synchronize()


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
