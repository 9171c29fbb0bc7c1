"""The constants as the docs show them (issue 34.14): docs/c-api.md's enum tables
keep the header's text, `|` included, and every host copy in the docs and the
examples passes a stream that the CPU's stream rule accepts."""

from __future__ import annotations

import glob
import os
import re

import pytest

from dlpackshim import _cdef
from dlpackshim._ffi import ffi, lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
HEADER = os.path.join(ROOT, "csrc", "dlpackshim.h")
C_API = os.path.join(ROOT, "docs", "c-api.md")

# An enum member and its comment, which may go on over several lines.
MEMBER = re.compile(r"^\s*(DLPACKSHIM_\w+)\s*=\s*-?\w+\s*,?\s*/\*(.*?)\*/", re.S | re.M)
# A Markdown table cell boundary: a | that is not escaped.
CELL = re.compile(r"(?<!\\)\|")


def _header_notes():
    if not os.path.exists(HEADER):
        pytest.skip("csrc/dlpackshim.h is not here (an installed package)")
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    return {name: " ".join(note.split()) for name, note in MEMBER.findall(text)}


def test_enum_tables_of_c_api_md_keep_the_headers_text():
    notes = _header_notes()
    assert "|" in notes["DLPACKSHIM_LAYOUT_BOTH"]   # the case that lost its |
    with open(C_API, encoding="utf-8") as f:
        rows = {m.group(1): line for line in f for m in [re.match(r"\| `(DLPACKSHIM_\w+)` \|", line)]
                if m}
    for name, note in notes.items():
        cells = CELL.split(rows[name].strip())
        assert len(cells) == 5, f"{name}: a | in its text split the row: {rows[name]!r}"
        shown = cells[3].strip().replace("\\|", "|").replace("`", "")
        assert shown == note, name


# dlpackshim_copy(dst, src, STREAM) and its spellings in Rust (&dst) and Fortran.
COPY_CALL = re.compile(r"dlpackshim_copy\(\s*&?\w+,\s*&?\w+,\s*([-\w]+)\s*\)")
NAMED = {name: value for enum in _cdef.ENUMS.values() for name, value in enum.items()}


def _copy_calls():
    paths = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")) + \
        glob.glob(os.path.join(ROOT, "examples", "**", "*.*"), recursive=True)
    for path in sorted(paths):
        if path.endswith(("gpu.md", "c-api.md")):   # GPU copies take a real stream
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for arg in COPY_CALL.findall(text):
            yield os.path.relpath(path, ROOT), arg


def test_host_copies_in_docs_and_examples_pass_a_stream_the_cpu_accepts():
    if not os.path.isdir(os.path.join(ROOT, "examples")):
        pytest.skip("the examples are not here (an installed package)")
    calls = list(_copy_calls())
    assert len(calls) >= 3, calls   # other-languages.md, the Rust and the Fortran examples
    cpu = _cdef.ENUMS["DLDeviceType"]["kDLCPU"]
    for where, arg in calls:
        if arg == "stream":   # the signature, no value
            continue
        value = NAMED[arg] if arg in NAMED else int(re.sub(r"_c_int64_t$", "", arg))
        normalized = ffi.new("int64_t *")
        assert lib.dlpackshim_stream_check(cpu, 1, value, normalized) == 0, (
            f"{where}: a host copy passes stream {arg}, which the CPU's stream rule refuses")
