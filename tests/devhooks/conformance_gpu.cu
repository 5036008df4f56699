/*
 * The conformance cases on the GPU: each case runs in the VM compiled by
 * nvcc (mks_dev_vm_run), one thread, with the input memory in device memory
 * as the run's extra region.  Linked into mkscope-vm-conformance-gpu with
 * conformance.c (MKS_CONF_GPU).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "mkscope/devhook.cuh"
#include "mkscope/vm.h"

struct gpu_result {
    uint64_t r0;
    int rc;
};

static __global__ void run_case(struct mks_vm_env env, uint64_t r1, uint64_t r2,
                                struct gpu_result *out)
{
    uint64_t r0 = 0;
    out->rc = mks_dev_vm_run(&env, r1, r2, &r0, NULL);
    out->r0 = r0;
}

static int cu_fail(cudaError_t e, const char *what)
{
    fprintf(stderr, "conformance-gpu: %s: %s\n", what, cudaGetErrorString(e));
    return -1;
}

extern "C" int mks_conf_gpu_run(const struct mks_insn *insns, uint32_t n_insns, const uint8_t *mem,
                                uint32_t mem_len, uint64_t *r0_p, int *rc_p)
{
    static struct mks_insn *d_insns;
    static uint8_t *d_mem;
    static struct gpu_result *d_out;
    struct gpu_result out;
    struct mks_vm_env env;
    cudaError_t e;
    if (!d_insns && ((e = cudaMalloc((void **)&d_insns, 8192 * sizeof(struct mks_insn))) != cudaSuccess ||
                     (e = cudaMalloc((void **)&d_mem, 65536)) != cudaSuccess ||
                     (e = cudaMalloc((void **)&d_out, sizeof(out))) != cudaSuccess))
        return cu_fail(e, "cudaMalloc");
    if (n_insns > 8192 || mem_len > 65536)
        return -1;
    if ((e = cudaMemcpy(d_insns, insns, n_insns * sizeof(*insns), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (mem_len && (e = cudaMemcpy(d_mem, mem, mem_len, cudaMemcpyHostToDevice)) != cudaSuccess))
        return cu_fail(e, "cudaMemcpy");
    memset(&env, 0, sizeof(env));
    env.insns = d_insns;
    env.n_insns = n_insns;
    env.flags = MKS_VM_F_UNWIND_HELPER;
    env.insn_limit = 10000000;
    env.extra.base = (uint64_t)(uintptr_t)d_mem;
    env.extra.len = mem_len;
    env.extra.writable = 1;
    run_case<<<1, 1>>>(env, mem_len ? (uint64_t)(uintptr_t)d_mem : 0, mem_len, d_out);
    if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
        return cu_fail(e, "kernel");
    if ((e = cudaMemcpy(&out, d_out, sizeof(out), cudaMemcpyDeviceToHost)) != cudaSuccess)
        return cu_fail(e, "cudaMemcpy");
    *r0_p = out.r0;
    *rc_p = out.rc;
    return 0;
}
