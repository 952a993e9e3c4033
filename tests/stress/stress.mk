# tests/stress/stress.mk - the long multi-threaded stress run, kept out of
# `make test`. Included by the top Makefile (`include tests/stress/stress.mk`).
#
# Targets:
#   build/tests/stress   the stress program (links with the system malloc;
#                        tally is swapped in with LD_PRELOAD)
#   stress               runs it under tally with 2 and then 8 threads, each
#                        with default options and with TALLY_OPTIONS=debug=1;
#                        fails when any run fails
#
# Knobs: STRESS_SECONDS (10 per run), STRESS_SEED (fixed, printed by each
# run), STRESS_THREADS ("2 8"), STRESS_ARGS (extra flags, see
# `build/tests/stress -h`). A failure reproduces with the printed command.

# Keep the including Makefile's default goal: our rules must not become it.
stress_saved_goal := $(.DEFAULT_GOAL)

CC ?= cc
LIB_SO ?= build/libtally.so
STRESS_BIN := build/tests/stress
STRESS_CFLAGS = -O2 -g -Wall -Wextra -pthread
STRESS_SECONDS ?= 10
STRESS_SEED ?= 20240601
STRESS_THREADS ?= 2 8
STRESS_ARGS ?=

.PHONY: stress

$(STRESS_BIN): tests/stress/stress.c
	@mkdir -p $(dir $@)
	$(CC) $(STRESS_CFLAGS) -o $@ $< -ldl

# One shell, `set -e`: the first failing run stops the target with its
# status. Each run echoes its exact command first.
stress: $(LIB_SO) $(STRESS_BIN)
	@set -e; \
	for t in $(STRESS_THREADS); do \
	  for o in "" debug=1; do \
	    cmd="TALLY_OPTIONS=$$o LD_PRELOAD=$(abspath $(LIB_SO)) $(STRESS_BIN) -t $$t -s $(STRESS_SECONDS) -S $(STRESS_SEED) $(STRESS_ARGS)"; \
	    echo "$$cmd"; \
	    env TALLY_OPTIONS="$$o" LD_PRELOAD="$(abspath $(LIB_SO))" \
	      $(STRESS_BIN) -t $$t -s $(STRESS_SECONDS) -S $(STRESS_SEED) $(STRESS_ARGS) \
	      || { echo "stress: run failed (status $$?): $$cmd" >&2; exit 1; }; \
	  done; \
	done

.DEFAULT_GOAL := $(stress_saved_goal)
