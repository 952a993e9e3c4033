# bench/bench.mk - the benchmark suite's make rules, included by the top
# Makefile (`include bench/bench.mk`).
#
# Targets:
#   bench-build         build the workload programs into build/bench/
#   bench               set-up (bench/setup.sh), then the default suite
#   bench-full          longer inputs and more repetitions
#   bench-instructions  callgrind: instructions per malloc+free pair
#   bench-scaling       the threaded workloads at 1, 2, 4, 8 threads
#                       (BENCH_ARGS="--threads 1,2,4,8,16" for more)
#   bench-real          real programs (sqlite3, perl, python3, node, gcc,
#                       git, sort, xz) under each allocator: bench/real/
#   bench-smoke         CI's check of the suite's machinery: four quick
#                       workloads once each under tally and glibc, the
#                       tables and the CSV written (no set-up, no peers)
#
# The workload programs link with the system malloc; allocators are
# swapped at run time with LD_PRELOAD, so the same binaries measure all of
# them. Extra runner flags go in BENCH_ARGS, e.g.
#   make bench BENCH_ARGS="--only tally,system --workloads asterisk"

# Keep the including Makefile's default goal: our rules must not become it.
bench_saved_goal := $(.DEFAULT_GOAL)

CC ?= cc
LIB_SO ?= build/libtally.so
PYTHON ?= python3
BENCH_CFLAGS = -O2 -g -Wall -Wextra -pthread
BENCH_DIR := build/bench
BENCH_HDRS := bench/bench_util.h
BENCH_PROGS := $(patsubst bench/%.c,$(BENCH_DIR)/%,$(wildcard bench/w_*.c bench/instr_*.c) bench/measure.c)
BENCH_ARGS ?=

.PHONY: bench bench-full bench-instructions bench-scaling bench-real bench-build bench-setup bench-smoke

bench-build: $(BENCH_PROGS)

$(BENCH_DIR)/%: bench/%.c $(BENCH_HDRS) | $(BENCH_DIR)
	$(CC) $(BENCH_CFLAGS) -o $@ $<

$(BENCH_DIR):
	mkdir -p $@

bench-setup:
	sh bench/setup.sh

# --tally: the library just built, wherever BUILD put it.
bench: $(LIB_SO) bench-build bench-setup
	$(PYTHON) bench/run.py --tally $(LIB_SO) $(BENCH_ARGS)

bench-full: $(LIB_SO) bench-build bench-setup
	$(PYTHON) bench/run.py --full --tally $(LIB_SO) $(BENCH_ARGS)

bench-instructions: $(LIB_SO) bench-build bench-setup
	$(PYTHON) bench/instructions.py --tally $(LIB_SO) $(BENCH_ARGS)

bench-scaling: $(LIB_SO) bench-build bench-setup
	$(PYTHON) bench/scaling.py --tally $(LIB_SO) $(BENCH_ARGS)

bench-real: $(LIB_SO) bench-build bench-setup
	$(PYTHON) bench/real/programs.py --tally $(LIB_SO) $(BENCH_ARGS)

# run.py exits 1 when a cell failed; the CSV must carry both peaks, the
# tables' (peak_kib) and ru_maxrss alone (maxrss_kib), for every cell.
BENCH_SMOKE_DIR := build/bench-smoke
bench-smoke: $(LIB_SO) bench-build
	$(PYTHON) bench/run.py --tally $(LIB_SO) --reps 1 --only tally,system \
	    --workloads asterisk,realloc-m,cache-thrash,bufgrow --out-dir $(BENCH_SMOKE_DIR)
	test "$$(grep -c ',peak_kib,' $(BENCH_SMOKE_DIR)/latest.csv)" -eq 8
	test "$$(grep -c ',maxrss_kib,' $(BENCH_SMOKE_DIR)/latest.csv)" -eq 8
	grep -q 'By ru_maxrss alone' $(BENCH_SMOKE_DIR)/latest.md

.DEFAULT_GOAL := $(bench_saved_goal)
