/*
 * The device build of the VM, the map operations and the hook run: the very
 * same C sources the CPU backend uses, compiled by nvcc for sm_90 with
 * MKS_DEVFN = __device__ (dev.h).  One translation unit, so the VM's static
 * helpers inline into the hook run.
 */
#include "vm.c"
#include "maps.c"
#include "hook.c"

#include "mkscope/devhook.cuh"

extern "C" __device__ int32_t mks_dev_hook_run(const struct mks_dev_rt *rt,
                                               struct mks_hook_ctx *ctx)
{
    return mksi_hook_run((struct mks_cb *)rt->cb, rt->rank, ctx);
}
