#!/bin/sh
# check-pkgconfig.sh - C programs against an installed libdlpackshim, built and
# run as docs/install.md says ("C programs against the installed library"):
#  1. the release's files (make distdir) go to a temporary directory;
#  2. there, the block of docs/install.md under the marker line runs as it
#     is, with HOME a temporary directory (its prefix, $HOME/.local, too):
#     configure --prefix, make, make install, then README's C program built
#     from `pkg-config --cflags --libs` with the rpath of `pkg-config
#     --variable=libdir`, and run;
#  3. examples/c_basic.c is built and run the same way, and a build without
#     the rpath must fail to start with the loader's error, the failure the
#     docs warn of (unless this machine's loader has a libdlpackshim of its
#     own);
#  4. `make install prefix=DIR` (libdir=DIR) puts DIR in the installed dlpackshim.pc.
# Exit 77 when pkg-config or cc is missing.
set -u
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${top_builddir:-$srcdir}
MARKER='<!-- examples/check-pkgconfig.sh runs the next block -->'

for tool in pkg-config cc make; do
  command -v "$tool" >/dev/null 2>&1 || { echo "check-pkgconfig: no $tool: skipped"; exit 77; }
done
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check-pkgconfig: $*"; exit 1; }

# 1. A user's unpacked release, built afresh: nothing of make check's own
# make (its jobs, its variables) and no library path of the build tree.
if ! make -C "$builddir" distdir distdir="$tmp/src" >"$tmp/distdir.log" 2>&1; then
  tail -n 20 "$tmp/distdir.log"; echo "check-pkgconfig: make distdir failed"; exit 99
fi
unset MAKEFLAGS MFLAGS MAKELEVEL LD_LIBRARY_PATH PKG_CONFIG_PATH
MAKEFLAGS=-j2; export MAKEFLAGS
HOME=$tmp/home; export HOME
mkdir -p "$HOME"

# 2. The documented block, and README's C program as readme.c.
awk -v marker="$MARKER" '$0 == marker { on = 1; next }
  on && /^```sh/ { inside = 1; next }
  inside && /^```/ { exit }
  inside { print }' "$srcdir/docs/install.md" >"$tmp/documented.sh"
grep -q "make install" "$tmp/documented.sh" || fail "no block under the marker in docs/install.md"
awk '/^```c$/ { inside = 1; next } inside && /^```/ { exit } inside { print }' \
  "$srcdir/README.md" >"$tmp/src/readme.c"
echo "check-pkgconfig: running docs/install.md's block in $tmp/src:"
sed 's/^/  | /' "$tmp/documented.sh"
(cd "$tmp/src" && sh -e "$tmp/documented.sh") >"$tmp/documented.log" 2>&1 || {
  tail -n 30 "$tmp/documented.log"; fail "the documented commands failed"; }
tail -n 3 "$tmp/documented.log"
prefix=$HOME/.local
test -f "$prefix/lib/pkgconfig/dlpackshim.pc" || fail "make install put no dlpackshim.pc in $prefix"

# 3. c_basic.c the same way; then the failure an rpath (or ldconfig) avoids.
PKG_CONFIG_PATH=$prefix/lib/pkgconfig; export PKG_CONFIG_PATH
libdir=$(pkg-config --variable=libdir dlpackshim)
test "$libdir" = "$prefix/lib" || fail "pkg-config --variable=libdir says $libdir, not $prefix/lib"
# shellcheck disable=SC2046 # the flags are words
cc "$srcdir/examples/c_basic.c" $(pkg-config --cflags --libs dlpackshim) -Wl,-rpath,"$libdir" \
  -o "$tmp/c_basic" || fail "c_basic.c did not build from pkg-config's flags"
"$tmp/c_basic" >"$tmp/c_basic.log" 2>&1 || { cat "$tmp/c_basic.log"; fail "c_basic failed"; }
# shellcheck disable=SC2046
cc "$tmp/src/readme.c" $(pkg-config --cflags --libs dlpackshim) -o "$tmp/no_rpath" ||
  fail "readme.c did not build"
if /sbin/ldconfig -p 2>/dev/null | grep -q "libdlpackshim.so.2 "; then
  echo "check-pkgconfig: this machine's loader knows a libdlpackshim: not checking the failure"
elif "$tmp/no_rpath" 2>"$tmp/no_rpath.err"; then
  fail "a program linked without the rpath found the library: the docs' warning is stale"
else
  grep -q "libdlpackshim.so.2: cannot open shared object file" "$tmp/no_rpath.err" ||
    { cat "$tmp/no_rpath.err"; fail "without the rpath, another error than the docs say"; }
  echo "check-pkgconfig: without the rpath: $(cat "$tmp/no_rpath.err")"
fi

# 4. `make install prefix=DIR`, GNU's way to install elsewhere than
# configure's prefix, names DIR in the dlpackshim.pc it installs.
# Installing writes nothing in the build tree (the GNU coding standards: one
# user builds, another installs).
other=$tmp/other
touch "$tmp/before-install"
(cd "$tmp/src" && make install prefix="$other") >"$tmp/other.log" 2>&1 ||
  { tail -n 20 "$tmp/other.log"; fail "make install prefix=$other failed"; }
got=$(PKG_CONFIG_PATH=$other/lib/pkgconfig pkg-config --variable=libdir dlpackshim)
test "$got" = "$other/lib" || fail "after make install prefix=$other, the .pc's libdir is $got"
# ... and keeps the other paths relative to the prefix (pkg-config
# --define-prefix relocates them).
grep -qx 'libdir=${exec_prefix}/lib' "$other/lib/pkgconfig/dlpackshim.pc" ||
  fail "the installed .pc's libdir is not relative: $(grep ^libdir= "$other/lib/pkgconfig/dlpackshim.pc")"
# A libdir of its own (make install libdir=DIR) is named as it is.
(cd "$tmp/src" && make install prefix="$other" libdir="$other/lib64") >"$tmp/lib64.log" 2>&1 ||
  { tail -n 20 "$tmp/lib64.log"; fail "make install libdir=$other/lib64 failed"; }
got=$(PKG_CONFIG_PATH=$other/lib64/pkgconfig pkg-config --variable=libdir dlpackshim)
test "$got" = "$other/lib64" || fail "after make install libdir=$other/lib64, the .pc's libdir is $got"
written=$(find "$tmp/src" -newer "$tmp/before-install" -type f | head -n 5)
test -z "$written" || fail "make install wrote in the build tree: $written"
echo "check-pkgconfig: installed into a prefix, built with pkg-config and the rpath: ran fine"
