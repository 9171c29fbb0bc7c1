#!/bin/sh
# make check: build the Go example (cgo) against the freshly built
# libdlpackshim and run it, with the race detector where the toolchain has it.
# Exit 77 (skip) when go is missing (Debian: apt-get install golang-go; or set GO).
#
# By hand, from a configured build directory:
#   top_srcdir=/path/to/src top_builddir=$PWD sh /path/to/src/examples/go/run.sh
# Against an installed library, from examples/go:
#   CGO_CFLAGS="$(pkg-config --cflags dlpackshim)" CGO_LDFLAGS="$(pkg-config --libs dlpackshim)" go run .
set -eu

here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
builddir=${top_builddir:-$srcdir}
lib=${DLPACKSHIM_LIBRARY:-$builddir/csrc/.libs/libdlpackshim.so}
libdir=$(dirname "$lib")
go=${GO:-go}

if ! command -v "$go" >/dev/null 2>&1 || ! "$go" version >/dev/null 2>&1; then
  echo "SKIP: go not found ($go; Debian: apt-get install golang-go): the Go example is not built"
  exit 77
fi
if [ ! -f "$lib" ]; then
  echo "ERROR: $lib is missing: run make first"
  exit 99
fi

# The binary goes to a temporary directory (the source tree may be read-only:
# make distcheck); Go's build cache stays where the user keeps it, or in that
# directory when there is none (no HOME).
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
if [ -z "$("$go" env GOCACHE 2>/dev/null)" ]; then
  GOCACHE=$tmp/gocache
  export GOCACHE
fi
CGO_ENABLED=1
CGO_CFLAGS="-I$srcdir/csrc"
CGO_LDFLAGS="-L$libdir"
GOTOOLCHAIN=local   # never download another toolchain (Go >= 1.21)
export CGO_ENABLED CGO_CFLAGS CGO_LDFLAGS GOTOOLCHAIN

# The race detector where the toolchain has it (linux/amd64, arm64, ...). A
# --enable-sanitizers library needs the program built with ASan (go build
# -asan) and UBSan's runtime instead: the race detector cannot join them.
cd "$here"
case ${SAN_LDFLAGS:-} in
  *address*) flags=-asan; CGO_LDFLAGS="$CGO_LDFLAGS $SAN_LDFLAGS" ;;
  *) flags=-race; "$go" build -race -o "$tmp/go_basic" . 2>/dev/null || flags="" ;;
esac
echo "== $("$go" version), go build $flags, library $lib"
[ -x "$tmp/go_basic" ] || "$go" build $flags -o "$tmp/go_basic" .

LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
"$tmp/go_basic"
