"""The library's functions dlpackshim.testing calls through ctypes (a
``ctypes.PyDLL`` handle on the library the package loaded: the GIL held
during the calls): ``dlpackshim_capsule_new``, whose capsule comes back
through a ``void **``, and the counted deleters (csrc/core/producer.c)."""

from __future__ import annotations

import ctypes
from typing import Any

from .._ffi import _loaded_as

pylib = ctypes.PyDLL(_loaded_as)   # the name it was loaded by: the same library, still
pylib.dlpackshim_capsule_new.argtypes = (ctypes.c_void_p, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_void_p))
pylib.dlpackshim_capsule_new.restype = ctypes.c_int
pylib.dlpackshim__counted_attach.argtypes = (ctypes.c_void_p, ctypes.c_int)
pylib.dlpackshim__counted_attach.restype = ctypes.c_void_p
pylib.dlpackshim__counted_calls.argtypes = (ctypes.c_void_p,)
pylib.dlpackshim__counted_calls.restype = ctypes.c_int64
pylib.dlpackshim__counted_free.argtypes = (ctypes.c_void_p,)
pylib.dlpackshim__counted_free.restype = None


def capsule_new(managed: int, versioned: int) -> Any:
    """``dlpackshim_capsule_new``: a capsule of the managed tensor at address
    `managed`; on failure the tensor stays the caller's. Returns a negative
    status in place of the capsule on failure."""
    out = ctypes.c_void_p()
    status = pylib.dlpackshim_capsule_new(managed, versioned, ctypes.byref(out))
    if status != 0:
        return status
    cap = ctypes.cast(out, ctypes.py_object).value  # a reference of our own ...
    ctypes.pythonapi.Py_DecRef(out)  # ... so the one the library handed over goes
    return cap
