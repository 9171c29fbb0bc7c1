"""``python3 -m dlpackshim info``: what this installation found."""

from __future__ import annotations

import ctypes
import importlib.metadata
import platform
import sys
from typing import Dict, List, Optional, Tuple

from . import __version__
from ._ffi import dlpack_version, library_path, library_version

#: Array libraries dlpackshim can exchange with (distribution names).
PEERS = ("numpy", "torch", "jax", "cupy", "tensorflow", "mlx")
#: GPU runtimes the C library looks for, with the libraries that provide them.
GPU_RUNTIMES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("CUDA driver", ("libcuda.so.1", "libcuda.so")),
    ("ROCm/HIP runtime", ("libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so")),
)


def peers_found() -> Dict[str, Optional[str]]:
    """The installed version of each peer array library (None when absent),
    read from package metadata without importing the library."""
    out: Dict[str, Optional[str]] = {}
    for name in PEERS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def gpu_runtimes_found() -> List[Tuple[str, Optional[str]]]:
    """``(runtime, library that loaded or None)`` for each GPU runtime."""
    out: List[Tuple[str, Optional[str]]] = []
    for runtime, sonames in GPU_RUNTIMES:
        found = None
        for soname in sonames:
            try:
                ctypes.CDLL(soname)
            except OSError:
                continue
            found = soname
            break
        out.append((runtime, found))
    return out


def run_info() -> int:
    """Print the library path, versions, GPU back-ends and peers; return 0."""
    major, minor = dlpack_version()
    print(f"dlpackshim        {__version__} (Python package)")
    print(f"libdlpackshim     {library_version()} at {library_path}")
    print(f"DLPack ABI        {major}.{minor}")
    print(f"Python            {platform.python_implementation()} {sys.version.split()[0]} "
          f"on {platform.machine()}")
    for runtime, found in gpu_runtimes_found():
        print(f"{runtime:<17} {found + ' (found)' if found else 'not found'}")
    print("GPU back-end      not used by the Python package yet: CPU-accessible memory only")
    for name, version in peers_found().items():
        print(f"peer {name:<12} {version if version else 'not installed'}")
    return 0
