/*
 * remote.h - frees of blocks that belong to another thread's heap.
 *
 * The freeing thread gathers such blocks per target heap in a transfer
 * buffer: an array of pointers, not a chain threaded through the blocks.
 * The owner drains whole buffers. With the pointers side by side its loads
 * are independent; walking a chain waits on one cache miss per block,
 * since each block was last written on the freeing thread's core (that
 * walk was 46% of the profile of a producer/consumer run).
 *
 * A full buffer is pushed onto the target heap's `remote_bufs` stack with
 * one CAS. Partial buffers are pushed by the freeing thread's periodic
 * sweep (every purge_delay / 20 ms of allocating), on malloc_trim and when
 * the thread exits: pushing them on every allocation slow path sent the
 * owner half-empty buffers and kept more blocks in flight (larson peak
 * RSS 20.5 -> 18.9 MiB with the sweep); one with only a few blocks goes
 * onto the heap's `remote` chain instead (remote.c, buf_evict). Drained
 * buffers stay with the draining thread for its own remote frees while it
 * has few; otherwise they go back to a global pool, a lock-free stack of
 * lists that a thread out of spares takes whole. If no buffer can be had
 * (out of memory), the block goes onto the `remote` chain, one CAS per
 * block.
 */
#ifndef TALLY_REMOTE_H
#define TALLY_REMOTE_H

#include "segment.h"

/* 30 pointers: with many threads waiting for a CPU, every freeing thread
 * holds a partly filled buffer for each heap it frees into while it waits
 * too; 62 held twice as much in flight (larson on 2 CPUs: at 32 threads
 * 79.7 -> 71.3 MiB peak with 30, at 8 threads 41.5 -> 39.5; at 2 threads
 * prodcons, larson and mstress within noise). */
#define REMOTE_BUF_BYTES  256
#define REMOTE_BUF_BLOCKS ((REMOTE_BUF_BYTES - 2 * sizeof(void *)) / sizeof(void *))

struct remote_buf {
    struct remote_buf *next;
    uint16_t count;
    uint16_t medium_kib;       /* KiB of medium blocks in it (remote.c) */
    uint32_t depth;            /* blocks in the stack from this one down
                                  when it was pushed (atomic access) */
    struct block *blocks[REMOTE_BUF_BLOCKS];
};

/* A buffer goes to its heap once it holds this many KiB of medium blocks,
 * full or not. A partial buffer waits for its thread's sweep, and a thread
 * that only frees, or stopped allocating, never sweeps: 29 blocks of 256
 * KiB freed by an idle worker stayed allocated and resident while it
 * lived, through any other thread's malloc_trim. Now at most this much
 * waits per heap it freed into (small blocks: the buffer's 30 slots, 240
 * KiB at most). Sending every medium block home at once on the chain cost
 * a producer/consumer of blocks up to 16 KiB 16% of its time (0.168 ->
 * 0.194 s, 11 alternating runs); with blocks up to 128 KiB a cap of 256
 * KiB cost 22% and the chain 22%, this one 6% (0.166 -> 0.176, noise). */
#define REMOTE_BUF_MEDIUM_KIB 1024

_Static_assert(sizeof(struct remote_buf) == REMOTE_BUF_BYTES, "one buffer, REMOTE_BUF_BYTES");

/* Adoption. An owner that stopped allocating (a main thread waiting in
 * pthread_join after it built the data its workers free) never drains its
 * stack, and what other threads free into it is stranded. When a full
 * buffer would land on a stack already holding REMOTE_ADOPT_DEPTH blocks, the
 * freeing thread keeps the blocks instead, on per-class lists shaped like
 * a page (heap->kept[cls], told apart by address) that become the class's
 * current page, so its fast path hands them out before it carves anything.
 * The owner's pages still count them as in use. After adopting a buffer,
 * the thread keeps that owner's next frees one by one, with no buffer,
 * until the next sweep: blocks it hands out from a kept list come back to
 * it this way for as long as the owner sleeps (larson, 2 threads: peak
 * RSS 14.8 -> 10.2 MiB, time within noise). It does so for every owner it
 * adopted from since the sweep, not only the last: with many threads
 * waiting for a CPU, many owners sleep at once (larson, 8 threads on 2
 * CPUs, 1,000 slots a thread: peak RSS 20.1 -> 17.5 MiB; with 5,000 slots
 * a tie). At most REMOTE_KEPT_MAX bytes are kept; a list nobody took from
 * between two sweeps goes home, and all of them do on malloc_trim and at
 * thread exit. Checking the depth costs one load per full buffer; per
 * free, adoption costs a bit test and a compare with the slot's heap. The
 * depth counts blocks, not buffers, so that the partial buffers a slot's
 * change of hands pushes (remote.c) count for what they hold. */
#define REMOTE_ADOPT_DEPTH (16 * REMOTE_BUF_BLOCKS)
#define REMOTE_KEPT_MAX    (256 * 1024)

struct heap;

/* Queues b, a block of the heap tagged `tag` (not the caller's), for that
 * heap's owner; sh is b's page shape. */
HIDDEN void remote_free(uint16_t tag, struct block *b, const struct page_shape *sh);
/* The tag of the heap whose blocks this thread keeps one by one since
 * its latest adoption, TAG_EMPTY (no block's) when none. free's slow path
 * compares it before anything else and sends those blocks to remote_keep:
 * a thread adopting from a sleeping owner frees almost nothing else (in a
 * one-worker larson copy, 5,213,271 of 5,213,346 frees), and the general
 * path (free_slow's other tests, raw_free_other, remote_free's look at the
 * slot) took about 14 instructions more a free: 225 -> 211 a replacement,
 * and larson with 2 threads 0.49 -> 0.42 s per 10M replacements. */
extern HIDDEN __thread uint16_t tls_adopt_tag TLS_IE;
/* remote_free for b, a block of the heap tagged tls_adopt_tag, sh its
 * checked page shape: kept, unless it is medium (remote_free's buffers) or
 * the kept bytes are at their bound (adoption from that heap ends). */
HIDDEN void remote_keep(uint16_t tag, struct block *b, const struct page_shape *sh);
/* Frees a chain of other heaps' blocks (kept ones going home), never
 * adopting them back. */
HIDDEN void remote_send_home(struct block *list);
/* Hands every buffer this thread filled, full or not, to its heap. */
HIDDEN void remote_flush(void);
/* Takes drained buffers back for reuse: n of them, first..last linked by
 * `next`. All go to the spares while there are fewer than SPARE_MAX, else
 * all to the pool: no walk (a walk over the list was 4% of prodcons). */
HIDDEN void remote_recycle(struct remote_buf *first, struct remote_buf *last, unsigned n);
/* At thread exit: flush, and give the thread's spare buffers back. */
HIDDEN void remote_thread_exit(void);

HIDDEN void remote_process_init(void);
HIDDEN void remote_fork_prepare(void);
HIDDEN void remote_fork_parent(void);
HIDDEN void remote_fork_child(void);

#endif
