/*
 * The compact form of an EpochSummary (proto/src/compact.c): a summary
 * compacted, encoded and decoded comes back with every value it had (rows
 * of waits and releases in another order: they are sorted by comm_gen), in
 * fewer bytes; a malformed compact summary (plain times beside compact
 * ones, too many times, a time or comm_gen that wraps) is refused with its
 * reason, never expanded into wrong values.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/wire.h"

#define NS 12
#define NW 40
#define NR 60

/* One summary's rows and their plain values, kept apart from the rows the
 * compaction rewrites. */
struct sample {
    Mkscope__V1__EpochSummary es;
    Mkscope__V1__StepTime st[NS], *st_p[NS];
    Mkscope__V1__GenProgress g[NS], *g_p[NS];
    Mkscope__V1__RemoteWait w[NW], *w_p[NW];
    Mkscope__V1__Release r[NR], *r_p[NR];
    Mkscope__V1__StepTime st0[NS];
    Mkscope__V1__GenProgress g0[NS];
    Mkscope__V1__RemoteWait w0[NW];
    Mkscope__V1__Release r0[NR];
    uint64_t words[NS * 3 + NW * 2 + NR * 6];
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A time near t0: sometimes unknown, sometimes equal to the one before,
 * sometimes earlier (a monitor's racy record). */
static uint64_t near(uint64_t *s, uint64_t t0, uint64_t prev)
{
    switch (rnd(s) % 6) {
    case 0:
        return 0;
    case 1:
        return prev ? prev : t0;
    case 2:
        return t0 - rnd(s) % 1000000;
    default:
        return t0 + rnd(s) % 200000000;
    }
}

/* Device times from t0 (a globaltimer's ~1.7e18 or a fresh host's 3e11). */
static void fill(struct sample *x, uint64_t seed, uint64_t t0)
{
    memset(x, 0, sizeof(*x));
    mkscope__v1__epoch_summary__init(&x->es);
    x->es.t_begin_dev_ns = t0, x->es.t_end_dev_ns = t0 + 100000000;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < NS; i++) {
        mkscope__v1__step_time__init(&x->st[i]);
        x->st[i].step = (uint32_t)(100 + i);
        x->st[i].t_begin_dev_ns = near(&s, t0, 0);
        x->st[i].t_end_dev_ns = x->st[i].t_begin_dev_ns ? x->st[i].t_begin_dev_ns + rnd(&s) % 3000000 : 0;
        x->st[i].complete = x->st[i].t_begin_dev_ns != 0;
        x->st[i].tasks = rnd(&s) % 80;
        x->st_p[i] = &x->st[i];
        mkscope__v1__gen_progress__init(&x->g[i]);
        x->g[i].step = (uint32_t)(100 + i);
        x->g[i].t_dev_ns = near(&s, t0, 0);
        x->g[i].value = i;
        x->g_p[i] = &x->g[i];
    }
    for (size_t i = 0; i < NW; i++) {
        Mkscope__V1__RemoteWait *w = &x->w[i];
        mkscope__v1__remote_wait__init(w);
        /* a few comm_gens shared by several peers, some of all 64 bits */
        w->comm_gen = i % 5 == 4 ? UINT64_MAX - i : 0x4100000000000000ull + (i / 3) * 0x100000;
        w->peer_rank = (uint32_t)(i % 3);
        w->step = (uint32_t)(100 + i % NS);
        w->t_begin_dev_ns = near(&s, t0, 0);
        w->t_end_dev_ns = w->t_begin_dev_ns ? w->t_begin_dev_ns + rnd(&s) % 50000 : 0;
        x->w_p[i] = w;
    }
    for (size_t i = 0; i < NR; i++) {
        Mkscope__V1__Release *r = &x->r[i];
        mkscope__v1__release__init(r);
        r->comm_gen = i % 7 == 0 ? (1ull << 61) | (i << 8) : 0x4200030000000000ull + i * 0x10000;
        r->consumer_rank = (uint32_t)(i % 4);
        r->task_class = (uint32_t)(i % 9);
        r->step = (uint32_t)(100 + i % NS);
        r->bytes = i % 2 ? 1024 : 0;
        /* in the order validation wants where it wants one (ready <= start
         * <= end, comm begin <= comm end), any order between those */
        uint64_t p = near(&s, t0, 0), q = p + rnd(&s) % 5000, e = q + rnd(&s) % 90000;
        r->t_ready_dev_ns = rnd(&s) % 3 ? p : 0;
        r->t_start_dev_ns = rnd(&s) % 4 ? q : 0;
        r->t_end_dev_ns = rnd(&s) % 2 ? e : 0;
        p = near(&s, t0, e), q = p ? p + rnd(&s) % 7000 : 0;
        r->t_comm_begin_dev_ns = p;
        r->t_comm_end_dev_ns = rnd(&s) % 5 ? q : 0;
        r->t_release_dev_ns = near(&s, t0, q);
        x->r_p[i] = r;
    }
    memcpy(x->st0, x->st, sizeof(x->st));
    memcpy(x->g0, x->g, sizeof(x->g));
    memcpy(x->w0, x->w, sizeof(x->w));
    memcpy(x->r0, x->r, sizeof(x->r));
    x->es.steps = x->st_p, x->es.n_steps = NS;
    x->es.gens = x->g_p, x->es.n_gens = NS;
    x->es.remote_waits = x->w_p, x->es.n_remote_waits = NW;
    x->es.releases = x->r_p, x->es.n_releases = NR;
}

static int encode(Mkscope__V1__EpochSummary *es, uint8_t **buf, size_t *len, char *err,
                  size_t errlen)
{
    mks_envelope env;
    mks_wire_init(&env, "job", 0, 1);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    env.epoch_summary = es;
    return mks_wire_encode(&env, NULL, buf, len, err, errlen);
}

static int same_wait(const Mkscope__V1__RemoteWait *a, const Mkscope__V1__RemoteWait *b)
{
    return a->comm_gen == b->comm_gen && a->peer_rank == b->peer_rank && a->step == b->step &&
           a->t_begin_dev_ns == b->t_begin_dev_ns && a->t_end_dev_ns == b->t_end_dev_ns &&
           a->comm_gen_delta == 0 && a->n_dev_times == 0;
}

static int same_release(const Mkscope__V1__Release *a, const Mkscope__V1__Release *b)
{
    return a->comm_gen == b->comm_gen && a->consumer_rank == b->consumer_rank &&
           a->task_class == b->task_class && a->step == b->step && a->bytes == b->bytes &&
           a->t_ready_dev_ns == b->t_ready_dev_ns && a->t_start_dev_ns == b->t_start_dev_ns &&
           a->t_end_dev_ns == b->t_end_dev_ns && a->t_comm_begin_dev_ns == b->t_comm_begin_dev_ns &&
           a->t_comm_end_dev_ns == b->t_comm_end_dev_ns &&
           a->t_release_dev_ns == b->t_release_dev_ns && a->comm_gen_delta == 0 &&
           a->n_dev_times == 0;
}

/* Every row decoded is one of the originals, each original once. */
static void round_trip(uint64_t seed, uint64_t t0)
{
    static struct sample x;
    fill(&x, seed, t0);
    char err[256];
    uint8_t *plain, *compact;
    size_t plain_len, compact_len;
    assert_int_equal(encode(&x.es, &plain, &plain_len, err, sizeof(err)), 0);
    assert_int_equal(mks_wire_summary_compact_words(&x.es), NS * 3 + NW * 2 + NR * 6);
    assert_int_equal(mks_wire_summary_compact(&x.es, x.words, sizeof(x.words) / 8), 0);
    assert_true(x.es.dev_time_base > 0);
    /* compact once only */
    assert_int_equal(mks_wire_summary_compact(&x.es, x.words, sizeof(x.words) / 8), -EINVAL);
    assert_int_equal(encode(&x.es, &compact, &compact_len, err, sizeof(err)), 0);
    assert_true(compact_len < plain_len);
    mks_envelope *env = NULL;
    int rc = mks_wire_decode(compact, compact_len, NULL, &env, err, sizeof(err));
    if (rc)
        fail_msg("seed %llu: %s", (unsigned long long)seed, err);
    const Mkscope__V1__EpochSummary *d = env->epoch_summary;
    assert_int_equal(d->dev_time_base, 0);
    assert_int_equal(d->n_steps, NS);
    for (size_t i = 0; i < NS; i++) {
        assert_int_equal(d->steps[i]->t_begin_dev_ns, x.st0[i].t_begin_dev_ns);
        assert_int_equal(d->steps[i]->t_end_dev_ns, x.st0[i].t_end_dev_ns);
        assert_int_equal(d->steps[i]->tasks, x.st0[i].tasks);
        assert_int_equal(d->steps[i]->n_dev_times, 0);
        assert_int_equal(d->gens[i]->t_dev_ns, x.g0[i].t_dev_ns);
    }
    int used_w[NW] = {0}, used_r[NR] = {0};
    assert_int_equal(d->n_remote_waits, NW);
    for (size_t i = 0; i < NW; i++) {
        size_t k = 0;
        while (k < NW && (used_w[k] || !same_wait(d->remote_waits[i], &x.w0[k])))
            k++;
        assert_true(k < NW);
        used_w[k] = 1;
    }
    assert_int_equal(d->n_releases, NR);
    for (size_t i = 0; i < NR; i++) {
        size_t k = 0;
        while (k < NR && (used_r[k] || !same_release(d->releases[i], &x.r0[k])))
            k++;
        assert_true(k < NR);
        used_r[k] = 1;
    }
    /* sorted by comm_gen */
    for (size_t i = 1; i < NR; i++)
        assert_true(d->releases[i]->comm_gen >= d->releases[i - 1]->comm_gen);
    mks_wire_free(env);
    free(plain);
    free(compact);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        round_trip(seed, 1700000000000000000ull); /* a GPU's globaltimer */
        round_trip(seed, 320000000000ull);        /* a host's CLOCK_MONOTONIC */
        round_trip(seed, 2000000);                /* near 0: a delta may reach it */
    }
}

/* What the compaction saves on a globaltimer's times: the rows' times and
 * comm_gens in about half the bytes. */
static void test_smaller(void **state)
{
    (void)state;
    static struct sample x;
    fill(&x, 7, 1700000000000000000ull);
    char err[256];
    uint8_t *a, *b;
    size_t la, lb;
    assert_int_equal(encode(&x.es, &a, &la, err, sizeof(err)), 0);
    assert_int_equal(mks_wire_summary_compact(&x.es, x.words, sizeof(x.words) / 8), 0);
    assert_int_equal(encode(&x.es, &b, &lb, err, sizeof(err)), 0);
    assert_true(lb * 10 < la * 7);
    free(a);
    free(b);
}

/* A summary without device times stays plain. */
static void test_no_times(void **state)
{
    (void)state;
    Mkscope__V1__EpochSummary es = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
    assert_int_equal(mks_wire_summary_compact(&es, NULL, 0), 0);
    assert_int_equal(es.dev_time_base, 0);
}

/* Encodes x (compacted, then changed by the caller) and expects decode to
 * refuse it with a reason holding want. */
static void refused(struct sample *x, const char *want)
{
    char err[256] = "";
    uint8_t *buf;
    size_t len;
    assert_int_equal(encode(&x->es, &buf, &len, err, sizeof(err)), 0);
    mks_envelope *env = NULL;
    int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
    if (rc != -EBADMSG || !strstr(err, want))
        fail_msg("want -EBADMSG '%s', got %d '%s'", want, rc, err);
    free(buf);
}

static void test_malformed(void **state)
{
    (void)state;
    static struct sample x;
    uint64_t extra[8] = {5, 6, 7, 8, 9, 10, 11, 12};
#define COMPACT()                                                                                  \
    do {                                                                                           \
        fill(&x, 3, 320000000000ull);                                                              \
        assert_int_equal(mks_wire_summary_compact(&x.es, x.words, sizeof(x.words) / 8), 0);        \
    } while (0)
    COMPACT();
    x.st[0].t_begin_dev_ns = 5; /* a plain time beside the compact ones */
    refused(&x, "a plain device time in a compact summary");
    COMPACT();
    x.w[0].comm_gen = 9;
    refused(&x, "comm_gen in a compact summary");
    COMPACT();
    x.r[0].dev_times = extra, x.r[0].n_dev_times = 7;
    refused(&x, "7 dev_times, at most 6");
    COMPACT();
    x.es.dev_time_base = UINT64_MAX - 2; /* base + first time wraps */
    refused(&x, "past 2^64");
    COMPACT();
    /* a difference that takes a time to 0 or below */
    uint64_t down[2] = {10, (20u << 1) - 1 + 1};
    x.st[0].dev_times = down, x.st[0].n_dev_times = 2;
    x.es.dev_time_base = 1;
    refused(&x, "outside 1..2^64");
    COMPACT();
    x.w[1].comm_gen_delta = UINT64_MAX; /* the sum of deltas wraps */
    x.w[2].comm_gen_delta = UINT64_MAX;
    refused(&x, "comm_gen_delta past 2^64");
    /* the compact fields without dev_time_base */
    fill(&x, 3, 320000000000ull);
    x.g[0].dev_times = extra, x.g[0].n_dev_times = 1;
    refused(&x, "compact form without dev_time_base");
    /* a time the plain form refuses is refused once expanded */
    COMPACT();
    uint64_t late[2] = {1, 1};
    x.es.dev_time_base = MKS_WIRE_MAX_TIME;
    x.st[0].dev_times = late, x.st[0].n_dev_times = 1;
    refused(&x, "above the bound");
#undef COMPACT
}

/* A compact summary as a seed of fuzz_wire's corpus (its first byte the
 * mode: no key, any body). */
static int write_corpus(const char *dir)
{
    static struct sample x;
    fill(&x, 11, 1700000000000000000ull);
    if (mks_wire_summary_compact(&x.es, x.words, sizeof(x.words) / 8))
        return 1;
    uint8_t *buf;
    size_t len;
    char err[256], path[4096];
    if (encode(&x.es, &buf, &len, err, sizeof(err)))
        return 1;
    snprintf(path, sizeof(path), "%s/epoch_summary-compact", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(buf);
        return 1;
    }
    uint8_t mode = 0;
    fwrite(&mode, 1, 1, f);
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write-corpus"))
        return write_corpus(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_smaller),
        cmocka_unit_test(test_no_times),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
