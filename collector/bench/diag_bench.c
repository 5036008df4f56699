/*
 * diag_bench: how long `mkscope diagnose` takes on a long job.
 *
 * Fills a store (a file, kept for the next call with the same shape) with
 * summaries shaped like the CPU bench's at 5 ms epochs: per rank and epoch
 * STEPS_PER_EPOCH decode steps, each with 18 task classes (histograms),
 * 2 layers x 2 all-reduces of remote waits on every peer and releases to
 * every peer, a local release record per class, step times and coverage.
 * Rank 1's attention runs 300 us longer in every step (a straggler its
 * peers wait on) and rank 2's o_proj 5 ms longer in 5 steps in the middle,
 * so the diagnosis has both kinds of group to find.  Then times
 * mks_diagnose over all steps and over the last 1000 (--last), on one
 * thread, best of three.
 *
 * usage: diag_bench [RANKS] [STEPS] [DBDIR]   (defaults 4 60000 /tmp)
 *        diag_bench --store FILE --job JOB [--last N | --step N] [--rows]: time
 *        the diagnosis of a job in a collector's store and print its answer
 *        (--rows: a whole job's step times from every step row, not the
 *        per-step aggregates, for comparing the two); a last --min-steps N
 *        as `mkscope diagnose --min-steps N` (bench/accuracy/rescore.sh)
 *        diag_bench --store FILE --job JOB --fill: fill the store's per-step
 *        aggregates at once (a store an older collector wrote)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "diagnose.h"
#include "mkscope/commid.h"
#include "mkscope/store.h"

#define CLASSES 18
#define LAYERS 2
#define STEPS_PER_EPOCH 2
#define STEP_NS 1200000ull
#define ATTN 2
#define OPROJ 3
#define REDUCE 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU time of this thread: the machine is shared, wall time says more
 * about the neighbours than about the diagnosis. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s, uint64_t n)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (*s >> 33) % n;
}

struct shape {
    uint32_t ranks, steps;
};

static void put_hist(uint64_t *b, uint64_t v, uint64_t n)
{
    int k = 0;
    while (k < 63 && (1ull << k) <= v)
        k++;
    b[k] += n;
}

/* One epoch summary of `rank` carrying steps s0 .. s0 + STEPS_PER_EPOCH - 1. */
static int encode(const struct shape *sh, uint32_t rank, uint32_t s0, uint8_t **buf, size_t *len,
                  uint64_t *seed)
{
    enum { NS = STEPS_PER_EPOCH };
    const uint32_t R = sh->ranks, NT = 2 * LAYERS * (R - 1);
    static uint64_t hb[NS][CLASSES][2][64];
    static Mkscope__V1__TaskStat ts[NS * CLASSES];
    static Mkscope__V1__TaskStat *tsp[NS * CLASSES];
    static Mkscope__V1__Hist h[NS * CLASSES][2];
    Mkscope__V1__EpochSummary s = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
    Mkscope__V1__StepTime st[NS], *stp[NS];
    size_t nw_cap = (size_t)NS * NT, nr_cap = (size_t)NS * (NT + CLASSES);
    Mkscope__V1__RemoteWait *rw = calloc(nw_cap, sizeof(*rw));
    Mkscope__V1__RemoteWait **rwp = calloc(nw_cap, sizeof(*rwp));
    Mkscope__V1__Release *rl = calloc(nr_cap, sizeof(*rl));
    Mkscope__V1__Release **rlp = calloc(nr_cap, sizeof(*rlp));
    if (!rw || !rwp || !rl || !rlp)
        return -1;
    size_t nts = 0, nw = 0, nr = 0;
    for (uint32_t k = 0; k < NS; k++) {
        uint32_t step = s0 + k;
        uint64_t base = 1000000000ull + step * (STEP_NS + 400000);
        bool window = rank == 2 && step >= sh->steps / 2 && step < sh->steps / 2 + 5;
        uint64_t late = 300000 + (window ? 5000000 : 0); /* what peers wait on the faulty */
        memset(hb[k], 0, sizeof(hb[k]));
        for (uint32_t c = 0; c < CLASSES; c++) {
            Mkscope__V1__TaskStat *t = &ts[nts];
            mkscope__v1__task_stat__init(t);
            uint64_t n = c < 10 ? 8 : 2, run = 3000 + 2000 * c + rnd(seed, 1000);
            if (c == ATTN && rank == 1)
                run += 300000 / 8 * 2; /* the straggler */
            if (c == OPROJ && window)
                run += 5000000 / 8 * 2;
            for (int q = 0; q < 2; q++) {
                mkscope__v1__hist__init(&h[nts][q]);
                uint64_t v = q ? run : 20000 + rnd(seed, 5000);
                put_hist(hb[k][c][q], v, n);
                h[nts][q].buckets = hb[k][c][q], h[nts][q].n_buckets = 40;
                h[nts][q].count = n, h[nts][q].sum = n * v;
            }
            t->task_class = c, t->step = step, t->count = n, t->sum_run_ns = h[nts][1].sum;
            t->queue = &h[nts][0], t->run = &h[nts][1];
            tsp[nts] = t;
            nts++;
        }
        mkscope__v1__step_time__init(&st[k]);
        st[k].step = step, st[k].t_begin_dev_ns = base;
        /* every rank ends its step when the all-reduce completes */
        bool in_window = step >= sh->steps / 2 && step < sh->steps / 2 + 5;
        (void)late;
        st[k].t_end_dev_ns = base + STEP_NS + 300000 + (in_window ? 5000000 : 0) +
                             rnd(seed, 50000);
        stp[k] = &st[k];
        /* the step's transfers: every all-reduce of every layer, every peer */
        for (uint32_t op = 0; op < 2 * LAYERS; op++)
            for (uint32_t p = 0; p < R; p++) {
                if (p == rank)
                    continue;
                uint64_t t0 = base + op * (STEP_NS / 4);
                Mkscope__V1__RemoteWait *w = &rw[nw];
                mkscope__v1__remote_wait__init(w);
                w->comm_gen = mks_commid_for_transfer(1 + op % 2, p, rank, step, op * 5 + 4, 0);
                w->peer_rank = p, w->waiter_class = REDUCE, w->step = step;
                w->t_begin_dev_ns = t0 + 100000;
                w->t_end_dev_ns = w->t_begin_dev_ns + 2000 + rnd(seed, 3000) +
                                  (p == 1 ? 300000 / (2 * LAYERS) : 0) +
                                  (p == 2 && window ? 5000000 / (2 * LAYERS) : 0);
                rwp[nw++] = w;
                Mkscope__V1__Release *r = &rl[nr];
                mkscope__v1__release__init(r);
                r->comm_gen = mks_commid_for_transfer(1 + op % 2, rank, p, step, op * 5 + 4, 0);
                r->consumer_rank = p, r->task_class = 4, r->step = step;
                r->t_ready_dev_ns = t0 + 10000, r->t_start_dev_ns = t0 + 20000;
                r->t_end_dev_ns = t0 + 25000, r->t_comm_begin_dev_ns = t0 + 21000;
                r->t_comm_end_dev_ns = t0 + 24000, r->t_release_dev_ns = t0 + 26000;
                rlp[nr++] = r;
            }
        /* local release records, one per class */
        for (uint32_t c = 0; c < 10; c++) {
            Mkscope__V1__Release *r = &rl[nr];
            mkscope__v1__release__init(r);
            r->comm_gen = (1ull << 61) | ((uint64_t)step << 8) | c;
            r->consumer_rank = rank, r->task_class = c, r->step = step;
            r->t_start_dev_ns = base + c * 50000, r->t_end_dev_ns = base + c * 50000 + 5000;
            r->t_release_dev_ns = r->t_end_dev_ns + 300 + rnd(seed, 200);
            rlp[nr++] = r;
        }
    }
    s.task_stats = tsp, s.n_task_stats = nts;
    s.steps = stp, s.n_steps = NS;
    s.remote_waits = rwp, s.n_remote_waits = nw, s.releases = rlp, s.n_releases = nr;
    Mkscope__V1__Coverage cv[11], *cvp[11];
    for (int i = 0; i < 11; i++) {
        mkscope__v1__coverage__init(&cv[i]);
        cv[i].hook = (uint32_t)i, cv[i].eligible = 1000, cv[i].ran = 1000, cvp[i] = &cv[i];
    }
    s.coverage = cvp, s.n_coverage = 11;
    uint64_t t0 = 1000000000ull + s0 * (STEP_NS + 400000);
    s.epoch = s0 / NS, s.t_begin_host_ns = t0, s.t_end_host_ns = t0 + NS * (STEP_NS + 400000);
    s.t_begin_dev_ns = t0, s.t_end_dev_ns = s.t_end_host_ns, s.detail_tier = 2;
    mks_envelope env;
    mks_wire_init(&env, "bench", rank, s0 / NS + 1);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    env.epoch_summary = &s;
    char err[256];
    int rc = mks_wire_encode(&env, NULL, buf, len, err, sizeof(err));
    if (rc)
        fprintf(stderr, "encode: %s\n", err);
    free(rw), free(rwp), free(rl), free(rlp);
    return rc;
}

static int fill(struct mks_store *st, const struct shape *sh)
{
    char err[256];
    uint64_t seq, seed = 1;
    for (uint32_t r = 0; r < sh->ranks; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
        Mkscope__V1__TaskSchema sch = MKSCOPE__V1__TASK_SCHEMA__INIT;
        Mkscope__V1__TaskClass cls[CLASSES], *cp[CLASSES];
        char names[CLASSES][16];
        for (int i = 0; i < CLASSES; i++) {
            mkscope__v1__task_class__init(&cls[i]);
            cls[i].id = (uint32_t)i;
            if (i < 10)
                snprintf(names[i], sizeof(names[i]), "class%d", i);
            else
                snprintf(names[i], sizeof(names[i]), "expert.%d", i - 10);
            cls[i].name = names[i];
            cp[i] = &cls[i];
        }
        sch.classes = cp, sch.n_classes = CLASSES;
        reg.n_ranks = sh->ranks, reg.hook_abi_version = 1, reg.n_workers = 2, reg.schema = &sch;
        mks_wire_init(&env, "bench", r, 0);
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
        env.register_ = &reg;
        if (mks_store_ingest(st, &env, 1, &seq, err, sizeof(err))) {
            fprintf(stderr, "register: %s\n", err);
            return -1;
        }
    }
    double t = now_s();
    for (uint32_t s0 = 0; s0 + STEPS_PER_EPOCH <= sh->steps; s0 += STEPS_PER_EPOCH)
        for (uint32_t r = 0; r < sh->ranks; r++) {
            uint8_t *buf;
            size_t len;
            mks_envelope *e;
            if (encode(sh, r, s0, &buf, &len, &seed) ||
                mks_wire_decode(buf, len, NULL, &e, err, sizeof(err))) {
                fprintf(stderr, "summary: %s\n", err);
                return -1;
            }
            if (mks_store_ingest(st, e, 2, &seq, err, sizeof(err))) {
                fprintf(stderr, "ingest: %s\n", err);
                return -1;
            }
            mks_wire_free(e);
            free(buf);
        }
    fprintf(stderr, "filled %u ranks x %u steps in %.1f s\n", sh->ranks, sh->steps, now_s() - t);
    return 0;
}

static double best_wall;

/* Best of three: CPU seconds (returned) and wall seconds (best_wall). */
static double timed(struct mks_store *st, const struct mks_diag_opts *o, json_t **out)
{
    char err[256];
    double best = 1e9;
    best_wall = 1e9;
    for (int i = 0; i < 3; i++) {
        json_decref(*out);
        *out = NULL;
        double t = cpu_s(), w = now_s();
        if (mks_diagnose(st, "bench", o, out, err, sizeof(err))) {
            fprintf(stderr, "diagnose: %s\n", err);
            exit(1);
        }
        t = cpu_s() - t, w = now_s() - w;
        if (t < best)
            best = t;
        if (w < best_wall)
            best_wall = w;
    }
    return best;
}

static void show(const char *what, double t, json_t *out)
{
    json_t *g0 = json_array_get(json_object_get(out, "groups"), 0);
    printf("%-28s %6.3f s CPU (%6.3f s wall)  %lld steps, %lld slow, %zu groups; first: %s at rank %lld%s\n", what,
           t, best_wall, (long long)json_integer_value(json_object_get(out, "steps")),
           (long long)json_integer_value(json_object_get(out, "slow_steps")),
           json_array_size(json_object_get(out, "groups")),
           g0 ? json_string_value(json_object_get(g0, "cause")) : "-",
           g0 ? (long long)json_integer_value(
                    json_object_get(json_object_get(g0, "root"), "rank"))
              : -1LL,
           g0 && json_is_true(json_object_get(g0, "straggler")) ? " (straggler)" : "");
}

/* An existing store, without a bound on its epochs; NULL (said) if not. */
static struct mks_store *open_existing(const char *path)
{
    char err[256];
    struct mks_store_opts o = {.sz = sizeof(o), .path = path, .max_epochs = 1u << 30};
    struct mks_store *st;
    if (mks_store_open(&o, &st, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return st;
}

/* A store's per-step aggregates filled at once (a store an older
 * collector wrote, or made by bench/hour_store.sh), timed. */
static int fill_store(const char *path)
{
    struct mks_store *st = open_existing(path);
    if (!st)
        return 1;
    double t = cpu_s(), w = now_s();
    int rc = mks_store_fill_steps(st);
    fprintf(stderr, "fill %s: %.3f s CPU (%.3f s wall)\n", rc ? "failed" : "done", cpu_s() - t,
            now_s() - w);
    mks_store_close(st);
    return rc ? 1 : 0;
}

/* The diagnosis of a job in an existing store: timed, printed. */
static int on_store(const char *path, const char *job, uint32_t last, int64_t step, bool rows,
                    uint32_t min_steps)
{
    struct mks_store *st = open_existing(path);
    if (!st)
        return 1;
    char err[256];
    struct mks_diag_opts d = {
        .sz = sizeof(d), .only_step = step, .last = last, .rows = rows, .min_steps = min_steps};
    json_t *out = NULL;
    double t = cpu_s(), w = now_s();
    int rc = mks_diagnose(st, job, &d, &out, err, sizeof(err));
    t = cpu_s() - t, w = now_s() - w;
    if (rc) {
        fprintf(stderr, "diagnose: %s\n", err);
    } else {
        json_dumpf(out, stdout, JSON_INDENT(1));
        printf("\n");
        fprintf(stderr, "diagnose %.3f s CPU (%.3f s wall)\n", t, w);
    }
    json_decref(out);
    mks_store_close(st);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "--store") && !strcmp(argv[3], "--job")) {
        /* --min-steps N last (as `mkscope diagnose --min-steps` and
         * bench/accuracy.sh ask): an accuracy run's answer again */
        uint32_t min_steps = 0;
        if (argc >= 7 && !strcmp(argv[argc - 2], "--min-steps")) {
            min_steps = (uint32_t)atoi(argv[argc - 1]);
            argc -= 2;
        }
        bool rows = !strcmp(argv[argc - 1], "--rows"), fill = !strcmp(argv[argc - 1], "--fill");
        if (rows || fill)
            argc--;
        if (fill)
            return fill_store(argv[2]);
        return on_store(argv[2], argv[4],
                        argc >= 7 && !strcmp(argv[5], "--last") ? (uint32_t)atoi(argv[6]) : 0,
                        argc >= 7 && !strcmp(argv[5], "--step") ? atoll(argv[6]) : -1, rows,
                        min_steps);
    }
    struct shape sh = {.ranks = argc > 1 ? (uint32_t)atoi(argv[1]) : 4,
                       .steps = argc > 2 ? (uint32_t)atoi(argv[2]) : 60000};
    const char *dir = argc > 3 ? argv[3] : "/tmp";
    if (sh.ranks < 2 || sh.ranks > 64 || sh.steps < 100) {
        fprintf(stderr, "usage: diag_bench [RANKS 2..64] [STEPS >= 100] [DBDIR]\n");
        return 2;
    }
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/mks-diag-bench-%ux%u.db", dir, sh.ranks, sh.steps);
    bool have = access(path, R_OK) == 0;
    struct mks_store_opts o = {.sz = sizeof(o), .path = path, .max_epochs = 1u << 30};
    struct mks_store *st;
    if (mks_store_open(&o, &st, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (!have && fill(st, &sh)) {
        mks_store_close(st);
        unlink(path);
        return 1;
    }
    json_t *out = NULL;
    struct mks_diag_opts all = {.sz = sizeof(all), .only_step = -1};
    double t = timed(st, &all, &out);
    show("diagnose (every step)", t, out);
    struct mks_diag_opts last = {.sz = sizeof(last), .only_step = -1, .last = 1000};
    t = timed(st, &last, &out);
    show("diagnose --last 1000", t, out);
    struct mks_diag_opts win = {.sz = sizeof(win), .only_step = -1, .range = 1,
                                .step_lo = sh.steps / 2 - 500, .step_hi = sh.steps / 2 + 499};
    t = timed(st, &win, &out);
    show("diagnose --steps (1000 mid)", t, out);
    json_decref(out);
    mks_store_close(st);
    printf("store %s (kept for the next run; remove it to fill again)\n", path);
    return 0;
}
