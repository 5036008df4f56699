/*
 * queue: scheduler queue pressure per worker.  At task_assign it samples the
 * depth of the worker's queue; at queue_pressure it counts threshold
 * crossings.  Maps in monitors.h.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_MAX_WORKERS);
    __type(key, __u32);
    __type(value, struct mks_mon_queue);
} queue_by_worker SEC(".maps");

SEC("mkscope/task_assign")
int q_assign(const struct mks_hook_ctx *ctx)
{
    __u32 key = ctx->worker & (MKS_MON_MAX_WORKERS - 1);
    __u64 depth = ctx->queue_depth;
    struct mks_mon_queue *q = mks_map_lookup(&queue_by_worker, &key);

    if (!q)
        return 0;
    __sync_fetch_and_add(&q->assigns, 1);
    /* A runtime that cannot tell the depth at the assignment says so
     * (MKS_CTX_ABSENT32): the assignment counts, no depth sample does. */
    if (MKS_CTX_IS_ABSENT32(ctx->queue_depth))
        return 0;
    __sync_fetch_and_add(&q->depth_sum, depth);
    if (depth > q->depth_max)
        q->depth_max = depth;
    return 0;
}

SEC("mkscope/queue_pressure")
int q_pressure(const struct mks_hook_ctx *ctx)
{
    __u32 key = ctx->worker & (MKS_MON_MAX_WORKERS - 1);
    __u64 depth = ctx->queue_depth;
    struct mks_mon_queue *q = mks_map_lookup(&queue_by_worker, &key);

    if (!q)
        return 0;
    __sync_fetch_and_add(&q->pressure, 1);
    q->threshold = ctx->value;
    q->t_last_pressure = ctx->t_now;
    if (!MKS_CTX_IS_ABSENT32(ctx->queue_depth) && depth > q->depth_max)
        q->depth_max = depth;
    return 0;
}
