"""Shared set-up for the Python suite: which dlpackshim it tests.

The suite tests what users install. In order:

1. ``make check`` (and anyone who puts the source tree on ``PYTHONPATH``
   themselves): the source tree's package, with the library that
   ``$DLPACKSHIM_LIBRARY`` names (``make check`` sets it);
2. an installed dlpackshim (a wheel, an sdist, ``pip install .``): that one,
   even when pytest runs from the source tree (whose ``dlpackshim/`` folder
   would otherwise shadow it); its loader takes the library bundled in it
   unless ``$DLPACKSHIM_LIBRARY`` says otherwise. An editable install is the
   source tree's package;
3. nothing installed: the source tree's package, whose loader finds the
   library that ``make`` built (``csrc/.libs``).

The header of the test run names the package and the library it loaded.
Tests start child Pythons only through :func:`run_python`, which gives them
the same package (see :data:`PACKAGE_ROOT`).

``DLPACKSHIM_HYPOTHESIS_PROFILE=quick`` runs every property test with 10
examples (the install matrix of ``.ci/run`` uses it on the interpreters
besides the main one); tests that set ``max_examples`` themselves keep it.

The suite writes nothing into the source tree (an sdist packs its
``tests/python``): hypothesis keeps its database and caches, and children
run, in :data:`STATE_DIR`, a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

#: Where this run keeps its state (see the module docstring).
STATE_DIR = tempfile.mkdtemp(prefix="dlpackshim-tests-")
atexit.register(shutil.rmtree, STATE_DIR, True)
#: The working directory of child Pythons: hypothesis in a child (the check
#: commands) writes its caches there, and it holds no dlpackshim/ folder.
CHILD_CWD = os.path.join(STATE_DIR, "children")
os.mkdir(CHILD_CWD)


def _same(a: str, b: str) -> bool:
    return os.path.realpath(a or os.curdir) == os.path.realpath(b)


def _under_root(path: str) -> bool:
    real = os.path.realpath(path)
    return real == os.path.realpath(ROOT) or real.startswith(os.path.realpath(ROOT) + os.sep)


def _find_spec_on(path: list) -> object:
    """dlpackshim's spec with sys.path set to `path`, from every finder: an
    editable install's lives on sys.meta_path, where PathFinder alone (a
    source tree in the working directory, found first) never looks."""
    saved = sys.path[:]
    sys.path[:] = path
    try:
        return importlib.util.find_spec("dlpackshim")
    finally:
        sys.path[:] = saved


def _choose_package() -> str:
    """Arrange sys.path so that `import dlpackshim` finds the package to test;
    return how it was chosen (for the report header)."""
    explicit = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(_same(p, ROOT) for p in explicit):
        return "source tree (on PYTHONPATH)"
    elsewhere = [p for p in sys.path if not _same(p, ROOT)]
    spec = _find_spec_on(elsewhere)
    if spec is not None and spec.origin and not _under_root(spec.origin):
        # `python -m pytest` run from the source tree put it first: drop it.
        sys.path[:] = elsewhere
        return "installed"
    spec = importlib.util.find_spec("dlpackshim")
    if spec is not None and spec.origin:
        try:
            importlib.metadata.distribution("dlpackshim")
            return "editable install (source tree)"
        except importlib.metadata.PackageNotFoundError:
            return "source tree (on sys.path)"
    sys.path.insert(0, ROOT)
    return "source tree (nothing installed)"


CHOSEN = _choose_package()
if HERE not in sys.path:  # producers.py
    sys.path.insert(0, HERE)

_spec = importlib.util.find_spec("dlpackshim")
#: The folder that holds the dlpackshim package under test: child processes
#: put it first on PYTHONPATH so that they import the same package.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(_spec.origin)) if _spec and _spec.origin else ROOT


def run_python(*args, env=None, cwd=CHILD_CWD, python=None, timeout=300, popen=False, **kwargs):
    """Run ``python *args`` (default: this interpreter) in a child that
    imports the dlpackshim under test and the helpers of this folder.

    ``env``: changes to this process's environment (a value of None unsets
    the variable). ``cwd`` defaults to :data:`CHILD_CWD`: ``-c`` and ``-m``
    put the working directory first on ``sys.path``, and a source tree's
    unbuilt ``dlpackshim/`` there would shadow the package under test; what
    the child writes there (hypothesis's caches) stays out of the source
    tree. Other keywords
    go to :func:`subprocess.run` (text; output captured unless `stdout` or
    `stderr` is given). Returns the CompletedProcess; with ``popen=True``, the
    started :class:`subprocess.Popen` instead (no timeout: the caller waits)."""
    child = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            child.pop(key, None)
        else:
            child[key] = value
    child["PYTHONPATH"] = os.pathsep.join(
        p for p in (PACKAGE_ROOT, HERE, child.get("PYTHONPATH")) if p)
    argv = [python or sys.executable, *args]
    if popen:
        return subprocess.Popen(argv, env=child, cwd=cwd, **kwargs)
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(argv, env=child, cwd=cwd, timeout=timeout, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def fast_gc():
    """Freeze what exists before a test module runs (NumPy, PyTorch, JAX,
    Hypothesis: ~250k objects) so that its gc.collect() calls walk only what
    its tests create: a full collection takes ~120 ms with them, ~0.1 ms
    without (the suite makes thousands)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def asan_options(*options: str) -> dict:
    """The environment change that gives a child ASan's ``options`` (e.g.
    ``"detect_leaks=0"``) on top of this process's, under ``make check-asan``
    only (elsewhere: none). The caller says why next to the call."""
    base = os.environ.get("ASAN_OPTIONS")
    return {"ASAN_OPTIONS": ":".join((base, *options))} if base else {}


try:
    from hypothesis import settings as _hsettings
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(os.path.join(STATE_DIR, "hypothesis"))   # not the cwd
    _hsettings.register_profile("quick", max_examples=10)
    if os.environ.get("DLPACKSHIM_HYPOTHESIS_PROFILE"):
        _hsettings.load_profile(os.environ["DLPACKSHIM_HYPOTHESIS_PROFILE"])
except ImportError:  # pragma: no cover - hypothesis is a test requirement
    pass


# ---- assertions about a peer's behaviour, gated on the version that has it ----
#: Why a test needs at least this NumPy: what the older NumPy does instead.
NUMPY_BEHAVIOUR = {
    "2.1": "NumPy < 2.1 speaks only legacy DLPack: its __dlpack__ takes no max_version, "
           "copy or dl_device, np.from_dlpack takes no keywords, imports only 'dltensor' "
           "capsules and makes the array read-only (NumPy 2.1 added DLPack 1.0)",
    "2.4": "NumPy < 2.4 raises ValueError, not BufferError, for a dl_device it cannot "
           "serve, exports NULL strides for compact arrays (allowed before DLPack 1.2) "
           "and rewrites the strides of extent-1 dimensions",
}
TORCH_BEHAVIOUR: dict = {}


def _version(text: str) -> tuple:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    return tuple(parts)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "numpy_min(version, reason=None): the test asserts a NumPy behaviour that "
        "NumPy has from `version` on; skipped on older NumPy (reason: NUMPY_BEHAVIOUR)")
    config.addinivalue_line(
        "markers", "torch_min(version, reason=None): as numpy_min, for PyTorch")


def _gate(item, module: str, table: dict) -> None:
    marks_min = list(item.iter_markers(f"{module}_min"))
    if not marks_min:
        return
    try:
        have = importlib.import_module("numpy" if module == "numpy" else "torch").__version__
    except ImportError:
        return  # the test skips itself (importorskip) or fails on import
    for mark in marks_min:
        need = mark.args[0]
        if _version(have) < _version(need):
            why = mark.kwargs.get("reason") or table.get(need) or f"needs {module} >= {need}"
            pytest.skip(f"{module} {have}: {why}")


def pytest_runtest_setup(item):
    _gate(item, "numpy", NUMPY_BEHAVIOUR)
    _gate(item, "torch", TORCH_BEHAVIOUR)


def pytest_report_header(config):
    try:
        import dlpackshim

        where = f"{os.path.dirname(dlpackshim.__file__)}, library {dlpackshim.library_path}"
    except Exception as exc:  # the tests will say more
        where = f"cannot import it: {type(exc).__name__}: {exc}"
    return [f"dlpackshim: {CHOSEN}: {where}"]


@pytest.fixture
def np():
    """NumPy, or skip."""
    return pytest.importorskip("numpy")


@pytest.fixture
def torch():
    """PyTorch, or skip."""
    return pytest.importorskip("torch")
