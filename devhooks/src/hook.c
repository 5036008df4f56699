/*
 * One hook run, shared by the CPU backend (runtime.c) and the device
 * (vm.cu): the same code against the control block's layout, which on the
 * GPU is a byte-for-byte device mirror of the shared-memory block.
 *
 *   1. enter the epoch (mksi_hook_enter): announce (epoch << 1 | 1) in the
 *      worker's sequence word, fence, re-read the epoch until both agree, so
 *      the grace period after an epoch flip sees every worker that might
 *      still use the old bank (cb.h);
 *   2. read the hook's program word (acquire): the list to run;
 *   3. mksi_hook_exec: count eligible, apply sampling and the per-epoch
 *      instruction budget (throttled), run each program in the VM against
 *      the bank's maps; a run-time guard failure or a dropped ring record
 *      counts as lost;
 *   4. leave the epoch (release).
 * A device monitor thread enters once for a batch of queued events and
 * re-reads a hook word with acquire only when the hook's generation moved.
 * Coverage counters are per worker and bank, so a worker updates them with
 * plain stores; they are read only after the grace period.
 */
#include "cb.h"
#include "dev.h"
#include "mkscope/vm.h"

#ifdef __CUDACC__
/* vm.cu compiles vm.c into the same translation unit; the device mirror's
 * program slots hold the decoded form (the GPU pump decodes at attach). */
#define MKSI_VM_RUN mksi_vmd_exec
#else
#define MKSI_VM_RUN mks_vm_run
#endif

/* Enter the current epoch on worker w; returns the epoch. */
MKS_DEVFN uint64_t mksi_hook_enter(struct mks_cb *cb, uint32_t w)
{
    struct mks_cb_worker *wk = &mks_cb_workers(cb)[w];
    uint64_t epoch;
    for (;;) {
        epoch = MKS_A_LOAD64(&cb->epoch);
        MKS_A_STORE64(&wk->seq, (epoch << 1) | 1u);
        MKS_FENCE();
        if (MKS_A_LOAD64(&cb->epoch) == epoch)
            return epoch;
    }
}

MKS_DEVFN void mksi_hook_leave(struct mks_cb *cb, uint32_t w, uint64_t epoch)
{
    MKS_A_STORE_REL64(&mks_cb_workers(cb)[w].seq, epoch << 1);
}

/* The first part of a hook run (mksi_hook_exec_cov): count the event
 * eligible and apply sampling and the per-epoch instruction budget; returns
 * 1 when its programs run (throttled counted otherwise). */
MKS_DEVFN int mksi_hook_admit(struct mks_cb *cb, const struct mks_hook_ctx *ctx, uint64_t epoch,
                              uint64_t word, struct mks_cb_cov *cov)
{
    const struct mks_cb_hook *h = &cb->hooks[ctx->event];
    const uint32_t shift = h->sample_shift, bank = (uint32_t)(epoch & 1u);
    cov->eligible++;
    if (shift && (mks_cb_workers(cb)[ctx->worker].sample_ctr[ctx->event]++ & ((1u << shift) - 1u)) != 0) {
        cov->throttled++;
        return 0;
    }
    if (h->insn_budget) {
        uint64_t cost = 0;
        for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
            uint32_t s = mks_cb_word_slot(word, i);
            if (s)
                cost += cb->progs[s - 1].cost ? cb->progs[s - 1].cost : 1;
        }
        if (MKS_A_LOAD64(&h->budget_used[bank]) + cost > h->insn_budget) {
            cov->throttled++;
            return 0;
        }
    }
    return 1;
}

/* The maps a run of ctx's programs sees inside `epoch`. */
MKS_DEVFN void mksi_hook_maps(struct mks_cb *cb, uint32_t rank, const struct mks_hook_ctx *ctx,
                              uint64_t epoch, struct mks_maps *maps)
{
    maps->descs = cb->maps;
    maps->n_descs = MKS_MAX_MAPS;
    maps->bank = (uint32_t)(epoch & 1u);
    maps->arena = mks_cb_arena(cb);
    maps->arena_len = cb->arena_len;
    maps->worker = ctx->worker;
    maps->sm = ctx->sm;
    maps->rank = rank;
    maps->lost = 0;
}

/* The environment of program slot s - 1 for ctx; 0, or -1 when the slot's
 * table entry is out of bounds (the run is lost). */
MKS_DEVFN int mksi_hook_env(struct mks_cb *cb, uint32_t s, struct mks_hook_ctx *ctx,
                            struct mks_maps *maps, struct mks_vm_env *env)
{
    const struct mks_cb_prog *p = &cb->progs[s - 1];
    env->insns = mks_cb_insns(cb, s - 1);
    env->n_insns = p->n_insns;
    env->flags = 0;
    /* Twice the verifier's bound: a program that runs far longer than it
     * was proven to is broken and is stopped, not waited for. */
    env->insn_limit = p->cost ? 2 * p->cost + 64 : MKS_BPF_MAX_INSNS * 64ull;
    env->ctx = ctx;
    env->ctx_len = p->abi_version == 1u ? MKS_HOOK_CTX_V1_SIZE : 0u;
    env->n_maps = p->n_maps;
    env->map_ids = p->map_ids;
    env->maps = maps;
    env->extra.base = 0;
    env->extra.len = 0;
    env->extra.writable = 0;
    return env->n_maps > MKS_MAX_PROG_MAPS || env->n_insns > MKS_BPF_MAX_INSNS ? -1 : 0;
}

/* A CONTROL program's answer r0 as a hint, raising *hint. */
MKS_DEVFN void mksi_hook_hint(const struct mks_cb_prog *p, uint64_t r0, int32_t *hint)
{
    if (p->type == MKS_PROG_CONTROL) {
        int64_t v = (int64_t)r0;
        int32_t c = v < 0 ? 0 : v > MKS_PRIO_HINT_MAX ? MKS_PRIO_HINT_MAX : (int32_t)v;
        if (c > *hint)
            *hint = c;
    }
}

/* The last part: the instructions run against the budget, ran and lost. */
MKS_DEVFN void mksi_hook_done(struct mks_cb *cb, uint32_t ev, uint64_t epoch, uint64_t used_total,
                              uint32_t lost, const struct mks_maps *maps, struct mks_cb_cov *cov)
{
    struct mks_cb_hook *h = &cb->hooks[ev];
    if (used_total && h->insn_budget)
        MKS_A_ADD64(&h->budget_used[epoch & 1u], used_total);
    cov->ran++;
    cov->lost += lost + maps->lost;
}

/* Run the programs of `word` (the hook's program list, read by the caller
 * with acquire semantics or known unchanged since such a read) for ctx on
 * worker ctx->worker inside `epoch`, counting coverage into *cov: the
 * block's counters of the worker, bank and event, or a device worker's
 * private copy that it adds to them before it leaves the epoch. */
MKS_DEVFN int32_t mksi_hook_exec_cov(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx,
                                     uint64_t epoch, uint64_t word, struct mks_cb_cov *cov)
{
    struct mks_maps maps;
    uint64_t used_total = 0;
    int32_t hint = 0;
    uint32_t lost = 0;

    if (!word || !mksi_hook_admit(cb, ctx, epoch, word, cov))
        return 0;
    mksi_hook_maps(cb, rank, ctx, epoch, &maps);
    for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
        uint32_t s = mks_cb_word_slot(word, i);
        struct mks_vm_env env;
        uint64_t r0 = 0, used = 0;
        if (!s)
            continue;
        if (mksi_hook_env(cb, s, ctx, &maps, &env) != 0 ||
            MKSI_VM_RUN(&env, (uint64_t)(uintptr_t)ctx, 0, &r0, &used) != 0) {
            lost = 1;
            used_total += used;
            continue;
        }
        used_total += used;
        mksi_hook_hint(&cb->progs[s - 1], r0, &hint);
    }
    mksi_hook_done(cb, ctx->event, epoch, used_total, lost, &maps, cov);
    return hint;
}

MKS_DEVFN int32_t mksi_hook_exec(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx,
                                 uint64_t epoch, uint64_t word)
{
    if (!word)
        return 0;
    return mksi_hook_exec_cov(cb, rank, ctx, epoch, word,
                              mks_cb_cov(cb, (uint32_t)(epoch & 1u), ctx->worker, ctx->event));
}

MKS_DEVFN int32_t mksi_hook_run(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx)
{
    uint64_t epoch, word;
    int32_t hint;
    ctx->abi_version = MKS_HOOK_ABI_VERSION;
    ctx->size = (uint16_t)sizeof(*ctx);
    if (ctx->event >= MKS_EV_COUNT || ctx->worker >= cb->n_workers)
        return 0;
    epoch = mksi_hook_enter(cb, ctx->worker);
    word = MKS_A_LOAD_ACQ64(&cb->hooks[ctx->event].progs);
    hint = word ? mksi_hook_exec(cb, rank, ctx, epoch, word) : 0;
    mksi_hook_leave(cb, ctx->worker, epoch);
    return hint;
}

/* Events a worker could not hand to its monitor (full queue): eligible and
 * lost, so coverage says what the programs did not see. */
MKS_DEVFN void mksi_hook_lost(struct mks_cb *cb, uint32_t worker, uint32_t ev, uint32_t n)
{
    struct mks_cb_cov *cov;
    uint64_t epoch;
    if (ev >= MKS_EV_COUNT || worker >= cb->n_workers || n == 0)
        return;
    epoch = mksi_hook_enter(cb, worker);
    cov = mks_cb_cov(cb, (uint32_t)(epoch & 1u), worker, ev);
    cov->eligible += n;
    cov->lost += n;
    mksi_hook_leave(cb, worker, epoch);
}
