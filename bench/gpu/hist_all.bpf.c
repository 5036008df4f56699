/*
 * hist_all: the overhead benchmark's heaviest monitor (bench/gpu/overhead.sh):
 * the same 30-instruction histogram on every event of the hook ABI.  Each
 * program takes the time since the task started (since it became ready
 * before it starts; since the step began for gen_advance), in ~µs,
 * floor(log2) by binary search into 16 buckets, and adds one to the
 * bucket's counter of the event in an array map.
 */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, 16 * 16);
    __type(key, __u32);
    __type(value, __u64);
} hist_all SEC(".maps");

static __always_inline int hist(const struct mks_hook_ctx *ctx, __u32 ev)
{
    __u64 t0 = ctx->t_start ? ctx->t_start : ctx->t_ready;
    __u64 d = ctx->t_now > t0 ? (ctx->t_now - t0) >> 10 : 0;
    __u32 b = 0;
    if (d >> 8) {
        d >>= 8;
        b += 8;
    }
    if (d >> 4) {
        d >>= 4;
        b += 4;
    }
    if (d >> 2) {
        d >>= 2;
        b += 2;
    }
    if (d >> 1)
        b += 1;
    __u32 key = ev * 16 + (b & 15);
    __u64 *n = mks_map_lookup(&hist_all, &key);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}

#define HIST_AT(event, n)                                                                          \
    SEC("mkscope/" #event)                                                                         \
    int hist_##event(const struct mks_hook_ctx *ctx)                                               \
    {                                                                                              \
        return hist(ctx, n);                                                                       \
    }

HIST_AT(task_ready, 0)
HIST_AT(task_assign, 1)
HIST_AT(task_start, 2)
HIST_AT(task_end, 3)
HIST_AT(dep_wait_begin, 4)
HIST_AT(dep_wait_end, 5)
HIST_AT(dep_release, 6)
HIST_AT(comm_begin, 7)
HIST_AT(comm_end, 8)
HIST_AT(gen_advance, 9)
HIST_AT(queue_pressure, 10)
