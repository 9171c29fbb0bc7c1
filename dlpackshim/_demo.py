"""``python3 -m dlpackshim demo``: real exchanges between the shim, NumPy and PyTorch.

Each row moves one array from a producer to a consumer through DLPack,
checks that the consumer sees the same memory (zero copy, by pointer) and
the same bytes, and times the exchange (minimum over repeats).
"""

from __future__ import annotations

import array
import re
import timeit
from typing import Any, Callable, List, Optional, Tuple

from . import from_dlpack


class _Row:
    def __init__(self, producer: str, consumer: str, dtype: str, shape: Tuple[int, ...],
                 zero_copy: bool, same_bytes: bool, seconds: float) -> None:
        self.producer, self.consumer, self.dtype, self.shape = producer, consumer, dtype, shape
        self.zero_copy, self.same_bytes, self.seconds = zero_copy, same_bytes, seconds


def _version(text: str) -> Tuple[int, int]:
    """(major, minor) of a version string such as "1.24.4" or "2.1.0rc1"."""
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _time(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def _exchange(producer: str, consumer: str, make: Callable[[], Any], convert: Callable[[Any], Any],
              ptr_in: Callable[[Any], int], ptr_out: Callable[[Any], int],
              bytes_in: Callable[[Any], bytes], bytes_out: Callable[[Any], bytes],
              dtype: str, number: int) -> _Row:
    src = make()
    dst = convert(src)
    zero_copy = ptr_in(src) == ptr_out(dst)
    same = bytes_in(src) == bytes_out(dst)
    shape = tuple(getattr(dst, "shape", ()))
    seconds = _time(lambda: convert(src), number)
    return _Row(producer, consumer, dtype, shape, zero_copy, same, seconds)


def _rows(number: int) -> Tuple[List[_Row], List[str]]:
    rows: List[_Row] = []
    missing: List[str] = []
    shim_ptr = lambda t: t.data_ptr  # noqa: E731
    shim_bytes = lambda t: t.tobytes()  # noqa: E731

    # The standard library: buffer-protocol objects, no peer needed.
    buf = array.array("d", range(1024))
    rows.append(_exchange(
        "array.array", "dlpackshim", lambda: buf, from_dlpack,
        lambda a: a.buffer_info()[0], shim_ptr, lambda a: a.tobytes(), shim_bytes,
        "float64", number))

    np: Optional[Any]
    try:
        import numpy as np
    except ImportError:
        np = None
        missing.append("numpy")
    torch: Optional[Any]
    try:
        import torch
    except ImportError:
        torch = None
        missing.append("torch")

    if np is not None:
        np_ptr = lambda a: a.__array_interface__["data"][0]  # noqa: E731
        np_bytes = lambda a: a.tobytes()  # noqa: E731
        cases = [
            ("float32", lambda: np.arange(256 * 256, dtype=np.float32).reshape(256, 256)),
            ("int64", lambda: np.arange(1000, dtype=np.int64)),
            ("bool", lambda: np.arange(64).reshape(8, 8) % 3 == 0),
            ("complex64", lambda: (np.arange(12) * (1 + 2j)).astype(np.complex64).reshape(3, 4)),
        ]
        if _version(np.__version__) < (1, 25):
            # NumPy exports and imports DLPack bool (kDLBool) from 1.25 on; before,
            # both directions raise BufferError in NumPy itself.
            cases = [c for c in cases if c[0] != "bool"]
            missing.append(f"bool rows (NumPy {np.__version__} has no DLPack bool; 1.25+ has)")
        for dtype, make in cases:
            rows.append(_exchange("numpy", "dlpackshim", make, from_dlpack,
                                  np_ptr, shim_ptr, np_bytes, shim_bytes, dtype, number))
            t = from_dlpack(make())
            rows.append(_exchange("dlpackshim", "numpy", lambda t=t: t, np.from_dlpack,
                                  shim_ptr, np_ptr, shim_bytes, np_bytes, dtype, number))
        # A strided view (every other column, reversed rows) keeps its strides.
        base = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
        view = base[::-1, ::2]
        rows.append(_exchange("numpy (strided)", "dlpackshim", lambda: view, from_dlpack,
                              np_ptr, shim_ptr, np_bytes, shim_bytes, "float64", number))
        rows.append(_exchange("bytearray", "dlpackshim -> numpy",
                              lambda: bytearray(range(256)),
                              lambda b: np.from_dlpack(from_dlpack(b)),
                              lambda b: np.frombuffer(b, np.uint8).__array_interface__["data"][0],
                              np_ptr, bytes, np_bytes, "uint8", number))

    if torch is not None:
        th_ptr = lambda x: x.data_ptr()  # noqa: E731
        th_bytes = lambda x: x.contiguous().view(torch.uint8).numpy().tobytes() \
            if x.dtype != torch.bool else x.contiguous().numpy().tobytes()  # noqa: E731
        for dtype, make in (
            ("float32", lambda: torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256)),
            ("bfloat16", lambda: torch.arange(1024, dtype=torch.bfloat16)),
            ("int8", lambda: torch.arange(100, dtype=torch.int8)),
        ):
            rows.append(_exchange("torch", "dlpackshim", make, from_dlpack,
                                  th_ptr, shim_ptr, th_bytes, shim_bytes, dtype, number))
            t = from_dlpack(make())
            rows.append(_exchange("dlpackshim", "torch", lambda t=t: t, torch.from_dlpack,
                                  shim_ptr, th_ptr, shim_bytes, th_bytes, dtype, number))

    if np is not None and torch is not None:
        a = np.arange(4096, dtype=np.float32)
        rows.append(_exchange("numpy", "dlpackshim -> torch", lambda: a,
                              lambda x: torch.from_dlpack(from_dlpack(x)),
                              lambda x: x.__array_interface__["data"][0], lambda x: x.data_ptr(),
                              lambda x: x.tobytes(), lambda x: x.numpy().tobytes(),
                              "float32", number))
        x = torch.arange(4096, dtype=torch.int32)
        rows.append(_exchange("torch", "dlpackshim -> numpy", lambda: x,
                              lambda y: np.from_dlpack(from_dlpack(y)),
                              lambda y: y.data_ptr(), lambda y: y.__array_interface__["data"][0],
                              lambda y: y.numpy().tobytes(), lambda y: y.tobytes(),
                              "int32", number))
    return rows, missing


def run_demo(number: int = 2000) -> int:
    """Run the exchanges and print the table.

    Parameters
    ----------
    number : int
        Exchanges per timing repeat (the time shown is the minimum of 5
        repeats, divided by `number`).

    Returns
    -------
    int
        0 when every exchange was zero-copy and kept the bytes, else 1.
    """
    rows, missing = _rows(max(1, number))
    header = ("producer", "consumer", "dtype", "shape", "zero-copy", "same bytes", "time/exchange")
    table = [header] + [
        (r.producer, r.consumer, r.dtype, "x".join(map(str, r.shape)) or "()",
         "yes" if r.zero_copy else "NO", "yes" if r.same_bytes else "NO",
         f"{r.seconds * 1e6:.2f} us")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for n, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    if missing:
        print(f"(skipped: {', '.join(missing)})")
    ok = all(r.zero_copy and r.same_bytes for r in rows)
    print("all exchanges zero-copy and bit-exact" if ok else "SOME EXCHANGES FAILED")
    return 0 if ok else 1
