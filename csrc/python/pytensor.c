/*
 * pytensor.c - the C base of dlpackshim.Tensor, made at run time.
 *
 * The package's Tensor class (dlpackshim/_tensor.py) derives from the type
 * made here with PyType_FromSpec (stable ABI, no Python.h): its state is this
 * struct, so the library builds and reads Tensors through plain C fields, and
 * the hot method __dlpack__ runs here, with the GIL held, as one C call.
 *
 * Lifetime, by construction: `owner` (the holder) keeps the memory alive. It
 * is the capsule dlpackshim consumed (its record: the snapshot of the tensor
 * taken at import, capsule.c), a buffer's held export (bufholder.c, its
 * record inside), or a tuple (capsule or export, keep) when a Python object
 * keeps the memory valid too (from_pointer's owner, an __array_interface__
 * object). close() only drops the Tensor's reference to it. Every user of
 * the data takes its own reference first and keeps it for the duration: a C
 * method with Py_IncRef, Python code with a local variable (Tensor._pin). So
 * a thread that closes the Tensor, or a finalizer that runs during an
 * allocation, can never free memory that a call is reading.
 *
 * One type per process, made in the main interpreter: dlpackshim refuses to
 * load in a subinterpreter (it keeps process-wide state: this type, the
 * exchange table's cache). Each import of the package makes its own subclass
 * and binds its builtins to it (dlpackshim__py_builtin), so a re-imported
 * package builds Tensors of its own class and still accepts the old ones.
 */
#include "binding.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* CPython's PyMemberDef, written from its layout (stable ABI). */
typedef struct {
  const char *name;
  int type;
  ptrdiff_t offset;
  int flags;
  const char *doc;
} shim_member_def;

enum { T_OBJECT = 6, T_INT = 1, T_UINT = 11, T_ULONGLONG = 18, T_PYSSIZET = 19, READONLY = 1 };
enum { Py_tp_clear = 51, Py_tp_methods = 64, Py_tp_members = 72 };
enum { TPFLAGS_BASETYPE = 1 << 10, TPFLAGS_HAVE_VERSION_TAG = 1 << 18 };
enum { METH_KEYWORDS = 0x2 };

/* A Tensor's C fields. They follow CPython's object header, whose size is
 * not part of the stable ABI (it grows on free-threaded builds): it is read
 * at run time (object.__basicsize__), so the fields sit at fields_offset
 * and every member offset is computed when the type is made. */
typedef struct {
  void *owner;         /* the holder; NULL or None once closed */
  void *export_owner;  /* what exports reference (shim_record_export_holder): the
                          holder, or the holder's root; borrowed, kept by the holder */
  const DLTensor *dl;  /* the record's snapshot: valid while the holder lives */
  uint64_t flags;      /* the record's flags, SHIM_FLAG_LEGACY included */
  uint32_t major, minor; /* 0.0: a legacy tensor */
  void *stream;        /* the stream the data is ready on; NULL/None: the default */
  void *pinned;        /* set once __array_interface__ handed out the data */
  void *meta;          /* the package's cache of Python-level metadata */
  void *weaklist;      /* weak references to the Tensor (__weaklistoffset__) */
} tensor_fields;

static ptrdiff_t fields_offset; /* object.__basicsize__, rounded up for alignment */

/* The fields of a Tensor (obj: an instance of the base type or a subclass). */
static inline tensor_fields *fields(void *obj) {
  return (tensor_fields *)((char *)obj + fields_offset);
}

static void *base_type; /* strong reference, made once */
/* The four keywords of __dlpack__: their texts, and the same interned (made
 * with the type), matched by identity before any string comparison (callers
 * such as NumPy pass interned names). */
enum { KW_STREAM, KW_MAX_VERSION, KW_DL_DEVICE, KW_COPY, KW_COUNT };
static const char *const kw_text[KW_COUNT] = {"stream", "max_version", "dl_device", "copy"};
static void *kw_name[KW_COUNT];
static void *name_slow;

/* ---- the type ------------------------------------------------------------ */

static int tensor_traverse(void *self, shim_visitproc visit, void *arg) {
  tensor_fields *t = fields(self);
  int r;
  /* Instances of heap types reference their type (CPython >= 3.9). */
  if ((r = visit(shim_type_of(shim_py_bound(), self), arg)) != 0) return r;
  if (t->owner != NULL && (r = visit(t->owner, arg)) != 0) return r;
  if (t->stream != NULL && (r = visit(t->stream, arg)) != 0) return r;
  if (t->pinned != NULL && (r = visit(t->pinned, arg)) != 0) return r;
  if (t->meta != NULL && (r = visit(t->meta, arg)) != 0) return r;
  return 0;
}

static void clear_field(const shim_pyapi *py, void **field) {
  void *v = *field;
  *field = NULL; /* before the decref, which may run code that reads the field */
  if (v != NULL) py->Py_DecRef(v);
}

static int tensor_clear(void *self) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = fields(self);
  clear_field(py, &t->meta);
  clear_field(py, &t->pinned);
  clear_field(py, &t->stream);
  clear_field(py, &t->owner);
  return 0;
}

/* Freed Tensors kept for the next ones (binding.h, shim_spares: 7-15 ns of
 * an import, docs/benchmarks.md). Only instances of the class made below,
 * never of a subclass (whose instances may carry a __dict__ or more). */
static shim_spares spares;
static void *spare_class; /* strong reference */

static void tensor_dealloc(void *self) {
  const shim_pyapi *py = shim_py_bound();
  void *tp = shim_type_of(py, self);
  void (*tp_free)(void *);
  void *slot;
  py->PyObject_GC_UnTrack(self);
  if (fields(self)->weaklist != NULL) py->PyObject_ClearWeakRefs(self);
  tensor_clear(self);
  if (SHIM_LIKELY(tp == spare_class) && shim_spare_keep(&spares, self)) {
    py->Py_DecRef(tp);
    return;
  }
  slot = py->PyType_GetSlot(tp, Py_tp_free);
  memcpy(&tp_free, &slot, sizeof(slot));
  tp_free(self);
  py->Py_DecRef(tp); /* instances of heap types own a reference to it */
}

/* Raises "closed" (ValueError) and returns NULL. */
static void *closed_error(const shim_pyapi *py) {
  shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "operation on a closed dlpackshim.Tensor");
  return shim_py_raise(py, DLPACKSHIM_ERR_INVALID_ARGUMENT);
}

/* 1 for an exact int that fits a long, with *out; 0 for anything else. */
static int exact_long(const shim_pyapi *py, void *obj, long *out) {
  if (!shim_is_exact(py, obj, py->PyLong_Type)) return 0;
  *out = py->PyLong_AsLong(obj);
  if (*out == -1 && py->PyErr_Occurred() != NULL) {
    py->PyErr_Clear();
    return 0;
  }
  return 1;
}

/* 1 for an exact tuple of two exact ints that fit a long, with *a and *b. */
static int int_pair(const shim_pyapi *py, void *obj, long *a, long *b) {
  return shim_is_exact(py, obj, py->PyTuple_Type) && py->PyTuple_Size(obj) == 2 &&
         exact_long(py, py->PyTuple_GetItem(obj, 0), a) &&
         exact_long(py, py->PyTuple_GetItem(obj, 1), b);
}

/* max_version -> 1 (versioned), 0 (legacy), or -1: leave it to the Python
 * slow path (which raises the standard's TypeError for a bad value, and
 * ValueError for numbers a DLPackVersion's uint32 fields cannot hold). */
static int versioned_for(const shim_pyapi *py, void *max_version) {
  long major, minor;
  if (max_version == py->Py_None) return 0;
  if (!int_pair(py, max_version, &major, &minor) || major < 0 || minor < 0 ||
      (unsigned long)major > UINT32_MAX || (unsigned long)minor > UINT32_MAX)
    return -1;
  return major >= 1 ? 1 : 0;
}

/* versioned_for with a memory of the last tuple: callers pass the same object
 * every time (NumPy its static tuple, Python code a constant). The tuple is
 * held, so its address cannot come back as another value; an exact tuple of
 * exact ints is immutable, and freeing the one it replaces runs no code. */
static void *last_max_version;
static int last_versioned;

static int versioned_cached(const shim_pyapi *py, void *max_version) {
  void *old = last_max_version;
  int versioned;
  if (max_version == old) return last_versioned;
  versioned = versioned_for(py, max_version);
  if (versioned >= 0 && max_version != py->Py_None) {
    py->Py_IncRef(max_version);
    last_max_version = max_version;
    last_versioned = versioned;
    if (old != NULL) py->Py_DecRef(old);
  }
  return versioned;
}

/* The index of keyword `name`, or -1. */
static int kw_index(const shim_pyapi *py, void *name) {
  int k;
  for (k = 0; k < KW_COUNT; k++)
    if (name == kw_name[k]) return k;
  for (k = 0; k < KW_COUNT; k++)
    if (py->PyUnicode_CompareWithASCIIString(name, kw_text[k]) == 0) return k;
  return -1;
}

/* 1 when dl_device is None, or the exact (type, id) tuple of ints that `dl`
 * already lives on: nothing to move. */
static int same_device(const shim_pyapi *py, void *dl_device, const DLTensor *dl) {
  long type, id;
  if (dl_device == py->Py_None) return 1;
  return int_pair(py, dl_device, &type, &id) && type == (long)dl->device.device_type &&
         id == (long)dl->device.device_id;
}

/* The last keyword-name tuple read, with each name's index: a caller passes
 * the same tuple object every time (NumPy's from_dlpack does), and a tuple
 * is immutable. It is held, so its address cannot come back as another
 * tuple; it is kept only when every name is one of the interned keywords,
 * so that freeing the one it replaces runs no code. */
static void *last_kwnames;
static ptrdiff_t last_nkw;
static int last_kw_index[KW_COUNT];

/* kw[] from the call's keywords; -1 with a TypeError for an unknown name. */
static int read_keywords(const shim_pyapi *py, void *const *args, void *kwnames, void **kw) {
  ptrdiff_t i, nkw;
  int k, index[KW_COUNT], interned = 1;
  for (k = 0; k < KW_COUNT; k++) kw[k] = py->Py_None;
  if (kwnames == NULL) return 0;
  if (kwnames == last_kwnames) {
    for (i = 0; i < last_nkw; i++) kw[last_kw_index[i]] = args[i];
    return 0;
  }
  nkw = py->PyTuple_Size(kwnames);
  for (i = 0; i < nkw; i++) {
    void *name = py->PyTuple_GetItem(kwnames, i);
    k = kw_index(py, name);
    if (SHIM_UNLIKELY(k < 0)) {
      const char *text = py->PyUnicode_AsUTF8AndSize(name, NULL);
      if (text == NULL) { /* a name with lone surrogates: our own conversion failed */
        py->PyErr_Clear();
        text = "?";
      }
      shim_py_fail(py, DLPACKSHIM_ERR_TYPE,
                   "__dlpack__() got an unexpected keyword argument '%.100s'", text);
      return -1;
    }
    interned &= name == kw_name[k];
    if (i < KW_COUNT) index[i] = k;
    kw[k] = args[i];
  }
  if (interned && nkw <= KW_COUNT) {
    void *old = last_kwnames;
    py->Py_IncRef(kwnames);
    last_kwnames = kwnames;
    last_nkw = nkw;
    memcpy(last_kw_index, index, sizeof(index));
    if (old != NULL) py->Py_DecRef(old);
  }
  return 0;
}

/* Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None,
 * copy=None): the plain CPU exchange here, everything else in the package's
 * Tensor._dlpack_slow (device moves, copies, streams, argument errors). */
static void *tensor_dlpack(void *self, void *const *args, ptrdiff_t nargs, void *kwnames) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = fields(self);
  void *kw[KW_COUNT], *holder, *cap;
  int versioned;
  if (SHIM_UNLIKELY(nargs != 0)) {
    shim_fail(DLPACKSHIM_ERR_TYPE, "__dlpack__() takes keyword arguments only");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  if (SHIM_UNLIKELY(read_keywords(py, args, kwnames, kw) != 0)) return NULL;
  holder = t->owner;
  if (SHIM_UNLIKELY(holder == NULL || holder == py->Py_None)) return closed_error(py);
  /* Plain: no stream, no device move (dl_device None or the tensor's own),
   * no copy asked for (None or False). */
  if (SHIM_LIKELY(kw[KW_STREAM] == py->Py_None &&
                  (kw[KW_COPY] == py->Py_None || kw[KW_COPY] == py->Py_False) &&
                  (t->stream == NULL || t->stream == py->Py_None) &&
                  same_device(py, kw[KW_DL_DEVICE], t->dl))) {
    versioned = versioned_cached(py, kw[KW_MAX_VERSION]);
    if (SHIM_LIKELY(versioned >= 0)) {
      py->Py_IncRef(holder); /* the export may run a finalizer that closes the Tensor */
      cap = shim_export_owned(py, t->export_owner, t->dl,
                              t->flags & ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED, versioned);
      py->Py_DecRef(holder);
      return cap;
    }
  }
  return py->PyObject_CallMethodObjArgs(self, name_slow, kw[KW_STREAM], kw[KW_MAX_VERSION],
                                        kw[KW_DL_DEVICE], kw[KW_COPY], NULL);
}

/* Tensor.close(): drops the Tensor's reference to its holder. Only here can
 * _owner change (it is read-only to Python), so the snapshot `dl` always
 * belongs to the holder a caller read. */
static void *tensor_close(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  tensor_fields *t = fields(self);
  void *owner = t->owner, *pinned = t->pinned;
  (void)unused;
  if (owner != NULL && owner != py->Py_None) {
    t->owner = NULL;
    if (pinned != NULL && pinned != py->Py_None && pinned != py->Py_False) {
      /* An array made through __array_interface__ references the Tensor,
       * not the holder: the holder stays, as _pinned, until the Tensor dies. */
      t->pinned = owner;
      py->Py_DecRef(pinned);
    } else {
      py->Py_DecRef(owner);
    }
    clear_field(py, &t->meta);
  }
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

/* Offsets relative to the fields: made absolute (fields_offset added) when
 * the type is made. */
static shim_member_def tensor_members[] = {
    {"_owner", T_OBJECT, offsetof(tensor_fields, owner), READONLY,
     "what keeps the memory alive: the consumed capsule, or (capsule, keep); None once closed"},
    {"_addr", T_PYSSIZET, offsetof(tensor_fields, dl), READONLY,
     "address of the DLTensor snapshot; valid only while _owner is held"},
    {"_flags", T_ULONGLONG, offsetof(tensor_fields, flags), READONLY, "DLPack flags"},
    {"_major", T_UINT, offsetof(tensor_fields, major), READONLY, "DLPack major version (0: legacy)"},
    {"_minor", T_UINT, offsetof(tensor_fields, minor), READONLY, "DLPack minor version"},
    {"_stream", T_OBJECT, offsetof(tensor_fields, stream), 0, "the stream the data is ready on"},
    {"_pinned", T_OBJECT, offsetof(tensor_fields, pinned), 0, "set once an array interface was made"},
    {"_meta", T_OBJECT, offsetof(tensor_fields, meta), 0, "cached metadata"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tensor_fields, weaklist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static shim_method_def tensor_methods[] = {
    {"__dlpack__", (void *)tensor_dlpack, SHIM_METH_FASTCALL | METH_KEYWORDS,
     NULL /* the package's, given to dlpackshim__py_tensor_base */},
    {"close", (void *)tensor_close, SHIM_METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Drop this Tensor's hold on the memory now; safe to call twice, and from\n"
     "any thread: a call running in another thread keeps the memory it uses.\n\n"
     "Capsules and consumer arrays made through ``__dlpack__`` keep the\n"
     "memory alive on their own. Arrays made through ``__array_interface__``\n"
     "reference the Tensor itself, so once one was made the memory is kept\n"
     "until the Tensor is garbage-collected; the Tensor is closed all the same."},
    {NULL, NULL, 0, NULL},
};

static shim_type_slot tensor_slots[] = {
    {Py_tp_dealloc, (void *)tensor_dealloc},
    {Py_tp_traverse, (void *)tensor_traverse},
    {Py_tp_clear, (void *)tensor_clear},
    {Py_tp_members, tensor_members},
    {Py_tp_methods, tensor_methods},
    {Py_tp_doc, (void *)"The C base of dlpackshim.Tensor (fields and __dlpack__)."},
    {0, NULL},
};

static shim_type_spec tensor_spec = {
    "dlpackshim._TensorBase", 0 /* set with fields_offset */, 0,
    TPFLAGS_HAVE_VERSION_TAG | TPFLAGS_BASETYPE | TPFLAGS_HAVE_GC, tensor_slots,
};

/* Raises ImportError unless this is the main interpreter (its ID is 0), else 0. */
static int check_main_interpreter(const shim_pyapi *py) {
  if (py->PyInterpreterState_GetID(py->PyInterpreterState_Get()) == 0) return 0;
  py->PyErr_SetString(*py->PyExc_ImportError,
                      "dlpackshim runs in the main interpreter only: it keeps process-wide "
                      "state (its Tensor type, the exchange table cache) that a subinterpreter "
                      "must not share");
  return -1;
}

static void *intern(const shim_pyapi *py, const char *s) { return py->PyUnicode_InternFromString(s); }

/* Lays the fields out after the object header: its size is
 * object.__basicsize__ (16 on the default build; larger on others). */
ptrdiff_t shim_fields_offset(const shim_pyapi *py) {
  void *size = py->PyObject_GetAttrString(py->PyBaseObject_Type, "__basicsize__");
  long header;
  if (size == NULL) return -1;
  header = py->PyLong_AsLong(size);
  py->Py_DecRef(size);
  if (header <= 0 || header > 4096) {
    if (py->PyErr_Occurred() == NULL)
      py->PyErr_SetString(*py->PyExc_ImportError, "dlpackshim: object.__basicsize__ is implausible");
    return -1;
  }
  return (ptrdiff_t)((header + 15) / 16 * 16);
}

static int layout_fields(const shim_pyapi *py) {
  int i;
  fields_offset = shim_fields_offset(py);
  if (fields_offset < 0) {
    fields_offset = 0;
    return -1;
  }
  for (i = 0; tensor_members[i].name != NULL; i++) tensor_members[i].offset += fields_offset;
  tensor_spec.basicsize = (int)(fields_offset + (ptrdiff_t)sizeof(tensor_fields));
  return 0;
}

DLPACKSHIM_API void *dlpackshim__py_tensor_base(void *dlpack_doc) {
  const shim_pyapi *py = shim_py();
  if (py == NULL) return NULL;
  if (check_main_interpreter(py) != 0) return NULL;
  if (base_type == NULL) {
    /* __dlpack__'s docstring is the package's (the first import's): kept for
     * the life of the process, as the type is. */
    static char *doc;
    void *bytes = py->PyUnicode_AsUTF8String(dlpack_doc);
    const char *text;
    int k;
    if (bytes == NULL) return NULL;
    text = py->PyBytes_AsString(bytes);
    doc = (char *)malloc(strlen(text) + 1);
    if (doc == NULL) {
      py->Py_DecRef(bytes);
      shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
      return shim_py_raise(py, DLPACKSHIM_ERR_NO_MEMORY);
    }
    memcpy(doc, text, strlen(text) + 1);
    py->Py_DecRef(bytes);
    tensor_methods[0].ml_doc = doc;
    name_slow = intern(py, "_dlpack_slow");
    if (name_slow == NULL) return NULL;
    for (k = 0; k < KW_COUNT; k++)
      if ((kw_name[k] = intern(py, kw_text[k])) == NULL) return NULL;
    if (fields_offset == 0 && layout_fields(py) != 0) return NULL;
    base_type = py->PyType_FromSpec(&tensor_spec);
    if (base_type == NULL) return NULL;
  }
  py->Py_IncRef(base_type);
  return base_type;
}

/* The package's Tensor class: a C subtype of the base, one per import of the
 * package, to which the package copies the methods of its class statement
 * (dlpackshim/_base.py, c_class). Its instances are deallocated by
 * tensor_dealloc directly: a class made by a `class` statement would be
 * deallocated through CPython's generic subtype_dealloc (finalizer and
 * weakref checks, a second GC tracking), which cost a buffer import ~40 ns,
 * a fifth of it. */
static shim_type_slot class_slots[] = {
    {Py_tp_dealloc, (void *)tensor_dealloc},
    {Py_tp_traverse, (void *)tensor_traverse},
    {Py_tp_clear, (void *)tensor_clear},
    {0, NULL},
};
static shim_type_spec class_spec = {
    "dlpackshim.Tensor", 0 /* the base's */, 0,
    TPFLAGS_HAVE_VERSION_TAG | TPFLAGS_BASETYPE | TPFLAGS_HAVE_GC, class_slots,
};

DLPACKSHIM_API void *dlpackshim__py_tensor_class(void) {
  const shim_pyapi *py = shim_py();
  void *bases, *cls;
  if (py == NULL) return NULL;
  if (base_type == NULL) {
    py->PyErr_SetString(*py->PyExc_ImportError, "dlpackshim: the Tensor base is not made yet");
    return NULL;
  }
  bases = py->PyTuple_Pack(1, base_type);
  if (bases == NULL) return NULL;
  cls = py->PyType_FromSpecWithBases(&class_spec, bases);
  py->Py_DecRef(bases);
  if (cls != NULL) { /* the newest import's class gets the spares: all are the base's size */
    void *old = spare_class;
    py->Py_IncRef(cls);
    spare_class = cls;
    if (old != NULL) py->Py_DecRef(old);
  }
  return cls;
}

/* ---- what the rest of the binding uses ---------------------------------- */

const shim_record *shim_holder_record(const shim_pyapi *py, void *holder) {
  const shim_record *r;
  if (holder != NULL && shim_is_exact(py, holder, py->PyTuple_Type) && py->PyTuple_Size(holder) == 2)
    holder = py->PyTuple_GetItem(holder, 0);
  r = shim_record_of(py, holder);
  return r != NULL ? r : shim_bufholder_record(py, holder);
}

/* A Tensor of class cls owning holder (taken, also on failure), its fields
 * other than the owner still zero: the caller fills them. */
static void *checked_class; /* the last class found a Tensor subclass (held: its address stays its) */

static void *tensor_alloc(const shim_pyapi *py, void *cls, void *holder) {
  void *obj;
  if (SHIM_UNLIKELY(cls != checked_class)) {
    void *old = checked_class;
    if (base_type == NULL || cls == NULL || !py->PyType_IsSubtype(cls, base_type)) {
      py->Py_DecRef(holder);
      shim_fail(DLPACKSHIM_ERR_TYPE, "dlpackshim: builtins bound to a class that is not a Tensor");
      return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
    }
    py->Py_IncRef(cls);
    checked_class = cls; /* a type's bases never change to drop base_type: CPython refuses */
    if (old != NULL) py->Py_DecRef(old);
  }
  obj = SHIM_LIKELY(cls == spare_class)
            ? shim_spare_take(py, &spares, cls, fields_offset, sizeof(tensor_fields))
            : NULL;
  if (obj == NULL) {
    obj = py->PyType_GenericAlloc(cls, 0);
    if (SHIM_UNLIKELY(obj == NULL)) {
      py->Py_DecRef(holder);
      return NULL;
    }
  }
  fields(obj)->owner = holder;
  return obj;
}

void *shim_tensor_of_record(const shim_pyapi *py, void *cls, void *holder, const shim_record *r) {
  void *obj = tensor_alloc(py, cls, holder);
  tensor_fields *t;
  if (SHIM_UNLIKELY(obj == NULL)) return NULL;
  t = fields(obj);
  t->dl = shim_record_tensor(r, &t->flags, &t->major, &t->minor);
  t->export_owner = shim_record_export_holder(py, holder, r);
  return obj;
}

void *shim_tensor_new(const shim_pyapi *py, void *cls, void *holder) {
  const shim_record *r = shim_holder_record(py, holder);
  if (SHIM_UNLIKELY(r == NULL)) {
    py->Py_DecRef(holder);
    shim_fail(DLPACKSHIM_ERR_TYPE,
              "dlpackshim: a Tensor's owner must be a capsule it consumed or a buffer export");
    return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
  }
  return shim_tensor_of_record(py, cls, holder, r);
}

/* The Tensor owning cap (taken), whose record is r, with keep beside it when
 * not NULL/None. */
static void *tensor_held(const shim_pyapi *py, void *cls, void *cap, const shim_record *r,
                         void *keep) {
  void *holder;
  if (SHIM_UNLIKELY(cap == NULL)) return NULL;
  holder = cap;
  if (keep != NULL && keep != py->Py_None) {
    holder = py->PyTuple_Pack(2, cap, keep);
    py->Py_DecRef(cap);
    if (SHIM_UNLIKELY(holder == NULL)) return NULL;
  }
  return shim_tensor_of_record(py, cls, holder, r);
}

void *shim_tensor_adopt(const shim_pyapi *py, void *cls, DLManagedTensorVersioned *m, void *keep,
                        int built) {
  const shim_record *r = NULL;
  void *cap = shim_owner_capsule(py, m, built, &r); /* takes m */
  return tensor_held(py, cls, cap, r, keep);
}

void *shim_tensor_view(const shim_pyapi *py, void *cls, const DLTensor *t, uint64_t flags,
                       void *keep) {
  const shim_record *r = NULL;
  void *cap = shim_layout_capsule(py, t, flags, &r);
  return tensor_held(py, cls, cap, r, keep);
}

int shim_tensor_type_check(const shim_pyapi *py, void *type) {
  if (SHIM_UNLIKELY(base_type == NULL)) return 0;
  return type == base_type || py->PyType_IsSubtype(type, base_type);
}

shim_tensor *shim_tensor_check(const shim_pyapi *py, void *obj) {
  if (SHIM_UNLIKELY(obj == NULL)) return NULL;
  return shim_tensor_type_check(py, shim_type_of(py, obj)) ? (shim_tensor *)obj : NULL;
}

const DLTensor *shim_tensor_parts(const shim_pyapi *py, shim_tensor *obj, void **holder,
                                  uint64_t *flags, void **stream) {
  const tensor_fields *t = fields(obj);
  if (t->owner == NULL || t->owner == py->Py_None) return NULL;
  *holder = t->owner;
  if (flags != NULL) *flags = t->flags;
  if (stream != NULL) *stream = t->stream;
  return t->dl;
}

void *shim_tensor_share(const shim_pyapi *py, void *cls, shim_tensor *src_obj) {
  const tensor_fields *src = fields(src_obj);
  tensor_fields *t;
  void *obj, *holder = src->owner;
  if (holder == NULL || holder == py->Py_None) return closed_error(py);
  py->Py_IncRef(holder);
  obj = tensor_alloc(py, cls, holder);
  if (obj == NULL) return NULL;
  t = fields(obj);
  t->dl = src->dl; /* the same record's snapshot: the shared holder keeps it */
  t->export_owner = src->export_owner;
  t->major = src->major;
  t->minor = src->minor;
  t->flags = src->flags & ~(uint64_t)DLPACKSHIM_FLAG_IS_COPIED; /* shared: not an exclusive copy */
  if (src->stream != NULL && src->stream != py->Py_None) {
    py->Py_IncRef(src->stream);
    t->stream = src->stream; /* the data is ready on the same stream */
  }
  return obj;
}
