#!/usr/bin/env python3
"""libdlpackshim from plain ctypes: no cffi, no dlpackshim package, no NumPy.

Loads the shared library from $DLPACKSHIM_LIBRARY (what ``make check`` sets),
else wherever ``ctypes.util.find_library("dlpackshim")`` finds it, declares
argtypes/restype for each function it calls (every fallible function returns
an int status, 0 or a negative dlpackshim_status, and hands its results back
through out-parameters: here ctypes objects passed with ctypes.byref), then:

1. builds a tensor over a ctypes array with dlpackshim_tensor_new, handing the
   library a release callback (a ctypes CFUNCTYPE) that counts its calls;
2. validates it and reads its fields through ctypes.Structure mirrors of the
   DLPack structs;
3. frees it and checks the release callback ran exactly once;
4. shows dlpackshim_tensor_validate rejecting a bad tensor, with the reason
   from dlpackshim_last_error;
5. clones a strided view (a tensor the C library allocates) and frees it;
6. wraps a tensor in a "dltensor_versioned" capsule and imports it back, the
   calls that deal in Python objects. They take the GIL themselves, so a plain
   ctypes.CDLL calls them; the new capsule comes back through a void **
   out-parameter as a new reference, which must be turned into a Python
   object and then released once (see capsule_from_out below).

Prints each step; exits 1 on any mismatch, 0 when all checks hold.
"""
import ctypes
import ctypes.util
import os
import sys

# ---- the DLPack 1.3 structs (dlpack.h, field for field) ------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensorVersioned) == 80

# Fixed values from dlpackshim.h (ctypes cannot read the header's enums).
kDLCPU, kDLInt, kDLFloat = 1, 0, 2
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
OK, ERR_INVALID_ARGUMENT, ERR_INVALID_TENSOR, ERR_CAPSULE = 0, -1, -3, -6
LAYOUT_C = 1  # dlpackshim_layout: DLPACKSHIM_LAYOUT_C

RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # dlpackshim_release_fn
P_MANAGED = ctypes.POINTER(DLManagedTensorVersioned)
P_TENSOR = ctypes.POINTER(DLTensor)
P_I64 = ctypes.POINTER(ctypes.c_int64)


def load():
    """The library: $DLPACKSHIM_LIBRARY, else the system's search path."""
    path = os.environ.get("DLPACKSHIM_LIBRARY") or ctypes.util.find_library("dlpackshim")
    if not path:
        sys.exit("ctypes_basic: libdlpackshim not found: set DLPACKSHIM_LIBRARY=/path/to/libdlpackshim.so")
    # CDLL releases the GIL around each call, as ABI-mode cffi does; the
    # library takes it itself where it touches Python (capsule_*).
    lib = ctypes.CDLL(path)

    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype, f.argtypes = restype, list(argtypes)
        return f

    u8, u16, i32, u32, i64, u64 = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_int32,
                                   ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64)
    c_str, vp, ptr = ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER
    status = ctypes.c_int  # 0 or a negative dlpackshim_status
    api = {
        "version_string": fn("dlpackshim_version_string", c_str),
        "dlpack_version": fn("dlpackshim_dlpack_version", None, ctypes.POINTER(u32), ctypes.POINTER(u32)),
        "strerror": fn("dlpackshim_strerror", c_str, ctypes.c_int),
        "last_error": fn("dlpackshim_last_error", c_str),
        "last_status": fn("dlpackshim_last_status", ctypes.c_int),
        "clear_error": fn("dlpackshim_clear_error", None),
        "tensor_new": fn("dlpackshim_tensor_new", status, vp, i32, i32, i32, P_I64, P_I64,
                         u8, u8, u16, u64, u64, vp, RELEASE_FN, ptr(P_MANAGED)),
        "tensor_free": fn("dlpackshim_tensor_free", None, P_MANAGED),
        "tensor_clone": fn("dlpackshim_tensor_clone", status, P_TENSOR, u64, ptr(P_MANAGED)),
        "validate": fn("dlpackshim_tensor_validate", status, P_TENSOR, u64),
        "numel": fn("dlpackshim_tensor_numel", status, P_TENSOR, ptr(i64)),
        "nbytes": fn("dlpackshim_tensor_nbytes", status, P_TENSOR, u64, ptr(i64)),
        "layout": fn("dlpackshim_tensor_layout", status, P_TENSOR, ptr(i32)),
        # Python objects are void *: an argument declared ctypes.py_object
        # passes the object's address (ctypes.c_void_p(id(obj)) is the same);
        # a new reference comes back through a void ** as a plain address.
        "capsule_new": fn("dlpackshim_capsule_new", status, P_MANAGED, ctypes.c_int, ptr(vp)),
        "capsule_import": fn("dlpackshim_capsule_import", status, ctypes.py_object, ptr(P_TENSOR)),
        "capsule_info": fn("dlpackshim_capsule_info", status, ctypes.py_object, ptr(P_TENSOR),
                           ptr(u32), ptr(u32), ptr(u64)),
    }
    return path, api


# Drops a reference the library handed over (PyDLL: needs the GIL, which it keeps).
Py_DecRef = ctypes.pythonapi.Py_DecRef
Py_DecRef.restype, Py_DecRef.argtypes = None, (ctypes.c_void_p,)


def capsule_from_out(out):
    """The Python object behind a new reference that came back through a
    ``void **`` out-parameter (a ctypes.c_void_p), without leaking it:
    ``.value`` of the cast takes a reference of our own, then the library's
    is dropped, so the returned object is held by exactly what holds it."""
    obj = ctypes.cast(out, ctypes.py_object).value  # +1: ours
    Py_DecRef(out)                                  # -1: the library's
    out.value = None                                # the address is no longer ours to use
    return obj


failures = 0


def check(ok, what):
    global failures
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures += 1


def text(b):
    return b.decode("utf-8", "replace") if b else ""


def main():
    path, L = load()
    major, minor = ctypes.c_uint32(), ctypes.c_uint32()
    L["dlpack_version"](ctypes.byref(major), ctypes.byref(minor))
    print(f"loaded {path}: libdlpackshim {text(L['version_string']())}, DLPack {major.value}.{minor.value}")
    check((major.value, minor.value) == (1, 3), "DLPack ABI 1.3")

    # 1-3. A 2x3 float32 tensor over a ctypes array; the release callback counts.
    print("tensor_new over a ctypes float array, shape (2, 3), strides NULL:")
    buf = (ctypes.c_float * 6)(*range(6))
    released = []
    owners = {}  # keeps each owner alive until its release runs

    @RELEASE_FN
    def release(owner):
        released.append(owner)
        owners.pop(owner, None)

    token = id(buf)
    owners[token] = buf
    shape = (ctypes.c_int64 * 2)(2, 3)
    t = P_MANAGED()  # the out-parameter: NULL until the call succeeds
    rc = L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 2, shape, None, kDLFloat, 32, 1, 0, 0,
                         token, release, ctypes.byref(t))
    if rc != OK:
        check(False, f"tensor_new failed: {text(L['last_error']())}")
        return
    m = t.contents
    dl = m.dl_tensor
    shp = [dl.shape[i] for i in range(dl.ndim)]
    strd = [dl.strides[i] for i in range(dl.ndim)]
    print(f"  version {m.version.major}.{m.version.minor}, flags {m.flags}, "
          f"device ({dl.device.device_type}, {dl.device.device_id}), "
          f"dtype ({dl.dtype.code}, {dl.dtype.bits}, {dl.dtype.lanes}), shape {shp}, strides {strd}")
    check((m.version.major, m.version.minor) == (1, 3), "version 1.3")
    check(dl.data == ctypes.addressof(buf), "data is the ctypes array (no copy)")
    check((dl.device.device_type, dl.device.device_id) == (kDLCPU, 0), "device (kDLCPU, 0)")
    check((dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (kDLFloat, 32, 1), "dtype float32")
    check(shp == [2, 3] and strd == [3, 1], "shape [2, 3], explicit strides [3, 1]")
    check(L["validate"](ctypes.byref(dl), m.flags) == OK, "validates")
    numel, nbytes, layout = ctypes.c_int64(-1), ctypes.c_int64(-1), ctypes.c_int32(-1)
    check(L["numel"](ctypes.byref(dl), ctypes.byref(numel)) == OK
          and L["nbytes"](ctypes.byref(dl), 0, ctypes.byref(nbytes)) == OK
          and (numel.value, nbytes.value) == (6, 24), "numel 6, nbytes 24")
    check(L["layout"](ctypes.byref(dl), ctypes.byref(layout)) == OK
          and layout.value & LAYOUT_C, "contiguous (layout has DLPACKSHIM_LAYOUT_C)")
    data = ctypes.cast(dl.data + dl.byte_offset, ctypes.POINTER(ctypes.c_float))
    check([data[i * strd[0] + j * strd[1]] for i in range(2) for j in range(3)] == list(range(6)),
          "elements read through the strides")
    check(released == [], "release not called while the tensor lives")
    L["tensor_free"](t)
    check(released == [token], "tensor_free ran the release callback exactly once, with our owner")
    L["tensor_free"](None)  # NULL is accepted

    # A failed tensor_new does not call release: the owner stays the caller's.
    bad_shape = (ctypes.c_int64 * 1)(-1)
    t = P_MANAGED()
    status = L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 1, bad_shape, None, kDLFloat, 32, 1,
                             0, 0, token, release, ctypes.byref(t))
    print(f"tensor_new with shape (-1,): status {status} ({text(L['strerror'](status))}), "
          f"tensor_out left NULL: {not t}: {text(L['last_error']())}")
    check(not t and status == ERR_INVALID_TENSOR and L["last_status"]() == status,
          "refused with DLPACKSHIM_ERR_INVALID_TENSOR")
    check(released == [token], "release NOT called on failure")

    # 4. validate rejects a bad tensor and says why.
    print("tensor_validate on hand-made bad tensors:")
    for what, tensor in [
        ("ndim 2 with shape NULL",
         DLTensor(ctypes.addressof(buf), DLDevice(kDLCPU, 0), 2, DLDataType(kDLFloat, 32, 1), None, None, 0)),
        ("dtype code 99",
         DLTensor(ctypes.addressof(buf), DLDevice(kDLCPU, 0), 1, DLDataType(99, 32, 1), shape, None, 0)),
        ("device_type 5 (not a DLDeviceType)",
         DLTensor(ctypes.addressof(buf), DLDevice(5, 0), 1, DLDataType(kDLFloat, 32, 1), shape, None, 0)),
    ]:
        L["clear_error"]()
        rc = L["validate"](ctypes.byref(tensor), 0)
        msg = text(L["last_error"]())
        print(f"  {what}: status {rc}: {msg}")
        check(rc == ERR_INVALID_TENSOR and msg != "" and L["last_status"]() == rc,
              f"{what}: DLPACKSHIM_ERR_INVALID_TENSOR with a message")
    check(L["validate"](None, 0) == ERR_INVALID_ARGUMENT, "validate(NULL): DLPACKSHIM_ERR_INVALID_ARGUMENT")

    # 5. A tensor the C library allocates: clone of the transposed view.
    print("tensor_clone of the transposed view (shape (3, 2), strides (1, 3)):")
    tshape = (ctypes.c_int64 * 2)(3, 2)
    tstrides = (ctypes.c_int64 * 2)(1, 3)
    view = DLTensor(ctypes.addressof(buf), DLDevice(kDLCPU, 0), 2, DLDataType(kDLFloat, 32, 1),
                    tshape, tstrides, 0)
    c = P_MANAGED()
    if L["tensor_clone"](ctypes.byref(view), FLAG_READ_ONLY, ctypes.byref(c)) != OK:
        check(False, f"tensor_clone failed: {text(L['last_error']())}")
    else:
        cm = c.contents
        cd = cm.dl_tensor
        vals = ctypes.cast(cd.data + cd.byte_offset, ctypes.POINTER(ctypes.c_float))[:6]
        print(f"  flags {cm.flags}, strides {[cd.strides[i] for i in range(2)]}, data {vals}")
        check(cm.flags == FLAG_IS_COPIED, "flags: IS_COPIED set, READ_ONLY cleared")
        check([cd.strides[0], cd.strides[1]] == [2, 1], "compact strides [2, 1]")
        check(vals == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0], "holds the transpose")
        check((cd.data + cd.byte_offset) % 256 == 0, "data aligned to 256 bytes")
        L["tensor_free"](c)  # the library's deleter frees its one allocation

    # 6. Python objects: a capsule made by the library, imported by the library.
    print("capsule_new + capsule_import:")
    token2 = id(shape)
    owners[token2] = shape
    t = P_MANAGED()
    if L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 1, shape, None, kDLFloat, 32, 1, 0,
                       FLAG_READ_ONLY, token2, release, ctypes.byref(t)) != OK:
        check(False, f"tensor_new failed: {text(L['last_error']())}")
        return
    out = ctypes.c_void_p()  # void **capsule_out: a new reference, ours to release
    if L["capsule_new"](t, 1, ctypes.byref(out)) != OK:
        L["tensor_free"](t)  # on failure the tensor is still ours to free
        check(False, f"capsule_new failed: {text(L['last_error']())}")
        return
    cap = capsule_from_out(out)  # the capsule object; the library's reference dropped
    check(type(cap).__name__ == "PyCapsule" and 'dltensor_versioned' in repr(cap),
          f"capsule_new gave {cap!r}")
    snap = P_TENSOR()  # const DLTensor **tensor_out: valid while the capsule lives
    rc = L["capsule_import"](cap, ctypes.byref(snap))
    mt = t.contents.dl_tensor
    check(rc == OK and snap and snap.contents.data == mt.data == ctypes.addressof(buf)
          and snap.contents.ndim == 1 and snap.contents.shape[0] == 2,
          "capsule_import: our tensor (same data, shape [2])")
    check("used_dltensor_versioned" in repr(cap), "the capsule is renamed used_dltensor_versioned")
    info, major, minor, fl = P_TENSOR(), ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint64()
    rc = L["capsule_info"](cap, ctypes.byref(info), ctypes.byref(major), ctypes.byref(minor),
                           ctypes.byref(fl))
    check(rc == OK and (major.value, minor.value) == (1, 3) and fl.value == FLAG_READ_ONLY
          and ctypes.addressof(info.contents) == ctypes.addressof(snap.contents),
          "capsule_info: versioned 1.3, READ_ONLY read back, the same snapshot")
    again = P_TENSOR()
    rc = L["capsule_import"](cap, ctypes.byref(again))
    check(rc == ERR_CAPSULE and L["last_status"]() == rc and not again,
          f"a second import is refused ({text(L['last_error']())})")
    check(released == [token], "release not called while the capsule owns the tensor")
    del cap, snap, info  # the capsule owns the tensor now: its destructor runs the deleter
    check(released == [token, token2], "dropping the capsule ran release exactly once")

if __name__ == "__main__":
    main()
    print("ctypes example:", "all checks passed" if failures == 0 else f"{failures} check(s) FAILED")
    sys.exit(1 if failures else 0)
