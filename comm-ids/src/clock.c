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
};

struct mks_clock_model {
    uint32_t nranks;
    struct mks_clock_opts opts;
    struct rank_state *r;
    struct mks_clock_anchor *anchors;
    size_t n_anchors, cap_anchors;
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
        if (a[i].rank >= m->nranks || a[i].host_lo_ns > a[i].host_hi_ns ||
            a[i].device_ns > INT64_MAX || a[i].host_hi_ns > INT64_MAX)
            return -EINVAL;
    if (grow((void **)&m->anchors, &m->cap_anchors, m->n_anchors + n, sizeof(*a)))
        return -ENOMEM;
    memcpy(m->anchors + m->n_anchors, a, n * sizeof(*a));
    m->n_anchors += n;
    m->solved = 0;
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

/* Place the ranks: anchored ones at their middle anchor, then the others
 * through edges, breadth first.  With no anchors at all, the lowest rank
 * with an edge defines the time line. */
static int place_ranks(struct mks_clock_model *m)
{
    size_t *count = calloc(m->nranks, sizeof(size_t)), *seen = calloc(m->nranks, sizeof(size_t));
    int err = 0, any_anchor = m->n_anchors > 0;

    if (!count || !seen) {
        err = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < m->n_anchors; i++)
        count[m->anchors[i].rank]++;
    for (size_t i = 0; i < m->n_anchors; i++) {
        const struct mks_clock_anchor *a = &m->anchors[i];
        struct rank_state *r = &m->r[a->rank];
        if (seen[a->rank]++ == count[a->rank] / 2) {
            r->placed = r->anchored = 1;
            r->c = (int64_t)a->device_ns;
            r->h = (int64_t)(a->host_lo_ns + (a->host_hi_ns - a->host_lo_ns) / 2);
            r->box_u = m->opts.max_offset_ns;
            if ((err = set_box(m, r, 0)))
                goto out;
        }
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
            goto out;
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
                goto out;
            progress = 1;
        }
    }
out:
    free(count);
    free(seen);
    return err;
}

static int apply_anchors(struct mks_clock_model *m)
{
    double tick = m->opts.tick_ns;

    for (size_t i = 0; i < m->n_anchors; i++) {
        const struct mks_clock_anchor *a = &m->anchors[i];
        struct rank_state *r = &m->r[a->rank];
        double ds = dsec(r, a->device_ns);
        /* T = h + D + u + w*ds in [lo, hi]  =>  u + w*ds in [lo - h - D, hi - h - D] */
        int64_t base = r->h + ((int64_t)a->device_ns - r->c);
        double lo = (double)((int64_t)a->host_lo_ns - base) - tick - FP_SLACK_NS;
        double hi = (double)((int64_t)a->host_hi_ns - base) + tick + FP_SLACK_NS;
        int rc = poly_clip(m, &r->p, 1, ds, hi);
        if (rc >= 0)
            rc = poly_clip(m, &r->p, -1, -ds, -lo);
        if (rc < 0)
            return rc;
        if (r->p.n == 0)
            return -EDOM;
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
    if ((err = place_ranks(m)) || (err = apply_anchors(m)))
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
