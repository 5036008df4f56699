/*
 * The task schema the runtime publishes at init: a serialized
 * mkscope.v1.TaskSchema (proto/mkscope.proto).  Encoded here with a few lines
 * of protobuf wire format rather than protobuf-c, so the runtime links nothing
 * beyond devhooks and comm-ids, as a megakernel on a bare GPU machine must.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "workload.h"

struct pb {
    uint8_t *p;
    size_t n, cap;
    int oom;
};

static void put(struct pb *b, const void *d, size_t n)
{
    if (b->oom || !n)
        return;
    if (b->n + n > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + n;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void varint(struct pb *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    put(b, t, n);
}

static void f_u(struct pb *b, uint32_t field, uint64_t v)
{
    if (!v)
        return; /* proto3 default */
    varint(b, (uint64_t)field << 3);
    varint(b, v);
}

static void f_bytes(struct pb *b, uint32_t field, const void *d, size_t n)
{
    varint(b, ((uint64_t)field << 3) | 2);
    varint(b, n);
    put(b, d, n);
}

static void f_str(struct pb *b, uint32_t field, const char *s)
{
    f_bytes(b, field, s, strlen(s));
}

static void f_msg(struct pb *b, uint32_t field, struct pb *m)
{
    if (m->oom)
        b->oom = 1;
    f_bytes(b, field, m->p, m->n);
    free(m->p);
    memset(m, 0, sizeof(*m));
}

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
    struct pb root = {0};
    char nb[32];
    for (uint32_t c = 0; c < mks_bench_class_count(cfg); c++) {
        struct pb m = {0};
        const struct cls_info *in = c < BC_EXPERT0 ? &infos[c] : NULL;
        f_u(&m, 1, c);
        f_str(&m, 2, mks_bench_class_name(cfg, c, nb, sizeof(nb)));
        f_str(&m, 3, in ? in->op : "moe.expert");
        f_str(&m, 4, in ? in->fn : "bm_expert_out");
        f_str(&m, 5, in ? in->region : "expert.out");
        struct pb deps = {0};
        for (int k = 0; k < 3; k++) {
            int d = in ? in->deps[k] : (k == 0 ? DC_ROUTED : -1);
            if (d >= 0)
                varint(&deps, (uint64_t)d);
        }
        f_msg(&m, 6, &deps); /* packed repeated uint32 */
        f_u(&m, 7, c == BC_AR_SEND || c == BC_AR_REDUCE);
        f_msg(&root, 1, &m);
    }
    for (uint32_t d = 0; d < DC_COUNT; d++) {
        struct pb m = {0};
        f_u(&m, 1, d);
        f_str(&m, 2, dc_names[d]);
        f_u(&m, 3, d == DC_REMOTE);
        f_msg(&root, 2, &m);
    }
    for (uint32_t ch = BW_CH_AR_ATTN; ch <= BW_CH_AR_MOE; ch++) {
        for (uint32_t p = 0; p < cfg->ranks; p++) {
            if (p == rank)
                continue;
            struct pb m = {0};
            f_u(&m, 1, ch); /* the comm-ids channel of its transfers */
            f_str(&m, 2, ch == BW_CH_AR_ATTN ? "allreduce.attention" : "allreduce.moe");
            f_u(&m, 3, p);
            f_str(&m, 4, "allreduce");
            f_msg(&root, 3, &m);
        }
    }
    if (root.oom) {
        free(root.p);
        return -ENOMEM;
    }
    *buf_p = root.p;
    *len_p = root.n;
    return 0;
}
