/* Probe results into the store (probe_store.h). */
#include "probe_store.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/probe.h"

void mks_probe_words_blob(const uint64_t *w, size_t n, uint8_t *blob)
{
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            blob[8 * i + b] = (uint8_t)(w[i] >> (8 * b));
}

size_t mks_probe_blob_words(const void *blob, size_t bytes, uint64_t *w, size_t max)
{
    const uint8_t *p = blob;
    size_t n = bytes / 8 < max ? bytes / 8 : max;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
            v = v << 8 | p[8 * i + b];
        w[i] = v;
    }
    return n;
}

static int step_done(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -EIO;
}

struct stmts {
    sqlite3_stmt *get, *put, *count_up, *hook, *run;
};

static void stmts_free(struct stmts *q)
{
    sqlite3_finalize(q->get);
    sqlite3_finalize(q->put);
    sqlite3_finalize(q->count_up);
    sqlite3_finalize(q->hook);
    sqlite3_finalize(q->run);
}

static int stmts_prepare(sqlite3 *db, struct stmts *q)
{
    memset(q, 0, sizeof(*q));
    if (sqlite3_prepare_v2(db, "SELECT words FROM probe_groups WHERE probe_id = ? AND key = ?", -1,
                           &q->get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT OR REPLACE INTO probe_groups(probe_id, key, words)"
                           " VALUES(?, ?, ?)",
                           -1, &q->put, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "UPDATE probes SET n_groups = n_groups + ?2, overflowed = overflowed +"
                           " ?3 WHERE id = ?1",
                           -1, &q->count_up, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO probe_hooks VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
                           " ?10, ?11, ?12) ON CONFLICT(probe_id, rank, hook) DO UPDATE SET"
                           " eligible = eligible + ?4, observed = observed + ?5, throttled ="
                           " throttled + ?6, lost = lost + ?7, matched = matched + ?8, unknown ="
                           " unknown + ?9, overflowed = overflowed + ?10, dropped = dropped +"
                           " ?11, contended = contended + ?12",
                           -1, &q->hook, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO probe_runs(probe_id, rank, attached_host_ns, ran_ns,"
                           " epochs, results, first_ns, last_ns, last, ended)"
                           " VALUES(?1, ?2, ?3, ?4, ?5, 1, ?6, ?6, ?7, ?8)"
                           " ON CONFLICT(probe_id, rank) DO UPDATE SET ran_ns = ran_ns + ?4,"
                           " epochs = epochs + ?5, results = results + 1, last_ns = ?6,"
                           " last = last OR ?7, ended = COALESCE(?8, ended),"
                           " attached_host_ns = COALESCE(attached_host_ns, ?3)",
                           -1, &q->run, NULL) != SQLITE_OK) {
        stmts_free(q);
        return -EIO;
    }
    return 0;
}

/* Counts on the wire are bounded (2^53); saturate into SQLite's int64. */
static sqlite3_int64 i64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)v;
}

/* Merge one row into the probe's group of that key (or other); n_new and
 * n_over count groups added and keys sent to other by the cap. */
static int merge_row(struct stmts *q, int64_t id, const struct mks_probe_layout *l,
                     const uint64_t *key, size_t n_key, const uint64_t *words, bool other,
                     uint64_t cap, uint64_t *n_groups, uint64_t *n_new, uint64_t *n_over)
{
    uint8_t kb[8 * MKS_PROBE_MAX_KEYS], wb[8 * MKS_PROBE_MAX_WORDS];
    uint64_t cur[MKS_PROBE_MAX_WORDS];
    size_t kl = other ? 0 : 8 * n_key;
    mks_probe_words_blob(key, other ? 0 : n_key, kb);
    for (int pass = 0; pass < 2; pass++) {
        sqlite3_bind_int64(q->get, 1, id);
        sqlite3_bind_blob(q->get, 2, kb, (int)kl, SQLITE_STATIC);
        int rc = sqlite3_step(q->get);
        bool have = rc == SQLITE_ROW;
        memset(cur, 0, sizeof(cur));
        if (have)
            mks_probe_blob_words(sqlite3_column_blob(q->get, 0),
                                 (size_t)sqlite3_column_bytes(q->get, 0), cur, l->n_words);
        sqlite3_reset(q->get);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            return -EIO;
        if (!have && kl && *n_groups >= cap) {
            /* past the probe's bound: with the other groups */
            kl = 0;
            (*n_over)++;
            continue;
        }
        if (!have && kl) {
            (*n_groups)++;
            (*n_new)++;
        }
        mks_probe_merge(l, cur, words);
        mks_probe_words_blob(cur, l->n_words, wb);
        sqlite3_bind_int64(q->put, 1, id);
        sqlite3_bind_blob(q->put, 2, kb, (int)kl, SQLITE_STATIC);
        sqlite3_bind_blob(q->put, 3, wb, (int)(8 * l->n_words), SQLITE_STATIC);
        return step_done(q->put);
    }
    return 0;
}

static int store_result(sqlite3 *db, struct stmts *q, const mks_envelope *env,
                        const Mkscope__V1__ProbeResult *r, uint64_t now)
{
    sqlite3_stmt *s;
    int64_t id = (int64_t)(r->probe_id > INT64_MAX ? 0 : r->probe_id);
    char text[4200] = "";
    uint64_t groups = 0, n_groups = 0;
    if (sqlite3_prepare_v2(db, "SELECT text, groups, n_groups FROM probes WHERE id = ? AND job = ?",
                           -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_text(s, 2, env->job, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        snprintf(text, sizeof(text), "%s", (const char *)sqlite3_column_text(s, 0));
        groups = (uint64_t)sqlite3_column_int64(s, 1);
        n_groups = (uint64_t)sqlite3_column_int64(s, 2);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW)
        return rc == SQLITE_DONE ? 0 : -EIO; /* not a probe of this job: nothing to add to */
    struct mks_probe *p = NULL;
    struct mks_query_error qe;
    if (mks_probe_parse(text, &p, &qe))
        return 0; /* stored by an older collector with another grammar */
    const struct mks_probe_layout *l = mks_probe_layout(p);
    size_t n_key = l->n_keys ? l->n_keys : 1;
    bool ok = true;
    for (size_t i = 0; i < r->n_rows && ok; i++)
        ok = r->rows[i]->n_key == n_key && r->rows[i]->n_words == l->n_words;
    if (r->other)
        ok = ok && r->other->n_words == l->n_words;
    uint64_t cap = (groups ? groups : MKS_PROBE_GROUPS_DEFAULT) * MKS_PROBE_STORE_GROUPS_FACTOR;
    uint64_t n_new = 0, n_over = 0;
    rc = 0;
    for (size_t i = 0; ok && !rc && i < r->n_rows; i++)
        rc = merge_row(q, id, l, r->rows[i]->key, n_key, r->rows[i]->words, false, cap, &n_groups,
                       &n_new, &n_over);
    if (ok && !rc && r->other)
        rc = merge_row(q, id, l, NULL, 0, r->other->words, true, cap, &n_groups, &n_new, &n_over);
    if (!rc && (n_new || n_over)) {
        sqlite3_bind_int64(q->count_up, 1, id);
        sqlite3_bind_int64(q->count_up, 2, (sqlite3_int64)n_new);
        sqlite3_bind_int64(q->count_up, 3, (sqlite3_int64)n_over);
        rc = step_done(q->count_up);
    }
    for (size_t k = 0; !rc && k < r->n_hooks; k++) {
        const Mkscope__V1__ProbeHook *h = r->hooks[k];
        sqlite3_bind_int64(q->hook, 1, id);
        sqlite3_bind_int64(q->hook, 2, env->rank);
        sqlite3_bind_int64(q->hook, 3, h->hook);
        sqlite3_bind_int64(q->hook, 4, i64(h->eligible));
        sqlite3_bind_int64(q->hook, 5, i64(h->observed));
        sqlite3_bind_int64(q->hook, 6, i64(h->throttled));
        sqlite3_bind_int64(q->hook, 7, i64(h->lost));
        sqlite3_bind_int64(q->hook, 8, i64(h->matched));
        sqlite3_bind_int64(q->hook, 9, i64(h->unknown));
        sqlite3_bind_int64(q->hook, 10, i64(h->overflowed));
        sqlite3_bind_int64(q->hook, 11, i64(h->dropped));
        sqlite3_bind_int64(q->hook, 12, i64(h->contended));
        rc = step_done(q->hook);
    }
    if (!rc) {
        sqlite3_bind_int64(q->run, 1, id);
        sqlite3_bind_int64(q->run, 2, env->rank);
        sqlite3_bind_int64(q->run, 3, i64(r->attached_host_ns));
        sqlite3_bind_int64(q->run, 4, i64(r->ran_ns));
        sqlite3_bind_int64(q->run, 5, i64(r->epochs));
        sqlite3_bind_int64(q->run, 6, i64(now));
        sqlite3_bind_int(q->run, 7, r->last ? 1 : 0);
        if (r->last && r->ended && *r->ended)
            sqlite3_bind_text(q->run, 8, r->ended, -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(q->run, 8);
        rc = step_done(q->run);
    }
    mks_probe_free(p);
    return rc;
}

int mks_probe_store(sqlite3 *db, const mks_envelope *env, uint64_t now_ns)
{
    const Mkscope__V1__EpochSummary *s = env->epoch_summary;
    if (!s || !s->n_probes)
        return 0;
    struct stmts q;
    if (stmts_prepare(db, &q))
        return -EIO;
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n_probes; i++)
        rc = store_result(db, &q, env, s->probes[i], now_ns);
    stmts_free(&q);
    return rc;
}
