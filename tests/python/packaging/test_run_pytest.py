"""tests/python/run-pytest.sh (what `make check` runs): progress reaches its log
as the suite runs, and make's terminal is told where to watch it."""

from __future__ import annotations

import os
import sys

from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "run-pytest.sh")


def _run(tmp_path, fd9=None):
    """Run the script on a two-test suite; fd9: the descriptor its fd 9 gets, as
    AM_TESTS_FD_REDIRECT = 9>&2 gives it make's stderr."""
    (tmp_path / "test_two.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    env = {"PYTHON": sys.executable, "DLPACKSHIM_PYTEST_ARGS": str(tmp_path)}
    start = ("import os, sys\n"
             "if sys.argv[2] != '-':\n"
             "    os.dup2(int(sys.argv[2]), 9)\n"
             "os.execvp('sh', ['sh', sys.argv[1]])")
    return run_python("-c", start, SCRIPT, "-" if fd9 is None else str(fd9), env=env,
                      cwd=str(tmp_path), pass_fds=() if fd9 is None else (fd9,))


def test_a_line_per_file_and_a_notice_on_makes_terminal(tmp_path):
    rd, wr = os.pipe()
    try:
        r = _run(tmp_path, wr)
    finally:
        os.close(wr)
    with os.fdopen(rd) as f:
        notice = f.read()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tail -f tests/python/run-pytest.sh.log" in notice
    line = [ln for ln in r.stdout.splitlines() if "test_two.py" in ln]
    assert line and ".." in line[0] and "[100%]" in line[0], r.stdout


def test_no_notice_without_fd_9(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tail -f" not in r.stdout + r.stderr and "Bad file descriptor" not in r.stderr
