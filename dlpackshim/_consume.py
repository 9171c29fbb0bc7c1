"""from_dlpack and from_dlpack_many: the library bound to the package.

Both are builtins the C library makes (csrc/python/consume.c): one function
decides how to import an object, from top to bottom, and places the result.
This module gives the library what only the package knows (its Tensor class,
its exceptions, the checks PyTorch's exchange table skips) and the
functions' documentation, and sets the Tensor's own exchange table.

``DLPACKSHIM_DISABLE_EXCHANGE_API=1`` (read at import) makes from_dlpack
ignore other types' C exchange tables and call ``__dlpack__``.
"""

from __future__ import annotations

import os
import sys

from . import _errors
from ._ffi import py_bind
from ._tensor import Tensor, _read_meta
from ._types import DeviceType, DTypeCode

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Iterable, List, Optional

#: The environment variable that turns the use of other types' tables off.
ENV_DISABLE = "DLPACKSHIM_DISABLE_EXCHANGE_API"


if TYPE_CHECKING:  # the runtime functions are the library's builtins, bound below
    def from_dlpack(x: Any, /, *, device: Any = None, copy: Optional[bool] = None,
                    stream: Optional[int] = None) -> Tensor: ...

    def from_dlpack_many(objs: Iterable[Any], /) -> List[Tensor]: ...


FROM_DLPACK_DOC = """from_dlpack(x, /, *, device=None, copy=None, stream=None)
--

Import `x` as a :class:`dlpackshim.Tensor` (array API ``from_dlpack``).

Parameters
----------
x : object
    Tried in this order: a DLPack PyCapsule (``"dltensor_versioned"`` or
    ``"dltensor"``; it is consumed); a :class:`dlpackshim.Tensor` (the
    new one shares its memory); an object with ``__dlpack__`` and
    ``__dlpack_device__`` (DLPack 1.x or a legacy producer; through its
    type's C exchange table, ``__dlpack_c_exchange_api__``, when it has a
    usable one and neither `device` nor `stream` is given); the buffer
    protocol (bytes, bytearray, memoryview, array.array, mmap, ctypes
    arrays, ...; NumPy too asks it before the array interfaces); an
    object with ``__cuda_array_interface__`` (v2/v3) or
    ``__array_interface__`` (v3).
device : Device, (device_type, device_id) tuple, DeviceType or None, optional
    Where the result must live; None (default) keeps `x`'s device. The
    producer is asked first (it receives ``dl_device``, and ``copy``).
    When it refuses (BufferError, TypeError or NotImplementedError),
    dlpackshim does it itself where it can: host-accessible memory
    (pinned, managed) is put on ``(kDLCPU, 0)`` without a copy, once the
    GPU work queued on it is done, and CUDA/ROCm device memory is copied
    to the host (needs ``copy`` True or None). Strings such as ``"cpu"``
    are not accepted.
copy : bool or None, optional
    True: the result owns a fresh copy (IS_COPIED): the producer's when
    it flags IS_COPIED, in the producer's layout (NumPy keeps the
    source's memory order: a copy of ``a.T`` is column-major), otherwise
    one made in C (compact row-major, 256-byte aligned on the host; new
    memory of the same GPU for a GPU tensor that stays there; host
    memory, ``(kDLCPU, 0)``, for pinned or managed memory, so a `device`
    naming their own device is refused). A producer refusing ``copy``
    (BufferError, NotImplementedError) is asked again without it.
    ``is_contiguous`` tells. False: never copy. None (default): copy
    only if needed.
stream : int or None, optional
    The consumer's stream: where the data will be used (not part of the
    array API's ``from_dlpack``; CuPy-style). It is checked before the
    producer runs (CUDA 1, 2, -1 or a ``cudaStream_t``, not 0; ROCm 0,
    -1 or a ``hipStream_t``, not 1 or 2; CPU data None or -1) and passed
    on as ``x.__dlpack__(stream=...)``, which makes it wait for the
    producer's work; the Tensor records it as the stream its data is
    ready on (:attr:`Tensor.stream`). With `device` or `stream` given, a
    GPU producer's device is made current around its ``__dlpack__`` and
    None names its default stream (1 for CUDA, 0 for ROCm) explicitly;
    without them nothing is passed, which the standard defines as the
    default stream. For a ``__cuda_array_interface__`` object it is the
    stream made to wait for the interface's v3 ``stream``; for a
    capsule, made already, it is only checked and recorded.

Returns
-------
Tensor
    Zero-copy when possible; it keeps `x`'s memory alive. Read-only
    data gives a read-only Tensor, and so does a legacy capsule, which
    carries no flags: its writability is unknown (NumPy >= 2.3 does the
    same).

Raises
------
TypeError
    `x` is none of the kinds above (:class:`dlpackshim.NotArrayLikeError`,
    also an AttributeError, the standard's error for "no ``__dlpack__``"),
    or `device`, `copy` or `stream` has the wrong type.
BufferError
    The producer cannot export (propagated as it is), the capsule is
    used, invalid, or of a newer major version (its deleter is called),
    or `device` is one neither the producer nor dlpackshim can place
    data on (array API 2024.12: "If the array library does not support
    such cases at all, the function must raise BufferError"; a producer
    that refuses `dl_device` with exactly RuntimeError or
    NotImplementedError, as JAX and PyTorch do, gets BufferError, its
    refusal the ``__cause__``), pinned or managed memory's own device with
    ``copy=True`` included, whatever `copy` says; or, with ``copy=False``,
    the producer's export is a copy all the same (IS_COPIED).
ValueError
    ``copy=False`` but a copy is needed (array API 2024.12, Raises:
    "ValueError - If data exchange is possible via an explicit copy but
    copy is set to False"), or `stream` is not allowed for the data's
    device.
"""

FROM_DLPACK_MANY_DOC = """from_dlpack_many(objs, /)
--

Import every object of `objs` as :func:`dlpackshim.from_dlpack` does, in one call.

Parameters
----------
objs : iterable
    A list, tuple or any other iterable. It is copied first (producers
    run Python code that may change a list): the result describes the
    items `objs` held when the call began.

Returns
-------
list of Tensor
    In the order of `objs`.

Raises
------
Exception
    What :func:`dlpackshim.from_dlpack` raises for the first object, in
    order, that fails; the Tensors made before it are released.
"""


# ---- what PyTorch's table skips -------------------------------------------------

def _torch_guard(x: Any) -> None:
    """What ``torch.Tensor.__dlpack__`` refuses and PyTorch's C table lets
    through: conjugate and negative views (exported raw, the values would
    silently be wrong) and tensors that require grad. C also asks it when
    the table fails, for the clearer message (a sparse tensor's layout,
    where the table says "Cannot access data pointer")."""
    if x.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if x.is_conj():
        raise BufferError("Can't export tensors with the conjugate bit set")
    if x.is_neg():
        raise BufferError("Can't export tensors with the negative bit set")
    if x.layout is not sys.modules["torch"].strided:
        raise BufferError(f"Can't export tensors with layout {x.layout}")


def _guard_for(tp: type) -> Any:
    """The checks to make before `tp`'s exchange table is used.

    None: none. NotImplemented for a torch.Tensor subclass with a
    ``__torch_function__`` of its own: ``torch.Tensor.__dlpack__`` goes
    through it, PyTorch's table does not, so the table does not stand for
    that type's ``__dlpack__``. For PyTorch: ``(_torch_guard, checks)``,
    each check ``(name, expected, call, code)``: C reads ``x.name`` (calls
    ``x.name()`` when `call`) and compares it with `expected`, before the
    export (`code` -1) or after it when the export's dtype code is `code`
    (a conjugate bit exists on complex tensors only); only when one differs
    does it call ``_torch_guard``, which raises torch's own error. A third
    item False (a subclass: the answer read its classes, which may change)
    tells C not to remember the answer for the type. That
    spares a Python frame per tensor; each check costs 60-110 ns of
    PyTorch's own code.
    """
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if not (isinstance(tensor, type) and isinstance(tp, type) and issubclass(tp, tensor)):
        return None
    disabled = getattr(getattr(torch, "_C", None), "_disabled_torch_function_impl", None)
    for klass in tp.__mro__:
        if klass is tensor:
            break
        f = klass.__dict__.get("__torch_function__")
        if f is not None and getattr(f, "__func__", f) is not disabled:
            return NotImplemented
    # An answer read from a subclass's classes (they may change) is not remembered.
    return (_torch_guard, _TORCH_CHECKS) + (() if tp is tensor else (False,))


_TORCH_CHECKS = (("requires_grad", False, False, -1), ("is_neg", False, True, -1),
                 ("is_conj", False, True, int(DTypeCode.kDLComplex)))


# ---- binding ---------------------------------------------------------------------

def _tables_disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "").strip().lower() not in ("", "0", "false", "no")


_builtins = py_bind({
    "Tensor": Tensor,
    "NotArrayLikeError": _errors.NotArrayLikeError,
    "DeviceType": DeviceType,
    "guard_for": _guard_for,
    "read_meta": _read_meta,
    "exceptions": _errors.STATUS_TO_EXCEPTION,
    "from_dlpack_doc": FROM_DLPACK_DOC,
    "from_dlpack_many_doc": FROM_DLPACK_MANY_DOC,
})
#: _configure(use_tables, memo[, guard_for]): the consumer's switches (tests, benchmarks).
_configure = _builtins["_configure"]
_configure(not _tables_disabled(), True)
Tensor.__dlpack_c_exchange_api__ = _builtins["exchange_api"]  # type: ignore[attr-defined]

if not TYPE_CHECKING:
    from_dlpack = _builtins["from_dlpack"]
    from_dlpack_many = _builtins["from_dlpack_many"]
