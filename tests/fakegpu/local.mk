# ---- devices and streams: fake GPU runtimes and their tests --------------
# libfakecuda.so and libfakehip.so stand in for libcuda.so.1 and
# libamdhip64.so (no GPU in CI); tests/c/test_gpu points DLPACKSHIM_LIBCUDA
# and DLPACKSHIM_LIBHIP at them. -rpath makes libtool build a shared
# library; it is never installed.
check_LTLIBRARIES += tests/fakegpu/libfakecuda.la tests/fakegpu/libfakehip.la
fakegpu_cppflags = -I$(srcdir)/csrc -I$(srcdir)/csrc/gpu -I$(srcdir)/tests/fakegpu
fakegpu_ldflags = -module -avoid-version -rpath /nowhere -no-undefined
tests_fakegpu_libfakecuda_la_SOURCES = tests/fakegpu/fakecuda.c tests/fakegpu/fakecore.h
tests_fakegpu_libfakecuda_la_CPPFLAGS = $(fakegpu_cppflags)
tests_fakegpu_libfakecuda_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
tests_fakegpu_libfakecuda_la_LDFLAGS = $(AM_LDFLAGS) $(fakegpu_ldflags)
tests_fakegpu_libfakehip_la_SOURCES = tests/fakegpu/fakehip.c tests/fakegpu/fakecore.h
tests_fakegpu_libfakehip_la_CPPFLAGS = $(fakegpu_cppflags)
tests_fakegpu_libfakehip_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
tests_fakegpu_libfakehip_la_LDFLAGS = $(AM_LDFLAGS) $(fakegpu_ldflags)

# The C test of csrc/gpu/ (streams, copies, memory, CUDA, HIP) against the fakes. It finds them
# through $top_builddir (AM_TESTS_ENVIRONMENT); the libraries must be built
# first, hence the explicit dependency.
check_PROGRAMS += tests/c/test_gpu
TESTS += tests/c/test_gpu tests/fakegpu/check-layout-cuda.sh tests/fakegpu/check-layout-hip.sh
tests_c_test_gpu_SOURCES = tests/c/test_gpu.c
tests_c_test_gpu_CPPFLAGS = -I$(srcdir)/csrc -I$(srcdir)/tests/c
tests_c_test_gpu_CFLAGS = $(AM_CFLAGS) -pthread
tests_c_test_gpu_LDFLAGS = $(AM_LDFLAGS) -pthread
tests_c_test_gpu_LDADD = csrc/libdlpackshim.la
tests_c_test_gpu_DEPENDENCIES = csrc/libdlpackshim.la tests/fakegpu/libfakecuda.la \
	tests/fakegpu/libfakehip.la
c_valgrind_programs += tests/c/test_gpu

EXTRA_DIST += tests/fakegpu/check-layout.sh tests/fakegpu/check-layout-cuda.sh \
	tests/fakegpu/check-layout-hip.sh tests/fakegpu/layout_cuda.c tests/fakegpu/layout_hip.c
