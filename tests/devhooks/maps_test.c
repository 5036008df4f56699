/*
 * Map semantics of each type and their behaviour under concurrent CPU
 * threads (the CPU stand-in for many device workers): exact totals after
 * 4 threads x 100k updates of the hash and the histogram.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/maps.h"

struct tmap {
    struct mks_map_desc d;
    struct mks_maps m;
    uint8_t *arena;
};

static void tmap_init(struct tmap *t, uint32_t type, uint32_t ks, uint32_t vs, uint32_t n,
                      uint32_t workers)
{
    memset(t, 0, sizeof(*t));
    t->d.type = type;
    t->d.key_size = ks;
    t->d.value_size = vs;
    t->d.max_entries = n;
    assert_int_equal(mks_map_layout(&t->d, workers, NULL, 0), 0);
    t->d.bank_off[0] = 0;
    t->d.bank_off[1] = type == MKS_MAP_RINGBUF ? 0 : t->d.bank_bytes;
    t->d.state = MKS_MAPSTATE_LIVE;
    t->arena = calloc(1, 2 * t->d.bank_bytes);
    assert_non_null(t->arena);
    t->m.descs = &t->d;
    t->m.n_descs = 1;
    t->m.arena = t->arena;
    t->m.arena_len = 2 * t->d.bank_bytes;
}

static void test_layout_rejects(void **state)
{
    struct mks_map_desc d;
    char err[128];
    (void)state;
    memset(&d, 0, sizeof(d));
    d.type = MKS_MAP_ARRAY;
    d.key_size = 8;
    d.value_size = 8;
    d.max_entries = 4;
    memcpy(d.name, "bad", 4);
    assert_int_equal(mks_map_layout(&d, 1, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "map 'bad': array and histogram keys must be 4 bytes (u32)");
    d.type = MKS_MAP_HIST;
    d.key_size = 4;
    assert_int_equal(mks_map_layout(&d, 1, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "struct mks_hist"));
    d.type = 7; /* a Linux map type number */
    assert_int_equal(mks_map_layout(&d, 1, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "unsupported map type"));
}

static void test_array_and_perworker(void **state)
{
    struct tmap a, p;
    uint32_t k = 2, big = 4;
    uint64_t v = 9, *got;
    (void)state;
    tmap_init(&a, MKS_MAP_ARRAY, 4, 8, 4, 1);
    assert_int_equal(mks_map_update(&a.m, &a.d, &k, &v, MKS_MAP_ANY), 0);
    got = mks_map_lookup(&a.m, &a.d, &k);
    assert_non_null(got);
    assert_int_equal(*got, 9);
    assert_null(mks_map_lookup(&a.m, &a.d, &big));
    assert_int_equal(mks_map_update(&a.m, &a.d, &k, &v, MKS_MAP_NOEXIST), -EEXIST);
    assert_int_equal(mks_map_delete(&a.m, &a.d, &k), -EINVAL);
    /* the other bank is independent */
    a.m.bank = 1;
    assert_int_equal(*(uint64_t *)mks_map_lookup(&a.m, &a.d, &k), 0);

    tmap_init(&p, MKS_MAP_PERWORKER_ARRAY, 4, 8, 4, 3);
    for (uint32_t w = 0; w < 3; w++) {
        p.m.worker = w;
        v = w + 1;
        assert_int_equal(mks_map_update(&p.m, &p.d, &k, &v, MKS_MAP_ANY), 0);
    }
    for (uint32_t w = 0; w < 3; w++) {
        p.m.worker = w;
        assert_int_equal(*(uint64_t *)mks_map_lookup(&p.m, &p.d, &k), w + 1);
    }
    p.m.worker = 3; /* no such worker */
    assert_null(mks_map_lookup(&p.m, &p.d, &k));
    free(a.arena);
    free(p.arena);
}

struct sum_arg {
    uint64_t sum, n;
};
static int sum_visit(const void *key, const void *value, void *arg)
{
    struct sum_arg *s = arg;
    (void)key;
    s->sum += *(const uint64_t *)value;
    s->n++;
    return 0;
}

static void test_perworker_visit_sums(void **state)
{
    struct tmap p;
    struct sum_arg s = {0, 0};
    uint32_t k = 1;
    uint64_t v;
    (void)state;
    tmap_init(&p, MKS_MAP_PERWORKER_ARRAY, 4, 8, 2, 4);
    for (uint32_t w = 0; w < 4; w++) {
        p.m.worker = w;
        v = 10 * (w + 1);
        assert_int_equal(mks_map_update(&p.m, &p.d, &k, &v, MKS_MAP_ANY), 0);
    }
    assert_int_equal(mks_map_bank_visit(p.arena, &p.d, sum_visit, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.sum, 100);
    free(p.arena);
}

static void test_hash_semantics(void **state)
{
    struct tmap h;
    uint64_t key, val, *got;
    struct sum_arg s = {0, 0};
    (void)state;
    tmap_init(&h, MKS_MAP_HASH, 8, 8, 4, 1);
    for (key = 1; key <= 4; key++) {
        val = key * 100;
        assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_NOEXIST), 0);
    }
    key = 5;
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_ANY), -E2BIG);
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_EXIST), -ENOENT);
    key = 3;
    got = mks_map_lookup(&h.m, &h.d, &key);
    assert_non_null(got);
    assert_int_equal(*got, 300);
    val = 301;
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_NOEXIST), -EEXIST);
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_EXIST), 0);
    assert_int_equal(*got, 301);
    assert_int_equal(mks_map_delete(&h.m, &h.d, &key), 0);
    assert_null(mks_map_lookup(&h.m, &h.d, &key));
    assert_int_equal(mks_map_delete(&h.m, &h.d, &key), -ENOENT);
    assert_int_equal(mks_map_bank_visit(h.arena, &h.d, sum_visit, &s), 0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.sum, 100 + 200 + 400);
    /* Tombstones keep their capacity until the bank is reset. */
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_ANY), -E2BIG);
    mks_map_bank_reset(h.arena, &h.d, 0);
    assert_int_equal(mks_map_update(&h.m, &h.d, &key, &val, MKS_MAP_ANY), 0);
    free(h.arena);
}

static void test_hist(void **state)
{
    struct tmap t;
    uint32_t k = 0;
    struct mks_hist *h;
    (void)state;
    tmap_init(&t, MKS_MAP_HIST, 4, sizeof(struct mks_hist), 2, 1);
    assert_int_equal(mks_map_hist_add(&t.m, &t.d, &k, 0), 0);
    assert_int_equal(mks_map_hist_add(&t.m, &t.d, &k, 1), 0);
    assert_int_equal(mks_map_hist_add(&t.m, &t.d, &k, 1000), 0);
    assert_int_equal(mks_map_hist_add(&t.m, &t.d, &k, ~0ull), 0);
    h = mks_map_lookup(&t.m, &t.d, &k);
    assert_int_equal(h->count, 4);
    assert_int_equal(h->buckets[0], 1);               /* 0 */
    assert_int_equal(h->buckets[1], 1);               /* 1 */
    assert_int_equal(h->buckets[10], 1);              /* 512..1023 */
    assert_int_equal(h->buckets[MKS_HIST_BUCKETS - 1], 1); /* clamped */
    assert_int_equal(mks_hist_bucket(1000), 10);
    k = 2;
    assert_int_equal(mks_map_hist_add(&t.m, &t.d, &k, 1), -E2BIG);
    free(t.arena);
}

struct rec_arg {
    uint32_t n, last;
};
static int rec_cb(uint32_t worker, const void *rec, uint32_t len, void *arg)
{
    struct rec_arg *a = arg;
    (void)worker;
    assert_int_equal(len, 12);
    a->last = *(const uint32_t *)rec;
    a->n++;
    return 0;
}

static void test_ringbuf(void **state)
{
    struct tmap t;
    uint8_t rec[12];
    struct rec_arg a = {0, 0};
    uint64_t dropped = 0;
    uint32_t ok = 0;
    (void)state;
    tmap_init(&t, MKS_MAP_RINGBUF, 0, 0, 64, 2); /* 64 bytes: two 24-byte records fit */
    for (uint32_t i = 0; i < 5; i++) {
        memset(rec, 0, sizeof(rec));
        memcpy(rec, &i, 4);
        if (mks_map_ringbuf_output(&t.m, &t.d, rec, sizeof(rec)) == 0)
            ok++;
    }
    assert_int_equal(ok, 2); /* 3 x 24 bytes > 64: the third does not fit */
    assert_int_equal(t.m.lost, 3);
    assert_int_equal(mks_map_ring_consume(t.arena, &t.d, 0, rec_cb, &a, &dropped), 0);
    assert_int_equal(a.n, 2);
    assert_int_equal(dropped, 3);
    /* After draining, records wrap around the end of the buffer intact. */
    for (uint32_t i = 10; i < 16; i++) {
        memcpy(rec, &i, 4);
        assert_int_equal(mks_map_ringbuf_output(&t.m, &t.d, rec, sizeof(rec)), 0);
        assert_int_equal(mks_map_ring_consume(t.arena, &t.d, 0, rec_cb, &a, &dropped), 0);
        assert_int_equal(a.last, i);
    }
    assert_int_equal(a.n, 8);
    assert_int_equal(mks_map_ringbuf_output(&t.m, &t.d, rec, 60), -EINVAL); /* > cap - 8 */
    free(t.arena);
}

#define THREADS 4
#define UPDATES 100000
#define KEYS    64

struct worker_arg {
    struct tmap *t;
    uint32_t id;
};

/* Lookup-or-insert then atomic add, as a monitor does on the device. */
static void *hash_worker(void *p)
{
    struct worker_arg *a = p;
    struct mks_maps m = a->t->m;
    m.worker = a->id;
    for (uint32_t i = 0; i < UPDATES; i++) {
        uint64_t key = (i * 2654435761u) % KEYS, zero = 0, *v;
        while (!(v = mks_map_lookup(&m, &a->t->d, &key))) {
            int rc = mks_map_update(&m, &a->t->d, &key, &zero, MKS_MAP_NOEXIST);
            if (rc != 0 && rc != -EEXIST)
                return (void *)1;
        }
        __atomic_fetch_add(v, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *hist_worker(void *p)
{
    struct worker_arg *a = p;
    struct mks_maps m = a->t->m;
    m.worker = a->id;
    for (uint32_t i = 0; i < UPDATES; i++) {
        uint32_t key = i % 2;
        if (mks_map_hist_add(&m, &a->t->d, &key, i) != 0)
            return (void *)1;
    }
    return NULL;
}

static void run_threads(struct tmap *t, void *(*fn)(void *))
{
    pthread_t th[THREADS];
    struct worker_arg a[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        a[i].t = t;
        a[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, fn, &a[i]), 0);
    }
    for (uint32_t i = 0; i < THREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
}

static void test_hash_concurrent(void **state)
{
    struct tmap t;
    struct sum_arg s = {0, 0};
    (void)state;
    tmap_init(&t, MKS_MAP_HASH, 8, 8, KEYS, THREADS);
    run_threads(&t, hash_worker);
    assert_int_equal(mks_map_bank_visit(t.arena, &t.d, sum_visit, &s), 0);
    assert_int_equal(s.n, KEYS); /* every key exactly once, no duplicate slots */
    assert_int_equal(s.sum, (uint64_t)THREADS * UPDATES);
    free(t.arena);
}

static void test_hist_concurrent(void **state)
{
    struct tmap t;
    uint64_t total = 0, sum = 0, per_bucket = 0;
    (void)state;
    tmap_init(&t, MKS_MAP_HIST, 4, sizeof(struct mks_hist), 2, THREADS);
    run_threads(&t, hist_worker);
    for (uint32_t k = 0; k < 2; k++) {
        struct mks_hist *h = mks_map_lookup(&t.m, &t.d, &k);
        total += h->count;
        sum += h->sum;
        for (int b = 0; b < MKS_HIST_BUCKETS; b++)
            per_bucket += h->buckets[b];
    }
    assert_int_equal(total, (uint64_t)THREADS * UPDATES);
    assert_int_equal(per_bucket, (uint64_t)THREADS * UPDATES);
    assert_int_equal(sum, (uint64_t)THREADS * ((uint64_t)UPDATES * (UPDATES - 1) / 2));
    free(t.arena);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_rejects),
        cmocka_unit_test(test_array_and_perworker),
        cmocka_unit_test(test_perworker_visit_sums),
        cmocka_unit_test(test_hash_semantics),
        cmocka_unit_test(test_hist),
        cmocka_unit_test(test_ringbuf),
        cmocka_unit_test(test_hash_concurrent),
        cmocka_unit_test(test_hist_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
