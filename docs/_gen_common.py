"""The command line shared by docs/gen_c_api.py and docs/gen_python_api.py:
write the generated page, or with --check say whether it is up to date."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, List, Optional


def main(argv: Optional[List[str]], doc: str, script: str, output: str,
         render: Callable[[], str], missing_docs: Callable[[], List[str]],
         missing_what: str) -> int:
    """Write `render()` to `output` (or -o), or with --check compare it with that file.

    `doc` is the generator's docstring (its first line describes the command),
    `script` its ``__file__``. Exit status 1 when the page is stale (--check) or
    when `missing_docs()` names anything (printed after `missing_what`)."""
    page = "docs/" + os.path.basename(output)
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {page} is not what this script writes")
    parser.add_argument("-o", "--output", default=output)
    args = parser.parse_args(argv)
    text = render()
    missing = missing_docs()
    if missing:
        print(f"{missing_what}: " + ", ".join(missing), file=sys.stderr)
    if args.check:
        with open(args.output, encoding="utf-8") as f:
            same = f.read() == text
        stale = f"STALE (run docs/{os.path.basename(script)})"
        print(f"{args.output}: {'up to date' if same else stale}")
        return 0 if same and not missing else 1
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output}")
    return 1 if missing else 0
