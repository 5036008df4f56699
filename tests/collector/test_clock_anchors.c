/*
 * The clock's anchors kept at ingest (collector/src/clock_anchors.h): the
 * clock model of a whole job from what the store keeps (mks_anchors_load,
 * what the diagnosis reads) is exactly the model of every epoch's anchors,
 * read here from the epochs themselves, after summaries in batches across
 * blocks, replays, late summaries and a second incarnation; after
 * retention and the roll-up (stale blocks read from their epochs, then
 * refreshed); in an older collector's store (read from its epochs, then
 * filled).  And the store keeps a few rows where the epochs hold thousands
 * of anchors.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "clock_anchors.h"
#include "diag_fill.h"
#include "mkscope/clock.h"
#include "mkscope/store.h"

#define RANKS 3
#define EPOCH_NS 100000000ull

static const char *const names[] = {"a"};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

static struct mks_store *open_opts(uint64_t max_epochs, uint64_t detail_age)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:", .max_epochs = max_epochs,
                               .detail_age_ns = detail_age};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    for (uint32_t r = 0; r < RANKS; r++)
        assert_int_equal(df_register(st, "job", r, RANKS, 1, names, NULL, 1, err, sizeof(err)), 0);
    return st;
}

static void reg_incarnation(struct mks_store *st, uint32_t rank, uint64_t inc)
{
    mks_envelope env;
    Mkscope__V1__Register reg;
    char err[256];
    fa_register_env(&env, &reg, "job", rank, RANKS, inc);
    assert_int_equal(mks_store_ingest(st, &env, 1, NULL, err, sizeof(err)), 0);
}

/* Epoch k of rank r's incarnation inc: host clock at 10 s + k epochs, each
 * read within 30 us; the device clock off by a second or so and drifting
 * by up to 50 ppm a rank; rank 0's clocks one (the CPU backend: exact). */
static void summary(struct mks_store *st, uint32_t r, uint64_t inc, uint64_t seq, uint64_t k,
                    uint64_t now)
{
    struct fa_summary s;
    memset(&s, 0, sizeof(s));
    s.epoch = k;
    for (int e = 0; e < 2; e++) {
        uint64_t t = 10000000000ull + (k + (uint64_t)e) * EPOCH_NS;
        uint64_t jitter = r ? mix(t * 7 + r) % 30000 : 0;
        double drift = r ? ((double)r - 1.5) * 33e-6 : 0;
        s.clocks[e] = t + jitter;
        s.clocks[2 + e] = r ? (uint64_t)((double)t * (1 + drift)) + 1000000000ull * r : t;
    }
    char err[256];
    if (df_summary_at(st, "job", r, inc, seq, &s, now, err, sizeof(err)))
        fail_msg("ingest: %s", err);
}

/* The model of every anchor of the job's epochs, read from the epochs. */
static struct mks_clock_model *model_of_epochs(struct mks_store *st)
{
    struct mks_clock_model *m = NULL;
    sqlite3_stmt *s;
    assert_int_equal(mks_clock_model_create(RANKS, NULL, &m), 0);
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st),
                                        "SELECT rank, t_begin_dev, t_begin_host, t_end_dev,"
                                        " t_end_host FROM epochs WHERE job = 'job'",
                                        -1, &s, NULL),
                     SQLITE_OK);
    size_t n = 0;
    while (sqlite3_step(s) == SQLITE_ROW)
        for (int k = 0; k < 2; k++) {
            struct mks_clock_anchor a;
            if (mks_anchors_pair(sqlite3_column_int64(s, 1 + 2 * k),
                                 sqlite3_column_int64(s, 2 + 2 * k),
                                 (uint32_t)sqlite3_column_int64(s, 0), &a)) {
                assert_int_equal(mks_clock_add_anchors(m, &a, 1), 0);
                n++;
            }
        }
    sqlite3_finalize(s);
    assert_true(n > 0);
    assert_int_equal(mks_clock_solve(m), 0);
    return m;
}

/* What the diagnosis reads: the store's kept anchors (and the epochs of
 * stale blocks and of what is not filled yet). */
static struct mks_clock_model *model_kept(struct mks_store *st)
{
    struct mks_clock_model *m = NULL;
    assert_int_equal(mks_clock_model_create(RANKS, NULL, &m), 0);
    assert_true(mks_anchors_load(mks_store_db(st), "job", RANKS, m) > 0);
    assert_int_equal(mks_clock_solve(m), 0);
    return m;
}

/* Both models the same for every rank, to the nanosecond and the bit. */
static void assert_same(struct mks_store *st)
{
    struct mks_clock_model *x = model_of_epochs(st), *y = model_kept(st);
    for (uint32_t r = 0; r < RANKS; r++) {
        struct mks_clock_rank_est a, b;
        assert_int_equal(mks_clock_rank_estimate(x, r, &a), 0);
        assert_int_equal(mks_clock_rank_estimate(y, r, &b), 0);
        assert_true(a.ref_device_ns == b.ref_device_ns && a.offset_ns == b.offset_ns &&
                    a.drift == b.drift && a.offset_err_ns == b.offset_err_ns &&
                    a.drift_err == b.drift_err);
        for (int i = -5; i < 60; i++) {
            uint64_t d = a.ref_device_ns + (uint64_t)((int64_t)i * 10 * (int64_t)EPOCH_NS);
            struct mks_aligned_time p, q;
            assert_int_equal(mks_clock_align(x, r, d, &p), 0);
            assert_int_equal(mks_clock_align(y, r, d, &q), 0);
            assert_true(p.lo_ns == q.lo_ns && p.hi_ns == q.hi_ns && p.t_ns == q.t_ns);
        }
    }
    mks_clock_model_destroy(x);
    mks_clock_model_destroy(y);
}

static void fill(struct mks_store *st)
{
    assert_int_equal(mks_store_fill_steps(st), 0);
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM clock_stale"), 0);
    assert_int_equal(df_one(st, "SELECT cut FROM clock_jobs WHERE job = 'job'"), -1);
}

/* Summaries in batches of 8 across two blocks a rank, every 50th sent
 * again, every 97th held back and sent 40 later, rank 2 restarted as a
 * second incarnation half way. */
static void test_kept_equals_all(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(0, 0);
    const uint64_t n = 5000;
    char err[256];
    for (uint64_t k = 0; k < n; k++) {
        if (k % 8 == 0)
            assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
        if (k == n / 2) {
            assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
            reg_incarnation(st, 2, 2);
            assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
        }
        for (uint32_t r = 0; r < RANKS; r++) {
            uint64_t inc = r == 2 && k >= n / 2 ? 2 : 1, seq = inc == 2 ? k - n / 2 + 1 : k + 1;
            if (k % 97 == 5 && k + 40 < n / 2)
                continue; /* held back */
            summary(st, r, inc, seq, k, 2);
            if (k % 50 == 0)
                summary(st, r, inc, seq, k, 2); /* a replay: not stored again */
            if (k % 97 == 45 && k < n / 2)
                summary(st, r, 1, k - 40 + 1, k - 40, 2); /* late */
        }
        if (k % 8 == 7 || k == n - 1)
            assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
    }
    assert_int_equal(df_one(st, "SELECT COUNT(*) FROM epochs"), (int64_t)(RANKS * n));
    assert_int_equal(df_one(st, "SELECT cut FROM clock_jobs WHERE job = 'job'"), -1);
    assert_same(st);
    int64_t kept = df_one(st, "SELECT COUNT(*) FROM clock_hulls");
    printf("  %lld epochs, %lld anchors kept\n", (long long)df_one(st, "SELECT COUNT(*) FROM epochs"),
           (long long)kept);
    assert_true(kept > 0 && kept < 200);
    mks_store_close(st);
}

/* Retention (a bound on each rank's epochs) and the roll-up (a minute of
 * a rank's epochs into one) leave blocks stale: the same model while they
 * are, and after they are refreshed. */
static void test_retention_rollup(void **state)
{
    (void)state;
    for (int roll = 0; roll < 2; roll++) {
        struct mks_store *st = open_opts(roll ? 0 : 3000, roll ? 120 * 1000000000ull : 0);
        for (uint64_t k = 0; k < 4500; k++)
            for (uint32_t r = 0; r < RANKS; r++)
                summary(st, r, 1, k + 1, k, 2 + k * EPOCH_NS);
        if (roll)
            assert_true(df_one(st, "SELECT COUNT(*) FROM epochs WHERE compacted = 2") > 0);
        else
            assert_true(df_one(st, "SELECT MIN(seq) FROM epochs") > 1);
        assert_true(df_one(st, "SELECT COUNT(*) FROM clock_stale") > 0);
        assert_same(st);
        fill(st);
        assert_same(st);
        mks_store_close(st);
    }
}

/* A store an older collector wrote keeps no anchors: read from every
 * epoch, then more summaries (kept from theirs on, the older epochs read),
 * then filled. */
static void test_older_store(void **state)
{
    (void)state;
    struct mks_store *st = open_opts(0, 0);
    for (uint64_t k = 0; k < 3000; k++)
        for (uint32_t r = 0; r < RANKS; r++)
            summary(st, r, 1, k + 1, k, 2);
    assert_int_equal(sqlite3_exec(mks_store_db(st),
                                  "DELETE FROM clock_hulls; DELETE FROM clock_stale;"
                                  " DELETE FROM clock_jobs",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    struct mks_clock_model *m = NULL;
    assert_int_equal(mks_clock_model_create(RANKS, NULL, &m), 0);
    assert_int_equal(mks_anchors_load(mks_store_db(st), "job", RANKS, m), -ENOENT);
    mks_clock_model_destroy(m);
    for (uint64_t k = 3000; k < 3100; k++)
        for (uint32_t r = 0; r < RANKS; r++)
            summary(st, r, 1, k + 1, k, 2);
    assert_true(df_one(st, "SELECT cut FROM clock_jobs WHERE job = 'job'") > 0);
    assert_same(st);
    fill(st);
    assert_same(st);
    assert_true(df_one(st, "SELECT COUNT(*) FROM clock_hulls") < 200);
    mks_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_equals_all),
        cmocka_unit_test(test_retention_rollup),
        cmocka_unit_test(test_older_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
