# rules for docs/: the Markdown pages and the two scripts that generate the
# API references (tests/python/docs/test_docs.py runs the pages' examples and
# checks that the references are up to date). examples/more.mk also lists
# mpi.md and other-languages.md; a file listed twice is copied once.
EXTRA_DIST += \
	docs/README.md \
	docs/tutorial.md \
	docs/install.md \
	docs/python-api.md \
	docs/c-api.md \
	docs/behaviour.md \
	docs/benchmarks.md \
	docs/design.md \
	docs/gpu.md \
	docs/testing.md \
	docs/mpi.md \
	docs/distributed.md \
	docs/other-languages.md \
	docs/gen_python_api.py \
	docs/gen_c_api.py \
	docs/_gen_common.py \
	docs/local.mk
