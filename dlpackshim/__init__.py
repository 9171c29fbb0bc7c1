"""dlpackshim: DLPack 1.3 for pure Python, through a small C library.

Import any array (DLPack producers, capsules, the buffer protocol, the array
interfaces) with :func:`from_dlpack`, describe raw memory with
:func:`from_pointer`, and hand the resulting :class:`Tensor` to any DLPack
consumer (``numpy.from_dlpack``, ``torch.from_dlpack``, ...).

The C library is found by :mod:`dlpackshim._ffi` (``$DLPACKSHIM_LIBRARY``
alone when set; else the copy bundled in the package and, in a built source
tree, ``csrc/.libs``'s, the newer first; then the installed
``libdlpackshim.so.2``).
"""

import sys as _sys

__version__ = "0.1.0"


def _run_as_main() -> bool:
    """Whether ``python -m dlpackshim`` is importing this package to reach its
    ``__main__`` (while it looks, ``sys.argv[0]`` is ``"-m"``)."""
    argv = _sys.orig_argv
    return _sys.argv[:1] == ["-m"] and any(
        arg == "-mdlpackshim" or (arg == "-m" and argv[i + 1:i + 2] == ["dlpackshim"])
        for i, arg in enumerate(argv))


try:
    from ._consume import from_dlpack, from_dlpack_many
    from ._errors import NotArrayLikeError
    from ._ffi import library_path
    from ._pointer import from_pointer
    from ._tensor import Tensor
    from ._types import DLPACK_VERSION, Device, DeviceType, DType, DTypeCode
except OSError:
    # The C library did not load. `python -m dlpackshim info` is the command
    # that diagnoses this: let it run and report the error as one line.
    if not _run_as_main():
        raise

__all__ = [
    "DLPACK_VERSION",
    "Device",
    "DeviceType",
    "DType",
    "DTypeCode",
    "NotArrayLikeError",
    "Tensor",
    "__version__",
    "from_dlpack",
    "from_dlpack_many",
    "from_pointer",
    "library_path",
]
