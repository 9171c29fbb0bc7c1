/*
 * buffer.c - the data address behind a Python buffer-protocol object.
 *
 * Pure Python can read a buffer's format, shape, strides and read-only flag
 * through memoryview, but not its address (ctypes and cffi only give it for
 * contiguous, or writable, buffers). This asks the exporter for a strided
 * read-only view (PEP 3118: PyBUF_STRIDES, no PyBUF_WRITABLE, so read-only
 * objects are accepted, and no PyBUF_INDIRECT, so PIL-style suboffsets are
 * refused) and returns view.buf, the address of the first element (which is
 * not the lowest address when a stride is negative).
 *
 * The view is released before returning: the caller must hold an export of
 * its own (a memoryview) for as long as it uses the address.
 */
#include "binding.h"

#include <stddef.h>


DLPACKSHIM_API int dlpackshim__buffer_address(void *obj, void **address_out) {
  const shim_pyapi *py;
  shim_py_buffer view;
  int gil, st = DLPACKSHIM_OK;
  if (address_out == NULL)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "buffer_address: address_out is NULL");
  *address_out = NULL;
  if (obj == NULL) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "buffer_address: obj is NULL");
  py = shim_py();
  if (py == NULL) return DLPACKSHIM_ERR_NO_PYTHON;
  gil = shim_gil_ensure(py);
  if (py->PyObject_GetBuffer(obj, &view, SHIM_PYBUF_STRIDES) != 0) {
    /* Say why in our own error (the caller may be cffi, which cannot see a
     * Python exception set here), and leave no exception pending. */
    py->PyErr_Clear();
    st = shim_fail(DLPACKSHIM_ERR_TYPE,
                   "object does not export a strided buffer (PEP 3118 PyBUF_STRIDES)");
  } else {
    *address_out = view.buf;
    py->PyBuffer_Release(&view);
  }
  shim_gil_release(py, gil);
  return st;
}
