/*
 * Probe compiler tests (mkscope/probe.h).
 *  - The grammar's errors point at the token, and a field an event does not
 *    carry is refused naming the events that do.
 *  - The hooks a probe needs: from the predicate's events, else from the
 *    derived fields' home event.
 *  - Every compiled program passes the verifier for its hook, and run in a
 *    real control block (the CPU runtime, the agent's control-block API) on
 *    random event streams, epoch after epoch, gives exactly the reference
 *    model's groups, other row and counts; its runs never cost more than
 *    the verifier declared.
 */
#include <errno.h>
#include <math.h>
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

#include "mkscope/ctl.h"
#include "mkscope/probe.h"
#include "mkscope/runtime.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"
#include "probe_gen.h"

static int64_t resolve(const char *name, void *arg)
{
    (void)arg;
    if (!strcmp(name, "attention"))
        return 1;
    if (!strcmp(name, "expert.3"))
        return 7;
    return -1;
}

/* ---- errors ---------------------------------------------------------------- */

static void expect_error(const char *text, int pos, int len, const char *needle)
{
    struct mks_probe *p = NULL;
    struct mks_query_error e;
    int rc = mks_probe_parse(text, &p, &e);
    struct mks_probe_code *c = NULL;
    if (rc == 0)
        rc = mks_probe_compile(p, NULL, resolve, NULL, &c, &e);
    mks_probe_code_free(c);
    mks_probe_free(p);
    if (rc == 0)
        fail_msg("'%s' accepted", text);
    if ((pos >= 0 && (e.pos != pos || e.len != len)) || !strstr(e.msg, needle))
        fail_msg("'%s': error at %d+%d '%s', want %d+%d '%s'", text, e.pos, e.len, e.msg, pos,
                 len, needle);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("count(run)", 6, 3, "count() takes nothing");
    expect_error("sum(class) where event = task_end", 4, 5, "not a quantity");
    expect_error("max(class) where event = task_end", 4, 5, "no order");
    expect_error("cnt()", 0, 3, "unknown aggregate 'cnt'");
    expect_error("sum(runn)", 4, 4, "unknown field 'runn'");
    expect_error("sum(time)", 4, 4, "not in the hook context");
    expect_error("count() by clas where event = task_end", 11, 4, "cannot group by 'clas'");
    expect_error("count() by class, class where event = task_end", 18, 5, "grouped by twice");
    expect_error("count() by class", -1, 0, "which events?");
    expect_error("count() where step = 3", -1, 0, "which events?");
    expect_error("count() where event = task_end and event = task_start", -1, 0,
                 "holds at no event");
    /* a field the event does not carry, with the events that do */
    expect_error("count() where event = task_end and wait > 20us", 35, 4,
                 "'wait' is not known at task_end");
    expect_error("sum(wait) where event = task_start", 0, 9, "(it is at dep_wait_end)");
    expect_error("count() by peer where event = task_end", 11, 4, "'peer' is not known at task_end");
    expect_error("hist(run) where event = dep_wait_end", 0, 9, "'run' is not known at dep_wait_end");
    expect_error("sum(run), sum(wait)", -1, 0, "known at different events");
    expect_error("count() where event = task_end and time > -5s", -1, 0,
                 "not in the hook context");
    expect_error("count() where event = task_end limit 5", 31, 5, "no limit");
    expect_error("hist(run), hist(queue), hist(value) where event = dep_release", 24, 11,
                 "histograms of at most 2 fields");
    expect_error("count() where event = task_end and class = nosuch", 43, 6,
                 "unknown task class 'nosuch'");
    expect_error("count() where event = task_finish", 22, 11, "unknown event");
}

/* ---- hooks -------------------------------------------------------------------- */

static void expect_hooks(const char *text, uint32_t hooks, uint32_t helpers)
{
    struct mks_probe *p = NULL;
    struct mks_query_error e;
    if (mks_probe_parse(text, &p, &e))
        fail_msg("'%s': %s", text, e.msg);
    if (mks_probe_hooks(p) != hooks || mks_probe_helper_hooks(p) != helpers)
        fail_msg("'%s': hooks %#x helpers %#x, want %#x %#x", text, mks_probe_hooks(p),
                 mks_probe_helper_hooks(p), hooks, helpers);
    mks_probe_free(p);
}

#define H(e) (1u << (e))

static void test_hooks(void **state)
{
    (void)state;
    expect_hooks("count() by dep_event where event = dep_wait_end and wait > 20us",
                 H(MKS_EV_DEP_WAIT_END), H(MKS_EV_DEP_WAIT_BEGIN));
    expect_hooks("hist(run) by class where req_gen = 1842", H(MKS_EV_TASK_END), 0);
    expect_hooks("sum(run) by tile_x where class = expert.3 and step >= 500", H(MKS_EV_TASK_END),
                 0);
    expect_hooks("p99(wait) by peer", H(MKS_EV_DEP_WAIT_END), H(MKS_EV_DEP_WAIT_BEGIN));
    expect_hooks("count() by event where event = task_start or event = task_end",
                 H(MKS_EV_TASK_START) | H(MKS_EV_TASK_END), 0);
    /* begin is aggregated itself: no separate helper */
    expect_hooks("count() by event where event = dep_wait_begin or (event = dep_wait_end and"
                 " wait > 1ms)",
                 H(MKS_EV_DEP_WAIT_BEGIN) | H(MKS_EV_DEP_WAIT_END), 0);
    expect_hooks("max(queue_depth) by worker where not (event != queue_pressure)",
                 H(MKS_EV_QUEUE_PRESSURE), 0);
    expect_hooks("sum(run) by class where event = dep_release", H(MKS_EV_DEP_RELEASE), 0);
}

static void test_layout(void **state)
{
    (void)state;
    struct mks_probe *p = NULL;
    struct mks_query_error e;
    assert_int_equal(mks_probe_parse("count(), sum(run), mean(run), min(run), max(run),"
                                     " p99(run), hist(run) by class, step",
                                     &p, &e),
                     0);
    const struct mks_probe_layout *l = mks_probe_layout(p);
    assert_int_equal(l->n_keys, 2);
    assert_string_equal(l->keys[0].name, "class");
    assert_int_equal(l->keys[0].unit, MKS_PROBE_UNIT_CLASS);
    assert_int_equal(l->n_cols, 7);
    assert_string_equal(l->cols[5].name, "p99(run)");
    /* count, one sum, max, ~min, 64 buckets */
    assert_int_equal(l->n_words, 1 + 1 + 2 + 64);
    assert_int_equal(l->cols[1].word, l->cols[2].word);
    assert_int_equal(l->cols[5].word, l->cols[6].word);
    assert_int_equal(l->word_max[l->cols[3].word], 1);
    assert_int_equal(l->word_max[l->cols[4].word], 1);
    assert_int_equal(l->word_max[l->cols[1].word], 0);
    /* values and merging */
    uint64_t a[MKS_PROBE_MAX_WORDS] = {0}, b[MKS_PROBE_MAX_WORDS] = {0};
    a[0] = 2, a[l->cols[1].word] = 30, a[l->cols[4].word] = 20, a[l->cols[3].word] = ~10ull;
    b[0] = 1, b[l->cols[1].word] = 5, b[l->cols[4].word] = 5, b[l->cols[3].word] = ~5ull;
    mks_probe_merge(l, a, b);
    double v;
    assert_int_equal(mks_probe_value(l, 0, a, &v), 0);
    assert_true(v == 3);
    assert_int_equal(mks_probe_value(l, 2, a, &v), 0);
    assert_true(fabs(v - 35.0 / 3) < 1e-9);
    assert_int_equal(mks_probe_value(l, 3, a, &v), 0);
    assert_true(v == 5);
    assert_int_equal(mks_probe_value(l, 4, a, &v), 0);
    assert_true(v == 20);
    uint64_t z[MKS_PROBE_MAX_WORDS] = {0};
    assert_int_equal(mks_probe_value(l, 3, z, &v), -ENODATA);
    assert_int_equal(mks_probe_value(l, 5, z, &v), -ENODATA);
    mks_probe_free(p);
}

/* ---- against the model, in a control block ------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A context of event ev on worker w with fields from small sets, so that
 * groups repeat and predicates go both ways; times sometimes unknown. */
static void random_ctx(struct mks_hook_ctx *c, uint32_t ev, uint32_t w, uint64_t now)
{
    memset(c, 0, sizeof(*c));
    c->event = (uint16_t)ev;
    c->worker = w;
    c->sm = w;
    c->rank = (uint32_t)(rnd() % 3);
    c->task_class = (uint32_t)(rnd() % 9);
    c->task_gen = rnd() % 5;
    c->req_gen = 1840 + rnd() % 4;
    c->step = (uint32_t)(495 + rnd() % 10);
    c->tile_x = (uint32_t)(rnd() % 6);
    c->tile_y = (uint32_t)(rnd() % 2);
    c->dep_event = rnd() % 3 ? (1ull << 63) | (rnd() % 4) : rnd() % 7;
    c->dep_class = (uint32_t)(rnd() % 3);
    static const uint64_t kinds[] = {0, 1, 2, 3};
    c->comm_gen = rnd() % 5 ? (kinds[rnd() % 4] << 62) | (rnd() % 3) << 56 | (rnd() % 20) << 8 : 0;
    c->peer_rank = (uint32_t)(rnd() % 4);
    c->queue_depth = (uint32_t)(rnd() % 12);
    c->t_now = now;
    c->t_ready = rnd() % 8 ? now - 1000 - rnd() % 200000 : 0;
    c->t_start = rnd() % 8 ? now - rnd() % 100000 : 0;
    c->t_end = rnd() % 2 ? now - rnd() % 5000 : 0;
    c->value = rnd() % 70000;
    if (rnd() % 20 == 0)
        c->task_class = 0xffffffffu; /* absent */
}

struct fixture {
    struct mks_rt *rt;
    struct mks_ctl *ctl;
};

static char job[64];

static int setup(void **state)
{
    static int seq;
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(job, sizeof(job), "probetest%d-%d", (int)getpid(), seq++);
    struct mks_rt_opts o = {.sz = sizeof(o), .job = job, .rank = 0, .n_ranks = 1,
                            .n_workers = 3, .arena_bytes = 8 << 20};
    if (mks_rt_create(&o, &f->rt) != 0 || mks_ctl_open(job, 0, &f->ctl) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mks_ctl_close(f->ctl);
    mks_rt_destroy(f->rt);
    free(f);
    return 0;
}

struct seen {
    const struct mks_probe_layout *l;
    const struct mks_probe_sim *sim;
    uint32_t found;
    uint32_t n_keys;
};

static int check_group(const void *key, const void *value, void *arg)
{
    struct seen *s = arg;
    const uint64_t *k = key, *w = value;
    for (uint32_t i = 0; i < mks_probe_sim_groups(s->sim); i++) {
        const uint64_t *sk, *sw;
        mks_probe_sim_group(s->sim, i, &sk, &sw);
        if (memcmp(sk, k, 8 * (s->n_keys ? s->n_keys : 1)))
            continue;
        for (uint32_t j = 0; j < s->l->n_words; j++)
            if (sw[j] != w[j])
                fail_msg("group %u word %u: %llu, model %llu", i, j, (unsigned long long)w[j],
                         (unsigned long long)sw[j]);
        s->found++;
        return 0;
    }
    fail_msg("a group the model does not have (key %llx)", (unsigned long long)k[0]);
    return 0;
}

struct words_at {
    uint32_t index;
    uint64_t *out;
    uint32_t n;
};

static int copy_entry(const void *key, const void *value, void *arg)
{
    struct words_at *w = arg;
    if (*(const uint32_t *)key == w->index)
        memcpy(w->out, value, 8 * w->n);
    return 0;
}

static void run_probe(struct fixture *f, const char *text, uint32_t groups, int epochs,
                      int events)
{
    struct mks_probe *p = NULL;
    struct mks_query_error e;
    if (mks_probe_parse(text, &p, &e))
        fail_msg("'%s': %s", text, e.msg);
    struct mks_probe_opts po = {.sz = sizeof(po), .max_groups = groups};
    struct mks_probe_code *c = NULL;
    if (mks_probe_compile(p, &po, resolve, NULL, &c, &e))
        fail_msg("'%s': %s", text, e.msg);
    const struct mks_probe_layout *l = mks_probe_layout(p);
    uint32_t ids[MKS_EV_COUNT], map_ids[MKS_PROBE_MAPS];
    int32_t share[MKS_PROBE_MAPS];
    for (uint32_t i = 0; i < c->n_progs; i++) {
        struct mks_verify_opts vo = {.sz = sizeof(vo), .prog_type = MKS_PROG_OBSERVE,
                                     .abi_version = 1, .hook = (int32_t)c->progs[i].hook,
                                     .maps = c->maps, .n_maps = c->n_maps};
        struct mks_verify_result vr;
        char log[512];
        if (mks_verify(c->progs[i].insns, c->progs[i].n_insns, &vo, &vr, log, sizeof(log)))
            fail_msg("'%s' at hook %u: rejected: %s", text, c->progs[i].hook, log);
        for (uint32_t m = 0; m < c->n_maps; m++)
            share[m] = i ? (int32_t)map_ids[m] : -1;
        struct mks_prog_spec s = {.sz = sizeof(s), .name = "probe", .prog_type = MKS_PROG_OBSERVE,
                                  .abi_version = 1, .insns = c->progs[i].insns,
                                  .n_insns = c->progs[i].n_insns, .n_maps = c->n_maps,
                                  .maps = c->maps, .share_maps = share, .cost = vr.cost};
        assert_int_equal(mks_ctl_prog_load(f->ctl, &s, &ids[i]), 0);
        if (!i)
            for (uint32_t m = 0; m < c->n_maps; m++)
                assert_int_equal(mks_ctl_prog_map(f->ctl, ids[0], m, &map_ids[m]), 0);
        uint64_t gen;
        assert_int_equal(mks_ctl_attach(f->ctl, ids[i], (enum mks_hook_event)c->progs[i].hook,
                                        -1, &gen),
                         0);
    }
    struct mks_probe_sim *sim = NULL;
    assert_int_equal(mks_probe_sim_new(p, groups, resolve, NULL, &sim), 0);
    /* a fresh epoch for both */
    struct mks_epoch_snapshot *snap = NULL;
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &snap), 0);
    mks_epoch_snapshot_free(snap);
    uint64_t now = 1000000000ull;
    for (int ep = 0; ep < epochs; ep++) {
        for (int k = 0; k < events; k++) {
            uint32_t w = (uint32_t)(rnd() % 3);
            /* waits come in pairs on a worker, now and then unmatched */
            uint32_t ev = (uint32_t)(rnd() % MKS_EV_COUNT);
            struct mks_hook_ctx ctx;
            now += 1 + rnd() % 40000;
            random_ctx(&ctx, ev, w, now);
            mks_probe_sim_event(sim, &ctx);
            MKS_HOOK(f->rt, &ctx);
            if (ev == MKS_EV_DEP_WAIT_BEGIN && rnd() % 4) {
                struct mks_hook_ctx end = ctx;
                end.event = MKS_EV_DEP_WAIT_END;
                now += rnd() % 60000;
                end.t_now = now;
                mks_probe_sim_event(sim, &end);
                MKS_HOOK(f->rt, &end);
            }
        }
        assert_int_equal(mks_ctl_epoch_advance(f->ctl, &snap), 0);
        struct seen s = {.l = l, .sim = sim, .n_keys = l->n_keys};
        assert_int_equal(mks_epoch_snapshot_map(snap, map_ids[MKS_PROBE_MAP_GROUPS], check_group,
                                                &s),
                         0);
        assert_int_equal(s.found, mks_probe_sim_groups(sim));
        if (getenv("PROBE_TEST_VERBOSE")) {
            uint64_t m = 0, o = 0;
            for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++)
                m += mks_probe_sim_stats(sim, ev)[MKS_PROBE_ST_MATCHED],
                    o += mks_probe_sim_stats(sim, ev)[MKS_PROBE_ST_OBSERVED];
            fprintf(stderr, "%s: epoch %d: %u groups, %llu observed %llu matched, other %llu\n",
                    text, ep, s.found, (unsigned long long)o, (unsigned long long)m,
                    (unsigned long long)mks_probe_sim_other(sim)[0]);
        }
        uint64_t other[MKS_PROBE_MAX_WORDS] = {0};
        struct words_at wa = {.index = 0, .out = other, .n = l->n_words};
        assert_int_equal(mks_epoch_snapshot_map(snap, map_ids[MKS_PROBE_MAP_OTHER], copy_entry,
                                                &wa),
                         0);
        assert_memory_equal(other, mks_probe_sim_other(sim), 8 * l->n_words);
        for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
            uint64_t st[MKS_PROBE_ST_WORDS] = {0};
            struct words_at ws = {.index = ev, .out = st, .n = MKS_PROBE_ST_WORDS};
            assert_int_equal(mks_epoch_snapshot_map(snap, map_ids[MKS_PROBE_MAP_STATS], copy_entry,
                                                    &ws),
                             0);
            if (memcmp(st, mks_probe_sim_stats(sim, ev), sizeof(st)))
                fail_msg("'%s' epoch %d hook %u: stats %llu %llu %llu %llu, model %llu %llu %llu"
                         " %llu",
                         text, ep, ev, (unsigned long long)st[0], (unsigned long long)st[1],
                         (unsigned long long)st[2], (unsigned long long)st[3],
                         (unsigned long long)mks_probe_sim_stats(sim, ev)[0],
                         (unsigned long long)mks_probe_sim_stats(sim, ev)[1],
                         (unsigned long long)mks_probe_sim_stats(sim, ev)[2],
                         (unsigned long long)mks_probe_sim_stats(sim, ev)[3]);
            /* no run stopped by a guard: within its declared cost */
            struct mks_coverage cov;
            assert_int_equal(mks_epoch_snapshot_coverage(snap, (enum mks_hook_event)ev, &cov), 0);
            assert_int_equal(cov.lost, 0);
        }
        mks_epoch_snapshot_free(snap);
        mks_probe_sim_epoch(sim);
    }
    for (uint32_t i = 0; i < c->n_progs; i++) {
        uint64_t gen;
        assert_int_equal(mks_ctl_detach(f->ctl, ids[i], (enum mks_hook_event)c->progs[i].hook,
                                        &gen),
                         0);
        assert_int_equal(mks_ctl_prog_unload(f->ctl, ids[i]), 0);
    }
    mks_probe_sim_free(sim);
    mks_probe_code_free(c);
    mks_probe_free(p);
}

static void test_against_model(void **state)
{
    struct fixture *f = *state;
    static const char *const probes[] = {
        "count() by dep_event where event = dep_wait_end and wait > 20us",
        "hist(run) by class where req_gen = 1842",
        "sum(run) by tile_x where class = expert.3 and step >= 500",
        "count(), sum(run), mean(run), min(run), max(run), p99(run) by class, step",
        "count(), max(wait), min(wait), hist(wait) by peer, channel",
        "count() by event, worker where event = dep_wait_begin or (event = dep_wait_end and"
        " wait > 10us) or event = task_end",
        "sum(queue), max(queue_depth) by class where event = task_start and queue > 50us",
        "count() by comm_op where event = comm_end and channel = 1",
        "count(), sum(value) where event = comm_begin or event = comm_end",
        "min(t_end), max(t_start) by class where event = dep_release and class != attention",
        "count() by req_gen, rank, tile_y where event = task_ready and not (dep_class = 2)",
        "hist(queue), hist(run) by class where event = task_end and (queue > 1us or run < 50us)",
    };
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
        run_probe(f, probes[i], 256, 3, 800);
}

/* Random probes of the grammar: whatever compiles computes the model's
 * answer (probe_gen.c draws them). */
static void test_random_against_model(void **state)
{
    struct fixture *f = *state;
    int compiled = 0;
    for (uint64_t seed = 1; compiled < 60 && seed < 2000; seed++) {
        char text[1024];
        mks_test_probe_text(seed, text, sizeof(text));
        struct mks_probe *p = NULL;
        struct mks_probe_code *c = NULL;
        struct mks_query_error e;
        int ok = mks_probe_parse(text, &p, &e) == 0 &&
                 mks_probe_compile(p, NULL, resolve, NULL, &c, &e) == 0;
        mks_probe_code_free(c);
        mks_probe_free(p);
        if (!ok)
            continue;
        compiled++;
        run_probe(f, text, 1 + (uint32_t)(seed % 40), 2, 300);
    }
    assert_int_equal(compiled, 60);
}

/* A map too small for the groups: the rest is counted, in other. */
static void test_overflow(void **state)
{
    struct fixture *f = *state;
    run_probe(f, "count(), sum(run), max(run) by class, tile_x where event = task_end", 5, 3, 600);
    run_probe(f, "count() by dep_event, worker where event = dep_wait_end", 1, 2, 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_layout),
        cmocka_unit_test_setup_teardown(test_against_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_against_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
