"""Shared set-up for the Python suite.

`make check` exports DLPACKSHIM_LIBRARY and PYTHONPATH. Run by hand from a
source tree, the suite finds the package there and, unless the variable is
set, the library that `make` built (csrc/.libs/libdlpackshim.so).
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

for path in (HERE, ROOT):  # producers.py; the dlpackshim package
    if path not in sys.path:
        sys.path.insert(0, path)

if not os.environ.get("DLPACKSHIM_LIBRARY"):
    built = os.path.join(ROOT, "csrc", ".libs", "libdlpackshim.so")
    if os.path.exists(built):
        os.environ["DLPACKSHIM_LIBRARY"] = built


@pytest.fixture
def np():
    """NumPy, or skip."""
    return pytest.importorskip("numpy")


@pytest.fixture
def torch():
    """PyTorch, or skip."""
    return pytest.importorskip("torch")
