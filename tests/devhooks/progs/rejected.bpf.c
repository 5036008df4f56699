/* Verifier test object: one program that passes and three that must not. */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);

SEC("mkscope/task_end")
int good(const struct mks_hook_ctx *ctx)
{
    return ctx->task_class;
}

/* Reads the reserved tail of the ABI v1 context. */
SEC("mkscope/task_start")
int reads_reserved(const struct mks_hook_ctx *ctx)
{
    return ctx->reserved[0];
}

/* A CONTROL program where a priority hint means nothing. */
SEC("mkscope.control/task_end")
int control_at_end(const struct mks_hook_ctx *ctx)
{
    return ctx->step & 3;
}

/* A loop whose trip count clang cannot know, so it stays a loop. */
SEC("mkscope/task_assign")
int loops(const struct mks_hook_ctx *ctx)
{
    __u64 acc = 0;
    for (__u32 i = 0; i < ctx->queue_depth; i++)
        acc += i * ctx->step;
    return acc;
}
