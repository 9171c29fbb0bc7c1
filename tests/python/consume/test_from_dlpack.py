"""from_dlpack: producers (NumPy, PyTorch, hand-made), capsules, the per-type cache, errors."""

from __future__ import annotations

import gc

import pytest

import dlpackshim as ds
import producers as P
from dlpackshim import _consume


class LegacyOnly:
    """A producer from before the 2023.12 standard: __dlpack__(stream=None) only."""

    def __init__(self, a):
        self.a = a
        self.calls = 0

    def __dlpack__(self, stream=None):
        self.calls += 1
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class Recorder:
    """A standard producer that records the keywords it was called with."""

    def __init__(self, a):
        self.a = a
        self.kwargs = []

    def __dlpack__(self, **kw):
        self.kwargs.append(kw)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


# ---- real producers ------------------------------------------------------------------

def test_numpy_zero_copy(np):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ds.from_dlpack(a)
    assert t.data_ptr == a.ctypes.data and t.dtype == "float32"


def test_torch_zero_copy_both_directions(torch):
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)[:, ::2]
    t = ds.from_dlpack(x)
    assert t.data_ptr == x.data_ptr() and t.strides == x.stride()
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and torch.equal(y, x)


def test_torch_bfloat16_and_bool(torch):
    t = ds.from_dlpack(torch.ones(4, dtype=torch.bfloat16))
    assert t.dtype == "bfloat16" and t.dtype == (4, 16, 1)
    tb = ds.from_dlpack(torch.tensor([True, False]))
    assert tb.dtype == "bool" and tb.tobytes() == b"\x01\x00"


@pytest.mark.numpy_min("2.1")
def test_numpy_read_only_stays_read_only(np):
    a = np.arange(3.0)
    a.flags.writeable = False
    assert ds.from_dlpack(a).readonly


def test_producer_errors_propagate_unchanged():
    p = P.VersionedProducer(shape=(2,), raise_on_dlpack=BufferError("nope"))
    with pytest.raises(BufferError, match="nope"):
        ds.from_dlpack(p)


# ---- the consumer's call: decided on every call, nothing remembered that can go stale

@pytest.mark.numpy_min("2.1")
def test_asks_for_max_version_1_3(np):
    r = Recorder(np.arange(3))
    ds.from_dlpack(r)
    ds.from_dlpack(r)
    assert r.kwargs == [{"max_version": (1, 3)}] * 2


@pytest.mark.numpy_min("2.1")
def test_passes_copy_and_dl_device_only_when_needed(np):
    r = Recorder(np.arange(3))
    ds.from_dlpack(r, copy=False, device=(1, 0))
    assert r.kwargs[-1] == {"max_version": (1, 3), "copy": False}



@pytest.mark.numpy_min("2.1")
@pytest.mark.parametrize("dev", [(-1, 0), (-5, 3), (2**31 - 1, 0)])
def test_the_producer_gets_the_device_as_it_was_asked(np, dev):
    # -1 once reached the producer as 4294967295 (NumPy then raised
    # OverflowError): the producer decides, with the numbers it was asked.
    r = Recorder(np.arange(3))
    with pytest.raises(BufferError):
        ds.from_dlpack(r, device=dev)
    assert r.kwargs[-1]["dl_device"] == dev


class _OutOfMemory(RuntimeError):
    """PyTorch's OutOfMemoryError is a RuntimeError of its own."""


@pytest.mark.parametrize("error, becomes", [
    (NotImplementedError("no CUDA backend"), BufferError),  # PyTorch
    (RuntimeError("Unknown backend cuda"), BufferError),    # JAX
    (BufferError("unsupported device"), BufferError),       # the standard's word
    (_OutOfMemory("out of memory"), _OutOfMemory),          # a failure, not a refusal
    (RecursionError("deep"), RecursionError),
    (ValueError("kept"), ValueError),
    (KeyboardInterrupt(), KeyboardInterrupt),
])
def test_a_device_the_producer_cannot_reach_is_BufferError(np, error, becomes):
    """The standard's BufferError where a peer refused a dl_device it cannot
    reach with its own word (PyTorch: NotImplementedError; JAX: RuntimeError),
    the refusal its __cause__; other exceptions, subclasses and interrupts
    stay."""

    class Refuses(Recorder):
        def __dlpack__(self, **kw):
            self.kwargs.append(kw)
            if "dl_device" in kw:
                raise error
            return self.a.__dlpack__(**kw)

    r = Refuses(np.arange(3))
    with pytest.raises(becomes) as info:
        ds.from_dlpack(r, device=(2, 1))
    if becomes is BufferError and not isinstance(error, BufferError):
        assert str(info.value) == f"the producer cannot export to dl_device=(2, 1): {error}"
        assert info.value.__cause__ is error and error.__traceback__ is not None
    assert r.kwargs[-1]["dl_device"] == (2, 1)


def test_only_the_refusal_of_dl_device_is_named_so(np):
    """The retry without dl_device (dlpackshim copies pinned memory itself)
    failed with a RuntimeError of its own, and it was reported as a refusal
    of dl_device."""

    class PinnedRefusingDlDevice(Recorder):
        def __dlpack__(self, **kw):
            self.kwargs.append(kw)
            if "dl_device" in kw:
                raise NotImplementedError("no dl_device here")
            raise RuntimeError("the producer's array was freed")

        def __dlpack_device__(self):
            return (3, 0)

    with pytest.raises(RuntimeError, match="^the producer's array was freed$"):
        ds.from_dlpack(PinnedRefusingDlDevice(np.arange(3)), device=(1, 0))


@pytest.mark.parametrize("message", ["x" * 440 + "\u00e9" * 100, "\u20ac" * 300, ""])
def test_a_long_or_empty_refusal_reads_whole_characters(np, message):
    """Cut to fit, a message once ended inside a UTF-8 character: Python
    could not decode it (UnicodeDecodeError)."""

    class Refuses(Recorder):
        def __dlpack__(self, **kw):
            raise RuntimeError(message)

    with pytest.raises(BufferError) as info:
        ds.from_dlpack(Refuses(np.arange(3)), device=(2, 0))
    text = str(info.value)
    assert text.startswith("the producer cannot export to dl_device=(2, 0)")
    assert (text.endswith(")") if not message else message.startswith(text.split(": ", 1)[1]))


def test_a_failure_is_not_retried_as_a_refusal(np):
    """RuntimeError is a refusal only when the dl_device call is not asked
    again: mapped first, a CUDA failure of pinned memory was retried without
    dl_device and hidden by the retry's success."""

    class FailsOnPinned(Recorder):
        def __dlpack__(self, **kw):
            self.kwargs.append(kw)
            if "dl_device" in kw:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (3, 0)

    r = FailsOnPinned(np.arange(3))
    with pytest.raises(BufferError, match="illegal memory access"):
        ds.from_dlpack(r, device=(1, 0))
    assert len(r.kwargs) == 1


def test_an_interrupt_while_a_refusal_is_read_is_kept(np):
    """A producer in C leaves its exception's value raw on 3.11; reading it
    raised KeyboardInterrupt, which then became a BufferError's cause."""
    import ctypes
    set_object = ctypes.pythonapi.PyErr_SetObject
    set_object.argtypes, set_object.restype = [ctypes.py_object] * 2, None

    class Interrupting(str):
        def __str__(self):
            raise KeyboardInterrupt

    class Refuses(Recorder):
        def __dlpack__(self, **kw):
            if "dl_device" in kw:
                set_object(RuntimeError, Interrupting("boom"))   # as C code raises
            return self.a.__dlpack__(**kw)

    with pytest.raises((KeyboardInterrupt, BufferError)) as info:
        ds.from_dlpack(Refuses(np.arange(3)), device=(2, 0))
    # 3.12+ make the instance at once, and str(RuntimeError(s)) is s's text
    assert info.type is KeyboardInterrupt or "boom" in str(info.value)


def test_a_long_keyword_name_is_cut_on_a_whole_character(np):
    with pytest.raises(TypeError, match="unexpected keyword argument 'x+'"):
        ds.from_dlpack(np.arange(3), **{"x" * 99 + "\u20ac": 1})

def test_peers_asked_for_a_device_they_cannot_reach_give_BufferError(torch):
    jnp = pytest.importorskip("jax.numpy")
    for x, dev in ((torch.arange(3.0), (2, 0)), (torch.arange(3.0), (1, 1)),
                   (jnp.arange(3.0), (2, 0))):
        with pytest.raises(BufferError):
            ds.from_dlpack(x, device=dev)


class _Unhashable(type):
    """A metaclass whose __hash__ and __eq__ raise: nothing looks a type up by them."""

    def __hash__(cls):
        raise RuntimeError("metaclass __hash__ called")

    def __eq__(cls, other):
        raise RuntimeError("metaclass __eq__ called")


def test_a_type_whose_hash_and_eq_raise_imports(np):
    class Producer(Recorder, metaclass=_Unhashable):
        pass

    p = Producer(np.arange(3.0))
    for _ in range(2):
        assert ds.from_dlpack(p).tobytes() == np.arange(3.0).tobytes()


class _AllEqual(type):
    """Every class of this metaclass compares equal to every other."""

    def __eq__(cls, other):
        return isinstance(other, _AllEqual)

    def __hash__(cls):
        return 1


def test_types_that_compare_equal_keep_their_own_routes(np):
    """The issue's first defect: a cache keyed by equality gave one type the
    route of another equal one."""
    class Buffer(bytearray, metaclass=_AllEqual):
        pass

    class Producer(Recorder, metaclass=_AllEqual):
        pass

    assert Buffer == Producer
    for _ in range(2):
        assert ds.from_dlpack(Buffer(b"ab")).tobytes() == b"ab"
        assert ds.from_dlpack(Producer(np.arange(2.0))).tobytes() == np.arange(2.0).tobytes()


def test_types_seen_are_not_kept_alive(np):
    """The issue's second defect: 300 classes, each closing over 1 MiB, were
    all kept by the type cache. Every route (a producer, a buffer, an array
    interface, an exchange table) is tried: nothing of a type outlives it."""
    import weakref

    table = ds.Tensor.__dlpack_c_exchange_api__
    refs = []
    for i in range(100):
        big = np.zeros(1 << 17)  # 1 MiB
        kinds = [
            type(f"P{i}", (Recorder,), {"big": big}),
            type(f"B{i}", (bytearray,), {"big": big}),
            type(f"I{i}", (), {"big": big, "__array_interface__": property(
                lambda self: {"version": 3, "shape": (1,), "typestr": "|u1", "data": (self.a, 1)})}),
            type(f"T{i}", (Recorder,), {"big": big, "__dlpack_c_exchange_api__": table}),
        ]
        for cls in kinds:
            obj = cls(np.arange(2.0)) if issubclass(cls, Recorder) else cls(b"x") if issubclass(
                cls, bytearray) else cls()
            if kinds.index(cls) == 2:
                obj.a = np.zeros(1, np.uint8).ctypes.data
            try:
                ds.from_dlpack(obj).close()
            except TypeError:
                pass  # T: our table refuses what is not a dlpackshim Tensor; __dlpack__ is not tried
        refs.append(weakref.ref(big))
        del big, kinds, cls, obj
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_a_producer_patched_to_the_legacy_signature_and_back(np):
    """The issue's third defect: a cached calling convention went stale when
    a producer's __dlpack__ was replaced."""
    class Patched:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, *, max_version=None, **kw):
            return self.a.__dlpack__(max_version=max_version, **kw)

        def __dlpack_device__(self):
            return (1, 0)

    p = Patched(np.arange(3.0))
    assert ds.from_dlpack(p).dlpack_version == (1, 0) or ds.from_dlpack(p).dlpack_version[0] == 1
    modern = Patched.__dlpack__
    Patched.__dlpack__ = lambda self, stream=None: self.a.__dlpack__()  # legacy only
    t = ds.from_dlpack(p)
    assert t.dlpack_version is None and t.readonly  # legacy: writability unknown
    Patched.__dlpack__ = modern
    t = ds.from_dlpack(p)
    assert t.dlpack_version[0] == 1 and not t.readonly
    del Patched.__dlpack__
    with pytest.raises(TypeError, match="expected an object with __dlpack__"):
        ds.from_dlpack(p)


def test_legacy_producer_falls_back_on_every_call(np):
    """As NumPy's from_dlpack: max_version first, the legacy call after a
    TypeError; nothing is remembered, so a producer that changes is asked anew."""
    p = LegacyOnly(np.arange(4, dtype=np.int16))
    t = ds.from_dlpack(p)
    assert t.dlpack_version is None and t.readonly is True  # legacy: writability unknown
    assert ds.from_dlpack(p).tobytes() == np.arange(4, dtype=np.int16).tobytes()
    assert p.calls == 2  # the call with max_version raised TypeError before __dlpack__ ran


def test_a_dlpack_that_raises_TypeError_is_asked_once_then_legacy():
    """A __dlpack__ whose call with max_version raises TypeError gets the
    legacy call next, as NumPy makes them: two calls (a defect: the
    max_version call was made twice, running a producer's side effects
    twice)."""
    calls = []

    class P:
        def __dlpack__(self, *a, **kw):
            calls.append(kw)
            raise TypeError("bug inside")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="bug inside"):
        ds.from_dlpack(P())
    assert calls == [{"max_version": (1, 3)}, {}]


def test_legacy_producer_with_copy_true_is_copied_by_us(np):
    a = np.arange(4.0)
    t = ds.from_dlpack(LegacyOnly(a), copy=True)
    assert t.is_copied and t.data_ptr != a.ctypes.data and t.tobytes() == a.tobytes()


def test_legacy_producer_cannot_move_devices():
    class LegacyGpu:
        def __dlpack__(self, stream=None):
            raise AssertionError("must not be called")

        def __dlpack_device__(self):
            return (2, 0)

    # GPU to GPU: neither the producer nor dlpackshim can (GPU to host is
    # done by dlpackshim itself: tests/python/gpu/test_gpu_fake.py).
    with pytest.raises(BufferError, match="dl_device=.2, 1."):
        ds.from_dlpack(LegacyGpu(), device=(2, 1))


def test_hand_made_producer_versioned_and_legacy():
    p = P.VersionedProducer(shape=(2, 3), dtype=(2, 32, 1), fill=bytes(range(24)))
    t = ds.from_dlpack(p)
    assert p.calls[-1]["max_version"] == (1, 3)
    assert t.dlpack_version == (1, 3) and t.shape == (2, 3)
    assert t.tobytes() == bytes(range(24))
    del t
    gc.collect()
    assert p.deleter_calls == 1


# ---- capsules ------------------------------------------------------------------------

@pytest.mark.numpy_min("2.1")
def test_raw_versioned_and_legacy_capsules(np):
    a = np.arange(5, dtype=np.int8)
    tv = ds.from_dlpack(a.__dlpack__(max_version=(1, 0)))
    tl = ds.from_dlpack(a.__dlpack__())
    assert tv.data_ptr == tl.data_ptr == a.ctypes.data
    assert tv.dlpack_version[0] == 1 and tl.dlpack_version is None


@pytest.mark.numpy_min("2.1")
def test_used_capsule_is_buffer_error(np):
    cap = np.arange(3).__dlpack__(max_version=(1, 0))
    ds.from_dlpack(cap)
    with pytest.raises(BufferError, match="consumed"):
        ds.from_dlpack(cap)


def test_foreign_capsule_is_buffer_error():
    import datetime
    with pytest.raises(BufferError, match="named"):
        ds.from_dlpack(datetime.datetime_CAPI)


def test_newer_major_version_is_rejected_and_deleted():
    cap, rec = P.make_capsule(shape=(2,), version=(2, 0))
    with pytest.raises(BufferError, match="version 2.0"):
        ds.from_dlpack(cap)
    assert rec.deleter_calls == 1
    del cap
    gc.collect()
    assert rec.deleter_calls == 1


def test_byte_offset_is_honoured():
    import ctypes
    cap, rec = P.make_capsule(shape=(4,), dtype=(1, 8, 1), byte_offset=10,
                              fill=bytes(range(64)))
    t = ds.from_dlpack(cap)
    assert t.data_ptr == rec.origin == rec.data_address + 10
    assert t.tobytes() == ctypes.string_at(rec.origin, 4)


def test_null_strides_from_old_producers_mean_compact():
    cap, rec = P.make_capsule(shape=(2, 3), dtype=(0, 16, 1), null_strides=True,
                              version=(1, 1))
    t = ds.from_dlpack(cap)
    assert t.strides == (3, 1)


def test_zero_d_and_empty_capsules():
    cap0, _ = P.make_capsule(shape=(), dtype=(2, 64, 1))
    assert ds.from_dlpack(cap0).shape == ()
    cape, _ = P.make_capsule(shape=(0, 4), null_data=True)
    t = ds.from_dlpack(cape)
    assert t.size == 0 and t.data_ptr == 0


def test_invalid_tensor_is_buffer_error_and_deleted():
    cap, rec = P.make_capsule(shape=(-1,))
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    assert rec.deleter_calls == 1


def test_read_only_flag_from_capsule():
    cap, _ = P.make_capsule(shape=(3,), readonly=True)
    assert ds.from_dlpack(cap).readonly


# ---- as Python sees it ------------------------------------------------------------------

def test_from_dlpack_introspects_as_a_function_of_the_module():
    """A builtin bound to a module (csrc/python/module.c): name, qualname,
    module, signature and help() as for any function of dlpackshim."""
    import inspect
    import pydoc
    import typing

    f = ds.from_dlpack
    assert (f.__name__, f.__qualname__, f.__module__) == ("from_dlpack",) * 2 + ("dlpackshim",)
    assert inspect.ismodule(f.__self__)
    assert str(inspect.signature(f)) == "(x, /, *, device=None, copy=None, stream=None)"
    text = pydoc.render_doc(f, renderer=pydoc.plaintext)
    assert "method of" not in text and "in module dlpackshim" in text
    assert f.__doc__.startswith("Import `x` as a :class:`dlpackshim.Tensor`")
    # A builtin has no __annotations__ (typing gives {}); type checkers read
    # the declaration in _consume.py (test_typing.py).
    assert typing.get_type_hints(f) == {}


# ---- arguments and errors --------------------------------------------------------------

@pytest.mark.parametrize("obj", [object(), 3, "abc", None, [1, 2]])
def test_not_array_like_is_type_error_and_attribute_error(obj):
    with pytest.raises(TypeError, match="expected an object with __dlpack__"):
        ds.from_dlpack(obj)
    with pytest.raises(AttributeError):
        ds.from_dlpack(obj)


def test_a_class_is_a_type_error_that_says_so(np):
    """numpy.ndarray (the class) has its instances' __array_interface__ as a
    descriptor: the error says a type was passed, and instances and other
    classes are unaffected."""
    for cls in (np.ndarray, bytearray, ds.Tensor, type):
        with pytest.raises(TypeError, match=r"got the class \S+ itself \(a type\)"):
            ds.from_dlpack(cls)
        with pytest.raises(AttributeError):  # NotArrayLikeError, as for other non-arrays
            ds.from_dlpack(cls)
    a = np.arange(3)
    assert ds.from_dlpack(a).data_ptr == a.ctypes.data


@pytest.mark.parametrize("device", ["cpu", 1, (1,), (1, 0, 0), ("1", 0)])
def test_device_of_the_wrong_kind_is_type_error(np, device):
    with pytest.raises(TypeError, match="device"):
        ds.from_dlpack(np.arange(3), device=device)


def test_device_forms_accepted(np):
    a = np.arange(3)
    for device in ((1, 0), ds.Device(ds.DeviceType.kDLCPU, 0), ds.DeviceType.kDLCPU):
        assert ds.from_dlpack(a, device=device).data_ptr == a.ctypes.data


@pytest.mark.numpy_min("2.4")
def test_unsupported_device_is_buffer_error(np):
    # NumPy refuses dl_device=(kDLCUDA, 0) with BufferError; it propagates.
    with pytest.raises(BufferError):
        ds.from_dlpack(np.arange(3), device=(ds.DeviceType.kDLCUDA, 0))


def test_copy_true_copies_into_an_aligned_compact_buffer(np):
    a = np.arange(30, dtype=np.float32).reshape(5, 6)[::2, ::-1]
    t = ds.from_dlpack(a, copy=True)
    assert t.data_ptr != a.ctypes.data and t.is_copied
    assert t.tobytes() == a.tobytes()
    assert t.data_ptr % 256 == 0 or t.is_contiguous


@pytest.mark.numpy_min("2.1")
def test_copy_order_is_the_copiers(np):
    """copy=True: the producer's copy has the producer's layout (NumPy keeps
    the source's memory order: a copy of a.T is column-major); a copy that
    dlpackshim makes (a buffer, an export of a Tensor) is compact row-major."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    by_numpy = ds.from_dlpack(a.T, copy=True)
    assert by_numpy.is_copied and by_numpy.strides == (1, 4) and not by_numpy.is_contiguous
    by_us = ds.from_dlpack(memoryview(a.T), copy=True)
    assert by_us.is_copied and by_us.strides == (3, 1) and by_us.is_contiguous
    exported = ds.from_dlpack(ds.from_dlpack(a.T).__dlpack__(max_version=(1, 3), copy=True))
    assert exported.is_copied and exported.strides == (3, 1)
    for t in (by_numpy, by_us, exported):
        assert np.array_equal(np.from_dlpack(t), a.T)


def test_copy_true_of_a_buffer_is_ours(np):
    b = bytearray(b"abcdef")
    t = ds.from_dlpack(b, copy=True)
    b[0] = ord("z")
    assert t.tobytes() == b"abcdef" and not t.readonly


def test_pinned_memory_goes_to_cpu_without_a_copy():
    cap, rec = P.make_capsule(shape=(2,), device=(3, 0))  # kDLCUDAHost
    t = ds.from_dlpack(cap, device=(1, 0), copy=False)
    assert t.device == (1, 0) and t.data_ptr == rec.origin


def test_copy_false_needing_a_copy_is_value_error():
    cap, rec = P.make_capsule(shape=(2,), device=(2, 0))  # kDLCUDA: not host memory
    with pytest.raises(ValueError, match="copy=False"):
        ds.from_dlpack(cap, device=(1, 0), copy=False)
    del cap  # a consumed capsule owns its tensor
    gc.collect()
    assert rec.deleter_calls == 1
    p = P.VersionedProducer(shape=(2,), device=(2, 0))
    with pytest.raises(ValueError, match="copy=False"):
        ds.from_dlpack(p, device=(1, 0), copy=False)
    assert p.exports == 0


def test_copy_of_the_wrong_kind_is_type_error(np):
    with pytest.raises(TypeError, match="copy"):
        ds.from_dlpack(np.arange(3), copy="yes")


def test_a_gpu_producer_that_refuses_the_stream_call_keeps_its_plain_export():
    """A plain call's capsule of GPU data is asked again with the stream
    named; a producer that refuses that second call keeps the first export
    (ready on the default stream, the standard's stream=None), and every
    export is deleted once."""
    class NoStreams(P.VersionedProducer):
        def __dlpack__(self, *, stream=None, **kw):
            if stream is not None:
                raise BufferError("this producer takes no stream")
            return super().__dlpack__(stream=stream, **kw)

    p = NoStreams(data=0x7F0000001000, shape=(4,), dtype=(2, 32, 1), device=(2, 0))
    t = ds.from_dlpack(p)
    assert t.device == (2, 0) and t.data_ptr == 0x7F0000001000
    assert p.deleter_calls == 0
    t.close()
    gc.collect()
    assert p.deleter_calls == len(p.records) == 1


def test_a_typestr_that_is_no_utf8_is_a_type_error():
    class Iface:
        __array_interface__ = {"shape": (2,), "typestr": "<f\ud8004", "data": (4096, False),
                               "version": 3}

    with pytest.raises(TypeError, match="typestr"):
        ds.from_dlpack(Iface())
