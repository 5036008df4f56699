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
    char job[MKS_WIRE_MAX_JOB + 1];
    uint32_t rank;
    int64_t eid, step;
    uint64_t b, e, qwi, dur;
    int64_t nv, nq;      /* a head's merged cell's rows, after the flush */
    int64_t k, kq;       /* a head's rows of the flush, those with queueing */
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

int mks_stepagg_note(struct mks_stepagg *a, const char *job, uint32_t rank, int64_t eid,
                     const Mkscope__V1__EpochSummary *s)
{
    struct mks_stepagg_row r = {.rank = rank, .eid = eid, .job_only = true};
    snprintf(r.job, sizeof(r.job), "%s", job);
    if (push(a, &r))
        return -ENOMEM;
    uint32_t lowest = UINT32_MAX;
    for (size_t i = 0; i < s->n_steps; i++)
        if (s->steps[i]->step < lowest)
            lowest = s->steps[i]->step;
    r.job_only = false;
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *t = s->steps[i];
        r.step = t->step, r.b = t->t_begin_dev_ns, r.e = t->t_end_dev_ns;
        r.qwi = t->queued_while_idle_ns;
        /* as the diagnosis reads the rows: a row without a begin, or
         * ending before it, carries the step but no time */
        r.valid = r.b && r.e >= r.b;
        r.first = t->step == lowest;
        r.dup = false;
        for (size_t j = 0; j < i && !r.dup; j++)
            r.dup = s->steps[j]->step == t->step;
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
    sqlite3_finalize(a->q_cell);
    for (int k = 0; k < MKS_STEPAGG_CHUNKS; k++)
        sqlite3_finalize(a->q_new[k]);
    for (int k = 0; k < 3; k++)
        sqlite3_finalize(a->q_sp[k]);
    sqlite3_finalize(a->q_agg);
    sqlite3_finalize(a->q_job);
    free(a->rows);
    memset(a, 0, sizeof(*a));
}

/* By job, step and rank, the rows with no step after all others. */
static int cmp_row(const void *x, const void *y)
{
    const struct mks_stepagg_row *a = x, *b = y;
    if (a->job_only != b->job_only)
        return a->job_only ? 1 : -1;
    int c = strcmp(a->job, b->job);
    if (c)
        return c;
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

static int write_agg(struct mks_stepagg *a, const char *job, int64_t step, bool has_dur,
                     uint64_t dur, uint32_t rank, int64_t cells, int64_t qcells, int64_t pairs,
                     int64_t firsts)
{
    return step_agg_row(a->q_agg, job, step, has_dur, dur, rank, cells, qcells, pairs, firsts);
}

/* New cells a statement inserts at most (chunks of these sizes). */
static const unsigned new_rows[MKS_STEPAGG_CHUNKS] = {64, 16, 4, 1};

/* The kept statement inserting new_rows[k] cells, each only if it is not
 * stored yet. */
static sqlite3_stmt *new_stmt(struct mks_stepagg *a, sqlite3 *db, int k)
{
    if (a->q_new[k])
        return a->q_new[k];
    static const char head[] =
        "INSERT INTO step_cells(job, step, rank, t_begin, t_end, qwi, nv, nq) VALUES";
    static const char tail[] = " ON CONFLICT(job, step, rank) DO NOTHING";
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

/* A cell's key and what the flush's rows of it add, bound from ?idx on
 * (the order of step_cells' columns). */
static void bind_cell(sqlite3_stmt *s, int idx, const struct mks_stepagg_row *h)
{
    sqlite3_bind_text(s, idx, h->job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, idx + 1, h->step);
    sqlite3_bind_int64(s, idx + 2, h->rank);
    sqlite3_bind_int64(s, idx + 3, (int64_t)h->b);
    sqlite3_bind_int64(s, idx + 4, (int64_t)h->e);
    sqlite3_bind_int64(s, idx + 5, (int64_t)h->qwi);
    sqlite3_bind_int64(s, idx + 6, h->k);
    sqlite3_bind_int64(s, idx + 7, h->kq);
}

static int cmp_key(const char *job, int64_t step, uint32_t rank, const struct mks_stepagg_row *r)
{
    int c = strcmp(job, r->job);
    if (c)
        return c;
    if (step != r->step)
        return step < r->step ? -1 : 1;
    return rank < r->rank ? -1 : rank > r->rank;
}

static int run(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The cells of the flush (heads[0..n), sorted by key) written, each with
 * the flush's rows of it merged, and every head given its merged cell (b,
 * e, nv, nq) and dur.  Most cells are new: a chunk of them is one
 * statement, kept when it inserted every cell (a savepoint around it).  A
 * chunk with a cell stored already is rolled back and written cell by
 * cell: an UPDATE merging the stored cell (which returns it), or the
 * insert of one that is not. */
static int write_cells(struct mks_stepagg *a, sqlite3 *db, struct mks_stepagg_row **heads,
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
        struct mks_stepagg_row **c = heads + done;
        unsigned m = new_rows[k];
        done += m;
        for (unsigned i = 0; i < m; i++)
            bind_cell(s, (int)(8 * i + 1), c[i]);
        if ((rc = run(a->q_sp[0])) != SQLITE_OK || (rc = run(s)) != SQLITE_OK)
            break;
        bool all = sqlite3_changes(db) == (int)m;
        if (!all && (rc = run(a->q_sp[1])) != SQLITE_OK)
            break;
        if ((rc = run(a->q_sp[2])) != SQLITE_OK)
            break;
        for (unsigned i = 0; i < m && rc == SQLITE_OK; i++) {
            struct mks_stepagg_row *h = c[i];
            if (all) {
                h->nv = h->k, h->nq = h->kq, h->dur = h->e - h->b;
                continue;
            }
            sqlite3_stmt *u = a->q_cell;
            bind_cell(u, 1, h);
            rc = sqlite3_step(u);
            if (rc == SQLITE_ROW) {
                uint64_t b = (uint64_t)sqlite3_column_int64(u, 0);
                uint64_t e = (uint64_t)sqlite3_column_int64(u, 1);
                h->dur = e - b;
                h->nv = sqlite3_column_int64(u, 2), h->nq = sqlite3_column_int64(u, 3);
                rc = SQLITE_OK;
                sqlite3_reset(u);
                continue;
            }
            sqlite3_reset(u);
            if (rc != SQLITE_DONE)
                break;
            sqlite3_stmt *one = new_stmt(a, db, MKS_STEPAGG_CHUNKS - 1);
            if (!one)
                return SQLITE_ERROR;
            bind_cell(one, 1, h);
            if ((rc = run(one)) == SQLITE_OK)
                h->nv = h->k, h->nq = h->kq, h->dur = h->e - h->b;
        }
    }
    return rc;
}

int mks_stepagg_apply(struct mks_stepagg *a, sqlite3 *db)
{
    int rc = SQLITE_OK;
    struct mks_stepagg_row **heads = NULL;
    if (!a->n || !db) {
        a->n = a->mark = 0;
        return rc;
    }
    if ((rc = prep(db, &a->q_sp[0], "SAVEPOINT step_cells")) ||
        (rc = prep(db, &a->q_sp[1], "ROLLBACK TO step_cells")) ||
        (rc = prep(db, &a->q_sp[2], "RELEASE step_cells")) ||
        (rc = prep(db, &a->q_cell,
                   "UPDATE step_cells SET t_begin = MIN(t_begin, ?4), t_end = MAX(t_end, ?5),"
                   " qwi = MAX(qwi, ?6), nv = nv + ?7, nq = nq + ?8 WHERE job = ?1 AND"
                   " step = ?2 AND rank = ?3 RETURNING t_begin, t_end, nv, nq")) ||
        (rc = prep(db, &a->q_agg,
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
                   " (SELECT 1 FROM epochs WHERE job = ?1 AND id < ?2) THEN ?3 ELSE -1 END")))
        goto out;
    /* the jobs, in the order their epochs were stored: only a job's first
     * epoch of the flush can add its row (the others are ignored) */
    const char *seen[16];
    size_t n_seen = 0;
    for (size_t i = 0; i < a->n && rc == SQLITE_OK; i++) {
        struct mks_stepagg_row *r = &a->rows[i];
        if (!r->job_only)
            continue;
        bool again = false;
        for (size_t j = n_seen; j-- > 0 && !again;)
            again = !strcmp(seen[j], r->job);
        if (again)
            continue;
        if (n_seen < sizeof(seen) / sizeof(seen[0]))
            seen[n_seen++] = r->job;
        sqlite3_bind_text(a->q_job, 1, r->job, -1, SQLITE_STATIC);
        sqlite3_bind_int64(a->q_job, 2, r->eid);
        sqlite3_bind_int64(a->q_job, 3, MKS_STEPAGG_NONE);
        rc = sqlite3_step(a->q_job);
        sqlite3_reset(a->q_job);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK)
        goto out;
    /* The cells: the flush's rows with a time of one (job, step, rank)
     * merged into the first (its head), as the upsert of each in turn
     * would merge them (earliest begin, latest end, largest queueing;
     * nv rows, kq with queueing), then written once each. */
    qsort(a->rows, a->n, sizeof(*a->rows), cmp_row);
    if (!(heads = malloc(a->n * sizeof(*heads)))) {
        rc = SQLITE_NOMEM;
        goto out;
    }
    size_t n_heads = 0;
    for (size_t i = 0; i < a->n; i++) {
        struct mks_stepagg_row *r = &a->rows[i];
        r->head = false;
        if (r->job_only || !r->valid)
            continue;
        struct mks_stepagg_row *h = n_heads ? heads[n_heads - 1] : NULL;
        if (h && !cmp_key(r->job, r->step, r->rank, h)) {
            h->b = r->b < h->b ? r->b : h->b;
            h->e = r->e > h->e ? r->e : h->e;
            h->qwi = r->qwi > h->qwi ? r->qwi : h->qwi;
            h->k++, h->kq += r->qwi > 0;
            continue;
        }
        r->head = true;
        r->k = 1, r->kq = r->qwi > 0;
        heads[n_heads++] = r;
    }
    if ((rc = write_cells(a, db, heads, n_heads)) != SQLITE_OK)
        goto out;
    /* The steps: one upsert each for all of the flush's rows of it.  A
     * cell is new to the step when it had no row before the flush, and
     * new to its queueing when it had none with queueing before. */
    for (size_t i = 0; i < a->n && rc == SQLITE_OK;) {
        if (a->rows[i].job_only) {
            i++;
            continue;
        }
        size_t j = i;
        bool has = false;
        uint64_t best = 0;
        uint32_t best_rank = 0;
        int64_t cells = 0, qcells = 0, pairs = 0, firsts = 0;
        for (; j < a->n && !a->rows[j].job_only && a->rows[j].step == a->rows[i].step &&
               !strcmp(a->rows[j].job, a->rows[i].job);
             j++) {
            const struct mks_stepagg_row *r = &a->rows[j];
            if (r->head) {
                if (!has || r->dur > best || (r->dur == best && r->rank < best_rank))
                    best = r->dur, best_rank = r->rank, has = true;
                cells += r->nv == r->k;
                qcells += r->kq > 0 && r->nq == r->kq;
            }
            pairs += !r->dup;
            firsts += r->first && !r->dup;
        }
        rc = write_agg(a, a->rows[i].job, a->rows[i].step, has, best, best_rank, cells, qcells,
                       pairs, firsts);
        i = j;
    }
out:
    free(heads);
    a->n = a->mark = 0;
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
            if (nv) {
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
