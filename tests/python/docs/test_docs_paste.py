"""Every ```python block of the docs pastes into the interactive interpreter
(issue 34.9): the REPL of CPython 3.11 and 3.12 compiles line by line, so a
compound statement (try, with, def, class) must end with a blank line before
the next unindented line, and a blank line inside one ends it early.
code.InteractiveConsole compiles the way that REPL does; here it compiles
each line as pasted and runs nothing (test_docs.py runs the blocks)."""

from __future__ import annotations

import code
import os
import sys
from typing import List

import pytest

from test_docs import DOC_FILES, ROOT, python_blocks


class _Paste(code.InteractiveConsole):
    """The REPL, compiling only: what a paste of the block would raise."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: List[BaseException] = []

    def runcode(self, compiled) -> None:   # noqa: D102 - compile only
        pass

    def showsyntaxerror(self, filename=None, **kwargs) -> None:   # noqa: D102
        self.errors.append(sys.exc_info()[1])


def paste_errors(source: str, first_line: int) -> List[str]:
    """Where pasting `source` line by line gives a SyntaxError, and why."""
    console, found = _Paste(), []
    for i, line in enumerate(source.splitlines() + [""]):
        console.push(line)
        if console.errors:
            found.append(f"line {first_line + i}: {console.errors[0].msg}: {line!r}")
            console.errors.clear()
    return found


def test_a_block_that_needs_a_blank_line_is_caught():
    assert paste_errors("try:\n    x = 1\nexcept ValueError:\n    pass\ny = 2\n", 1)
    assert paste_errors("class A:\n    a = 1\n\n    b = 2\n", 1)
    assert paste_errors("try:\n    x = 1\nexcept ValueError:\n    pass\n\ny = 2\n", 1) == []


@pytest.mark.parametrize("path", [p for p in DOC_FILES if python_blocks(p)],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_python_blocks_paste_into_the_repl(path):
    errors = [f"{os.path.relpath(path, ROOT)}:{error}"
              for n, src in python_blocks(path) if not src.lstrip().startswith(">>>")
              for error in paste_errors(src, n)]
    assert errors == [], "\n".join(errors)
