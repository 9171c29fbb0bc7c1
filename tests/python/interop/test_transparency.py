"""Transparency: ``Y(dlpackshim.from_dlpack(X))`` behaves like ``Y(X)``.

For every producer X and consumer Y among NumPy, PyTorch, JAX, pyarrow (as a
producer: ``__dlpack__`` on Arrow arrays), array-api-strict and
apache-tvm-ffi, every dtype X exports, and contiguous / strided / 0-d /
empty / read-only inputs, the two routes are compared on what a user sees:

* the error class, when either route raises;
* the bytes, in logical (row-major) order;
* the pointer: whether the result views the source's memory (zero copy) -
  both routes must share the source or both must copy;
* the writability, for consumers that have the notion (NumPy,
  array-api-strict): a read-only result stays read-only and dlpackshim never
  grants write access the direct route does not.

Where dlpackshim deliberately differs the case is listed in EXPECTED below
with its reason; docs/behaviour.md lists the same differences. A listed
difference that stops happening fails too, so that the list stays true.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import dlpackshim as ds

np = pytest.importorskip("numpy")

# ---- the libraries --------------------------------------------------------------------


def _lib(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None


torch = _lib("torch")
jax = _lib("jax")
jnp = _lib("jax.numpy")
pa = _lib("pyarrow")
xp = _lib("array_api_strict")
tvm_ffi = _lib("tvm_ffi")
ml_dtypes = _lib("ml_dtypes")

PRODUCERS = ["numpy", "torch", "jax", "pyarrow", "array_api_strict", "tvm_ffi"]
CONSUMERS = ["numpy", "torch", "jax", "array_api_strict", "tvm_ffi"]  # pyarrow has no from_dlpack
_AVAILABLE = {"numpy": np, "torch": torch, "jax": jnp, "pyarrow": pa,
              "array_api_strict": xp, "tvm_ffi": tvm_ffi}

CASES = ["contiguous", "strided", "0-d", "empty", "read-only"]

# dtypes by NumPy name (ml_dtypes names for bfloat16 and float8).
_INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
_FLOATS = ["float16", "float32", "float64"]
_COMPLEX = ["complex64", "complex128"]
DTYPES: Dict[str, List[str]] = {
    "numpy": ["bool"] + _INTS + _FLOATS + _COMPLEX,
    "torch": ["bool"] + _INTS + _FLOATS + _COMPLEX + ["bfloat16", "float8_e4m3fn", "float8_e5m2"],
    # x64 is off in JAX by default: its 64-bit types would be 32-bit ones.
    "jax": ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
            "complex64", "bfloat16"],
    # Arrow booleans are bit-packed: their refusal is part of the matrix.
    "pyarrow": ["bool"] + _INTS + _FLOATS,
    "array_api_strict": ["bool"] + _INTS + ["float32", "float64"] + _COMPLEX,
    "tvm_ffi": ["bool"] + _INTS + _FLOATS + _COMPLEX,
}


def _np_dtype(name: str) -> Any:
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return getattr(ml_dtypes, name)
    return np.dtype(name)


def _base(dtype: str, case: str) -> Any:
    """The NumPy data of a case: small, with distinct bytes per element."""
    dt = _np_dtype(dtype)
    if case == "0-d":
        shape: Tuple[int, ...] = ()
    elif case == "empty":
        shape = (0, 3)
    else:
        shape = (4, 6)
    n = int(np.prod(shape))
    if dtype == "bool":
        a = (np.arange(n) % 3 == 1).reshape(shape)
    else:
        a = (np.arange(n) % 7 + 1).astype(np.float32).astype(dt).reshape(shape)
    if case == "strided":
        a = a[::2, 1::2]  # a view with non-compact strides
    if case == "read-only":
        a = a.copy()
        a.flags.writeable = False
    return a


def _torch_dtype(name: str) -> Any:
    return getattr(torch, name)


def make_source(producer: str, dtype: str, case: str) -> Any:
    """The producer's object for a case, or None when it has no such input
    (JAX and Arrow arrays are immutable: no separate read-only case; Arrow
    arrays are 1-D, strided ones are slices with an offset)."""
    a = _base(dtype, case)
    if producer == "numpy":
        return a
    if producer == "torch":
        if case == "read-only":
            return None  # PyTorch tensors have no read-only flag
        base = _base("bool" if dtype == "bool" else "float32",
                     "contiguous" if case == "strided" else case)
        t = torch.from_numpy(base.copy()).to(_torch_dtype(dtype))
        return t[::2, 1::2] if case == "strided" else t
    if producer == "jax":
        if case in ("read-only", "strided"):
            return None  # immutable and always compact
        return jnp.asarray(a)
    if producer == "pyarrow":
        if case in ("read-only", "0-d"):
            return None  # always immutable; always 1-D
        flat = _base(dtype, "contiguous").reshape(-1)
        if case == "empty":
            flat = flat[:0]
        arr = pa.array(flat)
        return arr.slice(3, 10) if case == "strided" else arr
    if producer == "array_api_strict":
        if case == "read-only":
            return None  # wraps NumPy; its own arrays are writable
        if case == "strided":
            return xp.asarray(_base(dtype, "contiguous"))[::2, 1::2]
        return xp.asarray(a)
    if producer == "tvm_ffi":
        if case == "read-only":
            return None  # tvm-ffi refuses read-only data (it asks NumPy for legacy capsules)
        return tvm_ffi.from_dlpack(a)
    raise AssertionError(producer)


# ---- what a consumer's result shows --------------------------------------------------


def _np_view(y: str, r: Any) -> Any:
    """A NumPy array of the consumer's result, for bytes (never consumes r)."""
    if y == "numpy":
        return r
    if y == "torch":
        c = r.detach().contiguous().reshape(-1)
        if c.dtype.itemsize and c.dtype != torch.bool:
            return c.view(torch.uint8).numpy()
        return c.numpy()
    if y == "jax":
        return np.asarray(r)
    if y == "array_api_strict":
        return r._array
    if y == "tvm_ffi":
        return np.from_dlpack(r)  # a view through tvm-ffi's own __dlpack__
    raise AssertionError(y)


def _pointer(y: str, r: Any) -> int:
    if y == "numpy":
        return r.__array_interface__["data"][0]
    if y == "torch":
        return r.data_ptr()
    if y == "jax":
        return r.unsafe_buffer_pointer()
    if y == "array_api_strict":
        return r._array.__array_interface__["data"][0]
    if y == "tvm_ffi":
        return r.data_ptr()
    raise AssertionError(y)


def _writable(y: str, r: Any) -> Optional[bool]:
    if y == "numpy":
        return bool(r.flags.writeable)
    if y == "array_api_strict":
        return bool(r._array.flags.writeable)
    return None  # no notion of it (PyTorch, tvm-ffi) or always immutable (JAX)


def _source_pointer(x: str, src: Any) -> Optional[int]:
    try:
        t = ds.from_dlpack(src)
    except Exception:  # noqa: BLE001
        return None
    return t.data_ptr


CONSUME: Dict[str, Callable[[Any], Any]] = {}
if np is not None:
    CONSUME["numpy"] = np.from_dlpack
if torch is not None:
    CONSUME["torch"] = torch.from_dlpack
if jnp is not None:
    CONSUME["jax"] = jnp.from_dlpack
if xp is not None:
    CONSUME["array_api_strict"] = xp.from_dlpack
if tvm_ffi is not None:
    CONSUME["tvm_ffi"] = tvm_ffi.from_dlpack


def outcome(y: str, src: Any, src_ptr: Optional[int], make: Callable[[], Any]) -> Tuple:
    """("error", class name) or ("ok", bytes, shares the source, writable)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = CONSUME[y](make())
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return ("error", type(exc).__name__)
    try:
        v = _np_view(y, r)
    except Exception:  # noqa: BLE001 - e.g. a dtype NumPy cannot view: compare the rest
        v = None
    data = v.tobytes() if v is not None else None
    empty = v is not None and v.size == 0
    shares = None if empty or src_ptr is None else _pointer(y, r) == src_ptr
    return ("ok", data, shares, _writable(y, r))


def compare(x: str, y: str, dtype: str, case: str) -> Optional[Tuple[str, Tuple, Tuple]]:
    """None when both routes agree, else (what differs, direct, through dlpackshim)."""
    src = make_source(x, dtype, case)
    if src is None:
        return None
    src_ptr = _source_pointer(x, src)
    direct = outcome(y, src, src_ptr, lambda: src)  # a producer exports any number of times
    shim = outcome(y, src, src_ptr, lambda: ds.from_dlpack(src))
    if direct == shim:
        return None
    if direct[0] != shim[0] or direct[0] == "error":
        what = "error class"
    elif direct[1] != shim[1]:
        what = "bytes"
    elif direct[2] != shim[2]:
        what = "pointer"
    else:
        what = "writability"
    return what, direct, shim


# ---- the differences dlpackshim makes on purpose -------------------------------------


_LEGACY_ONLY: Dict[str, bool] = {}


def asks_for_legacy_only(y: str) -> bool:
    """Whether consumer `y`'s from_dlpack calls ``__dlpack__`` without
    max_version (a legacy capsule, which cannot say read-only). Asked, not
    assumed (JAX 0.10 and 0.11.2 did)."""
    if y not in _LEGACY_ONLY:
        seen: List[Dict[str, Any]] = []

        class Probe:
            def __dlpack_device__(self):
                return (1, 0)

            def __dlpack__(self, **kwargs):
                seen.append(kwargs)
                return np.zeros(1, np.float32).__dlpack__(**kwargs)

        try:
            CONSUME[y](Probe())
        except Exception:  # noqa: BLE001 - only the keywords matter
            pass
        _LEGACY_ONLY[y] = bool(seen) and "max_version" not in seen[0]
    return _LEGACY_ONLY[y]


def _arrow_says_read_only() -> bool:
    """Whether pyarrow's __dlpack__ takes max_version (26 does; 25.0.1, seen on a
    GPU machine, does not): only then does dlpackshim learn that Arrow data is
    read-only. A legacy import may leave again through the legacy ABI, so
    with pyarrow 25 both routes work."""
    try:
        pa.array([1]).__dlpack__(max_version=(1, 0))
    except TypeError:
        return False
    return True


def expected(x: str, y: str, dtype: str, case: str) -> Optional[Tuple[str, str]]:
    """(what differs, why) for a deliberate difference, else None.

    docs/behaviour.md ("Transparency between libraries") lists the same.
    """
    if (x == "pyarrow" and y == "jax" and dtype != "bool"  # bit-packed bools: refused by both
            and asks_for_legacy_only("jax") and _arrow_says_read_only()):
        return ("error class",
                "Arrow data is read-only: pyarrow hands JAX (which asks for legacy "
                "capsules only) an unflagged legacy capsule, while dlpackshim, like NumPy, "
                "refuses to export read-only data through the legacy ABI (BufferError)")
    if x == "numpy" and y == "tvm_ffi" and case == "read-only":
        return ("error class",
                "tvm-ffi asks NumPy for a legacy capsule, which NumPy refuses for read-only "
                "data; a dlpackshim Tensor it takes through the C exchange table, whose "
                "versioned tensor carries READ_ONLY - tvm-ffi accepts it (and does not "
                "honour the flag: that is the consumer's part of the contract)")
    return None


# ---- the test -----------------------------------------------------------------------


def _check(pairs: List[Tuple[str, str]]) -> None:
    unexpected, missing = [], []
    for x, y in pairs:
        for dtype in DTYPES[x]:
            for case in CASES:
                if make_source(x, dtype, case) is None:
                    continue  # the producer has no such input
                diff = compare(x, y, dtype, case)
                exp = expected(x, y, dtype, case)
                if diff is not None and (exp is None or exp[0] != diff[0]):
                    unexpected.append((x, y, dtype, case) + diff)
                elif diff is None and exp is not None:
                    missing.append((x, y, dtype, case, exp))
    assert not unexpected, "\n".join(map(repr, unexpected))
    assert not missing, "expected differences that did not happen:\n" + "\n".join(
        map(repr, missing))


def missing_peers(x: str, y: str) -> Optional[str]:
    """Why the pair cannot run: the peers that are missing, each named once
    (a producer without its library, a consumer without its from_dlpack)."""
    missing = [name for name, gone in ((x, _AVAILABLE.get(x) is None),
                                       (y, CONSUME.get(y) is None)) if gone]
    missing = list(dict.fromkeys(missing))
    if not missing:
        return None
    return " and ".join(missing) + (" is" if len(missing) == 1 else " are") + " not installed"


def _pairs() -> List[Any]:
    return [pytest.param(x, y, id=f"{x}->{y}") for x in PRODUCERS for y in CONSUMERS]


@pytest.mark.parametrize("x, y", _pairs())
def test_transparent(x: str, y: str) -> None:
    """Legacy-only producers (JAX) included: their imports are read-only
    (a JAX array comes out of dlpackshim read-only for NumPy, as
    numpy.from_dlpack(jax_array) gives it) yet still leave through the
    legacy ABI they came in by (JAX -> dlpackshim -> JAX works)."""
    why = missing_peers(x, y)
    if why is not None:
        pytest.skip(why)
    _check([(x, y)])


def test_a_skipped_pair_names_only_the_missing_peers(monkeypatch):
    monkeypatch.setitem(_AVAILABLE, "torch", None)
    monkeypatch.delitem(CONSUME, "torch", raising=False)
    monkeypatch.setitem(_AVAILABLE, "numpy", object())
    monkeypatch.setitem(CONSUME, "numpy", object())
    monkeypatch.delitem(CONSUME, "tvm_ffi", raising=False)
    assert missing_peers("torch", "torch") == "torch is not installed"
    assert missing_peers("numpy", "tvm_ffi") == "tvm_ffi is not installed"
    assert missing_peers("torch", "tvm_ffi") == "torch and tvm_ffi are not installed"
    assert missing_peers("numpy", "numpy") is None


if __name__ == "__main__":  # prints the whole matrix's differences
    import sys
    for x in PRODUCERS:
        for y in CONSUMERS:
            if missing_peers(x, y) is not None:
                continue
            for dtype in DTYPES[x]:
                for case in CASES:
                    d = compare(x, y, dtype, case)
                    if d is not None:
                        print(x, y, dtype, case, d[0], d[1][:1] + d[1][2:], d[2][:1] + d[2][2:],
                              "" if d[0] != "bytes" else (d[1][1][:16], d[2][1][:16]))
    sys.stdout.flush()
