"""Where the time of one call goes: a `perf` profile of rows 1, 2, 3, 7b, 8 and 9a.

    python -m bench.profile [--calls N] [--runs R] [ROW ...]

Each side of a row (dlpackshim's call and the reference, the calls of
bench/run.py) runs as a loop of N calls, `for _ in repeat(None, N): f(x)` in a
function (fast locals), in a fresh process under `perf record -e cpu-clock -c
50000` (one sample per 50 us of CPU time) that counts only while the loop
runs (the child switches perf on and off through `--control`): a function's
samples times 50 us, divided by N, are its nanoseconds per call. Functions are
grouped into steps by their library and name (STEPS); each figure is the
median of R runs. Needs `perf` (Debian: linux-perf) and an interpreter with
symbols for the interpreter's steps to be told apart (pyenv's builds have
them; Debian's python3.11 is stripped: its share is one step).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from typing import Dict, List, Tuple

PERIOD_NS = 50_000

# row -> (what is profiled, [(side, setup, callable)])
ROWS: Dict[str, Tuple[str, List[Tuple[str, str, str]]]] = {
    "1": ("import of a NumPy array", [
        ("dlpackshim.from_dlpack(ndarray)", "x = np.zeros(256, np.float32)", "ds.from_dlpack"),
        ("numpy.from_dlpack(ndarray)", "x = np.zeros(256, np.float32)", "np.from_dlpack"),
    ]),
    "2": ("export to NumPy", [
        ("numpy.from_dlpack(Tensor)", "x = ds.from_dlpack(np.zeros(256, np.float32))",
         "np.from_dlpack"),
        ("numpy.from_dlpack(ndarray)", "x = np.zeros(256, np.float32)", "np.from_dlpack"),
    ]),
    "7b": ("export to NumPy, against apache-tvm-ffi's", [
        ("numpy.from_dlpack(Tensor)", "x = ds.from_dlpack(np.zeros(256, np.float32))",
         "np.from_dlpack"),
        ("numpy.from_dlpack(tvm_ffi.Tensor)",
         "import tvm_ffi\nx = tvm_ffi.from_dlpack(np.zeros(256, np.float32))", "np.from_dlpack"),
    ]),
    "3": ("import of a PyTorch tensor through its C table, against apache-tvm-ffi's", [
        ("dlpackshim.from_dlpack(torch)", "import torch\nx = torch.ones(256)", "ds.from_dlpack"),
        ("tvm_ffi.from_dlpack(torch)", "import torch, tvm_ffi\nx = torch.ones(256)",
         "tvm_ffi.from_dlpack"),
    ]),
    "8": ("from_dlpack_many of a list of 8 (ns per call: divide by 8)", [
        ("8 dlpackshim Tensors", "x = [ds.from_dlpack(np.zeros(256, np.float32))] * 8",
         "ds.from_dlpack_many"),
        ("8 PyTorch tensors", "import torch\nx = [torch.ones(256)] * 8", "ds.from_dlpack_many"),
    ]),
    "9a": ("import of a bytearray (1 KiB)", [
        ("dlpackshim.from_dlpack(bytearray)", "x = bytearray(1024)", "ds.from_dlpack"),
        ("numpy.frombuffer(bytearray)", "x = bytearray(1024)", "np.frombuffer"),
    ]),
}

# (step, whose, pattern on "library:function"); the first match wins. Whose:
# "ours" or "NumPy" (one side's own code), "protocol" (what the exchange
# itself needs: the buffer export, a capsule), "both" (paid by either side).
STEPS: List[Tuple[str, str, str]] = [
    ("dlpackshim's own code (libdlpackshim)", "ours", r"libdlpackshim"),
    ("NumPy's own code (_multiarray_umath)", "NumPy", r"_multiarray_umath"),
    ("apache-tvm-ffi's own code (libtvm_ffi, its Cython core)", "tvm-ffi",
     r"libtvm_ffi|tvm_ffi|^core\.cpython"),
    ("PyTorch's own code (libtorch, libc10, torch_python)", "PyTorch",
     r"libtorch|libc10|torch_python|^_C\.cpython"),
    ("malloc and free (libc)", "both", r"libc[.-].*:(.*malloc|.*free|_int_|tcache|malloc_)"),
    ("memoryview and the buffer protocol", "protocol",
     r":(memory_|mbuf_|_PyManagedBuffer|PyMemoryView|PyBuffer_|PyObject_GetBuffer|bytearray_getbuffer"
     r"|bytearray_releasebuffer|_PyObject_GetBuffer)"),
    ("PyCapsule", "protocol", r":(capsule_|PyCapsule_)"),
    ("tuples", "both", r":(tuple|PyTuple_|_PyTuple_)"),
    ("object allocation, GC and deallocation", "both",
     r":(_PyObject_Malloc|_PyObject_Free|PyObject_Malloc|PyObject_Free|_PyObject_GC|PyObject_GC|gc_"
     r"|PyType_GenericAlloc|_PyType_AllocNoTrack|subtype_dealloc|object_dealloc|subtype_traverse"
     r"|_Py_Dealloc|type_call|PyType_GenericNew|_PyObject_New|object_new|visit_|update_refs"
     r"|subtract_refs|move_unreachable|deduce_unreachable)"),
    ("the interpreter (the loop, calls, keywords, lookups)", "both",
     r"python|libpython"),
    ("libc's string and memory functions", "both",
     r"libc[.-].*:(__str|__mem|str|mem)"),
    ("kernel", "both", r"kernel"),
    ("other", "both", r""),
]

CHILD = """\
import sys
from itertools import repeat
import numpy as np
import dlpackshim as ds
{setup}


def loop(f, x, n):
    for _ in repeat(None, n):
        f(x)


f = {call}
loop(f, x, 1000)   # warm: types seen, caches filled
with open(sys.argv[2], "w") as ctl, open(sys.argv[3]) as ack:
    ctl.write("enable\\n"); ctl.flush(); ack.readline()
    loop(f, x, int(sys.argv[1]))
    ctl.write("disable\\n"); ctl.flush(); ack.readline()
"""


def samples(setup: str, call: str, n: int, perf: str, tmp: str) -> Dict[str, int]:
    """perf's samples per "library:function" taken during `n` calls."""
    script = os.path.join(tmp, "child.py")
    with open(script, "w") as fh:
        fh.write(CHILD.format(setup=setup, call=call))
    data, ctl, ack = (os.path.join(tmp, name) for name in ("perf.data", "ctl", "ack"))
    for fifo in (ctl, ack):
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
    subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-c", str(PERIOD_NS), "-D", "-1",
                    "--control", f"fifo:{ctl},{ack}", "-o", data,
                    "--", sys.executable, script, str(n), ctl, ack], check=True,
                   stdout=subprocess.DEVNULL)
    out = subprocess.run([perf, "report", "-i", data, "--stdio", "-n", "--sort", "dso,sym",
                          "--percent-limit", "0"],
                         check=True, capture_output=True, text=True).stdout
    return parse_report(out)


def parse_report(text: str) -> Dict[str, int]:
    """`perf report --stdio -n --sort dso,sym` -> samples per "library:function"."""
    counts: Dict[str, int] = defaultdict(int)
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", line)
        if m:
            counts[f"{m.group(2)}:{m.group(3)}"] += int(m.group(1))
    return dict(counts)


def step_of(key: str) -> str:
    for step, _, pattern in STEPS:
        if re.search(pattern, key):
            return step
    return "other"


def profile_side(setup: str, call: str, n: int, runs: int, perf: str,
                 tmp: str) -> Tuple[Dict[str, float], Dict[str, List[Tuple[float, str]]]]:
    per_run: Dict[str, List[float]] = defaultdict(list)
    funcs: Dict[str, float] = defaultdict(float)
    for _ in range(runs):
        steps: Dict[str, float] = defaultdict(float)
        for key, count in samples(setup, call, n, perf, tmp).items():
            ns = count * PERIOD_NS / n
            steps[step_of(key)] += ns
            funcs[key] += ns / runs
        for step, _, _ in STEPS:
            per_run[step].append(steps.get(step, 0.0))
    medians = {step: statistics.median(v) for step, v in per_run.items()}
    top: Dict[str, List[Tuple[float, str]]] = defaultdict(list)
    for key, ns in funcs.items():
        top[step_of(key)].append((ns, key.split(":", 1)[1]))
    return medians, top


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="*", metavar="ROW", help=f"one of {', '.join(ROWS)} (default: all)")
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    unknown = [row for row in args.rows if row not in ROWS]
    if unknown:
        ap.error(f"unknown row {unknown[0]!r} (rows: {', '.join(ROWS)})")
    perf = shutil.which("perf")
    if not perf:
        print("bench.profile: needs perf (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    print(f"python {sys.version.split()[0]} ({sys.executable}); {args.calls:,} calls per run, "
          f"median of {args.runs} runs; ns per call")
    with tempfile.TemporaryDirectory() as tmp:
        for row in args.rows or list(ROWS):
            what, sides = ROWS[row]
            results = [profile_side(setup, call, args.calls, args.runs, perf, tmp)
                       for _, setup, call in sides]
            names = [side for side, _, _ in sides]
            print(f"\nrow {row}: {what}")
            print(f"  {'step':66} | {names[0]:>34} | {names[1]:>34}")
            totals = [0.0, 0.0]
            for step, whose, _ in STEPS:
                vals = [res[0].get(step, 0.0) for res in results]
                if all(abs(v) < 0.5 for v in vals):
                    continue
                totals = [t + v for t, v in zip(totals, vals)]
                print(f"  {step + ' [' + whose + ']':66} | {vals[0]:34.0f} | {vals[1]:34.0f}")
                for i, res in enumerate(results):
                    best = sorted(res[1].get(step, []), reverse=True)[:4]
                    shown = ", ".join(f"{name} {ns:.0f}" for ns, name in best if ns >= 1)
                    if shown:
                        print(f"  {'':6}{names[i][:20]:20}: {shown}")
            print(f"  {'total':66} | {totals[0]:34.0f} | {totals[1]:34.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
