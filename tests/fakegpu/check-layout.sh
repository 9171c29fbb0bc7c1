#!/bin/sh
# check-layout.sh cuda|hip - compiles and runs layout_cuda.c / layout_hip.c,
# which check csrc/gpu/cuda_abi.h / csrc/gpu/hip_abi.h against the vendor's own
# header, field by field and prototype by prototype. Exit 77 (skip) when the
# header is not installed: the library never needs it.
#   CUDA: $CUDA_HOME/include/cuda.h (default /usr/local/cuda)
#   HIP:  $ROCM_PATH/include/hip/hip_runtime_api.h (default /opt/rocm), or
#         /usr/include/hip (Debian's libamdhip64-dev)
set -u
which=${1:?usage: check-layout.sh cuda|hip}
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
CC=${CC:-cc}
case $which in
  cuda)
    inc=
    for d in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include /usr/include; do
      if test -f "$d/cuda.h"; then inc=$d; break; fi
    done
    ;;
  hip)
    inc=
    for d in "${ROCM_PATH:-/opt/rocm}/include" /usr/include; do
      if test -f "$d/hip/hip_runtime_api.h"; then inc=$d; break; fi
    done
    ;;
  *) echo "check-layout: unknown runtime $which"; exit 99 ;;
esac
if test -z "$inc"; then
  echo "check-layout: no $which header installed: skipped"
  exit 77
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
# $CC may carry sanitizer flags from configure; the check needs none.
if ! $CC -std=gnu11 -Wall -Wextra -Werror -I"$srcdir/csrc" -I"$srcdir/csrc/gpu" -I"$inc" \
    "$srcdir/tests/fakegpu/layout_$which.c" -o "$tmp/layout" >"$tmp/log" 2>&1; then
  cat "$tmp/log"
  echo "check-layout: csrc/gpu/${which}_abi.h does not match $inc"
  exit 1
fi
"$tmp/layout"
