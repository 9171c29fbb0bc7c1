# ---- examples ------------------------------------------------------------
# c_basic is built against the in-tree library and run as a test;
# check-pkgconfig.sh builds it again from `pkg-config --cflags --libs` alone.
check_PROGRAMS += examples/c_basic
TESTS += examples/c_basic examples/check-pkgconfig.sh
EXTRA_DIST += examples/check-pkgconfig.sh
c_valgrind_programs += examples/c_basic

examples_c_basic_SOURCES = examples/c_basic.c
examples_c_basic_CPPFLAGS = -I$(srcdir)/csrc
examples_c_basic_LDADD = csrc/libdlpackshim.la

# The pkg-config check compiles with the build's compiler and sanitizers.
AM_TESTS_ENVIRONMENT += SAN_LDFLAGS='$(SAN_LDFLAGS)'; export SAN_LDFLAGS;
