/*
 * interfaces.c - the imports that are not DLPack, each rule once: the buffer
 * protocol (PEP 3118 formats), NumPy's __array_interface__ (v3) and Numba's
 * __cuda_array_interface__ (v2, v3), zero copy.
 *
 * Errors, as the array API standard names them: a field of the wrong Python
 * type is a TypeError, a value out of range a ValueError, something DLPack
 * cannot describe (a format, a byte order, a mask) a BufferError. Anything
 * raised by the object itself (a property, __index__) propagates unchanged.
 * The interface dict belongs to the object and __index__ may change it: every
 * value read from it is held (a strong reference) while it is used.
 */
#include "binding.h"

#include <stdio.h>
#include <stdlib.h>

#define SHIM_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

enum { SMALL_NDIM = 16 };

/* A layout read from Python values: shape and strides in elements (strides
 * NULL: compact row-major), storage for up to SMALL_NDIM axes inline. Made
 * empty by LAYOUT_EMPTY, not by zeroing: clearing small[] took ~8 ns of
 * every buffer import. */
typedef struct {
  int32_t ndim;
  int64_t *shape, *strides;
  uint8_t code, bits;
  int64_t small[2 * SMALL_NDIM];
} layout;

#define LAYOUT_EMPTY(l) ((l).shape = (l).strides = NULL)

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
  if (ndim > DLPACKSHIM_MAX_NDIM)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: %td dimensions (at most %d)", what,
                       (ptrdiff_t)ndim, (int)DLPACKSHIM_MAX_NDIM);
  l->ndim = (int32_t)ndim;
  l->shape = ndim <= SMALL_NDIM ? l->small : (int64_t *)malloc(2 * (size_t)ndim * sizeof(int64_t));
  if (l->shape == NULL)
    return shim_py_err(py, DLPACKSHIM_ERR_NO_MEMORY, "out of memory");
  l->strides = NULL;
  return 0;
}

/* obj as an exact int (an int, or anything but a bool with __index__): a new
 * reference, or NULL with an exception (TypeError naming `what` `field`;
 * formatted only on failure: this runs on every import). */
static void *as_index(const shim_pyapi *py, void *obj, const char *what, const char *field) {
  void *index;
  if (shim_is_exact(py, obj, py->PyLong_Type)) {
    py->Py_IncRef(obj);
    return obj;
  }
  if (shim_type_of(py, obj) == py->PyBool_Type) /* NumPy: "an integer is required" */
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s%s%s must be an int, not a bool", what,
                        *field ? " " : "", field);
  index = py->PyNumber_Index(obj);
  if (index == NULL && py->PyErr_ExceptionMatches(*py->PyExc_TypeError)) {
    py->PyErr_Clear();
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s%s%s must be an int", what, *field ? " " : "", field);
  }
  return index;
}

/* An int of Python as int64: TypeError for anything else, ValueError when
 * it does not fit. -1 with an exception. */
static int as_int64(const shim_pyapi *py, void *obj, int64_t *out, const char *what,
                    const char *field) {
  void *index = as_index(py, obj, what, field);
  long long v;
  if (index == NULL) return -1;
  v = py->PyLong_AsLongLong(index);
  py->Py_DecRef(index);
  if (v == -1 && py->PyErr_Occurred() != NULL) {
    if (py->PyErr_ExceptionMatches(*py->PyExc_OverflowError)) {
      py->PyErr_Clear();
      shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s%s%s is out of range (int64)", what,
                   *field ? " " : "", field);
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
    if (as_int64(py, v, &a[i], item, "") != 0) return -1;
  }
  return 0;
}

/* Byte strides -> element strides (DLPack counts elements). */
static int element_strides(const shim_pyapi *py, int64_t *strides, int32_t ndim, int64_t itemsize,
                           const char *what) {
  int32_t i;
  if (itemsize == 1) return 0; /* bytes: nothing to divide (most buffers) */
  for (i = 0; i < ndim; i++) {
    if (strides[i] % itemsize != 0)
      return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                         "%s: stride %lld bytes is not a multiple of the item size %lld; DLPack "
                         "counts strides in elements",
                         what, (long long)strides[i], (long long)itemsize);
    strides[i] /= itemsize;
  }
  return 0;
}

/* ---- the buffer protocol ------------------------------------------------ */

/* A PEP 3118 format of one native-order scalar -> DLPack code. Each code
 * has its size (a ctypes Union is exported as "B" of the union's size: not
 * a wider integer); ctypes exports c_long and c_ulong as "<l" and "<L" of
 * the native size, where the standard one is 4. -1 with a BufferError for
 * anything else. */
static int format_code(const shim_pyapi *py, const char *fmt, ptrdiff_t itemsize) {
  const char *f = fmt;
  int code = -1;
  ptrdiff_t size = 0, other = 0;
  if (f == NULL) return itemsize == 1 ? kDLUInt : /* no format: unsigned bytes ("B") */
      shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "a buffer of %td-byte items with no format",
                  itemsize);
  if (*f == '@' || *f == '=') {
    f++;
  } else if (*f == '<' || *f == '>' || *f == '!') {
    if (*f != (SHIM_LITTLE_ENDIAN ? '<' : '>'))
      return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                         "buffer format '%s' is %s-endian; DLPack data is in native byte order", fmt,
                         *f == '<' ? "little" : "big");
    f++;
  }
  if (f[0] != '\0' && f[1] == '\0') {
    switch (f[0]) {
      case 'b': code = kDLInt; size = 1; break;
      case 'h': code = kDLInt; size = 2; break;
      case 'i': code = kDLInt; size = sizeof(int); break;
      case 'l': code = kDLInt; size = sizeof(long); other = 4; break;
      case 'q': code = kDLInt; size = 8; break;
      case 'n': code = kDLInt; size = sizeof(ptrdiff_t); break;
      case 'B': case 'c': code = kDLUInt; size = 1; break; /* a char: one byte of data */
      case 'H': code = kDLUInt; size = 2; break;
      case 'I': code = kDLUInt; size = sizeof(int); break;
      case 'L': code = kDLUInt; size = sizeof(long); other = 4; break;
      case 'Q': code = kDLUInt; size = 8; break;
      case 'N': code = kDLUInt; size = sizeof(size_t); break;
      case 'e': code = kDLFloat; size = 2; break;
      case 'f': code = kDLFloat; size = 4; break;
      case 'd': code = kDLFloat; size = 8; break;
      case '?': code = kDLBool; size = 1; break;
      default: break;
    }
  } else if (f[0] == 'Z' && (f[1] == 'f' || f[1] == 'd') && f[2] == '\0') {
    code = kDLComplex;
    size = f[1] == 'f' ? 8 : 16;
  }
  if (code < 0)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "buffer format '%s' is not a supported scalar type (one of the struct codes "
                       "b B h H i I l L q Q n N c e f d ? Zf Zd, in native byte order)", fmt);
  if (itemsize != size && itemsize != other)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "buffer format '%s' has %td-byte items where its code takes %td (a ctypes "
                       "Union or a record is not a scalar type)", fmt, itemsize, size);
  return code;
}

void *shim_buffer_tensor(const shim_pyapi *py, void *x) {
  shim_py_buffer view;
  layout l;
  DLTensor dl;
  void *holder = NULL;
  int code, i;
  /* The holder keeps x's export: a bytearray cannot resize, an mmap cannot
   * close under the Tensor; the garbage collector sees x through it. */
  LAYOUT_EMPTY(l);
  if (py->PyObject_GetBuffer(x, &view, SHIM_PYBUF_STRIDES | SHIM_PYBUF_FORMAT) != 0) return NULL;
  if (view.suboffsets != NULL) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "buffers with sub-offsets (PIL-style) cannot be described by DLPack");
  } else if (view.ndim < 0 || (view.ndim > 0 && view.shape == NULL)) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "the buffer's exporter gave no shape for %d dimensions", view.ndim);
  } else if ((code = format_code(py, view.format, view.itemsize)) >= 0 &&
             layout_alloc(py, &l, view.ndim, "buffer") == 0) {
    for (i = 0; i < view.ndim; i++) l.shape[i] = view.shape[i];
    if (view.strides != NULL) { /* NULL (ctypes): C-contiguous, as DLPack's NULL */
      l.strides = l.shape + l.ndim;
      for (i = 0; i < view.ndim; i++) l.strides[i] = view.strides[i];
    }
    if (l.strides == NULL || element_strides(py, l.strides, l.ndim, view.itemsize, "buffer") == 0) {
      dl = view_of(view.buf, &l, (uint8_t)code, (uint8_t)(view.itemsize * 8));
      holder = shim_holder_view(py, &dl, view.readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0, NULL, &view);
      layout_free(&l);
      if (holder == NULL) return NULL; /* the view was released */
      return shim_tensor_new(py, holder, view.readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0, NULL);
    }
  }
  layout_free(&l);
  py->PyBuffer_Release(&view);
  return NULL;
}

/* ---- __array_interface__ and __cuda_array_interface__ ---------------------- */

/* iface[key] as a new reference, or NULL (missing, or an exception: *error). */
static void *item(const shim_pyapi *py, void *iface, int key, int *error) {
  void *v = py->PyDict_GetItemWithError(iface, shim_str(key));
  if (v == NULL) *error |= py->PyErr_Occurred() != NULL;
  else py->Py_IncRef(v);
  return v;
}

/* An interface typestr ("<f8", "|u1", "=i4", "|b1") -> code and bits. */
static int typestr_dtype(const shim_pyapi *py, void *typestr, uint8_t *code, uint8_t *bits,
                         const char *what) {
  const char *s;
  ptrdiff_t n, i;
  long nbytes = 0;
  int native;
  if (typestr == NULL)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s needs a 'typestr'", what);
  if (!shim_is_instance(py, typestr, py->PyUnicode_Type))
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "%s: 'typestr' must be a str", what);
  if ((s = py->PyUnicode_AsUTF8AndSize(typestr, &n)) == NULL) { /* lone surrogates */
    py->PyErr_Clear();
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "%s typestr is not a typestr (such as '<f8')", what);
  }
  if (memchr(s, '\0', (size_t)n) != NULL) /* the messages below would show it cut there */
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE,
                       "%s typestr holds a NUL character: not a typestr (such as '<f8')", what);
  /* The grammar: a byte order, a kind letter, a size in ASCII digits (and
   * for NumPy's datetimes, a unit: '<M8[s]'). A string that is not one is a
   * TypeError (as NumPy says); a kind or size DLPack has no type for is a
   * BufferError. */
  for (i = 2; i < n && i < 6; i++) {
    if (s[i] < '0' || s[i] > '9') break;
    nbytes = nbytes * 10 + (s[i] - '0');
  }
  if (i < n && s[i] == '[' && s[n - 1] == ']' && (s[1] == 'M' || s[1] == 'm')) i = n;
  if (n < 3 || i != n || !(s[0] == '|' || s[0] == '<' || s[0] == '>' || s[0] == '=') ||
      !((s[1] >= 'a' && s[1] <= 'z') || (s[1] >= 'A' && s[1] <= 'Z'))) {
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "%s typestr '%s' is not a typestr (such as '<f8')",
                       what, s);
  }
  switch (s[1]) {
    case 'i': *code = kDLInt; break;
    case 'u': *code = kDLUInt; break;
    case 'f': *code = kDLFloat; break;
    case 'c': *code = kDLComplex; break;
    case 'b': *code = kDLBool; break;
    default: i = -1; break;
  }
  if (i < 0 || nbytes <= 0 || nbytes > 31 || (*code == kDLBool && nbytes != 1))
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "%s typestr '%s': DLPack has no type for it (kinds b i u f c, 1 to 31 bytes)",
                       what, s);
  native = s[0] == '|' || s[0] == '=' || s[0] == (SHIM_LITTLE_ENDIAN ? '<' : '>');
  if (!native && !(nbytes == 1 && (s[0] == '<' || s[0] == '>')))
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                       "%s typestr '%s' is not in native byte order (DLPack data is)", what, s);
  *bits = (uint8_t)(nbytes * 8);
  return 0;
}

/* The layout of an interface dict: shape, strides (bytes -> elements),
 * typestr, descr. -1 with an exception. */
static int interface_layout(const shim_pyapi *py, void *iface, layout *l, const char *what) {
  int error = 0, st = -1;
  void *shape = item(py, iface, SHIM_STR_SHAPE, &error), *typestr = NULL, *descr = NULL,
       *strides = NULL;
  ptrdiff_t ndim;
  if (error) return -1;
  if (shape == NULL)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s needs a 'shape' (a tuple of ints)", what);
  if (!py->PyType_IsSubtype(shim_type_of(py, shape), py->PyTuple_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'shape' must be a tuple of ints", what);
    goto done;
  }
  typestr = item(py, iface, SHIM_STR_TYPESTR, &error);
  if (error || typestr_dtype(py, typestr, &l->code, &l->bits, what) != 0) goto done;
  descr = item(py, iface, SHIM_STR_DESCR, &error);
  if (error) goto done;
  if (descr != NULL && descr != py->Py_None) {
    if (!py->PyType_IsSubtype(shim_type_of(py, descr), py->PyList_Type)) {
      shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'descr' must be a list", what);
      goto done;
    }
    if (py->PyList_Size(descr) > 1) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: structured dtypes (a 'descr' of several fields) are not supported", what);
      goto done;
    }
  }
  /* The tuples are held: an item's __index__ may replace them in iface. */
  ndim = py->PyTuple_Size(shape);
  if (layout_alloc(py, l, ndim, what) != 0 || int64_tuple(py, shape, l->shape, ndim, what, "'shape'") != 0)
    goto done;
  strides = item(py, iface, SHIM_STR_STRIDES, &error);
  if (error) goto done;
  if (strides != NULL && strides != py->Py_None) {
    if (!py->PyType_IsSubtype(shim_type_of(py, strides), py->PyTuple_Type)) {
      shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s: 'strides' must be None or a tuple of ints", what);
      goto done;
    }
    if (py->PyTuple_Size(strides) != ndim) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: %td strides for %td dimensions", what,
                   (ptrdiff_t)py->PyTuple_Size(strides), (ptrdiff_t)ndim);
      goto done;
    }
    l->strides = l->shape + ndim;
    if (int64_tuple(py, strides, l->strides, ndim, what, "'strides'") != 0 ||
        element_strides(py, l->strides, l->ndim, l->bits / 8, what) != 0)
      goto done;
  }
  st = 0;
done:
  shim_drop(py, shape);
  shim_drop(py, typestr);
  shim_drop(py, descr);
  shim_drop(py, strides);
  return st;
}

/* The checks common to both interfaces: a dict, of a version this reads,
 * without a mask. -1 with an exception. */
static int check_interface(const shim_pyapi *py, void *iface, const char *what, int oldest,
                           int newest, int mask_status) {
  int error = 0, st = -1;
  int64_t version = -1;
  void *v;
  if (!py->PyType_IsSubtype(shim_type_of(py, iface), py->PyDict_Type))
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE, "%s is not a dict", what);
  v = item(py, iface, SHIM_STR_VERSION, &error);
  if (error) return -1;
  if (v == NULL && oldest < 3)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s has no 'version'", what);
  if (v != NULL && as_int64(py, v, &version, what, "'version'") != 0) {
    if (!py->PyErr_ExceptionMatches(*py->PyExc_ValueError)) goto done;
    py->PyErr_Clear(); /* out of range: not a version read here */
    version = -1;
  }
  if (v != NULL && (version < oldest || version > newest)) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s version: dlpackshim reads versions %d to %d",
                 what, oldest, newest);
    goto done;
  }
  shim_drop(py, v);
  v = item(py, iface, SHIM_STR_MASK, &error);
  if (error) return -1;
  if (v != NULL && v != py->Py_None) {
    shim_py_fail(py, mask_status, "%s: masked arrays are not supported (DLPack has no mask)", what);
    goto done;
  }
  st = 0;
done:
  shim_drop(py, v);
  return st;
}

/* data = (address, readonly): a pointer value (0 to 2**64-1: ValueError
 * otherwise) and a truth value. -1 with an exception. */
static int data_address(const shim_pyapi *py, void *data, uintptr_t *address, int *readonly,
                        const char *what) {
  void *index;
  unsigned long long v;
  if (py->PyTuple_Size(data) != 2)
    return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: 'data' must be (address, readonly)", what);
  if ((index = as_index(py, py->PyTuple_GetItem(data, 0), what, "'data' address")) == NULL) return -1;
  v = py->PyLong_AsUnsignedLongLong(index);
  py->Py_DecRef(index);
  if (v == (unsigned long long)-1 && py->PyErr_Occurred() != NULL) {
    if (!py->PyErr_ExceptionMatches(*py->PyExc_OverflowError)) return -1;
    py->PyErr_Clear(); /* negative, or above 2**64 - 1 */
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "%s: the address in 'data' is not a pointer value (0 to 2**64-1)", what);
  }
  if (v > (unsigned long long)UINTPTR_MAX)
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s: address out of range", what);
  *address = (uintptr_t)v;
  return (*readonly = py->PyObject_IsTrue(py->PyTuple_GetItem(data, 1))) < 0 ? -1 : 0;
}

void *shim_array_interface_tensor(const shim_pyapi *py, void *x, void *iface) {
  static const char what[] = "__array_interface__";
  shim_py_buffer view;
  layout l;
  DLTensor dl;
  uint64_t flags = 0;
  void *data = NULL, *exporter = x, *holder = NULL, *offset_obj = NULL;
  uintptr_t address = 0;
  int64_t offset = 0, lo, hi;
  int readonly = 0, st, error = 0, have_view = 0;
  LAYOUT_EMPTY(l);
  if (check_interface(py, iface, what, 3, 3, DLPACKSHIM_ERR_UNSUPPORTED) != 0 ||
      interface_layout(py, iface, &l, what) != 0)
    goto done;
  data = item(py, iface, SHIM_STR_DATA, &error);
  if (error) goto done;
  if (data != NULL && py->PyType_IsSubtype(shim_type_of(py, data), py->PyTuple_Type)) {
    if (data_address(py, data, &address, &readonly, what) != 0) goto done;
  } else {
    /* Memory shared through a buffer object (data, or x itself when data is
     * None or absent), `offset` bytes in: its export is held. */
    if (data != NULL && data != py->Py_None) exporter = data;
    if (py->PyObject_GetBuffer(exporter, &view, SHIM_PYBUF_STRIDES) != 0) goto done;
    have_view = 1;
    if (!py->PyBuffer_IsContiguous(&view, 'A')) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                   "%s: 'data' is a non-contiguous buffer; its extent is unknown", what);
      goto done;
    }
    offset_obj = item(py, iface, SHIM_STR_OFFSET, &error);
    if (error || (offset_obj != NULL && offset_obj != py->Py_None &&
                  as_int64(py, offset_obj, &offset, "__array_interface__", "'offset'") != 0))
      goto done;
    if (offset < 0 || offset > (int64_t)view.len) {
      shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: offset %lld lies outside the %td-byte buffer",
                   what, (long long)offset, (ptrdiff_t)view.len);
      goto done;
    }
    address = (uintptr_t)view.buf + (uintptr_t)offset;
    readonly = view.readonly;
  }
  dl = view_of((void *)address, &l, l.code, l.bits);
  flags = readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0;
  if ((st = dlpackshim_tensor_validate(&dl, flags)) != 0) {
    shim_py_raise(py, st);
    goto done;
  }
  /* Every element addressed must lie inside a buffer (0 <= offset <= len:
   * compared so that no sum can overflow). */
  if (have_view && (dlpackshim_tensor_byte_span(&dl, flags, &lo, &hi) != 0 ||
                    (hi > lo && (lo < -offset || hi > (int64_t)view.len - offset)))) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED,
                 "%s: shape and strides from offset %lld address bytes outside the %td-byte buffer",
                 what, (long long)offset, (ptrdiff_t)view.len);
    goto done;
  }
  /* x keeps an address valid; a buffer's export keeps its memory, x too.
   * The view is the holder's from here, released even on failure. */
  holder = shim_holder_view(py, &dl, flags, x, have_view ? &view : NULL);
  have_view = 0;
done:
  if (have_view) py->PyBuffer_Release(&view);
  layout_free(&l);
  shim_drop(py, data);
  shim_drop(py, offset_obj);
  return holder != NULL ? shim_tensor_new(py, holder, flags, NULL) : NULL;
}

/* The DLPack device of __cuda_array_interface__ memory at ptr (the interface
 * does not carry it; CuPy and Numba ask the driver too): the runtime that
 * sees a GPU, CUDA first (CuPy and PyTorch on ROCm expose the interface as
 * well). A NULL pointer (empty arrays) and a process without a GPU runtime
 * give (kDLCUDA, 0): no GPU of this process can use the memory then. */
static int cuda_pointer_device(const shim_pyapi *py, uintptr_t ptr, DLDevice *dev) {
  static const int32_t runtimes[2] = {kDLCUDA, kDLROCM};
  int32_t type = kDLCUDA, id = 0;
  int count, st;
  dev->device_type = kDLCUDA;
  dev->device_id = 0;
  if (ptr == 0) return 0;
  for (int i = 0; i < 2; i++) {
    count = 0;
    if (dlpackshim_gpu_runtime_info(runtimes[i], NULL, NULL, &count) != 0 || count == 0) continue;
    if ((st = dlpackshim_pointer_device(runtimes[i], (const void *)ptr, &type, &id)) != 0)
      return shim_py_raise_err(py, st);
    if (type == kDLCPU)
      return shim_py_err(py, DLPACKSHIM_ERR_UNSUPPORTED,
                         "__cuda_array_interface__: 0x%llx is not %s memory (the runtime does not know it)",
                         (unsigned long long)ptr, i == 0 ? "CUDA" : "ROCm");
    dev->device_type = (DLDeviceType)type;
    dev->device_id = id;
    return 0;
  }
  return 0;
}

/* The interface's v3 stream: None, the data is ready; else the consumer's
 * stream (checked already; -1: no synchronisation) waits for it, with an
 * event (CuPy blocks the host instead; the interface allows both). */
static int honour_stream(const shim_pyapi *py, void *s, DLDevice dev, int64_t consumer) {
  int64_t producer;
  int st;
  if (s == NULL || s == py->Py_None) return 0;
  /* A wrong type is a TypeError, as for every other field. */
  if (shim_type_of(py, s) == py->PyBool_Type || !py->PyType_IsSubtype(shim_type_of(py, s), py->PyLong_Type))
    return shim_py_err(py, DLPACKSHIM_ERR_TYPE,
                       "__cuda_array_interface__ 'stream' must be None or an int (a stream handle)");
  if (as_int64(py, s, &producer, "__cuda_array_interface__", "'stream'") != 0) return -1;
  if (producer == 0)
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "__cuda_array_interface__ stream 0 is disallowed (ambiguous between the legacy "
                       "and per-thread default streams)");
  if (producer < 0)
    return shim_py_err(py, DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "__cuda_array_interface__ stream %lld is not a stream (None: the data is "
                       "ready; 1, 2: the default streams; else a handle)", (long long)producer);
  if (shim_gpu_family(dev.device_type) == &shim_hip_ops && (producer == 1 || producer == 2))
    producer = 0; /* HIP's default (device and pinned memory alike) */
  if (consumer == -1 || consumer == producer) return 0;
  if ((st = dlpackshim_stream_wait(dev.device_type, dev.device_id, producer, consumer)) != 0) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", dlpackshim_last_error());
    return shim_py_err(py, st, "__cuda_array_interface__: cannot make stream %lld wait for the producer's "
                       "stream %lld: %s", (long long)consumer, (long long)producer, msg);
  }
  return 0;
}

void *shim_cuda_interface_tensor(const shim_pyapi *py, void *x, void *iface, const shim_request *rq) {
  static const char what[] = "__cuda_array_interface__";
  layout l;
  DLTensor dl;
  DLDevice dev;
  uintptr_t address = 0;
  int readonly = 0, error = 0, st;
  int64_t consumer, version = 3;
  void *data = NULL, *stream = NULL, *v = NULL, *holder = NULL, *record = NULL, *t = NULL;
  LAYOUT_EMPTY(l);
  if (check_interface(py, iface, what, 2, 3, DLPACKSHIM_ERR_INVALID_ARGUMENT) != 0 ||
      interface_layout(py, iface, &l, what) != 0)
    goto done;
  data = item(py, iface, SHIM_STR_DATA, &error);
  if (error) goto done;
  if (data == NULL || !py->PyType_IsSubtype(shim_type_of(py, data), py->PyTuple_Type)) {
    shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s: 'data' must be (address, readonly)", what);
    goto done;
  }
  if (data_address(py, data, &address, &readonly, what) != 0 || cuda_pointer_device(py, address, &dev) != 0)
    goto done;
  if ((st = dlpackshim_stream_check(dev.device_type, rq->has_stream, rq->stream, &consumer)) != 0) {
    shim_py_raise(py, st);
    goto done;
  }
  /* The stream key exists from v3 on; v2 producers' data is ready. */
  v = item(py, iface, SHIM_STR_VERSION, &error);
  if (error || (v != NULL && as_int64(py, v, &version, what, "'version'") != 0)) goto done;
  stream = version >= 3 ? item(py, iface, SHIM_STR_STREAM, &error) : NULL;
  if (error || honour_stream(py, stream, dev, consumer) != 0) goto done;
  dl = view_of((void *)address, &l, l.code, l.bits);
  dl.device = dev;
  if ((holder = shim_holder_view(py, &dl, readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0, x, NULL)) == NULL ||
      shim_stream_to_record(py, dev, consumer, &record) != 0)
    goto done;
  t = shim_tensor_new(py, holder, readonly ? DLPACKSHIM_FLAG_READ_ONLY : 0, record);
  holder = NULL; /* taken */
done:
  layout_free(&l);
  shim_drop(py, data);
  shim_drop(py, stream);
  shim_drop(py, v);
  py->Py_DecRef(holder);
  py->Py_DecRef(record);
  return t;
}
