# Fuzzing: tests/fuzz/README.md says how to run it and what to do with a crash.
#
#   make check                     replays tests/fuzz/corpus and tests/fuzz/regressions
#                                  through the harness (gcc, no libFuzzer needed)
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_JOBS=1] [FUZZ_ARGS=...]
#                                  libFuzzer + ASan + UBSan (clang), built straight
#                                  from csrc/core/*.c, csrc/gpu/*.c and csrc/python/*.c; fails on any crash or oracle mismatch
#   make fuzz-regress              the replay alone

# ---- replay: part of `make check` ---------------------------------------
check_PROGRAMS += tests/fuzz/replay
TESTS += tests/fuzz/replay
tests_fuzz_replay_SOURCES = tests/fuzz/replay.c tests/fuzz/fuzz_tensor.c
tests_fuzz_replay_CPPFLAGS = -I$(srcdir)/csrc
tests_fuzz_replay_LDADD = csrc/libdlpackshim.la

EXTRA_DIST += \
	tests/fuzz/README.md \
	tests/fuzz/make_corpus.py \
	tests/fuzz/corpus \
	tests/fuzz/regressions

fuzz-regress: tests/fuzz/replay$(EXEEXT)
	top_srcdir='$(abs_top_srcdir)' tests/fuzz/replay$(EXEEXT)

# ---- libFuzzer -----------------------------------------------------------
FUZZ_SECONDS = 60
FUZZ_JOBS = 1
FUZZ_ARGS =
FUZZ_CC = clang
FUZZ_CFLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined
FUZZ_BIN = tests/fuzz/fuzz_tensor_libfuzzer
# New inputs, crash artifacts and the job logs go here, never into the
# committed corpus (which libFuzzer only reads: it is not the first directory).
FUZZ_WORK = tests/fuzz/fuzz-work

fuzz:
	@mkdir -p $(FUZZ_WORK)/corpus; \
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' \
	  > $(FUZZ_WORK)/conftest.c; \
	if ! $(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_WORK)/conftest.c -o $(FUZZ_WORK)/conftest \
	    >/dev/null 2>&1; then \
	  rm -f $(FUZZ_WORK)/conftest*; \
	  echo "make fuzz: SKIPPED: '$(FUZZ_CC)' cannot link -fsanitize=fuzzer,address,undefined"; \
	  echo "  (Debian/Ubuntu: apt-get install clang libclang-rt-14-dev, or pass FUZZ_CC=clang-NN)"; \
	  exit 0; \
	fi; \
	rm -f $(FUZZ_WORK)/conftest*; \
	echo "  CCLD     $(FUZZ_BIN)"; \
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DDLPACKSHIM_BUILDING -I$(srcdir)/csrc -I$(srcdir)/csrc/core -I$(srcdir)/csrc/gpu \
	  -I$(srcdir)/csrc/python \
	  $(srcdir)/csrc/core/*.c $(srcdir)/csrc/gpu/*.c $(srcdir)/csrc/python/*.c \
	  $(srcdir)/tests/fuzz/fuzz_tensor.c -o $(FUZZ_BIN) -ldl -lpthread \
	  || exit 1; \
	jobs=; \
	if test $(FUZZ_JOBS) -gt 1; then jobs='-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS)'; fi; \
	cd $(FUZZ_WORK) && touch .stamp && \
	echo "make fuzz: $(FUZZ_SECONDS) s, $(FUZZ_JOBS) job(s), work dir $(FUZZ_WORK)"; \
	rc=0; \
	$(abs_builddir)/$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	  -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -artifact_prefix=./ \
	  $$jobs $(FUZZ_ARGS) corpus '$(abs_srcdir)/tests/fuzz/corpus' \
	  '$(abs_srcdir)/tests/fuzz/regressions' || rc=$$?; \
	found=`find . -maxdepth 1 -newer .stamp \( -name 'crash-*' -o -name 'leak-*' \
	  -o -name 'timeout-*' -o -name 'oom-*' \) -print`; \
	if test $$rc -ne 0 || test -n "$$found"; then \
	  echo "make fuzz: FAILED (exit $$rc). Reproducers in $(FUZZ_WORK):" $$found; \
	  echo "  minimise: $(FUZZ_BIN) -minimize_crash=1 -runs=100000 FILE"; \
	  echo "  then add it to tests/fuzz/regressions/ (see tests/fuzz/README.md)"; \
	  exit 1; \
	fi; \
	echo "make fuzz: no crash in $(FUZZ_SECONDS) s"

clean-local: clean-fuzz
clean-fuzz:
	-rm -rf $(FUZZ_WORK) $(FUZZ_BIN)

.PHONY: fuzz fuzz-regress clean-fuzz
