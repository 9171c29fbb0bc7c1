"""bench/profile.py: perf's report is read and each function lands in its step."""
import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# By its path: the source tree's root is not on sys.path (its dlpackshim/
# folder must not shadow an installed package; conftest.py).
_PROFILE = Path(__file__).resolve().parents[3] / "bench" / "profile.py"
if not _PROFILE.exists():
    pytest.skip("bench/profile.py is not here: the benchmarks are in a clone, not in the sdist",
                allow_module_level=True)
_spec = importlib.util.spec_from_file_location("bench_profile", _PROFILE)
profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile)

REPORT = """\
# Samples: 12K of event 'cpu-clock'
#
# Overhead       Samples  Shared Object         Symbol
# ........  ............  ....................  ..........................
#
     9.65%          1207  libdlpackshim.so.2.0.0  [.] shim_buffer_tensor
     4.10%           512  libpython3.11.so.1.0  [.] PyCapsule_New
     3.00%           375  libc.so.6             [.] _int_free
     2.00%           250  libc.so.6             [.] __strcmp_evex
     1.00%           125  libpython3.11.so.1.0  [.] _PyEval_EvalFrameDefault
     0.50%            62  [kernel.kallsyms]     [k] exc_page_fault
     0.40%            50  _multiarray_umath.cpython-311-x86_64-linux-gnu.so  [.] PyArray_FromBuffer
     0.30%            37  libpython3.11.so.1.0  [.] memory_dealloc
"""


def test_the_report_is_read_sample_by_sample():
    counts = profile.parse_report(REPORT)
    assert counts["libdlpackshim.so.2.0.0:shim_buffer_tensor"] == 1207
    assert counts["[kernel.kallsyms]:exc_page_fault"] == 62
    assert sum(counts.values()) == 1207 + 512 + 375 + 250 + 125 + 62 + 50 + 37


@pytest.mark.parametrize("key, step", [
    ("libdlpackshim.so.2.0.0:shim_buffer_tensor", "dlpackshim's own code"),
    ("_multiarray_umath.cpython-311-x86_64-linux-gnu.so:PyArray_FromBuffer", "NumPy's own code"),
    ("libc.so.6:_int_free", "malloc and free"),
    ("libc.so.6:__strcmp_evex", "libc's string"),
    ("libpython3.11.so.1.0:PyCapsule_New", "PyCapsule"),
    ("python3.11:memory_dealloc", "memoryview"),
    ("libpython3.11.so.1.0:subtype_dealloc", "object allocation"),
    ("libpython3.11.so.1.0:PyTuple_Pack", "tuples"),
    ("libpython3.11.so.1.0:_PyEval_EvalFrameDefault", "the interpreter"),
    ("[kernel.kallsyms]:exc_page_fault", "kernel"),
    # before the interpreter's step, whose pattern ("python") would take it
    ("libtorch_python.so:THPVariable_get_requires_grad", "PyTorch's own code"),
    ("libc10.so:c10::TensorImpl::is_contiguous_custom", "PyTorch's own code"),
    ("libtvm_ffi.so:TVMFFITensorFromDLPackVersioned", "apache-tvm-ffi's own code"),
    ("libm.so.6:sin", "other"),
])
def test_each_function_lands_in_its_step(key, step):
    assert profile.step_of(key).startswith(step)


def test_a_real_profile_counts_the_calls():
    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("perf is not installed")
    probe = subprocess.run([perf, "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "--",
                            "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("perf cannot record here: " + probe.stderr.decode(errors="replace")[:200])
    with tempfile.TemporaryDirectory() as tmp:
        steps, top = profile.profile_side("x = bytearray(1024)", "ds.from_dlpack", 200_000, 1,
                                          perf, tmp)
    total = sum(steps.values())
    ours = steps["dlpackshim's own code (libdlpackshim)"]
    # 200,000 imports of a bytearray take some 100-1000 ns each, a part of it in the library.
    assert 50 < total < 5000, steps
    assert 0 < ours < total, steps
    assert any(name.startswith("shim_") for _, name in top["dlpackshim's own code (libdlpackshim)"])
