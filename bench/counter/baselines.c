/*
 * mkscope-baselines: the answers simpler tools give about one run of the
 * reference megakernel, for the counterexample benchmark (bench/counter.sh).
 *
 * Each tool's evidence is read as the tool would produce it, and one rule
 * turns it into an answer in the shape of `mkscope -f json diagnose`'s groups
 * (cause, root rank and task class, steps, the ranks that stalled on it), so
 * that bench/accuracy/score.jq scores every tool alike.  Nothing here reads
 * the truth file, and nothing is shared with the collector's diagnosis.
 *
 *   counters  the fixed counters of mkscope-bench-counters / -obs
 *             (--counters PREFIX: per step, per class count, run time total
 *             and maximum, queueing total and maximum; per peer remote wait)
 *   trace     the native profiler's full trace (--trace PREFIX: a begin/end
 *             record per task and per remote wait, worker, class, tile), or
 *             with --keep-bytes N the same trace sampled down to N bytes of
 *             records (whole tasks kept at random, the step markers always)
 *   steps     the step-level timeline: each rank's step times alone, what a
 *             kernel timeline of a persistent kernel shows
 *
 * The rule (counters and trace share it; each feeds what its evidence has):
 *
 *  1. Lateness.  In every step, rank r's lateness is the mean time its peers
 *     waited on its remote events less the mean time it waited on theirs
 *     (both tools record remote waits per peer).  A step is delayed when the
 *     latest rank's lateness exceeds max(100 us, 25% of the run's median
 *     step); that rank is the step's root.
 *  2. Groups.  Delayed steps of one root at most 2 steps apart form a group;
 *     groups of fewer than --min-steps steps (3, as accuracy.sh asks of
 *     mkscope) are not reported; groups come ordered by their lateness.
 *  3. Cause.  Over the group's steps and the step before each, every piece of
 *     the root's own time is compared with the same piece on its peers in
 *     the same step (the median of the other ranks; an expert class with the
 *     other ranks' experts): run time per class, divided by how many of its
 *     tasks run side by side (the class's tasks per operator, at most the
 *     workers), is slow_task (slow_transfer for the all-reduce's sends,
 *     whose run holds the transfer; the reduce's own waits are taken out);
 *     queueing per class the same way is local_imbalance, unless a slow task
 *     of the same class (or expert family) explains half of it; the trace
 *     alone also shows the gap between an operator's last end and the next
 *     one's first start (notify_delay of the operator before the gap) and
 *     how late a send's data reached a peer already waiting (notify_delay of
 *     allreduce_send).  Run excess spread over at least 5 of the compute
 *     kinds with none above 40% of it is slow_rank.  The largest excess is
 *     the answer, unless it explains less than a quarter of the group's
 *     lateness or the runner-up is within 75% of it: then undecided (the
 *     answer must name a cause, a rank and a class, or say it cannot).
 *     The same rule on each step of the group alone must give the group's
 *     answer in at least half of them, else undecided (the cause changes
 *     from step to step: noise of a loaded machine does).
 *
 * The steps tool can only say which steps were slow (a step's mean over the
 * ranks above 1.3 times the run's median): its groups are undecided.
 *
 * CUDA (bench/counter/gpu.sh, files of bench/counter/gpu/cupti_tool.c):
 *
 *   kernels   CUPTI activity.  Kernels are given steps by the build's
 *             step-end kernel and classes by their place in the step's
 *             launch order (the kernel-per-operator and graph builds launch
 *             one kernel per operator, all of one name); an all-reduce's
 *             NCCL kernel is shortest on the rank that came last, and the
 *             others waited on it the difference: that is the lateness of
 *             rule 1, and a kernel's duration its class's run time in rule
 *             3.  The persistent build's one kernel gives neither: no group.
 *   pcsamp    CUPTI PC sampling (continuous: one count per PC and stall
 *             reason for the whole run, no steps).  The rank and function
 *             with the most samples above the peers' median; slow_task of a
 *             class only when the task schema's device functions give that
 *             function to one class (--functions), else undecided.  Bodies
 *             inlined into a kernel sample as the kernel's function.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS   64
#define MAX_CLASSES 256
/* what the profiler holds per record (struct br_prof_rec) */
#define TRACE_REC_BYTES 16u
#define STEP_REC_BYTES  8u

enum kind { K_COMPUTE, K_EXPERT, K_SEND, K_REDUCE };

struct cell {
    double run[MAX_CLASSES], queue[MAX_CLASSES], gap[MAX_CLASSES];
    uint32_t n[MAX_CLASSES];
    double wait[MAX_RANKS]; /* this rank waited on peer p */
    double lag;             /* trace: mean lateness of this rank's data at waiting peers */
    uint32_t lag_n;
};

struct ev {
    uint32_t R, S, W, L, C;
    char *name[MAX_CLASSES];
    enum kind kind[MAX_CLASSES];
    struct cell *cells; /* [r * S + s] */
    double *step_ns;    /* [r * S + s] */
    int have_gap, have_lag, have_queue;
    uint64_t bytes, marker_bytes;
    double scale; /* 1 / kept fraction of a sampled trace */
};

static struct cell *cell(struct ev *e, uint32_t r, uint32_t s)
{
    return &e->cells[(size_t)r * e->S + s];
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mkscope-baselines: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static json_t *load_json(const char *path)
{
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        die("%s: %s (line %d)", path, err.text, err.line);
    return j;
}

static double num(const json_t *j)
{
    return json_is_integer(j) ? (double)json_integer_value(j) : json_number_value(j);
}

static uint32_t class_id(struct ev *e, const char *name)
{
    for (uint32_t c = 0; c < e->C; c++)
        if (!strcmp(e->name[c], name))
            return c;
    if (e->C >= MAX_CLASSES)
        die("more than %d task classes", MAX_CLASSES);
    uint32_t c = e->C++;
    e->name[c] = strdup(name);
    if (!strcmp(name, "allreduce_send"))
        e->kind[c] = K_SEND;
    else if (!strcmp(name, "allreduce_reduce"))
        e->kind[c] = K_REDUCE;
    else if (!strncmp(name, "expert.", 7))
        e->kind[c] = K_EXPERT;
    else
        e->kind[c] = K_COMPUTE;
    return c;
}

/* Operators of a class in one step: the graph's shape, as a compiler knows
 * it (per layer; the all-reduce twice per layer; the head once). */
static uint32_t occurrences(const struct ev *e, uint32_t c)
{
    if (e->kind[c] == K_SEND || e->kind[c] == K_REDUCE)
        return 2 * e->L;
    if (!strcmp(e->name[c], "lm_head") || !strcmp(e->name[c], "sample"))
        return 1;
    return e->L;
}

/* ---- the run's outer picture (bench.json) ----------------------------------- */

static void load_bench(struct ev *e, const char *path)
{
    json_t *j = load_json(path), *cfg = json_object_get(j, "config");
    json_t *ranks = json_object_get(j, "ranks");
    if (!cfg || !json_is_array(ranks))
        die("%s: not a mkscope-bench --json file", path);
    e->R = (uint32_t)num(json_object_get(cfg, "ranks"));
    e->S = (uint32_t)num(json_object_get(cfg, "steps"));
    e->W = (uint32_t)num(json_object_get(cfg, "workers"));
    e->L = (uint32_t)num(json_object_get(cfg, "layers"));
    if (e->R < 1 || e->R > MAX_RANKS || !e->S || !e->W || !e->L || json_array_size(ranks) != e->R)
        die("%s: ranks, steps, workers or layers out of range", path);
    e->cells = calloc((size_t)e->R * e->S, sizeof(*e->cells));
    e->step_ns = calloc((size_t)e->R * e->S, sizeof(double));
    if (!e->cells || !e->step_ns)
        die("out of memory");
    for (uint32_t r = 0; r < e->R; r++) {
        json_t *st = json_object_get(json_array_get(ranks, r), "step_ns");
        if (json_array_size(st) != e->S)
            die("%s: rank %u has %zu step times, not %u", path, r, json_array_size(st), e->S);
        for (uint32_t s = 0; s < e->S; s++)
            e->step_ns[(size_t)r * e->S + s] = num(json_array_get(st, s));
    }
    json_decref(j);
}

/* ---- fixed counters --------------------------------------------------------- */

static void load_counters(struct ev *e, const char *prefix)
{
    uint32_t map[MAX_CLASSES];
    for (uint32_t r = 0; r < e->R; r++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.rank%u.json", prefix, r);
        json_t *j = load_json(path), *cls = json_object_get(j, "classes");
        json_t *steps = json_object_get(j, "steps");
        if (!json_is_array(cls) || !json_is_array(steps) || json_array_size(cls) > MAX_CLASSES)
            die("%s: not a counters file", path);
        for (size_t c = 0; c < json_array_size(cls); c++)
            map[c] = class_id(e, json_string_value(json_array_get(cls, c)) ?: "?");
        e->bytes += (uint64_t)num(json_object_get(j, "bytes_per_step")) * e->S;
        for (uint32_t s = 0; s < e->S && s < json_array_size(steps); s++) {
            struct cell *x = cell(e, r, s);
            json_t *row = json_array_get(steps, s), *v;
            size_t i;
            double waited = 0;
            json_array_foreach(json_object_get(row, "w"), i, v)
            {
                uint32_t p = (uint32_t)num(json_array_get(v, 0));
                if (p < e->R) {
                    x->wait[p] += num(json_array_get(v, 2));
                    waited += num(json_array_get(v, 2));
                }
            }
            json_array_foreach(json_object_get(row, "c"), i, v)
            {
                uint32_t c0 = (uint32_t)num(json_array_get(v, 0));
                if (c0 >= json_array_size(cls))
                    continue;
                uint32_t c = map[c0];
                x->n[c] += (uint32_t)num(json_array_get(v, 1));
                x->run[c] += num(json_array_get(v, 2));
                x->queue[c] += num(json_array_get(v, 4));
                /* a reduce's run holds its waits on peers: its own work is the rest */
                if (e->kind[c] == K_REDUCE)
                    x->run[c] = x->run[c] > waited ? x->run[c] - waited : 0;
            }
        }
        json_decref(j);
    }
    e->have_queue = 1;
}

/* ---- the native profiler's trace -------------------------------------------- */

struct task {
    uint32_t cls, worker, tx, ty, nw;
    uint64_t b, e, waited;
    uint64_t wb[MAX_RANKS], we[MAX_RANKS];
    uint32_t step;
};

struct rank_trace {
    struct task *t;
    size_t n, cap;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int by_begin(const void *a, const void *b)
{
    const struct task *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* Tasks of one rank from its trace: records nest per worker as
 * B(task) [B(remote_wait) E(remote_wait)]* E(task). */
static void parse_trace(struct ev *e, uint32_t r, const char *path, struct rank_trace *rt,
                        uint64_t *records)
{
    json_t *j = load_json(path), *evs = json_object_get(j, "traceEvents"), *v;
    if (!json_is_array(evs))
        die("%s: not a Chrome trace", path);
    struct task open[256];
    int is_open[256] = {0};
    size_t i;
    *records += json_array_size(evs);
    json_array_foreach(evs, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *ph = json_string_value(json_object_get(v, "ph"));
        uint32_t w = (uint32_t)num(json_object_get(v, "tid"));
        /* ts is in us with ns digits */
        uint64_t t = (uint64_t)llround(num(json_object_get(v, "ts")) * 1e3);
        if (!name || !ph || w >= 256)
            die("%s: record %zu lacks name, ph or a worker below 256", path, i);
        struct task *o = &open[w];
        if (!strcmp(name, "remote_wait")) {
            if (!is_open[w] || o->nw >= MAX_RANKS)
                continue;
            if (*ph == 'B')
                o->wb[o->nw] = t;
            else
                o->we[o->nw++] = t;
            continue;
        }
        if (*ph == 'B') {
            memset(o, 0, sizeof(*o));
            json_t *a = json_object_get(v, "args");
            o->cls = class_id(e, name);
            o->worker = w;
            o->tx = (uint32_t)num(json_object_get(a, "tile_x"));
            o->ty = (uint32_t)num(json_object_get(a, "tile_y"));
            o->b = t;
            is_open[w] = 1;
        } else if (is_open[w]) {
            o->e = t;
            for (uint32_t k = 0; k < o->nw; k++)
                o->waited += o->we[k] - o->wb[k];
            if (rt->n == rt->cap) {
                rt->cap = rt->cap ? 2 * rt->cap : 4096;
                rt->t = realloc(rt->t, rt->cap * sizeof(*rt->t));
                if (!rt->t)
                    die("out of memory");
            }
            rt->t[rt->n++] = *o;
            is_open[w] = 0;
        }
    }
    (void)r;
    json_decref(j);
}

/* A peer index of the k-th remote wait of a reduce on rank r: peers in rank
 * order, r itself left out (the bench's reduce waits in that order). */
static uint32_t wait_peer(uint32_t r, uint32_t k)
{
    return k < r ? k : k + 1;
}

static void load_trace(struct ev *e, const char *prefix, double keep_frac, uint64_t seed)
{
    struct rank_trace *rt = calloc(e->R, sizeof(*rt));
    uint64_t records = 0, kept = 0;
    uint32_t sample = class_id(e, "sample");
    for (uint32_t r = 0; r < e->R; r++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.rank%u.json", prefix, r);
        parse_trace(e, r, path, &rt[r], &records);
        qsort(rt[r].t, rt[r].n, sizeof(*rt[r].t), by_begin);
        /* steps: a task belongs to the step whose sample ends first after
         * its begin (a step's tasks all end before its sample does) */
        uint64_t *ends = calloc(e->S, sizeof(uint64_t));
        uint32_t ns = 0;
        for (size_t i = 0; i < rt[r].n; i++)
            if (rt[r].t[i].cls == sample && ns < e->S)
                ends[ns++] = rt[r].t[i].e;
        uint32_t s = 0;
        for (size_t i = 0; i < rt[r].n; i++) {
            while (s + 1 < ns && rt[r].t[i].b > ends[s])
                s++;
            rt[r].t[i].step = s;
        }
        /* sampling: whole tasks (with their waits) at random; the step
         * markers are kept, generously, so every kept task has its step */
        if (keep_frac < 1.0) {
            size_t m = 0;
            for (size_t i = 0; i < rt[r].n; i++) {
                struct task *t = &rt[r].t[i];
                double u = (double)(mix(seed ^ mix(((uint64_t)r << 40) ^ i)) >> 11) * 0x1p-53;
                if (t->cls == sample || u < keep_frac)
                    rt[r].t[m++] = *t;
            }
            rt[r].n = m;
        }
        for (size_t i = 0; i < rt[r].n; i++)
            kept += 2 + 2 * rt[r].t[i].nw;
        free(ends);
    }
    e->bytes = kept * TRACE_REC_BYTES;
    e->marker_bytes = 0;
    for (uint32_t r = 0; r < e->R; r++)
        for (size_t i = 0; i < rt[r].n; i++)
            e->marker_bytes += rt[r].t[i].cls == sample ? 2 * TRACE_REC_BYTES : 0;
    e->scale = keep_frac < 1.0 && keep_frac > 0 ? 1.0 / keep_frac : 1.0;
    const int full = keep_frac >= 1.0;
    /* per (rank, step): run, queue and gaps from the operators, waits */
    for (uint32_t r = 0; r < e->R; r++) {
        uint64_t prev_sample_end = 0;
        size_t i = 0;
        while (i < rt[r].n) {
            uint32_t s = rt[r].t[i].step;
            size_t j = i;
            while (j < rt[r].n && rt[r].t[j].step == s)
                j++;
            struct cell *x = cell(e, r, s);
            /* operators: runs of one class (the experts one family) in begin
             * order; the graph is a chain, so operators do not overlap */
            uint64_t ready = prev_sample_end ? prev_sample_end : rt[r].t[i].b;
            uint32_t pred = sample;
            size_t k = i;
            while (k < j) {
                uint32_t c = rt[r].t[k].cls;
                enum kind kd = e->kind[c];
                size_t m = k;
                uint64_t first = rt[r].t[k].b, last = 0;
                while (m < j && (rt[r].t[m].cls == c ||
                                 (kd == K_EXPERT && e->kind[rt[r].t[m].cls] == K_EXPERT))) {
                    const struct task *t = &rt[r].t[m];
                    uint64_t run = t->e - t->b - (t->waited < t->e - t->b ? t->waited : 0);
                    x->n[t->cls]++;
                    x->run[t->cls] += (double)run * e->scale;
                    if (full)
                        x->queue[t->cls] += (double)(t->b - first);
                    for (uint32_t q = 0; q < t->nw; q++) {
                        uint32_t p = wait_peer(r, q);
                        if (p < e->R)
                            x->wait[p] += (double)(t->we[q] - t->wb[q]) * e->scale;
                    }
                    if (t->e > last)
                        last = t->e;
                    m++;
                }
                if (full && first > ready)
                    x->gap[pred] += (double)(first - ready);
                pred = c;
                ready = last;
                k = m;
            }
            for (size_t q = i; q < j; q++)
                if (rt[r].t[q].cls == sample)
                    prev_sample_end = rt[r].t[q].e;
            i = j;
        }
    }
    /* how late each send's data reached a peer that was already waiting for
     * it: the wait's end less the send's end, charged to the sender */
    if (full) {
        uint32_t send = class_id(e, "allreduce_send"), red = class_id(e, "allreduce_reduce");
        /* each send's end by (sender, step, all-reduce, receiver) */
        const uint32_t K = 2 * e->L;
        uint64_t *send_end = calloc((size_t)e->R * e->S * K * e->R, sizeof(uint64_t));
        if (!send_end)
            die("out of memory");
#define SEND_END(p, s, k, q) send_end[(((size_t)(p)*e->S + (s)) * K + (k)) * e->R + (q)]
        for (uint32_t p = 0; p < e->R; p++)
            for (size_t u = 0; u < rt[p].n; u++) {
                const struct task *sd = &rt[p].t[u];
                if (sd->cls == send && sd->ty < K && sd->tx < e->R)
                    SEND_END(p, sd->step, sd->ty, sd->tx) = sd->e;
            }
        for (uint32_t q = 0; q < e->R; q++) {
            for (size_t i = 0; i < rt[q].n; i++) {
                const struct task *t = &rt[q].t[i];
                if (t->cls != red || t->ty >= K)
                    continue;
                for (uint32_t k = 0; k < t->nw; k++) {
                    uint32_t p = wait_peer(q, k);
                    if (p >= e->R)
                        continue;
                    uint64_t se = SEND_END(p, t->step, t->ty, q);
                    if (se && t->wb[k] < se && t->we[k] > se) {
                        struct cell *x = cell(e, p, t->step);
                        x->lag += (double)(t->we[k] - se);
                        x->lag_n++;
                    }
                }
            }
        }
#undef SEND_END
        free(send_end);
        for (uint32_t p = 0; p < e->R; p++)
            for (uint32_t s = 0; s < e->S; s++)
                if (cell(e, p, s)->lag_n)
                    cell(e, p, s)->lag /= cell(e, p, s)->lag_n;
    }
    e->have_gap = e->have_lag = e->have_queue = full;
    (void)records;
    for (uint32_t r = 0; r < e->R; r++)
        free(rt[r].t);
    free(rt);
}

/* ---- the rule ------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    if (!n)
        return NAN;
    qsort(v, n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double lateness(struct ev *e, uint32_t r, uint32_t s)
{
    double in = 0, out = 0;
    for (uint32_t q = 0; q < e->R; q++) {
        if (q == r)
            continue;
        in += cell(e, q, s)->wait[r];
        out += cell(e, r, s)->wait[q];
    }
    return e->R > 1 ? (in - out) / (e->R - 1) : 0;
}

enum field { F_RUN, F_QUEUE, F_GAP };

/* The same field on the peers of (r, s, c): the other ranks' class, or for
 * an expert the other ranks' experts that ran in the step. */
static double peer_ref(struct ev *e, uint32_t r, uint32_t s, uint32_t c, enum field f)
{
    double v[MAX_RANKS * MAX_CLASSES / 8 + MAX_RANKS];
    size_t n = 0, cap = sizeof(v) / sizeof(v[0]);
    for (uint32_t q = 0; q < e->R; q++) {
        if (q == r)
            continue;
        const struct cell *x = cell(e, q, s);
        for (uint32_t c2 = 0; c2 < e->C && n < cap; c2++) {
            int same = e->kind[c] == K_EXPERT ? e->kind[c2] == K_EXPERT : c2 == c;
            if (!same || (f != F_GAP && !x->n[c2]))
                continue;
            v[n++] = f == F_RUN ? x->run[c2] : f == F_QUEUE ? x->queue[c2] : x->gap[c2];
        }
    }
    return median(v, n);
}

struct cand {
    const char *cause;
    int cls; /* -1: none (slow_rank) */
    double v;
};

struct group {
    uint32_t root, n;
    uint32_t steps[4096];
    double late;
};

static int cmp_cand(const void *a, const void *b)
{
    double x = ((const struct cand *)a)->v, y = ((const struct cand *)b)->v;
    return x > y ? -1 : x < y;
}

/* The answer of one group: cause and class, its share and the runner-up. */
static json_t *decide(struct ev *e, const struct group *g, const char **cause_p, int *cls_p)
{
    static double slow[MAX_CLASSES], imb[MAX_CLASSES], notif[MAX_CLASSES];
    memset(slow, 0, sizeof(slow));
    memset(imb, 0, sizeof(imb));
    memset(notif, 0, sizeof(notif));
    double notify_send = 0;
    const uint32_t r = g->root;
    uint32_t send = class_id(e, "allreduce_send");
    uint8_t *use = calloc(e->S, 1);
    for (uint32_t i = 0; i < g->n; i++) {
        use[g->steps[i]] = 1;
        if (g->steps[i])
            use[g->steps[i] - 1] = 1;
    }
    for (uint32_t s = 0; s < e->S; s++) {
        if (!use[s])
            continue;
        const struct cell *x = cell(e, r, s);
        double lag_step = 0, gap_send = 0;
        for (uint32_t c = 0; c < e->C; c++) {
            if (x->n[c]) {
                double p = (double)x->n[c] / occurrences(e, c);
                p = p < 1 ? 1 : p > e->W ? e->W : p;
                double ref = peer_ref(e, r, s, c, F_RUN);
                if (!isnan(ref) && x->run[c] > ref)
                    slow[c] += (x->run[c] - ref) / p;
                if (e->have_queue) {
                    ref = peer_ref(e, r, s, c, F_QUEUE);
                    if (!isnan(ref) && x->queue[c] > ref)
                        imb[c] += (x->queue[c] - ref) / p;
                }
            }
            if (e->have_gap) {
                double ref = peer_ref(e, r, s, c, F_GAP);
                if (!isnan(ref) && x->gap[c] > ref) {
                    if (c == send)
                        gap_send = x->gap[c] - ref;
                    else
                        notif[c] += x->gap[c] - ref;
                }
            }
        }
        if (e->have_lag && x->lag_n) {
            double v[MAX_RANKS];
            size_t n = 0;
            for (uint32_t q = 0; q < e->R; q++)
                if (q != r && cell(e, q, s)->lag_n)
                    v[n++] = cell(e, q, s)->lag;
            double ref = n ? median(v, n) : 0;
            if (x->lag > ref)
                lag_step = x->lag - ref;
        }
        /* a late send shows twice, at the peers and before the local
         * reduce: counted once */
        notify_send += gap_send > lag_step ? gap_send : lag_step;
    }
    free(use);
    /* queueing behind a slow task of the class (or expert family) is the
     * slow task's */
    for (uint32_t c = 0; c < e->C; c++) {
        double fam = 0;
        for (uint32_t c2 = 0; c2 < e->C; c2++)
            if (c2 == c || (e->kind[c] == K_EXPERT && e->kind[c2] == K_EXPERT))
                fam = slow[c2] > fam ? slow[c2] : fam;
        if (fam >= 0.5 * imb[c])
            imb[c] = 0;
    }
    /* slow_rank: run excess over many compute kinds (the experts one) */
    double kinds[MAX_CLASSES], tot = 0, top = 0, expert = 0;
    uint32_t nk = 0;
    for (uint32_t c = 0; c < e->C; c++) {
        if (e->kind[c] == K_EXPERT)
            expert += slow[c];
        else if (e->kind[c] == K_COMPUTE)
            kinds[nk++] = slow[c];
    }
    kinds[nk++] = expert;
    for (uint32_t k = 0; k < nk; k++) {
        tot += kinds[k];
        top = kinds[k] > top ? kinds[k] : top;
    }
    uint32_t spread = 0;
    for (uint32_t k = 0; k < nk; k++)
        spread += tot > 0 && kinds[k] >= 0.05 * tot;
    int is_slow_rank = spread >= 5 && top <= 0.4 * tot;

    struct cand cs[3 * MAX_CLASSES + 4];
    size_t n = 0;
    if (is_slow_rank)
        cs[n++] = (struct cand){"slow_rank", -1, tot};
    for (uint32_t c = 0; c < e->C; c++) {
        if (slow[c] > 0 && (c == send || e->kind[c] == K_REDUCE || !is_slow_rank))
            cs[n++] = (struct cand){c == send ? "slow_transfer" : "slow_task", (int)c, slow[c]};
        if (imb[c] > 0)
            cs[n++] = (struct cand){"local_imbalance", (int)c, imb[c]};
        if (notif[c] > 0)
            cs[n++] = (struct cand){"notify_delay", (int)c, notif[c]};
    }
    if (notify_send > 0)
        cs[n++] = (struct cand){"notify_delay", (int)send, notify_send};
    qsort(cs, n, sizeof(cs[0]), cmp_cand);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += cs[i].v;
    json_t *o = json_object();
    const char *cause = "undecided";
    char why[256];
    if (!n || cs[0].v < 0.25 * g->late) {
        snprintf(why, sizeof(why), "the evidence explains %.0f of %.0f us of lateness",
                 n ? cs[0].v / 1e3 : 0.0, g->late / 1e3);
    } else if (n > 1 && cs[1].v >= 0.75 * cs[0].v) {
        snprintf(why, sizeof(why), "%s (%.0f us) and %s (%.0f us) are close", cs[0].cause,
                 cs[0].v / 1e3, cs[1].cause, cs[1].v / 1e3);
    } else {
        cause = cs[0].cause;
        snprintf(why, sizeof(why), "%s %.0f us of %.0f us lateness", cs[0].cause, cs[0].v / 1e3,
                 g->late / 1e3);
    }
    json_object_set_new(o, "cause", json_string(cause));
    json_t *root = json_object();
    json_object_set_new(root, "rank", json_integer(r));
    json_object_set_new(root, "task_class",
                        n && cs[0].cls >= 0 && strcmp(cause, "undecided")
                            ? json_string(e->name[cs[0].cls])
                            : json_null());
    json_object_set_new(o, "root", root);
    json_object_set_new(o, "share", json_real(sum > 0 && n ? cs[0].v / sum : 0));
    if (n > 1) {
        json_t *ru = json_object();
        json_object_set_new(ru, "cause", json_string(cs[1].cause));
        json_object_set_new(o, "runner_up", ru);
    }
    if (n) {
        json_t *best = json_object();
        json_object_set_new(best, "cause", json_string(cs[0].cause));
        json_object_set_new(best, "task_class",
                            cs[0].cls >= 0 ? json_string(e->name[cs[0].cls]) : json_null());
        json_object_set_new(o, "best", best);
    }
    json_object_set_new(o, "evidence", json_string(why));
    *cause_p = cause;
    *cls_p = n && strcmp(cause, "undecided") ? cs[0].cls : -1;
    return o;
}

/* The group's answer holds in at least half of its steps taken alone. */
static int consistent(struct ev *e, const struct group *g, const char *cause, int cls,
                      const double *late)
{
    uint32_t agree = 0;
    static struct group one;
    for (uint32_t i = 0; i < g->n; i++) {
        one.root = g->root;
        one.n = 1;
        one.steps[0] = g->steps[i];
        one.late = late[g->steps[i]];
        const char *c1;
        int k1;
        json_decref(decide(e, &one, &c1, &k1));
        agree += !strcmp(c1, cause) && k1 == cls;
    }
    return 2 * agree >= g->n;
}

static json_t *groups_json(struct ev *e, int min_steps)
{
    /* run's median step: the threshold's scale */
    double *v = malloc((size_t)e->R * e->S * sizeof(double));
    memcpy(v, e->step_ns, (size_t)e->R * e->S * sizeof(double));
    double med = median(v, (size_t)e->R * e->S);
    free(v);
    double theta = fmax(100e3, 0.25 * med);
    int32_t *root = malloc(e->S * sizeof(int32_t));
    double *late = malloc(e->S * sizeof(double));
    for (uint32_t s = 0; s < e->S; s++) {
        root[s] = -1;
        late[s] = 0;
        for (uint32_t r = 0; r < e->R; r++) {
            double l = lateness(e, r, s);
            if (l > theta && l > late[s]) {
                late[s] = l;
                root[s] = (int32_t)r;
            }
        }
    }
    static struct group gs[1024];
    uint32_t ng = 0;
    for (uint32_t s = 0; s < e->S; s++) {
        if (root[s] < 0)
            continue;
        struct group *g = NULL;
        for (uint32_t k = 0; k < ng; k++)
            if (gs[k].root == (uint32_t)root[s] && gs[k].n && s - gs[k].steps[gs[k].n - 1] <= 3 &&
                gs[k].n < 4096)
                g = &gs[k];
        if (!g) {
            if (ng == 1024)
                continue;
            g = &gs[ng++];
            g->root = (uint32_t)root[s];
            g->n = 0;
            g->late = 0;
        }
        g->steps[g->n++] = s;
        g->late += late[s];
    }
    /* by lateness, largest first */
    for (uint32_t a = 0; a < ng; a++)
        for (uint32_t b = a + 1; b < ng; b++)
            if (gs[b].late > gs[a].late) {
                struct group t = gs[a];
                gs[a] = gs[b];
                gs[b] = t;
            }
    json_t *arr = json_array();
    for (uint32_t k = 0; k < ng; k++) {
        if (gs[k].n < (uint32_t)min_steps)
            continue;
        const char *cause;
        int cls;
        json_t *o = decide(e, &gs[k], &cause, &cls), *st = json_array(), *stalled = json_array();
        if (strcmp(cause, "undecided") && !consistent(e, &gs[k], cause, cls, late)) {
            json_object_set_new(o, "cause", json_string("undecided"));
            json_object_set_new(json_object_get(o, "root"), "task_class", json_null());
            json_object_set_new(o, "evidence", json_string("the cause changes from step to step"));
        }
        for (uint32_t i = 0; i < gs[k].n; i++)
            json_array_append_new(st, json_integer(gs[k].steps[i]));
        json_object_set_new(o, "steps", st);
        /* the peers that waited on the root by a quarter of its lateness */
        for (uint32_t q = 0; q < e->R; q++) {
            if (q == gs[k].root)
                continue;
            double w = 0;
            for (uint32_t i = 0; i < gs[k].n; i++)
                w += cell(e, q, gs[k].steps[i])->wait[gs[k].root];
            if (w >= 0.25 * gs[k].late) {
                json_t *sr = json_object();
                json_object_set_new(sr, "rank", json_integer(q));
                json_array_append_new(stalled, sr);
            }
        }
        json_object_set_new(o, "stalled", stalled);
        json_object_set_new(o, "delay_us", json_real(gs[k].late / 1e3));
        json_array_append_new(arr, o);
    }
    free(root);
    free(late);
    return arr;
}

/* The step timeline: slow steps, and nothing to name a rank, class or cause. */
static json_t *steps_json(struct ev *e, int min_steps)
{
    double *mean = calloc(e->S, sizeof(double)), *v = malloc(e->S * sizeof(double));
    for (uint32_t s = 0; s < e->S; s++) {
        for (uint32_t r = 0; r < e->R; r++)
            mean[s] += e->step_ns[(size_t)r * e->S + s] / e->R;
        v[s] = mean[s];
    }
    double med = median(v, e->S);
    json_t *arr = json_array(), *st = NULL;
    uint32_t n = 0;
    for (uint32_t s = 0; s <= e->S; s++) {
        int slow = s < e->S && mean[s] > 1.3 * med;
        if (slow) {
            if (!st)
                st = json_array();
            json_array_append_new(st, json_integer(s));
            n++;
        }
        if ((!slow || s == e->S) && st) {
            if (n >= (uint32_t)min_steps) {
                json_t *o = json_object(), *root = json_object();
                json_object_set_new(o, "cause", json_string("undecided"));
                json_object_set_new(root, "rank", json_integer(-1));
                json_object_set_new(root, "task_class", json_null());
                json_object_set_new(o, "root", root);
                json_object_set_new(o, "steps", st);
                json_object_set_new(o, "evidence",
                                    json_string("slow steps; step times name no rank or class"));
                json_array_append_new(arr, o);
            } else {
                json_decref(st);
            }
            st = NULL;
            n = 0;
        }
    }
    e->bytes = (uint64_t)e->R * e->S * STEP_REC_BYTES;
    free(mean);
    free(v);
    return arr;
}

/* ---- CUDA: the kernel-level timeline (CUPTI activity) -------------------------- */

/* A jsonl file of bench/counter/gpu/cupti_tool.c, one object a line. */
static json_t *load_jsonl(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s: %s", path, strerror(errno));
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    size_t ln = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        ln++;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!o)
            die("%s:%zu: %s", path, ln, err.text);
        json_array_append_new(arr, o);
    }
    free(line);
    fclose(f);
    return arr;
}

/* The classes of a kernel-per-operator step in launch order (megakernel.cu's
 * per-op and graph builds: per layer the four attention operators, the MoE
 * router, the experts, the combine; then the head), the step-end kernel
 * closing it; residual kernels and NCCL's are not operators. */
static const char *const op_order[] = {"rmsnorm",    "qkv_proj", "attention",  "o_proj",
                                       "moe_router", "expert.*", "moe_combine"};

static void load_kernels(struct ev *e, const char *prefix)
{
    uint32_t lm = class_id(e, "lm_head"), send = class_id(e, "allreduce_send");
    uint32_t expert = class_id(e, "expert.*"), order[8];
    for (int i = 0; i < 7; i++)
        order[i] = class_id(e, op_order[i]);
    e->kind[expert] = K_EXPERT;
    /* per rank, step and all-reduce: the NCCL kernel's duration */
    const uint32_t K = 2 * e->L;
    double *ar = calloc((size_t)e->R * e->S * K, sizeof(double));
    for (uint32_t r = 0; r < e->R; r++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.rank%u.jsonl", prefix, r);
        json_t *arr = load_jsonl(path), *v;
        size_t i;
        uint32_t s = 0, op = 0, k = 0;
        json_array_foreach(arr, i, v)
        {
            const char *kind = json_string_value(json_object_get(v, "kind"));
            if (kind && !strcmp(kind, "end")) {
                e->bytes += (uint64_t)num(json_object_get(v, "bytes"));
                continue;
            }
            if (!kind || strcmp(kind, "kernel") || s >= e->S)
                continue;
            const char *name = json_string_value(json_object_get(v, "name")) ?: "";
            double d = num(json_object_get(v, "end")) - num(json_object_get(v, "start"));
            struct cell *x = cell(e, r, s);
            if (strstr(name, "nccl") || strstr(name, "Nccl")) {
                if (k < K)
                    ar[((size_t)r * e->S + s) * K + k] = d;
                /* its run on this rank: transfer and waiting for the others */
                x->n[send]++;
                k++;
            } else if (strstr(name, "step_kernel")) {
                s++, op = 0, k = 0;
            } else if (strstr(name, "op_kernel")) {
                uint32_t c = op < 7 * e->L ? order[op % 7] : lm;
                x->n[c]++;
                x->run[c] += d;
                op++;
            }
        }
        json_decref(arr);
    }
    /* an all-reduce ends for everyone when its last rank arrives: the
     * rank with the shortest NCCL kernel came last, and every other rank
     * waited on it the difference */
    for (uint32_t s = 0; s < e->S; s++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t late = 0;
            for (uint32_t r = 1; r < e->R; r++)
                if (ar[((size_t)r * e->S + s) * K + k] < ar[((size_t)late * e->S + s) * K + k])
                    late = r;
            double base = ar[((size_t)late * e->S + s) * K + k];
            for (uint32_t q = 0; q < e->R; q++)
                if (q != late)
                    cell(e, q, s)->wait[late] += ar[((size_t)q * e->S + s) * K + k] - base;
        }
    free(ar);
}

/* ---- CUDA: PC sampling with stall reasons ------------------------------------ */

/* One answer over the whole run (continuous sampling has no steps): the rank
 * whose samples exceed its peers' median the most, in the function with the
 * largest excess; a class only where the schema's device functions give
 * that function to exactly one class (--functions FILE: {"function":
 * "class", ...}, one entry per class; a function listed twice is not
 * unique). */
static json_t *pcsamp_json(struct ev *e, const char *prefix, const char *functions)
{
    json_t *fmap = functions ? load_json(functions) : json_object();
    /* samples[r][f] over the function names seen */
    char *fn[1024];
    uint32_t nf = 0;
    double *smp = calloc((size_t)e->R * 1024, sizeof(double));
    for (uint32_t r = 0; r < e->R; r++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s.rank%u.jsonl", prefix, r);
        json_t *arr = load_jsonl(path), *v;
        size_t i;
        json_array_foreach(arr, i, v)
        {
            const char *kind = json_string_value(json_object_get(v, "kind"));
            if (kind && !strcmp(kind, "end"))
                e->bytes += (uint64_t)num(json_object_get(v, "bytes"));
            if (!kind || strcmp(kind, "pc"))
                continue;
            const char *name = json_string_value(json_object_get(v, "function")) ?: "?";
            uint32_t f = 0;
            while (f < nf && strcmp(fn[f], name))
                f++;
            if (f == nf) {
                if (nf == 1024)
                    continue;
                fn[nf++] = strdup(name);
            }
            const char *reason;
            json_t *cnt;
            json_object_foreach(json_object_get(v, "stall"), reason, cnt)
                smp[(size_t)r * 1024 + f] += num(cnt);
        }
        json_decref(arr);
    }
    int32_t best_r = -1, best_f = -1;
    double best = 0;
    for (uint32_t f = 0; f < nf; f++)
        for (uint32_t r = 0; r < e->R; r++) {
            double v[MAX_RANKS];
            size_t n = 0;
            for (uint32_t q = 0; q < e->R; q++)
                if (q != r)
                    v[n++] = smp[(size_t)q * 1024 + f];
            double ex = smp[(size_t)r * 1024 + f] - median(v, n);
            if (ex > best) {
                best = ex;
                best_r = (int32_t)r;
                best_f = (int32_t)f;
            }
        }
    json_t *arr = json_array();
    if (best_r >= 0) {
        const char *cls = NULL;
        int uses = 0;
        const char *k;
        json_t *val;
        json_object_foreach(fmap, k, val)
        {
            if (json_string_value(val) && !strcmp(k, fn[best_f])) {
                cls = json_string_value(val);
                uses++;
            }
        }
        json_t *o = json_object(), *root = json_object(), *st = json_array();
        int named = cls && uses == 1;
        json_object_set_new(o, "cause", json_string(named ? "slow_task" : "undecided"));
        json_object_set_new(root, "rank", json_integer(best_r));
        json_object_set_new(root, "task_class", named ? json_string(cls) : json_null());
        json_object_set_new(o, "root", root);
        for (uint32_t s = 0; s < e->S; s++)
            json_array_append_new(st, json_integer(s));
        json_object_set_new(o, "steps", st);
        char why[512];
        snprintf(why, sizeof(why), "%.0f samples more than the peers in %s%s", best, fn[best_f],
                 named ? "" : ", a function of no single task class");
        json_object_set_new(o, "evidence", json_string(why));
        json_array_append_new(arr, o);
    }
    for (uint32_t f = 0; f < nf; f++)
        free(fn[f]);
    free(smp);
    json_decref(fmap);
    return arr;
}

static void usage(FILE *f)
{
    fputs("usage: mkscope-baselines TOOL --bench FILE [OPTIONS]\n"
          "\n"
          "The answer one simpler tool gives about a run of mkscope-bench, as JSON:\n"
          "{\"tool\", \"bytes\", \"groups\": [...]} with groups shaped as mkscope -f json\n"
          "diagnose prints them (bench/counter/README.md has the rules).\n"
          "\n"
          "TOOL\n"
          "  counters     the fixed counters (--counters PREFIX)\n"
          "  trace        the native profiler's full trace (--trace PREFIX)\n"
          "  steps        the step-level timeline (bench.json's step times alone)\n"
          "  kernels      CUDA: the kernel-level timeline of CUPTI activity (--cupti PREFIX:\n"
          "               bench/counter/gpu/cupti_tool.c's PREFIX.rankR.jsonl)\n"
          "  pcsamp       CUDA: CUPTI PC sampling with stall reasons (--cupti PREFIX,\n"
          "               --functions FILE: device function -> task class)\n"
          "\n"
          "OPTIONS\n"
          "  --bench FILE       the run's mkscope-bench --json\n"
          "  --counters PREFIX  PREFIX.rankR.json of mkscope-bench --counters\n"
          "  --trace PREFIX     PREFIX.rankR.json of mkscope-bench --trace\n"
          "  --keep-bytes N     trace: sample whole tasks down to N bytes of records\n"
          "  --seed N           trace: the sample's seed [1]\n"
          "  --min-steps N      groups of fewer steps are not reported [3]\n"
          "  --cupti PREFIX     kernels, pcsamp: the CUPTI tool's files\n"
          "  --functions FILE   pcsamp: JSON object, device function -> task class\n"
          "  -o FILE            write the answer there [stdout]\n"
          "  -h, --help\n"
          "\n"
          "EXAMPLES\n"
          "  mkscope-baselines counters --bench d/bench.json --counters d/ctr\n"
          "  mkscope-baselines trace --bench d/bench.json --trace d/trace --keep-bytes 40000\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *tool = argv[1], *bench = NULL, *ctr = NULL, *trace = NULL, *out = NULL;
    const char *cupti = NULL, *functions = NULL;
    long long keep = -1, seed = 1, min_steps = 3;
    static const struct option opts[] = {
        {"bench", required_argument, NULL, 'b'}, {"counters", required_argument, NULL, 'c'},
        {"trace", required_argument, NULL, 't'}, {"keep-bytes", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},  {"min-steps", required_argument, NULL, 'm'},
        {"cupti", required_argument, NULL, 'u'}, {"functions", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
    int o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 'b':
            bench = optarg;
            break;
        case 'c':
            ctr = optarg;
            break;
        case 't':
            trace = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'u':
            cupti = optarg;
            break;
        case 'f':
            functions = optarg;
            break;
        case 'k':
        case 's':
        case 'm': {
            long long v = strtoll(optarg, &end, 10);
            if (!*optarg || *end || v < 0) {
                fprintf(stderr, "mkscope-baselines: --%s wants a number, not '%s'\n",
                        o == 'k'   ? "keep-bytes"
                        : o == 's' ? "seed"
                                   : "min-steps",
                        optarg);
                return 2;
            }
            *(o == 'k' ? &keep : o == 's' ? &seed : &min_steps) = v;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !bench) {
        fprintf(stderr, "mkscope-baselines: %s\n",
                optind < argc ? "unexpected argument" : "--bench FILE is needed");
        return 2;
    }
    struct ev *e = calloc(1, sizeof(*e));
    if (!e)
        die("out of memory");
    load_bench(e, bench);
    json_t *groups;
    if (!strcmp(tool, "counters")) {
        if (!ctr)
            die("counters needs --counters PREFIX");
        load_counters(e, ctr);
        groups = groups_json(e, (int)min_steps);
    } else if (!strcmp(tool, "trace")) {
        if (!trace)
            die("trace needs --trace PREFIX");
        double frac = 1.0;
        if (keep >= 0) {
            /* the full trace's records first: the fraction to keep */
            struct ev *full = calloc(1, sizeof(*full));
            load_bench(full, bench);
            load_trace(full, trace, 1.0, 0);
            /* the step markers are kept whatever the budget: the rest of the
             * budget goes to tasks */
            double rest = (double)full->bytes - (double)full->marker_bytes;
            frac = rest > 0 ? ((double)keep - (double)full->marker_bytes) / rest : 1.0;
            frac = frac > 1.0 ? 1.0 : frac < 0 ? 0 : frac;
            free(full->cells);
            free(full->step_ns);
            free(full);
        }
        load_trace(e, trace, frac, (uint64_t)seed);
        groups = groups_json(e, (int)min_steps);
    } else if (!strcmp(tool, "kernels")) {
        if (!cupti)
            die("kernels needs --cupti PREFIX");
        load_kernels(e, cupti);
        groups = groups_json(e, (int)min_steps);
    } else if (!strcmp(tool, "pcsamp")) {
        if (!cupti)
            die("pcsamp needs --cupti PREFIX");
        groups = pcsamp_json(e, cupti, functions);
    } else if (!strcmp(tool, "steps")) {
        groups = steps_json(e, (int)min_steps);
    } else {
        fprintf(stderr,
                "mkscope-baselines: unknown tool '%s' (counters, trace, steps, kernels, pcsamp)\n",
                tool);
        return 2;
    }
    json_t *res = json_object();
    json_object_set_new(res, "tool", json_string(tool));
    json_object_set_new(res, "bytes", json_integer((json_int_t)e->bytes));
    json_object_set_new(res, "groups", groups);
    int rc = out ? json_dump_file(res, out, JSON_COMPACT) : json_dumpf(res, stdout, JSON_COMPACT);
    if (!out)
        putchar('\n');
    if (rc)
        die("writing the answer failed");
    json_decref(res);
    return 0;
}
