#!/usr/bin/env bash
# install-matrix.sh - install dlpackshim the ways users do, into fresh virtual
# environments OUTSIDE the clone, and run the suite (tests/python) against what
# was installed; conftest.py makes the suite import the installed package.
#
#   .ci/install-matrix.sh [ROUTE...]
#
# Routes (default: wheel sdist pypy inside):
#   wheel     `make wheel` once, then that manylinux wheel into every CPython
#   sdist     `python -m build --sdist` once, then the sdist into every CPython,
#             tested with the sdist's own tests/python (unpacked), not the clone's
#   local     `pip install <clone>` into every CPython
#   editable  `pip install -e <clone>` into every CPython (builds the library
#             in place: dlpackshim/libdlpackshim.so.2, gitignored)
#   pypy      pip must refuse the wheel and the sdist on PyPy, and
#             `import dlpackshim` must raise the one ImportError
#   inside    the README's route from INSIDE a clone: the wheel (the wheel
#             route's, else `make wheel`) with its [test] extra into
#             $FULL_PYTHON, a fresh clone that is not built, and `pytest
#             tests/python` from its root: its unbuilt dlpackshim/ folder must
#             shadow the installed package neither in pytest nor in the
#             children the tests start (tests/python/conftest.py)
#   sid       the same wheel into Debian sid's CPython 3.14 and 3.15, in a
#             chroot that mmdebstrap makes afresh (~30 s) from this machine's
#             Debian mirror (.ci/sid-chroot.sh; needs root and mmdebstrap);
#             the clone and the work folder are bind-mounted at their own
#             paths, and unmounted on exit
#
# PYTHONS (default "3.11 3.12 3.13"; "3.14 3.15" for sid): a missing interpreter is
# skipped with the reason printed. Each venv gets the NumPy that pip picks for
# it. Only on $FULL_PYTHON (3.11, where the pinned torch 2.13.0 CPU wheel
# exists) do torch and JAX go in and the property tests run at full size; the
# others run the whole suite with 10 examples per property test (hypothesis
# profile "quick", DLPACKSHIM_HYPOTHESIS_EXAMPLES=10) and 1-second stress
# tests (DLPACKSHIM_STRESS_SECONDS=1), so that the matrix stays short. ROUTE_PYTHONS_<route> narrows one route,
# e.g. ROUTE_PYTHONS_sdist="3.13" (what .ci/run does).
#
# MATRIX_WHEEL: install that wheel instead of making one.
#
# Work folder: $DLPACKSHIM_MATRIX_DIR, else a fresh mktemp -d. Exit 1 when any
# run failed. The last lines are a table (also in WORK/results.txt): python,
# route, pytest's counts, seconds.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=${DLPACKSHIM_MATRIX_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/dlpackshim-matrix.XXXXXX")}
mkdir -p "$WORK"
TOOLS_PY=${PYTHON:-$SRC/.venv/bin/python}
PYTHONS=${PYTHONS:-"3.11 3.12 3.13"}
FULL_PYTHON=${FULL_PYTHON:-3.11}
ROUTES=${*:-wheel sdist pypy inside}
: "${ROUTE_PYTHONS_sid:=3.14 3.15}"
TEST_DEPS="pytest hypothesis numpy mypy"  # mypy: test_typing.py reads the shipped stubs
FULL_DEPS="torch==2.13.0 jax[cpu]"  # pinned: an unpinned torch is a multi-GB CUDA build
status=0
table=()

say() { echo "== install-matrix: $*"; }

. "$SRC/.ci/sid-chroot.sh"
trap sid_leave EXIT
trap 'exit 130' INT TERM

on_target() {  # run "$@" where the route's Pythons are: here, or in the sid chroot
  if [ -n "$SID_ROOT" ]; then
    chroot "$SID_ROOT" /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$PWD" "$@"
  else
    "$@"
  fi
}

find_python() {  # the interpreter for version $1, or nothing
  local v=$1 p
  for p in "python$v" "$HOME/.pyenv/versions/$v"*/bin/python; do
    p=$(on_target /bin/sh -c 'command -v "$0"' "$p" 2>/dev/null) || continue
    if on_target "$p" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" \
        2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

record() {  # python route result
  table+=("$(printf '%-6s %-9s %s' "$1" "$2" "$3")")
}

run_suite() {  # venv python route
  local venv=$1 v=$2 route=$3 t0=$SECONDS log="$WORK/$route-$2.log" profile=quick
  # From $WORK, not the clone: nothing but the install provides dlpackshim
  # (the inside route runs from its own unbuilt clone on purpose).
  local dir=$WORK tests=$SRC/tests/python
  [ "$route" = inside ] && dir=$WORK/clone tests=tests/python
  [ "$route" = sdist ] && tests=$SDIST_TESTS   # what the sdist ships must run
  # MATRIX_QUICK=1 (CI: `make check` already ran the full suite on this
  # interpreter) keeps the quick profile on $FULL_PYTHON too.
  [ "$v" = "$FULL_PYTHON" ] && [ -z "${MATRIX_QUICK:-}" ] && profile=default
  local envs=("DLPACKSHIM_HYPOTHESIS_PROFILE=$profile")
  if [ "$profile" = quick ]; then
    envs+=("DLPACKSHIM_HYPOTHESIS_EXAMPLES=${DLPACKSHIM_HYPOTHESIS_EXAMPLES:-10}"
           "DLPACKSHIM_STRESS_SECONDS=${DLPACKSHIM_STRESS_SECONDS:-1}")
  fi
  (cd "$dir" && on_target env "${envs[@]}" "$venv/bin/pytest" -q -p no:cacheprovider "$tests") \
    >"$log" 2>&1
  local rc=$? counts
  counts=$(grep -E "^=*.*[0-9]+ (passed|failed|skipped|error)" "$log" | tail -n 1 | tr -d '=')
  counts=${counts:-"no summary (rc $rc, see $log)"}
  record "$v" "$route" "${counts# } [$((SECONDS - t0)) s]"
  if [ "$rc" != 0 ]; then
    status=1
    tail -n 40 "$log"
  fi
}

install_and_test() {  # route spec...
  local route=$1 v py venv
  shift
  local only_var="ROUTE_PYTHONS_$route"
  for v in ${!only_var:-$PYTHONS}; do
    if ! py=$(find_python "$v"); then
      say "skipped $route on $v: no CPython $v here (python$v or pyenv's ~/.pyenv/versions/$v.*)"
      record "$v" "$route" "skipped: no CPython $v"
      continue
    fi
    venv="$WORK/venv-$route-$v"
    rm -rf "$venv"
    say "$route on $v ($py)"
    local deps="$TEST_DEPS"
    [ "$v" = "$FULL_PYTHON" ] && deps="$deps $FULL_DEPS"
    if ! on_target "$py" -m venv "$venv" ||
       ! on_target "$venv/bin/python" -m pip install -q "$@" $deps; then
      record "$v" "$route" "INSTALL FAILED"
      status=1
      continue
    fi
    run_suite "$venv" "$v" "$route"
  done
}

SDIST_TESTS=""  # the unpacked sdist's tests/python (the sdist route)
WHEEL=${MATRIX_WHEEL:-}  # a wheel made already (.ci/run makes one for its two lanes)
build_wheel() {  # `make wheel` once for the routes that install it; WHEEL: its path
  [ -n "$WHEEL" ] && return 0
  say "make wheel"
  if ! make -C "$SRC" wheel PYTHON="$TOOLS_PY" >"$WORK/make-wheel.log" 2>&1; then
    cat "$WORK/make-wheel.log"
    return 1
  fi
  tail -n 12 "$WORK/make-wheel.log"
  WHEEL=$(ls "$SRC"/wheelhouse/dlpackshim-*.whl)
}

test_inside_clone() {  # the inside route (see the header)
  build_wheel || { record all inside "make wheel FAILED"; status=1; return; }
  rm -rf "$WORK/clone"
  git clone -q "$SRC" "$WORK/clone" || { record all inside "git clone FAILED"; status=1; return; }
  ROUTE_PYTHONS_inside=${ROUTE_PYTHONS_inside:-$FULL_PYTHON} install_and_test inside "$WHEEL[test]"
}

for route in $ROUTES; do
  case $route in
    wheel)
      if ! build_wheel; then
        record all wheel "make wheel FAILED"
        status=1
        continue
      fi
      install_and_test wheel "$WHEEL"
      ;;
    sid)
      if ! build_wheel; then
        record all sid "make wheel FAILED"
        status=1
        continue
      fi
      t0=$SECONDS
      host_work=$WORK
      WORK=$host_work/sid  # what the chroot sees: its venvs and logs
      mkdir -p "$WORK"
      if ! sid_enter "$host_work/sid-root" "$SRC" "$WORK"; then
        record sid sid "chroot FAILED (see above)"
        status=1
      else
        say "sid chroot ready in $((SECONDS - t0)) s"
        install_and_test sid "$WHEEL"
      fi
      sid_leave || status=1
      SID_ROOT=""
      WORK=$host_work
      ;;
    sdist)
      say "python -m build --sdist"
      rm -rf "$WORK/sdist"
      if ! "$TOOLS_PY" -m build --sdist -o "$WORK/sdist" "$SRC" >"$WORK/sdist.log" 2>&1; then
        cat "$WORK/sdist.log"
        record all sdist "build --sdist FAILED"
        status=1
        continue
      fi
      sdist=$(ls "$WORK"/sdist/dlpackshim-*.tar.gz)
      tar -xzf "$sdist" -C "$WORK/sdist" || { record all sdist "unpacking FAILED"; status=1; continue; }
      SDIST_TESTS=${sdist%.tar.gz}/tests/python
      install_and_test sdist "$sdist"
      ;;
    local) install_and_test local "$SRC" ;;
    inside) test_inside_clone ;;
    editable) install_and_test editable -e "$SRC" ;;
    pypy)
      pypy=$(command -v pypy3) || {
        say "skipped pypy: no pypy3 here (Debian: apt-get install pypy3)"
        record pypy pypy "skipped: no pypy3"
        continue
      }
      venv="$WORK/venv-pypy"
      rm -rf "$venv"
      "$pypy" -m venv "$venv" || { record pypy pypy "venv FAILED"; status=1; continue; }
      whl=$(ls "$SRC"/wheelhouse/dlpackshim-*.whl 2>/dev/null | head -n 1)
      sdist=$(ls "$WORK"/sdist/dlpackshim-*.tar.gz 2>/dev/null | head -n 1)
      result=""
      if [ -n "$whl" ]; then  # the wheel's cp311-abi3 tag is not one PyPy accepts
        if "$venv/bin/python" -m pip install "$whl" >"$WORK/pypy-wheel.log" 2>&1 ||
           ! grep -q "is not a supported wheel on this platform" "$WORK/pypy-wheel.log"; then
          cat "$WORK/pypy-wheel.log"; status=1; result="$result wheel:NOT-REFUSED"
        else result="$result wheel:refused"; fi
      fi
      if [ -n "$sdist" ]; then  # setup.py refuses to build on PyPy, saying why; pip
        # refuses first where PyPy's Python is older than requires-python
        if "$venv/bin/python" -m pip install "$sdist" >"$WORK/pypy-sdist.log" 2>&1 ||
           ! grep -qE "dlpackshim cannot be installed on PyPy|requires a different Python" \
             "$WORK/pypy-sdist.log"; then
          cat "$WORK/pypy-sdist.log"; status=1; result="$result sdist:NOT-REFUSED"
        else result="$result sdist:refused"; fi
      fi
      # The source tree imported as is: one ImportError, no AttributeError.
      if (cd "$WORK" && PYTHONPATH=$SRC "$venv/bin/python" -c "import dlpackshim") \
          >"$WORK/pypy-import.log" 2>&1 ||
         ! tail -n 1 "$WORK/pypy-import.log" | grep -q "^ImportError: dlpackshim supports CPython only"; then
        cat "$WORK/pypy-import.log"; status=1; result="$result import:WRONG"
      else result="$result import:ImportError"; fi
      record pypy pypy "${result# }"
      ;;
    *) echo "install-matrix: unknown route $route"; exit 2 ;;
  esac
done

say "results (work folder $WORK)"
printf '%s\n' "${table[@]}" | tee "$WORK/results.txt"
exit $status
