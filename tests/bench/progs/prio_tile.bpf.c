/*
 * CONTROL programs for the bench scheduler test: raise the priority of one
 * qkv_proj tile at task_ready, and of another at task_assign.
 */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);
MKS_LICENSE("Dual BSD/GPL");

#define CLASS_QKV 1 /* bench task class qkv_proj */

SEC("mkscope.control/task_ready")
int prio_ready(const struct mks_hook_ctx *ctx)
{
    if (ctx->task_class == CLASS_QKV && ctx->tile_x == 3)
        return 7;
    return 0;
}

SEC("mkscope.control/task_assign")
int prio_assign(const struct mks_hook_ctx *ctx)
{
    if (ctx->task_class == CLASS_QKV && ctx->tile_x == 4)
        return 5;
    return 0;
}
