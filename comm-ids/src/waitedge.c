/*
 * Wait-chain edges: a join of remote waits and releases on comm_gen
 * (waitedge.h).  Releases are sorted by id once; each wait finds its
 * candidates by binary search, so a join is O((W + R) log R).
 */
#include "mkscope/waitedge.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/commid.h"

struct keyed {
    uint64_t gen;
    size_t idx;
};

static int cmp_keyed(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int align(const struct mks_clock_model *clock, uint32_t rank, uint64_t t,
                 struct mks_aligned_time *out)
{
    if (!clock) {
        if (t > INT64_MAX)
            return -EINVAL;
        *out = (struct mks_aligned_time){.t_ns = (int64_t)t, .lo_ns = (int64_t)t, .hi_ns = (int64_t)t};
        return 0;
    }
    return mks_clock_align(clock, rank, t, out);
}

static struct mks_aligned_time diff(const struct mks_aligned_time *a, const struct mks_aligned_time *b)
{
    /* b - a */
    struct mks_aligned_time d = {.lo_ns = b->lo_ns - a->hi_ns, .hi_ns = b->hi_ns - a->lo_ns};
    d.t_ns = d.lo_ns + (d.hi_ns - d.lo_ns) / 2;
    d.err_ns = (uint64_t)(d.hi_ns - d.t_ns);
    return d;
}

/* First index in sorted keys with gen >= g. */
static size_t lower_bound(const struct keyed *k, size_t n, uint64_t g)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (k[mid].gen < g)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int mks_waitedge_join(const struct mks_wait_rec *waits, size_t n_waits,
                      const struct mks_release_rec *rels, size_t n_rels,
                      const struct mks_clock_model *clock, struct mks_waitedge **edges_p,
                      size_t *n_p, struct mks_waitedge_stats *stats_p)
{
    struct mks_waitedge_stats st = {0};
    struct mks_waitedge *edges = NULL;
    struct keyed *keys = NULL;
    size_t n_edges = 0;

    if ((!waits && n_waits) || (!rels && n_rels) || !edges_p || !n_p)
        return -EINVAL;
    for (size_t i = 0; i < n_waits; i++)
        if (waits[i].t_end < waits[i].t_begin)
            return -EINVAL;
    if (n_rels) {
        keys = malloc(n_rels * sizeof(*keys));
        if (!keys)
            return -ENOMEM;
        for (size_t i = 0; i < n_rels; i++)
            keys[i] = (struct keyed){rels[i].comm_gen, i};
        qsort(keys, n_rels, sizeof(*keys), cmp_keyed);
    }
    if (n_waits) {
        edges = calloc(n_waits, sizeof(*edges));
        if (!edges) {
            free(keys);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < n_waits; i++) {
        const struct mks_wait_rec *w = &waits[i];
        struct mks_waitedge *e = &edges[n_edges];
        struct mks_aligned_time rel_t;
        size_t best = SIZE_MAX, candidates = 0;
        int best_src = 0, best_before = 0;
        int64_t best_gap = 0;

        if (!w->comm_gen)
            continue;
        st.waits++;
        if (align(clock, w->rank, w->t_begin, &e->wait_begin) ||
            align(clock, w->rank, w->t_end, &e->wait_end)) {
            st.unaligned++;
            continue;
        }
        uint32_t src = mks_commid_kind(w->comm_gen) == MKS_COMMID_STEP ||
                               mks_commid_kind(w->comm_gen) == MKS_COMMID_REQ
                           ? mks_commid_src_rank(w->comm_gen)
                           : UINT32_MAX;
        int unaligned = 0;
        for (size_t k = lower_bound(keys, n_rels, w->comm_gen); k < n_rels && keys[k].gen == w->comm_gen;
             k++) {
            const struct mks_release_rec *r = &rels[keys[k].idx];
            if (r->rank == w->rank)
                continue;
            if (align(clock, r->rank, r->t_release, &rel_t)) {
                unaligned = 1;
                continue;
            }
            candidates++;
            /* preference: the id's source rank, then a release that can
             * precede the wait's end, then the closest to it */
            int is_src = r->rank == src;
            int before = rel_t.lo_ns <= e->wait_end.hi_ns;
            int64_t gap = e->wait_end.t_ns - rel_t.t_ns;
            if (gap < 0)
                gap = -gap;
            if (best == SIZE_MAX || is_src > best_src ||
                (is_src == best_src && (before > best_before ||
                                        (before == best_before && gap < best_gap)))) {
                best = keys[k].idx;
                best_src = is_src;
                best_before = before;
                best_gap = gap;
                e->release = rel_t;
            }
        }
        if (best == SIZE_MAX) {
            if (unaligned)
                st.unaligned++;
            else
                st.unmatched++;
            continue;
        }
        const struct mks_release_rec *r = &rels[best];
        e->wait_idx = i;
        e->release_idx = best;
        e->comm_gen = w->comm_gen;
        e->consumer_rank = w->rank;
        e->consumer_class = w->task_class;
        e->producer_rank = r->rank;
        e->producer_class = r->task_class;
        e->flags = candidates > 1 ? MKS_WAITEDGE_F_AMBIGUOUS : 0;
        e->lateness = diff(&e->wait_begin, &e->release);
        e->wake = diff(&e->release, &e->wait_end);
        st.ambiguous += candidates > 1;
        n_edges++;
    }
    free(keys);
    st.matched = n_edges;
    if (n_edges == 0) {
        free(edges);
        edges = NULL;
    }
    *edges_p = edges;
    *n_p = n_edges;
    if (stats_p)
        *stats_p = st;
    return 0;
}

size_t mks_waitedge_clock_edges(const struct mks_waitedge *edges, size_t n_edges,
                                const struct mks_wait_rec *waits, const struct mks_release_rec *rels,
                                uint64_t min_latency_ns, struct mks_clock_edge *out)
{
    size_t k = 0;

    if (!edges || !waits || !rels || !out)
        return 0;
    for (size_t i = 0; i < n_edges; i++) {
        if (edges[i].flags & MKS_WAITEDGE_F_AMBIGUOUS)
            continue;
        out[k++] = (struct mks_clock_edge){
            .src_rank = rels[edges[i].release_idx].rank,
            .dst_rank = waits[edges[i].wait_idx].rank,
            .src_ns = rels[edges[i].release_idx].t_release,
            .dst_ns = waits[edges[i].wait_idx].t_end,
            .min_latency_ns = min_latency_ns,
        };
    }
    return k;
}
