"""One rule, one home: the first sight of a type and a cached one give the
same answer (issue 18's table).

from_dlpack decides in C, once (csrc/python/consume.c), and remembers some
types (the memo, docs/design.md): a type seen before must get the answer a
new one gets. Each case here runs on a fresh class twice: cold (first
sight) and warm (remembered where it can be), and both outcomes must be the
same exception class with the same message, of the class the array API
standard names: TypeError for wrong types and unknown keywords,
ValueError/BufferError for values out of range, never OverflowError or
SystemError; and BaseExceptions raised by the object propagate.
"""

from __future__ import annotations

import array
import ctypes

import pytest

import dlpackshim as ds

ADDR = ctypes.addressof(ctypes.create_string_buffer(64))  # never written: all reads
_KEEP = []


def _iface_class(iface):
    """A fresh class (a cold type) whose instances carry `iface`."""
    return type("Iface", (), {"__array_interface__": property(lambda self: dict(iface))})


def outcome(call):
    try:
        t = call()
    except BaseException as e:  # noqa: BLE001 - the outcome is what is compared
        return type(e), str(e)
    _KEEP.append(t)
    return "ok", None


def cold_then_warm(make_obj, **kwargs):
    cls_obj = make_obj()
    first = outcome(lambda: ds.from_dlpack(cls_obj, **kwargs))
    second = outcome(lambda: ds.from_dlpack(make_obj(), **kwargs))
    return first, second


def _ok_iface(**extra):
    iface = {"version": 3, "shape": (4,), "typestr": "|u1", "data": (ADDR, True)}
    iface.update(extra)
    return iface


BAD_INTERFACES = [
    # (what is wrong, the interface, the class the standard names)
    ("shape of floats", _ok_iface(shape=(4.5,)), TypeError),
    ("shape as a str", _ok_iface(shape="12"), TypeError),
    ("strides of floats", _ok_iface(strides=(1.5,)), TypeError),
    ("typestr with a non-ASCII digit", _ok_iface(typestr="|u\u0661"), TypeError),
    ("typestr not a str", _ok_iface(typestr=8), TypeError),
    ("shape past int64", _ok_iface(shape=(2**63,)), ValueError),
    ("address past 64 bits", _ok_iface(data=(2**64, False)), ValueError),
    ("negative address", _ok_iface(data=(-1, False)), ValueError),
    ("version 2**70", _ok_iface(version=2**70), BufferError),
    ("version 2", _ok_iface(version=2), BufferError),
    ("a mask", _ok_iface(mask=bytearray(4)), BufferError),
    ("datetime typestr", _ok_iface(typestr="<M8"), BufferError),
    # NumPy's own datetime typestrs carry a unit (they were TypeErrors)
    ("datetime typestr with a unit", _ok_iface(typestr="<M8[s]"), BufferError),
    ("timedelta typestr with a unit", _ok_iface(typestr="<m8[ns]"), BufferError),
    ("a unit on a float typestr", _ok_iface(typestr="<f8[s]"), TypeError),
    ("non-native typestr", _ok_iface(typestr=">u4"), BufferError),
    ("strides not whole items", _ok_iface(typestr="<u4", shape=(2,), strides=(6,)), BufferError),
    ("a buffer too short", _ok_iface(data=bytearray(3)), BufferError),
    ("offset past the buffer", _ok_iface(data=bytearray(8), offset=2**70), ValueError),
]


@pytest.mark.parametrize("case, iface, exc", BAD_INTERFACES, ids=[c[0] for c in BAD_INTERFACES])
def test_bad_array_interface_same_error_cold_and_warm(case, iface, exc):
    cls = _iface_class(iface)
    first, second = cold_then_warm(cls)
    assert first == second, (case, first, second)
    assert first[0] is exc, (case, first)
    assert first[1], "the message says what is wrong"


def test_good_interface_after_a_bad_one_of_the_same_type():
    """A cached type whose interface changes is read afresh each call."""
    state = {"iface": _ok_iface(shape=(4.5,))}
    cls = type("Changing", (), {"__array_interface__": property(lambda self: dict(state["iface"]))})
    with pytest.raises(TypeError):
        ds.from_dlpack(cls())
    state["iface"] = _ok_iface()
    assert ds.from_dlpack(cls()).shape == (4,)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_an_interrupt_in_the_interface_propagates(exc, warm):
    """A property that raises a BaseException once: it reaches the caller,
    it is not cleared and the property not asked again."""
    calls = {"n": 0, "raise": not warm}

    def iface(self):
        calls["n"] += 1
        if calls["raise"]:
            calls["raise"] = False
            raise exc()
        return _ok_iface()

    cls = type("Interrupting", (), {"__array_interface__": property(iface)})
    if warm:
        ds.from_dlpack(cls())  # cached now
        calls["raise"] = True
        calls["n"] = 0
    with pytest.raises(exc):
        ds.from_dlpack(cls())
    assert calls["n"] == 1


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_misspelt_keyword_is_a_type_error(warm, np):
    a = np.arange(3.0)
    if warm:
        ds.from_dlpack(a)
    for value in (None, 1):
        with pytest.raises(TypeError, match="devcie"):
            ds.from_dlpack(a, devcie=value)


@pytest.mark.parametrize("device", [(1, 2**40), (2**40, 0), (-2**40, 0)])
def test_device_out_of_range_is_a_value_error_cold_and_warm(device):
    first, second = cold_then_warm(lambda: bytearray(4), device=device)
    assert first == second and first[0] is ValueError, first


class _Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int32), ("b", ctypes.c_int32)]


# (element type, what the import must give): ctypes arrays export PEP 3118
# formats of every kind ("<d", ">d", "T{<i:a:<i:b:}", "<P", "<u", "<?").
BUFFER_FORMATS = [
    ("native double", ctypes.c_double, "ok"),
    ("big-endian double", ctypes.c_double.__ctype_be__, BufferError),
    ("a struct", _Pair, BufferError),
    ("pointers", ctypes.c_void_p, BufferError),
    ("wide chars", ctypes.c_wchar, BufferError),
    ("bools", ctypes.c_bool, "ok"),
    ("chars", ctypes.c_char, "ok"),
]


@pytest.mark.parametrize("case, element, want", BUFFER_FORMATS,
                         ids=[c[0] for c in BUFFER_FORMATS])
def test_buffer_formats_same_outcome_cold_and_warm(case, element, want):
    # A subclass made here: a type from_dlpack has never seen (cold).
    array_type = type("Fresh", (element * 4,), {})
    first, second = cold_then_warm(array_type)
    assert first == second, (case, first, second)
    assert first[0] == want if want == "ok" else first[0] is want, (case, first)


def test_buffer_formats_cold_and_warm_with_builtin_types():
    """The same checks through types whose first sight the suite controls
    less (array.array is cached by any earlier test): the answer does not
    depend on it."""
    for obj in (array.array("d", [1.0, 2.0]), bytearray(3), memoryview(b"ab").cast("c")):
        assert outcome(lambda: ds.from_dlpack(obj)) == outcome(lambda: ds.from_dlpack(obj))



def test_a_remembered_c_dunder_never_hides_what_lookup_finds(np):
    """from_dlpack calls NumPy's C ``__dlpack__`` directly once it has seen
    ndarray (an immutable type whose instances have no __dict__); a subclass
    whose instance overrides ``__dlpack__`` is looked up as Python would,
    and an interrupt raised there propagates."""
    a = np.arange(3.0)
    assert ds.from_dlpack(a).data_ptr == ds.from_dlpack(a).data_ptr == a.ctypes.data

    class Sub(np.ndarray):
        pass

    s = a.view(Sub)

    def interrupt(**kwargs):
        raise KeyboardInterrupt

    s.__dlpack__ = interrupt
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            ds.from_dlpack(s)
