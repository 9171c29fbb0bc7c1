/*
 * test_tensor.c - building, freeing and cloning managed tensors: layout of
 * the result, the owner's release called exactly once, failures that leave
 * the owner alone.
 */
#include "check.h"

static int releases;
static void *released_owner;

static void count_release(void *owner) {
  releases++;
  released_owner = owner;
}

static float data[64];

/* What an out-parameter holds before a call that must leave it alone. */
#define SENTINEL ((DLManagedTensorVersioned *)(uintptr_t)0x5e5e0)
#define SENTINEL_LEGACY ((DLManagedTensor *)(uintptr_t)0x5e5e0)

static void test_new_stores_every_field_and_explicit_strides(void) {
  int64_t shape[3] = {2, 3, 4};
  int owner;
  releases = 0;
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 3, shape, NULL, kDLFloat, 32, 1, 8,
                                 DLPACKSHIM_FLAG_READ_ONLY, &owner, count_release, &m));
  REQUIRE(m != NULL);
  shape[0] = 99; /* the tensor keeps its own copy */
  DLTensor *t = &m->dl_tensor;
  CHECK(m->version.major == 1 && m->version.minor == 3);
  CHECK_EQ(m->flags, DLPACKSHIM_FLAG_READ_ONLY);
  CHECK(m->manager_ctx != NULL);
  CHECK(m->deleter != NULL);
  CHECK(t->data == data);
  CHECK(t->device.device_type == kDLCPU && t->device.device_id == 0);
  CHECK_EQ(t->ndim, 3);
  CHECK(t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1);
  CHECK_EQ(t->byte_offset, 8);
  REQUIRE(t->shape && t->strides);
  CHECK(t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 4);
  CHECK(t->strides[0] == 12 && t->strides[1] == 4 && t->strides[2] == 1);
  CHECK(dlpackshim_managed_dltensor(m) == t);
  CHECK_OK(dlpackshim_tensor_validate(t, m->flags));
  CHECK_EQ(releases, 0);
  dlpackshim_tensor_free(m);
  CHECK_EQ(releases, 1);
  CHECK(released_owner == &owner);
}

static void test_new_keeps_given_strides(void) {
  int64_t shape[2] = {3, 2}, strides[2] = {1, -3}; /* transposed and reversed */
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(dlpackshim_tensor_new(data, kDLCUDAHost, 0, 2, shape, strides, kDLInt, 32, 1, 12, 0,
                                 NULL, NULL, &m));
  REQUIRE(m != NULL);
  strides[0] = 42;
  CHECK(m->dl_tensor.strides[0] == 1 && m->dl_tensor.strides[1] == -3);
  CHECK(m->dl_tensor.device.device_type == kDLCUDAHost);
  dlpackshim_tensor_free(m); /* release NULL: nothing to call */
}

static void test_new_0d_has_null_shape_and_strides(void) {
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(
      dlpackshim_tensor_new(data, kDLCPU, 0, 0, NULL, NULL, kDLFloat, 64, 1, 0, 0, NULL, NULL, &m));
  REQUIRE(m != NULL);
  CHECK(m->dl_tensor.shape == NULL && m->dl_tensor.strides == NULL);
  CHECK_EQ(m->dl_tensor.ndim, 0);
  dlpackshim_tensor_free(m);
}

static void test_new_empty_tensor_with_null_data(void) {
  int64_t shape[2] = {0, 5};
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(
      dlpackshim_tensor_new(NULL, kDLCPU, 0, 2, shape, NULL, kDLFloat, 32, 1, 0, 0, NULL, NULL, &m));
  REQUIRE(m != NULL);
  CHECK(m->dl_tensor.data == NULL);
  CHECK(m->dl_tensor.strides[0] == 5 && m->dl_tensor.strides[1] == 1); /* 0 counts as 1 */
  dlpackshim_tensor_free(m);
  /* Compact strides of this one would overflow: refused, owner untouched. */
  int64_t huge[3] = {0, INT64_MAX, INT64_MAX};
  releases = 0;
  m = SENTINEL;
  CHECK_FAILS(dlpackshim_tensor_new(NULL, kDLCPU, 0, 3, huge, NULL, kDLInt, 8, 1, 0, 0, data,
                                    count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "compact strides");
  CHECK(m == SENTINEL); /* untouched on failure */
  CHECK_EQ(releases, 0);
  int64_t given[3] = {1, 1, 1}; /* with strides given it is fine */
  m = NULL;
  CHECK_OK(dlpackshim_tensor_new(NULL, kDLCPU, 0, 3, huge, given, kDLInt, 8, 1, 0, 0, data,
                                 count_release, &m));
  REQUIRE(m != NULL);
  dlpackshim_tensor_free(m);
  CHECK_EQ(releases, 1);
}

static void test_new_failures_do_not_release(void) {
  int64_t shape[2] = {2, -1}, ok[1] = {4};
  DLManagedTensorVersioned *m = SENTINEL;
  DLManagedTensor *l = SENTINEL_LEGACY;
  releases = 0;
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 32, 1, 0, 0, data,
                                    count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "shape[1] is -1");
  CHECK_FAILS(dlpackshim_tensor_new(data, 5, 0, 1, ok, NULL, kDLFloat, 32, 1, 0, 0, data,
                                    count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "device.device_type is 5");
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, 1, ok, NULL, kDLFloat, 12, 1, 0, 0, data,
                                    count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "bits 12");
  CHECK_FAILS(dlpackshim_tensor_new(NULL, kDLCPU, 0, 1, ok, NULL, kDLFloat, 32, 1, 0, 0, data,
                                    count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "data is NULL");
  /* ndim too: the status table's _INVALID_TENSOR covers the described tensor. */
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, DLPACKSHIM_MAX_NDIM + 1, ok, NULL, kDLFloat,
                                    32, 1, 0, 0, data, count_release, &m),
              DLPACKSHIM_ERR_INVALID_TENSOR, "ndim is 1025");
  CHECK(m == SENTINEL); /* no failure wrote the out-parameter */
  CHECK_FAILS(dlpackshim_tensor_new_legacy(data, kDLCPU, -2, 1, ok, NULL, kDLFloat, 32, 1, 0,
                                           data, count_release, &l),
              DLPACKSHIM_ERR_INVALID_TENSOR, "device_id is -2");
  CHECK(l == SENTINEL_LEGACY);
  CHECK_EQ(releases, 0);
}

/* A NULL out-parameter is the caller's mistake: refused before anything is
 * built, the owner left alone. */
static void test_null_tensor_out_is_refused(void) {
  int64_t ok[1] = {4};
  releases = 0;
  CHECK_FAILS(dlpackshim_tensor_new(data, kDLCPU, 0, 1, ok, NULL, kDLFloat, 32, 1, 0, 0, data,
                                    count_release, NULL),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_out is NULL");
  CHECK_FAILS(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 1, ok, NULL, kDLFloat, 32, 1, 0, data,
                                           count_release, NULL),
              DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_out is NULL");
  DLTensor t = {data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, ok, NULL, 0};
  CHECK_FAILS(dlpackshim_tensor_clone(&t, 0, NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "tensor_out is NULL");
  CHECK_EQ(releases, 0);
}

static void test_flags_decide_sub_byte_layout(void) {
  int64_t shape[2] = {2, 3}, strides[2] = {1, 2};
  const uint64_t P = DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
  /* Strided int4 is valid only when padded. */
  DLManagedTensorVersioned *m = SENTINEL;
  CHECK_EQ(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, strides, kDLInt, 4, 1, 0, 0, NULL,
                                 NULL, &m),
           DLPACKSHIM_ERR_INVALID_TENSOR);
  CHECK(m == SENTINEL);
  m = NULL;
  CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, strides, kDLInt, 4, 1, 0, P, NULL,
                                 NULL, &m));
  REQUIRE(m != NULL);
  CHECK_EQ(m->flags, P);
  dlpackshim_tensor_free(m);
  /* The legacy struct has no flags: always packed. */
  DLManagedTensor *l = SENTINEL_LEGACY;
  CHECK_FAILS(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 2, shape, strides, kDLInt, 4, 1, 0,
                                           NULL, NULL, &l),
              DLPACKSHIM_ERR_INVALID_TENSOR, "packed sub-byte");
  CHECK(l == SENTINEL_LEGACY);
}

static void test_legacy_new_and_free(void) {
  int64_t shape[2] = {4, 2};
  int owner;
  releases = 0;
  DLManagedTensor *m = NULL;
  CHECK_OK(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 2, shape, NULL, kDLUInt, 16, 1, 4, &owner,
                                        count_release, &m));
  REQUIRE(m != NULL);
  CHECK(m->dl_tensor.data == data && m->dl_tensor.byte_offset == 4);
  CHECK(m->dl_tensor.strides[0] == 2 && m->dl_tensor.strides[1] == 1);
  CHECK(m->manager_ctx != NULL && m->deleter != NULL);
  dlpackshim_tensor_free_legacy(m);
  CHECK_EQ(releases, 1);
  CHECK(released_owner == &owner);
}

/* Another producer's tensors: a NULL deleter is never called. */
static void test_free_is_null_safe(void) {
  dlpackshim_tensor_free(NULL);
  dlpackshim_tensor_free_legacy(NULL);
  DLManagedTensorVersioned v;
  memset(&v, 0, sizeof v);
  dlpackshim_tensor_free(&v);
  DLManagedTensor l;
  memset(&l, 0, sizeof l);
  dlpackshim_tensor_free_legacy(&l);
  CHECK(dlpackshim_managed_dltensor(NULL) == NULL);
  CHECK(dlpackshim_managed_dltensor(&v) == &v.dl_tensor);
}

static int foreign_deletes;
static void foreign_deleter(DLManagedTensorVersioned *self) { foreign_deletes += self != NULL; }

static void test_free_calls_a_foreign_deleter(void) {
  DLManagedTensorVersioned v;
  memset(&v, 0, sizeof v);
  v.deleter = foreign_deleter;
  dlpackshim_tensor_free(&v);
  CHECK_EQ(foreign_deletes, 1);
}

static void test_clone_is_compact_aligned_and_equal(void) {
  int32_t src[24];
  for (int i = 0; i < 24; i++) src[i] = i * 7 - 30;
  /* A 3x4 view of a 4x6 buffer: rows reversed, every other column, offset. */
  int64_t shape[2] = {3, 4}, strides[2] = {-6, 2};
  DLTensor t = {src, {kDLCPU, 0}, 2, {kDLInt, 32, 1}, shape, strides, 0};
  t.byte_offset = (uint64_t)(13 * sizeof(int32_t)); /* element [0][0] is src[13] */
  const uint64_t in = DLPACKSHIM_FLAG_READ_ONLY | (UINT64_C(1) << 40);
  DLManagedTensorVersioned *c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&t, in, &c));
  REQUIRE(c != NULL);
  DLTensor *o = &c->dl_tensor;
  CHECK_EQ(c->flags, DLPACKSHIM_FLAG_IS_COPIED | (UINT64_C(1) << 40));
  CHECK(c->version.major == 1 && c->version.minor == 3);
  CHECK(o->device.device_type == kDLCPU && o->device.device_id == 0);
  CHECK_EQ((uintptr_t)o->data % 256, 0);
  CHECK_EQ(o->byte_offset, 0);
  CHECK(o->shape[0] == 3 && o->shape[1] == 4);
  CHECK(o->strides[0] == 4 && o->strides[1] == 1);
  const int32_t *out = o->data;
  int bad = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) bad += out[i * 4 + j] != src[13 - 6 * i + 2 * j];
  CHECK_EQ(bad, 0);
  dlpackshim_tensor_free(c);
}

static void test_clone_from_pinned_and_managed_memory(void) {
  double v[3] = {1.5, -2.5, 3.5};
  int64_t shape[1] = {3};
  const int devs[] = {kDLCUDAHost, kDLROCMHost, kDLCUDAManaged};
  for (int k = 0; k < 3; k++) {
    DLTensor t = {v, {(DLDeviceType)devs[k], 0}, 1, {kDLFloat, 64, 1}, shape, NULL, 0};
    DLManagedTensorVersioned *c = NULL;
    CHECK_OK(dlpackshim_tensor_clone(&t, 0, &c));
    REQUIRE(c != NULL);
    CHECK(c->dl_tensor.device.device_type == kDLCPU);
    CHECK(memcmp(c->dl_tensor.data, v, sizeof v) == 0);
    dlpackshim_tensor_free(c);
  }
}

static void test_clone_refuses_device_memory(void) {
  int64_t shape[1] = {3};
  DLTensor t = {(void *)(uintptr_t)0x10000, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLManagedTensorVersioned *c = SENTINEL;
  CHECK_FAILS(dlpackshim_tensor_clone(&t, 0, &c), DLPACKSHIM_ERR_UNSUPPORTED,
              "src.device.device_type is 2");
  CHECK_FAILS(dlpackshim_tensor_clone(NULL, 0, &c), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  int64_t bad[1] = {-4};
  DLTensor u = {data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, bad, NULL, 0};
  CHECK_FAILS(dlpackshim_tensor_clone(&u, 0, &c), DLPACKSHIM_ERR_INVALID_TENSOR,
              "shape[0] is -4");
  CHECK(c == SENTINEL);
}

static void test_clone_of_empty_and_0d(void) {
  int64_t shape[2] = {3, 0};
  DLTensor t = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 16, 1}, shape, NULL, 0};
  DLManagedTensorVersioned *c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&t, 0, &c));
  REQUIRE(c != NULL);
  CHECK(c->dl_tensor.data != NULL); /* simpler for consumers */
  CHECK_EQ((uintptr_t)c->dl_tensor.data % 256, 0);
  CHECK(c->dl_tensor.strides[0] == 1 && c->dl_tensor.strides[1] == 1);
  dlpackshim_tensor_free(c);
  int16_t x = -5;
  DLTensor s = {&x, {kDLCPU, 0}, 0, {kDLInt, 16, 1}, NULL, NULL, 0};
  c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&s, 0, &c));
  REQUIRE(c != NULL);
  CHECK(c->dl_tensor.shape == NULL && c->dl_tensor.strides == NULL);
  CHECK_EQ(*(int16_t *)c->dl_tensor.data, -5);
  dlpackshim_tensor_free(c);
}

static void test_clone_of_sub_byte_tensors(void) {
  uint8_t packed[3] = {0x21, 0x43, 0x65}; /* six int4 values 1..6 */
  int64_t shape[2] = {2, 3};
  DLTensor t = {packed, {kDLCPU, 0}, 2, {kDLInt, 4, 1}, shape, NULL, 0};
  DLManagedTensorVersioned *c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&t, 0, &c));
  REQUIRE(c != NULL);
  CHECK(memcmp(c->dl_tensor.data, packed, 3) == 0);
  int64_t nbytes = -1;
  CHECK_OK(dlpackshim_tensor_nbytes(&c->dl_tensor, c->flags, &nbytes));
  CHECK_EQ(nbytes, 3);
  dlpackshim_tensor_free(c);
  /* Padded: one element per byte, so strided views are fine. */
  uint8_t padded[6] = {1, 2, 3, 4, 5, 6};
  int64_t tshape[2] = {3, 2}, tstrides[2] = {1, 3};
  const uint64_t P = DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED;
  DLTensor u = {padded, {kDLCPU, 0}, 2, {kDLInt, 4, 1}, tshape, tstrides, 0};
  c = NULL;
  CHECK_OK(dlpackshim_tensor_clone(&u, P, &c));
  REQUIRE(c != NULL);
  CHECK_EQ(c->flags, P | DLPACKSHIM_FLAG_IS_COPIED);
  const uint8_t want[6] = {1, 4, 2, 5, 3, 6};
  CHECK(memcmp(c->dl_tensor.data, want, 6) == 0);
  dlpackshim_tensor_free(c);
}

/* The documented version rule: tensor_new stamps 1.3; the caller may write
 * the negotiated minor before handing the tensor over; validate checks the
 * DLTensor only, and the deleter is unaffected. */
static void test_caller_may_set_the_negotiated_minor(void) {
  uint32_t major = 0, minor = 0;
  CHECK_OK(dlpackshim_negotiate_version(1, 3, 1, 1, &major, &minor));
  CHECK(major == 1 && minor == 1);
  int64_t shape[1] = {4};
  int owner;
  releases = 0;
  DLManagedTensorVersioned *m = NULL;
  CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 1, shape, NULL, kDLFloat, 32, 1, 0, 0, &owner,
                                 count_release, &m));
  REQUIRE(m != NULL);
  CHECK(m->version.major == 1 && m->version.minor == 3);
  m->version.minor = minor;
  CHECK_OK(dlpackshim_tensor_validate(&m->dl_tensor, m->flags));
  dlpackshim_tensor_free(m);
  CHECK_EQ(releases, 1);
  CHECK(released_owner == &owner);
}

int main(void) {
  test_new_stores_every_field_and_explicit_strides();
  test_new_keeps_given_strides();
  test_new_0d_has_null_shape_and_strides();
  test_new_empty_tensor_with_null_data();
  test_new_failures_do_not_release();
  test_null_tensor_out_is_refused();
  test_flags_decide_sub_byte_layout();
  test_legacy_new_and_free();
  test_free_is_null_safe();
  test_free_calls_a_foreign_deleter();
  test_clone_is_compact_aligned_and_equal();
  test_clone_from_pinned_and_managed_memory();
  test_clone_refuses_device_memory();
  test_clone_of_empty_and_0d();
  test_clone_of_sub_byte_tensors();
  test_caller_may_set_the_negotiated_minor();
  return check_done("test_tensor");
}
