# tally - build, test, install, benchmark.
#
#   make                 build/libtally.so and build/libtally.a
#   make test            Criterion suite (installs libcriterion-dev when root)
#   make check-real      real programs under LD_PRELOAD, output compared
#   make stress          threaded stress, 2 and 8 threads, plain and debug=1
#   make bench           the benchmark suite (see docs/benchmarks.md)
#   make install PREFIX=/usr/local

CC      ?= cc
CXX     ?= c++
PREFIX  ?= /usr/local
BUILD   := build

CFLAGS_COMMON := -std=gnu11 -O2 -g -Wall -Wextra -pthread
# The library: position independent, everything hidden but the API, local
# calls bound directly, and no builtin rewriting of malloc calls (gcc may turn
# malloc+memset into a call to calloc, which would recurse).
LIB_CFLAGS := $(CFLAGS_COMMON) -fPIC -fvisibility=hidden -fno-semantic-interposition \
              -ftls-model=initial-exec -fno-builtin-malloc -fno-builtin-calloc \
              -fno-builtin-realloc -fno-builtin-free $(EXTRA_CFLAGS)

LIB_SRC := $(wildcard alloc/*.c) $(wildcard instrument/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB_SO  := $(BUILD)/libtally.so
LIB_A   := $(BUILD)/libtally.a

LIB_TOOL := $(BUILD)/tally

.PHONY: all test check-real image-pages install clean test-deps
all: $(LIB_SO) $(LIB_A) $(LIB_TOOL)

# The command-line runner: `build/tally run --debug -- prog args`.
$(LIB_TOOL): instrument/tally-run.sh
	@mkdir -p $(dir $@)
	cp $< $@
	chmod +x $@

# No alignment padding but in malloc.c, whose entry points the fast paths
# are (aligned to 64 there, explicitly): padding functions, jumps and loops
# to 16 bytes was 7% of the library's 73 KiB of text, and the whole image
# is resident in every process (docs/benchmarks.md, the fixed cost), so it
# was a page of each one's RSS.
NOALIGN := -fno-align-functions -fno-align-jumps -fno-align-loops -fno-align-labels
# And the files no time of the suite depends on (options, reports, stats,
# debug mode, diagnostics, heaps made and left at thread exit) built for
# size: 3 KiB of text less, another page (debug mode's asterisk loop ran
# 4% faster so; threadchurn a tie). The modes' dispatch and timing too:
# 1 KiB more to spare before the text's next page, with debug and timing
# modes' asterisk loops ties (7 alternating runs). Not the slow paths, nor
# init.c's option reads that they call: under -Os the span and page
# set-up code cost the kept-and-touched latencies 17-38%. (Where code
# lies in the image, resident or not, is alloc/image.ld's list.)
COLD_SRC := instrument/options.c instrument/report.c instrument/stats.c instrument/api.c \
            instrument/valgrind.c instrument/debug.c alloc/diag.c \
            alloc/usage.c alloc/background.c alloc/heap_life.c instrument/timing.c instrument/hooks.c
$(BUILD)/obj/%.o: %.c $(wildcard alloc/*.h instrument/*.h include/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(if $(filter alloc/malloc.c,$<),,$(NOALIGN)) \
	    $(if $(filter $(COLD_SRC),$<),-Os) -c $< -o $@

# os.c and valgrind.c compile memcheck's client requests in only when
# <valgrind/memcheck.h> is there. `make test` installs valgrind after a
# plain `make` may have built without it (dpkg keeps the header's old
# mtime), so a stamp named after the answer rebuilds them when it changes.
VG_STAMP := $(BUILD)/obj/valgrind-$(if $(wildcard /usr/include/valgrind/memcheck.h),yes,no)
$(BUILD)/obj/alloc/os.o $(BUILD)/obj/instrument/valgrind.o: $(VG_STAMP)
$(VG_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/valgrind-*
	@touch $@

# alloc/image.ld keeps the code and constants a plain run never uses in
# segments of their own, off every process's pages.
$(LIB_SO): $(LIB_OBJ) alloc/image.ld
	$(CC) -shared -pthread -Wl,-soname,libtally.so -Wl,-T,alloc/image.ld -o $@ $(LIB_OBJ)

$(LIB_A): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

# ---- tests ---------------------------------------------------------------
TEST_SRC  := $(wildcard tests/test_*.c)
# Allocator modules some tests compile in themselves: their names are
# hidden inside libtally (test_sizeclass.c, test_span_keep.c).
TEST_MODULES := alloc/sizeclass.c alloc/span_keep.c
TEST_BIN  := $(BUILD)/tests/unit
# The tests misuse the API on purpose (huge sizes, use after realloc fails).
TEST_CFLAGS := $(CFLAGS_COMMON) -Iinclude -fno-builtin -Wno-use-after-free \
               -Wno-alloc-size-larger-than

test-deps:
	@sh tests/deps.sh

TEST_PROGS := $(BUILD)/tests/prog_plain $(BUILD)/tests/prog_static $(BUILD)/tests/prog_cxx \
              $(BUILD)/tests/prog_overflow $(BUILD)/tests/prog_memcheck \
              $(BUILD)/tests/prog_atfork_first $(BUILD)/tests/prog_shrink_refused \
              $(BUILD)/tests/prog_early_free $(BUILD)/tests/prog_calloc_fresh \
              $(BUILD)/tests/prog_image_pages

$(TEST_BIN): $(TEST_SRC) $(TEST_MODULES) tests/helpers.h $(LIB_SO) $(LIB_TOOL) $(TEST_PROGS)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $(TEST_SRC) $(TEST_MODULES) -L$(BUILD) -ltally -Wl,-rpath,'$$ORIGIN/..' -lcriterion -ldl

# Helper programs for the linking tests: one plain (for LD_PRELOAD), one
# linked statically against libtally.a.
$(BUILD)/tests/prog_plain: tests/progs/uses_malloc.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Iinclude -o $@ $< -ldl

$(BUILD)/tests/prog_static: tests/progs/uses_malloc.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Iinclude -DSTATIC_TALLY -o $@ $< $(LIB_A) -ldl

$(BUILD)/tests/prog_calloc_fresh: tests/progs/calloc_fresh.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $<

$(BUILD)/tests/prog_image_pages: tests/progs/image_pages.c include/tally.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Iinclude -o $@ $< -ldl

$(BUILD)/tests/prog_overflow: tests/progs/overflow.c
	@mkdir -p $(dir $@)
	$(CC) -O0 -g -o $@ $<

$(BUILD)/tests/prog_memcheck: tests/progs/memcheck_bugs.c
	@mkdir -p $(dir $@)
	$(CC) -O0 -g -o $@ $<

$(BUILD)/tests/prog_atfork_first: tests/progs/atfork_first.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $<

$(BUILD)/tests/prog_shrink_refused: tests/progs/shrink_refused.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $< -ldl

# A program whose library frees in its constructor, before a preloaded
# tally's constructor runs.
$(BUILD)/tests/libearly_free.so: tests/progs/early_free_lib.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -shared -fPIC -o $@ $<

$(BUILD)/tests/prog_early_free: tests/progs/early_free.c $(BUILD)/tests/libearly_free.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $< -Wl,--no-as-needed -L$(BUILD)/tests -learly_free \
	    -Wl,-rpath,'$$ORIGIN'

$(BUILD)/tests/prog_cxx: tests/progs/uses_new.cc
	@mkdir -p $(dir $@)
	$(CXX) -O2 -g -Wall -Wextra -Iinclude -o $@ $< -ldl

# The tools first (a fresh machine), then the build, then the suite.
test: test-deps
	$(MAKE) $(TEST_BIN)
	cd $(BUILD)/tests && TALLY_LIB=$(abspath $(LIB_SO)) TALLY_SRC=$(CURDIR) ./unit --jobs 2

check-real: $(LIB_SO)
	sh tests/real/check-real.sh $(abspath $(LIB_SO))

# The library's loaded segments in OS pages: its whole image is resident
# in every process (docs/design.md, Start-up), so a change that pushes the
# text past a page boundary costs every program 4 KiB. Run it before and
# after a change that adds code.
image-pages: $(LIB_SO)
	@readelf -lW $(LIB_SO) | while read -r type off vaddr paddr filesz memsz rest; do \
	    [ "$$type" = LOAD ] || continue; \
	    first=$$(($$off / 4096)); end=$$(($$off + $$filesz)); last=$$(( (end + 4095) / 4096 )); \
	    printf '%-4s %6d bytes in %2d file pages, %4d bytes to spare\n' "$${rest% *}" \
	        $$(($$filesz)) $$((last - first)) $$((last * 4096 - end)); \
	done

# ---- install -------------------------------------------------------------
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(LIB_TOOL) $(DESTDIR)$(PREFIX)/bin/tally
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/tally.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' tally.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tally.pc
	@# The loader finds a new library in /usr/local/lib only through its
	@# cache: without this a program linked with -ltally fails to start.
	@# (Packagers, with DESTDIR, run ldconfig on the target themselves.)
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

clean:
	rm -rf $(BUILD)

include bench/bench.mk
include tests/stress/stress.mk
include tests/sanitize.mk
include tests/fuzz/fuzz.mk
