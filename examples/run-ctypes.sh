#!/bin/sh
# make check: run the plain-ctypes example (ctypes_basic.py) with the configured
# Python against the freshly built library (DLPACKSHIM_LIBRARY, set by make check).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "SKIP: no Python interpreter ($python): the ctypes example does not run"
  exit 77
fi
exec "$python" "$srcdir/examples/ctypes_basic.py"
