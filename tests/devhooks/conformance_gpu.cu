/*
 * The conformance cases on the GPU: each case runs in the VM compiled by
 * nvcc (mks_dev_vm_run, one thread), in its decoded form on one thread
 * (mks_dev_vm_run_decoded) and in a warp (mks_dev_vm_run_warp, the monitor
 * warp's runner: one lane running among 31 that only vote, then all 32
 * lanes running it side by side, each on its own copy of the memory), with the input memory in device memory as the run's extra
 * region.  Linked into mkscope-vm-conformance-gpu with
 * conformance.c (MKS_CONF_GPU).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "mkscope/devhook.cuh"
#include "mkscope/vm.h"

struct gpu_result {
    uint64_t r0, insns;
    int rc;
};

/* What conformance.c keeps of a run (struct conf_run there). */
struct conf_run {
    uint64_t r0, insns;
    int rc;
};

/* Each lane's copy of the case's memory in the 32-lane runner. */
#define LANE_MEM 65536u

/* runner 0: the raw VM, 1: the decoded form on one thread, 2: the decoded
 * form in a warp whose other lanes only vote (lane 0 runs), 3: all 32 lanes
 * of a warp run the case side by side, each on its own copy of the memory
 * (out[lane]). */
static __global__ void run_case(struct mks_vm_env env, struct mks_vm_env denv, int runner,
                                uint64_t r1, uint64_t r2, struct gpu_result *out)
{
    const uint32_t lane = threadIdx.x;
    uint64_t r0 = 0, insns = 0;
    int rc;
    if (runner == 3) {
        struct mks_vm_env e = denv;
        e.extra.base += (uint64_t)lane * LANE_MEM;
        rc = mks_dev_vm_run_warp(&e, 1, 1, r1 ? r1 + (uint64_t)lane * LANE_MEM : 0, r2, &r0, &insns);
        out += lane;
    } else if (runner == 2) {
        rc = mks_dev_vm_run_warp(&denv, lane == 0, 1, r1, r2, &r0, &insns);
        if (lane != 0)
            return;
    } else {
        rc = runner == 0 ? mks_dev_vm_run(&env, r1, r2, &r0, &insns)
                         : mks_dev_vm_run_decoded(&denv, r1, r2, &r0, &insns);
    }
    out->rc = rc;
    out->r0 = r0;
    out->insns = insns;
}

static int cu_fail(cudaError_t e, const char *what)
{
    fprintf(stderr, "conformance-gpu: %s: %s\n", what, cudaGetErrorString(e));
    return -1;
}

extern "C" int mks_conf_gpu_run(const struct mks_insn *insns, const struct mks_dinsn *dec,
                                uint32_t n_insns, const uint8_t *mem, uint32_t mem_len,
                                struct conf_run *res)
{
    static struct mks_insn *d_insns;
    static struct mks_dinsn *d_dec;
    static uint8_t *d_mem;
    static struct gpu_result *d_out;
    struct gpu_result out[32];
    struct mks_vm_env env, denv;
    cudaError_t e;
    if (!d_insns && ((e = cudaMalloc((void **)&d_insns, 8192 * sizeof(struct mks_insn))) != cudaSuccess ||
                     (e = cudaMalloc((void **)&d_dec, 8192 * sizeof(struct mks_dinsn))) != cudaSuccess ||
                     (e = cudaMalloc((void **)&d_mem, 32 * LANE_MEM)) != cudaSuccess ||
                     (e = cudaMalloc((void **)&d_out, sizeof(out))) != cudaSuccess))
        return cu_fail(e, "cudaMalloc");
    if (n_insns > 8192 || mem_len > LANE_MEM)
        return -1;
    if ((e = cudaMemcpy(d_insns, insns, n_insns * sizeof(*insns), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(d_dec, dec, n_insns * sizeof(*dec), cudaMemcpyHostToDevice)) != cudaSuccess)
        return cu_fail(e, "cudaMemcpy");
    memset(&env, 0, sizeof(env));
    env.insns = d_insns;
    env.n_insns = n_insns;
    env.flags = MKS_VM_F_UNWIND_HELPER;
    env.insn_limit = 10000000;
    env.extra.base = (uint64_t)(uintptr_t)d_mem;
    env.extra.len = mem_len;
    env.extra.writable = 1;
    denv = env;
    denv.insns = (const struct mks_insn *)d_dec;
    for (int runner = 0; runner < 4; runner++) {
        /* each runner (each lane) on the case's memory as given */
        for (uint32_t l = 0; l < (runner == 3 ? 32u : 1u) && mem_len; l++)
            if ((e = cudaMemcpy(d_mem + l * LANE_MEM, mem, mem_len, cudaMemcpyHostToDevice)) != cudaSuccess)
                return cu_fail(e, "cudaMemcpy");
        run_case<<<1, runner >= 2 ? 32 : 1>>>(env, denv, runner,
                                              mem_len ? (uint64_t)(uintptr_t)d_mem : 0, mem_len, d_out);
        if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
            return cu_fail(e, "kernel");
        if ((e = cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost)) != cudaSuccess)
            return cu_fail(e, "cudaMemcpy");
        /* runner 3: every lane, one result each after the three single runs */
        for (uint32_t l = 0; l < (runner == 3 ? 32u : 1u); l++) {
            struct conf_run *o = &res[runner + l];
            o->r0 = out[l].r0;
            o->insns = out[l].insns;
            o->rc = out[l].rc;
        }
    }
    return 0;
}
