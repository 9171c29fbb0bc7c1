"""python3 -m dlpackshim demo|info, run as the user would (subprocesses)."""

from __future__ import annotations

import os
import subprocess

import pytest

import dlpackshim as ds
from conftest import run_python


def run(*args):
    return run_python("-m", "dlpackshim", *args)


def test_info_names_the_library_and_versions():
    r = run("info")
    assert r.returncode == 0, r.stderr
    assert "libdlpackshim" in r.stdout and "DLPack ABI        1.3" in r.stdout
    assert "peer numpy" in r.stdout and "CUDA driver" in r.stdout


def test_version_prints_the_package_version():
    r = run("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"dlpackshim {ds.__version__}"


def test_demo_prints_the_table_and_every_row_is_zero_copy():
    pytest.importorskip("numpy")
    r = run("demo", "--number", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["producer", "consumer", "dtype", "shape", "zero-copy"]
    rows = [ln for ln in lines[2:] if ln.startswith(("numpy", "dlpackshim", "torch"))]
    assert any(ln.startswith("numpy ") and " dlpackshim " in ln for ln in rows)
    assert any(ln.startswith("dlpackshim ") and " numpy " in ln for ln in rows)
    for ln in rows:
        assert " NO " not in ln and ln.rstrip().endswith("us")
    assert "all exchanges zero-copy and bit-exact" in r.stdout


def test_demo_includes_torch_when_installed():
    pytest.importorskip("torch")
    r = run("demo", "--number", "10")
    assert any(ln.startswith("torch ") for ln in r.stdout.splitlines())


def test_unknown_command_fails():
    r = run("frobnicate")
    assert r.returncode != 0 and "invalid choice" in r.stderr


def test_demo_leaves_out_the_bool_rows_on_numpy_before_1_25(monkeypatch, capsys):
    """NumPy < 1.25 has no DLPack bool (its own __dlpack__ and from_dlpack raise
    BufferError): the demo says so instead of dying on that row."""
    np = pytest.importorskip("numpy")
    from dlpackshim import _demo

    assert _demo._version("1.24.4") == (1, 24) and _demo._version("2.1.0rc1") == (2, 1)
    monkeypatch.setattr(np, "__version__", "1.24.4")
    rows, missing = _demo._rows(1)
    assert rows and all(r.dtype != "bool" for r in rows if "numpy" in (r.producer, r.consumer))
    assert any("NumPy 1.24.4 has no DLPack bool" in m for m in missing)


@pytest.mark.parametrize("args", [
    ("check", "numpy:arange(3)", "--examples", "-5"),
    ("check", "numpy:arange(3)", "--seed", "-1"),
    ("check-consumer", "numpy:from_dlpack", "--examples", "0"),
    ("check-consumer", "numpy:from_dlpack", "--examples", "-5"),
    ("check-consumer", "numpy:from_dlpack", "--examples", "many"),
    ("check-consumer", "numpy:from_dlpack", "--seed", "2e3"),
    ("check-consumer", "numpy:from_dlpack", "--max-time", "0"),
    ("check-consumer", "numpy:from_dlpack", "--max-time", "nan"),
    ("check-consumer", "numpy:from_dlpack", "--max-time", "inf"),
    ("demo", "--number", "-1"),
    ("demo", "--number", "0"),
])
def test_every_number_is_range_checked_with_a_usage_error(args):
    r = run(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "error: argument --" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_check_consumer_without_hypothesis_names_the_extra():
    code = ("import sys; sys.modules['hypothesis'] = None\n"   # import hypothesis: ImportError
            "from dlpackshim.__main__ import main\n"
            "sys.exit(main(['check-consumer', 'dlpackshim:from_dlpack']))")
    r = run_python("-c", code)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "needs hypothesis" in r.stderr and "dlpackshim[testing]" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [("info",),
                                  ("check-consumer", "dlpackshim:from_dlpack", "--examples", "1")])
def test_a_reader_that_went_away_is_no_traceback(args):
    """`python3 -m dlpackshim info | head -0`: the pipe's reader is gone before the
    first write (closed here at once, so the test does not depend on timing)."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = run_python("-m", "dlpackshim", *args, stdout=wr, stderr=subprocess.PIPE)
    finally:
        os.close(wr)
    assert r.returncode == 1, r.stderr
    assert "BrokenPipeError" not in r.stderr and "Traceback" not in r.stderr, r.stderr
