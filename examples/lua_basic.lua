-- lua_basic.lua - libdlpackshim from LuaJIT's FFI, written from dlpackshim.h
-- and docs/other-languages.md alone.
--
-- LuaJIT parses C declarations, not headers: the cdef below copies the few
-- types and functions used here from dlpackshim.h (struct layouts and enum
-- values are fixed by the ABI). Lua is single-threaded, so no Lua function is
-- ever given to the library as a release: memory that a tensor owns comes from
-- dlpackshim_block_alloc, whose release is the library's own and may run on
-- any thread (docs/other-languages.md, "Releases for owners that live on one
-- thread").
--
-- Run (examples/run-lua.sh does this in make check):
--   DLPACKSHIM_LIBRARY=/path/to/libdlpackshim.so luajit lua_basic.lua
local ffi = require("ffi")

ffi.cdef [[
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef void (*dlpackshim_release_fn)(void *owner);

const char *dlpackshim_version_string(void);
const char *dlpackshim_last_error(void);
int dlpackshim_tensor_validate(const DLTensor *t, uint64_t flags);
int dlpackshim_tensor_layout(const DLTensor *t, int32_t *layout_out);
int dlpackshim_copy(const DLTensor *dst, const DLTensor *src, int64_t stream);
int dlpackshim_tensor_clone(const DLTensor *src, uint64_t flags, DLManagedTensorVersioned **tensor_out);
void dlpackshim_tensor_free(DLManagedTensorVersioned *t);
int dlpackshim_tensor_new(void *data, int32_t device_type, int32_t device_id, int32_t ndim,
                          const int64_t *shape, const int64_t *strides, uint8_t dtype_code,
                          uint8_t dtype_bits, uint16_t dtype_lanes, uint64_t byte_offset,
                          uint64_t flags, void *owner, dlpackshim_release_fn release,
                          DLManagedTensorVersioned **tensor_out);
int dlpackshim_block_alloc(size_t nbytes, void **data_out);
int dlpackshim_block_retain(void *data);
void dlpackshim_block_release(void *data);
int dlpackshim_block_refcount(const void *data, int64_t *count_out);
]]

-- Values from dlpackshim.h and dlpack.h: fixed forever.
local kDLCPU, kDLFloat = 1, 2
local DLPACKSHIM_LAYOUT_C, DLPACKSHIM_LAYOUT_F = 1, 2
local DLPACKSHIM_FLAG_READ_ONLY, DLPACKSHIM_FLAG_IS_COPIED = 1, 2
local DLPACKSHIM_ERR_INVALID_TENSOR = -3
local DLPACKSHIM_STREAM_NONE = -1 -- host memory: no stream

local lib = ffi.load(os.getenv("DLPACKSHIM_LIBRARY") or "dlpackshim")

local function check(ok, what)
  if not ok then error("FAILED: " .. what .. " (last error: " .. ffi.string(lib.dlpackshim_last_error()) .. ")", 2) end
end

-- A float32 DLTensor on the CPU over `data`; `shape` and `strides` are
-- int64_t arrays that the caller keeps alive as long as the tensor is used.
local function float_tensor(data, ndim, shape, strides)
  local t = ffi.new("DLTensor")
  t.data, t.ndim, t.shape, t.strides = data, ndim, shape, strides
  t.device.device_type, t.device.device_id = kDLCPU, 0
  t.dtype.code, t.dtype.bits, t.dtype.lanes = kDLFloat, 32, 1
  return t
end

print("libdlpackshim " .. ffi.string(lib.dlpackshim_version_string()) .. ", " .. jit.version)
-- The declarations above against the ABI's offsets (docs/other-languages.md,
-- "Field offsets, for FFIs without structs"): a wrong copy fails here.
check(ffi.sizeof("DLTensor") == 48 and ffi.offsetof("DLTensor", "shape") == 24 and
      ffi.offsetof("DLTensor", "byte_offset") == 40, "DLTensor's layout")
check(ffi.offsetof("DLManagedTensorVersioned", "flags") == 24 and
      ffi.offsetof("DLManagedTensorVersioned", "dl_tensor") == 32, "DLManagedTensorVersioned's layout")

-- 1. A 3x4 row-major array of Lua's, and its transpose as a strided view:
--    shape (4, 3), strides (1, 4) in elements. Nothing is copied.
local m, n = 3, 4
local a = ffi.new("float[?]", m * n)
for i = 0, m * n - 1 do a[i] = i end
local t_shape, t_strides = ffi.new("int64_t[2]", {n, m}), ffi.new("int64_t[2]", {1, n})
local at = float_tensor(a, 2, t_shape, t_strides)
check(lib.dlpackshim_tensor_validate(at, 0) == 0, "the transposed view is valid")
local layout = ffi.new("int32_t[1]")
check(lib.dlpackshim_tensor_layout(at, layout) == 0 and layout[0] == DLPACKSHIM_LAYOUT_F,
      "the transpose of a C-order array is in F order")

-- 2. Copy it into C order in memory of ours (strides NULL: compact row-major).
local out = ffi.new("float[?]", m * n)
local ct = float_tensor(out, 2, t_shape, nil)
check(lib.dlpackshim_copy(ct, at, DLPACKSHIM_STREAM_NONE) == 0, "copy")
for r = 0, n - 1 do
  for c = 0, m - 1 do check(out[r * m + c] == a[c * n + r], "out[r][c] == a[c][r]") end
end
check(lib.dlpackshim_tensor_layout(ct, layout) == 0 and layout[0] == DLPACKSHIM_LAYOUT_C, "the copy is in C order")

-- 3. A bad tensor is refused with a status and a message naming the field.
local bad_shape = ffi.new("int64_t[2]", {3, -1})
local bad = float_tensor(a, 2, bad_shape, nil)
check(lib.dlpackshim_tensor_validate(bad, 0) == DLPACKSHIM_ERR_INVALID_TENSOR, "a negative extent is refused")
local msg = ffi.string(lib.dlpackshim_last_error())
check(msg:find("shape[1] is -1", 1, true) ~= nil, "the message names shape[1]: " .. msg)
print("refused as expected: " .. msg)

-- 4. A clone: a managed tensor in C order that the library allocated; the
--    flags are the source's with IS_COPIED added (READ_ONLY is cleared: the
--    copy is the caller's). Its deleter frees everything.
local pm = ffi.new("DLManagedTensorVersioned *[1]")
check(lib.dlpackshim_tensor_clone(at, DLPACKSHIM_FLAG_READ_ONLY, pm) == 0, "clone")
local c = pm[0]
check(c.version.major == 1, "a DLPack 1.x tensor")
check(c.flags == DLPACKSHIM_FLAG_IS_COPIED, "the clone is IS_COPIED and writable")
local cd = ffi.cast("float *", ffi.cast("char *", c.dl_tensor.data) + c.dl_tensor.byte_offset)
check(c.dl_tensor.strides[0] == m and c.dl_tensor.strides[1] == 1, "compact row-major strides")
for i = 0, m * n - 1 do check(cd[i] == out[i], "the clone equals the copy") end
lib.dlpackshim_tensor_free(c)

-- 5. A managed tensor over reference-counted memory: its release is
--    dlpackshim_block_release, which calls no Lua and may run on whatever
--    thread the consumer frees the tensor on.
local mem = ffi.new("void *[1]")
check(lib.dlpackshim_block_alloc(m * n * 4, mem) == 0, "block_alloc")
ffi.copy(mem[0], a, m * n * 4)
check(lib.dlpackshim_block_retain(mem[0]) == 0, "block_retain: the tensor's reference")
local shape = ffi.new("int64_t[2]", {m, n})
check(lib.dlpackshim_tensor_new(mem[0], kDLCPU, 0, 2, shape, nil, kDLFloat, 32, 1, 0, DLPACKSHIM_FLAG_READ_ONLY,
                                mem[0], lib.dlpackshim_block_release, pm) == 0, "tensor_new")
local t = pm[0]
check(t.flags == DLPACKSHIM_FLAG_READ_ONLY and t.dl_tensor.strides[0] == n, "flags kept, strides made explicit")
lib.dlpackshim_block_release(mem[0]) -- ours: the tensor still holds the memory
local refs = ffi.new("int64_t[1]")
check(lib.dlpackshim_block_refcount(mem[0], refs) == 0 and refs[0] == 1, "one reference left")
lib.dlpackshim_tensor_free(t) -- its deleter drops the last reference and frees the block
print("lua_basic: ok")
