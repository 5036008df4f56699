/*
 * Wait-chain stitching and diagnosis of slow steps and stragglers.
 *
 * 1. Step time.  Per (rank, step) the step lasts from its first task start
 *    to its last task end (rows of `steps`, merged over epochs).  The time of
 *    a step is its slowest rank's; a step is slow when it exceeds the median
 *    of its neighbours on each side (DIAG_WINDOW steps) by slow_frac, by
 *    min_excess_ns and by four robust standard deviations of them.
 * 2. Norms.  A slow step is judged against the same rank's median over its
 *    other steps (the same wait peer and transfer, the same task class, the
 *    same release): faults hit some steps, so medians stay clean.
 * 3. The chain.  Start at the slowest rank of the slow step.  At each rank
 *    score six explanations in nanoseconds of delay they add beyond the
 *    norm (score_prof):
 *      remote_stall     remote waits longer than their norm, summed per
 *                       peer over the step's transfers (follow that peer);
 *      local_imbalance  ready tasks queued while workers idled: queueing
 *                       excess that the run-time excess of the tasks ahead
 *                       of them cannot explain, capped by the workers' idle
 *                       excess (the agent's queued_while_idle when sent);
 *      slow_task        one task class's run time above its norm, less the
 *                       remote waits and transfers inside its tasks;
 *      slow_rank        run-time excess spread over most classes (no class
 *                       holds most of it): the rank itself is slow, as a
 *                       throttled GPU;
 *      notify_delay     release later than the producing task's end (and
 *                       its data's arrival) by more than its norm, remote
 *                       or local (the agent's per (step, class) record);
 *      slow_transfer    the transfer (comm begin -> end) longer than its norm.
 *    The largest is named when it explains a fifth of the delay that led
 *    here (a twentieth when it is twice every other) and the runner-up is
 *    below DIAG_CLOSE of it; else the link is undecided, naming both.
 * 4. Stragglers.  A rank late in every step slows no step against its
 *    neighbours, so the steps are also compared across ranks: per step the
 *    blame of a rank is how long its peers waited on it minus how long it
 *    waited on them.  A run of steps where one rank's blame stays above the
 *    noise (find_segments), or that stays positive in nearly every step
 *    asked about by less (a steady straggler), is a straggler group, named
 *    from its first step;
 *    its cause is scored as in 3, each measure of the rank against the
 *    median of its peers' same measure in the same steps.
 * 5. Coverage.  A link on a rank whose observed share of events is below
 *    min_coverage makes the answer undecided, with the reason.
 * 6. Groups.  Slow steps with the same root (rank, cause, class) no more
 *    than DIAG_GROUP_GAP steps apart form one group; a straggler group takes
 *    in the slow steps of its rank inside it, unless they stand far above
 *    its lateness (SEG_ABSORB_RATIO): then they stay a group of their own
 *    and the straggler's goes after them.  Decided groups first, then the
 *    longer ones.
 * 7. Host CPU contention.  On a CPU backend a worker that waits for a
 *    core looks like a held queue.  Where agents measured the workers'
 *    wait for a CPU (and their runs on one), a slow step whose excess is
 *    mostly that wait beyond what as many runs usually cost is grouped
 *    apart and left undecided, naming the host (cw_excess, contention_json),
 *    and the rank gets no blame in it (build_blame).
 *
 * Speed: rows are loaded once, per epoch through the epoch index, indexed
 * by (rank, step), and every norm is computed once by sorting.  A long run
 * (more than DIAG_DETAIL_MAX steps) loads task, wait and release rows for
 * an even sample of steps and for its slow steps only; straggler runs are
 * then found on the sample and their edges refined on every step there.
 */
#include "diagnose.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock_anchors.h"
#include "mkscope/commid.h"
#include "mkscope/waitedge.h"
#include "serve.h"

#define MAX_CHAIN 16
#define MAX_RANKS 4096
/* Steps either side a step's time is compared with. */
#define DIAG_WINDOW 10
/* A cause at least this many times the next one ... */
#define DIAG_DOMINANT 2.0
/* ... needs to explain only this share of the delay (else DIAG_SHARE). */
#define DIAG_DOMINANT_SHARE 0.05
#define DIAG_SHARE 0.2
/* A runner-up at this share of the best cause or more: too close to tell. */
#define DIAG_CLOSE 0.75
/* Slow steps of one root further apart than this are separate groups: a
 * fault hits steps one after another, a loaded machine here and there. */
#define DIAG_GROUP_GAP 2
/* Above this many steps, detail rows are loaded for a sample of steps. */
#define DIAG_DETAIL_MAX 4096
#define DIAG_SAMPLE 1024
/* In a sampled job, the steps around straggler runs' edges loaded in all,
 * and the runs of an epoch's steps that slow steps are examined in. */
#define DIAG_EDGE_STEPS 4096
/* --step N: the steps either side read with it. */
#define DIAG_STEP_CONTEXT 1024
#define DIAG_SLOW_RUNS 64
/* Stragglers: blame above tau = max(2 min_excess, SEG_REL x median step) in
 * the rolling median of SEG_WIN steps, for SEG_MIN steps or more, positive
 * in SEG_FRAC of them, the run's median blame above tau (1 + SEG_SHORT / n)
 * for n steps (tau for a run over every step asked about): a loaded machine
 * slows one rank for a while now and then,
 * by a fifth of a step for forty steps here, a fault stays. */
#define SEG_WIN 9
#define SEG_MIN 10
#define SEG_REL 0.15
#define SEG_FRAC 0.7
#define SEG_SHORT 30.0
/* Slow steps inside a straggler's run whose excess a step is above this
 * many times the run's lateness a step are not the straggler's own. */
#define SEG_ABSORB_RATIO 8.0
/* A steady straggler: blame positive in SEG_STEADY of every step asked
 * about, its median above SEG_STEADY_REL x tau. */
#define SEG_STEADY 0.9
#define SEG_STEADY_REL 0.5
/* A step slow by its blame only is the rank's when the step's time excess
 * over its neighbours is at least this share of the blame's excess. */
#define BLAME_SHOWN 0.5
/* slow_rank: no class holds more than this share of the run-time excess. */
#define SPREAD_TOP 0.6

/* ---- rows ------------------------------------------------------------------------ */

struct cell { /* (rank, step) */
    uint32_t rank, step;
    uint64_t t_begin, t_end, qwi;
    double cw, cr; /* the workers' wait for a CPU in the step and their runs on one
                      (NAN: not measured) */
    bool host_held; /* slow in the step by a loaded host (cw_excess): its blame
                       there is not its own */
    double elig, ran, thr, lost, idle;
    uint32_t c0, nc, w0, nw, r0, nr; /* this cell's rows in d->c, d->w, d->r */
    uint8_t tier; /* the lowest detail tier of its epochs (2 full: waits and
                     releases; 1 histograms; 0 counts); 255 none read */
    bool has_workers, detail, coarse;
    bool withheld; /* its agent kept the step's own rows back (StepTime.detail_withheld) */
};
struct crow { /* (rank, step, class) */
    uint32_t rank, step, cls;
    double count, run, rmax, q, qn, qmax;
    bool coarse; /* spread from an epoch's rows of no known step */
};
struct wrow {
    uint32_t rank, step, peer, cls;
    uint64_t gen, t_begin, t_end;
};
struct rrow {
    uint32_t rank, step, consumer, cls;
    uint64_t gen, t_ready, t_start, t_end, t_cb, t_ce, t_rel;
};
struct estep { /* a step an epoch carried */
    int64_t epoch;
    uint32_t rank, step;
    bool loaded; /* the epoch's rows of this step are loaded */
    bool keep;   /* while loading: this step's rows are wanted */
};

/* A norm: medians of up to four measures of one key. */
struct norm {
    uint64_t key;
    double v[4];
    uint32_t n, off; /* samples; while building: where they start */
    bool used;
};
enum { K_CLASS = 1, K_CLASS_ALL, K_FAMILY, K_WAIT, K_RELEASE, K_RANK };

struct diag {
    struct mks_store *st;
    const char *job;
    struct mks_diag_opts o;
    struct cell *s;
    size_t ns, cap_s;
    struct crow *c;
    size_t nc, cap_c;
    struct wrow *w;
    size_t nw, cap_w;
    struct rrow *r;
    size_t nr, cap_r;
    struct estep *es;
    size_t nes, cap_es;
    struct agg *agg;   /* a whole long job's steps from the per-step aggregates */
    double *qwi_med;   /* with them: per rank, the median queued_while_idle (NAN none) */
    uint32_t n_ranks;
    uint32_t *n_workers;     /* per rank */
    size_t *rank_cells;      /* per rank: cells with detail rows */
    uint8_t comm_class[256]; /* task class is a communication task (schema) */
    uint8_t waiter_cls[256]; /* its tasks wait on remote events */
    uint8_t xfer_cls[256];   /* its tasks' transfers are measured (comm begin, end) */
    int16_t family[256];     /* "expert.3" -> the lowest class id of "expert.*"; -1 none */
    struct norm *norms;
    size_t norm_cap, norm_used;
    struct mks_clock_model *clock;
    double *buf; /* scratch for medians */
    size_t buf_cap;
    sqlite3_stmt *q_cls, *q_wait, *q_rel, *q_cov, *q_work, *q_tier;
};

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

/* ---- statistics helpers ---------------------------------------------------------- */

/* The k-th smallest of v[0..n) (reorders v): Hoare's selection, linear on
 * average. */
static double select_k(double *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j], v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* Median of v[0..n) (reorders v); 0 for n == 0. */
static double median(double *v, size_t n)
{
    if (!n)
        return 0;
    if (n % 2)
        return select_k(v, n, n / 2);
    double hi = select_k(v, n, n / 2);
    /* the largest of the lower half */
    double lo = v[0];
    for (size_t i = 1; i < n / 2; i++)
        if (v[i] > lo)
            lo = v[i];
    return (lo + hi) / 2;
}

static double *scratch(struct diag *d, size_t n)
{
    if (n > d->buf_cap) {
        size_t cap = d->buf_cap ? d->buf_cap : 1024;
        while (cap < n)
            cap *= 2;
        double *p = realloc(d->buf, cap * sizeof(double));
        if (!p)
            return NULL;
        d->buf = p, d->buf_cap = cap;
    }
    return d->buf;
}

static double step_dur(const struct cell *c)
{
    return (double)(c->t_end - c->t_begin);
}

/* ---- commid places ------------------------------------------------------------------ */

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

/* When a release was due: the later of the data's arrival and the end of
 * the task that produced it.  What comes after is notification delay (plus
 * any wait for the transfer to start after the task's end). */
static double notify_gap(const struct rrow *r)
{
    uint64_t base = r->t_ce > r->t_end ? r->t_ce : r->t_end;
    if (!base || r->t_rel < base)
        return NAN;
    double g = (double)(r->t_rel - base);
    if (r->t_end && r->t_cb && r->t_cb >= r->t_end)
        g += (double)(r->t_cb - r->t_end);
    return g;
}

static double xfer_time(const struct rrow *r)
{
    return r->t_cb && r->t_ce >= r->t_cb ? (double)(r->t_ce - r->t_cb) : NAN;
}

/* ---- loading ------------------------------------------------------------------------ */

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

/* The least value the highest non-empty bucket of a stored histogram holds
 * (store.c's blob: little-endian u64 buckets; bucket b > 0 holds
 * [2^(b-1), 2^b)), 0 for none: a lower bound of the maximum, at least half
 * of it, for agents that send no maximum. */
static double hist_floor(sqlite3_stmt *s, int col)
{
    if (sqlite3_column_type(s, col) != SQLITE_BLOB)
        return 0;
    const uint8_t *p = sqlite3_column_blob(s, col);
    int n = sqlite3_column_bytes(s, col) / 8;
    for (int b = n - 1; p && b > 0; b--) {
        uint64_t c;
        memcpy(&c, p + b * 8, 8); /* little-endian, as store.c writes it */
        if (c)
            return b - 1 < 62 ? (double)((uint64_t)1 << (b - 1)) : 9.2e18;
    }
    return 0;
}

static int cmp_cell(const void *a, const void *b)
{
    const struct cell *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->step < y->step ? -1 : x->step > y->step;
}

static struct cell *cell_at(const struct diag *d, uint32_t rank, uint32_t step)
{
    struct cell key = {.rank = rank, .step = step};
    return d->ns ? bsearch(&key, d->s, d->ns, sizeof(*d->s), cmp_cell) : NULL;
}

static int cmp_estep(const void *a, const void *b)
{
    const struct estep *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    return x->step < y->step ? -1 : x->step > y->step;
}

static void note_rank(struct diag *d, uint32_t rank)
{
    if (rank < MAX_RANKS && rank + 1 > d->n_ranks)
        d->n_ranks = rank + 1;
}

/* The step range asked for: [*lo, *hi]. */
static int step_range(struct diag *d, uint32_t *lo, uint32_t *hi)
{
    *lo = 0, *hi = UINT32_MAX;
    if (d->o.range)
        *lo = d->o.step_lo, *hi = d->o.step_hi;
    if (d->o.last) {
        sqlite3_stmt *s;
        /* The top of the job's epochs by their steps' range (epochs_step):
         * its last step, however long the job. */
        if (prep(d, "SELECT MAX(step_hi) FROM epochs WHERE job = ?1", &s))
            return -EIO;
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
            uint32_t top = (uint32_t)u64(s, 0);
            uint32_t from = top + 1 >= d->o.last ? top + 1 - d->o.last : 0;
            if (from > *lo)
                *lo = from;
        }
        sqlite3_finalize(s);
    }
    return 0;
}

/* Step times: a step reported in several epochs covers all of it so far in
 * each, so min(begin) .. max(end) is the whole step.  Every (epoch, step)
 * pair is kept: detail rows are loaded per epoch.  The rows of steps
 * lo..hi are added to d->s and d->es (merge_cells sorts and merges them). */
static int load_rows(struct diag *d, uint32_t lo, uint32_t hi, bool ranged)
{
    sqlite3_stmt *s;
    size_t cap = d->cap_s, cap_es = d->cap_es;
    /* A range of steps is read through the epochs whose steps' range meets
     * it (epochs_step: an epoch's last step is at most the widest range a
     * rank's epoch had past the range's end), not the job's every epoch;
     * all of them through the job's epochs. */
    if (prep(d,
             ranged ? "SELECT e.rank, s.step, s.epoch_id, s.t_begin_dev, s.t_end_dev,"
                      " s.queued_while_idle_ns, s.cpu_wait_ns, s.cpu_runs, s.detail_withheld FROM"
                      " epochs e INDEXED BY"
                      " epochs_step CROSS JOIN steps s ON s.epoch_id = e.id WHERE e.job = ?1 AND"
                      " e.step_hi BETWEEN ?2 AND ?3 + (SELECT COALESCE(MAX(step_span), 0) FROM"
                      " ranks WHERE job = ?1) AND e.step_lo <= ?3 AND s.step BETWEEN ?2 AND ?3"
                    : "SELECT e.rank, s.step, s.epoch_id, s.t_begin_dev, s.t_end_dev,"
                      " s.queued_while_idle_ns, s.cpu_wait_ns, s.cpu_runs, s.detail_withheld FROM"
                      " steps s JOIN epochs e ON e.id = s.epoch_id WHERE e.job = ?1 AND s.step"
                      " BETWEEN ?2 AND ?3",
             &s))
        return -EIO;
    sqlite3_bind_int64(s, 2, lo);
    sqlite3_bind_int64(s, 3, hi);
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint32_t rank = (uint32_t)u64(s, 0), step = (uint32_t)u64(s, 1);
        uint64_t b = u64(s, 3), e = u64(s, 4);
        if (rank >= MAX_RANKS)
            continue;
        GROW(d->es, d->nes, cap_es);
        d->es[d->nes++] = (struct estep){.epoch = sqlite3_column_int64(s, 2), .rank = rank,
                                         .step = step};
        if (!b || e < b)
            continue;
        GROW(d->s, d->ns, cap);
        d->s[d->ns++] = (struct cell){.rank = rank, .step = step, .t_begin = b, .t_end = e,
                                      .qwi = u64(s, 5), .tier = 255,
                                      .cw = sqlite3_column_type(s, 6) == SQLITE_NULL ||
                                                    sqlite3_column_type(s, 7) == SQLITE_NULL
                                                ? NAN
                                                : (double)u64(s, 6),
                                      .cr = sqlite3_column_type(s, 7) == SQLITE_NULL
                                                ? NAN
                                                : (double)u64(s, 7),
                                      .withheld = sqlite3_column_int(s, 8) != 0};
        note_rank(d, rank);
    }
    sqlite3_finalize(s);
    d->cap_s = cap, d->cap_es = cap_es;
    return 0;
oom:
    sqlite3_finalize(s);
    d->cap_s = cap, d->cap_es = cap_es;
    return -ENOMEM;
}

static int load_gens(struct diag *d, uint32_t lo, uint32_t hi)
{
    sqlite3_stmt *s;
    size_t cap = d->cap_s, cap_es = d->cap_es;
    /* Ranks whose steps carry no times: a generation advance labelled K
     * starts decode step K (the runtimes raise it as step K begins, or as
     * step K - 1 ends), so step K - 1 lasts from the last advance labelled
     * K - 1 to the last labelled K. */
    uint8_t timed[MAX_RANKS / 8 + 1] = {0}; /* a bit per rank */
    for (size_t i = 0; i < d->ns; i++)
        timed[d->s[i].rank / 8] |= (uint8_t)(1u << (d->s[i].rank % 8));
    if (prep(d,
             "SELECT e.rank, g.step, MAX(g.t_dev), MIN(g.epoch_id), MAX(g.epoch_id) FROM gens g"
             " JOIN epochs e ON e.id = g.epoch_id WHERE e.job = ?1 AND g.t_dev > 0 AND g.step"
             " BETWEEN ?2 AND ?3 + 1 GROUP BY e.rank, g.step ORDER BY e.rank, g.step",
             &s))
        return -EIO;
    sqlite3_bind_int64(s, 2, lo);
    sqlite3_bind_int64(s, 3, hi);
    uint32_t prev_rank = UINT32_MAX, prev_step = 0;
    uint64_t prev_t = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint32_t rank = (uint32_t)u64(s, 0), step = (uint32_t)u64(s, 1);
        uint64_t t = u64(s, 2);
        if (rank >= MAX_RANKS || (timed[rank / 8] >> (rank % 8) & 1))
            continue;
        if (rank == prev_rank && step == prev_step + 1 && t >= prev_t && prev_step >= lo &&
            prev_step <= hi) {
            GROW(d->s, d->ns, cap);
            d->s[d->ns++] = (struct cell){.rank = rank, .step = prev_step, .t_begin = prev_t,
                                          .t_end = t, .tier = 255, .cw = NAN, .cr = NAN};
            note_rank(d, rank);
            /* the epochs that carried the advances carry the step's rows */
            for (int k = 3; k <= 4; k++) {
                GROW(d->es, d->nes, cap_es);
                d->es[d->nes++] = (struct estep){.epoch = sqlite3_column_int64(s, k),
                                                 .rank = rank, .step = prev_step};
            }
        }
        prev_rank = rank, prev_step = step, prev_t = t;
    }
    sqlite3_finalize(s);
    d->cap_s = cap, d->cap_es = cap_es;
    return 0;
oom:
    sqlite3_finalize(s);
    d->cap_s = cap, d->cap_es = cap_es;
    return -ENOMEM;
}

/* Cells in (rank, step) order, one per key; d->es in (epoch, step) order,
 * one per pair. */
static void merge_cells(struct diag *d)
{
    if (d->ns > 1)
        qsort(d->s, d->ns, sizeof(*d->s), cmp_cell);
    /* merge a step's rows of several epochs */
    size_t m = 0;
    for (size_t i = 0; i < d->ns; i++) {
        if (m && d->s[m - 1].rank == d->s[i].rank && d->s[m - 1].step == d->s[i].step) {
            struct cell *p = &d->s[m - 1];
            if (d->s[i].t_begin < p->t_begin)
                p->t_begin = d->s[i].t_begin;
            if (d->s[i].t_end > p->t_end)
                p->t_end = d->s[i].t_end;
            if (d->s[i].qwi > p->qwi)
                p->qwi = d->s[i].qwi;
            if (isnan(p->cw)) /* only the step's complete row carries it */
                p->cw = d->s[i].cw, p->cr = d->s[i].cr;
            p->withheld |= d->s[i].withheld;
            continue;
        }
        d->s[m++] = d->s[i];
    }
    d->ns = m;
    if (d->nes > 1)
        qsort(d->es, d->nes, sizeof(*d->es), cmp_estep);
    m = 0;
    for (size_t i = 0; i < d->nes; i++)
        if (!m || cmp_estep(&d->es[m - 1], &d->es[i]))
            d->es[m++] = d->es[i];
    d->nes = m;
}

static int load_cells(struct diag *d, uint32_t lo, uint32_t hi)
{
    int rc = load_rows(d, lo, hi, lo > 0 || hi < UINT32_MAX);
    if (!rc)
        rc = load_gens(d, lo, hi);
    if (!rc)
        merge_cells(d);
    return rc;
}

/* ---- a whole long job's step times from the per-step aggregates ---------------- */

/* The job's steps (collector/src/step_aggs.h): above the job's cut from
 * step_aggs, one row a step; at or below it from the step rows, read as
 * load_cells reads them.  Cells and epochs of a step are read from the
 * rows (loaded[k]) only for the steps the diagnosis examines. */
struct agg {
    uint32_t *step;  /* the job's steps with a time, ascending */
    double *time;    /* the slowest rank's */
    uint32_t *rank;  /* that rank (the lowest of equal ones) */
    uint32_t *cells; /* ranks with a time */
    bool *loaded;    /* its cells and epochs are in d->s and d->es */
    size_t n, cap;
    uint64_t nes, n_ep; /* (epoch, step) pairs and epochs of the job's steps */
    uint32_t ranks;     /* the job's ranks (each has step times) */
};

static void agg_free(struct agg *a)
{
    if (!a)
        return;
    free(a->step), free(a->time), free(a->rank), free(a->cells), free(a->loaded);
    free(a);
}

static int agg_push(struct agg *a, uint32_t step, double t, uint32_t rank, uint32_t cells,
                    bool loaded)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 4096;
        uint32_t *s = realloc(a->step, cap * sizeof(*s));
        if (s)
            a->step = s;
        double *tm = s ? realloc(a->time, cap * sizeof(*tm)) : NULL;
        if (tm)
            a->time = tm;
        uint32_t *r = tm ? realloc(a->rank, cap * sizeof(*r)) : NULL;
        if (r)
            a->rank = r;
        uint32_t *c = r ? realloc(a->cells, cap * sizeof(*c)) : NULL;
        if (c)
            a->cells = c;
        bool *l = c ? realloc(a->loaded, cap * sizeof(*l)) : NULL;
        if (!l)
            return -ENOMEM;
        a->loaded = l, a->cap = cap;
    }
    a->step[a->n] = step, a->time[a->n] = t, a->rank[a->n] = rank, a->cells[a->n] = cells;
    a->loaded[a->n++] = loaded;
    return 0;
}

static int cmp_step(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* The first aggregated step at or after `step`. */
static size_t agg_at(const struct agg *g, uint32_t step)
{
    size_t a = 0, b = g->n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (g->step[m] < step)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static int64_t one_i64(struct diag *d, const char *sql, int64_t x, bool *found)
{
    sqlite3_stmt *s;
    int64_t v = 0;
    *found = false;
    if (prep(d, sql, &s))
        return 0;
    sqlite3_bind_int64(s, 2, x);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(s, 0), *found = true;
    sqlite3_finalize(s);
    return v;
}

/* Whether the aggregates answer for this request, and then the job's steps
 * from them.  Sets *why (for the answer) when a whole job is read from its
 * rows instead.  0 or a negative errno. */
static int load_aggs(struct diag *d, const char **why)
{
    *why = NULL;
    /* a range reads its own rows through the epochs' step ranges, fast already */
    if (d->o.range || d->o.last || d->o.only_step >= 0 || d->o.rows)
        return 0;
    bool found;
    /* a job of a few steps reads them all (its last step, by epochs_step) */
    int64_t top = one_i64(d, "SELECT MAX(step_hi) FROM epochs WHERE job = ?1", 0, &found);
    if (!found || top < DIAG_DETAIL_MAX)
        return 0;
    int64_t cut = one_i64(d, "SELECT cut FROM step_agg_jobs WHERE job = ?1", 0, &found);
    if (!found || cut == INT64_MAX) {
        *why = "the store's per-step aggregates of this job are not filled yet (a store of an"
               " older collector, filled while the collector idles): every step time read";
        return 0;
    }
    /* A rank without step times of its own is timed by its generation
     * advances (load_gens), which the aggregates do not hold. */
    sqlite3_stmt *s;
    if (prep(d, "SELECT rank FROM ranks WHERE job = ?1", &s))
        return -EIO;
    uint32_t ranks = 0, top_rank = 0;
    bool untimed = false;
    while (!untimed && sqlite3_step(s) == SQLITE_ROW) {
        int64_t r = sqlite3_column_int64(s, 0);
        bool timed, gens = false;
        one_i64(d,
                "SELECT 1 FROM epochs e CROSS JOIN steps s ON s.epoch_id = e.id WHERE"
                " e.job = ?1 AND e.rank = ?2 AND s.t_begin_dev > 0 AND s.t_end_dev >="
                " s.t_begin_dev LIMIT 1",
                r, &timed);
        if (!timed)
            one_i64(d,
                    "SELECT 1 FROM epochs e CROSS JOIN gens g ON g.epoch_id = e.id WHERE"
                    " e.job = ?1 AND e.rank = ?2 AND g.t_dev > 0 LIMIT 1",
                    r, &gens);
        untimed = !timed && gens;
        if (timed && r >= 0 && r < MAX_RANKS) {
            ranks++;
            if ((uint32_t)r > top_rank)
                top_rank = (uint32_t)r;
        }
    }
    sqlite3_finalize(s);
    if (untimed) {
        *why = "the step times of some ranks come from their generation advances, which the"
               " per-step aggregates do not hold: every step time read";
        return 0;
    }
    struct agg *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->ranks = ranks;
    int rc = 0;
    /* at or below the cut: the rows, cells and epochs loaded */
    if (cut >= 0 && (rc = load_rows(d, 0, cut > UINT32_MAX ? UINT32_MAX : (uint32_t)cut, true)))
        goto fail;
    merge_cells(d);
    for (size_t i = 0; i < d->nes; i++)
        a->n_ep += !i || d->es[i].epoch != d->es[i - 1].epoch;
    a->nes = d->nes;
    /* per step at or below the cut: the slowest rank (the first of equal
     * ones in rank order, as the cells are) */
    uint32_t *low = malloc((d->ns + 1) * sizeof(*low));
    if (!low) {
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < d->ns; i++)
        low[i] = d->s[i].step;
    if (d->ns > 1)
        qsort(low, d->ns, sizeof(*low), cmp_step);
    for (size_t i = 0; i < d->ns && !rc; i++)
        if (!i || low[i] != low[i - 1])
            rc = agg_push(a, low[i], -1, 0, 0, true);
    free(low);
    if (rc)
        goto fail;
    for (size_t i = 0; i < d->ns; i++) {
        const struct cell *c = &d->s[i];
        size_t k = agg_at(a, c->step);
        double dur = step_dur(c);
        a->cells[k]++;
        if (dur > a->time[k])
            a->time[k] = dur, a->rank[k] = c->rank;
    }
    if (prep(d,
             "SELECT step, dur, rank, cells, pairs, firsts, qcells FROM step_aggs WHERE"
             " job = ?1 AND step > ?2 ORDER BY step",
             &s)) {
        rc = -EIO;
        goto fail;
    }
    sqlite3_bind_int64(s, 2, cut);
    /* whether any step above the cut had queueing while idle (read in the
     * same pass: a second one over step_aggs cost as much as a fifth of it) */
    bool any = false;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t step = sqlite3_column_int64(s, 0);
        a->nes += (uint64_t)sqlite3_column_int64(s, 4);
        a->n_ep += (uint64_t)sqlite3_column_int64(s, 5);
        any |= sqlite3_column_int64(s, 6) > 0;
        if (sqlite3_column_type(s, 1) == SQLITE_NULL || step < 0 || step > UINT32_MAX)
            continue;
        if ((rc = agg_push(a, (uint32_t)step, (double)u64(s, 1), (uint32_t)u64(s, 2),
                           (uint32_t)u64(s, 3), false))) {
            sqlite3_finalize(s);
            goto fail;
        }
    }
    sqlite3_finalize(s);
    /* a job of a few steps reads them all, as before */
    if (a->n <= DIAG_DETAIL_MAX) {
        d->ns = d->nes = 0, d->n_ranks = 0;
        agg_free(a);
        return 0;
    }
    if (ranks)
        note_rank(d, top_rank);
    d->agg = a;
    /* The rank's usual queueing while idle (its norm) is over every step:
     * from step_cells when any was sent (agents that measure none send 0). */
    d->qwi_med = malloc((d->n_ranks + 1) * sizeof(double));
    if (!d->qwi_med)
        return -ENOMEM;
    for (uint32_t r = 0; r <= d->n_ranks; r++)
        d->qwi_med[r] = NAN;
    for (size_t i = 0; i < d->ns && !any; i++)
        any = d->s[i].qwi > 0;
    if (!any)
        return 0;
    size_t *cnt = calloc(d->n_ranks + 1, sizeof(size_t));
    double **v = calloc(d->n_ranks + 1, sizeof(double *));
    size_t *cap = calloc(d->n_ranks + 1, sizeof(size_t));
    rc = cnt && v && cap ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < d->ns; i++) {
        const struct cell *c = &d->s[i];
        if (c->qwi > 0 && c->rank < d->n_ranks) {
            GROW(v[c->rank], cnt[c->rank], cap[c->rank]);
            v[c->rank][cnt[c->rank]++] = (double)c->qwi;
        }
    }
    if (!rc && prep(d,
                    "SELECT rank, qwi FROM step_cells WHERE job = ?1 AND step > ?2 AND qwi > 0",
                    &s))
        rc = -EIO;
    if (!rc) {
        sqlite3_bind_int64(s, 2, cut);
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint64_t r = u64(s, 0);
            if (r >= d->n_ranks)
                continue;
            GROW(v[r], cnt[r], cap[r]);
            v[r][cnt[r]++] = (double)u64(s, 1);
        }
        sqlite3_finalize(s);
    }
    for (uint32_t r = 0; !rc && r < d->n_ranks; r++)
        if (cnt[r])
            d->qwi_med[r] = median(v[r], cnt[r]);
    goto qdone;
oom:
    rc = -ENOMEM;
qdone:
    for (uint32_t r = 0; v && r <= d->n_ranks; r++)
        free(v[r]);
    free(v), free(cnt), free(cap);
    return rc;
fail:
    agg_free(a);
    return rc;
}

/* Cells and epochs of the aggregated steps k in [a, b] read from the rows
 * where not yet read, with the steps without a time next to them; merged
 * (merge_cells) unless the caller merges once after many ranges (*added
 * set when rows were read). */
static int agg_read(struct diag *d, size_t a, size_t b, bool *added_p)
{
    struct agg *g = d->agg;
    bool added = false;
    if (b >= g->n)
        b = g->n - 1;
    for (size_t i = a; i <= b && i < g->n;) {
        if (g->loaded[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 <= b && !g->loaded[j + 1])
            j++;
        uint32_t lo = i ? g->step[i - 1] + 1 : 0;
        uint32_t hi = j + 1 < g->n ? g->step[j + 1] - 1 : UINT32_MAX;
        int rc = load_rows(d, lo, hi, true);
        if (rc)
            return rc;
        for (size_t k = i; k <= j; k++)
            g->loaded[k] = true;
        added = true;
        i = j + 1;
    }
    if (added)
        *added_p = true;
    return 0;
}

static int agg_ensure(struct diag *d, size_t a, size_t b)
{
    bool added = false;
    int rc = agg_read(d, a, b, &added);
    if (!rc && added)
        merge_cells(d);
    return rc;
}

/* The steps wk[k] read in all, with every step of the epochs that carried
 * them (load_epoch spreads an epoch's rows of no known step over all its
 * steps). */
static int agg_want(struct diag *d, const bool *wk)
{
    struct agg *g = d->agg;
    bool added = false;
    int rc = 0;
    for (size_t k = 0; k < g->n && !rc;) {
        if (!wk[k]) {
            k++;
            continue;
        }
        size_t j = k;
        while (j + 1 < g->n && wk[j + 1])
            j++;
        rc = agg_read(d, k, j, &added);
        k = j + 1;
    }
    /* merged once for all the ranges (each merge sorts every cell) */
    if (!rc && added)
        merge_cells(d);
    added = false;
    sqlite3_stmt *s;
    if (rc || prep(d, "SELECT step_lo, step_hi FROM epochs WHERE id = ?2", &s))
        return rc ? rc : -EIO;
    /* the epochs of the wanted steps (d->es changes as steps are added:
     * their list first) */
    int64_t *eps = malloc((d->nes + 1) * sizeof(*eps));
    size_t ne = 0;
    if (!eps) {
        sqlite3_finalize(s);
        return -ENOMEM;
    }
    for (size_t i = 0; i < d->nes; i++) {
        size_t k = agg_at(g, d->es[i].step);
        if (k < g->n && g->step[k] == d->es[i].step && wk[k] &&
            (!ne || eps[ne - 1] != d->es[i].epoch))
            eps[ne++] = d->es[i].epoch;
    }
    for (size_t i = 0; i < ne && !rc; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 2, eps[i]);
        if (sqlite3_step(s) != SQLITE_ROW || sqlite3_column_type(s, 0) == SQLITE_NULL)
            continue;
        uint64_t lo = u64(s, 0), hi = u64(s, 1);
        size_t a = agg_at(g, lo > UINT32_MAX ? UINT32_MAX : (uint32_t)lo);
        size_t b = agg_at(g, hi > UINT32_MAX ? UINT32_MAX : (uint32_t)hi);
        if (b < g->n && g->step[b] == hi)
            b++;
        /* [a, b): the epoch's steps with a time; the ones without next to
         * them come with them (agg_ensure) */
        if (a < g->n)
            rc = agg_read(d, a ? a - 1 : 0, b < g->n ? b : g->n - 1, &added);
    }
    sqlite3_finalize(s);
    free(eps);
    if (!rc && added)
        merge_cells(d);
    return rc;
}

/* For a chain at step k: the rank's neighbouring steps (prof_cell compares
 * a step with DIAG_WINDOW of the rank's own either side): read until
 * DIAG_WINDOW steps each side have every rank's cell, or AGG_NEAR_MAX. */
#define AGG_NEAR_MAX 4096
static int agg_near(struct diag *d, size_t k)
{
    struct agg *g = d->agg;
    size_t a = k, b = k, full = 0;
    while (a > 0 && full < DIAG_WINDOW && k - a < AGG_NEAR_MAX)
        full += g->cells[--a] >= g->ranks;
    full = 0;
    while (b + 1 < g->n && full < DIAG_WINDOW && b - k < AGG_NEAR_MAX)
        full += g->cells[++b] >= g->ranks;
    return agg_ensure(d, a, b);
}

/* After steps were added: each cell's step index and a want flag a cell. */
static int agg_cells(struct diag *d, const uint32_t *steps, size_t n_steps, size_t **cell_step,
                     bool **want)
{
    size_t *cs = realloc(*cell_step, (d->ns + 1) * sizeof(*cs));
    if (cs)
        *cell_step = cs;
    bool *w = cs ? realloc(*want, (d->ns + 1) * sizeof(*w)) : NULL;
    if (!w)
        return -ENOMEM;
    *want = w;
    memset(w, 0, (d->ns + 1) * sizeof(*w));
    for (size_t i = 0; i < d->ns; i++) {
        const uint32_t *p = bsearch(&d->s[i].step, steps, n_steps, sizeof(*steps), cmp_step);
        cs[i] = p ? (size_t)(p - steps) : 0;
    }
    return 0;
}

static int prep_detail(struct diag *d)
{
    sqlite3 *db = mks_store_db(d->st);
    const char *sql[] = {
        /* the histograms only when no maximum was stored (read lazily) */
        "SELECT class, step, count, CASE WHEN run_sum > 0 THEN run_sum ELSE sum_run_ns END,"
        " run_max, CASE WHEN run_max > 0 THEN NULL ELSE run_hist END, queue_sum, queue_count,"
        " queue_max, CASE WHEN queue_max > 0 THEN NULL ELSE queue_hist END, step IS NULL"
        " FROM task_stats WHERE epoch_id = ?1",
        "SELECT step, peer_rank, waiter_class, comm_gen, t_begin_dev, t_end_dev FROM waits"
        " WHERE epoch_id = ?1 AND t_begin_dev > 0 AND t_end_dev >= t_begin_dev",
        "SELECT step, consumer_rank, class, comm_gen, t_ready, t_start, t_end, t_comm_begin,"
        " t_comm_end, t_release FROM releases WHERE epoch_id = ?1",
        "SELECT SUM(eligible), SUM(ran), SUM(throttled), SUM(lost) FROM coverage WHERE"
        " epoch_id = ?1",
        "SELECT step, SUM(idle_ns), SUM(busy_ns) FROM workers WHERE epoch_id = ?1 GROUP BY step",
        "SELECT detail_tier FROM epochs WHERE id = ?1",
    };
    sqlite3_stmt **q[] = {&d->q_cls, &d->q_wait, &d->q_rel, &d->q_cov, &d->q_work, &d->q_tier};
    for (int i = 0; i < 6; i++)
        if (sqlite3_prepare_v2(db, sql[i], -1, q[i], NULL) != SQLITE_OK)
            return -EIO;
    return 0;
}

/* Where an epoch's step is in its list (es: the epoch's steps, in step
 * order); n when it is not there. */
static size_t es_pos(const struct estep *es, size_t n, uint32_t step)
{
    size_t a = 0, b = n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (es[m].step < step)
            a = m + 1;
        else
            b = m;
    }
    return a < n && es[a].step == step ? a : n;
}

/* Whether an epoch's step is among its wanted ones. */
static bool kept_step(const struct estep *es, size_t n, uint32_t step)
{
    size_t i = es_pos(es, n, step);
    return i < n && es[i].keep;
}

/* The rows of one epoch (rank `rank`, carrying es[0..n) of its steps,
 * those with keep wanted):
 * task rows of a known step go to that step; rows of no known step (the
 * agent folds steps it could not keep apart into step 0) are spread evenly
 * over the epoch's steps that got no rows of their own. */
static int load_epoch(struct diag *d, int64_t epoch, uint32_t rank, const struct estep *es,
                      size_t n)
{
    sqlite3_stmt *s = d->q_cls;
    bool carries0 = false, all = true;
    for (size_t i = 0; i < n; i++)
        carries0 |= es[i].step == 0, all &= es[i].keep;
    /* Only the wanted steps' rows are kept (a sampled long job reads an
     * epoch for a few of its steps); a row of a step the epoch does not
     * list is kept only when the whole epoch is. */
#define KEPT(st) (all || kept_step(es, n, (st)))
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    struct crow unknown[64];
    size_t nu = 0;
    /* the epoch's steps with class rows of their own, wanted or not */
    uint8_t *own = calloc(n ? n : 1, 1);
    if (!own)
        return -ENOMEM;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct crow r = {.rank = rank, .cls = (uint32_t)u64(s, 0), .step = (uint32_t)u64(s, 1)};
        r.count = (double)u64(s, 2), r.run = (double)u64(s, 3);
        r.rmax = u64(s, 4) ? (double)u64(s, 4) : hist_floor(s, 5);
        r.q = (double)u64(s, 6), r.qn = (double)u64(s, 7);
        r.qmax = u64(s, 8) ? (double)u64(s, 8) : hist_floor(s, 9);
        if (r.count <= 0)
            continue;
        /* a row of no step (stored NULL; older stores: step 0 in an
         * epoch without step 0) */
        if (sqlite3_column_int(s, 10) || (r.step == 0 && !carries0)) {
            if (nu < 64)
                unknown[nu++] = r;
            continue;
        }
        size_t oi = es_pos(es, n, r.step);
        if (oi < n)
            own[oi] = 1;
        if (!KEPT(r.step))
            continue;
        GROW(d->c, d->nc, d->cap_c);
        d->c[d->nc++] = r;
    }
    if (nu && n) {
        /* steps of the epoch without rows of their own */
        size_t targets = 0;
        double total = 0;
        for (size_t i = 0; i < n; i++) {
            targets += !own[i];
            const struct cell *c = cell_at(d, rank, es[i].step);
            if (!own[i] && c)
                total += step_dur(c);
        }
        /* tasks evenly, their run and queueing time by each step's length:
         * the long step of the epoch is where its time went */
        for (size_t i = 0; i < n && targets; i++) {
            if (own[i] || !es[i].keep)
                continue;
            const struct cell *c = cell_at(d, rank, es[i].step);
            double w = total > 0 ? (c ? step_dur(c) : 0) / total : 1.0 / (double)targets;
            for (size_t u = 0; u < nu; u++) {
                GROW(d->c, d->nc, d->cap_c);
                struct crow r = unknown[u];
                r.step = es[i].step, r.coarse = true;
                r.count /= (double)targets, r.qn /= (double)targets;
                r.run *= w, r.q *= w;
                r.rmax = r.qmax = 0; /* an epoch's maximum is no step's */
                d->c[d->nc++] = r;
            }
        }
    }
    s = d->q_wait;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!KEPT((uint32_t)u64(s, 0)))
            continue;
        GROW(d->w, d->nw, d->cap_w);
        struct wrow *w = &d->w[d->nw++];
        w->rank = rank, w->step = (uint32_t)u64(s, 0), w->peer = (uint32_t)u64(s, 1);
        w->cls = (uint32_t)u64(s, 2), w->gen = u64(s, 3), w->t_begin = u64(s, 4);
        w->t_end = u64(s, 5);
        if (w->peer < MAX_RANKS)
            note_rank(d, w->peer);
    }
    s = d->q_rel;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (!KEPT((uint32_t)u64(s, 0)))
            continue;
        GROW(d->r, d->nr, d->cap_r);
        struct rrow *r = &d->r[d->nr++];
        r->rank = rank, r->step = (uint32_t)u64(s, 0), r->consumer = (uint32_t)u64(s, 1);
        r->cls = (uint32_t)u64(s, 2), r->gen = u64(s, 3), r->t_ready = u64(s, 4);
        r->t_start = u64(s, 5), r->t_end = u64(s, 6), r->t_cb = u64(s, 7);
        r->t_ce = u64(s, 8), r->t_rel = u64(s, 9);
    }
    s = d->q_tier;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    int tier = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL
                   ? sqlite3_column_int(s, 0)
                   : 2;
    for (size_t i = 0; i < n; i++) {
        struct cell *c = es[i].keep ? cell_at(d, rank, es[i].step) : NULL;
        if (c && tier < c->tier)
            c->tier = (uint8_t)(tier < 0 ? 0 : tier);
    }
    s = d->q_cov;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    if (sqlite3_step(s) == SQLITE_ROW)
        for (size_t i = 0; i < n; i++) {
            struct cell *c = es[i].keep ? cell_at(d, rank, es[i].step) : NULL;
            if (c) {
                c->elig += (double)u64(s, 0), c->ran += (double)u64(s, 1);
                c->thr += (double)u64(s, 2), c->lost += (double)u64(s, 3);
            }
        }
    s = d->q_work;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, epoch);
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct cell *c = KEPT((uint32_t)u64(s, 0)) ? cell_at(d, rank, (uint32_t)u64(s, 0)) : NULL;
        /* agents that measure no idle time send zeros: not a measurement */
        if (c && (u64(s, 1) || u64(s, 2))) {
            c->idle += (double)u64(s, 1);
            c->has_workers = true;
        }
    }
    free(own);
    return 0;
#undef KEPT
oom:
    free(own);
    return -ENOMEM;
}

static int cmp_crow(const void *a, const void *b)
{
    const struct crow *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->cls != y->cls)
        return x->cls < y->cls ? -1 : 1;
    return (int)x->coarse - (int)y->coarse;
}
static int cmp_wrow(const void *a, const void *b)
{
    const struct wrow *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->t_begin < y->t_begin ? -1 : x->t_begin > y->t_begin;
}
static int cmp_rrow_key(const void *a, const void *b)
{
    const struct rrow *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    return x->consumer < y->consumer ? -1 : x->consumer > y->consumer;
}
static int cmp_rrow(const void *a, const void *b)
{
    const struct rrow *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->gen < y->gen ? -1 : x->gen > y->gen;
}

#define MAXU(a, b) ((a) > (b) ? (a) : (b))

/* Merge rows of one key reported by several epochs, sort everything by
 * (rank, step) and give each cell its rows. */
static void index_rows(struct diag *d)
{
    if (d->nc > 1)
        qsort(d->c, d->nc, sizeof(*d->c), cmp_crow);
    size_t m = 0;
    for (size_t i = 0; i < d->nc; i++) {
        struct crow *p = m ? &d->c[m - 1] : NULL, *x = &d->c[i];
        if (p && p->rank == x->rank && p->step == x->step && p->cls == x->cls) {
            if (p->coarse != x->coarse) {
                /* a step with rows of its own keeps them */
                if (p->coarse)
                    *p = *x;
                continue;
            }
            p->count += x->count, p->run += x->run, p->q += x->q, p->qn += x->qn;
            p->rmax = MAXU(p->rmax, x->rmax), p->qmax = MAXU(p->qmax, x->qmax);
            continue;
        }
        d->c[m++] = *x;
    }
    d->nc = m;
    /* One release may be reported in parts by consecutive epochs (its
     * notification postponed past the epoch's end). */
    if (d->nr > 1)
        qsort(d->r, d->nr, sizeof(*d->r), cmp_rrow_key);
    m = 0;
    for (size_t i = 0; i < d->nr; i++) {
        struct rrow *p = m ? &d->r[m - 1] : NULL, *x = &d->r[i];
        if (p && p->rank == x->rank && p->gen == x->gen && p->consumer == x->consumer) {
            p->step = MAXU(p->step, x->step), p->cls = MAXU(p->cls, x->cls);
            p->t_ready = MAXU(p->t_ready, x->t_ready), p->t_start = MAXU(p->t_start, x->t_start);
            p->t_end = MAXU(p->t_end, x->t_end), p->t_cb = MAXU(p->t_cb, x->t_cb);
            p->t_ce = MAXU(p->t_ce, x->t_ce), p->t_rel = MAXU(p->t_rel, x->t_rel);
            continue;
        }
        d->r[m++] = *x;
    }
    d->nr = m;
    if (d->nr > 1)
        qsort(d->r, d->nr, sizeof(*d->r), cmp_rrow);
    if (d->nw > 1)
        qsort(d->w, d->nw, sizeof(*d->w), cmp_wrow);
    size_t ic = 0, iw = 0, ir = 0;
    for (size_t k = 0; k < d->ns; k++) {
        struct cell *c = &d->s[k];
#define RANGE(arr, n, i, first, cnt)                                                               \
    while (i < n && (arr[i].rank < c->rank || (arr[i].rank == c->rank && arr[i].step < c->step)))  \
        i++;                                                                                       \
    c->first = (uint32_t)i;                                                                        \
    while (i < n && arr[i].rank == c->rank && arr[i].step == c->step)                              \
        i++;                                                                                       \
    c->cnt = (uint32_t)(i - c->first);
        RANGE(d->c, d->nc, ic, c0, nc)
        RANGE(d->w, d->nw, iw, w0, nw)
        RANGE(d->r, d->nr, ir, r0, nr)
#undef RANGE
        c->coarse = false;
        for (uint32_t j = 0; j < c->nc; j++)
            c->coarse |= d->c[c->c0 + j].coarse;
    }
}

/* Detail rows for the cells with want[k] (all when want is NULL).  Cells
 * already loaded are skipped; a second call (straggler edges) adds to the
 * rows and indexes them again. */
static int load_detail(struct diag *d, const bool *want)
{
    /* the epochs that carried a wanted step, every one of them: a long
     * step is reported in parts by several epochs */
    size_t i = 0;
    while (i < d->nes) {
        size_t j = i;
        bool need = false;
        while (j < d->nes && d->es[j].epoch == d->es[i].epoch) {
            struct cell *c = cell_at(d, d->es[j].rank, d->es[j].step);
            d->es[j].keep = c && !d->es[j].loaded && (!want || want[c - d->s]);
            need |= d->es[j].keep;
            j++;
        }
        if (need) {
            int rc = load_epoch(d, d->es[i].epoch, d->es[i].rank, &d->es[i], j - i);
            if (rc)
                return rc;
            for (size_t k = i; k < j; k++)
                d->es[k].loaded |= d->es[k].keep;
        }
        i = j;
    }
    /* a cell has its detail when every epoch that carried it is loaded */
    for (size_t k = 0; k < d->ns; k++)
        d->s[k].detail = true;
    for (size_t k = 0; k < d->nes; k++)
        if (!d->es[k].loaded) {
            struct cell *c = cell_at(d, d->es[k].rank, d->es[k].step);
            if (c)
                c->detail = false;
        }
    index_rows(d);
    for (size_t k = 0; k < d->nw; k++)
        d->waiter_cls[d->w[k].cls & 255] |= d->w[k].cls < 256;
    for (size_t k = 0; k < d->nr; k++)
        d->xfer_cls[d->r[k].cls & 255] |= d->r[k].cls < 256 && d->r[k].t_cb > 0;
    return 0;
}

/* Ranks' workers, communication classes and class families (one operator's
 * instances named "<op>.<n>", as MoE experts: an instance that runs only
 * now and then has no norm of its own; its family's is the next best). */
static int load_meta(struct diag *d)
{
    sqlite3_stmt *s;
    d->n_workers = calloc(d->n_ranks ? d->n_ranks : 1, sizeof(uint32_t));
    d->rank_cells = calloc(d->n_ranks ? d->n_ranks : 1, sizeof(size_t));
    if (!d->n_workers || !d->rank_cells)
        return -ENOMEM;
    if (prep(d, "SELECT rank, n_workers FROM ranks WHERE job = ?1", &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW) {
        uint64_t rk = u64(s, 0);
        if (rk < d->n_ranks)
            d->n_workers[rk] = (uint32_t)u64(s, 1);
    }
    sqlite3_finalize(s);
    if (prep(d, "SELECT DISTINCT id FROM task_classes WHERE job = ?1 AND comm AND id < 256", &s))
        return -EIO;
    while (sqlite3_step(s) == SQLITE_ROW)
        d->comm_class[u64(s, 0) & 255] = 1;
    sqlite3_finalize(s);
    for (int i = 0; i < 256; i++)
        d->family[i] = -1;
    if (prep(d,
             "SELECT id, MIN(name) FROM task_classes WHERE job = ?1 AND id < 256 AND"
             " instr(name, '.') > 1 GROUP BY id ORDER BY id",
             &s))
        return -EIO;
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
    sqlite3_finalize(s);
    return 0;
}

/* Clock model from the epochs' host/device anchor pairs (the agent reads
 * the two clocks back to back: mks_anchors_pair's interval). */
static void build_clock(struct diag *d)
{
    if (!d->n_ranks)
        return;
    sqlite3_stmt *s;
    if (mks_clock_model_create(d->n_ranks, NULL, &d->clock))
        return;
    /* Anchors from the epochs the steps asked for came in (all of the
     * job's without --last or --steps): a range of a long job reads its own
     * epochs, not the hour before it.  A whole job's are the few the store
     * keeps of them where it does (clock_anchors.h): the same model. */
    int64_t emin = 0, emax = INT64_MAX;
    long n = -1;
    if (d->o.range || d->o.last) {
        emin = INT64_MAX, emax = 0;
        for (size_t i = 0; i < d->nes; i++) {
            if (d->es[i].epoch < emin)
                emin = d->es[i].epoch;
            if (d->es[i].epoch > emax)
                emax = d->es[i].epoch;
        }
    } else {
        n = mks_anchors_load(mks_store_db(d->st), d->job, d->n_ranks, d->clock);
    }
    /* One pass over the epochs, both anchors of each: the model keeps the
     * anchors that bound it, in any order they come (mks_clock_anchors_reduce;
     * a store that keeps none, or a read that failed half way: every epoch's
     * added to what it added, the same model). */
    if (n < 0) {
        if (prep(d,
                 "SELECT rank, t_begin_dev, t_begin_host, t_end_dev, t_end_host FROM epochs"
                 " WHERE job = ?1 AND id BETWEEN ?2 AND ?3",
                 &s)) {
            mks_clock_model_destroy(d->clock);
            d->clock = NULL;
            return;
        }
        sqlite3_bind_int64(s, 2, emin);
        sqlite3_bind_int64(s, 3, emax);
        n = 0;
        while (sqlite3_step(s) == SQLITE_ROW) {
            uint32_t rank = (uint32_t)u64(s, 0);
            struct mks_clock_anchor a;
            for (int k = 0; k < 2 && rank < d->n_ranks; k++)
                if (mks_anchors_pair(sqlite3_column_int64(s, 1 + 2 * k),
                                     sqlite3_column_int64(s, 2 + 2 * k), rank, &a))
                    n += mks_clock_add_anchors(d->clock, &a, 1) == 0;
        }
        sqlite3_finalize(s);
    }
    if (n <= 0 || mks_clock_solve(d->clock)) {
        /* No anchors or contradictory ones: device clocks are taken as one
         * time line (true on the CPU backend, where they are CLOCK_MONOTONIC). */
        mks_clock_model_destroy(d->clock);
        d->clock = NULL;
    }
}

/* ---- norms, computed once by sorting ------------------------------------------------ */

static uint64_t nkey(uint64_t tag, uint32_t rank, uint32_t peer, uint32_t cls, uint32_t op)
{
    return tag << 59 | (uint64_t)(rank & 0xfff) << 47 | (uint64_t)(peer & 0xfff) << 35 |
           (uint64_t)(cls > 0xffff ? 0xffff : cls) << 19 | (op & 0x7ffff);
}

static struct norm *norm_find(struct norm *tab, size_t cap, uint64_t key, bool add)
{
    size_t mask = cap - 1, i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & mask;
    for (size_t n = 0; n < cap; n++, i = (i + 1) & mask) {
        struct norm *m = &tab[i];
        if (m->used && m->key == key)
            return m;
        if (!m->used) {
            if (!add)
                return NULL;
            m->used = true, m->key = key;
            return m;
        }
    }
    return NULL;
}

/* The norm of key (added when asked, the table doubling at half full);
 * NULL when absent, or out of memory. */
static struct norm *norm_slot(struct diag *d, uint64_t key, bool add)
{
    if (add && 2 * (d->norm_used + 1) > d->norm_cap) {
        size_t cap = d->norm_cap ? 2 * d->norm_cap : 1024;
        struct norm *t = calloc(cap, sizeof(*t));
        if (!t)
            return NULL;
        for (size_t i = 0; i < d->norm_cap; i++)
            if (d->norms[i].used)
                *norm_find(t, cap, d->norms[i].key, true) = d->norms[i];
        free(d->norms);
        d->norms = t, d->norm_cap = cap;
    }
    if (!d->norm_cap)
        return NULL;
    struct norm *m = norm_find(d->norms, d->norm_cap, key, add);
    return m;
}

static const struct norm *norm_get(const struct diag *d, uint64_t key)
{
    return norm_slot((struct diag *)d, key, false);
}

struct sample {
    uint64_t key;
    double v[4];
};

/* Medians of each measure (NAN: not measured) per key: samples grouped by
 * their key's slot in the norm table (counted, placed, then a median each
 * by selection), no sort. */
static int add_norms(struct diag *d, const struct sample *sm, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct norm *nm = norm_slot(d, sm[i].key, true);
        if (!nm)
            return -ENOMEM;
        if (!nm->n++)
            d->norm_used++;
    }
    size_t total = 0, most = 0;
    for (size_t i = 0; i < d->norm_cap; i++)
        if (d->norms[i].used) {
            d->norms[i].off = (uint32_t)total;
            total += d->norms[i].n;
            if (d->norms[i].n > most)
                most = d->norms[i].n;
            d->norms[i].n = 0;
        }
    double *vals = malloc((total + 1) * 4 * sizeof(double));
    double *b = scratch(d, most + 1);
    if (!vals || !b) {
        free(vals);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct norm *nm = norm_slot(d, sm[i].key, false);
        memcpy(&vals[(size_t)(nm->off + nm->n++) * 4], sm[i].v, sizeof(sm[i].v));
    }
    for (size_t i = 0; i < d->norm_cap; i++) {
        struct norm *nm = &d->norms[i];
        if (!nm->used)
            continue;
        for (int f = 0; f < 4; f++) {
            size_t k = 0;
            for (size_t x = nm->off; x < (size_t)nm->off + nm->n; x++)
                if (!isnan(vals[x * 4 + f]))
                    b[k++] = vals[x * 4 + f];
            nm->v[f] = k ? median(b, k) : NAN;
        }
    }
    free(vals);
    return 0;
}

static double cell_busy(const struct diag *d, const struct cell *c)
{
    double run = 0;
    for (uint32_t j = 0; j < c->nc; j++)
        run += d->c[c->c0 + j].run;
    return run;
}

static double workers_of(const struct diag *d, uint32_t rank)
{
    return rank < d->n_ranks && d->n_workers[rank] ? d->n_workers[rank] : 1;
}

/* Idle worker time of a cell: the agent's, else the workers' time in the
 * step not spent in tasks (NAN when the cell's task rows are not its own). */
static double cell_idle_derived(const struct diag *d, const struct cell *c)
{
    if (!c->detail || c->coarse || !c->nc)
        return NAN;
    double idle = workers_of(d, c->rank) * step_dur(c) - cell_busy(d, c);
    return idle > 0 ? idle : 0;
}

static double cell_idle(const struct diag *d, const struct cell *c)
{
    return c->has_workers ? c->idle : cell_idle_derived(d, c);
}

static int build_norms(struct diag *d)
{
    size_t cap = d->nc * 2 + d->nw + d->nr + d->ns + 16;
    struct sample *sm = malloc(cap * sizeof(*sm));
    if (!sm)
        return -ENOMEM;
    size_t n = 0;
    /* per rank and class; every rank's (a class or family seen now and then) */
    for (size_t k = 0; k < d->ns; k++) {
        const struct cell *c = &d->s[k];
        if (!c->detail)
            continue;
        if (c->rank < d->n_ranks)
            d->rank_cells[c->rank]++;
        for (uint32_t j = 0; j < c->nc; j++) {
            const struct crow *r = &d->c[c->c0 + j];
            double v[4] = {r->run / r->count, r->coarse ? NAN : r->rmax,
                           r->qn > 0 ? r->q / r->qn : NAN, r->coarse || r->qn <= 0 ? NAN : r->qmax};
            sm[n].key = nkey(K_CLASS, r->rank, 0, r->cls, 0);
            memcpy(sm[n++].v, v, sizeof(v));
            if (r->step == 0)
                continue;
            int fam = r->cls < 256 ? d->family[r->cls] : -1;
            sm[n].key = fam >= 0 ? nkey(K_FAMILY, 0, 0, (uint32_t)fam, 0)
                                 : nkey(K_CLASS_ALL, 0, 0, r->cls, 0);
            memcpy(sm[n++].v, v, sizeof(v));
        }
    }
    /* waits per (rank, peer, class, place), releases per (rank, consumer,
     * class, place) */
    for (size_t i = 0; i < d->nw; i++) {
        const struct wrow *w = &d->w[i];
        sm[n++] = (struct sample){nkey(K_WAIT, w->rank, w->peer, w->cls, op_key(w->gen)),
                                  {(double)(w->t_end - w->t_begin), NAN, NAN, NAN}};
    }
    for (size_t i = 0; i < d->nr; i++) {
        const struct rrow *r = &d->r[i];
        sm[n++] = (struct sample){nkey(K_RELEASE, r->rank, r->consumer, r->cls, op_key(r->gen)),
                                  {xfer_time(r), notify_gap(r), NAN, NAN}};
    }
    for (size_t k = 0; k < d->ns; k++) {
        const struct cell *c = &d->s[k];
        sm[n++] = (struct sample){nkey(K_RANK, c->rank, 0, 0, 0),
                                  {cell_idle(d, c), c->qwi && !d->qwi_med ? (double)c->qwi : NAN,
                                   step_dur(c), cell_idle_derived(d, c)}};
    }
    int rc = add_norms(d, sm, n);
    free(sm);
    /* read from the aggregates: the queueing norm is every step's */
    for (uint32_t r = 0; !rc && d->qwi_med && r < d->n_ranks; r++) {
        struct norm *nm = norm_slot(d, nkey(K_RANK, r, 0, 0, 0), false);
        if (nm)
            nm->v[1] = d->qwi_med[r];
    }
    return rc;
}

/* ---- what one rank did: a step (against its norms) or a run of steps
 * (against its peers) ------------------------------------------------------------------ */

struct pcls { /* a task class */
    uint32_t cls;
    double count, run, rmax, q, qn, qmax;
    double r_mean, r_max, q_mean, q_max; /* reference: per task, longest (NAN unknown) */
    double wait_ex, wait_max_ex;          /* remote waits inside its tasks beyond their norm */
    double xfer_ex, xfer_max_ex;          /* its transfers beyond their norm */
    double ex, ex_max;                    /* run-time excess in all, of the longest */
    double occ;                           /* time its tasks held workers beyond their
                                             usual (waits and transfers included) */
    bool has_xfer;                        /* its tasks' transfers were measured */
};
struct pent { /* a wait or a release */
    const struct wrow *w;
    const struct rrow *r;
    uint32_t peer, op, cls;
    double a, b; /* excess of wait or transfer (a), notification (b); NAN unmeasured */
    double norm_a, norm_b;
    bool no_end; /* the producing task's end is unknown: the notification is
                    timed from the transfer's end, the task's rest included */
};
struct prof {
    uint32_t rank;
    double W, need;
    struct pcls *cls;
    size_t ncls, cap_cls;
    struct pent *w, *r;
    size_t nw, nr, cap_w, cap_r;
    double idle_ex;  /* NAN unknown */
    double qwi_ex;   /* NAN unknown */
    bool peers;      /* references are the peers' (a straggler run) */
    bool no_waits;   /* summaries below the full tier: no waits or releases */
};

static void prof_reset(struct prof *p, uint32_t rank, double W)
{
    p->rank = rank, p->W = W, p->need = 0;
    p->ncls = p->nw = p->nr = 0;
    p->idle_ex = p->qwi_ex = NAN;
    p->peers = p->no_waits = false;
}

static void prof_free(struct prof *p)
{
    free(p->cls);
    free(p->w);
    free(p->r);
}

static struct pcls *prof_cls(struct prof *p)
{
    if (p->ncls == p->cap_cls) {
        size_t cap = p->cap_cls ? 2 * p->cap_cls : 32;
        struct pcls *n = realloc(p->cls, cap * sizeof(*n));
        if (!n)
            return NULL;
        p->cls = n, p->cap_cls = cap;
    }
    struct pcls *c = &p->cls[p->ncls++];
    memset(c, 0, sizeof(*c));
    c->r_mean = c->r_max = c->q_mean = c->q_max = NAN;
    return c;
}

static struct pent *prof_ent(struct pent **arr, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        struct pent *e = realloc(*arr, nc * sizeof(*e));
        if (!e)
            return NULL;
        *arr = e, *cap = nc;
    }
    struct pent *e = &(*arr)[(*n)++];
    memset(e, 0, sizeof(*e));
    e->a = e->b = e->norm_a = e->norm_b = NAN;
    return e;
}

/* A class's usual per-task run and queue times on `rank`: its own median
 * when it ran in at least half of the rank's steps, else every rank's, or
 * its family's (ranks run the same program; a class chosen now and then
 * may have only faulted steps of its own). */
static const struct norm *class_norm(const struct diag *d, uint32_t rank, uint32_t cls)
{
    const struct norm *own = norm_get(d, nkey(K_CLASS, rank, 0, cls, 0));
    size_t steps = rank < d->n_ranks ? d->rank_cells[rank] : 0;
    if (own && 2 * (size_t)own->n >= steps)
        return own;
    int fam = cls < 256 ? d->family[cls] : -1;
    const struct norm *all = norm_get(d, fam >= 0 ? nkey(K_FAMILY, 0, 0, (uint32_t)fam, 0)
                                                  : nkey(K_CLASS_ALL, 0, 0, cls, 0));
    return all ? all : own;
}

/* The profile of one cell against the rank's norms (gen: the remote wait
 * that led here, 0 none). */
static int prof_cell(struct diag *d, const struct cell *c, uint64_t gen, const bool *visited,
                     struct prof *p)
{
    prof_reset(p, c->rank, workers_of(d, c->rank));
    p->no_waits = c->tier < 2;
    for (uint32_t j = 0; j < c->nc; j++) {
        const struct crow *r = &d->c[c->c0 + j];
        struct pcls *pc = prof_cls(p);
        if (!pc)
            return -ENOMEM;
        pc->cls = r->cls, pc->count = r->count, pc->run = r->run, pc->rmax = r->rmax;
        pc->q = r->q, pc->qn = r->qn, pc->qmax = r->qmax;
        const struct norm *nm = class_norm(d, c->rank, r->cls);
        if (nm)
            pc->r_mean = nm->v[0], pc->r_max = nm->v[1], pc->q_mean = nm->v[2],
            pc->q_max = nm->v[3];
    }
    for (uint32_t j = 0; j < c->nw; j++) {
        const struct wrow *w = &d->w[c->w0 + j];
        const struct norm *nm =
            norm_get(d, nkey(K_WAIT, w->rank, w->peer, w->cls, op_key(w->gen)));
        struct pent *e = prof_ent(&p->w, &p->nw, &p->cap_w);
        if (!e)
            return -ENOMEM;
        e->w = w, e->peer = w->peer, e->op = op_key(w->gen), e->cls = w->cls;
        e->norm_a = nm ? nm->v[0] : 0;
        e->a = (double)(w->t_end - w->t_begin) - e->norm_a;
        /* a wait on a rank already in the chain cannot explain it (in an
         * all-reduce every rank waits on every other) */
        if (visited && w->peer < MAX_RANKS && visited[w->peer])
            e->peer = UINT32_MAX;
    }
    /* Every release of the step counts, not only those toward the consumer
     * whose wait led here: its send may have queued behind the slow
     * transfers to the others (a comm-delay's first sends hold both
     * workers), which are then the cause. */
    (void)gen;
    for (uint32_t j = 0; j < c->nr; j++) {
        const struct rrow *r = &d->r[c->r0 + j];
        const struct norm *nm =
            norm_get(d, nkey(K_RELEASE, r->rank, r->consumer, r->cls, op_key(r->gen)));
        struct pent *e = prof_ent(&p->r, &p->nr, &p->cap_r);
        if (!e)
            return -ENOMEM;
        e->r = r, e->peer = r->consumer, e->op = op_key(r->gen), e->cls = r->cls;
        e->no_end = !r->t_end;
        e->norm_a = nm ? nm->v[0] : NAN, e->norm_b = nm ? nm->v[1] : NAN;
        double x = xfer_time(r), g = notify_gap(r);
        e->a = isnan(x) || isnan(e->norm_a) ? NAN : x - e->norm_a;
        e->b = isnan(g) || isnan(e->norm_b) ? NAN : g - e->norm_b;
    }
    /* Idle excess: the agent's measure (the step's span less the
     * worker's tasks) and the one taken from the step's time less its
     * tasks' run time; the larger counts (either may miss a worker held
     * outside any task, as a task kept from starting). */
    /* Both against the rank's neighbouring steps (DIAG_WINDOW either
     * side, as the step's own time is: a run whose load changes would make
     * a run-wide median of idle time wrong either way), the quieter side:
     * a side in a burst of the machine's load idles for its own reasons. */
    const struct norm *rn = norm_get(d, nkey(K_RANK, c->rank, 0, 0, 0));
    double idle = cell_idle(d, c), derived = cell_idle_derived(d, c);
    double ref[2] = {NAN, NAN};
    const size_t me = (size_t)(c - d->s);
    for (int side = 0; side < 2; side++) {
        double nb[2][DIAG_WINDOW];
        size_t nn[2] = {0, 0};
        for (size_t i = 1; i <= DIAG_WINDOW; i++) {
            if (side ? me + i >= d->ns : i > me)
                break;
            const struct cell *o = &d->s[side ? me + i : me - i];
            if (o->rank != c->rank)
                break;
            double v[2] = {cell_idle(d, o), cell_idle_derived(d, o)};
            for (int m = 0; m < 2; m++)
                if (!isnan(v[m]))
                    nb[m][nn[m]++] = v[m];
        }
        for (int m = 0; m < 2; m++)
            if (nn[m] >= 3) {
                double md = median(nb[m], nn[m]);
                if (isnan(ref[m]) || md < ref[m])
                    ref[m] = md;
            }
    }
    if (!isnan(idle) && !isnan(ref[0]))
        p->idle_ex = (idle - ref[0]) / p->W;
    if (c->has_workers && !isnan(derived) && !isnan(ref[1])) {
        double ex = (derived - ref[1]) / p->W;
        if (isnan(p->idle_ex) || ex > p->idle_ex)
            p->idle_ex = ex;
    }
    if (rn && !isnan(rn->v[1]))
        p->qwi_ex = (double)c->qwi - rn->v[1];
    return 0;
}

/* ---- scoring ---------------------------------------------------------------------------- */

static const char *cause_name[] = {"remote_stall", "local_imbalance", "slow_task",
                                   "slow_rank",    "notify_delay",    "slow_transfer"};
enum { C_REMOTE, C_IMBALANCE, C_SLOW_TASK, C_SLOW_RANK, C_NOTIFY, C_TRANSFER, C_N };

struct verdict {
    double score[C_N];
    int64_t cls[C_N];          /* task class behind each score, -1 none */
    double norm[C_N];          /* the usual value of what was late (0 unknown) */
    const struct wrow *wait;   /* the remote wait behind C_REMOTE: the longest of its peer */
    uint32_t peer;             /* the peer of C_REMOTE */
    double wait_ex;            /* that wait's own excess (the score sums the peer's) */
    const struct rrow *rel;    /* the release behind C_NOTIFY / C_TRANSFER */
    /* evidence of the class behind slow_task / local_imbalance */
    double run_ex, run_max_ex, queue_ex, queue_behind, queue_max_ex, count;
    int64_t ev_cls;
    double idle_ex;
    uint32_t classes_slower, classes_seen; /* slow_rank: classes longer than usual */
    double top_share;                      /* slow_rank: the largest class's share */
};

/* Whether entry i carries the largest value (field a or b) of its group:
 * entries of one peer (or any peer, peer_too false) and one transfer place
 * run side by side, so only the largest counts; other places follow one
 * another and add up.  Entries with no place are their own group. */
static bool ent_leads(const struct pent *e, size_t n, size_t i, bool use_b, bool peer_too)
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

static struct pcls *find_cls(struct prof *p, uint32_t cls)
{
    for (size_t i = 0; i < p->ncls; i++)
        if (p->cls[i].cls == cls)
            return &p->cls[i];
    return NULL;
}

static bool is_comm(const struct diag *d, uint32_t cls)
{
    return cls < 256 && d->comm_class[cls];
}

/* How much of a class's run-time excess its own queueing may owe to it:
 * W workers running n tasks each of a class late by x make the tasks behind
 * them wait (n - 1) / 2 x each on average (at least x in all once a worker
 * runs two); with one task a worker, none of the class waits behind
 * another. */
static double behind_factor(double waves)
{
    if (waves <= 1)
        return 0;
    return waves > 3 ? (waves - 1) / 2 : 1;
}

static void score_prof(const struct diag *d, struct prof *p, struct verdict *v)
{
    memset(v, 0, sizeof(*v));
    for (int i = 0; i < C_N; i++)
        v->cls[i] = -1;
    v->ev_cls = -1;
    v->idle_ex = p->idle_ex;
    const double W = p->W;
    /* Remote waits: a step waits on a peer once for each transfer of its
     * graph (each all-reduce of each layer), one after another, so what a
     * peer costs the step is the sum of those waits' excess.  Waits happen
     * inside a task of the waiting class: their excess is taken out of that
     * class's run time. */
    for (size_t i = 0; i < p->nw; i++) {
        const struct pent *e = &p->w[i];
        struct pcls *pc = find_cls(p, e->cls);
        if (pc && e->a > 0) {
            pc->wait_ex += e->a;
            if (e->a > pc->wait_max_ex)
                pc->wait_max_ex = e->a;
        }
    }
    for (size_t i = 0; i < p->nw; i++) {
        const struct pent *e = &p->w[i];
        if (e->peer == UINT32_MAX)
            continue;
        bool seen = false; /* each peer once, at its first entry */
        for (size_t j = 0; j < i && !seen; j++)
            seen = p->w[j].peer == e->peer;
        if (seen)
            continue;
        double sum = 0;
        const struct pent *top = e;
        for (size_t j = i; j < p->nw; j++) {
            const struct pent *f = &p->w[j];
            if (f->peer != e->peer)
                continue;
            if (ent_leads(p->w, p->nw, j, false, true))
                sum += f->a;
            if (f->a > top->a)
                top = f;
        }
        if (sum > v->score[C_REMOTE]) {
            v->score[C_REMOTE] = sum, v->wait = top->w, v->peer = top->peer;
            v->cls[C_REMOTE] = top->cls, v->norm[C_REMOTE] = top->norm_a;
            v->wait_ex = top->a;
        }
    }
    /* Releases: transfers and notifications of the step, one after another;
     * the side-by-side sends of one transfer count once.  A transfer inside
     * a task is part of its run time. */
    double xfer = 0, notify = 0;
    const struct pent *bx = NULL, *bn = NULL;
    for (size_t i = 0; i < p->nr; i++) {
        const struct pent *e = &p->r[i];
        struct pcls *pc = find_cls(p, e->cls);
        if (ent_leads(p->r, p->nr, i, false, false))
            xfer += e->a;
        /* each send's run time holds its own transfer, side by side or not */
        if (pc && e->a > 0) {
            pc->xfer_ex += e->a;
            if (e->a > pc->xfer_max_ex)
                pc->xfer_max_ex = e->a;
        }
        if (!isnan(e->a) && pc)
            pc->has_xfer = true;
        if (!isnan(e->a) && (!bx || e->a > bx->a))
            bx = e;
    }
    /* Task classes' run-time excess, less the waits and transfers inside
     * their tasks. */
    for (size_t i = 0; i < p->ncls; i++) {
        struct pcls *pc = &p->cls[i];
        pc->ex = pc->ex_max = pc->occ = 0;
        if (pc->count <= 0 || isnan(pc->r_mean))
            continue;
        pc->occ = pc->run - pc->count * pc->r_mean;
        pc->ex = pc->occ - pc->wait_ex - pc->xfer_ex;
        if (pc->rmax > 0 && !isnan(pc->r_max) && pc->r_max > 0)
            pc->ex_max = pc->rmax - pc->r_max - pc->wait_max_ex - pc->xfer_max_ex;
    }
    /* A release timed from its transfer's end (the task's end unknown) is
     * late by whatever the task still ran after the transfer: a task late
     * by x makes each of its releases late by x, which is the slow task's,
     * not the notification's. */
    for (size_t i = 0; i < p->nr; i++) {
        struct pent *e = &p->r[i];
        struct pcls *pc = e->no_end ? find_cls(p, e->cls) : NULL;
        if (pc && !isnan(e->b) && pc->ex > 0 && pc->count > 0) {
            double per = pc->ex / pc->count > pc->ex_max ? pc->ex / pc->count : pc->ex_max;
            e->b = e->b > per ? e->b - per : (e->b > 0 ? 0 : e->b);
        }
    }
    for (size_t i = 0; i < p->nr; i++) {
        const struct pent *e = &p->r[i];
        if (ent_leads(p->r, p->nr, i, true, false))
            notify += e->b;
        if (!isnan(e->b) && (!bn || e->b > bn->b))
            bn = e;
    }
    if (bx && xfer > 0) {
        v->score[C_TRANSFER] = xfer, v->cls[C_TRANSFER] = bx->cls, v->norm[C_TRANSFER] = bx->norm_a;
        v->rel = bx->r;
    }
    if (bn && notify > 0) {
        v->score[C_NOTIFY] = notify, v->cls[C_NOTIFY] = bn->cls, v->norm[C_NOTIFY] = bn->norm_b;
        if (!v->rel || notify >= xfer)
            v->rel = bn->r;
    }
    /* Task classes.  Run-time excess is a slow task; queueing excess is
     * imbalance only where the run-time excess of the tasks ahead cannot
     * explain it: W workers running n tasks each of a class late by x make
     * the tasks behind them wait (n - 1) / 2 x on average, so a class's own
     * run-time excess explains that much of its queueing, and the other
     * classes' run-time excess once more. */
    double q_sum = 0, q_best = 0, run_total = 0, run_top = 0, norm_total = 0, run_all = 0;
    int64_t q_cls = -1;
    uint32_t seen = 0, slower = 0;
    const struct pcls *top = NULL;
    /* Tasks of one class also queue behind the slow tasks of another on
     * their worker (sends behind a router that runs long): every class's
     * queueing may owe up to the others' run-time excess, once, and its
     * longest wait the longest task of any other class. */
    /* (what held a worker counts: a task in a transfer or a wait blocks
     * the tasks behind it as a slow one does; that queueing is its cause's) */
    double occ_all = 0;
    for (size_t i = 0; i < p->ncls; i++)
        if (p->cls[i].occ > 0)
            occ_all += p->cls[i].occ;
    for (size_t i = 0; i < p->ncls; i++) {
        struct pcls *pc = &p->cls[i];
        if (pc->count <= 0 || isnan(pc->r_mean))
            continue;
        double inside = pc->wait_ex + pc->xfer_ex;
        double ex = pc->ex, ex_max = pc->ex_max;
        double st = ex / W > ex_max ? ex / W : ex_max;
        /* A communication task that runs long, with no transfer measured
         * inside it and no remote wait (a reduce waits, it does not
         * transfer), is a slow transfer. */
        bool as_xfer = is_comm(d, pc->cls) && !d->xfer_cls[pc->cls & 255] &&
                       !d->waiter_cls[pc->cls & 255];
        /* without wait records a waiting class's run time is waits and
         * work in unknown parts: no slow task can be read from it */
        if (p->no_waits && d->waiter_cls[pc->cls & 255])
            st = 0;
        int cause = as_xfer ? C_TRANSFER : C_SLOW_TASK;
        if (st > v->score[cause]) {
            v->score[cause] = st, v->cls[cause] = pc->cls, v->norm[cause] = pc->r_mean;
            if (cause == C_TRANSFER)
                v->rel = NULL;
        }
        if (!is_comm(d, pc->cls)) {
            seen++;
            run_all += pc->run - inside;
            norm_total += pc->count * pc->r_mean;
            if (ex > 0) {
                run_total += ex;
                if (ex > 0.1 * pc->count * pc->r_mean)
                    slower++;
                if (ex > run_top)
                    run_top = ex, top = pc;
            }
        }
        /* tasks one worker runs of the class in the step (an upper bound:
         * the step's operators of the class add up) */
        double waves = ceil(pc->count / W);
        double own = pc->occ > 0 ? pc->occ : 0;
        double behind = own * behind_factor(waves) + (occ_all - own);
        if (pc->qn > 0 && !isnan(pc->q_mean)) {
            double qe = pc->q - pc->qn * pc->q_mean;
            double qu = qe - behind;
            double qm = 0;
            /* the longest wait in a queue, less the longest tasks that can
             * be ahead of it on its worker */
            double ahead = ex_max > 0 ? ex_max * (waves - 1) : 0;
            for (size_t j = 0; j < p->ncls; j++)
                if (j != i && p->cls[j].ex_max > ahead)
                    ahead = p->cls[j].ex_max;
            if (pc->qmax > 0 && !isnan(pc->q_max))
                qm = pc->qmax - pc->q_max - ahead;
            if (qu > 0)
                q_sum += qu;
            double here = qu / W > qm ? qu / W : qm;
            if (here > q_best)
                q_best = here, q_cls = pc->cls;
        }
    }
    double q_score = q_sum / W > q_best ? q_sum / W : q_best;
    if (!isnan(p->qwi_ex))
        q_score = p->qwi_ex; /* the agent measured it */
    else if (!isnan(p->idle_ex) && p->idle_ex < q_score)
        q_score = p->idle_ex; /* imbalance needs idle workers */
    v->score[C_IMBALANCE] = q_score > 0 ? q_score : 0;
    v->cls[C_IMBALANCE] = q_cls;
    /* A rank slow in everything: run-time excess over most classes, none
     * holding most of it, or every other class as much slower in
     * proportion as the slowest. */
    v->classes_seen = seen, v->classes_slower = slower;
    v->top_share = run_total > 0 ? run_top / run_total : 0;
    if (top && seen >= 3 && run_total > 0) {
        double top_norm = top->count * top->r_mean;
        double rest_ratio = norm_total - top_norm > 0
                                ? (run_all - (top->run - top->wait_ex - top->xfer_ex)) /
                                      (norm_total - top_norm)
                                : 1;
        double top_ratio = top_norm > 0 ? (top->run - top->wait_ex - top->xfer_ex) / top_norm : 1;
        bool spread = (run_top <= SPREAD_TOP * run_total && slower >= 3) ||
                      (rest_ratio >= 1.1 && rest_ratio - 1 >= 0.5 * (top_ratio - 1));
        if (spread)
            v->score[C_SLOW_RANK] = run_total / W;
    }
    /* evidence: the class behind the slow task, or the imbalance */
    int64_t ec = v->score[C_SLOW_TASK] >= v->score[C_IMBALANCE] ? v->cls[C_SLOW_TASK] : q_cls;
    struct pcls *pc = ec >= 0 ? find_cls(p, (uint32_t)ec) : NULL;
    if (pc) {
        double inside = pc->wait_ex + pc->xfer_ex;
        v->ev_cls = ec, v->count = pc->count;
        v->run_ex = isnan(pc->r_mean) ? 0 : pc->run - pc->count * pc->r_mean - inside;
        v->run_max_ex = pc->rmax > 0 && pc->r_max > 0 ? pc->rmax - pc->r_max : 0;
        v->queue_ex = pc->qn > 0 && !isnan(pc->q_mean) ? pc->q - pc->qn * pc->q_mean : 0;
        double waves = ceil(pc->count / p->W), own = pc->occ > 0 ? pc->occ : 0;
        v->queue_behind = own * behind_factor(waves) + (occ_all - own);
        if (v->queue_behind > v->queue_ex)
            v->queue_behind = v->queue_ex > 0 ? v->queue_ex : 0;
        v->queue_max_ex = pc->qmax > 0 && !isnan(pc->q_max) ? pc->qmax - pc->q_max : 0;
    }
}

/* The decision: the largest cause, when it explains enough of `need` and
 * no other comes close.  Returns the cause, or -1 (undecided) with *second
 * the runner-up; *share the part of need the best explains. */
struct decision {
    int best, second;
    double share, second_share;
    bool close; /* undecided because the runner-up is too close */
    bool weak;  /* undecided because nothing explains enough */
};

static struct decision decide(const struct diag *d, const struct verdict *v, double need)
{
    struct decision k = {.best = 0, .second = -1};
    for (int c = 1; c < C_N; c++)
        if (v->score[c] > v->score[k.best])
            k.best = c;
    for (int c = 0; c < C_N; c++)
        if (c != k.best && v->score[c] > 0 && (k.second < 0 || v->score[c] > v->score[k.second]))
            k.second = c;
    /* slow_rank is the sum of the classes' excess: the largest class is
     * part of it, not a rival */
    if (k.best == C_SLOW_RANK && k.second == C_SLOW_TASK) {
        k.second = -1;
        for (int c = 0; c < C_N; c++)
            if (c != C_SLOW_RANK && c != C_SLOW_TASK && v->score[c] > 0 &&
                (k.second < 0 || v->score[c] > v->score[k.second]))
                k.second = c;
    }
    double best = v->score[k.best], second = k.second >= 0 ? v->score[k.second] : 0;
    need = need > 0 ? need : best;
    k.share = need > 0 ? best / need : 0;
    k.second_share = need > 0 ? second / need : 0;
    double floor_ns = (double)d->o.min_excess_ns / 4;
    double thresh = DIAG_SHARE * need > floor_ns ? DIAG_SHARE * need : floor_ns;
    /* Slow tasks and queueing are scored per class by the longest one (or
     * the excess spread over the workers): a lower bound when the class is
     * late in several operators of the step (each layer's), so a class
     * that stands well above every other cause is named with a smaller
     * share of the delay. */
    if (second * DIAG_DOMINANT <= best && DIAG_DOMINANT_SHARE * need < thresh)
        thresh = DIAG_DOMINANT_SHARE * need > floor_ns ? DIAG_DOMINANT_SHARE * need : floor_ns;
    if (best < thresh || best <= 0)
        k.weak = true;
    else if (second >= DIAG_CLOSE * best)
        k.close = true;
    return k;
}

/* ---- chains ----------------------------------------------------------------------------- */

struct link {
    uint32_t rank;
    int cause; /* C_*, or -1 undecided */
    double lateness, share, second_share;
    int second; /* runner-up cause, -1 none */
    int64_t cls;
    uint64_t gen;
    uint32_t peer;
    double cov_ratio; /* -1 unknown */
    double norm;      /* the rank's usual value of what was late (0 unknown) */
    bool has_verdict;
    struct verdict v;
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
    struct cell *pc = cell_at(d, w->peer, w->step);
    for (uint32_t j = 0; pc && j < pc->nr && n < 8; j++) {
        const struct rrow *r = &d->r[pc->r0 + j];
        if (r->gen == w->gen && r->t_rel)
            rel[n++] = (struct mks_release_rec){.rank = r->rank, .task_class = r->cls,
                                                .comm_gen = w->gen, .t_release = r->t_rel};
    }
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

static void set_link(struct link *L, const struct verdict *v, const struct decision *k)
{
    L->has_verdict = true;
    L->v = *v;
    L->share = k->share;
    L->second = k->second;
    L->second_share = k->second_share;
}

static void undecided_reason(struct chain *ch, const struct link *L, const struct verdict *v,
                             const struct decision *k, double need)
{
    if (k->close)
        snprintf(ch->reason, sizeof(ch->reason),
                 "rank %u: %s (%.0f us, %.0f%% of the delay) and %s (%.0f us, %.0f%%) are too"
                 " close to tell apart",
                 L->rank, cause_name[k->best], v->score[k->best] / 1e3, 100 * k->share,
                 cause_name[k->second], v->score[k->second] / 1e3, 100 * k->second_share);
    else
        snprintf(ch->reason, sizeof(ch->reason),
                 "rank %u: no observed cause explains %.0f us of delay (largest: %s, %.0f us)",
                 L->rank, need / 1e3, cause_name[k->best], v->score[k->best] / 1e3);
}

static int build_chain(struct diag *d, uint32_t rank, uint32_t step, double excess,
                       struct chain *ch, struct prof *p)
{
    memset(ch, 0, sizeof(*ch));
    uint64_t gen = 0;
    double need = excess;
    bool visited[MAX_RANKS] = {false};
    while (ch->n < MAX_CHAIN) {
        struct link *L = &ch->l[ch->n++];
        L->rank = rank, L->cls = -1, L->cause = -1, L->cov_ratio = -1, L->second = -1;
        struct cell *c = cell_at(d, rank, step);
        if (!c || !c->detail) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "rank %u sent no step %u in its summaries: is its agent running?", rank, step);
            break;
        }
        if (c->elig > 0) {
            L->cov_ratio = c->ran / c->elig;
            ch->elig += c->elig, ch->ran += c->ran, ch->thr += c->thr, ch->lost += c->lost;
        }
        if (rank < MAX_RANKS)
            visited[rank] = true;
        if (L->cov_ratio >= 0 && L->cov_ratio < d->o.min_coverage) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "coverage on rank %u in step %u is %.0f%% (below %.0f%%): lower the"
                     " sampling or raise the budget",
                     rank, step, 100 * L->cov_ratio, 100 * d->o.min_coverage);
            break;
        }
        if (c->withheld) {
            /* its tasks are in rows of no step, its waits were not sent:
             * any cause read from them would be a guess */
            snprintf(ch->reason, sizeof(ch->reason),
                     "rank %u withheld the detail of step %u (its agent's --step-detail auto"
                     " found it no slower than its recent steps): no cause can be followed",
                     rank, step);
            break;
        }
        int rc = prof_cell(d, c, gen, visited, p);
        if (rc)
            return rc;
        struct verdict v;
        score_prof(d, p, &v);
        struct decision k = decide(d, &v, need);
        set_link(L, &v, &k);
        if (k.weak || k.close) {
            undecided_reason(ch, L, &v, &k, need);
            if (c->tier < 2)
                snprintf(ch->reason, sizeof(ch->reason),
                         "rank %u sent step %u without wait and release records (detail tier"
                         " %u: the budget, or a busy collector): no cause can be followed",
                         rank, step, c->tier);
            L->lateness = v.score[k.best];
            break;
        }
        int best = k.best;
        L->cause = best;
        L->cls = best == C_SLOW_RANK ? -1 : v.cls[best];
        L->lateness = v.score[best];
        L->norm = v.norm[best];
        if (best != C_REMOTE) {
            if (v.rel && (best == C_NOTIFY || best == C_TRANSFER)) {
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
        if (w->peer >= MAX_RANKS || visited[w->peer]) {
            snprintf(ch->reason, sizeof(ch->reason),
                     "wait cycle: rank %u waits on rank %u, already in the chain", rank, w->peer);
            L->cause = -1;
            break;
        }
        gen = w->gen;
        need = v.score[best];
        rank = w->peer;
    }
    return 0;
}

/* ---- host CPU contention ------------------------------------------------------------ */

/* A rank's device time on the job's time line (the clock model when there
 * is one; the CPU backend's ranks share CLOCK_MONOTONIC). */
static double aligned_ns(const struct diag *d, uint32_t rank, uint64_t t)
{
    struct mks_aligned_time a;
    if (d->clock && mks_clock_align(d->clock, rank, t, &a) == 0)
        return (double)a.t_ns;
    return (double)t;
}

/* Host CPU contention of rank r while step k was slow: its workers' wait
 * for a CPU in [t0, t1] (the slowest rank's step k, aligned), each of its
 * steps around k counted by the share of its span inside, less what as
 * many runs on a CPU cost it in the steps around (the median wait per run
 * of each side's DIAG_WINDOW steps, step k left out, the quieter side's:
 * a step's time is judged against its quieter side too, a side in a burst
 * says nothing about it).  A rank late into the next step (it
 * overran the last) is caught by the window; a rank that sleeps more in
 * the step (a slow body that blocks) runs more often at the usual wait
 * per run.  NAN when not measured. */
static double cw_excess(const struct diag *d, const uint32_t *steps, size_t n_steps, size_t k,
                        uint32_t r, double t0, double t1)
{
    double w = 0, n = 0, v[DIAG_WINDOW];
    bool any = false;
    for (size_t q = k > 2 ? k - 2 : 0; q < n_steps && q <= k + 1; q++) {
        const struct cell *c = cell_at(d, r, steps[q]);
        if (!c)
            continue;
        double b = aligned_ns(d, r, c->t_begin), e = aligned_ns(d, r, c->t_end);
        double lo = b > t0 ? b : t0, hi = e < t1 ? e : t1;
        if (hi <= lo || e <= b)
            continue;
        if (isnan(c->cw) || isnan(c->cr))
            return NAN; /* part of the time not measured */
        w += c->cw * (hi - lo) / (e - b), n += c->cr * (hi - lo) / (e - b);
        any = true;
    }
    double usual = NAN;
    for (int side = 0; side < 2; side++) {
        size_t nv = 0, a = side ? k + 1 : (k > DIAG_WINDOW ? k - DIAG_WINDOW : 0),
               z = side ? (k + 1 + DIAG_WINDOW < n_steps ? k + 1 + DIAG_WINDOW : n_steps) : k;
        for (size_t q = a; q < z; q++) {
            const struct cell *cq = cell_at(d, r, steps[q]);
            if (cq && !isnan(cq->cw) && cq->cr >= 1)
                v[nv++] = cq->cw / cq->cr;
        }
        double m = nv >= 3 ? median(v, nv) : NAN;
        if (!isnan(m) && (isnan(usual) || m < usual))
            usual = m;
    }
    return any && !isnan(usual) ? w - n * usual : NAN;
}

/* The part of a rank's summed CPU wait that its step's critical path can
 * have waited: the path runs through one thread at a time while the waits
 * of W threads add up side by side (all of a rank's workers woken by one
 * transfer wait at once), so the sum overstates it by up to W and the mean
 * understates it by as much; the geometric middle, sum / sqrt(W), is what
 * is compared with the step's excess.  With many workers a fault's wakeups
 * (every worker waking after a long wait waits for a core on a loaded
 * host) would otherwise outweigh the fault's own delay. */
static double on_path(const struct diag *d, uint32_t rank, double summed)
{
    return summed / sqrt(workers_of(d, rank));
}

/* Whether a loaded host explains slow step k (its excess, slowest rank
 * `slowest`) on one of ranks[0..n): the largest CPU wait beyond the usual
 * on the step's path among them (on_path; its rank in *rank_p) when it is
 * three quarters of the excess or more, or all but less than makes a step
 * slow (thr).  Three quarters: on a host loaded to 10-20 times its cores a
 * fault's own steps show waits of half their excess and more (its workers
 * wake after long waits), and a fault's five steps split into two parts
 * of two would each be too short to show.  NAN: not explained, or not
 * measured. */
#define HOST_SHARE 0.75
static double host_explains(const struct diag *d, const uint32_t *steps, size_t n_steps,
                            size_t k, uint32_t slowest, double excess, double thr,
                            const uint32_t *ranks, size_t n, uint32_t *rank_p,
                            double *summed_p)
{
    const struct cell *sc = cell_at(d, slowest, steps[k]);
    if (!sc)
        return NAN;
    double t0 = aligned_ns(d, slowest, sc->t_begin), t1 = aligned_ns(d, slowest, sc->t_end);
    double best = NAN;
    for (size_t i = 0; i < n; i++) {
        double sum = cw_excess(d, steps, n_steps, k, ranks[i], t0, t1);
        double cx = on_path(d, ranks[i], sum);
        if (!isnan(cx) && (isnan(best) || cx > best))
            best = cx, *rank_p = ranks[i], *summed_p = sum;
    }
    return !isnan(best) && best > 0 && (best >= HOST_SHARE * excess || excess - best < thr) ? best
                                                                                         : NAN;
}

struct tgroup { /* slow steps of one root rank, none further than DIAG_GROUP_GAP from the last */
    size_t first, worst; /* step indexes */
    uint32_t last_step, first_step;
    size_t *ks; /* its steps' indexes */
    json_t *steps;
    size_t n;
    double total;
    bool absorbed;
    bool contended; /* steps a loaded host's CPU wait explains (cont[k]) */
};

/* ---- stragglers: one rank its peers wait on, step after step ---------------------------- */

struct segment {
    uint32_t rank, first, last; /* steps first..last */
    double blame;               /* median over the run: what its peers wait on it, a step */
    double frac;                /* share of the run's steps with positive blame */
    size_t n;                   /* steps with a blame */
    bool kept;                  /* its group is shown (a cause explains it) */
    size_t go;                  /* kept: its group's place among the groups out */
};

struct blame {
    uint32_t n_steps;
    uint32_t *step;   /* [n_steps] distinct steps with waits, ascending */
    double *in, *out; /* [n_steps * R]: peers' mean wait on r; r's mean wait on its peers */
    bool *held;       /* [n_steps * R]: r slowed by a loaded host in the step (no blame) */
    uint32_t R;
};

static void blame_free(struct blame *b)
{
    free(b->step);
    free(b->in);
    free(b->out);
    free(b->held);
    memset(b, 0, sizeof(*b));
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Per step and rank: the mean over its peers of the time each waited on it
 * (their waits summed over the step's transfers), and the mean over its
 * peers of the time it waited on each. */
struct wref { /* a wait by its step */
    uint32_t step;
    uint32_t i;
};

static int cmp_wref(const void *a, const void *b)
{
    uint32_t x = ((const struct wref *)a)->step, y = ((const struct wref *)b)->step;
    return x < y ? -1 : x > y;
}

static int build_blame(struct diag *d, struct blame *b)
{
    memset(b, 0, sizeof(*b));
    uint32_t R = d->n_ranks;
    if (R < 2 || R > 256 || !d->nw)
        return 0;
    /* the waits in step order, each step's summed in one R x R matrix */
    struct wref *idx = d->nw < UINT32_MAX ? malloc(d->nw * sizeof(*idx)) : NULL;
    uint32_t *steps = malloc(d->nw * sizeof(*steps));
    double *sum = malloc((size_t)R * R * sizeof(double));
    bool *any = malloc(R * sizeof(bool));
    if (!idx || !steps || !sum || !any) {
        free(idx), free(steps), free(sum), free(any);
        return -ENOMEM;
    }
    for (size_t i = 0; i < d->nw; i++)
        idx[i] = (struct wref){.step = d->w[i].step, .i = (uint32_t)i};
    qsort(idx, d->nw, sizeof(*idx), cmp_wref);
    size_t n = 0;
    for (size_t i = 0; i < d->nw; i++)
        if (!n || steps[n - 1] != idx[i].step)
            steps[n++] = idx[i].step;
    b->step = steps, b->n_steps = (uint32_t)n, b->R = R;
    b->in = malloc(n * R * sizeof(double));
    b->out = malloc(n * R * sizeof(double));
    b->held = malloc(n * R * sizeof(bool));
    if (!b->in || !b->out || !b->held) {
        free(idx), free(sum), free(any);
        blame_free(b);
        return -ENOMEM;
    }
    size_t i = 0;
    for (size_t k = 0; k < n; k++) {
        memset(sum, 0, (size_t)R * R * sizeof(double));
        for (; i < d->nw && idx[i].step == steps[k]; i++) {
            const struct wrow *w = &d->w[idx[i].i];
            if (w->rank >= R || w->peer >= R || w->peer == w->rank)
                continue;
            /* a step whose epochs are not all loaded has only some of its waits */
            const struct cell *c = cell_at(d, w->rank, w->step);
            if (c && !c->detail)
                continue;
            sum[(size_t)w->rank * R + w->peer] += (double)(w->t_end - w->t_begin);
        }
        /* a rank that reported no waits this step is not counted */
        for (uint32_t x = 0; x < R; x++) {
            any[x] = false;
            for (uint32_t y = 0; y < R && !any[x]; y++)
                any[x] = sum[(size_t)x * R + y] > 0;
        }
        for (uint32_t r = 0; r < R; r++) {
            double in = 0, out = 0;
            uint32_t nin = 0, nout = 0;
            for (uint32_t q = 0; q < R && any[r]; q++) {
                if (q == r)
                    continue;
                if (any[q])
                    in += sum[(size_t)q * R + r], nin++;
                out += sum[(size_t)r * R + q], nout++;
            }
            b->in[k * R + r] = nin && nout ? in / nin : NAN;
            b->out[k * R + r] = nin && nout ? out / nout : NAN;
        }
        /* A rank a loaded host slowed in the step (its workers waited
         * for a CPU) kept its peers waiting for no fault of its own: no
         * blame there, so that a host's lag neither makes a straggler nor
         * joins one with a fault's steps into one run judged as a whole. */
        for (uint32_t r = 0; r < R; r++) {
            const struct cell *c = cell_at(d, r, steps[k]);
            b->held[k * R + r] = c && c->host_held;
        }
    }
    free(idx), free(sum), free(any);
    return 0;
}

static double blame_at(const struct blame *b, size_t k, uint32_t r)
{
    double in = b->in[k * b->R + r], out = b->out[k * b->R + r];
    return isnan(in) || isnan(out) || b->held[k * b->R + r] ? NAN : in - out;
}

static int seg_push(struct segment **out, size_t *n, size_t *cap, struct segment sg)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        struct segment *ns = realloc(*out, nc * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        *out = ns, *cap = nc;
    }
    (*out)[(*n)++] = sg;
    return 0;
}

/* Runs of steps where one rank's blame stays above tau: the rolling median
 * over SEG_WIN steps at or above tau, for SEG_MIN steps or more, its median
 * blame above tau and positive in SEG_FRAC of the steps. */
struct slow_ref {
    double ex;
    size_t k;
};

static int cmp_slow_ref(const void *a, const void *b)
{
    const struct slow_ref *x = a, *y = b;
    if (x->ex != y->ex)
        return x->ex > y->ex ? -1 : 1; /* larger excess first */
    return x->k < y->k ? -1 : x->k > y->k;
}

/* Keeps as slow the slowest steps (by excess) that fall in at most
 * DIAG_SLOW_RUNS runs of blk steps.  The others are left out, and
 * counted as slow but not examined. */
static int pick_slow(bool *slow, const double *exs, size_t n, size_t blk)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        m += slow[k];
    struct slow_ref *ord = malloc((m + 1) * sizeof(*ord));
    bool *run = calloc(n / blk + 1, sizeof(bool));
    if (!ord || !run) {
        free(ord);
        free(run);
        return -ENOMEM;
    }
    m = 0;
    for (size_t k = 0; k < n; k++)
        if (slow[k])
            ord[m++] = (struct slow_ref){.ex = exs[k], .k = k};
    qsort(ord, m, sizeof(*ord), cmp_slow_ref);
    size_t used = 0;
    for (size_t i = 0; i < m; i++) {
        size_t r = ord[i].k / blk;
        if (!run[r] && used >= DIAG_SLOW_RUNS) {
            slow[ord[i].k] = false;
            continue;
        }
        used += !run[r], run[r] = true;
    }
    free(ord);
    free(run);
    return 0;
}

/* What a straggler run weighs: its blame over its length. */
static double seg_weight(const struct segment *g)
{
    return g->blame * (double)(g->last - g->first + 1);
}

static int find_segments(struct diag *d, const struct blame *b, double tau, struct segment **out,
                         size_t *n_out)
{
    *out = NULL, *n_out = 0;
    size_t cap = 0, n = b->n_steps;
    if (n < SEG_MIN)
        return 0;
    double *z = malloc(n * sizeof(double)), *win = malloc(SEG_WIN * sizeof(double));
    bool *hi = calloc(n, sizeof(bool));
    if (!z || !win || !hi) {
        free(z), free(win), free(hi);
        return -ENOMEM;
    }
    for (uint32_t r = 0; r < b->R; r++) {
        for (size_t k = 0; k < n; k++)
            z[k] = blame_at(b, k, r);
        for (size_t k = 0; k < n; k++) {
            size_t lo = k >= SEG_WIN / 2 ? k - SEG_WIN / 2 : 0;
            size_t up = k + SEG_WIN / 2 + 1 < n ? k + SEG_WIN / 2 + 1 : n;
            size_t m = 0;
            for (size_t x = lo; x < up; x++)
                if (!isnan(z[x]))
                    win[m++] = z[x];
            /* at the run's ends the window is short: ask for most of it */
            hi[k] = m >= (SEG_WIN + 1) / 2 && median(win, m) >= tau;
        }
        /* runs of hi, their edges taken out to the neighbours above tau (a
         * step function's rolling median turns at its edge, a ramp's a
         * little inside), runs less than two windows apart joined: a
         * straggler near the noise dips now and then */
        size_t k = 0, ra = 0, re = 0;
        bool open = false;
        while (k <= n) {
            bool at_end = k == n;
            if (!at_end && !hi[k]) {
                k++;
                continue;
            }
            size_t a = k, e = k;
            if (!at_end) {
                while (e + 1 < n && hi[e + 1])
                    e++;
                while (a > 0 && !isnan(z[a - 1]) && z[a - 1] >= tau)
                    a--;
                while (e + 1 < n && !isnan(z[e + 1]) && z[e + 1] >= tau)
                    e++;
                k = e + 1;
            }
            if (open && !at_end && a <= re + 2 * SEG_WIN) {
                re = e; /* join */
                continue;
            }
            if (open) {
                /* validate the run ra..re */
                size_t m = 0, pos = 0;
                double *v = scratch(d, re - ra + 1);
                if (!v)
                    goto oom;
                for (size_t x = ra; x <= re; x++)
                    if (!isnan(z[x])) {
                        v[m++] = z[x];
                        pos += z[x] > 0;
                    }
                double med = m ? median(v, m) : 0, frac = m ? (double)pos / (double)m : 0;
                /* a run over every step asked about may be longer than
                 * what was asked: no penalty for its length.  Its first
                 * and last few steps may fall short (a run's first steps
                 * start ranks at different times; the rolling median turns
                 * a little inside the ends) */
                bool whole = ra <= SEG_WIN / 2 && re + 1 + SEG_WIN / 2 >= n;
                double need = whole ? tau : tau * (1 + SEG_SHORT / (double)m);
                if (m >= SEG_MIN && b->step[re] - b->step[ra] + 1 >= SEG_MIN && med >= need &&
                    frac >= SEG_FRAC &&
                    seg_push(out, n_out, &cap,
                             (struct segment){.rank = r, .first = b->step[ra], .last = b->step[re],
                                              .blame = med, .frac = frac, .n = m}))
                    goto oom;
            }
            if (at_end)
                break;
            open = true, ra = a, re = e;
        }
        /* A steady straggler: late in nearly every step asked about, by
         * less than tau (its blame dips under tau now and then, so no
         * rolling median holds above it).  Noise is not steady: a loaded
         * machine's rank is late in bursts and early in between. */
        if (*n_out && (*out)[*n_out - 1].rank == r)
            continue;
        size_t m = 0, pos = 0;
        double *v = scratch(d, n);
        if (!v)
            goto oom;
        for (size_t x = 0; x < n; x++)
            if (!isnan(z[x])) {
                v[m++] = z[x];
                pos += z[x] > 0;
            }
        double med = m ? median(v, m) : 0, frac = m ? (double)pos / (double)m : 0;
        if (m >= SEG_MIN && (double)m >= 0.8 * (double)n && med >= SEG_STEADY_REL * tau &&
            frac >= SEG_STEADY &&
            seg_push(out, n_out, &cap,
                     (struct segment){.rank = r, .first = b->step[0], .last = b->step[n - 1],
                                      .blame = med, .frac = frac, .n = m}))
            goto oom;
    }
    free(z), free(win), free(hi);
    return 0;
oom:
    free(z), free(win), free(hi);
    return -ENOMEM;
}

/* Class key across ranks: an expert's family (each rank owns its own). */
static uint32_t xclass(const struct diag *d, uint32_t cls)
{
    int fam = cls < 256 ? d->family[cls] : -1;
    return fam >= 0 ? (uint32_t)fam : cls;
}

/* The first cell of `rank` at or after `step`. */
static size_t cell_from(const struct diag *d, uint32_t rank, uint32_t step)
{
    struct cell key = {.rank = rank, .step = step};
    size_t lo = 0, hi = d->ns;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp_cell(&d->s[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A straggler's profile uses at most this many steps of its run, evenly
 * spread: medians over them are as good as over all. */
#define SEG_PROFILE_STEPS 512
#define SEG_MAX_KEYS 256
#define SEG_WAIT_CLASSES 256

/* The straggler's profile over the steps of a segment against its peers:
 * per class (experts by family) its run, count, longest task and queueing,
 * and per release place its transfer and notification: its median over the
 * steps, against the median over the steps of its peers' median.  Values of
 * one rank, key and step add up (a family's members); releases of one place
 * (the sends to each peer) count by their largest.  A class's peers are
 * compared per task: their counts differ from rank to rank. */
static int prof_segment(struct diag *d, const struct segment *sg, struct prof *p)
{
    const uint32_t R = d->n_ranks;
    prof_reset(p, sg->rank, workers_of(d, sg->rank));
    p->peers = true;
    uint32_t span = sg->last - sg->first + 1;
    uint32_t stride = span > SEG_PROFILE_STEPS ? (span + SEG_PROFILE_STEPS - 1) / SEG_PROFILE_STEPS
                                               : 1;
    size_t max_steps = span / stride + 2;
    uint64_t keys[SEG_MAX_KEYS];
    double *kv[SEG_MAX_KEYS] = {0}; /* per key: per step me[5], peers[5] */
    size_t kn[SEG_MAX_KEYS] = {0}, nk = 0;
    bool noend[SEG_MAX_KEYS] = {0};
    double *acc = calloc((size_t)R * SEG_MAX_KEYS * 5, sizeof(double));
    bool *set = calloc((size_t)R * SEG_MAX_KEYS, sizeof(bool));
    double *tmp = malloc((R + 1) * sizeof(double));
    double *med = malloc((max_steps + 1) * sizeof(double));
    int rc = -ENOMEM;
    if (!acc || !set || !tmp || !med)
        goto out;
    for (uint32_t s = sg->first; s <= sg->last; s += stride) {
        memset(set, 0, (size_t)R * SEG_MAX_KEYS * sizeof(bool));
        for (uint32_t r = 0; r < R; r++) {
            const struct cell *ce = cell_at(d, r, s);
            if (!ce || !ce->detail || ce->coarse)
                continue;
            /* a rank's remote waits happen inside tasks of their class:
             * compared across ranks, a class's run is its own work, the
             * waits (which differ rank to rank: the straggler's peers wait
             * on it) taken out */
            double waited[SEG_WAIT_CLASSES] = {0};
            for (uint32_t j = 0; j < ce->nw; j++) {
                const struct wrow *w = &d->w[ce->w0 + j];
                if (w->cls < SEG_WAIT_CLASSES)
                    waited[w->cls] += (double)(w->t_end - w->t_begin);
            }
            for (uint32_t j = 0; j < ce->nc + ce->nr; j++) {
                bool is_cls = j < ce->nc;
                const struct crow *cr = is_cls ? &d->c[ce->c0 + j] : NULL;
                const struct rrow *rr = is_cls ? NULL : &d->r[ce->r0 + j - ce->nc];
                uint64_t key = is_cls ? nkey(K_CLASS, 0, 0, xclass(d, cr->cls), 0)
                                      : nkey(K_RELEASE, 0, 0, rr->cls, op_key(rr->gen));
                size_t k;
                for (k = 0; k < nk && keys[k] != key; k++)
                    ;
                if (k == nk) {
                    if (nk == SEG_MAX_KEYS)
                        continue;
                    keys[nk++] = key;
                }
                double *a = &acc[((size_t)r * SEG_MAX_KEYS + k) * 5];
                bool *st = &set[(size_t)r * SEG_MAX_KEYS + k];
                if (is_cls) {
                    if (!*st)
                        memset(a, 0, 5 * sizeof(double));
                    double own_run = cr->run;
                    if (cr->cls < SEG_WAIT_CLASSES)
                        own_run = own_run > waited[cr->cls] ? own_run - waited[cr->cls] : 0;
                    a[0] += cr->count, a[1] += own_run, a[2] = MAXU(a[2], cr->rmax);
                    a[3] += cr->q, a[4] += cr->qn;
                } else {
                    double v[2] = {xfer_time(rr), notify_gap(rr)};
                    noend[k] |= !rr->t_end;
                    if (!*st)
                        a[0] = a[1] = NAN;
                    for (int f = 0; f < 2; f++)
                        if (!isnan(v[f]) && (isnan(a[f]) || v[f] > a[f]))
                            a[f] = v[f];
                }
                *st = true;
            }
        }
        for (size_t k = 0; k < nk; k++) {
            if (!set[(size_t)sg->rank * SEG_MAX_KEYS + k])
                continue;
            const bool is_cls = keys[k] >> 59 == K_CLASS;
            const double *me = &acc[((size_t)sg->rank * SEG_MAX_KEYS + k) * 5];
            double row[10];
            size_t peers = 0;
            for (int f = 0; f < 5; f++) {
                size_t q = 0;
                for (uint32_t r = 0; r < R; r++) {
                    if (r == sg->rank || !set[(size_t)r * SEG_MAX_KEYS + k])
                        continue;
                    const double *a = &acc[((size_t)r * SEG_MAX_KEYS + k) * 5];
                    double val = is_cls ? NAN : (f < 2 ? a[f] : NAN);
                    if (is_cls && f == 0)
                        val = a[0];
                    if (is_cls && f == 1)
                        val = a[0] > 0 ? a[1] / a[0] : NAN; /* per task */
                    if (is_cls && f == 2)
                        val = a[2] > 0 ? a[2] : NAN;
                    if (is_cls && f == 3)
                        val = a[4] > 0 ? a[3] / a[4] : NAN; /* per task */
                    if (!isnan(val))
                        tmp[q++] = val;
                }
                if (f == 0)
                    peers = q;
                row[5 + f] = q ? median(tmp, q) : NAN;
                row[f] = is_cls || f < 2 ? me[f] : NAN;
            }
            if (!peers && is_cls)
                continue;
            if (!kv[k] && !(kv[k] = malloc(max_steps * 10 * sizeof(double))))
                goto out;
            if (kn[k] < max_steps)
                memcpy(&kv[k][kn[k]++ * 10], row, sizeof(row));
        }
    }
    for (size_t k = 0; k < nk; k++) {
        if (!kn[k])
            continue;
        double mm[10];
        for (int f = 0; f < 10; f++) {
            size_t q = 0;
            for (size_t i = 0; i < kn[k]; i++)
                if (!isnan(kv[k][i * 10 + f]))
                    med[q++] = kv[k][i * 10 + f];
            mm[f] = q ? median(med, q) : NAN;
        }
        if (keys[k] >> 59 == K_CLASS) {
            if (!(mm[0] > 0))
                continue;
            struct pcls *pc = prof_cls(p);
            if (!pc)
                goto out;
            pc->cls = (uint32_t)(keys[k] >> 19 & 0xffff);
            pc->count = mm[0], pc->run = mm[1], pc->rmax = mm[2], pc->q = mm[3], pc->qn = mm[4];
            pc->r_mean = mm[6], pc->r_max = mm[7], pc->q_mean = mm[8];
        } else {
            struct pent *e = prof_ent(&p->r, &p->nr, &p->cap_r);
            if (!e)
                goto out;
            e->cls = (uint32_t)(keys[k] >> 19 & 0xffff);
            e->op = (uint32_t)(keys[k] & 0x7ffff);
            e->peer = UINT32_MAX;
            e->no_end = noend[k];
            e->norm_a = mm[5], e->norm_b = mm[6];
            e->a = isnan(mm[0]) || isnan(mm[5]) ? NAN : mm[0] - mm[5];
            e->b = isnan(mm[1]) || isnan(mm[6]) ? NAN : mm[1] - mm[6];
        }
    }
    rc = 0;
out:
    for (size_t k = 0; k < nk; k++)
        free(kv[k]);
    free(acc), free(set), free(tmp), free(med);
    return rc;
}

/* The member of a class family (an expert) behind the straggler's excess:
 * the one whose tasks ran longest over the family's usual per-task time. */
static int64_t family_member(const struct diag *d, const struct segment *sg, uint32_t fam)
{
    const struct norm *fn = norm_get(d, nkey(K_FAMILY, 0, 0, fam, 0));
    double norm = fn && !isnan(fn->v[0]) ? fn->v[0] : 0;
    double ex[256] = {0};
    for (size_t k = cell_from(d, sg->rank, sg->first);
         k < d->ns && d->s[k].rank == sg->rank && d->s[k].step <= sg->last; k++) {
        const struct cell *c = &d->s[k];
        for (uint32_t j = 0; j < c->nc; j++) {
            const struct crow *r = &d->c[c->c0 + j];
            if (r->cls < 256 && xclass(d, r->cls) == fam)
                ex[r->cls] += r->run - r->count * norm;
        }
    }
    int64_t who = fam;
    for (int c = 0; c < 256; c++)
        if (ex[c] > ex[who])
            who = c;
    return who;
}

/* How long rank q waited on rank p in each step of the segment beyond how
 * long p waited on q: the straggler's cost to q; its median over steps. */
static double pair_excess(struct diag *d, const struct segment *sg, uint32_t q)
{
    size_t n = sg->last - sg->first + 1;
    double *qp = calloc(2 * n, sizeof(double));
    if (!qp)
        return 0;
    double *pq = qp + n;
    for (int side = 0; side < 2; side++) {
        uint32_t who = side ? sg->rank : q, on = side ? q : sg->rank;
        for (size_t k = cell_from(d, who, sg->first);
             k < d->ns && d->s[k].rank == who && d->s[k].step <= sg->last; k++) {
            const struct cell *c = &d->s[k];
            for (uint32_t j = 0; j < c->nw; j++) {
                const struct wrow *w = &d->w[c->w0 + j];
                if (w->peer == on)
                    (side ? pq : qp)[c->step - sg->first] += (double)(w->t_end - w->t_begin);
            }
        }
    }
    double *v = scratch(d, n);
    size_t m = 0;
    for (size_t i = 0; v && i < n; i++)
        if (qp[i] > 0 || pq[i] > 0)
            v[m++] = qp[i] - pq[i];
    double med = v && m ? median(v, m) : 0;
    free(qp);
    return med;
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

/* A generation as a decimal string: its 64 bits do not survive a JSON
 * number in jq or JavaScript. */
static json_t *gen_json(uint64_t gen)
{
    char b[24];
    snprintf(b, sizeof(b), "%llu", (unsigned long long)gen);
    return gen ? json_string(b) : json_null();
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
        if (L->has_verdict)
            json_object_set_new(o, "share", json_real(round(1000 * fmin(1, L->share)) / 1000));
        json_object_set_new(o, "coverage",
                            L->cov_ratio >= 0 ? json_real(L->cov_ratio) : json_null());
        json_array_append_new(chain, o);
    }
    return chain;
}

static void fmt_ns(char *buf, size_t len, double ns)
{
    double a = fabs(ns);
    if (a >= 1e9)
        snprintf(buf, len, "%.2f s", ns / 1e9);
    else if (a >= 1e6)
        snprintf(buf, len, "%.2f ms", ns / 1e6);
    else if (a >= 1e3)
        snprintf(buf, len, "%.1f us", ns / 1e3);
    else
        snprintf(buf, len, "%.0f ns", ns);
}

/* What the root's cause rests on, for people (text) and tools (the rest):
 * every cause's score, and for a task class its run-time against its
 * queueing excess (what queued behind what). */
static json_t *evidence_json(struct diag *d, const struct link *L, bool peers)
{
    if (!L->has_verdict)
        return json_null();
    const struct verdict *v = &L->v;
    json_t *ev = json_object(), *sc = json_object();
    for (int c = 0; c < C_N; c++)
        json_object_set_new(sc, cause_name[c],
                            json_integer((json_int_t)(v->score[c] > 0 ? v->score[c] : 0)));
    json_object_set_new(ev, "reference",
                        json_string(peers ? "the rank's peers in the same steps"
                                          : "the rank's own other steps"));
    json_object_set_new(ev, "scores_ns", sc);
    char text[512], a[32], b[32], c2[32];
    size_t off = 0;
    text[0] = 0;
    if (v->ev_cls >= 0) {
        char name[128];
        mks_store_class_name(d->st, d->job, L->rank, (uint32_t)v->ev_cls, name, sizeof(name));
        json_object_set_new(
            ev, "class",
            json_pack("{s:s, s:f, s:I, s:I, s:I, s:I, s:I}", "task_class", name, "tasks",
                      v->count, "run_excess_ns", (json_int_t)v->run_ex, "longest_run_excess_ns",
                      (json_int_t)v->run_max_ex, "queue_excess_ns", (json_int_t)v->queue_ex,
                      "queued_behind_slow_ns", (json_int_t)v->queue_behind,
                      "longest_queue_excess_ns", (json_int_t)v->queue_max_ex));
        fmt_ns(a, sizeof(a), v->run_ex);
        fmt_ns(b, sizeof(b), v->queue_ex);
        fmt_ns(c2, sizeof(c2), v->queue_behind);
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "%s: run time %s%s over %.0f tasks, queueing %s%s (%s of it"
                                " behind slower tasks ahead)",
                                name, v->run_ex >= 0 ? "+" : "", a, v->count,
                                v->queue_ex >= 0 ? "+" : "", b, c2);
    }
    if (!isnan(v->idle_ex)) {
        json_object_set_new(ev, "idle_excess_ns", json_integer((json_int_t)v->idle_ex));
        fmt_ns(a, sizeof(a), v->idle_ex);
        if (off < sizeof(text))
            off += (size_t)snprintf(text + off, sizeof(text) - off, "%sworkers idle %s%s",
                                    off ? "; " : "", v->idle_ex >= 0 ? "+" : "", a);
    }
    json_object_set_new(ev, "classes_slower", json_integer(v->classes_slower));
    json_object_set_new(ev, "classes_seen", json_integer(v->classes_seen));
    json_object_set_new(ev, "top_class_share", json_real(round(1000 * v->top_share) / 1000));
    if (L->cause == C_SLOW_RANK && off < sizeof(text))
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "%s%u of %u task classes ran longer, the largest holding %.0f%% of"
                                " the excess",
                                off ? "; " : "", v->classes_slower, v->classes_seen,
                                100 * v->top_share);
    if (L->cause == C_REMOTE && off < sizeof(text)) {
        fmt_ns(a, sizeof(a), v->score[C_REMOTE]);
        off += (size_t)snprintf(text + off, sizeof(text) - off, "%swaited %s more on rank %u",
                                off ? "; " : "", a, v->peer);
    }
    if ((L->cause == C_NOTIFY || L->cause == C_TRANSFER) && off < sizeof(text)) {
        fmt_ns(a, sizeof(a), v->score[L->cause]);
        off += (size_t)snprintf(text + off, sizeof(text) - off, "%s%s %s later than usual",
                                off ? "; " : "",
                                L->cause == C_NOTIFY ? "releases came" : "transfers ended", a);
    }
    json_object_set_new(ev, "text", json_string(text));
    return ev;
}

/* The shared fields of a group: cause, share, runner-up, evidence. */
static void verdict_fields(struct diag *d, json_t *g, const struct link *root, bool peers)
{
    json_object_set_new(g, "share", root->has_verdict
                                        ? json_real(round(1000 * fmin(1, root->share)) / 1000)
                                        : json_null());
    if (root->has_verdict && root->second >= 0)
        json_object_set_new(g, "runner_up",
                            json_pack("{s:s, s:f}", "cause", cause_name[root->second], "share",
                                      round(1000 * fmin(1, root->second_share)) / 1000));
    else
        json_object_set_new(g, "runner_up", json_null());
    if (root->cause < 0 && root->has_verdict) {
        json_t *cand = json_array();
        int best = 0;
        for (int c = 1; c < C_N; c++)
            if (root->v.score[c] > root->v.score[best])
                best = c;
        if (root->v.score[best] > 0)
            json_array_append_new(cand, json_string(cause_name[best]));
        if (root->second >= 0 && root->second != best)
            json_array_append_new(cand, json_string(cause_name[root->second]));
        json_object_set_new(g, "candidates", cand);
    }
    json_object_set_new(g, "evidence", evidence_json(d, root, peers));
}

/* The other ranks of step `step` that a remote stall ties to the same root:
 * in an all-reduce every rank waits on the slow one, and the chain shown
 * starts at the slowest rank only (often the root itself). */
/* The other ranks that a remote stall ties to the same root rank in the
 * group's steps (the worst first): in an all-reduce every rank waits on the
 * slow one, and the chain shown starts at the slowest rank only (often the
 * root itself).  first gets the first such chain that reaches the root's
 * cause. */
static json_t *stalled_json(struct diag *d, const struct chain *ch, const uint32_t *steps,
                            size_t n_steps, double med, struct chain *first, struct prof *p)
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
        /* each of the group's first steps, and the step after it: a task
         * late at the end of its step delays the rank's next one, where
         * its peers wait on it */
        for (size_t i = 0; i < 2 * n_steps && i < 10; i++) {
            struct cell *c = cell_at(d, r, steps[i / 2] + (uint32_t)(i % 2));
            if (!c)
                continue;
            double ex = step_dur(c) - med;
            if (build_chain(d, r, c->step, ex > 0 ? ex : step_dur(c), o, p))
                continue;
            const struct link *ro = &o->l[o->n - 1];
            if (o->n < 2 || o->l[0].cause != C_REMOTE || ro->rank != root->rank) {
                /* its own chain went elsewhere (the load blurs a step now
                 * and then), but it waited on the root directly, a quarter
                 * of the root's lateness or more: a remote stall on it */
                if (prof_cell(d, c, 0, NULL, p))
                    continue;
                double on_root = 0;
                for (size_t j = 0; j < p->nw; j++)
                    if (p->w[j].peer == root->rank && p->w[j].a > 0 &&
                        ent_leads(p->w, p->nw, j, false, true))
                        on_root += p->w[j].a;
                if (on_root <= 0 || on_root < 0.25 * root->lateness)
                    continue;
                memset(o, 0, sizeof(*o));
                o->n = 2;
                o->l[0] = (struct link){.rank = r, .cause = C_REMOTE, .lateness = on_root,
                                        .cls = -1, .peer = root->rank, .cov_ratio = -1,
                                        .second = -1};
                o->l[1] = *root;
                o->l[1].has_verdict = false;
            }
            json_array_append_new(arr, json_pack("{s:I, s:o}", "rank", (json_int_t)r, "chain",
                                                 chain_json(d, o)));
            if (!first->n && ro->cause == root->cause)
                *first = *o;
            break;
        }
    }
    free(o);
    return arr;
}

static json_t *coverage_json(const struct chain *ch)
{
    return json_pack("{s:o, s:I, s:I, s:I, s:I}", "ratio",
                     ch->elig > 0 ? json_real(ch->ran / ch->elig) : json_null(), "eligible",
                     (json_int_t)ch->elig, "ran", (json_int_t)ch->ran, "throttled",
                     (json_int_t)ch->thr, "lost", (json_int_t)ch->lost);
}

static json_t *root_json(struct diag *d, const struct chain *ch)
{
    const struct link *root = &ch->l[ch->n - 1];
    /* The generation that leads to the root: the last remote link's. */
    uint64_t gen = root->gen;
    if (ch->n > 1 && ch->l[ch->n - 2].cause == C_REMOTE)
        gen = ch->l[ch->n - 2].gen;
    json_t *rootj = json_pack("{s:I}", "rank", (json_int_t)root->rank);
    json_object_set_new(rootj, "task_class", class_json(d, root->rank, root->cls));
    json_object_set_new(rootj, "comm_gen", gen_json(gen));
    json_object_set_new(rootj, "comm", comm_text(gen));
    return rootj;
}

static json_t *group_json(struct diag *d, const struct chain *ch, uint32_t rank,
                          const uint32_t *gsteps, size_t n_gsteps, json_t *steps, double worst,
                          double med, struct prof *p)
{
    json_t *stalled = NULL;
    struct chain *first = NULL, *alone = NULL;
    if (ch->l[ch->n - 1].cause >= 0 && (first = malloc(sizeof(*first)))) {
        stalled = stalled_json(d, ch, gsteps, n_gsteps, med, first, p);
        /* The slowest rank was the root itself: show the story from a
         * rank that waited on it (remote stall, then the root's cause). */
        if (ch->n == 1 && first->n > 1) {
            ch = first;
            rank = first->l[0].rank;
        } else if (ch->n == 1 && d->n_ranks > 1 && !json_array_size(stalled) &&
                   (alone = malloc(sizeof(*alone)))) {
            /* No peer waited on it in these steps or the next: a delay
             * that stayed on its rank did not slow the job (a loaded
             * machine's stall of a thread between two all-reduces); a
             * fault of the rank holds up its peers. */
            *alone = *ch;
            struct link *R = &alone->l[0];
            snprintf(alone->reason, sizeof(alone->reason),
                     "rank %u: %s, but no other rank waited on it in these steps or the next",
                     R->rank, cause_name[R->cause]);
            R->cause = -1, R->cls = -1;
            ch = alone;
        }
    }
    const struct link *root = &ch->l[ch->n - 1];
    json_t *g = json_pack("{s:s, s:o, s:o, s:o, s:I, s:o, s:I, s:I, s:I}", "cause",
                          chain_cause(ch), "root", root_json(d, ch), "chain", chain_json(d, ch),
                          "coverage", coverage_json(ch), "rank", (json_int_t)rank, "steps", steps,
                          "step_ns", (json_int_t)worst, "median_step_ns", (json_int_t)med,
                          "excess_ns", (json_int_t)(worst - med));
    json_object_set_new(g, "straggler", json_false());
    verdict_fields(d, g, root, false);
    json_object_set_new(g, "reason", *ch->reason ? json_string(ch->reason) : json_null());
    if (stalled)
        json_object_set_new(g, "stalled", stalled);
    free(first);
    free(alone);
    return g;
}

/* A straggler's group: the rank, its cause against its peers, the peers
 * that waited on it (each with its remote stall), since when. */
static json_t *segment_json(struct diag *d, const struct segment *sg, json_t *steps, double step_ns, double med, struct prof *p,
                            const char **cause_out, bool *weak_out)
{
    struct chain *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return NULL;
    int rc = prof_segment(d, sg, p);
    struct verdict v;
    score_prof(d, p, &v);
    /* a straggler waits on nobody: only its own causes compete */
    v.score[C_REMOTE] = 0;
    struct decision k = decide(d, &v, sg->blame);
    /* A fault stays what it is for as long as it lasts: neither half of
     * the run may find another cause or class, or the straggler is the
     * machine's (a loaded machine starves one rank now of one thing, now
     * of another). */
    int half_cause[2] = {-1, -1};
    int64_t half_cls[2] = {-1, -1};
    bool halves_agree = true;
    if (!rc && !k.weak && !k.close && sg->last - sg->first + 1 >= 2 * SEG_MIN) {
        uint32_t mid = sg->first + (sg->last - sg->first) / 2;
        for (int h = 0; h < 2 && !rc; h++) {
            struct segment part = *sg;
            if (h)
                part.first = mid + 1;
            else
                part.last = mid;
            rc = prof_segment(d, &part, p);
            struct verdict hv;
            score_prof(d, p, &hv);
            hv.score[C_REMOTE] = 0;
            struct decision hk = decide(d, &hv, sg->blame);
            half_cause[h] = hk.weak || hk.close ? -1 : hk.best;
            half_cls[h] = hk.best == C_SLOW_RANK ? -1 : hv.cls[hk.best];
            /* a half too noisy to decide does not speak against it */
            if (half_cause[h] >= 0 &&
                (half_cause[h] != k.best ||
                 (k.best != C_SLOW_RANK && half_cls[h] != v.cls[k.best])))
                halves_agree = false;
        }
    }
    /* the peers that waited on it, the one that waited most first in the chain */
    uint32_t who = UINT32_MAX;
    double most = 0;
    json_t *stalled = json_array();
    for (uint32_t q = 0; q < d->n_ranks; q++) {
        if (q == sg->rank)
            continue;
        double ex = pair_excess(d, sg, q);
        if (ex < 0.1 * sg->blame)
            continue;
        json_t *sc = json_array();
        json_array_append_new(sc, json_pack("{s:I, s:s, s:I, s:I}", "rank", (json_int_t)q, "cause",
                                            "remote_stall", "lateness_ns", (json_int_t)ex, "peer",
                                            (json_int_t)sg->rank));
        json_array_append_new(stalled, json_pack("{s:I, s:o}", "rank", (json_int_t)q, "chain", sc));
        if (ex > most)
            most = ex, who = q;
    }
    ch->n = 0;
    if (who != UINT32_MAX) {
        struct link *L = &ch->l[ch->n++];
        *L = (struct link){.rank = who, .cause = C_REMOTE, .lateness = most, .cls = -1,
                           .peer = sg->rank, .cov_ratio = -1, .second = -1};
    }
    struct link *R = &ch->l[ch->n++];
    *R = (struct link){.rank = sg->rank, .cause = -1, .cls = -1, .cov_ratio = -1, .second = -1};
    set_link(R, &v, &k);
    for (size_t k2 = cell_from(d, sg->rank, sg->first);
         k2 < d->ns && d->s[k2].rank == sg->rank && d->s[k2].step <= sg->last; k2++) {
        const struct cell *c = &d->s[k2];
        if (c->elig > 0)
            ch->elig += c->elig, ch->ran += c->ran, ch->thr += c->thr, ch->lost += c->lost;
    }
    if (ch->elig > 0)
        R->cov_ratio = ch->ran / ch->elig;
    if (rc || k.weak || k.close) {
        undecided_reason(ch, R, &v, &k, sg->blame);
        R->lateness = v.score[k.best];
    } else if (!halves_agree) {
        snprintf(ch->reason, sizeof(ch->reason),
                 "rank %u: the cause changes within steps %u-%u (%s overall; first half %s,"
                 " second half %s): no fault stays, the machine's load",
                 sg->rank, sg->first, sg->last, cause_name[k.best],
                 half_cause[0] >= 0 ? cause_name[half_cause[0]] : "undecided",
                 half_cause[1] >= 0 ? cause_name[half_cause[1]] : "undecided");
        R->lateness = v.score[k.best];
    } else {
        R->cause = k.best;
        R->cls = k.best == C_SLOW_RANK ? -1 : v.cls[k.best];
        if (R->cls >= 0 && R->cls < 256 && d->family[R->cls] == R->cls)
            R->cls = family_member(d, sg, (uint32_t)R->cls);
        R->lateness = v.score[k.best];
        R->norm = v.norm[k.best];
    }
    if (ch->elig > 0 && ch->ran / ch->elig < d->o.min_coverage) {
        snprintf(ch->reason, sizeof(ch->reason),
                 "coverage on rank %u in steps %u-%u is %.0f%% (below %.0f%%): lower the"
                 " sampling or raise the budget",
                 sg->rank, sg->first, sg->last, 100 * ch->ran / ch->elig, 100 * d->o.min_coverage);
        R->cause = -1;
    }
    json_t *g = json_pack("{s:s, s:o, s:o, s:o, s:I, s:o, s:I, s:I, s:I}", "cause",
                          chain_cause(ch), "root", root_json(d, ch), "chain", chain_json(d, ch),
                          "coverage", coverage_json(ch), "rank",
                          (json_int_t)(who != UINT32_MAX ? who : sg->rank), "steps", steps,
                          "step_ns", (json_int_t)step_ns, "median_step_ns", (json_int_t)med,
                          "excess_ns", (json_int_t)sg->blame);
    json_object_set_new(g, "straggler", json_true());
    json_object_set_new(g, "since_step", json_integer(sg->first));
    json_object_set_new(g, "until_step", json_integer(sg->last));
    json_object_set_new(g, "blame_positive", json_real(round(1000 * sg->frac) / 1000));
    verdict_fields(d, g, R, true);
    json_object_set_new(g, "reason", *ch->reason ? json_string(ch->reason) : json_null());
    json_object_set_new(g, "stalled", stalled);
    *cause_out = R->cause >= 0 ? cause_name[R->cause] : "undecided";
    *weak_out = k.weak;
    free(ch);
    return g;
}

/* ---- the diagnosis ------------------------------------------------------------------------ */

/* A group of slow steps a loaded host explains: undecided (no scheduler
 * cause is named), with the CPU wait measured and the reason.  Its
 * representative is its slowest step's chain. */
static json_t *contention_json(struct diag *d, const struct tgroup *t, const struct chain *chains,
                               const size_t *cidx, const uint32_t *steps, const double *stime,
                               const double *exs, const double *cont, const double *cont_sum,
                               const uint32_t *cont_rank, const uint32_t *srank, double med,
                               struct prof *p)
{
    size_t w = t->worst;
    double wait = 0, excess = 0, summed = 0;
    for (size_t i = 0; i < t->n; i++) {
        wait += cont[t->ks[i]], excess += exs[t->ks[i]];
        summed += cont_sum[t->ks[i]];
    }
    struct chain *rep = malloc(sizeof(*rep));
    if (!rep)
        return NULL;
    *rep = chains[cidx[w]];
    struct link *R = &rep->l[rep->n - 1];
    R->cause = -1, R->cls = -1;
    char a[16], b[16], c[16];
    fmt_ns(a, sizeof(a), summed);
    fmt_ns(b, sizeof(b), wait);
    fmt_ns(c, sizeof(c), excess);
    snprintf(rep->reason, sizeof(rep->reason),
             "host CPU contention: rank %u's worker threads waited %s for a CPU beyond their"
             " usual in these %u steps (%s on their path), %.0f%% of the excess of %s: a"
             " loaded host, no scheduler cause",
             cont_rank[w], a, (unsigned)t->n, b, excess > 0 ? 100 * fmin(1, wait / excess) : 100.0,
             c);
    uint32_t gs[1] = {steps[w]};
    json_t *gj = group_json(d, rep, srank[w], gs, 1, t->steps, stime[w], med, p);
    free(rep);
    if (gj)
        json_object_set_new(gj, "host_contention",
                            json_pack("{s:I, s:I, s:I, s:I, s:f}", "rank",
                                      (json_int_t)cont_rank[w], "cpu_wait_ns", (json_int_t)summed,
                                      "on_path_ns", (json_int_t)wait, "excess_ns",
                                      (json_int_t)excess, "share",
                                      excess > 0 ? round(1000 * fmin(1, wait / excess)) / 1000
                                                 : 1.0));
    return gj;
}

struct gout { /* a group on its way out, with what orders it */
    json_t *g;
    bool decided;
    bool yields; /* a straggler's run that holds a far larger fault's steps */
    size_t n;
    double total;
};

/* Decided groups first, then the longer ones (a fault holds for its
 * steps; a loaded machine's bursts, however long each stall, are a few
 * steps), then by the delay their cause explains (the delay of their steps
 * times the share its cause explains). */
static int cmp_gout(const void *a, const void *b)
{
    const struct gout *x = a, *y = b;
    if (x->decided != y->decided)
        return x->decided ? -1 : 1;
    if (x->yields != y->yields)
        return x->yields ? 1 : -1;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return x->total > y->total ? -1 : x->total < y->total;
}

/* The share of its delay a group's cause explains (at most 1). */
static double group_share(json_t *g)
{
    double s = json_number_value(json_object_get(g, "share"));
    return s > 1 ? 1 : s > 0.02 ? s : 0.02;
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
        if (opts->sz >= offsetof(struct mks_diag_opts, last) + sizeof(opts->last)) {
            d.o.range = opts->range, d.o.step_lo = opts->step_lo, d.o.step_hi = opts->step_hi;
            d.o.last = opts->last;
        }
        if (opts->sz >= offsetof(struct mks_diag_opts, rows) + sizeof(opts->rows))
            d.o.rows = opts->rows;
        d.o.only_step = opts->only_step;
    }
    struct prof prof = {0};
    struct chain *chains = NULL;
    uint32_t *steps = NULL, *srank = NULL;
    double *stime = NULL, *exs = NULL, *tex = NULL, *cont = NULL, *cont_sum = NULL;
    uint32_t *cont_rank = NULL;
    bool *slow = NULL, *bslow = NULL, *want = NULL;
    size_t *cell_step = NULL, *cidx = NULL, *n_ck = NULL;
    struct tgroup *tg = NULL;
    struct segment *seg = NULL;
    size_t n_seg = 0, n_tg = 0;
    struct blame bl = {0};
    struct gout *go = NULL;
    json_t *groups = json_array();
    uint32_t lo, hi;
    int rc = step_range(&d, &lo, &hi);
    /* One step is judged against its neighbours and the norms of the
     * steps around it, not against the whole job: a long job's --step
     * reads DIAG_STEP_CONTEXT steps either side. */
    if (!rc && d.o.only_step >= 0 && (uint64_t)d.o.only_step >= lo && (uint64_t)d.o.only_step <= hi) {
        uint32_t at = (uint32_t)d.o.only_step;
        if (at - lo > DIAG_STEP_CONTEXT)
            lo = at - DIAG_STEP_CONTEXT;
        if (hi - at > DIAG_STEP_CONTEXT)
            hi = at + DIAG_STEP_CONTEXT;
    }
    const char *agg_why = NULL;
    if (!rc)
        rc = load_aggs(&d, &agg_why);
    if (!rc && !d.agg)
        rc = load_cells(&d, lo, hi);
    if (!rc)
        rc = load_meta(&d);
    if (!rc)
        rc = prep_detail(&d);
    if (rc) {
        rc = mks_serve_fail(err, errlen, rc == -ENOMEM ? -ENOMEM : -EIO,
                            rc == -ENOMEM ? "diagnose: out of memory"
                                          : "diagnose: cannot read the store: %s",
                            sqlite3_errmsg(mks_store_db(st)));
        goto out;
    }
    build_clock(&d);
    /* Distinct steps and their times (slowest rank), in step order. */
    size_t n_cap = (d.agg ? d.agg->n : d.ns) + 1;
    steps = malloc(n_cap * sizeof(*steps));
    stime = malloc(n_cap * sizeof(*stime));
    srank = malloc(n_cap * sizeof(*srank));
    cell_step = malloc((d.ns + 1) * sizeof(*cell_step));
    if (!steps || !stime || !srank || !cell_step)
        goto oom;
    size_t n_steps = 0;
    if (d.agg) {
        n_steps = d.agg->n;
        memcpy(steps, d.agg->step, n_steps * sizeof(*steps));
        memcpy(stime, d.agg->time, n_steps * sizeof(*stime));
        memcpy(srank, d.agg->rank, n_steps * sizeof(*srank));
    }
    for (size_t i = 0; i < d.ns && !d.agg; i++)
        steps[n_steps++] = d.s[i].step;
    if (n_steps > 1 && !d.agg)
        qsort(steps, n_steps, sizeof(*steps), cmp_u32);
    size_t m = 0;
    for (size_t i = 0; i < n_steps; i++)
        if (!m || steps[m - 1] != steps[i])
            steps[m++] = steps[i];
    n_steps = m;
    for (size_t k = 0; k < n_steps && !d.agg; k++)
        stime[k] = -1, srank[k] = 0;
    for (size_t i = 0; i < d.ns && !d.agg; i++) {
        uint32_t *p = bsearch(&d.s[i].step, steps, n_steps, sizeof(*steps), cmp_u32);
        size_t k = (size_t)(p - steps);
        cell_step[i] = k;
        double dur = step_dur(&d.s[i]);
        if (dur > stime[k])
            stime[k] = dur, srank[k] = d.s[i].rank;
    }
    double *tmp = scratch(&d, n_steps + 1);
    if (!tmp)
        goto oom;
    for (size_t k = 0; k < n_steps; k++)
        tmp[k] = stime[k];
    double med = median(tmp, n_steps);
    slow = calloc(n_steps + 1, sizeof(bool));
    exs = calloc(n_steps + 1, sizeof(double));
    tex = calloc(n_steps + 1, sizeof(double));
    bslow = calloc(n_steps + 1, sizeof(bool));
    if (!slow || !exs || !tex || !bslow)
        goto oom;
    size_t n_slow = 0;
    for (size_t k = 0; k < n_steps; k++) {
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
            size_t a = side ? k + 1 : (k > DIAG_WINDOW ? k - DIAG_WINDOW : 0);
            size_t b = side ? (k + 1 + DIAG_WINDOW < n_steps ? k + 1 + DIAG_WINDOW : n_steps) : k;
            if (b < a + 3)
                continue;
            double wb[DIAG_WINDOW];
            size_t nwb = 0;
            for (size_t q = a; q < b; q++)
                wb[nwb++] = stime[q];
            double smed = median(wb, nwb);
            for (size_t q = 0; q < nwb; q++)
                wb[q] = fabs(wb[q] - smed);
            double noise = 4 * 1.4826 * median(wb, nwb);
            /* A side in a burst of the machine's load (its noise above its
             * own median) says nothing about this step: the other side
             * decides.  A change of load moves the median, not the noise. */
            if (noise > smed)
                continue;
            double sex = stime[k] - smed;
            asked = true;
            if (stime[k] <= smed * (1 + d.o.slow_frac) || sex < (double)d.o.min_excess_ns ||
                sex <= noise)
                is_slow = false;
            if (ex < 0 || sex < ex)
                ex = sex;
        }
        if (!asked) /* a run of a few steps, or noise both sides: the run's median */
            ex = stime[k] - med, is_slow = stime[k] > med * (1 + d.o.slow_frac) &&
                                          ex >= (double)d.o.min_excess_ns;
        tex[k] = ex;
        if (d.o.only_step < 0 && !is_slow)
            continue;
        slow[k] = true, exs[k] = ex > 0 ? ex : stime[k];
        n_slow++;
    }
    /* Slow steps a loaded host explains on a rank (host_explains), marked
     * on the rank's cell before the blame is built (a straggler's run
     * leaves them out), and judged again on the chains below. */
    bool cw_seen = false;
    for (size_t i = 0; i < d.ns && !cw_seen; i++)
        cw_seen = !isnan(d.s[i].cw);
    double slow_thr = fmax(d.o.slow_frac * med, (double)d.o.min_excess_ns);
    for (size_t k = 0; cw_seen && k < n_steps; k++)
        for (uint32_t r = 0; slow[k] && r < d.n_ranks; r++) {
            struct cell *c = cell_at(&d, r, steps[k]);
            uint32_t at;
            double sum;
            if (c && !isnan(host_explains(&d, steps, n_steps, k, srank[k], exs[k], slow_thr, &r,
                                          1, &at, &sum)))
                c->host_held = true;
        }
    /* Detail rows: every step, or in a long run an even sample and the
     * slow steps. */
    size_t stride = 1, blk = 1, n_examined;
    if (n_steps > DIAG_DETAIL_MAX && d.o.only_step < 0) {
        /* Rows are read an epoch at a time: the sample is of runs of
         * consecutive steps, an epoch's worth each (blk), so that a
         * sampled step does not cost an epoch of its own. */
        size_t n_ep = 0, nes = d.nes;
        for (size_t k = 0; k < d.nes && !d.agg; k++)
            n_ep += !k || d.es[k].epoch != d.es[k - 1].epoch;
        if (d.agg)
            n_ep = d.agg->n_ep, nes = d.agg->nes;
        blk = n_ep ? (nes + n_ep - 1) / n_ep : 1;
        stride = (n_steps + DIAG_SAMPLE - 1) / DIAG_SAMPLE;
        want = calloc(d.ns + 1, sizeof(bool));
        if (!want)
            goto oom;
        /* The slow steps examined: the slowest first, while they fall in
         * at most DIAG_SLOW_RUNS such runs (a fault's steps share theirs;
         * a loaded machine's scattered slow steps each take one). */
        if ((rc = pick_slow(slow, exs, n_steps, blk)))
            goto fail_rc;
        if (d.agg) {
            /* the sampled and slow steps' cells and epochs, from the rows */
            bool *wk = calloc(n_steps + 1, sizeof(bool));
            if (!wk)
                goto oom;
            for (size_t k = 0; k < n_steps; k++)
                wk[k] = slow[k] || (k / blk) % stride == 0;
            rc = agg_want(&d, wk);
            free(wk);
            if (rc || (rc = agg_cells(&d, steps, n_steps, &cell_step, &want)))
                goto fail_rc;
        }
        for (size_t i = 0; i < d.ns; i++)
            want[i] = slow[cell_step[i]] || (cell_step[i] / blk) % stride == 0;
    }
    if ((rc = load_detail(&d, want)))
        goto fail_rc;
    /* Stragglers: the blame per rank and step, its runs above the noise;
     * in a sampled run the edges of each run are then loaded step by
     * step and the runs found again. */
    double tau = 2.0 * (double)d.o.min_excess_ns;
    if (SEG_REL * med > tau)
        tau = SEG_REL * med;
    for (int pass = 0; d.o.only_step < 0 && pass < (want ? 2 : 1); pass++) {
        blame_free(&bl);
        free(seg), seg = NULL, n_seg = 0;
        if ((rc = build_blame(&d, &bl)) || (rc = find_segments(&d, &bl, tau, &seg, &n_seg)))
            goto fail_rc;
        if (!want || pass || !n_seg)
            break;
        /* The edges of the runs that weigh most (blame times length), up
         * to DIAG_EDGE_STEPS steps in all: on a loaded machine a long job
         * has dozens of short runs of noise, and loading the edges of
         * every one of them is loading the whole job. */
        uint32_t span = (uint32_t)(2 * stride * SEG_WIN);
        bool *edge = calloc(n_seg, sizeof(bool));
        if (!edge)
            goto oom;
        for (uint64_t budget = 0;;) {
            size_t best = n_seg;
            for (size_t g = 0; g < n_seg; g++)
                if (!edge[g] && (best == n_seg || seg_weight(&seg[g]) > seg_weight(&seg[best])))
                    best = g;
            if (best == n_seg || (budget && budget + 4ull * span > DIAG_EDGE_STEPS))
                break;
            edge[best] = true, budget += 4ull * span;
        }
        if (d.agg) {
            bool *wk = calloc(n_steps + 1, sizeof(bool));
            if (!wk) {
                free(edge);
                goto oom;
            }
            for (size_t g = 0; g < n_seg; g++)
                for (int e = 0; edge[g] && e < 2; e++) {
                    uint32_t at = e ? seg[g].last : seg[g].first;
                    for (size_t k = agg_at(d.agg, at > span ? at - span : 0);
                         k < n_steps && steps[k] <= at + span; k++)
                        wk[k] = true;
                }
            rc = agg_want(&d, wk);
            free(wk);
            if (rc || (rc = agg_cells(&d, steps, n_steps, &cell_step, &want))) {
                free(edge);
                goto fail_rc;
            }
        }
        memset(want, 0, (d.ns + 1) * sizeof(bool));
        for (size_t i = 0; i < d.ns; i++)
            for (size_t g = 0; g < n_seg; g++) {
                uint32_t s = d.s[i].step;
                if (edge[g] && ((s + span >= seg[g].first && s <= seg[g].first + span) ||
                                (s + span >= seg[g].last && s <= seg[g].last + span)))
                    want[i] = true;
            }
        free(edge);
        if ((rc = load_detail(&d, want)))
            goto fail_rc;
    }
    /* Steps where peers waited on one rank well beyond their usual wait on
     * it: a fault whose step time a burst of the machine's load hides (the
     * load slows every rank alike, the blame stays put). */
    for (size_t i = 0; d.o.only_step < 0 && i < bl.n_steps; i++) {
        uint32_t *ps = bsearch(&bl.step[i], steps, n_steps, sizeof(*steps), cmp_u32);
        if (!ps)
            continue;
        size_t k = (size_t)(ps - steps);
        for (uint32_t r = 0; r < bl.R; r++) {
            double z = blame_at(&bl, i, r), worst = -1;
            bool stands = !isnan(z), asked = false;
            for (int side = 0; stands && side < 2; side++) {
                size_t a = side ? i + 1 : (i > DIAG_WINDOW ? i - DIAG_WINDOW : 0);
                size_t b = side ? (i + 1 + DIAG_WINDOW < bl.n_steps ? i + 1 + DIAG_WINDOW
                                                                   : bl.n_steps)
                                : i;
                double wb[DIAG_WINDOW];
                size_t nwb = 0;
                for (size_t q = a; q < b; q++) {
                    double x = blame_at(&bl, q, r);
                    if (!isnan(x))
                        wb[nwb++] = x;
                }
                if (nwb < 3)
                    continue;
                double smed = median(wb, nwb);
                for (size_t q = 0; q < nwb; q++)
                    wb[q] = fabs(wb[q] - smed);
                double noise = 4 * 1.4826 * median(wb, nwb), ex = z - smed;
                asked = true;
                if (ex < tau || ex <= noise)
                    stands = false;
                if (worst < 0 || ex < worst)
                    worst = ex;
            }
            if (stands && asked && !slow[k]) {
                slow[k] = bslow[k] = true, exs[k] = worst;
                n_slow++;
            }
        }
    }
    if (d.agg) {
        /* the neighbours of the steps chains start from (and of the step
         * after each: its peers' own chains, stalled_json) */
        for (size_t k = 0; k < n_steps && !rc; k++)
            if (slow[k]) {
                rc = agg_near(&d, k);
                if (!rc && k + 1 < n_steps)
                    rc = agg_near(&d, k + 1);
            }
        if (rc)
            goto fail_rc;
        index_rows(&d);
    }
    if ((rc = build_norms(&d)))
        goto fail_rc;
    /* a chain for each slow step (CH(k): step k's) */
    cidx = malloc((n_steps + 1) * sizeof(*cidx));
    chains = calloc(n_slow + 1, sizeof(*chains));
    if (!cidx || !chains)
        goto oom;
    for (size_t k = 0, c = 0; k < n_steps; k++)
        cidx[k] = slow[k] ? c++ : SIZE_MAX;
#define CH(k) (&chains[cidx[k]])
    for (size_t k = 0; k < n_steps; k++)
        if (slow[k] && (rc = build_chain(&d, srank[k], steps[k], exs[k], CH(k), &prof)))
            goto fail_rc;
    /* A slow step a loaded host explains on its chain's ranks was slowed
     * by it: a worker thread waiting for a core looks, through the hooks,
     * like a held queue or a slow task.  Such steps are grouped apart from
     * the others (a fault next to a load burst is judged on its own steps)
     * and named for what they are, not for a scheduler cause.  A fault's
     * own excess (a slow body, a late release) is no wait for a CPU and
     * stays. */
    cont = malloc((n_steps + 1) * sizeof(*cont));
    cont_sum = calloc(n_steps + 1, sizeof(*cont_sum));
    cont_rank = calloc(n_steps + 1, sizeof(*cont_rank));
    if (!cont || !cont_sum || !cont_rank)
        goto oom;
    size_t n_cont = 0;
    for (size_t k = 0; k < n_steps; k++) {
        uint32_t cr[MAX_CHAIN];
        for (int i = 0; slow[k] && i < CH(k)->n; i++)
            cr[i] = CH(k)->l[i].rank;
        cont[k] = slow[k] && cw_seen ? host_explains(&d, steps, n_steps, k, srank[k], exs[k],
                                                     slow_thr, cr, (size_t)CH(k)->n, &cont_rank[k],
                                                     &cont_sum[k])
                                     : NAN;
        n_cont += !isnan(cont[k]);
    }
    /* Group slow steps whose chains end at the same rank, near one another;
     * the group's cause is its steps' majority (below).  Between a group's
     * steps, steps a loaded host explains do not count as a gap: they say
     * nothing of a fault under them (a burst of the host's load in the
     * middle of a fault's steps would split its group into pieces too
     * short to show).  n_ck[k]: such steps before step index k. */
    tg = calloc(n_slow + 1, sizeof(*tg));
    n_ck = malloc((n_steps + 1) * sizeof(*n_ck));
    if (!tg || !n_ck)
        goto oom;
    n_ck[0] = 0;
    for (size_t k = 0; k < n_steps; k++)
        n_ck[k + 1] = n_ck[k] + !isnan(cont[k]);
    for (size_t k = 0; k < n_steps; k++) {
        if (!slow[k])
            continue;
        size_t g;
        bool ck = !isnan(cont[k]);
        for (g = n_tg; g-- > 0;) {
            size_t lk = tg[g].ks[tg[g].n - 1];
            size_t gap = steps[k] - tg[g].last_step - (ck ? 0 : n_ck[k] - n_ck[lk + 1]);
            if (CH(tg[g].first)->l[CH(tg[g].first)->n - 1].rank == CH(k)->l[CH(k)->n - 1].rank &&
                tg[g].contended == ck && gap <= DIAG_GROUP_GAP)
                break;
        }
        if (g == SIZE_MAX) {
            g = n_tg++;
            tg[g] = (struct tgroup){.first = k, .worst = k, .first_step = steps[k],
                                    .steps = json_array(), .contended = ck};
        }
        size_t *ks = realloc(tg[g].ks, (tg[g].n + 1) * sizeof(*ks));
        if (!ks)
            goto oom;
        tg[g].ks = ks, ks[tg[g].n] = k;
        json_array_append_new(tg[g].steps, json_integer(steps[k]));
        tg[g].last_step = steps[k], tg[g].n++, tg[g].total += exs[k];
        if (stime[k] > stime[tg[g].worst])
            tg[g].worst = k;
    }
    go = calloc(n_tg + n_seg + 1, sizeof(*go));
    if (!go)
        goto oom;
    size_t ng = 0, hidden_weak = 0;
    for (size_t s = 0; s < n_seg; s++) {
        json_t *sl = json_array();
        size_t n_in = 0, a = SIZE_MAX;
        for (size_t k = 0; k < n_steps; k++)
            if (steps[k] >= seg[s].first && steps[k] <= seg[s].last) {
                json_array_append_new(sl, json_integer(steps[k]));
                if (a == SIZE_MAX)
                    a = k;
                n_in++;
            }
        double *v = scratch(&d, n_in + 1);
        if (!v) {
            json_decref(sl);
            goto oom;
        }
        for (size_t k = 0; k < n_in; k++)
            v[k] = stime[a + k];
        double step_ns = median(v, n_in);
        const char *cause = NULL;
        bool weak = false;
        json_t *gj = segment_json(&d, &seg[s], sl, step_ns, med, &prof, &cause, &weak);
        if (!gj)
            goto oom;
        if (weak) {
            /* peers waited on it, but nothing on the rank explains why: the
             * machine's noise in the waits, not a straggler */
            json_decref(gj);
            hidden_weak++;
            continue;
        }
        seg[s].kept = true;
        seg[s].go = ng;
        go[ng++] = (struct gout){.g = gj, .decided = strcmp(cause, "undecided") != 0, .n = n_in,
                                 .total = seg[s].blame * (double)n_in * group_share(gj)};
    }
    /* Slow steps of a straggler inside its run belong to it, unless they
     * stand far above its steady lateness: a fault of a few steps on a rank
     * that also lags its peers a little all along (its steps 20 ms late, the
     * run's lateness 0.1 ms a step) is a group of its own, and the
     * straggler's run, whose cause is judged over all its steps, goes after
     * it. */
    for (size_t g = 0; g < n_tg; g++) {
        const struct link *root = &CH(tg[g].first)->l[CH(tg[g].first)->n - 1];
        for (size_t s = 0; s < n_seg; s++) {
            if (!seg[s].kept || root->rank != seg[s].rank ||
                tg[g].first_step + DIAG_WINDOW < seg[s].first ||
                tg[g].last_step > seg[s].last + DIAG_WINDOW)
                continue;
            if (tg[g].n && tg[g].total / (double)tg[g].n > SEG_ABSORB_RATIO * seg[s].blame)
                go[seg[s].go].yields = true;
            else
                tg[g].absorbed = true;
        }
    }

    for (size_t g = 0; g < n_tg; g++) {
        if (tg[g].absorbed)
            continue;
        if (tg[g].contended) {
            json_t *gj = contention_json(&d, &tg[g], chains, cidx, steps, stime, exs, cont,
                                         cont_sum, cont_rank, srank, med, &prof);
            tg[g].steps = NULL;
            if (!gj)
                goto oom;
            go[ng++] = (struct gout){.g = gj, .decided = false, .n = tg[g].n, .total = 0};
            continue;
        }
        /* The cause most of the group's steps name (one step's chain may
         * end in another cause when the load blurs it); without a majority
         * the group is undecided, naming the two most named. */
        int votes[C_N] = {0}, best = -1, second = -1;
        for (size_t i = 0; i < tg[g].n; i++) {
            const struct link *L = &CH(tg[g].ks[i])->l[CH(tg[g].ks[i])->n - 1];
            if (L->cause >= 0)
                votes[L->cause]++;
        }
        for (int c = 0; c < C_N; c++)
            if (votes[c] && (best < 0 || votes[c] > votes[best]))
                best = c;
        for (int c = 0; c < C_N; c++)
            if (c != best && votes[c] && (second < 0 || votes[c] > votes[second]))
                second = c;
        bool majority = best >= 0 && 2 * (size_t)votes[best] > tg[g].n;
        /* its class: the one whose steps of that cause explain the most
         * delay in all (a loaded machine's step may name another class by
         * a little); the worst of them tells the story */
        size_t w = tg[g].worst;
        if (majority) {
            int64_t cls = -1;
            double most = -1;
            for (size_t i = 0; i < tg[g].n; i++) {
                const struct link *L = &CH(tg[g].ks[i])->l[CH(tg[g].ks[i])->n - 1];
                if (L->cause != best)
                    continue;
                double sum = 0;
                for (size_t j = 0; j < tg[g].n; j++) {
                    const struct link *M = &CH(tg[g].ks[j])->l[CH(tg[g].ks[j])->n - 1];
                    if (M->cause == best && M->cls == L->cls)
                        sum += M->lateness > 0 ? M->lateness : 0;
                }
                if (sum > most)
                    most = sum, cls = L->cls;
            }
            w = SIZE_MAX;
            for (size_t i = 0; i < tg[g].n; i++) {
                size_t k = tg[g].ks[i];
                const struct link *L = &CH(k)->l[CH(k)->n - 1];
                if (L->cause == best && L->cls == cls && (w == SIZE_MAX || stime[k] > stime[w]))
                    w = k;
            }
        }
        struct chain *rep = CH(w);
        /* Steps that stood out by their blame alone (peers waited on the
         * rank more than in the steps around) are the rank's when the step
         * grew by what they waited: a rank late by X holds its peers X at
         * its next transfer, and the step ends about X later.  Blame whose
         * excess the step's time does not show (by half: BLAME_SHOWN) came
         * from the peers' side, their waits begun early (a loaded
         * machine's ranks ahead of each other by turns, the order of waits
         * in turn): nothing waited on the rank, no cause of its to name.
         * A step longer than the job's usual by the slow threshold is
         * slow for the job all the same: under a burst of the host's load
         * its neighbours are as long, and the fault's growth is hidden in
         * their noise (a 24 ms fault in 25 ms steps). */
        bool flat = majority && stime[w] - med < slow_thr;
        for (size_t i = 0; flat && i < tg[g].n; i++) {
            size_t k = tg[g].ks[i];
            if (CH(k)->l[CH(k)->n - 1].cause == best &&
                (!bslow[k] || tex[k] >= BLAME_SHOWN * exs[k]))
                flat = false;
        }
        if ((!majority && best >= 0) || flat) {
            /* a copy of the worst step's chain, its root undecided */
            rep = malloc(sizeof(*rep));
            if (!rep)
                goto oom;
            *rep = *CH(w);
            struct link *R = &rep->l[rep->n - 1];
            R->cause = -1, R->cls = -1;
            if (flat)
                snprintf(rep->reason, sizeof(rep->reason),
                         "rank %u: %s, but the group's steps stand out by the waits on the rank"
                         " only: none longer by what its peers waited on it, nor than the job's"
                         " usual by the threshold",
                         R->rank, cause_name[best]);
            else if (second >= 0)
                snprintf(rep->reason, sizeof(rep->reason),
                         "rank %u: the group's steps name different causes (%s in %d of %zu, %s"
                         " in %d)",
                         R->rank, cause_name[best], votes[best], tg[g].n, cause_name[second],
                         votes[second]);
            else
                snprintf(rep->reason, sizeof(rep->reason),
                         "rank %u: only %d of the group's %zu steps name a cause (%s)", R->rank,
                         votes[best], tg[g].n, cause_name[best]);
        }
        /* the group's steps, its representative first */
        uint32_t gs[5];
        size_t ngs = 0;
        gs[ngs++] = steps[w];
        for (size_t i = 0; i < tg[g].n && ngs < 5; i++)
            if (tg[g].ks[i] != w && same_root(CH(tg[g].ks[i]), rep))
                gs[ngs++] = steps[tg[g].ks[i]];
        json_t *gj = group_json(&d, rep, srank[w], gs, ngs, tg[g].steps, stime[w], med, &prof);
        if (rep != CH(w))
            free(rep);
        tg[g].steps = NULL;
        if (!gj)
            goto oom;
        bool decided = strcmp(json_string_value(json_object_get(gj, "cause")), "undecided") != 0;
        go[ng++] = (struct gout){.g = gj, .decided = decided, .n = tg[g].n,
                                 .total = tg[g].total * group_share(gj)};
    }
    /* Groups of fewer slow steps than asked for are left out, counted: a
     * loaded machine stalls single steps now and then.  Decided groups
     * first, longer first: they are what the run is about; undecided ones
     * are often noise of a loaded machine. */
    if (ng > 1)
        qsort(go, ng, sizeof(*go), cmp_gout);
    size_t hidden = hidden_weak;
    for (size_t g = 0; g < ng; g++) {
        if (go[g].n < d.o.min_steps) {
            json_decref(go[g].g);
            hidden++;
        } else {
            json_array_append_new(groups, go[g].g);
        }
        go[g].g = NULL;
    }
    const char *reason = NULL;
    /* Steps rolled up past the detail window (docs/collector.md, Retention)
     * have no per-step rows left: said, not diagnosed as if they ran well. */
    struct mks_store_rolled ru;
    bool rolled = !mks_store_rolled(st, job, &ru) && ru.epochs > 0 && ru.step_hi >= (int64_t)lo;
    if (!d.ns && rolled)
        reason = "the steps asked for are rolled up per minute (older than the collector's"
                 " --detail-age): no per-step detail is left to diagnose them";
    else if (!d.ns)
        reason = "no step times stored yet: are agents running with the standard monitors?";
    else if (!n_slow && !n_seg)
        reason = "no step is slower than the median by the threshold, and no rank lags its peers";
    else if (!json_array_size(groups))
        reason = "every group of slow steps is shorter than --min-steps";
    *out = json_pack("{s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:o}", "job", job, "median_step_ns",
                     (json_int_t)med, "steps", (json_int_t)n_steps, "slow_steps",
                     (json_int_t)n_slow, "groups", groups, "hidden_groups", (json_int_t)hidden,
                     "stragglers", (json_int_t)n_seg, "reason",
                     reason ? json_string(reason) : json_null());
    /* a long job on a loaded machine: the slowest steps examined, the
     * others counted */
    n_examined = 0;
    for (size_t k = 0; k < n_steps; k++)
        n_examined += slow[k];
    json_object_set_new(*out, "slow_steps_examined", json_integer((json_int_t)n_examined));
    /* whether the host's CPU contention was measured (the workers are host
     * threads), and the slow steps it explained */
    json_object_set_new(*out, "cpu_wait_measured", json_boolean(cw_seen));
    json_object_set_new(*out, "contended_steps",
                        cw_seen ? json_integer((json_int_t)n_cont) : json_null());
    json_object_set_new(*out, "first_step", n_steps ? json_integer(steps[0]) : json_null());
    /* where the step times came from (docs/collector.md, Step aggregates) */
    json_object_set_new(*out, "step_times", json_string(d.agg ? "aggregates" : "rows"));
    if (agg_why && n_steps > DIAG_DETAIL_MAX)
        json_object_set_new(*out, "step_times_note", json_string(agg_why));
    json_object_set_new(*out, "last_step",
                        n_steps ? json_integer(steps[n_steps - 1]) : json_null());
    if (rolled)
        json_object_set_new(*out, "rolled_up",
                            json_pack("{s:I, s:I, s:I}", "epochs", (json_int_t)ru.epochs,
                                      "until_ns", (json_int_t)ru.until_ns, "steps_to",
                                      (json_int_t)ru.step_hi));
    groups = NULL;
    rc = 0;
    goto out;
oom:
    rc = -ENOMEM;
fail_rc:
    rc = mks_serve_fail(err, errlen, rc, rc == -ENOMEM ? "diagnose: out of memory"
                                                       : "diagnose: cannot read the store: %s",
                        sqlite3_errmsg(mks_store_db(st)));
out:
    json_decref(groups);
    for (size_t g = 0; tg && g < n_tg; g++) {
        json_decref(tg[g].steps);
        free(tg[g].ks);
    }
    for (size_t g = 0; go && g < n_tg + n_seg; g++)
        json_decref(go[g].g);
    free(go);
    free(tg);
    free(seg);
    blame_free(&bl);
    prof_free(&prof);
#undef CH
    free(chains);
    free(cidx);
    free(steps);
    free(stime);
    free(srank);
    free(exs);
    free(n_ck);
    free(tex);
    free(bslow);
    free(cont);
    free(cont_sum);
    free(cont_rank);
    free(slow);
    free(want);
    free(cell_step);
    sqlite3_finalize(d.q_cls);
    sqlite3_finalize(d.q_wait);
    sqlite3_finalize(d.q_rel);
    sqlite3_finalize(d.q_cov);
    sqlite3_finalize(d.q_work);
    sqlite3_finalize(d.q_tier);
    free(d.s);
    free(d.c);
    free(d.w);
    free(d.r);
    free(d.es);
    agg_free(d.agg);
    free(d.qwi_med);
    free(d.n_workers);
    free(d.rank_cells);
    free(d.norms);
    free(d.buf);
    mks_clock_model_destroy(d.clock);
    return rc;
}

/* ---- the CLI verbs ------------------------------------------------------------------------ */

static int parse_u32(const char *a, uint32_t *v)
{
    char *end;
    if (!*a || *a == '-' || *a == '+')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(a, &end, 10);
    if (errno || *end || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

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
        uint32_t v;
        if (parse_u32(a, &v) || v < 1 || v > 1000000)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--min-steps wants a number of steps, 1 or more");
        o.min_steps = v;
    }
    if ((a = mks_serve_arg(req, "last"))) {
        if (parse_u32(a, &o.last) || o.last < 1)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--last wants a number of steps, 1 or more");
    }
    if ((a = mks_serve_arg(req, "steps"))) {
        char lo[16], hi[16];
        const char *dash = strchr(a, '-');
        size_t l = dash ? (size_t)(dash - a) : strlen(a);
        if (l >= sizeof(lo) || (dash && strlen(dash + 1) >= sizeof(hi)))
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--steps wants A-B (or A): a range of step numbers");
        memcpy(lo, a, l), lo[l] = 0;
        strcpy(hi, dash ? dash + 1 : lo);
        if (parse_u32(lo, &o.step_lo) || parse_u32(hi, &o.step_hi) || o.step_lo > o.step_hi)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--steps wants A-B with A <= B (step numbers)");
        o.range = 1;
    }
    if (mks_diagnose(env->st, job, &o, out, err, errlen))
        return MKS_EXIT_ERROR;
    return 0;
}
