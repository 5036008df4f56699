/*
 * Clock alignment by interval constraint propagation (model in clock.h).
 *
 * Each rank's unknowns are (u, w): T(d) = h + (d - c) + u + w * (d - c) / 1e9,
 * where c is a reference device time and h a first estimate of T(c), both
 * integers chosen when the rank is placed (from an anchor, or from an edge to
 * a placed rank).  u is in ns, w in ns per second of device time (drift * 1e9);
 * keeping the large integer parts out of the doubles keeps full precision
 * with globaltimer values near 2^61.  The feasible set of (u, w) is a convex
 * polygon, clipped by one half-plane per constraint (Sutherland-Hodgman on a
 * single plane).  A cut smaller than CUT_MIN_NS is skipped: skipping a cut
 * only keeps the set larger, which is always safe, and it makes the
 * propagation converge in a few rounds instead of creeping.
 *
 * Anchors: an anchor bounds T(d) from below by host_lo and from above by
 * host_hi, and T(d) - d is linear in d, so a rank's lower bounds that hold
 * at the vertices of the upper hull of its points (d, host_lo - d) hold at
 * every point, and its upper bounds likewise at the lower hull of (d,
 * host_hi - d).  The solve keeps only those vertices (strict ones: no
 * collinear point; found in exact integer arithmetic), takes its reference
 * from them and clips in their order, so the model depends on the hulls
 * alone: the model of any set of anchors that holds the hulls' vertices is
 * the model of all of them (mks_clock_anchors_reduce), and an hour of
 * anchors costs one pass over them, not a clip each.
 */
#include "mkscope/clock.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_S 1e9
/* Smallest cut worth making, ns. */
#define CUT_MIN_NS 0.01
/* Slack added to every derived bound for floating-point rounding, ns. */
#define FP_SLACK_NS 1e-3
/* Anchors held before add_anchors cuts them to their hulls (and at least
 * twice what the last cut kept): memory stays bounded by the hulls. */
#define REDUCE_MIN 65536

struct vtx {
    double u, w;
};

struct poly {
    struct vtx *v;
    size_t n, cap;
};

struct rank_state {
    int placed, anchored;
    int64_t c, h;
    double box_u; /* |u| bound of the first estimate h, ns */
    struct poly p;
    size_t a0, na; /* its anchors after reduce_model: anchors[a0 .. a0 + na), by device time */
};

struct mks_clock_model {
    uint32_t nranks;
    struct mks_clock_opts opts;
    struct rank_state *r;
    struct mks_clock_anchor *anchors;
    size_t n_anchors, cap_anchors;
    size_t reduce_at; /* anchors held that make add_anchors reduce them */
    struct mks_clock_edge *edges;
    size_t n_edges, cap_edges;
    struct vtx *scratch;
    size_t scratch_cap;
    int solved;
};

static int poly_reserve(struct poly *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : 8;
    while (cap < n)
        cap *= 2;
    struct vtx *v = realloc(p->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    p->v = v;
    p->cap = cap;
    return 0;
}

/* Clip p by a_u*u + a_w*w <= rhs.  Returns 1 if it cut, 0 if not, <0 on error. */
static int poly_clip(struct mks_clock_model *m, struct poly *p, double a_u, double a_w, double rhs)
{
    double worst = -INFINITY;
    size_t k = 0;

    for (size_t i = 0; i < p->n; i++) {
        double f = a_u * p->v[i].u + a_w * p->v[i].w - rhs;
        if (f > worst)
            worst = f;
    }
    if (worst <= CUT_MIN_NS)
        return 0;
    if (m->scratch_cap < 2 * p->n + 2) {
        size_t cap = 2 * p->n + 16;
        struct vtx *s = realloc(m->scratch, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        m->scratch = s;
        m->scratch_cap = cap;
    }
    for (size_t i = 0; i < p->n; i++) {
        struct vtx a = p->v[i], b = p->v[(i + 1) % p->n];
        double fa = a_u * a.u + a_w * a.w - rhs, fb = a_u * b.u + a_w * b.w - rhs;
        if (fa <= 0)
            m->scratch[k++] = a;
        if ((fa <= 0) != (fb <= 0) && p->n > 1) {
            double t = fa / (fa - fb);
            struct vtx x = {a.u + (b.u - a.u) * t, a.w + (b.w - a.w) * t};
            m->scratch[k++] = x;
        }
    }
    /* drop repeated vertices so degenerate polygons stay small */
    size_t out = 0;
    for (size_t i = 0; i < k; i++) {
        if (out && fabs(m->scratch[i].u - m->scratch[out - 1].u) < 1e-9 &&
            fabs(m->scratch[i].w - m->scratch[out - 1].w) < 1e-9)
            continue;
        m->scratch[out++] = m->scratch[i];
    }
    while (out > 1 && fabs(m->scratch[0].u - m->scratch[out - 1].u) < 1e-9 &&
           fabs(m->scratch[0].w - m->scratch[out - 1].w) < 1e-9)
        out--;
    if (poly_reserve(p, out) != 0)
        return -ENOMEM;
    memcpy(p->v, m->scratch, out * sizeof(*p->v));
    p->n = out;
    return 1;
}

/* min and max over the polygon of u + w * ds */
static void poly_range(const struct poly *p, double ds, double *lo, double *hi)
{
    double a = INFINITY, b = -INFINITY;

    for (size_t i = 0; i < p->n; i++) {
        double f = p->v[i].u + p->v[i].w * ds;
        if (f < a)
            a = f;
        if (f > b)
            b = f;
    }
    *lo = a;
    *hi = b;
}

static double dsec(const struct rank_state *r, uint64_t d)
{
    return (double)((int64_t)d - r->c) / NS_PER_S;
}

/* ---- the anchors that bound a rank (see the top) ------------------------ */

__extension__ typedef __int128 i128;

/* Side 0: an anchor's lower bound, the point (d, host_lo - d), on the
 * upper hull; side 1: its upper bound, (d, host_hi - d), on the lower hull.
 * Exact: every value is at most INT64_MAX. */
static int64_t side_y(const struct mks_clock_anchor *a, int side)
{
    return (int64_t)(side ? a->host_hi_ns : a->host_lo_ns) - (int64_t)a->device_ns;
}

/* Whether b, between a and p in device time, is no strict vertex of its
 * side's hull: the turn a, b, p is not clockwise (side 0) or not
 * counter-clockwise (side 1).  Exact: each product of a device difference
 * (below 2^63) and a y difference (below 2^64) fits in 127 bits. */
static int hull_drops(const struct mks_clock_anchor *a, const struct mks_clock_anchor *b,
                      const struct mks_clock_anchor *p, int side)
{
    i128 dxb = (i128)b->device_ns - (i128)a->device_ns, dxp = (i128)p->device_ns - (i128)a->device_ns;
    i128 dyb = (i128)side_y(b, side) - side_y(a, side), dyp = (i128)side_y(p, side) - side_y(a, side);
    i128 l = dxb * dyp, r = dyb * dxp;
    return side ? l <= r : l >= r;
}

/* Whether x bounds its side more tightly than y at the same device time
 * (the higher lower bound, the lower upper bound; equal ones by the other
 * side, so that which of equal anchors is kept never depends on order). */
static int side_better(const struct mks_clock_anchor *x, const struct mks_clock_anchor *y, int side)
{
    uint64_t xv = side ? x->host_hi_ns : x->host_lo_ns, yv = side ? y->host_hi_ns : y->host_lo_ns;
    if (xv != yv)
        return side ? xv < yv : xv > yv;
    return side ? x->host_lo_ns > y->host_lo_ns : x->host_hi_ns < y->host_hi_ns;
}

/* The hull of one side of one rank's anchors a[0..n), sorted by device
 * time: its vertices' indices in out (n of room), in device order; their
 * count. */
static size_t side_hull(const struct mks_clock_anchor *a, size_t n, int side, size_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        /* of the anchors at one device time, the tightest */
        size_t best = i;
        for (i++; i < n && a[i].device_ns == a[best].device_ns; i++)
            if (side_better(&a[i], &a[best], side))
                best = i;
        while (k >= 2 && hull_drops(&a[out[k - 2]], &a[out[k - 1]], &a[best], side))
            k--;
        out[k++] = best;
    }
    return k;
}

static int cmp_anchor(const void *x, const void *y)
{
    const struct mks_clock_anchor *a = x, *b = y;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->device_ns != b->device_ns)
        return a->device_ns < b->device_ns ? -1 : 1;
    if (a->host_lo_ns != b->host_lo_ns)
        return a->host_lo_ns < b->host_lo_ns ? -1 : 1;
    return a->host_hi_ns < b->host_hi_ns ? -1 : a->host_hi_ns > b->host_hi_ns;
}

/* One rank's anchors a[0..n), sorted by device time, cut to its hulls'
 * vertices in place (device order kept); their count.  idx: 2n of room. */
static size_t rank_reduce(struct mks_clock_anchor *a, size_t n, size_t *idx)
{
    size_t *lo = idx, *hi = idx + n;
    size_t nl = side_hull(a, n, 0, lo), nh = side_hull(a, n, 1, hi), k = 0;
    /* both lists ascend: merged, an anchor on both hulls once */
    for (size_t i = 0, j = 0; i < nl || j < nh;) {
        size_t x;
        if (j == nh || (i < nl && lo[i] < hi[j]))
            x = lo[i++];
        else if (i == nl || hi[j] < lo[i])
            x = hi[j++];
        else
            x = lo[i++], j++;
        a[k++] = a[x]; /* x >= k: nothing kept is overwritten */
    }
    return k;
}

/* One rank's anchors a[0..n) cut to their hulls' vertices in place, by
 * device time; their count.  Each run of them in device order is cut on
 * its own first (the hulls of a union are the hulls of its parts' hulls),
 * so anchors in a few runs (stores whose epochs did not come in time
 * order) are sorted only once cut.  idx: 2n of room. */
static size_t rank_reduce_runs(struct mks_clock_anchor *a, size_t n, size_t *idx)
{
    size_t k = 0, runs = 0;
    for (size_t i = 0; i < n; runs++) {
        size_t j = i + 1;
        while (j < n && a[j - 1].device_ns <= a[j].device_ns)
            j++;
        size_t kept = rank_reduce(a + i, j - i, idx);
        memmove(a + k, a + i, kept * sizeof(*a));
        k += kept;
        i = j;
    }
    if (runs <= 1)
        return k;
    qsort(a, k, sizeof(*a), cmp_anchor);
    return rank_reduce(a, k, idx);
}

/* Every rank's anchors of a[0..n), grouped by rank, cut to their hulls'
 * vertices in place; their count, or -ENOMEM. */
static long reduce_ranks(struct mks_clock_anchor *a, size_t n)
{
    size_t *idx = malloc((2 * n + 1) * sizeof(*idx)), k = 0;
    if (!idx)
        return -ENOMEM;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && a[j].rank == a[i].rank)
            j++;
        size_t kept = rank_reduce_runs(a + i, j - i, idx);
        memmove(a + k, a + i, kept * sizeof(*a));
        k += kept;
        i = j;
    }
    free(idx);
    return (long)k;
}

static int anchor_ok(const struct mks_clock_anchor *a)
{
    return a->host_lo_ns <= a->host_hi_ns && a->device_ns <= INT64_MAX &&
           a->host_hi_ns <= INT64_MAX;
}

int mks_clock_anchors_reduce(struct mks_clock_anchor *a, size_t n, size_t *n_p)
{
    if ((!a && n) || !n_p)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!anchor_ok(&a[i]))
            return -EINVAL;
    for (size_t i = 1; i < n; i++)
        if (a[i - 1].rank > a[i].rank) {
            qsort(a, n, sizeof(*a), cmp_anchor);
            break;
        }
    long k = reduce_ranks(a, n);
    if (k < 0)
        return (int)k;
    *n_p = (size_t)k;
    return 0;
}

/* The model's anchors cut to their hulls' vertices, by rank (a stable
 * counting sort: anchors come mostly in device order), and each rank's
 * range set. */
static int reduce_model(struct mks_clock_model *m)
{
    size_t n = m->n_anchors, *at = calloc(m->nranks + 1, sizeof(*at));
    struct mks_clock_anchor *b = malloc((n + 1) * sizeof(*b));
    if (!at || !b) {
        free(at);
        free(b);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        at[m->anchors[i].rank + 1]++;
    for (uint32_t r = 0; r < m->nranks; r++)
        at[r + 1] += at[r];
    for (size_t i = 0; i < n; i++)
        b[at[m->anchors[i].rank]++] = m->anchors[i];
    free(at);
    long k = reduce_ranks(b, n);
    if (k < 0) {
        free(b);
        return (int)k;
    }
    free(m->anchors);
    m->anchors = b;
    m->n_anchors = (size_t)k;
    m->cap_anchors = n + 1;
    for (uint32_t r = 0; r < m->nranks; r++)
        m->r[r].a0 = m->r[r].na = 0;
    for (size_t i = (size_t)k; i-- > 0;) {
        struct rank_state *r = &m->r[b[i].rank];
        r->a0 = i;
        r->na++;
    }
    /* the next reduction once as many again have come */
    m->reduce_at = 2 * (size_t)k > REDUCE_MIN ? 2 * (size_t)k : REDUCE_MIN;
    return 0;
}

int mks_clock_model_create(uint32_t nranks, const struct mks_clock_opts *opts,
                           struct mks_clock_model **model_p)
{
    struct mks_clock_model *m;

    if (!model_p || nranks == 0)
        return -EINVAL;
    if (opts) {
        if (opts->sz < sizeof(struct mks_clock_opts)) {
            /* every field exists since the first release: a smaller sz is
             * not an older caller but a wrong one */
            return -EINVAL;
        }
        for (size_t i = sizeof(struct mks_clock_opts); i < opts->sz; i++)
            if (((const unsigned char *)opts)[i])
                return -EINVAL;
        if (!(opts->max_drift >= 0 && opts->max_drift < 0.1) ||
            !(opts->max_offset_ns >= 0 && opts->max_offset_ns <= 1e15))
            return -EINVAL;
    }
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->nranks = nranks;
    if (opts)
        m->opts = *opts;
    m->opts.sz = sizeof(m->opts);
    if (m->opts.max_drift == 0)
        m->opts.max_drift = 500e-6;
    if (m->opts.max_offset_ns == 0)
        m->opts.max_offset_ns = 1e9;
    if (m->opts.tick_ns == 0)
        m->opts.tick_ns = 1;
    if (m->opts.max_rounds == 0)
        m->opts.max_rounds = 16;
    m->r = calloc(nranks, sizeof(*m->r));
    if (!m->r) {
        free(m);
        return -ENOMEM;
    }
    *model_p = m;
    return 0;
}

void mks_clock_model_destroy(struct mks_clock_model *m)
{
    if (!m)
        return;
    if (m->r)
        for (uint32_t i = 0; i < m->nranks; i++)
            free(m->r[i].p.v);
    free(m->r);
    free(m->anchors);
    free(m->edges);
    free(m->scratch);
    free(m);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

int mks_clock_add_anchors(struct mks_clock_model *m, const struct mks_clock_anchor *a, size_t n)
{
    if (!m || (!a && n))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (a[i].rank >= m->nranks || !anchor_ok(&a[i]))
            return -EINVAL;
    if (grow((void **)&m->anchors, &m->cap_anchors, m->n_anchors + n, sizeof(*a)))
        return -ENOMEM;
    memcpy(m->anchors + m->n_anchors, a, n * sizeof(*a));
    m->n_anchors += n;
    m->solved = 0;
    /* a failed cut leaves them all held: the solve cuts them again */
    if (m->n_anchors >= (m->reduce_at ? m->reduce_at : REDUCE_MIN))
        reduce_model(m);
    return 0;
}

int mks_clock_add_edges(struct mks_clock_model *m, const struct mks_clock_edge *e, size_t n)
{
    if (!m || (!e && n))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (e[i].src_rank >= m->nranks || e[i].dst_rank >= m->nranks ||
            e[i].src_rank == e[i].dst_rank || e[i].src_ns > INT64_MAX || e[i].dst_ns > INT64_MAX ||
            e[i].min_latency_ns > (uint64_t)1e12)
            return -EINVAL;
    if (grow((void **)&m->edges, &m->cap_edges, m->n_edges + n, sizeof(*e)))
        return -ENOMEM;
    memcpy(m->edges + m->n_edges, e, n * sizeof(*e));
    m->n_edges += n;
    m->solved = 0;
    return 0;
}

static int set_box(struct mks_clock_model *m, struct rank_state *r, int point)
{
    double U = r->box_u, W = m->opts.max_drift * NS_PER_S;

    if (poly_reserve(&r->p, 4))
        return -ENOMEM;
    if (point) {
        r->p.v[0] = (struct vtx){0, 0};
        r->p.n = 1;
        return 0;
    }
    r->p.v[0] = (struct vtx){-U, -W};
    r->p.v[1] = (struct vtx){U, -W};
    r->p.v[2] = (struct vtx){U, W};
    r->p.v[3] = (struct vtx){-U, W};
    r->p.n = 4;
    return 0;
}

/* A rank's reference from its hulls (idx: 2 na of room, the lower
 * bounds' vertices then the upper bounds'): the lower-bound vertex nearest
 * the middle of its anchors' device times, the first estimate the middle
 * of what the hulls allow there. */
static void anchor_ref(struct mks_clock_model *m, struct rank_state *r, const size_t *lo, size_t nl,
                       const size_t *hi, size_t nh)
{
    const struct mks_clock_anchor *a = m->anchors + r->a0;
    uint64_t d0 = a[lo[0]].device_ns, mid = d0 + (a[lo[nl - 1]].device_ns - d0) / 2;
    size_t best = lo[0];
    for (size_t i = 1; i < nl; i++) {
        uint64_t x = a[lo[i]].device_ns, b = a[best].device_ns;
        if ((x > mid ? x - mid : mid - x) < (b > mid ? b - mid : mid - b))
            best = lo[i];
    }
    int64_t c = (int64_t)a[best].device_ns, lo_c = (int64_t)a[best].host_lo_ns, hi_c = lo_c;
    /* the upper bounds' hull at c, between its vertices either side */
    for (size_t j = 0; j < nh; j++) {
        const struct mks_clock_anchor *p = &a[hi[j]];
        if ((int64_t)p->device_ns == c || (j + 1 < nh && (int64_t)a[hi[j + 1]].device_ns > c)) {
            hi_c = (int64_t)p->host_hi_ns;
            if ((int64_t)p->device_ns != c) {
                const struct mks_clock_anchor *q = &a[hi[j + 1]];
                hi_c += (int64_t)((i128)((int64_t)q->host_hi_ns - hi_c) * (c - (int64_t)p->device_ns) /
                                  ((int64_t)q->device_ns - (int64_t)p->device_ns));
            }
            break;
        }
    }
    r->c = c;
    r->h = hi_c >= lo_c ? lo_c + (hi_c - lo_c) / 2 : lo_c;
}

/* Both hulls of an anchored rank into idx (2 na of room). */
static void rank_hulls(const struct mks_clock_model *m, const struct rank_state *r, size_t *idx,
                       size_t *nl, size_t *nh)
{
    *nl = side_hull(m->anchors + r->a0, r->na, 0, idx);
    *nh = side_hull(m->anchors + r->a0, r->na, 1, idx + r->na);
}

/* Place the ranks: anchored ones by their hulls (anchor_ref), then the
 * others through edges, breadth first.  With no anchors at all, the lowest
 * rank with an edge defines the time line.  idx: 2 na of room. */
static int place_ranks(struct mks_clock_model *m, size_t *idx)
{
    int err = 0, any_anchor = m->n_anchors > 0;

    for (uint32_t i = 0; i < m->nranks; i++) {
        struct rank_state *r = &m->r[i];
        size_t nl, nh;
        if (!r->na)
            continue;
        rank_hulls(m, r, idx, &nl, &nh);
        anchor_ref(m, r, idx, nl, idx + r->na, nh);
        r->placed = r->anchored = 1;
        r->box_u = m->opts.max_offset_ns;
        if ((err = set_box(m, r, 0)))
            return err;
    }
    if (!any_anchor && m->n_edges) {
        uint32_t lowest = m->nranks;
        uint64_t t0 = 0;
        for (size_t i = 0; i < m->n_edges; i++) {
            const struct mks_clock_edge *e = &m->edges[i];
            uint32_t lo = e->src_rank < e->dst_rank ? e->src_rank : e->dst_rank;
            if (lo < lowest) {
                lowest = lo;
                t0 = lo == e->src_rank ? e->src_ns : e->dst_ns;
            }
        }
        struct rank_state *r = &m->r[lowest];
        r->placed = 1;
        r->c = r->h = (int64_t)t0;
        if ((err = set_box(m, r, 1)))
            return err;
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (size_t i = 0; i < m->n_edges; i++) {
            const struct mks_clock_edge *e = &m->edges[i];
            struct rank_state *a = &m->r[e->src_rank], *b = &m->r[e->dst_rank];
            if (a->placed == b->placed)
                continue;
            /* the first estimate inherits the placed rank's uncertainty,
             * what its drift can add between its reference and this edge,
             * and the edge's unknown latency (bounded by max_offset_ns) */
            if (a->placed) {
                b->c = (int64_t)e->dst_ns;
                b->h = a->h + ((int64_t)e->src_ns - a->c) + (int64_t)e->min_latency_ns;
                b->box_u = a->box_u + m->opts.max_offset_ns +
                           2 * m->opts.max_drift * fabs((double)((int64_t)e->src_ns - a->c));
                b->placed = 1;
                err = set_box(m, b, 0);
            } else {
                a->c = (int64_t)e->src_ns;
                a->h = b->h + ((int64_t)e->dst_ns - b->c) - (int64_t)e->min_latency_ns;
                a->box_u = b->box_u + m->opts.max_offset_ns +
                           2 * m->opts.max_drift * fabs((double)((int64_t)e->dst_ns - b->c));
                a->placed = 1;
                err = set_box(m, a, 0);
            }
            if (err)
                return err;
            progress = 1;
        }
    }
    return 0;
}

/* One anchor's bounds on its rank's polygon: its lower bound (side 0) or
 * its upper bound (side 1). */
static int clip_anchor(struct mks_clock_model *m, struct rank_state *r,
                       const struct mks_clock_anchor *a, int side)
{
    double tick = m->opts.tick_ns, ds = dsec(r, a->device_ns);
    /* T = h + D + u + w*ds in [lo, hi]  =>  u + w*ds in [lo - h - D, hi - h - D] */
    int64_t base = r->h + ((int64_t)a->device_ns - r->c);
    int rc;
    if (side)
        rc = poly_clip(m, &r->p, 1, ds,
                       (double)((int64_t)a->host_hi_ns - base) + tick + FP_SLACK_NS);
    else
        rc = poly_clip(m, &r->p, -1, -ds,
                       -((double)((int64_t)a->host_lo_ns - base) - tick - FP_SLACK_NS));
    if (rc < 0)
        return rc;
    return r->p.n == 0 ? -EDOM : 0;
}

/* Every anchored rank clipped by its hulls' vertices in device order (at
 * one device time the upper bound first).  idx: 2 na of room. */
static int apply_anchors(struct mks_clock_model *m, size_t *idx)
{
    for (uint32_t k = 0; k < m->nranks; k++) {
        struct rank_state *r = &m->r[k];
        const struct mks_clock_anchor *a = m->anchors + r->a0;
        size_t nl, nh, *lo = idx, *hi = idx + r->na;
        if (!r->na)
            continue;
        rank_hulls(m, r, idx, &nl, &nh);
        for (size_t i = 0, j = 0; i < nl || j < nh;) {
            int side = j == nh || (i < nl && a[lo[i]].device_ns < a[hi[j]].device_ns) ? 0 : 1;
            int rc = clip_anchor(m, r, &a[side ? hi[j++] : lo[i++]], side);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* One pass over all edges; returns the number of cuts made, or <0. */
static long propagate_edges(struct mks_clock_model *m)
{
    double tick = m->opts.tick_ns;
    long cuts = 0;

    for (size_t i = 0; i < m->n_edges; i++) {
        const struct mks_clock_edge *e = &m->edges[i];
        struct rank_state *a = &m->r[e->src_rank], *b = &m->r[e->dst_rank];
        if (!a->placed || !b->placed)
            continue;
        double dsa = dsec(a, e->src_ns), dsb = dsec(b, e->dst_ns), lo, hi;
        /* T_b(tb) - T_a(ta) >= L, with k = (h_a + Da) - (h_b + Db) */
        int64_t k = (a->h - b->h) + (((int64_t)e->src_ns - a->c) - ((int64_t)e->dst_ns - b->c));
        double L = (double)e->min_latency_ns;
        /* L holds on the time line; the ranks' own clocks may run faster or
         * slower by max_drift, and reads are quantized by a tick */
        double slack = tick + L * m->opts.max_drift + FP_SLACK_NS;
        int rc;

        /* rank b: u_b + w_b*dsb >= k + L + min_a(u_a + w_a*dsa) */
        poly_range(&a->p, dsa, &lo, &hi);
        rc = poly_clip(m, &b->p, -1, -dsb, -((double)k + L + lo - slack));
        if (rc < 0)
            return rc;
        cuts += rc;
        if (b->p.n == 0)
            return -EDOM;
        /* rank a: u_a + w_a*dsa <= -k - L + max_b(u_b + w_b*dsb) */
        poly_range(&b->p, dsb, &lo, &hi);
        rc = poly_clip(m, &a->p, 1, dsa, -(double)k - L + hi + slack);
        if (rc < 0)
            return rc;
        cuts += rc;
        if (a->p.n == 0)
            return -EDOM;
    }
    return cuts;
}

int mks_clock_solve(struct mks_clock_model *m)
{
    int err;

    if (!m)
        return -EINVAL;
    m->solved = 0;
    for (uint32_t i = 0; i < m->nranks; i++) {
        m->r[i].placed = m->r[i].anchored = 0;
        m->r[i].box_u = 0;
        m->r[i].p.n = 0;
    }
    size_t most = 0, *idx = NULL;
    if ((err = reduce_model(m)))
        goto fail;
    for (uint32_t i = 0; i < m->nranks; i++)
        most = m->r[i].na > most ? m->r[i].na : most;
    if (!(idx = malloc((2 * most + 1) * sizeof(*idx)))) {
        err = -ENOMEM;
        goto fail;
    }
    err = place_ranks(m, idx);
    if (!err)
        err = apply_anchors(m, idx);
    free(idx);
    if (err)
        goto fail;
    for (uint32_t round = 0; round < m->opts.max_rounds; round++) {
        long cuts = propagate_edges(m);
        if (cuts < 0) {
            err = (int)cuts;
            goto fail;
        }
        if (cuts == 0)
            break;
    }
    m->solved = 1;
    return 0;
fail:
    for (uint32_t i = 0; i < m->nranks; i++)
        m->r[i].placed = 0;
    return err;
}

static int rank_ready(const struct mks_clock_model *m, uint32_t rank)
{
    if (!m || rank >= m->nranks || !m->solved)
        return -EINVAL;
    if (!m->r[rank].placed || m->r[rank].p.n == 0)
        return -ENODATA;
    return 0;
}

int mks_clock_rank_estimate(const struct mks_clock_model *m, uint32_t rank,
                            struct mks_clock_rank_est *est_p)
{
    int err = rank_ready(m, rank);
    if (err)
        return err;
    if (!est_p)
        return -EINVAL;
    const struct rank_state *r = &m->r[rank];
    double u0, u1, w0 = INFINITY, w1 = -INFINITY;
    poly_range(&r->p, 0, &u0, &u1);
    for (size_t i = 0; i < r->p.n; i++) {
        w0 = fmin(w0, r->p.v[i].w);
        w1 = fmax(w1, r->p.v[i].w);
    }
    est_p->ref_device_ns = (uint64_t)r->c;
    est_p->offset_ns = (r->h - r->c) + (int64_t)llround((u0 + u1) / 2);
    est_p->offset_err_ns = (u1 - u0) / 2 + 0.5; /* + rounding of offset_ns */
    est_p->drift = (w0 + w1) / 2 / NS_PER_S;
    est_p->drift_err = (w1 - w0) / 2 / NS_PER_S;
    return 0;
}

int mks_clock_align(const struct mks_clock_model *m, uint32_t rank, uint64_t device_ns,
                    struct mks_aligned_time *t_p)
{
    int err = rank_ready(m, rank);
    if (err)
        return err;
    if (!t_p || device_ns > INT64_MAX)
        return -EINVAL;
    const struct rank_state *r = &m->r[rank];
    double lo, hi;
    poly_range(&r->p, dsec(r, device_ns), &lo, &hi);
    int64_t base = r->h + ((int64_t)device_ns - r->c);
    t_p->lo_ns = base + (int64_t)floor(lo);
    t_p->hi_ns = base + (int64_t)ceil(hi);
    t_p->t_ns = t_p->lo_ns + (t_p->hi_ns - t_p->lo_ns) / 2;
    t_p->err_ns = (uint64_t)(t_p->hi_ns - t_p->t_ns);
    return 0;
}

int mks_clock_interval(const struct mks_clock_model *m, uint32_t rank_a, uint64_t t_a,
                       uint32_t rank_b, uint64_t t_b, struct mks_aligned_time *d_p)
{
    struct mks_aligned_time a, b;
    int err;

    if (!d_p)
        return -EINVAL;
    if ((err = mks_clock_align(m, rank_a, t_a, &a)) || (err = mks_clock_align(m, rank_b, t_b, &b)))
        return err;
    d_p->lo_ns = b.lo_ns - a.hi_ns;
    d_p->hi_ns = b.hi_ns - a.lo_ns;
    d_p->t_ns = d_p->lo_ns + (d_p->hi_ns - d_p->lo_ns) / 2;
    d_p->err_ns = (uint64_t)(d_p->hi_ns - d_p->t_ns);
    return 0;
}
