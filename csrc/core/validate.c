/*
 * validate.c - checks a DLTensor against the DLPack ABI and measures it.
 *
 * Every number a producer hands us is hostile until checked: all arithmetic
 * on extents, strides and offsets is overflow-checked, and shape/strides are
 * read at most ndim entries deep.
 */
#include <inttypes.h>

#include "internal.h"

#define SHIM_MUL(a, b, r) __builtin_mul_overflow((a), (b), (r))
#define SHIM_ADD(a, b, r) __builtin_add_overflow((a), (b), (r))

int shim_check_host(const DLTensor *t, const char *who, const char *name) {
  int32_t dev = (int32_t)t->device.device_type;
  if (shim_host_accessible(dev)) return DLPACKSHIM_OK;
  return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: %s.device.device_type is %" PRId32
                   ": only host-accessible memory (kDLCPU, kDLCUDAHost, kDLROCMHost, "
                   "kDLCUDAManaged) is read and written on the host",
                   who, name, dev);
}

int shim_host_accessible(int32_t device_type) {
  /* Pinned and managed CUDA/ROCm memory is mapped into the host's address space. */
  return device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost ||
         device_type == kDLCUDAManaged;
}

DLPACKSHIM_API int dlpackshim__host_accessible(int32_t device_type) {
  return shim_host_accessible(device_type);
}

int shim_check_flagless(const DLTensor *t, uint64_t flags) {
  /* Without flags a consumer takes the data as writable and packed. Read-only
   * data stays behind (NumPy refuses the same), unless it came in flagless
   * (SHIM_FLAG_LEGACY: its producer granted what this grants); padded
   * sub-byte data would be read packed (whole-byte elements are the same
   * either way: the flag says nothing of them). */
  if ((flags & DLPACKSHIM_FLAG_READ_ONLY) && !(flags & SHIM_FLAG_LEGACY))
    return shim_fail(DLPACKSHIM_ERR_READ_ONLY,
                     "cannot export a read-only tensor through the legacy (unversioned) DLPack "
                     "ABI or as a bare DLTensor, which carry no flags and would make it "
                     "writable; ask for a versioned tensor (max_version=(1, 0) or newer; from the "
                     "exchange table, managed_tensor_from_py_object_no_sync)");
  if ((flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED) &&
      (int64_t)t->dtype.bits * t->dtype.lanes % 8 != 0)
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "cannot export a padded sub-byte tensor (IS_SUBBYTE_TYPE_PADDED) through "
                     "the legacy (unversioned) DLPack ABI or as a bare DLTensor, which would "
                     "read it packed; ask for a versioned tensor (max_version=(1, 0) or newer; from "
                     "the exchange table, managed_tensor_from_py_object_no_sync)");
  return 0;
}

int shim_known_device_type(int32_t device_type) {
  return (device_type >= kDLCPU && device_type <= kDLOpenCL) ||
         (device_type >= kDLVulkan && device_type <= kDLAscend);
}

/* The bit widths each type code allows (dlpack.h 1.3, its main branch's
 * kDLBcomplex, and the consumers' practice: NumPy, PyTorch, CuPy), or NULL
 * for an unknown code. */
static const char *shim_dtype_rule(uint8_t code, uint8_t bits) {
  switch (code) {
    case kDLInt:
    case kDLUInt:
      return (bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16 || bits == 32 ||
              bits == 64)
                 ? ""
                 : "int/uint needs 1, 2, 4, 8, 16, 32 or 64 bits";
    case kDLFloat:
      return (bits == 16 || bits == 32 || bits == 64) ? "" : "float needs 16, 32 or 64 bits";
    case kDLOpaqueHandle:
      return (bits > 0 && bits % 8 == 0) ? "" : "opaque handle needs a positive multiple of 8 bits";
    case kDLBfloat: return bits == 16 ? "" : "bfloat needs 16 bits";
    case kDLComplex:
      return (bits == 32 || bits == 64 || bits == 128) ? "" : "complex needs 32, 64 or 128 bits";
    case kDLBool: return (bits == 1 || bits == 8) ? "" : "bool needs 1 or 8 bits";
    case kDLFloat8_e3m4:
    case kDLFloat8_e4m3:
    case kDLFloat8_e4m3b11fnuz:
    case kDLFloat8_e4m3fn:
    case kDLFloat8_e4m3fnuz:
    case kDLFloat8_e5m2:
    case kDLFloat8_e5m2fnuz:
    case kDLFloat8_e8m0fnu: return bits == 8 ? "" : "float8 types need 8 bits";
    case kDLFloat6_e2m3fn:
    case kDLFloat6_e3m2fn: return bits == 6 ? "" : "float6 types need 6 bits";
    case kDLFloat4_e2m1fn: return bits == 4 ? "" : "float4 types need 4 bits";
    case kDLBcomplex: return bits == 32 ? "" : "bcomplex (two bfloat16) needs 32 bits";
    default: return NULL;
  }
}

/* Checks the dtype alone; *elem_bits = bits * lanes, *itemsize as in shim_info. */
static int shim_check_dtype(DLDataType dt, uint64_t flags, int64_t *elem_bits,
                            int64_t *itemsize) {
  const char *rule = shim_dtype_rule(dt.code, dt.bits);
  if (!rule)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "dtype (code %u, bits %u, lanes %u): unknown type code %u (known: 0..18)",
                     dt.code, dt.bits, dt.lanes, dt.code);
  if (*rule)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "dtype (code %u, bits %u, lanes %u): %s",
                     dt.code, dt.bits, dt.lanes, rule);
  if (dt.lanes < 1)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "dtype (code %u, bits %u, lanes %u): lanes must be >= 1", dt.code, dt.bits,
                     dt.lanes);
  int64_t bits = (int64_t)dt.bits * dt.lanes; /* at most 255 * 65535: no overflow */
  *elem_bits = bits;
  if (bits % 8 == 0)
    *itemsize = bits / 8;
  else /* sub-byte: padded elements fill whole bytes, packed ones share them */
    *itemsize = (flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED) ? (bits + 7) / 8 : 0;
  return DLPACKSHIM_OK;
}

/* ndim, shape and the element count: what every measurement needs. */
static int shim_check_shape(const DLTensor *t, int64_t *numel) {
  if (!t) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor is NULL");
  if (t->ndim < 0 || t->ndim > DLPACKSHIM_MAX_NDIM)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "ndim is %" PRId32 ": must be in [0, %d]",
                     t->ndim, (int)DLPACKSHIM_MAX_NDIM);
  if (t->ndim > 0 && !t->shape)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "shape is NULL but ndim is %" PRId32,
                     t->ndim);
  int64_t n = 1;
  int overflow = 0, empty = 0;
  for (int32_t i = 0; i < t->ndim; i++) {
    int64_t e = t->shape[i];
    if (e < 0)
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "shape[%" PRId32 "] is %" PRId64 ": extents must be >= 0", i, e);
    if (e == 0) empty = 1;
    if (!overflow && SHIM_MUL(n, e, &n)) overflow = 1;
  }
  /* A zero extent makes the tensor empty however large the others are. */
  if (empty) {
    *numel = 0;
  } else if (overflow) {
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "shape: the element count overflows int64 (ndim %" PRId32 ")", t->ndim);
  } else {
    *numel = n;
  }
  return DLPACKSHIM_OK;
}

/* The compact stride rule, once: NumPy's _UpdateContiguousFlags in elements.
 * Walking the axes from the fastest (last for C, first for F), each axis of
 * extent > 1 must step by the product of the faster extents. */
static int shim_is_compact_order(int32_t ndim, const int64_t *shape, const int64_t *strides,
                                 int fortran) {
  int64_t expected = 1;
  for (int32_t k = 0; k < ndim; k++) {
    int32_t i = fortran ? k : ndim - 1 - k;
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return 0;
    expected *= shape[i]; /* bounded by the element count, checked before */
  }
  return 1;
}

/* The dlpackshim_layout bits of strides (NULL = compact row-major), NumPy's
 * way: extent-1 dims ignored, any zero extent is both. shape must be valid. */
static int shim_layout(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  int nontrivial = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == 0) return DLPACKSHIM_LAYOUT_BOTH; /* touches no memory */
    nontrivial += shape[i] != 1;
  }
  if (nontrivial <= 1 && !strides) return DLPACKSHIM_LAYOUT_BOTH;
  if (!strides) return DLPACKSHIM_LAYOUT_C; /* NULL means compact row-major */
  return (shim_is_compact_order(ndim, shape, strides, 0) ? DLPACKSHIM_LAYOUT_C : 0) |
         (shim_is_compact_order(ndim, shape, strides, 1) ? DLPACKSHIM_LAYOUT_F : 0);
}

int shim_is_compact(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  return (shim_layout(ndim, shape, strides) & DLPACKSHIM_LAYOUT_C) != 0;
}

/* Compact strides, row-major (fortran = 0) or column-major (zero extents
 * count as 1, as NumPy and PyTorch do); fails when they overflow int64,
 * which only an empty tensor can do. */
static int shim_compact_strides_fit(int32_t ndim, const int64_t *shape, int fortran) {
  int64_t s = 1;
  for (int32_t k = 0; k + 1 < ndim; k++) {
    int32_t i = fortran ? k : ndim - 1 - k;
    if (shape[i] > 1 && SHIM_MUL(s, shape[i], &s))
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "shape: compact strides overflow int64 after dim %" PRId32, i);
  }
  return DLPACKSHIM_OK;
}

static int shim_compact_strides_order(int32_t ndim, const int64_t *shape, int fortran,
                                      int64_t *out) {
  /* Checked in full before the first write: out is written only on success. */
  int64_t s = 1;
  int rc = shim_compact_strides_fit(ndim, shape, fortran);
  if (rc) return rc;
  for (int32_t k = 0; k < ndim; k++) {
    int32_t i = fortran ? k : ndim - 1 - k;
    out[i] = s;
    if (k + 1 < ndim && shape[i] > 1) s *= shape[i]; /* fits: checked above */
  }
  return DLPACKSHIM_OK;
}

int shim_compact_strides(int32_t ndim, const int64_t *shape, int64_t *out) {
  return shim_compact_strides_order(ndim, shape, 0, out);
}

/* Shape, dtype and compact size: all a prototype without data needs. */
static int shim_measure(const DLTensor *t, uint64_t flags, shim_info *info) {
  int rc = shim_check_shape(t, &info->numel);
  if (rc) return rc;
  rc = shim_check_dtype(t->dtype, flags, &info->elem_bits, &info->itemsize);
  if (rc) return rc;
  const int64_t numel = info->numel;
  if (info->itemsize > 0) {
    if (SHIM_MUL(numel, info->itemsize, &info->nbytes))
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "shape: %" PRId64 " elements of %" PRId64 " bytes overflow int64", numel,
                       info->itemsize);
  } else {
    /* Counted in bytes, never in bits (which overflow 8 times sooner):
     * every 8 elements fill elem_bits whole bytes, the rest a few more. */
    const int64_t rest_bits = numel % 8 * info->elem_bits;
    if (SHIM_MUL(numel / 8, info->elem_bits, &info->nbytes) ||
        SHIM_ADD(info->nbytes, rest_bits / 8 + (rest_bits % 8 != 0), &info->nbytes))
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "shape: %" PRId64 " elements of %" PRId64 " bits overflow int64 bytes",
                       numel, info->elem_bits);
  }
  info->lo = info->hi = 0;
  return DLPACKSHIM_OK;
}

unsigned shim_packed_tail_mask(const shim_info *info) {
  const int used = info->itemsize ? 0 : (int)((info->numel % 8) * info->elem_bits % 8);
  return (1u << used) - 1;
}

int shim_inspect(const DLTensor *t, uint64_t flags, shim_info *info) {
  int rc = shim_measure(t, flags, info);
  if (rc) return rc;
  int32_t dev = (int32_t)t->device.device_type;
  if (!shim_known_device_type(dev))
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "device.device_type is %" PRId32 ": not a DLDeviceType (1..4, 7..21)", dev);
  if (t->device.device_id < 0)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "device.device_id is %" PRId32 ": must be >= 0",
                     t->device.device_id);

  if (t->byte_offset > (uint64_t)INT64_MAX)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "byte_offset is %" PRIu64 ": must be at most INT64_MAX", t->byte_offset);

  const int64_t numel = info->numel;
  /* An empty tensor touches nothing: data and strides are moot, but NULL
   * strides stand for the compact ones, which must exist (NumPy, and
   * tensor_new and clone, which write them, refuse them otherwise). */
  if (numel == 0) return t->strides ? DLPACKSHIM_OK : shim_compact_strides_fit(t->ndim, t->shape, 0);

  if (!t->data)
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "data is NULL but the tensor has %" PRId64 " elements", numel);

  if (info->itemsize == 0) {
    /* Packed sub-byte elements have no byte address of their own: only a
     * compact row-major layout is meaningful (dlpack.h 1.3). */
    if (!shim_is_compact(t->ndim, t->shape, t->strides))
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "strides: dtype (code %u, bits %u, lanes %u) is packed sub-byte, so the "
                       "tensor must be compact row-major",
                       t->dtype.code, t->dtype.bits, t->dtype.lanes);
    info->hi = info->nbytes;
  } else if (!t->strides) {
    info->hi = info->nbytes;
  } else {
    int64_t lo = 0, hi = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
      int64_t e = t->shape[i], step;
      if (e == 1) continue; /* its stride is never used */
      if (SHIM_MUL(e - 1, t->strides[i], &step) || SHIM_MUL(step, info->itemsize, &step) ||
          (step < 0 ? SHIM_ADD(lo, step, &lo) : SHIM_ADD(hi, step, &hi)))
        return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                         "strides[%" PRId32 "] is %" PRId64 ": with shape[%" PRId32 "] = %" PRId64
                         " the byte span overflows int64",
                         i, t->strides[i], i, e);
    }
    if (SHIM_ADD(hi, info->itemsize, &hi))
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR, "strides: the byte span overflows int64");
    info->lo = lo;
    info->hi = hi;
  }

  int64_t end;
  if (SHIM_ADD((int64_t)t->byte_offset, info->hi, &end))
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "byte_offset is %" PRIu64 ": byte_offset + span (%" PRId64
                     " bytes) overflows int64",
                     t->byte_offset, info->hi);
  /* Host memory is dereferenced: the addresses touched must exist, i.e.
   * data + byte_offset + lo >= 0 and data + byte_offset + hi does not wrap.
   * (Other devices' data may be an opaque handle, not an address.) */
  uintptr_t base = (uintptr_t)t->data, last;
  if (shim_host_accessible(dev) &&
      (SHIM_ADD(base, (uintptr_t)end, &last) ||
       (uintptr_t)0 - (uintptr_t)info->lo > base + (uintptr_t)t->byte_offset))
    return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                     "data %p with byte_offset %" PRIu64 " and byte span [%" PRId64 ", %" PRId64
                     "): the addresses wrap around",
                     t->data, t->byte_offset, info->lo, info->hi);
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_tensor_validate(const DLTensor *t, uint64_t flags) {
  shim_info info;
  return shim_inspect(t, flags, &info);
}

DLPACKSHIM_API int dlpackshim_tensor_numel(const DLTensor *t, int64_t *numel_out) {
  int64_t n;
  if (!numel_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_numel: numel_out is NULL");
  int rc = shim_check_shape(t, &n);
  if (rc) return rc;
  *numel_out = n;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_tensor_itemsize(const DLTensor *t, uint64_t flags,
                                              int64_t *itemsize_out) {
  int64_t bits, itemsize;
  if (!t || !itemsize_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_itemsize: %s is NULL",
                     t ? "itemsize_out" : "tensor");
  int rc = shim_check_dtype(t->dtype, flags, &bits, &itemsize);
  if (rc) return rc;
  *itemsize_out = itemsize;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_tensor_nbytes(const DLTensor *t, uint64_t flags,
                                            int64_t *nbytes_out) {
  shim_info info;
  if (!nbytes_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_nbytes: nbytes_out is NULL");
  int rc = shim_measure(t, flags, &info);
  if (rc) return rc;
  *nbytes_out = info.nbytes;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_tensor_layout(const DLTensor *t, int32_t *layout_out) {
  if (!layout_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_layout: layout_out is NULL");
  int64_t n;
  int rc = shim_check_shape(t, &n);
  if (rc) return rc;
  *layout_out = shim_layout(t->ndim, t->shape, t->strides);
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API int dlpackshim_compact_strides(int32_t ndim, const int64_t *shape, int32_t order,
                                              int64_t *strides_out) {
  if (order != DLPACKSHIM_LAYOUT_C && order != DLPACKSHIM_LAYOUT_F)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "compact_strides: order is %" PRId32
                     ": must be DLPACKSHIM_LAYOUT_C (1) or DLPACKSHIM_LAYOUT_F (2)",
                     order);
  if (ndim < 0 || ndim > DLPACKSHIM_MAX_NDIM)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "compact_strides: ndim is %" PRId32 ": must be in [0, %d]", ndim,
                     (int)DLPACKSHIM_MAX_NDIM);
  if (ndim > 0 && (!shape || !strides_out))
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "compact_strides: shape and strides_out must not be NULL when ndim > 0");
  for (int32_t i = 0; i < ndim; i++)
    if (shape[i] < 0)
      return shim_fail(DLPACKSHIM_ERR_INVALID_TENSOR,
                       "shape[%" PRId32 "] is %" PRId64 ": extents must be >= 0", i, shape[i]);
  return shim_compact_strides_order(ndim, shape, order == DLPACKSHIM_LAYOUT_F, strides_out);
}

DLPACKSHIM_API int dlpackshim_tensor_byte_span(const DLTensor *t, uint64_t flags, int64_t *lo,
                                               int64_t *hi) {
  if (!lo || !hi)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "byte_span: lo and hi must not be NULL");
  shim_info info;
  int rc = shim_inspect(t, flags, &info);
  if (rc) return rc;
  *lo = info.lo;
  *hi = info.hi;
  return DLPACKSHIM_OK;
}
