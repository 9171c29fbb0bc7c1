#!/bin/sh
# check-pkgconfig.sh - proves that dlpackshim.pc works: stages the header and
# the freshly built library as an installed prefix in a temporary directory,
# asks pkg-config (reading the build's dlpackshim.pc) for the flags with its
# variables pointed at that prefix, compiles examples/c_basic.c with nothing
# but those flags, and runs it. Exit 77 when pkg-config is missing.
set -u
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${top_builddir:-$srcdir}
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}

command -v "$PKG_CONFIG" >/dev/null 2>&1 || { echo "check-pkgconfig: pkg-config not found: skipped"; exit 77; }
pc=$builddir/dlpackshim.pc
test -f "$pc" || { echo "check-pkgconfig: $pc is missing"; exit 99; }
so=$(ls "$builddir"/csrc/.libs/libdlpackshim.so.[0-9]* 2>/dev/null | head -n 1)
test -n "$so" || { echo "check-pkgconfig: the built library is missing"; exit 99; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/prefix/include" "$tmp/prefix/lib"
cp "$srcdir/csrc/dlpackshim.h" "$tmp/prefix/include/"
ln -s "$so" "$tmp/prefix/lib/libdlpackshim.so"
ln -s "$so" "$tmp/prefix/lib/$(basename "$so" | sed 's/\(\.so\.[0-9]*\).*/\1/')"

# libdir and includedir too: configure --libdir=... would not follow prefix.
p=$tmp/prefix
flags=$(PKG_CONFIG_PATH=$builddir "$PKG_CONFIG" --define-variable=prefix="$p" \
  --define-variable=exec_prefix="$p" --define-variable=libdir="$p/lib" \
  --define-variable=includedir="$p/include" --cflags --libs dlpackshim) || {
  echo "check-pkgconfig: pkg-config could not read $pc"; exit 1; }
echo "check-pkgconfig: pkg-config --cflags --libs dlpackshim: $flags"
case "$flags" in
  *"-I$p/include"*"-L$p/lib"*"-ldlpackshim"*) ;;
  *) echo "check-pkgconfig: the flags do not point at the prefix"; exit 1 ;;
esac

# SAN_LDFLAGS: a sanitizer build's library needs the runtime in the program.
$CC ${SAN_LDFLAGS:-} "$srcdir/examples/c_basic.c" $flags -o "$tmp/c_basic" || {
  echo "check-pkgconfig: compiling c_basic.c with those flags failed"; exit 1; }
LD_LIBRARY_PATH=$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$tmp/c_basic" || exit 1
echo "check-pkgconfig: c_basic built from pkg-config flags alone ran fine"
