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

static int released;
static void count_release(void *owner) {
  (void)owner;
  released++;
}

int main(void) {
  /* Bogus "PyObject *" values: never valid memory. */
  const intptr_t bogus = (intptr_t)0x10;
  int64_t shape[2] = {2, 3};
  double data[6] = {0, 1, 2, 3, 4, 5};
  DLManagedTensorVersioned *t;
  DLManagedTensor *lt;
  void *out = (void *)&out;
  uint32_t major = 77, minor = 77;
  uint64_t flags = 77;

  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL) {
    printf("test_nopython: CPython symbols are linked into this program; skipped\n");
    return 77;
  }

  CHECK_EQ(dlpackshim_python_available(), 0);
  /* Twice: the answer is cached, and must stay the same. */
  CHECK_EQ(dlpackshim_python_available(), 0);

  t = dlpackshim_tensor_new(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, NULL, NULL);
  lt = dlpackshim_tensor_new_legacy(data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, NULL,
                                    NULL);
  REQUIRE(t != NULL && lt != NULL);

  /* Functions returning a new Python reference: NULL, and the reason. */
  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_new(t, 1) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython is not running in this process");

  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_new(lt, 0) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);

  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_export(bogus, (intptr_t)&t->dl_tensor, 0, 1) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");

  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_export(bogus, (intptr_t)&t->dl_tensor, 0, 0) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);

  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_export_copy((intptr_t)&t->dl_tensor, 0, 1) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");

  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_export_copy((intptr_t)&t->dl_tensor, 0, 0) == NULL);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);

  /* Status-returning functions. */
  CHECK_FAILS(dlpackshim_capsule_consume(bogus, &out), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython is not running in this process");
  CHECK(out == NULL); /* the out-parameter is cleared, not left dangling */
  dlpackshim_clear_error();
  CHECK(dlpackshim_capsule_import(bogus) == 0);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");
  CHECK_FAILS(dlpackshim_owner_info(bogus, &major, &minor, &flags), DLPACKSHIM_ERR_NO_PYTHON,
              "CPython");
  CHECK_EQ(major, 77); /* outputs untouched on failure */
  CHECK_EQ(minor, 77);
  CHECK_EQ(flags, 77);
  CHECK_FAILS(dlpackshim_owner_info(bogus, NULL, NULL, NULL), DLPACKSHIM_ERR_NO_PYTHON, "CPython");
  dlpackshim_clear_error();
  CHECK(dlpackshim_owner_tensor(bogus) == 0);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");

  /* Reference counting: retain says why it did nothing; release is a
   * deleter's callback and just returns. */
  dlpackshim_clear_error();
  dlpackshim_py_retain(bogus);
  CHECK_EQ(dlpackshim_last_status(), DLPACKSHIM_ERR_NO_PYTHON);
  CHECK_HAS(dlpackshim_last_error(), "CPython");
  dlpackshim_py_release((void *)bogus);
  dlpackshim_py_retain(0);
  dlpackshim_py_release(NULL);

  /* A tensor whose owner is released with dlpackshim_py_release can still be
   * freed in a process without Python (the release is a no-op). */
  {
    DLManagedTensorVersioned *owned = dlpackshim_tensor_new(
        data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, (void *)bogus, dlpackshim_py_release);
    CHECK(owned != NULL);
    dlpackshim_tensor_free(owned);
  }

  /* The tensors still belong to us, and their deleters still work. */
  dlpackshim_tensor_free(t);
  dlpackshim_tensor_free_legacy(lt);
  {
    DLManagedTensorVersioned *counted = dlpackshim_tensor_new(
        data, kDLCPU, 0, 2, shape, NULL, kDLFloat, 64, 1, 0, 0, NULL, count_release);
    CHECK(counted != NULL);
    CHECK(dlpackshim_capsule_new(counted, 1) == NULL);
    CHECK_EQ(released, 0); /* a failed capsule_new leaves the tensor alone */
    dlpackshim_tensor_free(counted);
    CHECK_EQ(released, 1);
  }

  CHECK_EQ(dlpackshim_python_available(), 0);
  return check_done("test_nopython");
}
