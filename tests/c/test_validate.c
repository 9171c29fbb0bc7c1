/*
 * test_validate.c - one test per rule of dlpackshim_tensor_validate and the
 * measuring functions, plus hostile inputs. Every rejection is checked for
 * its status and for a message naming the field and the value.
 */
#include <stdint.h>

#include "check.h"

static char buf[4096];

static DLTensor mk(int32_t ndim, int64_t *shape, int64_t *strides, uint8_t code, uint8_t bits,
                   uint16_t lanes) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = buf;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = lanes;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static const int E_TENSOR = DLPACKSHIM_ERR_INVALID_TENSOR;
static const int E_ARG = DLPACKSHIM_ERR_INVALID_ARGUMENT;

/* The measuring functions return a status and write their result through an
 * out-parameter, only on success. These check both: the status and the value
 * (or, on failure, that the out-parameter kept what it held). */
#define UNTOUCHED INT64_C(-424242)
static int64_t out_;
static int32_t layout_;

#define CHECK_VALUE(call_with_out_, want)       \
  do {                                          \
    out_ = UNTOUCHED;                           \
    CHECK_OK(call_with_out_);                   \
    CHECK_EQ(out_, (want));                     \
  } while (0)

#define CHECK_FAILS_UNTOUCHED(call_with_out_, status, frag) \
  do {                                                      \
    out_ = UNTOUCHED;                                       \
    layout_ = -77;                                          \
    CHECK_FAILS(call_with_out_, status, frag);              \
    CHECK_EQ(out_, UNTOUCHED);                              \
    CHECK_EQ(layout_, -77);                                 \
  } while (0)

/* What dlpackshim_tensor_is_contiguous answered: the C bit of the layout. */
#define CHECK_C_CONTIGUOUS(t, want)                                    \
  do {                                                                 \
    layout_ = -77;                                                     \
    CHECK_OK(dlpackshim_tensor_layout((t), &layout_));                 \
    CHECK_EQ((layout_ & DLPACKSHIM_LAYOUT_C) != 0, (want));            \
  } while (0)

static void test_null_tensor_is_an_invalid_argument(void) {
  int64_t lo, hi;
  CHECK_FAILS(dlpackshim_tensor_validate(NULL, 0), E_ARG, "NULL");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(NULL, &out_), E_ARG, "NULL");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_itemsize(NULL, 0, &out_), E_ARG, "NULL");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_nbytes(NULL, 0, &out_), E_ARG, "NULL");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_layout(NULL, &layout_), E_ARG, "NULL");
  CHECK_FAILS(dlpackshim_tensor_byte_span(NULL, 0, &lo, &hi), E_ARG, "NULL");
  DLTensor t = mk(0, NULL, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_byte_span(&t, 0, NULL, &hi), E_ARG, "lo and hi");
}

/* A NULL out-parameter is an invalid argument, even for a valid tensor. */
static void test_null_out_parameter_is_an_invalid_argument(void) {
  int64_t shape[2] = {2, 3};
  DLTensor t = mk(2, shape, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_numel(&t, NULL), E_ARG, "numel_out is NULL");
  CHECK_FAILS(dlpackshim_tensor_itemsize(&t, 0, NULL), E_ARG, "itemsize_out is NULL");
  CHECK_FAILS(dlpackshim_tensor_nbytes(&t, 0, NULL), E_ARG, "nbytes_out is NULL");
  CHECK_FAILS(dlpackshim_tensor_layout(&t, NULL), E_ARG, "layout_out");
  /* and the same tensor measures fine with one */
  CHECK_VALUE(dlpackshim_tensor_numel(&t, &out_), 6);
  CHECK_VALUE(dlpackshim_tensor_itemsize(&t, 0, &out_), 4);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 24);
}

static void test_valid_tensors_pass(void) {
  int64_t shape[3] = {2, 3, 4}, strides[3] = {12, 4, 1};
  DLTensor t = mk(3, shape, NULL, kDLFloat, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  t.strides = strides;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  DLTensor s = mk(0, NULL, NULL, kDLInt, 64, 1); /* 0-d: shape may be NULL */
  CHECK_OK(dlpackshim_tensor_validate(&s, 0));
}

static void test_ndim_must_be_in_range(void) {
  int64_t one[1] = {1};
  DLTensor t = mk(-1, one, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "ndim is -1");
  t.ndim = DLPACKSHIM_MAX_NDIM + 1;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "ndim is 1025");
  t.ndim = INT32_MAX; /* shape has one entry: reading further would be caught by ASan */
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "ndim is 2147483647");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(&t, &out_), E_TENSOR, "ndim is 2147483647");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_layout(&t, &layout_), E_TENSOR, "ndim");
  t.ndim = INT32_MIN;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "ndim is -2147483648");

  /* The largest ndim is fine, read exactly to its end. */
  int64_t *shape = malloc(DLPACKSHIM_MAX_NDIM * sizeof *shape);
  int64_t *strides = malloc(DLPACKSHIM_MAX_NDIM * sizeof *strides);
  REQUIRE(shape && strides);
  for (int i = 0; i < DLPACKSHIM_MAX_NDIM; i++) shape[i] = 1, strides[i] = 12345;
  shape[DLPACKSHIM_MAX_NDIM - 1] = 3;
  strides[DLPACKSHIM_MAX_NDIM - 1] = 1;
  DLTensor big = mk(DLPACKSHIM_MAX_NDIM, shape, strides, kDLUInt, 8, 1);
  CHECK_OK(dlpackshim_tensor_validate(&big, 0));
  CHECK_VALUE(dlpackshim_tensor_numel(&big, &out_), 3);
  CHECK_C_CONTIGUOUS(&big, 1);
  free(shape);
  free(strides);
}

static void test_shape_must_not_be_null_when_ndim_positive(void) {
  DLTensor t = mk(2, NULL, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "shape is NULL but ndim is 2");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(&t, &out_), E_TENSOR, "shape is NULL");
}

static void test_extents_must_be_non_negative(void) {
  int64_t shape[3] = {2, 3, -3};
  DLTensor t = mk(3, shape, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "shape[2] is -3: extents must be >= 0");
  shape[2] = INT64_MIN;
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(&t, &out_), E_TENSOR, "shape[2] is -9223372036854775808");
}

static void test_element_count_must_fit_int64(void) {
  int64_t shape[3] = {INT64_MAX, 2, 1};
  DLTensor t = mk(3, shape, NULL, kDLInt, 8, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "element count overflows");
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(&t, &out_), E_TENSOR, "element count overflows");
  int64_t pow[4] = {1LL << 31, 1LL << 31, 1LL << 2, 1}; /* 2^64 */
  t = mk(4, pow, NULL, kDLInt, 8, 1);
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_numel(&t, &out_), E_TENSOR, "element count");
  /* A zero extent empties the tensor however large the others are. */
  int64_t empty[3] = {INT64_MAX, INT64_MAX, 0};
  t = mk(3, empty, NULL, kDLInt, 8, 1);
  CHECK_VALUE(dlpackshim_tensor_numel(&t, &out_), 0);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 0);
  /* NULL strides stand for the compact ones, which must exist, even for an
   * empty tensor: {0, 2^62, 4} has none (tensor_new and clone, which write
   * them, refused what validate passed); explicit strides are its own. */
  int64_t no_compact[3] = {0, INT64_C(1) << 62, 4}, given[3] = {0, 0, 1};
  t = mk(3, no_compact, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "compact strides overflow int64");
  t = mk(3, no_compact, given, kDLFloat, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  /* Fits in elements, not in bytes. */
  int64_t huge[1] = {INT64_MAX / 2};
  t = mk(1, huge, NULL, kDLFloat, 32, 1);
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_nbytes(&t, 0, &out_), E_TENSOR, "bytes overflow int64");
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "4 bytes overflow");
  /* Packed: 2^62 - 1 elements of 4 bits are 2^61 bytes, which fit (they
   * were refused while the size was counted in bits); of 12 bits (int4 x 3
   * lanes), INT64_MAX elements do not fit. */
  t = mk(1, huge, NULL, kDLInt, 4, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), INT64_C(1) << 61);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED, &out_),
              INT64_MAX / 2);
  int64_t most[1] = {INT64_MAX};
  t = mk(1, most, NULL, kDLInt, 4, 3);
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_nbytes(&t, 0, &out_), E_TENSOR,
                        "elements of 12 bits overflow int64 bytes");
  most[0] = INT64_MAX / 12 * 8; /* the most that fit: (INT64_MAX / 12) * 12 bytes */
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), INT64_MAX / 12 * 12);
}

static void test_device_type_must_be_a_DLDeviceType(void) {
  int64_t shape[1] = {4};
  DLTensor t = mk(1, shape, NULL, kDLFloat, 32, 1);
  const int bad[] = {0, 5, 6, 22, -1, 1000, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char frag[64];
    t.device.device_type = (DLDeviceType)bad[i];
    snprintf(frag, sizeof frag, "device.device_type is %d", bad[i]);
    CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, frag);
  }
  const int good[] = {1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                      19, 20, 21 /* kDLTPU, kDLTPUHost, kDLAscend: after 1.3 */};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    t.device.device_type = (DLDeviceType)good[i];
    CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  }
}

static void test_device_id_must_be_non_negative(void) {
  DLTensor t = mk(0, NULL, NULL, kDLFloat, 32, 1);
  t.device.device_type = kDLCUDA;
  t.device.device_id = -1;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "device.device_id is -1");
  t.device.device_id = 7;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
}

/* The spec's table, written independently of validate.c. */
static int spec_bits_ok(int code, int bits) {
  static const int intbits[] = {1, 2, 4, 8, 16, 32, 64};
  switch (code) {
    case 0:
    case 1:
      for (int i = 0; i < 7; i++)
        if (bits == intbits[i]) return 1;
      return 0;
    case 2: return bits == 16 || bits == 32 || bits == 64;
    case 3: return bits > 0 && bits % 8 == 0;
    case 4: return bits == 16;
    case 5: return bits == 32 || bits == 64 || bits == 128;
    case 6: return bits == 1 || bits == 8;
    case 15:
    case 16: return bits == 6;
    case 17: return bits == 4;
    default: return code >= 7 && code <= 14 && bits == 8;
  }
}

static void test_dtype_bits_follow_the_table(void) {
  int64_t shape[1] = {2};
  int mismatches = 0;
  for (int code = 0; code <= 17; code++)
    for (int bits = 0; bits <= 255; bits++) {
      DLTensor t = mk(1, shape, NULL, (uint8_t)code, (uint8_t)bits, 1);
      int want = spec_bits_ok(code, bits) ? 0 : E_TENSOR;
      int got = dlpackshim_tensor_validate(&t, 0);
      if (got != want) {
        if (mismatches++ < 10)
          fprintf(stderr, "dtype (%d, %d): got %d want %d\n", code, bits, got, want);
      }
      if (got) { /* the message names the dtype */
        char frag[64];
        snprintf(frag, sizeof frag, "dtype (code %d, bits %d, lanes 1)", code, bits);
        if (!strstr(dlpackshim_last_error(), frag)) mismatches++;
      }
    }
  CHECK_EQ(mismatches, 0);
}

static void test_dtype_messages_name_code_bits_and_rule(void) {
  int64_t shape[1] = {2};
  DLTensor t = mk(1, shape, NULL, kDLFloat, 8, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "dtype (code 2, bits 8, lanes 1): float needs 16, 32 or 64 bits");
  t.dtype.code = kDLBfloat;
  t.dtype.bits = 32;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "bfloat needs 16 bits");
  t.dtype.code = kDLFloat6_e2m3fn;
  t.dtype.bits = 8;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "float6 types need 6 bits");
  t.dtype.code = kDLFloat4_e2m1fn;
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_itemsize(&t, 0, &out_), E_TENSOR, "float4 types need 4 bits");
  t.dtype.code = kDLBool;
  t.dtype.bits = 16;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "bool needs 1 or 8 bits");
}

static void test_unknown_dtype_code_is_rejected(void) {
  int64_t shape[1] = {2};
  DLTensor t = mk(1, shape, NULL, 19, 8, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "unknown type code 19");
  t.dtype.code = 255;
  CHECK_FAILS_UNTOUCHED(dlpackshim_tensor_itemsize(&t, 0, &out_), E_TENSOR, "unknown type code 255");
}

static void test_lanes_must_be_positive(void) {
  int64_t shape[1] = {2};
  DLTensor t = mk(1, shape, NULL, kDLFloat, 32, 0);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "dtype (code 2, bits 32, lanes 0): lanes must be >= 1");
  t.dtype.lanes = 65535; /* the largest: 32 * 65535 bits per element */
  CHECK_VALUE(dlpackshim_tensor_itemsize(&t, 0, &out_), 4 * 65535);
}

static void test_itemsize_of_plain_vector_and_sub_byte_types(void) {
  const uint64_t P = DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
  struct {
    uint8_t code, bits;
    uint16_t lanes;
    int64_t packed, padded;
  } cases[] = {
      {kDLFloat, 32, 1, 4, 4},         {kDLFloat, 32, 4, 16, 16},
      {kDLComplex, 128, 1, 16, 16},    {kDLBool, 8, 1, 1, 1},
      {kDLBool, 1, 1, 0, 1},           {kDLInt, 4, 2, 1, 1},
      {kDLInt, 4, 3, 0, 2},            {kDLUInt, 2, 1, 0, 1},
      {kDLFloat6_e3m2fn, 6, 1, 0, 1},  {kDLFloat4_e2m1fn, 4, 2, 1, 1},
      {kDLOpaqueHandle, 64, 1, 8, 8},  {kDLFloat8_e4m3fn, 8, 1, 1, 1},
      {kDLOpaqueHandle, 248, 1, 31, 31},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    DLTensor t = mk(0, NULL, NULL, cases[i].code, cases[i].bits, cases[i].lanes);
    CHECK_VALUE(dlpackshim_tensor_itemsize(&t, 0, &out_), cases[i].packed);
    CHECK_VALUE(dlpackshim_tensor_itemsize(&t, P, &out_), cases[i].padded);
  }
}

static void test_nbytes(void) {
  const uint64_t P = DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
  int64_t three[1] = {3}, five3[2] = {5, 3}, two3[2] = {2, 3}, zero[2] = {4, 0};
  DLTensor t = mk(1, three, NULL, kDLInt, 4, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 2); /* 12 bits round up */
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, P, &out_), 3);
  t = mk(2, five3, NULL, kDLBool, 1, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 2); /* 15 bits */
  t = mk(2, two3, NULL, kDLBool, 8, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 6);
  t = mk(0, NULL, NULL, kDLFloat, 64, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 8);
  t = mk(2, zero, NULL, kDLFloat, 64, 1);
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 0);
  /* A prototype without data can still be measured. */
  t = mk(2, two3, NULL, kDLComplex, 64, 1);
  t.data = NULL;
  CHECK_VALUE(dlpackshim_tensor_nbytes(&t, 0, &out_), 48);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "data is NULL");
}

static void test_data_may_be_null_only_when_empty(void) {
  int64_t two3[2] = {2, 3}, empty[2] = {2, 0};
  DLTensor t = mk(2, two3, NULL, kDLFloat, 32, 1);
  t.data = NULL;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "data is NULL but the tensor has 6 elements");
  t.shape = empty;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  DLTensor s = mk(0, NULL, NULL, kDLFloat, 32, 1); /* 0-d has one element */
  s.data = NULL;
  CHECK_FAILS(dlpackshim_tensor_validate(&s, 0), E_TENSOR, "has 1 elements");
}

static void test_packed_sub_byte_must_be_compact(void) {
  const uint64_t P = DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
  int64_t shape[2] = {4, 6}, strided[2] = {1, 4}, compact[2] = {6, 1};
  DLTensor t = mk(2, shape, strided, kDLInt, 4, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "packed sub-byte");
  CHECK_HAS(dlpackshim_last_error(), "strides");
  CHECK_OK(dlpackshim_tensor_validate(&t, P)); /* padded elements have addresses */
  t.strides = compact;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  t.strides = NULL;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  int64_t s1[2] = {1, 6}, st1[2] = {999, 1}; /* extent-1 strides do not matter */
  t = mk(2, s1, st1, kDLFloat4_e2m1fn, 4, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  int64_t lo = 1, hi = 1;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == 0 && hi == 3);
}

static void test_strides_must_keep_the_span_in_int64(void) {
  int64_t three[1] = {3}, st[1] = {INT64_MAX / 2 + 1};
  DLTensor t = mk(1, three, st, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "strides[0] is 4611686018427387904: with shape[0] = 3");
  int64_t two2[2] = {2, 2}, st2[2] = {INT64_MAX / 8, INT64_MAX / 8};
  t = mk(2, two2, st2, kDLInt, 64, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "strides[1]");
  st2[0] = st2[1] = INT64_MIN / 15; /* negative side */
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "strides[1]");
  st[0] = INT64_MIN;
  t = mk(1, three, st, kDLInt, 8, 1);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "strides[0] is -9223372036854775808");
  /* The last element's own bytes push the span over. */
  int64_t big[1] = {2}, bst[1] = {INT64_MAX / 4};
  t = mk(1, big, bst, kDLFloat, 32, 1);
  t.data = (void *)(uintptr_t)4096;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "span overflows int64");
  /* Unused strides may be anything: extent 1, or an empty tensor. */
  int64_t one3[2] = {1, 3}, wild[2] = {INT64_MIN, 1};
  t = mk(2, one3, wild, kDLFloat, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  int64_t e[2] = {0, 3}, wild2[2] = {INT64_MAX, INT64_MIN};
  t = mk(2, e, wild2, kDLFloat, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
}

static void test_byte_offset_must_keep_the_end_in_int64(void) {
  int64_t one[1] = {1}, empty[1] = {0};
  DLTensor t = mk(1, one, NULL, kDLInt, 8, 1);
  t.byte_offset = UINT64_MAX;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "byte_offset is 18446744073709551615");
  t.byte_offset = (uint64_t)INT64_MAX + 1;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "byte_offset is 9223372036854775808");
  t.byte_offset = INT64_MAX; /* + 1 byte of span */
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "byte_offset is 9223372036854775807: byte_offset + span");
  t.shape = empty; /* even an empty tensor may not have an absurd offset */
  t.byte_offset = UINT64_MAX;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "byte_offset is 18446744073709551615");
  t.shape = one;
  t.byte_offset = 100;
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
}

static void test_host_addresses_must_not_wrap(void) {
  int64_t four[1] = {4}, neg[1] = {-1};
  DLTensor t = mk(1, four, neg, kDLFloat, 32, 1);
  t.data = (void *)(uintptr_t)8; /* element 3 would sit at address 8 - 12 */
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "wrap");
  t.byte_offset = 4; /* 8 + 4 - 12 = 0: the lowest address, allowed */
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  t.byte_offset = 0;
  t.device.device_type = kDLVulkan; /* a handle, not an address: not checked */
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  t = mk(1, four, NULL, kDLFloat, 32, 1);
  t.data = (void *)(UINTPTR_MAX - 8);
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR, "wrap");
}

static void test_byte_span(void) {
  int64_t lo, hi;
  int64_t four[1] = {4}, neg[1] = {-1};
  DLTensor t = mk(1, four, neg, kDLFloat, 32, 1);
  t.byte_offset = 12;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == -12 && hi == 4);
  int64_t s23[2] = {2, 3}, st[2] = {-3, 1};
  t = mk(2, s23, st, kDLInt, 16, 1);
  t.byte_offset = 6;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == -6 && hi == 6);
  t.strides = NULL;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == 0 && hi == 12);
  int64_t bc[2] = {0, 1}; /* broadcast: every element is the same */
  t.strides = bc;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == 0 && hi == 6);
  int64_t e[2] = {0, 3};
  t.shape = e;
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == 0 && hi == 0);
  t = mk(0, NULL, NULL, kDLComplex, 128, 1);
  CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
  CHECK(lo == 0 && hi == 16);
  t.data = NULL; /* invalid: the span is not reported */
  lo = hi = 77;
  CHECK_FAILS(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi), E_TENSOR, "data is NULL");
  CHECK(lo == 77 && hi == 77);
}

/* What dlpackshim_tensor_is_contiguous answered (NumPy's C_CONTIGUOUS) is
 * now the C bit of dlpackshim_tensor_layout. */
static void test_c_layout_bit_follows_numpy(void) {
  int64_t s23[2] = {2, 3}, c[2] = {3, 1}, f[2] = {1, 2}, r[2] = {-3, 1}, bc[2] = {0, 1};
  DLTensor t = mk(2, s23, NULL, kDLFloat, 32, 1);
  CHECK_C_CONTIGUOUS(&t, 1);
  t.strides = c;
  CHECK_C_CONTIGUOUS(&t, 1);
  t.strides = f;
  CHECK_C_CONTIGUOUS(&t, 0);
  t.strides = r;
  CHECK_C_CONTIGUOUS(&t, 0);
  t.strides = bc;
  CHECK_C_CONTIGUOUS(&t, 0);
  int64_t s13[3] = {1, 3, 1}, odd[3] = {-7, 1, 99}; /* extent-1 strides ignored */
  t = mk(3, s13, odd, kDLFloat, 32, 1);
  CHECK_C_CONTIGUOUS(&t, 1);
  int64_t z[2] = {0, 3}, zz[2] = {5, 7}; /* any zero extent: contiguous */
  t = mk(2, z, zz, kDLFloat, 32, 1);
  CHECK_C_CONTIGUOUS(&t, 1);
  t = mk(0, NULL, NULL, kDLFloat, 32, 1);
  CHECK_C_CONTIGUOUS(&t, 1);
  CHECK_VALUE(dlpackshim_tensor_numel(&t, &out_), 1);
}

/* kDLBcomplex (dlpack main, after 1.3): two bfloat16, so 32 bits only. */
static void test_bcomplex_needs_32_bits(void) {
  int64_t shape[1] = {2};
  DLTensor t = mk(1, shape, NULL, kDLBcomplex, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  CHECK_VALUE(dlpackshim_tensor_itemsize(&t, 0, &out_), 4);
  t.dtype.bits = 64;
  CHECK_FAILS(dlpackshim_tensor_validate(&t, 0), E_TENSOR,
              "dtype (code 18, bits 64, lanes 1): bcomplex (two bfloat16) needs 32 bits");
}

static int32_t layout_of(int32_t ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = mk(ndim, shape, strides, kDLFloat, 32, 1);
  int32_t layout = -1;
  CHECK_OK(dlpackshim_tensor_layout(&t, &layout));
  return layout;
}

static void test_layout_follows_numpy(void) {
  int64_t s23[2] = {2, 3}, c[2] = {3, 1}, f[2] = {1, 2}, r[2] = {-3, 1}, gap[2] = {6, 2};
  CHECK_EQ(layout_of(2, s23, NULL), DLPACKSHIM_LAYOUT_C); /* NULL: compact row-major */
  CHECK_EQ(layout_of(2, s23, c), DLPACKSHIM_LAYOUT_C);
  CHECK_EQ(layout_of(2, s23, f), DLPACKSHIM_LAYOUT_F);
  CHECK_EQ(layout_of(2, s23, r), DLPACKSHIM_LAYOUT_NONE);
  CHECK_EQ(layout_of(2, s23, gap), DLPACKSHIM_LAYOUT_NONE);
  int64_t s234[3] = {2, 3, 4}, f234[3] = {1, 2, 6}, p234[3] = {3, 1, 6};
  CHECK_EQ(layout_of(3, s234, f234), DLPACKSHIM_LAYOUT_F);
  CHECK_EQ(layout_of(3, s234, p234), DLPACKSHIM_LAYOUT_NONE); /* a permutation */
  /* Extent-1 axes are ignored: one non-trivial axis of stride 1 is both. */
  int64_t s151[3] = {1, 5, 1}, odd[3] = {-7, 1, 99}, two[3] = {1, 2, 1};
  CHECK_EQ(layout_of(3, s151, odd), DLPACKSHIM_LAYOUT_BOTH);
  CHECK_EQ(layout_of(3, s151, NULL), DLPACKSHIM_LAYOUT_BOTH);
  CHECK_EQ(layout_of(3, s151, two), DLPACKSHIM_LAYOUT_NONE);
  int64_t s1[1] = {4}, one[1] = {1}, zero[1] = {0};
  CHECK_EQ(layout_of(1, s1, one), DLPACKSHIM_LAYOUT_BOTH);
  CHECK_EQ(layout_of(1, s1, zero), DLPACKSHIM_LAYOUT_NONE); /* broadcast */
  /* Empty and 0-d tensors are both, whatever the strides say. */
  int64_t z[2] = {0, 3}, zz[2] = {5, 7};
  CHECK_EQ(layout_of(2, z, zz), DLPACKSHIM_LAYOUT_BOTH);
  CHECK_EQ(layout_of(0, NULL, NULL), DLPACKSHIM_LAYOUT_BOTH);
  /* Bad input: the shape checks, a NULL out-parameter. */
  int32_t layout;
  CHECK_FAILS(dlpackshim_tensor_layout(NULL, &layout), E_ARG, "NULL");
  DLTensor t = mk(2, s23, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_layout(&t, NULL), E_ARG, "layout_out");
  int64_t neg[2] = {2, -1};
  t = mk(2, neg, NULL, kDLFloat, 32, 1);
  CHECK_FAILS(dlpackshim_tensor_layout(&t, &layout), E_TENSOR, "shape[1] is -1");
}

static void test_compact_strides_in_both_orders(void) {
  int64_t shape[4] = {2, 3, 0, 4}, out[4];
  CHECK_OK(dlpackshim_compact_strides(4, shape, DLPACKSHIM_LAYOUT_C, out));
  CHECK(out[0] == 12 && out[1] == 4 && out[2] == 4 && out[3] == 1); /* 0 counts as 1 */
  CHECK_OK(dlpackshim_compact_strides(4, shape, DLPACKSHIM_LAYOUT_F, out));
  CHECK(out[0] == 1 && out[1] == 2 && out[2] == 6 && out[3] == 6);
  /* What it computes, the layout query recognises (the one rule, both ways). */
  int64_t s[3] = {4, 1, 5}, st[3];
  CHECK_OK(dlpackshim_compact_strides(3, s, DLPACKSHIM_LAYOUT_F, st));
  CHECK_EQ(layout_of(3, s, st), DLPACKSHIM_LAYOUT_F);
  CHECK_OK(dlpackshim_compact_strides(3, s, DLPACKSHIM_LAYOUT_C, st));
  CHECK_EQ(layout_of(3, s, st), DLPACKSHIM_LAYOUT_C);
  CHECK_OK(dlpackshim_compact_strides(0, NULL, DLPACKSHIM_LAYOUT_C, NULL));
  CHECK_FAILS(dlpackshim_compact_strides(1, shape, DLPACKSHIM_LAYOUT_BOTH, out), E_ARG,
              "order is 3");
  CHECK_FAILS(dlpackshim_compact_strides(-1, shape, DLPACKSHIM_LAYOUT_C, out), E_ARG,
              "ndim is -1");
  CHECK_FAILS(dlpackshim_compact_strides(2, NULL, DLPACKSHIM_LAYOUT_C, out), E_ARG, "NULL");
  int64_t neg[2] = {3, -2};
  CHECK_FAILS(dlpackshim_compact_strides(2, neg, DLPACKSHIM_LAYOUT_F, out), E_TENSOR,
              "shape[1] is -2");
  int64_t huge[3] = {0, INT64_C(1) << 40, INT64_C(1) << 40}; /* empty, yet strides overflow */
  CHECK_FAILS(dlpackshim_compact_strides(3, huge, DLPACKSHIM_LAYOUT_C, out), E_TENSOR,
              "overflow");
  int64_t huge_f[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
  CHECK_FAILS(dlpackshim_compact_strides(3, huge_f, DLPACKSHIM_LAYOUT_F, out), E_TENSOR,
              "overflow");
}

static void test_reads_at_most_ndim_entries(void) {
  /* Exactly-sized heap arrays: ASan and valgrind see any read past them. */
  for (int nd = 1; nd <= 5; nd++) {
    int64_t *shape = malloc((size_t)nd * sizeof *shape);
    int64_t *strides = malloc((size_t)nd * sizeof *strides);
    REQUIRE(shape && strides);
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) shape[i] = 2, strides[i] = s, s *= 2;
    DLTensor t = mk(nd, shape, strides, kDLUInt, 8, 1);
    int64_t lo, hi;
    CHECK_OK(dlpackshim_tensor_validate(&t, 0));
    CHECK_OK(dlpackshim_tensor_byte_span(&t, 0, &lo, &hi));
    CHECK_EQ(hi, s);
    CHECK_C_CONTIGUOUS(&t, 1);
    CHECK_VALUE(dlpackshim_tensor_numel(&t, &out_), s);
    free(shape);
    free(strides);
  }
}

static void test_success_leaves_the_last_error_alone(void) {
  int64_t shape[1] = {-1};
  DLTensor bad = mk(1, shape, NULL, kDLFloat, 32, 1);
  CHECK(dlpackshim_tensor_validate(&bad, 0) < 0);
  DLTensor good = mk(0, NULL, NULL, kDLFloat, 32, 1);
  CHECK_OK(dlpackshim_tensor_validate(&good, 0));
  CHECK_EQ(dlpackshim_last_status(), E_TENSOR); /* errno-like: only failures write it */
  CHECK_HAS(dlpackshim_last_error(), "shape[0] is -1");
}

int main(void) {
  test_null_tensor_is_an_invalid_argument();
  test_null_out_parameter_is_an_invalid_argument();
  test_valid_tensors_pass();
  test_ndim_must_be_in_range();
  test_shape_must_not_be_null_when_ndim_positive();
  test_extents_must_be_non_negative();
  test_element_count_must_fit_int64();
  test_device_type_must_be_a_DLDeviceType();
  test_device_id_must_be_non_negative();
  test_dtype_bits_follow_the_table();
  test_dtype_messages_name_code_bits_and_rule();
  test_unknown_dtype_code_is_rejected();
  test_lanes_must_be_positive();
  test_itemsize_of_plain_vector_and_sub_byte_types();
  test_nbytes();
  test_data_may_be_null_only_when_empty();
  test_packed_sub_byte_must_be_compact();
  test_strides_must_keep_the_span_in_int64();
  test_byte_offset_must_keep_the_end_in_int64();
  test_host_addresses_must_not_wrap();
  test_byte_span();
  test_c_layout_bit_follows_numpy();
  test_bcomplex_needs_32_bits();
  test_layout_follows_numpy();
  test_compact_strides_in_both_orders();
  test_reads_at_most_ndim_entries();
  test_success_leaves_the_last_error_alone();
  return check_done("test_validate");
}
