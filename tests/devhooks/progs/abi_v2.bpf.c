/* Loader/verifier test object: declares a hook ABI this runtime lacks. */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(2);

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    return ctx->step;
}
