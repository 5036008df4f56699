/*
 * The bench model's arithmetic and request slots as inline functions that
 * compile for the host (C11) and the device (nvcc): the task bodies of both
 * backends and the reference call the same code, so they differ only in how
 * work is split and in summation order across tiles and ranks.
 */
#ifndef MKS_BENCH_MODEL_MATH_H
#define MKS_BENCH_MODEL_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline BM_HD uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline BM_HD void bm_rmsnorm(const float *x, const float *w, float *out, uint32_t n)
{
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + 1e-6f);
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

static inline BM_HD void bm_matvec_cols(const float *x, const float *W, uint32_t in,
                                        uint32_t stride, uint32_t c0, uint32_t c1, float *y)
{
    for (uint32_t j = c0; j < c1; j++)
        y[j - c0] = 0.0f;
    for (uint32_t i = 0; i < in; i++) {
        const float *row = W + (size_t)i * stride;
        for (uint32_t j = c0; j < c1; j++)
            y[j - c0] += x[i] * row[j];
    }
}

/* Columns [a, b) of this rank's q|k|v block (3 x QDr columns, the rank's
 * heads starting at column off of each of q, k, v) for one normed row:
 * written into q, k, v rows of QD floats at their global columns. */
static inline BM_HD void bm_qkv_cols(const struct bm_model *m, uint32_t layer, uint32_t off,
                                     uint32_t QDr, const float *xn, uint32_t a, uint32_t b,
                                     float *q, float *k, float *v)
{
    const struct bm_layer *Ly = &m->layer[layer];
    for (uint32_t which = 0; which < 3; which++) {
        uint32_t b0 = which * QDr, b1 = b0 + QDr;
        uint32_t lo = a > b0 ? a : b0, hi = b < b1 ? b : b1;
        if (lo >= hi)
            continue;
        const float *W = which == 0 ? Ly->wq : which == 1 ? Ly->wk : Ly->wv;
        float *dst = which == 0 ? q : which == 1 ? k : v;
        bm_matvec_cols(xn, W, m->H, m->QD, off + lo - b0, off + hi - b0, dst + off + lo - b0);
    }
}

static inline BM_HD void bm_attention(const struct bm_model *m, const float *q, const float *kc,
                                      const float *vc, uint32_t pos, uint32_t head, float *out)
{
    float sc[256]; /* max_len is bounded by the config check (<= 256) */
    float scale = 1.0f / sqrtf((float)m->HD), mx = -INFINITY;
    const uint32_t off = head * m->HD;
    for (uint32_t p = 0; p <= pos; p++) {
        float d = 0.0f;
        for (uint32_t i = 0; i < m->HD; i++)
            d += q[off + i] * kc[(size_t)p * m->QD + off + i];
        sc[p] = d * scale;
        if (sc[p] > mx)
            mx = sc[p];
    }
    float sum = 0.0f;
    for (uint32_t p = 0; p <= pos; p++) {
        sc[p] = expf(sc[p] - mx);
        sum += sc[p];
    }
    for (uint32_t i = 0; i < m->HD; i++)
        out[i] = 0.0f;
    for (uint32_t p = 0; p <= pos; p++) {
        float w = sc[p] / sum;
        for (uint32_t i = 0; i < m->HD; i++)
            out[i] += w * vc[(size_t)p * m->QD + off + i];
    }
}

static inline BM_HD int32_t bm_skew_expert(const struct bm_model *m, uint32_t step)
{
    for (uint32_t i = 0; i < m->n_faults; i++) {
        const struct mks_fault *f = &m->faults[i];
        if (f->type == MKS_FAULT_MOE_SKEW && step >= f->step_lo && step <= f->step_hi &&
            (f->gen == MKS_FAULT_ANY || (uint64_t)f->gen == (uint64_t)step + 1))
            return f->expert;
    }
    return -1;
}

/* Top-k of the router logits (logit[E], changed by the skew fault) and
 * their gates; bm_route() below, or a device that computed the logits with
 * several threads. */
static inline BM_HD void bm_route_select(const struct bm_model *m, uint32_t step, float *logit,
                                         uint32_t *experts, float *gates)
{
    int32_t hot = bm_skew_expert(m, step);
    if (hot >= 0)
        logit[hot] += BM_SKEW_BIAS;
    uint64_t taken = 0;
    for (uint32_t k = 0; k < m->cfg.topk; k++) {
        uint32_t best = 0;
        float bv = -INFINITY;
        for (uint32_t e = 0; e < m->E; e++) {
            if (!(taken & (1ull << e)) && logit[e] > bv) {
                bv = logit[e];
                best = e;
            }
        }
        taken |= 1ull << best;
        experts[k] = best;
        gates[k] = logit[best];
    }
    /* softmax over the chosen logits; experts[0] holds the largest */
    float sum = 0.0f, top = gates[0];
    for (uint32_t k = 0; k < m->cfg.topk; k++) {
        gates[k] = expf(gates[k] - top);
        sum += gates[k];
    }
    for (uint32_t k = 0; k < m->cfg.topk; k++)
        gates[k] /= sum;
}

static inline BM_HD void bm_route(const struct bm_model *m, uint32_t layer, uint32_t step,
                                  const float *xn, uint32_t *experts, float *gates)
{
    float logit[MKS_BENCH_MAX_EXPERTS];
    bm_matvec_cols(xn, m->layer[layer].wr, m->H, m->E, 0, m->E, logit);
    bm_route_select(m, step, logit, experts, gates);
}

/* Expert e's inner activation h[F] (before SiLU) for one normed row. */
static inline BM_HD void bm_expert_hidden(const struct bm_model *m, uint32_t layer, uint32_t e,
                                          const float *xn, uint32_t j0, uint32_t j1, float *h)
{
    const float *w1 = m->layer[layer].w1 + (size_t)e * m->H * m->F;
    bm_matvec_cols(xn, w1, m->H, m->F, j0, j1, h + j0);
}

/* Output columns [c0, c1) of expert e from its inner activation, scaled by
 * gate, added into out[c0..c1): every tiling sums each output over the inner
 * width in the same order. */
static inline BM_HD void bm_expert_out(const struct bm_model *m, uint32_t layer, uint32_t e,
                                       const float *h, float gate, uint32_t c0, uint32_t c1,
                                       float *out)
{
    const float *w2 = m->layer[layer].w2 + (size_t)e * m->F * m->H;
    for (uint32_t j = 0; j < m->F; j++) {
        float v = h[j];
        float a = gate * v / (1.0f + expf(-v)); /* SiLU */
        const float *row = w2 + (size_t)j * m->H;
        for (uint32_t k = c0; k < c1; k++)
            out[k] += a * row[k];
    }
}

static inline BM_HD uint32_t bm_argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static inline BM_HD void bm_tile_range(uint32_t total, uint32_t n, uint32_t t, uint32_t *c0,
                                       uint32_t *c1)
{
    *c0 = (uint32_t)((uint64_t)total * t / n);
    *c1 = (uint32_t)((uint64_t)total * (t + 1) / n);
}

static inline BM_HD void bm_slot_join(const struct bm_model *m, struct bm_slot *s, uint32_t i)
{
    s->req_gen++;
    uint64_t h = splitmix64(m->cfg.seed ^ splitmix64(((uint64_t)i << 32) | s->req_gen));
    s->active = 1;
    s->pos = 0;
    s->token = (int32_t)(h % m->V);
    uint32_t span = m->cfg.max_len > 2 ? m->cfg.max_len - 1 : 1;
    s->len = 2 + (uint32_t)((h >> 32) % span);
    if (s->len > m->cfg.max_len)
        s->len = m->cfg.max_len;
}

static inline BM_HD void bm_batch_init(const struct bm_model *m, struct bm_batch *b)
{
    memset(b, 0, sizeof(*b));
    for (uint32_t i = 0; i < m->B; i++)
        b->slot[i].join_step = i; /* requests arrive one per step */
}

static inline BM_HD uint32_t bm_batch_begin(const struct bm_model *m, struct bm_batch *b,
                                            uint32_t step)
{
    uint32_t joined = 0;
    for (uint32_t i = 0; i < m->B; i++) {
        struct bm_slot *s = &b->slot[i];
        if (!s->active && s->join_step <= step) {
            bm_slot_join(m, s, i);
            joined |= 1u << i;
        }
    }
    return joined;
}

static inline BM_HD void bm_batch_end(const struct bm_model *m, struct bm_batch *b, uint32_t step,
                                      const int32_t *sampled)
{
    for (uint32_t i = 0; i < m->B; i++) {
        struct bm_slot *s = &b->slot[i];
        if (!s->active)
            continue;
        s->token = sampled[i];
        s->pos++;
        if (s->pos >= s->len) {
            s->active = 0;
            s->join_step = step + (i == 0 ? 1 : 2);
        }
    }
}

/* What the fault plan does to one task.  comm_delay_ns is a deadline: the
 * transfer completes no earlier than that long after the task became ready. */
struct bm_fault_effect {
    uint64_t run_delay_ns, notify_delay_ns, hold_ns, starve_ns, comm_delay_ns;
    int32_t force_worker;
};

/* How often a class occurs in one decode step. */
static inline BM_HD uint32_t bm_class_occurrences(uint32_t cls, uint32_t layers)
{
    switch (cls) {
    case BC_AR_SEND:
    case BC_AR_REDUCE:
        return 2 * layers;
    case BC_LMHEAD:
    case BC_SAMPLE:
        return 1;
    default:
        return layers;
    }
}

/* The plan's gain, in 1/BM_GAIN_ONE: BM_GAIN_ONE plans the magnitudes as
 * written (see bm_fault_gain_update). */
#define BM_GAIN_ONE 1024u

/* Closed loop on the outer picture, when the run has a baseline.  The plan
 * below puts each fault's magnitude where the fault acts, but how much of it
 * reaches the step's end depends on the slack around that place: a delayed
 * tile whose operator has other tiles still running, a late transfer whose
 * peer is late anyway, a skewed routing that adds time of its own.  Given
 * each step's time in a clean run of the same configuration (the same seed:
 * the same requests join and leave, so the clean steps are known one by
 * one; --baseline), a rank compares each step inside its faults with the
 * clean one and scales the next step's plan by magnitude / added (at most
 * 4/3 up or 3/4 down a step, between 1/4 and 4 in all).  A fault then adds
 * about its magnitude whatever the slack, and still acts where its type
 * says: only the size of its per-task delays follows the loop.  A running
 * mean of the rank's own clean steps is no substitute: decode steps grow
 * with the KV cache and jump as requests join, and the loop would chase
 * that.  Without a baseline the plan is as written.  The ground truth is
 * the spec either way. */
struct bm_fault_gain {
    uint32_t gain; /* the next step's plan scale, BM_GAIN_ONE = as written */
};

static inline BM_HD void bm_fault_gain_init(struct bm_fault_gain *g)
{
    g->gain = BM_GAIN_ONE;
}

/* The magnitude, in ns, of rank's faults that cover step. */
static inline BM_HD uint64_t bm_fault_step_mag(const struct mks_fault *faults, uint32_t n_faults,
                                               uint32_t rank, uint32_t step)
{
    uint64_t mag = 0;
    for (uint32_t i = 0; i < n_faults; i++)
        if (faults[i].rank == (int32_t)rank && step >= faults[i].step_lo &&
            step <= faults[i].step_hi)
            mag += faults[i].magnitude_us * 1000ull;
    return mag;
}

/* A step of the rank took step_ns; mag_ns is its faults' magnitude
 * (bm_fault_step_mag), base_ns the same step in the clean run (0: none). */
static inline BM_HD void bm_fault_gain_update(struct bm_fault_gain *g, uint64_t step_ns,
                                              uint64_t mag_ns, uint64_t base_ns)
{
    if (!mag_ns || !base_ns)
        return;
    uint64_t added = step_ns > base_ns ? step_ns - base_ns : 0;
    if (added < mag_ns / 4)
        added = mag_ns / 4;
    uint64_t ng = (uint64_t)g->gain * mag_ns / added;
    uint64_t lo = (uint64_t)g->gain * 3 / 4, hi = (uint64_t)g->gain * 4 / 3;
    ng = ng < lo ? lo : ng > hi ? hi : ng;
    ng = ng < BM_GAIN_ONE / 4 ? BM_GAIN_ONE / 4 : ng > BM_GAIN_ONE * 4 ? BM_GAIN_ONE * 4 : ng;
    g->gain = (uint32_t)ng;
}

/* The fault plan of one task on `rank` with W workers and L layers: class
 * cls, decode step, tile, task idx of the n_op tasks of its operator (in the
 * order they become ready), k the all-reduce index for communication tasks.
 * Each fault's magnitude (scaled by gain, bm_fault_gain_update) is spread
 * over the tasks it hits so that an affected step grows by about `magnitude`
 * whatever the fault type, the worker count and the time the task bodies
 * take; occ is how often the class occurs in a step, waves = ceil(n_op / W)
 * the tasks a worker runs:
 *   task-delay, moe-skew  each task runs magnitude / (occ x waves) longer
 *                          (the workers' waves side by side);
 *   notify-delay          each task's release waits magnitude / occ after
 *                          its end while its worker goes on;
 *   queue-oversub         tasks 0..waves-1 all go to one worker (a fair
 *                          share: more would serialise their bodies, which
 *                          costs whatever the bodies take), each held
 *                          magnitude / (occ x waves) in its queue before it
 *                          starts: that worker's backlog grows by
 *                          magnitude / occ while the others idle;
 *   tile-starve           the scheduler passes the tile over until
 *                          magnitude / occ after it became ready;
 *   comm-delay            each transfer of a selected all-reduce completes
 *                          no earlier than magnitude / (selected all-reduces)
 *                          after it became ready: a deadline, so every peer
 *                          sees its data equally late however the sends
 *                          share the workers;
 *   slow-rank             every compute task of the rank (all classes but
 *                          the all-reduce's sends and reduces, whose time is
 *                          transfer and waiting) runs longer, each class by
 *                          an equal share, magnitude / (BM_SLOW_RANK_KINDS x
 *                          occ x waves) a task: the whole rank is slower,
 *                          no class stands out, as on a throttled device. */
/* The kinds of compute task a step runs (rmsnorm, qkv_proj, attention,
 * o_proj, moe_router, the experts, moe_combine, lm_head, sample): slow-rank
 * gives each an equal share of its magnitude. */
#define BM_SLOW_RANK_KINDS 9u

static inline BM_HD void bm_fault_plan(const struct mks_fault *faults, uint32_t n_faults,
                                       uint32_t rank, uint32_t W, uint32_t L, uint32_t cls,
                                       uint32_t step, uint32_t tile_x, uint32_t idx, uint32_t n_op,
                                       uint32_t k, uint32_t gain, struct bm_fault_effect *fx)
{
    memset(fx, 0, sizeof(*fx));
    fx->force_worker = -1;
    uint64_t waves = n_op && W ? (n_op + W - 1) / W : 1;
    for (uint32_t i = 0; i < n_faults; i++) {
        const struct mks_fault *f = &faults[i];
        if (f->rank != (int32_t)rank || step < f->step_lo || step > f->step_hi)
            continue;
        if (f->type != MKS_FAULT_COMM_DELAY && f->gen != MKS_FAULT_ANY &&
            (uint64_t)f->gen != (uint64_t)step + 1)
            continue;
        if (f->cls != MKS_FAULT_ANY && (uint32_t)f->cls != cls)
            continue;
        uint64_t mag = f->magnitude_us * 1000ull * gain / BM_GAIN_ONE,
                 occ = bm_class_occurrences(cls, L);
        switch (f->type) {
        case MKS_FAULT_TASK_DELAY:
        case MKS_FAULT_MOE_SKEW:
            fx->run_delay_ns += mag / (occ * waves);
            break;
        case MKS_FAULT_NOTIFY_DELAY:
            /* releases wait side by side, not one after another */
            fx->notify_delay_ns += mag / occ;
            break;
        case MKS_FAULT_QUEUE_OVERSUB:
            if (idx < waves) {
                fx->force_worker = f->worker;
                fx->hold_ns += mag / (occ * waves);
            }
            break;
        case MKS_FAULT_TILE_STARVE:
            if ((int32_t)tile_x == f->tile)
                fx->starve_ns += mag / occ;
            break;
        case MKS_FAULT_COMM_DELAY:
            if (f->gen == MKS_FAULT_ANY || (uint64_t)f->gen == k)
                fx->comm_delay_ns += mag / (f->gen == MKS_FAULT_ANY ? 2ull * L : 1);
            break;
        case MKS_FAULT_SLOW_RANK:
            if (cls != BC_AR_SEND && cls != BC_AR_REDUCE)
                fx->run_delay_ns += mag / (BM_SLOW_RANK_KINDS * occ * waves);
            break;
        }
    }
}

#endif
