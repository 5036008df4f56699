/* Loader test object: a program in a section that names no mkscope hook. */
#include "mkscope/mkscope.bpf.h"

SEC("mkscope/task_finish")
int p(const struct mks_hook_ctx *ctx)
{
    return ctx->step;
}
