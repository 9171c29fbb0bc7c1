#!/usr/bin/env python3
"""libdlpackshim from plain ctypes: no cffi, no dlpackshim package, no NumPy.

Loads the shared library from $DLPACKSHIM_LIBRARY (what ``make check`` sets),
else wherever ``ctypes.util.find_library("dlpackshim")`` finds it, declares
argtypes/restype for each function it calls, then:

1. builds a tensor over a ctypes array with dlpackshim_tensor_new, handing the
   library a release callback (a ctypes CFUNCTYPE) that counts its calls;
2. validates it and reads its fields through ctypes.Structure mirrors of the
   DLPack structs;
3. frees it and checks the release callback ran exactly once;
4. shows dlpackshim_tensor_validate rejecting a bad tensor, with the reason
   from dlpackshim_last_error;
5. clones a strided view (a tensor the C library allocates) and frees it;
6. wraps a tensor in a "dltensor_versioned" capsule and takes it back out, the
   two calls that deal in Python objects (ctypes.PyDLL keeps the GIL for
   the one that returns a new reference).

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
OK, ERR_INVALID_ARGUMENT, ERR_INVALID_TENSOR = 0, -1, -3

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
    # library takes it itself where it touches Python.
    lib = ctypes.CDLL(path)
    # PyDLL keeps the GIL and checks for a Python exception: for the functions
    # documented "returns a new Python reference".
    pylib = ctypes.PyDLL(path)

    def fn(name, restype, *argtypes, on=lib):
        f = getattr(on, name)
        f.restype, f.argtypes = restype, list(argtypes)
        return f

    u8, u16, i32, u32, i64, u64 = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_int32,
                                   ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64)
    c_str, vp, ip = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_ssize_t  # intptr_t
    api = {
        "version_string": fn("dlpackshim_version_string", c_str),
        "dlpack_version": fn("dlpackshim_dlpack_version", None, ctypes.POINTER(u32), ctypes.POINTER(u32)),
        "strerror": fn("dlpackshim_strerror", c_str, ctypes.c_int),
        "last_error": fn("dlpackshim_last_error", c_str),
        "last_status": fn("dlpackshim_last_status", ctypes.c_int),
        "clear_error": fn("dlpackshim_clear_error", None),
        "tensor_new": fn("dlpackshim_tensor_new", P_MANAGED, vp, i32, i32, i32, P_I64, P_I64,
                         u8, u8, u16, u64, u64, vp, RELEASE_FN),
        "tensor_free": fn("dlpackshim_tensor_free", None, P_MANAGED),
        "tensor_clone": fn("dlpackshim_tensor_clone", P_MANAGED, P_TENSOR, u64),
        "validate": fn("dlpackshim_tensor_validate", ctypes.c_int, P_TENSOR, u64),
        "numel": fn("dlpackshim_tensor_numel", i64, P_TENSOR),
        "nbytes": fn("dlpackshim_tensor_nbytes", i64, P_TENSOR, u64),
        "is_contiguous": fn("dlpackshim_tensor_is_contiguous", ctypes.c_int, P_TENSOR),
        "capsule_new": fn("dlpackshim_capsule_new", ctypes.py_object, P_MANAGED, ctypes.c_int, on=pylib),
        "capsule_consume": fn("dlpackshim_capsule_consume", ctypes.c_int, ip, ctypes.POINTER(vp)),
        "owner_info": fn("dlpackshim_owner_info", ctypes.c_int, ip, ctypes.POINTER(u32),
                         ctypes.POINTER(u32), ctypes.POINTER(u64)),
    }
    return path, api


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
    t = L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 2, shape, None, kDLFloat, 32, 1, 0, 0,
                        token, release)
    if not t:
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
    check(L["numel"](ctypes.byref(dl)) == 6 and L["nbytes"](ctypes.byref(dl), 0) == 24,
          "numel 6, nbytes 24")
    check(L["is_contiguous"](ctypes.byref(dl)) == 1, "contiguous")
    data = ctypes.cast(dl.data + dl.byte_offset, ctypes.POINTER(ctypes.c_float))
    check([data[i * strd[0] + j * strd[1]] for i in range(2) for j in range(3)] == list(range(6)),
          "elements read through the strides")
    check(released == [], "release not called while the tensor lives")
    L["tensor_free"](t)
    check(released == [token], "tensor_free ran the release callback exactly once, with our owner")
    L["tensor_free"](None)  # NULL is accepted

    # A failed tensor_new does not call release: the owner stays the caller's.
    bad_shape = (ctypes.c_int64 * 1)(-1)
    t = L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 1, bad_shape, None, kDLFloat, 32, 1, 0, 0,
                        token, release)
    status = L["last_status"]()
    print(f"tensor_new with shape (-1,): NULL={not t}, status {status} "
          f"({text(L['strerror'](status))}): {text(L['last_error']())}")
    check(not t and status == ERR_INVALID_TENSOR, "refused with DLPACKSHIM_ERR_INVALID_TENSOR")
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
    c = L["tensor_clone"](ctypes.byref(view), FLAG_READ_ONLY)
    if not c:
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

    # 6. Python objects: a capsule made by the library, consumed by the library.
    print("capsule_new + capsule_consume:")
    token2 = id(shape)
    owners[token2] = shape
    t = L["tensor_new"](ctypes.addressof(buf), kDLCPU, 0, 1, shape, None, kDLFloat, 32, 1, 0,
                        FLAG_READ_ONLY, token2, release)
    if not t:
        check(False, f"tensor_new failed: {text(L['last_error']())}")
        return
    try:
        cap = L["capsule_new"](t, 1)  # a new reference (PyDLL + py_object)
    except Exception as e:  # on failure the tensor is still ours to free
        L["tensor_free"](t)
        check(False, f"capsule_new raised {e!r}")
        return
    check(type(cap).__name__ == "PyCapsule" and 'dltensor_versioned' in repr(cap),
          f"capsule_new gave {cap!r}")
    out = ctypes.c_void_p()
    rc = L["capsule_consume"](id(cap), ctypes.byref(out))
    check(rc == 1 and out.value == ctypes.addressof(t.contents), "capsule_consume: versioned, same tensor")
    check("used_dltensor_versioned" in repr(cap), "the capsule is renamed used_dltensor_versioned")
    fl = ctypes.c_uint64()
    rc = L["owner_info"](id(cap), None, None, ctypes.byref(fl))
    check(rc == 1 and fl.value == FLAG_READ_ONLY, "owner_info reads READ_ONLY back")
    rc = L["capsule_consume"](id(cap), ctypes.byref(out))
    check(rc < 0 and L["last_status"]() == rc, f"a second consume is refused ({text(L['last_error']())})")
    check(released == [token], "release not called while the capsule owns the tensor")
    del cap  # the capsule owns the tensor now: its destructor runs the deleter
    check(released == [token, token2], "dropping the capsule ran release exactly once")


if __name__ == "__main__":
    main()
    print("ctypes example:", "all checks passed" if failures == 0 else f"{failures} check(s) FAILED")
    sys.exit(1 if failures else 0)
