/* Loader test object: every map type, global data in .rodata/.data/.bss, a
 * subprogram, an OBSERVE and a CONTROL program. */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, 64);
    __type(key, __u32);
    __type(value, __u64);
} counts SEC(".maps");

struct {
    __uint(type, MKS_MAP_PERWORKER_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} per_worker SEC(".maps");

struct {
    __uint(type, MKS_MAP_HASH);
    __uint(max_entries, 128);
    __type(key, __u64);
    __type(value, __u32);
} by_gen SEC(".maps");

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, struct mks_hist);
} lat SEC(".maps");

struct {
    __uint(type, MKS_MAP_RINGBUF);
    __uint(max_entries, 4096);
} events SEC(".maps");

const volatile __u64 scale = 3;     /* .rodata */
volatile __u64 total = 7;           /* .data */
volatile __u64 seen;                /* .bss */

static __mks_noinline __u64 weight(const struct mks_hook_ctx *ctx)
{
    return (__u64)ctx->task_class * scale;
}

SEC("mkscope/task_end")
int on_end(const struct mks_hook_ctx *ctx)
{
    __u32 k = ctx->task_class & 63;
    __u64 *n = mks_map_lookup(&counts, &k);

    if (n)
        __sync_fetch_and_add(n, 1);
    total += weight(ctx);
    seen = 1;
    if (ctx->t_start && ctx->t_now > ctx->t_start) {
        __u32 h = 0;
        mks_hist_add(&lat, &h, ctx->t_now - ctx->t_start);
    }
    mks_ringbuf_output(&events, ctx, 64, 0);
    return 0;
}

SEC("mkscope.control/task_ready")
int prio(const struct mks_hook_ctx *ctx)
{
    return ctx->step & 7;
}
