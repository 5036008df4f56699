/*
 * The bench workload against the plain reference on small configurations:
 * one rank, two ranks with uneven tiles, the class counts the runtime keeps
 * against the shape of the graph, expert tasks only on the expert's rank, and
 * the published task schema as the collector would decode it.
 */
#include <math.h>
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
#include "workload.h"
#ifdef MKS_TEST_HAVE_PROTO
#include "mkscope.pb-c.h"
#endif

static struct mks_bench_config small(uint32_t ranks, const char *job)
{
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    c.ranks = ranks;
    c.steps = 10;
    c.job = job;
    return c;
}

static const char *job_name(const char *base)
{
    static char buf[64];
    snprintf(buf, sizeof(buf), "%s-%d", base, (int)getpid());
    return buf;
}

static void compare(const struct mks_bench_config *c, const struct mks_bench_result *run,
                    const struct mks_bench_result *ref)
{
    size_t n = (size_t)c->steps * c->batch;
    for (size_t i = 0; i < n; i++) {
        if (run->tokens[i] != ref->tokens[i])
            fail_msg("token %zu (step %zu slot %zu): run %d reference %d", i, i / c->batch,
                     i % c->batch, run->tokens[i], ref->tokens[i]);
        assert_int_equal(run->req_gen[i], ref->req_gen[i]);
    }
    for (uint32_t s = 0; s < c->steps; s++) {
        double a = run->logit_sum[s], b = ref->logit_sum[s];
        /* the runtime sums partials per rank, then over ranks */
        if (fabs(a - b) > 1e-3 * (1.0 + fabs(b)))
            fail_msg("step %u: logit sum %.6f vs reference %.6f", s, a, b);
    }
}

static void test_reference_is_deterministic(void **state)
{
    (void)state;
    struct mks_bench_config c = small(1, "x");
    struct mks_bench_result *a, *b, *d;
    assert_int_equal(mks_bench_reference(&c, NULL, 0, &a), 0);
    assert_int_equal(mks_bench_reference(&c, NULL, 0, &b), 0);
    c.seed = 2;
    assert_int_equal(mks_bench_reference(&c, NULL, 0, &d), 0);
    size_t n = (size_t)c.steps * c.batch;
    assert_memory_equal(a->tokens, b->tokens, n * sizeof(int32_t));
    assert_memory_not_equal(a->tokens, d->tokens, n * sizeof(int32_t));
    /* requests join and leave: the batch shape changes over the run */
    uint32_t min_act = c.batch, max_act = 0, reused = 0;
    for (uint32_t s = 0; s < c.steps; s++) {
        uint32_t act = 0;
        for (uint32_t i = 0; i < c.batch; i++) {
            act += a->tokens[s * c.batch + i] >= 0;
            reused |= a->req_gen[s * c.batch + i] > 1;
        }
        min_act = act < min_act ? act : min_act;
        max_act = act > max_act ? act : max_act;
    }
    assert_true(min_act < max_act);
    assert_true(reused);
    mks_bench_result_free(a);
    mks_bench_result_free(b);
    mks_bench_result_free(d);
}

static uint64_t count(const struct mks_bench_result *r, uint32_t rank, const char *cls,
                      const struct mks_bench_config *c)
{
    int k = mks_bench_class_find(c, cls);
    assert_true(k >= 0);
    return r->class_counts[(size_t)rank * r->n_classes + (uint32_t)k];
}

static void check_counts(const struct mks_bench_config *c, const struct mks_bench_result *run,
                         const struct mks_bench_result *ref)
{
    uint64_t active = 0; /* request rows over all steps */
    for (size_t i = 0; i < (size_t)c->steps * c->batch; i++)
        active += ref->tokens[i] >= 0;
    for (uint32_t r = 0; r < c->ranks; r++) {
        assert_int_equal(count(run, r, "sample", c), c->steps);
        assert_int_equal(count(run, r, "lm_head", c), (uint64_t)c->steps * c->tiles);
        assert_int_equal(count(run, r, "qkv_proj", c), (uint64_t)c->steps * c->layers * c->tiles);
        assert_int_equal(count(run, r, "rmsnorm", c), active * c->layers);
        assert_int_equal(count(run, r, "attention", c), active * c->layers * c->heads);
        assert_int_equal(count(run, r, "moe_router", c), (uint64_t)c->steps * c->layers);
        assert_int_equal(count(run, r, "allreduce_send", c),
                         (uint64_t)c->steps * c->layers * 2 * (c->ranks - 1));
        assert_int_equal(count(run, r, "allreduce_reduce", c), (uint64_t)c->steps * c->layers * 2);
        uint64_t experts = 0;
        for (uint32_t e = 0; e < c->experts; e++) {
            char name[32];
            snprintf(name, sizeof(name), "expert.%u", e);
            uint64_t n = count(run, r, name, c);
            if (e % c->ranks != r)
                assert_int_equal(n, 0); /* experts run where they live */
            experts += n;
        }
        (void)experts;
    }
    uint64_t all_experts = 0;
    for (uint32_t r = 0; r < c->ranks; r++)
        for (uint32_t e = 0; e < c->experts; e++) {
            char name[32];
            snprintf(name, sizeof(name), "expert.%u", e);
            all_experts += count(run, r, name, c);
        }
    /* every routed layer of every step creates at least topk experts' tiles */
    assert_true(all_experts >= (uint64_t)c->steps * c->layers * c->topk);
}

/* Run c, compare with the reference, check the class counts; returns the
 * run's wall time. */
static uint64_t run_checked(const struct mks_bench_config *c)
{
    struct mks_bench_result *run = NULL, *ref = NULL;
    char err[256] = "";
    if (mks_bench_run(c, NULL, 0, &run, err, sizeof(err)))
        fail_msg("run: %s", err);
    assert_int_equal(mks_bench_reference(c, NULL, 0, &ref), 0);
    compare(c, run, ref);
    check_counts(c, run, ref);
    uint64_t wall = run->wall_ns;
    mks_bench_result_free(run);
    mks_bench_result_free(ref);
    return wall;
}

static void test_one_rank_matches_reference(void **state)
{
    (void)state;
    struct mks_bench_config c = small(1, job_name("wl1"));
    run_checked(&c);
}

static void test_two_ranks_uneven_tiles(void **state)
{
    (void)state;
    struct mks_bench_config c = small(2, job_name("wl2"));
    c.layers = 3;
    c.tiles = 3; /* tile edges do not divide the widths */
    c.experts = 5;
    c.topk = 2;
    c.workers = 3;
    c.hidden = 40;
    c.vocab = 100;
    run_checked(&c);
}

/* Paced steps (--step-interval-us): the same tokens, and steps start no
 * earlier than the interval allows. */
static void test_paced_run(void **state)
{
    (void)state;
    struct mks_bench_config c = small(2, job_name("wl4"));
    c.steps = 6;
    c.step_interval_us = 3000;
    assert_true(run_checked(&c) >= 5ull * 3000 * 1000);
}

static void test_bad_config_refused(void **state)
{
    (void)state;
    struct mks_bench_config c = small(1, job_name("wl3"));
    c.workers = 0;
    struct mks_bench_result *run = NULL;
    char err[256] = "";
    assert_int_equal(mks_bench_run(&c, NULL, 0, &run, err, sizeof(err)), -22);
    assert_null(run);
    assert_non_null(strstr(err, "workers"));
    c = small(2, job_name("wl3"));
    assert_int_equal(mks_bench_run_rank(&c, NULL, 0, 2, &run, err, sizeof(err)), -22);
}

static void test_schema(void **state)
{
    (void)state;
    struct mks_bench_config c = small(4, "x");
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(bw_schema_encode(&c, 1, &buf, &len), 0);
    assert_true(len > 100);
#ifdef MKS_TEST_HAVE_PROTO
    Mkscope__V1__TaskSchema *s = mkscope__v1__task_schema__unpack(NULL, len, buf);
    assert_non_null(s);
    assert_int_equal(s->n_classes, mks_bench_class_count(&c));
    char nb[32];
    for (size_t i = 0; i < s->n_classes; i++) {
        assert_int_equal(s->classes[i]->id, i);
        assert_string_equal(s->classes[i]->name,
                            mks_bench_class_name(&c, (uint32_t)i, nb, sizeof(nb)));
        assert_true(s->classes[i]->n_dep_classes >= 1);
        for (size_t k = 0; k < s->classes[i]->n_dep_classes; k++)
            assert_true(s->classes[i]->dep_classes[k] < s->n_dep_classes);
    }
    assert_true(s->classes[4]->comm);
    assert_false(s->classes[1]->comm);
    int remote = 0;
    for (size_t i = 0; i < s->n_dep_classes; i++)
        remote += s->dep_classes[i]->remote;
    assert_int_equal(remote, 1);
    /* two all-reduce channels to each of the three peers of rank 1 */
    assert_int_equal(s->n_channels, 6);
    for (size_t i = 0; i < s->n_channels; i++)
        assert_int_not_equal(s->channels[i]->peer_rank, 1);
    mkscope__v1__task_schema__free_unpacked(s, NULL);
#endif
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_is_deterministic),
        cmocka_unit_test(test_one_rank_matches_reference),
        cmocka_unit_test(test_two_ranks_uneven_tiles),
        cmocka_unit_test(test_paced_run),
        cmocka_unit_test(test_bad_config_refused),
        cmocka_unit_test(test_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
