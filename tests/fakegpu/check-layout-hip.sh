#!/bin/sh
# csrc/gpu/hip_abi.h against the real hip header (skipped without it).
exec "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/fakegpu/check-layout.sh" hip
