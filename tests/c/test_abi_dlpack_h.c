/*
 * test_abi_dlpack_h.c - includes the system's <dlpack/dlpack.h> *before*
 * dlpackshim.h, as a user of both would: the two must coexist, and dlpack.h's
 * structs must have the layout of dlpackshim.h's (checked in test_abi.c).
 * Exit 77 (skip) when dlpack.h is not installed.
 */
#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#define HAVE_DLPACK_H 1
#endif
#endif

#ifdef HAVE_DLPACK_H
#include <dlpack/dlpack.h>
#endif
#include <stddef.h>

#include "check.h" /* includes dlpackshim.h, after dlpack.h */

#ifndef HAVE_DLPACK_H
int main(void) {
  printf("test_abi_dlpack_h: <dlpack/dlpack.h> is not installed: skipped\n");
  return 77;
}
#else

static void test_dlpack_h_wins_and_shim_adds_the_rest(void) {
#ifdef DLPACKSHIM_DEFINES_DLPACK_
  CHECK(!"dlpackshim.h redefined the DLPack structs after dlpack.h");
#endif
  /* What an old dlpack.h lacks, dlpackshim.h adds on top of it. */
  CHECK_EQ(sizeof(DLManagedTensorVersioned), 80);
  CHECK_EQ(offsetof(DLManagedTensorVersioned, flags), 24);
  CHECK_EQ(offsetof(DLManagedTensorVersioned, dl_tensor), 32);
  CHECK_EQ(sizeof(DLPackExchangeAPI), 56);
  CHECK_EQ(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
  CHECK_EQ(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
  CHECK_EQ(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);
}

/* dlpack.h's legacy structs have dlpackshim.h's layout (see test_abi.c). */
static void test_legacy_layout(void) {
  CHECK_EQ(sizeof(DLDevice), 8);
  CHECK_EQ(offsetof(DLDevice, device_id), 4);
  CHECK_EQ(sizeof(DLDataType), 4);
  CHECK_EQ(offsetof(DLDataType, bits), 1);
  CHECK_EQ(offsetof(DLDataType, lanes), 2);
  CHECK_EQ(sizeof(DLTensor), 48);
  CHECK_EQ(offsetof(DLTensor, data), 0);
  CHECK_EQ(offsetof(DLTensor, device), 8);
  CHECK_EQ(offsetof(DLTensor, ndim), 16);
  CHECK_EQ(offsetof(DLTensor, dtype), 20);
  CHECK_EQ(offsetof(DLTensor, shape), 24);
  CHECK_EQ(offsetof(DLTensor, strides), 32);
  CHECK_EQ(offsetof(DLTensor, byte_offset), 40);
  CHECK_EQ(sizeof(DLManagedTensor), 64);
  CHECK_EQ(offsetof(DLManagedTensor, dl_tensor), 0);
  CHECK_EQ(offsetof(DLManagedTensor, manager_ctx), 48);
  CHECK_EQ(offsetof(DLManagedTensor, deleter), 56);
}

/* The enum values both headers define agree (an old dlpack.h has fewer). */
static void test_enum_values(void) {
  CHECK_EQ(kDLCPU, 1);
  CHECK_EQ(kDLCUDA, 2);
  CHECK_EQ(kDLCUDAHost, 3);
  CHECK_EQ(kDLOpenCL, 4);
  CHECK_EQ(kDLVulkan, 7);
  CHECK_EQ(kDLMetal, 8);
  CHECK_EQ(kDLVPI, 9);
  CHECK_EQ(kDLROCM, 10);
  CHECK_EQ(kDLROCMHost, 11);
  CHECK_EQ(kDLExtDev, 12);
  CHECK_EQ(kDLCUDAManaged, 13);
  CHECK_EQ(kDLInt, 0);
  CHECK_EQ(kDLUInt, 1);
  CHECK_EQ(kDLFloat, 2);
  CHECK_EQ(kDLOpaqueHandle, 3);
  CHECK_EQ(kDLBfloat, 4);
  CHECK_EQ(kDLComplex, 5);
}

/* The library works on dlpack.h's own DLTensor. */
static void test_library_accepts_dlpack_h_tensors(void) {
  int64_t shape[1] = {3};
  float v[3] = {1, 2, 3}, w[3] = {0};
  DLTensor t = {v, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor u = {w, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_tensor_validate(&t, 0));
  CHECK_OK(dlpackshim_copy(&u, &t, 0));
  CHECK(w[2] == 3);
}

int main(void) {
  if (sizeof(void *) != 8 || sizeof(long) != 8) {
    printf("test_abi_dlpack_h: not an LP64 target: skipped\n");
    return 77;
  }
  test_dlpack_h_wins_and_shim_adds_the_rest();
  test_legacy_layout();
  test_enum_values();
  test_library_accepts_dlpack_h_tensors();
  return check_done("test_abi_dlpack_h");
}
#endif
