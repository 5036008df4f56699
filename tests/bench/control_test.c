/*
 * The bench scheduler under attached programs: a CONTROL program's priority
 * hint at task_ready and at task_assign changes the order tasks run in, and
 * OBSERVE programs at the scheduler's and the workers' hooks see exactly the
 * transitions the runtime made.  Programs are BPF objects compiled from
 * tests/bench/progs, loaded, verified and installed as the agent does.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench_int.h"
#include "mkscope/ctl.h"
#include "mkscope/loader.h"
#include "mkscope/runtime.h"
#include "mkscope/verifier.h"
#include "runtime/rt.h"

#define CLASS_QKV 1

struct fx {
    char job[64];
    struct mks_rt *hooks;
    struct mks_ctl *ctl;
    struct mks_obj *obj;
    uint32_t prog_id[8];
    uint32_t n_progs;
};

static int setup(void **state)
{
    static int seq;
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->job, sizeof(f->job), "bctl%d-%d", (int)getpid(), seq++);
    struct mks_rt_opts o = {
        .sz = sizeof(o), .job = f->job, .rank = 0, .n_ranks = 1, .n_workers = 2};
    if (mks_rt_create(&o, &f->hooks) || mks_ctl_open(f->job, 0, &f->ctl))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    mks_obj_close(f->obj);
    mks_ctl_close(f->ctl);
    mks_rt_destroy(f->hooks);
    free(f);
    return 0;
}

/* Open, verify and load every program of a built BPF object; programs of the
 * object share its maps. */
static void load_obj(struct fx *f, const char *name)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof(path), "%s/%s", MKS_BENCH_PROGS_DIR, name);
    if (mks_obj_open_file(path, &f->obj, err, sizeof(err)))
        fail_msg("open %s: %s", path, err);
    uint32_t n_maps = mks_obj_map_count(f->obj);
    const struct mks_map_spec *maps = mks_obj_maps(f->obj);
    int32_t share[MKS_MAX_PROG_MAPS];
    f->n_progs = mks_obj_prog_count(f->obj);
    assert_true(f->n_progs <= 8);
    for (uint32_t i = 0; i < f->n_progs; i++) {
        const struct mks_obj_prog *p = mks_obj_prog(f->obj, i);
        struct mks_verify_opts vo = {.sz = sizeof(vo),
                                     .prog_type = p->prog_type,
                                     .abi_version = p->abi_version,
                                     .hook = p->hook,
                                     .maps = maps,
                                     .n_maps = n_maps};
        struct mks_verify_result vr;
        if (mks_verify(p->insns, p->n_insns, &vo, &vr, err, sizeof(err)))
            fail_msg("verify %s: %s", p->name, err);
        struct mks_prog_spec s = {.sz = sizeof(s),
                                  .name = p->name,
                                  .prog_type = p->prog_type,
                                  .abi_version = p->abi_version,
                                  .insns = p->insns,
                                  .n_insns = p->n_insns,
                                  .n_maps = n_maps,
                                  .maps = maps,
                                  .share_maps = i ? share : NULL,
                                  .cost = vr.cost};
        assert_int_equal(mks_ctl_prog_load(f->ctl, &s, &f->prog_id[i]), 0);
        if (i == 0)
            for (uint32_t m = 0; m < n_maps; m++) {
                uint32_t id;
                assert_int_equal(mks_ctl_prog_map(f->ctl, f->prog_id[0], m, &id), 0);
                share[m] = (int32_t)id;
            }
    }
}

static void attach(struct fx *f, const char *prog_name)
{
    for (uint32_t i = 0; i < f->n_progs; i++) {
        const struct mks_obj_prog *p = mks_obj_prog(f->obj, i);
        if (!prog_name || !strcmp(p->name, prog_name))
            assert_int_equal(
                mks_ctl_attach(f->ctl, f->prog_id[i], (enum mks_hook_event)p->hook, -1, NULL), 0);
    }
}

static void body_nop(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    (void)t;
    if (br_event_count(rt, 1) + 1 == br_event_target(rt, 1))
        br_finish(rt, 0);
}

/* Six qkv_proj tiles made ready by one event on a single worker; returns the
 * order they ran in. */
static void run_tiles(struct fx *f, uint32_t order[6])
{
    struct br_opts o = {.rank = 0,
                        .n_ranks = 1,
                        .n_workers = 1,
                        .n_events = 2,
                        .n_classes = 4,
                        .max_tasks = 16,
                        .order_cap = 16,
                        .queue_pressure = 4,
                        .hooks = f->hooks};
    struct br_rt *rt;
    assert_int_equal(br_create(&o, &rt), 0);
    br_graph_begin(rt);
    for (uint32_t i = 0; i < 6; i++) {
        struct br_task *t = br_task_add(rt);
        t->cls = CLASS_QKV;
        t->gen = 1;
        t->tile_x = i;
        t->wait_ev = 0;
        t->trig_ev = 1;
        t->body = body_nop;
        br_event_expect(rt, 1, 1);
    }
    br_graph_commit(rt);
    /* all six are assigned before the worker starts: the order is the
     * scheduler's alone */
    br_event_fire(rt, 0);
    assert_int_equal(br_start(rt), 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    br_stop(rt);
    const struct br_order *ord;
    assert_int_equal(br_order_get(rt, &ord), 6);
    for (uint32_t i = 0; i < 6; i++)
        order[i] = ord[i].tile_x;
    br_destroy(rt);
}

static void test_no_program_keeps_creation_order(void **state)
{
    struct fx *f = *state;
    uint32_t ord[6];
    run_tiles(f, ord);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(ord[i], i);
}

static void test_ready_hint_moves_tile_first(void **state)
{
    struct fx *f = *state;
    load_obj(f, "prio_tile.bpf.o");
    attach(f, "prio_ready");
    uint32_t ord[6], want[6] = {3, 0, 1, 2, 4, 5};
    run_tiles(f, ord);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(ord[i], want[i]);
}

static void test_assign_hint_jumps_queue(void **state)
{
    struct fx *f = *state;
    load_obj(f, "prio_tile.bpf.o");
    attach(f, "prio_assign");
    uint32_t ord[6], want[6] = {4, 0, 1, 2, 3, 5};
    run_tiles(f, ord);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(ord[i], want[i]);
}

static int sum_by_index(const void *key, const void *value, void *arg)
{
    uint64_t *v = arg;
    uint32_t k = *(const uint32_t *)key;
    if (k < 16)
        v[k] += *(const uint64_t *)value;
    return 0;
}

static void test_observers_see_every_transition(void **state)
{
    struct fx *f = *state;
    load_obj(f, "ev_count.bpf.o");
    attach(f, NULL);
    uint32_t ord[6];
    run_tiles(f, ord);
    struct mks_epoch_snapshot *snap = NULL;
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &snap), 0);
    uint32_t map_id, idx = UINT32_MAX;
    for (uint32_t m = 0; m < mks_obj_map_count(f->obj); m++)
        if (!strcmp(mks_obj_maps(f->obj)[m].name, "ev_count"))
            idx = m;
    assert_true(idx != UINT32_MAX);
    assert_int_equal(mks_ctl_prog_map(f->ctl, f->prog_id[0], idx, &map_id), 0);
    uint64_t v[16] = {0};
    assert_int_equal(mks_epoch_snapshot_map(snap, map_id, sum_by_index, v), 0);
    assert_int_equal(v[MKS_EV_TASK_READY], 6);
    assert_int_equal(v[MKS_EV_TASK_ASSIGN], 6);
    assert_int_equal(v[MKS_EV_TASK_START], 6);
    assert_int_equal(v[MKS_EV_TASK_END], 6);
    assert_int_equal(v[MKS_EV_DEP_RELEASE], 6);
    /* six tasks onto one queue cross the depth of 4 once */
    assert_int_equal(v[MKS_EV_QUEUE_PRESSURE], 1);
    struct mks_coverage cov;
    assert_int_equal(mks_epoch_snapshot_coverage(snap, MKS_EV_TASK_END, &cov), 0);
    assert_int_equal(cov.eligible, 6);
    assert_int_equal(cov.ran, 6);
    mks_epoch_snapshot_free(snap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_program_keeps_creation_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ready_hint_moves_tile_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_assign_hint_jumps_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_observers_see_every_transition, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
