"""What type checkers see of the package (py.typed; the Tensor's C base is
declared under TYPE_CHECKING in dlpackshim/_tensor.py): mypy, when
installed, on a user's file."""

from __future__ import annotations

import re
import textwrap

import pytest

import conftest
from conftest import run_python

USER_CODE = textwrap.dedent("""
    import dlpackshim as ds

    t = ds.from_dlpack(bytearray(8))
    reveal_type(ds.from_dlpack)
    reveal_type(t.__dlpack__)
    cap = t.__dlpack__(max_version=(1, 3), copy=None)
    t.close()
    t.nosuchattr
    t.__dlpack__(max_version="1.3")
""")


def test_mypy_sees_the_tensor_base_and_from_dlpack(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    (tmp_path / "user.py").write_text(USER_CODE)
    env = {}
    if not conftest.CHOSEN.startswith("installed"):  # site-packages is found by mypy itself
        env["MYPYPATH"] = conftest.PACKAGE_ROOT
    r = run_python("-m", "mypy", "--follow-imports=silent", "--no-error-summary",
                   "--cache-dir", str(tmp_path / "cache"), "user.py", cwd=str(tmp_path),
                   env=env, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("user.py:")]
    errors = [re.sub(r"^user\.py:\d+: error: ", "", ln) for ln in lines if ": error: " in ln]
    notes = [ln.split("Revealed type is ", 1)[1] for ln in lines if "Revealed type is" in ln]
    assert errors == ['"Tensor" has no attribute "nosuchattr"  [attr-defined]',
                      'Argument "max_version" to "__dlpack__" of "TensorBase" has incompatible '
                      'type "str"; expected "tuple[int, int] | None"  [arg-type]'], r.stdout + r.stderr
    assert notes[0].endswith('-> dlpackshim._tensor.Tensor"') and "copy: bool | None" in notes[0]
    assert "max_version: tuple[int, int] | None" in notes[1] and notes[1].endswith('CapsuleType"')
