"""``python3 -m dlpackshim info``: what this installation found."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import __version__

#: Array libraries dlpackshim can exchange with (distribution names).
PEERS = ("numpy", "torch", "jax", "cupy", "tensorflow", "mlx")
#: GPU runtimes the C library looks for: (label, key of _gpu.runtime_info()).
GPU_RUNTIMES: Tuple[Tuple[str, str], ...] = (("CUDA driver", "cuda"),
                                              ("ROCm/HIP runtime", "rocm"))


def peers_found() -> Dict[str, Optional[str]]:
    """The installed version of each peer array library (None when absent),
    read from package metadata without importing the library: the
    distribution that provides the import name (CuPy's is cupy-cuda13x, ...)."""
    dists = importlib.metadata.packages_distributions()
    out: Dict[str, Optional[str]] = {}
    for name in PEERS:
        out[name] = None
        for dist in dists.get(name) or [name]:
            try:
                out[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def library_load_error() -> Optional[str]:
    """None when the C library loads, else the loader's OSError as one line
    (the paths it tried and what to do)."""
    try:
        from . import _ffi  # noqa: F401 - the import loads the library
    except OSError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return " ".join(lines[:1] + ["; ".join(lines[1:])]).strip()
    return None


def gpu_runtimes_found() -> List[Tuple[str, Dict[str, Any]]]:
    """``(runtime, info)`` for each GPU runtime, as the C library finds it
    (``DLPACKSHIM_LIBCUDA`` / ``DLPACKSHIM_LIBHIP`` override the search);
    `info` is :func:`dlpackshim._gpu.runtime_info`'s entry. Loads the
    runtimes (once per process)."""
    from . import _gpu

    info = _gpu.runtime_info()
    return [(label, info[key]) for label, key in GPU_RUNTIMES]


def _describe_runtime(key: str, info: Dict[str, Any]) -> str:
    from . import _gpu

    if not info.get("available"):
        return "not found (" + str(info.get("error", "")) + ")"
    rocm = key == "rocm"
    text = f"driver {_gpu.format_version(info.get('driver_version'), rocm)}"
    if rocm:
        text += f", runtime {_gpu.format_version(info.get('runtime_version'), rocm)}"
    devices = info.get("devices") or []
    text += f" ({info.get('library')}), {len(devices)} device{'s' if len(devices) != 1 else ''}"
    return text + "".join(f"\n{'':<18}{i}: {name}" for i, name in enumerate(devices))


def run_info() -> int:
    """Print the library path, versions, GPU back-ends and peers.

    Returns
    -------
    int
        0; 1 when the C library does not load (the diagnosis still prints,
        with the loader's error as the library's line).
    """
    problem = library_load_error()
    print(f"dlpackshim        {__version__} (Python package)")
    if problem is None:
        from ._ffi import dlpack_version, library_path, library_version

        major, minor = dlpack_version()
        print(f"libdlpackshim     {library_version()} at {library_path}")
        print(f"DLPack ABI        {major}.{minor}")
    else:
        print(f"libdlpackshim     NOT LOADED: {problem}")
    print(f"Python            {platform.python_implementation()} {sys.version.split()[0]} "
          f"on {platform.machine()}")
    if problem is None:
        for (runtime, key), (_, info) in zip(GPU_RUNTIMES, gpu_runtimes_found()):
            print(f"{runtime:<17} {_describe_runtime(key, info)}")
    for name, version in peers_found().items():
        print(f"peer {name:<12} {version if version else 'not installed'}")
    return 0 if problem is None else 1
