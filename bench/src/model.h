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
    const uint64_t *base_ns; /* this rank's clean step times, [steps], or NULL
                                (cfg.baseline_ns; bm_fault_gain_update) */
};

int bm_model_init(struct bm_model *m, const struct mks_bench_config *cfg,
                  const struct mks_fault *faults, uint32_t n_faults);
void bm_model_fini(struct bm_model *m);

#ifdef __CUDACC__
#define BM_HD __host__ __device__
#else
#define BM_HD
#endif

/* Request slots. A request decodes `len` tokens from its first token; when it
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

#include "model_math.h"

#endif
