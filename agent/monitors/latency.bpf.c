/*
 * latency: per task class and step bucket, log2 histograms of the time a task
 * sat ready before it started (lat_ready, at task_start) and of its execution
 * (lat_run, at task_end), and the exact task_end count per class
 * (count_by_class, the same map count.bpf.o keeps).  Maps in monitors.h.
 *
 * The count rides in the task_end program rather than in a program of its
 * own: a hook holds MKS_MAX_PROGS_PER_HOOK programs, and the standard
 * monitors leave room at task_end for an escalation and a user program.
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

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_MAX_CLASSES);
    __type(key, __u32);
    __type(value, __u64);
} count_by_class SEC(".maps");

/* Adds t_now - t0 to the (class, step bucket) histogram of map; skips an
 * unknown (0) or later-than-now t0. */
static __always_inline int add_latency(void *map, const struct mks_hook_ctx *ctx, __u64 t0)
{
    __u64 t1 = ctx->t_now;
    __u32 cls = ctx->task_class, step = ctx->step;
    __u32 key;

    if (t0 == 0 || t0 > t1 || MKS_CTX_IS_ABSENT32(step)) /* absent step: no bucket to blame */
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
    __u32 key = MKS_MON_CLASS_IDX(ctx->task_class);
    __u64 *n = mks_map_lookup(&count_by_class, &key);

    /* every task_end counts, also one whose start time is unknown */
    if (n)
        __sync_fetch_and_add(n, 1);
    return add_latency(&lat_run, ctx, ctx->t_start);
}
