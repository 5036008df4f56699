/*
 * Per-step aggregates kept at ingest (what they hold: step_aggs.h).
 *
 * A rank's step merged over epochs only grows (its begin can only move
 * earlier, its end later), so the slowest rank of a step and its time are
 * a running maximum: each flush merges the rows it wrote into step_cells
 * (one upsert a row, which returns the merged cell) and folds the merged
 * times into step_aggs (one upsert a step of the flush).  Ties go to the
 * lowest rank, as the diagnosis's own reading of the rows picks it.  The
 * recomputation from the rows (mks_stepagg_fill: old stores, and steps
 * whose epochs retention or the roll-up took) computes the same values.
 */
#include "step_aggs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char mks_stepagg_schema[] =
    "CREATE TABLE IF NOT EXISTS step_cells(job TEXT NOT NULL, step INTEGER NOT NULL,"
    " rank INTEGER NOT NULL, t_begin INTEGER, t_end INTEGER, qwi INTEGER, nv INTEGER,"
    " nq INTEGER, PRIMARY KEY(job, step, rank)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS step_aggs(job TEXT NOT NULL, step INTEGER NOT NULL,"
    " dur INTEGER, rank INTEGER, cells INTEGER, qcells INTEGER, pairs INTEGER, firsts INTEGER,"
    " PRIMARY KEY(job, step)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS step_agg_jobs(job TEXT PRIMARY KEY, cut INTEGER NOT NULL)"
    " WITHOUT ROWID;\n";

struct mks_stepagg_row {
    uint16_t job;        /* in a->jobs */
    uint32_t rank;
    int64_t eid, step;
    int64_t hi;          /* job_only: the summary's steps are step .. hi (hi < 0: none) */
    uint64_t b, e, qwi, dur;
    int64_t nv, nq;      /* a head's merged cell's rows, after the flush */
    int64_t k, kq;       /* a head's rows of the flush, those with queueing */
    int64_t pnv, pnq;    /* a head's rows stored before the flush (with a time), with queueing */
    uint64_t pb, pe, pq; /* their earliest begin, latest end, largest queueing */
    bool job_only;       /* no step: the summary's job and epoch */
    bool valid, first, dup;
    bool head;           /* the first of the flush's rows of its cell with a time */
};

static int push(struct mks_stepagg *a, const struct mks_stepagg_row *r)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        struct mks_stepagg_row *p = realloc(a->rows, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        a->rows = p, a->cap = cap;
    }
    a->rows[a->n++] = *r;
    return 0;
}

/* The flush's index of a job (rows carry it: sorting them compares
 * integers), or -1 when 65,535 are noted already. */
static int job_index(struct mks_stepagg *a, const char *job)
{
    for (size_t i = a->n_jobs; i-- > 0;)
        if (!strcmp(a->jobs[i], job))
            return (int)i;
    if (a->n_jobs == UINT16_MAX)
        return -1;
    if (a->n_jobs == a->cap_jobs) {
        size_t cap = a->cap_jobs ? 2 * a->cap_jobs : 4;
        char(*p)[MKS_WIRE_MAX_JOB + 1] = realloc(a->jobs, cap * sizeof(*p));
        if (!p)
            return -1;
        a->jobs = p, a->cap_jobs = cap;
    }
    snprintf(a->jobs[a->n_jobs], sizeof(a->jobs[0]), "%s", job);
    return (int)a->n_jobs++;
}

int mks_stepagg_note(struct mks_stepagg *a, const char *job, uint32_t rank, int64_t eid,
                     const Mkscope__V1__EpochSummary *s)
{
    int j = job_index(a, job);
    if (j < 0)
        return -ENOMEM;
    struct mks_stepagg_row r = {.job = (uint16_t)j, .rank = rank, .eid = eid, .job_only = true,
                                .step = -1, .hi = -1};
    for (size_t i = 0; i < s->n_steps; i++) {
        int64_t k = s->steps[i]->step;
        if (r.hi < 0 || k < r.step)
            r.step = k;
        if (k > r.hi)
            r.hi = k;
    }
    if (push(a, &r))
        return -ENOMEM;
    int64_t lowest = r.step;
    r.job_only = false;
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *t = s->steps[i];
        r.step = t->step, r.b = t->t_begin_dev_ns, r.e = t->t_end_dev_ns;
        r.qwi = t->queued_while_idle_ns;
        /* as the diagnosis reads the rows: a row without a begin, or
         * ending before it, carries the step but no time */
        r.valid = r.b && r.e >= r.b;
        r.first = r.step == lowest;
        r.dup = false;
        for (size_t j2 = 0; j2 < i && !r.dup; j2++)
            r.dup = s->steps[j2]->step == t->step;
        if (push(a, &r))
            return -ENOMEM;
    }
    return 0;
}

void mks_stepagg_mark(struct mks_stepagg *a)
{
    a->mark = a->n;
}

void mks_stepagg_truncate(struct mks_stepagg *a)
{
    a->n = a->mark;
}

void mks_stepagg_free(struct mks_stepagg *a)
{
    if (!a)
        return;
    for (int k = 0; k < MKS_STEPAGG_CHUNKS; k++)
        sqlite3_finalize(a->q_new[k]);
    sqlite3_finalize(a->q_prior);
    sqlite3_finalize(a->q_agg);
    sqlite3_finalize(a->q_job);
    free(a->rows);
    free(a->jobs);
    memset(a, 0, sizeof(*a));
}

/* By job, step and rank; the rows with no step after all others, by job
 * and rank. */
static int cmp_row(const void *x, const void *y)
{
    const struct mks_stepagg_row *a = x, *b = y;
    if (a->job_only != b->job_only)
        return a->job_only ? 1 : -1;
    if (a->job != b->job)
        return a->job < b->job ? -1 : 1;
    if (a->job_only && a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int prep(sqlite3 *db, sqlite3_stmt **s, const char *sql)
{
    if (*s)
        return SQLITE_OK;
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, s, NULL);
}

/* The new best of a step: the longer time, the lower rank of equal ones. */
#define AGG_BETTER                                                                                 \
    "excluded.dur IS NOT NULL AND (dur IS NULL OR excluded.dur > dur OR (excluded.dur = dur AND"   \
    " excluded.rank < rank))"

/* One step_aggs row through s (ingest's upsert or the refill's insert:
 * the same eight parameters), stepped and reset. */
static int step_agg_row(sqlite3_stmt *s, const char *job, int64_t step, bool has_dur,
                        uint64_t dur, uint32_t rank, int64_t cells, int64_t qcells, int64_t pairs,
                        int64_t firsts)
{
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, step);
    if (has_dur) {
        sqlite3_bind_int64(s, 3, (int64_t)dur);
        sqlite3_bind_int64(s, 4, rank);
    } else {
        sqlite3_bind_null(s, 3);
        sqlite3_bind_null(s, 4);
    }
    sqlite3_bind_int64(s, 5, cells);
    sqlite3_bind_int64(s, 6, qcells);
    sqlite3_bind_int64(s, 7, pairs);
    sqlite3_bind_int64(s, 8, firsts);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* New cells a statement writes at most (chunks of these sizes). */
static const unsigned new_rows[MKS_STEPAGG_CHUNKS] = {64, 16, 4, 1};

/* The kept statement writing new_rows[k] cells, each replacing what is
 * stored of it (the values are the whole merged cell). */
static sqlite3_stmt *new_stmt(struct mks_stepagg *a, sqlite3 *db, int k)
{
    if (a->q_new[k])
        return a->q_new[k];
    static const char head[] =
        "INSERT INTO step_cells(job, step, rank, t_begin, t_end, qwi, nv, nq) VALUES";
    static const char tail[] =
        " ON CONFLICT(job, step, rank) DO UPDATE SET t_begin = excluded.t_begin,"
        " t_end = excluded.t_end, qwi = excluded.qwi, nv = excluded.nv, nq = excluded.nq";
    size_t len = sizeof(head) + new_rows[k] * sizeof("(?,?,?,?,?,?,?,?),") + sizeof(tail);
    char *sql = malloc(len), *p = sql;
    if (!sql)
        return NULL;
    p += sprintf(p, "%s", head);
    for (unsigned r = 0; r < new_rows[k]; r++)
        p += sprintf(p, "%s(?,?,?,?,?,?,?,?)", r ? "," : " ");
    sprintf(p, "%s", tail);
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &a->q_new[k], NULL) !=
        SQLITE_OK)
        a->q_new[k] = NULL;
    free(sql);
    return a->q_new[k];
}

/* A merged cell bound from ?idx on (the order of step_cells' columns). */
static void bind_cell(sqlite3_stmt *s, int idx, const struct mks_stepagg *a,
                      const struct mks_stepagg_row *h)
{
    sqlite3_bind_text(s, idx, a->jobs[h->job], -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, idx + 1, h->step);
    sqlite3_bind_int64(s, idx + 2, h->rank);
    sqlite3_bind_int64(s, idx + 3, (int64_t)h->b);
    sqlite3_bind_int64(s, idx + 4, (int64_t)h->e);
    sqlite3_bind_int64(s, idx + 5, (int64_t)h->qwi);
    sqlite3_bind_int64(s, idx + 6, h->nv);
    sqlite3_bind_int64(s, idx + 7, h->nq);
}

static int run(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The merged cells with queueing (cells[0..n)) written, 64 to a statement. */
static int write_cells(struct mks_stepagg *a, sqlite3 *db, struct mks_stepagg_row **cells,
                       size_t n)
{
    int rc = SQLITE_OK;
    for (size_t done = 0; done < n && rc == SQLITE_OK;) {
        int k = 0;
        while (new_rows[k] > n - done)
            k++;
        sqlite3_stmt *s = new_stmt(a, db, k);
        if (!s)
            return sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errcode(db) : SQLITE_ERROR;
        for (unsigned i = 0; i < new_rows[k]; i++)
            bind_cell(s, (int)(8 * i + 1), a, cells[done + i]);
        done += new_rows[k];
        rc = run(s);
    }
    return rc;
}

/* The head of cell (job, step, rank) among heads[0..n) (sorted as the
 * rows), or NULL. */
static struct mks_stepagg_row *find_head(struct mks_stepagg_row **heads, size_t n, uint16_t job,
                                         int64_t step, uint32_t rank)
{
    struct mks_stepagg_row key = {.job = job, .step = step, .rank = rank};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        int c = cmp_row(heads[m], &key);
        if (!c)
            return heads[m];
        if (c < 0)
            lo = m + 1;
        else
            hi = m;
    }
    return NULL;
}

/* What the rank's rows stored before the flush (epochs below first_eid)
 * hold of the steps lo..hi, added to the heads of their cells: a rank's
 * earlier epochs that meet these steps are found by their step ranges
 * (epochs_rank_step), none at all for the usual summary whose steps follow
 * its rank's last ones. */
static int add_prior(struct mks_stepagg *a, struct mks_stepagg_row **heads, size_t n_heads,
                     uint16_t job, uint32_t rank, int64_t lo, int64_t hi, int64_t first_eid)
{
    sqlite3_stmt *q = a->q_prior;
    sqlite3_bind_text(q, 1, a->jobs[job], -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, rank);
    sqlite3_bind_int64(q, 3, lo);
    sqlite3_bind_int64(q, 4, hi);
    sqlite3_bind_int64(q, 5, first_eid);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        struct mks_stepagg_row *h =
            find_head(heads, n_heads, job, sqlite3_column_int64(q, 0), rank);
        if (!h)
            continue; /* no row of the flush with a time: the cell stays as it is */
        uint64_t b = (uint64_t)sqlite3_column_int64(q, 1), e = (uint64_t)sqlite3_column_int64(q, 2);
        uint64_t qw = (uint64_t)sqlite3_column_int64(q, 3);
        if (!h->pnv || b < h->pb)
            h->pb = b;
        if (!h->pnv || e > h->pe)
            h->pe = e;
        if (qw > h->pq)
            h->pq = qw;
        h->pnv++, h->pnq += qw > 0;
    }
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int mks_stepagg_apply(struct mks_stepagg *a, sqlite3 *db)
{
    int rc = SQLITE_OK;
    struct mks_stepagg_row **heads = NULL;
    bool *seen = NULL;
    if (!a->n || !db)
        goto out;
    if ((rc = prep(db, &a->q_agg,
                   "INSERT INTO step_aggs(job, step, dur, rank, cells, qcells, pairs, firsts)"
                   " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(job, step) DO UPDATE SET"
                   " dur = CASE WHEN " AGG_BETTER " THEN excluded.dur ELSE dur END,"
                   " rank = CASE WHEN " AGG_BETTER " THEN excluded.rank ELSE rank END,"
                   " cells = cells + excluded.cells, qcells = qcells + excluded.qcells,"
                   " pairs = pairs + excluded.pairs, firsts = firsts + excluded.firsts")) ||
        /* A job first seen now, with no epoch stored before this flush's,
         * is aggregated from its first step; one that has older epochs
         * (an older collector's store) waits for the fill. */
        (rc = prep(db, &a->q_job,
                   "INSERT OR IGNORE INTO step_agg_jobs(job, cut) SELECT ?1, CASE WHEN EXISTS"
                   " (SELECT 1 FROM epochs WHERE job = ?1 AND id < ?2) THEN ?3 ELSE -1 END")) ||
        /* the rank's rows with a time of steps ?3..?4 in epochs before the
         * flush's: an epoch's last step lies at most the rank's widest
         * epoch past its first */
        (rc = prep(db, &a->q_prior,
                   "SELECT s.step, s.t_begin_dev, s.t_end_dev, s.queued_while_idle_ns FROM epochs"
                   " e INDEXED BY epochs_rank_step CROSS JOIN steps s ON s.epoch_id = e.id WHERE"
                   " e.job = ?1 AND e.rank = ?2 AND e.step_hi BETWEEN ?3 AND ?4 + (SELECT"
                   " COALESCE(MAX(step_span), 0) FROM ranks WHERE job = ?1 AND rank = ?2) AND"
                   " e.step_lo <= ?4 AND e.id < ?5 AND s.step BETWEEN ?3 AND ?4 AND"
                   " s.t_begin_dev > 0 AND s.t_end_dev >= s.t_begin_dev")))
        goto out;
    /* the jobs, in the order their epochs were stored: only a job's first
     * epoch of the flush can add its row (the others are ignored) */
    if (!(seen = calloc(a->n_jobs + 1, sizeof(*seen)))) {
        rc = SQLITE_NOMEM;
        goto out;
    }
    int64_t first_eid = INT64_MAX;
    for (size_t i = 0; i < a->n && rc == SQLITE_OK; i++) {
        struct mks_stepagg_row *r = &a->rows[i];
        if (!r->job_only)
            continue;
        if (r->eid < first_eid)
            first_eid = r->eid;
        if (seen[r->job])
            continue;
        seen[r->job] = true;
        sqlite3_bind_text(a->q_job, 1, a->jobs[r->job], -1, SQLITE_STATIC);
        sqlite3_bind_int64(a->q_job, 2, r->eid);
        sqlite3_bind_int64(a->q_job, 3, MKS_STEPAGG_NONE);
        rc = run(a->q_job);
    }
    if (rc != SQLITE_OK)
        goto out;
    /* The cells: the flush's rows with a time of one (job, step, rank)
     * merged into the first (its head): earliest begin, latest end,
     * largest queueing; k rows, kq with queueing. */
    qsort(a->rows, a->n, sizeof(*a->rows), cmp_row);
    if (!(heads = malloc(a->n * sizeof(*heads)))) {
        rc = SQLITE_NOMEM;
        goto out;
    }
    size_t n_heads = 0, n_rows = a->n;
    for (size_t i = 0; i < a->n; i++) {
        struct mks_stepagg_row *r = &a->rows[i];
        r->head = false;
        if (r->job_only) {
            n_rows = n_rows < i ? n_rows : i;
            continue;
        }
        if (!r->valid)
            continue;
        struct mks_stepagg_row *h = n_heads ? heads[n_heads - 1] : NULL;
        if (h && h->job == r->job && h->step == r->step && h->rank == r->rank) {
            h->b = r->b < h->b ? r->b : h->b;
            h->e = r->e > h->e ? r->e : h->e;
            h->qwi = r->qwi > h->qwi ? r->qwi : h->qwi;
            h->k++, h->kq += r->qwi > 0;
            continue;
        }
        r->head = true;
        r->k = 1, r->kq = r->qwi > 0, r->pnv = r->pnq = 0, r->pq = 0;
        heads[n_heads++] = r;
    }
    /* and what each rank's earlier epochs hold of the flush's steps (the
     * summaries' job_only rows, sorted by job and rank) */
    for (size_t i = n_rows; i < a->n && rc == SQLITE_OK && n_heads;) {
        const struct mks_stepagg_row *r = &a->rows[i];
        int64_t lo = -1, hi = -1;
        size_t j = i;
        for (; j < a->n && a->rows[j].job == r->job && a->rows[j].rank == r->rank; j++)
            if (a->rows[j].hi >= 0) {
                if (lo < 0 || a->rows[j].step < lo)
                    lo = a->rows[j].step;
                if (a->rows[j].hi > hi)
                    hi = a->rows[j].hi;
            }
        if (lo >= 0)
            rc = add_prior(a, heads, n_heads, r->job, r->rank, lo, hi, first_eid);
        i = j;
    }
    if (rc != SQLITE_OK)
        goto out;
    /* Each head becomes its whole merged cell; those with queueing are
     * written (the diagnosis reads their queueing, step_aggs.h). */
    size_t n_q = 0;
    for (size_t i = 0; i < n_heads; i++) {
        struct mks_stepagg_row *h = heads[i];
        if (h->pnv) {
            h->b = h->pb < h->b ? h->pb : h->b;
            h->e = h->pe > h->e ? h->pe : h->e;
            h->qwi = h->pq > h->qwi ? h->pq : h->qwi;
        }
        h->nv = h->k + h->pnv, h->nq = h->kq + h->pnq, h->dur = h->e - h->b;
        if (h->nq)
            heads[n_q++] = h; /* (heads[] is read no more but for these) */
    }
    if ((rc = write_cells(a, db, heads, n_q)) != SQLITE_OK)
        goto out;
    /* The steps: one upsert each for all of the flush's rows of it.  A
     * cell is new to the step when it had no row before the flush, and
     * new to its queueing when it had none with queueing before. */
    for (size_t i = 0; i < n_rows && rc == SQLITE_OK;) {
        size_t j = i;
        bool has = false;
        uint64_t best = 0;
        uint32_t best_rank = 0;
        int64_t cells = 0, qcells = 0, pairs = 0, firsts = 0;
        for (; j < n_rows && a->rows[j].step == a->rows[i].step &&
               a->rows[j].job == a->rows[i].job;
             j++) {
            const struct mks_stepagg_row *r = &a->rows[j];
            if (r->head) {
                if (!has || r->dur > best || (r->dur == best && r->rank < best_rank))
                    best = r->dur, best_rank = r->rank, has = true;
                cells += !r->pnv;
                qcells += r->kq > 0 && !r->pnq;
            }
            pairs += !r->dup;
            firsts += r->first && !r->dup;
        }
        rc = step_agg_row(a->q_agg, a->jobs[a->rows[i].job], a->rows[i].step, has, best,
                          best_rank, cells, qcells, pairs, firsts);
        i = j;
    }
out:
    free(heads);
    free(seen);
    a->n = a->mark = 0;
    a->n_jobs = 0;
    return rc;
}

/* ---- the fill: recomputed from the step rows --------------------------------------- */

struct frow {
    uint32_t rank;
    int64_t step, epoch;
    uint64_t b, e, qwi;
};

static int cmp_frow(const void *x, const void *y)
{
    const struct frow *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    return a->epoch < b->epoch ? -1 : a->epoch > b->epoch;
}

static int exec_job(sqlite3 *db, const char *sql, const char *job, int64_t x, int64_t y)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, x);
    sqlite3_bind_int64(s, 3, y);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

/* The epochs whose step rows meet steps ?2 .. ?3 of job ?1, through their
 * steps' range (epochs_step: an epoch's last step lies at most the widest
 * epoch of a rank of the job past the range), as the diagnosis finds them. */
#define EPOCHS_OF_RANGE                                                                            \
    "e.job = ?1 AND e.step_hi BETWEEN ?2 AND ?3 + (SELECT COALESCE(MAX(step_span), 0) FROM ranks"  \
    " WHERE job = ?1) AND e.step_lo <= ?3"

/* The job's highest stored step below `below`, or -1: the highest last
 * step of the epochs that end below it, or a lower step of one that ends
 * at or above it. */
static int64_t step_below(sqlite3 *db, const char *job, int64_t below, int *err)
{
    sqlite3_stmt *s;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db,
                           "SELECT MAX(x) FROM (SELECT MAX(step_hi) AS x FROM epochs WHERE"
                           " job = ?1 AND step_hi < ?2 UNION ALL SELECT MAX(s.step) AS x FROM epochs e"
                           " INDEXED BY epochs_step CROSS JOIN steps s ON s.epoch_id = e.id"
                           " WHERE " EPOCHS_OF_RANGE " AND s.step < ?2)",
                           -1, &s, NULL) != SQLITE_OK) {
        *err = -EIO;
        return -1;
    }
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, below);
    sqlite3_bind_int64(s, 3, below);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_type(s, 0) != SQLITE_NULL)
            v = sqlite3_column_int64(s, 0);
    } else if (rc != SQLITE_DONE) {
        *err = -EIO;
    }
    sqlite3_finalize(s);
    return v;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* Steps lo..hi of job from the rows, written as ingest would have. */
static int refill(sqlite3 *db, const char *job, int64_t lo, int64_t hi)
{
    sqlite3_stmt *s = NULL, *ins_c = NULL, *ins_a = NULL, *q_min = NULL;
    struct frow *v = NULL;
    int64_t *eps = NULL, *emin = NULL;
    size_t n = 0, cap = 0;
    int rc = -EIO;
    if (exec_job(db, "DELETE FROM step_cells WHERE job = ?1 AND step BETWEEN ?2 AND ?3", job, lo,
                 hi) ||
        exec_job(db, "DELETE FROM step_aggs WHERE job = ?1 AND step BETWEEN ?2 AND ?3", job, lo,
                 hi))
        return -EIO;
    if (sqlite3_prepare_v2(db,
                           "SELECT e.rank, s.step, s.epoch_id, s.t_begin_dev, s.t_end_dev,"
                           " s.queued_while_idle_ns FROM epochs e INDEXED BY epochs_step CROSS JOIN"
                           " steps s ON s.epoch_id = e.id WHERE " EPOCHS_OF_RANGE " AND s.step"
                           " BETWEEN ?2 AND ?3",
                           -1, &s, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, lo);
    sqlite3_bind_int64(s, 3, hi);
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            struct frow *p = realloc(v, cap * sizeof(*v));
            if (!p) {
                rc = -ENOMEM;
                goto out;
            }
            v = p;
        }
        v[n++] = (struct frow){.rank = (uint32_t)sqlite3_column_int64(s, 0),
                               .step = sqlite3_column_int64(s, 1),
                               .epoch = sqlite3_column_int64(s, 2),
                               .b = (uint64_t)sqlite3_column_int64(s, 3),
                               .e = (uint64_t)sqlite3_column_int64(s, 4),
                               .qwi = (uint64_t)sqlite3_column_int64(s, 5)};
    }
    if (st != SQLITE_DONE)
        goto out;
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_frow);
    /* each epoch's lowest step, whatever part of it this range holds */
    eps = malloc((n + 1) * sizeof(*eps));
    emin = malloc((n + 1) * sizeof(*emin));
    if (!eps || !emin) {
        rc = -ENOMEM;
        goto out;
    }
    size_t ne = 0;
    for (size_t i = 0; i < n; i++)
        eps[ne++] = v[i].epoch;
    if (ne > 1)
        qsort(eps, ne, sizeof(*eps), cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < ne; i++)
        if (!m || eps[m - 1] != eps[i])
            eps[m++] = eps[i];
    ne = m;
    if (sqlite3_prepare_v2(db, "SELECT step_lo FROM epochs WHERE id = ?1", -1, &q_min, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO step_cells(job, step, rank, t_begin, t_end, qwi, nv, nq)"
                           " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           -1, &ins_c, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO step_aggs(job, step, dur, rank, cells, qcells, pairs,"
                           " firsts) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           -1, &ins_a, NULL) != SQLITE_OK)
        goto out;
    for (size_t i = 0; i < ne; i++) {
        sqlite3_bind_int64(q_min, 1, eps[i]);
        if (sqlite3_step(q_min) != SQLITE_ROW)
            goto out;
        emin[i] = sqlite3_column_int64(q_min, 0);
        sqlite3_reset(q_min);
    }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        bool has = false;
        uint64_t best = 0;
        uint32_t best_rank = 0;
        int64_t cells = 0, qcells = 0, pairs = 0, firsts = 0;
        while (j < n && v[j].step == v[i].step) {
            /* one rank's rows of the step */
            size_t k = j;
            uint64_t b = 0, e = 0, q = 0;
            int64_t nv = 0, nq = 0;
            for (; k < n && v[k].step == v[j].step && v[k].rank == v[j].rank; k++) {
                const struct frow *r = &v[k];
                if (k == j || r->epoch != v[k - 1].epoch) {
                    pairs++;
                    int64_t *p = bsearch(&r->epoch, eps, ne, sizeof(*eps), cmp_i64);
                    firsts += p && emin[p - eps] == r->step;
                }
                if (!r->b || r->e < r->b)
                    continue;
                if (!nv || r->b < b)
                    b = r->b;
                if (!nv || r->e > e)
                    e = r->e;
                if (r->qwi > q)
                    q = r->qwi;
                nv++, nq += r->qwi > 0;
            }
            if (nq) { /* the cells with queueing are kept (step_aggs.h) */
                sqlite3_bind_text(ins_c, 1, job, -1, SQLITE_STATIC);
                sqlite3_bind_int64(ins_c, 2, v[j].step);
                sqlite3_bind_int64(ins_c, 3, v[j].rank);
                sqlite3_bind_int64(ins_c, 4, (int64_t)b);
                sqlite3_bind_int64(ins_c, 5, (int64_t)e);
                sqlite3_bind_int64(ins_c, 6, (int64_t)q);
                sqlite3_bind_int64(ins_c, 7, nv);
                sqlite3_bind_int64(ins_c, 8, nq);
                int x = sqlite3_step(ins_c);
                sqlite3_reset(ins_c);
                if (x != SQLITE_DONE)
                    goto out;
            }
            if (nv) {
                uint64_t dur = e - b;
                if (!has || dur > best) /* ranks come in order: the lowest of equal ones */
                    best = dur, best_rank = v[j].rank, has = true;
                cells++, qcells += nq > 0;
            }
            j = k;
        }
        if (step_agg_row(ins_a, job, v[i].step, has, best, best_rank, cells, qcells, pairs,
                         firsts) != SQLITE_OK)
            goto out;
        i = j;
    }
    rc = 0;
out:
    sqlite3_finalize(s);
    sqlite3_finalize(ins_c);
    sqlite3_finalize(ins_a);
    sqlite3_finalize(q_min);
    free(v);
    free(eps);
    free(emin);
    return rc;
}

int mks_stepagg_fill(sqlite3 *db, size_t max_steps)
{
    sqlite3_stmt *s;
    char job[MKS_WIRE_MAX_JOB + 1];
    int64_t cut;
    if (sqlite3_prepare_v2(db, "SELECT job, cut FROM step_agg_jobs WHERE cut >= 0 LIMIT 1", -1,
                           &s, NULL) != SQLITE_OK)
        return -EIO;
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        snprintf(job, sizeof(job), "%s", (const char *)sqlite3_column_text(s, 0));
        cut = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_DONE)
        return 0;
    if (rc != SQLITE_ROW)
        return -EIO;
    int err = 0;
    /* a job never filled: from its highest step down */
    int64_t hi = cut == MKS_STEPAGG_NONE ? step_below(db, job, MKS_STEPAGG_NONE, &err) : cut;
    if (max_steps < 1)
        max_steps = 1;
    int64_t lo = hi >= (int64_t)max_steps - 1 ? hi - (int64_t)max_steps + 1 : 0;
    if (!err && hi >= 0)
        err = refill(db, job, lo, hi);
    /* below: the next stored step; what lies between holds no rows */
    int64_t next = err || hi < 0 ? -1 : step_below(db, job, lo, &err);
    if (!err)
        err = exec_job(db, "DELETE FROM step_cells WHERE job = ?1 AND step > ?2 AND step < ?3",
                       job, next, hi < 0 ? MKS_STEPAGG_NONE : lo);
    if (!err)
        err = exec_job(db, "DELETE FROM step_aggs WHERE job = ?1 AND step > ?2 AND step < ?3", job,
                       next, hi < 0 ? MKS_STEPAGG_NONE : lo);
    if (!err)
        err = exec_job(db, "UPDATE step_agg_jobs SET cut = ?2 WHERE job = ?1 AND ?3 >= 0", job,
                       next, 0);
    return err ? err : 1;
}
