#!/usr/bin/env python3
"""Generate docs/c-api.md from csrc/dlpackshim.h.

Usage (from the repository root; needs nothing but Python)::

    python3 docs/gen_c_api.py            # rewrites docs/c-api.md
    python3 docs/gen_c_api.py --check    # exit 1 if the file is stale

The page has the header's conventions (its opening comment), its enums as
tables (every entry with its value and comment), and every ``DLPACKSHIM_API``
function with its prototype and ``/*! ... */`` doc comment, grouped by the
header's own sections (``/* ---- name ---- */`` lines and ``/* ==== */``
blocks). tests/python/docs/test_docs.py fails when the committed page differs
from what this script writes, when a function has no doc comment, and when
a name of tests/c/exports.txt is missing from the page.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:   # for _gen_common, also when loaded by path (test_docs.py)
    sys.path.insert(0, HERE)
import _gen_common  # noqa: E402  (docs/_gen_common.py: the command line)
HEADER = os.path.join(ROOT, "csrc", "dlpackshim.h")
OUTPUT = os.path.join(HERE, "c-api.md")

# Tokens of a doc comment that read as code: identifiers with an underscore
# (dlpackshim_copy, DLPACKSHIM_ERR_TYPE, _UNSUPPORTED, byte_offset), calls
# such as f(), member accesses (t->deleter(t)) and dereferences (*lo).
_CODE = re.compile(
    r"(?<![\w`*&])("
    r"\(char \*\)\w+"                                  # (char *)data
    r"|__\w+?__(?:\([^)\s]*\))?"                       # __dlpack__(stream=...)
    r"|(?:ctypes|dlpackshim)\.\w+(?:\([^)\s]*\))?"      # ctypes.PyDLL(restype=py_object)
    r"|&?\w+->\w+(?:\(\w*\))?"                         # t->deleter(t), &t->dl_tensor
    r"|\w+_\*"                                         # used_*
    r"|_[a-z]\w*"                                       # _import
    r"|\*\w+(?:,\s*\*\w+)?"                            # *lo, *managed_out
    r"|_?[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?:\(\w*\))?"  # snake_case, CONSTANTS
    r"|_[A-Z][A-Z_]+"                                  # _UNSUPPORTED
    r"|[A-Za-z]\w*\(\)"                                # fn()
    r"|kDL\w+|DLPack\w+|DLManaged\w+|DLTensor|PyCapsule\w*|PyDLL|py_object|intptr_t"
    r")(?![\w`])"
)


def code_spans(text: str) -> str:
    """Wrap code-like tokens of prose in backticks (so Markdown leaves them alone)."""
    parts = re.split(r"(\"[^\"\n]*\")", text)  # quoted strings become code as they are
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"`{part}`")
        else:
            out.append(_CODE.sub(lambda m: f"`{m.group(1)}`", part))
    return "".join(out)


def _comment_text(raw: str) -> List[str]:
    """The lines of a C comment without its /* */ and leading ' * '."""
    raw = re.sub(r"^/\*!?", "", raw.strip())
    raw = re.sub(r"\*/$", "", raw)
    lines = []
    for line in raw.splitlines():
        line = re.sub(r"^\s*\* ?", "", line) if line.lstrip().startswith("*") else line.strip()
        lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


class Function:
    def __init__(self, name: str, prototype: str, doc: Optional[List[str]]) -> None:
        self.name, self.prototype, self.doc = name, prototype, doc


class Enum:
    def __init__(self, name: str, comment: Optional[List[str]],
                 entries: List[Tuple[str, str, str]]) -> None:
        self.name, self.comment, self.entries = name, comment, entries


class Section:
    def __init__(self, title: str, intro: Optional[List[str]] = None) -> None:
        self.title, self.intro = title, intro
        self.functions: List[Function] = []


_TOKEN = re.compile(
    r"(?P<doc>/\*!.*?\*/)"
    r"|(?P<comment>/\*.*?\*/)"
    r"|(?P<enum>typedef enum\s*\{(?P<body>.*?)\}\s*(?P<ename>\w+)\s*;)"
    r"|(?P<typedef>typedef [^;{]*\(\*\s*(?P<tname>\w+)\)\s*\([^;]*\)\s*;)"
    r"|(?P<api>DLPACKSHIM_API\s+[^;]*?\b(?P<fname>dlpackshim_\w+)\s*\([^;]*\)\s*;)",
    re.S,
)


def parse(text: str) -> Tuple[List[str], List[Enum], List[Tuple[str, List[str]]], List[Section]]:
    """(conventions, enums, callback typedefs, sections) of the header."""
    conventions: List[str] = []
    enums: List[Enum] = []
    typedefs: List[Tuple[str, List[str]]] = []
    sections: List[Section] = []
    doc: Optional[List[str]] = None       # the last /*! comment, for the declarations after it
    comment: Optional[List[str]] = None   # the last plain comment (describes the next enum)
    last_end = 0
    for m in _TOKEN.finditer(text):
        between = text[last_end:m.start()]
        last_end = m.end()
        # Anything but whitespace and preprocessor lines between a comment and
        # what follows detaches the comment.
        if re.sub(r"^\s*#.*$", "", between, flags=re.M).strip():
            doc = comment = None
        if m.group("doc"):
            doc, comment = _comment_text(m.group("doc")), None
        elif m.group("comment"):
            lines = _comment_text(m.group("comment"))
            title = _section_title(lines)
            if not conventions and "Conventions" in lines:
                conventions = lines[lines.index("Conventions") + 1:]
            if title is not None:
                sections.append(Section(title[0], title[1]))
                comment = None
            else:
                comment = lines
            doc = None
        elif m.group("enum"):
            enums.append(Enum(m.group("ename"), comment, _enum_entries(m.group("body"))))
            comment = None
        elif m.group("typedef"):
            if m.group("tname").startswith("dlpackshim_"):
                typedefs.append((" ".join(m.group("typedef").split()), comment or []))
            comment = None
        elif m.group("api"):
            if not sections:
                sections.append(Section("Functions"))
            proto = _prototype(m.group("api"))
            sections[-1].functions.append(Function(m.group("fname"), proto, doc))
            comment = None
    return conventions, enums, typedefs, [s for s in sections if s.functions]


def _section_title(lines: List[str]) -> Optional[Tuple[str, Optional[List[str]]]]:
    """('title', intro lines or None) when a comment opens a section of the header."""
    if len(lines) == 1:
        m = re.fullmatch(r"-{2,}\s*(.+?)\s*-{2,}", lines[0].strip())
        if m:
            return m.group(1)[0].upper() + m.group(1)[1:], None
    if lines and re.fullmatch(r"={5,}", lines[0].strip()):
        body = [x for x in lines[1:] if not re.fullmatch(r"={5,}", x.strip())]
        while body and not body[0].strip():
            body.pop(0)
        if not body:
            return None
        title = re.sub(r"\s*\(.*?\)\.?$", "", body[0].strip()).rstrip(".")
        if title.startswith("Part 1"):
            return "", None  # the DLPack ABI itself: described in the page's introduction
        title = re.sub(r"^Part \d+\.\s*", "", title)
        rest = body[1:]
        while rest and not rest[0].strip():
            rest.pop(0)
        return title, (body[:1] + [""] + rest) if rest else body[:1]
    return None


def _enum_entries(body: str) -> List[Tuple[str, str, str]]:
    """(name, value, comment) of each member; a comment may go on over the
    lines below its member, up to its closing */."""
    entries = []
    lines = iter(body.splitlines())
    for line in lines:
        m = re.match(r"\s*(\w+)\s*=\s*([-\w]+)\s*,?\s*(?:/\*\s*(.*?)\s*(\*/)?)?\s*$", line)
        if m:
            note = m.group(3) or ""
            if m.group(3) is not None and not m.group(4):   # the comment goes on
                for more in lines:
                    text, closed, _ = more.partition("*/")
                    note += " " + text.strip()
                    if closed:
                        break
            entries.append((m.group(1), m.group(2).rstrip("U"), note.strip()))
    return entries


def _prototype(decl: str) -> str:
    """The declaration as the header spells it, re-indented to start at column 0."""
    lines = decl.splitlines()
    first = lines[0]
    rest = [x.strip() for x in lines[1:]]
    if not rest:
        return first
    return first + "\n" + "\n".join("    " + x for x in rest)


def _paragraphs(lines: List[str]) -> List[str]:
    """Doc comment lines as Markdown paragraphs; `@return` starts a **Returns:** one."""
    out: List[str] = []
    para: List[str] = []
    for line in lines:
        s = line.strip()
        if not s:
            if para:
                out.append(" ".join(para))
                para = []
            continue
        if s.startswith("@return"):
            if para:
                out.append(" ".join(para))
            para = ["**Returns:**", code_spans(s[len("@return"):].strip())]
            continue
        para.append(code_spans(s))
    if para:
        out.append(" ".join(para))
    return out


def _inline_returns(lines: List[str]) -> List[str]:
    """Split `... @return x` (a comment whose @return is mid-line) into two lines."""
    out = []
    for line in lines:
        if "@return" in line and not line.lstrip().startswith("@return"):
            head, tail = line.split("@return", 1)
            out += [head.rstrip(), "@return" + tail]
        else:
            out.append(line)
    return out


def render() -> str:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    conventions, enums, typedefs, sections = parse(text)
    out: List[str] = []
    out += [
        "# C API reference",
        "",
        "<!-- Generated by docs/gen_c_api.py from csrc/dlpackshim.h; do not edit by hand: "
        "edit the header's comments, then run `python3 docs/gen_c_api.py`. -->",
        "",
        "`libdlpackshim.so` has one public header, `dlpackshim.h` (installed by "
        "`make install`; `pkg-config --cflags --libs dlpackshim` gives the flags). It "
        "declares the DLPack 1.3 ABI (`DLTensor`, `DLManagedTensor`, "
        "`DLManagedTensorVersioned`, the exchange table `DLPackExchangeAPI`; a program "
        "that included `dlpack.h` first keeps its own definitions) and the flat API "
        "below: plain functions with integer and pointer arguments, so ctypes, "
        "ABI-mode cffi, Rust or Julia can call every one. "
        "[other-languages.md](other-languages.md) gives the ownership rules for callers "
        "outside C; [python-api.md](python-api.md) documents the Python package built on it.",
        "",
        "## Conventions",
        "",
    ]
    for para in _conventions(conventions):
        out += [para, ""]
    out += ["## Contents", ""]
    out.append("- [Constants](#constants): " + ", ".join(f"`{e.name}`" for e in enums))
    for s in sections:
        out.append(f"- [{s.title}](#{_anchor(s.title)}): "
                   + ", ".join(f"[`{fn.name}`](#{fn.name})" for fn in s.functions))
    out.append("")

    out += ["## Constants", "",
            "Every constant a foreign caller needs is an enum with a fixed value (ABI-mode "
            "FFIs cannot read macros): copy the numbers, they never change.", ""]
    for e in enums:
        out += [f"### {e.name}", ""]
        if e.comment:
            out += [code_spans(" ".join(x.strip() for x in e.comment)), ""]
        out += ["| name | value | meaning |", "|---|---|---|"]
        for name, value, note in e.entries:
            # A | in a table cell must be escaped, or it ends the cell.
            out.append(f"| `{name}` | {value} | {code_spans(note).replace('|', chr(92) + '|')} |")
        out.append("")
    for decl, comment in typedefs:
        name = re.search(r"\(\*\s*(\w+)\)", decl).group(1)
        out += [f"### {name}", "", "```c", decl, "```", ""]
        if comment:
            out += [code_spans(" ".join(x.strip() for x in comment)), ""]

    for s in sections:
        out += [f"## {s.title}", ""]
        if s.intro and len(s.intro) > 1:
            out += ["```text", *s.intro[2:], "```", ""]
        for fn in s.functions:
            out += [f"### {fn.name}", "", "```c", fn.prototype, "```", ""]
            if fn.doc:
                doc = _inline_returns(fn.doc)
                # The comment opens with "name(): " (or "a() / b(): "): the heading says it.
                doc[0] = re.sub(r"^(?:\w+\(\)\s*/\s*)*\w+\(\):\s*", "", doc[0])
                first = re.match(r"\w+", doc[0])
                # Capitalised unless it starts with a name of the prototype ("nbytes").
                if first and not re.search(rf"\b{first.group(0)}\b", fn.prototype):
                    doc[0] = doc[0][0].upper() + doc[0][1:]
                for para in _paragraphs(doc):
                    out += [para, ""]
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def _conventions(lines: List[str]) -> List[str]:
    """The header's "Conventions" bullets as a Markdown list."""
    items: List[str] = []
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("- "):
            items.append(s[2:])
        elif items:
            items[-1] += " " + s
    return ["\n".join("- " + code_spans(x) for x in items)] if items else []


def _anchor(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def functions() -> List[Function]:
    """Every DLPACKSHIM_API function of the header, in order."""
    with open(HEADER, encoding="utf-8") as f:
        return [fn for s in parse(f.read())[3] for fn in s.functions]


def missing_docs() -> List[str]:
    """Exported functions without a /*! doc comment."""
    return [fn.name for fn in functions() if not fn.doc]


def main(argv: Optional[List[str]] = None) -> int:
    return _gen_common.main(argv, __doc__, __file__, OUTPUT, render, missing_docs, "no doc comment")


if __name__ == "__main__":
    sys.exit(main())
