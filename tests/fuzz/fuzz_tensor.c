/*
 * fuzz_tensor.c - libFuzzer harness for the tensor-inspection and copy API.
 *
 * Decodes the input into a DLTensor with hostile field values (ndim, shape,
 * strides, dtype, device, byte_offset, flags, data pointer), then checks:
 *   - validate / numel / itemsize / nbytes / layout / byte_span /
 *     compact_strides against a reference computed here in 128-bit
 *     arithmetic (a real oracle, not just "no crash"), and against each
 *     other; every call's status, and
 *     that a failing call leaves its out-parameters alone (a NULL one is
 *     DLPACKSHIM_ERR_INVALID_ARGUMENT);
 *   - dlpackshim_copy into several destination layouts, compared with a naive
 *     gather, with guard bytes around every element the copy may not touch;
 *   - tensor_new / tensor_new_legacy / tensor_free / tensor_clone;
 *   - negotiate_version against the rule in dlpackshim.h.
 * Any disagreement prints the decoded tensor and aborts.
 *
 * Honesty: the library promises to read at most ndim entries of shape and
 * strides, so both arrays are heap blocks of exactly ndim entries (ASan flags
 * a read past them) for ndim up to FUZZ_NDIM_LIMIT; a larger ndim is beyond
 * the documented range and must be rejected before shape is read, so it gets
 * FUZZ_NDIM_LIMIT entries. Memory is only dereferenced by the library when
 * byte_span says it lies inside the buffer that we allocated.
 *
 * Input layout (short inputs read as zero / the defaults named below):
 *   u8   ndim code: 0x00-0xDF -> code & 15; 0xE0-0xFF -> kNdimSpecial[]
 *   u8   bits: 0 shape NULL, 1 strides NULL, 2 tensor NULL,
 *        3-5 data: 0-3 buffer + data_off, 4 NULL, 5 top of the address
 *        space, 6 bottom of the address space, 7 one past the buffer
 *   u8   dtype code, u8 dtype bits, u16 dtype lanes
 *   i32  device_type, i32 device_id, u16 data_off
 *   num  byte_offset (bias 0)
 *   u8   flags: bit 7 set -> 8 raw flag bytes follow, else the low 7 bits
 *   u8   destination of the copy: mode % 9 (see check_copy), mode / 9 the
 *        position of an overlapping destination (see check_copy_overlap)
 *   num  x4 versions for negotiate_version (bias 0)
 *   u8   seed of the data pattern
 *   num  x ndim extents (bias 0, default 1), num x ndim strides (bias 0x70,
 *        default 1)
 * where a "num" is one byte t: t < 0xE0 -> t - bias, 0xE0-0xFE ->
 * kSpecial[t - 0xE0], 0xFF -> 8 raw little-endian bytes follow.
 * tests/fuzz/make_corpus.py writes seeds in this layout.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlpackshim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if !defined(__SIZEOF_INT128__)
/* The reference arithmetic needs 128-bit integers (gcc and clang on 64-bit). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)data;
  (void)size;
  return 0;
}
#else

typedef __int128 i128;

enum {
  FUZZ_BUF_SIZE = 8192,                        /* the source buffer */
  FUZZ_NDIM_LIMIT = DLPACKSHIM_MAX_NDIM + 16,  /* real entries up to here */
  FUZZ_COPY_LIMIT = 1 << 20                    /* bytes a copy may produce */
};

static const int64_t kSpecial[31] = {
    0,          1,          -1,         2,          -2,
    INT64_MAX,  INT64_MIN,  INT64_MAX - 1,          INT64_MIN + 1,
    INT32_MAX,  INT32_MIN,  UINT32_MAX, INT64_C(1) << 32,
    INT64_C(1) << 62,       -(INT64_C(1) << 62),    INT64_C(1) << 61,
    INT64_C(1) << 60,       INT64_C(3037000499),    INT64_C(3037000500),
    INT64_C(1) << 40,       -(INT64_C(1) << 40),    255,
    256,        65535,      65536,      1023,       1024,
    1025,       INT64_MAX / 8,          4096,       -4096};

static const int32_t kNdimSpecial[32] = {
    -1,   -2,   INT32_MIN, INT32_MIN + 1, INT32_MAX, 1023, 1024, 1025,
    1026, 1040, FUZZ_NDIM_LIMIT, FUZZ_NDIM_LIMIT + 1, 2048, 65536, 1 << 30, 16,
    17,   24,   31,   32,   33,   63,   64,   65,
    100,  128,  255,  256,  512,  1000, -1024, -65536};

/* ---- input decoding ------------------------------------------------ */

typedef struct {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t rd_u8(reader *r, uint8_t dflt) {
  if (!r->n) return dflt;
  r->n--;
  return *r->p++;
}

static uint64_t rd_raw(reader *r, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; i++) v |= (uint64_t)rd_u8(r, 0) << (8 * i);
  return v;
}

static int64_t rd_num(reader *r, int64_t bias, uint8_t dflt) {
  uint8_t t = rd_u8(r, dflt);
  if (t < 0xE0) return (int64_t)t - bias;
  if (t < 0xFF) return kSpecial[t - 0xE0];
  return (int64_t)rd_raw(r, 8);
}

/* ---- failure reporting --------------------------------------------- */

static const DLTensor *g_tensor; /* what the report prints */
static uint64_t g_flags;

static void dump_tensor(const char *name, const DLTensor *t, uint64_t flags) {
  if (!t) {
    fprintf(stderr, "  %s: NULL\n", name);
    return;
  }
  fprintf(stderr,
          "  %s: data=%p device=(%d,%" PRId32 ") ndim=%" PRId32 " dtype=(%u,%u,%u) "
          "byte_offset=%" PRIu64 " flags=0x%" PRIx64 "\n",
          name, t->data, (int)t->device.device_type, t->device.device_id, t->ndim, t->dtype.code,
          t->dtype.bits, t->dtype.lanes, t->byte_offset, flags);
  int32_t n = t->ndim < 0 ? 0 : t->ndim > 16 ? 16 : t->ndim;
  if (t->shape) {
    fprintf(stderr, "    shape  =");
    for (int32_t i = 0; i < n; i++) fprintf(stderr, " %" PRId64, t->shape[i]);
    fprintf(stderr, "%s\n", n < t->ndim ? " ..." : "");
  }
  if (t->strides) {
    fprintf(stderr, "    strides=");
    for (int32_t i = 0; i < n; i++) fprintf(stderr, " %" PRId64, t->strides[i]);
    fprintf(stderr, "%s\n", n < t->ndim ? " ..." : "");
  }
}

#define FAIL(...)                                                               \
  do {                                                                          \
    fprintf(stderr, "fuzz_tensor: oracle mismatch at %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                               \
    fprintf(stderr, "\n  last_error: %s\n", dlpackshim_last_error());           \
    dump_tensor("tensor", g_tensor, g_flags);                                   \
    abort();                                                                    \
  } while (0)

#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) FAIL(__VA_ARGS__); \
  } while (0)

/* A failing call must leave its status and a message for this thread. */
static void check_failure(int64_t rc, const char *what) {
  if (rc >= 0) return;
  CHECK(rc >= INT32_MIN, "%s returned %" PRId64 ", not a status", what, rc);
  CHECK(dlpackshim_last_status() == (int)rc, "%s returned %" PRId64 " but last_status is %d",
        what, rc, dlpackshim_last_status());
  const char *msg = dlpackshim_last_error();
  CHECK(msg && msg[0] && strlen(msg) < 4096, "%s failed without a message", what);
  const char *s = dlpackshim_strerror((int)rc);
  CHECK(s && s[0], "strerror(%" PRId64 ") is empty", rc);
}

/* What an int64_t out-parameter holds before the call: no function may
 * produce it (results are >= 0), and a failing one must leave it. */
#define FUZZ_UNTOUCHED (INT64_MIN + 12345)

/* The result of a measuring call (status rc, value *out_p) as one number: the
 * value, or the negative status; checks the out-parameter contract. */
static int64_t value_or_status(int rc, const int64_t *out_p, const char *what) {
  const int64_t out = *out_p; /* read after the call (argument order is unspecified) */
  check_failure(rc, what);
  CHECK(rc <= 0, "%s returned %d, not 0 or a negative status", what, rc);
  if (rc < 0) {
    CHECK(out == FUZZ_UNTOUCHED, "%s failed (%d) but wrote %" PRId64 " to its out-parameter",
          what, rc, out);
    return rc;
  }
  CHECK(out >= 0, "%s succeeded with %" PRId64, what, out);
  return out;
}

/* NumPy's C_CONTIGUOUS, as dlpackshim_tensor_layout's C bit; -1 on failure. */
static int c_contiguous(const DLTensor *t) {
  int32_t layout = -77;
  int rc = dlpackshim_tensor_layout(t, &layout);
  check_failure(rc, "layout");
  if (rc != 0) return -1;
  return (layout & DLPACKSHIM_LAYOUT_C) != 0;
}

/* ---- the reference ---------------------------------------------------- */

typedef struct {
  int shape_ok;    /* ndim in range, shape present, extents >= 0 */
  int empty;       /* some extent is 0 */
  i128 numel;      /* exact; saturates just above INT64_MAX */
  int numel_fits;  /* numel <= INT64_MAX (always true when empty) */
  int compact;     /* NumPy's C-contiguity (valid only when shape_ok) */
  int strides_overflow; /* compact strides (zero extents as 1) overflow int64:
                           only an empty tensor can have them, and no explicit
                           compact strides exist for it */
} ref_shape;

static ref_shape reference_shape(const DLTensor *t) {
  ref_shape r = {0, 0, 1, 1, 1, 0};
  if (t->ndim < 0 || t->ndim > DLPACKSHIM_MAX_NDIM) return r;
  if (t->ndim > 0 && !t->shape) return r;
  for (int32_t i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) return r;
    if (t->shape[i] == 0) r.empty = 1;
    r.numel *= t->shape[i];
    if (r.numel > (i128)INT64_MAX) r.numel = (i128)INT64_MAX + 1;
  }
  r.shape_ok = 1;
  i128 s = 1; /* the stride of dim 0 is the largest */
  for (int32_t i = t->ndim - 1; i > 0; i--) {
    if (t->shape[i] > 1) s *= t->shape[i];
    if (s > (i128)INT64_MAX) {
      r.strides_overflow = 1;
      break;
    }
  }
  if (r.empty) r.numel = 0;
  r.numel_fits = r.numel <= (i128)INT64_MAX;
  if (t->strides && !r.empty && r.numel_fits) { /* then every partial product fits */
    i128 expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] == 1) continue;
      if (t->strides[i] != expected) r.compact = 0;
      expected *= t->shape[i];
    }
  }
  return r;
}

/* dlpackshim_compact_strides of t's ndim and shape, in both orders: the
 * strides computed here in 128-bit arithmetic, or the status they call for
 * with every entry of the out array (exactly ndim of them) left alone. */
static void check_compact_strides(const DLTensor *t) {
  const int32_t ndim = t->ndim;
  const int in_range = ndim >= 0 && ndim <= DLPACKSHIM_MAX_NDIM;
  const size_t n = in_range && ndim > 0 ? (size_t)ndim : 1;
  int64_t *out = malloc(n * sizeof *out);
  i128 *want = malloc(n * sizeof *want);
  if (!out || !want) abort();
  for (int fortran = 0; fortran < 2; fortran++) {
    int want_rc = 0;
    if (!in_range || (ndim > 0 && !t->shape)) {
      want_rc = DLPACKSHIM_ERR_INVALID_ARGUMENT;
    } else {
      for (int32_t i = 0; i < ndim && !want_rc; i++)
        if (t->shape[i] < 0) want_rc = DLPACKSHIM_ERR_INVALID_TENSOR;
      i128 stride = 1; /* saturates just above INT64_MAX */
      for (int32_t k = 0; k < ndim && !want_rc; k++) {
        int32_t i = fortran ? k : ndim - 1 - k;
        want[i] = stride;
        if (stride > (i128)INT64_MAX) want_rc = DLPACKSHIM_ERR_INVALID_TENSOR;
        if (t->shape[i] > 1) stride *= t->shape[i];
        if (stride > (i128)INT64_MAX) stride = (i128)INT64_MAX + 1;
      }
    }
    for (size_t i = 0; i < n; i++) out[i] = FUZZ_UNTOUCHED;
    int rc = dlpackshim_compact_strides(ndim, t->shape,
                                        fortran ? DLPACKSHIM_LAYOUT_F : DLPACKSHIM_LAYOUT_C, out);
    check_failure(rc, "compact_strides");
    CHECK(rc == want_rc, "compact_strides (%s order) gave %d, expected %d", fortran ? "F" : "C",
          rc, want_rc);
    for (size_t i = 0; i < n; i++) {
      if (rc != 0 || ndim == 0)
        CHECK(out[i] == FUZZ_UNTOUCHED, "compact_strides failed (%d) but wrote %" PRId64
              " to strides_out[%zu]", rc, out[i], i);
      else if (rc == want_rc)
        CHECK(out[i] == (int64_t)want[i], "compact_strides[%zu] %" PRId64 ", expected %" PRId64,
              i, out[i], (int64_t)want[i]);
    }
  }
  free(out);
  free(want);
}

static int known_device(int32_t d) { return (d >= 1 && d <= 4) || (d >= 7 && d <= kDLAscend); }

static int host_device(int32_t d) {
  return d == kDLCPU || d == kDLCUDAHost || d == kDLROCMHost || d == kDLCUDAManaged;
}

/* dtypes every DLPack consumer knows, one byte or more per element. */
static int common_byte_dtype(DLDataType dt) {
  if (dt.lanes != 1) return 0;
  switch (dt.code) {
    case kDLInt:
    case kDLUInt: return dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case kDLFloat: return dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case kDLBfloat: return dt.bits == 16;
    case kDLComplex: return dt.bits == 64 || dt.bits == 128;
    case kDLBool: return dt.bits == 8;
    default: return dt.code >= kDLFloat8_e3m4 && dt.code <= kDLFloat8_e8m0fnu && dt.bits == 8;
  }
}

/* Sub-byte dtypes of dlpack.h 1.3 (packed unless the PADDED flag is set). */
static int common_subbyte_dtype(DLDataType dt) {
  if (dt.lanes != 1) return 0;
  switch (dt.code) {
    case kDLInt:
    case kDLUInt: return dt.bits == 1 || dt.bits == 2 || dt.bits == 4;
    case kDLBool: return dt.bits == 1;
    case kDLFloat4_e2m1fn: return dt.bits == 4;
    case kDLFloat6_e2m3fn:
    case kDLFloat6_e3m2fn: return dt.bits == 6;
    default: return 0;
  }
}

/* The byte span of a tensor with valid shape, given its item size. */
static void reference_span(const DLTensor *t, const ref_shape *rs, int64_t itemsize, i128 nbytes,
                           i128 *lo, i128 *hi) {
  *lo = *hi = 0;
  if (rs->empty) return;
  if (itemsize == 0 || !t->strides) {
    *hi = nbytes;
    return;
  }
  for (int32_t i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 1) continue;
    /* Clamped at 2^64 before the item size: the sum stays far from i128's limits. */
    i128 step = (i128)(t->shape[i] - 1) * t->strides[i];
    if (step > ((i128)1 << 64)) step = (i128)1 << 64;
    if (step < -((i128)1 << 64)) step = -((i128)1 << 64);
    step *= itemsize;
    if (step < 0)
      *lo += step;
    else
      *hi += step;
  }
  *hi += itemsize;
}

static int fits64(i128 v) { return v >= (i128)INT64_MIN && v <= (i128)INT64_MAX; }

/* Everything the oracle knows about one (tensor, flags) pair. */
typedef struct {
  ref_shape rs;
  int64_t numel, itemsize, nbytes; /* library results (negative: status) */
  int validate;                    /* library result */
  int64_t lo, hi;                  /* byte_span result when validate == 0 */
  int in_buffer;                   /* validate == 0 and the span lies in [buf, buf + size) */
} facts;

static void check_measurements(const DLTensor *t, uint64_t flags, const uint8_t *buf,
                               size_t bufsize, facts *f) {
  const DLTensor *saved = g_tensor;
  uint64_t saved_flags = g_flags;
  g_tensor = t;
  g_flags = flags;
  memset(f, 0, sizeof *f);
  ref_shape rs = reference_shape(t);
  f->rs = rs;

  /* numel */
  int64_t out = FUZZ_UNTOUCHED;
  int64_t numel = value_or_status(dlpackshim_tensor_numel(t, &out), &out, "numel");
  f->numel = numel;
  CHECK(dlpackshim_tensor_numel(t, NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "numel accepted numel_out == NULL");
  if (!rs.shape_ok) {
    CHECK(numel == DLPACKSHIM_ERR_INVALID_TENSOR, "numel of a bad shape gave %" PRId64, numel);
  } else if (!rs.numel_fits) {
    CHECK(numel == DLPACKSHIM_ERR_INVALID_TENSOR, "numel overflowing int64 gave %" PRId64,
          numel);
  } else {
    CHECK(numel == (int64_t)rs.numel, "numel %" PRId64 ", expected %" PRId64, numel,
          (int64_t)rs.numel);
  }

  /* itemsize */
  out = FUZZ_UNTOUCHED;
  int64_t itemsize = value_or_status(dlpackshim_tensor_itemsize(t, flags, &out), &out, "itemsize");
  f->itemsize = itemsize;
  CHECK(dlpackshim_tensor_itemsize(t, flags, NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "itemsize accepted itemsize_out == NULL");
  int64_t elem_bits = (int64_t)t->dtype.bits * t->dtype.lanes;
  if (itemsize >= 0) {
    int64_t want = elem_bits % 8 == 0 ? elem_bits / 8
                   : (flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED) ? (elem_bits + 7) / 8
                                                                      : 0;
    CHECK(itemsize == want, "itemsize %" PRId64 ", expected %" PRId64, itemsize, want);
    CHECK(t->dtype.lanes >= 1 && t->dtype.code <= kDLBcomplex,
          "itemsize accepted lanes %u / code %u", t->dtype.lanes, t->dtype.code);
  } else {
    CHECK(itemsize == DLPACKSHIM_ERR_INVALID_TENSOR, "itemsize failed with %" PRId64, itemsize);
    CHECK(!common_byte_dtype(t->dtype) && !common_subbyte_dtype(t->dtype),
          "itemsize rejected a standard dtype");
  }

  /* nbytes */
  out = FUZZ_UNTOUCHED;
  int64_t nbytes = value_or_status(dlpackshim_tensor_nbytes(t, flags, &out), &out, "nbytes");
  f->nbytes = nbytes;
  CHECK(dlpackshim_tensor_nbytes(t, flags, NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "nbytes accepted nbytes_out == NULL");
  i128 want_nbytes = -1;
  if (numel >= 0 && itemsize >= 0) {
    if (itemsize > 0) {
      want_nbytes = (i128)numel * itemsize;
    } else {
      i128 bits = (i128)numel * elem_bits; /* the bytes must fit int64, not the bits */
      want_nbytes = bits / 8 + (bits % 8 != 0);
    }
  }
  if (want_nbytes >= 0 && want_nbytes <= (i128)INT64_MAX)
    CHECK(nbytes == (int64_t)want_nbytes, "nbytes %" PRId64 ", expected %" PRId64, nbytes,
          (int64_t)want_nbytes);
  else
    CHECK(nbytes == DLPACKSHIM_ERR_INVALID_TENSOR, "nbytes %" PRId64 ", expected an error",
          nbytes);

  /* layout: its C bit is NumPy's C_CONTIGUOUS (once dlpackshim_tensor_is_contiguous) */
  int32_t layout = -77;
  int lrc = dlpackshim_tensor_layout(t, &layout);
  check_failure(lrc, "layout");
  if (!rs.shape_ok || !rs.numel_fits) {
    CHECK(lrc == DLPACKSHIM_ERR_INVALID_TENSOR, "layout of a bad shape gave %d", lrc);
    CHECK(layout == -77, "layout failed but wrote %d to layout_out", (int)layout);
  } else {
    CHECK(lrc == 0, "layout of a good shape failed with %d", lrc);
    CHECK(layout >= DLPACKSHIM_LAYOUT_NONE && layout <= DLPACKSHIM_LAYOUT_BOTH,
          "layout %d is not a dlpackshim_layout", (int)layout);
    int contig = (layout & DLPACKSHIM_LAYOUT_C) != 0;
    CHECK(contig == rs.compact, "layout's C bit %d, expected %d", contig, rs.compact);
    if (rs.empty || t->ndim == 0)
      CHECK(layout == DLPACKSHIM_LAYOUT_BOTH, "empty or 0-d tensor has layout %d", (int)layout);
  }
  CHECK(dlpackshim_tensor_layout(t, NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "layout accepted layout_out == NULL");

  /* validate and byte_span */
  int v = dlpackshim_tensor_validate(t, flags);
  check_failure(v, "validate");
  f->validate = v;
  int64_t lo = 7, hi = 7;
  int s = dlpackshim_tensor_byte_span(t, flags, &lo, &hi);
  check_failure(s, "byte_span");
  CHECK(s == v, "byte_span returned %d but validate %d", s, v);
  CHECK(dlpackshim_tensor_byte_span(t, flags, NULL, &hi) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "byte_span accepted lo == NULL");

  int32_t dev = (int32_t)t->device.device_type;
  i128 rlo = 0, rhi = 0;
  int span_fits = 0;
  if (want_nbytes >= 0 && want_nbytes <= (i128)INT64_MAX && rs.shape_ok) {
    reference_span(t, &rs, itemsize, want_nbytes, &rlo, &rhi);
    span_fits = fits64(rlo) && fits64(rhi) && fits64((i128)t->byte_offset + rhi) &&
                t->byte_offset <= (uint64_t)INT64_MAX;
  }
  if (v == 0) {
    CHECK(rs.shape_ok && rs.numel_fits && itemsize >= 0 && nbytes >= 0,
          "validate accepted a tensor that numel/itemsize/nbytes reject");
    CHECK(known_device(dev) && t->device.device_id >= 0, "validate accepted device (%d, %d)",
          (int)dev, (int)t->device.device_id);
    CHECK(rs.empty || t->data, "validate accepted NULL data for a non-empty tensor");
    CHECK(itemsize > 0 || rs.empty || rs.compact,
          "validate accepted a strided packed sub-byte tensor");
    CHECK(span_fits, "validate accepted a tensor whose byte span overflows int64");
    CHECK(!(rs.strides_overflow && !t->strides),
          "validate accepted NULL strides that stand for compact strides beyond int64");
    CHECK(lo == (int64_t)rlo && hi == (int64_t)rhi,
          "byte_span [%" PRId64 ", %" PRId64 "), expected [%" PRId64 ", %" PRId64 ")", lo, hi,
          (int64_t)rlo, (int64_t)rhi);
    CHECK(lo <= 0 && hi >= 0 && (rs.empty || (i128)hi - lo >= (itemsize ? itemsize : 1)),
          "byte_span [%" PRId64 ", %" PRId64 ") is malformed", lo, hi);
    if (host_device(dev) && !rs.empty) {
      /* Addresses must not wrap (validate.c promises this for host memory). */
      uintptr_t first = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
      CHECK((uintptr_t)0 - (uintptr_t)lo <= first && first <= UINTPTR_MAX - (uintptr_t)hi,
            "validate accepted host addresses that wrap around");
    }
    uintptr_t b0 = (uintptr_t)buf, b1 = b0 + bufsize;
    uintptr_t d = (uintptr_t)t->data;
    if (rs.empty) {
      f->in_buffer = 1; /* touches nothing */
    } else if (d >= b0 && d <= b1 && t->byte_offset <= bufsize) {
      i128 first = (i128)(d - b0) + (i128)t->byte_offset + lo;
      i128 last = (i128)(d - b0) + (i128)t->byte_offset + hi;
      f->in_buffer = first >= 0 && last <= (i128)bufsize;
    }
    f->lo = lo;
    f->hi = hi;
  } else {
    CHECK(v == DLPACKSHIM_ERR_INVALID_TENSOR || v == DLPACKSHIM_ERR_INVALID_ARGUMENT,
          "validate failed with %d", v);
    CHECK(lo == 7 && hi == 7, "byte_span wrote its outputs on failure");
    /* Clearly valid tensors must be accepted. */
    int subbyte_ok = common_subbyte_dtype(t->dtype) &&
                     (!t->strides || rs.compact || (flags & DLPACKSHIM_FLAG_IS_SUBBYTE_TYPE_PADDED));
    uintptr_t b0 = (uintptr_t)buf, d = (uintptr_t)t->data;
    int data_ok = rs.empty || (d >= b0 && d <= b0 + bufsize && t->byte_offset <= bufsize &&
                               (i128)(d - b0) + (i128)t->byte_offset + rlo >= 0 &&
                               (i128)(d - b0) + (i128)t->byte_offset + rhi <= (i128)bufsize);
    int sane = rs.shape_ok && rs.numel_fits && (common_byte_dtype(t->dtype) || subbyte_ok) &&
               known_device(dev) && t->device.device_id >= 0 && span_fits && data_ok &&
               !(rs.strides_overflow && !t->strides);
    CHECK(!sane, "validate rejected a valid tensor (status %d)", v);
  }
  g_tensor = saved;
  g_flags = saved_flags;
}

/* ---- element-wise reference gather ----------------------------------- */

/* Walks every element in row-major order, moving a source and a destination
 * byte offset (from data + byte_offset). Strides NULL mean compact. Only dims
 * of extent > 1 are kept: they alone move, and a 1024-d tensor of mostly
 * extent-1 dims must not cost 1024 steps per element. */
typedef struct {
  int32_t nd;
  int64_t n[FUZZ_NDIM_LIMIT], src_step[FUZZ_NDIM_LIMIT], dst_step[FUZZ_NDIM_LIMIT];
  int64_t idx[FUZZ_NDIM_LIMIT];
} odometer;

static void compact_strides(int32_t ndim, const int64_t *shape, int64_t *out) {
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    out[i] = s;
    if (shape[i] > 1) s *= shape[i]; /* callers have a non-empty, small tensor */
  }
}

static odometer g_odo;

static void odo_init(odometer *o, int32_t ndim, const int64_t *shape, const int64_t *src_strides,
                     const int64_t *dst_strides, int64_t itemsize) {
  int64_t compact[FUZZ_NDIM_LIMIT];
  compact_strides(ndim, shape, compact);
  o->nd = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == 1) continue; /* its stride is never used and may be anything */
    o->n[o->nd] = shape[i];
    o->src_step[o->nd] = (src_strides ? src_strides[i] : compact[i]) * itemsize;
    o->dst_step[o->nd] = (dst_strides ? dst_strides[i] : compact[i]) * itemsize;
    o->idx[o->nd] = 0;
    o->nd++;
  }
}

/* Advances to the next element; returns 0 after the last one. */
static int odo_next(odometer *o, int64_t *src_off, int64_t *dst_off) {
  for (int32_t i = o->nd - 1; i >= 0; i--) {
    if (++o->idx[i] < o->n[i]) {
      *src_off += o->src_step[i];
      *dst_off += o->dst_step[i];
      return 1;
    }
    *src_off -= (o->n[i] - 1) * o->src_step[i];
    *dst_off -= (o->n[i] - 1) * o->dst_step[i];
    o->idx[i] = 0;
  }
  return 0;
}

/* Compares every element of dst (data at dbase) with src (data at sbase). */
static void compare_elements(const DLTensor *src, const uint8_t *sbase, const int64_t *dst_strides,
                             const uint8_t *dbase, int64_t itemsize, uint8_t *touched,
                             int64_t touched_base, const char *what) {
  odometer *o = &g_odo;
  odo_init(o, src->ndim, src->shape, src->strides, dst_strides, itemsize);
  int64_t so = 0, d = 0, k = 0;
  do {
    if (memcmp(sbase + so, dbase + d, (size_t)itemsize) != 0)
      FAIL("%s: element %" PRId64 " differs (src offset %" PRId64 ", dst offset %" PRId64 ")",
           what, k, so, d);
    if (touched) memset(touched + touched_base + d, 1, (size_t)itemsize);
    k++;
  } while (odo_next(o, &so, &d));
}

/* Packed sub-byte data is compact on both sides: compare bits, little-bit-endian. */
static void compare_packed(const uint8_t *s, const uint8_t *d, int64_t numel, int64_t elem_bits,
                           const char *what) {
  i128 bits = (i128)numel * elem_bits;
  int64_t full = (int64_t)(bits / 8);
  int rest = (int)(bits % 8);
  if (memcmp(s, d, (size_t)full) != 0) FAIL("%s: packed bytes differ", what);
  if (rest) {
    uint8_t mask = (uint8_t)((1u << rest) - 1);
    CHECK((s[full] & mask) == (d[full] & mask), "%s: last packed byte differs", what);
  }
}

/* ---- dlpackshim_copy ---------------------------------------------------- */

enum {
  DST_NULL_STRIDES, DST_COMPACT, DST_REVERSED, DST_FORTRAN, DST_GAPPED,
  DST_BAD_SHAPE, DST_BAD_DTYPE, DST_OFFSET, DST_OVERLAP, DST_MODES
};

static void check_copy(const DLTensor *src, const facts *sf, uint8_t mode) {
  mode %= DST_MODES;
  int32_t ndim = src->ndim;
  int64_t itemsize = sf->itemsize; /* with flags 0: packed sub-byte -> 0 */
  int64_t shape[FUZZ_NDIM_LIMIT], strides[FUZZ_NDIM_LIMIT], compact[FUZZ_NDIM_LIMIT];
  for (int32_t i = 0; i < ndim; i++) shape[i] = src->shape[i];
  if (!sf->rs.empty) compact_strides(ndim, shape, compact);
  else for (int32_t i = 0; i < ndim; i++) compact[i] = 1;

  DLTensor dst;
  memset(&dst, 0, sizeof dst);
  dst.device.device_type = kDLCPU;
  dst.ndim = ndim;
  dst.dtype = src->dtype;
  dst.shape = ndim ? shape : NULL;
  dst.strides = ndim ? strides : NULL;
  uint64_t extra_offset = 0;
  int expect_ok = 1;
  for (int32_t i = 0; i < ndim; i++) strides[i] = compact[i];
  switch (mode) {
    case DST_NULL_STRIDES: dst.strides = NULL; break;
    case DST_COMPACT: break;
    case DST_REVERSED:
      for (int32_t i = 0; i < ndim; i++) strides[i] = -compact[i];
      break;
    case DST_FORTRAN: {
      int64_t s = 1;
      for (int32_t i = 0; i < ndim; i++) {
        strides[i] = s;
        if (shape[i] > 1 && !sf->rs.empty) s *= shape[i];
      }
      break;
    }
    case DST_GAPPED:
      for (int32_t i = 0; i < ndim; i++) strides[i] = 2 * compact[i];
      break;
    case DST_BAD_SHAPE:
      if (ndim > 0) {
        shape[0] = shape[0] > 0 ? shape[0] - 1 : 1;
      } else {
        dst.ndim = 1;
        dst.shape = shape;
        dst.strides = strides;
        shape[0] = 2;
        strides[0] = 1;
      }
      expect_ok = 0;
      break;
    case DST_BAD_DTYPE:
      dst.dtype.code = dst.dtype.code == kDLUInt ? kDLInt : kDLUInt;
      dst.dtype.bits = 8;
      dst.dtype.lanes = 1;
      if (src->dtype.code == dst.dtype.code) dst.dtype.bits = 16;
      expect_ok = 0;
      break;
    case DST_OFFSET: extra_offset = 3; break;
    default: break;
  }

  /* The destination's own span, measured by our reference. */
  facts df;
  static uint8_t probe;
  dst.data = &probe; /* any address: we only measure */
  dst.byte_offset = 0;
  ref_shape drs = reference_shape(&dst);
  i128 dlo = 0, dhi = 0;
  int64_t out = FUZZ_UNTOUCHED;
  int64_t dst_itemsize = value_or_status(dlpackshim_tensor_itemsize(&dst, 0, &out), &out, "itemsize");
  out = FUZZ_UNTOUCHED;
  int64_t dst_nbytes = value_or_status(dlpackshim_tensor_nbytes(&dst, 0, &out), &out, "nbytes");
  if (!drs.shape_ok || !drs.numel_fits || dst_itemsize < 0 || dst_nbytes < 0 ||
      dst_nbytes > FUZZ_COPY_LIMIT)
    return;
  reference_span(&dst, &drs, dst_itemsize, dst_nbytes, &dlo, &dhi);
  if (!fits64(dlo) || !fits64(dhi) || dhi - dlo > 4 * (i128)FUZZ_COPY_LIMIT) return;
  size_t alloc = (size_t)(extra_offset + (uint64_t)(dhi - dlo));
  uint8_t *dbuf = malloc(alloc ? alloc : 1);
  if (!dbuf) return;
  memset(dbuf, 0xA5, alloc ? alloc : 1);
  dst.data = dbuf;
  dst.byte_offset = extra_offset + (uint64_t)(-dlo);
  check_measurements(&dst, 0, dbuf, alloc, &df);
  if (df.validate != 0) expect_ok = 0;
  if (df.validate == 0 && !df.in_buffer) FAIL("copy: our destination is not inside its buffer");

  /* Both sides host memory: the stream is unused, so any value will do. */
  int rc = dlpackshim_copy(&dst, src, (int64_t)mode * 0x1000 - 1);
  check_failure(rc, "copy");
  if (!expect_ok) {
    CHECK(rc != 0, "copy accepted a mismatched or invalid destination (mode %u)", mode);
    for (size_t i = 0; i < alloc; i++) CHECK(dbuf[i] == 0xA5, "failed copy wrote to dst");
    free(dbuf);
    return;
  }
  CHECK(rc == 0, "copy of a valid tensor failed with %d (mode %u)", rc, mode);
  if (!sf->rs.empty) {
    const uint8_t *sbase = (const uint8_t *)src->data + src->byte_offset;
    const uint8_t *dbase = dbuf + dst.byte_offset;
    if (itemsize == 0) {
      int64_t elem_bits = (int64_t)src->dtype.bits * src->dtype.lanes;
      compare_packed(sbase, dbase, sf->numel, elem_bits, "copy");
      for (size_t i = 0; i < alloc; i++)
        CHECK(dbuf[i] == 0xA5 || (i >= extra_offset && i < extra_offset + (size_t)dst_nbytes),
              "copy wrote outside the packed destination (byte %zu)", i);
    } else {
      uint8_t *touched = calloc(alloc, 1);
      if (!touched) abort();
      compare_elements(src, sbase, dst.strides, dbase, itemsize, touched,
                       (int64_t)dst.byte_offset, "copy");
      for (size_t i = 0; i < alloc; i++)
        CHECK(touched[i] || dbuf[i] == 0xA5, "copy wrote a byte between elements (byte %zu)", i);
      free(touched);
    }
  } else {
    for (size_t i = 0; i < alloc; i++) CHECK(dbuf[i] == 0xA5, "copy of an empty tensor wrote");
  }
  free(dbuf);
}

/* dlpackshim.h asks for dst not to overlap src, but copy.c stages through a
 * temporary when they do: a compact destination in the source's own buffer
 * must get the source's values as they were before the copy, and nothing
 * else in the buffer may change. */
static void check_copy_overlap(const DLTensor *src, const facts *sf, uint8_t *buf, size_t bufsize,
                               uint8_t sel) {
  if (sf->rs.empty || sf->nbytes > (int64_t)bufsize) return;
  int64_t itemsize = sf->itemsize, step = itemsize ? itemsize : 1;
  int64_t src_pos = (int64_t)((const uint8_t *)src->data - buf) + (int64_t)src->byte_offset;
  int64_t pos = src_pos + sf->lo + ((int64_t)(sel % 29) - 14) * step;
  if (pos > (int64_t)bufsize - sf->nbytes) pos = (int64_t)bufsize - sf->nbytes;
  if (pos < 0) pos = 0;
  DLTensor dst = *src;
  dst.data = buf + pos;
  dst.byte_offset = 0;
  dst.strides = NULL;
  dst.device.device_type = kDLCPU;
  dst.device.device_id = 0;
  uint8_t *snap = malloc(bufsize);
  if (!snap) abort();
  memcpy(snap, buf, bufsize);
  int rc = dlpackshim_copy(&dst, src, 0);
  check_failure(rc, "copy (overlapping)");
  CHECK(rc == 0, "overlapping copy failed with %d", rc);
  const uint8_t *sbase = snap + src_pos;
  if (itemsize == 0) {
    compare_packed(sbase, buf + pos, sf->numel, (int64_t)src->dtype.bits * src->dtype.lanes,
                   "overlapping copy");
    for (size_t i = 0; i < bufsize; i++)
      CHECK(buf[i] == snap[i] || ((int64_t)i >= pos && (int64_t)i < pos + sf->nbytes),
            "overlapping copy wrote outside dst (byte %zu)", i);
  } else {
    uint8_t *touched = calloc(bufsize, 1);
    if (!touched) abort();
    compare_elements(src, sbase, NULL, buf + pos, itemsize, touched, pos, "overlapping copy");
    for (size_t i = 0; i < bufsize; i++)
      CHECK(touched[i] || buf[i] == snap[i], "overlapping copy wrote outside dst (byte %zu)", i);
    free(touched);
  }
  memcpy(buf, snap, bufsize);
  free(snap);
}

/* ---- building, freeing and cloning --------------------------------------- */

static int g_released;
static void count_release(void *owner) {
  CHECK(owner == &g_released, "release got owner %p", owner);
  g_released++;
}

static void check_fields(const DLTensor *got, const DLTensor *want, const ref_shape *rs,
                         const char *what) {
  CHECK(got->data == want->data, "%s: data changed", what);
  CHECK(got->device.device_type == want->device.device_type &&
            got->device.device_id == want->device.device_id,
        "%s: device changed", what);
  CHECK(got->ndim == want->ndim, "%s: ndim changed", what);
  CHECK(memcmp(&got->dtype, &want->dtype, sizeof got->dtype) == 0, "%s: dtype changed", what);
  CHECK(got->byte_offset == want->byte_offset, "%s: byte_offset changed", what);
  CHECK(got->ndim == 0 || (got->shape && got->strides), "%s: shape/strides missing", what);
  for (int32_t i = 0; i < got->ndim; i++) {
    CHECK(got->shape[i] == want->shape[i], "%s: shape[%d] changed", what, (int)i);
    if (want->strides)
      CHECK(got->strides[i] == want->strides[i], "%s: strides[%d] changed", what, (int)i);
  }
  if (!want->strides && got->ndim > 0) {
    CHECK(c_contiguous(got) == 1, "%s: filled-in strides not compact", what);
    if (!rs->empty) {
      int64_t compact[FUZZ_NDIM_LIMIT];
      compact_strides(got->ndim, got->shape, compact);
      for (int32_t i = 0; i < got->ndim; i++)
        CHECK(got->shape[i] == 1 || got->strides[i] == compact[i],
              "%s: strides[%d] is %" PRId64 ", compact is %" PRId64, what, (int)i,
              got->strides[i], compact[i]);
    }
  }
  CHECK(got->ndim == 0 || (got->shape != want->shape && got->strides != want->strides),
        "%s: kept the caller's shape/strides arrays", what);
}

static void check_new(const DLTensor *t, uint64_t flags, const facts *f, const facts *f0) {
  /* versioned */
  g_released = 0;
  DLManagedTensorVersioned *const vsent = (DLManagedTensorVersioned *)&g_released;
  DLManagedTensorVersioned *m = vsent;
  int st = dlpackshim_tensor_new(t->data, (int32_t)t->device.device_type, t->device.device_id,
                                 t->ndim, t->shape, t->strides, t->dtype.code, t->dtype.bits,
                                 t->dtype.lanes, t->byte_offset, flags, &g_released,
                                 count_release, &m);
  check_failure(st, "tensor_new");
  CHECK(st <= 0, "tensor_new returned %d", st);
  CHECK(dlpackshim_tensor_new(t->data, (int32_t)t->device.device_type, t->device.device_id,
                              t->ndim, t->shape, t->strides, t->dtype.code, t->dtype.bits,
                              t->dtype.lanes, t->byte_offset, flags, &g_released, count_release,
                              NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "tensor_new accepted tensor_out == NULL");
  if (st != 0) {
    CHECK(m == vsent, "tensor_new failed (%d) but wrote tensor_out", st);
    CHECK(g_released == 0, "tensor_new called release on failure");
    CHECK(f->validate != 0 || st == DLPACKSHIM_ERR_NO_MEMORY,
          "tensor_new failed (%d) on a tensor that validates", st);
    if (f->validate != 0) CHECK(st == f->validate, "tensor_new failed with %d, validate %d", st,
                                f->validate);
  } else {
    CHECK(m != NULL && m != vsent, "tensor_new succeeded without a tensor");
    CHECK(f->validate == 0, "tensor_new accepted a tensor that validate rejects (%d)", f->validate);
    CHECK(m->version.major == 1 && m->version.minor == 3, "tensor_new: version %u.%u",
          m->version.major, m->version.minor);
    CHECK(m->flags == flags, "tensor_new: flags 0x%" PRIx64 " != 0x%" PRIx64, m->flags, flags);
    CHECK(m->deleter != NULL, "tensor_new: no deleter");
    CHECK(dlpackshim_managed_dltensor(m) == &m->dl_tensor, "managed_dltensor is wrong");
    check_fields(&m->dl_tensor, t, &f->rs, "tensor_new");
    CHECK(dlpackshim_tensor_validate(&m->dl_tensor, flags) == 0, "tensor_new made an invalid tensor");
    CHECK(g_released == 0, "tensor_new released early");
    dlpackshim_tensor_free(m);
    CHECK(g_released == 1, "tensor_free released %d times", g_released);
  }

  /* legacy: validated with flags 0 */
  g_released = 0;
  DLManagedTensor *const lsent = (DLManagedTensor *)&g_released;
  DLManagedTensor *l = lsent;
  st = dlpackshim_tensor_new_legacy(t->data, (int32_t)t->device.device_type, t->device.device_id,
                                    t->ndim, t->shape, t->strides, t->dtype.code, t->dtype.bits,
                                    t->dtype.lanes, t->byte_offset, &g_released, count_release,
                                    &l);
  check_failure(st, "tensor_new_legacy");
  CHECK(st <= 0, "tensor_new_legacy returned %d", st);
  if (st != 0) {
    CHECK(l == lsent, "tensor_new_legacy failed (%d) but wrote tensor_out", st);
    CHECK(g_released == 0, "tensor_new_legacy called release on failure");
    if (f0->validate != 0)
      CHECK(st == f0->validate, "tensor_new_legacy failed with %d, validate %d", st,
            f0->validate);
    CHECK(f0->validate != 0 || st == DLPACKSHIM_ERR_NO_MEMORY,
          "tensor_new_legacy failed (%d) on a tensor that validates", st);
  } else {
    CHECK(l != NULL && l != lsent, "tensor_new_legacy succeeded without a tensor");
    CHECK(f0->validate == 0, "tensor_new_legacy accepted a tensor that validate rejects");
    CHECK(l->deleter != NULL, "tensor_new_legacy: no deleter");
    check_fields(&l->dl_tensor, t, &f0->rs, "tensor_new_legacy");
    dlpackshim_tensor_free_legacy(l);
    CHECK(g_released == 1, "tensor_free_legacy released %d times", g_released);
  }
}

static void check_clone(const DLTensor *t, uint64_t flags, const facts *f) {
  int32_t dev = (int32_t)t->device.device_type;
  int may_read = f->validate == 0 && host_device(dev) && f->in_buffer;
  if (f->validate == 0 && host_device(dev) && !f->in_buffer) return; /* would read wild memory */
  if (may_read && f->nbytes > FUZZ_COPY_LIMIT) return;
  DLManagedTensorVersioned *const csent = (DLManagedTensorVersioned *)&g_released;
  DLManagedTensorVersioned *c = csent;
  CHECK(dlpackshim_tensor_clone(t, flags, NULL) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "clone accepted tensor_out == NULL");
  int st = dlpackshim_tensor_clone(t, flags, &c);
  check_failure(st, "clone");
  CHECK(st <= 0, "clone returned %d", st);
  CHECK(st == 0 || c == csent, "clone failed (%d) but wrote tensor_out", st);
  if (st != 0 && may_read && f->rs.strides_overflow) {
    /* An empty tensor with no int64 compact strides is valid, but no compact
     * clone describes it. */
    CHECK(st == DLPACKSHIM_ERR_UNSUPPORTED, "clone failed with %d", st);
    return;
  }
  if (!may_read) {
    CHECK(st != 0, "clone accepted a tensor it cannot read (validate %d, device %d)", f->validate,
          (int)dev);
    if (f->validate != 0)
      CHECK(st == f->validate, "clone failed with %d, validate %d", st, f->validate);
    else
      CHECK(st == DLPACKSHIM_ERR_UNSUPPORTED, "clone of device %d failed with %d", (int)dev, st);
    return;
  }
  CHECK(st == 0 && c != NULL && c != csent, "clone of a valid host tensor failed: %d", st);
  const DLTensor *ct = &c->dl_tensor;
  CHECK(c->version.major == 1 && c->version.minor == 3, "clone: version %u.%u", c->version.major,
        c->version.minor);
  uint64_t want_flags = (flags | DLPACKSHIM_FLAG_IS_COPIED) & ~(uint64_t)DLPACKSHIM_FLAG_READ_ONLY;
  CHECK(c->flags == want_flags, "clone: flags 0x%" PRIx64 ", expected 0x%" PRIx64, c->flags,
        want_flags);
  CHECK(c->deleter, "clone: no deleter");
  CHECK(ct->device.device_type == kDLCPU && ct->device.device_id == 0, "clone: device (%d, %d)",
        (int)ct->device.device_type, (int)ct->device.device_id);
  CHECK(ct->ndim == t->ndim && memcmp(&ct->dtype, &t->dtype, sizeof ct->dtype) == 0,
        "clone: ndim/dtype changed");
  CHECK(ct->ndim == 0 || (ct->shape && ct->strides), "clone: shape/strides missing");
  for (int32_t i = 0; i < ct->ndim; i++)
    CHECK(ct->shape[i] == t->shape[i], "clone: shape[%d] changed", (int)i);
  CHECK(c_contiguous(ct) == 1, "clone is not compact");
  CHECK(((uintptr_t)ct->data + ct->byte_offset) % 256 == 0 || f->rs.empty,
        "clone: data %p + %" PRIu64 " not 256-byte aligned", ct->data, ct->byte_offset);
  CHECK(dlpackshim_tensor_validate(ct, c->flags) == 0, "clone made an invalid tensor");
  if (!f->rs.empty) {
    const uint8_t *sbase = (const uint8_t *)t->data + t->byte_offset;
    const uint8_t *cbase = (const uint8_t *)ct->data + ct->byte_offset;
    if (f->itemsize == 0)
      compare_packed(sbase, cbase, f->numel, (int64_t)t->dtype.bits * t->dtype.lanes, "clone");
    else
      compare_elements(t, sbase, ct->strides, cbase, f->itemsize, NULL, 0, "clone");
  }
  dlpackshim_tensor_free(c);
}

/* ---- version negotiation ------------------------------------------------ */

static void check_negotiate(const uint32_t v[4]) {
  uint32_t maj = 0xdead, min = 0xbeef;
  int rc = dlpackshim_negotiate_version(v[0], v[1], v[2], v[3], &maj, &min);
  check_failure(rc, "negotiate_version");
  if (v[0] > v[2]) {
    CHECK(rc == DLPACKSHIM_ERR_VERSION, "negotiate %u.%u vs max %u.%u: %d, expected VERSION",
          v[0], v[1], v[2], v[3], rc);
  } else {
    /* The smaller of (producer) and (max), compared as (major, minor). */
    uint32_t wmin = v[0] < v[2] ? v[1] : (v[1] < v[3] ? v[1] : v[3]);
    CHECK(rc == 0 && maj == v[0] && min == wmin,
          "negotiate %u.%u vs max %u.%u gave %d %u.%u, expected %u.%u", v[0], v[1], v[2], v[3],
          rc, maj, min, v[0], wmin);
  }
  CHECK(dlpackshim_negotiate_version(v[0], v[1], v[2], v[3], NULL, &min) ==
            DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "negotiate accepted major_out == NULL");
  const char *s = dlpackshim_strerror((int)v[0]);
  CHECK(s && s[0], "strerror(%d) is empty", (int)v[0]);
}

/* ---- entry point ----------------------------------------------------------- */

static void check_null_tensor(void) {
  int64_t lo, hi;
  CHECK(dlpackshim_tensor_validate(NULL, 0) == DLPACKSHIM_ERR_INVALID_ARGUMENT, "validate(NULL)");
  check_failure(DLPACKSHIM_ERR_INVALID_ARGUMENT, "validate(NULL)");
  int64_t out = FUZZ_UNTOUCHED;
  int32_t layout = -77;
  DLManagedTensorVersioned *c = (DLManagedTensorVersioned *)&g_released;
  CHECK(dlpackshim_tensor_numel(NULL, &out) == DLPACKSHIM_ERR_INVALID_ARGUMENT, "numel(NULL)");
  CHECK(dlpackshim_tensor_itemsize(NULL, 0, &out) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "itemsize(NULL)");
  CHECK(dlpackshim_tensor_nbytes(NULL, 0, &out) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "nbytes(NULL)");
  CHECK(out == FUZZ_UNTOUCHED, "a measuring call on NULL wrote its out-parameter");
  CHECK(dlpackshim_tensor_layout(NULL, &layout) == DLPACKSHIM_ERR_INVALID_ARGUMENT,
        "layout(NULL)");
  CHECK(layout == -77, "layout(NULL) wrote layout_out");
  CHECK(dlpackshim_tensor_byte_span(NULL, 0, &lo, &hi) < 0, "byte_span(NULL)");
  CHECK(dlpackshim_tensor_clone(NULL, 0, &c) == DLPACKSHIM_ERR_INVALID_ARGUMENT, "clone(NULL)");
  CHECK(c == (DLManagedTensorVersioned *)&g_released, "clone(NULL) wrote tensor_out");
  CHECK(dlpackshim_copy(NULL, NULL, 0) == DLPACKSHIM_ERR_INVALID_ARGUMENT, "copy(NULL, NULL)");
  dlpackshim_tensor_free(NULL);
  dlpackshim_tensor_free_legacy(NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  uint8_t ndim_code = rd_u8(&r, 0);
  int32_t ndim = ndim_code < 0xE0 ? (int32_t)(ndim_code & 15) : kNdimSpecial[ndim_code - 0xE0];
  uint8_t ptrs = rd_u8(&r, 0);
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.dtype.code = rd_u8(&r, 0);
  t.dtype.bits = rd_u8(&r, 0);
  t.dtype.lanes = (uint16_t)rd_raw(&r, 2);
  int32_t device_type = (int32_t)(uint32_t)rd_raw(&r, 4);
  memcpy(&t.device.device_type, &device_type, sizeof device_type); /* any value, even non-enum */
  t.device.device_id = (int32_t)(uint32_t)rd_raw(&r, 4);
  size_t data_off = (size_t)rd_raw(&r, 2) % (FUZZ_BUF_SIZE + 1);
  t.byte_offset = (uint64_t)rd_num(&r, 0, 0);
  uint8_t fb = rd_u8(&r, 0);
  uint64_t flags = (fb & 0x80) ? rd_raw(&r, 8) : (uint64_t)(fb & 0x7F);
  uint8_t dst_mode = rd_u8(&r, 0);
  uint32_t versions[4];
  for (int i = 0; i < 4; i++) versions[i] = (uint32_t)rd_num(&r, 0, 0);
  uint8_t seed = rd_u8(&r, 0);

  check_negotiate(versions);
  if (ptrs & 4) {
    check_null_tensor();
    return 0;
  }

  /* Exactly as many entries as ndim claims (see the header comment). */
  size_t entries = ndim < 0 ? 0 : ndim > FUZZ_NDIM_LIMIT ? FUZZ_NDIM_LIMIT : (size_t)ndim;
  int64_t *shape = malloc(entries * sizeof *shape + (entries == 0));
  int64_t *strides = malloc(entries * sizeof *strides + (entries == 0));
  uint8_t *buf = malloc(FUZZ_BUF_SIZE);
  if (!shape || !strides || !buf) abort();
  for (size_t i = 0; i < entries; i++) shape[i] = rd_num(&r, 0, 1);
  for (size_t i = 0; i < entries; i++) strides[i] = rd_num(&r, 0x70, 0x71);
  uint32_t x = 0x9E3779B9u * (seed + 1u);
  for (size_t i = 0; i < FUZZ_BUF_SIZE; i++) {
    x = x * 1664525u + 1013904223u;
    buf[i] = (uint8_t)(x >> 24);
  }
  /* A 0-entry array is a 1-byte block: any int64 read of it is caught. */
  t.ndim = ndim;
  t.shape = (ptrs & 1) ? NULL : shape;
  t.strides = (ptrs & 2) ? NULL : strides;
  switch ((ptrs >> 3) & 7) {
    case 4: t.data = NULL; break;
    case 5: t.data = (void *)(UINTPTR_MAX - 15); break;
    case 6: t.data = (void *)(uintptr_t)16; break;
    case 7: t.data = buf + FUZZ_BUF_SIZE; break;
    default: t.data = buf + data_off; break;
  }
  g_tensor = &t;
  g_flags = flags;

  facts f, f0;
  check_compact_strides(&t);
  check_measurements(&t, flags, buf, FUZZ_BUF_SIZE, &f);
  if (flags != 0)
    check_measurements(&t, 0, buf, FUZZ_BUF_SIZE, &f0);
  else
    f0 = f;

  check_new(&t, flags, &f, &f0);
  check_clone(&t, flags, &f);

  /* dlpackshim_copy reads packed sub-byte data as packed: it sees flags 0. */
  int32_t dev = (int32_t)t.device.device_type;
  if (f0.validate == 0 && host_device(dev) && f0.in_buffer && f0.nbytes <= FUZZ_COPY_LIMIT) {
    if (dst_mode % DST_MODES == DST_OVERLAP)
      check_copy_overlap(&t, &f0, buf, FUZZ_BUF_SIZE, (uint8_t)(dst_mode / DST_MODES));
    else
      check_copy(&t, &f0, dst_mode);
  } else if (f0.validate != 0) {
    /* An invalid source must be refused before anything is read. */
    int64_t one = 1;
    uint8_t out[8] = {0};
    DLTensor dst = {out, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, &one, NULL, 0};
    CHECK(dlpackshim_copy(&dst, &t, 0) != 0, "copy accepted an invalid source");
  }

  g_tensor = NULL;
  free(shape);
  free(strides);
  free(buf);
  return 0;
}

#endif /* __SIZEOF_INT128__ */
