/*
 * Weights, operator arithmetic and request slots of the bench model.  Weights
 * are a pure function of (seed, tensor, index), so every rank process builds
 * the same model on its own without exchanging anything.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1) from (seed, tensor, index). */
static float unit_rand(uint64_t seed, uint64_t tensor, uint64_t i)
{
    uint64_t h = splitmix64(seed ^ splitmix64(tensor * 0x100000001b3ull + i));
    return (float)((double)(h >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float *fill(uint64_t seed, uint64_t tensor, size_t n, float scale, float bias)
{
    float *p = malloc(n * sizeof(*p));
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = bias + scale * unit_rand(seed, tensor, i);
    return p;
}

int bm_model_init(struct bm_model *m, const struct mks_bench_config *cfg,
                  const struct mks_fault *faults, uint32_t n_faults)
{
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->cfg.job = NULL;
    m->cfg.trace = NULL;
    m->faults = faults;
    m->n_faults = n_faults;
    m->H = cfg->hidden;
    m->NH = cfg->heads * cfg->ranks;
    m->HD = cfg->head_dim;
    m->QD = m->NH * m->HD;
    m->E = cfg->experts;
    m->F = cfg->ffn;
    m->V = cfg->vocab;
    m->B = cfg->batch;
    uint64_t s = cfg->seed;
    float sh = 1.0f / sqrtf((float)m->H), sq = 1.0f / sqrtf((float)m->QD),
          sf = 1.0f / sqrtf((float)m->F);
    m->layer = calloc(cfg->layers, sizeof(*m->layer));
    m->embed = fill(s, 1, (size_t)m->V * m->H, 1.0f, 0.0f);
    m->normf = fill(s, 2, m->H, 0.1f, 1.0f);
    m->lmhead = fill(s, 3, (size_t)m->H * m->V, sh, 0.0f);
    if (!m->layer || !m->embed || !m->normf || !m->lmhead)
        goto fail;
    for (uint32_t l = 0; l < cfg->layers; l++) {
        struct bm_layer *L = &m->layer[l];
        uint64_t t = 16 + 16ull * l;
        L->norm1 = fill(s, t + 0, m->H, 0.1f, 1.0f);
        L->wq = fill(s, t + 1, (size_t)m->H * m->QD, sh, 0.0f);
        L->wk = fill(s, t + 2, (size_t)m->H * m->QD, sh, 0.0f);
        L->wv = fill(s, t + 3, (size_t)m->H * m->QD, sh, 0.0f);
        L->wo = fill(s, t + 4, (size_t)m->QD * m->H, sq, 0.0f);
        L->norm2 = fill(s, t + 5, m->H, 0.1f, 1.0f);
        L->wr = fill(s, t + 6, (size_t)m->H * m->E, 1.0f, 0.0f);
        L->w1 = fill(s, t + 7, (size_t)m->E * m->H * m->F, sh, 0.0f);
        L->w2 = fill(s, t + 8, (size_t)m->E * m->F * m->H, sf, 0.0f);
        if (!L->norm1 || !L->wq || !L->wk || !L->wv || !L->wo || !L->norm2 || !L->wr ||
            !L->w1 || !L->w2)
            goto fail;
    }
    return 0;
fail:
    bm_model_fini(m);
    return -ENOMEM;
}

void bm_model_fini(struct bm_model *m)
{
    if (m->layer) {
        for (uint32_t l = 0; l < m->cfg.layers; l++) {
            struct bm_layer *L = &m->layer[l];
            free(L->norm1), free(L->wq), free(L->wk), free(L->wv), free(L->wo);
            free(L->norm2), free(L->wr), free(L->w1), free(L->w2);
        }
    }
    free(m->layer);
    free(m->embed);
    free(m->normf);
    free(m->lmhead);
    memset(m, 0, sizeof(*m));
}

void bm_rmsnorm(const float *x, const float *w, float *out, uint32_t n)
{
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + 1e-6f);
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

void bm_matvec_cols(const float *x, const float *W, uint32_t in, uint32_t stride, uint32_t c0,
                    uint32_t c1, float *y)
{
    for (uint32_t j = c0; j < c1; j++)
        y[j - c0] = 0.0f;
    for (uint32_t i = 0; i < in; i++) {
        const float *row = W + (size_t)i * stride;
        for (uint32_t j = c0; j < c1; j++)
            y[j - c0] += x[i] * row[j];
    }
}

void bm_attention(const struct bm_model *m, const float *q, const float *kc, const float *vc,
                  uint32_t pos, uint32_t head, float *out)
{
    float sc[256]; /* max_len is bounded by the config check */
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

int32_t bm_skew_expert(const struct bm_model *m, uint32_t step)
{
    for (uint32_t i = 0; i < m->n_faults; i++) {
        const struct mks_fault *f = &m->faults[i];
        if (f->type == MKS_FAULT_MOE_SKEW && step >= f->step_lo && step <= f->step_hi &&
            (f->gen == MKS_FAULT_ANY || (uint64_t)f->gen == (uint64_t)step + 1))
            return f->expert;
    }
    return -1;
}

void bm_route(const struct bm_model *m, uint32_t layer, uint32_t step, const float *xn,
              uint32_t *experts, float *gates)
{
    float logit[MKS_BENCH_MAX_EXPERTS];
    bm_matvec_cols(xn, m->layer[layer].wr, m->H, m->E, 0, m->E, logit);
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

void bm_expert_tile(const struct bm_model *m, uint32_t layer, uint32_t e, const float *xn,
                    float gate, uint32_t c0, uint32_t c1, float *out)
{
    const struct bm_layer *L = &m->layer[layer];
    const float *w1 = L->w1 + (size_t)e * m->H * m->F;
    const float *w2 = L->w2 + (size_t)e * m->F * m->H;
    float h[MKS_BENCH_MAX_HIDDEN];
    bm_matvec_cols(xn, w1, m->H, m->F, 0, m->F, h);
    for (uint32_t j = 0; j < m->F; j++) {
        float v = h[j];
        float a = gate * v / (1.0f + expf(-v)); /* SiLU */
        const float *row = w2 + (size_t)j * m->H;
        for (uint32_t k = c0; k < c1; k++)
            out[k] += a * row[k];
    }
}

uint32_t bm_argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

void bm_tile_range(uint32_t total, uint32_t n, uint32_t t, uint32_t *c0, uint32_t *c1)
{
    *c0 = (uint32_t)((uint64_t)total * t / n);
    *c1 = (uint32_t)((uint64_t)total * (t + 1) / n);
}

static void slot_join(const struct bm_model *m, struct bm_slot *s, uint32_t i)
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

void bm_batch_init(const struct bm_model *m, struct bm_batch *b)
{
    memset(b, 0, sizeof(*b));
    for (uint32_t i = 0; i < m->B; i++)
        b->slot[i].join_step = i; /* requests arrive one per step */
}

uint32_t bm_batch_begin(const struct bm_model *m, struct bm_batch *b, uint32_t step)
{
    uint32_t joined = 0;
    for (uint32_t i = 0; i < m->B; i++) {
        struct bm_slot *s = &b->slot[i];
        if (!s->active && s->join_step <= step) {
            slot_join(m, s, i);
            joined |= 1u << i;
        }
    }
    return joined;
}

void bm_batch_end(const struct bm_model *m, struct bm_batch *b, uint32_t step,
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
