/*
 * Diagnosis on synthetic summaries: three ranks in a chain (rank 0 waits on
 * rank 1, rank 1 on rank 2), twenty steps, and one fault injected into the
 * summaries of rank 2 for steps 10..12.  For each cause the answer must
 * name it at rank 2 with the right task class, and ranks 0 and 1 must show
 * remote_stall links on the way.  Every rank also reports the agent's
 * local release record of gemm (the task's end and its release), which a
 * local notification delay on rank 2 stretches.  A clean run names nothing; a rank with
 * too little coverage makes the answer undecided with the reason.  With many
 * workers (a GPU's) and one task late, in its run or in its queue, the
 * diagnosis names it from the longest task, which it reads off the
 * histograms when, as from real agents, the summaries carry no maximum.
 */
#include <errno.h>
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

#define R      3
#define STEPS  20
#define F_LO   10
#define F_HI   12
#define US     1000ull
#define FAULT  (400 * US)
#define NW     4

enum fault {
    NONE,
    SLOW_TASK,
    IMBALANCE,
    IMBALANCE_QWI,
    NOTIFY,
    TRANSFER,
    LOW_COVERAGE,
    NOTIFY_LOCAL,
    SLOW_ONE,      /* one attn task runs FAULT longer */
    IMBALANCE_ONE, /* one gemm task waits FAULT longer in its queue */
};
/* Steps reported without times, only generation advances (as an agent
 * without step monitors does). */
static bool gens_only;
/* Steps reported with their times and generation advances too (as the CPU
 * backend's agents send); the advances of rank 1 put its steps 5..7 2 ms
 * longer than their times say, which a loader that read them would see. */
static bool gens_too;
/* Transfers between two ranks a step (as each all-reduce of each layer);
 * a fault on them is spread evenly over all. */
static uint32_t spread = 1;
/* SLOW_ONE: the one task is late by FAULT / one_share (the step still by
 * FAULT, as when the class is late in several operators); extra_notify:
 * rank 2's releases come that much later too under SLOW_ONE. */
static uint64_t one_share = 1, extra_notify;
/* Host CPU contention (the workers' wait for a CPU, as the agent of a CPU
 * backend measures it): cw_base over CW_RUNS runs on a CPU on every rank
 * and step when cw_on, and cw_extra more over cw_runs_extra more runs on
 * rank 2 in the fault's steps (a loaded host's burst: longer waits at as
 * many runs; a fault that sleeps: more runs at the usual wait). */
#define CW_RUNS 100
static bool cw_on;
static uint64_t cw_base, cw_extra, cw_runs_extra;
static const char *const names[] = {"gemm", "attn", "send"};

static uint64_t gen_op(uint32_t producer, uint32_t consumer, uint32_t step, uint32_t op)
{
    return mks_commid_for_transfer(1, producer, consumer, step, op, 0);
}

static uint64_t gen_of(uint32_t producer, uint32_t consumer, uint32_t step)
{
    return gen_op(producer, consumer, step, 0);
}

/* Key of a local release record: comm-ids' kind bits 0, bit 61 set
 * (docs/wire.md, Release). */
static uint64_t local_gen(uint32_t step, uint32_t cls)
{
    return (1ull << 61) | ((uint64_t)step << 8) | cls;
}

static void put_hist(uint64_t *b, uint64_t v, uint64_t n)
{
    int k = 0;
    while (k < 63 && (1ull << k) <= v)
        k++;
    b[k] += n;
}

/* One summary of rank r for step s under fault f. */
static void make(struct fa_summary *sum, uint32_t r, uint32_t s, enum fault f)
{
    memset(sum, 0, sizeof(*sum));
    bool hit = r == 2 && s >= F_LO && s <= F_HI;
    uint64_t base = 1000000000ull + s * 5000 * US;
    /* How much later this rank's work after its remote wait happens: the
     * fault on rank 2 propagates down the chain. */
    bool upstream = s >= F_LO && s <= F_HI && f != NONE && f != LOW_COVERAGE;
    uint64_t prop = upstream ? FAULT : 0;
    sum->epoch = s;
    /* gemm: 40 tasks of 20 us, queued 5 us */
    struct fa_taskstat *t = &sum->ts[sum->n_ts++];
    t->cls = 0, t->step = s, t->count = 40, t->sum_run = 40 * 20 * US, t->run_max = 21 * US;
    put_hist(t->run_b, 20 * US, 40);
    t->queue_sum = 40 * 5 * US;
    put_hist(t->queue_b, 5 * US, 40);
    if (hit && (f == IMBALANCE || f == IMBALANCE_QWI))
        t->queue_sum += NW * FAULT;
    if (hit && f == IMBALANCE_ONE) {
        t->queue_sum += FAULT;
        put_hist(t->queue_b, 5 * US, -1ull); /* one out of the usual bucket */
        put_hist(t->queue_b, 5 * US + FAULT, 1);
    }
    /* attn: 20 tasks of 30 us */
    t = &sum->ts[sum->n_ts++];
    t->cls = 1, t->step = s, t->count = 20, t->sum_run = 20 * 30 * US, t->run_max = 31 * US;
    put_hist(t->run_b, 30 * US, 20);
    t->queue_sum = 20 * 5 * US;
    if (hit && f == SLOW_TASK) {
        t->sum_run += NW * FAULT;
        t->run_max += 100 * US;
    }
    if (hit && f == SLOW_ONE) {
        t->sum_run += FAULT / one_share;
        put_hist(t->run_b, 30 * US, -1ull); /* one out of the usual bucket */
        put_hist(t->run_b, 30 * US + FAULT / one_share, 1);
    }
    /* send: the communication task */
    t = &sum->ts[sum->n_ts++];
    t->cls = 2, t->step = s, t->count = 1, t->sum_run = 6 * US, t->run_max = 6 * US;
    t->queue_sum = 2 * US;
    /* step times: rank 2 is the first producer; each consumer ends a bit
     * after its producer's fault shows up. */
    uint64_t own = (r == 2 && hit && upstream) ? FAULT : 0;
    uint64_t end = base + 1000 * US + (r == 2 ? own : prop) + (2 - r) * 5 * US;
    sum->steps[0].step = s;
    sum->steps[0].t_begin = base;
    sum->steps[0].t_end = end;
    sum->steps[0].queued_while_idle = f == IMBALANCE_QWI ? 10 * US + (hit ? FAULT : 0) : 0;
    sum->steps[0].cpu_wait_measured = cw_on;
    sum->steps[0].cpu_wait = cw_on ? cw_base + (hit ? cw_extra : 0) : 0;
    sum->steps[0].cpu_runs = cw_on ? CW_RUNS + (hit ? cw_runs_extra : 0) : 0;
    sum->n_steps = 1;
    if (gens_only) {
        /* Steps back to back: a step ends where the next begins, so only
         * the generation advance at each step's end is needed; it is
         * labelled with the step it starts (as the runtimes do). */
        uint64_t done = 0;
        for (uint32_t k = F_LO; k <= F_HI && k <= s; k++)
            done += (f != NONE && f != LOW_COVERAGE) ? FAULT : 0;
        sum->steps[0].t_begin = sum->steps[0].t_end = 0;
        sum->gen_step = s + 1;
        sum->t_gen = 1000000000ull + s * 1000 * US + done + (2 - r) * 5 * US;
    }
    if (gens_too) {
        sum->gen_step = s + 1;
        sum->t_gen = sum->steps[0].t_end + (r == 1 && s >= 5 && s <= 7 ? 2000 * US : 0);
    }
    /* remote waits on the next rank, one per transfer, 100 us apart; a
     * share of the delay each */
    for (uint32_t k = 0; r < R - 1 && k < spread; k++) {
        struct fa_wait *w = &sum->waits[sum->n_waits++];
        w->comm_gen = gen_op(r + 1, r, s, k);
        w->peer = r + 1, w->waiter_class = 0, w->step = s, w->worker = 1;
        w->t_begin = base + 300 * US + k * (100 * US + prop / spread);
        w->t_end = w->t_begin + 10 * US + prop / spread;
    }
    /* releases to the previous rank */
    for (uint32_t k = 0; r > 0 && k < spread; k++) {
        struct fa_release *rl = &sum->rels[sum->n_rels++];
        uint64_t shift = r == 2 ? ((hit && (f == SLOW_TASK || f == IMBALANCE || f == IMBALANCE_QWI ||
                                            f == NOTIFY_LOCAL || f == SLOW_ONE ||
                                            f == IMBALANCE_ONE))
                                       ? FAULT
                                       : 0)
                                : prop;
        /* later transfers come later by the delay of the earlier ones */
        uint64_t at = k * (100 * US + (r == 2 ? (hit && f != NONE ? FAULT : 0) : prop) / spread);
        rl->comm_gen = gen_op(r, r - 1, s, k);
        rl->consumer = r - 1, rl->cls = 1, rl->step = s, rl->worker = 2;
        rl->t_ready = base + at + 250 * US + (r == 2 ? 0 : prop / spread);
        rl->t_start = base + at + 255 * US + shift;
        rl->t_end = base + at + 290 * US + shift;
        rl->t_comm_begin = rl->t_end + 2 * US;
        rl->t_comm_end = rl->t_comm_begin + 6 * US + (hit && f == TRANSFER ? FAULT / spread : 0);
        rl->t_release = rl->t_comm_end + 2 * US + (hit && f == NOTIFY ? FAULT / spread : 0) +
                        (hit && f == SLOW_ONE ? extra_notify : 0);
    }
    /* gemm's local release: 3 us after the task's end, the fault's time
     * later on rank 2 under NOTIFY_LOCAL (attn, and the send, wait for it) */
    struct fa_release *lr = &sum->rels[sum->n_rels++];
    lr->comm_gen = local_gen(s, 0);
    lr->consumer = r, lr->cls = 0, lr->step = s, lr->worker = 3;
    lr->t_start = base + 200 * US + (r == 2 ? 0 : prop);
    lr->t_end = lr->t_start + 20 * US;
    lr->t_release = lr->t_end + 3 * US + (hit && f == NOTIFY_LOCAL ? FAULT : 0);
    for (uint32_t w = 0; w < NW; w++) {
        struct fa_worker *ws = &sum->workers[sum->n_workers++];
        ws->worker = w, ws->step = s, ws->busy = 800 * US;
        ws->idle = 50 * US + (hit && (f == IMBALANCE || f == IMBALANCE_QWI) ? FAULT : 0);
        ws->max_depth = 4;
    }
    sum->cov_eligible = 1000;
    sum->cov_ran = (f == LOW_COVERAGE && hit) ? 300 : 1000;
}

static struct mks_store *fill(enum fault f)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    for (uint32_t r = 0; r < R; r++) {
        /* Register through the store as the collector does. */
        if (df_register(st, "diag", r, R, NW, names, NULL, 3, err, sizeof(err)))
            fail_msg("register: %s", err);
        for (uint32_t s = 1; s <= STEPS; s++) {
            struct fa_summary *sum = calloc(1, sizeof(*sum));
            make(sum, r, s, f);
            if (df_summary(st, "diag", r, s, sum, err, sizeof(err)))
                fail_msg("ingest: %s", err);
            free(sum);
        }
    }
    return st;
}

static json_t *diagnose(struct mks_store *st)
{
    json_t *out = NULL;
    char err[256];
    struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1};
    if (mks_diagnose(st, "diag", &o, &out, err, sizeof(err)))
        fail_msg("diagnose: %s", err);
    return out;
}

static const char *js(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "(null)";
}

/* SQL run on the store before diagnosing (NULL: none). */
static const char *tweak;

/* A store filled under fault f, the tweak applied, diagnosed: the one group
 * there must be (the caller releases *d and *st). */
static json_t *only_group(enum fault f, struct mks_store **st, json_t **d)
{
    *st = fill(f);
    if (tweak)
        assert_int_equal(sqlite3_exec(mks_store_db(*st), tweak, NULL, NULL, NULL), SQLITE_OK);
    *d = diagnose(*st);
    json_t *groups = json_object_get(*d, "groups");
    if (json_array_size(groups) != 1)
        fail_msg("%zu groups: %s", json_array_size(groups), json_dumps(*d, 0));
    return json_array_get(groups, 0);
}

/* The group of steps F_LO..F_HI: its cause and root (rank, class). */
static void expect_group(enum fault f, const char *cause, int rank, const char *cls)
{
    struct mks_store *st;
    json_t *d, *g = only_group(f, &st, &d);
    json_t *root = json_object_get(g, "root");
    if (strcmp(js(g, "cause"), cause) ||
        json_integer_value(json_object_get(root, "rank")) != rank ||
        strcmp(js(root, "task_class"), cls))
        fail_msg("want %s at rank %d, %s: %s", cause, rank, cls, json_dumps(g, 0));
    assert_int_equal(json_array_size(json_object_get(g, "steps")), F_HI - F_LO + 1);
    json_decref(d);
    mks_store_close(st);
}

/* The single group must blame `cause` at rank 2, class `cls`, through a
 * remote-stall chain 0 -> 1 -> 2, on steps 10..12. */
static void expect_root(enum fault f, const char *cause, const char *cls)
{
    struct mks_store *st;
    json_t *d, *g = only_group(f, &st, &d);
    if (strcmp(js(g, "cause"), cause))
        fail_msg("cause %s, want %s (%s): %s", js(g, "cause"), cause, js(g, "reason"),
                 json_dumps(g, 0));
    json_t *root = json_object_get(g, "root");
    assert_int_equal(json_integer_value(json_object_get(root, "rank")), 2);
    assert_string_equal(js(root, "task_class"), cls);
    assert_int_equal(strtoull(json_string_value(json_object_get(root, "comm_gen")), NULL, 10),
                     gen_of(2, 1, F_LO));
    json_t *chain = json_object_get(g, "chain");
    assert_int_equal(json_array_size(chain), 3);
    for (int i = 0; i < 3; i++) {
        json_t *l = json_array_get(chain, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(l, "rank")), i);
        assert_string_equal(js(l, "cause"), i < 2 ? "remote_stall" : cause);
        /* every link is late by about the injected fault */
        json_int_t late = json_integer_value(json_object_get(l, "lateness_ns"));
        if (late < (json_int_t)(FAULT / 2) || late > (json_int_t)(2 * FAULT))
            fail_msg("link %d lateness %lld", i, (long long)late);
    }
    /* links carry the norm they were judged against: the waits' usual 10 us,
     * and for a slow task the class's usual mean run time (attn: 30 us) */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(chain, 0), "norm_ns")),
                     10 * US);
    if (f == SLOW_TASK)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(chain, 2), "norm_ns")),
                         30 * US);
    if (f == NOTIFY_LOCAL) /* gemm's usual gap between end and release */
        assert_int_equal(json_integer_value(json_object_get(json_array_get(chain, 2), "norm_ns")),
                         3 * US);
    json_t *steps = json_object_get(g, "steps");
    assert_int_equal(json_array_size(steps), F_HI - F_LO + 1);
    for (size_t i = 0; i < json_array_size(steps); i++)
        assert_int_equal(json_integer_value(json_array_get(steps, i)), F_LO + (int)i);
    json_t *cov = json_object_get(g, "coverage");
    assert_true(json_real_value(json_object_get(cov, "ratio")) > 0.99);
    /* rank 1, between the observed rank and the root, stalls on the root
     * too: listed with its own chain 1 -> 2 */
    json_t *stalled = json_object_get(g, "stalled");
    assert_int_equal(json_array_size(stalled), 1);
    json_t *st1 = json_array_get(stalled, 0);
    assert_int_equal(json_integer_value(json_object_get(st1, "rank")), 1);
    json_t *ch1 = json_object_get(st1, "chain");
    assert_int_equal(json_array_size(ch1), 2);
    assert_string_equal(js(json_array_get(ch1, 0), "cause"), "remote_stall");
    assert_string_equal(js(json_array_get(ch1, 1), "cause"), cause);
    json_decref(d);
    mks_store_close(st);
}

static void test_slow_task(void **s)
{
    (void)s;
    gens_only = false;
    expect_root(SLOW_TASK, "slow_task", "attn");
}
static void test_imbalance(void **s) { (void)s; expect_root(IMBALANCE, "local_imbalance", "gemm"); }
static void test_imbalance_qwi(void **s)
{
    (void)s;
    expect_root(IMBALANCE_QWI, "local_imbalance", "gemm");
}
static void test_notify(void **s) { (void)s; expect_root(NOTIFY, "notify_delay", "attn"); }
/* The gemm task of rank 2 ends on time but releases attn late: named from
 * the local release record, at rank 2 with the releasing class. */
static void test_notify_local(void **s)
{
    (void)s;
    gens_only = false;
    expect_root(NOTIFY_LOCAL, "notify_delay", "gemm");
}
static void test_transfer(void **s) { (void)s; expect_root(TRANSFER, "slow_transfer", "attn"); }

/* The same delays spread over 8 transfers a step (an eighth each, under the
 * fifth of a step's delay that one cause must explain): the step's waits
 * add up per peer and its releases per transfer, so the chain and its
 * root's cause are still found. */
static void test_notify_spread(void **s)
{
    (void)s;
    spread = 8;
    expect_root(NOTIFY, "notify_delay", "attn");
}
static void test_transfer_spread(void **s)
{
    (void)s;
    spread = 8;
    expect_root(TRANSFER, "slow_transfer", "attn");
}
/* also after a failed test, so the next one sees one transfer a step */
static int spread_reset(void **s)
{
    (void)s;
    spread = 1;
    return 0;
}
static void test_comm_class_is_transfer(void **s)
{
    (void)s;
    /* A communication task class that runs long, with no transfer measured
     * inside it, is a slow transfer ... */
    gens_only = false;
    tweak = "UPDATE task_classes SET comm = 1 WHERE name = 'attn';"
            " UPDATE releases SET t_comm_begin = 0, t_comm_end = 0";
    expect_root(SLOW_TASK, "slow_transfer", "attn");
    /* ... but when its transfers were measured and on time, the task's own
     * work was slow. */
    tweak = "UPDATE task_classes SET comm = 1 WHERE name = 'attn'";
    expect_root(SLOW_TASK, "slow_task", "attn");
    tweak = NULL;
}

/* 132 workers, no worker rows, no maxima in the summaries (what agents on a
 * GPU send): one late task's excess spread over the workers explains
 * nothing; the longest task, from the histogram, names it. */
#define MANY_WORKERS                                                                               \
    "UPDATE ranks SET n_workers = 132; DELETE FROM workers;"                                       \
    " UPDATE task_stats SET run_max = 0, queue_max = 0"
static void test_slow_one_of_many(void **s)
{
    (void)s;
    gens_only = false;
    tweak = MANY_WORKERS;
    expect_root(SLOW_ONE, "slow_task", "attn");
    tweak = NULL;
}
/* One attn task late by an eighth of the step's delay (the longest task is
 * a lower bound when a class is late in several layers), nothing else
 * late: it stands above every other cause, so it is named although it
 * explains less than a fifth.  Not when it explains under a twentieth, nor
 * when another cause comes close (a release late by a tenth). */
static void test_dominant_share(void **s)
{
    (void)s;
    gens_only = false;
    tweak = MANY_WORKERS;
    one_share = 8;
    expect_group(SLOW_ONE, "slow_task", 2, "attn");
    one_share = 40;
    expect_group(SLOW_ONE, "undecided", 2, "(null)");
    one_share = 8;
    extra_notify = FAULT / 10;
    expect_group(SLOW_ONE, "undecided", 2, "(null)");
}
static int share_reset(void **s)
{
    (void)s;
    one_share = 1, extra_notify = 0, tweak = NULL;
    return 0;
}
static void test_queued_one_of_many(void **s)
{
    (void)s;
    gens_only = false;
    tweak = MANY_WORKERS;
    expect_root(IMBALANCE_ONE, "local_imbalance", "gemm");
    tweak = NULL;
}

static void test_gens_only(void **s)
{
    (void)s;
    gens_only = true;
    expect_root(SLOW_TASK, "slow_task", "attn");
    gens_only = false;
}


static void test_clean(void **s)
{
    (void)s;
    gens_only = false;
    struct mks_store *st = fill(NONE);
    json_t *d = diagnose(st);
    if (json_array_size(json_object_get(d, "groups")))
        fail_msg("clean run: %s", json_dumps(d, 0));
    assert_int_equal(json_array_size(json_object_get(d, "groups")), 0);
    assert_int_equal(json_integer_value(json_object_get(d, "slow_steps")), 0);
    assert_int_equal(json_integer_value(json_object_get(d, "steps")), STEPS);
    json_decref(d);
    mks_store_close(st);
}

/* A rank's step times are its steps' own, whatever its advances say, for
 * every rank (the loader's set of timed ranks once held only ranks 0, 8,
 * 16, ... and read the others' advances into their step times). */
static void test_gens_too(void **s)
{
    (void)s;
    gens_only = false, gens_too = true;
    struct mks_store *st = fill(NONE);
    gens_too = false;
    json_t *d = diagnose(st);
    if (json_integer_value(json_object_get(d, "slow_steps")) ||
        json_array_size(json_object_get(d, "groups")))
        fail_msg("advances read as step times: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
    gens_too = true;
    expect_root(SLOW_TASK, "slow_task", "attn");
    gens_too = false;
}

static int cw_reset(void **s)
{
    (void)s;
    cw_on = false, cw_base = cw_extra = cw_runs_extra = 0;
    return 0;
}

/* A queue held in steps 10..12 while rank 2's worker threads waited that
 * long and more for a CPU (a loaded host: a worker that waits for a core
 * looks like a held queue): no scheduler cause is named; the group says
 * host contention, with the wait measured. */
static void test_contention_explains(void **s)
{
    (void)s;
    gens_only = false;
    cw_on = true, cw_base = 200 * US, cw_extra = NW * FAULT;
    struct mks_store *st;
    json_t *d, *g = only_group(IMBALANCE, &st, &d);
    if (strcmp(js(g, "cause"), "undecided") || !strstr(js(g, "reason"), "host CPU contention"))
        fail_msg("want undecided for host contention: %s", json_dumps(g, 0));
    json_t *hc = json_object_get(g, "host_contention");
    assert_non_null(hc);
    assert_int_equal(json_integer_value(json_object_get(hc, "rank")), 2);
    assert_int_equal(json_integer_value(json_object_get(hc, "cpu_wait_ns")),
                     (F_HI - F_LO + 1) * NW * FAULT);
    /* on the steps' path: the sum over NW workers' threads / sqrt(NW) */
    assert_int_equal(json_integer_value(json_object_get(hc, "on_path_ns")),
                     (F_HI - F_LO + 1) * NW * FAULT / 2);
    assert_int_equal(json_array_size(json_object_get(g, "steps")), F_HI - F_LO + 1);
    assert_true(json_is_true(json_object_get(d, "cpu_wait_measured")));
    assert_int_equal(json_integer_value(json_object_get(d, "contended_steps")), F_HI - F_LO + 1);
    json_decref(d);
    mks_store_close(st);
}

/* The fault's own excess is no wait for a CPU: a slow task in steps that
 * a little contention also slowed is still named (the steps are slow
 * without it), and so is one on a host loaded all along. */
static void test_contention_fault_stays(void **s)
{
    (void)s;
    gens_only = false;
    cw_on = true, cw_base = 200 * US, cw_extra = FAULT / 4;
    expect_root(SLOW_TASK, "slow_task", "attn");
    cw_base = 3 * NW * FAULT, cw_extra = 0;
    expect_root(SLOW_TASK, "slow_task", "attn");
    cw_extra = FAULT / 4;
    expect_root(IMBALANCE, "local_imbalance", "gemm");
    /* a slow body that sleeps is put on a CPU more often and waits as
     * long as usual at each: its wait grows, the host is not to blame */
    cw_base = 200 * US, cw_runs_extra = 20 * CW_RUNS;
    cw_extra = cw_runs_extra * cw_base / CW_RUNS; /* 4 ms: ten times the fault */
    expect_root(SLOW_TASK, "slow_task", "attn");
    cw_runs_extra = 0, cw_extra = FAULT / 4;
    struct mks_store *st = fill(SLOW_TASK);
    json_t *d = diagnose(st);
    assert_int_equal(json_integer_value(json_object_get(d, "contended_steps")), 0);
    json_decref(d);
    mks_store_close(st);
}

/* Older agents, device backends: the wait is not measured, never zero;
 * the answer says so and decides as before. */
static void test_contention_not_measured(void **s)
{
    (void)s;
    gens_only = false;
    cw_on = false;
    struct mks_store *st = fill(IMBALANCE);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st),
                                        "SELECT COUNT(*) FROM steps WHERE cpu_wait_ns IS NOT NULL",
                                        -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(q, 0), 0);
    sqlite3_finalize(q);
    json_t *d = diagnose(st);
    assert_true(json_is_false(json_object_get(d, "cpu_wait_measured")));
    assert_true(json_is_null(json_object_get(d, "contended_steps")));
    json_decref(d);
    mks_store_close(st);
    expect_root(IMBALANCE, "local_imbalance", "gemm");
}

static void test_low_coverage(void **s)
{
    (void)s;
    gens_only = false;
    /* Rank 2 is slow in steps 10..12 but observed only 30% of its events:
     * the answer is undecided and says why. */
    struct mks_store *st = fill(LOW_COVERAGE);
    /* Make rank 2's steps slow without anything observed to explain them. */
    sqlite3_exec(mks_store_db(st),
                 "UPDATE steps SET t_end_dev = t_end_dev + 400000 WHERE epoch_id IN (SELECT id FROM"
                 " epochs WHERE rank = 2 AND seq BETWEEN 10 AND 12)",
                 NULL, NULL, NULL);
    json_t *d = diagnose(st);
    json_t *groups = json_object_get(d, "groups");
    assert_int_equal(json_array_size(groups), 1);
    json_t *g = json_array_get(groups, 0);
    assert_string_equal(js(g, "cause"), "undecided");
    assert_non_null(strstr(js(g, "reason"), "coverage on rank 2"));
    json_decref(d);
    mks_store_close(st);
}

/* The slow rank's agent withheld the detail of the slow steps
 * (StepTime.detail_withheld, --step-detail auto): the chain stops there,
 * undecided, saying so, instead of reading a cause from rows of no step. */
static void test_detail_withheld(void **s)
{
    (void)s;
    gens_only = false;
    struct mks_store *st = fill(SLOW_TASK);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE steps SET detail_withheld = 1 WHERE step BETWEEN %d AND %d AND epoch_id IN"
             " (SELECT id FROM epochs WHERE rank = 2)",
             F_LO, F_HI);
    assert_int_equal(sqlite3_exec(mks_store_db(st), sql, NULL, NULL, NULL), SQLITE_OK);
    json_t *d = diagnose(st);
    json_t *groups = json_object_get(d, "groups");
    assert_int_equal(json_array_size(groups), 1);
    json_t *g = json_array_get(groups, 0);
    if (strcmp(js(g, "cause"), "undecided") ||
        !strstr(js(g, "reason"), "rank 2 withheld the detail of step"))
        fail_msg("want undecided, detail withheld on rank 2: %s", json_dumps(g, 0));
    json_decref(d);
    mks_store_close(st);
}

/* --min-steps: the fault's group of 3 slow steps stays with 3, goes (and
 * is counted) with 4. */
static void test_min_steps(void **s)
{
    (void)s;
    gens_only = false;
    struct mks_store *st = fill(SLOW_TASK);
    char err[256];
    for (uint32_t m = 3; m <= 4; m++) {
        json_t *out = NULL;
        struct mks_diag_opts o = {.sz = sizeof(o), .only_step = -1, .min_steps = m};
        if (mks_diagnose(st, "diag", &o, &out, err, sizeof(err)))
            fail_msg("diagnose: %s", err);
        size_t want = m <= F_HI - F_LO + 1 ? 1 : 0;
        assert_int_equal(json_array_size(json_object_get(out, "groups")), want);
        assert_int_equal(json_integer_value(json_object_get(out, "hidden_groups")), 1 - want);
        assert_int_equal(json_integer_value(json_object_get(out, "slow_steps")), F_HI - F_LO + 1);
        if (!want)
            assert_non_null(strstr(js(out, "reason"), "--min-steps"));
        json_decref(out);
    }
    mks_store_close(st);
}

static void test_empty(void **s)
{
    (void)s;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    json_t *d = diagnose(st);
    assert_int_equal(json_array_size(json_object_get(d, "groups")), 0);
    assert_non_null(strstr(js(d, "reason"), "no step times"));
    json_decref(d);
    mks_store_close(st);
}

/* A long job on a loaded machine: LONG_STEPS steps (past the point where
 * detail is sampled), a lone step of rank 0 stretched by 250 us every 37th
 * step (about 110 scattered slow steps, each in an epoch of its own), and
 * the slow attn of rank 2 on steps 10..12 (400 us).  The slow steps
 * examined are bounded and say so; the fault is among them and its group
 * first; --step reads the steps around the one asked about, not the job. */
#define LONG_STEPS 4200
static void test_long_noisy(void **s)
{
    (void)s;
    gens_only = false;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    unsigned n_noise = 0;
    for (uint32_t r = 0; r < R; r++) {
        if (df_register(st, "diag", r, R, NW, names, NULL, 3, err, sizeof(err)))
            fail_msg("register: %s", err);
        for (uint32_t k = 1; k <= LONG_STEPS; k++) {
            struct fa_summary *sum = calloc(1, sizeof(*sum));
            make(sum, r, k, SLOW_TASK);
            if (r == 0 && k > 100 && k % 37 == 5)
                sum->steps[0].t_end += 250 * US, n_noise++;
            if (df_summary(st, "diag", r, k, sum, err, sizeof(err)))
                fail_msg("ingest: %s", err);
            free(sum);
        }
    }
    json_t *d = diagnose(st);
    json_int_t n_slow = json_integer_value(json_object_get(d, "slow_steps"));
    json_int_t n_exam = json_integer_value(json_object_get(d, "slow_steps_examined"));
    if (n_slow < (json_int_t)n_noise + 3 || n_exam < 3 || n_exam >= n_slow)
        fail_msg("%lld slow steps, %lld examined, %u stretched: %s", (long long)n_slow,
                 (long long)n_exam, n_noise, json_dumps(d, 0));
    json_t *g = json_array_get(json_object_get(d, "groups"), 0);
    json_t *root = json_object_get(g, "root");
    if (strcmp(js(g, "cause"), "slow_task") || json_integer_value(json_object_get(root, "rank")) != 2 ||
        strcmp(js(root, "task_class"), "attn") || json_array_size(json_object_get(g, "steps")) != 3)
        fail_msg("first group: %s", json_dumps(g, 0));
    json_decref(d);
    /* one step: its neighbourhood only */
    struct mks_diag_opts so = {.sz = sizeof(so), .only_step = 11};
    d = NULL;
    if (mks_diagnose(st, "diag", &so, &d, err, sizeof(err)))
        fail_msg("diagnose --step: %s", err);
    assert_int_equal(json_integer_value(json_object_get(d, "first_step")), 1);
    assert_int_equal(json_integer_value(json_object_get(d, "last_step")), 11 + 1024);
    g = json_array_get(json_object_get(d, "groups"), 0);
    if (strcmp(js(g, "cause"), "slow_task") ||
        json_integer_value(json_object_get(json_object_get(g, "root"), "rank")) != 2)
        fail_msg("--step 11: %s", json_dumps(d, 0));
    json_decref(d);
    mks_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_task),
        cmocka_unit_test(test_imbalance),
        cmocka_unit_test(test_imbalance_qwi),
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_notify_local),
        cmocka_unit_test(test_transfer),
        cmocka_unit_test_teardown(test_notify_spread, spread_reset),
        cmocka_unit_test_teardown(test_transfer_spread, spread_reset),
        cmocka_unit_test_teardown(test_dominant_share, share_reset),
        cmocka_unit_test(test_gens_only),
        cmocka_unit_test(test_gens_too),
        cmocka_unit_test(test_comm_class_is_transfer),
        cmocka_unit_test(test_slow_one_of_many),
        cmocka_unit_test(test_queued_one_of_many),
        cmocka_unit_test(test_clean),
        cmocka_unit_test_teardown(test_contention_explains, cw_reset),
        cmocka_unit_test_teardown(test_contention_fault_stays, cw_reset),
        cmocka_unit_test_teardown(test_contention_not_measured, cw_reset),
        cmocka_unit_test(test_low_coverage),
        cmocka_unit_test(test_detail_withheld),
        cmocka_unit_test(test_min_steps),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_long_noisy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
