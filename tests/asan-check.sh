#!/bin/sh
# asan-check.sh - the test step of `make check-asan` (tests/hardening.mk).
#
#   asan-check.sh LOGDIR MAKE [ARGS...]
#
# Runs `MAKE ARGS check` in the sanitized build (the current directory), with
# every process writing its sanitizer reports under LOGDIR, then fails on any
# report (ASan, LSan, UBSan) and on any failing test.
#
# One failure is not ours: LeakSanitizer stops every thread of a process when
# it exits, and its tracer can crash: on a dynamic TLS block at a page offset
# of 16 (deterministic; avoided by intercept_tls_get_addr=0 in
# tests/hardening.mk), and now and then while threads are exiting (torch,
# OpenBLAS, Open MPI). The process then aborts with "LeakSanitizer has
# encountered a fatal error" in its log and no report (google/sanitizers
# issues 1170, 1322, 1353). When that is the only thing wrong, the tests that
# failed (for the Python suite, only its failed test ids) are run once more; a
# report of a real error is never retried.
set -u
logdir=$1
shift

# What a sanitizer writes for an error other than a leak, and for a leak;
# a log with either is a report.
errors='ERROR: AddressSanitizer|:[0-9]+:[0-9]+: runtime error:|AddressSanitizer: CHECK failed'
report="ERROR: LeakSanitizer|$errors"
reports() {
  grep -lE "$report" "$logdir"/* $(find . -name '*.log') 2>/dev/null
}

# A leak report that is the interpreter's alone: every block was allocated
# directly by the interpreter, and no frame lies in libdlpackshim or csrc/.
# A stripped interpreter without frame pointers (Debian's
# /usr/bin/python3.11) records one unnamed frame per allocation, so
# tests/lsan.supp cannot name the CPython allocators it suppresses elsewhere.
# Such logs are set aside and listed, not counted; a leak with a frame of ours
# always counts. (Leaks do not change a process's exit status here: exitcode=0
# in tests/hardening.mk; the reports are the judge.)
# A frame of the interpreter: in its binary or libpython when it has no
# names, in CPython's own sources when it has (a pyenv build keeps them).
interpreter_frame='/bin/python3|/libpython3| (Objects|Python|Modules|Parser)/|/Python-3[^/ ]*/(Objects|Python|Modules|Parser)/'
interpreter_only() {
  grep -q 'ERROR: LeakSanitizer' "$1" &&
    ! grep -qE "$errors|libdlpackshim|csrc/" "$1" &&
    ! grep -E '^ *#1 ' "$1" | grep -vqE "$interpreter_frame"
}
set_aside() {
  for f in "$logdir"/*; do
    if [ -f "$f" ] && interpreter_only "$f"; then
      mkdir -p "$logdir/interpreter" && mv "$f" "$logdir/interpreter/"
      echo "check-asan: not counted, the interpreter's own leaks at exit: $logdir/interpreter/${f##*/}"
    fi
  done
}

"$@" check
status=$?
tail -n 25 tests/python/run-pytest.sh.log 2>/dev/null
set_aside

crashed=$(grep -l 'LeakSanitizer has encountered a fatal error' "$logdir"/* 2>/dev/null)
tests=$(sed -n 's/^FAIL: //p' test-suite.log 2>/dev/null | sort -u | tr '\n' ' ')
if [ $status -ne 0 ] && [ -n "$crashed" ] && [ -n "$tests" ] && [ -z "$(reports)" ]; then
  echo "check-asan: LeakSanitizer's tracer crashed at a process exit (no report):"
  for f in $crashed; do echo "==== $f"; head -n 5 "$f"; done
  ids=
  case " $tests" in *" tests/python/run-pytest.sh "*)
    ids=$(sed -n 's/^FAILED \([^ ]*\).*/\1/p' tests/python/run-pytest.sh.log | sort -u | tr '\n' ' ')
  esac
  echo "check-asan: re-running once: $tests${ids:+(pytest: $ids)}"
  mkdir -p "$logdir/tracer-crashed" && mv $crashed "$logdir/tracer-crashed/"
  DLPACKSHIM_PYTEST_ARGS=$ids "$@" check TESTS="$tests"
  status=$?
  tail -n 25 tests/python/run-pytest.sh.log 2>/dev/null
  set_aside
fi

# What a failed run leaves to explain it: the failed test ids, and every log a
# sanitizer wrote that is not a report (a tracer that crashed, a CHECK).
if [ $status -ne 0 ]; then
  grep '^FAILED ' tests/python/run-pytest.sh.log 2>/dev/null
  for f in "$logdir"/*; do
    [ -f "$f" ] && ! grep -qE "$report" "$f" &&
      { echo "==== $f (no report)"; head -n 20 "$f"; }
  done
fi

found=$(reports)
if [ -n "$found" ]; then
  for f in $found; do echo "==== $f"; head -n 80 "$f"; done
  echo "check-asan: FAIL: sanitizer reports above"
  exit 1
fi
if [ $status -eq 0 ]; then echo "check-asan: PASS (no sanitizer report)"; fi
exit $status
