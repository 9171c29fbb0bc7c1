"""The wheel's cp39-abi3 tag is a promise: the library uses CPython's stable ABI only.

libdlpackshim links no libpython: it resolves CPython's API by name at run
time (dlsym, csrc/python/pyapi.c). So no linker and no ``abi3audit`` sees
what it uses; these tests do:

* every CPython name the built library can resolve (a whole string in a
  section that is loaded at run time and looks like an API name) is in the
  stable-ABI manifest (stable_abi.txt, from CPython's Misc/stable_abi.toml),
  and was there in the oldest CPython that pyproject.toml's requires-python
  admits, unless binding.h's list binds it only from the version that
  added it (``F(ret, Name, (params), 3, 12)``);
* csrc/python reads no CPython object in place: no header fields, no type
  slots, no fixed offsets (the tuple items moved in 3.14, ob_type is not at
  a fixed place on free-threaded builds).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import struct

import pytest

import dlpackshim as ds
from conftest import run_python

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # the clone or the unpacked sdist
BINDING = os.path.join(SOURCE, "csrc", "python")
PYAPI = os.path.join(BINDING, "pyapi.c")
BINDING_H = os.path.join(BINDING, "binding.h")
MANIFEST = os.path.join(HERE, "stable_abi.txt")

#: What a CPython API symbol looks like: Py*, _Py*, PyExc_*, _Py_*Struct.
API_NAME = re.compile(r"_?Py[A-Za-z0-9_]+")


def _version(text):
    return tuple(int(p) for p in text.split("."))


def _manifest():
    """name -> (kind, added, flags) from stable_abi.txt."""
    out = {}
    with open(MANIFEST, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, kind, added, *flags = line.split()
            out[name] = (kind, _version(added), flags)
    return out


def _oldest_python():
    """The oldest CPython supported: requires-python, from pyproject.toml (the
    one place it is written) or, outside a source tree, the installed metadata
    that pyproject.toml became."""
    pyproject = os.path.join(SOURCE, "pyproject.toml")
    if os.path.exists(pyproject):
        with open(pyproject, encoding="utf-8") as f:
            spec = re.search(r'^requires-python\s*=\s*"([^"]*)"', f.read(), re.M).group(1)
    else:
        spec = importlib.metadata.metadata("dlpackshim")["Requires-Python"]
    m = re.fullmatch(r"\s*>=\s*(\d+\.\d+)\s*", spec)
    assert m, f"requires-python {spec!r} is not of the form '>=3.N'"
    return _version(m.group(1))


def _loaded_strings(path):
    """Every NUL-terminated string in the ELF file's sections that are loaded
    at run time (SHF_ALLOC: .rodata, .dynstr, ...), not in debug info or the
    static symbol table, which nothing resolves."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        shdr = end + "IIQQQQ"  # name, type, flags, addr, offset, size
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        shdr = end + "IIIIII"
    strings = set()
    for i in range(shnum):
        _, sh_type, flags, _, offset, size = struct.unpack_from(shdr, data, shoff + i * shentsize)
        if flags & 0x2 and sh_type != 8:  # SHF_ALLOC, not SHT_NOBITS
            strings.update(data[offset:offset + size].split(b"\0"))
    return strings


def library_api_names(path):
    """The CPython API names the library at `path` holds as whole strings,
    which is how a name reaches dlsym."""
    names = set()
    for raw in _loaded_strings(path):
        text = raw.decode("latin-1")
        if API_NAME.fullmatch(text):
            names.add(text)
    return names


def resolvable_names(path=None, table=None):
    """What the library can resolve: the API names it holds, and those pyapi.c
    binds (the linker stores a string that ends another only once, as
    "Py_IsFinalizing" inside "_Py_IsFinalizing", so a bound name may be a
    tail of a held one). The names pyapi.c binds that the library holds in
    neither way: the scan missed them, and that must fail too."""
    held = library_api_names(path or ds.library_path)
    table = binding_table() if table is None else table
    unseen = sorted(n for n in table if not any(h.endswith(n) for h in held))
    return held | set(table), unseen


def _code(path):
    """A C file's text with comments and string literals blanked (lines kept)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def binding_table(*paths):
    """name -> (kind, since) for every name the binding resolves: the lists of
    binding.h (F: a function, with the CPython that added it when newer than
    the oldest supported, else 0, 0; O and E: data, by their symbol) and any
    direct dlsym(..., "Name") of pyapi.c."""
    text = ""
    for path in paths or (BINDING_H, PYAPI):
        with open(path, encoding="utf-8") as f:
            text += f.read() + "\n"
    table = {}
    for name, major, minor in re.findall(
            r"^\s*F\([^,]+,\s*(\w+)\s*,\s*\(.*?\)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", text, re.M):
        since = (int(major), int(minor)) if (major, minor) != ("0", "0") else None
        table[name] = ("function", since)
    for name in re.findall(r'^\s*[OE]\(\s*\w+\s*,\s*"(\w+)"\s*\)', text, re.M):
        table[name] = ("data", None)
    for name in re.findall(r'\bdlsym\s*\(\s*\w+\s*,\s*"(\w+)"\s*\)', text):
        table.setdefault(name, (None, None))
    return table


def stable_abi_violations(names, table, manifest, oldest):
    """One line per name that breaks the promise (empty: it is kept)."""
    bad = []
    for name in sorted(names):
        kind, since = table.get(name, (None, None))
        entry = manifest.get(name)
        if entry is None:
            bad.append(f"{name}: not in CPython's stable ABI")
            continue
        m_kind, added, flags = entry
        if kind is not None and kind != m_kind:
            bad.append(f"{name}: bound as {kind}, but the stable ABI has it as {m_kind}")
        if any(flag.startswith("ifdef=") for flag in flags):
            bad.append(f"{name}: only on some builds ({' '.join(flags)})")
        if added > oldest and (since is None or since < added):
            gate = f"bound from {since[0]}.{since[1]}" if since else "not version-gated"
            bad.append(f"{name}: in the stable ABI from {added[0]}.{added[1]}, newer than the "
                       f"oldest supported CPython {oldest[0]}.{oldest[1]}, and {gate} "
                       f"(F(ret, {name}, (params), {added[0]}, {added[1]}) in binding.h)")
    return bad


#: A cast to what an object's header or items are made of: pointers
#: (`void **`, `void *const *`) or pointer-sized integers (`ptrdiff_t *`).
_SLOT_CAST = (r"\(\s*(?:const\s+)?(?:\w+\s*\*\s*(?:const\s*)?\*"
              r"|(?:ptrdiff_t|Py_ssize_t|ssize_t|intptr_t|uintptr_t)\s*\*)\s*\)")
#: Reads of a CPython object in place: (what, pattern over code without comments).
LAYOUT_READS = [
    ("object header field", re.compile(r"\bob_(?:refcnt|type|size|item|base)\b")),
    ("type object field", re.compile(r"(?:->|\.)\s*tp_\w+")),
    ("pointer cast then indexed (a fixed offset)",
     re.compile(r"\(\s*" + _SLOT_CAST + r"\s*\w+\s*\)\s*\[")),
    ("pointer cast plus a constant (a fixed offset)",
     re.compile(_SLOT_CAST + r"\s*\w+\s*[-+]\s*\d")),
]


def layout_reads(folder=BINDING):
    """'file:line: what: code' for each in-place read found in folder's C files."""
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith((".c", ".h")):
            continue
        code = _code(os.path.join(folder, name))
        for what, pattern in LAYOUT_READS:
            for m in pattern.finditer(code):
                line = code.count("\n", 0, m.start()) + 1
                found.append(f"{name}:{line}: {what}: {code.splitlines()[line - 1].strip()}")
    return found


needs_source = pytest.mark.skipif(not os.path.exists(PYAPI),
                                  reason="no source tree here (csrc/python/pyapi.c)")


def test_manifest_is_what_the_generator_writes():
    abi3info = pytest.importorskip("abi3info", reason="abi3info (.ci/requirements.txt) is not installed")
    import gen_stable_abi  # beside this file (pytest puts a test's folder on sys.path)
    with open(MANIFEST, encoding="utf-8") as f:
        assert f.read() == gen_stable_abi.render(), (
            f"stable_abi.txt is not what abi3info {importlib.metadata.version('abi3info')} "
            "gives; regenerate it: "
            "python tests/python/c_api/gen_stable_abi.py > tests/python/c_api/stable_abi.txt")


@needs_source
def test_the_scan_sees_every_name_the_binding_table_resolves():
    """The string scan is the check of what the built library resolves: it
    must find every name pyapi.c binds, or it would prove nothing."""
    assert len(binding_table()) > 20, binding_table()
    _, unseen = resolvable_names()
    assert not unseen, f"{ds.library_path} lacks names pyapi.c binds: {unseen}"


@needs_source
def test_every_resolved_name_is_stable_abi_of_the_oldest_supported_python():
    names, _ = resolvable_names()
    bad = stable_abi_violations(names, binding_table(), _manifest(), _oldest_python())
    assert not bad, (f"{len(bad)} of the {len(names)} CPython names that {ds.library_path} "
                     "resolves break the stable-ABI promise:\n  " + "\n  ".join(bad))


@needs_source
def test_no_cpython_object_is_read_in_place():
    found = layout_reads()
    assert not found, ("csrc/python reads CPython objects in place (use the API's functions):"
                       "\n  " + "\n  ".join(found))


def test_the_rules_catch_what_they_are_for(tmp_path):
    """Each rule fails on the thing it forbids: a name outside the stable ABI,
    one too new for the oldest Python and not gated, the wrong kind, and each
    kind of in-place read."""
    manifest = {"PyNew": ("function", (3, 12), []), "PyOld": ("function", (3, 2), []),
                "PyWin": ("function", (3, 7), ["ifdef=MS_WINDOWS"]),
                "_Py_NoneStruct": ("data", (3, 2), ["abi_only"])}
    ok = {"PyOld": ("function", None), "PyNew": ("function", (3, 12)),
          "_Py_NoneStruct": ("data", None)}
    assert stable_abi_violations(set(ok), ok, manifest, (3, 9)) == []
    assert len(stable_abi_violations({"PyNew"}, {}, manifest, (3, 9))) == 1
    assert stable_abi_violations({"PyNew"}, {}, manifest, (3, 12)) == []
    assert len(stable_abi_violations({"PyNew"}, {"PyNew": ("function", (3, 11))}, manifest,
                                     (3, 9))) == 1
    assert len(stable_abi_violations({"_PyPrivate"}, {}, manifest, (3, 9))) == 1
    assert len(stable_abi_violations({"PyWin"}, {}, manifest, (3, 9))) == 1
    assert len(stable_abi_violations({"_Py_NoneStruct"}, {"_Py_NoneStruct": ("function", None)},
                                     manifest, (3, 9))) == 1
    (tmp_path / "binding.h").write_text(
        "#define SHIM_PY_FUNCTIONS(F) \\\n  F(int, PyOld, (void *obj), 0, 0) \\\n"
        "  F(void *, PyNew, (void *a, int b), 3, 12)\n"
        '#define SHIM_PY_OBJECTS(O) \\\n  O(Py_None, "_Py_NoneStruct")\n')
    (tmp_path / "pyapi.c").write_text('  f = dlsym(RTLD_DEFAULT, "PyOther");\n')
    assert binding_table(str(tmp_path / "binding.h"), str(tmp_path / "pyapi.c")) == {
        "PyOld": ("function", None), "_Py_NoneStruct": ("data", None),
        "PyNew": ("function", (3, 12)), "PyOther": (None, None)}
    (tmp_path / "bad.h").write_text(
        "/* ob_type in a comment is fine */\n"
        "static void *a(void *o) { return ((void **)o)[1]; }\n"
        "static ptrdiff_t b(void *t) { return ((ptrdiff_t *)t)[2]; }\n"
        "static void *const *c(void *t) { return (void *const *)t + 3; }\n"
        "static long d(PyObject *o) { return o->ob_refcnt; }\n"
        "static void *e(PyTypeObject *t) { return t->tp_free; }\n")
    (tmp_path / "good.c").write_text(
        'void (*tp_free)(void *); slot = py->PyType_GetSlot(tp, Py_tp_free);\n'
        'x = (char *)data + 8; s = "((void **)o)[1]"; n = ((int64_t *)shape)[0];\n')
    found = layout_reads(str(tmp_path))
    assert [f.split(":")[:2] for f in found] == [["bad.h", str(n)] for n in (5, 6, 2, 3, 4)], found


def test_abi3audit_finds_no_linked_python_symbol(tmp_path):
    """abi3audit audits the symbols an extension links, and libdlpackshim
    links none of CPython's (it resolves them with dlsym): so it passes, and
    proves only that; the tests above check what dlsym resolves. It audits
    files named *.abi3.so only, so it is given a copy under that name."""
    if importlib.util.find_spec("abi3audit") is None:
        pytest.skip("abi3audit (.ci/requirements.txt) is not installed")
    oldest = _oldest_python()
    copy = tmp_path / "libdlpackshim.abi3.so"
    shutil.copyfile(ds.library_path, copy)
    r = run_python("-m", "abi3audit", "--strict", "--summary", "--assume-minimum-abi3",
                   f"{oldest[0]}.{oldest[1]}", str(copy), timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 extensions scanned; 0 ABI version mismatches and 0 ABI violations found" in \
        " ".join(out.split()), out
