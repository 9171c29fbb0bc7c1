/*
 * test_abi.c - the DLPack structs of dlpackshim.h against the known LP64
 * layout of dlpack.h 1.3, and every enum value. test_abi_dlpack_h.c checks
 * the system's dlpack.h against the same numbers.
 */
#include <stddef.h>

#include "check.h"

#define CHECK_SIZE(type, n) CHECK_EQ(sizeof(type), (n))
#define CHECK_OFFSET(type, field, n) CHECK_EQ(offsetof(type, field), (n))

static void test_struct_layout(void) {
  CHECK_SIZE(DLDevice, 8);
  CHECK_OFFSET(DLDevice, device_type, 0);
  CHECK_OFFSET(DLDevice, device_id, 4);
  CHECK_SIZE(DLDataType, 4);
  CHECK_OFFSET(DLDataType, code, 0);
  CHECK_OFFSET(DLDataType, bits, 1);
  CHECK_OFFSET(DLDataType, lanes, 2);
  CHECK_SIZE(DLTensor, 48);
  CHECK_OFFSET(DLTensor, data, 0);
  CHECK_OFFSET(DLTensor, device, 8);
  CHECK_OFFSET(DLTensor, ndim, 16);
  CHECK_OFFSET(DLTensor, dtype, 20);
  CHECK_OFFSET(DLTensor, shape, 24);
  CHECK_OFFSET(DLTensor, strides, 32);
  CHECK_OFFSET(DLTensor, byte_offset, 40);
  CHECK_SIZE(DLManagedTensor, 64);
  CHECK_OFFSET(DLManagedTensor, dl_tensor, 0);
  CHECK_OFFSET(DLManagedTensor, manager_ctx, 48);
  CHECK_OFFSET(DLManagedTensor, deleter, 56);
  CHECK_SIZE(DLPackVersion, 8);
  CHECK_OFFSET(DLPackVersion, major, 0);
  CHECK_OFFSET(DLPackVersion, minor, 4);
  CHECK_SIZE(DLManagedTensorVersioned, 80);
  CHECK_OFFSET(DLManagedTensorVersioned, version, 0);
  CHECK_OFFSET(DLManagedTensorVersioned, manager_ctx, 8);
  CHECK_OFFSET(DLManagedTensorVersioned, deleter, 16);
  CHECK_OFFSET(DLManagedTensorVersioned, flags, 24);
  CHECK_OFFSET(DLManagedTensorVersioned, dl_tensor, 32);
  CHECK_SIZE(DLPackExchangeAPIHeader, 16);
  CHECK_OFFSET(DLPackExchangeAPIHeader, version, 0);
  CHECK_OFFSET(DLPackExchangeAPIHeader, prev_api, 8);
  CHECK_SIZE(DLPackExchangeAPI, 16 + 5 * 8);
  CHECK_OFFSET(DLPackExchangeAPI, header, 0);
  CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_allocator, 16);
  CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync, 24);
  CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync, 32);
  CHECK_OFFSET(DLPackExchangeAPI, dltensor_from_py_object_no_sync, 40);
  CHECK_OFFSET(DLPackExchangeAPI, current_work_stream, 48);
  CHECK_SIZE(DLDeviceType, 4); /* an int32 in DLDevice */
}

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
  CHECK_EQ(kDLOneAPI, 14);
  CHECK_EQ(kDLWebGPU, 15);
  CHECK_EQ(kDLHexagon, 16);
  CHECK_EQ(kDLMAIA, 17);
  CHECK_EQ(kDLTrn, 18);
  CHECK_EQ(kDLTPU, 19); /* after 1.3 (dlpack main, minor still 3) */
  CHECK_EQ(kDLTPUHost, 20);
  CHECK_EQ(kDLAscend, 21);
  CHECK_EQ(kDLInt, 0);
  CHECK_EQ(kDLUInt, 1);
  CHECK_EQ(kDLFloat, 2);
  CHECK_EQ(kDLOpaqueHandle, 3);
  CHECK_EQ(kDLBfloat, 4);
  CHECK_EQ(kDLComplex, 5);
  CHECK_EQ(kDLBool, 6);
  CHECK_EQ(kDLFloat8_e3m4, 7);
  CHECK_EQ(kDLFloat8_e4m3, 8);
  CHECK_EQ(kDLFloat8_e4m3b11fnuz, 9);
  CHECK_EQ(kDLFloat8_e4m3fn, 10);
  CHECK_EQ(kDLFloat8_e4m3fnuz, 11);
  CHECK_EQ(kDLFloat8_e5m2, 12);
  CHECK_EQ(kDLFloat8_e5m2fnuz, 13);
  CHECK_EQ(kDLFloat8_e8m0fnu, 14);
  CHECK_EQ(kDLFloat6_e2m3fn, 15);
  CHECK_EQ(kDLFloat6_e3m2fn, 16);
  CHECK_EQ(kDLFloat4_e2m1fn, 17);
  CHECK_EQ(kDLBcomplex, 18); /* after 1.3 */
  CHECK_EQ(DLPACKSHIM_LAYOUT_NONE, 0);
  CHECK_EQ(DLPACKSHIM_LAYOUT_C, 1);
  CHECK_EQ(DLPACKSHIM_LAYOUT_F, 2);
  CHECK_EQ(DLPACKSHIM_LAYOUT_BOTH, 3);
  CHECK_EQ(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
  CHECK_EQ(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
  CHECK_EQ(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);
  CHECK_EQ(DLPACKSHIM_FLAG_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
  CHECK_EQ(DLPACKSHIM_FLAG_IS_COPIED, DLPACK_FLAG_BITMASK_IS_COPIED);
  CHECK_EQ(DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
  CHECK_EQ(DLPACK_MAJOR_VERSION, 1);
  CHECK_EQ(DLPACK_MINOR_VERSION, 3);
}

/* Status values are fixed forever: foreign bindings hard-code them. */
static void test_status_values(void) {
  CHECK_EQ(DLPACKSHIM_OK, 0);
  CHECK_EQ(DLPACKSHIM_ERR_INVALID_ARGUMENT, -1);
  CHECK_EQ(DLPACKSHIM_ERR_NO_MEMORY, -2);
  CHECK_EQ(DLPACKSHIM_ERR_INVALID_TENSOR, -3);
  CHECK_EQ(DLPACKSHIM_ERR_UNSUPPORTED, -4);
  CHECK_EQ(DLPACKSHIM_ERR_VERSION, -5);
  CHECK_EQ(DLPACKSHIM_ERR_CAPSULE, -6);
  CHECK_EQ(DLPACKSHIM_ERR_NO_PYTHON, -7);
  CHECK_EQ(DLPACKSHIM_ERR_TYPE, -8);
  CHECK_EQ(DLPACKSHIM_ERR_DEVICE, -9);
  CHECK_EQ(DLPACKSHIM_ERR_STREAM, -10);
  CHECK_EQ(DLPACKSHIM_ERR_COPY_REQUIRED, -11);
  CHECK_EQ(DLPACKSHIM_ERR_READ_ONLY, -12);
  CHECK_EQ(DLPACKSHIM_ERR_PYTHON, -13);
  CHECK_EQ(DLPACKSHIM_STREAM_NONE, -1);
  CHECK_EQ(DLPACKSHIM_STREAM_CUDA_LEGACY, 1);
  CHECK_EQ(DLPACKSHIM_STREAM_CUDA_PER_THREAD, 2);
  CHECK_EQ(DLPACKSHIM_MAX_NDIM, 1024);
}

int main(void) {
  if (sizeof(void *) != 8 || sizeof(long) != 8) {
    printf("test_abi: not an LP64 target, layout numbers do not apply: skipped\n");
    return 77;
  }
  test_struct_layout();
  test_enum_values();
  test_status_values();
  return check_done("test_abi");
}
