/*
 * The task schema the runtime publishes at init: a serialized
 * mkscope.v1.TaskSchema (proto/mkscope.proto).  Encoded here with a few lines
 * of protobuf wire format (mkscope/pbwrite.h) rather than protobuf-c, so the runtime links nothing
 * beyond devhooks and comm-ids, as a megakernel on a bare GPU machine must.
 */
#include <errno.h>

#include "mkscope/pbwrite.h"
#include "model.h"
#include "workload.h"

/* Dependency classes: what a task waits on. */
enum {
    DC_STEP,
    DC_NORM,
    DC_QKV,
    DC_ATTN,
    DC_OPROJ,
    DC_SENT,
    DC_REMOTE,
    DC_REDUCED,
    DC_ROUTED,
    DC_EXPERT,
    DC_COMBINED,
    DC_LOGITS,
    DC_COUNT
};
static const char *const dc_names[DC_COUNT] = {
    "step_start", "rmsnorm_out",    "qkv_out",          "attention_out",
    "o_proj_out", "allreduce_sent", "allreduce_remote", "allreduce_out",
    "router_out", "expert_out",     "combine_out",      "logits"};

struct cls_info {
    const char *op, *fn, *region;
    int deps[3];
};
static const struct cls_info infos[BC_EXPERT0] = {
    [BC_NORM] = {"rmsnorm", "bm_rmsnorm", "activation.normed", {DC_STEP, DC_REDUCED, -1}},
    [BC_QKV] = {"linear.qkv", "bm_matvec_cols", "qkv", {DC_NORM, -1, -1}},
    [BC_ATTN] = {"attention.decode", "bm_attention", "attention.out+kv_cache", {DC_QKV, -1, -1}},
    [BC_OPROJ] = {"linear.o", "bm_matvec_cols", "partial_sum", {DC_ATTN, -1, -1}},
    [BC_AR_SEND] = {"allreduce", "copy_to_peer", "peer.inbox", {DC_OPROJ, DC_COMBINED, -1}},
    [BC_AR_REDUCE] = {"allreduce",
                      "sum_in_rank_order",
                      "activation.residual",
                      {DC_SENT, DC_REMOTE, -1}},
    [BC_ROUTER] = {"moe.router", "bm_route", "routing", {DC_REDUCED, -1, -1}},
    [BC_COMBINE] = {"moe.combine", "sum_experts", "partial_sum", {DC_EXPERT, DC_ROUTED, -1}},
    [BC_LMHEAD] = {"linear.lm_head", "bm_matvec_cols", "logits", {DC_REDUCED, -1, -1}},
    [BC_SAMPLE] = {"sample.greedy", "bm_argmax", "tokens", {DC_LOGITS, -1, -1}},
};

int bw_schema_encode(const struct mks_bench_config *cfg, uint32_t rank, uint8_t **buf_p,
                     size_t *len_p)
{
    struct mks_pbw root = {0}, m = {0}, deps = {0};
    char nb[32];
    for (uint32_t c = 0; c < mks_bench_class_count(cfg); c++) {
        const struct cls_info *in = c < BC_EXPERT0 ? &infos[c] : NULL;
        mks_pbw_uint3(&m, 1, c);
        mks_pbw_str(&m, 2, mks_bench_class_name(cfg, c, nb, sizeof(nb)));
        mks_pbw_str(&m, 3, in ? in->op : "moe.expert");
        mks_pbw_str(&m, 4, in ? in->fn : "bm_expert_out");
        mks_pbw_str(&m, 5, in ? in->region : "expert.out");
        for (int k = 0; k < 3; k++) {
            int d = in ? in->deps[k] : (k == 0 ? DC_ROUTED : -1);
            if (d >= 0)
                mks_pbw_varint(&deps, (uint64_t)d);
        }
        mks_pbw_sub(&m, 6, &deps); /* packed repeated uint32 */
        mks_pbw_uint3(&m, 7, c == BC_AR_SEND || c == BC_AR_REDUCE);
        mks_pbw_sub(&root, 1, &m);
    }
    for (uint32_t d = 0; d < DC_COUNT; d++) {
        mks_pbw_uint3(&m, 1, d);
        mks_pbw_str(&m, 2, dc_names[d]);
        mks_pbw_uint3(&m, 3, d == DC_REMOTE);
        mks_pbw_sub(&root, 2, &m);
    }
    for (uint32_t ch = BW_CH_AR_ATTN; ch <= BW_CH_AR_MOE; ch++) {
        for (uint32_t p = 0; p < cfg->ranks; p++) {
            if (p == rank)
                continue;
            mks_pbw_uint3(&m, 1, ch); /* the comm-ids channel of its transfers */
            mks_pbw_str(&m, 2, ch == BW_CH_AR_ATTN ? "allreduce.attention" : "allreduce.moe");
            mks_pbw_uint3(&m, 3, p);
            mks_pbw_str(&m, 4, "allreduce");
            mks_pbw_sub(&root, 3, &m);
        }
    }
    mks_pbw_free(&m);
    mks_pbw_free(&deps);
    return mks_pbw_take(&root, buf_p, len_p);
}
