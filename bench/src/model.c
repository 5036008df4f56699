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
    m->cfg.baseline_ns = NULL; /* a rank takes its row: base_ns */
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
        if (!L->norm1 || !L->wq || !L->wk || !L->wv || !L->wo || !L->norm2 || !L->wr || !L->w1 ||
            !L->w2)
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
