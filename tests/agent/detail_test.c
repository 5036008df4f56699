/*
 * The per-step detail policy (--step-detail auto, detail.h): which steps it
 * keeps, and what a summary says of the steps it withholds (their tasks in
 * the rows of no step, every count exact, their rows counted, their step
 * times flagged).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "encode.h"
#include "summary.h"

/* A summary of steps first..last (gen and done rows), each `dur` ns long
 * but `slow` (3 x dur; UINT32_MAX: none); `open`: the last step has not
 * ended (gen row only). */
static struct agt_summary *steps_summary(uint32_t first, uint32_t last, uint64_t dur, uint32_t slow,
                                         int open)
{
    struct agt_summary *s = agt_summary_new();
    size_t n = last - first + 1;
    s->gen = calloc(n, sizeof(*s->gen));
    s->done = calloc(n, sizeof(*s->done));
    s->cap_gen = s->cap_done = n;
    uint64_t t = 1000000;
    for (uint32_t st = first; st <= last; st++) {
        uint64_t d = st == slow ? 3 * dur : dur + (st % 3) * (dur / 100);
        s->gen[s->n_gen++] = (struct mks_mon_gen){.step = st,
                                                  .tasks_done = 2,
                                                  .advances = 1,
                                                  .t_last = t,
                                                  .t_task_first = t,
                                                  .t_task_last = t + d};
        if (!(open && st == last))
            s->done[s->n_done++] = (struct agt_step_done){.step = st, .t_begin = t, .t_end = t + d};
        t += d;
    }
    return s;
}

static int has(const uint32_t *v, size_t n, uint32_t step)
{
    return agt_detail_has(v, n, step);
}

static void test_mode_parse(void **state)
{
    (void)state;
    enum agt_detail_mode m = AGT_DETAIL_AUTO;
    assert_int_equal(agt_detail_mode_parse("all", &m), 0);
    assert_int_equal(m, AGT_DETAIL_ALL);
    assert_int_equal(agt_detail_mode_parse("auto", &m), 0);
    assert_int_equal(m, AGT_DETAIL_AUTO);
    assert_int_equal(agt_detail_mode_parse("some", &m), -22);
    assert_int_equal(agt_detail_mode_parse("", &m), -22);
    assert_int_equal(agt_detail_mode_parse(NULL, &m), -22);
}

/* `all` withholds nothing; `auto` keeps every step until it knows enough
 * of them, then withholds all but the sampled steps, a slow step and its
 * neighbours, a step still running and that step again once it ends; the
 * previous summary's withheld steps are withheld again (late rows). */
static void test_choose(void **state)
{
    (void)state;
    struct agt_detail d;
    uint32_t *v;
    size_t n;
    struct agt_summary *s = steps_summary(0, 9, 100000, UINT32_MAX, 0);
    agt_detail_init(&d, &(struct agt_detail_opts){.mode = AGT_DETAIL_ALL, .every = 4});
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_null(v);
    assert_int_equal(n, 0);

    agt_detail_init(
        &d, &(struct agt_detail_opts){.mode = AGT_DETAIL_AUTO, .every = 4, .slow_frac = 0.2});
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 5); /* the summary's own steps are the baseline */
    /* by number: every 4th, and every 2nd below AGT_DETAIL_DENSE */
    assert_true(!has(v, n, 0) && !has(v, n, 4) && !has(v, n, 8) && !has(v, n, 2) &&
                has(v, n, 1) && has(v, n, 9));
    free(v);
    agt_summary_free(s);

    /* fewer than AGT_DETAIL_MIN_BASE steps known: all of them kept */
    agt_detail_init(
        &d, &(struct agt_detail_opts){.mode = AGT_DETAIL_AUTO, .every = 4, .slow_frac = 0.2});
    s = steps_summary(0, 4, 100000, 2, 0);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_null(v);
    agt_summary_free(s);

    s = steps_summary(5, 19, 100000, UINT32_MAX, 0);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 8);
    assert_true(!has(v, n, 8) && !has(v, n, 10) && !has(v, n, 16) && has(v, n, 5) &&
                has(v, n, 19));
    assert_int_equal(d.withheld, 8);
    assert_int_equal(d.kept, 5 + 7);
    free(v);
    agt_summary_free(s);

    /* step 27 three times as long: it and 26, 28 (by number too) kept;
     * 30 runs on; 25 and 29 withheld, and the previous summary's 8 */
    s = steps_summary(25, 30, 100000, 27, 1);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 2 + 8);
    assert_true(has(v, n, 25) && has(v, n, 29) && has(v, n, 5) && has(v, n, 19));
    assert_true(!has(v, n, 26) && !has(v, n, 27) && !has(v, n, 28) && !has(v, n, 30));
    free(v);
    agt_summary_free(s);

    /* 30 ends here, an ordinary step: still kept (its first rows were sent) */
    s = steps_summary(30, 33, 100000, UINT32_MAX, 0);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 2 + 2);
    assert_true(has(v, n, 31) && has(v, n, 33) && has(v, n, 25) && has(v, n, 29));
    assert_true(!has(v, n, 30) && !has(v, n, 32) && !has(v, n, 5));
    free(v);
    agt_summary_free(s);

    /* a window of slow steps: 41 three times as long, 42 and 43 only 1.15
     * times (over half the bar, after a slow step), kept with 40 and 44 */
    s = steps_summary(40, 47, 100000, 41, 0);
    for (size_t i = 0; i < s->n_done; i++)
        if (s->done[i].step == 42 || s->done[i].step == 43)
            s->done[i].t_end = s->done[i].t_begin + 115000;
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 2 + 2);
    assert_true(has(v, n, 45) && has(v, n, 47) && has(v, n, 31) && !has(v, n, 46));
    for (uint32_t st = 40; st <= 44; st++)
        assert_false(has(v, n, st));
    free(v);
    agt_summary_free(s);

    /* from AGT_DETAIL_DENSE on, every 4th only */
    s = steps_summary(AGT_DETAIL_DENSE - 4, AGT_DETAIL_DENSE + 7, 100000, UINT32_MAX, 0);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    for (uint32_t st = AGT_DETAIL_DENSE - 4; st < AGT_DETAIL_DENSE + 8; st++)
        assert_int_equal(has(v, n, st),
                         st % 4 != 0 && (st >= AGT_DETAIL_DENSE || st % 2 != 0));
    free(v);
    agt_summary_free(s);

    /* warmup: the first steps whatever their length */
    agt_detail_init(&d, &(struct agt_detail_opts){
                            .mode = AGT_DETAIL_AUTO, .every = 0, .warmup = 12, .slow_frac = 0.2});
    s = steps_summary(0, 19, 100000, UINT32_MAX, 0);
    assert_int_equal(agt_detail_choose(&d, s, &v, &n), 0);
    assert_int_equal(n, 8);
    assert_true(!has(v, n, 11) && has(v, n, 12));
    free(v);
    agt_summary_free(s);
}

static void add_lstep(struct agt_summary *s, uint32_t cls, uint32_t step, uint64_t count)
{
    s->lstep = realloc(s->lstep, (s->n_lstep + 1) * sizeof(*s->lstep));
    s->lstep[s->n_lstep++] = (struct agt_lat_step){.cls = cls,
                                                   .v = {.tag = step + 1,
                                                         .count = count,
                                                         .run_count = count,
                                                         .run_sum = count * 100,
                                                         .run_max = 150,
                                                         .queue_count = count,
                                                         .queue_sum = count * 10,
                                                         .queue_max = 40}};
    s->have_lstep = 1;
}

/* Steps 9, 11 and 17 with task, worker, wait and release rows; only 9's
 * detail kept: the rows of 11 and 17 are not sent, their tasks are in the
 * row of no step (the class's count exact), their worker, wait and release
 * rows counted in rows_withheld, their step times flagged. */
static void test_encode_withheld(void **state)
{
    (void)state;
    struct agt_summary *s = agt_summary_new();
    const uint32_t steps[3] = {9, 11, 17};
    s->have_counts = 1;
    s->cls[2].count = 4 + 5 + 3;
    s->cls[2].present = 1;
    add_lstep(s, 2, 9, 4);
    add_lstep(s, 2, 11, 5);
    add_lstep(s, 2, 17, 3);
    s->gen = calloc(3, sizeof(*s->gen));
    s->done = calloc(3, sizeof(*s->done));
    s->remote = calloc(3, sizeof(*s->remote));
    s->release = calloc(3, sizeof(*s->release));
    s->cap_gen = s->cap_done = s->cap_remote = s->cap_release = 3;
    for (int i = 0; i < 3; i++) {
        uint64_t t = 1000 * (uint64_t)(i + 1);
        s->gen[s->n_gen++] =
            (struct mks_mon_gen){.step = steps[i], .tasks_done = 4, .advances = 1, .t_last = t};
        struct agt_step_done *dn = &s->done[s->n_done++];
        *dn = (struct agt_step_done){
            .step = steps[i], .t_begin = t, .t_end = t + 900, .n_workers = 2};
        dn->busy = calloc(2, sizeof(uint64_t));
        dn->tasks = calloc(2, sizeof(uint64_t));
        dn->busy[0] = dn->busy[1] = 400;
        s->remote[s->n_remote++] = (struct agt_remote){
            .key = {.comm_gen = 100 + (uint64_t)i, .peer = 1},
            .v = {.count = 1, .first_begin = t, .last_end = t + 50, .step = steps[i]}};
        s->release[s->n_release++] = (struct agt_release){
            .key = {.comm_gen = 200 + (uint64_t)i, .peer = 1},
            .v = {.count = 1, .t_start = t, .t_release = t + 60, .step = steps[i]}};
    }
    s->have_wtime = 1;
    const uint32_t withheld[2] = {11, 17};
    struct agt_encode_meta meta = {.job = "j1",
                                   .rank = 0,
                                   .incarnation = 1,
                                   .seq = 1,
                                   .withheld_steps = withheld,
                                   .n_withheld_steps = 2};
    uint8_t *buf;
    size_t len;
    char err[256];
    mks_envelope *env;
    assert_int_equal(agt_summary_encode(s, AGT_TIER_FULL, &meta, NULL, &buf, &len), 0);
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    free(buf);
    const Mkscope__V1__EpochSummary *es = env->epoch_summary;
    uint64_t total = 0, nostep = 0;
    for (size_t i = 0; i < es->n_task_stats; i++) {
        const Mkscope__V1__TaskStat *t = es->task_stats[i];
        assert_int_equal(t->task_class, 2);
        total += t->count;
        if (t->step_known)
            assert_int_equal(t->step, 9);
        else
            nostep += t->count;
    }
    assert_int_equal(total, 12);
    assert_int_equal(nostep, 8);
    assert_int_equal(es->n_workers, 2);
    for (size_t i = 0; i < es->n_workers; i++)
        assert_int_equal(es->workers[i]->step, 9);
    assert_int_equal(es->n_remote_waits, 1);
    assert_int_equal(es->remote_waits[0]->step, 9);
    assert_int_equal(es->n_releases, 1);
    assert_int_equal(es->releases[0]->step, 9);
    assert_int_equal(es->rows_withheld, 2 * 2 + 2 + 2); /* workers, waits, releases */
    assert_int_equal(es->steps_withheld, 2);
    assert_int_equal(es->n_steps, 3);
    for (size_t i = 0; i < es->n_steps; i++)
        assert_int_equal(es->steps[i]->detail_withheld, es->steps[i]->step != 9);
    assert_int_equal(es->waits_dropped, 0);
    mks_wire_free(env);

    /* below the full tier no step has rows of its own: nothing is flagged */
    assert_int_equal(agt_summary_encode(s, AGT_TIER_HIST, &meta, NULL, &buf, &len), 0);
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    free(buf);
    assert_int_equal(env->epoch_summary->steps_withheld, 0);
    for (size_t i = 0; i < env->epoch_summary->n_steps; i++)
        assert_false(env->epoch_summary->steps[i]->detail_withheld);
    mks_wire_free(env);
    agt_summary_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_parse),
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_encode_withheld),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
