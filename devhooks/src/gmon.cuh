/*
 * The monitor kernel of mkscope/devhook_gring.cuh: warps on SMs the
 * megakernel leaves free run the programs of events that producers put in
 * global-memory rings.  Part of vm.cu's translation unit (it shares the
 * warp coverage reduction and the hook run with the block's monitor warp).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "mkscope/devhook_gring.cuh"

/* Rings one warp serves at most: its per-ring state stays in registers. */
#define MKS_DEV_GMON_MAX_RINGS 8u

static __device__ __forceinline__ uint32_t gmon_ld_acq(const uint32_t *a)
{
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
    return v;
}

/* One batch of up to 32 published events of ring r (slot `slot`), one per
 * lane; tail is the warp's copy of the ring's tail.  word/gen: lane e's copy
 * of hook e's program word and generation (as mks_dev_monitor_warp()). */
static __device__ __noinline__ void gmon_batch(const struct mks_dev_rt *rt, struct mks_cb *cb,
                                  struct mks_dev_gring *r, uint32_t slot, uint32_t head,
                                  uint32_t *tail, uint64_t *word, uint64_t *gen, uint32_t lane)
{
    struct mks_hook_ctx c;
    struct mks_cb_cov cov = {0, 0, 0, 0};
    uint64_t epoch = 0, w_lane, w;
    uint32_t ev = MKS_EV_COUNT, bank, n = head - *tail < 32u ? head - *tail : 32u;
    if (lane == 0)
        epoch = mksi_hook_enter(cb, slot);
    epoch = __shfl_sync(MKS_DEV_FULL, epoch, 0);
    bank = (uint32_t)(epoch & 1u);
    if (lane < MKS_EV_COUNT) {
        uint64_t hw = *(volatile uint64_t *)&cb->hooks[lane].progs;
        uint64_t hg = *(volatile uint64_t *)&cb->hooks[lane].gen;
        if (hw != *word || hg != *gen) {
            __threadfence();
            *gen = hg;
            *word = MKS_A_LOAD_ACQ64(&cb->hooks[lane].progs);
        }
    }
    if (lane < n) {
        /* After lane 0's acquire of head (the caller's __syncwarp): the
         * slot's stores are visible; read them from the L2. */
        const uint4 *src = (const uint4 *)&r->slot[(*tail + lane) % MKS_DEV_GRING_SLOTS];
        uint4 *dst = (uint4 *)&c;
        for (uint32_t i = 0; i < sizeof(c) / sizeof(uint4); i++)
            dst[i] = __ldcg(src + i);
        ev = c.event;
        /* One runner per slot: only events of the ring's own slot run */
        if (ev >= MKS_EV_COUNT || c.worker != slot)
            ev = MKS_EV_COUNT;
    }
    __syncwarp();
    *tail += n;
    if (lane == 0)
        mks_dev_gring_st(&r->tail, *tail); /* the slots are free again */
    w_lane = __shfl_sync(MKS_DEV_FULL, *word, ev < MKS_EV_COUNT ? ev : 0);
    w = ev < MKS_EV_COUNT ? w_lane : 0;
    if (w) {
        c.abi_version = MKS_HOOK_ABI_VERSION;
        c.size = (uint16_t)sizeof(c);
    }
    dev_warp_hook_exec(cb, rt->rank, &c, epoch, w, &cov);
    __syncwarp();
    dev_warp_cov(cb, bank, slot, w ? ev : MKS_EV_COUNT, &cov, lane);
    if (lane == 0) {
        __threadfence(); /* every lane's map writes before the leave */
        mksi_hook_leave(cb, slot, epoch);
    }
}

extern "C" __device__ void mks_dev_gmonitor_warp(const struct mks_dev_rt *rt,
                                                 struct mks_dev_gring *rings, uint32_t n_rings,
                                                 uint32_t first, uint32_t step)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t tail[MKS_DEV_GMON_MAX_RINGS], waits[MKS_DEV_GMON_MAX_RINGS];
    uint32_t seen[MKS_DEV_GMON_MAX_RINGS], done = 0, mine = 0, nap = 64;
    uint64_t word = 0, gen = ~0ull;
    if (step == 0)
        return;
    for (uint32_t k = 0; k < MKS_DEV_GMON_MAX_RINGS; k++) {
        uint32_t i = first + k * step;
        tail[k] = waits[k] = seen[k] = 0;
        if (i >= n_rings)
            continue;
        mine |= 1u << k;
        tail[k] = *(volatile uint32_t *)&rings[i].tail;
        /* lane e keeps event e's lost count already reported */
        if (lane < MKS_EV_COUNT)
            seen[k] = *(volatile uint32_t *)&rings[i].lost[lane];
    }
    while (done != mine) {
        int busy = 0;
        for (uint32_t k = 0; k < MKS_DEV_GMON_MAX_RINGS; k++) {
            struct mks_dev_gring *r = &rings[first + k * step];
            uint32_t head = 0, wt = 0, stop = 0, slot;
            if (!((mine & ~done) >> k & 1u))
                continue;
            if (lane == 0) {
                /* stop, then head and waits: once stop is seen, every event
                 * and loss the producer counted before it is too */
                stop = gmon_ld_acq(&r->stop);
                head = gmon_ld_acq(&r->head);
                wt = *(volatile uint32_t *)&r->waits;
            }
            head = __shfl_sync(MKS_DEV_FULL, head, 0);
            wt = __shfl_sync(MKS_DEV_FULL, wt, 0);
            stop = __shfl_sync(MKS_DEV_FULL, stop, 0);
            slot = *(volatile uint32_t *)&r->slot_id;
            __syncwarp(); /* lane 0's acquires before every lane's loads */
            if (wt != waits[k] || (stop && head == tail[k])) {
                uint32_t d = lane < MKS_EV_COUNT ? *(volatile uint32_t *)&r->lost[lane] : seen[k];
                for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
                    uint32_t lost = __shfl_sync(MKS_DEV_FULL, d - seen[k], e);
                    if (lane == 0 && lost)
                        mks_dev_hook_lost(rt, slot, e, lost);
                }
                seen[k] = d;
                waits[k] = wt;
            }
            if (head != tail[k]) {
                gmon_batch(rt, cb, r, slot, head, &tail[k], &word, &gen, lane);
                busy = 1;
            } else if (stop) {
                done |= 1u << k;
            }
        }
        if (busy) {
            nap = 64;
            continue;
        }
        /* Idle: back off up to ~2 us; a warp with nothing to do costs its
         * SM little, and an event waits at most that long. */
        __nanosleep(nap);
        nap = nap < 2048u ? 2 * nap : 2048u;
    }
}

/* Warp g of the grid serves rings g, g + G, g + 2G, ... (G warps in all). */
__global__ void mks_dev_gmonitor_kernel(struct mks_dev_rt rt, struct mks_dev_gring *rings,
                                        uint32_t n_rings)
{
    const uint32_t warps = gridDim.x * (blockDim.x / 32u);
    const uint32_t g = blockIdx.x * (blockDim.x / 32u) + threadIdx.x / 32u;
    mks_dev_gmonitor_warp(&rt, rings, n_rings, g, warps);
}

/* ---- host ---- */

extern "C" int mks_rt_cuda_grings_create(uint32_t n_rings, const uint32_t *slot_ids,
                                         struct mks_dev_gring **rings_p)
{
    struct mks_dev_gring *d = NULL;
    uint32_t *ids;
    cudaError_t e;
    if (!rings_p || n_rings == 0)
        return -EINVAL;
    ids = (uint32_t *)malloc(n_rings * sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    for (uint32_t i = 0; i < n_rings; i++)
        ids[i] = slot_ids ? slot_ids[i] : i;
    if ((e = cudaMalloc(&d, (size_t)n_rings * sizeof(*d))) != cudaSuccess ||
        (e = cudaMemset(d, 0, (size_t)n_rings * sizeof(*d))) != cudaSuccess ||
        (e = cudaMemcpy2D(&d->slot_id, sizeof(*d), ids, sizeof(*ids), sizeof(*ids), n_rings,
                          cudaMemcpyHostToDevice)) != cudaSuccess) {
        fprintf(stderr, "mkscope: device rings (%u of %zu bytes): %s\n", n_rings, sizeof(*d),
                cudaGetErrorString(e));
        if (d)
            cudaFree(d);
        free(ids);
        return e == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV;
    }
    free(ids);
    *rings_p = d;
    return 0;
}

extern "C" int mks_rt_cuda_gmonitor_launch(const struct mks_dev_rt *dev,
                                           struct mks_dev_gring *rings, uint32_t n_rings,
                                           uint32_t n_blocks, uint32_t warps_per_block,
                                           void *stream)
{
    cudaError_t e;
    if (!dev || !dev->cb || !rings || !n_rings || !n_blocks || !warps_per_block ||
        warps_per_block > 32) {
        fprintf(stderr, "mkscope: monitor kernel: bad arguments\n");
        return -EINVAL;
    }
    /* A block the device cannot start (the VM's registers: after the
     * device link the kernel may need up to 255 a thread) fails its launch:
     * fewer warps a block, and more blocks where those left cannot serve
     * every ring. */
    struct cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, mks_dev_gmonitor_kernel) == cudaSuccess &&
        fa.maxThreadsPerBlock >= 32 && warps_per_block * 32u > (uint32_t)fa.maxThreadsPerBlock) {
        uint32_t cap = (uint32_t)fa.maxThreadsPerBlock / 32u, w = warps_per_block;
        warps_per_block = cap;
        while ((uint64_t)n_blocks * warps_per_block * MKS_DEV_GMON_MAX_RINGS < n_rings)
            n_blocks++;
        fprintf(stderr,
                "mkscope: monitor kernel: %d registers a thread allow %u warps a block, not %u: "
                "%u blocks of %u warps\n",
                fa.numRegs, cap, w, n_blocks, warps_per_block);
    }
    if ((uint64_t)n_blocks * warps_per_block * MKS_DEV_GMON_MAX_RINGS < n_rings) {
        fprintf(stderr,
                "mkscope: monitor kernel: %u warps serve at most %u rings each, not %u rings; "
                "launch more warps\n",
                n_blocks * warps_per_block, MKS_DEV_GMON_MAX_RINGS, n_rings);
        return -EINVAL;
    }
    mks_dev_gmonitor_kernel<<<n_blocks, warps_per_block * 32u, 0, (cudaStream_t)stream>>>(
        *dev, rings, n_rings);
    if ((e = cudaGetLastError()) != cudaSuccess) {
        fprintf(stderr, "mkscope: monitor kernel launch: %s\n", cudaGetErrorString(e));
        return -ENODEV;
    }
    return 0;
}

extern "C" int mks_rt_cuda_grings_stop(struct mks_dev_gring *rings, uint32_t n_rings,
                                       void *stream)
{
    static const uint32_t one = 1;
    cudaError_t e = cudaSuccess;
    if (!rings || !n_rings)
        return -EINVAL;
    for (uint32_t i = 0; i < n_rings && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(&rings[i].stop, &one, sizeof(one), cudaMemcpyHostToDevice,
                            (cudaStream_t)stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "mkscope: stopping device rings: %s\n", cudaGetErrorString(e));
        return -ENODEV;
    }
    return 0;
}
