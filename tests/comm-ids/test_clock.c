/*
 * Tests of clock alignment with synthetic ranks whose device clocks are off
 * by up to +-50 ms and drift by up to +-100 ppm, on globaltimer-sized
 * values.  Observations are generated from a known truth: host anchors with
 * 20-50 us read windows, causal edges both ways between ranks at a few
 * thousand per second with 1-20 us latencies.  Every test checks that each
 * rank's aligned times are within 5 us of the truth and that the stated
 * bound contains the truth, over many deterministic seeds.
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

#include "mkscope/clock.h"

#define DEV_BASE  1700000000000000000.0L /* globaltimer: ns since 1970 */
#define HOST_BASE 123456789000000.0L     /* CLOCK_MONOTONIC: ns since boot */
#define MAX_RANKS 8

struct rng {
    uint64_t s;
};

static uint64_t next_u64(struct rng *r)
{
    uint64_t x = (r->s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double uniform(struct rng *r, double a, double b)
{
    return a + (b - a) * ((double)(next_u64(r) >> 11) / 9007199254740992.0);
}

/* The truth: device clock d_r(t) = DEV_BASE + t * (1 + eps_r) + phi_r for
 * true time t (ns); the host clock is HOST_BASE + t. */
struct world {
    int nranks;
    long double eps[MAX_RANKS], phi[MAX_RANKS];
    int host_timeline; /* 1: time line is the host clock, 0: rank 0's device clock */
};

static void make_world(struct world *w, struct rng *r, int nranks, int host_timeline)
{
    w->nranks = nranks;
    w->host_timeline = host_timeline;
    for (int i = 0; i < nranks; i++) {
        w->eps[i] = uniform(r, -100e-6, 100e-6);
        w->phi[i] = uniform(r, -50e6, 50e6);
    }
    /* make sure the extremes are exercised */
    w->eps[nranks - 1] = 100e-6;
    w->phi[nranks - 1] = -50e6;
}

static uint64_t dev_read(const struct world *w, int rank, long double t)
{
    return (uint64_t)floorl(DEV_BASE + t * (1.0L + w->eps[rank]) + w->phi[rank]);
}

/* The true aligned time of device value d on rank. */
static long double truth(const struct world *w, int rank, uint64_t d)
{
    long double t = ((long double)d - DEV_BASE - w->phi[rank]) / (1.0L + w->eps[rank]);
    if (w->host_timeline)
        return HOST_BASE + t;
    return DEV_BASE + t * (1.0L + w->eps[0]) + w->phi[0];
}

/* Edges between the listed ordered pairs, `rate` per second each, released
 * in [from_s, to_s). */
static void add_edges_between(struct mks_clock_model *m, const struct world *w, struct rng *r,
                              int (*linked)(int a, int b, int n), double rate, double from_s,
                              double to_s)
{
    size_t per_pair = (size_t)(rate * (to_s - from_s)), cap = 4096, k = 0;
    struct mks_clock_edge *e = malloc(cap * sizeof(*e));
    assert_non_null(e);
    for (int a = 0; a < w->nranks; a++)
        for (int b = 0; b < w->nranks; b++) {
            if (a == b || !linked(a, b, w->nranks))
                continue;
            for (size_t i = 0; i < per_pair; i++) {
                long double t = uniform(r, from_s * 1e9, to_s * 1e9);
                long double lat = uniform(r, 1000, 20000);
                e[k++] = (struct mks_clock_edge){.src_rank = (uint32_t)a, .dst_rank = (uint32_t)b,
                                                 .src_ns = dev_read(w, a, t),
                                                 .dst_ns = dev_read(w, b, t + lat),
                                                 .min_latency_ns = 1000};
                if (k == cap) {
                    assert_int_equal(mks_clock_add_edges(m, e, k), 0);
                    k = 0;
                }
            }
        }
    assert_int_equal(mks_clock_add_edges(m, e, k), 0);
    free(e);
}

static void add_edges(struct mks_clock_model *m, const struct world *w, struct rng *r,
                      int (*linked)(int a, int b, int n), double rate, double dur_s)
{
    add_edges_between(m, w, r, linked, rate, 0, dur_s);
}

static void add_anchors(struct mks_clock_model *m, const struct world *w, struct rng *r, int rank,
                        double hz, double dur_s)
{
    for (double t = uniform(r, 0, 1e9 / hz); t < dur_s * 1e9; t += 1e9 / hz) {
        double win = uniform(r, 20000, 50000);
        long double lo = t, read = t + uniform(r, 0, win);
        struct mks_clock_anchor a = {.rank = (uint32_t)rank,
                                     .device_ns = dev_read(w, rank, read),
                                     .host_lo_ns = (uint64_t)floorl(HOST_BASE + lo),
                                     .host_hi_ns = (uint64_t)ceill(HOST_BASE + t + win)};
        assert_int_equal(mks_clock_add_anchors(m, &a, 1), 0);
    }
}

static int all_pairs(int a, int b, int n)
{
    (void)a;
    (void)b;
    (void)n;
    return 1;
}

static int ring_pairs(int a, int b, int n)
{
    return (a + 1) % n == b || (b + 1) % n == a;
}

struct check {
    double max_err_ns;   /* worst |estimate - truth| */
    double mean_bound;   /* average stated error bound */
    long violations;     /* truth outside the stated bound */
};

/* Compare aligned times to the truth over the run (and a little beyond). */
static void check_alignment(const struct mks_clock_model *m, const struct world *w, double dur_s,
                            struct check *c)
{
    long n = 0;
    memset(c, 0, sizeof(*c));
    for (int rank = 0; rank < w->nranks; rank++) {
        for (int i = 0; i <= 40; i++) {
            long double t = (long double)dur_s * 1e9 * (i / 40.0);
            uint64_t d = dev_read(w, rank, t);
            struct mks_aligned_time at;
            assert_int_equal(mks_clock_align(m, (uint32_t)rank, d, &at), 0);
            long double tr = truth(w, rank, d);
            double err = fabs((double)((long double)at.t_ns - tr));
            if (err > c->max_err_ns)
                c->max_err_ns = err;
            if ((long double)at.lo_ns > tr || (long double)at.hi_ns < tr)
                c->violations++;
            assert_true(at.lo_ns <= at.t_ns && at.t_ns <= at.hi_ns);
            c->mean_bound += (double)at.err_ns;
            n++;
        }
        struct mks_clock_rank_est est;
        assert_int_equal(mks_clock_rank_estimate(m, (uint32_t)rank, &est), 0);
        /* the rank estimate's drift is the relative rate against the time line */
        long double rate = w->host_timeline ? 1.0L / (1.0L + w->eps[rank])
                                            : (1.0L + w->eps[0]) / (1.0L + w->eps[rank]);
        assert_true(fabs(est.drift - (double)(rate - 1.0L)) <= est.drift_err + 1e-12);
        long double off = truth(w, rank, est.ref_device_ns) - (long double)est.ref_device_ns;
        assert_true(fabsl((long double)est.offset_ns - off) <= est.offset_err_ns + 1.0);
    }
    c->mean_bound /= (double)n;
}

static struct mks_clock_model *new_model(int nranks)
{
    struct mks_clock_model *m = NULL;
    assert_int_equal(mks_clock_model_create((uint32_t)nranks, NULL, &m), 0);
    return m;
}

/* No anchors: the time line is rank 0's device clock; 8 ranks, edges both
 * ways between every pair, 2000 per second per direction, 2 s. */
static void test_edges_only_8_ranks(void **state)
{
    (void)state;
    struct rng r = {1};
    struct world w;
    struct check c;
    struct mks_clock_model *m = new_model(8);

    make_world(&w, &r, 8, 0);
    add_edges(m, &w, &r, all_pairs, 2000, 2.0);
    assert_int_equal(mks_clock_solve(m), 0);
    check_alignment(m, &w, 2.0, &c);
    printf("  edges only, 8 ranks: worst error %.1f ns, mean bound %.1f ns\n", c.max_err_ns,
           c.mean_bound);
    assert_int_equal(c.violations, 0);
    assert_true(c.max_err_ns <= 5000);
    mks_clock_model_destroy(m);
}

/* Many seeds, 4-8 ranks, half of them on the host time line with anchors at
 * 50 Hz, half on rank 0's clock with edges only: the bound always holds and
 * offsets are within 5 us. */
static void test_many_seeds(void **state)
{
    (void)state;
    double worst = 0;
    for (uint64_t seed = 100; seed < 160; seed++) {
        struct rng r = {seed};
        struct world w;
        struct check c;
        int n = 4 + (int)(seed % 5);
        struct mks_clock_model *m = new_model(n);
        int anchored = seed % 2;

        make_world(&w, &r, n, anchored);
        if (anchored)
            for (int k = 0; k < n; k++)
                add_anchors(m, &w, &r, k, 50, 1.0);
        add_edges(m, &w, &r, all_pairs, 1000, 1.0);
        assert_int_equal(mks_clock_solve(m), 0);
        check_alignment(m, &w, 1.0, &c);
        if (c.violations)
            printf("  seed %llu: %ld violations\n", (unsigned long long)seed, c.violations);
        assert_int_equal(c.violations, 0);
        assert_true(c.max_err_ns <= 5000);
        worst = fmax(worst, c.max_err_ns);
        mks_clock_model_destroy(m);
    }
    printf("  60 seeds: worst error %.1f ns\n", worst);
}

/* Host anchors only, then anchors plus edges: the edges must tighten the
 * bound, and both must contain the truth. */
static void test_anchors_refined_by_edges(void **state)
{
    (void)state;
    struct check ca, ce;
    for (int with_edges = 0; with_edges < 2; with_edges++) {
        struct rng r = {7};
        struct world w;
        struct mks_clock_model *m = new_model(6);
        make_world(&w, &r, 6, 1);
        for (int k = 0; k < 6; k++)
            add_anchors(m, &w, &r, k, 10, 2.0);
        if (with_edges)
            add_edges(m, &w, &r, all_pairs, 2000, 2.0);
        assert_int_equal(mks_clock_solve(m), 0);
        check_alignment(m, &w, 2.0, with_edges ? &ce : &ca);
        mks_clock_model_destroy(m);
    }
    printf("  anchors only: worst %.1f ns bound %.1f ns; with edges: worst %.1f ns bound %.1f ns\n",
           ca.max_err_ns, ca.mean_bound, ce.max_err_ns, ce.mean_bound);
    assert_int_equal(ca.violations, 0);
    assert_int_equal(ce.violations, 0);
    assert_true(ce.max_err_ns <= 5000);
    assert_true(ce.mean_bound < ca.mean_bound);
}

/* Edges only between ring neighbours: alignment propagates over hops. */
static void test_ring_topology(void **state)
{
    (void)state;
    struct rng r = {42};
    struct world w;
    struct check c;
    struct mks_clock_model *m = new_model(6);

    make_world(&w, &r, 6, 0);
    add_edges(m, &w, &r, ring_pairs, 3000, 1.0);
    assert_int_equal(mks_clock_solve(m), 0);
    check_alignment(m, &w, 1.0, &c);
    printf("  ring of 6: worst error %.1f ns, mean bound %.1f ns\n", c.max_err_ns, c.mean_bound);
    assert_int_equal(c.violations, 0);
    assert_true(c.max_err_ns <= 5000);
    mks_clock_model_destroy(m);
}

/* A long run with a tight offset prior: rank 1 is first reached through an
 * edge with rank 2 some 90 s after rank 2's reference, so its first estimate
 * is off by what drift adds over 90 s (up to 18 ms, far beyond
 * max_offset_ns = 1 ms); the bound must still hold. */
static int pair_0_2(int a, int b, int n)
{
    (void)n;
    return (a == 0 && b == 2) || (a == 2 && b == 0);
}

static int pair_1_2(int a, int b, int n)
{
    (void)n;
    return (a == 1 && b == 2) || (a == 2 && b == 1);
}

static void test_long_run_tight_prior(void **state)
{
    (void)state;
    struct rng r = {5};
    struct world w;
    struct check c;
    struct mks_clock_model *m = NULL;
    struct mks_clock_opts o = {.sz = sizeof(o), .max_offset_ns = 1e6};

    assert_int_equal(mks_clock_model_create(3, &o, &m), 0);
    make_world(&w, &r, 3, 0);
    w.eps[2] = -100e-6; /* 200 ppm apart from rank 1 */
    w.eps[1] = 100e-6;
    add_edges_between(m, &w, &r, pair_0_2, 2, 0, 1);     /* places 2 near 0's reference */
    add_edges_between(m, &w, &r, pair_1_2, 50, 90, 100); /* places 1 late */
    add_edges_between(m, &w, &r, pair_0_2, 50, 0, 100);
    assert_int_equal(mks_clock_solve(m), 0);
    check_alignment(m, &w, 100.0, &c);
    printf("  100 s, late placement: worst error %.1f ns, mean bound %.1f ns\n", c.max_err_ns,
           c.mean_bound);
    assert_int_equal(c.violations, 0);
    mks_clock_model_destroy(m);
}

/* ---- a model of reduced anchors is the model of all ------------------------ */

/* Anchors of every shape the store hands over: exact ones on a line (a
 * CPU rank whose host and device clock are one: the caller gives it no
 * drift and a whole offset), noisy ones with windows
 * of 20 us to 2 ms, each twice (an epoch's end is the next one's begin),
 * several at one device time, and coming in runs out of time order (a
 * store whose epochs did not arrive in order). */
static size_t shaped_anchors(const struct world *w, struct rng *r, int rank, size_t n, int shape,
                             struct mks_clock_anchor *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        long double t = (long double)i * 3.2e6 + (shape == 2 ? uniform(r, 0, 3e6) : 0);
        double win = shape == 0 ? 2e6 : uniform(r, 20000, 2e6);
        long double read = t + (shape == 0 ? 1e6 : uniform(r, 0, win));
        struct mks_clock_anchor a = {.rank = (uint32_t)rank,
                                     .device_ns = dev_read(w, rank, read),
                                     .host_lo_ns = (uint64_t)floorl(HOST_BASE + t),
                                     .host_hi_ns = (uint64_t)ceill(HOST_BASE + t + win)};
        out[k++] = a;
        if (shape != 0 && i % 3 == 0)
            out[k++] = a; /* the same pair again */
        if (shape == 2 && i % 7 == 0) {
            a.host_hi_ns += 1000; /* one device time, a wider window */
            out[k++] = a;
        }
    }
    if (shape == 2 && k > 8) {
        /* runs: the second quarter after the rest */
        size_t q = k / 4;
        struct mks_clock_anchor *tmp = malloc(q * sizeof(*tmp));
        assert_non_null(tmp);
        memcpy(tmp, out + q, q * sizeof(*tmp));
        memmove(out + q, out + 2 * q, (k - 2 * q) * sizeof(*out));
        memcpy(out + k - q, tmp, q * sizeof(*tmp));
        free(tmp);
    }
    return k;
}

static void shuffle(struct mks_clock_anchor *a, size_t n, struct rng *r)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = next_u64(r) % i;
        struct mks_clock_anchor t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static struct mks_clock_model *solved(int nranks, const struct mks_clock_anchor *a, size_t n,
                                      int with_edges, const struct world *w, uint64_t seed)
{
    struct mks_clock_model *m = new_model(nranks);
    assert_int_equal(mks_clock_add_anchors(m, a, n), 0);
    if (with_edges) {
        struct rng r = {seed};
        add_edges(m, w, &r, ring_pairs, 200, 1.0);
    }
    assert_int_equal(mks_clock_solve(m), 0);
    return m;
}

/* Every rank's estimate and aligned times (inside the anchors' span and
 * past it) exactly the same in both models. */
static void assert_same_model(const struct mks_clock_model *x, const struct mks_clock_model *y,
                              const struct world *w)
{
    for (int rank = 0; rank < w->nranks; rank++) {
        struct mks_clock_rank_est a, b;
        assert_int_equal(mks_clock_rank_estimate(x, (uint32_t)rank, &a), 0);
        assert_int_equal(mks_clock_rank_estimate(y, (uint32_t)rank, &b), 0);
        assert_true(a.ref_device_ns == b.ref_device_ns && a.offset_ns == b.offset_ns &&
                    a.drift == b.drift && a.offset_err_ns == b.offset_err_ns &&
                    a.drift_err == b.drift_err);
        for (int i = -5; i <= 45; i++) {
            uint64_t d = dev_read(w, rank, (long double)i * 1e8);
            struct mks_aligned_time p, q;
            assert_int_equal(mks_clock_align(x, (uint32_t)rank, d, &p), 0);
            assert_int_equal(mks_clock_align(y, (uint32_t)rank, d, &q), 0);
            assert_true(p.t_ns == q.t_ns && p.lo_ns == q.lo_ns && p.hi_ns == q.hi_ns);
        }
    }
}

static void test_reduced_anchors_same_model(void **state)
{
    (void)state;
    size_t sizes[] = {1, 2, 3, 40, 1200};
    size_t total_all = 0, total_kept = 0;
    for (uint64_t seed = 300; seed < 340; seed++) {
        struct rng r = {seed};
        struct world w;
        int n = 2 + (int)(seed % 5), with_edges = seed % 4 == 3;
        make_world(&w, &r, n, 1);
        size_t cap = 0;
        for (int k = 0; k < n; k++)
            cap += 3 * sizes[4];
        struct mks_clock_anchor *all = malloc(cap * sizeof(*all));
        struct mks_clock_anchor *red = malloc(cap * sizeof(*red));
        assert_non_null(all);
        assert_non_null(red);
        size_t na = 0;
        for (int k = 0; k < n; k++) {
            int shape = (int)((seed + 2 * (uint64_t)k) % 3);
            if (shape == 0)
                w.eps[k] = 0, w.phi[k] = floorl(w.phi[k]);
            na += shaped_anchors(&w, &r, k, sizes[(seed + (uint64_t)k) % 5], shape, all + na);
        }
        struct mks_clock_model *m_all = solved(n, all, na, with_edges, &w, seed);
        struct check c;
        check_alignment(m_all, &w, 0.1, &c);
        assert_int_equal(c.violations, 0);

        /* all reduced at once, handed over in any order */
        size_t nr;
        memcpy(red, all, na * sizeof(*red));
        assert_int_equal(mks_clock_anchors_reduce(red, na, &nr), 0);
        assert_true(nr <= na);
        for (size_t i = 1; i < nr; i++)
            assert_true(red[i - 1].rank < red[i].rank ||
                        (red[i - 1].rank == red[i].rank && red[i - 1].device_ns <= red[i].device_ns));
        shuffle(red, nr, &r);
        struct mks_clock_model *m_red = solved(n, red, nr, with_edges, &w, seed);
        assert_same_model(m_all, m_red, &w);
        total_all += na, total_kept += nr;

        /* a part reduced, then the rest added to what it kept (ingest) */
        size_t cut = next_u64(&r) % (na + 1), n1, n2;
        memcpy(red, all, cut * sizeof(*red));
        assert_int_equal(mks_clock_anchors_reduce(red, cut, &n1), 0);
        memcpy(red + n1, all + cut, (na - cut) * sizeof(*red));
        assert_int_equal(mks_clock_anchors_reduce(red, n1 + na - cut, &n2), 0);
        struct mks_clock_model *m_inc = solved(n, red, n2, with_edges, &w, seed);
        assert_same_model(m_all, m_inc, &w);

        /* all in reverse: the model does not depend on their order */
        for (size_t i = 0; i < na; i++)
            red[i] = all[na - 1 - i];
        struct mks_clock_model *m_rev = solved(n, red, na, with_edges, &w, seed);
        assert_same_model(m_all, m_rev, &w);
        mks_clock_model_destroy(m_all);
        mks_clock_model_destroy(m_red);
        mks_clock_model_destroy(m_inc);
        mks_clock_model_destroy(m_rev);
        free(all);
        free(red);
    }
    printf("  40 seeds: %zu anchors, %zu kept, the same models\n", total_all, total_kept);
    assert_true(total_kept * 10 < total_all);
}

/* An hour of one rank's anchors, more than the model holds before it cuts
 * them on the way: the model of all of them is the model of the few kept. */
static void test_many_anchors_bounded(void **state)
{
    (void)state;
    struct rng r = {11};
    struct world w;
    make_world(&w, &r, 2, 1);
    w.eps[1] = 0, w.phi[1] = floorl(w.phi[1]);
    size_t n = 0, cap = 2 * 3 * 100000;
    struct mks_clock_anchor *all = malloc(cap * sizeof(*all));
    assert_non_null(all);
    n += shaped_anchors(&w, &r, 0, 100000, 1, all + n);
    n += shaped_anchors(&w, &r, 1, 100000, 0, all + n);
    struct mks_clock_model *m_all = new_model(2);
    for (size_t i = 0; i < n; i += 1000)
        assert_int_equal(mks_clock_add_anchors(m_all, all + i, n - i < 1000 ? n - i : 1000), 0);
    assert_int_equal(mks_clock_solve(m_all), 0);
    size_t nr;
    assert_int_equal(mks_clock_anchors_reduce(all, n, &nr), 0);
    printf("  %zu anchors of two ranks: %zu kept\n", n, nr);
    assert_true(nr < 1000);
    struct mks_clock_model *m_red = solved(2, all, nr, 0, &w, 0);
    assert_same_model(m_all, m_red, &w);
    struct mks_clock_anchor bad = {.rank = 0, .device_ns = 5, .host_lo_ns = 10, .host_hi_ns = 9};
    assert_int_equal(mks_clock_anchors_reduce(&bad, 1, &nr), -EINVAL);
    mks_clock_model_destroy(m_all);
    mks_clock_model_destroy(m_red);
    free(all);
}

static void test_errors(void **state)
{
    (void)state;
    struct mks_clock_model *m = NULL;
    struct mks_aligned_time at;
    struct mks_clock_rank_est est;
    struct mks_clock_opts o = {.sz = 4};

    assert_int_equal(mks_clock_model_create(0, NULL, &m), -EINVAL);
    assert_int_equal(mks_clock_model_create(2, &o, &m), -EINVAL);
    o.sz = sizeof(o);
    o.max_drift = -1;
    assert_int_equal(mks_clock_model_create(2, &o, &m), -EINVAL);
    mks_clock_model_destroy(NULL);

    m = new_model(3);
    struct mks_clock_anchor bad_a = {.rank = 0, .device_ns = 5, .host_lo_ns = 10, .host_hi_ns = 9};
    assert_int_equal(mks_clock_add_anchors(m, &bad_a, 1), -EINVAL);
    bad_a = (struct mks_clock_anchor){.rank = 3, .host_lo_ns = 1, .host_hi_ns = 2};
    assert_int_equal(mks_clock_add_anchors(m, &bad_a, 1), -EINVAL);
    struct mks_clock_edge self = {.src_rank = 1, .dst_rank = 1};
    assert_int_equal(mks_clock_add_edges(m, &self, 1), -EINVAL);
    assert_int_equal(mks_clock_align(m, 0, 100, &at), -EINVAL); /* not solved */

    /* ranks 0 and 1 linked, rank 2 not: it cannot be aligned */
    struct mks_clock_edge e[2] = {
        {.src_rank = 0, .dst_rank = 1, .src_ns = 1000000, .dst_ns = 2005000, .min_latency_ns = 1000},
        {.src_rank = 1, .dst_rank = 0, .src_ns = 2100000, .dst_ns = 1098000, .min_latency_ns = 1000},
    };
    assert_int_equal(mks_clock_add_edges(m, e, 2), 0);
    assert_int_equal(mks_clock_solve(m), 0);
    assert_int_equal(mks_clock_align(m, 2, 100, &at), -ENODATA);
    assert_int_equal(mks_clock_rank_estimate(m, 2, &est), -ENODATA);
    assert_int_equal(mks_clock_align(m, 0, 1000000, &at), 0);
    assert_int_equal(at.t_ns, 1000000); /* rank 0 defines the time line */
    assert_int_equal(at.err_ns, 0);
    /* rank 1 is 1.003-1.004 ms ahead: T_1(2005000) >= 1001000 from the first edge;
     * the second, 95 us later, bounds it above by 1002000 plus what drift allows */
    assert_int_equal(mks_clock_align(m, 1, 2005000, &at), 0);
    assert_true(at.lo_ns >= 1000998 && at.hi_ns <= 1002050);
    /* the wake 0 -> 1 took T_1(2005000) - T_0(1000000): 1-2 us and a bit */
    struct mks_aligned_time d;
    assert_int_equal(mks_clock_interval(m, 0, 1000000, 1, 2005000, &d), 0);
    assert_int_equal(d.lo_ns, at.lo_ns - 1000000);
    assert_int_equal(d.hi_ns, at.hi_ns - 1000000);
    assert_true(d.lo_ns <= d.t_ns && d.t_ns <= d.hi_ns);
    assert_int_equal(mks_clock_interval(m, 0, 1000000, 2, 5, &d), -ENODATA);

    /* contradiction: a wake before the release that caused it, both ways */
    struct mks_clock_edge c = {.src_rank = 0, .dst_rank = 1, .src_ns = 1500000, .dst_ns = 2400000,
                               .min_latency_ns = 1000};
    assert_int_equal(mks_clock_add_edges(m, &c, 1), 0);
    assert_int_equal(mks_clock_solve(m), -EDOM);
    assert_int_equal(mks_clock_align(m, 0, 1000000, &at), -EINVAL); /* no model after a failed solve */
    mks_clock_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_edges_only_8_ranks),
        cmocka_unit_test(test_many_seeds),
        cmocka_unit_test(test_anchors_refined_by_edges),
        cmocka_unit_test(test_ring_topology),
        cmocka_unit_test(test_long_run_tight_prior),
        cmocka_unit_test(test_reduced_anchors_same_model),
        cmocka_unit_test(test_many_anchors_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
