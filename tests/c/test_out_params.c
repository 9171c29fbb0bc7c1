/*
 * test_out_params.c - the header's promise for every function of csrc/core
 * with out-parameters: they are written only on success (issue 31, item 3).
 * Each test poisons the out-parameters, makes the call fail in every way it
 * can (NULL pointers, bad tensors, overflow, no memory) and checks that they
 * still hold the poison. dlpackshim_copy's result is dst's data: a failed
 * host copy leaves every byte of it. The GPU functions are checked through
 * the fake drivers, in test_gpu.c (test_failures_leave_outputs_alone).
 */
#include <stdint.h>

#include "check.h"

/* A huge allocation must fail with _NO_MEMORY, not abort the sanitizer's
 * allocator (its default for a size it cannot serve). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define POISON INT64_C(0x5a5a5a5a5a5a5a5a)
#define POISON32 INT32_C(0x5a5a5a5a)
#define POISON_PTR ((void *)(uintptr_t)0x5a5a50)

static float data[64];

static DLTensor tensor(int32_t ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, strides, 0};
  return t;
}

static void test_negotiate_version(void) {
  uint32_t major = 77, minor = 78;
  CHECK_FAILS(dlpackshim_negotiate_version(2, 0, 1, 3, &major, &minor), DLPACKSHIM_ERR_VERSION,
              "cannot be lowered");
  CHECK_FAILS(dlpackshim_negotiate_version(1, 3, 1, 3, &major, NULL),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_negotiate_version(1, 3, 1, 3, NULL, &minor),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(major == 77 && minor == 78);
}

static void test_measuring_functions(void) {
  int64_t neg[2] = {2, -1}, big[2] = {INT64_C(1) << 62, 4}, ok[1] = {4};
  DLTensor bad = tensor(2, neg, NULL), huge = tensor(2, big, NULL), good = tensor(1, ok, NULL);
  DLTensor bad_ndim = tensor(-1, ok, NULL), bad_dtype = good;
  bad_dtype.dtype.bits = 12;
  int64_t v = POISON, lo = POISON, hi = POISON;
  int32_t layout = POISON32;

  CHECK_FAILS(dlpackshim_tensor_numel(NULL, &v), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_tensor_numel(&bad_ndim, &v), DLPACKSHIM_ERR_INVALID_TENSOR, "ndim");
  CHECK_FAILS(dlpackshim_tensor_numel(&bad, &v), DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1]");
  CHECK_FAILS(dlpackshim_tensor_numel(&huge, &v), DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  CHECK_FAILS(dlpackshim_tensor_itemsize(NULL, 0, &v), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_tensor_itemsize(&bad_dtype, 0, &v), DLPACKSHIM_ERR_INVALID_TENSOR,
              "bits 12");
  CHECK_FAILS(dlpackshim_tensor_nbytes(&bad, 0, &v), DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1]");
  CHECK_FAILS(dlpackshim_tensor_nbytes(&bad_dtype, 0, &v), DLPACKSHIM_ERR_INVALID_TENSOR,
              "bits 12");
  int64_t elems[1] = {INT64_C(1) << 62}; /* 2^62 elements fit, 2^64 bytes do not */
  DLTensor wide = tensor(1, elems, NULL);
  CHECK_FAILS(dlpackshim_tensor_nbytes(&wide, 0, &v), DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  CHECK_EQ(v, POISON);

  CHECK_FAILS(dlpackshim_tensor_layout(NULL, &layout), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_tensor_layout(&bad, &layout), DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1]");
  CHECK_EQ(layout, POISON32);

  DLTensor no_data = good;
  no_data.data = NULL;
  CHECK_FAILS(dlpackshim_tensor_byte_span(&no_data, 0, &lo, &hi), DLPACKSHIM_ERR_INVALID_TENSOR,
              "data is NULL");
  CHECK_FAILS(dlpackshim_tensor_byte_span(&good, 0, &lo, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "NULL");
  CHECK_FAILS(dlpackshim_tensor_byte_span(&good, 0, NULL, &hi), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "NULL");
  CHECK(lo == POISON && hi == POISON);
}

/* dlpackshim_compact_strides fails with status and frag, and every entry of
 * its poisoned out array keeps the poison. */
#define CHECK_STRIDES_FAIL(ndim, shape, order, status, frag)                        \
  do {                                                                              \
    int64_t out_[3] = {POISON, POISON, POISON};                                     \
    CHECK_FAILS(dlpackshim_compact_strides((ndim), (shape), (order), out_), (status), \
                (frag));                                                            \
    CHECK(out_[0] == POISON && out_[1] == POISON && out_[2] == POISON);             \
  } while (0)

static void test_compact_strides(void) {
  /* The case: huge extents whose C-order strides overflow at the
   * third dim: the first two used to be written. */
  int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, INT64_C(1) << 40};
  CHECK_STRIDES_FAIL(3, huge, DLPACKSHIM_LAYOUT_C, DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  CHECK_STRIDES_FAIL(3, huge, DLPACKSHIM_LAYOUT_F, DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  int64_t empty[3] = {0, INT64_C(1) << 40, INT64_C(1) << 40}; /* empty, yet they overflow */
  CHECK_STRIDES_FAIL(3, empty, DLPACKSHIM_LAYOUT_C, DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  int64_t neg_last[3] = {2, 3, -4}; /* rejected after the other extents were read */
  CHECK_STRIDES_FAIL(3, neg_last, DLPACKSHIM_LAYOUT_C, DLPACKSHIM_ERR_INVALID_TENSOR,
                     "shape[2] is -4");
  CHECK_STRIDES_FAIL(3, neg_last, DLPACKSHIM_LAYOUT_BOTH, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "order");
  CHECK_STRIDES_FAIL(DLPACKSHIM_MAX_NDIM + 1, neg_last, DLPACKSHIM_LAYOUT_C,
                     DLPACKSHIM_ERR_INVALID_ARGUMENT, "ndim");
  CHECK_STRIDES_FAIL(3, NULL, DLPACKSHIM_LAYOUT_C, DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  /* The largest strides that fit are still given. */
  int64_t edge[3] = {2, INT64_C(1) << 31, INT64_C(1) << 31}, out[3];
  CHECK_OK(dlpackshim_compact_strides(3, edge, DLPACKSHIM_LAYOUT_C, out));
  CHECK(out[0] == INT64_C(1) << 62 && out[1] == INT64_C(1) << 31 && out[2] == 1);
  CHECK_OK(dlpackshim_compact_strides(3, edge, DLPACKSHIM_LAYOUT_F, out));
  CHECK(out[0] == 1 && out[1] == 2 && out[2] == INT64_C(1) << 32);
}

static void test_tensor_new(void) {
  int64_t neg[2] = {2, -1}, ok[1] = {4};
  /* Valid (empty), but its compact strides overflow: fails after the block
   * was allocated. */
  int64_t empty[3] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
  DLManagedTensorVersioned *m = POISON_PTR;
  DLManagedTensor *l = POISON_PTR;
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, 2, neg, NULL, kDLFloat, 32, 1, 0, 0, NULL,
                                    NULL, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1]");
  CHECK_FAILS(dlpackshim_tensor_new(NULL, kDLCPU, 0, 1, ok, NULL, kDLFloat, 32, 1, 0, 0, NULL,
                                    NULL, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "data is NULL");
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, 3, empty, NULL, kDLFloat, 32, 1, 0, 0, NULL,
                                    NULL, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  CHECK(m == POISON_PTR);
  CHECK_FAILS(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 2, neg, NULL, kDLFloat, 32, 1, 0,
                                           NULL, NULL, &l),
              DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1]");
  CHECK_FAILS(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 3, empty, NULL, kDLFloat, 32, 1, 0,
                                           NULL, NULL, &l),
              DLPACKSHIM_ERR_INVALID_TENSOR, "overflow");
  CHECK(l == POISON_PTR);
}

static void test_tensor_clone(void) {
  int64_t ok[1] = {4}, neg[1] = {-4};
  DLManagedTensorVersioned *c = POISON_PTR;
  DLTensor bad = tensor(1, neg, NULL), dev = tensor(1, ok, NULL);
  dev.device.device_type = kDLCUDA;
  CHECK_FAILS(dlpackshim_tensor_clone(NULL, 0, &c), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_tensor_clone(&bad, 0, &c), DLPACKSHIM_ERR_INVALID_TENSOR, "shape[0]");
  CHECK_FAILS(dlpackshim_tensor_clone(&dev, 0, &c), DLPACKSHIM_ERR_UNSUPPORTED, "device_type");
  /* 2^58 elements read from one (a zero stride): valid, 2^60 bytes to copy. */
  int64_t many[1] = {INT64_C(1) << 58}, zero[1] = {0};
  DLTensor broadcast = tensor(1, many, zero);
  CHECK_FAILS(dlpackshim_tensor_clone(&broadcast, 0, &c), DLPACKSHIM_ERR_NO_MEMORY, "bytes");
  /* Empty, with explicit strides: valid (validate says 0), but its compact
   * strides overflow int64, so no compact copy describes it. */
  int64_t wide[3] = {0, INT64_C(1) << 62, 4}, ones[3] = {1, 1, 1};
  DLTensor empty = tensor(3, wide, ones);
  CHECK_OK(dlpackshim_tensor_validate(&empty, 0));
  CHECK_FAILS(dlpackshim_tensor_clone(&empty, 0, &c), DLPACKSHIM_ERR_UNSUPPORTED, "overflow int64");
  CHECK(c == POISON_PTR);
}

static void test_blocks(void) {
  void *p = POISON_PTR;
  int64_t count = POISON;
  CHECK_FAILS(dlpackshim_block_alloc(SIZE_MAX - 8, &p), DLPACKSHIM_ERR_NO_MEMORY, "bytes");
  CHECK_FAILS(dlpackshim_block_alloc((size_t)1 << 60, &p), DLPACKSHIM_ERR_NO_MEMORY, "bytes");
  CHECK(p == POISON_PTR);
  CHECK_FAILS(dlpackshim_block_refcount(NULL, &count), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_EQ(count, POISON);
}

/* dst's bytes, after a failed host copy: all of them as they were. */
static void test_copy_leaves_dst_alone(void) {
  enum { N = 16 };
  unsigned char dbuf[N * 4], want[N * 4];
  for (int i = 0; i < N * 4; i++) dbuf[i] = want[i] = (unsigned char)(0xa0 + i);
  int64_t n[1] = {N}, n2[1] = {N - 1}, neg[1] = {-1}, two[1] = {2};
  DLTensor dst = {dbuf, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, n, NULL, 0};
  DLTensor src = tensor(1, n, NULL), shorter = tensor(1, n2, NULL), bad = tensor(1, neg, NULL);
  DLTensor ints = src, dev = src, packed = src;
  ints.dtype.code = kDLInt;
  dev.device.device_type = kDLCUDA;
  dev.device.device_id = 99999; /* no runtime is even loaded for it */
  packed.dtype = (DLDataType){kDLInt, 4, 1};
  packed.strides = two; /* packed sub-byte, not compact */
  DLTensor packed_dst = dst;
  packed_dst.dtype = packed.dtype;
  CHECK_FAILS(dlpackshim_copy(&dst, &shorter, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "shape[0]");
  CHECK_FAILS(dlpackshim_copy(&dst, &ints, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "dtype");
  CHECK_FAILS(dlpackshim_copy(&dst, &bad, 0), DLPACKSHIM_ERR_INVALID_TENSOR, "src");
  CHECK_FAILS(dlpackshim_copy(&dst, NULL, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS(dlpackshim_copy(&packed_dst, &packed, 0), DLPACKSHIM_ERR_UNSUPPORTED, "packed");
  CHECK_FAILS(dlpackshim_copy(&dst, &dev, -5), DLPACKSHIM_ERR_STREAM, "stream");
  CHECK(memcmp(dbuf, want, sizeof dbuf) == 0);
}

int main(void) {
  test_negotiate_version();
  test_measuring_functions();
  test_compact_strides();
  test_tensor_new();
  test_tensor_clone();
  test_blocks();
  test_copy_leaves_dst_alone();
  return check_done("test_out_params");
}
