# tests/fuzz/fuzz.mk - coverage-guided fuzzing of tally with libFuzzer.
# Included by the top Makefile (needs its BUILD, LIB_SRC and LIB_CFLAGS).
#
#   make fuzz-build                 build/fuzz/fuzz_alloc
#   make fuzz [FUZZ_SECONDS=60]     run it on a copy of tests/fuzz/corpus;
#                                   fails when the fuzzer finds a crash
#   FUZZ_ARGS='-seed=1 -fork=2'     extra libFuzzer flags
#
# tally is compiled straight into the fuzzer with the library's own flags,
# so it serves libFuzzer's allocations too, and with coverage
# instrumentation (-fsanitize=fuzzer-no-link) so tally's own branches guide
# the search. No AddressSanitizer: it replaces malloc. UBSan traps.
# Needs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev);
# installs them when run as root, else prints the command and fails.

FUZZ_CC       ?= clang
FUZZ_SECONDS  ?= 60
FUZZ_DIR      := $(BUILD)/fuzz
FUZZ_BIN      := $(FUZZ_DIR)/fuzz_alloc
FUZZ_CORPUS   := $(FUZZ_DIR)/corpus
FUZZ_ARTIFACTS := $(FUZZ_DIR)/artifacts/
FUZZ_UBSAN    := -fsanitize=undefined -fno-sanitize-recover=undefined
FUZZ_LIB_OBJ  := $(LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_HEADERS  := $(wildcard alloc/*.h instrument/*.h include/*.h)
FUZZ_FLAGS    := -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
FUZZ_ARGS     ?=

.PHONY: fuzz fuzz-build fuzz-deps

fuzz-build: $(FUZZ_BIN)

# Checks that $(FUZZ_CC) can link a libFuzzer target.
FUZZ_PROBE = printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }\n' | \
	     $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1

fuzz-deps:
	@if $(FUZZ_PROBE); then \
	    exit 0; \
	elif [ "$$(id -u)" = 0 ]; then \
	    echo "fuzz: installing clang and libclang-rt-14-dev"; \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libclang-rt-14-dev \
	        >/dev/null && $(FUZZ_PROBE); \
	else \
	    echo "fuzz: clang with libFuzzer is missing." \
	         "Run: sudo apt-get install -y clang libclang-rt-14-dev" >&2; \
	    exit 1; \
	fi

# Edge coverage of tally's own code guides the search; comparison tracing
# is left out there: tally's byte loops (debug mode checks megabytes of
# poison) would make one callback per byte and cut exec/s a hundredfold.
FUZZ_LIB_CFLAGS = $(LIB_CFLAGS) -fsanitize=fuzzer-no-link -fno-sanitize-coverage=trace-cmp \
                  $(FUZZ_UBSAN)

# gcc accepts its __atomic_* builtins on an _Atomic object; clang 14 refuses
# them (instrument/hooks.c's user_hooks). Such a file is compiled again with
# _Atomic defined away: the builtins keep every access atomic.
$(FUZZ_DIR)/obj/%.o: %.c $(FUZZ_HEADERS) tests/fuzz/fuzz.mk | fuzz-deps
	@mkdir -p $(dir $@)
	@echo "$(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -c $< -o $@"
	@if $(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -c $< -o $@ 2>$@.log; then cat $@.log >&2; \
	elif $(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -D_Atomic= -c $< -o $@ 2>/dev/null; then \
	    echo "fuzz: $<: compiled with -D_Atomic= (clang rejects __atomic_* on _Atomic)" >&2; \
	else cat $@.log >&2; rm -f $@.log; exit 1; fi; rm -f $@.log

$(FUZZ_BIN): tests/fuzz/fuzz_alloc.c $(FUZZ_LIB_OBJ) include/tally.h tests/fuzz/fuzz.mk | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=gnu11 -O2 -g -Wall -Wextra -pthread -Iinclude -fno-builtin \
	    -fsanitize=fuzzer $(FUZZ_UBSAN) -o $@ tests/fuzz/fuzz_alloc.c $(FUZZ_LIB_OBJ)

# The corpus copy keeps what earlier runs found; the repository's seeds are
# never written. A crash (a harness trap, an abort from tally, UBSan), a
# timeout or an RSS overrun fails the target: libFuzzer exits non-zero, and
# in fork mode with -ignore_crashes, which may exit 0, any reproducer newer
# than the run's start in artifacts/ fails it.
fuzz: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_CORPUS) $(FUZZ_ARTIFACTS)
	cp tests/fuzz/corpus/* $(FUZZ_CORPUS)/
	@touch $(FUZZ_DIR)/.run-start
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_FLAGS) $(FUZZ_ARGS) \
	    -artifact_prefix=$(FUZZ_ARTIFACTS) $(FUZZ_CORPUS) && \
	    ! find $(FUZZ_ARTIFACTS) -type f -newer $(FUZZ_DIR)/.run-start | grep -q . || \
	    { echo "fuzz: FAILED; reproducers:" >&2; \
	      find $(FUZZ_ARTIFACTS) -type f -newer $(FUZZ_DIR)/.run-start >&2; \
	      echo "replay one: $(FUZZ_BIN) FILE (FUZZ_ALLOC_TRACE=1 to decode it)" >&2; exit 1; }
