# tests/fuzz/fuzz.mk -- longer fuzzing, run from the repository root: `make fuzz`, or
#   make -f tests/fuzz/fuzz.mk [FUZZ_SECONDS=N] [FUZZ_TARGETS="parse state"]
#
# With clang and libFuzzer (Debian: apt-get install clang): builds one coverage-guided binary per
# target of tests/fuzz/fuzz_targets.c with -fsanitize=fuzzer,address,undefined in
# build/libfuzzer/ and runs each for FUZZ_SECONDS (default 60) on tests/fuzz/corpus. New inputs go
# to build/libfuzzer/corpus-TARGET; crashes to tests/fuzz/corpus/crashes/crash-TARGET-*, which
# every later fuzz-regression run replays.
# Without libFuzzer: runs the ASan+UBSan regression driver (build/asan/fuzz_regression) with
# mutation for FUZZ_SECONDS (default 300).

CLANG ?= clang
# Every target of tests/fuzz/fuzz_targets.c (its ctf_fuzz_targets table).
FUZZ_TARGETS ?= parse index config state cbf record
FUZZ_SECONDS ?=
LF := build/libfuzzer
CORPUS := tests/fuzz/corpus
CRASHES := $(CORPUS)/crashes

LIB_SRC := $(sort $(wildcard lib/*/*.c)) tools/dump_json.c
LIB_HDR := include/ctfio.h $(wildcard lib/*/*.h) tools/dump_json.h
LF_CFLAGS := -std=c11 -D_GNU_SOURCE -Iinclude -Ilib -Itools -pthread -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -DCTF_DEBUG -DCTF_LIBFUZZER \
	-DCTF_TESTING

# Does $(CLANG) link a libFuzzer target? (yes/no, probed once)
HAVE_LIBFUZZER := $(shell mkdir -p $(LF) && \
	echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return !d && n; }' \
	> $(LF)/probe.c && $(CLANG) -fsanitize=fuzzer $(LF)/probe.c -o $(LF)/probe \
	>/dev/null 2>&1 && echo yes || echo no)

.PHONY: all libfuzzer fallback

ifeq ($(HAVE_LIBFUZZER),yes)
all: libfuzzer
else
all: fallback
endif

libfuzzer: $(foreach t,$(FUZZ_TARGETS),$(LF)/fuzz-$(t))
	@mkdir -p $(CRASHES)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(LF)/corpus-$$t; \
	  echo "== libFuzzer: $$t for $(or $(FUZZ_SECONDS),60) s"; \
	  $(LF)/fuzz-$$t -max_total_time=$(or $(FUZZ_SECONDS),60) -max_len=65536 -timeout=20 \
	    -print_final_stats=1 -artifact_prefix=$(CRASHES)/crash-$$t- \
	    $(LF)/corpus-$$t $(CORPUS) 2>$(LF)/fuzz-$$t.log || \
	    { tail -60 $(LF)/fuzz-$$t.log; echo "fuzz: target $$t failed (see $(LF)/fuzz-$$t.log)"; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
	    $(LF)/fuzz-$$t.log || true; \
	done
	@echo "fuzz: all targets ran without a crash"

$(LF)/fuzz-%: tests/fuzz/fuzz_targets.c $(LIB_SRC) $(LIB_HDR)
	@mkdir -p $(LF)
	$(CLANG) $(LF_CFLAGS) -DCTF_FUZZ_TARGET=$* tests/fuzz/fuzz_targets.c $(LIB_SRC) -o $@ -lm

fallback:
	@echo "fuzz: no libFuzzer ($(CLANG) -fsanitize=fuzzer does not link); using the regression driver"
	$(MAKE) -f Makefile build/asan/fuzz_regression
	ASAN_OPTIONS=detect_leaks=1 build/asan/fuzz_regression --seconds $(or $(FUZZ_SECONDS),300) \
	  $(CORPUS) tests/golden
