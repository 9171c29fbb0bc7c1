#!/bin/sh
# make check: run the LuaJIT example (lua_basic.lua, LuaJIT's FFI) against the
# freshly built library (DLPACKSHIM_LIBRARY, set by make check). Exit 77 (skip)
# when there is no LuaJIT (Debian: apt-get install luajit; or set LUAJIT).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
luajit=${LUAJIT:-luajit}
if ! command -v "$luajit" >/dev/null 2>&1; then
  echo "SKIP: no LuaJIT ($luajit; Debian: apt-get install luajit): the Lua example does not run"
  exit 77
fi
exec "$luajit" "$srcdir/examples/lua_basic.lua"
