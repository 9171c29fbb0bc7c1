/*
 * tensor.c - building and freeing managed tensors.
 *
 * Each tensor is one block: the managed struct first (so the deleter frees
 * `self`), then the owner record manager_ctx points at, then shape and
 * strides, and for clones the data, aligned to 256 bytes as dlpack.h asks
 * (a clone's block comes from shim_data_alloc: huge pages when large).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { SHIM_DATA_ALIGN = 256 };

typedef struct {
  void *owner;
  dlpackshim_release_fn release;
} shim_owner;

typedef struct {
  DLManagedTensorVersioned managed; /* first: the block starts at &managed */
  shim_owner rec;
  int64_t dims[]; /* shape[ndim] then strides[ndim] */
} shim_block;

typedef struct {
  DLManagedTensor managed;
  shim_owner rec;
  int64_t dims[];
} shim_block_legacy;

/* Both deleters: the owner's release, then the block. */
static void shim_free_block(void *block, shim_owner *rec) {
  if (rec->release) rec->release(rec->owner);
  free(block);
}

static void shim_delete(DLManagedTensorVersioned *self) {
  if (self) shim_free_block(self, self->manager_ctx);
}

static void shim_delete_legacy(DLManagedTensor *self) {
  if (self) shim_free_block(self, self->manager_ctx);
}

/* The tensor described by the flat arguments, pointing at the caller's arrays. */
static DLTensor shim_tensor_of(void *data, int32_t device_type, int32_t device_id, int32_t ndim,
                               const int64_t *shape, const int64_t *strides, uint8_t code,
                               uint8_t bits, uint16_t lanes, uint64_t byte_offset) {
  DLTensor t;
  t.data = data;
  t.device.device_type = (DLDeviceType)device_type;
  t.device.device_id = device_id;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = lanes;
  t.shape = (int64_t *)shape;
  t.strides = (int64_t *)strides;
  t.byte_offset = byte_offset;
  return t;
}

static size_t shim_dims_size(int32_t ndim) { return 2 * (size_t)ndim * sizeof(int64_t); }

/* Copies shape and strides into dims (explicit compact strides when none were
 * given: DLPack >= 1.2 forbids NULL strides) and points t at them. */
static int shim_own_dims(DLTensor *t, int64_t *dims) {
  if (t->ndim == 0) {
    t->shape = t->strides = NULL;
    return DLPACKSHIM_OK;
  }
  int64_t *shape = dims, *strides = dims + t->ndim;
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
  if (t->strides)
    memcpy(strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
  else if (shim_compact_strides(t->ndim, shape, strides))
    return DLPACKSHIM_ERR_INVALID_TENSOR;
  t->shape = shape;
  t->strides = strides;
  return DLPACKSHIM_OK;
}

/* Validates t (sub-byte types as `flags` say), then allocates a block of a
 * `head`-byte header and t's dims, and points t at those dims. */
static int shim_block_new(DLTensor *t, uint64_t flags, size_t head, const char *what, void **out) {
  int rc;
  if ((rc = dlpackshim_tensor_validate(t, flags)) != 0) return rc;
  char *b = malloc(head + shim_dims_size(t->ndim));
  if (!b) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "%s: out of memory (ndim %" PRId32 ")", what, t->ndim);
  if ((rc = shim_own_dims(t, (int64_t *)(void *)(b + head))) != 0) {
    free(b);
    return rc;
  }
  *out = b;
  return DLPACKSHIM_OK;
}

/* The header of a versioned block: version 1.3, our deleter, the owner record. */
static DLManagedTensorVersioned *fill_versioned(shim_block *b, const DLTensor *t, uint64_t flags,
                                                void *owner, dlpackshim_release_fn release) {
  b->rec.owner = owner;
  b->rec.release = release;
  b->managed.version.major = 1;
  b->managed.version.minor = 3;
  b->managed.manager_ctx = &b->rec;
  b->managed.deleter = shim_delete;
  b->managed.flags = flags;
  b->managed.dl_tensor = *t;
  return &b->managed;
}

DLPACKSHIM_API int dlpackshim_tensor_new(void *data, int32_t device_type, int32_t device_id,
                                         int32_t ndim, const int64_t *shape,
                                         const int64_t *strides, uint8_t dtype_code,
                                         uint8_t dtype_bits, uint16_t dtype_lanes,
                                         uint64_t byte_offset, uint64_t flags, void *owner,
                                         dlpackshim_release_fn release,
                                         DLManagedTensorVersioned **tensor_out) {
  int rc;
  if (!tensor_out) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_new: tensor_out is NULL");
  DLTensor t = shim_tensor_of(data, device_type, device_id, ndim, shape, strides, dtype_code,
                              dtype_bits, dtype_lanes, byte_offset);
  void *b;
  if ((rc = shim_block_new(&t, flags, offsetof(shim_block, dims), "tensor_new", &b)) != 0) return rc;
  *tensor_out = fill_versioned(b, &t, flags, owner, release);
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API void dlpackshim_tensor_free(DLManagedTensorVersioned *t) {
  if (t && t->deleter) t->deleter(t);
}

DLPACKSHIM_API int dlpackshim_tensor_new_legacy(void *data, int32_t device_type,
                                                int32_t device_id, int32_t ndim,
                                                const int64_t *shape, const int64_t *strides,
                                                uint8_t dtype_code, uint8_t dtype_bits,
                                                uint16_t dtype_lanes, uint64_t byte_offset,
                                                void *owner, dlpackshim_release_fn release,
                                                DLManagedTensor **tensor_out) {
  int rc;
  if (!tensor_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_new_legacy: tensor_out is NULL");
  DLTensor t = shim_tensor_of(data, device_type, device_id, ndim, shape, strides, dtype_code,
                              dtype_bits, dtype_lanes, byte_offset);
  void *block;
  /* The legacy struct has no flags: sub-byte types are packed. */
  if ((rc = shim_block_new(&t, 0, offsetof(shim_block_legacy, dims), "tensor_new_legacy", &block)) != 0)
    return rc;
  shim_block_legacy *b = block;
  b->rec.owner = owner;
  b->rec.release = release;
  b->managed.manager_ctx = &b->rec;
  b->managed.deleter = shim_delete_legacy;
  b->managed.dl_tensor = t;
  *tensor_out = &b->managed;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API void dlpackshim_tensor_free_legacy(DLManagedTensor *t) {
  if (t && t->deleter) t->deleter(t);
}

DLManagedTensorVersioned *shim_tensor_alloc(const DLTensor *proto, int64_t nbytes, uint64_t flags) {
  size_t head = sizeof(shim_block) + shim_dims_size(proto->ndim), total;
  if ((uint64_t)nbytes > SIZE_MAX ||
      __builtin_add_overflow(head + (SHIM_DATA_ALIGN - 1), (size_t)nbytes, &total))
    return shim_fail_null(DLPACKSHIM_ERR_NO_MEMORY,
                          "tensor_alloc: %" PRId64 " bytes do not fit in memory", nbytes);
  shim_block *b = shim_data_alloc(total); /* uncleared: the copy writes every byte */
  if (!b)
    return shim_fail_null(DLPACKSHIM_ERR_NO_MEMORY, "tensor_alloc: cannot allocate %zu bytes",
                          total);
  /* The data goes after the dims, rounded up to the next 256-byte address. */
  uintptr_t start = (uintptr_t)b + head;
  size_t pad = (size_t)(-start & (SHIM_DATA_ALIGN - 1));
  DLTensor t = *proto;
  t.data = (char *)b + head + pad;
  t.strides = NULL; /* compact, filled in by shim_own_dims */
  t.byte_offset = 0;
  if (shim_own_dims(&t, b->dims)) { /* an empty shape beside a huge extent: valid, not compact */
    free(b);
    return shim_fail_null(DLPACKSHIM_ERR_UNSUPPORTED,
                          "tensor_alloc: a compact copy of this empty tensor has no strides: "
                          "they overflow int64 (NumPy refuses such a shape)");
  }
  return fill_versioned(b, &t, flags, NULL, NULL);
}

DLPACKSHIM_API int dlpackshim_tensor_clone(const DLTensor *src, uint64_t flags,
                                           DLManagedTensorVersioned **tensor_out) {
  shim_info info;
  int rc;
  if (!tensor_out)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "tensor_clone: tensor_out is NULL");
  if ((rc = shim_inspect(src, flags, &info)) != 0) return rc;
  return shim_clone_inspected(src, flags, &info, tensor_out);
}

int shim_clone_inspected(const DLTensor *src, uint64_t flags, const shim_info *info,
                         DLManagedTensorVersioned **tensor_out) {
  int rc;
  if ((rc = shim_check_host(src, "tensor_clone", "src")) != 0) return rc;
  DLTensor proto = *src;
  proto.device.device_type = kDLCPU;
  proto.device.device_id = 0;
  uint64_t out_flags = (flags & ~(uint64_t)DLPACKSHIM_FLAG_READ_ONLY) | DLPACKSHIM_FLAG_IS_COPIED;
  DLManagedTensorVersioned *m = shim_tensor_alloc(&proto, info->nbytes, out_flags);
  if (!m) return dlpackshim_last_status();
  shim_copy_fresh(&m->dl_tensor, src, info);
  *tensor_out = m;
  return DLPACKSHIM_OK;
}

DLPACKSHIM_API DLTensor *dlpackshim_managed_dltensor(DLManagedTensorVersioned *t) {
  return t ? &t->dl_tensor : NULL;
}
