"""check-consumer: it passes a correct consumer (dlpackshim's own), and catches
broken ones (crash, hang, double delete, wrong exception class, early delete) with
a minimal reproducer."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import textwrap
import time

import pytest

pytest.importorskip("hypothesis")

import dlpackshim as ds  # noqa: E402
from dlpackshim.testing import (PROPERTIES, assert_consumer_conforms,  # noqa: E402
                                assert_producer_conforms, check_consumer)
from conftest import asan_options, run_python  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_cli(*args, timeout=600):
    return run_python("-m", "dlpackshim", *args, timeout=timeout)


def test_cli_check_consumer_dlpackshim_passes():
    r = run_cli("check-consumer", "dlpackshim:from_dlpack", "--examples", "50")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("dlpackshim check-consumer dlpackshim:from_dlpack")
    for pid in PROPERTIES:
        row = [ln for ln in lines if ln.startswith(pid + " ")]
        assert row and row[0].split()[1] in ("pass", "n/a"), (pid, row)
    assert "0 failed" in r.stdout and "0 crashes" in r.stdout


def test_cli_json_and_seed():
    r = run_cli("check-consumer", "dlpackshim:from_dlpack", "--examples", "10", "--seed", "3",
                "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["exit_status"] == 0 and d["summary"]["fail"] == 0
    assert [x["id"] for x in d["rules"]] == list(PROPERTIES)
    assert d["stats"]["cases_run"] > 0 and d["stats"]["raw_capsules"] == "accepted"
    from dlpackshim.testing import DEFECTS
    assert set(d["census"]) == set(DEFECTS)
    assert d["census"]["null-shape"]["both"].startswith("BufferError")
    assert d["census"]["foreign-name"]["capsule-versioned"].endswith(" d0")


@pytest.mark.parametrize("target", ["no_such_module_xyz:from_dlpack", "dlpackshim:no_such_fn",
                                    "dlpackshim"])
def test_cli_usage_errors_exit_2(target):
    r = run_cli("check-consumer", target)
    assert r.returncode == 2 and "check-consumer:" in r.stderr


def aborts_on_negative_strides(x):
    t = ds.from_dlpack(x)
    if any(s < 0 for s, n in zip(t.strides, t.shape) if n > 1):
        os.abort()
    return t


@pytest.mark.numpy_min("2.1")
def test_a_crash_is_a_failure_with_the_minimal_reproducer():
    rep = check_consumer(aborts_on_negative_strides, examples=40,
                         properties=["valid.no_crash", "valid.values"])
    assert rep.failed and rep.exit_status == 1
    r = rep["valid.no_crash"]
    assert r.status == "fail" and "SIGABRT" in r.evidence
    assert "minimal reproducer: TensorSpec(" in r.evidence and "-" in r.evidence.split("strides=")[1]
    assert rep["valid.values"].status == "pass"       # crashes do not hide the other rules
    assert rep.stats["crashes"] >= 1 and rep.stats["worker_starts"] >= 2


def hangs_on_0d(x):
    t = ds.from_dlpack(x)
    if t.ndim == 0:
        time.sleep(3600)
    return t


def test_a_hang_is_a_failure():
    rep = check_consumer(hangs_on_0d, examples=5, timeout=2, properties=["valid.no_crash"])
    r = rep["valid.no_crash"]
    assert r.status == "fail" and "timeout" in r.evidence and "shape" not in r.evidence


_api = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_GetPointer = _api.PyCapsule_GetPointer
_GetPointer.restype = ctypes.c_void_p
_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def deletes_twice(x):
    """Takes the tensor, calls its deleter twice and raises (a double free in life)."""
    cap = x.__dlpack__(max_version=(1, 3))
    ptr = _GetPointer(cap, b"dltensor_versioned")
    deleter = ctypes.c_void_p.from_address(ptr + 16).value
    _DELETER(deleter)(ptr)
    _DELETER(deleter)(ptr)
    raise BufferError("refused after deleting")


@pytest.mark.numpy_min("2.1")
def test_a_double_delete_is_caught():
    rep = check_consumer(deletes_twice, examples=10, properties=["valid.deleter_once"])
    r = rep["valid.deleter_once"]
    assert r.status == "fail" and "[3]" in r.evidence   # 2 by the consumer + the capsule's


def runtime_error_for_3d(x):
    t = ds.from_dlpack(x)
    if t.ndim >= 3:
        raise RuntimeError("3-d not supported")
    return t


def test_a_refusal_of_the_wrong_class_is_caught():
    rep = check_consumer(runtime_error_for_3d, examples=60, properties=["valid.refusal_class"])
    r = rep["valid.refusal_class"]
    assert r.status == "fail" and "RuntimeError" in r.evidence
    shape = r.evidence.split("shape=(")[1].split(")")[0]
    assert shape.count(",") >= 2, r.evidence     # the reproducer is a 3-d (or more) case


def writes_read_only_memory(x, **kw):
    """Imports as read-only, then writes the producer's first byte anyway."""
    import ctypes
    t = ds.from_dlpack(x, **kw)
    if t.nbytes:
        ctypes.memset(t.data_ptr, 0x5A, 1)
    return t


def test_a_consumer_that_writes_read_only_memory_fails_read_only():
    """Its result was read-only, so valid.read_only passed: the producer's
    memory is now compared before and after the call."""
    rep = check_consumer(writes_read_only_memory, examples=20, properties=["valid.read_only"])
    r = rep["valid.read_only"]
    assert r.status == "fail" and "wrote into the producer's READ_ONLY memory" in r.evidence
    assert check_consumer(ds.from_dlpack, examples=20,
                          properties=["valid.read_only"])["valid.read_only"].status == "pass"


def copies_everything(x):
    return ds.from_dlpack(x, copy=True)


@pytest.mark.numpy_min("2.1")
def test_copies_fail_zero_copy_but_not_values():
    rep = check_consumer(copies_everything, examples=20,
                         properties=["valid.values", "valid.zero_copy", "valid.deleter_once"])
    assert rep["valid.values"].status == "pass"
    assert rep["valid.zero_copy"].status == "fail" and "(a copy)" in rep["valid.zero_copy"].evidence
    assert rep["valid.deleter_once"].status == "pass"


def _count_examples(monkeypatch):
    """A list that gets one item per example hypothesis runs (each call of a test
    that check_consumer decorates with @given)."""
    import functools

    import hypothesis

    runs = []
    real_given = hypothesis.given

    def given(*args, **kwargs):
        def decorate(test):
            @functools.wraps(test)
            def counted(*a, **kw):
                runs.append(1)
                return test(*a, **kw)
            return real_given(*args, **kwargs)(counted)
        return decorate
    monkeypatch.setattr(hypothesis, "given", given)
    return runs


def _rows(rep):
    return [(r.id, r.status, r.evidence) for r in rep.rules]


VALID = ["valid.no_crash", "valid.values", "valid.deleter_once", "valid.zero_copy"]


def test_a_passed_search_is_replayed_for_the_next_property(monkeypatch):
    """The properties after the first judge the specs its (deterministic) search
    was given: one hypothesis search, the same table as one search each."""
    from dlpackshim.testing import consumer

    runs = _count_examples(monkeypatch)
    replayed = check_consumer(ds.from_dlpack, examples=40, properties=VALID)
    one = len(runs)
    assert one >= 40 and not replayed.failed, replayed.table()
    monkeypatch.setattr(consumer._Runner, "replay", False)
    searched = check_consumer(ds.from_dlpack, examples=40, properties=VALID)
    assert len(runs) - one == len(VALID) * one   # each search was given the same specs
    assert _rows(replayed) == _rows(searched)
    assert replayed.stats["cases_run"] == searched.stats["cases_run"]
    seeded = check_consumer(ds.from_dlpack, examples=40, properties=VALID, seed=5)
    monkeypatch.setattr(consumer._Runner, "replay", True)
    assert _rows(check_consumer(ds.from_dlpack, examples=40, properties=VALID,
                                seed=5)) == _rows(seeded)


def flattens_3d(x):
    """Imports the tensor, but returns 8 bytes for one of 3 or more dimensions."""
    t = ds.from_dlpack(x)
    return ds.from_dlpack(bytearray(8)) if t.ndim >= 3 else t


@pytest.mark.numpy_min("2.1")
def test_a_replayed_property_that_fails_gets_its_own_search(monkeypatch):
    from dlpackshim.testing import consumer

    runs = _count_examples(monkeypatch)
    props = ["valid.no_crash", "valid.values"]
    replayed = check_consumer(flattens_3d, examples=60, properties=props)
    r = replayed["valid.values"]
    assert r.status == "fail" and "shape (8,) !=" in r.evidence, r.evidence
    one = len(runs)
    monkeypatch.setattr(consumer._Runner, "replay", False)
    assert _rows(check_consumer(flattens_3d, examples=60, properties=props)) == _rows(replayed)
    assert len(runs) == 2 * one   # valid.values failed on the replay: searched and shrunk


def test_a_worker_start_does_not_collect():
    """A forked worker freezes what it inherits without a collection (which would
    copy the parent's pages: most of a crash's cost)."""
    import gc

    from dlpackshim.testing.worker import Worker

    w = Worker(lambda: {"outcome": "ok", "full": gc.get_stats()[2]["collections"],
                        "frozen": gc.get_freeze_count()}, timeout=20)
    try:
        full = gc.get_stats()[2]["collections"]
        r = w.run(())
    finally:
        w.stop()
    assert r["outcome"] == "ok" and r["full"] == full and r["frozen"] > 1000, (r, full)


def test_in_process_mode_gives_the_same_answers():
    a = check_consumer(ds.from_dlpack, examples=15, isolate=False)
    assert not a.failed and a.stats["worker_starts"] == 1


def test_pytest_helpers():
    rep = assert_consumer_conforms(ds.from_dlpack, examples=10)
    assert rep.summary()["fail"] == 0
    with pytest.raises(AssertionError, match="valid.refusal_class"):
        assert_consumer_conforms(runtime_error_for_3d, examples=30,
                                 properties=["valid.refusal_class"])
    assert_consumer_conforms(runtime_error_for_3d, examples=30,
                             properties=["valid.refusal_class"], allow=["valid.refusal_class"])
    np = pytest.importorskip("numpy")
    rep = assert_producer_conforms(lambda: ds.from_dlpack(np.arange(12.0).reshape(3, 4)),
                                   examples=5)
    assert rep.summary()["pass"] > 0


def ignores_copy(x, copy=None):
    return ds.from_dlpack(x)


@pytest.mark.numpy_min("2.1")
def test_copy_true_must_copy():
    rep = check_consumer(ignores_copy, examples=10, properties=["valid.copy_true"])
    assert rep["valid.copy_true"].status == "fail"
    assert "shares the producer's memory" in rep["valid.copy_true"].evidence
    rep = check_consumer(ds.from_dlpack, examples=30, properties=["valid.copy_true"])
    assert rep["valid.copy_true"].status == "pass"


def trusts_the_producers_copy(x, /, *, device=None, copy=None):
    """Asks the producer for the copy and never checks IS_COPIED."""
    return ds.from_dlpack(x.__dlpack__(max_version=(1, 3), copy=copy))


def test_copy_true_tries_a_producer_that_ignores_copy_whatever_the_budget():
    # With one example, only the fixed cases run: a producer that ignores
    # copy is among them (it was left to hypothesis's draws: passed at 1 and 5).
    rep = check_consumer(trusts_the_producers_copy, examples=1, properties=["valid.copy_true"],
                         isolate=False)
    assert rep["valid.copy_true"].status == "fail"
    assert "defect='ignores-copy'" in rep["valid.copy_true"].evidence


def test_jax_is_checked_without_starting_its_backend_before_the_fork():
    """JAX's backend, started in the checker's process (its default host
    device, jax.devices) before the worker was forked, deadlocked the worker
    at its first compile: a valid int64 tensor was reported as a hang."""
    pytest.importorskip("jax")
    code = textwrap.dedent("""
        import sys
        import jax.dlpack
        from dlpackshim.testing import TensorSpec, check_consumer
        rep = check_consumer(jax.dlpack.from_dlpack, examples=1, properties=["valid.no_crash"],
                             timeout=60)
        print(rep["valid.no_crash"].status, rep["valid.no_crash"].evidence[:200])
        print("backends started here:", "jax._src.xla_bridge" in sys.modules and
              bool(sys.modules["jax._src.xla_bridge"]._backends))
    """)
    # `make check-asan`: the report's census gives JAX broken producers, and
    # JAX segfaults on some (its crashes are the census's results); ASan's
    # handler would report each as an error of this process.
    r = run_python("-c", code, env=asan_options("handle_segv=0"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("pass "), r.stdout
    assert "backends started here: False" in r.stdout


def test_copy_true_is_not_applicable_without_the_keyword():
    rep = check_consumer(lambda x: ds.from_dlpack(x), examples=5, properties=["valid.copy_true"])
    assert rep["valid.copy_true"].status == "n/a"


def test_every_defect_and_property_is_documented():
    from dlpackshim.testing import DEFECTS
    with open(os.path.join(ROOT, "docs", "testing.md"), encoding="utf-8") as f:
        text = f.read()
    for name in list(DEFECTS) + list(PROPERTIES):
        assert f"`{name}`" in text, name


def trusts_the_capsule(x, device=None):
    """Asks for the device, then imports whatever comes back."""
    return ds.from_dlpack(x.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))


def never_asks(x, device=None):
    """Takes device= but never passes it on."""
    return ds.from_dlpack(x)


def test_dl_device_must_be_asked_for_and_checked():
    rep = check_consumer(trusts_the_capsule, examples=5, properties=["protocol.dl_device"])
    rule = rep["protocol.dl_device"]
    assert rule.status == "fail" and "imported the (kDLCUDA, 0) tensor" in rule.evidence
    rep = check_consumer(never_asks, examples=5, properties=["protocol.dl_device"])
    rule = rep["protocol.dl_device"]
    # asked plainly, then again with the stream named (GPU data): never dl_device
    assert rule.status == "fail" and "dl_device [None, None], not (kDLCPU, 0)" in rule.evidence
    rep = check_consumer(ds.from_dlpack, examples=5, properties=["protocol.dl_device"])
    assert rep["protocol.dl_device"].status == "pass", rep["protocol.dl_device"].evidence
    rep = check_consumer(lambda x: ds.from_dlpack(x), examples=5,
                         properties=["protocol.dl_device"])
    assert rep["protocol.dl_device"].status == "n/a"


def calls_the_table_blindly(x):
    """A consumer that trusts a 1.x exchange table's from_py_object entry: it
    calls it without checking for NULL and reads the result's version."""
    table = _GetPointer(type(x).__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    entry = ctypes.cast(table + 24, ctypes.POINTER(ctypes.c_void_p))[0]   # after header, allocator
    if not entry:
        os.abort()     # what calling a NULL entry does (abort: no sanitizer report)
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(entry)
    version = ctypes.c_uint32(1)
    out = ctypes.c_void_p(ctypes.addressof(version))   # what a failed entry leaves
    fn(x, ctypes.byref(out))
    if not out.value:
        os.abort()     # what reading the result's version does when it is NULL
    return ds.from_dlpack(x)


def test_bad_exchange_tables_are_caught():
    rep = check_consumer(calls_the_table_blindly, examples=5, properties=["hostile.no_crash"])
    rule = rep["hostile.no_crash"]
    assert rule.status == "fail" and "SIG" in rule.evidence, rule.evidence
    census = rep.census
    assert census["exchange-null-out"]["both"].startswith("crash")
    assert census["exchange-null-entries"]["both"].startswith("crash")
    assert not census["exchange-fails-silently"]["both"].startswith("crash")  # out untouched
    assert "defect='exchange-" in rule.evidence and "Extension modules" not in rule.evidence


def test_an_exception_group_of_failures_is_one_failure():
    """hypothesis (6.141 on Python 3.9) may raise a group of distinct failures;
    the checker reports the first, not an error of its own."""
    from dlpackshim.testing.consumer import _first_assertion

    class Group(Exception):
        def __init__(self, *subs):
            super().__init__("group")
            self.exceptions = subs

    first = AssertionError("crash: killed by SIGABRT")
    assert _first_assertion(Group(ValueError("x"), Group(first, AssertionError("b")))) is first
    assert _first_assertion(Group(ValueError("x"))) is None
    assert _first_assertion(first) is first


# ---- a consumer that attacks the checker ---------------------------------------------

HOSTILE = {
    # the child of a fork returns into the checker's worker and runs on
    "forks": "import os, dlpackshim\n"
             "def from_dlpack(x):\n"
             "    os.fork()\n"
             "    return dlpackshim.from_dlpack(x)\n",
    # junk on every open descriptor, the worker's result pipe among them
    "scribbles": "import os, dlpackshim\n"
                 "def from_dlpack(x):\n"
                 "    for fd in range(3, 256):\n"
                 "        try:\n"
                 "            os.write(fd, b'\\xff' * 64)\n"
                 "        except OSError:\n"
                 "            pass\n"
                 "    return dlpackshim.from_dlpack(x)\n",
    "hangs": "import time\n"
             "def from_dlpack(x):\n"
             "    time.sleep(3600)\n",
    # forks a child that sleeps on (holding the result pipe), then crashes
    "forks_then_crashes": "import ctypes, os, time\n"
                          "def from_dlpack(x, **kw):\n"
                          "    if os.fork() == 0:\n"
                          "        time.sleep(60)\n"
                          "        os._exit(0)\n"
                          "    ctypes.string_at(0)\n",
}


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """Importable modules named after HOSTILE's keys (children find them on PYTHONPATH)."""
    for name, text in HOSTILE.items():
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return tmp_path


def test_a_consumer_that_forks_does_not_kill_the_checker(hostile):
    r = run_cli("check-consumer", "forks:from_dlpack", "--examples", "5", timeout=300)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr
    assert "cases (5 examples per property)" in r.stdout


def test_a_consumer_that_forks_then_crashes_is_a_crash_not_a_hang(hostile):
    """The worker's death was noticed only as the end of its result pipe,
    which a child it forked kept open: each such crash waited for the
    timeout (20 s) and was reported as a hang. The worker is looked in on
    while its answer is awaited."""
    import time
    started = time.monotonic()
    # `make check-asan`: the crashes are the results; ASan's handler would
    # report each as an error of the worker.
    r = run_python("-m", "dlpackshim", "check-consumer", "forks_then_crashes:from_dlpack",
                   "--examples", "1", "--json", env=asan_options("handle_segv=0"), timeout=300)
    took = time.monotonic() - started
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["id"]: row for row in json.loads(r.stdout)["rules"]}
    assert "crash: killed by SIG" in rows["valid.no_crash"]["evidence"], rows["valid.no_crash"]
    assert "timeout" not in r.stdout and took < 120, took


def test_a_garbled_result_is_a_failure_with_its_reproducer(hostile):
    r = run_cli("check-consumer", "scribbles:from_dlpack", "--examples", "5", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL valid.no_crash")]
    assert row, r.stdout
    evidence = r.stdout.split("FAIL valid.no_crash", 1)[1].splitlines()[1]
    assert "garbled result" in evidence and "reproducer: TensorSpec(" in evidence
    assert "cases (5 examples per property)" in r.stdout


def test_results_are_framed_and_checked():
    from dlpackshim.testing import worker

    rd, wr = os.pipe()
    try:
        worker._send(wr, {"outcome": "accept"})
        assert worker._recv(rd, os.getpid(), 5) == {"outcome": "accept"}
        worker._send(wr, {"outcome": "accept"})
        with pytest.raises(worker._Garbled, match="not from the worker"):
            worker._recv(rd, os.getpid() + 1, 5)   # a forked child's answer
        os.read(rd, 1 << 16)
        os.write(wr, worker._HEAD.pack(worker._MAGIC, os.getpid(), 1 << 40))
        with pytest.raises(worker._Garbled, match="bytes"):
            worker._recv(rd, os.getpid(), 5)       # no MemoryError: the length is bounded
        os.write(wr, b"\xff" * worker._HEAD.size)
        with pytest.raises(worker._Garbled, match="where a frame was expected"):
            worker._recv(rd, os.getpid(), 5)
    finally:
        os.close(rd)
        os.close(wr)


def always_hangs(x):
    time.sleep(3600)


def test_a_search_stops_at_its_first_hang():
    props = ["valid.no_crash", "valid.values", "hostile.no_crash"]
    t0 = time.monotonic()
    rep = check_consumer(always_hangs, examples=50, timeout=1, properties=props)
    took = time.monotonic() - t0
    assert rep["valid.no_crash"].status == "fail" and "timeout" in rep["valid.no_crash"].evidence
    assert "reproducer: TensorSpec(" in rep["valid.no_crash"].evidence
    assert rep["valid.values"].status == "error" and "first hang" in rep["valid.values"].evidence
    assert rep["hostile.no_crash"].status == "fail"
    # probes (3), one hang per search (valid.values shares valid.no_crash's first
    # case), one for the census before its rows are marked
    assert rep.stats["cases_run"] <= 8 and took < 40, (rep.stats, took)
    assert any(v == "not run (after a hang)" for row in rep.census.values() for v in row.values())


def test_max_time_reports_what_was_not_run(hostile):
    t0 = time.monotonic()
    r = run_cli("check-consumer", "hangs:from_dlpack", "--max-time", "2", timeout=120)
    assert time.monotonic() - t0 < 60
    assert r.returncode == 3, r.stdout + r.stderr
    for pid in PROPERTIES:
        row = [ln for ln in r.stdout.splitlines() if ln.startswith(pid + " ")]
        assert row and "not run" in row[0], (pid, row)
    assert f"{len(PROPERTIES)} not run" in r.stdout


def test_max_time_stops_a_healthy_run_too():
    """The budget bounds the whole run: cached cases (replays, hypothesis's
    own) ran on past it, ~1.3 s a property (4-5x the budget in all)."""
    rep = check_consumer(ds.from_dlpack, examples=100000, max_time=3)
    statuses = [r.status for r in rep.rules]
    assert "not run" in statuses and "fail" not in statuses, rep.table()
    assert rep.exit_status == 3 and rep.stats["seconds"] < 6, rep.stats
    assert [r.id for r in rep.rules] == list(PROPERTIES)


def _cli_on_a_terminal(*args, timeout=300):
    """Run the CLI with stderr on a pseudo-terminal; return (status, stdout, what the
    terminal showed)."""
    import pty
    import select

    master, slave = pty.openpty()
    p = run_python("-m", "dlpackshim", *args, popen=True, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:   # EIO: the child closed its end
                    break
                if not chunk:
                    break
                shown += chunk
            elif p.poll() is not None:
                break
        out = p.stdout.read().decode()
        status = p.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()
        os.close(master)
    return status, out, shown.decode("utf-8", "replace")


def test_progress_shows_on_a_terminal_only():
    status, out, shown = _cli_on_a_terminal("check-consumer", "dlpackshim:from_dlpack",
                                            "--examples", "300")
    assert status == 0, out + shown
    assert "check-consumer: " in shown and " cases, 0 failing so far, " in shown, shown
    assert "\r" in shown and "failing so far" not in out
    piped = run_cli("check-consumer", "dlpackshim:from_dlpack", "--examples", "300")
    assert piped.returncode == 0 and "\r" not in piped.stderr + piped.stdout
    assert "failing so far" not in piped.stderr + piped.stdout


def _asking(max_version=(1, 3), legacy_stream=None):
    """A consumer that asks for max_version, and retries a producer that
    refuses the keyword with stream=legacy_stream."""
    def consume(x, copy=None, device=None):
        try:
            cap = x.__dlpack__(stream=None, max_version=max_version)
        except TypeError:
            cap = x.__dlpack__(stream=legacy_stream)
        return ds.from_dlpack(cap)
    return consume


@pytest.mark.parametrize("consumer, failed", [
    (_asking(), set()),
    (_asking(max_version=(2, 0)), {"protocol.max_version"}),   # passed: only >= 1 was read
    (_asking(max_version=(1, -1)), {"protocol.max_version"}),
    (_asking(legacy_stream=0), {"protocol.stream_cpu"}),       # passed: retries were not read
])
def test_the_protocol_probes_read_the_whole_version_and_every_call(consumer, failed):
    rep = check_consumer(consumer, examples=1,
                         properties=["protocol.max_version", "protocol.stream_cpu"])
    assert {r.id for r in rep.rules if r.status == "fail"} == failed, rep.table()


def test_a_legal_defect_refused_with_its_dtype_is_no_failure():
    """A consumer without bfloat16 and float8 refused them under a legal
    defect too (a NULL deleter, a producer ignoring copy), and
    hostile.exception failed it, at 300 examples and not at 50."""
    def no_bfloat16_or_float8(x, copy=None, device=None):
        t = ds.from_dlpack(x)
        if t.dtype.code in (4, 7, 8, 9, 10, 11, 12, 13, 14):
            raise BufferError("unsupported dtype")
        return t

    rep = check_consumer(no_bfloat16_or_float8, examples=300, properties=["hostile.exception"])
    assert rep["hostile.exception"].status == "pass", rep.table()


def test_max_time_keeps_the_verdicts_of_the_probes():
    """stream=0 was judged in the first probe, yet the run said `not run`
    for it and exited 3, not 1."""
    def stream_0(x, copy=None, device=None):
        return ds.from_dlpack(x.__dlpack__(stream=0, max_version=(1, 3)))

    rep = check_consumer(stream_0, examples=100000, max_time=4)   # the probes take ~0.1 s
    assert rep["protocol.stream_cpu"].status == "fail", rep.table()
    assert rep["protocol.max_version"].status == "pass", rep.table()
    assert rep.exit_status == 1 and [r.id for r in rep.rules] == list(PROPERTIES)


# ---- a hostile user's attack on the checker (2026-11-29) -------------------------------

def returns_its_input(x, **kw):
    return x


def test_the_checkers_own_read_back_is_not_the_consumers_call():
    """A consumer that returns its input never calls __dlpack__; the checker,
    reading the result back, did, and its calls were judged as the
    consumer's: the protocol probes passed."""
    rep = check_consumer(returns_its_input, examples=1, isolate=False,
                         properties=["protocol.max_version", "protocol.legacy_fallback",
                                     "protocol.stream_cpu"])
    for pid in ("protocol.max_version", "protocol.legacy_fallback", "protocol.stream_cpu"):
        assert rep[pid].status == "fail", (pid, rep[pid].evidence)
        assert "without calling __dlpack__" in rep[pid].evidence


def always_hangs(x, **kw):
    time.sleep(3600)


def test_a_hang_seen_before_the_time_budget_ran_out_still_fails():
    """The first probe hung, the budget ran out in the next: every rule was
    "not run", exit status 3, the hang forgotten."""
    rep = check_consumer(always_hangs, examples=1, timeout=1, max_time=1.5,
                         properties=["valid.no_crash", "protocol.max_version"])
    assert rep["valid.no_crash"].status == "fail", rep.table()
    assert "timeout" in rep["valid.no_crash"].evidence and "reproducer" in rep["valid.no_crash"].evidence
    assert rep.exit_status == 1


@pytest.mark.parametrize("kw, exc", [
    (dict(timeout=0), ValueError), (dict(timeout=-1), ValueError),
    (dict(timeout=float("nan")), ValueError), (dict(timeout="5"), TypeError),
    (dict(max_time=0), ValueError), (dict(max_time=-5), ValueError),
    (dict(examples=0), ValueError), (dict(examples=2.5), TypeError),
    (dict(properties=["bogus"]), ValueError), (dict(properties=[]), ValueError),
])
def test_arguments_the_command_line_refuses_are_refused_before_any_case(kw, exc):
    """timeout=0 reported a correct consumer as hanging; properties=['bogus']
    was a KeyError after the probes; [] checked nothing and passed."""
    calls = []
    with pytest.raises(exc, match="check_consumer: "):
        check_consumer(lambda x, **k: calls.append(x), isolate=False, **kw)
    assert calls == []


def asks_the_host_and_takes_anything(x, device=None, **kw):
    return ds.from_dlpack(x.__dlpack__(dl_device=(1, 0), max_version=(1, 3)))


def test_the_dl_device_reproducer_is_the_producer_that_fails():
    """Only the producer that ignores dl_device is mishandled here: the
    reproducer printed was the honest one (no defect=), which passes."""
    rep = check_consumer(asks_the_host_and_takes_anything, examples=1, isolate=False,
                         properties=["protocol.dl_device"], host_device="cpu")
    r = rep["protocol.dl_device"]
    assert r.status == "fail" and "imported the (kDLCUDA, 0) tensor" in r.evidence, r.evidence
    assert "defect='ignores-dl-device'" in r.evidence.split("reproducer:")[1]


def test_a_message_no_stream_can_encode_is_escaped_in_the_table():
    """A consumer's BufferError('\\ud800') crashed the table's print."""
    from dlpackshim.testing.report import Report, Rule
    rep = Report("t", "l")
    rep.rules.append(Rule("valid.no_crash", "spec", "fail", "raise \ud800"))
    text = rep.table()
    text.encode("utf-8")   # strict: no lone surrogate left
    assert "\\ud800" in text


def test_commands_leave_nothing_in_the_working_directory(tmp_path):
    """hypothesis wrote .hypothesis/constants/ where each command ran."""
    for args in (["check-consumer", "numpy:from_dlpack", "--examples", "2"],
                 ["check", "numpy:arange(12.).reshape(3,4)", "--examples", "2"]):
        # `make check-asan`: NumPy's crashes in the worker are results, not reports
        r = run_python("-m", "dlpackshim", *args, cwd=str(tmp_path), timeout=600,
                       env=asan_options("detect_leaks=0", "handle_segv=0"))
        assert r.returncode in (0, 1), r.stderr
    assert os.listdir(tmp_path) == []


def test_a_target_raising_any_baseexception_at_import_is_a_usage_error(tmp_path):
    """A BaseException of its own, or GeneratorExit, at import: a raw
    traceback and exit 1 (check-consumer), a crash row (check)."""
    (tmp_path / "base_at_import.py").write_text("class B(BaseException): pass\nraise B('own')\n")
    (tmp_path / "genexit_at_import.py").write_text("raise GeneratorExit\n")
    env = {"PYTHONPATH": str(tmp_path)}
    for mod in ("base_at_import", "genexit_at_import"):
        for cmd in ("check-consumer", "check"):
            r = run_python("-m", "dlpackshim", cmd, f"{mod}:f", env=env, timeout=300)
            assert r.returncode == 2, (cmd, mod, r.stdout, r.stderr)
            assert f"cannot import '{mod}'" in r.stderr and "Traceback" not in r.stderr


def test_sigterm_stops_what_the_consumer_forked(tmp_path):
    """The worker died with the command (PR_SET_PDEATHSIG), but the children a
    consumer forked in the worker's process group were left running."""
    import signal
    pidfile = tmp_path / "child.pid"
    (tmp_path / "forks.py").write_text(textwrap.dedent(f"""
        import os, time, numpy as np
        def consume(x, **kw):
            pid = os.fork()
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            with open({str(pidfile)!r}, "a") as f:
                f.write(f"{{pid}}\\n")
            time.sleep(0.2)
            return np.from_dlpack(x, **kw)
    """))
    proc = run_python("-m", "dlpackshim", "check-consumer", "forks:consume", "--examples", "50",
                      # `make check-asan`: NumPy's crashes in the worker are results
                      env={"PYTHONPATH": str(tmp_path),
                           **asan_options("detect_leaks=0", "handle_segv=0")}, popen=True,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.5)
    alive = []
    for pid in map(int, pidfile.read_text().split()):
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] != "Z":
                    alive.append(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def test_main_called_from_python_leaves_signals_and_hypothesis_as_they_were():
    """The SIGTERM handler was installed for every command and never removed
    (a later SIGTERM to the program became a SystemExit), raised ValueError
    when main() ran on a thread, and hypothesis's home stayed moved."""
    code = textwrap.dedent("""
        import contextlib, io, signal, threading
        import hypothesis.configuration as hc
        from dlpackshim.__main__ import main
        home = hc.storage_directory("x", intent_to_write=False).path
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["check", "numpy:arange(3.)", "--examples", "1"])
        print(rc, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
              hc.storage_directory("x", intent_to_write=False).path == home)
        out = []
        def on_thread():
            with contextlib.redirect_stdout(io.StringIO()):
                out.append(main(["check", "numpy:arange(3.)", "--examples", "1"]))
        t = threading.Thread(target=on_thread); t.start(); t.join()
        print(out)
    """)
    r = run_python("-c", code, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["0 True True", "[0]"], r.stdout


def test_sigterm_while_the_target_imports_is_an_exit_not_a_usage_error(tmp_path):
    """SystemExit raised by the handler was caught as the target's own exit."""
    import signal
    (tmp_path / "slow_import.py").write_text(
        "import time\nopen(__file__ + '.started', 'w').close()\ntime.sleep(30)\n"
        "def f(x, **kw): pass\n")
    proc = run_python("-m", "dlpackshim", "check-consumer", "slow_import:f",
                      env={"PYTHONPATH": str(tmp_path)}, popen=True,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if (tmp_path / "slow_import.py.started").exists():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert "cannot import" not in err


@pytest.mark.parametrize("cmd", ["check-consumer", "check"])
def test_a_keyboardinterrupt_raised_at_import_is_a_usage_error(tmp_path, cmd):
    """No Ctrl-C was pressed: check-consumer said "interrupted", exit 130;
    check, whose worker imports the target, an error row, exit 1."""
    (tmp_path / "kbi_at_import.py").write_text("raise KeyboardInterrupt\n")
    r = run_python("-m", "dlpackshim", cmd, "kbi_at_import:f",
                   env={"PYTHONPATH": str(tmp_path)}, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "KeyboardInterrupt at kbi_at_import.py:1" in r.stderr


def hangs_when_asked_for_the_host(x, device=None, **kw):
    if device is not None:
        time.sleep(3600)
    return ds.from_dlpack(x)


def test_a_hang_before_the_budget_ran_out_is_credited_to_its_rule():
    """The hang of the dl_device probe was pinned on valid.no_crash, with a
    reproducer (no device=) that does not hang."""
    rep = check_consumer(hangs_when_asked_for_the_host, examples=1, timeout=1, max_time=1.5,
                         properties=["protocol.dl_device", "valid.no_crash"], host_device="cpu")
    r = rep["protocol.dl_device"]
    assert r.status == "fail" and "timeout" in r.evidence and "device=<host>" in r.evidence
    assert rep["valid.no_crash"].status != "fail"


def test_a_report_prints_on_a_console_that_cannot_encode_the_message(tmp_path):
    """PYTHONIOENCODING=ascii: 'refusé €' in a consumer's message ended the
    report in a UnicodeEncodeError."""
    (tmp_path / "accents.py").write_text(
        "def f(x, **kw):\n    raise RuntimeError('refus\\u00e9 \\u20ac')\n")
    r = run_python("-m", "dlpackshim", "check-consumer", "accents:f", "--examples", "1",
                   env={"PYTHONPATH": str(tmp_path), "PYTHONIOENCODING": "ascii"}, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "refus\\xe9 \\u20ac" in r.stdout
