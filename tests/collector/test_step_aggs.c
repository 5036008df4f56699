/*
 * The per-step aggregates kept at ingest (collector/src/step_aggs.h): after
 * any order of summaries (steps reported by several epochs, rows without
 * times, a step twice in one summary, replays, summaries out of order,
 * several jobs) they equal what the step rows say, computed here in SQL
 * apart from the collector's code, and what the fill recomputes from the
 * rows; retention and the roll-up raise the job's cut and the fill brings
 * them back; a store without them (an older collector's) is filled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "diag_fill.h"
#include "mkscope/store.h"

#define SEC 1000000000ull

static const char *const names[] = {"a"};

static struct mks_store *open_opts(const char *path, uint64_t max_epochs, uint64_t detail_age)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = path, .max_epochs = max_epochs,
                               .detail_age_ns = detail_age};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    return st;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

/* Epoch k of rank r: steps 2k .. 2k+2 (each shared with the next epoch),
 * each epoch seeing a different part of a shared step; now and then a row
 * without a begin, a step sent twice, a
 * queueing time; ranks 0 and 1 alike in some steps (ties). */
static void summary(struct fa_summary *s, uint32_t r, uint64_t k)
{
    memset(s, 0, sizeof(*s));
    s->epoch = k;
    for (int i = 0; i < 3; i++) {
        uint32_t step = (uint32_t)(2 * k + (uint64_t)i);
        uint64_t h = mix(step * 131 + r * 7 + k * 3);
        uint32_t rr = r == 1 && step % 5 == 0 ? 0 : r;
        uint64_t b = 1000000 + step * 1000 + (uint64_t)i * 10 + rr;
        uint64_t e = b + 300 + mix(step * 17 + rr) % 400 + (uint64_t)i * 20;
        if (h % 11 == 0) /* (the wire refuses an end before the begin) */
            b = 0;
        s->steps[s->n_steps].step = step, s->steps[s->n_steps].t_begin = b;
        s->steps[s->n_steps].t_end = e;
        s->steps[s->n_steps++].queued_while_idle = h % 7 == 0 ? h % 1000 + 1 : 0;
    }
    if (k % 4 == 1) { /* a step twice */
        s->steps[s->n_steps] = s->steps[0];
        s->steps[s->n_steps++].t_end += 5;
    }
}

static void ingest(struct mks_store *st, const char *job, uint32_t r, uint64_t k)
{
    struct fa_summary s;
    char err[256];
    summary(&s, r, k);
    assert_int_equal(df_summary(st, job, r, k, &s, err, sizeof(err)), 0);
}

static void reg(struct mks_store *st, const char *job, uint32_t ranks)
{
    char err[256];
    for (uint32_t r = 0; r < ranks; r++)
        assert_int_equal(df_register(st, job, r, ranks, 2, names, NULL, 1, err, sizeof(err)), 0);
}

/* Every row of a query as text, one line each. */
static char *rows(struct mks_store *st, const char *sql)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st), sql, -1, &s, NULL), SQLITE_OK);
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(s); c++) {
            const char *v = (const char *)sqlite3_column_text(s, c);
            size_t need = strlen(v ? v : "NULL") + 2;
            if (len + need + 1 > cap) {
                cap = 2 * (len + need + 1);
                out = realloc(out, cap);
                assert_non_null(out);
            }
            len += (size_t)sprintf(out + len, "%s%c", v ? v : "NULL",
                                   c + 1 < sqlite3_column_count(s) ? ' ' : '\n');
        }
    }
    sqlite3_finalize(s);
    return out;
}

/* What the aggregates must hold for steps above each job's cut, from the
 * step rows (ties: the lowest rank). */
static const char *const want_aggs =
    "WITH c AS (SELECT e.job, s.step, e.rank, MAX(s.t_end_dev) - MIN(s.t_begin_dev) AS d,"
    " MAX(s.queued_while_idle_ns) AS q FROM steps s JOIN epochs e ON e.id = s.epoch_id WHERE"
    " s.t_begin_dev > 0 AND s.t_end_dev >= s.t_begin_dev GROUP BY 1, 2, 3),"
    " p AS (SELECT e.job, s.step, COUNT(DISTINCT s.epoch_id) AS pairs FROM steps s JOIN epochs e"
    " ON e.id = s.epoch_id GROUP BY 1, 2),"
    " f AS (SELECT e.job, m.lo AS step, COUNT(*) AS firsts FROM (SELECT epoch_id, MIN(step) AS lo"
    " FROM steps GROUP BY epoch_id) m JOIN epochs e ON e.id = m.epoch_id GROUP BY 1, 2)"
    " SELECT p.job, p.step, (SELECT MAX(d) FROM c WHERE c.job = p.job AND c.step = p.step),"
    " (SELECT rank FROM c WHERE c.job = p.job AND c.step = p.step ORDER BY d DESC, rank LIMIT 1),"
    " (SELECT COUNT(*) FROM c WHERE c.job = p.job AND c.step = p.step),"
    " (SELECT COUNT(*) FROM c WHERE c.job = p.job AND c.step = p.step AND q > 0), p.pairs,"
    " COALESCE((SELECT firsts FROM f WHERE f.job = p.job AND f.step = p.step), 0) FROM p JOIN"
    " step_agg_jobs j ON j.job = p.job WHERE p.step > j.cut ORDER BY 1, 2";
static const char *const got_aggs =
    "SELECT a.job, a.step, a.dur, a.rank, a.cells, a.qcells, a.pairs, a.firsts FROM step_aggs a"
    " JOIN step_agg_jobs j ON j.job = a.job WHERE a.step > j.cut ORDER BY 1, 2";
static const char *const want_cells =
    "SELECT e.job, s.step, e.rank, MIN(s.t_begin_dev), MAX(s.t_end_dev),"
    " MAX(s.queued_while_idle_ns) FROM steps s JOIN epochs e ON e.id = s.epoch_id JOIN"
    " step_agg_jobs j ON j.job = e.job WHERE s.step > j.cut AND s.t_begin_dev > 0 AND"
    " s.t_end_dev >= s.t_begin_dev GROUP BY 1, 2, 3 HAVING MAX(s.queued_while_idle_ns) > 0"
    " ORDER BY 1, 2, 3";
static const char *const got_cells =
    "SELECT c.job, c.step, c.rank, c.t_begin, c.t_end, c.qwi FROM step_cells c JOIN"
    " step_agg_jobs j ON j.job = c.job WHERE c.step > j.cut ORDER BY 1, 2, 3";

static void assert_exact(struct mks_store *st)
{
    char *w = rows(st, want_aggs), *g = rows(st, got_aggs);
    assert_string_equal(g, w);
    free(w), free(g);
    w = rows(st, want_cells), g = rows(st, got_cells);
    assert_string_equal(g, w);
    free(w), free(g);
}

/* Summaries of two jobs in batches and alone, replays and a late one: the
 * aggregates as the rows say, the fill's recomputation the same. */
static void test_ingest_exact(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(":memory:", 0, 0);
    reg(st, "job", 3);
    reg(st, "other", 2);
    char err[256];
    for (uint64_t k = 1; k <= 40; k++) {
        bool batch = k % 3 != 0;
        if (batch)
            assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
        for (uint32_t r = 0; r < 3; r++)
            if (!(r == 2 && k == 20)) /* rank 2's epoch 20 comes late */
                ingest(st, "job", r, k);
        ingest(st, "other", k % 2, k);
        if (k % 5 == 0)
            ingest(st, "job", 1, k - 1); /* a replay: stored once */
        if (batch)
            assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
    }
    ingest(st, "job", 2, 20);
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs WHERE job = 'job'"), -1);
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs WHERE job = 'other'"), -1);
    /* steps 2 .. 82 of "job" */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM step_aggs WHERE job = 'job'"), 81);
    assert_true(df_one(st, "SELECT COUNT(*) FROM step_aggs WHERE qcells > 0") > 0);
    assert_exact(st);
    char *before = rows(st, got_aggs), *cells = rows(st, got_cells);
    /* recomputed from the rows: the same */
    assert_int_equal(sqlite3_exec(mks_store_db(st),
                                  "UPDATE step_agg_jobs SET cut = 9223372036854775807;"
                                  " DELETE FROM step_aggs; DELETE FROM step_cells",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(mks_store_fill_steps(st), 0);
    assert_int_equal(df_one(st, "SELECT MAX(cut) FROM step_agg_jobs"), -1);
    char *after = rows(st, got_aggs), *cells2 = rows(st, got_cells);
    assert_string_equal(after, before);
    assert_string_equal(cells2, cells);
    free(before), free(after), free(cells), free(cells2);
    mks_store_close(st);
}

/* Batches of many ranks: a flush's cells are written 64 to a statement,
 * some chunks all new, some all stored already (a step shared with the
 * epoch before), some mixed (ranks that skipped an epoch): the same. */
static void test_many_ranks(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(":memory:", 0, 0);
    reg(st, "job", 90);
    char err[256];
    for (uint64_t k = 1; k <= 12; k++) {
        assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
        for (uint32_t r = 0; r < 90; r++)
            if ((r + k) % 7)
                ingest(st, "job", r, k);
        assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
    }
    /* cells with queueing only (a seventh of the steps), the others none */
    assert_true(df_one(st, "SELECT COUNT(*) FROM step_cells") > 64);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM step_cells WHERE qwi = 0 OR nq = 0"), 0);
    assert_exact(st);
    mks_store_close(st);
}

/* A message that fails inside a batch leaves no aggregate behind. */
static void test_failed_message(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(":memory:", 0, 0);
    reg(st, "job", 1);
    char err[256];
    struct fa_summary s;
    assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
    ingest(st, "job", 0, 1);
    summary(&s, 0, 2);
    /* an unregistered rank: refused, rolled back alone */
    assert_int_not_equal(df_summary(st, "job", 5, 2, &s, err, sizeof(err)), 0);
    assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM step_cells WHERE rank = 5"), 0);
    assert_exact(st);
    mks_store_close(st);
}

/* Retention takes a rank's oldest epochs: the cut rises above their steps,
 * the idle loop's fill brings the aggregates back to what is left. */
static void test_retention(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(":memory:", 8, 0);
    reg(st, "job", 2);
    for (uint64_t k = 1; k <= 30; k++)
        for (uint32_t r = 0; r < 2; r++)
            ingest(st, "job", r, k);
    assert_int_equal(mks_store_retain(st, 3 * SEC), 0);
    /* epochs 1 .. 22 went, their steps up to 46 */
    assert_true(df_one(st, "SELECT cut FROM step_agg_jobs") >= 46);
    for (int i = 0; i < 100 && df_one(st, "SELECT cut FROM step_agg_jobs") >= 0; i++)
        assert_int_equal(mks_store_idle(st, (4 + (uint64_t)i) * SEC), 0);
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs"), -1);
    assert_int_equal(df_one(st, "SELECT MIN(step) FROM step_aggs"), 46);
    assert_exact(st);
    mks_store_close(st);
}

/* The roll-up takes every step row of the epochs past the detail window. */
static void test_rolled_up(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(":memory:", 0, 1 * SEC);
    reg(st, "job", 2);
    for (uint64_t k = 1; k <= 10; k++)
        for (uint32_t r = 0; r < 2; r++)
            ingest(st, "job", r, k);
    assert_int_equal(mks_store_retain(st, 200 * SEC), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM steps"), 0);
    assert_true(df_one(st, "SELECT cut FROM step_agg_jobs") >= 22);
    assert_int_equal(mks_store_fill_steps(st), 0);
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs"), -1);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM step_aggs"), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM step_cells"), 0);
    mks_store_close(st);
}

/* A store an older collector wrote (no aggregate tables): its jobs wait
 * for the fill, which the idle loop does a chunk at a time. */
static void test_old_store(void **state)
{
    (void)state;
    char path[] = "/tmp/mks-test-step-aggs-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct mks_store *st = open_opts(path, 0, 0);
    reg(st, "job", 2);
    for (uint64_t k = 1; k <= 1500; k++)
        for (uint32_t r = 0; r < 2; r++)
            ingest(st, "job", r, k);
    assert_int_equal(sqlite3_exec(mks_store_db(st),
                                  "DROP TABLE step_aggs; DROP TABLE step_cells;"
                                  " DROP TABLE step_agg_jobs",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    mks_store_close(st);
    st = open_opts(path, 0, 0);
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs"), 9223372036854775807ll);
    /* ingest goes on meanwhile */
    ingest(st, "job", 0, 1501);
    int passes = 0;
    while (df_one(st, "SELECT cut FROM step_agg_jobs") >= 0 && passes < 100) {
        assert_int_equal(mks_store_idle(st, (uint64_t)(passes + 2) * SEC), 0);
        if (passes == 0) /* more than one pass: bounded */
            assert_true(df_one(st, "SELECT cut FROM step_agg_jobs") > 0);
        passes++;
    }
    assert_int_equal(df_one(st, "SELECT cut FROM step_agg_jobs"), -1);
    ingest(st, "job", 1, 1501);
    assert_exact(st);
    mks_store_close(st);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingest_exact), cmocka_unit_test(test_failed_message),
        cmocka_unit_test(test_retention),    cmocka_unit_test(test_rolled_up),
        cmocka_unit_test(test_old_store),    cmocka_unit_test(test_many_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
