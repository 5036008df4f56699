/*
 * EpochSummary encoding (see encode.h).
 *
 * Task rows: the latency monitor keys its histograms by step bucket
 * (step % MKS_MON_STEP_BUCKETS), not by step.  At the full tier a bucket is
 * reported under its real step only when the generation monitor saw exactly
 * one step of the summary in that bucket; other buckets fold into one row per
 * class with step 0 ("unknown" on the wire).  Per class the rows always add
 * up to the count monitor's exact count: whatever the histograms did not see
 * (tasks without a start time) goes into the step-0 row.
 */
#include "encode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "log.h"

uint32_t agt_tier_wire(enum agt_tier tier)
{
    switch (tier) {
    case AGT_TIER_FULL:
        return 2;
    case AGT_TIER_HIST:
        return 1;
    default:
        return 0;
    }
}

/* Whether a step's own rows go (meta's withheld steps, detail.h). */
static int step_kept(const struct agt_encode_meta *meta, uint64_t step)
{
    return !agt_detail_has(meta->withheld_steps, meta->n_withheld_steps, step);
}

/* All allocations of one encoding, freed together. */
struct arena {
    void **p;
    size_t n, cap;
    int oom;
};

static void *arena_alloc(struct arena *a, size_t size)
{
    if (a->oom)
        return NULL;
    if (a->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 64;
        void **np = realloc(a->p, ncap * sizeof(*np));
        if (!np) {
            a->oom = 1;
            return NULL;
        }
        a->p = np;
        a->cap = ncap;
    }
    void *m = calloc(1, size ? size : 1);
    if (!m) {
        a->oom = 1;
        return NULL;
    }
    a->p[a->n++] = m;
    return m;
}

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
}

static void hist_add(struct mks_hist *dst, const struct mks_hist *src)
{
    dst->count += src->count;
    dst->sum += src->sum;
    for (int b = 0; b < MKS_HIST_BUCKETS; b++)
        dst->buckets[b] += src->buckets[b];
}

/* A histogram message with the given count, sum and maximum, and the
 * buckets of h (NULL: none); NULL when it would say nothing. */
static Mkscope__V1__Hist *hist_of(struct arena *a, const struct mks_hist *h, uint64_t count,
                                  uint64_t sum, uint64_t max)
{
    size_t nb = 0;
    if (h)
        for (nb = MKS_HIST_BUCKETS; nb > 0 && h->buckets[nb - 1] == 0; nb--)
            ;
    if (!count && !nb)
        return NULL;
    Mkscope__V1__Hist *m = arena_alloc(a, sizeof(*m));
    if (!m)
        return NULL;
    mkscope__v1__hist__init(m);
    m->count = count;
    m->sum = sum;
    m->max = max;
    if (nb) {
        m->buckets = arena_alloc(a, nb * sizeof(uint64_t));
        if (!m->buckets)
            return NULL;
        memcpy(m->buckets, h->buckets, nb * sizeof(uint64_t));
        m->n_buckets = nb;
    }
    return m;
}

static void lstep_add(struct mks_mon_lat_step *d, const struct mks_mon_lat_step *s)
{
    d->count += s->count;
    d->run_count += s->run_count;
    d->run_sum += s->run_sum;
    d->queue_count += s->queue_count;
    d->queue_sum += s->queue_sum;
    if (s->run_max > d->run_max)
        d->run_max = s->run_max;
    if (s->queue_max > d->queue_max)
        d->queue_max = s->queue_max;
}

static int push_row(struct arena *a, Mkscope__V1__EpochSummary *es, uint32_t cls, int64_t step,
                    uint64_t count, Mkscope__V1__Hist *queue, Mkscope__V1__Hist *run)
{
    if (a->oom)
        return -ENOMEM;
    Mkscope__V1__TaskStat *t = arena_alloc(a, sizeof(*t));
    if (!t)
        return -ENOMEM;
    mkscope__v1__task_stat__init(t);
    t->task_class = cls;
    t->step = step >= 0 ? (uint32_t)step : 0;
    t->step_known = step >= 0;
    t->count = count;
    t->sum_run_ns = run ? run->sum : 0;
    t->queue = queue;
    t->run = run;
    es->task_stats[es->n_task_stats++] = t;
    return 0;
}

/*
 * Task rows of one class.  At the full tier, with the exact per-step
 * statistics of lat_step: one row per decode step (count, sums, maxima;
 * the step's histograms when its bucket held no other step of these
 * epochs), and one row of no step holding what could not be kept apart
 * (entries of mixed slots; the histograms of shared buckets, whose tasks
 * the step rows count already, so that every task is counted once and sits
 * in one histogram).  Without lat_step (an older latency monitor), one row
 * per bucket that held one step.  A step whose detail is withheld (meta's
 * filter) has no row: its tasks are in the row of no step, as a mixed
 * slot's are.  At coarser tiers one row of no step per class.  Per class
 * the rows add up to the count monitor's exact count.
 */
static int class_rows(struct arena *a, const struct agt_summary *s, enum agt_tier tier,
                      const struct agt_encode_meta *meta, uint32_t c,
                      const int64_t bmap[MKS_MON_STEP_BUCKETS], struct agt_lat_step *acc,
                      Mkscope__V1__EpochSummary *es)
{
    size_t n_acc = 0;
    struct mks_mon_lat_step mixed = {0}, all = {0};
    for (size_t i = 0; i < s->n_lstep; i++) {
        const struct agt_lat_step *e = &s->lstep[i];
        if (e->cls != c)
            continue;
        lstep_add(&all, &e->v);
        if (e->v.tag & MKS_MON_LAT_STEP_MIXED) {
            lstep_add(&mixed, &e->v);
            continue;
        }
        size_t k;
        for (k = 0; k < n_acc; k++)
            if (acc[k].v.tag == e->v.tag)
                break;
        if (k == n_acc)
            acc[n_acc++] = (struct agt_lat_step){.cls = c, .v = {.tag = e->v.tag}};
        lstep_add(&acc[k].v, &e->v);
    }
    int exact = tier == AGT_TIER_FULL && s->have_lstep;
    struct mks_hist ready = {0}, run = {0};
    uint64_t hist_count = 0, assigned = 0;
    int used[MKS_MON_STEP_BUCKETS] = {0};
    if (exact) {
        for (size_t k = 0; k < n_acc; k++) {
            const struct mks_mon_lat_step *v = &acc[k].v;
            int64_t step = (int64_t)(v->tag - 1);
            if (step > UINT32_MAX || !step_kept(meta, (uint64_t)step)) {
                lstep_add(&mixed, v);
                continue;
            }
            uint32_t b = (uint32_t)(step % MKS_MON_STEP_BUCKETS);
            const struct agt_lat *l = &s->lat[c * MKS_MON_STEP_BUCKETS + b];
            int own = l->present && bmap[b] == step;
            used[b] |= own;
            if (push_row(a, es, c, step, v->count,
                         hist_of(a, own ? &l->ready : NULL, v->queue_count, v->queue_sum,
                                 v->queue_max),
                         hist_of(a, own ? &l->run : NULL, v->run_count, v->run_sum, v->run_max)))
                return -ENOMEM;
            assigned += v->count;
        }
    }
    for (uint32_t b = 0; b < MKS_MON_STEP_BUCKETS; b++) {
        const struct agt_lat *l = &s->lat[c * MKS_MON_STEP_BUCKETS + b];
        if (!l->present)
            continue;
        hist_count += l->run.count;
        if (used[b])
            continue;
        if (!exact && tier == AGT_TIER_FULL && bmap[b] >= 0 && step_kept(meta, (uint64_t)bmap[b])) {
            /* older monitor: the bucket's histograms are its one step's */
            if (push_row(a, es, c, bmap[b], l->run.count,
                         hist_of(a, &l->ready, l->ready.count, l->ready.sum, 0),
                         hist_of(a, &l->run, l->run.count, l->run.sum, 0)))
                return -ENOMEM;
            assigned += l->run.count;
            continue;
        }
        hist_add(&ready, &l->ready);
        hist_add(&run, &l->run);
    }
    uint64_t total = s->have_counts ? s->cls[c].count : exact ? all.count : hist_count;
    if (total < assigned)
        total = assigned; /* a histogram saw more than the counter: keep both honest */
    uint64_t rest = total - assigned;
    /* The row of no step: in exact mode its counts and sums are the mixed
     * slots', its histograms the shared buckets'; otherwise both are the
     * histograms' own, with the maxima lat_step saw. */
    Mkscope__V1__Hist *q = NULL, *r = NULL;
    if (tier != AGT_TIER_COUNTS) {
        if (exact) {
            q = hist_of(a, &ready, mixed.queue_count, mixed.queue_sum, mixed.queue_max);
            r = hist_of(a, &run, mixed.run_count, mixed.run_sum, mixed.run_max);
        } else {
            q = hist_of(a, &ready, ready.count, ready.sum, all.queue_max);
            r = hist_of(a, &run, run.count, run.sum, all.run_max);
        }
    }
    if (rest == 0 && !q && !r)
        return a->oom ? -ENOMEM : 0;
    if (push_row(a, es, c, -1, rest, q, r))
        return -ENOMEM;
    /* counts only: the run sum still travels as sum_run_ns */
    if (tier == AGT_TIER_COUNTS)
        es->task_stats[es->n_task_stats - 1]->sum_run_ns = run.sum;
    return 0;
}

static int add_task_rows(struct arena *a, const struct agt_summary *s, enum agt_tier tier,
                         const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es)
{
    size_t cap = MKS_MON_MAX_CLASSES * (MKS_MON_STEP_BUCKETS + 1) + s->n_lstep;
    es->task_stats = arena_alloc(a, cap * sizeof(*es->task_stats));
    struct agt_lat_step *acc = arena_alloc(a, (s->n_lstep + 1) * sizeof(*acc));
    if (!es->task_stats || !acc)
        return -ENOMEM;
    int64_t bmap[MKS_MON_STEP_BUCKETS];
    agt_summary_bucket_steps(s, bmap);
    for (uint32_t c = 0; c < MKS_MON_MAX_CLASSES; c++) {
        int err = class_rows(a, s, tier, meta, c, bmap, acc, es);
        if (err)
            return err;
    }
    return 0;
}

/* Remote waits and releases, but those of a step whose detail is withheld
 * (counted in rows_withheld). */
static int add_waits(struct arena *a, const struct agt_summary *s,
                     const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es)
{
    if (s->n_remote) {
        es->remote_waits = arena_alloc(a, s->n_remote * sizeof(*es->remote_waits));
        if (!es->remote_waits)
            return -ENOMEM;
    }
    for (size_t i = 0; i < s->n_remote; i++) {
        const struct agt_remote *r = &s->remote[i];
        if (!step_kept(meta, r->v.step)) {
            es->rows_withheld++;
            continue;
        }
        Mkscope__V1__RemoteWait *w = arena_alloc(a, sizeof(*w));
        if (!w)
            return -ENOMEM;
        mkscope__v1__remote_wait__init(w);
        w->comm_gen = r->key.comm_gen;
        w->peer_rank = r->key.peer;
        w->waiter_class = (uint32_t)r->v.task_class;
        w->step = (uint32_t)r->v.step;
        w->worker = (uint32_t)r->v.worker;
        w->t_begin_dev_ns = r->v.first_begin;
        w->t_end_dev_ns = r->v.last_end >= r->v.first_begin ? r->v.last_end : r->v.first_begin;
        es->remote_waits[es->n_remote_waits++] = w;
    }
    if (s->n_release) {
        es->releases = arena_alloc(a, s->n_release * sizeof(*es->releases));
        if (!es->releases)
            return -ENOMEM;
    }
    for (size_t i = 0; i < s->n_release; i++) {
        const struct agt_release *r = &s->release[i];
        if (!step_kept(meta, r->v.step)) {
            es->rows_withheld++;
            continue;
        }
        Mkscope__V1__Release *m = arena_alloc(a, sizeof(*m));
        if (!m)
            return -ENOMEM;
        mkscope__v1__release__init(m);
        m->comm_gen = r->key.comm_gen;
        m->consumer_rank = r->key.peer;
        m->task_class = (uint32_t)r->v.task_class;
        m->step = (uint32_t)r->v.step;
        m->worker = (uint32_t)r->v.worker;
        /* The release monitor's record: comm_end (t_release; the task's
         * start is the transfer's begin), the task's end, and the remote
         * dep_release that raised the consumer's event.  Without that last
         * one (an older monitor, or it comes in a later epoch) the data's
         * arrival is the best estimate of the release. */
        m->t_start_dev_ns = r->v.t_start;
        /* Several workers' monitors update one local record, per (step,
         * class), without a lock (on a GPU their monitor warps run side by
         * side): a start after the end comes from another task.  The
         * record keeps its end and notification, what notify_delay judges,
         * rather than failing the whole summary on the wire's check. */
        if (r->v.t_end && r->v.t_start > r->v.t_end)
            m->t_start_dev_ns = 0;
        m->t_comm_begin_dev_ns = r->v.t_start <= r->v.t_release ? r->v.t_start : 0;
        m->t_comm_end_dev_ns = r->v.t_release;
        m->t_end_dev_ns = r->v.t_end;
        m->t_release_dev_ns = r->v.t_notify ? r->v.t_notify : r->v.t_release;
        m->bytes = r->v.bytes;
        es->releases[es->n_releases++] = m;
    }
    return 0;
}

static int add_maps(struct arena *a, const struct agt_summary *s, const struct agt_encode_meta *meta,
                    Mkscope__V1__EpochSummary *es)
{
    if (!s->n_user && !s->user_dropped)
        return 0;
    /* one MapDump per (prog_id, map name), in order of first appearance */
    es->maps = arena_alloc(a, (s->n_user + 1) * sizeof(*es->maps));
    if (!es->maps)
        return -ENOMEM;
    for (size_t i = 0; i < s->n_user; i++) {
        const struct agt_user_entry *u = &s->user[i];
        if (u->key_len > MKS_WIRE_MAX_BYTES || u->value_len > MKS_WIRE_MAX_BYTES)
            continue;
        Mkscope__V1__MapDump *d = NULL;
        for (size_t j = 0; j < es->n_maps; j++)
            if (es->maps[j]->prog_id == u->prog_id && strcmp(es->maps[j]->map_name, u->map) == 0)
                d = es->maps[j];
        if (!d) {
            d = arena_alloc(a, sizeof(*d));
            if (!d)
                return -ENOMEM;
            mkscope__v1__map_dump__init(d);
            d->prog_id = u->prog_id;
            d->map_name = (char *)u->map;
            d->prog_name = (char *)"";
            if (meta->prog_names && u->prog_id < meta->n_prog_names &&
                meta->prog_names[u->prog_id])
                d->prog_name = (char *)meta->prog_names[u->prog_id];
            d->entries = arena_alloc(a, s->n_user * sizeof(*d->entries));
            if (!d->entries)
                return -ENOMEM;
            es->maps[es->n_maps++] = d;
        }
        Mkscope__V1__MapEntry *e = arena_alloc(a, sizeof(*e));
        if (!e)
            return -ENOMEM;
        mkscope__v1__map_entry__init(e);
        e->key.data = u->bytes;
        e->key.len = u->key_len;
        e->value.data = u->bytes + u->key_len;
        e->value.len = u->value_len;
        d->entries[d->n_entries++] = e;
    }
    if (s->user_dropped)
        for (size_t j = 0; j < es->n_maps; j++)
            es->maps[j]->truncated = 1;
    return 0;
}

static int add_workers(struct arena *a, const struct agt_summary *s, int per_step,
                       const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es);
static int add_steps(struct arena *a, const struct agt_summary *s, int per_step,
                     const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es);

static int add_rest(struct arena *a, const struct agt_summary *s, enum agt_tier tier,
                    const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es)
{
    /* local dependency waits per waiter class (steps are not kept apart by
     * the monitor) */
    if (s->have_wait) {
        es->local_waits = arena_alloc(a, MKS_MON_MAX_CLASSES * sizeof(*es->local_waits));
        if (!es->local_waits)
            return -ENOMEM;
        for (uint32_t c = 0; c < MKS_MON_MAX_CLASSES; c++) {
            const struct mks_hist *h = &s->wait[MKS_MON_WAIT_KEY(MKS_DEP_LOCAL, c)];
            if (!h->count)
                continue;
            Mkscope__V1__LocalWait *w = arena_alloc(a, sizeof(*w));
            if (!w)
                return -ENOMEM;
            mkscope__v1__local_wait__init(w);
            w->waiter_class = c;
            w->count = h->count;
            w->sum_ns = h->sum;
            w->max_ns = s->wait_max[MKS_MON_WAIT_KEY(MKS_DEP_LOCAL, c)];
            es->local_waits[es->n_local_waits++] = w;
        }
    }
    if (add_workers(a, s, tier == AGT_TIER_FULL, meta, es))
        return -ENOMEM;
    return add_steps(a, s, tier == AGT_TIER_FULL, meta, es);
}

static const struct agt_step_done *done_step(const struct agt_summary *s, uint64_t step)
{
    for (size_t i = 0; i < s->n_done; i++)
        if (s->done[i].step == step)
            return &s->done[i];
    return NULL;
}

/* Step rows: one per step this summary saw tasks of, with what it saw; a
 * step that ended here is marked complete and carries its whole span (a
 * step that ended with no task in these epochs gets a row of its own).  At
 * the full tier a step whose detail is withheld says so (below it, no step
 * has rows of its own anyway: detail_tier says that). */
static int add_steps(struct arena *a, const struct agt_summary *s, int per_step,
                     const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es)
{
    size_t n = s->n_gen + s->n_done;
    if (!n)
        return 0;
    es->steps = arena_alloc(a, n * sizeof(*es->steps));
    es->gens = arena_alloc(a, n * sizeof(*es->gens));
    if (!es->steps || !es->gens)
        return -ENOMEM;
    for (size_t i = 0; i < s->n_gen; i++) {
        const struct mks_mon_gen *g = &s->gen[i];
        if (g->step > UINT32_MAX)
            continue;
        Mkscope__V1__StepTime *st = arena_alloc(a, sizeof(*st));
        Mkscope__V1__GenProgress *gp = arena_alloc(a, sizeof(*gp));
        if (!st || !gp)
            return -ENOMEM;
        mkscope__v1__step_time__init(st);
        st->step = (uint32_t)g->step;
        st->tasks = g->tasks_done;
        if (g->t_task_first && g->t_task_last >= g->t_task_first) {
            st->t_begin_dev_ns = g->t_task_first;
            st->t_end_dev_ns = g->t_task_last;
        }
        const struct agt_step_done *d = done_step(s, g->step);
        if (d && d->t_begin && d->t_end >= d->t_begin) {
            st->complete = 1;
            st->t_begin_dev_ns = d->t_begin;
            st->t_end_dev_ns = d->t_end;
            st->cpu_wait_measured = d->cpu_wait_known != 0;
            st->cpu_wait_ns = d->cpu_wait_known ? d->cpu_wait : 0;
            st->cpu_runs = d->cpu_wait_known ? d->cpu_runs : 0;
        }
        if (per_step && !step_kept(meta, g->step)) {
            st->detail_withheld = 1;
            es->steps_withheld++;
        }
        es->steps[es->n_steps++] = st;
        if (g->advances) {
            mkscope__v1__gen_progress__init(gp);
            gp->step = (uint32_t)g->step;
            gp->t_dev_ns = g->t_last;
            gp->value = g->max_gen;
            es->gens[es->n_gens++] = gp;
        }
    }
    for (size_t i = 0; i < s->n_done; i++) {
        const struct agt_step_done *d = &s->done[i];
        int seen = 0;
        for (size_t k = 0; k < s->n_gen && !seen; k++)
            seen = s->gen[k].step == d->step;
        if (seen || !d->t_begin || d->t_end < d->t_begin)
            continue;
        Mkscope__V1__StepTime *st = arena_alloc(a, sizeof(*st));
        if (!st)
            return -ENOMEM;
        mkscope__v1__step_time__init(st);
        st->step = d->step;
        st->t_begin_dev_ns = d->t_begin;
        st->t_end_dev_ns = d->t_end;
        st->complete = 1;
        st->cpu_wait_measured = d->cpu_wait_known != 0;
        st->cpu_wait_ns = d->cpu_wait_known ? d->cpu_wait : 0;
        st->cpu_runs = d->cpu_wait_known ? d->cpu_runs : 0;
        if (per_step && !step_kept(meta, d->step)) {
            st->detail_withheld = 1;
            es->steps_withheld++;
        }
        es->steps[es->n_steps++] = st;
    }
    return 0;
}

static uint32_t depth_of(const struct agt_summary *s, uint32_t worker)
{
    for (size_t i = 0; i < s->n_queue; i++)
        if (s->queue[i].worker == worker)
            return s->queue[i].v.depth_max > UINT32_MAX ? UINT32_MAX
                                                        : (uint32_t)s->queue[i].v.depth_max;
    return 0;
}

/* Worker rows: per (worker, step) for every step that ended here with its
 * worker times known (busy, idle = span - busy, tasks; the depth is the
 * worker's largest queue depth of the summary), but those of a step whose
 * detail is withheld (not sent, counted in rows_withheld: a row of no step
 * would be read as another step's); below the full tier one row
 * per worker of no step, the sums over those steps (a row per worker and
 * step costs more of a budget than the histograms do at a fast step rate);
 * without worker times (an older latency monitor), per worker with no step,
 * the queue monitor's view. */
static int add_workers(struct arena *a, const struct agt_summary *s, int per_step,
                       const struct agt_encode_meta *meta, Mkscope__V1__EpochSummary *es)
{
    size_t n = 0;
    if (s->have_wtime) {
        for (size_t i = 0; i < s->n_done; i++)
            if (s->done[i].busy)
                n += s->done[i].n_workers;
    } else {
        n = s->n_queue;
    }
    if (!n)
        return 0;
    es->workers = arena_alloc(a, n * sizeof(*es->workers));
    if (!es->workers)
        return -ENOMEM;
    if (!s->have_wtime) {
        for (size_t i = 0; i < s->n_queue; i++) {
            Mkscope__V1__WorkerStat *w = arena_alloc(a, sizeof(*w));
            if (!w)
                return -ENOMEM;
            mkscope__v1__worker_stat__init(w);
            w->worker = s->queue[i].worker;
            w->max_queue_depth = depth_of(s, w->worker);
            w->tasks = s->queue[i].v.assigns;
            es->workers[es->n_workers++] = w;
        }
        return 0;
    }
    if (!per_step) {
        /* one row per worker: the busy, idle and tasks of every step that
         * ended here with its worker times known */
        uint32_t nw = 0;
        for (size_t i = 0; i < s->n_done; i++)
            if (s->done[i].busy && s->done[i].n_workers > nw)
                nw = s->done[i].n_workers;
        for (uint32_t k = 0; k < nw; k++) {
            Mkscope__V1__WorkerStat *w = arena_alloc(a, sizeof(*w));
            if (!w)
                return -ENOMEM;
            mkscope__v1__worker_stat__init(w);
            w->worker = k;
            w->max_queue_depth = depth_of(s, k);
            for (size_t i = 0; i < s->n_done; i++) {
                const struct agt_step_done *d = &s->done[i];
                if (!d->busy || k >= d->n_workers)
                    continue;
                uint64_t span = d->t_end > d->t_begin ? d->t_end - d->t_begin : 0;
                w->busy_ns += d->busy[k];
                w->idle_ns += span > d->busy[k] ? span - d->busy[k] : 0;
                w->tasks += d->tasks[k];
            }
            es->workers[es->n_workers++] = w;
        }
        return 0;
    }
    for (size_t i = 0; i < s->n_done; i++) {
        const struct agt_step_done *d = &s->done[i];
        if (!d->busy)
            continue;
        if (!step_kept(meta, d->step)) {
            es->rows_withheld += d->n_workers;
            continue;
        }
        uint64_t span = d->t_end > d->t_begin ? d->t_end - d->t_begin : 0;
        for (uint32_t k = 0; k < d->n_workers; k++) {
            Mkscope__V1__WorkerStat *w = arena_alloc(a, sizeof(*w));
            if (!w)
                return -ENOMEM;
            mkscope__v1__worker_stat__init(w);
            w->worker = k;
            w->step = d->step;
            w->step_known = 1;
            w->busy_ns = d->busy[k];
            w->idle_ns = span > d->busy[k] ? span - d->busy[k] : 0;
            w->tasks = d->tasks[k];
            w->max_queue_depth = depth_of(s, k);
            es->workers[es->n_workers++] = w;
        }
    }
    return 0;
}

void agt_coverage_fill(const struct mks_coverage cov[MKS_EV_COUNT], const uint64_t *undelivered,
                       Mkscope__V1__Coverage *out, Mkscope__V1__Coverage **outp)
{
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        mkscope__v1__coverage__init(&out[ev]);
        out[ev].hook = ev;
        out[ev].eligible = cov[ev].eligible;
        out[ev].ran = cov[ev].ran <= cov[ev].eligible ? cov[ev].ran : cov[ev].eligible;
        out[ev].throttled = cov[ev].throttled;
        out[ev].lost = cov[ev].lost;
        out[ev].prog_gen = cov[ev].prog_gen;
        out[ev].undelivered = undelivered ? undelivered[ev] : 0;
        outp[ev] = &out[ev];
    }
}

int agt_summary_encode(const struct agt_summary *s, enum agt_tier tier,
                       const struct agt_encode_meta *meta, const struct mks_wire_key *key,
                       uint8_t **buf_p, size_t *len_p)
{
    if (!s || !meta || !buf_p || !len_p || tier < 0 || tier >= AGT_TIER_COUNT)
        return -EINVAL;
    struct arena a = {0};
    Mkscope__V1__EpochSummary es = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
    es.epoch = s->epoch_last;
    es.t_begin_host_ns = s->t_host_begin;
    es.t_end_host_ns = s->t_host_end;
    es.t_begin_dev_ns = s->t_dev_begin;
    es.t_end_dev_ns = s->t_dev_end;
    es.detail_tier = agt_tier_wire(tier);
    es.sample_shift = meta->sample_shift;
    es.pressure = meta->pressure;
    es.lost_summaries = meta->lost_summaries;
    es.waits_dropped = s->wait_stats.remote_dropped;

    int err = add_task_rows(&a, s, tier, meta, &es);
    if (!err && tier == AGT_TIER_FULL)
        err = add_waits(&a, s, meta, &es);
    else
        es.waits_dropped += s->n_remote + s->n_release;
    if (!err && tier == AGT_TIER_FULL)
        err = add_maps(&a, s, meta, &es);
    if (!err && tier != AGT_TIER_COUNTS)
        err = add_rest(&a, s, tier, meta, &es);

    Mkscope__V1__Coverage cov[MKS_EV_COUNT], *covp[MKS_EV_COUNT];
    agt_coverage_fill(s->cov, meta->undelivered, cov, covp);
    es.coverage = covp;
    es.n_coverage = MKS_EV_COUNT;
    /* Probe results at every tier: what a user asked for, bounded by the
     * probe's groups (mkscope/probe.h). */
    Mkscope__V1__ProbeResult **probes = NULL;
    if (!err && s->n_probes) {
        probes = calloc(s->n_probes, sizeof(*probes));
        if (!probes)
            err = -ENOMEM;
        for (size_t i = 0; !err && i < s->n_probes; i++)
            if (!(probes[es.n_probes++] = mkscope__v1__probe_result__unpack(
                      NULL, s->probes[i].len, s->probes[i].buf)))
                err = -EBADMSG;
        es.probes = probes;
    }
    /* the compact form (docs/wire.md) rewrites the rows in place; its
     * words live in the arena until the summary is encoded */
    if (!err && meta->compact) {
        size_t nw = mks_wire_summary_compact_words(&es);
        uint64_t *words = nw ? arena_alloc(&a, nw * sizeof(*words)) : NULL;
        if (nw && !words)
            err = -ENOMEM;
        else
            err = mks_wire_summary_compact(&es, words, nw);
    }
    if (a.oom)
        err = -ENOMEM;
    if (!err) {
        mks_envelope env;
        mks_wire_init(&env, meta->job, meta->rank, meta->seq);
        env.incarnation = meta->incarnation;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
        env.epoch_summary = &es;
        char why[256];
        err = mks_wire_encode(&env, key, buf_p, len_p, why, sizeof(why));
        if (err)
            agt_log_err("epoch %llu: cannot encode summary: %s", (unsigned long long)es.epoch,
                        why);
    }
    for (size_t i = 0; probes && i < es.n_probes; i++)
        if (probes[i])
            mkscope__v1__probe_result__free_unpacked(probes[i], NULL);
    free(probes);
    arena_free(&a);
    return err;
}
