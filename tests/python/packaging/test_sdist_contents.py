"""What the sdist packs (issue 34.2): no test state. The suite and its children
write nothing into the source tree, and `python -m build --sdist` leaves out
what an in-tree `make check` leaves behind (automake's logs, an old
hypothesis folder), which hold paths of the machine."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import CHILD_CWD, HERE, ROOT, run_python


def _snapshot(folder: str) -> set:
    return {os.path.relpath(os.path.join(d, name), folder)
            for d, dirs, files in os.walk(folder) for name in dirs + files}


def test_hypothesis_keeps_its_state_outside_the_source_tree():
    configuration = pytest.importorskip("hypothesis.configuration")
    where = os.path.realpath(configuration.storage_directory("examples",
                                                             intent_to_write=False).path)
    assert not where.startswith(os.path.realpath(ROOT) + os.sep), where


def test_a_child_running_a_check_writes_nothing_into_the_tests_folder(tmp_path):
    """A user's own consumer, in a module of their project: hypothesis caches
    what it reads of such local code (an installed package's it leaves
    alone), in the working directory; the command keeps them in a
    temporary folder of its own, removed at exit."""
    pytest.importorskip("hypothesis")
    (tmp_path / "my_consumer.py").write_text(
        "import dlpackshim\n\n\ndef from_dlpack(x, **kw):\n"
        "    return dlpackshim.from_dlpack(x, **kw)\n")
    before, before_cwd = _snapshot(HERE), _snapshot(CHILD_CWD)
    r = run_python("-m", "dlpackshim", "check-consumer", "my_consumer:from_dlpack",
                   "--examples", "2", env={"PYTHONPATH": str(tmp_path)}, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert {p for p in _snapshot(HERE) - before if "__pycache__" not in p} == set()
    assert _snapshot(CHILD_CWD) - before_cwd == set()


# The source tree as an sdist build sees it: what MANIFEST.in and setup.py read.
_SKIP = shutil.ignore_patterns(".git", ".venv", "build-asan", "wheelhouse", "dist", "build",
                               "*.egg-info", ".libs", ".deps", "*.o", "*.lo", "*.la", "*.so*",
                               "autom4te.cache", "target", "__pycache__", ".hypothesis")


def test_the_sdist_packs_no_test_state(tmp_path):
    if importlib.util.find_spec("build") is None or not os.path.exists(
            os.path.join(ROOT, "MANIFEST.in")):
        pytest.skip("needs the `build` package and a source tree")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP, symlinks=True)
    leftovers = ["tests/python/run-pytest.sh.log", "tests/python/run-pytest.sh.trs",
                 "tests/python/.hypothesis/examples/0123/4567", "test-suite.log",
                 "tests/c/test_error.log", "tests/c/test_error.trs"]
    for name in leftovers:
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"left by a test run in {ROOT}\n")
    r = run_python("-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                   str(src), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [sdist] = (tmp_path / "dist").iterdir()
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        names = [m.name.split("/", 1)[1] for m in members]
        for name in leftovers:
            assert name not in names, f"the sdist packs {name}"
        assert not [n for n in names if ".hypothesis" in n or n.endswith((".log", ".trs"))]
        assert "tests/python/conftest.py" in names and "csrc/dlpackshim.h" in names
        for m in members:   # no file of it names a path of this machine
            assert ROOT.encode() not in tar.extractfile(m).read(), m.name


def _sources(folder: str) -> set:
    """The source files under folder, by their suffix (what a build or a test
    run leaves there has others: .log, .trs, .so, .pyc)."""
    return {os.path.relpath(os.path.join(d, name), ROOT)
            for d, dirs, files in os.walk(folder)
            if "__pycache__" not in d.split(os.sep) and ".hypothesis" not in d.split(os.sep)
            for name in files
            if name.endswith((".py", ".pyi", ".sh", ".txt", ".md")) or name == "py.typed"}


def test_make_dist_lists_every_file_of_the_suite_and_the_package():
    """tests/python/local.mk's EXTRA_DIST is what `make dist` packs of the
    suite and of dlpackshim/: exactly the files there are, none missing (a new
    test) and none that is gone (a moved or removed module)."""
    package = os.path.join(ROOT, "dlpackshim")
    if not os.path.isdir(package):
        pytest.skip("no source tree here (dlpackshim/)")
    with open(os.path.join(HERE, "local.mk"), encoding="utf-8") as f:
        listed = set(re.findall(r"^\t((?:tests/python|dlpackshim)/\S+)", f.read(), re.M))
    present = _sources(HERE) | _sources(package)
    assert sorted(present - listed) == [], "not in tests/python/local.mk's EXTRA_DIST"
    assert sorted(listed - present) == [], "in tests/python/local.mk's EXTRA_DIST, but not here"


def test_make_dist_packs_the_examples_and_the_ci_files():
    """What the suite runs outside tests/python and dlpackshim/ (an example, the
    set-up's requirements) is in an EXTRA_DIST: distcheck's suite once failed
    without examples/shared_memory.py and .ci/requirements-demo.txt."""
    if not os.path.exists(os.path.join(ROOT, ".git")) or shutil.which("git") is None:
        pytest.skip("not a clone: git ls-files names the files")

    def tracked(*patterns):
        return subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.split()

    listed = set()
    for path in ["Makefile.am"] + tracked("*.mk"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            listed |= set(re.findall(r"[\w./+-]+", f.read()))
    # The .mk files themselves are packed by the `include` that reads them.
    assert [n for n in tracked("examples", ".ci") if n not in listed and not n.endswith(".mk")] == []
