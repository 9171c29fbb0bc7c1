/*
 * copy_plan.c - dlpackshim_copy, and the copies where a GPU is involved:
 * dimensions that can be merged are merged, and what remains becomes one
 * (or a few) linear, 2-D or 3-D pitched copies; a layout no pitched copy can
 * express is staged through host memory and gathered or scattered there.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

/* A non-empty tensor has at most 62 extents >= 2 (2^63 elements), plus the
 * bytes of one element: fixed arrays suffice once extent-1 dims are gone. */
enum { SHIM_PLAN_DIMS = 66 };
/* More calls than this for one copy and staging through the host wins. */
static const int64_t shim_max_pieces = 1024;
/* A pitched copy whose rows are this wide is worth doing directly even when
 * staging would need fewer calls. */
static const int64_t shim_wide_row = 512;

typedef struct {
  int64_t n; /* extent */
  int64_t a; /* source stride in bytes */
  int64_t b; /* destination stride in bytes */
} shim_dim;

typedef struct {
  int k;                      /* dims, outermost first; d[k-1] is contiguous in both */
  shim_dim d[SHIM_PLAN_DIMS];
  int64_t a0, b0;             /* byte offsets of the first block from the two bases */
  int block;                  /* innermost dims done by one call: 1, 2 or 3 */
  int64_t pieces;             /* calls needed */
} shim_plan;

static int shim_mul_fits(int64_t x, int64_t y, int64_t *r) {
  return !__builtin_mul_overflow(x, y, r);
}

/* dims (outermost first, extents >= 2) plus one element of `item` bytes,
 * merged wherever a dim is exactly the next one repeated, in both tensors. */
static void shim_plan_merge(shim_plan *p, const shim_dim *dims, int nd, int64_t item) {
  shim_dim rev[SHIM_PLAN_DIMS];
  int k = 0;
  rev[k++] = (shim_dim){item, 1, 1};
  for (int i = nd - 1; i >= 0; i--) {
    shim_dim *in = &rev[k - 1];
    int64_t a, b, n;
    if (shim_mul_fits(in->a, in->n, &a) && shim_mul_fits(in->b, in->n, &b) && dims[i].a == a &&
        dims[i].b == b && shim_mul_fits(in->n, dims[i].n, &n))
      in->n = n;
    else
      rev[k++] = dims[i];
  }
  p->k = k;
  for (int i = 0; i < k; i++) p->d[i] = rev[k - 1 - i];
}

/* Pitches (and rows per slice) of 2-D/3-D copies stay within the
 * runtime's limit (ops->max_pitch). */
static int shim_pitch_ok(int64_t pitch, int64_t width, int64_t max_pitch) {
  return pitch >= width && pitch <= max_pitch;
}

static int shim_slice_ok(int64_t slice, int64_t pitch, int64_t rows, int64_t max_pitch) {
  return slice > 0 && slice % pitch == 0 && slice / pitch >= rows &&
         slice / pitch <= max_pitch;
}

/* Picks the largest block (3-D, 2-D, linear) both layouts allow.
 * Returns 1 when the number of calls is at most max_pieces. */
static int shim_plan_blocks(shim_plan *p, int64_t max_pieces, int64_t max_pitch) {
  int k = p->k, block = 1;
  int64_t width = p->d[k - 1].n;
  if (k >= 2) {
    const shim_dim *r = &p->d[k - 2];
    if (shim_pitch_ok(r->a, width, max_pitch) && shim_pitch_ok(r->b, width, max_pitch)) {
      block = 2;
      if (k >= 3) {
        const shim_dim *s = &p->d[k - 3];
        if (shim_slice_ok(s->a, r->a, r->n, max_pitch) &&
            shim_slice_ok(s->b, r->b, r->n, max_pitch))
          block = 3;
      }
    }
  }
  int64_t pieces = 1;
  for (int i = 0; i < k - block; i++) pieces *= p->d[i].n; /* <= numel */
  p->block = block;
  p->pieces = pieces;
  return pieces <= max_pieces;
}

/* The plan of a direct copy between the two tensors as they are. Dims
 * where both strides are negative are walked backwards. */
static void shim_plan_direct(shim_plan *p, const DLTensor *t, const int64_t *as,
                             const int64_t *bs, int64_t item) {
  shim_dim dims[SHIM_PLAN_DIMS];
  int nd = 0;
  int64_t a0 = 0, b0 = 0;
  for (int32_t i = 0; i < t->ndim; i++) {
    int64_t n = t->shape[i];
    if (n == 1) continue;
    int64_t a = as[i] * item, b = bs[i] * item; /* within the validated spans */
    if (a < 0 && b < 0) {
      a0 += (n - 1) * a;
      b0 += (n - 1) * b;
      a = -a;
      b = -b;
    }
    dims[nd++] = (shim_dim){n, a, b};
  }
  /* When both layouts list their dims in the same stride order (Fortran
   * order, or the same transpose on both sides), walk them in that order:
   * they then merge as well as C order does. */
  shim_dim sorted[SHIM_PLAN_DIMS];
  memcpy(sorted, dims, (size_t)nd * sizeof *dims);
  for (int i = 1; i < nd; i++) /* insertion sort, decreasing source stride, stable */
    for (int j = i; j > 0 && sorted[j - 1].a < sorted[j].a; j--) {
      shim_dim swap = sorted[j - 1];
      sorted[j - 1] = sorted[j];
      sorted[j] = swap;
    }
  int agree = 1;
  for (int i = 1; i < nd; i++)
    if (sorted[i - 1].b < sorted[i].b) agree = 0;
  shim_plan_merge(p, agree ? sorted : dims, nd, item);
  p->a0 = a0;
  p->b0 = b0;
}

/* The plan of a copy between GPU tensor t (strides ts) and a compact host
 * buffer laid out to suit t: t's dims sorted by decreasing stride, negative
 * strides walked forwards, broadcast (stride 0) dims copied once. Gives the
 * buffer's size and a view of it in t's own dim order (view_strides in
 * elements, view_offset in bytes from the buffer to element 0), for the
 * host-side gather or scatter. gpu_is_src: which side of the plan t is. */
static void shim_plan_staged(shim_plan *p, const DLTensor *t, const int64_t *ts, int64_t item,
                             int gpu_is_src, int64_t *view_strides, int64_t *view_offset,
                             int64_t *buf_bytes) {
  struct {
    int32_t i;
    int64_t n, s, h;
    int flipped;
  } c[SHIM_PLAN_DIMS], tmp;
  int nc = 0;
  int64_t gpu_off = 0;
  for (int32_t i = 0; i < t->ndim; i++) {
    view_strides[i] = 0;
    int64_t n = t->shape[i];
    if (n == 1 || ts[i] == 0) continue; /* an extent-1 dim's stride may be anything */
    int64_t s = ts[i] * item;
    int flipped = s < 0;
    if (flipped) {
      gpu_off += (n - 1) * s;
      s = -s;
    }
    c[nc].i = i;
    c[nc].n = n;
    c[nc].s = s;
    c[nc].flipped = flipped;
    /* insertion sort, decreasing stride, stable */
    int j = nc++;
    while (j > 0 && c[j - 1].s < c[j].s) {
      tmp = c[j - 1];
      c[j - 1] = c[j];
      c[j] = tmp;
      j--;
    }
  }
  int64_t h = item, off = 0;
  for (int q = nc - 1; q >= 0; q--) {
    c[q].h = h;
    h *= c[q].n; /* the buffer holds each copied element once: <= nbytes */
  }
  shim_dim dims[SHIM_PLAN_DIMS];
  for (int q = 0; q < nc; q++) {
    view_strides[c[q].i] = (c[q].flipped ? -c[q].h : c[q].h) / item;
    if (c[q].flipped) off += (c[q].n - 1) * c[q].h;
    dims[q] = gpu_is_src ? (shim_dim){c[q].n, c[q].s, c[q].h} : (shim_dim){c[q].n, c[q].h, c[q].s};
  }
  shim_plan_merge(p, dims, nc, item);
  p->a0 = gpu_is_src ? gpu_off : 0;
  p->b0 = gpu_is_src ? 0 : gpu_off;
  *view_offset = off;
  *buf_bytes = h;
}

/* Issues the plan's calls on the scope's stream. */
static int shim_plan_run(const shim_gpu_ops *ops, shim_gpu_scope *scope, const shim_plan *p,
                         const void *src, int src_on_device, void *dst, int dst_on_device) {
  const int k = p->k, block = p->block, outer = k - block;
  shim_gpu_block blk;
  memset(&blk, 0, sizeof blk);
  blk.src_on_device = src_on_device;
  blk.dst_on_device = dst_on_device;
  blk.width = (size_t)p->d[k - 1].n;
  blk.height = block >= 2 ? (size_t)p->d[k - 2].n : 1;
  blk.depth = block == 3 ? (size_t)p->d[k - 3].n : 1;
  blk.src_pitch = block >= 2 ? (size_t)p->d[k - 2].a : blk.width;
  blk.dst_pitch = block >= 2 ? (size_t)p->d[k - 2].b : blk.width;
  blk.src_rows = block == 3 ? (size_t)(p->d[k - 3].a / p->d[k - 2].a) : blk.height;
  blk.dst_rows = block == 3 ? (size_t)(p->d[k - 3].b / p->d[k - 2].b) : blk.height;
  int64_t idx[SHIM_PLAN_DIMS] = {0};
  int64_t a = p->a0, b = p->b0;
  for (int64_t piece = 0; piece < p->pieces; piece++) {
    blk.src = (const char *)((uintptr_t)src + (uintptr_t)a);
    blk.dst = (char *)((uintptr_t)dst + (uintptr_t)b);
    int rc = ops->copy(scope, &blk);
    if (rc) return rc;
    for (int i = outer - 1; i >= 0; i--) { /* odometer over the outer dims */
      a += p->d[i].a;
      b += p->d[i].b;
      if (++idx[i] < p->d[i].n) break;
      a -= p->d[i].a * p->d[i].n;
      b -= p->d[i].b * p->d[i].n;
      idx[i] = 0;
    }
  }
  return DLPACKSHIM_OK;
}

/* The tensor's strides, or compact ones written into buf. */
static const int64_t *shim_strides_of(const DLTensor *t, int64_t *buf) {
  if (t->strides || t->ndim == 0) return t->strides;
  shim_compact_strides(t->ndim, t->shape, buf); /* cannot fail: t is not empty */
  return buf;
}

static void *shim_data_of(const DLTensor *t) {
  return (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
}

/* t's shape and dtype over host memory at data (strides NULL: compact). */
static DLTensor shim_host_view(const DLTensor *t, void *data, int64_t *strides) {
  DLTensor v = *t;
  v.data = data;
  v.byte_offset = 0;
  v.device.device_type = kDLCPU;
  v.device.device_id = 0;
  v.strides = strides;
  return v;
}

/* ---- copies ------------------------------------------------------------- */

static int shim_device_copy(const DLTensor *dst, const DLTensor *src, int64_t stream);

/* A copy where one side is GPU memory and the other host memory. */
static int shim_copy_host_gpu(const shim_gpu_ops *ops, const DLTensor *dst, const DLTensor *src,
                              const int64_t *ds, const int64_t *ss, int64_t item,
                              const shim_info *si, int64_t stream, int64_t *work) {
  const int src_gpu = shim_gpu_on_device(src->device.device_type);
  const DLTensor *gpu = src_gpu ? src : dst;
  const int64_t *gs = src_gpu ? ss : ds;
  shim_plan *direct = malloc(2 * sizeof *direct);
  if (!direct) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory planning a copy");
  shim_plan *staged = direct + 1;
  int64_t *view_strides = work, view_offset = 0, buf_bytes = 0;
  shim_plan_direct(direct, src, ss, ds, item);
  int direct_ok = shim_plan_blocks(direct, shim_max_pieces, ops->max_pitch);
  shim_plan_staged(staged, gpu, gs, item, src_gpu, view_strides, &view_offset, &buf_bytes);
  /* Writing to the GPU there is no other way (a read-modify-write of the
   * span would race with other streams), so any number of calls is fine. */
  int staged_ok = shim_plan_blocks(staged, src_gpu ? shim_max_pieces : INT64_MAX, ops->max_pitch);
  int64_t direct_width = direct->d[direct->k - 1].n;

  shim_gpu_scope scope;
  int rc = ops->enter(&scope, gpu->device.device_id, (void *)(intptr_t)stream);
  if (rc) {
    free(direct);
    return rc;
  }
  char *buf = NULL;
  /* Direct unless staging needs fewer calls: a host pass over the data
   * costs less than many narrow DMA requests, but nothing beats one call. */
  if (direct_ok &&
      (!staged_ok || direct->pieces <= staged->pieces || direct_width >= shim_wide_row)) {
    /* Straight between the user's buffers; then wait, as the caller will
     * read the host buffer (D2H) or may reuse it (H2D) once we return. */
    rc = shim_plan_run(ops, &scope, direct, shim_data_of(src), src_gpu, shim_data_of(dst),
                       !src_gpu);
    if (!rc) rc = ops->synchronize(&scope);
    rc = shim_gpu_leave(ops, &scope, rc);
  } else if (src_gpu && !staged_ok) {
    /* No good plan even for a buffer of our choosing (an odd, e.g.
     * overlapping, layout): fetch the whole byte span, gather on the host. */
    /* hi >= lo, both int64: the difference fits uint64, not always int64. */
    uint64_t span = (uint64_t)si->hi - (uint64_t)si->lo;
    buf = span <= PTRDIFF_MAX ? shim_data_alloc((size_t)span) : NULL;
    if (!buf) {
      rc = shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory staging %" PRIu64 " bytes", span);
      shim_gpu_leave(ops, &scope, rc);
    } else {
      shim_gpu_block blk;
      memset(&blk, 0, sizeof blk);
      blk.src = (const char *)((uintptr_t)shim_data_of(src) + (uintptr_t)si->lo);
      blk.dst = buf;
      blk.src_on_device = 1;
      blk.width = (size_t)span;
      blk.height = blk.depth = 1;
      blk.src_pitch = blk.dst_pitch = blk.width;
      blk.src_rows = blk.dst_rows = 1;
      rc = ops->copy(&scope, &blk);
      if (!rc) rc = ops->synchronize(&scope);
      rc = shim_gpu_leave(ops, &scope, rc);
      if (!rc) {
        DLTensor view = shim_host_view(src, (void *)((uintptr_t)buf - (uintptr_t)si->lo), (int64_t *)ss);
        rc = shim_copy(dst, &view, 0);
      }
    }
  } else {
    /* Through a host buffer laid out to suit the GPU side. */
    buf = shim_data_alloc((size_t)buf_bytes);
    if (!buf) {
      rc = shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory staging %" PRId64 " bytes",
                     buf_bytes);
      shim_gpu_leave(ops, &scope, rc);
    } else {
      DLTensor view = shim_host_view(gpu, buf + view_offset, view_strides);
      if (src_gpu) {
        rc = shim_plan_run(ops, &scope, staged, shim_data_of(src), 1, buf, 0);
        if (!rc) rc = ops->synchronize(&scope);
        rc = shim_gpu_leave(ops, &scope, rc);
        if (!rc) rc = shim_copy(dst, &view, 0);
      } else {
        rc = shim_copy(&view, src, 0);
        if (!rc) rc = shim_plan_run(ops, &scope, staged, buf, 0, shim_data_of(dst), 1);
        /* The buffer is freed below: the copies must have read it. */
        if (!rc) rc = ops->synchronize(&scope);
        rc = shim_gpu_leave(ops, &scope, rc);
      }
    }
  }
  free(buf);
  free(direct);
  return rc;
}

/* Two hops through a compact host copy of src: for what the runtime's copy
 * calls cannot do in one plan. */
static int shim_copy_via_host(const DLTensor *dst, const DLTensor *src, const shim_info *si,
                              int64_t stream) {
  void *buf = shim_data_alloc((size_t)si->nbytes);
  if (!buf) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory staging %" PRId64 " bytes",
                             si->nbytes);
  DLTensor tmp = shim_host_view(src, buf, NULL);
  int rc = shim_device_copy(&tmp, src, stream);
  if (!rc) rc = shim_device_copy(dst, &tmp, stream);
  free(buf);
  return rc;
}

/* A copy between two tensors on the same GPU. */
static int shim_copy_gpu_gpu(const shim_gpu_ops *ops, const DLTensor *dst, const DLTensor *src,
                             const int64_t *ds, const int64_t *ss, int64_t item,
                             const shim_info *si, int64_t stream) {
  shim_plan *plan = malloc(sizeof *plan);
  if (!plan) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory planning a copy");
  shim_plan_direct(plan, src, ss, ds, item);
  int rc;
  if (shim_plan_blocks(plan, shim_max_pieces, ops->max_pitch)) {
    shim_gpu_scope scope;
    rc = ops->enter(&scope, src->device.device_id, (void *)(intptr_t)stream);
    if (!rc) {
      rc = shim_plan_run(ops, &scope, plan, shim_data_of(src), 1, shim_data_of(dst), 1);
      rc = shim_gpu_leave(ops, &scope, rc);
    }
    free(plan);
    return rc;
  }
  free(plan);
  return shim_copy_via_host(dst, src, si, stream); /* no kernels here to gather on the GPU */
}

static int shim_device_copy(const DLTensor *dst, const DLTensor *src, int64_t stream) {
  shim_info si, di;
  int rc = shim_copy_inspect(src, "src", 0, &si);
  if (!rc) rc = shim_copy_inspect(dst, "dst", 0, &di);
  if (!rc) rc = shim_copy_match(dst, src);
  if (rc) return rc;
  const int32_t st = src->device.device_type, dt = dst->device.device_type;
  const int src_gpu = shim_gpu_on_device(st), dst_gpu = shim_gpu_on_device(dt);
  if (!src_gpu && !shim_host_accessible(st))
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED, "copy: cannot read memory of device type %" PRId32,
                     st);
  if (!dst_gpu && !shim_host_accessible(dt))
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "copy: cannot write memory of device type %" PRId32, dt);
  if (!src_gpu && !dst_gpu) return shim_copy(dst, src, 0);
  if (src_gpu && dst_gpu &&
      (st != dt || src->device.device_id != dst->device.device_id))
    return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                     "copy: from device (%" PRId32 ", %" PRId32 ") to (%" PRId32 ", %" PRId32
                     "): copies between two GPUs go through the host",
                     st, src->device.device_id, dt, dst->device.device_id);
  const shim_gpu_ops *ops = shim_gpu_family(src_gpu ? st : dt);
  rc = shim_gpu_check_handle(ops, "copy", stream);
  if (rc) return rc;
  if (si.numel == 0) return DLPACKSHIM_OK; /* nothing to move: the runtime is not even loaded */
  rc = ops->load();
  if (rc) return rc;

  int64_t item = si.itemsize;
  if (item == 0) {
    /* Packed sub-byte elements, both compact (inspected so): the bytes as
     * uint8; a last byte the elements do not fill is merged on the host,
     * read before anything is written (the two may overlap), so that the
     * bits after dst's elements stay as they were (copy.c). */
    const unsigned mask = shim_packed_tail_mask(&si);
    int64_t whole = mask ? si.nbytes - 1 : si.nbytes, one = 1, stride1 = 1;
    unsigned char bytes[2]; /* src's last byte, dst's */
    DLTensor s1 = *src, d1 = *dst;
    s1.ndim = d1.ndim = 1;
    s1.shape = d1.shape = &whole;
    s1.strides = d1.strides = &stride1;
    s1.dtype = d1.dtype = (DLDataType){kDLUInt, 8, 1};
    DLTensor s_last = s1, d_last = d1, h_last = shim_host_view(&s1, bytes, NULL);
    s_last.shape = d_last.shape = h_last.shape = &one;
    s_last.byte_offset += (uint64_t)(si.nbytes - 1);
    d_last.byte_offset += (uint64_t)(si.nbytes - 1);
    if (mask) {
      rc = shim_device_copy(&h_last, &s_last, stream);
      h_last.data = bytes + 1;
      if (!rc) rc = shim_device_copy(&h_last, &d_last, stream);
      if (rc) return rc;
      bytes[1] = (unsigned char)((bytes[1] & ~mask) | (bytes[0] & mask));
    }
    rc = whole > 0 ? shim_device_copy(&d1, &s1, stream) : DLPACKSHIM_OK;
    if (!rc && mask) rc = shim_device_copy(&d_last, &h_last, stream);
    return rc;
  }

  /* Two views of one allocation: the pieces queued on the stream would read
   * bytes an earlier piece wrote (the host copy's rule, copy.c). */
  uintptr_t s0 = (uintptr_t)shim_data_of(src), d0 = (uintptr_t)shim_data_of(dst);
  if (s0 + (uintptr_t)si.lo < d0 + (uintptr_t)di.hi && d0 + (uintptr_t)di.lo < s0 + (uintptr_t)si.hi)
    return shim_copy_via_host(dst, src, &si, stream);

  int64_t *work = malloc(3 * (size_t)(src->ndim > 0 ? src->ndim : 1) * sizeof *work);
  if (!work) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "out of memory planning a copy");
  const int64_t *ss = shim_strides_of(src, work);
  const int64_t *ds = shim_strides_of(dst, work + src->ndim);
  if (src_gpu && dst_gpu)
    rc = shim_copy_gpu_gpu(ops, dst, src, ds, ss, item, &si, stream);
  else
    rc = shim_copy_host_gpu(ops, dst, src, ds, ss, item, &si, stream, work + 2 * src->ndim);
  free(work);
  return rc;
}

DLPACKSHIM_API int dlpackshim_copy(const DLTensor *dst, const DLTensor *src, int64_t stream) {
  if (!dst || !src)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "copy: %s is NULL", dst ? "src" : "dst");
  /* Host to host: copy.c's checks, which name the side at fault. */
  if (shim_host_accessible(dst->device.device_type) &&
      shim_host_accessible(src->device.device_type))
    return shim_copy(dst, src, 0);
  return shim_device_copy(dst, src, stream);
}
