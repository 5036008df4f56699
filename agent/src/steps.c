/*
 * Decode steps across epochs (see steps.h).
 *
 * A step is taken as ended when a later step has had a task end: decode
 * steps follow one another, so by then the step's tasks are done, short of
 * a straggler, which is reported in its epoch's step row but no longer
 * changes the span reported as complete.  Worker times are known for a step
 * only when its slot of worker_time held it alone in every epoch;
 * otherwise the step ends without them rather than with a busy time too
 * small and an idle time too large.
 */
#include "steps.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Open steps kept at most; beyond, the oldest is closed (a runtime whose
 * step numbers never advance must not grow the agent). */
#define MAX_OPEN 64

struct open_step {
    uint32_t step;
    uint64_t t_begin, t_end;
    uint32_t n_workers;
    uint64_t *busy, *tasks;
    int partial; /* some epoch's worker times could not be told apart */
};

struct agt_steps {
    struct open_step o[MAX_OPEN];
    size_t n;
    int64_t done_up_to; /* highest step handed over (-1: none) */
};

struct agt_steps *agt_steps_new(void)
{
    struct agt_steps *t = calloc(1, sizeof(*t));
    if (t)
        t->done_up_to = -1;
    return t;
}

void agt_steps_reset(struct agt_steps *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->o[i].busy);
        free(t->o[i].tasks);
    }
    t->n = 0;
    t->done_up_to = -1;
}

void agt_steps_free(struct agt_steps *t)
{
    agt_steps_reset(t);
    free(t);
}

static struct open_step *find(struct agt_steps *t, uint32_t step)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->o[i].step == step)
            return &t->o[i];
    return NULL;
}

/* Hand o over to s->done and remove it from the open steps. */
static int close_step(struct agt_steps *t, size_t idx, struct agt_summary *s)
{
    struct open_step *o = &t->o[idx];
    if (s->n_done == s->cap_done) {
        size_t cap = s->cap_done ? s->cap_done * 2 : 8;
        struct agt_step_done *nd = realloc(s->done, cap * sizeof(*nd));
        if (!nd)
            return -ENOMEM;
        s->done = nd;
        s->cap_done = cap;
    }
    struct agt_step_done *d = &s->done[s->n_done++];
    d->step = o->step;
    d->t_begin = o->t_begin;
    d->t_end = o->t_end;
    d->n_workers = o->partial ? 0 : o->n_workers;
    d->busy = o->partial ? NULL : o->busy;
    d->tasks = o->partial ? NULL : o->tasks;
    d->cpu_wait = d->cpu_runs = 0, d->cpu_wait_known = 0; /* the agent measures it (agent.c) */
    if (o->partial) {
        free(o->busy);
        free(o->tasks);
    }
    if ((int64_t)o->step > t->done_up_to)
        t->done_up_to = o->step;
    t->o[idx] = t->o[--t->n];
    return 0;
}

static int grow_workers(struct open_step *o, uint32_t n)
{
    if (n <= o->n_workers)
        return 0;
    uint32_t old = o->n_workers;
    uint64_t *b = realloc(o->busy, n * sizeof(uint64_t));
    if (!b)
        return -ENOMEM;
    o->busy = b;
    uint64_t *k = realloc(o->tasks, n * sizeof(uint64_t));
    if (!k)
        return -ENOMEM;
    o->tasks = k;
    memset(b + old, 0, (n - old) * sizeof(uint64_t));
    memset(k + old, 0, (n - old) * sizeof(uint64_t));
    o->n_workers = n;
    return 0;
}

int agt_steps_feed(struct agt_steps *t, struct agt_summary *s, uint32_t n_workers, int app_ended)
{
    if (!t || !s)
        return -EINVAL;
    if (n_workers > MKS_MON_MAX_WORKERS)
        n_workers = MKS_MON_MAX_WORKERS;
    int64_t latest = -1;
    for (size_t i = 0; i < s->n_gen; i++) {
        const struct mks_mon_gen *g = &s->gen[i];
        if (g->step > UINT32_MAX || g->tasks_done == 0)
            continue;
        if ((int64_t)g->step > latest)
            latest = (int64_t)g->step;
        if ((int64_t)g->step <= t->done_up_to)
            continue; /* a straggler of a step already reported */
        struct open_step *o = find(t, (uint32_t)g->step);
        if (!o) {
            if (t->n == MAX_OPEN) {
                size_t oldest = 0;
                for (size_t k = 1; k < t->n; k++)
                    if (t->o[k].step < t->o[oldest].step)
                        oldest = k;
                int err = close_step(t, oldest, s);
                if (err)
                    return err;
            }
            o = &t->o[t->n++];
            memset(o, 0, sizeof(*o));
            o->step = (uint32_t)g->step;
        }
        if (g->t_task_first && (!o->t_begin || g->t_task_first < o->t_begin))
            o->t_begin = g->t_task_first;
        if (g->t_task_last > o->t_end)
            o->t_end = g->t_task_last;
        /* Without worker times (or with more workers than the monitor
         * keeps apart) the step ends without them. */
        if (!s->have_wtime || n_workers > MKS_MON_WT_WORKERS)
            o->partial = 1;
    }
    /* A slot two steps met in this epoch: neither step's worker times are
     * whole. */
    for (size_t i = 0; i < s->n_wtime; i++) {
        const struct agt_wtime *w = &s->wtime[i];
        if (!(w->v.tag & MKS_MON_LAT_STEP_MIXED))
            continue;
        for (size_t k = 0; k < t->n; k++)
            if (t->o[k].step % MKS_MON_LAT_STEP_SLOTS == w->slot)
                t->o[k].partial = 1;
    }
    for (size_t i = 0; i < s->n_wtime; i++) {
        const struct agt_wtime *w = &s->wtime[i];
        if (w->v.tag & MKS_MON_LAT_STEP_MIXED)
            continue;
        struct open_step *o = find(t, (uint32_t)(w->v.tag - 1));
        if (!o || o->partial)
            continue;
        uint32_t need = w->worker + 1 > n_workers ? w->worker + 1 : n_workers;
        if (grow_workers(o, need))
            return -ENOMEM;
        o->busy[w->worker] += w->v.busy_ns;
        o->tasks[w->worker] += w->v.tasks;
    }
    /* Every open step gets an entry for every worker, also one that ran no
     * task of it (idle the whole step). */
    for (size_t i = 0; i < t->n; i++)
        if (!t->o[i].partial && s->have_wtime && grow_workers(&t->o[i], n_workers))
            return -ENOMEM;
    for (size_t i = 0; i < t->n;) {
        if (app_ended || (int64_t)t->o[i].step < latest) {
            int err = close_step(t, i, s);
            if (err)
                return err;
            continue; /* close_step moved the last one here */
        }
        i++;
    }
    return 0;
}
