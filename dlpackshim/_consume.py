"""from_dlpack: the consumer side, with a per-type cache of how to call producers.

Hot path (no `device`, no `copy`, a producer type seen before): one
``__dlpack__`` call, one C call that consumes the capsule and makes it the
owner, one Tensor. Everything else (first sight of a type, the legacy
fall-back, capsules, buffers, array interfaces, device moves, copies) is in
:func:`_from_dlpack_slow`.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, Optional, Tuple

from . import _buffer, _device
from ._errors import NotArrayLikeError
from ._ffi import fast_import
from ._tensor import Tensor, _clone, _host_view, _import_capsule
from ._types import DLPACK_VERSION, Device, as_device

_MAX_VERSION = DLPACK_VERSION

# How to get data out of objects of a type (values of _HOW).
_VERSIONED = 1     # __dlpack__(max_version=..., [dl_device=..., copy=...])
_LEGACY = 2        # __dlpack__() only: a producer older than the 2023.12 standard
_MV_ONLY = 3       # takes max_version but not dl_device/copy (off-spec, seen in the wild)
_CAPSULE = 4       # a DLPack PyCapsule itself
_CUDA_IFACE = 5    # __cuda_array_interface__
_ARRAY_IFACE = 6   # __array_interface__
_BUFFER = 7        # the buffer protocol

#: type -> one of the values above. Producer types are few; bounded anyway.
_HOW: Dict[type, int] = {}
_HOW_LIMIT = 4096
_how_get = _HOW.get

_CapsuleType = type(datetime.datetime_CAPI)  # types.CapsuleType from Python 3.13
_new = object.__new__


def from_dlpack(x: Any, /, *, device: Any = None, copy: Optional[bool] = None) -> Tensor:
    """Import `x` as a :class:`dlpackshim.Tensor` (array API ``from_dlpack``).

    Parameters
    ----------
    x : object
        An object with ``__dlpack__``/``__dlpack_device__`` (DLPack 1.x or a
        legacy producer), a DLPack PyCapsule (``"dltensor_versioned"`` or
        ``"dltensor"``; it is consumed), an object with
        ``__cuda_array_interface__`` (v2/v3), ``__array_interface__`` (v3),
        or the buffer protocol (bytes, bytearray, memoryview, array.array,
        mmap, ctypes arrays, ...). Tried in that order.
    device : Device, (device_type, device_id) tuple, DeviceType or None, optional
        Where the result must live; None (default) keeps `x`'s device. Data
        in host-accessible memory (pinned, managed) can be put on
        ``(kDLCPU, 0)``; other moves need the producer's help (it receives
        ``dl_device``). Strings such as ``"cpu"`` are not accepted.
    copy : bool or None, optional
        True: the result owns a fresh copy (compact, 256-byte aligned).
        False: never copy. None (default): copy only if needed.

    Returns
    -------
    Tensor
        Zero-copy when possible; it keeps `x`'s memory alive. Read-only
        data gives a read-only Tensor. A legacy capsule carries no flags, so
        its data is taken as writable (as PyTorch does).

    Raises
    ------
    TypeError
        `x` is none of the kinds above (the error is also an AttributeError,
        the standard's error for "no ``__dlpack__``"), or `device`/`copy` has
        the wrong type.
    BufferError
        The producer cannot export (propagated as it is), the capsule is
        used, invalid, or of a newer major version (its deleter is called),
        or `device` is one this build cannot place data on (array API
        2024.12: "If the array library does not support such cases at all,
        the function must raise BufferError").
    ValueError
        ``copy=False`` but a copy is needed (array API 2024.12, Raises:
        "ValueError - If data exchange is possible via an explicit copy but
        copy is set to False").
    """
    if device is None and copy is None:
        how = _how_get(type(x))
        if how == _VERSIONED or how == _MV_ONLY:
            cap = x.__dlpack__(max_version=_MAX_VERSION)
        elif how == _LEGACY:
            cap = x.__dlpack__()
        else:
            return _from_dlpack_slow(x, None, None)
        addr = fast_import(cap)
        t = _new(Tensor)
        t._owner = cap
        t._keep = None
        t._addr = addr
        t._flags = None
        t._meta = None
        t._pinned = False
        return t
    return _from_dlpack_slow(x, device, copy)


def _remember(tp: type, how: int) -> None:
    if len(_HOW) >= _HOW_LIMIT:
        _HOW.clear()
    _HOW[tp] = how


def _classify(x: Any) -> int:
    tp = type(x)
    how = _HOW.get(tp)
    if how is not None:
        return how
    if tp is _CapsuleType:
        return _CAPSULE  # not cached by type: capsules are told apart by name in C
    if hasattr(tp, "__dlpack__"):
        return 0  # a producer not seen yet: probe it
    if hasattr(x, "__cuda_array_interface__"):
        how = _CUDA_IFACE
    elif hasattr(x, "__array_interface__"):
        how = _ARRAY_IFACE
    else:
        try:
            memoryview(x).release()
        except TypeError:
            raise NotArrayLikeError(
                f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__, a DLPack "
                f"PyCapsule, or an object with __cuda_array_interface__, __array_interface__ or "
                f"the buffer protocol; got {tp.__module__}.{tp.__qualname__}"
            ) from None
        how = _BUFFER
    _remember(tp, how)
    return how


def _from_dlpack_slow(x: Any, device: Any, copy: Any) -> Tensor:
    target: Optional[Device] = None if device is None else as_device(device, "device")
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    how = _classify(x)
    copied = False  # the producer made a copy for us (IS_COPIED after copy=True)
    if how in (0, _VERSIONED, _MV_ONLY, _LEGACY):
        t, copied = _call_producer(x, how, target, copy)
    elif how == _CAPSULE:
        t = _import_capsule(x)
    elif how == _CUDA_IFACE:
        t = _buffer.from_cuda_array_interface(x)
    elif how == _ARRAY_IFACE:
        t = _buffer.from_array_interface(x)
    else:
        t = _buffer.from_buffer(x)
    return _place(t, target, copy, copied)


def _call_producer(x: Any, how: int, target: Optional[Device],
                   copy: Optional[bool]) -> Tuple[Tensor, bool]:
    """Get a capsule from `x.__dlpack__` and import it.

    Asks for ``max_version=(1, 3)``, plus ``dl_device`` when `target` is not
    the producer's device and ``copy`` when given. On TypeError retries with
    fewer keywords (an older producer), but only when the shim can then honour
    `target` and `copy` itself; caches per type which call worked.

    Returns the Tensor and whether the producer made the copy asked for.
    """
    dl_device = None
    if target is not None:
        own = _producer_device(x)
        if own != target:
            if copy is False and not _viewable(own, target):
                raise _copy_needed(own, target)
            dl_device = (int(target[0]), int(target[1]))
    if how == _LEGACY:
        return _import_capsule(x.__dlpack__()), False
    kwargs: Dict[str, Any] = {"max_version": _MAX_VERSION}
    if how != _MV_ONLY:
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
    try:
        cap = x.__dlpack__(**kwargs)
    except TypeError as exc:
        # Only while probing a new type, or when keywords beyond max_version
        # are sent to a type so far called without them.
        if not (how == 0 or (how == _VERSIONED and len(kwargs) > 1)):
            raise
        cap, kwargs = _fallback(x, exc, kwargs, dl_device, copy)
    else:
        if how == 0:
            _remember(type(x), _VERSIONED)
    # A producer that took copy=True made a fresh buffer (the standard's rule).
    return _import_capsule(cap), bool(copy) and "copy" in kwargs


def _fallback(x: Any, exc: TypeError, kwargs: Dict[str, Any], dl_device: Any,
              copy: Optional[bool]) -> Tuple[Any, Dict[str, Any]]:
    """Retry a producer that rejected the 2023.12 keywords."""
    if len(kwargs) > 1:
        # A producer that knows max_version but not dl_device/copy.
        try:
            cap = x.__dlpack__(max_version=_MAX_VERSION)
        except TypeError:
            pass
        else:
            if _can_do_ourselves(x, dl_device, copy):
                _remember(type(x), _MV_ONLY)
                return cap, {"max_version": _MAX_VERSION}
            del cap  # unconsumed: its destructor calls the deleter
            raise _no_fallback(x, exc, dl_device) from exc
    if not _can_do_ourselves(x, dl_device, copy):
        raise _no_fallback(x, exc, dl_device) from exc
    cap = x.__dlpack__()
    _remember(type(x), _LEGACY)
    return cap, {}


def _can_do_ourselves(x: Any, dl_device: Any, copy: Optional[bool]) -> bool:
    own = _producer_device(x)
    if dl_device is not None and not (dl_device == (_device.CPU, 0)
                                      and _device.is_host_accessible(own[0])):
        return False
    return not copy or _device.is_host_accessible(own[0])


def _no_fallback(x: Any, exc: TypeError, dl_device: Any) -> BufferError:
    return BufferError(
        f"{type(x).__name__}.__dlpack__ does not take the DLPack 2023.12 keywords "
        f"({exc}), and dlpackshim cannot do what they ask itself "
        f"(dl_device={dl_device!r}): no data moves between devices in this build"
    )


def _producer_device(x: Any) -> Device:
    try:
        get = x.__dlpack_device__
    except AttributeError:
        raise NotArrayLikeError(
            f"{type(x).__name__} has __dlpack__ but no __dlpack_device__"
        ) from None
    return as_device(tuple(get()), "__dlpack_device__()")


def _viewable(own: Tuple[int, int], target: Tuple[int, int]) -> bool:
    """True when data on `own` can be seen on `target` without a copy."""
    return own == target or (tuple(target) == (_device.CPU, 0)
                             and _device.is_host_accessible(own[0]))


def _copy_needed(own: Tuple[int, int], target: Tuple[int, int]) -> ValueError:
    # Array API 2024.12 from_dlpack, Raises: "ValueError - If data exchange is
    # possible via an explicit copy but copy is set to False."
    return ValueError(f"from_dlpack: copy=False, but placing data from {own!r} on {target!r} "
                      "needs a copy")


def _place(t: Tensor, target: Optional[Device], copy: Optional[bool], copied: bool) -> Tensor:
    """Apply `device` and `copy` to a freshly imported Tensor."""
    if target is not None and t.device != target:
        if copy is False and not _viewable(t.device, target):
            own = t.device
            t.close()
            raise _copy_needed(own, target)
        if _viewable(t.device, target):
            if copy:
                return _clone(t)  # the clone is on kDLCPU
            return _host_view(t)
        own = t.device
        t.close()
        raise BufferError(
            f"from_dlpack: cannot place data from {own!r} on {target!r}: this build of "
            "dlpackshim moves no data between devices, and the producer did not"
        )
    if copy and not copied:
        # The producer could not copy (legacy), or the data came from a
        # capsule, a buffer or an array interface: copy it ourselves.
        c = _clone(t)
        t.close()
        return c
    return t
