/*
 * wire_bench: what one hostile message costs a receiver, decoded the way the
 * wire library did before (decode, validate, then check the MAC) and the way
 * it does now (mks_wire_decode_for: size, MAC, body, bounded decode), and how
 * much memory real summaries take to decode (which sets
 * MKS_WIRE_DECODE_FACTOR).  Each case runs in a child process so its peak
 * RSS is its own.
 *
 * usage: wire_bench [MIB]   (hostile message size, default 16)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "mkscope/wire.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* An epoch summary made of empty coverage records, 2 bytes each. */
static uint8_t *hostile(size_t len, size_t *len_p)
{
    uint8_t *b = malloc(len);
    size_t at = 0, body;
    b[at++] = 0x08, b[at++] = 0x01, b[at++] = 0x1a, b[at++] = 0x01, b[at++] = 'j', b[at++] = 0x6a;
    body = (len - at - 4) & ~(size_t)1;
    for (int i = 0; i < 4; i++)
        b[at++] = (uint8_t)(((body >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0));
    for (size_t i = 0; i < body / 2; i++)
        b[at++] = 0x72, b[at++] = 0x00;
    *len_p = at;
    return b;
}

/* The order of the wire library before: decode (protobuf-c's allocator, no
 * bound), validate, and only then the MAC. */
static int decode_old(const uint8_t *buf, size_t len, const struct mks_wire_key *key)
{
    mks_envelope *env = mkscope__v1__envelope__unpack(NULL, len, buf);
    if (!env)
        return -EBADMSG;
    char err[256];
    int rc = mks_wire_validate(env, err, sizeof(err));
    if (!rc && key &&
        crypto_auth_verify(buf + len - 32, buf, len - 35, key->bytes) != 0)
        rc = -EACCES;
    mkscope__v1__envelope__free_unpacked(env, NULL);
    return rc;
}

static int decode_new(const uint8_t *buf, size_t len, const struct mks_wire_key *key)
{
    mks_envelope *env = NULL;
    char err[256];
    int rc = mks_wire_decode_for(buf, len, MKS_WIRE_ACCEPT_INGEST, key, &env, err, sizeof(err));
    mks_wire_free(env);
    return rc;
}

static void run(const char *what, int (*fn)(const uint8_t *, size_t, const struct mks_wire_key *),
                const uint8_t *buf, size_t len, const struct mks_wire_key *key)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        double t = now_s();
        int rc = fn(buf, len, key);
        t = now_s() - t;
        getrusage(RUSAGE_SELF, &r1);
        printf("%-34s %8.1f ms  peak RSS +%7.1f MB  (%s)\n", what, t * 1e3,
               (double)(r1.ru_maxrss - r0.ru_maxrss) / 1024.0, rc ? strerror(-rc) : "accepted");
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

/* Bytes protobuf-c allocates for one decode, counted. */
static size_t counted;
static void *count_alloc(void *d, size_t n)
{
    (void)d;
    counted += n;
    return malloc(n);
}
static void count_free(void *d, void *p)
{
    (void)d;
    free(p);
}

static double factor(const uint8_t *buf, size_t len)
{
    ProtobufCAllocator a = {.alloc = count_alloc, .free = count_free};
    counted = 0;
    mks_envelope *env = mkscope__v1__envelope__unpack(&a, len, buf);
    if (!env)
        return -1;
    mkscope__v1__envelope__free_unpacked(env, NULL);
    return (double)counted / (double)len;
}

/* A summary shaped like a busy rank's: n task stats with 24-bucket
 * histograms, waits, releases, workers, coverage of every hook. */
static uint8_t *real_summary(int n, size_t *len_p)
{
    Mkscope__V1__EpochSummary s = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
    Mkscope__V1__TaskStat *ts = calloc((size_t)n, sizeof(*ts)), **tsp = calloc((size_t)n, sizeof(*tsp));
    Mkscope__V1__Hist *h = calloc((size_t)n * 2, sizeof(*h));
    Mkscope__V1__RemoteWait *rw = calloc((size_t)n, sizeof(*rw)), **rwp = calloc((size_t)n, sizeof(*rwp));
    Mkscope__V1__WorkerStat *ws = calloc((size_t)n, sizeof(*ws)), **wsp = calloc((size_t)n, sizeof(*wsp));
    static uint64_t b[24];
    for (int i = 0; i < 24; i++)
        b[i] = (uint64_t)(i * 37 % 500);
    for (int i = 0; i < n; i++) {
        mkscope__v1__task_stat__init(&ts[i]);
        for (int k = 0; k < 2; k++) {
            mkscope__v1__hist__init(&h[2 * i + k]);
            h[2 * i + k].buckets = b, h[2 * i + k].n_buckets = 24;
            h[2 * i + k].count = 4000, h[2 * i + k].sum = 12345678, h[2 * i + k].max = 99999;
        }
        ts[i].task_class = (uint32_t)(i % 64), ts[i].step = (uint32_t)(i / 64), ts[i].count = 4000;
        ts[i].sum_run_ns = 12345678, ts[i].queue = &h[2 * i], ts[i].run = &h[2 * i + 1];
        tsp[i] = &ts[i];
        mkscope__v1__remote_wait__init(&rw[i]);
        rw[i].comm_gen = 0x4000000000000000ull | (uint64_t)i, rw[i].peer_rank = 1, rw[i].step = 3;
        rw[i].t_begin_dev_ns = 1700000000000000000ull, rw[i].t_end_dev_ns = 1700000000000500000ull;
        rwp[i] = &rw[i];
        mkscope__v1__worker_stat__init(&ws[i]);
        ws[i].worker = (uint32_t)i, ws[i].step = 3, ws[i].busy_ns = 90000000, ws[i].tasks = 800;
        wsp[i] = &ws[i];
    }
    s.task_stats = tsp, s.n_task_stats = (size_t)n;
    s.remote_waits = rwp, s.n_remote_waits = (size_t)n;
    s.workers = wsp, s.n_workers = (size_t)n;
    mks_envelope env;
    mks_wire_init(&env, "bench", 0, 1);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    env.epoch_summary = &s;
    uint8_t *buf = NULL;
    char err[256];
    if (mks_wire_encode(&env, NULL, &buf, len_p, err, sizeof(err)))
        fprintf(stderr, "encode: %s\n", err);
    free(ts), free(tsp), free(h), free(rw), free(rwp), free(ws), free(wsp);
    return buf;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 16;
    if (mib < 1 || mib > 16) {
        fprintf(stderr, "usage: wire_bench [MIB 1..16]\n");
        return 2;
    }
    if (sodium_init() < 0)
        return 1;
    struct mks_wire_key key;
    memset(key.bytes, 7, sizeof(key.bytes));
    size_t len;
    uint8_t *h = hostile((mib << 20) - 64, &len);
    /* After the summary, a MAC field of the right shape with wrong bytes. */
    h = realloc(h, len + 35);
    memcpy(h + len, "\xa2\x06\x20", 3);
    memset(h + len + 3, 0x42, 32);
    len += 35;
    printf("hostile message: %zu bytes, %zu empty coverage records, no valid MAC\n", len,
           (len - 10) / 2);
    run("before, with a key", decode_old, h, len, &key);
    run("now, with a key", decode_new, h, len, &key);
    run("before, without a key", decode_old, h, len, NULL);
    run("now, without a key", decode_new, h, len, NULL);
    free(h);
    printf("\nmemory to decode / message size, real summaries:\n");
    int sizes[] = {16, 256, 4096, 65536};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint8_t *buf = real_summary(sizes[i], &len);
        if (!buf)
            return 1;
        printf("  %6d task stats, waits, workers: %9zu bytes, %.2fx\n", sizes[i], len,
               factor(buf, len));
        free(buf);
    }
    return 0;
}
