"""The DLPack C exchange table (dlpack.h 1.3, ``__dlpack_c_exchange_api__``).

A producer type may carry, as the type attribute ``__dlpack_c_exchange_api__``,
a PyCapsule named ``"dlpack_exchange_api"`` pointing at a C table of
functions; a consumer calls them directly instead of ``__dlpack__``: no
capsule, no keyword parsing, no Python frame (tens of nanoseconds instead of
hundreds). Both sides are in C (csrc/python/exchange.c); this module wires them up:

* producer: :class:`dlpackshim.Tensor` gets the library's table at import,
  so C consumers (tvm-ffi, other languages through the C API, dlpackshim
  itself) exchange with it without a capsule;
* consumer: :func:`dlpackshim.from_dlpack` takes the C path for a type whose
  table is usable (a capsule of that name, a table of major version 1 found
  along ``prev_api``, a non-NULL ``managed_tensor_from_py_object_no_sync``),
  caching the table per type; :func:`from_dlpack_many` converts a whole
  sequence in one C call.

Set the environment variable ``DLPACKSHIM_DISABLE_EXCHANGE_API=1`` (read at
import and by :func:`_reset`) to make the consumer ignore every table and call
``__dlpack__`` as before; the producer table stays on the Tensor type.
"""

from __future__ import annotations

import os
import sys
from typing import Any, List, Sequence

from . import _consume  # a cycle (_consume imports this module): used at call time only
from ._ffi import pylib
from ._tensor import Tensor, _bound
from ._types import DTypeCode

#: The environment variable that turns the consumer side off.
ENV_DISABLE = "DLPACKSHIM_DISABLE_EXCHANGE_API"

#: exchange(x) -> Tensor through type(x)'s table (TypeError: no usable table).
#: exchange_many(list | tuple) -> list of Tensors, or (list, n, items) where n
#: items had no usable table (None in their places); items: the tuple of the
#: sequence's items it walked (a list is copied first).
#: probe(type) -> 1 when the type's table is usable; 0 no table, -1 not a
#: capsule, -2 no major version 1 along prev_api, -3 NULL entry, -4 the checks
#: to make before using it (_guard_for) could not be set up, -5 the type
#: overrides ``__dlpack__`` below the class carrying the table (the table
#: stands for another ``__dlpack__``). Cached per type; a cached usable table
#: is checked to be still the type's (same capsule, same ``__dlpack__``) on
#: every use.
#: _register(guard_for): the checks to run before a type's table is used.
#: forget(): empties the per-type cache.
#: All are bound to this package's Tensor class: they build Tensors of it.
exchange = _bound["_exchange"]
exchange_many = _bound["_exchange_many"]
probe = _bound["_exchange_probe"]
_register = _bound["_exchange_register"]
forget = _bound["_exchange_forget"]
#: first(x) -> Tensor, or an int (a probe's reason) when type(x) has no usable
#: table: a type's first sight asks and imports in one C call.
first = _bound["_exchange_first"]

#: Probe results (values of :func:`probe`).
PROBE_OK, PROBE_NONE, PROBE_NOT_CAPSULE, PROBE_VERSION, PROBE_NULL_ENTRY = 1, 0, -1, -2, -3
PROBE_GUARD, PROBE_OVERRIDDEN = -4, -5


def _env_disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "").strip().lower() not in ("", "0", "false", "no")


#: True unless DLPACKSHIM_DISABLE_EXCHANGE_API is set (see the module docstring).
enabled = not _env_disabled()


def _torch_guard(x: Any) -> None:
    """What ``torch.Tensor.__dlpack__`` refuses and PyTorch's C table lets
    through: its table exports conjugate and negative views raw (the values
    would silently be wrong) and tensors that require grad. C also asks it
    when the table fails, for the clearer message (a sparse tensor's
    layout, where the table says "Cannot access data pointer")."""
    if x.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if x.is_conj():
        raise BufferError("Can't export tensors with the conjugate bit set")
    if x.is_neg():
        raise BufferError("Can't export tensors with the negative bit set")
    if x.layout is not _torch_strided:
        raise BufferError(f"Can't export tensors with layout {x.layout}")


_torch_strided: Any = None


def _guard_for(tp: type) -> Any:
    """The check to run before `tp`'s table is used, or None (C asks once per type).

    NotImplemented for a torch.Tensor subclass with a ``__torch_function__``
    of its own: ``torch.Tensor.__dlpack__`` goes through it, PyTorch's table
    does not, so the table does not stand for that type's ``__dlpack__``
    (PROBE_OVERRIDDEN, on every route).

    For PyTorch: ``(_torch_guard, attributes, methods)``. C reads each
    attribute and calls each method named there and compares the result with
    the value beside it; only when one differs does it call ``_torch_guard``
    (which raises the error torch's ``__dlpack__`` would). That spares a
    Python frame and the attribute lookups in bytecode per tensor. Each
    check costs 60-110 ns of PyTorch's own code, so only those the table
    would not make are listed: a conjugate bit exists only on complex
    tensors (PyTorch asserts it), so ``is_conj`` waits for the export's
    dtype (a third item, the ``DLDataTypeCode`` it applies to); a layout
    other than strided makes the table fail (no storage), and the failure
    asks ``_torch_guard`` for its message.
    """
    global _torch_strided
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if isinstance(tensor, type) and isinstance(tp, type) and issubclass(tp, tensor):
        if _own_torch_function(tp, tensor):
            # torch.Tensor.__dlpack__ hands a subclass's tensors to its
            # __torch_function__, which may do anything; the table skips it.
            return NotImplemented
        _torch_strided = torch.strided
        return (_torch_guard,
                (("requires_grad", False),),
                (("is_neg", False), ("is_conj", False, int(DTypeCode.kDLComplex))))
    return None


def _own_torch_function(tp: type, tensor: type) -> bool:
    """True when `tp` (a torch.Tensor subclass) or a class between it and
    torch.Tensor defines a __torch_function__ other than the one that turns
    the mechanism off (``torch._C._disabled_torch_function_impl``)."""
    disabled = getattr(sys.modules["torch"]._C, "_disabled_torch_function_impl", None)
    for klass in tp.__mro__:
        if klass is tensor:
            return False
        f = klass.__dict__.get("__torch_function__")
        if f is not None:
            return getattr(f, "__func__", f) is not disabled
    return False


_register(_guard_for)
#: The library's own table, as the capsule C consumers look for on the type.
API_CAPSULE = pylib.dlpackshim__exchange_api_capsule()
Tensor.__dlpack_c_exchange_api__ = API_CAPSULE  # type: ignore[attr-defined]


def usable(tp: type) -> bool:
    """True when from_dlpack takes the C exchange path for objects of type `tp`."""
    return enabled and probe(tp) == PROBE_OK


def from_dlpack_many(objs: Sequence[Any], /) -> List[Tensor]:
    """Import every object of `objs` as by :func:`dlpackshim.from_dlpack`, in one C call.

    Objects whose type carries a usable ``__dlpack_c_exchange_api__`` are
    converted through it without returning to Python; the others go through
    :func:`dlpackshim.from_dlpack` one by one.

    Parameters
    ----------
    objs : sequence
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
        What :func:`dlpackshim.from_dlpack` or the producer's table raises
        for the first object that fails; Tensors made before it are released.
    """
    # The public from_dlpack_many is a builtin the library makes
    # (csrc/python/pyconsume.c; dlpackshim/_consume.py makes it): it converts
    # a list or a tuple through the tables in one C call, and calls this
    # function for the rest, which comes back to it as a tuple.
    objs = tuple(objs)
    if enabled:
        return _consume.from_dlpack_many(objs)
    from_dlpack = _consume.from_dlpack
    return [from_dlpack(x) for x in objs]


def _reset() -> None:
    """Re-read the environment variable and forget every cached table (tests)."""
    global enabled
    enabled = not _env_disabled()
    forget()
    _consume._HOW.clear()
