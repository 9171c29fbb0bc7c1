"""from_dlpack: the consumer side, with a per-type cache of how to call producers.

The plain case (no keyword, a type seen before: a DLPack producer, a C
exchange table, the buffer protocol, ``__array_interface__``) is one C
builtin (csrc/python/pyconsume.c), which is the public ``from_dlpack``.
What it hands over is here: the first sight of a type (classified once and
cached in ``_HOW``), the legacy and keyword fall-backs, capsules,
``__cuda_array_interface__``, and placement (``device``, ``copy``,
``stream``). The buffer protocol and ``__array_interface__`` are imported by
the same C code on both paths (csrc/python/interfaces.c).
"""

from __future__ import annotations

import datetime
import inspect
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from . import _buffer, _device, _exchange
from ._errors import NotArrayLikeError
from ._ffi import pylib
from ._tensor import Tensor, _clone, _host_copy, _host_view, _import_capsule
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
_EXCHANGE = 8      # the type's C table, __dlpack_c_exchange_api__ (see _exchange.py)
#: Added to a producer type's value once it exported GPU data: its calls then
#: leave the hot path (which knows no device) for _call_producer, which names
#: the default stream explicitly and makes the data's device current.
_GPU_SEEN = 0x100

#: type -> one of the values above. Producer types are few; bounded anyway.
_HOW: Dict[type, int] = {}
_HOW_LIMIT = 4096

_CapsuleType = type(datetime.datetime_CAPI)  # types.CapsuleType from Python 3.13
_exchange_one = _exchange.exchange
_exchange_first = _exchange.first


def from_dlpack(x: Any, /, *, device: Any = None, copy: Optional[bool] = None,
                stream: Optional[int] = None) -> Tensor:
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
        Where the result must live; None (default) keeps `x`'s device. The
        producer is asked first (it receives ``dl_device``, and ``copy``).
        When it refuses (BufferError, TypeError or NotImplementedError),
        dlpackshim does it itself where it can: host-accessible memory
        (pinned, managed) is put on ``(kDLCPU, 0)`` without a copy, and
        CUDA/ROCm device memory is copied to the host
        (``dlpackshim_copy`` on the stream below; needs ``copy`` True
        or None). Strings such as ``"cpu"`` are not accepted.
    copy : bool or None, optional
        True: the result owns a fresh copy: the producer's when it flags
        IS_COPIED, in the producer's layout (NumPy keeps the source's memory
        order: a copy of ``a.T`` is column-major), otherwise one made in C
        (compact row-major, 256-byte aligned on the host; new device memory
        for a GPU tensor that stays on its GPU). ``is_contiguous`` tells.
        False: never copy. None (default): copy only if needed.
    stream : int or None, optional
        The consumer's stream: where the data will be used (not part of the
        array API's ``from_dlpack``; CuPy-style). For a CUDA or ROCm
        producer it is checked (``dlpackshim_stream_check``: CUDA 1, 2, -1
        or a ``cudaStream_t``, not 0; ROCm 0, -1 or a ``hipStream_t``, not 1
        or 2) and passed on as ``x.__dlpack__(stream=...)``, which makes it
        wait for the producer's work; the Tensor records it as the stream
        its data is ready on (:attr:`Tensor.stream`), so its own exports and
        copies are ordered after it. None (default): the legacy default
        stream for CUDA, the default stream 0 for ROCm (nothing is passed,
        which the standard defines as the same). -1: no synchronisation
        (the caller orders the work itself). Producers on the CPU get no
        stream, and only None or -1 are accepted for them. For a
        ``__cuda_array_interface__`` object it is the stream made to wait
        for the interface's v3 ``stream``; for a capsule, which was made
        already, it is only recorded as the Tensor's stream.

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
        copy is set to False"), or `stream` is not allowed for the
        producer's device (it is checked before the producer is called).
    """
    # The public from_dlpack is the builtin below: it handles a type seen
    # before with no keyword in C and calls this function for the rest.
    return _from_dlpack_slow(x, device, copy, stream)


def _forget_if_stale(x: Any, how: int) -> None:
    """The call _HOW chose for type(x) raised TypeError or AttributeError
    (being handled by our caller): when the type changed since the answer was
    cached - its C table went away or no longer stands for its ``__dlpack__``
    (the C side checks its cached table on every use), or its ``__dlpack__``
    was deleted - forget the answer, so that the caller classifies `x` again
    (caches may speed things up, never change the answer). Otherwise the
    exception is the producer's: re-raise it."""
    if not _forget_stale(x, how):
        raise  # the exception being handled by our caller: the producer's own


def _forget_stale(x: Any, how: int) -> bool:
    """True, after forgetting the cached answer, when type(x) changed since
    `how` was cached for it (see _forget_if_stale); False otherwise. The C
    hot path (csrc/python/pyconsume.c) asks it when its call raised."""
    tp = type(x)
    if how == _EXCHANGE:
        stale = _exchange.probe(tp) != _exchange.PROBE_OK
    else:
        stale = not hasattr(tp, "__dlpack__")
    if stale and _HOW.get(tp) == how:
        del _HOW[tp]
    return stale


def _remember(tp: type, how: int) -> None:
    if len(_HOW) >= _HOW_LIMIT:
        _HOW.clear()
    _HOW[tp] = how


def _classify(x: Any, table_asked: bool = False) -> int:
    """How to import objects of type(x) (cached per type); `table_asked`:
    the caller already found type(x) has no usable exchange table."""
    tp = type(x)
    how = _HOW.get(tp)
    if how is not None:
        return how
    if tp is _CapsuleType:
        return _CAPSULE  # not cached by type: capsules are told apart by name in C
    if isinstance(x, type):
        # A class has its instances' attributes (numpy.ndarray's
        # __array_interface__ descriptor): say what was passed, cache nothing.
        raise NotArrayLikeError(
            f"from_dlpack: expected an array, got the class {x.__module__}.{x.__qualname__} "
            f"itself (a type); pass an instance of it")
    if not table_asked and hasattr(tp, "__dlpack_c_exchange_api__") and _exchange.usable(tp):
        _remember(tp, _EXCHANGE)
        return _EXCHANGE
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


def _from_dlpack_slow(x: Any, device: Any, copy: Any, stream: Any = None) -> Tensor:
    target: Optional[Device] = None if device is None else as_device(device, "device")
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, not {copy!r}")
    tp = type(x)
    table_asked = False
    if (target is None and stream is None and tp not in _HOW and _exchange.enabled
            and hasattr(tp, "__dlpack_c_exchange_api__")):
        # A new type with a C table: one C call asks whether the table is
        # usable and, when it is, imports through it (two crossings in all).
        got = _exchange_first(x)
        if not isinstance(got, int):
            _remember(tp, _EXCHANGE)
            return _place(got, None, copy, False)
        table_asked = True  # no usable table: a producer like any other
    how = _classify(x, table_asked) & ~_GPU_SEEN
    if how in (_VERSIONED, _MV_ONLY, _LEGACY) and not hasattr(type(x), "__dlpack__"):
        del _HOW[type(x)]  # deleted since cached: classify afresh
        how = _classify(x) & ~_GPU_SEEN
    copied = False  # the producer made a copy for us (IS_COPIED after copy=True)
    if how == _EXCHANGE and target is None and stream is None:
        try:
            t = _exchange_one(x)
        except TypeError:
            _forget_if_stale(x, _EXCHANGE)
            how = _classify(x)
        else:
            return _place(t, None, copy, False)
    if how == _EXCHANGE:
        how = _VERSIONED  # the producer's __dlpack__ can move data and honour a stream
    if how in (0, _VERSIONED, _MV_ONLY, _LEGACY):
        t, copied = _call_producer(x, how, target, copy, stream)
    elif how == _CAPSULE:
        t = _import_capsule(x)
        if stream is not None:  # made already: the stream can only be recorded
            try:
                s = _device.check_stream(t.device[0], stream)
                t._stream = _device.stream_or_none(t.device[0], s, t.device[1])
            except BaseException:
                t.close()
                raise
    elif how == _CUDA_IFACE:
        t = _buffer.from_cuda_array_interface(x, stream)
    else:
        _device.check_stream(_device.CPU, stream)
        t = _buffer.from_array_interface(x) if how == _ARRAY_IFACE else _buffer.from_buffer(x)
    return _place(t, target, copy, copied)


def _call_producer(x: Any, how: int, target: Optional[Device], copy: Optional[bool],
                   stream: Any = None) -> Tuple[Tensor, bool]:
    """Get a capsule from `x.__dlpack__` and import it.

    Asks for ``max_version=(1, 3)``, plus ``dl_device`` when `target` is not
    the producer's device and ``copy`` when given, plus ``stream`` (checked
    first) when given and the producer is a CUDA/ROCm device, but not with a
    ``dl_device`` of the CPU (a CPU consumer has no stream). On TypeError
    retries with fewer keywords (an older producer), and on BufferError or
    NotImplementedError for a ``dl_device`` imports the data as it is, but
    only when the shim can then honour `target` and `copy` itself; caches
    per type which call worked.

    Returns the Tensor (its stream recorded) and whether the producer made
    the copy asked for.
    """
    dl_device = None
    # Known up front, even without `device` or `stream`: a GPU producer gets
    # its device made current and the consumer's stream named (below).
    if target is not None or stream is not None:
        own: Optional[Device] = _producer_device(x)
    else:
        own = _advisory_device(x)
    if target is not None:
        if own != target:
            if copy is False and not _viewable(own, target):
                raise _copy_needed(own, target)
            dl_device = (int(target[0]), int(target[1]))
    sync: Dict[str, Any] = {}  # the stream keyword, for GPU producers only
    consumer = None
    gpu = own is not None and _device.has_streams(own[0])
    if stream is not None:
        consumer = _device.check_stream(own[0], stream)  # before the producer is called
        if gpu:
            sync["stream"] = stream
    elif gpu:
        # None means the legacy default stream (CUDA) / stream 0 (ROCm) to the
        # standard and to PyTorch >= 1.13, but "no synchronisation" to older
        # PyTorch: name it, so that every producer orders its work before it.
        consumer = _device.default_stream(own[0])
        sync["stream"] = consumer
    if gpu:
        tp = type(x)
        try:
            with _device.producer_device(own):
                return _call_producer_as(x, how, dl_device, copy, sync, consumer,
                                         _device.default_stream(own[0]))
        finally:
            if _HOW.get(tp, 0) != _EXCHANGE:
                _remember(tp, _HOW.get(tp, 0) | _GPU_SEEN)
    return _call_producer_as(x, how, dl_device, copy, sync, consumer)


def _call_producer_as(x: Any, how: int, dl_device: Any, copy: Optional[bool],
                      sync: Dict[str, Any], consumer: Optional[int],
                      default: Optional[int] = None) -> Tuple[Tensor, bool]:
    """The calls of :func:`_call_producer` once the keywords are settled."""
    if how == _LEGACY:
        return _with_stream(_import_capsule(x.__dlpack__(**sync)), sync, consumer, default), False
    kwargs: Dict[str, Any] = {"max_version": _MAX_VERSION}
    if how != _MV_ONLY:
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
    sent = sync if "dl_device" not in kwargs else {}  # a CPU consumer has no stream
    try:
        cap = x.__dlpack__(**kwargs, **sent)
    except TypeError as exc:
        # Only while probing a new type, or when keywords beyond max_version
        # are sent to a type so far called without them.
        if not (how == 0 or (how == _VERSIONED and len(kwargs) > 1)):
            raise
        cap, kwargs = _fallback(x, exc, kwargs, dl_device, copy, sync)
        sent = sync
    except (BufferError, NotImplementedError):
        # The producer cannot put the data on `target` (PyTorch raises
        # NotImplementedError, NumPy BufferError): take it as it is and copy
        # or relabel it ourselves (in _place), when that is possible.
        if dl_device is None or not _can_do_ourselves(x, dl_device, copy):
            raise
        if how == 0:
            _remember(type(x), _VERSIONED)  # it took the keywords
        kwargs = {"max_version": _MAX_VERSION}
        cap = x.__dlpack__(**kwargs, **sync)
        sent = sync
    else:
        if how == 0:
            _remember(type(x), _VERSIONED)
    t = _with_stream(_import_capsule(cap), sent, consumer, default)
    # Trust copy=True only when the producer says it copied (IS_COPIED): one
    # that ignores the keyword, or copies without saying so (PyTorch 2.13, or
    # any legacy capsule), gets copied again by _place, to be sure.
    return t, bool(copy) and "copy" in kwargs and t.is_copied


def _with_stream(t: Tensor, sent: Dict[str, Any], consumer: Optional[int],
                 default: Optional[int] = None) -> Tensor:
    """Record on `t` the stream the producer was asked to order its work before
    (`default`: the default stream of the device the producer stated)."""
    if sent and consumer is not None and consumer != -1 and consumer != default:
        # (A fresh Tensor already records the default; its device is read
        # only when needed: the first read costs microseconds.)
        dev = t.device
        if consumer != _device.default_stream(dev[0]):
            try:
                t._stream = _device.stream_or_none(dev[0], consumer, dev[1])
            except BaseException:
                t.close()
                raise
    return t


def _fallback(x: Any, exc: TypeError, kwargs: Dict[str, Any], dl_device: Any,
              copy: Optional[bool], sync: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """Retry a producer that rejected the 2023.12 keywords (``stream`` is
    older than them: it is passed on every try)."""
    if len(kwargs) > 1:
        # A producer that knows max_version but not dl_device/copy.
        try:
            cap = x.__dlpack__(max_version=_MAX_VERSION, **sync)
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
    cap = x.__dlpack__(**sync)
    _remember(type(x), _LEGACY)
    return cap, {}


def _can_do_ourselves(x: Any, dl_device: Any, copy: Optional[bool]) -> bool:
    """True when dlpackshim can honour `dl_device` and `copy` on the data as
    the producer has it: relabel host-accessible memory as (kDLCPU, 0), copy
    CUDA/ROCm memory to the host, copy any of those."""
    own = _producer_device(x)
    if dl_device is not None and tuple(dl_device) != tuple(own):
        if tuple(dl_device) != (_device.CPU, 0):
            return False
        if _device.is_on_device(own[0]):
            return copy is not False
        return _device.is_host_accessible(own[0])
    return not copy or _device.is_host_accessible(own[0]) or _device.is_on_device(own[0])


def _no_fallback(x: Any, exc: TypeError, dl_device: Any) -> BufferError:
    return BufferError(
        f"{type(x).__name__}.__dlpack__ does not take the DLPack 2023.12 keywords "
        f"({exc}), and dlpackshim cannot do what they ask itself "
        f"(dl_device={dl_device!r}): it moves data only between a GPU and the host"
    )


def _advisory_device(x: Any) -> Optional[Device]:
    """The producer's device when nothing was asked of it, or None: then its
    answer only decides whether the GPU handling of _call_producer applies,
    and a missing or broken ``__dlpack_device__`` leaves the import as it was
    (the capsule says where the data is)."""
    try:
        return _producer_device(x)
    except Exception as exc:  # noqa: BLE001 - advisory only; the capsule decides
        exc.__traceback__ = None  # a reused exception object must not keep our frames (and x)
        return None


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
        if tuple(target) == (_device.CPU, 0) and _device.is_on_device(own[0]):
            try:  # GPU memory to the host, on the Tensor's stream (waited for)
                return _host_copy(t)
            finally:
                t.close()
        t.close()
        raise BufferError(
            f"from_dlpack: cannot place data from {own!r} on {target!r}: dlpackshim moves "
            "data only from a GPU to the host (kDLCPU, 0), and the producer did not"
        )
    if copy and not copied:
        # The producer could not copy (legacy), or the data came from a
        # capsule, a buffer or an array interface: copy it ourselves.
        c = _clone(t)
        t.close()
        return c
    return t


_SIGNATURE = "from_dlpack(x, /, *, device=None, copy=None, stream=None)\n--\n\n"

#: The Python implementation above (named from_dlpack, so that its argument
#: errors name the public function).
_from_dlpack_py = from_dlpack

#: The public from_dlpack: a builtin the library makes (csrc/python/pyconsume.c) that
#: takes the plain cases of _from_dlpack_py's fast path in one C call (a
#: producer type seen before, a C exchange table, the buffer protocol, the
#: array interface) and calls _from_dlpack_py for everything else. Same
#: arguments, same documentation (the docstring above), same errors.
from_dlpack = pylib.dlpackshim__py_from_dlpack(  # noqa: F811
    (Tensor, _HOW, _from_dlpack_py, _MAX_VERSION,
     (_VERSIONED, _MV_ONLY, _LEGACY, _EXCHANGE, _BUFFER, _ARRAY_IFACE), _forget_stale),
    _SIGNATURE + inspect.cleandoc(_from_dlpack_py.__doc__ or ""),
)

_MANY_SIGNATURE = "from_dlpack_many(objs, /)\n--\n\n"

#: The public from_dlpack_many: a builtin sharing from_dlpack's state
#: (csrc/python/pyconsume.c) that converts a list or a tuple in one C call
#: while the exchange tables are on (``_exchange.enabled``, read on every
#: call), items without a table through the from_dlpack builtin, and calls
#: _exchange.from_dlpack_many for everything else. Same documentation.
if TYPE_CHECKING:
    from ._exchange import from_dlpack_many
else:
    from_dlpack_many = pylib.dlpackshim__py_from_dlpack_many(
        from_dlpack, (_exchange.from_dlpack_many, vars(_exchange)),
        _MANY_SIGNATURE + inspect.cleandoc(_exchange.from_dlpack_many.__doc__ or ""),
    )
