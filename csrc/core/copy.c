/*
 * copy.c - element-wise copy between two host-accessible tensors.
 *
 * The plan, cheapest first: describe both tensors as (extent, dst stride, src
 * stride) triples in bytes, drop extent-1 dims, order the dims by the
 * destination's memory order and merge dims that are contiguous with each
 * other in both. Then: one memcpy; a memcpy per row; a cache-blocked 2-D tile
 * copy when the two tensors' fastest dims differ (transposes; on x86-64 its
 * 4- and 8-byte tiles turn whole blocks in registers); else a strided
 * element loop. Outer dims are walked by an odometer, never by recursion.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* the blocks of a transpose (x86-64's baseline) */
#endif

#include "internal.h"

/* A non-empty tensor has at most 63 dims of extent >= 2 (2^63 elements). */
enum { SHIM_MAXD = 64 };

typedef struct {
  int64_t n, ds, ss; /* extent, dst and src byte strides */
} shim_dim;

/* Walks every index of dims[0..nd) (dims[0] fastest), moving both pointers. */
typedef struct {
  int nd;
  shim_dim dims[SHIM_MAXD];
  int64_t idx[SHIM_MAXD];
} shim_odometer;

static inline int shim_odometer_next(shim_odometer *o, char **d, const char **s) {
  for (int k = 0; k < o->nd; k++) {
    const shim_dim *m = &o->dims[k];
    if (++o->idx[k] < m->n) {
      *d += m->ds;
      *s += m->ss;
      return 1;
    }
    o->idx[k] = 0;
    *d -= m->ds * (m->n - 1);
    *s -= m->ss * (m->n - 1);
  }
  return 0;
}

/* The dims of dims[0..nd) other than skip_a and skip_b, for the outer loop. */
static void shim_odometer_init(shim_odometer *o, const shim_dim *dims, int nd, int skip_a,
                               int skip_b) {
  o->nd = 0;
  for (int k = 0; k < nd; k++) {
    if (k == skip_a || k == skip_b) continue;
    o->dims[o->nd] = dims[k];
    o->idx[o->nd++] = 0;
  }
}

static int64_t shim_abs(int64_t v) { return v < 0 ? -v : v; }

/* Byte strides of the non-trivial dims, innermost first, merged where both
 * tensors allow. Returns the number of dims (0: a single element). */
static int shim_plan(const DLTensor *dst, const DLTensor *src, int64_t itemsize, shim_dim *out) {
  shim_dim dims[SHIM_MAXD];
  int nd = 0;
  int64_t dc = itemsize, sc = itemsize; /* compact strides when strides are NULL */
  for (int32_t i = dst->ndim - 1; i >= 0; i--) {
    int64_t n = dst->shape[i];
    if (n == 1) continue; /* its stride is never used, and may be anything */
    /* Validation bounded (n - 1) * stride * itemsize, so these fit. */
    dims[nd].n = n;
    dims[nd].ds = dst->strides ? dst->strides[i] * itemsize : dc;
    dims[nd].ss = src->strides ? src->strides[i] * itemsize : sc;
    dc *= n; /* bounded by the validated byte count */
    sc *= n;
    nd++;
  }
  /* Insertion sort into the destination's memory order (smallest |ds| first,
   * ties by |ss|): an element-wise copy may visit elements in any order. */
  for (int i = 1; i < nd; i++) {
    shim_dim x = dims[i];
    int j = i - 1;
    while (j >= 0 && (shim_abs(dims[j].ds) > shim_abs(x.ds) ||
                      (shim_abs(dims[j].ds) == shim_abs(x.ds) &&
                       shim_abs(dims[j].ss) > shim_abs(x.ss)))) {
      dims[j + 1] = dims[j];
      j--;
    }
    dims[j + 1] = x;
  }
  /* Merge an outer dim into the inner one when it continues it in both. */
  int m = 0;
  for (int i = 0; i < nd; i++) {
    int64_t dn, sn;
    if (m > 0 && !__builtin_mul_overflow(out[m - 1].ds, out[m - 1].n, &dn) &&
        !__builtin_mul_overflow(out[m - 1].ss, out[m - 1].n, &sn) && dims[i].ds == dn &&
        dims[i].ss == sn) {
      out[m - 1].n *= dims[i].n;
      continue;
    }
    out[m++] = dims[i];
  }
  return m;
}

/* One strided run of n elements of `size` bytes; DS is dst's step, a
 * constant where dst is compact (a clone), which lets the compiler unroll
 * the loop: 1 MiB float32 every 2nd element, in cache, 61 us against 69. */
#define SHIM_RUN(T, DS)                             \
  _Pragma("GCC unroll 8")                           \
  for (int64_t i = 0; i < n; i++) {                 \
    T v;                                            \
    memcpy(&v, s + i * ss, sizeof v);               \
    memcpy(d + i * (DS), &v, sizeof v);             \
  }

typedef struct {
  uint64_t a, b;
} shim_u128;

static void shim_copy_strided(char *d, const char *s, const shim_dim *dims, int nd,
                              int64_t size) {
  shim_odometer o;
  shim_odometer_init(&o, dims, nd, 0, -1);
  const int64_t n = dims[0].n, ds = dims[0].ds, ss = dims[0].ss;
  do {
    if (ds == size) {
      switch (size) {
        case 1: SHIM_RUN(uint8_t, 1) break;
        case 2: SHIM_RUN(uint16_t, 2) break;
        case 4: SHIM_RUN(uint32_t, 4) break;
        case 8: SHIM_RUN(uint64_t, 8) break;
        case 16: SHIM_RUN(shim_u128, 16) break;
        default:
          for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, (size_t)size);
      }
      continue;
    }
    switch (size) {
      case 1: SHIM_RUN(uint8_t, ds) break;
      case 2: SHIM_RUN(uint16_t, ds) break;
      case 4: SHIM_RUN(uint32_t, ds) break;
      case 8: SHIM_RUN(uint64_t, ds) break;
      case 16: SHIM_RUN(shim_u128, ds) break;
      default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, (size_t)size);
    }
  } while (shim_odometer_next(&o, &d, &s));
}

/* Contiguous rows of `row` bytes in both tensors. */
static void shim_copy_rows(char *d, const char *s, const shim_dim *dims, int nd, size_t row) {
  shim_odometer o;
  shim_odometer_init(&o, dims, nd, 0, -1);
  do memcpy(d, s, row);
  while (shim_odometer_next(&o, &d, &s));
}

/* A tile of the 2-D copy over (c: dst's fastest dim, r: src's fastest):
 * what it reads and writes stays in cache while it is done. Tiles are 16
 * columns by up to 64 rows (256 bytes of a row of src): each column reads
 * its own src line, and power-of-two row strides put those lines in a few
 * cache sets, so few columns at once, each reused for many rows. Measured
 * on 4096x4096 float32 .T (2026-11-27): 16x64 copies in 13 ms, 64x64 in
 * 28 ms, 32x32 in 18 ms; uint8, float64 and complex128 likewise. The
 * inner loop is unrolled, with a constant step when dst is compact (a
 * clone): 512x512 float32 .T, in cache, 61 us against 183 us. */
#define SHIM_TILE_LOOP(T, DCS, RA, RB, CA, CB)                          \
  for (int64_t r0 = (RA); r0 < (RB); r0 += tr) {                        \
    const int64_t r1 = r0 + tr < (RB) ? r0 + tr : (RB);                 \
    for (int64_t c0 = (CA); c0 < (CB); c0 += tc) {                      \
      const int64_t c1 = c0 + tc < (CB) ? c0 + tc : (CB);               \
      for (int64_t r = r0; r < r1; r++) {                               \
        char *dp = d + r * dr;                                          \
        const char *sp = s + r * sr;                                    \
        _Pragma("GCC unroll 8")                                         \
        for (int64_t c = c0; c < c1; c++) {                             \
          T v;                                                          \
          memcpy(&v, sp + c * sc, sizeof v);                            \
          memcpy(dp + c * (DCS), &v, sizeof v);                         \
        }                                                               \
      }                                                                 \
    }                                                                   \
  }

#if defined(__SSE2__)
/* Whole 4x4 blocks of 4-byte elements (2x2 of 8-byte ones) turned in
 * registers: one 16-byte load per src row and one store per dst row, where
 * the scalar loop moves element by element. Both tensors must be compact
 * along their own fastest dim (dcs == sr == size: every clone of a
 * transpose). 128x128 float32 .T, in cache, 3.3 us -> 1.4 us; 32x32 0.23
 * -> 0.12 us. Other machines keep the scalar loop. */
#define SHIM_LD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define SHIM_ST(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

static void shim_tile_blocks(char *d, const char *s, int64_t r0, int64_t r1, int64_t c0,
                             int64_t c1, int64_t dr, int64_t sc, int64_t size) {
  const int64_t k = size == 4 ? 4 : 2; /* the block's side */
  for (int64_t r = r0; r < r1; r += k) {
    const char *sp = s + c0 * sc + r * size; /* src row c: elements r .. r+k-1 */
    char *dp = d + r * dr + c0 * size;       /* dst row r: elements c .. c+k-1 */
    if (size == 4)
      for (int64_t c = c0; c < c1; c += 4, sp += 4 * sc, dp += 16) {
        __m128i a = SHIM_LD(sp), b = SHIM_LD(sp + sc), e = SHIM_LD(sp + 2 * sc),
                f = SHIM_LD(sp + 3 * sc);
        __m128i ab0 = _mm_unpacklo_epi32(a, b), ef0 = _mm_unpacklo_epi32(e, f);
        __m128i ab1 = _mm_unpackhi_epi32(a, b), ef1 = _mm_unpackhi_epi32(e, f);
        SHIM_ST(dp, _mm_unpacklo_epi64(ab0, ef0));
        SHIM_ST(dp + dr, _mm_unpackhi_epi64(ab0, ef0));
        SHIM_ST(dp + 2 * dr, _mm_unpacklo_epi64(ab1, ef1));
        SHIM_ST(dp + 3 * dr, _mm_unpackhi_epi64(ab1, ef1));
      }
    else
      for (int64_t c = c0; c < c1; c += 2, sp += 2 * sc, dp += 16) {
        __m128i a = SHIM_LD(sp), b = SHIM_LD(sp + sc);
        SHIM_ST(dp, _mm_unpacklo_epi64(a, b));
        SHIM_ST(dp + dr, _mm_unpackhi_epi64(a, b));
      }
  }
}
#endif

static void shim_copy_tiled(char *d, const char *s, const shim_dim *dims, int nd, int rdim,
                            int64_t size) {
  shim_odometer o;
  shim_odometer_init(&o, dims, nd, 0, rdim);
  const int64_t nc = dims[0].n, dcs = dims[0].ds, sc = dims[0].ss;
  const int64_t nr = dims[rdim].n, dr = dims[rdim].ds, sr = dims[rdim].ss;
  /* Fewer rows than a tile has (a 3-D permutation whose src-fastest dim is
   * short): longer columns, at least 256 elements a tile; 4x2048x2048
   * float32 permuted (2,0,1): 8.9 ms -> 6.8 ms. */
  const int64_t tr = 256 / size < 64 ? 256 / size : 64;
  const int64_t tc = nr >= 16 ? 16 : 256 / nr; /* nr >= 4 here */
  do {
#if defined(__SSE2__)
    if ((size == 4 || size == 8) && dcs == size && sr == size) {
      /* Whole blocks in tiles of 64 rows by 128 bytes of a dst row (wider
       * than the scalar loop's: 4096x4096 float32 .T 4.5 -> 6.0 GB/s, 2048
       * 5.1 -> 6.3, float64 4.4 -> 6.8; 16 columns read 3.9), then the edges,
       * thinner than a block, by the scalar loop. */
      const int64_t k = 16 / size, nrb = nr - nr % k, ncb = nc - nc % k;
      const int64_t tcb = nr >= 16 ? 128 / size : tc - tc % k; /* tc >= 16 */
      for (int64_t r0 = 0; r0 < nrb; r0 += 64)
        for (int64_t c0 = 0; c0 < ncb; c0 += tcb)
          shim_tile_blocks(d, s, r0, r0 + 64 < nrb ? r0 + 64 : nrb, c0,
                           c0 + tcb < ncb ? c0 + tcb : ncb, dr, sc, size);
      if (size == 4) {
        SHIM_TILE_LOOP(uint32_t, 4, 0, nrb, ncb, nc)
        SHIM_TILE_LOOP(uint32_t, 4, nrb, nr, 0, nc)
      } else {
        SHIM_TILE_LOOP(uint64_t, 8, 0, nrb, ncb, nc)
        SHIM_TILE_LOOP(uint64_t, 8, nrb, nr, 0, nc)
      }
      continue;
    }
#endif
    if (dcs == size) { /* a compact destination (a clone): a constant step */
      switch (size) {
        case 1: SHIM_TILE_LOOP(uint8_t, 1, 0, nr, 0, nc) break;
        case 2: SHIM_TILE_LOOP(uint16_t, 2, 0, nr, 0, nc) break;
        case 4: SHIM_TILE_LOOP(uint32_t, 4, 0, nr, 0, nc) break;
        case 8: SHIM_TILE_LOOP(uint64_t, 8, 0, nr, 0, nc) break;
        default: SHIM_TILE_LOOP(shim_u128, 16, 0, nr, 0, nc) break; /* only 16 gets here */
      }
      continue;
    }
    switch (size) {
      case 1: SHIM_TILE_LOOP(uint8_t, dcs, 0, nr, 0, nc) break;
      case 2: SHIM_TILE_LOOP(uint16_t, dcs, 0, nr, 0, nc) break;
      case 4: SHIM_TILE_LOOP(uint32_t, dcs, 0, nr, 0, nc) break;
      case 8: SHIM_TILE_LOOP(uint64_t, dcs, 0, nr, 0, nc) break;
      default: SHIM_TILE_LOOP(shim_u128, dcs, 0, nr, 0, nc) break;
    }
  } while (shim_odometer_next(&o, &d, &s));
}

/* Copies between two validated tensors whose spans do not overlap. */
static void shim_copy_planned(char *d, const char *s, const DLTensor *dst, const DLTensor *src,
                              int64_t itemsize) {
  shim_dim dims[SHIM_MAXD];
  int nd = shim_plan(dst, src, itemsize, dims);
  if (nd == 0) {
    memcpy(d, s, (size_t)itemsize);
    return;
  }
  if (dims[0].ds == itemsize && dims[0].ss == itemsize) {
    shim_copy_rows(d, s, dims, nd, (size_t)(dims[0].n * itemsize));
    return;
  }
  /* Tile when src's fastest dim is another dim than dst's (a transpose). */
  int r = -1;
  for (int k = 1; k < nd; k++)
    if (r < 0 || shim_abs(dims[k].ss) < shim_abs(dims[r].ss)) r = k;
  if (r > 0 && shim_abs(dims[r].ss) < shim_abs(dims[0].ss) && dims[0].n >= 4 &&
      dims[r].n >= 4 && (itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8 ||
                         itemsize == 16)) {
    shim_copy_tiled(d, s, dims, nd, r, itemsize);
    return;
  }
  shim_copy_strided(d, s, dims, nd, itemsize);
}

/* Re-records the last error with "name: " in front. */
static int shim_blame(int rc, const char *name) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dlpackshim_last_error());
  return shim_fail(rc, "%s: %s", name, msg);
}

int shim_copy_inspect(const DLTensor *t, const char *name, uint64_t flags, shim_info *info) {
  if (!t) return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT, "copy: %s is NULL", name);
  /* Validate as padded first so a strided packed tensor is reported as
   * unsupported here rather than invalid. */
  int rc = shim_inspect(t, flags | DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED, info);
  if (rc) return shim_blame(rc, name);
  if (info->elem_bits % 8 != 0 && !(flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED)) {
    if (info->numel > 0 && !shim_is_compact(t->ndim, t->shape, t->strides))
      return shim_fail(DLPACKSHIM_ERR_UNSUPPORTED,
                       "copy: %s has packed sub-byte dtype (code %u, bits %u, lanes %u) with "
                       "non-compact strides",
                       name, t->dtype.code, t->dtype.bits, t->dtype.lanes);
    rc = shim_inspect(t, flags, info);
    if (rc) return shim_blame(rc, name);
  }
  return DLPACKSHIM_OK;
}

int shim_copy_match(const DLTensor *dst, const DLTensor *src) {
  if (dst->ndim != src->ndim)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "copy: dst.ndim is %" PRId32 " but src.ndim is %" PRId32, dst->ndim,
                     src->ndim);
  for (int32_t i = 0; i < dst->ndim; i++)
    if (dst->shape[i] != src->shape[i])
      return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                       "copy: dst.shape[%" PRId32 "] is %" PRId64 " but src.shape[%" PRId32
                       "] is %" PRId64,
                       i, dst->shape[i], i, src->shape[i]);
  if (dst->dtype.code != src->dtype.code || dst->dtype.bits != src->dtype.bits ||
      dst->dtype.lanes != src->dtype.lanes)
    return shim_fail(DLPACKSHIM_ERR_INVALID_ARGUMENT,
                     "copy: dst.dtype (code %u, bits %u, lanes %u) differs from src.dtype "
                     "(code %u, bits %u, lanes %u)",
                     dst->dtype.code, dst->dtype.bits, dst->dtype.lanes, src->dtype.code,
                     src->dtype.bits, src->dtype.lanes);
  return DLPACKSHIM_OK;
}

void shim_copy_fresh(const DLTensor *dst, const DLTensor *src, const shim_info *si) {
  if (si->numel == 0) return;
  const char *s = (const char *)src->data + src->byte_offset;
  if (si->itemsize == 0) /* packed sub-byte, compact (inspected so): the bytes */
    memcpy(dst->data, s, (size_t)si->nbytes);
  else
    shim_copy_planned(dst->data, s, dst, src, si->itemsize);
}

int shim_copy(const DLTensor *dst, const DLTensor *src, uint64_t flags) {
  shim_info di, si;
  int rc = shim_copy_inspect(dst, "dst", flags, &di);
  if (!rc) rc = shim_check_host(dst, "copy", "dst");
  if (!rc) rc = shim_copy_inspect(src, "src", flags, &si);
  if (!rc) rc = shim_check_host(src, "copy", "src");
  if (!rc) rc = shim_copy_match(dst, src);
  if (rc) return rc;
  if (si.numel == 0) return DLPACKSHIM_OK;

  char *d = (char *)dst->data + dst->byte_offset;
  const char *s = (const char *)src->data + src->byte_offset;
  if (si.itemsize == 0) { /* packed sub-byte, both compact: the bytes are the elements */
    const size_t last = (size_t)si.nbytes - 1;
    const unsigned mask = shim_packed_tail_mask(&si); /* 0: the whole last byte */
    const unsigned char s_last = (unsigned char)s[last], d_last = (unsigned char)d[last];
    memmove(d, s, (size_t)si.nbytes);
    if (mask) d[last] = (char)((d_last & ~mask) | (s_last & mask));
    return DLPACKSHIM_OK;
  }
  /* Overlapping spans (possibly interleaved views of one buffer): go
   * through a compact temporary so that no element is read after it was
   * overwritten. */
  uintptr_t dlo = (uintptr_t)d + (uintptr_t)di.lo, dhi = (uintptr_t)d + (uintptr_t)di.hi;
  uintptr_t slo = (uintptr_t)s + (uintptr_t)si.lo, shi = (uintptr_t)s + (uintptr_t)si.hi;
  if (dlo < shi && slo < dhi) {
    if ((uint64_t)si.nbytes > SIZE_MAX) return shim_fail(DLPACKSHIM_ERR_NO_MEMORY, "copy: overlap buffer too large");
    void *tmp = shim_data_alloc((size_t)si.nbytes);
    if (!tmp)
      return shim_fail(DLPACKSHIM_ERR_NO_MEMORY,
                       "copy: dst overlaps src and %" PRId64 " bytes for a staging copy are not available",
                       si.nbytes);
    DLTensor t = *src;
    t.data = tmp;
    t.strides = NULL;
    t.byte_offset = 0;
    shim_copy_planned(tmp, s, &t, src, si.itemsize);
    shim_copy_planned(d, tmp, dst, &t, si.itemsize);
    free(tmp);
    return DLPACKSHIM_OK;
  }
  shim_copy_planned(d, s, dst, src, si.itemsize);
  return DLPACKSHIM_OK;
}
