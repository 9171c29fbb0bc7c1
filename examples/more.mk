# Examples in other languages: Rust, Python ctypes, Fortran, MPI through
# mpi4py, Go (cgo) and Lua (LuaJIT's FFI). Each test script exits 77
# (automake's "skipped") with a message when its toolchain (cargo; gfortran;
# mpirun + mpi4py; go; luajit) is missing.
# The environment comes from AM_TESTS_ENVIRONMENT: top_srcdir, top_builddir,
# DLPACKSHIM_LIBRARY, PYTHON.
TESTS += \
	examples/rust/run.sh \
	examples/run-ctypes.sh \
	examples/run-fortran.sh \
	examples/run-mpi.sh \
	examples/go/run.sh \
	examples/run-lua.sh

EXTRA_DIST += \
	examples/README.md \
	examples/rust/Cargo.toml \
	examples/rust/Cargo.lock \
	examples/rust/build.rs \
	examples/rust/src/main.rs \
	examples/rust/run.sh \
	examples/ctypes_basic.py \
	examples/run-ctypes.sh \
	examples/fortran_basic.f90 \
	examples/run-fortran.sh \
	examples/mpi_exchange.py \
	examples/run-mpi.sh \
	examples/shared_memory.py \
	examples/go/go.mod \
	examples/go/main.go \
	examples/go/shim.c \
	examples/go/shim.h \
	examples/go/run.sh \
	examples/lua_basic.lua \
	examples/run-lua.sh \
	docs/mpi.md \
	docs/other-languages.md

# cargo's build tree (run.sh puts it under the build directory).
clean-local: clean-examples-rust
clean-examples-rust:
	-rm -rf examples/rust/target
.PHONY: clean-examples-rust
