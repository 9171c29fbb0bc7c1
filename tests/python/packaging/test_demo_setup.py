"""`bash .ci/setup demo && make demo` (issue 34.5): the demo's set-up installs
what the demo needs and nothing of the CI stack, the full set-up includes it,
and long installs show their progress."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
from typing import Set

import pytest

from conftest import ROOT, run_python

CI = os.path.join(ROOT, ".ci")
DEMO_REQUIREMENTS = os.path.join(CI, "requirements-demo.txt")
pytestmark = pytest.mark.skipif(not os.path.isdir(CI), reason=".ci/ is in a clone, not the sdist")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(path: str) -> Set[str]:
    """The distributions a requirements file names (not its -r includes)."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                names.add(_norm(re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0]))
    return names


def _with_dependencies(names: Set[str]) -> Set[str]:
    """`names` and what they require, as installed here (extras left out)."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_norm(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0]) for r in requires
                 if "extra ==" not in r]
    return seen


# In the child: the demo, with every third-party module that the demo's
# set-up would not install made unimportable (a ModuleNotFoundError, as if
# it were absent): peers' optional imports fail quietly, as they would there.
_DEMO_ALONE = r"""
import importlib.abc, importlib.metadata, json, re, runpy, sys
allowed = set(json.loads(sys.argv[1]))
owners = importlib.metadata.packages_distributions()
blocked = set()

class NotInTheDemoSetUp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in owners.get(name.split(".")[0], [])}
        if dists and not dists & allowed:
            blocked.add(name.split(".")[0])
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NotInTheDemoSetUp())
sys.argv = ["dlpackshim", "demo", "--number", "1"]
try:
    runpy.run_module("dlpackshim", run_name="__main__")
finally:
    print("BLOCKED", " ".join(sorted(blocked)), flush=True)
"""


def test_the_demo_runs_with_only_its_requirements(np):
    allowed = _with_dependencies(_requirement_names(DEMO_REQUIREMENTS)) | {"dlpackshim"}
    r = run_python("-c", _DEMO_ALONE, json.dumps(sorted(allowed)), timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "all exchanges zero-copy and bit-exact" in r.stdout
    if importlib.util.find_spec("torch") is not None:   # the whole demo, PyTorch's rows too
        assert any(line.startswith("torch ") for line in r.stdout.splitlines()), r.stdout


def test_the_demo_set_up_is_light_and_the_full_one_includes_it():
    demo = _requirement_names(DEMO_REQUIREMENTS)
    assert demo == {"cffi", "numpy", "torch"}
    full = os.path.join(CI, "requirements.txt")
    with open(full, encoding="utf-8") as f:
        assert "-r requirements-demo.txt" in f.read().splitlines()
    assert not demo & _requirement_names(full), "a pin kept in two places"


def test_setup_shows_pip_progress_and_refuses_an_unknown_mode():
    with open(os.path.join(CI, "setup"), encoding="utf-8") as f:
        installs = [line for line in f if re.search(r"pip install|apt-get install", line)]
    assert installs and not [line for line in installs if re.search(r"\s-q\b", line)], installs
    # bash is not under test: under `make check-asan` it must not run with the
    # sanitizer preloaded (its own leaks at exit would fail the run).
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")}
    r = subprocess.run(["bash", os.path.join(CI, "setup"), "everything"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 2 and "usage: bash .ci/setup [demo]" in r.stderr
