#!/bin/sh
# csrc/gpu/cuda_abi.h against the real cuda header (skipped without it).
exec "${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/fakegpu/check-layout.sh" cuda
