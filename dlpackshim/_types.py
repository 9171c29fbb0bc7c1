"""DLPack's enums and the small value types: DeviceType, DTypeCode, DType, Device."""

from __future__ import annotations

import enum
import operator
import sys
from collections import namedtuple

from . import _cdef

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple, Union

#: The DLPack ABI version this package implements (dlpack.h 1.3).
DLPACK_VERSION: Tuple[int, int] = (1, 3)


# DLPack's enums come from the header through the generated cdef module
# (csrc/gen_cdef.py), never copied by hand: a value added to csrc/dlpackshim.h
# reaches Python with the next `python3 csrc/gen_cdef.py`.
def _header_enum(name: str, c_name: str, doc: str) -> Any:
    cls = enum.IntEnum(name, list(_cdef.ENUMS[c_name].items()), module=__name__)  # type: ignore
    cls.__doc__ = doc + " Generated from csrc/dlpackshim.h."
    return cls


DeviceType = _header_enum(
    "DeviceType", "DLDeviceType",
    "``DLDeviceType`` of DLPack 1.3 (the first item of ``__dlpack_device__()``), plus "
    "``kDLTPU``, ``kDLTPUHost`` and ``kDLAscend``, added by DLPack's main branch after 1.3.")

DTypeCode = _header_enum(
    "DTypeCode", "DLDataTypeCode",
    "``DLDataTypeCode`` of DLPack 1.3 (``DLDataType.code``), plus ``kDLBcomplex`` "
    "(complex of two bfloat16), added by DLPack's main branch after 1.3.")


# Codes whose name carries the bit width ("int8", "float32", "complex64").
_SIZED = {0: "int", 1: "uint", 2: "float", 3: "opaque", 5: "complex"}
# Codes with one fixed width and a fixed name.
_FIXED: Dict[int, Tuple[int, str]] = {
    4: (16, "bfloat16"),
    6: (8, "bool"),
    7: (8, "float8_e3m4"),
    8: (8, "float8_e4m3"),
    9: (8, "float8_e4m3b11fnuz"),
    10: (8, "float8_e4m3fn"),
    11: (8, "float8_e4m3fnuz"),
    12: (8, "float8_e5m2"),
    13: (8, "float8_e5m2fnuz"),
    14: (8, "float8_e8m0fnu"),
    15: (6, "float6_e2m3fn"),
    16: (6, "float6_e3m2fn"),
    17: (4, "float4_e2m1fn"),
    18: (32, "bcomplex32"),
}
_FIXED_BY_NAME = {name: (code, bits) for code, (bits, name) in _FIXED.items()}
_SIZED_BY_PREFIX = {prefix: code for code, prefix in _SIZED.items()}
# Any other (code, bits): a known code with an odd width (bool of 1 bit), or a
# code from a later DLPack, is named "dtype<code>_<bits>". _name_of writes it,
# _parse_base reads it back. (Parsed by hand: `re` would be ~1.3 ms of the
# package's import.)
_GENERIC_PREFIX = "dtype"


def _member(enum_cls: Any, value: int) -> Any:
    """enum_cls(value), or the plain int for a value newer than this package."""
    return enum_cls(value) if value in enum_cls._value2member_map_ else int(value)


def _number(digits: str, low: int, high: int) -> "int | None":
    """The number ASCII `digits` write, when low <= it < high; else None."""
    if not (digits.isascii() and digits.isdigit()):
        return None
    n = int(digits)
    return n if low <= n < high else None


def _parse_base(name: str) -> "Tuple[Union[DTypeCode, int], int] | None":
    """(code, bits) of a lane-less dtype name, or None."""
    fixed = _FIXED_BY_NAME.get(name)
    if fixed is not None:
        return DTypeCode(fixed[0]), fixed[1]
    for prefix, code in _SIZED_BY_PREFIX.items():   # "int8", "float32", ...
        bits = _number(name[len(prefix):], 1, 256) if name.startswith(prefix) else None
        if bits is not None:
            return DTypeCode(code), bits
    if name.startswith(_GENERIC_PREFIX):   # "dtype6_1"
        code_digits, sep, digits = name[len(_GENERIC_PREFIX):].partition("_")
        code, bits = _number(code_digits, 0, 256), _number(digits, 1, 256)
        if code is not None and bits is not None:
            return _member(DTypeCode, code), bits
    return None


def _name_of(code: int, bits: int, lanes: int) -> str:
    fixed = _FIXED.get(code)
    if fixed is not None and fixed[0] == bits:
        base = fixed[1]
    elif code in _SIZED:
        base = f"{_SIZED[code]}{bits}"
    else:
        base = f"dtype{code}_{bits}"
    return base if lanes == 1 else f"{base}x{lanes}"


def _numpy_dtype_of(value: Any) -> Any:
    """`value` as a ``numpy.dtype`` when it is one of NumPy's dtype objects (a
    ``numpy.dtype``, or a scalar type such as ``numpy.float32`` or ml_dtypes'
    ``bfloat16``), else None. Never imports NumPy: such a value exists only
    once NumPy is loaded."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(value, np.dtype):
        return value
    if isinstance(value, type) and issubclass(value, np.generic):
        try:
            return np.dtype(value)
        except TypeError:  # an abstract type (numpy.floating) names no one dtype
            return None
    return None


def _dtype_from_numpy(npdt: Any) -> "DType":
    """The DType of a ``numpy.dtype``: the one rule of the conversion both ways.

    DLPack types are native-endian scalars, named as NumPy and ml_dtypes name
    theirs ("float32", "bool", "bfloat16", "float8_e4m3fn", "int4"). Long
    double is refused, as NumPy's own ``__dlpack__`` refuses it: it is not an
    IEEE type of its size.
    """
    what = f"NumPy dtype {npdt!r} has no DLPack equivalent"
    if npdt.fields is not None or npdt.subdtype is not None:
        raise ValueError(f"{what}: DLPack types are scalars, not records or subarrays")
    if not npdt.isnative:
        raise ValueError(f"{what}: DLPack data is in native byte order")
    if (npdt.kind == "f" and npdt.itemsize > 8) or (npdt.kind == "c" and npdt.itemsize > 16):
        raise ValueError(f"{what}: long double is not an IEEE type of its size "
                         "(numpy's __dlpack__ refuses it too)")
    try:
        dt = DType.from_name(npdt.name)
    except ValueError:
        raise ValueError(what) from None
    if dt.itemsize != npdt.itemsize:
        raise ValueError(f"{what}: its {npdt.itemsize}-byte items are not {dt.name}'s "
                         f"{dt.itemsize}")
    return dt


class DType:
    """A DLPack data type: ``(code, bits, lanes)`` with a name.

    Equal to a DType with the same fields, to its name (``"float32"``,
    ``"bfloat16"``, ``"float8_e4m3fn"``, ``"bool"``, ``"float32x4"`` for 4
    lanes) and to the tuple ``(code, bits, lanes)``; where NumPy is loaded,
    also to the NumPy dtype and scalar type it converts to
    (``numpy.dtype('float32')``, ``numpy.float32``, ml_dtypes' ``bfloat16``).
    It hashes as its name, so a DType and its name find each other in sets
    and dict keys; tuples and NumPy's dtypes hash their own way (as NumPy's
    ``numpy.dtype('float32')`` and ``'float32'`` do): key by ``DType`` values
    to mix them (:func:`DType`, :meth:`from_numpy`).

    ``numpy.dtype(dt)`` and :meth:`to_numpy` convert to NumPy,
    :meth:`from_numpy` back; nothing imports NumPy until a conversion needs
    it. It unpacks as ``code, bits, lanes = dt``. Its repr,
    ``DType('float32')``, is a valid call: ``DType(name)`` is
    :meth:`DType.from_name`, and every DType's name parses back to it.

    Parameters
    ----------
    code : int or str
        A :class:`DTypeCode` value (0 to 255), or a dtype name (then alone).
    bits : int
        Bits of one lane (1 to 255).
    lanes : int, optional
        Vector lanes (1 to 65535); 1 (the default) for scalars.

    Raises
    ------
    TypeError
        A field that is not an integer, or a name with bits or lanes.
    ValueError
        A field outside ``DLDataType``'s range, or an unknown name.
    """

    __slots__ = ("_key", "_name")

    def __new__(cls, code: Union[int, str], bits: Optional[int] = None, lanes: int = 1) -> "DType":
        if isinstance(code, str):
            if bits is not None or lanes != 1:
                raise TypeError("DType(name) takes the name alone (its bits and lanes are in it)")
            return cls.from_name(code)
        if bits is None:
            raise TypeError("DType() needs code and bits, or a dtype name")
        try:
            fields = tuple(operator.index(v) for v in (code, bits, lanes))
        except TypeError:
            raise TypeError(f"DType fields must be integers, not {(code, bits, lanes)!r}") from None
        c, b, n = fields
        if not (0 <= c < 256 and 0 < b < 256 and 0 < n < 65536):
            raise ValueError(f"dtype fields out of range: {fields!r} (code 0-255, bits 1-255, "
                             "lanes 1-65535)")
        self = object.__new__(cls)
        object.__setattr__(self, "_key", (_member(DTypeCode, c), b, n))
        object.__setattr__(self, "_name", _name_of(c, b, n))
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DType is immutable")

    @property
    def code(self) -> Union["DTypeCode", int]:
        """The type code: a :class:`DTypeCode` (a plain int for a code this
        package does not know)."""
        return self._key[0]

    @property
    def bits(self) -> int:
        """Bits of one lane."""
        return self._key[1]

    @property
    def lanes(self) -> int:
        """Vector lanes (1 for scalars)."""
        return self._key[2]

    @property
    def name(self) -> str:
        """The name, e.g. ``"float32"`` or ``"int4"`` (``"float32x4"`` with lanes;
        ``"dtype6_1"`` for a code and width with no name of their own)."""
        return self._name

    @property
    def itemsize(self) -> int:
        """Bytes of one element, rounded up (sub-byte types give 1)."""
        return (self.bits * self.lanes + 7) // 8

    @classmethod
    def from_name(cls, name: str) -> "DType":
        """The DType called `name` (the inverse of :attr:`name`).

        Parameters
        ----------
        name : str
            E.g. ``"float32"``, ``"uint4"``, ``"bfloat16"``, ``"complex64x2"``,
            ``"dtype6_1"``.

        Returns
        -------
        DType

        Raises
        ------
        ValueError
            Not a DLPack dtype name.
        """
        base = _parse_base(name)
        lanes = 1
        if base is None:  # "float32x4": a vector type
            head, sep, tail = name.rpartition("x")
            lanes = _number(tail, 1, 65536) if sep else None
            base = _parse_base(head) if lanes is not None else None
        dtype = cls(base[0], base[1], lanes) if base is not None else None
        if dtype is not None and dtype.name == name:  # a name as .name writes it, no other
            return dtype
        raise ValueError(f"unknown DLPack dtype name {name!r}")

    @classmethod
    def from_numpy(cls, dtype: Any) -> "DType":
        """The DType of a NumPy dtype (imports NumPy).

        Parameters
        ----------
        dtype : numpy.dtype or anything ``numpy.dtype()`` takes
            E.g. ``numpy.float32``, ``"f4"``, ``numpy.dtype("bool")``,
            ``ml_dtypes.bfloat16``.

        Returns
        -------
        DType

        Raises
        ------
        TypeError
            NumPy does not understand `dtype`.
        ValueError
            A NumPy dtype with no DLPack equivalent (records, non-native byte
            order, long double, strings, objects, dates).

        Examples
        --------
        >>> import numpy as np
        >>> DType.from_numpy(np.float32)
        DType('float32')
        """
        import numpy as np

        return _dtype_from_numpy(np.dtype(dtype))

    def to_numpy(self) -> Any:
        """The NumPy dtype of this DType (imports NumPy; ml_dtypes for the types
        NumPy lacks, such as bfloat16 and the float8 family).

        Returns
        -------
        numpy.dtype

        Raises
        ------
        ValueError
            NumPy has no such type (vector lanes, bool of 1 bit, an opaque
            handle; without ml_dtypes, bfloat16 and the narrow types).

        Examples
        --------
        >>> DType("int16").to_numpy()
        dtype('int16')
        """
        import numpy as np

        try:
            out = np.dtype(self._name)   # NumPy's own names, and those ml_dtypes registered
        except TypeError:
            try:
                import ml_dtypes

                out = np.dtype(getattr(ml_dtypes, self._name))
            except (ImportError, AttributeError, TypeError):
                raise ValueError(f"NumPy has no dtype for {self._name} (ml_dtypes, where "
                                 "installed, adds bfloat16 and the narrow types)") from None
        try:
            same = _dtype_from_numpy(out) == self
        except ValueError:
            same = False
        if not same:  # a NumPy name that means another type (float128: long double)
            raise ValueError(f"NumPy has no dtype for {self._name} (its {out!r} is another type)")
        return out

    @property
    def dtype(self) -> Any:
        """:meth:`to_numpy`'s result, once NumPy is loaded: the attribute through
        which ``numpy.dtype(dt)`` and NumPy's ``dtype=`` arguments take a DType
        (AttributeError without NumPy loaded, or for a type NumPy lacks)."""
        if "numpy" not in sys.modules:
            raise AttributeError("DType.dtype is NumPy's conversion hook: NumPy is not loaded "
                                 "(DType.to_numpy() loads it)")
        try:
            return self.to_numpy()
        except ValueError as e:
            raise AttributeError(str(e)) from None

    def _replace(self, **fields: int) -> "DType":
        """A copy with some of ``code``, ``bits``, ``lanes`` changed (as when
        DType was a NamedTuple)."""
        key = dict(zip(("code", "bits", "lanes"), self._key), **fields)
        return DType(key["code"], key["bits"], key["lanes"])

    def __iter__(self) -> Iterator[int]:
        return iter(self._key)

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: Any) -> Any:
        return self._key[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self._key == other._key
        if isinstance(other, str):
            return self._name == other
        if isinstance(other, tuple):
            return self._key == other
        theirs = _numpy_dtype_of(other)
        if theirs is None:
            return NotImplemented
        try:
            return self._key == _dtype_from_numpy(theirs)._key
        except ValueError:  # a NumPy type DLPack has not: equal to no DType
            return False

    def __hash__(self) -> int:
        return hash(self._name)

    def __reduce__(self) -> Tuple[Any, Tuple[int, int, int]]:
        return (DType, (int(self.code), self.bits, self.lanes))

    def __repr__(self) -> str:
        return f"DType({self._name!r})"

    def __str__(self) -> str:
        return self._name


def _device_repr(self: Device) -> str:
    t = _member(DeviceType, self.device_type)   # Device(1, 0) shows as a Tensor's does
    name = t.name if isinstance(t, DeviceType) else str(t)
    return f"Device({name}, {self.device_id})"


# Device is the class ``class Device(typing.NamedTuple)`` makes, made as typing
# makes it (a collections.namedtuple, then the class body's docstring and
# methods set on it), so that importing dlpackshim does not import typing.
if TYPE_CHECKING:
    class Device(NamedTuple):
        device_type: int
        device_id: int = 0
else:
    Device = namedtuple("Device", ("device_type", "device_id"), defaults=(0,))
    Device.__annotations__ = Device.__new__.__annotations__ = {"device_type": "int",
                                                               "device_id": "int"}
    _device_repr.__name__, _device_repr.__qualname__ = "__repr__", "Device.__repr__"
    Device.__repr__ = _device_repr
    Device.__doc__ = """A DLPack device: ``(device_type, device_id)``.

    Equal to the plain tuple that ``__dlpack_device__()`` returns.

    Parameters
    ----------
    device_type : int
        A :class:`DeviceType` value.
    device_id : int
        The device ordinal (0 for host memory).
    """


_DEVICE_CACHE: Dict[Tuple[int, int], Device] = {}


def _device(device_type: int, device_id: int) -> Device:
    """A (cached) Device for the pair read from a DLTensor."""
    key = (device_type, device_id)
    dev = _DEVICE_CACHE.get(key)
    if dev is None:
        dev = Device(_member(DeviceType, device_type), int(device_id))
        if len(_DEVICE_CACHE) < 256:
            _DEVICE_CACHE[key] = dev
    return dev


def as_dtype(value: Any) -> DType:
    """Normalise a DType, a dtype name, a ``(code, bits[, lanes])`` tuple or,
    where NumPy is loaded, a NumPy dtype or scalar type (``numpy.float32``).

    Raises
    ------
    TypeError
        Not one of those kinds.
    ValueError
        An unknown name, a tuple with out-of-range fields, or a NumPy dtype
        with no DLPack equivalent.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return DType.from_name(value)
    if isinstance(value, tuple) and len(value) in (2, 3) and all(isinstance(v, int) for v in value):
        return DType(*value)
    npdt = _numpy_dtype_of(value)
    if npdt is not None:
        return _dtype_from_numpy(npdt)
    raise TypeError(
        f"dtype must be a dlpackshim.DType, a dtype name such as 'float32', a "
        f"(code, bits, lanes) tuple or a NumPy dtype, not {value!r}"
    )


_DTYPE_CACHE: Dict[Tuple[int, int, int], DType] = {}


def _dtype(code: int, bits: int, lanes: int) -> DType:
    """A (cached) DType for the fields read from a DLTensor."""
    key = (code, bits, lanes)
    dt = _DTYPE_CACHE.get(key)
    if dt is None:
        dt = DType(code, bits, lanes)
        if len(_DTYPE_CACHE) < 1024:
            _DTYPE_CACHE[key] = dt
    return dt
