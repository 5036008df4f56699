/*
 * OBSERVE programs for the bench hook test: count events by type in one
 * shared array, one program per hook.
 */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);
MKS_LICENSE("Dual BSD/GPL");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, 16);
    __type(key, __u32);
    __type(value, __u64);
} ev_count SEC(".maps");

static __always_inline int bump(const struct mks_hook_ctx *ctx)
{
    __u32 key = ctx->event;
    __u64 *n = mks_map_lookup(&ev_count, &key);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}

SEC("mkscope/task_ready")
int c_ready(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}

SEC("mkscope/task_assign")
int c_assign(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}

SEC("mkscope/task_start")
int c_start(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}

SEC("mkscope/task_end")
int c_end(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}

SEC("mkscope/dep_release")
int c_release(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}

SEC("mkscope/queue_pressure")
int c_pressure(const struct mks_hook_ctx *ctx)
{
    return bump(ctx);
}
