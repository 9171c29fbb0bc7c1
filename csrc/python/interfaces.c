/*
 * interfaces.c - the imports that are not DLPack, each rule once: the buffer
 * protocol (PEP 3118 formats) and NumPy's __array_interface__ (v3), zero
 * copy. from_dlpack's hot path (pyconsume.c) and the package's first sight
 * of a type (dlpackshim/_consume.py, through the builtins _import_buffer and
 * _import_array_interface) call the same functions, so a cached type and a
 * new one give the same answer. The layout part of an interface dict (shape,
 * strides, typestr, descr) is also the package's __cuda_array_interface__
 * reader (_interface_layout).
 *
 * Errors, as the array API standard names them: a field of the wrong Python
 * type is a TypeError, a value out of range a ValueError, something DLPack
 * cannot describe (a format, a byte order, a mask) a BufferError. Anything
 * raised by the object itself (a property, __index__) propagates unchanged.
 */
#include "binding.h"

#include <stdio.h>
#include <stdlib.h>

enum { SMALL_NDIM = 16 };

/* A layout read from Python values: shape and strides in elements (strides
 * NULL: compact row-major), storage for up to SMALL_NDIM axes inline. */
typedef struct {
  int32_t ndim;
  int64_t *shape, *strides;
  uint8_t code, bits;
  int64_t small[2 * SMALL_NDIM];
} layout;

static void layout_free(layout *l) {
  if (l->shape != NULL && l->shape != l->small) free(l->shape);
  l->shape = l->strides = NULL;
}

/* A CPU DLTensor of one-lane elements at data with l's shape and strides. */
static DLTensor view_of(void *data, const layout *l, uint8_t code, uint8_t bits) {
  DLTensor t;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = l->ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = l->shape;
  t.strides = l->strides;
  t.byte_offset = 0;
  return t;
}

/* Room for ndim axes (shape and strides). -1 with an exception. */
static int layout_alloc(const shim_pyapi *py, layout *l, ptrdiff_t ndim, const char *what) {
  if (ndim > DLPACKSHIM_MAX_NDIM) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: %td dimensions (at most %d)", what,
                 (ptrdiff_t)ndim, (int)DLPACKSHIM_MAX_NDIM);
    return -1;
  }
  l->ndim = (int32_t)ndim;
  l->shape = ndim <= SMALL_NDIM ? l->small : (int64_t *)malloc(2 * (size_t)ndim * sizeof(int64_t));
  if (l->shape == NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
    return -1;
  }
  l->strides = NULL;
  return 0;
}

/* obj as an exact int (an int, or anything with __index__): a new
 * reference, or NULL with an exception (TypeError naming `what`). */
static void *as_index(const shim_pyapi *py, void *obj, const char *what) {
  void *index;
  if (shim_is_exact(py, obj, py->PyLong_Type)) {
    py->Py_IncRef(obj);
    return obj;
  }
  index = py->PyNumber_Index(obj);
  if (index == NULL && py->PyErr_ExceptionMatches(*py->PyExc_TypeError)) {
    py->PyErr_Clear();
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s must be an int", what);
  }
  return index;
}

/* An int of Python as int64: TypeError for anything else, ValueError when
 * it does not fit. -1 with an exception. */
static int as_int64(const shim_pyapi *py, void *obj, int64_t *out, const char *what) {
  void *index = as_index(py, obj, what);
  long long v;
  if (index == NULL) return -1;
  v = py->PyLong_AsLongLong(index);
  py->Py_DecRef(index);
  if (v == -1 && py->PyErr_Occurred() != NULL) {
    if (py->PyErr_ExceptionMatches(*py->PyExc_OverflowError)) {
      py->PyErr_Clear();
      shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s is out of range (int64)", what);
    }
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

/* A tuple (or subclass) of n ints into a[0..n); its items are named
 * "what field[i]" in errors (formatted only then: this runs on every import). */
static int int64_tuple(const shim_pyapi *py, void *tuple, int64_t *a, ptrdiff_t n,
                       const char *what, const char *field) {
  char item[96];
  void *v;
  ptrdiff_t i;
  for (i = 0; i < n; i++) {
    v = py->PyTuple_GetItem(tuple, i);
    if (SHIM_LIKELY(shim_is_exact(py, v, py->PyLong_Type))) {
      long long x = py->PyLong_AsLongLong(v);
      if (SHIM_LIKELY(x != -1 || py->PyErr_Occurred() == NULL)) {
        a[i] = (int64_t)x;
        continue;
      }
      py->PyErr_Clear(); /* out of range: as_int64 says so below */
    }
    snprintf(item, sizeof(item), "%s %s[%td]", what, field, i);
    if (as_int64(py, v, &a[i], item) != 0) return -1;
  }
  return 0;
}

/* Byte strides -> element strides (DLPack counts elements). */
static int element_strides(const shim_pyapi *py, int64_t *strides, int32_t ndim, int64_t itemsize,
                           const char *what) {
  int32_t i;
  if (itemsize == 1) return 0; /* bytes: nothing to divide (most buffers) */
  for (i = 0; i < ndim; i++) {
    if (strides[i] % itemsize != 0) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: stride %lld bytes is not a multiple of the item size %lld; DLPack "
                   "counts strides in elements",
                   what, (long long)strides[i], (long long)itemsize);
      return -1;
    }
    strides[i] /= itemsize;
  }
  return 0;
}

/* ---- the buffer protocol ------------------------------------------------ */

/* A PEP 3118 format of one native-order scalar -> DLPack code (the width is
 * the itemsize: ctypes exports c_long as "<l" of 8 bytes). -1 with a
 * BufferError for anything else. */
static int format_code(const shim_pyapi *py, const char *fmt, ptrdiff_t itemsize) {
  const char *f = fmt;
  int code = -1;
  if (f == NULL) return kDLUInt; /* no format: unsigned bytes ("B") */
  if (*f == '@' || *f == '=') {
    f++;
  } else if (*f == '<' || *f == '>' || *f == '!') {
    if (*f != (SHIM_LITTLE_ENDIAN ? '<' : '>')) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "buffer format '%s' is %s-endian; DLPack data is in native byte order", fmt,
                   *f == '<' ? "little" : "big");
      return -1;
    }
    f++;
  }
  if (f[0] != '\0' && f[1] == '\0') {
    switch (f[0]) {
      case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': code = kDLInt; break;
      case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
      case 'c': code = kDLUInt; break; /* a char: one byte of data */
      case 'e': case 'f': case 'd': code = kDLFloat; break;
      case '?': code = kDLBool; break;
      default: break;
    }
  } else if (f[0] == 'Z' && (f[1] == 'f' || f[1] == 'd') && f[2] == '\0') {
    code = kDLComplex;
  }
  if (code < 0 || itemsize <= 0 || itemsize > 31) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "buffer format '%s' is not a supported scalar type (one of the struct codes "
                 "b B h H i I l L q Q n N c e f d ? Zf Zd, in native byte order)", fmt);
    return -1;
  }
  if (code == kDLBool && itemsize != 1) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "buffer format '%s': a bool of %td bytes", fmt,
                 (ptrdiff_t)itemsize);
    return -1;
  }
  return code;
}

void *shim_buffer_tensor(const shim_pyapi *py, void *cls, void *x) {
  const shim_py_buffer *view;
  shim_record *r = NULL;
  layout l = {0};
  DLTensor dl;
  void *holder;
  int code, i;
  /* The holder keeps x's export (bufholder.c): bytearray cannot resize and
   * mmap cannot close under the Tensor; the garbage collector sees x. */
  holder = shim_bufholder_new(py, x, SHIM_PYBUF_STRIDES | SHIM_PYBUF_FORMAT, &view);
  if (holder == NULL) return NULL;
  if (view->suboffsets != NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "buffers with sub-offsets (PIL-style) cannot be described by DLPack");
    goto done;
  }
  if (view->ndim < 0 || (view->ndim > 0 && view->shape == NULL)) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "the buffer's exporter gave no shape for %d dimensions", view->ndim);
    goto done;
  }
  if ((code = format_code(py, view->format, view->itemsize)) < 0) goto done;
  if (layout_alloc(py, &l, view->ndim, "buffer") != 0) goto done;
  for (i = 0; i < view->ndim; i++) l.shape[i] = view->shape[i];
  if (view->strides != NULL) { /* NULL (ctypes): C-contiguous, as DLPack's NULL */
    l.strides = l.shape + l.ndim;
    for (i = 0; i < view->ndim; i++) l.strides[i] = view->strides[i];
    if (element_strides(py, l.strides, l.ndim, view->itemsize, "buffer") != 0) goto done;
  }
  dl = view_of(view->buf, &l, (uint8_t)code, (uint8_t)(view->itemsize * 8));
  r = shim_record_new_layout(py, &dl, view->readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0);
done:
  layout_free(&l);
  if (r == NULL) {
    py->Py_DecRef(holder);
    return NULL;
  }
  shim_bufholder_set_record(py, holder, r);
  return shim_tensor_of_record(py, cls, holder, r); /* takes the holder */
}

/* ---- __array_interface__ ------------------------------------------------- */

/* An interface typestr ("<f8", "|u1", "=i4", "|b1") -> code and bits. */
static int typestr_dtype(const shim_pyapi *py, void *typestr, uint8_t *code, uint8_t *bits,
                         const char *what) {
  const char *s;
  ptrdiff_t n, i;
  long nbytes = 0;
  int native;
  if (typestr == NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s needs a 'typestr'", what);
    return -1;
  }
  if (!shim_is_instance(py, typestr, py->PyUnicode_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'typestr' must be a str", what);
    return -1;
  }
  if ((s = py->PyUnicode_AsUTF8AndSize(typestr, &n)) == NULL) return -1;
  /* The grammar: a byte order, a kind letter, a size in ASCII digits. A
   * string that is not one is a TypeError (as NumPy says); a kind or size
   * DLPack has no type for is a BufferError. */
  for (i = 2; i < n && i < 6; i++) {
    if (s[i] < '0' || s[i] > '9') break;
    nbytes = nbytes * 10 + (s[i] - '0');
  }
  if (n < 3 || i != n || !(s[0] == '|' || s[0] == '<' || s[0] == '>' || s[0] == '=') ||
      !((s[1] >= 'a' && s[1] <= 'z') || (s[1] >= 'A' && s[1] <= 'Z'))) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s typestr '%s' is not a typestr (such as '<f8')",
                 what, s);
    return -1;
  }
  switch (s[1]) {
    case 'i': *code = kDLInt; break;
    case 'u': *code = kDLUInt; break;
    case 'f': *code = kDLFloat; break;
    case 'c': *code = kDLComplex; break;
    case 'b': *code = kDLBool; break;
    default: i = -1; break;
  }
  if (i < 0 || nbytes <= 0 || nbytes > 31 || (*code == kDLBool && nbytes != 1)) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "%s typestr '%s': DLPack has no type for it (kinds b i u f c, 1 to 31 bytes)",
                 what, s);
    return -1;
  }
  native = s[0] == '|' || s[0] == '=' || s[0] == (SHIM_LITTLE_ENDIAN ? '<' : '>');
  if (!native && !(nbytes == 1 && (s[0] == '<' || s[0] == '>'))) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "%s typestr '%s' is not in native byte order (DLPack data is)", what, s);
    return -1;
  }
  *bits = (uint8_t)(nbytes * 8);
  return 0;
}

/* The layout of an interface dict: shape, strides (bytes -> elements),
 * typestr, descr. -1 with an exception. */
static int interface_layout(const shim_pyapi *py, void *iface, layout *l, const char *what) {
  void *shape, *strides, *descr;
  ptrdiff_t ndim;
  shape = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_SHAPE));
  if (shape == NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s needs a 'shape' (a tuple of ints)", what);
    return -1;
  }
  if (!shim_is_instance(py, shape, py->PyTuple_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'shape' must be a tuple of ints", what);
    return -1;
  }
  if (typestr_dtype(py, py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_TYPESTR)), &l->code,
                    &l->bits, what) != 0)
    return -1;
  descr = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_DESCR));
  if (descr != NULL && descr != py->Py_None) {
    if (!shim_is_instance(py, descr, py->PyList_Type)) {
      shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'descr' must be a list", what);
      return -1;
    }
    if (py->PyList_Size(descr) > 1) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: structured dtypes (a 'descr' of several fields) are not supported", what);
      return -1;
    }
  }
  ndim = py->PyTuple_Size(shape);
  if (layout_alloc(py, l, ndim, what) != 0) return -1;
  if (int64_tuple(py, shape, l->shape, ndim, what, "'shape'") != 0) return -1;
  strides = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_STRIDES));
  if (strides == NULL || strides == py->Py_None) return 0;
  if (!shim_is_instance(py, strides, py->PyTuple_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'strides' must be None or a tuple of ints", what);
    return -1;
  }
  if (py->PyTuple_Size(strides) != ndim) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: %td strides for %td dimensions", what,
                 (ptrdiff_t)py->PyTuple_Size(strides), (ptrdiff_t)ndim);
    return -1;
  }
  l->strides = l->shape + ndim;
  if (int64_tuple(py, strides, l->strides, ndim, what, "'strides'") != 0) return -1;
  return element_strides(py, l->strides, l->ndim, l->bits / 8, what);
}

/* The interface dict of x, checked as a v3 dict without a mask: a new
 * reference, or NULL with an exception. */
static void *interface_dict(const shim_pyapi *py, void *x, const char *what) {
  void *iface, *v;
  int64_t version;
  iface = py->PyObject_GetAttr(x, shim_py_str(py, SHIM_STR_ARRAY_INTERFACE));
  if (iface == NULL) return NULL;
  if (!shim_is_instance(py, iface, py->PyDict_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s is not a dict", what);
    goto fail;
  }
  v = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_VERSION));
  if (v != NULL) {
    if (as_int64(py, v, &version, "__array_interface__ 'version'") != 0) {
      if (!py->PyErr_ExceptionMatches(*py->PyExc_ValueError)) goto fail;
      py->PyErr_Clear();
      version = -1; /* out of range: not 3 */
    }
    if (version != 3) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: dlpackshim reads version 3", what);
      goto fail;
    }
  }
  v = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_MASK));
  if (v != NULL && v != py->Py_None) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "%s: masked arrays are not supported (DLPack has no mask)", what);
    goto fail;
  }
  return iface;
fail:
  py->Py_DecRef(iface);
  return NULL;
}

/* data = (address, readonly): the address as an unsigned pointer value. */
static int data_address(const shim_pyapi *py, void *data, uintptr_t *address, int *readonly,
                        const char *what) {
  void *index;
  unsigned long long v;
  if (py->PyTuple_Size(data) != 2) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: 'data' must be (address, readonly)", what);
    return -1;
  }
  index = as_index(py, py->PyTuple_GetItem(data, 0), "__array_interface__: the address in 'data'");
  if (index == NULL) return -1;
  v = py->PyLong_AsUnsignedLongLong(index);
  py->Py_DecRef(index);
  if (v == (unsigned long long)-1 && py->PyErr_Occurred() != NULL) {
    if (!py->PyErr_ExceptionMatches(*py->PyExc_OverflowError)) return -1;
    py->PyErr_Clear();
    shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                 "%s: the address in 'data' is not a pointer value (0 to 2**64-1)", what);
    return -1;
  }
  if (v > (unsigned long long)UINTPTR_MAX) {
    shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s: address out of range", what);
    return -1;
  }
  *address = (uintptr_t)v;
  if ((*readonly = py->PyObject_IsTrue(py->PyTuple_GetItem(data, 1))) < 0) return -1;
  return 0;
}

void *shim_array_interface_tensor(const shim_pyapi *py, void *cls, void *x) {
  static const char what[] = "__array_interface__";
  const shim_py_buffer *view = NULL;
  shim_record *r;
  layout l = {0};
  DLTensor dl;
  uint64_t flags;
  void *iface, *data, *exporter = x, *holder = NULL, *t = NULL, *offset_obj;
  uintptr_t address = 0;
  int64_t offset = 0, lo, hi;
  int readonly = 0, st;
  if ((iface = interface_dict(py, x, what)) == NULL) return NULL;
  if (interface_layout(py, iface, &l, what) != 0) goto done;
  data = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_DATA));
  if (data != NULL && shim_is_instance(py, data, py->PyTuple_Type)) {
    if (data_address(py, data, &address, &readonly, what) != 0) goto done;
  } else {
    /* Memory shared through a buffer object (data, or x itself when data is
     * None or absent), `offset` bytes in: its export is held (bufholder.c). */
    if (data != NULL && data != py->Py_None) exporter = data;
    holder = shim_bufholder_new(py, exporter, SHIM_PYBUF_STRIDES, &view);
    if (holder == NULL) goto done;
    if (!py->PyBuffer_IsContiguous(view, 'A')) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: 'data' is a non-contiguous buffer; its extent is unknown", what);
      goto done;
    }
    offset_obj = py->PyDict_GetItem(iface, shim_py_str(py, SHIM_STR_OFFSET));
    if (offset_obj != NULL && offset_obj != py->Py_None &&
        as_int64(py, offset_obj, &offset, "__array_interface__ 'offset'") != 0)
      goto done;
    if (offset < 0 || offset > (int64_t)view->len) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: offset %lld lies outside the %td-byte buffer", what, (long long)offset,
                   (ptrdiff_t)view->len);
      goto done;
    }
    address = (uintptr_t)view->buf + (uintptr_t)offset;
    readonly = view->readonly;
  }
  dl = view_of((void *)address, &l, l.code, l.bits);
  flags = readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0;
  if ((st = dlpackshim_tensor_validate(&dl, flags)) != 0) {
    shim_py_raise(py, st);
    goto done;
  }
  if (holder == NULL) { /* an address: x keeps the memory valid */
    t = shim_tensor_view(py, cls, &dl, flags, x);
    goto done;
  }
  /* every element addressed must lie inside the buffer */
  if (dlpackshim_tensor_byte_span(&dl, flags, &lo, &hi) != 0 ||
      (hi > lo && (offset + lo < 0 || offset + hi > (int64_t)view->len))) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "%s: shape and strides from offset %lld address bytes outside the %td-byte "
                 "buffer", what, (long long)offset, (ptrdiff_t)view->len);
    goto done;
  }
  if ((r = shim_record_new_layout(py, &dl, flags)) == NULL) goto done;
  shim_bufholder_set_record(py, holder, r);
  if (exporter != x) { /* x is kept too, as it is with an address: (holder, x) */
    void *pair = py->PyTuple_Pack(2, holder, x);
    if (pair == NULL) goto done;
    py->Py_DecRef(holder);
    holder = pair;
  }
  t = shim_tensor_of_record(py, cls, holder, r); /* takes the holder */
  holder = NULL;
done:
  layout_free(&l);
  if (holder != NULL) py->Py_DecRef(holder);
  py->Py_DecRef(iface);
  return t;
}

/* ---- builtins: the package's first sight of a type, the CUDA interface --- */

static void *import_buffer(void *cls, void *x) { return shim_buffer_tensor(shim_py_bound(), cls, x); }

static void *import_array_interface(void *cls, void *x) {
  return shim_array_interface_tensor(shim_py_bound(), cls, x);
}

/* A tuple of n int64 values (new reference). */
static void *int64_tuple_new(const shim_pyapi *py, const int64_t *a, int32_t n) {
  void *tuple = py->PyTuple_New(n), *v;
  int32_t i;
  if (tuple == NULL) return NULL;
  for (i = 0; i < n; i++) {
    if ((v = py->PyLong_FromLongLong(a[i])) == NULL) {
      py->Py_DecRef(tuple);
      return NULL;
    }
    py->PyTuple_SetItem(tuple, i, v);
  }
  return tuple;
}

/* _interface_layout(iface, what) -> (shape, strides or None, code, bits). */
static void *interface_layout_builtin(void *cls, void *const *args, ptrdiff_t nargs) {
  const shim_pyapi *py = shim_py_bound();
  layout l = {0};
  const char *what;
  void *shape = NULL, *strides = NULL, *code = NULL, *bits = NULL, *r = NULL;
  ptrdiff_t n;
  (void)cls;
  if (nargs != 2 || !shim_is_instance(py, args[0], py->PyDict_Type))
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "_interface_layout(iface: dict, what: str)");
  if ((what = py->PyUnicode_AsUTF8AndSize(args[1], &n)) == NULL) return NULL;
  if (interface_layout(py, args[0], &l, what) == 0 &&
      (shape = int64_tuple_new(py, l.shape, l.ndim)) != NULL &&
      (strides = l.strides != NULL ? int64_tuple_new(py, l.strides, l.ndim) : py->Py_None) != NULL &&
      (code = py->PyLong_FromLongLong(l.code)) != NULL &&
      (bits = py->PyLong_FromLongLong(l.bits)) != NULL)
    r = py->PyTuple_Pack(4, shape, strides, code, bits);
  if (shape != NULL) py->Py_DecRef(shape);
  if (strides != NULL && strides != py->Py_None) py->Py_DecRef(strides);
  if (code != NULL) py->Py_DecRef(code);
  if (bits != NULL) py->Py_DecRef(bits);
  layout_free(&l);
  return r;
}

static const shim_method_def interface_defs[] = {
    {"_import_buffer", (void *)import_buffer, SHIM_METH_O,
     "_import_buffer(x) -> Tensor: x through the buffer protocol, zero copy."},
    {"_import_array_interface", (void *)import_array_interface, SHIM_METH_O,
     "_import_array_interface(x) -> Tensor: x through its __array_interface__ (v3), zero copy."},
    {"_interface_layout", (void *)interface_layout_builtin, SHIM_METH_FASTCALL,
     "_interface_layout(iface, what) -> (shape, strides or None, code, bits): an interface "
     "dict's layout, strides in elements."},
};

const shim_method_def *shim_interface_defs(int *count) {
  *count = (int)(sizeof(interface_defs) / sizeof(interface_defs[0]));
  return interface_defs;
}
