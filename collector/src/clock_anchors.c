/*
 * The clock's anchors kept at ingest (what they hold: clock_anchors.h).
 *
 * A block's kept anchors are the hull vertices of its epochs' anchors; a
 * flush merges each block's new anchors with what it keeps (one read of a
 * few rows), cuts the union to its vertices again and writes the
 * difference: in time order the newest anchor is a vertex and the one
 * before it mostly no longer, so a summary costs a row in and a row out.
 * A block whose epochs lose an anchor (deleted, or rolled up into one that
 * spans their minute) cannot tell what became a vertex without them: it is
 * marked stale and refreshed from its epochs while the collector idles,
 * and read from them until then.
 */
#include "clock_anchors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char mks_anchors_schema[] =
    "CREATE TABLE IF NOT EXISTS clock_hulls(job TEXT NOT NULL, rank INTEGER NOT NULL,"
    " incarnation INTEGER NOT NULL, blk INTEGER NOT NULL, device_ns INTEGER NOT NULL,"
    " host_ns INTEGER NOT NULL, PRIMARY KEY(job, rank, incarnation, blk, device_ns, host_ns))"
    " WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS clock_stale(job TEXT NOT NULL, rank INTEGER NOT NULL,"
    " incarnation INTEGER NOT NULL, blk INTEGER NOT NULL, PRIMARY KEY(job, rank, incarnation,"
    " blk)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS clock_jobs(job TEXT PRIMARY KEY, cut INTEGER NOT NULL)"
    " WITHOUT ROWID;\n";

/* Stale blocks one fill pass refreshes at most. */
#define STALE_PER_PASS 16

struct mks_anchors_note {
    char job[MKS_WIRE_MAX_JOB + 1];
    uint32_t rank;
    int64_t inc, blk, eid;
    int64_t dev[2], host[2];
};

bool mks_anchors_pair(int64_t device_ns, int64_t host_ns, uint32_t rank,
                      struct mks_clock_anchor *a)
{
    /* stored two's complement: what SQL's "> 0" took */
    if (device_ns <= 0 || host_ns < MKS_ANCHORS_SLACK_NS ||
        host_ns > INT64_MAX - MKS_ANCHORS_SLACK_NS)
        return false;
    *a = (struct mks_clock_anchor){.rank = rank, .device_ns = (uint64_t)device_ns,
                                   .host_lo_ns = (uint64_t)(host_ns - MKS_ANCHORS_SLACK_NS),
                                   .host_hi_ns = (uint64_t)(host_ns + MKS_ANCHORS_SLACK_NS)};
    return true;
}

static int push(struct mks_anchors *a, const struct mks_anchors_note *r)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        struct mks_anchors_note *p = realloc(a->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        a->v = p, a->cap = cap;
    }
    a->v[a->n++] = *r;
    return 0;
}

int mks_anchors_note(struct mks_anchors *a, const char *job, uint32_t rank, uint64_t incarnation,
                     uint64_t seq, int64_t eid, uint64_t t_begin_dev, uint64_t t_begin_host,
                     uint64_t t_end_dev, uint64_t t_end_host)
{
    struct mks_anchors_note r = {.rank = rank, .inc = (int64_t)incarnation,
                                 .blk = (int64_t)seq >> MKS_ANCHORS_BLK_SHIFT, .eid = eid,
                                 .dev = {(int64_t)t_begin_dev, (int64_t)t_end_dev},
                                 .host = {(int64_t)t_begin_host, (int64_t)t_end_host}};
    snprintf(r.job, sizeof(r.job), "%s", job);
    return push(a, &r);
}

void mks_anchors_mark(struct mks_anchors *a)
{
    a->mark = a->n;
}

void mks_anchors_truncate(struct mks_anchors *a)
{
    a->n = a->mark;
}

void mks_anchors_free(struct mks_anchors *a)
{
    if (!a)
        return;
    sqlite3_finalize(a->q_get);
    sqlite3_finalize(a->q_del);
    sqlite3_finalize(a->q_ins);
    sqlite3_finalize(a->q_job);
    free(a->v);
    memset(a, 0, sizeof(*a));
}

static int prep(sqlite3 *db, sqlite3_stmt **s, const char *sql)
{
    if (*s)
        return SQLITE_OK;
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, s, NULL);
}

static int prep_block(struct mks_anchors *a, sqlite3 *db)
{
    int rc;
    if ((rc = prep(db, &a->q_get,
                   "SELECT device_ns, host_ns FROM clock_hulls WHERE job = ?1 AND rank = ?2 AND"
                   " incarnation = ?3 AND blk = ?4")) ||
        (rc = prep(db, &a->q_del,
                   "DELETE FROM clock_hulls WHERE job = ?1 AND rank = ?2 AND incarnation = ?3"
                   " AND blk = ?4 AND device_ns = ?5 AND host_ns = ?6")) ||
        (rc = prep(db, &a->q_ins,
                   "INSERT OR IGNORE INTO clock_hulls(job, rank, incarnation, blk, device_ns,"
                   " host_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6)")))
        return rc;
    return SQLITE_OK;
}

static void bind_block(sqlite3_stmt *s, const struct mks_anchors_note *k)
{
    sqlite3_bind_text(s, 1, k->job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, k->rank);
    sqlite3_bind_int64(s, 3, k->inc);
    sqlite3_bind_int64(s, 4, k->blk);
}

static int run(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The anchors of notes v[0..n) appended to *out (the caller's buffer,
 * grown), marked new (reserved 0). */
static int note_anchors(const struct mks_anchors_note *v, size_t n, struct mks_clock_anchor **out,
                        size_t *len, size_t *cap)
{
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            struct mks_clock_anchor x;
            if (!mks_anchors_pair(v[i].dev[k], v[i].host[k], 0, &x))
                continue;
            if (*len == *cap) {
                size_t c = *cap ? 2 * *cap : 64;
                struct mks_clock_anchor *p = realloc(*out, c * sizeof(*p));
                if (!p)
                    return -ENOMEM;
                *out = p, *cap = c;
            }
            (*out)[(*len)++] = x;
        }
    return 0;
}

/* One row of a block: the anchor's device time and host time. */
static int block_row(sqlite3_stmt *s, const struct mks_anchors_note *k,
                     const struct mks_clock_anchor *x)
{
    bind_block(s, k);
    sqlite3_bind_int64(s, 5, (int64_t)x->device_ns);
    sqlite3_bind_int64(s, 6, (int64_t)x->host_lo_ns + MKS_ANCHORS_SLACK_NS);
    return run(s);
}

/* Block k's kept anchors merged with the anchors of notes v[0..n): the
 * union cut to its vertices, what no longer is one deleted, what newly is
 * one inserted. */
static int merge_block(struct mks_anchors *a, sqlite3 *db, const struct mks_anchors_note *k,
                       const struct mks_anchors_note *v, size_t n)
{
    struct mks_clock_anchor *x = NULL, *old = NULL;
    size_t len = 0, cap = 0, kept;
    bool *stays = NULL;
    int rc = prep_block(a, db);
    if (rc)
        return rc;
    /* what the block keeps, each marked with its place + 1 */
    bind_block(a->q_get, k);
    while ((rc = sqlite3_step(a->q_get)) == SQLITE_ROW) {
        struct mks_clock_anchor y;
        if (!mks_anchors_pair(sqlite3_column_int64(a->q_get, 0),
                              sqlite3_column_int64(a->q_get, 1), 0, &y))
            continue;
        if (len == cap) {
            size_t c = cap ? 2 * cap : 64;
            struct mks_clock_anchor *p = realloc(x, c * sizeof(*p));
            if (!p) {
                rc = SQLITE_NOMEM;
                break;
            }
            x = p, cap = c;
        }
        y.reserved = (uint32_t)len + 1;
        x[len++] = y;
    }
    sqlite3_reset(a->q_get);
    if (rc != SQLITE_DONE)
        goto out;
    size_t stored = len;
    rc = SQLITE_NOMEM;
    if (note_anchors(v, n, &x, &len, &cap))
        goto out;
    if (len == stored) {
        rc = SQLITE_OK; /* nothing new */
        goto out;
    }
    old = malloc((stored + 1) * sizeof(*old));
    stays = calloc(stored + 1, sizeof(*stays));
    if (!old || !stays)
        goto out;
    memcpy(old, x, stored * sizeof(*old));
    if (mks_clock_anchors_reduce(x, len, &kept))
        goto out;
    for (size_t i = 0; i < kept; i++)
        if (x[i].reserved)
            stays[x[i].reserved - 1] = true;
    /* deleted first: a new anchor equal to a stored one may be kept in its
     * place, and goes back in below */
    rc = SQLITE_OK;
    for (size_t i = 0; i < stored && rc == SQLITE_OK; i++)
        if (!stays[i])
            rc = block_row(a->q_del, k, &old[i]);
    for (size_t i = 0; i < kept && rc == SQLITE_OK; i++)
        if (!x[i].reserved)
            rc = block_row(a->q_ins, k, &x[i]);
out:
    free(x);
    free(old);
    free(stays);
    return rc;
}

/* By block, the notes with no anchor pair kept in their place. */
static int cmp_note(const void *p, const void *q)
{
    const struct mks_anchors_note *a = p, *b = q;
    int c = strcmp(a->job, b->job);
    if (c)
        return c;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->inc != b->inc)
        return a->inc < b->inc ? -1 : 1;
    return a->blk < b->blk ? -1 : a->blk > b->blk;
}

static bool same_block(const struct mks_anchors_note *a, const struct mks_anchors_note *b)
{
    return a->rank == b->rank && a->inc == b->inc && a->blk == b->blk && !strcmp(a->job, b->job);
}

/* Notes v[0..n) merged block by block (sorted here). */
static int merge_notes(struct mks_anchors *a, sqlite3 *db, struct mks_anchors_note *v, size_t n)
{
    int rc = SQLITE_OK;
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_note);
    for (size_t i = 0; i < n && rc == SQLITE_OK;) {
        size_t j = i + 1;
        while (j < n && same_block(&v[i], &v[j]))
            j++;
        rc = merge_block(a, db, &v[i], v + i, j - i);
        i = j;
    }
    return rc;
}

int mks_anchors_apply(struct mks_anchors *a, sqlite3 *db)
{
    int rc = SQLITE_OK;
    if (!a->n || !db)
        goto out;
    /* A job first seen now, with no epoch stored before this flush's, is
     * in blocks from its first epoch; one with older epochs (an older
     * collector's store) has them read from the epochs until filled. */
    if ((rc = prep(db, &a->q_job,
                   "INSERT OR IGNORE INTO clock_jobs(job, cut) SELECT ?1, CASE WHEN EXISTS"
                   " (SELECT 1 FROM epochs WHERE job = ?1 AND id < ?2) THEN ?2 - 1 ELSE -1 END")))
        goto out;
    for (size_t i = 0; i < a->n && rc == SQLITE_OK; i++) {
        bool again = false;
        int64_t first = a->v[i].eid;
        for (size_t j = 0; j < a->n && !again; j++)
            if (!strcmp(a->v[j].job, a->v[i].job)) {
                again = j < i;
                first = a->v[j].eid < first ? a->v[j].eid : first;
            }
        if (again)
            continue;
        sqlite3_bind_text(a->q_job, 1, a->v[i].job, -1, SQLITE_STATIC);
        sqlite3_bind_int64(a->q_job, 2, first);
        rc = run(a->q_job);
    }
    if (rc == SQLITE_OK)
        rc = merge_notes(a, db, a->v, a->n);
out:
    a->n = a->mark = 0;
    return rc;
}

/* ---- the fill: stale blocks and older epochs ---------------------------------------- */

static int exec1(sqlite3 *db, const char *sql, const char *job, int64_t x)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    if (job)
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, x);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

/* Notes of the epochs a statement yields (rank, incarnation, seq, id,
 * then the four clock columns) appended to *v. */
static int read_notes(sqlite3_stmt *s, const char *job, struct mks_anchors *buf)
{
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct mks_anchors_note r = {.rank = (uint32_t)sqlite3_column_int64(s, 0),
                                     .inc = sqlite3_column_int64(s, 1),
                                     .blk = sqlite3_column_int64(s, 2) >> MKS_ANCHORS_BLK_SHIFT,
                                     .eid = sqlite3_column_int64(s, 3),
                                     .dev = {sqlite3_column_int64(s, 4), sqlite3_column_int64(s, 6)},
                                     .host = {sqlite3_column_int64(s, 5),
                                              sqlite3_column_int64(s, 7)}};
        snprintf(r.job, sizeof(r.job), "%s", job);
        if (push(buf, &r))
            return -ENOMEM;
    }
    return rc == SQLITE_DONE ? 0 : -EIO;
}

#define NOTE_COLS "rank, incarnation, seq, id, t_begin_dev, t_begin_host, t_end_dev, t_end_host"

/* Up to STALE_PER_PASS stale blocks rebuilt from their epochs.  1: more
 * are stale, 0: none, <0: -EIO. */
static int refresh_stale(sqlite3 *db, struct mks_anchors *w)
{
    sqlite3_stmt *s, *e = NULL;
    struct mks_anchors_note keys[STALE_PER_PASS];
    size_t nk = 0;
    if (sqlite3_prepare_v2(db, "SELECT job, rank, incarnation, blk FROM clock_stale LIMIT ?1", -1,
                           &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int(s, 1, STALE_PER_PASS + 1);
    int rc, more = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (nk == STALE_PER_PASS) {
            more = 1;
            break;
        }
        struct mks_anchors_note *k = &keys[nk++];
        memset(k, 0, sizeof(*k));
        snprintf(k->job, sizeof(k->job), "%s", (const char *)sqlite3_column_text(s, 0));
        k->rank = (uint32_t)sqlite3_column_int64(s, 1);
        k->inc = sqlite3_column_int64(s, 2);
        k->blk = sqlite3_column_int64(s, 3);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return -EIO;
    int err = 0;
    if (nk && sqlite3_prepare_v2(db,
                                 "SELECT " NOTE_COLS " FROM epochs WHERE job = ?1 AND rank = ?2 AND"
                                 " incarnation = ?3 AND seq BETWEEN ?4 << " MKS_ANCHORS_BLK_SQL
                                 " AND (?4 << " MKS_ANCHORS_BLK_SQL ") + (1 << " MKS_ANCHORS_BLK_SQL
                                 ") - 1",
                                 -1, &e, NULL) != SQLITE_OK)
        return -EIO;
    for (size_t i = 0; i < nk && !err; i++) {
        const struct mks_anchors_note *k = &keys[i];
        sqlite3_stmt *del;
        if (sqlite3_prepare_v2(db,
                               "DELETE FROM clock_hulls WHERE job = ?1 AND rank = ?2 AND"
                               " incarnation = ?3 AND blk = ?4; ",
                               -1, &del, NULL) != SQLITE_OK) {
            err = -EIO;
            break;
        }
        bind_block(del, k);
        rc = sqlite3_step(del);
        sqlite3_finalize(del);
        w->n = 0;
        bind_block(e, k);
        err = rc != SQLITE_DONE ? -EIO : read_notes(e, k->job, w);
        sqlite3_reset(e);
        if (!err && merge_notes(w, db, w->v, w->n) != SQLITE_OK)
            err = -EIO;
        if (!err && sqlite3_prepare_v2(db,
                                       "DELETE FROM clock_stale WHERE job = ?1 AND rank = ?2 AND"
                                       " incarnation = ?3 AND blk = ?4",
                                       -1, &del, NULL) == SQLITE_OK) {
            bind_block(del, k);
            err = sqlite3_step(del) == SQLITE_DONE ? 0 : -EIO;
            sqlite3_finalize(del);
        } else if (!err) {
            err = -EIO;
        }
    }
    sqlite3_finalize(e);
    return err ? err : more;
}

int mks_anchors_fill(sqlite3 *db, size_t max_epochs)
{
    struct mks_anchors w = {0};
    int err = 0, more = 0;
    /* jobs of an older collector's store: every epoch below the cut */
    if (exec1(db,
              "INSERT INTO clock_jobs(job, cut) SELECT r.job, COALESCE((SELECT MAX(id) FROM"
              " epochs WHERE job = r.job), -1) FROM (SELECT DISTINCT job FROM ranks) r WHERE NOT"
              " EXISTS (SELECT 1 FROM clock_jobs c WHERE c.job = r.job)",
              NULL, 0))
        return -EIO;
    if ((more = refresh_stale(db, &w)) < 0)
        goto out;
    sqlite3_stmt *s;
    char job[MKS_WIRE_MAX_JOB + 1];
    int64_t cut = -1;
    if (sqlite3_prepare_v2(db, "SELECT job, cut FROM clock_jobs WHERE cut >= 0 LIMIT 1", -1, &s,
                           NULL) != SQLITE_OK) {
        err = -EIO;
        goto out;
    }
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        snprintf(job, sizeof(job), "%s", (const char *)sqlite3_column_text(s, 0));
        cut = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) {
        err = rc == SQLITE_DONE ? 0 : -EIO;
        goto out;
    }
    if (max_epochs < 1)
        max_epochs = 1;
    int64_t lo = cut >= (int64_t)max_epochs ? cut - (int64_t)max_epochs : -1;
    if (sqlite3_prepare_v2(db,
                           "SELECT " NOTE_COLS " FROM epochs WHERE job = ?1 AND id > ?2 AND"
                           " id <= ?3",
                           -1, &s, NULL) != SQLITE_OK) {
        err = -EIO;
        goto out;
    }
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, lo);
    sqlite3_bind_int64(s, 3, cut);
    w.n = 0;
    err = read_notes(s, job, &w);
    sqlite3_finalize(s);
    if (!err && merge_notes(&w, db, w.v, w.n) != SQLITE_OK)
        err = -EIO;
    /* below: the next epoch of the job, or none */
    if (!err)
        err = exec1(db,
                    "UPDATE clock_jobs SET cut = COALESCE((SELECT MAX(id) FROM epochs WHERE"
                    " job = ?1 AND id <= ?2), -1) WHERE job = ?1",
                    job, lo);
    more = 1;
out:
    mks_anchors_free(&w);
    return err ? err : more;
}

/* ---- the diagnosis's read ------------------------------------------------------------ */

/* Pairs of columns (device, host) from col on, of rank column 0. */
static long add_rows(sqlite3_stmt *s, int pairs, uint32_t n_ranks, struct mks_clock_model *m)
{
    long n = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t r = sqlite3_column_int64(s, 0);
        if (r < 0 || r >= n_ranks)
            continue;
        for (int k = 0; k < pairs; k++) {
            struct mks_clock_anchor x;
            if (mks_anchors_pair(sqlite3_column_int64(s, 1 + 2 * k),
                                 sqlite3_column_int64(s, 2 + 2 * k), (uint32_t)r, &x))
                n += mks_clock_add_anchors(m, &x, 1) == 0;
        }
    }
    return rc == SQLITE_DONE ? n : -EIO;
}

long mks_anchors_load(sqlite3 *db, const char *job, uint32_t n_ranks,
                      struct mks_clock_model *model)
{
    static const char *const sql[] = {
        "SELECT cut FROM clock_jobs WHERE job = ?1",
        "SELECT rank, device_ns, host_ns FROM clock_hulls WHERE job = ?1",
        "SELECT e.rank, e.t_begin_dev, e.t_begin_host, e.t_end_dev, e.t_end_host FROM clock_stale"
        " s CROSS JOIN epochs e ON e.job = s.job AND e.rank = s.rank AND e.incarnation ="
        " s.incarnation AND e.seq BETWEEN s.blk << " MKS_ANCHORS_BLK_SQL " AND (s.blk << "
        MKS_ANCHORS_BLK_SQL ") + (1 << " MKS_ANCHORS_BLK_SQL ") - 1 WHERE s.job = ?1",
        "SELECT rank, t_begin_dev, t_begin_host, t_end_dev, t_end_host FROM epochs WHERE"
        " job = ?1 AND id <= ?2"};
    /* one snapshot: an epoch deleted between two reads is in neither */
    if (sqlite3_exec(db, "SAVEPOINT anchors_load", NULL, NULL, NULL) != SQLITE_OK)
        return -EIO;
    long n = 0;
    int64_t cut = -1;
    for (int q = 0; q < 4 && n >= 0; q++) {
        sqlite3_stmt *s;
        if (q == 3 && cut < 0)
            break;
        if (sqlite3_prepare_v2(db, sql[q], -1, &s, NULL) != SQLITE_OK) {
            n = -EIO;
            break;
        }
        sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
        if (q == 0) {
            int rc = sqlite3_step(s);
            if (rc == SQLITE_ROW)
                cut = sqlite3_column_int64(s, 0);
            n = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : -EIO;
        } else {
            sqlite3_bind_int64(s, 2, cut);
            long k = add_rows(s, q == 1 ? 1 : 2, n_ranks, model);
            n = k < 0 ? k : n + k;
        }
        sqlite3_finalize(s);
    }
    sqlite3_exec(db, "RELEASE anchors_load", NULL, NULL, NULL);
    return n;
}
