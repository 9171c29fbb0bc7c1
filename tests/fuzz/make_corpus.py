#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_tensor.c into tests/fuzz/corpus/.

Usage: python3 tests/fuzz/make_corpus.py [OUTDIR]

Each seed is one named tensor in the harness's input layout (see the comment
at the top of fuzz_tensor.c). The output is committed; rerun this script
after changing the layout, and commit the result.
"""
import os
import struct
import sys

# Must match kSpecial[] in fuzz_tensor.c (encoded as 0xE0 + index).
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
SPECIAL = [
    0, 1, -1, 2, -2, I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1,
    2**31 - 1, -(2**31), 2**32 - 1, 2**32, 2**62, -(2**62), 2**61,
    2**60, 3037000499, 3037000500, 2**40, -(2**40), 255,
    256, 65535, 65536, 1023, 1024, 1025, I64_MAX // 8, 4096, -4096,
]
# Must match kNdimSpecial[] (0xE0 + index).
NDIM_SPECIAL = [
    -1, -2, -(2**31), -(2**31) + 1, 2**31 - 1, 1023, 1024, 1025,
    1026, 1040, 1040, 1041, 2048, 65536, 1 << 30, 16,
    17, 24, 31, 32, 33, 63, 64, 65,
    100, 128, 255, 256, 512, 1000, -1024, -65536,
]

# DLPack codes
INT, UINT, FLOAT, OPAQUE, BFLOAT, COMPLEX, BOOL = 0, 1, 2, 3, 4, 5, 6
F8_E4M3FN, F6_E2M3FN, F4_E2M1FN = 10, 15, 17
CPU, CUDA, CUDA_HOST, OPENCL, ROCM_HOST, CUDA_MANAGED = 1, 2, 3, 4, 11, 13
READ_ONLY, IS_COPIED, PADDED = 1, 2, 4

# Data pointer modes (bits 3-5 of the pointer byte).
DATA_BUF, DATA_NULL, DATA_TOP, DATA_BOTTOM, DATA_END = 0, 4, 5, 6, 7


def num(v, bias=0):
    if 0 <= v + bias < 0xE0:
        return bytes([v + bias])
    if v in SPECIAL:
        return bytes([0xE0 + SPECIAL.index(v)])
    return b"\xff" + struct.pack("<Q", v & (2**64 - 1))


def ndim_code(n):
    if 0 <= n < 16:
        return bytes([n])
    return bytes([0xE0 + NDIM_SPECIAL.index(n)])


def seed(ndim=None, shape=(), strides=None, code=FLOAT, bits=32, lanes=1, device=CPU,
         device_id=0, data_off=0, byte_offset=0, flags=0, dst_mode=0,
         versions=(1, 3, 1, 3), pattern=0, data=DATA_BUF, shape_null=False,
         tensor_null=False, entries=None):
    """One input. ndim defaults to len(shape); entries overrides what is encoded."""
    if ndim is None:
        ndim = len(shape)
    ptrs = (1 if shape_null else 0) | (2 if strides is None else 0) | \
        (4 if tensor_null else 0) | (data << 3)
    out = bytearray(ndim_code(ndim))
    out.append(ptrs)
    out += bytes([code, bits]) + struct.pack("<H", lanes)
    out += struct.pack("<iiH", device, device_id, data_off)
    out += num(byte_offset)
    if flags < 0x80:
        out.append(flags)
    else:
        out += b"\x80" + struct.pack("<Q", flags)
    out.append(dst_mode)
    for v in versions:
        out += num(v)
    out.append(pattern)
    shape = list(shape)
    strides = list(strides) if strides is not None else [1] * len(shape)
    n = len(shape) if entries is None else entries
    for i in range(n):
        out += num(shape[i] if i < len(shape) else 1)
    for i in range(n):
        out += num(strides[i] if i < len(strides) else 1, 0x70)
    return bytes(out)


def c_strides(shape):
    s, out = 1, []
    for e in reversed(shape):
        out.append(s)
        s *= max(e, 1)
    return list(reversed(out))


SEEDS = {
    # --- valid host tensors, every copy path -----------------------------
    "scalar_f32": seed(shape=()),
    "contig_i8_1d_null_strides": seed(shape=(16,), strides=None, code=INT, bits=8),
    "contig_f32_2d": seed(shape=(3, 4), strides=(4, 1), dst_mode=1),
    "contig_f32_2d_to_reversed": seed(shape=(3, 4), strides=(4, 1), dst_mode=2),
    "contig_f32_2d_to_fortran": seed(shape=(5, 7), strides=(7, 1), dst_mode=3),
    "contig_f32_2d_to_gapped": seed(shape=(5, 7), strides=(7, 1), dst_mode=4),
    "transposed_f64_8x8": seed(shape=(8, 8), strides=(1, 8), code=FLOAT, bits=64, dst_mode=0),
    "transposed_c128_6x5": seed(shape=(6, 5), strides=(1, 6), code=COMPLEX, bits=128),
    "transposed_u16_40x33": seed(shape=(40, 33), strides=(1, 40), code=UINT, bits=16),
    "reversed_i32_1d": seed(shape=(10,), strides=(-1,), code=INT, bits=32, data_off=36),
    "reversed_mid_3d": seed(shape=(2, 3, 4), strides=(12, -4, 1), data_off=64, dst_mode=7),
    "broadcast_zero_strides": seed(shape=(5, 6), strides=(0, 1), dst_mode=1),
    "broadcast_all_zero": seed(shape=(9, 9, 9), strides=(0, 0, 0), code=UINT, bits=8),
    "padded_rows_f32": seed(shape=(4, 8), strides=(10, 1), dst_mode=0),
    "permuted_4d": seed(shape=(2, 3, 4, 5), strides=(1, 2, 6, 24), code=INT, bits=16),
    "mergeable_4d": seed(shape=(2, 3, 4, 5), strides=(60, 20, 5, 1), code=INT, bits=64,
                         dst_mode=3),
    "extent1_huge_stride": seed(shape=(1, 6, 1), strides=(2**62, 1, I64_MIN), dst_mode=1),
    "whole_buffer_f32": seed(shape=(2048,), strides=(1,), dst_mode=0),
    "unaligned_f64": seed(shape=(3, 3), strides=(3, 1), code=FLOAT, bits=64, byte_offset=1),
    "column_slice_i16": seed(shape=(6,), strides=(7,), code=INT, bits=16, byte_offset=2),
    "uint8_lanes3": seed(shape=(4, 5), strides=(1, 4), code=UINT, bits=8, lanes=3),
    "float32_lanes4": seed(shape=(3,), strides=(2,), code=FLOAT, bits=32, lanes=4),
    "opaque_64": seed(shape=(2, 2), strides=(1, 2), code=OPAQUE, bits=64),
    "bfloat16": seed(shape=(4, 4), strides=(4, 1), code=BFLOAT, bits=16, dst_mode=2),
    "float8": seed(shape=(7,), strides=(-1,), code=F8_E4M3FN, bits=8, data_off=6),
    "bool8": seed(shape=(3, 2), strides=None, code=BOOL, bits=8, flags=READ_ONLY),
    "cuda_host": seed(shape=(4,), strides=(1,), device=CUDA_HOST),
    "cuda_managed": seed(shape=(4,), strides=(2,), device=CUDA_MANAGED, device_id=1),
    "rocm_host": seed(shape=(2, 2), strides=(2, 1), device=ROCM_HOST),
    "ndim_1024_ones": seed(ndim=1024, shape=[1] * 1024, strides=[1] * 1024),
    # --- overlapping destination (dst_mode 8 + 9 * k: k - 14 items from src) ---
    "overlap_transposed_same_start": seed(shape=(8, 8), strides=(1, 8), dst_mode=8 + 9 * 14),
    "overlap_reversed_shifted": seed(shape=(20,), strides=(-1,), code=INT, bits=32,
                                     data_off=200, dst_mode=8 + 9 * 10),
    "overlap_rows_forward": seed(shape=(6, 5), strides=(7, 1), code=UINT, bits=16,
                                 data_off=64, dst_mode=8 + 9 * 17),
    "overlap_int4_packed": seed(shape=(9,), strides=(1,), code=INT, bits=4, data_off=10,
                                dst_mode=8 + 9 * 15),
    # --- sub-byte --------------------------------------------------------
    "int4_packed_odd": seed(shape=(7,), strides=(1,), code=INT, bits=4),
    "uint2_packed_2d": seed(shape=(3, 5), strides=None, code=UINT, bits=2, dst_mode=1),
    "bool1_packed": seed(shape=(13,), strides=(1,), code=BOOL, bits=1),
    "float4_packed": seed(shape=(2, 3), strides=(3, 1), code=F4_E2M1FN, bits=4),
    "float6_packed": seed(shape=(5,), strides=None, code=F6_E2M3FN, bits=6),
    "int4_padded_strided": seed(shape=(4, 3), strides=(1, 4), code=INT, bits=4, flags=PADDED),
    "int4_packed_strided_bad": seed(shape=(4, 3), strides=(1, 4), code=INT, bits=4),
    "int1_lanes3_packed": seed(shape=(5,), strides=(1,), code=INT, bits=1, lanes=3),
    "int4_lanes2_bytes": seed(shape=(4,), strides=(-1,), code=INT, bits=4, lanes=2, data_off=3),
    # --- empty -----------------------------------------------------------
    "empty_3d_null_data": seed(shape=(3, 0, 4), strides=(0, 4, 1), data=DATA_NULL),
    "empty_huge_extents": seed(shape=(0, I64_MAX, 2**62), strides=None, data=DATA_NULL),
    "empty_huge_strides": seed(shape=(2, 0), strides=(I64_MAX, I64_MIN), data=DATA_TOP),
    # --- non-host and hostile pointers ------------------------------------
    "cuda_device": seed(shape=(4, 4), strides=(4, 1), device=CUDA, data=DATA_BOTTOM),
    "opencl_null_data": seed(shape=(2,), strides=(1,), device=OPENCL, data=DATA_NULL),
    "data_top_wraps": seed(shape=(8,), strides=(1,), data=DATA_TOP),
    "data_bottom_negative": seed(shape=(8,), strides=(-1,), data=DATA_BOTTOM),
    "data_end_of_buffer": seed(shape=(1,), strides=(1,), data=DATA_END),
    "data_null_nonempty": seed(shape=(2,), strides=(1,), data=DATA_NULL),
    # --- invalid fields --------------------------------------------------
    "tensor_null": seed(tensor_null=True),
    "shape_null_ndim2": seed(shape=(2, 2), shape_null=True),
    "ndim_minus1": seed(ndim=-1),
    "ndim_int_min": seed(ndim=-(2**31)),
    "ndim_1025": seed(ndim=1025, shape=[1] * 1025, strides=[1] * 1025),
    "ndim_int_max": seed(ndim=2**31 - 1, entries=8),
    "extent_negative": seed(shape=(3, -1), strides=(1, 1)),
    "numel_overflow": seed(shape=(I64_MAX, 2), strides=(1, 1)),
    "numel_overflow_sqrt": seed(shape=(3037000500, 3037000500), strides=None),
    "nbytes_overflow": seed(shape=(2**61,), strides=None, code=FLOAT, bits=64),
    "stride_overflow": seed(shape=(2,), strides=(I64_MAX,)),
    "stride_min": seed(shape=(3,), strides=(I64_MIN,)),
    "span_plus_offset_overflow": seed(shape=(2,), strides=(2**60,), byte_offset=2**62),
    "byte_offset_above_int64": seed(shape=(1,), strides=(1,), byte_offset=2**63 + 5),
    "dtype_unknown_code": seed(shape=(2,), code=99, bits=8),
    "dtype_float_bits_12": seed(shape=(2,), code=FLOAT, bits=12),
    "dtype_lanes_zero": seed(shape=(2,), code=FLOAT, bits=32, lanes=0),
    "dtype_opaque_bits_7": seed(shape=(2,), code=OPAQUE, bits=7),
    "dtype_huge_lanes": seed(shape=(2,), code=OPAQUE, bits=248, lanes=65535),
    "device_unknown_5": seed(shape=(2,), device=5),
    "device_zero": seed(shape=(2,), device=0),
    "device_negative": seed(shape=(2,), device=-1),
    "device_id_negative": seed(shape=(2,), device_id=-1),
    "flags_all_bits": seed(shape=(2, 3), strides=(3, 1), flags=2**64 - 1),
    # --- version negotiation --------------------------------------------
    "version_newer_minor": seed(versions=(1, 5, 1, 3)),
    "version_older_minor": seed(versions=(1, 1, 1, 3)),
    "version_major_above": seed(versions=(2, 0, 1, 9)),
    "version_major_below": seed(versions=(1, 9, 2, 0)),
    "version_legacy_consumer": seed(versions=(1, 0, 0, 0)),
    "version_uint32_max": seed(versions=(2**32 - 1, 2**32 - 1, 2**32 - 1, 0)),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(outdir, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    total = sum(len(d) for d in SEEDS.values())
    print(f"wrote {len(SEEDS)} seeds ({total} bytes) to {outdir}")


if __name__ == "__main__":
    main()
