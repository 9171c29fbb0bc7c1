#!/usr/bin/env python3
"""Writes dlpackshim/_cdef.py: the public header's declarations, parsed for cffi.

The package binds libdlpackshim with cffi in ABI mode, which needs the C
declarations. They are derived from csrc/dlpackshim.h, the one source of
truth, never kept by hand: comments and preprocessor lines are dropped,
DLPACKSHIM_API goes, and every typedef, enum and prototype stays (the header
keeps each constant a foreign caller needs as an enum with a literal value,
which cffi reads). cffi's out-of-line ABI mode parses them here, once
(pycparser, at generation), into the module's `ffi`: importing the package
parses nothing, needs no C compiler and builds no extension module. The
enums are also written out as a dict, ENUMS, from which dlpackshim._types
builds DeviceType and DTypeCode. tests/python/c_api/test_cdef.py checks that the
file is current. Needs cffi (and its pycparser).

    python3 csrc/gen_cdef.py            # rewrites dlpackshim/_cdef.py
    python3 csrc/gen_cdef.py --check    # exit 1 if it is stale
"""

import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "dlpackshim.h")
OUTPUT = os.path.join(os.path.dirname(HERE), "dlpackshim", "_cdef.py")


def cdef_of(header_text: str) -> str:
    """The header's declarations, as cffi's cdef reads them."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)  # comments
    text = re.sub(r"//[^\n]*", "", text)
    lines = []
    continued = False
    skip = []  # one entry per open #if: True inside `#ifdef __cplusplus`
    for line in text.splitlines():
        stripped = line.strip()
        directive = continued or stripped.startswith("#")
        continued = directive and line.rstrip().endswith("\\")
        if directive:
            words = stripped.lstrip("#").split()
            if words[:1] in (["if"], ["ifdef"], ["ifndef"]):
                skip.append(words[:2] == ["ifdef", "__cplusplus"])
            elif words[:1] == ["endif"] and skip:
                skip.pop()
            continue
        if not any(skip):
            lines.append(line.rstrip())
    text = "\n".join(lines)
    text = re.sub(r"\bDLPACKSHIM_API\s+", "", text)
    # Declarations only: blank runs collapse, the order stays the header's.
    out, blank = [], True
    for line in text.splitlines():
        if not line.strip():
            if not blank:
                out.append("")
            blank = True
            continue
        out.append(line)
        blank = False
    return "\n".join(out).strip() + "\n"


def enums_of(cdef: str) -> dict:
    """{typedef name: {member: value}} of every `typedef enum` in the cdef."""
    enums = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+)\s*;", cdef, flags=re.S):
        members = {}
        for item in body.split(","):
            if item.strip():
                member, value = (part.strip() for part in item.split("="))
                members[member] = int(value.rstrip("uU"), 0)
        enums[name] = members
    return enums


def render(header_text: str) -> str:
    """The text of dlpackshim/_cdef.py for this header."""
    import contextlib
    import io

    import cffi

    cdef = cdef_of(header_text)
    builder = cffi.FFI()
    builder.cdef(cdef)
    builder.set_source("dlpackshim._cdef", None)  # out-of-line, ABI mode: no C source
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "_cdef.py")
        with contextlib.redirect_stdout(io.StringIO()):  # cffi says "generating ..."
            builder.emit_python_code(path)
        with open(path, encoding="utf-8") as f:
            module = f.read().replace("# auto-generated file\n", "", 1)
    lines = ["ENUMS = {"]
    for name, members in enums_of(cdef).items():
        lines.append(f"    {name!r}: {{")
        lines.extend(f"        {member!r}: {value}," for member, value in members.items())
        lines.append("    },")
    lines.append("}")
    return (
        '"""csrc/dlpackshim.h parsed for cffi (out-of-line ABI mode), by csrc/gen_cdef.py\n'
        f"with cffi {cffi.__version__}: do not edit.\n\n"
        "Regenerate with `python3 csrc/gen_cdef.py` after changing the header;\n"
        'tests/python/c_api/test_cdef.py fails while this file is stale.\n"""\n'
        f"CFFI_VERSION = {cffi.__version__!r}\n\n"
        + module
        + "\n# cffi 2.x out-of-line ABI mode aborts the process (realize_c_type.c, an\n"
        "# assertion) when a function whose type is that of a struct's deleter field,\n"
        "# such as dlpackshim_tensor_free_legacy, is looked up before the struct type\n"
        "# is realized; realizing both managed structs first avoids it.\n"
        'ffi.typeof("DLManagedTensor")\n'
        'ffi.typeof("DLManagedTensorVersioned")\n'
        + "\n# The header's enums, {typedef: {member: value}}, in its order (dlpackshim._types\n"
        "# builds DeviceType and DTypeCode from them).\n"
        + "\n".join(lines) + "\n"
    )


def main(argv) -> int:
    with open(HEADER, encoding="utf-8") as f:
        wanted = render(f.read())
    if "--check" in argv:
        try:
            with open(OUTPUT, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != wanted:
            print(f"{OUTPUT} is stale: run `python3 csrc/gen_cdef.py`", file=sys.stderr)
            return 1
        return 0
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
