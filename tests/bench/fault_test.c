/*
 * Fault specs: every type parses with its documented defaults, every bad spec
 * is refused with a one-line reason, the ground truth file carries what
 * the spec said (nothing measured), and the fault plan spreads a magnitude
 * so that each type adds it once per step whatever the worker count.
 */
#include <errno.h>
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
#include "mkscope/commid.h"
#include "model.h"

static struct mks_bench_config cfg4(void)
{
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    c.ranks = 4;
    c.steps = 20;
    return c;
}

static void test_types_and_defaults(void **state)
{
    (void)state;
    struct mks_bench_config c = cfg4();
    struct mks_fault f;
    char err[256];
    char nb[32];
    assert_int_equal(mks_fault_parse("task-delay:rank=2,class=attention,magnitude=1500,steps=5-9",
                                     &c, &f, err, sizeof(err)),
                     0);
    assert_int_equal(f.type, MKS_FAULT_TASK_DELAY);
    assert_int_equal(f.rank, 2);
    assert_string_equal(mks_bench_class_name(&c, (uint32_t)f.cls, nb, sizeof(nb)), "attention");
    assert_int_equal(f.magnitude_us, 1500);
    assert_int_equal(f.step_lo, 5);
    assert_int_equal(f.step_hi, 9);
    assert_int_equal(f.gen, MKS_FAULT_ANY);
    assert_string_equal(mks_fault_cause(&f), "slow_task");

    /* steps past the run are clipped to it; no steps means all */
    assert_int_equal(mks_fault_parse("notify-delay:rank=1,steps=3-1000", &c, &f, err, sizeof(err)),
                     0);
    assert_int_equal(f.step_hi, 19);
    assert_string_equal(mks_fault_cause(&f), "notify_delay");
    assert_int_equal(mks_fault_parse("queue-oversub", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.rank, 0);
    assert_int_equal(f.step_lo, 0);
    assert_int_equal(f.step_hi, 19);
    assert_string_equal(mks_fault_cause(&f), "local_imbalance");

    /* moe-skew: the hot expert lives on the faulty rank */
    assert_int_equal(mks_fault_parse("moe-skew:rank=3", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.expert, 3);
    assert_string_equal(mks_bench_class_name(&c, (uint32_t)f.cls, nb, sizeof(nb)), "expert.3");
    assert_int_equal(mks_fault_parse("moe-skew:expert=6", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.rank, 2);
    assert_int_equal(
        mks_fault_parse("comm-delay:rank=1,gen=3,magnitude=10", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.gen, 3);
    assert_string_equal(mks_fault_cause(&f), "slow_transfer");
    assert_int_equal(
        mks_fault_parse("tile-starve:rank=1,class=o_proj,tile=3", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.tile, 3);

    /* slow-rank: the whole rank, no class; steps=all is every step */
    assert_int_equal(mks_fault_parse("slow-rank:rank=2,steps=all", &c, &f, err, sizeof(err)), 0);
    assert_int_equal(f.type, MKS_FAULT_SLOW_RANK);
    assert_int_equal(f.cls, MKS_FAULT_ANY);
    assert_int_equal(f.step_lo, 0);
    assert_int_equal(f.step_hi, 19);
    assert_string_equal(mks_fault_cause(&f), "slow_rank");
    assert_string_equal(mks_fault_type_name(f.type), "slow-rank");
}

static void expect_bad(const struct mks_bench_config *c, const char *spec, const char *needle)
{
    struct mks_fault f;
    memset(&f, 0x5a, sizeof(f));
    char err[256] = "";
    assert_int_equal(mks_fault_parse(spec, c, &f, err, sizeof(err)), -22);
    if (!strstr(err, needle))
        fail_msg("spec '%s': error '%s' lacks '%s'", spec, err, needle);
    assert_null(strchr(err, '\n'));
    assert_int_equal(f.type, 0x5a5a5a5a); /* untouched on error */
}

static void test_errors(void **state)
{
    (void)state;
    struct mks_bench_config c = cfg4();
    expect_bad(&c, "slow-everything:rank=1", "unknown type");
    expect_bad(&c, "task-delay:rank=4", "rank '4' not in 0..3");
    expect_bad(&c, "task-delay:rank=-1", "rank");
    expect_bad(&c, "task-delay:rank=x", "rank");
    expect_bad(&c, "task-delay:class=softmax", "unknown task class 'softmax'");
    expect_bad(&c, "task-delay:class=expert.8", "unknown task class");
    expect_bad(&c, "task-delay:magnitude=abc", "magnitude");
    expect_bad(&c, "task-delay:magnitude=99999999999", "magnitude");
    expect_bad(&c, "task-delay:steps=9-5", "steps");
    expect_bad(&c, "task-delay:steps=20", "steps start at 20");
    expect_bad(&c, "task-delay:rank", "not key=value");
    expect_bad(&c, "task-delay:=3", "not key=value");
    expect_bad(&c, "task-delay:colour=red", "unknown key 'colour'");
    expect_bad(&c, "tile-starve:class=attention", "tiled class");
    expect_bad(&c, "tile-starve:tile=4", "tile 4 not in 0..3");
    expect_bad(&c, "comm-delay:gen=4", "all-reduce index");
    expect_bad(&c, "task-delay:gen=0", "task generation");
    expect_bad(&c, "task-delay:gen=21", "1..20");
    expect_bad(&c, "comm-delay:class=qkv_proj", "allreduce_send");
    expect_bad(&c, "moe-skew:rank=1,expert=2", "expert 2 lives on rank 2");
    expect_bad(&c, "queue-oversub:worker=2", "worker '2' not in 0..1");
    expect_bad(&c, "slow-rank:class=attention", "takes no class");
    expect_bad(&c, "task-delay:steps=some", "or all");
    struct mks_bench_config one = c;
    one.ranks = 1;
    expect_bad(&one, "comm-delay", "at least 2 ranks");
    char longspec[600];
    memset(longspec, 'a', sizeof(longspec) - 1);
    longspec[sizeof(longspec) - 1] = 0;
    expect_bad(&c, longspec, "too long");
}

static void test_truth_file(void **state)
{
    (void)state;
    struct mks_bench_config c = cfg4();
    struct mks_fault f[2];
    char err[256];
    assert_int_equal(mks_fault_parse("comm-delay:rank=2,gen=1,magnitude=700,steps=4-5", &c, &f[0],
                                     err, sizeof(err)),
                     0);
    assert_int_equal(mks_fault_parse("task-delay:rank=1,class=qkv_proj,gen=8,steps=5-9", &c, &f[1],
                                     err, sizeof(err)),
                     0);
    char path[64];
    snprintf(path, sizeof(path), "/tmp/mks-truth-%d.json", (int)getpid());
    assert_int_equal(mks_bench_truth_write(&c, f, 2, path, err, sizeof(err)), 0);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    unlink(path);
    assert_non_null(root);
    json_t *faults = json_object_get(root, "faults");
    assert_int_equal(json_array_size(faults), 2);
    json_t *a = json_array_get(faults, 0), *b = json_array_get(faults, 1);
    assert_string_equal(json_string_value(json_object_get(a, "type")), "comm-delay");
    assert_string_equal(json_string_value(json_object_get(a, "cause")), "slow_transfer");
    assert_int_equal(json_integer_value(json_object_get(a, "rank")), 2);
    assert_string_equal(json_string_value(json_object_get(a, "class")), "allreduce_send");
    /* 2 steps x 3 peers, each the id the producer stamps */
    json_t *cg = json_object_get(a, "comm_gens");
    assert_int_equal(json_array_size(cg), 6);
    uint64_t id = (uint64_t)json_integer_value(json_array_get(cg, 0));
    assert_int_equal(mks_commid_src_rank(id), 2);
    assert_int_equal(mks_commid_dst_rank(id), 0);
    assert_int_equal(mks_commid_step(id), 4);
    assert_string_equal(json_string_value(json_object_get(b, "type")), "task-delay");
    assert_string_equal(json_string_value(json_object_get(b, "class")), "qkv_proj");
    json_t *tg = json_object_get(b, "task_gens");
    assert_int_equal(json_array_size(tg), 1); /* gen 8 = step 7, inside 5-9 */
    assert_int_equal(json_integer_value(json_array_get(tg, 0)), 8);
    json_t *st = json_object_get(b, "steps");
    assert_int_equal(json_integer_value(json_array_get(st, 0)), 5);
    assert_int_equal(json_integer_value(json_array_get(st, 1)), 9);
    json_decref(root);
    assert_int_not_equal(
        mks_bench_truth_write(&c, f, 2, "/nonexistent/dir/t.json", err, sizeof(err)), 0);
}

static void test_config_check(void **state)
{
    (void)state;
    struct mks_bench_config c = cfg4();
    char err[256];
    assert_int_equal(mks_bench_config_check(&c, err, sizeof(err)), 0);
    c.ranks = 0;
    assert_int_equal(mks_bench_config_check(&c, err, sizeof(err)), -22);
    assert_non_null(strstr(err, "ranks 0"));
    c = cfg4();
    c.topk = 9;
    assert_int_equal(mks_bench_config_check(&c, err, sizeof(err)), -22);
    c = cfg4();
    c.job = "bad/name";
    assert_int_equal(mks_bench_config_check(&c, err, sizeof(err)), -22);
    c = cfg4();
    c.tiles = 64;
    c.hidden = 32;
    assert_int_equal(mks_bench_config_check(&c, err, sizeof(err)), -22);
    assert_int_equal(mks_bench_class_find(&c, "moe_router"), 6);
    assert_int_equal(mks_bench_class_find(&c, "expert.7"), 17);
    assert_int_equal(mks_bench_class_find(&c, "expert.-1"), -1);
    assert_int_equal(mks_bench_class_find(&c, "expert."), -1);
}

/* What one operator's tasks (n_op of them, W workers) get from a fault:
 * the largest per-worker sum of run delay and of hold when tasks are dealt
 * as the runtime deals them (forced ones first, the rest round robin over the
 * other workers), the forced count, and the comm deadline of each task. */
struct op_plan {
    uint64_t run_max, hold_max, notify_max, starve_max, comm_min, comm_max;
    uint32_t forced, hit;
};

static struct op_plan plan_op(const struct mks_fault *f, uint32_t W, uint32_t L, uint32_t cls,
                              uint32_t n_op, uint32_t k)
{
    struct op_plan o = {.comm_min = UINT64_MAX};
    uint64_t run[256] = {0}, hold[256] = {0};
    uint32_t rr = 0;
    assert_true(W <= 256);
    for (uint32_t i = 0; i < n_op; i++) {
        struct bm_fault_effect fx;
        bm_fault_plan(f, 1, (uint32_t)f->rank, W, L, cls, 3, i, i, n_op, k, BM_GAIN_ONE, &fx);
        uint32_t w;
        if (fx.force_worker >= 0) {
            w = (uint32_t)fx.force_worker;
            o.forced++;
        } else {
            w = rr++ % W;
            if (o.forced && w == (uint32_t)f->worker && W > 1)
                w = rr++ % W;
        }
        run[w] += fx.run_delay_ns;
        hold[w] += fx.hold_ns;
        if (fx.notify_delay_ns > o.notify_max)
            o.notify_max = fx.notify_delay_ns;
        if (fx.starve_ns > o.starve_max)
            o.starve_max = fx.starve_ns;
        if (fx.comm_delay_ns < o.comm_min)
            o.comm_min = fx.comm_delay_ns;
        if (fx.comm_delay_ns > o.comm_max)
            o.comm_max = fx.comm_delay_ns;
        o.hit +=
            fx.run_delay_ns || fx.hold_ns || fx.notify_delay_ns || fx.starve_ns || fx.comm_delay_ns;
    }
    for (uint32_t w = 0; w < W; w++) {
        if (run[w] > o.run_max)
            o.run_max = run[w];
        if (hold[w] > o.hold_max)
            o.hold_max = hold[w];
    }
    return o;
}

static void test_plan_bounded(void **state)
{
    (void)state;
    struct mks_bench_config c = cfg4();
    struct mks_fault f;
    char err[256];
    const uint32_t L = 2;
    /* the CPU's 2 workers with 4 tiles; a GPU's 131 with 32 or 4 */
    const uint32_t workers[] = {2, 131, 131}, tiles[] = {4, 32, 4};
    for (uint32_t v = 0; v < 3; v++) {
        uint32_t W = workers[v], T = tiles[v];
        /* 2000 us a step over L layers: the slowest worker adds 1000 us per layer */
        assert_int_equal(mks_fault_parse("task-delay:rank=1,class=qkv_proj,magnitude=2000", &c, &f,
                                         err, sizeof(err)),
                         0);
        struct op_plan o = plan_op(&f, W, L, BC_QKV, T, 0);
        assert_int_equal(o.run_max, 1000000);
        assert_int_equal(o.hit, T);

        /* queue-oversub: a fair share of the tiles on the held worker, held
         * magnitude / layers in all; no body waits behind more than that */
        assert_int_equal(mks_fault_parse("queue-oversub:rank=1,worker=1,magnitude=2000", &c, &f,
                                         err, sizeof(err)),
                         0);
        o = plan_op(&f, W, L, BC_QKV, T, 0);
        assert_int_equal(o.forced, (T + W - 1) / W);
        assert_int_equal(o.hold_max, 1000000);
        assert_int_equal(o.hit, o.forced);
        assert_int_equal(o.run_max, 0);

        /* notify-delay and tile-starve: side by side, magnitude / occurrences */
        assert_int_equal(mks_fault_parse("notify-delay:rank=1,class=qkv_proj,magnitude=2000", &c,
                                         &f, err, sizeof(err)),
                         0);
        o = plan_op(&f, W, L, BC_QKV, T, 0);
        assert_int_equal(o.notify_max, 1000000);
        assert_int_equal(
            mks_fault_parse("tile-starve:rank=1,tile=2,magnitude=2000", &c, &f, err, sizeof(err)),
            0);
        o = plan_op(&f, W, L, BC_QKV, T, 0);
        assert_int_equal(o.starve_max, 1000000);
        assert_int_equal(o.hit, 1);
    }
    /* slow-rank: every compute class an equal share (BM_SLOW_RANK_KINDS
     * of them), spread like task-delay over the class's occurrences and
     * waves; the all-reduce's sends and reduces are not slowed */
    assert_int_equal(mks_fault_parse("slow-rank:rank=1,magnitude=1800", &c, &f, err, sizeof(err)),
                     0);
    struct op_plan sr = plan_op(&f, 2, L, BC_QKV, 4, 0);
    assert_int_equal(sr.hit, 4);
    assert_int_equal(sr.run_max, 1800000 / BM_SLOW_RANK_KINDS / L);
    sr = plan_op(&f, 2, L, BC_LMHEAD, 4, 0);
    assert_int_equal(sr.run_max, 1800000 / BM_SLOW_RANK_KINDS);
    sr = plan_op(&f, 2, L, BC_AR_SEND, 3, 0);
    assert_int_equal(sr.hit, 0);
    sr = plan_op(&f, 2, L, BC_AR_REDUCE, 1, 0);
    assert_int_equal(sr.hit, 0);
    /* comm-delay: one deadline for every send of a selected all-reduce,
     * however many sends share a worker; other all-reduces untouched */
    assert_int_equal(mks_fault_parse("comm-delay:rank=2,magnitude=2000", &c, &f, err, sizeof(err)),
                     0);
    struct op_plan o = plan_op(&f, 2, L, BC_AR_SEND, 3, 1);
    assert_int_equal(o.comm_min, 500000);
    assert_int_equal(o.comm_max, 500000);
    assert_int_equal(
        mks_fault_parse("comm-delay:rank=2,gen=1,magnitude=2000", &c, &f, err, sizeof(err)), 0);
    o = plan_op(&f, 2, L, BC_AR_SEND, 3, 1);
    assert_int_equal(o.comm_min, 2000000);
    o = plan_op(&f, 2, L, BC_AR_SEND, 3, 2);
    assert_int_equal(o.hit, 0);
    /* another rank's tasks and steps outside the fault are left alone */
    assert_int_equal(
        mks_fault_parse("task-delay:rank=1,class=qkv_proj,steps=5-9", &c, &f, err, sizeof(err)), 0);
    o = plan_op(&f, 2, L, BC_QKV, 4, 0);
    assert_int_equal(o.hit, 0);
    f.rank = 0;
    f.step_lo = 0;
    struct bm_fault_effect fx;
    bm_fault_plan(&f, 1, 1, 2, L, BC_QKV, 3, 0, 0, 4, 0, BM_GAIN_ONE, &fx);
    assert_int_equal(fx.run_delay_ns, 0);
}

/* The plan's closed loop: a rank whose fault reaches the step's end only in
 * part (slack absorbs some of every delay) gets its plan scaled until the
 * step grows by the magnitude; one that overshoots is scaled down; the
 * scale moves at most 4/3 or 3/4 a step and stays within 1/4..4; the clean
 * steps may differ from one another (they are compared one by one); with
 * no baseline the plan stays as written. */
static uint64_t loop_run(double absorbed, uint64_t offset_ns, uint64_t mag_ns, uint32_t steps,
                         int with_base, uint32_t *gain_out, uint32_t *max_step_change_pct)
{
    struct bm_fault_gain g;
    bm_fault_gain_init(&g);
    uint64_t added_last = 0;
    uint32_t prev = g.gain, worst = 0;
    for (uint32_t s = 0; s < steps; s++) {
        int in = s >= 10;
        uint64_t mag = in ? mag_ns : 0;
        uint64_t clean = 10000000 + 200000ull * s; /* steps grow: a KV cache */
        /* what the step takes: the plan's delay, part of it absorbed */
        uint64_t delay = mag * g.gain / BM_GAIN_ONE;
        uint64_t added = in ? (uint64_t)((double)delay * (1.0 - absorbed)) + offset_ns : 0;
        bm_fault_gain_update(&g, clean + added, mag, with_base ? clean : 0);
        uint32_t ch = (uint32_t)(g.gain > prev ? (uint64_t)(g.gain - prev) * 100 / prev
                                               : (uint64_t)(prev - g.gain) * 100 / prev);
        if (ch > worst)
            worst = ch;
        prev = g.gain;
        added_last = added;
    }
    *gain_out = g.gain;
    *max_step_change_pct = worst;
    return added_last;
}

static void test_gain_loop(void **state)
{
    (void)state;
    uint32_t gain, change;
    /* 40% of every delay absorbed: the loop asks 1/0.6 of the magnitude */
    uint64_t added = loop_run(0.4, 0, 1000000, 40, 1, &gain, &change);
    assert_true(added > 980000 && added < 1020000);
    assert_true(gain > 1650 && gain < 1770); /* 1024 / 0.6 = 1707 */
    assert_true(change <= 34);
    /* 15% more than asked (a fault that adds time of its own) */
    added = loop_run(0.0, 150000, 1000000, 40, 1, &gain, &change);
    assert_true(added > 980000 && added < 1020000);
    assert_true(gain > 850 && gain < 890); /* 1024 * 0.85 = 870 */
    /* nothing reaches the step: bounded at 4 */
    added = loop_run(1.0, 0, 1000000, 40, 1, &gain, &change);
    assert_int_equal(added, 0);
    assert_int_equal(gain, 4 * BM_GAIN_ONE);
    /* no baseline: as written */
    added = loop_run(0.4, 0, 1000000, 40, 0, &gain, &change);
    assert_int_equal(gain, BM_GAIN_ONE);
    assert_true(added > 590000 && added < 610000);
    /* the gain scales every delay of the plan */
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    c.ranks = 2;
    struct mks_fault f;
    char err[256];
    assert_int_equal(mks_fault_parse("task-delay:rank=1,class=qkv_proj,magnitude=1000,steps=0-9",
                                     &c, &f, err, sizeof(err)),
                     0);
    struct bm_fault_effect a, b;
    bm_fault_plan(&f, 1, 1, 4, 2, BC_QKV, 3, 0, 0, 4, 0, BM_GAIN_ONE, &a);
    bm_fault_plan(&f, 1, 1, 4, 2, BC_QKV, 3, 0, 0, 4, 0, 2 * BM_GAIN_ONE, &b);
    assert_true(a.run_delay_ns > 0);
    assert_int_equal(b.run_delay_ns, 2 * a.run_delay_ns);
    assert_int_equal(bm_fault_step_mag(&f, 1, 1, 9), 1000000);
    assert_int_equal(bm_fault_step_mag(&f, 1, 1, 10), 0);
    assert_int_equal(bm_fault_step_mag(&f, 1, 0, 5), 0);
}

/* --baseline: a clean run's result file of the same configuration, every
 * mismatch refused with a line that says what. */
static void test_baseline_load(void **state)
{
    (void)state;
    struct mks_bench_config c;
    mks_bench_config_default(&c);
    c.ranks = 2;
    c.steps = 3;
    char path[] = "/tmp/mks-baseline-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char cfgj[512], text[1024], err[512];
    snprintf(cfgj, sizeof(cfgj),
             "{\"ranks\":2,\"layers\":%u,\"hidden\":%u,\"heads\":%u,\"experts\":%u,"
             "\"tiles\":%u,\"workers\":%u,\"steps\":3,\"batch\":%u,\"seed\":%llu}",
             c.layers, c.hidden, c.heads, c.experts, c.tiles, c.workers, c.batch,
             (unsigned long long)c.seed);
    const char *ranks_ok = "[{\"rank\":1,\"step_ns\":[4,5,6],\"faulted_tasks\":0},"
                           "{\"rank\":0,\"step_ns\":[1,2,3],\"faulted_tasks\":0}]";
    static const struct {
        const char *ranks, *want;
    } cases[] = {
        {"[{\"rank\":0,\"step_ns\":[1,2,3]}]", "1 ranks of step times"},
        {"[{\"rank\":0,\"step_ns\":[1,2]},{\"rank\":1,\"step_ns\":[1,2,3]}]", "needs rank and 3"},
        {"[{\"rank\":0,\"step_ns\":[1,2,3]},{\"rank\":0,\"step_ns\":[1,2,3]}]", "given twice"},
        {"[{\"rank\":0,\"step_ns\":[1,0,3]},{\"rank\":1,\"step_ns\":[1,2,3]}]",
         "step 1: not a step time"},
        {"[{\"rank\":0,\"step_ns\":[1,2,3],\"faulted_tasks\":7},{\"rank\":1,\"step_ns\":[1,2,3]}]",
         "not a clean run"},
    };
    uint64_t *v = NULL;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "{\"config\":%s,\"ranks\":%s}", cfgj, cases[i].ranks);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(mks_bench_baseline_load(&c, path, &v, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, cases[i].want));
    }
    /* another configuration */
    c.steps = 4;
    assert_int_equal(mks_bench_baseline_load(&c, path, &v, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "steps is not this run's 4"));
    c.steps = 3;
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"config\": [", f);
    fclose(f);
    assert_int_equal(mks_bench_baseline_load(&c, path, &v, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "baseline /tmp/mks-baseline-"));
    snprintf(text, sizeof(text), "{\"config\":%s,\"ranks\":%s}", cfgj, ranks_ok);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(mks_bench_baseline_load(&c, path, &v, err, sizeof(err)), 0);
    static const uint64_t want[] = {1, 2, 3, 4, 5, 6};
    assert_memory_equal(v, want, sizeof(want));
    free(v);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_and_defaults), cmocka_unit_test(test_gain_loop),
        cmocka_unit_test(test_baseline_load),      cmocka_unit_test(test_errors),
        cmocka_unit_test(test_truth_file),         cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_plan_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
