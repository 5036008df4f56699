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

extern "C" __device__ void mks_dev_hook_lost(const struct mks_dev_rt *rt, uint32_t worker,
                                             uint32_t ev, uint32_t n)
{
    mksi_hook_lost((struct mks_cb *)rt->cb, worker, ev, n);
}

extern "C" __device__ void mks_dev_monitor(const struct mks_dev_rt *rt, struct mks_dev_queue *q,
                                           uint32_t worker)
{
    uint32_t tail = q->tail, seen[MKS_EV_COUNT];
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++)
        seen[e] = *(volatile uint32_t *)&q->dropped[e];
    for (;;) {
        uint32_t head = *(volatile uint32_t *)&q->head;
        if (head != tail) {
            struct mks_hook_ctx c;
            const volatile uint64_t *src;
            uint64_t *dst = (uint64_t *)&c;
            __threadfence_block(); /* the slot's contents before its head */
            src = (const volatile uint64_t *)&q->slot[tail % MKS_DEV_QSLOTS];
            for (uint32_t i = 0; i < sizeof(c) / 8; i++)
                dst[i] = src[i];
            tail++;
            *(volatile uint32_t *)&q->tail = tail; /* slot free for the worker */
            mks_dev_hook_run(rt, &c);
            continue;
        }
        {
            /* Read stop first: every drop the worker counted before stopping
             * is then visible to the sweep below. */
            int stopping = *(volatile uint32_t *)&q->stop && *(volatile uint32_t *)&q->head == tail;
            __threadfence_block();
            for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
                uint32_t d = *(volatile uint32_t *)&q->dropped[e];
                if (d != seen[e]) {
                    mks_dev_hook_lost(rt, worker, e, d - seen[e]);
                    seen[e] = d;
                }
            }
            if (stopping)
                return;
        }
        __nanosleep(64);
    }
}
