/*
 * The diagnosis of a whole long job from the per-step aggregates (more
 * steps than it reads in detail) says what the diagnosis from every step
 * row says: the same answer, field for field, on a job with a slow burst
 * and a straggler run, steps shared by epochs and queueing times; after
 * retention took epochs (steps at or below the cut read from the rows,
 * before and after the fill); a store without the aggregates is read from
 * its rows, saying so; ranks that send generation advances besides their
 * step times are read from the aggregates.
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
#include "diagnose.h"

#define US 1000ull
#define RANKS 3
#define EPOCHS 2600 /* two steps each: 5,200 steps, more than read in detail */

static const char *const names[] = {"gemm", "attn"};
static bool with_gens; /* rank 1 reports its generation advances too */

static uint64_t jit(uint32_t r, uint32_t s, uint32_t k)
{
    uint64_t x = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (uint64_t)s * 0xbf58476d1ce4e5b9ull ^ k;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    return (x ^ (x >> 32)) % (20 * US);
}

/* Epoch k of rank r: steps 2k and 2k + 1, the second reported again by the
 * next epoch (its end then); rank 1 slow in steps 3000 .. 3005 (its gemm
 * tasks), rank 2 late in steps 4200 .. 4400 (a straggler run). */
static void make(struct fa_summary *sum, uint32_t r, uint32_t k)
{
    memset(sum, 0, sizeof(*sum));
    sum->epoch = k;
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t s = 2 * k + i - (k ? 1 : 0);
        if (!k && i == 2)
            break;
        bool burst = r == 1 && s >= 3000 && s <= 3005;
        bool late = r == 2 && s >= 4200 && s <= 4400;
        uint64_t base = 1000000000ull + (uint64_t)s * 1000 * US;
        uint64_t run = 600 * US + jit(r, s, 0) + (burst ? 500 * US : 0) + (late ? 300 * US : 0);
        uint64_t b = base + jit(r, s, 1) / 4, e = b + run + 100 * US;
        /* the step an epoch began in: this epoch saw only its end */
        if (k && i == 0)
            b += 50 * US;
        sum->steps[sum->n_steps].step = s;
        sum->steps[sum->n_steps].t_begin = b;
        sum->steps[sum->n_steps].t_end = e;
        sum->steps[sum->n_steps++].queued_while_idle = s % 7 == 0 ? 10 * US + jit(r, s, 2) : 0;
        if (k && i == 0)
            continue; /* its rows went with the epoch before */
        struct fa_taskstat *t = &sum->ts[sum->n_ts++];
        t->cls = 0, t->step = s, t->count = 8, t->sum_run = run * 2, t->run_max = run / 3;
        t->queue_sum = 8 * 5 * US;
        t = &sum->ts[sum->n_ts++];
        t->cls = 1, t->step = s, t->count = 4, t->sum_run = 4 * 50 * US, t->run_max = 60 * US;
        t->queue_sum = 4 * 5 * US;
        for (uint32_t p = 0; p < RANKS && sum->n_waits < FA_MAX_WAITS; p++) {
            if (p == r)
                continue;
            bool on_late = p == 2 && s >= 4200 && s <= 4400;
            struct fa_wait *w = &sum->waits[sum->n_waits++];
            w->comm_gen = ((uint64_t)s << 16) | (p << 8) | r;
            w->peer = p, w->waiter_class = 1, w->step = s, w->worker = 0;
            w->t_begin = base + 300 * US;
            w->t_end = w->t_begin + 40 * US + jit(r, s, 3 + p) + (on_late ? 300 * US : 0);
        }
        for (uint32_t w = 0; w < 2; w++) {
            struct fa_worker *ws = &sum->workers[sum->n_workers++];
            ws->worker = w, ws->step = s, ws->busy = run / 2;
            ws->idle = 100 * US + jit(r, s, 8 + w) + (burst ? 200 * US : 0);
            ws->max_depth = 2;
        }
    }
    sum->cov_eligible = 100, sum->cov_ran = 100;
    if (with_gens && r == 1)
        sum->gen_step = 2 * k, sum->t_gen = 1000000000ull + (uint64_t)k * 2000 * US;
}

static struct mks_store *open_path(const char *path, uint64_t max_epochs)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = path, .max_epochs = max_epochs};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    return st;
}

static void fill(struct mks_store *st)
{
    char err[256];
    for (uint32_t r = 0; r < RANKS; r++)
        assert_int_equal(df_register(st, "job", r, RANKS, 2, names, NULL, 2, err, sizeof(err)),
                         0);
    struct fa_summary *sum = malloc(sizeof(*sum));
    assert_non_null(sum);
    for (uint32_t k = 0; k < EPOCHS; k++) {
        if (k % 50 == 0)
            assert_int_equal(mks_store_batch_begin(st, err, sizeof(err)), 0);
        for (uint32_t r = 0; r < RANKS; r++) {
            make(sum, r, k);
            assert_int_equal(df_summary(st, "job", r, k + 1, sum, err, sizeof(err)), 0);
        }
        if (k % 50 == 49 || k + 1 == EPOCHS)
            assert_int_equal(mks_store_batch_commit(st, err, sizeof(err)), 0);
    }
    free(sum);
}

static json_t *diagnose(struct mks_store *st, bool rows)
{
    json_t *out = NULL;
    char err[256];
    struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1, .rows = rows};
    if (mks_diagnose(st, "job", &o, &out, err, sizeof(err)))
        fail_msg("diagnose: %s", err);
    return out;
}

static const char *js(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

/* Both ways: the same answer; `from`: where the first one's times came from. */
static json_t *both_ways(struct mks_store *st, const char *from)
{
    json_t *a = diagnose(st, false), *b = diagnose(st, true);
    assert_string_equal(js(a, "step_times"), from);
    assert_string_equal(js(b, "step_times"), "rows");
    json_object_del(a, "step_times"), json_object_del(b, "step_times");
    json_object_del(a, "step_times_note"), json_object_del(b, "step_times_note");
    char *ta = json_dumps(a, JSON_SORT_KEYS), *tb = json_dumps(b, JSON_SORT_KEYS);
    assert_string_equal(ta, tb);
    free(ta), free(tb);
    json_decref(b);
    return a;
}

static void test_same_answer(void **state)
{
    (void)state;
    struct mks_store *st = open_path(":memory:", 0);
    fill(st);
    json_t *a = both_ways(st, "aggregates");
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 2 * EPOCHS);
    /* what there is to find is found: the burst, the straggler run */
    json_t *groups = json_object_get(a, "groups");
    bool burst = false, late = false;
    for (size_t i = 0; i < json_array_size(groups); i++) {
        json_t *g = json_array_get(groups, i);
        json_int_t rank = json_integer_value(json_object_get(json_object_get(g, "root"), "rank"));
        json_int_t first = json_integer_value(json_array_get(json_object_get(g, "steps"), 0));
        burst |= rank == 1 && first >= 3000 && first <= 3005;
        late |= rank == 2 && json_is_true(json_object_get(g, "straggler"));
    }
    assert_true(burst);
    assert_true(late);
    json_decref(a);
    mks_store_close(st);
}

/* Retention took each rank's oldest epochs: the steps at or below the cut
 * from the rows, the others from the aggregates; the fill changes nothing. */
static void test_after_retention(void **state)
{
    (void)state;
    struct mks_store *st = open_path(":memory:", EPOCHS - 300);
    fill(st);
    assert_int_equal(mks_store_retain(st, 5000000000ull), 0);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st), "SELECT cut FROM step_agg_jobs", -1, &s,
                                        NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_true(sqlite3_column_int64(s, 0) >= 598);
    sqlite3_finalize(s);
    json_decref(both_ways(st, "aggregates"));
    assert_int_equal(mks_store_fill_steps(st), 0);
    json_decref(both_ways(st, "aggregates"));
    mks_store_close(st);
}

/* A rank that sends generation advances besides its step times (as the
 * CPU backend's agents do) is timed by its steps: the aggregates answer,
 * the same as the rows. */
static void test_gens(void **state)
{
    (void)state;
    with_gens = true;
    struct mks_store *st = open_path(":memory:", 0);
    fill(st);
    with_gens = false;
    json_decref(both_ways(st, "aggregates"));
    mks_store_close(st);
}

/* A store written before the aggregates: read from its rows, with a note,
 * until filled. */
static void test_old_store(void **state)
{
    (void)state;
    char path[] = "/tmp/mks-test-diag-aggs-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct mks_store *st = open_path(path, 0);
    fill(st);
    assert_int_equal(sqlite3_exec(mks_store_db(st),
                                  "DROP TABLE step_aggs; DROP TABLE step_cells;"
                                  " DROP TABLE step_agg_jobs",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    mks_store_close(st);
    st = open_path(path, 0);
    json_t *a = diagnose(st, false);
    assert_string_equal(js(a, "step_times"), "rows");
    assert_non_null(strstr(js(a, "step_times_note"), "not filled"));
    json_decref(a);
    assert_int_equal(mks_store_fill_steps(st), 0);
    json_decref(both_ways(st, "aggregates"));
    mks_store_close(st);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_answer),
        cmocka_unit_test(test_after_retention),
        cmocka_unit_test(test_old_store),
        cmocka_unit_test(test_gens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
