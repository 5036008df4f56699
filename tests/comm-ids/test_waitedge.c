/*
 * Tests of the wait-chain join: matching rules (source rank, ambiguity,
 * NCCL ids, unmatched and ignored waits), and an end-to-end run of a
 * pipelined 4-rank step loop with skewed, drifting clocks in which one
 * producer is made late: the clock is aligned from the matched pairs
 * themselves and every edge's lateness bound must contain the true lateness.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/commid.h"
#include "mkscope/waitedge.h"

static void test_basic_and_rules(void **state)
{
    (void)state;
    uint64_t g1 = mks_commid_for_transfer(1, 0, 1, 5, 0, 0);
    uint64_t g2 = mks_commid_for_transfer(1, 2, 1, 5, 0, 0);
    uint64_t g3 = mks_commid_for_transfer(1, 0, 1, 6, 0, 0); /* no release */
    struct mks_wait_rec w[] = {
        {.rank = 1, .task_class = 7, .comm_gen = g1, .t_begin = 100, .t_end = 500},
        {.rank = 1, .task_class = 7, .comm_gen = 0, .t_begin = 100, .t_end = 500}, /* local */
        {.rank = 1, .task_class = 8, .comm_gen = g2, .t_begin = 1000, .t_end = 1100},
        {.rank = 1, .task_class = 8, .comm_gen = g3, .t_begin = 2000, .t_end = 2100},
    };
    struct mks_release_rec r[] = {
        {.rank = 0, .task_class = 3, .comm_gen = g1, .t_release = 300},
        /* same id released on a rank that is not the id's source: loses */
        {.rank = 3, .task_class = 4, .comm_gen = g2, .t_release = 1050},
        {.rank = 2, .task_class = 5, .comm_gen = g2, .t_release = 900},
        /* a release on the consumer's own rank never matches */
        {.rank = 1, .task_class = 6, .comm_gen = g3, .t_release = 2050},
    };
    struct mks_waitedge *e = NULL;
    struct mks_waitedge_stats st;
    size_t n = 0;

    assert_int_equal(mks_waitedge_join(w, 4, r, 4, NULL, &e, &n, &st), 0);
    assert_int_equal(n, 2);
    assert_int_equal(st.waits, 3);
    assert_int_equal(st.matched, 2);
    assert_int_equal(st.unmatched, 1);
    assert_int_equal(st.ambiguous, 1);

    assert_int_equal(e[0].wait_idx, 0);
    assert_int_equal(e[0].release_idx, 0);
    assert_int_equal(e[0].consumer_rank, 1);
    assert_int_equal(e[0].consumer_class, 7);
    assert_int_equal(e[0].producer_rank, 0);
    assert_int_equal(e[0].producer_class, 3);
    assert_int_equal(e[0].lateness.t_ns, 200); /* release 200 ns after the wait began */
    assert_int_equal(e[0].lateness.err_ns, 0);
    assert_int_equal(e[0].wake.t_ns, 200);
    assert_int_equal(e[0].flags, 0);

    assert_int_equal(e[1].release_idx, 2); /* the id's source rank 2 wins */
    assert_int_equal(e[1].producer_rank, 2);
    assert_int_equal(e[1].lateness.t_ns, -100); /* released before the wait began */
    assert_int_equal(e[1].flags, MKS_WAITEDGE_F_AMBIGUOUS);

    struct mks_clock_edge ce[2];
    assert_int_equal(mks_waitedge_clock_edges(e, n, w, r, 1000, ce), 1); /* ambiguous left out */
    assert_int_equal(ce[0].src_rank, 0);
    assert_int_equal(ce[0].dst_rank, 1);
    assert_int_equal(ce[0].src_ns, 300);
    assert_int_equal(ce[0].dst_ns, 500);
    free(e);

    /* malformed input */
    struct mks_wait_rec bad = {.rank = 0, .comm_gen = g1, .t_begin = 10, .t_end = 5};
    assert_int_equal(mks_waitedge_join(&bad, 1, r, 4, NULL, &e, &n, NULL), -EINVAL);
    assert_int_equal(mks_waitedge_join(NULL, 1, r, 4, NULL, &e, &n, NULL), -EINVAL);
    assert_int_equal(mks_waitedge_join(NULL, 0, NULL, 0, NULL, &e, &n, NULL), 0);
    assert_int_equal(n, 0);
    assert_null(e);
}

/* An NCCL all-reduce: every rank releases its contribution under the same id
 * and waits for the others; a wait matches another rank's release, the one
 * closest before the wait's end. */
static void test_nccl_ids(void **state)
{
    (void)state;
    uint64_t g = mks_commid_for_nccl(0xabcdef, MKS_NCCL_ALLREDUCE, 41);
    struct mks_wait_rec w[] = {{.rank = 0, .comm_gen = g, .t_begin = 100, .t_end = 900},
                               {.rank = 1, .comm_gen = g, .t_begin = 600, .t_end = 950}};
    struct mks_release_rec r[] = {{.rank = 0, .comm_gen = g, .t_release = 100},
                                  {.rank = 1, .comm_gen = g, .t_release = 850}};
    struct mks_waitedge *e;
    size_t n;

    assert_int_equal(mks_waitedge_join(w, 2, r, 2, NULL, &e, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_int_equal(e[0].producer_rank, 1); /* rank 0 waited for rank 1: late by 750 */
    assert_int_equal(e[0].lateness.t_ns, 750);
    assert_int_equal(e[1].producer_rank, 0);
    assert_int_equal(e[1].lateness.t_ns, -500);
    free(e);
}

/* ---- end to end ---- */

#define DEV_BASE 1700000000000000000.0L
enum { RANKS = 4, STEPS = 400, CHUNKS = 8, LATE_STEP = 123, LATE_RANK = 2 };

static uint64_t rng_s = 99;
static double uni(double a, double b)
{
    uint64_t x = (rng_s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return a + (b - a) * ((double)(x >> 11) / 9007199254740992.0);
}

static long double eps[RANKS], phi[RANKS];

static uint64_t dev(int rank, long double t)
{
    return (uint64_t)floorl(DEV_BASE + t * (1.0L + eps[rank]) + phi[rank]);
}

/* true time of a device value on rank, on rank 0's clock (the time line) */
static long double on_timeline(int rank, uint64_t d)
{
    long double t = ((long double)d - DEV_BASE - phi[rank]) / (1.0L + eps[rank]);
    return DEV_BASE + t * (1.0L + eps[0]) + phi[0];
}

static void test_pipeline_end_to_end(void **state)
{
    (void)state;
    size_t nw = 0, nr = 0, cap = (size_t)STEPS * RANKS * CHUNKS;
    struct mks_wait_rec *w = calloc(cap, sizeof(*w));
    struct mks_release_rec *r = calloc(cap, sizeof(*r));
    assert_non_null(w);
    assert_non_null(r);
    for (int k = 0; k < RANKS; k++) {
        eps[k] = uni(-100e-6, 100e-6);
        phi[k] = uni(-50e6, 50e6);
    }
    /* each step: every rank sends CHUNKS chunks to the next rank in the ring;
     * the consumer starts waiting at a time of its own, the wait ends once
     * the release has arrived (1-20 us later) */
    for (int s = 0; s < STEPS; s++) {
        long double t0 = s * 1e6L; /* 1 ms steps */
        for (int src = 0; src < RANKS; src++) {
            int dst = (src + 1) % RANKS;
            for (int c = 0; c < CHUNKS; c++) {
                long double rel = t0 + uni(0, 200e3) + c * 10e3;
                if (s == LATE_STEP && src == LATE_RANK)
                    rel += 1000e3; /* a slow producer */
                long double beg = t0 + uni(0, 300e3);
                long double end = fmaxl(beg, rel + uni(1000, 20000));
                uint64_t g = mks_commid_for_transfer(3, (uint32_t)src, (uint32_t)dst, (uint32_t)s, 0,
                                                     (uint32_t)c);
                r[nr++] = (struct mks_release_rec){.rank = (uint32_t)src, .task_class = 10,
                                                   .comm_gen = g, .t_release = dev(src, rel)};
                w[nw++] = (struct mks_wait_rec){.rank = (uint32_t)dst, .task_class = 20, .comm_gen = g,
                                                .t_begin = dev(dst, beg), .t_end = dev(dst, end)};
            }
        }
    }
    /* pass 1: join without a clock; every id is unique, so every match is a
     * causal edge for the clock model */
    struct mks_waitedge *e;
    struct mks_waitedge_stats st;
    size_t n;
    assert_int_equal(mks_waitedge_join(w, nw, r, nr, NULL, &e, &n, &st), 0);
    assert_int_equal(n, nw);
    assert_int_equal(st.ambiguous, 0);
    struct mks_clock_edge *ce = calloc(n, sizeof(*ce));
    assert_non_null(ce);
    size_t nce = mks_waitedge_clock_edges(e, n, w, r, 1000, ce);
    assert_int_equal(nce, n);
    free(e);

    struct mks_clock_model *m;
    assert_int_equal(mks_clock_model_create(RANKS, NULL, &m), 0);
    assert_int_equal(mks_clock_add_edges(m, ce, nce), 0);
    assert_int_equal(mks_clock_solve(m), 0);

    /* pass 2: aligned; check each lateness against the truth */
    assert_int_equal(mks_waitedge_join(w, nw, r, nr, m, &e, &n, &st), 0);
    assert_int_equal(n, nw);
    double worst = 0;
    size_t late_edges = 0;
    for (size_t i = 0; i < n; i++) {
        const struct mks_wait_rec *wi = &w[e[i].wait_idx];
        const struct mks_release_rec *ri = &r[e[i].release_idx];
        long double truth = on_timeline((int)ri->rank, ri->t_release) - on_timeline((int)wi->rank, wi->t_begin);
        assert_true((long double)e[i].lateness.lo_ns <= truth && truth <= (long double)e[i].lateness.hi_ns);
        worst = fmax(worst, fabs((double)((long double)e[i].lateness.t_ns - truth)));
        if (e[i].lateness.lo_ns > 400000) {
            late_edges++;
            assert_int_equal(e[i].producer_rank, LATE_RANK);
            assert_int_equal(mks_commid_step(e[i].comm_gen), LATE_STEP);
        }
    }
    printf("  pipeline: %zu edges, worst lateness error %.1f ns\n", n, worst);
    assert_true(worst <= 5000);
    assert_int_equal(late_edges, CHUNKS); /* the slow producer, and only it */
    free(e);
    free(ce);
    free(w);
    free(r);
    mks_clock_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_and_rules),
        cmocka_unit_test(test_nccl_ids),
        cmocka_unit_test(test_pipeline_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
