/*
 * Summary building from a snapshot (through a fake snapshot that serves
 * maps the way devhooks does) and merging of consecutive epochs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "steps.h"
#include "summary.h"

struct fake_map {
    uint32_t id;
    uint32_t key_size, value_size, n;
    const void *keys, *values; /* n keys and n values, packed */
};

struct fake_snap {
    uint64_t epoch;
    struct mks_coverage cov[MKS_EV_COUNT];
    struct fake_map maps[8];
    int n_maps;
    int fail_map; /* map id whose read fails, 0 = none */
};

static uint64_t f_epoch(void *snap)
{
    return ((struct fake_snap *)snap)->epoch;
}

static int f_cov(void *snap, enum mks_hook_event ev, struct mks_coverage *cov)
{
    *cov = ((struct fake_snap *)snap)->cov[ev];
    return 0;
}

static int f_iter(void *snap, uint32_t id, mks_map_iter_fn fn, void *arg)
{
    struct fake_snap *s = snap;
    if (s->fail_map && (int)id == s->fail_map)
        return -EIO;
    for (int i = 0; i < s->n_maps; i++) {
        struct fake_map *m = &s->maps[i];
        if (m->id != id)
            continue;
        for (uint32_t j = 0; j < m->n; j++) {
            int err = fn((const char *)m->keys + (size_t)j * m->key_size,
                         (const char *)m->values + (size_t)j * m->value_size, arg);
            if (err)
                return err;
        }
        return 0;
    }
    return -ENOENT;
}

static const struct agt_snap_ops fake_ops = {f_epoch, f_cov, f_iter};

static struct agt_mapref mref(uint32_t id, const char *name, uint32_t type, uint32_t ks,
                              uint32_t vs, int builtin)
{
    struct agt_mapref m = {.map_id = id, .prog_id = 7, .builtin = builtin};
    snprintf(m.spec.name, sizeof(m.spec.name), "%s", name);
    m.spec.type = type;
    m.spec.key_size = ks;
    m.spec.value_size = vs;
    m.spec.max_entries = 64;
    return m;
}

/* One epoch of a rank: counts per class, one run histogram, one remote wait,
 * a user array map with one written entry. */
static uint32_t count_keys[MKS_MON_MAX_CLASSES];
static uint64_t count_vals[MKS_MON_MAX_CLASSES];
static uint32_t lat_key;
static struct mks_hist lat_val;
static struct mks_mon_comm_key rw_key = {.comm_gen = 0x1234, .peer = 3};
static struct mks_mon_remote_wait rw_val = {.count = 2, .total_ns = 500, .max_ns = 300,
                                            .first_begin = 1000, .last_end = 2000,
                                            .task_class = 4};
static uint32_t user_keys[3] = {0, 1, 2};
static uint64_t user_vals[3] = {0, 99, 0};

static void fill(struct fake_snap *s, uint64_t epoch, uint64_t scale)
{
    memset(s, 0, sizeof(*s));
    s->epoch = epoch;
    for (uint32_t c = 0; c < MKS_MON_MAX_CLASSES; c++) {
        count_keys[c] = c;
        count_vals[c] = c < 5 ? (c + 1) * 10 : 0;
    }
    (void)scale;
    lat_key = MKS_MON_LAT_KEY(2, 9);
    memset(&lat_val, 0, sizeof(lat_val));
    lat_val.count = 3;
    lat_val.sum = 3000;
    lat_val.buckets[10] = 3;
    s->maps[0] = (struct fake_map){1, 4, 8, MKS_MON_MAX_CLASSES, count_keys, count_vals};
    s->maps[1] = (struct fake_map){2, 4, sizeof(struct mks_hist), 1, &lat_key, &lat_val};
    s->maps[2] = (struct fake_map){3, sizeof(rw_key), sizeof(rw_val), 1, &rw_key, &rw_val};
    s->maps[3] = (struct fake_map){4, 4, 8, 3, user_keys, user_vals};
    s->n_maps = 4;
    s->cov[MKS_EV_TASK_END] = (struct mks_coverage){.eligible = 150, .ran = 150, .prog_gen = 2};
    s->cov[MKS_EV_TASK_START] = (struct mks_coverage){.eligible = 150, .ran = 75,
                                                      .throttled = 75, .prog_gen = 1};
}

static void maps_of(struct agt_mapref *m)
{
    m[0] = mref(1, MKS_MON_COUNT_MAP, MKS_MAP_ARRAY, 4, 8, 1);
    m[1] = mref(2, MKS_MON_LAT_RUN_MAP, MKS_MAP_HIST, 4, sizeof(struct mks_hist), 1);
    m[2] = mref(3, MKS_MON_REMOTE_MAP, MKS_MAP_HASH, sizeof(rw_key), sizeof(rw_val), 1);
    m[3] = mref(4, "my_counter", MKS_MAP_ARRAY, 4, 8, 0);
}

static void test_build_from_snapshot(void **state)
{
    (void)state;
    struct fake_snap snap;
    fill(&snap, 42, 1);
    struct agt_mapref maps[4];
    maps_of(maps);
    int attached[MKS_EV_COUNT] = {[MKS_EV_TASK_END] = 1, [MKS_EV_TASK_START] = 1};
    struct agt_summary *s = agt_summary_new();
    assert_non_null(s);
    assert_int_equal(agt_summary_build(s, &fake_ops, &snap, maps, 4, attached), 0);
    assert_int_equal(s->epoch_first, 42);
    assert_int_equal(s->n_epochs, 1);
    assert_true(s->have_counts);
    for (int c = 0; c < 5; c++) {
        assert_true(s->cls[c].present);
        assert_int_equal(s->cls[c].count, (uint64_t)(c + 1) * 10);
    }
    assert_false(s->cls[5].present);
    assert_int_equal(agt_summary_total(s), 150);
    assert_true(s->have_lat);
    assert_true(s->lat[MKS_MON_LAT_KEY(2, 9)].present);
    assert_int_equal(s->lat[MKS_MON_LAT_KEY(2, 9)].run.count, 3);
    assert_int_equal(s->lat[MKS_MON_LAT_KEY(2, 9)].ready.count, 0);
    assert_int_equal(s->n_remote, 1);
    assert_int_equal(s->remote[0].key.comm_gen, 0x1234);
    assert_int_equal(s->remote[0].v.total_ns, 500);
    /* user array: only the written entry is carried, raw */
    assert_int_equal(s->n_user, 1);
    assert_string_equal(s->user[0].map, "my_counter");
    assert_int_equal(s->user[0].prog_id, 7);
    uint32_t k;
    uint64_t v;
    memcpy(&k, s->user[0].bytes, 4);
    memcpy(&v, s->user[0].bytes + 4, 8);
    assert_int_equal(k, 1);
    assert_int_equal(v, 99);
    assert_int_equal(s->cov[MKS_EV_TASK_END].ran, 150);
    assert_int_equal(s->cov[MKS_EV_TASK_START].throttled, 75);
    assert_true(s->attached[MKS_EV_TASK_END]);
    assert_false(s->attached[MKS_EV_DEP_WAIT_END]);
    agt_summary_free(s);
}

static void test_user_map_with_builtin_name_stays_raw(void **state)
{
    (void)state;
    struct fake_snap snap;
    fill(&snap, 1, 1);
    struct agt_mapref maps[4];
    maps_of(maps);
    maps[0].builtin = 0; /* a user program that calls its map count_by_class */
    struct agt_summary *s = agt_summary_new();
    assert_int_equal(agt_summary_build(s, &fake_ops, &snap, maps, 1, NULL), 0);
    assert_false(s->have_counts);
    assert_int_equal(agt_summary_total(s), 0);
    assert_int_equal(s->n_user, 5); /* the five non-zero classes */
    agt_summary_free(s);
}

static void test_map_read_error_is_reported(void **state)
{
    (void)state;
    struct fake_snap snap;
    fill(&snap, 1, 1);
    snap.fail_map = 2;
    struct agt_mapref maps[4];
    maps_of(maps);
    struct agt_summary *s = agt_summary_new();
    assert_int_equal(agt_summary_build(s, &fake_ops, &snap, maps, 4, NULL), -EIO);
    agt_summary_free(s);
}

static void test_merge_adds_up(void **state)
{
    (void)state;
    struct fake_snap snap;
    struct agt_mapref maps[4];
    maps_of(maps);
    struct agt_summary *a = agt_summary_new(), *b = agt_summary_new(), *m = agt_summary_new();
    fill(&snap, 10, 1);
    assert_int_equal(agt_summary_build(a, &fake_ops, &snap, maps, 4, NULL), 0);
    a->t_host_begin = 100;
    a->t_host_end = 200;
    fill(&snap, 11, 1);
    rw_val.last_end = 5000; /* later wait on the same transfer */
    assert_int_equal(agt_summary_build(b, &fake_ops, &snap, maps, 4, NULL), 0);
    rw_val.last_end = 2000;
    b->t_host_begin = 200;
    b->t_host_end = 300;
    assert_int_equal(agt_summary_merge(m, a), 0);
    assert_int_equal(agt_summary_merge(m, b), 0);
    assert_int_equal(m->epoch_first, 10);
    assert_int_equal(m->epoch_last, 11);
    assert_int_equal(m->n_epochs, 2);
    assert_int_equal(m->t_host_begin, 100);
    assert_int_equal(m->t_host_end, 300);
    assert_int_equal(agt_summary_total(m), 300);
    assert_int_equal(m->cls[4].count, 100);
    assert_int_equal(m->lat[MKS_MON_LAT_KEY(2, 9)].run.count, 6);
    assert_int_equal(m->lat[MKS_MON_LAT_KEY(2, 9)].run.buckets[10], 6);
    assert_int_equal(m->n_remote, 1);
    assert_int_equal(m->remote[0].v.count, 4);
    assert_int_equal(m->remote[0].v.first_begin, 1000);
    assert_int_equal(m->remote[0].v.last_end, 5000);
    assert_int_equal(m->n_user, 2);
    assert_int_equal(m->cov[MKS_EV_TASK_END].eligible, 300);
    assert_int_equal(m->cov[MKS_EV_TASK_START].throttled, 150);
    assert_int_equal(m->cov[MKS_EV_TASK_END].prog_gen, 2);
    agt_summary_free(a);
    agt_summary_free(b);
    agt_summary_free(m);
    agt_summary_free(NULL);
}

/* Per class sum of the decoded task rows. */
static uint64_t class_total(const Mkscope__V1__EpochSummary *es, uint32_t cls)
{
    uint64_t t = 0;
    for (size_t i = 0; i < es->n_task_stats; i++)
        if (es->task_stats[i]->task_class == cls)
            t += es->task_stats[i]->count;
    return t;
}

static void test_encode_tiers_keep_counts(void **state)
{
    (void)state;
    struct fake_snap snap;
    fill(&snap, 5, 1);
    struct agt_mapref maps[4];
    maps_of(maps);
    struct agt_summary *s = agt_summary_new();
    assert_int_equal(agt_summary_build(s, &fake_ops, &snap, maps, 4, NULL), 0);
    /* the generation monitor saw step 9 only: bucket 9 % 8 maps back to it */
    s->gen = calloc(1, sizeof(*s->gen));
    s->gen[0] = (struct mks_mon_gen){.step = 9, .tasks_done = 3};
    s->n_gen = s->cap_gen = 1;
    const char *names[8] = {[7] = "my_prog"};
    struct agt_encode_meta meta = {.job = "j1", .rank = 2, .incarnation = 77, .seq = 12,
                                   .lost_summaries = 3, .prog_names = names, .n_prog_names = 8};
    size_t sizes[AGT_TIER_COUNT];
    for (int t = 0; t < AGT_TIER_COUNT; t++) {
        uint8_t *buf;
        size_t len;
        assert_int_equal(agt_summary_encode(s, (enum agt_tier)t, &meta, NULL, &buf, &len), 0);
        sizes[t] = len;
        mks_envelope *env;
        char err[256];
        assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
        assert_int_equal(env->body_case, MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
        assert_int_equal(env->seq, 12);
        assert_int_equal(env->incarnation, 77);
        assert_int_equal(env->rank, 2);
        const Mkscope__V1__EpochSummary *es = env->epoch_summary;
        assert_int_equal(es->detail_tier, agt_tier_wire((enum agt_tier)t));
        assert_int_equal(es->lost_summaries, 3);
        for (uint32_t c = 0; c < 5; c++)
            assert_int_equal(class_total(es, c), (uint64_t)(c + 1) * 10);
        assert_int_equal(class_total(es, 5), 0);
        assert_int_equal(es->n_coverage, MKS_EV_COUNT);
        assert_int_equal(es->coverage[MKS_EV_TASK_START]->throttled, 75);
        if (t == AGT_TIER_FULL) {
            /* class 2: a row for step 9 with the histogram, the rest unknown */
            int found = 0;
            for (size_t i = 0; i < es->n_task_stats; i++) {
                const Mkscope__V1__TaskStat *ts = es->task_stats[i];
                if (ts->task_class == 2 && ts->step == 9) {
                    found = 1;
                    assert_int_equal(ts->count, 3);
                    assert_non_null(ts->run);
                    assert_int_equal(ts->run->n_buckets, 11);
                    assert_int_equal(ts->run->buckets[10], 3);
                }
            }
            assert_true(found);
            assert_int_equal(es->n_remote_waits, 1);
            assert_int_equal(es->remote_waits[0]->comm_gen, 0x1234);
            assert_int_equal(es->remote_waits[0]->peer_rank, 3);
            assert_int_equal(es->n_maps, 1);
            assert_string_equal(es->maps[0]->prog_name, "my_prog");
            assert_int_equal(es->maps[0]->n_entries, 1);
            assert_int_equal(es->waits_dropped, 0);
        } else {
            for (size_t i = 0; i < es->n_task_stats; i++)
                assert_int_equal(es->task_stats[i]->step, 0);
            assert_int_equal(es->n_remote_waits, 0);
            assert_int_equal(es->n_maps, 0);
            assert_int_equal(es->waits_dropped, 1); /* the record it left out */
        }
        if (t == AGT_TIER_COUNTS)
            for (size_t i = 0; i < es->n_task_stats; i++)
                assert_null(es->task_stats[i]->run);
        mks_wire_free(env);
        free(buf);
    }
    assert_true(sizes[AGT_TIER_FULL] > sizes[AGT_TIER_HIST]);
    assert_true(sizes[AGT_TIER_HIST] > sizes[AGT_TIER_COUNTS]);
    agt_summary_free(s);
}

/* A local release record torn by two workers' monitors (the start of one
 * task, the end of another, earlier one) still makes a summary: the start
 * is dropped, the end and the notification kept. */
static void test_encode_torn_local_release(void **state)
{
    (void)state;
    struct agt_summary *s = agt_summary_new();
    s->release = calloc(1, sizeof(*s->release));
    assert_non_null(s->release);
    s->n_release = s->cap_release = 1;
    s->release[0].key.comm_gen = MKS_MON_LOCAL_REL_GEN(7, 3);
    s->release[0].key.peer = 2;
    s->release[0].v.t_start = 5128;
    s->release[0].v.t_end = 5000;
    s->release[0].v.t_notify = 9000;
    s->release[0].v.task_class = 3;
    s->release[0].v.step = 7;
    struct agt_encode_meta meta = {.job = "j1", .rank = 2, .incarnation = 1, .seq = 1};
    uint8_t *buf;
    size_t len;
    assert_int_equal(agt_summary_encode(s, AGT_TIER_FULL, &meta, NULL, &buf, &len), 0);
    mks_envelope *env;
    char err[256];
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    const Mkscope__V1__EpochSummary *es = env->epoch_summary;
    assert_int_equal(es->n_releases, 1);
    assert_int_equal(es->releases[0]->t_start_dev_ns, 0);
    assert_int_equal(es->releases[0]->t_end_dev_ns, 5000);
    assert_int_equal(es->releases[0]->t_release_dev_ns, 9000);
    mks_wire_free(env);
    free(buf);
    agt_summary_free(s);
}

static const Mkscope__V1__EpochSummary *decode_tier(struct agt_summary *s, enum agt_tier tier,
                                                    mks_envelope **env)
{
    struct agt_encode_meta meta = {.job = "j1", .rank = 0, .incarnation = 1, .seq = 1};
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(agt_summary_encode(s, tier, &meta, NULL, &buf, &len), 0);
    assert_int_equal(mks_wire_decode(buf, len, NULL, env, err, sizeof(err)), 0);
    free(buf);
    return (*env)->epoch_summary;
}

static const Mkscope__V1__EpochSummary *decode_full(struct agt_summary *s, mks_envelope **env)
{
    return decode_tier(s, AGT_TIER_FULL, env);
}

static void add_lstep(struct agt_summary *s, uint32_t cls, uint64_t tag, uint64_t count,
                      uint64_t run_sum, uint64_t run_max)
{
    s->lstep = realloc(s->lstep, (s->n_lstep + 1) * sizeof(*s->lstep));
    s->lstep[s->n_lstep++] = (struct agt_lat_step){
        .cls = cls,
        .v = {.tag = tag, .count = count, .run_count = count, .run_sum = run_sum,
              .run_max = run_max, .queue_count = count, .queue_sum = count * 10,
              .queue_max = 40}};
    s->have_lstep = 1;
}

/* Exact rows per (class, step) from lat_step: each step its count, sums and
 * maxima; a step's histogram only where its bucket held no other step;
 * shared buckets' histograms and mixed slots in the row of no step; the
 * rows add up to the count monitor's count. */
static void test_encode_exact_steps(void **state)
{
    (void)state;
    struct agt_summary *s = agt_summary_new();
    s->have_counts = 1;
    s->cls[2].count = 16; /* 4 (step 9) + 5 (step 17) + 3 (step 11) + 4 (mixed slot) */
    s->cls[2].present = 1;
    add_lstep(s, 2, 9 + 1, 4, 4000, 1500);
    add_lstep(s, 2, 17 + 1, 5, 5000, 2500);
    add_lstep(s, 2, 11 + 1, 3, 300, 200);
    add_lstep(s, 2, (20 + 1) | MKS_MON_LAT_STEP_MIXED, 4, 800, 300);
    /* steps 9 and 17 share bucket 1; step 11 has bucket 3 alone */
    struct agt_lat *b1 = &s->lat[2 * MKS_MON_STEP_BUCKETS + 1];
    struct agt_lat *b3 = &s->lat[2 * MKS_MON_STEP_BUCKETS + 3];
    b1->present = b3->present = 1;
    b1->run.count = 9, b1->run.sum = 9000, b1->run.buckets[11] = 9;
    b3->run.count = 3, b3->run.sum = 300, b3->run.buckets[7] = 3;
    s->have_lat = 1;
    s->gen = calloc(4, sizeof(*s->gen));
    s->gen[0] = (struct mks_mon_gen){.step = 9, .tasks_done = 4};
    s->gen[1] = (struct mks_mon_gen){.step = 17, .tasks_done = 5};
    s->gen[2] = (struct mks_mon_gen){.step = 11, .tasks_done = 3};
    s->gen[3] = (struct mks_mon_gen){.step = 20, .tasks_done = 4};
    s->n_gen = s->cap_gen = 4;
    mks_envelope *env;
    const Mkscope__V1__EpochSummary *es = decode_full(s, &env);
    uint64_t total = 0;
    int seen = 0;
    for (size_t i = 0; i < es->n_task_stats; i++) {
        const Mkscope__V1__TaskStat *t = es->task_stats[i];
        if (t->task_class != 2)
            continue;
        total += t->count;
        if (!t->step_known) {
            /* mixed slot's counts, the shared bucket's histogram */
            assert_int_equal(t->count, 4);
            assert_int_equal(t->run->count, 4);
            assert_int_equal(t->run->sum, 800);
            assert_int_equal(t->run->max, 300);
            assert_int_equal(t->run->n_buckets, 12);
            assert_int_equal(t->run->buckets[11], 9);
            seen |= 1;
        } else if (t->step == 9 || t->step == 17) {
            assert_int_equal(t->count, t->step == 9 ? 4 : 5);
            assert_int_equal(t->run->max, t->step == 9 ? 1500 : 2500);
            assert_int_equal(t->run->n_buckets, 0);
            assert_int_equal(t->queue->max, 40);
            seen |= t->step == 9 ? 2 : 4;
        } else {
            assert_int_equal(t->step, 11);
            assert_int_equal(t->count, 3);
            assert_int_equal(t->run->n_buckets, 8);
            assert_int_equal(t->run->buckets[7], 3);
            assert_int_equal(t->run->max, 200);
            seen |= 8;
        }
    }
    assert_int_equal(seen, 15);
    assert_int_equal(total, 16);
    mks_wire_free(env);
    agt_summary_free(s);
}

/* Local dependency waits carry their longest (depwait's wait_max), also
 * across a merge of epochs. */
static void test_local_wait_max(void **state)
{
    (void)state;
    static uint32_t hkey, mkey;
    static struct mks_hist h;
    static uint64_t mx;
    struct agt_summary *a = NULL, *b = NULL;
    for (int e = 0; e < 2; e++) {
        struct fake_snap snap = {.epoch = (uint64_t)e + 1};
        hkey = mkey = MKS_MON_WAIT_KEY(MKS_DEP_LOCAL, 3);
        memset(&h, 0, sizeof(h));
        h.count = 2, h.sum = 900, h.buckets[10] = 2;
        mx = e ? 700 : 500;
        snap.maps[0] = (struct fake_map){1, 4, sizeof(h), 1, &hkey, &h};
        snap.maps[1] = (struct fake_map){2, 4, 8, 1, &mkey, &mx};
        snap.n_maps = 2;
        struct agt_mapref maps[2] = {
            mref(1, MKS_MON_WAIT_HIST_MAP, MKS_MAP_HIST, 4, sizeof(struct mks_hist), 1),
            mref(2, MKS_MON_WAIT_MAX_MAP, MKS_MAP_ARRAY, 4, 8, 1)};
        struct agt_summary *s = agt_summary_new();
        assert_int_equal(agt_summary_build(s, &fake_ops, &snap, maps, 2, NULL), 0);
        if (e == 0)
            a = s;
        else
            b = s;
    }
    assert_int_equal(agt_summary_merge(a, b), 0);
    mks_envelope *env;
    const Mkscope__V1__EpochSummary *es = decode_full(a, &env);
    assert_int_equal(es->n_local_waits, 1);
    assert_int_equal(es->local_waits[0]->waiter_class, 3);
    assert_int_equal(es->local_waits[0]->count, 4);
    assert_int_equal(es->local_waits[0]->sum_ns, 1800);
    assert_int_equal(es->local_waits[0]->max_ns, 700);
    mks_wire_free(env);
    agt_summary_free(a);
    agt_summary_free(b);
}

static struct agt_summary *epoch_of(const struct mks_mon_gen *g, size_t ng,
                                    const struct agt_wtime *w, size_t nw)
{
    struct agt_summary *s = agt_summary_new();
    s->gen = calloc(ng, sizeof(*s->gen));
    memcpy(s->gen, g, ng * sizeof(*g));
    s->n_gen = s->cap_gen = ng;
    s->wtime = calloc(nw + 1, sizeof(*s->wtime));
    memcpy(s->wtime, w, nw * sizeof(*w));
    s->n_wtime = s->cap_wtime = nw;
    s->have_wtime = 1;
    return s;
}

#define WT(worker, step, busy)                                                                     \
    {(worker), (step) % MKS_MON_LAT_STEP_SLOTS, {(uint64_t)(step) + 1, (busy), 1}}

/* Steps across epochs: a step ends when a later one began; its whole span
 * and every worker's busy and idle time in it are reported once, in the
 * summary of the epoch where it ended, marked complete. */
static void test_steps_across_epochs(void **state)
{
    (void)state;
    struct agt_steps *t = agt_steps_new();
    assert_non_null(t);
    struct mks_mon_gen g1[] = {{.step = 4, .tasks_done = 6, .t_task_first = 100, .t_task_last = 200},
                               {.step = 5, .tasks_done = 2, .t_task_first = 210, .t_task_last = 250}};
    struct agt_wtime w1[] = {WT(0, 4, 50), WT(1, 4, 80), WT(0, 5, 20)};
    struct agt_summary *s1 = epoch_of(g1, 2, w1, 3);
    assert_int_equal(agt_steps_feed(t, s1, 3, 0), 0);
    assert_int_equal(s1->n_done, 1);
    assert_int_equal(s1->done[0].step, 4);
    assert_int_equal(s1->done[0].t_begin, 100);
    assert_int_equal(s1->done[0].t_end, 200);
    assert_int_equal(s1->done[0].n_workers, 3);
    assert_int_equal(s1->done[0].busy[0], 50);
    assert_int_equal(s1->done[0].busy[1], 80);
    assert_int_equal(s1->done[0].busy[2], 0);
    /* step 5 goes on in the next epoch, then step 6 begins */
    struct mks_mon_gen g2[] = {{.step = 5, .tasks_done = 3, .t_task_first = 220, .t_task_last = 300},
                               {.step = 6, .tasks_done = 1, .t_task_first = 310, .t_task_last = 320}};
    struct agt_wtime w2[] = {WT(1, 5, 30), WT(2, 6, 10)};
    struct agt_summary *s2 = epoch_of(g2, 2, w2, 2);
    assert_int_equal(agt_steps_feed(t, s2, 3, 0), 0);
    assert_int_equal(s2->n_done, 1);
    assert_int_equal(s2->done[0].step, 5);
    assert_int_equal(s2->done[0].t_begin, 210);
    assert_int_equal(s2->done[0].t_end, 300);
    mks_envelope *env;
    const Mkscope__V1__EpochSummary *es = decode_full(s2, &env);
    int complete = 0;
    for (size_t i = 0; i < es->n_steps; i++) {
        const Mkscope__V1__StepTime *st = es->steps[i];
        if (st->step == 5) {
            assert_true(st->complete);
            assert_int_equal(st->t_begin_dev_ns, 210);
            assert_int_equal(st->t_end_dev_ns, 300);
            assert_int_equal(st->tasks, 3);
            complete++;
        } else {
            assert_int_equal(st->step, 6);
            assert_false(st->complete);
        }
    }
    assert_int_equal(complete, 1);
    /* every worker of the rank, also worker 2 that ran nothing of step 5 */
    assert_int_equal(es->n_workers, 3);
    uint64_t want_busy[3] = {20, 30, 0};
    for (size_t i = 0; i < es->n_workers; i++) {
        const Mkscope__V1__WorkerStat *w = es->workers[i];
        assert_true(w->step_known);
        assert_int_equal(w->step, 5);
        assert_int_equal(w->busy_ns, want_busy[w->worker]);
        assert_int_equal(w->idle_ns, 90 - want_busy[w->worker]);
    }
    mks_wire_free(env);
    /* Below the full tier: one row per worker, of no step, the sums. */
    es = decode_tier(s2, AGT_TIER_HIST, &env);
    assert_int_equal(es->n_workers, 3);
    for (size_t i = 0; i < es->n_workers; i++) {
        const Mkscope__V1__WorkerStat *w = es->workers[i];
        assert_false(w->step_known);
        assert_int_equal(w->busy_ns, want_busy[w->worker]);
        assert_int_equal(w->idle_ns, 90 - want_busy[w->worker]);
    }
    mks_wire_free(env);
    /* The application ends: step 6 ends too.  A slot step 6 shared with
     * another step leaves it without worker times rather than wrong ones. */
    struct mks_mon_gen g3[] = {{.step = 6, .tasks_done = 1, .t_task_first = 330, .t_task_last = 340}};
    struct agt_wtime w3[] = {{0, 6, {(6 + 1) | MKS_MON_LAT_STEP_MIXED, 10, 1}}};
    struct agt_summary *s3 = epoch_of(g3, 1, w3, 1);
    assert_int_equal(agt_steps_feed(t, s3, 3, 1), 0);
    assert_int_equal(s3->n_done, 1);
    assert_int_equal(s3->done[0].step, 6);
    assert_int_equal(s3->done[0].t_end, 340);
    assert_null(s3->done[0].busy);
    es = decode_full(s3, &env);
    assert_int_equal(es->n_workers, 0);
    assert_true(es->steps[0]->complete);
    mks_wire_free(env);
    agt_summary_free(s1);
    agt_summary_free(s2);
    agt_summary_free(s3);
    agt_steps_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_from_snapshot),
        cmocka_unit_test(test_user_map_with_builtin_name_stays_raw),
        cmocka_unit_test(test_map_read_error_is_reported),
        cmocka_unit_test(test_merge_adds_up),
        cmocka_unit_test(test_encode_torn_local_release),
        cmocka_unit_test(test_encode_tiers_keep_counts),
        cmocka_unit_test(test_encode_exact_steps),
        cmocka_unit_test(test_steps_across_epochs),
        cmocka_unit_test(test_local_wait_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
