# rules for bench/: the benchmark suite (bench/README.md). Not part of `make check`.
#   make bench         the full suite: table with ratios, machine and versions
#   make bench-quick   fewer repeats and rounds (CI runs it to prove the suite works)
# BENCH_FLAGS adds options, e.g. BENCH_FLAGS='--json bench.json'.
EXTRA_DIST += \
	bench/README.md \
	bench/requirements.txt \
	bench/__init__.py \
	bench/__main__.py \
	bench/run.py \
	bench/profile.py \
	bench/local.mk

bench: all
	$(AM_TESTS_ENVIRONMENT) cd '$(abs_top_srcdir)' && "$(PYTHON)" -m bench $(BENCH_FLAGS)

bench-quick: all
	$(AM_TESTS_ENVIRONMENT) cd '$(abs_top_srcdir)' && "$(PYTHON)" -m bench --quick $(BENCH_FLAGS)

.PHONY: bench bench-quick
