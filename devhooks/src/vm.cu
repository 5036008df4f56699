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

#define MKS_DEV_FULL 0xffffffffu

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
    /* Which lists hold a CONTROL program, once per entry: the scheduler
     * asks at every dispatch (mks_dev_hook_wants_hint), and the program
     * table's loads were on its serial path each time. */
    {
        uint32_t ctl = 0;
        for (uint32_t e = 0; e < MKS_EV_COUNT; e++)
            for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
                uint32_t s = mks_cb_word_slot(hc->word[e], i);
                if (s && s <= MKS_CB_MAX_PROGS && cb->progs[s - 1].type == MKS_PROG_CONTROL)
                    ctl |= 1u << e;
            }
        hc->ctl = ctl;
    }
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
    if (ev >= MKS_EV_COUNT || slot >= cb->n_workers)
        return 0;
    /* what the entry found in the words it read */
    dev_hc_sync(cb, hc, slot);
    return (int)((hc->ctl >> ev) & 1u);
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

extern "C" __device__ int mks_dev_vm_run_decoded(const struct mks_vm_env *env, uint64_t r1,
                                                 uint64_t r2, uint64_t *r0_p, uint64_t *insns_p)
{
    if (!env || !r0_p || (env->n_maps && !env->map_ids))
        return MKS_VM_EARG;
    return mksi_vmd_exec(env, r1, r2, r0_p, insns_p);
}

extern "C" __device__ int mks_dev_vm_run_warp(const struct mks_vm_env *env, int run, uint32_t key,
                                              uint64_t r1, uint64_t r2, uint64_t *r0_p,
                                              uint64_t *insns_p)
{
    /* a lane refused still takes part in every vote of the others' runs */
    const int bad = run && (!env || !r0_p || (env->n_maps && !env->map_ids));
    const int rc = mksi_vmd_exec_warp(env, run && !bad, key, r1, r2, r0_p, insns_p);
    return bad ? MKS_VM_EARG : rc;
}

/* mksi_hook_exec_cov for one event per lane, the whole warp calling (word 0:
 * no event on this lane): the i-th program of every lane's list runs side by
 * side in mksi_vmd_exec_warp, lanes of the same program in step.  The hint
 * of a CONTROL program is not wanted here (observe-only runners). */
static __device__ void dev_warp_hook_exec(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx,
                                          uint64_t epoch, uint64_t word, struct mks_cb_cov *cov)
{
    struct mks_maps maps;
    uint64_t used_total = 0;
    uint32_t lost = 0;
    const int go = word && mksi_hook_admit(cb, ctx, epoch, word, cov);
    if (go)
        mksi_hook_maps(cb, rank, ctx, epoch, &maps);
    for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
        const uint32_t s = go ? mks_cb_word_slot(word, i) : 0u;
        struct mks_vm_env env;
        uint64_t r0 = 0, used = 0;
        int run = 0, rc;
        if (!__any_sync(MKS_DEV_FULL, s != 0))
            continue;
        if (s) {
            run = mksi_hook_env(cb, s, ctx, &maps, &env) == 0;
            lost |= !run;
        }
        rc = mksi_vmd_exec_warp(&env, run, s, (uint64_t)(uintptr_t)ctx, 0, &r0, &used);
        if (run) {
            used_total += used;
            lost |= rc != 0;
        }
    }
    if (go)
        mksi_hook_done(cb, ctx->event, epoch, used_total, lost, &maps, cov);
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

/* ---- the monitor warp: records back into events, one event per lane ---- */

/* The lanes' coverage of a batch, summed per event kind with warp
 * reductions into the counters lane e keeps for kind e while the warp stays
 * inside the epoch (a batch mostly holds one or two kinds). */
static __device__ void dev_warp_cov_acc(uint32_t ev, const struct mks_cb_cov *cov, uint32_t lane,
                                        struct mks_cb_cov *mine_p)
{
    uint32_t todo = __ballot_sync(MKS_DEV_FULL, ev < MKS_EV_COUNT && cov->eligible);
    while (todo) {
        uint32_t e = __shfl_sync(MKS_DEV_FULL, ev, __ffs(todo) - 1);
        int mine = ev == e && cov->eligible;
        uint32_t el = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->eligible : 0u);
        uint32_t ran = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->ran : 0u);
        uint32_t thr = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->throttled : 0u);
        uint32_t lost = __reduce_add_sync(MKS_DEV_FULL, mine ? (uint32_t)cov->lost : 0u);
        if (lane == e) {
            mine_p->eligible += el;
            mine_p->ran += ran;
            mine_p->throttled += thr;
            mine_p->lost += lost;
        }
        todo &= ~__ballot_sync(MKS_DEV_FULL, mine);
    }
}

/* Lane e's counters into the block's counters of (bank, worker, e), then
 * zero; the monitor warp is the only writer of this worker's counters. */
static __device__ void dev_warp_cov_flush(struct mks_cb *cb, uint32_t bank, uint32_t worker,
                                          uint32_t lane, struct mks_cb_cov *c)
{
    if (lane < MKS_EV_COUNT && (c->eligible | c->ran | c->throttled | c->lost)) {
        volatile uint64_t *g = (volatile uint64_t *)mks_cb_cov(cb, bank, worker, lane);
        g[0] = g[0] + c->eligible;
        g[1] = g[1] + c->ran;
        g[2] = g[2] + c->throttled;
        g[3] = g[3] + c->lost;
    }
    c->eligible = c->ran = c->throttled = c->lost = 0;
}

/* The lanes' coverage of one batch straight into the block's counters of
 * (bank, worker): for a warp that enters and leaves the epoch around every
 * batch (gmon.cuh). */
static __device__ void dev_warp_cov(struct mks_cb *cb, uint32_t bank, uint32_t worker,
                                    uint32_t ev, const struct mks_cb_cov *cov, uint32_t lane)
{
    struct mks_cb_cov mine = {0, 0, 0, 0};
    dev_warp_cov_acc(ev, cov, lane, &mine);
    dev_warp_cov_flush(cb, bank, worker, lane, &mine);
}

/* The events a record holds, in order, as up to three 4-bit event kinds
 * (packed low first); returns how many. */
static __device__ __forceinline__ uint32_t dev_rec_events(uint32_t w0, uint32_t *packed)
{
    const uint32_t kind = w0 & 0xffu, b = (w0 >> 8) & 0xffu;
    uint32_t n = 0, p = 0;
    if (kind < MKS_EV_COUNT) {
        p = kind;
        n = 1;
    } else if (kind == MKS_DEV_REC_TASK) {
        if (b & MKS_DEV_REC_ASSIGN) {
            p = MKS_EV_TASK_ASSIGN;
            n = 1;
        }
    } else if (kind == MKS_DEV_REC_DONE) {
        if (b & MKS_DEV_DONE_START)
            p |= (uint32_t)MKS_EV_TASK_START << (4 * n++);
        if (b & MKS_DEV_DONE_END)
            p |= (uint32_t)MKS_EV_TASK_END << (4 * n++);
        if (b & MKS_DEV_DONE_RELEASE)
            p |= (uint32_t)MKS_EV_DEP_RELEASE << (4 * n++);
    }
    *packed = p;
    return n;
}

/* The per-worker maps (MKS_MAP_PERWORKER_ARRAY) the programs of hook word
 * `word` use, as a bit per map id below 64 (others share bit 63). */
static __device__ uint64_t dev_word_pw_maps(struct mks_cb *cb, uint64_t word)
{
    uint64_t m = 0;
    for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
        uint32_t s = mks_cb_word_slot(word, i);
        if (!s || s > MKS_CB_MAX_PROGS)
            continue;
        const struct mks_cb_prog *p = &cb->progs[s - 1];
        for (uint32_t j = 0; j < p->n_maps && j < MKS_MAX_PROG_MAPS; j++) {
            uint32_t id = p->map_ids[j];
            if (id < MKS_MAX_MAPS && cb->maps[id].type == MKS_MAP_PERWORKER_ARRAY)
                m |= 1ull << (id < 63 ? id : 63);
        }
    }
    return m;
}

static __device__ __forceinline__ uint64_t dev_u64(uint32_t lo, uint32_t hi)
{
    return (uint64_t)hi << 32 | lo;
}

/* LANES: each lane runs its programs alone (mks_dev_monitor_warp_lanes),
 * else the lanes run them in step (dev_warp_hook_exec). */
template <int LANES>
static __device__ __forceinline__ void dev_monitor_warp(const struct mks_dev_rt *rt,
                                                        struct mks_dev_ring *r, uint32_t worker)
{
    struct mks_cb *cb = (struct mks_cb *)rt->cb;
    const uint32_t lane = threadIdx.x & 31u;
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    uint32_t tail = *(volatile uint32_t *)&r->tail, skip = 0, seen = 0, waits = 0, nap = 64;
    /* Lane e (< MKS_EV_COUNT) keeps event e's lost count already reported,
     * its hook word, read with acquire at each entry into the epoch (the
     * pump bumps its change word after every change of hooks, so while the
     * warp stays inside, the programs the words name are unchanged: no
     * acquire and no L1 invalidation per batch), the event kinds whose
     * programs share a per-worker map with its own, and its coverage since
     * the entry: registers, not an indexed local array. */
    uint64_t word = 0, pw = 0, epoch = 0;
    uint32_t conf = 0, inside = 0, at_gen = 0;
    struct mks_cb_cov mine = {0, 0, 0, 0}; /* lane e: kind e's coverage since the entry */
    if (lane < MKS_EV_COUNT)
        seen = *(volatile uint32_t *)&r->lost[lane];
    for (;;) {
        uint32_t head = 0, wt = 0, g = 0;
        int stopping = 0;
        if (lane == 0) {
            /* the pump's change word first (its latency behind the rest),
             * then stop, head and the wait count: once stop is seen, every
             * record and every loss the worker counted before it is too. */
            uint32_t a = (uint32_t)__cvta_generic_to_shared(&r->head);
            g = rt->gen ? mks_dev_ld_gpu(rt->gen) : 0u;
            stopping = *(volatile uint32_t *)&r->stop != 0;
            asm volatile("ld.acquire.cta.shared.u32 %0, [%1];" : "=r"(head) : "r"(a) : "memory");
            wt = *(volatile uint32_t *)&r->waits;
        }
        head = __shfl_sync(MKS_DEV_FULL, head, 0);
        wt = __shfl_sync(MKS_DEV_FULL, wt, 0);
        g = __shfl_sync(MKS_DEV_FULL, g, 0);
        stopping = __shfl_sync(MKS_DEV_FULL, stopping, 0) && head == tail;
        /* Stay inside the epoch while there is work and the pump's word is
         * still: one entry, one read of the hook words and one write of the
         * coverage for many batches.  Leave when idle, when the word moved
         * (a flip's grace period waits for it: a batch at most) or to
         * return. */
        if (inside && (head == tail || g != at_gen)) {
            dev_warp_cov_flush(cb, (uint32_t)(epoch & 1u), worker, lane, &mine);
            __syncwarp();
            if (lane == 0) {
                __threadfence(); /* every lane's map and counter writes before the leave */
                mksi_hook_leave(cb, worker, epoch);
            }
            inside = 0;
        }
        /* Losses follow a wait: sweep them when the worker's wait count
         * moved (also while the ring stays busy) and before returning. */
        if (stopping || wt != waits) {
            uint32_t d;
            __syncwarp(); /* lane 0's acquire before every lane's loads */
            d = lane < MKS_EV_COUNT ? *(volatile uint32_t *)&r->lost[lane] : seen;
            if (inside) {
                if (lane < MKS_EV_COUNT) {
                    mine.eligible += d - seen;
                    mine.lost += d - seen;
                }
            } else {
                /* Lane 0 reports them all: one party enters the worker's
                 * epoch at a time. */
                for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
                    uint32_t k = __shfl_sync(MKS_DEV_FULL, d - seen, e);
                    if (lane == 0 && k)
                        mks_dev_hook_lost(rt, worker, e, k);
                }
            }
            seen = d;
            waits = wt;
        }
        if (head == tail) {
            if (stopping)
                return;
            /* Idle: back off up to ~2 us, so a warp with nothing to do takes
             * few issue slots and shared-memory cycles from the worker; and
             * while nothing is attached at all (no record can come but the
             * worker's last), to ~32 us. */
            __nanosleep(nap);
            if (nap < 2048u)
                nap *= 2;
            else
                nap = *(const volatile uint32_t *)rt->mask ? 2048u : 32768u;
            continue;
        }
        nap = 64;
        if (!inside) {
            if (lane == 0)
                epoch = mksi_hook_enter(cb, worker);
            epoch = __shfl_sync(MKS_DEV_FULL, epoch, 0);
            at_gen = g;
            inside = 1;
            /* The hook words, with acquire (the programs, tables and maps
             * they name were published before them), and what conflicts
             * with what. */
            if (lane < MKS_EV_COUNT) {
                word = MKS_A_LOAD_ACQ64(&cb->hooks[lane].progs);
                pw = dev_word_pw_maps(cb, word);
            }
            conf = 0;
            for (uint32_t f = 0; f < MKS_EV_COUNT; f++) {
                uint64_t pf = __shfl_sync(MKS_DEV_FULL, pw, f);
                if (lane < MKS_EV_COUNT && (pw & pf))
                    conf |= 1u << f;
            }
        }
        const uint32_t att =
            __ballot_sync(MKS_DEV_FULL, lane < MKS_EV_COUNT && word != 0) & ((1u << MKS_EV_COUNT) - 1u);
        __syncwarp(); /* lane 0's acquire of head before every lane's slot loads */

        /* Slot lanes: lane l looks at record tail + l and counts its
         * attached events (the first record without the `skip` already run). */
        const uint32_t n = head - tail < 32u ? head - tail : 32u;
        uint32_t w0 = 0, packed = 0, nraw = 0, cnt = 0;
        if (lane < n) {
            w0 = r->slot[(tail + lane) % MKS_DEV_RING_SLOTS].c[0].x;
            nraw = dev_rec_events(w0, &packed);
            for (uint32_t i = lane == 0 ? skip : 0u; i < nraw; i++)
                cnt += (att >> ((packed >> (4 * i)) & 0xfu)) & 1u;
        }
        uint32_t incl = cnt; /* inclusive prefix sum of the counts */
        for (uint32_t d = 1; d < 32; d <<= 1) {
            uint32_t v = __shfl_up_sync(MKS_DEV_FULL, incl, d);
            if (lane >= d)
                incl += v;
        }
        const uint32_t total = __shfl_sync(MKS_DEV_FULL, incl, 31);
        const uint32_t first = incl - cnt;
        /* Event lanes: lane e takes the event e of the batch. */
        const uint32_t with = __ballot_sync(MKS_DEV_FULL, cnt != 0);
        uint32_t E = total < 32u ? total : 32u;
        uint32_t rec = 0, ev = MKS_EV_COUNT, raw = 0;
        {
            /* the last record with events whose first event is <= e */
            for (uint32_t l = 0; l < n; l++) {
                uint32_t fl = __shfl_sync(MKS_DEV_FULL, first, l);
                if (((with >> l) & 1u) && fl <= lane)
                    rec = l;
            }
            const uint32_t rw0 = __shfl_sync(MKS_DEV_FULL, w0, rec);
            const uint32_t rfirst = __shfl_sync(MKS_DEV_FULL, first, rec);
            if (lane < E) {
                uint32_t rp, rn = dev_rec_events(rw0, &rp), sub = lane - rfirst, i;
                for (i = rec == 0 ? skip : 0u; i < rn; i++) {
                    uint32_t k4 = (rp >> (4 * i)) & 0xfu;
                    if ((att >> k4) & 1u) {
                        if (sub == 0) {
                            ev = k4;
                            break;
                        }
                        sub--;
                    }
                }
                raw = i;
            }
        }
        /* Order: an event whose programs share a per-worker map with an
         * earlier event of the batch waits for the next batch. */
        {
            uint32_t pre = lane < E ? 1u << ev : 0u;
            for (uint32_t d = 1; d < 32; d <<= 1) {
                uint32_t v = __shfl_up_sync(MKS_DEV_FULL, pre, d);
                if (lane >= d)
                    pre |= v;
            }
            uint32_t before = __shfl_up_sync(MKS_DEV_FULL, pre, 1); /* the kinds of lanes < e */
            const uint32_t cf = __shfl_sync(MKS_DEV_FULL, conf, ev < MKS_EV_COUNT ? ev : 0);
            const uint32_t clash = __ballot_sync(MKS_DEV_FULL, lane < E && lane > 0 && (before & cf));
            if (clash)
                E = __ffs(clash) - 1;
        }
        if (lane >= E)
            ev = MKS_EV_COUNT;
        /* Records fully run: those whose events all lie below E (a prefix). */
        const uint32_t done = __popc(__ballot_sync(MKS_DEV_FULL, lane < n && incl <= E));
        const uint32_t tasks = __ballot_sync(MKS_DEV_FULL, lane < n && (w0 & 0xffu) == MKS_DEV_REC_TASK);
        if (ev < MKS_EV_COUNT) {
            /* The event's context, from its record and its task's. */
            const struct mks_dev_rec *sr = &r->slot[(tail + rec) % MKS_DEV_RING_SLOTS];
            const uint32_t tm = tasks & (rec >= 31 ? MKS_DEV_FULL : (2u << rec) - 1u);
            const uint4 *id = tm ? r->slot[(tail + 31 - __clz(tm)) % MKS_DEV_RING_SLOTS].c : r->cur;
            const uint4 i0 = id[0], i1 = id[1], i2 = id[2], c0 = sr->c[0];
            const uint32_t kind = c0.x & 0xffu, b = (c0.x >> 8) & 0xffu;
            uint32_t depth = 0, dep_class = 0, peer = 0, who = worker;
            uint64_t t_now = 0, t_start = 0, t_end = 0, value = 0, dep_event = 0, comm_gen = 0;
            if (kind == MKS_DEV_REC_TASK) { /* its TASK_ASSIGN */
                const uint4 c3 = sr->c[3];
                t_now = dev_u64(c3.x, c3.y);
                depth = c3.z;
                value = i2.w;
            } else if (kind == MKS_DEV_REC_DONE) {
                const uint4 c1 = sr->c[1];
                t_start = dev_u64(c0.z, c0.w);
                if (ev == MKS_EV_TASK_START) {
                    t_now = t_start;
                    depth = c0.y;
                } else {
                    t_end = dev_u64(c1.x, c1.y);
                    t_now = ev == MKS_EV_TASK_END ? t_end : dev_u64(c1.z, c1.w);
                    if (ev == MKS_EV_DEP_RELEASE) {
                        const uint4 c2 = sr->c[2];
                        dep_class = c0.x >> 16;
                        value = dev_u64(c2.x, c2.y);
                        dep_event = dev_u64(c2.z, c2.w);
                    }
                }
            } else {
                dep_class = c0.x >> 16;
                depth = c0.y;
                t_now = dev_u64(c0.z, c0.w);
                if (b & 1u) {
                    const uint4 c1 = sr->c[1];
                    value = dev_u64(c1.x, c1.y);
                    dep_event = dev_u64(c1.z, c1.w);
                }
                if (b & 2u) {
                    const uint4 c2 = sr->c[2];
                    comm_gen = dev_u64(c2.x, c2.y);
                    peer = c2.z;
                    if (c2.w != 0xffffffffu)
                        who = c2.w;
                }
                if (b & 4u) {
                    const uint4 c3 = sr->c[3];
                    t_start = dev_u64(c3.x, c3.y);
                    t_end = dev_u64(c3.z, c3.w);
                }
            }
            uint4 *cx = (uint4 *)&r->ctx[lane];
            cx[0] = make_uint4(MKS_HOOK_ABI_VERSION | (uint32_t)sizeof(struct mks_hook_ctx) << 16,
                               ev | (i0.x >> 16) << 16, rt->rank, who);
            cx[1] = make_uint4(smid, i0.y, i1.x, i1.y);
            cx[2] = make_uint4(i1.z, i1.w, i2.x, dep_class);
            cx[3] = make_uint4(i2.y, i2.z, mks_dev_lo(dep_event), mks_dev_hi(dep_event));
            cx[4] = make_uint4(mks_dev_lo(comm_gen), mks_dev_hi(comm_gen), peer, depth);
            cx[5] = make_uint4(mks_dev_lo(t_now), mks_dev_hi(t_now), i0.z, i0.w);
            cx[6] = make_uint4(mks_dev_lo(t_start), mks_dev_hi(t_start), mks_dev_lo(value),
                               mks_dev_hi(value));
            cx[7] = make_uint4(mks_dev_lo(t_end), mks_dev_hi(t_end), 0u, 0u);
        }
        /* The next batch's view: the last TASK record run becomes the
         * carried one, a record run in part keeps its place. */
        const uint32_t last = __shfl_sync(MKS_DEV_FULL, raw, E ? E - 1 : 0);
        const uint32_t last_rec = __shfl_sync(MKS_DEV_FULL, rec, E ? E - 1 : 0);
        __syncwarp(); /* every lane's reads of the slots and of cur */
        {
            const uint32_t tdone = tasks & (done >= 32 ? MKS_DEV_FULL : (1u << done) - 1u);
            if (tdone && lane < 3) {
                const uint32_t l = 31 - __clz(tdone);
                r->cur[lane] = r->slot[(tail + l) % MKS_DEV_RING_SLOTS].c[lane];
            }
        }
        skip = E && done < n && last_rec == done ? last + 1 : (done == 0 ? skip : 0u);
        tail += done;
        __syncwarp();
        if (lane == 0)
            *(volatile uint32_t *)&r->tail = tail; /* the slots are free again */

        /* Run: each event lane its event's programs. */
        struct mks_cb_cov cov = {0, 0, 0, 0};
        const uint64_t w_lane = __shfl_sync(MKS_DEV_FULL, word, ev < MKS_EV_COUNT ? ev : 0);
        const uint64_t w = ev < MKS_EV_COUNT ? w_lane : 0;
        if (LANES) {
            if (w)
                mksi_hook_exec_cov(cb, rt->rank, &r->ctx[lane], epoch, w, &cov);
        } else {
            dev_warp_hook_exec(cb, rt->rank, &r->ctx[lane], epoch, w, &cov);
        }
        __syncwarp();
        dev_warp_cov_acc(w ? ev : MKS_EV_COUNT, &cov, lane, &mine);
    }
}

extern "C" __device__ void mks_dev_monitor_warp(const struct mks_dev_rt *rt,
                                                struct mks_dev_ring *r, uint32_t worker)
{
    dev_monitor_warp<0>(rt, r, worker);
}

extern "C" __device__ void mks_dev_monitor_warp_lanes(const struct mks_dev_rt *rt,
                                                      struct mks_dev_ring *r, uint32_t worker)
{
    dev_monitor_warp<1>(rt, r, worker);
}

/* Monitor warps outside the worker's block (mkscope/devhook_gring.cuh). */
#include "gmon.cuh"
