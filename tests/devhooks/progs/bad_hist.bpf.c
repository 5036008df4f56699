/* Loader test object: a histogram map whose value is not struct mks_hist. */
#include "mkscope/mkscope.bpf.h"

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, __u64);
} h SEC(".maps");

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    __u32 k = 0;
    mks_hist_add(&h, &k, ctx->t_now);
    return 0;
}
