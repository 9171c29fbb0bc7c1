#!/usr/bin/env python3
"""Generate docs/python-api.md from dlpackshim's public names and their docstrings.

Usage (from the repository root, after ``make``; the library is taken from
``$DLPACKSHIM_LIBRARY``, else from csrc/.libs)::

    python3 docs/gen_python_api.py            # rewrites docs/python-api.md
    python3 docs/gen_python_api.py --check    # exit 1 if the file is stale

The page lists every name of ``dlpackshim.__all__``: functions with their
signature (``inspect.signature``, annotations left out: the docstrings give the
types), classes with their own public methods and properties (plus the DLPack
protocol dunders), enums with their members, and constants with the ``#:``
comment above their assignment in the package's source. Docstrings are
numpy-style; this script turns their sections (Parameters, Returns, Raises)
and reST inline markup into Markdown. tests/python/docs/test_docs.py fails when the
committed page differs from what this script writes, and when a public name
has no docstring (:func:`missing_docs`).
"""

from __future__ import annotations

import enum
import importlib.util
import inspect
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:   # for _gen_common, also when loaded by path (test_docs.py)
    sys.path.insert(0, HERE)
import _gen_common  # noqa: E402  (docs/_gen_common.py: the command line)
OUTPUT = os.path.join(HERE, "python-api.md")

#: Protocol methods and attributes of a class that are part of its public API.
PROTOCOL_DUNDERS = ("__dlpack__", "__dlpack_device__", "__array_interface__",
                    "__cuda_array_interface__")

#: Public constants that have no ``#:`` comment in the package's source (a
#: tuple unpacking, or ``__version__``): their description lives here.
DATA_DOCS: Dict[str, str] = {
    "__version__": "The Python package's version string, e.g. ``\"0.1.0\"``.",
    "library_path": (
        "Path of the C library that was loaded (``$DLPACKSHIM_LIBRARY`` alone when set; "
        "else the copy bundled in the package and, in a built source tree, "
        "``csrc/.libs``'s, the newer of the two first; then the installed "
        "``libdlpackshim.so.2``). A bare name that the dynamic loader found is "
        "given as the file it found."
    ),
}

#: Constants whose value depends on the machine: the page shows their type.
MACHINE_DEPENDENT = ("library_path",)

_SECTIONS = ("Parameters", "Returns", "Yields", "Raises", "Warns", "Other Parameters",
             "Attributes", "See Also", "Notes", "Examples")
_ITEM_SECTIONS = ("Parameters", "Returns", "Yields", "Raises", "Warns", "Other Parameters",
                  "Attributes")


def _import() -> Any:
    """The dlpackshim already importable (installed, or the one the test suite
    chose), else this source tree's (its loader finds the library `make` built)."""
    if importlib.util.find_spec("dlpackshim") is None and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import dlpackshim

    return dlpackshim


# ---- reST inline markup to Markdown ------------------------------------------------

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):`~?([^`]+)`")
_DOUBLE = re.compile(r"``(.+?)``")
_SINGLE = re.compile(r"(?<![`\w])`([^`]+)`(?![`\w])")


def inline(text: str) -> str:
    """reST inline markup to Markdown: ``code`` and roles to `code`, `param` to *param*."""
    keep: List[str] = []

    def stash(code: str) -> str:
        keep.append(code)
        return f"\x00{len(keep) - 1}\x00"

    text = _DOUBLE.sub(lambda m: stash(m.group(1)), text)
    text = _ROLE.sub(lambda m: stash(m.group(1).split(".")[-1] if m.group(0).count("~")
                                     else m.group(1)), text)
    text = _SINGLE.sub(lambda m: f"*{m.group(1)}*", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: f"`{keep[int(m.group(1))]}`", text)


def _paragraphs(lines: List[str]) -> List[str]:
    """Lines to paragraphs (blank lines split them); bullet lines stay lines."""
    paras: List[str] = []
    cur: List[str] = []
    for line in lines:
        if not line.strip():
            if cur:
                paras.append("\n".join(cur))
                cur = []
            continue
        cur.append(line.rstrip())
    if cur:
        paras.append("\n".join(cur))
    return paras


def _dedent(lines: List[str]) -> List[str]:
    indents = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    cut = min(indents) if indents else 0
    return [x[cut:] for x in lines]


def docstring_to_markdown(doc: str) -> str:
    """A numpy-style docstring (already cleaned by inspect.getdoc) as Markdown."""
    lines = doc.splitlines()
    out: List[str] = []
    section: Optional[str] = None
    body: List[str] = []

    def flush() -> None:
        if not body:
            return
        if section in _ITEM_SECTIONS:
            out.extend(_items(section, body))
        else:
            for para in _paragraphs(body):
                out.append(inline(para))
                out.append("")
        body.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if (line.strip() in _SECTIONS and not line.startswith(" ")
                and re.fullmatch(r"-{3,}", nxt.strip())):
            flush()
            section = line.strip()
            out.append(f"**{section}**")
            out.append("")
            i += 2
            continue
        body.append(line)
        i += 1
    flush()
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def _items(section: str, body: List[str]) -> List[str]:
    """The entries of a Parameters/Returns/Raises section as a Markdown list.

    An entry is an unindented ``name : type`` (or a bare type, for Returns
    and Raises) with its description indented below it. Unindented text
    that follows a description's end (a blank line, then a paragraph) is
    kept as a paragraph after the list.
    """
    out: List[str] = []
    entries: List[Tuple[str, List[str]]] = []
    trailing: List[str] = []
    # Blocks split by blank lines; a block of two or more unindented lines
    # with nothing indented under them is prose that follows the list.
    blocks: List[List[str]] = [[]]
    for line in body:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    for block in blocks:
        if len(block) > 1 and not any(x.startswith(" ") for x in block):
            trailing.extend(block + [""])
            continue
        for line in block:
            if not line.startswith(" "):
                entries.append((line.strip(), []))
            elif entries:
                entries[-1][1].append(line)
            else:
                trailing.append(line)
        if entries:
            entries[-1][1].append("")
    for head, desc in entries:
        if " : " in head:
            name, typ = head.split(" : ", 1)
            title = f"**{name.strip()}** : *{inline(typ.strip())}*"
        else:
            title = f"**{inline(head)}**" if section in ("Raises", "Warns") else f"*{inline(head)}*"
        paras = _paragraphs(_dedent(desc))
        if paras:
            first = inline(paras[0]).replace("\n", "\n  ")
            out.append(f"- {title} — {first}")
            for para in paras[1:]:
                out.append("")
                out.append("  " + inline(para).replace("\n", "\n  "))
        else:
            out.append(f"- {title}")
    out.append("")
    for para in _paragraphs(trailing):
        out.append(inline(para))
        out.append("")
    return out


# ---- what is public -----------------------------------------------------------------

def _signature(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
    return f"{name}{sig}"


def _own_members(cls: type) -> List[Tuple[str, Any]]:
    """Public methods and properties defined by `cls` itself (not inherited from
    tuple, object or enum), in source order, plus the protocol dunders."""
    fields = set(getattr(cls, "_fields", ()))
    members, seen = [], set()
    # The class, then the package's own bases (the Tensor's C base has
    # __dlpack__ and close): builtins like tuple, object or enum are left out.
    for klass in [k for k in cls.__mro__ if k is cls or k.__module__.startswith("dlpackshim")]:
        for name, value in klass.__dict__.items():
            if name in fields or name in seen:
                continue
            if name.startswith("_") and name not in PROTOCOL_DUNDERS:
                continue
            if (isinstance(value, (property, classmethod, staticmethod))
                    or inspect.isfunction(value) or inspect.ismethoddescriptor(value)):
                members.append((name, value))
                seen.add(name)
    return members


def _member_doc(value: Any) -> Optional[str]:
    func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    return inspect.getdoc(func)


def _data_doc(name: str) -> Optional[str]:
    """The ``#:`` comment above `name`'s assignment in the package's source."""
    pkg = os.path.join(ROOT, "dlpackshim")
    pattern = re.compile(rf"^(?:[\w, ]*\b{re.escape(name)}\b[\w, ]*)(?::[^=]+)?=")
    for fname in sorted(os.listdir(pkg)):
        if not fname.endswith(".py"):
            continue
        with open(os.path.join(pkg, fname), encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            if pattern.match(line):
                comment = []
                j = i - 1
                while j >= 0 and lines[j].startswith("#:"):
                    comment.insert(0, lines[j][2:].strip())
                    j -= 1
                if comment:
                    return " ".join(comment)
    return None


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum):
            return "enum"
        if issubclass(obj, BaseException):
            return "exception"
        return "class"
    if callable(obj):
        return "function"
    return "data"


def missing_docs() -> List[str]:
    """Public names (and public members of public classes) without a docstring."""
    ds = _import()
    missing = []
    for name in ds.__all__:
        obj = getattr(ds, name)
        kind = _kind(obj)
        if kind == "data":
            if _data_doc(name) is None and name not in DATA_DOCS:
                missing.append(name)
            continue
        if not inspect.getdoc(obj) or (kind != "function" and obj.__doc__ is None):
            missing.append(name)
        if kind == "class":
            for mname, value in _own_members(obj):
                if not _member_doc(value):
                    missing.append(f"{name}.{mname}")
    return missing


# ---- the page -----------------------------------------------------------------------

def _anchor(title: str) -> str:
    """GitHub's heading anchor for `title`."""
    text = re.sub(r"[^\w\- ]", "", title.lower())
    return text.replace(" ", "-")


def render() -> str:
    """The whole of docs/python-api.md, as a string."""
    ds = _import()
    groups: Dict[str, List[str]] = {"function": [], "class": [], "enum": [], "exception": [],
                                    "data": []}
    for name in ds.__all__:
        groups[_kind(getattr(ds, name))].append(name)

    out: List[str] = []
    out.append("# Python API reference")
    out.append("")
    out.append("<!-- Generated by docs/gen_python_api.py from the docstrings of dlpackshim's "
               "public names; do not edit by hand: edit the docstrings, then run "
               "`python3 docs/gen_python_api.py`. -->")
    out.append("")
    out.append(docstring_to_markdown(inspect.getdoc(ds) or ""))
    out.append("")
    out.append("Every name below is in `dlpackshim.__all__`; anything else in the package "
               "(the modules starting with `_`) is internal. For a guided tour see "
               "[the tutorial](tutorial.md); for what each DLPack rule does here, "
               "[the behaviour table](behaviour.md).")
    out.append("")

    titles = [("function", "Functions"), ("class", "Classes"), ("enum", "Enumerations"),
              ("exception", "Exceptions"), ("data", "Constants")]
    out.append("## Contents")
    out.append("")
    for kind, title in titles:
        if groups[kind]:
            names = ", ".join(f"[`{n}`](#{_anchor('dlpackshim.' + n)})" for n in groups[kind])
            out.append(f"- {title}: {names}")
    out.append("")

    for kind, title in titles:
        if not groups[kind]:
            continue
        out.append(f"## {title}")
        out.append("")
        for name in groups[kind]:
            out.extend(_render_name(ds, name, kind))
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def _render_name(ds: Any, name: str, kind: str) -> List[str]:
    obj = getattr(ds, name)
    out = [f"### dlpackshim.{name}", ""]
    if kind == "function":
        out += ["```text", _signature(obj, f"dlpackshim.{name}"), "```", ""]
        out += [docstring_to_markdown(inspect.getdoc(obj) or ""), ""]
    elif kind == "data":
        doc = _data_doc(name) or DATA_DOCS.get(name, "")
        value = getattr(ds, name)
        # A path depends on the machine: show its type, not its value.
        shown = f": {type(value).__name__}" if name in MACHINE_DEPENDENT else f" = {value!r}"
        out += ["```text", f"dlpackshim.{name}{shown}", "```", ""]
        out += [inline(doc), ""]
    elif kind == "enum":
        bases = "IntEnum" if issubclass(obj, int) else "Enum"
        out += ["```text", f"class dlpackshim.{name}(enum.{bases})", "```", ""]
        out += [docstring_to_markdown(inspect.getdoc(obj) or ""), ""]
        out += ["| member | value |", "|---|---|"]
        out += [f"| `{m.name}` | {int(m.value)} |" for m in obj]
        out.append("")
    else:
        # Named in full: "Tensor(Tensor)" would read as a constructor's argument.
        bases = ", ".join(b.__qualname__ if b.__module__ == "builtins"
                          else f"{b.__module__}.{b.__qualname__}"
                          for b in obj.__bases__ if b is not object)
        head = f"class dlpackshim.{name}" + (f"({bases})" if bases else "")
        fields = getattr(obj, "_fields", None)
        # A NamedTuple, or a value type with its own constructor (DType): called as shown.
        if fields or ("__new__" in obj.__dict__ and obj.__bases__ == (object,)):
            head = _signature(obj, f"class dlpackshim.{name}")
        out += ["```text", head, "```", ""]
        out += [docstring_to_markdown(inspect.getdoc(obj) or ""), ""]
        if fields:
            out += [f"Fields (a `NamedTuple`): {', '.join(f'`{f}`' for f in fields)}.", ""]
        if "__enter__" in obj.__dict__ and hasattr(obj, "close"):
            out += [f"A {name} is a context manager: `with` calls `close()` on exit.", ""]
        for mname, value in _own_members(obj):
            out += _render_member(name, mname, value)
    return out


def _render_member(cls: str, mname: str, value: Any) -> List[str]:
    if isinstance(value, property):
        ret = value.fget.__annotations__.get("return", "")
        typ = f" -> {ret}" if isinstance(ret, str) and ret else ""
        out = [f"#### {cls}.{mname}", "", f"*property*{(' `' + typ[4:] + '`') if typ else ''}", ""]
    else:
        func = getattr(value, "__func__", value)
        prefix = "classmethod " if isinstance(value, classmethod) else ""
        out = [f"#### {cls}.{mname}", "", "```text",
               f"{prefix}{_signature(func, f'{cls}.{mname}')}", "```", ""]
    out += [docstring_to_markdown(_member_doc(value) or ""), ""]
    return out


def main(argv: Optional[List[str]] = None) -> int:
    return _gen_common.main(argv, __doc__, __file__, OUTPUT, render, missing_docs, "no docstring")


if __name__ == "__main__":
    sys.exit(main())
