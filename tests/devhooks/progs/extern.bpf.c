/* Loader test object: an extern resolved from the kernel's config. */
#include "mkscope/mkscope.bpf.h"

extern unsigned int LINUX_KERNEL_VERSION __attribute__((section(".kconfig"), weak));

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    return ctx->step + LINUX_KERNEL_VERSION;
}
