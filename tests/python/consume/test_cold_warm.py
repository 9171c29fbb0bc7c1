"""Every public entry point that takes an array-like, first sight and after.

from_dlpack decides in one C function, on every call; a small memo
(csrc/python/consume.c) remembers what a type's attributes say where they
cannot change, and a type's exchange-table verdict. A memo may speed a call
up, never change its answer: each hostile input is handed to each entry
point on a fresh class (the first sight), then on more instances of the same
class, and the outcomes must be the same: the same result, or the same
exception class with the same message, of the class the array API standard
names. BaseExceptions the object raises propagate every time.
"""

from __future__ import annotations

import ctypes

import pytest

import dlpackshim as ds

np = pytest.importorskip("numpy")

_KEEP = []


def _legacy_capsule():
    return np.arange(4.0).__dlpack__()  # no max_version: a legacy capsule


def _used_capsule():
    cap = np.arange(4.0).__dlpack__(max_version=(1, 3))
    _KEEP.append(ds.from_dlpack(cap))  # consumed: renamed used_dltensor_versioned
    return cap


class _Once:
    """Raises `exc` the first time it is called on each instance, then works."""

    def __init__(self, exc):
        self.exc = exc
        self.done = set()

    def __call__(self, obj, good):
        if id(obj) not in self.done:
            self.done.add(id(obj))
            raise self.exc
        return good


def _producer(dlpack, device=lambda self: (1, 0), **extra):
    ns = {"__dlpack__": dlpack, "__dlpack_device__": device}
    ns.update(extra)
    return ns


# name -> a function making the namespace of a new class (a cold type each call)
HOSTILE = {
    "dlpack returns an int": lambda: _producer(lambda self, **kw: 42),
    "dlpack raises BufferError": lambda: _producer(
        lambda self, **kw: (_ for _ in ()).throw(BufferError("producer says no"))),
    "dlpack raises KeyboardInterrupt": lambda: _producer(
        lambda self, **kw: (_ for _ in ()).throw(KeyboardInterrupt("stop"))),
    "dlpack returns a used capsule": lambda: _producer(lambda self, **kw: _used_capsule()),
    "dlpack takes no keywords (legacy)": lambda: _producer(lambda self: _legacy_capsule()),
    "dlpack_device returns a str": lambda: _producer(
        lambda self, **kw: np.arange(3.0).__dlpack__(**kw), device=lambda self: "cpu"),
    "dlpack_device raises": lambda: _producer(
        lambda self, **kw: np.arange(3.0).__dlpack__(**kw),
        device=lambda self: (_ for _ in ()).throw(RuntimeError("no device"))),
    "dlpack_device raises KeyboardInterrupt": lambda: _producer(
        lambda self, **kw: np.arange(3.0).__dlpack__(**kw),
        device=lambda self: (_ for _ in ()).throw(KeyboardInterrupt("no device"))),
    "dlpack is None": lambda: {"__dlpack__": None},
    "interface shape of floats": lambda: {"__array_interface__": property(
        lambda self: {"version": 3, "shape": (4.5,), "typestr": "|u1", "data": (8, True)})},
    "interface raises SystemExit": lambda: {"__array_interface__": property(
        lambda self: (_ for _ in ()).throw(SystemExit(3)))},
    "nothing array-like": lambda: {},
}

ENTRY_POINTS = {
    "from_dlpack": lambda x: ds.from_dlpack(x),
    "from_dlpack(copy=True)": lambda x: ds.from_dlpack(x, copy=True),
    "from_dlpack(copy=False)": lambda x: ds.from_dlpack(x, copy=False),
    "from_dlpack(device=cpu)": lambda x: ds.from_dlpack(x, device=(1, 0)),
    "from_dlpack_many": lambda x: ds.from_dlpack_many([x])[0],
}


def outcome(call):
    try:
        t = call()
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        return type(e).__name__, str(e)
    _KEEP.append(t)
    return "ok", (t.shape, str(t.dtype), t.device, t.readonly, t.is_copied)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_same_outcome_cold_and_warm(entry, hostile):
    call = ENTRY_POINTS[entry]
    cls = type("Hostile", (), HOSTILE[hostile]())
    cold = outcome(lambda: call(cls()))
    warm = outcome(lambda: call(cls()))
    warmer = outcome(lambda: call(cls()))
    assert cold == warm == warmer
    kind = cold[0]
    # Never a crash class nor OverflowError; BaseExceptions of the object pass.
    assert kind not in ("SystemError", "OverflowError")
    # __dlpack_device__ is asked only when a device is asked for (as NumPy's
    # from_dlpack, a plain import relies on what the capsule says).
    if "KeyboardInterrupt" in hostile and ("dlpack raises" in hostile or "device" in entry):
        assert kind == "KeyboardInterrupt"
    if "SystemExit" in hostile:
        assert kind == "SystemExit"


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_interrupt_once_propagates_then_the_type_works(entry):
    """A producer whose __dlpack__ raises KeyboardInterrupt on its first call
    per instance: the interrupt reaches the caller, cold and warm, and the
    next call on the same instance imports."""
    once = _Once(KeyboardInterrupt("once"))

    def dlpack(self, **kw):
        return once(self, np.arange(3.0).__dlpack__(**kw))

    cls = type("Flaky", (), _producer(dlpack))
    for _ in range(2):  # cold, then warm
        obj = cls()
        with pytest.raises(KeyboardInterrupt):
            ENTRY_POINTS[entry](obj)
        assert outcome(lambda: ENTRY_POINTS[entry](obj))[0] == "ok"


BUFFERS = {
    "ctypes c_double[4]": lambda: (ctypes.c_double * 4)(1, 2, 3, 4),
    "ctypes c_wchar[4]": lambda: (ctypes.c_wchar * 4)(),
    "ctypes Structure[2]": lambda: (type("S", (ctypes.Structure,),
                                         {"_fields_": [("a", ctypes.c_int)]}) * 2)(),
    "bytes": lambda: bytes(8),
    "read-only memoryview of bytearray": lambda: memoryview(bytearray(8)).toreadonly(),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("buf", list(BUFFERS))
def test_buffers_same_outcome_cold_and_warm(entry, buf):
    """Buffers of fresh ctypes types (cold) and of the same type again (warm)."""
    make = BUFFERS[buf]
    first = make()
    cold = outcome(lambda: ENTRY_POINTS[entry](first))
    warm = outcome(lambda: ENTRY_POINTS[entry](make()))
    assert cold[0] == warm[0]
    if cold[0] != "ok":
        assert cold == warm
    assert cold[0] not in ("SystemError", "OverflowError")


# Tensor.__dlpack__: each hostile keyword gets the class the standard names,
# alone and beside a copy.
DLPACK_KEYWORDS = [
    ({"max_version": (1,)}, TypeError),
    ({"max_version": "x"}, TypeError),
    ({"max_version": (1, 2**70)}, ValueError),
    ({"max_version": (-1, 0)}, ValueError),
    ({"dl_device": (1, 2**40)}, ValueError),
    ({"dl_device": (1.0, 0)}, TypeError),
    ({"dl_device": "cpu"}, TypeError),
    ({"copy": "yes"}, TypeError),
    ({"copy": 1}, TypeError),
    ({"stream": 0}, ValueError),
    ({"stream": "s"}, TypeError),
    ({"devcie": None}, TypeError),
    ({"devcie": None, "copy": True}, TypeError),
]


@pytest.mark.parametrize("kwargs, exc", DLPACK_KEYWORDS, ids=[repr(k) for k, _ in DLPACK_KEYWORDS])
@pytest.mark.parametrize("with_copy", [False, True], ids=["as given", "with copy=True"])
def test_tensor_dlpack_keywords(kwargs, exc, with_copy):
    """The same refusal whatever else the call asks for."""
    t = ds.from_dlpack(np.arange(3.0))
    if with_copy and "copy" not in kwargs:
        kwargs = dict(kwargs, copy=True)
    with pytest.raises(exc) as got:
        t.__dlpack__(**kwargs)
    if "devcie" in kwargs:
        assert "'devcie'" in str(got.value)


def _package_frames_during(call):
    """The package's Python functions that run while `call()` runs, from
    sys.setprofile (the producer's own code is not the package's)."""
    import os
    import sys
    pkg = os.path.dirname(ds.__file__)
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(pkg):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, seen


def _torch_subclass():
    """Objects of a new type whose C exchange table is usable: a subclass of
    torch.Tensor (PyTorch >= 2.10 carries a table)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")
    cls = type("MyTensor", (torch.Tensor,), {})
    return lambda: torch.arange(3.0).as_subclass(cls)


def _objects_of(cls, *args):
    return lambda: cls(*args)


# kind -> a function giving a maker of objects of one new type
FIRST_SIGHT = {
    "a DLPack producer": lambda: _objects_of(type("P", (), _producer(
        lambda self, **kw: np.arange(3.0).__dlpack__(**kw)))),
    "a buffer": lambda: _objects_of(type("B", (bytearray,), {}), b"abcd"),
    "an array interface": lambda: _objects_of(type("I", (), {"__array_interface__": property(
        lambda self: {"version": 3, "shape": (2,), "typestr": "|u1", "data": bytearray(2)})})),
    "a C exchange table": _torch_subclass,
}


@pytest.mark.parametrize("kind", list(FIRST_SIGHT))
def test_from_dlpack_decides_without_the_packages_python(kind):
    """from_dlpack(x) decides in C, for a type never seen and after: no
    function of the package's Python runs (issue 30: no Python twin), but
    _guard_for, asked what that producer's table skips (the package knows
    PyTorch's; C does not): on each import of a subclass of the type that
    carries the table, whose verdict is not remembered (its classes may
    change in any way)."""
    make = FIRST_SIGHT[kind]()
    for _ in range(2):
        t, frames = _package_frames_during(lambda: ds.from_dlpack(make()))
        allowed = ["_guard_for"] if kind == "a C exchange table" else []
        assert t.shape[0] >= 2 and frames == allowed, frames
