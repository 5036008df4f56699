/*
 * The diagnosis over a store whose oldest epochs are rolled up (older than
 * the detail window): the steps rolled up are said to be, not diagnosed as
 * if they had run well, and the steps still in detail are diagnosed.  And
 * --last N / --steps A-B, read through the step index, take the job's own
 * steps only, whatever other jobs hold.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_fill.h"
#include "diagnose.h"
#include "mkscope/store.h"

#define SEC   1000000000ull
#define STEPS 40

static json_t *diagnose_last(struct mks_store *st, const char *job, uint32_t lo, uint32_t hi,
                             uint32_t last)
{
    struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1, .last = last};
    if (hi)
        o.range = 1, o.step_lo = lo, o.step_hi = hi;
    json_t *out = NULL;
    char err[256];
    if (mks_diagnose(st, job, &o, &out, err, sizeof(err)))
        fail_msg("diagnose: %s", err);
    return out;
}

static json_t *diagnose(struct mks_store *st, uint32_t lo, uint32_t hi)
{
    return diagnose_last(st, "job", lo, hi, 0);
}

/* Steps from..to of `job`'s two ranks, a step a summary, 1 ms each,
 * received at `now`. */
static void ingest_steps(struct mks_store *st, const char *job, uint32_t from, uint32_t to,
                         uint64_t now)
{
    for (uint32_t k = from; k <= to; k++)
        for (uint32_t r = 0; r < 2; r++) {
            static struct fa_summary s;
            memset(&s, 0, sizeof(s));
            s.epoch = k;
            s.n_steps = 1;
            s.steps[0].step = k;
            s.steps[0].t_begin = k * 10000000ull;
            s.steps[0].t_end = s.steps[0].t_begin + 1000000ull;
            s.n_ts = 1;
            s.ts[0].step = k, s.ts[0].count = 4, s.ts[0].sum_run = 900000;
            uint8_t *buf;
            size_t len;
            char err[256];
            assert_int_equal(fa_encode_summary(job, r, 1, k, &s, &buf, &len), 0);
            mks_envelope *e = NULL;
            assert_int_equal(mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)), 0);
            free(buf);
            uint64_t stored;
            if (mks_store_ingest(st, e, now, &stored, err, sizeof(err)))
                fail_msg("ingest: %s", err);
            mks_wire_free(e);
        }
}

static void test_ranges_per_job(void **state)
{
    (void)state;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    static const char *const names[] = {"gemm"};
    for (uint32_t r = 0; r < 2; r++) {
        assert_int_equal(df_register(st, "job", r, 2, 1, names, NULL, 1, err, sizeof(err)), 0);
        assert_int_equal(df_register(st, "other", r, 2, 1, names, NULL, 1, err, sizeof(err)), 0);
    }
    ingest_steps(st, "job", 1, 40, 10 * SEC);
    ingest_steps(st, "other", 1, 90, 10 * SEC);
    json_t *a = diagnose_last(st, "job", 0, 0, 5);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 5);
    assert_int_equal(json_integer_value(json_object_get(a, "first_step")), 36);
    assert_int_equal(json_integer_value(json_object_get(a, "last_step")), 40);
    json_decref(a);
    a = diagnose_last(st, "other", 0, 0, 5);
    assert_int_equal(json_integer_value(json_object_get(a, "first_step")), 86);
    json_decref(a);
    a = diagnose_last(st, "job", 30, 60, 0);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 11);
    assert_int_equal(json_integer_value(json_object_get(a, "last_step")), 40);
    json_decref(a);
    a = diagnose_last(st, "job", 0, 0, 0);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 40);
    json_decref(a);
    mks_store_close(st);
}

static void test_rolled_steps_said(void **state)
{
    (void)state;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:", .detail_age_ns = 60 * SEC};
    struct mks_store *st = NULL;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    static const char *const names[] = {"gemm"};
    for (uint32_t r = 0; r < 2; r++)
        assert_int_equal(df_register(st, "job", r, 2, 1, names, NULL, 1, err, sizeof(err)), 0);
    /* Steps 1..20 received in the first minute, 21..40 five minutes
     * later: ingest itself then rolls up the first twenty (older than the
     * minute of detail kept). */
    ingest_steps(st, "job", 1, 20, 10 * SEC);
    json_t *a = diagnose(st, 0, 0);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 20);
    assert_null(json_object_get(a, "rolled_up"));
    json_decref(a);
    ingest_steps(st, "job", 21, STEPS, 310 * SEC);
    struct mks_store_rolled ru;
    assert_int_equal(mks_store_rolled(st, "job", &ru), 0);
    assert_int_equal(ru.epochs, 2);
    assert_int_equal(ru.step_hi, 20);
    a = diagnose(st, 0, 0);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), STEPS - 20);
    assert_int_equal(json_integer_value(json_object_get(a, "first_step")), 21);
    json_t *r = json_object_get(a, "rolled_up");
    assert_non_null(r);
    assert_int_equal(json_integer_value(json_object_get(r, "steps_to")), 20);
    json_decref(a);
    /* Only rolled-up steps asked for: said so, nothing diagnosed. */
    a = diagnose(st, 1, 10);
    assert_int_equal(json_integer_value(json_object_get(a, "steps")), 0);
    assert_non_null(strstr(json_string_value(json_object_get(a, "reason")), "rolled up"));
    assert_int_equal(json_array_size(json_object_get(a, "groups")), 0);
    json_decref(a);
    /* Steps past them: nothing said of the roll-up. */
    a = diagnose(st, 30, 40);
    assert_null(json_object_get(a, "rolled_up"));
    json_decref(a);
    mks_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rolled_steps_said),
        cmocka_unit_test(test_ranges_per_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
