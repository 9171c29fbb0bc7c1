/*
 * exchange.c - the consumer of DLPack C exchange tables (dlpack.h 1.3,
 * __dlpack_c_exchange_api__); the table dlpackshim.Tensor carries is in
 * exchange_table.c.
 *
 * Given an object whose type carries a table, call
 * managed_tensor_from_py_object_no_sync under the GIL and wrap the tensor in
 * an owner capsule of the kind dlpackshim_capsule_import leaves behind
 * (capsule.c checks it there, as every import), so the Python Tensor needs
 * no new code path. Tables are looked up once per type (a small cache
 * holding the type and its capsule), re-checked on use; a table whose major
 * version is not 1 is followed along prev_api to one that is. A guard the
 * package registers runs the checks a producer's __dlpack__ makes and its
 * table skips (PyTorch).
 *
 * Tensors are built here, not in Python, to keep the hot path to one C
 * call: the builtins are bound to the package's Tensor class (their `self`)
 * and make instances of it through pytensor.c.
 *
 * Every function touching Python state runs with the GIL held (builtins are
 * called by the interpreter), so they take the API with shim_py_bound(),
 * which works during finalization too (a __del__ at shutdown).
 */
#include "binding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char API_ATTR[] = "__dlpack_c_exchange_api__";




static void cache_clear(const shim_pyapi *py);

/* guard_for(type) -> guard or None, registered by the package: checks to
 * run when a type's table is used (before the export, or after it for a
 * check that only matters for one dtype), for producers whose table skips
 * checks their __dlpack__ makes (PyTorch's exports conjugate and negative
 * views raw); see run_guard for its forms, explain_failure for its use when
 * the table fails. NotImplemented: the type's __dlpack__
 * is not what its table stands for. Called once per type with a table, on a
 * cache miss (strong reference); when it fails, the type's table is not used. */
static void *guard_factory;

/* _exchange_register(guard_for) -> None, bound to the package's Tensor class:
 * the guard factory, and the class the table's to_py entry builds (the first
 * one registered: a re-imported package keeps the first one working). */
static void *fast_register(void *cls, void *factory) {
  const shim_pyapi *py = shim_py_bound();
  py->Py_IncRef(factory);
  if (guard_factory != NULL) py->Py_DecRef(guard_factory);
  guard_factory = factory == py->Py_None ? NULL : factory;
  if (guard_factory == NULL) py->Py_DecRef(factory);
  shim_exchange_table_class(py, cls);
  cache_clear(py);
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

/* ---- the consumer: per-type cache of tables ----------------------------- */

enum { SHIM_CACHE = 16 };

/* Why a type's table is not used (values of _exchange_probe). */
enum {
  PROBE_OK = 1,
  PROBE_NONE = 0,          /* no __dlpack_c_exchange_api__ */
  PROBE_NOT_CAPSULE = -1,  /* not a capsule named "dlpack_exchange_api" */
  PROBE_VERSION = -2,      /* no table of major version 1 along prev_api */
  PROBE_NULL_ENTRY = -3,   /* managed_tensor_from_py_object_no_sync is NULL */
  PROBE_GUARD = -4,        /* the package's guard_for failed or gave a malformed guard */
  PROBE_OVERRIDDEN = -5    /* __dlpack__ is not the table's: overridden below the class carrying
                            * it, or guard_for said so (NotImplemented) */
};

/* What lookup found for a type. In the cache the references are the
 * cache's; handed out (resolved) they are the caller's own, so that Python
 * code run by a guard or a producer cannot free a table in use by emptying
 * the cache. */
typedef struct {
  void *capsule; /* strong reference (keeps the table alive), may be NULL */
  void *dunder;  /* strong reference: type.__dlpack__ when the table was found, may be NULL */
  void *guard;   /* strong reference, may be NULL: a guard capsule (guard_normalised), run by take */
  const DLPackExchangeAPI *api; /* NULL: no usable table, see why */
  int why;       /* a PROBE_ value */
  int guard_bad; /* 0, or why no route may use a table (PROBE_GUARD: guard_for wanted
                  * checks but failed; PROBE_OVERRIDDEN: it said the type's __dlpack__
                  * is not the table's) */
} resolved;

static struct {
  void *type; /* strong reference; NULL = free */
  resolved r;
} cache[SHIM_CACHE];
static unsigned cache_next;

/* Interned attribute names (made once, under the GIL). */
static void *name_api, *name_dunder, *name_mro, *name_dict;

static int names_ready(const shim_pyapi *py) {
  if (SHIM_LIKELY(name_dict != NULL)) return 1;
  if (name_api == NULL) name_api = py->PyUnicode_InternFromString(API_ATTR);
  if (name_dunder == NULL) name_dunder = py->PyUnicode_InternFromString("__dlpack__");
  if (name_mro == NULL) name_mro = py->PyUnicode_InternFromString("__mro__");
  if (name_api != NULL && name_dunder != NULL && name_mro != NULL)
    name_dict = py->PyUnicode_InternFromString("__dict__");
  if (name_dict != NULL) return 1;
  py->PyErr_Clear();
  return 0;
}

static void resolved_drop(const shim_pyapi *py, resolved *r) {
  if (r->capsule != NULL) py->Py_DecRef(r->capsule);
  if (r->dunder != NULL) py->Py_DecRef(r->dunder);
  if (r->guard != NULL) py->Py_DecRef(r->guard);
  r->capsule = r->dunder = r->guard = NULL;
  r->api = NULL;
}

static void resolved_copy(const shim_pyapi *py, resolved *dst, const resolved *src) {
  *dst = *src;
  if (dst->capsule != NULL) py->Py_IncRef(dst->capsule);
  if (dst->dunder != NULL) py->Py_IncRef(dst->dunder);
  if (dst->guard != NULL) py->Py_IncRef(dst->guard);
}

/* The major-1 table reachable from h, or NULL. */
static const DLPackExchangeAPI *pick_version(const DLPackExchangeAPIHeader *h, int *why) {
  int hops = 0;
  for (; h != NULL && hops < 64; h = h->prev_api, hops++)
    if (h->version.major == 1) {
      const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
      if (api->managed_tensor_from_py_object_no_sync == NULL) {
        *why = PROBE_NULL_ENTRY;
        return NULL;
      }
      *why = PROBE_OK;
      return api;
    }
  *why = PROBE_VERSION;
  return NULL;
}

/* A guard in the form run_guard reads without a Python call: a capsule
 * (GUARD_NAME) whose context is a guard_spec, made once per type from what
 * guard_for gave (guard_normalised) and freed with the capsule. */
#define BEFORE_EXPORT (-1) /* a check's `code` when it is made before the export */
static const char GUARD_NAME[] = "dlpackshim.guard";

typedef struct {
  void *name, *expected; /* strong references */
  int call;              /* 1: obj.name() is compared, 0: obj.name */
  int code;              /* BEFORE_EXPORT, or the DLDataTypeCode whose exports it checks */
} guard_check;

typedef struct {
  void *callable; /* strong reference: decides when a check differs */
  int count;      /* 0: the callable decides on every object, before the export */
  int after;      /* 1 when some check waits for the export's dtype */
  guard_check check[];
} guard_spec;

static void guard_spec_free(const shim_pyapi *py, guard_spec *s, int filled) {
  int i;
  for (i = 0; i < filled; i++) {
    py->Py_DecRef(s->check[i].name);
    py->Py_DecRef(s->check[i].expected);
  }
  if (s->callable != NULL) py->Py_DecRef(s->callable);
  free(s);
}

static void guard_destructor(void *cap) {
  const shim_pyapi *py = shim_py_bound();
  guard_spec *s;
  if (py == NULL) return;
  s = (guard_spec *)py->PyCapsule_GetContext(cap);
  if (s != NULL) guard_spec_free(py, s, s->count);
}

/* The dtype code of a pair's third item into *code: an int a
 * DLDataType.code (uint8_t) holds. 0 when it is not one (never raises). */
static int dtype_code_of(const shim_pyapi *py, void *v, int *code) {
  long c;
  if (!shim_is_exact(py, v, py->PyLong_Type)) return 0;
  c = py->PyLong_AsLong(v);
  if (c == -1 && py->PyErr_Occurred() != NULL) py->PyErr_Clear();
  if (c < 0 || c > 255) return 0;
  *code = (int)c;
  return 1;
}

/* Appends the pairs of `pairs` to s (call: 1 for methods): (name, expected),
 * or (name, expected, dtype_code) for a check made only on exports of that
 * DLDataTypeCode. 0 when `pairs` is not a tuple of such pairs. */
static int add_checks(const shim_pyapi *py, guard_spec *s, void *pairs, int call) {
  ptrdiff_t i, n = py->PyTuple_Size(pairs);
  for (i = 0; i < n; i++) {
    void *pair = py->PyTuple_GetItem(pairs, i);
    guard_check *c = &s->check[s->count];
    ptrdiff_t size;
    if (!shim_is_exact(py, pair, py->PyTuple_Type)) return 0;
    size = py->PyTuple_Size(pair);
    c->code = BEFORE_EXPORT;
    if (size == 3 ? !dtype_code_of(py, py->PyTuple_GetItem(pair, 2), &c->code) : size != 2) return 0;
    if (c->code != BEFORE_EXPORT) s->after = 1;
    c->call = call;
    c->name = py->PyTuple_GetItem(pair, 0);
    c->expected = py->PyTuple_GetItem(pair, 1);
    py->Py_IncRef(c->name);
    py->Py_IncRef(c->expected);
    s->count++;
  }
  return 1;
}

/* What guard_for gave (a new reference, stolen) as a guard capsule: either
 * (callable, attributes, methods), attributes and methods being tuples of
 * pairs (add_checks), or a bare callable (a non-callable raises TypeError
 * when run, refusing every object). NULL when it is a tuple of another
 * shape, or on an error (none raised). */
static void *guard_normalised(const shim_pyapi *py, void *g) {
  void *attrs = NULL, *methods = NULL, *cap = NULL;
  ptrdiff_t n = 0;
  guard_spec *s;
  if (shim_is_exact(py, g, py->PyTuple_Type)) {
    if (py->PyTuple_Size(g) != 3 ||
        !shim_is_exact(py, attrs = py->PyTuple_GetItem(g, 1), py->PyTuple_Type) ||
        !shim_is_exact(py, methods = py->PyTuple_GetItem(g, 2), py->PyTuple_Type)) {
      py->Py_DecRef(g);
      return NULL;
    }
    n = py->PyTuple_Size(attrs) + py->PyTuple_Size(methods);
  }
  s = (guard_spec *)malloc(sizeof(*s) + (size_t)n * sizeof(guard_check));
  if (s == NULL) {
    py->Py_DecRef(g);
    return NULL;
  }
  s->count = s->after = 0;
  s->callable = attrs != NULL ? py->PyTuple_GetItem(g, 0) : g;
  py->Py_IncRef(s->callable);
  if (attrs != NULL && !(add_checks(py, s, attrs, 0) && add_checks(py, s, methods, 1))) {
    guard_spec_free(py, s, s->count);
    py->Py_DecRef(g);
    return NULL;
  }
  py->Py_DecRef(g);
  cap = py->PyCapsule_New(s, GUARD_NAME, NULL);
  if (cap != NULL && (py->PyCapsule_SetContext(cap, s) != 0 ||
                      py->PyCapsule_SetDestructor(cap, guard_destructor) != 0)) {
    py->Py_DecRef(cap); /* no destructor yet: s is freed below */
    cap = NULL;
  }
  if (cap == NULL) {
    guard_spec_free(py, s, s->count);
    py->PyErr_Clear();
  }
  return cap;
}

/* 1 when the __dlpack__ objects of `type` use is the one its table stands
 * for: walking the MRO, the class that defines __dlpack_c_exchange_api__
 * comes no later than the first that defines __dlpack__ (a subclass that
 * overrides __dlpack__ below the table, e.g. class G(torch.Tensor) with its
 * own __dlpack__, must be asked through it). 0 otherwise, or on an error. */
static int table_stands_for_dunder(const shim_pyapi *py, void *type) {
  void *mro = py->PyObject_GetAttr(type, name_mro);
  ptrdiff_t i, n;
  int r = 0;
  if (mro == NULL || !shim_is_exact(py, mro, py->PyTuple_Type)) {
    if (mro != NULL) py->Py_DecRef(mro);
    py->PyErr_Clear();
    return 0;
  }
  n = py->PyTuple_Size(mro);
  for (i = 0; i < n; i++) {
    void *d = py->PyObject_GetAttr(py->PyTuple_GetItem(mro, i), name_dict);
    int has_api, has_dunder;
    if (d == NULL) break;
    has_api = py->PySequence_Contains(d, name_api);
    has_dunder = py->PySequence_Contains(d, name_dunder);
    py->Py_DecRef(d);
    if (has_api < 0 || has_dunder < 0) break;
    if (has_api) {
      r = 1;
      break;
    }
    if (has_dunder) break; /* __dlpack__ overridden below the table */
  }
  py->Py_DecRef(mro);
  py->PyErr_Clear();
  return r;
}

/* Probes `type` from scratch into *r (new references). Never raises. */
static void probe_type(const shim_pyapi *py, void *type, resolved *r) {
  void *cap, *g;
  memset(r, 0, sizeof(*r));
  cap = py->PyObject_GetAttr(type, name_api);
  if (cap == NULL) {
    py->PyErr_Clear();
    r->why = PROBE_NONE;
  } else if (!py->PyCapsule_IsValid(cap, SHIM_EXCHANGE_API_NAME)) {
    py->PyErr_Clear();
    r->why = PROBE_NOT_CAPSULE;
    py->Py_DecRef(cap);
    cap = NULL;
  } else {
    r->api = pick_version((const DLPackExchangeAPIHeader *)py->PyCapsule_GetPointer(cap, SHIM_EXCHANGE_API_NAME),
                          &r->why);
  }
  r->capsule = cap;
  if (cap != NULL && guard_factory != NULL) {
    /* Asked for every type with a table, usable or not: an explicit table
     * (dlpackshim__exchange_import) gets the object's checks too. No guard
     * when one was wanted would skip checks: no table is used then. */
    g = py->PyObject_CallFunctionObjArgs(guard_factory, type, NULL);
    if (g == NULL) py->PyErr_Clear();
    if (g == py->Py_None) {
      py->Py_DecRef(g);
    } else if (g == py->Py_NotImplemented) {
      /* The package knows the type's __dlpack__ does something the table
       * skips (a torch.Tensor subclass with its own __torch_function__). */
      py->Py_DecRef(g);
      r->guard_bad = PROBE_OVERRIDDEN;
    } else if (g == NULL || (g = guard_normalised(py, g)) == NULL) {
      r->guard_bad = PROBE_GUARD;
    } else {
      r->guard = g;
    }
  }
  if (r->api != NULL && r->guard_bad) {
    r->api = NULL;
    r->why = r->guard_bad;
  }
  if (r->api != NULL && !table_stands_for_dunder(py, type)) {
    r->api = NULL;
    r->why = PROBE_OVERRIDDEN;
  }
  if (r->api != NULL) {
    r->dunder = py->PyObject_GetAttr(type, name_dunder);
    if (r->dunder == NULL) py->PyErr_Clear();
  }
}

/* 1 when a cached usable table is still what `type` carries, with the same
 * __dlpack__ (attributes can be deleted or replaced at any time: the cache
 * may speed things up, never change the answer). Two cached type attribute
 * lookups. A cached "no usable table" is not re-checked: from_dlpack then
 * calls __dlpack__, which gives the same data, only slower. */
static int still_current(const shim_pyapi *py, void *type, const resolved *r) {
  void *v;
  if (r->api == NULL) return 1;
  v = py->PyObject_GetAttr(type, name_api);
  if (v == NULL) {
    py->PyErr_Clear();
    return 0;
  }
  py->Py_DecRef(v); /* compared by address: the entry holds its own reference */
  if (v != r->capsule) return 0;
  v = py->PyObject_GetAttr(type, name_dunder);
  if (v == NULL) {
    py->PyErr_Clear();
    return r->dunder == NULL;
  }
  py->Py_DecRef(v);
  return v == r->dunder;
}

/* What `type` offers, into *out (new references: resolved_drop it). Never
 * raises: a type without a usable table falls back to __dlpack__. */
static void lookup(const shim_pyapi *py, void *type, resolved *out) {
  unsigned i;
  resolved fresh;
  if (SHIM_UNLIKELY(!names_ready(py))) {
    memset(out, 0, sizeof(*out));
    out->why = PROBE_NONE;
    return;
  }
  for (i = 0; i < SHIM_CACHE; i++)
    if (cache[i].type == type) {
      resolved_copy(py, out, &cache[i].r);
      if (SHIM_LIKELY(still_current(py, type, out))) return;
      resolved_drop(py, out);
      break;
    }
  probe_type(py, type, &fresh);
  /* Python code ran: the cache may have changed. Replace type's entry if it
   * has one, else take the next slot. */
  for (i = 0; i < SHIM_CACHE; i++)
    if (cache[i].type == type) break;
  if (i == SHIM_CACHE) i = cache_next++ % SHIM_CACHE;
  {
    void *old_type = cache[i].type;
    resolved old = cache[i].r;
    py->Py_IncRef(type);
    cache[i].type = type;
    cache[i].r = fresh;
    resolved_copy(py, out, &fresh);
    /* Dropped last: a destructor may run Python code. */
    if (old_type != NULL) py->Py_DecRef(old_type);
    resolved_drop(py, &old);
  }
}

static void cache_clear(const shim_pyapi *py) {
  unsigned i;
  for (i = 0; i < SHIM_CACHE; i++) {
    void *t = cache[i].type;
    resolved r = cache[i].r;
    cache[i].type = NULL;
    memset(&cache[i].r, 0, sizeof(cache[i].r));
    if (t != NULL) py->Py_DecRef(t);
    resolved_drop(py, &r);
  }
}

/* GPU data is ready on the producer's current work stream; the package's
 * Tensors promise the default stream: make it wait (no host blocking). */
static int sync_to_default(const shim_pyapi *py, const DLPackExchangeAPI *api, DLDevice dev) {
  void *stream = NULL;
  int64_t consumer;
  int st;
  if (dev.device_type == kDLCUDA || dev.device_type == kDLCUDAManaged) consumer = 1;
  else if (dev.device_type == kDLROCM) consumer = 0;
  else return 0;
  if (api->current_work_stream == NULL) return 0;
  if (api->current_work_stream(dev.device_type, dev.device_id, &stream) != 0) {
    if (py->PyErr_Occurred() == NULL)
      shim_py_fail(py, DLPACKSHIM_ERR_DEVICE, "%s", "current_work_stream failed");
    return -1;
  }
  st = dlpackshim_stream_wait(dev.device_type, dev.device_id, (int64_t)(intptr_t)stream, consumer);
  if (st != 0) {
    shim_py_raise(py, st);
    return -1;
  }
  return 0;
}

/* The spec a guard capsule (guard_normalised's) holds. */
static const guard_spec *guard_spec_of(const shim_pyapi *py, void *guard) {
  return (const guard_spec *)py->PyCapsule_GetContext(guard);
}

/* Runs a type's guard (a guard capsule) on obj: 0 to go on, -1 with an
 * exception. Each check in force for `code` (BEFORE_EXPORT, or the export's
 * dtype code: a check that only matters for one dtype waits for the export
 * to learn it) reads obj.name or calls obj.name(); when each result is the
 * expected object, the object passes without the callable's Python frame
 * (the common case), otherwise the callable decides (and raises with its
 * own message). With no checks the callable always decides, before the
 * export. */
static int run_guard(const shim_pyapi *py, void *guard, void *obj, int code) {
  const guard_spec *s = guard_spec_of(py, guard);
  int i, st = 1;
  if (code != BEFORE_EXPORT && !s->after) return 0;
  py->Py_IncRef(guard); /* Python code may empty the cache that holds it */
  if (s->count == 0) st = code == BEFORE_EXPORT ? 0 : 1; /* a bare callable */
  for (i = 0; st == 1 && i < s->count; i++) {
    const guard_check *c = &s->check[i];
    void *v;
    if (c->code != code) continue;
    v = c->call ? py->PyObject_CallMethodObjArgs(obj, c->name, NULL)
                : py->PyObject_GetAttr(obj, c->name);
    if (v == NULL) {
      st = -1;
    } else {
      py->Py_DecRef(v);
      if (v != c->expected) st = 0;
    }
  }
  if (st == 0) {
    void *r = py->PyObject_CallFunctionObjArgs(s->callable, obj, NULL);
    if (r != NULL) py->Py_DecRef(r);
    st = r == NULL ? -1 : 1;
  }
  py->Py_DecRef(guard);
  return st < 0 ? -1 : 0;
}

/* The table refused obj (a BufferError set): the guard's callable may know
 * why in the producer's own words (PyTorch's table says "Cannot access data
 * pointer" for a sparse tensor, its __dlpack__ names the layout), so it is
 * asked; its exception replaces the table's, else the table's stands. Any
 * other exception (an interrupt, MemoryError) is left as it is. */
static void explain_failure(const shim_pyapi *py, void *guard, void *obj) {
  void *t, *v, *tb, *r;
  if (!py->PyErr_ExceptionMatches(*py->PyExc_BufferError)) return;
  py->PyErr_Fetch(&t, &v, &tb);
  py->Py_IncRef(guard);
  r = py->PyObject_CallFunctionObjArgs(guard_spec_of(py, guard)->callable, obj, NULL);
  py->Py_DecRef(guard);
  if (r == NULL) {
    if (t != NULL) py->Py_DecRef(t);
    if (v != NULL) py->Py_DecRef(v);
    if (tb != NULL) py->Py_DecRef(tb);
    return;
  }
  py->Py_DecRef(r);
  py->PyErr_Restore(t, v, tb);
}

/* A foreign table failed: DLPack says a producer that cannot export raises
 * BufferError, and that is what every producer's __dlpack__ does (PyTorch's
 * turns its c10::Error into BufferError and drops the C++ backtrace), but
 * PyTorch's table lets the c10::Error out as a RuntimeError whose message
 * carries "Exception raised from ..." and the backtrace. Turn exactly
 * RuntimeError and NotImplementedError into BufferError with the message's
 * first part, as numpy.from_dlpack and the __dlpack__ route show it; leave
 * every other exception (TypeError, MemoryError, KeyboardInterrupt,
 * subclasses such as RecursionError) as it is. */
static void map_producer_error(const shim_pyapi *py) {
  void *t = NULL, *v = NULL, *tb = NULL, *s = NULL, *b = NULL;
  const char *msg = NULL, *cut;
  char buf[512];
  size_t len;
  py->PyErr_Fetch(&t, &v, &tb);
  if (t != *py->PyExc_RuntimeError && t != *py->PyExc_NotImplementedError) {
    py->PyErr_Restore(t, v, tb);
    return;
  }
  if (v != NULL) s = py->PyObject_Str(v);
  if (s != NULL) b = py->PyUnicode_AsUTF8String(s);
  if (b != NULL) msg = py->PyBytes_AsString(b);
  if (msg == NULL) {
    py->PyErr_Clear();
    msg = "";
  }
  cut = strstr(msg, "\nException raised from ");
  len = cut != NULL ? (size_t)(cut - msg) : strlen(msg);
  while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
  if (len >= sizeof(buf)) len = sizeof(buf) - 1;
  memcpy(buf, msg, len);
  buf[len] = '\0';
  if (b != NULL) py->Py_DecRef(b);
  if (s != NULL) py->Py_DecRef(s);
  if (t != NULL) py->Py_DecRef(t);
  if (v != NULL) py->Py_DecRef(v);
  if (tb != NULL) py->Py_DecRef(tb);
  shim_py_fail(py, DLPACKSHIM_ERR_UNSUPPORTED, "%s",
            len != 0 ? buf : "the producer's exchange table cannot export the object");
}

/* obj's tensor through api, in a capsule that owns it as any import leaves
 * one (checked there, in capsule.c, as every import is), its GPU data
 * ordered after the producer's work stream; NULL with an exception. */
static void *take(const shim_pyapi *py, const DLPackExchangeAPI *api, void *guard, void *obj) {
  DLManagedTensorVersioned *m = NULL;
  const shim_record *r = NULL;
  const DLTensor *t;
  void *cap;
  int status;
  if (guard != NULL && run_guard(py, guard, obj, BEFORE_EXPORT) != 0) return NULL;
  status = api->managed_tensor_from_py_object_no_sync(obj, &m);
  if (SHIM_UNLIKELY(status != 0 || m == NULL)) {
    if (status == 0)
      shim_py_fail(py, DLPACKSHIM_ERR_INVALID_TENSOR, "%s",
                   "managed_tensor_from_py_object_no_sync returned no tensor");
    else if (py->PyErr_Occurred() == NULL)
      shim_py_fail(py, DLPACKSHIM_ERR_PYTHON, "%s",
                   "managed_tensor_from_py_object_no_sync failed without setting an exception");
    else if (api != &shim_api_table)
      map_producer_error(py);
    if (guard != NULL) explain_failure(py, guard, obj);
    return NULL;
  }
  cap = shim_owner_capsule(py, m, 0, &r); /* checks m; takes it, also on failure */
  if (SHIM_UNLIKELY(cap == NULL)) return NULL;
  t = shim_record_tensor(r, NULL, NULL, NULL);
  if (guard != NULL && run_guard(py, guard, obj, t->dtype.code) != 0) {
    py->Py_DecRef(cap); /* deletes the tensor */
    return NULL;
  }
  if (SHIM_UNLIKELY(t->device.device_type != kDLCPU) && sync_to_default(py, api, t->device) != 0) {
    py->Py_DecRef(cap); /* deletes the tensor */
    return NULL;
  }
  return cap;
}

static void *no_table(const shim_pyapi *py, void *obj, int why) {
  static const char *const reasons[] = {
      "its type has no __dlpack_c_exchange_api__",
      "its type's __dlpack_c_exchange_api__ is not a \"dlpack_exchange_api\" capsule",
      "its type's exchange table has no version of major 1 (prev_api followed)",
      "its type's exchange table has a NULL managed_tensor_from_py_object_no_sync",
      "the checks dlpackshim makes before using its type's table could not be set up",
      "its type's __dlpack__ is not the one its table stands for (overridden below the class "
      "carrying the table, or a torch.Tensor subclass's own __torch_function__)"};
  (void)obj;
  shim_fail(DLPACKSHIM_ERR_TYPE, "cannot exchange the object through the C table: %s",
            reasons[why <= 0 && why >= PROBE_OVERRIDDEN ? -why : 0]);
  return shim_py_raise(py, DLPACKSHIM_ERR_TYPE);
}

/* _exchange(x) -> Tensor */
static void *fast_exchange(void *cls, void *obj) {
  return shim_exchange_one(shim_py_bound(), cls, obj);
}

/* 1 when objects of `type` with table api are our own Tensors: a
 * re-import then shares the Tensor's holder (no export view, no second
 * record): re-imports never nest and cost one object. */
static int is_own(const shim_pyapi *py, const DLPackExchangeAPI *api, void *type) {
  return api == &shim_api_table && shim_tensor_type_check(py, type);
}

/* obj through a usable table api (and its guard): a new Tensor of class cls;
 * `own` is is_own's answer for obj's type. */
static void *import_through(const shim_pyapi *py, void *cls, const DLPackExchangeAPI *api,
                            void *guard, void *obj, int own) {
  void *cap;
  if (own) return shim_tensor_share(py, cls, (shim_tensor *)obj);
  cap = take(py, api, guard, obj);
  return SHIM_LIKELY(cap != NULL) ? shim_tensor_new(py, cls, cap) : NULL;
}

/* obj through its type's table: a new Tensor, NULL with an exception, or
 * NULL with no exception and *why (a probe's reason) when the type has no
 * usable table. */
static void *import_one(const shim_pyapi *py, void *cls, void *obj, int *why) {
  resolved r;
  void *tp, *t = NULL;
  int own;
  tp = py->PyObject_Type(obj); /* held: lookup may run code that reassigns obj.__class__ */
  lookup(py, tp, &r);
  own = r.api != NULL && is_own(py, r.api, tp);
  py->Py_DecRef(tp);
  *why = r.why;
  if (SHIM_LIKELY(r.api != NULL)) t = import_through(py, cls, r.api, r.guard, obj, own);
  resolved_drop(py, &r);
  return t;
}

void *shim_exchange_one(const shim_pyapi *py, void *cls, void *obj) {
  int why;
  void *t = import_one(py, cls, obj, &why);
  if (SHIM_UNLIKELY(t == NULL) && py->PyErr_Occurred() == NULL) return no_table(py, obj, why);
  return t;
}

/* _exchange_many(list_or_tuple) -> list of Tensors; when some types have no
 * usable table, (list, count, items) with None in their places (the package
 * fills those in through __dlpack__, from `items`). A list is copied first
 * (`items`): producers run Python code that may change it, and the result
 * must describe the sequence given.
 * A type's table is looked up once per call (the run of one type). */
static void *fast_exchange_many(void *cls, void *seq) {
  return shim_exchange_many(shim_py_bound(), cls, seq);
}

void *shim_exchange_many(const shim_pyapi *py, void *cls, void *seq) {
  void *seq_type, *snap, *out, *cur_type = NULL;
  resolved cur;
  ptrdiff_t n, i, missing = 0;
  int is_list, own = 0;
  seq_type = py->PyObject_Type(seq);
  py->Py_DecRef(seq_type); /* a type outlives its instance: compare by address */
  is_list = seq_type == py->PyList_Type || py->PyType_IsSubtype(seq_type, py->PyList_Type);
  if (!is_list && !(seq_type == py->PyTuple_Type || py->PyType_IsSubtype(seq_type, py->PyTuple_Type)))
    return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s", "_exchange_many expects a list or a tuple");
  if (seq_type == py->PyTuple_Type) {
    snap = seq;
    py->Py_IncRef(snap);
  } else {
    snap = py->PySequence_Tuple(seq); /* a subclass is copied through its iterator */
    if (snap == NULL) return NULL;
  }
  n = py->PyTuple_Size(snap);
  out = py->PyList_New(n);
  if (out == NULL) {
    py->Py_DecRef(snap);
    return NULL;
  }
  memset(&cur, 0, sizeof(cur));
  for (i = 0; i < n; i++) {
    void *obj = py->PyTuple_GetItem(snap, i), *tp, *item; /* borrowed: snap holds it */
    tp = py->PyObject_Type(obj);
    if (tp != cur_type) {
      /* The run's type is held while it lasts: lookup and the producers may
       * run code that reassigns obj.__class__, and a freed type's address
       * could come back as another type's. */
      resolved_drop(py, &cur);
      lookup(py, tp, &cur);
      own = cur.api != NULL && is_own(py, cur.api, tp);
      if (cur_type != NULL) py->Py_DecRef(cur_type);
      cur_type = tp;
    } else {
      py->Py_DecRef(tp);
    }
    if (cur.api == NULL) {
      missing++;
      py->Py_IncRef(py->Py_None);
      py->PyList_SetItem(out, i, py->Py_None);
      continue;
    }
    item = import_through(py, cls, cur.api, cur.guard, obj, own);
    if (item == NULL) {
      resolved_drop(py, &cur);
      py->Py_DecRef(cur_type);
      py->Py_DecRef(out);
      py->Py_DecRef(snap);
      return NULL;
    }
    py->PyList_SetItem(out, i, item);
  }
  resolved_drop(py, &cur);
  if (cur_type != NULL) py->Py_DecRef(cur_type);
  if (SHIM_UNLIKELY(missing != 0)) {
    void *count = py->PyLong_FromSsize_t(missing), *triple = NULL;
    if (count != NULL) triple = py->PyTuple_Pack(3, out, count, snap);
    if (count != NULL) py->Py_DecRef(count);
    py->Py_DecRef(out);
    py->Py_DecRef(snap);
    return triple;
  }
  py->Py_DecRef(snap);
  return out;
}

/* _exchange_probe(type) -> int: PROBE_OK (1) when from_dlpack can use the
 * type's table, else 0 or a negative reason. Caches the answer. */
/* _exchange_first(x): a Tensor through type(x)'s table, or, when the type
 * has no usable table, the reason as an int (_exchange_probe's values): a
 * type's first sight asks and imports in one call. */
static void *fast_exchange_first(void *cls, void *obj) {
  const shim_pyapi *py = shim_py_bound();
  int why;
  void *t = import_one(py, cls, obj, &why);
  if (t == NULL && py->PyErr_Occurred() == NULL) return py->PyLong_FromSsize_t(why);
  return t;
}

static void *fast_probe(void *self, void *type) {
  const shim_pyapi *py = shim_py_bound();
  resolved r;
  (void)self;
  if (py == NULL) return NULL;
  lookup(py, type, &r);
  resolved_drop(py, &r);
  return py->PyLong_FromSsize_t(r.why);
}

/* _exchange_forget() -> None: empty the per-type cache (types whose
 * __dlpack_c_exchange_api__ changed, tests). */
static void *fast_forget(void *self, void *unused) {
  const shim_pyapi *py = shim_py_bound();
  (void)self;
  (void)unused;
  if (py == NULL) return NULL;
  cache_clear(py);
  py->Py_IncRef(py->Py_None);
  return py->Py_None;
}

DLPACKSHIM_API void *dlpackshim__exchange_import(void *obj, void *api_capsule,
                                                 const DLTensor **tensor_out) {
  const shim_pyapi *py = shim_py();
  const DLPackExchangeAPI *api;
  void *cap, *tp;
  resolved r;
  int why;
  if (py == NULL) return NULL;
  if (obj == NULL)
    return shim_py_fail(py, DLPACKSHIM_ERR_INVALID_ARGUMENT, "%s", "exchange_import: obj is NULL");
  tp = py->PyObject_Type(obj);
  lookup(py, tp, &r); /* the object's checks (guard), whichever table is used */
  py->Py_DecRef(tp);
  if (api_capsule != NULL) {
    /* An explicit table is the caller's choice (even for a type whose
     * __dlpack__ is overridden), but the checks that belong to the object's
     * type run all the same: the table is the same producer code. */
    if (!py->PyCapsule_IsValid(api_capsule, SHIM_EXCHANGE_API_NAME)) {
      py->PyErr_Clear();
      resolved_drop(py, &r);
      return shim_py_fail(py, DLPACKSHIM_ERR_TYPE, "%s", 
                       "exchange_import: not a \"dlpack_exchange_api\" capsule");
    }
    api = pick_version(
        (const DLPackExchangeAPIHeader *)py->PyCapsule_GetPointer(api_capsule, SHIM_EXCHANGE_API_NAME),
        &why);
    if (api != NULL && r.guard_bad) {
      api = NULL;
      why = r.guard_bad;
    }
  } else {
    api = r.api;
    why = r.why;
  }
  if (api == NULL) {
    resolved_drop(py, &r);
    return no_table(py, obj, why);
  }
  cap = take(py, api, r.guard, obj);
  resolved_drop(py, &r);
  if (cap == NULL) return NULL;
  if (tensor_out != NULL) *tensor_out = shim_record_tensor(shim_record_of(py, cap), NULL, NULL, NULL);
  return cap;
}

/* ---- builtins (dlpackshim__py_builtin, after pyfast.c's) ------------------- */

static const shim_method_def exchange_defs[] = {
    {"_exchange", (void *)fast_exchange, SHIM_METH_O,
     "_exchange(x) -> Tensor: import x through its type's DLPack C exchange table."},
    {"_exchange_many", (void *)fast_exchange_many, SHIM_METH_O,
     "_exchange_many(seq) -> list, or (list, count, items) with None where there is no table."},
    {"_exchange_probe", (void *)fast_probe, SHIM_METH_O,
     "_exchange_probe(type) -> int: 1 if the type's exchange table is usable, else 0 or a reason < 0."},
    {"_exchange_register", (void *)fast_register, SHIM_METH_O,
     "_exchange_register(guard_for): the guard factory; the first caller's class is the default."},
    {"_exchange_forget", (void *)fast_forget, SHIM_METH_NOARGS,
     "_exchange_forget(): empty the per-type table cache."},
    {"_exchange_first", (void *)fast_exchange_first, SHIM_METH_O,
     "_exchange_first(x) -> Tensor, or why (an int) when type(x) has no usable table."},
};

const shim_method_def *shim_exchange_defs(int *count) {
  *count = (int)(sizeof(exchange_defs) / sizeof(exchange_defs[0]));
  return exchange_defs;
}
