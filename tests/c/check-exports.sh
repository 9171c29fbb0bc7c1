#!/bin/sh
# check-exports.sh - the library exports exactly the functions listed in
# exports.txt, and exports.txt lists exactly the functions dlpackshim.h
# declares DLPACKSHIM_API (the public API) plus the package's private entry
# points that csrc/python/binding.h and csrc/core/internal.h declare (named
# dlpackshim__*, no stability promise): nothing leaks out, nothing goes
# missing, and the checked-in list cannot drift from the headers. Exit 77
# when nm is missing.
# Runs from `make check` (AM_TESTS_ENVIRONMENT sets the paths) or by hand.
set -u
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
builddir=${top_builddir:-$srcdir}
lib=${DLPACKSHIM_LIBRARY:-$builddir/csrc/.libs/libdlpackshim.so}
list=$srcdir/tests/c/exports.txt
header=$srcdir/csrc/dlpackshim.h
private=$srcdir/csrc/python/binding.h
private_core=$srcdir/csrc/core/internal.h
NM=${NM:-nm}

# $NM may carry options (libtool's "nm -B"): its first word must exist.
set -- $NM
if ! command -v "$1" >/dev/null 2>&1; then
  echo "check-exports: nm not found: skipped"
  exit 77
fi
for f in "$lib" "$list" "$header" "$private" "$private_core"; do
  test -f "$f" || { echo "check-exports: $f is missing"; exit 99; }
done

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# Exported text symbols (type T); names only, sorted.
$NM -D --defined-only "$lib" | awk '$(NF-1) == "T" { print $NF }' | LC_ALL=C sort -u >"$tmp/exported"
# Every function declared with DLPACKSHIM_API at the start of a line.
{
  sed -n 's/^DLPACKSHIM_API.*[^a-z0-9_]\(dlpackshim_[a-z0-9_]*\)(.*/\1/p' "$header" |
    grep -v '^dlpackshim__'
  sed -n 's/^DLPACKSHIM_API.*[^a-z0-9_]\(dlpackshim__[a-z0-9_]*\)(.*/\1/p' "$private" "$private_core"
} | LC_ALL=C sort -u >"$tmp/declared"
LC_ALL=C sort -u "$list" >"$tmp/listed"

status=0
if ! cmp -s "$list" "$tmp/listed"; then
  echo "check-exports: $list is not sorted (LC_ALL=C sort -u) or has duplicates"
  status=1
fi
if ! diff -u "$tmp/listed" "$tmp/exported" >"$tmp/d1"; then
  echo "check-exports: exported symbols differ from tests/c/exports.txt (- listed, + exported):"
  tail -n +3 "$tmp/d1" | grep '^[-+]'
  status=1
fi
if ! diff -u "$tmp/listed" "$tmp/declared" >"$tmp/d2"; then
  echo "check-exports: DLPACKSHIM_API declarations in dlpackshim.h differ from tests/c/exports.txt (- listed, + declared):"
  tail -n +3 "$tmp/d2" | grep '^[-+]'
  status=1
fi
test $status = 0 && echo "check-exports: $(wc -l <"$tmp/exported") symbols, as listed"
exit $status
