/*
 * latency: per task class and step bucket, log2 histograms of the time a task
 * sat ready before it started (lat_ready, at task_start) and of its execution
 * (lat_run, at task_end).  Maps in monitors.h.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, MKS_MON_LAT_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_hist);
} lat_ready SEC(".maps");

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, MKS_MON_LAT_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_hist);
} lat_run SEC(".maps");

/* Adds t_now - t0 to the (class, step bucket) histogram of map; skips an
 * unknown (0) or later-than-now t0. */
static __always_inline int add_latency(void *map, const struct mks_hook_ctx *ctx, __u64 t0)
{
    __u64 t1 = ctx->t_now;
    __u32 cls = ctx->task_class, step = ctx->step;
    __u32 key;

    if (t0 == 0 || t0 > t1)
        return 0;
    key = MKS_MON_LAT_KEY(cls, step);
    mks_hist_add(map, &key, t1 - t0);
    return 0;
}

SEC("mkscope/task_start")
int lat_ready_prog(const struct mks_hook_ctx *ctx)
{
    return add_latency(&lat_ready, ctx, ctx->t_ready);
}

SEC("mkscope/task_end")
int lat_run_prog(const struct mks_hook_ctx *ctx)
{
    return add_latency(&lat_run, ctx, ctx->t_start);
}
