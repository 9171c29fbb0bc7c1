"""The documentation is checked like code.

* Every ```python block of README.md and docs/*.md runs: each file's blocks
  in order, in one namespace, in a fresh interpreter (cwd: a temporary
  directory). A file whose blocks import a module that is not installed
  (torch, jax, mpi4py) is skipped, naming the module. A block whose first
  line is ``# doctest: skip`` does not run: kept for the few snippets that
  cannot run here (several MPI ranks, a GPU); it must say why.
  Blocks that start with ``>>>`` run as doctests (output compared).
* The ``>>>`` examples in the package's docstrings run (doctest.testmod on
  every dlpackshim module, ELLIPSIS | NORMALIZE_WHITESPACE).
* docs/python-api.md and docs/c-api.md are what docs/gen_python_api.py and
  docs/gen_c_api.py write today; every public name (and every public
  method/property of a public class) has a docstring; every exported C
  function has a doc comment and appears in docs/c-api.md.
"""

from __future__ import annotations

import ast
import doctest
import glob
import importlib
import importlib.util
import json
import os
import pkgutil
import re
import shutil
import subprocess
from typing import List, Tuple

import pytest

from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DOCS = os.path.join(ROOT, "docs")

SKIP_MARKER = "# doctest: skip"
DOC_FILES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(DOCS, "*.md")))
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.S | re.M)


def _load(name: str):
    """A module of docs/ (the generators), imported from its path."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(DOCS, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def python_blocks(path: str) -> List[Tuple[int, str]]:
    """(first line number, source) of each ```python block of a Markdown file."""
    return fenced_blocks(path, ("python", "py", "pycon"))


def fenced_blocks(path: str, infos: Tuple[str, ...]) -> List[Tuple[int, str]]:
    """(first line number, source) of each block of a Markdown file whose
    info string is one of `infos`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = []
    for m in FENCE.finditer(text):
        if m.group("info").strip() not in infos:
            continue
        lineno = text.count("\n", 0, m.start("body")) + 1
        indent = m.group("indent")
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in m.group("body").splitlines(True))
        blocks.append((lineno, body))
    return blocks


def _imports(source: str) -> List[str]:
    """Top-level package names a block imports (>>> prompts stripped)."""
    if source.lstrip().startswith(">>>"):
        source = "\n".join(line[4:] for line in source.splitlines()
                           if line.startswith((">>> ", "... ")))
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


# The child: runs the blocks it reads from stdin in one namespace. Line
# numbers in tracebacks are those of the Markdown file.
_RUNNER = r"""
import doctest, json, sys
path, blocks = json.load(sys.stdin)
ns = {"__name__": "__main__"}
flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
for lineno, src in blocks:
    print(f"--- {path}:{lineno}", flush=True)
    if src.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(src, ns, f"{path}:{lineno}", path, lineno - 1)
        runner = doctest.DocTestRunner(optionflags=flags)
        runner.run(test, clear_globs=False)
        if runner.failures:
            sys.exit(1)
    else:
        exec(compile("\n" * (lineno - 1) + src, path, "exec"), ns)
print("--- all blocks ran", flush=True)
"""


@pytest.mark.parametrize("path", [p for p in DOC_FILES if python_blocks(p)],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_markdown_python_blocks_run(path, tmp_path):
    blocks = python_blocks(path)
    run = [(n, src) for n, src in blocks if not src.lstrip().startswith(SKIP_MARKER)]
    for n, src in blocks:
        if src.lstrip().startswith(SKIP_MARKER):
            reason = src.lstrip()[len(SKIP_MARKER):].splitlines()[0].strip()
            assert reason, f"{path}:{n}: '{SKIP_MARKER}' must say why, e.g. '(needs a GPU)'"
    if not run:
        pytest.skip(f"every ```python block of {os.path.basename(path)} is marked '{SKIP_MARKER}'")
    for n, src in run:
        for mod in _imports(src):
            if importlib.util.find_spec(mod) is None:
                pytest.skip(f"{os.path.basename(path)}:{n} needs {mod}, which is not installed")
    proc = run_python("-c", _RUNNER, input=json.dumps([path, run]), cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.endswith("--- all blocks ran\n"), (
        f"a ```python block of {path} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def test_readme_c_program_compiles_and_runs(tmp_path):
    """README's C block is a whole program: it compiles warning-free against
    the header and runs against the library under test (exit 0)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    header = os.path.join(ROOT, "csrc", "dlpackshim.h")
    if cc is None or not os.path.exists(header):
        pytest.skip("needs a C compiler and csrc/dlpackshim.h (a clone or the sdist)")
    import dlpackshim

    [(lineno, src)] = fenced_blocks(os.path.join(ROOT, "README.md"), ("c",))
    (tmp_path / "readme.c").write_text(f"#line {lineno} \"README.md\"\n" + src)
    lib = os.path.realpath(dlpackshim.library_path)
    # The compiler is not under test: under `make check-asan` it must not run
    # with the sanitizer preloaded (gcc's own leaks would fail it).
    cc_env = {k: v for k, v in os.environ.items()
              if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")}
    build = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-I",
                            os.path.dirname(header), "readme.c", lib, "-o", "readme"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=cc_env)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "readme")], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(lib)))
    assert run.returncode == 0 and run.stderr == "", (run.stdout, run.stderr)


def test_every_doc_file_is_checked():
    """README.md and each docs/*.md are in the list above; the docs exist."""
    names = {os.path.basename(p) for p in DOC_FILES}
    for required in ("README.md", "tutorial.md", "python-api.md", "c-api.md",
                     "behaviour.md", "benchmarks.md"):
        assert required in names, f"docs/{required} is missing"
    assert len(python_blocks(os.path.join(DOCS, "tutorial.md"))) >= 10


def test_skip_markers_are_few():
    """`# doctest: skip` is for the snippets that cannot run here, not a way out."""
    skipped = [f"{os.path.basename(p)}:{n}" for p in DOC_FILES for n, src in python_blocks(p)
               if src.lstrip().startswith(SKIP_MARKER)]
    assert len(skipped) <= 3, f"too many skipped ```python blocks: {skipped}"


def _modules():
    import dlpackshim

    names = ["dlpackshim"] + [f"dlpackshim.{m.name}" for m in pkgutil.iter_modules(dlpackshim.__path__)]
    return [n for n in names if n != "dlpackshim.__main__"]


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(mod, optionflags=flags, verbose=False, report=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) of {name} failed (run " \
                               f"python3 -m doctest -v on it)"


def test_python_api_md_is_up_to_date():
    gen = _load("gen_python_api")
    with open(os.path.join(DOCS, "python-api.md"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == gen.render(), (
        "docs/python-api.md is stale: run `python3 docs/gen_python_api.py` (after `make`) "
        "and commit the result")


def test_every_public_name_has_a_docstring():
    gen = _load("gen_python_api")
    assert gen.missing_docs() == [], "public names without a docstring"


def test_every_public_name_is_in_python_api_md():
    import dlpackshim

    with open(os.path.join(DOCS, "python-api.md"), encoding="utf-8") as f:
        page = f.read()
    for name in dlpackshim.__all__:
        assert f"### dlpackshim.{name}\n" in page, name
    for cls in (dlpackshim.Tensor, dlpackshim.DType, dlpackshim.Device):
        for member in vars(cls):
            if not member.startswith("_") and member not in getattr(cls, "_fields", ()):
                assert f"#### {cls.__name__}.{member}\n" in page, f"{cls.__name__}.{member}"


def test_c_api_md_is_up_to_date():
    gen = _load("gen_c_api")
    with open(os.path.join(DOCS, "c-api.md"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == gen.render(), (
        "docs/c-api.md is stale: run `python3 docs/gen_c_api.py` and commit the result")


def test_every_exported_function_is_documented():
    gen = _load("gen_c_api")
    assert gen.missing_docs() == [], "DLPACKSHIM_API functions without a /*! doc comment"
    with open(os.path.join(ROOT, "tests", "c", "exports.txt"), encoding="utf-8") as f:
        exports = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    # dlpackshim__* are the package's private entry points (csrc/internal.h):
    # exported for ctypes, not part of the public API, so not in its reference.
    exports = [name for name in exports if not name.startswith("dlpackshim__")]
    with open(os.path.join(DOCS, "c-api.md"), encoding="utf-8") as f:
        page = f.read()
    documented = {fn.name for fn in gen.functions()}
    for name in exports:
        assert f"### {name}\n" in page, f"{name} (tests/c/exports.txt) is not in docs/c-api.md"
        assert name in documented, name
    assert documented == set(exports), "header and tests/c/exports.txt disagree"


def test_c_api_md_lists_the_status_codes():
    with open(os.path.join(DOCS, "c-api.md"), encoding="utf-8") as f:
        page = f.read()
    for name, value in (("DLPACKSHIM_OK", 0), ("DLPACKSHIM_ERR_INVALID_ARGUMENT", -1),
                        ("DLPACKSHIM_ERR_PYTHON", -13), ("DLPACKSHIM_FLAG_IS_COPIED", 2),
                        ("DLPACKSHIM_STREAM_CUDA_PER_THREAD", 2)):
        assert f"| `{name}` | {value} |" in page, name
