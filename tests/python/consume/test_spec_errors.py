"""The array API standard's DLPack error table, one test per rule.

Written from the standard (array API 2023.12/2024.12: ``__dlpack__``,
``from_dlpack``), dlpack.h 1.3 and the project's contract - not from the
implementation. Producers used here are the ctypes-only ones of producers.py,
so every "deleter called exactly once" is counted independently of dlpackshim.
"""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import producers as P  # noqa: E402
from producers import collect, no_double_delete  # noqa: E402,F401 (autouse fixtures)

import dlpackshim as ds  # noqa: E402

np = pytest.importorskip("numpy")


def cpu_tensor(n=6, readonly=False):
    a = np.arange(n, dtype=np.float32)
    if readonly:
        a.flags.writeable = False
    return ds.from_dlpack(a), a


def wrap(cap, device=(1, 0)):
    """An object whose __dlpack__ hands out a given capsule."""
    return P.CapsuleReturningProducer(lambda **kw: cap, device=device)


# ---------------------------------------------------------------------------
# __dlpack__ argument rules
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [1, 1.0, "1.0", [1, 3], (1,), (1, 3, 0), ("1", "3"), b"13"])
def test_max_version_not_a_tuple_is_TypeError(bad):
    """__dlpack__: max_version must be None or a 2-tuple (major, minor) of ints."""
    t, _ = cpu_tensor()
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=bad)


@pytest.mark.parametrize("bad", [(-1, 0), (1, -5), (1, 2 ** 32), (2 ** 32, 0), (1, -2 ** 70)])
def test_max_version_out_of_range_is_ValueError(bad):
    """__dlpack__: a max_version that no DLPackVersion (two uint32) can hold is
    refused, on the C path and the Python one (dl_device sends it there)."""
    t, _ = cpu_tensor()
    with pytest.raises(ValueError, match="max_version"):
        t.__dlpack__(max_version=bad)
    with pytest.raises(ValueError, match="max_version"):
        t.__dlpack__(max_version=bad, copy=True)
    t.__dlpack__(max_version=(1, 2 ** 32 - 1))  # the largest is still a version
    t.__dlpack__(max_version=(0, 0))


@pytest.mark.parametrize("bad", [1, "cpu", [1, 0], 1.5, b"\x01\x00"])
def test_dl_device_not_a_tuple_is_TypeError(bad):
    """__dlpack__: dl_device is a tuple in the format of __dlpack_device__()."""
    t, _ = cpu_tensor()
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=(1, 3), dl_device=bad)


def test_dl_device_same_device_is_accepted():
    t, a = cpu_tensor()
    cap = t.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    d = P.describe_capsule(cap)
    assert d["device"] == (1, 0)
    assert d["data"] + d["byte_offset"] == a.ctypes.data
    cap2 = t.__dlpack__(max_version=(1, 3), dl_device=ds.Device(1, 0))
    assert P.describe_capsule(cap2)["device"] == (1, 0)


@pytest.mark.parametrize("dev", [(2, 0), (10, 0), (4, 0), (99, 0)])
def test_unsupported_dl_device_is_BufferError(dev):
    """__dlpack__: "If the device type cannot be handled by the producer, this
    function must raise BufferError"."""
    t, _ = cpu_tensor()
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=dev)


def test___dlpack___arguments_are_keyword_only():
    """__dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)."""
    t, _ = cpu_tensor()
    with pytest.raises(TypeError):
        t.__dlpack__(None)
    with pytest.raises(TypeError):
        t.__dlpack__(None, (1, 3))


@pytest.mark.parametrize("stream", [0, 1, 2, 3, 12345])
def test_stream_invalid_for_cpu_is_ValueError(stream):
    """__dlpack__: "On CPU and other device types without streams, only None is
    accepted." dlpackshim raises ValueError (NumPy raises RuntimeError, PyTorch
    AssertionError)."""
    t, _ = cpu_tensor()
    with pytest.raises(ValueError):
        t.__dlpack__(stream=stream)
    with pytest.raises(ValueError):
        t.__dlpack__(stream=stream, max_version=(1, 3))


def test_stream_None_is_accepted_on_cpu():
    t, _ = cpu_tensor()
    assert P.capsule_name(t.__dlpack__(stream=None, max_version=(1, 3))) == b"dltensor_versioned"


# ---------------------------------------------------------------------------
# version negotiation
# ---------------------------------------------------------------------------
def test_max_version_None_gives_legacy_capsule():
    t, a = cpu_tensor()
    cap = t.__dlpack__()
    assert P.capsule_name(cap) == b"dltensor"
    d = P.describe_capsule(cap)
    assert d["data"] + d["byte_offset"] == a.ctypes.data


@pytest.mark.parametrize("mv", [(0, 8), (0, 0)])
def test_max_version_major_0_gives_legacy_capsule(mv):
    t, _ = cpu_tensor()
    assert P.capsule_name(t.__dlpack__(max_version=mv)) == b"dltensor"


@pytest.mark.parametrize("mv", [(1, 0), (1, 3), (1, 99), (2, 0), (7, 7)])
def test_max_version_major_ge_1_gives_versioned_capsule_of_major_1(mv):
    """The producer returns a versioned capsule of a version it supports; never
    a major version above 1 (that would change the layout)."""
    t, a = cpu_tensor()
    cap = t.__dlpack__(max_version=mv)
    assert P.capsule_name(cap) == b"dltensor_versioned"
    d = P.describe_capsule(cap)
    assert d["version"][0] == 1
    assert d["version"] <= (1, 3)
    if mv >= (1, 3):
        assert d["version"] == (1, 3), "recommended: the max_version asked when supported"
    assert d["data"] + d["byte_offset"] == a.ctypes.data
    assert d["flags"] & P.FLAG_IS_COPIED == 0


# ---------------------------------------------------------------------------
# copy rules
# ---------------------------------------------------------------------------
def test_copy_True_exports_a_fresh_buffer_with_IS_COPIED():
    t, a = cpu_tensor()
    cap = t.__dlpack__(max_version=(1, 3), copy=True)
    d = P.describe_capsule(cap)
    assert d["flags"] & P.FLAG_IS_COPIED
    assert not d["flags"] & P.FLAG_READ_ONLY
    assert d["data"] + d["byte_offset"] != a.ctypes.data
    t2 = ds.from_dlpack(cap)
    assert t2.is_copied
    a[:] = -1
    assert t2.tobytes() == np.arange(6, dtype=np.float32).tobytes()


@pytest.mark.numpy_min("2.1")
def test_copy_True_of_read_only_is_writable_copy():
    t, a = cpu_tensor(readonly=True)
    cap = t.__dlpack__(max_version=(1, 3), copy=True)
    d = P.describe_capsule(cap)
    assert d["flags"] & P.FLAG_IS_COPIED
    assert not d["flags"] & P.FLAG_READ_ONLY
    assert d["data"] != a.ctypes.data


def test_copy_False_on_cpu_is_zero_copy():
    t, a = cpu_tensor()
    cap = t.__dlpack__(max_version=(1, 3), copy=False)
    d = P.describe_capsule(cap)
    assert d["data"] + d["byte_offset"] == a.ctypes.data
    assert not d["flags"] & P.FLAG_IS_COPIED


def _fake_cuda_tensor():
    """A shim tensor on kDLCUDA (the pointer is never dereferenced)."""
    p = P.VersionedProducer(data=0x7F0000001000, shape=(4,), dtype=(2, 32, 1), device=(2, 0))
    return ds.from_dlpack(p), p


def test_copy_False_needing_a_copy_is_BufferError_from___dlpack__():
    """__dlpack__: copy=False -> "a BufferError ... if a copy is deemed
    necessary" (moving CUDA memory to the host needs one)."""
    t, p = _fake_cuda_tensor()
    assert t.device == (2, 0)
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    t.close()
    collect()
    # every export deleted (a plain import of GPU data asks the producer twice)
    assert p.deleter_calls == len(p.records) >= 1


def test_copy_False_needing_a_copy_is_ValueError_from_from_dlpack():
    """from_dlpack: "If a copy must be made to enable this support but copy is
    set to False, the function must raise ValueError"."""
    p = P.VersionedProducer(data=0x7F0000001000, shape=(4,), dtype=(2, 32, 1), device=(2, 0))
    with pytest.raises(ValueError):
        ds.from_dlpack(p, device=(1, 0), copy=False)
    collect()
    assert p.deleter_calls == p.exports  # whatever was exported was released


@pytest.mark.parametrize("device", [(1, 1), (2, 0), (3, 0), (-1, 0)])
@pytest.mark.parametrize("make", [lambda: np.arange(4.0), lambda: bytearray(8)],
                         ids=["ndarray", "bytearray"])
def test_copy_False_to_a_device_no_copy_reaches_is_BufferError(make, device):
    """A placement that no copy could make is not the standard's ValueError
    ("possible via an explicit copy"): BufferError, whatever the copy keyword
    (a defect: an ndarray with copy=False raised ValueError)."""
    for copy in (None, False):
        with pytest.raises(BufferError):
            ds.from_dlpack(make(), device=device, copy=copy)


def test_copy_False_refuses_an_export_that_is_a_copy():
    """copy=False: "the function must never copy". A producer that copies
    anyway (IS_COPIED) breaks the protocol: BufferError, never a copy taken
    for a view (a defect: it was accepted)."""
    src = np.arange(4.0)

    class CopiesAnyway:
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            return src.__dlpack__(max_version=max_version, copy=True)

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match="IS_COPIED"):
        ds.from_dlpack(CopiesAnyway(), copy=False)
    t = ds.from_dlpack(CopiesAnyway(), copy=True)  # asked for: fine
    assert t.is_copied and np.from_dlpack(t).tolist() == src.tolist()
    # A producer whose capsule destructor is Python code (it may clear a
    # pending exception: the refusal is raised once the capsule is gone), its
    # export deleted exactly once.
    p = P.VersionedProducer(shape=(3,), copied=True)
    with pytest.raises(BufferError, match="IS_COPIED"):
        ds.from_dlpack(p, copy=False)
    collect()
    assert p.deleter_calls == p.exports == 1


@pytest.mark.parametrize("kw, words", [
    (dict(version=(2, 0)), "version 2.0"), (dict(ndim=-1), "ndim -1"),
    (dict(null_data=True), "data is NULL"), (dict(capsule_name=b"foo"), "named \"foo\"")])
def test_a_refused_export_whose_capsule_destructor_is_python_keeps_its_error(kw, words):
    """The export refused, its capsule dropped afterwards: a producer whose
    capsule destructor is Python code (it may clear a pending exception)
    still gets the refusal's BufferError (a defect: SystemError, "returned
    NULL without setting an exception")."""
    p = P.VersionedProducer(shape=(3,), **kw)
    with pytest.raises(BufferError, match=re.escape(words)):
        ds.from_dlpack(p)
    collect()


def test_a_refused_batch_of_an_iterator_keeps_its_error():
    """from_dlpack_many of an iterator: the tuple it makes is the last owner
    of the capsules, dropped after a refusal; a capsule destructor that is
    Python code does not clear the BufferError (a defect: SystemError)."""
    good, _ = P.make_capsule(shape=(3,))
    bad, _ = P.make_capsule(shape=(3,), capsule_name=b"foo")
    objs = iter([good, bad])
    del good, bad
    with pytest.raises(BufferError, match="named \"foo\""):
        ds.from_dlpack_many(objs)
    collect()


def _owning_a_capsule():
    """A dict or tuple whose release runs a producer's Python code (the
    capsule's destructor): what a producer hands over may own anything."""
    return P.make_capsule(shape=(2,))[0]


@pytest.mark.parametrize("case", ["refused keywords", "__array_interface__",
                                  "__cuda_array_interface__", "__dlpack_device__"])
def test_what_a_producer_returned_is_released_with_the_error_kept(case):
    """A failure whose cleanup drops what the producer handed over (a
    TypeError and its traceback, an interface dict, a device tuple), which
    owns a capsule whose destructor is Python code: the documented error
    stays (a defect: SystemError, "returned NULL without setting an
    exception")."""
    if case == "refused keywords":
        class X:
            def __dlpack_device__(self):
                return (1, 0)

            def __dlpack__(self, **kw):
                cap = _owning_a_capsule()  # noqa: F841 - in the traceback's frame
                raise TypeError("unexpected keyword")
        exc, call = BufferError, lambda: ds.from_dlpack(X(), device=(4, 0))
    elif case == "__dlpack_device__":
        class X:
            def __dlpack_device__(self):
                return (1, 0, _owning_a_capsule())

            def __dlpack__(self, **kw):
                raise AssertionError("not asked")
        exc, call = TypeError, lambda: ds.from_dlpack(X(), copy=True)
    else:
        iface = {"version": 3, "shape": [2], "typestr": "<f4", "data": (0, False)}
        X = type("X", (), {case: property(lambda self: dict(iface, owner=_owning_a_capsule()))})
        exc, call = TypeError, lambda: ds.from_dlpack(X())
    with pytest.raises(exc):
        call()
    collect()


def _raising_dlpack(self):
    """A __dlpack__ that raises and leaves no frame behind (a partial of a
    builtin), owning a capsule: our reference is its last."""
    import functools
    import operator
    f = functools.partial(operator.truediv, 1, 0)
    f.cap = _owning_a_capsule()
    return f


class _NoDict:
    @property
    def __dict__(self):
        raise ValueError("no dict")


def _interface_with_an_index_that_replaces(field, cuda):
    """An interface dict whose `field` holds an int-like that replaces that
    very item (the dict's reference goes: ours is the last) and raises."""
    class Idx:
        def __init__(self, d, repl):
            self.d, self.repl, self.cap = d, repl, _owning_a_capsule()

        def __index__(self):
            self.d[field] = self.repl
            del self.d
            raise TypeError("no index")

    def make(self):
        d = {"version": 3, "shape": (2,), "typestr": "<f4", "data": (0, False)}
        d[field] = {"shape": lambda: (Idx(d, (2,)),), "version": lambda: Idx(d, 3),
                    "data": lambda: (Idx(d, (0, False)), False),
                    "strides": lambda: (Idx(d, None),)}[field]()
        return d
    name = "__cuda_array_interface__" if cuda else "__array_interface__"
    return type("X", (), {name: property(make)})


@pytest.mark.parametrize("case", [
    "__dlpack__ raising", "a table refusing", "an __mro__ raising", "__dlpack_device__ interrupted",
    *[f"{f} __index__{' cuda' if c else ''}" for f in ("shape", "version", "data", "strides")
      for c in (False, True)]])
def test_a_producer_object_dropped_last_keeps_the_error(case):
    """More of the same: the last reference to what a producer or a
    metaclass handed over is ours, dropped after a failure (a bound
    __dlpack__, a __mro__ tuple, an exception's traceback, an interface
    item an __index__ replaced): the error raised is the right one (a
    defect: SystemError)."""
    api = ds.Tensor.__dlpack_c_exchange_api__
    if case == "__dlpack__ raising":
        X = type("X", (), {"__dlpack__": property(_raising_dlpack),
                           "__dlpack_device__": lambda self: (1, 0)})
        exc = ZeroDivisionError
    elif case == "a table refusing":
        X = type("X", (), {"__dlpack__": property(_raising_dlpack), "__dlpack_c_exchange_api__": api,
                           "__dlpack_device__": lambda self: (1, 0)})
        exc = TypeError
    elif case == "an __mro__ raising":
        Meta = type("Meta", (type,), {"__mro__": property(
            lambda cls: (_NoDict(), _owning_a_capsule()))})
        X = Meta("X", (), {"__dlpack_c_exchange_api__": api,
                           "__dlpack__": lambda self, **kw: None,
                           "__dlpack_device__": lambda self: (1, 0)})
        exc = ValueError
    elif case == "__dlpack_device__ interrupted":
        class X:
            def __dlpack__(self, **kw):
                cap = _owning_a_capsule()  # noqa: F841 - in the traceback's frame
                raise ValueError("mine")

            def __dlpack_device__(self):
                raise KeyboardInterrupt
        exc = KeyboardInterrupt
    else:
        field, _, cuda = case.partition(" __index__")
        X, exc = _interface_with_an_index_that_replaces(field, cuda == " cuda"), TypeError
    with pytest.raises(exc):
        ds.from_dlpack(X())
    collect()


def test_copy_True_from_dlpack_is_a_copy():
    a = np.arange(8, dtype=np.int16)
    t = ds.from_dlpack(a, copy=True)
    assert t.data_ptr != a.ctypes.data
    assert t.is_copied
    a[:] = 0
    assert t.tobytes() == np.arange(8, dtype=np.int16).tobytes()


# ---------------------------------------------------------------------------
# read-only
# ---------------------------------------------------------------------------
@pytest.mark.numpy_min("2.1")
def test_legacy_export_of_read_only_is_BufferError():
    """A legacy capsule cannot say read-only: refuse (as NumPy >= 2 does)."""
    t, _ = cpu_tensor(readonly=True)
    assert t.readonly
    with pytest.raises(BufferError):
        t.__dlpack__()
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(0, 8))
    cap = t.__dlpack__(max_version=(1, 3))
    assert P.describe_capsule(cap)["flags"] & P.FLAG_READ_ONLY


def test_read_only_flag_is_honoured_on_import():
    p = P.VersionedProducer(shape=(3,), readonly=True)
    t = ds.from_dlpack(p)
    assert t.readonly
    assert P.describe_capsule(t.__dlpack__(max_version=(1, 3)))["flags"] & P.FLAG_READ_ONLY
    with pytest.raises(BufferError):
        t.__dlpack__()


def test_legacy_import_is_read_only():
    """The legacy ABI has no flags: dlpackshim grants no write access it was not
    given (as NumPy >= 2.3), yet the data may leave by the ABI it came in by."""
    p = P.LegacyProducer(shape=(3,))
    t = ds.from_dlpack(p)
    assert t.readonly  # no flags: writability unknown, so never granted
    assert t.dlpack_version is None
    assert P.capsule_name(t.__dlpack__()) == b"dltensor"


def test_is_copied_flag_is_reported():
    p = P.VersionedProducer(shape=(3,), copied=True)
    t = ds.from_dlpack(p)
    assert t.is_copied
    p2 = P.VersionedProducer(shape=(3,))
    assert not ds.from_dlpack(p2).is_copied


# ---------------------------------------------------------------------------
# from_dlpack argument rules
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("obj", [1, 2.5, "abc", [1, 2, 3], (1, 2), None, {"a": 1}, object(), 3j],
                         ids=lambda o: type(o).__name__)
def test_from_dlpack_of_non_array_is_TypeError_naming_what_was_expected(obj):
    with pytest.raises(TypeError) as ei:
        ds.from_dlpack(obj)
    msg = str(ei.value)
    assert "__dlpack__" in msg, msg


@pytest.mark.parametrize("attr, message", [("__dlpack__", "not callable"),
                                           ("__array_interface__", "not a dict"),
                                           ("__cuda_array_interface__", "not a dict")])
def test_an_attribute_whose_value_is_the_empty_tuple_is_present(attr, message):
    """On 3.11 and 3.12 an absent attribute was told by getattr's default,
    the empty tuple, a singleton: an attribute set to () read as absent."""
    cls = type("Odd", (), {attr: (), "__dlpack_device__": lambda self: (1, 0)})
    with pytest.raises(TypeError, match=message):
        ds.from_dlpack(cls())


def test_from_dlpack_positional_only_and_keyword_only():
    a = np.zeros(2)
    with pytest.raises(TypeError):
        ds.from_dlpack(x=a)
    with pytest.raises(TypeError):
        ds.from_dlpack(a, None)


# ---------------------------------------------------------------------------
# capsules
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("versioned", [True, False])
def test_raw_capsule_is_imported_and_renamed(versioned):
    a = np.arange(4, dtype=np.float64)
    cap, rec = P.make_capsule(versioned=versioned, data=a, shape=(4,), dtype=(2, 64, 1))
    t = ds.from_dlpack(cap)
    assert P.capsule_name(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    assert t.data_ptr == a.ctypes.data
    assert rec.deleter_calls == 0
    t.close()
    del cap   # the consumed capsule may be what owns the tensor now
    collect()
    assert rec.deleter_calls == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_used_capsule_is_BufferError_and_deleter_not_called_again(versioned):
    cap, rec = P.make_capsule(versioned=versioned, shape=(4,))
    t = ds.from_dlpack(cap)
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    assert rec.deleter_calls == 0
    t.close()
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    assert rec.deleter_calls <= 1
    del cap
    collect()
    assert rec.deleter_calls == 1


@pytest.mark.parametrize("name", [b"used_dltensor", b"used_dltensor_versioned"])
def test_capsule_already_named_used_is_BufferError(name):
    cap, rec = P.make_capsule(versioned=name.endswith(b"versioned"), capsule_name=name, shape=(2,))
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    assert rec.deleter_calls == 0
    assert P.capsule_name(cap) == name


@pytest.mark.parametrize("name", [b"foo", b"dltensorx", b"DLTENSOR", b"dltensor_versioned2", b""])
def test_capsule_with_foreign_name_is_BufferError_deleter_not_called(name):
    cap, rec = P.make_capsule(capsule_name=name, shape=(2,))
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    collect()
    assert rec.deleter_calls == 0
    assert P.capsule_name(cap) == name
    del cap
    collect()
    assert rec.deleter_calls == 1  # the capsule's own destructor, once


def test_capsule_returned_by___dlpack___with_foreign_name_is_BufferError():
    p = P.VersionedProducer(shape=(2,), capsule_name=b"not_a_dltensor", keep_capsules=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(p)
    collect()
    assert p.deleter_calls == 0


@pytest.mark.parametrize("bad", [42, b"bytes", None, "dltensor"])
def test___dlpack___returning_a_non_capsule_is_an_error(bad):
    obj = P.CapsuleReturningProducer(lambda **kw: bad)
    with pytest.raises((TypeError, BufferError)):
        ds.from_dlpack(obj)


# ---------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", [(2, 0), (3, 1), (0xFFFFFFFF, 0)])
def test_version_major_newer_is_BufferError_deleter_called_once(version):
    """dlpack.h: major differs -> "the consumer must call the deleter (and it is
    safe to do so). It is not safe to access any other fields"."""
    p = P.VersionedProducer(shape=(3,), version=version, keep_capsules=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(p)
    collect()
    assert p.deleter_calls == 1
    p.capsules.clear()
    collect()
    assert p.deleter_calls == 1


def test_version_major_newer_raw_capsule_deleter_called_once():
    cap, rec = P.make_capsule(shape=(3,), version=(2, 0))
    # garbage everywhere after `flags`: a consumer must not read it
    rec.managed.dl_tensor.ndim = -12345
    rec.managed.dl_tensor.dtype.code = 250
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    collect()
    assert rec.deleter_calls == 1
    del cap
    collect()
    assert rec.deleter_calls == 1


def test_version_major_0_in_versioned_capsule_is_BufferError_deleter_called_once():
    """dlpack.h: "major version that disagrees with the version number
    specified in this header ... the consumer must call the deleter"."""
    p = P.VersionedProducer(shape=(3,), version=(0, 9), keep_capsules=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(p)
    collect()
    assert p.deleter_calls == 1


@pytest.mark.parametrize("version", [(1, 0), (1, 1), (1, 2), (1, 3), (1, 99)])
def test_any_minor_of_major_1_is_accepted(version):
    """Minor version mismatch: "the tensor can be safely used"."""
    a = np.arange(3, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(3,), version=version)
    t = ds.from_dlpack(p)
    assert t.dlpack_version == version
    assert t.tobytes() == a.tobytes()


# ---------------------------------------------------------------------------
# invalid tensors: BufferError naming the field, deleter exactly once
# ---------------------------------------------------------------------------
_BUF = (P.c_int64 * 64)()   # data for tensors that must be rejected before any read

INVALID = [
    ("ndim_negative", dict(shape=(3,), ndim=-1), r"ndim|dimension"),
    ("ndim_huge", dict(shape=(3,), ndim=1 << 20), r"ndim|dimension"),
    ("ndim_int32_max", dict(shape=(3,), ndim=2**31 - 1), r"ndim|dimension"),
    ("null_shape", dict(shape=(3,), null_shape=True), r"shape"),
    ("negative_extent", dict(shape=(2, -3)), r"shape|extent|dimension|negative"),
    ("unknown_dtype_code", dict(shape=(3,), dtype=(99, 32, 1)), r"dtype|code|type"),
    ("dtype_code_19", dict(shape=(3,), dtype=(19, 8, 1)), r"dtype|code|type"),
    ("bcomplex_bits_8", dict(shape=(3,), dtype=(18, 8, 1)), r"bits|dtype"),
    ("float_bits_7", dict(shape=(3,), dtype=(2, 7, 1)), r"bits|dtype"),
    ("bits_0", dict(shape=(3,), dtype=(0, 0, 1)), r"bits|dtype"),
    ("float6_bits_8", dict(shape=(3,), dtype=(15, 8, 1)), r"bits|dtype"),
    ("float4_bits_8", dict(shape=(3,), dtype=(17, 8, 1)), r"bits|dtype"),
    ("float8_bits_16", dict(shape=(3,), dtype=(10, 16, 1)), r"bits|dtype"),
    ("bfloat_bits_32", dict(shape=(3,), dtype=(4, 32, 1)), r"bits|dtype"),
    ("lanes_0", dict(shape=(3,), dtype=(2, 32, 0)), r"lanes|dtype"),
    ("device_type_99", dict(shape=(3,), device=(99, 0)), r"device"),
    ("device_type_5", dict(shape=(3,), device=(5, 0)), r"device"),
    ("device_type_0", dict(shape=(3,), device=(0, 0)), r"device"),
    ("device_id_negative", dict(shape=(3,), device=(1, -1)), r"device"),
    ("numel_overflow", dict(shape=(2**62, 2**62)), r"overflow|size|shape|large"),
    ("bytes_overflow", dict(shape=(2**61,), dtype=(2, 64, 1)), r"overflow|size|shape|large|bytes"),
    ("stride_overflow", dict(shape=(3,), strides=(2**62,), dtype=(2, 64, 1)),
     r"overflow|stride|size|large"),
    ("null_data_nonempty", dict(shape=(3,), null_data=True), r"data|null"),
]


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_tensor_is_BufferError_naming_the_field_deleter_called_once(case, versioned):
    name, kw, pattern = case
    kw = dict(kw)
    if not kw.get("null_data"):
        kw["data"] = _BUF
    cls = P.VersionedProducer if versioned else P.LegacyProducer
    p = cls(keep_capsules=True, **kw)
    with pytest.raises(BufferError) as ei:
        ds.from_dlpack(p)
    assert re.search(pattern, str(ei.value), re.I), f"message {str(ei.value)!r} does not name the field"
    del ei
    assert p.exports <= 1
    p.capsules.clear()
    collect()
    assert p.deleter_calls == p.exports, "a rejected tensor must be deleted exactly once"


@pytest.mark.parametrize("case", INVALID[:6], ids=[c[0] for c in INVALID[:6]])
def test_invalid_raw_capsule_deleter_called_once(case):
    name, kw, pattern = case
    kw = dict(kw, data=_BUF)
    cap, rec = P.make_capsule(**kw)
    with pytest.raises(BufferError):
        ds.from_dlpack(cap)
    collect()
    assert rec.deleter_calls == 1
    del cap
    collect()
    assert rec.deleter_calls == 1


# ---------------------------------------------------------------------------
# odd but valid tensors
# ---------------------------------------------------------------------------
def test_null_deleter_is_allowed_and_never_called():
    a = np.arange(4, dtype=np.int32)
    p = P.VersionedProducer(data=a, shape=(4,), dtype=(0, 32, 1), null_deleter=True)
    t = ds.from_dlpack(p)
    assert t.tobytes() == a.tobytes()
    t.close()
    collect()
    assert p.deleter_calls == 0


@pytest.mark.parametrize("version", [(1, 0), (1, 1)])
def test_null_strides_before_1_2_mean_compact_row_major(version):
    a = np.arange(12, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(3, 4), null_strides=True, version=version)
    t = ds.from_dlpack(p)
    assert t.strides == (4, 1)
    assert t.tobytes() == a.tobytes()


def test_null_strides_from_legacy_mean_compact_row_major():
    a = np.arange(24, dtype=np.int16)
    p = P.LegacyProducer(data=a, shape=(2, 3, 4), dtype=(0, 16, 1), null_strides=True)
    t = ds.from_dlpack(p)
    assert t.strides == (12, 4, 1)
    assert t.tobytes() == a.tobytes()


def test_null_strides_from_1_3_is_compact_or_rejected():
    """dlpack 1.2+: strides "can not be NULL if ndim != 0". Either reject
    (BufferError naming strides) or read as compact: never crash or misread."""
    a = np.arange(6, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(2, 3), null_strides=True, version=(1, 3))
    try:
        t = ds.from_dlpack(p)
    except BufferError as e:
        assert "stride" in str(e).lower()
    else:
        assert t.strides == (3, 1)
        assert t.tobytes() == a.tobytes()
    collect()


def test_zero_size_with_null_data_is_valid():
    """dlpack.h: "if the tensor is of size zero, then the data pointer should be NULL"."""
    p = P.VersionedProducer(shape=(0, 5), null_data=True)
    t = ds.from_dlpack(p)
    assert t.shape == (0, 5)
    assert t.size == 0 and t.nbytes == 0
    assert t.tobytes() == b""
    t.close()
    collect()
    assert p.deleter_calls == 1


def test_zero_d_with_null_shape_and_strides_is_valid():
    a = np.array([7.5], dtype=np.float64)
    p = P.VersionedProducer(data=a, shape=(), dtype=(2, 64, 1), null_shape=True, null_strides=True)
    t = ds.from_dlpack(p)
    assert t.shape == () and t.strides == () and t.ndim == 0 and t.size == 1
    assert t.tobytes() == a.tobytes()


def test_byte_offset_is_added():
    a = np.arange(8, dtype=np.int32)
    p = P.VersionedProducer(data=a, shape=(3,), dtype=(0, 32, 1), byte_offset=8)
    t = ds.from_dlpack(p)
    assert t.data_ptr == a.ctypes.data + 8
    assert t.tobytes() == a[2:5].tobytes()


# ---------------------------------------------------------------------------
# producer misbehaviour
# ---------------------------------------------------------------------------
class MyError(Exception):
    pass


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyError("k"), BufferError("nope"),
                                 MemoryError(), ZeroDivisionError("z"), MyError("mine"),
                                 NotImplementedError("ni"), ValueError("v")],
                         ids=lambda e: type(e).__name__)
def test_producer___dlpack___exception_propagates_unchanged(exc):
    """from_dlpack: __dlpack__ "may raise BufferError ... It may also raise
    other errors ... from_dlpack must propagate such exceptions"."""
    p = P.VersionedProducer(shape=(2,), raise_on_dlpack=exc)
    with pytest.raises(type(exc)) as ei:
        ds.from_dlpack(p)
    assert ei.value is exc
    assert p.exports == 0


def test_producer_raising_TypeError_always_propagates_TypeError():
    exc = TypeError("I always fail")
    p = P.VersionedProducer(shape=(2,), raise_on_dlpack=exc)
    with pytest.raises(TypeError):
        ds.from_dlpack(p)
    assert p.exports == 0


def test_legacy_producer_fallback_when_copy_and_device_are_None():
    a = np.arange(5, dtype=np.float32)
    p = P.LegacyProducer(data=a, shape=(5,))
    t = ds.from_dlpack(p)
    assert p.calls == [dict(stream=None)]     # the TypeError attempt never ran the body
    assert t.data_ptr == a.ctypes.data
    assert t.dlpack_version is None
    assert t.readonly  # legacy: writability unknown, never granted
    assert t.tobytes() == a.tobytes()
    t.close()
    collect()
    assert p.deleter_calls == 1


def test_legacy_producer_fallback_with_device_cpu():
    a = np.arange(5, dtype=np.float32)
    p = P.LegacyProducer(data=a, shape=(5,))
    t = ds.from_dlpack(p, device=(1, 0))
    assert t.data_ptr == a.ctypes.data
    assert t.device == (1, 0)


def test_legacy_producer_copy_True_is_still_a_copy():
    a = np.arange(5, dtype=np.float32)
    p = P.LegacyProducer(data=a, shape=(5,))
    t = ds.from_dlpack(p, copy=True)
    assert t.data_ptr != a.ctypes.data
    assert t.tobytes() == a.tobytes()
    a[:] = 42
    assert t.tobytes() == np.arange(5, dtype=np.float32).tobytes()
    assert not t.readonly
    collect()
    assert p.deleter_calls == p.exports  # any legacy export taken for the copy was released


def test_copy_True_with_producer_ignoring_copy_is_still_a_copy():
    """from_dlpack: copy=True -> "the function must always copy". A producer
    that answers with a view (no IS_COPIED flag, as PyTorch 2.13 does even
    when it did copy) cannot be trusted: the consumer copies itself."""
    a = np.arange(5, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(5,), ignore_copy=True)
    t = ds.from_dlpack(p, copy=True)
    assert p.calls[0]["copy"] is True
    assert t.data_ptr != a.ctypes.data
    assert t.is_copied
    a[:] = 7
    assert t.tobytes() == np.arange(5, dtype=np.float32).tobytes()
    collect()
    assert p.deleter_calls == p.exports


def test_legacy_producer_copy_False_is_zero_copy():
    """A legacy export never copies, so copy=False is satisfied by it."""
    a = np.arange(5, dtype=np.float32)
    p = P.LegacyProducer(data=a, shape=(5,))
    t = ds.from_dlpack(p, copy=False)
    assert t.data_ptr == a.ctypes.data


def test_versioned_producer_receives_the_standard_keywords():
    p = P.VersionedProducer(shape=(2,))
    ds.from_dlpack(p)
    assert len(p.calls) == 1
    call = p.calls[0]
    assert call["max_version"] == (1, 3), "the consumer asks for the version it implements"
    assert isinstance(call["max_version"], tuple)
    assert call["stream"] is None, "only None is a valid stream for kDLCPU"


def test_versioned_producer_receives_copy_True():
    a = np.arange(3, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(3,))
    t = ds.from_dlpack(p, copy=True)
    assert t.data_ptr != a.ctypes.data
    assert t.tobytes() == a.tobytes()
    assert t.is_copied


def test_legacy_read_only_producer_BufferError_propagates():
    p = P.LegacyProducer(shape=(2,), readonly=True)
    with pytest.raises(BufferError):
        ds.from_dlpack(p)


def test___dlpack_device___missing():
    """Only __dlpack__: either import it (device from the capsule) or refuse with
    TypeError/AttributeError - never crash, never leak the export."""
    a = np.arange(3, dtype=np.float32)
    p = P.NoDeviceProducer(data=a, shape=(3,))
    try:
        t = ds.from_dlpack(p)
    except (TypeError, AttributeError):
        pass
    else:
        assert t.device == (1, 0)
        assert t.tobytes() == a.tobytes()
        t.close()
    collect()
    assert p.deleter_calls == len(p.records)


def test___dlpack_device___lying_cpu_for_cuda_memory():
    """__dlpack_device__ says CPU, the capsule says CUDA: the capsule's device is
    the truth (the data must never be read as host memory)."""
    p = P.VersionedProducer(data=0x7F0000002000, shape=(4,), device=(2, 0), dlpack_device=(1, 0))
    try:
        t = ds.from_dlpack(p)
    except BufferError:
        pass
    else:
        assert t.device == (2, 0)
        with pytest.raises((BufferError, ValueError, TypeError, AttributeError)):
            t.__array_interface__
        t.close()
    collect()
    assert p.deleter_calls == len(p.records)


def test___dlpack_device___lying_cuda_for_cpu_memory():
    a = np.arange(4, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(4,), device=(1, 0), dlpack_device=(2, 0))
    try:
        t = ds.from_dlpack(p)
    except (BufferError, ValueError):
        pass
    else:
        assert t.device == (1, 0)
        assert t.tobytes() == a.tobytes()
        t.close()
    collect()
    assert p.deleter_calls == len(p.records)


def test___dlpack_device___raising_propagates_or_is_not_needed():
    class Bad(P.VersionedProducer):
        def __dlpack_device__(self):
            raise MyError("device query failed")

    a = np.arange(4, dtype=np.float32)
    p = Bad(data=a, shape=(4,))
    try:
        t = ds.from_dlpack(p)
    except MyError:
        pass
    else:
        assert t.tobytes() == a.tobytes()
        t.close()
    collect()
    assert p.deleter_calls == len(p.records)


# ---------------------------------------------------------------------------
# from_pointer argument rules
# ---------------------------------------------------------------------------
def test_from_pointer_bad_dtype_is_error():
    buf = (P.c_int64 * 4)()
    with pytest.raises((TypeError, ValueError)):
        ds.from_pointer(P.ctypes.addressof(buf), (4,), "float33")
    with pytest.raises((TypeError, ValueError)):
        ds.from_pointer(P.ctypes.addressof(buf), (4,), 3.5)


def test_from_pointer_bad_shape_is_error():
    buf = (P.c_int64 * 4)()
    with pytest.raises((TypeError, ValueError, BufferError)):
        ds.from_pointer(P.ctypes.addressof(buf), (-1,), "int64")
    with pytest.raises(TypeError):
        ds.from_pointer(P.ctypes.addressof(buf), "abc", "int64")
    with pytest.raises((TypeError, ValueError)):
        ds.from_pointer(P.ctypes.addressof(buf), (2, 2), "int64", strides=(1,))


def test_from_pointer_spellings_of_dtype_agree():
    buf = (P.c_int64 * 4)(1, 2, 3, 4)
    addr = P.ctypes.addressof(buf)
    for dt in ("int64", (0, 64, 1), ds.DType(0, 64, 1)):
        t = ds.from_pointer(addr, (4,), dt, owner=buf)
        assert t.dtype == "int64"
        assert t.dtype == (0, 64, 1)
        assert t.dtype.code == ds.DTypeCode.kDLInt and t.dtype.bits == 64 and t.dtype.lanes == 1
        assert t.tobytes() == bytes(buf)


def test_constants():
    assert ds.DLPACK_VERSION == (1, 3)
    assert isinstance(ds.__version__, str) and ds.__version__
    assert ds.DeviceType.kDLCPU == 1 and ds.DeviceType.kDLTrn == 18
    assert ds.DeviceType.kDLCUDAManaged == 13 and ds.DeviceType.kDLMAIA == 17
    assert {int(v) for v in ds.DeviceType} == set(P.DEVICE_TYPES.values())
    assert {m.name: int(m) for m in ds.DTypeCode} == P.DTYPE_CODES
    assert {m.name: int(m) for m in ds.DeviceType} == P.DEVICE_TYPES


# ---------------------------------------------------------------------------
# __dlpack_device__ and the interfaces
# ---------------------------------------------------------------------------
def test___dlpack_device___is_enum_and_id():
    """__dlpack_device__ returns (device type as an Enum, device id)."""
    t, _ = cpu_tensor()
    dev = t.__dlpack_device__()
    assert tuple(dev) == (1, 0)
    assert isinstance(dev[0], int) and dev[0] == ds.DeviceType.kDLCPU
    assert type(dev[0]).__name__ == "DeviceType" or isinstance(dev[0], ds.DeviceType)


def test_cpu_tensor_has_no_cuda_array_interface():
    """Consumers probe with hasattr(): a host tensor must not look like CUDA memory."""
    t, _ = cpu_tensor()
    assert not hasattr(t, "__cuda_array_interface__")
    assert hasattr(t, "__array_interface__")


def test_cuda_tensor_has_no_array_interface():
    t, p = _fake_cuda_tensor()
    assert not hasattr(t, "__array_interface__"), "host code would read device memory"
    with pytest.raises(BufferError):
        t.tobytes()  # cannot read device memory from the host in a CPU-only build or refuses
    t.close()


@pytest.mark.parametrize("dev", [(3, 0), (13, 0), (11, 0)], ids=["CUDAHost", "CUDAManaged", "ROCMHost"])
def test_dl_device_cpu_for_host_accessible_memory(dev):
    """dl_device=(kDLCPU, 0) is satisfiable without a copy for pinned/managed
    host memory: same pointer, capsule on kDLCPU."""
    a = np.arange(4, dtype=np.float32)
    p = P.VersionedProducer(data=a, shape=(4,), device=dev)
    t = ds.from_dlpack(p)
    assert t.device == dev
    assert t.tobytes() == a.tobytes()
    d = P.describe_capsule(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False))
    assert d["device"] == (1, 0)
    assert d["data"] + d["byte_offset"] == a.ctypes.data
    t2 = ds.from_dlpack(p, device=(1, 0), copy=False)
    assert t2.device == (1, 0)
    assert t2.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data


def test_ndim_beyond_numpy_limit():
    """DLPack sets no ndim limit; 100 dimensions of extent 1 are a valid tensor
    (NumPy itself stops at 64)."""
    p = P.VersionedProducer(shape=(1,) * 100, fill=b"\x01\x02\x03\x04")
    t = ds.from_dlpack(p)
    assert t.ndim == 100 and t.size == 1 and t.strides == (1,) * 100
    assert t.tobytes() == b"\x01\x02\x03\x04"
    t2 = ds.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    assert t2.shape == (1,) * 100
