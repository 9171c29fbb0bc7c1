"""The one binding of libdlpackshim: the loader, cffi over the generated cdef.

cffi in ABI mode (``ffi.dlopen``) calls the public C functions. The package's
own entry points (``dlpackshim__*``, declared by csrc/python/binding.h and
csrc/core/internal.h, not by the public header the cdef comes from) are
loaded by name through cffi's backend. Those of csrc/python/module.c return
new Python objects, which ABI-mode cffi cannot return, and need the GIL,
which it drops: ``dlpackshim__py_entry_points`` hands them over as builtins
(:func:`py_base`, :data:`py_tensor_class`, :data:`py_bind`), which raise
the exception the C code set. Everything else the package calls in C is a
builtin those made. No ctypes on the way (its import was ~1.5 ms of the
package's); :mod:`dlpackshim.testing` binds what it needs with ctypes itself
(``dlpackshim/testing/_lib.py``).

Python objects are passed to C as ``id(obj)`` in an ``intptr_t`` (the
address, in CPython); the caller keeps the object alive for the call.

Where the library is looked for, in order, is :func:`_candidates`
(docs/install.md, "How the package finds the library"); which interpreters
are refused, and why, is :func:`_unsupported_interpreter`.
"""

from __future__ import annotations

import atexit
import os
import stat
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

#: The oldest CPython supported (pyproject.toml's requires-python tells pip the same).
OLDEST_PYTHON = (3, 11)


def _unsupported_interpreter() -> Optional[str]:
    """Why this interpreter cannot run dlpackshim, or None when it can."""
    name = sys.implementation.name
    oldest = "%d.%d" % OLDEST_PYTHON
    if name != "cpython":
        return (f"dlpackshim supports CPython only, not {name}: its C library calls the "
                "CPython C API by name and takes id(obj) as an object's address, and neither "
                f"holds on {name} (PyPy's cpyext exports PyPy-prefixed names; its id() is not "
                f"an address). Use CPython {oldest} or newer.")
    if sys.version_info < OLDEST_PYTHON:
        return (f"dlpackshim needs CPython {oldest} or newer, not {sys.version.split()[0]}: "
                f"its C library uses CPython's stable ABI as of {oldest} (the buffer protocol "
                "among it)")
    # A free-threaded build (Py_GIL_DISABLED, CPython 3.13 and later) has the
    # "t" ABI flag (PEP 703); sysconfig, which says the same, would cost the
    # import 0.8-2 ms (its data module, and threading on 3.13).
    if "t" in getattr(sys, "abiflags", ""):
        return ("dlpackshim does not support free-threaded CPython (this interpreter was built "
                "with Py_GIL_DISABLED): its C library relies on the GIL to serialize its "
                "process-wide caches, which would race without it. Use a standard (GIL) build "
                f"of CPython {oldest} or newer, e.g. python3.14 rather than python3.14t; "
                "docs/install.md says what support would take.")
    return None


_why_not = _unsupported_interpreter()
if _why_not is not None:
    raise ImportError(_why_not)

# After the interpreter check: PyPy ships its own cffi. The header's
# declarations come parsed (cffi's out-of-line ABI mode, csrc/gen_cdef.py):
# nothing is parsed at import or at run time.
import _cffi_backend  # type: ignore[import-untyped]  # noqa: E402

from ._cdef import ffi  # noqa: E402

#: The name of the environment variable that overrides the search.
ENV_VAR = "DLPACKSHIM_LIBRARY"
#: The file name of the bundled and of the installed library (its SONAME).
SONAME = "libdlpackshim.so.2"
#: A function every libdlpackshim exports; a file without it is another library.
_PROBE = "dlpackshim_version_string"
#: The package's private entry points that it calls through cffi, with their C
#: types (the cdef declares the public API only).
_PRIVATE = {
    "dlpackshim__binding_revision": "int(*)(void)",    # csrc/python/module.c
    "dlpackshim__py_entry_points": "int(*)(void *)",   # csrc/python/module.c
    "dlpackshim__py_at_exit": "void(*)(void)",         # csrc/python/pyapi.c
    "dlpackshim__host_accessible": "int(*)(int32_t)",  # csrc/core/validate.c
}

_HERE = os.path.dirname(os.path.abspath(__file__))
#: The source tree this package sits in, if it does (configure.ac beside it).
_SOURCE_TREE = os.path.dirname(_HERE)
if not os.path.isfile(os.path.join(_SOURCE_TREE, "configure.ac")):
    _SOURCE_TREE = None


def _candidates() -> List[str]:
    """The paths :func:`_load` tries, in order: ``$DLPACKSHIM_LIBRARY`` alone
    when set; else the copy bundled in the package and, in a source tree,
    the one ``make`` built (first when it is the newer file, so that an
    editable install never shadows later builds); then the installed
    library, by the dynamic loader's own search."""
    override = os.environ.get(ENV_VAR)
    if override:
        return [override]
    paths = [os.path.join(_HERE, SONAME)]
    if _SOURCE_TREE is not None:
        built = os.path.join(_SOURCE_TREE, "csrc", ".libs", SONAME)
        paths.insert(1 if _mtime(paths[0]) >= _mtime(built) else 0, built)
    paths.append(SONAME)
    return paths


def _mtime(path: str) -> float:
    """When `path` (or what a link names) was last written; -1 if it is not there."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -1.0


def _advice() -> str:
    """What to do when nothing loaded: a remedy that works in this situation."""
    override = os.environ.get(ENV_VAR)
    if override:
        return (f"{ENV_VAR} is set, so it was the only candidate: point it at a built "
                f"libdlpackshim.so (e.g. csrc/.libs/libdlpackshim.so after `make`), "
                f"or unset it to use the library bundled with the package.")
    if _SOURCE_TREE is not None:
        return (f"This dlpackshim package is the source tree {_SOURCE_TREE}, and no "
                f"library has been built there. Build it in place with `make` (after "
                f"`autoreconf -fi && ./configure`) or `pip install -e .`; or, if you "
                f"installed dlpackshim with pip, run Python from outside the source tree "
                f"(its dlpackshim/ folder shadows the installed package).")
    if not os.path.isdir(_HERE):
        return (f"The package is imported from inside an archive ({_HERE}): the dynamic "
                f"loader opens only real files, so dlpackshim cannot run from a zip file or "
                f"a zipapp. Install it as files (`pip install dlpackshim-*.whl`), or set "
                f"{ENV_VAR} to the path of libdlpackshim.so.")
    bundled = os.path.join(_HERE, SONAME)
    return (("The library bundled with the package did not load (above)" if os.path.exists(bundled)
             else "The installed package has no library bundled")
            + ". Reinstall it from the wheel "
            "(`pip install --force-reinstall dlpackshim-*.whl`, docs/install.md), or build "
            "and install the C library (`make install`), or set "
            f"{ENV_VAR} to the path of libdlpackshim.so.")


def _load() -> Tuple[Any, Any, Dict[str, Any], str]:
    """Load libdlpackshim with cffi.

    Returns
    -------
    (ffi, lib, private, path)
        The cffi FFI, the cffi library, the private entry points of
        ``_PRIVATE`` by name (cffi function pointers into the same library),
        and the path that loaded.

    Raises
    ------
    OSError
        No candidate loaded; the message lists each path with its error,
        then says what to do.
    """
    tried = []
    for path in _candidates():
        # dlopen of a FIFO waits for a writer, forever: a path must name a
        # regular file (or a link to one). A bare name is the loader's search.
        if os.sep in path:
            try:
                mode = os.stat(path).st_mode
            except OSError:
                mode = None  # missing or unreadable: dlopen says why
            if mode is not None and not stat.S_ISREG(mode):
                tried.append(f"  {path}: not a regular file (nor a link to one); not opened")
                continue
        try:
            lib = ffi.dlopen(path)
        except OSError as exc:
            # cffi's "cannot load library '<path>': <dlerror()>": the path is
            # on the line already.
            reason = str(exc)
            prefix = f"cannot load library '{path}': "
            tried.append(f"  {path}: {reason[len(prefix):] if reason.startswith(prefix) else reason}")
            continue
        handle = None
        try:
            getattr(lib, _PROBE)
            # The same file again through cffi's backend (what cffi's in-line
            # ABI mode dlopens with): dlopen hands back the same handle, so
            # both share one copy of the library (and its thread-locals).
            handle = _cffi_backend.load_library(path)
            private = {name: handle.load_function(ffi.typeof(ctype), name)
                       for name, ctype in _PRIVATE.items()}
            # Another build of the same version may speak another contract
            # (it misread this package's calls at the first Tensor).
            revision = private["dlpackshim__binding_revision"]()
            if revision != lib.DLPACKSHIM_BINDING_REVISION:
                raise LookupError(f"its binding revision is {revision}, this package's "
                                  f"{lib.DLPACKSHIM_BINDING_REVISION}")
        except (AttributeError, ffi.error, LookupError) as exc:  # out-of-line cffi: ffi.error
            try:  # a libdlpackshim all the same: another build (an older `make install`)
                other = ffi.string(lib.dlpackshim_version_string()).decode("ascii")
                if not other.isprintable():
                    raise ValueError(other)
            except Exception:  # no such function, or one that gives NULL or no text
                tried.append(f"  {path}: loads, but is not libdlpackshim ({exc})")
            else:
                tried.append(f"  {path}: libdlpackshim {other}, but not the build this package "
                             f"needs, from other sources ({exc}); rebuild or reinstall it")
            # Unloaded: left loaded, it would answer the next candidate's
            # search by name (libdlpackshim.so.2, its SONAME too).
            if handle is not None:
                handle.close_lib()
            ffi.dlclose(lib)
            continue
        return ffi, lib, private, path
    raise OSError(
        "dlpackshim: cannot load libdlpackshim; tried, in order:\n"
        + "\n".join(tried)
        + "\n"
        + _advice()
    )


def _mapped_file(path: str) -> str:
    """The file `path` names once loaded: the dynamic loader's search made
    a bare name into a file, which /proc/self/maps shows holding the
    library's code (Linux); `path` itself when it is not bare or not found."""
    if os.sep in path:
        return path
    deleted = " (deleted)"  # what the kernel appends to a file removed since
    address = int(ffi.cast("uintptr_t", ffi.addressof(lib, _PROBE)))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(None, 5)  # range perms offset dev inode path
                lo, _, hi = fields[0].partition("-")
                if len(fields) == 6 and int(lo, 16) <= address < int(hi, 16):
                    return path if fields[5].endswith(deleted) else fields[5]
    except (OSError, ValueError):
        pass
    return path


ffi, lib, _private, _loaded_as = _load()
# After a search by name, the file found (docs/gen_python_api.py documents it);
# to open the same library again, _loaded_as (the file may be gone or replaced
# since: the loader matches the name it loaded by to what it loaded).
library_path = _mapped_file(_loaded_as)


def _entry_points() -> Dict[str, Any]:
    """The entry points of csrc/python/module.c as builtins: the C side takes
    the GIL and fills the dict it is given the address of."""
    out: Dict[str, Any] = {}
    if _private["dlpackshim__py_entry_points"](ffi.cast("void *", id(out))) != 0:
        raise ImportError("dlpackshim: " + ffi.string(lib.dlpackshim_last_error()).decode())
    return out


_entry = _entry_points()


def py_base(doc: str) -> Any:
    """The C base type of dlpackshim.Tensor (``__dlpack__``'s docstring
    given); ImportError outside the main interpreter. Only then is the
    library told of interpreter shutdown, from which on deleters running on
    other threads must not take the GIL (CPython 3.11 and 3.12 have no
    stable-ABI Py_IsFinalizing to tell; csrc/python/pyapi.c, shim_py_alive):
    a cffi function left in a subinterpreter's atexit list hangs CPython
    3.11's exit."""
    base = _entry["base"](doc)
    atexit.register(_at_exit)
    return base


def _at_exit() -> None:
    """Tells the library the interpreter exits: when the exit itself runs
    the atexit functions (no Python frame below, or threading's shutdown
    begun: a handler running them again inside the exit). Run by hand from
    Python (``atexit._run_exitfuncs()``), they are no exit: Python goes on,
    and so must other threads' releases (3.11 and 3.12 leaked every export
    they freed from then on). CPython drops every handler then, this one
    too: at the real exit 3.11 and 3.12 tell finalization by
    ``Py_IsInitialized`` alone."""
    try:
        sys._getframe(1)
    except ValueError:
        pass
    else:
        threading = sys.modules.get("threading")
        if threading is None or not getattr(threading, "_SHUTTING_DOWN", True):
            return
    _private["dlpackshim__py_at_exit"]()


#: py_tensor_class(cls): the class Tensors are made of (cls with the base's deallocation).
py_tensor_class = _entry["tensor_class"]
#: py_bind(config): binds the package's objects to the library; returns its builtins.
py_bind = _entry["bind"]
#: The C library's host-accessible rule (csrc/core/validate.c), for an int32 device type.
host_accessible = _private["dlpackshim__host_accessible"]

# DLManagedTensorVersioned.flags bits (dlpackshim_flag, from the header).
FLAG_READ_ONLY = lib.DLPACKSHIM_FLAG_READ_ONLY
FLAG_IS_COPIED = lib.DLPACKSHIM_FLAG_IS_COPIED
FLAG_IS_SUBBYTE_TYPE_PADDED = lib.DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED


def library_version() -> str:
    """The C library's version string, e.g. ``"0.1.0"``."""
    return ffi.string(lib.dlpackshim_version_string()).decode("ascii")


def dlpack_version() -> Tuple[int, int]:
    """The DLPack version the C library implements, e.g. ``(1, 3)``."""
    major = ffi.new("uint32_t *")
    minor = ffi.new("uint32_t *")
    lib.dlpackshim_dlpack_version(major, minor)
    return int(major[0]), int(minor[0])
