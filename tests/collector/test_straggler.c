/*
 * Stragglers on synthetic summaries: four ranks in an all-reduce (every rank
 * waits on every other twice a step), a hundred steps, and from step 20 on
 * rank 1 late in every step, by 150 us an all-reduce (a quarter of a step).  No step is slower than its neighbours, so only the
 * comparison of ranks finds it: the diagnosis must name a straggler at rank
 * 1 since about step 20, its cause against its peers (a slow task class,
 * the whole rank slower, a held queue), and the other ranks stalled on it.
 * A clean run names nothing.  Host CPU contention (the workers' wait for
 * a CPU, as agents of a CPU backend measure it): a rank held up by a burst
 * of the host's load (its queue held while its workers waited for a core)
 * is no straggler and names no cause, and such a lag before a real fault
 * does not join it.  A fault of a few steps on the straggler, far larger than
 * its lateness, is a group of its own and named first.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "diag_fill.h"
#include "diagnose.h"
#include "mkscope/commid.h"
#include "mkscope/store.h"

#define R     4
#define STEPS 100
#define FROM  20
#define NW    4
#define US    1000ull
#define OPS   2 /* all-reduces a step */
#define LATE  (150 * US) /* the straggler's lateness an all-reduce */

enum fault { NONE, SLOW_CLASS, SLOW_RANK, HELD_QUEUE };
enum { C_NORM, C_GEMM, C_ATTN, C_SEND, C_REDUCE, N_CLS };
static const char *const names[] = {"norm", "gemm", "attn", "send", "reduce"};
/* tasks a step and their usual run time */
static const uint64_t tasks[] = {4, 16, 16, 6, 2}, run_us[] = {5, 20, 30, 6, 3};

static uint64_t jitter(uint32_t r, uint32_t s, uint32_t k)
{
    uint64_t x = (uint64_t)r * 1000003u + s * 7919u + k * 104729u + 12345u;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    return x % (3 * US);
}

static void put_hist(uint64_t *b, uint64_t v, uint64_t n)
{
    int k = 0;
    while (k < 63 && (1ull << k) <= v)
        k++;
    b[k] += n;
}

/* How much later than its peers rank r's contribution is ready for each
 * all-reduce of step s. */
static uint64_t g_late = LATE;
static uint32_t g_from = FROM, g_until = UINT32_MAX;
/* Peers' waits on rank 1 begun this much early in steps
 * g_early_from..+EARLY_STEPS-1 (they were ahead, rank 1 was not late): its
 * blame stands out, the step's time does not grow. */
#define EARLY_STEPS 5
static uint64_t g_early;
static uint32_t g_early_from = UINT32_MAX;

/* The CPU wait: measured when g_cw (CW_BASE over CW_RUNS runs a step on
 * every rank); rank 1 held up by a burst of the host's load in steps
 * g_lag_from..+LAG_STEPS-1 (late by LAG_LATE an all-reduce, its gemm queue
 * held, its workers waiting for a CPU that long each at as many runs). */
#define CW_BASE   (200 * US)
#define CW_RUNS   100
#define LAG_STEPS 5
#define LAG_LATE  (2000 * US)
static bool g_cw;
static uint32_t g_lag_from = UINT32_MAX;

static bool lagged(uint32_t r, uint32_t s)
{
    return r == 1 && s >= g_lag_from && s < g_lag_from + LAG_STEPS;
}

/* A fault of a few steps on top of the straggler's lateness: in steps
 * g_burst_from..+BURST_STEPS-1 rank 1's slow class is late by BURST_LATE
 * more an all-reduce. */
#define BURST_STEPS 5
#define BURST_LATE  (5000 * US)
static uint32_t g_burst_from = UINT32_MAX;

static uint64_t late(enum fault f, uint32_t r, uint32_t s)
{
    if (lagged(r, s))
        return LAG_LATE;
    if (f == NONE || r != 1 || s < g_from || s > g_until)
        return 0;
    return g_late + (s >= g_burst_from && s < g_burst_from + BURST_STEPS ? BURST_LATE : 0);
}

static void make(struct fa_summary *sum, uint32_t r, uint32_t s, enum fault f)
{
    memset(sum, 0, sizeof(*sum));
    const bool hit = f != NONE && r == 1 && s >= g_from && s <= g_until && !lagged(r, s);
    const uint64_t base = 1000000000ull + s * 2000 * US;
    sum->epoch = s;
    for (uint32_t c = 0; c < N_CLS; c++) {
        struct fa_taskstat *t = &sum->ts[sum->n_ts++];
        uint64_t each = run_us[c] * US + jitter(r, s, c) / 10;
        /* the slow class: 8 tasks an all-reduce on 4 workers, each LATE / 2
         * longer; the slow rank: each compute class twice as long and more */
        if (hit && f == SLOW_CLASS && c == C_ATTN)
            each += late(f, r, s) / 2;
        if (hit && f == SLOW_RANK && c != C_SEND && c != C_REDUCE)
            each += each + 15 * US;
        if (c == C_REDUCE) /* a reduce's run holds its waits */
            each += 50 * US;
        t->cls = c, t->step = s, t->count = tasks[c], t->sum_run = tasks[c] * each;
        put_hist(t->run_b, each, tasks[c]);
        uint64_t q = 8 * US + jitter(r, s, c + 10) / 5;
        t->queue_sum = tasks[c] * q;
        put_hist(t->queue_b, q, tasks[c]);
        if (((hit && f == HELD_QUEUE) || lagged(r, s)) && c == C_GEMM) {
            /* one worker's four gemm tasks held LATE each, a second time
             * in the step's other operator */
            uint64_t held = late(f, r, s);
            t->queue_sum += 2 * 4 * held;
            put_hist(t->queue_b, q, -4ull);
            put_hist(t->queue_b, q + held, 4);
        }
    }
    uint64_t slowest = 0;
    for (uint32_t p = 0; p < R; p++)
        if (late(f, p, s) > slowest)
            slowest = late(f, p, s);
    sum->steps[0].step = s;
    sum->steps[0].t_begin = base;
    sum->steps[0].t_end = base + 1000 * US + OPS * slowest + jitter(r, s, 99);
    sum->steps[0].cpu_wait_measured = g_cw;
    sum->steps[0].cpu_wait =
        g_cw ? CW_BASE + jitter(r, s, 98) / 10 + (lagged(r, s) ? NW * OPS * LAG_LATE : 0) : 0;
    sum->steps[0].cpu_runs = g_cw ? CW_RUNS : 0;
    sum->n_steps = 1;
    for (uint32_t k = 0; k < OPS; k++) {
        uint64_t tk = base + 300 * US + k * (400 * US + slowest);
        for (uint32_t p = 0; p < R; p++) {
            if (p == r)
                continue;
            uint64_t mine = tk + late(f, r, s), theirs = tk + late(f, p, s);
            struct fa_wait *w = &sum->waits[sum->n_waits++];
            w->comm_gen = mks_commid_for_transfer(1, p, r, s, k, 0);
            w->peer = p, w->waiter_class = C_REDUCE, w->step = s, w->worker = 1;
            w->t_begin = mine;
            w->t_end = (theirs > mine ? theirs : mine) + 2 * US + jitter(r, s, 20 + p + k * R);
            if (p == 1 && s >= g_early_from && s < g_early_from + EARLY_STEPS)
                w->t_begin -= g_early;
            struct fa_release *rl = &sum->rels[sum->n_rels++];
            rl->comm_gen = mks_commid_for_transfer(1, r, p, s, k, 0);
            rl->consumer = p, rl->cls = C_SEND, rl->step = s, rl->worker = 2;
            rl->t_start = rl->t_comm_begin = mine - 6 * US;
            rl->t_comm_end = mine - 1 * US;
            rl->t_release = mine;
        }
    }
    sum->cov_eligible = sum->cov_ran = 1000;
}

static struct mks_store *fill(enum fault f)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    static const int comm[] = {0, 0, 0, 1, 1};
    for (uint32_t r = 0; r < R; r++) {
        if (df_register(st, "strag", r, R, NW, names, comm, N_CLS, err, sizeof(err)))
            fail_msg("register: %s", err);
        for (uint32_t s = 0; s < STEPS; s++) {
            struct fa_summary *sum = calloc(1, sizeof(*sum));
            make(sum, r, s, f);
            if (df_summary(st, "strag", r, s + 1, sum, err, sizeof(err)))
                fail_msg("ingest: %s", err);
            free(sum);
        }
    }
    return st;
}

static json_t *diagnose(struct mks_store *st, uint32_t last)
{
    json_t *out = NULL;
    char err[256];
    struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1, .last = last};
    if (mks_diagnose(st, "strag", &o, &out, err, sizeof(err)))
        fail_msg("diagnose: %s", err);
    return out;
}

static const char *js(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

/* The first group must be the straggler: cause at rank 1 (class cls or
 * none), since about FROM, every other rank stalled on it. */
static void expect_straggler(enum fault f, const char *cause, const char *cls)
{
    struct mks_store *st = fill(f);
    json_t *d = diagnose(st, 0);
    json_t *g = json_array_get(json_object_get(d, "groups"), 0);
    if (!g || !json_is_true(json_object_get(g, "straggler")) || strcmp(js(g, "cause"), cause))
        fail_msg("want a %s straggler: %s", cause, json_dumps(d, 0));
    json_t *root = json_object_get(g, "root");
    assert_int_equal(json_integer_value(json_object_get(root, "rank")), 1);
    if (cls)
        assert_string_equal(js(root, "task_class"), cls);
    else
        assert_true(json_is_null(json_object_get(root, "task_class")));
    json_int_t since = json_integer_value(json_object_get(g, "since_step"));
    if (since < (json_int_t)g_from - 2 || since > (json_int_t)g_from + 2)
        fail_msg("since step %lld, want about %u", (long long)since, g_from);
    assert_int_equal(json_integer_value(json_object_get(g, "until_step")), STEPS - 1);
    /* what its peers lose: the two all-reduces' lateness */
    json_int_t ex = json_integer_value(json_object_get(g, "excess_ns"));
    if (ex < (json_int_t)(3 * g_late / 2) || ex > (json_int_t)(5 * g_late / 2))
        fail_msg("excess %lld", (long long)ex);
    json_t *stalled = json_object_get(g, "stalled");
    assert_int_equal(json_array_size(stalled), R - 1);
    /* the evidence: against the peers, and a share and runner-up */
    json_t *ev = json_object_get(g, "evidence");
    assert_non_null(strstr(js(ev, "reference"), "peers"));
    assert_true(json_real_value(json_object_get(g, "share")) > 0.2);
    /* no step stands out from its neighbours: the straggler is all there is */
    for (size_t i = 1; i < json_array_size(json_object_get(d, "groups")); i++) {
        json_t *o = json_array_get(json_object_get(d, "groups"), i);
        if (strcmp(js(o, "cause"), "undecided") && json_array_size(json_object_get(o, "steps")) >= 3)
            fail_msg("a second group names a cause: %s", json_dumps(o, 0));
    }
    json_decref(d);
    /* the last 30 steps alone: straggler all along */
    d = diagnose(st, 30);
    g = json_array_get(json_object_get(d, "groups"), 0);
    if (!g || strcmp(js(g, "cause"), cause))
        fail_msg("--last 30: %s", json_dumps(d, 0));
    assert_int_equal(json_integer_value(json_object_get(g, "since_step")), STEPS - 30);
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), 30);
    json_decref(d);
    mks_store_close(st);
}

static void test_slow_class(void **s)
{
    (void)s;
    expect_straggler(SLOW_CLASS, "slow_task", "attn");
}

static void test_slow_rank(void **s)
{
    (void)s;
    expect_straggler(SLOW_RANK, "slow_rank", NULL);
}

static void test_held_queue(void **s)
{
    (void)s;
    expect_straggler(HELD_QUEUE, "local_imbalance", "gemm");
}

/* Late from the run's third step by 50 us an all-reduce: a blame of 100 us a
 * step, below the noise threshold (15% of the 1.1 ms step) although in every
 * step: a steady straggler, named all the same. */
static void test_steady_below_threshold(void **s)
{
    (void)s;
    g_late = 50 * US, g_from = 2;
    expect_straggler(SLOW_CLASS, "slow_task", "attn");
    g_late = LATE, g_from = FROM;
}

/* The steady straggler above, and in steps 50..54 its slow class 5 ms
 * later still: the five steps are a group of their own, named first with
 * their cause and class (not taken into the straggler's run, whose cause is
 * judged over all its steps); the straggler's run comes after them. */
static void test_fault_inside_straggler(void **s)
{
    (void)s;
    g_late = 50 * US, g_from = 2, g_burst_from = 50;
    struct mks_store *st = fill(SLOW_CLASS);
    json_t *d = diagnose(st, 0);
    json_t *groups = json_object_get(d, "groups");
    json_t *g = json_array_get(groups, 0);
    if (!g || json_is_true(json_object_get(g, "straggler")) || strcmp(js(g, "cause"), "slow_task"))
        fail_msg("want the five slow steps first: %s", json_dumps(d, 0));
    json_t *root = json_object_get(g, "root");
    assert_int_equal(json_integer_value(json_object_get(root, "rank")), 1);
    assert_string_equal(js(root, "task_class"), "attn");
    json_t *st_ = json_object_get(g, "steps");
    assert_int_equal(json_integer_value(json_array_get(st_, 0)), 50);
    assert_int_equal(json_array_size(st_), BURST_STEPS);
    bool straggler = false;
    for (size_t i = 1; i < json_array_size(groups); i++)
        straggler |= json_is_true(json_object_get(json_array_get(groups, i), "straggler"));
    if (!straggler)
        fail_msg("the straggler's run is gone: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
}

static int burst_reset(void **s)
{
    (void)s;
    g_late = LATE, g_from = FROM, g_until = UINT32_MAX, g_burst_from = UINT32_MAX;
    g_early = 0, g_early_from = UINT32_MAX;
    return 0;
}

/* Rank 1's attn late by 90 us an all-reduce in steps 50..54 only: the
 * steps grow by 180 us, under the slow threshold (a fifth of the 1 ms
 * step), but its peers wait that much more on it than in the steps around:
 * slow by the blame, the rank's own (the step shows what they waited),
 * named with its cause. */
static void test_blame_shown(void **s)
{
    (void)s;
    g_late = 90 * US, g_from = 50, g_until = 54;
    struct mks_store *st = fill(SLOW_CLASS);
    json_t *d = diagnose(st, 0);
    json_t *g = json_array_get(json_object_get(d, "groups"), 0);
    if (!g || strcmp(js(g, "cause"), "slow_task"))
        fail_msg("want slow_task at rank 1 in steps 50..54: %s", json_dumps(d, 0));
    json_t *root = json_object_get(g, "root");
    assert_int_equal(json_integer_value(json_object_get(root, "rank")), 1);
    assert_string_equal(js(root, "task_class"), "attn");
    json_int_t first = json_integer_value(json_array_get(json_object_get(g, "steps"), 0));
    assert_true(first >= 50 && first <= 54);
    json_decref(d);
    mks_store_close(st);
}

/* The same blame in steps 50..54, from the peers' waits begun 180 us
 * early, the steps no longer: nothing waited on rank 1, no cause named. */
static void test_blame_not_shown(void **s)
{
    (void)s;
    g_early = 90 * US * OPS, g_early_from = 50;
    struct mks_store *st = fill(NONE);
    json_t *d = diagnose(st, 0);
    json_t *groups = json_object_get(d, "groups");
    for (size_t i = 0; i < json_array_size(groups); i++) {
        json_t *g = json_array_get(groups, i);
        if (strcmp(js(g, "cause"), "undecided") && json_array_size(json_object_get(g, "steps")) >= 3)
            fail_msg("a cause named for early peers: %s", json_dumps(g, 0));
    }
    json_decref(d);
    mks_store_close(st);
}

static int cw_reset(void **s)
{
    (void)s;
    g_cw = false, g_lag_from = UINT32_MAX, g_from = FROM, g_until = UINT32_MAX, g_late = LATE;
    return 0;
}

/* Rank 1 held up by a burst of the host's load in steps 20..24, its queue
 * held while its workers waited for a CPU: no cause named.  Without the
 * measure the burst reads as a held queue. */
static void test_contention_lag(void **s)
{
    (void)s;
    g_cw = true, g_lag_from = FROM, g_from = STEPS;
    struct mks_store *st = fill(NONE);
    json_t *d = diagnose(st, 0);
    json_t *groups = json_object_get(d, "groups");
    assert_int_equal(json_integer_value(json_object_get(d, "stragglers")), 0);
    for (size_t i = 0; i < json_array_size(groups); i++)
        if (strcmp(js(json_array_get(groups, i), "cause"), "undecided"))
            fail_msg("a loaded host named a cause: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
    g_cw = false;
    st = fill(NONE);
    d = diagnose(st, 0);
    json_t *g = json_array_get(json_object_get(d, "groups"), 0);
    if (!g || strcmp(js(g, "cause"), "local_imbalance") ||
        json_array_size(json_object_get(g, "steps")) < 3)
        fail_msg("unmeasured, the lag reads as a held queue: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
}

/* The host's lag of rank 1 in steps 14..18, then its slow class from step
 * 20 on: the straggler is the fault's, since step 20, with its cause; the
 * lag before it is neither joined to it nor a cause. */
static void test_contention_then_fault(void **s)
{
    (void)s;
    g_cw = true, g_lag_from = FROM - LAG_STEPS - 1;
    expect_straggler(SLOW_CLASS, "slow_task", "attn");
}

/* Rank 1's attn late by 5 ms an all-reduce in steps 50..58, and in 52..56
 * the host's lag on top (its workers waiting for a CPU): the steps a loaded
 * host explains say nothing of the fault and do not split its other steps
 * (50 and 57, 58 here, three steps or more apart) into groups too short to
 * show; one group from 50 to 58, named. */
static void test_contention_inside_fault(void **s)
{
    (void)s;
    g_cw = true, g_lag_from = 52, g_late = 5000 * US, g_from = 50, g_until = 58;
    struct mks_store *st = fill(SLOW_CLASS);
    json_t *d = diagnose(st, 0);
    json_t *groups = json_object_get(d, "groups");
    bool found = false;
    for (size_t i = 0; i < json_array_size(groups); i++) {
        json_t *g = json_array_get(groups, i);
        if (!strcmp(js(g, "cause"), "slow_task")) {
            json_t *root = json_object_get(g, "root");
            assert_int_equal(json_integer_value(json_object_get(root, "rank")), 1);
            json_t *gs = json_object_get(g, "steps");
            size_t n = json_array_size(gs);
            if (n < 3 || json_integer_value(json_array_get(gs, 0)) != 50 ||
                json_integer_value(json_array_get(gs, n - 1)) != 58) {
                for (size_t j = 0; j < json_array_size(groups); j++) {
                    json_t *o = json_array_get(groups, j);
                    char *st_ = json_dumps(json_object_get(o, "steps"), 0);
                    fprintf(stderr, "group %s steps %s: %s\n", js(o, "cause"), st_, js(o, "reason"));
                    free(st_);
                }
                fail_msg("the fault's steps split");
            }
            found = true;
        }
    }
    if (!found)
        fail_msg("no slow_task group: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
}

static void test_clean(void **s)
{
    (void)s;
    struct mks_store *st = fill(NONE);
    json_t *d = diagnose(st, 0);
    if (json_array_size(json_object_get(d, "groups")))
        fail_msg("clean run: %s", json_dumps(d, 0));
    assert_int_equal(json_integer_value(json_object_get(d, "stragglers")), 0);
    json_decref(d);
    mks_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_class),
        cmocka_unit_test(test_slow_rank),
        cmocka_unit_test(test_held_queue),
        cmocka_unit_test(test_steady_below_threshold),
        cmocka_unit_test_teardown(test_fault_inside_straggler, burst_reset),
        cmocka_unit_test_teardown(test_blame_shown, burst_reset),
        cmocka_unit_test_teardown(test_blame_not_shown, burst_reset),
        cmocka_unit_test(test_clean),
        cmocka_unit_test_teardown(test_contention_lag, cw_reset),
        cmocka_unit_test_teardown(test_contention_then_fault, cw_reset),
        cmocka_unit_test_teardown(test_contention_inside_fault, cw_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
