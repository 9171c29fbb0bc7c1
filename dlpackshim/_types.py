"""DLPack's enums and the small value types: DeviceType, DTypeCode, DType, Device."""

from __future__ import annotations

import enum
import re
from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

from . import _cdef

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
_SIZED_RE = re.compile(r"^(int|uint|float|complex|opaque)(\d+)$")


def _parse_base(name: str) -> "Tuple[DTypeCode, int] | None":
    """(code, bits) of a lane-less dtype name, or None."""
    fixed = _FIXED_BY_NAME.get(name)
    if fixed is not None:
        return DTypeCode(fixed[0]), fixed[1]
    match = _SIZED_RE.match(name)
    if match is not None and 0 < int(match.group(2)) < 256:
        return DTypeCode(_SIZED_BY_PREFIX[match.group(1)]), int(match.group(2))
    return None


def _name_of(code: int, bits: int, lanes: int) -> str:
    fixed = _FIXED.get(code)
    if fixed is not None and fixed[0] == bits:
        base = fixed[1]
    elif code in _SIZED:
        base = f"{_SIZED[code]}{bits}"
    else:  # a known code with an odd width, or a code from a later DLPack
        base = f"dtype{code}_{bits}"
    return base if lanes == 1 else f"{base}x{lanes}"


class _DTypeFields(NamedTuple):
    code: int
    bits: int
    lanes: int = 1


class DType(_DTypeFields):
    """A DLPack data type: ``(code, bits, lanes)`` with a name.

    Compares equal to its name (``"float32"``, ``"bfloat16"``,
    ``"float8_e4m3fn"``, ``"bool"``, ``"float32x4"`` for 4 lanes) and to the
    tuple ``(code, bits, lanes)``. Hashes as that tuple. Its repr,
    ``DType('float32')``, is a valid call: ``DType(name)`` is
    :meth:`DType.from_name`.

    Parameters
    ----------
    code : int or str
        A :class:`DTypeCode` value, or a dtype name (then alone).
    bits : int
        Bits of one lane.
    lanes : int, optional
        Vector lanes; 1 (the default) for scalars.
    """

    __slots__ = ()

    def __new__(cls, code: Union[int, str], bits: Optional[int] = None, lanes: int = 1) -> "DType":
        if isinstance(code, str):
            if bits is not None or lanes != 1:
                raise TypeError("DType(name) takes the name alone (its bits and lanes are in it)")
            return cls.from_name(code)
        if bits is None:
            raise TypeError("DType() needs code and bits, or a dtype name")
        return super().__new__(cls, code, bits, lanes)

    @property
    def name(self) -> str:
        """The name, e.g. ``"float32"`` or ``"int4"`` (``"float32x4"`` with lanes)."""
        return _name_of(self.code, self.bits, self.lanes)

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
            E.g. ``"float32"``, ``"uint4"``, ``"bfloat16"``, ``"complex64x2"``.

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
            if sep and tail.isdigit() and 0 < int(tail) < 65536:
                base = _parse_base(head)
                lanes = int(tail)
        if base is not None:
            return cls(base[0], base[1], lanes)
        raise ValueError(f"unknown DLPack dtype name {name!r}")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.name == other
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"DType({self.name!r})"

    def __str__(self) -> str:
        return self.name


class Device(NamedTuple):
    """A DLPack device: ``(device_type, device_id)``.

    Equal to the plain tuple that ``__dlpack_device__()`` returns.

    Parameters
    ----------
    device_type : int
        A :class:`DeviceType` value.
    device_id : int
        The device ordinal (0 for host memory).
    """

    device_type: int
    device_id: int = 0

    def __repr__(self) -> str:
        t = self.device_type
        name = t.name if isinstance(t, DeviceType) else str(int(t))
        return f"Device({name}, {self.device_id})"


def _device_type(value: int) -> Union[DeviceType, int]:
    """DeviceType(value), or the plain int for a type newer than 1.3."""
    try:
        return DeviceType(value)
    except ValueError:
        return int(value)


_DEVICE_CACHE: Dict[Tuple[int, int], Device] = {}


def _device(device_type: int, device_id: int) -> Device:
    """A (cached) Device for the pair read from a DLTensor."""
    key = (device_type, device_id)
    dev = _DEVICE_CACHE.get(key)
    if dev is None:
        dev = Device(_device_type(device_type), int(device_id))
        if len(_DEVICE_CACHE) < 256:
            _DEVICE_CACHE[key] = dev
    return dev


def as_device(value: Any, argname: str = "device") -> Device:
    """Normalise a Device, a ``(type, id)`` pair or a DeviceType to a Device.

    Raises
    ------
    TypeError
        Any other kind of value (strings such as ``"cpu"`` are not
        standard and are refused).
    ValueError
        A device type or id outside int32 (DLDevice's fields).
    """
    if isinstance(value, DeviceType):
        return Device(value, 0)
    if isinstance(value, tuple) and len(value) == 2:
        dt, di = value
        if isinstance(dt, int) and isinstance(di, int) and not isinstance(dt, bool) \
                and not isinstance(di, bool):
            if not (-2**31 <= dt < 2**31 and -2**31 <= di < 2**31):
                raise ValueError(f"{argname} {value!r}: device type and id are int32 values")
            return _device(int(dt), int(di))
    raise TypeError(
        f"{argname} must be a dlpackshim.Device, a (device_type, device_id) tuple of ints "
        f"or a dlpackshim.DeviceType, not {value!r}"
    )


def as_dtype(value: Any) -> DType:
    """Normalise a DType, a dtype name or a ``(code, bits, lanes)`` tuple.

    Raises
    ------
    TypeError
        Not one of those kinds.
    ValueError
        An unknown name, or a tuple with out-of-range fields.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return DType.from_name(value)
    if isinstance(value, tuple) and len(value) in (2, 3) and all(isinstance(v, int) for v in value):
        code, bits = value[0], value[1]
        lanes = value[2] if len(value) == 3 else 1
        if not (0 <= code < 256 and 0 < bits < 256 and 0 < lanes < 65536):
            raise ValueError(f"dtype fields out of range: {value!r}")
        return DType(DTypeCode(code) if code in DTypeCode._value2member_map_ else code, bits, lanes)
    raise TypeError(
        f"dtype must be a dlpackshim.DType, a dtype name such as 'float32' or a "
        f"(code, bits, lanes) tuple, not {value!r}"
    )


_DTYPE_CACHE: Dict[Tuple[int, int, int], DType] = {}


def _dtype(code: int, bits: int, lanes: int) -> DType:
    """A (cached) DType for the fields read from a DLTensor."""
    key = (code, bits, lanes)
    dt = _DTYPE_CACHE.get(key)
    if dt is None:
        c = DTypeCode(code) if code in DTypeCode._value2member_map_ else code
        dt = DType(c, bits, lanes)
        if len(_DTYPE_CACHE) < 1024:
            _DTYPE_CACHE[key] = dt
    return dt
