/*
 * w_smallobj.c - many small objects in one thread (the alloc-test /
 * rbstress / binary-trees shape): complete binary trees are built node by
 * node and torn down again, many short-lived small ones next to one
 * long-lived big one, so malloc and free of 24..120-byte nodes dominate.
 *
 * usage: w_smallobj [-d max depth=18] [-n passes=4]
 *
 * Node size varies with depth so several size classes are in use at once.
 * Each node records its depth in its payload; the walk before teardown
 * checks node count and payload, so a block handed out twice shows up.
 */
#include "bench_util.h"

typedef struct node {
    struct node *left, *right;
    uint32_t depth;
    uint8_t payload[];       /* depth % 13 * 8 bytes, first byte = depth */
} node;

static size_t node_size(unsigned depth)
{
    return sizeof(node) + (depth % 13) * 8;
}

static node *build(unsigned depth)
{
    size_t size = node_size(depth);
    node *n = bu_check(malloc(size), size);
    n->depth = depth;
    if (size > sizeof(node))
        n->payload[0] = (uint8_t)depth;
    if (depth == 0) {
        n->left = n->right = NULL;
    } else {
        n->left = build(depth - 1);
        n->right = build(depth - 1);
    }
    return n;
}

/* Count nodes, checking each one's depth and payload on the way. */
static unsigned long check(const node *n, unsigned depth)
{
    if (n->depth != depth)
        bu_fail("node %p: depth %u, expected %u", (const void *)n, n->depth, depth);
    if (node_size(depth) > sizeof(node) && n->payload[0] != (uint8_t)depth)
        bu_fail("node %p: payload overwritten", (const void *)n);
    if (depth == 0)
        return 1;
    return 1 + check(n->left, depth - 1) + check(n->right, depth - 1);
}

static void destroy(node *n)
{
    if (n->left) {
        destroy(n->left);
        destroy(n->right);
    }
    free(n);
}

static void expect_count(const node *t, unsigned depth)
{
    unsigned long want = (2ul << depth) - 1;
    unsigned long got = check(t, depth);
    if (got != want)
        bu_fail("tree of depth %u has %lu nodes, expected %lu", depth, got, want);
}

int main(int argc, char **argv)
{
    long max_depth = 18, passes = 4;
    int opt;
    while ((opt = getopt(argc, argv, "d:n:")) != -1) {
        switch (opt) {
        case 'd': max_depth = bu_arg_long(optarg, "-d"); break;
        case 'n': passes = bu_arg_long(optarg, "-n"); break;
        default:
            fprintf(stderr, "usage: %s [-d max depth] [-n passes]\n", argv[0]);
            return 64;
        }
    }
    if (max_depth < 4 || max_depth > 26)
        bu_fail("-d must be 4..26");

    double t0 = bu_now_s();
    unsigned long nodes = 0;
    node *longlived = build((unsigned)max_depth);
    for (long p = 0; p < passes; p++) {
        /* Short-lived trees: as many nodes at each depth as the big tree. */
        for (unsigned d = 4; d <= (unsigned)max_depth; d += 2) {
            unsigned long trees = 1ul << (max_depth - d);
            for (unsigned long i = 0; i < trees; i++) {
                node *t = build(d);
                expect_count(t, d);
                destroy(t);
                nodes += (2ul << d) - 1;
            }
        }
    }
    expect_count(longlived, (unsigned)max_depth);
    destroy(longlived);
    double s = bu_now_s() - t0;
    printf("%lu short-lived nodes in %.3f s\n", nodes, s);
    bu_metric("ns_per_node", s * 1e9 / (double)nodes);
    return 0;
}
