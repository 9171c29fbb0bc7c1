/*
 * test_nopython.c - the Python-capsule half of the API in a process with no
 * CPython at all: every call must fail cleanly with DLPACKSHIM_ERR_NO_PYTHON
 * (or do nothing, for the void ones) and never touch the "objects" it is
 * given. The capsule/owner arguments below are bogus addresses on purpose:
 * dereferencing one would crash the test.
 */
#define _GNU_SOURCE 1 /* RTLD_DEFAULT */
#include <dlfcn.h>

#include "check.h"

/* The Python package's private entry points (csrc/python/binding.h, not
 * dlpackshim.h): without CPython, NULL (or the status) and
 * DLPACKSHIM_ERR_NO_PYTHON as the last error. */
extern void *dlpackshim__py_base(void *dlpack_doc);
extern void *dlpackshim__py_tensor_class(void *cls);
extern void *dlpackshim__py_bind(void *config);
extern int dlpackshim__py_entry_points(void *out);

static int released;
static void count_release(void *owner) {
  (void)owner;
  released++;
}

int main(void) {
  /* Bogus "PyObject *" values: never valid memory. */
  void *const bogus = (void *)(intptr_t)0x10;
  void *const untouched = (void *)(intptr_t)0x5e5e0;
  int64_t shape[2] = {2, 3};
  double data[6] = {0, 1, 2, 3, 4, 5};
  DLManagedTensorVersioned *t = NULL;
  DLManagedTensor *lt = NULL;
  void *cap = untouched;
  const DLTensor *view = (const DLTensor *)untouched;
  uint32_t major = 77, minor = 77;
  uint64_t flags = 77;

  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL) {
    printf("test_nopython: CPython symbols are linked into this program; skipped\n");
    return 77;
  }

  CHECK_EQ(dlpackshim_python_available(), 0);
  /* Twice: the answer is cached, and must stay the same. */
  CHECK_EQ(dlpackshim_python_available(), 0);

  CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, NULL,
                                 NULL, &t));
  CHECK_OK(dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, NULL,
                                        NULL, &lt));
  REQUIRE(t != NULL && lt != NULL);

  /* Making a capsule: the status, the reason, and *capsule_out untouched. */
  CHECK_FAILS(dlpackshim_capsule_new(t, 1, &cap), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython is not running in this process");
  CHECK(cap == untouched);
  CHECK_FAILS(dlpackshim_capsule_new(lt, 0, &cap), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK(cap == untouched);
  /* Without CPython the answer is NO_PYTHON whatever the other arguments. */
  CHECK_FAILS(dlpackshim_capsule_new(t, 1, NULL), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK_FAILS(dlpackshim_capsule_new(NULL, 1, &cap), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK(cap == untouched);

  /* The package's private entry points: NULL (or the status), and the reason. */
  dlpackshim_clear_error();
  CHECK(dlpackshim__py_base(bogus) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");
  dlpackshim_clear_error();
  CHECK(dlpackshim__py_tensor_class(bogus) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  dlpackshim_clear_error();
  CHECK(dlpackshim__py_bind(bogus) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_FAILS(dlpackshim__py_entry_points(bogus), DLPACKSHIM_ERR_NO_PYTHON, "CPython");

  /* Consuming (what capsule_consume did, now capsule_import): the status,
   * the reason, and *tensor_out left as it was (never dangling). */
  CHECK_FAILS(dlpackshim_capsule_import(bogus, &view), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython is not running in this process");
  CHECK(view == (const DLTensor *)untouched);
  CHECK_FAILS(dlpackshim_capsule_import(bogus, NULL), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK_FAILS(dlpackshim_capsule_import(NULL, &view), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK(view == (const DLTensor *)untouched);

  /* What was owner_tensor + owner_info, now capsule_info: every output
   * untouched on failure. */
  CHECK_FAILS(dlpackshim_capsule_info(bogus, &view, &major, &minor, &flags),
              DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  CHECK(view == (const DLTensor *)untouched);
  CHECK_EQ(major, 77);
  CHECK_EQ(minor, 77);
  CHECK_EQ(flags, 77);
  CHECK_FAILS(dlpackshim_capsule_info(bogus, NULL, NULL, NULL, NULL), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython");
  CHECK_FAILS(dlpackshim_capsule_info(bogus, &view, NULL, NULL, NULL), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython");
  CHECK(view == (const DLTensor *)untouched);

  /* Reference counting: retain says why it did nothing; release is a
   * deleter's callback and just returns. */
  CHECK_FAILS(dlpackshim_py_retain(bogus), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  dlpackshim_py_release(bogus);
  CHECK_FAILS(dlpackshim_py_retain(NULL), DLPACKSHIM_ERR_INVALID_ARGUMENT, "NULL");
  dlpackshim_py_release(NULL);

  /* A tensor whose owner is released with dlpackshim_py_release can still be
   * freed in a process without Python (the release is a no-op). */
  {
    DLManagedTensorVersioned *owned = NULL;
    CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, bogus,
                                   dlpackshim_py_release, &owned));
    CHECK(owned != NULL);
    dlpackshim_tensor_free(owned);
  }

  /* The tensors still belong to us, and their deleters still work. */
  dlpackshim_tensor_free(t);
  dlpackshim_tensor_free_legacy(lt);
  {
    DLManagedTensorVersioned *counted = NULL;
    CHECK_OK(dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, NULL,
                                   count_release, &counted));
    REQUIRE(counted != NULL);
    cap = untouched;
    CHECK_FAILS(dlpackshim_capsule_new(counted, 1, &cap), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
    CHECK(cap == untouched);
    CHECK_EQ(released, 0); /* a failed capsule_new leaves the tensor alone */
    dlpackshim_tensor_free(counted);
    CHECK_EQ(released, 1);
  }

  CHECK_EQ(dlpackshim_python_available(), 0);
  return check_done("test_nopython");
}
