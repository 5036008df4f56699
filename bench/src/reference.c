/*
 * The plain reference: the bench model computed in one process, one request
 * row at a time, no tasks, no threads, no tensor parallelism.  The megakernel
 * must produce the same tokens; logits agree up to float summation order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "model.h"

int mks_bench_reference(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                        uint32_t n_faults, struct mks_bench_result **res_p)
{
    struct bm_model m;
    int rc = bm_model_init(&m, cfg, faults, n_faults);
    if (rc)
        return rc;
    const uint32_t H = m.H, QD = m.QD, L = cfg->layers, B = m.B, ML = cfg->max_len;
    struct mks_bench_result *res = bb_result_alloc(1, cfg->steps, B, 0, 0);
    float *x = malloc(sizeof(float) * H), *xn = malloc(sizeof(float) * H),
          *q = malloc(sizeof(float) * QD), *o = malloc(sizeof(float) * QD),
          *y = malloc(sizeof(float) * H), *logits = malloc(sizeof(float) * m.V),
          *hid = malloc(sizeof(float) * m.F);
    size_t kv_n = (size_t)L * B * ML * QD;
    float *kc = calloc(kv_n, sizeof(float)), *vc = calloc(kv_n, sizeof(float));
    if (!res || !x || !xn || !q || !o || !y || !logits || !hid || !kc || !vc) {
        rc = -ENOMEM;
        goto out;
    }
    struct bm_batch batch;
    bm_batch_init(&m, &batch);
    for (uint32_t s = 0; s < cfg->steps; s++) {
        bm_batch_begin(&m, &batch, s);
        int32_t sampled[MKS_BENCH_MAX_BATCH];
        double lsum = 0.0;
        for (uint32_t i = 0; i < B; i++) {
            struct bm_slot *sl = &batch.slot[i];
            sampled[i] = -1;
            res->req_gen[s * B + i] = sl->active ? sl->req_gen : 0;
            if (!sl->active)
                continue;
            memcpy(x, m.embed + (size_t)sl->token * H, sizeof(float) * H);
            for (uint32_t l = 0; l < L; l++) {
                const struct bm_layer *Ly = &m.layer[l];
                float *kcl = kc + ((size_t)l * B + i) * ML * QD;
                float *vcl = vc + ((size_t)l * B + i) * ML * QD;
                bm_rmsnorm(x, Ly->norm1, xn, H);
                bm_matvec_cols(xn, Ly->wq, H, QD, 0, QD, q);
                bm_matvec_cols(xn, Ly->wk, H, QD, 0, QD, kcl + (size_t)sl->pos * QD);
                bm_matvec_cols(xn, Ly->wv, H, QD, 0, QD, vcl + (size_t)sl->pos * QD);
                for (uint32_t h = 0; h < m.NH; h++)
                    bm_attention(&m, q, kcl, vcl, sl->pos, h, o + h * m.HD);
                bm_matvec_cols(o, Ly->wo, QD, H, 0, H, y);
                for (uint32_t k = 0; k < H; k++)
                    x[k] += y[k];
                bm_rmsnorm(x, Ly->norm2, xn, H);
                uint32_t ex[MKS_BENCH_MAX_EXPERTS];
                float gate[MKS_BENCH_MAX_EXPERTS];
                bm_route(&m, l, s, xn, ex, gate);
                memset(y, 0, sizeof(float) * H);
                for (uint32_t k = 0; k < cfg->topk; k++) {
                    bm_expert_hidden(&m, l, ex[k], xn, 0, m.F, hid);
                    bm_expert_out(&m, l, ex[k], hid, gate[k], 0, H, y);
                }
                for (uint32_t k = 0; k < H; k++)
                    x[k] += y[k];
            }
            bm_rmsnorm(x, m.normf, xn, H);
            bm_matvec_cols(xn, m.lmhead, H, m.V, 0, m.V, logits);
            sampled[i] = (int32_t)bm_argmax(logits, m.V);
            for (uint32_t v = 0; v < m.V; v++)
                lsum += logits[v];
        }
        memcpy(res->tokens + (size_t)s * B, sampled, sizeof(int32_t) * B);
        res->logit_sum[s] = lsum;
        bm_batch_end(&m, &batch, s, sampled);
    }
    *res_p = res;
    res = NULL;
out:
    free(x), free(xn), free(q), free(o), free(y), free(logits), free(hid), free(kc), free(vc);
    mks_bench_result_free(res);
    bm_model_fini(&m);
    return rc;
}
