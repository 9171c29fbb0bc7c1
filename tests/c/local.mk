# ---- C unit tests ------------------------------------------------------
# One program per library source file, plus the ABI and the export list.
# Exit codes as automake reads them: 0 pass, 1 fail, 77 skip, 99 hard error.
c_tests = \
	tests/c/test_error \
	tests/c/test_version \
	tests/c/test_validate \
	tests/c/test_tensor \
	tests/c/test_release \
	tests/c/test_copy \
	tests/c/test_copy_scalar \
	tests/c/test_out_params \
	tests/c/test_alloc \
	tests/c/test_abi \
	tests/c/test_abi_dlpack_h \
	tests/c/test_doc_offsets
check_PROGRAMS += $(c_tests)
TESTS += $(c_tests) tests/c/check-exports.sh
EXTRA_DIST += tests/c/check.h tests/c/check-exports.sh tests/c/exports.txt

c_test_cppflags = -I$(srcdir)/csrc -I$(srcdir)/csrc/core -I$(srcdir)/tests/c
c_test_ldadd = csrc/libdlpackshim.la

# error.c is linked in directly so that shim_fail, hidden in the library,
# can be driven; threads check that the last error is per thread.
tests_c_test_error_SOURCES = tests/c/test_error.c csrc/core/error.c
tests_c_test_error_CPPFLAGS = $(c_test_cppflags)
tests_c_test_error_CFLAGS = $(AM_CFLAGS) -pthread
tests_c_test_error_LDFLAGS = $(AM_LDFLAGS) -pthread

tests_c_test_version_SOURCES = tests/c/test_version.c
tests_c_test_version_CPPFLAGS = $(c_test_cppflags) -DEXPECTED_VERSION='"$(PACKAGE_VERSION)"'
tests_c_test_version_LDADD = $(c_test_ldadd)

tests_c_test_validate_SOURCES = tests/c/test_validate.c
tests_c_test_validate_CPPFLAGS = $(c_test_cppflags)
tests_c_test_validate_LDADD = $(c_test_ldadd)

tests_c_test_tensor_SOURCES = tests/c/test_tensor.c
tests_c_test_tensor_CPPFLAGS = $(c_test_cppflags)
tests_c_test_tensor_LDADD = $(c_test_ldadd)

# Threads free tensors while the owner's thread drains its release queue.
tests_c_test_release_SOURCES = tests/c/test_release.c
tests_c_test_release_CPPFLAGS = $(c_test_cppflags)
tests_c_test_release_CFLAGS = $(AM_CFLAGS) -pthread
tests_c_test_release_LDFLAGS = $(AM_LDFLAGS) -pthread
tests_c_test_release_LDADD = $(c_test_ldadd)

tests_c_test_copy_SOURCES = tests/c/test_copy.c
tests_c_test_copy_CPPFLAGS = $(c_test_cppflags)
tests_c_test_copy_LDADD = $(c_test_ldadd)

# The same cases on the copy loops that machines without SSE2 run.
tests_c_test_copy_scalar_SOURCES = tests/c/test_copy.c csrc/core/copy.c csrc/core/error.c \
	csrc/core/validate.c csrc/core/alloc.c
tests_c_test_copy_scalar_CPPFLAGS = $(c_test_cppflags) -U__SSE2__ -DCOPY_WITHOUT_SSE2

# Every out-parameter of csrc/core left alone by a failing call.
tests_c_test_out_params_SOURCES = tests/c/test_out_params.c
tests_c_test_out_params_CPPFLAGS = $(c_test_cppflags)
tests_c_test_out_params_LDADD = $(c_test_ldadd)

# The memory of copies as the kernel sees it (/proc/self/smaps).
tests_c_test_alloc_SOURCES = tests/c/test_alloc.c
tests_c_test_alloc_CPPFLAGS = $(c_test_cppflags)
tests_c_test_alloc_LDADD = $(c_test_ldadd)

tests_c_test_abi_SOURCES = tests/c/test_abi.c
tests_c_test_abi_CPPFLAGS = $(c_test_cppflags)
tests_c_test_abi_LDADD = $(c_test_ldadd)

# Includes the system's <dlpack/dlpack.h> first; skips (77) without it.
tests_c_test_abi_dlpack_h_SOURCES = tests/c/test_abi_dlpack_h.c
tests_c_test_abi_dlpack_h_CPPFLAGS = $(c_test_cppflags)
tests_c_test_abi_dlpack_h_LDADD = $(c_test_ldadd)

# Reads the offset table of docs/other-languages.md ($$top_srcdir) and
# checks every row against offsetof/sizeof.
tests_c_test_doc_offsets_SOURCES = tests/c/test_doc_offsets.c
tests_c_test_doc_offsets_CPPFLAGS = $(c_test_cppflags)
tests_c_test_doc_offsets_LDADD = $(c_test_ldadd)

# ---- make check-valgrind -----------------------------------------------
# Every C test program (and the example, added in examples/local.mk) under
# valgrind: a memory error or a definite leak fails it. Not with
# --enable-sanitizers: ASan and valgrind cannot share a process.
c_valgrind_programs = $(c_tests)
VALGRIND_FLAGS = --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite --quiet

check-valgrind: $(c_valgrind_programs)
	@if test -z "$(VALGRIND)"; then \
	  echo "check-valgrind: valgrind was not found by configure"; exit 1; fi
	@if test -n "$(SAN_CFLAGS)"; then \
	  echo "check-valgrind: not in a --enable-sanitizers build"; exit 1; fi
	@fail=0; for t in $(c_valgrind_programs); do \
	  $(LIBTOOL) --mode=execute $(VALGRIND) $(VALGRIND_FLAGS) ./$$t >$$t.valgrind.log 2>&1; \
	  rc=$$?; \
	  case $$rc in \
	    0) echo "PASS: $$t (valgrind)";; \
	    77) echo "SKIP: $$t (valgrind)";; \
	    *) echo "FAIL: $$t (valgrind, exit $$rc)"; cat $$t.valgrind.log; fail=1;; \
	  esac; \
	done; exit $$fail

CLEANFILES += $(c_valgrind_programs:=.valgrind.log)
.PHONY: check-valgrind

# ---- sanitizer builds (--enable-sanitizers) ------------------------------
# Programs not built with -fsanitize (python, a Rust binary) can load the
# sanitized library only with the ASan runtime loaded first, and Python's
# own allocations left at exit are not our leaks. So tests get $PYTHON
# wrapped (tests/c/san-python: preload + detect_leaks=0, for that process
# only), and SAN_PRELOAD names the runtime for any other such program.
# Never preload it into compilers: LSan would report their leaks.
if SANITIZERS
check_SCRIPTS = tests/c/san-python
CLEANFILES += tests/c/san-python
AM_TESTS_ENVIRONMENT += \
	SAN_PRELOAD=`sed -n 's/^rt=//p' tests/c/san-python`; export SAN_PRELOAD; \
	PYTHON='$(abs_top_builddir)/tests/c/san-python'; export PYTHON;

tests/c/san-python: Makefile
	$(AM_V_GEN)rt=`$(CC) -print-file-name=libasan.so`; \
	case $$rt in /*) ;; *) rt=`$(CC) -print-file-name=libclang_rt.asan-\`uname -m\`.so`;; esac; \
	test -f "$$rt" || { echo "$@: cannot find the ASan runtime of $(CC)" >&2; exit 1; }; \
	$(MKDIR_P) tests/c; \
	{ echo '#!/bin/sh'; \
	  echo "# Generated by make: $(PYTHON) with the ASan runtime preloaded."; \
	  echo "rt=$$rt"; \
	  echo 'LD_PRELOAD=$$rt$${LD_PRELOAD:+:$$LD_PRELOAD}; export LD_PRELOAD'; \
	  echo 'ASAN_OPTIONS=detect_leaks=0$${ASAN_OPTIONS:+:$$ASAN_OPTIONS}; export ASAN_OPTIONS'; \
	  echo 'exec "$(PYTHON)" "$$@"'; } >$@.tmp && chmod +x $@.tmp && mv $@.tmp $@
endif

# ---- test_nopython: the capsule API in a process without CPython ----------
check_PROGRAMS += tests/c/test_nopython
TESTS += tests/c/test_nopython
c_valgrind_programs += tests/c/test_nopython
tests_c_test_nopython_SOURCES = tests/c/test_nopython.c
tests_c_test_nopython_CPPFLAGS = $(c_test_cppflags)
tests_c_test_nopython_LDADD = $(c_test_ldadd)

# ---- test_leakcheck_tls: check-asan's options against a sanitizer bug -----
# (sanitizer builds only: it skips elsewhere). libtlsblock.so is a module
# with dynamic TLS that the test dlopens ($top_builddir/tests/c/.libs).
if SANITIZERS
check_LTLIBRARIES += tests/c/libtlsblock.la
check_PROGRAMS += tests/c/test_leakcheck_tls
TESTS += tests/c/test_leakcheck_tls
tests_c_libtlsblock_la_SOURCES = tests/c/tlsblock.c
tests_c_libtlsblock_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -rpath /nowhere -no-undefined
tests_c_test_leakcheck_tls_SOURCES = tests/c/test_leakcheck_tls.c
tests_c_test_leakcheck_tls_CPPFLAGS = $(c_test_cppflags)
tests_c_test_leakcheck_tls_LDADD = -ldl
tests_c_test_leakcheck_tls_DEPENDENCIES = tests/c/libtlsblock.la
endif
