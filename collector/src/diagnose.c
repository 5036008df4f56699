/*
 * Wait-chain stitching and diagnosis of slow steps.
 *
 * 1. Step time.  Per (rank, step) the step lasts from its first task start
 *    to its last task end (rows of `steps`, merged over epochs).  The time of
 *    a step is its slowest rank's; a step is slow when it exceeds the median
 *    of its neighbours on each side (DIAG_WINDOW steps) by slow_frac, by
 *    min_excess_ns and by four robust standard deviations of them.
 * 2. Norms.  Everything is judged against the same rank's median over all
 *    steps of the run (the same wait peer and class, the same task class, the
 *    same release): faults hit some steps, so medians stay clean.
 * 3. The chain.  Start at the slowest rank of the slow step.  At each rank
 *    score five explanations in nanoseconds of delay they add beyond the
 *    norm:
 *      remote_stall     remote waits longer than their norm, summed per
 *                       peer over the step's transfers (follow the longest
 *                       one's comm_gen to the producer rank and classify
 *                       there);
 *      local_imbalance  ready tasks queued while workers idled (the agent's
 *                       queued_while_idle_ns, else queueing excess capped by
 *                       worker idle excess, else the queueing excess spread
 *                       over the workers or the longest wait's excess);
 *      slow_task        one task class's run time above its norm (spread
 *                       over the workers, or the longest task's excess);
 *      notify_delay     release later than the producing task's end (minus
 *                       the transfer) by more than its norm: a remote
 *                       release, or a local one (the agent's per (step,
 *                       class) record of the latest local release);
 *      slow_transfer    the transfer (comm begin -> end) longer than its norm.
 *    Waits and releases are judged against the same transfer (channel, op)
 *    in other steps; a step's transfers follow one another, so their
 *    excesses add up (the side-by-side ones of one transfer count once).
 *    The largest wins if it explains at least a fifth of the delay that led
 *    here, or a twentieth when it is at least twice every other score (the
 *    per-class scores are lower bounds when a class is late in several
 *    layers); else the link is undecided.  Remote waits are joined to releases
 *    with comm-ids' mks_waitedge_join on clocks aligned from the epochs'
 *    host/device anchors, which gives each remote link its lateness.
 * 4. Coverage.  A link on a rank whose observed share of events (ran /
 *    eligible over the epochs of the step) is below min_coverage makes the
 *    answer undecided, with the reason.
 * 5. Groups.  Slow steps with the same chain (ranks and causes) and root
 *    class form one group.
 *
 * A class's total excess divided by the worker count is what the step loses
 * when the excess is spread evenly (a few workers, all busy); with many
 * workers (a GPU's 131) and one task late, the step loses that task's
 * excess instead, which the longest task (or wait) gives.  Agents send
 * histograms without their maximum, so the longest is taken as the lower
 * bound of the highest non-empty log2 bucket (at least half the true one).
 */
#include "diagnose.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/commid.h"
#include "mkscope/waitedge.h"
#include "serve.h"

#define MAX_CHAIN 16
/* Steps either side a step's time is compared with. */
#define DIAG_WINDOW 10
/* A cause at least this many times the next one ... */
#define DIAG_DOMINANT 2.0
/* ... needs to explain only this share of the delay (else a fifth). */
#define DIAG_DOMINANT_SHARE 0.05

struct srow { /* (rank, step) */
    uint32_t rank, step;
    uint64_t t_begin, t_end, qwi;
    double elig, ran, thr, lost, idle;
    bool has_workers;
};
struct crow { /* (rank, step, class) */
    uint32_t rank, step, cls;
    double count, run_sum, run_max, queue_sum, queue_count, queue_max;
};
struct erow { /* (epoch, class): task statistics of a whole epoch */
    uint32_t rank, cls;
    int64_t epoch_id;
    double count, run_sum, queue_sum, queue_count;
};
struct estep { /* a step reported in an epoch */
    uint32_t rank, step;
    int64_t epoch_id;
};
struct wrow {
    uint32_t rank, step, peer, cls;
    uint64_t gen, t_begin, t_end;
};
struct rrow {
    uint32_t rank, step, consumer, cls;
    uint64_t gen, t_ready, t_start, t_end, t_cb, t_ce, t_rel;
};

struct diag {
    struct mks_store *st;
    const char *job;
    struct mks_diag_opts o;
    struct srow *s;
    size_t ns;
    struct crow *c;
    size_t nc;
    struct erow *ec;
    size_t nec;
    struct estep *es;
    size_t nes;
    struct wrow *w;
    size_t nw;
    struct rrow *r;
    size_t nr;
    uint32_t n_ranks;
    uint32_t *n_workers; /* per rank */
    uint8_t comm_class[256]; /* task class is a communication task (schema) */
    int16_t family[256];     /* "expert.3" -> the lowest class id of "expert.*"; -1 none */
    struct memo *memo;       /* norms computed once per key (open addressing) */
    size_t memo_cap;
    struct ex_ent *ex; /* scratch: one rank's waits or releases of a step */
    size_t ex_cap;
    struct mks_clock_model *clock;
};

/* ---- loading ----------------------------------------------------------------- */

#define GROW(arr, n, cap)                                                                          \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            size_t nc_ = (cap) ? (cap) * 2 : 256;                                                  \
            void *p_ = realloc((arr), nc_ * sizeof(*(arr)));                                       \
            if (!p_)                                                                               \
                goto oom;                                                                          \
            (arr) = p_;                                                                            \
            (cap) = nc_;                                                                           \
        }                                                                                          \
    } while (0)

static int prep(struct diag *d, const char *sql, sqlite3_stmt **s)
{
    if (sqlite3_prepare_v2(mks_store_db(d->st), sql, -1, s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(*s, 1, d->job, -1, SQLITE_TRANSIENT);
    return 0;
}

static uint64_t u64(sqlite3_stmt *s, int i)
{
    return (uint64_t)sqlite3_column_int64(s, i);
}

/* SQL mks_hist_floor(blob): the least value the highest non-empty bucket of
 * a stored histogram holds (store.c's blob: little-endian u64 buckets; bucket
 * b > 0 holds [2^(b-1), 2^b)), 0 for none. */
static void hist_floor_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const uint8_t *p = sqlite3_value_blob(argv[0]);
    int n = sqlite3_value_bytes(argv[0]) / 8;
    int64_t v = 0;
    for (int b = n - 1; p && b > 0; b--) {
        uint64_t c = 0;
        for (int i = 0; i < 8; i++)
            c |= (uint64_t)p[b * 8 + i] << (8 * i);
        if (c) {
            v = b - 1 < 62 ? (int64_t)1 << (b - 1) : INT64_MAX;
            break;
        }
    }
    sqlite3_result_int64(ctx, v);
}

static int cmp_srow(const void *a, const void *b)
{
    const struct srow *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->step < y->step ? -1 : x->step > y->step;
}

static struct srow *srow_at(struct diag *d, uint32_t rank, uint32_t step)
{
    struct srow key = {.rank = rank, .step = step};
    return d->ns ? bsearch(&key, d->s, d->ns, sizeof(*d->s), cmp_srow) : NULL;
}

static int load(struct diag *d)
{
    sqlite3_stmt *s;
    size_t cap = 0;
    /* Steps: a step reported in several epochs covers all of it so far in
     * each, so min(begin) .. max(end) is the whole step. */
    if (prep(d,
             "SELECT e.rank, s.step, MIN(s.t_begin_dev), MAX(s.t_end_dev),"
             " MAX(s.queued_while_idle_ns) FROM steps s JOIN epochs e ON e.id = s.epoch_id"
             " WHERE e.job = ?1 AND s.t_begin_dev > 0 AND s.t_end_dev >= s.t_begin_dev"
             " GROUP BY e.rank, s.step ORDER BY e.rank, s.step",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->s, d->ns, cap);
        struct srow *r = &d->s[d->ns++];
        memset(r, 0, sizeof(*r));
        r->rank = (uint32_t)u64(s, 0), r->step = (uint32_t)u64(s, 1);
        r->t_begin = u64(s, 2), r->t_end = u64(s, 3), r->qwi = u64(s, 4);
        if (r->rank + 1 > d->n_ranks)
            d->n_ranks = r->rank + 1;
    }
    sqlite3_finalize(s);
    /* Ranks whose steps carry no times: a generation advance labelled K
     * starts decode step K (the runtimes raise it as step K begins, or as
     * step K - 1 ends), so step K - 1 lasts from the last advance labelled
     * K - 1 to the last labelled K. */
    if (prep(d,
             "SELECT e.rank, g.step, MAX(g.t_dev) FROM gens g JOIN epochs e ON e.id = g.epoch_id"
             " WHERE e.job = ?1 AND g.t_dev > 0 GROUP BY e.rank, g.step ORDER BY e.rank, g.step",
             &s))
        return -EIO;
    size_t timed = d->ns;
    uint32_t prev_rank = UINT32_MAX, prev_step = 0;
    uint64_t prev_t = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint32_t rank = (uint32_t)u64(s, 0), step = (uint32_t)u64(s, 1);
        uint64_t t = u64(s, 2);
        bool has_times = false;
        for (size_t i = 0; i < timed && !has_times; i++)
            has_times = d->s[i].rank == rank;
        if (!has_times && rank == prev_rank && step == prev_step + 1 && t >= prev_t) {
            GROW(d->s, d->ns, cap);
            struct srow *r = &d->s[d->ns++];
            memset(r, 0, sizeof(*r));
            r->rank = rank, r->step = prev_step, r->t_begin = prev_t, r->t_end = t;
            if (r->rank + 1 > d->n_ranks)
                d->n_ranks = r->rank + 1;
        }
        prev_rank = rank, prev_step = step, prev_t = t;
    }
    sqlite3_finalize(s);
    if (d->ns > 1)
        qsort(d->s, d->ns, sizeof(*d->s), cmp_srow);
    /* Coverage of the epochs that carried each step. */
    if (prep(d,
             "SELECT e.rank, st.step, SUM(c.eligible), SUM(c.ran), SUM(c.throttled), SUM(c.lost)"
             " FROM coverage c JOIN epochs e ON e.id = c.epoch_id JOIN (SELECT DISTINCT epoch_id,"
             " step FROM steps) st ON st.epoch_id = e.id WHERE e.job = ?1 GROUP BY e.rank, st.step",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct srow *r = srow_at(d, (uint32_t)u64(s, 0), (uint32_t)u64(s, 1));
        if (r) {
            r->elig = (double)u64(s, 2), r->ran = (double)u64(s, 3);
            r->thr = (double)u64(s, 4), r->lost = (double)u64(s, 5);
        }
    }
    sqlite3_finalize(s);
    if (prep(d,
             "SELECT e.rank, w.step, SUM(w.idle_ns) FROM workers w JOIN epochs e ON"
             " e.id = w.epoch_id WHERE e.job = ?1 GROUP BY e.rank, w.step",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct srow *r = srow_at(d, (uint32_t)u64(s, 0), (uint32_t)u64(s, 1));
        if (r) {
            r->idle = (double)u64(s, 2);
            r->has_workers = true;
        }
    }
    sqlite3_finalize(s);
    cap = 0;
    if (sqlite3_create_function(mks_store_db(d->st), "mks_hist_floor", 1,
                                SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, hist_floor_fn, NULL,
                                NULL) != SQLITE_OK)
        return -EIO;
    if (prep(d,
             "SELECT e.rank, t.step, t.class, SUM(t.count), SUM(CASE WHEN t.run_sum > 0 THEN"
             " t.run_sum ELSE t.sum_run_ns END), MAX(CASE WHEN t.run_max > 0 THEN t.run_max"
             " ELSE mks_hist_floor(t.run_hist) END), SUM(t.queue_sum), SUM(t.queue_count),"
             " MAX(CASE WHEN t.queue_max > 0 THEN t.queue_max ELSE"
             " mks_hist_floor(t.queue_hist) END) FROM task_stats t JOIN epochs e ON"
             " e.id = t.epoch_id WHERE e.job = ?1 GROUP BY e.rank, t.step, t.class",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->c, d->nc, cap);
        struct crow *r = &d->c[d->nc++];
        r->rank = (uint32_t)u64(s, 0), r->step = (uint32_t)u64(s, 1), r->cls = (uint32_t)u64(s, 2);
        r->count = (double)u64(s, 3), r->run_sum = (double)u64(s, 4);
        r->run_max = (double)u64(s, 5), r->queue_sum = (double)u64(s, 6);
        r->queue_count = (double)u64(s, 7), r->queue_max = (double)u64(s, 8);
    }
    sqlite3_finalize(s);
    /* Per-epoch class statistics and which steps each epoch carried: when an
     * epoch spans more steps than the agent keeps apart, task statistics
     * exist per epoch only. */
    cap = 0;
    if (prep(d,
             "SELECT e.rank, t.epoch_id, t.class, SUM(t.count), SUM(CASE WHEN t.run_sum > 0 THEN"
             " t.run_sum ELSE t.sum_run_ns END), SUM(t.queue_sum), SUM(t.queue_count) FROM"
             " task_stats t JOIN epochs e ON e.id = t.epoch_id WHERE e.job = ?1"
             " GROUP BY t.epoch_id, t.class",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->ec, d->nec, cap);
        struct erow *r = &d->ec[d->nec++];
        r->rank = (uint32_t)u64(s, 0), r->epoch_id = sqlite3_column_int64(s, 1);
        r->cls = (uint32_t)u64(s, 2), r->count = (double)u64(s, 3);
        r->run_sum = (double)u64(s, 4), r->queue_sum = (double)u64(s, 5);
        r->queue_count = (double)u64(s, 6);
    }
    sqlite3_finalize(s);
    cap = 0;
    if (prep(d,
             "SELECT DISTINCT e.rank, s.epoch_id, s.step FROM steps s JOIN epochs e ON"
             " e.id = s.epoch_id WHERE e.job = ?1",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->es, d->nes, cap);
        struct estep *r = &d->es[d->nes++];
        r->rank = (uint32_t)u64(s, 0), r->epoch_id = sqlite3_column_int64(s, 1);
        r->step = (uint32_t)u64(s, 2);
    }
    sqlite3_finalize(s);
    cap = 0;
    if (prep(d,
             "SELECT e.rank, w.step, w.peer_rank, w.waiter_class, w.comm_gen, w.t_begin_dev,"
             " w.t_end_dev FROM waits w JOIN epochs e ON e.id = w.epoch_id WHERE e.job = ?1"
             " AND w.t_begin_dev > 0 AND w.t_end_dev >= w.t_begin_dev",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->w, d->nw, cap);
        struct wrow *r = &d->w[d->nw++];
        r->rank = (uint32_t)u64(s, 0), r->step = (uint32_t)u64(s, 1), r->peer = (uint32_t)u64(s, 2);
        r->cls = (uint32_t)u64(s, 3), r->gen = u64(s, 4), r->t_begin = u64(s, 5);
        r->t_end = u64(s, 6);
    }
    sqlite3_finalize(s);
    /* One release may be reported in parts by consecutive epochs (its
     * notification postponed past the epoch's end): merge them per key. */
    cap = 0;
    if (prep(d,
             "SELECT e.rank, MAX(r.step), r.consumer_rank, MAX(r.class), r.comm_gen,"
             " MAX(r.t_ready), MAX(r.t_start), MAX(r.t_end), MAX(r.t_comm_begin),"
             " MAX(r.t_comm_end), MAX(r.t_release) FROM releases r JOIN epochs e"
             " ON e.id = r.epoch_id WHERE e.job = ?1 GROUP BY e.rank, r.comm_gen, r.consumer_rank",
             &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        GROW(d->r, d->nr, cap);
        struct rrow *r = &d->r[d->nr++];
        r->rank = (uint32_t)u64(s, 0), r->step = (uint32_t)u64(s, 1);
        r->consumer = (uint32_t)u64(s, 2), r->cls = (uint32_t)u64(s, 3), r->gen = u64(s, 4);
        r->t_ready = u64(s, 5), r->t_start = u64(s, 6), r->t_end = u64(s, 7);
        r->t_cb = u64(s, 8), r->t_ce = u64(s, 9), r->t_rel = u64(s, 10);
    }
    sqlite3_finalize(s);
    for (size_t i = 0; i < d->nw; i++)
        if (d->w[i].peer + 1 > d->n_ranks && d->w[i].peer < 4096)
            d->n_ranks = d->w[i].peer + 1;
    d->n_workers = calloc(d->n_ranks ? d->n_ranks : 1, sizeof(uint32_t));
    if (!d->n_workers)
        return -ENOMEM;
    if (prep(d, "SELECT DISTINCT id FROM task_classes WHERE job = ?1 AND comm AND id < 256", &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW)
        d->comm_class[u64(s, 0) & 255] = 1;
    sqlite3_finalize(s);
    /* Families of classes: one operator's instances named "<op>.<n>" (MoE
     * experts).  An instance that runs only now and then has no norm of its
     * own; its family's is the next best. */
    for (int i = 0; i < 256; i++)
        d->family[i] = -1;
    if (prep(d,
             "SELECT id, MIN(name) FROM task_classes WHERE job = ?1 AND id < 256 AND"
             " instr(name, '.') > 1 GROUP BY id ORDER BY id",
             &s))
        return -EIO;
    {
        char fam_name[256][64];
        int fam_id[256], nf = 0;
        while (sqlite3_step(s) == SQLITE_ROW) {
            int id = sqlite3_column_int(s, 0);
            const char *nm = (const char *)sqlite3_column_text(s, 1);
            const char *dot = nm ? strchr(nm, '.') : NULL;
            if (!dot || dot - nm >= 64 || id < 0 || id > 255)
                continue;
            int k;
            for (k = 0; k < nf; k++)
                if (strlen(fam_name[k]) == (size_t)(dot - nm) &&
                    !strncmp(fam_name[k], nm, (size_t)(dot - nm)))
                    break;
            if (k == nf && nf < 256) {
                memcpy(fam_name[nf], nm, (size_t)(dot - nm));
                fam_name[nf][dot - nm] = 0;
                fam_id[nf++] = id;
            }
            if (k < nf)
                d->family[id] = (int16_t)fam_id[k];
        }
    }
    sqlite3_finalize(s);
    if (prep(d, "SELECT rank, n_workers FROM ranks WHERE job = ?1", &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t rk = u64(s, 0);
        if (rk < d->n_ranks)
            d->n_workers[rk] = (uint32_t)u64(s, 1);
    }
    sqlite3_finalize(s);
    return 0;
oom:
    sqlite3_finalize(s);
    return -ENOMEM;
}

/* Clock model from the epochs' host/device anchor pairs.  The agent reads
 * the two clocks back to back; a millisecond either side is a safe bound. */
static void build_clock(struct diag *d)
{
    if (!d->n_ranks)
        return;
    sqlite3_stmt *s;
    if (mks_clock_model_create(d->n_ranks, NULL, &d->clock))
        return;
    if (prep(d,
             "SELECT rank, t_begin_dev, t_begin_host FROM epochs WHERE job = ?1 AND"
             " t_begin_dev > 0 AND t_begin_host > 0 UNION ALL SELECT rank, t_end_dev,"
             " t_end_host FROM epochs WHERE job = ?1 AND t_end_dev > 0 AND t_end_host > 0",
             &s)) {
        mks_clock_model_destroy(d->clock);
        d->clock = NULL;
        return;
    }
    size_t n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct mks_clock_anchor a = {.rank = (uint32_t)u64(s, 0), .device_ns = u64(s, 1)};
        uint64_t h = u64(s, 2);
        if (a.rank >= d->n_ranks || h < 1000000)
            continue;
        a.host_lo_ns = h - 1000000;
        a.host_hi_ns = h + 1000000;
        if (mks_clock_add_anchors(d->clock, &a, 1) == 0)
            n++;
    }
    sqlite3_finalize(s);
    if (!n || mks_clock_solve(d->clock)) {
        /* No anchors or contradictory ones: device clocks are taken as one
         * time line (true on the CPU backend, where they are CLOCK_MONOTONIC). */
        mks_clock_model_destroy(d->clock);
        d->clock = NULL;
    }
}

/* ---- norms, computed once per key ------------------------------------------ */

struct memo {
    uint64_t key;
    double v[4];
    uint8_t used;
};

enum { K_CLASS = 1, K_WAIT, K_RELEASE, K_EPOCH_CLASS, K_RANK };

static uint64_t memo_key(uint64_t tag, uint32_t rank, uint32_t peer, uint32_t cls)
{
    return tag << 60 | (uint64_t)(rank & 0xffff) << 44 | (uint64_t)(peer & 0xfff) << 32 | cls;
}

/* The slot of key; *fresh tells the caller to fill v.  NULL when full (the
 * caller then computes without caching). */
static struct memo *memo_get(struct diag *d, uint64_t key, bool *fresh)
{
    if (!d->memo_cap)
        return NULL;
    size_t mask = d->memo_cap - 1, i = (size_t)(key * 0x9e3779b97f4a7c15ull) & mask;
    for (size_t n = 0; n < d->memo_cap; n++, i = (i + 1) & mask) {
        struct memo *m = &d->memo[i];
        if (m->used && m->key == key) {
            *fresh = false;
            return m;
        }
        if (!m->used) {
            m->used = 1, m->key = key;
            *fresh = true;
            return m;
        }
    }
    return NULL;
}

/* The memo of a norm per (rank, peer, class, transfer place): class and
 * place share the key's low 32 bits, so a class id above 255 is not cached. */
static struct memo *memo_place(struct diag *d, uint64_t tag, uint32_t rank, uint32_t peer,
                               uint32_t cls, uint32_t op, bool *fresh)
{
    *fresh = true;
    return cls < 256 ? memo_get(d, memo_key(tag, rank, peer, cls | op << 8), fresh) : NULL;
}

/* ---- statistics helpers ------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (reorders v); 0 for n == 0. */
static double median(double *v, size_t n)
{
    if (!n)
        return 0;
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double step_dur(const struct srow *r)
{
    return (double)(r->t_end - r->t_begin);
}

/* Median over the rank's steps of f(row). */
static double f_qwi(const struct srow *r);

static double rank_median(struct diag *d, uint32_t rank, double (*f)(const struct srow *),
                          double *buf)
{
    bool fresh = true;
    struct memo *mm = memo_get(d, memo_key(K_RANK, rank, f == f_qwi, 0), &fresh);
    if (!fresh)
        return mm->v[0];
    size_t n = 0;
    for (size_t i = 0; i < d->ns; i++)
        if (d->s[i].rank == rank)
            buf[n++] = f(&d->s[i]);
    double v = median(buf, n);
    if (mm)
        mm->v[0] = v;
    return v;
}

static double f_qwi(const struct srow *r) { return (double)r->qwi; }

static size_t rank_steps(const struct diag *d, uint32_t rank)
{
    size_t n = 0;
    for (size_t i = 0; i < d->ns; i++)
        n += d->s[i].rank == rank;
    return n;
}
static double f_idle(const struct srow *r) { return r->idle; }

static const char *cause_name[] = {"remote_stall", "local_imbalance", "slow_task",
                                   "notify_delay", "slow_transfer"};
enum { C_REMOTE, C_IMBALANCE, C_SLOW_TASK, C_NOTIFY, C_TRANSFER, C_N };

struct verdict {
    double score[C_N];
    int64_t cls[C_N];       /* task class behind each score, -1 none */
    const struct wrow *wait; /* the remote wait behind C_REMOTE: the longest of its peer */
    double wait_ex;          /* that wait's own excess (the score sums the peer's) */
    const struct rrow *rel;  /* the release behind C_NOTIFY / C_TRANSFER */
    double detail[C_N];     /* the norm the score is measured against */
};

/* When a release was due: the later of the data's arrival and the end of
 * the task that produced it.  What comes after is notification delay. */
static uint64_t release_base(const struct rrow *r)
{
    return r->t_ce > r->t_end ? r->t_ce : r->t_end;
}

/* A local release record (docs/wire.md, Release): comm-ids' kind bits
 * 63..62 are 0, bit 61 set; its step and class are the row's. */
static bool local_release(uint64_t gen)
{
    return (gen >> 61) == 1u;
}

/* Where a transfer sits in its step's graph: channel and op of a graph id,
 * the same for that transfer in every step and between any two ranks; 0 for
 * ids that carry no place (NCCL's, local releases). */
static uint32_t op_key(uint64_t gen)
{
    struct mks_commid_fields f;
    uint32_t k = mks_commid_kind(gen);
    if (local_release(gen) || (k != MKS_COMMID_STEP && k != MKS_COMMID_REQ) ||
        mks_commid_decode(gen, &f))
        return 0;
    return 1 + (f.channel << 12 | f.op);
}

/* One wait or release of the step being scored, with its excess over the
 * norm of the same transfer in other steps (NAN: not measured). */
struct ex_ent {
    size_t idx;
    uint32_t peer, op;
    double a, b, norm_a, norm_b;
};

static struct ex_ent *ex_next(struct diag *d, size_t n)
{
    if (n == d->ex_cap) {
        size_t cap = d->ex_cap ? 2 * d->ex_cap : 64;
        struct ex_ent *p = realloc(d->ex, cap * sizeof(*p));
        if (!p)
            return NULL;
        d->ex = p, d->ex_cap = cap;
    }
    return &d->ex[n];
}

/* Whether entry i carries the largest value (field a or b) of its group:
 * entries of one peer (or any peer, peer_too false) and one transfer place
 * run side by side, so only the largest counts; other places follow one
 * another and add up.  Entries with no place are their own group. */
static bool ex_leads(const struct ex_ent *e, size_t n, size_t i, bool use_b, bool peer_too)
{
    double x = use_b ? e[i].b : e[i].a;
    if (isnan(x))
        return false;
    if (!e[i].op)
        return true;
    for (size_t j = 0; j < n; j++) {
        if (j == i || e[j].op != e[i].op || (peer_too && e[j].peer != e[i].peer))
            continue;
        double y = use_b ? e[j].b : e[j].a;
        if (!isnan(y) && (y > x || (y == x && j < i)))
            return false;
    }
    return true;
}

/* The releases of the step on this rank: all of them, or those toward the
 * consumer whose wait (gen) led here.  Notification delay and slow transfer
 * each score the sum over the step's transfers, one after another (each
 * all-reduce of each layer), of the latest one's excess over the norm of the
 * same transfer in other steps; a late local release adds its own.  The
 * release with the largest single excess is the one named. */
static void score_releases(struct diag *d, uint32_t rank, uint32_t step, uint64_t gen,
                           struct verdict *v, double *buf)
{
    const bool graph = gen && op_key(gen);
    const uint32_t consumer = graph ? mks_commid_dst_rank(gen) : UINT32_MAX;
    size_t n = 0;
    for (size_t i = 0; i < d->nr; i++) {
        const struct rrow *r = &d->r[i];
        if (r->rank != rank)
            continue;
        if (local_release(r->gen) || !gen || graph) {
            if (r->step != step ||
                (!local_release(r->gen) && consumer != UINT32_MAX && r->consumer != consumer))
                continue;
        } else if (r->gen != gen) {
            continue;
        }
        const uint32_t op = op_key(r->gen);
        /* Norms over the same (consumer, class, place) releases of other steps. */
        bool fresh = true;
        struct memo *mm = memo_place(d, K_RELEASE, rank, r->consumer, r->cls, op, &fresh);
        double nx_med, nn_med;
        if (fresh) {
            size_t nn = 0, nx = 0;
            double *bn = buf, *bx = buf + d->nr;
            for (size_t k = 0; k < d->nr; k++) {
                const struct rrow *o = &d->r[k];
                if (o->rank != rank || o->consumer != r->consumer || o->cls != r->cls ||
                    op_key(o->gen) != op)
                    continue;
                if (o->t_cb && o->t_ce >= o->t_cb)
                    bx[nx++] = (double)(o->t_ce - o->t_cb);
                uint64_t base = release_base(o);
                if (base && o->t_rel >= base) {
                    double g = (double)(o->t_rel - base);
                    if (o->t_end && o->t_cb && o->t_cb >= o->t_end)
                        g += (double)(o->t_cb - o->t_end); /* waiting for the transfer to start */
                    bn[nn++] = g;
                }
            }
            nx_med = median(bx, nx), nn_med = median(bn, nn);
            if (mm)
                mm->v[0] = nx_med, mm->v[1] = nn_med;
        } else {
            nx_med = mm->v[0], nn_med = mm->v[1];
        }
        struct ex_ent *e = ex_next(d, n);
        if (!e)
            break; /* out of memory: what was gathered still counts */
        *e = (struct ex_ent){.idx = i,
                             .peer = r->consumer,
                             .op = op,
                             .a = NAN,
                             .b = NAN,
                             .norm_a = nx_med,
                             .norm_b = nn_med};
        if (r->t_cb && r->t_ce >= r->t_cb)
            e->a = (double)(r->t_ce - r->t_cb) - nx_med;
        uint64_t base = release_base(r);
        if (base && r->t_rel >= base) {
            double g = (double)(r->t_rel - base);
            if (r->t_end && r->t_cb && r->t_cb >= r->t_end)
                g += (double)(r->t_cb - r->t_end);
            e->b = g - nn_med;
        }
        n++;
    }
    double xfer = 0, notify = 0;
    const struct ex_ent *bx = NULL, *bn = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct ex_ent *e = &d->ex[i];
        if (ex_leads(d->ex, n, i, false, false))
            xfer += e->a;
        if (ex_leads(d->ex, n, i, true, false))
            notify += e->b;
        if (!isnan(e->a) && (!bx || e->a > bx->a))
            bx = e;
        if (!isnan(e->b) && (!bn || e->b > bn->b))
            bn = e;
    }
    if (bx && xfer > v->score[C_TRANSFER]) {
        v->score[C_TRANSFER] = xfer, v->cls[C_TRANSFER] = d->r[bx->idx].cls;
        v->detail[C_TRANSFER] = bx->norm_a, v->rel = &d->r[bx->idx];
    }
    if (bn && notify > v->score[C_NOTIFY]) {
        v->score[C_NOTIFY] = notify, v->cls[C_NOTIFY] = d->r[bn->idx].cls;
        v->detail[C_NOTIFY] = bn->norm_b;
        if (!v->rel || v->score[C_NOTIFY] >= v->score[C_TRANSFER])
            v->rel = &d->r[bn->idx];
    }
}

/* Task classes from the statistics of the epochs that carried the step,
 * when the agent could not keep steps apart.  The norm of a class is the
 * median of its mean over every rank's epochs (ranks run the same program;
 * a rank's own few epochs may all hold the fault), and an epoch's excess is
 * spread evenly over the steps it carried. */
static void score_epoch_classes(struct diag *d, uint32_t rank, uint32_t step, double nw,
                                struct verdict *v, double *queue_ex, double *best_q, double *buf)
{
    for (size_t k = 0; k < d->nes; k++) {
        const struct estep *es = &d->es[k];
        if (es->rank != rank || es->step != step)
            continue;
        double steps_in = 0;
        for (size_t j = 0; j < d->nes; j++)
            if (d->es[j].epoch_id == es->epoch_id)
                steps_in++;
        if (steps_in < 1)
            steps_in = 1;
        for (size_t i = 0; i < d->nec; i++) {
            const struct erow *c = &d->ec[i];
            if (c->epoch_id != es->epoch_id || c->count <= 0)
                continue;
            bool fresh = true;
            struct memo *mm = memo_get(d, memo_key(K_EPOCH_CLASS, 0, 0, c->cls), &fresh);
            double norm_mean, norm_q;
            if (fresh) {
                size_t n = 0, q = 0;
                double *bm = buf, *bq = buf + d->nec;
                for (size_t j = 0; j < d->nec; j++) {
                    const struct erow *o = &d->ec[j];
                    if (o->cls != c->cls || o->count <= 0)
                        continue;
                    bm[n++] = o->run_sum / o->count;
                    if (o->queue_count > 0)
                        bq[q++] = o->queue_sum / o->queue_count;
                }
                norm_mean = median(bm, n), norm_q = median(bq, q);
                if (mm)
                    mm->v[0] = norm_mean, mm->v[1] = norm_q;
            } else {
                norm_mean = mm->v[0], norm_q = mm->v[1];
            }
            double per_step = c->count / steps_in;
            double ex = per_step * (c->run_sum / c->count - norm_mean) / nw;
            if (ex > v->score[C_SLOW_TASK]) {
                v->score[C_SLOW_TASK] = ex, v->cls[C_SLOW_TASK] = c->cls;
                v->detail[C_SLOW_TASK] = norm_mean;
            }
            if (c->queue_count > 0) {
                double qe = per_step * (c->queue_sum / c->queue_count - norm_q) / nw;
                if (qe > 0)
                    *queue_ex += qe;
                if (qe > *best_q)
                    *best_q = qe, v->cls[C_IMBALANCE] = c->cls;
            }
        }
    }
}

static void score_rank(struct diag *d, uint32_t rank, uint32_t step, uint64_t gen,
                       const bool *visited, struct verdict *v, double *buf)
{
    memset(v, 0, sizeof(*v));
    for (int i = 0; i < C_N; i++)
        v->cls[i] = -1;
    double nw = d->n_workers && rank < d->n_ranks && d->n_workers[rank] ? d->n_workers[rank] : 1;
    /* Remote waits.  A step waits on a peer once for each transfer of its
     * graph (each all-reduce of each layer), one after another, so what a
     * peer costs the step is the sum of those waits' excess, each over the
     * norm of the same (peer, class, place) wait in other steps.  The chain
     * follows the peer of the largest sum; its longest wait names the
     * generation.  Waits happen inside a task of the waiting class, so their
     * excess is kept per class, to be taken out of that class's run time
     * below. */
    double wait_sum[256] = {0}, wait_max[256] = {0};
    size_t nex = 0;
    for (size_t i = 0; i < d->nw; i++) {
        const struct wrow *w = &d->w[i];
        if (w->rank != rank || w->step != step)
            continue;
        const uint32_t op = op_key(w->gen);
        bool fresh = true;
        struct memo *mm = memo_place(d, K_WAIT, rank, w->peer, w->cls, op, &fresh);
        double norm;
        if (fresh) {
            size_t n = 0;
            for (size_t k = 0; k < d->nw; k++) {
                const struct wrow *o = &d->w[k];
                if (o->rank == rank && o->peer == w->peer && o->cls == w->cls &&
                    op_key(o->gen) == op)
                    buf[n++] = (double)(o->t_end - o->t_begin);
            }
            norm = median(buf, n);
            if (mm)
                mm->v[0] = norm;
        } else {
            norm = mm->v[0];
        }
        double ex = (double)(w->t_end - w->t_begin) - norm;
        if (ex > 0 && w->cls < 256) {
            wait_sum[w->cls] += ex;
            if (ex > wait_max[w->cls])
                wait_max[w->cls] = ex;
        }
        /* A wait on a rank already in the chain cannot explain it (in an
         * all-reduce every rank waits on every other). */
        if (visited && w->peer < 4096 && visited[w->peer])
            continue;
        struct ex_ent *e = ex_next(d, nex);
        if (!e) /* out of memory: what was gathered still counts */
            continue;
        *e =
            (struct ex_ent){.idx = i, .peer = w->peer, .op = op, .a = ex, .b = NAN, .norm_a = norm};
        nex++;
    }
    for (size_t i = 0; i < nex; i++) {
        const struct ex_ent *e = &d->ex[i];
        bool seen = false; /* each peer once, at its first entry */
        for (size_t j = 0; j < i && !seen; j++)
            seen = d->ex[j].peer == e->peer;
        if (seen)
            continue;
        double sum = 0;
        const struct ex_ent *top = e;
        for (size_t j = i; j < nex; j++) {
            const struct ex_ent *f = &d->ex[j];
            if (f->peer != e->peer)
                continue;
            if (ex_leads(d->ex, nex, j, false, true))
                sum += f->a;
            if (f->a > top->a)
                top = f;
        }
        if (sum > v->score[C_REMOTE]) {
            v->score[C_REMOTE] = sum, v->wait = &d->w[top->idx];
            v->cls[C_REMOTE] = d->w[top->idx].cls, v->detail[C_REMOTE] = top->norm_a;
            v->wait_ex = top->a;
        }
    }
    /* Task classes: run time (slow task) and queueing (imbalance). */
    double queue_ex = 0, best_q = 0, queue_max_ex = 0;
    bool have_step_rows = false;
    for (size_t i = 0; i < d->nc; i++) {
        const struct crow *c = &d->c[i];
        if (c->rank != rank || c->step != step || c->count <= 0)
            continue;
        have_step_rows = true;
        bool fresh = true;
        struct memo *mm = memo_get(d, memo_key(K_CLASS, rank, 0, c->cls), &fresh);
        double norm_mean, norm_max, norm_q, norm_qmax;
        if (fresh) {
            size_t n = 0, m = 0, q = 0;
            double *bmean = buf, *bmax = buf + d->nc, *bq = buf + 2 * d->nc;
            double *bqmax = buf + 3 * d->nc;
            for (size_t k = 0; k < d->nc; k++) {
                const struct crow *o = &d->c[k];
                if (o->rank != rank || o->cls != c->cls || o->count <= 0)
                    continue;
                bmean[n++] = o->run_sum / o->count;
                bmax[m++] = o->run_max;
                if (o->queue_count > 0)
                    bqmax[q] = o->queue_max, bq[q++] = o->queue_sum / o->queue_count;
            }
            /* A class seen in fewer than half of the rank's steps (an
             * expert chosen now and then, or steps the agent could not keep
             * apart under load): its own median may be all faulted steps.
             * Ranks run the same program: take the class's median over
             * every rank, or its family's when it has one. */
            int fam = c->cls < 256 ? d->family[c->cls] : -1;
            if (2 * n < rank_steps(d, rank)) {
                n = m = q = 0;
                for (size_t k = 0; k < d->nc; k++) {
                    const struct crow *o = &d->c[k];
                    if (o->count <= 0 || o->step == 0)
                        continue;
                    if (fam >= 0 ? o->cls >= 256 || d->family[o->cls] != fam : o->cls != c->cls)
                        continue;
                    bmean[n++] = o->run_sum / o->count;
                    bmax[m++] = o->run_max;
                    if (o->queue_count > 0)
                        bqmax[q] = o->queue_max, bq[q++] = o->queue_sum / o->queue_count;
                }
            }
            norm_mean = median(bmean, n), norm_max = median(bmax, m), norm_q = median(bq, q);
            norm_qmax = median(bqmax, q);
            if (mm)
                mm->v[0] = norm_mean, mm->v[1] = norm_max, mm->v[2] = norm_q, mm->v[3] = norm_qmax;
        } else {
            norm_mean = mm->v[0], norm_max = mm->v[1], norm_q = mm->v[2], norm_qmax = mm->v[3];
        }
        double ws = c->cls < 256 ? wait_sum[c->cls] : 0, wm = c->cls < 256 ? wait_max[c->cls] : 0;
        double ex_total = (c->run_sum - c->count * norm_mean - ws) / nw;
        double ex_max = c->run_max > 0 ? c->run_max - norm_max - wm : 0;
        double ex = ex_total > ex_max ? ex_total : ex_max;
        if (ex > v->score[C_SLOW_TASK]) {
            v->score[C_SLOW_TASK] = ex, v->cls[C_SLOW_TASK] = c->cls;
            v->detail[C_SLOW_TASK] = norm_mean;
        }
        if (c->queue_count > 0) {
            double qe = (c->queue_sum - c->queue_count * norm_q) / nw;
            double qm = c->queue_max > 0 ? c->queue_max - norm_qmax : 0;
            if (qe > 0)
                queue_ex += qe;
            if (qm > queue_max_ex)
                queue_max_ex = qm;
            if ((qe > qm ? qe : qm) > best_q)
                best_q = qe > qm ? qe : qm, v->cls[C_IMBALANCE] = c->cls;
        }
    }
    if (!have_step_rows)
        score_epoch_classes(d, rank, step, nw, v, &queue_ex, &best_q, buf);
    /* Imbalance needs both halves: tasks waiting in queues and workers with
     * nothing to do.  The agent's queued_while_idle measures exactly that;
     * without it, queueing excess is capped by idle excess. */
    struct srow *sr = srow_at(d, rank, step);
    bool have_qwi = false;
    for (size_t i = 0; i < d->ns; i++)
        if (d->s[i].rank == rank && d->s[i].qwi)
            have_qwi = true;
    if (sr && have_qwi) {
        v->score[C_IMBALANCE] = (double)sr->qwi - rank_median(d, rank, f_qwi, buf);
    } else if (sr && sr->has_workers) {
        double idle_ex = (sr->idle - rank_median(d, rank, f_idle, buf)) / nw;
        v->score[C_IMBALANCE] = queue_ex < idle_ex ? queue_ex : idle_ex;
    } else {
        /* Queueing alone: a task held in a queue (passed over, or behind
         * one worker's backlog) while the step waits for it; one such task
         * among many workers costs the step its own wait. */
        v->score[C_IMBALANCE] = queue_ex > queue_max_ex ? queue_ex : queue_max_ex;
    }
    if (v->score[C_IMBALANCE] < 0)
        v->score[C_IMBALANCE] = 0;
    score_releases(d, rank, step, gen, v, buf);
}

/* ---- chains ----------------------------------------------------------------------------- */

struct link {
    uint32_t rank;
    int cause; /* C_*, or -1 undecided */
    double lateness;
    int64_t cls;
    uint64_t gen;
    uint32_t peer;
    double cov_ratio; /* -1 unknown */
    double norm;      /* the rank's usual value of what was late (0 unknown) */
};

struct chain {
    struct link l[MAX_CHAIN];
    int n;
    char reason[256];
    double elig, ran, thr, lost;
};

static double aligned_lateness(struct diag *d, const struct wrow *w, double fallback)
{
    /* Releases of that generation on its producer, joined by comm-ids. */
    struct mks_release_rec rel[8];
    size_t n = 0;
    for (size_t i = 0; i < d->nr && n < 8; i++)
        if (d->r[i].gen == w->gen && d->r[i].rank != w->rank && d->r[i].t_rel)
            rel[n++] = (struct mks_release_rec){.rank = d->r[i].rank, .task_class = d->r[i].cls,
                                                .comm_gen = w->gen, .t_release = d->r[i].t_rel};
    if (!n)
        return fallback;
    struct mks_wait_rec wr = {.rank = w->rank, .task_class = w->cls, .comm_gen = w->gen,
                              .t_begin = w->t_begin, .t_end = w->t_end};
    struct mks_waitedge *e = NULL;
    size_t ne = 0;
    double late = fallback;
    if (mks_waitedge_join(&wr, 1, rel, n, d->clock, &e, &ne, NULL) == 0 && ne > 0 &&
        e[0].lateness.t_ns > 0)
        late = (double)e[0].lateness.t_ns;
    free(e);
    return late;
}

static void build_chain(struct diag *d, uint32_t rank, uint32_t step, double excess,
                        struct chain *ch, double *buf)
{
    memset(ch, 0, sizeof(*ch));
    uint64_t gen = 0;
    double need = excess;
    bool visited[4096] = {false};
    while (ch->n < MAX_CHAIN) {
        struct link *L = &ch->l[ch->n++];
        L->rank = rank, L->cls = -1, L->cause = -1, L->cov_ratio = -1;
        struct srow *sr = srow_at(d, rank, step);
        if (!sr) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "rank %u sent no step %u in its summaries: is its agent running?", rank, step);
            break;
        }
        if (sr->elig > 0) {
            L->cov_ratio = sr->ran / sr->elig;
            ch->elig += sr->elig, ch->ran += sr->ran, ch->thr += sr->thr, ch->lost += sr->lost;
        }
        if (rank < 4096)
            visited[rank] = true;
        struct verdict v;
        score_rank(d, rank, step, gen, visited, &v, buf);
        int best = 0;
        for (int c = 1; c < C_N; c++)
            if (v.score[c] > v.score[best])
                best = c;
        double second = 0;
        for (int c = 0; c < C_N; c++)
            if (c != best && v.score[c] > second)
                second = v.score[c];
        double floor_ns = (double)d->o.min_excess_ns / 4;
        double thresh = 0.2 * need > floor_ns ? 0.2 * need : floor_ns;
        /* Slow tasks and queueing are scored per class by the longest one
         * (or the excess spread over the workers): a lower bound when the
         * class is late in several operators of the step (each layer's), so
         * a class that stands well above every other cause is named with a
         * smaller share of the delay. */
        if (second * DIAG_DOMINANT <= v.score[best] && DIAG_DOMINANT_SHARE * need < thresh)
            thresh = DIAG_DOMINANT_SHARE * need > floor_ns ? DIAG_DOMINANT_SHARE * need : floor_ns;
        if (L->cov_ratio >= 0 && L->cov_ratio < d->o.min_coverage) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "coverage on rank %u in step %u is %.0f%% (below %.0f%%): lower the"
                     " sampling or raise the budget",
                     rank, step, 100 * L->cov_ratio, 100 * d->o.min_coverage);
            break;
        }
        if (v.score[best] < thresh) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "rank %u: no observed cause explains %.0f us of delay (largest: %s, %.0f us)",
                     rank, need / 1e3, cause_name[best], v.score[best] / 1e3);
            break;
        }
        /* A communication task that runs long is a slow transfer. */
        if (best == C_SLOW_TASK && v.cls[best] >= 0 && v.cls[best] < 256 &&
            d->comm_class[v.cls[best]])
            best = C_TRANSFER, v.score[C_TRANSFER] = v.score[C_SLOW_TASK],
            v.cls[C_TRANSFER] = v.cls[C_SLOW_TASK], v.detail[C_TRANSFER] = v.detail[C_SLOW_TASK];
        L->cause = best;
        L->cls = v.cls[best];
        L->lateness = v.score[best];
        L->norm = v.detail[best];
        if (best != C_REMOTE) {
            if (v.rel) {
                L->gen = local_release(v.rel->gen) ? 0 : v.rel->gen;
                L->peer = v.rel->consumer;
            }
            break;
        }
        const struct wrow *w = v.wait;
        L->gen = w->gen;
        L->peer = w->peer;
        /* the longest wait's lateness on aligned clocks, plus the excess of
         * the peer's other waits in the step */
        L->lateness = aligned_lateness(d, w, v.wait_ex) + (v.score[best] - v.wait_ex);
        if (w->peer >= 4096 || visited[w->peer]) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "wait cycle: rank %u waits on rank %u, already in the chain", rank, w->peer);
            L->cause = -1;
            break;
        }
        gen = w->gen;
        need = v.score[best];
        rank = w->peer;
    }
}

/* ---- output ------------------------------------------------------------------------------- */

static json_t *class_json(struct diag *d, uint32_t rank, int64_t cls)
{
    if (cls < 0)
        return json_null();
    char name[128];
    mks_store_class_name(d->st, d->job, rank, (uint32_t)cls, name, sizeof(name));
    return json_string(name);
}

static json_t *gen_json(uint64_t gen)
{
    return gen ? json_integer((json_int_t)gen) : json_null();
}

static json_t *comm_text(uint64_t gen)
{
    if (!gen)
        return json_null();
    char buf[MKS_COMMID_TEXT_MAX];
    if (mks_commid_format(gen, buf, sizeof(buf)) < 0)
        snprintf(buf, sizeof(buf), "comm_gen 0x%llx", (unsigned long long)gen);
    return json_string(buf);
}

static const char *chain_cause(const struct chain *ch)
{
    const struct link *root = &ch->l[ch->n - 1];
    if (root->cause < 0)
        return "undecided";
    return cause_name[root->cause];
}

/* Steps belong to one group when their chains end at the same root: same
 * cause, rank and task class.  The paths that led there (which rank saw the
 * stall first) vary from step to step and are shown for the worst step. */
static bool same_root(const struct chain *a, const struct chain *b)
{
    const struct link *x = &a->l[a->n - 1], *y = &b->l[b->n - 1];
    return x->rank == y->rank && x->cause == y->cause && x->cls == y->cls;
}

static json_t *chain_json(struct diag *d, const struct chain *ch)
{
    json_t *chain = json_array();
    for (int i = 0; i < ch->n; i++) {
        const struct link *L = &ch->l[i];
        json_t *o = json_pack("{s:I, s:s, s:I}", "rank", (json_int_t)L->rank, "cause",
                              L->cause < 0 ? "undecided" : cause_name[L->cause], "lateness_ns",
                              (json_int_t)(L->lateness > 0 ? L->lateness : 0));
        json_object_set_new(o, "task_class", class_json(d, L->rank, L->cls));
        if (L->norm > 0)
            json_object_set_new(o, "norm_ns", json_integer((json_int_t)L->norm));
        if (L->cause == C_REMOTE) {
            json_object_set_new(o, "peer", json_integer(L->peer));
            json_object_set_new(o, "comm_gen", gen_json(L->gen));
            json_object_set_new(o, "comm", comm_text(L->gen));
        }
        json_object_set_new(o, "coverage",
                            L->cov_ratio >= 0 ? json_real(L->cov_ratio) : json_null());
        json_array_append_new(chain, o);
    }
    return chain;
}

/* The other ranks of step `step` that a remote stall ties to the same root:
 * in an all-reduce every rank waits on the slow one, and the chain shown
 * starts at the slowest rank only (often the root itself). */
static json_t *stalled_json(struct diag *d, const struct chain *ch, uint32_t step, double med,
                            double *buf, struct chain *first)
{
    first->n = 0;
    json_t *arr = json_array();
    const struct link *root = &ch->l[ch->n - 1];
    struct chain *o = malloc(sizeof(*o));
    if (!o)
        return arr;
    for (uint32_t r = 0; r < d->n_ranks; r++) {
        if (r == root->rank || r == ch->l[0].rank)
            continue;
        struct srow *sr = srow_at(d, r, step);
        if (!sr)
            continue;
        double ex = step_dur(sr) - med;
        build_chain(d, r, step, ex > 0 ? ex : step_dur(sr), o, buf);
        const struct link *ro = &o->l[o->n - 1];
        if (o->n < 2 || o->l[0].cause != C_REMOTE || ro->rank != root->rank ||
            ro->cause != root->cause)
            continue;
        json_array_append_new(arr, json_pack("{s:I, s:o}", "rank", (json_int_t)r, "chain",
                                             chain_json(d, o)));
        if (!first->n)
            *first = *o;
    }
    free(o);
    return arr;
}

static json_t *group_json(struct diag *d, const struct chain *ch, uint32_t rank, uint32_t step,
                          json_t *steps, double worst, double med, double *buf)
{
    json_t *stalled = NULL;
    struct chain *first = NULL;
    if (ch->l[ch->n - 1].cause >= 0 && (first = malloc(sizeof(*first)))) {
        stalled = stalled_json(d, ch, step, med, buf, first);
        /* The slowest rank was the root itself: show the story from a
         * rank that waited on it (remote stall, then the root's cause). */
        if (ch->n == 1 && first->n > 1) {
            ch = first;
            rank = first->l[0].rank;
        }
    }
    const struct link *root = &ch->l[ch->n - 1];
    json_t *chain = chain_json(d, ch);
    /* The generation that leads to the root: the last remote link's. */
    uint64_t gen = root->gen;
    if (ch->n > 1 && ch->l[ch->n - 2].cause == C_REMOTE)
        gen = ch->l[ch->n - 2].gen;
    json_t *rootj = json_pack("{s:I}", "rank", (json_int_t)root->rank);
    json_object_set_new(rootj, "task_class", class_json(d, root->rank, root->cls));
    json_object_set_new(rootj, "comm_gen", gen_json(gen));
    json_object_set_new(rootj, "comm", comm_text(gen));
    json_t *cov = json_pack("{s:o, s:I, s:I, s:I, s:I}", "ratio",
                            ch->elig > 0 ? json_real(ch->ran / ch->elig) : json_null(), "eligible",
                            (json_int_t)ch->elig, "ran", (json_int_t)ch->ran, "throttled",
                            (json_int_t)ch->thr, "lost", (json_int_t)ch->lost);
    json_t *g = json_pack("{s:s, s:o, s:o, s:o, s:I, s:o, s:I, s:I, s:I}", "cause",
                          chain_cause(ch), "root", rootj, "chain", chain, "coverage", cov, "rank",
                          (json_int_t)rank, "steps", steps, "step_ns", (json_int_t)worst,
                          "median_step_ns", (json_int_t)med, "excess_ns",
                          (json_int_t)(worst - med));
    json_object_set_new(g, "reason", *ch->reason ? json_string(ch->reason) : json_null());
    if (stalled)
        json_object_set_new(g, "stalled", stalled);
    free(first);
    return g;
}

int mks_diagnose(struct mks_store *st, const char *job, const struct mks_diag_opts *opts,
                 json_t **out, char *err, size_t errlen)
{
    struct diag d = {.st = st, .job = job};
    d.o.slow_frac = 0.2;
    d.o.min_excess_ns = 20000;
    d.o.min_coverage = 0.5;
    d.o.only_step = -1;
    if (opts) {
        if (opts->slow_frac > 0)
            d.o.slow_frac = opts->slow_frac;
        if (opts->min_excess_ns)
            d.o.min_excess_ns = opts->min_excess_ns;
        if (opts->min_coverage > 0)
            d.o.min_coverage = opts->min_coverage;
        if (opts->sz >= offsetof(struct mks_diag_opts, min_steps) + sizeof(opts->min_steps))
            d.o.min_steps = opts->min_steps;
        d.o.only_step = opts->only_step;
    }
    int rc = load(&d);
    double *buf = NULL;
    struct chain *chains = NULL;
    uint32_t *steps = NULL;
    json_t *groups = json_array();
    if (rc) {
        mks_serve_fail(err, errlen, rc, "diagnose: cannot read the store: %s",
                       sqlite3_errmsg(mks_store_db(st)));
        goto out;
    }
    build_clock(&d);
    d.memo_cap = 64;
    while (d.memo_cap < 2 * (d.nc + d.nw + d.nr + d.nec + d.ns) + 64)
        d.memo_cap *= 2;
    d.memo = calloc(d.memo_cap, sizeof(*d.memo));
    if (!d.memo)
        d.memo_cap = 0; /* no cache: slower, same answers */
    size_t bufn = 4 * (d.nc + d.nw + d.nr + d.ns + d.nec) + 16;
    buf = malloc(bufn * sizeof(double));
    /* Distinct steps and their times (slowest rank). */
    steps = malloc((d.ns + 1) * sizeof(uint32_t));
    double *stime = malloc((d.ns + 1) * sizeof(double));
    uint32_t *srank = malloc((d.ns + 1) * sizeof(uint32_t));
    chains = calloc(d.ns + 1, sizeof(*chains));
    if (!buf || !steps || !stime || !srank || !chains) {
        free(stime);
        free(srank);
        rc = mks_serve_fail(err, errlen, -ENOMEM, "diagnose: out of memory");
        goto out;
    }
    size_t n_steps = 0;
    for (size_t i = 0; i < d.ns; i++) {
        size_t k;
        for (k = 0; k < n_steps; k++)
            if (steps[k] == d.s[i].step)
                break;
        if (k == n_steps) {
            steps[n_steps] = d.s[i].step, stime[n_steps] = -1, n_steps++;
        }
        double dur = step_dur(&d.s[i]);
        if (dur > stime[k])
            stime[k] = dur, srank[k] = d.s[i].rank;
    }
    for (size_t k = 0; k < n_steps; k++)
        buf[k] = stime[k];
    double med = median(buf, n_steps);
    size_t n_slow = 0;
    bool *used = calloc(n_steps + 1, sizeof(bool));
    bool *slow = calloc(n_steps + 1, sizeof(bool));
    size_t *order = malloc((n_steps + 1) * sizeof(size_t));
    if (!used || !slow || !order) {
        free(used), free(slow), free(stime), free(srank), free(order);
        rc = mks_serve_fail(err, errlen, -ENOMEM, "diagnose: out of memory");
        goto out;
    }
    /* Steps in step order (insertion sort: they come nearly sorted). */
    for (size_t k = 0; k < n_steps; k++) {
        size_t j = k;
        while (j > 0 && steps[order[j - 1]] > steps[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    for (size_t p = 0; p < n_steps; p++) {
        size_t k = order[p];
        if (d.o.only_step >= 0 && steps[k] != (uint32_t)d.o.only_step)
            continue;
        /* A step is judged against its neighbours on each side (up to
         * DIAG_WINDOW steps before and after, itself excluded): the
         * machine's load changes during a run, and a run-wide median would
         * then hide a fault or invent one; it must stand out from both
         * sides, so a change of load is not a slow step.  Noise floor: four
         * robust standard deviations (1.4826 MAD) of the side.  A side with
         * fewer than 3 steps (the run's ends) is not asked. */
        double ex = -1;
        bool is_slow = true, asked = false;
        for (int side = 0; side < 2; side++) {
            size_t lo = side ? p + 1 : (p > DIAG_WINDOW ? p - DIAG_WINDOW : 0);
            size_t hi = side ? (p + 1 + DIAG_WINDOW < n_steps ? p + 1 + DIAG_WINDOW : n_steps) : p;
            if (hi < lo + 3)
                continue;
            double wb[DIAG_WINDOW];
            size_t nwb = 0;
            for (size_t q = lo; q < hi; q++)
                wb[nwb++] = stime[order[q]];
            double smed = median(wb, nwb);
            for (size_t q = 0; q < nwb; q++)
                wb[q] = fabs(wb[q] - smed);
            double noise = 4 * 1.4826 * median(wb, nwb);
            double sex = stime[k] - smed;
            asked = true;
            if (stime[k] <= smed * (1 + d.o.slow_frac) || sex < (double)d.o.min_excess_ns ||
                sex <= noise)
                is_slow = false;
            if (ex < 0 || sex < ex)
                ex = sex;
        }
        if (!asked) /* a run of a few steps: the run's median */
            ex = stime[k] - med, is_slow = stime[k] > med * (1 + d.o.slow_frac) &&
                                          ex >= (double)d.o.min_excess_ns;
        if (d.o.only_step < 0 && !is_slow)
            continue;
        slow[k] = true;
        n_slow++;
        build_chain(&d, srank[k], steps[k], ex > 0 ? ex : stime[k], &chains[k], buf);
    }
    /* Group slow steps with the same root; the group shows the chain of
     * its worst step. */
    for (size_t k = 0; k < n_steps; k++) {
        if (!slow[k] || used[k])
            continue;
        json_t *sl = json_array();
        size_t worst = k;
        for (size_t j = k; j < n_steps; j++) {
            if (!slow[j] || used[j] || !same_root(&chains[k], &chains[j]))
                continue;
            used[j] = true;
            json_array_append_new(sl, json_integer(steps[j]));
            if (stime[j] > stime[worst])
                worst = j;
        }
        json_array_append_new(groups, group_json(&d, &chains[worst], srank[worst], steps[worst],
                                                 sl, stime[worst], med, buf));
    }
    /* Groups of fewer slow steps than asked for are left out, counted: a
     * loaded machine stalls single steps now and then. */
    size_t hidden = 0;
    for (size_t gi = json_array_size(groups); gi-- > 0;)
        if (json_array_size(json_object_get(json_array_get(groups, gi), "steps")) <
            d.o.min_steps) {
            json_array_remove(groups, gi);
            hidden++;
        }
    /* Decided groups first, larger first: they are what the run is about;
     * undecided ones are often noise of a loaded machine. */
    size_t ng = json_array_size(groups);
    for (size_t a = 1; a < ng; a++)
        for (size_t b = a; b > 0; b--) {
            json_t *x = json_array_get(groups, b - 1), *y = json_array_get(groups, b);
            size_t kx = json_array_size(json_object_get(x, "steps")) +
                        (strcmp(json_string_value(json_object_get(x, "cause")), "undecided")
                             ? 1000000
                             : 0);
            size_t ky = json_array_size(json_object_get(y, "steps")) +
                        (strcmp(json_string_value(json_object_get(y, "cause")), "undecided")
                             ? 1000000
                             : 0);
            if (ky <= kx)
                break;
            json_incref(x);
            json_array_set(groups, b - 1, y);
            json_array_set_new(groups, b, x);
        }
    free(used);
    free(slow);
    free(order);
    free(stime);
    free(srank);
    const char *reason = NULL;
    if (!d.ns)
        reason = "no step times stored yet: are agents running with the standard monitors?";
    else if (!n_slow)
        reason = "no step is slower than the median by the threshold";
    else if (!json_array_size(groups))
        reason = "every group of slow steps is shorter than --min-steps";
    *out = json_pack("{s:s, s:I, s:I, s:I, s:o, s:I, s:o}", "job", job, "median_step_ns",
                     (json_int_t)med, "steps", (json_int_t)n_steps, "slow_steps",
                     (json_int_t)n_slow, "groups", groups, "hidden_groups", (json_int_t)hidden,
                     "reason", reason ? json_string(reason) : json_null());
    groups = NULL;
    rc = 0;
out:
    json_decref(groups);
    free(buf);
    free(chains);
    free(steps);
    free(d.s);
    free(d.c);
    free(d.ec);
    free(d.es);
    free(d.w);
    free(d.r);
    free(d.n_workers);
    free(d.memo);
    free(d.ex);
    mks_clock_model_destroy(d.clock);
    return rc;
}

/* ---- the CLI verbs ------------------------------------------------------------------------ */

int mks_serve_diagnose(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                       json_t **out, char *err, size_t errlen)
{
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1};
    const char *a;
    char *end;
    if ((a = mks_serve_arg(req, "step"))) {
        long long v = strtoll(a, &end, 10);
        if (*end || v < 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "--step wants a step number");
        o.only_step = v;
    }
    if ((a = mks_serve_arg(req, "slow"))) {
        o.slow_frac = strtod(a, &end);
        if (*end || o.slow_frac <= 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--slow wants a fraction over the median, e.g. 0.2");
    }
    if ((a = mks_serve_arg(req, "min-coverage"))) {
        o.min_coverage = strtod(a, &end);
        if (*end || o.min_coverage <= 0 || o.min_coverage > 1)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--min-coverage wants a ratio in (0, 1]");
    }
    if ((a = mks_serve_arg(req, "min-steps"))) {
        unsigned long v = strtoul(a, &end, 10);
        if (*end || !*a || *a == '-' || v < 1 || v > 1000000)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--min-steps wants a number of steps, 1 or more");
        o.min_steps = (uint32_t)v;
    }
    if (mks_diagnose(env->st, job, &o, out, err, errlen))
        return MKS_EXIT_ERROR;
    return 0;
}
