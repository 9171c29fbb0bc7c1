#!/bin/sh
# make check: build the Rust example with cargo (offline, no crates) against the
# freshly built libdlpackshim and run it. Exit 77 (skip) when cargo is missing.
#
# By hand, from a configured build directory:
#   top_srcdir=/path/to/src top_builddir=$PWD sh /path/to/src/examples/rust/run.sh
set -eu

here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
builddir=${top_builddir:-$srcdir}
lib=${DLPACKSHIM_LIBRARY:-$builddir/csrc/.libs/libdlpackshim.so}
libdir=$(dirname "$lib")

cargo=${CARGO:-}
if [ -z "$cargo" ]; then
  cargo=$(command -v cargo 2>/dev/null || true)
  [ -n "$cargo" ] || { [ -x "${HOME:-/nonexistent}/.cargo/bin/cargo" ] && cargo=$HOME/.cargo/bin/cargo; } || true
fi
if [ -z "$cargo" ] || ! "$cargo" --version >/dev/null 2>&1; then
  echo "SKIP: cargo not found (install Rust, or set CARGO=/path/to/cargo): the Rust example is not built"
  exit 77
fi
if [ ! -f "$lib" ]; then
  echo "ERROR: $lib is missing: run make first"
  exit 99
fi

# The build tree goes under the build directory: the source tree may be read-only
# (make distcheck). Cargo.lock is shipped so that cargo has nothing to write there.
export CARGO_TARGET_DIR="$builddir/examples/rust/target"
export DLPACKSHIM_LIB_DIR="$libdir"
echo "== $("$cargo" --version), library $lib"
"$cargo" build --offline --locked --quiet --manifest-path "$srcdir/examples/rust/Cargo.toml"

# The binary finds the uninstalled library through LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# A --enable-sanitizers library needs the ASan runtime loaded first (not for cargo).
if [ -n "${SAN_PRELOAD:-}" ]; then
  LD_PRELOAD="$SAN_PRELOAD${LD_PRELOAD:+:$LD_PRELOAD}"
  export LD_PRELOAD
fi
exec "$CARGO_TARGET_DIR/debug/dlpackshim-example"
