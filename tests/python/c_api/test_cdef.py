"""The cffi declarations are derived from the header, never kept by hand:
the generated dlpackshim/_cdef.py (cffi's out-of-line ABI mode: parsed once,
when generated) must be what csrc/gen_cdef.py makes of csrc/dlpackshim.h
today, and it must describe the library that loaded. Nothing parses C
declarations when the package is imported or used."""

import importlib.util
import os
import re

import pytest

import dlpackshim
from dlpackshim import _cdef, _ffi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GEN = os.path.join(ROOT, "csrc", "gen_cdef.py")
HEADER = os.path.join(ROOT, "csrc", "dlpackshim.h")


def _generator():
    if not (os.path.exists(GEN) and os.path.exists(HEADER)):
        pytest.skip("no source tree here (an installed package): the header is not shipped")
    spec = importlib.util.spec_from_file_location("gen_cdef", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_cdef_is_current():
    gen = _generator()
    import cffi
    if cffi.__version__ != _cdef.CFFI_VERSION:  # its encoding is cffi's own
        pytest.skip(f"_cdef.py was generated with cffi {_cdef.CFFI_VERSION}, this is "
                    f"{cffi.__version__}: the text may differ")
    with open(HEADER, encoding="utf-8") as f:
        wanted = gen.render(f.read())
    with open(_cdef.__file__, encoding="utf-8") as f:
        current = f.read()
    assert current == wanted, "dlpackshim/_cdef.py is stale: run `python3 csrc/gen_cdef.py`"


def test_importing_the_package_parses_no_c():
    """Out-of-line ABI mode: pycparser (and cffi's Python part) is never
    imported, so no import or call waits on its parser's lock (a Ctrl-C
    inside it once hung every later read of a Tensor's metadata)."""
    from conftest import run_python
    r = run_python("-c", "import sys, dlpackshim as ds\n"
                   "t = ds.from_dlpack(bytearray(8)); t.shape, t.strides, t.nbytes, t.c_contiguous\n"
                   "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cffi', 'pycparser')))")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


#: Modules `import dlpackshim` must not load (issue 32: an import that costs
#: nothing; docs/benchmarks.md "Import time"): a C parser, cffi's Python part,
#: and the standard library's costlier modules, which the package uses only
#: for type checkers (typing), for dlpackshim.testing (ctypes), or not at all.
NOT_IMPORTED = ("pycparser", "cffi", "typing", "ctypes", "re", "sysconfig", "inspect",
                "dataclasses", "importlib.metadata")


def test_importing_the_package_loads_no_costly_module():
    """What `import dlpackshim` adds to sys.modules (what the interpreter's
    start loaded before, a site hook's, is not the package's doing)."""
    from conftest import run_python
    r = run_python("-c", "import sys\n"
                   "before = set(sys.modules)\n"
                   "import dlpackshim\n"
                   "print(sorted(set(sys.modules) - before))")
    assert r.returncode == 0, r.stderr
    added = eval(r.stdout)
    assert "dlpackshim._ffi" in added
    costly = [m for m in added if m in NOT_IMPORTED or m.split(".")[0] in NOT_IMPORTED]
    assert costly == [], added


def test_every_public_function_resolves_in_the_loaded_library():
    gen = _generator()
    with open(HEADER, encoding="utf-8") as f:
        text = gen.cdef_of(f.read())
    names = set()
    for decl in text.split(";"):
        decl = " ".join(decl.split())
        if "(" in decl and not decl.startswith("typedef") and "{" not in decl:
            name = decl.split("(")[0].split()[-1].lstrip("*")
            if name.startswith("dlpackshim_"):
                names.add(name)
    assert "dlpackshim_tensor_new" in names and len(names) > 40
    for name in sorted(names):
        assert getattr(_ffi.lib, name) is not None, name


REMOVED_IN_2_0 = ("dlpackshim_capsule_consume", "dlpackshim_owner_tensor", "dlpackshim_owner_info",
                  "dlpackshim_tensor_is_contiguous", "dlpackshim_device_copy",
                  "dlpackshim_stream_sync", "dlpackshim_capsule_export",
                  "dlpackshim_capsule_export_copy", "dlpackshim_buffer_address",
                  "dlpackshim_exchange_api_capsule", "dlpackshim_exchange_import",
                  "dlpackshim_counted_attach", "dlpackshim_counted_calls",
                  "dlpackshim_counted_free")


def test_cdef_has_no_private_or_removed_names():
    """The header (and so the cdef) declares the public API only: the
    package's private entry points (dlpackshim__*) are loaded by name in
    _ffi, and the names the 2.0 API removed are gone from both."""
    gen = _generator()
    with open(HEADER, encoding="utf-8") as f:
        cdef = gen.cdef_of(f.read())
    assert "dlpackshim__" not in cdef
    for name in REMOVED_IN_2_0:
        assert not re.search(r"\b%s\b" % name, cdef), name
        with pytest.raises(AttributeError):
            getattr(_ffi.lib, name)
    for name in ("dlpackshim_capsule_import", "dlpackshim_capsule_info",
                 "dlpackshim_stream_wait"):
        assert re.search(r"\bint %s\(" % name, cdef), name


def test_constants_come_from_the_header():
    assert _ffi.lib.DLPACKSHIM_FLAG_READ_ONLY == _ffi.FLAG_READ_ONLY == 1
    assert _ffi.lib.DLPACKSHIM_ERR_PYTHON == -13
    assert _ffi.ffi.sizeof("DLManagedTensorVersioned") == 80
    assert _ffi.ffi.offsetof("DLManagedTensorVersioned", "dl_tensor") == 32
