/* Verifier test object: loops clang keeps as loops (unrolling disabled),
 * bounded by a constant, by a masked context field, and with a branch in
 * the body. */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64[16]);
} tab SEC(".maps");

SEC("mkscope/task_end")
int sum16(const struct mks_hook_ctx *ctx)
{
    __u32 k = 0;
    __u64 *t = mks_map_lookup(&tab, &k);
    __u64 s = 0;

    if (!t)
        return 0;
#pragma clang loop unroll(disable)
    for (int i = 0; i < 16; i++)
        s += t[i];
    return s & 1;
}

SEC("mkscope/task_start")
int sum_masked(const struct mks_hook_ctx *ctx)
{
    __u32 k = 0, n = ctx->step & 15;
    __u64 *t = mks_map_lookup(&tab, &k);
    __u64 s = 0;

    if (!t)
        return 0;
#pragma clang loop unroll(disable)
    for (__u32 i = 0; i < n; i++)
        s += t[i];
    return s & 1;
}

/* Population count of ctx->value, one bit per iteration. */
SEC("mkscope/task_ready")
int popcount(const struct mks_hook_ctx *ctx)
{
    __u64 v = ctx->value;
    __u32 c = 0;

#pragma clang loop unroll(disable)
    for (int i = 0; i < 64; i++) {
        if (v & 1)
            c++;
        v >>= 1;
    }
    return c;
}

/* A loop entered from several paths (the branches above it leave different
 * scales), with a data-dependent branch in the body: iterations differ only
 * in the accumulator, which decides nothing the verifier checks. */
SEC("mkscope/task_assign")
int weighted(const struct mks_hook_ctx *ctx)
{
    __u32 k = 0;
    __u64 scale = 1, s = 0;
    __u64 *t;

    if (ctx->flags & 1)
        scale = 3;
    if (ctx->flags & 2)
        scale += 5;
    t = mks_map_lookup(&tab, &k);
    if (!t)
        return 0;
#pragma clang loop unroll(disable)
    for (int i = 0; i < 16; i++) {
        if (t[i] > 100)
            s += t[i] * scale;
        else
            s += 1;
    }
    t[0] = s;
    return 0;
}
