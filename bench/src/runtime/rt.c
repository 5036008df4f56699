/*
 * Events, per-worker queues, the scheduler and the workers of one rank (see
 * rt.h for the model).  All scheduling state lives under one lock per rank:
 * queues are short and the lock is held only to move task pointers, never
 * while a task body runs.
 */
#include "rt.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../bench_int.h"
#include "mkscope/runtime.h"

/* Records per worker; beyond: counted as dropped.  MPK's buffer is fixed
 * like this; the benchmark build (mkscope-bench-obs) takes 2^20 so that its
 * full trace of a 10,000-step run is whole. */
#ifndef BR_PROF_CAP_LOG2
#define BR_PROF_CAP_LOG2 16
#endif
#define BR_PROF_CAP (1u << BR_PROF_CAP_LOG2)
/* Injected sleeps closer than this belong to one run (one operator's tasks
 * on a worker): longer than a small task body, shorter than a step. */
#define BR_SLEEP_RUN_GAP_NS (100ull * 1000ull)

struct br_event {
    _Atomic uint64_t count;
    uint64_t target;
};

struct br_graph {
    struct br_task *tasks;
    uint32_t n;
    uint32_t *dep_head; /* per event: first dependent, or UINT32_MAX */
};

struct br_queue {
    struct br_task **ring;
    uint32_t head, n;
    uint32_t busy;
    pthread_cond_t cv;
};

/* One class's fixed counters of one step (br_counters_export). */
struct br_cls_ctr {
    uint64_t n, run, run_max, queue, queue_max;
};
/* Waits on one peer's remote events in one step. */
struct br_wait_ctr {
    uint64_t n, ns, max;
};

struct br_worker {
    struct br_rt *rt;
    uint32_t id;
    pthread_t thr;
    int started;
    uint64_t *class_count;
    struct br_prof_rec *prof;
    uint32_t prof_n;
    uint64_t prof_dropped;
    int64_t sleep_debt; /* ns the last run of injected sleeps overshot */
    uint64_t sleep_end; /* when the last injected sleep ended */
    uint64_t faulted;   /* tasks a fault plan changed */
    /* fixed counters, [step][class] and [step][peer]: a worker's own, so no
     * atomics on the task path; summed at export */
    struct br_cls_ctr *ctr;
    struct br_wait_ctr *wctr;
};

struct br_rt {
    struct br_opts o;
    pthread_mutex_t mu;
    pthread_mutex_t *hook_mu; /* per hook worker slot, workers + scheduler */
    pthread_cond_t finish_cv;
    struct br_queue *q;
    struct br_worker *w;
    struct br_event *ev;
    struct br_graph g[2];
    uint32_t cur;   /* graph events resolve against */
    uint32_t build; /* graph being built */
    struct br_task **ready;
    uint32_t n_ready;
    struct br_task **deferred; /* ended tasks whose release is postponed */
    uint32_t n_deferred;
    uint32_t rr;
    uint64_t passovers;
    int stop, finished, finish_status;
    struct br_order *order;
    _Atomic uint32_t n_order;
};

static void graph_free(struct br_graph *g)
{
    free(g->tasks);
    free(g->dep_head);
}

void br_stop(struct br_rt *rt)
{
    if (!rt->w || !rt->q)
        return;
    pthread_mutex_lock(&rt->mu);
    rt->stop = 1;
    for (uint32_t i = 0; i < rt->o.n_workers; i++)
        pthread_cond_signal(&rt->q[i].cv);
    pthread_mutex_unlock(&rt->mu);
    for (uint32_t i = 0; i < rt->o.n_workers; i++) {
        if (rt->w[i].started)
            pthread_join(rt->w[i].thr, NULL);
        rt->w[i].started = 0;
    }
}

void br_destroy(struct br_rt *rt)
{
    if (!rt)
        return;
    br_stop(rt);
    if (rt->w) {
        for (uint32_t i = 0; i < rt->o.n_workers; i++) {
            free(rt->w[i].class_count);
            free(rt->w[i].prof);
            free(rt->w[i].ctr);
            free(rt->w[i].wctr);
        }
    }
    if (rt->q) {
        for (uint32_t i = 0; i < rt->o.n_workers; i++) {
            free(rt->q[i].ring);
            pthread_cond_destroy(&rt->q[i].cv);
        }
    }
    graph_free(&rt->g[0]);
    graph_free(&rt->g[1]);
    pthread_cond_destroy(&rt->finish_cv);
    pthread_mutex_destroy(&rt->mu);
    if (rt->hook_mu)
        for (uint32_t i = 0; i <= rt->o.n_workers; i++)
            pthread_mutex_destroy(&rt->hook_mu[i]);
    free(rt->hook_mu);
    free(rt->q);
    free(rt->w);
    free(rt->ev);
    free(rt->ready);
    free(rt->deferred);
    free(rt->order);
    free(rt);
}

int br_create(const struct br_opts *opts, struct br_rt **rt_p)
{
    if (!opts->n_workers || !opts->n_events || !opts->max_tasks || !opts->n_classes)
        return -EINVAL;
    struct br_rt *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return -ENOMEM;
    rt->o = *opts;
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->finish_cv, NULL);
    const uint32_t W = opts->n_workers, T = opts->max_tasks;
    rt->q = calloc(W, sizeof(*rt->q));
    rt->w = calloc(W, sizeof(*rt->w));
    rt->ev = calloc(opts->n_events, sizeof(*rt->ev));
    rt->ready = calloc(T, sizeof(*rt->ready));
    rt->deferred = calloc(T, sizeof(*rt->deferred));
    rt->hook_mu = calloc(W + 1, sizeof(*rt->hook_mu));
    if (rt->hook_mu)
        for (uint32_t i = 0; i <= W; i++)
            pthread_mutex_init(&rt->hook_mu[i], NULL);
    if (opts->order_cap)
        rt->order = calloc(opts->order_cap, sizeof(*rt->order));
    int bad = !rt->q || !rt->w || !rt->ev || !rt->ready || !rt->deferred || !rt->hook_mu ||
              (opts->order_cap && !rt->order);
    for (uint32_t i = 0; i < W && !bad; i++) {
        pthread_cond_init(&rt->q[i].cv, NULL);
        rt->q[i].ring = calloc(T, sizeof(*rt->q[i].ring));
        rt->w[i].rt = rt;
        rt->w[i].id = i;
        rt->w[i].class_count = calloc(opts->n_classes, sizeof(uint64_t));
        bad = !rt->q[i].ring || !rt->w[i].class_count;
#ifdef MKS_BENCH_PROFILER
        rt->w[i].prof = malloc(BR_PROF_CAP * sizeof(*rt->w[i].prof));
        bad = bad || !rt->w[i].prof;
#endif
#ifdef MKS_BENCH_COUNTERS
        const size_t S = opts->n_steps ? opts->n_steps : 1;
        rt->w[i].ctr = calloc(S * opts->n_classes, sizeof(*rt->w[i].ctr));
        rt->w[i].wctr = calloc(S * opts->n_ranks, sizeof(*rt->w[i].wctr));
        bad = bad || !rt->w[i].ctr || !rt->w[i].wctr;
#endif
    }
    for (int k = 0; k < 2 && !bad; k++) {
        rt->g[k].tasks = calloc(T, sizeof(struct br_task));
        rt->g[k].dep_head = malloc(opts->n_events * sizeof(uint32_t));
        bad = !rt->g[k].tasks || !rt->g[k].dep_head;
        if (!bad)
            memset(rt->g[k].dep_head, 0xff, opts->n_events * sizeof(uint32_t));
    }
    if (bad) {
        br_destroy(rt);
        return -ENOMEM;
    }
    rt->build = 1;
    *rt_p = rt;
    return 0;
}

void *br_user(const struct br_rt *rt)
{
    return rt->o.user;
}
uint32_t br_rank(const struct br_rt *rt)
{
    return rt->o.rank;
}
uint32_t br_workers(const struct br_rt *rt)
{
    return rt->o.n_workers;
}

/* ---- hooks ------------------------------------------------------------- */

void br_ctx_init(const struct br_rt *rt, uint32_t worker, const struct br_task *t, uint16_t ev,
                 struct mks_hook_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->abi_version = MKS_HOOK_ABI_VERSION;
    ctx->size = sizeof(*ctx);
    ctx->event = ev;
    ctx->rank = rt->o.rank;
    ctx->worker = worker;
    ctx->sm = worker;
    if (t) {
        ctx->flags = t->flags;
        ctx->task_class = t->cls;
        ctx->task_gen = t->gen;
        ctx->req_gen = t->req_gen;
        ctx->step = t->step;
        ctx->tile_x = t->tile_x;
        ctx->tile_y = t->tile_y;
        ctx->t_ready = t->t_ready;
        ctx->t_start = t->t_start;
        ctx->t_end = t->t_end;
    }
}

int32_t br_hook(struct br_rt *rt, struct mks_hook_ctx *ctx)
{
#ifdef MKS_HOOKS_DISABLED
    (void)rt;
    (void)ctx;
    return 0;
#else
    struct mks_rt *h = rt->o.hooks;
    if (!h)
        return 0;
    /* The detached path is the mask test alone; the clock is read only when a
     * program will see it. */
    if (!(*((const struct mks_rt_hot *)(const void *)h)->mask & (1u << ctx->event)))
        return 0;
    ctx->t_now = bb_now_ns();
    /* A hook slot is single-threaded (devhooks keeps per-worker state).  The
     * scheduler runs TASK_ASSIGN and QUEUE_PRESSURE in the slot of the worker
     * whose queue it touches, so that slot is locked; uncontended, and only
     * taken when a program is attached. */
    uint32_t slot = ctx->worker < rt->o.n_workers ? ctx->worker : rt->o.n_workers;
    pthread_mutex_lock(&rt->hook_mu[slot]);
    int32_t hint = MKS_HOOK(h, ctx);
    pthread_mutex_unlock(&rt->hook_mu[slot]);
    if (hint < 0)
        hint = 0;
    if (hint > MKS_PRIO_HINT_MAX)
        hint = MKS_PRIO_HINT_MAX;
    return hint;
#endif
}

int32_t br_hook_remote(struct br_rt *rt, uint32_t worker, const struct br_task *t, uint16_t ev,
                       uint32_t peer, uint64_t comm_gen, uint64_t dep_event, uint64_t value)
{
    struct mks_hook_ctx ctx;
    br_ctx_init(rt, worker, t, ev, &ctx);
    ctx.peer_rank = peer;
    ctx.comm_gen = comm_gen;
    ctx.dep_event = dep_event;
    ctx.dep_class = MKS_DEP_REMOTE;
    ctx.value = value;
    return br_hook(rt, &ctx);
}

static inline void prof_rec(struct br_worker *w, uint8_t kind, const struct br_task *t)
{
#ifdef MKS_BENCH_PROFILER
    if (w->prof_n >= BR_PROF_CAP) {
        w->prof_dropped++;
        return;
    }
    struct br_prof_rec *r = &w->prof[w->prof_n++];
    r->t = bb_now_ns();
    r->cls = t->cls;
    r->kind = kind;
    r->pad = 0;
    r->tile = t->tile_x | (t->tile_y << 16);
#else
    (void)w;
    (void)kind;
    (void)t;
#endif
}

static inline void ctr_max(uint64_t *m, uint64_t v)
{
    if (v > *m)
        *m = v;
}

/* The fixed counters of a task that ended (t_end set). */
static inline void ctr_task(const struct br_rt *rt, struct br_worker *w, const struct br_task *t)
{
#ifdef MKS_BENCH_COUNTERS
    if (t->step >= (rt->o.n_steps ? rt->o.n_steps : 1) || t->cls >= rt->o.n_classes)
        return;
    struct br_cls_ctr *c = &w->ctr[(size_t)t->step * rt->o.n_classes + t->cls];
    uint64_t run = t->t_end - t->t_start, q = t->t_start > t->t_ready ? t->t_start - t->t_ready : 0;
    c->n++;
    c->run += run;
    ctr_max(&c->run_max, run);
    c->queue += q;
    ctr_max(&c->queue_max, q);
#else
    (void)rt;
    (void)w;
    (void)t;
#endif
}

static inline void ctr_wait(const struct br_rt *rt, struct br_worker *w, const struct br_task *t,
                            uint32_t peer, uint64_t ns)
{
#ifdef MKS_BENCH_COUNTERS
    if (t->step >= (rt->o.n_steps ? rt->o.n_steps : 1) || peer >= rt->o.n_ranks)
        return;
    struct br_wait_ctr *c = &w->wctr[(size_t)t->step * rt->o.n_ranks + peer];
    c->n++;
    c->ns += ns;
    ctr_max(&c->max, ns);
#else
    (void)rt;
    (void)w;
    (void)t;
    (void)peer;
    (void)ns;
#endif
}

/* ---- graphs and events -------------------------------------------------- */

void br_graph_begin(struct br_rt *rt)
{
    struct br_graph *g = &rt->g[rt->build];
    g->n = 0;
    memset(g->dep_head, 0xff, rt->o.n_events * sizeof(uint32_t));
}

static struct br_task *graph_add(struct br_rt *rt, struct br_graph *g)
{
    if (g->n >= rt->o.max_tasks)
        return NULL;
    struct br_task *t = &g->tasks[g->n];
    memset(t, 0, sizeof(*t));
    t->wait_ev = BR_EV_NONE;
    t->trig_ev = BR_EV_NONE;
    t->force_worker = -1;
    t->next_dep = UINT32_MAX;
    g->n++;
    return t;
}

/* Link a task into its wait event's dependents once its fields are final:
 * done lazily by commit (static graph) or by add_live (dynamic task). */
static void graph_link(struct br_rt *rt, struct br_graph *g, uint32_t i)
{
    struct br_task *t = &g->tasks[i];
    if (t->wait_ev >= rt->o.n_events)
        return;
    /* append, so dependents become ready in creation order */
    uint32_t *p = &g->dep_head[t->wait_ev];
    while (*p != UINT32_MAX)
        p = &g->tasks[*p].next_dep;
    *p = i;
}

struct br_task *br_task_add(struct br_rt *rt)
{
    return graph_add(rt, &rt->g[rt->build]);
}

void br_graph_commit(struct br_rt *rt)
{
    struct br_graph *g = &rt->g[rt->build];
    for (uint32_t i = 0; i < g->n; i++)
        graph_link(rt, g, i);
    pthread_mutex_lock(&rt->mu);
    rt->cur = rt->build;
    rt->build ^= 1u;
    pthread_mutex_unlock(&rt->mu);
}

struct br_task *br_task_add_live(struct br_rt *rt, const struct br_task *proto)
{
    pthread_mutex_lock(&rt->mu);
    struct br_graph *g = &rt->g[rt->cur];
    struct br_task *t = graph_add(rt, g);
    if (t) {
        *t = *proto;
        t->next_dep = UINT32_MAX;
        t->flags |= MKS_CTX_F_DYNAMIC;
        graph_link(rt, g, (uint32_t)(t - g->tasks));
    }
    pthread_mutex_unlock(&rt->mu);
    return t;
}

void br_event_expect(struct br_rt *rt, uint32_t ev, uint64_t n)
{
    rt->ev[ev].target += n;
}

uint64_t br_event_count(const struct br_rt *rt, uint32_t ev)
{
    return atomic_load(&rt->ev[ev].count);
}

uint64_t br_event_target(const struct br_rt *rt, uint32_t ev)
{
    return rt->ev[ev].target;
}

/* ---- scheduler ---------------------------------------------------------- */

static uint32_t pick_worker(struct br_rt *rt, const struct br_task *t)
{
    const uint32_t W = rt->o.n_workers;
    if (t->force_worker >= 0 && (uint32_t)t->force_worker < W)
        return (uint32_t)t->force_worker;
    uint32_t best = rt->rr % W, best_load = UINT32_MAX;
    for (uint32_t k = 0; k < W; k++) {
        uint32_t i = (rt->rr + k) % W;
        /* queued tasks weigh more than the one running: it is usually the
         * worker that fired this event, about to finish */
        uint32_t load = 2 * rt->q[i].n + rt->q[i].busy;
        if (load < best_load) {
            best_load = load;
            best = i;
        }
    }
    rt->rr++;
    return best;
}

static void assign(struct br_rt *rt, struct br_task *t)
{
    uint32_t wi = pick_worker(rt, t);
    struct br_queue *q = &rt->q[wi];
    struct mks_hook_ctx ctx;
    br_ctx_init(rt, wi, t, MKS_EV_TASK_ASSIGN, &ctx);
    ctx.value = wi;
    ctx.queue_depth = q->n;
    int32_t hint = br_hook(rt, &ctx);
    t->worker = wi;
    uint32_t cap = rt->o.max_tasks;
    if (hint > t->prio) {
        /* a hint above the task's ready priority jumps the queue */
        q->head = (q->head + cap - 1) % cap;
        q->ring[q->head] = t;
    } else {
        q->ring[(q->head + q->n) % cap] = t;
    }
    q->n++;
    if (rt->o.queue_pressure && q->n == rt->o.queue_pressure) {
        br_ctx_init(rt, wi, t, MKS_EV_QUEUE_PRESSURE, &ctx);
        ctx.value = rt->o.queue_pressure;
        ctx.queue_depth = q->n;
        br_hook(rt, &ctx);
    }
    pthread_cond_signal(&q->cv);
}

/* Assign every ready task that is not being passed over; returns the time the
 * earliest passed-over task becomes eligible (0 when none waits). */
static uint64_t dispatch(struct br_rt *rt)
{
    uint64_t now = 0, next = 0;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < rt->n_ready; i++) {
        struct br_task *t = rt->ready[i];
        if (t->starve_ns) {
            if (!now)
                now = bb_now_ns();
            uint64_t due = t->t_ready + t->starve_ns;
            if (now < due) {
                rt->passovers++;
                rt->ready[keep++] = t;
                if (!next || due < next)
                    next = due;
                continue;
            }
        }
        assign(rt, t);
    }
    rt->n_ready = keep;
    return next;
}

static void fire_locked(struct br_rt *rt, uint32_t ev)
{
    struct br_graph *g = &rt->g[rt->cur];
    const uint32_t sched = rt->o.n_workers;
    uint32_t first = rt->n_ready;
    uint64_t now = bb_now_ns();
    for (uint32_t i = g->dep_head[ev]; i != UINT32_MAX; i = g->tasks[i].next_dep) {
        struct br_task *t = &g->tasks[i];
        t->t_ready = now;
        struct mks_hook_ctx ctx;
        br_ctx_init(rt, sched, t, MKS_EV_TASK_READY, &ctx);
        ctx.dep_event = ev;
        ctx.dep_class = MKS_DEP_LOCAL;
        t->prio = br_hook(rt, &ctx);
        /* stable insertion by priority among the newly ready */
        uint32_t j = rt->n_ready++;
        while (j > first && rt->ready[j - 1]->prio < t->prio) {
            rt->ready[j] = rt->ready[j - 1];
            j--;
        }
        rt->ready[j] = t;
    }
    uint64_t next = dispatch(rt);
    if (next) {
        /* someone must come back for the passed-over task: wake a worker,
         * it sleeps until then and re-runs the scheduler */
        for (uint32_t i = 0; i < rt->o.n_workers; i++)
            pthread_cond_signal(&rt->q[i].cv);
    }
}

void br_event_fire(struct br_rt *rt, uint32_t ev)
{
    pthread_mutex_lock(&rt->mu);
    fire_locked(rt, ev);
    pthread_mutex_unlock(&rt->mu);
}

void br_event_trigger(struct br_rt *rt, uint32_t worker, const struct br_task *by, uint32_t ev)
{
    uint64_t c = atomic_fetch_add_explicit(&rt->ev[ev].count, 1, memory_order_acq_rel) + 1;
    struct mks_hook_ctx ctx;
    br_ctx_init(rt, worker, by, MKS_EV_DEP_RELEASE, &ctx);
    ctx.dep_event = ev;
    ctx.dep_class = MKS_DEP_LOCAL;
    ctx.value = c;
    br_hook(rt, &ctx);
    if (c == rt->ev[ev].target)
        br_event_fire(rt, ev);
}

/* ---- workers ------------------------------------------------------------ */

void br_fault_sleep(struct br_rt *rt, uint32_t worker, uint64_t ns)
{
    /* A loaded machine wakes sleepers late; paying the overshoot back from
     * the worker's next injected sleep of the same run (back to back tasks
     * of one operator) keeps a fault's added time close to its magnitude
     * whatever the number of sleeps it is split into.  Overshoot of an
     * earlier operator is forgotten: it may not have been on the critical
     * path. */
    struct br_worker *w = &rt->w[worker];
    uint64_t t0 = bb_now_ns();
    if (t0 - w->sleep_end > BR_SLEEP_RUN_GAP_NS)
        w->sleep_debt = 0;
    int64_t want = (int64_t)ns - w->sleep_debt;
    if (want <= 0) {
        w->sleep_debt -= (int64_t)ns;
        w->sleep_end = t0;
        return;
    }
    bb_sleep_ns((uint64_t)want);
    w->sleep_end = bb_now_ns();
    w->sleep_debt = (int64_t)(w->sleep_end - t0) - want;
}

void br_fault_sleep_until(struct br_rt *rt, uint32_t worker, uint64_t deadline)
{
    uint64_t now = bb_now_ns();
    if (now < deadline)
        br_fault_sleep(rt, worker, deadline - now);
}

/* What a task releases when it is done: its remote events (the task's own
 * release step), then its local event. */
static void release(struct br_rt *rt, uint32_t worker, struct br_task *t)
{
    if (t->release)
        t->release(rt, worker, t);
    if (t->trig_ev != BR_EV_NONE)
        br_event_trigger(rt, worker, t, t->trig_ev);
}

static void run_task(struct br_rt *rt, struct br_worker *w, struct br_task *t, uint32_t depth)
{
    if (t->hold_ns | t->run_delay_ns | t->notify_delay_ns | t->starve_ns | t->comm_delay_ns)
        w->faulted++;
    if (t->hold_ns)
        br_fault_sleep(rt, w->id, t->hold_ns);
    t->t_start = bb_now_ns();
    t->t_end = 0;
    struct mks_hook_ctx ctx;
    br_ctx_init(rt, w->id, t, MKS_EV_TASK_START, &ctx);
    ctx.queue_depth = depth;
    br_hook(rt, &ctx);
    if (rt->order) {
        uint32_t k = atomic_fetch_add(&rt->n_order, 1);
        if (k < rt->o.order_cap)
            rt->order[k] =
                (struct br_order){t->cls, (uint16_t)w->id, t->tile_x, t->tile_y, t->prio};
    }
    prof_rec(w, BR_PROF_BEGIN, t);
    t->body(rt, w->id, t);
    if (t->run_delay_ns)
        br_fault_sleep(rt, w->id, t->run_delay_ns);
    /* Kept for the release hooks: a release later than t_end is a late
     * notification, not a slow task. */
    t->t_end = bb_now_ns();
    br_ctx_init(rt, w->id, t, MKS_EV_TASK_END, &ctx);
    br_hook(rt, &ctx);
    prof_rec(w, BR_PROF_END, t);
    ctr_task(rt, w, t);
    w->class_count[t->cls]++;
    if (t->notify_delay_ns && (t->trig_ev != BR_EV_NONE || t->release)) {
        /* notify-delay: the task has ended and its worker moves on; the
         * release waits in the deferred list until due (worker loop) */
        t->release_at = bb_now_ns() + t->notify_delay_ns;
        pthread_mutex_lock(&rt->mu);
        rt->deferred[rt->n_deferred++] = t;
        for (uint32_t i = 0; i < rt->o.n_workers; i++)
            pthread_cond_signal(&rt->q[i].cv);
        pthread_mutex_unlock(&rt->mu);
        return;
    }
    release(rt, w->id, t);
}

/* A postponed release that is due, removed from the list; NULL if none.
 * *next_p gets the earliest due time still waiting (0 if none). */
static struct br_task *take_due(struct br_rt *rt, uint64_t now, uint64_t *next_p)
{
    uint64_t next = 0;
    for (uint32_t i = 0; i < rt->n_deferred; i++) {
        struct br_task *t = rt->deferred[i];
        if (t->release_at <= now) {
            rt->deferred[i] = rt->deferred[--rt->n_deferred];
            return t;
        }
        if (!next || t->release_at < next)
            next = t->release_at;
    }
    *next_p = next;
    return NULL;
}

static void *worker_main(void *arg)
{
    struct br_worker *w = arg;
    struct br_rt *rt = w->rt;
    struct br_queue *q = &rt->q[w->id];
    /* Injected delays are sleeps; the default 50 us timer slack would add
     * to each of them unevenly across fault types. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#ifndef MKS_HOOKS_DISABLED
    /* this thread is the worker: devhooks measures its wait for a CPU */
    if (rt->o.hooks)
        mks_rt_worker_thread(rt->o.hooks, w->id);
#endif
    pthread_mutex_lock(&rt->mu);
    for (;;) {
        /* stop first: after a failure the queues may still hold tasks */
        if (rt->stop)
            break;
        uint64_t next_release = 0;
        if (rt->n_deferred) {
            struct br_task *t = take_due(rt, bb_now_ns(), &next_release);
            if (t) {
                pthread_mutex_unlock(&rt->mu);
                release(rt, w->id, t);
                pthread_mutex_lock(&rt->mu);
                continue;
            }
        }
        if (q->n) {
            struct br_task *t = q->ring[q->head];
            q->head = (q->head + 1) % rt->o.max_tasks;
            q->n--;
            q->busy = 1;
            uint32_t depth = q->n;
            pthread_mutex_unlock(&rt->mu);
            run_task(rt, w, t, depth);
            pthread_mutex_lock(&rt->mu);
            q->busy = 0;
            continue;
        }
        uint64_t next = rt->n_ready ? dispatch(rt) : 0;
        if (q->n)
            continue;
        if (next_release && (!next || next_release < next))
            next = next_release;
        if (next) {
            uint64_t now = bb_now_ns();
            /* condition variables wait on CLOCK_REALTIME by default */
            struct timespec ts = bb_deadline(next > now ? next - now : 0);
            pthread_cond_timedwait(&q->cv, &rt->mu, &ts);
        } else {
            pthread_cond_wait(&q->cv, &rt->mu);
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

int br_start(struct br_rt *rt)
{
    for (uint32_t i = 0; i < rt->o.n_workers; i++) {
        int rc = pthread_create(&rt->w[i].thr, NULL, worker_main, &rt->w[i]);
        if (rc)
            return -rc;
        rt->w[i].started = 1;
    }
    return 0;
}

void br_finish(struct br_rt *rt, int status)
{
    pthread_mutex_lock(&rt->mu);
    rt->finished = 1;
    rt->finish_status = status;
    pthread_cond_broadcast(&rt->finish_cv);
    pthread_mutex_unlock(&rt->mu);
}

int br_wait_finish(struct br_rt *rt, const _Atomic uint32_t *abort_p)
{
    pthread_mutex_lock(&rt->mu);
    while (!rt->finished) {
        if (abort_p && atomic_load(abort_p)) {
            pthread_mutex_unlock(&rt->mu);
            return -ECANCELED;
        }
        struct timespec ts = bb_deadline(20 * 1000 * 1000);
        pthread_cond_timedwait(&rt->finish_cv, &rt->mu, &ts);
    }
    int st = rt->finish_status;
    pthread_mutex_unlock(&rt->mu);
    return st;
}

/* ---- remote waits --------------------------------------------------------- */

static long futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    /* shared (not PRIVATE): the counter lives in memory of several processes */
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

int br_wait_remote(struct br_rt *rt, uint32_t worker, const struct br_task *t,
                   _Atomic uint32_t *counter, uint32_t target, uint64_t dep_event, uint32_t peer,
                   uint64_t comm_gen, const _Atomic uint32_t *abort_p, uint64_t timeout_ns)
{
    br_hook_remote(rt, worker, t, MKS_EV_DEP_WAIT_BEGIN, peer, comm_gen, dep_event, target);
    prof_rec(&rt->w[worker], BR_PROF_WAIT_BEGIN, t);
#ifdef MKS_BENCH_COUNTERS
    const uint64_t wait_t0 = bb_now_ns();
#endif
    int rc = 0;
    uint64_t t0 = 0;
    for (uint32_t spin = 0;; spin++) {
        uint32_t v = atomic_load_explicit(counter, memory_order_acquire);
        if ((int32_t)(v - target) >= 0)
            break;
        if (spin < 64)
            continue; /* the release is often already on its way */
        if (abort_p && atomic_load(abort_p)) {
            rc = -ECANCELED;
            break;
        }
        uint64_t now = bb_now_ns();
        if (!t0)
            t0 = now;
        else if (now - t0 > timeout_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        futex_wait(counter, v, 10 * 1000 * 1000);
    }
    br_hook_remote(rt, worker, t, MKS_EV_DEP_WAIT_END, peer, comm_gen, dep_event, target);
    prof_rec(&rt->w[worker], BR_PROF_WAIT_END, t);
#ifdef MKS_BENCH_COUNTERS
    ctr_wait(rt, &rt->w[worker], t, peer, bb_now_ns() - wait_t0);
#else
    ctr_wait(rt, &rt->w[worker], t, peer, 0);
#endif
    return rc;
}

/* ---- counts and the profiler ---------------------------------------------- */

uint64_t br_class_count(const struct br_rt *rt, uint32_t cls)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < rt->o.n_workers; i++)
        n += rt->w[i].class_count[cls];
    return n;
}

uint64_t br_faulted(const struct br_rt *rt)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < rt->o.n_workers; i++)
        n += rt->w[i].faulted;
    return n;
}

uint64_t br_passovers(const struct br_rt *rt)
{
    return rt->passovers;
}

uint32_t br_order_get(const struct br_rt *rt, const struct br_order **order_p)
{
    uint32_t n = atomic_load(&rt->n_order);
    *order_p = rt->order;
    return n < rt->o.order_cap ? n : rt->o.order_cap;
}

uint64_t br_prof_dropped(const struct br_rt *rt)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < rt->o.n_workers; i++)
        n += rt->w[i].prof_dropped;
    return n;
}

int br_prof_export(const struct br_rt *rt, const char *path,
                   const char *(*cls_name)(void *user, uint32_t cls), void *user)
{
    const uint32_t W = rt->o.n_workers;
    struct br_prof_rec *all = malloc((size_t)W * BR_PROF_CAP * sizeof(*all));
    uint32_t *counts = calloc(W, sizeof(*counts));
    int rc = -ENOMEM;
    if (all && counts) {
        for (uint32_t i = 0; i < W; i++) {
            counts[i] = rt->w[i].prof_n;
            if (counts[i])
                memcpy(all + (size_t)i * BR_PROF_CAP, rt->w[i].prof, counts[i] * sizeof(*all));
        }
        rc = br_prof_write(path, rt->o.rank, W, all, BR_PROF_CAP, counts, br_prof_dropped(rt),
                           cls_name, user);
    }
    free(all);
    free(counts);
    return rc;
}

int br_prof_write(const char *path, uint32_t rank, uint32_t n_workers,
                  const struct br_prof_rec *recs, uint32_t stride, const uint32_t *counts,
                  uint64_t dropped, const char *(*cls_name)(void *user, uint32_t cls), void *user)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    static const char *const ph[] = {"B", "E", "B", "E"};
    fprintf(f,
            "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"rank\":%u,\"dropped\":%" PRIu64
            "},\"traceEvents\":[\n",
            rank, dropped);
    int first = 1;
    for (uint32_t i = 0; i < n_workers; i++) {
        for (uint32_t k = 0; k < counts[i]; k++) {
            const struct br_prof_rec *r = &recs[(size_t)i * stride + k];
            const char *name =
                r->kind >= BR_PROF_WAIT_BEGIN ? "remote_wait" : cls_name(user, r->cls);
            fprintf(f,
                    "%s{\"name\":\"%s\",\"ph\":\"%s\",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,"
                    "\"args\":{\"tile_x\":%u,\"tile_y\":%u}}",
                    first ? "" : ",\n", name ? name : "?", ph[r->kind & 3], rank, i,
                    (double)r->t / 1e3, r->tile & 0xffff, r->tile >> 16);
            first = 0;
        }
    }
    fprintf(f, "\n]}\n");
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) && !rc)
        rc = -errno;
    return rc;
}

/* The fixed counters as JSON, one row a step:
 *   {"rank":R,"workers":W,"ranks":N,"classes":[names],"bytes_per_step":B,
 *    "steps":[{"c":[[class,n,run,run_max,queue,queue_max],...],
 *              "w":[[peer,n,ns,max],...]},...]}
 * rows that counted nothing are left out of the file; bytes_per_step is the
 * size of the whole fixed set (every class and peer, 8 bytes a counter), what
 * reading it each step costs whatever happened. */
int br_counters_export(const struct br_rt *rt, const char *path,
                       const char *(*cls_name)(void *user, uint32_t cls), void *user)
{
#ifndef MKS_BENCH_COUNTERS
    (void)rt;
    (void)path;
    (void)cls_name;
    (void)user;
    return -ENOTSUP;
#else
    const uint32_t C = rt->o.n_classes, P = rt->o.n_ranks, W = rt->o.n_workers;
    const uint32_t S = rt->o.n_steps ? rt->o.n_steps : 1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "{\"rank\":%u,\"workers\":%u,\"ranks\":%u,\"bytes_per_step\":%u,\"classes\":[",
            rt->o.rank, W, P, (C * 5u + P * 3u) * 8u);
    for (uint32_t c = 0; c < C; c++) {
        const char *n = cls_name(user, c);
        fprintf(f, "%s\"%s\"", c ? "," : "", n ? n : "?");
    }
    fprintf(f, "],\"steps\":[\n");
    for (uint32_t s = 0; s < S; s++) {
        fprintf(f, "%s{\"c\":[", s ? ",\n" : "");
        int first = 1;
        for (uint32_t c = 0; c < C; c++) {
            struct br_cls_ctr a = {0};
            for (uint32_t i = 0; i < W; i++) {
                const struct br_cls_ctr *x = &rt->w[i].ctr[(size_t)s * C + c];
                a.n += x->n;
                a.run += x->run;
                a.queue += x->queue;
                ctr_max(&a.run_max, x->run_max);
                ctr_max(&a.queue_max, x->queue_max);
            }
            if (!a.n)
                continue;
            fprintf(f, "%s[%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]",
                    first ? "" : ",", c, a.n, a.run, a.run_max, a.queue, a.queue_max);
            first = 0;
        }
        fprintf(f, "],\"w\":[");
        first = 1;
        for (uint32_t p = 0; p < P; p++) {
            struct br_wait_ctr a = {0};
            for (uint32_t i = 0; i < W; i++) {
                const struct br_wait_ctr *x = &rt->w[i].wctr[(size_t)s * P + p];
                a.n += x->n;
                a.ns += x->ns;
                ctr_max(&a.max, x->max);
            }
            if (!a.n)
                continue;
            fprintf(f, "%s[%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", first ? "" : ",", p, a.n, a.ns,
                    a.max);
            first = 0;
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) && !rc)
        rc = -errno;
    return rc;
#endif
}
