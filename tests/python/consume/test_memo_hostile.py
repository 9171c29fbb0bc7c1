"""from_dlpack's memo, and from_dlpack_many (each item as from_dlpack would
import it), against producers that change (defects found by reviews).

Each crashing case runs in a child interpreter (they crashed it).

- A *sealed* type (immutable, no instance dict: a static extension type, a
  Cython cdef class) whose ``__dlpack__`` is a property handing out another
  object's bound method (a delegating wrapper): on CPython 3.11 the memo
  keeps the C function of the first instance's bound method and calls it
  with the wrapper as ``self`` (a Tensor's __dlpack__ reads the wrapper as a
  Tensor, NumPy's as an ndarray: a crash). On every version, the route the
  first instance took is kept for the type: a wrapper that had no
  ``__dlpack__`` once makes every later wrapper NotArrayLikeError. A
  property that hands the first object a C method bound to that object
  itself was taken for a method of the type as well.
- from_dlpack_many kept the exchange table it judged for a type for the
  rest of the call without holding the capsule that owns it: a producer
  that drops or changes the table meanwhile (another item's __dlpack__)
  left it calling freed memory (ASan: heap-use-after-free) or a NULL entry;
  then, holding it, it still used the table after another item assigned the
  type a __dlpack__ of its own. A batch now judges each item as from_dlpack.
- A torch.Tensor subclass given a ``__torch_function__`` after its first
  import kept going through PyTorch's table, which skips it; so did a class
  whose table was deleted, leaving a base's table (the same capsule) behind
  its own ``__dlpack__``: the memo checked only the table and ``__dlpack__``.
  Then one whose ``__torch_function__`` was replaced (the memo counted the
  names of its classes): a subclass's verdict is no longer remembered.
"""
from __future__ import annotations

import textwrap

import pytest

from conftest import run_python

np = pytest.importorskip("numpy")

import dlpackshim as ds

# A sealed delegating type made with ctypes, as a C extension would make it:
# immutable, no __dict__, getset properties __dlpack__ / __dlpack_device__
# that hand out self.inner's bound methods.
SEALED_DELEGATE = """
import ctypes
from ctypes import POINTER, Structure, byref, c_char_p, c_int, c_ssize_t, c_uint, c_void_p, cast, py_object
class Slot(Structure): _fields_ = [("slot", c_int), ("pfunc", c_void_p)]
class Spec(Structure): _fields_ = [("name", c_char_p), ("basicsize", c_int), ("itemsize", c_int), ("flags", c_uint), ("slots", POINTER(Slot))]
class GetSet(Structure): _fields_ = [("name", c_char_p), ("get", c_void_p), ("set", c_void_p), ("doc", c_char_p), ("closure", c_void_p)]
class Member(Structure): _fields_ = [("name", c_char_p), ("type", c_int), ("offset", c_ssize_t), ("flags", c_int), ("doc", c_char_p)]
GETTER = ctypes.PYFUNCTYPE(py_object, py_object, c_void_p)
_keep = []
def sealed_delegate_type():
    base = object.__basicsize__
    get_dlpack = GETTER(lambda self, closure: self.inner.__dlpack__)
    get_device = GETTER(lambda self, closure: self.inner.__dlpack_device__)
    getset = (GetSet * 3)(GetSet(b"__dlpack__", cast(get_dlpack, c_void_p)),
                          GetSet(b"__dlpack_device__", cast(get_device, c_void_p)), GetSet())
    members = (Member * 2)(Member(b"inner", 16, base, 0, None), Member())  # T_OBJECT_EX
    slots = (Slot * 3)(Slot(73, cast(getset, c_void_p)), Slot(72, cast(members, c_void_p)), Slot())
    spec = Spec(b"sealed.Delegate", base + 8, 0, 1 << 8, slots)  # Py_TPFLAGS_IMMUTABLETYPE
    new_type = ctypes.pythonapi.PyType_FromSpec
    new_type.restype, new_type.argtypes = py_object, [c_void_p]
    tp = new_type(byref(spec))
    _keep.extend([get_dlpack, get_device, getset, members, slots, spec])
    return tp
def wrap(tp, inner):
    w = tp.__new__(tp)
    w.inner = inner
    return w
"""


def _child(code):
    r = run_python("-c", SEALED_DELEGATE + textwrap.dedent(code), timeout=120)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.parametrize("inner", ["tensor", "numpy"])
def test_sealed_type_delegating_dlpack(inner):
    out = _child(f"""
        import numpy as np, dlpackshim as ds
        T = sealed_delegate_type()
        def inner():
            a = np.arange(4, dtype=np.float32)
            return ds.from_dlpack(a) if {inner!r} == "tensor" else a
        for i in range(3):
            t = ds.from_dlpack(wrap(T, inner()))
            assert t.shape == (4,) and t.tobytes() == np.arange(4, dtype=np.float32).tobytes()
        print("ok")
    """)
    assert "ok" in out


def test_sealed_type_route_is_per_object():
    """The wrappers of one sealed type hand out the methods of objects of
    different kinds (a Tensor, an ndarray, a Python producer), interleaved:
    each is imported through its own object, none through a route the type
    was given by an earlier one. (A property that raises for some objects
    cannot be made with ctypes, whose callbacks swallow exceptions; the rule
    that covers it, no route remembered for a type with a __dlpack__
    descriptor, is the same.)"""
    out = _child("""
        import numpy as np, dlpackshim as ds
        T = sealed_delegate_type()
        class Py:
            def __init__(self, a): self.a = a
            def __dlpack_device__(self): return (1, 0)
            def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
        makers = [lambda: ds.from_dlpack(np.arange(3.0)), lambda: np.arange(3.0),
                  lambda: Py(np.arange(3.0))]
        for i in range(9):
            t = ds.from_dlpack(wrap(T, makers[i % 3]()))
            assert t.shape == (3,) and t.tobytes() == np.arange(3.0).tobytes(), i
        print("ok", t.shape)
    """)
    assert "ok (3,)" in out


TABLE = """
import ctypes
from ctypes import CFUNCTYPE, POINTER, Structure, c_int, c_uint32, c_void_p, py_object, sizeof, addressof
import producers as P
class API(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev", c_void_p), ("alloc", c_void_p),
                ("from_py", c_void_p), ("to_py", c_void_p), ("dlt_from_py", c_void_p), ("cws", c_void_p)]
FROM = CFUNCTYPE(c_int, py_object, POINTER(c_void_p))
def from_py(obj, out):
    out[0] = P.make_managed(shape=(4,), dtype=(2, 32, 1)).address
    return 0
from_py_c = FROM(from_py)
new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype, new_capsule.argtypes = py_object, [c_void_p, c_void_p, c_void_p]
"""


def test_many_does_not_keep_a_dropped_table():
    # B's __dlpack__ takes A's table away (and its memory with it, here: the
    # entry is cleared); the third item must be asked through A.__dlpack__,
    # as from_dlpack would.
    r = run_python("-c", TABLE + textwrap.dedent("""
        import dlpackshim as ds
        api = API(major=1, minor=3, from_py=ctypes.cast(from_py_c, c_void_p).value)
        class A:
            __dlpack_c_exchange_api__ = new_capsule(addressof(api), P.static_name(b"dlpack_exchange_api"), None)
            def __dlpack__(self, **kw):
                return ds.from_dlpack(bytearray(16)).__dlpack__(**kw)
            def __dlpack_device__(self):
                return (1, 0)
        class B:
            def __dlpack__(self, **kw):
                del A.__dlpack_c_exchange_api__
                api.from_py = None
                return ds.from_dlpack(bytearray(8)).__dlpack__(**kw)
            def __dlpack_device__(self):
                return (1, 0)
        out = ds.from_dlpack_many([A(), B(), A()])
        print([t.shape for t in out])
    """), timeout=120)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "[(4,), (8,), (16,)]" in r.stdout


def test_many_honours_a_dunder_assigned_by_an_earlier_item():
    # Sub inherits the Tensor's exchange table, which stands for the
    # Tensor's __dlpack__; P's __dlpack__ gives Sub one of its own, which the
    # third item must be asked through, as from_dlpack asks it.
    calls = []

    class Sub(ds.Tensor):
        __slots__ = ()

    def make():
        t = ds.from_dlpack(bytearray(b"abcd"))
        t.__class__ = Sub
        return t

    def refuse(self, **kw):
        calls.append("refuse")
        raise BufferError("Sub's own __dlpack__ refuses")

    class P:
        def __dlpack__(self, **kw):
            Sub.__dlpack__ = refuse
            return ds.from_dlpack(bytearray(8)).__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    s1, s2 = make(), make()
    assert [t.shape for t in ds.from_dlpack_many([s1])] == [(4,)]  # judged: the table
    with pytest.raises(BufferError, match="refuses"):
        ds.from_dlpack_many([s1, P(), s2])
    assert calls == ["refuse"]


def test_torch_subclass_gaining_torch_function():
    """A subclass's verdict is judged on each import: a name added to one of
    its classes (here the subclass's __torch_function__, which the guard
    reads) is seen at once."""
    torch = pytest.importorskip("torch")
    calls = []

    class Sub(torch.Tensor):
        pass

    x = torch.arange(4.0).as_subclass(Sub)
    ds.from_dlpack(x)  # judged: no __torch_function__ of its own, the table

    def tf(cls, func, types, args=(), kwargs=None):
        calls.append(getattr(func, "__name__", str(func)))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    Sub.__torch_function__ = classmethod(tf)
    try:
        calls.clear()
        ds.from_dlpack(x)
        # As for a class defined with it from the start: through __dlpack__.
        assert "__dlpack__" in calls
    finally:
        del Sub.__torch_function__


@pytest.mark.parametrize("warm", [False, True])
def test_torch_subclass_torch_function_replaced(warm):
    """A subclass's __torch_function__ replaced (the same names in its
    __dict__) after an import: the table is no longer used, as on a first
    sight (a defect: the verdict remembered by the count of names kept the
    table, which skips the override)."""
    torch = pytest.importorskip("torch")

    class G(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

    def refuse(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "__dlpack__":
            raise BufferError("G forbids DLPack export")
        return super(G, cls).__torch_function__(func, types, args, kwargs or {})

    t = torch.ones(2).as_subclass(G)
    if warm:
        assert ds.from_dlpack(t).shape == (2,)
    G.__torch_function__ = classmethod(refuse)
    with pytest.raises(BufferError, match="G forbids"):
        ds.from_dlpack(t)
    G.__torch_function__ = torch._C._disabled_torch_function_impl
    assert ds.from_dlpack(t).shape == (2,)


@pytest.mark.parametrize("warm", [False, True])
def test_a_torch_subclass_carrying_the_table_keeps_its_torch_function(warm):
    """A subclass that carries PyTorch's table itself still has its own
    __torch_function__ honoured (torch.Tensor.__dlpack__ goes through it, the
    table does not), and one replaced after an import is seen (the guard's
    answer for a subclass is never remembered)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")

    def refuse(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "__dlpack__":
            raise BufferError("G forbids DLPack export")
        return super(G, cls).__torch_function__(func, types, args, kwargs or {})

    class G(torch.Tensor):
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__
        __torch_function__ = torch._C._disabled_torch_function_impl

    t = torch.ones(2).as_subclass(G)
    if warm:
        assert ds.from_dlpack(t).shape == (2,)
    G.__torch_function__ = classmethod(refuse)
    with pytest.raises(BufferError, match="G forbids"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="G forbids"):
        ds.from_dlpack(t)


def test_a_table_deleted_from_a_class_with_its_own_dlpack():
    """A class that set a table next to its own __dlpack__ (its claim), then
    lost it, leaving a base's table (the very same capsule) behind its own
    __dlpack__: its __dlpack__ is used from then on, as on a first sight."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip("this PyTorch has no C exchange table")
    cap = torch.Tensor.__dlpack_c_exchange_api__

    class B:
        __dlpack_c_exchange_api__ = cap

    class T(B):
        __dlpack_c_exchange_api__ = cap

        def __dlpack__(self, **kw):
            return np.arange(3.0).__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError):  # PyTorch's table refuses a T
        ds.from_dlpack(T())
    del T.__dlpack_c_exchange_api__
    assert np.from_dlpack(ds.from_dlpack(T())).tolist() == [0.0, 1.0, 2.0]
    assert np.from_dlpack(ds.from_dlpack_many([T()])[0]).tolist() == [0.0, 1.0, 2.0]


def test_a_sealed_type_whose_dlpack_property_binds_the_object_itself():
    """A sealed type whose __dlpack__ is a property handing the first object
    a C method bound to that object (here NumPy's own), and the next one
    something else: the memo took the first answer for a method of the type
    and, on CPython 3.11, called its C function for every later object (the
    second was exported where its own __dlpack__ refuses). Only a method
    descriptor of the type is remembered now. The type is sealed as a C
    extension would be: its immutable flag is set with ctypes."""
    out = _child("""
        import ctypes, numpy as np, dlpackshim as ds
        class P(np.ndarray):
            __slots__ = ()
            @property
            def __dlpack__(self):
                if self[0] == 1:
                    return np.ndarray.__dlpack__.__get__(self)   # bound to self
                def refuse(**kw):
                    raise BufferError("this P refuses to export")
                return refuse
        words = [ctypes.c_ulong.from_address(id(P) + 8 * i) for i in range(48)]
        flags = next(w for w in words if w.value == P.__flags__)
        flags.value |= 1 << 8                     # Py_TPFLAGS_IMMUTABLETYPE
        first = np.array([1.0, 2.0]).view(P)
        assert ds.from_dlpack(first).tobytes() == np.array([1.0, 2.0]).tobytes()
        for i in range(3):
            try:
                ds.from_dlpack(np.array([5.0, 6.0]).view(P))
                print("exported", i)
            except BufferError as e:
                print("refused:", e)
        import os; os._exit(0)                    # a type sealed by hand is not torn down
    """)
    assert out.count("refused: this P refuses to export") == 3, out


# A descriptor that, as the instance attribute it stands for, is absent on
# the class itself (its __get__(None, cls) raises AttributeError).
INSTANCE_ONLY = """
class InstanceOnly:
    def __init__(self, f): self.f = f
    def __get__(self, obj, cls=None):
        if obj is None:
            raise AttributeError(self.f.__name__)
        return self.f(obj)
def seal(cls):
    import ctypes
    words = [ctypes.c_ulong.from_address(id(cls) + 8 * i) for i in range(48)]
    next(w for w in words if w.value == cls.__flags__).value |= 1 << 8  # IMMUTABLETYPE
    return cls
"""


@pytest.mark.parametrize("hidden", ["no", "by its descriptor", "by a metaclass"])
def test_a_sealed_type_with_both_interfaces_routes_each_object_by_its_own(hidden):
    """A sealed type with properties for both array interfaces, each raising
    AttributeError for the objects it does not describe (a host array has no
    CUDA interface, a device array no host one: a common shape of C
    extension types). The route of the first object imported was kept for
    the type: every object of the other kind was then NotArrayLikeError.
    Then the other interface was looked up on the type itself, where a
    descriptor or a metaclass may hide it: the type's classes' own dicts are
    read now. The type is sealed by hand, as above; device memory is the
    fake CUDA driver's."""
    import os
    fakecuda = os.path.join(os.environ.get("top_builddir") or ".", "tests", "fakegpu", ".libs",
                            "libfakecuda.so")
    if not os.path.exists(fakecuda):
        pytest.skip("fake GPU runtimes not built: run `make check TESTS=` and export top_builddir")
    code = INSTANCE_ONLY + textwrap.dedent(f"""
        import ctypes, numpy as np, dlpackshim as ds
        fake = ctypes.CDLL({fakecuda!r})
        fake.fake_alloc.restype = ctypes.c_void_p
        fake.fake_alloc.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_size_t)
        class Meta(type):
            @property
            def __cuda_array_interface__(cls):
                raise AttributeError("the class has none")
        def sealed():
            class Arr(metaclass=Meta if {hidden!r} == "by a metaclass" else type):
                __slots__ = ("host", "gpu")      # unset: AttributeError
                @property
                def __array_interface__(self):
                    return self.host.__array_interface__
                def __cuda_array_interface__(self):
                    return self.gpu
                __cuda_array_interface__ = (InstanceOnly if {hidden!r} == "by its descriptor"
                                            else property)(__cuda_array_interface__)
            return seal(Arr)
        def make(T, kind):
            x = T.__new__(T)
            if kind == "host":
                x.host = np.arange(4.0)
            else:
                p = fake.fake_alloc(0, 0, 32)
                x.gpu = dict(shape=(4,), typestr="<f8", data=(p, False), version=3,
                             strides=None, stream=None)
            return x
        for kinds in (["gpu", "host"] * 2, ["host", "gpu"] * 2):
            T = sealed()
            for kind in kinds:
                t = ds.from_dlpack(make(T, kind))
                if kind == "host":
                    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0, 3.0]
                else:
                    assert t.__dlpack_device__() == (2, 0) and t.shape == (4,)
                print("ok", kind)
        import os; os._exit(0)                    # types sealed by hand are not torn down
    """)
    r = run_python("-c", code, env={"DLPACKSHIM_LIBCUDA": fakecuda}, timeout=120)
    assert r.returncode == 0 and r.stdout.count("ok") == 8, f"{r.stdout}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("meta", ["type", "a metaclass whose __dict__ hides it"])
def test_a_sealed_type_whose_dlpack_only_its_objects_have(meta):
    """__dlpack__ a descriptor absent on the class (AttributeError there),
    beside an __array_interface__ property: an object without __dlpack__
    went first, the array interface's route was kept, and the next object,
    a producer, was NotArrayLikeError. Then the classes' dicts were read
    through the class, where a metaclass's __dict__ may leave it out: they
    are read through `type`'s own descriptors now."""
    out = _child(INSTANCE_ONLY + textwrap.dedent(f"""
        import types, numpy as np, dlpackshim as ds
        class Lying(type):
            @property
            def __dict__(cls):
                d = dict(type.__dict__["__dict__"].__get__(cls))
                d.pop("__dlpack__", None)
                return types.MappingProxyType(d)
        class Arr(metaclass=type if {meta!r} == "type" else Lying):
            __slots__ = ("host", "prod")
            @property
            def __array_interface__(self): return self.host.__array_interface__
            @InstanceOnly
            def __dlpack__(self): return self.prod.__dlpack__
            def __dlpack_device__(self): return (1, 0)
        seal(Arr)
        a = Arr.__new__(Arr); a.host = np.arange(3.0)   # no __dlpack__: the array interface
        b = Arr.__new__(Arr); b.prod = np.arange(5.0)   # a producer, no array interface
        print([ds.from_dlpack(x).shape for x in (a, b, a, b)])
        import os; os._exit(0)
    """))
    assert "[(3,), (5,), (3,), (5,)]" in out, out


def test_a_metaclass_error_while_a_route_is_remembered_is_no_import_error():
    """Whether a route may be remembered was asked of the type, which ran a
    metaclass property: its NotImplementedError failed an import that needs
    no memo. Now the classes' dicts are read, and an Exception in the checks
    only leaves the route unremembered."""
    out = _child(INSTANCE_ONLY + textwrap.dedent("""
        import numpy as np, dlpackshim as ds
        class Meta(type):
            @property
            def __cuda_array_interface__(cls):
                raise NotImplementedError("a class has no device memory")
            @property
            def __dlpack__(cls):
                raise NotImplementedError("nor an export")
        class Arr(metaclass=Meta):
            __slots__ = ("host",)
            @property
            def __array_interface__(self): return self.host.__array_interface__
        seal(Arr)
        x = Arr.__new__(Arr); x.host = np.arange(3.0)
        print([ds.from_dlpack(x).shape for _ in range(3)])
        import os; os._exit(0)
    """))
    assert "[(3,), (3,), (3,)]" in out, out


@pytest.mark.parametrize("lie", ["__mro__", "__dictoffset__"])
def test_a_metaclass_cannot_make_a_type_look_sealed(lie):
    """is_sealed read __mro__ and __dictoffset__ through the class, where a
    metaclass property answers: a type with a mutable base (hidden from its
    __mro__) or an instance dict (a __dictoffset__ of 0) was taken for
    sealed, and its remembered route outlived a __dlpack__ given later to
    the base, or to an object: a different array came back."""
    out = _child(INSTANCE_ONLY + textwrap.dedent(f"""
        import numpy as np, dlpackshim as ds
        class Lying(type):
            @property
            def __mro__(cls):
                return (cls, object) if {lie!r} == "__mro__" else type.__dict__["__mro__"].__get__(cls)
            @property
            def __dictoffset__(cls):
                return 0 if {lie!r} == "__dictoffset__" else type.__dict__["__dictoffset__"].__get__(cls)
        class B:
            __slots__ = ()
            @property
            def __array_interface__(self): return self.host.__array_interface__
        if {lie!r} == "__mro__":
            class Arr(B, metaclass=Lying):
                __slots__ = ("host",)
        else:
            class Arr(metaclass=Lying):              # an instance __dict__, no mutable base
                @property
                def __array_interface__(self): return self.host.__array_interface__
        seal(Arr)
        x = Arr.__new__(Arr); x.host = np.arange(3.0)
        first = ds.from_dlpack(x).shape
        if {lie!r} == "__mro__":                      # the hidden base gains __dlpack__
            B.__dlpack__ = lambda self, **kw: np.arange(5.0).__dlpack__(**kw)
            B.__dlpack_device__ = lambda self: (1, 0)
        else:                                         # the object does
            x.__dlpack__ = np.arange(5.0).__dlpack__
            x.__dlpack_device__ = lambda: (1, 0)
        print(first, ds.from_dlpack(x).shape, np.from_dlpack(x).shape)
        import os; os._exit(0)
    """))
    assert "(3,) (5,) (5,)" in out, out
