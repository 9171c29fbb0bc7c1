/*
 * test_copy.c - dlpackshim_copy against a naive element-by-element copier,
 * over random layouts from a fixed-seed PRNG (ndim 0..6, zero extents,
 * negative/zero/permuted strides, every itemsize, unaligned byte offsets,
 * overlapping buffers), plus the rejection rules and the fast paths' edges.
 */
#include <inttypes.h>

#include "check.h"

#ifdef COPY_WITHOUT_SSE2
/* test_copy_scalar: csrc/core/copy.c built into this program without SSE2,
 * so that the scalar tiles other machines run are tested here too. */
#include "internal.h"
#define dlpackshim_copy(dst, src, stream) ((void)(stream), shim_copy((dst), (src), 0))
#endif

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Du;
}

static int64_t below(int64_t n) { return (int64_t)(rng() % (uint64_t)n); }

/* dtypes of each itemsize worth testing (plain loads, vectors, odd sizes) */
static const DLDataType dtypes[] = {
    {kDLUInt, 8, 1},  {kDLInt, 16, 1},     {kDLFloat, 32, 1}, {kDLFloat, 64, 1},
    {kDLComplex, 128, 1}, {kDLUInt, 8, 3}, {kDLInt, 16, 3},   {kDLFloat, 32, 3},
    {kDLFloat, 64, 4}, {kDLBool, 8, 1},    {kDLBfloat, 16, 1}, {kDLOpaqueHandle, 40, 1},
};
enum { NDTYPES = sizeof dtypes / sizeof dtypes[0] };

typedef struct {
  int64_t shape[8], strides[8];
  int use_strides;
  int64_t need;  /* bytes of buffer the layout needs, from the buffer start */
  uint64_t byte_offset;
} layout;

/* A random view of a bigger buffer: permuted dims, steps of 1..2, random
 * signs, zero strides when allowed (never in a destination). */
static void random_layout(layout *l, int ndim, const int64_t *shape, int64_t isz, int allow_zero) {
  int64_t parent[8], pstride[8], step[8];
  int perm[8];
  for (int i = 0; i < ndim; i++) {
    l->shape[i] = shape[i];
    step[i] = 1 + below(2);
    parent[i] = (shape[i] > 0 ? (shape[i] - 1) * step[i] + 1 : 1) + below(2);
    perm[i] = i;
  }
  for (int i = ndim - 1; i > 0; i--) { /* Fisher-Yates: the memory order of the dims */
    int j = (int)below(i + 1), x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  int64_t s = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    pstride[perm[k]] = s;
    s *= parent[perm[k]];
  }
  int64_t origin = 0;
  for (int i = 0; i < ndim; i++) {
    int64_t st = pstride[i] * step[i];
    if (below(3) == 0) st = -st;
    if (allow_zero && below(8) == 0) st = 0;
    l->strides[i] = st;
    if (st < 0 && shape[i] > 0) origin += -st * (shape[i] - 1);
    /* The stride of an extent-1 dim is never used: it may be anything. */
    if (shape[i] == 1 && below(4) == 0) l->strides[i] = below(2) ? INT64_MIN : INT64_MAX;
  }
  l->use_strides = 1;
  if (below(6) == 0) { /* NULL strides: compact row-major */
    l->use_strides = 0;
    origin = 0;
    s = 1;
    for (int i = 0; i < ndim; i++) s *= shape[i] > 0 ? shape[i] : 1;
  }
  int64_t misalign = below(8);
  l->byte_offset = (uint64_t)(origin * isz + misalign);
  l->need = (s + origin) * isz + misalign + isz;
}

static DLTensor as_tensor(layout *l, void *data, int ndim, DLDataType dt) {
  DLTensor t = {data, {kDLCPU, 0}, ndim, dt, l->shape, l->use_strides ? l->strides : NULL, 0};
  t.byte_offset = l->byte_offset;
  return t;
}

/* The reference: visit every index, compute both offsets, copy the bytes. */
static void ref_copy(const DLTensor *d, const DLTensor *s, int64_t isz) {
  int nd = d->ndim;
  int64_t idx[8] = {0}, numel = 1, dc[8], sc[8], c = 1;
  for (int i = nd - 1; i >= 0; i--) {
    dc[i] = sc[i] = c;
    c *= d->shape[i];
    numel *= d->shape[i];
  }
  for (int64_t e = 0; e < numel; e++) {
    int64_t doff = 0, soff = 0;
    for (int i = 0; i < nd; i++) {
      doff += idx[i] * (d->strides ? d->strides[i] : dc[i]);
      soff += idx[i] * (s->strides ? s->strides[i] : sc[i]);
    }
    memcpy((char *)d->data + d->byte_offset + doff * isz,
           (const char *)s->data + s->byte_offset + soff * isz, (size_t)isz);
    for (int i = nd - 1; i >= 0; i--) {
      if (++idx[i] < d->shape[i]) break;
      idx[i] = 0;
    }
  }
}

static void fill(unsigned char *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = (unsigned char)rng();
}

static int mismatches;

static void one_random_case(int trial) {
  int ndim = (int)below(7);
  int64_t shape[8];
  for (int i = 0; i < ndim; i++) {
    int64_t r = below(20);
    shape[i] = r == 0 ? 0 : r < 5 ? 1 : 2 + below(4);
  }
  if (below(10) == 0 && ndim > 0) shape[below(ndim)] = 20 + below(60); /* tiles and edges */
  DLDataType dt = dtypes[below(NDTYPES)];
  int64_t isz = (int64_t)dt.bits * dt.lanes / 8;
  layout ls, ld;
  random_layout(&ls, ndim, shape, isz, 1);
  random_layout(&ld, ndim, shape, isz, 0);
  int shared = below(4) == 0; /* dst and src in one buffer: spans overlap */

  int64_t sbytes = shared ? (ls.need > ld.need ? ls.need : ld.need) : ls.need;
  unsigned char *sbuf = malloc((size_t)sbytes), *dbuf = malloc((size_t)ld.need);
  unsigned char *want = malloc((size_t)(shared ? sbytes : ld.need));
  REQUIRE(sbuf && dbuf && want);
  fill(sbuf, sbytes);
  fill(dbuf, ld.need);

  DLTensor src = as_tensor(&ls, sbuf, ndim, dt);
  int rc;
  if (!shared) {
    memcpy(want, dbuf, (size_t)ld.need);
    DLTensor wt = as_tensor(&ld, want, ndim, dt), dst = as_tensor(&ld, dbuf, ndim, dt);
    ref_copy(&wt, &src, isz);
    rc = dlpackshim_copy(&dst, &src, (int64_t)trial - 1); /* host: stream unused */
    if (rc == 0 && memcmp(want, dbuf, (size_t)ld.need) != 0) rc = 1;
  } else {
    /* The reference for overlap: read all of src first, then write. */
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    unsigned char *tmp = malloc((size_t)(numel * isz + 1));
    REQUIRE(tmp);
    DLTensor tt = {tmp, {kDLCPU, 0}, ndim, dt, shape, NULL, 0};
    ref_copy(&tt, &src, isz);
    memcpy(want, sbuf, (size_t)sbytes);
    DLTensor wt = as_tensor(&ld, want, ndim, dt), dst = as_tensor(&ld, sbuf, ndim, dt);
    ref_copy(&wt, &tt, isz);
    rc = dlpackshim_copy(&dst, &src, (int64_t)trial - 1); /* host: stream unused */
    if (rc == 0 && memcmp(want, sbuf, (size_t)sbytes) != 0) rc = 1;
    free(tmp);
  }
  if (rc != 0 && mismatches++ < 5) {
    fprintf(stderr, "trial %d: rc %d (%s) ndim %d itemsize %" PRId64 " shared %d\n", trial, rc,
            rc < 0 ? dlpackshim_last_error() : "wrong data", ndim, isz, shared);
    for (int i = 0; i < ndim; i++)
      fprintf(stderr, "  dim %d: extent %" PRId64 " src stride %" PRId64 " dst stride %" PRId64 "\n",
              i, shape[i], ls.use_strides ? ls.strides[i] : 0, ld.use_strides ? ld.strides[i] : 0);
  }
  free(sbuf);
  free(dbuf);
  free(want);
}

static void test_random_layouts_match_the_reference(void) {
  mismatches = 0;
  for (int trial = 0; trial < 3000; trial++) one_random_case(trial);
  CHECK_EQ(mismatches, 0);
}

/* Large 2-D transposes at sizes that are not multiples of the tile. */
static void test_transposes_of_every_itemsize(void) {
  const int sizes[] = {1, 2, 4, 8, 16};
  for (int k = 0; k < 5; k++) {
    const int64_t R = 67, C = 131, isz = sizes[k];
    unsigned char *a = malloc((size_t)(R * C * isz)), *b = malloc((size_t)(R * C * isz));
    unsigned char *w = malloc((size_t)(R * C * isz));
    REQUIRE(a && b && w);
    fill(a, R * C * isz);
    int64_t shape[2] = {C, R}, tstrides[2] = {1, C};
    DLDataType dt = {kDLUInt, (uint8_t)(isz == 16 ? 64 : isz * 8), (uint16_t)(isz == 16 ? 2 : 1)};
    DLTensor src = {a, {kDLCPU, 0}, 2, dt, shape, tstrides, 0}; /* a.T of an R x C array */
    DLTensor dst = {b, {kDLCPU, 0}, 2, dt, shape, NULL, 0};
    DLTensor ref = {w, {kDLCPU, 0}, 2, dt, shape, NULL, 0};
    ref_copy(&ref, &src, isz);
    CHECK_OK(dlpackshim_copy(&dst, &src, 0));
    CHECK(memcmp(b, w, (size_t)(R * C * isz)) == 0);
    /* and back: contiguous src into a transposed dst */
    memset(b, 0, (size_t)(R * C * isz));
    DLTensor back = {b, {kDLCPU, 0}, 2, dt, shape, tstrides, 0};
    CHECK_OK(dlpackshim_copy(&back, &ref, 0));
    CHECK(memcmp(b, a, (size_t)(R * C * isz)) == 0);
    /* into a dst with gaps (every 2nd element of its rows): the tiles'
     * variable step; the gaps keep their bytes */
    unsigned char *g = malloc((size_t)(2 * R * C * isz)), *gw = malloc((size_t)(2 * R * C * isz));
    REQUIRE(g && gw);
    fill(g, 2 * R * C * isz);
    memcpy(gw, g, (size_t)(2 * R * C * isz));
    int64_t gstrides[2] = {2 * R, 2};
    DLTensor gap = {g, {kDLCPU, 0}, 2, dt, shape, gstrides, 0};
    DLTensor gref = {gw, {kDLCPU, 0}, 2, dt, shape, gstrides, 0};
    ref_copy(&gref, &src, isz);
    CHECK_OK(dlpackshim_copy(&gap, &src, 0));
    CHECK(memcmp(g, gw, (size_t)(2 * R * C * isz)) == 0);
    free(g);
    free(gw);
    free(a);
    free(b);
    free(w);
  }
}

/* A 3-D permutation whose src-fastest dim is short (5): tiles of few rows
 * and long columns, with edges in every dim. */
static void test_permutation_with_a_short_fastest_dim(void) {
  const int sizes[] = {1, 2, 4, 8, 16};
  for (int k = 0; k < 5; k++) {
    const int64_t A = 37, B = 41, F = 5, isz = sizes[k], n = A * B * F;
    unsigned char *a = malloc((size_t)(n * isz)), *b = malloc((size_t)(n * isz));
    unsigned char *w = malloc((size_t)(n * isz));
    REQUIRE(a && b && w);
    fill(a, n * isz);
    /* (A, B, F) C-contiguous, seen as .transpose(2, 0, 1): shape (F, A, B) */
    int64_t shape[3] = {F, A, B}, pstrides[3] = {1, B * F, F};
    DLDataType dt = {kDLUInt, (uint8_t)(isz == 16 ? 64 : isz * 8), (uint16_t)(isz == 16 ? 2 : 1)};
    DLTensor src = {a, {kDLCPU, 0}, 3, dt, shape, pstrides, 0};
    DLTensor dst = {b, {kDLCPU, 0}, 3, dt, shape, NULL, 0};
    DLTensor ref = {w, {kDLCPU, 0}, 3, dt, shape, NULL, 0};
    ref_copy(&ref, &src, isz);
    CHECK_OK(dlpackshim_copy(&dst, &src, 0));
    CHECK(memcmp(b, w, (size_t)(n * isz)) == 0);
    free(a);
    free(b);
    free(w);
  }
}

static void test_0d_and_empty(void) {
  double x = 2.5, y = 0;
  DLTensor s = {&x, {kDLCPU, 0}, 0, {kDLFloat, 64, 1}, NULL, NULL, 0};
  DLTensor d = {&y, {kDLCPU, 0}, 0, {kDLFloat, 64, 1}, NULL, NULL, 0};
  CHECK_OK(dlpackshim_copy(&d, &s, 0));
  CHECK(y == 2.5);
  int64_t shape[2] = {3, 0};
  DLTensor es = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, NULL, 0};
  DLTensor ed = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_copy(&ed, &es, 0));
}

/* Strides that are never used (extent 1, empty tensors) may be anything. */
static void test_unused_strides_may_be_anything(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
  int64_t shape[3] = {2, 1, 3}, ss[3] = {3, INT64_MIN, 1}, ds[3] = {3, INT64_MAX, 1};
  DLTensor src = {a, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, ss, 0};
  DLTensor dst = {b, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, ds, 0};
  CHECK_OK(dlpackshim_copy(&dst, &src, 0));
  CHECK(memcmp(a, b, sizeof a) == 0);
  int64_t empty[2] = {0, 5}, wild[2] = {INT64_MIN, INT64_MAX};
  DLTensor es = {a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, empty, wild, 0};
  DLTensor ed = {b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, empty, wild, 0};
  CHECK_OK(dlpackshim_copy(&ed, &es, 0));
}

static void test_copy_onto_itself_is_a_no_op(void) {
  int32_t v[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[1] = {6};
  DLTensor t = {v, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_copy(&t, &t, 0));
  CHECK(v[0] == 1 && v[5] == 6);
  /* Shift by one element inside one buffer: the source is read before written. */
  int64_t five[1] = {5};
  DLTensor src = {v, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, five, NULL, 0};
  DLTensor dst = src;
  dst.byte_offset = 4;
  CHECK_OK(dlpackshim_copy(&dst, &src, 0));
  const int32_t want[6] = {1, 1, 2, 3, 4, 5};
  CHECK(memcmp(v, want, sizeof want) == 0);
}

static void test_packed_sub_byte(void) {
  uint8_t a[3] = {0x21, 0x43, 0x65}, b[4] = {0, 0, 0, 0xEE};
  int64_t shape[2] = {2, 3}, strided[2] = {1, 2};
  DLTensor s = {a, {kDLCPU, 0}, 2, {kDLInt, 4, 1}, shape, NULL, 0};
  DLTensor d = {b, {kDLCPU, 0}, 2, {kDLInt, 4, 1}, shape, NULL, 0};
  CHECK_OK(dlpackshim_copy(&d, &s, 0));
  CHECK(memcmp(a, b, 3) == 0 && b[3] == 0xEE); /* 24 bits: exactly 3 bytes */
  /* Three elements end inside a byte: the element after them (its high
   * nibble, DLPack packing element i at bit 4i) is another tensor's. */
  uint8_t whole[2] = {0xAB, 0xCD}, three[2] = {0x11, 0x01};
  int64_t n3[1] = {3};
  DLTensor s3 = {three, {kDLCPU, 0}, 1, {kDLUInt, 4, 1}, n3, NULL, 0};
  DLTensor d3 = {whole, {kDLCPU, 0}, 1, {kDLUInt, 4, 1}, n3, NULL, 0};
  CHECK_OK(dlpackshim_copy(&d3, &s3, 0));
  CHECK(whole[0] == 0x11 && whole[1] == 0xC1);
  /* Overlapping: elements 0..2 onto 1..3 of one buffer can only be byte-wise
   * when both start on a byte, so here the shift is by two elements. */
  uint8_t buf[3] = {0x21, 0x43, 0xF5};
  DLTensor lo = {buf, {kDLCPU, 0}, 1, {kDLUInt, 4, 1}, n3, NULL, 0}, hi = lo;
  hi.byte_offset = 1;
  CHECK_OK(dlpackshim_copy(&hi, &lo, 0));
  CHECK(buf[0] == 0x21 && buf[1] == 0x21 && buf[2] == 0xF3);
  s.strides = strided;
  CHECK_FAILS(dlpackshim_copy(&d, &s, 0), DLPACKSHIM_ERR_UNSUPPORTED, "src has packed sub-byte");
  s.strides = NULL;
  d.strides = strided;
  CHECK_FAILS(dlpackshim_copy(&d, &s, 0), DLPACKSHIM_ERR_UNSUPPORTED, "dst has packed sub-byte");
}

static void test_rejections_name_the_mismatch(void) {
  float a[12], b[12];
  int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, s12[1] = {12};
  DLTensor src = {a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s34, NULL, 0};
  DLTensor dst = {b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s43, NULL, 0};
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "dst.shape[0] is 4 but src.shape[0] is 3");
  dst.ndim = 1;
  dst.shape = s12;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "dst.ndim is 1 but src.ndim is 2");
  dst.ndim = 2;
  dst.shape = s34;
  dst.dtype.code = kDLInt;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT,
              "dst.dtype (code 0, bits 32, lanes 1) differs");
  dst.dtype.code = kDLFloat;
  CHECK_FAILS(dlpackshim_copy(NULL, &src, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "dst is NULL");
  CHECK_FAILS(dlpackshim_copy(&dst, NULL, 0), DLPACKSHIM_ERR_INVALID_ARGUMENT, "src is NULL");
#ifndef COPY_WITHOUT_SSE2 /* devices are copy_plan.c's, which that program leaves out */
  /* Memory no one can reach from here (OpenCL): refused on either side. */
  src.device.device_type = kDLOpenCL;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_UNSUPPORTED,
              "cannot read memory of device type 4");
  src.device.device_type = kDLCPU;
  dst.device.device_type = kDLOpenCL;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_UNSUPPORTED,
              "cannot write memory of device type 4");
  dst.device.device_type = kDLCPU;
  /* GPU memory is dlpackshim_copy's too now (it replaced dlpackshim_device_copy):
   * main() pointed DLPACKSHIM_LIBCUDA at nothing, so the runtime is missing. */
  src.device.device_type = kDLCUDA;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_DEVICE, "CUDA driver not found");
#endif
  src.device.device_type = kDLCUDAManaged; /* host-accessible: no runtime needed */
  CHECK_OK(dlpackshim_copy(&dst, &src, 0));
  CHECK_OK(dlpackshim_copy(&dst, &src, 12345)); /* a host copy ignores the stream */
  int64_t bad[2] = {3, -4};
  src.shape = bad;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_INVALID_TENSOR,
              "src: shape[1] is -4");
  src.shape = s34;
  dst.data = NULL;
  CHECK_FAILS(dlpackshim_copy(&dst, &src, 0), DLPACKSHIM_ERR_INVALID_TENSOR, "dst: data is NULL");
}

int main(void) {
  /* No real GPU runtime may answer for kDLCUDA here (test_gpu has fakes). */
  setenv("DLPACKSHIM_LIBCUDA", "/nonexistent/dlpackshim-test/libcuda.so.1", 1);
  test_random_layouts_match_the_reference();
  test_transposes_of_every_itemsize();
  test_permutation_with_a_short_fastest_dim();
  test_0d_and_empty();
  test_unused_strides_may_be_anything();
  test_copy_onto_itself_is_a_no_op();
  test_packed_sub_byte();
  test_rejections_name_the_mismatch();
  return check_done("test_copy");
}
