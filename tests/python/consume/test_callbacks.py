"""Python code that runs in the middle of an import or export changes the
world under it (issue 30, item 3): no borrowed reference, memo entry or
pointer read before such a call is used after it.

One test per kind of callback, each mutating or freeing what the C code was
reading when it called out:
- ``__index__`` of an int-like (interface shapes, strides, addresses,
  versions and streams; device tuples; max_version; from_pointer's shape);
- ``__eq__`` / ``__hash__`` (test_from_dlpack.py has the types that compare
  equal and whose hash raises);
- ``__getattr__`` and properties (``__array_interface__``, ``__dlpack__``,
  ``__dlpack_device__`` looked up);
- a decref that runs ``__del__``;
- the producer's own methods (``__dlpack__``, ``__dlpack_device__``, a
  buffer exporter's ``__buffer__``);
- a ``__class__`` assignment, which may free the type being read.
The answer must be a correct Tensor or a documented exception, never a crash,
a Tensor over freed memory, or one of the wrong shape; a KeyboardInterrupt or
SystemExit raised by such code reaches the caller, never replaced.
"""
from __future__ import annotations

import gc
import sys
import textwrap

import pytest

from conftest import run_python

import dlpackshim as ds
from dlpackshim import _consume

np = pytest.importorskip("numpy")
DOCUMENTED = (TypeError, ValueError, BufferError)


class Iface:
    def __init__(self, d):
        self.__array_interface__ = d


class CudaIface:
    def __init__(self, d):
        self.__cuda_array_interface__ = d


# ---- __index__ ----------------------------------------------------------------------

class Sneaky:
    """An int-like whose __index__ runs `action` first."""

    def __init__(self, value, action):
        self.value, self.action = value, action

    def __index__(self):
        self.action()
        return self.value


@pytest.mark.parametrize("key", ["shape", "strides"])
def test_index_that_replaces_the_interface_dict_items(key):
    """Issue 30, defect 4: __index__ of a shape item replaced d["shape"]
    while C read the tuple it had borrowed; NumPy gives (1,)*24."""
    a = np.zeros(64, dtype=np.uint8)
    d = dict(a.__array_interface__)
    d["shape"] = (4, 4)
    d["strides"] = (4, 1)

    def swap():
        d[key] = (Sneaky(1, swap),) * 24 if key == "shape" else None
        gc.collect()
    d[key] = (Sneaky(4, swap),) + d[key][1:]
    try:
        t = ds.from_dlpack(Iface(d))
    except DOCUMENTED:
        return
    # what was read is what the Tensor says, and it fits the 64 bytes
    assert t.nbytes <= 64
    assert t.shape == (4, 4) and t.strides == (4, 1)


@pytest.mark.parametrize("cls", [Iface, CudaIface])
def test_index_that_empties_the_dict_under_data_and_version(cls):
    a = np.arange(8, dtype=np.float32)
    d = dict(a.__array_interface__)
    d["version"] = 3

    def wipe():
        d.clear()
        gc.collect()
    d["data"] = (Sneaky(a.ctypes.data, wipe), False)
    try:
        t = ds.from_dlpack(cls(d))
    except DOCUMENTED:
        return
    assert t.shape == (8,)


def test_index_in_the_device_request_is_not_called():
    """from_dlpack's device takes ints (or a Device / DeviceType), not
    int-likes: no __index__ runs, and the source stays open."""
    t = ds.from_dlpack(np.arange(4.0))
    with pytest.raises(TypeError, match="device must be"):
        ds.from_dlpack(t, device=(Sneaky(1, t.close), Sneaky(0, t.close)))
    assert not t.closed


def test_index_in_max_version_closes_the_exporting_tensor():
    a = np.arange(4.0)
    t = ds.from_dlpack(a)
    mv = (1, Sneaky(3, t.close))
    try:
        cap = t.__dlpack__(max_version=mv)
    except DOCUMENTED:
        return
    # the capsule's memory stays valid: it references the holder itself
    del a
    gc.collect()
    assert np.from_dlpack(ds.from_dlpack(cap))[3] == 3.0


def test_index_in_from_pointer_shape_frees_the_owner():
    holder = [np.arange(16.0)]
    addr = holder[0].ctypes.data

    def drop():
        holder.clear()
        gc.collect()
    with pytest.raises(DOCUMENTED):
        # the owner passed is a different object than the memory's: the
        # shape's __index__ runs before any Tensor exists; a shape that is
        # not ints is refused (from_pointer takes ints and __index__ alike)
        ds.from_pointer(addr, (Sneaky(4, drop), "x"), "float64", owner=None)


# ---- __getattr__ and properties ----------------------------------------------------

def test_array_interface_property_that_patches_its_own_class():
    a = np.arange(6, dtype=np.int32)

    class Shifty:
        @property
        def __array_interface__(self):
            type(self).__array_interface__ = property(lambda s: {"bogus": 1})
            return a.__array_interface__

    for _ in range(3):
        try:
            t = ds.from_dlpack(Shifty())
        except DOCUMENTED:
            continue
        assert np.from_dlpack(t).tolist() == list(range(6))


def test_getattr_that_deletes_the_producers_method_during_lookup():
    class Vanishing:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (1, 0)

        def __getattr__(self, name):
            if name == "__dlpack__":
                # found on the instance the first time, while the class is emptied
                type(self).__dlpack_device__ = None
                return self.a.__dlpack__
            raise AttributeError(name)

    for _ in range(3):
        t = ds.from_dlpack(Vanishing(np.arange(3.0)))
        assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


# ---- a decref that runs __del__ ----------------------------------------------------

def test_a_del_that_resets_the_memo_mid_import():
    """The memo is reset (entries cleared) by a __del__ run by one of the
    library's own decrefs: the import in progress is unaffected."""
    class Noisy:
        def __del__(self):
            _consume._configure(True, True)

    a = np.arange(5.0)
    for _ in range(20):
        d = dict(a.__array_interface__)
        d["descr"] = [("", "<f8")]
        d["typestr"] = "<f8"
        d["mask"] = None
        d["extra"] = Noisy()
        obj = Iface(d)
        t = ds.from_dlpack(obj)
        del obj, d
        assert np.from_dlpack(t).tolist() == a.tolist()


def test_a_del_in_the_capsule_that_closes_the_importing_source():
    """A producer's capsule dies (decref) inside from_dlpack: its destructor
    path may run Python (__del__ of the producer's keep-alive)."""
    t0 = ds.from_dlpack(np.arange(4.0))

    class Keep:
        def __del__(self):
            t0.close()

    class Producer:
        def __init__(self):
            self.keep = Keep()

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            cap = t0.__dlpack__(**kw)
            self.keep = None  # runs Keep.__del__: t0 closed before we import
            return cap

    t = ds.from_dlpack(Producer())
    assert t0.closed
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0, 3.0]


# ---- the producer's own methods ----------------------------------------------------

def test_dlpack_that_swaps_its_classs_method_mid_call():
    calls = []

    class Flipper:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            calls.append(sorted(kw))
            # the next call must find the legacy signature
            type(self).__dlpack__ = lambda s, stream=None: s.a.__dlpack__()
            return self.a.__dlpack__(**kw)

    f = Flipper(np.arange(3.0))
    assert np.from_dlpack(ds.from_dlpack(f)).tolist() == [0.0, 1.0, 2.0]
    g = ds.from_dlpack(f)  # legacy now: read-only, no version
    assert g.dlpack_version is None and g.readonly


def test_dlpack_device_that_closes_the_source_tensor():
    t0 = ds.from_dlpack(np.arange(4.0))

    class Closer:
        def __dlpack_device__(self):
            t0.close()
            return (1, 0)

        def __dlpack__(self, **kw):
            return t0.__dlpack__(**kw)

    with pytest.raises(ValueError, match="closed"):
        ds.from_dlpack(Closer(), device=(1, 0))


def test_from_dlpack_many_hands_no_half_filled_list_to_producers():
    """Producers run while a batch is imported; one that searched the heap
    (gc.get_objects) found the result list with empty slots, and reading one
    crashed (Py_INCREF of NULL). The list is made once every item is in."""
    n = 5
    seen = []

    class Snoop:
        def __init__(self):
            self.a = np.arange(4.0)

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            seen.extend(o for o in gc.get_objects()
                        if type(o) is list and len(o) == n and o[:1]
                        and isinstance(o[0], ds.Tensor))
            return self.a.__dlpack__(**kw)

    out = ds.from_dlpack_many([np.arange(3.0)] + [Snoop() for _ in range(n - 1)])
    assert [t.shape for t in out] == [(3,)] + [(4,)] * (n - 1)
    assert seen == []


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ from Python: 3.12+")
def test_a_python_buffer_exporter_that_mutates_its_class():
    class Exporter:
        def __init__(self):
            self.data = bytearray(b"abcd")

        def __buffer__(self, flags):
            type(self).__dlpack__ = lambda s, **kw: None  # looks like a producer now
            return memoryview(self.data)

    e = Exporter()
    t = ds.from_dlpack(e)
    assert t.tobytes() == b"abcd"
    with pytest.raises(DOCUMENTED):
        ds.from_dlpack(e)  # a __dlpack__ returning None


def test_a_producer_that_replaces_its_memo_entry_during_its_call():
    """__dlpack__ imports 32 other types, evicting its own memo entry."""
    class Crowd:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            for k in range(32):
                cls = type(f"T{k}", (), {"__dlpack_device__": lambda s: (1, 0),
                                          "__dlpack__": lambda s, **k2: np.arange(1.0).__dlpack__(**k2)})
                ds.from_dlpack(cls())
            return self.a.__dlpack__(**kw)

    for _ in range(3):
        assert np.from_dlpack(ds.from_dlpack(Crowd(np.arange(2.0)))).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("refusal, kw", [(BufferError, {}), (TypeError, {"copy": True})])
def test_an_interrupt_in_dlpack_device_after_a_refusal_goes_on(interrupt, refusal, kw):
    """A refused export makes from_dlpack ask __dlpack_device__ (is it a GPU
    producer? can dlpackshim copy itself?); a Ctrl-C landing there is not
    swallowed in favour of the refusal."""
    class P:
        def __dlpack__(self, **k):
            raise refusal("refused")

        def __dlpack_device__(self):
            raise interrupt("stop")

    with pytest.raises(interrupt):
        ds.from_dlpack(P(), **kw)


def _interrupting_metaclass(attr, interrupt):
    class Meta(type):
        def __getattribute__(cls, name):
            if name == attr:
                raise interrupt("stop")
            return super().__getattribute__(name)
    return Meta


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("attr", ["__module__", "__qualname__"])
def test_an_interrupt_in_a_metaclass_naming_the_type_goes_on(attr, interrupt):
    """NotArrayLikeError names the type: the first name's interrupt is raised,
    before the second look-up runs (with it pending, CPython made it a
    SystemError, which was cleared)."""
    class Nothing(metaclass=_interrupting_metaclass(attr, interrupt)):
        pass

    for kw in ({}, {"copy": True}):
        with pytest.raises(interrupt):
            ds.from_dlpack(Nothing(), **kw)
    with pytest.raises(interrupt):
        ds.from_dlpack_many([bytearray(2), Nothing()])


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_naming_what_dlpack_returned_goes_on(interrupt):
    """__dlpack__ returns no capsule: the TypeError names its type, whose
    metaclass raises; the interrupt is raised, not the TypeError."""
    class Odd(metaclass=_interrupting_metaclass("__name__", interrupt)):
        pass

    class P:
        def __dlpack__(self, **kw):
            return Odd()

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(interrupt):
        ds.from_dlpack(P())


def test_the_c_api_naming_a_type_leaves_no_interrupt_pending():
    """The C API answers with a status and leaves no exception, even one the
    type's metaclass raised naming it (cffi turned what was left into a
    SystemError)."""
    from dlpackshim._ffi import ffi, lib

    class Thing(metaclass=_interrupting_metaclass("__name__", KeyboardInterrupt)):
        pass

    x = Thing()
    p = ffi.cast("void *", id(x))
    out = ffi.new("const DLTensor **")
    assert lib.dlpackshim_capsule_info(p, out, ffi.NULL, ffi.NULL, ffi.NULL) == lib.DLPACKSHIM_ERR_TYPE
    assert lib.dlpackshim_capsule_import(p, out) == lib.DLPACKSHIM_ERR_TYPE
    assert "expected a DLPack PyCapsule" in ffi.string(lib.dlpackshim_last_error()).decode()


# ---- __class__ assignment ------------------------------------------------------------

def test_a_getattr_that_reassigns_the_class_and_frees_it():
    """x.__class__ = B during the __dlpack__ look-up frees x's old class (it
    lived only in its own cycles): from_dlpack held it (it crashed, reading
    the freed type and freeing it twice)."""
    r = run_python("-c", textwrap.dedent("""
        import gc
        import dlpackshim as ds
        class B:
            pass
        def make():
            class A:
                def __getattr__(self, name):
                    if name == "__dlpack__":
                        self.__class__ = B
                        gc.collect()
                    raise AttributeError(name)
            return A()
        for i in range(50):
            try:
                ds.from_dlpack(make())
            except ds.NotArrayLikeError as e:
                last = str(e)
        print("ok:", last)
    """), timeout=120)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "ok: from_dlpack: expected an object with __dlpack__" in r.stdout


# ---- the binding itself -----------------------------------------------------------

def test_binding_holds_its_table_of_exceptions_while_keys_compare():
    """The package binds itself with a dict whose "exceptions" table the
    library reads key by key; a key whose __eq__ takes the table out of that
    dict freed it mid-read (the library borrowed it). A private entry point,
    but the rule holds everywhere: now the table is held, and the binding
    fails with a clear error or succeeds."""
    r = run_python("-c", textwrap.dedent("""
        import gc
        import dlpackshim as ds
        from dlpackshim import _errors, _ffi
        armed = False
        class Key:
            def __hash__(self):
                return hash(-1)          # probed before the status -1 itself
            def __eq__(self, other):
                if armed:
                    config.pop("exceptions", None)
                    gc.collect()
                return False
        table = {Key(): None}
        table.update(_errors.STATUS_TO_EXCEPTION)
        config = {"exceptions": table}
        del table
        armed = True
        try:
            _ffi.py_bind(config)
        except TypeError as e:
            print("refused:", e)
        print("ok")
    """), timeout=120)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "refused: dlpackshim__py_bind: the package gave no from_dlpack_doc" in r.stdout
