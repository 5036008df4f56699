/*
 * Retention limits of the store: beyond max_epochs a rank's oldest epochs
 * go (with every row attached to them), epochs received longer than
 * max_age ago go, raw events are capped per job keeping the newest; the
 * limits are applied by ingest itself (every 64 summaries, and as raw
 * events arrive), not only when asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "diag_fill.h"
#include "fake_agent.h"
#include "mkscope/store.h"

#define SEC 1000000000ull

static struct mks_store *open_store_opts(uint64_t max_epochs, uint64_t max_age_ns,
                                         uint64_t max_raw, uint64_t max_bytes,
                                         uint64_t detail_age_ns)
{
    struct mks_store_opts o = {.sz = sizeof(o),
                               .path = ":memory:",
                               .max_epochs = max_epochs,
                               .max_age_ns = max_age_ns,
                               .max_raw_events = max_raw,
                               .max_bytes = max_bytes,
                               .detail_age_ns = detail_age_ns};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    /* Ranks 0 and 1 register, as agents do before they send anything. */
    for (uint32_t r = 0; r < 2; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg;
        fa_register_env(&env, &reg, "job", r, 2, 1);
        assert_int_equal(mks_store_ingest(st, &env, 1, NULL, err, sizeof(err)), 0);
    }
    return st;
}

/* A store in the file path (options o), ranks 0 and 1 registered. */
static struct mks_store *open_file_store(struct mks_store_opts *o, const char *path)
{
    o->sz = sizeof(*o);
    o->path = path;
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(o, &st, err, sizeof(err)), 0);
    for (uint32_t r = 0; r < 2; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg;
        fa_register_env(&env, &reg, "job", r, 2, 1);
        assert_int_equal(mks_store_ingest(st, &env, 1, NULL, err, sizeof(err)), 0);
    }
    return st;
}

static struct mks_store *open_store(uint64_t max_epochs, uint64_t max_age_ns, uint64_t max_raw)
{
    return open_store_opts(max_epochs, max_age_ns, max_raw, 0, 0);
}

static void ingest_bytes(struct mks_store *st, const uint8_t *buf, size_t len, uint64_t now)
{
    mks_envelope *env = NULL;
    char err[256];
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    if (mks_store_ingest(st, env, now, NULL, err, sizeof(err)))
        fail_msg("ingest: %s", err);
    mks_wire_free(env);
}

/* Summary seq of rank with one task statistic and one worker row (and
 * `detail` wait and release records). */
static void ingest_detail(struct mks_store *st, uint32_t rank, uint64_t seq, uint64_t now,
                          int detail)
{
    static struct fa_summary s;
    memset(&s, 0, sizeof(s));
    for (int i = 0; i < detail && i < FA_MAX_WAITS; i++) {
        s.waits[s.n_waits++] = (struct fa_wait){.comm_gen = seq * 100 + (uint64_t)i, .peer = 1,
                                                .step = (uint32_t)seq, .t_begin = 10, .t_end = 20};
        s.rels[s.n_rels++] = (struct fa_release){.comm_gen = seq * 100 + (uint64_t)i,
                                                 .consumer = 1, .step = (uint32_t)seq,
                                                 .t_start = 5, .t_comm_begin = 5,
                                                 .t_comm_end = 8, .t_release = 9};
    }
    s.epoch = seq;
    s.n_ts = 1;
    s.ts[0].cls = 0;
    s.ts[0].step = (uint32_t)seq;
    s.ts[0].count = 1;
    s.ts[0].sum_run = 1000;
    s.n_workers = 1;
    s.workers[0].step = (uint32_t)seq;
    s.workers[0].busy = 1000;
    s.cov_eligible = s.cov_ran = 1;
    uint8_t *buf;
    size_t len;
    assert_int_equal(fa_encode_summary("job", rank, 1, seq, &s, &buf, &len), 0);
    ingest_bytes(st, buf, len, now);
    free(buf);
}

static void ingest_summary(struct mks_store *st, uint32_t rank, uint64_t seq, uint64_t now)
{
    ingest_detail(st, rank, seq, now, 0);
}

static void ingest_raw(struct mks_store *st, uint64_t first_value, size_t n)
{
    Mkscope__V1__RawEvent *ev = calloc(n, sizeof(*ev));
    Mkscope__V1__RawEvent **pev = calloc(n, sizeof(*pev));
    assert_non_null(ev);
    assert_non_null(pev);
    for (size_t i = 0; i < n; i++) {
        mkscope__v1__raw_event__init(&ev[i]);
        ev[i].event = 3;
        ev[i].t_now = 1000 + first_value + i;
        ev[i].value = first_value + i;
        pev[i] = &ev[i];
    }
    Mkscope__V1__RawEventBatch b;
    mks_envelope env;
    fa_raw_batch(&env, &b, "job", 0, 1, 7, pev, n, 0);
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(mks_wire_encode(&env, NULL, &buf, &len, err, sizeof(err)), 0);
    ingest_bytes(st, buf, len, 1);
    free(buf);
    free(pev);
    free(ev);
}

static void test_max_epochs(void **state)
{
    (void)state;
    struct mks_store *st = open_store(5, 0, 0);
    for (uint64_t q = 1; q <= 12; q++)
        ingest_summary(st, 0, q, q * SEC);
    for (uint64_t q = 1; q <= 3; q++)
        ingest_summary(st, 1, q, q * SEC);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 15);
    assert_int_equal(mks_store_retain(st, 20 * SEC), 0);
    /* Per rank: rank 0 keeps its newest five, rank 1 (under the limit) all. */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs WHERE rank = 0"), 5);
    assert_int_equal(df_one(st, "SELECT MIN(seq) FROM epochs WHERE rank = 0"), 8);
    assert_int_equal(df_one(st, "SELECT MAX(seq) FROM epochs WHERE rank = 0"), 12);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs WHERE rank = 1"), 3);
    /* What hangs off a deleted epoch goes with it. */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM task_stats"), 8);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM workers"), 8);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM task_stats WHERE epoch_id NOT IN"
                             " (SELECT id FROM epochs)"),
                     0);
    mks_store_close(st);
}

static void test_applied_by_ingest(void **state)
{
    (void)state;
    struct mks_store *st = open_store(5, 0, 0);
    /* The 64th summary applies the limit; six more arrive after it. */
    for (uint64_t q = 1; q <= 70; q++)
        ingest_summary(st, 0, q, q * SEC);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 5 + 6);
    assert_int_equal(df_one(st, "SELECT MIN(seq) FROM epochs"), 60);
    mks_store_close(st);
}

static void test_max_age(void **state)
{
    (void)state;
    struct mks_store *st = open_store(0, 10 * SEC, 0);
    for (uint64_t q = 1; q <= 3; q++)
        ingest_summary(st, 0, q, 100 * SEC);
    for (uint64_t q = 4; q <= 5; q++)
        ingest_summary(st, 0, q, 200 * SEC);
    assert_int_equal(mks_store_retain(st, 205 * SEC), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 2);
    assert_int_equal(df_one(st, "SELECT MIN(seq) FROM epochs"), 4);
    /* Nothing younger than the limit goes. */
    assert_int_equal(mks_store_retain(st, 209 * SEC), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 2);
    mks_store_close(st);
}

/* Epochs past the age go a bounded chunk a pass, the next pass at once
 * while more are left: a store opened long after its epochs were received
 * does not hold the ingest loop for all of them at once.  The loop's idle
 * turns carry on where no summary comes. */
static void test_max_age_bounded(void **state)
{
    (void)state;
    struct mks_store *st = open_store(0, 10 * SEC, 0);
    for (uint64_t q = 1; q <= 2500; q++)
        ingest_summary(st, (uint32_t)(q % 2), q, 100 * SEC);
    ingest_summary(st, 0, 2501, 200 * SEC);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 2501 - 1024);
    ingest_summary(st, 1, 2502, 200 * SEC + 1);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 2502 - 2048);
    assert_int_equal(mks_store_idle(st, 200 * SEC + 2), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 2);
    assert_int_equal(df_one(st, "SELECT MIN(seq) FROM epochs"), 2501);
    mks_store_close(st);
}

static int64_t pages_used_bytes(struct mks_store *st)
{
    return (df_one(st, "PRAGMA page_count") - df_one(st, "PRAGMA freelist_count")) *
           df_one(st, "PRAGMA page_size");
}

/* Summaries 1..n of ranks 0 and 1 in turn, `apart` ns apart, with 8 waits
 * and releases each; the most pages in use over the second half. */
static int64_t fill_peak(struct mks_store *st, uint64_t n, uint64_t apart)
{
    int64_t peak = 0;
    for (uint64_t q = 1; q <= n; q++) {
        ingest_detail(st, (uint32_t)(q % 2), q, q * apart, 8);
        int64_t b = pages_used_bytes(st);
        if (q > n / 2 && b > peak)
            peak = b;
    }
    return peak;
}

/* The size bound: ingest alone keeps the pages in use near max_bytes.
 * Summaries a second apart roll up (a rank's minute into one epoch) before
 * any epoch goes: every summary stays counted and the last minute keeps
 * its detail.  Summaries a minute apart roll up into nothing smaller, so
 * the oldest epochs go and the newest stay. */
static void test_max_bytes(void **state)
{
    (void)state;
    /* 512 KiB of epochs and rows, and the pages of the store's other
     * tables (each at least one, most of them empty here) */
    const uint64_t max = (512u + 16u) << 10;
    struct mks_store *st = open_store_opts(0, 0, 0, max, 0);
    assert_true(fill_peak(st, 3000, SEC) <= (int64_t)max + (64 << 10));
    assert_true(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2") > 0);
    assert_int_equal(df_one(st, "SELECT MAX(seq) FROM epochs"), 3000);
    assert_int_equal(df_one(st, "SELECT MIN(seq) FROM epochs"), 1);
    assert_int_equal(df_one(st, "SELECT SUM(count) FROM task_stats"), 3000);
    assert_int_equal(df_one(st, "SELECT SUM(count) FROM rollups WHERE kind = 1") +
                         df_one(st, "SELECT COUNT(*) FROM waits"),
                     3000 * 8);
    /* the last minute's detail is whole */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM waits w JOIN epochs e ON e.id = w.epoch_id"
                             " WHERE e.seq > 2940"),
                     60 * 8);
    mks_store_close(st);

    st = open_store_opts(0, 0, 0, max / 2, 0);
    assert_true(fill_peak(st, 1500, 60 * SEC) <= (int64_t)max / 2 + (64 << 10));
    assert_true(df_one(st, "SELECT COUNT(*) FROM epochs") < 1500);
    assert_int_equal(df_one(st, "SELECT MAX(seq) FROM epochs"), 1500);
    assert_true(df_one(st, "SELECT MIN(seq) FROM epochs") > 1);
    /* Rows of deleted epochs went with them. */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM rollups WHERE epoch_id NOT IN"
                             " (SELECT id FROM epochs)"),
                     0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM waits WHERE epoch_id NOT IN"
                             " (SELECT id FROM epochs)"),
                     0);
    mks_store_close(st);
}

/* The detail window: epochs older than detail_age roll up, a rank's minute
 * into its first epoch, whose rows sum those of all (no step); younger
 * ones keep everything. */
static void test_detail_age(void **state)
{
    (void)state;
    struct mks_store *st = open_store_opts(0, 0, 0, 0, 60 * SEC);
    for (uint64_t q = 1; q <= 10; q++)
        ingest_detail(st, 0, q, 100 * SEC, 4);
    for (uint64_t q = 11; q <= 15; q++)
        ingest_detail(st, 0, q, 150 * SEC, 4);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM waits"), 60);
    assert_int_equal(mks_store_retain(st, 170 * SEC), 0);
    /* seq 1..10 (received in the second minute) are one epoch now */
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 6);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2"), 1);
    assert_int_equal(df_one(st, "SELECT seq FROM epochs WHERE compacted = 2"), 1);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM waits"), 20);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM releases"), 20);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM workers"), 6);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM task_stats"), 6);
    assert_int_equal(df_one(st, "SELECT count FROM task_stats t JOIN epochs e ON e.id = t.epoch_id"
                             " WHERE e.compacted = 2 AND t.step IS NULL"),
                     10);
    assert_int_equal(df_one(st, "SELECT sum_run_ns FROM task_stats t JOIN epochs e ON"
                             " e.id = t.epoch_id WHERE e.compacted = 2"),
                     10000);
    assert_int_equal(df_one(st, "SELECT busy_ns FROM workers w JOIN epochs e ON e.id = w.epoch_id"
                             " WHERE e.compacted = 2 AND w.step IS NULL"),
                     10000);
    assert_int_equal(df_one(st, "SELECT SUM(eligible) FROM coverage"), 15);
    /* the waits as counts, sums, extremes and the steps they came from */
    assert_int_equal(df_one(st, "SELECT count FROM rollups WHERE kind = 1"), 40);
    assert_int_equal(df_one(st, "SELECT sum_ns FROM rollups WHERE kind = 1"), 400);
    assert_int_equal(df_one(st, "SELECT min_ns FROM rollups WHERE kind = 1"), 10);
    assert_int_equal(df_one(st, "SELECT max_ns FROM rollups WHERE kind = 1"), 10);
    assert_int_equal(df_one(st, "SELECT step_lo FROM rollups WHERE kind = 1"), 1);
    assert_int_equal(df_one(st, "SELECT step_hi FROM rollups WHERE kind = 1"), 10);
    assert_int_equal(df_one(st, "SELECT MIN(e.seq) FROM waits w JOIN epochs e ON e.id = w.epoch_id"),
                     11);
    /* Ingest applies it too, once a second: the rest rolls up. */
    ingest_detail(st, 0, 16, 215 * SEC, 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM waits"), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2"), 2);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 3);
    assert_int_equal(df_one(st, "SELECT SUM(count) FROM task_stats"), 16);
    /* A summary sent again after its epoch was rolled up is a duplicate
     * still; a new one of the rank is not. */
    ingest_detail(st, 0, 5, 216 * SEC, 4);
    assert_int_equal(df_one(st, "SELECT SUM(count) FROM task_stats"), 16);
    assert_int_equal(df_one(st, "SELECT duplicates FROM ranks WHERE rank = 0"), 1);
    ingest_detail(st, 0, 17, 217 * SEC, 4);
    assert_int_equal(df_one(st, "SELECT SUM(count) FROM task_stats"), 17);
    mks_store_close(st);
}

/* What status reports of a rank (its tasks and coverage) is summed at
 * ingest: equal to the stored rows' sums, not lowered by retention, and
 * filled from the rows of a store written before the sums were kept. */
static void test_rank_totals(void **state)
{
    (void)state;
    char path[] = "/tmp/mks-test-totals-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct mks_store_opts o = {0};
    struct mks_store *st = open_file_store(&o, path);
    char err[256];
    for (uint64_t q = 1; q <= 12; q++)
        ingest_detail(st, (uint32_t)(q % 2), q, q * SEC, 0);
    ingest_detail(st, 1, 3, 13 * SEC, 0); /* a replay: counted once */
    static const char *const sums =
        "SELECT (SELECT SUM(tasks_total) FROM ranks) = (SELECT SUM(count) FROM task_stats) AND"
        " (SELECT SUM(cov_eligible) FROM ranks) = (SELECT SUM(eligible) FROM coverage) AND"
        " (SELECT SUM(cov_ran) FROM ranks) = (SELECT SUM(ran) FROM coverage)";
    assert_int_equal(df_one(st, sums), 1);
    assert_int_equal(df_one(st, "SELECT tasks_total FROM ranks WHERE rank = 1"), 6);
    assert_int_equal(df_one(st, "SELECT cov_eligible FROM ranks WHERE rank = 0"), 6);
    mks_store_close(st);

    /* As an older collector left it: no sums kept; opened, they are filled. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    static const char *const cols[] = {"tasks_total", "cov_eligible", "cov_ran",
                                       "cov_throttled", "cov_lost", "cov_undelivered"};
    for (size_t i = 0; i < 6; i++) {
        char sql[96];
        snprintf(sql, sizeof(sql), "ALTER TABLE ranks DROP COLUMN %s", cols[i]);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    }
    sqlite3_close(db);
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    assert_int_equal(df_one(st, sums), 1);
    assert_int_equal(df_one(st, "SELECT tasks_total FROM ranks WHERE rank = 1"), 6);
    /* Retention takes epochs, not what the rank reported. */
    mks_store_close(st);
    o.max_epochs = 2;
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    assert_int_equal(mks_store_retain(st, 20 * SEC), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), 4);
    assert_int_equal(df_one(st, "SELECT tasks_total FROM ranks WHERE rank = 1"), 6);
    mks_store_close(st);
    unlink(path);
    char wal[64];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", path);
    unlink(wal);
}

/* Summary seq of rank with step rows first..first + n - 1 (and nothing else
 * but coverage). */
static void ingest_steps(struct mks_store *st, uint32_t rank, uint64_t seq, uint64_t now,
                         uint32_t first, int n)
{
    static struct fa_summary s;
    memset(&s, 0, sizeof(s));
    s.epoch = seq;
    for (int i = 0; i < n && i < FA_MAX_STEPS; i++, s.n_steps++) {
        s.steps[i].step = first + (uint32_t)i;
        s.steps[i].t_begin = 100;
        s.steps[i].t_end = 200;
    }
    s.cov_eligible = s.cov_ran = 1;
    uint8_t *buf;
    size_t len;
    assert_int_equal(fa_encode_summary("job", rank, 1, seq, &s, &buf, &len), 0);
    ingest_bytes(st, buf, len, now);
    free(buf);
}

/* Every epoch's step range is its step rows' (NULL without any), and no
 * rank has an epoch wider than the widest kept for it (epochs rolled up
 * since may have been): what the diagnosis finds a range of steps by. */
static const char step_ranges_ok[] =
    "SELECT (SELECT COUNT(*) FROM epochs e WHERE e.step_lo IS NOT (SELECT MIN(step) FROM steps"
    " WHERE epoch_id = e.id) OR e.step_hi IS NOT (SELECT MAX(step) FROM steps WHERE"
    " epoch_id = e.id)) = 0 AND (SELECT COUNT(*) FROM ranks r WHERE r.step_span < (SELECT"
    " COALESCE(MAX(step_hi - step_lo), 0) FROM epochs WHERE job = r.job AND rank = r.rank)) = 0";

/* The (epoch, step) pairs of steps lo..hi of the job, found through the
 * epochs' step ranges as the diagnosis does, and straight from the step
 * rows: the same. */
static void check_range(struct mks_store *st, int64_t lo, int64_t hi)
{
    static const char *const q[2] = {
        "SELECT COUNT(*), TOTAL(s.epoch_id * 1000003 + s.step) FROM epochs e INDEXED BY"
        " epochs_step CROSS JOIN steps s ON s.epoch_id = e.id WHERE e.job = ?1 AND e.step_hi"
        " BETWEEN ?2 AND ?3 + (SELECT COALESCE(MAX(step_span), 0) FROM ranks WHERE job = ?1) AND"
        " e.step_lo <= ?3 AND s.step BETWEEN ?2 AND ?3",
        "SELECT COUNT(*), TOTAL(s.epoch_id * 1000003 + s.step) FROM steps s JOIN epochs e ON"
        " e.id = s.epoch_id WHERE e.job = ?1 AND s.step BETWEEN ?2 AND ?3"};
    int64_t n[2];
    double sum[2];
    for (int i = 0; i < 2; i++) {
        sqlite3_stmt *s;
        assert_int_equal(sqlite3_prepare_v2(mks_store_db(st), q[i], -1, &s, NULL), SQLITE_OK);
        sqlite3_bind_text(s, 1, "job", -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, lo);
        sqlite3_bind_int64(s, 3, hi);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        n[i] = sqlite3_column_int64(s, 0);
        sum[i] = sqlite3_column_double(s, 1);
        sqlite3_finalize(s);
    }
    assert_int_equal(n[0], n[1]);
    assert_true(sum[0] == sum[1]);
}

static void test_step_ranges(void **state)
{
    (void)state;
    char path[] = "/tmp/mks-test-steps-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct mks_store_opts o = {.detail_age_ns = 60 * SEC};
    struct mks_store *st = open_file_store(&o, path);
    char err[256];
    /* rank 0: two steps an epoch; rank 1: one epoch of steps 0-9 (a long
     * one), then one step an epoch, then an epoch with none */
    for (uint64_t q = 1; q <= 20; q++)
        ingest_steps(st, 0, q, 100 * SEC, (uint32_t)(2 * q - 2), 2);
    ingest_steps(st, 1, 1, 100 * SEC, 0, 10);
    for (uint64_t q = 2; q <= 30; q++)
        ingest_steps(st, 1, q, 150 * SEC, (uint32_t)(q + 8), 1);
    ingest_steps(st, 1, 31, 150 * SEC, 0, 0);
    assert_int_equal(df_one(st, step_ranges_ok), 1);
    assert_int_equal(df_one(st, "SELECT step_span FROM ranks WHERE rank = 1"), 9);
    assert_int_equal(df_one(st, "SELECT MAX(step_hi) FROM epochs WHERE job = 'job'"), 39);
    static const int64_t ranges[][2] = {{0, 0}, {3, 5}, {5, 12}, {9, 9}, {30, 1000},
                                        {39, 50}, {0, 4294967295ll}};
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        check_range(st, ranges[i][0], ranges[i][1]);
    /* Rolled up, an epoch has no step rows and no range. */
    assert_int_equal(mks_store_retain(st, 170 * SEC), 0);
    assert_true(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2") > 0);
    assert_int_equal(df_one(st, step_ranges_ok), 1);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2 AND step_hi IS NOT"
                             " NULL"),
                     0);
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        check_range(st, ranges[i][0], ranges[i][1]);
    mks_store_close(st);

    /* As an older collector left it (no ranges, the index on steps.step):
     * opened, the ranges are filled and that index goes. */
    o.detail_age_ns = 0;
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    for (uint64_t q = 32; q <= 40; q++)
        ingest_steps(st, 1, q, 200 * SEC, (uint32_t)(q + 8), 3);
    mks_store_close(st);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "DROP INDEX epochs_step; DROP INDEX epochs_rank_step;"
                                  " ALTER TABLE epochs DROP COLUMN step_lo;"
                                  " ALTER TABLE epochs DROP COLUMN step_hi; ALTER TABLE ranks DROP"
                                  " COLUMN step_span; CREATE INDEX steps_step ON steps(step)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    assert_int_equal(df_one(st, step_ranges_ok), 1);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'steps_step'"), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'epochs_step'"), 1);
    assert_int_equal(
        df_one(st, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'epochs_rank_step'"), 1);
    assert_int_equal(df_one(st, "SELECT MAX(step_hi) FROM epochs WHERE job = 'job'"), 50);
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
        check_range(st, ranges[i][0], ranges[i][1]);
    mks_store_close(st);
    unlink(path);
    char wal[64];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", path);
    unlink(wal);
}

static void test_raw_cap(void **state)
{
    (void)state;
    struct mks_store *st = open_store(0, 0, 100);
    /* Three batches of 60 without any summary: the cap holds on raw ingest
     * alone, and the newest events stay. */
    ingest_raw(st, 0, 60);
    ingest_raw(st, 60, 60);
    ingest_raw(st, 120, 60);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM raw_events"), 100);
    assert_int_equal(df_one(st, "SELECT MIN(value) FROM raw_events"), 80);
    assert_int_equal(df_one(st, "SELECT MAX(value) FROM raw_events"), 179);
    /* Batches stay counted even when their events were dropped. */
    assert_int_equal(df_one(st, "SELECT SUM(events) FROM raw_batches"), 180);
    mks_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_epochs),
        cmocka_unit_test(test_applied_by_ingest),
        cmocka_unit_test(test_max_age),
        cmocka_unit_test(test_max_age_bounded),
        cmocka_unit_test(test_max_bytes),
        cmocka_unit_test(test_detail_age),
        cmocka_unit_test(test_rank_totals),
        cmocka_unit_test(test_step_ranges),
        cmocka_unit_test(test_raw_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
