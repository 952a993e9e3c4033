# tests/sanitize.mk - the tests under sanitizers and checkers.
#
#   test-ubsan      the library built with UBSan, the Criterion suite run against it
#   test-tsan       tally's sources built into a threaded driver under ThreadSanitizer
#   test-valgrind   helper programs and the threaded driver under memcheck, tally preloaded
#   test-sanitize   all three
#
# Include after the Makefile has defined BUILD, CC, CFLAGS_COMMON, LIB_SRC,
# LIB_CFLAGS, LIB_SO, LIB_TOOL, TEST_SRC and TEST_CFLAGS (e.g. at its end, next
# to bench/bench.mk), or run `make -f Makefile -f tests/sanitize.mk test-ubsan`.
# Outputs go to build/ubsan, build/tsan and build/valgrind, each with a log/
# folder that holds every report; any report fails the target. What each
# target runs, what it found and why each suppression is there: the
# "Sanitizers and checkers" section of docs/reliability.md.

SAN_HDRS    := $(wildcard alloc/*.h instrument/*.h include/*.h)
SAN_TIMEOUT ?= 900
VALGRIND    ?= valgrind

# Fails (listing them) when a sanitizer wrote any report into folder $(1).
define san_fail_on_reports
if ls $(1)/* >/dev/null 2>&1; then cat $(1)/*; \
    echo "$(2): FAILED: $$(ls $(1) | wc -l) report file(s) in $(1)"; exit 1; fi
endef

.PHONY: test-sanitize test-ubsan test-tsan test-valgrind
test-sanitize: test-ubsan test-tsan test-valgrind

# ---- UBSan -----------------------------------------------------------------
# The Makefile's own rules, run again with BUILD=build/ubsan and CC carrying
# the UBSan flags, so build/ubsan gets exactly what `make test` builds: the
# library (LIB_SRC with LIB_CFLAGS, every check fatal, plus
# tests/sanitize/ubsan_init.c), the runner, the helper programs and the
# suite. The suite's own sources are built with -fno-sanitize=all: the
# target is about tally's code (test_large.c, for one, reads the slack up to
# malloc_usable_size, which UBSan's object-size check calls an overflow).
UBSAN_DIR   := $(BUILD)/ubsan
UBSAN_FLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
UBSAN_SO    := $(UBSAN_DIR)/libtally.so
UBSAN_LOG   := $(abspath $(UBSAN_DIR))/log
UBSAN_MAKE   = $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) \
               BUILD=$(UBSAN_DIR) CC="$(CC) $(UBSAN_FLAGS)" \
               LIB_SRC="tests/sanitize/ubsan_init.c $(LIB_SRC)" \
               TEST_CFLAGS="$(TEST_CFLAGS) -fno-sanitize=all"
# Reports go to log/ubsan.PID (never into the output the tests compare), in
# every process that loads the library, children included.
UBSAN_ENV   := UBSAN_OPTIONS=print_stacktrace=1:report_error_type=1:log_path=$(UBSAN_LOG)/ubsan:$\
               suppressions=$(abspath tests/sanitize/ubsan.supp)
# test_abi.c reads ../../tests/abi/symbols.txt, a path that only works two
# levels below the repository; the same comparison is made here instead.
UBSAN_SKIP  := abi/exported_symbols_match_the_committed_list

test-ubsan:
	+@$(UBSAN_MAKE) $(UBSAN_DIR)/tests/unit
	$(CC) $(CFLAGS_COMMON) $(UBSAN_FLAGS) -Iinclude -o $(UBSAN_DIR)/ubsan_canary \
	    tests/sanitize/ubsan_canary.c -L$(UBSAN_DIR) -ltally -Wl,-rpath,'$$ORIGIN'
	@rm -rf $(UBSAN_LOG) && mkdir -p $(UBSAN_LOG)
	@echo "test-ubsan: canary (a report from inside malloc must be logged and fatal)"
	@rc=0; $(UBSAN_ENV) timeout 60 $(UBSAN_DIR)/ubsan_canary >/dev/null || rc=$$?; \
	if [ $$rc -ne 1 ] || ! grep -qs 'runtime error: shift exponent 40' $(UBSAN_LOG)/ubsan.*; then \
	    echo "test-ubsan: FAILED: the canary's report was not caught (exit $$rc)"; exit 1; fi
	@rm -f $(UBSAN_LOG)/*
	@echo "test-ubsan: exported symbols"
	@nm -D --defined-only $(UBSAN_SO) | awk '{print $$3}' | sort | diff -u tests/abi/symbols.txt -
	@rc=0; cd $(UBSAN_DIR)/tests && $(UBSAN_ENV) TALLY_LIB=$(abspath $(UBSAN_SO)) \
	    timeout $(SAN_TIMEOUT) ./unit --jobs 2 --filter='!($(UBSAN_SKIP))' || rc=$$?; \
	$(call san_fail_on_reports,$(UBSAN_LOG),test-ubsan); \
	if [ $$rc -ne 0 ]; then echo "test-ubsan: FAILED: the suite failed (exit $$rc)"; exit 1; fi
	@echo "test-ubsan: no UBSan report"

# ---- ThreadSanitizer ---------------------------------------------------------
# TSan brings its own malloc, so tally cannot be the process's allocator here.
# Instead tally's sources are compiled with TSan and with every exported
# malloc-family name renamed (malloc -> tally_t_malloc, ...; the list is the
# ABI list minus tally_*), and linked into a threaded driver that calls them:
# TSan's allocator serves libc and TSan, tally serves the driver's blocks, and
# TSan sees every access tally's code makes.
TSAN_DIR    := $(BUILD)/tsan
TSAN_FLAGS  := -fsanitize=thread
TSAN_NAMES  := $(filter-out tally_%,$(shell cat tests/abi/symbols.txt))
TSAN_RENAME := $(foreach f,$(TSAN_NAMES),-D$(f)=tally_t_$(f))
TSAN_OBJ    := $(LIB_SRC:%.c=$(TSAN_DIR)/obj/%.o)
TSAN_LOG    := $(abspath $(TSAN_DIR))/log
TSAN_ENV    := TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 history_size=7 \
               log_path=$(TSAN_LOG)/tsan suppressions=$(abspath tests/sanitize/tsan.supp)"

$(TSAN_DIR)/obj/%.o: %.c $(SAN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(TSAN_FLAGS) $(TSAN_RENAME) -c $< -o $@

# A name that escaped the rename would make tally the process's malloc
# underneath TSan: refuse to build such a driver.
$(TSAN_DIR)/tsan_driver: tests/sanitize/tsan_driver.c $(TSAN_OBJ)
	$(CC) $(CFLAGS_COMMON) $(TSAN_FLAGS) $(TSAN_RENAME) -Iinclude -o $@ $^ -ldl
	@if nm --defined-only $@ | awk '{print $$3}' | grep -Fx $(TSAN_NAMES:%=-e %); then \
	    echo "tsan_driver defines the names above: not renamed"; rm -f $@; exit 1; fi

test-tsan: $(TSAN_DIR)/tsan_driver
	@rm -rf $(TSAN_LOG) && mkdir -p $(TSAN_LOG)
	@rc=0; for phase in plain modes; do \
	    echo "$(TSAN_DIR)/tsan_driver $$phase"; \
	    $(TSAN_ENV) timeout $(SAN_TIMEOUT) $(TSAN_DIR)/tsan_driver $$phase || rc=$$?; \
	done; $(call san_fail_on_reports,$(TSAN_LOG),test-tsan); \
	if [ $$rc -ne 0 ]; then echo "test-tsan: FAILED: driver exit $$rc"; exit 1; fi
	@echo "test-tsan: no unsuppressed ThreadSanitizer report"

# ---- valgrind memcheck -------------------------------------------------------
# The normal build/libtally.so, preloaded, run with
# --soname-synonyms=somalloc=nouserintercepts: without it memcheck replaces
# the malloc family in every object that exports it, libtally.so included,
# and tally's code never runs (tests/sanitize/valgrind.sh says more).
VG_DIR := $(BUILD)/valgrind

$(VG_DIR)/driver: tests/sanitize/tsan_driver.c $(LIB_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Iinclude -o $@ $< -L$(BUILD) -ltally -Wl,-rpath,'$$ORIGIN/..'

$(VG_DIR)/vg_expect: tests/sanitize/vg_expect.c
	@mkdir -p $(dir $@)
	$(CC) -O0 -g -o $@ $<

test-valgrind: $(LIB_SO) $(BUILD)/tests/prog_plain $(BUILD)/tests/prog_static \
               $(BUILD)/tests/prog_cxx $(BUILD)/tests/prog_overflow $(VG_DIR)/driver \
               $(VG_DIR)/vg_expect
	VALGRIND="$(VALGRIND)" timeout $(SAN_TIMEOUT) sh tests/sanitize/valgrind.sh \
	    $(abspath $(LIB_SO)) $(abspath $(BUILD)/tests) $(abspath $(VG_DIR))
