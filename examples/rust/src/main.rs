//! Using libdlpackshim from Rust through nothing but the C ABI.
//!
//! The DLPack structs are written out by hand with #[repr(C)] (they are public
//! ABI: the asserts below pin their layout to dlpack.h), and each function is
//! declared in an `extern "C"` block. No crates: `cargo build --offline`.
//! Every fallible function returns an `i32` status (0 or a negative
//! dlpackshim_status) and writes its results through `*mut` out-parameters.
//!
//! What it shows, in order:
//!  1. a tensor over Rust memory, built with dlpackshim_tensor_new, owned by a
//!     Box handed to the library with a Rust release callback;
//!  2. reading its fields and asking the library about it;
//!  3. dlpackshim_tensor_free calls the release callback exactly once;
//!  4. a failed dlpackshim_tensor_new does not call it (the owner stays ours);
//!  5. dlpackshim_tensor_validate rejecting bad tensors, with
//!     dlpackshim_last_error saying why (and errors being per thread);
//!  6. consuming a tensor the C library produced (dlpackshim_tensor_clone),
//!     checking that its deleter runs exactly once;
//!  7. dlpackshim_copy from a strided view into a Rust Vec.
//!
//! Exit status 0 when every check holds, 1 otherwise. Run by ../run.sh.

use std::ffi::{c_char, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::process::ExitCode;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

// ---- Part 1 of dlpackshim.h: the DLPack 1.3 ABI, field for field --------

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32, // DLDeviceType, an int-sized C enum
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8, // DLDataTypeCode
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64, // in elements, not bytes
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

pub type Deleter = unsafe extern "C" fn(*mut DLManagedTensorVersioned);

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<Deleter>, // NULL allowed: then nobody calls it
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// The layout on every 64-bit target dlpack.h supports.
const _: () = {
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
};

const KDL_CPU: i32 = 1;
const KDL_INT: u8 = 0;
const KDL_FLOAT: u8 = 2;

// The enums of Part 2, with the fixed values the header promises.
const FLAG_READ_ONLY: u64 = 1;
const FLAG_IS_COPIED: u64 = 2;
const DLPACKSHIM_OK: i32 = 0;
const DLPACKSHIM_ERR_INVALID_ARGUMENT: i32 = -1;
const DLPACKSHIM_ERR_INVALID_TENSOR: i32 = -3;
const DLPACKSHIM_LAYOUT_C: i32 = 1;
const DLPACKSHIM_STREAM_NONE: i64 = -1; // the CPU's stream rule: None or -1

// ---- Part 2: the functions this program calls ----------------------------

pub type ReleaseFn = Option<unsafe extern "C" fn(owner: *mut c_void)>;

extern "C" {
    fn dlpackshim_version_string() -> *const c_char;
    fn dlpackshim_dlpack_version(major: *mut u32, minor: *mut u32);
    fn dlpackshim_strerror(status: i32) -> *const c_char;
    fn dlpackshim_last_error() -> *const c_char;
    fn dlpackshim_last_status() -> i32;
    fn dlpackshim_clear_error();
    #[allow(clippy::too_many_arguments)]
    fn dlpackshim_tensor_new(
        data: *mut c_void,
        device_type: i32,
        device_id: i32,
        ndim: i32,
        shape: *const i64,
        strides: *const i64,
        dtype_code: u8,
        dtype_bits: u8,
        dtype_lanes: u16,
        byte_offset: u64,
        flags: u64,
        owner: *mut c_void,
        release: ReleaseFn,
        tensor_out: *mut *mut DLManagedTensorVersioned,
    ) -> i32;
    fn dlpackshim_tensor_free(t: *mut DLManagedTensorVersioned);
    fn dlpackshim_tensor_clone(
        src: *const DLTensor,
        flags: u64,
        tensor_out: *mut *mut DLManagedTensorVersioned,
    ) -> i32;
    fn dlpackshim_tensor_validate(t: *const DLTensor, flags: u64) -> i32;
    fn dlpackshim_tensor_numel(t: *const DLTensor, numel_out: *mut i64) -> i32;
    fn dlpackshim_tensor_itemsize(t: *const DLTensor, flags: u64, itemsize_out: *mut i64) -> i32;
    fn dlpackshim_tensor_nbytes(t: *const DLTensor, flags: u64, nbytes_out: *mut i64) -> i32;
    fn dlpackshim_tensor_layout(t: *const DLTensor, layout_out: *mut i32) -> i32;
    fn dlpackshim_tensor_byte_span(t: *const DLTensor, flags: u64, lo: *mut i64, hi: *mut i64)
        -> i32;
    // stream: unused when both tensors are host memory (pass 0).
    fn dlpackshim_copy(dst: *const DLTensor, src: *const DLTensor, stream: i64) -> i32;
}

// ---- small helpers -------------------------------------------------------

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return "(null)".into();
    }
    // SAFETY: the library returns NUL-terminated strings (static, or
    // thread-local until the next failing call on this thread).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn last_error() -> String {
    text(unsafe { dlpackshim_last_error() })
}

/// Calls a `(..., T *out) -> int` function: Ok(value) on DLPACKSHIM_OK, else
/// Err(status) (dlpackshim_last_error says why).
fn out<T: Default>(f: impl FnOnce(*mut T) -> i32) -> Result<T, i32> {
    let mut value = T::default();
    match f(&mut value) {
        DLPACKSHIM_OK => Ok(value),
        status => Err(status),
    }
}

/// Whether t is compact row-major (dlpackshim_tensor_layout has DLPACKSHIM_LAYOUT_C).
fn is_c_contiguous(t: &DLTensor) -> Result<bool, i32> {
    let layout = out(|layout| unsafe { dlpackshim_tensor_layout(t, layout) })?;
    Ok(layout & DLPACKSHIM_LAYOUT_C != 0)
}

struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        println!("  [{}] {}", if ok { "ok" } else { "FAIL" }, what);
        if !ok {
            self.failed += 1;
        }
    }
}

/// shape and strides of a tensor as slices (ndim entries each; empty for 0-d).
unsafe fn dims(t: &DLTensor) -> (&[i64], &[i64]) {
    let n = t.ndim as usize;
    if n == 0 {
        return (&[], &[]);
    }
    (
        std::slice::from_raw_parts(t.shape, n),
        std::slice::from_raw_parts(t.strides, n),
    )
}

/// A borrowed DLTensor over Rust memory, for the calls that take `const DLTensor *`.
fn view(data: *mut c_void, dtype: DLDataType, shape: &mut [i64], strides: &mut [i64]) -> DLTensor {
    DLTensor {
        data,
        device: DLDevice { device_type: KDL_CPU, device_id: 0 },
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: if strides.is_empty() { ptr::null_mut() } else { strides.as_mut_ptr() },
        byte_offset: 0,
    }
}

// ---- the owner handed to the library, and its release callback ----------

/// What keeps the tensor's memory alive: the library holds it as `void *owner`.
struct Owner {
    data: Vec<f32>,
}

static RELEASED: AtomicUsize = AtomicUsize::new(0);

/// dlpackshim_release_fn: the tensor's deleter calls it exactly once.
unsafe extern "C" fn release_owner(owner: *mut c_void) {
    // Takes back the Box given away with Box::into_raw; dropping it frees the Vec.
    drop(Box::from_raw(owner as *mut Owner));
    RELEASED.fetch_add(1, Ordering::SeqCst);
}

// ---- a consumer's view of a tensor somebody else produced ---------------

/// A managed tensor this program owns. Dropping it calls the producer's
/// deleter, once; Rust's ownership makes a second call impossible.
struct Managed(NonNull<DLManagedTensorVersioned>);

impl Managed {
    fn tensor(&self) -> &DLManagedTensorVersioned {
        unsafe { self.0.as_ref() }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        unsafe { dlpackshim_tensor_free(self.0.as_ptr()) }
    }
}

/// The producer's own deleter, saved before interposing `counting_deleter`.
static PRODUCER_DELETER: Mutex<Option<Deleter>> = Mutex::new(None);
static PRODUCER_DELETES: AtomicUsize = AtomicUsize::new(0);

/// Counts, then forwards to the producer's deleter (only the owner of a
/// managed tensor may do this: it is the one who will call the deleter).
unsafe extern "C" fn counting_deleter(t: *mut DLManagedTensorVersioned) {
    PRODUCER_DELETES.fetch_add(1, Ordering::SeqCst);
    let original = PRODUCER_DELETER.lock().unwrap().expect("no saved deleter");
    original(t);
}

// ---- the walk-through ----------------------------------------------------

fn versions(c: &mut Checks) {
    let (mut major, mut minor) = (0u32, 0u32);
    unsafe { dlpackshim_dlpack_version(&mut major, &mut minor) };
    let version = text(unsafe { dlpackshim_version_string() });
    println!("libdlpackshim {version}, DLPack {major}.{minor}");
    c.check((major, minor) == (1, 3), "dlpackshim_dlpack_version() is 1.3");
    c.check(!version.is_empty(), "dlpackshim_version_string() is not empty");
}

fn build_validate_free(c: &mut Checks) {
    println!("tensor_new over a Rust Vec<f32>, shape [2, 3], strides NULL:");
    let mut owner = Box::new(Owner { data: (0..6).map(|i| i as f32).collect() });
    let data = owner.data.as_mut_ptr() as *mut c_void;
    let shape = [2i64, 3];
    let owner = Box::into_raw(owner) as *mut c_void;
    let before = RELEASED.load(Ordering::SeqCst);
    let mut t = ptr::null_mut();
    let rc = unsafe {
        dlpackshim_tensor_new(
            data, KDL_CPU, 0, 2, shape.as_ptr(), ptr::null(), KDL_FLOAT, 32, 1, 0, 0, owner,
            Some(release_owner), &mut t,
        )
    };
    let (DLPACKSHIM_OK, Some(t)) = (rc, NonNull::new(t)) else {
        // On failure the library did not call release: the owner is still ours.
        drop(unsafe { Box::from_raw(owner as *mut Owner) });
        c.check(false, &format!("dlpackshim_tensor_new failed: {}", last_error()));
        return;
    };
    let m = Managed(t);
    let mt = m.tensor();
    let dl = &mt.dl_tensor;
    let (tshape, tstrides) = unsafe { dims(dl) };
    println!(
        "  version {}.{}, flags {}, device ({}, {}), dtype ({}, {}, {}), shape {:?}, strides {:?}",
        mt.version.major, mt.version.minor, mt.flags, dl.device.device_type, dl.device.device_id,
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes, tshape, tstrides
    );
    c.check(mt.version == DLPackVersion { major: 1, minor: 3 }, "version is 1.3");
    c.check(mt.flags == 0, "flags are what we passed (0)");
    c.check(mt.deleter.is_some(), "the tensor has a deleter");
    c.check(dl.data == data, "data points at the Vec, no copy");
    c.check(dl.device == DLDevice { device_type: KDL_CPU, device_id: 0 }, "device is (kDLCPU, 0)");
    c.check(dl.dtype == DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 }, "dtype is float32");
    c.check(dl.ndim == 2 && tshape == [2, 3], "shape is [2, 3]");
    c.check(dl.shape as *const i64 != shape.as_ptr(), "the library keeps its own copy of shape");
    c.check(tstrides == [3, 1], "NULL strides came back explicit: [3, 1]");
    c.check(unsafe { dlpackshim_tensor_validate(dl, mt.flags) } == DLPACKSHIM_OK, "validates");
    c.check(out(|n| unsafe { dlpackshim_tensor_numel(dl, n) }) == Ok(6), "numel 6");
    c.check(out(|n| unsafe { dlpackshim_tensor_itemsize(dl, 0, n) }) == Ok(4), "itemsize 4");
    c.check(out(|n| unsafe { dlpackshim_tensor_nbytes(dl, 0, n) }) == Ok(24), "nbytes 24");
    c.check(is_c_contiguous(dl) == Ok(true), "contiguous (layout has DLPACKSHIM_LAYOUT_C)");
    let (mut lo, mut hi) = (-1i64, -1i64);
    let rc = unsafe { dlpackshim_tensor_byte_span(dl, 0, &mut lo, &mut hi) };
    c.check(rc == DLPACKSHIM_OK && (lo, hi) == (0, 24), "byte span [0, 24)");
    // Element (i, j) through the tensor's own strides.
    let base = unsafe { (dl.data as *const u8).add(dl.byte_offset as usize) } as *const f32;
    let mut same = true;
    for i in 0..2i64 {
        for j in 0..3i64 {
            let v = unsafe { *base.offset((i * tstrides[0] + j * tstrides[1]) as isize) };
            same &= v == (i * 3 + j) as f32;
        }
    }
    c.check(same, "elements read through the strides equal the Vec's");
    c.check(RELEASED.load(Ordering::SeqCst) == before, "release not called while the tensor lives");
    drop(m); // dlpackshim_tensor_free -> deleter -> release_owner
    c.check(RELEASED.load(Ordering::SeqCst) == before + 1, "tensor_free called release exactly once");
    unsafe { dlpackshim_tensor_free(ptr::null_mut()) }; // NULL is accepted, as free()
}

fn failed_new_keeps_owner(c: &mut Checks) {
    println!("tensor_new with a negative extent:");
    let owner = Box::into_raw(Box::new(Owner { data: vec![0.0; 4] }));
    let shape = [-4i64];
    let before = RELEASED.load(Ordering::SeqCst);
    let data = unsafe { (*owner).data.as_mut_ptr() } as *mut c_void;
    let mut t = ptr::null_mut();
    let status = unsafe {
        dlpackshim_tensor_new(
            data, KDL_CPU, 0, 1, shape.as_ptr(), ptr::null(), KDL_FLOAT, 32, 1, 0, 0,
            owner as *mut c_void, Some(release_owner), &mut t,
        )
    };
    println!("  status {}: {} ({})", status, last_error(), text(unsafe {
        dlpackshim_strerror(status)
    }));
    c.check(status == DLPACKSHIM_ERR_INVALID_TENSOR,
            "tensor_new returned DLPACKSHIM_ERR_INVALID_TENSOR");
    c.check(t.is_null(), "tensor_out was left NULL");
    c.check(unsafe { dlpackshim_last_status() } == status, "last_status says the same");
    c.check(!last_error().is_empty(), "last_error says why");
    c.check(RELEASED.load(Ordering::SeqCst) == before, "release was NOT called on failure");
    if t.is_null() {
        drop(unsafe { Box::from_raw(owner) }); // still ours: free it ourselves
    } else {
        unsafe { dlpackshim_tensor_free(t) };
    }
}

fn validate_rejects(c: &mut Checks) {
    println!("tensor_validate on bad tensors:");
    let mut buf = [0f32; 6];
    let mut shape = [2i64, 3];
    let mut no_strides: [i64; 0] = [];
    let f32t = DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 };

    let mut bad = view(buf.as_mut_ptr() as *mut c_void, f32t, &mut shape, &mut no_strides);
    bad.shape = ptr::null_mut(); // ndim 2 and no shape
    let cases: [(&str, DLTensor); 3] = [
        ("ndim 2 with shape NULL", bad),
        ("dtype code 99", DLTensor {
            dtype: DLDataType { code: 99, bits: 32, lanes: 1 },
            ..view(buf.as_mut_ptr() as *mut c_void, f32t, &mut shape, &mut no_strides)
        }),
        ("float with 7 bits", DLTensor {
            dtype: DLDataType { code: KDL_FLOAT, bits: 7, lanes: 1 },
            ..view(buf.as_mut_ptr() as *mut c_void, f32t, &mut shape, &mut no_strides)
        }),
    ];
    for (what, t) in cases.iter() {
        unsafe { dlpackshim_clear_error() };
        let rc = unsafe { dlpackshim_tensor_validate(t, 0) };
        let msg = last_error();
        println!("  {what}: status {rc}, \"{msg}\"");
        c.check(rc == DLPACKSHIM_ERR_INVALID_TENSOR, &format!("{what}: DLPACKSHIM_ERR_INVALID_TENSOR"));
        c.check(!msg.is_empty() && unsafe { dlpackshim_last_status() } == rc,
                &format!("{what}: last_error and last_status describe it"));
    }
    let rc = unsafe { dlpackshim_tensor_validate(ptr::null(), 0) };
    c.check(rc == DLPACKSHIM_ERR_INVALID_ARGUMENT, "validate(NULL) is DLPACKSHIM_ERR_INVALID_ARGUMENT");

    // The error state is per thread: a fresh thread sees none, and its own
    // failure does not overwrite ours.
    let ours = last_error();
    let theirs = std::thread::spawn(|| {
        let clean = unsafe { dlpackshim_last_status() } == 0 && last_error().is_empty();
        let mut shape = [-1i64];
        let mut none: [i64; 0] = [];
        let t = view(ptr::null_mut(), DLDataType { code: KDL_INT, bits: 8, lanes: 1 }, &mut shape,
                     &mut none);
        let rc = unsafe { dlpackshim_tensor_validate(&t, 0) };
        (clean, rc, last_error())
    })
    .join()
    .unwrap();
    println!("  other thread: status {}, \"{}\"", theirs.1, theirs.2);
    c.check(theirs.0, "a new thread starts with no error");
    c.check(theirs.1 == DLPACKSHIM_ERR_INVALID_TENSOR && theirs.2 != ours,
            "the other thread got its own error");
    c.check(last_error() == ours, "our last_error is unchanged by the other thread");
}

fn consume_c_tensor(c: &mut Checks) {
    println!("consuming a tensor the C library made (tensor_clone of a transposed view):");
    // A 2x3 row-major int32 matrix, seen as its 3x2 transpose: strides [1, 3].
    let mut matrix: Vec<i32> = (0..6).collect();
    let mut shape = [3i64, 2];
    let mut strides = [1i64, 3];
    let src = view(matrix.as_mut_ptr() as *mut c_void, DLDataType { code: KDL_INT, bits: 32, lanes: 1 },
                   &mut shape, &mut strides);
    c.check(is_c_contiguous(&src) == Ok(false), "the view is not contiguous");
    let mut t = ptr::null_mut();
    let rc = unsafe { dlpackshim_tensor_clone(&src, FLAG_READ_ONLY, &mut t) };
    let (DLPACKSHIM_OK, Some(t)) = (rc, NonNull::new(t)) else {
        c.check(false, &format!("dlpackshim_tensor_clone failed: {}", last_error()));
        return;
    };
    let m = Managed(t);
    // Interpose a counting deleter. We own the managed tensor, so we are the
    // only caller of its deleter; the producer's deleter still gets `self`.
    unsafe {
        let mt = &mut *m.0.as_ptr();
        *PRODUCER_DELETER.lock().unwrap() = mt.deleter;
        if mt.deleter.is_some() {
            mt.deleter = Some(counting_deleter);
        }
    }
    let mt = m.tensor();
    let dl = &mt.dl_tensor;
    let (tshape, tstrides) = unsafe { dims(dl) };
    println!("  flags {}, shape {:?}, strides {:?}, data {:p}", mt.flags, tshape, tstrides, dl.data);
    c.check(mt.flags & FLAG_IS_COPIED != 0, "IS_COPIED is set");
    c.check(mt.flags & FLAG_READ_ONLY == 0, "READ_ONLY is cleared (the copy is ours to write)");
    c.check(tshape == [3, 2] && tstrides == [2, 1], "compact row-major: shape [3, 2], strides [2, 1]");
    c.check(dl.data != matrix.as_mut_ptr() as *mut c_void, "it is a copy, not the source");
    c.check((dl.data as usize + dl.byte_offset as usize) % 256 == 0, "data aligned to 256 bytes");
    c.check(unsafe { dlpackshim_tensor_validate(dl, mt.flags) } == DLPACKSHIM_OK, "validates");
    let got = unsafe {
        std::slice::from_raw_parts((dl.data as *const u8).add(dl.byte_offset as usize) as *const i32, 6)
    };
    c.check(got == [0, 3, 1, 4, 2, 5], "holds the transpose [[0, 3], [1, 4], [2, 5]]");
    matrix[0] = 100; // the copy does not see later writes to the source
    c.check(got[0] == 0, "independent of the source");
    c.check(PRODUCER_DELETES.load(Ordering::SeqCst) == 0, "deleter not run yet");
    drop(m);
    c.check(PRODUCER_DELETES.load(Ordering::SeqCst) == 1, "dropping it ran the producer's deleter exactly once");
}

fn copy_into_vec(c: &mut Checks) {
    println!("dlpackshim_copy from a strided view into a Rust Vec:");
    let mut matrix: Vec<f64> = (0..12).map(|i| i as f64).collect(); // 3x4
    // Every other column, last row first: shape [3, 2], strides [-4, 2],
    // starting at element (2, 0) = index 8 (byte_offset in bytes).
    let mut shape = [3i64, 2];
    let mut strides = [-4i64, 2];
    let f64t = DLDataType { code: KDL_FLOAT, bits: 64, lanes: 1 };
    let mut src = view(matrix.as_mut_ptr() as *mut c_void, f64t, &mut shape, &mut strides);
    src.byte_offset = 8 * size_of::<f64>() as u64;
    let mut out = vec![0f64; 6];
    let mut dshape = [3i64, 2];
    let mut dstrides = [2i64, 1];
    let dst = view(out.as_mut_ptr() as *mut c_void, f64t, &mut dshape, &mut dstrides);
    let rc = unsafe { dlpackshim_copy(&dst, &src, DLPACKSHIM_STREAM_NONE) }; // host memory
    println!("  status {rc}, out {out:?}");
    c.check(rc == DLPACKSHIM_OK, "copy returned DLPACKSHIM_OK");
    c.check(out == [8.0, 10.0, 4.0, 6.0, 0.0, 2.0], "negative strides and byte_offset honoured");
}

fn main() -> ExitCode {
    let mut c = Checks { failed: 0 };
    versions(&mut c);
    build_validate_free(&mut c);
    failed_new_keeps_owner(&mut c);
    validate_rejects(&mut c);
    consume_c_tensor(&mut c);
    copy_into_vec(&mut c);
    if c.failed == 0 {
        println!("rust example: all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("rust example: {} check(s) FAILED", c.failed);
        ExitCode::FAILURE
    }
}
