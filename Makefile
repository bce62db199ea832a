# ctfio -- one Makefile, no configure step.
#
#   make            library, CLI and C test runner (build/)
#   make test       everything: ruff and the C format check, C tests, golden files, fuzz
#                   regression, conformance corpus, the same C tests under ASan+UBSan, then the
#                   Python suite in .venv (its time printed at the end)
#   make check      the inner loop: C tests and the Python suite only
#   make lint       ruff on every Python file, the Python formatter's check on FORMAT_PY, mypy
#                   on the public modules (make typecheck)
#   make format     clang-format rewrites the C files of FORMAT_FILES; format-check only compares
#   make demo       the main job on built-in sample data, then a training run in Python
#   make asan       C tests under AddressSanitizer + UndefinedBehaviorSanitizer only
#   make portable   C tests on the build without SSE2 fast paths, and the parser's two builds
#                   compared on generated files (tests/parse_diff)
#   make fuzz       longer fuzzing (libFuzzer with clang when installed)
#   make soak       the number converters on 200 million generated values each
#   make clean

CC ?= cc
PYTHON ?= python3
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -Ilib -pthread
OPT ?= -O2 -g
CFLAGS_REL := $(BASE_CFLAGS) $(OPT)
# Test builds compile the library's test hooks (allocation and I/O fault injection, the parser
# variant switch): -DCTF_TESTING. The release library (build/libctfio.a, the CLI, the Python
# extension) has none of them.
CFLAGS_TST := $(CFLAGS_REL) -DCTF_TESTING
CFLAGS_SAN := $(BASE_CFLAGS) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -DCTF_DEBUG -DCTF_TESTING
LDLIBS := -lm -pthread
# libcurl serves remote paths (s3://, http(s)://; docs/remote.md). Found with curl-config or
# pkg-config; a build without it still reads local files and refuses remote paths, saying why.
# (`make NO_CURL=1` builds without it, as a machine without libcurl would.)
ifeq ($(NO_CURL),)
CURL_LIBS := $(shell curl-config --libs 2>/dev/null || pkg-config --libs libcurl 2>/dev/null)
endif
ifneq ($(strip $(CURL_LIBS)),)
CURL_CFLAGS := $(shell curl-config --cflags 2>/dev/null || pkg-config --cflags libcurl 2>/dev/null)
BASE_CFLAGS += -DCTF_HAVE_CURL $(CURL_CFLAGS)
CFLAGS_REL := $(BASE_CFLAGS) $(OPT)
CFLAGS_TST := $(CFLAGS_REL) -DCTF_TESTING
CFLAGS_SAN := $(BASE_CFLAGS) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -DCTF_DEBUG -DCTF_TESTING
LDLIBS += $(CURL_LIBS)
endif

# lib/ is layered: one folder per layer (docs/design.md), each with its own header.
LIB_SRC := $(sort $(wildcard lib/*/*.c))
LIB_HDR := include/ctfio.h $(wildcard lib/*/*.h) $(wildcard lib/*/*.def)
TEST_SRC := $(sort $(wildcard tests/c/*.c))
# The tool's parts; TOOL_LIB_SRC is what the C tests and the fuzz driver link too (the JSON that
# `ctfio dump` prints, the configuration text that `ctfio convert` prints).
TOOL_LIB_SRC := tools/dump_json.c tools/describe.c tools/cli_util.c tools/remote_env.c
CLI_SRC := tools/ctfio.c tools/ctfio_convert.c tools/ctfio_stats.c tools/ctfio_recheck.c \
           $(TOOL_LIB_SRC)
CLI_HDR := tools/cli.h tools/dump_json.h
FUZZ_SRC := tests/fuzz/fuzz_targets.c tests/fuzz/regression.c
FUZZ_HDR := tests/fuzz/fuzz.h

B := build
T := build/test
S := build/asan
P := build/portable

LIB_OBJ := $(patsubst lib/%.c,$(B)/lib/%.o,$(LIB_SRC))
TLIB_OBJ := $(patsubst lib/%.c,$(T)/lib/%.o,$(LIB_SRC))
SLIB_OBJ := $(patsubst lib/%.c,$(S)/lib/%.o,$(LIB_SRC))
PLIB_OBJ := $(patsubst lib/%.c,$(P)/lib/%.o,$(LIB_SRC))

.PHONY: all test ctest asan portable soak golden fuzz-regression conformance py pytest demo fuzz clean \
	distclean bench bench-build print-ldlibs lint typecheck format format-check check test-suites

all: $(B)/ctfio $(B)/ctfio_tests

$(B)/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -c $< -o $@
$(T)/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_TST) -c $< -o $@
$(S)/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SAN) -c $< -o $@
# The portable build: no SSE2 fast paths (the parser's byte loop and SWAR numbers), the
# reference the structural pass is compared with (make portable).
$(P)/lib/%.o: lib/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_TST) -DCTF_NO_SSE2 -c $< -o $@

# Each archive is made anew: `ar r` never drops a member, so an object of a source that was
# removed or moved would stay in it (test_hygiene.c checks one member per source).
$(B)/libctfio.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^
$(T)/libctfio.a: $(TLIB_OBJ)
	rm -f $@ && ar rcs $@ $^
$(S)/libctfio.a: $(SLIB_OBJ)
	rm -f $@ && ar rcs $@ $^
$(P)/libctfio.a: $(PLIB_OBJ)
	rm -f $@ && ar rcs $@ $^
$(P)/ctfio: $(CLI_SRC) $(CLI_HDR) $(P)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_TST) -DCTF_NO_SSE2 $(CLI_SRC) $(P)/libctfio.a -o $@ $(LDLIBS)
$(P)/ctfio_tests: $(TEST_SRC) $(wildcard tests/c/*.h) $(P)/libctfio.a $(B)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_TST) -DCTF_NO_SSE2 -Itests/c -Itools $(TEST_SRC) $(TOOL_LIB_SRC) $(P)/libctfio.a -o $@ $(LDLIBS)

$(B)/ctfio: $(CLI_SRC) $(CLI_HDR) $(B)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_REL) $(CLI_SRC) $(B)/libctfio.a -o $@ $(LDLIBS)
# The tool on the test build of the library (CTFIO_SIMD picks the parser variant: parse_diff).
$(T)/ctfio: $(CLI_SRC) $(CLI_HDR) $(T)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_TST) $(CLI_SRC) $(T)/libctfio.a -o $@ $(LDLIBS)
$(S)/ctfio: $(CLI_SRC) $(CLI_HDR) $(S)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_SAN) $(CLI_SRC) $(S)/libctfio.a -o $@ $(LDLIBS)

# The C tests link the test build of the library; they also run `nm -u` on the release objects
# (test_hygiene.c), so those are built first.
$(B)/ctfio_tests: $(TEST_SRC) $(wildcard tests/c/*.h) $(T)/libctfio.a $(B)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_TST) -Itests/c -Itools $(TEST_SRC) $(TOOL_LIB_SRC) $(T)/libctfio.a -o $@ $(LDLIBS)
$(S)/ctfio_tests: $(TEST_SRC) $(wildcard tests/c/*.h) $(S)/libctfio.a $(B)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_SAN) -Itests/c -Itools $(TEST_SRC) $(TOOL_LIB_SRC) $(S)/libctfio.a -o $@ $(LDLIBS)

$(B)/fuzz_regression: $(FUZZ_SRC) $(FUZZ_HDR) $(TOOL_LIB_SRC) $(CLI_HDR) $(T)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_TST) -Itools $(FUZZ_SRC) $(TOOL_LIB_SRC) $(T)/libctfio.a -o $@ $(LDLIBS)
$(S)/fuzz_regression: $(FUZZ_SRC) $(FUZZ_HDR) $(TOOL_LIB_SRC) $(CLI_HDR) $(S)/libctfio.a $(LIB_HDR)
	$(CC) $(CFLAGS_SAN) -Itools $(FUZZ_SRC) $(TOOL_LIB_SRC) $(S)/libctfio.a -o $@ $(LDLIBS)

ctest: $(B)/ctfio_tests $(B)/ctfio
	CTFIO_CLI=$(B)/ctfio $(B)/ctfio_tests

golden: $(B)/ctfio
	$(PYTHON) tests/golden/run.py $(B)/ctfio

fuzz-regression: $(B)/fuzz_regression
	$(B)/fuzz_regression --seconds $${CTFIO_FUZZ_SECONDS:-20} tests/fuzz/corpus tests/golden

# The conformance corpus (tests/conformance): expected minibatches from CNTK's behaviour.
CONFORMANCE ?= tests/conformance
conformance: $(B)/ctfio
	$(PYTHON) $(CONFORMANCE)/check.py $(B)/ctfio
	$(PYTHON) tests/conformance/generate.py $(B)/ctfio --check

# The C tests and goldens on the portable build, then both builds compared on generated files.
portable: $(P)/ctfio_tests $(P)/ctfio $(T)/ctfio
	CTFIO_CLI=$(P)/ctfio $(P)/ctfio_tests
	$(PYTHON) tests/golden/run.py $(P)/ctfio
	$(PYTHON) tests/parse_diff/run.py $(T)/ctfio $(P)/ctfio

asan: $(S)/ctfio_tests $(S)/ctfio $(S)/fuzz_regression $(P)/ctfio
	ASAN_OPTIONS=detect_leaks=1 CTFIO_CLI=$(S)/ctfio $(S)/ctfio_tests
	ASAN_OPTIONS=detect_leaks=1 $(PYTHON) tests/golden/run.py $(S)/ctfio
	ASAN_OPTIONS=detect_leaks=1 $(S)/fuzz_regression --seconds $${CTFIO_FUZZ_SECONDS:-10} tests/fuzz/corpus tests/golden
	ASAN_OPTIONS=detect_leaks=1 $(PYTHON) tests/parse_diff/run.py $(S)/ctfio $(P)/ctfio --seeds 60

# Python: a .venv with the package and its test dependencies (numpy, scipy, pytest, torch, scikit-learn
# for the demo's dataset and the LibSVM comparisons, torchdata for StatefulDataLoader, tqdm for
# progress bars, hypothesis for the property tests, pyarrow for Parquet, moto, ruff, mypy,
# clang-format), pinned once, in pyproject.toml's extras (tools/pins.py); rebuilt when the
# sources change.
VENV := .venv
VPY := $(VENV)/bin/python
PY_SRC := $(wildcard python/ctfio/*.py python/ctfio/paddle/*.py python/ctfio/*.c python/ctfio/*.h python/ctfio/*.pyi) setup.py pyproject.toml $(CLI_SRC) $(CLI_HDR)

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip setuptools wheel
	$(VPY) -m pip install -q $$($(PYTHON) tools/pins.py test torch parquet dev)
	touch $@

$(VENV)/.installed: $(VENV)/.deps $(PY_SRC) $(LIB_SRC) $(LIB_HDR)
	$(VPY) -m pip install -q --no-build-isolation --no-deps .
	touch $@

py: $(VENV)/.installed

pytest: $(VENV)/.installed
	cd tests/python && ../../$(VPY) -m pytest -q -p no:cacheprovider .

# The C formatter (.clang-format, the pinned clang-format in .venv): format-check holds every
# tracked C file to the style (`make test` runs it) and `make format` rewrites them.
FORMAT_FILES ?= $(shell git ls-files '*.c' '*.h' 2>/dev/null)
CLANG_FORMAT := $(VENV)/bin/clang-format

format: $(VENV)/.deps
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

format-check: $(VENV)/.deps
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)
	@# Comments are not reflowed by the formatter (ReflowComments: false): their width is checked here.
	@awk 'length > 100 { print FILENAME ":" FNR ": line over 100 characters"; bad = 1 } END { exit bad }' $(FORMAT_FILES)

# ruff over every Python file of the repository (pyproject.toml, [tool.ruff]), then the Python
# formatter (ruff format, 100 columns) over FORMAT_PY only: the small modules of the package, its
# stub, the data and epoch modules, and the tools that write or read pyproject and the stub. The
# rest of the tree keeps its hand-aligned continuation lines: the formatter would rewrite hundreds
# of lines of source.py and training.py, and torch.py's, tests' and benchmarks' too. Then mypy.
FORMAT_PY := python/ctfio/__init__.py python/ctfio/__main__.py python/ctfio/provider.py \
	python/ctfio/_check.py python/ctfio/_staging.py python/ctfio/perf.py python/ctfio/_loop.py \
	python/ctfio/data.py python/ctfio/_ctfio.pyi tools/gen_stub.py tools/pins.py
lint: $(VENV)/.deps typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check $(FORMAT_PY)

# The public modules' types (py.typed): mypy as pyproject.toml's [tool.mypy] says (the files,
# strict flags on source.py, torch.py, training.py and data.py, the extension's _ctfio.pyi).
typecheck: $(VENV)/.deps
	$(VENV)/bin/mypy

# The venv's install (network and disk) and the first C builds (CPU) overlap; then the suites
# run one after another, so that their output reads in order and no suite loads another's timing.
test:
	@t0=$$(date +%s); $(MAKE) --no-print-directory -j2 $(VENV)/.deps $(B)/ctfio $(B)/ctfio_tests && \
	  $(MAKE) --no-print-directory test-suites && \
	  echo "make test: all suites passed in $$(($$(date +%s) - t0)) s"
test-suites: lint format-check bench-build ctest golden fuzz-regression conformance portable asan pytest

# The inner loop: the C unit tests and the Python suite, without the sanitizer and portable
# builds (run `make test` before a commit).
check:
	@t0=$$(date +%s); $(MAKE) --no-print-directory ctest pytest && \
	  echo "make check: passed in $$(($$(date +%s) - t0)) s"

# The CLI part, then a real training run through the Python package (examples/train_digits.py).
demo: $(B)/ctfio $(VENV)/.installed
	@sh tools/demo.sh $(B)/ctfio $(VPY)

# The benchmarks' C programs, built with the library's own flags (libcurl included where the
# library has it); `make test` builds them all, so a benchmark that no longer builds fails it.
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(patsubst bench/%.c,$(B)/%,$(BENCH_SRC))
$(BENCH_BIN): $(B)/%: bench/%.c $(B)/libctfio.a $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $< $(B)/libctfio.a -o $@ $(LDLIBS)
bench-build: $(BENCH_BIN)
# What a benchmark script links a C program of another tree with (bench/mem.py's "before").
print-ldlibs:
	@echo $(LDLIBS)

bench: $(B)/ctfio $(BENCH_BIN)
	$(PYTHON) bench/run.py

fuzz:
	$(MAKE) -f tests/fuzz/fuzz.mk

# The number converters against strtof / strtod (test_number.c) and the parser's token converter
# against the full converter (test_tokenize.c) on 200 million generated values each (~3 min).
soak: $(B)/ctfio_tests
	CTFIO_NUMBER_ITERATIONS=$${CTFIO_NUMBER_ITERATIONS:-200000000} $(B)/ctfio_tests number_random_vs_libc
	CTFIO_NUMBER_ITERATIONS=$${CTFIO_NUMBER_ITERATIONS:-200000000} $(B)/ctfio_tests tokenize_values

# clean keeps the .venv (its torch download is most of a fresh set-up); distclean removes it too.
clean:
	rm -rf build python/ctfio/*.so *.egg-info
	rm -f $(VENV)/.installed

distclean: clean
	rm -rf $(VENV)
