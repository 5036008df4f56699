/*
 * ingest_bench: the collector's CPU cost per summary, without the network
 * (docs/PERF.md, "Load").  The summaries of a mkscope-load recording,
 * rewritten for RANKS simulated ranks (job, rank, seq, epoch and steps of
 * their own, as mkscope-load sends them) and encoded ahead, are decoded and
 * stored as the collector's ingest loop does: batches of up to 512 messages
 * in one transaction, each decoded (mks_wire_decode_for), stored
 * (mks_store_ingest), answered (an Ack encoded) and freed.  It reports the
 * thread's CPU time per summary and per 10,000, split into decode and store
 * (commit included); the same figures under callgrind
 * (--toggle-collect=ingest_all) are instructions, which the machine's
 * other work does not change.
 *
 * With --counts the summaries are sent as an agent under the collector's
 * pressure sends them (budget.h, level 2): task counts and coverage only,
 * no per-step tables, records or histograms.
 *
 * usage: ingest_bench --recording FILE [--ranks N] [--summaries M]
 *                     [--db PATH] [--batch B] [--counts]
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "load.h"
#include "mkscope/store.h"

#define MAX_BATCH 512

struct src {
    mks_envelope *reg;
    mks_envelope **sum;
    size_t n;
    uint64_t step_lo, step_hi;
};

struct bench {
    struct src *src;
    uint32_t n_src, ranks;
    size_t n_msgs, batch;
    uint8_t **msg;
    size_t *len;
    struct mks_store *st;
    double decode_s, store_s, answer_s;
    bool counts;
};

static double thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int read_sources(struct bench *b, const char *path)
{
    struct load_rec rec;
    char err[512];
    if (load_rec_read(path, &rec, err, sizeof(err))) {
        fprintf(stderr, "ingest_bench: %s\n", err);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < rec.n && !rc; i++) {
        mks_envelope *env = NULL;
        if (mks_wire_decode(rec.msg[i], rec.len[i], NULL, &env, err, sizeof(err)) ||
            env->rank >= 4096) {
            fprintf(stderr, "ingest_bench: envelope %zu of %s: %s\n", i, path,
                    env ? "rank out of range" : err);
            mks_wire_free(env);
            rc = -1;
            break;
        }
        if (env->rank >= b->n_src) {
            struct src *s = realloc(b->src, (env->rank + 1) * sizeof(*s));
            if (!s) {
                mks_wire_free(env);
                rc = -1;
                break;
            }
            memset(s + b->n_src, 0, (env->rank + 1 - b->n_src) * sizeof(*s));
            b->src = s;
            b->n_src = env->rank + 1;
        }
        struct src *s = &b->src[env->rank];
        if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_REGISTER && !s->reg) {
            s->reg = env;
        } else if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY) {
            mks_envelope **v = realloc(s->sum, (s->n + 1) * sizeof(*v));
            if (!v) {
                mks_wire_free(env);
                rc = -1;
                break;
            }
            s->sum = v;
            s->sum[s->n++] = env;
            const Mkscope__V1__EpochSummary *e = env->epoch_summary;
            for (size_t k = 0; k < e->n_steps; k++) {
                uint64_t step = e->steps[k]->step;
                if (!s->step_hi || step < s->step_lo)
                    s->step_lo = step;
                if (step + 1 > s->step_hi)
                    s->step_hi = step + 1;
            }
        } else {
            mks_wire_free(env);
        }
    }
    load_rec_free(&rec);
    for (uint32_t r = 0; !rc && r < b->n_src; r++)
        if (!b->src[r].reg || !b->src[r].n) {
            fprintf(stderr, "ingest_bench: rank %u of %s has no registration or summary\n", r,
                    path);
            rc = -1;
        }
    return rc;
}

/* Every step number of a summary moved by delta. */
static void shift_steps(Mkscope__V1__EpochSummary *e, int64_t delta)
{
#define SHIFT(n, arr)                                                                              \
    for (size_t i = 0; i < e->n; i++)                                                              \
        e->arr[i]->step = (uint32_t)(e->arr[i]->step + delta);
    SHIFT(n_task_stats, task_stats)
    SHIFT(n_steps, steps)
    SHIFT(n_remote_waits, remote_waits)
    SHIFT(n_releases, releases)
    SHIFT(n_local_waits, local_waits)
    SHIFT(n_workers, workers)
    SHIFT(n_gens, gens)
#undef SHIFT
}

/* Summary `seq` of simulated rank `rank`, encoded: the recorded rank's
 * summary rewritten in place, its steps moved on by whole cycles of the
 * recording, then put back. */
static int encode_summary(struct bench *b, uint32_t rank, uint64_t seq, uint8_t **buf,
                          size_t *len)
{
    struct src *s = &b->src[rank % b->n_src];
    mks_envelope *env = s->sum[(seq - 1) % s->n];
    Mkscope__V1__EpochSummary *e = env->epoch_summary;
    uint64_t shift = (seq - 1) / s->n * (s->step_hi - s->step_lo);
    mks_envelope saved = *env;
    uint64_t epoch = e->epoch;
    mks_envelope fresh;
    mks_wire_init(&fresh, "bench", rank, seq);
    env->job = (char *)"bench", env->rank = rank, env->seq = seq, env->incarnation = 1;
    env->nonce = fresh.nonce, env->sent_ns = fresh.sent_ns;
    e->epoch = seq;
    shift_steps(e, (int64_t)shift);
    /* counts only: hidden for the encoding, put back after */
    size_t n_s = e->n_steps, n_w = e->n_remote_waits, n_r = e->n_releases, n_lw = e->n_local_waits;
    size_t n_wk = e->n_workers, n_g = e->n_gens, n_m = e->n_maps;
    uint32_t tier = e->detail_tier;
    Mkscope__V1__Hist *hist[2 * 4096];
    size_t n_h = e->n_task_stats < 4096 ? e->n_task_stats : 4096;
    if (b->counts) {
        e->n_steps = e->n_remote_waits = e->n_releases = e->n_local_waits = 0;
        e->n_workers = e->n_gens = e->n_maps = 0;
        e->detail_tier = 0, e->pressure = 2;
        for (size_t i = 0; i < n_h; i++) {
            hist[2 * i] = e->task_stats[i]->queue, hist[2 * i + 1] = e->task_stats[i]->run;
            e->task_stats[i]->queue = e->task_stats[i]->run = NULL;
        }
    }
    char err[256];
    int rc = mks_wire_encode(env, NULL, buf, len, err, sizeof(err));
    if (b->counts) {
        e->n_steps = n_s, e->n_remote_waits = n_w, e->n_releases = n_r, e->n_local_waits = n_lw;
        e->n_workers = n_wk, e->n_gens = n_g, e->n_maps = n_m;
        e->detail_tier = tier, e->pressure = 0;
        for (size_t i = 0; i < n_h; i++)
            e->task_stats[i]->queue = hist[2 * i], e->task_stats[i]->run = hist[2 * i + 1];
    }
    shift_steps(e, -(int64_t)shift);
    e->epoch = epoch;
    *env = saved;
    if (rc)
        fprintf(stderr, "ingest_bench: cannot encode: %s\n", err);
    return rc;
}

static int register_ranks(struct bench *b)
{
    char err[512];
    uint64_t now = load_real_ns();
    if (mks_store_batch_begin(b->st, err, sizeof(err)))
        goto fail;
    for (uint32_t r = 0; r < b->ranks; r++) {
        mks_envelope *t = b->src[r % b->n_src].reg;
        Mkscope__V1__Register reg = *t->register_;
        reg.n_ranks = b->ranks;
        mks_envelope env;
        mks_wire_init(&env, "bench", r, 0);
        env.incarnation = 1;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
        env.register_ = &reg;
        uint64_t seq;
        if (mks_store_ingest(b->st, &env, now, &seq, err, sizeof(err)))
            goto fail;
    }
    if (mks_store_batch_commit(b->st, err, sizeof(err)))
        goto fail;
    return 0;
fail:
    fprintf(stderr, "ingest_bench: registration: %s\n", err);
    return -1;
}

/* The measured part (callgrind: --toggle-collect=ingest_all). */
__attribute__((noinline)) int ingest_all(struct bench *b)
{
    char err[512];
    mks_envelope *env[MAX_BATCH];
    for (size_t done = 0; done < b->n_msgs;) {
        size_t n = b->n_msgs - done < b->batch ? b->n_msgs - done : b->batch;
        double t0 = thread_s();
        for (size_t i = 0; i < n; i++)
            if (mks_wire_decode_for(b->msg[done + i], b->len[done + i], MKS_WIRE_ACCEPT_INGEST,
                                    NULL, &env[i], err, sizeof(err))) {
                fprintf(stderr, "ingest_bench: decode: %s\n", err);
                return -1;
            }
        double t1 = thread_s();
        uint64_t now = load_real_ns();
        if (mks_store_batch_begin(b->st, err, sizeof(err)))
            goto fail;
        uint64_t seqs[MAX_BATCH];
        for (size_t i = 0; i < n; i++)
            if (mks_store_ingest(b->st, env[i], now, &seqs[i], err, sizeof(err)))
                goto fail;
        if (mks_store_batch_commit(b->st, err, sizeof(err)))
            goto fail;
        double t2 = thread_s();
        /* the answers the ingest loop sends: an Ack each */
        for (size_t i = 0; i < n; i++) {
            mks_envelope out;
            mks_wire_init(&out, env[i]->job, env[i]->rank, env[i]->seq);
            out.reply_to = env[i]->nonce;
            Mkscope__V1__Ack ack = MKSCOPE__V1__ACK__INIT;
            ack.up_to_seq = seqs[i];
            out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
            out.ack = &ack;
            uint8_t *buf;
            size_t len;
            if (mks_wire_encode(&out, NULL, &buf, &len, err, sizeof(err))) {
                fprintf(stderr, "ingest_bench: ack: %s\n", err);
                return -1;
            }
            free(buf);
            mks_wire_free(env[i]);
        }
        double t3 = thread_s();
        b->decode_s += t1 - t0, b->store_s += t2 - t1, b->answer_s += t3 - t2;
        done += n;
    }
    return 0;
fail:
    fprintf(stderr, "ingest_bench: store: %s\n", err);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ingest_bench --recording FILE [--ranks N] [--summaries M] [--db PATH]"
               " [--batch B] [--counts]\n"
               "  decodes and stores M summaries (default 20000) of N simulated ranks (default"
               " 1024)\n  in batches of B (default 512, at most 512) into PATH (default a new"
               " file in /tmp);\n  --counts: as sent under the collector's pressure (task counts and"
               " coverage only)\n");
}

int main(int argc, char **argv)
{
    const char *rec = NULL, *db = NULL;
    struct bench b = {.ranks = 1024, .n_msgs = 20000, .batch = MAX_BATCH};
    static const struct option lo[] = {{"recording", required_argument, NULL, 'r'},
                                       {"ranks", required_argument, NULL, 'n'},
                                       {"summaries", required_argument, NULL, 'm'},
                                       {"db", required_argument, NULL, 'd'},
                                       {"batch", required_argument, NULL, 'b'},
                                       {"counts", no_argument, NULL, 'c'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0}};
    int o;
    char *end;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        unsigned long v = 0;
        if (o == 'n' || o == 'm' || o == 'b') {
            errno = 0;
            v = strtoul(optarg, &end, 10);
            if (errno || *end || !v || v > 100000000ul) {
                fprintf(stderr, "ingest_bench: --%s wants a positive number, not '%s'\n",
                        o == 'n' ? "ranks" : o == 'm' ? "summaries" : "batch", optarg);
                return 2;
            }
        }
        switch (o) {
        case 'r': rec = optarg; break;
        case 'n': b.ranks = (uint32_t)v; break;
        case 'm': b.n_msgs = v; break;
        case 'd': db = optarg; break;
        case 'b': b.batch = v > MAX_BATCH ? MAX_BATCH : v; break;
        case 'c': b.counts = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!rec || optind != argc) {
        usage(stderr);
        return 2;
    }
    char tmp[] = "/tmp/ingest_bench.XXXXXX", path[64];
    if (!db) {
        if (!mkdtemp(tmp)) {
            perror("ingest_bench: mkdtemp");
            return 1;
        }
        snprintf(path, sizeof(path), "%s/store.db", tmp);
        db = path;
    }
    int rc = 1;
    if (read_sources(&b, rec))
        goto out;
    b.msg = calloc(b.n_msgs, sizeof(*b.msg));
    b.len = calloc(b.n_msgs, sizeof(*b.len));
    if (!b.msg || !b.len)
        goto out;
    for (size_t i = 0; i < b.n_msgs; i++)
        if (encode_summary(&b, (uint32_t)(i % b.ranks), i / b.ranks + 1, &b.msg[i], &b.len[i]))
            goto out;
    /* the collector's own store options (main.c) */
    struct mks_store_opts so = {.sz = sizeof(so), .path = db, .checkpoint_thread = 1,
                                .max_age_ns = 24ull * 3600 * 1000000000ull,
                                .max_bytes = 100ull << 30,
                                .detail_age_ns = 3600ull * 1000000000ull};
    char err[512];
    if (mks_store_open(&so, &b.st, err, sizeof(err))) {
        fprintf(stderr, "ingest_bench: %s\n", err);
        goto out;
    }
    if (register_ranks(&b))
        goto out;
    double t0 = thread_s();
    if (ingest_all(&b))
        goto out;
    double all = thread_s() - t0, per = 1e6 / (double)b.n_msgs;
    size_t bytes = 0;
    for (size_t i = 0; i < b.n_msgs; i++)
        bytes += b.len[i];
    printf("%zu summaries of %u ranks (%.0f bytes each), batches of %zu: %.2f CPU s per 10k"
           " summaries, %.1f us each: decode %.1f, store %.1f, answer %.1f\n",
           b.n_msgs, b.ranks, (double)bytes / (double)b.n_msgs, b.batch,
           all * 1e4 / (double)b.n_msgs, all * per, b.decode_s * per, b.store_s * per,
           b.answer_s * per);
    rc = 0;
out:
    mks_store_close(b.st);
    for (size_t i = 0; b.msg && i < b.n_msgs; i++)
        free(b.msg[i]);
    free(b.msg);
    free(b.len);
    for (uint32_t r = 0; r < b.n_src; r++) {
        mks_wire_free(b.src[r].reg);
        for (size_t i = 0; i < b.src[r].n; i++)
            mks_wire_free(b.src[r].sum[i]);
        free(b.src[r].sum);
    }
    free(b.src);
    if (db == path) {
        char f[96];
        static const char *const sfx[] = {"", "-wal", "-shm"};
        for (int i = 0; i < 3; i++) {
            snprintf(f, sizeof(f), "%s%s", path, sfx[i]);
            unlink(f);
        }
        rmdir(tmp);
    }
    return rc;
}
