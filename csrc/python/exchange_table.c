/*
 * exchange_table.c - the DLPack C exchange table of dlpackshim.Tensor
 * (dlpack.h 1.3): the producer side of __dlpack_c_exchange_api__.
 *
 * A producer type may carry a PyCapsule named "dlpack_exchange_api" as the
 * attribute __dlpack_c_exchange_api__ of the *type*; it points at a
 * DLPackExchangeAPI whose functions hand over a tensor without a capsule,
 * without keyword parsing, without a Python call: tens of nanoseconds where
 * __dlpack__ costs hundreds. The entries below read the Tensor's holder and
 * export a view that holds a reference to it, exactly as Tensor.__dlpack__
 * does, through the same code (capsule.c). The to_py entry, which C
 * consumers call with no class at hand, makes instances of the class the
 * package registered first (_exchange_register, exchange.c).
 *
 * Consumers call every entry "under the GIL" (dlpack.h), so they take the
 * API with shim_py_bound(), which works during finalization too.
 */
#include "binding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The class the table's to_py entry builds (strong reference). */
static void *default_class;

void shim_exchange_table_class(const shim_pyapi *py, void *cls) {
  if (default_class == NULL) {
    py->Py_IncRef(cls);
    default_class = cls;
  }
}

/* The holder and snapshot DLTensor of a dlpackshim.Tensor, or NULL with a
 * Python exception set (TypeError: not a Tensor; ValueError: closed). */
static const DLTensor *tensor_of(const shim_pyapi *py, void *obj, void **holder, uint64_t *flags,
                                 void **stream) {
  shim_tensor *t = shim_tensor_check(py, obj);
  const DLTensor *dl;
  if (SHIM_UNLIKELY(t == NULL))
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s",
                     "dlpackshim exchange API: the object is not a dlpackshim.Tensor");
  dl = shim_tensor_parts(py, t, holder, flags, stream);
  if (SHIM_UNLIKELY(dl == NULL))
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", "operation on a closed dlpackshim.Tensor");
  return dl;
}

/* Makes the device's default stream wait for the Tensor's `_stream` (the
 * stream its data is ready on, None meaning the default one). GPU only. */
static int wait_own_stream(const shim_pyapi *py, void *s, const DLTensor *t) {
  int32_t dev = t->device.device_type;
  int64_t consumer, producer;
  int st;
  /* The default stream is the stream rules' (csrc/gpu/streams.c); -1: none. */
  if (dlpackshim_stream_check(dev, 0, 0, &consumer) != 0 || consumer == -1) return 0;
  if (s == NULL || s == py->Py_None) return 0;
  producer = (int64_t)py->PyLong_AsLong(s);
  if (producer == -1 && py->PyErr_Occurred() != NULL) return -1;
  st = dlpackshim_stream_wait(dev, t->device.device_id, producer, consumer);
  if (st != 0) {
    shim_py_raise(py, st);
    return -1;
  }
  return 0;
}

static int api_from_py(void *obj, DLManagedTensorVersioned **out) {
  const shim_pyapi *py = shim_py_bound();
  const DLTensor *t;
  void *holder = NULL, *stream = NULL;
  uint64_t flags = 0;
  DLManagedTensorVersioned *m;
  if (SHIM_UNLIKELY(py == NULL || out == NULL)) {
    if (py != NULL) shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", "out is NULL");
    return -1;
  }
  t = tensor_of(py, obj, &holder, &flags, &stream);
  if (SHIM_UNLIKELY(t == NULL)) return -1;
  py->Py_IncRef(holder); /* for the call: a stream wait may run code that closes obj */
  /* GPU data must be ready on the stream current_work_stream names (the
   * default one): order the Tensor's own stream, when it has one, before it. */
  if (SHIM_UNLIKELY(t->device.device_type != kDLCPU) && wait_own_stream(py, stream, t) != 0) {
    py->Py_DecRef(holder);
    return -1;
  }
  /* The export shares the data: it is not an exclusive copy. */
  m = shim_export_view(py, holder, t, flags & ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED);
  py->Py_DecRef(holder);
  if (SHIM_UNLIKELY(m == NULL)) return -1;
  *out = m;
  return 0;
}

static int api_to_py(DLManagedTensorVersioned *m, void **out) {
  const shim_pyapi *py = shim_py_bound();
  void *obj;
  if (SHIM_UNLIKELY(py == NULL)) return -1;
  if (SHIM_UNLIKELY(m == NULL || out == NULL)) {
    if (m != NULL) shim_delete_versioned(py, m); /* stolen even on failure */
    shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", 
              "managed_tensor_to_py_object_no_sync: NULL argument");
    return -1;
  }
  if (SHIM_UNLIKELY(default_class == NULL)) {
    shim_delete_versioned(py, m);
    shim_py_fail(py, DLPACKSHIM_ERR_PYTHON, "%s", "managed_tensor_to_py_object_no_sync: the dlpackshim "
                                         "package is not imported");
    return -1;
  }
  obj = shim_tensor_adopt(py, default_class, m, NULL, 0); /* anyone's tensor: checked */
  if (obj == NULL) return -1;
  *out = obj;
  return 0;
}

static int api_dltensor_from_py(void *obj, DLTensor *out) {
  const shim_pyapi *py = shim_py_bound();
  const DLTensor *t;
  void *owner;
  uint64_t flags;
  int st;
  if (SHIM_UNLIKELY(py == NULL)) return -1;
  if (SHIM_UNLIKELY(out == NULL)) {
    shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", "dltensor_from_py_object_no_sync: out is NULL");
    return -1;
  }
  /* The snapshot has explicit strides (made at import for a pre-1.2
   * producer) and lives as long as the Tensor's holder. */
  t = tensor_of(py, obj, &owner, &flags, NULL);
  if (SHIM_UNLIKELY(t == NULL)) return -1;
  /* A DLTensor carries no flags, as a legacy capsule: the same rule. */
  if (SHIM_UNLIKELY((st = shim_check_flagless(flags)) != 0)) {
    shim_py_raise(py, st);
    return -1;
  }
  *out = *t;
  return 0;
}

static int api_current_work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  (void)device_type;
  (void)device_id;
  /* A Tensor's data is ready on the default stream of its device: the legacy
   * default stream for CUDA, the null stream for ROCm; NULL names both (and
   * means "none" for the CPU). */
  if (out != NULL) *out = NULL;
  return 0;
}

static int api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                         void (*SetError)(void *error_ctx, const char *kind, const char *message)) {
  DLManagedTensorVersioned *m;
  if (proto == NULL || out == NULL) {
    if (SetError != NULL) SetError(error_ctx, "ValueError", "managed_tensor_allocator: NULL argument");
    return -1;
  }
  if (proto->device.device_type != kDLCPU) {
    if (SetError != NULL)
      SetError(error_ctx, "BufferError",
               "managed_tensor_allocator: dlpackshim allocates CPU tensors only");
    return -1;
  }
  m = shim_tensor_alloc(proto, 0);
  if (m == NULL) {
    if (SetError != NULL)
      SetError(error_ctx,
               dlpackshim_last_status() == DLPACKSHIM_ERR_NO_MEMORY ? "MemoryError" : "ValueError",
               dlpackshim_last_error());
    return -1;
  }
  *out = m;
  return 0;
}

const DLPackExchangeAPI shim_api_table = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    api_allocator,
    api_from_py,
    api_to_py,
    api_dltensor_from_py,
    api_current_work_stream,
};

DLPACKSHIM_API const DLPackExchangeAPI *dlpackshim_exchange_api(void) { return &shim_api_table; }

DLPACKSHIM_API void *dlpackshim__exchange_api_capsule(void) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  /* The table is static: the capsule needs no destructor. */
  return py->PyCapsule_New((void *)&shim_api_table, SHIM_EXCHANGE_API_NAME, NULL);
}
