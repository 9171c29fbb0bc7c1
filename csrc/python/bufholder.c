/*
 * bufholder.c - the holder of a buffer-protocol import.
 *
 * A Tensor made from a bytearray, mmap, array.array, ctypes array or any
 * other PEP 3118 exporter must keep an export of it for as long as its data
 * is used (bytearray cannot resize, mmap cannot close while one is held).
 * This object is that export and nothing else: the Py_buffer itself,
 * released when the object goes, and the record of its layout (capsule.c's
 * snapshot, the one every Tensor's `dl` points at). It stands where a
 * capsule stands for a DLPack import: the Tensor's holder, which exports
 * and pins reference. One object instead of a memoryview (two objects), a
 * capsule and a (capsule, memoryview) tuple, with the same guarantee as a
 * memoryview's (docs/benchmarks.md, row 9a, has what it saves).
 *
 * The garbage collector sees the exporter through it (tp_traverse), so an
 * exporter that references its own Tensor is collected. It has no tp_clear:
 * a cycle is broken at the Tensor (whose close drops the holder), never by
 * releasing an export that a pinned reader may still be using.
 */
#include "binding.h"

#include <stddef.h>
#include <string.h>

typedef struct {
  shim_py_buffer view; /* filled in place: exporters may point its shape at its own len */
  shim_record *record; /* NULL until set */
} holder_fields;

static void *holder_type; /* strong reference, made once (main interpreter) */
static shim_spares spares; /* freed holders, their export released (binding.h) */
static ptrdiff_t fields_offset;

static holder_fields *fields(void *obj) { return (holder_fields *)((char *)obj + fields_offset); }

static int holder_traverse(void *self, shim_visitproc visit, void *arg) {
  void *exporter = fields(self)->view.obj;
  int r;
  if ((r = visit(shim_type_of(shim_py_bound(), self), arg)) != 0) return r;
  return exporter != NULL ? visit(exporter, arg) : 0;
}

static void holder_dealloc(void *self) {
  const shim_pyapi *py = shim_py_bound();
  holder_fields *f = fields(self);
  void *tp = shim_type_of(py, self), *slot;
  void (*tp_free)(void *);
  py->PyObject_GC_UnTrack(self);
  if (f->record != NULL) {
    shim_record_free(py, f->record); /* a layout only: frees no data */
    f->record = NULL;
  }
  if (f->view.obj != NULL) {
    /* The exporter's release may run Python code (__release_buffer__):
     * keep whatever exception is pending around this deallocation. */
    shim_pending_error pending;
    shim_error_set_aside(py, &pending);
    py->PyBuffer_Release(&f->view);
    shim_error_put_back(py, &pending);
  }
  if (!(SHIM_LIKELY(tp == holder_type) && shim_spare_keep(&spares, self))) {
    slot = py->PyType_GetSlot(tp, Py_tp_free);
    memcpy(&tp_free, &slot, sizeof(slot));
    tp_free(self);
  }
  py->Py_DecRef(tp); /* instances of heap types own a reference to it */
}

static shim_type_slot holder_slots[] = {
    {Py_tp_dealloc, (void *)holder_dealloc},
    {Py_tp_traverse, (void *)holder_traverse},
    {Py_tp_doc, (void *)"The export of a buffer-protocol object that dlpackshim Tensors view:"
                        " held until the last Tensor or export of it goes."},
    {0, NULL},
};

static shim_type_spec holder_spec = {
    "dlpackshim._BufferExport", 0 /* set with fields_offset */, 0,
    TPFLAGS_HAVE_GC | TPFLAGS_DISALLOW_INSTANTIATION, holder_slots,
};

/* The type, made on first use (GIL held); NULL with an exception. */
static void *the_type(const shim_pyapi *py) {
  if (SHIM_LIKELY(holder_type != NULL)) return holder_type;
  if (fields_offset == 0) {
    ptrdiff_t offset = shim_fields_offset(py);
    if (offset < 0) return NULL;
    fields_offset = offset;
    holder_spec.basicsize = (int)(offset + (ptrdiff_t)sizeof(holder_fields));
  }
  holder_type = py->PyType_FromSpec(&holder_spec);
  return holder_type;
}

void *shim_bufholder_new(const shim_pyapi *py, void *x, int flags, const shim_py_buffer **view_out) {
  void *tp = the_type(py), *holder;
  holder_fields *f;
  if (SHIM_UNLIKELY(tp == NULL)) return NULL;
  holder = shim_spare_take(py, &spares, tp, fields_offset, sizeof(holder_fields));
  if (holder == NULL) {
    holder = py->PyType_GenericAlloc(tp, 0); /* zeroed: no export until the call below sets one */
    if (SHIM_UNLIKELY(holder == NULL)) return NULL;
  }
  f = fields(holder);
  if (py->PyObject_GetBuffer(x, &f->view, flags) != 0) {
    f->view.obj = NULL; /* a failed request holds nothing to release */
    py->Py_DecRef(holder);
    return NULL;
  }
  *view_out = &f->view;
  return holder;
}

void shim_bufholder_set_record(const shim_pyapi *py, void *holder, shim_record *r) {
  (void)py;
  fields(holder)->record = r; /* set once, by the import that made the holder */
}

const shim_record *shim_bufholder_record(const shim_pyapi *py, void *obj) {
  if (holder_type == NULL || obj == NULL || shim_type_of(py, obj) != holder_type) return NULL;
  return fields(obj)->record;
}
