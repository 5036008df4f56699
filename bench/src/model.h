/*
 * The bench model: deterministic weights, the arithmetic of every operator
 * (shared by the task bodies and the plain reference, so both compute the same
 * thing and differ only in summation order), and the request slots whose
 * requests join and leave the batch.
 */
#ifndef MKS_BENCH_MODEL_H
#define MKS_BENCH_MODEL_H

#include <stdint.h>

#include "mkscope/bench.h"

/* Task classes; experts follow BC_EXPERT0 (one class per expert). */
enum bm_class {
    BC_NORM = 0,
    BC_QKV,
    BC_ATTN,
    BC_OPROJ,
    BC_AR_SEND,
    BC_AR_REDUCE,
    BC_ROUTER,
    BC_COMBINE,
    BC_LMHEAD,
    BC_SAMPLE,
    BC_EXPERT0,
};

/* Router logit bias of the hot expert under moe-skew: large against logits of
 * order one, so almost every token picks it. */
#define BM_SKEW_BIAS 8.0f

struct bm_layer {
    float *norm1, *wq, *wk, *wv, *wo; /* wq/wk/wv: [H][QD], wo: [QD][H] */
    float *norm2, *wr;                /* wr: [H][E] */
    float *w1, *w2;                   /* w1: [E][H][F], w2: [E][F][H] */
};

struct bm_model {
    struct mks_bench_config cfg;
    uint32_t H, NH, HD, QD, E, F, V, B; /* NH: all heads of all ranks */
    float *embed;                       /* [V][H] */
    struct bm_layer *layer;
    float *normf, *lmhead; /* lmhead: [H][V] */
    const struct mks_fault *faults;
    uint32_t n_faults;
};

int bm_model_init(struct bm_model *m, const struct mks_bench_config *cfg,
                  const struct mks_fault *faults, uint32_t n_faults);
void bm_model_fini(struct bm_model *m);

/* out = x / rms(x) * w */
void bm_rmsnorm(const float *x, const float *w, float *out, uint32_t n);
/* y[j - c0] = sum_i x[i] * W[i * stride + j] for j in [c0, c1) */
void bm_matvec_cols(const float *x, const float *W, uint32_t in, uint32_t stride, uint32_t c0,
                    uint32_t c1, float *y);
/* One head of attention for a query at position pos over k/v caches laid out
 * [pos][QD]; writes HD outputs. */
void bm_attention(const struct bm_model *m, const float *q, const float *kc, const float *vc,
                  uint32_t pos, uint32_t head, float *out);
/* Router: writes the top-k experts and their gates for one normed row. */
void bm_route(const struct bm_model *m, uint32_t layer, uint32_t step, const float *xn,
              uint32_t *experts, float *gates);
/* Expert e's output columns [c0, c1) of H, scaled by gate, added into
 * out[c0..c1) (the inner activation is computed whole, so every tiling sums
 * each output in the same order). */
void bm_expert_tile(const struct bm_model *m, uint32_t layer, uint32_t e, const float *xn,
                    float gate, uint32_t c0, uint32_t c1, float *out);
uint32_t bm_argmax(const float *v, uint32_t n);
/* The rank that owns expert e. */
static inline uint32_t bm_expert_rank(const struct bm_model *m, uint32_t e)
{
    return e % m->cfg.ranks;
}
/* Tile t of n tiles over [0, total): [*c0, *c1). */
void bm_tile_range(uint32_t total, uint32_t n, uint32_t t, uint32_t *c0, uint32_t *c1);

/* Request slots.  A request decodes `len` tokens from its first token; when it
 * finishes its slot stays idle one step (slot 0 never idles) and a new request
 * with the next request generation joins. */
struct bm_slot {
    uint8_t active;
    uint64_t req_gen;   /* 1 for the slot's first request */
    uint32_t pos, len;  /* position of the current token, request length */
    int32_t token;      /* token to feed at this step */
    uint32_t join_step; /* when inactive: the step the next request joins */
};

struct bm_batch {
    struct bm_slot slot[MKS_BENCH_MAX_BATCH];
};

void bm_batch_init(const struct bm_model *m, struct bm_batch *b);
/* Activate requests that join at `step`; returns the mask of slots that
 * joined (for GEN_ADVANCE). */
uint32_t bm_batch_begin(const struct bm_model *m, struct bm_batch *b, uint32_t step);
/* Feed the sampled tokens of the active slots; finished requests leave. */
void bm_batch_end(const struct bm_model *m, struct bm_batch *b, uint32_t step,
                  const int32_t *sampled);

/* moe-skew in force at (step)?  Returns the hot expert or -1. */
int32_t bm_skew_expert(const struct bm_model *m, uint32_t step);

#endif
