#!/bin/sh
# make check: build the Fortran example (fortran_basic.f90, ISO_C_BINDING) with
# gfortran against the freshly built libdlpackshim and run it. Exit 77 (skip)
# when there is no Fortran compiler (Debian: apt-get install gfortran; or set FC).
#
# By hand, from a configured build directory:
#   top_srcdir=/path/to/src top_builddir=$PWD sh /path/to/src/examples/run-fortran.sh
set -eu

here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
builddir=${top_builddir:-$srcdir}
lib=${DLPACKSHIM_LIBRARY:-$builddir/csrc/.libs/libdlpackshim.so}
libdir=$(dirname "$lib")
fc=${FC:-gfortran}

if ! command -v "$fc" >/dev/null 2>&1; then
  echo "SKIP: no Fortran compiler ($fc; Debian: apt-get install gfortran): the Fortran example is not built"
  exit 77
fi
if [ ! -f "$lib" ]; then
  echo "ERROR: $lib is missing: run make first"
  exit 99
fi

# The program and its .mod file go to a temporary directory: the source tree
# may be read-only (make distcheck).
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
echo "== $("$fc" --version | head -n 1), library $lib"
# SAN_LDFLAGS: a sanitizer build's library needs the runtime in the program.
"$fc" -std=f2008 -Wall -J "$tmp" ${SAN_LDFLAGS:-} "$srcdir/examples/fortran_basic.f90" \
  -L"$libdir" -ldlpackshim -o "$tmp/fortran_basic"

LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
"$tmp/fortran_basic"
