/*
 * c_basic.c - the C API in one page: describe a strided view of a buffer as
 * a DLPack tensor, validate and measure it, clone it into a compact copy,
 * free both. Every call's status is checked; a failure prints the library's
 * own message.
 *
 *   cc c_basic.c $(pkg-config --cflags --libs dlpackshim) -o c_basic
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <dlpackshim.h>

static int released;

/* Called exactly once, by the tensor's deleter. */
static void release_buffer(void *owner) {
  free(owner);
  released++;
}

static int fail(const char *what) {
  fprintf(stderr, "c_basic: %s failed: %s (%s)\n", what, dlpackshim_last_error(),
          dlpackshim_strerror(dlpackshim_last_status()));
  return 1;
}

static void print_tensor(const char *name, const DLManagedTensorVersioned *m) {
  const DLTensor *t = &m->dl_tensor;
  printf("%s: DLPack %u.%u, dtype (code %u, bits %u, lanes %u), shape (", name,
         m->version.major, m->version.minor, t->dtype.code, t->dtype.bits, t->dtype.lanes);
  for (int32_t i = 0; i < t->ndim; i++) printf(i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
  printf("), strides (");
  for (int32_t i = 0; i < t->ndim; i++) printf(i ? ", %" PRId64 : "%" PRId64, t->strides[i]);
  printf("), byte_offset %" PRIu64 ", flags 0x%" PRIx64 "\n", t->byte_offset, m->flags);
}

int main(void) {
  printf("libdlpackshim %s\n", dlpackshim_version_string());

  /* A 4x6 float32 matrix 0..23; the tensor views its transpose, every
   * other row of it: shape (3, 4), strides (2, 6) elements. */
  float *buf = malloc(24 * sizeof *buf);
  if (!buf) return 1;
  for (int i = 0; i < 24; i++) buf[i] = (float)i;
  const int64_t shape[2] = {3, 4}, strides[2] = {2, 6};
  /* Every fallible call returns 0 or a negative dlpackshim_status; results
   * come back through the last arguments (the *_out pointers). */
  DLManagedTensorVersioned *view = NULL;
  int status = dlpackshim_tensor_new(buf, kDLCPU, 0, 2, shape, strides, kDLFloat, 32, 1, 0,
                                     DLPACKSHIM_FLAG_READ_ONLY, buf, release_buffer, &view);
  if (status != DLPACKSHIM_OK) {
    free(buf); /* on failure the release is not called: the buffer is still ours */
    return fail("dlpackshim_tensor_new");
  }
  DLTensor *t = dlpackshim_managed_dltensor(view);

  if (dlpackshim_tensor_validate(t, view->flags) != DLPACKSHIM_OK)
    return fail("dlpackshim_tensor_validate");
  int64_t numel, nbytes, lo, hi;
  int32_t layout;
  if (dlpackshim_tensor_numel(t, &numel) != DLPACKSHIM_OK ||
      dlpackshim_tensor_nbytes(t, view->flags, &nbytes) != DLPACKSHIM_OK ||
      dlpackshim_tensor_layout(t, &layout) != DLPACKSHIM_OK ||
      dlpackshim_tensor_byte_span(t, view->flags, &lo, &hi) != DLPACKSHIM_OK)
    return fail("measuring the view");
  int contiguous = (layout & DLPACKSHIM_LAYOUT_C) != 0; /* compact row-major */
  print_tensor("view", view);
  printf("view: %" PRId64 " elements, %" PRId64 " bytes compact, touches bytes [%" PRId64
         ", %" PRId64 "), contiguous: %s\n",
         numel, nbytes, lo, hi, contiguous ? "yes" : "no");

  DLManagedTensorVersioned *copy = NULL;
  if (dlpackshim_tensor_clone(t, view->flags, &copy) != DLPACKSHIM_OK)
    return fail("dlpackshim_tensor_clone");
  print_tensor("clone", copy);
  int32_t clayout;
  if (dlpackshim_tensor_layout(&copy->dl_tensor, &clayout) != DLPACKSHIM_OK ||
      !(clayout & DLPACKSHIM_LAYOUT_C))
    return fail("the clone's contiguity");
  const float *c = copy->dl_tensor.data;
  printf("clone: contiguous: yes, 256-byte aligned: %s, rows:\n",
         (uintptr_t)c % 256 == 0 ? "yes" : "no");
  for (int i = 0; i < 3; i++)
    printf("  %4.0f %4.0f %4.0f %4.0f\n", c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]);
  /* element [i][j] of the view is buf[2i + 6j] */
  int ok = c[4 * 2 + 3] == 2 * 2 + 6 * 3;

  dlpackshim_tensor_free(copy);
  dlpackshim_tensor_free(view); /* calls release_buffer(buf) */
  if (released != 1) {
    fprintf(stderr, "c_basic: the owner was released %d times\n", released);
    return 1;
  }
  printf("freed both, owner released once: %s\n", ok ? "ok" : "WRONG DATA");
  return ok ? 0 : 1;
}
