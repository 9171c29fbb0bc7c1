"""Build dlpackshim: the pure-Python package plus its C library.

The metadata lives in pyproject.toml; this file only compiles the C library
with the system C compiler (no Extension objects: the wheel carries no CPython
extension module) and puts it inside the package as
dlpackshim/libdlpackshim.so.2, where dlpackshim._ffi looks for it after
$DLPACKSHIM_LIBRARY.

The wheel is tagged cp311-abi3-<platform>: specific to the platform (it holds a
native library), valid for every CPython from 3.11 on (the library binds only
stable-ABI functions of CPython, by name, at run time, and links no
libpython), and not installable on PyPy, which cannot run it (see
dlpackshim/_ffi.py). `make wheel` builds the manylinux wheel (docs/install.md).

    pip install .                        # isolated build (fetches setuptools)
    pip install -e .                     # editable: the library is built in place
    pip install --no-build-isolation .   # offline: needs setuptools >= 77 at hand
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sysconfig

import setuptools
from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore
    except ImportError:  # no wheels from here (pip's build uses pyproject's setuptools)
        bdist_wheel = None  # type: ignore

HERE = os.path.dirname(os.path.abspath(__file__))
#: The oldest CPython the wheel is for (its abi3 tag); pyproject's requires-python.
ABI3_FROM = "cp311"


def _version() -> str:
    """The version, from configure.ac's AC_INIT (its one source).

    dlpackshim/__init__.py repeats it as a literal (the package must know its
    version without metadata, run from a source tree); a build refuses a
    mismatch, so the two cannot drift apart.
    """
    with open(os.path.join(HERE, "configure.ac"), encoding="utf-8") as f:
        match = re.search(r"AC_INIT\(\[dlpackshim\],\s*\[([^\]]+)\]", f.read())
    if match is None:
        raise RuntimeError("setup.py: no AC_INIT version in configure.ac")
    version = match.group(1)
    with open(os.path.join(HERE, "dlpackshim", "__init__.py"), encoding="utf-8") as f:
        pkg = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if pkg is None or pkg.group(1) != version:
        raise RuntimeError(f"setup.py: dlpackshim/__init__.py's __version__ is not "
                           f"configure.ac's {version!r}")
    return version


def _soname() -> str:
    """libdlpackshim.so.(C - A), from configure.ac's libtool version-info C:R:A
    (its one source), as libtool names it; dlpackshim/_ffi.py's SONAME must
    agree (the package looks for that file name), or the build refuses."""
    with open(os.path.join(HERE, "configure.ac"), encoding="utf-8") as f:
        match = re.search(r"DLPACKSHIM_LT_VERSION\],\s*\[(\d+):(\d+):(\d+)\]", f.read())
    if match is None:
        raise RuntimeError("setup.py: no DLPACKSHIM_LT_VERSION in configure.ac")
    soname = f"libdlpackshim.so.{int(match.group(1)) - int(match.group(3))}"
    with open(os.path.join(HERE, "dlpackshim", "_ffi.py"), encoding="utf-8") as f:
        pkg = re.search(r'^SONAME = "([^"]+)"', f.read(), re.M)
    if pkg is None or pkg.group(1) != soname:
        raise RuntimeError(f"setup.py: dlpackshim/_ffi.py's SONAME is not configure.ac's {soname!r}")
    return soname


SONAME = _soname()


def _sources() -> list:
    """The library's C files as Makefile.am lists them (the one list)."""
    with open(os.path.join(HERE, "Makefile.am"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    match = re.search(r"^csrc_libdlpackshim_la_SOURCES\s*=(.*)$", text, re.M)
    if match is None:
        raise RuntimeError("setup.py: no csrc_libdlpackshim_la_SOURCES in Makefile.am")
    return [os.path.join(HERE, s) for s in match.group(1).split() if s.endswith(".c")]


def _refuse_other_interpreters() -> None:
    if platform.python_implementation() != "CPython":
        raise SystemExit(
            f"dlpackshim cannot be installed on {platform.python_implementation()}: "
            "its C library calls the CPython C API by name at run time and takes "
            "id(obj) as an object's address, which only CPython provides (PyPy's "
            "cpyext exports PyPy-prefixed names and its id() is not an address). "
            "Install it on CPython 3.11 or newer.")


def _require_setuptools(version: str) -> None:
    """One line instead of the schema error an older setuptools prints
    for pyproject.toml's PEP 639 licence fields."""
    major = re.match(r"\d+", version)
    if major is not None and int(major.group()) < 77:
        raise SystemExit(
            f"dlpackshim: building needs setuptools >= 77 (pyproject.toml's licence "
            f"fields, PEP 639); this is setuptools {version}. Upgrade it "
            f"(`pip install -U 'setuptools>=77'`) or build with isolation (`pip install .`).")


def build_library(out_dir: str) -> str:
    """Compile the C library into out_dir/libdlpackshim.so.2; return its path.

    $CC overrides the compiler (a command line: `make wheel` passes
    `python -m ziglang cc -target x86_64-linux-gnu.2.17` to target an old glibc).
    """
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    out = os.path.join(out_dir, SONAME)
    os.makedirs(out_dir, exist_ok=True)
    cmd = cc + [
        "-O2", "-fPIC", "-fvisibility=hidden", "-DDLPACKSHIM_BUILDING",
        f'-DDLPACKSHIM_VERSION_STRING="{_version()}"',
        "-I", os.path.join(HERE, "csrc"),
        *[f"-I{d}" for d in sorted({os.path.dirname(c) for c in _sources()})],
        "-shared", f"-Wl,-soname,{SONAME}", "-o", out,
        *_sources(), "-ldl", "-lpthread",
    ]
    print(" ".join(shlex.quote(c) for c in cmd))
    try:
        subprocess.check_call(cmd)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"dlpackshim: building its C library failed ({exc}). Installing from "
            "source needs a C compiler (Debian/Ubuntu: `apt-get install gcc`; set CC "
            "to use another one). No compiler is needed with the manylinux wheel: "
            "build it once on any machine that has one (`make wheel`, see "
            "docs/install.md) and `pip install` that file here.") from None
    return out


class BuildPyWithLibrary(build_py):
    """build_py that also compiles libdlpackshim into the built package.

    An editable install (PEP 660) imports the package from the source tree,
    so there the library is built in place, beside dlpackshim/__init__.py
    (gitignored).
    """

    def run(self) -> None:
        _refuse_other_interpreters()
        super().run()
        if self.dry_run:
            return
        if getattr(self, "editable_mode", False):
            build_library(os.path.join(HERE, "dlpackshim"))
        else:
            build_library(os.path.join(self.build_lib, "dlpackshim"))


class PlatformDistribution(Distribution):
    """A distribution with native code: installed to platlib, wheel root not pure
    (auditwheel refuses a library under a wheel's purelib)."""

    def has_ext_modules(self) -> bool:
        return True


CMDCLASS = {"build_py": BuildPyWithLibrary}
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """A platform wheel for every CPython >= 3.11 and no other Python: cp311-abi3-<plat>."""

        def get_tag(self):  # type: ignore[no-untyped-def]
            _, _, plat = super().get_tag()
            return ABI3_FROM, "abi3", plat

    CMDCLASS["bdist_wheel"] = PlatformWheel


_require_setuptools(setuptools.__version__)
setup(
    version=_version(),
    distclass=PlatformDistribution,
    cmdclass=CMDCLASS,
)
