"""Build and install dlpackshim: the pure-Python package plus its C library.

The C library is compiled here with the system C compiler (no Extension
objects, so the wheel carries no CPython extension module) and shipped
inside the package as dlpackshim/libdlpackshim.so.0, where dlpackshim._ffi
looks for it after $DLPACKSHIM_LIBRARY. The wheel is tagged py3-none-<platform>:
specific to the platform (it holds a native library) but not to the Python
ABI (the library binds CPython at run time).

    pip install .                          # isolated build
    pip install --no-build-isolation .     # offline, with the setuptools at hand
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore

HERE = os.path.dirname(os.path.abspath(__file__))
SONAME = "libdlpackshim.so.0"


def _version() -> str:
    """The version, from configure.ac's AC_INIT (its one source)."""
    with open(os.path.join(HERE, "configure.ac"), encoding="utf-8") as f:
        match = re.search(r"AC_INIT\(\[dlpackshim\],\s*\[([^\]]+)\]", f.read())
    if match is None:
        raise RuntimeError("setup.py: no AC_INIT version in configure.ac")
    return match.group(1)


def _sources() -> list:
    """The library's C files as Makefile.am lists them (the one list)."""
    with open(os.path.join(HERE, "Makefile.am"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    match = re.search(r"^csrc_libdlpackshim_la_SOURCES\s*=(.*)$", text, re.M)
    if match is None:
        raise RuntimeError("setup.py: no csrc_libdlpackshim_la_SOURCES in Makefile.am")
    return [os.path.join(HERE, s) for s in match.group(1).split() if s.endswith(".c")]


def build_library(out_dir: str) -> str:
    """Compile the C library into out_dir/libdlpackshim.so.0; return its path."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    out = os.path.join(out_dir, SONAME)
    os.makedirs(out_dir, exist_ok=True)
    cmd = cc + [
        "-O2", "-fPIC", "-fvisibility=hidden", "-DDLPACKSHIM_BUILDING",
        f'-DDLPACKSHIM_VERSION_STRING="{_version()}"',
        "-I", os.path.join(HERE, "csrc"),
        "-shared", f"-Wl,-soname,{SONAME}", "-o", out,
        *_sources(), "-ldl", "-lpthread",
    ]
    print(" ".join(shlex.quote(c) for c in cmd))
    subprocess.check_call(cmd)
    return out


class BuildPyWithLibrary(build_py):
    """build_py that also compiles libdlpackshim into the built package."""

    def run(self) -> None:
        super().run()
        if not self.dry_run:
            build_library(os.path.join(self.build_lib, "dlpackshim"))


class PlatformWheel(bdist_wheel):
    """A platform wheel that is not tied to one Python ABI: py3-none-<plat>."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):  # type: ignore[no-untyped-def]
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    name="dlpackshim",
    version=_version(),
    description="DLPack 1.3 for pure Python: a small C library loaded with cffi (ABI mode)",
    packages=["dlpackshim", "dlpackshim.testing"],
    package_data={"dlpackshim": ["py.typed"]},
    python_requires=">=3.8",
    install_requires=["cffi>=1.15"],
    extras_require={"testing": ["hypothesis"]},  # dlpackshim.testing.strategies, check-consumer
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel},
    zip_safe=False,
)
