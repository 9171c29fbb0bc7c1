#!/bin/sh
# run-pytest.sh - the Python package's suite (tests/python) for `make check`.
# Exit codes as automake reads them: 0 pass, 1 fail, 77 skip (no Python, or
# no cffi), 99 hard error (pytest missing or broken). pytest's "no tests
# collected" (5) is a failure: a suite that silently vanished must not pass.
set -u
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "${PYTHON:-}" ]; then
  echo "run-pytest: PYTHON is not set (configure found no Python): skipped"
  exit 77
fi
if ! "$PYTHON" -c "import cffi" 2>/dev/null; then
  echo "run-pytest: $PYTHON cannot import cffi: skipped"
  exit 77
fi
if ! "$PYTHON" -c "import pytest" 2>/dev/null; then
  echo "run-pytest: $PYTHON cannot import pytest (pip install pytest)"
  exit 99
fi
# automake's harness keeps this script's output in run-pytest.sh.log and shows
# nothing until the end: say where to watch, on the terminal when make gave us
# one (fd 9: AM_TESTS_FD_REDIRECT in tests/python/local.mk).
if { true >&9; } 2>/dev/null; then
  echo "run-pytest: the Python suite takes minutes; to watch it: tail -f tests/python/run-pytest.sh.log" >&9
fi
# Unbuffered, at pytest's default verbosity: a line per test file, with its
# progress, reaches the log as it runs.
PYTHONUNBUFFERED=1; export PYTHONUNBUFFERED
if [ -n "${DLPACKSHIM_PYTEST_ARGS:-}" ]; then
  # Test ids to run instead of the whole suite (tests/asan-check.sh re-runs).
  # shellcheck disable=SC2086
  "$PYTHON" -m pytest -p no:cacheprovider $DLPACKSHIM_PYTEST_ARGS
else
  "$PYTHON" -m pytest -p no:cacheprovider "$srcdir/tests/python"
fi
status=$?
case $status in
  0|1) exit $status ;;
  5) echo "run-pytest: pytest collected no tests"; exit 1 ;;
  *) echo "run-pytest: pytest exited with $status"; exit 99 ;;
esac
