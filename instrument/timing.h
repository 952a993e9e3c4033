/*
 * timing.h - timing mode: per-call latency histograms by operation and size
 * class, page faults per operation, time spent in the kernel's memory calls.
 */
#ifndef TALLY_TIMING_H
#define TALLY_TIMING_H

#include "hooks.h"
#include "../alloc/sizeclass.h"

#define TIMING_BUCKETS 32              /* log2(ns): <2 ns .. >= 2^31 ns */
#define TIMING_CLASSES (NUM_CLASSES + 1)  /* the last one: large blocks */

struct timing_mark { uint64_t t0; long minflt, majflt; };

HIDDEN void timing_enable(void);
/* The calibration lock around fork() (hooks_fork_*). */
HIDDEN void timing_fork_prepare(void);
HIDDEN void timing_fork_parent(void);
HIDDEN void timing_fork_child(void);
HIDDEN void timing_begin(struct timing_mark *m);
/* Records one call of op on a block of `size` bytes. */
HIDDEN void timing_end(const struct timing_mark *m, enum hook_op op, size_t size);
/* fd < 0: the `report` destination. */
HIDDEN void timing_report(int fd);

#endif
