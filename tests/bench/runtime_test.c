/*
 * The bench runtime on its own: event counters that are never reset and fire
 * at cumulative targets, per-worker queues and their balance, dynamic tasks
 * added while the graph runs, and the scheduler's fault plans (a passed-over
 * tile, an oversubscribed queue).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench_int.h"
#include "runtime/rt.h"

#define MAXT 64

struct ctx {
    struct br_rt *rt;
    _Atomic uint32_t ran;
    uint32_t finish_after;
    uint32_t workers_seen[8];
    _Atomic uint32_t n_dyn;
    uint64_t started[8]; /* by tile_x */
};

static void body_count(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct ctx *c = br_user(rt);
    c->workers_seen[w]++;
    if (t->tile_x < 8)
        c->started[t->tile_x] = bb_now_ns();
    if (atomic_fetch_add(&c->ran, 1) + 1 == c->finish_after)
        br_finish(rt, 0);
}

static struct br_rt *make(struct ctx *c, uint32_t workers, uint32_t events, uint32_t order_cap)
{
    struct br_opts o = {.rank = 0,
                        .n_ranks = 1,
                        .n_workers = workers,
                        .n_events = events,
                        .n_classes = 4,
                        .max_tasks = MAXT,
                        .queue_pressure = 4,
                        .order_cap = order_cap,
                        .user = c};
    struct br_rt *rt = NULL;
    assert_int_equal(br_create(&o, &rt), 0);
    c->rt = rt;
    return rt;
}

static struct br_task *add(struct br_rt *rt, uint16_t cls, uint32_t tile, uint32_t wait,
                           uint32_t trig)
{
    struct br_task *t = br_task_add(rt);
    assert_non_null(t);
    t->cls = cls;
    t->tile_x = tile;
    t->wait_ev = wait;
    t->trig_ev = trig;
    t->body = body_count;
    if (trig != BR_EV_NONE)
        br_event_expect(rt, trig, 1);
    return t;
}

static void test_create_rejects_zero_sizes(void **state)
{
    (void)state;
    struct br_opts o = {.n_workers = 0, .n_events = 1, .n_classes = 1, .max_tasks = 1};
    struct br_rt *rt = NULL;
    assert_int_equal(br_create(&o, &rt), -EINVAL);
    assert_null(rt);
    br_destroy(NULL);
}

/* Three iterations of a two-stage graph on the same events: the counters keep
 * growing (never reset) and the stage-2 tasks run only once all stage-1 tasks
 * of their iteration triggered. */
static void test_counters_never_reset(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 2, 3, 64);
    assert_int_equal(br_start(rt), 0);
    for (uint32_t it = 1; it <= 3; it++) {
        br_graph_begin(rt);
        for (uint32_t i = 0; i < 4; i++)
            add(rt, 0, i, 0, 1);
        add(rt, 1, 0, 1, 2);
        add(rt, 1, 1, 1, 2);
        br_graph_commit(rt);
        br_event_fire(rt, 0);
        /* the next iteration's graph may be built once this one is done */
        uint64_t deadline = bb_now_ns() + 5000000000ull;
        while (br_event_count(rt, 2) < 2 * it && bb_now_ns() < deadline)
            bb_sleep_ns(100000);
        assert_int_equal(br_event_count(rt, 2), 2 * it);
        assert_int_equal(br_event_target(rt, 2), 2 * it);
        assert_int_equal(br_event_count(rt, 1), 4 * it);
        assert_int_equal(br_event_target(rt, 1), 4 * it);
    }
    br_stop(rt);
    assert_int_equal(br_class_count(rt, 0), 12);
    assert_int_equal(br_class_count(rt, 1), 6);
    /* stage 2 never started before all four stage-1 tasks of its iteration */
    const struct br_order *ord;
    uint32_t n = br_order_get(rt, &ord);
    assert_int_equal(n, 18);
    for (uint32_t it = 0; it < 3; it++) {
        uint32_t stage1 = 0;
        for (uint32_t k = 0; k < 6; k++) {
            const struct br_order *o = &ord[it * 6 + k];
            if (o->cls == 0)
                stage1++;
            else
                assert_int_equal(stage1, 4);
        }
    }
    br_destroy(rt);
}

/* Eight ready tasks over two idle workers: four each, in FIFO order per queue. */
static void test_queues_balance_and_order(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 2, 2, 64);
    c.finish_after = 8;
    br_graph_begin(rt);
    for (uint32_t i = 0; i < 8; i++)
        add(rt, 0, i, 0, 1);
    br_graph_commit(rt);
    /* assign before the workers run, so the queues fill deterministically */
    br_event_fire(rt, 0);
    assert_int_equal(br_start(rt), 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    br_stop(rt);
    assert_int_equal(c.workers_seen[0], 4);
    assert_int_equal(c.workers_seen[1], 4);
    const struct br_order *ord;
    uint32_t n = br_order_get(rt, &ord);
    assert_int_equal(n, 8);
    uint32_t last[2] = {0, 0};
    int seen[2] = {0, 0};
    for (uint32_t k = 0; k < n; k++) {
        uint32_t w = ord[k].worker;
        if (seen[w])
            assert_true(ord[k].tile_x > last[w]);
        seen[w] = 1;
        last[w] = ord[k].tile_x;
    }
    br_destroy(rt);
}

static void body_spawn(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct ctx *c = br_user(rt);
    (void)w;
    /* like the MoE router: decide the count from data, then create them */
    uint32_t n = 3 + t->tile_x;
    br_event_expect(rt, 2, n);
    for (uint32_t i = 0; i < n; i++) {
        struct br_task p = {0};
        p.cls = 2;
        p.tile_x = i;
        p.wait_ev = 1;
        p.trig_ev = 2;
        p.force_worker = -1;
        p.body = body_count;
        assert_non_null(br_task_add_live(rt, &p));
        atomic_fetch_add(&c->n_dyn, 1);
    }
}

/* A task creates tasks at run time; the join task waits on their event whose
 * target was set from the count created. */
static void test_dynamic_tasks(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 2, 4, 64);
    c.finish_after = 4 + 1; /* 4 dynamic + the join */
    br_graph_begin(rt);
    struct br_task *s = add(rt, 1, 1, 0, 1);
    s->body = body_spawn;
    add(rt, 3, 0, 2, 3); /* join */
    br_graph_commit(rt);
    assert_int_equal(br_start(rt), 0);
    br_event_fire(rt, 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    br_stop(rt);
    assert_int_equal(atomic_load(&c.n_dyn), 4);
    assert_int_equal(br_class_count(rt, 2), 4);
    assert_int_equal(br_class_count(rt, 3), 1);
    assert_int_equal(br_event_count(rt, 2), 4);
    const struct br_order *ord;
    uint32_t n = br_order_get(rt, &ord);
    assert_int_equal(n, 6);
    assert_int_equal(ord[n - 1].cls, 3); /* the join ran last */
    br_destroy(rt);
}

/* tile-starve: the scheduler passes one ready tile over until its time is up,
 * while the others run; it still runs, last. */
static void test_starved_tile_passed_over(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 2, 2, 64);
    c.finish_after = 4;
    br_graph_begin(rt);
    for (uint32_t i = 0; i < 4; i++) {
        struct br_task *t = add(rt, 0, i, 0, 1);
        if (i == 1)
            t->starve_ns = 20 * 1000 * 1000;
    }
    br_graph_commit(rt);
    assert_int_equal(br_start(rt), 0);
    uint64_t t0 = bb_now_ns();
    br_event_fire(rt, 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    uint64_t dt = bb_now_ns() - t0;
    br_stop(rt);
    assert_true(dt >= 20 * 1000 * 1000);
    assert_true(br_passovers(rt) >= 1);
    const struct br_order *ord;
    uint32_t n = br_order_get(rt, &ord);
    assert_int_equal(n, 4);
    assert_int_equal(ord[3].tile_x, 1);
    br_destroy(rt);
}

/* queue-oversub: every task of the plan lands on one worker's queue. */
static void test_oversubscribed_queue(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 3, 2, 64);
    c.finish_after = 6;
    br_graph_begin(rt);
    for (uint32_t i = 0; i < 6; i++) {
        struct br_task *t = add(rt, 0, i, 0, 1);
        t->force_worker = 2;
    }
    br_graph_commit(rt);
    assert_int_equal(br_start(rt), 0);
    br_event_fire(rt, 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    br_stop(rt);
    assert_int_equal(c.workers_seen[0], 0);
    assert_int_equal(c.workers_seen[1], 0);
    assert_int_equal(c.workers_seen[2], 6);
    br_destroy(rt);
}

/* notify-delay: a task's release is postponed while its worker goes on with
 * the next task; the dependent starts only after the postponed release. */
static void test_postponed_release_frees_worker(void **state)
{
    (void)state;
    struct ctx c = {0};
    struct br_rt *rt = make(&c, 1, 3, 64);
    c.finish_after = 3;
    const uint64_t delay = 50 * 1000 * 1000;
    br_graph_begin(rt);
    for (uint32_t i = 0; i < 2; i++)
        add(rt, 0, i, 0, 1)->notify_delay_ns = delay;
    add(rt, 1, 2, 1, 2);
    br_graph_commit(rt);
    br_event_fire(rt, 0);
    uint64_t t0 = bb_now_ns();
    assert_int_equal(br_start(rt), 0);
    assert_int_equal(br_wait_finish(rt, NULL), 0);
    br_stop(rt);
    /* the one worker did not sit out the first delay before the second task */
    assert_true(c.started[1] - c.started[0] < delay);
    /* the dependent waited for the releases */
    assert_true(c.started[2] - t0 >= delay);
    assert_int_equal(br_event_count(rt, 1), 2);
    br_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_zero_sizes),
        cmocka_unit_test(test_counters_never_reset),
        cmocka_unit_test(test_queues_balance_and_order),
        cmocka_unit_test(test_dynamic_tasks),
        cmocka_unit_test(test_starved_tile_passed_over),
        cmocka_unit_test(test_oversubscribed_queue),
        cmocka_unit_test(test_postponed_release_frees_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
