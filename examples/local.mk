# ---- examples ------------------------------------------------------------
# c_basic is built against the in-tree library and run as a test;
# check-pkgconfig.sh installs the release into a temporary prefix and runs
# docs/install.md's commands for C programs there (README's, then c_basic).
check_PROGRAMS += examples/c_basic
TESTS += examples/c_basic examples/check-pkgconfig.sh
EXTRA_DIST += examples/check-pkgconfig.sh
c_valgrind_programs += examples/c_basic

examples_c_basic_SOURCES = examples/c_basic.c
examples_c_basic_CPPFLAGS = -I$(srcdir)/csrc
examples_c_basic_LDADD = csrc/libdlpackshim.la

# The Go example builds with the sanitizers of a --enable-sanitizers build.
AM_TESTS_ENVIRONMENT += SAN_LDFLAGS='$(SAN_LDFLAGS)'; export SAN_LDFLAGS;
