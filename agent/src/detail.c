/* Which steps of a summary carry per-step detail (see detail.h). */
#include "detail.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void agt_detail_init(struct agt_detail *d, const struct agt_detail_opts *o)
{
    memset(d, 0, sizeof(*d));
    if (o)
        d->o = *o;
    d->open_step = -1;
    d->hot_step = -1;
}

int agt_detail_mode_parse(const char *s, enum agt_detail_mode *mode)
{
    if (!s)
        return -EINVAL;
    if (strcmp(s, "all") == 0)
        *mode = AGT_DETAIL_ALL;
    else if (strcmp(s, "auto") == 0)
        *mode = AGT_DETAIL_AUTO;
    else
        return -EINVAL;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int agt_detail_has(const uint32_t *steps, size_t n, uint64_t step)
{
    if (step > UINT32_MAX)
        return 0;
    uint32_t k = (uint32_t)step;
    return n && bsearch(&k, steps, n, sizeof(*steps), cmp_u32) != NULL;
}

/* The median of v[0..n) (0: fewer than AGT_DETAIL_MIN_BASE) and two
 * robust standard deviations of them (1.4826 MAD): a step within the
 * machine's own noise is not worth its detail.  Half the collector's floor
 * (four): the agent sees only the steps before, the collector both sides,
 * and a step the collector finds slow must have come with its detail. */
static uint64_t baseline(uint64_t *v, size_t n, double *noise)
{
    *noise = 0;
    if (n < AGT_DETAIL_MIN_BASE)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    uint64_t med = v[n / 2];
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] > med ? v[i] - med : med - v[i];
    qsort(v, n, sizeof(*v), cmp_u64);
    *noise = 2 * 1.4826 * (double)v[n / 2];
    return med;
}

/* One step of the summary as the policy sees it. */
struct dstep {
    uint32_t step;
    int complete;
    uint64_t dur;
    int keep, slow;
};

static int cmp_dstep(const void *a, const void *b)
{
    const struct dstep *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

int agt_detail_choose(struct agt_detail *d, const struct agt_summary *s, uint32_t **steps,
                      size_t *n)
{
    *steps = NULL, *n = 0;
    if (d->o.mode == AGT_DETAIL_ALL)
        return 0;
    size_t cap = s->n_gen + s->n_done;
    struct dstep *v = calloc(cap ? cap : 1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t m = 0;
    for (size_t i = 0; i < s->n_gen; i++)
        if (s->gen[i].step <= UINT32_MAX)
            v[m++] = (struct dstep){.step = (uint32_t)s->gen[i].step};
    for (size_t i = 0; i < s->n_done; i++)
        v[m++] = (struct dstep){.step = s->done[i].step};
    if (m)
        qsort(v, m, sizeof(*v), cmp_dstep);
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (!u || v[u - 1].step != v[i].step)
            v[u++] = v[i];
    m = u;
    for (size_t i = 0; i < s->n_done; i++) {
        const struct agt_step_done *dn = &s->done[i];
        struct dstep key = {.step = dn->step};
        struct dstep *e = m ? bsearch(&key, v, m, sizeof(*v), cmp_dstep) : NULL;
        /* a step without both ends is as good as still running */
        if (e && dn->t_begin && dn->t_end >= dn->t_begin) {
            e->complete = 1;
            e->dur = dn->t_end - dn->t_begin;
        }
    }
    /* the baseline: the recent steps and this summary's own (the first
     * summary of a job, or a long epoch, holds many steps: a few slow ones
     * among them move the median little) */
    uint64_t *bv = malloc((AGT_DETAIL_RING + m) * sizeof(*bv));
    uint32_t *out = malloc((m + d->n_prev + 1) * sizeof(*out));
    if (!bv || !out) {
        free(bv), free(out), free(v);
        return -ENOMEM;
    }
    size_t nb = d->n_ring;
    memcpy(bv, d->ring, nb * sizeof(*bv));
    for (size_t i = 0; i < m; i++)
        if (v[i].complete)
            bv[nb++] = v[i].dur;
    double noise;
    uint64_t base = baseline(bv, nb, &noise);
    free(bv);
    int64_t open = -1;
    double bar = (1.0 + d->o.slow_frac) * (double)base,
           half = (1.0 + d->o.slow_frac / 2) * (double)base;
    for (size_t i = 0; i < m; i++) {
        struct dstep *e = &v[i];
        /* slow: over the bar and the noise; or the next step of a run of
         * slow ones still over half the bar (a window of slow steps raises
         * the baseline as it goes: its later steps stand out less) */
        e->slow = e->complete && base &&
                  (((double)e->dur > bar && (double)e->dur - (double)base > noise) ||
                   ((int64_t)e->step == d->hot_step + 1 && (double)e->dur > half));
        if (e->slow)
            d->hot_step = e->step;
        e->keep = !e->complete || !base || e->slow || (int64_t)e->step == d->open_step ||
                  e->step < d->o.warmup || (d->o.every && e->step % d->o.every == 0) ||
                  (d->o.every && e->step < AGT_DETAIL_DENSE && e->step % 2 == 0);
        if (!e->complete && (int64_t)e->step > open)
            open = e->step;
    }
    /* the steps beside a slow one: what it is compared with first */
    for (size_t i = 0; i < m; i++) {
        if (!v[i].slow)
            continue;
        if (i > 0 && v[i - 1].step + 1 == v[i].step)
            v[i - 1].keep = 1;
        if (i + 1 < m && v[i + 1].step == v[i].step + 1)
            v[i + 1].keep = 1;
    }
    /* the baseline learns after the choice: a slow step does not raise its
     * own bar */
    for (size_t i = 0; i < m; i++) {
        if (!v[i].complete)
            continue;
        d->ring[d->pos] = v[i].dur;
        d->pos = (d->pos + 1) % AGT_DETAIL_RING;
        if (d->n_ring < AGT_DETAIL_RING)
            d->n_ring++;
    }
    d->open_step = open;
    /* this summary's withheld steps (sorted, as v is), merged with the
     * previous summary's, and remembered for the next one */
    size_t k = 0, a = 0, nw = 0;
    for (size_t i = 0; i < m; i++) {
        if (v[i].keep) {
            d->kept += (uint64_t)v[i].complete;
            continue;
        }
        d->withheld++;
        while (a < d->n_prev && d->prev[a] < v[i].step)
            out[k++] = d->prev[a++];
        if (a < d->n_prev && d->prev[a] == v[i].step)
            a++;
        out[k++] = v[i].step;
        v[nw++].step = v[i].step; /* compacted in place: nw <= i */
    }
    while (a < d->n_prev)
        out[k++] = d->prev[a++];
    size_t from = nw > AGT_DETAIL_PREV ? nw - AGT_DETAIL_PREV : 0;
    d->n_prev = nw - from;
    for (size_t i = 0; i < d->n_prev; i++)
        d->prev[i] = v[from + i].step;
    free(v);
    if (!k) {
        free(out);
        out = NULL;
    }
    *steps = out, *n = k;
    return 0;
}
