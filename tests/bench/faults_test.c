/*
 * A 4-rank CPU run with each fault type: it completes, its tokens match the
 * reference (moe-skew changes the routing, so the reference applies the same
 * skew), only the faulty rank's runtime reports tasks the injector changed,
 * and the ground truth names the fault.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mkscope/bench.h"

struct fcase {
    const char *spec;
    const char *type;
    int rank;
    const char *cls;
};

static const struct fcase cases[] = {
    {"task-delay:rank=1,class=attention,magnitude=400,steps=3-6", "task-delay", 1, "attention"},
    {"moe-skew:rank=2,magnitude=400,steps=3-6", "moe-skew", 2, "expert.2"},
    {"notify-delay:rank=3,magnitude=400,steps=3-6", "notify-delay", 3, "allreduce_send"},
    {"notify-delay:rank=1,class=o_proj,magnitude=400,steps=3-6", "notify-delay", 1, "o_proj"},
    {"queue-oversub:rank=0,class=qkv_proj,worker=1,magnitude=400,steps=3-6", "queue-oversub", 0,
     "qkv_proj"},
    {"comm-delay:rank=2,gen=1,magnitude=400,steps=3-6", "comm-delay", 2, "allreduce_send"},
    {"tile-starve:rank=1,class=qkv_proj,tile=2,magnitude=400,steps=3-6", "tile-starve", 1,
     "qkv_proj"},
};

static void run_case(const struct fcase *fc, uint32_t idx)
{
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    char job[64], truth[96], err[256] = "";
    snprintf(job, sizeof(job), "flt%u-%d", idx, (int)getpid());
    snprintf(truth, sizeof(truth), "/tmp/mks-bench-truth-%u-%d.json", idx, (int)getpid());
    c.ranks = 4;
    c.steps = 10;
    c.job = job;
    struct mks_fault f;
    if (mks_fault_parse(fc->spec, &c, &f, err, sizeof(err)))
        fail_msg("%s: %s", fc->spec, err);
    assert_int_equal(mks_bench_truth_write(&c, &f, 1, truth, err, sizeof(err)), 0);
    struct mks_bench_result *run = NULL, *ref = NULL, *plain = NULL;
    if (mks_bench_run(&c, &f, 1, &run, err, sizeof(err)))
        fail_msg("%s: run failed: %s", fc->spec, err);
    assert_int_equal(mks_bench_reference(&c, &f, 1, &ref), 0);
    size_t n = (size_t)c.steps * c.batch;
    for (size_t i = 0; i < n; i++)
        if (run->tokens[i] != ref->tokens[i])
            fail_msg("%s: token %zu differs from the reference", fc->spec, i);
    for (uint32_t r = 0; r < c.ranks; r++) {
        if ((int)r == fc->rank)
            assert_true(run->faulted[r] > 0);
        else
            assert_int_equal(run->faulted[r], 0);
    }
    if (f.type == MKS_FAULT_MOE_SKEW) {
        /* the skew is real: the hot expert gets more work than unskewed */
        struct mks_bench_config c2 = c;
        snprintf(job, sizeof(job), "flt%u-%d-b", idx, (int)getpid());
        c2.job = job;
        assert_int_equal(mks_bench_run(&c2, NULL, 0, &plain, err, sizeof(err)), 0);
        int k = mks_bench_class_find(&c, "expert.2");
        assert_true(run->class_counts[2 * run->n_classes + (uint32_t)k] >
                    plain->class_counts[2 * plain->n_classes + (uint32_t)k]);
    }
    json_error_t je;
    json_t *root = json_load_file(truth, 0, &je);
    unlink(truth);
    assert_non_null(root);
    json_t *o = json_array_get(json_object_get(root, "faults"), 0);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "type")), fc->type);
    assert_int_equal(json_integer_value(json_object_get(o, "rank")), fc->rank);
    assert_string_equal(json_string_value(json_object_get(o, "class")), fc->cls);
    assert_int_equal(json_integer_value(json_object_get(o, "magnitude_us")), 400);
    json_decref(root);
    mks_bench_result_free(run);
    mks_bench_result_free(ref);
    mks_bench_result_free(plain);
}

#define CASE(i)                                                                                    \
    static void test_fault_##i(void **state)                                                       \
    {                                                                                              \
        (void)state;                                                                               \
        run_case(&cases[i], i);                                                                    \
    }
CASE(0)
CASE(1)
CASE(2)
CASE(3)
CASE(4)
CASE(5)
CASE(6)

/* Several faults combine in one run. */
static void test_combined(void **state)
{
    (void)state;
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    char job[64], err[256] = "";
    snprintf(job, sizeof(job), "fltc-%d", (int)getpid());
    c.ranks = 4;
    c.steps = 8;
    c.job = job;
    struct mks_fault f[2];
    assert_int_equal(
        mks_fault_parse("task-delay:rank=1,magnitude=300,steps=2-3", &c, &f[0], err, sizeof(err)),
        0);
    assert_int_equal(
        mks_fault_parse("comm-delay:rank=3,magnitude=300,steps=5", &c, &f[1], err, sizeof(err)), 0);
    struct mks_bench_result *run = NULL;
    if (mks_bench_run(&c, f, 2, &run, err, sizeof(err)))
        fail_msg("run failed: %s", err);
    assert_true(run->faulted[1] > 0);
    assert_true(run->faulted[3] > 0);
    assert_int_equal(run->faulted[0], 0);
    assert_int_equal(run->faulted[2], 0);
    mks_bench_result_free(run);
}

/* A postponed release of a router whose rank's experts got no token (rank 1,
 * seed 1, step 13): the combine waits for that release.  It used to be
 * released from the router's body, the late release then counted toward the
 * next step and the rank hung until its peers' 60 s timeout. */
static void test_router_release_without_experts(void **state)
{
    (void)state;
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    char job[64], err[256] = "";
    snprintf(job, sizeof(job), "fltr-%d", (int)getpid());
    c.ranks = 4;
    c.steps = 17;
    c.seed = 1;
    c.job = job;
    struct mks_fault f;
    assert_int_equal(mks_fault_parse("notify-delay:rank=1,class=moe_router,magnitude=24000,steps=13",
                                     &c, &f, err, sizeof(err)),
                     0);
    struct mks_bench_result *run = NULL, *ref = NULL;
    if (mks_bench_run(&c, &f, 1, &run, err, sizeof(err)))
        fail_msg("run failed: %s", err);
    assert_int_equal(mks_bench_reference(&c, &f, 1, &ref), 0);
    for (size_t i = 0; i < (size_t)c.steps * c.batch; i++)
        if (run->tokens[i] != ref->tokens[i])
            fail_msg("token %zu differs from the reference", i);
    assert_true(run->faulted[1] > 0);
    mks_bench_result_free(run);
    mks_bench_result_free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_0), cmocka_unit_test(test_fault_1),
        cmocka_unit_test(test_fault_2), cmocka_unit_test(test_fault_3),
        cmocka_unit_test(test_fault_4), cmocka_unit_test(test_fault_5),
        cmocka_unit_test(test_fault_6), cmocka_unit_test(test_combined),
        cmocka_unit_test(test_router_release_without_experts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
