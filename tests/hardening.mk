# ---- hardening: the suites under ASan+UBSan (leaks on) and under valgrind ----
#
#   make check-asan              a copy of the source tree configured with
#                                --enable-sanitizers in build-asan/, then its
#                                `make check` (C tests, Python suite, examples)
#                                with LeakSanitizer on for every process, Python
#                                included (tests/c/san-python preloads the ASan
#                                runtime; PYTHONMALLOC=malloc so that LSan sees
#                                Python's heap). Leaks of CPython, NumPy, PyTorch
#                                and JAX are suppressed by tests/lsan.supp, which
#                                is written so that a block malloc'ed by csrc/
#                                and never freed is still reported.
#   make check-valgrind-python   a subset of the Python suite (no torch, no jax)
#                                under valgrind: invalid reads/writes and definite
#                                leaks fail it.
#
# Both are separate from `make check`: CI runs them as extra steps.

# -- ASan + UBSan --------------------------------------------------------------
ASAN_BUILDDIR = $(abs_top_builddir)/build-asan
ASAN_JOBS = 2
LSAN_SUPP = $(abs_top_srcdir)/tests/lsan.supp
ASAN_LOGDIR = $(ASAN_BUILDDIR)/asan-logs
# detect_leaks=1 comes after san-python's detect_leaks=0, so it wins. Every
# process writes its reports to $(ASAN_LOGDIR) (subprocesses of tests
# included, whatever the test does with their stderr); any report fails the
# target. libstdc++ is preloaded after the ASan runtime: jaxlib throws C++
# exceptions, and ASan's __cxa_throw interceptor must find the real one when
# the runtime starts (else "CHECK failed: real___cxa_throw"); the sanitized C
# test programs then see it ahead of their own libasan, which is harmless
# (verify_asan_link_order=0). One thread per pool (OpenMP, OpenBLAS): fewer
# threads for LSan to stop at each exit (see tests/asan-check.sh). A leak
# report leaves the exit status alone (exitcode=0) and any other error aborts
# the process (abort_on_error=1): tests/asan-check.sh judges the reports, and
# can tell the interpreter's own leaks at exit from ours.
# intercept_tls_get_addr=0: GCC 12's runtime guesses a dynamic TLS block's
# bounds from its address and, for a block at a page offset of 16, scans a
# bogus range and crashes LSan's tracer at exit (google/sanitizers issue 1322;
# CI's check-consumer processes met it). Without the guess the blocks are still
# reachable through glibc's table of them; tests/c/test_leakcheck_tls checks both.
ASAN_CHECK_ENV = \
	LD_PRELOAD="`$(CC) -print-file-name=libstdc++.so.6`" \
	ASAN_OPTIONS='detect_leaks=1:intercept_tls_get_addr=0:exitcode=0:abort_on_error=1:verify_asan_link_order=0:detect_odr_violation=0:log_path=$(ASAN_LOGDIR)/asan' \
	LSAN_OPTIONS='suppressions=$(LSAN_SUPP):print_suppressions=0' \
	UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1' \
	PYTHONMALLOC=malloc OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# The copy: what git tracks plus untracked files git does not ignore (the
# working tree as it is), plus the generated autotools files; a VPATH build of
# a source tree configured in place is refused by configure, hence a copy.
# Without git (a release tarball) `make distdir` makes it.
check-asan:
	rm -rf '$(ASAN_BUILDDIR)'
	$(MKDIR_P) '$(ASAN_BUILDDIR)/src'
	@if (cd '$(abs_top_srcdir)' && git rev-parse --is-inside-work-tree) >/dev/null 2>&1; then \
	  echo "check-asan: copying the working tree to $(ASAN_BUILDDIR)/src"; \
	  (cd '$(abs_top_srcdir)' && { git ls-files -co --exclude-standard | grep -v '^build-asan/'; \
	     ls configure Makefile.in aclocal.m4; find build-aux m4 -type f; } | sort -u \
	     | while read -r f; do test -f "$$f" && printf '%s\n' "$$f"; done \
	     | tar -cf - -T -) | (cd '$(ASAN_BUILDDIR)/src' && tar -xf -) || exit 1; \
	else \
	  $(MAKE) $(AM_MAKEFLAGS) distdir distdir='$(ASAN_BUILDDIR)/src' || exit 1; \
	fi
	cd '$(ASAN_BUILDDIR)/src' && ./configure --enable-sanitizers --quiet \
	  CC='$(CC)' PYTHON='$(PYTHON)'
	cd '$(ASAN_BUILDDIR)/src' && $(MAKE) -j$(ASAN_JOBS)
	rm -rf '$(ASAN_LOGDIR)' && $(MKDIR_P) '$(ASAN_LOGDIR)'
	@cd '$(ASAN_BUILDDIR)/src' && $(ASAN_CHECK_ENV) \
	  $(SHELL) '$(abs_top_srcdir)/tests/asan-check.sh' '$(ASAN_LOGDIR)' $(MAKE) -j$(ASAN_JOBS)

# -- valgrind, Python --------------------------------------------------------------
# Tests that import neither torch nor jax (valgrind makes them ~30x slower).
VALGRIND_PY_TESTS = \
	tests/python/consume/test_spec_errors.py \
	tests/python/tensor/test_lifetime.py \
	tests/python/pointer/test_pointer.py \
	tests/python/consume/test_buffer.py \
	tests/python/tensor/test_tensor.py \
	tests/python/consume/test_hostile.py \
	tests/python/consume/test_callbacks.py \
	tests/python/produce/test_buffer_export.py \
	tests/python/produce/test_pickle.py \
	tests/python/consume/test_from_dlpack.py::test_a_type_whose_hash_and_eq_raise_imports \
	tests/python/tensor/test_safety.py::test_exports_of_a_reimported_export_reference_the_root_holder
VALGRIND_PY_FLAGS = --error-exitcode=97 --leak-check=full --errors-for-leak-kinds=definite \
	--show-leak-kinds=definite --num-callers=40 --quiet \
	--suppressions=$(abs_top_srcdir)/tests/valgrind-python.supp
# Fewer hypothesis examples under valgrind (test_hostile.py reads it).
VALGRIND_PY_ENV = PYTHONMALLOC=malloc DLPACKSHIM_HYPOTHESIS_EXAMPLES=10

check-valgrind-python: all
	@if test -z "$(VALGRIND)"; then \
	  echo "check-valgrind-python: valgrind was not found by configure"; exit 1; fi
	@if test -n "$(SAN_CFLAGS)"; then \
	  echo "check-valgrind-python: not in a --enable-sanitizers build"; exit 1; fi
	@$(AM_TESTS_ENVIRONMENT) $(VALGRIND_PY_ENV) $(VALGRIND) $(VALGRIND_PY_FLAGS) \
	  --log-file=tests/python/valgrind-python.log \
	  "$(PYTHON)" -m pytest -q -p no:cacheprovider -p no:faulthandler \
	  `for t in $(VALGRIND_PY_TESTS); do echo "$(abs_top_srcdir)/$$t"; done`; \
	rc=$$?; \
	if test $$rc -ne 0; then cat tests/python/valgrind-python.log; \
	  echo "FAIL: check-valgrind-python (exit $$rc; 97 = valgrind errors)"; exit 1; fi; \
	echo "PASS: check-valgrind-python"

CLEANFILES += tests/python/valgrind-python.log
EXTRA_DIST += tests/hardening.mk tests/asan-check.sh tests/lsan.supp tests/valgrind-python.supp
.PHONY: check-asan check-valgrind-python
