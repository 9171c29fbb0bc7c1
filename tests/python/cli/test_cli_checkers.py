"""The check commands against targets that exit or are interrupted, and ``info``
without a library (issue 31.8 and 31.9), each run as the user runs them: a
subprocess, with a timeout so that a hang fails the test."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import asan_options, run_python

TARGETS = {
    # A module that leaves at import, as a script's `sys.exit(main())` does.
    "exits_zero.py": "import sys\nsys.exit(0)\n",
    "exits_bye.py": "raise SystemExit('bye')\n",
    # A consumer and a producer factory that tell the test, at their third
    # call, that the check is a few rules in (the file named by
    # $CHECK_STARTED), and from then on take 0.3 s a call: the check (9 calls
    # of the factory, ~2,000 of the consumer) is still running when the
    # signal lands, not ending (CI once sent it to a finished check).
    "slow_targets.py": """\
import os, time
import numpy

calls = 0


def _started():
    global calls
    calls += 1
    if calls == 3:
        open(os.environ["CHECK_STARTED"], "a").close()
    if calls >= 3:
        time.sleep(0.3)


def from_dlpack(x, **kw):
    _started()
    return numpy.from_dlpack(x, **kw)


def make():
    _started()
    return numpy.arange(12.0).reshape(3, 4)
""",
    # Targets that print, at import and in their calls.
    "chatty.py": """\
import numpy
print("chatty: imported")


def make():
    print("chatty: making an array")
    return numpy.arange(6.0)


def from_dlpack(x, **kw):
    print("chatty: consuming")
    return numpy.from_dlpack(x, **kw)
""",
}


@pytest.fixture
def targets(tmp_path):
    for name, text in TARGETS.items():
        (tmp_path / name).write_text(text)
    return {"PYTHONPATH": str(tmp_path), "CHECK_STARTED": str(tmp_path / "started")}


def checker(*args, env):
    return run_python("-m", "dlpackshim", *args, env=env, timeout=120)


@pytest.mark.parametrize("command, target, said", [
    ("check", "exits_zero:arange(3)", "sys.exit(0)"),
    ("check-consumer", "exits_zero:from_dlpack", "sys.exit(0)"),
    ("check", "exits_bye:arange(3)", "sys.exit('bye')"),
    ("check-consumer", "exits_bye:from_dlpack", "sys.exit('bye')"),
    ("check", "sys:exit(0)", "sys.exit(0)"),          # the expression itself exits
])
def test_a_target_that_exits_is_a_usage_error_not_a_pass(targets, command, target, said):
    pytest.importorskip("hypothesis")
    r = checker(command, target, "--examples", "1", env=targets)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert said in r.stderr and f"dlpackshim {command}:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("command, target", [("check", "chatty:make"),
                                             ("check-consumer", "chatty:from_dlpack")])
def test_json_is_all_that_stdout_carries(targets, command, target):
    """What a target prints went to stdout before the JSON (which then did
    not parse): it goes to stderr now, with --json only."""
    import json
    pytest.importorskip("hypothesis")
    # `make check-asan`: NumPy crashes on some of the census's broken
    # producers (the crashes are results); ASan's handler would report them.
    env = dict(targets, **asan_options("handle_segv=0"))
    r = checker(command, target, "--examples", "2", "--json", env=env)
    data = json.loads(r.stdout)
    assert data["rules"] and "chatty: " in r.stderr and "chatty: " not in r.stdout
    table = checker(command, target, "--examples", "2", env=env)
    assert "chatty: imported" in table.stdout   # without --json the target's output stays


@pytest.mark.parametrize("command, target", [("check", "slow_targets:make"),
                                             ("check-consumer", "slow_targets:from_dlpack")])
@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_prints_the_partial_report_and_exits_130(targets, command, target, as_json):
    """Every rule is in the partial report: those judged, the one under way
    and those not reached "not run" (check showed the one under way as n/a
    and left the others out), and its JSON says 130 and interrupted (it said
    0 or 3)."""
    import json
    pytest.importorskip("numpy")
    pytest.importorskip("hypothesis")
    # A shell starts background jobs with SIGINT ignored and the child would
    # inherit that (CI may run so): give it the default, as in a terminal.
    extra = ["--json"] if as_json else []
    proc = run_python("-m", "dlpackshim", command, target, "--examples", "1000", *extra,
                      env=targets,
                      popen=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(targets["CHECK_STARTED"]) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "interrupted" in err, err
    if as_json:
        data = json.loads(out)
        assert data["exit_status"] == 130 and data["interrupted"] is True, data
        statuses = {r["id"]: r["status"] for r in data["rules"]}
        if command == "check":
            from dlpackshim.testing.producer_check import SPEC
            assert set(SPEC) <= set(statuses), sorted(set(SPEC) - set(statuses))
        assert "not run" in statuses.values() and "n/a" not in [
            r["status"] for r in data["rules"] if not r["evidence"]], data["rules"]
        return
    assert f"dlpackshim {command} {target}" in out                   # the table's title
    assert "interrupted (Ctrl-C): a partial report" in out, out       # its summary line
    assert "not run" in out and "interrupted (Ctrl-C)" in out


def test_info_without_a_library_is_one_line_of_the_diagnosis(tmp_path):
    missing = str(tmp_path / "libdlpackshim.so")
    r = run_python("-m", "dlpackshim", "info", env={"DLPACKSHIM_LIBRARY": missing}, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("libdlpackshim")]
    assert line.startswith("libdlpackshim     NOT LOADED: dlpackshim: cannot load") and missing in line
    assert "DLPACKSHIM_LIBRARY is set" in line                        # the advice, same line
    assert r.stdout.startswith("dlpackshim        ") and "\nPython            " in r.stdout
    assert "\npeer numpy" in r.stdout


@pytest.mark.parametrize("args", [("demo",), ("check", "numpy:arange(3)")])
def test_other_commands_without_a_library_say_so_in_one_message(tmp_path, args):
    missing = str(tmp_path / "libdlpackshim.so")
    r = run_python("-m", "dlpackshim", *args, env={"DLPACKSHIM_LIBRARY": missing}, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert r.stderr.startswith(f"python3 -m dlpackshim {args[0]}: dlpackshim: cannot load")


def test_import_without_a_library_still_raises_oserror(tmp_path):
    """Only `python -m dlpackshim` lets the package import without its library."""
    missing = str(tmp_path / "libdlpackshim.so")
    for code in ("import dlpackshim", "import runpy; runpy.run_module('dlpackshim.__main__')"):
        r = run_python("-c", code, env={"DLPACKSHIM_LIBRARY": missing}, timeout=120)
        assert r.returncode == 1 and "OSError: dlpackshim: cannot load" in r.stderr, r.stderr


def test_strategies_without_hypothesis_name_the_extra():
    code = ("import sys; sys.modules['hypothesis'] = None\n"   # import hypothesis: ImportError
            "try:\n"
            "    from dlpackshim.testing import strategies\n"
            "except ModuleNotFoundError as e:\n"
            "    print(e.name, e)\n")
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("hypothesis dlpackshim.testing.strategies needs hypothesis: "
                        "pip install 'dlpackshim[testing]' (or pip install hypothesis)\n")
