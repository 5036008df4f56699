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

extern "C" __device__ int mks_dev_vm_run(const struct mks_vm_env *env, uint64_t r1, uint64_t r2,
                                         uint64_t *r0_p, uint64_t *insns_p)
{
    if (!env || !r0_p || (env->n_maps && !env->map_ids))
        return MKS_VM_EARG;
    return mksi_vm_exec(env, r1, r2, r0_p, insns_p);
}

/* Events handled per epoch entry: bounds how long a grace period can wait
 * on a monitor that keeps finding work. */
#define MKS_DEV_MONITOR_BATCH 32u

extern "C" __device__ void mks_dev_monitor(const struct mks_dev_rt *rt, struct mks_dev_queue *q,
                                           uint32_t worker)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    uint32_t tail = q->tail, seen[MKS_EV_COUNT];
    /* The hook words and generations last read with acquire: while neither
     * moves, the programs they name (and their text, which is rewritten
     * only after a grace period and a new publication) are unchanged, so
     * no acquire, and no L1 invalidation, is needed per event. */
    uint64_t word[MKS_EV_COUNT], gen[MKS_EV_COUNT];
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
        seen[e] = *(volatile uint32_t *)&q->dropped[e];
        word[e] = 0;
        gen[e] = ~0ull;
    }
    for (;;) {
        uint32_t head = *(volatile uint32_t *)&q->head;
        if (head != tail) {
            uint64_t epoch = mksi_hook_enter(cb, worker);
            for (uint32_t n = 0; head != tail && n < MKS_DEV_MONITOR_BATCH; n++) {
                struct mks_hook_ctx c;
                const volatile uint64_t *src;
                uint64_t *dst = (uint64_t *)&c, w, g;
                uint32_t ev;
                __threadfence_block(); /* the slot's contents before its head */
                src = (const volatile uint64_t *)&q->slot[tail % MKS_DEV_QSLOTS];
                for (uint32_t i = 0; i < sizeof(c) / 8; i++)
                    dst[i] = src[i];
                tail++;
                *(volatile uint32_t *)&q->tail = tail; /* slot free for the worker */
                head = *(volatile uint32_t *)&q->head;
                ev = c.event;
                if (ev >= MKS_EV_COUNT || c.worker != worker)
                    continue;
                c.abi_version = MKS_HOOK_ABI_VERSION;
                c.size = (uint16_t)sizeof(c);
                w = *(volatile uint64_t *)&cb->hooks[ev].progs;
                g = *(volatile uint64_t *)&cb->hooks[ev].gen;
                if (w != word[ev] || g != gen[ev]) {
                    __threadfence();
                    gen[ev] = g;
                    word[ev] = w = MKS_A_LOAD_ACQ64(&cb->hooks[ev].progs);
                }
                if (w)
                    mksi_hook_exec(cb, rt->rank, &c, epoch, w);
            }
            mksi_hook_leave(cb, worker, epoch);
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
