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

/* ---- inline runs through the worker's cache ---- */

MKS_STATIC_ASSERT(sizeof(((struct mks_dev_hcache *)0)->cov[0]) == sizeof(struct mks_cb_cov),
                  "the cache's coverage counters are a struct mks_cb_cov each");

/* Enter the current epoch and read every hook's program list.  The
 * sequence word carries the entry count in its top 16 bits, so the pump
 * tells a worker that left and came back into the same epoch from one that
 * never left (rt_cuda.cu masks them off when it compares epochs). */
static __device__ void dev_hc_enter(struct mks_cb *cb, struct mks_dev_hcache *hc, uint32_t w)
{
    struct mks_cb_worker *wk = &mks_cb_workers(cb)[w];
    uint64_t epoch, tag;
    hc->entries++;
    tag = (uint64_t)(hc->entries & 0xffffu) << 48;
    for (;;) {
        epoch = MKS_A_LOAD64(&cb->epoch);
        MKS_A_STORE64(&wk->seq, tag | (epoch << 1) | 1u);
        MKS_FENCE();
        if (MKS_A_LOAD64(&cb->epoch) == epoch)
            break;
    }
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++)
        hc->word[e] = MKS_A_LOAD64(&cb->hooks[e].progs);
    /* Acquire for all of them at once: the programs, tables and maps the
     * words name were published before them; later plain loads see them. */
    MKS_FENCE();
    hc->epoch = epoch;
    hc->worker = w;
    hc->inside = 1;
}

/* Add the cache's coverage to the block's counters of the bank, then leave
 * (release: the counters and the programs' map writes before the word the
 * pump's grace period waits on). */
static __device__ void dev_hc_leave(struct mks_cb *cb, struct mks_dev_hcache *hc)
{
    uint32_t bank = (uint32_t)(hc->epoch & 1u);
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
        uint64_t *c = hc->cov[e];
        if (!(c[0] | c[1] | c[2] | c[3]))
            continue;
        volatile uint64_t *g = (volatile uint64_t *)mks_cb_cov(cb, bank, hc->worker, e);
        for (uint32_t i = 0; i < 4; i++) {
            g[i] = g[i] + c[i];
            c[i] = 0;
        }
    }
    mksi_hook_leave(cb, hc->worker, hc->epoch);
    hc->inside = 0;
}

/* Inside the current epoch as hook slot `slot`, leaving another slot's
 * first. */
static __device__ __forceinline__ void dev_hc_sync(struct mks_cb *cb, struct mks_dev_hcache *hc,
                                                   uint32_t slot)
{
    if (MKS_UNLIKELY(!hc->inside || hc->worker != slot)) {
        if (hc->inside)
            dev_hc_leave(cb, hc);
        dev_hc_enter(cb, hc, slot);
    }
}

extern "C" __device__ int32_t mks_dev_hook_run_as(const struct mks_dev_rt *rt,
                                                  struct mks_dev_hcache *hc, uint32_t slot,
                                                  struct mks_hook_ctx *ctx)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    uint32_t ev = ctx->event;
    uint64_t word;
    ctx->abi_version = MKS_HOOK_ABI_VERSION;
    ctx->size = (uint16_t)sizeof(*ctx);
    /* ctx->worker indexes per-worker maps and sampling counters */
    if (ev >= MKS_EV_COUNT || slot >= cb->n_workers || ctx->worker >= cb->n_workers)
        return 0;
    dev_hc_sync(cb, hc, slot);
    word = hc->word[ev];
    if (!word)
        return 0;
    return mksi_hook_exec_cov(cb, rt->rank, ctx, hc->epoch, word,
                              (struct mks_cb_cov *)hc->cov[ev]);
}

extern "C" __device__ int32_t mks_dev_hook_run_cached(const struct mks_dev_rt *rt,
                                                      struct mks_dev_hcache *hc,
                                                      struct mks_hook_ctx *ctx)
{
    return mks_dev_hook_run_as(rt, hc, ctx->worker, ctx);
}

extern "C" __device__ int mks_dev_hook_wants_hint(const struct mks_dev_rt *rt,
                                                  struct mks_dev_hcache *hc, uint32_t slot,
                                                  uint32_t ev)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    uint64_t word;
    if (ev >= MKS_EV_COUNT || slot >= cb->n_workers)
        return 0;
    /* The program table was published before the hook words the entry
     * read (acquire), so plain loads of it see what the word names. */
    dev_hc_sync(cb, hc, slot);
    word = hc->word[ev];
    for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
        uint32_t s = mks_cb_word_slot(word, i);
        if (s && cb->progs[s - 1].type == MKS_PROG_CONTROL)
            return 1;
    }
    return 0;
}

extern "C" __device__ uint32_t mks_dev_worker_changed(const struct mks_dev_rt *rt,
                                                      struct mks_dev_hcache *hc)
{
    if (hc && hc->inside)
        dev_hc_leave((struct mks_cb *)rt->cb, hc);
    return *(const volatile uint32_t *)rt->mask;
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

/* ---- the monitor warp: one queued event per lane ---- */

#define MKS_DEV_FULL 0xffffffffu

/* Add the lanes' coverage into the block's counters of (bank, worker), one
 * event kind at a time (a batch mostly holds one or two kinds); lane 0
 * writes, the monitor warp being the only writer of this worker's
 * counters. */
static __device__ void dev_warp_cov(struct mks_cb *cb, uint32_t bank, uint32_t worker,
                                    uint32_t ev, const struct mks_cb_cov *cov, uint32_t lane)
{
    uint32_t todo = __ballot_sync(MKS_DEV_FULL, ev < MKS_EV_COUNT && cov->eligible);
    while (todo) {
        uint32_t e = __shfl_sync(MKS_DEV_FULL, ev, __ffs(todo) - 1);
        int mine = ev == e && cov->eligible;
        uint32_t el = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->eligible : 0u);
        uint32_t ran = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->ran : 0u);
        uint32_t thr = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->throttled : 0u);
        uint32_t lost = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->lost : 0u);
        if (lane == 0) {
            volatile uint64_t *g = (volatile uint64_t *)mks_cb_cov(cb, bank, worker, e);
            g[0] = g[0] + el;
            g[1] = g[1] + ran;
            g[2] = g[2] + thr;
            g[3] = g[3] + lost;
        }
        todo &= ~__ballot_sync(MKS_DEV_FULL, mine);
    }
}

extern "C" __device__ void mks_dev_monitor_warp(const struct mks_dev_rt *rt,
                                                struct mks_dev_ring *r, uint32_t worker)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t tail = *(volatile uint32_t *)&r->tail, seen = 0, waits = 0, nap = 64;
    /* Lane e (< MKS_EV_COUNT) keeps event e's lost count already reported
     * and the hook word and generation last read with acquire (see
     * mks_dev_monitor()): registers, not an indexed local array. */
    uint64_t word = 0, gen = ~0ull;
    if (lane < MKS_EV_COUNT)
        seen = *(volatile uint32_t *)&r->lost[lane];
    for (;;) {
        uint32_t head = 0, wt = 0, n;
        int stopping = 0;
        if (lane == 0) {
            /* stop, then head and the wait count: once stop is seen, every
             * push and every loss the worker counted before it is too. */
            uint32_t a = (uint32_t)__cvta_generic_to_shared(&r->head);
            stopping = *(volatile uint32_t *)&r->stop != 0;
            asm volatile("ld.acquire.cta.shared.u32 %0, [%1];" : "=r"(head) : "r"(a) : "memory");
            wt = *(volatile uint32_t *)&r->waits;
        }
        head = __shfl_sync(MKS_DEV_FULL, head, 0);
        wt = __shfl_sync(MKS_DEV_FULL, wt, 0);
        stopping = __shfl_sync(MKS_DEV_FULL, stopping, 0) && head == tail;
        /* Losses follow a wait: sweep them when the worker's wait count
         * moved (also while the ring stays busy) and before returning. */
        if (stopping || wt != waits) {
            uint32_t d;
            __syncwarp(); /* lane 0's acquire before every lane's loads */
            d = lane < MKS_EV_COUNT ? *(volatile uint32_t *)&r->lost[lane] : seen;
            /* Lane 0 reports them all: one party enters the worker's epoch
             * at a time. */
            for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
                uint32_t k = __shfl_sync(MKS_DEV_FULL, d - seen, e);
                if (lane == 0 && k)
                    mks_dev_hook_lost(rt, worker, e, k);
            }
            seen = d;
            waits = wt;
        }
        if (head != tail) {
            struct mks_hook_ctx c;
            struct mks_cb_cov cov = {0, 0, 0, 0};
            uint64_t epoch = 0, w_lane, w;
            uint32_t ev = MKS_EV_COUNT, bank;
            n = head - tail < 32u ? head - tail : 32u;
            nap = 64;
            if (lane == 0)
                epoch = mksi_hook_enter(cb, worker);
            epoch = __shfl_sync(MKS_DEV_FULL, epoch, 0);
            bank = (uint32_t)(epoch & 1u);
            /* The hook words: lane e re-reads event e's with acquire only
             * when its word or generation moved. */
            if (lane < MKS_EV_COUNT) {
                uint64_t hw = *(volatile uint64_t *)&cb->hooks[lane].progs;
                uint64_t hg = *(volatile uint64_t *)&cb->hooks[lane].gen;
                if (hw != word || hg != gen) {
                    __threadfence();
                    gen = hg;
                    word = MKS_A_LOAD_ACQ64(&cb->hooks[lane].progs);
                }
            }
            __syncwarp(); /* lane 0's acquire of head before every lane's slot loads */
            if (lane < n) {
                const uint4 *src = (const uint4 *)&r->slot[(tail + lane) % MKS_DEV_RING_SLOTS];
                uint4 *dst = (uint4 *)&c;
                for (uint32_t i = 0; i < sizeof(c) / sizeof(uint4); i++)
                    dst[i] = src[i];
                ev = c.event;
                if (ev >= MKS_EV_COUNT || c.worker != worker)
                    ev = MKS_EV_COUNT;
            }
            __syncwarp();
            tail += n;
            if (lane == 0)
                *(volatile uint32_t *)&r->tail = tail; /* the slots are free again */
            w_lane = __shfl_sync(MKS_DEV_FULL, word, ev < MKS_EV_COUNT ? ev : 0);
            w = ev < MKS_EV_COUNT ? w_lane : 0;
            if (w) {
                c.abi_version = MKS_HOOK_ABI_VERSION;
                c.size = (uint16_t)sizeof(c);
                mksi_hook_exec_cov(cb, rt->rank, &c, epoch, w, &cov);
            }
            __syncwarp();
            dev_warp_cov(cb, bank, worker, w ? ev : MKS_EV_COUNT, &cov, lane);
            if (lane == 0) {
                __threadfence(); /* every lane's map writes before the leave */
                mksi_hook_leave(cb, worker, epoch);
            }
            continue;
        }
        if (stopping)
            return;
        /* Idle: back off up to ~2 us, so a warp with nothing to do takes
         * few issue slots and shared-memory cycles from the worker. */
        __nanosleep(nap);
        nap = nap < 2048u ? 2 * nap : 2048u;
    }
}
