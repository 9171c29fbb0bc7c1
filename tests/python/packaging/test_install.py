"""How the package is installed and finds its library (dlpackshim/_ffi.py, setup.py).

The loader's rules: ``$DLPACKSHIM_LIBRARY`` alone when set; else the library
bundled in the package, the source tree's build (``csrc/.libs``), the
system's ``libdlpackshim.so.2``. A file that loads but is another library is
refused like one that does not load: one OSError that lists every path and
says what to do. Each case runs in a child process (the import is the test).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import textwrap

import pytest

import dlpackshim as ds
from conftest import run_python
from producers import compile_shared
from dlpackshim import _ffi

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the clone or the unpacked sdist


def _import_in_child(interpreter=None, timeout=120, **env_changes):
    code = "import dlpackshim; print(dlpackshim.library_path)"
    return run_python("-c", code, python=interpreter, env=env_changes, timeout=timeout)


@pytest.mark.parametrize("other", ["libc.so.6", "libm.so.6"])
def test_library_variable_naming_another_library_is_the_documented_oserror(other):
    r = _import_in_child(DLPACKSHIM_LIBRARY=other)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()
    assert any(line.startswith("OSError: dlpackshim: cannot load libdlpackshim") for line in last), r.stderr
    assert "AttributeError" not in r.stderr
    assert f"{other}: loads, but is not libdlpackshim" in r.stderr
    assert "DLPACKSHIM_LIBRARY is set, so it was the only candidate" in r.stderr


@pytest.mark.parametrize("version, said", [
    ('"0.0.1"', "libdlpackshim 0.0.1, but not the build this package needs"),
    ("0", "loads, but is not libdlpackshim"),            # a NULL version string
    ('"\\xff"', "loads, but is not libdlpackshim"),        # no text
    ('"1\\n  forged line"', "loads, but is not libdlpackshim"),  # no line of its own
])
def test_another_build_of_the_library_is_named_as_such(tmp_path, version, said):
    """A libdlpackshim from other sources (an older `make install`) lacks
    what this package needs: the message says it is one, with its version;
    a version string that is no text makes it no libdlpackshim, the listing
    goes on."""
    old = compile_shared(f"const char *dlpackshim_version_string(void) {{ return {version}; }}\n",
                         tmp_path / "libdlpackshim.so.2")
    r = _import_in_child(DLPACKSHIM_LIBRARY=old)
    assert r.returncode != 0
    assert "OSError: dlpackshim: cannot load libdlpackshim; tried, in order:" in r.stderr, r.stderr
    assert f"  {old}: {said}" in r.stderr, r.stderr


@pytest.mark.parametrize("revision", [None, 0])
def test_a_build_of_another_binding_revision_is_refused(tmp_path, revision):
    """Builds of one version (0.1.0) may speak different private contracts:
    one that has every entry point the loader probed for, but not this
    package's Tensor base, loaded and `info` said all was well; the first
    `.shape` was an AttributeError (`_get_meta`). A library without
    dlpackshim__binding_revision, or of another revision, is now refused
    with the loader's message, and `info` exits 1."""
    entries = "".join(f"int {name}(void) {{ return 0; }}\n" for name in _ffi._PRIVATE
                      if name != "dlpackshim__binding_revision")
    if revision is not None:
        entries += f"int dlpackshim__binding_revision(void) {{ return {revision}; }}\n"
    old = compile_shared('const char *dlpackshim_version_string(void) { return "0.1.0"; }\n'
                         + entries, tmp_path / "libdlpackshim.so.2")
    r = _import_in_child(DLPACKSHIM_LIBRARY=old)
    assert r.returncode != 0
    said = ("binding revision is 0" if revision is not None else "dlpackshim__binding_revision")
    assert f"  {old}: libdlpackshim 0.1.0, but not the build this package needs" in r.stderr, r.stderr
    assert said in r.stderr, r.stderr
    info = run_python("-m", "dlpackshim", "info", env={"DLPACKSHIM_LIBRARY": old}, timeout=120)
    assert info.returncode == 1 and "not the build this package needs" in info.stdout + info.stderr


def test_a_refused_library_does_not_answer_the_search_by_name(tmp_path):
    """A package whose bundled library is another build (with the SONAME
    libdlpackshim.so.2), and the right one on LD_LIBRARY_PATH: the refused
    one stayed loaded, so the dynamic loader answered the search for
    libdlpackshim.so.2 with it, and the right one was never tried."""
    inst = tmp_path / "inst"
    shutil.copytree(os.path.dirname(os.path.abspath(ds.__file__)), inst / "dlpackshim",
                    ignore=shutil.ignore_patterns("libdlpackshim*", "__pycache__"))
    compile_shared('const char *dlpackshim_version_string(void) { return "0.1.0"; }\n',
                   inst / "dlpackshim" / _ffi.SONAME, f"-Wl,-soname,{_ffi.SONAME}")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(ds.library_path, libdir / _ffi.SONAME)
    code = f"import sys; sys.path.insert(0, {str(inst)!r}); import dlpackshim; print(dlpackshim.library_path)"
    r = run_python("-c", code, env={"DLPACKSHIM_LIBRARY": None, "LD_LIBRARY_PATH": str(libdir)},
                   timeout=120)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(libdir / _ffi.SONAME), r.stdout
    # Nothing else to load: the advice no longer says that none was bundled.
    r = run_python("-c", code, env={"DLPACKSHIM_LIBRARY": None, "LD_LIBRARY_PATH": None},
                   timeout=120)
    if r.returncode == 0:  # a libdlpackshim installed on this system answered the search
        assert not r.stdout.strip().startswith(str(inst)), r.stdout
    else:
        assert "The library bundled with the package did not load (above)" in r.stderr, r.stderr


def test_a_library_found_by_the_loaders_search_is_named_by_its_file(tmp_path):
    """A bare name is found by the dynamic loader (LD_LIBRARY_PATH here, an
    installed library in general): library_path and `info` named only
    "libdlpackshim.so.2", not the file that loaded."""
    shutil.copy(ds.library_path, tmp_path / _ffi.SONAME)
    env = {"DLPACKSHIM_LIBRARY": _ffi.SONAME, "LD_LIBRARY_PATH": str(tmp_path)}
    r = _import_in_child(**env)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(tmp_path / _ffi.SONAME), r.stdout
    info = run_python("-m", "dlpackshim", "info", env=env, timeout=120)
    assert f"at {tmp_path / _ffi.SONAME}" in info.stdout, info.stdout


def test_a_library_deleted_since_it_loaded_keeps_its_name(tmp_path):
    """The loader's file, removed after it loaded (an upgrade under a running
    program): /proc/self/maps names it "PATH (deleted)", which library_path
    took, and dlpackshim.testing, which opens library_path again, failed."""
    shutil.copy(ds.library_path, tmp_path / _ffi.SONAME)
    code = textwrap.dedent(f"""
        import ctypes, os
        ctypes.CDLL({_ffi.SONAME!r})
        os.unlink({str(tmp_path / _ffi.SONAME)!r})
        import dlpackshim
        from dlpackshim.testing import _lib
        print(dlpackshim.library_path)
    """)
    # and removed after the import, before dlpackshim.testing opens it again
    (tmp_path / "after").mkdir()
    shutil.copy(ds.library_path, tmp_path / "after" / _ffi.SONAME)
    later = textwrap.dedent(f"""
        import os
        import dlpackshim
        os.unlink({str(tmp_path / "after" / _ffi.SONAME)!r})
        from dlpackshim.testing import _lib
        print(_lib.pylib.dlpackshim_version_string is not None)
    """)
    r2 = run_python("-c", later, env={"DLPACKSHIM_LIBRARY": _ffi.SONAME,
                                      "LD_LIBRARY_PATH": str(tmp_path / "after")}, timeout=120)
    assert r2.returncode == 0 and r2.stdout.strip() == "True", r2.stderr
    r = run_python("-c", code, env={"DLPACKSHIM_LIBRARY": _ffi.SONAME,
                                    "LD_LIBRARY_PATH": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == _ffi.SONAME, r.stdout


def test_a_package_imported_from_a_zip_says_it_cannot_load_from_there(tmp_path):
    """The loader opens files only: a zipped package (its library bundled
    inside) is told so, not that no library was bundled."""
    import zipfile

    archive = tmp_path / "dlpackshim.zip"
    package = os.path.dirname(os.path.abspath(ds.__file__))
    with zipfile.ZipFile(archive, "w") as z:
        for name in os.listdir(package):
            if name.endswith(".py"):
                z.write(os.path.join(package, name), f"dlpackshim/{name}")
        z.write(ds.library_path, f"dlpackshim/{_ffi.SONAME}")
    code = f"import sys; sys.path.insert(0, {str(archive)!r}); import dlpackshim"
    r = run_python("-c", code, env={"DLPACKSHIM_LIBRARY": None, "PYTHONPATH": None}, timeout=120)
    assert r.returncode != 0
    assert "dlpackshim.zip" in r.stderr and "imported from inside an archive" in r.stderr, r.stderr
    assert "cannot run from a zip file" in r.stderr


def test_library_variable_naming_no_file_lists_it_and_says_what_to_do(tmp_path):
    missing = str(tmp_path / "libdlpackshim.so")
    r = _import_in_child(DLPACKSHIM_LIBRARY=missing)
    assert r.returncode != 0
    assert "OSError: dlpackshim: cannot load libdlpackshim; tried, in order:" in r.stderr
    assert f"  {missing}: " in r.stderr
    assert "unset it to use the library bundled with the package" in r.stderr


@pytest.fixture(params=["fifo", "directory", "/dev/null"])
def not_a_file(request, tmp_path):
    """A path that dlopen must never be given: a FIFO (dlopen waits for a
    writer, forever), a directory, a character device."""
    if request.param == "fifo":
        path = str(tmp_path / "libdlpackshim.so")
        os.mkfifo(path)
        return path
    return str(tmp_path) if request.param == "directory" else request.param


def test_library_variable_naming_no_regular_file_is_refused_unopened(not_a_file):
    """Issue 19, item 4: anything but a regular file (or a link to one) is the
    documented OSError, before it is opened; the import never hangs."""
    r = _import_in_child(DLPACKSHIM_LIBRARY=not_a_file, timeout=60)
    assert r.returncode != 0
    assert "OSError: dlpackshim: cannot load libdlpackshim; tried, in order:" in r.stderr
    assert f"  {not_a_file}: not a regular file (nor a link to one); not opened" in r.stderr


def test_library_variable_may_be_a_link_to_the_library(tmp_path):
    link = tmp_path / "libdlpackshim.so"
    link.symlink_to(_ffi.library_path)
    r = _import_in_child(DLPACKSHIM_LIBRARY=str(link))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(link)


def test_gpu_runtime_variables_naming_no_regular_file_are_refused_unopened(not_a_file):
    """The same rule where the C library dlopens a path a variable names
    (the CUDA driver, the HIP runtime): a clear "not found", no hang."""
    r = run_python("-m", "dlpackshim", "info", timeout=60,
                   env={"DLPACKSHIM_LIBCUDA": not_a_file, "DLPACKSHIM_LIBHIP": not_a_file})
    for var in ("DLPACKSHIM_LIBCUDA", "DLPACKSHIM_LIBHIP"):
        assert f"{var}={not_a_file} (not a regular file, nor a link to one; not opened)" \
            in r.stdout, r.stdout + r.stderr


def test_library_variable_is_the_only_candidate(monkeypatch):
    monkeypatch.setenv("DLPACKSHIM_LIBRARY", "/nowhere/libdlpackshim.so")
    assert _ffi._candidates() == ["/nowhere/libdlpackshim.so"]


def test_search_order_bundled_then_build_tree_then_system(monkeypatch):
    monkeypatch.delenv("DLPACKSHIM_LIBRARY", raising=False)
    paths = _ffi._candidates()
    pkg = os.path.dirname(os.path.abspath(_ffi.__file__))
    assert os.path.join(pkg, "libdlpackshim.so.2") in paths[:2]
    assert paths[-1] == "libdlpackshim.so.2"
    if _ffi._SOURCE_TREE is not None:
        built = os.path.join(_ffi._SOURCE_TREE, "csrc", ".libs", "libdlpackshim.so.2")
        assert built in paths[:2] and len(paths) == 3
    else:
        assert len(paths) == 2


def test_a_stale_bundled_copy_never_shadows_a_newer_make_build(monkeypatch, tmp_path):
    """Issue 34.7: `pip install -e .` leaves dlpackshim/libdlpackshim.so.2 in
    a source tree; a later `make` build (newer) comes first, and the bundled
    copy again once it is the newer file."""
    monkeypatch.delenv("DLPACKSHIM_LIBRARY", raising=False)
    pkg = tmp_path / "dlpackshim"
    libs = tmp_path / "csrc" / ".libs"
    pkg.mkdir()
    libs.mkdir(parents=True)
    bundled, built = pkg / _ffi.SONAME, libs / _ffi.SONAME
    bundled.write_bytes(b"")
    built.write_bytes(b"")
    monkeypatch.setattr(_ffi, "_HERE", str(pkg))
    monkeypatch.setattr(_ffi, "_SOURCE_TREE", str(tmp_path))
    os.utime(bundled, (1000, 1000))
    os.utime(built, (2000, 2000))
    assert _ffi._candidates() == [str(built), str(bundled), _ffi.SONAME]
    os.utime(bundled, (3000, 3000))
    assert _ffi._candidates() == [str(bundled), str(built), _ffi.SONAME]
    bundled.unlink()
    assert _ffi._candidates()[0] == str(built)
    monkeypatch.setattr(_ffi, "_SOURCE_TREE", None)  # an installed package: no build tree
    assert _ffi._candidates() == [str(bundled), _ffi.SONAME]


def test_without_the_variable_the_child_loads_what_this_process_loaded():
    r = _import_in_child(DLPACKSHIM_LIBRARY=os.environ.get("DLPACKSHIM_LIBRARY"))
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(ds.library_path)


@pytest.mark.parametrize("args", [["-c", "import dlpackshim; print(dlpackshim.library_path)"],
                                  ["-m", "dlpackshim", "info"]], ids=["-c", "-m"])
def test_children_import_the_package_under_test_from_any_working_directory(
        args, tmp_path, monkeypatch):
    """conftest.run_python: a dlpackshim/ folder in this process's working
    directory (a source tree that was not built) does not reach the child,
    which `-c` and `-m` would otherwise put first on sys.path."""
    shadow = tmp_path / "dlpackshim"
    shadow.mkdir()
    for name in ("__init__.py", "__main__.py"):
        (shadow / name).write_text("raise ImportError('the shadowing folder was imported')\n")
    monkeypatch.chdir(tmp_path)
    r = run_python(*args)
    assert r.returncode == 0, r.stderr
    # Whole lines (a path may hold spaces): -c prints the path, info "... at PATH".
    paths = [line.split(" at ", 1)[1] if line.startswith("libdlpackshim ") else line
             for line in r.stdout.splitlines()]
    assert os.path.realpath(ds.library_path) in map(os.path.realpath, paths), r.stdout


def test_an_editable_install_elsewhere_is_chosen_over_the_working_directory():
    """`python -m pytest` in one source tree with another tree installed
    editable: the editable install's finder (on sys.meta_path) was never
    asked, the working directory's unbuilt package was found instead and
    taken for an editable install of it, and collection failed (no library
    built there). conftest's choice is made again here, in a child, with
    such a finder and the tree first on sys.path."""
    code = textwrap.dedent("""
        import importlib.util, os, sys
        import conftest
        class Editable:   # what setuptools appends to sys.meta_path
            def find_spec(self, name, path=None, target=None):
                if name == "dlpackshim":
                    return importlib.util.spec_from_file_location(
                        name, "/elsewhere/src/dlpackshim/__init__.py")
        sys.meta_path.append(Editable())
        os.environ.pop("PYTHONPATH", None)
        sys.path[:] = [conftest.ROOT] + [p for p in sys.path if p != conftest.ROOT]
        print(conftest._choose_package(), conftest.ROOT in sys.path)
    """)
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["installed", "False"], r.stdout


def test_children_are_started_only_through_run_python():
    """One way to start a child Python (conftest.run_python), so that every
    child imports the package under test."""
    offenders = []
    suite = os.path.dirname(HERE)   # tests/python and its folders
    for name in sorted(os.path.relpath(os.path.join(d, n), suite)
                       for d, _, files in os.walk(suite) for n in files):
        if name.endswith(".py") and name != "conftest.py":
            with open(os.path.join(suite, name), encoding="utf-8") as f:
                if re.search(r"subprocess\.\w+\(\s*\[\s*sys\.executable", f.read()):
                    offenders.append(name)
    assert offenders == [], offenders


def test_installed_package_is_the_one_tested():
    """conftest.py: with a non-editable install present, the suite imports it,
    never the source tree's dlpackshim/ folder."""
    try:
        dist = importlib.metadata.distribution("dlpackshim")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("dlpackshim is not installed: the suite tests the source tree")
    import conftest

    if conftest.CHOSEN == "source tree (on PYTHONPATH)":
        pytest.skip("the source tree is on PYTHONPATH by request (make check)")
    direct_url = dist.read_text("direct_url.json") or ""
    if '"editable": true' in direct_url:
        pytest.skip("an editable install is the source tree")
    installed = os.path.realpath(str(dist.locate_file("dlpackshim/__init__.py")))
    assert os.path.realpath(ds.__file__) == installed
    if os.environ.get("DLPACKSHIM_LIBRARY"):
        return
    assert os.path.realpath(ds.library_path) == os.path.realpath(
        os.path.join(os.path.dirname(installed), "libdlpackshim.so.2"))


def test_licence_is_apache_2_in_the_source():
    """LICENSE (the Apache-2.0 text, DLPack's licence) at the root of the clone
    or the unpacked sdist, and pyproject.toml declares it by SPDX name."""
    licence = os.path.join(SOURCE, "LICENSE")
    pyproject = os.path.join(SOURCE, "pyproject.toml")
    if not os.path.exists(pyproject):
        pytest.skip("no source tree here (pyproject.toml)")
    with open(licence, encoding="utf-8") as f:
        text = f.read()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    with open(pyproject, encoding="utf-8") as f:
        meta = f.read()
    assert 'license = "Apache-2.0"' in meta and 'license-files = ["LICENSE"]' in meta


def test_installed_metadata_carries_the_licence():
    """The wheel's (or the sdist's build's) metadata: License-Expression
    Apache-2.0 and the LICENSE file in .dist-info/licenses (PEP 639)."""
    import conftest

    if not conftest.CHOSEN.startswith(("installed", "editable")):
        pytest.skip(f"the package under test is not an installed one ({conftest.CHOSEN})")
    dist = importlib.metadata.distribution("dlpackshim")
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    files = [f for f in dist.files or () if f.name == "LICENSE"]
    assert files and str(files[0]).endswith(os.path.join("licenses", "LICENSE")), dist.files
    text = files[0].read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    source = os.path.join(SOURCE, "LICENSE")
    if os.path.exists(source):
        with open(source, encoding="utf-8") as f:
            assert text == f.read()


def test_versions_agree():
    """__version__ (a literal), the C library's and the distribution's are one."""
    assert ds.__version__ == _ffi.library_version()
    try:
        assert importlib.metadata.version("dlpackshim") == ds.__version__
    except importlib.metadata.PackageNotFoundError:
        pass
    configure = os.path.join(SOURCE, "configure.ac")
    if os.path.exists(configure):
        with open(configure, encoding="utf-8") as f:
            assert f"AC_INIT([dlpackshim], [{ds.__version__}]" in f.read()


def test_library_links_no_libpython():
    """The library binds CPython by name at run time: one file for every CPython."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    out = subprocess.run([readelf, "-d", ds.library_path], capture_output=True, text=True,
                         check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert needed and not [n for n in needed if "python" in n], needed


def test_library_soname_is_the_one_the_package_looks_for():
    """The 2.0 C API (int status, out-parameters, removed names) broke the
    ABI: SONAME libdlpackshim.so.2, which is also the file name _ffi searches
    for (bundled, build tree, installed)."""
    assert _ffi.SONAME == "libdlpackshim.so.2"
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    out = subprocess.run([readelf, "-d", ds.library_path], capture_output=True, text=True,
                         check=True).stdout
    assert re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out) == [_ffi.SONAME], out


def test_pypy_import_is_one_clear_importerror():
    pypy = shutil.which("pypy3")
    if pypy is None:
        pytest.skip("pypy3 is not installed (Debian: apt-get install pypy3)")
    r = _import_in_child(interpreter=pypy, DLPACKSHIM_LIBRARY=None)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: dlpackshim supports CPython only, not pypy"), r.stderr


@pytest.mark.parametrize("pretend, expected", [
    # No free-threaded CPython can be installed here: the child is told it is
    # one, through what the check reads (the "t" ABI flag of PEP 703).
    ("import sys\nsys.abiflags = 't'\n",
     "ImportError: dlpackshim does not support free-threaded CPython (this interpreter was "
     "built with Py_GIL_DISABLED): its C library relies on the GIL"),
    # CPython 3.10, likewise (an sdist or `pip install .` gets that far).
    ("import sys\nsys.version_info = (3, 10, 14, 'final', 0)\n",
     "ImportError: dlpackshim needs CPython 3.11 or newer"),
], ids=["free-threaded", "cpython-3.10"])
def test_unsupported_cpython_import_is_one_clear_importerror(pretend, expected):
    r = run_python("-c", pretend + "import dlpackshim\n", timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(expected), r.stderr
    raised = [line for line in r.stderr.splitlines() if re.match(r"\w+(Error|Exception):", line)]
    assert raised == [last], r.stderr  # the one error, no other on the way


def test_build_with_an_old_setuptools_is_one_clear_line():
    """setuptools < 77 cannot read pyproject.toml's licence fields (PEP 639):
    setup.py says so in one line before setuptools prints its schema."""
    setup_py = os.path.join(SOURCE, "setup.py")
    if not os.path.exists(setup_py):
        pytest.skip("no source tree here (setup.py)")
    pytest.importorskip("setuptools")
    code = textwrap.dedent(f"""
        import runpy, setuptools
        setuptools.__version__ = "65.5.0"
        setuptools.setup = lambda **kw: print("setup() ran")
        runpy.run_path({setup_py!r})
    """)
    r = run_python("-c", code, timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "setup() ran" not in r.stdout and "Traceback" not in r.stderr
    assert "building needs setuptools >= 77" in r.stderr and "setuptools 65.5.0" in r.stderr


def test_build_without_a_compiler_is_one_clear_paragraph(tmp_path):
    """setup.py's compile step, with CC naming no program: SystemExit with the
    remedies, not a CalledProcessError traceback."""
    setup_py = os.path.join(SOURCE, "setup.py")
    if not os.path.exists(setup_py) or not os.path.exists(os.path.join(SOURCE, "csrc")):
        pytest.skip("no source tree here (setup.py, csrc/)")
    setuptools = pytest.importorskip("setuptools")
    if int(re.match(r"\d+", setuptools.__version__).group()) < 77:
        pytest.skip("setuptools < 77: setup.py stops before the compiler "
                    "(test_build_with_an_old_setuptools_is_one_clear_line)")
    code = textwrap.dedent(f"""
        import runpy, sys, setuptools
        setuptools.setup = lambda **kw: None  # load setup.py's helpers, build nothing
        ns = runpy.run_path({setup_py!r})
        ns["build_library"]({str(tmp_path)!r})
    """)
    r = run_python("-c", code, env={"CC": str(tmp_path / "no-such-cc")}, timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert "dlpackshim: building its C library failed" in r.stderr
    assert "needs a C compiler" in r.stderr and "make wheel" in r.stderr
